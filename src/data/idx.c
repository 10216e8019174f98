#include "data/idx.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/alloc.h"

/* Trailing bytes after the data are counted up to this many, then "at least". */
#define TRAILING_COUNT_CAP ((size_t)1 << 20)
/* zlib's input buffer; bigger than the 8 KiB default for fewer read calls. */
#define GZ_BUFFER_BYTES (1u << 17)
/* The data buffer starts this big and doubles while bytes keep coming. */
#define DATA_FIRST_ALLOC ((size_t)1 << 20)

const char *dt_idx_type_name(int type)
{
	switch (type) {
	case DT_IDX_U8: return "uint8";
	case DT_IDX_I8: return "int8";
	case DT_IDX_I16: return "int16";
	case DT_IDX_I32: return "int32";
	case DT_IDX_F32: return "float32";
	case DT_IDX_F64: return "float64";
	default: return "unknown";
	}
}

static size_t type_size(int type)
{
	switch (type) {
	case DT_IDX_U8:
	case DT_IDX_I8: return 1;
	case DT_IDX_I16: return 2;
	case DT_IDX_I32:
	case DT_IDX_F32: return 4;
	case DT_IDX_F64: return 8;
	default: return 0;
	}
}

static uint32_t load_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* "60000x28x28 uint8" for messages. */
static const char *describe(const struct dt_idx *idx, char *buf, size_t cap)
{
	size_t used = 0;
	for (int i = 0; i < idx->ndims && used < cap; i++) {
		int n = snprintf(buf + used, cap - used, "%s%" PRIu32, i ? "x" : "", idx->dims[i]);
		if (n < 0)
			break;
		used += (size_t)n;
	}
	if (used < cap)
		snprintf(buf + used, cap - used, " %s", dt_idx_type_name(idx->type));
	return buf;
}

enum dt_status dt_idx_parse_header(const uint8_t *buf, size_t len, size_t max_bytes, struct dt_idx *out,
				   size_t *header_len, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	*header_len = 0;
	if (len == 0)
		return dt_err_set(err, DT_DATA, "file is empty: an IDX file starts with a 4-byte magic");
	if (len < 4)
		return dt_err_set(err, DT_DATA, "file too short: expected at least a 4-byte magic, found %zu bytes",
				  len);
	uint32_t magic = load_be32(buf);
	if (buf[0] != 0 || buf[1] != 0)
		return dt_err_set(err, DT_DATA,
				  "bad magic 0x%08" PRIx32 ": an IDX file starts with two zero bytes, a type byte "
				  "and a dimension count (e.g. 0x00000803 for images)",
				  magic);
	size_t esize = type_size(buf[2]);
	if (esize == 0)
		return dt_err_set(err, DT_DATA,
				  "unsupported element type 0x%02x in magic 0x%08" PRIx32
				  " (IDX types are 0x08, 0x09, 0x0b, 0x0c, 0x0d, 0x0e)",
				  buf[2], magic);
	int ndims = buf[3];
	if (ndims < 1 || ndims > DT_IDX_MAX_DIMS)
		return dt_err_set(err, DT_DATA,
				  "unsupported number of dimensions %d in magic 0x%08" PRIx32 " (1 to %d supported)",
				  ndims, magic, DT_IDX_MAX_DIMS);
	size_t hlen = 4 + 4 * (size_t)ndims;
	if (len < hlen)
		return dt_err_set(err, DT_DATA, "header truncated: %d dimensions need a %zu-byte header, found %zu bytes",
				  ndims, hlen, len);

	out->type = (enum dt_idx_type)buf[2];
	out->ndims = ndims;
	out->elem_size = esize;
	for (int i = 0; i < ndims; i++)
		out->dims[i] = load_be32(buf + 4 + 4 * (size_t)i);
	/* Multiply against the cap, not SIZE_MAX, so no product can overflow;
	 * a zero dimension makes an empty file however large the others are. */
	size_t cap_elems = max_bytes / esize, count = 1;
	int too_big = 0;
	for (int i = 0; i < ndims; i++) {
		uint32_t d = out->dims[i];
		if (d == 0) {
			count = 0;
			too_big = 0;
			break;
		}
		if (too_big || count > cap_elems / d)
			too_big = 1;
		else
			count *= d;
	}
	if (too_big) {
		char what[160];
		return dt_err_set(err, DT_DATA, "data too large: %s needs more than the cap of %zu bytes",
				  describe(out, what, sizeof(what)), max_bytes);
	}
	out->count = count;
	out->data_bytes = out->count * esize;
	*header_len = hlen;
	return DT_OK;
}

