/*
 * The collectives between processes on one host: neighbours reading each
 * other's memory (process_vm_readv), shared-memory links for every
 * algorithm, and kill -9 or SIGSTOP of either side of a shared-memory link
 * leaving nothing mapped or in /dev/shm.
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
#include "coll_test_util.h"

static enum dt_status three_rounds(struct dt_comm *comm, int rank, struct dt_err *err)
{
	if (coll_kernel_allows_cma() && !dt_comm_reads_left_memory(comm))
		return dt_err_set(err, DT_INTERNAL, "rank %d reads its left neighbour over TCP, though the kernel allows "
						    "process_vm_readv", rank);
	size_t count = 300007;
	float *buf = dt_xmallocarray(count, sizeof(float));
	enum dt_status st = DT_OK;
	for (int round = 0; round < 3 && !st; round++) {
		for (size_t i = 0; i < count; i++)
			buf[i] = coll_value(rank, i, round);
		st = dt_allreduce_sum_f32(comm, buf, count, "grads", dt_deadline_in(20), err);
		for (size_t i = 0; !st && i < count; i++) {
			float want = coll_value(0, i, round) + coll_value(1, i, round) + coll_value(2, i, round);
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
	struct coll_procs p;
	coll_procs_start(&p, 3, three_rounds);
	for (int i = 0; i < 3; i++) {
		int code = coll_proc_wait(&p, i, 40);
		if (code != 0)
			dt_test_fail(__FILE__, __LINE__, "rank %d exited %d: %s", i, code, coll_proc_message(i));
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
			buf[i] = coll_value(rank, i, (int)k);
			ibuf[i] = coll_ivalue(rank, i, (int)k);
		}
		st = dt_allreduce_sum_f32(comm, buf, count, "shm/f32", dt_deadline_in(30), err);
		if (!st)
			st = dt_allreduce_sum_i64(comm, ibuf, count, "shm/i64", dt_deadline_in(30), err);
		for (size_t i = 0; !st && i < count; i++) {
			float want = 0;
			int64_t iwant = 0;
			for (int q = 0; q < n; q++) {
				want += coll_value(q, i, (int)k);
				iwant += coll_ivalue(q, i, (int)k);
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
			struct coll_procs p;
			coll_procs_start_with(&p, n, shm_sums, alg, alg == DT_COMM_ALG_HALVING);
			for (int i = 0; i < n; i++) {
				int code = coll_proc_wait(&p, i, 60);
				if (code != 0)
					dt_test_fail(__FILE__, __LINE__, "%d ranks, algorithm %d: rank %d exited %d: %s", n, alg, i,
						     code, coll_proc_message(i));
			}
		}
}

static enum dt_status shm_until_failure(struct dt_comm *comm, int rank, struct dt_err *err)
{
	if (dt_comm_shared_memory_links(comm) != 1)
		return dt_err_set(err, DT_INTERNAL, "rank %d: %d links on shared memory, expected 1", rank,
				  dt_comm_shared_memory_links(comm));
	return coll_until_failure_small(comm, rank, err);
}

static enum dt_status shm_until_failure_large(struct dt_comm *comm, int rank, struct dt_err *err)
{
	if (dt_comm_shared_memory_links(comm) != 1)
		return dt_err_set(err, DT_INTERNAL, "rank %d: no shared-memory link", rank);
	return coll_until_failure(comm, rank, err);
}

/* kill -9 of either side of a shared-memory link mid-collective: the other
 * fails within the deadline naming it (coll_fault_test), unmaps everything
 * (the children check /proc/self/maps after dt_comm_free), and nothing is
 * left in /dev/shm (the regions are memfds: they never had a name). SIGSTOP:
 * the deadline names it. */
DT_TEST_TIMEOUT(dist_collective, shared_memory_peer_killed_or_stopped_leaves_nothing, 180)
{
	int before = coll_dev_shm_entries();
	DT_CHECK_INT_EQ(before, 0);
	for (int victim = 0; victim < 2; victim++) {
		coll_fault_test(SIGKILL, 2, victim, shm_until_failure, 0, victim);
		coll_fault_test(SIGKILL, 2, victim, shm_until_failure_large, 0, 0);
	}
	coll_fault_test(SIGSTOP, 2, 1, shm_until_failure, DT_COMM_ALG_RING, 1);
	coll_fault_test(SIGSTOP, 2, 0, shm_until_failure_large, 0, 0);
	DT_CHECK_INT_EQ(coll_dev_shm_entries(), before);
	DT_CHECK(!coll_maps_a_region());
}

/* A rank that leaves (frees its comm) in the middle: the others fail naming
 * it, and every thread's comm, freed on that failure path, unmapped its
 * regions. */
DT_TEST(dist_collective, shared_memory_regions_are_unmapped_on_failure)
{
	struct coll_group g;
	coll_group_init(&g, 4);
	g.fn = coll_leaving_rank;
	coll_group_run(&g);
	for (int i = 0; i < 4; i++)
		if (i != 1)
			DT_CHECK_CONTAINS(g.err[i].msg, "worker:1 at 127.0.0.1:");
	DT_CHECK_INT_EQ(g.shm_links[0], 3);
	DT_CHECK(!coll_maps_a_region());
}
