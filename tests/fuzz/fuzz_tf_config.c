/* libFuzzer target for the TF_CONFIG parser and validator (src/cluster).
 *
 * Any input must either give a cluster that keeps cluster.h's invariants
 * (the task is listed unless it is an evaluator or the local worker, every
 * peer has an address, the derived fields are filled) or fail with
 * DT_CONFIG and a non-empty message; it must never crash, leak or read out
 * of bounds, and the message stays within its cap. Short inputs also go
 * through Slurm's hostlist and tasks-per-node expanders (untrusted
 * environment text as well).
 * Run: make build-fuzz/fuzz_tf_config && build-fuzz/fuzz_tf_config -runs=20000 -seed=1 tests/fuzz/corpus/fuzz_tf_config */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "cluster/slurm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
	if (!ok)
		abort();
}

static void fuzz_slurm_lists(const uint8_t *data, size_t size)
{
	char text[513];
	if (size >= sizeof(text) || memchr(data, '\0', size))
		return;
	memcpy(text, data, size);
	text[size] = '\0';
	struct dt_err err = DT_ERR_INIT;
	char **hosts;
	int n;
	if (dt_slurm_expand_hostlist(text, &hosts, &n, &err) == DT_OK) {
		check(n >= 1 && n <= DT_SLURM_MAX_HOSTS);
		for (int i = 0; i < n; i++)
			check(hosts[i] != NULL);
		dt_slurm_hosts_free(hosts, n);
	} else {
		check(hosts == NULL && n == 0 && err.msg[0]);
	}
	int *counts;
	if (dt_slurm_expand_tasks_per_node(text, &counts, &n, &err) == DT_OK) {
		check(n >= 1);
		free(counts);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1 << 16)
		return 0;
	fuzz_slurm_lists(data, size);
	struct dt_cluster cl;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_tf_config_parse((const char *)data, size, &cl, &err);
	if (st != DT_OK) {
		check(st == DT_CONFIG && err.status == DT_CONFIG);
		check(err.msg[0] != '\0' && strlen(err.msg) < sizeof(err.msg));
		dt_cluster_release(&cl);
		return 0;
	}
	check(cl.task.job >= 0 && cl.task.job < DT_JOB_COUNT && cl.task.index >= 0);
	check(cl.master != NULL);
	if (dt_cluster_is_local(&cl))
		check(cl.task.job == DT_JOB_WORKER && cl.task.index == 0 && cl.is_chief && cl.global_id == 0);
	else if (cl.task.job != DT_JOB_EVALUATOR)
		check(dt_cluster_address(&cl, cl.task.job, cl.task.index) != NULL && cl.global_id >= 0);
	else
		check(cl.global_id == -1 && cl.npeers == 0);
	for (int i = 0; i < cl.npeers; i++)
		check(dt_cluster_address(&cl, cl.peers[i].job, cl.peers[i].index) != NULL);
	check(cl.num_worker_replicas >= 1);
	char jobs[512];
	dt_cluster_format_jobs(&cl, jobs, sizeof(jobs), 4);
	check(strlen(jobs) < sizeof(jobs));
	dt_cluster_release(&cl);
	return 0;
}
