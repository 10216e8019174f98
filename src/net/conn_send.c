/* The send queue, sending, and requests with their replies and deadlines. */
#include "net/conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "net/conn_internal.h"
#include "net/handshake.h"

struct out_entry *dt__conn_entry(struct dt_conn *c, size_t i)
{
	return &c->q[(c->qhead + i) % c->qcap];
}

static void defer_done(struct dt_conn *c, dt_send_done_fn fn, void *arg, enum dt_status st)
{
	if (c->ndones == c->dones_cap) {
		c->dones_cap = c->dones_cap ? c->dones_cap * 2 : 16;
		c->dones = dt_xrealloc(c->dones, c->dones_cap * sizeof(*c->dones));
	}
	c->dones[c->ndones++] = (struct deferred_done){ fn, arg, st };
	if (!c->in_cb)
		dt__conn_schedule(c, dt_now_ns());
}

void dt__conn_run_dones(struct dt_conn *c)
{
	/* A callback may queue more; each runs once. */
	for (size_t i = 0; i < c->ndones; i++)
		c->dones[i].fn(c->dones[i].arg, c->dones[i].st);
	c->ndones = 0;
}

static struct out_entry *push_entry(struct dt_conn *c)
{
	if (c->qlen == c->qcap) {
		size_t cap = c->qcap ? c->qcap * 2 : 16;
		struct out_entry *q = dt_xmallocarray(cap, sizeof(*q));
		for (size_t i = 0; i < c->qlen; i++)
			q[i] = *dt__conn_entry(c, i);
		free(c->q);
		c->q = q;
		c->qcap = cap;
		c->qhead = 0;
	}
	struct out_entry *e = dt__conn_entry(c, c->qlen++);
	memset(e, 0, sizeof(*e));
	return e;
}

/* Makes room for n more bytes in wbuf, compacting away what was already sent. */
static void wbuf_reserve(struct dt_conn *c, size_t n)
{
	if (c->wlen + n <= c->wcap)
		return;
	size_t low = c->wlen;
	for (size_t i = 0; i < c->qlen; i++) {
		struct out_entry *e = dt__conn_entry(c, i);
		if (e->copied && e->copy_off < low)
			low = e->copy_off;
	}
	if (low > 0) {
		memmove(c->wbuf, c->wbuf + low, c->wlen - low);
		c->wlen -= low;
		for (size_t i = 0; i < c->qlen; i++) {
			struct out_entry *e = dt__conn_entry(c, i);
			if (e->copied)
				e->copy_off -= low;
		}
	}
	if (c->wlen + n > c->wcap) {
		size_t cap = c->wcap ? c->wcap : 4096;
		while (cap < c->wlen + n)
			cap *= 2;
		c->wbuf = dt_xrealloc(c->wbuf, cap);
		c->wcap = cap;
	}
}

static enum dt_status can_send(struct dt_conn *c, struct dt_err *err)
{
	if (c->state == CS_OPEN)
		return DT_OK;
	return dt_err_set(err, DT_PEER, "cannot send to %s: the connection is closed%s%s", c->peer,
			  c->why.msg[0] ? ": " : "", c->why.msg);
}

