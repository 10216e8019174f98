/*
 * csv.c — the RFC 4180 parser and the csv problem (csv.h).
 */
#include "data/csv.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "data/internal.h"

#define MAX_CSV_BYTES ((size_t)1 << 30)

void dt_csv_release(struct dt_csv *c)
{
	if (!c)
		return;
	free(c->field);
	free(c->line);
	free(c->text);
	memset(c, 0, sizeof(*c));
}

struct parser {
	const char *buf, *source;
	size_t len, pos, max_fields;
	uint32_t line;        /* of buf[pos] */
	char *out;            /* next byte of text */
	struct dt_csv *c;
	size_t nfields, cap;  /* in c->field */
	uint32_t nrec, rec_cap;
};

static void push_field(struct parser *p, char *f)
{
	if (p->nfields == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 256;
		p->c->field = dt_xrealloc(p->c->field, p->cap * sizeof(char *));
	}
	p->c->field[p->nfields++] = f;
}

static int is_end(char ch)
{
	return ch == ',' || ch == '\n' || ch == '\r';
}

/* One field at p->pos into p->out; leaves pos at its terminator (or the end). */
static enum dt_status parse_field(struct parser *p, uint32_t rec_line, uint32_t col, struct dt_err *err)
{
	const char *b = p->buf;
	if (p->pos < p->len && b[p->pos] == '"') {
		uint32_t open_line = p->line;
		p->pos++;
		for (;;) {
			if (p->pos >= p->len)
				return dt_err_set(err, DT_DATA, "'%s' line %u: the quoted field %u opened there never "
						  "closes", p->source, open_line, col + 1);
			char ch = b[p->pos];
			if (ch == '"') {
				if (p->pos + 1 < p->len && b[p->pos + 1] == '"') {
					*p->out++ = '"';
					p->pos += 2;
					continue;
				}
				p->pos++;
				break;
			}
			if (ch == '\0')
				return dt_err_set(err, DT_DATA, "'%s' line %u: a NUL byte in field %u", p->source, p->line,
						  col + 1);
			if (ch == '\n')
				p->line++;
			*p->out++ = ch;
			p->pos++;
		}
		if (p->pos < p->len && !is_end(b[p->pos]))
			return dt_err_set(err, DT_DATA, "'%s' line %u: '%c' after the closing quote of field %u (a "
					  "quoted field ends at a comma or the end of the line)", p->source, p->line,
					  isprint((unsigned char)b[p->pos]) ? b[p->pos] : '?', col + 1);
	} else {
		while (p->pos < p->len && !is_end(b[p->pos])) {
			char ch = b[p->pos];
			if (ch == '"')
				return dt_err_set(err, DT_DATA, "'%s' line %u: a quote inside the unquoted field %u (quote "
						  "the whole field and double the quotes inside)", p->source, rec_line, col + 1);
			if (ch == '\0')
				return dt_err_set(err, DT_DATA, "'%s' line %u: a NUL byte in field %u", p->source, p->line,
						  col + 1);
			*p->out++ = ch;
			p->pos++;
		}
	}
	if (p->pos < p->len && b[p->pos] == '\r' && (p->pos + 1 >= p->len || b[p->pos + 1] != '\n'))
		return dt_err_set(err, DT_DATA, "'%s' line %u: a carriage return not followed by a line feed", p->source,
				  p->line);
	*p->out++ = '\0';
	return DT_OK;
}

