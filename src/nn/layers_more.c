/* The graph builder's layers (nn/layers.h lists them with their shapes). */
#include "nn/layers_more.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

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

enum dt_status dt_layer_dense_act(struct dt_layer *l, const char *name, struct dt_shape in, int units,
				  enum dt_act act, int last_axis, struct dt_err *err)
{
	if (!last_axis || (in.h == 1 && in.w == 1)) {
		enum dt_status st = dt_layer_dense(l, name, in, units, act == DT_ACT_RELU, err);
		if (st)
			return st;
		l->act = act;
		return DT_OK;
	}
	enum dt_status st = dt_layer_dense(l, name, (struct dt_shape){ 1, 1, in.c }, units, act == DT_ACT_RELU, err);
	if (st)
		return st;
	l->act = act;
	l->in = in;
	l->dense_rows = in.h * in.w;
	l->out = (struct dt_shape){ in.h, in.w, units };
	return DT_OK;
}

enum dt_status dt_layer_conv2d_same(struct dt_layer *l, const char *name, struct dt_shape in, int kh, int kw,
				    int filters, int stride, int relu, struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (stride < 1 || kh < 1 || kw < 1)
		return dt_err_set(err, DT_CONFIG, "layer '%s': window %dx%d and stride %d must be positive", name, kh, kw,
				  stride);
	const int oh = (in.h + stride - 1) / stride, ow = (in.w + stride - 1) / stride;
	const int th = (oh - 1) * stride + kh - in.h, tw = (ow - 1) * stride + kw - in.w;
	const int top = th > 0 ? th / 2 : 0, left = tw > 0 ? tw / 2 : 0;
	if (top != left)
		return dt_err_set(err, DT_CONFIG,
				  "layer '%s': padding 'same' for a %dx%d window with stride %d on input (%d, %d, %d) needs "
				  "%d rows but %d columns of padding before the image; conv2d pads both alike (use 'valid', "
				  "or a square input and window)",
				  name, kh, kw, stride, in.h, in.w, in.c, top, left);
	st = dt_layer_conv2d(l, name, in, kh, kw, filters, stride, top, relu, err);
	if (st)
		return st;
	/* the bottom and right padding (one more when the total is odd) reads
	 * as zeros through the kernels' bounds checks */
	l->geom.OH = oh;
	l->geom.OW = ow;
	l->out.h = oh;
	l->out.w = ow;
	const size_t per_image = (size_t)oh * (size_t)ow * (size_t)dt_conv_k(&l->geom);
	l->chunk = per_image >= 64 * 1024 ? 1 : (int)(64 * 1024 / per_image);
	return DT_OK;
}

enum dt_status dt_layer_pool(struct dt_layer *l, const char *name, struct dt_shape in, int is_max, int ph, int pw,
			     int sh, int sw, int same, struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	struct dt_pool_geom g;
	if (dt_pool_geom_init(&g, in.h, in.w, in.c, ph, pw, sh, sw, same) != 0)
		return dt_err_set(err, DT_CONFIG,
				  "layer '%s': a %dx%d pooling window with strides (%d, %d) and padding '%s' does not fit "
				  "input (%d, %d, %d)",
				  name, ph, pw, sh, sw, same ? "same" : "valid", in.h, in.w, in.c);
	init_common(l, DT_LAYER_POOL, name, in);
	l->pgeom = g;
	l->pool_max = is_max;
	l->out = (struct dt_shape){ g.OH, g.OW, in.c };
	return DT_OK;
}

enum dt_status dt_layer_activation(struct dt_layer *l, const char *name, struct dt_shape in, enum dt_act act,
				   struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if ((int)act < DT_ACT_LINEAR || (int)act > DT_ACT_LAST)
		return dt_err_set(err, DT_CONFIG, "layer '%s': unknown activation %d", name, (int)act);
	init_common(l, DT_LAYER_ACTIVATION, name, in);
	l->act = act;
	return DT_OK;
}

enum dt_status dt_layer_reshape(struct dt_layer *l, const char *name, struct dt_shape in, struct dt_shape out,
				struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (out.h < 1 || out.w < 1 || out.c < 1 || dt_shape_elems(in) != dt_shape_elems(out))
		return dt_err_set(err, DT_CONFIG, "layer '%s': cannot reshape (%d, %d, %d) to (%d, %d, %d)", name, in.h,
				  in.w, in.c, out.h, out.w, out.c);
	init_common(l, DT_LAYER_RESHAPE, name, in);
	l->out = out;
	return DT_OK;
}

