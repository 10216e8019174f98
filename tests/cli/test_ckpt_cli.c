/* Checkpoints end to end through the dtrain program: `dtrain train
 * --output_dir` saves and resumes, `dtrain ckpt inspect|verify`, and the bad
 * cases (corrupt state file, different model, flipped byte, flag errors)
 * with their messages and exit codes. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dt_test.h"

/* `dtrain train` on the synthetic problem with the mlp, a few steps. */
static void train(struct dt_run *r, const char *dir, const char *steps, const char *const *extra,
		  const char *const *env)
{
	char out[700], st[64];
	snprintf(out, sizeof(out), "--output_dir=%s", dir);
	snprintf(st, sizeof(st), "--train_steps=%s", steps);
	const char *argv[24] = { "dtrain", "train", "--problem=synthetic", "--model=mlp", st, "--noeval",
				 "--save_checkpoints_steps=10", "--log_every=0" };
	int n = 8;
	if (dir)
		argv[n++] = out;
	for (const char *const *e = extra; e && *e && n < 23; e++)
		argv[n++] = *e;
	argv[n] = NULL;
	dt_test_run(r, argv, env, 120);
	DT_CHECK(!r->timed_out);
}

static void ckpt(struct dt_run *r, const char *action, const char *path)
{
	dt_test_run(r, (const char *[]){ "dtrain", "ckpt", action, path, NULL }, NULL, 60);
	DT_CHECK(!r->timed_out);
}

static void expect(struct dt_run *r, int code, const char *needle_err)
{
	if (r->exit_code != code || (needle_err && !strstr(r->err, needle_err)))
		fprintf(stderr, "stdout:\n%s\nstderr:\n%s\n", r->out, r->err);
	DT_CHECK_INT_EQ(r->exit_code, code);
	if (needle_err)
		DT_CHECK_CONTAINS(r->err, needle_err);
}

static void flip_byte(const char *path, long from_end)
{
	int fd = open(path, O_RDWR);
	DT_CHECK(fd >= 0);
	off_t size = lseek(fd, 0, SEEK_END);
	unsigned char b;
	DT_CHECK(pread(fd, &b, 1, size - from_end) == 1);
	b ^= 1;
	DT_CHECK(pwrite(fd, &b, 1, size - from_end) == 1);
	close(fd);
}

DT_TEST_TIMEOUT(ckpt_cli, train_twice_continues_instead_of_restarting, 120)
{
	char dir[600], path[700];
	dt_test_path(dir, sizeof(dir), "out");
	struct dt_run r;
	train(&r, dir, "20", NULL, NULL);
	expect(&r, 0, "no checkpoint in");
	DT_CHECK_CONTAINS(r.err, "saved checkpoint for step 10 to ");
	DT_CHECK_CONTAINS(r.err, "saved checkpoint for step 20 to ");
	DT_CHECK_CONTAINS(r.err, " MiB, ");
	dt_run_release(&r);

	train(&r, dir, "30", NULL, NULL);
	expect(&r, 0, "restored step 20 from ");
	DT_CHECK_CONTAINS(r.err, "saved checkpoint for step 30");
	DT_CHECK(!strstr(r.err, "saved checkpoint for step 10"));
	dt_run_release(&r);

	/* At train_steps already: nothing to train, nothing saved, exit 0. */
	train(&r, dir, "30", NULL, NULL);
	expect(&r, 0, "nothing to train");
	DT_CHECK(!strstr(r.err, "saved checkpoint"));
	dt_run_release(&r);

	snprintf(path, sizeof(path), "%s/model.ckpt-30.safetensors", dir);
	DT_CHECK(access(path, F_OK) == 0);
	snprintf(path, sizeof(path), "%s/checkpoint", dir);
	struct dt_run c;
	dt_test_run(&c, (const char *[]){ "/bin/cat", path, NULL }, NULL, 10);
	DT_CHECK_CONTAINS(c.out, "model_checkpoint_path: \"model.ckpt-30.safetensors\"\n");
	DT_CHECK_CONTAINS(c.out, "all_model_checkpoint_paths: \"model.ckpt-10.safetensors\"\n");
	DT_CHECK_CONTAINS(c.out, "all_model_checkpoint_timestamps: ");
	dt_run_release(&c);
}