enum dt_status dt_idx_parse(const uint8_t *buf, size_t len, size_t max_bytes, struct dt_idx *out,
			    struct dt_err *err)
{
	size_t hlen;
	enum dt_status st = dt_idx_parse_header(buf, len, max_bytes, out, &hlen, err);
	if (st)
		return st;
	size_t found = len - hlen;
	if (found != out->data_bytes) {
		char what[160];
		describe(out, what, sizeof(what));
		if (found < out->data_bytes)
			st = dt_err_set(err, DT_DATA,
					"truncated data: %s needs %zu bytes after the %zu-byte header, found %zu",
					what, out->data_bytes, hlen, found);
		else
			st = dt_err_set(err, DT_DATA,
					"trailing garbage: %s needs %zu bytes after the %zu-byte header, found %zu "
					"(%zu extra)",
					what, out->data_bytes, hlen, found, found - out->data_bytes);
		memset(out, 0, sizeof(*out));
		return st;
	}
	void *data;
	st = dt_try_malloc(&data, out->data_bytes, err);
	if (st) {
		memset(out, 0, sizeof(*out));
		return st;
	}
	if (out->data_bytes)
		memcpy(data, buf + hlen, out->data_bytes);
	out->data = data;
	return DT_OK;
}

/* Reads up to n bytes; *got says how many came. Fails only on a read or
 * decompression error, not on end of file. */
static enum dt_status read_upto(gzFile f, void *buf, size_t n, size_t *got, struct dt_err *err)
{
	uint8_t *p = buf;
	*got = 0;
	while (*got < n) {
		size_t want = n - *got;
		if (want > (size_t)1 << 30)
			want = (size_t)1 << 30;
		int r = gzread(f, p + *got, (unsigned)want);
		if (r < 0) {
			int errnum;
			const char *msg = gzerror(f, &errnum);
			if (errnum == Z_ERRNO)
				return dt_err_set(err, DT_IO, "read failed: %s", strerror(errno));
			return dt_err_set(err, DT_DATA, "corrupt gzip stream: %s", msg);
		}
		if (r == 0)
			break;
		*got += (size_t)r;
	}
	return DT_OK;
}

/* Why a read stopped short: zlib notes a gzip stream cut off in the middle. */
static const char *short_read_reason(gzFile f)
{
	int errnum;
	const char *msg = gzerror(f, &errnum);
	if (errnum == Z_BUF_ERROR)
		return msg;
	return NULL;
}

/*
 * Reads the data into out->data, growing the buffer as bytes arrive rather
 * than trusting the header: a 20-byte file that claims a gigabyte costs a
 * small buffer, not a gigabyte. glibc grows large blocks with mremap, so
 * the doubling rarely copies. *got may end short of data_bytes.
 */
