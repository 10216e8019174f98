/* Admission before the handshake (docs/PROTOCOL.md §4.1): what a peer that
 * has not been judged may cost, and that strangers cannot hold up a real
 * peer. A hello longer than the cap is refused on its header before anything
 * is allocated; past the pending cap, and past the byte budget, the oldest
 * pending connections are closed; silent and slow peers delay neither a
 * dt_server's good client nor a ring rank's neighbour. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "distribute/collective.h"
#include "dt_test.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "net_test_util.h"

static const struct dt_conn_config client_cfg = { .heartbeat_s = 0.1, .silence_s = 5.0 };

static double now_s(void)
{
	return (double)dt_now_ns() / 1e9;
}

/* The cap the test server (ps:0, the test model) applies. */
static uint64_t server_hello_cap(void)
{
	struct dt_hello h;
	test_hello(&h, "ps", 0, TEST_FINGERPRINT, 256);
	uint64_t cap = dt_handshake_hello_cap(&h);
	dt_hello_release(&h);
	return cap;
}

/* Connects and sends a HELLO header announcing `length`, then `body` bytes of it. */
static int announce(int port, uint64_t length, size_t body)
{
	int fd = test_raw_connect(port);
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	struct dt_frame_header h = { DT_PROTOCOL_VERSION, DT_MSG_HELLO, 0, 0, length };
	dt_frame_header_pack(&h, hdr);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_send_all(fd, hdr, sizeof(hdr), dt_deadline_in(5), "server", &err), &err);
	if (body) {
		uint8_t *zeros = calloc(1, body);
		DT_CHECK_OK(dt_sock_send_all(fd, zeros, body, dt_deadline_in(5), "server", &err), &err);
		free(zeros);
	}
	return fd;
}

/* 1 once the peer has closed fd (EOF or reset), 0 while it is open. */
static int peer_closed(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		return 1;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	return n < 0;
}

/* Waits up to timeout_s (running loop) for fd to be closed by the server; returns 1 if it was. */
static int wait_closed(struct dt_loop *loop, int fd, double timeout_s)
{
	int64_t deadline = dt_deadline_in(timeout_s);
	while (!peer_closed(fd)) {
		if (dt_deadline_passed(deadline))
			return 0;
		test_run_loop_for(loop, 0.02);
	}
	return 1;
}

DT_TEST_TIMEOUT(net_admission, a_hello_over_the_cap_is_refused_before_anything_is_allocated, 60)
{
	/* The decoder: the length is checked on the header, the buffer never grows. */
	uint64_t cap = server_hello_cap();
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, cap);
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	struct dt_frame_header h = { DT_PROTOCOL_VERSION, DT_MSG_HELLO, 0, 0, cap + 1 };
	dt_frame_header_pack(&h, hdr);
	enum dt_frame_event ev;
	dt_frame_decoder_feed(&d, hdr, sizeof(hdr), &ev);
	DT_CHECK_INT_EQ(ev, DT_FRAME_ERROR);
	DT_CHECK_INT_EQ(d.error, DT_FRAME_TOO_LARGE);
	DT_CHECK(d.buf_ == NULL && d.buf_cap_ == 0);
	dt_frame_decoder_release(&d);
	/* Our own hello, and a peer's with another role name, are well within it. */
	struct dt_hello me;
	test_hello(&me, "evaluator", 12345, TEST_FINGERPRINT, 256);
	DT_CHECK(dt_hello_encode(&me, NULL, 0) * 2 <= cap);
	dt_hello_release(&me);

	/* A server: refused on the header with the reason, the budget never touched. */
	struct test_server ts;
	test_server_start(&ts, &(struct test_server_opts){ .handshake_s = 5 });
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	int64_t lengths[] = { (int64_t)cap + 1, 16 << 20, 1ll << 40 };
	for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
		int fd = announce(ts.port, (uint64_t)lengths[i], 0);
		uint8_t got[4096];
		size_t n;
		double waited = test_wait_closed(loop, fd, 5, got, sizeof(got), &n);
		DT_CHECK(waited < 2);
		uint16_t type;
		const char *text = test_first_reason(got, n, &type);
		DT_CHECK_INT_EQ(type, DT_MSG_REFUSE);
		DT_CHECK_CONTAINS(text, "bytes this task takes before it has judged a peer");
	}
	struct dt_conn *good = test_client(loop, ts.port, &client_cfg);
	test_echo_ok(good, "after the refusals");
	dt_conn_free(good);
	struct dt_server_stats st;
	test_server_stop(&ts, &st);
	/* Only the good client's hello was ever reserved: the refused headers never reached the allocation. */
	DT_CHECK(st.pending_bytes_peak > 0 && st.pending_bytes_peak <= cap);
	DT_CHECK_INT_EQ(st.violations, 3);
	dt_loop_free(loop);
}

