/*
 * ring_ref.c — the progress engine's same-host part: segments that travel
 * by reference (COLL_REF) on a link where the receiver may read the sender's
 * memory (comm_cma.c agreed it while the ring was set up), and the
 * handshakes that keep those bytes stable while they are read: COLL_DONE
 * from the reader, and the care both sides take when one of them fails.
 */
#include "distribute/ring_run.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"

/* How long a failing rank keeps its buffer for a right neighbour that may
 * still be reading segments it referenced (see dt__ring_release_reader). */
#define RELEASE_WAIT_NS (DT_NSEC_PER_SEC / 2)

/* A failing rank that sent COLL_REFs not yet confirmed must not return (and
 * let its caller free or change the buffer) while the right neighbour may
 * still read it: wait, briefly, until the right neighbour has read them all
 * (COLL_DONE), gave up (COLL_ABORT, normally answering ours) or closed.
 * Should it be stopped past the wait, it still finds our COLL_ABORT before
 * it could call its collective done (dt__ring_pending_abort), so it never succeeds
 * with what it read after we left. */
void dt__ring_release_reader(struct dt__ring_run *r)
{
	struct dt_comm *c = r->c;
	int64_t end = dt_now_ns() + RELEASE_WAIT_NS;
	/* Whatever comes back now is the neighbour's answer: a COLL_DONE, a
	 * COLL_ABORT, or the end of the stream. */
	while (!c->R->eof && c->R->back_len < DT_FRAME_HEADER_SIZE) {
		int ms = dt_deadline_ms_left(end);
		struct pollfd p = { c->R->fd, POLLIN, 0 };
		if (ms <= 0 || poll(&p, 1, ms) <= 0)
			return;
		ssize_t n = recv(c->R->fd, c->R->back + c->R->back_len, sizeof(c->R->back) - c->R->back_len, MSG_DONTWAIT);
		if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
			return;
		if (n > 0)
			c->R->back_len += (size_t)n;
	}
}

/* A COLL_REF from the left: read the segment out of its memory, adding it in
 * pieces that stay in cache when the item reduces. */
enum dt_status dt__ring_apply_ref(struct dt__ring_run *r, const struct dt_frame_header *h, const uint8_t *pl,
				  size_t len, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	const char *from = c->labels[c->lrank];
	const struct dt__coll_item *it = r->r_idx < r->nr ? &r->ri[r->r_idx] : NULL;
	struct dt_coll_ref ref;
	struct dt_err e = DT_ERR_INIT;
	/* Only the ring's left link was agreed to read from (comm_cma.c). */
	if (!c->cma_left_pid || c->lrank != (c->rank - 1 + c->n) % c->n)
		return dt__ring_fail(r, err, DT_PROTOCOL,
				     "unexpected coll_ref from %s during %s: the link was set up to carry bytes", from,
				     r->what);
	if (dt_coll_ref_decode(&ref, pl, len, &e))
		return dt__ring_fail(r, err, DT_PROTOCOL, "bad coll_ref from %s during %s: %s", from, r->what, e.msg);
	if (!r->got_start || h->request_id != r->me.seq || !it || ref.length != it->len)
		return dt__ring_fail(r, err, DT_PROTOCOL,
				     "unexpected coll_ref from %s during %s: #%llu, %llu bytes (expected %s)", from,
				     r->what, (unsigned long long)h->request_id, (unsigned long long)ref.length,
				     !r->got_start ? "coll_start first" : it ? "another size" : "no more data");
	uint8_t *dst = r->buf + it->off;
	int why = 0;
	if (!it->reduce) {
		if (dt__cma_read(c->cma_left_pid, dst, ref.address, it->len, &why))
			goto unreadable;
	} else {
		for (size_t done = 0; done < it->len;) {
			size_t piece = it->len - done < c->cma_stage_cap ? it->len - done : c->cma_stage_cap;
			if (dt__cma_read(c->cma_left_pid, c->cma_stage, ref.address + done, piece, &why))
				goto unreadable;
			r->add(dst + done, c->cma_stage, piece);
			done += piece;
		}
	}
	r->last_in = dt_now_ns();
	r->refs_in++;
	r->r_idx++;
	dt__ring_left_moves(r);
	return DT_OK;
unreadable:
	return dt__ring_fail(r, err, DT_PEER, "cannot read %zu bytes of %s's memory during %s: %s", it->len, from,
			     r->what, strerror(why));
}

