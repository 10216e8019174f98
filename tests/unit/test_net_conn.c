/* Tests for src/net/conn.c and server.c: heartbeats keep idle connections
 * alive, silent and dead peers become errors naming them within a bounded
 * time, request deadlines, large payloads without copies, pipelining, and
 * tasks that serve and connect on one loop. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dt_test.h"
#include "net_test_util.h"
#include "base/clock.h"
#include "net/conn.h"
#include "net/handshake.h"
#include "net/server.h"

struct closed_note {
	int closed;
	struct dt_err why;
	int64_t at;
};

static void note_close(struct dt_conn *c, const struct dt_err *why, void *arg)
{
	struct closed_note *n = arg;
	n->closed = 1;
	n->why = *why;
	n->at = dt_now_ns();
}

static int note_closed(void *arg)
{
	return ((struct closed_note *)arg)->closed;
}

static const struct dt_conn_handler note_handler = { .on_close = note_close };

DT_TEST_TIMEOUT(net_conn, heartbeats_keep_an_idle_connection_alive, 30)
{
	struct test_server ts;
	struct test_server_opts o = { .heartbeat_s = 0.05, .silence_s = 0.4 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct closed_note note = { 0 };
	struct dt_conn_config cfg = { .heartbeat_s = 0.05, .silence_s = 0.4, .handler = &note_handler, .arg = &note };
	struct dt_conn *c = test_client(loop, ts.port, &cfg);
	/* Ten silence periods of nothing but heartbeats. */
	test_run_loop_for(loop, 2.0);
	DT_CHECK(!note.closed);
	DT_CHECK(dt_conn_is_open(c));
	struct dt_conn_stats st;
	dt_conn_get_stats(c, &st);
	DT_CHECK(st.heartbeats_in >= 20);
	DT_CHECK(st.heartbeats_out >= 20);
	DT_CHECK(st.heartbeats_in <= 60); /* one per interval, not a flood */
	test_echo_ok(c, "still here");
	dt_conn_free(c);
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
	DT_CHECK_UINT_EQ(stats.timeouts, 0);
	DT_CHECK_UINT_EQ(stats.opened, 1);
}

DT_TEST_TIMEOUT(net_conn, a_stopped_server_times_out_requests_then_is_dropped_as_silent, 30)
{
	struct test_server ts;
	struct test_server_opts o = { .heartbeat_s = 0.05 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct closed_note note = { 0 };
	struct dt_conn_config cfg = { .heartbeat_s = 0.05, .silence_s = 0.8, .handler = &note_handler, .arg = &note };
	struct dt_conn *c = test_client(loop, ts.port, &cfg);
	test_echo_ok(c, "hello");
	char peer[64];
	snprintf(peer, sizeof(peer), "ps:0 at 127.0.0.1:%d", ts.port);

	DT_CHECK(kill(ts.pid, SIGSTOP) == 0); /* a straggler: alive, silent */
	int64_t stopped = dt_now_ns();
	char reply[16];
	DT_CHECK_INT_EQ(dt_conn_call(c, DT_MSG_ECHO, "x", 1, reply, sizeof(reply), NULL, dt_deadline_in(0.2), &err), DT_TIMEOUT);
	char want[128];
	snprintf(want, sizeof(want), "no reply from %s to echo request 2 within 0.2 s", peer);
	DT_CHECK_STR_EQ(err.msg, want);
	DT_CHECK(dt_conn_is_open(c)); /* a late reply is not yet a dead peer */

	DT_CHECK_OK(dt_loop_run_until(loop, note_closed, &note, dt_deadline_in(5), "the silence limit", &err), &err);
	double after = (double)(note.at - stopped) / 1e9;
	if (after < 0.7 || after > 2.0)
		dt_test_fail(__FILE__, __LINE__, "the silent server was noticed after %.2f s, expected ~0.8 s", after);
	DT_CHECK_INT_EQ(note.why.status, DT_TIMEOUT);
	snprintf(want, sizeof(want), "no data from %s for 0.", peer);
	DT_CHECK_CONTAINS(note.why.msg, want);
	DT_CHECK_CONTAINS(note.why.msg, "(heartbeats are due every 0.1 s)");
	DT_CHECK(!dt_conn_is_open(c));
	DT_CHECK_INT_EQ(dt_conn_call(c, DT_MSG_ECHO, "x", 1, reply, sizeof(reply), NULL, dt_deadline_in(1), &err), DT_PEER);
	DT_CHECK_CONTAINS(err.msg, "the connection is closed: no data from");

	dt_conn_free(c);
	dt_loop_free(loop);
	kill(ts.pid, SIGKILL);
	waitpid(ts.pid, NULL, 0);
	close(ts.ctl_fd);
	close(ts.report_fd);
}

DT_TEST_TIMEOUT(net_conn, a_killed_server_fails_pending_requests_at_once, 30)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct closed_note note = { 0 };
	struct dt_conn_config cfg = { .handler = &note_handler, .arg = &note };
	struct dt_conn *c = test_client(loop, ts.port, &cfg);
	DT_CHECK(kill(ts.pid, SIGSTOP) == 0);
	struct dt_request r;
	memset(&r, 0, sizeof(r));
	r.type = DT_MSG_ECHO;
	r.deadline = dt_deadline_in(20);
	struct iovec part = { (void *)"ping", 4 };
	DT_CHECK_OK(dt_conn_request(c, &r, &part, 1, 1, &err), &err);
	test_run_loop_for(loop, 0.05);
	DT_CHECK(!r.done);
	int64_t t0 = dt_now_ns();
	kill(ts.pid, SIGKILL);
	waitpid(ts.pid, NULL, 0);
	DT_CHECK_OK(dt_loop_run_until(loop, dt_request_is_done, &r, dt_deadline_in(5), "the request to fail", &err), &err);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(waited < 1.0);
	DT_CHECK_INT_EQ(r.status, DT_PEER);
	char want[128];
	snprintf(want, sizeof(want), "echo request 1 to ps:0 at 127.0.0.1:%d failed: ps:0 at 127.0.0.1:%d ", ts.port, ts.port);
	DT_CHECK_CONTAINS(r.err.msg, want);
	/* Pending requests fail first, then on_close runs, in the same round. */
	DT_CHECK(note.closed);
	DT_CHECK_INT_EQ(note.why.status, DT_PEER);
	DT_CHECK_INT_EQ(dt_status_exit_code(r.status), 3);
	dt_conn_free(c);
	dt_loop_free(loop);
	close(ts.ctl_fd);
	close(ts.report_fd);
}