DT_TEST_TIMEOUT(ckpt_cli, inspect_and_verify_print_and_exit_codes, 120)
{
	char dir[600], path[700];
	dt_test_path(dir, sizeof(dir), "out");
	struct dt_run r;
	train(&r, dir, "10", NULL, NULL);
	expect(&r, 0, NULL);
	dt_run_release(&r);
	snprintf(path, sizeof(path), "%s/model.ckpt-10.safetensors", dir);

	ckpt(&r, "inspect", dir); /* a directory: its latest */
	expect(&r, 0, NULL);
	DT_CHECK_CONTAINS(r.out, "checkpoint: ");
	DT_CHECK_CONTAINS(r.out, "model.ckpt-10.safetensors");
	DT_CHECK_CONTAINS(r.out, "global_step: 10\n");
	DT_CHECK_CONTAINS(r.out, "dense_1/kernel");
	DT_CHECK_CONTAINS(r.out, "[784, 256]");
	DT_CHECK_CONTAINS(r.out, "dense_1/kernel/Adam_1");
	DT_CHECK_CONTAINS(r.out, "F32");
	DT_CHECK_CONTAINS(r.out, "I64");
	DT_CHECK_CONTAINS(r.out, "size: ");
	DT_CHECK_CONTAINS(r.out, "metadata:\n  format: dtrain.ckpt.v2\n");
	DT_CHECK_CONTAINS(r.out, "  hparams: {\"batch_size\":64,");
	DT_CHECK_CONTAINS(r.out, "verify: ok\n");
	dt_run_release(&r);

	ckpt(&r, "verify", path);
	expect(&r, 0, NULL);
	DT_CHECK_CONTAINS(r.out, "ok: ");
	DT_CHECK_CONTAINS(r.out, "(step 10, 19 tensors, crc32c ");
	DT_CHECK_CONTAINS(r.out, ", header_crc32c ");
	dt_run_release(&r);

	flip_byte(path, 5000);
	ckpt(&r, "verify", path);
	expect(&r, 4, "crc mismatch");
	DT_CHECK_STR_EQ(r.out, "");
	dt_run_release(&r);
	ckpt(&r, "inspect", path);
	expect(&r, 4, "crc mismatch");
	DT_CHECK_CONTAINS(r.out, "verify: FAILED: ");
	dt_run_release(&r);

	/* Not a safetensors file; no such file; an empty dir; usage errors. */
	char junk[700];
	snprintf(junk, sizeof(junk), "%s/junk", dir);
	dt_test_write_file(junk, "hello, world", 12);
	ckpt(&r, "verify", junk);
	expect(&r, 4, "is larger than the 100000000 allowed");
	dt_run_release(&r);
	dt_test_write_file(junk, "\x10\0\0\0\0\0\0\0{}", 10);
	ckpt(&r, "verify", junk);
	expect(&r, 4, "runs past the end");
	dt_run_release(&r);
	dt_test_write_file(junk, "\x02\0\0\0\0\0\0\0{}", 10);
	ckpt(&r, "verify", junk);
	expect(&r, 4, "not a dtrain checkpoint");
	dt_run_release(&r);
	/* Another writer's valid safetensors file: inspect shows it and exits 0, verify refuses. */
	static const char other[] = "\x40\0\0\0\0\0\0\0{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"
				    "          " /* 10 spaces: N = 64 */ "\0\0\x80\x3f\0\0\0\xc0";
	dt_test_write_file(junk, other, sizeof(other) - 1);
	ckpt(&r, "inspect", junk);
	expect(&r, 0, NULL);
	DT_CHECK_CONTAINS(r.out, "  w ");
	DT_CHECK_CONTAINS(r.out, "[2]");
	DT_CHECK_CONTAINS(r.out, "not a dtrain checkpoint");
	dt_run_release(&r);
	ckpt(&r, "verify", junk);
	expect(&r, 4, "not a dtrain checkpoint");
	dt_run_release(&r);
	ckpt(&r, "verify", "/nonexistent/model.ckpt-1.safetensors");
	expect(&r, 4, "cannot open");
	dt_run_release(&r);
	ckpt(&r, "inspect", dt_test_tmpdir());
	expect(&r, 4, "no checkpoint in");
	dt_run_release(&r);
	ckpt(&r, "frobnicate", path);
	expect(&r, 2, "unknown ckpt action 'frobnicate'");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "ckpt", "verify", NULL }, NULL, 30);
	expect(&r, 2, "expected one PATH");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "ckpt", "--help", NULL }, NULL, 30);
	expect(&r, 0, NULL);
	DT_CHECK_CONTAINS(r.out, "inspect PATH");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(ckpt_cli, flipped_newest_falls_back_and_corrupt_state_exits_4, 120)
{
	char dir[600], path[700];
	dt_test_path(dir, sizeof(dir), "out");
	struct dt_run r;
	train(&r, dir, "20", NULL, NULL);
	expect(&r, 0, NULL);
	dt_run_release(&r);
	snprintf(path, sizeof(path), "%s/model.ckpt-20.safetensors", dir);
	flip_byte(path, 77);
	train(&r, dir, "20", NULL, NULL);
	expect(&r, 0, "falling back to the previous one");
	DT_CHECK_CONTAINS(r.err, "crc mismatch");
	DT_CHECK_CONTAINS(r.err, "restored step 10 from ");
	DT_CHECK_CONTAINS(r.err, "saved checkpoint for step 20");
	dt_run_release(&r);
	ckpt(&r, "verify", path); /* rewritten whole by the resumed run */
	expect(&r, 0, NULL);
	dt_run_release(&r);

	snprintf(path, sizeof(path), "%s/checkpoint", dir);
	dt_test_write_file(path, "model_checkpoint_path: model.ckpt-20\n", 37);
	train(&r, dir, "30", NULL, NULL);
	expect(&r, 4, "error: cannot parse the checkpoint state file");
	DT_CHECK_CONTAINS(r.err, "hint: fix or remove");
	DT_CHECK(!strstr(r.err, "training from scratch"));
	dt_run_release(&r);
}