enum dt_status dt_layer_embedding(struct dt_layer *l, const char *name, struct dt_shape in, int vocab, int dim,
				  struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (in.h != 1)
		return dt_err_set(err, DT_CONFIG, "layer '%s': embedding takes ids of rank 1 or 2, got (%d, %d, %d)", name,
				  in.h, in.w, in.c);
	if (vocab < 1 || dim < 1)
		return dt_err_set(err, DT_CONFIG, "layer '%s': embedding needs vocabulary and dimension >= 1, got %d and %d",
				  name, vocab, dim);
	init_common(l, DT_LAYER_EMBEDDING, name, in);
	l->vocab = vocab;
	l->out = (struct dt_shape){ in.w, in.c, dim };
	l->kernel_count = (size_t)vocab * (size_t)dim;
	return DT_OK;
}

enum dt_status dt_layer_layernorm(struct dt_layer *l, const char *name, struct dt_shape in, float eps,
				  struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (!(eps > 0.0f))
		return dt_err_set(err, DT_CONFIG, "layer '%s': layer norm epsilon must be positive, got %g", name,
				  (double)eps);
	init_common(l, DT_LAYER_LAYERNORM, name, in);
	l->eps = eps;
	l->kernel_count = (size_t)in.c; /* gamma */
	l->bias_count = (size_t)in.c;   /* beta */
	return DT_OK;
}

void dt_layer_shape_only(struct dt_layer *l, enum dt_layer_kind kind, const char *name, struct dt_shape in,
			 struct dt_shape out)
{
	init_common(l, kind, name, in);
	l->out = out;
}

void dt_layer_embedding_forward(const struct dt_layer *l, const int32_t *ids, float *y, int B)
{
	dt_embedding_forward(ids, l->kernel, y, (size_t)B * dt_shape_elems(l->in), l->out.c);
}

void dt_layer_embedding_backward(const struct dt_layer *l, const int32_t *ids, const float *dy, int B)
{
	/* Every row is rewritten (a stale row would be trained on: all-reduce
	 * and the parameter servers read the whole range); the adds touch only
	 * the rows the batch used. */
	memset(l->dkernel, 0, l->kernel_count * sizeof(float));
	dt_embedding_backward(ids, dy, l->dkernel, (size_t)B * dt_shape_elems(l->in), l->out.c);
}

static int rows_of(const struct dt_layer *l, int B)
{
	return (int)((size_t)B * dt_shape_elems(l->in) / (size_t)l->in.c);
}

void dt__layer_forward_more(struct dt_layer *l, const float *x, float *y, int B, size_t n, int training)
{
	switch (l->kind) {
	case DT_LAYER_POOL:
		DT_ASSERT(B <= l->max_batch || !l->pool_max);
		dt_pool_forward(&l->pgeom, l->pool_max, x, y, l->argmax, B);
		break;
	case DT_LAYER_ACTIVATION:
		dt_act_forward(l->act, x, y, rows_of(l, B), l->in.c);
		break;
	case DT_LAYER_RESHAPE:
		if (y != x)
			memcpy(y, x, n * sizeof(float));
		break;
	case DT_LAYER_LAYERNORM: {
		DT_ASSERT(B <= l->max_batch);
		const int R = rows_of(l, B);
		dt_layernorm_forward(x, l->kernel, l->bias, y, l->stats, l->stats + (size_t)R, R, l->in.c, l->eps);
		break;
	}
	case DT_LAYER_DEPTHWISE:
	case DT_LAYER_BATCHNORM:
	case DT_LAYER_ZEROPAD:
		dt__layer_forward_keras(l, x, y, B, training);
		break;
	default:
		DT_ASSERT(!"layer kind has no single-input forward");
	}
}

void dt__layer_backward_more(struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B,
			     size_t n)
{
	switch (l->kind) {
	case DT_LAYER_POOL:
		if (dx)
			dt_pool_backward(&l->pgeom, l->pool_max, dy, l->argmax, dx, B);
		break;
	case DT_LAYER_ACTIVATION:
		if (dx)
			dt_act_backward(l->act, x, y, dy, dx, rows_of(l, B), l->in.c);
		break;
	case DT_LAYER_RESHAPE:
		if (dx && dx != dy)
			memcpy(dx, dy, n * sizeof(float));
		break;
	case DT_LAYER_LAYERNORM: {
		const int R = rows_of(l, B), D = l->in.c;
		memset(l->dkernel, 0, (size_t)D * sizeof(float));
		memset(l->dbias, 0, (size_t)D * sizeof(float));
		dt_layernorm_backward(dy, x, l->stats, l->stats + (size_t)R, l->kernel, dx, l->dkernel, l->dbias, R, D);
		break;
	}
	case DT_LAYER_DEPTHWISE:
	case DT_LAYER_BATCHNORM:
	case DT_LAYER_ZEROPAD:
		dt__layer_backward_keras(l, x, y, dy, dx, B);
		break;
	default:
		DT_ASSERT(!"layer kind has no single-input backward");
	}
}
