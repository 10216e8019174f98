/* Mirrored training: replicas on threads in one process (--replicas), and
 * multi-worker mirrored training over all-reduce (a cluster with no ps), as
 * separate dtrain processes on loopback: accuracy against one process at
 * the same global batch, seed 002's flow, bit-identical replicas, a worker
 * that never comes, and a worker killed mid-run. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 240.0

/* One process: `dtrain train <args>`; returns its test accuracy. */
static double train_local(const char *const *args)
{
	const char *argv[24] = { "dtrain", "train" };
	int n = 2;
	for (int i = 0; args[i] && n < 23; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	struct dt_run r;
	dt_test_run(&r, argv, NULL, TASK_WAIT_S);
	if (r.exit_code != 0) {
		fprintf(stderr, "%s", r.err);
		dt_test_fail(__FILE__, __LINE__, "dtrain train exited with %d", r.exit_code);
	}
	double acc = cli_accuracy_of(r.out);
	DT_CHECK(acc >= 0);
	dt_run_release(&r);
	return acc;
}

/* ---- one process, N replicas ---------------------------------------------- */

DT_TEST_TIMEOUT(allreduce, mirrored_two_replicas_reach_one_replica_accuracy_mlp, 240)
{
	const char *one[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=800", "--log_every=0", NULL };
	const char *two[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=800", "--log_every=0",
			      "--replicas=2", NULL };
	double a1 = train_local(one), a2 = train_local(two);
	fprintf(stderr, "mlp, batch 64: 1 replica %.4f, 2 replicas %.4f\n", a1, a2);
	DT_CHECK(a1 > 0.8);
	DT_CHECK_NEAR(a2, a1, 0.01);
}

/* The model: cnn (dropout 0.3, so the replicas' masks differ from
 * one replica's; ~20 s of training on an idle 2-core machine). */
DT_TEST_TIMEOUT(allreduce, mirrored_two_replicas_reach_one_replica_accuracy_cnn, 300)
{
	const char *one[] = { "--model=cnn", "--problem=fashion_mnist", "--train_steps=300", "--log_every=0", NULL };
	const char *two[] = { "--model=cnn", "--problem=fashion_mnist", "--train_steps=300", "--log_every=0",
			      "--replicas=2", NULL };
	double a1 = train_local(one), a2 = train_local(two);
	fprintf(stderr, "cnn, batch 64: 1 replica %.4f, 2 replicas %.4f\n", a1, a2);
	DT_CHECK(a1 > 0.8);
	DT_CHECK_NEAR(a2, a1, 0.01);
}

/* t2t's --worker_gpu=N sets the replicas when there is no ps. */
DT_TEST_TIMEOUT(allreduce, worker_gpu_sets_mirrored_replicas, 120)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=5",
					 "--log_every=0", "--worker_gpu=3", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "mirrored: 3 replicas on threads");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=5",
					 "--replicas=0", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--replicas must be between 1 and");
	dt_run_release(&r);
}

/* ---- several processes ---------------------------------------------------- */

/* Seed 002: two workers, the same command on each; worker 0 is the chief and
 * evaluates. Each has batch 32 of its shard: global batch 64, as one process
 * with batch 64. */
DT_TEST_TIMEOUT(allreduce, two_workers_reach_single_process_accuracy_mlp, 300)
{
	const char *args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=800", "--log_every=200",
			       "--hparams=batch_size=32", "--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args); /* the first started waits for the other */
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 60);
	char *out0 = task_read(w0, 0), *out1 = task_read(w1, 0), *err0 = task_read(w0, 1);
	DT_CHECK_CONTAINS(out0, "eval (test split, 10000 examples) at global step 800: accuracy = ");
	DT_CHECK(strstr(out1, "accuracy") == NULL); /* only the chief evaluates */
	DT_CHECK_CONTAINS(err0, "global batch 64");
	double dist = cli_accuracy_of(out0);
	const char *one[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=800", "--log_every=0", NULL };
	double local = train_local(one);
	fprintf(stderr, "mlp, global batch 64: 1 process %.4f, 2 workers %.4f\n", local, dist);
	DT_CHECK(local > 0.8);
	DT_CHECK_NEAR(dist, local, 0.01);
	free(out0), free(out1), free(err0);
}

/* The model: cnn, 2 workers x batch 32 against one process with
 * batch 64 (13 MB of gradients all-reduced per step, in 2 buckets). */
