/*
 * bleu_text.c — t2t-bleu's tokenizer and file scoring (see bleu_text.h).
 *
 * Tokens become int32 ids through a map local to one scoring, so that
 * nn/bleu.h counts them as it counts a model's ids.
 */
#include "data/bleu_text.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/atomic_file.h"

#define MAX_FILE ((size_t)1 << 31)

struct cps {
	uint32_t *v;
	size_t n, cap;
};

static void push(struct cps *s, uint32_t c)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->v = dt_xrealloc(s->v, s->cap * sizeof(*s->v));
	}
	s->v[s->n++] = c;
}

/* Strict UTF-8 (Python's decoder refuses what t2t would be given wrong):
 * 0 on an invalid sequence. */
static int decode(const char *text, size_t len, struct cps *out)
{
	const uint8_t *p = (const uint8_t *)text, *e = p + len;
	while (p < e) {
		const uint8_t b = *p;
		const int n = b < 0x80 ? 0 : (b & 0xe0) == 0xc0 ? 1 : (b & 0xf0) == 0xe0 ? 2 : (b & 0xf8) == 0xf0 ? 3 : -1;
		if (n < 0 || e - p <= n)
			return 0;
		uint32_t c = n == 0 ? b : n == 1 ? b & 0x1fu : n == 2 ? b & 0x0fu : b & 0x07u;
		for (int i = 1; i <= n; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return 0;
			c = c << 6 | (p[i] & 0x3fu);
		}
		static const uint32_t min[4] = { 0, 0x80, 0x800, 0x10000 };
		if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c < 0xe000))
			return 0;
		push(out, c);
		p += n + 1;
	}
	return 1;
}

static size_t put(uint32_t c, char *buf, size_t cap, size_t used)
{
	char t[4];
	int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
	static const uint8_t lead[5] = { 0, 0, 0xc0, 0xe0, 0xf0 };
	for (int i = n - 1; i > 0; i--, c >>= 6)
		t[i] = (char)(0x80 | (c & 0x3f));
	t[0] = (char)(n == 1 ? c : (lead[n] | c));
	for (int i = 0; i < n; i++, used++)
		if (used + 1 < cap)
			buf[used] = t[i];
	return used;
}

/* The three re.sub passes of bleu_tokenize, in code points. */
static void tokenize(const struct cps *in, int lower, struct cps *out)
{
	struct cps a = { 0 }, b = { 0 };
	for (size_t i = 0; i < in->n; i++) {
		const uint32_t c = in->v[i];
		if (lower && c == 0x130) { /* İ: str.lower() gives i and a combining dot */
			push(&a, 'i');
			push(&a, 0x307);
		} else {
			push(&a, lower ? dt__bleu_lower(c) : c);
		}
	}
	for (size_t i = 0; i < a.n; i++) /* ([^\d])([P]) -> "\1 \2 " */
		if (i + 1 < a.n && !dt__bleu_is_digit(a.v[i]) && dt__bleu_is_punct(a.v[i + 1])) {
			push(&b, a.v[i]);
			push(&b, ' ');
			push(&b, a.v[++i]);
			push(&b, ' ');
		} else {
			push(&b, a.v[i]);
		}
	a.n = 0;
	for (size_t i = 0; i < b.n; i++) /* ([P])([^\d]) -> " \1 \2" */
		if (i + 1 < b.n && dt__bleu_is_punct(b.v[i]) && !dt__bleu_is_digit(b.v[i + 1])) {
			push(&a, ' ');
			push(&a, b.v[i]);
			push(&a, ' ');
			push(&a, b.v[++i]);
		} else {
			push(&a, b.v[i]);
		}
	for (size_t i = 0; i < a.n; i++) { /* ([S]) -> " \1 " */
		const int sym = dt__bleu_is_symbol(a.v[i]);
		if (sym)
			push(out, ' ');
		push(out, a.v[i]);
		if (sym)
			push(out, ' ');
	}
	free(a.v);
	free(b.v);
}

size_t dt_bleu_text_tokenize(const char *line, size_t n, int lower, char *out, size_t cap)
{
	struct cps in = { 0 }, t = { 0 };
	if (!decode(line, n, &in)) {
		free(in.v);
		if (cap)
			out[0] = 0;
		return (size_t)-1;
	}
	tokenize(&in, lower, &t);
	size_t used = 0;
	int gap = 0;
	for (size_t i = 0; i < t.n; i++) {
		if (dt__bleu_is_space(t.v[i])) {
			gap = used > 0;
			continue;
		}
		if (gap)
			used = put(' ', out, cap, used);
		gap = 0;
		used = put(t.v[i], out, cap, used);
	}
	if (cap)
		out[used < cap ? used : cap - 1] = 0;
	free(in.v);
	free(t.v);
	return used;
}

