/* Unit tests for src/net: byte helpers, the frame codec and its incremental
 * decoder (every corruption, every split), the message catalogue and the
 * control payloads. No sockets here. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/crc32c.h"
#include "base/rng.h"
#include "net/bytes.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/messages.h"

/* ---- helpers ---- */

struct got_frame {
	struct dt_frame_header h;
	uint8_t payload[4096];
};

/* Feeds `data` in pieces of the given sizes (cycled); collects up to max frames.
 * Returns the number of frames, or -1 on a decoder error. */
static int decode_in_pieces(struct dt_frame_decoder *d, const uint8_t *data, size_t len, const size_t *pieces,
			    size_t npieces, struct got_frame *out, int max)
{
	int nframes = 0;
	size_t pos = 0, k = 0;
	while (pos < len) {
		size_t piece = pieces[k++ % npieces];
		if (piece > len - pos)
			piece = len - pos;
		size_t off = 0;
		while (off < piece) {
			enum dt_frame_event ev;
			size_t n = dt_frame_decoder_feed(d, data + pos + off, piece - off, &ev);
			off += n;
			if (ev == DT_FRAME_ERROR)
				return -1;
			if (ev == DT_FRAME_READY) {
				DT_CHECK(nframes < max);
				out[nframes].h = d->header;
				DT_CHECK(d->header.length <= sizeof(out[nframes].payload));
				if (d->header.length)
					memcpy(out[nframes].payload, dt_frame_decoder_payload(d), (size_t)d->header.length);
				nframes++;
				dt_frame_decoder_next(d);
			} else {
				DT_CHECK_INT_EQ(off, piece); /* NEED_MORE consumed everything */
			}
		}
		pos += piece;
	}
	return nframes;
}

/* A stream of three frames: heartbeat, a 1000-byte echo request, an error reply. */
static size_t sample_stream(uint8_t *buf, size_t cap)
{
	size_t pos = 0;
	dt_frame_encode(buf + pos, DT_MSG_HEARTBEAT, 0, 0, NULL, 0);
	pos += DT_FRAME_HEADER_SIZE;
	uint8_t echo[1000];
	for (int i = 0; i < 1000; i++)
		echo[i] = (uint8_t)(i * 7 + 3);
	dt_frame_encode(buf + pos, DT_MSG_ECHO, 0, 42, echo, sizeof(echo));
	pos += DT_FRAME_HEADER_SIZE + sizeof(echo);
	uint8_t reason[DT_REASON_PAYLOAD_MAX];
	size_t rlen = dt_reason_encode(DT_WIRE_ERR_CONFIG, "no such variable 'x'", reason, sizeof(reason));
	dt_frame_encode(buf + pos, DT_MSG_ERROR, DT_FRAME_F_REPLY, 43, reason, rlen);
	pos += DT_FRAME_HEADER_SIZE + rlen;
	DT_CHECK(pos <= cap);
	return pos;
}

static void check_sample(const struct got_frame *f, int n)
{
	DT_CHECK_INT_EQ(n, 3);
	DT_CHECK_INT_EQ(f[0].h.type, DT_MSG_HEARTBEAT);
	DT_CHECK_INT_EQ(f[0].h.length, 0);
	DT_CHECK_INT_EQ(f[1].h.type, DT_MSG_ECHO);
	DT_CHECK_UINT_EQ(f[1].h.request_id, 42);
	DT_CHECK_INT_EQ(f[1].h.length, 1000);
	for (int i = 0; i < 1000; i++)
		DT_CHECK_INT_EQ(f[1].payload[i], (uint8_t)(i * 7 + 3));
	DT_CHECK_INT_EQ(f[2].h.type, DT_MSG_ERROR);
	DT_CHECK_UINT_EQ(f[2].h.flags, DT_FRAME_F_REPLY);
	struct dt_reason_msg m;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_reason_decode(&m, f[2].payload, (size_t)f[2].h.length, &err), &err);
	DT_CHECK_UINT_EQ(m.code, DT_WIRE_ERR_CONFIG);
	DT_CHECK_STR_EQ(m.text, "no such variable 'x'");
}

/* Feeds a whole buffer, expecting an error; returns the decoder's error. */
static enum dt_frame_error feed_expect_error(struct dt_frame_decoder *d, const void *data, size_t len, size_t *consumed)
{
	enum dt_frame_event ev;
	size_t n = dt_frame_decoder_feed(d, data, len, &ev);
	if (consumed)
		*consumed = n;
	DT_CHECK_INT_EQ(ev, DT_FRAME_ERROR);
	return d->error;
}

