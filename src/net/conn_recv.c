/* Reading, frame dispatch, and both sides of the handshake on the loop. */
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
#include "base/strutil.h"
#include "net/conn_internal.h"
#include "net/handshake.h"

static void send_hello_ok(struct dt_conn *c)
{
	size_t len;
	uint8_t *tmp = dt_hello_encode_alloc(c->acc.local, &len);
	struct iovec part = { tmp, len };
	dt__conn_enqueue(c, DT_MSG_HELLO_OK, DT_FRAME_F_REPLY, 0, &part, 1, 1);
	free(tmp);
}


/* The decoder failed: say why if the peer speaks our protocol, then close. */
static void violation(struct dt_conn *c)
{
	const char *detail = c->dec.detail;
	if (c->state == CS_AUTH && c->dec.header.type == DT_MSG_HELLO && !c->mismatch_code) {
		/* A hello longer than an auth_hello's cap is refused for what it is. */
		c->mismatch_code = DT_REFUSE_AUTH;
		dt_fmt(c->mismatch, sizeof(c->mismatch),
		       "this task requires the cluster secret and the peer sent a hello without it (start every task "
		       "with the same --cluster_secret_file)");
	}
	if ((c->dec.error == DT_FRAME_REJECTED || c->dec.error == DT_FRAME_TOO_LARGE) && c->mismatch_code) {
		/* One side has a cluster secret and the other none: a configuration
		 * error that retrying will not fix, said as such. */
		if (c->state == CS_CLIENT_AUTH) {
			dt__conn_fail(c, DT_CONFIG, "handshake with %s: %s", c->peer, detail);
			return;
		}
		dt__conn_send_reason(c, DT_MSG_REFUSE, DT_FRAME_F_REPLY, c->mismatch_code, c->mismatch);
		dt__conn_close_after_flush(c, DT_CONFIG, "refused %s: %s", c->peer, c->mismatch);
		return;
	}
	switch (c->dec.error) {
	case DT_FRAME_BAD_MAGIC:
		dt__conn_fail(c, DT_PROTOCOL, "bad frame from %s: %s", c->peer, detail);
		return;
	case DT_FRAME_BAD_VERSION:
		if (c->state == CS_CLIENT_HELLO || c->state == CS_CLIENT_AUTH) {
			dt__conn_fail(c, DT_CONFIG, "handshake with %s: it speaks protocol version %u, this side speaks version %u",
				      c->peer, c->dec.header.version, DT_PROTOCOL_VERSION);
			return;
		}
		if (CS_UNJUDGED(c->state) && c->acc.local) {
			char reason[DT_REASON_MAX], me[48];
			dt_hello_name(c->acc.local, me, sizeof(me));
			snprintf(reason, sizeof(reason), "protocol version differs: %s speaks version %u but the peer speaks version %u",
				 me, DT_PROTOCOL_VERSION, c->dec.header.version);
			dt__conn_send_reason(c, DT_MSG_REFUSE, DT_FRAME_F_REPLY, DT_REFUSE_VERSION, reason);
			dt__conn_close_after_flush(c, DT_CONFIG, "refused %s: %s", c->peer, reason);
			return;
		}
		break;
	case DT_FRAME_TOO_LARGE:
		if (c->state == CS_HANDSHAKE && c->dec.header.type == DT_MSG_HELLO && c->acc.local) {
			/* A real peer's hello is about as long as ours: one this much longer
			 * carries another model (or is not a peer). Refused before any of it
			 * is stored. */
			char reason[DT_REASON_MAX];
			snprintf(reason, sizeof(reason),
				 "a hello of %llu bytes is more than the %llu bytes this task takes before it has judged "
				 "a peer (its own is %zu): the peer's model signature is far larger, a different model?",
				 (unsigned long long)c->dec.header.length, (unsigned long long)c->acc.hello_cap,
				 dt_hello_encode(c->acc.local, NULL, 0));
			dt__conn_send_reason(c, DT_MSG_REFUSE, DT_FRAME_F_REPLY, DT_REFUSE_SIGNATURE, reason);
			dt__conn_close_after_flush(c, DT_PROTOCOL, "refused %s: %s", c->peer, reason);
			return;
		}
		break;
	default:
		break;
	}
	char text[DT_REASON_MAX];
	snprintf(text, sizeof(text), "bad frame: %s; closing the connection", detail);
	dt__conn_send_reason(c, DT_MSG_ERROR, 0, DT_WIRE_ERR_PROTOCOL, text);
	dt__conn_close_after_flush(c, DT_PROTOCOL, "bad frame from %s: %s", c->peer, detail);
}

