/* Checkpoints (train/checkpoint.h): the safetensors bytes (golden example,
 * padding, metadata), every reader rule as a negative case, round trips,
 * the state file, keep_max, restore fallback, SIGKILLs during saves, a full
 * disk during a save, and resume determinism of the single-process loop. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/crc32c.h"
#include "base/rng.h"
#include "dt_test.h"
#include "nn/hparams.h"
#include "models/builtin.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "train/checkpoint.h"
#include "train/local.h"
#include "ckpt_test_util.h"

/* ---- the format ------------------------------------------------------------------- */

/* checkpoints.md §2.2: the 120-byte example, through our header builder. */
DT_TEST(ckpt, golden_120_byte_example)
{
	struct dt_err err = DT_ERR_INIT;
	const struct dt_ckpt_kv meta[] = { { "format", "pt" }, { "step", "1200" } };
	const int64_t shape[] = { 2 };
	const struct dt_st_tensor_desc t = { "w", DT_ST_F32, 1, shape, 8 };
	char *h;
	size_t hlen;
	DT_CHECK_OK(dt_st_build_header(&t, 1, meta, 2, &h, &hlen, &err), &err);
	const char json[] = "{\"__metadata__\":{\"format\":\"pt\",\"step\":\"1200\"},"
			    "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	DT_CHECK_INT_EQ(sizeof(json) - 1, 99);
	DT_CHECK_INT_EQ(hlen, 112);
	unsigned char want[120] = { 0x68, 0, 0, 0, 0, 0, 0, 0 };
	memcpy(want + 8, json, 99);
	memset(want + 8 + 99, ' ', 5);
	const float data[2] = { 1.0f, -2.0f };
	memcpy(want + 112, data, 8);
	DT_CHECK(memcmp(want + 112, "\x00\x00\x80\x3f\x00\x00\x00\xc0", 8) == 0);
	DT_CHECK(memcmp(h, want, 112) == 0);

	char file[120];
	memcpy(file, h, 112);
	memcpy(file + 112, data, 8);
	free(h);
	struct dt_st_file *f;
	DT_CHECK_OK(dt_st_parse(file, sizeof(file), &f, &err), &err);
	DT_CHECK_INT_EQ(f->header_len, 104);
	DT_CHECK_INT_EQ(f->num_tensors, 1);
	DT_CHECK_STR_EQ(f->tensors[0].name, "w");
	DT_CHECK_INT_EQ(f->tensors[0].shape[0], 2);
	DT_CHECK_STR_EQ(dt_st_meta(f, "step"), "1200");
	DT_CHECK_STR_EQ(f->meta_keys[0], "format");
	dt_st_free(f);

	/* The reference doc's unpadded 60-byte header is legal too. */
	char doc[8 + 60 + 16] = { 60 };
	memcpy(doc + 8, "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 60);
	DT_CHECK_OK(dt_st_parse(doc, sizeof(doc), &f, &err), &err);
	DT_CHECK_INT_EQ(f->tensors[0].dtype, DT_ST_I32);
	DT_CHECK_INT_EQ(f->num_meta, 0);
	dt_st_free(f);
}

/* Builds "N + header + data" and parses it; returns the status, err filled. */
static int parse_case(const char *header, size_t data_len, long n_override, struct dt_err *err)
{
	size_t hl = strlen(header);
	size_t total = 8 + hl + data_len;
	unsigned char *buf = dt_xcalloc(total, 1);
	uint64_t n = n_override >= 0 ? (uint64_t)n_override : hl;
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(n >> (8 * i));
	memcpy(buf + 8, header, hl);
	struct dt_st_file *f = NULL;
	dt_err_clear(err);
	int st = dt_st_parse(buf, total, &f, err);
	dt_st_free(f);
	free(buf);
	return st;
}

static void expect_bad(const char *header, size_t data_len, long n_override, const char *needle)
{
	struct dt_err err = DT_ERR_INIT;
	int st = parse_case(header, data_len, n_override, &err);
	if (st != DT_CKPT || !strstr(err.msg, needle))
		fprintf(stderr, "header %s -> status %d: %s\n", header, st, err.msg);
	DT_CHECK_INT_EQ(st, DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, needle);
}

/* Every row of the reference reader's rule table, and a few more. */
DT_TEST(ckpt, reader_rejects_each_layout_rule)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_st_file *f;
	DT_CHECK_INT_EQ(dt_st_parse("1234567", 7, &f, &err), DT_CKPT); /* HeaderTooSmall */
	DT_CHECK_CONTAINS(err.msg, "too small");
	expect_bad("{}", 0, 100000001, "larger than");                     /* HeaderTooLarge */
	expect_bad("{}", 0, 3, "runs past the end");                       /* InvalidHeaderLength */
	expect_bad("{\"w\xff\":{}}", 0, -1, "not valid JSON");               /* not UTF-8 */
	expect_bad("{\"w\":", 0, -1, "not valid JSON");                      /* not JSON */
	expect_bad("[1,2]", 0, -1, "not a JSON object");
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, -1, "needs a string");
	expect_bad("{\"w\":{\"dtype\":\"Q8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, -1, "unknown dtype");
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, -1, "shape[0]");
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, -1, "shape[0]");
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, -1, "two non-negative");
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, -1, "unknown field");
	/* InvalidOffset: first BEGIN != 0, a hole, END < BEGIN. */
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1, "invalid offset");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, -1, "invalid offset for tensor 'b'");
	expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
		   "\"v\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}}", 4, -1, "invalid offset");
	/* ValidationOverflow */
	expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, -1,
		   "overflows");
	/* MisalignedSlice (sub-byte dtypes) */
	expect_bad("{\"w\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1, -1, "not a whole number");
	/* TensorInvalidInfo */
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, -1, "invalid shape, data type");
	/* MetadataIncompleteBuffer: trailing bytes, and a truncated buffer */
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 5, -1, "not indexed");
	expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, -1, "truncated");
	/* duplicate keys; metadata values must be strings */
	expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},"
		   "\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1, -1, "duplicate");
	expect_bad("{\"__metadata__\":{\"step\":12}}", 0, -1, "not a string");
	expect_bad("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}", 0, -1, "not a string");
	expect_bad("{\"__metadata__\":[]}", 0, -1, "not a JSON object");

	/* Legal corner cases: zero-sized dims and rank-0 scalars; an empty file body. */
	DT_CHECK_INT_EQ(parse_case("{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
				   "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, -1, &err), DT_OK);
	DT_CHECK_INT_EQ(parse_case("{}", 0, -1, &err), DT_OK);
	DT_CHECK_INT_EQ(parse_case("  {}  ", 0, -1, &err), DT_OK); /* lenient: leading whitespace */
}

DT_TEST(ckpt, header_is_padded_compact_metadata_first_all_strings)
{
	struct small s;
	small_init(&s, 8, "adam", 1);
	const char *dir = dt_test_tmpdir();
	const struct dt_ckpt_kv extra[] = { { "note", "hello \"world\"\n" } };
	s.c.extra = extra;
	s.c.num_extra = 1;
	s.c.hparams = "{\"model\":\"mlp\"}";
	save_step(dir, &s, 42, 0);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-42.safetensors", dir);
	size_t len;
	char *blob = slurp(path, &len);
	uint64_t n = 0;
	for (int i = 0; i < 8; i++)
		n |= (uint64_t)(unsigned char)blob[i] << (8 * i);
	DT_CHECK_INT_EQ((8 + n) % 8, 0);
	DT_CHECK(strncmp(blob + 8, "{\"__metadata__\":{\"format\":\"dtrain.ckpt.v2\",", 43) == 0);
	size_t body = n;
	while (body > 0 && blob[8 + body - 1] == ' ')
		body--;
	DT_CHECK(n - body < 8);
	DT_CHECK(blob[8 + body - 1] == '}');
	json_error_t je;
	json_t *root = json_loadb(blob + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
	DT_CHECK(root != NULL);
	json_t *meta = json_object_get(root, "__metadata__");
	const char *k;
	json_t *v;
	int count = 0;
	json_object_foreach(meta, k, v) {
		DT_CHECK(json_is_string(v));
		count++;
	}
	DT_CHECK(count >= 10);
	DT_CHECK_STR_EQ(json_string_value(json_object_get(meta, "note")), "hello \"world\"\n");
	DT_CHECK_STR_EQ(json_string_value(json_object_get(meta, "global_step")), "42");
	DT_CHECK_STR_EQ(json_string_value(json_object_get(meta, "optimizer")), "adam");
	/* TF's slot names and the rank-0 I64 step. */
	DT_CHECK(json_object_get(root, "dense_1/kernel/Adam") != NULL);
	DT_CHECK(json_object_get(root, "dense_1/kernel/Adam_1") != NULL);
	json_t *gs = json_object_get(root, "global_step");
	DT_CHECK_STR_EQ(json_string_value(json_object_get(gs, "dtype")), "I64");
	DT_CHECK_INT_EQ(json_array_size(json_object_get(gs, "shape")), 0);
	/* The CRC in the metadata is the CRC-32C of the whole buffer. */
	char crc[16];
	snprintf(crc, sizeof(crc), "%08x", dt_crc32c(blob + 8 + n, len - 8 - n));
	DT_CHECK_STR_EQ(json_string_value(json_object_get(meta, "crc32c")), crc);
	json_decref(root);
	free(blob);

	/* Reserved keys cannot be overridden by extras. */
	const struct dt_ckpt_kv bad[] = { { "crc32c", "00000000" } };
	s.c.extra = bad;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_ckpt_save(dir, &s.c, 0, NULL, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "reserved");
	small_release(&s);
}

/* Our files pass an independent stdlib-Python reader with every rule, and
 * that reader is not vacuous: it rejects a trailing byte and a flipped one. */
DT_TEST(ckpt, python_reader_accepts_our_files)
{
	struct small s;
	small_init(&s, 8, "momentum", 2);
	const char *dir = dt_test_tmpdir();
	save_step(dir, &s, 7, 0);
	char path[600], cmd[4000];
	snprintf(path, sizeof(path), "%s/model.ckpt-7.safetensors", dir);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/safetensors_check.py", "--strict", path, NULL },
		    NULL, 60);
	if (r.exit_code != 0)
		fprintf(stderr, "%s%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, ": ok");
	dt_run_release(&r);

	char bad1[620], bad2[620];
	snprintf(bad1, sizeof(bad1), "%s.trailing", path);
	snprintf(bad2, sizeof(bad2), "%s.flipped", path);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && printf x >> '%s' && cp '%s' '%s'", path, bad1, bad1, path, bad2);
	DT_CHECK_INT_EQ(system(cmd), 0);
	flip_byte(bad2, 3);
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/safetensors_check.py", "--strict", bad1, bad2,
					  NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 1);
	DT_CHECK_CONTAINS(r.out, "MetadataIncompleteBuffer");
	DT_CHECK_CONTAINS(r.out, "crc32c of the buffer");
	dt_run_release(&r);
	small_release(&s);
}

/* ---- save and load ------------------------------------------------------------------ */

DT_TEST(ckpt, round_trip_restores_every_byte)
{
	struct small a, b;
	small_init(&a, 8, "adam", 3);
	small_init(&b, 8, "adam", 4);
	const char *dir = dt_test_tmpdir();
	save_step(dir, &a, 123, 5);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-123.safetensors", dir);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK(memcmp(a.c.params, b.c.params, a.c.num_params * sizeof(float)) != 0);
	DT_CHECK_OK(dt_ckpt_load(path, &b.c, &err), &err);
	DT_CHECK(memcmp(a.c.params, b.c.params, a.c.num_params * sizeof(float)) == 0);
	DT_CHECK(memcmp(a.opt.slots, b.opt.slots, 2 * a.c.num_params * sizeof(float)) == 0);
	DT_CHECK_INT_EQ(b.c.global_step, 123);
	DT_CHECK_INT_EQ(b.c.pipeline_epoch, 12);
	DT_CHECK_INT_EQ(b.c.pipeline_offset, 3 * 64);
	DT_CHECK(b.c.has_rng);
	DT_CHECK(memcmp(&a.c.dropout_rng, &b.c.dropout_rng, sizeof(struct dt_rng)) == 0);

	/* Without slots wanted, the slot tensors are skipped (and still checksummed). */
	struct small c;
	small_init(&c, 8, "sgd", 5);
	DT_CHECK_OK(dt_ckpt_load(path, &c.c, &err), &err);
	DT_CHECK(memcmp(a.c.params, c.c.params, a.c.num_params * sizeof(float)) == 0);
	/* A different optimizer's slots are missing: refused, naming the slot. */
	struct small d;
	small_init(&d, 8, "momentum", 6);
	DT_CHECK_INT_EQ(dt_ckpt_load(path, &d.c, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "no optimizer slot 'dense_1/kernel/Momentum'");
	DT_CHECK_CONTAINS(err.msg, "saved with optimizer adam");

	/* inspect API and verify */
	struct dt_st_file *f;
	DT_CHECK_OK(dt_st_open(path, &f, &err), &err);
	DT_CHECK_OK(dt_ckpt_verify(f, NULL, &err), &err);
	const struct dt_st_tensor_info *t = dt_st_find(f, "dense_1/kernel");
	DT_CHECK(t != NULL);
	DT_CHECK_INT_EQ(t->ndim, 2);
	DT_CHECK_INT_EQ(t->shape[0], 64);
	DT_CHECK_INT_EQ(t->shape[1], 256);
	char sig[24];
	dt_ckpt_model_signature(a.c.vars, a.c.num_vars, sig, sizeof(sig));
	DT_CHECK_STR_EQ(dt_st_meta(f, "model_signature"), sig);
	dt_st_free(f);
	small_release(&a);
	small_release(&b);
	small_release(&c);
	small_release(&d);
}

DT_TEST(ckpt, flipped_bit_anywhere_in_the_data_is_detected)
{
	struct small s;
	small_init(&s, 8, "adam", 7);
	const char *dir = dt_test_tmpdir();
	save_step(dir, &s, 1, 0);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-1.safetensors", dir);
	struct dt_err err = DT_ERR_INIT;
	for (long at = 1; at < 400000; at = at * 3 + 1) {
		struct stat sb;
		DT_CHECK(stat(path, &sb) == 0);
		if (at > sb.st_size - 4096)
			break;
		flip_byte(path, at);
		DT_CHECK_INT_EQ(dt_ckpt_load(path, &s.c, &err), DT_CKPT);
		DT_CHECK_CONTAINS(err.msg, "crc mismatch");
		flip_byte(path, at);
		DT_CHECK_OK(dt_ckpt_load(path, &s.c, &err), &err);
	}
	small_release(&s);
}

DT_TEST(ckpt, different_model_is_refused_naming_variable_and_shapes)
{
	struct small a, b;
	small_init(&a, 8, "adam", 1);
	small_init(&b, 6, "adam", 1); /* 36 inputs instead of 64 */
	const char *dir = dt_test_tmpdir();
	save_step(dir, &a, 5, 0);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-5.safetensors", dir);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_ckpt_load(path, &b.c, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "different model");
	DT_CHECK_CONTAINS(err.msg, "variable 'dense_1/kernel' has shape [64, 256] F32 in the checkpoint but [36, 256] F32 "
				   "in this model");

	/* Restore does not fall back past a different model: it refuses at once. */
	save_step(dir, &a, 6, 0);
	int found;
	DT_CHECK_INT_EQ(dt_ckpt_restore_latest(dir, &b.c, &found, NULL, 0, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "model.ckpt-6");
	DT_CHECK_CONTAINS(err.msg, "[36, 256]");

	/* A model lacking a variable of the file (lenet vs mlp) and the reverse. */
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("lenet_base", &hp, &err), &err);
	struct dt_model *m;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, 2, &m, &err), &err);
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, m);
	DT_CHECK_INT_EQ(dt_ckpt_load(path, &c, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "has no variable 'conv_1/kernel'");
	dt_model_free(m);

	/* Extra variable in the file: save a model with one variable left out. */
	struct dt_ckpt_contents fewer = a.c;
	fewer.num_vars = a.c.num_vars - 1;
	fewer.global_step = 9;
	DT_CHECK_OK(dt_ckpt_save(dir, &a.c, 0, NULL, &err), &err);
	DT_CHECK_OK(dt_ckpt_save(dir, &fewer, 0, NULL, &err), &err);
	snprintf(path, sizeof(path), "%s/model.ckpt-9.safetensors", dir);
	DT_CHECK_INT_EQ(dt_ckpt_load(path, &a.c, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "has no variable 'dense_3/bias'");
	snprintf(path, sizeof(path), "%s/model.ckpt-6.safetensors", dir);
	DT_CHECK_INT_EQ(dt_ckpt_load(path, &fewer, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "has variable 'dense_3/bias' (shape [3]) that this model lacks");
	small_release(&a);
	small_release(&b);
}

/* ---- the state file, keep_max, restore --------------------------------------------------- */

DT_TEST(ckpt, state_file_parses_tensorflows_text_and_round_trips)
{
	const char tf[] = "model_checkpoint_path: \"ckpt-4\"\n"
			  "all_model_checkpoint_paths: \"ckpt-2\"\n"
			  "all_model_checkpoint_paths: \"ckpt-3\"\n"
			  "all_model_checkpoint_paths: \"ckpt-4\"\n"
			  "all_model_checkpoint_timestamps: 1784015298.994252\n"
			  "all_model_checkpoint_timestamps: 1784015299.2607172\n"
			  "all_model_checkpoint_timestamps: 1784015299.510666\n"
			  "last_preserved_timestamp: 1784015297.175224\n";
	struct dt_ckpt_state s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_ckpt_state_parse(tf, sizeof(tf) - 1, "tf", &s, &err), &err);
	DT_CHECK_INT_EQ(s.count, 3);
	DT_CHECK_STR_EQ(s.paths[0], "ckpt-2");
	DT_CHECK_STR_EQ(s.paths[2], "ckpt-4");
	DT_CHECK_NEAR(s.timestamps[1], 1784015299.2607172, 1e-6);
	DT_CHECK_NEAR(s.last_preserved_timestamp, 1784015297.175224, 1e-6);
	const char *dir = dt_test_tmpdir();
	DT_CHECK_OK(dt_ckpt_state_write(dir, &s, &err), &err);
	struct dt_ckpt_state t;
	int exists;
	DT_CHECK_OK(dt_ckpt_state_read(dir, &t, &exists, &err), &err);
	DT_CHECK(exists);
	DT_CHECK_INT_EQ(t.count, 3);
	for (int i = 0; i < 3; i++) {
		DT_CHECK_STR_EQ(t.paths[i], s.paths[i]);
		DT_CHECK_NEAR(t.timestamps[i], s.timestamps[i], 1e-6);
	}
	dt_ckpt_state_release(&s);
	dt_ckpt_state_release(&t);

	/* Only model_checkpoint_path (older TF files): one entry. */
	DT_CHECK_OK(dt_ckpt_state_parse("model_checkpoint_path: 'a\\\"b'\n", 29, "x", &s, &err), &err);
	DT_CHECK_INT_EQ(s.count, 1);
	DT_CHECK_STR_EQ(s.paths[0], "a\"b");
	dt_ckpt_state_release(&s);
	/* Bad files: each names the line. */
	static const char *const bad[] = {
		"model_checkpoint_path: \"\"\n", "all_model_checkpoint_paths: \"a\"\n", "garbage\n",
		"model_checkpoint_path: \"a\"\nfoo: 1\n", "model_checkpoint_path: \"a\n",
		"model_checkpoint_path: \"a\" junk\n", "model_checkpoint_path: \"a\"\nlast_preserved_timestamp: x\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		DT_CHECK_INT_EQ(dt_ckpt_state_parse(bad[i], strlen(bad[i]), "state", &s, &err), DT_CKPT);
		DT_CHECK_CONTAINS(err.msg, "state");
	}
}

DT_TEST(ckpt, keep_max_deletes_the_oldest_and_state_lists_the_rest)
{
	struct small s;
	small_init(&s, 8, "sgd", 1);
	const char *dir = dt_test_tmpdir();
	for (int step = 10; step <= 70; step += 10)
		save_step(dir, &s, step, 3);
	struct dt_ckpt_state st;
	int exists;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_ckpt_state_read(dir, &st, &exists, &err), &err);
	DT_CHECK_INT_EQ(st.count, 3);
	DT_CHECK_STR_EQ(st.paths[0], "model.ckpt-50.safetensors");
	DT_CHECK_STR_EQ(st.paths[2], "model.ckpt-70.safetensors");
	DT_CHECK(st.timestamps[0] > 1e9 && st.timestamps[0] <= st.timestamps[2]);
	dt_ckpt_state_release(&st);
	char path[600];
	for (int step = 10; step <= 70; step += 10) {
		snprintf(path, sizeof(path), "%s/model.ckpt-%d.safetensors", dir, step);
		DT_CHECK_INT_EQ(access(path, F_OK) == 0, step >= 50);
	}
	/* Saving a step again replaces its entry; keep 0 keeps everything. */
	save_step(dir, &s, 60, 0);
	save_step(dir, &s, 80, 0);
	DT_CHECK_OK(dt_ckpt_state_read(dir, &st, &exists, &err), &err);
	DT_CHECK_INT_EQ(st.count, 4);
	DT_CHECK_STR_EQ(st.paths[1], "model.ckpt-70.safetensors");
	DT_CHECK_STR_EQ(st.paths[2], "model.ckpt-60.safetensors");
	dt_ckpt_state_release(&st);

	/* Pollers: latest path and the list. */
	enum dt_ckpt_poll res;
	int64_t step;
	DT_CHECK_OK(dt_ckpt_latest_path(dir, path, sizeof(path), &step, &res, &err), &err);
	DT_CHECK_INT_EQ(res, DT_CKPT_POLL_FOUND);
	DT_CHECK_INT_EQ(step, 80);
	DT_CHECK(unlink(path) == 0); /* deleted under the poller */
	DT_CHECK_OK(dt_ckpt_latest_path(dir, path, sizeof(path), &step, &res, &err), &err);
	DT_CHECK_INT_EQ(res, DT_CKPT_POLL_RETRY);
	char empty[600];
	dt_test_path(empty, sizeof(empty), "nothing-here");
	DT_CHECK_OK(dt_ckpt_latest_path(empty, path, sizeof(path), &step, &res, &err), &err);
	DT_CHECK_INT_EQ(res, DT_CKPT_POLL_NONE);
	small_release(&s);
}