static void header_bytes(uint8_t out[DT_FRAME_HEADER_SIZE], uint16_t version, uint16_t type, uint32_t flags,
			 uint64_t id, uint64_t length)
{
	struct dt_frame_header h = { version, type, flags, id, length };
	dt_frame_header_pack(&h, out);
}

/* ---- byte helpers ---- */

DT_TEST(net_bytes, little_endian_helpers_and_cursors)
{
	uint8_t b[8];
	dt_put_u16le(b, 0x0102);
	DT_CHECK_INT_EQ(b[0], 0x02);
	DT_CHECK_INT_EQ(b[1], 0x01);
	dt_put_u32le(b, 0x01020304u);
	DT_CHECK_INT_EQ(b[0], 0x04);
	DT_CHECK_INT_EQ(b[3], 0x01);
	dt_put_u64le(b, 0x0102030405060708ull);
	DT_CHECK_INT_EQ(b[0], 0x08);
	DT_CHECK_INT_EQ(b[7], 0x01);
	DT_CHECK_UINT_EQ(dt_get_u64le(b), 0x0102030405060708ull);
	DT_CHECK_UINT_EQ(dt_get_u32le(b), 0x05060708u);
	DT_CHECK_UINT_EQ(dt_get_u16le(b), 0x0708u);

	uint8_t buf[16];
	struct dt_wcur w = dt_wcur_make(buf, sizeof(buf));
	dt_wcur_u32(&w, 7);
	dt_wcur_str16(&w, "ps", 2);
	dt_wcur_u64(&w, 9);
	DT_CHECK(!w.overflow);
	DT_CHECK_INT_EQ(w.pos, 16);
	dt_wcur_u8(&w, 1);
	DT_CHECK(w.overflow);
	DT_CHECK_INT_EQ(w.pos, 17); /* keeps counting, for measuring */

	struct dt_rcur r = dt_rcur_make(buf, 16);
	DT_CHECK_UINT_EQ(dt_rcur_u32(&r), 7);
	size_t n;
	const uint8_t *s = dt_rcur_str16(&r, &n);
	DT_CHECK(s && n == 2 && memcmp(s, "ps", 2) == 0);
	DT_CHECK_UINT_EQ(dt_rcur_u64(&r), 9);
	DT_CHECK(!r.bad);
	DT_CHECK_UINT_EQ(dt_rcur_u8(&r), 0);
	DT_CHECK(r.bad);

	struct dt_wcur measure = dt_wcur_make(NULL, 0);
	dt_wcur_u64(&measure, 1);
	DT_CHECK_INT_EQ(measure.pos, 8);
	struct dt_rcur empty = dt_rcur_make(NULL, 0);
	DT_CHECK(dt_rcur_take(&empty, 0) != NULL);
	DT_CHECK(!empty.bad);
}

/* ---- header layout ---- */

DT_TEST(net_frame, header_layout_is_pinned_byte_by_byte)
{
	uint8_t b[DT_FRAME_HEADER_SIZE];
	header_bytes(b, DT_PROTOCOL_VERSION, 0x0207, DT_FRAME_F_REPLY, 0x1122334455667788ull, 0x0000A0B0C0D0E0F0ull);
	const uint8_t want[28] = {
		0x89, 'D', 'T', 'R',                            /* magic */
		0x01, 0x00,                                     /* version 1 */
		0x07, 0x02,                                     /* type 0x0207 */
		0x01, 0x00, 0x00, 0x00,                         /* flags */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* request id */
		0xF0, 0xE0, 0xD0, 0xC0, 0xB0, 0xA0, 0x00, 0x00, /* length */
	};
	DT_CHECK(memcmp(b, want, sizeof(want)) == 0);
	DT_CHECK_UINT_EQ(dt_get_u32le(b + 28), dt_crc32c(b, 28));
	DT_CHECK_INT_EQ(DT_FRAME_HEADER_SIZE, 32);
}

/* ---- round trips ---- */

DT_TEST(net_frame, stream_split_at_every_position_decodes_the_same)
{
	uint8_t stream[2048];
	size_t len = sample_stream(stream, sizeof(stream));
	static struct got_frame frames[4];
	for (size_t cut = 0; cut <= len; cut++) {
		struct dt_frame_decoder d;
		dt_frame_decoder_init(&d, DT_FRAME_MAX_PAYLOAD_DEFAULT);
		size_t pieces[2] = { cut ? cut : len, len };
		int n = decode_in_pieces(&d, stream, len, pieces, 2, frames, 4);
		check_sample(frames, n);
		DT_CHECK_INT_EQ(dt_frame_decoder_finish(&d), DT_FRAME_OK);
		dt_frame_decoder_release(&d);
	}
}

