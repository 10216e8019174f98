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
 */
#include "distribute/ring_run.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "net/bytes.h"

#define IOV_FRAMES 16 /* DATA frames gathered into one sendmsg */
/* Largest START, STALL or ABORT payload accepted (all fit in the stage whole). */
#define DT_COLL_CONTROL_MAX 2048u



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

enum dt_status dt__ring_fail(struct dt__ring_run *r, struct dt_err *err, enum dt_status st, const char *fmt,
			     ...) { struct dt_err *e = &r->c->failure;
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

/* ---- reduction ---- */

/* dst[i] += src[i] over bytes/4 floats; src may be unaligned (it sits in the
 * stage after variable-length frames). GCC's vector extension, because -O2's
 * cheap cost model leaves the plain loop scalar (it would need an alias check):
 * 8 floats per step, loads and stores through memcpy. */
typedef float dt__v8sf __attribute__((vector_size(32)));

void dt__ring_add_f32(uint8_t *restrict dst, const uint8_t *restrict src, size_t bytes)
{
	size_t n = bytes / 4, i = 0;
	for (; i + 8 <= n; i += 8) {
		dt__v8sf a, b;
		memcpy(&a, dst + 4 * i, sizeof(a));
		memcpy(&b, src + 4 * i, sizeof(b));
		a += b;
		memcpy(dst + 4 * i, &a, sizeof(a));
	}
	for (; i < n; i++) {
		float a, b;
		memcpy(&a, dst + 4 * i, 4);
		memcpy(&b, src + 4 * i, 4);
		a += b;
		memcpy(dst + 4 * i, &a, 4);
	}
}

/* Wrapping int64 sums (unsigned arithmetic: signed overflow is undefined in
 * C; two's complement wraps the same in any order, so the result does not
 * depend on the ring's order even if a caller lets it wrap). */
void dt__ring_add_i64(uint8_t *restrict dst, const uint8_t *restrict src, size_t bytes)
{
	size_t n = bytes / 8;
	for (size_t i = 0; i < n; i++) {
		uint64_t a, b;
		memcpy(&a, dst + 8 * i, 8);
		memcpy(&b, src + 8 * i, 8);
		a += b;
		memcpy(dst + 8 * i, &a, 8);
	}
}

/* ---- sending ---- */

static int send_ready(const struct dt__ring_run *r, long k)
{
	return k < 0 || r->si[k].dep < 0 || r->si[k].dep < r->r_idx;
}

/* Send item k goes by reference (COLL_REF) rather than as bytes. */
static int by_ref(const struct dt__ring_run *r, long k)
{
	return k >= 0 && r->use_refs;
}

static size_t frame_size(const struct dt__ring_run *r, long k)
{
	if (k < 0)
		return r->start_len;
	return DT_FRAME_HEADER_SIZE + (by_ref(r, k) ? DT_COLL_REF_BYTES : r->si[k].len) +
	       (r->c->tagged ? DT_AUTH_TAG_BYTES : 0);
}

/* Send item k's header, and a COLL_REF's payload after it, into h. */
static void pack_head(const struct dt__ring_run *r, long k, uint8_t h[DT_FRAME_HEADER_SIZE + DT_COLL_REF_BYTES])
{
	const struct dt__coll_item *it = &r->si[k];
	if (by_ref(r, k)) {
		struct dt_frame_header fh = dt_frame_header_make(DT_MSG_COLL_REF, 0, r->me.seq, DT_COLL_REF_BYTES);
		dt_frame_header_pack(&fh, h);
		struct dt_coll_ref ref = { (uint64_t)(uintptr_t)(r->buf + it->off), it->len };
		dt_coll_ref_encode(&ref, h + DT_FRAME_HEADER_SIZE);
		return;
	}
	struct dt_frame_header fh = dt_frame_header_make(DT_MSG_COLL_DATA, 0, r->me.seq, it->len);
	dt_frame_header_pack(&fh, h);
}

/* Tagged rings: seals frame k (== r->sealed: frames are numbered in the
 * order they leave), h its header from pack_head. 0, or -1 when it must wait:
 * a stall notice is queued (it goes before any newly sealed frame), or in
 * encrypt mode the ciphertext window is full until what was sealed is sent.
 * The tag is computed over the bytes that will leave (the plan does not
 * change a send item's bytes until the right neighbour has had them). */
static int seal(struct dt__ring_run *r, long k, const uint8_t *h)
{
	struct dt_comm *c = r->c;
	struct dt_wire_sec *sec = &c->R->sec;
	if (r->ctrl_len && !r->ctrl_sealed)
		return -1;
	if (k < 0) {
		size_t len = r->start_len - DT_FRAME_HEADER_SIZE - DT_AUTH_TAG_BYTES;
		uint8_t *pl = r->start_frame + DT_FRAME_HEADER_SIZE;
		dt_wire_seal_to(sec, r->start_frame, pl, len, pl, pl + len);
		r->sealed++;
		return 0;
	}
	const struct dt__coll_item *it = &r->si[k];
	struct dt__sealed *sd = &c->sealed[k + 1];
	if (by_ref(r, k)) {
		memcpy(sd->ref, h + DT_FRAME_HEADER_SIZE, DT_COLL_REF_BYTES);
		dt_wire_seal_to(sec, h, sd->ref, DT_COLL_REF_BYTES, sd->ref, sd->tag);
	} else if (sec->mode == DT_WIRE_ENCRYPT) {
		if (r->s_idx == r->sealed)
			r->tx_used = 0; /* everything sealed before has left */
		if (r->tx_used + it->len > c->txbuf_cap)
			return -1;
		sd->off = r->tx_used;
		dt_wire_seal_to(sec, h, r->buf + it->off, it->len, c->txbuf + sd->off, sd->tag);
		r->tx_used += it->len;
	} else {
		dt_wire_seal_to(sec, h, r->buf + it->off, it->len, NULL, sd->tag);
	}
	r->sealed++;
	return 0;
}

/* Appends a frame's pieces to iov after skipping its first `skip` bytes. */
static int add_pieces(struct iovec *iov, int cnt, size_t skip, const struct iovec *pieces, int np)
{
	for (int i = 0; i < np; i++) {
		if (skip >= pieces[i].iov_len) {
			skip -= pieces[i].iov_len;
			continue;
		}
		iov[cnt++] = (struct iovec){ (uint8_t *)pieces[i].iov_base + skip, pieces[i].iov_len - skip };
		skip = 0;
	}
	return cnt;
}

/* Sends what can go now. Returns 1 if bytes left, 0 if nothing could move,
 * -1 on error (err set). *blocked: the socket is full. */
static enum dt_status read_back(struct dt__ring_run *r, struct dt_err *err);

static int try_send(struct dt__ring_run *r, int *blocked, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	const int tagged = c->tagged;
	*blocked = 0;
	struct iovec iov[3 * IOV_FRAMES + 2];
	uint8_t hdrs[IOV_FRAMES][DT_FRAME_HEADER_SIZE + DT_COLL_REF_BYTES];
	int cnt = 0, nh = 0;
	/* A stall notice goes between frames; on a tagged ring only once every
	 * frame sealed before it has left (seal() seals none while it waits). */
	int ctrl_first = r->ctrl_len && (r->ctrl_sent || r->ctrl_sealed ||
					 (r->s_done == 0 && (!tagged || r->sealed == r->s_idx)));
	if (ctrl_first) {
		if (tagged && !r->ctrl_sealed) {
			uint8_t *pl = r->ctrl + DT_FRAME_HEADER_SIZE;
			dt_wire_seal_to(&c->R->sec, r->ctrl, pl, DT_COLL_STALL_BYTES, pl, pl + DT_COLL_STALL_BYTES);
			r->ctrl_sealed = 1;
		}
		iov[cnt++] = (struct iovec){ r->ctrl + r->ctrl_sent, r->ctrl_len - r->ctrl_sent };
	}
	if (!(ctrl_first && r->ctrl_sent)) {
		for (long k = r->s_idx; k < r->ns && nh < IOV_FRAMES && send_ready(r, k); k++) {
			size_t skip = k == r->s_idx ? r->s_done : 0;
			if (k < 0) {
				if (tagged && k == r->sealed && seal(r, k, NULL))
					break;
				iov[cnt++] = (struct iovec){ r->start_frame + skip, r->start_len - skip };
				continue;
			}
			const struct dt__coll_item *it = &r->si[k];
			uint8_t *h = hdrs[nh];
			pack_head(r, k, h);
			if (tagged && k == r->sealed && seal(r, k, h))
				break;
			nh++;
			int ref = by_ref(r, k);
			if (ref)
				r->refs_out = 1;
			struct iovec pieces[3];
			int np = 0;
			pieces[np++] = (struct iovec){ h, DT_FRAME_HEADER_SIZE + (ref ? DT_COLL_REF_BYTES : 0) };
			if (!tagged) {
				if (!ref)
					pieces[np++] = (struct iovec){ r->buf + it->off, it->len };
			} else {
				struct dt__sealed *sd = &c->sealed[k + 1];
				if (ref)
					memcpy(h + DT_FRAME_HEADER_SIZE, sd->ref, DT_COLL_REF_BYTES);
				else if (c->R->sec.mode == DT_WIRE_ENCRYPT)
					pieces[np++] = (struct iovec){ c->txbuf + sd->off, it->len };
				else
					pieces[np++] = (struct iovec){ r->buf + it->off, it->len };
				pieces[np++] = (struct iovec){ sd->tag, DT_AUTH_TAG_BYTES };
			}
			cnt = add_pieces(iov, cnt, skip, pieces, np);
		}
	}
	if (cnt == 0)
		return 0;
	ssize_t n = dt__link_sendv(r->c->R, iov, cnt);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
			*blocked = errno != EINTR;
			return 0;
		}
		int e = errno;
		/* A peer that gave up sent its reason (COLL_ABORT) back on this
		 * link before it closed: the root cause names the rank that
		 * failed first, which the broken pipe alone would hide. */
		if ((e == EPIPE || e == ECONNRESET) && read_back(r, err))
			return -1;
		dt__ring_fail(r, err, DT_PEER, "cannot send to %s during %s: %s", r->c->labels[r->c->rrank],
			      r->what, strerror(e));
		return -1;
	}
	r->last_out = dt_now_ns();
	size_t left = (size_t)n;
	if (ctrl_first) {
		size_t take = r->ctrl_len - r->ctrl_sent;
		if (left < take) {
			r->ctrl_sent += left;
			return 1;
		}
		left -= take;
		r->ctrl_len = r->ctrl_sent = 0;
		r->ctrl_sealed = 0;
	}
	while (left > 0) {
		size_t rest = frame_size(r, r->s_idx) - r->s_done;
		if (left < rest) {
			r->s_done += left;
			break;
		}
		left -= rest;
		r->s_idx++;
		r->s_done = 0;
	}
	/* Zero-length leftovers: frames of length 0 do not exist (plans skip empty segments). */
	return 1;
}

