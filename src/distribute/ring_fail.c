/*
 * ring_fail.c — how a collective in flight fails (the progress engine's,
 * ring.c): the comm marked broken and every linked peer told why with a
 * COLL_ABORT (a neighbour's own abort passed on); the stall inspector that
 * tells the ranks waiting on this one whom it is missing (COLL_STALL); and
 * the timeout's message, which names the missing rank and how far the step
 * got.
 */
#include "distribute/ring_run.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"

/* ---- failure ---- */

/* A COLL_ABORT frame with the reason into frame; returns its size. sec: the
 * link's keys on a tagged ring, else NULL. */
static size_t pack_abort(uint8_t frame[DT_FRAME_HEADER_SIZE + DT_REASON_PAYLOAD_MAX + DT_AUTH_TAG_BYTES],
			 struct dt_wire_sec *sec, uint64_t seq, enum dt_status st, const char *text)
{
	uint8_t *pl = frame + DT_FRAME_HEADER_SIZE;
	size_t len = dt_reason_encode(dt_wire_error_from_status(st), text, pl, DT_REASON_PAYLOAD_MAX);
	struct dt_frame_header h = dt_frame_header_make(DT_MSG_COLL_ABORT, 0, seq, len);
	dt_frame_header_pack(&h, frame);
	size_t total = DT_FRAME_HEADER_SIZE + len;
	if (sec) {
		dt_wire_seal_to(sec, frame, pl, len, pl, pl + len);
		total += DT_AUTH_TAG_BYTES;
	}
	return total;
}

/* Best-effort COLL_ABORT to the peer of an out link (over its ring when it
 * has one), then no more: it sees the end after the reason (no RST: our
 * unread bytes are not discarded there). */
static void send_abort_out(struct dt_comm *c, struct dt__out_link *o, uint64_t seq, enum dt_status st,
			   const char *text)
{
	uint8_t frame[DT_FRAME_HEADER_SIZE + DT_REASON_PAYLOAD_MAX + DT_AUTH_TAG_BYTES];
	size_t total = pack_abort(frame, c->tagged ? &o->sec : NULL, seq, st, text);
	ssize_t n = dt__link_send_frame(o, frame, total);
	(void)n; /* a full or dead link: the neighbour sees the close instead */
	dt__link_shut(o);
}

/* The same back on an in link's socket (the return path), waking the peer
 * if it sleeps on shared memory. */
static void send_abort_in(struct dt_comm *c, struct dt__in_link *i, uint64_t seq, enum dt_status st,
			  const char *text)
{
	uint8_t frame[DT_FRAME_HEADER_SIZE + DT_REASON_PAYLOAD_MAX + DT_AUTH_TAG_BYTES];
	size_t total = pack_abort(frame, c->tagged ? &i->sec : NULL, seq, st, text);
	ssize_t n = send(i->fd, frame, total, MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)n;
	shutdown(i->fd, SHUT_WR);
	dt__link_poke_back(i);
}

/* Marks the comm broken, tells every linked peer (`reason`: the root cause
 * to forward; NULL: this error's own message), returns st. Telling them all,
 * not just this step's partners, is what stops every rank of a tree or
 * butterfly at once: whoever waits on this rank hears it, on any link. */
static enum dt_status fail_with(struct dt__ring_run *r, struct dt_err *err, const char *reason)
{
	struct dt_comm *c = r->c;
	c->broken = 1;
	if (err && err != &c->failure)
		c->failure = *err;
	const char *text = reason ? reason : c->failure.msg;
	if (c->R) {
		/* Mid-frame on the step's out link a reason cannot be framed: just close it. */
		if (r->s_done == 0 && r->ctrl_sent == 0) {
			/* Frames sealed but not sent never will be: the abort takes the
			 * number of the first of them, the one the peer expects next. */
			if (c->tagged)
				c->R->sec.tx_n -= (uint64_t)(r->sealed - r->s_idx) + (uint64_t)r->ctrl_sealed;
			send_abort_out(c, c->R, r->me.seq, c->failure.status, text);
		} else {
			dt__link_shut(c->R);
		}
	}
	if (c->L)
		send_abort_in(c, c->L, r->me.seq, c->failure.status, text);
	/* The other links are between frames (a step ends once all it sent has left). */
	for (int q = 0; q < c->n; q++) {
		if (c->out[q].fd >= 0 && &c->out[q] != c->R)
			send_abort_out(c, &c->out[q], r->me.seq, c->failure.status, text);
		if (c->in[q].fd >= 0 && &c->in[q] != c->L)
			send_abort_in(c, &c->in[q], r->me.seq, c->failure.status, text);
	}
	if (r->refs_out && !r->done_in)
		dt__ring_release_reader(r);
	return c->failure.status;
}

