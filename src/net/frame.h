/*
 * frame.h — the frame codec: a fixed 32-byte header, then the payload.
 *
 * Every message on a dtrain connection is one frame. The header is encoded
 * field by field in little-endian order (net/bytes.h), never by casting a
 * struct; its layout, byte by byte:
 *
 *   0.  bytes  0..3   magic            0x89 'D' 'T' 'R'  (the first byte is not ASCII, so
 *                                       a text protocol — HTTP, SMTP — fails at byte 0)
 *   1.  bytes  4..5   u16 version      DT_PROTOCOL_VERSION. Bytes 0..5 keep this layout in
 *                                       every version, so a peer can always say which
 *                                       version the other side speaks.
 *   2.  bytes  6..7   u16 type         a message type from the catalogue (messages.h)
 *   3.  bytes  8..11  u32 flags        bit 0 DT_FRAME_F_REPLY: answers the request with
 *                                       the same id; all other bits must be zero
 *   4.  bytes 12..19  u64 request id   0 for one-way messages; chosen by the requester,
 *                                       copied into the reply
 *   5.  bytes 20..27  u64 length       payload bytes that follow the header
 *   6.  bytes 28..31  u32 header CRC   CRC-32C (base/crc32c.h) of bytes 0..27
 *   7.  bytes 32..    payload          `length` bytes; its layout depends on the type
 *
 * The payload has no checksum of its own: TCP's covers it in transit, and a
 * CRC over 100 MB pushes would cost more than the copy (docs/PROTOCOL.md).
 *
 * Decoding is incremental (redis's processMultibulkBuffer): bytes are fed in
 * any split — one at a time included — and the decoder reports, distinctly,
 * bad magic (as soon as 4 bytes are in), a bad version (at 6), then a bad
 * header CRC, reserved flag bits, an unknown type, or a length above the cap
 * (at 32). The length is checked against both the decoder's cap and the
 * type's cap in the catalogue before a single payload byte is stored or any
 * memory is allocated for it.
 *
 * The payload goes either into the decoder's own buffer (grown to the largest
 * payload seen, kept for the next frame: no per-message malloc once warm) or
 * straight into a destination the caller picks when the header is complete
 * (on_header), so a 100 MB push lands in the gradient buffer with no copy.
 * Callers that read from a socket can ask where the next payload bytes go
 * (dt_frame_decoder_window) and recv() there directly.
 *
 * The codec does no I/O and keeps no global state; the fuzz target
 * tests/fuzz/fuzz_frame.c drives it.
 */
#ifndef DT_NET_FRAME_H
#define DT_NET_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define DT_PROTOCOL_VERSION 1
#define DT_FRAME_HEADER_SIZE 32
#define DT_FRAME_MAGIC0 0x89
#define DT_FRAME_MAGIC1 'D'
#define DT_FRAME_MAGIC2 'T'
#define DT_FRAME_MAGIC3 'R'

#define DT_FRAME_TAG_MAX 16 /* the trailer of an authenticated frame (net/auth.h) */

#define DT_FRAME_F_REPLY 0x1u
#define DT_FRAME_F_KNOWN DT_FRAME_F_REPLY

/* Default payload cap of a connection; callers may raise it. */
#define DT_FRAME_MAX_PAYLOAD_DEFAULT (1ull << 30)

struct dt_frame_header {
	uint16_t version;
	uint16_t type;
	uint32_t flags;
	uint64_t request_id;
	uint64_t length;
};

/* A header for this protocol version. */
struct dt_frame_header dt_frame_header_make(uint16_t type, uint32_t flags, uint64_t request_id, uint64_t length);
/* Writes the 32 header bytes, CRC included (uses h->version as given). */
void dt_frame_header_pack(const struct dt_frame_header *h, uint8_t out[DT_FRAME_HEADER_SIZE]);
/* Encodes header + payload into out (DT_FRAME_HEADER_SIZE + len bytes). */
void dt_frame_encode(uint8_t *out, uint16_t type, uint32_t flags, uint64_t request_id, const void *payload, size_t len);

enum dt_frame_error {
	DT_FRAME_OK = 0,
	DT_FRAME_BAD_MAGIC,
	DT_FRAME_BAD_VERSION,
	DT_FRAME_BAD_CRC,
	DT_FRAME_BAD_FLAGS,
	DT_FRAME_UNKNOWN_TYPE,
	DT_FRAME_TOO_LARGE,
	DT_FRAME_REJECTED,  /* the caller's on_header said no (e.g. a type not allowed yet) */
	DT_FRAME_NO_MEMORY, /* the payload buffer could not be grown */
	DT_FRAME_TRUNCATED, /* dt_frame_decoder_finish: the stream ended inside a frame */
};
/* "bad magic", "bad version", ... */
const char *dt_frame_error_name(enum dt_frame_error e);