enum dt_status dt_csv_parse(const char *buf, size_t len, const char *source, size_t max_fields,
			    struct dt_csv *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	struct parser p = { .buf = buf, .source = source, .len = len, .line = 1, .c = out,
			    .max_fields = max_fields ? max_fields : (size_t)1 << 28 };
	/* Each field's bytes plus its NUL fit in its raw bytes plus its
	 * terminator; only the last field may lack one. */
	out->text = dt_xmalloc(len + 1);
	p.out = out->text;
	if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
		p.pos = 3;
	while (p.pos < len) {
		if (buf[p.pos] == '\n' || (buf[p.pos] == '\r' && p.pos + 1 < len && buf[p.pos + 1] == '\n')) {
			p.pos += buf[p.pos] == '\r' ? 2 : 1; /* a blank line */
			p.line++;
			continue;
		}
		const uint32_t rec_line = p.line;
		const size_t first = p.nfields;
		for (uint32_t col = 0;; col++) {
			if (p.nfields >= p.max_fields)
				return dt_err_set(err, DT_DATA, "'%s' line %u: more than %zu fields in all", source, p.line,
						  p.max_fields);
			char *start = p.out;
			enum dt_status st = parse_field(&p, rec_line, col, err);
			if (st)
				return st;
			push_field(&p, start);
			if (p.pos < len && buf[p.pos] == ',') {
				p.pos++;
				continue;
			}
			if (p.pos < len) { /* LF or CRLF */
				p.pos += buf[p.pos] == '\r' ? 2 : 1;
				p.line++;
			}
			break;
		}
		const size_t n = p.nfields - first;
		if (p.nrec == 0) {
			out->cols = (uint32_t)n;
		} else if (n != out->cols) {
			return dt_err_set(err, DT_DATA, "'%s' line %u: %zu fields, but the header has %u", source, rec_line,
					  n, out->cols);
		}
		if (p.nrec == p.rec_cap) {
			p.rec_cap = p.rec_cap ? 2 * p.rec_cap : 256;
			out->line = dt_xrealloc(out->line, (size_t)p.rec_cap * sizeof(uint32_t));
		}
		out->line[p.nrec++] = rec_line;
	}
	if (p.nrec == 0)
		return dt_err_set(err, DT_DATA, "'%s' is empty: a CSV file starts with a header row", source);
	out->rows = p.nrec - 1;
	return DT_OK;
}

/* ---- the csv problem ----------------------------------------------------- */

static void column_list(const struct dt_csv *c, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = '\0';
	for (uint32_t j = 0; j < c->cols && used + 1 < cap; j++) {
		int n = snprintf(buf + used, cap - used, "%s'%s'", j ? ", " : "", c->field[j]);
		if (n < 0)
			break;
		used += (size_t)n;
	}
}