DT_TEST_TIMEOUT(net_admission, past_the_pending_cap_the_oldest_is_closed, 60)
{
	struct test_server ts;
	test_server_start(&ts, &(struct test_server_opts){ .handshake_s = 20, .pending_max = 4 });
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	int fds[6];
	for (int i = 0; i < 4; i++) {
		fds[i] = test_raw_connect(ts.port);
		test_run_loop_for(loop, 0.05); /* accepted in this order */
	}
	for (int i = 0; i < 4; i++)
		DT_CHECK(!peer_closed(fds[i]));
	fds[4] = test_raw_connect(ts.port);
	DT_CHECK(wait_closed(loop, fds[0], 3)); /* the oldest makes room, long before its 20 s */
	fds[5] = test_raw_connect(ts.port);
	DT_CHECK(wait_closed(loop, fds[1], 3));
	for (int i = 2; i < 6; i++)
		DT_CHECK(!peer_closed(fds[i]));
	/* A real peer, arriving last, gets in at once. */
	double t0 = now_s();
	struct dt_conn *good = test_client(loop, ts.port, &client_cfg);
	test_echo_ok(good, "past the strangers");
	DT_CHECK(now_s() - t0 < 2);
	dt_conn_free(good);
	for (int i = 0; i < 6; i++)
		close(fds[i]);
	struct dt_server_stats st;
	test_server_stop(&ts, &st);
	DT_CHECK(st.evicted >= 3); /* fds[0], fds[1], and one more for the good client */
	DT_CHECK_INT_EQ(st.pending_peak, 4);
	DT_CHECK_INT_EQ(st.opened, 1);
	dt_loop_free(loop);
}

DT_TEST_TIMEOUT(net_admission, past_the_byte_budget_the_oldest_is_closed, 60)
{
	uint64_t cap = server_hello_cap();
	uint64_t budget = cap * 5 / 2; /* room for two hellos of cap bytes, not three */
	struct test_server ts;
	test_server_start(&ts, &(struct test_server_opts){ .handshake_s = 20, .pending_bytes = budget });
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	int a = announce(ts.port, cap, 100);
	test_run_loop_for(loop, 0.05);
	int b = announce(ts.port, cap, 100);
	test_run_loop_for(loop, 0.1);
	DT_CHECK(!peer_closed(a) && !peer_closed(b));
	int c = announce(ts.port, cap, 100);
	DT_CHECK(wait_closed(loop, a, 3));
	test_run_loop_for(loop, 0.1);
	DT_CHECK(!peer_closed(b) && !peer_closed(c));
	int e = announce(ts.port, cap, 100);
	DT_CHECK(wait_closed(loop, b, 3));
	test_run_loop_for(loop, 0.1);
	DT_CHECK(!peer_closed(c) && !peer_closed(e));
	/* A real hello is short: it fits beside them and gets in at once. */
	struct dt_conn *good = test_client(loop, ts.port, &client_cfg);
	test_echo_ok(good, "within the budget");
	dt_conn_free(good);
	close(a), close(b), close(c), close(e);
	struct dt_server_stats st;
	test_server_stop(&ts, &st);
	DT_CHECK(st.pending_bytes_peak <= budget);
	DT_CHECK_INT_EQ(st.evicted, 2);
	dt_loop_free(loop);
}