DT_TEST(net_frame, one_byte_at_a_time_decodes_the_same)
{
	uint8_t stream[2048];
	size_t len = sample_stream(stream, sizeof(stream));
	static struct got_frame frames[4];
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_FRAME_MAX_PAYLOAD_DEFAULT);
	size_t one = 1;
	check_sample(frames, decode_in_pieces(&d, stream, len, &one, 1, frames, 4));
	DT_CHECK_UINT_EQ(d.frames, 3);
	dt_frame_decoder_release(&d);
}

DT_TEST(net_frame, random_splits_decode_the_same)
{
	uint8_t stream[2048];
	size_t len = sample_stream(stream, sizeof(stream));
	static struct got_frame frames[4];
	struct dt_rng rng;
	dt_rng_seed(&rng, 7);
	for (int trial = 0; trial < 200; trial++) {
		size_t pieces[16];
		for (int i = 0; i < 16; i++)
			pieces[i] = 1 + (size_t)dt_rng_below(&rng, 80);
		struct dt_frame_decoder d;
		dt_frame_decoder_init(&d, 1 << 20);
		check_sample(frames, decode_in_pieces(&d, stream, len, pieces, 16, frames, 4));
		dt_frame_decoder_release(&d);
	}
}

DT_TEST(net_frame, own_buffer_is_reused_without_growing)
{
	uint8_t frame[DT_FRAME_HEADER_SIZE + 512];
	uint8_t payload[512] = { 1 };
	dt_frame_encode(frame, DT_MSG_ECHO, 0, 1, payload, sizeof(payload));
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1 << 20);
	uint8_t *first = NULL;
	for (int i = 0; i < 100; i++) {
		enum dt_frame_event ev;
		DT_CHECK_INT_EQ(dt_frame_decoder_feed(&d, frame, sizeof(frame), &ev), sizeof(frame));
		DT_CHECK_INT_EQ(ev, DT_FRAME_READY);
		if (!first)
			first = dt_frame_decoder_payload(&d);
		DT_CHECK(dt_frame_decoder_payload(&d) == first);
		dt_frame_decoder_next(&d);
	}
	dt_frame_decoder_release(&d);
}

/* ---- every corruption ---- */

DT_TEST(net_frame, http_request_is_bad_magic_named_as_http)
{
	const char *http = "GET / HTTP/1.1\r\n\r\n";
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_FRAME_MAX_PAYLOAD_DEFAULT);
	size_t used;
	DT_CHECK_INT_EQ(feed_expect_error(&d, http, strlen(http), &used), DT_FRAME_BAD_MAGIC);
	DT_CHECK_INT_EQ(used, 4); /* decided on the first four bytes */
	DT_CHECK_CONTAINS(d.detail, "47 45 54 20");
	DT_CHECK_CONTAINS(d.detail, "HTTP");
	/* Nothing more is consumed after an error. */
	enum dt_frame_event ev;
	DT_CHECK_INT_EQ(dt_frame_decoder_feed(&d, http, strlen(http), &ev), 0);
	DT_CHECK_INT_EQ(ev, DT_FRAME_ERROR);
	DT_CHECK(d.buf_ == NULL);
	dt_frame_decoder_release(&d);
}

DT_TEST(net_frame, tls_client_hello_is_bad_magic_named_as_tls)
{
	const uint8_t hello[] = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03 };
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_FRAME_MAX_PAYLOAD_DEFAULT);
	/* One byte at a time: the error comes with the fourth. */
	enum dt_frame_event ev = DT_FRAME_NEED_MORE;
	size_t i = 0;
	for (; i < sizeof(hello) && ev == DT_FRAME_NEED_MORE; i++)
		DT_CHECK_INT_EQ(dt_frame_decoder_feed(&d, hello + i, 1, &ev), 1);
	DT_CHECK_INT_EQ(i, 4);
	DT_CHECK_INT_EQ(ev, DT_FRAME_ERROR);
	DT_CHECK_INT_EQ(d.error, DT_FRAME_BAD_MAGIC);
	DT_CHECK_CONTAINS(d.detail, "TLS");
	DT_CHECK_STR_EQ(dt_frame_error_name(d.error), "bad magic");
	dt_frame_decoder_release(&d);
}

DT_TEST(net_frame, wrong_version_is_reported_with_the_peers_version)
{
	uint8_t b[DT_FRAME_HEADER_SIZE];
	header_bytes(b, 2, DT_MSG_HELLO, 0, 0, 10);
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_FRAME_MAX_PAYLOAD_DEFAULT);
	size_t used;
	DT_CHECK_INT_EQ(feed_expect_error(&d, b, sizeof(b), &used), DT_FRAME_BAD_VERSION);
	DT_CHECK_INT_EQ(used, 6); /* decided on bytes 0..5, before the CRC */
	DT_CHECK_INT_EQ(d.header.version, 2);
	DT_CHECK_CONTAINS(d.detail, "protocol version 2");
	dt_frame_decoder_release(&d);
}

