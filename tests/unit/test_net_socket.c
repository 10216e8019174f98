/* Tests for src/net/socket.c and src/net/loop.c on loopback: listening on port
 * 0, connect with backoff (late listener, no listener), whole-buffer I/O with
 * deadlines, the exchange loop, and the event loop's timers and wake-up. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dt_test.h"
#include "base/clock.h"
#include "base/strutil.h"
#include "net/loop.h"
#include "net/socket.h"

/* A connected pair over loopback TCP: *a is the client end, *b the accepted end. */
static void tcp_pair(int *a, int *b)
{
	struct dt_err err = DT_ERR_INIT;
	int lfd, port;
	DT_CHECK_OK(dt_sock_listen("127.0.0.1", 0, 4, &lfd, &port, &err), &err);
	DT_CHECK_OK(dt_sock_connect("127.0.0.1", port, "peer", dt_deadline_in(5), NULL, a, &err), &err);
	*b = -1;
	int64_t deadline = dt_deadline_in(5);
	while (*b < 0 && !dt_deadline_passed(deadline)) {
		char addr[64];
		DT_CHECK_OK(dt_sock_accept(lfd, b, addr, sizeof(addr), &err), &err);
		if (*b < 0)
			dt_sleep(0.001);
	}
	DT_CHECK(*b >= 0);
	close(lfd);
}

/* A port nobody listens on and nobody else can take while `holder` is open:
 * bound, not listening. */
static int reserve_port(int *holder)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	DT_CHECK(fd >= 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	DT_CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	*holder = fd;
	return dt_sock_local_port(fd);
}

DT_TEST(net_socket, split_hostport_accepts_names_ipv4_and_ipv6)
{
	char host[64];
	int port;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_split_hostport("ps-0.svc:2222", host, sizeof(host), &port, &err), &err);
	DT_CHECK_STR_EQ(host, "ps-0.svc");
	DT_CHECK_INT_EQ(port, 2222);
	DT_CHECK_OK(dt_sock_split_hostport("[::1]:0", host, sizeof(host), &port, &err), &err);
	DT_CHECK_STR_EQ(host, "::1");
	DT_CHECK_INT_EQ(port, 0);
	const char *bad[] = { "nohost", ":80", "h:", "h:65536", "h:-1", "h:80x", "::1:80", "[::1]80", "[::1]" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		DT_CHECK_INT_EQ(dt_sock_split_hostport(bad[i], host, sizeof(host), &port, &err), DT_CONFIG);
		DT_CHECK_CONTAINS(err.msg, bad[i]);
	}
}

DT_TEST(net_socket, listen_on_port_0_reports_the_port_and_data_flows)
{
	int a, b;
	tcp_pair(&a, &b);
	char local[64], remote[64];
	dt_sock_local_name(b, local, sizeof(local));
	dt_sock_peer_name(a, remote, sizeof(remote));
	DT_CHECK_STR_EQ(local, remote);
	DT_CHECK(strncmp(local, "127.0.0.1:", 10) == 0);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_send_all(a, "hello", 5, dt_deadline_in(5), "b", &err), &err);
	char buf[6] = "";
	DT_CHECK_OK(dt_sock_recv_all(b, buf, 5, dt_deadline_in(5), "a", &err), &err);
	DT_CHECK_STR_EQ(buf, "hello");
	close(a);
	close(b);
}

DT_TEST(net_socket, listening_on_a_port_in_use_fails_naming_it)
{
	struct dt_err err = DT_ERR_INIT;
	int l1, port, l2;
	DT_CHECK_OK(dt_sock_listen("127.0.0.1", 0, 4, &l1, &port, &err), &err);
	DT_CHECK_INT_EQ(dt_sock_listen("127.0.0.1", port, 4, &l2, NULL, &err), DT_PEER); /* retryable: exit 3 */
	char want[96];
	snprintf(want, sizeof(want), "cannot listen on 127.0.0.1:%d: Address already in use (port %d is taken", port,
		 port);
	DT_CHECK_CONTAINS(err.msg, want);
	DT_CHECK_INT_EQ(l2, -1);
	close(l1);
}

