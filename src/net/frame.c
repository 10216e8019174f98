#include "net/frame.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32c.h"
#include "net/bytes.h"
#include "net/messages.h"

enum { ST_HEADER, ST_PAYLOAD, ST_TRAILER, ST_READY, ST_FAILED };

/* Bytes a discarded payload is drained through at a time. */
#define DISCARD_CHUNK (64u << 10)

static const uint8_t magic[4] = { DT_FRAME_MAGIC0, DT_FRAME_MAGIC1, DT_FRAME_MAGIC2, DT_FRAME_MAGIC3 };

struct dt_frame_header dt_frame_header_make(uint16_t type, uint32_t flags, uint64_t request_id, uint64_t length)
{
	struct dt_frame_header h = { DT_PROTOCOL_VERSION, type, flags, request_id, length };
	return h;
}

void dt_frame_header_pack(const struct dt_frame_header *h, uint8_t out[DT_FRAME_HEADER_SIZE])
{
	memcpy(out, magic, 4);
	dt_put_u16le(out + 4, h->version);
	dt_put_u16le(out + 6, h->type);
	dt_put_u32le(out + 8, h->flags);
	dt_put_u64le(out + 12, h->request_id);
	dt_put_u64le(out + 20, h->length);
	dt_put_u32le(out + 28, dt_crc32c(out, 28));
}

void dt_frame_encode(uint8_t *out, uint16_t type, uint32_t flags, uint64_t request_id, const void *payload, size_t len)
{
	struct dt_frame_header h = dt_frame_header_make(type, flags, request_id, len);
	dt_frame_header_pack(&h, out);
	if (len)
		memcpy(out + DT_FRAME_HEADER_SIZE, payload, len);
}

const char *dt_frame_error_name(enum dt_frame_error e)
{
	switch (e) {
	case DT_FRAME_OK: return "ok";
	case DT_FRAME_BAD_MAGIC: return "bad magic";
	case DT_FRAME_BAD_VERSION: return "bad protocol version";
	case DT_FRAME_BAD_CRC: return "bad header crc";
	case DT_FRAME_BAD_FLAGS: return "bad flags";
	case DT_FRAME_UNKNOWN_TYPE: return "unknown message type";
	case DT_FRAME_TOO_LARGE: return "payload too large";
	case DT_FRAME_REJECTED: return "frame rejected";
	case DT_FRAME_NO_MEMORY: return "out of memory";
	case DT_FRAME_TRUNCATED: return "truncated frame";
	}
	return "unknown frame error";
}

void dt_frame_decoder_init(struct dt_frame_decoder *d, uint64_t max_payload)
{
	memset(d, 0, sizeof(*d));
	d->max_payload = max_payload;
	d->state_ = ST_HEADER;
}

void dt_frame_decoder_release(struct dt_frame_decoder *d)
{
	if (!d)
		return;
	free(d->buf_);
	d->buf_ = NULL;
	d->buf_cap_ = 0;
}

static enum dt_frame_event fail(struct dt_frame_decoder *d, enum dt_frame_error e, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static enum dt_frame_event fail(struct dt_frame_decoder *d, enum dt_frame_error e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->detail, sizeof(d->detail), fmt, ap);
	va_end(ap);
	d->error = e;
	d->state_ = ST_FAILED;
	return DT_FRAME_ERROR;
}

/* A guess at what spoke to us, from the first four bytes. */
static const char *guess_protocol(const uint8_t *b)
{
	static const char *const http[] = { "GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI", "PATC", "CONN", "TRAC", "HTTP", "PRI " };
	for (size_t i = 0; i < DT_ARRAY_LEN(http); i++)
		if (memcmp(b, http[i], 4) == 0)
			return ", an HTTP request?";
	if (b[0] == 0x16 && b[1] == 0x03)
		return ", a TLS handshake?";
	if (memcmp(b, "SSH-", 4) == 0)
		return ", an SSH client?";
	return "";
}

