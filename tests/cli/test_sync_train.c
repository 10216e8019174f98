/* Synchronous training as separate dtrain processes on loopback: through the
 * parameter servers (SyncReplicasOptimizer semantics: accuracy, backups, a
 * dead worker's timeout) and t2t's one-master in-graph layout started from
 * the lines `dtrain make-configs` prints. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 150.0

/* The last "(global N/" in a trainer's log, or -1. */
static long last_global_step(const struct task *t)
{
	char *e = task_read(t, 1);
	long step = -1;
	for (const char *p = strstr(e, "(global "); p; p = strstr(p + 1, "(global "))
		step = atol(p + strlen("(global "));
	free(e);
	return step;
}

/* Averaging two workers' gradients of batch B is one step on a batch of 2B:
 * the run must land where one process with batch 2B lands (the data order
 * differs, so not bit for bit). */
DT_TEST_TIMEOUT(sync, two_workers_reach_the_accuracy_of_one_process_with_the_same_global_batch, 240)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=1200", "--log_every=400",
				     "--sync", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps = cluster_start_train(&c, "ps", 0, args);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	struct dt_run local;
	dt_test_run(&local, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=fashion_mnist",
					     "--train_steps=1200", "--log_every=0", "--hparams=batch_size=128", NULL },
		    NULL, 200);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	DT_CHECK_INT_EQ(local.exit_code, 0);
	char *out = task_read(chief, 0), *ce = task_read(chief, 1), *pe = task_read(ps, 1);
	double dist = cli_accuracy_of(out), one = cli_accuracy_of(local.out);
	fprintf(stderr, "sync 2 workers (batch 64 each): %.4f; one process (batch 128): %.4f\n", dist, one);
	DT_CHECK_CONTAINS(out, "at global step 1200");
	DT_CHECK(one > 0.8);
	DT_CHECK_NEAR(dist, one, 0.01);
	DT_CHECK_CONTAINS(ce, "did 1200 of 1200 synchronous steps (0 dropped as stale)");
	/* Every step took both trainers' gradients of all 6 shards. */
	DT_CHECK_CONTAINS(pe, "run over: 14400 synchronous gradients accumulated, 0 dropped as stale, global step 1200");
	free(out), free(ce), free(pe);
	dt_run_release(&local);
}

DT_TEST_TIMEOUT(sync, a_stopped_backup_worker_does_not_hold_the_steps, 240)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=2000", "--log_every=20",
				     "--noeval", "--sync", "--replicas_to_aggregate=2", "--sync_timeout=20", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 2, 1);
	struct task *ps = cluster_start_train(&c, "ps", 0, args);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_LOG(&c, w1, "(global ", 120);
	DT_CHECK_INT_EQ(kill(w1->pid, SIGSTOP), 0);
	/* Let whatever was in flight settle, then watch the step move without it. */
	usleep(500 * 1000);
	long before = last_global_step(chief), after = before;
	/* Up to 3 s (well below the 10 s after which the ps drops a silent
	 * connection), but no longer than 40 steps take: on an idle host the
	 * run's last 1800 steps take about 3 s, and the backup must wake before
	 * the end to find its gradient stale. */
	for (int i = 0; i < 30 && after < before + 40; i++) {
		usleep(100 * 1000);
		after = last_global_step(chief);
	}
	DT_CHECK_INT_EQ(kill(w1->pid, SIGCONT), 0);
	fprintf(stderr, "global step %ld -> %ld while worker:1 was stopped\n", before, after);
	if (!(before > 0 && after >= before + 40 && after < 2000)) {
		tasks_dump(c.tasks, c.n);
		cluster_kill_all(&c);
		dt_test_fail(__FILE__, __LINE__, "the steps did not go on without the stopped backup: %ld -> %ld", before,
			     after);
	}
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w0, 0, 30);
	EXPECT_EXIT(&c, w1, 0, 30);
	EXPECT_EXIT(&c, ps, 0, 30);
	char *pe = task_read(ps, 1), *we = task_read(w1, 1);
	DT_CHECK_CONTAINS(pe, "global step 2000");
	/* The resumed backup's gradients came too late and were dropped. */
	const char *d = strstr(pe, "synchronous gradients accumulated, ");
	DT_CHECK(d && atol(d + strlen("synchronous gradients accumulated, ")) > 0);
	DT_CHECK_CONTAINS(we, "dropped as stale");
	free(pe), free(we);
}