static enum dt_status read_data(gzFile f, struct dt_idx *out, size_t *got, struct dt_err *err)
{
	size_t want = out->data_bytes, have = 0;
	size_t alloc = want < DATA_FIRST_ALLOC ? want : DATA_FIRST_ALLOC;
	void *data;
	enum dt_status st = dt_try_malloc(&data, alloc, err);
	if (st)
		return st;
	out->data = data;
	for (;;) {
		size_t n;
		st = read_upto(f, out->data + have, alloc - have, &n, err);
		if (st)
			return st;
		have += n;
		if (have < alloc || alloc == want)
			break;
		size_t next = alloc > want / 2 ? want : 2 * alloc;
		void *bigger = realloc(out->data, next);
		if (!bigger)
			return dt_err_set(err, DT_NOMEM, "out of memory growing the data buffer to %zu bytes", next);
		out->data = bigger;
		alloc = next;
	}
	*got = have;
	return DT_OK;
}

static enum dt_status load_open(gzFile f, size_t max_bytes, struct dt_idx *out, struct dt_err *err)
{
	uint8_t head[DT_IDX_MAX_HEADER];
	size_t got, hlen;
	enum dt_status st = read_upto(f, head, 4, &got, err);
	if (st)
		return st;
	if (got == 4 && head[0] == 0 && head[1] == 0 && head[3] >= 1 && head[3] <= DT_IDX_MAX_DIMS) {
		size_t more;
		st = read_upto(f, head + 4, 4 * (size_t)head[3], &more, err);
		if (st)
			return st;
		got += more;
	}
	st = dt_idx_parse_header(head, got, max_bytes, out, &hlen, err);
	if (st)
		return st;

	st = read_data(f, out, &got, err);
	if (st)
		return st;
	char what[160];
	if (got < out->data_bytes) {
		const char *why = short_read_reason(f);
		return dt_err_set(err, DT_DATA, "truncated data: %s needs %zu bytes after the %zu-byte header, found %zu%s%s%s",
				  describe(out, what, sizeof(what)), out->data_bytes, hlen, got,
				  why ? " (gzip stream cut short: " : "", why ? why : "", why ? ")" : "");
	}

	/* Nothing may follow the data; count what does, up to a bound. */
	uint8_t scratch[4096];
	size_t extra = 0;
	while (extra < TRAILING_COUNT_CAP) {
		st = read_upto(f, scratch, sizeof(scratch), &got, err);
		if (st)
			return st;
		extra += got;
		if (got < sizeof(scratch))
			break;
	}
	if (extra)
		return dt_err_set(err, DT_DATA,
				  "trailing garbage: %s needs %zu bytes after the %zu-byte header, found %s%zu (%s%zu extra)",
				  describe(out, what, sizeof(what)), out->data_bytes, hlen,
				  extra >= TRAILING_COUNT_CAP ? "at least " : "", out->data_bytes + extra,
				  extra >= TRAILING_COUNT_CAP ? "at least " : "", extra);
	/* All data arrived, but a gzip stream without its trailer has no checksum. */
	const char *why = short_read_reason(f);
	if (why)
		return dt_err_set(err, DT_DATA, "gzip stream cut short after the data: %s", why);
	return DT_OK;
}

enum dt_status dt_idx_load(const char *path, size_t max_bytes, struct dt_idx *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	errno = 0;
	gzFile f = gzopen(path, "rbe"); /* e: close on exec, for the launcher's children */
	if (!f)
		return dt_err_set(err, DT_IO, "cannot open IDX file '%s': %s", path,
				  errno ? strerror(errno) : "out of memory");
	if (gzbuffer(f, GZ_BUFFER_BYTES) != 0) {
		gzclose_r(f);
		return dt_err_set(err, DT_INTERNAL, "cannot set the zlib buffer size for '%s'", path);
	}
	enum dt_status st = load_open(f, max_bytes, out, err);
	int rc = gzclose_r(f);
	if (!st && rc == Z_ERRNO)
		st = dt_err_set(err, DT_IO, "close failed: %s", strerror(errno));
	if (st) {
		dt_idx_release(out);
		return dt_err_prefix(err, "cannot load IDX file '%s'", path);
	}
	return DT_OK;
}

void dt_idx_release(struct dt_idx *idx)
{
	if (!idx)
		return;
	free(idx->data);
	memset(idx, 0, sizeof(*idx));
}
