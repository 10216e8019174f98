/* Keras regularizers and constraints in every mode (nn/regularize.h): a
 * model whose conv kernel has an L2 regularizer and a MaxNorm(0.05) over
 * axes [0, 1, 2] (one norm per filter), and whose output has an L1L2 one,
 * trains alone, with --replicas=2, with 2 workers by all-reduce and with
 * t2t's in-graph master; the progress line reports the regularization
 * apart and every filter of the saved kernel is within the norm. With a
 * parameter server the regularizers train as they are and the constraint
 * is refused, exit 2, naming the layer, the field and the mode. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "cluster_procs.h"
#include "dt_test.h"
#include "train/checkpoint.h"

#define TASK_WAIT_S 120.0
#define FILTERS 4
#define KERNEL (3 * 3 * 1 * FILTERS)

static void write_model(char *path, size_t cap, const char *file, int constraint)
{
	char text[2048];
	snprintf(text, sizeof(text),
		 "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
		 "{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\": [null, 28, 28, 1]}},"
		 "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv\", \"filters\": %d, \"kernel_size\": [3, 3],"
		 " \"strides\": [2, 2], \"activation\": \"relu\","
		 " \"kernel_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": 0.01}}%s}},"
		 "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}},"
		 "{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 10, \"activation\": \"softmax\","
		 " \"kernel_regularizer\": {\"class_name\": \"L1L2\", \"config\": {\"l1\": 0.001, \"l2\": 0.001}}}}]}}",
		 FILTERS,
		 constraint ? ", \"kernel_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": 0.05, "
			      "\"axis\": [0, 1, 2]}}"
			    : "");
	dt_test_path(path, cap, file);
	dt_test_write_file(path, text, strlen(text));
}

/* Every filter of the latest checkpoint's conv/kernel in dir is within the norm. */
static void check_norms(const char *dir)
{
	char path[1024];
	int64_t step = 0;
	struct dt_err err = DT_ERR_INIT;
	enum dt_ckpt_poll found = DT_CKPT_POLL_NONE;
	DT_CHECK_OK(dt_ckpt_latest_path(dir, path, sizeof(path), &step, &found, &err), &err);
	DT_CHECK_INT_EQ(found, DT_CKPT_POLL_FOUND);
	if (found != DT_CKPT_POLL_FOUND)
		return;
	struct dt_st_file *f = NULL;
	DT_CHECK_OK(dt_st_open(path, &f, &err), &err);
	if (!f)
		return;
	const struct dt_st_tensor_info *t = dt_st_find(f, "conv/kernel");
	float k[KERNEL] = { 0 };
	FILE *fp = fopen(path, "rb");
	DT_CHECK(t != NULL && fp != NULL && t->end - t->begin == sizeof(k));
	if (t && fp && t->end - t->begin == sizeof(k)) {
		DT_CHECK(fseek(fp, (long)(f->data_start + t->begin), SEEK_SET) == 0);
		DT_CHECK(fread(k, sizeof(float), KERNEL, fp) == KERNEL);
	}
	if (fp)
		fclose(fp);
	dt_st_free(f);
	for (int o = 0; o < FILTERS; o++) {
		double n = 0;
		for (int i = o; i < KERNEL; i += FILTERS)
			n += (double)k[i] * (double)k[i];
		if (!(sqrt(n) <= 0.05 + 1e-6) || !(sqrt(n) > 0.0))
			dt_test_fail(__FILE__, __LINE__, "%s: filter %d has norm %g, want (0, 0.05]", dir, o, sqrt(n));
	}
}

