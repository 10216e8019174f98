/*
 * events.h — TensorBoard event files: TFRecord framing around hand-encoded
 * `Event` protobufs, written the way TensorFlow 2's summary writer does.
 *
 * One writer is one file, `<dir>/events.out.tfevents.<secs>.<host>.<pid>`
 * (seconds since the epoch, 10 digits zero-padded; a new file per writer,
 * never reopened or appended to, so a restarted chief starts a new file and
 * TensorBoard drops the stale tail of the old one itself). Readers treat any
 * file whose name contains "tfevents" as an event file and read the files of
 * a directory in name order, which the timestamp makes chronological.
 *
 * File layout (all integers little-endian; no header, padding or footer):
 *   1. A file is a sequence of records; each record is
 *        length          u64, n = bytes of data
 *        length_crc      u32, masked CRC-32C of the 8 length bytes
 *        data            n bytes, one serialized `Event`
 *        data_crc        u32, masked CRC-32C of data
 *      so a record takes n + 16 bytes. Masked CRC (LevelDB's):
 *      ((crc >> 15) | (crc << 17)) + 0xa282ead8, see base/crc32c.h.
 *   2. The first record's Event carries `wall_time` and
 *      `file_version = "brain.Event:2"`.
 *   3. Every later record is one Event holding one Summary with the scalars
 *      of one step: `wall_time`, `step`, and `summary { value { ... } ... }`.
 *
 * Protobuf encoding (proto3 wire format; key byte = field << 3 | wire type,
 * wire types 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32):
 *   4. Event:        1 wall_time double (key 0x09, 8 bytes LE)
 *                    2 step int64 varint (0x10; omitted when 0)
 *                    3 file_version string (0x1a)
 *                    5 summary Summary (0x2a)
 *   5. Summary:      1 value, repeated Summary.Value (0x0a)
 *   6. Summary.Value: 1 tag string (0x0a)
 *                    2 simple_value float (0x15; TF1 style, compatibility only)
 *                    8 tensor TensorProto (0x42)
 *                    9 metadata SummaryMetadata (0x4a)
 *   7. TensorProto:  1 dtype varint = 1 (DT_FLOAT) (0x08)
 *                    2 tensor_shape, empty = rank 0 (0x12 0x00)
 *                    4 tensor_content, the 4 bytes of the float LE (0x22 0x04 ...)
 *   8. SummaryMetadata: 1 plugin_data { 1 plugin_name = "scalars" } (0x0a)
 *                    4 data_class varint = 1 (SCALAR) (0x20 0x01)
 *   Fields are written in field-number order; a length-delimited field is
 *   key, varint length, bytes. The TF2 value written for `loss = 0.5`:
 *     0a 04 "loss"  42 0a 08 01 12 00 22 04 00 00 00 3f
 *     4a 0d 0a 09 0a 07 "scalars" 20 01
 *
 * Durability: a record is built in memory and handed to the kernel with one
 * write() (retried until complete), so a crash between summaries leaves no
 * partial record; when a write fails halfway, the file is truncated back to
 * the last whole record before the error is returned. Data reaches the
 * kernel at every call (nothing is buffered in the process); there is no
 * fsync — summaries are a log, not state.
 */
#ifndef DT_TRAIN_EVENTS_H
#define DT_TRAIN_EVENTS_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

/* A growable byte buffer the encoders append to (owned; dt_pb_release frees). */
struct dt_pb {
	uint8_t *data;
	size_t len, cap;
};

void dt_pb_release(struct dt_pb *b);
void dt_pb_bytes(struct dt_pb *b, const void *p, size_t n);
/* Base-128 varint, least significant group first (1 to 10 bytes). */
void dt_pb_varint(struct dt_pb *b, uint64_t v);
/* Key byte(s): field << 3 | wire type. */
void dt_pb_key(struct dt_pb *b, unsigned field, unsigned wire_type);
/* Key + varint value (int64 fields take the two's complement, 10 bytes when negative). */
void dt_pb_field_varint(struct dt_pb *b, unsigned field, uint64_t v);
/* Key + 8 bytes of the double, little-endian. */
void dt_pb_field_double(struct dt_pb *b, unsigned field, double v);
/* Key + 4 bytes of the float, little-endian. */
void dt_pb_field_float(struct dt_pb *b, unsigned field, float v);
/* Key + varint length + bytes (strings, bytes and embedded messages). */
void dt_pb_field_bytes(struct dt_pb *b, unsigned field, const void *p, size_t n);

/* One named scalar of a summary. */
struct dt_scalar {
	const char *tag;  /* "loss", "global_step/sec" */
	float value;
};

enum dt_events_style {
	DT_EVENTS_TF2, /* tensor + scalars-plugin metadata (what tf.summary.scalar writes) */
	DT_EVENTS_TF1, /* simple_value (older readers; TensorBoard still accepts it) */
};

/* Appends the serialized Event with file_version "brain.Event:2". */
void dt_events_encode_file_version(struct dt_pb *b, double wall_time);
/* Appends the serialized Event with one Summary holding `n` scalars at `step`. */
void dt_events_encode_scalars(struct dt_pb *b, double wall_time, int64_t step, const struct dt_scalar *v, size_t n,
			      enum dt_events_style style);
/* Appends the serialized Event with one Summary value `tag` of a plugin:
 * metadata { plugin_data { 1 plugin_name, 2 content } } and the tensor
 * tf.make_tensor_proto(0.0) gives (dtype DT_FLOAT, rank 0, float_val
 * [0.0]), as TensorBoard's hparams summaries carry (summary.py). */
void dt_events_encode_plugin(struct dt_pb *b, double wall_time, int64_t step, const char *tag, const char *plugin,
			     const void *content, size_t n);
/* Appends the TFRecord framing of `data` (layout items 1): 16 + n bytes. */
void dt_events_frame(struct dt_pb *b, const void *data, size_t n);

/* A writer of one event file (opaque). */
struct dt_events;

/* Creates `dir` (and its parents) if needed, creates a new event file in it
 * and writes the file_version record. `*out` is owned by the caller
 * (dt_events_free). DT_IO naming the path on failure. */
enum dt_status dt_events_open(const char *dir, struct dt_events **out, struct dt_err *err) DT_MUST_CHECK;
/* Writes one record: the `n` scalars at `step`, stamped with the wall clock. */
enum dt_status dt_events_write_scalars(struct dt_events *w, int64_t step, const struct dt_scalar *v, size_t n,
				       struct dt_err *err) DT_MUST_CHECK;
/* Writes one record: a plugin's summary value (dt_events_encode_plugin). */
enum dt_status dt_events_write_plugin(struct dt_events *w, int64_t step, const char *tag, const char *plugin,
				      const void *content, size_t n, struct dt_err *err) DT_MUST_CHECK;
/* The file's path (owned by the writer). */
const char *dt_events_path(const struct dt_events *w);
/* Closes the file; accepts NULL. */
void dt_events_free(struct dt_events *w);

/* Creates `dir` and any missing parents (like mkdir -p); DT_IO naming the
 * component that failed. */
enum dt_status dt_events_make_dirs(const char *dir, struct dt_err *err) DT_MUST_CHECK;

#endif
