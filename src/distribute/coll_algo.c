/*
 * coll_algo.c — which algorithm runs a collective, and the algorithms as
 * sequences of steps of the engine (ring.c, dt__ring_step).
 *
 * The choice is a cost model in the style of MPICH's and NCCL's tuning
 * (Thakur, Rabenseifner and Gropp, "Optimization of collective communication
 * operations in MPICH", 2005): a step costs ALPHA (latency: a wake-up, a
 * sendmsg, a recv, the loopback or network hop), every byte moved BETA and
 * every byte added GAMMA; ALPHA and BETA settled at the rendezvous
 * (comm_costs.c: compiled per link kind, given, or measured across hosts).
 * It is a pure function of the size, the rank count, the link kind and the
 * costs agreed at the rendezvous, so every rank picks the same
 * algorithm without talking; the first collective of each kind in each
 * power-of-two size class logs the choice (info).
 *
 * All-reduce, n ranks, m bytes, p = the largest power of two <= n, f = 1
 * when n != p (the n - p extra ranks fold in first and get the result last):
 *   recursive doubling   (log2 p + 2f) steps, each moving m, adding m
 *                        (priced with two copies of m more, into and out
 *                        of scratch, which it made until 2026-11-25);
 *   halving-doubling     (2 log2 p + 2f) steps, moving 2m(p-1)/p (+2fm),
 *                        adding m(p-1)/p (+fm)  — Rabenseifner;
 *   ring                 2(n-1) steps, moving 2m(n-1)/n, adding m(n-1)/n,
 *                        pipelined in segments; on same-host links the
 *                        large segments are read from the neighbour's memory.
 * Broadcast: binomial tree (ceil(log2 n) steps of m) or the ring pipeline
 * ((n-1) steps of a segment, then m). Barrier: dissemination, always
 * (ceil(log2 n) rounds of a COLL_START, no data).
 *
 * Reduction order per element (what keeps results bit-identical between
 * runs and across ranks):
 *   - recursive doubling and halving-doubling compute the same sum: extra
 *     rank p + i is first added to rank i (x_i + x_{p+i}); then the p
 *     partial sums are combined as a balanced binary tree, pairs at distance
 *     1 first, then 2, 4, ...: ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + ...).
 *     Each addition is done by both partners with the operands swapped,
 *     which float addition does not notice (it is commutative, only not
 *     associative), so every rank holds the same bits;
 *   - the ring adds chunk c in ring order starting after its owner
 *     (docs/COLLECTIVES.md), then copies the result around.
 * Which of the two a given size gets is fixed by the model, so a run
 * repeated with the same rank count (and link kind: TCP, same-host reads,
 * shared memory) adds in the same order.
 * An int64 all-reduce (dt_allreduce_sum_i64) runs the same steps with 8-byte
 * elements and the run's wrapping int64 add (r->add); its sum does not depend
 * on the order at all, so it is the same bits for any algorithm.
 */
#include "distribute/ring_run.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/log.h"

/*
 * The constants, measured once on this machine (AMD EPYC, 2 vCPUs shared with
 * other jobs, load average 4-7 while measuring, so medians of 5-7 samples
 * and round figures) with each algorithm forced, 2 ranks:
 *   build/bench-allreduce --ranks=2 --sizes=4,4K,64K,256K,1M,4M,16M --samples=7 \
 *       --algorithm=doubling|halving|ring
 *   ALPHA, BETA (loopback TCP; comm_costs.c's table, with the other
 *          link kinds'): a 4-byte all-reduce by recursive doubling, one
 *          step, 18-21 us; halving-doubling (over TCP at every size) from
 *          256 KB to 4 MB, 260-670 ps per byte moved: 400;
 *   GAMMA (DT__GAMMA_PS): an add of floats out of cache, and each of recursive
 *          doubling's two copies (into and out of its scratch): 100 ps per
 *          byte; recursive doubling's slope 64 KB-1 MB was 800 ps per byte;
 *   BETA_SAME_HOST: the ring reading segments with process_vm_readv, 1-4 MB
 *          at its best (120-180 ps per byte of m): 150.
 * In picoseconds per step and per byte. They only place the crossovers; on
 * this machine those came out at about 64 KB (doubling to halving-doubling,
 * 2 ranks) and 512 KB (to the same-host ring, where reads start).
 */