/* 40 single-bit flips at random bytes of a real checkpoint's JSON header
 * (seeded, the seed printed): `dtrain ckpt verify` exits 4 naming the file
 * every time; training restarted over a damaged tensor name (which used to
 * exit 4 "different model") falls back to the previous checkpoint and says
 * why. */
DT_TEST_TIMEOUT(ckpt_cli, forty_header_bit_flips_fail_verify_and_training_falls_back, 240)
{
	const char *seed_env = getenv("DTRAIN_TEST_SEED");
	unsigned long long seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 0) : 421;
	fprintf(stderr, "seed %llu (DTRAIN_TEST_SEED=%llu reproduces)\n", seed, seed);
	char dir[600], path[700], copy[720];
	dt_test_path(dir, sizeof(dir), "out");
	struct dt_run r;
	train(&r, dir, "20", NULL, NULL);
	expect(&r, 0, NULL);
	dt_run_release(&r);
	snprintf(path, sizeof(path), "%s/model.ckpt-20.safetensors", dir);
	snprintf(copy, sizeof(copy), "%s/damaged.safetensors", dir);
	FILE *f = fopen(path, "rb");
	DT_CHECK(f != NULL);
	unsigned char len8[8];
	DT_CHECK_INT_EQ(fread(len8, 1, 8, f), 8);
	uint64_t n = 0;
	for (int i = 0; i < 8; i++)
		n |= (uint64_t)len8[i] << (8 * i);
	char *head = malloc((size_t)n + 8);
	DT_CHECK(head && fseek(f, 0, SEEK_SET) == 0 && fread(head, 1, (size_t)n + 8, f) == (size_t)n + 8);
	fclose(f);
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (int i = 0; i < 40; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
		uint64_t at = 8 + x % n;
		int bit = (int)(x >> 59) % 8;
		char cmd[1600];
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", path, copy);
		DT_CHECK_INT_EQ(system(cmd), 0);
		int fd = open(copy, O_RDWR);
		DT_CHECK(fd >= 0);
		unsigned char b = (unsigned char)head[at] ^ (unsigned char)(1u << bit);
		DT_CHECK(pwrite(fd, &b, 1, (off_t)at) == 1);
		close(fd);
		fprintf(stderr, "flip %d: byte %llu bit %d\n", i, (unsigned long long)at, bit);
		ckpt(&r, "verify", copy);
		expect(&r, 4, "damaged.safetensors");
		DT_CHECK_STR_EQ(r.out, "");
		DT_CHECK_CONTAINS(r.err, "error: ");
		dt_run_release(&r);
	}

	char *name = memmem(head + 8, (size_t)n, "\"dense_2/kernel\"", 16);
	DT_CHECK(name != NULL);
	int fd = open(path, O_RDWR);
	DT_CHECK(fd >= 0);
	unsigned char b = (unsigned char)(name[7] ^ 4); /* '2' -> '6': dense_6/kernel */
	DT_CHECK(pwrite(fd, &b, 1, (off_t)(name - head + 7)) == 1);
	close(fd);
	free(head);
	train(&r, dir, "20", NULL, NULL);
	expect(&r, 0, "falling back to the previous one");
	DT_CHECK_CONTAINS(r.err, "header crc mismatch");
	DT_CHECK_CONTAINS(r.err, "restored step 10 from ");
	DT_CHECK(!strstr(r.err, "different model"));
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(ckpt_cli, different_model_is_refused_with_both_shapes, 120)
{
	char dir[600];
	dt_test_path(dir, sizeof(dir), "out");
	struct dt_run r;
	const char *lenet[] = { "--hparams=model=lenet", NULL };
	train(&r, dir, "2", lenet, NULL);
	expect(&r, 0, NULL);
	dt_run_release(&r);
	const char *cnn[] = { "--hparams=model=cnn", NULL };
	train(&r, dir, "4", cnn, NULL);
	expect(&r, 4, "variable 'conv_1/kernel' has shape [5, 5, 1, 6] F32 in the checkpoint but");
	DT_CHECK_CONTAINS(r.err, "is of a different model");
	DT_CHECK_CONTAINS(r.err, "hint: ");
	dt_run_release(&r);
	const char *mlp[] = { "--hparams=model=mlp", NULL };
	train(&r, dir, "4", mlp, NULL);
	expect(&r, 4, "checkpoint '");
	DT_CHECK_CONTAINS(r.err, "model.ckpt-2.safetensors' is of a different model: variable 'dense_1/kernel' has shape "
				 "[400, 120] F32 in the checkpoint but [784, 256] F32 in this model");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(ckpt_cli, output_dir_from_environment_and_flag_errors, 120)
{
	char dir[600], env[700], path[700];
	dt_test_path(dir, sizeof(dir), "from-env");
	snprintf(env, sizeof(env), "OUTPUT_DIR=%s", dir);
	struct dt_run r;
	train(&r, NULL, "10", NULL, (const char *[]){ env, NULL });
	expect(&r, 0, NULL);
	dt_run_release(&r);
	snprintf(path, sizeof(path), "%s/model.ckpt-10.safetensors", dir);
	DT_CHECK(access(path, F_OK) == 0);

	const char *both[] = { "--save_checkpoints_secs=5", NULL };
	train(&r, dir, "10", both, NULL);
	expect(&r, 2, "--save_checkpoints_steps and --save_checkpoints_secs are mutually exclusive");
	dt_run_release(&r);
	const char *neg[] = { "--keep_checkpoint_max=-1", NULL };
	train(&r, dir, "10", neg, NULL);
	expect(&r, 2, "--keep_checkpoint_max must not be negative");
	dt_run_release(&r);
	const char *negs[] = { "--save_summary_steps=-3", NULL };
	train(&r, dir, "10", negs, NULL);
	expect(&r, 2, "--save_summary_steps must not be negative");
	dt_run_release(&r);

	/* No output dir at all: no checkpoint anywhere, as before. */
	train(&r, NULL, "3", NULL, NULL);
	expect(&r, 0, NULL);
	DT_CHECK(!strstr(r.err, "saved checkpoint"));
	dt_run_release(&r);
}
