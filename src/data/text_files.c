/*
 * text_files.c — t2t's data files for text problems (data/text.h): finding
 * a split's TFRecord shards, reading their Examples into a dt_text_set,
 * writing them (dtrain datagen).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "data/example.h"
#include "data/internal.h"
#include "data/subword.h"
#include "data/text.h"
#include "data/tfrecord.h"

/* A shard is at most this big, decompressed (t2t's are tens of megabytes). */
#define MAX_FILE_BYTES ((size_t)4 << 30)

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void find_named(const char *dir, const char *problem, const char *split_name, char ***paths, int *n)
{
	*paths = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return;
	char prefix[512];
	snprintf(prefix, sizeof(prefix), "%s-%s-", problem, split_name);
	const size_t pl = strlen(prefix);
	int cap = 0;
	for (struct dirent *e; (e = readdir(d));) {
		const size_t nl = strlen(e->d_name);
		/* <prefix>00000-of-00010: five digits, "-of-", five digits (t2t's %.5d) */
		if (nl < pl + 14 || strncmp(e->d_name, prefix, pl) != 0 || strncmp(e->d_name + pl + 5, "-of-", 4) != 0)
			continue;
		if (nl >= 11 && strcmp(e->d_name + nl - 11, "-unshuffled") == 0)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			*paths = dt_xrealloc(*paths, (size_t)cap * sizeof(**paths));
		}
		const size_t len = strlen(dir) + nl + 2;
		(*paths)[*n] = dt_xmalloc(len);
		snprintf((*paths)[*n], len, "%s/%s", dir, e->d_name);
		(*n)++;
	}
	closedir(d);
	if (*n)
		qsort(*paths, (size_t)*n, sizeof(**paths), cmp_str);
	/* t2t reads every file of the pattern too; shards of two datagen runs are likely a mistake */
	for (int i = 1; i < *n; i++) {
		const char *a = strstr((*paths)[0] + strlen(dir) + pl, "-of-"), *b = strstr((*paths)[i] + strlen(dir) + pl, "-of-");
		if (a && b && strcmp(a, b) != 0) {
			dt_warn("%s holds %s files of different shard counts (%s and %s): all are read, as t2t reads "
				"them; remove the leftovers of an earlier datagen if that is not what you want", dir, prefix,
				a + 1, b + 1);
			break;
		}
	}
}

void dt_text_files_find(const char *dir, const char *problem, enum dt_split split, char ***paths, int *n)
{
	if (split == DT_SPLIT_TRAIN) {
		find_named(dir, problem, "train", paths, n);
		return;
	}
	if (split == DT_SPLIT_TEST) {
		find_named(dir, problem, "test", paths, n);
		if (*n)
			return;
		free(*paths);
	}
	find_named(dir, problem, "dev", paths, n);
}

/* ---- reading ------------------------------------------------------------------- */

struct grow {
	int32_t *tok;
	int64_t n, cap;
	int64_t *off;
	int64_t off_cap;
};

static void grow_tok(struct grow *g, int64_t more)
{
	if (g->n + more <= g->cap)
		return;
	while (g->cap < g->n + more)
		g->cap = g->cap ? 2 * g->cap : 4096;
	g->tok = dt_xrealloc(g->tok, (size_t)g->cap * sizeof(*g->tok));
}

static void grow_off(struct grow *g, int64_t i)
{
	if (i < g->off_cap)
		return;
	g->off_cap = g->off_cap ? 2 * g->off_cap : 1024;
	g->off = dt_xrealloc(g->off, (size_t)g->off_cap * sizeof(*g->off));
}

