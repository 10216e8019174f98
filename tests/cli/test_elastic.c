/* Elastic multi-worker mirrored training (--min_workers, train/allreduce_elastic.h),
 * the failure matrix on 3 workers as processes on loopback: a
 * worker SIGKILLed at a random step (the others finish with exit 0, having
 * lost at most the step in flight, within 1% of an undisturbed run's
 * accuracy; and in a model of two gradient buckets), a worker SIGSTOPped (dropped after --step_timeout, the others
 * finish), two lost of three with --min_workers=2 (exit 3 naming both), and
 * the chief killed (worker 1 coordinates, saves and evaluates; all finish).
 * Plus the membership frames' wire forms. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/progress.h"
#include "cluster_procs.h"
#include "distribute/membership.h"
#include "net/auth.h"
#include "net/socket.h"
#include "dt_test.h"

#define TASK_WAIT_S 240.0
#define STEPS "--train_steps=2000"

static const char *const elastic_args[] = { "--model=mlp", "--problem=fashion_mnist", STEPS, "--log_every=50",
					    "--hparams=batch_size=32", "--min_workers=2", "--step_timeout=4",
					    "--connect_timeout=60", NULL };

/* Starts 3 workers with `args`; returns when all three are training (their
 * first progress line). */
static void start_three(struct cluster *c, const char *const *args)
{
	cluster_init(c, NULL, 3, 0);
	for (int i = 0; i < 3; i++)
		cluster_start_train(c, "worker", i, args);
	for (int i = 0; i < 3; i++)
		EXPECT_LOG(c, &c->tasks[i], "step 50/", TASK_WAIT_S);
}

/* The step of the chief's "ring re-formed at step N" line, or -1. */
static long reformed_at(const char *err)
{
	const char *p = strstr(err, "ring re-formed at step ");
	return p ? atol(p + strlen("ring re-formed at step ")) : -1;
}

/* The path of the first TensorBoard events file in dir; 0 if none. */
static int find_events(const char *dir, char *buf, size_t cap)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int found = 0;
	for (struct dirent *e; !found && (e = readdir(d));)
		if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
			snprintf(buf, cap, "%s/%s", dir, e->d_name);
			found = 1;
		}
	closedir(d);
	return found;
}

/* A random progress line to wait for before the fault: "step S/" for S a
 * multiple of 50 (--log_every) from 50 * lo, one of n. */
static void random_step_line(char *buf, size_t cap, int lo, int n)
{
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	snprintf(buf, cap, "step %d/", 50 * (lo + rand() % n));
}

/* The run a disturbed one is held against: 3 workers with `args`, nobody
 * lost, all exit 0; returns the chief's final accuracy. */
static double undisturbed_accuracy(const char *const *args)
{
	struct cluster c;
	start_three(&c, args);
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	EXPECT_EXIT(&c, &c.tasks[2], 0, 60);
	char *out = task_read(&c.tasks[0], 0);
	double acc = cli_accuracy_of(out);
	free(out);
	DT_CHECK(acc > 0.8);
	cluster_kill_all(&c);
	return acc;
}

DT_TEST_TIMEOUT(elastic, killed_worker_dropped_others_finish_within_1pct, 600)
{
	double undisturbed = undisturbed_accuracy(elastic_args);
	char line[32];
	random_step_line(line, sizeof(line), 2, 19); /* 100..1000 of 2000 */
	struct cluster c;
	start_three(&c, elastic_args);
	EXPECT_LOG(&c, &c.tasks[2], line, TASK_WAIT_S);
	long killed_after = atol(line + 5);
	kill(c.tasks[2].pid, SIGKILL);
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	char *err0 = task_read(&c.tasks[0], 1), *err1 = task_read(&c.tasks[1], 1), *out = task_read(&c.tasks[0], 0);
	long at = reformed_at(err0);
	fprintf(stderr, "killed worker 2 after %s: re-formed at step %ld\n", line, at);
	/* At most the step in flight is lost: the ring goes on from a step the
	 * workers had done when worker 2 died (no checkpoint interval). */
	DT_CHECK(at >= killed_after);
	DT_CHECK_INT_EQ(reformed_at(err1), at);
	DT_CHECK_CONTAINS(err0, "workers 0,1 (worker 2 at 127.0.0.1:");
	DT_CHECK_CONTAINS(err0, "lost: connection");
	DT_CHECK_CONTAINS(err0, "the ring was re-formed 1 time(s); it ended with 2 of 3 workers");
	DT_CHECK_CONTAINS(err0, "global batch 64");
	DT_CHECK_CONTAINS(out, "at global step 2000: accuracy = ");
	double acc = cli_accuracy_of(out);
	fprintf(stderr, "mlp, 3 workers: undisturbed %.4f, one killed %.4f\n", undisturbed, acc);
	DT_CHECK_NEAR(acc, undisturbed, 0.01);
	free(err0), free(err1), free(out);
	cluster_kill_all(&c);
}

