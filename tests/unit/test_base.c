/* Unit tests for src/base: status list, errors, CRC-32C, RNG, options,
 * strings, atomic files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "dt_test.h"
#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/crc32c.h"
#include "base/err.h"
#include "base/options.h"
#include "base/rng.h"
#include "base/strutil.h"

DT_TEST(status, names_messages_and_exit_codes_come_from_one_list)
{
	DT_CHECK_STR_EQ(dt_status_name(DT_OK), "OK");
	DT_CHECK_STR_EQ(dt_status_name(DT_CONFIG), "CONFIG");
	DT_CHECK_STR_EQ(dt_status_message(DT_TIMEOUT), "deadline exceeded");
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_OK), 0);
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_USAGE), 2);
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_CONFIG), 2);
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_PEER), 3);
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_TIMEOUT), 3);
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_DATA), 4);
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_CKPT), 4);
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_RUNTIME), 1);
	DT_CHECK_STR_EQ(dt_status_name((enum dt_status)999), "UNKNOWN");
}

DT_TEST(err, set_prefix_and_hint_build_one_message)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_err_set(&err, DT_IO, "cannot open '%s'", "x.idx"), DT_IO);
	DT_CHECK_INT_EQ(dt_err_prefix(&err, "loading problem %s", "mnist"), DT_IO);
	DT_CHECK_STR_EQ(err.msg, "loading problem mnist: cannot open 'x.idx'");
	dt_err_hint(&err, "pass --data_dir");
	DT_CHECK_STR_EQ(err.msg, "loading problem mnist: cannot open 'x.idx'\nhint: pass --data_dir");
	DT_CHECK_INT_EQ(dt_err_set(NULL, DT_PEER, "dropped"), DT_PEER);
}

DT_TEST(err, prefix_truncates_instead_of_overflowing)
{
	struct dt_err err = DT_ERR_INIT;
	char big[3000];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	dt_err_set(&err, DT_IO, "%s", big);
	dt_err_prefix(&err, "%s", big);
	DT_CHECK(strlen(err.msg) < DT_ERR_MSG_MAX);
}

/* 1 if s is well-formed UTF-8 (no cut characters). */
static int valid_utf8(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	while (*u) {
		size_t n = *u < 0x80 ? 1 : (*u & 0xE0) == 0xC0 ? 2 : (*u & 0xF0) == 0xE0 ? 3 : (*u & 0xF8) == 0xF0 ? 4 : 0;
		if (!n)
			return 0;
		for (size_t i = 1; i < n; i++)
			if ((u[i] & 0xC0) != 0x80)
				return 0;
		u += n;
	}
	return 1;
}

DT_TEST(strutil, utf8_cuts_fall_on_character_boundaries)
{
	/* "a" "é" (2 bytes) "€" (3) "😀" (4) "z" */
	const char *s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";
	const size_t want[] = { 0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10, 11 };
	for (size_t n = 0; n <= 11; n++)
		DT_CHECK_INT_EQ(dt_utf8_prefix_len(s, n), want[n]);
	/* Not UTF-8: left alone. */
	DT_CHECK_INT_EQ(dt_utf8_prefix_len("\x80\x80", 2), 2);
	DT_CHECK_INT_EQ(dt_utf8_prefix_len("ab\xff", 3), 3);
	/* dt_fmt at every buffer size: always a prefix, always whole characters. */
	for (size_t cap = 1; cap <= 13; cap++) {
		char buf[16];
		size_t len = dt_fmt(buf, cap, "%s", s);
		DT_CHECK_INT_EQ(len, strlen(buf));
		DT_CHECK(len < cap);
		DT_CHECK(strncmp(buf, s, len) == 0);
		DT_CHECK(valid_utf8(buf));
		DT_CHECK_INT_EQ(len, cap > 11 ? 11 : want[cap - 1]);
	}
}