/* Appends one feature's ids (and EOS when missing) as example i. */
static enum dt_status add_seq(struct grow *g, const struct dt_feature *f, int vocab, int64_t i, const char *path,
			      int64_t rec, struct dt_err *err)
{
	if (f->kind != DT_FEATURE_INT64 && !(f->kind == DT_FEATURE_NONE && f->count == 0))
		return dt_err_set(err, DT_DATA, "'%s' record %lld: feature '%.*s' is a %s list, not int64", path,
				  (long long)rec, (int)f->name_len, f->name,
				  f->kind == DT_FEATURE_BYTES ? "bytes" : "float");
	if (f->count > (1 << 24))
		return dt_err_set(err, DT_DATA, "'%s' record %lld: feature '%.*s' has %lld ids (at most 2^24)", path,
				  (long long)rec, (int)f->name_len, f->name, (long long)f->count);
	grow_tok(g, f->count + 1);
	for (int64_t j = 0; j < f->count; j++) {
		const int64_t id = f->i64[j];
		if (id < 0 || id >= vocab)
			return dt_err_set(err, DT_DATA, "'%s' record %lld: feature '%.*s' id %lld (position %lld) is not in "
					  "the vocabulary of %d ids", path, (long long)rec, (int)f->name_len, f->name,
					  (long long)id, (long long)j, vocab);
		g->tok[g->n++] = (int32_t)id;
	}
	if (f->count == 0 || f->i64[f->count - 1] != DT_TEXT_EOS)
		g->tok[g->n++] = DT_TEXT_EOS;
	grow_off(g, i + 1);
	g->off[i + 1] = g->n;
	return DT_OK;
}

static enum dt_status load_file(const char *path, struct dt_text_set *t, struct grow *in, struct grow *tg,
				struct dt_err *err)
{
	struct dt_tfrecord_reader r;
	enum dt_status st = dt_tfrecord_open(&r, path, MAX_FILE_BYTES, err);
	if (st) {
		dt_tfrecord_close(&r);
		return st;
	}
	for (;;) {
		const uint8_t *data;
		size_t len;
		const int64_t rec = r.index;
		if ((st = dt_tfrecord_next(&r, &data, &len, err)) || !data)
			break;
		struct dt_example ex;
		if ((st = dt_example_parse(data, len, &ex, err))) {
			dt_err_prefix(err, "'%s' record %lld", path, (long long)rec);
			break;
		}
		const struct dt_feature *fi = dt_example_find(&ex, "inputs"), *ft = dt_example_find(&ex, "targets");
		if (!ft)
			st = dt_err_set(err, DT_DATA, "'%s' record %lld: the Example has no 'targets' feature", path,
					(long long)rec);
		else if (t->has_inputs && !fi)
			st = dt_err_set(err, DT_DATA, "'%s' record %lld: the Example has no 'inputs' feature (the problem "
					"has inputs)", path, (long long)rec);
		if (!st && t->has_inputs)
			st = add_seq(in, fi, t->input_vocab, t->count, path, rec, err);
		if (!st)
			st = add_seq(tg, ft, t->target_vocab, t->count, path, rec, err);
		dt_example_free(&ex);
		if (st)
			break;
		t->count++;
	}
	if (!st)
		dt_debug("read %lld records of '%s' (compression %s)", (long long)r.index, path,
			 dt_tfrecord_compression_name(r.compression));
	dt_tfrecord_close(&r);
	return st;
}

enum dt_status dt_text_files_load(char *const *paths, int n, struct dt_text_set *t, struct dt_err *err)
{
	struct grow in = { 0 }, tg = { 0 };
	grow_off(&in, 0);
	grow_off(&tg, 0);
	in.off[0] = tg.off[0] = 0;
	t->count = 0;
	t->num_files = n;
	t->file_off = dt_xmallocarray((size_t)n + 1, sizeof(int64_t));
	t->file_off[0] = 0;
	enum dt_status st = DT_OK;
	for (int f = 0; f < n && !st; f++) {
		st = load_file(paths[f], t, &in, &tg, err);
		t->file_off[f + 1] = t->count;
	}
	if (!st && t->count == 0)
		st = dt_err_set(err, DT_DATA, "%d file(s) from '%s' hold no record", n, paths[0]);
	if (!st && t->count > UINT32_MAX - 1)
		st = dt_err_set(err, DT_DATA, "%lld examples: at most 2^32 - 2", (long long)t->count);
	t->tg_off = tg.off;
	t->tg_tok = tg.tok;
	if (t->has_inputs) {
		t->in_off = in.off;
		t->in_tok = in.tok;
	} else {
		free(in.off);
		free(in.tok);
	}
	t->max_len = 0;
	for (int64_t i = 0; !st && i < t->count; i++)
		if (dt_text_len(t, i) > t->max_len)
			t->max_len = dt_text_len(t, i);
	return st;
}

