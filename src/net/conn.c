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
#include "base/log.h"
#include "net/handshake.h"

enum { CS_HANDSHAKE, CS_OPEN, CS_CLOSING, CS_CLOSED };

#define RBUF_CAP (64u << 10)  /* one recv of small frames */
#define DIRECT_MIN (16u << 10) /* payload bytes still missing before we recv into place */
#define READ_BUDGET 16         /* recv calls per readiness event, for fairness between peers */
#define IOV_BATCH 64

struct out_entry {
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	uint64_t total; /* header + payload */
	uint64_t sent;
	int nparts;
	int copied;       /* payload is wbuf[copy_off .. copy_off + copy_len) */
	size_t copy_off, copy_len;
	struct iovec parts[DT_CONN_MAX_PARTS];
	dt_send_done_fn done;
	void *arg;
	struct dt_request *req; /* a request whose referenced payload this is */
};

struct deferred_done {
	dt_send_done_fn fn;
	void *arg;
	enum dt_status st;
};

struct dt_conn {
	struct dt_loop *loop;
	int fd;
	int state;
	char peer[DT_PEER_LABEL_MAX]; /* "worker:1 at 127.0.0.1:53412" */
	char addr[96];                /* "127.0.0.1:53412" */
	struct dt_conn_config cfg;
	struct dt_hello remote;
	int have_remote;
	struct dt__conn_accept_opts acc;
	void *user;

	/* reading */
	struct dt_frame_decoder dec;
	uint8_t *rbuf;
	size_t rpos, rlen;
	int64_t last_rx;
	int read_paused;
	struct dt_request *receiving; /* its reply payload is streaming into reply_buf */

	/* writing */
	struct out_entry *q; /* ring */
	size_t qhead, qlen, qcap;
	uint8_t *wbuf; /* copied payloads */
	size_t wlen, wcap;
	size_t copied_queued;
	int64_t last_tx;
	unsigned interest;
	struct deferred_done *dones;
	size_t ndones, dones_cap;

	/* requests */
	struct dt_request *pending;
	uint64_t next_id;

	/* time */
	struct dt_timer timer;
	int64_t handshake_by, linger_by;

	/* closing */
	struct dt_err why;
	int why_set;
	int notified;
	int in_cb;
	int free_pending;
	struct dt_conn_stats stats;
};

static void schedule(struct dt_conn *c, int64_t when);
static void flush(struct dt_conn *c);
static void really_free(struct dt_conn *c);

/* ---- small helpers ---- */

static double secs(int64_t ns)
{
	return (double)ns / 1e9;
}

static void set_why(struct dt_conn *c, enum dt_status st, const char *fmt, va_list ap)
{
	if (c->why_set)
		return;
	c->why_set = 1;
	c->why.status = st;
	vsnprintf(c->why.msg, sizeof(c->why.msg), fmt, ap);
}

static void teardown_fd(struct dt_conn *c)
{
	if (c->fd < 0)
		return;
	dt_loop_remove(c->loop, c->fd);
	close(c->fd);
	c->fd = -1;
}

