/* Keras's layers for the graph builder: depthwise convolution, batch
 * normalization and zero padding (nn/layers.h lists them with their shapes). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "nn/layers_more.h"

static void init_common(struct dt_layer *l, enum dt_layer_kind kind, const char *name, struct dt_shape in)
{
	memset(l, 0, sizeof(*l));
	l->kind = kind;
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->in = in;
	l->out = in;
}

static enum dt_status check_input(const char *name, struct dt_shape in, struct dt_err *err)
{
	if (in.h < 1 || in.w < 1 || in.c < 1)
		return dt_err_set(err, DT_CONFIG, "layer '%s': empty input shape (%d, %d, %d)", name, in.h, in.w, in.c);
	return DT_OK;
}

/* Output size and the padding before the first row along one axis. */
static int axis_out(int size, int k, int stride, int dil, int same, int *before)
{
	const int span = (k - 1) * dil + 1;
	if (same) {
		const int o = (size + stride - 1) / stride;
		const int total = (o - 1) * stride + span - size;
		*before = total > 0 ? total / 2 : 0;
		return o;
	}
	*before = 0;
	return size >= span ? (size - span) / stride + 1 : 0;
}

enum dt_status dt_layer_depthwise(struct dt_layer *l, const char *name, struct dt_shape in, int kh, int kw, int mult,
				  int sh, int sw, int dh, int dw, int same, struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (kh < 1 || kw < 1 || mult < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || kh > 4096 || kw > 4096 ||
	    mult > 4096 || sh > 4096 || sw > 4096 || dh > 4096 || dw > 4096)
		return dt_err_set(err, DT_CONFIG,
				  "layer '%s': depthwise window %dx%d, multiplier %d, strides (%d, %d) and dilation (%d, %d) "
				  "must be 1 to 4096",
				  name, kh, kw, mult, sh, sw, dh, dw);
	if ((sh > 1 || sw > 1) && (dh > 1 || dw > 1))
		return dt_err_set(err, DT_CONFIG, "layer '%s': strides above 1 with dilation above 1 (Keras refuses this too)",
				  name);
	struct dt_dw_geom g = { .H = in.h, .W = in.w, .C = in.c, .M = mult, .KH = kh, .KW = kw, .SH = sh, .SW = sw,
				.DH = dh, .DW = dw };
	g.OH = axis_out(in.h, kh, sh, dh, same, &g.PT);
	g.OW = axis_out(in.w, kw, sw, dw, same, &g.PL);
	if (g.OH < 1 || g.OW < 1)
		return dt_err_set(err, DT_CONFIG,
				  "layer '%s': a %dx%d depthwise window with dilation (%d, %d) does not fit input (%d, %d, %d) "
				  "with padding 'valid'",
				  name, kh, kw, dh, dw, in.h, in.w, in.c);
	if ((long)in.c * mult > (1L << 20))
		return dt_err_set(err, DT_CONFIG, "layer '%s': %d channels times multiplier %d is too many", name, in.c, mult);
	init_common(l, DT_LAYER_DEPTHWISE, name, in);
	l->dw = g;
	l->out = (struct dt_shape){ g.OH, g.OW, in.c * mult };
	l->kernel_count = (size_t)kh * (size_t)kw * (size_t)in.c * (size_t)mult;
	l->bias_count = (size_t)in.c * (size_t)mult;
	l->act = DT_ACT_LINEAR;
	return DT_OK;
}

enum dt_status dt_layer_batchnorm(struct dt_layer *l, const char *name, struct dt_shape in, float momentum, float eps,
				  struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (!(eps > 0.0f) || !(momentum >= 0.0f && momentum < 1.0f))
		return dt_err_set(err, DT_CONFIG,
				  "layer '%s': batch norm needs epsilon > 0 and momentum in [0, 1), got %g and %g", name,
				  (double)eps, (double)momentum);
	init_common(l, DT_LAYER_BATCHNORM, name, in);
	l->eps = eps;
	l->momentum = momentum;
	l->kernel_count = (size_t)in.c;     /* gamma */
	l->bias_count = (size_t)in.c;       /* beta */
	l->extra_count = 2 * (size_t)in.c;  /* moving_mean, moving_variance */
	return DT_OK;
}

enum dt_status dt_layer_zeropad(struct dt_layer *l, const char *name, struct dt_shape in, int top, int bottom,
				int left, int right, struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (top < 0 || bottom < 0 || left < 0 || right < 0 || top > 4096 || bottom > 4096 || left > 4096 ||
	    right > 4096)
		return dt_err_set(err, DT_CONFIG, "layer '%s': zero padding (%d, %d, %d, %d) must be 0 to 4096 on each side",
				  name, top, bottom, left, right);
	init_common(l, DT_LAYER_ZEROPAD, name, in);
	l->pad[0] = top;
	l->pad[1] = bottom;
	l->pad[2] = left;
	l->pad[3] = right;
	l->out = (struct dt_shape){ in.h + top + bottom, in.w + left + right, in.c };
	return DT_OK;
}

void dt_layer_drop_bias(struct dt_layer *l)
{
	DT_ASSERT(l->kind == DT_LAYER_DENSE || l->kind == DT_LAYER_CONV2D || l->kind == DT_LAYER_DEPTHWISE);
	l->bias_count = 0;
}

int dt__layer_is_pointwise(const struct dt_layer *l)
{
	const struct dt_conv_geom *g = &l->geom;
	return l->kind == DT_LAYER_CONV2D && g->KH == 1 && g->KW == 1 && g->stride == 1 && g->pad == 0 && !l->pool;
}

