/* --eval_every on the chief of the synchronous modes, as separate dtrain
 * processes on loopback: multi-worker mirrored training (every rank
 * evaluates its shard of the test split, rank 0 logs the sum), synchronous
 * training through the ps and t2t's in-graph master (the chief evaluates a
 * copy of the variables on a thread of its own while training goes on).
 * The asynchronous chief's --eval_every is tested in test_ps_train.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 120.0

/* The accuracy on the "eval at step <step>: accuracy A loss L" line of
 * `log`, or -1 when there is no such line. */
static double eval_line_accuracy(const char *log, long step)
{
	char key[64];
	snprintf(key, sizeof(key), "eval at step %ld: accuracy ", step);
	const char *p = log ? strstr(log, key) : NULL;
	return p ? atof(p + strlen(key)) : -1;
}

/* How many "eval at step " lines `log` holds. */
static int eval_lines(const char *log)
{
	int n = 0;
	for (const char *p = strstr(log, "eval at step "); p && n < 1000; p = strstr(p + 1, "eval at step "))
		n++;
	return n;
}

/* Two workers, rank 0 started with --eval_every=20 and rank 1 without:
 * rank 1 follows rank 0's, both evaluate at steps 20 and 40 (60 is the
 * last, evaluated at the end as before), only rank 0 logs, both exit 0. The
 * distributed evaluation at step 40 gives the accuracy the final
 * evaluation of a 40-step run gives (same variables: a constant learning
 * rate, and the all-reduce is deterministic). */
DT_TEST_TIMEOUT(eval_every, allreduce_chief_evaluates_every_n_steps, 180)
{
	const char *args0[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=60", "--log_every=0",
				"--hparams=batch_size=32,lr_schedule=constant", "--eval_every=20", NULL };
	const char *args1[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=60", "--log_every=0",
				"--hparams=batch_size=32,lr_schedule=constant", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args0);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args1);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 60);
	char *out0 = task_read(w0, 0), *err0 = task_read(w0, 1), *err1 = task_read(w1, 1);
	fprintf(stderr, "all-reduce --eval_every=20:\n%s", err0);
	DT_CHECK(eval_line_accuracy(err0, 20) > 0.3);
	DT_CHECK(eval_line_accuracy(err0, 40) > 0.3);
	DT_CHECK_INT_EQ(eval_lines(err0), 2); /* not at step 60: the final evaluation is that one */
	DT_CHECK_CONTAINS(out0, "eval (test split, 10000 examples) at global step 60: accuracy = ");
	DT_CHECK_INT_EQ(eval_lines(err1), 0);
	DT_CHECK_CONTAINS(err1, "evaluating every 20 steps as worker:0 does (this task has --eval_every=0)");
	DT_CHECK(strstr(err0, "--eval_every is built for") == NULL);

	const char *short_run[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=40", "--log_every=0",
				    "--hparams=batch_size=32,lr_schedule=constant", NULL };
	struct cluster s;
	cluster_init(&s, NULL, 2, 0);
	struct task *s0 = cluster_start_train(&s, "worker", 0, short_run);
	struct task *s1 = cluster_start_train(&s, "worker", 1, short_run);
	EXPECT_EXIT(&s, s0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&s, s1, 0, 60);
	char *sout = task_read(s0, 0);
	DT_CHECK_CONTAINS(sout, "at global step 40: accuracy = ");
	double at40 = strstr(sout, "accuracy = ") ? atof(strstr(sout, "accuracy = ") + strlen("accuracy = ")) : -1;
	fprintf(stderr, "step 40: %.4f sharded during the run, %.4f at the end of a 40-step run\n",
		eval_line_accuracy(err0, 40), at40);
	DT_CHECK_NEAR(eval_line_accuracy(err0, 40), at40, 1e-6);
	free(out0), free(err0), free(err1), free(sout);
}

/* Synchronous training through one ps with a chief and a worker (two
 * trainers): evaluation lines at steps 20 and 40, none on
 * the worker, every task exits 0. */
