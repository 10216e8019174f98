/*
 * test_api_train.c — outside programs compiled against the INSTALLED
 * library train the same model code in every mode, to a target:
 * examples/layers.c (a layer graph; the mode from TF_CONFIG) locally, with
 * mirrored replicas, through parameter servers asynchronously (chief +
 * worker + ps) and synchronously, and with multi-worker mirrored (2
 * workers, ring all-reduce); examples/custom_model.c (its own forward and
 * backward) locally, mirrored and through a ps; examples/
 * low_level_distributed.c as seed 003 runs it, from the four flags.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_util.h"

/* The accuracy the layers example's chief printed ("... accuracy A"), or -1. */
static double printed_accuracy(const char *out)
{
	const char *p = out ? strstr(out, " accuracy ") : NULL;
	return p ? atof(p + 10) : -1;
}

static void build(struct api_tree *t, const char *example, char *exe, size_t cap)
{
	char src[200], name[64];
	snprintf(src, sizeof(src), "examples/%s.c", example);
	snprintf(name, sizeof(name), "%s_prog", example);
	api_install(t);
	api_compile(t, src, name, exe, cap);
}

/* One process: `exe args...`; returns its stdout (the caller frees). */
static char *run_one(const struct api_tree *t, const char *exe, const char *const *args, int want_exit)
{
	const char *argv[16] = { exe };
	int n = 1;
	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	const char *env[] = { t->ld_env, "TF_CONFIG=", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 240);
	if (r.exit_code != want_exit)
		dt_test_fail(__FILE__, __LINE__, "%s exited %d (want %d)\n--- stdout\n%s\n--- stderr\n%s", exe,
			     r.exit_code, want_exit, r.out, r.err);
	char *out = r.out;
	r.out = NULL;
	dt_run_release(&r);
	return out;
}

static const char *const layers_args[] = { "problem=synthetic", "train_steps=300", "log_every=0", "target=0.95",
					   NULL };

DT_TEST_TIMEOUT(api_train, layers_local, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "layers", exe, sizeof(exe));
	char *out = run_one(&t, exe, layers_args, 0);
	DT_CHECK_CONTAINS(out, "mode local step 300 ");
	DT_CHECK(printed_accuracy(out) >= 0.95);
	free(out);
}

DT_TEST_TIMEOUT(api_train, layers_mirrored, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "layers", exe, sizeof(exe));
	const char *args[] = { "problem=synthetic", "train_steps=300", "log_every=0", "target=0.95", "replicas=2", NULL };
	char *out = run_one(&t, exe, args, 0);
	DT_CHECK_CONTAINS(out, "mode mirrored step 300 ");
	free(out);
}

static const char *const custom_args[] = { "train_steps=1500", "log_every=0", "target=0.02", NULL };

DT_TEST_TIMEOUT(api_train, custom_local, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "custom_model", exe, sizeof(exe));
	char *out = run_one(&t, exe, custom_args, 0);
	DT_CHECK_CONTAINS(out, "worker:0 mode local step 1500 loss ");
	free(out);
	/* The target is real: far too few steps miss it (exit 1). */
	const char *few[] = { "train_steps=3", "log_every=0", "target=0.02", NULL };
	free(run_one(&t, exe, few, 1));
}


DT_TEST_TIMEOUT(api_train, custom_mirrored, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "custom_model", exe, sizeof(exe));
	const char *args[] = { "train_steps=1500", "log_every=0", "target=0.02", "replicas=2", NULL };
	char *out = run_one(&t, exe, args, 0);
	DT_CHECK_CONTAINS(out, "mode mirrored step 1500 loss ");
	free(out);
}

/* The mode each task of a cluster gets, as TensorFlow picks it, from the
 * same program (the layers example prints it before it runs). The modes
 * whose engine strategy does not take a layer graph's or custom model's
 * batches yet refuse with DT_CONFIG (exit 2) naming the mode, before they
 * connect to anyone: a mode is never run as another. */
DT_TEST_TIMEOUT(api_train, modes_from_the_cluster, 120)
{
	struct api_tree t;
	char exe[800];
	build(&t, "layers", exe, sizeof(exe));
	static const char cl_ps[] = "{\"chief\": [\"127.0.0.1:1\"], \"worker\": [\"127.0.0.1:2\"], \"ps\": [\"127.0.0.1:3\"]}";
	static const char cl_ring[] = "{\"worker\": [\"127.0.0.1:1\", \"127.0.0.1:2\"]}";
	const struct {
		const char *cluster, *type, *option, *mode;
		int index;
	} cases[] = {
		{ cl_ps, "chief", "seed=1", "ps_async", 0 },     { cl_ps, "worker", "seed=1", "ps_async", 0 },
		{ cl_ps, "chief", "sync=1", "ps_sync", 0 },      { cl_ps, "ps", "seed=1", "ps_server", 0 },
		{ cl_ring, "worker", "seed=1", "multi_worker_mirrored", 1 },
			};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char tf[600] = "TF_CONFIG=";
		if (cases[i].cluster)
			snprintf(tf, sizeof(tf), "TF_CONFIG={\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}}",
				 cases[i].cluster, cases[i].type, cases[i].index);
		const char *argv[] = { exe, "problem=synthetic", "log_every=0", cases[i].option, NULL };
		const char *env[] = { t.ld_env, tf, NULL };
		struct dt_run r;
		dt_test_run(&r, argv, env, 60);
		char want[120];
		snprintf(want, sizeof(want), "runs as %s\n", cases[i].mode);
		DT_CHECK_CONTAINS(r.err, want);
		snprintf(want, sizeof(want), "error: mode %s does not run through the API", cases[i].mode);
		DT_CHECK_CONTAINS(r.err, want);
		DT_CHECK_INT_EQ(r.exit_code, 2);
		dt_run_release(&r);
	}
}

/* Seed 003's program without a cluster: one local worker running its own
 * step loop to should_stop, then close. */
DT_TEST_TIMEOUT(api_train, low_level_distributed_alone, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "low_level_distributed", exe, sizeof(exe));
	const char *args[] = { "problem=synthetic", "train_steps=200", "log_every=0", NULL };
	char *out = run_one(&t, exe, args, 0);
	DT_CHECK_CONTAINS(out, "worker 0 done: 200 local steps, global step 200");
	free(out);
}
