/* The checkpoint header's integrity (CHECKPOINTS.md, "Integrity"): random
 * single-bit flips anywhere in the JSON header are all caught by verify and
 * make restore fall back (never "different model"); the model_signature is
 * checked against the model even under a well-sealed header; files of
 * format v1 (no header checksum) still restore. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "ckpt_test_util.h"
#include "dt_test.h"

static uint64_t header_len_of(const char *blob)
{
	uint64_t n = 0;
	for (int i = 0; i < 8; i++)
		n |= (uint64_t)(unsigned char)blob[i] << (8 * i);
	return n;
}

/* The seed: DTRAIN_TEST_SEED when set, else a fixed one; printed. */
static uint64_t test_seed(void)
{
	const char *s = getenv("DTRAIN_TEST_SEED");
	uint64_t seed = s && *s ? strtoull(s, NULL, 0) : 21;
	fprintf(stderr, "seed %llu (DTRAIN_TEST_SEED=%llu reproduces)\n", (unsigned long long)seed,
		(unsigned long long)seed);
	return seed;
}

/* Verifies `path` as `dtrain ckpt verify` does: open (layout) then verify. */
static enum dt_status verify_file(const char *path, struct dt_err *err)
{
	struct dt_st_file *f;
	enum dt_status st = dt_st_open(path, &f, err);
	if (st)
		return st;
	st = dt_ckpt_verify(f, NULL, err);
	dt_st_free(f);
	return st;
}

/* Restores dir into s; returns the status, the log in *log (caller frees). */
static enum dt_status restore(const char *dir, struct small *into, int *found, char **log, struct dt_err *err)
{
	capture_start();
	enum dt_status st = dt_ckpt_restore_latest(dir, &into->c, found, NULL, 0, err);
	*log = capture_end();
	return st;
}

/* Rewrites the header_crc32c of blob (a whole file) so it matches the header as it is now. */
static void reseal(char *blob, size_t len)
{
	uint64_t n = header_len_of(blob);
	DT_CHECK(8 + n <= len);
	int found;
	size_t at;
	uint32_t crc;
	dt_st_header_crc(blob, (size_t)(8 + n), &found, &at, &crc);
	DT_CHECK(found);
	char digits[9];
	snprintf(digits, sizeof(digits), "%08x", crc);
	memcpy(blob + at, digits, 8);
}

/* Replaces the first occurrence of `from` in the header of blob with `to` (same length). */
static void edit_header(char *blob, const char *from, const char *to)
{
	uint64_t n = header_len_of(blob);
	DT_CHECK_INT_EQ(strlen(from), strlen(to));
	char *p = memmem(blob + 8, (size_t)n, from, strlen(from));
	DT_CHECK(p != NULL);
	memcpy(p, to, strlen(to));
}

/* 40 single-bit flips at random bytes of the JSON header of the newest of
 * two checkpoints: each one fails verification (naming the file), and
 * restore falls back to the older one saying why, whatever the flip hit:
 * a tensor name (once "a different model", exit 4), a metadata key, the
 * hparams text, the model_signature, an offset, the padding. */