static void run_ok(const char *mflag, const char *dir, const char *replicas)
{
	char oflag[1100];
	snprintf(oflag, sizeof(oflag), "--output_dir=%s", dir);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", mflag, "--problem=synthetic", "--train_steps=3", "--log_every=1",
					 "--noeval", oflag, "--hparams=batch_size=8,learning_rate=0.5", replicas, NULL },
		    NULL, TASK_WAIT_S);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "(regularization ");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(keras_regularize, constraint_holds_alone_with_replicas_all_reduce_and_in_graph, 240)
{
	char model[512], mflag[600], dirs[3][512];
	write_model(model, sizeof(model), "reg.json", 1);
	snprintf(mflag, sizeof(mflag), "--keras_model=%s", model);
	static const char *const names[3] = { "alone", "replicas", "workers" };
	for (int i = 0; i < 3; i++)
		dt_test_path(dirs[i], sizeof(dirs[i]), names[i]);
	run_ok(mflag, dirs[0], "--replicas=1");
	check_norms(dirs[0]);
	run_ok(mflag, dirs[1], "--replicas=2");
	check_norms(dirs[1]);
	char wflag[1100];
	snprintf(wflag, sizeof(wflag), "--output_dir=%s", dirs[2]);
	const char *args[] = { mflag, "--problem=synthetic", "--train_steps=3", "--log_every=1", "--noeval", wflag,
			       "--hparams=batch_size=4,learning_rate=0.5", "--check_replicas_every=1",
			       "--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 60);
	char *log = task_read(w0, 1);
	DT_CHECK(log && strstr(log, "(regularization "));
	free(log);
	check_norms(dirs[2]);

	/* t2t's in-graph master holds the variables: it constrains them */
	char gdir[512], gflag[1100];
	dt_test_path(gdir, sizeof(gdir), "in_graph");
	snprintf(gflag, sizeof(gflag), "--output_dir=%s", gdir);
	const char *margs[] = { mflag, "--problem=synthetic", "--train_steps=3", "--log_every=1", "--noeval", gflag,
				"--hparams=batch_size=4,learning_rate=0.5", "--sync", "--connect_timeout=60", NULL };
	struct cluster g;
	cluster_init(&g, "master", 0, 1);
	struct task *s0 = cluster_start_train(&g, "ps", 0,
					      (const char *[]){ "--schedule=run_std_server", mflag, "--problem=synthetic",
								"--connect_timeout=60", NULL });
	struct task *master = cluster_start_train(&g, "master", 0, margs);
	EXPECT_EXIT(&g, master, 0, TASK_WAIT_S);
	EXPECT_EXIT(&g, s0, 0, 60);
	check_norms(gdir);
}

DT_TEST_TIMEOUT(keras_regularize, a_parameter_server_trains_regularizers_and_refuses_the_constraint, 240)
{
	char model[512], plain[512], mflag[600], pflag[600], dir[512], oflag[1100];
	write_model(model, sizeof(model), "constrained.json", 1);
	write_model(plain, sizeof(plain), "regularized.json", 0);
	snprintf(mflag, sizeof(mflag), "--keras_model=%s", model);
	snprintf(pflag, sizeof(pflag), "--keras_model=%s", plain);
	dt_test_path(dir, sizeof(dir), "ps");
	snprintf(oflag, sizeof(oflag), "--output_dir=%s", dir);

	/* regularizers only: trains through the ps */
	const char *args[] = { pflag, "--problem=synthetic", "--train_steps=3", "--log_every=1", "--noeval", oflag,
			       "--hparams=batch_size=4", "--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0,
					       (const char *[]){ "--schedule=run_std_server", pflag, "--problem=synthetic",
								 "--connect_timeout=60", NULL });
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, ps0, 0, 60);
	char *log = task_read(chief, 1);
	DT_CHECK(log && strstr(log, "(regularization "));
	free(log);

	/* with the constraint: refused before training, naming field and mode */
	char oflag2[1100], dir2[512];
	dt_test_path(dir2, sizeof(dir2), "ps2");
	snprintf(oflag2, sizeof(oflag2), "--output_dir=%s", dir2);
	const char *cargs[] = { mflag, "--problem=synthetic", "--train_steps=3", "--noeval", oflag2, "--connect_timeout=60",
				NULL };
	struct cluster p;
	cluster_init(&p, "chief", 0, 1);
	struct task *ps1 = cluster_start_train(&p, "ps", 0,
					       (const char *[]){ "--schedule=run_std_server", mflag, "--problem=synthetic",
								 "--connect_timeout=60", NULL });
	struct task *chief2 = cluster_start_train(&p, "chief", 0, cargs);
	EXPECT_EXIT(&p, chief2, 2, TASK_WAIT_S);
	log = task_read(chief2, 1);
	DT_CHECK(log != NULL);
	if (log) {
		DT_CHECK_CONTAINS(log, "layer 'conv': field 'kernel_constraint' is not supported in parameter_server");
	}
	free(log);
	(void)ps1;
	cluster_kill_all(&p);
}