/* Queues a frame; copy: parts are copied into wbuf, else referenced. */
struct out_entry *dt__conn_enqueue(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id,
				   const struct iovec *parts, int nparts, int copy)
{
	DT_ASSERT(nparts >= 0 && nparts <= DT_CONN_MAX_PARTS);
	uint64_t len = 0;
	for (int i = 0; i < nparts; i++)
		len += parts[i].iov_len;
	struct out_entry *e = push_entry(c);
	struct dt_frame_header h = dt_frame_header_make(type, flags, request_id, len);
	dt_frame_header_pack(&h, e->hdr);
	e->total = DT_FRAME_HEADER_SIZE + len;
	if (c->sec.mode) {
		e->tagged = 1;
		e->total += DT_AUTH_TAG_BYTES;
	}
	if (len == 0) {
		if (e->tagged)
			dt_wire_seal(&c->sec, e->hdr, NULL, 0, e->tag);
		return e;
	}
	/* Large tagged payloads are sealed while they are sent (seal_ahead); the
	 * frame's number is taken now all the same: numbers are the queue order. */
	const int stream = e->tagged && len >= STREAM_MIN;
	/* Encryption writes the ciphertext into wbuf, never into the caller's memory. */
	const int encrypt = c->sec.mode == DT_WIRE_ENCRYPT;
	if (copy || (encrypt && !stream)) {
		wbuf_reserve(c, (size_t)len);
		e->copied = 1;
		e->copy_off = c->wlen;
		e->copy_len = (size_t)len;
		for (int i = 0; i < nparts; i++) {
			if (parts[i].iov_len)
				memcpy(c->wbuf + c->wlen, parts[i].iov_base, parts[i].iov_len);
			c->wlen += parts[i].iov_len;
		}
		c->copied_queued += (size_t)len;
		if (e->tagged && !stream) {
			struct iovec own = { c->wbuf + e->copy_off, e->copy_len };
			dt_wire_seal(&c->sec, e->hdr, &own, 1, e->tag);
		}
	} else {
		for (int i = 0; i < nparts; i++)
			if (parts[i].iov_len)
				e->parts[e->nparts++] = parts[i];
		if (encrypt) {
			/* Room for the ciphertext, written from the parts as it goes out
			 * (one pass over the caller's memory instead of a copy and a pass). */
			wbuf_reserve(c, (size_t)len);
			e->copied = 1;
			e->from_parts = 1;
			e->copy_off = c->wlen;
			e->copy_len = (size_t)len;
			c->wlen += (size_t)len;
			c->copied_queued += (size_t)len;
		} else if (e->tagged && !stream) {
			/* Tagged now, in queue order (the frame numbers are the send order),
			 * in one pass over the caller's memory, which stays untouched until done. */
			dt_wire_seal(&c->sec, e->hdr, e->parts, e->nparts, e->tag);
		}
	}
	if (stream) {
		e->streaming = 1;
		e->frame_n = dt_wire_take_tx(&c->sec);
	}
	return e;
}

/* Seals payload bytes [from, to) of streamed entry e in c->tx_k. */
static void seal_range(struct dt_conn *c, struct out_entry *e, uint64_t from, uint64_t to)
{
	uint8_t *own = e->copied ? c->wbuf + e->copy_off : NULL;
	if (e->copied && !e->from_parts) {
		dt_wire_kernel_update(&c->tx_k, own + from, own + from, (size_t)(to - from));
		return;
	}
	uint64_t off = 0;
	for (int i = 0; i < e->nparts && off < to; i++) {
		uint64_t a = off, b = off + e->parts[i].iov_len;
		off = b;
		if (b <= from)
			continue;
		uint64_t lo = a > from ? a : from, hi = b < to ? b : to;
		const uint8_t *src = (const uint8_t *)e->parts[i].iov_base + (lo - a);
		dt_wire_kernel_update(&c->tx_k, src, own ? own + lo : NULL, (size_t)(hi - lo));
	}
}

/* Keeps the first streamed frame sealed up to `ahead` bytes past what has
 * been sent (and finishes its tag at its end), so each piece is tagged just
 * before the kernel copies it, while the peer is still busy with the last
 * one. Frames are sealed in queue order; only one is begun at a time. */
static void seal_ahead(struct dt_conn *c, uint64_t ahead)
{
	for (size_t i = 0; i < c->qlen; i++) {
		struct out_entry *e = dt__conn_entry(c, i);
		if (!e->streaming)
			continue;
		uint64_t len = e->total - DT_FRAME_HEADER_SIZE - DT_AUTH_TAG_BYTES;
		if (e->streaming == 1) {
			dt_wire_seal_begin(&c->sec, e->frame_n, &c->tx_k, e->hdr);
			e->streaming = 2;
		}
		uint64_t sent = e->sent > DT_FRAME_HEADER_SIZE ? e->sent - DT_FRAME_HEADER_SIZE : 0;
		uint64_t to = sent + ahead < len ? sent + ahead : len;
		if (to > e->sealed) {
			seal_range(c, e, e->sealed, to);
			e->sealed = to;
		}
		if (e->sealed < len)
			return;
		dt_wire_kernel_final(&c->tx_k, e->tag);
		e->streaming = 0;
	}
}

