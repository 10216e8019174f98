/*
 * tasks.h — from a spec to the tasks of a cluster: their names, TF_CONFIG,
 * command lines and environment. Shared by the local launcher (run.c) and
 * the emitters (emit.c), so that what Kubernetes and Slurm run is what
 * `dtrain launch` runs, addresses aside.
 *
 * Layout, in start order (the ps first, so trainers find them listening):
 *   ps:0..P-1, chief:0, worker:0..W-2, evaluator:0
 * The spec's `worker` count includes the chief (RiseML's master). Mirrored
 * mode has no ps. The cluster of every TF_CONFIG lists every training
 * task in the key order chief, worker, ps; the evaluator is left out, as
 * TensorFlow's RunConfig and the training operator leave it (its own
 * TF_CONFIG names it in "task" only); the text is compact JSON with ", "
 * and ": " separators (t2t's json.dumps), with "environment": "cloud" as
 * Kubeflow writes it.
 */
#ifndef DT_LAUNCH_TASKS_H
#define DT_LAUNCH_TASKS_H

#include "base/err.h"
#include "cluster/cluster.h"
#include "launch/spec.h"

#define DT_LAUNCH_MAX_TASKS 130

struct dt_launch_task {
	struct dt_task_ref ref;
	enum dt_launch_group group;
	char name[32]; /* "chief", "worker.0", "ps.1", "evaluator" */
};

/* Fills `tasks` (capacity DT_LAUNCH_MAX_TASKS) in start order; returns the count. */
int dt_launch_tasks(const struct dt_launch_spec *s, struct dt_launch_task *tasks);

/* TF_CONFIG of tasks[self]; addrs[i] is the address of tasks[i]
 * ("127.0.0.1:41000", "exp-ps-0:2222"). Owned by the caller (free()). */
char *dt_launch_tf_config(const struct dt_launch_task *tasks, int ntasks, const char *const *addrs, int self);

/* The command line of a task, NULL-terminated, owned by the caller
 * (dt_launch_argv_free): `bin train <flags>` for the default command, the
 * spec's command otherwise (/bin/sh -c LINE for a shell line). `bin` is the
 * dtrain binary ("dtrain" in manifests, /proc/self/exe's target locally);
 * `output_dir` becomes --output_dir when the train command is built. */
char **dt_launch_argv(const struct dt_launch_spec *s, const struct dt_launch_task *t, const char *bin,
		      const char *output_dir, int *argc);
void dt_launch_argv_free(char **argv);

/* A task's name prefixed with the experiment id: "7.worker.1". */
void dt_launch_task_label(char *buf, size_t cap, const char *exp_id, const struct dt_launch_task *t);

#endif
