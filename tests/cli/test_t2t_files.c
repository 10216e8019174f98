/* t2t's data files through the CLI, checked by an independent reader and
 * writer (tests/tools/t2t_files.py: python3-protobuf with the test's own
 * t2t_example.proto, TFRecord framing and CRC-32C by hand): `dtrain datagen`'s
 * shards parse there record by record; shards written there (plain packed,
 * GZIP unpacked, ZLIB) train in dtrain; a corrupt shard exits 4 naming the
 * file and the record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "data/problem.h"
#include "data/text.h"

#define PROBLEM "algorithmic_reverse_binary40"

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

static void py(const char *const *argv, const char *want)
{
	struct dt_run r;
	dt_test_run(&r, argv, NULL, 120);
	if (r.exit_code)
		fprintf(stderr, "%s%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, want);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(t2t_files, datagen_shards_parse_in_python_protobuf, 120)
{
	need_protobuf();
	char dir[512];
	dt_test_path(dir, sizeof(dir), "data");
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "datagen", "--problem=" PROBLEM, "--data_dir", dir, "--num_shards=4",
					 NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "wrote 100000 examples to");
	DT_CHECK_CONTAINS(r.err, PROBLEM "-train-*-of-00004 (4 file(s))");
	dt_run_release(&r);
	const char *tool = "tests/tools/t2t_files.py";
	py((const char *[]){ "/usr/bin/python3", tool, "read", dir, PROBLEM, "train", "100000", NULL },
	   "ok 100000 examples in 4 files");
	py((const char *[]){ "/usr/bin/python3", tool, "read", dir, PROBLEM, "dev", "10000", NULL },
	   "ok 10000 examples in 1 files");
	py((const char *[]){ "/usr/bin/python3", tool, "read", dir, PROBLEM, "test", "10000", NULL },
	   "ok 10000 examples in 1 files");
}

DT_TEST_TIMEOUT(t2t_files, python_written_shards_train_in_dtrain, 120)
{
	need_protobuf();
	char dir[512];
	dt_test_path(dir, sizeof(dir), "data");
	char mk[600];
	snprintf(mk, sizeof(mk), "import os; os.makedirs('%s')", dir);
	py((const char *[]){ "/usr/bin/python3", "-c", mk, NULL }, "");
	const char *tool = "tests/tools/t2t_files.py";
	py((const char *[]){ "/usr/bin/python3", tool, "write", dir, PROBLEM, "train", "3", "6000", "1", NULL },
	   "wrote 6000 examples in 3 files");
	py((const char *[]){ "/usr/bin/python3", tool, "write", dir, PROBLEM, "dev", "1", "500", "2", NULL },
	   "wrote 500 examples in 1 files");
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=" PROBLEM, "--data_dir", dir, "--train_steps=150",
					 "--hparams=batch_size=1024,learning_rate_warmup_steps=50,learning_rate_constant=0.5",
					 "--log_every=50", NULL }, NULL, 100);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "train split: 6000 examples from 3 t2t data file(s) (" PROBLEM "-train-00000-of-00003)");
	DT_CHECK_CONTAINS(r.err, "test split: 500 examples from 1 t2t data file(s) (" PROBLEM "-dev-00000-of-00001)");
	DT_CHECK_CONTAINS(r.out, "eval (test split, 500 examples) at global step 150: accuracy = ");
	const char *a = strstr(r.out, "accuracy = ");
	DT_CHECK(a && atof(a + 11) > 0.5); /* above chance (1/2 per binary symbol) */
	dt_run_release(&r);

	/* one flipped byte in the second record of the plain shard: exit 4 naming it */
	char flip[1200];
	snprintf(flip, sizeof(flip),
		 "import struct; p = '%s/" PROBLEM "-train-00000-of-00003'; d = bytearray(open(p, 'rb').read()); "
		 "n = struct.unpack('<Q', d[:8])[0]; d[16 + n + 14] ^= 1; open(p, 'wb').write(d)", dir);
	py((const char *[]){ "/usr/bin/python3", "-c", flip, NULL }, "");
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=" PROBLEM, "--data_dir", dir, "--train_steps=1", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, PROBLEM "-train-00000-of-00003' record 1: corrupted record at byte");
	dt_run_release(&r);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	DT_CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