#define GAMMA_PS DT__GAMMA_PS
#define BETA_SAME_HOST_PS 150.0

static int pow2_floor(int n)
{
	int p = 1;
	while (p <= n / 2)
		p *= 2;
	return p;
}

static int log2_of(int p)
{
	int k = 0;
	while ((1 << k) < p)
		k++;
	return k;
}

/* Whether the ring's segments of a collective of `bytes` go by reference
 * (the reader copies them out of its neighbour's memory, comm_cma.c) where
 * a link agreed it: from cma_min_bytes up, but never when every link is on
 * shared memory — measured on an idle 2-vCPU AMD EPYC (COLLECTIVES.md),
 * the rings are 1.4-3.4x faster than the references at 1-64 MB, 2 and 4
 * ranks. The same on every rank: link_kind and shm_all come from the
 * rendezvous sum. */
static int reads_by_reference(const struct dt_comm *c, size_t bytes)
{
	return !c->shm_all && bytes >= c->cma_min_bytes;
}

/* Model times in picoseconds. */
static double cost_allreduce(const struct dt_comm *c, enum dt_comm_algorithm alg, double m)
{
	int n = c->n, p = pow2_floor(n), f = n != p, lg = log2_of(p);
	const double ALPHA = c->alpha_ps, BETA = c->beta_ps;
	double beta_ring = c->link_kind == DT__LINK_SAME_HOST && reads_by_reference(c, (size_t)m) ? BETA_SAME_HOST_PS : BETA;
	switch (alg) {
	case DT_COMM_ALG_DOUBLING:
		/* + 2: the copies into and out of scratch it made when the
		 * crossovers were measured (COLLECTIVES.md); it makes none now
		 * (dt__ring_step_apart), kept until they are measured again */
		return (lg + 2 * f) * ALPHA + (lg + 2 * f) * m * BETA + (lg + f + 2) * m * GAMMA_PS;
	case DT_COMM_ALG_HALVING:
		return (2 * lg + 2 * f) * ALPHA + (2.0 * (p - 1) / p + 2 * f) * m * BETA +
		       ((double)(p - 1) / p + f) * m * GAMMA_PS;
	default:
		return 2.0 * (n - 1) * ALPHA + 2.0 * (n - 1) / n * m * beta_ring + (double)(n - 1) / n * m * GAMMA_PS;
	}
}

static double cost_broadcast(const struct dt_comm *c, enum dt_comm_algorithm alg, double m)
{
	int n = c->n;
	const double ALPHA = c->alpha_ps, BETA = c->beta_ps;
	if (alg == DT_COMM_ALG_DOUBLING)
		return log2_of(n) * (ALPHA + m * BETA);
	double beta_ring = c->link_kind == DT__LINK_SAME_HOST && reads_by_reference(c, (size_t)m) ? BETA_SAME_HOST_PS : BETA;
	double seg = m < (double)c->seg_bytes ? m : (double)c->seg_bytes;
	return (n - 1) * ALPHA + m * beta_ring + (n - 2) * seg * beta_ring;
}

const char *dt_comm_algorithm_name(enum dt_comm_kind kind, enum dt_comm_algorithm alg)
{
	switch (alg) {
	case DT_COMM_ALG_RING:
		return kind == DT_COMM_BROADCAST ? "ring pipeline" : "ring";
	case DT_COMM_ALG_DOUBLING:
		return kind == DT_COMM_BROADCAST ? "binomial tree" : "recursive doubling";
	case DT_COMM_ALG_HALVING:
		return "halving-doubling";
	default:
		return "auto";
	}
}

