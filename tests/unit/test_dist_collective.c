/*
 * Tests of the collectives (src/distribute/collective.h), ranks as threads
 * over loopback sockets (the same code path as processes): every algorithm
 * against a plain sum, the same choice on every rank, broadcast, all-gather, barrier, the
 * COLL_START frame. Failures: test_dist_collective_fail.c; ranks as
 * processes on one host (same-host reads, shared memory, kill -9):
 * test_dist_collective_shm.c.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
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
#include "base/crc32c.h"
#include "distribute/collective.h"
#include "distribute/comm_internal.h"
#include "distribute/ring_wire.h"
#include "dt_test.h"
#include "net/bytes.h"
#include "net/congestion.h"
#include "net/auth.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "coll_test_util.h"

/* ---- all-reduce against a plain sum ---- */

struct sizes {
	size_t counts[16];
	int ncounts;
	int rounds;
};

static enum dt_status allreduce_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	const struct sizes *sz = g->arg;
	for (int k = 0; k < sz->ncounts; k++) {
		size_t count = sz->counts[k];
		float *buf = dt_xmallocarray(count + 1, sizeof(float));
		for (int round = 0; round < sz->rounds; round++) {
			for (size_t i = 0; i < count; i++)
				buf[i] = coll_value(rank, i, round);
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
					want += coll_value(q, i, round);
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
				ibuf[i] = coll_ivalue(rank, i, round);
			snprintf(name, sizeof(name), "fixed/%zu/%d", count, round);
			if ((st = dt_allreduce_sum_i64(comm, ibuf, count, name, dt_deadline_in(30), err))) {
				free(ibuf), free(buf);
				return st;
			}
			for (size_t i = 0; i < count; i++) {
				int64_t want = 0;
				for (int q = 0; q < g->n; q++)
					want += coll_ivalue(q, i, round);
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
	struct coll_group g;
	coll_group_init(&g, n);
	g.no_shm = no_shm;
	g.seg_bytes = seg_bytes;
	g.algorithm = alg;
	g.no_cma = cma < 0;
	g.cma_min_bytes = cma > 0 ? (size_t)cma : 0;
	g.fn = allreduce_rank;
	g.arg = (void *)(uintptr_t)sz;
	coll_group_run(&g);
	coll_group_expect_ok(&g);
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

/* Same-host links over TCP (shared memory off: with it the ring never
 * sends references): ranks in one process can always read each other, so
 * the ring sends every segment of 4 bytes or more by reference; the sums
 * must be exact, round after round (a rank that returned before its reader
 * finished and refilled its buffer would corrupt the next round's check). */
DT_TEST_TIMEOUT(dist_collective, allreduce_by_reference_matches_sum, 120)
{
	struct sizes sz = { { 0, 1, 3, 17, 1000, 4099, 100003 }, 7, 3 };
	int allowed = coll_kernel_allows_cma();
	for (int n = 2; n <= 5; n++) {
		int readers = run_allreduce_shm(n, 64, DT_COMM_ALG_RING, 4, 1, &sz);
		DT_CHECK_INT_EQ(readers, allowed ? n : 0);
		readers = run_allreduce_shm(n, 1024, DT_COMM_ALG_RING, 4, 1, &sz);
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

/* Recursive doubling of up to 64 KiB on shared memory sends from and adds
 * into the caller's buffer (coll_algo.c, doubling_in_place); over TCP it
 * goes through scratch. The same additions in the same order, so the same
 * bits, with values whose sums round (the plain-sum tests use values that
 * add exactly), on every rank and both paths; and sizes around the limit. */
#define ROUNDING_MAX 16385
static const size_t rounding_counts[] = { 1, 7, 1031, 16384, ROUNDING_MAX };
#define NROUNDING (sizeof(rounding_counts) / sizeof(rounding_counts[0]))

static float rounding_value(int rank, size_t i)
{
	return (float)((double)((i * 2654435761u + (size_t)rank * 40503u) % 100003u) / 7.0 - 7000.0) /
	       (float)(rank + 3);
}

static enum dt_status rounding_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	float(*out)[NROUNDING][ROUNDING_MAX] = g->arg;
	for (size_t k = 0; k < NROUNDING; k++) {
		float *buf = out[rank][k];
		for (size_t i = 0; i < rounding_counts[k]; i++)
			buf[i] = rounding_value(rank, i);
		enum dt_status st = dt_allreduce_sum_f32(comm, buf, rounding_counts[k], "rounding", dt_deadline_in(30), err);
		if (st)
			return st;
	}
	return DT_OK;
}

DT_TEST_TIMEOUT(dist_collective, doubling_in_place_on_shared_memory_keeps_the_bits, 120)
{
	static float out[2][COLL_MAXR][NROUNDING][ROUNDING_MAX];
	for (int n = 2; n <= 8; n++) {
		for (int no_shm = 0; no_shm <= 1; no_shm++) {
			struct coll_group g;
			coll_group_init(&g, n);
			g.no_shm = no_shm;
			g.algorithm = DT_COMM_ALG_DOUBLING;
			g.fn = rounding_rank;
			g.arg = out[no_shm];
			coll_group_run(&g);
			coll_group_expect_ok(&g);
		}
		for (size_t k = 0; k < NROUNDING; k++) {
			size_t bytes = rounding_counts[k] * sizeof(float);
			for (int r = 0; r < n; r++) {
				DT_CHECK(memcmp(out[0][r][k], out[1][0][k], bytes) == 0);
				DT_CHECK(memcmp(out[1][r][k], out[1][0][k], bytes) == 0);
			}
		}
		/* The values round: a plain left-to-right sum differs from the
		 * tree's in some elements from 3 ranks on, so the check above would
		 * see another order. */
		size_t differ = 0;
		for (size_t i = 0; i < ROUNDING_MAX; i++) {
			float plain = 0;
			for (int q = 0; q < n; q++)
				plain += rounding_value(q, i);
			differ += plain != out[0][0][NROUNDING - 1][i];
			DT_CHECK(fabsf(plain - out[0][0][NROUNDING - 1][i]) <= 1e-3f * (fabsf(plain) + 1));
		}
		if (n >= 3)
			DT_CHECK(differ > 0);
	}
}

/* The same over TCP (DTRAIN_COLLECTIVE_SHM=0's path, and between hosts). */
DT_TEST_TIMEOUT(dist_collective, every_algorithm_matches_sum_over_tcp_1_to_8_ranks, 240)
{
	struct sizes sz = { { 0, 1, 5, 17, 1009, 4099 }, 6, 1 };
	for (int n = 1; n <= 8; n++)
		for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++)
			run_allreduce_shm(n, 64, alg, -1, 1, &sz);
}

/* And with the links priced as another host's (the rendezvous's `tcp
 * remote`), whose waits yield the core before they sleep (ring.c). */
static enum dt_status remote_allreduce_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	comm->cost_kind = DT__COST_TCP_REMOTE;
	return allreduce_rank(g, rank, comm, err);
}

DT_TEST_TIMEOUT(dist_collective, every_algorithm_matches_sum_between_hosts_2_to_5_ranks, 240)
{
	struct sizes sz = { { 1, 17, 4099, 65537 }, 4, 2 };
	for (int n = 2; n <= 5; n++)
		for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++) {
			struct coll_group g;
			coll_group_init(&g, n);
			g.no_shm = 1;
			g.no_cma = 1;
			g.seg_bytes = 4096;
			g.algorithm = alg;
			g.fn = remote_allreduce_rank;
			g.arg = &sz;
			coll_group_run(&g);
			coll_group_expect_ok(&g);
		}
}

/* Shared memory with the default segments (256 KiB frames: a ring of 1 MiB
 * fills, the writer sleeps until the reader makes room), with same-host
 * reads agreed (and, every link being on shared memory, left unused:
 * coll_algo.c's reads_by_reference) and not agreed. */
DT_TEST_TIMEOUT(dist_collective, shared_memory_full_rings_and_large_sizes, 120)
{
	struct sizes sz = { { 3, 65537, 1000003 }, 3, 2 };
	for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++) {
		run_allreduce_shm(2, 0, alg, 0, 0, &sz);
		run_allreduce_shm(3, 0, alg, -1, 0, &sz);
	}
}