DT_TEST_TIMEOUT(t2t_files, text2text_tmpdir_datagen_builds_subwords_trains_and_decodes, 120)
{
	char tmp[512], data[512], out[512], in[600];
	dt_test_path(tmp, sizeof(tmp), "tmp");
	dt_test_path(data, sizeof(data), "data");
	dt_test_path(out, sizeof(out), "out");
	char mk[600];
	snprintf(mk, sizeof(mk), "mkdir -p '%s'", tmp);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/bin/sh", "-c", mk, NULL }, NULL, 10);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	/* a little parallel text: English in, its words reversed out */
	const char *en = "in the beginning god created the heaven and the earth\nand the earth was without form\n"
			 "and god said let there be light\nand there was light\n";
	const char *rev = "earth the and heaven the created god beginning the in\nform without was earth the and\n"
			  "light be there let said god and\nlight was there and\n";
	char en10[2048] = "", rev10[2048] = ""; /* ten copies: enough examples to fill a length bucket */
	for (int i = 0; i < 10; i++) {
		strcat(en10, en);
		strcat(rev10, rev);
	}
	write_file(tmp, "inputs.train.txt", en10);
	write_file(tmp, "targets.train.txt", rev10);
	write_file(tmp, "inputs.eval.txt", "and there was light\n");
	write_file(tmp, "targets.eval.txt", "light was there and\n");
	dt_test_run(&r, (const char *[]){ "dtrain", "datagen", "--problem=text2text_tmpdir", "--tmp_dir", tmp,
					 "--data_dir", data, NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "built a vocabulary of ");
	DT_CHECK_CONTAINS(r.err, "vocab.text2text_tmpdir.32768.subwords");
	DT_CHECK_CONTAINS(r.err, "wrote 40 examples to");
	DT_CHECK_CONTAINS(r.err, "text2text_tmpdir-train-*-of-00100 (100 file(s))");
	dt_run_release(&r);
	/* run again: the vocabulary file is found and kept, as t2t does */
	dt_test_run(&r, (const char *[]){ "dtrain", "datagen", "--problem=text2text_tmpdir", "--tmp_dir", tmp,
					 "--data_dir", data, "--num_shards=2", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "found vocabulary file");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=text2text_tmpdir", "--data_dir", data, "--output_dir", out,
					 "--train_steps=20", "--hparams=batch_size=48", NULL }, NULL, 100);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, " subwords from ");
	/* 100 shards from the first run and 2 from the second: both sets are read */
	DT_CHECK_CONTAINS(r.err, "train split: 80 examples from 102 t2t data file(s)");
	DT_CHECK_CONTAINS(r.err, "files of different shard counts (of-00002 and of-00100): all are read");
	/* a text2text problem: t2t's approx_bleu_score in the log and the eval */
	DT_CHECK_CONTAINS(r.err, " approx_bleu_score ");
	DT_CHECK_CONTAINS(r.out, ", approx_bleu_score = ");
	dt_run_release(&r);
	snprintf(in, sizeof(in), "%s/inputs.eval.txt", tmp);
	dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--problem=text2text_tmpdir", "--data_dir", data,
					 "--output_dir", out, "--hparams_set=transformer_test", "--decode_from_file", in,
					 NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "decoded 1 line(s)");
	dt_run_release(&r);
	/* t2t-bleu on the decode: a reference against itself scores 100 */
	char ref[600];
	snprintf(ref, sizeof(ref), "%s/targets.eval.txt", tmp);
	dt_test_run(&r, (const char *[]){ "dtrain", "bleu", "--translation", ref, "--reference", ref, NULL }, NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "BLEU_uncased = 100.00\nBLEU_cased = 100.00\n");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "bleu", "--translation", in, "--reference", ref, NULL }, NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0); /* the same words, reversed: unigrams only */
	DT_CHECK_CONTAINS(r.out, "BLEU_uncased =  ");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "bleu", "--translation", in, NULL }, NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--translation and --reference are both needed");
	dt_run_release(&r);
}

