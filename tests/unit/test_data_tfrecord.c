/* Unit tests for t2t's data files: TFRecord framing (data/tfrecord.h) plain,
 * GZIP and ZLIB, every corruption named by file and record; tf.train.Example
 * (data/example.h) packed, unpacked and mixed, unknown fields, map
 * semantics, malformed bytes; a text problem's split written as shards and
 * read back (data/text.h), and sharded by file then by record
 * (train/input_text.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_test.h"
#include "base/atomic_file.h"
#include "base/crc32c.h"
#include "data/example.h"
#include "data/text.h"
#include "data/tfrecord.h"
#include "nn/hparams.h"
#include "train/input_text.h"

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

DT_TEST(data_tfrecord, framing_matches_tensorboards_golden_crc)
{
	/* TensorBoard's tf_record.rs: the Event 1a 11 "CRC test, one two" has data CRC 0x5794D08A */
	uint8_t payload[19] = { 0x1a, 0x11 };
	memcpy(payload + 2, "CRC test, one two", 17);
	struct dt_tfrecord_writer w;
	dt_tfrecord_writer_init(&w, DT_TFRECORD_NONE);
	dt_tfrecord_write(&w, payload, sizeof(payload));
	DT_CHECK_INT_EQ((int)w.len, 19 + 16);
	DT_CHECK_INT_EQ(w.buf[0], 19);
	for (int i = 1; i < 8; i++)
		DT_CHECK_INT_EQ(w.buf[i], 0);
	DT_CHECK_UINT_EQ(get32(w.buf + 8), dt_crc32c_mask(dt_crc32c(w.buf, 8)));
	DT_CHECK_UINT_EQ(get32(w.buf + 12 + 19), 0x5794D08Au);
	dt_tfrecord_writer_free(&w);
}

/* Records of lengths 0, 1, 2, ... 299 of bytes i * k, in the given compression; returns the file bytes. */
static uint8_t *make_file(enum dt_tfrecord_compression c, int records, size_t *len)
{
	struct dt_tfrecord_writer w;
	dt_tfrecord_writer_init(&w, c);
	uint8_t rec[512];
	for (int k = 0; k < records; k++) {
		for (int i = 0; i < k; i++)
			rec[i] = (uint8_t)(i * k);
		dt_tfrecord_write(&w, rec, (size_t)k);
	}
	uint8_t *bytes;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_tfrecord_writer_bytes(&w, &bytes, len, &err), &err);
	dt_tfrecord_writer_free(&w);
	return bytes;
}

static void check_reads_back(const uint8_t *file, size_t len, int records, enum dt_tfrecord_compression want)
{
	struct dt_tfrecord_reader r;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_tfrecord_open_mem(&r, "mem", file, len, 1 << 24, &err), &err);
	DT_CHECK_INT_EQ(r.compression, want);
	for (int k = 0; k <= records; k++) {
		const uint8_t *d;
		size_t n;
		DT_CHECK_OK(dt_tfrecord_next(&r, &d, &n, &err), &err);
		if (k == records) {
			DT_CHECK(d == NULL);
			break;
		}
		DT_CHECK(d != NULL);
		DT_CHECK_INT_EQ((int)n, k);
		for (int i = 0; i < k; i++)
			DT_CHECK_INT_EQ(d[i], (uint8_t)(i * k));
	}
	dt_tfrecord_close(&r);
}

