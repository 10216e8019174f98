/*
 * t2t_dir.h — any data directory t2t-datagen wrote, trained by its
 * problem's name (--problem=NAME --data_dir=DIR) when dtrain has no
 * built-in entry for NAME.
 *
 * What is read (t2t's generator_utils and text_encoder names):
 *   1. the shards `NAME-train-NNNNN-of-NNNNN`, `NAME-dev-…`, `NAME-test-…`:
 *      TFRecord files (data/tfrecord.h) of tf.train.Example (data/example.h);
 *      the test split is the `-test-` files when there are any, else `-dev-`
 *      (t2t evaluates on dev), as data/text.h reads its own problems' files;
 *   2. the first records of the first training shard say what the problem
 *      is (its kind):
 *        int64 `inputs` and `targets`            text to text (translation,
 *                                                summarization): the transformer
 *        int64 `targets` alone                    a language model
 *        int64 `inputs`, one-element `targets`    text classification (t2t's
 *                                                Text2ClassProblem): not built
 *                                                yet, a usage error saying so
 *        bytes `image/encoded`, int64             image classification (t2t's
 *          `image/class/label`                    ImageProblem): PNG or JPEG
 *                                                decoded at load (data/image.h)
 *   3. a text problem's vocabulary, first found of:
 *        --vocab_file PATH (a SubwordTextEncoder file),
 *        DIR/vocab.NAME.SIZE.subwords (t2t's name since 1.2),
 *        DIR/vocab.PAIR.SIZE (older t2t's translate_PAIR_* name, e.g.
 *        vocab.ende.32768 for translate_ende_wmt32k);
 *      with none of them, ids below 258 are read as t2t's byte-level
 *      encoder (each byte b is id b + 2, as its character problems), and
 *      larger ids are a usage error naming the files looked for.
 *      Token vocabularies (TokenTextEncoder's `.tokens` files) are not read.
 * One line (info) says what was found: kind, vocabulary, shard counts.
 */
#ifndef DT_DATA_T2T_DIR_H
#define DT_DATA_T2T_DIR_H

#include "base/err.h"
#include "data/problem.h"

/* 1 when DIR holds training shards of NAME (`NAME-train-*-of-*`). */
int dt_t2t_dir_has(const char *problem, const char *data_dir);

/* Loads one split of NAME from DIR into out (a text set in out->text, or
 * decoded images). No shards of the split → DT_DATA naming the files
 * looked for; shards of another kind than the training shards, a corrupt
 * record, an id beyond the vocabulary → DT_DATA naming the file and record;
 * no vocabulary for ids past the byte range, text classification → DT_USAGE. */
enum dt_status dt_t2t_dir_load(const char *problem, const char *data_dir, const struct dt_data_options *o,
			       enum dt_split split, struct dt_dataset *out, struct dt_err *err) DT_MUST_CHECK;

#endif