DT_TEST(net_socket, connect_retries_until_a_late_listener_appears)
{
	int holder;
	int port = reserve_port(&holder);
	fflush(NULL);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		/* The child owns the bound socket and starts listening 300 ms late. */
		dt_sleep(0.3);
		if (listen(holder, 4) != 0)
			_exit(2);
		dt_sleep(5);
		_exit(0);
	}
	int64_t t0 = dt_now_ns();
	struct dt_connect_opts opts = { .initial_backoff_s = 0.01, .max_backoff_s = 0.1, .attempt_timeout_s = 1.0 };
	struct dt_err err = DT_ERR_INIT;
	int fd;
	close(holder); /* the child's copy keeps the port bound */
	DT_CHECK_OK(dt_sock_connect("127.0.0.1", port, "ps:1", dt_deadline_in(5), &opts, &fd, &err), &err);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(waited >= 0.25);
	DT_CHECK(waited < 3.0);
	DT_CHECK(opts.attempts > 2);
	close(fd);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* The caller's stop ends the retries of a refused connection at once,
 * long before the deadline, and the error says so. */
static int stop_at_third_look(void *arg)
{
	int *looks = arg;
	return ++*looks >= 3;
}

DT_TEST(net_socket, a_stop_ends_the_retries_of_a_refused_connection_before_the_deadline)
{
	int holder;
	int port = reserve_port(&holder);
	int looks = 0;
	struct dt_connect_opts opts = { .initial_backoff_s = 0.01, .max_backoff_s = 0.2, .attempt_timeout_s = 1.0,
					.stop = stop_at_third_look, .stop_arg = &looks };
	struct dt_err err = DT_ERR_INIT;
	int fd = 123;
	int64_t t0 = dt_now_ns();
	DT_CHECK_INT_EQ(dt_sock_connect("127.0.0.1", port, "worker:0", dt_deadline_in(5), &opts, &fd, &err), DT_PEER);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(waited < 1.0);
	DT_CHECK(looks >= 3 && looks <= 4); /* the third look, in a pause or after an attempt, and the next attempt's */
	DT_CHECK_INT_EQ(fd, -1);
	DT_CHECK(opts.attempts >= 1);
	DT_CHECK_CONTAINS(err.msg, ": Connection refused; stopped waiting after ");
	close(holder);
}

DT_TEST(net_socket, connect_to_a_port_that_never_listens_fails_by_the_deadline)
{
	int holder;
	int port = reserve_port(&holder);
	int64_t t0 = dt_now_ns();
	struct dt_connect_opts opts = { .initial_backoff_s = 0.01, .max_backoff_s = 0.2, .attempt_timeout_s = 1.0 };
	struct dt_err err = DT_ERR_INIT;
	int fd = 123;
	DT_CHECK_INT_EQ(dt_sock_connect("127.0.0.1", port, "ps:1", dt_deadline_in(0.6), &opts, &fd, &err), DT_PEER);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(waited >= 0.55);
	DT_CHECK(waited < 1.5);
	DT_CHECK_INT_EQ(fd, -1);
	char want[128];
	snprintf(want, sizeof(want), "cannot connect to ps:1 at 127.0.0.1:%d within 0.", port);
	DT_CHECK_CONTAINS(err.msg, want);
	DT_CHECK_CONTAINS(err.msg, ": Connection refused (");
	DT_CHECK_CONTAINS(err.msg, " attempts)");
	DT_CHECK(opts.attempts >= 3);
	char attempts[32];
	snprintf(attempts, sizeof(attempts), "(%d attempts)", opts.attempts);
	DT_CHECK_CONTAINS(err.msg, attempts);
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_PEER), 3);
	close(holder);
}

DT_TEST(net_socket, recv_all_reports_deadline_and_end_of_stream_with_byte_counts)
{
	int a, b;
	tcp_pair(&a, &b);
	struct dt_err err = DT_ERR_INIT;
	char buf[10];
	DT_CHECK_OK(dt_sock_send_all(a, "abc", 3, dt_deadline_in(5), "b", &err), &err);
	int64_t t0 = dt_now_ns();
	DT_CHECK_INT_EQ(dt_sock_recv_all(b, buf, 10, dt_deadline_in(0.2), "worker:1 at a", &err), DT_TIMEOUT);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(waited >= 0.19 && waited < 1.0);
	DT_CHECK_CONTAINS(err.msg, "deadline exceeded receiving from worker:1 at a: 3 of 10 bytes received in 0.2 s");

	DT_CHECK_OK(dt_sock_send_all(a, "abc", 3, dt_deadline_in(5), "b", &err), &err);
	close(a);
	DT_CHECK_INT_EQ(dt_sock_recv_all(b, buf, 10, dt_deadline_in(5), "worker:1 at a", &err), DT_PEER);
	DT_CHECK_STR_EQ(err.msg, "worker:1 at a closed the connection after 3 of 10 bytes");
	close(b);
}

