/*
 * subword.h — t2t's SubwordTextEncoder: text as ids of subword units, built
 * from a corpus to about a target size and saved as t2t's vocabulary file.
 *
 * The same algorithm as tensor2tensor's text_encoder.py and tokenizer.py,
 * so a vocabulary built here and one built by t2t from the same text are
 * the same list, and either's file loads in the other:
 *
 *   1. Tokenize: the text (UTF-8 → code points) splits where a character's
 *      alphanumeric-ness changes (alphanumeric: Unicode category L* or N*,
 *      data/unicode_alnum.c); a token of one space between two alphanumeric
 *      tokens is dropped (decoding puts it back).
 *   2. Escape each token: '\' → "\\", '_' → "\u", a character outside the
 *      vocabulary's alphabet (or '\n') → "\<decimal code point>;", then a
 *      final '_' (so '_' only ever ends a token).
 *   3. Segment the escaped token greedily: the longest subtoken of the
 *      vocabulary (at most the longest subtoken's length) that is a prefix of
 *      what is left, again and again. Every single character of the alphabet
 *      and of "\_u;0123456789" is a subtoken, so this always succeeds.
 *   4. Ids: reserved 0 "<pad>", 1 "<EOS>" (stored escaped, "<pad>_" and
 *      "<EOS>_"), then the subtokens in the vocabulary's order.
 *
 * Decoding concatenates the subtokens of the ids, splits at '_', unescapes
 * each piece ("\u" → '_', "\\" → '\', "\N;" → code point N, U+3013 when N
 * is not one) and joins the tokens, with a space between two alphanumeric
 * ones. decode(encode(s)) == s for every valid UTF-8 string; invalid UTF-8
 * bytes are read as U+FFFD each, so they do not come back.
 *
 * Building (build_from_token_counts): the alphabet is every character of
 * the corpus's tokens and the reserved tokens plus the escape characters.
 * Each of 4 iterations segments every token with the current vocabulary
 * and counts, times the token's count, every substring of the escaped token
 * that starts at a subtoken boundary; candidates with count >= min_count are
 * taken longest first, each one taken subtracting its count from its
 * prefixes; the new vocabulary is the reserved tokens, then the taken
 * strings and the alphabet's characters sorted by (count, string)
 * descending. build_to_target_size bisects min_count in [1, 1000] to the
 * size nearest the target (within 1 % stops early), as t2t does.
 *
 * The file (`vocab.<problem>.<approx size>.subwords` in the data directory):
 * one subtoken per line in id order, UTF-8, wrapped in single quotes.
 * Loading strips trailing whitespace and one pair of single or double quotes
 * around a line, as t2t does; the alphabet is then every character of the
 * subtokens plus the escape characters.
 */
#ifndef DT_DATA_SUBWORD_H
#define DT_DATA_SUBWORD_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct dt_subword;

/* t2t's reserved tokens and its approx_vocab_size for text2text problems. */
#define DT_SUBWORD_DEFAULT_SIZE 32768

/* 1 when t2t's tokenizer calls code point cp alphanumeric. */
int dt_subword_is_alnum(uint32_t cp);

/* Builds a vocabulary of about target_size from text lines (each UTF-8,
 * tokenized on its own; t2t's generate_text_for_vocab gives inputs and
 * targets of every training example). Never fails (an empty corpus gives the
 * reserved tokens and the escape characters). */
struct dt_subword *dt_subword_build(const char *const *lines, size_t n, int target_size);

/* Loads a vocabulary file; unreadable → DT_IO, fewer than 2 lines or a
 * line that is not UTF-8 → DT_DATA naming the file and line. */
enum dt_status dt_subword_load(const char *path, struct dt_subword **out, struct dt_err *err) DT_MUST_CHECK;
/* Parses a vocabulary file's bytes (name for messages). */
enum dt_status dt_subword_parse(const char *name, const char *text, size_t len, struct dt_subword **out,
				struct dt_err *err) DT_MUST_CHECK;
/* Writes the file as t2t's store_to_file does (atomically). */
enum dt_status dt_subword_save(const struct dt_subword *v, const char *path, struct dt_err *err) DT_MUST_CHECK;
void dt_subword_free(struct dt_subword *v);

/* Ids (reserved included). */
int dt_subword_size(const struct dt_subword *v);
/* Subtoken `id` as UTF-8 into buf (always terminated); "" out of range. */
void dt_subword_token(const struct dt_subword *v, int id, char *buf, size_t cap);

/* Text into ids (no EOS added); returns the number of ids, of which at most
 * cap are written (call again with more room when it is larger). */
size_t dt_subword_encode(const struct dt_subword *v, const char *text, int32_t *ids, size_t cap);
/* Ids back into text (UTF-8, always terminated), as t2t's decode: ids out
 * of range decode to nothing, 0 and 1 to "<pad>" and "<EOS>" (callers stop
 * at EOS first). Returns the length the whole text needs (a cap larger than
 * that gets all of it). */
size_t dt_subword_decode(const struct dt_subword *v, const int32_t *ids, size_t n, char *buf, size_t cap);

#endif