/* Issue 21: a process stopped past a request's deadline finds, once
 * continued, its own wait's deadline passed before the conn's timer has run;
 * giving the request up then is its timeout (exit 3), not a runtime failure
 * (the in-graph master exited 1, "ps_replica_step request to ps:0 ...
 * cancelled"). Given up before its deadline it is still cancelled. */
DT_TEST_TIMEOUT(net_conn, a_request_given_up_past_its_deadline_timed_out, 30)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_conn *c = test_client(loop, ts.port, &(struct dt_conn_config){ 0 });
	DT_CHECK(kill(ts.pid, SIGSTOP) == 0);
	struct dt_request early, late;
	memset(&early, 0, sizeof(early));
	memset(&late, 0, sizeof(late));
	early.type = late.type = DT_MSG_ECHO;
	early.deadline = dt_deadline_in(20);
	late.deadline = dt_deadline_in(0.2);
	struct iovec part = { (void *)"ping", 4 };
	DT_CHECK_OK(dt_conn_request(c, &early, &part, 1, 1, &err), &err);
	DT_CHECK_OK(dt_conn_request(c, &late, &part, 1, 1, &err), &err);
	dt_sleep(0.5); /* "stopped": the loop does not turn past late's deadline */
	/* The waiter's deadline (late's + slack, passed too) ends the wait
	 * before any timer ran, as in round_trip or ps_client's wait_all. */
	DT_CHECK_INT_EQ(dt_loop_run_until(loop, dt_request_is_done, &late, late.deadline + 100000000LL, "a reply", &err),
			DT_TIMEOUT);
	DT_CHECK(!late.done);
	dt_request_cancel(&late);
	dt_request_cancel(&early);
	DT_CHECK_INT_EQ(late.status, DT_TIMEOUT);
	DT_CHECK_INT_EQ(dt_status_exit_code(late.status), 3);
	char want[128];
	snprintf(want, sizeof(want), "no reply from ps:0 at 127.0.0.1:%d to echo request 2 within 0.", ts.port);
	DT_CHECK_CONTAINS(late.err.msg, want);
	DT_CHECK_INT_EQ(early.status, DT_RUNTIME);
	DT_CHECK_CONTAINS(early.err.msg, "cancelled");
	dt_conn_free(c);
	dt_loop_free(loop);
	kill(ts.pid, SIGKILL);
	waitpid(ts.pid, NULL, 0);
	close(ts.ctl_fd);
	close(ts.report_fd);
}

