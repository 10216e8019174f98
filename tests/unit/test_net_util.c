/* Helpers for the network tests; see net_test_util.h. No tests in this file. */
#include "net_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dt_test.h"
#include "base/clock.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/socket.h"

void test_signature(struct dt_signature *sig, uint64_t hidden)
{
	struct dt_err err = DT_ERR_INIT;
	const uint64_t k1[2] = { 784, hidden }, b1[1] = { hidden }, k2[2] = { hidden, 10 };
	DT_CHECK_OK(dt_signature_add(sig, "dense_1/kernel", DT_WIRE_F32, 2, k1, &err), &err);
	DT_CHECK_OK(dt_signature_add(sig, "dense_1/bias", DT_WIRE_F32, 1, b1, &err), &err);
	DT_CHECK_OK(dt_signature_add(sig, "dense_2/kernel", DT_WIRE_F32, 2, k2, &err), &err);
}

void test_hello(struct dt_hello *h, const char *role, uint32_t index, uint64_t fingerprint, uint64_t hidden)
{
	dt_hello_init(h, role, index, fingerprint);
	test_signature(&h->signature, hidden);
}

/* ---- the forked server ---- */

static void on_ctl(struct dt_loop *loop, int fd, unsigned events, void *arg)
{
	char c;
	ssize_t n = read(fd, &c, 1);
	if (n <= 0 || c == 'q')
		*(int *)arg = 1;
}

static _Noreturn void child_main(const struct test_server_opts *o, int ctl_fd, int report_fd)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_loop *loop;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_hello local;
	test_hello(&local, "ps", 0, TEST_FINGERPRINT, o->hidden ? o->hidden : 256);
	struct dt_server_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.host = "127.0.0.1";
	cfg.port = 0;
	cfg.local = &local;
	cfg.conn.heartbeat_s = o->heartbeat_s;
	cfg.conn.silence_s = o->silence_s;
	cfg.conn.handshake_s = o->handshake_s;
	cfg.conn.max_payload = o->max_payload;
	cfg.pending_max = o->pending_max;
	cfg.pending_bytes = o->pending_bytes;
	struct dt_server *server;
	DT_CHECK_OK(dt_server_new(loop, &cfg, &server, &err), &err);
	dprintf(report_fd, "port %d\n", dt_server_port(server));
	int stop = 0;
	DT_CHECK_OK(dt_loop_add(loop, ctl_fd, DT_LOOP_READ, on_ctl, &stop, &err), &err);
	int64_t deadline = dt_deadline_in(o->lifetime_s > 0 ? o->lifetime_s : 30);
	while (!stop && !dt_deadline_passed(deadline))
		DT_CHECK_OK(dt_loop_run_once(loop, deadline, &err), &err);
	struct dt_server_stats s;
	dt_server_get_stats(server, &s);
	dprintf(report_fd, "stats %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", (unsigned long long)s.accepted,
		(unsigned long long)s.opened, (unsigned long long)s.refused, (unsigned long long)s.violations,
		(unsigned long long)s.timeouts, (unsigned long long)s.closed, (unsigned long long)s.evicted,
		(unsigned long long)s.pending_peak, (unsigned long long)s.pending_bytes_peak);
	dt_server_free(server);
	dt_loop_remove(loop, ctl_fd);
	DT_CHECK_INT_EQ(dt_loop_fd_count(loop), 0); /* the server left nothing registered */
	dt_loop_free(loop);
	dt_hello_release(&local);
	close(ctl_fd);
	close(report_fd);
	fflush(NULL);
	_exit(0);
}

static void read_line(int fd, char *buf, size_t cap, double timeout_s)
{
	int64_t deadline = dt_deadline_in(timeout_s);
	size_t len = 0;
	while (len + 1 < cap) {
		struct pollfd p = { fd, POLLIN, 0 };
		int r = poll(&p, 1, dt_deadline_ms_left(deadline));
		if (r == 0)
			dt_test_fail(__FILE__, __LINE__, "the test server said nothing for %.1f s", timeout_s);
		if (r < 0 && errno == EINTR)
			continue;
		ssize_t n = read(fd, buf + len, 1);
		if (n <= 0)
			dt_test_fail(__FILE__, __LINE__, "the test server's report pipe closed early ('%.*s')", (int)len, buf);
		if (buf[len] == '\n')
			break;
		len++;
	}
	buf[len] = '\0';
}

void test_server_start(struct test_server *ts, const struct test_server_opts *o)
{
	int ctl[2], report[2];
	DT_CHECK(pipe2(ctl, O_CLOEXEC) == 0);
	DT_CHECK(pipe2(report, O_CLOEXEC) == 0);
	fflush(NULL);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		close(ctl[1]);
		close(report[0]);
		child_main(o, ctl[0], report[1]);
	}
	close(ctl[0]);
	close(report[1]);
	ts->pid = pid;
	ts->ctl_fd = ctl[1];
	ts->report_fd = report[0];
	char line[128];
	read_line(ts->report_fd, line, sizeof(line), 10);
	DT_CHECK(sscanf(line, "port %d", &ts->port) == 1);
	DT_CHECK(ts->port > 0);
}

