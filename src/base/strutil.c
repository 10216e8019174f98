#include "base/strutil.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"

size_t dt_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t *row = dt_xmallocarray(lb + 1, sizeof(*row));
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
			size_t best = diag + cost;
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	size_t d = row[lb];
	free(row);
	return d;
}

const char *dt_nearest(const char *word, const char *const *candidates, size_t count)
{
	size_t limit = strlen(word) / 3;
	if (limit < 2)
		limit = 2;
	const char *best = NULL;
	size_t best_d = limit + 1;
	for (size_t i = 0; i < count; i++) {
		size_t d = dt_edit_distance(word, candidates[i]);
		if (d < best_d) {
			best_d = d;
			best = candidates[i];
		}
	}
	return best;
}

enum dt_status dt_parse_i64(const char *text, int64_t min, int64_t max, int64_t *out,
			    const char *what, struct dt_err *err)
{
	if (!text || !*text)
		return dt_err_set(err, DT_USAGE, "%s: expected an integer, got an empty value", what);
	errno = 0;
	char *end = NULL;
	long long v = strtoll(text, &end, 10);
	if (*end != '\0' || end == text || text[0] == ' ')
		return dt_err_set(err, DT_USAGE, "%s: '%s' is not an integer", what, text);
	if (errno == ERANGE || v < min || v > max)
		return dt_err_set(err, DT_USAGE, "%s: %s is out of range [%lld, %lld]", what, text,
				  (long long)min, (long long)max);
	*out = v;
	return DT_OK;
}

enum dt_status dt_parse_double(const char *text, double *out, const char *what, struct dt_err *err)
{
	if (!text || !*text)
		return dt_err_set(err, DT_USAGE, "%s: expected a number, got an empty value", what);
	errno = 0;
	char *end = NULL;
	double v = strtod(text, &end);
	if (*end != '\0' || end == text || text[0] == ' ')
		return dt_err_set(err, DT_USAGE, "%s: '%s' is not a number", what, text);
	if (errno == ERANGE || !isfinite(v))
		return dt_err_set(err, DT_USAGE, "%s: '%s' is out of range", what, text);
	*out = v;
	return DT_OK;
}

enum dt_status dt_parse_bool(const char *text, int *out, const char *what, struct dt_err *err)
{
	static const char *const yes[] = { "true", "1", "yes", "on" };
	static const char *const no[] = { "false", "0", "no", "off" };
	for (size_t i = 0; i < DT_ARRAY_LEN(yes); i++) {
		if (strcasecmp(text, yes[i]) == 0) {
			*out = 1;
			return DT_OK;
		}
		if (strcasecmp(text, no[i]) == 0) {
			*out = 0;
			return DT_OK;
		}
	}
	return dt_err_set(err, DT_USAGE, "%s: '%s' is not a boolean (use true or false)", what, text);
}

void dt_join(char *buf, size_t cap, const char *const *items, size_t count, const char *sep)
{
	if (cap == 0)
		return;
	buf[0] = '\0';
	size_t used = 0;
	for (size_t i = 0; i < count; i++) {
		size_t need = strlen(items[i]) + (i ? strlen(sep) : 0);
		if (used + need + 4 >= cap) {
			if (used + 4 < cap)
				strcpy(buf + used, "...");
			return;
		}
		if (i) {
			strcpy(buf + used, sep);
			used += strlen(sep);
		}
		strcpy(buf + used, items[i]);
		used += strlen(items[i]);
	}
}

size_t dt_utf8_prefix_len(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = n, cont = 0;
	while (i > 0 && cont < 3 && (u[i - 1] & 0xC0) == 0x80) {
		i--;
		cont++;
	}
	if (i == 0)
		return n; /* only continuation bytes: not UTF-8, not ours to fix */
	unsigned char lead = u[i - 1];
	size_t want = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xC2 && lead <= 0xDF ? 2 : 0;
	if (want && cont + 1 < want)
		return i - 1; /* the character starting at i - 1 is cut: drop it */
	return n;
}

int dt_utf8_name_ok(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		const unsigned char c = u[i];
		if (c < 0x80) {
			if (c < 0x20 || c == 0x7f)
				return 0;
			i++;
			continue;
		}
		size_t len;
		unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
		if (c >= 0xC2 && c <= 0xDF) {
			len = 2;
		} else if (c >= 0xE0 && c <= 0xEF) {
			len = 3;
			lo = c == 0xE0 ? 0xA0 : 0x80; /* no overlong */
			hi = c == 0xED ? 0x9F : 0xBF; /* no surrogates */
		} else if (c >= 0xF0 && c <= 0xF4) {
			len = 4;
			lo = c == 0xF0 ? 0x90 : 0x80;
			hi = c == 0xF4 ? 0x8F : 0xBF;
		} else {
			return 0;
		}
		if (n - i < len || u[i + 1] < lo || u[i + 1] > hi)
			return 0;
		for (size_t k = 2; k < len; k++)
			if ((u[i + k] & 0xC0) != 0x80)
				return 0;
		if (len == 2 && u[i] == 0xC2 && u[i + 1] < 0xA0)
			return 0; /* C1 controls U+0080..U+009F */
		i += len;
	}
	return 1;
}

size_t dt_vfmt(char *buf, size_t cap, const char *fmt, va_list ap)
{
	if (cap == 0)
		return 0;
	int n = vsnprintf(buf, cap, fmt, ap);
	if (n < 0) {
		buf[0] = '\0';
		return 0;
	}
	if ((size_t)n < cap)
		return (size_t)n;
	size_t len = dt_utf8_prefix_len(buf, cap - 1);
	buf[len] = '\0';
	return len;
}

size_t dt_fmt(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t n = dt_vfmt(buf, cap, fmt, ap);
	va_end(ap);
	return n;
}