/* A model of two gradient buckets (lenet: the dense layers, then the
 * convolutions): the first bucket's update is applied while the second is
 * still being all-reduced, so each step keeps that range for the rollback
 * (train/allreduce_elastic.h: ranges from the end down, checked), and a
 * worker killed at a random step leaves the survivors finishing with
 * variables the replica check finds bit-identical every 50 steps. */
DT_TEST_TIMEOUT(elastic, two_bucket_model_killed_worker_dropped_replicas_identical, 400)
{
	static const char *const args[] = { "--model=lenet", "--problem=fashion_mnist", "--train_steps=1500",
					    "--log_every=50", "--hparams=batch_size=32", "--min_workers=2",
					    "--step_timeout=4", "--connect_timeout=60", "--check_replicas_every=50",
					    "--noeval", NULL };
	char line[32];
	random_step_line(line, sizeof(line), 2, 19); /* 100..1000 of 1500 */
	struct cluster c;
	start_three(&c, args);
	EXPECT_LOG(&c, &c.tasks[2], line, TASK_WAIT_S);
	kill(c.tasks[2].pid, SIGKILL);
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	char *err0 = task_read(&c.tasks[0], 1);
	fprintf(stderr, "lenet: killed worker 2 after %s: re-formed at step %ld\n", line, reformed_at(err0));
	DT_CHECK_CONTAINS(err0, "gradient all-reduce: 2 buckets, from the end");
	DT_CHECK_CONTAINS(err0, "workers 0,1 (worker 2 at 127.0.0.1:");
	DT_CHECK_CONTAINS(err0, "the ring was re-formed 1 time(s); it ended with 2 of 3 workers");
	DT_CHECK(reformed_at(err0) >= atol(line + 5));
	free(err0);
	cluster_kill_all(&c);
}

/* The runs in which a killed task comes back: long enough (8000 steps) for
 * the restarted process to load its data and rejoin while the ring trains. */
static const char *const rejoin_args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=8000",
					   "--log_every=50", "--hparams=batch_size=32", "--min_workers=2",
					   "--step_timeout=4", "--connect_timeout=60", NULL };

/* The killed worker started again (same index, same flags) joins at a step
 * boundary through the chief, takes the variables by broadcast, and the
 * ring is 3 again; the job completes as an undisturbed one would. */
DT_TEST_TIMEOUT(elastic, killed_worker_restarted_rejoins_ring_of_3, 600)
{
	/* Longer than the others: the restarted process loads its data (about
	 * 2 s) while the ring trains on. */
	const char *const *args = rejoin_args;
	double undisturbed = undisturbed_accuracy(args);
	char line[32];
	random_step_line(line, sizeof(line), 2, 9); /* 100..500 of 8000: time to come back */
	/* The chief writes summaries and a progress file (what `dtrain status` reads). */
	struct cluster c;
	cluster_init(&c, NULL, 3, 0);
	cluster_output_dir(&c, "chief");
	char progress[700], env[760];
	dt_test_path(progress, sizeof(progress), "progress0");
	snprintf(env, sizeof(env), "DTRAIN_PROGRESS_FILE=%s", progress);
	cluster_start_train_as(&c, "worker", 0, NULL, args, c.out_flag, (const char *const[]){ env, NULL });
	for (int i = 1; i < 3; i++)
		cluster_start_train(&c, "worker", i, args);
	EXPECT_LOG(&c, &c.tasks[1], line, TASK_WAIT_S);
	kill(c.tasks[1].pid, SIGKILL);
	EXPECT_LOG(&c, &c.tasks[0], "workers 0,2 (worker 1 at 127.0.0.1:", 60);
	struct task *again = cluster_start_train_as(&c, "worker", 1, "worker1again", args, NULL, NULL);
	EXPECT_LOG(&c, &c.tasks[0], "rejoined)", 120);
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[2], 0, 60);
	EXPECT_EXIT(&c, again, 0, 60);
	char *err0 = task_read(&c.tasks[0], 1), *errn = task_read(again, 1), *out = task_read(&c.tasks[0], 0);
	const char *grown = strstr(err0, "ring re-formed at step ");
	grown = grown ? strstr(grown + 1, "ring re-formed at step ") : NULL; /* the second: the ring grown back */
	DT_CHECK(grown != NULL);
	if (grown) {
		long at = atol(grown + strlen("ring re-formed at step "));
		char want[128];
		snprintf(want, sizeof(want), "ring re-formed at step %ld: workers 0,1,2 (worker 1 at 127.0.0.1:%d rejoined)",
			 at, cluster_port(&c, "worker", 1));
		DT_CHECK_CONTAINS(err0, want);
		snprintf(want, sizeof(want), "ring re-formed at step %ld: workers 0,1,2 (this worker, worker 1, rejoined)",
			 at);
		DT_CHECK_CONTAINS(errn, want);
		fprintf(stderr, "worker 1 killed after %s, rejoined at step %ld\n", line, at);
	}
	DT_CHECK_CONTAINS(err0, "the ring was re-formed 2 time(s); it ended with 3 of 3 workers");
	/* Visible: the progress file's ring line, and ring/members and
	 * ring/reformations in the chief's TensorBoard events. */
	struct dt_progress pr;
	struct dt_err e = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_progress_read(progress, &pr, &e), DT_OK);
	DT_CHECK_CONTAINS(pr.ring, "workers 0,1,2 (3 of 3); re-formed 2 time(s), last at step ");
	DT_CHECK_CONTAINS(pr.ring, "rejoined");
	char events[1024];
	DT_CHECK(find_events(c.out_dir, events, sizeof(events)));
	char *ev = NULL;
	size_t evlen = 0;
	DT_CHECK_INT_EQ(dt_read_file(events, 64 << 20, &ev, &evlen, &e), DT_OK);
	DT_CHECK(ev && memmem(ev, evlen, "ring/members", 12) != NULL);
	DT_CHECK(ev && memmem(ev, evlen, "ring/reformations", 17) != NULL);
	free(ev);
	DT_CHECK_CONTAINS(out, "at global step 8000: accuracy = ");
	double acc = cli_accuracy_of(out);
	fprintf(stderr, "mlp, 3 workers: undisturbed %.4f, one killed and restarted %.4f\n", undisturbed, acc);
	DT_CHECK_NEAR(acc, undisturbed, 0.01);
	free(err0), free(errn), free(out);
	cluster_kill_all(&c);
}

