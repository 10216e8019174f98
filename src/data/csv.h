/*
 * csv.h — RFC 4180 CSV text and the csv problem.
 *
 * The parser (dt_csv_parse) reads text held in memory:
 *   1. records end with LF or CRLF; the last may end without one;
 *   2. fields are separated by commas; a field may be quoted with '"',
 *      and then may hold commas, CR, LF and doubled quotes ("" is one ");
 *   3. after a closing quote only a comma or the end of the record may
 *      follow; a quote inside an unquoted field is an error (RFC 4180
 *      allows neither), as is a quoted field that never closes;
 *   4. every record has as many fields as the first (the header); blank
 *      lines are skipped; a UTF-8 byte-order mark at the start is skipped;
 *      a NUL byte is an error.
 * Errors are DT_DATA naming the source, its line and the field.
 *
 * The csv problem (--problem=csv --data_dir=FILE.csv --label_column=NAME):
 * the header names the columns; every column except the label is a numeric
 * feature (strtod's syntax, finite; an empty field is a missing value, an
 * error naming the file, row and column). Labels are either all
 * non-negative integers (class = value) or names (classes = the distinct
 * names sorted bytewise), at most 256 classes. The split is
 * --validation_split's (internal.h). Features are standardized per column
 * with the training split's mean and standard deviation (a constant
 * column is only centred), as a Keras user's Normalization layer adapted
 * on the training data would; the example is (1, 1, features).
 */
#ifndef DT_DATA_CSV_H
#define DT_DATA_CSV_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

struct dt_csv {
	uint32_t cols;     /* fields per record (the header's) */
	uint32_t rows;     /* records after the header */
	char **field;      /* ((rows + 1) * cols) NUL-terminated, unquoted; row 0 is the header */
	uint32_t *line;    /* (rows + 1) the line each record starts on, from 1 */
	char *text;        /* owns every field's bytes */
};

/* Parses len bytes; `source` names them in errors. At most max_fields
 * fields in all (a cap on memory; 0: 1 << 28). *out is released with
 * dt_csv_release, also on failure. */
enum dt_status dt_csv_parse(const char *buf, size_t len, const char *source, size_t max_fields,
			    struct dt_csv *out, struct dt_err *err) DT_MUST_CHECK;
void dt_csv_release(struct dt_csv *c);

#endif
