/*
 * cluster.h — the cluster spec: who is in the cluster and who this process is.
 *
 * A cluster is described the way TensorFlow describes it: named jobs, each a
 * list of "host:port" addresses indexed from 0, and this process's task, a
 * (job, index) pair. Every distributed feature starts from a resolved,
 * validated `struct dt_cluster`. It comes from TF_CONFIG (tf_config.c), from
 * the low-level flags --ps_hosts/--worker_hosts/--job_name/--task_index,
 * from a Slurm step or an Open MPI launch, or is the local single process;
 * resolve.h picks the source and is what commands call.
 *
 * Invariants of a cluster returned by a successful parse or resolve:
 *   - job names are the five TensorFlow knows (enum dt_job); at most one of
 *     `chief` and `master` is present and it has exactly one task;
 *   - every address parses as host:port with a port in 1-65535 and no two
 *     tasks share an address;
 *   - `task` names a task that is listed in the cluster, except that an
 *     evaluator need not be listed, and that a local process (no jobs at
 *     all) is worker:0;
 *   - the derived fields (chief, is_chief, replica counts, global id, master,
 *     peers) are filled as TensorFlow's RunConfig derives them.
 *
 * The struct is transparent: read its fields directly. It owns its strings
 * and arrays; dt_cluster_release() frees them and leaves an empty cluster.
 *
 * Derived facts, as TensorFlow's RunConfig computes them:
 *   - chief: master:0 if there is a `master` job, else chief:0, else
 *     worker:0 (TensorFlow's between-graph convention, seed 003);
 *   - num_worker_replicas = tasks in worker + chief + master; num_ps_replicas
 *     = tasks in ps (an evaluator is not part of the training cluster);
 *   - global id: the chief's job first (chief 0), then the other jobs in
 *     alphabetical order (evaluator before worker), ps last; id = offset of
 *     the job + index. An evaluator task has none (-1), as in RunConfig;
 *   - trainer index: the same order over the trainer jobs only (chief,
 *     master, worker), so 0 .. num_worker_replicas-1 whether or not an
 *     evaluator is listed (ours; TensorFlow has no name for it);
 *   - master (the session target): TF_CONFIG's session_master if given; ""
 *     when the whole cluster is one task; else "<rpc_layer>://<address>"
 *     with rpc_layer defaulting to "grpc" (RunConfig's "grpc://" prefix);
 *   - peers, the tasks this task exchanges messages with (TensorFlow's
 *     default device filters): with a ps job, chief/master/workers talk only
 *     to the ps tasks and a ps talks to chief/master/workers; without one,
 *     every trainer talks to every other trainer (all-reduce); an evaluator
 *     talks to nobody (it reads checkpoints).
 */
#ifndef DT_CLUSTER_CLUSTER_H
#define DT_CLUSTER_CLUSTER_H

#include <stddef.h>
#include "base/err.h"

/* The jobs TensorFlow knows, in alphabetical order (global ids and Slurm's
 * rank assignment walk them in this order). */
#define DT_JOB_MAP(X) \
	X(CHIEF, "chief") \
	X(EVALUATOR, "evaluator") \
	X(MASTER, "master") \
	X(PS, "ps") \
	X(WORKER, "worker")

enum dt_job {
#define DT__JOB_ENUM(name, text) DT_JOB_##name,
	DT_JOB_MAP(DT__JOB_ENUM)
#undef DT__JOB_ENUM
	DT_JOB_COUNT,
	DT_JOB_NONE = -1, /* "not set" (a task type TF_CONFIG left out) */
};

/* Where a cluster came from, in resolve order (flags win). */
enum dt_cluster_source {
	DT_SOURCE_FLAGS,     /* --ps_hosts/--worker_hosts/--job_name/--task_index */
	DT_SOURCE_TF_CONFIG, /* the TF_CONFIG environment variable */
	DT_SOURCE_SLURM,     /* SLURM_* of an srun step */
	DT_SOURCE_MPI,       /* OMPI_COMM_WORLD_* of an mpirun launch */
	DT_SOURCE_LOCAL,     /* nothing given: one local process, worker:0 */
	DT_SOURCE_COUNT,
};

/* Largest task index and tasks per job we accept (a typo guard, and the
 * bound that keeps sparse job dicts from allocating without limit). */
#define DT_CLUSTER_MAX_TASKS 65536

struct dt_task_ref {
	enum dt_job job;
	int index;
};

struct dt_cluster_job {
	int slots;    /* highest index + 1; 0 when the job is absent */
	int present;  /* tasks with an address (== slots unless sparse) */
	char **addrs; /* [slots] "host:port"; NULL at holes of a sparse dict */
};

struct dt_cluster {
	struct dt_cluster_job jobs[DT_JOB_COUNT]; /* indexed by enum dt_job */
	struct dt_task_ref task;                  /* this process */

	/* Optional TF_CONFIG keys, NULL when absent (owned). */
	char *rpc_layer;           /* "grpc": scheme of the session target */
	char *session_master;      /* overrides the derived master */
	char *eval_session_master; /* the evaluator's master */
	char *environment;         /* "cloud" (t2t, Kubeflow) is accepted and ignored */
	char *model_dir;           /* RunConfig: must equal the command line's model dir (train checks) */

