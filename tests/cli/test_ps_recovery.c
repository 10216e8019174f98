/* Checkpoints and recovery in parameter-server training, as separate dtrain
 * processes on loopback (train/ps_recovery.h): a ps SIGKILLed and started
 * again mid-run, and the chief SIGKILLed and started again, each against an
 * undisturbed run of the same cluster; a ps paused longer than two HELLO
 * deadlines, a ps killed again during its own restore, a worker waiting for
 * the model across a ps restart, trainers racing for the last step, and a
 * worker paused across the end of the run. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Starts type:index as task `name` (a restarted task gets a new name, so
 * its logs are its own), with one more flag `extra` (may be NULL) and the
 * environment entries `env` (NULL-terminated, may be NULL). */
static struct task *start_full(struct cluster *c, const char *type, int index, const char *name, const char *extra,
			       const char *const *env)
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
	return cluster_start(c, type, index, name, argv, env);
}

static struct task *start_with(struct cluster *c, const char *type, const char *name, const char *extra)
{
	return start_full(c, type, 0, name, extra, NULL);
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
	/* What was restored: the newest checkpoint, the last the chief saved
	 * before the loss (a save is a snapshot of the ps: its global step, which
	 * the worker may have moved past the chief's own last step, so it can
	 * be above `seen`). Steps lost: a save is due whenever the chief sees
	 * the step cross a multiple of the interval, so between the restored
	 * checkpoint and the last step the chief saw at most one multiple was
	 * crossed unsaved (the save the loss interrupted). These hold however
	 * far the worker runs ahead of a chief kept off its core: a bound in
	 * steps ("seen - restored <= 105") did not, on a loaded host. */
	const char *r = strstr(cerr, "onto the parameter servers: global step ");
	DT_CHECK(r != NULL);
	long long seen = 0, restored = 0, saved = -1;
	DT_CHECK_INT_EQ(sscanf(r, "onto the parameter servers: global step %lld -> %lld", &seen, &restored), 2);
	for (const char *q = cerr; r && (q = strstr(q, "saved checkpoint for step ")) && q < r; q++)
		DT_CHECK_INT_EQ(sscanf(q, "saved checkpoint for step %lld", &saved), 1);
	fprintf(stderr, "lost steps %lld -> %lld (the last checkpoint saved before the loss: %lld)\n", seen, restored,
		saved);
	DT_CHECK_INT_EQ(restored, saved);
	DT_CHECK(restored >= 2 * SAVE_EVERY);
	DT_CHECK(seen / SAVE_EVERY <= restored / SAVE_EVERY + 1);
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
		/* The error names the deadline that ended the wait, and the last failure. */
		DT_CHECK_CONTAINS(e, "cannot reach ps:0 at 127.0.0.1:");
		DT_CHECK_CONTAINS(e, " within --connect_timeout=3 s (");
		DT_CHECK_CONTAINS(e, "; the last: cannot connect to ps:0 at 127.0.0.1:");
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

/* One line of `text` is "<prefix><value>\n"-exact: `line` must end there. */
static void check_line_ends(const char *text, const char *line)
{
	const char *p = strstr(text, line);
	DT_CHECK(p != NULL);
	if (p)
		DT_CHECK(p[strlen(line)] == '\n');
}

DT_TEST_TIMEOUT(ps_recovery, a_ps_paused_for_longer_than_two_hello_deadlines_is_waited_for, 150)
{
	struct cluster c;
	three_tasks(&c, "pspaused");
	struct task *ps = start(&c, "ps", "ps0");
	struct task *worker = start(&c, "worker", "worker0");
	struct task *chief = start(&c, "chief", "chief0");
	EXPECT_LOG(&c, chief, "I step 300 (global ", WAIT_S);
	/* 25 s: the trainers notice the silence at 10 s (the net default), then
	 * each HELLO gets no answer for 10 s; one attempt was all there was. */
	DT_CHECK(kill(ps->pid, SIGSTOP) == 0);
	cli_sleep_ms(25000);
	DT_CHECK(kill(ps->pid, SIGCONT) == 0);
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	for (int i = 0; i < 2; i++) {
		char *e = task_read(i ? worker : chief, 1);
		DT_CHECK_CONTAINS(e, "lost ps:0 at 127.0.0.1:");
		DT_CHECK_CONTAINS(e, "no data from ps:0 at 127.0.0.1:");
		DT_CHECK_CONTAINS(e, "reconnected to ps:0 (the same process) after ");
		DT_CHECK(strstr(e, "error:") == NULL);
		free(e);
	}
	char *cerr = task_read(chief, 1);
	check_line_ends(cerr, "ended the run on 1 parameter server(s) at global step 1500");
	free(cerr);
}

DT_TEST_TIMEOUT(ps_recovery, a_ps_killed_during_its_own_restore_is_restored_again, 180)
{
	struct cluster c;
	three_tasks(&c, "restoredies");
	struct task *ps = start(&c, "ps", "ps0");
	struct task *worker = start(&c, "worker", "worker0");
	/* The chief's restores pause 3 s between the global step and the
	 * shards (test hook), so the second kill lands inside one. */
	const char *env[] = { "DTRAIN_TEST_RESTORE_DELAY_S=3", NULL };
	struct task *chief = start_full(&c, "chief", 0, "chief0", NULL, env);
	EXPECT_LOG(&c, chief, "I step 300 (global ", WAIT_S);
	task_kill(ps);
	struct task *second = start(&c, "ps", "ps0_second");
	EXPECT_LOG(&c, chief, "the restore pauses for 3 s", 60);
	task_kill(second);
	struct task *third = start(&c, "ps", "ps0_third");
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, third, 0, 30);
	char *cerr = task_read(chief, 1), *werr = task_read(worker, 1), *perr = task_read(third, 1);
	DT_CHECK_CONTAINS(cerr, "a parameter server was lost again during recovery pass 1 (cannot restore the checkpoint");
	DT_CHECK_CONTAINS(cerr, "restored global step ");
	DT_CHECK_CONTAINS(perr, "restored by chief:0");
	DT_CHECK_CONTAINS(werr, "reconnected to ps:0 (a new process)");
	check_line_ends(cerr, "ended the run on 1 parameter server(s) at global step 1500");
	free(cerr), free(werr), free(perr);
}