/* Small all-reduces on shared memory are parsed where they lie in the ring
 * (ring_recv.c), not copied out first: hundreds of rounds of frames whose
 * lengths are not multiples of 4 (names of 1-3 digits, 1001 elements) wrap
 * each 1 MiB ring several times, so some wrap cuts a header or an element,
 * which then goes through the stage. Every sum is checked. */
DT_TEST_TIMEOUT(dist_collective, shared_memory_frames_cut_by_the_ring_wrap, 120)
{
	struct sizes sz = { { 1001 }, 1, 400 };
	run_allreduce_shm(2, 0, DT_COMM_ALG_DOUBLING, 0, 0, &sz);
	sz.rounds = 150;
	run_allreduce_shm(3, 0, DT_COMM_ALG_DOUBLING, 0, 0, &sz);
}

/* Every rank of a comm picks the same algorithm for every size (a pure
 * function of what all know), and the model's picks are the expected
 * families: recursive doubling for a few KB, the ring for tens of MB. */
static const size_t choice_sizes[] = { 0, 4, 4096, 65536, 262144, 1u << 20, 16u << 20, 64u << 20 };
#define NCHOICES (sizeof(choice_sizes) / sizeof(choice_sizes[0]))
static int choices[COLL_MAXR][NCHOICES][2];