	/* Derived by dt_cluster_validate(). */
	struct dt_task_ref chief; /* master:0, chief:0 or worker:0 */
	int is_chief;             /* task == chief */
	int num_worker_replicas;  /* worker + chief + master tasks */
	int num_ps_replicas;      /* ps tasks */
	int global_id;            /* chief 0 ... ps last; -1 for an evaluator */
	int trainer_index;        /* chief 0, then the other trainers as global_id orders them (an
				   * evaluator does not count); -1 for ps and evaluator tasks. The
				   * data shard of a trainer, and t2t's --worker_id */
	char *master;             /* session target, "" when one task (owned) */
	struct dt_task_ref *peers; /* [npeers], see the header comment (owned) */
	int npeers;

	/* Provenance, filled by the resolver. */
	enum dt_cluster_source source;
	char source_detail[160];  /* "Slurm rank 2 of 3, job 12 step 0"; "" when the name says it all */
	unsigned shadowed;        /* bit (1u << source) for each lower-precedence source also present */
};

/* "chief", "worker"...; "none" for DT_JOB_NONE; never NULL. */
const char *dt_job_name(enum dt_job job);
/* Exact job name to enum; DT_JOB_NONE when unknown. */
enum dt_job dt_job_parse(const char *name);
/* The known job name nearest to `name` (for "did you mean"), or NULL. */
const char *dt_job_nearest(const char *name);
/* "flags", "TF_CONFIG", "slurm", "mpi", "local". */
const char *dt_cluster_source_name(enum dt_cluster_source src);

/* An empty cluster: no jobs, task DT_JOB_NONE/-1, source local. */
void dt_cluster_init(struct dt_cluster *cl);
/* Frees everything the cluster owns and re-inits it; accepts NULL. */
void dt_cluster_release(struct dt_cluster *cl);

/* Adds the address of task job:index (copied). Fails with DT_CONFIG when the
 * index is negative or above DT_CLUSTER_MAX_TASKS, when the address is not
 * host:port (see dt_hostport_check), or when the slot is already taken.
 * `what` names the origin in messages ("TF_CONFIG", "--ps_hosts"). */
enum dt_status dt_cluster_add(struct dt_cluster *cl, enum dt_job job, int index, const char *addr,
			      const char *what, struct dt_err *err) DT_MUST_CHECK;

/* Address of job:index, or NULL when absent. */
const char *dt_cluster_address(const struct dt_cluster *cl, enum dt_job job, int index);
/* True when the cluster lists no task at all (local mode). */
int dt_cluster_is_local(const struct dt_cluster *cl);

/* This process's task as a source gave it, before validation. */
struct dt_task_given {
	const char *type; /* job name as given, NULL when not given */
	int has_index;    /* 0 when not given */
	long long index;  /* may be negative or huge: validation says so */
};

/* Applies TensorFlow's rules to the jobs and the given task, in RunConfig's
 * order and with its wording (users search for those messages), plus ours
 * (no trainer at all, duplicate addresses), then sets `cl->task` and fills
 * the derived fields. A cluster with no jobs is local mode: the task
 * defaults to worker:0 and must be that. Messages end with the parsed
 * cluster and a "hint:" line that says how to fix it, worded for
 * `cl->source` (TF_CONFIG keys or flags). Returns DT_CONFIG on failure. */
enum dt_status dt_cluster_validate(struct dt_cluster *cl, const struct dt_task_given *given,
				   struct dt_err *err) DT_MUST_CHECK;

/* Checks one "host:port" address: non-empty; host a name or IPv4 address
 * of [A-Za-z0-9._-] or a bracketed IPv6 address "[::1]"; port 1-65535 in
 * decimal. `who` names the task in messages ("worker:1"). DT_CONFIG on
 * failure. */
enum dt_status dt_hostport_check(const char *addr, const char *who, struct dt_err *err) DT_MUST_CHECK;

/* Writes the jobs as indented lines "  <job>  <addr>, <addr>" into buf
 * (at most `max_per_job` addresses each, then "... (N more)"); "  (no jobs:
 * one local process)" for a local cluster. Always NUL-terminates. */
void dt_cluster_format_jobs(const struct dt_cluster *cl, char *buf, size_t cap, int max_per_job);

/* Writes "worker:1" into buf. */
char *dt_task_ref_format(struct dt_task_ref t, char *buf, size_t cap);

/* True when a and b list the same jobs, addresses and task (provenance and
 * the optional TF_CONFIG keys other than rpc_layer are not compared). */
int dt_cluster_same(const struct dt_cluster *a, const struct dt_cluster *b);

/* Parses and validates a TF_CONFIG text of `len` bytes (need not be NUL
 * terminated) into `out` (initialised here; release it even on failure).
 * Accepts what TensorFlow accepts: job lists or sparse {"index": "address"}
 * dicts, integer or string indices, rpc_layer, session_master,
 * eval_session_master, model_dir, service, environment. Rejects unknown
 * top-level, task and job keys, malformed JSON (with line and column), and
 * everything dt_cluster_validate rejects. Source is DT_SOURCE_TF_CONFIG. */
enum dt_status dt_tf_config_parse(const char *text, size_t len, struct dt_cluster *out,
				  struct dt_err *err) DT_MUST_CHECK;

#endif
