/*
 * ring_recv.c — the progress engine's in link (ring.c runs the loop): bytes
 * from the left neighbour land in the link's stage and are parsed there —
 * COLL_START matched against this rank's call, DATA (behind its 16-byte data
 * header) reduced or copied into place as it arrives (whole elements at a
 * time, so the reduction overlaps the transfer of the next bytes), COLL_REF
 * read from the neighbour's memory (ring_ref.c), COLL_STALL and COLL_ABORT
 * taken note of; a tagged ring's frames are checked (and decrypted) whole
 * before any byte is used.
 */
#include "distribute/ring_run.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "net/bytes.h"

/* Largest START, STALL or ABORT payload accepted (all fit in the stage whole). */
#define DT_COLL_CONTROL_MAX 2048u

/* ---- receiving ---- */

/* implied: got is the link's last COLL_START with the seq of a COLL_DATA
 * that came without one (ring.c, start_again). */
static enum dt_status check_start(struct dt__ring_run *r, const struct dt_coll_start *got, int implied,
				  struct dt_err *err)
{
	const struct dt_coll_start *me = &r->me;
	if (got->seq == me->seq && got->kind == me->kind && got->dtype == me->dtype && got->count == me->count &&
	    got->root == me->root && got->nranks == me->nranks && strcmp(got->name, me->name) == 0)
		return DT_OK;
	char theirs[DT_COLL_NAME_WIRE_MAX + 96];
	dt_coll_describe(got, theirs, sizeof(theirs));
	const char *mine = r->c->labels[r->c->rank];
	enum dt_status st = dt__ring_fail(r, err, DT_CONFIG, "collective mismatch: %s called %s but %s called %s%s%s",
					  mine, r->what, r->c->labels[r->c->lrank], theirs,
					  got->nranks != me->nranks ? " (the ring sizes differ)" : "",
					  implied ? " (announced by a coll_data alone: the call of its last coll_start "
						    "on this link again)" : "");
	dt_err_hint(&r->c->failure, "every rank must issue the same collectives, with the same names and sizes, in the same order");
	if (err)
		*err = r->c->failure;
	return st;
}

enum dt_status dt__ring_open(struct dt__ring_run *r, struct dt_wire_sec *sec, const char *from, const uint8_t *hdr,
			     uint8_t *payload, size_t len, const uint8_t *tag, struct dt_err *err)
{
	uint64_t n = sec->rx_n;
	if (dt_wire_open(sec, hdr, payload, len, tag) == 0)
		return DT_OK;
	return dt__ring_fail(r, err, DT_PROTOCOL,
			     "frame %llu (%s, %zu bytes) from %s failed its authentication check during %s (altered or "
			     "injected on the way, or replayed); the ring is closed",
			     (unsigned long long)n, dt_msg_name(dt_get_u16le(hdr + 6)), len, from, r->what);
}

/* Data from the left: whatever it reported missing has shown up. */
void dt__ring_left_moves(struct dt__ring_run *r)
{
	r->blamed = r->c->lrank;
	r->blamed_since = r->last_in;
	r->stall_heard = 0;
}

/* Consumes complete frames and payload bytes from src[*pos, end) — the in
 * link's stage, or (untagged shared-memory links) the ring itself — moving
 * *pos past what it used. */