DT_TEST(ckpt, flipped_byte_in_newest_falls_back_to_previous_and_says_so)
{
	struct small s, into;
	small_init(&s, 8, "adam", 1);
	small_init(&into, 8, "adam", 2);
	const char *dir = dt_test_tmpdir();
	save_step(dir, &s, 100, 5);
	save_step(dir, &s, 200, 5);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.ckpt-200.safetensors", dir);
	flip_byte(path, 100);
	struct dt_err err = DT_ERR_INIT;
	int found;
	char got[600];
	capture_start();
	int st = dt_ckpt_restore_latest(dir, &into.c, &found, got, sizeof(got), &err);
	char *log = capture_end();
	DT_CHECK_OK(st, &err);
	DT_CHECK(found);
	DT_CHECK_INT_EQ(into.c.global_step, 100);
	DT_CHECK_CONTAINS(got, "model.ckpt-100.safetensors");
	DT_CHECK_CONTAINS(log, "cannot restore checkpoint");
	DT_CHECK_CONTAINS(log, "model.ckpt-200.safetensors");
	DT_CHECK_CONTAINS(log, "crc mismatch");
	DT_CHECK_CONTAINS(log, "falling back to the previous one");
	free(log);

	/* Both bad: an error, never a silent fresh start. */
	snprintf(path, sizeof(path), "%s/model.ckpt-100.safetensors", dir);
	flip_byte(path, 100);
	capture_start();
	st = dt_ckpt_restore_latest(dir, &into.c, &found, NULL, 0, &err);
	free(capture_end());
	DT_CHECK_INT_EQ(st, DT_CKPT);
	DT_CHECK(!found);
	DT_CHECK_CONTAINS(err.msg, "none of the 2 checkpoint(s)");
	small_release(&s);
	small_release(&into);
}