DT_TEST_TIMEOUT(allreduce, two_workers_reach_single_process_accuracy_cnn, 300)
{
	const char *args[] = { "--model=cnn", "--problem=fashion_mnist", "--train_steps=300", "--log_every=100",
			       "--hparams=batch_size=32", "--check_replicas_every=100", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 60);
	char *out0 = task_read(w0, 0), *err0 = task_read(w0, 1);
	DT_CHECK_CONTAINS(out0, "at global step 300: accuracy = ");
	DT_CHECK_CONTAINS(err0, "gradient all-reduce (2 buckets)");
	double dist = cli_accuracy_of(out0);
	const char *one[] = { "--model=cnn", "--problem=fashion_mnist", "--train_steps=300", "--log_every=0", NULL };
	double local = train_local(one);
	fprintf(stderr, "cnn, global batch 64: 1 process %.4f, 2 workers %.4f\n", local, dist);
	DT_CHECK(local > 0.8);
	DT_CHECK_NEAR(dist, local, 0.01);
	free(out0), free(err0);
}

/* A chief and a worker, each with 2 replicas on threads; the replicas'
 * variables are compared (hashed and all-reduced) every 25 steps. */
DT_TEST_TIMEOUT(allreduce, chief_and_worker_with_two_replicas_each_stay_bit_identical, 300)
{
	const char *args[] = { "--model=lenet", "--problem=fashion_mnist", "--train_steps=150", "--log_every=50",
			       "--replicas=2", "--check_replicas_every=25", "--log_level=debug", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 0);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 60);
	char *out = task_read(chief, 0), *cerr = task_read(chief, 1), *werr = task_read(worker, 1);
	DT_CHECK_CONTAINS(out, "at global step 150: accuracy = ");
	DT_CHECK(cli_accuracy_of(out) > 0.6);
	DT_CHECK_CONTAINS(cerr, "step 150: the variables of all 2 replicas are bit-identical");
	DT_CHECK_CONTAINS(werr, "step 150: the variables of all 2 replicas are bit-identical");
	DT_CHECK_CONTAINS(cerr, "mirrored: 2 replicas");
	free(out), free(cerr), free(werr);
}

/* The first one started waits for the others, with a deadline, naming who is missing. */
DT_TEST_TIMEOUT(allreduce, a_worker_that_never_comes_is_named_and_exit_3, 120)
{
	const char *args[] = { "--model=mlp", "--problem=synthetic", "--train_steps=10", "--connect_timeout=2", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 2, 0);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	double t0 = cli_now_s();
	EXPECT_EXIT(&c, chief, 3, 60);
	double took = cli_now_s() - t0;
	char *err = task_read(chief, 1);
	DT_CHECK_CONTAINS(err, "worker:");
	DT_CHECK(took < 30);
	free(err);
}

/* A worker SIGKILLed mid-run: the other fails within 2x the step deadline,
 * naming it, with the retryable exit code 3. */
DT_TEST_TIMEOUT(allreduce, a_killed_worker_fails_the_other_with_exit_3_naming_it, 180)
{
	const char *args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=1000000", "--log_every=20",
			       "--step_timeout=10", "--noeval", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 0);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	EXPECT_LOG(&c, worker, "step 40/", 120);
	task_kill(worker);
	double t0 = cli_now_s();
	EXPECT_EXIT(&c, chief, 3, 20);
	double took = cli_now_s() - t0;
	char *err = task_read(chief, 1);
	fprintf(stderr, "chief failed %.2f s after the kill\n", took);
	DT_CHECK_CONTAINS(err, "worker:0");
	DT_CHECK_CONTAINS(err, "training stopped at step");
	DT_CHECK(took <= 20);
	free(err);
}

/* Runs a 2-worker job to the end; checks that the chief logged `expect`
 * (unless NULL); returns the chief's stdout (malloc'd). */
static char *run_two_workers(const char *const *args, const char *expect)
{
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 60);
	if (expect) {
		char *err = task_read(w0, 1);
		DT_CHECK_CONTAINS(err, expect);
		free(err);
	}
	return task_read(w0, 0);
}

/* The chief saves on its cadence into --output_dir; a job started again
 * resumes from the latest checkpoint (variables, momentum slots, step, input
 * position, broadcast to every worker) and ends exactly where a job that was
 * never interrupted ends. */