void test_server_stop(struct test_server *ts, struct dt_server_stats *stats)
{
	close(ts->ctl_fd);
	char line[256];
	read_line(ts->report_fd, line, sizeof(line), 10);
	struct dt_server_stats s;
	unsigned long long v[9];
	DT_CHECK(sscanf(line, "stats %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
			&v[5], &v[6], &v[7], &v[8]) == 9);
	s.accepted = v[0];
	s.opened = v[1];
	s.refused = v[2];
	s.violations = v[3];
	s.timeouts = v[4];
	s.closed = v[5];
	s.evicted = v[6];
	s.pending_peak = v[7];
	s.pending_bytes_peak = v[8];
	if (stats)
		*stats = s;
	close(ts->report_fd);
	int status = 0;
	int64_t deadline = dt_deadline_in(10);
	pid_t r;
	while ((r = waitpid(ts->pid, &status, WNOHANG)) == 0 && !dt_deadline_passed(deadline))
		dt_sleep(0.005);
	if (r == 0) {
		kill(ts->pid, SIGKILL);
		waitpid(ts->pid, &status, 0);
		dt_test_fail(__FILE__, __LINE__, "the test server did not exit");
	}
	DT_CHECK(WIFEXITED(status));
	DT_CHECK_INT_EQ(WEXITSTATUS(status), 0);
	ts->pid = 0;
}

/* ---- parent side ---- */

int test_raw_connect(int port)
{
	struct dt_err err = DT_ERR_INIT;
	int fd;
	DT_CHECK_OK(dt_sock_connect("127.0.0.1", port, "test server", dt_deadline_in(5), NULL, &fd, &err), &err);
	return fd;
}

struct closed_wait {
	uint8_t *buf;
	size_t cap, got;
	int closed;
};

static void on_raw(struct dt_loop *loop, int fd, unsigned events, void *arg)
{
	struct closed_wait *w = arg;
	for (int i = 0; i < 64 && !w->closed; i++) {
		uint8_t tmp[4096];
		ssize_t n = recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
		if (n > 0) {
			size_t take = (size_t)n < w->cap - w->got ? (size_t)n : w->cap - w->got;
			memcpy(w->buf + w->got, tmp, take);
			w->got += take;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		w->closed = 1; /* end of stream, or reset */
	}
}

static int is_closed(void *arg)
{
	return ((struct closed_wait *)arg)->closed;
}

double test_wait_closed(struct dt_loop *loop, int fd, double timeout_s, uint8_t *buf, size_t cap, size_t *got)
{
	uint8_t scratch[1];
	struct closed_wait w = { buf ? buf : scratch, buf ? cap : 0, 0, 0 };
	struct dt_err err = DT_ERR_INIT;
	int64_t t0 = dt_now_ns();
	DT_CHECK_OK(dt_loop_add(loop, fd, DT_LOOP_READ, on_raw, &w, &err), &err);
	enum dt_status st = dt_loop_run_until(loop, is_closed, &w, dt_deadline_in(timeout_s), "the server to close", &err);
	dt_loop_remove(loop, fd);
	close(fd);
	if (st)
		dt_test_fail(__FILE__, __LINE__, "the server kept a bad connection open: %s", err.msg);
	if (got)
		*got = w.got;
	return (double)(dt_now_ns() - t0) / 1e9;
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

void test_run_loop_for(struct dt_loop *loop, double seconds)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_loop_run_until(loop, never, NULL, dt_deadline_in(seconds), "time to pass", &err), DT_TIMEOUT);
}

const char *test_first_reason(const uint8_t *buf, size_t len, uint16_t *type)
{
	static char text[DT_REASON_MAX];
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1 << 20);
	size_t pos = 0;
	for (;;) {
		enum dt_frame_event ev;
		pos += dt_frame_decoder_feed(&d, buf + pos, len - pos, &ev);
		if (ev != DT_FRAME_READY) {
			char detail[sizeof(d.detail)];
			snprintf(detail, sizeof(detail), "%s", d.detail);
			dt_frame_decoder_release(&d);
			dt_test_fail(__FILE__, __LINE__, "expected an error or refuse frame in %zu bytes from the server (%s)",
				     len, detail);
		}
		if (d.header.type != DT_MSG_HEARTBEAT)
			break;
		dt_frame_decoder_next(&d); /* heartbeats may come first */
	}
	*type = d.header.type;
	DT_CHECK(*type == DT_MSG_ERROR || *type == DT_MSG_REFUSE);
	struct dt_reason_msg m;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_reason_decode(&m, dt_frame_decoder_payload(&d), (size_t)d.header.length, &err), &err);
	snprintf(text, sizeof(text), "%s", m.text);
	dt_frame_decoder_release(&d);
	return text;
}

struct dt_conn *test_client(struct dt_loop *loop, int port, const struct dt_conn_config *cfg)
{
	struct dt_hello me;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 256);
	struct dt_conn *c;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_conn_connect(loop, "127.0.0.1", port, &me, "ps", 0, cfg, dt_deadline_in(5), &c, &err), &err);
	dt_hello_release(&me);
	return c;
}

void test_echo_ok(struct dt_conn *c, const char *text)
{
	char reply[256] = "";
	size_t len = 0;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_conn_call(c, DT_MSG_ECHO, text, strlen(text), reply, sizeof(reply) - 1, &len, dt_deadline_in(5), &err),
		    &err);
	reply[len] = '\0';
	DT_CHECK_STR_EQ(reply, text);
}
