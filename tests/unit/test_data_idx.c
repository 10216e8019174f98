/* Unit tests for src/data/idx: the in-memory parser and the file loader,
 * on valid files (plain and gzipped) and on every kind of bad file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include "dt_test.h"
#include "base/err.h"
#include "data/idx.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* An IDX file under construction. */
struct blob {
	uint8_t *buf;
	size_t len;
};

static void put(struct blob *b, const void *data, size_t n)
{
	b->buf = realloc(b->buf, b->len + n + 1);
	DT_CHECK(b->buf != NULL);
	if (n)
		memcpy(b->buf + b->len, data, n);
	b->len += n;
}

static void put_be32(struct blob *b, uint32_t v)
{
	uint8_t x[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
	put(b, x, 4);
}

/* Header with the given type and dims, then `data_len` bytes of a pattern. */
static struct blob make_idx(uint8_t type, int ndims, const uint32_t *dims, size_t data_len)
{
	struct blob b = { NULL, 0 };
	uint8_t magic[4] = { 0, 0, type, (uint8_t)ndims };
	put(&b, magic, 4);
	for (int i = 0; i < ndims; i++)
		put_be32(&b, dims[i]);
	uint8_t *data = malloc(data_len + 1);
	DT_CHECK(data != NULL);
	for (size_t i = 0; i < data_len; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	put(&b, data, data_len);
	free(data);
	return b;
}

static void write_gz(const char *path, const void *data, size_t len)
{
	gzFile f = gzopen(path, "wb");
	DT_CHECK(f != NULL);
	if (len)
		DT_CHECK_INT_EQ(gzwrite(f, data, (unsigned)len), (long long)len);
	DT_CHECK_INT_EQ(gzclose(f), Z_OK);
}

DT_TEST(data_idx, parse_valid_images_in_memory)
{
	uint32_t dims[3] = { 10, 28, 28 };
	struct blob b = make_idx(DT_IDX_U8, 3, dims, 10 * 28 * 28);
	struct dt_idx idx;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_idx_parse(b.buf, b.len, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), &err);
	DT_CHECK_INT_EQ(idx.type, DT_IDX_U8);
	DT_CHECK_INT_EQ(idx.ndims, 3);
	DT_CHECK_UINT_EQ(idx.dims[0], 10);
	DT_CHECK_UINT_EQ(idx.dims[1], 28);
	DT_CHECK_UINT_EQ(idx.dims[2], 28);
	DT_CHECK_UINT_EQ(idx.count, 7840);
	DT_CHECK_UINT_EQ(idx.data_bytes, 7840);
	DT_CHECK(memcmp(idx.data, b.buf + 16, 7840) == 0);
	dt_idx_release(&idx);
	DT_CHECK(idx.data == NULL);
	dt_idx_release(NULL);
	free(b.buf);
}

DT_TEST(data_idx, every_element_type_has_its_size)
{
	const struct { uint8_t type; size_t size; const char *name; } types[] = {
		{ 0x08, 1, "uint8" }, { 0x09, 1, "int8" }, { 0x0B, 2, "int16" },
		{ 0x0C, 4, "int32" }, { 0x0D, 4, "float32" }, { 0x0E, 8, "float64" },
	};
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		uint32_t dims[2] = { 3, 5 };
		struct blob b = make_idx(types[t].type, 2, dims, 15 * types[t].size);
		struct dt_idx idx;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_OK(dt_idx_parse(b.buf, b.len, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), &err);
		DT_CHECK_UINT_EQ(idx.elem_size, types[t].size);
		DT_CHECK_UINT_EQ(idx.data_bytes, 15 * types[t].size);
		DT_CHECK_STR_EQ(dt_idx_type_name(idx.type), types[t].name);
		dt_idx_release(&idx);
		free(b.buf);
	}
}

DT_TEST(data_idx, zero_examples_is_a_valid_empty_file)
{
	uint32_t dims[3] = { 0, 28, 28 };
	struct blob b = make_idx(DT_IDX_U8, 3, dims, 0);
	struct dt_idx idx;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_idx_parse(b.buf, b.len, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), &err);
	DT_CHECK_UINT_EQ(idx.count, 0);
	dt_idx_release(&idx);
	free(b.buf);
}

DT_TEST(data_idx, loads_plain_and_gzip_files_alike)
{
	uint32_t dims[1] = { 1000 };
	struct blob b = make_idx(DT_IDX_U8, 1, dims, 1000);
	char plain[512], gz[512];
	dt_test_path(plain, sizeof(plain), "labels-idx1-ubyte");
	dt_test_path(gz, sizeof(gz), "labels-idx1-ubyte.gz");
	dt_test_write_file(plain, b.buf, b.len);
	write_gz(gz, b.buf, b.len);

	struct dt_idx a, z;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_idx_load(plain, DT_IDX_DEFAULT_MAX_BYTES, &a, &err), &err);
	DT_CHECK_OK(dt_idx_load(gz, DT_IDX_DEFAULT_MAX_BYTES, &z, &err), &err);
	DT_CHECK_UINT_EQ(a.count, 1000);
	DT_CHECK_UINT_EQ(z.count, 1000);
	DT_CHECK(memcmp(a.data, b.buf + 8, 1000) == 0);
	DT_CHECK(memcmp(z.data, b.buf + 8, 1000) == 0);
	dt_idx_release(&a);
	dt_idx_release(&z);
	free(b.buf);
}