/* ---- writing ------------------------------------------------------------------- */

enum dt_status dt_text_files_write(const struct dt_text_set *t, const char *dir, const char *problem,
				   const char *split_name, int shards, struct dt_err *err)
{
	if (shards < 1 || shards > 99999)
		return dt_err_set(err, DT_USAGE, "%d shards: 1 to 99999", shards);
	struct dt_tfrecord_writer *w = dt_xcalloc((size_t)shards, sizeof(*w));
	for (int s = 0; s < shards; s++)
		dt_tfrecord_writer_init(&w[s], DT_TFRECORD_NONE);
	int64_t *vals[2] = { NULL, NULL }, cnt[2] = { 0, 0 };
	int64_t vcap = 0;
	for (int64_t i = 0; i < t->count; i++) {
		int nf = 0;
		const char *names[2];
		int64_t need = dt_text_in_len(t, i) + dt_text_tg_len(t, i);
		if (need > vcap) {
			vcap = need * 2;
			vals[0] = dt_xrealloc(vals[0], (size_t)vcap * sizeof(int64_t));
		}
		int64_t *v = vals[0];
		if (t->has_inputs) {
			names[nf] = "inputs";
			cnt[nf] = dt_text_in_len(t, i);
			for (int64_t j = 0; j < cnt[nf]; j++)
				v[j] = t->in_tok[t->in_off[i] + j];
			nf++;
		}
		names[nf] = "targets";
		cnt[nf] = dt_text_tg_len(t, i);
		int64_t *vt = v + (t->has_inputs ? cnt[0] : 0);
		for (int64_t j = 0; j < cnt[nf]; j++)
			vt[j] = t->tg_tok[t->tg_off[i] + j];
		const int64_t *const ptrs[2] = { v, t->has_inputs ? vt : v };
		size_t len;
		uint8_t *rec = dt_example_encode_int64(nf + 1, names, ptrs, cnt, &len);
		dt_tfrecord_write(&w[i % shards], rec, len);
		free(rec);
	}
	free(vals[0]);
	enum dt_status st = DT_OK;
	for (int s = 0; s < shards; s++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s-%s-%05d-of-%05d", dir, problem, split_name, s, shards);
		if (st)
			dt_tfrecord_writer_free(&w[s]);
		else
			st = dt_tfrecord_writer_commit(&w[s], path, err);
	}
	free(w);
	if (!st)
		dt_info("wrote %lld examples to %s/%s-%s-*-of-%05d (%d file(s))", (long long)t->count, dir, problem,
			split_name, shards, shards);
	return st;
}

static enum dt_status write_split(const char *problem, const char *src_dir, const char *dir, enum dt_split split,
				  const char *split_name, int shards, uint64_t seed, struct dt_err *err)
{
	struct dt_dataset ds;
	enum dt_status st = dt__text_load_source(problem, src_dir, dir, split, seed, &ds, err);
	if (st)
		return st;
	st = dt_text_files_write(ds.text, dir, problem, split_name, shards, err);
	dt_dataset_release(&ds);
	return st;
}

/* The stripped lines of `path` appended to *lines (t2t's txt_line_iterator). */
static enum dt_status read_text_lines(const char *path, char ***lines, size_t *n, size_t *cap, struct dt_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return dt_err_set(err, DT_DATA, "cannot open '%s': %s", path, strerror(errno));
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	while ((len = getline(&line, &lcap, f)) >= 0) {
		char *s = line, *e = line + len;
		while (s < e && isspace((unsigned char)*s))
			s++;
		while (e > s && isspace((unsigned char)e[-1]))
			e--;
		*e = '\0';
		if (*n == *cap) {
			*cap = *cap ? 2 * *cap : 1024;
			*lines = dt_xrealloc(*lines, *cap * sizeof(**lines));
		}
		(*lines)[(*n)++] = dt_xstrdup(s);
	}
	const int bad = ferror(f);
	free(line);
	fclose(f);
	return bad ? dt_err_set(err, DT_DATA, "cannot read '%s'", path) : DT_OK;
}