DT_TEST(net_frame, every_flipped_header_bit_is_caught)
{
	uint8_t good[DT_FRAME_HEADER_SIZE];
	header_bytes(good, DT_PROTOCOL_VERSION, DT_MSG_ECHO, 0, 5, 3);
	for (int bit = 0; bit < DT_FRAME_HEADER_SIZE * 8; bit++) {
		uint8_t b[DT_FRAME_HEADER_SIZE];
		memcpy(b, good, sizeof(b));
		b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		struct dt_frame_decoder d;
		dt_frame_decoder_init(&d, DT_FRAME_MAX_PAYLOAD_DEFAULT);
		enum dt_frame_error e = feed_expect_error(&d, b, sizeof(b), NULL);
		if (bit < 32)
			DT_CHECK_INT_EQ(e, DT_FRAME_BAD_MAGIC);
		else if (bit < 48)
			DT_CHECK_INT_EQ(e, DT_FRAME_BAD_VERSION);
		else
			DT_CHECK_INT_EQ(e, DT_FRAME_BAD_CRC);
		DT_CHECK(d.buf_ == NULL);
		dt_frame_decoder_release(&d);
	}
}

DT_TEST(net_frame, reserved_flags_unknown_types_and_caps_are_rejected)
{
	struct {
		uint16_t type;
		uint32_t flags;
		uint64_t length;
		uint64_t cap;
		enum dt_frame_error want;
		const char *detail;
	} cases[] = {
		{ DT_MSG_ECHO, 0x2, 0, 1 << 20, DT_FRAME_BAD_FLAGS, "reserved flag bits 0x00000002" },
		{ DT_MSG_ECHO, 0x80000000u, 0, 1 << 20, DT_FRAME_BAD_FLAGS, "0x80000000" },
		{ 0, 0, 0, 1 << 20, DT_FRAME_UNKNOWN_TYPE, "unknown message type 0" },
		{ 999, 0, 0, 1 << 20, DT_FRAME_UNKNOWN_TYPE, "unknown message type 999" },
		{ DT_MSG_HEARTBEAT, 0, 1, 1 << 20, DT_FRAME_TOO_LARGE, "heartbeat payload of 1 bytes exceeds the 0-byte cap" },
		{ DT_MSG_HELLO, 0, (16u << 20) + 1, 1ull << 30, DT_FRAME_TOO_LARGE, "16777216-byte cap" },
		{ DT_MSG_ECHO, 0, (1 << 20) + 1, 1 << 20, DT_FRAME_TOO_LARGE, "1048576-byte cap" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t b[DT_FRAME_HEADER_SIZE];
		header_bytes(b, DT_PROTOCOL_VERSION, cases[i].type, cases[i].flags, 1, cases[i].length);
		struct dt_frame_decoder d;
		dt_frame_decoder_init(&d, cases[i].cap);
		DT_CHECK_INT_EQ(feed_expect_error(&d, b, sizeof(b), NULL), cases[i].want);
		DT_CHECK_CONTAINS(d.detail, cases[i].detail);
		DT_CHECK(d.buf_ == NULL);
		dt_frame_decoder_release(&d);
	}
}

DT_TEST(net_frame, length_of_2_to_the_31_is_rejected_before_any_allocation)
{
	const uint64_t lengths[] = { 1ull << 31, UINT64_MAX, (1ull << 30) + 1 };
	for (size_t i = 0; i < 3; i++) {
		uint8_t b[DT_FRAME_HEADER_SIZE];
		header_bytes(b, DT_PROTOCOL_VERSION, DT_MSG_ECHO, 0, 1, lengths[i]);
		struct dt_frame_decoder d;
		dt_frame_decoder_init(&d, DT_FRAME_MAX_PAYLOAD_DEFAULT);
		DT_CHECK_INT_EQ(feed_expect_error(&d, b, sizeof(b), NULL), DT_FRAME_TOO_LARGE);
		DT_CHECK(d.buf_ == NULL);
		DT_CHECK_INT_EQ(d.buf_cap_, 0);
		DT_CHECK_CONTAINS(d.detail, "1073741824-byte cap");
		dt_frame_decoder_release(&d);
	}
}

DT_TEST(net_frame, truncated_streams_are_reported_at_end_of_stream)
{
	uint8_t f[DT_FRAME_HEADER_SIZE + 100];
	uint8_t payload[100] = { 0 };
	dt_frame_encode(f, DT_MSG_ECHO, 0, 1, payload, sizeof(payload));
	struct dt_frame_decoder d;
	enum dt_frame_event ev;

	dt_frame_decoder_init(&d, 1 << 20);
	DT_CHECK_INT_EQ(dt_frame_decoder_finish(&d), DT_FRAME_OK);
	dt_frame_decoder_feed(&d, f, 13, &ev);
	DT_CHECK_INT_EQ(ev, DT_FRAME_NEED_MORE);
	DT_CHECK(dt_frame_decoder_mid_frame(&d));
	DT_CHECK_INT_EQ(dt_frame_decoder_finish(&d), DT_FRAME_TRUNCATED);
	DT_CHECK_CONTAINS(d.detail, "13 of 32 header bytes");
	dt_frame_decoder_release(&d);

	dt_frame_decoder_init(&d, 1 << 20);
	dt_frame_decoder_feed(&d, f, DT_FRAME_HEADER_SIZE + 40, &ev);
	DT_CHECK_INT_EQ(ev, DT_FRAME_NEED_MORE);
	DT_CHECK_INT_EQ(dt_frame_decoder_finish(&d), DT_FRAME_TRUNCATED);
	DT_CHECK_CONTAINS(d.detail, "40 of 100 payload bytes (type echo)");
	dt_frame_decoder_release(&d);
}

/* ---- destinations, windows, discard ---- */

struct dest_ctx {
	uint8_t *dest;
	int calls;
	int refuse;
};

static int pick_dest(void *arg, const struct dt_frame_header *h, void **dest, char *why, size_t cap)
{
	struct dest_ctx *ctx = arg;
	ctx->calls++;
	if (ctx->refuse) {
		snprintf(why, cap, "expected a hello first, got %s", dt_msg_name(h->type));
		return -1;
	}
	*dest = ctx->dest;
	return 0;
}

DT_TEST(net_frame, payload_lands_in_the_callers_destination)
{
	enum { N = 3000 };
	static uint8_t frame[DT_FRAME_HEADER_SIZE + N], dest[N];
	uint8_t payload[N];
	for (int i = 0; i < N; i++)
		payload[i] = (uint8_t)(i ^ 0x5a);
	dt_frame_encode(frame, DT_MSG_ECHO, 0, 9, payload, N);
	struct dest_ctx ctx = { dest, 0, 0 };
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1 << 20);
	d.on_header = pick_dest;
	d.on_header_arg = &ctx;

	/* Header fed normally, payload received in place through the window. */
	enum dt_frame_event ev;
	DT_CHECK_INT_EQ(dt_frame_decoder_feed(&d, frame, DT_FRAME_HEADER_SIZE, &ev), DT_FRAME_HEADER_SIZE);
	DT_CHECK_INT_EQ(ev, DT_FRAME_NEED_MORE);
	DT_CHECK_INT_EQ(ctx.calls, 1);
	size_t off = 0;
	while (ev == DT_FRAME_NEED_MORE) {
		uint8_t *where;
		size_t want;
		DT_CHECK(dt_frame_decoder_window(&d, &where, &want));
		DT_CHECK(where == dest + off);
		DT_CHECK_INT_EQ(want, N - off);
		size_t n = want < 700 ? want : 700;
		memcpy(where, payload + off, n);
		off += n;
		ev = dt_frame_decoder_advance(&d, n);
	}
	DT_CHECK_INT_EQ(ev, DT_FRAME_READY);
	DT_CHECK(dt_frame_decoder_payload(&d) == dest);
	DT_CHECK(memcmp(dest, payload, N) == 0);
	DT_CHECK(d.buf_ == NULL); /* the own buffer was never needed */
	dt_frame_decoder_next(&d);

	/* The same through feed. */
	memset(dest, 0, N);
	DT_CHECK_INT_EQ(dt_frame_decoder_feed(&d, frame, sizeof(frame), &ev), sizeof(frame));
	DT_CHECK_INT_EQ(ev, DT_FRAME_READY);
	DT_CHECK(memcmp(dest, payload, N) == 0);
	dt_frame_decoder_release(&d);
}

