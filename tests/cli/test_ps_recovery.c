/* Checkpoints and recovery in parameter-server training, as separate dtrain
 * processes on loopback (train/ps_recovery.h): a ps SIGKILLed and started
 * again mid-run, and the chief SIGKILLed and started again, each against an
 * undisturbed run of the same cluster. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define STEPS 1500
#define SAVE_EVERY 100
#define WAIT_S 120.0

/* chief, worker:0 and ps:0 on free loopback ports; the run's output dir in the test's temp dir. */
static void three_tasks(struct cluster *c, const char *name)
{
	cluster_init(c, "chief", 1, 1);
	cluster_output_dir(c, name);
}

/* Starts type:0 as task `name` (a restarted task gets a new name, so its
 * logs are its own), with one more flag `extra` (may be NULL). */
static struct task *start_with(struct cluster *c, const char *type, const char *name, const char *extra)
{
	char steps[32], save[48];
	snprintf(steps, sizeof(steps), "--train_steps=%d", STEPS);
	snprintf(save, sizeof(save), "--save_checkpoints_steps=%d", SAVE_EVERY);
	/* Only the evaluator has --eval_timeout_secs. */
	const char *argv[] = { "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", steps, "--log_every=100",
			       save, c->out_flag, "--connect_timeout=60", extra,
			       strcmp(type, "evaluator") == 0 ? "--eval_timeout_secs=60" : NULL, NULL };
	if (!extra) {
		argv[10] = argv[11];
		argv[11] = NULL;
	}
	return cluster_start(c, type, 0, name, argv, NULL);
}

static struct task *start(struct cluster *c, const char *type, const char *name)
{
	return start_with(c, type, name, NULL);
}

/* The figures of the last "eval (...) at global step S: accuracy = A, loss = L" line. */
static const char *last_eval(const char *out)
{
	const char *p = NULL, *q = out;
	while ((q = strstr(q, "eval (test split")))
		p = q++;
	return p;
}

/* The accuracy of the last eval line of `out`, or -1. */
static double accuracy_of(const char *out)
{
	return cli_accuracy_of(last_eval(out));
}

/* The undisturbed run of the same cluster: its final test accuracy. */
static double undisturbed_accuracy(void)
{
	struct cluster c;
	three_tasks(&c, "calm");
	struct task *ps = start(&c, "ps", "calm_ps0");
	struct task *worker = start(&c, "worker", "calm_worker0");
	struct task *chief = start(&c, "chief", "calm_chief0");
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	char *out = task_read(chief, 0);
	double acc = accuracy_of(out);
	fprintf(stderr, "undisturbed: %s", out);
	free(out);
	DT_CHECK(acc > 0.8);
	return acc;
}

DT_TEST_TIMEOUT(ps_recovery, a_ps_killed_and_restarted_mid_run_is_restored_from_the_latest_checkpoint, 300)
{
	double calm = undisturbed_accuracy();
	struct cluster c;
	three_tasks(&c, "psdies");
	struct task *ps = start(&c, "ps", "ps0");
	struct task *worker = start(&c, "worker", "worker0");
	struct task *chief = start(&c, "chief", "chief0");
	struct task *evaluator = start(&c, "evaluator", "evaluator0");
	/* Mid-run (the chief's 300th step is near global step 600), after several checkpoints. */
	EXPECT_LOG(&c, chief, "I step 300 (global ", WAIT_S);
	task_kill(ps);
	struct task *again = start(&c, "ps", "ps0_again");
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, again, 0, 30);
	EXPECT_EXIT(&c, evaluator, 0, 90);

	char *cerr = task_read(chief, 1), *werr = task_read(worker, 1), *perr = task_read(again, 1);
	char *out = task_read(chief, 0), *eout = task_read(evaluator, 0);
	fprintf(stderr, "ps killed: %s", out);
	/* Both trainers noticed and went on; the chief restored the newest checkpoint. */
	DT_CHECK_CONTAINS(cerr, "lost ps:0 at 127.0.0.1:");
	DT_CHECK_CONTAINS(cerr, "reconnected to ps:0 (a new process)");
	DT_CHECK_CONTAINS(werr, "reconnected to ps:0 (a new process)");
	DT_CHECK_CONTAINS(perr, "restored by chief:0");
	/* Steps lost: from the global step the chief last saw to the one restored,
	 * at most one checkpoint interval, plus the few steps the worker may add
	 * while the chief does one (a save is due when the step crosses a
	 * multiple of the interval, and the ps may die just before it). */
	const char *r = strstr(cerr, "onto the parameter servers: global step ");
	DT_CHECK(r != NULL);
	long long seen = 0, restored = 0;
	DT_CHECK_INT_EQ(sscanf(r, "onto the parameter servers: global step %lld -> %lld", &seen, &restored), 2);
	fprintf(stderr, "lost steps %lld -> %lld\n", seen, restored);
	DT_CHECK(restored >= 2 * SAVE_EVERY && restored <= seen && seen - restored <= SAVE_EVERY + 5);
	/* The run ends at the step count once (redone steps are not counted twice). */
	DT_CHECK_CONTAINS(cerr, "ended the run on 1 parameter server(s) at global step 150");
	/* Accuracy as good as the undisturbed run's. */
	double acc = accuracy_of(out);
	DT_CHECK(acc > 0 && acc >= calm - 0.01 && acc <= calm + 0.01);
	/* The evaluator's figures for the final checkpoint are the chief's, to the digit. */
	const char *mine = last_eval(out), *its = last_eval(eout);
	DT_CHECK(mine && its);
	DT_CHECK_STR_EQ(its, mine);
	free(cerr), free(werr), free(perr), free(out), free(eout);
}

