/*
 * deterministic.c — an outside program (built by tests/cli/test_api_builtin.c
 * against the installed library): every task of the cluster TF_CONFIG names
 * runs it, a built-in session (mlp on synthetic) asking `deterministic`
 * with `sync`. Only strategies that sum in fixed point take it (local,
 * mirrored, multi-worker mirrored); t2t's in-graph master (a master, sync,
 * its replicas on the ps tasks) must refuse it before its first step
 * rather than train without it. The session's run prints
 *
 *   CASE run: <STATUS>: <message>
 *
 * (case_report.h), then "MODE <mode>"; it exits with the status's exit code.
 */
#include <dtrain.h>

#include <stdio.h>

#include "case_report.h"

int main(int argc, char **argv)
{
	dtrain_error *err = dtrain_error_new();
	dtrain_cluster *cluster = NULL;
	dtrain_session *s = NULL;
	dtrain_status st = dtrain_cluster_resolve(&argc, argv, &cluster, err);
	if (!st) {
		dtrain_builtin b;
		dtrain_builtin_init(&b);
		b.model = "mlp";
		b.problem = "synthetic";
		b.hparams = "batch_size=64";
		st = dtrain_session_new_builtin(&b, cluster, &s, err);
	}
	if (!st) {
		dtrain_session_options o;
		dtrain_session_options_init(&o);
		o.train_steps = 5;
		o.log_every = 0;
		o.sync = 1;
		o.deterministic = 1;
		o.micro_batch = 32; /* divides the batch: only the strategy can refuse */
		o.connect_timeout_secs = 60;
		o.ps_idle_timeout_secs = 30; /* the ps tasks end on their own once the master is gone */
		st = dtrain_session_configure(s, &o, err);
	}
	if (!st)
		st = dtrain_session_run(s, err);
	const int code = dtrain_status_exit_code(st);
	case_report(err, "run", st);
	printf("MODE %s\n", s ? dtrain_session_mode(s) : "none");
	dtrain_session_free(s);
	dtrain_cluster_free(cluster);
	dtrain_error_free(err);
	return code;
}
