/* The dtrain program end to end: help, version, `dtrain train` on small
 * runs, and every kind of bad input with its message and exit code. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "cli_util.h"
#include "dt_test.h"

static void run(struct dt_run *r, const char *const *argv)
{
	dt_test_run(r, argv, NULL, 120);
	DT_CHECK(!r->timed_out);
}

DT_TEST(cli, help_goes_to_stdout_and_exits_0)
{
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "--help", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "usage: dtrain <command>");
	DT_CHECK_CONTAINS(r.out, "train");
	dt_run_release(&r);

	run(&r, (const char *[]){ "dtrain", "train", "--help", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "--train_steps=N");
	DT_CHECK_CONTAINS(r.out, "--hparams=K=V,...");
	DT_CHECK_STR_EQ(r.err, "");
	dt_run_release(&r);

	run(&r, (const char *[]){ "dtrain", "help", "train", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "--model=NAME");
	dt_run_release(&r);
}

DT_TEST(cli, version_names_the_blas_core)
{
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", "version", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "dtrain ");
	DT_CHECK_CONTAINS(r.out, "core ");
	dt_run_release(&r);
}

DT_TEST(cli, usage_errors_exit_2_on_stderr)
{
	struct dt_run r;
	run(&r, (const char *[]){ "dtrain", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	dt_run_release(&r);

	run(&r, (const char *[]){ "dtrain", "trian", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "unknown command 'trian' (did you mean 'train'?)");
	dt_run_release(&r);

	run(&r, (const char *[]){ "dtrain", "train", "--train_step=5", NULL });
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "did you mean '--train_steps'");
	DT_CHECK_STR_EQ(r.out, "");
	dt_run_release(&r);
}

/* Runs `dtrain train ARGS...` expecting failure with `code` and `needle` in stderr. */
static void expect_train_error(const char *const *extra, int code, const char *needle)
{
	const char *argv[16] = { "dtrain", "train", "--problem=synthetic", "--train_steps=2" };
	int n = 4;
	for (const char *const *e = extra; *e && n < 15; e++)
		argv[n++] = *e;
	argv[n] = NULL;
	struct dt_run r;
	run(&r, argv);
	if (r.exit_code != code || !strstr(r.err, needle))
		fprintf(stderr, "stderr was:\n%s\n", r.err);
	DT_CHECK_INT_EQ(r.exit_code, code);
	DT_CHECK_CONTAINS(r.err, needle);
	DT_CHECK_CONTAINS(r.err, "error: ");
	/* One clear error line, not a crash dump. */
	DT_CHECK(!strstr(r.err, "AddressSanitizer") && !strstr(r.err, "BUG:"));
	dt_run_release(&r);
}

DT_TEST(cli, bad_model_problem_and_hparams_are_usage_errors)
{
	expect_train_error((const char *[]){ "--model=resnet", NULL }, 2, "unknown model 'resnet'");
	expect_train_error((const char *[]){ "--model=mpl", NULL }, 2, "did you mean 'mlp'");
	expect_train_error((const char *[]){ "--problem=cifar10", NULL }, 2, "unknown problem 'cifar10'");
	expect_train_error((const char *[]){ "--hparams_set=nope_base", NULL }, 2, "nope_base");
	expect_train_error((const char *[]){ "--hparams=lerning_rate=0.1", NULL }, 2, "learning_rate");
	expect_train_error((const char *[]){ "--hparams=batch_size", NULL }, 2, "batch_size");
	expect_train_error((const char *[]){ "--hparams=batch_size=abc", NULL }, 2, "abc");
	expect_train_error((const char *[]){ "--hparams=batch_size=-4", NULL }, 2, "batch_size");
	expect_train_error((const char *[]){ "--hparams=optimizer=rmsprop", NULL }, 2, "rmsprop");
}

DT_TEST(cli, bad_step_counts_and_threads_are_usage_errors)
{
	expect_train_error((const char *[]){ "--train_steps=-5", NULL }, 2, "--train_steps must be a positive");
	expect_train_error((const char *[]){ "--train_steps=0", NULL }, 2, "--train_steps must be a positive");
	expect_train_error((const char *[]){ "--train_steps=ten", NULL }, 2, "'ten' is not an integer");
	expect_train_error((const char *[]){ "--threads=0", NULL }, 2, "--threads");
	expect_train_error((const char *[]){ "--eval_every=-1", NULL }, 2, "--eval_every");
	expect_train_error((const char *[]){ "stray", NULL }, 2, "unexpected argument 'stray'");
}