enum dt_comm_algorithm dt_comm_choose(const struct dt_comm *comm, enum dt_comm_kind kind, size_t bytes)
{
	if (comm->algorithm)
		return kind == DT_COMM_BROADCAST && comm->algorithm == DT_COMM_ALG_HALVING ? DT_COMM_ALG_DOUBLING
											 : (enum dt_comm_algorithm)comm->algorithm;
	double m = (double)bytes;
	if (kind == DT_COMM_BROADCAST)
		return cost_broadcast(comm, DT_COMM_ALG_DOUBLING, m) <= cost_broadcast(comm, DT_COMM_ALG_RING, m)
			       ? DT_COMM_ALG_DOUBLING
			       : DT_COMM_ALG_RING;
	/* A measured crossover (remote links, comm_costs.c) decides recursive
	 * doubling against halving-doubling where the probes timed both; the
	 * model still weighs the ring against halving-doubling above it. */
	if (bytes < comm->doubling_below_bytes)
		return DT_COMM_ALG_DOUBLING;
	const int measured = comm->halving_from_bytes > 0 && bytes >= comm->halving_from_bytes;
	enum dt_comm_algorithm best = measured ? DT_COMM_ALG_HALVING : DT_COMM_ALG_DOUBLING;
	double t = cost_allreduce(comm, best, m);
	const enum dt_comm_algorithm others[] = { DT_COMM_ALG_HALVING, DT_COMM_ALG_RING };
	for (size_t i = measured; i < sizeof(others) / sizeof(others[0]); i++) {
		double u = cost_allreduce(comm, others[i], m);
		if (u < t) {
			t = u;
			best = others[i];
		}
	}
	return best;
}

/* The choice for this call, logged the first time its size class comes up. */
static enum dt_comm_algorithm choose_logged(struct dt_comm *c, enum dt_comm_kind kind, size_t bytes)
{
	if (c->chosen_for[kind] == bytes + 1)
		return (enum dt_comm_algorithm)c->chosen[kind]; /* the same as last time, and logged then */
	enum dt_comm_algorithm alg = dt_comm_choose(c, kind, bytes);
	c->chosen_for[kind] = bytes + 1;
	c->chosen[kind] = (int)alg;
	int cls = 0;
	while (cls < 63 && ((size_t)1 << cls) <= bytes)
		cls++;
	if (!(c->logged[kind] & ((uint64_t)1 << cls))) {
		c->logged[kind] |= (uint64_t)1 << cls;
		double m = (double)bytes;
		char timed[96] = "";
		if (c->doubling_below_bytes > 0)
			snprintf(timed, sizeof(timed), "; timed: recursive doubling below %zu bytes%s",
				 c->doubling_below_bytes, c->halving_from_bytes ? ", then not" : "");
		if (kind == DT_COMM_ALLREDUCE)
			dt_info("all-reduce of %zu bytes or so (size class %d) across %d ranks: %s (model: doubling %.1f us, "
				"halving-doubling %.1f us, ring %.1f us; links %s%s, alpha %.1f us, beta %.0f ps/byte %s%s; "
				"segments of %zu bytes)",
				bytes, cls, c->n, dt_comm_algorithm_name(kind, alg),
				cost_allreduce(c, DT_COMM_ALG_DOUBLING, m) / 1e6, cost_allreduce(c, DT_COMM_ALG_HALVING, m) / 1e6,
				cost_allreduce(c, DT_COMM_ALG_RING, m) / 1e6, dt__comm_costs_name(c),
				c->link_kind == DT__LINK_SAME_HOST ? ", same-host reads" : "", c->alpha_ps / 1e6, c->beta_ps,
				c->costs_from == DT__COSTS_MEASURED ? "measured"
				: c->costs_from == DT__COSTS_GIVEN ? "given"
								    : "compiled",
				timed, c->seg_bytes);
		else
			dt_info("broadcast of %zu bytes or so (size class %d) across %d ranks: %s", bytes, cls, c->n,
				dt_comm_algorithm_name(kind, alg));
	}
	return alg;
}

static void scratch_reserve(struct dt_comm *c, size_t need)
{
	if (need <= c->scratch_cap)
		return;
	free(c->scratch);
	c->scratch = dt_xmalloc(need);
	c->scratch_cap = need;
}

/* ---- all-reduce ---- */

/* Extra rank p + i hands its buffer to rank i, which adds it in (x_i + x_{p+i}). */
static enum dt_status fold_in(struct dt__ring_run *r, uint8_t *buf, size_t bytes, int p, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	struct dt__plan pl;
	if (c->rank >= p) {
		dt__plan_span(c, 0, bytes, 0, 0, 0, r->esize, &pl);
		return dt__ring_step(r, &pl, buf, c->rank - p, -1, 0, err);
	}
	if (c->rank < c->n - p) {
		dt__plan_span(c, 0, 0, 0, bytes, 1, r->esize, &pl);
		return dt__ring_step(r, &pl, buf, -1, c->rank + p, 0, err);
	}
	return DT_OK;
}

