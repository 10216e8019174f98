/*
 * text.c — t2t's text problems (data/text.h): the algorithmic generators,
 * text2text_tmpdir's files, and the two encoders.
 */
#include "data/text.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "data/internal.h"
#include "data/subword.h"

enum algo { IDENTITY, REVERSE, ADDITION, MULTIPLICATION, SORT, TMPDIR, BIBLE, LM_KJV };

struct text_problem {
	const char *name;
	enum algo algo;
	int num_symbols;                /* t2t's num_symbols (the base for arithmetic) */
	int train_length, dev_length;
	int approx_vocab;               /* t2t's approx_vocab_size of a subword vocabulary; 0 without one */
};

/* t2t's train_size and dev_size for every algorithmic problem. */
#define TRAIN_SIZE 100000
#define DEV_SIZE 10000
/* The longest number an arithmetic example holds: its inputs are at most
 * train or dev length, so a product has at most that many digits. */
#define MAX_DIGITS 1024

static const struct text_problem problems[] = {
	{ "algorithmic_identity_binary40", IDENTITY, 2, 40, 400, 0 },
	{ "algorithmic_reverse_binary40", REVERSE, 2, 40, 400, 0 },
	{ "algorithmic_addition_decimal40", ADDITION, 10, 40, 400, 0 },
	{ "algorithmic_multiplication_decimal40", MULTIPLICATION, 10, 40, 400, 0 },
	/* t2t: train_length 10, dev_length 2 * 10, num_symbols max of both */
	{ "algorithmic_sort_problem", SORT, 20, 10, 20, 0 },
	{ "text2text_tmpdir", TMPDIR, 256, 0, 0, 32768 },
	{ "translate_enes_bible8k", BIBLE, 0, 0, 0, 8192 },
	{ "languagemodel_kjv8k", LM_KJV, 0, 0, 0, 8192 },
};
static const char *const names[] = {
	"algorithmic_identity_binary40",  "algorithmic_reverse_binary40", "algorithmic_addition_decimal40",
	"algorithmic_multiplication_decimal40", "algorithmic_sort_problem", "text2text_tmpdir",
	"translate_enes_bible8k", "languagemodel_kjv8k",
};

static const struct text_problem *find(const char *name)
{
	for (size_t i = 0; name && i < DT_ARRAY_LEN(problems); i++)
		if (strcmp(problems[i].name, name) == 0)
			return &problems[i];
	return NULL;
}

int dt_text_problem_is(const char *problem) { return find(problem) != NULL; }

const char *const *dt_text_problem_names(size_t *count)
{
	_Static_assert(DT_ARRAY_LEN(names) == DT_ARRAY_LEN(problems), "one name per problem");
	if (count)
		*count = DT_ARRAY_LEN(names);
	return names;
}

void dt_text_set_free(struct dt_text_set *t)
{
	if (!t)
		return;
	free(t->in_off);
	free(t->tg_off);
	free(t->in_tok);
	free(t->tg_tok);
	free(t->file_off);
	dt_subword_free(t->subword);
	free(t);
}

/* ---- a growing token list ------------------------------------------------------ */

struct toks {
	int32_t *v;
	int64_t n, cap;
};

static void push(struct toks *t, int32_t id)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 4096;
		t->v = dt_xrealloc(t->v, (size_t)t->cap * sizeof(*t->v));
	}
	t->v[t->n++] = id;
}

/* Appends one sequence of symbols (shifted past the reserved ids) and EOS. */
static void push_seq(struct toks *t, const int *sym, int n)
{
	for (int i = 0; i < n; i++)
		push(t, sym[i] + DT_TEXT_RESERVED);
	push(t, DT_TEXT_EOS);
}

/* ---- the algorithmic generators (t2t's algorithmic.py) ------------------------- */

static int below(struct dt_rng *r, int n) { return (int)dt_rng_below(r, (uint64_t)n); }

/* t2t's random_number_lower_endian: the top digit is not 0 unless alone. */
static void random_number(struct dt_rng *r, int len, int base, int *d)
{
	if (len == 1) {
		d[0] = below(r, base);
		return;
	}
	for (int i = 0; i < len - 1; i++)
		d[i] = below(r, base);
	d[len - 1] = below(r, base - 1) + 1;
}