/* A slowloris: a valid hello header, then one byte every `every_s`, until `until`. */
static void trickle(int fd, double every_s, int64_t until, int (*stop)(void *), void *arg)
{
	while (!dt_deadline_passed(until) && !(stop && stop(arg))) {
		char z = 0;
		if (send(fd, &z, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
			return;
		dt_sleep(every_s);
	}
}

DT_TEST_TIMEOUT(net_admission, silent_and_slow_peers_do_not_delay_a_good_one, 60)
{
	struct test_server ts;
	test_server_start(&ts, &(struct test_server_opts){ .handshake_s = 10 });
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	int silent[3];
	for (int i = 0; i < 3; i++)
		silent[i] = test_raw_connect(ts.port);
	int slow = announce(ts.port, 200, 0);
	trickle(slow, 0.05, dt_deadline_in(0.3), NULL, NULL);
	double t0 = now_s();
	struct dt_conn *good = test_client(loop, ts.port, &client_cfg);
	test_echo_ok(good, "among strangers");
	double took = now_s() - t0;
	fprintf(stderr, "the good client was served %.3f s after connecting\n", took);
	DT_CHECK(took < 1.0);
	dt_conn_free(good);
	for (int i = 0; i < 3; i++)
		DT_CHECK(!peer_closed(silent[i])); /* closed by their own deadline, not before */
	for (int i = 0; i < 3; i++)
		close(silent[i]);
	close(slow);
	test_server_stop(&ts, NULL);
	dt_loop_free(loop);
}

/* ---- the ring's rendezvous ---- */

struct ring_rank {
	struct dt_comm_config cfg;
	enum dt_status st;
	struct dt_err err;
	double took;
	int done;
};

static void *ring_rank_main(void *p)
{
	struct ring_rank *r = p;
	double t0 = now_s();
	struct dt_comm *comm = NULL;
	r->st = dt_comm_new(&r->cfg, dt_deadline_in(20), &comm, &r->err);
	if (!r->st) {
		float v[4] = { 1, 2, 3, (float)r->cfg.rank };
		r->st = dt_allreduce_sum_f32(comm, v, 4, "t", dt_deadline_in(10), &r->err);
		if (!r->st && v[3] != 1.0f)
			r->st = dt_err_set(&r->err, DT_INTERNAL, "allreduce gave %g, not 1", (double)v[3]);
	}
	r->took = now_s() - t0;
	dt_comm_free(comm);
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int both_done(void *arg)
{
	struct ring_rank *r = arg;
	return __atomic_load_n(&r[0].done, __ATOMIC_ACQUIRE) && __atomic_load_n(&r[1].done, __ATOMIC_ACQUIRE);
}

/* Rank 0 starts with a silent connection, a slowloris, garbage and a wrong
 * task at its listener before rank 1 comes: both ranks still meet well
 * within one handshake deadline (10 s), and the strangers cost nothing but
 * their own connections. */
DT_TEST_TIMEOUT(net_admission, a_ring_rank_admits_its_neighbour_past_strangers, 60)
{
	int fds[2];
	char addrs[2][DT_COMM_ADDR_MAX];
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_comm_listen_loopback(2, fds, addrs, &err), &err);
	struct dt_comm_peer peers[2] = { { addrs[0], "worker", 0 }, { addrs[1], "worker", 1 } };
	struct ring_rank r[2];
	memset(r, 0, sizeof(r));
	for (int i = 0; i < 2; i++)
		r[i].cfg = (struct dt_comm_config){ .nranks = 2, .rank = i, .peers = peers, .listen_fd = fds[i],
						    .listen_fd_set = 1, .no_cma = 1 };
	int port0 = atoi(strrchr(addrs[0], ':') + 1);
	/* The strangers, all on rank 0's port before anyone is there. */
	int silent = test_raw_connect(port0);
	int slow = announce(port0, 300, 0);
	int garbage = test_raw_connect(port0);
	DT_CHECK(send(garbage, "GET / HTTP/1.1\r\n\r\n", 18, MSG_NOSIGNAL) == 18);
	int impostor = test_raw_connect(port0);
	struct dt_hello other;
	dt_hello_init(&other, "worker", 7, 0);
	size_t hlen;
	uint8_t *hb = dt_hello_encode_alloc(&other, &hlen);
	DT_CHECK_OK(dt_frame_send_fd(impostor, DT_MSG_HELLO, 0, 0, hb, hlen, dt_deadline_in(5), "rank 0", &err), &err);
	free(hb);
	dt_hello_release(&other);

	pthread_t th[2];
	DT_CHECK(pthread_create(&th[0], NULL, ring_rank_main, &r[0]) == 0);
	dt_sleep(0.3); /* rank 0 is waiting among the strangers */
	DT_CHECK(pthread_create(&th[1], NULL, ring_rank_main, &r[1]) == 0);
	trickle(slow, 0.05, dt_deadline_in(15), both_done, r);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++) {
		if (r[i].st)
			dt_test_fail(__FILE__, __LINE__, "rank %d failed: %s", i, r[i].err.msg);
		fprintf(stderr, "rank %d met its neighbours and reduced in %.3f s\n", i, r[i].took);
	}
	DT_CHECK(r[0].took < 5.0); /* the silent one alone would have held it 10 s */
	close(silent), close(slow), close(garbage), close(impostor);
}