/* A stranger's membership report to the chief at c's ring address, as
 * worker 2, with `auth` (NULL: none); returns its status, the error in e. */
static enum dt_status stranger_reports(const struct cluster *c, const struct dt_auth *auth, struct dt_err *e)
{
	char addr[3][32];
	struct dt_comm_peer peers[3];
	for (int i = 0; i < 3; i++) {
		snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", cluster_port(c, "worker", i));
		peers[i] = (struct dt_comm_peer){ .addr = addr[i], .role = "worker", .index = (uint32_t)i };
	}
	struct dt_member_id id = { .auth = auth, .fingerprint = 42, .peers = peers, .table_n = 3, .self = 2 };
	struct dt_member_report me = { .fingerprint = 42, .rank = 2, .done_step = -1, .lost = -1 };
	static struct dt_member_view v;
	return dt_member_report(&id, 0, "worker:0", &me, dt_deadline_in(10), dt_deadline_in(10), NULL, &v, NULL, e);
}

/* With a cluster secret the reports are authenticated (net/auth.h): a
 * stranger without the secret, or with another one, is refused and the ring
 * does not notice (no re-formation); a worker killed at a random step and
 * started again at once (as a launcher's restart policy does, racing the
 * chief's re-formation) rejoins, and all three finish. */
DT_TEST_TIMEOUT(elastic, secret_strangers_refused_restarted_at_once_rejoins, 600)
{
	char secret[600], flag[700], other[600];
	dt_test_path(secret, sizeof(secret), "secret");
	dt_test_path(other, sizeof(other), "other_secret");
	struct dt_err e = DT_ERR_INIT;
	DT_CHECK_OK(dt_auth_secret_new(secret, &e), &e);
	DT_CHECK_OK(dt_auth_secret_new(other, &e), &e);
	snprintf(flag, sizeof(flag), "--cluster_secret_file=%s", secret);
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=6000", "--log_every=50",
				     "--hparams=batch_size=32", "--min_workers=2", "--step_timeout=4",
				     "--connect_timeout=60", flag, NULL };
	struct cluster c;
	start_three(&c, args);
	/* Strangers: no secret, then another secret. */
	DT_CHECK_INT_EQ(stranger_reports(&c, NULL, &e), DT_CONFIG);
	DT_CHECK_CONTAINS(e.msg, "need the cluster secret");
	struct dt_auth wrong;
	e = (struct dt_err)DT_ERR_INIT;
	DT_CHECK_OK(dt_auth_load(&wrong, other, DT_WIRE_AUTH, &e), &e);
	DT_CHECK_INT_EQ(stranger_reports(&c, &wrong, &e), DT_CONFIG);
	DT_CHECK_CONTAINS(e.msg, "did not prove it holds this cluster's secret");
	EXPECT_LOG(&c, &c.tasks[0], "membership: refused the report from 127.0.0.1:", 30);

	char line[32];
	random_step_line(line, sizeof(line), 6, 10); /* 300..750 of 6000 */
	EXPECT_LOG(&c, &c.tasks[2], line, TASK_WAIT_S);
	kill(c.tasks[2].pid, SIGKILL);
	DT_CHECK_INT_EQ(task_wait(&c.tasks[2], 10), 128 + SIGKILL);
	struct task *again = cluster_start_train_as(&c, "worker", 2, "worker2again", args, NULL, NULL);
	EXPECT_LOG(&c, &c.tasks[0], "rejoined)", 120);
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	EXPECT_EXIT(&c, again, 0, 60);
	char *err0 = task_read(&c.tasks[0], 1), *out = task_read(&c.tasks[0], 0);
	/* Lost once, rejoined once; the strangers cost no re-formation. */
	DT_CHECK_CONTAINS(err0, "the ring was re-formed 2 time(s); it ended with 3 of 3 workers");
	DT_CHECK_CONTAINS(out, "at global step 6000: accuracy = ");
	fprintf(stderr, "secret: worker 2 killed after %s and restarted at once: rejoined\n", line);
	free(err0), free(out);
	cluster_kill_all(&c);
}