/* ---- translate_enes_bible8k ------------------------------------------------------- */

/* Skips the test without diatheke and both SWORD modules. */
static void need_sword(void)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/bin/sh", "-c",
					 "command -v diatheke && test -f /usr/share/sword/mods.d/engKJV2006eb.conf && "
					 "test -f /usr/share/sword/mods.d/spaRV1909eb.conf", NULL }, NULL, 10);
	const int have = r.exit_code == 0;
	dt_run_release(&r);
	if (!have)
		DT_SKIP("diatheke, sword-text-kjv or sword-text-sparv missing (scripts/install-deps.sh installs them)");
}

DT_TEST_TIMEOUT(bible, datagen_aligns_the_verses_builds_8k_subwords_and_trains, 400)
{
	need_sword();
	struct dt_run r;
	char data[512], out[512];
	dt_test_path(data, sizeof(data), "data");
	dt_test_path(out, sizeof(out), "out");
	dt_test_run(&r, (const char *[]){ "dtrain", "datagen", "--problem=translate_enes_bible8k", "--data_dir", data,
					 "--num_shards=10", NULL }, NULL, 380);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "bible: 31102 verses in both modules by reference, 31084 pairs (18 with a verse empty "
			  "in one left out)");
	DT_CHECK_CONTAINS(r.err, "wrote 30774 examples to");
	DT_CHECK_CONTAINS(r.err, "wrote 310 examples to");
	const char *b = strstr(r.err, "built a vocabulary of ");
	DT_CHECK(b != NULL);
	const int size = atoi(b + 22);
	fprintf(stderr, "vocabulary: %d subwords\n", size);
	DT_CHECK(abs(size - 8192) * 100 < 8192); /* t2t's bisection stops within 1 % */
	dt_run_release(&r);

	/* the first pair is Genesis 1:1 on both sides */
	struct dt_dataset d;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("translate_enes_bible8k", data, NULL, DT_SPLIT_TRAIN, 1, &d, &err), &err);
	const struct dt_text_set *t = d.text;
	DT_CHECK_INT_EQ(t->encoder, DT_TEXT_SUBWORD);
	DT_CHECK_INT_EQ(t->num_files, 10);
	char text[1024];
	dt_text_decode(t, t->in_tok, dt_text_in_len(t, 0), text, sizeof(text));
	DT_CHECK_STR_EQ(text, "In the beginning God created the heaven and the earth.");
	dt_text_decode(t, t->tg_tok, dt_text_tg_len(t, 0), text, sizeof(text));
	DT_CHECK_STR_EQ(text, "EN el principio crió Dios los cielos y la tierra.");
	/* no Strong's number tags ("<H0859>") left in any verse on either side:
	 * the RV 1909 module's plain rendering carries them in 3,609 verses */
	int64_t tagged = 0;
	for (int64_t i = 0; i < t->count; i++) {
		dt_text_decode(t, t->in_tok + t->in_off[i], dt_text_in_len(t, i), text, sizeof(text));
		tagged += strstr(text, "<H") != NULL || strstr(text, "<G") != NULL;
		dt_text_decode(t, t->tg_tok + t->tg_off[i], dt_text_tg_len(t, i), text, sizeof(text));
		tagged += strstr(text, "<H") != NULL || strstr(text, "<G") != NULL;
	}
	DT_CHECK_INT_EQ(tagged, 0);
	dt_dataset_release(&d);

	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=translate_enes_bible8k", "--data_dir", data, "--output_dir", out,
					 "--train_steps=5", "--hparams=batch_size=512", NULL }, NULL, 200);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "test split: 310 examples from 1 t2t data file(s)");
	dt_run_release(&r);
	/* without its files the problem says how to make them */
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--problem=translate_enes_bible8k",
					 "--data_dir", out, "--train_steps=1", NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "dtrain datagen --problem=translate_enes_bible8k");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(bible, languagemodel_kjv8k_is_targets_only_and_trains_decoder_only, 400)
{
	need_sword();
	char data[512], out[512];
	dt_test_path(data, sizeof(data), "data");
	dt_test_path(out, sizeof(out), "out");
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "datagen", "--problem=languagemodel_kjv8k", "--data_dir", data,
					 "--num_shards=4", NULL }, NULL, 380);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "vocab.languagemodel_kjv8k.8192.subwords");
	DT_CHECK_CONTAINS(r.err, "wrote 30774 examples to");
	dt_run_release(&r);
	struct dt_dataset d;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("languagemodel_kjv8k", data, NULL, DT_SPLIT_TEST, 1, &d, &err), &err);
	const struct dt_text_set *t = d.text;
	DT_CHECK_INT_EQ(t->has_inputs, 0);
	DT_CHECK(t->in_off == NULL);
	DT_CHECK_INT_EQ((int)t->count, 310);
	char text[1024];
	dt_text_decode(t, t->tg_tok, dt_text_tg_len(t, 0), text, sizeof(text)); /* pair 99: Genesis 4:20 */
	DT_CHECK_STR_EQ(text, "And Adah bare Jabal: he was the father of such as dwell in tents, and of such as have cattle.");
	dt_dataset_release(&d);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=languagemodel_kjv8k", "--data_dir", data, "--output_dir", out,
					 "--train_steps=5", "--hparams=batch_size=512", NULL }, NULL, 200);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "neg_log_perplexity = ");
	dt_run_release(&r);
	/* Decoding a language model: each line is a prompt (the empty one
	 * none) continued up to extra_length tokens; the fast decoder and the
	 * graph (cache=0) give the same text, greedy and beam. */
	char in_path[600], to_path[600], flag_from[640], flag_to[640], first[8192] = "";
	dt_test_path(in_path, sizeof(in_path), "prompts.txt");
	dt_test_path(to_path, sizeof(to_path), "continued.txt");
	snprintf(flag_from, sizeof(flag_from), "--decode_from_file=%s", in_path);
	snprintf(flag_to, sizeof(flag_to), "--decode_to_file=%s", to_path);
	const char prompts[] = "In the beginning\n\nAnd God said\n";
	dt_test_write_file(in_path, prompts, strlen(prompts));
	const char *hp[] = { "--decode_hparams=beam_size=1,extra_length=12",
			     "--decode_hparams=beam_size=1,extra_length=12,cache=0",
			     "--decode_hparams=beam_size=4,extra_length=12",
			     "--decode_hparams=beam_size=4,extra_length=12,cache=0" };
	for (int i = 0; i < 4; i++) {
		dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--hparams_set=transformer_test",
						 "--problem=languagemodel_kjv8k", "--data_dir", data, "--output_dir", out,
						 "--hparams=batch_size=512", flag_from, flag_to, hp[i], NULL }, NULL, 120);
		if (r.exit_code)
			fprintf(stderr, "%s", r.err);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		DT_CHECK_CONTAINS(r.err, "decoded 3 line(s)");
		dt_run_release(&r);
		char got[8192];
		FILE *f = fopen(to_path, "r");
		DT_CHECK(f != NULL);
		const size_t n = fread(got, 1, sizeof(got) - 1, f);
		fclose(f);
		got[n] = '\0';
		int lines = 0;
		for (size_t j = 0; j < n; j++)
			lines += got[j] == '\n';
		DT_CHECK_INT_EQ(lines, 3);
		if (i % 2 == 0)
			memcpy(first, got, n + 1);
		else
			DT_CHECK_STR_EQ(got, first);
	}
}
