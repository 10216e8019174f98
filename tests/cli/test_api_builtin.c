/*
 * test_api_builtin.c — what `dtrain train` uses of the public API, as an
 * outside user gets it: tests/api/builtin.c, built against the installed
 * library, trains a built-in model on a built-in problem through the typed
 * options, reads its result and run files, evaluates its checkpoint as an
 * evaluator with reports, and misuses each new call (a status and a
 * message, never a crash).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_util.h"
#include "cluster_procs.h"

#define EXPECT_LINE(out, text) DT_CHECK_CONTAINS(out, text)

DT_TEST(api_builtin, run_evaluate_and_misuse)
{
	struct api_tree t;
	api_install(&t);
	char exe[800], dir[700];
	api_compile(&t, "tests/api/builtin.c", "builtin", exe, sizeof(exe));
	snprintf(dir, sizeof(dir), "%s/run", dt_test_tmpdir());
	const char *argv[] = { exe, dir, NULL };
	const char *env[] = { t.ld_env, "TF_CONFIG=", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 120);
	if (r.exit_code != 0 || !strstr(r.out, "DONE"))
		dt_test_fail(__FILE__, __LINE__, "builtin exited %d\n--- stdout\n%s\n--- stderr\n%s", r.exit_code, r.out,
			     r.err);
	/* misuse */
	EXPECT_LINE(r.out, "CASE builtin_null_out: USAGE: dtrain_session_new_builtin: out is NULL");
	EXPECT_LINE(r.out, "CASE builtin_null_spec: USAGE: dtrain_session_new_builtin: the spec is NULL");
	EXPECT_LINE(r.out, "CASE builtin_unknown_model: USAGE: unknown model 'lenett' (did you mean 'lenet'?); valid: ");
	EXPECT_LINE(r.out, "CASE builtin_failed_out_null: yes");
	EXPECT_LINE(r.out, "CASE builtin_bad_hparams: USAGE: hparams: ");
	EXPECT_LINE(r.out, "CASE builtin_bad_channels: USAGE: channels: 2; 1, 3, 4, or 0 (the default)");
	EXPECT_LINE(r.out, "CASE builtin_missing_keras: IO: ");
	EXPECT_LINE(r.out, "CASE configure_null_session: USAGE: dtrain_session_configure: the session is NULL");
	EXPECT_LINE(r.out, "CASE result_null_session: USAGE: dtrain_session_result: the session is NULL");
	EXPECT_LINE(r.out, "CASE eval_report_null_session: USAGE: ");
	EXPECT_LINE(r.out, "CASE secret_null_session: USAGE: ");
	EXPECT_LINE(r.out, "CASE run_files_null_session: USAGE: ");
	EXPECT_LINE(r.out, "CASE configure_null_options: USAGE: dtrain_session_configure: the options are NULL");
	EXPECT_LINE(r.out, "CASE configure_zero_steps: USAGE: dtrain_session_configure: train_steps is 0; it must be from 1");
	EXPECT_LINE(r.out, "CASE configure_both_cadences: USAGE: dtrain_session_configure: save_checkpoints_steps and "
			   "save_checkpoints_secs are mutually exclusive|hint: ");
	EXPECT_LINE(r.out, "CASE secret_missing_file: CONFIG: ");
	EXPECT_LINE(r.out, "CASE secret_bad_mode: USAGE: dtrain_session_set_secret: wire security 7 is not");
	EXPECT_LINE(r.out, "CASE builtin_step: USAGE: dtrain_session_step: a built-in session runs with "
			   "dtrain_session_run only");
	EXPECT_LINE(r.out, "CASE builtin_evaluate: USAGE: dtrain_session_evaluate: a built-in session runs with");
	EXPECT_LINE(r.out, "CASE configure_after_run: USAGE: dtrain_session_configure: training has started");
	EXPECT_LINE(r.out, "CASE eval_no_output_dir: USAGE: the evaluator needs output_dir");
	/* the run, its files and its evaluator */
	EXPECT_LINE(r.out, "CASE configure: OK: ");
	EXPECT_LINE(r.out, "CASE run_files: OK: ");
	EXPECT_LINE(r.out, "MODE local\n");
	EXPECT_LINE(r.out, "CASE run: OK: ");
	EXPECT_LINE(r.out, "RESULT steps 20 evaluated 1 accuracy ");
	EXPECT_LINE(r.out, " model mlp batch 64 blas yes");
	EXPECT_LINE(r.out, "MODE evaluator\n");
	EXPECT_LINE(r.out, "CASE eval_run: OK: ");
	EXPECT_LINE(r.out, "EVAL step 20 examples ");
	EXPECT_LINE(r.out, "REPORTS 1\n");
	char path[800], *text = NULL;
	snprintf(path, sizeof(path), "%s/flags.txt", dir);
	text = cli_read_file(path);
	DT_CHECK_STR_EQ(text, "--model=mlp\n");
	free(text);
	snprintf(path, sizeof(path), "%s/hparams.json", dir);
	text = cli_read_file(path);
	DT_CHECK_CONTAINS(text, "\"batch_size\"");
	free(text);
	snprintf(path, sizeof(path), "%s/model.ckpt-20.safetensors", dir);
	DT_CHECK(access(path, F_OK) == 0);
	dt_run_release(&r);
}

/* `deterministic` through the typed options on t2t's in-graph master (a
 * master with sync and 2 ps tasks, every task the same program): its
 * replicas do not sum in fixed point, so the session refuses it as it
 * starts (DTRAIN_USAGE naming the strategy), not trains without it. The
 * refusal once came after the master's early return (its input is on the
 * ps tasks), and the run succeeded. */
DT_TEST_TIMEOUT(api_builtin, deterministic_refused_on_in_graph_master, 120)
{
	struct api_tree t;
	api_install(&t);
	char exe[800];
	api_compile(&t, "tests/api/deterministic.c", "deterministic", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, "master", 0, 2);
	const char *argv[] = { exe, NULL };
	const char *env[] = { t.ld_env, NULL };
	cluster_start(&c, "ps", 0, NULL, argv, env);
	cluster_start(&c, "ps", 1, NULL, argv, env);
	struct task *master = cluster_start(&c, "master", 0, NULL, argv, env);
	EXPECT_EXIT(&c, master, 2, 90);
	char *out = task_read(master, 0);
	DT_CHECK_CONTAINS(out, "CASE run: USAGE: --deterministic is not built for in_graph_sync training");
	DT_CHECK_CONTAINS(out, "MODE ps_sync_in_graph\n");
	free(out);
	cluster_kill_all(&c); /* the ps tasks would wait for a master for ps_idle_timeout_secs */
}