/* The race of a restarted worker's report with the chief's re-formation:
 * the chief holds its listener in the re-formation's rendezvous for 5 s
 * (fault injection), the worker killed then and started at once reports
 * inside that window, is closed, reports again, and rejoins once the chief
 * trains (it used to take the close for a first rendezvous and exit 3
 * after --connect_timeout). */
DT_TEST_TIMEOUT(elastic, report_during_a_reformation_is_retried_and_rejoins, 400)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=6000", "--log_every=50",
				     "--hparams=batch_size=32", "--min_workers=2", "--step_timeout=10",
				     "--connect_timeout=60", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 3, 0);
	cluster_start_train_as(&c, "worker", 0, NULL, args, NULL,
			       (const char *const[]){ "DTRAIN_TEST_REFORM_PAUSE_S=5", NULL });
	for (int i = 1; i < 3; i++)
		cluster_start_train(&c, "worker", i, args);
	EXPECT_LOG(&c, &c.tasks[2], "step 100/", TASK_WAIT_S);
	kill(c.tasks[2].pid, SIGKILL);
	DT_CHECK_INT_EQ(task_wait(&c.tasks[2], 10), 128 + SIGKILL);
	struct task *again = cluster_start_train_as(&c, "worker", 2, "worker2again", args, NULL, NULL);
	EXPECT_LOG(&c, again, "reporting again every 200 ms", 60);
	EXPECT_LOG(&c, again, "(this worker, worker 2, rejoined)", 60);
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	EXPECT_EXIT(&c, again, 0, 60);
	char *err0 = task_read(&c.tasks[0], 1);
	DT_CHECK_CONTAINS(err0, "the ring was re-formed 2 time(s); it ended with 3 of 3 workers");
	free(err0);
	cluster_kill_all(&c);
}

DT_TEST_TIMEOUT(elastic, stopped_worker_dropped_after_step_timeout, 400)
{
	struct cluster c;
	char line[32];
	random_step_line(line, sizeof(line), 2, 19); /* 100..1000 of 2000 */
	start_three(&c, elastic_args);
	EXPECT_LOG(&c, &c.tasks[1], line, TASK_WAIT_S);
	kill(c.tasks[1].pid, SIGSTOP);
	double t0 = cli_now_s();
	EXPECT_LOG(&c, &c.tasks[0], "ring re-formed at step", 60);
	double took = cli_now_s() - t0;
	fprintf(stderr, "worker 1 stopped after %s: re-formed %.2f s later (--step_timeout=4)\n", line, took);
	DT_CHECK(took < 2 * 4.0 + 2.0); /* the bound, 2 x --step_timeout, with slack for a loaded host */
	EXPECT_EXIT(&c, &c.tasks[0], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[2], 0, 60);
	char *err0 = task_read(&c.tasks[0], 1), *out = task_read(&c.tasks[0], 0);
	DT_CHECK_CONTAINS(err0, "workers 0,2 (worker 1 at 127.0.0.1:");
	DT_CHECK_CONTAINS(err0, "lost: no answer for "); /* 4.0 s, or as the stall notices timed it */
	DT_CHECK_CONTAINS(out, "at global step 2000: accuracy = ");
	free(err0), free(out);
	cluster_kill_all(&c); /* SIGCONT, then SIGKILL: the stopped one */
}

DT_TEST_TIMEOUT(elastic, below_min_workers_exit_3_naming_the_lost, 300)
{
	struct cluster c;
	start_three(&c, elastic_args);
	kill(c.tasks[1].pid, SIGKILL);
	kill(c.tasks[2].pid, SIGKILL);
	EXPECT_EXIT(&c, &c.tasks[0], 3, 60);
	char *err0 = task_read(&c.tasks[0], 1);
	DT_CHECK_CONTAINS(err0, "below --min_workers=2: 1 of 3 workers left (");
	DT_CHECK_CONTAINS(err0, "worker 1 at 127.0.0.1:");
	DT_CHECK_CONTAINS(err0, "worker 2 at 127.0.0.1:");
	free(err0);
	cluster_kill_all(&c);
}