int dt__conn_on_header(void *arg, const struct dt_frame_header *h, void **dest, char *why, size_t cap)
{
	struct dt_conn *c = arg;
	if (c->state == CS_AUTH || c->state == CS_AUTH_PROOF || c->state == CS_CLIENT_AUTH)
		return dt__conn_auth_header(c, h, why, cap);
	if (c->state == CS_HANDSHAKE) {
		if (h->type == DT_MSG_AUTH_HELLO && !c->sec.mode) {
			c->mismatch_code = DT_REFUSE_AUTH;
			dt_fmt(c->mismatch, sizeof(c->mismatch),
			       "this task runs without a cluster secret but the peer authenticates (give every task the "
			       "same --cluster_secret_file, or none on a loopback-only cluster)");
		}
		if (h->type != DT_MSG_HELLO) {
			snprintf(why, cap, "expected a hello first, got %s", dt_msg_name(h->type));
			return -1;
		}
		/* The decoder checked h->length against hello_cap already; nothing is allocated yet. */
		if (c->acc.reserve)
			c->acc.reserve(c->acc.reserve_arg, c, h->length);
		return 0;
	}
	if (c->state == CS_CLIENT_HELLO) {
		if (h->type != DT_MSG_HELLO_OK && h->type != DT_MSG_REFUSE && h->type != DT_MSG_ERROR) {
			snprintf(why, cap, "expected hello_ok or refuse, got %s", dt_msg_name(h->type));
			return -1;
		}
		return 0;
	}
	if (h->flags & DT_FRAME_F_REPLY) {
		/* Straight into the caller's buffer (a worker's parameters, for a
		 * pull) only where no check is to come: on an authenticated link the
		 * frame is received here first and copied there once its tag
		 * verified (handle_reply), so no forged byte reaches it. */
		struct dt_request *r = dt__conn_find_request(c, h->request_id);
		if (r && r->reply_buf && !c->dec.trailer && h->type != DT_MSG_ERROR && h->length > 0 &&
		    h->length <= r->reply_cap) {
			*dest = r->reply_buf;
			c->receiving = r;
		}
		return 0;
	}
	if (h->type > DT_MSG_CONTROL_LAST && c->cfg.handler && c->cfg.handler->on_dest)
		*dest = c->cfg.handler->on_dest(c, h, c->cfg.arg);
	return 0;
}

