/*
 * builtin.c — an outside program (built by tests/cli/test_api_builtin.c
 * against the installed library) over what `dtrain train` uses: a built-in
 * session (dtrain_session_new_builtin), the typed options, the result, the
 * run files, an evaluator's reports and the cluster secret; each misuse
 * prints its status and message:
 *
 *   CASE <name>: <STATUS>: <message>
 *
 * then the figures of a short run ("RESULT ...", "EVAL ...") and "DONE".
 * argv[1]: a directory of its own for checkpoints.
 */
#include <dtrain.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case_report.h"

static dtrain_error *err;

/* One line per case (case_report.h). */
static void report(const char *name, dtrain_status st)
{
	case_report(err, name, st);
}

static int reports;
static void on_eval(void *user, const dtrain_eval *e)
{
	(void)user;
	reports++;
	printf("EVAL step %lld examples %lld accuracy %.4f split %d\n", (long long)e->step, (long long)e->examples,
	       e->accuracy, (int)e->split);
}

/* A built-in session of mlp on the synthetic problem; NULL (reported) on failure. */
static dtrain_session *mlp(const char *name, const char *hparams)
{
	dtrain_builtin b;
	dtrain_builtin_init(&b);
	b.model = "mlp";
	b.problem = "synthetic";
	b.hparams = hparams;
	dtrain_session *s = NULL;
	dtrain_status st = dtrain_session_new_builtin(&b, NULL, &s, err);
	if (st)
		report(name, st);
	return s;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	err = dtrain_error_new();
	char dir[900];
	snprintf(dir, sizeof(dir), "%s", argv[1]);
	dtrain_builtin b;
	dtrain_session_options o;
	dtrain_session *s = NULL;

	/* misuse of the built-in session */
	report("builtin_null_out", dtrain_session_new_builtin(NULL, NULL, NULL, err));
	report("builtin_null_spec", dtrain_session_new_builtin(NULL, NULL, &s, err));
	dtrain_builtin_init(&b);
	b.model = "lenett";
	report("builtin_unknown_model", dtrain_session_new_builtin(&b, NULL, &s, err));
	printf("CASE builtin_failed_out_null: %s\n", s ? "no" : "yes");
	dtrain_builtin_init(&b);
	b.hparams = "learning_rat=0.1";
	report("builtin_bad_hparams", dtrain_session_new_builtin(&b, NULL, &s, err));
	dtrain_builtin_init(&b);
	b.channels = 2;
	report("builtin_bad_channels", dtrain_session_new_builtin(&b, NULL, &s, err));
	dtrain_builtin_init(&b);
	b.keras_model = "/nonexistent/model.json";
	report("builtin_missing_keras", dtrain_session_new_builtin(&b, NULL, &s, err));

	/* misuse of the typed options and the rest */
	dtrain_session_options_init(&o);
	report("configure_null_session", dtrain_session_configure(NULL, &o, err));
	report("result_null_session", dtrain_session_result(NULL, NULL, err));
	report("eval_report_null_session", dtrain_session_set_eval_report(NULL, on_eval, NULL, err));
	report("secret_null_session", dtrain_session_set_secret(NULL, "x", DTRAIN_WIRE_AUTH, err));
	report("run_files_null_session", dtrain_session_write_run_files(NULL, NULL, err));
	s = mlp("mlp_new", NULL);
	if (!s)
		return 1;
	report("configure_null_options", dtrain_session_configure(s, NULL, err));
	o.train_steps = 0;
	report("configure_zero_steps", dtrain_session_configure(s, &o, err));
	dtrain_session_options_init(&o);
	o.save_checkpoints_steps = 10;
	o.save_checkpoints_secs = 10;
	report("configure_both_cadences", dtrain_session_configure(s, &o, err));
	report("secret_missing_file", dtrain_session_set_secret(s, "/nonexistent/secret", DTRAIN_WIRE_AUTH, err));
	report("secret_bad_mode", dtrain_session_set_secret(s, "/nonexistent/secret", (dtrain_wire_security)7, err));
	report("builtin_step", dtrain_session_step(s, NULL, err));
	report("builtin_evaluate", dtrain_session_evaluate(s, NULL, NULL, NULL, err));

	/* a short run: 20 steps, checkpoints, the final evaluation, the run files */
	dtrain_session_options_init(&o);
	o.train_steps = 20;
	o.log_every = 0;
	o.eval_at_end = 1;
	o.output_dir = dir;
	o.save_checkpoints_steps = 10;
	report("configure", dtrain_session_configure(s, &o, err));
	report("run_files", dtrain_session_write_run_files(s, "--model=mlp\n", err));
	printf("MODE %s\n", dtrain_session_mode(s));
	report("run", dtrain_session_run(s, err));
	dtrain_result r;
	report("result", dtrain_session_result(s, &r, err));
	dtrain_hparams_info hp;
	dtrain_session_hparams(s, &hp);
	printf("RESULT steps %lld evaluated %d accuracy %.4f examples %lld params %lld model %s batch %d blas %s\n",
	       (long long)r.steps, r.evaluated, r.eval.accuracy, (long long)r.eval.examples, (long long)r.num_params,
	       hp.model, hp.batch_size, r.blas_core && *r.blas_core ? "yes" : "no");
	report("configure_after_run", dtrain_session_configure(s, &o, err));
	dtrain_session_free(s);

	/* the same problem's evaluator: the newest checkpoint once, reported */
	s = mlp("mlp_eval_new", NULL);
	if (!s)
		return 1;
	dtrain_session_options_init(&o);
	o.train_steps = 20;
	o.output_dir = dir;
	o.evaluator = 1;
	o.eval_once = 1;
	o.eval_timeout_secs = 30;
	report("eval_configure", dtrain_session_configure(s, &o, err));
	report("eval_report", dtrain_session_set_eval_report(s, on_eval, NULL, err));
	printf("MODE %s\n", dtrain_session_mode(s));
	report("eval_run", dtrain_session_run(s, err));
	printf("REPORTS %d\n", reports);
	dtrain_session_free(s);

	/* an evaluator with no output_dir */
	s = mlp("mlp_eval2_new", NULL);
	dtrain_session_options_init(&o);
	o.evaluator = 1;
	report("eval_configure2", dtrain_session_configure(s, &o, err));
	report("eval_no_output_dir", dtrain_session_run(s, err));
	dtrain_session_free(s);
	dtrain_error_free(err);
	printf("DONE\n");
	return 0;
}