/* The chief is elastic too: killed at a random step, the two survivors
 * re-form with worker 1 coordinating (the lowest index left), lose at most
 * the step in flight (neither waits out the dead chief's refusals), finish
 * with exit 0 within 1% of an undisturbed run's accuracy, and worker 1
 * writes the final checkpoint in the shared
 * --output_dir, which `dtrain ckpt verify` and an evaluation read. */
DT_TEST_TIMEOUT(elastic, killed_chief_worker1_coordinates_finishes_within_1pct, 600)
{
	double undisturbed = undisturbed_accuracy(elastic_args);
	char line[32];
	random_step_line(line, sizeof(line), 2, 19); /* 100..1000 of 2000 */
	struct cluster c;
	cluster_init(&c, NULL, 3, 0);
	cluster_output_dir(&c, "shared");
	for (int i = 0; i < 3; i++)
		cluster_start_train_as(&c, "worker", i, NULL, elastic_args, c.out_flag, NULL);
	EXPECT_LOG(&c, &c.tasks[0], line, TASK_WAIT_S);
	long killed_after = atol(line + 5);
	kill(c.tasks[0].pid, SIGKILL);
	EXPECT_EXIT(&c, &c.tasks[1], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[2], 0, 60);
	char *err1 = task_read(&c.tasks[1], 1), *err2 = task_read(&c.tasks[2], 1), *out1 = task_read(&c.tasks[1], 0);
	long at = reformed_at(err1);
	const char *first = strstr(err1, "first step on the re-formed ring");
	fprintf(stderr, "killed the chief after %s: re-formed at step %ld, worker 1 coordinating; %.120s\n", line, at,
		first ? first : "(no first step logged)");
	DT_CHECK(at >= killed_after);
	DT_CHECK_INT_EQ(reformed_at(err2), at);
	char want[160];
	snprintf(want, sizeof(want), "the chief (worker:0 at 127.0.0.1:%d) was lost (",
		 cluster_port(&c, "worker", 0));
	DT_CHECK_CONTAINS(err1, want);
	DT_CHECK_CONTAINS(err2, want);
	snprintf(want, sizeof(want), "worker:1 coordinates from step %ld", at);
	DT_CHECK_CONTAINS(err1, want);
	DT_CHECK_CONTAINS(err2, want);
	DT_CHECK_CONTAINS(err1, "workers 1,2 (worker 0 at 127.0.0.1:");
	/* A survivor that dialled the dead chief (one only told of the failure)
	 * stopped at once: its connection with the chief had closed, or the other
	 * reported to it. Neither waited out the 0.5 s of refusals. */
	DT_CHECK(strstr(err1, "did not answer (cannot connect to worker:0") == NULL);
	DT_CHECK(strstr(err2, "did not answer (cannot connect to worker:0") == NULL);
	DT_CHECK_CONTAINS(err1, "this task saves the checkpoints in '");
	DT_CHECK_CONTAINS(err1, "the ring was re-formed 1 time(s); it ended with 2 of 3 workers");
	DT_CHECK_CONTAINS(err1, "saved checkpoint for step 2000");
	DT_CHECK_CONTAINS(out1, "at global step 2000: accuracy = ");
	double acc = cli_accuracy_of(out1);
	fprintf(stderr, "mlp, 3 workers: undisturbed %.4f, the chief killed %.4f\n", undisturbed, acc);
	DT_CHECK_NEAR(acc, undisturbed, 0.01);
	/* The new coordinator's final checkpoint: whole, and an evaluation of it
	 * finds the accuracy worker 1 logged. */
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "ckpt", "verify", c.out_dir, NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "model.ckpt-2000.safetensors");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--schedule=evaluate", "--model=mlp",
					 "--problem=fashion_mnist", c.out_flag, NULL }, NULL, TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "at global step 2000: accuracy = ");
	DT_CHECK_NEAR(cli_accuracy_of(r.out), acc, 1e-4);
	dt_run_release(&r);
	free(err1), free(err2), free(out1);
	cluster_kill_all(&c);
}

/* A SIGSTOPped chief is lost like a stopped worker: after --step_timeout
 * the two others re-form with worker 1 coordinating and finish. */
