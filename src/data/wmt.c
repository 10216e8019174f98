/*
 * wmt.c — t2t-datagen for the WMT translation problems from the archives in
 * --tmp_dir (data/wmt.h): libarchive for .tgz/.tar members, zlib for .gz.
 */
#include "data/wmt.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "data/subword.h"
#include "data/text.h"

struct source {
	const char *url;          /* t2t's; its basename is the archive in tmp_dir */
	const char *lang1, *lang2; /* members: inputs (English) and targets */
};

struct wmt_problem {
	const char *name;
	int approx_vocab;
	const struct source *train, *dev;
	int ntrain, ndev;
};

/* t2t's translate_ende.py: _ENDE_TRAIN_DATASETS and _ENDE_EVAL_DATASETS. */
static const struct source ende_train[] = {
	{ "http://data.statmt.org/wmt18/translation-task/training-parallel-nc-v13.tgz",
	  "training-parallel-nc-v13/news-commentary-v13.de-en.en", "training-parallel-nc-v13/news-commentary-v13.de-en.de" },
	{ "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz", "commoncrawl.de-en.en", "commoncrawl.de-en.de" },
	{ "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en.en",
	  "training/europarl-v7.de-en.de" },
};
static const struct source ende_dev[] = {
	{ "http://data.statmt.org/wmt17/translation-task/dev.tgz", "dev/newstest2013.en", "dev/newstest2013.de" },
};
/* t2t's translate_enfr.py: the small (OpenNMT's 1M baseline) and large sets. */
static const struct source enfr_small_train[] = {
	{ "https://s3.amazonaws.com/opennmt-trainingdata/baseline-1M-enfr.tgz", "baseline-1M-enfr/baseline-1M_train.en",
	  "baseline-1M-enfr/baseline-1M_train.fr" },
};
static const struct source enfr_small_dev[] = {
	{ "https://s3.amazonaws.com/opennmt-trainingdata/baseline-1M-enfr.tgz", "baseline-1M-enfr/baseline-1M_valid.en",
	  "baseline-1M-enfr/baseline-1M_valid.fr" },
};
static const struct source enfr_large_train[] = {
	{ "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz", "commoncrawl.fr-en.en", "commoncrawl.fr-en.fr" },
	{ "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz", "training/europarl-v7.fr-en.en",
	  "training/europarl-v7.fr-en.fr" },
	{ "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz", "training/news-commentary-v9.fr-en.en",
	  "training/news-commentary-v9.fr-en.fr" },
	{ "http://www.statmt.org/wmt10/training-giga-fren.tar", "giga-fren.release2.fixed.en.gz",
	  "giga-fren.release2.fixed.fr.gz" },
	{ "http://www.statmt.org/wmt13/training-parallel-un.tgz", "un/undoc.2000.fr-en.en", "un/undoc.2000.fr-en.fr" },
};
static const struct source enfr_large_dev[] = {
	{ "http://data.statmt.org/wmt17/translation-task/dev.tgz", "dev/newstest2013.en", "dev/newstest2013.fr" },
};

static const struct wmt_problem problems[] = {
	{ "translate_ende_wmt8k", 8192, ende_train, ende_dev, 3, 1 },
	{ "translate_ende_wmt32k", 32768, ende_train, ende_dev, 3, 1 },
	{ "translate_enfr_wmt_small8k", 8192, enfr_small_train, enfr_small_dev, 1, 1 },
	{ "translate_enfr_wmt_small32k", 32768, enfr_small_train, enfr_small_dev, 1, 1 },
	{ "translate_enfr_wmt8k", 8192, enfr_large_train, enfr_large_dev, 5, 1 },
	{ "translate_enfr_wmt32k", 32768, enfr_large_train, enfr_large_dev, 5, 1 },
};
static const char *const names[] = {
	"translate_ende_wmt8k", "translate_ende_wmt32k", "translate_enfr_wmt_small8k", "translate_enfr_wmt_small32k",
	"translate_enfr_wmt8k", "translate_enfr_wmt32k",
};

static const struct wmt_problem *find(const char *name)
{
	for (size_t i = 0; name && i < DT_ARRAY_LEN(problems); i++)
		if (strcmp(problems[i].name, name) == 0)
			return &problems[i];
	return NULL;
}

