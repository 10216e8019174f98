/*
 * resolve.h — find out who is in the cluster and who this process is.
 *
 * What a command calls: it declares a `struct dt_cluster_flags`, splices
 * DT_CLUSTER_OPTIONS(&flags) into its option table, parses argv, then calls
 * dt_cluster_resolve(), which reads the environment and returns a validated
 * cluster (cluster.h) or DT_CONFIG with a message that says what is wrong and
 * how to fix it:
 *
 *     struct dt_cluster_flags cf;
 *     dt_cluster_flags_init(&cf);
 *     struct dt_option opts[] = {
 *         DT_OPT_GROUP("Training"), ...,
 *         DT_CLUSTER_OPTIONS(&cf),
 *         DT_OPT_END,
 *     };
 *     ... dt_cmd_parse(opts, argc, argv, ...) ...
 *     struct dt_cluster cl;
 *     if (dt_cluster_resolve(&cf, opts, &cl, &err) != DT_OK) { ...report, exit 2... }
 *     ... cl.task, cl.chief, cl.is_chief, cl.peers ...
 *     dt_cluster_release(&cl);
 *
 * Sources, first found wins (the others are recorded in cl.shadowed):
 *   1. flags: --ps_hosts and/or --worker_hosts (with --job_name, --task_index),
 *      TensorFlow's low-level between-graph form (seed 003);
 *   2. TF_CONFIG (non-empty), read as TensorFlow reads it (tf_config.c);
 *      --job_name/--task_index fill a task TF_CONFIG leaves out and must
 *      agree with one it gives;
 *   3. Slurm: SLURM_PROCID is set (an srun step). Ranks get jobs as
 *      TensorFlow's SlurmClusterResolver gives them: --ps_replicas ps tasks
 *      and the rest workers, jobs in name order (ps ranks first), tasks
 *      listed by sorted host name, ports --port_base + local index;
 *   4. Open MPI: OMPI_COMM_WORLD_RANK is set; one node only (MPI does not
 *      tell a rank where the others run), addresses 127.0.0.1:port_base+rank,
 *      jobs as for Slurm;
 *   5. local: one process, worker:0, the chief.
 *
 * Then t2t's flags are cross-checked against the cluster: --ps_replicas,
 * --worker_replicas, --worker_id, --master, --sync, --schedule and
 * --worker_job must agree with it when they are given; a contradiction is
 * DT_CONFIG naming the flag and the key that disagree. A flag counts as
 * given when the command line set it (`was_set` in `opts`) or its value
 * differs from the default of dt_cluster_flags_init().
 */
#ifndef DT_CLUSTER_RESOLVE_H
#define DT_CLUSTER_RESOLVE_H

#include "base/err.h"
#include "base/options.h"
#include "cluster/cluster.h"

struct dt_cluster_flags {
	/* TensorFlow's low-level flags (seed 003). */
	const char *ps_hosts;     /* "host:port,host:port"; "" = none */
	const char *worker_hosts; /* "host:port,..."; worker 0 is the chief */
	const char *job_name;     /* "ps", "worker"; "" = not given */
	int task_index;           /* 0 */
	/* t2t-trainer's distribution flags (tf-config-and-t2t.md §1.5). */
	const char *master;       /* "grpc://host:port", this task's session target; "" */
	int ps_replicas;          /* 0; also the number of ps ranks under Slurm/MPI */
	int worker_replicas;      /* 1: chief/master + workers */
	int worker_id;            /* 0: global trainer index (chief 0, worker i is i+1) */
	int worker_gpu;           /* 1: GPUs per worker */
	int ps_gpu;               /* 0: GPUs per ps */
	int sync;                 /* 0: t2t's "sync compute on the ps" */
	const char *schedule;     /* "continuous_train_and_eval"; run_std_server for ps */
	const char *worker_job;   /* "/job:localhost"; "/job:<task type>" in a cluster */
	/* Ours, for clusters that Slurm and MPI start. */
	int port_base;            /* 8888 (SlurmClusterResolver's default) */
};

/* Fills the defaults (t2t's, where t2t has the flag). */
void dt_cluster_flags_init(struct dt_cluster_flags *f);

/* The option-table entries for every field above, under a "Cluster"
 * heading, comma-separated: splice into a command's table. */
#define DT_CLUSTER_OPTIONS(f)                                                                              \
	DT_OPT_GROUP("Cluster"),                                                                          \
	DT_OPT_STRING("ps_hosts", &(f)->ps_hosts, "HOST:PORT,...", "parameter servers (TensorFlow's low-level flags)"), \
	DT_OPT_STRING("worker_hosts", &(f)->worker_hosts, "HOST:PORT,...", "workers; worker 0 is the chief"),  \
	DT_OPT_STRING("job_name", &(f)->job_name, "JOB", "this task's job: ps, worker (or chief, evaluator)"), \
	DT_OPT_INT("task_index", &(f)->task_index, "N", "this task's index within its job"),             \
	DT_OPT_STRING("master", &(f)->master, "grpc://HOST:PORT", "t2t: this task's session target (checked)"), \
	DT_OPT_INT("ps_replicas", &(f)->ps_replicas, "N", "t2t: ps tasks (checked; ps ranks under Slurm/MPI)"), \
	DT_OPT_INT("worker_replicas", &(f)->worker_replicas, "N", "t2t: chief/master + worker tasks (checked)"), \
	DT_OPT_INT("worker_id", &(f)->worker_id, "N", "t2t: trainer index, chief 0, worker i is i+1 (checked)"), \
	DT_OPT_INT("worker_gpu", &(f)->worker_gpu, "N", "t2t: GPUs per worker"),                          \
	DT_OPT_INT("ps_gpu", &(f)->ps_gpu, "N", "t2t: GPUs per parameter server"),                         \
	DT_OPT_BOOL("sync", &(f)->sync, "t2t: synchronous training, computing on the ps tasks (checked)"), \
	DT_OPT_STRING("schedule", &(f)->schedule, "NAME", "t2t: train, continuous_eval, run_std_server, ... (checked)"), \
	DT_OPT_STRING("worker_job", &(f)->worker_job, "/job:NAME", "t2t: this trainer's job (checked)"),     \
	DT_OPT_INT("port_base", &(f)->port_base, "PORT", "first port of the tasks Slurm or MPI starts")

/* Resolves the cluster from the flags and this process's environment (see
 * the header comment). `opts` is the option table the flags were parsed
 * with, for `was_set`; it may be NULL. `out` is initialised here; release it
 * with dt_cluster_release() whatever the result. DT_CONFIG on any problem. */
enum dt_status dt_cluster_resolve(const struct dt_cluster_flags *flags, const struct dt_option *opts,
				  struct dt_cluster *out, struct dt_err *err) DT_MUST_CHECK;

/* The same with the environment given as an environ-style NULL-terminated
 * array of "NAME=value" strings (NULL: empty), for tests and launchers. */
enum dt_status dt_cluster_resolve_env(const struct dt_cluster_flags *flags, const struct dt_option *opts,
				      const char *const *envp, struct dt_cluster *out,
				      struct dt_err *err) DT_MUST_CHECK;

/* Cross-checks t2t's flags against a validated cluster (part of resolve;
 * exposed for commands that build the cluster themselves). */
enum dt_status dt_cluster_check_flags(const struct dt_cluster_flags *flags, const struct dt_option *opts,
				      const struct dt_cluster *cl, struct dt_err *err) DT_MUST_CHECK;

/* True when `name` is one of t2t's schedules (T2TExperiment methods). */
int dt_schedule_known(const char *name);

#endif