DT_TEST(net_frame, discard_drops_the_rest_of_a_payload_and_the_stream_goes_on)
{
	enum { N = 200000 };
	uint8_t *stream = malloc(2 * DT_FRAME_HEADER_SIZE + N + 3);
	uint8_t *payload = calloc(1, N);
	static uint8_t dest[N];
	dt_frame_encode(stream, DT_MSG_ECHO, 0, 1, payload, N);
	dt_frame_encode(stream + DT_FRAME_HEADER_SIZE + N, DT_MSG_ECHO, 0, 2, "abc", 3);
	struct dest_ctx ctx = { dest, 0, 0 };
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1 << 20);
	d.on_header = pick_dest;
	d.on_header_arg = &ctx;
	enum dt_frame_event ev;
	size_t used = dt_frame_decoder_feed(&d, stream, DT_FRAME_HEADER_SIZE + 1000, &ev);
	DT_CHECK_INT_EQ(used, DT_FRAME_HEADER_SIZE + 1000);
	dt_frame_decoder_discard(&d); /* e.g. the request timed out: its buffer may go away */
	memset(dest, 0xee, N);
	uint8_t *where;
	size_t want;
	DT_CHECK(dt_frame_decoder_window(&d, &where, &want));
	DT_CHECK(where != dest);
	DT_CHECK(want <= 65536);
	/* The rest through feed: nothing may be written to dest. */
	size_t total = 2 * DT_FRAME_HEADER_SIZE + N + 3;
	used += dt_frame_decoder_feed(&d, stream + used, total - used, &ev);
	DT_CHECK_INT_EQ(ev, DT_FRAME_READY);
	DT_CHECK(dt_frame_decoder_payload(&d) == NULL);
	DT_CHECK_INT_EQ(dest[0], 0xee);
	DT_CHECK_INT_EQ(dest[N - 1], 0xee);
	dt_frame_decoder_next(&d);
	ctx.dest = NULL; /* the next frame goes to the own buffer */
	used += dt_frame_decoder_feed(&d, stream + used, total - used, &ev);
	DT_CHECK_INT_EQ(ev, DT_FRAME_READY);
	DT_CHECK_UINT_EQ(d.header.request_id, 2);
	DT_CHECK(memcmp(dt_frame_decoder_payload(&d), "abc", 3) == 0);
	DT_CHECK_INT_EQ(used, total);
	dt_frame_decoder_release(&d);
	free(stream);
	free(payload);
}