DT_TEST(strutil, utf8_names_are_well_formed_and_free_of_controls)
{
	const char *s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z/b_c.d-e~";
	DT_CHECK(dt_utf8_name_ok(s, strlen(s)));
	DT_CHECK(dt_utf8_name_ok("", 0));
	static const char *const bad[] = {
		"a\tb",            /* a control character */
		"a\x7f",           /* DEL */
		"\xc2\x85",        /* C1 control U+0085 */
		"\xc0\xaf",        /* overlong '/' */
		"\xe0\x80\xaf",    /* overlong, 3 bytes */
		"\xed\xa0\x80",    /* a surrogate */
		"\xf4\x90\x80\x80", /* past U+10FFFF */
		"\xe2\x82",        /* cut short */
		"\x80",            /* a lone continuation byte */
		"\xff",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (dt_utf8_name_ok(bad[i], strlen(bad[i])))
			dt_test_fail(__FILE__, __LINE__, "bad name %zu accepted", i);
}

/* Issue 21: a non-ASCII host name in an error printed half a character
 * where the message was cut to fit. */
DT_TEST(err, messages_cut_to_fit_never_split_a_character)
{
	char host[2100] = "";
	for (int i = 0; i < 1000; i++)
		strcat(host, "\xc3\xbc"); /* ü */
	for (int shift = 0; shift < 4; shift++) {
		struct dt_err err = DT_ERR_INIT;
		dt_err_set(&err, DT_PEER, "%.*scannot resolve '%s'", shift, "xyz", host);
		DT_CHECK(strlen(err.msg) >= DT_ERR_MSG_MAX - 4);
		DT_CHECK(valid_utf8(err.msg));
		dt_err_set(&err, DT_PEER, "cannot resolve 'h%s'", host + 900 - 2 * shift);
		dt_err_prefix(&err, "%.*sconnecting to '%s'", shift, "xyz", host + 1000);
		DT_CHECK(valid_utf8(err.msg));
		char pad[1100];
		memset(pad, 'a', 1010 + (size_t)shift);
		pad[1010 + shift] = '\0';
		dt_err_set(&err, DT_PEER, "%s", pad);
		dt_err_hint(&err, "check '%s'", host);
		DT_CHECK(valid_utf8(err.msg));
	}
}

DT_TEST(crc32c, published_check_values)
{
	/* RFC 3720 B.4 and the common "123456789" check value. */
	DT_CHECK_UINT_EQ(dt_crc32c("123456789", 9), 0xE3069283u);
	DT_CHECK_UINT_EQ(dt_crc32c_extend_portable(0, "123456789", 9), 0xE3069283u);
	uint8_t zeros[32] = { 0 }, ones[32], inc[32], dec[32];
	memset(ones, 0xff, sizeof(ones));
	for (int i = 0; i < 32; i++) {
		inc[i] = (uint8_t)i;
		dec[i] = (uint8_t)(31 - i);
	}
	DT_CHECK_UINT_EQ(dt_crc32c(zeros, 32), 0x8A9136AAu);
	DT_CHECK_UINT_EQ(dt_crc32c(ones, 32), 0x62A8AB43u);
	DT_CHECK_UINT_EQ(dt_crc32c(inc, 32), 0x46DD794Eu);
	DT_CHECK_UINT_EQ(dt_crc32c(dec, 32), 0x113FDB5Cu);
	DT_CHECK_UINT_EQ(dt_crc32c("", 0), 0);
}

DT_TEST(crc32c, incremental_equals_one_shot_and_hw_equals_table)
{
	uint8_t buf[1000];
	struct dt_rng rng;
	dt_rng_seed(&rng, 7);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)dt_rng_next(&rng);
	uint32_t whole = dt_crc32c(buf, sizeof(buf));
	for (size_t cut = 0; cut <= sizeof(buf); cut += 37) {
		uint32_t c = dt_crc32c_extend(0, buf, cut);
		c = dt_crc32c_extend(c, buf + cut, sizeof(buf) - cut);
		DT_CHECK_UINT_EQ(c, whole);
		DT_CHECK_UINT_EQ(dt_crc32c_extend_portable(0, buf + 1, cut), dt_crc32c(buf + 1, cut));
	}
	/* TFRecord's masked CRC of the CRC of "" is a known constant. */
	DT_CHECK_UINT_EQ(dt_crc32c_mask(0), 0xa282ead8u);
}

DT_TEST(rng, same_seed_same_stream_and_derived_streams_differ)
{
	struct dt_rng a, b, c;
	dt_rng_seed(&a, 42);
	dt_rng_seed(&b, 42);
	for (int i = 0; i < 100; i++)
		DT_CHECK_UINT_EQ(dt_rng_next(&a), dt_rng_next(&b));
	dt_rng_derive(&a, 42, "shuffle", 0);
	dt_rng_derive(&b, 42, "shuffle", 1);
	dt_rng_derive(&c, 42, "dropout", 0);
	uint64_t x = dt_rng_next(&a), y = dt_rng_next(&b), z = dt_rng_next(&c);
	DT_CHECK(x != y && x != z && y != z);
}