DT_TEST_TIMEOUT(ps_recovery, a_chief_killed_and_restarted_continues_from_the_live_ps, 300)
{
	double calm = undisturbed_accuracy();
	struct cluster c;
	three_tasks(&c, "chiefdies");
	struct task *ps = start(&c, "ps", "ps0");
	struct task *worker = start(&c, "worker", "worker0");
	struct task *chief = start(&c, "chief", "chief0");
	EXPECT_LOG(&c, chief, "I step 300 (global ", WAIT_S);
	task_kill(chief);
	/* The worker trains on while the chief is away. */
	char *before = task_read(worker, 1);
	size_t lines = 0;
	for (const char *q = before; (q = strstr(q, "(global ")); q++)
		lines++;
	free(before);
	int trained_alone = 0;
	for (int i = 0; i < 400 && !trained_alone; i++) {
		char *now = task_read(worker, 1);
		size_t k = 0;
		for (const char *q = now; (q = strstr(q, "(global ")); q++)
			k++;
		trained_alone = k > lines || strstr(now, "did ") != NULL;
		free(now);
		if (!trained_alone)
			cli_sleep_ms(50);
	}
	DT_CHECK(trained_alone);
	struct task *again = start(&c, "chief", "chief0_again");
	EXPECT_EXIT(&c, again, 0, WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	char *aerr = task_read(again, 1), *out = task_read(again, 0);
	fprintf(stderr, "chief killed: %s", out);
	DT_CHECK_CONTAINS(aerr, "ps:0 is already initialized (global step ");
	DT_CHECK_CONTAINS(aerr, "ended the run on 1 parameter server(s) at global step 150");
	double acc = accuracy_of(out);
	DT_CHECK(acc > 0 && acc >= calm - 0.01 && acc <= calm + 0.01);
	free(aerr), free(out);
}

DT_TEST_TIMEOUT(ps_recovery, a_ps_that_does_not_come_back_fails_the_trainers_with_exit_3_naming_it, 120)
{
	struct cluster c;
	three_tasks(&c, "psgone");
	struct task *ps = start(&c, "ps", "ps0");
	/* --connect_timeout=60 comes first; the later 3 wins. */
	struct task *worker = start_with(&c, "worker", "worker0", "--connect_timeout=3");
	struct task *chief = start_with(&c, "chief", "chief0", "--connect_timeout=3");
	EXPECT_LOG(&c, chief, "I step 300 (global ", WAIT_S);
	task_kill(ps);
	EXPECT_EXIT(&c, chief, 3, 60);
	EXPECT_EXIT(&c, worker, 3, 60);
	for (int i = 0; i < 2; i++) {
		char *e = task_read(i ? worker : chief, 1);
		DT_CHECK_CONTAINS(e, "error: training stopped at global step ");
		DT_CHECK_CONTAINS(e, "did not come back within --connect_timeout=3 s: cannot connect to ps:0 at 127.0.0.1:");
		free(e);
	}
}

DT_TEST_TIMEOUT(ps_recovery, a_ps_restarted_before_any_checkpoint_gets_the_chiefs_copy, 120)
{
	struct cluster c;
	three_tasks(&c, "nockpt");
	/* A cadence the run never reaches: no checkpoint exists when the ps dies. */
	struct task *ps = start_with(&c, "ps", "ps0", "--save_checkpoints_steps=100000");
	struct task *worker = start_with(&c, "worker", "worker0", "--save_checkpoints_steps=100000");
	struct task *chief = start_with(&c, "chief", "chief0", "--save_checkpoints_steps=100000");
	EXPECT_LOG(&c, chief, "I step 300 (global ", WAIT_S);
	task_kill(ps);
	struct task *again = start(&c, "ps", "ps0_again");
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, again, 0, 30);
	char *cerr = task_read(chief, 1), *out = task_read(chief, 0);
	DT_CHECK_CONTAINS(cerr, "no checkpoint to restore ps:0 from: re-initializing it from this chief's latest copy");
	DT_CHECK_CONTAINS(cerr, "ended the run on 1 parameter server(s) at global step 150");
	/* It lost only Adam's slots, not the trained values. */
	DT_CHECK(accuracy_of(out) > 0.84);
	free(cerr), free(out);
}
