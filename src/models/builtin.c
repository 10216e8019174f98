/*
 * builtin.c — mlp, lenet and cnn through the public builder (dtrain.h).
 *
 * Builder calls keep their first error in the model and turn the rest into
 * no-ops (dtrain.h, BUILDING), so each model is written straight down and
 * checked once, when it is compiled. The labels are an INT32 input of one
 * class per example; the compiled model takes the image alone and gets the
 * labels as its targets (api/builder.c), as every engine entry point feeds
 * them.
 */
#include "models/builtin.h"

#include <string.h>

#include "api/internal.h"
#include "base/alloc.h"
#include "base/strutil.h"

/* A convolution with ReLU and a 2x2 max pooling (fused into the conv when
 * the graph is compiled). */
static dtrain_node conv_pool(dtrain_model *m, dtrain_node x, int k, int filters, dtrain_padding pad)
{
	x = dtrain_conv2d(m, x, filters, k, k, 1, pad, DTRAIN_RELU);
	return dtrain_max_pool2d(m, x, 2, 2);
}

/* What every built-in ends with: flatten, hidden dense layers of `units`
 * (n of them) with ReLU, each followed by dropout when the hparams ask for
 * it, and the logits. */
static dtrain_node head(dtrain_model *m, dtrain_node x, const int *units, int n, const struct dt_hparams *hp,
			int num_classes)
{
	x = dtrain_flatten(m, x);
	for (int i = 0; i < n; i++) {
		x = dtrain_dense(m, x, units[i], DTRAIN_RELU);
		if (hp->dropout > 0)
			x = dtrain_dropout(m, x, (float)hp->dropout);
	}
	return dtrain_dense(m, x, num_classes, DTRAIN_LINEAR);
}

/* mlp: 784-256-128-10 with ReLU (for 28x28x1 inputs). */
static dtrain_node mlp(dtrain_model *m, dtrain_node x, const struct dt_hparams *hp, int num_classes)
{
	return head(m, x, (const int[]){ 256, 128 }, 2, hp, num_classes);
}

/* lenet: LeNet-5 with ReLU and max pooling. */
static dtrain_node lenet(dtrain_model *m, dtrain_node x, const struct dt_hparams *hp, int num_classes)
{
	x = conv_pool(m, x, 5, 6, DTRAIN_SAME);
	x = conv_pool(m, x, 5, 16, DTRAIN_VALID);
	return head(m, x, (const int[]){ 120, 84 }, 2, hp, num_classes);
}

/* cnn: two 3x3 conv blocks (32, 64 filters) and a 128-unit dense layer. */
static dtrain_node cnn(dtrain_model *m, dtrain_node x, const struct dt_hparams *hp, int num_classes)
{
	x = conv_pool(m, x, 3, 32, DTRAIN_SAME);
	x = conv_pool(m, x, 3, 64, DTRAIN_SAME);
	return head(m, x, (const int[]){ 128 }, 1, hp, num_classes);
}

typedef dtrain_node (*body_fn)(dtrain_model *m, dtrain_node x, const struct dt_hparams *hp, int num_classes);

/* X(name, body) — the zoo; the transformer is named for messages only. */
#define DT_BUILTIN_LIST(X) \
	X(mlp, mlp)           \
	X(lenet, lenet)       \
	X(cnn, cnn)           \
	X(transformer, NULL)

static const char *const names[] = {
#define NAME(name, fn) #name,
	DT_BUILTIN_LIST(NAME)
#undef NAME
};

static const body_fn bodies[] = {
#define FN(name, fn) fn,
	DT_BUILTIN_LIST(FN)
#undef FN
};

const char *const *dt_models_builtin_names(size_t *count)
{
	if (count)
		*count = DT_ARRAY_LEN(names);
	return names;
}

const struct dt_model_zoo dt_models_builtin = {
	.names = names, .count = DT_ARRAY_LEN(names), .make = dt_models_builtin_new,
};

static enum dt_status unknown_model(const char *name, struct dt_err *err)
{
	char valid[256];
	dt_join(valid, sizeof(valid), names, DT_ARRAY_LEN(names), ", ");
	const char *near = dt_nearest(name, names, DT_ARRAY_LEN(names));
	if (near)
		return dt_err_set(err, DT_USAGE, "unknown model '%s' (did you mean '%s'?); valid: %s", name, near, valid);
	return dt_err_set(err, DT_USAGE, "unknown model '%s'; valid: %s", name, valid);
}

/* The arguments the engine passes, checked before any builder call. */
static enum dt_status check_args(const struct dt_hparams *hp, int which, int height, int width, int channels,
				 int num_classes, int max_batch, struct dt_err *err)
{
	if (which < 0)
		return unknown_model(hp->model, err);
	if (!bodies[which])
		return dt_err_set(err, DT_CONFIG,
				  "model '%s' reads text, not images: train it on a text problem (nn/transformer.h builds it)",
				  hp->model);
	if (height < 1 || width < 1 || channels < 1)
		return dt_err_set(err, DT_CONFIG, "model '%s': bad input shape (%d, %d, %d)", hp->model, height, width,
				  channels);
	if (num_classes < 2 || num_classes > 256)
		return dt_err_set(err, DT_CONFIG, "model '%s': num_classes must be in [2, 256] (labels are bytes), got %d",
				  hp->model, num_classes);
	if (max_batch < 1)
		return dt_err_set(err, DT_CONFIG, "model '%s': max_batch must be positive, got %d", hp->model, max_batch);
	if (!(hp->dropout >= 0 && hp->dropout < 1))
		return dt_err_set(err, DT_CONFIG, "model '%s': dropout must be in [0, 1), got %g", hp->model, hp->dropout);
	return DT_OK;
}

enum dt_status dt_models_builtin_new(const struct dt_hparams *hp, int height, int width, int channels,
				     int num_classes, int max_batch, struct dt_model **out, struct dt_err *err)
{
	*out = NULL;
	int which = -1;
	for (size_t i = 0; i < DT_ARRAY_LEN(names); i++)
		if (strcmp(hp->model, names[i]) == 0)
			which = (int)i;
	enum dt_status st = check_args(hp, which, height, width, channels, num_classes, max_batch, err);
	if (st)
		return st;
	dtrain_model *m = dtrain_model_new();
	if (!m)
		return dt_err_set(err, DT_NOMEM, "model '%s': out of memory", hp->model);
	const int64_t image[3] = { height, width, channels };
	dtrain_node x = dtrain_input(m, "x", DTRAIN_FLOAT32, 3, image);
	dtrain_node labels = dtrain_input(m, "label", DTRAIN_INT32, 0, NULL);
	dtrain_node logits = bodies[which](m, x, hp, num_classes);
	dtrain_softmax_cross_entropy(m, logits, labels);
	st = dt__api_compile_named(m, hp->model, max_batch, out, err);
	dtrain_model_free(m);
	if (st)
		dt_err_prefix(err, "cannot build model '%s' for input (%d, %d, %d)", hp->model, height, width, channels);
	return st;
}