DT_TEST(ckpt, restore_without_state_file_scans_and_bad_state_file_is_an_error)
{
	struct small s, into;
	small_init(&s, 8, "sgd", 1);
	small_init(&into, 8, "sgd", 2);
	const char *dir = dt_test_tmpdir();
	struct dt_err err = DT_ERR_INIT;
	int found = 1;
	DT_CHECK_OK(dt_ckpt_restore_latest(dir, &into.c, &found, NULL, 0, &err), &err);
	DT_CHECK(!found);
	save_step(dir, &s, 9, 0);
	save_step(dir, &s, 30, 0);
	save_step(dir, &s, 100, 0);
	char path[600];
	dt_test_path(path, sizeof(path), "checkpoint");
	DT_CHECK(unlink(path) == 0);
	DT_CHECK_OK(dt_ckpt_restore_latest(dir, &into.c, &found, NULL, 0, &err), &err);
	DT_CHECK(found);
	DT_CHECK_INT_EQ(into.c.global_step, 100); /* by step, not by name order */

	dt_test_write_file(path, "model_checkpoint_path: \"model.ckpt-100.safe", 43);
	DT_CHECK_INT_EQ(dt_ckpt_restore_latest(dir, &into.c, &found, NULL, 0, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "cannot parse the checkpoint state file");
	DT_CHECK_CONTAINS(err.msg, "hint: fix or remove");
	/* Saving over a bad state file refuses too, before writing anything. */
	s.c.global_step = 110;
	DT_CHECK_INT_EQ(dt_ckpt_save(dir, &s.c, 5, NULL, &err), DT_CKPT);
	dt_test_path(path, sizeof(path), "model.ckpt-110.safetensors");
	DT_CHECK(access(path, F_OK) != 0);

	/* A state file we cannot read (a directory) is an error too. */
	dt_test_path(path, sizeof(path), "checkpoint");
	DT_CHECK(unlink(path) == 0);
	DT_CHECK(mkdir(path, 0755) == 0);
	DT_CHECK_INT_EQ(dt_ckpt_restore_latest(dir, &into.c, &found, NULL, 0, &err), DT_CKPT);
	DT_CHECK_CONTAINS(err.msg, "state file");
	small_release(&s);
	small_release(&into);
}

DT_TEST(ckpt, stale_temporaries_of_dead_writers_are_removed)
{
	const char *dir = dt_test_tmpdir();
	const char *names[] = { "model.ckpt-5.safetensors.tmp.99999", "checkpoint.tmp.99999",
				"checkpoint.tmp1a2b3c", "model.ckpt-5.safetensors.tmp.1", "other.tmp.1" };
	char path[600];
	for (int i = 0; i < 5; i++) {
		dt_test_path(path, sizeof(path), names[i]);
		dt_test_write_file(path, "x", 1);
		if (i != 3) {
			struct timeval tv[2] = { { 1000, 0 }, { 1000, 0 } };
			DT_CHECK(utimes(path, tv) == 0);
		}
	}
	DT_CHECK_INT_EQ(dt_ckpt_remove_stale_temps(dir, dt_wall_seconds() - 60), 3);
	for (int i = 0; i < 5; i++) {
		dt_test_path(path, sizeof(path), names[i]);
		DT_CHECK_INT_EQ(access(path, F_OK) == 0, i >= 3); /* fresh one and foreign one stay */
	}
}

/* ---- faults ----------------------------------------------------------------------------- */

/* A child that saves checkpoints in a loop from the step after the last one
 * it finds, until killed. The model (mlp on 16x16, Adam) makes 1.2 MB files. */
static void saver_child(const char *dir)
{
	struct small s;
	small_init(&s, 16, "adam", 9);
	struct dt_err err = DT_ERR_INIT;
	int found;
	if (dt_ckpt_restore_latest(dir, &s.c, &found, NULL, 0, &err))
		_exit(3);
	int64_t step = found ? s.c.global_step : 0;
	for (int i = 0; i < 10000; i++) {
		s.c.params[0] = (float)++step;
		save_step(dir, &s, step, 3);
	}
	_exit(0);
}

DT_TEST_TIMEOUT(ckpt, sigkill_during_saves_always_leaves_a_verified_checkpoint, 240)
{
	const char *dir = dt_test_tmpdir();
	char state[600];
	dt_test_path(state, sizeof(state), "checkpoint");
	struct dt_rng rng;
	dt_rng_seed(&rng, 20260521);
	struct small into;
	small_init(&into, 16, "adam", 1);
	int64_t deadline = dt_deadline_in(180), last_step = 0;
	int kills = 0, mid_save = 0;
	for (int round = 0; round < 25 && !dt_deadline_passed(deadline); round++) {
		pid_t pid = fork();
		DT_CHECK(pid >= 0);
		if (pid == 0)
			saver_child(dir);
		/* The first round waits for one complete save; later ones kill at any moment. */
		if (round == 0)
			for (int i = 0; i < 2000 && access(state, F_OK) != 0; i++)
				usleep(5000);
		usleep((useconds_t)(dt_rng_below(&rng, 150000)));
		DIR *d = opendir(dir);
		struct dirent *e;
		int tmp_seen = 0;
		while (d && (e = readdir(d)))
			tmp_seen |= strstr(e->d_name, ".tmp") != NULL;
		if (d)
			closedir(d);
		mid_save += tmp_seen;
		kill(pid, SIGKILL);
		int status;
		DT_CHECK(waitpid(pid, &status, 0) == pid);
		DT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		kills++;
		/* The state file names a checkpoint that verifies, at or after the last one. */
		struct dt_ckpt_state st;
		int exists;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_OK(dt_ckpt_state_read(dir, &st, &exists, &err), &err);
		DT_CHECK(exists && st.count >= 1);
		char path[700];
		dt_ckpt_state_resolve(dir, st.paths[st.count - 1], path, sizeof(path));
		dt_ckpt_state_release(&st);
		DT_CHECK_OK(dt_ckpt_load(path, &into.c, &err), &err);
		DT_CHECK(into.c.global_step >= last_step);
		DT_CHECK_INT_EQ((int64_t)into.c.params[0], into.c.global_step);
		last_step = into.c.global_step;
	}
	fprintf(stderr, "%d kills, %d while a temporary file existed, last step %lld\n", kills, mid_save,
		(long long)last_step);
	DT_CHECK(kills >= 20);
	DT_CHECK(mid_save >= 5); /* the kills did land inside saves */
	small_release(&into);
}

/* Runs in a child in a private mount namespace: a tmpfs too small for two
 * checkpoints; the second save fails and must leave the first intact. */
static int full_disk_child(const char *dir)
{
	if (unshare(CLONE_NEWNS) != 0) {
		fprintf(stderr, "unshare(CLONE_NEWNS): %s\n", strerror(errno));
		return 77;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "size=320k") != 0) {
		fprintf(stderr, "mount: %s\n", strerror(errno));
		return 77;
	}
	struct small s;
	small_init(&s, 8, "sgd", 1); /* ~200 KB a checkpoint */
	struct dt_err err = DT_ERR_INIT;
	s.c.global_step = 1;
	if (dt_ckpt_save(dir, &s.c, 1, NULL, &err)) {
		fprintf(stderr, "first save: %s\n", err.msg);
		return 1;
	}
	const float first = s.c.params[0];
	s.c.global_step = 2;
	s.c.params[0] = first + 1;
	enum dt_status st = dt_ckpt_save(dir, &s.c, 1, NULL, &err);
	if (st != DT_IO || !strstr(err.msg, "No space left on device") || !strstr(err.msg, "step 2")) {
		fprintf(stderr, "second save: status %d: %s\n", st, err.msg);
		return 2;
	}
	fprintf(stderr, "second save failed as expected: %s\n", err.msg);
	DIR *d = opendir(dir);
	struct dirent *e;
	int bad = 0;
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".tmp") || strstr(e->d_name, "ckpt-2")) {
			fprintf(stderr, "left behind: %s\n", e->d_name);
			bad = 1;
		}
	closedir(d);
	if (bad)
		return 3;
	struct small into;
	small_init(&into, 8, "sgd", 2);
	int found;
	if (dt_ckpt_restore_latest(dir, &into.c, &found, NULL, 0, &err) || !found || into.c.global_step != 1 ||
	    into.c.params[0] != first) {
		fprintf(stderr, "restore after the failed save: %s\n", err.msg);
		return 4;
	}
	small_release(&s);
	small_release(&into);
	return 0;
}

