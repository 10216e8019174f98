/*
 * data_flags.h — the data flags of `dtrain train` (image_folder, csv, t2t data dirs):
 * their option-table entries and their parsing into the public
 * dtrain_builtin (include/dtrain.h).
 */
#ifndef DT_CMD_DATA_FLAGS_H
#define DT_CMD_DATA_FLAGS_H

#include "base/err.h"
#include "base/options.h"
#include "dtrain.h"

struct dt_data_flags {
	double validation_split;
	const char *image_size;   /* "" | "N" | "HxW" */
	const char *color_mode;   /* "" | grayscale | rgb | rgba */
	int crop_to_aspect_ratio, random_flip;
	double random_crop;
	const char *bad_images;   /* fail | skip */
	int data_threads;
	const char *label_column;
	const char *vocab_file;
};

#define DT_DATA_FLAGS_INIT { .image_size = "", .color_mode = "", .bad_images = "fail", .data_threads = 2, \
			     .label_column = "", .vocab_file = "" }

#define DT_DATA_FLAG_OPTIONS(f)                                                                                    \
	DT_OPT_DOUBLE("validation_split", &(f)->validation_split, "FRACTION",                                      \
		      "image_folder, csv: hold out this fraction (seeded by --seed) as the test split [0: none]"),     \
	DT_OPT_STRING("image_size", &(f)->image_size, "HxW",                                                       \
		      "image_folder: resize to this, bilinear [default: the --keras_model's input, else 256x256]"),    \
	DT_OPT_STRING("color_mode", &(f)->color_mode, "MODE",                                                      \
		      "image_folder: grayscale, rgb or rgba [default: the --keras_model's channels, else rgb]"),       \
	DT_OPT_BOOL("crop_to_aspect_ratio", &(f)->crop_to_aspect_ratio,                                            \
		    "image_folder: crop the centre to --image_size's aspect ratio before resizing"),                  \
	DT_OPT_BOOL("random_flip", &(f)->random_flip, "image_folder: mirror training images left-right at random"), \
	DT_OPT_DOUBLE("random_crop", &(f)->random_crop, "FRACTION",                                                \
		      "image_folder: train on a random crop of this fraction of each side (test: the centre) [0: off]"), \
	DT_OPT_STRING("bad_images", &(f)->bad_images, "fail|skip",                                                 \
		      "image_folder: a corrupt or unreadable image fails the run (exit 4) or is left out with a warning"), \
	DT_OPT_INT("data_threads", &(f)->data_threads, "N", "image_folder: threads decoding images per input pipeline"), \
	DT_OPT_STRING("label_column", &(f)->label_column, "NAME", "csv: the label column's name"),                \
	DT_OPT_STRING("vocab_file", &(f)->vocab_file, "PATH",                                                      \
		      "a t2t data dir's text problem: its SubwordTextEncoder file [default: found by t2t's names]")

/* The label column's longest name plus one (dtrain_builtin's limit). */
#define DT_LABEL_COLUMN_MAX 128
/* The vocabulary file's longest path plus one (dtrain_builtin's limit). */
#define DT_VOCAB_FILE_MAX 1024

/* Fills b's data fields from the flags (b->label_column points into f);
 * sizes and channels not given stay 0, for the library to take from the
 * Keras model's input or the problem. Bad values → DT_USAGE naming the flag. */
enum dt_status dt_data_flags_resolve(const struct dt_data_flags *f, dtrain_builtin *b,
				     struct dt_err *err) DT_MUST_CHECK;

#endif
