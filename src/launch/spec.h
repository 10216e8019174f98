/*
 * spec.h — the experiment spec of `dtrain launch`: what to run, how many
 * tasks of each job, their resources, where they write, and what to do
 * when one fails. Written in YAML (parsed with libyaml) in the spirit of
 * RiseML's experiment files (seed 001); docs/LAUNCH.md is the user's page.
 *
 *     name: fashion-mnist              # [a-z][a-z0-9-]*, at most 40 characters
 *     model: cnn                        # default command: dtrain train --model=...
 *     problem: fashion_mnist
 *     hparams: "learning_rate=0.05"
 *     hparams_set: cnn_base
 *     train_steps: 1000
 *     args: [--log_every=100]           # more dtrain train flags, appended
 *     command: "sh line" | [argv...]    # instead of model/...: run this (see below)
 *     distributed: {mode: async, worker: 2, ps: 1, evaluator: 1, nodes: 2}
 *     resources: {cpus: 1, mem: 2G, ps: {cpus: 1, mem: 512M}}
 *     output_dir: out/fashion-mnist
 *     restart_policy: OnFailure         # Never | OnFailure | ExitCode
 *     backoff_limit: 3
 *     grace_period: 10                  # seconds between SIGTERM and SIGKILL
 *     evaluator_timeout: 300            # seconds the evaluator may go on after training
 *     image: dtrain:latest              # container image for --emit=k8s
 *     namespace: ml                     # Kubernetes namespace for --emit=k8s/tfjob
 *     output_claim: shared-out          # an existing PersistentVolumeClaim for the output dir
 *
 * Seed 001's own file (`project:`, `train: {framework, resources,
 * tensorflow.distributed, run}`) is read into the same struct
 * (spec_riseml.c says how each key maps). Either form may have
 * `parameters:` and "{{ name }}" templates in any string value (params.h):
 * the spec is then a sweep; its fields are trial 1's, and
 * dt_launch_spec_trial re-reads the text with another trial's values.
 *
 * Invariants of a parsed spec (dt_launch_spec_parse checks them all):
 *   - exactly one of `command` and the dtrain-train keys says what runs;
 *   - worker >= 1 (it counts the chief, as RiseML's count includes the
 *     master), ps >= 0, evaluator 0 or 1; async and sync need ps >= 1,
 *     mirrored needs ps == 0;
 *   - every resource value is positive; unknown keys are errors.
 * Errors are DT_CONFIG (exit 2) and start with "<file>:<line>:<column>: ".
 *
 * The struct is transparent and owns its strings (dt_launch_spec_release).
 */
#ifndef DT_LAUNCH_SPEC_H
#define DT_LAUNCH_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "launch/params.h"

enum dt_launch_mode {
	DT_LAUNCH_ASYNC,    /* parameter servers, each push applied on arrival */
	DT_LAUNCH_SYNC,     /* parameter servers, gradients aggregated per step (--sync) */
	DT_LAUNCH_MIRRORED, /* no ps: ring all-reduce between the trainers */
};

enum dt_restart_policy {
	DT_RESTART_NEVER,      /* a task that ends stays ended */
	DT_RESTART_ON_FAILURE, /* any non-zero end is restarted */
	DT_RESTART_EXIT_CODE,  /* Kubeflow's: signals and exit 3, 130, 137, 138, 143 restart */
};

/* Resource groups: the trainers (chief and workers), the ps, the evaluator. */
enum dt_launch_group { DT_GROUP_WORKER, DT_GROUP_PS, DT_GROUP_EVALUATOR, DT_GROUP_COUNT };

struct dt_launch_resources {
	int cpus;          /* 0: not limited; else --threads and CPU affinity */
	int64_t mem_bytes; /* 0: not limited; else a memory limit (run.c says how) */
	int gpus;          /* RiseML's `gpus`: asked for, not enforced (the tasks run on CPUs) */
};