DT_TEST(net_socket, send_all_to_a_peer_that_does_not_read_times_out)
{
	int a, b;
	tcp_pair(&a, &b);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_set_bufsizes(a, 4096, 0, &err), &err);
	DT_CHECK_OK(dt_sock_set_bufsizes(b, 0, 4096, &err), &err);
	size_t len = 64u << 20;
	char *big = calloc(1, len);
	int64_t t0 = dt_now_ns();
	DT_CHECK_INT_EQ(dt_sock_send_all(a, big, len, dt_deadline_in(0.3), "ps:0 at b", &err), DT_TIMEOUT);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(waited >= 0.29 && waited < 2.0);
	DT_CHECK_CONTAINS(err.msg, "deadline exceeded sending to ps:0 at b: ");
	DT_CHECK_CONTAINS(err.msg, " of 67108864 bytes sent in 0.3 s");
	close(b);
	/* Writing to a closed peer is an error, not a SIGPIPE. */
	enum dt_status st = DT_OK;
	for (int i = 0; i < 100 && st == DT_OK; i++)
		st = dt_sock_send_all(a, big, 1 << 16, dt_deadline_in(1), "ps:0 at b", &err);
	DT_CHECK_INT_EQ(st, DT_PEER);
	DT_CHECK_CONTAINS(err.msg, "cannot send to ps:0 at b: ");
	free(big);
	close(a);
}

DT_TEST(net_socket, sendrecv_exchanges_large_buffers_both_ways_without_deadlock)
{
	/* Both ends send 16 MiB to each other at once: with send-then-receive they
	 * would block forever on full kernel buffers. */
	int a, b;
	tcp_pair(&a, &b);
	size_t len = 16u << 20;
	uint8_t *out_a = malloc(len), *out_b = malloc(len), *in_a = malloc(len), *in_b = malloc(len);
	for (size_t i = 0; i < len; i++) {
		out_a[i] = (uint8_t)(i * 3);
		out_b[i] = (uint8_t)(i * 5 + 1);
	}
	fflush(NULL);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		struct dt_err e = DT_ERR_INIT;
		close(a);
		if (dt_sock_sendrecv(b, out_b, len, "a", b, in_b, len, "a", dt_deadline_in(20), &e) != DT_OK)
			_exit(1);
		_exit(memcmp(in_b, out_a, len) == 0 ? 0 : 2);
	}
	close(b);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_sendrecv(a, out_a, len, "b", a, in_a, len, "b", dt_deadline_in(20), &err), &err);
	DT_CHECK(memcmp(in_a, out_b, len) == 0);
	int status;
	DT_CHECK(waitpid(pid, &status, 0) == pid);
	DT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(a);
	free(out_a);
	free(out_b);
	free(in_a);
	free(in_b);
}

/* ---- the event loop ---- */

struct timer_log {
	int order[8];
	int n;
	int64_t fired_at[8];
};

struct tagged_timer {
	struct dt_timer t;
	int id;
	struct timer_log *log;
};

static void tagged_fire(struct dt_loop *loop, struct dt_timer *t, void *arg)
{
	struct tagged_timer *tt = arg;
	tt->log->fired_at[tt->log->n] = dt_now_ns();
	tt->log->order[tt->log->n++] = tt->id;
}

static int all_fired(void *arg)
{
	return ((struct timer_log *)arg)->n == 4;
}

DT_TEST(net_loop, timers_fire_in_order_never_early_and_can_be_stopped)
{
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct timer_log log = { { 0 }, 0, { 0 } };
	struct tagged_timer t[5];
	int64_t now = dt_now_ns();
	const int64_t ms = 1000000;
	const int64_t due[5] = { 40 * ms, 10 * ms, 30 * ms, 20 * ms, 15 * ms };
	for (int i = 0; i < 5; i++) {
		t[i].id = i;
		t[i].log = &log;
		dt_timer_init(&t[i].t, tagged_fire, &t[i]);
		dt_timer_start(loop, &t[i].t, now + due[i]);
	}
	dt_timer_stop(loop, &t[4].t);
	DT_CHECK(!dt_timer_active(&t[4].t));
	DT_CHECK_OK(dt_loop_run_until(loop, all_fired, &log, dt_deadline_in(5), "timers", &err), &err);
	DT_CHECK_INT_EQ(log.order[0], 1);
	DT_CHECK_INT_EQ(log.order[1], 3);
	DT_CHECK_INT_EQ(log.order[2], 2);
	DT_CHECK_INT_EQ(log.order[3], 0);
	for (int i = 0; i < 4; i++)
		DT_CHECK(log.fired_at[i] >= now + due[log.order[i]]);
	dt_loop_free(loop);
}

