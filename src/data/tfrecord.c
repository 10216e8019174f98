/*
 * tfrecord.c — TFRecord framing, plain and GZIP/ZLIB (data/tfrecord.h).
 */
#include "data/tfrecord.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/crc32c.h"

const char *dt_tfrecord_compression_name(enum dt_tfrecord_compression c)
{
	return c == DT_TFRECORD_GZIP ? "gzip" : c == DT_TFRECORD_ZLIB ? "zlib" : "none";
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static int plain_header_ok(const uint8_t *p, size_t len)
{
	return len >= 12 && dt_crc32c_mask(dt_crc32c(p, 8)) == get32(p + 8);
}

static int is_zlib_header(const uint8_t *p, size_t len)
{
	/* RFC 1950: CM 8 (deflate), CINFO <= 7, (CMF * 256 + FLG) % 31 == 0, no preset dictionary */
	return len >= 2 && (p[0] & 0x0f) == 8 && (p[0] >> 4) <= 7 && ((p[0] << 8) | p[1]) % 31 == 0 && !(p[1] & 0x20);
}

/* Inflates a whole GZIP (members back to back) or ZLIB stream, at most max bytes out. */
static enum dt_status inflate_all(const char *name, const uint8_t *in, size_t in_len, int gzip, size_t max,
				  uint8_t **out, size_t *out_len, struct dt_err *err)
{
	z_stream z;
	memset(&z, 0, sizeof(z));
	if (inflateInit2(&z, gzip ? 16 + 15 : 15) != Z_OK)
		return dt_err_set(err, DT_NOMEM, "'%s': cannot start zlib's inflate", name);
	size_t cap = in_len * 4 + 4096, used = 0;
	if (cap > max + 1)
		cap = max + 1;
	uint8_t *buf = dt_xmalloc(cap);
	size_t done_in = 0;
	enum dt_status st = DT_OK;
	for (;;) {
		if (used == cap) {
			if (cap > max) {
				st = dt_err_set(err, DT_DATA, "'%s' (%s) decompresses to more than %zu bytes", name,
						gzip ? "gzip" : "zlib", max);
				break;
			}
			cap = cap > max / 2 ? max + 1 : cap * 2;
			buf = dt_xrealloc(buf, cap);
		}
		/* zlib's counters are 32-bit: feed at most 1 GiB at a time */
		size_t in_chunk = in_len - done_in, out_chunk = cap - used;
		z.next_in = (Bytef *)(uintptr_t)(in + done_in);
		z.avail_in = (uInt)(in_chunk > (1u << 30) ? (1u << 30) : in_chunk);
		z.next_out = buf + used;
		z.avail_out = (uInt)(out_chunk > (1u << 30) ? (1u << 30) : out_chunk);
		const uInt before_in = z.avail_in, before_out = z.avail_out;
		int rc = inflate(&z, Z_NO_FLUSH);
		done_in += before_in - z.avail_in;
		used += before_out - z.avail_out;
		if (rc == Z_STREAM_END) {
			if (done_in == in_len)
				break;
			if (gzip && in_len - done_in >= 2 && in[done_in] == 0x1f && in[done_in + 1] == 0x8b) {
				inflateReset(&z); /* another gzip member */
				continue;
			}
			st = dt_err_set(err, DT_DATA, "'%s': %zu bytes of garbage after the %s stream (at byte %zu)", name,
					in_len - done_in, gzip ? "gzip" : "zlib", done_in);
			break;
		}
		if (rc == Z_BUF_ERROR && done_in == in_len && z.avail_out > 0) {
			st = dt_err_set(err, DT_DATA, "'%s': the %s stream is cut short (after %zu bytes)", name,
					gzip ? "gzip" : "zlib", in_len);
			break;
		}
		if (rc != Z_OK && rc != Z_BUF_ERROR) {
			st = dt_err_set(err, DT_DATA, "'%s': corrupt %s stream near byte %zu: %s", name,
					gzip ? "gzip" : "zlib", done_in, z.msg ? z.msg : "inflate failed");
			break;
		}
	}
	inflateEnd(&z);
	if (st) {
		free(buf);
		return st;
	}
	*out = buf;
	*out_len = used;
	return DT_OK;
}

enum dt_status dt_tfrecord_open_mem(struct dt_tfrecord_reader *r, const char *name, const void *data, size_t len,
				    size_t max_bytes, struct dt_err *err)
{
	memset(r, 0, sizeof(*r));
	r->name = name;
	const uint8_t *p = data;
	if (len == 0 || plain_header_ok(p, len) || !(len >= 2 && ((p[0] == 0x1f && p[1] == 0x8b) || is_zlib_header(p, len)))) {
		r->buf = p;
		r->len = len;
		return DT_OK;
	}
	r->compression = p[0] == 0x1f ? DT_TFRECORD_GZIP : DT_TFRECORD_ZLIB;
	enum dt_status st = inflate_all(name, p, len, r->compression == DT_TFRECORD_GZIP, max_bytes, &r->owned,
					&r->len, err);
	r->buf = r->owned;
	return st;
}

enum dt_status dt_tfrecord_open(struct dt_tfrecord_reader *r, const char *path, size_t max_bytes, struct dt_err *err)
{
	memset(r, 0, sizeof(*r));
	char *raw = NULL;
	size_t len = 0;
	enum dt_status st = dt_read_file(path, max_bytes, &raw, &len, err);
	if (st)
		return st;
	st = dt_tfrecord_open_mem(r, path, raw, len, max_bytes, err);
	if (r->owned)
		free(raw);
	else
		r->owned = (uint8_t *)raw;
	return st;
}

enum dt_status dt_tfrecord_next(struct dt_tfrecord_reader *r, const uint8_t **data, size_t *len, struct dt_err *err)
{
	*data = NULL;
	*len = 0;
	if (r->pos == r->len)
		return DT_OK;
	const size_t left = r->len - r->pos;
	const uint8_t *p = r->buf + r->pos;
	if (left < 12)
		return dt_err_set(err, DT_DATA, "'%s' record %lld: truncated record at byte %zu (%zu bytes left, a header is 12)",
				  r->name, (long long)r->index, r->pos, left);
	if (dt_crc32c_mask(dt_crc32c(p, 8)) != get32(p + 8))
		return dt_err_set(err, DT_DATA, "'%s' record %lld: corrupted record at byte %zu (the length's CRC does not match)",
				  r->name, (long long)r->index, r->pos);
	const uint64_t n = get64(p);
	if (n > left - 12 || left - 12 - n < 4)
		return dt_err_set(err, DT_DATA, "'%s' record %lld: truncated record at byte %zu (%llu data bytes + 4 announced, "
				  "%zu left)", r->name, (long long)r->index, r->pos, (unsigned long long)n, left - 12);
	if (dt_crc32c_mask(dt_crc32c(p + 12, (size_t)n)) != get32(p + 12 + n))
		return dt_err_set(err, DT_DATA, "'%s' record %lld: corrupted record at byte %zu (the data's CRC does not match)",
				  r->name, (long long)r->index, r->pos);
	*data = p + 12;
	*len = (size_t)n;
	r->pos += 16 + (size_t)n;
	r->index++;
	return DT_OK;
}

void dt_tfrecord_close(struct dt_tfrecord_reader *r)
{
	free(r->owned);
	memset(r, 0, sizeof(*r));
}

/* ---- writing ------------------------------------------------------------------- */

void dt_tfrecord_writer_init(struct dt_tfrecord_writer *w, enum dt_tfrecord_compression c)
{
	memset(w, 0, sizeof(*w));
	w->compression = c;
}

void dt_tfrecord_write(struct dt_tfrecord_writer *w, const void *data, size_t len)
{
	if (w->cap - w->len < len + DT_TFRECORD_OVERHEAD) {
		size_t want = w->len + len + DT_TFRECORD_OVERHEAD;
		w->cap = w->cap * 2 > want ? w->cap * 2 : want + 4096;
		w->buf = dt_xrealloc(w->buf, w->cap);
	}
	uint8_t *p = w->buf + w->len;
	put32(p, (uint32_t)len);
	put32(p + 4, (uint32_t)((uint64_t)len >> 32));
	put32(p + 8, dt_crc32c_mask(dt_crc32c(p, 8)));
	if (len)
		memcpy(p + 12, data, len);
	put32(p + 12 + len, dt_crc32c_mask(dt_crc32c(data, len)));
	w->len += len + DT_TFRECORD_OVERHEAD;
	w->records++;
}

enum dt_status dt_tfrecord_writer_bytes(const struct dt_tfrecord_writer *w, uint8_t **out, size_t *out_len,
					struct dt_err *err)
{
	if (w->compression == DT_TFRECORD_NONE) {
		*out = dt_xmalloc(w->len + 1);
		if (w->len)
			memcpy(*out, w->buf, w->len);
		*out_len = w->len;
		return DT_OK;
	}
	if (w->len > (size_t)UINT32_MAX / 2) /* zlib's counters are 32-bit; one call compresses the file */
		return dt_err_set(err, DT_USAGE, "a %s TFRecord file of %zu bytes: at most 2 GiB compressed in one piece",
				  dt_tfrecord_compression_name(w->compression), w->len);
	z_stream z;
	memset(&z, 0, sizeof(z));
	const int bits = w->compression == DT_TFRECORD_GZIP ? 16 + 15 : 15;
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return dt_err_set(err, DT_NOMEM, "cannot start zlib's deflate");
	size_t cap = deflateBound(&z, (uLong)w->len) + 64;
	uint8_t *buf = dt_xmalloc(cap);
	z.next_in = w->buf;
	z.avail_in = (uInt)w->len;
	z.next_out = buf;
	z.avail_out = (uInt)cap;
	int rc = deflate(&z, Z_FINISH);
	*out_len = cap - z.avail_out;
	deflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(buf);
		return dt_err_set(err, DT_NOMEM, "zlib's deflate failed (%d) on %zu bytes", rc, w->len);
	}
	*out = buf;
	return DT_OK;
}

enum dt_status dt_tfrecord_writer_commit(struct dt_tfrecord_writer *w, const char *path, struct dt_err *err)
{
	uint8_t *bytes = NULL;
	size_t n = 0;
	enum dt_status st = dt_tfrecord_writer_bytes(w, &bytes, &n, err);
	if (!st)
		st = dt_write_file_atomic(path, bytes, n, err);
	free(bytes);
	dt_tfrecord_writer_free(w);
	return st;
}

void dt_tfrecord_writer_free(struct dt_tfrecord_writer *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}