static void open_now(struct dt_conn *c)
{
	if (c->rcap < RBUF_CAP) { /* judged: reads go back to full size (rbuf may hold pipelined bytes) */
		c->rbuf = dt_xrealloc(c->rbuf, RBUF_CAP);
		c->rcap = RBUF_CAP;
	}
	c->state = CS_OPEN;
	c->was_open = 1;
	c->dec.max_payload = c->cfg.max_payload;
	c->last_rx = dt_now_ns();
	dt__conn_schedule_next(c);
	if (c->cfg.handler && c->cfg.handler->on_open)
		c->cfg.handler->on_open(c, c->cfg.arg);
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
		snprintf(text, sizeof(text), "bad hello: %.900s", e.msg);
		dt__conn_send_reason(c, DT_MSG_ERROR, 0, DT_WIRE_ERR_PROTOCOL, text);
		dt__conn_close_after_flush(c, DT_PROTOCOL, "bad hello from %s: %s", c->peer, e.msg);
		return;
	}
	char name[48];
	dt_hello_name(&remote, name, sizeof(name));
	dt_fmt(c->peer, sizeof(c->peer), "%s at %s", name, c->addr);
	if (!code && c->sec.mode && (strcmp(remote.role, c->hs.role_c) != 0 || remote.index != c->hs.index_c)) {
		dt_fmt(reason, sizeof(reason), "it authenticated as %s:%u but its hello says %s", c->hs.role_c,
		       c->hs.index_c, name);
		code = DT_REFUSE_IDENTITY;
	}
	if (!code && c->acc.admit)
		code = c->acc.admit(c->acc.admit_arg, c, &remote, reason, sizeof(reason));
	if (code) {
		dt_hello_release(&remote);
		dt__conn_send_reason(c, DT_MSG_REFUSE, DT_FRAME_F_REPLY, code, reason);
		dt__conn_close_after_flush(c, DT_CONFIG, "refused %s: %s", c->peer, reason);
		return;
	}
	c->remote = remote;
	c->have_remote = 1;
	send_hello_ok(c);
	dt__conn_flush(c);
	if (c->state == CS_HANDSHAKE)
		open_now(c);
}

/* Client side: the server's answer to our HELLO. */
static void handle_answer(struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *payload, size_t len)
{
	struct dt_err e = DT_ERR_INIT;
	if (h->type == DT_MSG_REFUSE || h->type == DT_MSG_ERROR) {
		struct dt_reason_msg m;
		if (dt_reason_decode(&m, payload, len, &e) != DT_OK)
			dt__conn_fail(c, DT_PROTOCOL, "handshake with %s: bad %s: %s", c->peer, dt_msg_name(h->type), e.msg);
		else if (h->type == DT_MSG_REFUSE)
			dt__conn_fail(c, DT_CONFIG, "%s refused the connection: %s", c->peer, m.text);
		else
			dt__conn_fail(c, dt_wire_error_to_status(m.code), "handshake with %s failed there: %s", c->peer, m.text);
		return;
	}
	struct dt_hello remote;
	if (dt_hello_decode(&remote, payload, len, &e) != DT_OK) {
		dt_hello_release(&remote);
		dt__conn_fail(c, DT_PROTOCOL, "handshake with %s: %s", c->peer, e.msg);
		return;
	}
	char reason[DT_REASON_MAX];
	if (dt_handshake_check(c->acc.local, &remote, reason, sizeof(reason))) {
		dt_hello_release(&remote);
		dt__conn_fail(c, DT_CONFIG, "handshake with %s: %s", c->peer, reason);
		return;
	}
	if (c->sec.mode && (strcmp(remote.role, c->hs.role_s) != 0 || remote.index != c->hs.index_s)) {
		dt__conn_fail(c, DT_CONFIG, "handshake with %s: it authenticated as %s:%u but its hello says %s:%u", c->peer,
			      c->hs.role_s, c->hs.index_s, remote.role, remote.index);
		dt_hello_release(&remote);
		return;
	}
	if (c->expect_role[0] && (strcmp(remote.role, c->expect_role) != 0 || remote.index != c->expect_index)) {
		dt__conn_fail(c, DT_CONFIG, "handshake with %s: the task there is %s:%u, not %s:%u (are the cluster addresses right?)",
			      c->peer, remote.role, remote.index, c->expect_role, c->expect_index);
		dt_hello_release(&remote);
		return;
	}
	if (!c->expect_role[0]) {
		char name[48];
		dt_hello_name(&remote, name, sizeof(name));
		dt_fmt(c->peer, sizeof(c->peer), "%s at %s", name, c->addr);
	}
	c->remote = remote;
	c->have_remote = 1;
	c->acc.local = NULL; /* no longer needed; the caller may release it */
	open_now(c);
}