DT_TEST_TIMEOUT(allreduce, a_restarted_job_resumes_from_the_chief_checkpoint_bit_for_bit, 300)
{
	char dir[600], straight_dir[600], flag[700], straight_flag[700];
	dt_test_path(dir, sizeof(dir), "ckpt");
	dt_test_path(straight_dir, sizeof(straight_dir), "straight");
	snprintf(flag, sizeof(flag), "--output_dir=%s", dir);
	snprintf(straight_flag, sizeof(straight_flag), "--output_dir=%s", straight_dir);
	const char *hp = "--hparams=optimizer=momentum,momentum=0.9,learning_rate=0.01,lr_schedule=constant,batch_size=32";
	const char *first[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=100", "--log_every=0",
				"--save_checkpoints_steps=50", hp, flag, NULL };
	const char *second[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=160", "--log_every=0",
				 "--save_checkpoints_steps=50", hp, flag, NULL };
	const char *straight[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=160", "--log_every=0",
				   "--save_checkpoints_steps=50", hp, straight_flag, NULL };
	char *a = run_two_workers(first, "saved checkpoint for step 100");
	char *b = run_two_workers(second, "restored step 100 from ");
	char *s = run_two_workers(straight, "no checkpoint in ");
	DT_CHECK_CONTAINS(a, "at global step 100: accuracy = ");
	DT_CHECK_CONTAINS(b, "at global step 160: accuracy = ");
	DT_CHECK_STR_EQ(b, s);
	free(a), free(b), free(s);
}

/* A worker that stops answering (SIGSTOP): the other fails within 2x the
 * step deadline with a timeout naming it, exit 3. */
DT_TEST_TIMEOUT(allreduce, a_stopped_worker_times_out_the_other_naming_it, 180)
{
	const char *args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=1000000", "--log_every=20",
			       "--step_timeout=3", "--noeval", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 0);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	EXPECT_LOG(&c, worker, "step 40/", 120);
	kill(worker->pid, SIGSTOP);
	double t0 = cli_now_s();
	int st = task_wait(chief, 6);
	double took = cli_now_s() - t0;
	kill(worker->pid, SIGCONT);
	task_kill(worker);
	if (st != 3) {
		tasks_dump(c.tasks, c.n);
		cluster_kill_all(&c);
		dt_test_fail(__FILE__, __LINE__, "chief exited with %d within 6 s of the stop, expected 3", st);
	}
	char *err = task_read(chief, 1);
	fprintf(stderr, "chief failed %.2f s after the stop\n", took);
	DT_CHECK_CONTAINS(err, "timed out");
	DT_CHECK_CONTAINS(err, "worker:0");
	free(err);
}

/* Tasks started with different models refuse each other by name (exit 2). */
DT_TEST_TIMEOUT(allreduce, a_worker_with_another_model_is_refused, 120)
{
	struct cluster c;
	cluster_init(&c, "chief", 1, 0);
	const char *mlp[] = { "--model=mlp", "--problem=synthetic", "--train_steps=10", "--connect_timeout=20", NULL };
	const char *lenet[] = { "--model=lenet", "--problem=synthetic", "--train_steps=10", "--connect_timeout=20", NULL };
	struct task *chief = cluster_start_train(&c, "chief", 0, mlp);
	struct task *worker = cluster_start_train(&c, "worker", 0, lenet);
	int a = task_wait(chief, 60), b = task_wait(worker, 60);
	if (a == 0 || b == 0 || (a != 2 && b != 2)) {
		tasks_dump(c.tasks, c.n);
		cluster_kill_all(&c);
		dt_test_fail(__FILE__, __LINE__, "chief exited %d, worker %d; expected a refusal (2)", a, b);
	}
	char *ce = task_read(chief, 1), *we = task_read(worker, 1);
	DT_CHECK(strstr(ce, "model signature differs") || strstr(we, "model signature differs"));
	free(ce), free(we);
}

/* --check_replicas_every catches replicas that are not bit-identical: one
 * task flips one bit of its variables (DTRAIN_TEST_DIVERGE_AT_STEP, a test
 * hook) and both fail at the next check naming it, exit 1. */
DT_TEST_TIMEOUT(allreduce, check_replicas_names_a_diverged_worker, 120)
{
	const char *args[] = { "--model=mlp", "--problem=synthetic", "--train_steps=100", "--log_every=0",
			       "--check_replicas_every=20", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 0);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	const char *argv[] = { "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=100",
			       "--log_every=0", "--check_replicas_every=20", NULL };
	struct task *worker = cluster_start(&c, "worker", 0, NULL, argv,
					    (const char *[]){ "DTRAIN_TEST_DIVERGE_AT_STEP=30", NULL });
	EXPECT_EXIT(&c, chief, 1, 60);
	EXPECT_EXIT(&c, worker, 1, 60);
	char *err = task_read(chief, 1);
	DT_CHECK_CONTAINS(err, "replicas diverged at step 40: the variables of worker:0 differ from those of chief:0 (rank 0)");
	free(err);
}
