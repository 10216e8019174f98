/*
 * Tests of the ring collectives (src/distribute/collective.h): ranks as threads
 * over loopback sockets (the same code path as processes), then ranks as
 * forked processes for the failure cases (SIGKILL, SIGSTOP).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "distribute/collective.h"
#include "distribute/ring_wire.h"
#include "dt_test.h"
#include "net/bytes.h"
#include "net/auth.h"
#include "net/handshake.h"
#include "net/socket.h"

#define MAXR 8

/* ---- a group of ranks on threads ---- */

struct group;
typedef enum dt_status (*rank_fn)(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err);

struct group {
	int n;
	int fds[MAXR];
	char addrs[MAXR][DT_COMM_ADDR_MAX];
	struct dt_comm_peer peers[MAXR];
	size_t seg_bytes;
	int algorithm; /* enum dt_comm_algorithm, 0: the cost model */
	int no_cma;           /* every byte over TCP */
	size_t cma_min_bytes; /* 0: the default */
	int reads_left[MAXR]; /* what each rank's comm agreed (dt_comm_reads_left_memory) */
	int no_shm;           /* every frame over TCP, not shared memory */
	int shm_links[MAXR];  /* dt_comm_shared_memory_links of each rank's comm */
	double connect_s;
	int absent;      /* this rank never starts (its listener is closed); -1 none */
	rank_fn fn;
	void *arg;
	const struct dt_hello *hellos; /* per rank, or NULL */
	enum dt_status st[MAXR];
	struct dt_err err[MAXR];
	atomic_int counter;
};

struct rank_arg {
	struct group *g;
	int rank;
};

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	struct group *g = a->g;
	struct dt_comm_config cfg = { .nranks = g->n, .rank = a->rank, .peers = g->peers, .listen_fd = g->fds[a->rank],
				      .listen_fd_set = 1, .segment_bytes = g->seg_bytes, .algorithm = g->algorithm,
				      .no_cma = g->no_cma, .cma_min_bytes = g->cma_min_bytes, .no_shm = g->no_shm,
				      .hello = g->hellos ? &g->hellos[a->rank] : NULL };
	struct dt_comm *comm = NULL;
	struct dt_err *err = &g->err[a->rank];
	enum dt_status st = dt_comm_new(&cfg, dt_deadline_in(g->connect_s), &comm, err);
	if (!st) {
		g->reads_left[a->rank] = dt_comm_reads_left_memory(comm);
		g->shm_links[a->rank] = dt_comm_shared_memory_links(comm);
	}
	if (!st && g->fn)
		st = g->fn(g, a->rank, comm, err);
	dt_comm_free(comm);
	g->st[a->rank] = st;
	return NULL;
}

static void group_init(struct group *g, int n)
{
	memset(g, 0, sizeof(*g));
	g->n = n;
	g->connect_s = 20;
	g->absent = -1;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_comm_listen_loopback(n, g->fds, g->addrs, &err), &err);
	for (int i = 0; i < n; i++)
		g->peers[i] = (struct dt_comm_peer){ g->addrs[i], "worker", (uint32_t)i };
}

static void group_run(struct group *g)
{
	pthread_t th[MAXR];
	struct rank_arg args[MAXR];
	for (int i = 0; i < g->n; i++) {
		g->st[i] = DT_INTERNAL;
		if (i == g->absent) {
			dt_sock_close(g->fds[i]);
			continue;
		}
		args[i] = (struct rank_arg){ g, i };
		DT_CHECK(pthread_create(&th[i], NULL, rank_main, &args[i]) == 0);
	}
	for (int i = 0; i < g->n; i++)
		if (i != g->absent)
			pthread_join(th[i], NULL);
}

static void group_expect_ok(struct group *g)
{
	for (int i = 0; i < g->n; i++)
		if (g->st[i] != DT_OK)
			dt_test_fail(__FILE__, __LINE__, "rank %d of %d failed: %s", i, g->n, g->err[i].msg);
}

/* Small integers: every partial sum is exact in float32, so the ring's
 * order of additions cannot matter and results compare exactly. */
static float value(int rank, size_t i, int round)
{
	return (float)((int)((i * 7u + (size_t)rank * 13u + (size_t)round * 5u) % 101u) - 50);
}

/* Large int64s (far beyond float32's 24 bits, of both signs) whose sum over
 * up to MAXR ranks stays below 2^62: the int64 all-reduce must be exact. */
static int64_t ivalue(int rank, size_t i, int round)
{
	return (int64_t)value(rank, i, round) * ((int64_t)1 << 52) + (int64_t)(i * 977u + (size_t)rank * 31u + (size_t)round);
}

/* ---- all-reduce against a plain sum ---- */

struct sizes {
	size_t counts[16];
	int ncounts;
	int rounds;
};

static enum dt_status allreduce_rank(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	const struct sizes *sz = g->arg;
	for (int k = 0; k < sz->ncounts; k++) {
		size_t count = sz->counts[k];
		float *buf = dt_xmallocarray(count + 1, sizeof(float));
		for (int round = 0; round < sz->rounds; round++) {
			for (size_t i = 0; i < count; i++)
				buf[i] = value(rank, i, round);
			char name[64];
			snprintf(name, sizeof(name), "grads/%zu/%d", count, round);
			enum dt_status st = dt_allreduce_sum_f32(comm, buf, count, name, dt_deadline_in(30), err);
			if (st) {
				free(buf);
				return st;
			}
			for (size_t i = 0; i < count; i++) {
				float want = 0;
				for (int q = 0; q < g->n; q++)
					want += value(q, i, round);
				if (buf[i] != want) {
					double got = (double)buf[i];
					free(buf);
					return dt_err_set(err, DT_INTERNAL, "rank %d count %zu round %d: element %zu is %g, expected %g",
							  rank, count, round, i, got, (double)want);
				}
			}
			/* The same count as int64 (8-byte elements: other chunks and segments). */
			int64_t *ibuf = dt_xmallocarray(count + 1, sizeof(int64_t));
			for (size_t i = 0; i < count; i++)
				ibuf[i] = ivalue(rank, i, round);
			snprintf(name, sizeof(name), "fixed/%zu/%d", count, round);
			if ((st = dt_allreduce_sum_i64(comm, ibuf, count, name, dt_deadline_in(30), err))) {
				free(ibuf), free(buf);
				return st;
			}
			for (size_t i = 0; i < count; i++) {
				int64_t want = 0;
				for (int q = 0; q < g->n; q++)
					want += ivalue(q, i, round);
				if (ibuf[i] != want) {
					long long got = (long long)ibuf[i];
					free(ibuf), free(buf);
					return dt_err_set(err, DT_INTERNAL, "rank %d count %zu round %d: int64 element %zu is %lld, "
							  "expected %lld", rank, count, round, i, got, (long long)want);
				}
			}
			free(ibuf);
		}
		free(buf);
	}
	return DT_OK;
}

/* cma: -1 every byte over TCP, 0 the default, > 0 segments of that many
 * bytes or more by reference. Returns how many ranks read their left
 * neighbour's memory. */
