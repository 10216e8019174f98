/*
 * mpi.c — the cluster of an Open MPI launch (engines.md §6.3).
 *
 * Open MPI tells each rank OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK and
 * _LOCAL_SIZE, but not where the other ranks run, so only a one-node
 * launch can be turned into addresses: 127.0.0.1:<port_base + rank>. Jobs go
 * to ranks as under Slurm (--ps_replicas ps ranks first, then workers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "cluster/internal.h"

static enum dt_status env_int(const char *const *envp, const char *var, int min, int max, int *out, int required,
			      struct dt_err *err)
{
	const char *v = dt__env_get(envp, var);
	if (!v) {
		if (!required)
			return DT_OK;
		enum dt_status st = dt_err_set(err, DT_CONFIG, "%s not found in environment, but OMPI_COMM_WORLD_RANK is set",
					       var);
		dt_err_hint(err, "start the tasks with Open MPI's mpirun, which sets both");
		return st;
	}
	return dt__env_parse_int(var, v, min, max, out, err);
}

enum dt_status dt__mpi_read(const char *const *envp, int ps_tasks, int port_base, struct dt_cluster *out,
			    struct dt_task_given *task, int *found, struct dt_err *err)
{
	*found = dt__env_get(envp, "OMPI_COMM_WORLD_RANK") != NULL;
	if (!*found)
		return DT_OK;
	int rank = 0, size = 0, local_rank = -1, local_size = -1;
	enum dt_status st = env_int(envp, "OMPI_COMM_WORLD_RANK", 0, DT_CLUSTER_MAX_TASKS - 1, &rank, 1, err);
	if (!st)
		st = env_int(envp, "OMPI_COMM_WORLD_SIZE", 1, DT_CLUSTER_MAX_TASKS, &size, 1, err);
	if (!st)
		st = env_int(envp, "OMPI_COMM_WORLD_LOCAL_RANK", 0, DT_CLUSTER_MAX_TASKS - 1, &local_rank, 0, err);
	if (!st)
		st = env_int(envp, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, DT_CLUSTER_MAX_TASKS, &local_size, 0, err);
	if (st)
		return st;
	if (rank >= size)
		return dt_err_set(err, DT_CONFIG, "OMPI_COMM_WORLD_RANK=%d is not below OMPI_COMM_WORLD_SIZE=%d", rank, size);
	if ((local_size >= 0 && local_size != size) || (local_rank >= 0 && local_rank != rank)) {
		st = dt_err_set(err, DT_CONFIG,
				"the Open MPI launch spans several nodes (OMPI_COMM_WORLD_SIZE=%d, OMPI_COMM_WORLD_LOCAL_SIZE=%d), "
				"and MPI does not tell a rank where the others run",
				size, local_size >= 0 ? local_size : -1);
		dt_err_hint(err, "start multi-node clusters with srun, or give TF_CONFIG or --ps_hosts/--worker_hosts");
		return st;
	}
	if (port_base + size - 1 > 65535)
		return dt_err_set(err, DT_CONFIG, "--port_base=%d leaves no port for rank %d (%d > 65535)", port_base,
				  size - 1, port_base + size - 1);
	if (ps_tasks >= size) {
		st = dt_err_set(err, DT_CONFIG, "--ps_replicas=%d leaves no worker among the %d MPI ranks", ps_tasks, size);
		dt_err_hint(err, "start more ranks (mpirun -n %d or more) or ask for fewer ps", ps_tasks + 1);
		return st;
	}
	char **addrs = dt_xmallocarray((size_t)size, sizeof(*addrs));
	for (int r = 0; r < size; r++) {
		char buf[32];
		snprintf(buf, sizeof(buf), "127.0.0.1:%d", port_base + r);
		addrs[r] = dt_xstrdup(buf);
	}
	struct dt__rank_layout layout = { { 0 } };
	layout.counts[DT_JOB_PS] = ps_tasks;
	layout.counts[DT_JOB_WORKER] = size - ps_tasks;
	st = dt__cluster_from_ranks(out, &layout, addrs, size, rank, "Open MPI", task, err);
	for (int r = 0; r < size; r++)
		free(addrs[r]);
	free(addrs);
	if (!st)
		snprintf(out->source_detail, sizeof(out->source_detail), "Open MPI rank %d of %d", rank, size);
	return st;
}
