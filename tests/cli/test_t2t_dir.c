/* Any t2t data dir trains by its problem's name (data/t2t_dir.h), and
 * seed 000's commands as written: data dirs of made-up problems written by
 * an independent writer (tests/tools/t2t_files.py `dir`: python3-protobuf
 * with the test's own t2t_example.proto, TFRecord framing by hand, PNGs by
 * hand) with t2t's file names, for a translation, a language model, an
 * image classification and a text classification problem; t2t's vocabulary
 * names; the errors of a missing problem, a missing or mismatched
 * vocabulary and a shard of another kind; and `--model=transformer
 * --hparams_set=transformer_base --problem=translate_ende_wmt32k` alone,
 * then in both of seed 000's layouts from `dtrain make-configs`' lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "cli_util.h"
#include "cluster_procs.h"

#define TOOL "tests/tools/t2t_files.py"
#define VOCAB100 "tests/fixtures/subword/vocab.corpus.100.subwords" /* t2t's own file: 106 ids */

/* Skips the test when python3-protobuf or protoc is missing. */
static void need_protobuf(void)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "-c", "import google.protobuf", NULL }, NULL, 30);
	const int ok = r.exit_code == 0;
	dt_run_release(&r);
	if (!ok)
		DT_SKIP("python3-protobuf missing (scripts/install-deps.sh installs it)");
	dt_test_run(&r, (const char *[]){ "protoc", "--version", NULL }, NULL, 30);
	const int protoc = r.exit_code == 0;
	dt_run_release(&r);
	if (!protoc)
		DT_SKIP("protoc missing (protobuf-compiler; scripts/install-deps.sh installs it)");
}

/* Writes a data dir of `kind` for `problem` into the test's dir/<sub>
 * (path into dir), with VOCAB100 copied as vocab_name unless NULL. */