/* t2t's get_or_generate_vocab_inner: the vocabulary file in data_dir, or one
 * built from `lines` and written there. */
static enum dt_status vocab_from_lines(const char *problem, const char *data_dir, char *const *lines, size_t n,
				       struct dt_err *err)
{
	char path[4096];
	dt_text_vocab_path(problem, data_dir, path, sizeof(path));
	if (access(path, F_OK) == 0) {
		dt_info("found vocabulary file %s: using it", path);
		return DT_OK;
	}
	const int target = dt__text_approx_vocab(problem);
	const int64_t t0 = dt_now_ns();
	struct dt_subword *v = dt_subword_build((const char *const *)lines, n, target);
	enum dt_status st = dt_subword_save(v, path, err);
	if (!st)
		dt_info("built a vocabulary of %d subwords (target %d) from %zu lines in %.1f s: %s", dt_subword_size(v),
			target, n, (double)(dt_now_ns() - t0) * 1e-9, path);
	dt_subword_free(v);
	return st;
}

/* text2text_tmpdir's vocabulary from the training pairs (inputs and targets). */
static enum dt_status make_vocab(const char *problem, const char *tmp_dir, const char *data_dir, struct dt_err *err)
{
	char **lines = NULL;
	size_t n = 0, cap = 0;
	char src[4096];
	snprintf(src, sizeof(src), "%s/inputs.train.txt", tmp_dir);
	enum dt_status st = read_text_lines(src, &lines, &n, &cap, err);
	snprintf(src, sizeof(src), "%s/targets.train.txt", tmp_dir);
	if (!st)
		st = read_text_lines(src, &lines, &n, &cap, err);
	if (!st)
		st = vocab_from_lines(problem, data_dir, lines, n, err);
	for (size_t i = 0; i < n; i++)
		free(lines[i]);
	free(lines);
	return st;
}

/* The pairs whose index is in [0, n) with (i % 100 == 99) == dev, encoded into a text set. */
static void encode_pairs(const struct dt_subword *sw, char *const *in, char *const *tg, size_t n, int dev,
			 struct dt_text_set *t)
{
	struct grow gi = { 0 }, gt = { 0 };
	grow_off(&gi, 0);
	grow_off(&gt, 0);
	gi.off[0] = gt.off[0] = 0;
	int32_t *ids = dt_xmallocarray(4096, sizeof(int32_t));
	t->count = 0;
	for (size_t i = 0; i < n; i++) {
		if ((i % 100 == 99) != dev)
			continue;
		for (int side = in ? 0 : 1; side < 2; side++) {
			struct grow *g = side ? &gt : &gi;
			const char *text = side ? tg[i] : in[i];
			size_t k = dt_subword_encode(sw, text, ids, 4095);
			if (k > 4095)
				k = 4095; /* a verse is far shorter; the cap only bounds the buffer */
			grow_tok(g, (int64_t)k + 1);
			memcpy(g->tok + g->n, ids, k * sizeof(int32_t));
			g->n += (int64_t)k;
			g->tok[g->n++] = DT_TEXT_EOS;
			grow_off(g, t->count + 1);
			g->off[t->count + 1] = g->n;
		}
		t->count++;
	}
	free(ids);
	t->has_inputs = in != NULL;
	t->in_off = in ? gi.off : NULL;
	t->in_tok = in ? gi.tok : NULL;
	if (!in) {
		free(gi.off);
		free(gi.tok);
	}
	t->tg_off = gt.off;
	t->tg_tok = gt.tok;
}

/* translate_enes_bible8k: the verse pairs, every hundredth (index % 100 == 99)
 * held out as dev, the vocabulary from the training pairs' both sides;
 * languagemodel_kjv8k (lm): the English verses as targets alone. */