/* Rank i hands the result back to extra rank p + i. */
static enum dt_status fold_out(struct dt__ring_run *r, uint8_t *buf, size_t bytes, int p, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	struct dt__plan pl;
	if (c->rank >= p) {
		dt__plan_span(c, 0, 0, 0, bytes, 0, r->esize, &pl);
		return dt__ring_step(r, &pl, buf, -1, c->rank - p, 0, err);
	}
	if (c->rank < c->n - p) {
		dt__plan_span(c, 0, bytes, 0, 0, 0, r->esize, &pl);
		return dt__ring_step(r, &pl, buf, c->rank + p, -1, 0, err);
	}
	return DT_OK;
}

/* Largest recursive doubling whose steps send first, then receive, straight
 * from and into place (doubling_in_place). A send then never waits for the
 * partner: every link is a ring (comm_shm.c, 1 MiB) that holds this step's
 * frames and what is left of the collective before; a socket's buffer may
 * not, and a send that waited for a partner that also sends would deadlock. */
#define IN_PLACE_MAX_BYTES ((size_t)64 << 10)

/* Recursive doubling on shared memory, small: each step sends the partial
 * sum in the caller's buffer to rank ^ mask (a step of its own: once it
 * returns the bytes are in the ring, and the buffer may change), then
 * receives the partner's and adds it into the buffer as it is parsed — out
 * of the ring itself (ring_recv.c) on an untagged link. The same additions
 * as doubling's below (dst += the partner's, element by element), without
 * its copies into and out of scratch: a 2-rank all-reduce is one copy into
 * the partner's ring and one add out of ours, the direct exchange
 * (COLLECTIVES.md "Where the microseconds go"). */
static enum dt_status doubling_in_place(struct dt__ring_run *r, uint8_t *buf, size_t bytes, int p, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	enum dt_status st = DT_OK;
	for (int mask = 1; mask < p && !st; mask <<= 1) {
		struct dt__plan pl;
		dt__plan_span(c, 0, bytes, 0, 0, 0, r->esize, &pl);
		st = dt__ring_step(r, &pl, buf, c->rank ^ mask, -1, 0, err);
		if (!st) {
			dt__plan_span(c, 0, 0, 0, bytes, 1, r->esize, &pl);
			st = dt__ring_step(r, &pl, buf, -1, c->rank ^ mask, 0, err);
		}
	}
	return st;
}

/* Recursive doubling among ranks 0..p-1: each step sends the whole partial
 * sum to rank ^ mask and adds the partner's. The buffer is sent as it is
 * and the partner's arrives in scratch (dt__ring_step_apart), added once
 * the step is done (buf = buf + partner's): by then every byte sent has
 * left the buffer, so nothing changes under the send. Small ones on shared
 * memory: doubling_in_place. */
static enum dt_status doubling(struct dt__ring_run *r, void *buf, size_t count, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	int p = pow2_floor(c->n);
	size_t bytes = count * r->esize;
	enum dt_status st = fold_in(r, (uint8_t *)buf, bytes, p, err);
	if (!st && c->rank < p && c->shm_all && bytes <= IN_PLACE_MAX_BYTES) {
		st = doubling_in_place(r, (uint8_t *)buf, bytes, p, err);
	} else if (!st && c->rank < p) {
		scratch_reserve(c, bytes);
		for (int mask = 1; mask < p && !st; mask <<= 1) {
			struct dt__plan pl;
			dt__plan_span(c, 0, bytes, 0, bytes, 0, r->esize, &pl);
			st = dt__ring_step_apart(r, &pl, buf, c->scratch, c->rank ^ mask, c->rank ^ mask, err);
			if (!st)
				r->add(buf, c->scratch, bytes);
		}
	}
	if (!st)
		st = fold_out(r, (uint8_t *)buf, bytes, p, err);
	return st;
}

/* Bytes of chunks [a, a + w) of count elements of esize bytes cut into p
 * chunks (whole elements, so no step splits one). */
static void range_bytes(size_t count, size_t esize, int p, int a, int w, size_t *off, size_t *len)
{
	size_t o1, l1, o2, l2;
	dt__plan_chunk(count, p, a, &o1, &l1);
	dt__plan_chunk(count, p, a + w - 1, &o2, &l2);
	*off = o1 * esize;
	*len = (o2 + l2 - o1) * esize;
}

/* Rabenseifner among ranks 0..p-1: reduce-scatter by recursive halving
 * (partner rank ^ mask, mask 1, 2, 4...: keep the half of the current chunk
 * range that bit says, send the other, add the partner's copy of the kept
 * half into place), then all-gather by recursive doubling in the reverse
 * order (send the range held, receive the sibling range into place). */