/* After the last segment read by reference, before calling the collective
 * done: a COLL_ABORT (or a close) already queued behind it means the left
 * neighbour failed and may have left the collective while we read, so what
 * we read cannot be trusted (dt__ring_release_reader). The abort was sent before the
 * neighbour returned, so on a same-host link it is here by now. */
enum dt_status dt__ring_pending_abort(struct dt__ring_run *r, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	const char *from = c->labels[c->lrank];
	if (c->L->stage_cap > c->L->stage_len) {
		ssize_t n = dt__link_recv(c->L, c->L->stage + c->L->stage_len, c->L->stage_cap - c->L->stage_len);
		if (n > 0)
			c->L->stage_len += (size_t)n;
		else if (n == 0) {
			dt__ring_blame(r, c->lrank, "connection closed");
			return dt__ring_fail(r, err, DT_PEER, "%s closed the connection at the end of %s", from,
					     r->what);
		}
	}
	size_t avail = c->L->stage_len - c->L->stage_pos;
	if (avail < DT_FRAME_HEADER_SIZE)
		return DT_OK;
	struct dt_frame_header h;
	const uint8_t *p = c->L->stage + c->L->stage_pos;
	if (dt_coll_header_parse(p, &h, NULL) || h.type != DT_MSG_COLL_ABORT)
		return DT_OK; /* the next collective's frames, or garbage it will report */
	size_t len = (size_t)h.length, tag = c->tagged ? DT_AUTH_TAG_BYTES : 0;
	if (avail < DT_FRAME_HEADER_SIZE + len + tag)
		return dt__ring_fail(r, err, DT_PEER, "%s gave up %s", from, r->what);
	uint8_t *pl = c->L->stage + c->L->stage_pos + DT_FRAME_HEADER_SIZE;
	if (tag && dt__ring_open(r, &c->L->sec, from, p, pl, len, pl + len, err))
		return c->failure.status;
	c->L->stage_pos += DT_FRAME_HEADER_SIZE + len + tag;
	return dt__ring_on_abort(r, from, pl, len, err);
}

/* Everything the left sent by reference has been read: tell it, so it may
 * return and let its caller change those bytes. */
enum dt_status dt__ring_send_done(struct dt__ring_run *r, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	uint8_t frame[DT_FRAME_HEADER_SIZE + DT_AUTH_TAG_BYTES];
	struct dt_frame_header h = dt_frame_header_make(DT_MSG_COLL_DONE, 0, r->me.seq, 0);
	dt_frame_header_pack(&h, frame);
	size_t total = DT_FRAME_HEADER_SIZE;
	if (c->tagged) {
		dt_wire_seal_to(&c->L->sec, frame, NULL, 0, NULL, frame + DT_FRAME_HEADER_SIZE);
		total += DT_AUTH_TAG_BYTES;
	}
	r->done_sent = 1;
	/* The return path carries one COLL_DONE per collective, which the left
	 * reads before it returns: 48 bytes always fit. */
	ssize_t n = send(c->L->fd, frame, total, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n == (ssize_t)total) {
		dt__link_poke_back(c->L); /* a sender on shared memory sleeps on its futex, not the socket */
		return DT_OK;
	}
	int e = n < 0 ? errno : EAGAIN;
	return dt__ring_fail(r, err, DT_PEER, "cannot tell %s that its segments were read during %s: %s",
			     c->labels[c->lrank], r->what, strerror(e));
}