void dt__ring_blame(struct dt__ring_run *r, int rank, const char *why)
{
	struct dt_comm *c = r->c;
	if (c->broken || c->lost >= 0 || rank < 0 || rank >= c->n)
		return;
	c->lost = rank;
	snprintf(c->lost_why, sizeof(c->lost_why), "%s", why);
}

const char *dt__ring_what(struct dt__ring_run *r)
{
	if (!r->what[0])
		dt_coll_describe(&r->me, r->what, sizeof(r->what));
	return r->what;
}

enum dt_status dt__ring_fail(struct dt__ring_run *r, struct dt_err *err, enum dt_status st, const char *fmt,
			     ...)
{
	struct dt_err *e = &r->c->failure;
	dt__ring_what(r); /* before the arguments are formatted: they may point at it */
	va_list ap;
	va_start(ap, fmt);
	char msg[DT_ERR_MSG_MAX];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dt_err_set(e, st, "%s", msg);
	if (err)
		*err = *e;
	return fail_with(r, NULL, NULL);
}


enum dt_status dt__ring_on_abort(struct dt__ring_run *r, const char *from, const uint8_t *p, size_t len,
				 struct dt_err *err) { struct dt_reason_msg m;
	struct dt_err e = DT_ERR_INIT;
	dt__ring_what(r);
	if (dt_reason_decode(&m, p, len, &e))
		return dt__ring_fail(r, err, DT_PROTOCOL, "bad coll_abort from %s during %s: %s", from, r->what, e.msg);
	enum dt_status st = dt_wire_error_to_status(m.code);
	/* Told of a failure, but the ranks waiting had named whom they wait on
	 * (COLL_STALL): the elastic agreement counts on it (dt_comm_lost_rank),
	 * so this rank does not report to a stopped rank first. */
	if (r->stall_heard) {
		char why[48];
		snprintf(why, sizeof(why), "no answer for %.1f s", (double)(dt_now_ns() - r->blamed_since) / 1e9);
		dt__ring_blame(r, r->blamed, why);
	}
	dt_err_set(&r->c->failure, st, "%s gave up %s: %s", from, r->what, m.text);
	if (err)
		*err = r->c->failure;
	return fail_with(r, NULL, m.text);
}

/* ---- stalls and deadlines ---- */

/* A stall notice to every out link but the step's own (which queues it
 * between its frames, below): in a butterfly or a tree the ranks that will
 * wait on this one are not its current partner, and they should learn whom
 * to blame. Best effort and whole frames only: a link that is not writable
 * now is skipped (its peer is behind anyway). */
static void stall_others(struct dt__ring_run *r, const struct dt_coll_stall *s)
{
	struct dt_comm *c = r->c;
	for (int q = 0; q < c->n; q++) {
		struct dt__out_link *o = &c->out[q];
		if (o->fd < 0 || o == c->R || (uint32_t)q == s->blamed)
			continue;
		struct pollfd pf = { o->fd, POLLOUT, 0 };
		if (!o->shm && (poll(&pf, 1, 0) != 1 || !(pf.revents & POLLOUT)))
			continue;
		uint8_t f[DT_FRAME_HEADER_SIZE + DT_COLL_STALL_BYTES + DT_AUTH_TAG_BYTES];
		uint8_t *pl = f + DT_FRAME_HEADER_SIZE;
		dt_coll_stall_encode(s, pl);
		struct dt_frame_header h = dt_frame_header_make(DT_MSG_COLL_STALL, 0, r->me.seq, DT_COLL_STALL_BYTES);
		dt_frame_header_pack(&h, f);
		size_t len = DT_FRAME_HEADER_SIZE + DT_COLL_STALL_BYTES;
		if (c->tagged) {
			dt_wire_seal_to(&o->sec, f, pl, DT_COLL_STALL_BYTES, pl, pl + DT_COLL_STALL_BYTES);
			len += DT_AUTH_TAG_BYTES;
		}
		ssize_t n = dt__link_send_frame(o, f, len);
		if (n < 0 && c->tagged)
			o->sec.tx_n--; /* not sent: its number goes to the next frame */
		else if (n >= 0 && (size_t)n < len)
			dt__link_shut(o); /* a torn frame: the peer sees a close, not garbage */
	}
}

