/*
 * strutil.h — small string helpers used by parsers and error messages.
 */
#ifndef DT_BASE_STRUTIL_H
#define DT_BASE_STRUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

/* Levenshtein distance (case-sensitive), for "did you mean" suggestions. */
size_t dt_edit_distance(const char *a, const char *b);

/* The candidate closest to `word`, or NULL if none is within a distance of
 * max(2, strlen(word)/3) (close enough to be a plausible typo). */
const char *dt_nearest(const char *word, const char *const *candidates, size_t count);

/* Strict number parsing: the whole string must be the number, no spaces,
 * no trailing garbage, within range. `what` names the value in errors. */
enum dt_status dt_parse_i64(const char *text, int64_t min, int64_t max, int64_t *out,
			    const char *what, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_parse_double(const char *text, double *out, const char *what, struct dt_err *err) DT_MUST_CHECK;
/* true/false/1/0/yes/no (case-insensitive). */
enum dt_status dt_parse_bool(const char *text, int *out, const char *what, struct dt_err *err) DT_MUST_CHECK;

/* ---- truncating text into fixed buffers ----
 * Messages carry names from outside (host names, paths, peers' reasons) and
 * are cut to fit buffers; a cut inside a multi-byte UTF-8 character would
 * print half of it. These keep cuts on character boundaries. They only look
 * at the bytes before the cut and assume nothing else about the text:
 * invalid UTF-8 is left as it is. */

/* The length of the longest prefix of s[0..n) that does not end inside a
 * multi-byte character whose remaining bytes lie at or past n: n itself,
 * or up to 3 bytes less. */
size_t dt_utf8_prefix_len(const char *s, size_t n);
/* True when s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF) without control characters (below
 * 0x20, and 0x7f): what names from a user's file (Keras layer and variable
 * names) must be before they travel into checkpoints and handshakes. */
int dt_utf8_name_ok(const char *s, size_t n);
/* vsnprintf, then, if the text was cut to fit, the cut moved back to a
 * character boundary. Returns the length of what buf holds. */
size_t dt_vfmt(char *buf, size_t cap, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
size_t dt_fmt(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Joins `count` strings with `sep` into buf (truncating with "..."). */
void dt_join(char *buf, size_t cap, const char *const *items, size_t count, const char *sep);

#endif
