#include "dist/ps_wire.h"

#include <string.h>

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t dt_ps_cluster_fingerprint(const struct dt_cluster *cl)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (int j = 0; j < DT_JOB_COUNT; j++) {
		const struct dt_cluster_job *job = &cl->jobs[j];
		if (j == DT_JOB_EVALUATOR || job->slots == 0)
			continue;
		const char *name = dt_job_name((enum dt_job)j);
		h = fnv1a(h, name, strlen(name) + 1);
		for (int i = 0; i < job->slots; i++) {
			const char *a = job->addrs[i] ? job->addrs[i] : "";
			h = fnv1a(h, a, strlen(a) + 1);
		}
	}
	return h;
}

enum dt_status dt_ps_signature_add_vars(struct dt_signature *sig, const struct dt_variable *vars, int n,
					struct dt_err *err)
{
	for (int i = 0; i < n; i++) {
		uint64_t dims[DT_MAX_DIMS];
		for (int d = 0; d < vars[i].ndim; d++)
			dims[d] = (uint64_t)vars[i].shape[d];
		enum dt_status st = dt_signature_add(sig, vars[i].name, DT_WIRE_F32, (unsigned)vars[i].ndim, dims, err);
		if (st)
			return st;
	}
	return DT_OK;
}

const char *dt_ps_role_name(enum dt_job job)
{
	return dt_job_name(job);
}
