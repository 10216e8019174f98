/*
 * idx.h — IDX files (the MNIST format): an in-memory parser and a file loader.
 *
 * Byte layout of an IDX file (every multi-byte number is big-endian):
 *   1. bytes 0-1   zero
 *   2. byte 2      element type: 0x08 uint8, 0x09 int8, 0x0B int16,
 *                  0x0C int32, 0x0D float32, 0x0E float64
 *   3. byte 3      number of dimensions D (1..DT_IDX_MAX_DIMS here)
 *   4. 4*D bytes   the size of each dimension, uint32 each
 *   5. the data    product(dims) * element size bytes, C order (last index
 *                  fastest), multi-byte elements big-endian
 * Nothing may follow the data. Images are "00 00 08 03" + N, 28, 28 (16-byte
 * header); labels are "00 00 08 01" + N (8-byte header).
 *
 * Both entry points validate the header before they allocate anything: the
 * data size is computed with overflow checks and compared with a cap the
 * caller gives, so a hostile header cannot ask for a giant allocation.
 * dt_idx_load reads through zlib's gzopen/gzread, which reads gzipped and
 * plain files alike.
 *
 * A parsed file owns its data (`data`, released by dt_idx_release); the bytes
 * are kept exactly as in the file, so elements wider than one byte are still
 * big-endian.
 */
#ifndef DT_DATA_IDX_H
#define DT_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

#define DT_IDX_MAX_DIMS 8
/* Largest header: magic + DT_IDX_MAX_DIMS sizes. */
#define DT_IDX_MAX_HEADER (4 + 4 * DT_IDX_MAX_DIMS)
/* Default cap on the data bytes of one file (Fashion-MNIST's largest is 47 MB). */
#define DT_IDX_DEFAULT_MAX_BYTES ((size_t)1 << 30)

enum dt_idx_type {
	DT_IDX_U8 = 0x08,
	DT_IDX_I8 = 0x09,
	DT_IDX_I16 = 0x0B,
	DT_IDX_I32 = 0x0C,
	DT_IDX_F32 = 0x0D,
	DT_IDX_F64 = 0x0E,
};

struct dt_idx {
	enum dt_idx_type type;
	int ndims;
	uint32_t dims[DT_IDX_MAX_DIMS]; /* (ndims), unused entries zero */
	size_t elem_size;               /* bytes per element: 1, 2, 4 or 8 */
	size_t count;                   /* elements: product of dims */
	size_t data_bytes;              /* count * elem_size */
	uint8_t *data;                  /* (data_bytes), as in the file, owned */
};

/* "uint8", "int16", ...; "unknown" for anything else. */
const char *dt_idx_type_name(int type);

/*
 * Parses the header at the start of buf: checks the magic, the type, the
 * number of dimensions, and that the data size fits in max_bytes. Fills
 * everything in `out` except `data` (left NULL) and sets *header_len.
 * Does not look past the header, so it also serves a reader that has only
 * the first bytes of a file. Errors are DT_DATA and do not name a file.
 */
enum dt_status dt_idx_parse_header(const uint8_t *buf, size_t len, size_t max_bytes, struct dt_idx *out,
				   size_t *header_len, struct dt_err *err) DT_MUST_CHECK;

/*
 * Parses a whole IDX file held in memory: the header, then checks that
 * exactly data_bytes follow it, then copies them into out->data.
 * On failure `out` holds nothing to release.
 */
enum dt_status dt_idx_parse(const uint8_t *buf, size_t len, size_t max_bytes, struct dt_idx *out,
			    struct dt_err *err) DT_MUST_CHECK;

/*
 * Loads an IDX file, gzipped or plain, with at most max_bytes of data.
 * Errors name the file: DT_IO when it cannot be opened or read, DT_DATA when
 * it is not a valid IDX file (bad magic in hex, expected and found byte
 * counts for a truncated file or trailing bytes, a corrupt gzip stream).
 */
enum dt_status dt_idx_load(const char *path, size_t max_bytes, struct dt_idx *out, struct dt_err *err) DT_MUST_CHECK;

void dt_idx_release(struct dt_idx *idx);

#endif
