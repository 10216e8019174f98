/*
 * subword.c — t2t's SubwordTextEncoder (data/subword.h). Strings are held
 * as arrays of code points, as Python holds them, so lengths, slices and
 * the sort order are Python's.
 */
#include "data/subword.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/atomic_file.h"

#define MAX_CP 0x110000u
#define REPLACEMENT 0xFFFDu
#define UNDEFINED 0x3013u /* t2t's stand-in for an escape that is not a character */

/* ---- code point strings --------------------------------------------------------- */

struct cps {
	uint32_t *v;
	size_t n, cap;
};

static void cps_push(struct cps *s, uint32_t c)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->v = dt_xrealloc(s->v, s->cap * sizeof(*s->v));
	}
	s->v[s->n++] = c;
}

/* UTF-8 into code points; an invalid or overlong sequence, a surrogate or a
 * value past U+10FFFF gives U+FFFD for its first byte. */
static size_t utf8_decode(const char *text, size_t len, struct cps *out)
{
	size_t bad = 0;
	const uint8_t *p = (const uint8_t *)text, *e = p + len;
	while (p < e) {
		const uint8_t b = *p;
		int n = b < 0x80 ? 0 : (b & 0xe0) == 0xc0 ? 1 : (b & 0xf0) == 0xe0 ? 2 : (b & 0xf8) == 0xf0 ? 3 : -1;
		uint32_t c = n == 0 ? b : n == 1 ? b & 0x1fu : n == 2 ? b & 0x0fu : b & 0x07u;
		int ok = n >= 0 && e - p > n;
		for (int i = 1; ok && i <= n; i++) {
			ok = (p[i] & 0xc0) == 0x80;
			c = c << 6 | (p[i] & 0x3fu);
		}
		static const uint32_t min[4] = { 0, 0x80, 0x800, 0x10000 };
		if (ok && (c < min[n] || c >= MAX_CP || (c >= 0xd800 && c < 0xe000)))
			ok = 0;
		if (!ok) {
			cps_push(out, REPLACEMENT);
			p++;
			bad++;
			continue;
		}
		cps_push(out, c);
		p += n + 1;
	}
	return bad;
}