static enum dt_status datagen_bible(const char *problem, const char *data_dir, int train_shards, int lm,
				    struct dt_err *err)
{
	char **en, **es;
	size_t n;
	enum dt_status st = dt__bible_pairs(&en, &es, &n, err);
	if (st)
		return st;
	char **lines = dt_xmallocarray(2 * n + 1, sizeof(char *));
	size_t nl = 0;
	for (size_t i = 0; i < n; i++)
		if (i % 100 != 99) {
			lines[nl++] = en[i];
			if (!lm)
				lines[nl++] = es[i];
		}
	st = vocab_from_lines(problem, data_dir, lines, nl, err);
	free(lines);
	struct dt_subword *sw = NULL;
	char path[4096];
	dt_text_vocab_path(problem, data_dir, path, sizeof(path));
	if (!st)
		st = dt_subword_load(path, &sw, err);
	for (int dev = 0; dev < 2 && !st; dev++) {
		struct dt_text_set t = { .has_inputs = 1 };
		encode_pairs(sw, lm ? NULL : en, lm ? en : es, n, dev, &t);
		st = dt_text_files_write(&t, data_dir, problem, dev ? "dev" : "train", dev ? 1 : train_shards, err);
		free(t.in_off);
		free(t.in_tok);
		free(t.tg_off);
		free(t.tg_tok);
	}
	dt_subword_free(sw);
	for (size_t i = 0; i < n; i++) {
		free(en[i]);
		free(es[i]);
	}
	free(en);
	free(es);
	return st;
}

enum dt_status dt_text_datagen(const char *problem, const char *data_dir, const char *tmp_dir, int num_shards,
			       uint64_t seed, struct dt_err *err)
{
	if (!dt_text_problem_is(problem))
		return dt_err_set(err, DT_USAGE, "'%s' is not a text problem", problem ? problem : "");
	if (!data_dir || !*data_dir)
		return dt_err_set(err, DT_USAGE, "datagen needs --data_dir (where the files go)");
	if (mkdir(data_dir, 0777) != 0 && errno != EEXIST)
		return dt_err_set(err, DT_IO, "cannot create --data_dir '%s': %s", data_dir, strerror(errno));
	if (strcmp(problem, "translate_enes_bible8k") == 0)
		return datagen_bible(problem, data_dir, num_shards > 0 ? num_shards : 100, 0, err);
	if (strcmp(problem, "languagemodel_kjv8k") == 0)
		return datagen_bible(problem, data_dir, num_shards > 0 ? num_shards : 100, 1, err);
	const int tmpdir = strcmp(problem, "text2text_tmpdir") == 0;
	if (tmpdir && (!tmp_dir || !*tmp_dir)) {
		enum dt_status st = dt_err_set(err, DT_USAGE, "problem 'text2text_tmpdir' needs --tmp_dir");
		dt_err_hint(err, "pass --tmp_dir DIR with inputs.train.txt, targets.train.txt, inputs.eval.txt and "
			    "targets.eval.txt, one example per line (t2t's layout)");
		return st;
	}
	if (tmpdir) {
		enum dt_status st = make_vocab(problem, tmp_dir, data_dir, err);
		if (st)
			return st;
	}
	/* t2t: AlgorithmicProblem.num_shards 10; Text2TextProblem's dataset_splits 100 and 1 */
	const int train_shards = num_shards > 0 ? num_shards : tmpdir ? 100 : 10;
	enum dt_status st = write_split(problem, tmp_dir, data_dir, DT_SPLIT_TRAIN, "train", train_shards, seed, err);
	if (!st && tmpdir)
		return write_split(problem, tmp_dir, data_dir, DT_SPLIT_TEST, "dev", 1, seed, err);
	if (!st)
		st = write_split(problem, tmp_dir, data_dir, DT_SPLIT_DEV, "dev", 1, seed, err);
	if (!st)
		st = write_split(problem, tmp_dir, data_dir, DT_SPLIT_TEST, "test", 1, seed, err);
	return st;
}
