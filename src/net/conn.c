/* Connection lifecycle, the timer and closing; see conn_internal.h for the split. */
#include "net/conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sodium.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/strutil.h"
#include "net/conn_internal.h"
#include "net/handshake.h"

static void set_why(struct dt_conn *c, enum dt_status st, const char *fmt, va_list ap)
{
	if (c->why_set)
		return;
	c->why_set = 1;
	c->why.status = st;
	dt_vfmt(c->why.msg, sizeof(c->why.msg), fmt, ap);
}

void dt__conn_teardown_fd(struct dt_conn *c)
{
	if (c->fd < 0)
		return;
	dt_loop_remove(c->loop, c->fd);
	close(c->fd);
	c->fd = -1;
}

/* Closes now; callbacks follow on the next timer round. */
void dt__conn_fail(struct dt_conn *c, enum dt_status st, const char *fmt, ...)
{
	if (c->state == CS_CLOSED)
		return;
	va_list ap;
	va_start(ap, fmt);
	set_why(c, st, fmt, ap);
	va_end(ap);
	dt__conn_teardown_fd(c);
	c->state = CS_CLOSED;
	if (c->receiving) {
		dt_frame_decoder_discard(&c->dec);
		c->receiving = NULL;
	}
	dt__conn_schedule(c, dt_now_ns());
}

/* Sends what is queued (the last frame included), then closes within DT_NET_LINGER_S. */
void dt__conn_close_after_flush(struct dt_conn *c, enum dt_status st, const char *fmt, ...)
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
	dt__conn_schedule(c, c->linger_by);
	dt__conn_flush(c);
}