/* Appends cp as UTF-8 to buf (of cap) at *used; *used counts on past cap (what the whole needs). */
static void utf8_put(uint32_t c, char *buf, size_t cap, size_t *used)
{
	char t[4];
	int n;
	if (c < 0x80) {
		t[0] = (char)c;
		n = 1;
	} else if (c < 0x800) {
		t[0] = (char)(0xc0 | c >> 6);
		t[1] = (char)(0x80 | (c & 0x3f));
		n = 2;
	} else if (c < 0x10000) {
		t[0] = (char)(0xe0 | c >> 12);
		t[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		t[2] = (char)(0x80 | (c & 0x3f));
		n = 3;
	} else {
		t[0] = (char)(0xf0 | c >> 18);
		t[1] = (char)(0x80 | ((c >> 12) & 0x3f));
		t[2] = (char)(0x80 | ((c >> 6) & 0x3f));
		t[3] = (char)(0x80 | (c & 0x3f));
		n = 4;
	}
	for (int i = 0; i < n; i++, (*used)++)
		if (*used + 1 < cap)
			buf[*used] = t[i];
}

/* ---- a map from code point strings to int64 --------------------------------------- */

struct entry {
	size_t off, len; /* the key in the map's arena */
	uint64_t hash;
	int64_t value;
	int used;
};

struct smap {
	struct entry *e;
	size_t cap, count;
	struct cps arena;
};

static uint64_t hash_cps(const uint32_t *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static void smap_free(struct smap *m)
{
	free(m->e);
	free(m->arena.v);
	memset(m, 0, sizeof(*m));
}

static struct entry *smap_slot(const struct smap *m, const uint32_t *s, size_t n, uint64_t h)
{
	for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		struct entry *e = &m->e[i];
		if (!e->used || (e->hash == h && e->len == n && memcmp(m->arena.v + e->off, s, n * sizeof(*s)) == 0))
			return e;
	}
}

static int64_t *smap_find(const struct smap *m, const uint32_t *s, size_t n)
{
	if (!m->cap)
		return NULL;
	struct entry *e = smap_slot(m, s, n, hash_cps(s, n));
	return e->used ? &e->value : NULL;
}

/* The value of key s (inserted as 0 when new). */
static int64_t *smap_get(struct smap *m, const uint32_t *s, size_t n)
{
	if (2 * (m->count + 1) > m->cap) {
		struct smap old = *m;
		m->cap = m->cap ? 2 * m->cap : 1024;
		m->e = dt_xcalloc(m->cap, sizeof(*m->e));
		for (size_t i = 0; i < old.cap; i++)
			if (old.e[i].used)
				*smap_slot(m, old.arena.v + old.e[i].off, old.e[i].len, old.e[i].hash) = old.e[i];
		free(old.e);
	}
	const uint64_t h = hash_cps(s, n);
	struct entry *e = smap_slot(m, s, n, h);
	if (!e->used) {
		*e = (struct entry){ .off = m->arena.n, .len = n, .hash = h, .value = 0, .used = 1 };
		for (size_t i = 0; i < n; i++)
			cps_push(&m->arena, s[i]);
		m->count++;
	}
	return &e->value;
}

/* ---- the vocabulary ---------------------------------------------------------------- */

struct dt_subword {
	int count;                 /* ids */
	size_t *off, *len;         /* (count) subtoken id's code points in `chars` */
	struct cps chars;
	struct smap ids;           /* subtoken → id (the last id of a string listed twice; "" not mapped) */
	size_t max_len;            /* longest subtoken */
	uint8_t *alphabet;         /* (MAX_CP / 8) bitmap */
};

static const char *const reserved[2] = { "<pad>", "<EOS>" };
static const char escape_chars[] = "\\_u;0123456789";

static int in_alphabet(const struct dt_subword *v, uint32_t c)
{
	return c < MAX_CP && (v->alphabet[c >> 3] >> (c & 7) & 1);
}

static void alphabet_add(struct dt_subword *v, uint32_t c)
{
	if (c < MAX_CP)
		v->alphabet[c >> 3] |= (uint8_t)(1u << (c & 7));
}

static struct dt_subword *vocab_new(void)
{
	struct dt_subword *v = dt_xcalloc(1, sizeof(*v));
	v->alphabet = dt_xcalloc(MAX_CP / 8, 1);
	for (const char *c = escape_chars; *c; c++)
		alphabet_add(v, (uint8_t)*c);
	return v;
}

static void vocab_clear_list(struct dt_subword *v)
{
	free(v->off);
	free(v->len);
	free(v->chars.v);
	smap_free(&v->ids);
	v->off = v->len = NULL;
	v->chars = (struct cps){ 0 };
	v->count = 0;
	v->max_len = 0;
}

void dt_subword_free(struct dt_subword *v)
{
	if (!v)
		return;
	vocab_clear_list(v);
	free(v->alphabet);
	free(v);
}

/* _init_subtokens_from_list: the list (strings of `src`) becomes the ids in order. */
static void vocab_set_list(struct dt_subword *v, const struct cps *src, const size_t *off, const size_t *len, int n)
{
	vocab_clear_list(v);
	v->count = n;
	v->off = dt_xmallocarray((size_t)n + 1, sizeof(size_t));
	v->len = dt_xmallocarray((size_t)n + 1, sizeof(size_t));
	for (int i = 0; i < n; i++) {
		v->off[i] = v->chars.n;
		v->len[i] = len[i];
		for (size_t k = 0; k < len[i]; k++)
			cps_push(&v->chars, src->v[off[i] + k]);
		if (len[i] > v->max_len)
			v->max_len = len[i];
	}
	for (int i = 0; i < n; i++)
		if (v->len[i])
			*smap_get(&v->ids, v->chars.v + v->off[i], v->len[i]) = i;
}

/* ---- tokenizer and escaping ------------------------------------------------------- */

/* tokenizer.encode: calls fn(token start, length) for each token of s. */
static void tokenize(const uint32_t *s, size_t n, void (*fn)(void *, const uint32_t *, size_t), void *ctx)
{
	if (!n)
		return;
	size_t start = 0;
	int prev = dt_subword_is_alnum(s[0]);
	for (size_t pos = 1; pos < n; pos++) {
		const int cur = dt_subword_is_alnum(s[pos]);
		if (cur != prev) {
			if (!(pos - start == 1 && s[start] == ' ') || start == 0)
				fn(ctx, s + start, pos - start);
			start = pos;
		}
		prev = cur;
	}
	fn(ctx, s + start, n - start);
}

/* _escape_token into out (cleared first). */
static void escape(const struct dt_subword *v, const uint32_t *t, size_t n, struct cps *out)
{
	out->n = 0;
	for (size_t i = 0; i < n; i++) {
		const uint32_t c = t[i];
		if (c == '\\') {
			cps_push(out, '\\');
			cps_push(out, '\\');
		} else if (c == '_') {
			cps_push(out, '\\');
			cps_push(out, 'u');
		} else if (in_alphabet(v, c) && c != '\n') {
			cps_push(out, c);
		} else {
			char d[16];
			int k = snprintf(d, sizeof(d), "\\%u;", (unsigned)c);
			for (int j = 0; j < k; j++)
				cps_push(out, (uint8_t)d[j]);
		}
	}
	cps_push(out, '_');
}

/* _unescape_token of s[0..n) (its trailing '_' already cut) appended to out. */
static void unescape(const uint32_t *s, size_t n, struct cps *out)
{
	for (size_t i = 0; i < n;) {
		if (s[i] == '\\' && i + 1 < n && s[i + 1] == 'u') {
			cps_push(out, '_');
			i += 2;
			continue;
		}
		if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\\') {
			cps_push(out, '\\');
			i += 2;
			continue;
		}
		if (s[i] == '\\') {
			size_t j = i + 1;
			uint64_t val = 0;
			while (j < n && s[j] >= '0' && s[j] <= '9') {
				if (val < MAX_CP)
					val = val * 10 + (s[j] - '0');
				j++;
			}
			if (j > i + 1 && j < n && s[j] == ';') {
				/* Python's chr: up to U+10FFFF; surrogates could not be written as UTF-8 */
				cps_push(out, val >= MAX_CP || (val >= 0xd800 && val < 0xe000) ? UNDEFINED : (uint32_t)val);
				i = j + 1;
				continue;
			}
		}
		cps_push(out, s[i++]);
	}
}