void dt__ring_queue_stall(struct dt__ring_run *r, int64_t now)
{
	if (dt__ring_recv_done(r))
		return;
	struct dt_coll_stall s = { (uint32_t)r->c->rank, (uint32_t)r->blamed, (uint64_t)(now - r->blamed_since) };
	stall_others(r, &s);
	if (r->ctrl_len || !r->c->R)
		return;
	dt_coll_stall_encode(&s, r->ctrl + DT_FRAME_HEADER_SIZE);
	struct dt_frame_header h = dt_frame_header_make(DT_MSG_COLL_STALL, 0, r->me.seq, DT_COLL_STALL_BYTES);
	dt_frame_header_pack(&h, r->ctrl);
	r->ctrl_len = DT_FRAME_HEADER_SIZE + DT_COLL_STALL_BYTES + (r->c->tagged ? DT_AUTH_TAG_BYTES : 0);
	r->ctrl_sent = 0;
	r->ctrl_sealed = 0; /* sealed when it goes (dt__ring_try_send) */
}

enum dt_status dt__ring_timed_out(struct dt__ring_run *r, int64_t now, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	double waited = (double)(now - r->t0) / 1e9;
	if (!dt__ring_recv_done(r)) {
		int left = c->lrank;
		char progress[160];
		if (!r->got_start) {
			if (c->L->last_seq == UINT64_MAX)
				snprintf(progress, sizeof(progress), "%s has not started it (no collective from it yet)",
					 c->labels[left]);
			else
				snprintf(progress, sizeof(progress), "%s has not started it (its last was #%llu)",
					 c->labels[left], (unsigned long long)c->L->last_seq);
		} else {
			snprintf(progress, sizeof(progress), "%ld of %ld segments from %s arrived", r->r_idx, r->nr,
				 c->labels[left]);
		}
		double since = (double)(now - r->blamed_since) / 1e9;
		char why[48];
		snprintf(why, sizeof(why), "no answer for %.1f s", since);
		dt__ring_blame(r, r->blamed, why);
		if (r->blamed != left)
			return dt__ring_fail(r, err, DT_TIMEOUT,
					     "%s timed out after %.1f s: missing rank %s (nothing from it for %.1f s, reported by "
					     "the ranks waiting for it); %s",
					     r->what, waited, c->labels[r->blamed], since, progress);
		return dt__ring_fail(r, err, DT_TIMEOUT,
				     "%s timed out after %.1f s: missing rank %s (nothing from it for %.1f s); %s",
				     r->what, waited, c->labels[left], since, progress);
	}
	char why[48];
	snprintf(why, sizeof(why), "no answer for %.1f s", waited);
	dt__ring_blame(r, c->rrank, why);
	if (r->s_idx >= r->ns)
		return dt__ring_fail(r, err, DT_TIMEOUT,
				     "%s timed out after %.1f s: %s has not confirmed reading this rank's segments (%.1f s since "
				     "the last was sent)",
				     r->what, waited, c->labels[c->rrank], (double)(now - r->last_out) / 1e9);
	size_t unsent = 0;
	for (long k = r->s_idx; k < r->ns; k++)
		unsent += dt__ring_frame_size(r, k);
	unsent -= r->s_done;
	return dt__ring_fail(r, err, DT_TIMEOUT,
			     "%s timed out after %.1f s: %s is not reading (%zu bytes unsent for %.1f s)", r->what,
			     waited, c->labels[c->rrank], unsent, (double)(now - r->last_out) / 1e9);
}
