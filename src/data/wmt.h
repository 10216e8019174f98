/*
 * wmt.h — t2t-datagen for t2t's WMT translation problems, from the source
 * archives a user downloaded (this machine downloads nothing).
 *
 *   translate_ende_wmt8k, translate_ende_wmt32k    t2t's translate_ende.py
 *   translate_enfr_wmt_small8k, _small32k          t2t's translate_enfr.py,
 *   translate_enfr_wmt8k, translate_enfr_wmt32k    the small and large sets
 *
 * What dt_wmt_datagen does, in t2t's order (translate.py, generator_utils.py,
 * text_problems.py):
 *   1. every source file of the problem (a member of an archive named by
 *      the basename of t2t's URL, e.g. training-parallel-nc-v13.tgz holding
 *      training-parallel-nc-v13/news-commentary-v13.de-en.en) is taken from
 *      TMP/<member> when it is there (t2t's extracted copy), else extracted
 *      there from TMP/<archive> with libarchive (tar, tgz, gz; written under
 *      a temporary name, then renamed); a member ending in .gz is then
 *      gunzipped beside it, as t2t's gunzip_file. A missing archive is
 *      DT_IO naming it and t2t's URL; a missing member, a truncated or
 *      corrupt archive DT_DATA naming the archive (exit 4). All of this
 *      happens before anything is written to DIR;
 *   2. the vocabulary DIR/vocab.NAME.SIZE.subwords is read when it is there
 *      (t2t's get_or_generate_vocab), else built from the training sources'
 *      lines sampled as t2t's generate_lines_for_vocab samples them (per
 *      file: a budget of 1e6 characters, one line kept out of every
 *      int(size / 1e6 / 2) + 1, each stripped) with SubwordTextEncoder's
 *      search for SIZE (2^13 or 2^15; data/subword.h), and written;
 *   3. the pairs: each dataset's two files read in step (t2t's zip: the
 *      shorter ends it), both lines stripped, a pair with an empty side
 *      dropped (t2t's compile_data), encoded with EOS appended; the training
 *      datasets into NAME-train-NNNNN-of-00100 (or --num_shards), the dev
 *      datasets into NAME-dev-00000-of-00001, round-robin, each file written
 *      atomically (data/text.h).
 * Known differences from t2t: strip() removes ASCII whitespace only (Python
 * also strips Unicode spaces at a line's ends); the shards are not shuffled
 * within (t2t shuffles each file's records; dtrain shuffles at training);
 * t2t's .sgm and .tmx sources are not among these problems' files.
 */
#ifndef DT_DATA_WMT_H
#define DT_DATA_WMT_H

#include <stddef.h>
#include "base/err.h"

/* 1 when `problem` is one of the names above. */
int dt_wmt_problem_is(const char *problem);
const char *const *dt_wmt_problem_names(size_t *count);

/* t2t-datagen for a WMT problem: sources in tmp_dir, files into data_dir
 * (created when missing); num_shards > 0 overrides the training shards. */
enum dt_status dt_wmt_datagen(const char *problem, const char *data_dir, const char *tmp_dir, int num_shards,
			      struct dt_err *err) DT_MUST_CHECK;

#endif