/* ---- receiving ---- */

static enum dt_status check_start(struct dt__ring_run *r, const struct dt_coll_start *got, struct dt_err *err)
{
	const struct dt_coll_start *me = &r->me;
	if (got->seq == me->seq && got->kind == me->kind && got->dtype == me->dtype && got->count == me->count &&
	    got->root == me->root && got->nranks == me->nranks && strcmp(got->name, me->name) == 0)
		return DT_OK;
	char theirs[DT_COLL_NAME_WIRE_MAX + 96];
	dt_coll_describe(got, theirs, sizeof(theirs));
	const char *mine = r->c->labels[r->c->rank];
	enum dt_status st = dt__ring_fail(r, err, DT_CONFIG, "collective mismatch: %s called %s but %s called %s%s",
					  mine, r->what, r->c->labels[r->c->lrank], theirs,
					  got->nranks != me->nranks ? " (the ring sizes differ)" : "");
	dt_err_hint(&r->c->failure, "every rank must issue the same collectives, with the same names and sizes, in the same order");
	if (err)
		*err = r->c->failure;
	return st;
}

enum dt_status dt__ring_on_abort(struct dt__ring_run *r, const char *from, const uint8_t *p, size_t len,
				 struct dt_err *err) { struct dt_reason_msg m;
	struct dt_err e = DT_ERR_INIT;
	if (dt_reason_decode(&m, p, len, &e))
		return dt__ring_fail(r, err, DT_PROTOCOL, "bad coll_abort from %s during %s: %s", from, r->what, e.msg);
	enum dt_status st = dt_wire_error_to_status(m.code);
	dt_err_set(&r->c->failure, st, "%s gave up %s: %s", from, r->what, m.text);
	if (err)
		*err = r->c->failure;
	return fail_with(r, NULL, m.text);
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
}

