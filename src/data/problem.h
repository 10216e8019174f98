/*
 * problem.h — datasets and the problem registry (t2t's --problem).
 *
 *   fashion_mnist  Fashion-MNIST from the Debian package dataset-fashion-mnist
 *                  (/usr/share/datasets/fashion-mnist), or --data_dir
 *   mnist          MNIST IDX files in --data_dir (gzipped or not)
 *   synthetic      seeded, learnable 28x28x1 data with 10 classes, generated
 *                  in memory (no files; for tests and benchmarks)
 *   t2t's text problems (data/text.h): token sequences in `text`, no images
 *
 * A dataset keeps raw uint8 pixels (4x smaller than floats); the input
 * pipeline converts a batch to normalized floats: (p/255 - mean) / std.
 */
#ifndef DT_DATA_PROBLEM_H
#define DT_DATA_PROBLEM_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"

/* DT_SPLIT_DEV: t2t's dev split where a problem has one of its own (the
 * algorithmic problems at their dev length, data/text.h); the test split
 * otherwise. */
enum dt_split { DT_SPLIT_TRAIN, DT_SPLIT_TEST, DT_SPLIT_DEV };

struct dt_text_set;

struct dt_dataset {
	uint32_t count;                 /* examples */
	int height, width, channels;    /* 28, 28, 1 */
	int num_classes;                /* 10 */
	uint8_t *images;                /* (count, height, width, channels), owned */
	uint8_t *labels;                /* (count), each < num_classes, owned */
	float mean, std;                /* normalization of p/255 */
	char source[256];               /* where it came from, for logs */
	struct dt_text_set *text;       /* a text problem's sequences (data/text.h), owned; NULL for images */
};

const char *const *dt_problem_names(size_t *count);
/* Default data directory of a problem (NULL if it needs --data_dir or none). */
const char *dt_problem_default_dir(const char *problem);

/* Loads one split. data_dir NULL or "" means the problem's default.
 * Unknown problem → DT_USAGE listing the valid ones; missing, truncated or
 * corrupt files → DT_DATA/DT_IO naming the file and what is wrong.
 * `seed` only matters for synthetic data. */
enum dt_status dt_problem_load(const char *problem, const char *data_dir, enum dt_split split, uint64_t seed,
			       struct dt_dataset *out, struct dt_err *err) DT_MUST_CHECK;
void dt_dataset_release(struct dt_dataset *ds);

#endif