static enum dt_status halving(struct dt__ring_run *r, void *buf, size_t count, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	int p = pow2_floor(c->n), lg = log2_of(p);
	size_t bytes = count * r->esize;
	uint8_t *b = (uint8_t *)buf;
	enum dt_status st = fold_in(r, b, bytes, p, err);
	if (!st && c->rank < p) {
		int lo[32], w = p, base = 0;
		for (int k = 0; k < lg && !st; k++) {
			int mask = 1 << k, half = w / 2;
			int keep = (c->rank & mask) ? base + half : base, give = (c->rank & mask) ? base : base + half;
			size_t koff, klen, goff, glen;
			range_bytes(count, r->esize, p, keep, half, &koff, &klen);
			range_bytes(count, r->esize, p, give, half, &goff, &glen);
			struct dt__plan pl;
			dt__plan_span(c, goff, glen, koff, klen, 1, r->esize, &pl);
			st = dt__ring_step(r, &pl, b, c->rank ^ mask, c->rank ^ mask, 0, err);
			lo[k] = base;
			base = keep;
			w = half;
		}
		for (int k = lg - 1; k >= 0 && !st; k--) {
			int mask = 1 << k;
			int sib = (c->rank & mask) ? base - w : base + w;
			size_t moff, mlen, soff, slen;
			range_bytes(count, r->esize, p, base, w, &moff, &mlen);
			range_bytes(count, r->esize, p, sib, w, &soff, &slen);
			struct dt__plan pl;
			dt__plan_span(c, moff, mlen, soff, slen, 0, r->esize, &pl);
			st = dt__ring_step(r, &pl, b, c->rank ^ mask, c->rank ^ mask, 0, err);
			base = lo[k];
			w *= 2;
		}
	}
	if (!st)
		st = fold_out(r, b, bytes, p, err);
	return st;
}

/* The all-reduce of either element type (dtype F32 or I64): every
 * algorithm adds with the run's kernel (r->add) over its element size. */
static enum dt_status allreduce_sum(struct dt_comm *comm, void *buf, size_t count, unsigned dtype, const char *name,
				    int64_t deadline, struct dt_err *err)
{
	if (count > SIZE_MAX / 16)
		return dt_err_set(err, DT_INTERNAL, "allreduce '%s' of %zu %s is larger than memory", name ? name : "",
				  count, dt_wire_dtype_name(dtype));
	struct dt__ring_run r;
	enum dt_status st = dt__ring_begin(&r, comm, DT_COLL_ALLREDUCE, dtype, count, 0, buf, name, deadline, err);
	if (st || comm->n == 1)
		return st;
	const size_t bytes = count * r.esize;
	switch (choose_logged(comm, DT_COMM_ALLREDUCE, bytes)) {
	case DT_COMM_ALG_DOUBLING:
		return doubling(&r, buf, count, err);
	case DT_COMM_ALG_HALVING:
		return halving(&r, buf, count, err);
	default: {
		struct dt__plan p;
		dt__plan_ring_allreduce(comm, count, r.esize, &p);
		int refs = comm->cma_send && count > 0 && reads_by_reference(comm, bytes);
		return dt__ring_step(&r, &p, buf, (comm->rank + 1) % comm->n, (comm->rank - 1 + comm->n) % comm->n, refs,
				     err);
	}
	}
}

enum dt_status dt_allreduce_sum_f32(struct dt_comm *comm, float *buf, size_t count, const char *name,
				    int64_t deadline, struct dt_err *err)
{
	return allreduce_sum(comm, buf, count, DT_WIRE_F32, name, deadline, err);
}

enum dt_status dt_allreduce_sum_i64(struct dt_comm *comm, int64_t *buf, size_t count, const char *name,
				    int64_t deadline, struct dt_err *err)
{
	return allreduce_sum(comm, buf, count, DT_WIRE_I64, name, deadline, err);
}

/* The ring all-gather: n - 1 steps of one block, each forwarded as it
 * arrives (ring_plan.c); large blocks read from the neighbour's memory
 * where the link allows it, as the ring all-reduce's segments. Blocks are
 * copied, never added, so any algorithm would give the same bytes; the ring
 * moves the fewest ((n - 1) blocks in and out of each rank). */