DT_TEST(data_tfrecord, plain_gzip_and_zlib_files_read_back)
{
	const enum dt_tfrecord_compression kinds[3] = { DT_TFRECORD_NONE, DT_TFRECORD_GZIP, DT_TFRECORD_ZLIB };
	for (int c = 0; c < 3; c++) {
		size_t len;
		uint8_t *f = make_file(kinds[c], 300, &len);
		check_reads_back(f, len, 300, kinds[c]);
		free(f);
	}
	/* two gzip members back to back read as one stream (TensorFlow's reader does) */
	size_t l1, l2;
	uint8_t *a = make_file(DT_TFRECORD_GZIP, 3, &l1), *b = make_file(DT_TFRECORD_GZIP, 3, &l2);
	uint8_t *ab = malloc(l1 + l2);
	memcpy(ab, a, l1);
	memcpy(ab + l1, b, l2);
	struct dt_tfrecord_reader r;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_tfrecord_open_mem(&r, "mem", ab, l1 + l2, 1 << 20, &err), &err);
	int n = 0;
	for (const uint8_t *d = (const uint8_t *)"";;) {
		size_t dl;
		DT_CHECK_OK(dt_tfrecord_next(&r, &d, &dl, &err), &err);
		if (!d)
			break;
		n++;
	}
	DT_CHECK_INT_EQ(n, 6);
	dt_tfrecord_close(&r);
	free(a);
	free(b);
	free(ab);
	/* an empty file has no records */
	DT_CHECK_OK(dt_tfrecord_open_mem(&r, "mem", "", 0, 1 << 20, &err), &err);
	const uint8_t *d;
	size_t dl;
	DT_CHECK_OK(dt_tfrecord_next(&r, &d, &dl, &err), &err);
	DT_CHECK(d == NULL);
	dt_tfrecord_close(&r);
}

/* Reads the whole file and returns the status; the message in err. */
static enum dt_status read_all(const char *name, const uint8_t *f, size_t len, size_t cap, struct dt_err *err)
{
	struct dt_tfrecord_reader r;
	enum dt_status st = dt_tfrecord_open_mem(&r, name, f, len, cap, err);
	for (int guard = 0; !st && guard < 100000; guard++) {
		const uint8_t *d;
		size_t n;
		if ((st = dt_tfrecord_next(&r, &d, &n, err)) || !d)
			break;
	}
	dt_tfrecord_close(&r);
	return st;
}

DT_TEST(data_tfrecord, every_corruption_is_named_by_file_and_record)
{
	size_t len;
	uint8_t *f = make_file(DT_TFRECORD_NONE, 5, &len);
	/* record offsets: record k starts at sum_{j<k} (16 + j) */
	const size_t rec3 = 16 * 3 + 0 + 1 + 2;
	struct {
		size_t at;       /* byte to flip, or (size_t)-1: cut the file at `cut` */
		size_t cut;
		const char *want;
	} cases[] = {
		{ rec3 + 2, 0, "'shard-7' record 3: corrupted record at byte 51 (the length's CRC" },
		{ rec3 + 9, 0, "'shard-7' record 3: corrupted record at byte 51 (the length's CRC" },
		{ rec3 + 13, 0, "'shard-7' record 3: corrupted record at byte 51 (the data's CRC" },
		{ rec3 + 12 + 3 + 1, 0, "'shard-7' record 3: corrupted record at byte 51 (the data's CRC" },
		{ (size_t)-1, rec3 + 5, "'shard-7' record 3: truncated record at byte 51 (5 bytes left" },
		{ (size_t)-1, rec3 + 14, "'shard-7' record 3: truncated record at byte 51 (3 data bytes + 4" },
		{ (size_t)-1, len - 1, "'shard-7' record 4: truncated record" },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint8_t *g = malloc(len);
		memcpy(g, f, len);
		size_t n = len;
		if (cases[c].at != (size_t)-1)
			g[cases[c].at] ^= 0x10;
		else
			n = cases[c].cut;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_INT_EQ(read_all("shard-7", g, n, 1 << 20, &err), DT_DATA);
		DT_CHECK_CONTAINS(err.msg, cases[c].want);
		free(g);
	}
	free(f);
	/* compressed: a flipped byte inside the deflate data, a stream cut short, garbage after it, a cap */
	const enum dt_tfrecord_compression kinds[2] = { DT_TFRECORD_GZIP, DT_TFRECORD_ZLIB };
	for (int k = 0; k < 2; k++) {
		f = make_file(kinds[k], 200, &len);
		const char *name = k ? "zlib" : "gzip";
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_INT_EQ(read_all("z", f, len - 3, 1 << 24, &err), DT_DATA);
		DT_CHECK_CONTAINS(err.msg, "'z'");
		DT_CHECK_CONTAINS(err.msg, name);
		err = (struct dt_err)DT_ERR_INIT;
		DT_CHECK_INT_EQ(read_all("z", f, len, 1000, &err), DT_DATA);
		DT_CHECK_CONTAINS(err.msg, "decompresses to more than 1000 bytes");
		uint8_t *g = malloc(len + 4);
		memcpy(g, f, len);
		memcpy(g + len, "junk", 4);
		err = (struct dt_err)DT_ERR_INIT;
		DT_CHECK_INT_EQ(read_all("z", g, len + 4, 1 << 24, &err), DT_DATA);
		DT_CHECK_CONTAINS(err.msg, "4 bytes of garbage after the");
		memcpy(g, f, len);
		g[len / 2] ^= 0xff; /* the deflate data or its checksum catch it, or a record CRC does */
		err = (struct dt_err)DT_ERR_INIT;
		DT_CHECK_INT_EQ(read_all("z", g, len, 1 << 24, &err), DT_DATA);
		DT_CHECK_CONTAINS(err.msg, "'z'");
		free(g);
		free(f);
	}
}

