/* The cluster-secret exchange on the loop (both sides) and the check of every
 * authenticated frame; the messages and keys are net/auth.h's. */
#include "net/conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/strutil.h"
#include "net/conn_internal.h"
#include "net/handshake.h"

void dt__conn_queue_hello(struct dt_conn *c)
{
	size_t len;
	uint8_t *tmp = dt_hello_encode_alloc(c->acc.local, &len);
	struct iovec part = { tmp, len };
	dt__conn_enqueue(c, DT_MSG_HELLO, 0, 0, &part, 1, 1);
	free(tmp);
}

void dt__conn_auth_start_client(struct dt_conn *c)
{
	uint8_t buf[DT_AUTH_MSG_MAX];
	size_t len = dt_auth_client_hello(&c->hs, c->acc.local, buf);
	struct iovec part = { buf, len };
	dt__conn_enqueue(c, DT_MSG_AUTH_HELLO, 0, 0, &part, 1, 1);
	c->state = CS_CLIENT_AUTH;
	/* The answer is a challenge or a refusal: small either way. */
	c->dec.max_payload = DT_MSG_CAP_SMALL;
}

int dt__conn_auth_header(struct dt_conn *c, const struct dt_frame_header *h, char *why, size_t cap)
{
	uint16_t want = c->state == CS_AUTH ? DT_MSG_AUTH_HELLO : c->state == CS_AUTH_PROOF ? DT_MSG_AUTH_PROOF : 0;
	if (c->state == CS_CLIENT_AUTH) {
		if (h->type == DT_MSG_AUTH_CHALLENGE || h->type == DT_MSG_REFUSE || h->type == DT_MSG_ERROR)
			return 0;
		if (h->type == DT_MSG_HELLO_OK) {
			c->mismatch_code = DT_REFUSE_AUTH;
			dt_fmt(why, cap, "it runs without a cluster secret but this task has one (give every task the same "
				       "--cluster_secret_file)");
			return -1;
		}
		dt_fmt(why, cap, "expected auth_challenge or refuse, got %s", dt_msg_name(h->type));
		return -1;
	}
	if (h->type == want)
		return 0;
	if (c->state == CS_AUTH && h->type == DT_MSG_HELLO) {
		c->mismatch_code = DT_REFUSE_AUTH;
		dt_fmt(c->mismatch, sizeof(c->mismatch),
		       "this task requires the cluster secret and the peer sent a hello without it (start every task "
		       "with the same --cluster_secret_file)");
	}
	dt_fmt(why, cap, "expected %s, got %s", dt_msg_name(want), dt_msg_name(h->type));
	return -1;
}

static void refuse(struct dt_conn *c, uint32_t code, const char *why)
{
	dt__conn_send_reason(c, DT_MSG_REFUSE, DT_FRAME_F_REPLY, code, why);
	dt__conn_close_after_flush(c, DT_CONFIG, "refused %s: %s", c->peer, why);
}

static void server_frame(struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *payload)
{
	char why[DT_REASON_MAX];
	const struct dt_hello *local = c->acc.local;
	size_t len = (size_t)h->length;
	if (c->state == CS_AUTH) {
		uint8_t out[DT_AUTH_MSG_MAX];
		size_t out_len = 0;
		uint32_t code = dt_auth_server_challenge(&c->hs, local, payload, len, out, &out_len, why, sizeof(why));
		if (code) {
			refuse(c, code, why);
			return;
		}
		dt_fmt(c->peer, sizeof(c->peer), "%s:%u at %s (unauthenticated)", c->hs.role_c, c->hs.index_c, c->addr);
		struct iovec part = { out, out_len };
		dt__conn_enqueue(c, DT_MSG_AUTH_CHALLENGE, DT_FRAME_F_REPLY, 0, &part, 1, 1);
		dt__conn_flush(c);
		c->state = CS_AUTH_PROOF;
		return;
	}
	uint32_t code = dt_auth_server_check(&c->hs, payload, len, &c->sec, why, sizeof(why));
	if (code) {
		refuse(c, code, why);
		return;
	}
	dt_fmt(c->peer, sizeof(c->peer), "%s:%u at %s", c->hs.role_c, c->hs.index_c, c->addr);
	c->dec.trailer = DT_AUTH_TAG_BYTES; /* from the next frame (the HELLO) on */
	c->dec.max_payload = c->acc.hello_cap;
	c->state = CS_HANDSHAKE;
}