static void handle_reply(struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *payload)
{
	struct dt_request *r = dt__conn_find_request(c, h->request_id);
	if (!r)
		return; /* a late reply to a request that timed out or was cancelled */
	if (r->sending_) {
		dt__conn_protocol_error(c, "%s replied to %s request %llu before receiving all of it", c->peer,
					dt_msg_name(r->type), (unsigned long long)r->id_);
		return;
	}
	r->reply = *h;
	if (h->type == DT_MSG_ERROR) {
		struct dt_reason_msg m;
		struct dt_err e = DT_ERR_INIT;
		if (dt_reason_decode(&m, payload, (size_t)h->length, &e) != DT_OK) {
			dt__conn_protocol_error(c, "bad error reply from %s: %s", c->peer, e.msg);
			return;
		}
		dt__conn_fail_request(c, r, dt_wire_error_to_status(m.code), "%s failed %s request %llu: %s", c->peer,
				      dt_msg_name(r->type), (unsigned long long)r->id_, m.text);
		return;
	}
	if (r->reply_buf) {
		if (h->length > r->reply_cap) {
			dt__conn_fail_request(c, r, DT_PROTOCOL, "the reply from %s to %s request %llu is %llu bytes, more than the %zu expected",
					      c->peer, dt_msg_name(r->type), (unsigned long long)r->id_,
					      (unsigned long long)h->length, r->reply_cap);
			return;
		}
		if (payload != r->reply_buf && h->length)
			memcpy(r->reply_buf, payload, (size_t)h->length);
		payload = r->reply_buf;
	}
	dt__conn_finish_request(c, r, DT_OK, payload);
}

/* A frame in the open state. Control types are handled by type; the REPLY
 * flag matters for the rest (ECHO, ERROR and the layers' messages). */
static void open_frame(struct dt_conn *c, const struct dt_frame_header *h, uint8_t *payload)
{
	size_t len = (size_t)h->length;
	struct dt_reason_msg m;
	struct dt_err e = DT_ERR_INIT;
	switch (h->type) {
	case DT_MSG_HEARTBEAT:
		c->stats.heartbeats_in++;
		return;
	case DT_MSG_HELLO:
	case DT_MSG_HELLO_OK:
	case DT_MSG_REFUSE:
		dt__conn_protocol_error(c, "%s sent a %s after the handshake", c->peer, dt_msg_name(h->type));
		return;
	case DT_MSG_SHUTDOWN:
		if (dt_reason_decode(&m, payload, len, &e) != DT_OK)
			dt__conn_protocol_error(c, "bad shutdown from %s: %s", c->peer, e.msg);
		else
			dt__conn_fail(c, DT_OK, "%s shut down the connection: %s", c->peer, m.text);
		return;
	default:
		break;
	}
	if (h->flags & DT_FRAME_F_REPLY) {
		handle_reply(c, h, payload);
		return;
	}
	switch (h->type) {
	case DT_MSG_ECHO: {
		struct iovec part = { payload, len };
		dt__conn_enqueue(c, DT_MSG_ECHO, DT_FRAME_F_REPLY, h->request_id, &part, len ? 1 : 0, 1);
		dt__conn_flush(c);
		return;
	}
	case DT_MSG_ERROR: /* not an answer: the peer reports a connection-level error and goes */
		if (dt_reason_decode(&m, payload, len, &e) != DT_OK)
			dt__conn_protocol_error(c, "bad error from %s: %s", c->peer, e.msg);
		else
			dt__conn_fail(c, dt_wire_error_to_status(m.code), "%s reported an error: %s", c->peer, m.text);
		return;
	default:
		if (c->cfg.handler && c->cfg.handler->on_frame)
			c->cfg.handler->on_frame(c, h, payload, c->cfg.arg);
		else if (h->request_id)
			(void)dt_conn_reply_error(c, h->request_id, DT_CONFIG, "this task does not serve %s requests",
						  dt_msg_name(h->type));
	}
}