/* _escaped_token_to_subtoken_ids: greedy longest prefix. Calls fn(id, start, len) per subtoken. */
static void segment(const struct dt_subword *v, const uint32_t *s, size_t n,
		    void (*fn)(void *, int64_t, size_t, size_t), void *ctx)
{
	size_t start = 0;
	while (start < n) {
		size_t end = n < start + v->max_len ? n : start + v->max_len;
		for (; end > start; end--) {
			const int64_t *id = smap_find(&v->ids, s + start, end - start);
			if (id) {
				fn(ctx, *id, start, end - start);
				break;
			}
		}
		/* every character of an escaped token is in the alphabet, and each is a subtoken */
		DT_ASSERT(end > start);
		start = end;
	}
}

/* ---- building ------------------------------------------------------------------- */

struct counter {
	struct smap *counts;
};

static void count_token(void *ctx, const uint32_t *t, size_t n)
{
	struct counter *c = ctx;
	++*smap_get(c->counts, t, n);
}

/* What one iteration's counting needs across segment()'s callback. */
struct sub_counts {
	struct smap *counts;
	const struct cps *esc;
	int64_t weight;
};

static void count_substrings(void *ctx, int64_t id, size_t start, size_t len)
{
	(void)id;
	(void)len;
	struct sub_counts *c = ctx;
	for (size_t end = start + 1; end <= c->esc->n; end++)
		*smap_get(c->counts, c->esc->v + start, end - start) += c->weight;
}

struct cand {
	int64_t count;
	size_t off, len; /* in the counts map's arena */
};

static const uint32_t *cand_str(const struct smap *m, const struct cand *c) { return m->arena.v + c->off; }

static const struct smap *sort_map; /* qsort has no context argument */

static int cmp_cand_desc(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	const uint32_t *s = cand_str(sort_map, x), *t = cand_str(sort_map, y);
	for (size_t i = 0; i < x->len && i < y->len; i++)
		if (s[i] != t[i])
			return s[i] < t[i] ? 1 : -1;
	return x->len == y->len ? 0 : x->len < y->len ? 1 : -1;
}

static int cmp_len_desc(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return x->len == y->len ? 0 : x->len < y->len ? 1 : -1;
}

