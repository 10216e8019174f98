/*
 * strutil.h — small string helpers used by parsers and error messages.
 */
#ifndef DT_BASE_STRUTIL_H
#define DT_BASE_STRUTIL_H

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

/* Joins `count` strings with `sep` into buf (truncating with "..."). */
void dt_join(char *buf, size_t cap, const char *const *items, size_t count, const char *sep);

#endif