enum dt_status dt_allgather(struct dt_comm *comm, void *buf, size_t block, const char *name, int64_t deadline,
			    struct dt_err *err)
{
	if (block > SIZE_MAX / 16 / (size_t)comm->n)
		return dt_err_set(err, DT_INTERNAL, "allgather '%s' of %d blocks of %zu bytes is larger than memory",
				  name ? name : "", comm->n, block);
	struct dt__ring_run r;
	enum dt_status st = dt__ring_begin(&r, comm, DT_COLL_ALLGATHER, DT_WIRE_U8, block, 0, buf, name, deadline, err);
	if (st || comm->n == 1)
		return st;
	struct dt__plan p;
	dt__plan_ring_allgather(comm, block, &p);
	int refs = comm->cma_send && block > 0 && reads_by_reference(comm, block);
	return dt__ring_step(&r, &p, buf, (comm->rank + 1) % comm->n, (comm->rank - 1 + comm->n) % comm->n, refs, err);
}

/* Whether a connected socket's peer is on another host: its address is
 * neither loopback nor the socket's own (two processes on one host that use
 * the host's address are on one host; network namespaces with addresses of
 * their own are taken for hosts, as bench/allreduce_hosts means them). */
static int peer_is_remote(int fd)
{
	struct sockaddr_storage me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 || getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 ||
	    me.ss_family != peer.ss_family)
		return 0;
	if (peer.ss_family == AF_INET) {
		const struct in_addr *a = &((struct sockaddr_in *)&peer)->sin_addr, *b = &((struct sockaddr_in *)&me)->sin_addr;
		return (ntohl(a->s_addr) >> 24) != 127 && a->s_addr != b->s_addr;
	}
	if (peer.ss_family == AF_INET6) {
		const struct in6_addr *a = &((struct sockaddr_in6 *)&peer)->sin6_addr;
		const struct in6_addr *b = &((struct sockaddr_in6 *)&me)->sin6_addr;
		int v4_loopback = IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
		return !IN6_IS_ADDR_LOOPBACK(a) && !v4_loopback && memcmp(a, b, sizeof(*a)) != 0;
	}
	return 0; /* a Unix socket */
}

enum dt_status dt__comm_rendezvous_sum(struct dt_comm *comm, int64_t deadline, struct dt_err *err)
{
	/* v[0]: two counts in one float (exact: small integers): ring links that
	 * do not read memory, and 4096 per rank with a link not on shared
	 * memory. v[1]: ranks with a link to another host; v[2]: ranks that ask
	 * for the link costs to be measured; v[3]: ranks that give them. */
	int all_shm = comm->n > 1, remote = 0;
	for (int q = 0; q < comm->n; q++) {
		int shm = comm->out[q].shm && comm->in[q].shm;
		if (comm->out[q].fd >= 0 && !shm) {
			all_shm = 0;
			remote |= peer_is_remote(comm->out[q].fd);
		}
	}
	int given = comm->want_alpha_us > 0 && comm->want_beta_ps > 0;
	float v[4] = { (comm->cma_send && comm->cma_left_pid ? 0.0f : 1.0f) + (all_shm ? 0.0f : 4096.0f),
		       remote ? 1.0f : 0.0f, comm->want_measure && !given ? 1.0f : 0.0f, given ? 1.0f : 0.0f };
	enum dt_status st = dt__allreduce_doubling(comm, v, 4, "dtrain/rendezvous", deadline, err);
	if (st)
		return st;
	comm->link_kind = v[0] == 0.0f || v[0] == 4096.0f * (float)(int)(v[0] / 4096.0f) ? DT__LINK_SAME_HOST : DT__LINK_TCP;
	comm->shm_all = v[0] < 4096.0f;
	comm->cost_kind = comm->shm_all ? DT__COST_SHM : v[1] > 0.0f ? DT__COST_TCP_REMOTE : DT__COST_TCP_LOOPBACK;
	if (comm->cost_kind == DT__COST_TCP_REMOTE && !comm->seg_given) /* every rank alike: v is agreed */
		dt__comm_set_segment(comm, DT_COMM_SEGMENT_REMOTE_BYTES);
	return dt__comm_costs_agree(comm, (int)v[2], (int)v[3], deadline, err);
}