static void write_dir(char *dir, size_t cap, const char *sub, const char *problem, const char *kind,
		      const char *vocab_name)
{
	dt_test_path(dir, cap, sub);
	struct dt_run r;
	if (vocab_name)
		dt_test_run(&r, (const char *[]){ "/usr/bin/python3", TOOL, "dir", dir, problem, kind, "1", VOCAB100,
						 vocab_name, NULL }, NULL, 60);
	else
		dt_test_run(&r, (const char *[]){ "/usr/bin/python3", TOOL, "dir", dir, problem, kind, "1", NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

/* The loss of the progress line "step <step>/..." in text; -1 if none. */
static double loss_at(const char *text, int step)
{
	char want[64];
	snprintf(want, sizeof(want), "step %d/", step);
	const char *p = strstr(text, want);
	const char *l = p ? strstr(p, " loss ") : NULL;
	return l ? atof(l + 6) : -1;
}

static void train(struct dt_run *r, const char *model, const char *set, const char *problem, const char *dir,
		  const char *extra)
{
	char m[64], s[96], p[160], d[600];
	snprintf(m, sizeof(m), "--model=%s", model);
	snprintf(s, sizeof(s), "--hparams_set=%s", set);
	snprintf(p, sizeof(p), "--problem=%s", problem);
	snprintf(d, sizeof(d), "--data_dir=%s", dir);
	dt_test_run(r, (const char *[]){ "dtrain", "train", m, s, p, d, "--train_steps=150", "--log_every=50",
					extra ? extra : "--seed=1", NULL }, NULL, 100);
}

#define TEXT_HP "--hparams=batch_size=1024,learning_rate_warmup_steps=50,learning_rate_constant=0.5"

DT_TEST_TIMEOUT(t2t_dir, a_translation_problem_trains_by_its_name_and_learns, 60)
{
	need_protobuf();
	char dir[512];
	write_dir(dir, sizeof(dir), "d", "translate_xxyy_madeup8k", "translate", "vocab.translate_xxyy_madeup8k.8192.subwords");
	struct dt_run r;
	train(&r, "transformer", "transformer_test", "translate_xxyy_madeup8k", dir, TEXT_HP);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "t2t data dir: problem translate_xxyy_madeup8k is text to text (int64 inputs and "
				 "targets); 106 subwords from 'vocab.translate_xxyy_madeup8k.8192.subwords'; shards: 2 "
				 "train, 1 dev, 0 test in ");
	DT_CHECK_CONTAINS(r.err, "train split: 2000 examples from 2 t2t data file(s)");
	DT_CHECK_CONTAINS(r.err, "test split: 200 examples from 1 t2t data file(s) (translate_xxyy_madeup8k-dev-00000-of-00001)");
	const double first = loss_at(r.err, 50), last = loss_at(r.err, 150);
	fprintf(stderr, "loss %.4f at step 50, %.4f at step 150\n", first, last);
	DT_CHECK(first > 0 && last > 0 && last < 0.95 * first);
	DT_CHECK_CONTAINS(r.out, "eval (test split, 200 examples) at global step 150: accuracy = ");
	DT_CHECK_CONTAINS(r.out, "approx_bleu_score = ");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(t2t_dir, a_language_model_trains_by_its_name_and_learns, 60)
{
	need_protobuf();
	char dir[512];
	write_dir(dir, sizeof(dir), "d", "languagemodel_madeup8k", "lm", "vocab.languagemodel_madeup8k.8192.subwords");
	struct dt_run r;
	train(&r, "transformer", "transformer_test", "languagemodel_madeup8k", dir, TEXT_HP);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "problem languagemodel_madeup8k is language model (int64 targets alone); 106 subwords");
	const double first = loss_at(r.err, 50), last = loss_at(r.err, 150);
	fprintf(stderr, "loss %.4f at step 50, %.4f at step 150\n", first, last);
	DT_CHECK(first > 0 && last > 0 && last < 0.7 * first); /* runs of consecutive ids: easy to learn */
	const char *a = strstr(r.out, "accuracy = ");
	DT_CHECK(a && atof(a + 11) > 0.3); /* chance: about 1/100 */
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(t2t_dir, an_image_problem_trains_by_its_name_and_beats_chance, 60)
{
	need_protobuf();
	char dir[512];
	write_dir(dir, sizeof(dir), "d", "image_madeup_quadrants", "image", NULL);
	struct dt_run r;
	train(&r, "mlp", "mlp_base", "image_madeup_quadrants", dir, NULL);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "problem image_madeup_quadrants is image classification (image/encoded, "
				 "image/class/label); 4 classes, 8x8x1 images; shards: 2 train, 1 dev, 0 test");
	const char *a = strstr(r.out, "eval (test split, 200 examples) at global step 150: accuracy = ");
	DT_CHECK(a != NULL);
	if (a)
		DT_CHECK(atof(strstr(a, "accuracy = ") + 11) > 0.6); /* chance: 0.25 */
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(t2t_dir, text_classification_says_it_is_not_built, 60)
{
	need_protobuf();
	char dir[512];
	write_dir(dir, sizeof(dir), "d", "sentiment_madeup", "textclass", "vocab.sentiment_madeup.8192.subwords");
	struct dt_run r;
	train(&r, "transformer", "transformer_test", "sentiment_madeup", dir, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: problem 'sentiment_madeup' is text classification (int64 inputs, "
				 "one-element targets): not built yet");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(t2t_dir, vocabularies_by_t2ts_names_bytes_and_mismatches, 60)
{
	need_protobuf();
	char dir[512], wide[512];
	/* older t2t's name for translate_PAIR_*: vocab.PAIR.SIZE */
	write_dir(dir, sizeof(dir), "old", "translate_xxyy_wmt32k", "translate", "vocab.xxyy.32768");
	struct dt_run r;
	char d[600];
	snprintf(d, sizeof(d), "--data_dir=%s", dir);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=translate_xxyy_wmt32k", d, "--train_steps=2", "--noeval", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "; 106 subwords from 'vocab.xxyy.32768';");
	dt_run_release(&r);
	/* no vocabulary, ids in the byte range: t2t's byte-level encoder */
	write_dir(dir, sizeof(dir), "bytes", "translate_xxyy_chars", "translate", NULL);
	snprintf(d, sizeof(d), "--data_dir=%s", dir);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=translate_xxyy_chars", d, "--train_steps=2", "--noeval", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "; byte-level, 258 ids (no vocabulary file: looked for '");
	dt_run_release(&r);
	/* ids past the byte range and no vocabulary: exit 2 naming what was looked for */
	write_dir(wide, sizeof(wide), "wide", "translate_xxyy_wide", "wide", NULL);
	snprintf(d, sizeof(d), "--data_dir=%s", wide);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=translate_xxyy_wide", d, "--train_steps=2", "--noeval", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: problem 'translate_xxyy_wide': its shards hold ids up to 299 and no "
				 "vocabulary was found (looked for '");
	DT_CHECK_CONTAINS(r.err, "/vocab.translate_xxyy_wide.SIZE.subwords' and '");
	DT_CHECK_CONTAINS(r.err, "hint: pass --vocab_file=PATH");
	dt_run_release(&r);
	/* a vocabulary smaller than the shards' ids: exit 4 naming file, record and id */
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=translate_xxyy_wide", d, "--vocab_file=" VOCAB100, "--train_steps=2",
					 "--noeval", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "translate_xxyy_wide-train-00000-of-00002' record 0: feature 'inputs' id ");
	DT_CHECK_CONTAINS(r.err, "is not in the vocabulary of 106 ids");
	DT_CHECK_CONTAINS(r.err, "hint: the vocabulary has 106 ids: is it the one these shards were written with?");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(t2t_dir, unknown_names_and_shards_of_another_kind_are_errors, 60)
{
	need_protobuf();
	char dir[512], lm[512];
	write_dir(dir, sizeof(dir), "d", "translate_xxyy_madeup8k", "translate", "vocab.translate_xxyy_madeup8k.8192.subwords");
	struct dt_run r;
	char d[600];
	snprintf(d, sizeof(d), "--data_dir=%s", dir);
	/* a name with neither a built-in entry nor shards: exit 2 naming the files and the commands */
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--problem=translate_ende_wmt32k", d,
					 "--train_steps=1", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: unknown problem 'translate_ende_wmt32k': no built-in entry, and '");
	DT_CHECK_CONTAINS(r.err, "holds no t2t shards 'translate_ende_wmt32k-train-NNNNN-of-NNNNN'");
	DT_CHECK_CONTAINS(r.err, "`t2t-datagen --problem=translate_ende_wmt32k --data_dir=DIR --tmp_dir=TMP`");
	DT_CHECK_CONTAINS(r.err, "`dtrain datagen --problem=NAME --data_dir=DIR` writes those of ");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--problem=translate_ende_wmt32k",
					 "--train_steps=1", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: unknown problem 'translate_ende_wmt32k' (valid problems: ");
	DT_CHECK_CONTAINS(r.err, "vocab.translate_ende_wmt32k.SIZE.subwords");
	dt_run_release(&r);
	/* a language model's shard where the dev shard should be: exit 4 saying so */
	write_dir(lm, sizeof(lm), "lm", "translate_xxyy_madeup8k", "lm", NULL);
	char mv[1400];
	snprintf(mv, sizeof(mv), "cp '%s/translate_xxyy_madeup8k-dev-00000-of-00001' '%s/'", lm, dir);
	dt_test_run(&r, (const char *[]){ "/bin/sh", "-c", mv, NULL }, NULL, 10);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=translate_xxyy_madeup8k", d, "--train_steps=1", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "translate_xxyy_madeup8k-dev-00000-of-00001' holds language model (int64 targets "
				 "alone) examples but the training shards hold text to text (int64 inputs and targets) ones");
	dt_run_release(&r);
}

/* ---- seed 000's commands -------------------------------------------------------------- */

/* t2t's transformer_base made small: the seed's commands plus this and --train_steps only. */
#define SEED_HP "--hparams=num_hidden_layers=1,hidden_size=16,filter_size=32,num_heads=2,batch_size=512," \
		"learning_rate_warmup_steps=20"
#define SEED_FLAGS "--model=transformer --hparams_set=transformer_base --problem=translate_ende_wmt32k "

static void seed_dir(char *dir, size_t cap)
{
	write_dir(dir, cap, "wmt", "translate_ende_wmt32k", "translate", "vocab.translate_ende_wmt32k.32768.subwords");
}

DT_TEST_TIMEOUT(t2t_dir, seed_000_command_trains_translate_ende_wmt32k_from_its_data_dir, 60)
{
	need_protobuf();
	char dir[512], d[600];
	seed_dir(dir, sizeof(dir));
	snprintf(d, sizeof(d), "--data_dir=%s", dir);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_base",
					 "--problem=translate_ende_wmt32k", d, SEED_HP, "--train_steps=20", NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "problem translate_ende_wmt32k is text to text");
	DT_CHECK_CONTAINS(r.err, "(constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size)");
	DT_CHECK_CONTAINS(r.out, "eval (test split, 200 examples) at global step 20: ");
	dt_run_release(&r);
}

/* The lines of `dtrain make-configs` as seed 000 pastes them, each task with
 * the seed's model, set and problem (plus the data dir, the size override
 * and the steps); every task exits 0 and the head says it trained. */
static void seed_layout(const char *masters, const char *ps, int tasks, const char *head, const char *assuming,
			const char *head_says)
{
	char dir[512];
	seed_dir(dir, sizeof(dir));
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "make-configs", masters, ps, NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, assuming);
	char flags[1200];
	snprintf(flags, sizeof(flags), SEED_FLAGS "--data_dir=%s " SEED_HP " --train_steps=20 --log_every=10", dir);
	struct cluster c;
	int h = cluster_start_make_configs(&c, r.out, tasks, flags, head);
	dt_run_release(&r);
	DT_CHECK_INT_EQ(c.n, tasks);
	DT_CHECK(h >= 0);
	EXPECT_EXIT(&c, &c.tasks[h], 0, 90);
	for (int i = 0; i < c.n; i++)
		EXPECT_EXIT(&c, &c.tasks[i], 0, 30);
	/* the tasks that train read the shards (in the sync layout the ps tasks do) */
	int read = 0;
	for (int i = 0; i < c.n; i++) {
		char *e = task_read(&c.tasks[i], 1);
		read += strstr(e, "t2t data dir: problem translate_ende_wmt32k is text to text") != NULL;
		free(e);
	}
	DT_CHECK(read >= 2);
	char *e = task_read(&c.tasks[h], 1);
	DT_CHECK_CONTAINS(e, head_says);
	free(e);
}

DT_TEST_TIMEOUT(t2t_dir, seed_000_sync_layout_trains_translate_ende_wmt32k, 120)
{
	need_protobuf();
	int ports[3];
	cli_free_ports(ports, 3);
	char masters[64], ps[96];
	snprintf(masters, sizeof(masters), "--masters=127.0.0.1:%d", ports[0]);
	snprintf(ps, sizeof(ps), "--ps=127.0.0.1:%d,127.0.0.1:%d", ports[1], ports[2]);
	seed_layout(masters, ps, 3, "master", "Assuming SYNC", "ended the run on 2 std server(s) at step 20");
}

DT_TEST_TIMEOUT(t2t_dir, seed_000_async_layout_trains_and_worker_gpu_is_a_notice, 120)
{
	need_protobuf();
	int ports[4];
	cli_free_ports(ports, 4);
	char masters[96], ps[96];
	snprintf(masters, sizeof(masters), "--masters=127.0.0.1:%d,127.0.0.1:%d", ports[0], ports[1]);
	snprintf(ps, sizeof(ps), "--ps=127.0.0.1:%d,127.0.0.1:%d", ports[2], ports[3]);
	seed_layout(masters, ps, 4, "chief", "Assuming ASYNC",
		    "--worker_gpu=1: dtrain has no GPU kernels; this task computes on the CPU\n");
}

/* --help-hparams prints a set's values as JSON (stdout, exit 0): t2t's
 * transformer_base as seed 000 names it, --hparams applied; a bad set is
 * exit 2. And seed 000's --worker_gpu=1 on one process: a notice, not an error. */
DT_TEST_TIMEOUT(t2t_dir, seed_000_hparams_set_prints_with_help_hparams, 30)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_base",
					 "--help-hparams", NULL }, NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "{\n  \"batch_size\": 4096,\n");
	DT_CHECK_CONTAINS(r.out, "\"lr_schedule\": \"constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size\",\n");
	DT_CHECK_CONTAINS(r.out, "\"warmup_steps\": 8000,\n");
	DT_CHECK_CONTAINS(r.out, "\"model\": \"transformer\",\n");
	DT_CHECK_CONTAINS(r.out, "\"hidden_size\": 512,\n  \"filter_size\": 2048,\n  \"num_heads\": 8,\n"
				 "  \"num_hidden_layers\": 6,\n");
	DT_CHECK_CONTAINS(r.out, "\"layer_prepostprocess_dropout\": 0.1,\n  \"layer_preprocess_sequence\": \"n\",\n"
				 "  \"layer_postprocess_sequence\": \"da\",\n  \"label_smoothing\": 0.1,\n"
				 "  \"learning_rate_constant\": 2,\n");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--hparams_set=transformer_big", "--help-hparams",
					 "--hparams=num_heads=4", NULL }, NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "\"batch_size\": 2048,\n");
	DT_CHECK_CONTAINS(r.out, "\"model\": \"transformer\",\n"); /* the set's, --model not given */
	DT_CHECK_CONTAINS(r.out, "\"hidden_size\": 1024,\n  \"filter_size\": 4096,\n  \"num_heads\": 4,\n");
	DT_CHECK_CONTAINS(r.out, "\"layer_prepostprocess_dropout\": 0.3,\n");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--hparams_set=transformer_bigg", "--help-hparams", NULL },
		    NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "error: unknown hparams set 'transformer_bigg' (did you mean 'transformer_big'?)");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=synthetic", "--train_steps=2",
					 "--worker_gpu=1", "--noeval", NULL }, NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "--worker_gpu=1: dtrain has no GPU kernels; this task computes on the CPU\n");
	dt_run_release(&r);
}