static int run_allreduce_shm(int n, size_t seg_bytes, int alg, int cma, int no_shm, const struct sizes *sz)
{
	struct group g;
	group_init(&g, n);
	g.no_shm = no_shm;
	g.seg_bytes = seg_bytes;
	g.algorithm = alg;
	g.no_cma = cma < 0;
	g.cma_min_bytes = cma > 0 ? (size_t)cma : 0;
	g.fn = allreduce_rank;
	g.arg = (void *)(uintptr_t)sz;
	group_run(&g);
	group_expect_ok(&g);
	int readers = 0;
	for (int i = 0; i < n; i++) {
		readers += g.reads_left[i];
		/* threads of one process: every link agrees shared memory unless told not to */
		int linked = n == 2 ? 1 : 0;
		for (int q = 0; n > 2 && q < n; q++)
			for (int d = 1; q != i && d < n; d *= 2)
				if ((q - i + n) % n == d || (i - q + n) % n == d) {
					linked++;
					break;
				}
		DT_CHECK_INT_EQ(g.shm_links[i], no_shm ? 0 : linked);
	}
	return readers;
}

static int run_allreduce_cma(int n, size_t seg_bytes, int alg, int cma, const struct sizes *sz)
{
	return run_allreduce_shm(n, seg_bytes, alg, cma, 0, sz);
}

static void run_allreduce(int n, size_t seg_bytes, int alg, const struct sizes *sz)
{
	run_allreduce_cma(n, seg_bytes, alg, 0, sz);
}

/* Whether this kernel lets a process read memory with process_vm_readv at
 * all (a seccomp filter or Yama may forbid it; the ring then stays on TCP). */
static int kernel_allows_cma(void)
{
	char src[8] = "dtrain", dst[8] = "";
	struct iovec l = { dst, sizeof(dst) }, r = { src, sizeof(src) };
	return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)sizeof(dst) && strcmp(dst, "dtrain") == 0;
}

DT_TEST_TIMEOUT(dist_collective, allreduce_matches_sum_2_to_5_ranks, 120)
{
	/* 0, fewer than the ranks, odd sizes not divisible by the 64-byte
	 * segments (16 floats), and a buffer of many segments. */
	struct sizes sz = { { 0, 1, 3, 4, 17, 1000, 4099, 100003 }, 8, 2 };
	for (int n = 2; n <= 5; n++) {
		run_allreduce(n, 64, DT_COMM_ALG_RING, &sz);
		run_allreduce(n, 64, DT_COMM_ALG_AUTO, &sz); /* the cost model's choice per size */
	}
}

DT_TEST_TIMEOUT(dist_collective, allreduce_default_segments_large, 120)
{
	/* 3 MB, not a multiple of the 256 KiB segment; two ranks take the ring
	 * (above the direct size) and three the general case. */
	struct sizes sz = { { 786433, 16385, 5 }, 3, 2 };
	run_allreduce(2, 0, DT_COMM_ALG_AUTO, &sz);
	run_allreduce(3, 0, DT_COMM_ALG_AUTO, &sz);
}

/* Same-host links: ranks in one process can always read each other, so the
 * ring sends every segment of 4 bytes or more by reference; the sums must be
 * exact, round after round (a rank that returned before its reader finished
 * and refilled its buffer would corrupt the next round's check). */
DT_TEST_TIMEOUT(dist_collective, allreduce_by_reference_matches_sum, 120)
{
	struct sizes sz = { { 0, 1, 3, 17, 1000, 4099, 100003 }, 7, 3 };
	int allowed = kernel_allows_cma();
	for (int n = 2; n <= 5; n++) {
		int readers = run_allreduce_cma(n, 64, DT_COMM_ALG_RING, 4, &sz);
		DT_CHECK_INT_EQ(readers, allowed ? n : 0);
		readers = run_allreduce_cma(n, 1024, DT_COMM_ALG_RING, 4, &sz);
		DT_CHECK_INT_EQ(readers, allowed ? n : 0);
		DT_CHECK_INT_EQ(run_allreduce_cma(n, 64, DT_COMM_ALG_RING, -1, &sz), 0); /* told not to */
	}
	if (!allowed)
		DT_SKIP("this kernel forbids process_vm_readv: only the TCP fallback was exercised");
}

DT_TEST(dist_collective, the_environment_can_turn_same_host_reads_off)
{
	struct sizes sz = { { 5000 }, 1, 1 };
	DT_CHECK(setenv("DTRAIN_COLLECTIVE_CMA", "0", 1) == 0);
	int readers = run_allreduce_cma(2, 64, DT_COMM_ALG_RING, 4, &sz);
	DT_CHECK(unsetenv("DTRAIN_COLLECTIVE_CMA") == 0);
	DT_CHECK_INT_EQ(readers, 0);
}

DT_TEST(dist_collective, allreduce_two_ranks_every_algorithm)
{
	struct sizes sz = { { 0, 1, 2, 3, 1000, 16384 }, 6, 3 };
	for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++)
		run_allreduce(2, 64, alg, &sz);
}

/* Segments of 20 bytes: 5 floats, but 2.5 int64s. Every algorithm must cut
 * its int64 steps at whole elements (a reduce item is added an element at a
 * time, so half an element would be dropped or misaligned); the int64 sums in
 * allreduce_rank check every element exactly. */
DT_TEST_TIMEOUT(dist_collective, every_algorithm_keeps_int64_elements_whole, 120)
{
	struct sizes sz = { { 1, 3, 5, 17, 1009 }, 5, 1 };
	for (int n = 2; n <= 5; n++)
		for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++)
			run_allreduce_cma(n, 20, alg, -1, &sz);
}

/* Every algorithm against a plain sum for 1 to 8 ranks (powers of two and
 * not: the extra ranks fold in), at sizes 0, 1, fewer than the ranks,
 * primes, and not divisible by the 64-byte segments. */
DT_TEST_TIMEOUT(dist_collective, every_algorithm_matches_sum_1_to_8_ranks, 240)
{
	struct sizes sz = { { 0, 1, 2, 5, 7, 13, 17, 31, 1009, 4099 }, 10, 2 };
	for (int n = 1; n <= 8; n++)
		for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++)
			run_allreduce_cma(n, 64, alg, -1, &sz);
}

/* The same over TCP (DTRAIN_COLLECTIVE_SHM=0's path, and between hosts). */
DT_TEST_TIMEOUT(dist_collective, every_algorithm_matches_sum_over_tcp_1_to_8_ranks, 240)
{
	struct sizes sz = { { 0, 1, 5, 17, 1009, 4099 }, 6, 1 };
	for (int n = 1; n <= 8; n++)
		for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++)
			run_allreduce_shm(n, 64, alg, -1, 1, &sz);
}

/* Shared memory with the default segments (256 KiB frames: a ring of 1 MiB
 * fills, the writer sleeps until the reader makes room), with and without
 * the neighbour's memory read for the large ring segments. */
DT_TEST_TIMEOUT(dist_collective, shared_memory_full_rings_and_large_sizes, 120)
{
	struct sizes sz = { { 3, 65537, 1000003 }, 3, 2 };
	for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++) {
		run_allreduce_shm(2, 0, alg, 0, 0, &sz);
		run_allreduce_shm(3, 0, alg, -1, 0, &sz);
	}
}

/* Every rank of a comm picks the same algorithm for every size (a pure
 * function of what all know), and the model's picks are the expected
 * families: recursive doubling for a few KB, the ring for tens of MB. */
static const size_t choice_sizes[] = { 0, 4, 4096, 65536, 262144, 1u << 20, 16u << 20, 64u << 20 };
#define NCHOICES (sizeof(choice_sizes) / sizeof(choice_sizes[0]))
static int choices[MAXR][NCHOICES][2];