static enum dt_status choice_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	(void)g;
	(void)err;
	for (size_t k = 0; k < NCHOICES; k++) {
		choices[rank][k][0] = (int)dt_comm_choose(comm, DT_COMM_ALLREDUCE, choice_sizes[k]);
		choices[rank][k][1] = (int)dt_comm_choose(comm, DT_COMM_BROADCAST, choice_sizes[k]);
	}
	return DT_OK;
}

/* 64 MB goes by a bandwidth-optimal algorithm: over TCP the ring; with
 * every link on shared memory (no references) and a power of two of ranks
 * halving-doubling, which moves the ring's bytes in fewer steps (measured:
 * COLLECTIVES.md). */
DT_TEST(dist_collective, every_rank_chooses_the_same_algorithm)
{
	for (int no_shm = 0; no_shm <= 1; no_shm++)
		for (int n = 2; n <= 8; n++) {
			struct coll_group g;
			coll_group_init(&g, n);
			g.no_shm = no_shm;
			g.fn = choice_rank;
			coll_group_run(&g);
			coll_group_expect_ok(&g);
			for (int r = 1; r < n; r++)
				DT_CHECK(memcmp(choices[r], choices[0], sizeof(choices[0])) == 0);
			DT_CHECK_INT_EQ(choices[0][2][0], DT_COMM_ALG_DOUBLING); /* 4 KB */
			const int pow2 = (n & (n - 1)) == 0;
			if (no_shm || !pow2) /* ranks beyond a power of two fold in: two more full passes */
				DT_CHECK_INT_EQ(choices[0][NCHOICES - 1][0], DT_COMM_ALG_RING);
			else
				DT_CHECK_INT_EQ(choices[0][NCHOICES - 1][0], DT_COMM_ALG_HALVING);
			DT_CHECK_INT_EQ(choices[0][2][1], DT_COMM_ALG_DOUBLING); /* a 4 KB broadcast: binomial tree */
		}
}

/* A yield on shared memory counts as lost to other jobs past a peer's turn:
 * 250 us where every rank here has a core, else growing with the collective
 * (250 ps a byte within 250 us .. 1 ms), set by each call from its own size
 * (comm_shm.c, dt__shm_set_slow_yield). */
DT_TEST(dist_collective, a_slow_yield_is_weighed_by_ranks_per_core_and_size)
{
	DT_CHECK_INT_EQ(dt__shm_slow_yield_ns((size_t)16 << 20, 2, 2), 250000); /* a core each */
	DT_CHECK_INT_EQ(dt__shm_slow_yield_ns((size_t)16 << 20, 4, 8), 250000);
	DT_CHECK_INT_EQ(dt__shm_slow_yield_ns(16, 4, 2), 250000);                 /* sharing: small */
	DT_CHECK_INT_EQ(dt__shm_slow_yield_ns((size_t)2 << 20, 4, 2), (2 << 20) / 4);
	DT_CHECK_INT_EQ(dt__shm_slow_yield_ns((size_t)16 << 20, 3, 2), 1000000);  /* capped */
	DT_CHECK_INT_EQ(dt__shm_slow_yield_ns((size_t)16 << 20, 2, 1), 1000000);
}

static int64_t slow_yield[COLL_MAXR][3];
static int ranks_here[COLL_MAXR], cpus_seen[COLL_MAXR];

static enum dt_status slow_yield_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	(void)g;
	const size_t counts[3] = { 4, (size_t)512 << 10, (size_t)4 << 20 }; /* 16 B, 2 MiB, 16 MiB */
	for (int k = 0; k < 3; k++) {
		float *buf = dt_xcalloc(counts[k], sizeof(float));
		enum dt_status st = dt_allreduce_sum_f32(comm, buf, counts[k], "slow-yield", dt_deadline_in(30), err);
		free(buf);
		if (st)
			return st;
		slow_yield[rank][k] = comm->shm_slow_yield_ns;
	}
	ranks_here[rank] = comm->shm_ranks_here;
	cpus_seen[rank] = comm->cpus;
	return DT_OK;
}

/* Two ranks (threads, every link on shared memory) with the process's cores,
 * then with one core: the comm counts both, and each call sets the threshold. */
DT_TEST_TIMEOUT(dist_collective, each_collective_sets_its_slow_yield_from_the_ranks_on_a_core, 60)
{
	cpu_set_t all, one;
	DT_CHECK(sched_getaffinity(0, sizeof(all), &all) == 0);
	CPU_ZERO(&one);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &all)) {
			CPU_SET(cpu, &one);
			break;
		}
	for (int pinned = 0; pinned <= 1; pinned++) {
		if (pinned)
			DT_CHECK(sched_setaffinity(0, sizeof(one), &one) == 0); /* the ranks' threads inherit it */
		const int cpus = pinned ? 1 : CPU_COUNT(&all);
		struct coll_group g;
		coll_group_init(&g, 2);
		g.fn = slow_yield_rank;
		coll_group_run(&g);
		coll_group_expect_ok(&g);
		for (int r = 0; r < 2; r++) {
			DT_CHECK_INT_EQ(ranks_here[r], 2);
			DT_CHECK_INT_EQ(cpus_seen[r], cpus);
			DT_CHECK_INT_EQ(slow_yield[r][0], 250000);
			DT_CHECK_INT_EQ(slow_yield[r][1], cpus >= 2 ? 250000 : (2 << 20) / 4);
			DT_CHECK_INT_EQ(slow_yield[r][2], cpus >= 2 ? 250000 : 1000000);
		}
	}
	DT_CHECK(sched_setaffinity(0, sizeof(all), &all) == 0);
}