static void client_frame(struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *payload)
{
	size_t len = (size_t)h->length;
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
	char why[DT_REASON_MAX];
	uint8_t proof[DT_AUTH_MAC_BYTES];
	struct dt_wire_sec sec;
	uint32_t code = dt_auth_client_prove(&c->hs, payload, len, c->expect_role[0] ? c->expect_role : NULL,
					     c->expect_index, proof, &sec, why, sizeof(why));
	if (code) {
		dt__conn_fail(c, DT_CONFIG, "authentication with %s failed: %s", c->peer, why);
		return;
	}
	struct iovec part = { proof, sizeof(proof) };
	dt__conn_enqueue(c, DT_MSG_AUTH_PROOF, 0, 0, &part, 1, 1); /* before the keys apply */
	c->sec = sec;
	dt__conn_queue_hello(c); /* the first tagged frame */
	dt__conn_flush(c);
	c->dec.trailer = DT_AUTH_TAG_BYTES;
	c->dec.max_payload = DT_MSG_CAP_HANDSHAKE;
	c->state = CS_CLIENT_HELLO;
}

void dt__conn_auth_frame(struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *payload)
{
	if (c->state == CS_CLIENT_AUTH)
		client_frame(c, h, payload);
	else
		server_frame(c, h, payload);
}

void dt__conn_auth_progress(struct dt_conn *c)
{
	uint64_t have;
	uint8_t *p;
	if (!c->dec.trailer || !(p = dt_frame_decoder_partial(&c->dec, &have)))
		return;
	if (!c->rx_active) {
		dt_wire_open_begin(&c->sec, &c->rx_k, c->dec.hdr_raw);
		c->rx_active = 1;
		c->rx_done = 0;
	}
	if (have > c->rx_done) {
		/* Checked (in encrypt mode decrypted) in place; nothing reads these
		 * bytes before the frame is complete and its tag has decided. */
		dt_wire_kernel_update(&c->rx_k, p + c->rx_done, p + c->rx_done, (size_t)(have - c->rx_done));
		c->rx_done = have;
	}
}

int dt__conn_auth_check(struct dt_conn *c, const struct dt_frame_header *h, uint8_t *payload)
{
	const size_t len = (size_t)h->length;
	int ok;
	uint64_t n;
	if (c->rx_active) {
		/* Checked as it arrived: the rest, then the tag. */
		c->rx_active = 0;
		n = c->sec.rx_n - 1;
		if (!payload && len)
			return 0; /* dropped while it arrived (below) */
		if (len > c->rx_done)
			dt_wire_kernel_update(&c->rx_k, payload + c->rx_done, payload + c->rx_done, len - (size_t)c->rx_done);
		ok = dt_wire_open_end(&c->rx_k, payload, len, c->dec.tag) == 0;
	} else {
		n = c->sec.rx_n;
		if (!payload && len) {
			/* Dropped while it arrived (its request was cancelled): nothing of it
			 * is used, so it only has to keep its number. */
			c->sec.rx_n++;
			return 0;
		}
		ok = dt_wire_open(&c->sec, c->dec.hdr_raw, payload, len, c->dec.tag) == 0;
	}
	if (ok)
		return 0;
	dt__conn_fail(c, DT_PROTOCOL,
		      "frame %llu (%s, %llu bytes) from %s failed its authentication check (altered or injected on the "
		      "way, or replayed); closing the connection",
		      (unsigned long long)n, dt_msg_name(h->type), (unsigned long long)h->length, c->peer);
	return -1;
}