/* The hparam sync=true is the same as --sync. */
DT_TEST_TIMEOUT(sync, a_killed_worker_without_backups_times_out_every_task_with_exit_3, 180)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=1000000",
				     "--log_every=20", "--noeval", "--hparams=sync=true", "--sync_timeout=4", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 2, 1);
	struct task *ps = cluster_start_train(&c, "ps", 0, args);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_LOG(&c, w1, "(global ", 120);
	int64_t t0 = dt_now_ns();
	task_kill(w1);
	/* The step times out 4 s after its first gradient; everyone is gone by a bounded time after. */
	EXPECT_EXIT(&c, ps, 3, 30);
	EXPECT_EXIT(&c, chief, 3, 30);
	EXPECT_EXIT(&c, w0, 3, 30);
	double took = (double)(dt_now_ns() - t0) / 1e9;
	fprintf(stderr, "every task exited 3 within %.1f s of the kill\n", took);
	DT_CHECK(took < 20);
	char *pe = task_read(ps, 1), *ce = task_read(chief, 1), *we = task_read(w0, 1);
	DT_CHECK_CONTAINS(pe, "error: ps:0: step ");
	DT_CHECK_CONTAINS(pe, " s with 2 of 3 gradients; missing: worker:1 (silent for ");
	/* The step's deadline is 4 s; the ps notices at its next loop turn, so
	 * the figure is 4.0 or a little more on a loaded machine, never less. */
	const char *after = strstr(pe, "timed out after ");
	DT_CHECK(after != NULL);
	double waited = after ? strtod(after + strlen("timed out after "), NULL) : 0;
	if (waited < 4.0 || waited > 8.0)
		dt_test_fail(__FILE__, __LINE__, "the ps reports waiting %.1f s for a 4 s step deadline", waited);
	DT_CHECK_CONTAINS(pe, "disconnected");
	DT_CHECK(strstr(pe, "missing: chief") == NULL);
	DT_CHECK_CONTAINS(ce, "missing: worker:1 (silent for ");
	DT_CHECK_CONTAINS(we, "error: ");
	free(pe), free(ce), free(we);
}

/* t2t's sync layout, seed 000: the three lines of
 * `dtrain make-configs --masters=A --ps=B,C`, each its own process. */
DT_TEST_TIMEOUT(sync, make_configs_one_master_lines_train_in_graph_and_all_exit_0, 240)
{
	int ports[3];
	cli_free_ports(ports, 3);
	char masters[64], ps[96];
	snprintf(masters, sizeof(masters), "--masters=127.0.0.1:%d", ports[0]);
	snprintf(ps, sizeof(ps), "--ps=127.0.0.1:%d,127.0.0.1:%d", ports[1], ports[2]);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "make-configs", masters, ps, NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "Assuming SYNC");
	struct cluster c;
	/* make-configs says --schedule=train (no evaluation); --eval asks for the final one. */
	int master = cluster_start_make_configs(&c, r.out, 3, "--model=mlp --problem=fashion_mnist --train_steps=1000 "
								"--log_every=250 --eval", "master");
	dt_run_release(&r);
	DT_CHECK_INT_EQ(c.n, 3);
	DT_CHECK(master >= 0);
	EXPECT_EXIT(&c, &c.tasks[master], 0, TASK_WAIT_S);
	for (int i = 0; i < c.n; i++)
		EXPECT_EXIT(&c, &c.tasks[i], 0, 30);
	char *out = task_read(&c.tasks[master], 0), *me = task_read(&c.tasks[master], 1);
	fprintf(stderr, "in-graph: %s", out);
	DT_CHECK(cli_accuracy_of(out) >= 0.85);
	DT_CHECK_CONTAINS(me, "2 std server(s) x 1 replica(s), batch 64 each: global batch 128");
	DT_CHECK_CONTAINS(me, "ended the run on 2 std server(s) at step 1000");
	for (int i = 0; i < c.n; i++) {
		if (i == master)
			continue;
		char *e = task_read(&c.tasks[i], 1);
		DT_CHECK_CONTAINS(e, "run over: computed 1000 in-graph replica steps");
		free(e);
	}
	free(out), free(me);
}