DT_TEST_TIMEOUT(eval_every, sync_chief_evaluates_every_n_steps, 180)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=60", "--log_every=0",
				     "--sync", "--eval_every=20", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps = cluster_start_train(&c, "ps", 0, args);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	char *out = task_read(chief, 0), *ce = task_read(chief, 1), *we = task_read(worker, 1);
	fprintf(stderr, "sync --eval_every=20:\n%s", ce);
	DT_CHECK(eval_line_accuracy(ce, 20) > 0.3);
	DT_CHECK(eval_line_accuracy(ce, 40) > 0.3);
	DT_CHECK_INT_EQ(eval_lines(ce), 2);
	DT_CHECK_CONTAINS(out, "eval (test split, 10000 examples) at global step 60: accuracy = ");
	DT_CHECK_INT_EQ(eval_lines(we), 0);
	free(out), free(ce), free(we);
}

/* The same with an evaluation that takes 8 s (DTRAIN_TEST_EVAL_DELAY_S),
 * twice the --sync_timeout: the worker must not wait for it at the barrier,
 * so every step is done and every task exits 0. (One evaluation during the
 * run: a second one due before the first ends would make the chief wait.) */
DT_TEST_TIMEOUT(eval_every, sync_slow_evaluation_does_not_hold_the_barrier, 180)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=150", "--log_every=0",
				     "--sync", "--sync_timeout=4", "--eval_every=100", NULL };
	const char *const slow_eval[] = { "DTRAIN_TEST_EVAL_DELAY_S=8", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps = cluster_start_train(&c, "ps", 0, args);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	const char *argv[16] = { "dtrain", "train" };
	for (int i = 0; args[i]; i++)
		argv[2 + i] = args[i];
	struct task *chief = cluster_start(&c, "chief", 0, NULL, argv, slow_eval);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	char *out = task_read(chief, 0), *ce = task_read(chief, 1), *we = task_read(worker, 1);
	fprintf(stderr, "sync --eval_every=100, 8 s evaluation, --sync_timeout=4:\n%s", ce);
	DT_CHECK(eval_line_accuracy(ce, 100) > 0.5);
	DT_CHECK_INT_EQ(eval_lines(ce), 1);
	DT_CHECK_CONTAINS(ce, "did 150 of 150 synchronous steps");
	DT_CHECK_CONTAINS(out, "eval (test split, 10000 examples) at global step 150: accuracy = ");
	DT_CHECK_INT_EQ(eval_lines(we), 0);
	free(out), free(ce), free(we);
}

/* t2t's in-graph layout: a master and one std server; the master evaluates
 * while the std server computes the next steps. Each evaluation takes 1 s
 * more (DTRAIN_TEST_EVAL_DELAY_S), so the one of step 30 is most likely
 * still running at step 60 and the master waits for it, turning its loop:
 * both lines still come, and everyone exits 0. */
DT_TEST_TIMEOUT(eval_every, in_graph_master_evaluates_every_n_steps, 180)
{
	struct cluster c;
	cluster_init(&c, "master", 0, 1);
	struct task *ps = cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", "--model=mlp",
									     "--problem=fashion_mnist", NULL });
	const char *const slow_eval[] = { "DTRAIN_TEST_EVAL_DELAY_S=1", NULL };
	struct task *master = cluster_start(&c, "master", 0, NULL, (const char *[]){
		"dtrain", "train", "--sync", "--model=mlp", "--problem=fashion_mnist", "--train_steps=90", "--log_every=0",
		"--eval_every=30", "--eval", "--log_level=debug", NULL }, slow_eval);
	EXPECT_EXIT(&c, master, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, ps, 0, 30);
	char *out = task_read(master, 0), *me = task_read(master, 1);
	fprintf(stderr, "in-graph --eval_every=30:\n%s", me);
	DT_CHECK(eval_line_accuracy(me, 30) > 0.3);
	DT_CHECK(eval_line_accuracy(me, 60) > 0.3);
	DT_CHECK_INT_EQ(eval_lines(me), 2);
	DT_CHECK_CONTAINS(out, "at global step 90: accuracy = ");
	free(out), free(me);
}
