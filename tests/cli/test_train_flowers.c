/* Seed 004's workload, tiny: scripts/make_flowers.py writes the same
 * folder for the same seed (and another for another seed), and Keras's
 * MobileNetV2 (the 32x32 fixture, tests/fixtures/keras) trains on it
 * with 1 worker, with --replicas=2, and with 2 workers by all-reduce;
 * each evaluates on its validation split (and the metrics file carries
 * the CPU time bench/mobilenet reads). bench/mobilenet runs the
 * full-size version. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define MODEL "--keras_model=tests/fixtures/keras/mobilenet_v2_k3.json"
#define TASK_WAIT_S 240.0

static void need_pil(void)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "-c", "import PIL, numpy", NULL }, NULL, 60);
	const int ok = r.exit_code == 0;
	dt_run_release(&r);
	if (!ok)
		DT_SKIP("python3-pil or python3-numpy missing (scripts/install-deps.sh installs them)");
}

/* Writes 40 32x32 flowers of `seed` into <tmp>/<name>; returns the
 * script's summary line (malloc'd), which ends in the files' sha256. */
static char *make_flowers(const char *name, const char *seed, char *dir, size_t cap)
{
	dt_test_path(dir, cap, name);
	char seed_flag[64];
	snprintf(seed_flag, sizeof(seed_flag), "--seed=%s", seed);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "scripts/make_flowers.py", dir, "--count=40", "--size=32",
					 seed_flag, NULL },
		    NULL, 120);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "40 images of 32x32");
	char *line = strdup(r.out);
	dt_run_release(&r);
	return line;
}

DT_TEST_TIMEOUT(train_flowers, the_stand_in_is_five_classes_and_the_same_for_a_seed, 120)
{
	need_pil();
	char a[512], b[512], c[512], path[700];
	char *la = make_flowers("a", "4", a, sizeof(a)), *lb = make_flowers("b", "4", b, sizeof(b)),
	     *lc = make_flowers("c", "5", c, sizeof(c));
	/* the digest follows the folder's name in the line: compare from "seed" */
	DT_CHECK_STR_EQ(strstr(la, "seed"), strstr(lb, "seed"));
	DT_CHECK(strcmp(strstr(la, "sha256"), strstr(lc, "sha256")) != 0);
	static const char *const classes[5] = { "daisy", "dandelion", "roses", "sunflowers", "tulips" };
	for (int i = 0; i < 5; i++) {
		snprintf(path, sizeof(path), "%s/%s/%s_00007.jpg", a, classes[i], classes[i]);
		DT_CHECK(access(path, F_OK) == 0);
		snprintf(path, sizeof(path), "%s/%s/%s_00008.jpg", a, classes[i], classes[i]);
		DT_CHECK(access(path, F_OK) != 0); /* 40 / 5 = 8 per class */
	}
	free(la), free(lb), free(lc);
}

/* The common flags: batch 8 (global), 12 steps, a fifth held out. */
#define FLAGS(data_flag)                                                                                          \
	MODEL, "--problem=image_folder", data_flag, "--validation_split=0.2", "--train_steps=12", "--log_every=6", \
		"--hparams=batch_size=8,learning_rate=0.01"

DT_TEST_TIMEOUT(train_flowers, mobilenet_v2_trains_on_one_worker_and_two_replicas, 300)
{
	need_pil();
	char dir[512], data_flag[600];
	free(make_flowers("f", "4", dir, sizeof(dir)));
	snprintf(data_flag, sizeof(data_flag), "--data_dir=%s", dir);
	char metrics[512], mflag[600];
	dt_test_path(metrics, sizeof(metrics), "metrics.json");
	snprintf(mflag, sizeof(mflag), "--metrics_file=%s", metrics);
	for (int replicas = 1; replicas <= 2; replicas++) {
		struct dt_run r;
		dt_test_run(&r, (const char *[]){ "dtrain", "train", FLAGS(data_flag), mflag,
						 replicas == 2 ? "--replicas=2" : NULL, NULL },
			    NULL, TASK_WAIT_S);
		if (r.exit_code != 0)
			fprintf(stderr, "%s", r.err);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		DT_CHECK_CONTAINS(r.err, "training keras on image_folder");
		DT_CHECK_CONTAINS(r.out, "eval (test split, 8 examples) at global step 12: accuracy = ");
		if (replicas == 2)
			DT_CHECK_CONTAINS(r.err, "mirrored: 2 replicas");
		DT_CHECK(cli_accuracy_of(r.out) >= 0.0);
		dt_run_release(&r);
		/* the benchmarks' CPU figure: this process's CPU time over steps
		 * 2-12, more than nothing and less than the run's wall time allows */
		json_error_t je;
		json_t *m = json_load_file(metrics, 0, &je);
		DT_CHECK(m != NULL);
		if (m) {
			const double cpu = json_real_value(json_object_get(m, "steady_cpu_seconds"));
			const double wall = json_real_value(json_object_get(m, "train_seconds"));
			DT_CHECK(cpu > 0.0 && cpu <= 2.0 * wall + 0.05);
			json_decref(m);
		}
	}
}

DT_TEST_TIMEOUT(train_flowers, mobilenet_v2_trains_on_two_workers_by_all_reduce, 300)
{
	need_pil();
	char dir[512], data_flag[600];
	free(make_flowers("f", "4", dir, sizeof(dir)));
	snprintf(data_flag, sizeof(data_flag), "--data_dir=%s", dir);
	/* batch 4 per worker: the same global batch 8 */
	const char *args[] = { MODEL, "--problem=image_folder", data_flag, "--validation_split=0.2", "--train_steps=12",
			       "--log_every=6", "--hparams=batch_size=4,learning_rate=0.01", "--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 60);
	char *out0 = task_read(w0, 0), *err0 = task_read(w0, 1);
	DT_CHECK_CONTAINS(out0, "at global step 12: accuracy = ");
	DT_CHECK_CONTAINS(err0, "global batch 8");
	free(out0), free(err0);
}