/* Lower-endian digits of a + b or a * b into out; returns the count
 * (t2t's number_to_lower_endian: 0 is the single digit 0). */
static int arith(const int *a, int la, const int *b, int lb, int base, int mul, int *out)
{
	int n;
	if (mul) {
		n = la + lb;
		memset(out, 0, (size_t)n * sizeof(*out));
		for (int i = 0; i < la; i++) {
			int carry = 0;
			for (int j = 0; j < lb; j++) {
				int v = out[i + j] + a[i] * b[j] + carry;
				out[i + j] = v % base;
				carry = v / base;
			}
			for (int k = i + lb; carry; k++) {
				int v = out[k] + carry;
				out[k] = v % base;
				carry = v / base;
			}
		}
	} else {
		n = (la > lb ? la : lb) + 1;
		int carry = 0;
		for (int i = 0; i < n; i++) {
			int v = (i < la ? a[i] : 0) + (i < lb ? b[i] : 0) + carry;
			out[i] = v % base;
			carry = v / base;
		}
	}
	while (n > 1 && out[n - 1] == 0)
		n--;
	return n;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* One example of length at most max_length into in and tg. */
static void generate_one(const struct text_problem *p, struct dt_rng *r, int max_length, struct toks *in,
			 struct toks *tg)
{
	static _Thread_local int a[MAX_DIGITS], b[MAX_DIGITS], c[2 * MAX_DIGITS];
	const int base = p->num_symbols;
	if (p->algo == ADDITION || p->algo == MULTIPLICATION) {
		const int l1 = below(r, max_length / 2) + 1;
		const int l2 = below(r, max_length - l1 - 1) + 1;
		random_number(r, l1, base, a);
		random_number(r, l2, base, b);
		const int n = arith(a, l1, b, l2, base, p->algo == MULTIPLICATION, c);
		for (int i = 0; i < l1; i++)
			push(in, a[i] + DT_TEXT_RESERVED);
		push(in, base + DT_TEXT_RESERVED); /* the separator: symbol `base` */
		push_seq(in, b, l2);
		push_seq(tg, c, n);
		return;
	}
	const int len = below(r, max_length) + 1;
	for (int i = 0; i < len; i++)
		a[i] = below(r, base);
	push_seq(in, a, len);
	if (p->algo == REVERSE)
		for (int i = 0; i < len; i++)
			b[i] = a[len - 1 - i];
	else
		memcpy(b, a, (size_t)len * sizeof(*a));
	if (p->algo == SORT)
		qsort(b, (size_t)len, sizeof(*b), cmp_int);
	push_seq(tg, b, len);
}

static void offsets_push(int64_t **off, int64_t *cap, int64_t i, int64_t v)
{
	if (i >= *cap) {
		*cap = *cap ? 2 * *cap : 1024;
		*off = dt_xrealloc(*off, (size_t)*cap * sizeof(**off));
	}
	(*off)[i] = v;
}

static void finish(struct dt_text_set *t, struct toks *in, struct toks *tg)
{
	t->in_tok = in->v;
	t->tg_tok = tg->v;
	t->max_len = 0;
	for (int64_t i = 0; i < t->count; i++)
		if (dt_text_len(t, i) > t->max_len)
			t->max_len = dt_text_len(t, i);
}

static void generate(const struct text_problem *p, enum dt_split split, uint64_t seed, struct dt_text_set *t)
{
	/* Held-out examples come from streams of their own, never the training one. */
	static const char *const purpose[] = { "algorithmic/train", "algorithmic/test", "algorithmic/dev" };
	struct dt_rng r;
	dt_rng_derive(&r, seed, purpose[split], (uint64_t)p->algo);
	const int64_t count = split == DT_SPLIT_TRAIN ? TRAIN_SIZE : DEV_SIZE;
	const int max_length = split == DT_SPLIT_DEV ? p->dev_length : p->train_length;
	struct toks in = { 0 }, tg = { 0 };
	t->count = count;
	t->in_off = dt_xmallocarray((size_t)count + 1, sizeof(int64_t));
	t->tg_off = dt_xmallocarray((size_t)count + 1, sizeof(int64_t));
	t->in_off[0] = t->tg_off[0] = 0;
	for (int64_t i = 0; i < count; i++) {
		generate_one(p, &r, max_length, &in, &tg);
		t->in_off[i + 1] = in.n;
		t->tg_off[i + 1] = tg.n;
	}
	finish(t, &in, &tg);
}

/* ---- text2text_tmpdir ------------------------------------------------------------ */

/* Reads `path` into lines of byte ids (t2t strips each line). */
static enum dt_status read_lines(const char *path, const struct dt_subword *sw, struct toks *tok, int64_t **off,
				 int64_t *count, struct dt_err *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return dt_err_set(err, DT_DATA, "cannot open '%s': %s", path, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int64_t n = 0, ocap = 0;
	offsets_push(off, &ocap, 0, tok->n);
	while ((len = getline(&line, &cap, f)) >= 0) {
		const unsigned char *s = (const unsigned char *)line, *e = s + len;
		while (s < e && isspace(*s))
			s++;
		while (e > s && isspace(e[-1]))
			e--;
		if (sw) {
			line[e - (const unsigned char *)line] = '\0';
			int32_t small[256];
			const size_t m = dt_subword_encode(sw, (const char *)s, small, 256);
			int32_t *ids = m <= 256 ? small : dt_xmallocarray(m, sizeof(int32_t));
			if (m > 256)
				(void)dt_subword_encode(sw, (const char *)s, ids, m);
			for (size_t k = 0; k < m; k++)
				push(tok, ids[k]);
			if (ids != small)
				free(ids);
		} else {
			for (; s < e; s++)
				push(tok, (int32_t)*s + DT_TEXT_RESERVED);
		}
		push(tok, DT_TEXT_EOS);
		offsets_push(off, &ocap, ++n, tok->n);
	}
	const int bad = ferror(f);
	free(line);
	fclose(f);
	if (bad)
		return dt_err_set(err, DT_DATA, "cannot read '%s'", path);
	*count = n;
	return DT_OK;
}

static enum dt_status load_tmpdir(const char *dir, enum dt_split split, struct dt_text_set *t, struct dt_err *err)
{
	if (!dir || !*dir) {
		enum dt_status st = dt_err_set(err, DT_USAGE, "problem 'text2text_tmpdir' needs --data_dir");
		dt_err_hint(err, "pass --data_dir DIR with inputs.train.txt, targets.train.txt, inputs.eval.txt and "
			    "targets.eval.txt, one example per line");
		return st;
	}
	const char *which = split == DT_SPLIT_TRAIN ? "train" : "eval";
	char pin[4096], ptg[4096];
	snprintf(pin, sizeof(pin), "%s/inputs.%s.txt", dir, which);
	snprintf(ptg, sizeof(ptg), "%s/targets.%s.txt", dir, which);
	struct toks in = { 0 }, tg = { 0 };
	int64_t nin = 0, ntg = 0;
	enum dt_status st = read_lines(pin, t->subword, &in, &t->in_off, &nin, err);
	if (!st)
		st = read_lines(ptg, t->subword, &tg, &t->tg_off, &ntg, err);
	if (!st && nin != ntg)
		st = dt_err_set(err, DT_DATA, "'%s' has %lld lines but '%s' has %lld: one example per line pair", pin,
				(long long)nin, ptg, (long long)ntg);
	if (!st && nin == 0)
		st = dt_err_set(err, DT_DATA, "'%s' has no lines", pin);
	t->count = nin < ntg ? nin : ntg;
	finish(t, &in, &tg);
	return st;
}

int dt__text_approx_vocab(const char *problem)
{
	const struct text_problem *p = find(problem);
	return p ? p->approx_vocab : 0;
}

void dt_text_vocab_path(const char *problem, const char *dir, char *path, size_t cap)
{
	snprintf(path, cap, "%s/vocab.%s.%d.subwords", dir, problem, dt__text_approx_vocab(problem));
}

/* The problem's vocabularies and encoder, without examples; text2text_tmpdir's
 * subword vocabulary from vocab_dir when its file is there. */
static enum dt_status set_vocab(const struct text_problem *p, const char *vocab_dir, struct dt_text_set *t,
				struct dt_err *err)
{
	t->has_inputs = p->algo != LM_KJV;
	t->text2text = p->algo == TMPDIR || p->algo == BIBLE || p->algo == LM_KJV;
	const int files_only = p->algo == BIBLE || p->algo == LM_KJV;
	if (p->algo == TMPDIR || files_only) {
		t->encoder = DT_TEXT_BYTES;
		t->input_vocab = t->target_vocab = 256 + DT_TEXT_RESERVED;
		char path[4096];
		dt_text_vocab_path(p->name, vocab_dir && *vocab_dir ? vocab_dir : ".", path, sizeof(path));
		if (files_only && (!vocab_dir || !*vocab_dir || access(path, F_OK) != 0)) {
			enum dt_status st = dt_err_set(err, DT_USAGE, "problem '%s' reads t2t's data files and its vocabulary "
						       "'%s', which are not there", p->name, path);
			dt_err_hint(err, "write them first: dtrain datagen --problem=%s --data_dir=DIR, then pass "
				    "--data_dir=DIR (needs diatheke, sword-text-kjv and sword-text-sparv)", p->name);
			return st;
		}
		if (!vocab_dir || !*vocab_dir || access(path, F_OK) != 0)
			return DT_OK;
		enum dt_status st = dt_subword_load(path, &t->subword, err);
		if (st)
			return st;
		t->encoder = DT_TEXT_SUBWORD;
		t->input_vocab = t->target_vocab = dt_subword_size(t->subword);
		dt_info("vocabulary: %d subwords from %s", t->input_vocab, path);
		return DT_OK;
	}
	t->encoder = DT_TEXT_SYMBOLS;
	t->train_length = p->train_length;
	t->dev_length = p->dev_length;
	/* t2t's vocab_size is num_symbols + 2, which leaves the arithmetic
	 * separator (symbol `base`, id base + 2) without a row: it gets one. */
	const int sep = p->algo == ADDITION || p->algo == MULTIPLICATION;
	t->input_vocab = p->num_symbols + DT_TEXT_RESERVED + sep;
	t->target_vocab = p->num_symbols + DT_TEXT_RESERVED;
	return DT_OK;
}

static const char *const split_names[] = { "train", "test", "dev" };

enum dt_status dt_text_problem_load(const char *problem, const char *data_dir, enum dt_split split, uint64_t seed,
				    struct dt_dataset *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	const struct text_problem *p = find(problem);
	if (!p)
		return dt_err_set(err, DT_USAGE, "'%s' is not a text problem", problem ? problem : "");
	char **paths = NULL;
	int nfiles = 0;
	if (data_dir && *data_dir)
		dt_text_files_find(data_dir, p->name, split, &paths, &nfiles);
	if (!nfiles)
		return dt__text_load_source(problem, data_dir, data_dir, split, seed, out, err);
	struct dt_text_set *t = dt_xcalloc(1, sizeof(*t));
	out->text = t;
	enum dt_status st = set_vocab(p, data_dir, t, err);
	if (!st)
		st = dt_text_files_load(paths, nfiles, t, err);
	const char *slash = strrchr(paths[0], '/');
	const char *first = slash ? slash + 1 : paths[0];
	snprintf(out->source, sizeof(out->source), "%s: %d t2t data file(s) (TFRecord) in %s", p->name, nfiles,
		 data_dir);
	if (!st)
		dt_info("%s split: %lld examples from %d t2t data file(s) (%s) in %s", split_names[split],
			(long long)t->count, nfiles, first, data_dir);
	for (int i = 0; i < nfiles; i++)
		free(paths[i]);
	free(paths);
	out->count = (uint32_t)t->count;
	if (st)
		dt_dataset_release(out);
	return st;
}

enum dt_status dt__text_load_source(const char *problem, const char *data_dir, const char *vocab_dir,
				    enum dt_split split, uint64_t seed, struct dt_dataset *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	const struct text_problem *p = find(problem);
	if (!p)
		return dt_err_set(err, DT_USAGE, "'%s' is not a text problem", problem ? problem : "");
	struct dt_text_set *t = dt_xcalloc(1, sizeof(*t));
	out->text = t;
	enum dt_status st = set_vocab(p, vocab_dir, t, err);
	if (!st && (p->algo == BIBLE || p->algo == LM_KJV)) {
		st = dt_err_set(err, DT_USAGE, "problem '%s' has no data files in '%s'", p->name, data_dir ? data_dir : "");
		dt_err_hint(err, "write them first: dtrain datagen --problem=%s --data_dir=DIR (needs diatheke, "
			    "sword-text-kjv and sword-text-sparv)", p->name);
	}
	if (st) {
	} else if (p->algo == TMPDIR) {
		st = load_tmpdir(data_dir, split, t, err);
		snprintf(out->source, sizeof(out->source), "%s: %s (%s ids)", p->name, data_dir,
			 t->subword ? "subword" : "byte-level");
	} else {
		generate(p, split, seed, t);
		snprintf(out->source, sizeof(out->source), "%s, generated from the seed (length %d)", p->name,
			 split == DT_SPLIT_DEV ? p->dev_length : p->train_length);
	}
	out->count = (uint32_t)t->count;
	if (st)
		dt_dataset_release(out);
	return st;
}

/* ---- the encoders ------------------------------------------------------------------ */

enum dt_status dt_text_encode(const struct dt_text_set *t, int inputs, const char *line, int32_t *ids, int cap,
			      int *n, struct dt_err *err)
{
	DT_ASSERT(cap >= 1);
	const int vocab = inputs ? t->input_vocab : t->target_vocab;
	int k = 0;
	if (t->encoder == DT_TEXT_SUBWORD) {
		char *copy = dt_xstrdup(line);
		size_t len = strlen(copy);
		while (len && isspace((unsigned char)copy[len - 1]))
			copy[--len] = '\0';
		const char *s = copy;
		while (isspace((unsigned char)*s))
			s++;
		const size_t m = dt_subword_encode(t->subword, s, ids, (size_t)cap - 1);
		free(copy);
		k = m < (size_t)cap - 1 ? (int)m : cap - 1;
	} else if (t->encoder == DT_TEXT_BYTES) {
		const unsigned char *s = (const unsigned char *)line;
		size_t len = strlen(line);
		while (len && isspace(s[len - 1]))
			len--;
		while (len && isspace(*s))
			s++, len--;
		for (size_t i = 0; i < len && k < cap - 1; i++)
			ids[k++] = (int32_t)s[i] + DT_TEXT_RESERVED;
	} else {
		const char *s = line;
		while (*s && k < cap - 1) {
			while (isspace((unsigned char)*s))
				s++;
			if (!*s)
				break;
			char *end;
			long v = strtol(s, &end, 10);
			if (end == s || v < 0 || v + DT_TEXT_RESERVED >= vocab)
				return dt_err_set(err, DT_USAGE, "symbol '%.*s' is not one of 0 to %d",
						  (int)strcspn(s, " \t\r\n"), s, vocab - DT_TEXT_RESERVED - 1);
			ids[k++] = (int32_t)v + DT_TEXT_RESERVED;
			s = end;
		}
	}
	ids[k++] = DT_TEXT_EOS;
	*n = k;
	return DT_OK;
}

void dt_text_decode(const struct dt_text_set *t, const int32_t *ids, int n, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = '\0';
	if (t->encoder == DT_TEXT_SUBWORD) {
		int k = 0;
		while (k < n && ids[k] >= DT_TEXT_RESERVED)
			k++;
		(void)dt_subword_decode(t->subword, ids, (size_t)k, buf, cap);
		return;
	}
	for (int i = 0; i < n && ids[i] >= DT_TEXT_RESERVED && used + 1 < cap; i++) {
		if (t->encoder == DT_TEXT_BYTES) {
			buf[used++] = (char)(ids[i] - DT_TEXT_RESERVED);
			buf[used] = '\0';
		} else {
			int w = snprintf(buf + used, cap - used, "%s%d", used ? " " : "", ids[i] - DT_TEXT_RESERVED);
			if (w < 0 || (size_t)w >= cap - used) {
				buf[used] = '\0';
				break;
			}
			used += (size_t)w;
		}
	}
}
