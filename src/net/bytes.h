/*
 * bytes.h — explicit little-endian encoding, and bounded cursors over byte buffers.
 *
 * Everything dtrain puts on the wire goes through these helpers: a value is
 * written byte by byte in little-endian order and read back the same way, so
 * the encoding never depends on the host's endianness, alignment or struct
 * padding, and no struct is ever cast onto a buffer.
 *
 * Two cursors build and parse payloads without manual offset arithmetic:
 *
 *   struct dt_wcur w = dt_wcur_make(buf, cap);      struct dt_rcur r = dt_rcur_make(p, len);
 *   dt_wcur_u32(&w, 7);                             uint32_t n = dt_rcur_u32(&r);
 *   dt_wcur_str16(&w, "ps");                        size_t len; const uint8_t *s = dt_rcur_str16(&r, &len);
 *   if (w.overflow) ...  // buf too small           if (r.bad) ...  // truncated input
 *
 * A cursor never reads or writes outside its buffer: a write that does not
 * fit sets `overflow` (and keeps counting `pos`, so encoders can be run once
 * with cap 0 to measure the size); a read past the end sets `bad` and
 * returns zeros. Callers check the flag once at the end.
 */
#ifndef DT_NET_BYTES_H
#define DT_NET_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void dt_put_u8(uint8_t *p, uint8_t v) { p[0] = v; }

static inline void dt_put_u16le(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void dt_put_u32le(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void dt_put_u64le(uint8_t *p, uint64_t v)
{
	dt_put_u32le(p, (uint32_t)v);
	dt_put_u32le(p + 4, (uint32_t)(v >> 32));
}

static inline uint8_t dt_get_u8(const uint8_t *p) { return p[0]; }

static inline uint16_t dt_get_u16le(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t dt_get_u32le(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t dt_get_u64le(const uint8_t *p)
{
	return (uint64_t)dt_get_u32le(p) | (uint64_t)dt_get_u32le(p + 4) << 32;
}

/* ---- write cursor ---- */

struct dt_wcur {
	uint8_t *buf;
	size_t cap;
	size_t pos;   /* bytes written so far (keeps counting past cap) */
	int overflow; /* set once a write did not fit */
};

static inline struct dt_wcur dt_wcur_make(uint8_t *buf, size_t cap)
{
	struct dt_wcur w = { buf, cap, 0, 0 };
	return w;
}

/* Reserves n bytes; returns where to write them, or NULL if they do not fit. */
static inline uint8_t *dt_wcur_take(struct dt_wcur *w, size_t n)
{
	uint8_t *p = NULL;
	if (!w->overflow && w->buf && n <= w->cap && w->pos <= w->cap - n)
		p = w->buf + w->pos;
	else
		w->overflow = 1;
	w->pos += n;
	return p;
}

static inline void dt_wcur_u8(struct dt_wcur *w, uint8_t v)
{
	uint8_t *p = dt_wcur_take(w, 1);
	if (p)
		dt_put_u8(p, v);
}

static inline void dt_wcur_u16(struct dt_wcur *w, uint16_t v)
{
	uint8_t *p = dt_wcur_take(w, 2);
	if (p)
		dt_put_u16le(p, v);
}

static inline void dt_wcur_u32(struct dt_wcur *w, uint32_t v)
{
	uint8_t *p = dt_wcur_take(w, 4);
	if (p)
		dt_put_u32le(p, v);
}

static inline void dt_wcur_u64(struct dt_wcur *w, uint64_t v)
{
	uint8_t *p = dt_wcur_take(w, 8);
	if (p)
		dt_put_u64le(p, v);
}

static inline void dt_wcur_bytes(struct dt_wcur *w, const void *data, size_t n)
{
	uint8_t *p = dt_wcur_take(w, n);
	if (p && n)
		memcpy(p, data, n);
}

/* A string as u16 length + bytes (no NUL); longer than 65535 bytes overflows. */
static inline void dt_wcur_str16(struct dt_wcur *w, const char *s, size_t n)
{
	if (n > 0xFFFF) {
		w->overflow = 1;
		return;
	}
	dt_wcur_u16(w, (uint16_t)n);
	dt_wcur_bytes(w, s, n);
}

/* ---- read cursor ---- */

struct dt_rcur {
	const uint8_t *buf;
	size_t len;
	size_t pos;
	int bad; /* set once a read ran past the end */
};

static inline struct dt_rcur dt_rcur_make(const uint8_t *buf, size_t len)
{
	static const uint8_t empty[1] = { 0 };
	struct dt_rcur r = { buf ? buf : empty, buf ? len : 0, 0, 0 };
	return r;
}

static inline size_t dt_rcur_left(const struct dt_rcur *r)
{
	return r->bad ? 0 : r->len - r->pos;
}

/* Returns a pointer to the next n bytes and skips them, or NULL (and sets bad). */
static inline const uint8_t *dt_rcur_take(struct dt_rcur *r, size_t n)
{
	if (r->bad || n > r->len - r->pos) {
		r->bad = 1;
		return NULL;
	}
	const uint8_t *p = r->buf + r->pos;
	r->pos += n;
	return p;
}

static inline uint8_t dt_rcur_u8(struct dt_rcur *r)
{
	const uint8_t *p = dt_rcur_take(r, 1);
	return p ? dt_get_u8(p) : 0;
}

static inline uint16_t dt_rcur_u16(struct dt_rcur *r)
{
	const uint8_t *p = dt_rcur_take(r, 2);
	return p ? dt_get_u16le(p) : 0;
}

static inline uint32_t dt_rcur_u32(struct dt_rcur *r)
{
	const uint8_t *p = dt_rcur_take(r, 4);
	return p ? dt_get_u32le(p) : 0;
}

static inline uint64_t dt_rcur_u64(struct dt_rcur *r)
{
	const uint8_t *p = dt_rcur_take(r, 8);
	return p ? dt_get_u64le(p) : 0;
}

/* A u16-length string; returns its bytes (not NUL-terminated) and length. */
static inline const uint8_t *dt_rcur_str16(struct dt_rcur *r, size_t *len)
{
	size_t n = dt_rcur_u16(r);
	const uint8_t *p = dt_rcur_take(r, n);
	*len = p ? n : 0;
	return p;
}

#endif