/* build_from_token_counts(token_counts, min_count, 4 iterations, RESERVED_TOKENS) */
static struct dt_subword *build_from_counts(const struct smap *tokens, int64_t min_count)
{
	struct dt_subword *v = vocab_new();
	for (size_t i = 0; i < tokens->cap; i++)
		if (tokens->e[i].used)
			for (size_t k = 0; k < tokens->e[i].len; k++)
				alphabet_add(v, tokens->arena.v[tokens->e[i].off + k]);
	for (int r = 0; r < 2; r++)
		for (const char *c = reserved[r]; *c; c++)
			alphabet_add(v, (uint8_t)*c);
	/* The first list: t2t's is the reserved tokens and then the alphabet, but
	 * only the alphabet is mapped (and sets the longest subtoken), so the
	 * reserved tokens play no part in the first segmentation. */
	struct cps list = { 0 };
	size_t *off = NULL, *len = NULL;
	int n = 0, cap = 0;
	size_t nalpha = 0;
#define LIST_ADD(str, l)                                                       \
	do {                                                                   \
		if (n == cap) {                                                \
			cap = cap ? 2 * cap : 256;                             \
			off = dt_xrealloc(off, (size_t)cap * sizeof(*off));    \
			len = dt_xrealloc(len, (size_t)cap * sizeof(*len));    \
		}                                                              \
		off[n] = list.n;                                               \
		len[n] = (l);                                                  \
		for (size_t k_ = 0; k_ < (l); k_++)                            \
			cps_push(&list, (str)[k_]);                            \
		n++;                                                           \
	} while (0)
	for (uint32_t c = 0; c < MAX_CP; c++)
		if (in_alphabet(v, c)) {
			LIST_ADD(&c, (size_t)1);
			nalpha++;
		}
	vocab_set_list(v, &list, off, len, n);
	if (min_count < 1)
		min_count = 1;
	struct cps esc = { 0 };
	for (int iter = 0; iter < 4; iter++) {
		struct smap counts = { 0 };
		for (size_t i = 0; i < tokens->cap; i++) {
			if (!tokens->e[i].used)
				continue;
			escape(v, tokens->arena.v + tokens->e[i].off, tokens->e[i].len, &esc);
			struct sub_counts sc = { &counts, &esc, tokens->e[i].value };
			segment(v, esc.v, esc.n, count_substrings, &sc);
		}
		/* candidates with count >= min_count, longest first */
		struct cand *cands = dt_xmallocarray(counts.count + 1, sizeof(*cands));
		size_t nc = 0;
		for (size_t i = 0; i < counts.cap; i++)
			if (counts.e[i].used && counts.e[i].value >= min_count)
				cands[nc++] = (struct cand){ 0, counts.e[i].off, counts.e[i].len };
		qsort(cands, nc, sizeof(*cands), cmp_len_desc);
		struct cand *taken = dt_xmallocarray(nc + nalpha + 1, sizeof(*taken));
		size_t nt = 0;
		for (size_t i = 0; i < nc; i++) {
			const uint32_t *s = counts.arena.v + cands[i].off;
			const int64_t *pc = smap_find(&counts, s, cands[i].len);
			const int64_t cnt = pc ? *pc : 0;
			if (cnt < min_count)
				continue;
			if (!(cands[i].len == 1 && in_alphabet(v, s[0])))
				taken[nt++] = (struct cand){ cnt, cands[i].off, cands[i].len };
			/* every prefix of a counted substring was counted (it starts at the same boundary) */
			for (size_t l = 1; l < cands[i].len; l++) {
				int64_t *p = smap_find(&counts, s, l);
				if (p)
					*p -= cnt;
			}
		}
		/* the alphabet with its (decremented) counts; its strings must live in the arena */
		for (uint32_t c = 0; c < MAX_CP; c++) {
			if (!in_alphabet(v, c))
				continue;
			int64_t *cnt = smap_find(&counts, &c, 1);
			const int64_t value = cnt ? *cnt : 0;
			if (!cnt)
				smap_get(&counts, &c, 1);
			const struct entry *e = smap_slot(&counts, &c, 1, hash_cps(&c, 1));
			taken[nt++] = (struct cand){ value, e->off, 1 };
		}
		sort_map = &counts;
		qsort(taken, nt, sizeof(*taken), cmp_cand_desc);
		/* the new list: the escaped reserved tokens, then the sorted strings */
		list.n = 0;
		n = 0;
		for (int r = 0; r < 2; r++) {
			uint32_t s[8];
			size_t l = strlen(reserved[r]);
			for (size_t k = 0; k < l; k++)
				s[k] = (uint8_t)reserved[r][k];
			escape(v, s, l, &esc);
			LIST_ADD(esc.v, esc.n);
		}
		for (size_t i = 0; i < nt; i++)
			LIST_ADD(counts.arena.v + taken[i].off, taken[i].len);
		vocab_set_list(v, &list, off, len, n);
		free(cands);
		free(taken);
		smap_free(&counts);
	}
#undef LIST_ADD
	free(esc.v);
	free(list.v);
	free(off);
	free(len);
	return v;
}