static enum dt_status choice_rank(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	(void)g;
	(void)err;
	for (size_t k = 0; k < NCHOICES; k++) {
		choices[rank][k][0] = (int)dt_comm_choose(comm, DT_COMM_ALLREDUCE, choice_sizes[k]);
		choices[rank][k][1] = (int)dt_comm_choose(comm, DT_COMM_BROADCAST, choice_sizes[k]);
	}
	return DT_OK;
}

DT_TEST(dist_collective, every_rank_chooses_the_same_algorithm)
{
	for (int n = 2; n <= 8; n++) {
		struct group g;
		group_init(&g, n);
		g.fn = choice_rank;
		group_run(&g);
		group_expect_ok(&g);
		for (int r = 1; r < n; r++)
			DT_CHECK(memcmp(choices[r], choices[0], sizeof(choices[0])) == 0);
		DT_CHECK_INT_EQ(choices[0][2][0], DT_COMM_ALG_DOUBLING);  /* 4 KB */
		DT_CHECK_INT_EQ(choices[0][NCHOICES - 1][0], DT_COMM_ALG_RING); /* 64 MB */
		DT_CHECK_INT_EQ(choices[0][2][1], DT_COMM_ALG_DOUBLING);  /* a 4 KB broadcast: binomial tree */
	}
}

DT_TEST(dist_collective, single_rank_is_a_no_op)
{
	struct group g;
	group_init(&g, 1);
	struct sizes sz = { { 0, 5 }, 2, 1 };
	g.fn = allreduce_rank;
	g.arg = &sz;
	group_run(&g);
	group_expect_ok(&g);
}

/* ---- broadcast ---- */

static uint8_t bvalue(int root, size_t i) { return (uint8_t)(i * 31u + (size_t)root * 7u + 1u); }

static enum dt_status broadcast_rank(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	static const size_t sizes[] = { 0, 1, 5, 1000, 100001 };
	for (int root = 0; root < g->n; root++) {
		for (size_t k = 0; k < DT_ARRAY_LEN(sizes); k++) {
			size_t bytes = sizes[k];
			uint8_t *buf = dt_xmalloc(bytes + 1);
			for (size_t i = 0; i < bytes; i++)
				buf[i] = rank == root ? bvalue(root, i) : 0xEE;
			enum dt_status st = dt_broadcast(comm, buf, bytes, root, "init", dt_deadline_in(30), err);
			for (size_t i = 0; !st && i < bytes; i++)
				if (buf[i] != bvalue(root, i))
					st = dt_err_set(err, DT_INTERNAL, "rank %d root %d: byte %zu of %zu is %u, expected %u",
							rank, root, i, bytes, buf[i], bvalue(root, i));
			free(buf);
			if (st)
				return st;
		}
	}
	return DT_OK;
}

DT_TEST_TIMEOUT(dist_collective, broadcast_from_each_root, 120)
{
	for (int n = 2; n <= 4; n++) {
		struct group g;
		group_init(&g, n);
		g.seg_bytes = 4096;
		g.fn = broadcast_rank;
		group_run(&g);
		group_expect_ok(&g);
	}
}

/* ---- barrier ---- */

static enum dt_status barrier_rank(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	for (int round = 1; round <= 3; round++) {
		dt_sleep(0.03 * (double)((rank + round) % g->n));
		atomic_fetch_add(&g->counter, 1);
		enum dt_status st = dt_barrier(comm, "step", dt_deadline_in(30), err);
		if (st)
			return st;
		int seen = atomic_load(&g->counter);
		if (seen < round * g->n)
			return dt_err_set(err, DT_INTERNAL, "rank %d left barrier %d after only %d arrivals (want %d)", rank,
					  round, seen, round * g->n);
		/* nobody may enter the next round before everyone left this one */
		st = dt_barrier(comm, "step/after", dt_deadline_in(30), err);
		if (st)
			return st;
	}
	return DT_OK;
}

DT_TEST(dist_collective, barrier_waits_for_everyone)
{
	for (int n = 2; n <= 4; n++) {
		struct group g;
		group_init(&g, n);
		g.fn = barrier_rank;
		group_run(&g);
		group_expect_ok(&g);
	}
}

/* ---- mismatches and missing ranks ---- */

static enum dt_status mismatch_rank(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	float buf[10] = { 0 };
	const char *name = rank == g->n - 1 ? "grads/other" : "grads/mine";
	enum dt_status st = dt_allreduce_sum_f32(comm, buf, 10, name, dt_deadline_in(10), err);
	if (st == DT_OK)
		return dt_err_set(err, DT_INTERNAL, "rank %d: mismatched allreduce succeeded", rank);
	/* Broken for good: the next call returns the error again at once. */
	struct dt_err again = DT_ERR_INIT;
	if (dt_barrier(comm, "after", dt_deadline_in(10), &again) == DT_OK)
		return dt_err_set(err, DT_INTERNAL, "rank %d: a barrier on a broken ring succeeded", rank);
	if (!strstr(again.msg, "failed earlier"))
		return dt_err_set(err, DT_INTERNAL, "rank %d: second error does not say why: %s", rank, again.msg);
	return st;
}

DT_TEST(dist_collective, mismatched_names_fail_on_every_rank)
{
	for (int n = 2; n <= 3; n++) {
		struct group g;
		group_init(&g, n);
		g.fn = mismatch_rank;
		group_run(&g);
		for (int i = 0; i < n; i++) {
			DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
			DT_CHECK_CONTAINS(g.err[i].msg, "collective mismatch");
			DT_CHECK_CONTAINS(g.err[i].msg, "'grads/other'");
			DT_CHECK_CONTAINS(g.err[i].msg, "'grads/mine'");
		}
	}
}

static enum dt_status size_mismatch_rank(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	float buf[11] = { 0 };
	if (g->arg) { /* the same count, another element type */
		int64_t ibuf[10] = { 0 };
		return rank == 0 ? dt_allreduce_sum_f32(comm, buf, 10, "grads/0", dt_deadline_in(10), err)
				 : dt_allreduce_sum_i64(comm, ibuf, 10, "grads/0", dt_deadline_in(10), err);
	}
	return dt_allreduce_sum_f32(comm, buf, rank == 0 ? 10 : 11, "grads/0", dt_deadline_in(10), err);
}

DT_TEST(dist_collective, mismatched_sizes_fail)
{
	struct group g;
	group_init(&g, 2);
	g.fn = size_mismatch_rank;
	group_run(&g);
	for (int i = 0; i < 2; i++) {
		DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
		DT_CHECK_CONTAINS(g.err[i].msg, "allreduce 'grads/0' (#1, 10 float32)");
		DT_CHECK_CONTAINS(g.err[i].msg, "allreduce 'grads/0' (#1, 11 float32)");
	}
	group_init(&g, 2);
	g.fn = size_mismatch_rank;
	g.arg = &g; /* float32 on rank 0, int64 on rank 1 */
	group_run(&g);
	for (int i = 0; i < 2; i++) {
		DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
		DT_CHECK_CONTAINS(g.err[i].msg, "allreduce 'grads/0' (#1, 10 int64)");
	}
}

DT_TEST(dist_collective, absent_rank_is_named_at_rendezvous)
{
	struct group g;
	group_init(&g, 3);
	g.absent = 2;
	g.connect_s = 1.5;
	int64_t t0 = dt_now_ns();
	group_run(&g);
	double took = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(took < 10);
	for (int i = 0; i < 2; i++) {
		DT_CHECK(dt_status_exit_code(g.st[i]) == 3);
		DT_CHECK_CONTAINS(g.err[i].msg, "worker:2");
	}
}

