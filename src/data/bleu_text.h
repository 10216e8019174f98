/*
 * bleu_text.h — t2t-bleu on text files: bleu_hook.bleu_wrapper and
 * bleu_tokenize (tensor2tensor/utils/bleu_hook.py) over a reference and a
 * translation, one segment a line.
 *
 * bleu_wrapper reads both files whole as UTF-8, splits them on "\n" (so a
 * final newline makes one more, empty, segment on each side), requires the
 * same number of segments, lower-cases both (str.lower()) unless case
 * sensitive, tokenizes each line and gives the lines to compute_bleu
 * (nn/bleu.h). bleu_tokenize is mteval-v14's: in three passes over the
 * line, as Python's re.sub scans, left to right without overlaps,
 *   1. a non-digit then a punctuation character (Unicode P*): "\1 \2 ";
 *   2. a punctuation character then a non-digit: " \1 \2";
 *   3. every symbol (S*): " \1 ";
 * then str.split() on Unicode whitespace. A number's separator (1,000 and
 * 3.5) stays inside it. Character classes: data/unicode_bleu.c, generated.
 */
#ifndef DT_DATA_BLEU_TEXT_H
#define DT_DATA_BLEU_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/status.h"
#include "nn/bleu.h"

/* bleu_tokenize of one UTF-8 line (n bytes), lower-cased first when
 * `lower`: the tokens joined by single spaces into out (of cap, always
 * terminated). Returns the length the whole needs (as snprintf), or
 * (size_t)-1 when the line is not valid UTF-8. */
size_t dt_bleu_text_tokenize(const char *line, size_t n, int lower, char *out, size_t cap);

/* bleu_wrapper's counts for reference and translation files: the
 * compute_bleu score is dt_bleu_score(out, ...). A file that cannot be
 * read → DT_IO; invalid UTF-8 → DT_DATA naming file and line; different
 * segment counts → DT_DATA giving both. */
enum dt_status dt_bleu_text_files(const char *ref_path, const char *hyp_path, int case_sensitive,
				  struct dt_bleu_counts *out, struct dt_err *err) DT_MUST_CHECK;

/* unicode_bleu.c (generated) */
int dt__bleu_is_punct(uint32_t cp);
int dt__bleu_is_symbol(uint32_t cp);
int dt__bleu_is_digit(uint32_t cp);
int dt__bleu_is_space(uint32_t cp);
uint32_t dt__bleu_lower(uint32_t cp); /* str.lower() for one-character results */

#endif
