/*
 * ring.c — the progress engine: runs one step of a collective.
 *
 * A step is described by a plan: the DATA frames this rank sends to one peer
 * (send items; on the ring its right neighbour) and receives from one peer
 * (recv items; on the ring its left one), each a byte range of a buffer; a
 * send item may go once a given recv item has been applied (ring all-reduce:
 * segment j of step s carries what segment j of step s-1 brought; ring
 * broadcast: forward segment j once it arrived). coll_algo.c builds the
 * algorithms from steps: the ring is one step over the ring links; recursive
 * doubling, halving-doubling, the binomial tree and the dissemination barrier
 * are several, each over the links to and from that step's partners
 * (dt__ring_step points the comm's L and R at them). The first step on a
 * link carries the collective's COLL_START there.
 * On a same-host link (comm_cma.c) a large segment is not sent: a COLL_REF
 * says where it is in the sender's memory and the receiver reads it with
 * process_vm_readv, adding what it read piece by piece; the sender returns
 * only after the receiver's COLL_DONE, so its caller cannot change the bytes
 * under the reader (the reading side is ring_ref.c). The order of the plan
 * keeps them stable until then: a rank overwrites a segment it sent only
 * with a result that the reader of that segment helped to compute.
 * One loop (run_plan) moves both directions with nonblocking sendmsg/recv and
 * waits in poll() for whichever side can move, so neither direction can stall
 * the other (NCCL's ncclSocketSendRecv). On shared-memory links (comm_shm.c)
 * the same bytes go through ring buffers (dt__link_sendv / dt__link_recv)
 * and the wait is a futex's (dt__shm_wait), with a look at the sockets for
 * what still comes there: COLL_DONE, COLL_ABORT, a dead peer's end. Received bytes land in the comm's
 * stage buffer and are reduced or copied into place as they arrive, whole
 * floats at a time, so reduction overlaps the transfer of the next bytes.
 *
 * The engine's files: this one the loop and the steps; ring_send.c the out
 * link (frames sent, what comes back); ring_recv.c the in link (frames
 * parsed, reduced into place); ring_fail.c failures, stall notices and
 * timeouts; ring_reduce.c the sums; ring_ref.c same-host reads.
 */
#include "distribute/ring_run.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/clock.h"

/* ---- the loop ---- */

/* The yields of a step on TCP links to other hosts (run_plan): how long a
 * rank keeps yielding before it sleeps, a yield that counts as having lost
 * the core, and for how long waits then sleep at once. A yield that lost the
 * core to another job's thread may be gone for that thread's whole
 * scheduler slice (EEVDF's base slice, 0.75 ms times 1 + log2 of the CPUs:
 * 1.5 ms on 2); one that let this host's own ranks, or the softirqs moving
 * their bytes, run comes back when that burst of work ends, a few hundred
 * microseconds at most. At 100 us every rank of an idle 4-rank bench on 2
 * vCPUs took its neighbours' sums for another job and slept (COLLECTIVES.md,
 * "The progress loop"). */
#define TCP_YIELD_NS 100000
#define TCP_YIELD_SLOW_NS 1000000
#define TCP_YIELD_BACKOFF_NS (100 * 1000000LL)

/* A step over shared-memory links slept on its futex and should look at its
 * sockets: the end of an in link's stream (the writer died: kill -9 closes
 * sockets, not rings), and what came back on the out link (COLL_DONE,
 * COLL_ABORT, the end). */