static enum dt_status parse(struct dt__ring_run *r, uint8_t *src, size_t end, size_t *pos, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	const char *from = c->labels[c->lrank];
	const size_t tag = c->tagged ? DT_AUTH_TAG_BYTES : 0;
	for (;;) {
		size_t avail = end - *pos;
		uint8_t *p = src + *pos;
		if (!r->in_frame) {
			if (r->got_start && r->r_idx >= r->nr)
				return DT_OK; /* the rest belongs to the next collective */
			if (avail == 0)
				return DT_OK;
			const int data = dt_coll_is_data_head(p);
			const size_t hsz = data ? DT_COLL_DATA_HEAD_SIZE : DT_FRAME_HEADER_SIZE;
			if (avail < hsz)
				return DT_OK;
			struct dt_frame_header h;
			struct dt_err e = DT_ERR_INIT;
			if (data ? dt_coll_data_head_parse(p, r->me.seq, &h, &e) : dt_coll_header_parse(p, &h, &e))
				return dt__ring_fail(r, err, DT_PROTOCOL, "bad frame from %s during %s: %s", from,
						     r->what, e.msg);
			if (data) {
				if (!r->got_start && c->L->has_start) {
					/* The sender's call is the last START's again (ring.c,
					 * start_again), its seq this frame's request id. */
					struct dt_coll_start got = c->L->start_seen;
					got.seq = h.request_id;
					c->L->last_seq = got.seq;
					if (check_start(r, &got, 1, err))
						return c->failure.status;
					r->got_start = 1;
				}
				const struct dt__coll_item *it = r->r_idx < r->nr ? &r->ri[r->r_idx] : NULL;
				if (!r->got_start || h.request_id != r->me.seq || !it || h.length != it->len)
					return dt__ring_fail(r, err, DT_PROTOCOL,
							     "unexpected coll_data from %s during %s: #%llu, %llu bytes (expected %s)",
							     from, r->what, (unsigned long long)h.request_id,
							     (unsigned long long)h.length,
							     !r->got_start ? "coll_start first" : it ? "another size" : "no more data");
				if (tag)
					dt_frame_header_pack(&h, r->data_hdr); /* what the tag covers */
				if (tag && it->reduce) {
					/* Nothing unchecked is added in: the whole frame first
					 * (dt__ring_try_recv makes room), then its tag, then the sum. */
					if (avail < DT_COLL_DATA_HEAD_SIZE + it->len + tag)
						return DT_OK;
					uint8_t *pl = p + DT_COLL_DATA_HEAD_SIZE;
					if (dt__ring_open(r, &c->L->sec, from, r->data_hdr, pl, it->len, pl + it->len, err))
						return c->failure.status;
					r->add(r->buf + it->off, pl, it->len);
					*pos += DT_COLL_DATA_HEAD_SIZE + it->len + tag;
					r->r_idx++;
					dt__ring_left_moves(r);
					continue;
				}
				*pos += DT_COLL_DATA_HEAD_SIZE;
				r->in_frame = 1;
				r->r_applied = 0;
				continue;
			}
			if (h.length > DT_COLL_CONTROL_MAX)
				return dt__ring_fail(r, err, DT_PROTOCOL,
						     "%s frame of %llu bytes from %s during %s (at most %u)",
						     dt_msg_name(h.type), (unsigned long long)h.length, from, r->what,
						     DT_COLL_CONTROL_MAX);
			if (avail < DT_FRAME_HEADER_SIZE + h.length + tag)
				return DT_OK; /* small control frames are parsed whole */
			uint8_t *pl = p + DT_FRAME_HEADER_SIZE;
			size_t len = (size_t)h.length;
			if (tag && dt__ring_open(r, &c->L->sec, from, p, pl, len, pl + len, err))
				return c->failure.status;
			*pos += DT_FRAME_HEADER_SIZE + len + tag;
			if (h.type == DT_MSG_COLL_ABORT)
				return dt__ring_on_abort(r, from, pl, len, err);
			if (h.type == DT_MSG_COLL_REF) {
				if (dt__ring_apply_ref(r, &h, pl, len, err))
					return c->failure.status;
				continue;
			}
			if (h.type == DT_MSG_COLL_STALL) {
				struct dt_coll_stall s;
				if (dt_coll_stall_decode(&s, pl, len, &e))
					return dt__ring_fail(r, err, DT_PROTOCOL, "bad frame from %s: %s", from, e.msg);
				/* A notice from an earlier collective still holds: the left
				 * neighbour has not moved on since (it would have sent START). */
				if (h.request_id <= r->me.seq && (int)s.blamed != c->rank && s.blamed < (uint32_t)c->n) {
					r->blamed = (int)s.blamed;
					r->blamed_since = dt_now_ns() - (int64_t)s.waited_ns;
					r->stall_heard = 1;
				}
				continue;
			}
			if (h.type != DT_MSG_COLL_START)
				return dt__ring_fail(r, err, DT_PROTOCOL, "unexpected %s from %s during %s",
						     dt_msg_name(h.type), from, r->what);
			struct dt_coll_start got;
			if (r->got_start || dt_coll_start_decode(&got, pl, len, &e))
				return dt__ring_fail(r, err, DT_PROTOCOL, "bad coll_start from %s during %s: %s", from,
						     r->what, r->got_start ? "a second one" : e.msg);
			c->L->last_seq = got.seq;
			c->L->start_seen = got;
			c->L->has_start = 1;
			if (check_start(r, &got, 0, err))
				return c->failure.status;
			r->got_start = 1;
			dt__ring_left_moves(r);
			continue;
		}
		const struct dt__coll_item *it = &r->ri[r->r_idx];
		if (r->r_applied == it->len) {
			/* Tagged: a copied payload is in place; its tag decides (in
			 * encrypt mode it is decrypted there, or cleared). */
			if (avail < tag)
				return DT_OK;
			if (dt__ring_open(r, &c->L->sec, from, r->data_hdr, r->buf + it->off, it->len, p, err))
				return c->failure.status;
			*pos += tag;
			r->r_idx++;
			r->in_frame = 0;
			continue;
		}
		size_t want = it->len - r->r_applied, take = avail < want ? avail : want;
		if (it->reduce)
			take -= take % r->esize;
		if (take == 0)
			return DT_OK;
		if (it->reduce)
			r->add(r->buf + it->off + r->r_applied, p, take);
		else
			memcpy(r->buf + it->off + r->r_applied, p, take);
		*pos += take;
		r->r_applied += take;
		dt__ring_left_moves(r);
		if (r->r_applied == it->len && !tag) {
			r->r_idx++;
			r->in_frame = 0;
		}
	}
}

