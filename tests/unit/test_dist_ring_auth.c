/*
 * Tests of the ring's frames under a cluster secret (issue 19): every
 * collective frame after the rendezvous is tagged (and with encrypt,
 * encrypted) with the keys each link's handshake derived
 * (src/distribute/comm_internal.h). Ranks are threads over loopback; a
 * man-in-the-middle proxy between rank 0 and rank 1 flips one bit deep in
 * rank 0's stream, as an attacker who can inject into an established TCP
 * connection would.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "distribute/collective.h"
#include "distribute/comm_internal.h"
#include "dt_test.h"
#include "net/auth.h"
#include "net/handshake.h"
#include "net/socket.h"

#define MAXR 4

struct ring {
	int n;
	int fds[MAXR];
	char addrs[MAXR][DT_COMM_ADDR_MAX];
	char seen[MAXR][DT_COMM_ADDR_MAX]; /* the addresses the ranks dial (a proxy's, for rank 1) */
	struct dt_comm_peer peers[MAXR][MAXR];
	struct dt_hello hellos[MAXR];
	struct dt_auth auth;
	int secret; /* 0: no secret (frames as without one) */
	size_t seg_bytes;
	size_t grow_to; /* > 0: after a first all-reduce every rank switches to segments of this size */
	size_t counts[4];
	int ncounts;
	int no_cma;
	int no_shm; /* 1 (ring_init): frames over TCP, as between hosts (and through the proxy) */
	enum dt_status st[MAXR];
	struct dt_err err[MAXR];
	int wrong[MAXR]; /* the rank's all-reduce finished with another sum */
};

static float value(int rank, size_t i, int round)
{
	return (float)((int)((i * 7u + (size_t)rank * 13u + (size_t)round * 5u) % 101u) - 50);
}

static void ring_init(struct ring *g, int n, enum dt_wire_security mode)
{
	memset(g, 0, sizeof(*g));
	g->n = n;
	g->no_cma = 1;
	g->no_shm = 1;
	g->secret = mode != DT_WIRE_NONE;
	for (int i = 0; i < DT_AUTH_SECRET_BYTES; i++)
		g->auth.secret[i] = (uint8_t)(i * 11 + 3);
	g->auth.mode = mode;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_comm_listen_loopback(n, g->fds, g->addrs, &err), &err);
	memcpy(g->seen, g->addrs, sizeof(g->seen));
}

struct rank_arg {
	struct ring *g;
	int rank;
};

static enum dt_status run_rank(struct ring *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	for (int k = 0; k < g->ncounts; k++) {
		size_t count = g->counts[k];
		float *buf = dt_xmallocarray(count + 1, sizeof(float));
		for (int round = 0; round < 2; round++) {
			for (size_t i = 0; i < count; i++)
				buf[i] = value(rank, i, round);
			enum dt_status st = dt_allreduce_sum_f32(comm, buf, count, "grads", dt_deadline_in(30), err);
			if (st) {
				free(buf);
				return st;
			}
			for (size_t i = 0; i < count && !g->wrong[rank]; i++) {
				float want = 0;
				for (int q = 0; q < g->n; q++)
					want += value(q, i, round);
				if (buf[i] != want)
					g->wrong[rank] = 1;
			}
		}
		/* A broadcast of the same bytes from the last rank. */
		uint8_t *bytes = (uint8_t *)buf;
		for (size_t i = 0; i < count * 4; i++)
			bytes[i] = rank == g->n - 1 ? (uint8_t)(i * 31u + 7u) : 0;
		enum dt_status st = dt_broadcast(comm, bytes, count * 4, g->n - 1, "init", dt_deadline_in(30), err);
		for (size_t i = 0; !st && i < count * 4 && !g->wrong[rank]; i++)
			if (bytes[i] != (uint8_t)(i * 31u + 7u))
				g->wrong[rank] = 1;
		free(buf);
		if (st)
			return st;
	}
	return DT_OK;
}

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	struct ring *g = a->g;
	int r = a->rank;
	for (int i = 0; i < g->n; i++)
		g->peers[r][i] = (struct dt_comm_peer){ i == (r + 1) % g->n ? g->seen[i] : g->addrs[i], "worker",
						       (uint32_t)i };
	dt_hello_init(&g->hellos[r], "worker", (uint32_t)r, 0x5eed);
	if (g->secret)
		g->hellos[r].auth = &g->auth;
	struct dt_comm_config cfg = { .nranks = g->n, .rank = r, .peers = g->peers[r], .listen_fd = g->fds[r],
				      .listen_fd_set = 1, .segment_bytes = g->seg_bytes, .no_cma = g->no_cma, .no_shm = g->no_shm,
				      .hello = &g->hellos[r] };
	struct dt_comm *comm = NULL;
	enum dt_status st = dt_comm_new(&cfg, dt_deadline_in(20), &comm, &g->err[r]);
	if (!st && g->grow_to) {
		/* As the rendezvous does between hosts (coll_algo.c): a faster rank's
		 * next collective, cut the new way, may already lie in a slower
		 * one's stage when that one switches. */
		float one[4] = { 1, 2, 3, 4 };
		st = dt_allreduce_sum_f32(comm, one, 4, "before", dt_deadline_in(30), &g->err[r]);
		if (!st)
			dt__comm_set_segment(comm, g->grow_to);
	}
	if (!st)
		st = run_rank(g, r, comm, &g->err[r]);
	dt_comm_free(comm);
	dt_hello_release(&g->hellos[r]);
	g->st[r] = st;
	return NULL;
}