struct sent_note {
	int done;
	enum dt_status st;
};

static void on_sent(void *arg, enum dt_status st)
{
	struct sent_note *n = arg;
	n->done++;
	n->st = st;
}

static void on_reply(struct dt_request *r, const uint8_t *reply, void *arg)
{
	*(const uint8_t **)arg = reply;
}

DT_TEST_TIMEOUT(net_conn, large_payloads_go_by_reference_and_land_in_place, 60)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_conn *c = test_client(loop, ts.port, NULL);

	size_t len = 10u << 20;
	uint8_t head[16] = "0123456789abcdef";
	uint8_t *body = malloc(len), *back = malloc(len + 16);
	for (size_t i = 0; i < len; i++)
		body[i] = (uint8_t)(i * 2654435761u >> 13);
	struct dt_request r;
	memset(&r, 0, sizeof(r));
	r.type = DT_MSG_ECHO;
	r.deadline = dt_deadline_in(20);
	r.reply_buf = back;
	r.reply_cap = len + 16;
	const uint8_t *seen = NULL;
	r.on_done = on_reply;
	r.arg = &seen;
	struct iovec parts[2] = { { head, 16 }, { body, len } };
	DT_CHECK_OK(dt_conn_request(c, &r, parts, 2, 0, &err), &err);
	DT_CHECK_OK(dt_loop_run_until(loop, dt_request_is_done, &r, dt_deadline_in(20), "the echo", &err), &err);
	DT_CHECK_OK(r.status, &r.err);
	DT_CHECK(seen == back); /* received straight into reply_buf */
	DT_CHECK_UINT_EQ(r.reply.length, len + 16);
	DT_CHECK(memcmp(back, head, 16) == 0);
	DT_CHECK(memcmp(back + 16, body, len) == 0);

	/* A one-way frame by reference: done() runs once it is all written. */
	struct sent_note sent = { 0, DT_INTERNAL };
	DT_CHECK_OK(dt_conn_sendv_ref(c, DT_MSG_HEARTBEAT, 0, 0, NULL, 0, on_sent, &sent, &err), &err);
	test_run_loop_for(loop, 0.05);
	DT_CHECK_INT_EQ(sent.done, 1);
	DT_CHECK_INT_EQ(sent.st, DT_OK);

	/* A reply longer than the buffer fails that request only. */
	char small[4];
	DT_CHECK_INT_EQ(dt_conn_call(c, DT_MSG_ECHO, "too long", 8, small, sizeof(small), NULL, dt_deadline_in(5), &err),
			DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "is 8 bytes, more than the 4 expected");
	test_echo_ok(c, "fine");

	free(body);
	free(back);
	dt_conn_free(c);
	dt_loop_free(loop);
	test_server_stop(&ts, NULL);
}

DT_TEST_TIMEOUT(net_conn, many_requests_in_flight_each_get_their_reply, 30)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_conn *c = test_client(loop, ts.port, NULL);
	enum { N = 300 };
	static struct dt_request r[N];
	static char out[N][32], in[N][32];
	for (int i = 0; i < N; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].type = DT_MSG_ECHO;
		r[i].deadline = dt_deadline_in(10);
		r[i].reply_buf = in[i];
		r[i].reply_cap = sizeof(in[i]);
		snprintf(out[i], sizeof(out[i]), "request %d", i * 7919);
		struct iovec part = { out[i], strlen(out[i]) + 1 };
		DT_CHECK_OK(dt_conn_request(c, &r[i], &part, 1, 1, &err), &err);
	}
	for (int i = 0; i < N; i++) {
		DT_CHECK_OK(dt_loop_run_until(loop, dt_request_is_done, &r[i], dt_deadline_in(10), "replies", &err), &err);
		DT_CHECK_OK(r[i].status, &r[i].err);
		DT_CHECK_STR_EQ(in[i], out[i]);
	}
	dt_conn_free(c);
	dt_loop_free(loop);
	test_server_stop(&ts, NULL);
}

/* ---- serving and connecting on one loop ---- */

static int zero_conns(void *arg)
{
	return dt_server_conn_count(arg) == 0;
}

