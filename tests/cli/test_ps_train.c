/* Asynchronous training through parameter servers, as separate dtrain
 * processes on loopback: the whole run, failures of workers, refusals,
 * misbehaving peers against a live ps, and the seeds' command lines. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "cluster_procs.h"
#include "dt_test.h"
#include "net/frame.h"
#include "net/loop.h"
#include "net/messages.h"
#include "net/socket.h"
#include "../unit/net_test_util.h"

#define TASK_WAIT_S 240.0

static const char *const mlp_args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=3000",
					"--log_every=500", NULL };

DT_TEST_TIMEOUT(ps, two_ps_chief_and_worker_train_mlp_to_85_percent, 300)
{
	struct cluster c;
	cluster_init(&c, "chief", 1, 2);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", "--model=mlp",
									      "--problem=fashion_mnist", NULL });
	struct task *ps1 = cluster_start_train(&c, "ps", 1, (const char *[]){ "--schedule=run_std_server", "--model=mlp",
									      "--problem=fashion_mnist", NULL });
	struct task *worker = cluster_start_train(&c, "worker", 0, mlp_args);
	struct task *chief = cluster_start_train(&c, "chief", 0, mlp_args);

	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps0, 0, 30);
	EXPECT_EXIT(&c, ps1, 0, 30);
	char *out = task_read(chief, 0), *werr = task_read(worker, 1);
	char *p0 = task_read(ps0, 1), *p1 = task_read(ps1, 1), *cerr = task_read(chief, 1);
	DT_CHECK_CONTAINS(out, "eval (test split, 10000 examples) at global step ");
	double acc = cli_accuracy_of(out);
	fprintf(stderr, "async 2 ps + chief + worker: %s", out);
	DT_CHECK(acc >= 0.85);
	/* Both trainers did part of the work, and the ps ended because the chief said so. */
	DT_CHECK_CONTAINS(werr, "(global ");
	DT_CHECK_CONTAINS(cerr, "initialized ps:1");
	DT_CHECK_CONTAINS(cerr, "ended the run on 2 parameter server(s)");
	DT_CHECK_CONTAINS(p0, "the chief (chief:0 at 127.0.0.1:");
	DT_CHECK_CONTAINS(p1, "ended the run");
	DT_CHECK_CONTAINS(p0, "placement over 2 parameter server(s)");
	free(out), free(werr), free(p0), free(p1), free(cerr);
}

/* --eval_every in async training: the chief evaluates its pulled copy each
 * time the global step crosses a multiple, while the worker goes on; with
 * --ps_overlap (one step staler gradients) the run still learns. */
DT_TEST_TIMEOUT(ps, the_chief_evaluates_every_n_global_steps_with_overlap, 240)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=600", "--log_every=0",
				     "--eval_every=200", "--ps_overlap", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", "--model=mlp",
									      "--problem=fashion_mnist", NULL });
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *out = task_read(chief, 0), *cerr = task_read(chief, 1), *werr = task_read(worker, 1);
	fprintf(stderr, "async with --eval_every=200 --ps_overlap: %s", out);
	DT_CHECK_CONTAINS(cerr, "(--ps_overlap)");
	DT_CHECK_CONTAINS(werr, "(--ps_overlap)");
	/* At least the first multiple is crossed by a chief step (the last
	 * evaluation, at the end, is the printed one). */
	const char *ev = strstr(cerr, "eval at step ");
	DT_CHECK_CONTAINS(cerr, "eval at step ");
	long long at = atoll(ev + strlen("eval at step "));
	DT_CHECK(at >= 200 && at < 600);
	const char *acc = strstr(ev, "accuracy ");
	DT_CHECK(acc && atof(acc + strlen("accuracy ")) > 0.5);
	DT_CHECK(strstr(werr, "eval at step ") == NULL);
	DT_CHECK(cli_accuracy_of(out) >= 0.75);
	free(out), free(cerr), free(werr);
}

/* With one worker and no overlap nothing is stale: the ps path must give
 * exactly what training in one process gives (same init, data order and
 * optimizer). */