/* A std server whose in-graph master dies does not wait for a chief that is
 * not coming back (or for its idle timeout): it exits 3 at once. */
DT_TEST_TIMEOUT(sync, std_servers_exit_3_when_the_in_graph_master_dies, 180)
{
	struct cluster c;
	cluster_init(&c, "master", 0, 1);
	cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", "--model=mlp",
							   "--problem=fashion_mnist", NULL });
	cluster_start_train(&c, "master", 0, (const char *[]){ "--sync", "--model=mlp", "--problem=fashion_mnist",
							       "--train_steps=1000000", "--log_every=20", NULL });
	EXPECT_LOG(&c, &c.tasks[1], "(global ", 120);
	task_kill(&c.tasks[1]);
	EXPECT_EXIT(&c, &c.tasks[0], 3, 30);
	char *e = task_read(&c.tasks[0], 1);
	DT_CHECK_CONTAINS(e, "error: the in-graph master was lost after ");
	DT_CHECK_CONTAINS(e, "master:0 at 127.0.0.1:");
	free(e);
}

/* Two std servers and their master, the master started with `extra` (NULL-terminated, may be NULL). */
static void start_in_graph(struct cluster *c, const char *const *extra)
{
	const char *const std_args[] = { "--schedule=run_std_server", "--model=mlp", "--problem=fashion_mnist", NULL };
	const char *args[16] = { "--sync", "--model=mlp", "--problem=fashion_mnist", "--train_steps=1000000",
				 "--log_every=20", "--noeval" };
	int n = 6;
	for (int i = 0; extra && extra[i] && n < 15; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	cluster_init(c, "master", 0, 2);
	cluster_start_train(c, "ps", 0, std_args);
	cluster_start_train(c, "ps", 1, std_args);
	cluster_start_train(c, "master", 0, args);
}

/* Issue 21 (found by the chaos suite): one std server killed → the master
 * exits 3 and closes its connections in order (SHUTDOWN, no PS_END); the
 * other std server must take that for the loss it is — exit 3 at once,
 * naming the master — not wait out --ps_idle_timeout (600 s) as if the run
 * had ended. */
DT_TEST_TIMEOUT(sync, a_std_server_exits_3_when_its_master_leaves_without_ending_the_run, 180)
{
	struct cluster c;
	start_in_graph(&c, NULL);
	struct task *s0 = &c.tasks[0], *s1 = &c.tasks[1], *m = &c.tasks[2];
	EXPECT_LOG(&c, m, "(global ", 120);
	task_kill(s1);
	int64_t t0 = dt_now_ns();
	EXPECT_EXIT(&c, m, 3, 30);
	EXPECT_EXIT(&c, s0, 3, 20);
	double took = (double)(dt_now_ns() - t0) / 1e9;
	fprintf(stderr, "the master and the other std server exited 3 within %.1f s of the kill\n", took);
	char *me = task_read(m, 1), *e = task_read(s0, 1);
	fprintf(stderr, "ps:0 says: %s", strstr(e, "error: ") ? strstr(e, "error: ") : e);
	DT_CHECK_CONTAINS(me, "ps:1 at 127.0.0.1:");
	DT_CHECK_CONTAINS(e, "error: the in-graph master was lost after ");
	DT_CHECK_CONTAINS(e, "master:0 at 127.0.0.1:");
	DT_CHECK_CONTAINS(e, "without ending the run");
	free(me), free(e);
}

/* Issue 21: the master SIGSTOPped past --sync_timeout (but under the 10 s
 * silence) finds, once continued, its step's deadline passed: that is a
 * timeout (exit 3, naming the std server that did not answer in time), not
 * a runtime failure (it exited 1, "... request to ps:0 ... cancelled"), and
 * the std servers it leaves exit 3 too. A stop that lands between two steps
 * is survived, so the test stops it again, at most 4 times. */
DT_TEST_TIMEOUT(sync, an_in_graph_master_stopped_past_the_sync_timeout_exits_3, 180)
{
	struct cluster c;
	start_in_graph(&c, (const char *const[]){ "--sync_timeout=2", NULL });
	struct task *s0 = &c.tasks[0], *s1 = &c.tasks[1], *m = &c.tasks[2];
	EXPECT_LOG(&c, m, "(global ", 120);
	int code = -1, tries = 0;
	for (; tries < 4 && code == -1; tries++) {
		DT_CHECK_INT_EQ(kill(m->pid, SIGSTOP), 0);
		dt_sleep(5.0); /* 2 s deadline + 1 s of the wait's slack + 2 */
		DT_CHECK_INT_EQ(kill(m->pid, SIGCONT), 0);
		code = task_wait(m, 5);
	}
	/* A master stopped between two requests, or one that reads the replies
	 * waiting for it before its deadline check, rightly goes on: then the
	 * same deadline is reached the other way, the std servers stopped past
	 * it while the master waits on them (bounded: the master is mid-step
	 * 86% of the time, so one stop of both servers catches a request). */
	if (code == -1) {
		DT_CHECK_INT_EQ(kill(s0->pid, SIGSTOP), 0);
		DT_CHECK_INT_EQ(kill(s1->pid, SIGSTOP), 0);
		code = task_wait(m, 10);
		DT_CHECK_INT_EQ(kill(s0->pid, SIGCONT), 0);
		DT_CHECK_INT_EQ(kill(s1->pid, SIGCONT), 0);
	}
	if (code != 3) {
		tasks_dump(c.tasks, c.n);
		cluster_kill_all(&c);
		dt_test_fail(__FILE__, __LINE__, "the master stopped past --sync_timeout exited %d, expected 3", code);
	}
	EXPECT_EXIT(&c, s0, 3, 20);
	EXPECT_EXIT(&c, s1, 3, 20);
	char *me = task_read(m, 1), *e = task_read(s0, 1);
	fprintf(stderr, "exited 3 after %d stop(s) of 5 s\nmaster:0 says: %sps:0 says: %s", tries, strstr(me, "error: ") ? strstr(me, "error: ") : me,
		strstr(e, "error: ") ? strstr(e, "error: ") : e);
	DT_CHECK_CONTAINS(me, "in-graph training stopped at step ");
	DT_CHECK_CONTAINS(me, "no reply from ps:");
	DT_CHECK(strstr(me, "cancelled") == NULL);
	DT_CHECK_CONTAINS(e, "error: the in-graph master was lost after ");
	free(me), free(e);
}

DT_TEST_TIMEOUT(sync, replicas_to_aggregate_needs_sync_and_enough_trainers, 60)
{
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	char env[1400];
	cluster_tf_config(&c, "worker", 0, env, sizeof(env));
	const char *const envs[] = { env, NULL };
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--sync",
					 "--replicas_to_aggregate=3", NULL }, envs, 50);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: --replicas_to_aggregate=3 needs synchronous training through the ps with at "
				 "least that many trainers (this cluster has 2)");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic",
					 "--replicas_to_aggregate=1", NULL }, envs, 50);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "hint: add --sync");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--sync",
					 "--sync_timeout=0", NULL }, envs, 50);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--sync_timeout must be between 0 and 10000000 seconds, got 0");
	dt_run_release(&r);
}