/* Consumes complete frames and payload bytes from the stage. */
static enum dt_status parse_stage(struct dt__ring_run *r, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	const char *from = c->labels[c->lrank];
	const size_t tag = c->tagged ? DT_AUTH_TAG_BYTES : 0;
	for (;;) {
		size_t avail = c->L->stage_len - c->L->stage_pos;
		uint8_t *p = c->L->stage + c->L->stage_pos;
		if (!r->in_frame) {
			if (r->got_start && r->r_idx >= r->nr)
				return DT_OK; /* the rest belongs to the next collective */
			if (avail < DT_FRAME_HEADER_SIZE)
				return DT_OK;
			struct dt_frame_header h;
			struct dt_err e = DT_ERR_INIT;
			if (dt_coll_header_parse(p, &h, &e))
				return dt__ring_fail(r, err, DT_PROTOCOL, "bad frame from %s during %s: %s", from,
						     r->what, e.msg);
			if (h.type == DT_MSG_COLL_DATA) {
				const struct dt__coll_item *it = r->r_idx < r->nr ? &r->ri[r->r_idx] : NULL;
				if (!r->got_start || h.request_id != r->me.seq || !it || h.length != it->len)
					return dt__ring_fail(r, err, DT_PROTOCOL,
							     "unexpected coll_data from %s during %s: #%llu, %llu bytes (expected %s)",
							     from, r->what, (unsigned long long)h.request_id,
							     (unsigned long long)h.length,
							     !r->got_start ? "coll_start first" : it ? "another size" : "no more data");
				if (tag && it->reduce) {
					/* Nothing unchecked is added in: the whole frame first
					 * (try_recv makes room), then its tag, then the sum. */
					if (avail < DT_FRAME_HEADER_SIZE + it->len + tag)
						return DT_OK;
					uint8_t *pl = p + DT_FRAME_HEADER_SIZE;
					if (dt__ring_open(r, &c->L->sec, from, p, pl, it->len, pl + it->len, err))
						return c->failure.status;
					r->add(r->buf + it->off, pl, it->len);
					c->L->stage_pos += DT_FRAME_HEADER_SIZE + it->len + tag;
					r->r_idx++;
					dt__ring_left_moves(r);
					continue;
				}
				memcpy(r->data_hdr, p, DT_FRAME_HEADER_SIZE);
				c->L->stage_pos += DT_FRAME_HEADER_SIZE;
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
			c->L->stage_pos += DT_FRAME_HEADER_SIZE + len + tag;
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
			if (check_start(r, &got, err))
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
			c->L->stage_pos += tag;
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
		c->L->stage_pos += take;
		r->r_applied += take;
		dt__ring_left_moves(r);
		if (r->r_applied == it->len && !tag) {
			r->r_idx++;
			r->in_frame = 0;
		}
	}
}

static int recv_done(const struct dt__ring_run *r)
{
	return r->got_start && r->r_idx >= r->nr;
}

/* Tagged rings: the stage bytes the next step of parse_stage needs from
 * stage_pos on: a whole frame once its header is there (all fit the stage). */
static size_t stage_need(const struct dt__ring_run *r)
{
	const struct dt_comm *c = r->c;
	size_t avail = c->L->stage_len - c->L->stage_pos;
	if (r->in_frame || avail < DT_FRAME_HEADER_SIZE)
		return DT_FRAME_HEADER_SIZE + DT_AUTH_TAG_BYTES;
	uint64_t len = dt_get_u64le(c->L->stage + c->L->stage_pos + 20);
	uint64_t need = DT_FRAME_HEADER_SIZE + len + DT_AUTH_TAG_BYTES;
	return need < c->L->stage_cap ? (size_t)need : c->L->stage_cap; /* a bad length is reported by parse_stage */
}

/* Reads what is there from the left. 1 progress, 0 nothing, -1 error. */
static int try_recv(struct dt__ring_run *r, struct dt_err *err)
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
	/* Inside a payload that is copied, not reduced: receive it in place. */
	if (r->in_frame && c->L->stage_pos == c->L->stage_len && !r->ri[r->r_idx].reduce &&
	    r->r_applied < r->ri[r->r_idx].len) {
		const struct dt__coll_item *it = &r->ri[r->r_idx];
		ssize_t n = dt__link_recv(c->L, r->buf + it->off + r->r_applied, it->len - r->r_applied);
		if (n > 0) {
			r->last_in = dt_now_ns();
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
		r->last_in = dt_now_ns();
		if (parse_stage(r, err))
			return -1;
		return 1;
	}
	if (n == 0) {
		dt__ring_fail(r, err, DT_PEER, "%s closed the connection during %s", c->labels[c->lrank],
			      r->what);
		return -1;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	int e = errno;
	dt__ring_fail(r, err, DT_PEER, "cannot receive from %s during %s: %s", c->labels[c->lrank], r->what,
		      strerror(e));
	return -1;
}

/* Parses what the right neighbour sent back: COLL_DONE for this collective's
 * references, or COLL_ABORT. */
static enum dt_status parse_back(struct dt__ring_run *r, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	const char *from = c->labels[c->rrank];
	const size_t tag = c->tagged ? DT_AUTH_TAG_BYTES : 0;
	while (c->R->back_len >= DT_FRAME_HEADER_SIZE) {
		struct dt_frame_header h;
		struct dt_err e = DT_ERR_INIT;
		if (dt_coll_header_parse(c->R->back, &h, &e) ||
		    (h.type != DT_MSG_COLL_ABORT && h.type != DT_MSG_COLL_DONE) || h.length > DT_REASON_PAYLOAD_MAX)
			return dt__ring_fail(r, err, DT_PROTOCOL,
					     "unexpected frame from %s on the ring's return path: %s", from,
					     e.msg[0] ? e.msg : dt_msg_name(h.type));
		size_t len = (size_t)h.length;
		uint8_t *pl = c->R->back + DT_FRAME_HEADER_SIZE;
		if (h.type == DT_MSG_COLL_ABORT) {
			if (c->R->back_len < DT_FRAME_HEADER_SIZE + len + tag)
				return DT_OK;
			if (tag && dt__ring_open(r, &c->R->sec, from, c->R->back, pl, len, pl + len, err))
				return c->failure.status;
			return dt__ring_on_abort(r, from, pl, len, err);
		}
		if (h.length != 0 || h.request_id != r->me.seq || !r->refs_out || r->done_in)
			return dt__ring_fail(r, err, DT_PROTOCOL,
					     "unexpected coll_done from %s during %s: #%llu, %llu bytes", from, r->what,
					     (unsigned long long)h.request_id, (unsigned long long)h.length);
		if (c->R->back_len < DT_FRAME_HEADER_SIZE + tag)
			return DT_OK;
		if (tag && dt__ring_open(r, &c->R->sec, from, c->R->back, pl, 0, pl, err))
			return c->failure.status;
		r->done_in = 1;
		c->R->back_len -= DT_FRAME_HEADER_SIZE + tag;
		memmove(c->R->back, c->R->back + DT_FRAME_HEADER_SIZE + tag, c->R->back_len);
	}
	return DT_OK;
}

/* Reads what the right neighbour sends back: COLL_DONE, COLL_ABORT, or a close. */
static enum dt_status read_back(struct dt__ring_run *r, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	const char *from = c->labels[c->rrank];
	for (;;) {
		size_t room = sizeof(c->R->back) - c->R->back_len;
		ssize_t n = room ? recv(c->R->fd, c->R->back + c->R->back_len, room, MSG_DONTWAIT) : 0;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return DT_OK;
		if (n > 0)
			c->R->back_len += (size_t)n;
		if (parse_back(r, err))
			return c->failure.status;
		if (n == 0) {
			/* A right neighbour that got all it needs from us may finish and
			 * close first; before that, closing is a failure. */
			if (r->s_idx >= r->ns && !r->ctrl_len && (!r->refs_out || r->done_in)) {
				c->R->eof = 1;
				return DT_OK;
			}
			return dt__ring_fail(r, err, DT_PEER, "%s closed the connection during %s", from, r->what);
		}
		if (n < 0) {
			int e = errno;
			return dt__ring_fail(r, err, DT_PEER, "connection to %s failed during %s: %s", from, r->what,
					     strerror(e));
		}
	}
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

static void queue_stall(struct dt__ring_run *r, int64_t now)
{
	if (recv_done(r))
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
	r->ctrl_sealed = 0; /* sealed when it goes (try_send) */
}

static enum dt_status timed_out(struct dt__ring_run *r, int64_t now, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	double waited = (double)(now - r->t0) / 1e9;
	if (!recv_done(r)) {
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
		if (r->blamed != left)
			return dt__ring_fail(r, err, DT_TIMEOUT,
					     "%s timed out after %.1f s: missing rank %s (nothing from it for %.1f s, reported by "
					     "the ranks waiting for it); %s",
					     r->what, waited, c->labels[r->blamed], since, progress);
		return dt__ring_fail(r, err, DT_TIMEOUT,
				     "%s timed out after %.1f s: missing rank %s (nothing from it for %.1f s); %s",
				     r->what, waited, c->labels[left], since, progress);
	}
	if (r->s_idx >= r->ns)
		return dt__ring_fail(r, err, DT_TIMEOUT,
				     "%s timed out after %.1f s: %s has not confirmed reading this rank's segments (%.1f s since "
				     "the last was sent)",
				     r->what, waited, c->labels[c->rrank], (double)(now - r->last_out) / 1e9);
	size_t unsent = 0;
	for (long k = r->s_idx; k < r->ns; k++)
		unsent += frame_size(r, k);
	unsent -= r->s_done;
	return dt__ring_fail(r, err, DT_TIMEOUT,
			     "%s timed out after %.1f s: %s is not reading (%zu bytes unsent for %.1f s)", r->what,
			     waited, c->labels[c->rrank], unsent, (double)(now - r->last_out) / 1e9);
}

/* ---- the loop ---- */

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
		return read_back(r, err);
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
	int64_t idle_since = 0;
	unsigned rounds = 0;
	for (;;) {
		int moved = 0, blocked = 0;
		if (r->s_idx < r->ns || r->ctrl_len) {
			int k = try_send(r, &blocked, err);
			if (k < 0)
				return c->failure.status;
			moved |= k;
		}
		if (!recv_done(r)) {
			if (c->L->stage_pos < c->L->stage_len && parse_stage(r, err))
				return c->failure.status;
			int k = recv_done(r) ? 0 : try_recv(r, err);
			if (k < 0)
				return c->failure.status;
			moved |= k;
		}
		if (r->refs_in && !r->done_sent && recv_done(r) && (dt__ring_pending_abort(r, err) || dt__ring_send_done(r, err)))
			return c->failure.status;
		if (r->s_idx >= r->ns && recv_done(r) && (!r->refs_out || r->done_in)) {
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
		int64_t now = dt_now_ns();
		if (moved) {
			idle_since = 0;
		} else if (spin_ns) {
			if (!idle_since)
				idle_since = now;
			if (now - idle_since < spin_ns)
				continue;
		}
		if (now >= r->deadline)
			return timed_out(r, now, err);
		if (now >= r->next_stall) {
			queue_stall(r, now);
			r->next_stall = now + r->stall_every;
			continue;
		}
		if (moved)
			continue;
		int64_t wake = r->next_stall < r->deadline ? r->next_stall : r->deadline;
		/* Only COLL_DONE awaited (the reader's answer to COLL_REFs): it comes
		 * on the socket, so sleep there; the reader's poke may come before
		 * the bytes do when the loopback's softirq is deferred. */
		if (shm_step && (!recv_done(r) || blocked)) {
			int look = 0;
			dt__shm_wait(c, !recv_done(r), blocked, wake, &look);
			if (look && check_sockets(r, err))
				return c->failure.status;
			continue;
		}
		struct pollfd p[2];
		int np = 0;
		if (!recv_done(r))
			p[np++] = (struct pollfd){ c->L->fd, POLLIN, 0 };
		int ri = -1;
		int want_out = blocked && c->R && !c->R->shm; /* a full ring is not a full socket */
		if (c->R && (!c->R->eof || want_out)) {
			ri = np;
			p[np++] = (struct pollfd){ c->R->fd, (short)((c->R->eof ? 0 : POLLIN) | (want_out ? POLLOUT : 0)), 0 };
		}
		int ms = dt_deadline_ms_left(wake);
		if (shm_some && ms > 1 && ((!recv_done(r) && c->L->shm) || (blocked && c->R->shm)))
			ms = 1; /* a ring may bring something, and it rings no socket */
		int got = poll(p, (nfds_t)np, ms ? ms : 1);
		if (got < 0 && errno != EINTR)
			return dt__ring_fail(r, err, DT_IO, "poll failed during %s: %s", r->what, strerror(errno));
		if (got > 0 && ri >= 0 && !c->R->eof && (p[ri].revents & (POLLIN | POLLHUP | POLLERR)) && read_back(r, err))
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
	r->buf = buf;
	r->deadline = deadline;
	r->t0 = dt_now_ns();
	r->me.seq = c->seq++;
	r->me.kind = (uint8_t)kind;
	r->me.dtype = (uint8_t)dtype;
	r->esize = dtype == DT_WIRE_I64 ? 8 : dtype == DT_WIRE_F32 ? 4 : 1;
	r->add = dtype == DT_WIRE_I64 ? dt__ring_add_i64 : dt__ring_add_f32;
	r->me.count = count;
	r->me.root = (uint32_t)root;
	r->me.rank = (uint32_t)c->rank;
	r->me.nranks = (uint32_t)c->n;
	snprintf(r->me.name, sizeof(r->me.name), "%s", name ? name : "");
	for (char *p = r->me.name; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			*p = '?';
	dt_coll_describe(&r->me, r->what, sizeof(r->what));
	if (c->broken) {
		if (err) {
			*err = c->failure;
			dt_err_prefix(err, "cannot run %s: the ring failed earlier", r->what);
		}
		return c->failure.status;
	}
	pack_start(r);
	r->blamed = c->lrank;
	r->blamed_since = r->t0;
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

enum dt_status dt__ring_step(struct dt__ring_run *r, const struct dt__plan *p, void *base, int to, int from,
			     int by_reference, struct dt_err *err)
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
	int64_t now = dt_now_ns();
	r->last_in = r->last_out = now;
	if (from >= 0 && r->blamed != from) {
		r->blamed = from;
		r->blamed_since = now;
	}
	enum dt_status st = run_plan(r, err);
	dt__comm_use_ring(c);
	return st;
}