DT_TEST_TIMEOUT(elastic, stopped_chief_dropped_after_step_timeout_worker1_coordinates, 400)
{
	char line[32];
	random_step_line(line, sizeof(line), 2, 19); /* 100..1000 of 2000 */
	struct cluster c;
	cluster_init(&c, NULL, 3, 0);
	cluster_output_dir(&c, "shared");
	for (int i = 0; i < 3; i++)
		cluster_start_train_as(&c, "worker", i, NULL, elastic_args, c.out_flag, NULL);
	EXPECT_LOG(&c, &c.tasks[0], line, TASK_WAIT_S);
	kill(c.tasks[0].pid, SIGSTOP);
	double t0 = cli_now_s();
	EXPECT_LOG(&c, &c.tasks[1], "ring re-formed at step", 60);
	double took = cli_now_s() - t0;
	fprintf(stderr, "the chief stopped after %s: re-formed %.2f s later (--step_timeout=4)\n", line, took);
	EXPECT_EXIT(&c, &c.tasks[1], 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[2], 0, 60);
	DT_CHECK(took < 2 * 4.0 + 2.0); /* the bound for a stopped worker, with slack */
	char *err1 = task_read(&c.tasks[1], 1), *out1 = task_read(&c.tasks[1], 0);
	DT_CHECK_CONTAINS(err1, "worker:1 coordinates from step");
	DT_CHECK_CONTAINS(err1, "workers 1,2 (worker 0 at 127.0.0.1:");
	DT_CHECK_CONTAINS(err1, "saved checkpoint for step 2000");
	DT_CHECK_CONTAINS(out1, "at global step 2000: accuracy = ");
	free(err1), free(out1);
	cluster_kill_all(&c); /* SIGCONT, then SIGKILL: the stopped one */
}

/* The chief killed at a random step and started again (same index, same
 * flags) rejoins the running ring through worker 1, which coordinates
 * meanwhile: it reports to the members in index order, the ring is 3
 * again, and the coordinator's role returns to it (the lowest member), so
 * it writes the final checkpoint and evaluates at the end. */
DT_TEST_TIMEOUT(elastic, killed_chief_restarted_rejoins_and_coordinates_again, 600)
{
	const char *const *args = rejoin_args;
	double undisturbed = undisturbed_accuracy(args);
	char line[32];
	random_step_line(line, sizeof(line), 2, 9); /* 100..500 of 8000: time to come back */
	struct cluster c;
	cluster_init(&c, NULL, 3, 0);
	cluster_output_dir(&c, "shared");
	for (int i = 0; i < 3; i++)
		cluster_start_train_as(&c, "worker", i, NULL, args, c.out_flag, NULL);
	EXPECT_LOG(&c, &c.tasks[0], line, TASK_WAIT_S);
	kill(c.tasks[0].pid, SIGKILL);
	DT_CHECK_INT_EQ(task_wait(&c.tasks[0], 10), 128 + SIGKILL);
	EXPECT_LOG(&c, &c.tasks[1], "worker:1 coordinates from step", 60);
	struct task *again = cluster_start_train_as(&c, "worker", 0, "worker0again", args, c.out_flag, NULL);
	EXPECT_LOG(&c, again, "(this worker, worker 0, rejoined)", 120);
	EXPECT_EXIT(&c, again, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, &c.tasks[1], 0, 60);
	EXPECT_EXIT(&c, &c.tasks[2], 0, 60);
	char *err1 = task_read(&c.tasks[1], 1), *errn = task_read(again, 1), *outn = task_read(again, 0);
	char *out1 = task_read(&c.tasks[1], 0);
	char want[160];
	snprintf(want, sizeof(want), "worker:0 (at 127.0.0.1:%d) rejoined: it coordinates from step",
		 cluster_port(&c, "worker", 0));
	DT_CHECK_CONTAINS(err1, want);
	DT_CHECK_CONTAINS(err1, "the ring was re-formed 2 time(s); it ended with 3 of 3 workers");
	DT_CHECK_CONTAINS(errn, "the ring was re-formed 1 time(s); it ended with 3 of 3 workers");
	DT_CHECK_CONTAINS(errn, "saved checkpoint for step 8000");
	/* The role went back: worker 1 neither saves the end nor evaluates. */
	DT_CHECK(strstr(err1, "saved checkpoint for step 8000") == NULL);
	DT_CHECK(strstr(out1, "accuracy = ") == NULL);
	DT_CHECK_CONTAINS(outn, "at global step 8000: accuracy = ");
	double acc = cli_accuracy_of(outn);
	fprintf(stderr, "chief killed after %s and restarted: rejoined; undisturbed %.4f, this run %.4f\n", line,
		undisturbed, acc);
	DT_CHECK_NEAR(acc, undisturbed, 0.01);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "ckpt", "verify", c.out_dir, NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "model.ckpt-8000.safetensors");
	dt_run_release(&r);
	free(err1), free(errn), free(outn), free(out1);
	cluster_kill_all(&c);
}

/* ---- the agreement's dial of a candidate coordinator that refuses ---- */

/* Three table ranks on loopback ports where nothing listens (yet). */
struct three {
	int port[3];
	char addr[3][32];
	struct dt_comm_peer peers[3];
};

static void three_init(struct three *t)
{
	cli_free_ports(t->port, 3);
	for (int i = 0; i < 3; i++) {
		snprintf(t->addr[i], sizeof(t->addr[i]), "127.0.0.1:%d", t->port[i]);
		t->peers[i] = (struct dt_comm_peer){ .addr = t->addr[i], .role = "worker", .index = (uint32_t)i };
	}
}

