/*
 * ring_send.c — the progress engine's out link (ring.c runs the loop): the
 * send items of a step as DATA frames behind their 16-byte data headers (or
 * COLL_REF on a same-host link that reads our memory), gathered IOV_FRAMES
 * at a time into one nonblocking sendmsg, sealed first on a tagged ring; a
 * queued stall notice between frames; and what the right neighbour sends
 * back on the same socket (COLL_DONE for references, COLL_ABORT, a close).
 */
#include "distribute/ring_run.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "net/bytes.h"

#define IOV_FRAMES 16 /* DATA frames gathered into one sendmsg */

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

size_t dt__ring_frame_size(const struct dt__ring_run *r, long k)
{
	if (k < 0)
		return r->start_len;
	size_t head = by_ref(r, k) ? DT_FRAME_HEADER_SIZE + DT_COLL_REF_BYTES : DT_COLL_DATA_HEAD_SIZE + r->si[k].len;
	return head + (r->c->tagged ? DT_AUTH_TAG_BYTES : 0);
}

/* What goes before send item k's payload: a COLL_REF's header and payload,
 * or a COLL_DATA's data header. */
struct head {
	uint8_t wire[DT_FRAME_HEADER_SIZE + DT_COLL_REF_BYTES];
	size_t len; /* bytes of wire that leave */
};

static void pack_head(const struct dt__ring_run *r, long k, struct head *hd)
{
	const struct dt__coll_item *it = &r->si[k];
	if (by_ref(r, k)) {
		struct dt_frame_header fh = dt_frame_header_make(DT_MSG_COLL_REF, 0, r->me.seq, DT_COLL_REF_BYTES);
		dt_frame_header_pack(&fh, hd->wire);
		struct dt_coll_ref ref = { (uint64_t)(uintptr_t)(r->sbuf + it->off), it->len };
		dt_coll_ref_encode(&ref, hd->wire + DT_FRAME_HEADER_SIZE);
		hd->len = DT_FRAME_HEADER_SIZE + DT_COLL_REF_BYTES;
		return;
	}
	dt_coll_data_head_pack(r->me.seq, it->len, hd->wire);
	hd->len = DT_COLL_DATA_HEAD_SIZE;
}

/* Tagged rings: seals frame k (== r->sealed: frames are numbered in the
 * order they leave), hd its head from pack_head. 0, or -1 when it must wait:
 * a stall notice is queued (it goes before any newly sealed frame), or in
 * encrypt mode the ciphertext window is full until what was sealed is sent.
 * The tag is computed over the bytes that will leave (the plan does not
 * change a send item's bytes until the right neighbour has had them). */
static int seal(struct dt__ring_run *r, long k, const struct head *hd)
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
		memcpy(sd->ref, hd->wire + DT_FRAME_HEADER_SIZE, DT_COLL_REF_BYTES);
		dt_wire_seal_to(sec, hd->wire, sd->ref, DT_COLL_REF_BYTES, sd->ref, sd->tag);
		r->sealed++;
		return 0;
	}
	/* A DATA's tag covers the 32-byte frame header its data header stands for. */
	uint8_t covered[DT_FRAME_HEADER_SIZE];
	struct dt_frame_header fh = dt_frame_header_make(DT_MSG_COLL_DATA, 0, r->me.seq, it->len);
	dt_frame_header_pack(&fh, covered);
	if (sec->mode == DT_WIRE_ENCRYPT) {
		if (r->s_idx == r->sealed)
			r->tx_used = 0; /* everything sealed before has left */
		if (r->tx_used + it->len > c->txbuf_cap)
			return -1;
		sd->off = r->tx_used;
		dt_wire_seal_to(sec, covered, r->sbuf + it->off, it->len, c->txbuf + sd->off, sd->tag);
		r->tx_used += it->len;
	} else {
		dt_wire_seal_to(sec, covered, r->sbuf + it->off, it->len, NULL, sd->tag);
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
int dt__ring_try_send(struct dt__ring_run *r, int *blocked, struct dt_err *err)
{
	struct dt_comm *c = r->c;
	const int tagged = c->tagged;
	*blocked = 0;
	struct iovec iov[3 * IOV_FRAMES + 2];
	struct head heads[IOV_FRAMES];
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
			struct head *hd = &heads[nh];
			pack_head(r, k, hd);
			if (tagged && k == r->sealed && seal(r, k, hd))
				break;
			nh++;
			int ref = by_ref(r, k);
			if (ref)
				r->refs_out = 1;
			struct iovec pieces[3];
			int np = 0;
			pieces[np++] = (struct iovec){ hd->wire, hd->len };
			if (!tagged) {
				if (!ref)
					pieces[np++] = (struct iovec){ r->sbuf + it->off, it->len };
			} else {
				struct dt__sealed *sd = &c->sealed[k + 1];
				if (ref)
					memcpy(hd->wire + DT_FRAME_HEADER_SIZE, sd->ref, DT_COLL_REF_BYTES);
				else if (c->R->sec.mode == DT_WIRE_ENCRYPT)
					pieces[np++] = (struct iovec){ c->txbuf + sd->off, it->len };
				else
					pieces[np++] = (struct iovec){ r->sbuf + it->off, it->len };
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
		if ((e == EPIPE || e == ECONNRESET) && dt__ring_read_back(r, err))
			return -1;
		dt__ring_blame(r, r->c->rrank, "connection reset");
		dt__ring_fail(r, err, DT_PEER, "cannot send to %s during %s: %s", r->c->labels[r->c->rrank],
			      r->what, strerror(e));
		return -1;
	}
	r->last_out = r->now;
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
		size_t rest = dt__ring_frame_size(r, r->s_idx) - r->s_done;
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

/* ---- what comes back ---- */

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
enum dt_status dt__ring_read_back(struct dt__ring_run *r, struct dt_err *err)
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
			dt__ring_blame(r, c->rrank, "connection closed");
			return dt__ring_fail(r, err, DT_PEER, "%s closed the connection during %s", from, r->what);
		}
		if (n < 0) {
			int e = errno;
			dt__ring_blame(r, c->rrank, "connection reset");
			return dt__ring_fail(r, err, DT_PEER, "connection to %s failed during %s: %s", from, r->what,
					     strerror(e));
		}
	}
}