static void *wake_later(void *arg)
{
	dt_sleep(0.1);
	dt_loop_wake(arg);
	return NULL;
}

DT_TEST(net_loop, run_once_blocks_until_woken_from_another_thread)
{
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	pthread_t th;
	int64_t t0 = dt_now_ns();
	DT_CHECK(pthread_create(&th, NULL, wake_later, loop) == 0);
	DT_CHECK_OK(dt_loop_run_once(loop, dt_deadline_in(5), &err), &err);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	pthread_join(th, NULL);
	DT_CHECK(waited >= 0.09 && waited < 2.0);
	/* With nothing to do, a deadline bounds the wait. */
	t0 = dt_now_ns();
	DT_CHECK_OK(dt_loop_run_once(loop, dt_deadline_in(0.05), &err), &err);
	waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(waited >= 0.045 && waited < 1.0);
	dt_loop_free(loop);
}

struct two_fds {
	int fds[2];
	int calls;
};

static void close_the_other(struct dt_loop *loop, int fd, unsigned events, void *arg)
{
	struct two_fds *t = arg;
	t->calls++;
	/* Whichever runs first removes the other: its pending event must not be delivered. */
	for (int i = 0; i < 2; i++) {
		if (t->fds[i] >= 0 && t->fds[i] != fd) {
			dt_loop_remove(loop, t->fds[i]);
			t->fds[i] = -1;
		}
	}
}

DT_TEST(net_loop, an_fd_removed_by_a_callback_gets_no_stale_event)
{
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	int p1[2], p2[2];
	DT_CHECK(pipe(p1) == 0 && pipe(p2) == 0);
	DT_CHECK(write(p1[1], "x", 1) == 1 && write(p2[1], "y", 1) == 1);
	struct two_fds t = { { p1[0], p2[0] }, 0 };
	DT_CHECK_OK(dt_loop_add(loop, p1[0], DT_LOOP_READ, close_the_other, &t, &err), &err);
	DT_CHECK_OK(dt_loop_add(loop, p2[0], DT_LOOP_READ, close_the_other, &t, &err), &err);
	DT_CHECK_OK(dt_loop_run_once(loop, dt_deadline_in(1), &err), &err);
	DT_CHECK_INT_EQ(t.calls, 1);
	DT_CHECK_INT_EQ(dt_loop_fd_count(loop), 1);
	dt_loop_remove(loop, p1[0]);
	dt_loop_remove(loop, p2[0]);
	DT_CHECK_INT_EQ(dt_loop_fd_count(loop), 0);
	close(p1[0]);
	close(p1[1]);
	close(p2[0]);
	close(p2[1]);
	dt_loop_free(loop);
}

/* Issue 21: a non-ASCII host name, cut to fit a peer label or an error,
 * printed half a UTF-8 character. */
DT_TEST(net_socket, a_non_ascii_host_name_is_never_cut_mid_character)
{
	char host[DT_HOST_MAX] = "";
	for (int i = 0; i < 127; i++)
		strcat(host, "\xc3\xbc"); /* ü, 254 bytes */
	for (int odd = 0; odd < 2; odd++) {
		const char *task = odd ? "worker:10" : "ps:0";
		struct dt_err err = DT_ERR_INIT;
		int fd = -1;
		/* Not resolvable: the failure names the host in a label and a message. */
		DT_CHECK(dt_sock_connect(host, 1, task, dt_deadline_in(0.3), NULL, &fd, &err) != DT_OK);
		DT_CHECK(fd < 0);
		const unsigned char *u = (const unsigned char *)err.msg;
		size_t len = strlen(err.msg);
		for (size_t i = 0; i < len;) {
			size_t n = u[i] < 0x80 ? 1 : (u[i] & 0xE0) == 0xC0 ? 2 : 3;
			if (i + n > len)
				dt_test_fail(__FILE__, __LINE__, "the message ends inside a character: '%s'", err.msg);
			i += n;
		}
	}
	/* The label itself, longer than DT_PEER_LABEL_MAX. */
	char label[DT_PEER_LABEL_MAX];
	dt_fmt(label, sizeof(label), "worker:1 at %s%s", host, host);
	DT_CHECK(strlen(label) < sizeof(label));
	DT_CHECK_INT_EQ(dt_utf8_prefix_len(label, strlen(label)), strlen(label));
	DT_CHECK((strlen(label) - strlen("worker:1 at ")) % 2 == 0);
}