/* Worker 2, a survivor that saw worker 0 fail, reporting to worker 1 (the
 * next coordinator); it waits for a view until worker 1's desk closes. */
struct reporter {
	const struct three *t;
	enum dt_status st;
	struct dt_err err;
	struct dt_member_view view;
};

static void *report_to_worker1(void *arg)
{
	struct reporter *r = arg;
	const struct dt_member_id id = { .fingerprint = 42, .peers = r->t->peers, .table_n = 3, .self = 2 };
	const struct dt_member_report me = { .fingerprint = 42, .rank = 2, .done_step = 300, .lost = 0,
					     .why = "connection closed" };
	r->err = (struct dt_err)DT_ERR_INIT;
	r->st = dt_member_report(&id, 1, "worker:1", &me, dt_deadline_in(10), dt_deadline_in(20), NULL, &r->view, NULL,
				 &r->err);
	return NULL;
}

/* Worker 1 was only told of the failure (a COLL_ABORT from worker 2), so it
 * reports to worker 0, the lowest member, whose address refuses: the chief
 * was killed. Worker 2 saw it die and reports to worker 1 meanwhile, which
 * makes worker 1 the coordinator: it stops dialling at once rather than
 * after the refusals' allowance (the 0.5 s that bench/elastic's chief-loss
 * runs showed in most runs; 5 s here, so the two cannot be mistaken). With
 * nobody reporting, the allowance is waited out as before. */
DT_TEST_TIMEOUT(elastic, a_refusing_coordinator_is_skipped_at_once_when_a_survivor_reports_here, 60)
{
	struct three t;
	three_init(&t);
	const struct dt_member_id id = { .fingerprint = 42, .peers = t.peers, .table_n = 3, .self = 1 };
	const struct dt_member_report me = { .fingerprint = 42, .rank = 1, .done_step = 300, .lost = -1 };
	struct dt_member_desk *desk = NULL;
	struct dt_err e = DT_ERR_INIT;
	DT_CHECK_OK(dt_member_desk_open(&id, &desk, &e), &e);
	static struct dt_member_view v;
	const struct dt_member_watch w = { .fd = -1, .desk = desk };

	/* Nobody reports: worker 0's refusals are waited out (0.3 s). */
	int why_not = 0;
	int64_t t0 = dt_now_ns();
	DT_CHECK_INT_EQ(dt_member_report(&id, 0, "worker:0", &me, dt_deadline_in(0.3), dt_deadline_in(10), &w, &v,
					 &why_not, &e),
			DT_PEER);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK_INT_EQ(why_not, DT_MEMBER_UNREACHABLE);
	DT_CHECK(waited >= 0.25);
	DT_CHECK_CONTAINS(e.msg, "cannot connect to worker:0 at 127.0.0.1:");

	/* Worker 2 reports here while worker 1 dials worker 0. */
	struct reporter r = { .t = &t };
	pthread_t thread;
	DT_CHECK_INT_EQ(pthread_create(&thread, NULL, report_to_worker1, &r), 0);
	why_not = 0;
	e = (struct dt_err)DT_ERR_INIT;
	t0 = dt_now_ns();
	DT_CHECK_INT_EQ(dt_member_report(&id, 0, "worker:0", &me, dt_deadline_in(5), dt_deadline_in(10), &w, &v,
					 &why_not, &e),
			DT_PEER);
	waited = (double)(dt_now_ns() - t0) / 1e9;
	fprintf(stderr, "worker 1 stopped dialling worker 0 after %.3f s: %s\n", waited, e.msg);
	DT_CHECK_INT_EQ(why_not, DT_MEMBER_CALLED);
	DT_CHECK(waited < 2.0);
	DT_CHECK_CONTAINS(e.msg, "another member reported to this task while worker:0 refused connections");
	DT_CHECK_CONTAINS(e.msg, "Connection refused; stopped waiting after ");
	DT_CHECK_INT_EQ(dt_member_desk_poll(desk), 1); /* worker 2's report, for the coordination */
	dt_sock_close(dt_member_desk_close(desk)); /* its connection closes: the reporter's wait ends */
	DT_CHECK_INT_EQ(pthread_join(thread, NULL), 0);
	DT_CHECK_INT_EQ(r.st, DT_PEER);
}

/* The other half of the same race: worker 2 was only told of the failure
 * (by worker 1, which saw the chief die and coordinates), so nobody reports
 * to it; but its own connection with worker 0 closed when the chief died
 * (dt_comm_closed_ranks), so worker 0's first refusal counts (5 s allowed
 * here). A member whose connection closed but that listens (one that left
 * the failed ring alive: it coordinates, say) is still reached. */