static enum dt_status late_rank(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	float buf[1000];
	for (int i = 0; i < 1000; i++)
		buf[i] = 1;
	if (rank == 2) {
		/* Never enters: waits (bounded) until the others gave up. */
		for (int i = 0; i < 400 && atomic_load(&g->counter) < 2; i++)
			dt_sleep(0.025);
		return DT_OK;
	}
	enum dt_status st = dt_allreduce_sum_f32(comm, buf, 1000, "grads/late", dt_deadline_in(1.5), err);
	atomic_fetch_add(&g->counter, 1);
	return st;
}

DT_TEST(dist_collective, timeout_names_the_rank_that_never_enters)
{
	for (int n = 3; n <= 4; n++) {
		struct group g;
		group_init(&g, n);
		g.fn = late_rank;
		group_run(&g);
		for (int i = 0; i < n; i++) {
			if (i == 2)
				continue;
			DT_CHECK(dt_status_exit_code(g.st[i]) == 3);
			/* rank 3 (right of the missing one) may learn it from rank 0's abort */
			if (i < 2)
				DT_CHECK_INT_EQ(g.st[i], DT_TIMEOUT);
			DT_CHECK_CONTAINS(g.err[i].msg, "worker:2 at 127.0.0.1:");
			DT_CHECK_CONTAINS(g.err[i].msg, "'grads/late'");
		}
		DT_CHECK_CONTAINS(g.err[0].msg, "missing rank worker:2");
		DT_CHECK_CONTAINS(g.err[1].msg, "missing rank worker:2");
	}
}

static enum dt_status leaving_rank(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	float buf[1000] = { 0 };
	if (rank == 1)
		return DT_OK; /* leaves: its comm is freed, its sockets close */
	return dt_allreduce_sum_f32(comm, buf, 1000, "grads/gone", dt_deadline_in(20), err);
}

DT_TEST(dist_collective, closed_peer_is_a_peer_failure)
{
	struct group g;
	group_init(&g, 3);
	g.fn = leaving_rank;
	int64_t t0 = dt_now_ns();
	group_run(&g);
	DT_CHECK((double)(dt_now_ns() - t0) / 1e9 < 10);
	for (int i = 0; i < 3; i += 2) {
		DT_CHECK_INT_EQ(g.st[i], DT_PEER);
		DT_CHECK_CONTAINS(g.err[i].msg, "worker:1 at 127.0.0.1:");
	}
}

DT_TEST(dist_collective, refuses_a_different_cluster)
{
	struct group g;
	group_init(&g, 2);
	struct dt_hello h[2];
	for (int i = 0; i < 2; i++)
		dt_hello_init(&h[i], "worker", (uint32_t)i, 0x1111u * (uint64_t)(i + 1));
	g.hellos = h;
	group_run(&g);
	for (int i = 0; i < 2; i++) {
		DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
		DT_CHECK_CONTAINS(g.err[i].msg, "worker:");
	}
	for (int i = 0; i < 2; i++)
		dt_hello_release(&h[i]);
}

/* ---- wire ---- */

DT_TEST(dist_collective, start_frame_round_trip_and_hostile_input)
{
	struct dt_coll_start s = { .seq = 7, .kind = DT_COLL_BROADCAST, .dtype = 8, .root = 2, .count = 4000,
				   .rank = 1, .nranks = 3 };
	snprintf(s.name, sizeof(s.name), "init/variables");
	uint8_t buf[DT_COLL_START_FIXED + DT_COLL_NAME_WIRE_MAX];
	size_t len = dt_coll_start_encode(&s, buf);
	DT_CHECK_INT_EQ(len, DT_COLL_START_FIXED + 14);
	struct dt_coll_start got;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_coll_start_decode(&got, buf, len, &err), &err);
	DT_CHECK_INT_EQ(got.seq, 7);
	DT_CHECK_INT_EQ(got.root, 2);
	DT_CHECK_INT_EQ(got.count, 4000);
	DT_CHECK_STR_EQ(got.name, "init/variables");
	char d[200];
	dt_coll_describe(&got, d, sizeof(d));
	DT_CHECK_STR_EQ(d, "broadcast 'init/variables' (#7, 4000 bytes from rank 2)");
	/* truncated, overlong name, non-printable name, unknown kind */
	DT_CHECK_INT_EQ(dt_coll_start_decode(&got, buf, len - 1, &err), DT_PROTOCOL);
	DT_CHECK_INT_EQ(dt_coll_start_decode(&got, buf, 10, &err), DT_PROTOCOL);
	buf[DT_COLL_START_FIXED] = 0x01;
	DT_CHECK_INT_EQ(dt_coll_start_decode(&got, buf, len, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "non-printable");
	buf[DT_COLL_START_FIXED] = 'i';
	buf[8] = 9;
	DT_CHECK_INT_EQ(dt_coll_start_decode(&got, buf, len, &err), DT_PROTOCOL);
	buf[8] = DT_COLL_BROADCAST;
	dt_put_u16le(buf + 10, 500);
	DT_CHECK_INT_EQ(dt_coll_start_decode(&got, buf, len, &err), DT_PROTOCOL);

	/* headers: good, bad crc, non-collective type, flags */
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	struct dt_frame_header h = dt_frame_header_make(DT_MSG_COLL_DATA, 0, 9, 4096), out;
	dt_frame_header_pack(&h, hdr);
	DT_CHECK_OK(dt_coll_header_parse(hdr, &out, &err), &err);
	DT_CHECK_INT_EQ(out.request_id, 9);
	DT_CHECK_INT_EQ(out.length, 4096);
	hdr[20] ^= 1;
	DT_CHECK_INT_EQ(dt_coll_header_parse(hdr, &out, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "crc");
	h = dt_frame_header_make(DT_MSG_PS_PUSH, 0, 1, 8);
	dt_frame_header_pack(&h, hdr);
	DT_CHECK_INT_EQ(dt_coll_header_parse(hdr, &out, &err), DT_PROTOCOL);
	h = dt_frame_header_make(DT_MSG_COLL_STALL, DT_FRAME_F_REPLY, 1, 16);
	dt_frame_header_pack(&h, hdr);
	DT_CHECK_INT_EQ(dt_coll_header_parse(hdr, &out, &err), DT_PROTOCOL);
	h = dt_frame_header_make(DT_MSG_COLL_START, 0, 1, 1u << 20);
	dt_frame_header_pack(&h, hdr);
	DT_CHECK_INT_EQ(dt_coll_header_parse(hdr, &out, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "cap");
}

/* ---- ranks as processes ---- */

/* Whether this process still maps a shared-memory region of a comm
 * (comm_shm.c names its memfds "dtrain-coll"). */
static int maps_a_region(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return 0;
	char line[512];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "dtrain-coll") != NULL;
	fclose(f);
	return found;
}

/* Entries of /dev/shm whose name mentions dtrain (other jobs on the host
 * may come and go there; ours must never appear). */
static int dev_shm_dtrain_entries(void)
{
	FILE *f = popen("ls -a /dev/shm 2>/dev/null | grep -c dtrain", "r");
	int k = -1;
	if (f) {
		if (fscanf(f, "%d", &k) != 1)
			k = -1;
		pclose(f);
	}
	return k;
}

struct procs {
	int n;
	int algorithm; /* the comm's config: 0 the cost model */
	int auth;      /* nonzero: a cluster secret, frames tagged */
	pid_t pid[MAXR];
	int fds[MAXR];
	char addrs[MAXR][DT_COMM_ADDR_MAX];
	struct dt_comm_peer peers[MAXR];
};

/* What a child does once connected; returns its status (err filled). */
typedef enum dt_status (*proc_fn)(struct dt_comm *comm, int rank, struct dt_err *err);

static void proc_report(int rank, enum dt_status st, const struct dt_err *err)
{
	char path[512], name[32];
	snprintf(name, sizeof(name), "rank%d.err", rank);
	dt_test_path(path, sizeof(path), name);
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "%d %s", (int)st, st ? err->msg : "ok");
		fclose(f);
	}
}