DT_TEST(ckpt, full_disk_during_save_keeps_previous_and_leaves_no_temporary)
{
	char dir[600];
	dt_test_path(dir, sizeof(dir), "small-disk");
	DT_CHECK(mkdir(dir, 0755) == 0);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0)
		_exit(full_disk_child(dir));
	int status;
	DT_CHECK(waitpid(pid, &status, 0) == pid);
	DT_CHECK(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		DT_SKIP("no private mount namespace here (unshare/mount refused; needs root or CAP_SYS_ADMIN)");
	DT_CHECK_INT_EQ(WEXITSTATUS(status), 0);
}

/* ---- the single-process loop ----------------------------------------------------------- */

static void local_config(struct dt_train_config *cfg, const char *dir, int64_t steps)
{
	struct dt_err err = DT_ERR_INIT;
	dt_train_config_defaults(cfg);
	cfg->models = &dt_models_builtin;
	cfg->problem = "synthetic";
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &cfg->hp, &err), &err);
	DT_CHECK_OK(dt_hparams_parse(&cfg->hp, "dropout=0.3,lr_schedule=constant,batch_size=32", &err), &err);
	cfg->train_steps = steps;
	cfg->eval_at_end = 0;
	cfg->log_every = 0;
	cfg->output_dir = dir;
	cfg->save_checkpoints_steps = 50;
	cfg->save_summary_steps = 0;
	cfg->prefetch = 1;
}

