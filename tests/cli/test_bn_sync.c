/* Batch norm's moving statistics in every distributed mode. Under the
 * mirrored strategies (TensorFlow's SyncOnRead variables, aggregation
 * MEAN) each replica or worker updates its own copy from its own examples
 * and the checkpoint holds the mean; in the parameter-server modes they live
 * on the ps, which moves them toward each trainer's batch values (once per
 * aggregated step in the synchronous modes). A Keras model conv -> batch norm -> dense trains with
 * the same global batch of 8 on one process alone, with --replicas=2 and
 * with 2 workers by all-reduce (4 examples each, the same halves of each
 * global batch); batch norm's mean over a batch is the mean of its halves'
 * means, so the three runs' moving means agree (up to float rounding), where
 * a replica's own would follow its half only. With --check_replicas_every=1
 * the two workers' variables, statistics included, stay bit-identical. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "cluster_procs.h"
#include "dt_test.h"
#include "train/checkpoint.h"

#define TASK_WAIT_S 120.0
#define BN_CHANNELS 4

static const char model_json[] =
	"{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
	"{\"class_name\": \"InputLayer\", \"config\": {\"name\": \"in\", \"batch_input_shape\": [null, 28, 28, 1]}},"
	"{\"class_name\": \"Conv2D\", \"config\": {\"name\": \"conv\", \"filters\": 4, \"kernel_size\": [3, 3],"
	" \"strides\": [2, 2], \"padding\": \"valid\"}},"
	"{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\", \"momentum\": 0.5, \"epsilon\": 0.001}},"
	"{\"class_name\": \"ReLU\", \"config\": {\"name\": \"relu\"}},"
	"{\"class_name\": \"Flatten\", \"config\": {\"name\": \"flat\"}},"
	"{\"class_name\": \"Dense\", \"config\": {\"name\": \"out\", \"units\": 10, \"activation\": \"softmax\"}}]}}";

/* The latest checkpoint's (of step `want`) `name` (BN_CHANNELS floats) in dir. */
static void read_var(const char *dir, int64_t want, const char *name, float *out)
{
	char path[1024];
	int64_t step = 0;
	struct dt_err err = DT_ERR_INIT;
	memset(out, 0, BN_CHANNELS * sizeof(float));
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
	const struct dt_st_tensor_info *t = dt_st_find(f, name);
	DT_CHECK(t != NULL && t->end - t->begin == BN_CHANNELS * sizeof(float));
	FILE *fp = fopen(path, "rb");
	DT_CHECK(fp != NULL);
	if (t && fp && t->end - t->begin == BN_CHANNELS * sizeof(float)) {
		DT_CHECK(fseek(fp, (long)(f->data_start + t->begin), SEEK_SET) == 0);
		DT_CHECK(fread(out, sizeof(float), BN_CHANNELS, fp) == BN_CHANNELS);
	}
	if (fp)
		fclose(fp);
	dt_st_free(f);
}

/* Largest |a - b| over the channels, relative to the largest |b|. */
static double rel_diff(const float *a, const float *b)
{
	double d = 0, m = 1e-6;
	for (int c = 0; c < BN_CHANNELS; c++) {
		d = fmax(d, fabs((double)a[c] - (double)b[c]));
		m = fmax(m, fabs((double)b[c]));
	}
	return d / m;
}