/* Closes now; callbacks follow on the next timer round. */
static void conn_fail(struct dt_conn *c, enum dt_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void conn_fail(struct dt_conn *c, enum dt_status st, const char *fmt, ...)
{
	if (c->state == CS_CLOSED)
		return;
	va_list ap;
	va_start(ap, fmt);
	set_why(c, st, fmt, ap);
	va_end(ap);
	teardown_fd(c);
	c->state = CS_CLOSED;
	if (c->receiving) {
		dt_frame_decoder_discard(&c->dec);
		c->receiving = NULL;
	}
	schedule(c, dt_now_ns());
}

/* Sends what is queued (the last frame included), then closes within DT_NET_LINGER_S. */
static void close_after_flush(struct dt_conn *c, enum dt_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void close_after_flush(struct dt_conn *c, enum dt_status st, const char *fmt, ...)
{
	if (c->state == CS_CLOSED || c->state == CS_CLOSING)
		return;
	va_list ap;
	va_start(ap, fmt);
	set_why(c, st, fmt, ap);
	va_end(ap);
	c->state = CS_CLOSING;
	c->rpos = c->rlen = 0;
	if (c->receiving) {
		dt_frame_decoder_discard(&c->dec);
		c->receiving = NULL;
	}
	c->linger_by = dt_now_ns() + (int64_t)(DT_NET_LINGER_S * 1e9);
	schedule(c, c->linger_by);
	flush(c);
}

static struct out_entry *entry_at(struct dt_conn *c, size_t i)
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
		schedule(c, dt_now_ns());
}

static void run_dones(struct dt_conn *c)
{
	/* A callback may queue more; each runs once. */
	for (size_t i = 0; i < c->ndones; i++)
		c->dones[i].fn(c->dones[i].arg, c->dones[i].st);
	c->ndones = 0;
}

/* ---- the send queue ---- */

static struct out_entry *push_entry(struct dt_conn *c)
{
	if (c->qlen == c->qcap) {
		size_t cap = c->qcap ? c->qcap * 2 : 16;
		struct out_entry *q = dt_xmallocarray(cap, sizeof(*q));
		for (size_t i = 0; i < c->qlen; i++)
			q[i] = *entry_at(c, i);
		free(c->q);
		c->q = q;
		c->qcap = cap;
		c->qhead = 0;
	}
	struct out_entry *e = entry_at(c, c->qlen++);
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
		struct out_entry *e = entry_at(c, i);
		if (e->copied && e->copy_off < low)
			low = e->copy_off;
	}
	if (low > 0) {
		memmove(c->wbuf, c->wbuf + low, c->wlen - low);
		c->wlen -= low;
		for (size_t i = 0; i < c->qlen; i++) {
			struct out_entry *e = entry_at(c, i);
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
static struct out_entry *enqueue(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id,
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
	if (len == 0)
		return e;
	if (copy) {
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
	} else {
		for (int i = 0; i < nparts; i++)
			if (parts[i].iov_len)
				e->parts[e->nparts++] = parts[i];
	}
	return e;
}

static void pop_entry(struct dt_conn *c, enum dt_status st)
{
	struct out_entry *e = entry_at(c, 0);
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

static void update_interest(struct dt_conn *c)
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
		conn_fail(c, DT_IO, "connection to %s: %s", c->peer, e.msg);
	else
		c->interest = want;
}

static void flush(struct dt_conn *c)
{
	while (c->qlen > 0 && c->fd >= 0) {
		struct iovec iov[IOV_BATCH];
		int n = 0;
		for (size_t i = 0; i < c->qlen; i++) {
			struct out_entry *e = entry_at(c, i);
			if (n + 1 + (e->copied ? 1 : e->nparts) > IOV_BATCH)
				break;
			uint64_t skip = e->sent;
			if (skip < DT_FRAME_HEADER_SIZE) {
				iov[n++] = (struct iovec){ e->hdr + skip, DT_FRAME_HEADER_SIZE - (size_t)skip };
				skip = 0;
			} else {
				skip -= DT_FRAME_HEADER_SIZE;
			}
			if (e->copied) {
				iov[n++] = (struct iovec){ c->wbuf + e->copy_off + skip, e->copy_len - (size_t)skip };
				continue;
			}
			for (int p = 0; p < e->nparts; p++) {
				if (skip >= e->parts[p].iov_len) {
					skip -= e->parts[p].iov_len;
					continue;
				}
				iov[n++] = (struct iovec){ (uint8_t *)e->parts[p].iov_base + skip, e->parts[p].iov_len - (size_t)skip };
				skip = 0;
			}
		}
		struct msghdr msg;
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = iov;
		msg.msg_iovlen = (size_t)n;
		ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			conn_fail(c, DT_PEER, "cannot send to %s: %s", c->peer, strerror(errno));
			return;
		}
		c->stats.bytes_out += (uint64_t)w;
		c->last_tx = dt_now_ns();
		uint64_t left = (uint64_t)w;
		while (left > 0 && c->qlen > 0) {
			struct out_entry *e = entry_at(c, 0);
			uint64_t rest = e->total - e->sent;
			if (left < rest) {
				e->sent += left;
				break;
			}
			left -= rest;
			c->stats.frames_out++;
			pop_entry(c, DT_OK);
		}
	}
	if (c->state == CS_CLOSING && c->qlen == 0 && c->fd >= 0)
		shutdown(c->fd, SHUT_WR); /* our last frame is out: FIN, then wait for the peer's */
	update_interest(c);
}

/* ---- requests ---- */

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

static struct dt_request *find_request(struct dt_conn *c, uint64_t id)
{
	for (struct dt_request *r = c->pending; r; r = r->next_)
		if (r->id_ == id)
			return r;
	return NULL;
}

/* Completes r: unlinks it and runs its callback. */
static void finish_request(struct dt_conn *c, struct dt_request *r, enum dt_status st, const uint8_t *reply)
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

static void fail_request(struct dt_conn *c, struct dt_request *r, enum dt_status st, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fail_request(struct dt_conn *c, struct dt_request *r, enum dt_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err.msg, sizeof(r->err.msg), fmt, ap);
	va_end(ap);
	finish_request(c, r, st, NULL);
}

static void expire_requests(struct dt_conn *c, int64_t now)
{
	for (int again = 1; again && c->state == CS_OPEN;) {
		again = 0;
		for (struct dt_request *r = c->pending; r; r = r->next_) {
			if (r->deadline > now)
				continue;
			if (r->sending_) {
				/* Half-sent from the caller's memory: only closing stops the writes. */
				conn_fail(c, DT_TIMEOUT, "no reply from %s to %s request %llu within %.1f s (its payload was still being sent)",
					  c->peer, dt_msg_name(r->type), (unsigned long long)r->id_, secs(now - r->start_));
				return;
			}
			fail_request(c, r, DT_TIMEOUT, "no reply from %s to %s request %llu within %.1f s", c->peer,
				     dt_msg_name(r->type), (unsigned long long)r->id_, secs(now - r->start_));
			again = 1; /* the list changed under us */
			break;
		}
	}
}

/* ---- the timer: heartbeats, silence, handshake and request deadlines, close notification ---- */

static void schedule(struct dt_conn *c, int64_t when)
{
	if (!dt_timer_active(&c->timer) || when < c->timer.when)
		dt_timer_start(c->loop, &c->timer, when);
}

static void schedule_next(struct dt_conn *c)
{
	int64_t next = INT64_MAX;
	switch (c->state) {
	case CS_HANDSHAKE:
		next = c->handshake_by;
		break;
	case CS_OPEN: {
		next = c->last_rx + (int64_t)(c->cfg.silence_s * 1e9);
		int64_t hb = c->last_tx + (int64_t)(c->cfg.heartbeat_s * 1e9);
		if (hb < next)
			next = hb;
		for (struct dt_request *r = c->pending; r; r = r->next_)
			if (r->deadline < next)
				next = r->deadline;
		break;
	}
	case CS_CLOSING:
		next = c->linger_by;
		break;
	default:
		next = dt_now_ns();
	}
	schedule(c, next);
}

static void notify_close(struct dt_conn *c)
{
	c->notified = 1;
	enum dt_status st = c->why.status == DT_OK ? DT_PEER : c->why.status;
	while (c->qlen > 0)
		pop_entry(c, st);
	run_dones(c);
	while (c->pending) {
		struct dt_request *r = c->pending;
		fail_request(c, r, st, "%s request %llu to %s failed: %s", dt_msg_name(r->type), (unsigned long long)r->id_,
			     c->peer, c->why.msg);
	}
	if (c->cfg.handler && c->cfg.handler->on_close)
		c->cfg.handler->on_close(c, &c->why, c->cfg.arg); /* may free c (deferred) */
}

static void heartbeat(struct dt_conn *c)
{
	enqueue(c, DT_MSG_HEARTBEAT, 0, 0, NULL, 0, 1);
	c->stats.heartbeats_out++;
	flush(c);
}

static void on_timer(struct dt_loop *loop, struct dt_timer *t, void *arg)
{
	struct dt_conn *c = arg;
	c->in_cb++;
	run_dones(c);
	int64_t now = dt_now_ns();
	if (c->state == CS_HANDSHAKE && now >= c->handshake_by)
		conn_fail(c, DT_TIMEOUT, "no hello from %s within %.1f s", c->peer, c->cfg.handshake_s);
	if (c->state == CS_CLOSING && now >= c->linger_by) {
		teardown_fd(c);
		c->state = CS_CLOSED;
	}
	if (c->state == CS_OPEN) {
		if (now - c->last_rx >= (int64_t)(c->cfg.silence_s * 1e9)) {
			conn_fail(c, DT_TIMEOUT, "no data from %s for %.1f s (heartbeats are due every %.1f s)", c->peer,
				  secs(now - c->last_rx), c->cfg.heartbeat_s);
		} else {
			expire_requests(c, now);
			if (c->state == CS_OPEN && c->qlen == 0 &&
			    now - c->last_tx >= (int64_t)(c->cfg.heartbeat_s * 1e9))
				heartbeat(c);
		}
	}
	if (c->state == CS_CLOSED) {
		if (!c->notified)
			notify_close(c);
	} else {
		schedule_next(c);
	}
	c->in_cb--;
	if (c->free_pending && !c->in_cb)
		really_free(c);
}

/* ---- receiving ---- */

static void send_reason(struct dt_conn *c, uint16_t type, uint32_t code, const char *text)
{
	uint8_t buf[DT_REASON_PAYLOAD_MAX];
	size_t len = dt_reason_encode(code, text, buf, sizeof(buf));
	struct iovec part = { buf, len };
	enqueue(c, type, DT_FRAME_F_REPLY, 0, &part, 1, 1);
}

static void send_hello_ok(struct dt_conn *c)
{
	size_t len = dt_hello_encode(c->acc.local, NULL, 0);
	uint8_t *tmp = dt_xmalloc(len);
	size_t got = dt_hello_encode(c->acc.local, tmp, len);
	DT_ASSERT(got == len);
	struct iovec part = { tmp, len };
	enqueue(c, DT_MSG_HELLO_OK, DT_FRAME_F_REPLY, 0, &part, 1, 1);
	free(tmp);
}

/* The decoder failed: say why if the peer speaks our protocol, then close. */
static void violation(struct dt_conn *c)
{
	const char *detail = c->dec.detail;
	switch (c->dec.error) {
	case DT_FRAME_BAD_MAGIC:
		conn_fail(c, DT_PROTOCOL, "bad frame from %s: %s", c->peer, detail);
		return;
	case DT_FRAME_BAD_VERSION:
		if (c->state == CS_HANDSHAKE && c->acc.local) {
			char reason[DT_REASON_MAX], me[48];
			dt_hello_name(c->acc.local, me, sizeof(me));
			snprintf(reason, sizeof(reason), "protocol version differs: %s speaks version %u but the peer speaks version %u",
				 me, DT_PROTOCOL_VERSION, c->dec.header.version);
			send_reason(c, DT_MSG_REFUSE, DT_REFUSE_VERSION, reason);
			close_after_flush(c, DT_CONFIG, "refused %s: %s", c->peer, reason);
			return;
		}
		break;
	default:
		break;
	}
	char text[DT_REASON_MAX];
	snprintf(text, sizeof(text), "bad frame: %s; closing the connection", detail);
	send_reason(c, DT_MSG_ERROR, DT_WIRE_ERR_PROTOCOL, text);
	close_after_flush(c, DT_PROTOCOL, "bad frame from %s: %s", c->peer, detail);
}

static int on_header(void *arg, const struct dt_frame_header *h, void **dest, char *why, size_t cap)
{
	struct dt_conn *c = arg;
	if (c->state == CS_HANDSHAKE) {
		if (h->type != DT_MSG_HELLO) {
			snprintf(why, cap, "expected a hello first, got a %s frame", dt_msg_name(h->type));
			return -1;
		}
		return 0;
	}
	if (h->flags & DT_FRAME_F_REPLY) {
		struct dt_request *r = find_request(c, h->request_id);
		if (r && r->reply_buf && h->type != DT_MSG_ERROR && h->length > 0 && h->length <= r->reply_cap) {
			*dest = r->reply_buf;
			c->receiving = r;
		}
		return 0;
	}
	if (h->type > DT_MSG_CONTROL_LAST && c->cfg.handler && c->cfg.handler->on_dest)
		*dest = c->cfg.handler->on_dest(c, h, c->cfg.arg);
	return 0;
}

static void handle_hello(struct dt_conn *c, const uint8_t *payload, size_t len)
{
	struct dt_hello remote;
	uint32_t code = 0;
	char reason[DT_REASON_MAX];
	struct dt_err e = DT_ERR_INIT;
	if (dt_handshake_judge(c->acc.local, payload, len, &remote, &code, reason, sizeof(reason), &e) != DT_OK) {
		dt_hello_release(&remote);
		char text[DT_REASON_MAX];
		snprintf(text, sizeof(text), "bad hello: %s", e.msg);
		send_reason(c, DT_MSG_ERROR, DT_WIRE_ERR_PROTOCOL, text);
		close_after_flush(c, DT_PROTOCOL, "bad hello from %s: %s", c->peer, e.msg);
		return;
	}
	char name[48];
	dt_hello_name(&remote, name, sizeof(name));
	snprintf(c->peer, sizeof(c->peer), "%s at %s", name, c->addr);
	if (!code && c->acc.admit)
		code = c->acc.admit(c->acc.admit_arg, c, &remote, reason, sizeof(reason));
	if (code) {
		dt_hello_release(&remote);
		send_reason(c, DT_MSG_REFUSE, code, reason);
		close_after_flush(c, DT_CONFIG, "refused %s: %s", c->peer, reason);
		return;
	}
	c->remote = remote;
	c->have_remote = 1;
	send_hello_ok(c);
	c->state = CS_OPEN;
	c->dec.max_payload = c->cfg.max_payload;
	c->last_rx = dt_now_ns();
	flush(c);
	schedule_next(c);
	if (c->state == CS_OPEN && c->cfg.handler && c->cfg.handler->on_open)
		c->cfg.handler->on_open(c, c->cfg.arg);
}

static void handle_reply(struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *payload)
{
	struct dt_request *r = find_request(c, h->request_id);
	if (!r)
		return; /* a late reply to a request that timed out or was cancelled */
	if (r->sending_) {
		conn_fail(c, DT_PROTOCOL, "%s replied to %s request %llu before receiving all of it", c->peer,
			  dt_msg_name(r->type), (unsigned long long)r->id_);
		return;
	}
	r->reply = *h;
	if (h->type == DT_MSG_ERROR) {
		struct dt_reason_msg m;
		struct dt_err e = DT_ERR_INIT;
		if (dt_reason_decode(&m, payload, (size_t)h->length, &e) != DT_OK) {
			conn_fail(c, DT_PROTOCOL, "bad error reply from %s: %s", c->peer, e.msg);
			return;
		}
		fail_request(c, r, dt_wire_error_to_status(m.code), "%s failed %s request %llu: %s", c->peer,
			     dt_msg_name(r->type), (unsigned long long)r->id_, m.text);
		return;
	}
	if (r->reply_buf) {
		if (h->length > r->reply_cap) {
			fail_request(c, r, DT_PROTOCOL, "the reply from %s to %s request %llu is %llu bytes, more than the %zu expected",
				     c->peer, dt_msg_name(r->type), (unsigned long long)r->id_,
				     (unsigned long long)h->length, r->reply_cap);
			return;
		}
		if (payload != r->reply_buf && h->length)
			memcpy(r->reply_buf, payload, (size_t)h->length);
		payload = r->reply_buf;
	}
	finish_request(c, r, DT_OK, payload);
}

static void frame_ready(struct dt_conn *c)
{
	struct dt_frame_header h = c->dec.header;
	uint8_t *payload = dt_frame_decoder_payload(&c->dec);
	size_t len = (size_t)h.length;
	c->stats.frames_in++;
	c->receiving = NULL;
	if (c->state == CS_HANDSHAKE) {
		handle_hello(c, payload, len); /* on_header let nothing else through */
	} else if (h.flags & DT_FRAME_F_REPLY) {
		if (h.type == DT_MSG_HELLO || h.type == DT_MSG_HELLO_OK || h.type == DT_MSG_REFUSE)
			conn_fail(c, DT_PROTOCOL, "%s sent a %s after the handshake", c->peer, dt_msg_name(h.type));
		else
			handle_reply(c, &h, payload);
	} else {
		struct dt_reason_msg m;
		struct dt_err e = DT_ERR_INIT;
		switch (h.type) {
		case DT_MSG_HEARTBEAT:
			c->stats.heartbeats_in++;
			break;
		case DT_MSG_ECHO: {
			struct iovec part = { payload, len };
			enqueue(c, DT_MSG_ECHO, DT_FRAME_F_REPLY, h.request_id, &part, len ? 1 : 0, 1);
			flush(c);
			break;
		}
		case DT_MSG_ERROR:
		case DT_MSG_SHUTDOWN:
			if (dt_reason_decode(&m, payload, len, &e) != DT_OK) {
				conn_fail(c, DT_PROTOCOL, "bad %s from %s: %s", dt_msg_name(h.type), c->peer, e.msg);
				break;
			}
			if (h.type == DT_MSG_SHUTDOWN)
				conn_fail(c, DT_OK, "%s shut down the connection: %s", c->peer, m.text);
			else
				conn_fail(c, dt_wire_error_to_status(m.code), "%s reported an error: %s", c->peer, m.text);
			break;
		case DT_MSG_HELLO:
		case DT_MSG_HELLO_OK:
		case DT_MSG_REFUSE:
			conn_fail(c, DT_PROTOCOL, "%s sent a %s after the handshake", c->peer, dt_msg_name(h.type));
			break;
		default:
			if (c->cfg.handler && c->cfg.handler->on_frame)
				c->cfg.handler->on_frame(c, &h, payload, c->cfg.arg);
			else if (h.request_id && c->state == CS_OPEN)
				(void)dt_conn_reply_error(c, h.request_id, DT_CONFIG, "this task does not serve %s requests",
							  dt_msg_name(h.type));
		}
	}
	dt_frame_decoder_next(&c->dec);
}

/* Feeds the buffered bytes to the decoder; returns with the buffer empty or the conn not reading. */
static void consume_buffered(struct dt_conn *c)
{
	while (c->rpos < c->rlen && (c->state == CS_HANDSHAKE || c->state == CS_OPEN)) {
		enum dt_frame_event ev;
		size_t n = dt_frame_decoder_feed(&c->dec, c->rbuf + c->rpos, c->rlen - c->rpos, &ev);
		c->rpos += n;
		if (ev == DT_FRAME_READY)
			frame_ready(c);
		else if (ev == DT_FRAME_ERROR)
			violation(c);
	}
	if (c->rpos >= c->rlen || c->state == CS_CLOSING || c->state == CS_CLOSED)
		c->rpos = c->rlen = 0;
}

static void on_eof(struct dt_conn *c)
{
	if (c->state == CS_CLOSING) {
		teardown_fd(c);
		c->state = CS_CLOSED;
		schedule(c, dt_now_ns());
		return;
	}
	if (dt_frame_decoder_finish(&c->dec) == DT_FRAME_TRUNCATED)
		conn_fail(c, DT_PEER, "%s closed the connection in the middle of a frame: %s", c->peer, c->dec.detail);
	else if (c->state == CS_HANDSHAKE)
		conn_fail(c, DT_PEER, "%s closed the connection before its hello", c->peer);
	else
		conn_fail(c, DT_PEER, "%s closed the connection", c->peer);
}

static void do_read(struct dt_conn *c, int hup)
{
	for (int round = 0;; round++) {
		consume_buffered(c);
		if (c->state == CS_CLOSED || round == READ_BUDGET || (c->read_paused && !hup))
			return;
		uint8_t *where;
		size_t want;
		int direct = c->state != CS_CLOSING && dt_frame_decoder_window(&c->dec, &where, &want) && want >= DIRECT_MIN;
		if (!direct) {
			where = c->rbuf;
			want = RBUF_CAP;
		}
		ssize_t n = recv(c->fd, where, want, MSG_DONTWAIT);
		if (n > 0) {
			c->last_rx = dt_now_ns();
			c->stats.bytes_in += (uint64_t)n;
			if (c->state == CS_CLOSING)
				continue; /* draining until the peer's FIN */
			if (direct) {
				if (dt_frame_decoder_advance(&c->dec, (size_t)n) == DT_FRAME_READY)
					frame_ready(c);
			} else {
				c->rpos = 0;
				c->rlen = (size_t)n;
			}
			continue;
		}
		if (n == 0) {
			on_eof(c);
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		conn_fail(c, DT_PEER, "cannot receive from %s: %s", c->peer, strerror(errno));
		return;
	}
}

static void on_io(struct dt_loop *loop, int fd, unsigned events, void *arg)
{
	struct dt_conn *c = arg;
	c->in_cb++;
	if (events & (DT_LOOP_READ | DT_LOOP_HUP))
		do_read(c, (events & DT_LOOP_HUP) != 0);
	if (c->state != CS_CLOSED && c->qlen && (events & (DT_LOOP_WRITE | DT_LOOP_HUP)))
		flush(c);
	if (c->state != CS_CLOSED && (events & DT_LOOP_HUP) && c->fd >= 0 && c->read_paused) {
		/* Hung up while we were not reading: nothing more will come or go. */
		conn_fail(c, DT_PEER, "%s hung up", c->peer);
	}
	update_interest(c);
	run_dones(c);
	c->in_cb--;
	if (c->free_pending && !c->in_cb)
		really_free(c);
}

/* ---- lifecycle ---- */

static void apply_defaults(struct dt_conn_config *cfg)
{
	if (cfg->heartbeat_s <= 0)
		cfg->heartbeat_s = DT_NET_HEARTBEAT_S;
	if (cfg->silence_s <= 0)
		cfg->silence_s = DT_NET_SILENCE_S;
	if (cfg->handshake_s <= 0)
		cfg->handshake_s = DT_NET_HANDSHAKE_S;
	if (cfg->max_payload == 0)
		cfg->max_payload = DT_FRAME_MAX_PAYLOAD_DEFAULT;
	if (cfg->max_queued == 0)
		cfg->max_queued = DT_NET_MAX_QUEUED;
}

static enum dt_status conn_new(struct dt_loop *loop, int fd, const char *peer, const struct dt_conn_config *cfg,
			       int state, struct dt_conn **out, struct dt_err *err)
{
	*out = NULL;
	struct dt_conn *c = dt_xcalloc(1, sizeof(*c));
	c->loop = loop;
	c->fd = fd;
	c->state = state;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	snprintf(c->addr, sizeof(c->addr), "%s", peer);
	if (cfg)
		c->cfg = *cfg;
	apply_defaults(&c->cfg);
	dt_frame_decoder_init(&c->dec, state == CS_HANDSHAKE ? DT_MSG_CAP_HANDSHAKE : c->cfg.max_payload);
	c->dec.on_header = on_header;
	c->dec.on_header_arg = c;
	c->rbuf = dt_xmalloc(RBUF_CAP);
	c->last_rx = c->last_tx = dt_now_ns();
	dt_timer_init(&c->timer, on_timer, c);
	enum dt_status st = dt_sock_set_nonblocking(fd, err);
	if (!st)
		st = dt_loop_add(loop, fd, DT_LOOP_READ, on_io, c, err);
	if (st) {
		c->fd = -1;
		close(fd);
		really_free(c);
		return st;
	}
	c->interest = DT_LOOP_READ;
	*out = c;
	return DT_OK;
}

enum dt_status dt_conn_open(struct dt_loop *loop, int fd, const char *peer, const struct dt_hello *remote,
			    const struct dt_conn_config *cfg, struct dt_conn **out, struct dt_err *err)
{
	enum dt_status st = conn_new(loop, fd, peer, cfg, CS_OPEN, out, err);
	if (st)
		return st;
	struct dt_conn *c = *out;
	if (remote) {
		c->remote = *remote;
		dt_signature_init(&c->remote.signature);
		dt_signature_copy(&c->remote.signature, &remote->signature);
		c->have_remote = 1;
	}
	schedule_next(c);
	return DT_OK;
}

enum dt_status dt__conn_accept(struct dt_loop *loop, int fd, const char *addr, const struct dt_conn_config *cfg,
			       const struct dt__conn_accept_opts *opts, struct dt_conn **out, struct dt_err *err)
{
	DT_ASSERT(opts && opts->local);
	enum dt_status st = conn_new(loop, fd, addr, cfg, CS_HANDSHAKE, out, err);
	if (st)
		return st;
	struct dt_conn *c = *out;
	c->acc = *opts;
	c->handshake_by = dt_now_ns() + (int64_t)(c->cfg.handshake_s * 1e9);
	schedule_next(c);
	return DT_OK;
}

enum dt_status dt_conn_connect(struct dt_loop *loop, const char *host, int port, const struct dt_hello *local,
			       const char *expect_role, uint32_t expect_index, const struct dt_conn_config *cfg,
			       int64_t deadline, struct dt_conn **out, struct dt_err *err)
{
	*out = NULL;
	char task[64] = "", peer[DT_PEER_LABEL_MAX];
	if (expect_role)
		snprintf(task, sizeof(task), "%s:%u", expect_role, expect_index);
	if (task[0])
		snprintf(peer, sizeof(peer), "%s at %s:%d", task, host, port);
	else
		snprintf(peer, sizeof(peer), "%s:%d", host, port);
	int fd;
	enum dt_status st = dt_sock_connect(host, port, task[0] ? task : NULL, deadline, NULL, &fd, err);
	if (st)
		return st;
	struct dt_hello remote;
	st = dt_handshake_client(fd, local, peer, expect_role, expect_index, deadline, &remote, err);
	if (st) {
		close(fd);
		return st;
	}
	if (!expect_role) {
		char name[48];
		dt_hello_name(&remote, name, sizeof(name));
		snprintf(peer, sizeof(peer), "%s at %s:%d", name, host, port);
	}
	st = dt_conn_open(loop, fd, peer, &remote, cfg, out, err);
	dt_hello_release(&remote);
	return st;
}

static void really_free(struct dt_conn *c)
{
	dt_timer_stop(c->loop, &c->timer);
	if (c->state != CS_CLOSED) {
		if (!c->why_set) {
			c->why_set = 1;
			c->why.status = DT_PEER;
			snprintf(c->why.msg, sizeof(c->why.msg), "the connection to %s was closed by this side", c->peer);
		}
		teardown_fd(c);
		c->state = CS_CLOSED;
	}
	/* Unsent payloads and pending requests complete; on_close is not called. */
	enum dt_status st = c->why.status == DT_OK ? DT_PEER : c->why.status;
	while (c->qlen > 0)
		pop_entry(c, st);
	run_dones(c);
	while (c->pending)
		fail_request(c, c->pending, st, "%s request to %s failed: %s", dt_msg_name(c->pending->type), c->peer,
			     c->why.msg);
	teardown_fd(c);
	dt_frame_decoder_release(&c->dec);
	dt_hello_release(&c->remote);
	free(c->rbuf);
	free(c->q);
	free(c->wbuf);
	free(c->dones);
	free(c);
}

void dt_conn_free(struct dt_conn *c)
{
	if (!c)
		return;
	if (c->in_cb) {
		c->free_pending = 1;
		return;
	}
	really_free(c);
}

void dt_conn_shutdown(struct dt_conn *c, const char *reason)
{
	if (c->state != CS_OPEN && c->state != CS_HANDSHAKE)
		return;
	send_reason(c, DT_MSG_SHUTDOWN, 0, reason ? reason : "");
	close_after_flush(c, DT_OK, "closed by this side: %s", reason ? reason : "shutdown");
}

/* ---- public sending and requests ---- */

enum dt_status dt_conn_send(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id, const void *payload,
			    size_t len, struct dt_err *err)
{
	enum dt_status st = can_send(c, err);
	if (st)
		return st;
	struct iovec part = { (void *)(uintptr_t)payload, len };
	enqueue(c, type, flags, request_id, &part, len ? 1 : 0, 1);
	flush(c);
	return DT_OK;
}

enum dt_status dt_conn_sendv_ref(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id,
				 const struct iovec *parts, int nparts, dt_send_done_fn done, void *arg, struct dt_err *err)
{
	enum dt_status st = can_send(c, err);
	if (st)
		return st;
	struct out_entry *e = enqueue(c, type, flags, request_id, parts, nparts, 0);
	e->done = done;
	e->arg = arg;
	flush(c);
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
	struct out_entry *e = enqueue(c, r->type, 0, r->id_, parts, nparts, copy);
	r->sending_ = !copy && e->nparts > 0;
	if (r->sending_)
		e->req = r;
	r->next_ = c->pending;
	c->pending = r;
	schedule(c, r->deadline);
	flush(c);
	return DT_OK;
}

void dt_request_cancel(struct dt_request *r)
{
	struct dt_conn *c = r->conn_;
	if (!c || r->done)
		return;
	if (r->sending_) {
		for (size_t i = 0; i < c->qlen; i++)
			if (entry_at(c, i)->req == r)
				entry_at(c, i)->req = NULL;
		conn_fail(c, DT_RUNTIME, "a %s request to %s was cancelled while its payload was being sent",
			  dt_msg_name(r->type), c->peer);
		r->sending_ = 0;
	}
	unlink_request(c, r);
	r->conn_ = NULL;
	r->done = 1;
	r->status = DT_RUNTIME;
	snprintf(r->err.msg, sizeof(r->err.msg), "%s request to %s cancelled", dt_msg_name(r->type), c->peer);
	r->err.status = DT_RUNTIME;
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

/* ---- state ---- */

const char *dt_conn_peer(const struct dt_conn *c)
{
	return c->peer;
}

const struct dt_hello *dt_conn_remote(const struct dt_conn *c)
{
	return c->have_remote ? &c->remote : NULL;
}

int dt_conn_is_open(const struct dt_conn *c)
{
	return c->state == CS_OPEN;
}

const struct dt_err *dt_conn_close_reason(const struct dt_conn *c)
{
	return &c->why;
}

struct dt_loop *dt_conn_loop(const struct dt_conn *c)
{
	return c->loop;
}

void dt_conn_set_user(struct dt_conn *c, void *user)
{
	c->user = user;
}

void *dt_conn_user(const struct dt_conn *c)
{
	return c->user;
}

void dt_conn_get_stats(const struct dt_conn *c, struct dt_conn_stats *out)
{
	*out = c->stats;
}
