/*
 * tfrecord.h — TensorFlow's TFRecord files: reading and writing records.
 *
 * t2t-datagen writes its data as TFRecord files of tf.train.Example
 * (data/example.h); this is the framing. Byte layout of a file (TensorFlow's
 * core/lib/io/record_writer.cc; shared reference tfevents.md §1.2):
 *
 *   1. a file is zero or more records back to back, nothing before, between
 *      or after them;
 *   2. a record is: `uint64 length` (little-endian, 8 bytes);
 *   3. `uint32 masked_crc32c(the 8 length bytes)` (little-endian);
 *   4. `length` bytes of data (for t2t: one serialized tf.train.Example);
 *   5. `uint32 masked_crc32c(the data)` (little-endian);
 *   6. masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 on 32 bits,
 *      c being CRC-32C (base/crc32c.h, dt_crc32c_mask);
 *   7. the whole file may instead be a GZIP stream (RFC 1952, TFRecord
 *      option compression_type="GZIP") or a ZLIB stream (RFC 1950, "ZLIB")
 *      of those bytes.
 *
 * Compression is recognised from the bytes, not the name: a file whose
 * first 12 bytes are a record header with a valid length CRC is plain
 * (a compressed stream passes that check by chance with probability 2^-32),
 * otherwise a GZIP magic (1f 8b) or a ZLIB header (CMF/FLG, deflate, check
 * bits) means that stream, otherwise it is a plain file whose first record
 * is corrupt. Concatenated GZIP members are read as one stream, as
 * TensorFlow's ZlibInputStream does.
 *
 * Errors (all DT_DATA, exit 4) name the file and the record index (from
 * 0) and say what failed: a length CRC mismatch, a data CRC mismatch, a
 * record cut short (with the byte offset), a length above the cap, a
 * corrupt or truncated compressed stream.
 */
#ifndef DT_DATA_TFRECORD_H
#define DT_DATA_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum dt_tfrecord_compression { DT_TFRECORD_NONE, DT_TFRECORD_GZIP, DT_TFRECORD_ZLIB };

/* "none", "gzip", "zlib". */
const char *dt_tfrecord_compression_name(enum dt_tfrecord_compression c);

/* The framing's overhead per record: 8 + 4 + 4 bytes. */
#define DT_TFRECORD_OVERHEAD 16

/* A reader over a file held in memory (decompressed). */
struct dt_tfrecord_reader {
	const char *name;            /* for messages; borrowed */
	const uint8_t *buf;          /* borrowed, or owned when `owned` */
	size_t len, pos;
	int64_t index;               /* records returned so far */
	enum dt_tfrecord_compression compression;
	uint8_t *owned;              /* the decompressed or read bytes, freed by _close */
};

/* Reads the file at `path` (at most max_bytes after decompression) into
 * memory. Unreadable file: DT_IO; corrupt or over the cap: DT_DATA. */
enum dt_status dt_tfrecord_open(struct dt_tfrecord_reader *r, const char *path, size_t max_bytes,
				struct dt_err *err) DT_MUST_CHECK;
/* A reader over the bytes of a whole file in memory (compressed or not,
 * as the file would be); `name` is what messages call it. Both borrowed
 * (a decompressed copy is owned). */
enum dt_status dt_tfrecord_open_mem(struct dt_tfrecord_reader *r, const char *name, const void *data, size_t len,
				    size_t max_bytes, struct dt_err *err) DT_MUST_CHECK;
/* The next record: *data points into the reader's buffer (valid until
 * _close), *len its length. At the end of the file: DT_OK with *data NULL. */
enum dt_status dt_tfrecord_next(struct dt_tfrecord_reader *r, const uint8_t **data, size_t *len,
				struct dt_err *err) DT_MUST_CHECK;
void dt_tfrecord_close(struct dt_tfrecord_reader *r);

/* A writer: records collect in memory and _commit writes the file
 * atomically (base/atomic_file.h), compressed as asked. */
struct dt_tfrecord_writer {
	uint8_t *buf;
	size_t len, cap;
	int64_t records;
	enum dt_tfrecord_compression compression;
};

void dt_tfrecord_writer_init(struct dt_tfrecord_writer *w, enum dt_tfrecord_compression c);
void dt_tfrecord_write(struct dt_tfrecord_writer *w, const void *data, size_t len);
/* The file's bytes (compressed as asked) into a heap buffer (caller frees). */
enum dt_status dt_tfrecord_writer_bytes(const struct dt_tfrecord_writer *w, uint8_t **out, size_t *out_len,
					struct dt_err *err) DT_MUST_CHECK;
/* Writes the file and releases the writer whether or not it succeeds. */
enum dt_status dt_tfrecord_writer_commit(struct dt_tfrecord_writer *w, const char *path,
					 struct dt_err *err) DT_MUST_CHECK;
void dt_tfrecord_writer_free(struct dt_tfrecord_writer *w);

#endif