/* One process: batch 8 for `steps` steps with `replicas` replicas into dir. */
static void run_one(const char *mflag, const char *dir, const char *steps, const char *replicas)
{
	char oflag[1100];
	snprintf(oflag, sizeof(oflag), "--output_dir=%s", dir);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", mflag, "--problem=synthetic", steps, "--log_every=0",
					 "--noeval", oflag, "--hparams=batch_size=8,learning_rate=0.05", replicas, NULL },
		    NULL, TASK_WAIT_S);
	if (r.exit_code != 0)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(bn_sync, moving_statistics_are_the_mean_over_replicas_and_workers, 300)
{
	char model[512], mflag[600], dirs[3][512], wflag[1100];
	dt_test_path(model, sizeof(model), "bn.json");
	dt_test_write_file(model, model_json, strlen(model_json));
	snprintf(mflag, sizeof(mflag), "--keras_model=%s", model);
	static const char *const names[3] = { "alone", "replicas", "workers" };
	for (int i = 0; i < 3; i++)
		dt_test_path(dirs[i], sizeof(dirs[i]), names[i]);
	/* One step: the statistics come from the initial variables alone, so
	 * one process's (the whole batch's mean) is the replicas' mean of their
	 * halves' up to rounding; the variance is not (a half's is smaller). */
	run_one(mflag, dirs[0], "--train_steps=1", "--replicas=1");
	run_one(mflag, dirs[1], "--train_steps=1", "--replicas=2");
	/* Two workers, 4 examples each, the replica check after every step. */
	snprintf(wflag, sizeof(wflag), "--output_dir=%s", dirs[2]);
	const char *args[] = { mflag, "--problem=synthetic", "--train_steps=1", "--log_every=0", "--noeval", wflag,
			       "--hparams=batch_size=4,learning_rate=0.05", "--check_replicas_every=1",
			       "--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 60);

	float mean[3][BN_CHANNELS], var[3][BN_CHANNELS];
	for (int i = 0; i < 3; i++) {
		read_var(dirs[i], 1, "bn/moving_mean", mean[i]);
		read_var(dirs[i], 1, "bn/moving_variance", var[i]);
	}
	fprintf(stderr, "bn/moving_mean[0]: alone %.7g, 2 replicas %.7g, 2 workers %.7g; relative differences %.2g, "
			"%.2g; moving_variance: %.2g, %.2g\n",
		(double)mean[0][0], (double)mean[1][0], (double)mean[2][0], rel_diff(mean[1], mean[0]),
		rel_diff(mean[2], mean[0]), rel_diff(var[1], var[0]), rel_diff(var[2], var[1]));
	DT_CHECK(rel_diff(mean[1], mean[0]) < 1e-5);
	DT_CHECK(rel_diff(mean[2], mean[0]) < 1e-5);
	DT_CHECK(rel_diff(var[1], var[0]) > 1e-5);
	DT_CHECK(rel_diff(var[2], var[1]) < 1e-5);
}

/* The two moving statistics of step `want`'s checkpoint in dir. */
static void read_stats(const char *dir, int64_t want, float *mean, float *var)
{
	read_var(dir, want, "bn/moving_mean", mean);
	read_var(dir, want, "bn/moving_variance", var);
}

/* One process's statistics after one step of the global batch of 8 (alone),
 * and 2 replicas' (the mean of the halves' variances) in the caller's dirs. */
static void baselines(const char *mflag, float mean[2][BN_CHANNELS], float var[2][BN_CHANNELS])
{
	char dirs[2][512];
	dt_test_path(dirs[0], sizeof(dirs[0]), "base-alone");
	dt_test_path(dirs[1], sizeof(dirs[1]), "base-replicas");
	run_one(mflag, dirs[0], "--train_steps=1", "--replicas=1");
	run_one(mflag, dirs[1], "--train_steps=1", "--replicas=2");
	for (int i = 0; i < 2; i++)
		read_stats(dirs[i], 1, mean[i], var[i]);
}

/* model_json with batch norm's momentum `momentum` ("0.5", "0.9") as the
 * file "bn-<momentum>.json"; its --keras_model flag in mflag. */
static void write_model(char *mflag, size_t cap, const char *momentum)
{
	char model[512], name[32], json[sizeof(model_json) + 16];
	const char *at = strstr(model_json, "\"momentum\": 0.5");
	DT_CHECK(at != NULL);
	snprintf(json, sizeof(json), "%.*s\"momentum\": %s%s", (int)(at - model_json), model_json, momentum,
		 at + strlen("\"momentum\": 0.5"));
	snprintf(name, sizeof(name), "bn-%s.json", momentum);
	dt_test_path(model, sizeof(model), name);
	dt_test_write_file(model, json, strlen(json));
	snprintf(mflag, cap, "--keras_model=%s", model);
}

/* The moving statistics are non-trainable state: no optimizer slots in the
 * latest checkpoint of dir (momentum), their kind in its metadata and in
 * `dtrain ckpt inspect`, while the trained variables keep theirs. */
static void check_no_slots(const char *dir)
{
	char path[1024];
	int64_t step = 0;
	struct dt_err err = DT_ERR_INIT;
	enum dt_ckpt_poll found = DT_CKPT_POLL_NONE;
	DT_CHECK_OK(dt_ckpt_latest_path(dir, path, sizeof(path), &step, &found, &err), &err);
	struct dt_st_file *f = NULL;
	DT_CHECK_OK(dt_st_open(path, &f, &err), &err);
	if (!f)
		return;
	DT_CHECK(dt_st_find(f, "bn/gamma/Momentum") != NULL);
	DT_CHECK(dt_st_find(f, "bn/moving_mean/Momentum") == NULL);
	DT_CHECK(dt_st_find(f, "bn/moving_variance/Momentum") == NULL);
	const char *kinds = dt_st_meta(f, "non_trainable");
	DT_CHECK(kinds != NULL);
	DT_CHECK_CONTAINS(kinds ? kinds : "", "\"bn/moving_mean\":\"moving_average\"");
	dt_st_free(f);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "ckpt", "inspect", dir, NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK(strstr(r.out, "bn/moving_variance") && strstr(strstr(r.out, "bn/moving_variance"), "moving_average"));
	DT_CHECK(strstr(r.out, "bn/gamma/Momentum") && strstr(strstr(r.out, "bn/gamma/Momentum"), "slot"));
	dt_run_release(&r);
}

/* The parameter-server modes: the ps's copy, which the chief checkpoints,
 * is what one process computes from the same examples. Asynchronously one
 * trainer with the whole batch of 8; synchronously (--sync, and t2t's
 * in-graph master with two std servers as replicas) two trainers with 4
 * each, the halves of the same global batch: the ps moves the statistics
 * once, toward the mean of the two halves' values (the whole batch's mean,
 * the halves' mean variance). Before, the ps's copy stayed at 0 and 1. */
DT_TEST_TIMEOUT(bn_sync, moving_statistics_live_on_the_ps_in_every_ps_mode, 300)
{
	char mflag[600];
	write_model(mflag, sizeof(mflag), "0.5");
	float base_mean[2][BN_CHANNELS], base_var[2][BN_CHANNELS];
	baselines(mflag, base_mean, base_var);
	static const char *const modes[3] = { "async", "sync", "in_graph" };
	for (int mode = 0; mode < 3; mode++) {
		struct cluster c;
		if (mode == 2)
			cluster_init(&c, "master", 0, 2);
		else
			cluster_init(&c, "chief", mode == 1, 1);
		cluster_output_dir(&c, modes[mode]);
		const char *args[] = { mflag, "--problem=synthetic", "--train_steps=1", "--log_every=0", "--noeval",
				       c.out_flag, mode == 0 ? "--hparams=batch_size=8,learning_rate=0.05,optimizer=momentum"
							     : "--hparams=batch_size=4,learning_rate=0.05,optimizer=momentum",
				       "--connect_timeout=60", mode ? "--sync" : NULL, NULL };
		struct task *head;
		if (mode == 2) {
			const char *std_args[] = { mflag, "--problem=synthetic", "--schedule=run_std_server", c.out_flag,
						   "--hparams=batch_size=4,learning_rate=0.05,optimizer=momentum", NULL };
			cluster_start_train(&c, "ps", 0, std_args);
			cluster_start_train(&c, "ps", 1, std_args);
			head = cluster_start_train(&c, "master", 0, args);
		} else {
			cluster_start_train(&c, "ps", 0, args);
			if (mode == 1)
				cluster_start_train(&c, "worker", 0, args);
			head = cluster_start_train(&c, "chief", 0, args);
		}
		EXPECT_EXIT(&c, head, 0, TASK_WAIT_S);
		for (int i = 0; i < c.n; i++)
			EXPECT_EXIT(&c, &c.tasks[i], 0, 60);
		float mean[BN_CHANNELS], var[BN_CHANNELS];
		read_stats(c.out_dir, 1, mean, var);
		const int halves = mode > 0;
		fprintf(stderr, "%s: bn/moving_mean[0] %.7g (one process %.7g), moving_variance[0] %.7g (%s %.7g); "
				"relative differences %.2g, %.2g\n",
			modes[mode], (double)mean[0], (double)base_mean[0][0], (double)var[0],
			halves ? "2 replicas" : "one process", (double)base_var[halves][0], rel_diff(mean, base_mean[0]),
			rel_diff(var, base_var[halves]));
		DT_CHECK(rel_diff(mean, base_mean[0]) < 1e-5);
		DT_CHECK(rel_diff(var, base_var[halves]) < 1e-5);
		DT_CHECK(rel_diff(mean, (const float[BN_CHANNELS]){ 0 }) > 1e-3); /* moved off the initializer */
		check_no_slots(c.out_dir);
	}
}

/* A ps and its chief, one trainer with batches of 8, to `steps` into dir
 * (a run of dir continues from its latest checkpoint, restored onto the new,
 * empty ps). */
static void ps_run(const char *mflag, const char *dir, int steps)
{
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	char oflag[600], sflag[32];
	snprintf(oflag, sizeof(oflag), "--output_dir=%s", dir);
	snprintf(sflag, sizeof(sflag), "--train_steps=%d", steps);
	const char *args[] = { mflag, "--problem=synthetic", sflag, "--log_every=0", "--noeval", oflag,
			       "--hparams=batch_size=8,learning_rate=0.05", "--connect_timeout=60", NULL };
	cluster_start_train(&c, "ps", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[0], 0, 60);
}

/* A run restarted from its checkpoint (a new ps restored by the resumed
 * chief) continues with the statistics it had. With momentum 0.9 a step
 * keeps 0.9 of them: restarted at 20 and stopped at 21, the variance is
 * within 5% of the run that never stopped, where statistics restored as
 * their initializers (the ps's copy before this) would be off by 0.9 of
 * their distance from 1, over 30% here (checked: the distance at 20). */
DT_TEST_TIMEOUT(bn_sync, moving_statistics_continue_after_a_ps_restore, 300)
{
	char mflag[600], once[512], twice[512];
	write_model(mflag, sizeof(mflag), "0.9");
	dt_test_path(once, sizeof(once), "straight");
	dt_test_path(twice, sizeof(twice), "restarted");
	ps_run(mflag, once, 21);
	ps_run(mflag, twice, 20);
	float mean[BN_CHANNELS], var20[BN_CHANNELS], straight[BN_CHANNELS], restarted[BN_CHANNELS];
	read_stats(twice, 20, mean, var20);
	ps_run(mflag, twice, 21);
	read_stats(once, 21, mean, straight);
	read_stats(twice, 21, mean, restarted);
	const float ones[BN_CHANNELS] = { 1, 1, 1, 1 };
	fprintf(stderr, "moving_variance[0] at 21: straight %.7g, restarted at 20 %.7g (%.7g at 20); relative "
			"difference %.2g, distance from the initializer at 20 %.2g\n",
		(double)straight[0], (double)restarted[0], (double)var20[0], rel_diff(restarted, straight),
		rel_diff(var20, ones));
	DT_CHECK(rel_diff(var20, ones) > 0.35);
	DT_CHECK(rel_diff(restarted, straight) < 0.05);
}

/* Elastic all-reduce: 3 workers, one SIGKILLed mid-run, the ring re-formed
 * with 2 (--min_workers=2); the replica check after every 10 steps compares
 * every variable bit for bit, the moving statistics included, so the
 * survivors' statistics stay the SyncOnRead mean of the ring that remains
 * (a worker keeping its own would be named as diverged), and the final
 * checkpoint holds trained statistics. */
DT_TEST_TIMEOUT(bn_sync, statistics_stay_one_across_the_ring_after_a_worker_loss, 300)
{
	char mflag[600];
	write_model(mflag, sizeof(mflag), "0.9");
	struct cluster c;
	cluster_init(&c, NULL, 3, 0);
	cluster_output_dir(&c, "elastic");
	const char *args[] = { mflag, "--problem=synthetic", "--train_steps=400", "--log_every=50", "--noeval",
			       c.out_flag, "--hparams=batch_size=8,learning_rate=0.05", "--min_workers=2",
			       "--step_timeout=4", "--check_replicas_every=10", "--connect_timeout=60", NULL };
	for (int i = 0; i < 3; i++)
		cluster_start_train(&c, "worker", i, args);
	EXPECT_LOG(&c, &c.tasks[2], "step 100/", TASK_WAIT_S);
	kill(c.tasks[2].pid, SIGKILL);
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	char *err0 = task_read(&c.tasks[0], 1);
	const char *re = strstr(err0, "ring re-formed at step ");
	fprintf(stderr, "worker:0: %.60s\n", re ? re : "(no re-formation)");
	DT_CHECK(re != NULL);
	DT_CHECK_CONTAINS(err0, "it ended with 2 of 3 workers");
	free(err0);
	float mean[BN_CHANNELS], var[BN_CHANNELS];
	read_stats(c.out_dir, 400, mean, var);
	const float ones[BN_CHANNELS] = { 1, 1, 1, 1 };
	DT_CHECK(rel_diff(var, ones) > 0.1);
	cluster_kill_all(&c);
}
