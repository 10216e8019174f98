/*
 * data_flags.c — resolving the data flags (data_flags.h).
 */
#include "cmd/data_flags.h"

#include <stdio.h>
#include <string.h>


static enum dt_status parse_size(const char *s, int *h, int *w, struct dt_err *err)
{
	int a, b, n = 0;
	if (sscanf(s, "%d%n", &a, &n) == 1 && s[n] == '\0') {
		*h = *w = a;
		return DT_OK;
	}
	n = 0;
	if (sscanf(s, "%dx%d%n", &a, &b, &n) == 2 && s[n] == '\0') {
		*h = a;
		*w = b;
		return DT_OK;
	}
	return dt_err_set(err, DT_USAGE, "--image_size=%s: expected HEIGHTxWIDTH (e.g. 224x224) or one size", s);
}

enum dt_status dt_data_flags_resolve(const struct dt_data_flags *f, dtrain_builtin *b, struct dt_err *err)
{
	b->validation_split = f->validation_split;
	b->crop_to_aspect_ratio = f->crop_to_aspect_ratio;
	b->random_flip = f->random_flip;
	b->random_crop = f->random_crop;
	b->data_threads = f->data_threads;
	if (strcmp(f->bad_images, "fail") == 0)
		b->skip_bad_images = 0;
	else if (strcmp(f->bad_images, "skip") == 0)
		b->skip_bad_images = 1;
	else
		return dt_err_set(err, DT_USAGE, "--bad_images=%s: expected fail or skip", f->bad_images);
	if (strlen(f->label_column) >= DT_LABEL_COLUMN_MAX)
		return dt_err_set(err, DT_USAGE, "--label_column is longer than %d bytes", DT_LABEL_COLUMN_MAX - 1);
	b->label_column = f->label_column;
	if (strlen(f->vocab_file) >= DT_VOCAB_FILE_MAX)
		return dt_err_set(err, DT_USAGE, "--vocab_file is longer than %d bytes", DT_VOCAB_FILE_MAX - 1);
	b->vocab_file = f->vocab_file;
	/* not given: 0, the Keras model's input (the library reads it), else the problem's default */
	b->image_height = b->image_width = b->channels = 0;
	if (*f->image_size) {
		enum dt_status st = parse_size(f->image_size, &b->image_height, &b->image_width, err);
		if (st)
			return st;
	}
	if (strcmp(f->color_mode, "grayscale") == 0)
		b->channels = 1;
	else if (strcmp(f->color_mode, "rgb") == 0)
		b->channels = 3;
	else if (strcmp(f->color_mode, "rgba") == 0)
		b->channels = 4;
	else if (*f->color_mode)
		return dt_err_set(err, DT_USAGE, "--color_mode=%s: expected grayscale, rgb or rgba", f->color_mode);
	return DT_OK;
}