DT_TEST_TIMEOUT(net_conn, a_server_and_its_client_share_one_loop_and_shut_down_in_order, 30)
{
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_hello ps;
	test_hello(&ps, "ps", 0, TEST_FINGERPRINT, 256);
	struct dt_server_config scfg;
	memset(&scfg, 0, sizeof(scfg));
	scfg.local = &ps;
	struct dt_server *server;
	DT_CHECK_OK(dt_server_new(loop, &scfg, &server, &err), &err);
	/* The handshake needs the server to answer on this very loop. */
	struct closed_note note = { 0 };
	struct dt_conn_config cfg = { .handler = &note_handler, .arg = &note };
	struct dt_conn *c = test_client(loop, dt_server_port(server), &cfg);
	test_echo_ok(c, "local");
	DT_CHECK_INT_EQ(dt_server_conn_count(server), 1);

	dt_server_shutdown_all(server, "training finished");
	DT_CHECK_OK(dt_loop_run_until(loop, note_closed, &note, dt_deadline_in(5), "the shutdown", &err), &err);
	if (note.why.status != DT_OK)
		dt_test_fail(__FILE__, __LINE__, "closed with status %d: %s", note.why.status, note.why.msg);
	char want[128];
	snprintf(want, sizeof(want), "ps:0 at 127.0.0.1:%d shut down the connection: training finished", dt_server_port(server));
	DT_CHECK_STR_EQ(note.why.msg, want);
	DT_CHECK_OK(dt_loop_run_until(loop, zero_conns, server, dt_deadline_in(5), "the server to let go", &err), &err);

	dt_conn_free(c);
	dt_server_free(server);
	DT_CHECK_INT_EQ(dt_loop_fd_count(loop), 0);
	dt_loop_free(loop);
	dt_hello_release(&ps);
}

/* Each side serves on its loop and dials the other at the same moment, as
 * two ring neighbours do: the handshakes must not wait on each other. */
static enum dt_status dial(struct dt_loop *loop, int port, uint32_t me, uint32_t them, struct dt_conn **c, struct dt_err *err)
{
	struct dt_hello hello;
	test_hello(&hello, "worker", me, TEST_FINGERPRINT, 256);
	enum dt_status st = dt_conn_connect(loop, "127.0.0.1", port, &hello, "worker", them, NULL, dt_deadline_in(10), c, err);
	dt_hello_release(&hello);
	return st;
}

static struct dt_server *serve(struct dt_loop *loop, struct dt_hello *hello, uint32_t me)
{
	test_hello(hello, "worker", me, TEST_FINGERPRINT, 256);
	struct dt_server_config scfg;
	memset(&scfg, 0, sizeof(scfg));
	scfg.local = hello;
	struct dt_server *s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_server_new(loop, &scfg, &s, &err), &err);
	return s;
}

DT_TEST_TIMEOUT(net_conn, two_tasks_dialing_each_other_at_once_both_connect, 30)
{
	int ports[2];
	DT_CHECK(pipe(ports) == 0);
	int back[2];
	DT_CHECK(pipe(back) == 0);
	fflush(NULL);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		struct dt_loop *loop;
		struct dt_err e = DT_ERR_INIT;
		DT_CHECK_OK(dt_loop_new(&loop, &e), &e);
		struct dt_hello hello;
		struct dt_server *s = serve(loop, &hello, 1);
		int mine = dt_server_port(s), theirs = 0;
		DT_CHECK(write(ports[1], &mine, sizeof(mine)) == sizeof(mine));
		DT_CHECK(read(back[0], &theirs, sizeof(theirs)) == sizeof(theirs));
		struct dt_conn *c;
		DT_CHECK_OK(dial(loop, theirs, 1, 0, &c, &e), &e);
		test_echo_ok(c, "from worker:1");
		test_run_loop_for(loop, 0.2); /* serve the other side's echo too */
		dt_conn_free(c);
		dt_server_free(s);
		dt_loop_free(loop);
		dt_hello_release(&hello);
		_exit(0);
	}
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_hello hello;
	struct dt_server *s = serve(loop, &hello, 0);
	int mine = dt_server_port(s), theirs = 0;
	DT_CHECK(read(ports[0], &theirs, sizeof(theirs)) == sizeof(theirs));
	DT_CHECK(write(back[1], &mine, sizeof(mine)) == sizeof(mine));
	struct dt_conn *c;
	DT_CHECK_OK(dial(loop, theirs, 0, 1, &c, &err), &err);
	test_echo_ok(c, "from worker:0");
	int status;
	int64_t deadline = dt_deadline_in(10);
	while (waitpid(pid, &status, WNOHANG) == 0 && !dt_deadline_passed(deadline))
		test_run_loop_for(loop, 0.01);
	DT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	dt_conn_free(c);
	dt_server_free(s);
	dt_loop_free(loop);
	dt_hello_release(&hello);
	close(ports[0]);
	close(ports[1]);
	close(back[0]);
	close(back[1]);
}