DT_TEST_TIMEOUT(ckpt_header, forty_bit_flips_each_fail_verify_and_restore_falls_back, 120)
{
	uint64_t seed = test_seed();
	struct small s, into;
	small_init(&s, 8, "adam", 1);
	small_init(&into, 8, "adam", 2);
	s.c.hparams = "{\"model\":\"mlp\",\"hidden_size\":4}";
	const char *dir = dt_test_tmpdir();
	save_step(dir, &s, 100, 5);
	save_step(dir, &s, 200, 5);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-200.safetensors", dir);
	size_t len;
	char *pristine = slurp(path, &len);
	uint64_t n = header_len_of(pristine);
	char *blob = dt_xmalloc(len);
	struct dt_rng rng;
	dt_rng_seed(&rng, seed);
	int by_parse = 0, by_header_crc = 0, by_other = 0;
	for (int i = 0; i < 40; i++) {
		memcpy(blob, pristine, len);
		uint64_t at = 8 + dt_rng_next(&rng) % n;
		int bit = (int)(dt_rng_next(&rng) % 8);
		blob[at] = (char)(blob[at] ^ (1 << bit));
		fprintf(stderr, "flip %d: byte %llu bit %d ('%c' -> 0x%02x)\n", i, (unsigned long long)at, bit,
			pristine[at] >= 32 && pristine[at] < 127 ? pristine[at] : '?', (unsigned char)blob[at]);
		dt_test_write_file(path, blob, len);

		struct dt_err err = DT_ERR_INIT;
		enum dt_status st = verify_file(path, &err);
		if (st != DT_CKPT)
			fprintf(stderr, "  not detected (status %d): %s\n", st, err.msg);
		DT_CHECK_INT_EQ(st, DT_CKPT);
		DT_CHECK_CONTAINS(err.msg, "model.ckpt-200.safetensors");
		if (strstr(err.msg, "header crc mismatch") || strstr(err.msg, "header checksum"))
			by_header_crc++;
		else if (strstr(err.msg, "JSON") || strstr(err.msg, "offset") || strstr(err.msg, "header length") ||
			 strstr(err.msg, "tensor"))
			by_parse++;
		else
			by_other++;

		int found = 0;
		char *log;
		st = restore(dir, &into, &found, &log, &err);
		if (st != DT_OK)
			fprintf(stderr, "  restore: %s\n", err.msg);
		DT_CHECK_OK(st, &err);
		DT_CHECK(found);
		DT_CHECK_INT_EQ(into.c.global_step, 100);
		DT_CHECK_CONTAINS(log, "cannot restore checkpoint");
		DT_CHECK_CONTAINS(log, "model.ckpt-200.safetensors");
		DT_CHECK_CONTAINS(log, "falling back to the previous one");
		free(log);
	}
	fprintf(stderr, "detected: %d by the header checksum, %d by the layout rules, %d by other checks\n",
		by_header_crc, by_parse, by_other);
	DT_CHECK(by_header_crc > 0);
	free(blob);
	free(pristine);
	small_release(&s);
	small_release(&into);
}

/* A tensor name damaged in place: not "a different model" (exit 4) but a
 * corrupt header, and restore falls back. The flip the issue saw. */