DT_TEST(net_frame, on_header_can_refuse_a_frame_before_its_payload)
{
	uint8_t frame[DT_FRAME_HEADER_SIZE + 10];
	dt_frame_encode(frame, DT_MSG_ECHO, 0, 1, "0123456789", 10);
	struct dest_ctx ctx = { NULL, 0, 1 };
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1 << 20);
	d.on_header = pick_dest;
	d.on_header_arg = &ctx;
	size_t used;
	DT_CHECK_INT_EQ(feed_expect_error(&d, frame, sizeof(frame), &used), DT_FRAME_REJECTED);
	DT_CHECK_INT_EQ(used, DT_FRAME_HEADER_SIZE);
	DT_CHECK_STR_EQ(d.detail, "expected a hello first, got echo");
	dt_frame_decoder_release(&d);
}

/* ---- the catalogue and control payloads ---- */

DT_TEST(net_messages, catalogue_numbers_are_pinned_and_unique)
{
	DT_CHECK_INT_EQ(DT_MSG_HELLO, 1);
	DT_CHECK_INT_EQ(DT_MSG_HELLO_OK, 2);
	DT_CHECK_INT_EQ(DT_MSG_REFUSE, 3);
	DT_CHECK_INT_EQ(DT_MSG_HEARTBEAT, 4);
	DT_CHECK_INT_EQ(DT_MSG_ERROR, 5);
	DT_CHECK_INT_EQ(DT_MSG_SHUTDOWN, 6);
	DT_CHECK_INT_EQ(DT_MSG_ECHO, 7);
	DT_CHECK_INT_EQ(DT_MSG_PS_STATUS, 16);
	DT_CHECK_INT_EQ(DT_MSG_PS_INIT, 17);
	DT_CHECK_INT_EQ(DT_MSG_PS_PULL, 18);
	DT_CHECK_INT_EQ(DT_MSG_PS_PUSH, 19);
	DT_CHECK_INT_EQ(DT_MSG_PS_STEP, 20);
	DT_CHECK_INT_EQ(DT_MSG_PS_END, 21);
	DT_CHECK_STR_EQ(dt_msg_name(DT_MSG_HELLO_OK), "hello_ok");
	DT_CHECK_STR_EQ(dt_msg_name(DT_MSG_PS_PUSH), "ps_push");
	DT_CHECK_STR_EQ(dt_msg_name(500), "unknown");
	DT_CHECK(dt_msg_info(0) == NULL);
	int seen = 0;
	for (unsigned t = 0; t < 65536; t++) {
		const struct dt_msg_info *info = dt_msg_info((uint16_t)t);
		if (!info)
			continue;
		seen++;
		DT_CHECK_INT_EQ(info->type, t);
		DT_CHECK(t >= DT_MSG_CONTROL_FIRST);
	}
	/* every entry of the list is found by its own number (none shadows another) */
#define DT__COUNT_MSG(name, num, str, cap) +1
	DT_CHECK_INT_EQ(seen, 0 DT_MSG_LIST(DT__COUNT_MSG));
#undef DT__COUNT_MSG
	DT_CHECK_INT_EQ(dt_msg_info(DT_MSG_HEARTBEAT)->max_payload, 0);
}