static void procs_start_with(struct procs *p, int n, proc_fn fn, int algorithm, int auth)
{
	memset(p, 0, sizeof(*p));
	p->n = n;
	p->algorithm = algorithm;
	p->auth = auth;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_comm_listen_loopback(n, p->fds, p->addrs, &err), &err);
	for (int i = 0; i < n; i++)
		p->peers[i] = (struct dt_comm_peer){ p->addrs[i], "worker", (uint32_t)i };
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		DT_CHECK(pid >= 0);
		if (pid == 0) {
			alarm(60); /* a child never outlives a broken test by much */
			for (int j = 0; j < n; j++)
				if (j != i)
					dt_sock_close(p->fds[j]);
			struct dt_auth secret = { .mode = DT_WIRE_AUTH };
			memset(secret.secret, 0x5a, sizeof(secret.secret));
			struct dt_hello hello;
			dt_hello_init(&hello, "worker", (uint32_t)i, 0);
			if (p->auth)
				hello.auth = &secret;
			struct dt_comm_config cfg = { .nranks = n, .rank = i, .peers = p->peers, .listen_fd = p->fds[i],
						      .listen_fd_set = 1, .algorithm = p->algorithm, .hello = &hello };
			struct dt_comm *comm = NULL;
			struct dt_err e = DT_ERR_INIT;
			enum dt_status st = dt_comm_new(&cfg, dt_deadline_in(20), &comm, &e);
			if (!st)
				st = fn(comm, i, &e);
			proc_report(i, st, &e);
			dt_comm_free(comm);
			if (maps_a_region())
				_exit(70); /* dt_comm_free left a shared mapping behind */
			_exit(dt_status_exit_code(st));
		}
		p->pid[i] = pid;
	}
	for (int i = 0; i < n; i++)
		dt_sock_close(p->fds[i]);
}

/* Waits for child i (bounded); returns its exit code (128+signal if killed). */
static void procs_start(struct procs *p, int n, proc_fn fn)
{
	procs_start_with(p, n, fn, 0, 0);
}

static int proc_wait(struct procs *p, int i, double timeout_s)
{
	int64_t end = dt_deadline_in(timeout_s);
	for (;;) {
		int status;
		pid_t got = waitpid(p->pid[i], &status, WNOHANG);
		if (got == p->pid[i]) {
			p->pid[i] = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		}
		if (dt_deadline_passed(end)) {
			kill(p->pid[i], SIGKILL);
			waitpid(p->pid[i], &status, 0);
			p->pid[i] = 0;
			dt_test_fail(__FILE__, __LINE__, "rank %d did not exit within %.1f s", i, timeout_s);
		}
		dt_sleep(0.005);
	}
}

static const char *proc_message(int rank)
{
	static char buf[MAXR][DT_ERR_MSG_MAX + 16];
	char path[512], name[32];
	snprintf(name, sizeof(name), "rank%d.err", rank);
	dt_test_path(path, sizeof(path), name);
	FILE *f = fopen(path, "r");
	buf[rank][0] = '\0';
	if (f) {
		size_t n = fread(buf[rank], 1, sizeof(buf[rank]) - 1, f);
		buf[rank][n] = '\0';
		fclose(f);
	}
	return buf[rank];
}

/* Three processes on one host: each reads its left neighbour's 400 KB
 * chunks (1.2 MB all-reduces, above the 512 KiB threshold) straight from
 * that process's memory, where the kernel allows it. */
static enum dt_status three_rounds(struct dt_comm *comm, int rank, struct dt_err *err)
{
	if (kernel_allows_cma() && !dt_comm_reads_left_memory(comm))
		return dt_err_set(err, DT_INTERNAL, "rank %d reads its left neighbour over TCP, though the kernel allows "
						    "process_vm_readv", rank);
	size_t count = 300007;
	float *buf = dt_xmallocarray(count, sizeof(float));
	enum dt_status st = DT_OK;
	for (int round = 0; round < 3 && !st; round++) {
		for (size_t i = 0; i < count; i++)
			buf[i] = value(rank, i, round);
		st = dt_allreduce_sum_f32(comm, buf, count, "grads", dt_deadline_in(20), err);
		for (size_t i = 0; !st && i < count; i++) {
			float want = value(0, i, round) + value(1, i, round) + value(2, i, round);
			if (buf[i] != want)
				st = dt_err_set(err, DT_INTERNAL, "element %zu is %g, expected %g", i, (double)buf[i],
						(double)want);
		}
	}
	free(buf);
	return st;
}

DT_TEST(dist_collective, three_processes_allreduce)
{
	struct procs p;
	procs_start(&p, 3, three_rounds);
	for (int i = 0; i < 3; i++) {
		int code = proc_wait(&p, i, 40);
		if (code != 0)
			dt_test_fail(__FILE__, __LINE__, "rank %d exited %d: %s", i, code, proc_message(i));
	}
}

/* Processes on shared memory (checked: every link), every algorithm against
 * a plain sum at awkward sizes, float32 and int64. */
static enum dt_status shm_sums(struct dt_comm *comm, int rank, struct dt_err *err)
{
	int n = dt_comm_size(comm), links = 0;
	for (int q = 0; q < n; q++)
		for (int d = 1; q != rank && d < n; d *= 2)
			if ((q - rank + n) % n == d || (rank - q + n) % n == d) {
				links++;
				break;
			}
	if (dt_comm_shared_memory_links(comm) != links)
		return dt_err_set(err, DT_INTERNAL, "rank %d: %d of %d links on shared memory", rank,
				  dt_comm_shared_memory_links(comm), links);
	static const size_t counts[] = { 0, 1, 3, 7, 1009, 4099, 65537, 300007 };
	enum dt_status st = DT_OK;
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]) && !st; k++) {
		size_t count = counts[k];
		float *buf = dt_xmallocarray(count + 1, sizeof(float));
		int64_t *ibuf = dt_xmallocarray(count + 1, sizeof(int64_t));
		for (size_t i = 0; i < count; i++) {
			buf[i] = value(rank, i, (int)k);
			ibuf[i] = ivalue(rank, i, (int)k);
		}
		st = dt_allreduce_sum_f32(comm, buf, count, "shm/f32", dt_deadline_in(30), err);
		if (!st)
			st = dt_allreduce_sum_i64(comm, ibuf, count, "shm/i64", dt_deadline_in(30), err);
		for (size_t i = 0; !st && i < count; i++) {
			float want = 0;
			int64_t iwant = 0;
			for (int q = 0; q < n; q++) {
				want += value(q, i, (int)k);
				iwant += ivalue(q, i, (int)k);
			}
			if (buf[i] != want || ibuf[i] != iwant)
				st = dt_err_set(err, DT_INTERNAL, "rank %d count %zu: element %zu is %g / %lld, expected %g / %lld",
						rank, count, i, (double)buf[i], (long long)ibuf[i], (double)want, (long long)iwant);
		}
		free(buf);
		free(ibuf);
	}
	return st;
}