static void ring_run(struct ring *g)
{
	pthread_t th[MAXR];
	struct rank_arg args[MAXR];
	for (int i = 0; i < g->n; i++) {
		args[i] = (struct rank_arg){ g, i };
		DT_CHECK(pthread_create(&th[i], NULL, rank_main, &args[i]) == 0);
	}
	for (int i = 0; i < g->n; i++)
		pthread_join(th[i], NULL);
}

static void expect_sums(struct ring *g, const char *what)
{
	for (int i = 0; i < g->n; i++) {
		if (g->st[i] != DT_OK)
			dt_test_fail(__FILE__, __LINE__, "%s: rank %d of %d failed: %s", what, i, g->n, g->err[i].msg);
		if (g->wrong[i])
			dt_test_fail(__FILE__, __LINE__, "%s: rank %d of %d got another result", what, i, g->n);
	}
}

DT_TEST_TIMEOUT(dist_ring_auth, allreduce_and_broadcast_under_auth_and_encrypt_equal_the_plain_result, 120)
{
	const enum dt_wire_security modes[] = { DT_WIRE_AUTH, DT_WIRE_ENCRYPT };
	for (int m = 0; m < 2; m++) {
		for (int n = 2; n <= 5; n++) {
			/* Small buffers take the gather plan, larger ones the ring in
			 * many segments (so encrypt's window fills and drains); over TCP,
			 * then through shared memory (the same sealed bytes in the rings). */
			struct ring g;
			ring_init(&g, n > 3 ? n - 2 : n, modes[m]);
			g.no_shm = n <= 3;
			g.seg_bytes = 4096;
			g.counts[0] = 10;
			g.counts[1] = 10007;
			g.counts[2] = 70001;
			g.ncounts = 3;
			ring_run(&g);
			char what[64];
			snprintf(what, sizeof(what), "%s, %d ranks over %s", dt_wire_security_name(modes[m]), g.n,
				 g.no_shm ? "TCP" : "shared memory");
			expect_sums(&g, what);
		}
		/* The default segments, shared memory, and same-host references where the kernel allows them. */
		struct ring g;
		ring_init(&g, 3, modes[m]);
		g.no_cma = 0;
		g.no_shm = 0;
		g.counts[0] = 300000;
		g.ncounts = 1;
		ring_run(&g);
		expect_sums(&g, dt_wire_security_name(modes[m]));
	}
}

/* Segments switched from 4 KiB to 1 MiB on a live comm, as between hosts:
 * tagged frames of 1 MiB must fit the grown stages whole, encrypt's window
 * must hold two of them, and whatever was staged before stays. */
DT_TEST_TIMEOUT(dist_ring_auth, segments_grown_on_a_live_comm_keep_every_sum, 120)
{
	const enum dt_wire_security modes[] = { DT_WIRE_NONE, DT_WIRE_AUTH, DT_WIRE_ENCRYPT };
	for (int m = 0; m < 3; m++)
		for (int n = 2; n <= 3; n++) {
			struct ring g;
			ring_init(&g, n, modes[m]);
			g.seg_bytes = 4096;
			g.grow_to = 1u << 20;
			g.counts[0] = 10;
			g.counts[1] = 300007; /* 1.2 MB: more than one of the new segments */
			g.counts[2] = 70001;
			g.ncounts = 3;
			ring_run(&g);
			char what[64];
			snprintf(what, sizeof(what), "%s, %d ranks", dt_wire_security_name(modes[m]), n);
			expect_sums(&g, what);
		}
}

/* ---- a man in the middle ---- */