void dt__pointwise_forward(const struct dt_layer *l, const float *x, float *y, int B)
{
	DT_ASSERT(dt__layer_is_pointwise(l));
	const int rows = B * l->out.h * l->out.w, C = l->in.c, OC = l->out.c;
	/* y (rows, OC) = x (rows, C) kernel (C, OC) */
	dt_matmul(0, 0, rows, OC, C, 1.0f, x, C, l->kernel, OC, 0.0f, y, OC);
	if (l->bias_count)
		dt_bias_act_forward(y, l->bias, rows, OC, l->relu);
	else if (l->relu)
		dt_relu_forward(y, y, (size_t)rows * (size_t)OC);
}

void dt__pointwise_backward(const struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B)
{
	DT_ASSERT(dt__layer_is_pointwise(l));
	const int rows = B * l->out.h * l->out.w, C = l->in.c, OC = l->out.c;
	float *dbias = l->bias_count ? l->dbias : NULL;
	if (dbias)
		memset(dbias, 0, (size_t)OC * sizeof(float));
	/* the fused ReLU's mask on dy and the bias gradient, one pass */
	dt_bias_act_backward(dy, y, dbias, rows, OC, l->relu);
	/* dkernel (C, OC) = x^T (C, rows) dy (rows, OC); dx (rows, C) = dy kernel^T */
	dt_matmul(1, 0, C, OC, rows, 1.0f, x, C, dy, OC, 0.0f, l->dkernel, OC);
	if (dx)
		dt_matmul(0, 1, rows, C, OC, 1.0f, dy, OC, l->kernel, OC, 0.0f, dx, C);
}

/* Rows of (C) values: every position of every example. */
static int bn_rows(const struct dt_layer *l, int B)
{
	return (int)((size_t)B * dt_shape_elems(l->in) / (size_t)l->in.c);
}

static void bn_forward(struct dt_layer *l, const float *x, float *y, int B, int training)
{
	const int C = l->in.c, R = bn_rows(l, B);
	float *mean = l->stats, *rstd = l->stats + C;
	float *mm = l->moving, *mv = l->moving + C;
	l->bn_batch = training && !l->frozen;
	if (l->bn_batch) {
		dt_batchnorm_moments(x, mean, rstd, R, C); /* rstd holds the variance for now */
		const float m = l->momentum;
		for (int c = 0; c < C; c++) {
			mm[c] = mm[c] * m + mean[c] * (1.0f - m);
			mv[c] = mv[c] * m + rstd[c] * (1.0f - m);
			rstd[c] = 1.0f / sqrtf(rstd[c] + l->eps);
		}
	} else {
		for (int c = 0; c < C; c++) {
			mean[c] = mm[c];
			rstd[c] = 1.0f / sqrtf(mv[c] + l->eps);
		}
	}
	dt_batchnorm_apply(x, mean, rstd, l->kernel, l->bias, y, R, C, l->act);
}

static void zeropad_forward(const struct dt_layer *l, const float *x, float *y, int B)
{
	const int H = l->in.h, W = l->in.w, C = l->in.c, OW = l->out.w;
	memset(y, 0, (size_t)B * dt_shape_elems(l->out) * sizeof(float));
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			memcpy(y + (((size_t)b * l->out.h + h + l->pad[0]) * OW + l->pad[2]) * C,
			       x + (((size_t)b * H + h) * W) * C, (size_t)W * C * sizeof(float));
}

static void zeropad_backward(const struct dt_layer *l, const float *dy, float *dx, int B)
{
	const int H = l->in.h, W = l->in.w, C = l->in.c, OW = l->out.w;
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			memcpy(dx + (((size_t)b * H + h) * W) * C,
			       dy + (((size_t)b * l->out.h + h + l->pad[0]) * OW + l->pad[2]) * C, (size_t)W * C * sizeof(float));
}

void dt__layer_forward_keras(struct dt_layer *l, const float *x, float *y, int B, int training)
{
	switch (l->kind) {
	case DT_LAYER_DEPTHWISE:
		dt_depthwise_forward(&l->dw, x, l->kernel, l->bias_count ? l->bias : NULL, y, B);
		break;
	case DT_LAYER_BATCHNORM:
		bn_forward(l, x, y, B, training);
		break;
	case DT_LAYER_ZEROPAD:
		zeropad_forward(l, x, y, B);
		break;
	default:
		DT_ASSERT(!"not a Keras layer kind");
	}
}

void dt__layer_backward_keras(struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B)
{
	switch (l->kind) {
	case DT_LAYER_DEPTHWISE:
		dt_depthwise_backward(&l->dw, x, l->kernel, dy, dx, l->dkernel, l->bias_count ? l->dbias : NULL, B);
		break;
	case DT_LAYER_BATCHNORM: {
		const int C = l->in.c;
		dt_batchnorm_backward(dy, x, l->stats, l->stats + C, l->kernel, l->bias, dx, l->dkernel, l->dbias,
				      bn_rows(l, B), C, l->bn_batch, l->act);
		/* the moving statistics are not trained: they follow the batches */
		memset(l->dmoving, 0, 2 * (size_t)C * sizeof(float));
		break;
	}
	case DT_LAYER_ZEROPAD:
		if (dx)
			zeropad_backward(l, dy, dx, B);
		break;
	default:
		DT_ASSERT(!"not a Keras layer kind");
	}
}
