/*
 * resolve.c — picks the cluster's source in precedence order (flags,
 * TF_CONFIG, Slurm, MPI, local), builds and validates the cluster, then
 * cross-checks t2t's flags against it. See resolve.h.
 */
#include "cluster/resolve.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/strutil.h"
#include "cluster/internal.h"

const char *dt__env_get(const char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

enum dt_status dt__env_parse_int(const char *var, const char *value, long long min, long long max, int *out,
				 struct dt_err *err)
{
	int64_t x;
	if (dt_parse_i64(value, min, max, &x, var, err) != DT_OK) {
		if (err)
			err->status = DT_CONFIG;
		return DT_CONFIG;
	}
	*out = (int)x;
	return DT_OK;
}

enum dt_status dt__cluster_from_ranks(struct dt_cluster *out, const struct dt__rank_layout *layout,
				      char *const *addrs, int ntasks, int rank, const char *what,
				      struct dt_task_given *task, struct dt_err *err)
{
	int total = 0;
	for (int j = 0; j < DT_JOB_COUNT; j++)
		total += layout->counts[j];
	if (total > ntasks)
		return dt_err_set(err, DT_CONFIG, "Requested %d tasks but only %d were assigned.", total, ntasks);
	int offset = 0;
	for (int j = 0; j < DT_JOB_COUNT; j++) {
		for (int i = 0; i < layout->counts[j]; i++) {
			enum dt_status st = dt_cluster_add(out, (enum dt_job)j, i, addrs[offset + i], what, err);
			if (st)
				return st;
		}
		if (rank >= offset && rank < offset + layout->counts[j]) {
			task->type = dt_job_name((enum dt_job)j);
			task->has_index = 1;
			task->index = rank - offset;
		}
		offset += layout->counts[j];
	}
	if (rank >= offset)
		return dt_err_set(err, DT_CONFIG, "%s rank %d has no task: the layout has %d", what, rank, offset);
	return DT_OK;
}

enum dt_status dt_cluster_resolve_env(const struct dt_cluster_flags *flags, const struct dt_option *opts,
				      const char *const *envp, struct dt_cluster *out, struct dt_err *err)
{
	dt_cluster_init(out);
	struct dt_cluster_flags defaults;
	if (!flags) {
		dt_cluster_flags_init(&defaults);
		flags = &defaults;
	}
	enum dt_status st = dt__flags_check_ranges(flags, err);
	if (st)
		return st;

	const char *tf = dt__env_get(envp, "TF_CONFIG");
	int present[DT_SOURCE_COUNT] = { 0 };
	present[DT_SOURCE_FLAGS] = (flags->ps_hosts && *flags->ps_hosts) || (flags->worker_hosts && *flags->worker_hosts);
	present[DT_SOURCE_TF_CONFIG] = tf && *tf; /* RunConfig: os.environ.get('TF_CONFIG') or '{}' */
	present[DT_SOURCE_SLURM] = dt__env_get(envp, "SLURM_PROCID") != NULL;
	present[DT_SOURCE_MPI] = dt__env_get(envp, "OMPI_COMM_WORLD_RANK") != NULL;
	present[DT_SOURCE_LOCAL] = 1;
	enum dt_cluster_source src = DT_SOURCE_LOCAL;
	for (int s = DT_SOURCE_COUNT - 1; s >= 0; s--)
		if (present[s])
			src = (enum dt_cluster_source)s;
	for (int s = src + 1; s < DT_SOURCE_LOCAL; s++)
		if (present[s])
			out->shadowed |= 1u << s;
	out->source = src;

	struct dt_task_given task = { NULL, 0, 0 };
	struct dt__tf_task tft;
	int found = 0;
	int ps_tasks = flags->ps_replicas;
	switch (src) {
	case DT_SOURCE_FLAGS:
		st = dt__cluster_from_flags(flags, out, &task, err);
		break;
	case DT_SOURCE_TF_CONFIG:
		st = dt__tf_config_read(tf, strlen(tf), out, &tft, err);
		task = tft.given;
		if (!st)
			st = dt__flags_merge_task(flags, opts, out, &task, err);
		break;
	case DT_SOURCE_SLURM:
		st = dt__slurm_read(envp, ps_tasks, flags->port_base, out, &task, &found, err);
		if (!st)
			st = dt__flags_merge_task(flags, opts, out, &task, err);
		break;
	case DT_SOURCE_MPI:
		st = dt__mpi_read(envp, ps_tasks, flags->port_base, out, &task, &found, err);
		if (!st)
			st = dt__flags_merge_task(flags, opts, out, &task, err);
		break;
	case DT_SOURCE_LOCAL:
	case DT_SOURCE_COUNT:
		if ((flags->job_name && *flags->job_name && strcmp(flags->job_name, "worker") != 0) || flags->task_index != 0) {
			st = dt_err_set(err, DT_CONFIG, "--job_name=%.60s --task_index=%d names a task, but no cluster is given",
					flags->job_name && *flags->job_name ? flags->job_name : "worker", flags->task_index);
			dt_err_hint(err, "give the cluster with --ps_hosts/--worker_hosts or TF_CONFIG; "
					 "without one dtrain runs a single local process (worker:0)");
		}
		break;
	}
	if (st)
		return st;
	st = dt_cluster_validate(out, &task, err);
	if (st)
		return st;
	return dt_cluster_check_flags(flags, opts, out, err);
}

enum dt_status dt_cluster_resolve(const struct dt_cluster_flags *flags, const struct dt_option *opts,
				  struct dt_cluster *out, struct dt_err *err)
{
	return dt_cluster_resolve_env(flags, opts, (const char *const *)environ, out, err);
}