void dt__conn_pop_entry(struct dt_conn *c, enum dt_status st)
{
	struct out_entry *e = dt__conn_entry(c, 0);
	if (e->copied)
		c->copied_queued -= e->copy_len;
	if (e->req)
		e->req->sending_ = 0;
	if (e->done)
		defer_done(c, e->done, e->arg, st);
	c->qhead = (c->qhead + 1) % c->qcap;
	c->qlen--;
	if (c->qlen == 0) {
		c->qhead = 0;
		c->wlen = 0;
	}
}

void dt__conn_update_interest(struct dt_conn *c)
{
	if (c->state == CS_CLOSED)
		return;
	if (c->copied_queued > c->cfg.max_queued)
		c->read_paused = 1;
	else if (c->copied_queued <= c->cfg.max_queued / 2)
		c->read_paused = 0;
	unsigned want = (c->read_paused ? 0 : DT_LOOP_READ) | (c->qlen ? DT_LOOP_WRITE : 0);
	if (want == c->interest)
		return;
	struct dt_err e = DT_ERR_INIT;
	if (dt_loop_modify(c->loop, c->fd, want, &e) != DT_OK)
		dt__conn_fail(c, DT_IO, "connection to %s: %s", c->peer, e.msg);
	else
		c->interest = want;
}

void dt__conn_flush(struct dt_conn *c)
{
	while (c->qlen > 0 && c->fd >= 0) {
		seal_ahead(c, SEAL_AHEAD);
		struct iovec iov[IOV_BATCH];
		int n = 0;
		for (size_t i = 0; i < c->qlen; i++) {
			struct out_entry *e = dt__conn_entry(c, i);
			if (n + 2 + (e->copied ? 1 : e->nparts) > IOV_BATCH)
				break;
			/* The frame's pieces in order: header, payload, tag; skip what was
			 * sent. Of a frame still being sealed, only what is sealed. */
			struct iovec seg[DT_CONN_MAX_PARTS + 2];
			int ns = 0;
			uint64_t room = e->streaming ? e->sealed : UINT64_MAX;
			seg[ns++] = (struct iovec){ e->hdr, DT_FRAME_HEADER_SIZE };
			if (e->copied && e->copy_len)
				seg[ns++] = (struct iovec){ c->wbuf + e->copy_off,
							    room < e->copy_len ? (size_t)room : e->copy_len };
			for (int p = 0; !e->copied && p < e->nparts && room > 0; p++) {
				size_t take = room < e->parts[p].iov_len ? (size_t)room : e->parts[p].iov_len;
				seg[ns++] = (struct iovec){ e->parts[p].iov_base, take };
				room -= take;
			}
			if (e->tagged && !e->streaming)
				seg[ns++] = (struct iovec){ e->tag, DT_AUTH_TAG_BYTES };
			uint64_t skip = e->sent;
			for (int k = 0; k < ns; k++) {
				if (skip >= seg[k].iov_len) {
					skip -= seg[k].iov_len;
					continue;
				}
				iov[n++] = (struct iovec){ (uint8_t *)seg[k].iov_base + skip, seg[k].iov_len - (size_t)skip };
				skip = 0;
			}
			if (e->streaming)
				break; /* what follows waits for this frame's tag */
		}
		struct msghdr msg;
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = iov;
		msg.msg_iovlen = (size_t)n;
		ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				/* The socket is full: tag further ahead while the peer drains it,
				 * time this thread would otherwise spend waiting. */
				seal_ahead(c, SEAL_AHEAD_IDLE);
				break;
			}
			if (errno == ECONNRESET || errno == EPIPE)
				dt__conn_fail(c, DT_PEER, "%s reset the connection", c->peer);
			else
				dt__conn_fail(c, DT_PEER, "cannot send to %s: %s", c->peer, strerror(errno));
			return;
		}
		c->stats.bytes_out += (uint64_t)w;
		c->last_tx = dt_now_ns();
		uint64_t left = (uint64_t)w;
		while (left > 0 && c->qlen > 0) {
			struct out_entry *e = dt__conn_entry(c, 0);
			uint64_t rest = e->total - e->sent;
			if (left < rest) {
				e->sent += left;
				break;
			}
			left -= rest;
			c->stats.frames_out++;
			dt__conn_pop_entry(c, DT_OK);
		}
	}
	if (c->state == CS_CLOSING && c->qlen == 0 && c->fd >= 0)
		shutdown(c->fd, SHUT_WR); /* our last frame is out: FIN, then wait for the peer's */
	dt__conn_update_interest(c);
}