/* dtrain decode reads a data dir's problem too: its vocabulary encodes the
 * lines and decodes the output (t2t-decoder's --decode_from_file). */
DT_TEST_TIMEOUT(t2t_dir, decode_translates_a_file_with_the_data_dirs_vocabulary, 60)
{
	need_protobuf();
	char dir[512], out[512], in[600], to[600], d[600], o[600], f[700], t[700];
	write_dir(dir, sizeof(dir), "d", "translate_xxyy_madeup8k", "translate", "vocab.translate_xxyy_madeup8k.8192.subwords");
	dt_test_path(out, sizeof(out), "out");
	snprintf(d, sizeof(d), "--data_dir=%s", dir);
	snprintf(o, sizeof(o), "--output_dir=%s", out);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=translate_xxyy_madeup8k", d, o, "--train_steps=20", "--noeval", NULL },
		    NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	dt_test_path(in, sizeof(in), "in.txt");
	dt_test_path(to, sizeof(to), "out.txt");
	FILE *fp = fopen(in, "w");
	DT_CHECK(fp != NULL);
	fputs("the earth\nand god said\n", fp);
	fclose(fp);
	snprintf(f, sizeof(f), "--decode_from_file=%s", in);
	snprintf(t, sizeof(t), "--decode_to_file=%s", to);
	dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--hparams_set=transformer_test",
					 "--problem=translate_xxyy_madeup8k", d, o, f, t, NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "decoded 2 line(s) of '");
	dt_run_release(&r);
	/* an image problem is not decoded */
	char img[512], di[600];
	write_dir(img, sizeof(img), "img", "image_madeup_quadrants", "image", NULL);
	snprintf(di, sizeof(di), "--data_dir=%s", img);
	dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--problem=image_madeup_quadrants", di, o, f, NULL }, NULL,
		    60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "problem 'image_madeup_quadrants' holds images: dtrain decode decodes text problems");
	dt_run_release(&r);
}

