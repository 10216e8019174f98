/* libFuzzer target: the incremental frame decoder (net/frame.c) and the
 * control payload decoders (net/messages.c).
 *
 * Input: byte 0 picks how the stream is cut into pieces (its low 4 bits seed
 * the piece sizes, bit 4 selects receiving payloads through the window, bit 5
 * a caller destination); the rest is the byte stream. The stream is decoded
 * twice — all at once, and in pieces — and both must produce the same frames
 * and the same error. Every completed HELLO, HELLO_OK, REFUSE, ERROR and
 * SHUTDOWN payload also goes through its decoder.
 *
 *   make build-fuzz/fuzz_frame && build-fuzz/fuzz_frame -runs=20000 -seed=1 tests/fuzz/corpus/fuzz_frame
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32c.h"
#include "net/frame.h"
#include "net/messages.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAMES 64
#define CAP (1u << 20)

struct outcome {
	int nframes;
	struct dt_frame_header h[MAX_FRAMES];
	uint32_t crc[MAX_FRAMES]; /* of each payload */
	enum dt_frame_error error;
	size_t consumed;
};

static uint8_t dest_area[CAP];

static int give_dest(void *arg, const struct dt_frame_header *h, void **dest, char *why, size_t cap)
{
	(void)arg;
	(void)why;
	(void)cap;
	if (h->length <= sizeof(dest_area) && (h->request_id & 1))
		*dest = dest_area;
	return 0;
}

static void check_payload(const struct dt_frame_header *h, const uint8_t *p)
{
	struct dt_err err = DT_ERR_INIT;
	size_t len = (size_t)h->length;
	if (h->type == DT_MSG_HELLO || h->type == DT_MSG_HELLO_OK) {
		struct dt_hello hello;
		if (dt_hello_decode(&hello, p, len, &err) == DT_OK) {
			/* A decoded hello re-encodes to the same bytes (but the
			 * reserved bytes 2..3, which decoding ignores). */
			size_t n = dt_hello_encode(&hello, NULL, 0);
			DT_ASSERT(n == len && n >= 4);
			uint8_t *again = dt_xmalloc(n);
			dt_hello_encode(&hello, again, n);
			DT_ASSERT(memcmp(again, p, 2) == 0 && memcmp(again + 4, p + 4, n - 4) == 0);
			free(again);
		}
		dt_hello_release(&hello);
	} else if (h->type == DT_MSG_REFUSE || h->type == DT_MSG_ERROR || h->type == DT_MSG_SHUTDOWN) {
		struct dt_reason_msg m;
		if (dt_reason_decode(&m, p, len, &err) == DT_OK)
			DT_ASSERT(strlen(m.text) < DT_REASON_MAX);
	}
}

static void record(struct outcome *o, struct dt_frame_decoder *d)
{
	const uint8_t *p = dt_frame_decoder_payload(d);
	DT_ASSERT(p != NULL);
	if (o->nframes < MAX_FRAMES) {
		o->h[o->nframes] = d->header;
		o->crc[o->nframes] = dt_crc32c(p, (size_t)d->header.length);
	}
	o->nframes++;
	check_payload(&d->header, p);
	dt_frame_decoder_next(d);
}

static void run(const uint8_t *s, size_t n, const uint8_t *sizes, int use_window, int use_dest, struct outcome *o)
{
	memset(o, 0, sizeof(*o));
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, CAP);
	if (use_dest)
		d.on_header = give_dest;
	size_t pos = 0, k = 0;
	enum dt_frame_event ev = DT_FRAME_NEED_MORE;
	while (pos < n && ev != DT_FRAME_ERROR) {
		uint8_t *where;
		size_t want;
		size_t piece = sizes ? 1 + sizes[k++ % 16] : n - pos;
		if (piece > n - pos)
			piece = n - pos;
		if (use_window && dt_frame_decoder_window(&d, &where, &want)) {
			size_t take = piece < want ? piece : want;
			memcpy(where, s + pos, take);
			pos += take;
			ev = dt_frame_decoder_advance(&d, take);
		} else {
			size_t used = dt_frame_decoder_feed(&d, s + pos, piece, &ev);
			DT_ASSERT(used <= piece);
			DT_ASSERT(ev != DT_FRAME_NEED_MORE || used == piece);
			pos += used;
		}
		if (ev == DT_FRAME_READY) {
			record(o, &d);
			ev = DT_FRAME_NEED_MORE;
		}
	}
	o->error = ev == DT_FRAME_ERROR ? d.error : dt_frame_decoder_finish(&d);
	DT_ASSERT(d.buf_cap_ <= CAP); /* never more than the cap, whatever the lengths said */
	o->consumed = pos;
	dt_frame_decoder_release(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 16))
		return 0;
	uint8_t mode = data[0];
	const uint8_t *s = data + 1;
	size_t n = size - 1;
	uint8_t sizes[16];
	uint32_t x = 0x9E3779B9u * (mode & 15u) + 1;
	for (int i = 0; i < 16; i++) {
		x = x * 1103515245u + 12345u;
		sizes[i] = (uint8_t)((x >> 16) % ((mode & 8) ? 64 : 5));
	}
	static struct outcome whole, pieces;
	run(s, n, NULL, 0, 0, &whole);
	run(s, n, sizes, (mode >> 4) & 1, (mode >> 5) & 1, &pieces);
	DT_ASSERT(whole.nframes == pieces.nframes);
	DT_ASSERT(whole.error == pieces.error);
	for (int i = 0; i < whole.nframes && i < MAX_FRAMES; i++) {
		const struct dt_frame_header *a = &whole.h[i], *b = &pieces.h[i];
		DT_ASSERT(a->version == b->version && a->type == b->type && a->flags == b->flags);
		DT_ASSERT(a->request_id == b->request_id && a->length == b->length);
		DT_ASSERT(whole.crc[i] == pieces.crc[i]);
	}
	if (whole.error != DT_FRAME_OK && whole.error != DT_FRAME_TRUNCATED)
		DT_ASSERT(whole.consumed == pieces.consumed);
	return 0;
}