DT_TEST_TIMEOUT(ps_recovery, a_worker_waiting_for_the_model_keeps_waiting_across_a_ps_restart, 120)
{
	struct cluster c;
	three_tasks(&c, "waitrestart");
	struct task *ps = start(&c, "ps", "ps0");
	struct task *worker = start(&c, "worker", "worker0");
	EXPECT_LOG(&c, worker, "waiting for model: ps:0 not initialized", WAIT_S);
	task_kill(ps);
	struct task *again = start(&c, "ps", "ps0_again");
	EXPECT_LOG(&c, worker, "reconnected to ps:0 (a new process)", 60);
	struct task *chief = start(&c, "chief", "chief0");
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, again, 0, 30);
	char *werr = task_read(worker, 1);
	DT_CHECK_CONTAINS(werr, "lost ps:0 at 127.0.0.1:");
	DT_CHECK(strstr(werr, "error:") == NULL);
	free(werr);
}

DT_TEST_TIMEOUT(ps_recovery, trainers_racing_for_the_last_step_stop_at_train_steps_exactly, 150)
{
	/* Four trainers each take "the last step" from what they last saw. */
	struct cluster c;
	cluster_init(&c, "chief", 3, 1);
	cluster_output_dir(&c, "race");
	struct task *ps = start_full(&c, "ps", 0, "ps0", "--nops_overlap", NULL);
	struct task *w[3];
	for (int i = 0; i < 3; i++) {
		char name[24];
		snprintf(name, sizeof(name), "worker%d", i);
		w[i] = start_full(&c, "worker", i, name, "--nops_overlap", NULL);
	}
	struct task *chief = start_full(&c, "chief", 0, "chief0", "--nops_overlap", NULL);
	EXPECT_EXIT(&c, chief, 0, WAIT_S);
	for (int i = 0; i < 3; i++)
		EXPECT_EXIT(&c, w[i], 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	char *cerr = task_read(chief, 1), *perr = task_read(ps, 1);
	check_line_ends(cerr, "ended the run on 1 parameter server(s) at global step 1500");
	DT_CHECK_CONTAINS(perr, "ended the run at global step 1500\n");
	char path[700];
	snprintf(path, sizeof(path), "%s/model.ckpt-1500.safetensors", c.out_dir);
	DT_CHECK(access(path, F_OK) == 0);
	snprintf(path, sizeof(path), "%s/checkpoint", c.out_dir);
	char *state = cli_read_file(path);
	DT_CHECK(state != NULL);
	if (state)
		DT_CHECK_CONTAINS(state, "model_checkpoint_path: \"model.ckpt-1500.safetensors\"\n");
	free(state), free(cerr), free(perr);
}

DT_TEST_TIMEOUT(ps_recovery, a_worker_paused_across_the_end_of_the_run_exits_0, 150)
{
	struct cluster c;
	three_tasks(&c, "pausedend");
	struct task *ps = start(&c, "ps", "ps0");
	struct task *worker = start(&c, "worker", "worker0");
	struct task *chief = start(&c, "chief", "chief0");
	EXPECT_LOG(&c, worker, "I step 100 (global ", WAIT_S);
	DT_CHECK(kill(worker->pid, SIGSTOP) == 0);
	/* The run may not end before the ps has dropped the paused worker as
	 * silent (10 s): the chief is away meanwhile, then finishes the run. */
	task_kill(chief);
	EXPECT_LOG(&c, ps, "closed the connection: no data from worker:0", 60);
	struct task *again = start(&c, "chief", "chief0_again");
	EXPECT_EXIT(&c, again, 0, WAIT_S);
	EXPECT_EXIT(&c, ps, 0, 30);
	DT_CHECK(kill(worker->pid, SIGCONT) == 0);
	/* Within --connect_timeout=60: it does not wait for a ps that is gone. */
	EXPECT_EXIT(&c, worker, 0, 30);
	char *werr = task_read(worker, 1);
	DT_CHECK_CONTAINS(werr, "the run has ended: ");
	DT_CHECK_CONTAINS(werr, "model.ckpt-1500.safetensors holds the final checkpoint (global step 1500, --train_steps=1500)");
	free(werr);
}
