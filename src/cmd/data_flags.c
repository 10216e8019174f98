/*
 * data_flags.c — resolving the data flags (data_flags.h).
 */
#include "cmd/data_flags.h"

#include <stdio.h>
#include <string.h>

#include "nn/keras.h"
#include "nn/model.h"

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

enum dt_status dt_data_flags_resolve(const struct dt_data_flags *f, const char *keras_model,
				     struct dt_data_options *o, struct dt_err *err)
{
	dt_data_options_init(o);
	o->validation_split = f->validation_split;
	o->crop_to_aspect_ratio = f->crop_to_aspect_ratio;
	o->random_flip = f->random_flip;
	o->random_crop = f->random_crop;
	o->data_threads = f->data_threads;
	if (strcmp(f->bad_images, "fail") == 0)
		o->bad_images = DT_BAD_IMAGES_FAIL;
	else if (strcmp(f->bad_images, "skip") == 0)
		o->bad_images = DT_BAD_IMAGES_SKIP;
	else
		return dt_err_set(err, DT_USAGE, "--bad_images=%s: expected fail or skip", f->bad_images);
	if (strlen(f->label_column) >= sizeof(o->label_column))
		return dt_err_set(err, DT_USAGE, "--label_column is longer than %zu bytes", sizeof(o->label_column) - 1);
	snprintf(o->label_column, sizeof(o->label_column), "%s", f->label_column);

	/* A Keras model says what it takes: its input's size and channels. */
	if (keras_model && *keras_model && (!*f->image_size || !*f->color_mode)) {
		struct dt_model *m;
		struct dt_keras_info info;
		enum dt_status st = dt_keras_load(keras_model, 1, &m, &info, err);
		if (st)
			return st;
		dt_model_free(m);
		if (info.input_rank == 3) {
			o->image_height = info.input_shape[0];
			o->image_width = info.input_shape[1];
			o->channels = info.input_shape[2];
		}
	}
	if (*f->image_size) {
		enum dt_status st = parse_size(f->image_size, &o->image_height, &o->image_width, err);
		if (st)
			return st;
	}
	if (strcmp(f->color_mode, "grayscale") == 0)
		o->channels = 1;
	else if (strcmp(f->color_mode, "rgb") == 0)
		o->channels = 3;
	else if (strcmp(f->color_mode, "rgba") == 0)
		o->channels = 4;
	else if (*f->color_mode)
		return dt_err_set(err, DT_USAGE, "--color_mode=%s: expected grayscale, rgb or rgba", f->color_mode);
	return DT_OK;
}