/* ---- Example --------------------------------------------------------------------- */

DT_TEST(data_tfrecord, example_round_trips_int64_lists)
{
	const int64_t a[] = { 5, 1, -1, INT64_MAX, INT64_MIN, 0, 300 };
	const int64_t b[] = { 2, 3, 1 };
	const char *names[3] = { "inputs", "targets", "empty" };
	const int64_t *vals[3] = { a, b, b };
	const int64_t counts[3] = { 7, 3, 0 };
	size_t len;
	uint8_t *buf = dt_example_encode_int64(3, names, vals, counts, &len);
	struct dt_example ex;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_example_parse(buf, len, &ex, &err), &err);
	DT_CHECK_INT_EQ(ex.count, 3);
	const struct dt_feature *fi = dt_example_find(&ex, "inputs"), *ft = dt_example_find(&ex, "targets");
	DT_CHECK(fi && ft && dt_example_find(&ex, "empty") && !dt_example_find(&ex, "input"));
	DT_CHECK_INT_EQ(fi->kind, DT_FEATURE_INT64);
	DT_CHECK_INT_EQ((int)fi->count, 7);
	for (int i = 0; i < 7; i++)
		DT_CHECK(fi->i64[i] == a[i]);
	DT_CHECK_INT_EQ((int)ft->count, 3);
	DT_CHECK_INT_EQ((int)dt_example_find(&ex, "empty")->count, 0);
	dt_example_free(&ex);
	/* the exact bytes TensorFlow writes for {"t": [1, 2]}: packed */
	const char *n1[1] = { "t" };
	const int64_t v1[2] = { 1, 2 }, c1[1] = { 2 };
	const int64_t *p1[1] = { v1 };
	free(buf);
	buf = dt_example_encode_int64(1, n1, p1, c1, &len);
	const uint8_t want[] = { 0x0a, 0x0d, 0x0a, 0x0b, 0x0a, 0x01, 't', 0x12, 0x06, 0x1a, 0x04, 0x0a, 0x02, 0x01, 0x02 };
	DT_CHECK_INT_EQ((int)len, (int)sizeof(want));
	DT_CHECK(memcmp(buf, want, sizeof(want)) == 0);
	free(buf);
}

