/*
 * problem.h — datasets and the problem registry (t2t's --problem).
 *
 *   fashion_mnist  Fashion-MNIST from the Debian package dataset-fashion-mnist
 *                  (/usr/share/datasets/fashion-mnist), or --data_dir
 *   mnist          MNIST IDX files in --data_dir (gzipped or not)
 *   synthetic      seeded, learnable 28x28x1 data with 10 classes, generated
 *                  in memory (no files; for tests and benchmarks)
 *   image_folder   DIR/<class>/<name>.{jpg,jpeg,png,bmp,gif} as Keras's
 *                  image_dataset_from_directory reads it (image_folder.h)
 *   csv            one CSV file with a header row: numeric features and a
 *                  label column named by --label_column (csv.h)
 *   t2t's text problems (data/text.h): token sequences in `text`, no images
 *   any other NAME whose shards t2t-datagen wrote in --data_dir
 *                  (NAME-train-*-of-*): text or images by what the shards
 *                  hold (data/t2t_dir.h)
 *
 * A dataset holds its examples in exactly one of three forms:
 *   images    raw uint8 pixels in memory (4x smaller than floats); the
 *             input pipeline converts a batch to (p/255 - mean) / std;
 *   files     image files, decoded, resized and augmented per batch on the
 *             pipeline's threads, then normalized like `images`;
 *   features  floats ready for the model (CSV, standardized at load).
 * Labels are bytes, so a dataset has at most 256 classes.
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

#define DT_MAX_CLASSES 256

struct dt_image_files;

struct dt_dataset {
	uint32_t count;                 /* examples */
	int height, width, channels;    /* 28, 28, 1 */
	int num_classes;                /* 10 */
	uint8_t *images;                /* (count, height, width, channels), owned; or NULL */
	struct dt_image_files *files;   /* (count) files decoded per batch, owned; or NULL */
	float *features;                /* (count, height, width, channels), owned; or NULL */
	uint8_t *labels;                /* (count), each < num_classes, owned */
	float mean, std;                /* normalization of p/255 (images and files) */
	char source[256];               /* where it came from, for logs */
	struct dt_text_set *text;       /* a text problem's sequences (data/text.h), owned; NULL for images */
};

enum dt_bad_images { DT_BAD_IMAGES_FAIL, DT_BAD_IMAGES_SKIP };

/* The data flags of `dtrain train` that the file problems read (the IDX
 * and synthetic problems ignore them). dt_data_options_init: defaults. */
struct dt_data_options {
	double validation_split;  /* image_folder, csv: the held-out fraction, which is
				   * the test split (Keras's validation subset); 0: none */
	int image_height, image_width; /* image_folder: resize to this [256x256, Keras's default] */
	int channels;             /* image_folder: 1, 3 or 4 (Keras's color_mode) [3] */
	int crop_to_aspect_ratio; /* image_folder: crop the centre to the output's aspect first */
	int random_flip;          /* image_folder, training split: mirror left-right, p = 0.5 */
	double random_crop;       /* image_folder: keep this fraction of each side, at a random
				   * place for training and the centre for the test split; 0: off */
	enum dt_bad_images bad_images; /* image_folder: a corrupt image fails the load or is skipped */
	int data_threads;         /* image_folder: decoding threads per pipeline (and the check) [2] */
	char label_column[128];   /* csv: the label column's name (required) */
	char vocab_file[1024];    /* a t2t data dir's text problem: its SubwordTextEncoder file
				   * (data/t2t_dir.h); "": found by t2t's names */
};

void dt_data_options_init(struct dt_data_options *o);

const char *const *dt_problem_names(size_t *count);
/* Default data directory of a problem (NULL if it needs --data_dir or none). */
const char *dt_problem_default_dir(const char *problem);

/* Loads one split. data_dir NULL or "" means the problem's default; opts
 * NULL means dt_data_options_init's defaults.
 * Unknown problem → DT_USAGE listing the valid ones; missing, truncated or
 * corrupt files → DT_DATA/DT_IO naming the file and what is wrong.
 * `seed` makes the synthetic data and the validation split of image_folder
 * and csv (every task of a run must pass the same). */
enum dt_status dt_problem_load(const char *problem, const char *data_dir, const struct dt_data_options *opts,
			       enum dt_split split, uint64_t seed, struct dt_dataset *out,
			       struct dt_err *err) DT_MUST_CHECK;
void dt_dataset_release(struct dt_dataset *ds);

#endif