DT_TEST_TIMEOUT(dist_collective, shared_memory_processes_every_algorithm_matches_sum, 180)
{
	for (int n = 2; n <= 5; n += 3)
		for (int alg = DT_COMM_ALG_AUTO; alg <= DT_COMM_ALG_HALVING; alg++) {
			struct procs p;
			procs_start_with(&p, n, shm_sums, alg, alg == DT_COMM_ALG_HALVING);
			for (int i = 0; i < n; i++) {
				int code = proc_wait(&p, i, 60);
				if (code != 0)
					dt_test_fail(__FILE__, __LINE__, "%d ranks, algorithm %d: rank %d exited %d: %s", n, alg, i,
						     code, proc_message(i));
			}
		}
}

#define FAULT_DEADLINE_S 2.0

/* 800 KB all-reduces: on one host their segments go by reference, so a
 * killed or stopped rank is also a rank whose memory stops being readable. */
static enum dt_status until_failure(struct dt_comm *comm, int rank, struct dt_err *err)
{
	size_t count = 200000;
	float *buf = dt_xcalloc(count, sizeof(float));
	enum dt_status st = DT_OK;
	int64_t end = dt_deadline_in(30);
	for (int round = 0; round < 1000000 && !st && !dt_deadline_passed(end); round++)
		st = dt_allreduce_sum_f32(comm, buf, count, "grads", dt_deadline_in(FAULT_DEADLINE_S), err);
	free(buf);
	if (!st)
		st = dt_err_set(err, DT_INTERNAL, "rank %d: no failure within 30 s", rank);
	return st;
}

/* Small all-reduces (recursive doubling by the model; every algorithm when forced). */
static enum dt_status until_failure_small(struct dt_comm *comm, int rank, struct dt_err *err)
{
	float buf[1031] = { 0 };
	enum dt_status st = DT_OK;
	int64_t end = dt_deadline_in(30);
	for (int round = 0; round < 10000000 && !st && !dt_deadline_passed(end); round++)
		st = dt_allreduce_sum_f32(comm, buf, 1031, "small", dt_deadline_in(FAULT_DEADLINE_S), err);
	if (!st)
		st = dt_err_set(err, DT_INTERNAL, "rank %d: no failure within 30 s", rank);
	return st;
}

static enum dt_status until_failure_broadcast(struct dt_comm *comm, int rank, struct dt_err *err)
{
	uint8_t buf[3001] = { 0 };
	enum dt_status st = DT_OK;
	int64_t end = dt_deadline_in(30);
	for (int round = 0; round < 10000000 && !st && !dt_deadline_passed(end); round++) {
		st = dt_broadcast(comm, buf, sizeof(buf), round % dt_comm_size(comm), "bcast", dt_deadline_in(FAULT_DEADLINE_S), err);
		if (!st)
			st = dt_barrier(comm, "b", dt_deadline_in(FAULT_DEADLINE_S), err);
	}
	if (!st)
		st = dt_err_set(err, DT_INTERNAL, "rank %d: no failure within 30 s", rank);
	return st;
}

/* n ranks run fn; `victim` gets sig; every other rank must exit 3 within
 * twice the deadline, naming the victim. */
static void fault_test_with(int sig, int n, int victim, proc_fn fn, int algorithm, int auth)
{
	struct procs p;
	procs_start_with(&p, n, fn, algorithm, auth);
	dt_sleep(0.5); /* connected and looping */
	DT_CHECK(kill(p.pid[victim], sig) == 0);
	int64_t t0 = dt_now_ns();
	char want[32];
	snprintf(want, sizeof(want), "worker:%d at 127.0.0.1:", victim);
	for (int i = 0; i < n; i++) {
		if (i == victim)
			continue;
		int code = proc_wait(&p, i, 4 * FAULT_DEADLINE_S + 5);
		double took = (double)(dt_now_ns() - t0) / 1e9;
		const char *msg = proc_message(i);
		if (code != 3)
			dt_test_fail(__FILE__, __LINE__, "rank %d exited %d, not 3: %s", i, code, msg);
		if (took > 2 * FAULT_DEADLINE_S)
			dt_test_fail(__FILE__, __LINE__, "rank %d took %.2f s (more than 2 x %.1f s): %s", i, took,
				     FAULT_DEADLINE_S, msg);
		DT_CHECK_CONTAINS(msg, want);
		if (sig == SIGSTOP)
			DT_CHECK_CONTAINS(msg, "timed out");
	}
	kill(p.pid[victim], SIGKILL);
	if (sig == SIGSTOP)
		kill(p.pid[victim], SIGCONT);
	int code = proc_wait(&p, victim, 10);
	DT_CHECK_INT_EQ(code, 128 + SIGKILL);
}

static void fault_test(int sig)
{
	fault_test_with(sig, 3, 2, until_failure, 0, 0);
}

/* A rank killed or stopped in the middle of each algorithm, with 4 ranks (a
 * power of two) and 5 (one folds in; the victim is the folded rank's
 * partner), with and without a cluster secret. */
static void fault_every_algorithm(int sig)
{
	for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++) {
		fault_test_with(sig, 4, 2, until_failure_small, alg, alg == DT_COMM_ALG_HALVING);
		fault_test_with(sig, 5, 0, until_failure_small, alg, alg == DT_COMM_ALG_DOUBLING);
	}
	fault_test_with(sig, 4, 1, until_failure_broadcast, DT_COMM_ALG_DOUBLING, 1);
	fault_test_with(sig, 5, 3, until_failure_broadcast, DT_COMM_ALG_RING, 0);
}

DT_TEST_TIMEOUT(dist_collective, killed_rank_in_each_algorithm_fails_the_others_naming_it, 240)
{
	fault_every_algorithm(SIGKILL);
}

DT_TEST_TIMEOUT(dist_collective, stopped_rank_in_each_algorithm_is_named_in_a_timeout, 240)
{
	fault_every_algorithm(SIGSTOP);
}

/* Two ranks on shared memory (checked), small all-reduces or 800 KB ones (ring
 * segments read from the neighbour's memory, the COLL_REFs through the ring). */
static enum dt_status shm_until_failure(struct dt_comm *comm, int rank, struct dt_err *err)
{
	if (dt_comm_shared_memory_links(comm) != 1)
		return dt_err_set(err, DT_INTERNAL, "rank %d: %d links on shared memory, expected 1", rank,
				  dt_comm_shared_memory_links(comm));
	return until_failure_small(comm, rank, err);
}

static enum dt_status shm_until_failure_large(struct dt_comm *comm, int rank, struct dt_err *err)
{
	if (dt_comm_shared_memory_links(comm) != 1)
		return dt_err_set(err, DT_INTERNAL, "rank %d: no shared-memory link", rank);
	return until_failure(comm, rank, err);
}

/* kill -9 of either side of a shared-memory link mid-collective: the other
 * fails within the deadline naming it (fault_test_with), unmaps everything
 * (the children check /proc/self/maps after dt_comm_free), and nothing is
 * left in /dev/shm (the regions are memfds: they never had a name). SIGSTOP:
 * the deadline names it. */
DT_TEST_TIMEOUT(dist_collective, shared_memory_peer_killed_or_stopped_leaves_nothing, 180)
{
	int before = dev_shm_dtrain_entries();
	DT_CHECK_INT_EQ(before, 0);
	for (int victim = 0; victim < 2; victim++) {
		fault_test_with(SIGKILL, 2, victim, shm_until_failure, 0, victim);
		fault_test_with(SIGKILL, 2, victim, shm_until_failure_large, 0, 0);
	}
	fault_test_with(SIGSTOP, 2, 1, shm_until_failure, DT_COMM_ALG_RING, 1);
	fault_test_with(SIGSTOP, 2, 0, shm_until_failure_large, 0, 0);
	DT_CHECK_INT_EQ(dev_shm_dtrain_entries(), before);
	DT_CHECK(!maps_a_region());
}