DT_TEST(data_tfrecord, example_accepts_unpacked_mixed_floats_bytes_and_unknown_fields)
{
	/* Example{ unknown 9: varint 7; features{ feature{"t": int64_list{ 1 (unpacked), [2, 3] packed, 4 unpacked}}}
	 * feature{"f": float_list{1.0 unpacked, [2.0] packed}} feature{"b": bytes_list{"xy", ""}}
	 * feature{"t": ...} again replaced by the last: int64_list {9} } */
	const uint8_t msg[] = {
		0x48, 0x07,                                            /* field 9 varint 7 (unknown) */
		0x0a, 0x48,                                            /* features, 72 bytes */
		0x0a, 0x14, 0x0a, 0x01, 'u', 0x12, 0x0f,               /* entry "u" (22 bytes) */
		0x1a, 0x0d, 0x08, 0x01, 0x0a, 0x02, 0x02, 0x03, 0x08, 0x04, 0x15, 0, 0, 0, 0, /* int64: 1,[2,3],4; fixed32 unknown */
		0x0a, 0x12, 0x0a, 0x01, 'f', 0x12, 0x0d,               /* entry "f" (20 bytes) */
		0x12, 0x0b, 0x0d, 0x00, 0x00, 0x80, 0x3f, 0x0a, 0x04, 0x00, 0x00, 0x00, 0x40, /* float: 1.0, [2.0] */
		0x0a, 0x0f, 0x0a, 0x01, 'b', 0x12, 0x0a,               /* entry "b" (17 bytes) */
		0x0a, 0x08, 0x0a, 0x02, 'x', 'y', 0x0a, 0x00, 0x18, 0x05, /* bytes: "xy", ""; unknown varint field 3 */
		0x0a, 0x0b, 0x0a, 0x01, 'u', 0x12, 0x06, 0x1a, 0x04, 0x0a, 0x02, 0x09, 0x01, /* "u" again: [9, 1] */
	};
	_Static_assert(sizeof(msg) == 4 + 72, "the lengths above add up");
	struct dt_example ex;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_example_parse(msg, sizeof(msg), &ex, &err), &err);
	DT_CHECK_INT_EQ(ex.count, 3);
	const struct dt_feature *u = dt_example_find(&ex, "u"), *f = dt_example_find(&ex, "f"),
				*b = dt_example_find(&ex, "b");
	DT_CHECK(u && f && b);
	DT_CHECK_INT_EQ((int)u->count, 2); /* the last entry of a key wins */
	DT_CHECK(u->i64[0] == 9 && u->i64[1] == 1);
	DT_CHECK_INT_EQ(f->kind, DT_FEATURE_FLOAT);
	DT_CHECK_INT_EQ((int)f->count, 2);
	DT_CHECK(f->f32[0] == 1.0f && f->f32[1] == 2.0f);
	DT_CHECK_INT_EQ(b->kind, DT_FEATURE_BYTES);
	DT_CHECK_INT_EQ((int)b->count, 2);
	/* bytes values point into the record: "xy" and "" */
	DT_CHECK(b->bytes && b->bytes_len);
	DT_CHECK_INT_EQ((int)b->bytes_len[0], 2);
	/* past entry "u" and "f", then entry "b"'s header, its list's and its value's */
	DT_CHECK(b->bytes[0] == msg + 4 + 22 + 20 + 7 + 4 && memcmp(b->bytes[0], "xy", 2) == 0);
	DT_CHECK_INT_EQ((int)b->bytes_len[1], 0);
	dt_example_free(&ex);
	/* the first "u" alone, before it was replaced: 1, 2, 3, 4 */
	uint8_t first[2 + 22];
	memcpy(first + 2, msg + 4, 22);
	first[0] = 0x0a;
	first[1] = 22;
	DT_CHECK_OK(dt_example_parse(first, sizeof(first), &ex, &err), &err);
	u = dt_example_find(&ex, "u");
	DT_CHECK(u && u->count == 4 && u->i64[0] == 1 && u->i64[1] == 2 && u->i64[2] == 3 && u->i64[3] == 4);
	dt_example_free(&ex);
}

DT_TEST(data_tfrecord, malformed_examples_are_refused_with_the_byte)
{
	struct {
		uint8_t b[16];
		size_t n;
		const char *want;
	} cases[] = {
		{ { 0x0a, 0x05, 0x0a }, 3, "a length past the end" },
		{ { 0x10, 0x80 }, 2, "a varint cut short" },
		{ { 0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02 }, 11, "longer than 64 bits" },
		{ { 0x13 }, 1, "a group" },
		{ { 0x16 }, 1, "wire type 6 or 7" },
		{ { 0x00, 0x00 }, 2, "field number 0" },
		{ { 0x08, 0x01 }, 2, "Example.features that is not a message" },
		{ { 0x0a, 0x02, 0x08, 0x01 }, 4, "a Features entry that is not a message" },
		{ { 0x0a, 0x06, 0x0a, 0x04, 0x12, 0x02, 0x08, 0x01 }, 8, "a Feature list that is not a message" },
		{ { 0x0a, 0x08, 0x0a, 0x06, 0x12, 0x04, 0x1a, 0x02, 0x0d, 0x00 }, 10, "wrong wire type" },
		{ { 0x0a, 0x08, 0x0a, 0x06, 0x12, 0x04, 0x12, 0x02, 0x0d, 0x00 }, 10, "a float cut short" },
		{ { 0x0a, 0x05, 0x0a, 0x03, 0x12, 0x01, 0x00 }, 7, "field number 0" },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct dt_example ex;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_INT_EQ(dt_example_parse(cases[c].b, cases[c].n, &ex, &err), DT_DATA);
		DT_CHECK_CONTAINS(err.msg, "not a tf.train.Example");
		DT_CHECK_CONTAINS(err.msg, cases[c].want);
		DT_CHECK(ex.count == 0 && ex.f == NULL);
	}
}