static void sample_hello(struct dt_hello *h)
{
	dt_hello_init(h, "worker", 3, 0xfeedfacecafebeefull);
	struct dt_err err = DT_ERR_INIT;
	const uint64_t k[2] = { 784, 256 }, b[1] = { 256 };
	DT_CHECK_OK(dt_signature_add(&h->signature, "dense_1/kernel", DT_WIRE_F32, 2, k, &err), &err);
	DT_CHECK_OK(dt_signature_add(&h->signature, "dense_1/bias", DT_WIRE_F32, 1, b, &err), &err);
	DT_CHECK_OK(dt_signature_add(&h->signature, "global_step", DT_WIRE_I64, 0, NULL, &err), &err);
}

DT_TEST(net_messages, hello_round_trip)
{
	struct dt_hello h, back;
	sample_hello(&h);
	size_t len = dt_hello_encode(&h, NULL, 0);
	/* 29 fixed + 6 role + 4 count + (2+14+2+16) + (2+12+2+8) + (2+11+2) */
	DT_CHECK_INT_EQ(len, 29 + 6 + 4 + 34 + 24 + 15);
	uint8_t *buf = malloc(len);
	DT_CHECK_INT_EQ(dt_hello_encode(&h, buf, len), len);
	DT_CHECK_INT_EQ(dt_get_u16le(buf), DT_PROTOCOL_VERSION);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_hello_decode(&back, buf, len, &err), &err);
	DT_CHECK_STR_EQ(back.role, "worker");
	DT_CHECK_INT_EQ(back.index, 3);
	DT_CHECK_UINT_EQ(back.cluster_fingerprint, 0xfeedfacecafebeefull);
	DT_CHECK_UINT_EQ(back.incarnation, h.incarnation);
	DT_CHECK(back.incarnation != 0);
	char diff[256];
	DT_CHECK_INT_EQ(dt_signature_diff(&h.signature, "a", &back.signature, "b", diff, sizeof(diff)), 0);
	DT_CHECK_INT_EQ(back.signature.vars[2].rank, 0);
	dt_hello_release(&back);
	free(buf);
	dt_hello_release(&h);
}

/* Keras's names (docs/MODELS.md "Names"): UTF-8 and up to 512 bytes travel;
 * control characters and longer names are refused when added. */