/* A rank that leaves (frees its comm) in the middle: the others fail naming
 * it, and every thread's comm, freed on that failure path, unmapped its
 * regions. */
DT_TEST(dist_collective, shared_memory_regions_are_unmapped_on_failure)
{
	struct group g;
	group_init(&g, 4);
	g.fn = leaving_rank;
	group_run(&g);
	for (int i = 0; i < 4; i++)
		if (i != 1)
			DT_CHECK_CONTAINS(g.err[i].msg, "worker:1 at 127.0.0.1:");
	DT_CHECK_INT_EQ(g.shm_links[0], 3);
	DT_CHECK(!maps_a_region());
}

DT_TEST(dist_collective, killed_rank_fails_the_others_with_exit_3)
{
	fault_test(SIGKILL);
}

DT_TEST(dist_collective, stopped_rank_is_named_in_a_timeout)
{
	fault_test(SIGSTOP);
}

/* ---- a misbehaving neighbour ---- */

static enum dt_status one_allreduce(struct group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	float buf[100] = { 0 };
	return dt_allreduce_sum_f32(comm, buf, 100, "grads", dt_deadline_in(10), err);
}

static void send_frame(int fd, uint16_t type, uint64_t seq, const void *payload, size_t len)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_frame_send_fd(fd, type, 0, seq, payload, len, dt_deadline_in(5), "rank 1", &err), &err);
}

static void send_start(int fd, uint64_t seq, unsigned kind, unsigned dtype, uint64_t count, const char *name)
{
	struct dt_coll_start s = { .seq = seq, .kind = (uint8_t)kind, .dtype = (uint8_t)dtype, .count = count,
				   .rank = 0, .nranks = 2 };
	snprintf(s.name, sizeof(s.name), "%s", name);
	uint8_t buf[DT_COLL_START_FIXED + DT_COLL_NAME_WIRE_MAX];
	send_frame(fd, DT_MSG_COLL_START, seq, buf, dt_coll_start_encode(&s, buf));
}

/* Reads one frame of `type` from fd (and drops it). */
static void expect_frame(int fd, uint16_t type)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1u << 20);
	DT_CHECK_OK(dt_frame_recv_fd(fd, &d, dt_deadline_in(10), "rank 1", &err), &err);
	DT_CHECK_INT_EQ(d.header.type, type);
	dt_frame_decoder_release(&d);
}

/* Rank 0's side of the shared-memory exchange (comm_shm.c) with rank 1:
 * no region offered, rank 1's refused, so every frame goes over TCP. */
static void decline_shared_memory(int out, int in)
{
	uint8_t none[DT_COLL_PEER_BYTES] = { 0 }, no[DT_COLL_PEER_OK_BYTES];
	dt_put_u32le(no, ENOTSUP);
	send_frame(in, DT_MSG_COLL_SHM, 0, none, sizeof(none)); /* nothing for rank 1 to write into */
	expect_frame(out, DT_MSG_COLL_SHM);                      /* rank 1's offer */
	send_frame(out, DT_MSG_COLL_PEER_OK, 0, no, sizeof(no)); /* not taken */
	expect_frame(in, DT_MSG_COLL_PEER_OK);
}

/* Rank 0's side of the same-host exchange (comm_cma.c) with rank 1, whose
 * left link is `out` and right link `in`: rank 0 offers nothing and reads
 * nothing, so rank 1's links carry bytes. */
static void decline_same_host_reads(int out, int in)
{
	uint8_t peer[DT_COLL_PEER_BYTES] = { 0 }, no[DT_COLL_PEER_OK_BYTES];
	dt_put_u32le(no, ENOTSUP);
	send_frame(in, DT_MSG_COLL_PEER, 0, peer, sizeof(peer));  /* rank 1's reader */
	send_frame(out, DT_MSG_COLL_PEER, 0, peer, sizeof(peer)); /* an offer without a pid */
	send_frame(in, DT_MSG_COLL_PEER_OK, 0, no, sizeof(no));   /* we will not read rank 1 */
	expect_frame(out, DT_MSG_COLL_PEER);
	expect_frame(out, DT_MSG_COLL_PEER_OK);
	expect_frame(in, DT_MSG_COLL_PEER);
	decline_shared_memory(out, in);
}

/* The bytes a fake rank 0 offers rank 1 to read (the same process). */
static uint8_t offered_token[DT_COLL_TOKEN_BYTES] = "dtrain test tok";
static float offered_segment[100];

/* As decline_same_host_reads, but rank 0 offers its memory the way
 * comm_cma.c does, so rank 1 accepts COLL_REFs from it. Returns rank 1's
 * answer (0: it will read). */
static uint32_t offer_same_host_reads(int out, int in)
{
	uint8_t no_reader[DT_COLL_PEER_BYTES] = { 0 }, offer[DT_COLL_PEER_BYTES], no[DT_COLL_PEER_OK_BYTES];
	struct dt_coll_peer me = { .pid = (uint32_t)getpid(), .token_address = (uint64_t)(uintptr_t)offered_token };
	struct stat st;
	DT_CHECK(stat("/proc/self/ns/pid", &st) == 0);
	me.pid_ns = (uint64_t)st.st_ino;
	char text[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	DT_CHECK(f && fgets(text, sizeof(text), f));
	fclose(f);
	for (int i = 0, n = 0; text[i] && text[i] != '\n' && n < 32; i++) {
		if (text[i] == '-')
			continue;
		int v = text[i] <= '9' ? text[i] - '0' : text[i] - 'a' + 10;
		me.boot_id[n / 2] = (uint8_t)(n % 2 ? me.boot_id[n / 2] | v : v << 4);
		n++;
	}
	memcpy(me.token, offered_token, sizeof(me.token));
	dt_coll_peer_encode(&me, offer);
	dt_put_u32le(no, ENOTSUP);
	send_frame(in, DT_MSG_COLL_PEER, 0, no_reader, sizeof(no_reader)); /* we will not read rank 1 */
	send_frame(out, DT_MSG_COLL_PEER, 0, offer, sizeof(offer));        /* but rank 1 may read us */
	send_frame(in, DT_MSG_COLL_PEER_OK, 0, no, sizeof(no));
	expect_frame(out, DT_MSG_COLL_PEER);
	struct dt_err err = DT_ERR_INIT;
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1u << 20);
	DT_CHECK_OK(dt_frame_recv_fd(out, &d, dt_deadline_in(10), "rank 1", &err), &err);
	DT_CHECK_INT_EQ(d.header.type, DT_MSG_COLL_PEER_OK);
	uint32_t answer = dt_get_u32le(dt_frame_decoder_payload(&d));
	dt_frame_decoder_release(&d);
	expect_frame(in, DT_MSG_COLL_PEER);
	decline_shared_memory(out, in);
	return answer;
}

/* Plays rank 0 of a 2-rank ring by hand against a real rank 1, completes the
 * same-host exchange and the rendezvous barrier correctly, then sends `bad` (a case number) during the
 * allreduce and checks how rank 1 fails. */