/* The cost model's link kind is agreed at the rendezvous: shared memory, or
 * TCP over loopback (these threads' links); between hosts (addresses of
 * their own: the netns suite) TCP remote, whose larger α keeps recursive
 * doubling longer — 128 KB at 2 ranks goes by halving-doubling over
 * loopback and by doubling between hosts — and every rank still chooses
 * alike. */
static int kinds[COLL_MAXR], remote_choice[COLL_MAXR][2];

static enum dt_status kind_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	(void)g;
	(void)err;
	kinds[rank] = (int)comm->cost_kind;
	remote_choice[rank][0] = (int)dt_comm_choose(comm, DT_COMM_ALLREDUCE, 128u << 10);
	enum dt__cost_kind was = comm->cost_kind;
	comm->cost_kind = DT__COST_TCP_REMOTE;
	dt__comm_costs_compiled(comm);
	remote_choice[rank][1] = (int)dt_comm_choose(comm, DT_COMM_ALLREDUCE, 128u << 10);
	comm->cost_kind = was;
	dt__comm_costs_compiled(comm);
	return DT_OK;
}

DT_TEST(dist_collective, the_link_kind_is_agreed_and_prices_the_choice)
{
	for (int no_shm = 0; no_shm <= 1; no_shm++) {
		struct coll_group g;
		coll_group_init(&g, 2);
		g.no_shm = no_shm;
		g.fn = kind_rank;
		coll_group_run(&g);
		coll_group_expect_ok(&g);
		for (int r = 0; r < 2; r++)
			DT_CHECK_INT_EQ(kinds[r], no_shm ? DT__COST_TCP_LOOPBACK : DT__COST_SHM);
		if (no_shm) {
			DT_CHECK_INT_EQ(remote_choice[0][0], DT_COMM_ALG_HALVING);
			DT_CHECK_INT_EQ(remote_choice[0][1], DT_COMM_ALG_DOUBLING);
			DT_CHECK(memcmp(remote_choice[1], remote_choice[0], sizeof(remote_choice[0])) == 0);
		}
	}
}

/* Given link costs (the config's cost_alpha_us and cost_beta_ps) are agreed
 * at the rendezvous — the mean over the ranks that give them — and the
 * choice follows the model's formulas (COLLECTIVES.md), 4 ranks over TCP,
 * γ = 100 ps:
 *   doubling 2α + 2mβ + 4mγ, halving-doubling 4α + 1.5mβ + 0.75mγ, ring
 *   6α + 1.5mβ + 0.75mγ (never below halving-doubling at 4 ranks).
 * α = 20 µs, β = 8000 ps (1 Gbit/s): 4 KB doubling 107.1 µs against 129.5
 * (doubling); 16 KB 308.7 against 277.8 (halving-doubling); 64 KB too.
 * α = 20 µs, β = 3000 ps (the compiled remote β, 2.7 Gbit/s): 16 KB 144.8
 * against 154.9 (doubling); 64 KB 459.3 against 380.0 (halving-doubling).
 * So β alone moves 16 KB from one to the other, as on the emulated hosts. */
static struct {
	double alpha_ps, beta_ps;
	size_t halving_from; /* the timed crossover, 0 unless measured */
	int from, choice[3];
	int choice_timed[3]; /* with a timed crossover at timed_from (below) */
	int choice_no_crossover; /* 64 KB, none found up to 64 KB */
} costs_seen[COLL_MAXR];
static size_t timed_from;

static enum dt_status costs_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	(void)g;
	(void)err;
	static const size_t sizes[3] = { 4u << 10, 16u << 10, 64u << 10 };
	costs_seen[rank].alpha_ps = comm->alpha_ps;
	costs_seen[rank].beta_ps = comm->beta_ps;
	costs_seen[rank].from = (int)comm->costs_from;
	costs_seen[rank].halving_from = comm->halving_from_bytes;
	for (int k = 0; k < 3; k++)
		costs_seen[rank].choice[k] = (int)dt_comm_choose(comm, DT_COMM_ALLREDUCE, sizes[k]);
	/* a timed crossover overrides the model between doubling and
	 * halving-doubling: below it doubling, from it never doubling */
	const size_t was_d = comm->doubling_below_bytes, was_h = comm->halving_from_bytes;
	comm->doubling_below_bytes = comm->halving_from_bytes = timed_from;
	for (int k = 0; k < 3; k++)
		costs_seen[rank].choice_timed[k] = (int)dt_comm_choose(comm, DT_COMM_ALLREDUCE, sizes[k]);
	/* no crossover found up to 64 KB: doubling there, whatever the model */
	comm->doubling_below_bytes = (64u << 10) + 1;
	comm->halving_from_bytes = 0;
	costs_seen[rank].choice_no_crossover = (int)dt_comm_choose(comm, DT_COMM_ALLREDUCE, sizes[2]);
	comm->doubling_below_bytes = was_d;
	comm->halving_from_bytes = was_h;
	return DT_OK;
}