struct dt_launch_spec {
	char *path;        /* the spec file ("<flags>" for the flags form) */
	char *name;

	/* What runs: the default is dtrain train with these ... */
	char *model, *problem, *hparams, *hparams_set;
	int64_t train_steps; /* 0: dtrain train's default */
	char **args;         /* [nargs] more flags for dtrain train */
	int nargs;
	/* ... or an explicit command: argv, or one shell line (shell = 1: run
	 * as /bin/sh -c LINE). Environment as for dtrain, plus DTRAIN (the
	 * dtrain binary), TASK_TYPE and TASK_INDEX. */
	char **command;
	int ncommand;
	int shell;

	enum dt_launch_mode mode;
	int workers, ps, evaluators; /* workers counts the chief; ps defaults to 1 (0 when mirrored) */

	struct dt_launch_resources res[DT_GROUP_COUNT];
	char *output_dir;            /* NULL: <experiment dir>/output */
	enum dt_restart_policy restart;
	int backoff_limit;           /* restarts allowed for the whole experiment */
	double grace_s;              /* SIGTERM → SIGKILL */
	double evaluator_timeout_s;  /* evaluator's time after the trainers end */
	char *image;                 /* --emit=k8s */
	char *k8s_namespace;         /* --emit=k8s/tfjob; NULL: "default" */
	char *output_claim;          /* an existing PVC; NULL: the manifests create "<name>-output" */
	int nodes;                   /* machines the tasks spread over under --emit=slurm (default 1) */

	/* Seed 001's RiseML form (`project:`, `train:`): what it said that
	 * dtrain keeps only to show (framework is always tensorflow). */
	char *tf_version;            /* train.tensorflow.version, or NULL */

	/* A sweep (params.h): NULL without `parameters:`. The fields above
	 * are then trial 1's; dt_launch_spec_trial gives any trial's. */
	struct dt_launch_sweep *sweep;
	/* In a trial's spec: its number (1..ntrials; 0 in a plain spec) and
	 * values (NULL-ended, in the sweep's order). */
	int64_t trial;
	char **trial_values;
};

#define DT_LAUNCH_MAX_NODES 64

void dt_launch_spec_init(struct dt_launch_spec *s);
void dt_launch_spec_release(struct dt_launch_spec *s);

/* Parses `len` bytes of YAML; `path` names the file in messages. `out` is
 * initialised here; release it whatever the result. */
enum dt_status dt_launch_spec_parse(const char *text, size_t len, const char *path, struct dt_launch_spec *out,
				    struct dt_err *err) DT_MUST_CHECK;
/* The spec of trial k (1..sweep->ntrials) of a sweep `s`: its text
 * re-read with the trial's values in the templates. `out` is initialised
 * here; release it whatever the result. */
enum dt_status dt_launch_spec_trial(const struct dt_launch_spec *s, int64_t k, struct dt_launch_spec *out,
				    struct dt_err *err) DT_MUST_CHECK;
/* Reads and parses a file. */
enum dt_status dt_launch_spec_load(const char *path, struct dt_launch_spec *out, struct dt_err *err) DT_MUST_CHECK;
/* The cross-key checks (also for specs built from flags). */
enum dt_status dt_launch_spec_check(const struct dt_launch_spec *s, struct dt_err *err) DT_MUST_CHECK;

const char *dt_launch_mode_name(enum dt_launch_mode m);
const char *dt_restart_policy_name(enum dt_restart_policy p);
/* "2G", "512M", "1024" (MiB, RiseML's unit), "1Gi": bytes; DT_CONFIG when not. */
enum dt_status dt_launch_parse_mem(const char *text, int64_t *out, struct dt_err *err) DT_MUST_CHECK;
/* Whether a task that ended with `code` (exit code, or 128 + signal when
 * `signaled`) is restarted under `policy` (backoff aside). */
int dt_launch_should_restart(enum dt_restart_policy policy, int code, int signaled);

#endif