/* A synchronous run through the ps (ps, worker, chief: `args` each) and the
 * same run in t2t's in-graph layout (a master with `args` and two std
 * servers on `problem`), each waited for: every task must exit 0. */
static void run_sync_through_ps(struct cluster *c, const char *const *args, struct task **chief,
				struct task **worker)
{
	cluster_init(c, "chief", 1, 1);
	struct task *ps = cluster_start_train(c, "ps", 0, args);
	*worker = cluster_start_train(c, "worker", 0, args);
	*chief = cluster_start_train(c, "chief", 0, args);
	EXPECT_EXIT(c, *chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(c, *worker, 0, 30);
	EXPECT_EXIT(c, ps, 0, 30);
}

static struct task *run_in_graph(struct cluster *g, const char *problem, const char *const *args)
{
	cluster_init(g, "master", 0, 2);
	const char *const std_args[] = { "--schedule=run_std_server", "--model=mlp", problem, NULL };
	struct task *s0 = cluster_start_train(g, "ps", 0, std_args);
	struct task *s1 = cluster_start_train(g, "ps", 1, std_args);
	struct task *master = cluster_start_train(g, "master", 0, args);
	EXPECT_EXIT(g, master, 0, TASK_WAIT_S);
	EXPECT_EXIT(g, s0, 0, 30);
	EXPECT_EXIT(g, s1, 0, 30);
	return master;
}

/* The two layouts compute the same thing: two replicas on shards 0 and 1 of
 * the data from the same initial variables, averaged, one optimizer step.
 * Through the ps (chief + worker) and in-graph (a master and two std servers)
 * the final evaluation is the same to the last digit. */
DT_TEST_TIMEOUT(sync, through_the_ps_and_in_graph_give_the_same_model, 180)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=200", "--log_every=0",
				     "--sync", NULL };
	struct cluster c, g;
	struct task *chief, *worker;
	run_sync_through_ps(&c, args, &chief, &worker);
	struct task *master = run_in_graph(&g, "--problem=fashion_mnist", args);

	char *a = task_read(chief, 0), *b = task_read(master, 0);
	DT_CHECK_CONTAINS(a, "at global step 200: accuracy = ");
	DT_CHECK_STR_EQ(a, b);
	free(a), free(b);
}