DT_TEST(rng, uniform_and_normal_have_the_right_moments)
{
	struct dt_rng r;
	dt_rng_seed(&r, 1);
	double sum = 0, sumsq = 0, nsum = 0, nsumsq = 0;
	const int n = 200000;
	for (int i = 0; i < n; i++) {
		float u = dt_rng_uniform(&r);
		DT_CHECK(u >= 0.0f && u < 1.0f);
		sum += (double)u;
		sumsq += (double)u * (double)u;
		float g = dt_rng_normal(&r);
		nsum += (double)g;
		nsumsq += (double)g * (double)g;
	}
	DT_CHECK_NEAR(sum / n, 0.5, 0.01);
	DT_CHECK_NEAR(sumsq / n - (sum / n) * (sum / n), 1.0 / 12, 0.005);
	DT_CHECK_NEAR(nsum / n, 0.0, 0.01);
	DT_CHECK_NEAR(nsumsq / n, 1.0, 0.02);
}

DT_TEST(rng, bulk_words_are_seeded_uniform_and_chunk_alike)
{
	struct dt_rng r, copy;
	dt_rng_seed(&r, 9);
	copy = r;
	struct dt_rng_bulk a, b;
	dt_rng_bulk_seed(&a, &r);
	dt_rng_next(&copy); /* seeding takes exactly one draw */
	DT_CHECK(memcmp(&r, &copy, sizeof(r)) == 0);
	dt_rng_seed(&copy, 9);
	dt_rng_bulk_seed(&b, &copy);
	enum { N = 200000 };
	uint32_t *x = dt_xmalloc(N * sizeof(uint32_t)), *y = dt_xmalloc(N * sizeof(uint32_t));
	dt_rng_bulk_u32(&a, x, N);
	dt_rng_bulk_u32(&b, y, 512); /* the dropout kernels' chunks: a multiple of 2 * DT_RNG_LANES */
	dt_rng_bulk_u32(&b, y + 512, N - 512);
	DT_CHECK(memcmp(x, y, N * sizeof(uint32_t)) == 0);
	for (int i = 0; i < 2 * DT_RNG_LANES; i++) /* the lanes are different generators */
		for (int j = 0; j < i; j++)
			DT_CHECK(x[i] != x[j]);
	const uint32_t drop = dt_rng_u32_threshold(0.1f);
	double sum = 0;
	int below = 0;
	for (int i = 0; i < N; i++) {
		sum += (double)x[i] / 4294967296.0;
		below += x[i] < drop;
	}
	DT_CHECK_NEAR(sum / N, 0.5, 0.005);
	DT_CHECK_NEAR((double)below / N, 0.1, 0.0035); /* 5 standard deviations */
	DT_CHECK_UINT_EQ(dt_rng_u32_threshold(0.0f), 0);
	DT_CHECK_UINT_EQ(dt_rng_u32_threshold(0.25f), 1073741824u);
	DT_CHECK_UINT_EQ(dt_rng_u32_threshold(0.5f), 2147483648u);
	free(x);
	free(y);
}

DT_TEST(rng, below_is_in_range_and_shuffle_is_a_permutation)
{
	struct dt_rng r;
	dt_rng_seed(&r, 3);
	int counts[7] = { 0 };
	for (int i = 0; i < 70000; i++) {
		uint64_t v = dt_rng_below(&r, 7);
		DT_CHECK(v < 7);
		counts[v]++;
	}
	for (int i = 0; i < 7; i++)
		DT_CHECK_NEAR(counts[i], 10000, 500);
	uint32_t items[100];
	for (uint32_t i = 0; i < 100; i++)
		items[i] = i;
	dt_rng_shuffle_u32(&r, items, 100);
	int seen[100] = { 0 }, moved = 0;
	for (uint32_t i = 0; i < 100; i++) {
		seen[items[i]]++;
		moved += items[i] != i;
	}
	for (int i = 0; i < 100; i++)
		DT_CHECK_INT_EQ(seen[i], 1);
	DT_CHECK(moved > 50);
}

DT_TEST(strutil, nearest_suggests_plausible_typos_only)
{
	const char *names[] = { "train_steps", "model", "problem", "hparams_set" };
	DT_CHECK_STR_EQ(dt_nearest("train_step", names, 4), "train_steps");
	DT_CHECK_STR_EQ(dt_nearest("modle", names, 4), "model");
	DT_CHECK(dt_nearest("zzzzzzzzzz", names, 4) == NULL);
	DT_CHECK_INT_EQ(dt_edit_distance("kitten", "sitting"), 3);
	DT_CHECK_INT_EQ(dt_edit_distance("", "abc"), 3);
}