/* ---- a text problem's files --------------------------------------------------------- */

static void load(const char *problem, const char *dir, enum dt_split split, struct dt_dataset *d)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load(problem, dir, NULL, split, 5, d, &err), &err);
}

DT_TEST(data_tfrecord, datagen_files_read_back_as_the_generated_split)
{
	const char *dir = dt_test_tmpdir();
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_text_datagen("algorithmic_sort_problem", dir, NULL, 3, 5, &err), &err);
	char path[4096];
	snprintf(path, sizeof(path), "%s/algorithmic_sort_problem-train-00002-of-00003", dir);
	struct stat sb;
	DT_CHECK(stat(path, &sb) == 0);
	snprintf(path, sizeof(path), "%s/algorithmic_sort_problem-dev-00000-of-00001", dir);
	DT_CHECK(stat(path, &sb) == 0);
	const enum dt_split splits[3] = { DT_SPLIT_TRAIN, DT_SPLIT_TEST, DT_SPLIT_DEV };
	for (int s = 0; s < 3; s++) {
		struct dt_dataset gen, files;
		load("algorithmic_sort_problem", NULL, splits[s], &gen);
		load("algorithmic_sort_problem", dir, splits[s], &files);
		const struct dt_text_set *a = gen.text, *b = files.text;
		DT_CHECK_INT_EQ((int)a->count, (int)b->count);
		DT_CHECK_INT_EQ(b->num_files, s == 0 ? 3 : 1);
		DT_CHECK_INT_EQ(a->max_len, b->max_len);
		DT_CHECK_INT_EQ(a->input_vocab, b->input_vocab);
		DT_CHECK(strstr(files.source, "t2t data file") != NULL);
		/* file f holds examples f, f + 3, ... (t2t's round-robin) */
		const int nf = b->num_files;
		for (int64_t j = 0; j < b->count; j++) {
			int f = 0;
			while (j >= b->file_off[f + 1])
				f++;
			const int64_t i = (j - b->file_off[f]) * nf + f;
			DT_CHECK_INT_EQ(dt_text_in_len(a, i), dt_text_in_len(b, j));
			DT_CHECK_INT_EQ(dt_text_tg_len(a, i), dt_text_tg_len(b, j));
			DT_CHECK(memcmp(a->in_tok + a->in_off[i], b->in_tok + b->in_off[j],
					(size_t)dt_text_in_len(a, i) * 4) == 0);
			DT_CHECK(memcmp(a->tg_tok + a->tg_off[i], b->tg_tok + b->tg_off[j],
					(size_t)dt_text_tg_len(a, i) * 4) == 0);
		}
		dt_dataset_release(&gen);
		dt_dataset_release(&files);
	}
}

/* The examples of shard index/count, as a membership vector. */
static void shard_members(const struct dt_text_set *t, int index, int count, uint8_t *member)
{
	struct dt_hparams hp;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_hparams_from_set("transformer_tiny", &hp, &err), &err);
	hp.batch_size = 256;
	struct dt_input *in = dt_input_text_new(t, &hp, 1);
	DT_CHECK_OK(dt_input_start(in, index, count, 0, 0, &err), &err);
	const int64_t n = dt_input_shard_size(in);
	/* every example fits max_length here, so the shard is exactly the members */
	int64_t seen = 0;
	memset(member, 0, (size_t)t->count);
	for (int64_t i = 0; i < t->count; i++) {
		int by_file = t->num_files >= count && count > 1;
		int f = 0;
		while (i >= t->file_off[f + 1])
			f++;
		if ((by_file ? f : i) % count == index) {
			member[i] = 1;
			seen++;
		}
	}
	DT_CHECK_INT_EQ((int)n, (int)seen);
	dt_input_free(in);
}

