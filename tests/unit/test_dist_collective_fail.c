/*
 * The collectives' failures (src/distribute/collective.h): mismatched calls,
 * ranks absent, late or leaving (threads), ranks SIGKILLed or SIGSTOPped in
 * the middle of each algorithm (processes), and a misbehaving neighbour
 * speaking the wire by hand.
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
#include "distribute/comm_internal.h"
#include "distribute/ring_wire.h"
#include "dt_test.h"
#include "net/bytes.h"
#include "net/auth.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "coll_test_util.h"

/* ---- mismatches and missing ranks ---- */

static enum dt_status mismatch_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
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
		struct coll_group g;
		coll_group_init(&g, n);
		g.fn = mismatch_rank;
		coll_group_run(&g);
		for (int i = 0; i < n; i++) {
			DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
			DT_CHECK_CONTAINS(g.err[i].msg, "collective mismatch");
			DT_CHECK_CONTAINS(g.err[i].msg, "'grads/other'");
			DT_CHECK_CONTAINS(g.err[i].msg, "'grads/mine'");
		}
	}
}

/* Three matching calls, then the last rank changes one field (g->arg: 0 the
 * name, 1 the count, 2 the element type) while the others repeat theirs. A
 * repeated call leaves its COLL_START out on links that carried the same
 * call's START (ring.c, start_again): the rank that gets only a DATA frame
 * must still match it against its own call, from the last START there
 * (which of the two ranks finds the mismatch first is a race; the fake
 * neighbour's case 1 below checks the START-less side alone). */
static enum dt_status repeat_then_change_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	float buf[11];
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 10; i++)
			buf[i] = coll_value(rank, (size_t)i, round);
		enum dt_status st = dt_allreduce_sum_f32(comm, buf, 10, "grads/mine", dt_deadline_in(10), err);
		if (st)
			return st;
		for (int i = 0; i < 10; i++) {
			float want = 0;
			for (int q = 0; q < g->n; q++)
				want += coll_value(q, (size_t)i, round);
			if (buf[i] != want)
				return dt_err_set(err, DT_INTERNAL, "rank %d round %d: [%d] = %g, want %g", rank, round, i,
						  (double)buf[i], (double)want);
		}
	}
	int change = (int)(intptr_t)g->arg;
	if (rank != g->n - 1 || change == 1)
		return dt_allreduce_sum_f32(comm, buf, rank == g->n - 1 ? 11 : 10, "grads/mine", dt_deadline_in(10), err);
	if (change == 0)
		return dt_allreduce_sum_f32(comm, buf, 10, "grads/other", dt_deadline_in(10), err);
	int64_t ibuf[10] = { 0 };
	return dt_allreduce_sum_i64(comm, ibuf, 10, "grads/mine", dt_deadline_in(10), err);
}

DT_TEST(dist_collective, a_repeated_call_without_its_start_still_matches)
{
	static const char *const theirs[3] = { "allreduce 'grads/other' (#4, 10 float32)",
					       "allreduce 'grads/mine' (#4, 11 float32)",
					       "allreduce 'grads/mine' (#4, 10 int64)" };
	for (int n = 2; n <= 3; n++)
		for (int no_shm = 0; no_shm <= 1; no_shm++)
			for (int change = 0; change < 3; change++) {
				struct coll_group g;
				coll_group_init(&g, n);
				g.no_shm = no_shm;
				g.fn = repeat_then_change_rank;
				g.arg = (void *)(intptr_t)change;
				coll_group_run(&g);
				for (int i = 0; i < n; i++) {
					DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
					DT_CHECK_CONTAINS(g.err[i].msg, "collective mismatch");
					DT_CHECK_CONTAINS(g.err[i].msg, "allreduce 'grads/mine' (#4, 10 float32)");
					DT_CHECK_CONTAINS(g.err[i].msg, theirs[change]);
				}
			}
}