int dt_wmt_problem_is(const char *problem) { return find(problem) != NULL; }

const char *const *dt_wmt_problem_names(size_t *count)
{
	if (count)
		*count = DT_ARRAY_LEN(names);
	return names;
}

/* ---- sources: extracted members in tmp_dir ----------------------------------------- */

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* mkdir -p of path's parent directories. */
static enum dt_status make_parents(const char *path, struct dt_err *err)
{
	char *p = dt_xstrdup(path);
	enum dt_status st = DT_OK;
	for (char *s = strchr(p + 1, '/'); s && !st; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdir(p, 0777) != 0 && errno != EEXIST)
			st = dt_err_set(err, DT_IO, "cannot create '%s': %s", p, strerror(errno));
		*s = '/';
	}
	free(p);
	return st;
}

/* "./a/b" and "a/b" name the same member. */
static const char *member_name(const char *path)
{
	while (path[0] == '.' && path[1] == '/')
		path += 2;
	return path;
}

/* Copies the current entry's data to `path` (through path.tmp, renamed). */
static enum dt_status extract_entry(struct archive *a, const char *archive, const char *member, const char *path,
				    struct dt_err *err)
{
	enum dt_status st = make_parents(path, err);
	if (st)
		return st;
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "wb");
	if (!f)
		return dt_err_set(err, DT_IO, "cannot create '%s': %s", tmp, strerror(errno));
	char buf[1 << 16];
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, sizeof(buf));
		if (n == 0)
			break;
		if (n < 0) {
			st = dt_err_set(err, DT_DATA, "'%s': member '%s': %s", archive, member, archive_error_string(a));
			break;
		}
		if (fwrite(buf, 1, (size_t)n, f) != (size_t)n) {
			st = dt_err_set(err, DT_IO, "cannot write '%s': %s", tmp, strerror(errno));
			break;
		}
	}
	if (fclose(f) != 0 && !st)
		st = dt_err_set(err, DT_IO, "cannot write '%s': %s", tmp, strerror(errno));
	if (!st && rename(tmp, path) != 0)
		st = dt_err_set(err, DT_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
	if (st)
		unlink(tmp);
	return st;
}

/* Extracts the members of `want` (n of them, those not yet there) from the
 * source's archive into tmp_dir, reading the archive once. */
static enum dt_status extract(const char *tmp_dir, const struct source *s, const char *const *want, int n,
			      struct dt_err *err)
{
	const char *base = strrchr(s->url, '/') + 1;
	char archive[4096];
	snprintf(archive, sizeof(archive), "%s/%s", tmp_dir, base);
	if (!exists(archive)) {
		enum dt_status st = dt_err_set(err, DT_IO, "missing source archive '%s' (for '%s')", archive, want[0]);
		dt_err_hint(err, "t2t downloads it from %s; dtrain downloads nothing: put the file in --tmp_dir", s->url);
		return st;
	}
	struct archive *a = archive_read_new();
	archive_read_support_filter_all(a);
	archive_read_support_format_all(a);
	enum dt_status st = DT_OK;
	int found = 0;
	if (archive_read_open_filename(a, archive, 1 << 16) != ARCHIVE_OK) {
		st = dt_err_set(err, DT_DATA, "cannot read archive '%s': %s", archive, archive_error_string(a));
		archive_read_free(a);
		return st;
	}
	struct archive_entry *e;
	while (!st && found < n) {
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
			st = dt_err_set(err, DT_DATA, "archive '%s' is corrupt or cut short: %s", archive,
					archive_error_string(a));
			break;
		}
		const char *name = member_name(archive_entry_pathname(e));
		for (int i = 0; i < n; i++) {
			if (strcmp(name, want[i]) != 0)
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", tmp_dir, want[i]);
			st = extract_entry(a, archive, want[i], path, err);
			found++;
			if (!st)
				dt_info("extracted '%s' from '%s'", want[i], archive);
			break;
		}
	}
	archive_read_free(a);
	if (!st && found < n) {
		st = dt_err_set(err, DT_DATA, "archive '%s' has no member '%s'", archive, want[0]);
		for (int i = 0; i < n; i++) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", tmp_dir, want[i]);
			if (!exists(path)) {
				dt_err_clear(err);
				st = dt_err_set(err, DT_DATA, "archive '%s' has no member '%s'", archive, want[i]);
				break;
			}
		}
		dt_err_hint(err, "is it the file t2t downloads from %s?", s->url);
	}
	return st;
}