DT_TEST(data_tfrecord, shards_go_by_file_then_by_record)
{
	const char *dir = dt_test_tmpdir();
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_text_datagen("algorithmic_sort_problem", dir, NULL, 3, 5, &err), &err);
	struct dt_dataset d;
	load("algorithmic_sort_problem", dir, DT_SPLIT_TRAIN, &d);
	const struct dt_text_set *t = d.text;
	uint8_t *m = malloc((size_t)t->count);
	/* 3 files, 2 workers: files {0, 2} and {1}; 3 workers: a file each; 4 workers: by record */
	for (int count = 2; count <= 4; count++)
		for (int index = 0; index < count; index++)
			shard_members(t, index, count, m);
	/* the file sizes decide the shard sizes: 2 workers get 2 files and 1 */
	const int64_t f0 = t->file_off[1], f1 = t->file_off[2] - t->file_off[1], f2 = t->count - t->file_off[2];
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("transformer_tiny", &hp, &err), &err);
	struct dt_input *in = dt_input_text_new(t, &hp, 1);
	DT_CHECK_OK(dt_input_start(in, 0, 2, 0, 0, &err), &err);
	DT_CHECK_INT_EQ((int)dt_input_shard_size(in), (int)(f0 + f2));
	DT_CHECK_OK(dt_input_start(in, 1, 2, 0, 0, &err), &err);
	DT_CHECK_INT_EQ((int)dt_input_shard_size(in), (int)f1);
	dt_input_free(in);
	free(m);
	dt_dataset_release(&d);
}

DT_TEST(data_tfrecord, a_corrupt_shard_or_bad_example_names_file_and_record)
{
	const char *dir = dt_test_tmpdir();
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_text_datagen("algorithmic_sort_problem", dir, NULL, 2, 5, &err), &err);
	char path[4096];
	snprintf(path, sizeof(path), "%s/algorithmic_sort_problem-train-00001-of-00002", dir);
	char *bytes;
	size_t len;
	DT_CHECK_OK(dt_read_file(path, 1 << 26, &bytes, &len, &err), &err);
	/* the tenth record's data: walk nine records */
	size_t pos = 0;
	for (int k = 0; k < 9; k++)
		pos += 16 + (size_t)(uint8_t)bytes[pos];
	bytes[pos + 14] ^= 1;
	DT_CHECK_OK(dt_write_file_atomic(path, bytes, len, &err), &err);
	struct dt_dataset d;
	DT_CHECK_INT_EQ(dt_problem_load("algorithmic_sort_problem", dir, NULL, DT_SPLIT_TRAIN, 5, &d, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "algorithmic_sort_problem-train-00001-of-00002' record 9: corrupted record");
	free(bytes);
	/* an Example with an id outside the vocabulary, one without targets, one with floats */
	const char *names[2] = { "inputs", "targets" };
	const int64_t good[2] = { 3, 1 }, big[2] = { 22, 1 };
	const int64_t *vals[2] = { good, big }, counts[2] = { 2, 2 };
	struct dt_tfrecord_writer w;
	dt_tfrecord_writer_init(&w, DT_TFRECORD_GZIP);
	size_t n;
	uint8_t *rec = dt_example_encode_int64(2, names, (const int64_t *[]){ good, good }, counts, &n);
	dt_tfrecord_write(&w, rec, n);
	free(rec);
	rec = dt_example_encode_int64(2, names, vals, counts, &n);
	dt_tfrecord_write(&w, rec, n);
	free(rec);
	snprintf(path, sizeof(path), "%s/algorithmic_sort_problem-dev-00000-of-00001", dir);
	DT_CHECK_OK(dt_tfrecord_writer_commit(&w, path, &err), &err);
	err = (struct dt_err)DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("algorithmic_sort_problem", dir, NULL, DT_SPLIT_DEV, 5, &d, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "-dev-00000-of-00001' record 1: feature 'targets' id 22 (position 0) is not in the "
			  "vocabulary of 22 ids");
	dt_tfrecord_writer_init(&w, DT_TFRECORD_ZLIB);
	rec = dt_example_encode_int64(1, names, vals, counts, &n);
	dt_tfrecord_write(&w, rec, n);
	free(rec);
	DT_CHECK_OK(dt_tfrecord_writer_commit(&w, path, &err), &err);
	err = (struct dt_err)DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_problem_load("algorithmic_sort_problem", dir, NULL, DT_SPLIT_DEV, 5, &d, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "record 0: the Example has no 'targets' feature");
}
