/* dtrain datagen for t2t's WMT problems (data/wmt.h) from archives the test
 * writes with Python's tarfile (tests/tools/wmt_archives.py: t2t's archive
 * names and internal paths, made-up parallel text): the shards and the
 * vocabulary under t2t's names, seed 000's command training on them by
 * name, `dtrain decode` through the vocabulary; a missing archive, a
 * truncated one and a missing member each exit 4 naming it, with nothing
 * written to the data dir. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dt_test.h"

#define TOOL "tests/tools/wmt_archives.py"

static void archives(char *tmp, size_t cap, const char *sub)
{
	dt_test_path(tmp, cap, sub);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", TOOL, tmp, "1", NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "train 1299 dev 100");
	dt_run_release(&r);
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static void datagen(struct dt_run *r, const char *problem, const char *tmp, const char *data, const char *extra)
{
	char p[128], t[600], d[600];
	snprintf(p, sizeof(p), "--problem=%s", problem);
	snprintf(t, sizeof(t), "--tmp_dir=%s", tmp);
	snprintf(d, sizeof(d), "--data_dir=%s", data);
	dt_test_run(r, (const char *[]){ "dtrain", "datagen", p, t, d, extra ? extra : "--log_level=info", NULL }, NULL, 60);
}

DT_TEST_TIMEOUT(wmt_datagen, ende_wmt32k_from_archives_trains_by_name_and_decodes, 90)
{
	char tmp[512], data[512], out[512];
	archives(tmp, sizeof(tmp), "tmp");
	dt_test_path(data, sizeof(data), "data");
	dt_test_path(out, sizeof(out), "out");
	struct dt_run r;
	datagen(&r, "translate_ende_wmt32k", tmp, data, "--num_shards=4");
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "extracted 'commoncrawl.de-en.de' from '");
	DT_CHECK_CONTAINS(r.err, "extracted 'dev/newstest2013.de' from '");
	DT_CHECK_CONTAINS(r.err, " subwords (target 32768) from ");
	DT_CHECK_CONTAINS(r.err, "vocab.translate_ende_wmt32k.32768.subwords");
	/* the pair with an empty German side is dropped, as t2t's compile_data drops it */
	DT_CHECK_CONTAINS(r.err, "wrote 1299 examples to ");
	DT_CHECK_CONTAINS(r.err, "translate_ende_wmt32k-train-*-of-00004 (4 file(s))");
	DT_CHECK_CONTAINS(r.err, "wrote 100 examples to ");
	dt_run_release(&r);
	/* again: the extracted files and the vocabulary are found, as t2t finds them */
	datagen(&r, "translate_ende_wmt32k", tmp, data, "--num_shards=4");
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK(strstr(r.err, "extracted") == NULL);
	DT_CHECK_CONTAINS(r.err, "found vocabulary file ");
	dt_run_release(&r);
	char d[600], o[600];
	snprintf(d, sizeof(d), "--data_dir=%s", data);
	snprintf(o, sizeof(o), "--output_dir=%s", out);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_base",
					 "--problem=translate_ende_wmt32k", d, o,
					 "--hparams=num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2,batch_size=1024,"
					 "learning_rate_warmup_steps=20",
					 "--train_steps=60", "--log_every=20", NULL }, NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "problem translate_ende_wmt32k is text to text (int64 inputs and targets); ");
	DT_CHECK_CONTAINS(r.err, "shards: 4 train, 1 dev, 0 test in ");
	const char *s20 = strstr(r.err, "step 20/60 loss "), *s60 = strstr(r.err, "step 60/60 loss ");
	DT_CHECK(s20 && s60);
	if (s20 && s60)
		DT_CHECK(atof(s60 + 16) < atof(s20 + 16));
	DT_CHECK_CONTAINS(r.out, "eval (test split, 100 examples) at global step 60: ");
	dt_run_release(&r);
	char in[700], f[800];
	snprintf(in, sizeof(in), "%s/dev/newstest2013.en", tmp);
	snprintf(f, sizeof(f), "--decode_from_file=%s", in);
	dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--hparams_set=transformer_base",
					 "--hparams=num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2",
					 "--problem=translate_ende_wmt32k", d, o, f, "--decode_to_file=/dev/null", NULL },
		    NULL, 60);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "decoded 100 line(s) of '");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(wmt_datagen, bad_sources_exit_4_naming_them_and_write_nothing, 60)
{
	char tmp[512], data[512], path[700];
	struct dt_run r;
	/* a missing archive: named, with where t2t fetches it */
	archives(tmp, sizeof(tmp), "t1");
	dt_test_path(data, sizeof(data), "d1");
	snprintf(path, sizeof(path), "%s/dev.tgz", tmp);
	DT_CHECK_INT_EQ(remove(path), 0);
	datagen(&r, "translate_ende_wmt8k", tmp, data, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "error: missing source archive '");
	DT_CHECK_CONTAINS(r.err, "/dev.tgz' (for 'dev/newstest2013.en')");
	DT_CHECK_CONTAINS(r.err, "hint: t2t downloads it from http://data.statmt.org/wmt17/translation-task/dev.tgz");
	DT_CHECK(!exists(data));
	dt_run_release(&r);
	/* a truncated archive */
	archives(tmp, sizeof(tmp), "t2");
	dt_test_path(data, sizeof(data), "d2");
	char cut[1200];
	snprintf(cut, sizeof(cut),
		 "p = '%s/training-parallel-europarl-v7.tgz'; d = open(p, 'rb').read(); open(p, 'wb').write(d[:len(d) // 2])",
		 tmp);
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "-c", cut, NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	datagen(&r, "translate_ende_wmt8k", tmp, data, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "training-parallel-europarl-v7.tgz");
	DT_CHECK_CONTAINS(r.err, "truncated");
	DT_CHECK(!exists(data));
	snprintf(path, sizeof(path), "%s/training/europarl-v7.de-en.en", tmp);
	DT_CHECK(!exists(path)); /* cut off mid-member: no half-extracted file under the member's name */
	dt_run_release(&r);
	/* a member missing from its archive */
	archives(tmp, sizeof(tmp), "t3");
	dt_test_path(data, sizeof(data), "d3");
	char one[1200];
	snprintf(one, sizeof(one),
		 "import io, tarfile\nwith tarfile.open('%s/dev.tgz', 'w:gz') as t:\n"
		 "    i = tarfile.TarInfo('dev/newstest2013.en'); i.size = 2; t.addfile(i, io.BytesIO(b'x\\n'))\n", tmp);
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "-c", one, NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	datagen(&r, "translate_ende_wmt8k", tmp, data, NULL);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "/dev.tgz' has no member 'dev/newstest2013.de'");
	DT_CHECK(!exists(data));
	dt_run_release(&r);
	/* no --tmp_dir: exit 2 */
	dt_test_run(&r, (const char *[]){ "dtrain", "datagen", "--problem=translate_enfr_wmt_small8k", "--data_dir", data,
					 NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "problem 'translate_enfr_wmt_small8k' needs --tmp_dir");
	DT_CHECK_CONTAINS(r.err, "baseline-1M-enfr.tgz");
	dt_run_release(&r);
}