static void run_costs(int n, const double *alpha_us, const double *beta_ps, const int *measure)
{
	struct coll_group g;
	coll_group_init(&g, n);
	g.no_shm = g.no_cma = 1; /* TCP links, priced by the given costs alone */
	for (int r = 0; r < n; r++) {
		g.cost_alpha_us[r] = alpha_us ? alpha_us[r] : 0;
		g.cost_beta_ps[r] = beta_ps ? beta_ps[r] : 0;
		g.measure_costs[r] = measure ? measure[r] : 0;
	}
	g.fn = costs_rank;
	memset(costs_seen, 0, sizeof(costs_seen));
	coll_group_run(&g);
	coll_group_expect_ok(&g);
	for (int r = 1; r < n; r++)
		DT_CHECK(memcmp(&costs_seen[r], &costs_seen[0], sizeof(costs_seen[0])) == 0);
}

DT_TEST(dist_collective, given_link_costs_are_agreed_and_choose_as_the_model_predicts)
{
	const double a20[4] = { 20, 20, 20, 20 }, b8000[4] = { 8000, 8000, 8000, 8000 }, b3000[4] = { 3000, 3000, 3000, 3000 };
	run_costs(4, a20, b8000, NULL);
	DT_CHECK_INT_EQ(costs_seen[0].from, DT__COSTS_GIVEN);
	DT_CHECK(costs_seen[0].alpha_ps == 20e6 && costs_seen[0].beta_ps == 8000);
	DT_CHECK_INT_EQ(costs_seen[0].choice[0], DT_COMM_ALG_DOUBLING);
	DT_CHECK_INT_EQ(costs_seen[0].choice[1], DT_COMM_ALG_HALVING);
	DT_CHECK_INT_EQ(costs_seen[0].choice[2], DT_COMM_ALG_HALVING);
	DT_CHECK_INT_EQ(costs_seen[0].halving_from, 0); /* given costs: nothing timed */
	timed_from = 32u << 10; /* timed: doubling to 16 KB where the model says halving-doubling */
	run_costs(4, a20, b8000, NULL);
	DT_CHECK_INT_EQ(costs_seen[0].choice_timed[0], DT_COMM_ALG_DOUBLING);
	DT_CHECK_INT_EQ(costs_seen[0].choice_timed[1], DT_COMM_ALG_DOUBLING);
	DT_CHECK_INT_EQ(costs_seen[0].choice_timed[2], DT_COMM_ALG_HALVING);
	DT_CHECK_INT_EQ(costs_seen[0].choice[2], DT_COMM_ALG_HALVING); /* the model's 64 KB ... */
	DT_CHECK_INT_EQ(costs_seen[0].choice_no_crossover, DT_COMM_ALG_DOUBLING); /* ... overruled */
	timed_from = 8u << 10; /* timed: halving-doubling from 8 KB where the model says doubling at 16 KB */
	run_costs(4, a20, b3000, NULL);
	DT_CHECK(costs_seen[0].alpha_ps == 20e6 && costs_seen[0].beta_ps == 3000);
	DT_CHECK_INT_EQ(costs_seen[0].choice[0], DT_COMM_ALG_DOUBLING);
	DT_CHECK_INT_EQ(costs_seen[0].choice[1], DT_COMM_ALG_DOUBLING);
	DT_CHECK_INT_EQ(costs_seen[0].choice[2], DT_COMM_ALG_HALVING);
	DT_CHECK_INT_EQ(costs_seen[0].choice_timed[0], DT_COMM_ALG_DOUBLING);
	DT_CHECK_INT_EQ(costs_seen[0].choice_timed[1], DT_COMM_ALG_HALVING);
	DT_CHECK_INT_EQ(costs_seen[0].choice_timed[2], DT_COMM_ALG_HALVING);
	timed_from = 0;
	/* Two of three ranks give costs, differently; the third asks to measure:
	 * the given win, their mean on every rank, nothing measured. */
	const double a[3] = { 20, 40, 0 }, b[3] = { 8000, 4000, 0 };
	const int m[3] = { 0, 0, 1 };
	run_costs(3, a, b, m);
	DT_CHECK_INT_EQ(costs_seen[0].from, DT__COSTS_GIVEN);
	DT_CHECK(costs_seen[0].alpha_ps == 30e6 && costs_seen[0].beta_ps == 6000);
}