enum dt_frame_event {
	DT_FRAME_NEED_MORE, /* all input consumed, the frame is not complete */
	DT_FRAME_READY,     /* a whole frame: d->header and dt_frame_decoder_payload(d) */
	DT_FRAME_ERROR,     /* d->error and d->detail say what; the stream is unusable */
};

/* Called once a header is valid, before any payload byte is stored. Return 0
 * to accept it, optionally setting *dest to caller memory of h->length bytes
 * the payload is received into; nonzero to refuse the frame, with a reason
 * in why (the decoder fails with DT_FRAME_REJECTED). */
typedef int (*dt_frame_header_fn)(void *arg, const struct dt_frame_header *h, void **dest, char *why, size_t why_cap);

struct dt_frame_decoder {
	/* configuration (set by init, may be changed between frames) */
	uint64_t max_payload;
	dt_frame_header_fn on_header; /* optional */
	void *on_header_arg;
	/* Bytes that follow every payload and are not counted in its length: 0,
	 * or DT_FRAME_TAG_MAX once a connection is authenticated (net/auth.h).
	 * They are read into `tag`; the frame is READY after them. */
	unsigned trailer;

	/* state (read-only for callers) */
	struct dt_frame_header header; /* valid once the header is complete */
	enum dt_frame_error error;
	char detail[192];              /* what was wrong, e.g. "bad magic 47 45 54 20 (an HTTP request?)" */
	uint64_t frames;               /* frames completed */
	uint8_t tag[DT_FRAME_TAG_MAX]; /* the trailer of the completed frame */
	uint8_t hdr_raw[DT_FRAME_HEADER_SIZE]; /* the completed frame's header bytes as received */

	/* private */
	int state_;
	uint8_t hdr_[DT_FRAME_HEADER_SIZE];
	unsigned hdr_have_;
	uint8_t *dest_;     /* where payload bytes go: the caller's or buf_ */
	uint64_t have_;     /* payload bytes received */
	int discard_;       /* payload bytes are dropped (dt_frame_decoder_discard) */
	uint8_t *buf_;      /* own payload buffer, grown on demand, never above max_payload */
	size_t buf_cap_;
	unsigned tag_have_; /* trailer bytes received */
};

void dt_frame_decoder_init(struct dt_frame_decoder *d, uint64_t max_payload);
void dt_frame_decoder_release(struct dt_frame_decoder *d);

/* Consumes input up to the end of at most one frame; returns the bytes
 * consumed. After DT_FRAME_READY, handle the frame, call
 * dt_frame_decoder_next, and feed the rest. After DT_FRAME_ERROR nothing more
 * is consumed. */
size_t dt_frame_decoder_feed(struct dt_frame_decoder *d, const void *data, size_t len, enum dt_frame_event *ev);

/* While a payload is being received: where its next bytes go and how many are
 * still missing, so the caller can recv() into place. Returns 0 (and sets
 * nothing) when the decoder is not inside a payload. */
int dt_frame_decoder_window(struct dt_frame_decoder *d, uint8_t **where, size_t *want);
/* Records n bytes written into the window; returns READY when the payload is
 * complete (NEED_MORE while a trailer is still to come: feed it). */
enum dt_frame_event dt_frame_decoder_advance(struct dt_frame_decoder *d, size_t n);

/* Inside a payload: stop storing it (the destination is about to go away);
 * the rest is read and dropped, and the frame still completes as READY with
 * a NULL payload. */
void dt_frame_decoder_discard(struct dt_frame_decoder *d);

/* While a payload is being received or its trailer read: the payload's
 * destination and, in *have, how many of its bytes are there (a
 * connection checks them as they arrive, net/auth.h). NULL when not inside
 * a frame's payload or trailer, or when the payload is being dropped. */
uint8_t *dt_frame_decoder_partial(const struct dt_frame_decoder *d, uint64_t *have);
/* The completed frame's payload (NULL when discarded; not NULL for length 0). */
uint8_t *dt_frame_decoder_payload(struct dt_frame_decoder *d);
/* Bytes to read before the decoder can check something or finish the frame:
 * up to the next header check point, the rest of the payload, or the rest of
 * the trailer; 0 when a frame is READY or the decoder failed. */
size_t dt_frame_decoder_want(const struct dt_frame_decoder *d);
/* 1 while a frame has started but is not complete. */
int dt_frame_decoder_mid_frame(const struct dt_frame_decoder *d);
/* Starts the next frame after READY. */
void dt_frame_decoder_next(struct dt_frame_decoder *d);
/* At end of stream: DT_FRAME_OK between frames, else DT_FRAME_TRUNCATED with
 * detail "the stream ended after 13 of 32 header bytes" (or payload bytes). */
enum dt_frame_error dt_frame_decoder_finish(struct dt_frame_decoder *d);

#endif