DT_TEST_TIMEOUT(ps, one_trainer_over_two_ps_equals_local_training, 240)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=200", "--log_every=0",
				     "--nops_overlap", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 0, 2);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, args);
	struct task *ps1 = cluster_start_train(&c, "ps", 1, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, ps0, 0, 30);
	EXPECT_EXIT(&c, ps1, 0, 30);
	char *dist = task_read(chief, 0);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=fashion_mnist", "--train_steps=200",
					 "--log_every=0", NULL }, NULL, 120);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_STR_EQ(dist, r.out);
	dt_run_release(&r);
	free(dist);
}

/* lenet and cnn both start with conv_1/kernel, of different shapes. */
DT_TEST_TIMEOUT(ps, a_worker_with_another_model_is_refused_naming_the_variable, 240)
{
	const char *const args[] = { "--model=lenet", "--problem=fashion_mnist", "--train_steps=100", "--log_every=0", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	struct task *other = cluster_start_train(&c, "worker", 0, (const char *[]){ "--model=cnn", "--problem=fashion_mnist",
										    "--train_steps=100", NULL });
	EXPECT_EXIT(&c, other, 2, 120);
	char *e = task_read(other, 1);
	DT_CHECK_CONTAINS(e, "error: ps:0 at 127.0.0.1:");
	DT_CHECK_CONTAINS(e, "refused the connection: model signature differs: variable 'conv_1/kernel' is (5, 5, 1, 6) "
			     "on ps:0 but (");
	DT_CHECK_CONTAINS(e, ") on worker:0");
	free(e);
	/* The ps kept serving the chief, which trains alone to the end. */
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *p = task_read(ps0, 1), *out = task_read(chief, 0);
	DT_CHECK_CONTAINS(p, "ended the run");
	DT_CHECK_CONTAINS(out, "at global step 100");
	free(p), free(out);
}

DT_TEST_TIMEOUT(ps, a_killed_worker_does_not_stop_the_run_and_rejoins, 300)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=6000", "--log_every=50",
				     "--noeval", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 2, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	EXPECT_LOG(&c, w1, "(global ", 120);
	task_kill(w1); /* SIGKILL, mid-run */
	/* The same slot again: a new incarnation joins and pulls fresh variables. */
	struct task *again = cluster_start_train(&c, "worker", 1, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w0, 0, 30);
	EXPECT_EXIT(&c, again, 0, 60);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *ce = task_read(chief, 1), *ae = task_read(again, 1);
	DT_CHECK_CONTAINS(ce, "ended the run on 1 parameter server(s) at global step 60");
	DT_CHECK_CONTAINS(ae, "connected to 1 parameter server(s)");
	free(ce), free(ae);
}

/* A ps that dies mid-run: the trainers fail within a bounded time with the
 * retryable exit code, naming the ps (checkpoints, to resume from, come later). */
DT_TEST_TIMEOUT(ps, a_dead_ps_is_an_error_naming_it, 240)
{
	/* The trainers wait --connect_timeout for the ps to come back (tests/cli/test_ps_recovery.c). */
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=100000", "--log_every=50",
				     "--noeval", "--connect_timeout=5", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	EXPECT_LOG(&c, worker, "(global ", 120);
	task_kill(ps0);
	EXPECT_EXIT(&c, chief, 3, 60);
	EXPECT_EXIT(&c, worker, 3, 60);
	char *ce = task_read(chief, 1), *we = task_read(worker, 1);
	DT_CHECK_CONTAINS(ce, "error: ");
	DT_CHECK_CONTAINS(ce, "ps:0 at 127.0.0.1:");
	DT_CHECK_CONTAINS(we, "ps:0 at 127.0.0.1:");
	free(ce), free(we);
}

/* Connects, sends `bytes`, optionally half-closes, and checks the ps closes
 * the connection within a few seconds. */
static void misbehave(struct dt_loop *loop, int port, const char *what, const void *bytes, size_t len, int half_close)
{
	int fd = test_raw_connect(port);
	struct dt_err err = DT_ERR_INIT;
	const uint8_t *p = bytes;
	/* One byte at a time: the decoder is incremental. The ps may close as
	 * soon as it has seen enough (4 bytes of bad magic): a failed send then
	 * is the expected outcome, not an error. */
	size_t sent = 0;
	while (sent < len && dt_sock_send_all(fd, p + sent, 1, dt_deadline_in(5), "ps:0", &err) == DT_OK)
		sent++;
	if (sent < len && sent < 4)
		dt_test_fail(__FILE__, __LINE__, "%s: the ps closed after only %zu bytes: %s", what, sent, err.msg);
	if (half_close && sent == len)
		shutdown(fd, SHUT_WR);
	uint8_t got[4096];
	size_t n;
	double waited = test_wait_closed(loop, fd, 15, got, sizeof(got), &n);
	if (waited > 12)
		dt_test_fail(__FILE__, __LINE__, "%s: the ps closed only after %.2f s", what, waited);
}