/* 200 steps in one go and 100 + 100 resumed end with the same bytes:
 * parameters, Adam slots, step, dropout RNG and input position. */
DT_TEST_TIMEOUT(ckpt, resumed_training_is_bit_identical_to_one_run, 180)
{
	char one[600], two[600];
	dt_test_path(one, sizeof(one), "one");
	dt_test_path(two, sizeof(two), "two");
	struct dt_train_config cfg;
	struct dt_train_result res;
	struct dt_err err = DT_ERR_INIT;
	local_config(&cfg, one, 200);
	DT_CHECK_OK(dt_train_local(&cfg, &res, &err), &err);
	local_config(&cfg, two, 100);
	DT_CHECK_OK(dt_train_local(&cfg, &res, &err), &err);
	DT_CHECK_INT_EQ(res.steps, 100);
	local_config(&cfg, two, 200);
	DT_CHECK_OK(dt_train_local(&cfg, &res, &err), &err);
	DT_CHECK_INT_EQ(res.steps, 200);

	char a[700], b[700];
	snprintf(a, sizeof(a), "%s/model.ckpt-200.safetensors", one);
	snprintf(b, sizeof(b), "%s/model.ckpt-200.safetensors", two);
	size_t la, lb;
	char *fa = slurp(a, &la), *fb = slurp(b, &lb);
	DT_CHECK_INT_EQ(la, lb);
	DT_CHECK(memcmp(fa, fb, la) == 0);
	free(fa);
	free(fb);
	/* The 100-step save in "two" was the end of the first run, so it must also equal one's. */
	snprintf(a, sizeof(a), "%s/model.ckpt-100.safetensors", one);
	snprintf(b, sizeof(b), "%s/model.ckpt-100.safetensors", two);
	fa = slurp(a, &la);
	fb = slurp(b, &lb);
	DT_CHECK(la == lb && memcmp(fa, fb, la) == 0);
	free(fa);
	free(fb);

	/* Resuming at train_steps trains nothing and leaves the files alone. */
	struct stat before, after;
	DT_CHECK(stat(b, &before) == 0);
	DT_CHECK_OK(dt_train_local(&cfg, &res, &err), &err);
	DT_CHECK_INT_EQ(res.steps, 200);
	DT_CHECK_INT_EQ(res.train_seconds, 0);
	DT_CHECK(stat(b, &after) == 0);
	DT_CHECK(before.st_mtim.tv_sec == after.st_mtim.tv_sec && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec);
}