DT_TEST(strutil, numbers_are_parsed_strictly)
{
	struct dt_err err = DT_ERR_INIT;
	int64_t v;
	double d;
	int b;
	DT_CHECK_OK(dt_parse_i64("123", 0, 1000, &v, "--n", &err), &err);
	DT_CHECK_INT_EQ(v, 123);
	DT_CHECK_INT_EQ(dt_parse_i64("12x", 0, 1000, &v, "--n", &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "'12x' is not an integer");
	DT_CHECK_INT_EQ(dt_parse_i64("-5", 0, 1000, &v, "--n", &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "out of range");
	DT_CHECK_INT_EQ(dt_parse_i64("", 0, 1000, &v, "--n", &err), DT_USAGE);
	DT_CHECK_INT_EQ(dt_parse_i64("99999999999999999999", INT64_MIN, INT64_MAX, &v, "--n", &err), DT_USAGE);
	DT_CHECK_OK(dt_parse_double("0.05", &d, "lr", &err), &err);
	DT_CHECK_NEAR(d, 0.05, 1e-12);
	DT_CHECK_INT_EQ(dt_parse_double("nan", &d, "lr", &err), DT_USAGE);
	DT_CHECK_INT_EQ(dt_parse_double("1e999", &d, "lr", &err), DT_USAGE);
	DT_CHECK_OK(dt_parse_bool("True", &b, "x", &err), &err);
	DT_CHECK_INT_EQ(b, 1);
	DT_CHECK_INT_EQ(dt_parse_bool("maybe", &b, "x", &err), DT_USAGE);
}

DT_TEST(options, parse_all_spellings_and_collect_positionals)
{
	int steps = 10, sync = 0, verbose = 1;
	double lr = 0.1;
	const char *model = "cnn";
	int64_t big = 0;
	struct dt_option opts[] = {
		DT_OPT_GROUP("Training"),
		DT_OPT_INT("train_steps", &steps, "N", "steps"),
		DT_OPT_DOUBLE("learning_rate", &lr, "LR", "lr"),
		DT_OPT_STRING("model", &model, "NAME", "model"),
		DT_OPT_BOOL("sync", &sync, "sync"),
		DT_OPT_BOOL("verbose", &verbose, "verbose"),
		DT_OPT_INT64("big", &big, "N", "big"),
		DT_OPT_END,
	};
	char *argv[] = { "train", "--train-steps=50", "--learning_rate", "0.5", "pos1", "--model=mlp",
			 "--sync", "--noverbose", "--big=5000000000", "--", "--not-an-option", NULL };
	struct dt_args args;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_opts_parse(opts, 11, argv, 1, &args, &err), &err);
	DT_CHECK_INT_EQ(steps, 50);
	DT_CHECK_NEAR(lr, 0.5, 0);
	DT_CHECK_STR_EQ(model, "mlp");
	DT_CHECK_INT_EQ(sync, 1);
	DT_CHECK_INT_EQ(verbose, 0);
	DT_CHECK_INT_EQ(big, 5000000000LL);
	DT_CHECK_INT_EQ(args.count, 2);
	DT_CHECK_STR_EQ(args.items[0], "pos1");
	DT_CHECK_STR_EQ(args.items[1], "--not-an-option");
	DT_CHECK(dt_opts_find(opts, "train-steps")->was_set);
	DT_CHECK(!dt_opts_find(opts, "model")->was_set == 0);
	DT_CHECK_STR_EQ(argv[1], "--train-steps=50"); /* argv untouched */
	dt_args_release(&args);
}

DT_TEST(options, errors_name_the_option_and_suggest)
{
	int steps = 10;
	struct dt_option opts[] = { DT_OPT_INT("train_steps", &steps, "N", "steps"), DT_OPT_END };
	struct dt_args args;
	struct dt_err err = DT_ERR_INIT;
	char *a1[] = { "x", "--train_step=5", NULL };
	DT_CHECK_INT_EQ(dt_opts_parse(opts, 2, a1, 1, &args, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "unknown option '--train_step'");
	DT_CHECK_CONTAINS(err.msg, "did you mean '--train_steps'");
	dt_args_release(&args);
	char *a2[] = { "x", "--train_steps=ten", NULL };
	DT_CHECK_INT_EQ(dt_opts_parse(opts, 2, a2, 1, &args, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "--train_steps: 'ten' is not an integer");
	dt_args_release(&args);
	char *a3[] = { "x", "--train_steps", NULL };
	DT_CHECK_INT_EQ(dt_opts_parse(opts, 2, a3, 1, &args, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "needs a value");
	dt_args_release(&args);
	char *a4[] = { "x", "-x", NULL };
	DT_CHECK_INT_EQ(dt_opts_parse(opts, 2, a4, 1, &args, &err), DT_USAGE);
	dt_args_release(&args);
}

DT_TEST(options, help_lists_every_option_with_defaults)
{
	int steps = 10;
	const char *model = "cnn";
	struct dt_option opts[] = {
		DT_OPT_GROUP("Training"),
		DT_OPT_INT("train_steps", &steps, "N", "steps to train"),
		DT_OPT_STRING("model", &model, "NAME", "the model"),
		DT_OPT_END,
	};
	char path[600];
	FILE *f = fopen(dt_test_path(path, sizeof(path), "help.txt"), "w+");
	dt_opts_print_help(f, opts);
	rewind(f);
	char text[2048] = { 0 };
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	DT_CHECK(n > 0);
	DT_CHECK_CONTAINS(text, "Training:");
	DT_CHECK_CONTAINS(text, "--train_steps=N");
	DT_CHECK_CONTAINS(text, "steps to train [default: 10]");
	DT_CHECK_CONTAINS(text, "[default: cnn]");
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

DT_TEST(atomic_file, write_replaces_whole_file_and_leaves_no_temp)
{
	char path[600];
	dt_test_path(path, sizeof(path), "state");
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_write_file_atomic(path, "first", 5, &err), &err);
	DT_CHECK_OK(dt_write_file_atomic(path, "second!", 7, &err), &err);
	char *text;
	size_t len;
	DT_CHECK_OK(dt_read_file(path, 1 << 20, &text, &len, &err), &err);
	DT_CHECK_STR_EQ(text, "second!");
	DT_CHECK_INT_EQ(len, 7);
	free(text);
	DT_CHECK_INT_EQ(count_entries(dt_test_tmpdir()), 1);
}

DT_TEST(atomic_file, abort_keeps_the_old_file)
{
	char path[600];
	dt_test_path(path, sizeof(path), "ckpt");
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_write_file_atomic(path, "old", 3, &err), &err);
	struct dt_atomic_file f;
	DT_CHECK_OK(dt_atomic_file_open(&f, path, &err), &err);
	DT_CHECK_OK(dt_atomic_file_write(&f, "half", 4, &err), &err);
	dt_atomic_file_abort(&f);
	char *text;
	DT_CHECK_OK(dt_read_file(path, 100, &text, NULL, &err), &err);
	DT_CHECK_STR_EQ(text, "old");
	free(text);
	DT_CHECK_INT_EQ(count_entries(dt_test_tmpdir()), 1);
}

DT_TEST(atomic_file, errors_name_the_path_and_step)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_write_file_atomic("/nonexistent-dir/x", "a", 1, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot create '/nonexistent-dir/x.tmp.");
	char *text;
	DT_CHECK_INT_EQ(dt_read_file("/nonexistent-dir/x", 10, &text, NULL, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot open '/nonexistent-dir/x'");
	char path[600];
	dt_test_path(path, sizeof(path), "big");
	DT_CHECK_OK(dt_write_file_atomic(path, "0123456789", 10, &err), &err);
	DT_CHECK_INT_EQ(dt_read_file(path, 5, &text, NULL, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "more than the 5 allowed");
}

DT_TEST(clock, deadlines_count_down)
{
	int64_t d = dt_deadline_in(0.05);
	DT_CHECK(!dt_deadline_passed(d));
	DT_CHECK(dt_deadline_ms_left(d) <= 50);
	dt_sleep(0.06);
	DT_CHECK(dt_deadline_passed(d));
	DT_CHECK_INT_EQ(dt_deadline_ms_left(d), 0);
	DT_CHECK(!dt_deadline_passed(DT_DEADLINE_NONE));
}

DT_TEST(alloc, aligned_buffers_are_aligned_and_zeroed)
{
	float *p = dt_xalloc_aligned(100, sizeof(float));
	DT_CHECK_INT_EQ((uintptr_t)p % 64, 0);
	for (int i = 0; i < 100; i++)
		DT_CHECK(p[i] == 0.0f);
	free(p);
}