static size_t header_bytes(uint8_t *out, uint16_t version, uint16_t type, uint64_t length)
{
	struct dt_frame_header h = { version, type, 0, 0, length };
	dt_frame_header_pack(&h, out);
	return DT_FRAME_HEADER_SIZE;
}

DT_TEST_TIMEOUT(ps, misbehaving_peers_do_not_disturb_a_training_run, 300)
{
	const char *const args[] = { "--model=mlp", "--problem=fashion_mnist", "--train_steps=8000", "--log_every=500",
				     NULL };
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	int ps_port = cluster_port(&c, "ps", 0);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_LOG(&c, chief, "(global ", 120);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	/* A peer that connects and says nothing stays open meanwhile. */
	int silent = test_raw_connect(ps_port);

	uint8_t b[64];
	for (int i = 0; i < 40; i++)
		b[i] = (uint8_t)(i * 37 + 1);
	misbehave(loop, ps_port, "bad magic", b, 40, 0);
	const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	misbehave(loop, ps_port, "an HTTP request", http, strlen(http), 0);
	const uint8_t tls[] = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03 };
	misbehave(loop, ps_port, "a TLS ClientHello", tls, sizeof(tls), 0);
	misbehave(loop, ps_port, "a wrong protocol version", b, header_bytes(b, 2, DT_MSG_HELLO, 20), 0);
	misbehave(loop, ps_port, "a length of 2^31", b, header_bytes(b, DT_PROTOCOL_VERSION, DT_MSG_HELLO, 1ull << 31), 0);
	misbehave(loop, ps_port, "a push before the handshake", b,
		  header_bytes(b, DT_PROTOCOL_VERSION, DT_MSG_PS_PUSH, 1000), 0);
	size_t n = header_bytes(b, DT_PROTOCOL_VERSION, DT_MSG_HELLO, 200);
	memset(b + n, 0, 10);
	misbehave(loop, ps_port, "a truncated frame, then close", b, n + 10, 1);

	/* All of that happened while the chief was training (it is still at it). */
	DT_CHECK_INT_EQ(task_wait(chief, 0), -1);
	/* The silent peer is dropped when its hello does not come in time (10 s). */
	size_t got;
	test_wait_closed(loop, silent, 20, b, sizeof(b), &got);
	DT_CHECK_INT_EQ(got, 0);
	dt_loop_free(loop);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *out = task_read(chief, 0), *p = task_read(ps0, 1);
	DT_CHECK(cli_accuracy_of(out) > 0.7);
	DT_CHECK_CONTAINS(p, "ended the run");
	free(out), free(p);
}

/* Seed 003: TensorFlow's low-level flags, two ps and two workers (worker 0 the chief). */
DT_TEST_TIMEOUT(ps, seed_003_flags_train_together, 240)
{
	int ports[4];
	cli_free_ports(ports, 4);
	char ps_hosts[96], worker_hosts[96];
	snprintf(ps_hosts, sizeof(ps_hosts), "--ps_hosts=127.0.0.1:%d,127.0.0.1:%d", ports[0], ports[1]);
	snprintf(worker_hosts, sizeof(worker_hosts), "--worker_hosts=127.0.0.1:%d,127.0.0.1:%d", ports[2], ports[3]);
	struct cluster c;
	memset(&c, 0, sizeof(c));
	const char *jobs[4][2] = { { "--job_name=ps", "--task_index=0" }, { "--job_name=ps", "--task_index=1" },
				   { "--job_name=worker", "--task_index=1" }, { "--job_name=worker", "--task_index=0" } };
	const char *names[4] = { "ps0", "ps1", "worker1", "worker0" };
	for (int i = 0; i < 4; i++) {
		const char *argv[] = { "dtrain", "train", ps_hosts, worker_hosts, jobs[i][0], jobs[i][1], "--model=mlp",
				       "--problem=fashion_mnist", "--train_steps=300", "--log_every=100", NULL };
		task_start(&c.tasks[c.n++], names[i], argv, NULL);
	}
	EXPECT_EXIT(&c, &c.tasks[3], 0, TASK_WAIT_S);
	for (int i = 0; i < 3; i++)
		EXPECT_EXIT(&c, &c.tasks[i], 0, 30);
	char *out = task_read(&c.tasks[3], 0);
	DT_CHECK_CONTAINS(out, "at global step 30");
	DT_CHECK(cli_accuracy_of(out) > 0.6);
	free(out);
}