enum dt_status dt__allreduce_by(struct dt_comm *comm, enum dt_comm_algorithm alg, float *buf, size_t count,
				const char *name, int64_t deadline, struct dt_err *err)
{
	DT_ASSERT(alg == DT_COMM_ALG_DOUBLING || alg == DT_COMM_ALG_HALVING);
	int was = comm->algorithm;
	comm->algorithm = (int)alg; /* fixed: the start (dt__ring_begin) records it, no model consulted */
	struct dt__ring_run r;
	enum dt_status st = dt__ring_begin(&r, comm, DT_COLL_ALLREDUCE, DT_WIRE_F32, count, 0, buf, name, deadline, err);
	if (!st && comm->n > 1)
		st = alg == DT_COMM_ALG_DOUBLING ? doubling(&r, buf, count, err) : halving(&r, buf, count, err);
	comm->algorithm = was;
	return st;
}

enum dt_status dt__allreduce_doubling(struct dt_comm *comm, float *buf, size_t count, const char *name,
				      int64_t deadline, struct dt_err *err)
{
	return dt__allreduce_by(comm, DT_COMM_ALG_DOUBLING, buf, count, name, deadline, err);
}

/* ---- broadcast ---- */

/* Binomial tree from root: with v = (rank - root) mod n, in round d = 1, 2,
 * 4, ... ranks v < d send the whole buffer to v + d. A rank receives once,
 * from v - h (h the largest power of two <= v), then sends in the rounds
 * after. */
static enum dt_status binomial(struct dt__ring_run *r, uint8_t *buf, size_t bytes, int root, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	int n = c->n, v = (c->rank - root + n) % n, d = 1;
	struct dt__plan pl;
	enum dt_status st = DT_OK;
	if (v > 0) {
		int h = pow2_floor(v);
		dt__plan_span(c, 0, 0, 0, bytes, 0, r->esize, &pl);
		st = dt__ring_step(r, &pl, buf, -1, (c->rank - h + n) % n, 0, err);
		d = 2 * h;
	}
	for (; !st && v + d < n; d *= 2) {
		dt__plan_span(c, 0, bytes, 0, 0, 0, r->esize, &pl);
		st = dt__ring_step(r, &pl, buf, (c->rank + d) % n, -1, 0, err);
	}
	return st;
}

enum dt_status dt_broadcast(struct dt_comm *comm, void *buf, size_t bytes, int root, const char *name,
			    int64_t deadline, struct dt_err *err)
{
	if (root < 0 || root >= comm->n)
		return dt_err_set(err, DT_INTERNAL, "broadcast '%s' from rank %d in a ring of %d ranks", name ? name : "",
				  root, comm->n);
	struct dt__ring_run r;
	enum dt_status st = dt__ring_begin(&r, comm, DT_COLL_BROADCAST, DT_WIRE_U8, bytes, root, buf, name, deadline, err);
	if (st || comm->n == 1)
		return st;
	if (choose_logged(comm, DT_COMM_BROADCAST, bytes) == DT_COMM_ALG_DOUBLING)
		return binomial(&r, buf, bytes, root, err);
	struct dt__plan p;
	dt__plan_broadcast(comm, bytes, root, &p);
	int refs = comm->cma_send && bytes > 0 && reads_by_reference(comm, bytes);
	return dt__ring_step(&r, &p, buf, (comm->rank + 1) % comm->n, (comm->rank - 1 + comm->n) % comm->n, refs, err);
}

/* ---- barrier ---- */

/* Dissemination (Hensgen, Finkel and Manber): in round d = 1, 2, 4, ... < n
 * each rank sends a COLL_START to rank + d and waits for the one from
 * rank - d. After round d a rank has heard, directly or not, from the 2d
 * ranks before it, so after ceil(log2 n) rounds from all. */
enum dt_status dt_barrier(struct dt_comm *comm, const char *name, int64_t deadline, struct dt_err *err)
{
	struct dt__ring_run r;
	float none = 0;
	enum dt_status st = dt__ring_begin(&r, comm, DT_COLL_BARRIER, 0, 0, 0, &none, name, deadline, err);
	int n = comm->n;
	for (int d = 1; !st && d < n; d *= 2) {
		struct dt__plan pl;
		dt__plan_span(comm, 0, 0, 0, 0, 0, 1, &pl);
		st = dt__ring_step(&r, &pl, &none, (comm->rank + d) % n, (comm->rank - d + n) % n, 0, err);
	}
	return st;
}