/* transformer_base_v1 as t2t defines it: post-norm, the legacy noam
 * schedule; it learns a language model and decodes through the graph (the
 * fast decoder says to). */
DT_TEST_TIMEOUT(t2t_dir, transformer_base_v1_trains_post_norm_and_decodes_with_cache_0, 60)
{
	need_protobuf();
	char dir[512], out[512], in[600], d[600], o[600], f[700];
	write_dir(dir, sizeof(dir), "d", "languagemodel_madeup8k", "lm", "vocab.languagemodel_madeup8k.8192.subwords");
	dt_test_path(out, sizeof(out), "out");
	snprintf(d, sizeof(d), "--data_dir=%s", dir);
	snprintf(o, sizeof(o), "--output_dir=%s", out);
#define V1_HP "--hparams=num_hidden_layers=2,hidden_size=32,filter_size=64,num_heads=2,batch_size=1024," \
	      "learning_rate_warmup_steps=50"
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_base_v1",
					 "--problem=languagemodel_madeup8k", d, o, V1_HP, "--train_steps=150", "--log_every=50",
					 NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "adam lr 0.1 (legacy)");
	const double first = loss_at(r.err, 50), last = loss_at(r.err, 150);
	DT_CHECK(first > 0 && last > 0 && last < 0.7 * first);
	dt_run_release(&r);
	dt_test_path(in, sizeof(in), "prompts.txt");
	FILE *fp = fopen(in, "w");
	DT_CHECK(fp != NULL);
	fputs("the\n", fp);
	fclose(fp);
	snprintf(f, sizeof(f), "--decode_from_file=%s", in);
	dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--hparams_set=transformer_base_v1", V1_HP,
					 "--problem=languagemodel_madeup8k", d, o, f, NULL }, NULL, 60);
	DT_CHECK(r.exit_code != 0);
	DT_CHECK_CONTAINS(r.err, "a post-norm transformer (layer_postprocess_sequence=dan, transformer_base_v1's "
				 "layout) has no fast decoder");
	DT_CHECK_CONTAINS(r.err, "hint: decode through the whole graph: --decode_hparams=cache=0");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--hparams_set=transformer_base_v1", V1_HP,
					 "--problem=languagemodel_madeup8k", d, o, f, "--decode_hparams=cache=0", NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "decoded 1 line(s) of '");
	dt_run_release(&r);
}