DT_TEST(data_idx, loads_a_file_larger_than_the_first_buffer)
{
	/* 3 MiB of data: the loader's buffer has to grow twice. */
	uint32_t dims[3] = { 4000, 28, 28 };
	size_t n = 4000u * 28 * 28;
	struct blob b = make_idx(DT_IDX_U8, 3, dims, n);
	char gz[512];
	dt_test_path(gz, sizeof(gz), "big-idx3-ubyte.gz");
	write_gz(gz, b.buf, b.len);
	struct dt_idx idx;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_idx_load(gz, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), &err);
	DT_CHECK_UINT_EQ(idx.data_bytes, n);
	DT_CHECK(memcmp(idx.data, b.buf + 16, n) == 0);
	dt_idx_release(&idx);
	free(b.buf);
}

/* One bad file: its bytes and a phrase its error must contain. */
struct bad_case {
	const char *name;
	struct blob bytes;
	const char *wanted[2];
};

/* Every bad case is rejected with DT_DATA by the parser, and by the loader
 * both as a plain and as a gzipped file, with the file named. */
static void check_rejected(const struct bad_case *c)
{
	struct dt_idx idx;
	struct dt_err err = DT_ERR_INIT;
	int st = dt_idx_parse(c->bytes.buf, c->bytes.len, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err);
	if (st != DT_DATA)
		dt_test_fail(__FILE__, __LINE__, "case '%s': parse returned %d, wanted DT_DATA: %s", c->name, st,
			     err.msg);
	DT_CHECK(idx.data == NULL);
	for (int i = 0; i < 2 && c->wanted[i]; i++)
		DT_CHECK_CONTAINS(err.msg, c->wanted[i]);

	for (int gz = 0; gz < 2; gz++) {
		char path[512], file[128];
		snprintf(file, sizeof(file), "%s%s", c->name, gz ? ".gz" : "");
		dt_test_path(path, sizeof(path), file);
		if (gz)
			write_gz(path, c->bytes.buf, c->bytes.len);
		else
			dt_test_write_file(path, c->bytes.buf, c->bytes.len);
		dt_err_clear(&err);
		st = dt_idx_load(path, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err);
		if (st != DT_DATA)
			dt_test_fail(__FILE__, __LINE__, "case '%s': load returned %d, wanted DT_DATA: %s", file, st,
				     err.msg);
		DT_CHECK(idx.data == NULL);
		char quoted[600];
		snprintf(quoted, sizeof(quoted), "cannot load IDX file '%s': ", path);
		DT_CHECK_CONTAINS(err.msg, quoted);
		for (int i = 0; i < 2 && c->wanted[i]; i++)
			DT_CHECK_CONTAINS(err.msg, c->wanted[i]);
	}
}

DT_TEST(data_idx, rejects_bad_files_with_a_clear_message)
{
	uint32_t img[3] = { 10, 28, 28 }, huge[3] = { 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu };
	uint32_t nine[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	struct bad_case cases[] = {
		{ "empty", { NULL, 0 }, { "file is empty", NULL } },
		{ "short", { NULL, 0 }, { "file too short", "found 3 bytes" } },
		{ "wrong-magic", { NULL, 0 }, { "bad magic 0x01020803", NULL } },
		{ "garbage", { NULL, 0 }, { "bad magic 0x68656c6c", NULL } },
		{ "type-0a", make_idx(0x0A, 3, img, 7840), { "unsupported element type 0x0a", NULL } },
		{ "type-ff", make_idx(0xFF, 3, img, 7840), { "unsupported element type 0xff", NULL } },
		{ "zero-dims", make_idx(DT_IDX_U8, 0, NULL, 100), { "unsupported number of dimensions 0", NULL } },
		{ "nine-dims", make_idx(DT_IDX_U8, 9, nine, 1), { "unsupported number of dimensions 9", NULL } },
		{ "header-cut", { NULL, 0 }, { "header truncated", "16-byte header, found 10 bytes" } },
		{ "truncated", make_idx(DT_IDX_U8, 3, img, 1000),
		  { "truncated data: 10x28x28 uint8 needs 7840 bytes", "found 1000" } },
		{ "trailing", make_idx(DT_IDX_U8, 3, img, 7845),
		  { "trailing garbage: 10x28x28 uint8 needs 7840 bytes", "found 7845 (5 extra)" } },
		{ "huge-dims", make_idx(DT_IDX_U8, 3, huge, 16), { "data too large", "4294967295x4294967295x4294967295" } },
	};
	/* The ones make_idx cannot express. */
	put(&cases[0].bytes, "", 0);
	put(&cases[1].bytes, "\0\0\x08", 3);
	put(&cases[2].bytes, "\x01\x02\x08\x03\0\0\0\x01\0\0\0\x01\0\0\0\x01\x7f", 17);
	put(&cases[3].bytes, "hello, this is not an IDX file and not gzip either\n", 51);
	struct blob cut = make_idx(DT_IDX_U8, 3, img, 0);
	put(&cases[8].bytes, cut.buf, 10);
	free(cut.buf);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		check_rejected(&cases[i]);
		free(cases[i].bytes.buf);
	}
}