/* Dropout and input position matter: a resume that reset them would differ. */
DT_TEST_TIMEOUT(ckpt, resume_without_rng_and_position_would_differ, 120)
{
	char one[600], two[600];
	dt_test_path(one, sizeof(one), "one");
	dt_test_path(two, sizeof(two), "two");
	struct dt_train_config cfg;
	struct dt_train_result res;
	struct dt_err err = DT_ERR_INIT;
	local_config(&cfg, one, 100);
	DT_CHECK_OK(dt_train_local(&cfg, &res, &err), &err);
	local_config(&cfg, two, 50);
	DT_CHECK_OK(dt_train_local(&cfg, &res, &err), &err);
	/* Rewrite step 50 of "two" without its RNG and position (as a naive saver would). */
	struct small s;
	memset(&s, 0, sizeof(s));
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &s.hp, &err), &err);
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &s.hp, 28, 28, 1, 10, 4, &s.m, &err), &err);
	DT_CHECK_OK(dt_optimizer_init(&s.opt, &s.hp, dt_model_num_params(s.m), &err), &err);
	dt_ckpt_contents_for_model(&s.c, s.m);
	dt_ckpt_contents_set_optimizer(&s.c, &s.opt);
	char p[700];
	snprintf(p, sizeof(p), "%s/model.ckpt-50.safetensors", two);
	DT_CHECK_OK(dt_ckpt_load(p, &s.c, &err), &err);
	s.c.has_rng = 0;
	s.c.pipeline_epoch = s.c.pipeline_offset = 0;
	DT_CHECK_OK(dt_ckpt_save(two, &s.c, 5, NULL, &err), &err);
	local_config(&cfg, two, 100);
	DT_CHECK_OK(dt_train_local(&cfg, &res, &err), &err);
	char a[700], b[700];
	snprintf(a, sizeof(a), "%s/model.ckpt-100.safetensors", one);
	snprintf(b, sizeof(b), "%s/model.ckpt-100.safetensors", two);
	size_t la, lb;
	char *fa = slurp(a, &la), *fb = slurp(b, &lb);
	DT_CHECK(la != lb || memcmp(fa, fb, la) != 0);
	free(fa);
	free(fb);
	small_release(&s);
}