DT_TEST_TIMEOUT(elastic, a_refusing_coordinator_whose_connection_closed_is_skipped_at_once, 60)
{
	struct three t;
	three_init(&t);
	const struct dt_member_id id = { .fingerprint = 42, .peers = t.peers, .table_n = 3, .self = 2 };
	const struct dt_member_report me = { .fingerprint = 42, .rank = 2, .done_step = 300, .lost = -1 };
	static struct dt_member_view v;
	const struct dt_member_watch w = { .fd = -1, .closed = 1 };
	int why_not = 0;
	struct dt_err e = DT_ERR_INIT;
	int64_t t0 = dt_now_ns();
	DT_CHECK_INT_EQ(dt_member_report(&id, 0, "worker:0", &me, dt_deadline_in(5), dt_deadline_in(10), &w, &v,
					 &why_not, &e),
			DT_PEER);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	fprintf(stderr, "worker 2 stopped dialling worker 0 after %.3f s: %s\n", waited, e.msg);
	DT_CHECK(waited < 2.0);
	DT_CHECK_INT_EQ(why_not, DT_MEMBER_UNREACHABLE);
	DT_CHECK_CONTAINS(e.msg, "worker:0 closed its connection with this task and refuses new ones");
	DT_CHECK_CONTAINS(e.msg, "stopped waiting after 1 attempt in ");

	/* Worker 1 listens (its desk): reached, and its answer awaited (none comes: 0.3 s). */
	const struct dt_member_id id1 = { .fingerprint = 42, .peers = t.peers, .table_n = 3, .self = 1 };
	struct dt_member_desk *desk = NULL;
	DT_CHECK_OK(dt_member_desk_open(&id1, &desk, &e), &e);
	why_not = 0;
	e = (struct dt_err)DT_ERR_INIT;
	t0 = dt_now_ns();
	enum dt_status st = dt_member_report(&id, 1, "worker:1", &me, dt_deadline_in(5), dt_deadline_in(0.3), &w, &v,
					     &why_not, &e);
	waited = (double)(dt_now_ns() - t0) / 1e9;
	fprintf(stderr, "worker 2's report to worker 1: %s after %.3f s: %s\n", dt_status_name(st), waited, e.msg);
	DT_CHECK_INT_EQ(st, DT_TIMEOUT);
	DT_CHECK_INT_EQ(why_not, 0);
	DT_CHECK(waited >= 0.25);
	DT_CHECK_CONTAINS(e.msg, "worker:1");
	dt_sock_close(dt_member_desk_close(desk));
}

DT_TEST_TIMEOUT(elastic, usage_errors, 60)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=5",
					 "--min_workers=-1", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--min_workers must be between 1 and the worker count");
	dt_run_release(&r);
}

/* ---- the frames (docs/PROTOCOL.md §3.7) ---- */

DT_TEST(elastic, member_frames_round_trip_and_refuse_bad_sizes)
{
	struct dt_member_report a = { .fingerprint = 0x1122334455667788ULL, .rank = 2, .epoch = 7, .done_step = 812,
				      .lost = 1 }, b;
	snprintf(a.why, sizeof(a.why), "connection reset");
	uint8_t buf[DT_MEMBER_REPORT_BYTES];
	dt_member_report_encode(&a, buf);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_member_report_decode(&b, buf, sizeof(buf), &err), DT_OK);
	DT_CHECK(b.fingerprint == a.fingerprint && b.rank == 2 && b.epoch == 7 && b.done_step == 812 && b.lost == 1);
	DT_CHECK_STR_EQ(b.why, "connection reset");
	DT_CHECK_INT_EQ(dt_member_report_decode(&b, buf, sizeof(buf) - 1, &err), DT_PROTOCOL);

	static struct dt_member_view v, w;
	v.epoch = 3, v.step = 812, v.root = 1, v.n = 2, v.ranks[0] = 0, v.ranks[1] = 2, v.nlost = 1, v.lost[0] = 1;
	snprintf(v.why[0], sizeof(v.why[0]), "no answer for 4.0 s");
	uint8_t vb[512];
	size_t len = dt_member_view_encode(&v, vb);
	DT_CHECK_INT_EQ((long long)len, (long long)dt_member_view_bytes(&v));
	DT_CHECK_INT_EQ(dt_member_view_decode(&w, vb, len, &err), DT_OK);
	DT_CHECK(w.epoch == 3 && w.step == 812 && w.root == 1 && w.n == 2 && w.ranks[1] == 2 && w.nlost == 1 &&
		 w.lost[0] == 1);
	DT_CHECK_STR_EQ(w.why[0], "no answer for 4.0 s");
	DT_CHECK_INT_EQ(dt_member_view_decode(&w, vb, len - 1, &err), DT_PROTOCOL);
	vb[12] = 5; /* the root outside the members */
	DT_CHECK_INT_EQ(dt_member_view_decode(&w, vb, len, &err), DT_PROTOCOL);
}