DT_TEST(ckpt_header, damaged_tensor_name_falls_back_instead_of_different_model)
{
	struct small s, into;
	small_init(&s, 8, "momentum", 3);
	small_init(&into, 8, "momentum", 4);
	const char *dir = dt_test_tmpdir();
	save_step(dir, &s, 10, 5);
	save_step(dir, &s, 20, 5);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-20.safetensors", dir);
	size_t len;
	char *blob = slurp(path, &len);
	edit_header(blob, "\"dense_1/kernel\"", "\"dense_1/kernal\"");
	dt_test_write_file(path, blob, len);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(verify_file(path, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "header crc mismatch");
	int found;
	char *log;
	DT_CHECK_OK(restore(dir, &into, &found, &log, &err), &err);
	DT_CHECK_INT_EQ(into.c.global_step, 10);
	DT_CHECK_CONTAINS(log, "header crc mismatch");
	DT_CHECK_CONTAINS(log, "falling back to the previous one");
	free(log);
	free(blob);
	small_release(&s);
	small_release(&into);
}

/* The model_signature: a damaged value is caught by the header checksum;
 * resealed (a header that checks out but says another signature), by the
 * comparison with the model on restore and with the file's own variables
 * in verify. */
DT_TEST(ckpt_header, model_signature_is_checked_against_the_model)
{
	struct small s, into;
	small_init(&s, 8, "sgd", 5);
	small_init(&into, 8, "sgd", 6);
	const char *dir = dt_test_tmpdir();
	save_step(dir, &s, 1, 5);
	save_step(dir, &s, 2, 5);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-2.safetensors", dir);
	size_t len;
	char *blob = slurp(path, &len);
	char sig[24], key[64], bad[64];
	dt_ckpt_model_signature(s.c.vars, s.c.num_vars, sig, sizeof(sig));
	snprintf(key, sizeof(key), "\"model_signature\":\"%s\"", sig);
	snprintf(bad, sizeof(bad), "%s", key);
	bad[strlen(bad) - 2] ^= 1; /* the last hex digit, one bit */
	edit_header(blob, key, bad);
	dt_test_write_file(path, blob, len);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(verify_file(path, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "header crc mismatch");

	reseal(blob, len);
	dt_test_write_file(path, blob, len);
	DT_CHECK_INT_EQ(verify_file(path, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "model_signature mismatch");
	DT_CHECK_CONTAINS(err.msg, "the file's own variables");
	int found;
	char *log;
	DT_CHECK_OK(restore(dir, &into, &found, &log, &err), &err);
	DT_CHECK_INT_EQ(into.c.global_step, 1);
	DT_CHECK_CONTAINS(log, "model_signature mismatch");
	DT_CHECK_CONTAINS(log, "this model's variables");
	DT_CHECK_CONTAINS(log, "falling back to the previous one");
	free(log);
	free(blob);
	small_release(&s);
	small_release(&into);
}

/* Rewrites a v2 file as the v1 writer wrote it: no header_crc32c, format
 * dtrain.ckpt.v1, header re-padded; the tensor bytes unchanged. */
static void make_v1(const char *path)
{
	size_t len;
	char *blob = slurp(path, &len);
	uint64_t n = header_len_of(blob);
	json_error_t je;
	json_t *root = json_loadb(blob + 8, (size_t)n, 0, &je);
	DT_CHECK(root != NULL);
	json_t *meta = json_object_get(root, "__metadata__");
	DT_CHECK_INT_EQ(json_object_del(meta, "header_crc32c"), 0);
	json_object_set_new(meta, "format", json_string(DT_CKPT_FORMAT_V1));
	char *text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
	size_t data = len - 8 - (size_t)n, out_len = 8 + padded + data;
	char *out = dt_xmalloc(out_len);
	for (int i = 0; i < 8; i++)
		out[i] = (char)((uint64_t)padded >> (8 * i));
	memcpy(out + 8, text, tl);
	memset(out + 8 + tl, ' ', padded - tl);
	memcpy(out + 8 + padded, blob + 8 + n, data);
	dt_test_write_file(path, out, out_len);
	free(out);
	free(text);
	free(blob);
}

/* Files written before the header checksum (format v1) still verify and
 * restore, with a note; their data CRC and model_signature are still
 * checked. A v2 file that lost its header_crc32c is not taken for one. */
DT_TEST(ckpt_header, v1_files_without_header_checksum_still_restore)
{
	struct small s, into;
	small_init(&s, 8, "adam", 7);
	small_init(&into, 8, "adam", 8);
	const char *dir = dt_test_tmpdir();
	save_step(dir, &s, 30, 5);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-30.safetensors", dir);
	make_v1(path);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(verify_file(path, &err), &err);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/safetensors_check.py", "--strict", path, NULL },
		    NULL, 60);
	if (r.exit_code != 0)
		fprintf(stderr, "%s%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	int found;
	char *log;
	DT_CHECK_OK(restore(dir, &into, &found, &log, &err), &err);
	DT_CHECK(found);
	DT_CHECK_INT_EQ(into.c.global_step, 30);
	DT_CHECK(memcmp(into.c.params, s.c.params, s.c.num_params * sizeof(float)) == 0);
	DT_CHECK(memcmp(into.c.slots, s.c.slots, 2 * s.c.num_params * sizeof(float)) == 0);
	DT_CHECK_CONTAINS(log, "format " DT_CKPT_FORMAT_V1 ", written before header checksums");
	free(log);

	/* Its data CRC and its signature are still checked. */
	size_t len;
	char *blob = slurp(path, &len);
	char *copy = dt_xmalloc(len);
	memcpy(copy, blob, len);
	copy[len - 5] ^= 4;
	dt_test_write_file(path, copy, len);
	DT_CHECK_INT_EQ(verify_file(path, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "crc mismatch");
	memcpy(copy, blob, len);
	char *sig = memmem(copy + 8, (size_t)header_len_of(copy), "\"model_signature\":\"", 19);
	DT_CHECK(sig != NULL);
	sig[19] ^= 1;
	dt_test_write_file(path, copy, len);
	DT_CHECK_INT_EQ(verify_file(path, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "model_signature mismatch");

	/* "dtrain.ckpt.v2" cannot become v1 by one flipped bit ('2' ^ '1' has two
	 * bits), and a v2 file without its header_crc32c is refused. */
	DT_CHECK_INT_EQ(__builtin_popcount('2' ^ '1'), 2);
	save_step(dir, &s, 40, 5);
	snprintf(path, sizeof(path), "%s/model.ckpt-40.safetensors", dir);
	make_v1(path);
	free(blob);
	blob = slurp(path, &len);
	edit_header(blob, "\"format\":\"" DT_CKPT_FORMAT_V1 "\"", "\"format\":\"" DT_CKPT_FORMAT "\"");
	dt_test_write_file(path, blob, len);
	DT_CHECK_INT_EQ(verify_file(path, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "no 'header_crc32c'");
	free(copy);
	free(blob);
	small_release(&s);
	small_release(&into);
}
