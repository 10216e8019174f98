/* Tests for dt_conn_dial (src/net/conn.c): a wait for a peer that retries
 * whatever a retry can fix until its own deadline — a server paused for
 * several HELLO deadlines, a port nobody listens on — and stops at once on
 * a refusal or when its stop hook says so. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dt_test.h"
#include "net_test_util.h"
#include "base/clock.h"
#include "base/retry.h"
#include "net/conn.h"
#include "net/handshake.h"
#include "net/socket.h"

/* A loopback port nothing listens on (bound, then closed). */
static int unused_port(void)
{
	int fd, port;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_listen("127.0.0.1", 0, 1, &fd, &port, &err), &err);
	close(fd);
	return port;
}

/* Sends SIGCONT to `pid` after `seconds`, from a child of its own. */
static pid_t continue_later(pid_t pid, double seconds)
{
	fflush(NULL);
	pid_t k = fork();
	DT_CHECK(k >= 0);
	if (k == 0) {
		dt_sleep(seconds);
		kill(pid, SIGCONT);
		_exit(0);
	}
	return k;
}

DT_TEST_TIMEOUT(net_dial, a_dial_outlasts_a_server_paused_for_several_hello_deadlines, 30)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_hello me;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 256);
	/* The client's HELLO deadline is 0.3 s; the server is paused for 1.5 s. */
	struct dt_conn_config cfg = { .handshake_s = 0.3 };
	DT_CHECK(kill(ts.pid, SIGSTOP) == 0);

	/* One attempt, as the reconnect loop made before: its kernel accepts the
	 * TCP connection, nobody answers the HELLO, and that was the end. */
	struct dt_conn *c = NULL;
	DT_CHECK_INT_EQ(dt_conn_connect(loop, "127.0.0.1", ts.port, &me, "ps", 0, &cfg, dt_deadline_in(5), &c, &err),
			DT_TIMEOUT);
	DT_CHECK_CONTAINS(err.msg, "no answer to our hello within 0.3 s");
	DT_CHECK(c == NULL);

	/* The dial waits it out. */
	int64_t t0 = dt_now_ns();
	pid_t k = continue_later(ts.pid, 1.5);
	struct dt_retry rt;
	dt_retry_init(&rt, t0, t0 + (int64_t)(10 * 1e9), "--connect_timeout=10 s", 1);
	DT_CHECK_OK(dt_conn_dial(loop, "127.0.0.1", ts.port, &me, "ps", 0, &cfg, &rt, NULL, &c, &err), &err);
	double took = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(c != NULL);
	if (took < 1.2 || took > 5.0)
		dt_test_fail(__FILE__, __LINE__, "connected after %.2f s, expected soon after the 1.5 s pause", took);
	/* At least 1.5 / (0.3 + a pause) HELLOs went unanswered before. */
	if (rt.attempts < 2)
		dt_test_fail(__FILE__, __LINE__, "%d failed attempts before connecting, expected >= 2", rt.attempts);
	DT_CHECK_INT_EQ(rt.last, DT_TIMEOUT);
	DT_CHECK_CONTAINS(rt.last_err.msg, "no answer to our hello within 0.3 s");
	test_echo_ok(c, "after the pause");

	waitpid(k, NULL, 0);
	dt_conn_free(c);
	dt_hello_release(&me);
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
}

DT_TEST_TIMEOUT(net_dial, a_dial_past_its_deadline_names_it_and_the_last_failure, 30)
{
	int port = unused_port();
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_hello me;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 256);
	int64_t t0 = dt_now_ns();
	struct dt_retry rt;
	dt_retry_init(&rt, t0, t0 + (int64_t)(0.8 * 1e9), "--connect_timeout=0.8 s", 2);
	struct dt_conn *c = NULL;
	DT_CHECK_INT_EQ(dt_conn_dial(loop, "127.0.0.1", port, &me, "ps", 3, NULL, &rt, NULL, &c, &err), DT_TIMEOUT);
	double took = (double)(dt_now_ns() - t0) / 1e9;
	if (took < 0.75 || took > 3.0)
		dt_test_fail(__FILE__, __LINE__, "gave up after %.2f s, expected ~0.8 s", took);
	DT_CHECK(c == NULL);
	char want[128];
	snprintf(want, sizeof(want), "cannot reach ps:3 at 127.0.0.1:%d within --connect_timeout=0.8 s (", port);
	DT_CHECK_CONTAINS(err.msg, want);
	DT_CHECK_CONTAINS(err.msg, "; the last: cannot connect to ps:3 at 127.0.0.1:");
	DT_CHECK_CONTAINS(err.msg, "Connection refused");
	dt_hello_release(&me);
	dt_loop_free(loop);
}

static int stop_now(void *arg)
{
	return ++*(int *)arg >= 1;
}

DT_TEST_TIMEOUT(net_dial, a_refusal_ends_a_dial_at_once_and_the_stop_hook_ends_it_quietly, 30)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_hello me;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 256);
	/* Expecting ps:1 where ps:0 serves: a refusal, not worth a second try. */
	int64_t t0 = dt_now_ns();
	struct dt_retry rt;
	dt_retry_init(&rt, t0, t0 + (int64_t)(20 * 1e9), "--connect_timeout=20 s", 3);
	struct dt_conn *c = NULL;
	DT_CHECK_INT_EQ(dt_conn_dial(loop, "127.0.0.1", ts.port, &me, "ps", 1, NULL, &rt, NULL, &c, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "the task there is ps:0, not ps:1");
	DT_CHECK_INT_EQ(rt.attempts, 1);
	DT_CHECK(c == NULL);
	DT_CHECK((double)(dt_now_ns() - t0) / 1e9 < 5.0);

	/* A port nobody listens on, and a stop hook that says stop: DT_OK, no conn. */
	int calls = 0;
	struct dt_dial_stop stop = { stop_now, &calls };
	dt_retry_init(&rt, dt_now_ns(), dt_deadline_in(20), "--connect_timeout=20 s", 4);
	DT_CHECK_OK(dt_conn_dial(loop, "127.0.0.1", unused_port(), &me, "ps", 0, NULL, &rt, &stop, &c, &err), &err);
	DT_CHECK(c == NULL);
	DT_CHECK_INT_EQ(calls, 1);
	DT_CHECK_INT_EQ(rt.attempts, 1);

	dt_hello_release(&me);
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
}
