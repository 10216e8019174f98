/* libFuzzer target for the experiment spec parser (src/launch/spec.h).
 *
 * Any input must either give a spec that keeps spec.h's invariants (a
 * command or a model, counts in range, ps by mode, resources positive), and
 * whose every task gets a TF_CONFIG that dtrain's own TF_CONFIG parser
 * accepts and a non-empty command line; or fail with DT_CONFIG and a
 * message that starts with the file name and a line and column. It must
 * never crash, leak or read out of bounds.
 * Sweeps (parameters:) also read their last trial's spec.
 * Run: make build-fuzz/fuzz_launch_spec && build-fuzz/fuzz_launch_spec -runs=20000 -seed=1 tests/fuzz/corpus/fuzz_launch_spec */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "launch/spec.h"
#include "launch/tasks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 65536)
		return 0;
	struct dt_launch_spec s;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_launch_spec_parse((const char *)data, size, "f.yaml", &s, &err);
	if (st != DT_OK) {
		check(st == DT_CONFIG || st == DT_NOMEM);
		check(strncmp(err.msg, "f.yaml:", 7) == 0);
		check(strlen(err.msg) < sizeof(err.msg));
		dt_launch_spec_release(&s);
		return 0;
	}
	check(s.ncommand > 0 || s.model != NULL);
	check(!(s.ncommand > 0 && s.model != NULL));
	check(s.workers >= 1 && s.workers <= 64 && s.ps >= 0 && s.ps <= 64 && s.evaluators >= 0 && s.evaluators <= 1);
	check(s.mode == DT_LAUNCH_MIRRORED ? s.ps == 0 : s.ps >= 1);
	for (int g = 0; g < DT_GROUP_COUNT; g++)
		check(s.res[g].cpus >= 0 && s.res[g].mem_bytes >= 0);
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(&s, tasks);
	check(n >= 1 && n <= DT_LAUNCH_MAX_TASKS);
	char buf[DT_LAUNCH_MAX_TASKS][32];
	const char *addrs[DT_LAUNCH_MAX_TASKS];
	for (int i = 0; i < n; i++) {
		snprintf(buf[i], sizeof(buf[i]), "127.0.0.1:%d", 10000 + i);
		addrs[i] = buf[i];
	}
	for (int i = 0; i < n; i++) {
		char *tf = dt_launch_tf_config(tasks, n, addrs, i);
		struct dt_cluster cl;
		check(dt_tf_config_parse(tf, strlen(tf), &cl, NULL) == DT_OK);
		check(cl.task.job == tasks[i].ref.job && cl.task.index == tasks[i].ref.index);
		dt_cluster_release(&cl);
		free(tf);
		int argc = 0;
		char **argv = dt_launch_argv(&s, &tasks[i], "dtrain", NULL, &argc);
		check(argc >= 1 && argv[0] && argv[0][0]);
		dt_launch_argv_free(argv);
	}
	if (s.sweep) { /* a sweep: its last trial's spec reads, or fails with a placed message */
		check(s.sweep->ntrials >= 1 && s.sweep->ntrials <= DT_SWEEP_MAX_TRIALS);
		check(s.sweep->concurrency >= 1 && s.sweep->nparams >= 1);
		struct dt_launch_spec t;
		st = dt_launch_spec_trial(&s, s.sweep->ntrials, &t, &err);
		check(st == DT_OK ? t.trial == s.sweep->ntrials && t.trial_values != NULL
				  : st == DT_CONFIG && strncmp(err.msg, "f.yaml:", 7) == 0);
		dt_launch_spec_release(&t);
	}
	dt_launch_spec_release(&s);
	return 0;
}