/* t2t's gunzip_file: path (ending in .gz) into path without it. */
static enum dt_status gunzip(const char *path, struct dt_err *err)
{
	char out[4096], tmp[4200];
	snprintf(out, sizeof(out), "%.*s", (int)(strlen(path) - 3), path);
	if (exists(out))
		return DT_OK;
	snprintf(tmp, sizeof(tmp), "%s.tmp%ld", out, (long)getpid());
	gzFile in = gzopen(path, "rb");
	if (!in)
		return dt_err_set(err, DT_IO, "cannot open '%s': %s", path, strerror(errno));
	FILE *f = fopen(tmp, "wb");
	enum dt_status st = f ? DT_OK : dt_err_set(err, DT_IO, "cannot create '%s': %s", tmp, strerror(errno));
	char buf[1 << 16];
	while (!st) {
		int n = gzread(in, buf, sizeof(buf));
		if (n == 0)
			break;
		int zerr = 0;
		if (n < 0 || (n < (int)sizeof(buf) && !gzeof(in)))
			st = dt_err_set(err, DT_DATA, "'%s' is corrupt or cut short: %s", path, gzerror(in, &zerr));
		else if (fwrite(buf, 1, (size_t)n, f) != (size_t)n)
			st = dt_err_set(err, DT_IO, "cannot write '%s': %s", tmp, strerror(errno));
	}
	gzclose(in);
	if (f && fclose(f) != 0 && !st)
		st = dt_err_set(err, DT_IO, "cannot write '%s': %s", tmp, strerror(errno));
	if (!st && rename(tmp, out) != 0)
		st = dt_err_set(err, DT_IO, "cannot rename '%s': %s", tmp, strerror(errno));
	if (st && f)
		unlink(tmp);
	return st;
}

/* The plain file a member is read from (the gunzipped one for .gz). */
static void member_path(const char *tmp_dir, const char *member, char *path, size_t cap)
{
	const size_t n = strlen(member);
	const int gz = n > 3 && strcmp(member + n - 3, ".gz") == 0;
	snprintf(path, cap, "%s/%.*s", tmp_dir, (int)(gz ? n - 3 : n), member);
}

/* Both files of every source there, extracted or gunzipped when needed. */
static enum dt_status prepare(const char *tmp_dir, const struct source *s, int n, struct dt_err *err)
{
	for (int i = 0; i < n; i++) {
		const char *members[2] = { s[i].lang1, s[i].lang2 }, *want[2];
		int nwant = 0;
		for (int k = 0; k < 2; k++) {
			char path[4096], raw[4096];
			member_path(tmp_dir, members[k], path, sizeof(path));
			snprintf(raw, sizeof(raw), "%s/%s", tmp_dir, members[k]);
			if (!exists(path) && !exists(raw))
				want[nwant++] = members[k];
		}
		enum dt_status st = nwant ? extract(tmp_dir, &s[i], want, nwant, err) : DT_OK;
		for (int k = 0; k < 2 && !st; k++) {
			char path[4096], raw[4096];
			member_path(tmp_dir, members[k], path, sizeof(path));
			snprintf(raw, sizeof(raw), "%s/%s", tmp_dir, members[k]);
			if (!exists(path))
				st = gunzip(raw, err);
		}
		if (st)
			return st;
	}
	return DT_OK;
}

/* ---- the vocabulary and the pairs -------------------------------------------------- */

/* Strips ASCII whitespace at both ends, in place. */
static char *strip(char *s, ssize_t *len)
{
	char *e = s + *len;
	while (s < e && (*s == ' ' || (*s >= '\t' && *s <= '\r') || *s == '\x1c' || *s == '\x1d' || *s == '\x1e' ||
			 *s == '\x1f'))
		s++;
	while (e > s && (e[-1] == ' ' || (e[-1] >= '\t' && e[-1] <= '\r') || (e[-1] >= '\x1c' && e[-1] <= '\x1f')))
		e--;
	*e = '\0';
	*len = e - s;
	return s;
}

/* Code points of UTF-8 text (Python's len of a str). */
static int64_t code_points(const char *s, ssize_t len)
{
	int64_t n = 0;
	for (ssize_t i = 0; i < len; i++)
		n += ((unsigned char)s[i] & 0xC0) != 0x80;
	return n;
}