void dt__conn_send_reason(struct dt_conn *c, uint16_t type, uint32_t flags, uint32_t code, const char *text)
{
	uint8_t buf[DT_REASON_PAYLOAD_MAX];
	size_t len = dt_reason_encode(code, text, buf, sizeof(buf));
	struct iovec part = { buf, len };
	dt__conn_enqueue(c, type, flags, 0, &part, 1, 1);
}

enum dt_status dt_conn_send(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id, const void *payload,
			    size_t len, struct dt_err *err)
{
	enum dt_status st = can_send(c, err);
	if (st)
		return st;
	struct iovec part = { (void *)(uintptr_t)payload, len };
	dt__conn_enqueue(c, type, flags, request_id, &part, len ? 1 : 0, 1);
	dt__conn_flush(c);
	return DT_OK;
}

enum dt_status dt_conn_sendv_ref(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id,
				 const struct iovec *parts, int nparts, dt_send_done_fn done, void *arg, struct dt_err *err)
{
	enum dt_status st = can_send(c, err);
	if (st)
		return st;
	struct out_entry *e = dt__conn_enqueue(c, type, flags, request_id, parts, nparts, 0);
	e->done = done;
	e->arg = arg;
	dt__conn_flush(c);
	return DT_OK;
}

enum dt_status dt_conn_reply_error(struct dt_conn *c, uint64_t request_id, enum dt_status st, const char *fmt, ...)
{
	char text[DT_REASON_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	uint8_t buf[DT_REASON_PAYLOAD_MAX];
	size_t len = dt_reason_encode(dt_wire_error_from_status(st), text, buf, sizeof(buf));
	return dt_conn_send(c, DT_MSG_ERROR, DT_FRAME_F_REPLY, request_id, buf, len, NULL);
}

static void unlink_request(struct dt_conn *c, struct dt_request *r)
{
	for (struct dt_request **p = &c->pending; *p; p = &(*p)->next_) {
		if (*p == r) {
			*p = r->next_;
			break;
		}
	}
	r->next_ = NULL;
	if (c->receiving == r) {
		dt_frame_decoder_discard(&c->dec);
		c->receiving = NULL;
	}
}

struct dt_request *dt__conn_find_request(struct dt_conn *c, uint64_t id)
{
	for (struct dt_request *r = c->pending; r; r = r->next_)
		if (r->id_ == id)
			return r;
	return NULL;
}

/* Completes r: unlinks it and runs its callback. */
void dt__conn_finish_request(struct dt_conn *c, struct dt_request *r, enum dt_status st, const uint8_t *reply)
{
	unlink_request(c, r);
	r->conn_ = NULL;
	r->status = st;
	if (st == DT_OK)
		dt_err_clear(&r->err);
	else
		r->err.status = st;
	r->done = 1;
	if (r->on_done)
		r->on_done(r, st == DT_OK ? reply : NULL, r->arg);
}

void dt__conn_fail_request(struct dt_conn *c, struct dt_request *r, enum dt_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err.msg, sizeof(r->err.msg), fmt, ap);
	va_end(ap);
	dt__conn_finish_request(c, r, st, NULL);
}

void dt__conn_expire_requests(struct dt_conn *c, int64_t now)
{
	for (int again = 1; again && c->state == CS_OPEN;) {
		again = 0;
		for (struct dt_request *r = c->pending; r; r = r->next_) {
			if (r->deadline > now)
				continue;
			if (r->sending_) {
				/* Half-sent from the caller's memory: only closing stops the writes. */
				dt__conn_fail(c, DT_TIMEOUT, "no reply from %s to %s request %llu within %.1f s (its payload was still being sent)",
					      c->peer, dt_msg_name(r->type), (unsigned long long)r->id_, dt__secs(now - r->start_));
				return;
			}
			dt__conn_fail_request(c, r, DT_TIMEOUT, "no reply from %s to %s request %llu within %.1f s", c->peer,
					      dt_msg_name(r->type), (unsigned long long)r->id_, dt__secs(now - r->start_));
			again = 1; /* the list changed under us */
			break;
		}
	}
}