enum dt_status dt__ring_parse_stage(struct dt__ring_run *r, struct dt_err *err)
{
	return parse(r, r->c->L->stage, r->c->L->stage_len, &r->c->L->stage_pos, err);
}

/* Tagged rings: the stage bytes the next step of dt__ring_parse_stage needs from
 * stage_pos on: a whole frame once its header is there (all fit the stage). */
static size_t stage_need(const struct dt__ring_run *r)
{
	const struct dt_comm *c = r->c;
	size_t avail = c->L->stage_len - c->L->stage_pos;
	const uint8_t *p = c->L->stage + c->L->stage_pos;
	const int data = avail > 0 && dt_coll_is_data_head(p);
	const size_t hsz = data ? DT_COLL_DATA_HEAD_SIZE : DT_FRAME_HEADER_SIZE;
	if (r->in_frame || avail < hsz)
		return DT_FRAME_HEADER_SIZE + DT_AUTH_TAG_BYTES;
	uint64_t len = data ? dt_get_u32le(p + 8) : dt_get_u64le(p + 20);
	uint64_t need = hsz + len + DT_AUTH_TAG_BYTES;
	return need < c->L->stage_cap ? (size_t)need : c->L->stage_cap; /* a bad length is reported by dt__ring_parse_stage */
}

/* Reads what is there from the left. 1 progress, 0 nothing, -1 error. */
int dt__ring_try_recv(struct dt__ring_run *r, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	if (c->L->stage_pos == c->L->stage_len) {
		c->L->stage_pos = c->L->stage_len = 0;
	} else if (c->L->stage_cap - c->L->stage_len < (c->L->stage_cap >> 2) ||
		   (c->tagged && c->L->stage_cap - c->L->stage_pos < stage_need(r))) {
		memmove(c->L->stage, c->L->stage + c->L->stage_pos, c->L->stage_len - c->L->stage_pos);
		c->L->stage_len -= c->L->stage_pos;
		c->L->stage_pos = 0;
	}
	/* An untagged shared-memory link, nothing staged: the frames are parsed
	 * where they lie in the ring, reduced or copied straight into place
	 * (one pass over the bytes, not a copy into the stage and a second pass
	 * from there). What the parse cannot take from the ring alone (a frame
	 * or an element cut by the ring's wrap, a control frame not wholly
	 * written yet) goes through the stage below. */
	if (c->L->shm && !c->tagged && c->L->stage_pos == c->L->stage_len) {
		uint8_t *src;
		size_t avail = dt__link_peek(c->L, &src), used = 0;
		if (avail) {
			r->last_in = r->now; /* before the parse: dt__ring_left_moves reads it */
			enum dt_status st = parse(r, src, avail, &used, err);
			if (used)
				dt__link_consume(c->L, used);
			if (st)
				return -1;
			if (used)
				return 1;
		}
	}
	/* Inside a payload that is copied, not reduced: receive it in place. */
	if (r->in_frame && c->L->stage_pos == c->L->stage_len && !r->ri[r->r_idx].reduce &&
	    r->r_applied < r->ri[r->r_idx].len) {
		const struct dt__coll_item *it = &r->ri[r->r_idx];
		ssize_t n = dt__link_recv(c->L, r->buf + it->off + r->r_applied, it->len - r->r_applied);
		if (n > 0) {
			r->last_in = r->now;
			r->r_applied += (size_t)n;
			dt__ring_left_moves(r);
			if (r->r_applied == it->len && !c->tagged) {
				r->r_idx++;
				r->in_frame = 0;
			}
			return 1;
		}
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			int e = n == 0 ? 0 : errno;
			dt__ring_blame(r, c->lrank, e ? "connection reset" : "connection closed");
			dt__ring_fail(r, err, DT_PEER, "%s %s during %s%s%s", c->labels[c->lrank],
				      e ? "failed" : "closed the connection", r->what, e ? ": " : "",
				      e ? strerror(e) : "");
			return -1;
		}
		return 0;
	}
	size_t room = c->L->stage_cap - c->L->stage_len;
	if (room == 0)
		return 0;
	ssize_t n = dt__link_recv(c->L, c->L->stage + c->L->stage_len, room);
	if (n > 0) {
		c->L->stage_len += (size_t)n;
		r->last_in = r->now;
		if (dt__ring_parse_stage(r, err))
			return -1;
		return 1;
	}
	if (n == 0) {
		dt__ring_blame(r, c->lrank, "connection closed");
		dt__ring_fail(r, err, DT_PEER, "%s closed the connection during %s", c->labels[c->lrank],
			      r->what);
		return -1;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	int e = errno;
	dt__ring_blame(r, c->lrank, "connection reset");
	dt__ring_fail(r, err, DT_PEER, "cannot receive from %s during %s: %s", c->labels[c->lrank], r->what,
		      strerror(e));
	return -1;
}

/* Parses what the right neighbour sent back: COLL_DONE for this collective's
 * references, or COLL_ABORT. */
