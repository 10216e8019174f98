/* Keras names as Keras, Keras 3 and TF.js write them, end to end: a model
 * whose layers carry TF.js's long default names, a 255-byte name, UTF-8
 * and a nested scope ('/') trains, saves a checkpoint holding those names,
 * resumes from it, and trains with 2 workers by all-reduce and with a
 * parameter server (the names travel in the handshake's model signature).
 * A 256-byte name exits 2 saying the bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "cluster_procs.h"
#include "dt_test.h"
#include "train/checkpoint.h"

#define TASK_WAIT_S 120.0

/* The 255-byte name: "l" then 254 'x'. */
static void long_name(char *buf, size_t len)
{
	buf[0] = 'l';
	memset(buf + 1, 'x', len - 1);
	buf[len] = '\0';
}

static void write_model(char *path, size_t cap, const char *file, size_t long_len)
{
	char big[300], text[4096];
	long_name(big, long_len);
	snprintf(text, sizeof(text),
		 "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
		 "{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"input_InputLayer1\", "
		 "\"batch_input_shape\": [null, 28, 28, 1]}},"
		 "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv2d_Conv2D1\", \"filters\": 4, "
		 "\"kernel_size\": [3, 3], \"strides\": [2, 2]}},"
		 "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": "
		 "\"batch_normalization_BatchNormalization1\"}},"
		 "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"re_lu_ReLU1\"}},"
		 "{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"block/conv_\\u00e9\\u03c3\", \"filters\": 4, "
		 "\"kernel_size\": 3, \"strides\": 2, \"activation\": \"relu\"}},"
		 "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flatten_Flatten1\"}},"
		 "{\"class_name\": \"Dense\", \"config\": {\"name\": \"%s\", \"units\": 10, \"activation\": \"softmax\"}}]}}",
		 big);
	dt_test_path(path, cap, file);
	dt_test_write_file(path, text, strlen(text));
}

static void run_ok(const char *const *argv)
{
	struct dt_run r;
	dt_test_run(&r, argv, NULL, TASK_WAIT_S);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

/* The latest checkpoint in dir is of step `want` and holds `name`. */
static void check_ckpt(const char *dir, int64_t want, const char *name)
{
	char path[1024];
	int64_t step = 0;
	struct dt_err err = DT_ERR_INIT;
	enum dt_ckpt_poll found = DT_CKPT_POLL_NONE;
	DT_CHECK_OK(dt_ckpt_latest_path(dir, path, sizeof(path), &step, &found, &err), &err);
	DT_CHECK_INT_EQ(found, DT_CKPT_POLL_FOUND);
	DT_CHECK(step == want);
	if (found != DT_CKPT_POLL_FOUND)
		return;
	struct dt_st_file *f = NULL;
	DT_CHECK_OK(dt_st_open(path, &f, &err), &err);
	if (!f)
		return;
	if (!dt_st_find(f, name))
		dt_test_fail(__FILE__, __LINE__, "checkpoint '%s' has no tensor '%s'", path, name);
	dt_st_free(f);
}

DT_TEST_TIMEOUT(keras_names, long_utf8_and_scoped_names_train_checkpoint_resume_and_travel, 240)
{
	char model[512], mflag[600], dirs[3][512], oflag[1100], big[300], var[400];
	write_model(model, sizeof(model), "names.json", 255);
	snprintf(mflag, sizeof(mflag), "--keras_model=%s", model);
	long_name(big, 255);
	static const char *const names[3] = { "alone", "allreduce", "ps" };
	for (int i = 0; i < 3; i++)
		dt_test_path(dirs[i], sizeof(dirs[i]), names[i]);

	/* one process: 2 steps, then 2 more resumed from the checkpoint */
	snprintf(oflag, sizeof(oflag), "--output_dir=%s", dirs[0]);
	run_ok((const char *[]){ "dtrain", "train", mflag, "--problem=synthetic", "--train_steps=2", "--log_every=0",
				 "--noeval", oflag, "--hparams=batch_size=8", NULL });
	check_ckpt(dirs[0], 2, "batch_normalization_BatchNormalization1/moving_mean");
	check_ckpt(dirs[0], 2, "block/conv_\xc3\xa9\xcf\x83/kernel");
	snprintf(var, sizeof(var), "%s/kernel", big);
	check_ckpt(dirs[0], 2, var);
	run_ok((const char *[]){ "dtrain", "train", mflag, "--problem=synthetic", "--train_steps=4", "--log_every=0",
				 "--noeval", oflag, "--hparams=batch_size=8", NULL });
	check_ckpt(dirs[0], 4, var);

	/* two workers by all-reduce, their variables compared after each step */
	char wflag[1100];
	snprintf(wflag, sizeof(wflag), "--output_dir=%s", dirs[1]);
	const char *args[] = { mflag, "--problem=synthetic", "--train_steps=2", "--log_every=0", "--noeval", wflag,
			       "--hparams=batch_size=4", "--check_replicas_every=1", "--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 60);
	check_ckpt(dirs[1], 2, var);

	/* a chief and a parameter server: the ps judges the chief's signature */
	char pflag[1100];
	snprintf(pflag, sizeof(pflag), "--output_dir=%s", dirs[2]);
	const char *pargs[] = { mflag, "--problem=synthetic", "--train_steps=2", "--log_every=0", "--noeval", pflag,
				"--hparams=batch_size=4", "--connect_timeout=60", NULL };
	struct cluster p;
	cluster_init(&p, "chief", 0, 1);
	struct task *ps0 = cluster_start_train(&p, "ps", 0,
					       (const char *[]){ "--schedule=run_std_server", mflag, "--problem=synthetic",
								 "--connect_timeout=60", NULL });
	struct task *chief = cluster_start_train(&p, "chief", 0, pargs);
	EXPECT_EXIT(&p, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&p, ps0, 0, 60);
	check_ckpt(dirs[2], 2, var);
}

DT_TEST(keras_names, a_name_past_255_bytes_exits_2_saying_the_bound)
{
	char model[512], mflag[600];
	write_model(model, sizeof(model), "too_long.json", 256);
	snprintf(mflag, sizeof(mflag), "--keras_model=%s", model);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", mflag, "--problem=synthetic", "--train_steps=1", "--noeval",
					 NULL },
		    NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "has 256 bytes, more than the 255 allowed");
	dt_run_release(&r);
}
