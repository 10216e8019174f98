/*
 * example.h — tf.train.Example, the records of t2t's data files: a minimal
 * protobuf decoder and encoder for the four messages t2t's text problems use.
 *
 * The messages (tensorflow/core/example/{example,feature}.proto):
 *
 *   message Example   { Features features = 1; }
 *   message Features  { map<string, Feature> feature = 1; }
 *   message Feature   { oneof kind { BytesList bytes_list = 1;
 *                                    FloatList float_list = 2;
 *                                    Int64List int64_list = 3; } }
 *   message BytesList { repeated bytes value = 1; }
 *   message FloatList { repeated float value = 1 [packed = true]; }
 *   message Int64List { repeated int64 value = 1 [packed = true]; }
 *
 * Byte layout (protobuf's wire format, as this decoder reads it):
 *
 *   1. a message is fields back to back; a field is a key varint
 *      (field_number << 3 | wire_type) and a value;
 *   2. wire type 0: a varint (7 bits a byte, low group first, high bit set
 *      on every byte but the last, at most 10 bytes); int64 is the varint's
 *      64 bits as two's complement (negative numbers take 10 bytes);
 *   3. wire type 1: 8 bytes little-endian; wire type 5: 4 bytes;
 *   4. wire type 2: a varint length and that many bytes (strings, bytes,
 *      embedded messages, packed repeated scalars);
 *   5. a map entry is an embedded message { key = 1; value = 2; }; a missing
 *      key is "", a missing value an empty Feature, a value given twice in
 *      one entry the last; a key seen twice keeps the last entry
 *      (protobuf's map semantics);
 *   6. a repeated scalar may come packed (one wire-type-2 field holding the
 *      values back to back) or unpacked (one field per value), or both
 *      mixed; either way the values append in order;
 *   7. an embedded message field seen twice merges (Example.features twice:
 *      both maps' entries); a Feature whose oneof changes kind keeps the last
 *      kind only; unknown fields of any valid wire type are skipped; wire
 *      types 3 and 4 (groups), 6 and 7, field number 0 and a length past the
 *      end are errors.
 *
 * The encoder writes what TensorFlow's serializer writes for int64 lists:
 * packed values, map entries in the order given, key then value.
 */
#ifndef DT_DATA_EXAMPLE_H
#define DT_DATA_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum dt_feature_kind { DT_FEATURE_NONE, DT_FEATURE_BYTES, DT_FEATURE_FLOAT, DT_FEATURE_INT64 };

/* One feature of a parsed Example. Its name and bytes values point into
 * the record that was parsed (borrowed; valid while the record is). */
struct dt_feature {
	const char *name;            /* not NUL-terminated: name_len bytes */
	size_t name_len;
	enum dt_feature_kind kind;
	int64_t count;               /* values of the kind */
	int64_t *i64;                /* (count) when DT_FEATURE_INT64, owned */
	float *f32;                  /* (count) when DT_FEATURE_FLOAT, owned */
	const uint8_t **bytes;       /* (count) when DT_FEATURE_BYTES: each value's first byte, borrowed
				      * from the record (the array is owned) */
	size_t *bytes_len;           /* (count) when DT_FEATURE_BYTES: each value's length, owned */
};

struct dt_example {
	int count;                   /* features, each name once */
	struct dt_feature *f;        /* (count), owned */
	int cap;
};

/* Parses one serialized Example. On failure (DT_DATA) the message says
 * what and at which byte; `ex` is left empty. Release with _free. */
enum dt_status dt_example_parse(const uint8_t *data, size_t len, struct dt_example *ex,
				struct dt_err *err) DT_MUST_CHECK;
void dt_example_free(struct dt_example *ex);
/* The feature named `name`, or NULL. */
const struct dt_feature *dt_example_find(const struct dt_example *ex, const char *name);

/* Serializes an Example of int64 features: names[i] with counts[i] values
 * vals[i]. Returns a heap buffer (caller frees) of *len bytes. */
uint8_t *dt_example_encode_int64(int n, const char *const *names, const int64_t *const *vals,
				 const int64_t *counts, size_t *len);

#endif
