/*
 * internal.h — what the files of src/cluster/ share with each other and
 * nobody else (dt__ names). Not installed, not for other layers.
 */
#ifndef DT_CLUSTER_INTERNAL_H
#define DT_CLUSTER_INTERNAL_H

#include <stddef.h>
#include "cluster/cluster.h"
#include "cluster/resolve.h"

/* Appends formatted text to err->msg, truncating at the cap. */
void dt__err_append(struct dt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The value of `name` in an environ-style NULL-terminated "K=V" array, or
 * NULL when absent (envp may be NULL). */
const char *dt__env_get(const char *const *envp, const char *name);
/* Parses an environment variable's integer value in [min, max]; a bad value
 * is DT_CONFIG naming the variable. */
enum dt_status dt__env_parse_int(const char *var, const char *value, long long min, long long max, int *out,
				 struct dt_err *err) DT_MUST_CHECK;

/* The task TF_CONFIG gave, before validation; `given.type` points into
 * `type` (or is NULL). */
struct dt__tf_task {
	struct dt_task_given given;
	char type[128];
};

/* Reads TF_CONFIG's JSON into the jobs and optional keys of `out` (which the
 * caller initialised) and the raw task into `task`, checking syntax, types,
 * key names and addresses but not TensorFlow's cross-task rules (those are
 * dt_cluster_validate's). */
enum dt_status dt__tf_config_read(const char *text, size_t len, struct dt_cluster *out, struct dt__tf_task *task,
				  struct dt_err *err) DT_MUST_CHECK;

/* A rank layout for engines that number processes (Slurm, MPI): `counts`
 * tasks per job, given to ranks in job-name order as TensorFlow's
 * SlurmClusterResolver does. */
struct dt__rank_layout {
	int counts[DT_JOB_COUNT];
};

/* Fills `out` (initialised by the caller) from the task addresses `addrs`
 * (in rank order) and the layout, and sets `task` to the job and index of
 * `rank`. Fails when the layout asks for more tasks than there are. */
enum dt_status dt__cluster_from_ranks(struct dt_cluster *out, const struct dt__rank_layout *layout,
				      char *const *addrs, int ntasks, int rank, const char *what,
				      struct dt_task_given *task, struct dt_err *err) DT_MUST_CHECK;

/* Builds the cluster of a Slurm step from SLURM_* in envp: `ps_tasks` ps
 * ranks and the rest workers, ports from `port_base`. `*found` tells whether
 * SLURM_PROCID is set at all (when it is not, nothing else is checked and
 * DT_OK is returned). */
enum dt_status dt__slurm_read(const char *const *envp, int ps_tasks, int port_base, struct dt_cluster *out, struct dt_task_given *task, int *found,
			      struct dt_err *err) DT_MUST_CHECK;

/* The same for Open MPI from OMPI_COMM_WORLD_*. */
enum dt_status dt__mpi_read(const char *const *envp, int ps_tasks, int port_base, struct dt_cluster *out,
			    struct dt_task_given *task, int *found, struct dt_err *err) DT_MUST_CHECK;

/* True when a flag was given: set on the command line (`was_set` of
 * `name` in opts, which may be NULL) or `differs` from its default. */
int dt__flag_given(const struct dt_option *opts, const char *name, int differs);

/* Range checks of the flags that need no cluster (indices, counts, ports,
 * the schedule name). DT_USAGE on failure. */
enum dt_status dt__flags_check_ranges(const struct dt_cluster_flags *f, struct dt_err *err) DT_MUST_CHECK;

/* Seed 003's form: the jobs from --ps_hosts/--worker_hosts, the task from
 * --job_name/--task_index. */
enum dt_status dt__cluster_from_flags(const struct dt_cluster_flags *f, struct dt_cluster *out,
				      struct dt_task_given *task, struct dt_err *err) DT_MUST_CHECK;

/* Lets --job_name/--task_index fill a task the source left out, and fails
 * when they contradict one it gave. `task->type` may end up pointing at
 * f->job_name. */
enum dt_status dt__flags_merge_task(const struct dt_cluster_flags *f, const struct dt_option *opts,
				    const struct dt_cluster *cl, struct dt_task_given *task,
				    struct dt_err *err) DT_MUST_CHECK;

#endif