/* Measured link costs (asked for by one rank: the others measure too, as
 * every rank does when a link is to another host) come out the same bits on
 * every rank, within the fit's floors, and nothing is measured by default on
 * one host (the compiled loopback row). */
DT_TEST(dist_collective, measured_link_costs_are_the_same_on_every_rank)
{
	for (int n = 2; n <= 3; n++) {
		int m[3] = { 0, 0, 0 };
		m[n - 1] = 1;
		run_costs(n, NULL, NULL, m);
		DT_CHECK_INT_EQ(costs_seen[0].from, DT__COSTS_MEASURED);
		/* the crossover, when one was found, is a timed size (and, like
		 * α and β, the same on every rank: run_costs compares them) */
		const size_t x = costs_seen[0].halving_from;
		DT_CHECK(x == 0 || x == 4096 || x == 8192 || x == 16384 || x == 32768 || x == 65536 || x == 131072 ||
			 x == 262144);
		DT_CHECK(isfinite(costs_seen[0].alpha_ps) && costs_seen[0].alpha_ps >= 1e6);
		DT_CHECK(isfinite(costs_seen[0].beta_ps) && costs_seen[0].beta_ps >= 50);
	}
	run_costs(2, NULL, NULL, NULL);
	DT_CHECK_INT_EQ(costs_seen[0].from, DT__COSTS_COMPILED);
	DT_CHECK(costs_seen[0].alpha_ps == 20e6 && costs_seen[0].beta_ps == 400);
}

/* DTRAIN_COLLECTIVE_COSTS gives them too; one that does not parse is
 * DT_CONFIG naming the variable, before anything is connected. */
DT_TEST(dist_collective, link_costs_from_the_environment)
{
	DT_CHECK(setenv("DTRAIN_COLLECTIVE_COSTS", "50,8000", 1) == 0);
	run_costs(2, NULL, NULL, NULL);
	DT_CHECK_INT_EQ(costs_seen[0].from, DT__COSTS_GIVEN);
	DT_CHECK(costs_seen[0].alpha_ps == 50e6 && costs_seen[0].beta_ps == 8000);
	DT_CHECK(setenv("DTRAIN_COLLECTIVE_COSTS", "fast", 1) == 0);
	struct dt_comm_peer peer = { "127.0.0.1:1", "worker", 0 };
	struct dt_comm_config cfg = { .nranks = 1, .rank = 0, .peers = &peer };
	struct dt_comm *comm = NULL;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_comm_new(&cfg, dt_deadline_in(5), &comm, &err), DT_CONFIG);
	DT_CHECK(comm == NULL);
	DT_CHECK_CONTAINS(err.msg, "DTRAIN_COLLECTIVE_COSTS='fast'");
	DT_CHECK(unsetenv("DTRAIN_COLLECTIVE_COSTS") == 0);
}

/* ---- the TCP congestion control of the links a rank dials ---- */

/* Each rank: the name its comm chose is the one on every connection it
 * dialled (the host's default where it chose ""), and an all-reduce runs. */
static enum dt_status congestion_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	const char *want = g->arg;
	DT_CHECK_STR_EQ(dt_comm_tcp_congestion(comm), want);
	char host[DT_TCP_CC_MAX];
	DT_CHECK_INT_EQ(dt_tcp_cc_default(host), 0);
	int dialled = 0;
	for (int q = 0; q < comm->n; q++) {
		if (comm->out[q].fd < 0)
			continue;
		char name[DT_TCP_CC_MAX] = "";
		socklen_t len = sizeof(name) - 1;
		DT_CHECK(getsockopt(comm->out[q].fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0);
		DT_CHECK_STR_EQ(name, *want ? want : host);
		dialled++;
	}
	DT_CHECK(dialled > 0);
	float x[1000];
	for (int i = 0; i < 1000; i++)
		x[i] = (float)(rank + i);
	enum dt_status st = dt_allreduce_sum_f32(comm, x, 1000, "congestion", dt_deadline_in(10), err);
	DT_CHECK(st || x[999] == (float)(2 * 999 + 1));
	return st;
}

static void run_congestion(const char *config, const char *want)
{
	struct coll_group g;
	coll_group_init(&g, 2);
	g.no_shm = 1;
	g.tcp_congestion = config;
	g.fn = congestion_rank;
	g.arg = (void *)(uintptr_t)want;
	coll_group_run(&g);
	coll_group_expect_ok(&g);
}

DT_TEST(dist_collective, a_named_tcp_congestion_control_is_set_before_dialling)
{
	run_congestion("reno", "reno"); /* reno may always be set */
	DT_CHECK(setenv("DTRAIN_TCP_CONGESTION", "reno", 1) == 0);
	run_congestion(NULL, "reno");
	run_congestion("host", ""); /* the config wins over the environment */
	DT_CHECK(unsetenv("DTRAIN_TCP_CONGESTION") == 0);
}