static enum dt_frame_event check_magic(struct dt_frame_decoder *d)
{
	const uint8_t *b = d->hdr_;
	if (memcmp(b, magic, 4) == 0)
		return DT_FRAME_NEED_MORE;
	char text[5];
	for (int i = 0; i < 4; i++)
		text[i] = (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"') ? (char)b[i] : '.';
	text[4] = '\0';
	return fail(d, DT_FRAME_BAD_MAGIC, "bad magic %02x %02x %02x %02x (\"%s\"%s), expected %02x %02x %02x %02x",
		    b[0], b[1], b[2], b[3], text, guess_protocol(b), magic[0], magic[1], magic[2], magic[3]);
}

static enum dt_frame_event check_version(struct dt_frame_decoder *d)
{
	uint16_t v = dt_get_u16le(d->hdr_ + 4);
	if (v == DT_PROTOCOL_VERSION)
		return DT_FRAME_NEED_MORE;
	d->header.version = v;
	return fail(d, DT_FRAME_BAD_VERSION, "the peer speaks protocol version %u, this side speaks version %u",
		    v, DT_PROTOCOL_VERSION);
}

static int ensure_buf(struct dt_frame_decoder *d, uint64_t need)
{
	if (need <= d->buf_cap_)
		return 0;
	uint64_t cap = d->buf_cap_ * 2 > need ? d->buf_cap_ * 2 : need;
	if (cap > d->max_payload && need <= d->max_payload)
		cap = d->max_payload;
	if (cap < 256)
		cap = 256;
	if (cap > SIZE_MAX)
		return -1;
	uint8_t *p = realloc(d->buf_, (size_t)cap);
	if (!p)
		return -1;
	d->buf_ = p;
	d->buf_cap_ = (size_t)cap;
	return 0;
}

/* The whole header is in: validate it and pick where the payload goes. */
/* The payload is complete: the trailer next, or the frame is done. */
static enum dt_frame_event payload_done(struct dt_frame_decoder *d)
{
	d->tag_have_ = 0;
	if (d->trailer) {
		d->state_ = ST_TRAILER;
		return DT_FRAME_NEED_MORE;
	}
	d->state_ = ST_READY;
	d->frames++;
	return DT_FRAME_READY;
}

static enum dt_frame_event header_done(struct dt_frame_decoder *d)
{
	const uint8_t *b = d->hdr_;
	uint32_t want = dt_get_u32le(b + 28), got = dt_crc32c(b, 28);
	if (want != got)
		return fail(d, DT_FRAME_BAD_CRC, "header crc 0x%08x does not match 0x%08x computed over bytes 0..27",
			    want, got);
	struct dt_frame_header *h = &d->header;
	h->version = dt_get_u16le(b + 4);
	h->type = dt_get_u16le(b + 6);
	h->flags = dt_get_u32le(b + 8);
	h->request_id = dt_get_u64le(b + 12);
	h->length = dt_get_u64le(b + 20);
	if (h->flags & ~DT_FRAME_F_KNOWN)
		return fail(d, DT_FRAME_BAD_FLAGS, "reserved flag bits 0x%08x are set (type %s)",
			    h->flags & ~DT_FRAME_F_KNOWN, dt_msg_name(h->type));
	const struct dt_msg_info *info = dt_msg_info(h->type);
	if (!info)
		return fail(d, DT_FRAME_UNKNOWN_TYPE, "unknown message type %u", h->type);
	uint64_t cap = info->max_payload < d->max_payload ? info->max_payload : d->max_payload;
	if (h->length > cap)
		return fail(d, DT_FRAME_TOO_LARGE, "%s payload of %llu bytes exceeds the %llu-byte cap",
			    info->name, (unsigned long long)h->length, (unsigned long long)cap);