DT_TEST(net_messages, signature_names_are_utf8_up_to_512_bytes)
{
	struct dt_hello h, back;
	dt_hello_init(&h, "worker", 1, 7);
	struct dt_err err = DT_ERR_INIT;
	const uint64_t dims[2] = { 3, 4 };
	char longest[DT_SIG_NAME_MAX + 2];
	memset(longest, 'n', sizeof(longest) - 1);
	longest[DT_SIG_NAME_MAX] = '\0';
	DT_CHECK_OK(dt_signature_add(&h.signature, "block/conv_\xc3\xa9\xcf\x83/kernel", DT_WIRE_F32, 2, dims, &err), &err);
	DT_CHECK_OK(dt_signature_add(&h.signature, longest, DT_WIRE_F32, 1, dims, &err), &err);
	longest[DT_SIG_NAME_MAX] = 'n';
	longest[DT_SIG_NAME_MAX + 1] = '\0';
	DT_CHECK_INT_EQ(dt_signature_add(&h.signature, longest, DT_WIRE_F32, 1, dims, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "names are 1..512 bytes of UTF-8 without control characters");
	DT_CHECK_INT_EQ(dt_signature_add(&h.signature, "a\tb", DT_WIRE_F32, 1, dims, &err), DT_CONFIG);
	const size_t len = dt_hello_encode(&h, NULL, 0);
	uint8_t *buf = malloc(len);
	DT_CHECK_INT_EQ(dt_hello_encode(&h, buf, len), len);
	DT_CHECK_OK(dt_hello_decode(&back, buf, len, &err), &err);
	DT_CHECK_INT_EQ(back.signature.count, 2);
	if (back.signature.count == 2) {
		DT_CHECK_STR_EQ(back.signature.vars[0].name, "block/conv_\xc3\xa9\xcf\x83/kernel");
		DT_CHECK_INT_EQ(strlen(back.signature.vars[1].name), DT_SIG_NAME_MAX);
	}
	char diff[256];
	DT_CHECK_INT_EQ(dt_signature_diff(&h.signature, "a", &back.signature, "b", diff, sizeof(diff)), 0);
	dt_hello_release(&back);
	dt_hello_release(&h);
	free(buf);
}

DT_TEST(net_messages, every_truncated_or_extended_hello_is_refused_cleanly)
{
	struct dt_hello h, back;
	sample_hello(&h);
	size_t len = dt_hello_encode(&h, NULL, 0);
	uint8_t *buf = malloc(len + 1);
	dt_hello_encode(&h, buf, len);
	for (size_t cut = 0; cut < len; cut++) {
		uint8_t *copy = malloc(cut ? cut : 1); /* exact size, so ASan sees any overread */
		memcpy(copy, buf, cut);
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_INT_EQ(dt_hello_decode(&back, copy, cut, &err), DT_PROTOCOL);
		DT_CHECK(err.msg[0] != '\0');
		dt_hello_release(&back);
		free(copy);
	}
	buf[len] = 0;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_hello_decode(&back, buf, len + 1, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "1 unexpected bytes after its signature");
	dt_hello_release(&back);
	free(buf);
	dt_hello_release(&h);
}

DT_TEST(net_messages, hostile_hello_fields_are_refused)
{
	struct dt_hello h, back;
	sample_hello(&h);
	size_t len = dt_hello_encode(&h, NULL, 0);
	uint8_t *buf = malloc(len);
	struct dt_err err = DT_ERR_INIT;

	/* A variable count far beyond the bytes present: refused before allocating. */
	dt_hello_encode(&h, buf, len);
	dt_put_u32le(buf + 29 + 6, 0xFFFFFFFFu);
	DT_CHECK_INT_EQ(dt_hello_decode(&back, buf, len, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "announces 4294967295 variables");
	dt_hello_release(&back);

	/* A control character in the role. */
	dt_hello_encode(&h, buf, len);
	buf[29] = '\n';
	DT_CHECK_INT_EQ(dt_hello_decode(&back, buf, len, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "invalid role name");
	dt_hello_release(&back);

	/* Rank 9. */
	dt_hello_encode(&h, buf, len);
	size_t rank_at = 29 + 6 + 4 + 2 + 14 + 1;
	DT_CHECK_INT_EQ(buf[rank_at], 2);
	buf[rank_at] = 9;
	DT_CHECK_INT_EQ(dt_hello_decode(&back, buf, len, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "rank 9");
	dt_hello_release(&back);

	/* An empty variable name. */
	dt_hello_encode(&h, buf, len);
	dt_put_u16le(buf + 29 + 6 + 4, 0);
	DT_CHECK_INT_EQ(dt_hello_decode(&back, buf, len, &err), DT_PROTOCOL);
	dt_hello_release(&back);

	/* A control character, or a byte that is not UTF-8, in a variable name. */
	for (int bad = 0; bad < 2; bad++) {
		dt_hello_encode(&h, buf, len);
		buf[29 + 6 + 4 + 2] = bad ? 0xff : 0x09;
		DT_CHECK_INT_EQ(dt_hello_decode(&back, buf, len, &err), DT_PROTOCOL);
		DT_CHECK_CONTAINS(err.msg, "invalid name");
		dt_hello_release(&back);
	}

	free(buf);
	dt_hello_release(&h);
}

DT_TEST(net_messages, reasons_round_trip_and_are_sanitized)
{
	uint8_t buf[DT_REASON_PAYLOAD_MAX];
	size_t len = dt_reason_encode(DT_REFUSE_SIGNATURE, "line one\nline\x1b[31mtwo", buf, sizeof(buf));
	struct dt_reason_msg m;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_reason_decode(&m, buf, len, &err), &err);
	DT_CHECK_UINT_EQ(m.code, DT_REFUSE_SIGNATURE);
	DT_CHECK_STR_EQ(m.text, "line one\nline?[31mtwo");
	DT_CHECK_INT_EQ(dt_reason_decode(&m, buf, len - 1, &err), DT_PROTOCOL);
	DT_CHECK_INT_EQ(dt_reason_decode(&m, buf, 3, &err), DT_PROTOCOL);

	char big[3000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	len = dt_reason_encode(1, big, buf, sizeof(buf));
	DT_CHECK(len <= sizeof(buf));
	DT_CHECK_OK(dt_reason_decode(&m, buf, len, &err), &err);
	DT_CHECK_INT_EQ(strlen(m.text), DT_REASON_MAX - 1);

	DT_CHECK_INT_EQ(dt_wire_error_to_status(dt_wire_error_from_status(DT_TIMEOUT)), DT_TIMEOUT);
	DT_CHECK_INT_EQ(dt_wire_error_to_status(dt_wire_error_from_status(DT_PROTOCOL)), DT_PROTOCOL);
	DT_CHECK_INT_EQ(dt_wire_error_to_status(dt_wire_error_from_status(DT_CONFIG)), DT_CONFIG);
	DT_CHECK_INT_EQ(dt_wire_error_to_status(12345), DT_PEER);
}