struct lines {
	char **v;
	size_t n, cap;
};

static void lines_push(struct lines *l, const char *s)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 4096;
		l->v = dt_xrealloc(l->v, l->cap * sizeof(*l->v));
	}
	l->v[l->n++] = dt_xstrdup(s);
}

/* t2t's generate_lines_for_vocab on one file. */
static enum dt_status sample_lines(const char *path, struct lines *out, struct dt_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return dt_err_set(err, DT_IO, "cannot open '%s': %s", path, strerror(errno));
	struct stat sb;
	const double size = fstat(fileno(f), &sb) == 0 ? (double)sb.st_size : 0;
	const int64_t countermax = (int64_t)(size / 1e6 / 2);
	double budget = 1e6;
	int64_t counter = 0;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	while ((len = getline(&line, &cap, f)) >= 0) {
		if (counter < countermax) {
			counter++;
			continue;
		}
		if (budget <= 0)
			break;
		char *s = strip(line, &len);
		budget -= (double)code_points(s, len);
		counter = 0;
		lines_push(out, s);
	}
	const int bad = ferror(f);
	free(line);
	fclose(f);
	return bad ? dt_err_set(err, DT_IO, "cannot read '%s'", path) : DT_OK;
}

static enum dt_status vocab(const struct wmt_problem *p, const char *tmp_dir, const char *data_dir,
			    struct dt_subword **sw, struct dt_err *err)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/vocab.%s.%d.subwords", data_dir, p->name, p->approx_vocab);
	if (exists(path)) {
		dt_info("found vocabulary file %s: using it", path);
		return dt_subword_load(path, sw, err);
	}
	struct lines l = { 0 };
	enum dt_status st = DT_OK;
	for (int i = 0; i < p->ntrain && !st; i++) {
		const char *members[2] = { p->train[i].lang1, p->train[i].lang2 };
		for (int k = 0; k < 2 && !st; k++) {
			char file[4096];
			member_path(tmp_dir, members[k], file, sizeof(file));
			st = sample_lines(file, &l, err);
		}
	}
	if (!st) {
		const int64_t t0 = dt_now_ns();
		*sw = dt_subword_build((const char *const *)l.v, l.n, p->approx_vocab);
		st = dt_subword_save(*sw, path, err);
		if (!st)
			dt_info("built a vocabulary of %d subwords (target %d) from %zu sampled lines in %.1f s: %s",
				dt_subword_size(*sw), p->approx_vocab, l.n, (double)(dt_now_ns() - t0) * 1e-9, path);
	}
	for (size_t i = 0; i < l.n; i++)
		free(l.v[i]);
	free(l.v);
	return st;
}

struct seqs {
	int32_t *tok;
	int64_t n, cap;
	int64_t *off;
	int64_t count, off_cap;
};

/* Appends the encoding of s and EOS as one sequence. */
static void seqs_add(struct seqs *q, const struct dt_subword *sw, const char *s, int32_t **buf, size_t *bcap)
{
	size_t k = dt_subword_encode(sw, s, *buf, *bcap);
	if (k > *bcap) {
		*bcap = k;
		*buf = dt_xrealloc(*buf, *bcap * sizeof(**buf));
		k = dt_subword_encode(sw, s, *buf, *bcap);
	}
	while (q->n + (int64_t)k + 1 > q->cap) {
		q->cap = q->cap ? 2 * q->cap : 1 << 16;
		q->tok = dt_xrealloc(q->tok, (size_t)q->cap * sizeof(*q->tok));
	}
	memcpy(q->tok + q->n, *buf, k * sizeof(int32_t));
	q->n += (int64_t)k;
	q->tok[q->n++] = DT_TEXT_EOS;
	if (q->count + 2 > q->off_cap) {
		q->off_cap = q->off_cap ? 2 * q->off_cap : 4096;
		q->off = dt_xrealloc(q->off, (size_t)q->off_cap * sizeof(*q->off));
	}
	q->off[0] = 0;
	q->off[++q->count] = q->n;
}