/* Asynchronous training through parameter servers is built (tests/cli/test_ps_train.c);
 * the other distributed layouts are refused with a clear message, before anything connects. */
DT_TEST(cli, contradictory_distributed_layouts_are_refused)
{
	const char *ps_env[] = { "TF_CONFIG={\"cluster\": {\"chief\": [\"localhost:2000\"], \"ps\": [\"localhost:2002\"]}, "
				 "\"task\": {\"type\": \"chief\", \"index\": 0}}", NULL };
	struct dt_run r;
	/* A trainer told to run_std_server. */
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--problem=synthetic", "--schedule=run_std_server", NULL },
		    ps_env, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--schedule=run_std_server disagrees with TF_CONFIG");
	dt_run_release(&r);
	/* No ps job is all-reduce (tests/cli/test_allreduce_train.c); its
	 * worker never comes: exit 3 within the connect deadline, naming it. */
	int ports[2];
	cli_free_ports(ports, 2);
	char ar_config[256];
	snprintf(ar_config, sizeof(ar_config),
		 "TF_CONFIG={\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"worker\": [\"127.0.0.1:%d\"]}, "
		 "\"task\": {\"type\": \"chief\", \"index\": 0}}", ports[0], ports[1]);
	const char *ar_env[] = { ar_config, NULL };
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--problem=synthetic", "--model=mlp", "--train_steps=2",
					 "--connect_timeout=1.5", NULL }, ar_env, 60);
	DT_CHECK_INT_EQ(r.exit_code, 3);
	DT_CHECK_CONTAINS(r.err, "worker:0");
	DT_CHECK(r.seconds < 30);
	dt_run_release(&r);
	/* run_std_server alone, without a cluster. */
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--problem=synthetic", "--schedule=run_std_server", NULL },
		    NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "run_std_server is for ps tasks");
	dt_run_release(&r);
	/* An invalid TF_CONFIG is a configuration error before anything trains. */
	const char *argv[] = { "dtrain", "train", "--problem=synthetic", "--train_steps=2", NULL };
	const char *bad[] = { "TF_CONFIG={\"cluster\": {\"chief\": [\"localhost:2000\"]}, \"task\": {\"type\": \"chief\", \"index\": 3}}", NULL };
	dt_test_run(&r, argv, bad, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "not a valid task_id");
	dt_run_release(&r);
}

/* A trainer whose ps never comes up fails within its connect deadline with
 * the retryable exit code 3, naming the ps. Nothing listens on port 1. */
DT_TEST(cli, a_trainer_whose_ps_never_comes_up_fails_naming_it)
{
	const char *env[] = { "TF_CONFIG={\"cluster\": {\"chief\": [\"127.0.0.1:2\"], \"ps\": [\"127.0.0.1:1\"]}, "
			      "\"task\": {\"type\": \"chief\", \"index\": 0}}", NULL };
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--problem=synthetic", "--model=mlp", "--train_steps=2",
					 "--connect_timeout=1.5", NULL }, env, 60);
	DT_CHECK_INT_EQ(r.exit_code, 3);
	DT_CHECK_CONTAINS(r.err, "ps:0 at 127.0.0.1:1");
	DT_CHECK(r.seconds < 30);
	dt_run_release(&r);
}

DT_TEST(cli, schedule_train_skips_the_final_evaluation)
{
	const char *argv[] = { "dtrain", "train", "--problem=synthetic", "--model=mlp", "--train_steps=3",
			       "--schedule=train", NULL };
	struct dt_run r;
	run(&r, argv);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK(strstr(r.out, "accuracy") == NULL);
	dt_run_release(&r);
}

DT_TEST(cli, missing_data_files_exit_4_naming_the_file)
{
	char arg[700];
	snprintf(arg, sizeof(arg), "--data_dir=%s", dt_test_tmpdir());
	expect_train_error((const char *[]){ "--problem=mnist", arg, NULL }, 4, "train-images-idx3-ubyte");
}

DT_TEST(cli, corrupt_data_file_exits_4_naming_the_file)
{
	/* A gzipped IDX image file whose header promises more than it holds. */
	char path[700];
	gzFile f = gzopen(dt_test_path(path, sizeof(path), "train-images-idx3-ubyte.gz"), "wb");
	const unsigned char header[16] = { 0, 0, 8, 3, 0, 0, 0, 100, 0, 0, 0, 28, 0, 0, 0, 28 };
	unsigned char some[500] = { 0 };
	DT_CHECK(f != NULL);
	gzwrite(f, header, sizeof(header));
	gzwrite(f, some, sizeof(some));
	gzclose(f);
	char arg[700];
	snprintf(arg, sizeof(arg), "--data_dir=%s", dt_test_tmpdir());
	expect_train_error((const char *[]){ "--problem=mnist", arg, NULL }, 4, "train-images-idx3-ubyte.gz");
}