/* A violation by a peer that speaks the protocol: tell it why in an ERROR frame, then close. */
void dt__conn_protocol_error(struct dt_conn *c, const char *fmt, ...)
{
	if (c->state == CS_CLOSED || c->state == CS_CLOSING)
		return;
	char text[DT_REASON_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	char reason[DT_REASON_MAX + 32];
	snprintf(reason, sizeof(reason), "%s; closing the connection", text);
	dt__conn_send_reason(c, DT_MSG_ERROR, 0, DT_WIRE_ERR_PROTOCOL, reason);
	dt__conn_close_after_flush(c, DT_PROTOCOL, "%s", text);
}

void dt__conn_schedule(struct dt_conn *c, int64_t when)
{
	if (!dt_timer_active(&c->timer) || when < c->timer.when)
		dt_timer_start(c->loop, &c->timer, when);
}

void dt__conn_schedule_next(struct dt_conn *c)
{
	int64_t next = INT64_MAX;
	switch (c->state) {
	case CS_AUTH:
	case CS_AUTH_PROOF:
	case CS_CLIENT_AUTH:
	case CS_HANDSHAKE:
	case CS_CLIENT_HELLO:
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
	dt__conn_schedule(c, next);
}

static void notify_close(struct dt_conn *c)
{
	c->notified = 1;
	enum dt_status st = c->why.status == DT_OK ? DT_PEER : c->why.status;
	while (c->qlen > 0)
		dt__conn_pop_entry(c, st);
	dt__conn_run_dones(c);
	while (c->pending) {
		struct dt_request *r = c->pending;
		dt__conn_fail_request(c, r, st, "%s request %llu to %s failed: %s", dt_msg_name(r->type), (unsigned long long)r->id_,
				      c->peer, c->why.msg);
	}
	if (c->quiet_failure && !c->was_open)
		return; /* dt_conn_connect reports it as its own error */
	if (c->cfg.handler && c->cfg.handler->on_close)
		c->cfg.handler->on_close(c, &c->why, c->cfg.arg); /* may free c (deferred) */
}

static void heartbeat(struct dt_conn *c)
{
	dt__conn_enqueue(c, DT_MSG_HEARTBEAT, 0, 0, NULL, 0, 1);
	c->stats.heartbeats_out++;
	dt__conn_flush(c);
}

static void on_timer(struct dt_loop *loop, struct dt_timer *t, void *arg)
{
	struct dt_conn *c = arg;
	c->in_cb++;
	dt__conn_run_dones(c);
	int64_t now = dt_now_ns();
	if (CS_UNJUDGED(c->state) && now >= c->handshake_by)
		dt__conn_fail(c, DT_TIMEOUT, "no %s from %s within %.1f s",
			      c->state == CS_AUTH ? "auth_hello" : c->state == CS_AUTH_PROOF ? "auth_proof" : "hello",
			      c->peer, c->cfg.handshake_s);
	if ((c->state == CS_CLIENT_HELLO || c->state == CS_CLIENT_AUTH) && now >= c->handshake_by)
		dt__conn_fail(c, DT_TIMEOUT, "handshake with %s: no answer to our hello within %.1f s", c->peer,
			      dt__secs(now - c->last_tx));
	if (c->state == CS_CLOSING && now >= c->linger_by) {
		dt__conn_teardown_fd(c);
		c->state = CS_CLOSED;
	}
	if (c->state == CS_OPEN) {
		if (now - c->last_rx >= (int64_t)(c->cfg.silence_s * 1e9)) {
			dt__conn_fail(c, DT_TIMEOUT, "no data from %s for %.1f s (heartbeats are due every %.1f s)", c->peer,
				      dt__secs(now - c->last_rx), c->cfg.heartbeat_s);
		} else {
			dt__conn_expire_requests(c, now);
			if (c->state == CS_OPEN && c->qlen == 0 &&
			    now - c->last_tx >= (int64_t)(c->cfg.heartbeat_s * 1e9))
				heartbeat(c);
		}
	}
	if (c->state == CS_CLOSED) {
		if (!c->notified)
			notify_close(c);
	} else {
		dt__conn_schedule_next(c);
	}
	c->in_cb--;
	if (c->free_pending && !c->in_cb)
		dt__conn_really_free(c);
}

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
	dt_fmt(c->peer, sizeof(c->peer), "%s", peer);
	dt_fmt(c->addr, sizeof(c->addr), "%s", peer);
	if (cfg)
		c->cfg = *cfg;
	apply_defaults(&c->cfg);
	dt_frame_decoder_init(&c->dec, state == CS_OPEN ? c->cfg.max_payload : DT_MSG_CAP_HANDSHAKE);
	c->dec.on_header = dt__conn_on_header;
	c->dec.on_header_arg = c;
	/* An accepted peer gets a small read buffer until it is judged: a
	 * thousand strangers then cost a few MiB, not 64 KiB each (open_now grows it). */
	c->rcap = CS_UNJUDGED(state) ? RBUF_PENDING : RBUF_CAP;
	c->rbuf = dt_xmalloc(c->rcap);
	c->last_rx = c->last_tx = dt_now_ns();
	dt_timer_init(&c->timer, on_timer, c);
	enum dt_status st = dt_sock_set_nonblocking(fd, err);
	if (!st)
		st = dt_loop_add(loop, fd, DT_LOOP_READ, dt__conn_on_io, c, err);
	if (st) {
		c->fd = -1;
		close(fd);
		dt__conn_really_free(c);
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
	c->was_open = 1;
	if (remote) {
		c->remote = *remote;
		dt_signature_init(&c->remote.signature);
		dt_signature_copy(&c->remote.signature, &remote->signature);
		c->have_remote = 1;
	}
	dt__conn_schedule_next(c);
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
	if (!c->acc.hello_cap)
		c->acc.hello_cap = dt_handshake_hello_cap(opts->local);
	c->dec.max_payload = c->acc.hello_cap;
	if (opts->local->auth) {
		/* Nothing but the small authentication messages until the peer has
		 * proved it holds the secret (conn_auth.c). */
		c->state = CS_AUTH;
		c->dec.max_payload = DT_AUTH_MSG_MAX;
	}
	c->handshake_by = dt_now_ns() + (int64_t)(c->cfg.handshake_s * 1e9);
	dt__conn_schedule_next(c);
	return DT_OK;
}

enum dt_status dt_conn_start_client(struct dt_loop *loop, int fd, const char *peer, const struct dt_hello *local,
				    const char *expect_role, uint32_t expect_index, const struct dt_conn_config *cfg,
				    int64_t deadline, struct dt_conn **out, struct dt_err *err)
{
	enum dt_status st = conn_new(loop, fd, peer, cfg, CS_CLIENT_HELLO, out, err);
	if (st)
		return st;
	struct dt_conn *c = *out;
	c->acc.local = local;
	if (expect_role) {
		snprintf(c->expect_role, sizeof(c->expect_role), "%s", expect_role);
		c->expect_index = expect_index;
	}
	int64_t by = dt_now_ns() + (int64_t)(c->cfg.handshake_s * 1e9);
	c->handshake_by = deadline < by ? deadline : by;
	if (local->auth)
		dt__conn_auth_start_client(c); /* the HELLO follows the server's challenge */
	else
		dt__conn_queue_hello(c);
	dt__conn_flush(c);
	dt__conn_schedule_next(c);
	return DT_OK;
}

struct connect_wait {
	struct dt_loop *loop;
	struct dt_conn *c;
};

/* Backoff pauses run the loop, so the other connections on it stay served. */
static void pause_in_loop(void *arg, double seconds)
{
	struct connect_wait *w = arg;
	int64_t until = dt_deadline_in(seconds);
	while (!dt_deadline_passed(until))
		if (dt_loop_run_once(w->loop, until, NULL) != DT_OK)
			break;
}

static int handshake_over(void *arg)
{
	struct connect_wait *w = arg;
	return w->c->state != CS_CLIENT_HELLO && w->c->state != CS_CLIENT_AUTH;
}

/* One attempt: the TCP connection (refusals retried inside until tcp_by),
 * then the handshake until min(deadline, handshake_s). */
static enum dt_status connect_once(struct dt_loop *loop, const char *host, int port, const struct dt_hello *local,
				   const char *expect_role, uint32_t expect_index, const struct dt_conn_config *cfg,
				   int64_t tcp_by, int64_t deadline, struct dt_conn **out, struct dt_err *err)
{
	*out = NULL;
	char task[64] = "", peer[DT_PEER_LABEL_MAX];
	if (expect_role)
		snprintf(task, sizeof(task), "%s:%u", expect_role, expect_index);
	if (task[0])
		dt_fmt(peer, sizeof(peer), "%s at %s:%d", task, host, port);
	else
		dt_fmt(peer, sizeof(peer), "%s:%d", host, port);
	struct connect_wait w = { loop, NULL };
	struct dt_connect_opts opts = { .initial_backoff_s = 0.01, .max_backoff_s = 1.0, .attempt_timeout_s = 5.0,
					.pause = pause_in_loop, .pause_arg = &w, .congestion = cfg ? cfg->congestion : NULL };
	int fd;
	enum dt_status st = dt_sock_connect(host, port, task[0] ? task : NULL, tcp_by, &opts, &fd, err);
	if (st)
		return st;
	struct dt_conn *c;
	st = dt_conn_start_client(loop, fd, peer, local, expect_role, expect_index, cfg, deadline, &c, err);
	if (st)
		return st;
	c->quiet_failure = 1;
	w.c = c;
	st = dt_loop_run_until(loop, handshake_over, &w, DT_DEADLINE_NONE, "the handshake", err);
	if (!st && c->state != CS_OPEN) {
		/* The conn's own deadline ended the wait; report what it recorded. */
		st = c->why.status ? c->why.status : DT_PEER;
		if (err)
			*err = c->why;
	}
	if (st) {
		dt_conn_free(c);
		return st;
	}
	c->quiet_failure = 0;
	*out = c;
	return DT_OK;
}

enum dt_status dt_conn_connect(struct dt_loop *loop, const char *host, int port, const struct dt_hello *local,
			       const char *expect_role, uint32_t expect_index, const struct dt_conn_config *cfg,
			       int64_t deadline, struct dt_conn **out, struct dt_err *err)
{
	return connect_once(loop, host, port, local, expect_role, expect_index, cfg, deadline, deadline, out, err);
}

enum dt_status dt_conn_dial(struct dt_loop *loop, const char *host, int port, const struct dt_hello *local,
			    const char *expect_role, uint32_t expect_index, const struct dt_conn_config *cfg,
			    struct dt_retry *rt, const struct dt_dial_stop *stop, struct dt_conn **out, struct dt_err *err)
{
	*out = NULL;
	struct dt_err attempt_err = DT_ERR_INIT;
	for (;;) {
		/* A refused port is knocked on for DT_DIAL_SLICE_S inside one
		 * attempt, so `stop` is asked at least that often; a hello gets
		 * its whole handshake_s. */
		int64_t now = dt_now_ns();
		enum dt_status st = connect_once(loop, host, port, local, expect_role, expect_index, cfg,
						 dt_retry_attempt_deadline(rt, now + (int64_t)(DT_DIAL_SLICE_S * 1e9)),
						 rt->deadline, out, &attempt_err);
		if (!st)
			return DT_OK;
		if (!dt_retry_failed(rt, st, &attempt_err, dt_now_ns()))
			break;
		if (stop && stop->fn(stop->arg))
			return DT_OK; /* *out stays NULL */
		struct connect_wait w = { loop, NULL };
		pause_in_loop(&w, (double)(rt->next_at - dt_now_ns()) / 1e9);
		if (stop && stop->fn(stop->arg))
			return DT_OK;
	}
	char what[DT_PEER_LABEL_MAX + 64];
	if (expect_role)
		snprintf(what, sizeof(what), "cannot reach %s:%u at %s:%d", expect_role, expect_index, host, port);
	else
		snprintf(what, sizeof(what), "cannot reach %s:%d", host, port);
	return dt_retry_give_up(rt, what, dt_now_ns(), err);
}

void dt__conn_really_free(struct dt_conn *c)
{
	dt_timer_stop(c->loop, &c->timer);
	if (c->state != CS_CLOSED) {
		if (!c->why_set) {
			c->why_set = 1;
			c->why.status = DT_PEER;
			snprintf(c->why.msg, sizeof(c->why.msg), "the connection to %s was closed by this side", c->peer);
		}
		dt__conn_teardown_fd(c);
		c->state = CS_CLOSED;
	}
	/* Unsent payloads and pending requests complete; on_close is not called. */
	enum dt_status st = c->why.status == DT_OK ? DT_PEER : c->why.status;
	while (c->qlen > 0)
		dt__conn_pop_entry(c, st);
	dt__conn_run_dones(c);
	while (c->pending)
		dt__conn_fail_request(c, c->pending, st, "%s request to %s failed: %s", dt_msg_name(c->pending->type), c->peer,
				      c->why.msg);
	dt__conn_teardown_fd(c);
	dt_frame_decoder_release(&c->dec);
	dt_hello_release(&c->remote);
	dt_wire_kernel_release(&c->tx_k);
	dt_wire_kernel_release(&c->rx_k);
	sodium_memzero(&c->sec, sizeof(c->sec));
	sodium_memzero(&c->hs, sizeof(c->hs));
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
	dt__conn_really_free(c);
}

int dt__conn_is_pending(const struct dt_conn *c)
{
	return CS_UNJUDGED(c->state);
}

void dt__conn_evict(struct dt_conn *c, const char *why)
{
	if (!CS_UNJUDGED(c->state))
		return;
	c->evicted = 1;
	dt__conn_fail(c, DT_TIMEOUT, "closed %s before its hello: %s", c->peer, why);
}

int dt__conn_was_evicted(const struct dt_conn *c)
{
	return c->evicted;
}

void dt_conn_shutdown(struct dt_conn *c, const char *reason)
{
	if (c->state != CS_OPEN && !CS_HANDSHAKING(c->state))
		return;
	dt__conn_send_reason(c, DT_MSG_SHUTDOWN, 0, 0, reason ? reason : "");
	dt__conn_close_after_flush(c, DT_OK, "closed by this side: %s", reason ? reason : "shutdown");
}

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
