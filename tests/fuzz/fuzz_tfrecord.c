/* libFuzzer target for t2t's data files: TFRecord framing (src/data/tfrecord.c,
 * plain, GZIP and ZLIB) and tf.train.Example (src/data/example.c).
 *
 * The input is a whole file. Every record it yields must lie inside the
 * (decompressed) buffer and be parsed as an Example: either it parses, its
 * int64 features re-encode and parse back to the same values, or it fails
 * with DT_DATA and a message. The input is also parsed as one Example on its
 * own. Never a crash, an out-of-bounds read, a leak, or more than the cap
 * allocated for a decompressed file.
 * Run: make build-fuzz/fuzz_tfrecord && build-fuzz/fuzz_tfrecord tests/fuzz/corpus/fuzz_tfrecord */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "data/example.h"
#include "data/tfrecord.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_example(const uint8_t *rec, size_t len)
{
	struct dt_example ex;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_example_parse(rec, len, &ex, &err);
	if (st) {
		DT_ASSERT(st == DT_DATA && err.msg[0] != '\0');
		DT_ASSERT(ex.count == 0 && ex.f == NULL);
		return;
	}
	/* the int64 features (names without NUL, so they survive strlen) round-trip */
	const char *names[8];
	char *owned[8];
	const int64_t *vals[8];
	int64_t counts[8];
	int n = 0;
	for (int i = 0; i < ex.count && n < 8; i++) {
		const struct dt_feature *f = &ex.f[i];
		DT_ASSERT(f->name_len <= len);
		if (f->kind != DT_FEATURE_INT64 || memchr(f->name, 0, f->name_len))
			continue;
		int dup = 0;
		for (int j = 0; j < n; j++)
			dup |= strlen(names[j]) == f->name_len && memcmp(names[j], f->name, f->name_len) == 0;
		if (dup)
			continue;
		owned[n] = dt_xmalloc(f->name_len + 1);
		memcpy(owned[n], f->name, f->name_len);
		owned[n][f->name_len] = '\0';
		names[n] = owned[n];
		vals[n] = f->i64;
		counts[n] = f->count;
		n++;
	}
	size_t out_len;
	uint8_t *out = dt_example_encode_int64(n, names, vals, counts, &out_len);
	struct dt_example back;
	DT_ASSERT(dt_example_parse(out, out_len, &back, &err) == DT_OK);
	DT_ASSERT(back.count == n);
	for (int i = 0; i < n; i++) {
		const struct dt_feature *f = dt_example_find(&back, names[i]);
		DT_ASSERT(f && f->count == counts[i]);
		DT_ASSERT(counts[i] == 0 || memcmp(f->i64, vals[i], (size_t)counts[i] * sizeof(int64_t)) == 0);
		free(owned[i]);
	}
	dt_example_free(&back);
	free(out);
	dt_example_free(&ex);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dt_tfrecord_reader r;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = dt_tfrecord_open_mem(&r, "fuzz", data, size, 1 << 20, &err);
	for (int guard = 0; !st && guard < 100000; guard++) {
		const uint8_t *rec;
		size_t len;
		st = dt_tfrecord_next(&r, &rec, &len, &err);
		if (st || !rec)
			break;
		DT_ASSERT(rec >= r.buf + 12 && rec + len + 4 <= r.buf + r.len);
		check_example(rec, len);
	}
	if (st)
		DT_ASSERT((st == DT_DATA || st == DT_NOMEM) && err.msg[0] != '\0');
	DT_ASSERT(r.len <= (size_t)1 << 20 || r.compression == DT_TFRECORD_NONE);
	dt_tfrecord_close(&r);
	check_example(data, size);
	return 0;
}