/* Seed 000's async example: every line `dtrain make-configs` prints, started
 * as its own process (TF_CONFIG=... dtrain train <flags> --model --problem). */
DT_TEST_TIMEOUT(ps, make_configs_async_lines_train_together, 240)
{
	int ports[4];
	cli_free_ports(ports, 4);
	char masters[96], ps[96];
	snprintf(masters, sizeof(masters), "--masters=127.0.0.1:%d,127.0.0.1:%d", ports[0], ports[1]);
	snprintf(ps, sizeof(ps), "--ps=127.0.0.1:%d,127.0.0.1:%d", ports[2], ports[3]);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "make-configs", masters, ps, NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	struct cluster c;
	int chief = cluster_start_make_configs(&c, r.out, 4, "--model=mlp --problem=fashion_mnist --train_steps=300 "
							      "--log_every=100", "chief");
	dt_run_release(&r);
	DT_CHECK_INT_EQ(c.n, 4);
	DT_CHECK(chief >= 0);
	EXPECT_EXIT(&c, &c.tasks[chief], 0, TASK_WAIT_S);
	for (int i = 0; i < c.n; i++)
		EXPECT_EXIT(&c, &c.tasks[i], 0, 30);
	char *e = task_read(&c.tasks[chief], 1);
	DT_CHECK_CONTAINS(e, "ended the run on 2 parameter server(s) at global step 30");
	free(e);
}

DT_TEST_TIMEOUT(ps, a_ps_whose_chief_never_comes_gives_up_by_its_idle_deadline, 90)
{
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	char tf_config[512];
	cluster_tf_config(&c, "ps", 0, tf_config, sizeof(tf_config));
	const char *env[] = { tf_config, NULL };
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--schedule=run_std_server", "--problem=synthetic",
					 "--model=mlp", "--ps_idle_timeout=1.5", NULL }, env, 80);
	DT_CHECK(!r.timed_out);
	DT_CHECK_INT_EQ(r.exit_code, 3);
	DT_CHECK_CONTAINS(r.err, "no trainer has been connected for 1.5 s");
	DT_CHECK_CONTAINS(r.err, "chief:0 at 127.0.0.1:");
	DT_CHECK(r.seconds < 30);
	dt_run_release(&r);
}

/* DTRAIN_TCP_CONGESTION reaches both ends of the ps connections (the ps's
 * listener, the trainer's dial: net/congestion.h): a name the kernel does
 * not have stops each before it listens or dials, naming the variable
 * (exit 2). */
DT_TEST_TIMEOUT(ps, a_congestion_control_that_cannot_be_set_stops_the_ps_and_the_trainer, 60)
{
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	const char *roles[] = { "ps", "chief" };
	for (int i = 0; i < 2; i++) {
		char tf_config[512];
		cluster_tf_config(&c, roles[i], 0, tf_config, sizeof(tf_config));
		const char *env[] = { tf_config, "DTRAIN_TCP_CONGESTION=no-such-cc", NULL };
		struct dt_run r;
		dt_test_run(&r, (const char *[]){ "dtrain", "train", "--problem=synthetic", "--model=mlp",
						 "--train_steps=10", "--connect_timeout=5", NULL }, env, 50);
		DT_CHECK(!r.timed_out);
		DT_CHECK_INT_EQ(r.exit_code, 2);
		DT_CHECK_CONTAINS(r.err, "TCP congestion control 'no-such-cc' (DTRAIN_TCP_CONGESTION) cannot be set");
		DT_CHECK(r.seconds < 20);
		dt_run_release(&r);
	}
}
