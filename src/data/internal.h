/*
 * internal.h — what the files of data/ share (not for other modules).
 */
#ifndef DT_DATA_INTERNAL_H
#define DT_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "data/problem.h"

/* Keras's validation_split: the `count` examples in a seeded random order
 * (the same for both splits of a run), the first count - floor(fraction *
 * count) being the training split and the rest the test split. Returns
 * the chosen split's example indices, ascending (so the split keeps the
 * source's order), in *out (the caller frees it) and their number in *n.
 * fraction 0 with the test split → DT_USAGE; a split left empty → DT_DATA. */
enum dt_status dt__split_select(uint32_t count, double fraction, uint64_t seed, enum dt_split split,
				const char *source, uint32_t **out, uint32_t *n, struct dt_err *err) DT_MUST_CHECK;

/* Reads a whole file of at most max_bytes into *buf (the caller frees it). */
enum dt_status dt__read_file(const char *path, size_t max_bytes, uint8_t **buf, size_t *len,
			     struct dt_err *err) DT_MUST_CHECK;

enum dt_status dt__image_folder_load(const char *dir, const struct dt_data_options *o, enum dt_split split,
				     uint64_t seed, struct dt_dataset *out, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt__csv_problem_load(const char *path, const struct dt_data_options *o, enum dt_split split,
				    uint64_t seed, struct dt_dataset *out, struct dt_err *err) DT_MUST_CHECK;

/* A text problem's split from its source (generated, or text2text_tmpdir's
 * .txt files in data_dir, encoded with the subword vocabulary file in
 * vocab_dir when there is one), never from t2t's data files: what
 * dt_text_problem_load does when data_dir holds none, and what datagen
 * writes them from. */
enum dt_status dt__text_load_source(const char *problem, const char *data_dir, const char *vocab_dir,
				    enum dt_split split, uint64_t seed, struct dt_dataset *out,
				    struct dt_err *err) DT_MUST_CHECK;

/* t2t's approx_vocab_size of a text problem's subword vocabulary (0: none). */
int dt__text_approx_vocab(const char *problem);

/* translate_enes_bible8k's verse pairs (data/bible.c): English (KJV) and
 * Spanish (RV 1909) texts of the verses both print, in canonical order
 * (the caller frees each string and both arrays). No diatheke or modules,
 * or modules that do not align: DT_DATA with a hint. */
enum dt_status dt__bible_pairs(char ***en, char ***es, size_t *n, struct dt_err *err) DT_MUST_CHECK;

#endif