struct bisect {
	const struct smap *tokens;
	int target;
};

static int64_t dist(const struct dt_subword *v, int target) { return llabs((long long)v->count - target); }

/* build_to_target_size's bisect(min_val, max_val) */
static struct dt_subword *bisect(const struct bisect *b, int64_t lo, int64_t hi)
{
	const int64_t present = (lo + hi) / 2;
	struct dt_subword *v = build_from_counts(b->tokens, present);
	const int ok = dist(v, b->target) * 100 < b->target;
	if (ok || lo >= hi || present < 2)
		return v;
	struct dt_subword *other = v->count > b->target ? bisect(b, present + 1, hi) : bisect(b, lo, present - 1);
	if (dist(other, b->target) < dist(v, b->target)) {
		dt_subword_free(v);
		return other;
	}
	dt_subword_free(other);
	return v;
}

struct dt_subword *dt_subword_build(const char *const *lines, size_t n, int target_size)
{
	struct smap tokens = { 0 };
	struct counter c = { &tokens };
	struct cps s = { 0 };
	for (size_t i = 0; i < n; i++) {
		s.n = 0;
		utf8_decode(lines[i], strlen(lines[i]), &s);
		tokenize(s.v, s.n, count_token, &c);
	}
	free(s.v);
	const struct bisect b = { &tokens, target_size < 1 ? 1 : target_size };
	struct dt_subword *v = bisect(&b, 1, 1000);
	smap_free(&tokens);
	return v;
}

/* ---- encoding and decoding ----------------------------------------------------------- */

struct enc {
	const struct dt_subword *v;
	struct cps esc;
	int32_t *ids;
	size_t cap, n;
};

static void enc_id(void *ctx, int64_t id, size_t start, size_t len)
{
	(void)start;
	(void)len;
	struct enc *e = ctx;
	if (e->n < e->cap)
		e->ids[e->n] = (int32_t)id;
	e->n++;
}

static void enc_token(void *ctx, const uint32_t *t, size_t n)
{
	struct enc *e = ctx;
	escape(e->v, t, n, &e->esc);
	segment(e->v, e->esc.v, e->esc.n, enc_id, e);
}

size_t dt_subword_encode(const struct dt_subword *v, const char *text, int32_t *ids, size_t cap)
{
	struct cps s = { 0 };
	utf8_decode(text, strlen(text), &s);
	struct enc e = { .v = v, .ids = ids, .cap = cap };
	tokenize(s.v, s.n, enc_token, &e);
	free(s.v);
	free(e.esc.v);
	return e.n;
}

size_t dt_subword_decode(const struct dt_subword *v, const int32_t *ids, size_t n, char *buf, size_t cap)
{
	struct cps cat = { 0 }, tok = { 0 };
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= 0 && ids[i] < v->count)
			for (size_t k = 0; k < v->len[ids[i]]; k++)
				cps_push(&cat, v->chars.v[v->off[ids[i]] + k]);
	size_t used = 0;
	int prev_alnum = 0, first = 1;
	for (size_t a = 0; a < cat.n;) {
		size_t b = a;
		while (b < cat.n && cat.v[b] != '_')
			b++;
		if (b > a) {
			tok.n = 0;
			unescape(cat.v + a, b - a, &tok);
			if (tok.n) {
				const int alnum = dt_subword_is_alnum(tok.v[0]);
				if (!first && prev_alnum && alnum)
					utf8_put(' ', buf, cap, &used);
				for (size_t k = 0; k < tok.n; k++)
					utf8_put(tok.v[k], buf, cap, &used);
				prev_alnum = alnum;
				first = 0;
			}
		}
		a = b + 1;
	}
	if (cap)
		buf[used < cap ? used : cap - 1] = '\0';
	free(cat.v);
	free(tok.v);
	return used;
}