/* t2t's clip_grad_norm where synchronous training clips: on each trainer
 * before its push (the ps averages the clipped gradients) and on the
 * in-graph master (the replicas' mean). SGD at a rate that diverges within
 * a few steps unclipped (shown first, in one process) trains when every
 * step's update is held to rate x threshold: a mode that skipped the
 * clipping would end "training diverged" with exit 1. */
#define CLIP_ARGS "--model=mlp", "--problem=synthetic", "--train_steps=40", "--log_every=10", "--sync"
#define CLIP_HP "--hparams=optimizer=sgd,learning_rate=1000"

static void check_clipped(struct task *t, const char *where, int eval)
{
	char *out = task_read(t, 0), *e = task_read(t, 1), want[300];
	snprintf(want, sizeof(want), "clip_grad_norm=0.0001: the gradient is scaled to global norm <= 0.0001 %s", where);
	DT_CHECK_CONTAINS(e, want);
	DT_CHECK_CONTAINS(e, ", clipped 10 of 10 steps) "); /* every step's norm is over 0.0001 */
	DT_CHECK(!strstr(e, "diverged"));
	if (eval) {
		const char *acc = strstr(out, "at global step 40: accuracy = ");
		DT_CHECK(acc != NULL);
		if (acc)
			DT_CHECK(atof(acc + strlen("at global step 40: accuracy = ")) > 0.9);
	}
	free(out), free(e);
}

DT_TEST_TIMEOUT(sync, clip_grad_norm_holds_a_diverging_rate_through_the_ps_and_in_graph, 240)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=40",
					  "--log_every=10", CLIP_HP, NULL },
		    NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 1);
	DT_CHECK_CONTAINS(r.err, "training diverged at step ");
	dt_run_release(&r);

	const char *const args[] = { CLIP_ARGS, CLIP_HP ",clip_grad_norm=0.0001", NULL };
	struct cluster c, g;
	struct task *chief, *worker;
	run_sync_through_ps(&c, args, &chief, &worker);
	check_clipped(chief, "on each trainer before its push; the ps averages the clipped gradients", 1);
	check_clipped(worker, "on each trainer before its push", 0);
	check_clipped(run_in_graph(&g, "--problem=synthetic", args), "on the master, the replicas' mean", 1);
}