static enum dt_status check_sockets(struct dt__ring_run *r, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	struct pollfd p[2];
	int np = 0, li = -1, ri = -1;
	if (c->L && c->L->shm && !c->L->tcp_eof) {
		li = np;
		p[np++] = (struct pollfd){ c->L->fd, POLLIN, 0 };
	}
	if (c->R && !c->R->eof) {
		ri = np;
		p[np++] = (struct pollfd){ c->R->fd, POLLIN, 0 };
	}
	if (np == 0 || poll(p, (nfds_t)np, 0) <= 0)
		return DT_OK;
	if (li >= 0 && p[li].revents) {
		uint8_t b;
		ssize_t n = recv(c->L->fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
		if (n > 0)
			return dt__ring_fail(r, err, DT_PROTOCOL,
					     "%s sent bytes on the socket of a shared-memory link during %s",
					     c->labels[c->lrank], r->what);
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			c->L->tcp_eof = 1; /* what is still in the ring is read first */
	}
	if (ri >= 0 && (p[ri].revents & (POLLIN | POLLHUP | POLLERR)))
		return dt__ring_read_back(r, err);
	return DT_OK;
}

static enum dt_status run_plan(struct dt__ring_run *r, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	/* Every link of the step on shared memory: sleep on the futex. Some:
	 * poll() the sockets, but not for long (the rings wake nothing there). */
	const int shm_step = (c->L || c->R) && (!c->L || c->L->shm) && (!c->R || c->R->shm);
	const int shm_some = (c->L && c->L->shm) || (c->R && c->R->shm);
	int64_t spin_ns = shm_step ? 0 : (int64_t)c->spin_us * 1000;
	/* TCP links to other hosts, no spin_us given: yield the core between
	 * looks for up to TCP_YIELD_NS before sleeping in poll() (Open MPI's
	 * mpi_yield_when_idle). A segment on a 10 Gbit/s link comes every few
	 * microseconds, and each poll() sleep and wake-up is one more trip
	 * through the scheduler on a core that the softirqs moving those
	 * segments need too; a yield gives the core to whatever is runnable and
	 * looks again as soon as it comes back (COLLECTIVES.md, "Where the
	 * microseconds go", 10 Gbit/s). A yield that lost the core for long
	 * (other jobs had it) makes every wait of the next TCP_YIELD_BACKOFF_NS
	 * sleep at once: a count of waits (shared memory's back-off) let a
	 * loaded host take the core away again every few calls. */
	const int64_t yield_ns = !shm_some && !spin_ns && c->cost_kind == DT__COST_TCP_REMOTE ? TCP_YIELD_NS : 0;
	int64_t idle_since = 0;
	unsigned rounds = 0;
	for (;;) {
		int moved = 0, blocked = 0;
		if (r->s_idx < r->ns || r->ctrl_len) {
			int k = dt__ring_try_send(r, &blocked, err);
			if (k < 0)
				return c->failure.status;
			moved |= k;
		}
		if (!dt__ring_recv_done(r)) {
			if (c->L->stage_pos < c->L->stage_len && dt__ring_parse_stage(r, err))
				return c->failure.status;
			int k = dt__ring_recv_done(r) ? 0 : dt__ring_try_recv(r, err);
			if (k < 0)
				return c->failure.status;
			moved |= k;
		}
		if (r->refs_in && !r->done_sent && dt__ring_recv_done(r) && (dt__ring_pending_abort(r, err) || dt__ring_send_done(r, err)))
			return c->failure.status;
		if (r->s_idx >= r->ns && dt__ring_recv_done(r) && (!r->refs_out || r->done_in)) {
			if (!r->ctrl_sent && !r->ctrl_sealed) {
				r->ctrl_len = 0; /* a stall notice not yet begun (nor numbered) is moot now */
				return DT_OK;
			}
			if (!r->ctrl_len)
				return DT_OK;
		}
		if (moved && (++rounds & 63) != 0) {
			idle_since = 0;
			continue;
		}
		int64_t now = r->now = dt_now_ns();
		if (moved) {
			idle_since = 0;
		} else if (spin_ns) {
			if (!idle_since)
				idle_since = now;
			if (now - idle_since < spin_ns)
				continue;
		} else if (yield_ns && now >= c->tcp_yield_after) {
			if (!idle_since)
				idle_since = now;
			if (now - idle_since < yield_ns && now < r->deadline && now < r->next_stall) {
				sched_yield();
				r->now = dt_now_ns();
				if (r->now - now > TCP_YIELD_SLOW_NS)
					c->tcp_yield_after = r->now + TCP_YIELD_BACKOFF_NS;
				continue;
			}
		}
		if (now >= r->deadline)
			return dt__ring_timed_out(r, now, err);
		if (now >= r->next_stall) {
			dt__ring_queue_stall(r, now);
			r->next_stall = now + r->stall_every;
			continue;
		}
		if (moved)
			continue;
		int64_t wake = r->next_stall < r->deadline ? r->next_stall : r->deadline;
		/* Only COLL_DONE awaited (the reader's answer to COLL_REFs): it comes
		 * on the socket, so sleep there; the reader's poke may come before
		 * the bytes do when the loopback's softirq is deferred. */
		if (shm_step && (!dt__ring_recv_done(r) || blocked)) {
			int look = 0;
			dt__shm_wait(c, !dt__ring_recv_done(r), blocked, wake, &r->now, &look);
			if (look && check_sockets(r, err))
				return c->failure.status;
			continue;
		}
		struct pollfd p[2];
		int np = 0;
		if (!dt__ring_recv_done(r))
			p[np++] = (struct pollfd){ c->L->fd, POLLIN, 0 };
		int ri = -1;
		int want_out = blocked && c->R && !c->R->shm; /* a full ring is not a full socket */
		if (c->R && (!c->R->eof || want_out)) {
			ri = np;
			p[np++] = (struct pollfd){ c->R->fd, (short)((c->R->eof ? 0 : POLLIN) | (want_out ? POLLOUT : 0)), 0 };
		}
		int ms = dt_deadline_ms_left(wake);
		if (shm_some && ms > 1 && ((!dt__ring_recv_done(r) && c->L->shm) || (blocked && c->R->shm)))
			ms = 1; /* a ring may bring something, and it rings no socket */
		int got = poll(p, (nfds_t)np, ms ? ms : 1);
		r->now = dt_now_ns();
		if (got < 0 && errno != EINTR)
			return dt__ring_fail(r, err, DT_IO, "poll failed during %s: %s", r->what, strerror(errno));
		if (got > 0 && ri >= 0 && !c->R->eof && (p[ri].revents & (POLLIN | POLLHUP | POLLERR)) && dt__ring_read_back(r, err))
			return c->failure.status;
		if (shm_some && c->L && c->L->shm && check_sockets(r, err))
			return c->failure.status;
	}
}

/* ---- steps ---- */

/* The COLL_START frame in plain text (sealing encrypts it in place, so each
 * link's copy is packed afresh). */
static void pack_start(struct dt__ring_run *r)
{
	size_t len = dt_coll_start_encode(&r->me, r->start_frame + DT_FRAME_HEADER_SIZE);
	struct dt_frame_header h = dt_frame_header_make(DT_MSG_COLL_START, 0, r->me.seq, len);
	dt_frame_header_pack(&h, r->start_frame);
	r->start_len = DT_FRAME_HEADER_SIZE + len + (r->c->tagged ? DT_AUTH_TAG_BYTES : 0);
}

enum dt_status dt__ring_begin(struct dt__ring_run *r, struct dt_comm *c, unsigned kind, unsigned dtype,
			      uint64_t count, int root, void *buf, const char *name, int64_t deadline,
			      struct dt_err *err)
{
	memset(r, 0, sizeof(*r));
	r->c = c;
	r->buf = r->sbuf = buf;
	r->deadline = deadline;
	r->t0 = r->now = dt_now_ns();
	r->me.seq = c->seq++;
	r->me.kind = (uint8_t)kind;
	r->me.dtype = (uint8_t)dtype;
	r->esize = dtype == DT_WIRE_I64 ? 8 : dtype == DT_WIRE_F32 ? 4 : 1;
	r->add = dtype == DT_WIRE_I64 ? dt__ring_add_i64 : dt__ring_add_f32;
	r->me.count = count;
	r->me.root = (uint32_t)root;
	r->me.rank = (uint32_t)c->rank;
	r->me.nranks = (uint32_t)c->n;
	/* a copy, not snprintf: this is on every small collective's path (r->what too is made only on failure) */
	size_t nlen = name ? strnlen(name, sizeof(r->me.name) - 1) : 0;
	memcpy(r->me.name, name ? name : "", nlen);
	r->me.name[nlen] = 0;
	for (char *p = r->me.name; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	if (c->broken) {
		if (err) {
			*err = c->failure;
			dt_err_prefix(err, "cannot run %s: the ring failed earlier", dt__ring_what(r));
		}
		return c->failure.status;
	}
	pack_start(r);
	dt__shm_set_slow_yield(c, (size_t)count * r->esize);
	r->blamed = c->lrank;
	r->blamed_since = r->t0;
	r->stall_heard = 0;
	int64_t budget = deadline > r->t0 ? deadline - r->t0 : 0;
	r->stall_every = budget / 4;
	if (r->stall_every > DT_NSEC_PER_SEC)
		r->stall_every = DT_NSEC_PER_SEC;
	if (r->stall_every < DT_NSEC_PER_SEC / 20)
		r->stall_every = DT_NSEC_PER_SEC / 20;
	r->next_stall = r->t0 + r->stall_every;
	if (c->n > 1)
		memset(c->used, 0, 2 * (size_t)c->n);
	return DT_OK;
}

/* COLL_START on out link R, or not: a call that is the one R's last START
 * announced again (every field but seq: same kind, dtype, name, root, count,
 * ring size) and begins there with a DATA frame (can_omit) is announced by
 * that frame's request id alone; the receiver matches its call against the
 * last START it got on the link (ring_recv.c). On a link between hosts the
 * START is 32 + 32 + name bytes a hop, as many as 3 of Open MPI's headers
 * (COLLECTIVES.md, "Bytes on the wire"). Returns 1 to leave it out, else
 * remembers it as R's last and returns 0. */
static int start_again(struct dt__ring_run *r, struct dt__out_link *R, int can_omit)
{
	const uint8_t *pl = r->start_frame + DT_FRAME_HEADER_SIZE;
	size_t len = r->start_len - DT_FRAME_HEADER_SIZE - (r->c->tagged ? DT_AUTH_TAG_BYTES : 0);
	DT_ASSERT(len >= 8 && len <= sizeof(R->start_sent));
	if (can_omit && R->start_sent_len == len && memcmp(R->start_sent + 8, pl + 8, len - 8) == 0)
		return 1; /* bytes 0..7 are the seq */
	memcpy(R->start_sent, pl, len);
	R->start_sent_len = len;
	return 0;
}

static enum dt_status run_step(struct dt__ring_run *r, const struct dt__plan *p, void *base, const void *send_base,
			       int to, int from, int by_reference, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	DT_ASSERT((to < 0 || c->out[to].fd >= 0) && (from < 0 || c->in[from].fd >= 0));
	DT_ASSERT((to >= 0 || p->ns == 0) && (from >= 0 || p->nr == 0));
	c->rrank = to;
	c->lrank = from;
	c->R = to >= 0 ? &c->out[to] : NULL;
	c->L = from >= 0 ? &c->in[from] : NULL;
	r->si = p->si;
	r->ri = p->ri;
	r->ns = p->ns;
	r->nr = p->nr;
	r->buf = base;
	r->sbuf = (uint8_t *)(uintptr_t)send_base; /* only read: ring_send.c */
	if (c->tagged && (size_t)p->ns + 1 > c->sealed_cap) {
		free(c->sealed);
		c->sealed_cap = (size_t)p->ns + 1;
		c->sealed = dt_xmallocarray(c->sealed_cap, sizeof(*c->sealed));
	}
	/* COLL_START goes first on each link a collective uses, once: the
	 * receiver matches the call there. A later step on the same link sends
	 * only its data. */
	int first_out = to >= 0 && !c->used[2 * to];
	int first_in = from >= 0 && !c->used[2 * from + 1];
	if (to >= 0)
		c->used[2 * to] = 1;
	if (from >= 0)
		c->used[2 * from + 1] = 1;
	if (first_out && c->tagged)
		pack_start(r);
	if (first_out && start_again(r, c->R, p->ns > 0 && !by_reference))
		first_out = 0;
	r->s_idx = first_out ? -1 : 0;
	r->sealed = r->s_idx;
	r->s_done = 0;
	r->tx_used = 0;
	r->got_start = !first_in;
	r->r_idx = 0;
	r->in_frame = 0;
	r->r_applied = 0;
	r->use_refs = by_reference;
	r->refs_out = r->done_in = r->done_sent = 0;
	r->refs_in = 0;
	int64_t now = r->now;
	r->last_in = r->last_out = now;
	if (from >= 0 && r->blamed != from) {
		r->blamed = from;
		r->blamed_since = now;
		r->stall_heard = 0;
	}
	enum dt_status st = run_plan(r, err);
	dt__comm_use_ring(c);
	return st;
}

enum dt_status dt__ring_step(struct dt__ring_run *r, const struct dt__plan *p, void *base, int to, int from,
			     int by_reference, struct dt_err *err)
{
	return run_step(r, p, base, base, to, from, by_reference, err);
}

enum dt_status dt__ring_step_apart(struct dt__ring_run *r, const struct dt__plan *p, const void *send_base,
				   void *recv_base, int to, int from, struct dt_err *err)
{
	return run_step(r, p, recv_base, send_base, to, from, 0, err);
}