static enum dt_status parse_number(const char *source, const struct dt_csv *c, uint32_t r, uint32_t j,
				   double *v, struct dt_err *err)
{
	const char *s = c->field[((size_t)r + 1) * c->cols + j];
	const char *col = c->field[j];
	char *end;
	errno = 0;
	double d = strtod(s, &end);
	while (end != s && isspace((unsigned char)*end))
		end++;
	int blank = 1;
	for (const char *q = s; *q; q++)
		blank &= isspace((unsigned char)*q) != 0;
	if (blank)
		return dt_err_set(err, DT_DATA, "'%s' row %u (line %u), column '%s': missing value", source, r + 1,
				  c->line[r + 1], col);
	if (end == s || *end || !isfinite(d))
		return dt_err_set(err, DT_DATA, "'%s' row %u (line %u), column '%s': '%.40s' is not a %snumber", source,
				  r + 1, c->line[r + 1], col, s, end == s || *end ? "" : "finite ");
	*v = d;
	return DT_OK;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Labels as integers, or as names numbered in sorted order. */
static enum dt_status read_labels(const char *source, const struct dt_csv *c, uint32_t lc, uint8_t *labels,
				  int *num_classes, struct dt_err *err)
{
	int integers = 1;
	long max = 0;
	for (uint32_t r = 0; r < c->rows; r++) {
		const char *s = c->field[((size_t)r + 1) * c->cols + lc];
		if (!*s)
			return dt_err_set(err, DT_DATA, "'%s' row %u (line %u), column '%s': missing label", source, r + 1,
					  c->line[r + 1], c->field[lc]);
		char *end;
		errno = 0;
		long v = strtol(s, &end, 10);
		if (*end || end == s || errno || v < 0 || !isdigit((unsigned char)s[0]))
			integers = 0;
		else if (v > max)
			max = v;
	}
	if (integers) {
		if (max >= DT_MAX_CLASSES)
			return dt_err_set(err, DT_DATA, "'%s' column '%s': label %ld, but dtrain's labels are bytes (at "
					  "most %d classes)", source, c->field[lc], max, DT_MAX_CLASSES);
		for (uint32_t r = 0; r < c->rows; r++)
			labels[r] = (uint8_t)strtol(c->field[((size_t)r + 1) * c->cols + lc], NULL, 10);
		*num_classes = max < 1 ? 2 : (int)max + 1;
		return DT_OK;
	}
	char **names = dt_xmallocarray(c->rows, sizeof(char *));
	for (uint32_t r = 0; r < c->rows; r++)
		names[r] = c->field[((size_t)r + 1) * c->cols + lc];
	qsort(names, c->rows, sizeof(char *), cmp_name);
	uint32_t distinct = 0;
	for (uint32_t r = 0; r < c->rows; r++)
		if (r == 0 || strcmp(names[r], names[distinct - 1]) != 0)
			names[distinct++] = names[r];
	if (distinct > DT_MAX_CLASSES) {
		free(names);
		return dt_err_set(err, DT_DATA, "'%s' column '%s' has %u distinct labels, but dtrain's labels are bytes "
				  "(at most %d classes)", source, c->field[lc], distinct, DT_MAX_CLASSES);
	}
	for (uint32_t r = 0; r < c->rows; r++) {
		const char *s = c->field[((size_t)r + 1) * c->cols + lc];
		char **hit = bsearch(&s, names, distinct, sizeof(char *), cmp_name);
		labels[r] = (uint8_t)(hit - names);
	}
	free(names);
	*num_classes = distinct < 2 ? 2 : (int)distinct;
	return DT_OK;
}

enum dt_status dt__csv_problem_load(const char *path, const struct dt_data_options *o, enum dt_split split,
				    uint64_t seed, struct dt_dataset *out, struct dt_err *err)
{
	uint8_t *buf;
	size_t len;
	enum dt_status st = dt__read_file(path, MAX_CSV_BYTES, &buf, &len, err);
	if (st)
		return st;
	struct dt_csv c;
	st = dt_csv_parse((const char *)buf, len, path, 0, &c, err);
	free(buf);
	if (st) {
		dt_csv_release(&c);
		return st;
	}
	char cols[512];
	column_list(&c, cols, sizeof(cols));
	uint32_t lc = c.cols;
	for (uint32_t j = 0; j < c.cols; j++)
		if (strcmp(c.field[j], o->label_column) == 0)
			lc = j;
	uint32_t nf = c.cols - 1, *pick = NULL, *train = NULL, n = 0, ntrain = 0;
	double *x = NULL;
	uint8_t *labels = NULL;
	int classes = 0;
	if (lc == c.cols) {
		if (o->label_column[0])
			st = dt_err_set(err, DT_USAGE, "--label_column '%s' is not a column of '%s'", o->label_column, path);
		else
			st = dt_err_set(err, DT_USAGE, "problem 'csv' needs --label_column naming a column of '%s'", path);
		dt_err_hint(err, "its columns: %s", cols);
		goto done;
	}
	if (nf == 0 || c.rows == 0) {
		st = dt_err_set(err, DT_DATA, "'%s' has %s", path, nf ? "no rows after its header" : "no feature columns");
		goto done;
	}
	/* Every value of every row is checked, whatever the split. */
	x = dt_xmallocarray((size_t)c.rows * nf, sizeof(double));
	for (uint32_t r = 0; r < c.rows && !st; r++)
		for (uint32_t j = 0, k = 0; j < c.cols && !st; j++)
			if (j != lc)
				st = parse_number(path, &c, r, j, &x[(size_t)r * nf + k++], err);
	labels = dt_xmalloc(c.rows);
	if (st || (st = read_labels(path, &c, lc, labels, &classes, err)))
		goto done;
	if ((st = dt__split_select(c.rows, o->validation_split, seed, split, path, &pick, &n, err)) ||
	    (st = dt__split_select(c.rows, o->validation_split, seed, DT_SPLIT_TRAIN, path, &train, &ntrain, err)))
		goto done;

	memset(out, 0, sizeof(*out));
	out->features = dt_xmallocarray((size_t)n * nf, sizeof(float));
	out->labels = dt_xmalloc(n);
	for (uint32_t k = 0; k < nf; k++) {
		double sum = 0, sum2 = 0;
		for (uint32_t i = 0; i < ntrain; i++)
			sum += x[(size_t)train[i] * nf + k];
		const double mean = sum / ntrain;
		for (uint32_t i = 0; i < ntrain; i++) {
			double d = x[(size_t)train[i] * nf + k] - mean;
			sum2 += d * d;
		}
		double sd = sqrt(sum2 / ntrain);
		if (!(sd > 1e-12))
			sd = 1;
		for (uint32_t i = 0; i < n; i++)
			out->features[(size_t)i * nf + k] = (float)((x[(size_t)pick[i] * nf + k] - mean) / sd);
	}
	for (uint32_t i = 0; i < n; i++)
		out->labels[i] = labels[pick[i]];
	out->count = n;
	out->height = 1;
	out->width = 1;
	out->channels = (int)nf;
	out->num_classes = classes;
	out->mean = 0;
	out->std = 1;
	snprintf(out->source, sizeof(out->source), "csv %s from %s", split == DT_SPLIT_TRAIN ? "train" : "test", path);
	dt_log(DT_LOG_INFO, "%s: %u rows of %u features, label '%s' with %d classes", out->source, n, nf,
	       o->label_column, classes);
done:
	free(x);
	free(labels);
	free(pick);
	free(train);
	dt_csv_release(&c);
	return st;
}