struct proxy {
	int lfd;
	int port;       /* where rank 0 dials rank 1 */
	int target;     /* rank 1's real port */
	size_t flip_at; /* the byte of rank 0's stream whose bit 4 is flipped */
	size_t forwarded;
};

static int forward(int from, int to, struct proxy *px, int flip)
{
	uint8_t buf[65536];
	ssize_t n = recv(from, buf, sizeof(buf), MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1;
	if (flip && px->forwarded <= px->flip_at && px->flip_at < px->forwarded + (size_t)n)
		buf[px->flip_at - px->forwarded] ^= 0x10;
	if (flip)
		px->forwarded += (size_t)n;
	/* The side dialled through dt_sock_connect is non-blocking: a full
	 * socket buffer (the reader busy on a loaded host) is a wait, bounded
	 * like the proxy itself, not a reason to drop the connection. */
	for (ssize_t off = 0; off < n;) {
		ssize_t w = send(to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd o = { to, POLLOUT, 0 };
			if (poll(&o, 1, 30000) <= 0)
				return -1;
			continue;
		}
		if (w <= 0)
			return -1;
		off += w;
	}
	return 1;
}

static void *proxy_main(void *p)
{
	struct proxy *px = p;
	int64_t end = dt_deadline_in(60);
	struct pollfd a = { px->lfd, POLLIN, 0 };
	if (poll(&a, 1, 30000) <= 0)
		return NULL;
	int in = accept(px->lfd, NULL, NULL), out = -1;
	struct dt_err err = DT_ERR_INIT;
	if (in < 0 || dt_sock_connect("127.0.0.1", px->target, "rank 1", dt_deadline_in(10), NULL, &out, &err)) {
		if (in >= 0)
			close(in);
		return NULL;
	}
	while (dt_now_ns() < end) {
		struct pollfd f[2] = { { in, POLLIN, 0 }, { out, POLLIN, 0 } };
		if (poll(f, 2, 200) < 0)
			break;
		if ((f[0].revents && forward(in, out, px, 1) < 0) || (f[1].revents && forward(out, in, px, 0) < 0))
			break;
	}
	close(in);
	close(out);
	return NULL;
}

/* Rank 0's stream to rank 1 passes the proxy, which flips a bit a megabyte
 * in: inside the payload of one of the all-reduce's DATA frames. */
static void run_flipped(enum dt_wire_security mode, struct ring *g)
{
	ring_init(g, 2, mode);
	g->counts[0] = 1u << 20; /* 4 MB each way over TCP */
	g->ncounts = 1;
	struct proxy px = { .flip_at = 1000003 };
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_listen("127.0.0.1", 0, 4, &px.lfd, &px.port, &err), &err);
	DT_CHECK(sscanf(g->addrs[1], "127.0.0.1:%d", &px.target) == 1);
	snprintf(g->seen[1], sizeof(g->seen[1]), "127.0.0.1:%d", px.port);
	pthread_t th;
	DT_CHECK(pthread_create(&th, NULL, proxy_main, &px) == 0);
	ring_run(g);
	pthread_join(th, NULL);
	dt_sock_close(px.lfd);
	DT_CHECK(px.forwarded > px.flip_at); /* the flip happened */
}

DT_TEST_TIMEOUT(dist_ring_auth, a_flipped_bit_after_the_rendezvous_fails_the_collective_naming_the_peer, 120)
{
	struct ring g;
	/* Without a secret the flip goes through unnoticed (only headers carry
	 * a checksum): what the tags are for, and proof the flip hits data. */
	run_flipped(DT_WIRE_NONE, &g);
	DT_CHECK_INT_EQ(g.st[0], DT_OK);
	DT_CHECK_INT_EQ(g.st[1], DT_OK);
	DT_CHECK(g.wrong[0] || g.wrong[1]);

	const enum dt_wire_security modes[] = { DT_WIRE_AUTH, DT_WIRE_ENCRYPT };
	for (int m = 0; m < 2; m++) {
		run_flipped(modes[m], &g);
		/* Rank 1 checks the frame, names rank 0 and gives up; rank 0 hears why. */
		DT_CHECK_INT_EQ(g.st[1], DT_PROTOCOL);
		DT_CHECK_CONTAINS(g.err[1].msg, "failed its authentication check");
		DT_CHECK_CONTAINS(g.err[1].msg, "coll_data");
		DT_CHECK_CONTAINS(g.err[1].msg, "from worker:0 at 127.0.0.1:");
		DT_CHECK(g.st[0] != DT_OK);
	}
}