DT_TEST(ckpt, saver_cadence_follows_tensorflows_rules)
{
	struct dt_saver s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_saver_init(&s, "d", 100, 5, 5, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "mutually exclusive");
	DT_CHECK_INT_EQ(dt_saver_init(&s, "d", 0, 0, -1, &err), DT_USAGE);
	DT_CHECK_INT_EQ(dt_saver_init(&s, "", 10, 0, 5, &err), DT_USAGE);

	DT_CHECK_OK(dt_saver_init(&s, dt_test_tmpdir(), 0, 0, 5, &err), &err); /* neither: every 600 s */
	DT_CHECK_NEAR(s.every_secs, 600, 0);
	DT_CHECK(!dt_saver_due(&s, 1));
	s.last_ns -= 601 * DT_NSEC_PER_SEC;
	DT_CHECK(dt_saver_due(&s, 2));
	dt_saver_mark(&s, 2);
	DT_CHECK(!dt_saver_due(&s, 3));
	dt_saver_release(&s);

	DT_CHECK_OK(dt_saver_init(&s, dt_test_tmpdir(), 100, 0, 5, &err), &err);
	DT_CHECK(!dt_saver_due(&s, 99));
	DT_CHECK(dt_saver_due(&s, 100));
	DT_CHECK(!dt_saver_due(&s, 150));
	dt_saver_mark(&s, 200); /* restored at 200: not due again at 200 */
	DT_CHECK(!dt_saver_due(&s, 200));
	DT_CHECK(dt_saver_due(&s, 300));
	dt_saver_release(&s);
	dt_saver_release(NULL);

	/* An output dir that cannot be made fails at once. */
	char file[600], below[700];
	dt_test_path(file, sizeof(file), "a-file");
	dt_test_write_file(file, "x", 1);
	snprintf(below, sizeof(below), "%s/sub", file);
	DT_CHECK_INT_EQ(dt_saver_init(&s, below, 10, 0, 5, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot use output dir");
}