int dt_subword_size(const struct dt_subword *v) { return v->count; }

void dt_subword_token(const struct dt_subword *v, int id, char *buf, size_t cap)
{
	size_t used = 0;
	if (id >= 0 && id < v->count)
		for (size_t k = 0; k < v->len[id]; k++)
			utf8_put(v->chars.v[v->off[id] + k], buf, cap, &used);
	if (cap)
		buf[used < cap ? used : cap - 1] = '\0';
}

/* ---- the file -------------------------------------------------------------------- */

enum dt_status dt_subword_parse(const char *name, const char *text, size_t len, struct dt_subword **out,
				struct dt_err *err)
{
	*out = NULL;
	struct cps all = { 0 }, line = { 0 };
	size_t *off = NULL, *lens = NULL;
	int n = 0, cap = 0;
	enum dt_status st = DT_OK;
	for (size_t a = 0; a < len && !st;) {
		size_t b = a;
		while (b < len && text[b] != '\n')
			b++;
		size_t e = b;
		while (e > a && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r' ||
				 text[e - 1] == '\v' || text[e - 1] == '\f'))
			e--;
		size_t s = a;
		if (e > s && ((text[s] == '\'' && text[e - 1] == '\'') || (text[s] == '"' && text[e - 1] == '"'))) {
			s++;
			e = e > s ? e - 1 : s;
		}
		line.n = 0;
		if (utf8_decode(text + s, e - s, &line))
			st = dt_err_set(err, DT_DATA, "vocabulary '%s' line %d is not UTF-8", name, n + 1);
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			off = dt_xrealloc(off, (size_t)cap * sizeof(*off));
			lens = dt_xrealloc(lens, (size_t)cap * sizeof(*lens));
		}
		off[n] = all.n;
		lens[n] = line.n;
		for (size_t k = 0; k < line.n; k++)
			cps_push(&all, line.v[k]);
		n++;
		a = b + 1;
	}
	if (!st && n < 2)
		st = dt_err_set(err, DT_DATA, "vocabulary '%s' has %d line(s): a subword vocabulary starts with <pad> and "
				"<EOS>", name, n);
	if (!st) {
		struct dt_subword *v = vocab_new();
		vocab_set_list(v, &all, off, lens, n);
		for (size_t k = 0; k < all.n; k++)
			alphabet_add(v, all.v[k]);
		/* greedy segmentation ends on single characters: each of the alphabet needs
		 * its own subtoken (t2t's files always have them; t2t fails at encode time) */
		for (uint32_t c = 0; c < MAX_CP && !st; c++)
			if (in_alphabet(v, c) && !smap_find(&v->ids, &c, 1)) {
				char u[8];
				size_t ul = 0;
				utf8_put(c, u, sizeof(u), &ul);
				u[ul] = '\0';
				st = dt_err_set(err, DT_DATA, "vocabulary '%s' has no subtoken '%s' (U+%04X): every character of "
						"its subtokens and of \"\\_u;0123456789\" needs one, as in t2t's files", name,
						c == '\n' ? "\\n" : u, (unsigned)c);
			}
		if (st)
			dt_subword_free(v);
		else
			*out = v;
	}
	free(all.v);
	free(line.v);
	free(off);
	free(lens);
	return st;
}

enum dt_status dt_subword_load(const char *path, struct dt_subword **out, struct dt_err *err)
{
	char *text;
	size_t len;
	*out = NULL;
	enum dt_status st = dt_read_file(path, (size_t)1 << 30, &text, &len, err);
	if (st)
		return st;
	st = dt_subword_parse(path, text, len, out, err);
	free(text);
	return st;
}

enum dt_status dt_subword_save(const struct dt_subword *v, const char *path, struct dt_err *err)
{
	size_t cap = 16, used = 0;
	for (int i = 0; i < v->count; i++)
		cap += 4 * v->len[i] + 3;
	char *buf = dt_xmalloc(cap);
	for (int i = 0; i < v->count; i++) {
		buf[used++] = '\'';
		for (size_t k = 0; k < v->len[i]; k++)
			utf8_put(v->chars.v[v->off[i] + k], buf, cap, &used);
		buf[used++] = '\'';
		buf[used++] = '\n';
	}
	enum dt_status st = dt_write_file_atomic(path, buf, used, err);
	free(buf);
	return st;
}