/* Trains mlp on synthetic data for a few steps with `seed`; returns the
 * metrics file's JSON (caller decrefs) and the run's output in *r. */
static json_t *train_synthetic(struct dt_run *r, const char *seed, const char *metrics_name)
{
	char metrics[700], marg[720], sarg[64];
	dt_test_path(metrics, sizeof(metrics), metrics_name);
	snprintf(marg, sizeof(marg), "--metrics_file=%s", metrics);
	snprintf(sarg, sizeof(sarg), "--seed=%s", seed);
	const char *argv[] = { "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=60",
			       "--log_every=20", sarg, marg, NULL };
	run(r, argv);
	if (r->exit_code != 0)
		fprintf(stderr, "%s", r->err);
	DT_CHECK_INT_EQ(r->exit_code, 0);
	json_error_t jerr;
	json_t *m = json_load_file(metrics, 0, &jerr);
	DT_CHECK(m != NULL);
	return m;
}

static double num(json_t *m, const char *key)
{
	json_t *v = json_object_get(m, key);
	DT_CHECK(v != NULL);
	return json_number_value(v);
}

DT_TEST_TIMEOUT(cli, synthetic_training_learns_and_is_deterministic, 180)
{
	struct dt_run a, b, c;
	json_t *ma = train_synthetic(&a, "7", "a.json");
	DT_CHECK_CONTAINS(a.out, "accuracy = ");
	DT_CHECK_CONTAINS(a.err, "[chief:0] I step 20/60 loss ");
	DT_CHECK_CONTAINS(a.err, "examples/s eta ");
	DT_CHECK_CONTAINS(a.err, "blas: OpenBLAS core ");
	DT_CHECK(num(ma, "accuracy") > 0.9);
	DT_CHECK(num(ma, "examples_per_sec") > 0);
	DT_CHECK_INT_EQ(json_integer_value(json_object_get(ma, "steps")), 60);

	/* Same seed and threads: the same numbers, bit for bit. */
	json_t *mb = train_synthetic(&b, "7", "b.json");
	DT_CHECK_STR_EQ(a.out, b.out);
	DT_CHECK(num(ma, "final_train_loss") == num(mb, "final_train_loss"));
	DT_CHECK(num(ma, "loss") == num(mb, "loss"));

	/* A different seed: different initial weights and order, different numbers. */
	json_t *mc = train_synthetic(&c, "8", "c.json");
	DT_CHECK(num(ma, "final_train_loss") != num(mc, "final_train_loss"));

	json_decref(ma);
	json_decref(mb);
	json_decref(mc);
	dt_run_release(&a);
	dt_run_release(&b);
	dt_run_release(&c);
}

DT_TEST_TIMEOUT(cli, fashion_mnist_mlp_trains_past_chance, 240)
{
	const char *argv[] = { "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", "--train_steps=300",
			       "--log_every=100", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, NULL, 230);
	if (strstr(r.err, "dataset-fashion-mnist"))
		DT_SKIP("dataset-fashion-mnist is not installed");
	DT_CHECK_INT_EQ(r.exit_code, 0);
	const char *p = strstr(r.out, "accuracy = ");
	DT_CHECK(p != NULL);
	double acc = atof(p + strlen("accuracy = "));
	/* 300 steps of 64 examples: well past chance (10%), near 80%. */
	DT_CHECK(acc > 0.75);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(cli, run_cluster_script_trains_a_loopback_cluster_from_make_configs, 240)
{
	const char *argv[] = { "scripts/run-cluster.sh", "--model=mlp", "--problem=synthetic", "--train_steps=120",
			       "--log_every=0", NULL };
	char env_bin[700];
	snprintf(env_bin, sizeof(env_bin), "DTRAIN_BIN=%s", dt_test_dtrain_bin());
	const char *env[] = { env_bin, NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 230);
	if (r.exit_code != 0)
		fprintf(stderr, "stdout:\n%s\nstderr:\n%s\n", r.out, r.err);
	DT_CHECK(!r.timed_out);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "run-cluster: started 3 tasks");
	DT_CHECK_CONTAINS(r.out, "chief.0 | eval (test split");
	DT_CHECK_CONTAINS(r.out, "ps.0 | ");
	DT_CHECK_CONTAINS(r.out, "worker.0 | ");
	dt_run_release(&r);
}