static enum dt_status size_mismatch_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
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
	struct coll_group g;
	coll_group_init(&g, 2);
	g.fn = size_mismatch_rank;
	coll_group_run(&g);
	for (int i = 0; i < 2; i++) {
		DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
		DT_CHECK_CONTAINS(g.err[i].msg, "allreduce 'grads/0' (#1, 10 float32)");
		DT_CHECK_CONTAINS(g.err[i].msg, "allreduce 'grads/0' (#1, 11 float32)");
	}
	coll_group_init(&g, 2);
	g.fn = size_mismatch_rank;
	g.arg = &g; /* float32 on rank 0, int64 on rank 1 */
	coll_group_run(&g);
	for (int i = 0; i < 2; i++) {
		DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
		DT_CHECK_CONTAINS(g.err[i].msg, "allreduce 'grads/0' (#1, 10 int64)");
	}
}

DT_TEST(dist_collective, absent_rank_is_named_at_rendezvous)
{
	struct coll_group g;
	coll_group_init(&g, 3);
	g.absent = 2;
	g.connect_s = 1.5;
	int64_t t0 = dt_now_ns();
	coll_group_run(&g);
	double took = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(took < 10);
	for (int i = 0; i < 2; i++) {
		DT_CHECK(dt_status_exit_code(g.st[i]) == 3);
		DT_CHECK_CONTAINS(g.err[i].msg, "worker:2");
	}
}

static enum dt_status late_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
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
	if (g->arg) /* links taken for another host's: the waits yield first (ring.c) */
		comm->cost_kind = DT__COST_TCP_REMOTE;
	enum dt_status st = dt_allreduce_sum_f32(comm, buf, 1000, "grads/late", dt_deadline_in(1.5), err);
	atomic_fetch_add(&g->counter, 1);
	return st;
}

/* Also over TCP priced as links to other hosts, where a rank with nothing
 * to do yields before it sleeps: the stall notices and the deadline still
 * come in time. */