/* ---- tokens to ids ------------------------------------------------------------ */

struct slot {
	size_t off, len; /* the token in the arena */
	int32_t id;      /* 0: empty */
};

struct intern {
	struct slot *s;
	size_t cap, count;
	struct cps arena;
};

static uint64_t hash(const uint32_t *v, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ v[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static struct slot *find(const struct intern *m, const uint32_t *v, size_t n)
{
	for (size_t i = hash(v, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		struct slot *s = &m->s[i];
		if (!s->id || (s->len == n && !memcmp(m->arena.v + s->off, v, n * sizeof(*v))))
			return s;
	}
}

static int32_t intern_id(struct intern *m, const uint32_t *v, size_t n)
{
	if (2 * (m->count + 1) > m->cap) {
		struct intern g = { .cap = m->cap ? 2 * m->cap : 1024, .count = m->count, .arena = m->arena };
		g.s = dt_xcalloc(g.cap, sizeof(*g.s));
		for (size_t i = 0; i < m->cap; i++)
			if (m->s[i].id)
				*find(&g, m->arena.v + m->s[i].off, m->s[i].len) = m->s[i];
		free(m->s);
		*m = g;
	}
	struct slot *s = find(m, v, n);
	if (!s->id) {
		*s = (struct slot){ .off = m->arena.n, .len = n, .id = (int32_t)++m->count };
		for (size_t i = 0; i < n; i++)
			push(&m->arena, v[i]);
	}
	return s->id;
}

/* One line's token ids into ids (reset first). 0: not UTF-8. */
static int line_ids(struct intern *m, const char *line, size_t n, int lower, struct cps *ids)
{
	struct cps in = { 0 }, t = { 0 };
	ids->n = 0;
	const int ok = decode(line, n, &in);
	if (ok)
		tokenize(&in, lower, &t);
	for (size_t i = 0; i < t.n;) {
		if (dt__bleu_is_space(t.v[i])) {
			i++;
			continue;
		}
		size_t j = i;
		while (j < t.n && !dt__bleu_is_space(t.v[j]))
			j++;
		push(ids, (uint32_t)intern_id(m, t.v + i, j - i));
		i = j;
	}
	free(in.v);
	free(t.v);
	return ok;
}

static size_t count_lines(const char *s, size_t len)
{
	size_t n = 1;
	for (size_t i = 0; i < len; i++)
		n += s[i] == '\n';
	return n;
}

enum dt_status dt_bleu_text_files(const char *ref_path, const char *hyp_path, int case_sensitive,
				  struct dt_bleu_counts *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	char *ref = NULL, *hyp = NULL;
	size_t rlen = 0, hlen = 0;
	enum dt_status st = dt_read_file(ref_path, MAX_FILE, &ref, &rlen, err);
	if (st)
		return dt_err_prefix(err, "reference");
	if ((st = dt_read_file(hyp_path, MAX_FILE, &hyp, &hlen, err))) {
		free(ref);
		return dt_err_prefix(err, "translation");
	}
	const size_t rn = count_lines(ref, rlen), hn = count_lines(hyp, hlen);
	if (rn != hn) {
		st = dt_err_set(err, DT_DATA,
				"%s has %zu lines and %s %zu: the translation needs one line per reference line (t2t's "
				"bleu_wrapper counts the text after the last newline as a line too)",
				ref_path, rn, hyp_path, hn);
		free(ref);
		free(hyp);
		return st;
	}
	struct intern m = { 0 };
	struct cps ri = { 0 }, hi = { 0 };
	const char *r = ref, *h = hyp;
	for (size_t line = 1; line <= rn && !st; line++) {
		const char *re = memchr(r, '\n', (size_t)(ref + rlen - r)), *he = memchr(h, '\n', (size_t)(hyp + hlen - h));
		if (!re)
			re = ref + rlen;
		if (!he)
			he = hyp + hlen;
		if (!line_ids(&m, r, (size_t)(re - r), !case_sensitive, &ri))
			st = dt_err_set(err, DT_DATA, "%s, line %zu: not UTF-8", ref_path, line);
		else if (!line_ids(&m, h, (size_t)(he - h), !case_sensitive, &hi))
			st = dt_err_set(err, DT_DATA, "%s, line %zu: not UTF-8", hyp_path, line);
		else
			dt_bleu_add(out, (const int32_t *)ri.v, (int)ri.n, (const int32_t *)hi.v, (int)hi.n);
		r = re + 1;
		h = he + 1;
	}
	free(ri.v);
	free(hi.v);
	free(m.s);
	free(m.arena.v);
	free(ref);
	free(hyp);
	return st;
}