DT_TEST(data_idx, cap_bounds_the_data_size)
{
	uint32_t dims[1] = { 100 };
	struct blob b = make_idx(DT_IDX_I32, 1, dims, 400);
	struct dt_idx idx;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_idx_parse(b.buf, b.len, 399, &idx, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "data too large: 100 int32 needs more than the cap of 399 bytes");
	DT_CHECK_OK(dt_idx_parse(b.buf, b.len, 400, &idx, &err), &err);
	dt_idx_release(&idx);
	free(b.buf);
}

DT_TEST(data_idx, a_header_that_lies_costs_no_giant_allocation)
{
	/* The header claims a gigabyte (under the default cap); the file has 8
	 * bytes of data. The loader must not allocate the gigabyte first: with
	 * the address space limited to 256 MiB more than now, it would fail
	 * with DT_NOMEM instead of reporting the truncation. */
	uint32_t dims[1] = { 1u << 30 };
	struct blob b = make_idx(DT_IDX_U8, 1, dims, 8);
	char path[512];
	dt_test_path(path, sizeof(path), "liar-idx1-ubyte");
	dt_test_write_file(path, b.buf, b.len);
	free(b.buf);
#ifndef UNDER_ASAN /* ASan reserves terabytes of address space; the limit would break it */
	FILE *f = fopen("/proc/self/statm", "r");
	DT_CHECK(f != NULL);
	unsigned long pages = 0;
	DT_CHECK_INT_EQ(fscanf(f, "%lu", &pages), 1);
	fclose(f);
	rlim_t limit = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
	struct rlimit lim = { limit, limit };
	DT_CHECK_INT_EQ(setrlimit(RLIMIT_AS, &lim), 0);
#endif
	struct dt_idx idx;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_idx_load(path, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "truncated data: 1073741824 uint8 needs 1073741824 bytes after the 8-byte header, found 8");
	DT_CHECK(idx.data == NULL);
}

DT_TEST(data_idx, cut_or_corrupt_gzip_stream_is_a_data_error)
{
	uint32_t dims[3] = { 50, 28, 28 };
	struct blob b = make_idx(DT_IDX_U8, 3, dims, 50 * 784);
	char path[512];
	dt_test_path(path, sizeof(path), "t10k-images-idx3-ubyte.gz");
	write_gz(path, b.buf, b.len);
	FILE *f = fopen(path, "rb");
	DT_CHECK(f != NULL);
	uint8_t gz[65536];
	size_t n = fread(gz, 1, sizeof(gz), f);
	fclose(f);
	DT_CHECK(n > 100 && n < sizeof(gz));

	/* Cut in the middle of the stream. */
	dt_test_write_file(path, gz, n / 2);
	struct dt_idx idx;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_idx_load(path, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, path);
	DT_CHECK_CONTAINS(err.msg, "truncated data: 50x28x28 uint8 needs 39200 bytes");
	DT_CHECK_CONTAINS(err.msg, "gzip stream cut short");

	/* Cut just before the 8-byte trailer: all data, no checksum. */
	dt_test_write_file(path, gz, n - 8);
	dt_err_clear(&err);
	DT_CHECK_INT_EQ(dt_idx_load(path, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "gzip stream cut short after the data");

	/* A flipped byte in the checksum trailer. */
	gz[n - 6] ^= 0x55;
	dt_test_write_file(path, gz, n);
	dt_err_clear(&err);
	DT_CHECK_INT_EQ(dt_idx_load(path, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, path);
	DT_CHECK_CONTAINS(err.msg, "corrupt gzip stream");
	free(b.buf);
}

DT_TEST(data_idx, missing_file_is_an_io_error_naming_it)
{
	char path[512];
	dt_test_path(path, sizeof(path), "no-such-file.gz");
	struct dt_idx idx;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_idx_load(path, DT_IDX_DEFAULT_MAX_BYTES, &idx, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot open IDX file '");
	DT_CHECK_CONTAINS(err.msg, path);
	DT_CHECK_CONTAINS(err.msg, "No such file or directory");
	DT_CHECK(idx.data == NULL);
}