static void frame_ready(struct dt_conn *c)
{
	struct dt_frame_header h = c->dec.header;
	uint8_t *payload = dt_frame_decoder_payload(&c->dec);
	c->stats.frames_in++;
	c->receiving = NULL;
	if (c->dec.trailer && dt__conn_auth_check(c, &h, payload) != 0) {
		dt_frame_decoder_next(&c->dec);
		return;
	}
	if (c->state == CS_AUTH || c->state == CS_AUTH_PROOF || c->state == CS_CLIENT_AUTH)
		dt__conn_auth_frame(c, &h, payload);
	else if (c->state == CS_HANDSHAKE)
		handle_hello(c, payload, (size_t)h.length); /* on_header let nothing else through */
	else if (c->state == CS_CLIENT_HELLO)
		handle_answer(c, &h, payload, (size_t)h.length);
	else if (c->state == CS_OPEN)
		open_frame(c, &h, payload);
	dt_frame_decoder_next(&c->dec);
}

/* Feeds the buffered bytes to the decoder; returns with the buffer empty or the conn not reading. */
static void consume_buffered(struct dt_conn *c)
{
	while (c->rpos < c->rlen && (CS_HANDSHAKING(c->state) || c->state == CS_OPEN)) {
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
		dt__conn_teardown_fd(c);
		c->state = CS_CLOSED;
		dt__conn_schedule(c, dt_now_ns());
		return;
	}
	if (dt_frame_decoder_finish(&c->dec) == DT_FRAME_TRUNCATED)
		dt__conn_fail(c, DT_PEER, "%s closed the connection in the middle of a frame: %s", c->peer, c->dec.detail);
	else if (CS_UNJUDGED(c->state))
		dt__conn_fail(c, DT_PEER, "%s closed the connection before its hello", c->peer);
	else if (c->state == CS_CLIENT_HELLO || c->state == CS_CLIENT_AUTH)
		dt__conn_fail(c, DT_PEER, "handshake with %s: it closed the connection before answering our hello", c->peer);
	else
		dt__conn_fail(c, DT_PEER, "%s closed the connection", c->peer);
}

static void do_read(struct dt_conn *c, int hup)
{
	for (int round = 0;; round++) {
		consume_buffered(c);
		if (c->state == CS_CLOSED || round == READ_BUDGET || (c->read_paused && !hup))
			return;
		if (c->state != CS_CLOSING)
			dt__conn_auth_progress(c); /* a frame left incomplete: check what is in */
		uint8_t *where;
		size_t want;
		int direct = c->state != CS_CLOSING && dt_frame_decoder_window(&c->dec, &where, &want) && want >= DIRECT_MIN;
		if (!direct) {
			where = c->rbuf;
			want = c->rcap;
		} else if (c->dec.trailer && want > RX_PIECE) {
			want = RX_PIECE; /* checked piece by piece while the next arrives */
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
				else
					dt__conn_auth_progress(c);
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
		if (errno == ECONNRESET)
			dt__conn_fail(c, DT_PEER, "%s reset the connection", c->peer);
		else
			dt__conn_fail(c, DT_PEER, "cannot receive from %s: %s", c->peer, strerror(errno));
		return;
	}
}

void dt__conn_on_io(struct dt_loop *loop, int fd, unsigned events, void *arg)
{
	struct dt_conn *c = arg;
	c->in_cb++;
	if (events & (DT_LOOP_READ | DT_LOOP_HUP))
		do_read(c, (events & DT_LOOP_HUP) != 0);
	if (c->state != CS_CLOSED && c->qlen && (events & (DT_LOOP_WRITE | DT_LOOP_HUP)))
		dt__conn_flush(c);
	if (c->state != CS_CLOSED && (events & DT_LOOP_HUP) && c->fd >= 0 && c->read_paused) {
		/* Hung up while we were not reading: nothing more will come or go. */
		dt__conn_fail(c, DT_PEER, "%s hung up", c->peer);
	}
	dt__conn_update_interest(c);
	dt__conn_run_dones(c);
	c->in_cb--;
	if (c->free_pending && !c->in_cb)
		dt__conn_really_free(c);
}