	void *dest = NULL;
	if (d->on_header) {
		char why[160] = "";
		if (d->on_header(d->on_header_arg, h, &dest, why, sizeof(why)) != 0)
			return fail(d, DT_FRAME_REJECTED, "%s", why[0] ? why : "frame refused");
	}
	d->have_ = 0;
	d->discard_ = 0;
	if (dest) {
		d->dest_ = dest;
	} else {
		if (ensure_buf(d, h->length ? h->length : 1) != 0)
			return fail(d, DT_FRAME_NO_MEMORY, "cannot allocate %llu bytes for a %s payload",
				    (unsigned long long)h->length, info->name);
		d->dest_ = d->buf_;
	}
	memcpy(d->hdr_raw, d->hdr_, DT_FRAME_HEADER_SIZE);
	if (h->length == 0)
		return payload_done(d);
	d->state_ = ST_PAYLOAD;
	return DT_FRAME_NEED_MORE;
}

size_t dt_frame_decoder_feed(struct dt_frame_decoder *d, const void *data, size_t len, enum dt_frame_event *ev)
{
	const uint8_t *in = data;
	size_t used = 0;
	*ev = d->state_ == ST_FAILED ? DT_FRAME_ERROR : d->state_ == ST_READY ? DT_FRAME_READY : DT_FRAME_NEED_MORE;
	if (*ev != DT_FRAME_NEED_MORE)
		return 0;
	while (used < len) {
		if (d->state_ == ST_HEADER) {
			unsigned before = d->hdr_have_;
			size_t n = DT_FRAME_HEADER_SIZE - before;
			/* Stop at the points where a check runs, so errors are seen as early as possible. */
			if (before < 4)
				n = 4 - before;
			else if (before < 6)
				n = 6 - before;
			if (n > len - used)
				n = len - used;
			memcpy(d->hdr_ + before, in + used, n);
			d->hdr_have_ += (unsigned)n;
			used += n;
			enum dt_frame_event e = DT_FRAME_NEED_MORE;
			if (before < 4 && d->hdr_have_ == 4)
				e = check_magic(d);
			else if (before < 6 && d->hdr_have_ == 6)
				e = check_version(d);
			else if (d->hdr_have_ == DT_FRAME_HEADER_SIZE)
				e = header_done(d);
			if (e != DT_FRAME_NEED_MORE) {
				*ev = e;
				return used;
			}
		} else if (d->state_ == ST_PAYLOAD) {
			uint64_t missing = d->header.length - d->have_;
			size_t n = len - used < missing ? len - used : (size_t)missing;
			if (!d->discard_)
				memcpy(d->dest_ + d->have_, in + used, n);
			d->have_ += n;
			used += n;
			if (d->have_ == d->header.length && payload_done(d) == DT_FRAME_READY) {
				*ev = DT_FRAME_READY;
				return used;
			}
		} else { /* ST_TRAILER */
			size_t n = d->trailer - d->tag_have_;
			if (n > len - used)
				n = len - used;
			memcpy(d->tag + d->tag_have_, in + used, n);
			d->tag_have_ += (unsigned)n;
			used += n;
			if (d->tag_have_ == d->trailer) {
				d->state_ = ST_READY;
				d->frames++;
				*ev = DT_FRAME_READY;
				return used;
			}
		}
	}
	return used;
}

int dt_frame_decoder_window(struct dt_frame_decoder *d, uint8_t **where, size_t *want)
{
	if (d->state_ != ST_PAYLOAD)
		return 0;
	uint64_t missing = d->header.length - d->have_;
	if (d->discard_) {
		size_t chunk = missing < DISCARD_CHUNK ? (size_t)missing : DISCARD_CHUNK;
		if (!d->buf_ || d->buf_cap_ < chunk) {
			/* The own buffer may be in use as nothing else; fall back to small pieces on failure. */
			if (ensure_buf(d, chunk) != 0)
				chunk = d->buf_cap_ < chunk ? d->buf_cap_ : chunk;
			if (chunk == 0)
				return 0;
		}
		*where = d->buf_;
		*want = chunk;
		return 1;
	}
	*where = d->dest_ + d->have_;
	*want = missing > SIZE_MAX ? SIZE_MAX : (size_t)missing;
	return 1;
}

uint8_t *dt_frame_decoder_partial(const struct dt_frame_decoder *d, uint64_t *have)
{
	if ((d->state_ != ST_PAYLOAD && d->state_ != ST_TRAILER) || d->discard_)
		return NULL;
	*have = d->have_;
	return d->dest_;
}

enum dt_frame_event dt_frame_decoder_advance(struct dt_frame_decoder *d, size_t n)
{
	DT_ASSERT(d->state_ == ST_PAYLOAD && n <= d->header.length - d->have_);
	d->have_ += n;
	if (d->have_ < d->header.length)
		return DT_FRAME_NEED_MORE;
	return payload_done(d);
}

size_t dt_frame_decoder_want(const struct dt_frame_decoder *d)
{
	switch (d->state_) {
	case ST_HEADER:
		if (d->hdr_have_ < 4)
			return 4 - d->hdr_have_;
		if (d->hdr_have_ < 6)
			return 6 - d->hdr_have_;
		return DT_FRAME_HEADER_SIZE - d->hdr_have_;
	case ST_PAYLOAD: {
		uint64_t missing = d->header.length - d->have_;
		return missing > SIZE_MAX ? SIZE_MAX : (size_t)missing;
	}
	case ST_TRAILER:
		return d->trailer - d->tag_have_;
	default:
		return 0;
	}
}

void dt_frame_decoder_discard(struct dt_frame_decoder *d)
{
	if (d->state_ == ST_PAYLOAD || d->state_ == ST_TRAILER || d->state_ == ST_READY)
		d->discard_ = 1;
}

uint8_t *dt_frame_decoder_payload(struct dt_frame_decoder *d)
{
	if (d->state_ != ST_READY || d->discard_)
		return NULL;
	return d->dest_;
}

int dt_frame_decoder_mid_frame(const struct dt_frame_decoder *d)
{
	return d->state_ == ST_PAYLOAD || d->state_ == ST_TRAILER || (d->state_ == ST_HEADER && d->hdr_have_ > 0);
}

void dt_frame_decoder_next(struct dt_frame_decoder *d)
{
	DT_ASSERT(d->state_ == ST_READY);
	d->state_ = ST_HEADER;
	d->hdr_have_ = 0;
	d->have_ = 0;
	d->dest_ = NULL;
	d->discard_ = 0;
	d->tag_have_ = 0;
}

enum dt_frame_error dt_frame_decoder_finish(struct dt_frame_decoder *d)
{
	if (d->state_ == ST_FAILED)
		return d->error;
	if (d->state_ == ST_HEADER && d->hdr_have_ > 0) {
		fail(d, DT_FRAME_TRUNCATED, "the stream ended after %u of %d header bytes", d->hdr_have_,
		     DT_FRAME_HEADER_SIZE);
		return d->error;
	}
	if (d->state_ == ST_PAYLOAD) {
		fail(d, DT_FRAME_TRUNCATED, "the stream ended after %llu of %llu payload bytes (type %s)",
		     (unsigned long long)d->have_, (unsigned long long)d->header.length, dt_msg_name(d->header.type));
		return d->error;
	}
	if (d->state_ == ST_TRAILER) {
		fail(d, DT_FRAME_TRUNCATED, "the stream ended after %u of %u tag bytes (type %s)", d->tag_have_, d->trailer,
		     dt_msg_name(d->header.type));
		return d->error;
	}
	return DT_FRAME_OK;
}