enum dt_status dt_conn_request(struct dt_conn *c, struct dt_request *r, const struct iovec *parts, int nparts, int copy,
			       struct dt_err *err)
{
	DT_ASSERT(r->deadline > 0 && r->deadline != DT_DEADLINE_NONE); /* every RPC has a deadline */
	r->done = 0;
	r->status = DT_OK;
	dt_err_clear(&r->err);
	if (c->state != CS_OPEN) {
		enum dt_status st = dt_err_set(err, DT_PEER, "cannot send a %s request to %s: the connection is closed%s%s",
					       dt_msg_name(r->type), c->peer, c->why.msg[0] ? ": " : "", c->why.msg);
		r->status = st;
		return st;
	}
	r->id_ = ++c->next_id;
	r->start_ = dt_now_ns();
	r->conn_ = c;
	struct out_entry *e = dt__conn_enqueue(c, r->type, 0, r->id_, parts, nparts, copy);
	r->sending_ = !copy && e->nparts > 0;
	if (r->sending_)
		e->req = r;
	r->next_ = c->pending;
	c->pending = r;
	dt__conn_schedule(c, r->deadline);
	dt__conn_flush(c);
	return DT_OK;
}

void dt_request_cancel(struct dt_request *r)
{
	struct dt_conn *c = r->conn_;
	if (!c || r->done)
		return;
	/* Given up at or past its deadline, it timed out: the conn's timer would
	 * have said so, but a process stopped past the deadline (SIGSTOP, a
	 * loaded host) may find its waiter's deadline passed before that timer
	 * runs, and a peer's silence is exit 3, not a runtime failure. */
	int64_t now = dt_now_ns();
	const int expired = now >= r->deadline;
	const enum dt_status st = expired ? DT_TIMEOUT : DT_RUNTIME;
	if (r->sending_) {
		for (size_t i = 0; i < c->qlen; i++)
			if (dt__conn_entry(c, i)->req == r)
				dt__conn_entry(c, i)->req = NULL;
		if (expired)
			dt__conn_fail(c, st, "no reply from %s to %s request %llu within %.1f s (its payload was still being sent)",
				      c->peer, dt_msg_name(r->type), (unsigned long long)r->id_, dt__secs(now - r->start_));
		else
			dt__conn_fail(c, st, "a %s request to %s was cancelled while its payload was being sent",
				      dt_msg_name(r->type), c->peer);
		r->sending_ = 0;
	}
	unlink_request(c, r);
	r->conn_ = NULL;
	r->done = 1;
	r->status = st;
	if (expired)
		snprintf(r->err.msg, sizeof(r->err.msg), "no reply from %s to %s request %llu within %.1f s", c->peer,
			 dt_msg_name(r->type), (unsigned long long)r->id_, dt__secs(now - r->start_));
	else
		snprintf(r->err.msg, sizeof(r->err.msg), "%s request to %s cancelled", dt_msg_name(r->type), c->peer);
	r->err.status = st;
}

int dt_request_is_done(void *request)
{
	return ((const struct dt_request *)request)->done;
}

enum dt_status dt_conn_call(struct dt_conn *c, uint16_t type, const void *payload, size_t len, void *reply_buf,
			    size_t reply_cap, size_t *reply_len, int64_t deadline, struct dt_err *err)
{
	struct dt_request r;
	memset(&r, 0, sizeof(r));
	r.type = type;
	r.deadline = deadline;
	r.reply_buf = reply_buf;
	r.reply_cap = reply_cap;
	struct iovec part = { (void *)(uintptr_t)payload, len };
	enum dt_status st = dt_conn_request(c, &r, &part, len ? 1 : 0, 1, err);
	if (st)
		return st;
	struct dt_loop *loop = c->loop;
	/* The conn's timer fails the request at its deadline; the slack only guards against a bug there. */
	st = dt_loop_run_until(loop, dt_request_is_done, &r, deadline + 100 * 1000000LL, "a reply", err);
	if (st) {
		dt_request_cancel(&r);
		return st;
	}
	if (r.status) {
		if (err)
			*err = r.err;
		return r.status;
	}
	if (reply_len)
		*reply_len = (size_t)r.reply.length;
	return DT_OK;
}