/* t2t's compile_data and text2text_txt_iterator over the sources, encoded. */
static enum dt_status encode_split(const struct source *s, int n, const char *tmp_dir, const struct dt_subword *sw,
				   struct dt_text_set *t, struct dt_err *err)
{
	struct seqs in = { 0 }, tg = { 0 };
	size_t bcap = 4096;
	int32_t *buf = dt_xmallocarray(bcap, sizeof(int32_t));
	enum dt_status st = DT_OK;
	for (int i = 0; i < n && !st; i++) {
		char p1[4096], p2[4096];
		member_path(tmp_dir, s[i].lang1, p1, sizeof(p1));
		member_path(tmp_dir, s[i].lang2, p2, sizeof(p2));
		FILE *f1 = fopen(p1, "rb"), *f2 = fopen(p2, "rb");
		if (!f1 || !f2)
			st = dt_err_set(err, DT_IO, "cannot open '%s': %s", !f1 ? p1 : p2, strerror(errno));
		char *l1 = NULL, *l2 = NULL;
		size_t c1 = 0, c2 = 0;
		ssize_t n1, n2;
		while (!st && (n1 = getline(&l1, &c1, f1)) >= 0 && (n2 = getline(&l2, &c2, f2)) >= 0) {
			char *a = strip(l1, &n1), *b = strip(l2, &n2);
			if (!*a || !*b)
				continue;
			seqs_add(&in, sw, a, &buf, &bcap);
			seqs_add(&tg, sw, b, &buf, &bcap);
		}
		if (!st && (ferror(f1) || ferror(f2)))
			st = dt_err_set(err, DT_IO, "cannot read '%s'", ferror(f1) ? p1 : p2);
		free(l1);
		free(l2);
		if (f1)
			fclose(f1);
		if (f2)
			fclose(f2);
	}
	free(buf);
	t->has_inputs = 1;
	t->count = in.count;
	t->in_off = in.off;
	t->in_tok = in.tok;
	t->tg_off = tg.off;
	t->tg_tok = tg.tok;
	if (!st && t->count == 0)
		st = dt_err_set(err, DT_DATA, "the sources of '%s' hold no pair of non-empty lines", s[0].lang1);
	return st;
}

static void set_free(struct dt_text_set *t)
{
	free(t->in_off);
	free(t->in_tok);
	free(t->tg_off);
	free(t->tg_tok);
}

enum dt_status dt_wmt_datagen(const char *problem, const char *data_dir, const char *tmp_dir, int num_shards,
			      struct dt_err *err)
{
	const struct wmt_problem *p = find(problem);
	if (!p)
		return dt_err_set(err, DT_USAGE, "'%s' is not a WMT problem", problem ? problem : "");
	if (!data_dir || !*data_dir)
		return dt_err_set(err, DT_USAGE, "datagen needs --data_dir (where the files go)");
	if (!tmp_dir || !*tmp_dir) {
		enum dt_status st = dt_err_set(err, DT_USAGE, "problem '%s' needs --tmp_dir", problem);
		dt_err_hint(err, "pass --tmp_dir DIR holding t2t's source archives (%s, ...)", strrchr(p->train[0].url, '/') + 1);
		return st;
	}
	/* every source first: nothing is written to data_dir before they are all there */
	enum dt_status st = prepare(tmp_dir, p->train, p->ntrain, err);
	if (!st)
		st = prepare(tmp_dir, p->dev, p->ndev, err);
	if (st)
		return st;
	if (mkdir(data_dir, 0777) != 0 && errno != EEXIST)
		return dt_err_set(err, DT_IO, "cannot create --data_dir '%s': %s", data_dir, strerror(errno));
	struct dt_subword *sw = NULL;
	if ((st = vocab(p, tmp_dir, data_dir, &sw, err)))
		return st;
	struct dt_text_set train = { 0 }, dev = { 0 };
	st = encode_split(p->train, p->ntrain, tmp_dir, sw, &train, err);
	if (!st)
		st = encode_split(p->dev, p->ndev, tmp_dir, sw, &dev, err);
	/* t2t's Text2TextProblem: 100 training shards, 1 dev */
	if (!st)
		st = dt_text_files_write(&train, data_dir, problem, "train", num_shards > 0 ? num_shards : 100, err);
	if (!st)
		st = dt_text_files_write(&dev, data_dir, problem, "dev", 1, err);
	set_free(&train);
	set_free(&dev);
	dt_subword_free(sw);
	return st;
}