DT_TEST(dist_collective, timeout_names_the_rank_that_never_enters)
{
	for (int v = 0; v < 4; v++) {
		int n = 3 + v % 2, remote = v / 2;
		struct coll_group g;
		coll_group_init(&g, n);
		g.fn = late_rank;
		g.no_shm = remote;
		g.arg = remote ? &g : NULL;
		int64_t t0 = dt_now_ns();
		coll_group_run(&g);
		DT_CHECK((double)(dt_now_ns() - t0) / 1e9 < 2 * 1.5 + 1);
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

/* Measuring the link costs (comm_costs.c: recursive doubling probes, then
 * one all-reduce of the fits) is bounded by the deadline like any
 * collective: a rank that stops answering is named. The comms are made
 * without it (loopback, nothing measured); then ranks 0 and 1 measure and
 * rank 2 never does. */
static enum dt_status silent_measure_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	if (rank == 2) {
		for (int i = 0; i < 400 && atomic_load(&g->counter) < 2; i++)
			dt_sleep(0.025);
		return DT_OK;
	}
	enum dt_status st = dt__comm_measure_costs(comm, dt_deadline_in(1.5), err);
	atomic_fetch_add(&g->counter, 1);
	return st;
}

DT_TEST(dist_collective, a_rank_silent_while_link_costs_are_measured_is_named)
{
	struct coll_group g;
	coll_group_init(&g, 3);
	g.fn = silent_measure_rank;
	int64_t t0 = dt_now_ns();
	coll_group_run(&g);
	DT_CHECK((double)(dt_now_ns() - t0) / 1e9 < 10);
	for (int i = 0; i < 2; i++) {
		DT_CHECK(dt_status_exit_code(g.st[i]) == 3);
		DT_CHECK_CONTAINS(g.err[i].msg, "measuring the links' costs");
		DT_CHECK_CONTAINS(g.err[i].msg, "'dtrain/link-probe'");
		DT_CHECK_CONTAINS(g.err[i].msg, "worker:2 at 127.0.0.1:");
	}
	DT_CHECK_INT_EQ(g.st[0], DT_TIMEOUT);
}

DT_TEST(dist_collective, closed_peer_is_a_peer_failure)
{
	struct coll_group g;
	coll_group_init(&g, 3);
	g.fn = coll_leaving_rank;
	int64_t t0 = dt_now_ns();
	coll_group_run(&g);
	DT_CHECK((double)(dt_now_ns() - t0) / 1e9 < 10);
	for (int i = 0; i < 3; i += 2) {
		DT_CHECK_INT_EQ(g.st[i], DT_PEER);
		DT_CHECK_CONTAINS(g.err[i].msg, "worker:1 at 127.0.0.1:");
	}
}

/* dt_comm_closed_ranks: nothing closed while all three live; once rank 1
 * leaves (its comm freed, as a killed process's sockets close), ranks 0 and
 * 2 see rank 1 closed, and not each other, nor themselves. A rank's answer
 * goes into its error's message ("ok <closed before> <closed after>"). */
struct closed_sync {
	atomic_int checked, seen;
};

static void closed_string(struct dt_comm *comm, char *buf)
{
	int closed[3];
	dt_comm_closed_ranks(comm, closed, 3);
	for (int q = 0; q < 3; q++)
		buf[q] = (char)('0' + closed[q]);
	buf[3] = '\0';
}

/* Until `counter` reaches `want` or 10 s pass: 0 when it did. */
static int await_count(atomic_int *counter, int want)
{
	int64_t deadline = dt_deadline_in(10);
	while (atomic_load(counter) < want && !dt_deadline_passed(deadline))
		dt_sleep(0.005);
	return atomic_load(counter) < want;
}

static enum dt_status closed_ranks_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
{
	struct closed_sync *sync = g->arg;
	char before[4], after[4] = "";
	closed_string(comm, before);
	atomic_fetch_add(&sync->checked, 1);
	if (rank == 1) /* leaves once the others have looked */
		return await_count(&sync->checked, 3) ? dt_err_set(err, DT_TIMEOUT, "the others did not look") : DT_OK;
	int64_t deadline = dt_deadline_in(10);
	do
		closed_string(comm, after);
	while (after[1] != '1' && !dt_deadline_passed(deadline) && (dt_sleep(0.005), 1));
	atomic_fetch_add(&sync->seen, 1);
	/* The other survivor stays until both have looked. */
	if (await_count(&sync->seen, 2))
		return dt_err_set(err, DT_TIMEOUT, "the other survivor did not look");
	dt_err_set(err, DT_OK, "ok %s %s", before, after);
	return DT_OK;
}

DT_TEST(dist_collective, closed_ranks_are_those_whose_connections_closed)
{
	struct coll_group g;
	coll_group_init(&g, 3);
	struct closed_sync sync;
	atomic_init(&sync.checked, 0);
	atomic_init(&sync.seen, 0);
	g.fn = closed_ranks_rank;
	g.arg = &sync;
	coll_group_run(&g);
	coll_group_expect_ok(&g);
	DT_CHECK_STR_EQ(g.err[0].msg, "ok 000 010");
	DT_CHECK_STR_EQ(g.err[2].msg, "ok 000 010");
}

DT_TEST(dist_collective, refuses_a_different_cluster)
{
	struct coll_group g;
	coll_group_init(&g, 2);
	struct dt_hello h[2];
	for (int i = 0; i < 2; i++)
		dt_hello_init(&h[i], "worker", (uint32_t)i, 0x1111u * (uint64_t)(i + 1));
	g.hellos = h;
	coll_group_run(&g);
	for (int i = 0; i < 2; i++) {
		DT_CHECK_INT_EQ(g.st[i], DT_CONFIG);
		DT_CHECK_CONTAINS(g.err[i].msg, "worker:");
	}
	for (int i = 0; i < 2; i++)
		dt_hello_release(&h[i]);
}

static enum dt_status until_failure_broadcast(struct dt_comm *comm, int rank, struct dt_err *err)
{
	uint8_t buf[3001] = { 0 };
	enum dt_status st = DT_OK;
	int64_t end = dt_deadline_in(30);
	for (int round = 0; round < 10000000 && !st && !dt_deadline_passed(end); round++) {
		st = dt_broadcast(comm, buf, sizeof(buf), round % dt_comm_size(comm), "bcast", dt_deadline_in(COLL_FAULT_DEADLINE_S), err);
		if (!st)
			st = dt_barrier(comm, "b", dt_deadline_in(COLL_FAULT_DEADLINE_S), err);
	}
	if (!st)
		st = dt_err_set(err, DT_INTERNAL, "rank %d: no failure within 30 s", rank);
	return st;
}

static void fault_test(int sig)
{
	coll_fault_test(sig, 3, 2, coll_until_failure, 0, 0);
}

/* A rank killed or stopped in the middle of each algorithm, with 4 ranks (a
 * power of two) and 5 (one folds in; the victim is the folded rank's
 * partner), with and without a cluster secret. */
static void fault_every_algorithm(int sig)
{
	for (int alg = DT_COMM_ALG_RING; alg <= DT_COMM_ALG_HALVING; alg++) {
		coll_fault_test(sig, 4, 2, coll_until_failure_small, alg, alg == DT_COMM_ALG_HALVING);
		coll_fault_test(sig, 5, 0, coll_until_failure_small, alg, alg == DT_COMM_ALG_DOUBLING);
	}
	coll_fault_test(sig, 4, 1, until_failure_broadcast, DT_COMM_ALG_DOUBLING, 1);
	coll_fault_test(sig, 5, 3, until_failure_broadcast, DT_COMM_ALG_RING, 0);
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
 * segments read from the neighbour's memory, the COLL_REFs through the ring). */DT_TEST(dist_collective, killed_rank_fails_the_others_with_exit_3)
{
	fault_test(SIGKILL);
}

DT_TEST(dist_collective, stopped_rank_is_named_in_a_timeout)
{
	fault_test(SIGSTOP);
}


/* ---- a misbehaving neighbour ---- */

static enum dt_status one_allreduce(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err)
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

/* A COLL_DATA: its 16-byte data header, then the payload. */
static void send_data(int fd, uint64_t seq, const void *payload, size_t len)
{
	struct dt_err err = DT_ERR_INIT;
	uint8_t head[DT_COLL_DATA_HEAD_SIZE];
	dt_coll_data_head_pack(seq, len, head);
	DT_CHECK_OK(dt_sock_send_all(fd, head, sizeof(head), dt_deadline_in(5), "rank 1", &err), &err);
	DT_CHECK_OK(dt_sock_send_all(fd, payload, len, dt_deadline_in(5), "rank 1", &err), &err);
}

/* Reads one COLL_DATA of call `seq` and `len` bytes from fd (and drops it). */
static void expect_data(int fd, uint64_t seq, size_t len)
{
	struct dt_err err = DT_ERR_INIT;
	uint8_t head[DT_COLL_DATA_HEAD_SIZE], payload[256];
	DT_CHECK(len <= sizeof(payload));
	DT_CHECK_OK(dt_sock_recv_all(fd, head, sizeof(head), dt_deadline_in(10), "rank 1", &err), &err);
	struct dt_frame_header h;
	DT_CHECK_OK(dt_coll_data_head_parse(head, seq, &h, &err), &err);
	DT_CHECK(h.request_id == seq && h.length == len);
	DT_CHECK_OK(dt_sock_recv_all(fd, payload, len, dt_deadline_in(10), "rank 1", &err), &err);
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
	struct coll_group g;
	coll_group_init(&g, 2);
	g.algorithm = DT_COMM_ALG_RING; /* the fake speaks the ring's frames */
	g.fn = one_allreduce;
	struct coll_rank_arg arg = { &g, 1 };
	pthread_t th;
	DT_CHECK(pthread_create(&th, NULL, coll_rank_main, &arg) == 0);

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
			return; /* the kernel forbids process_vm_readv here (coll_kernel_allows_cma skips below) */
		}
	} else {
		decline_same_host_reads(out, in);
	}
	/* the rendezvous all-reduce (#0) of four floats by recursive doubling:
	 * one exchange (1: this end does not read rank 1's memory; 0: no link to
	 * another host, no measuring asked, no link costs given) */
	float link_counts[4] = { 1, 0, 0, 0 };
	send_start(out, 0, DT_COLL_ALLREDUCE, DT_WIRE_F32, 4, "dtrain/rendezvous");
	send_data(out, 0, link_counts, sizeof(link_counts));
	/* and rank 1's half of it, so nothing unread makes our close a reset */
	expect_frame(in, DT_MSG_COLL_START);
	expect_data(in, 0, sizeof(link_counts));

	uint8_t junk[64];
	memset(junk, 'G', sizeof(junk));
	float data[100] = { 0 };
	switch (bad) {
	case 0: /* not our protocol at all */
		DT_CHECK_OK(dt_sock_send_all(out, junk, sizeof(junk), dt_deadline_in(5), "rank 1", &err), &err);
		break;
	case 1: /* data without the collective's start: the rendezvous's call again */
		send_data(out, 1, data, sizeof(data));
		break;
	case 2: /* a segment of the wrong size */
		send_start(out, 1, DT_COLL_ALLREDUCE, DT_WIRE_F32, 100, "grads");
		send_data(out, 1, data, 64);
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
	case 7: /* a segment behind a 32-byte frame header, not its data header */
		send_start(out, 1, DT_COLL_ALLREDUCE, DT_WIRE_F32, 100, "grads");
		send_frame(out, DT_MSG_COLL_DATA, 1, data, sizeof(data));
		break;
	case 8: { /* a data header altered on the way */
		uint8_t head[DT_COLL_DATA_HEAD_SIZE];
		dt_coll_data_head_pack(1, sizeof(data), head);
		head[9] ^= 0x01;
		send_start(out, 1, DT_COLL_ALLREDUCE, DT_WIRE_F32, 100, "grads");
		DT_CHECK_OK(dt_sock_send_all(out, head, sizeof(head), dt_deadline_in(5), "rank 1", &err), &err);
		DT_CHECK_OK(dt_sock_send_all(out, data, sizeof(data), dt_deadline_in(5), "rank 1", &err), &err);
		break;
	}
	case 9: /* a segment of another call (its seq's low 32 bits differ) */
		send_start(out, 1, DT_COLL_ALLREDUCE, DT_WIRE_F32, 100, "grads");
		send_data(out, 2, data, sizeof(data));
		break;
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
	if (!coll_kernel_allows_cma())
		DT_SKIP("this kernel forbids process_vm_readv: no link reads memory");
	bad_neighbour(5, DT_PEER, "worker:7 vanished");
}

DT_TEST(dist_collective, misbehaving_neighbour_fails_the_collective_cleanly)
{
	bad_neighbour(0, DT_PROTOCOL, "bad magic");
	/* a DATA without a START stands for the link's last START again (the
	 * rendezvous's here), whose call is not rank 1's */
	bad_neighbour(1, DT_CONFIG, "announced by a coll_data alone");
	bad_neighbour(2, DT_PROTOCOL, "another size");
	bad_neighbour(3, DT_PEER, "closed the connection");
	bad_neighbour(4, DT_PROTOCOL, "set up to carry bytes");
	bad_neighbour(6, DT_PROTOCOL, "ps_push");
	bad_neighbour(7, DT_PROTOCOL, "16-byte data header");
	bad_neighbour(8, DT_PROTOCOL, "data header crc");
	bad_neighbour(9, DT_PROTOCOL, "unexpected coll_data");
}