/* By default the host's congestion control, unless it is bbr: then cubic
 * where this process may set it, else reno (docs/COLLECTIVES.md, "TCP
 * congestion control"). Which branch runs depends on the host's sysctl;
 * each checks what it must. */
DT_TEST(dist_collective, the_hosts_tcp_congestion_control_is_kept_unless_it_is_bbr)
{
	char host[DT_TCP_CC_MAX];
	DT_CHECK_INT_EQ(dt_tcp_cc_default(host), 0);
	const char *want = strncmp(host, "bbr", 3) != 0 ? "" : dt_tcp_cc_usable("cubic") == 0 ? "cubic" : "reno";
	run_congestion(NULL, want);
	run_congestion("", want);
	run_congestion("host", "");
}

DT_TEST(dist_collective, a_tcp_congestion_control_that_cannot_be_set_fails_the_comm_naming_it)
{
	struct dt_comm_peer peer = { "127.0.0.1:1", "worker", 0 };
	struct dt_comm_config cfg = { .nranks = 1, .rank = 0, .peers = &peer, .tcp_congestion = "no-such-cc" };
	struct dt_comm *comm = NULL;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_comm_new(&cfg, dt_deadline_in(5), &comm, &err), DT_CONFIG);
	DT_CHECK(comm == NULL);
	DT_CHECK_CONTAINS(err.msg, "TCP congestion control 'no-such-cc' (the comm config's tcp_congestion) cannot be set");
	DT_CHECK_CONTAINS(err.msg, "this kernel has ");
	DT_CHECK_CONTAINS(err.msg, "'host' keeps the host's default");
	cfg.tcp_congestion = NULL;
	DT_CHECK(setenv("DTRAIN_TCP_CONGESTION", "a-name-longer-than-sixteen", 1) == 0);
	DT_CHECK_INT_EQ(dt_comm_new(&cfg, dt_deadline_in(5), &comm, &err), DT_CONFIG);
	DT_CHECK(unsetenv("DTRAIN_TCP_CONGESTION") == 0);
	DT_CHECK(comm == NULL);
	DT_CHECK_CONTAINS(err.msg, "'a-name-longer-than-sixteen' (DTRAIN_TCP_CONGESTION) cannot be set");
}

DT_TEST(dist_collective, single_rank_is_a_no_op)
{
	struct coll_group g;
	coll_group_init(&g, 1);
	struct sizes sz = { { 0, 5 }, 2, 1 };
	g.fn = allreduce_rank;
	g.arg = &sz;
	coll_group_run(&g);
	coll_group_expect_ok(&g);
}

/* ---- broadcast ---- */

static uint8_t bvalue(int root, size_t i) { return (uint8_t)(i * 31u + (size_t)root * 7u + 1u); }

static enum dt_status broadcast_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
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
		struct coll_group g;
		coll_group_init(&g, n);
		g.seg_bytes = 4096;
		g.fn = broadcast_rank;
		coll_group_run(&g);
		coll_group_expect_ok(&g);
	}
}

/* ---- all-gather ---- */

static uint8_t gather_byte(int rank, size_t i, int round)
{
	return (uint8_t)(rank * 37 + (int)(i % 251) * 3 + round * 101 + (int)(i / 251));
}

/* Each rank fills its own block and garbage elsewhere; afterwards every
 * block is its owner's, byte for byte, round after round (a rank that
 * returned before its reader had read its block would corrupt the next). */
static enum dt_status allgather_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	const struct sizes *sz = g->arg;
	for (int k = 0; k < sz->ncounts; k++) {
		const size_t block = sz->counts[k];
		uint8_t *buf = dt_xmalloc(block * (size_t)g->n + 1);
		for (int round = 0; round < sz->rounds; round++) {
			memset(buf, 0xa5, block * (size_t)g->n);
			for (size_t i = 0; i < block; i++)
				buf[(size_t)rank * block + i] = gather_byte(rank, i, round);
			char name[64];
			snprintf(name, sizeof(name), "raw/%zu/%d", block, round);
			enum dt_status st = dt_allgather(comm, buf, block, name, dt_deadline_in(30), err);
			for (int q = 0; q < g->n && !st; q++)
				for (size_t i = 0; i < block && !st; i++)
					if (buf[(size_t)q * block + i] != gather_byte(q, i, round))
						st = dt_err_set(err, DT_INTERNAL, "rank %d block %zu round %d: byte %zu of rank %d's "
								"block is 0x%02x, expected 0x%02x", rank, block, round, i, q,
								buf[(size_t)q * block + i], gather_byte(q, i, round));
			if (st) {
				free(buf);
				return st;
			}
		}
		free(buf);
	}
	return DT_OK;
}

/* 1 to 5 ranks; shared memory, TCP, and TCP with every segment read from
 * the neighbour's memory (cma 4); 64-byte segments (many per block) and
 * the default ones. */