static void bad_neighbour(int bad, enum dt_status want, const char *want_msg)
{
	struct group g;
	group_init(&g, 2);
	g.algorithm = DT_COMM_ALG_RING; /* the fake speaks the ring's frames */
	g.fn = one_allreduce;
	struct rank_arg arg = { &g, 1 };
	pthread_t th;
	DT_CHECK(pthread_create(&th, NULL, rank_main, &arg) == 0);

	struct dt_err err = DT_ERR_INIT;
	struct dt_hello me, remote;
	dt_hello_init(&me, "worker", 0, 0);
	char host[DT_HOST_MAX];
	int port, out = -1, in = -1;
	DT_CHECK_OK(dt_sock_split_hostport(g.addrs[1], host, sizeof(host), &port, &err), &err);
	DT_CHECK_OK(dt_sock_connect(host, port, "worker:1", dt_deadline_in(10), NULL, &out, &err), &err);
	DT_CHECK_OK(dt_handshake_client(out, &me, "worker:1", "worker", 1, dt_deadline_in(10), &remote, &err), &err);
	dt_hello_release(&remote);
	for (int i = 0; i < 1000 && in < 0; i++) {
		DT_CHECK_OK(dt_sock_accept(g.fds[0], &in, NULL, 0, &err), &err);
		if (in < 0)
			dt_sleep(0.01);
	}
	DT_CHECK(in >= 0);
	DT_CHECK_OK(dt_handshake_server(in, &me, "worker:1", dt_deadline_in(10), &remote, &err), &err);
	dt_hello_release(&remote);
	dt_hello_release(&me);
	if (bad == 5) {
		if (offer_same_host_reads(out, in) != 0) {
			dt_sock_close(out);
			dt_sock_close(in);
			pthread_join(th, NULL);
			return; /* the kernel forbids process_vm_readv here (kernel_allows_cma skips below) */
		}
	} else {
		decline_same_host_reads(out, in);
	}
	/* the rendezvous all-reduce (#0) of one float by recursive doubling: one
	 * exchange (1: this end does not read rank 1's memory) */
	float one = 1;
	send_start(out, 0, DT_COLL_ALLREDUCE, DT_WIRE_F32, 1, "dtrain/rendezvous");
	send_frame(out, DT_MSG_COLL_DATA, 0, &one, 4);
	/* and rank 1's half of it, so nothing unread makes our close a reset */
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1u << 20);
	for (int i = 0; i < 2; i++) {
		DT_CHECK_OK(dt_frame_recv_fd(in, &d, dt_deadline_in(10), "rank 1", &err), &err);
		DT_CHECK_INT_EQ(d.header.type, i == 0 ? DT_MSG_COLL_START : DT_MSG_COLL_DATA);
		dt_frame_decoder_next(&d);
	}
	dt_frame_decoder_release(&d);

	uint8_t junk[64];
	memset(junk, 'G', sizeof(junk));
	float data[100] = { 0 };
	switch (bad) {
	case 0: /* not our protocol at all */
		DT_CHECK_OK(dt_sock_send_all(out, junk, sizeof(junk), dt_deadline_in(5), "rank 1", &err), &err);
		break;
	case 1: /* data before the collective's start */
		send_frame(out, DT_MSG_COLL_DATA, 1, data, sizeof(data));
		break;
	case 2: /* a segment of the wrong size */
		send_start(out, 1, DT_COLL_ALLREDUCE, DT_WIRE_F32, 100, "grads");
		send_frame(out, DT_MSG_COLL_DATA, 1, data, 64);
		break;
	case 3: /* part of a frame header, then gone */
		send_start(out, 1, DT_COLL_ALLREDUCE, DT_WIRE_F32, 100, "grads");
		DT_CHECK_OK(dt_sock_send_all(out, junk, 20, dt_deadline_in(5), "rank 1", &err), &err);
		shutdown(out, SHUT_WR);
		break;
	case 4: { /* a reference on a link that was agreed to carry bytes */
		uint8_t ref[DT_COLL_REF_BYTES];
		dt_coll_ref_encode(&(struct dt_coll_ref){ 4096, 400 }, ref);
		send_start(out, 1, DT_COLL_ALLREDUCE, DT_WIRE_F32, 100, "grads");
		send_frame(out, DT_MSG_COLL_REF, 1, ref, sizeof(ref));
		break;
	}
	case 5: { /* a segment by reference, and the sender gives up while rank 1
		   * reads it: what rank 1 read may have changed under it, so it
		   * must fail, not succeed. The COLL_ABORT goes in the same write
		   * as the COLL_REF, so it is queued before rank 1 can finish the
		   * read: sent later (two writes, under load), rank 1 may finish
		   * first, and its success is then right — the bytes were stable
		   * while it read (a real sender holds them until the reader
		   * answers, ring_ref.c) — and not what this case tests. */
		uint8_t frames[2 * DT_FRAME_HEADER_SIZE + DT_COLL_REF_BYTES + 128];
		uint8_t *ref = frames + DT_FRAME_HEADER_SIZE;
		/* the ring's first step with 2 ranks: chunk 0, half the buffer */
		dt_coll_ref_encode(&(struct dt_coll_ref){ (uint64_t)(uintptr_t)offered_segment, sizeof(offered_segment) / 2 },
				   ref);
		struct dt_frame_header h = dt_frame_header_make(DT_MSG_COLL_REF, 0, 1, DT_COLL_REF_BYTES);
		dt_frame_header_pack(&h, frames);
		uint8_t *abort_at = ref + DT_COLL_REF_BYTES;
		size_t len = dt_reason_encode(dt_wire_error_from_status(DT_PEER), "worker:7 vanished",
					      abort_at + DT_FRAME_HEADER_SIZE, 128);
		h = dt_frame_header_make(DT_MSG_COLL_ABORT, 0, 1, len);
		dt_frame_header_pack(&h, abort_at);
		send_start(out, 1, DT_COLL_ALLREDUCE, DT_WIRE_F32, 100, "grads");
		DT_CHECK_OK(dt_sock_send_all(out, frames, (size_t)(abort_at + DT_FRAME_HEADER_SIZE + len - frames),
					     dt_deadline_in(5), "rank 1", &err), &err);
		break;
	}
	default: /* a message type that has no business on a ring */
		send_frame(out, DT_MSG_PS_PUSH, 1, data, 8);
	}
	pthread_join(th, NULL);
	dt_sock_close(out);
	dt_sock_close(in);
	DT_CHECK_CONTAINS(g.err[1].msg, want_msg);
	DT_CHECK_INT_EQ(g.st[1], want);
	DT_CHECK_CONTAINS(g.err[1].msg, "worker:0 at 127.0.0.1:");
	DT_CHECK_CONTAINS(g.err[1].msg, want_msg);
}

DT_TEST(dist_collective, a_reader_does_not_succeed_when_the_referencing_sender_gave_up)
{
	if (!kernel_allows_cma())
		DT_SKIP("this kernel forbids process_vm_readv: no link reads memory");
	bad_neighbour(5, DT_PEER, "worker:7 vanished");
}

DT_TEST(dist_collective, misbehaving_neighbour_fails_the_collective_cleanly)
{
	bad_neighbour(0, DT_PROTOCOL, "bad magic");
	bad_neighbour(1, DT_PROTOCOL, "coll_start first");
	bad_neighbour(2, DT_PROTOCOL, "another size");
	bad_neighbour(3, DT_PEER, "closed the connection");
	bad_neighbour(4, DT_PROTOCOL, "set up to carry bytes");
	bad_neighbour(6, DT_PROTOCOL, "ps_push");
}