DT_TEST_TIMEOUT(dist_collective, allgather_gives_every_rank_every_block, 120)
{
	struct sizes sz = { { 0, 1, 3, 17, 1000, 100003 }, 6, 2 };
	for (int n = 1; n <= 5; n++)
		for (int link = 0; link < 3; link++)
			for (int seg = 0; seg < 2; seg++) {
				struct coll_group g;
				coll_group_init(&g, n);
				g.no_shm = link > 0;
				g.seg_bytes = seg ? 0 : 64;
				g.cma_min_bytes = link == 2 ? 4 : 0;
				g.no_cma = link == 1;
				g.fn = allgather_rank;
				g.arg = &sz;
				coll_group_run(&g);
				coll_group_expect_ok(&g);
			}
}

/* ---- barrier ---- */

static enum dt_status barrier_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
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
		struct coll_group g;
		coll_group_init(&g, n);
		g.fn = barrier_rank;
		coll_group_run(&g);
		coll_group_expect_ok(&g);
	}
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

	/* headers: good, bad crc, non-collective type, flags, COLL_DATA's own header in 32 bytes */
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	struct dt_frame_header h = dt_frame_header_make(DT_MSG_COLL_REF, 0, 9, DT_COLL_REF_BYTES), out;
	dt_frame_header_pack(&h, hdr);
	DT_CHECK_OK(dt_coll_header_parse(hdr, &out, &err), &err);
	DT_CHECK_INT_EQ(out.type, DT_MSG_COLL_REF);
	DT_CHECK_INT_EQ(out.request_id, 9);
	DT_CHECK_INT_EQ(out.length, DT_COLL_REF_BYTES);
	hdr[20] ^= 1;
	DT_CHECK_INT_EQ(dt_coll_header_parse(hdr, &out, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "crc");
	h = dt_frame_header_make(DT_MSG_COLL_DATA, 0, 9, 4096);
	dt_frame_header_pack(&h, hdr);
	DT_CHECK(!dt_coll_is_data_head(hdr));
	DT_CHECK_INT_EQ(dt_coll_header_parse(hdr, &out, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "16-byte data header");
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

/* COLL_DATA's 16-byte header: its bytes as ring_wire.h lays them out, the
 * frame header it stands for (the seq's high half from the receiver's own
 * call), and each way it can be wrong. */
DT_TEST(dist_collective, data_header_layout_and_hostile_input)
{
	struct dt_err err = DT_ERR_INIT;
	uint8_t b[DT_COLL_DATA_HEAD_SIZE];
	const uint64_t seq = 0x0000000500000007ull;
	dt_coll_data_head_pack(seq, 4096, b);
	const uint8_t want[12] = { 0x8A, 'd', 0, 0, 7, 0, 0, 0, 0x00, 0x10, 0, 0 };
	DT_CHECK(memcmp(b, want, sizeof(want)) == 0);
	DT_CHECK_INT_EQ(dt_get_u32le(b + 12), dt_crc32c(b, 12));
	DT_CHECK(dt_coll_is_data_head(b));

	struct dt_frame_header h;
	DT_CHECK_OK(dt_coll_data_head_parse(b, seq, &h, &err), &err);
	DT_CHECK_INT_EQ(h.type, DT_MSG_COLL_DATA);
	DT_CHECK_INT_EQ(h.flags, 0);
	DT_CHECK_INT_EQ(h.version, DT_PROTOCOL_VERSION);
	DT_CHECK(h.request_id == seq);
	DT_CHECK_INT_EQ(h.length, 4096);
	/* a call whose low 32 bits differ: the request id shows the sender's */
	DT_CHECK_OK(dt_coll_data_head_parse(b, 0x0000000500000008ull, &h, &err), &err);
	DT_CHECK(h.request_id == seq);
	/* the largest length the header holds */
	dt_coll_data_head_pack(seq, UINT32_MAX, b);
	DT_CHECK_OK(dt_coll_data_head_parse(b, seq, &h, &err), &err);
	DT_CHECK(h.length == UINT32_MAX);

	/* every header byte flipped is caught: by the magic, the zero bytes or the CRC */
	for (int i = 0; i < (int)DT_COLL_DATA_HEAD_SIZE; i++) {
		dt_coll_data_head_pack(seq, 4096, b);
		b[i] ^= 0x10;
		DT_CHECK_INT_EQ(dt_coll_data_head_parse(b, seq, &h, &err), DT_PROTOCOL);
		DT_CHECK_CONTAINS(err.msg, i < 2 ? "magic" : "crc");
	}
	/* nonzero reserved bytes with a CRC that matches them */
	dt_coll_data_head_pack(seq, 4096, b);
	b[3] = 1;
	dt_put_u32le(b + 12, dt_crc32c(b, 12));
	DT_CHECK_INT_EQ(dt_coll_data_head_parse(b, seq, &h, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "must be zero");
}
