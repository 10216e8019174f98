#include "nn/layers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "nn/layers_more.h"
#include "tensor/kernels_direct.h"

/*
 * Convolutions run im2col + matmul on a chunk of images at a time, sized so
 * that the chunk's im2col rows (scratch) stay in the L2 cache between being
 * written and being read by the matmul. Backward recomputes the chunk's rows
 * instead of keeping the whole batch's: writing and re-reading them from
 * memory costs more than rebuilding them from the (smaller) input.
 *
 * One-channel inputs (the first layer on grayscale images) use the
 * transposed im2col layout (K, rows) instead: building it is one long copy
 * per (tap, output row) instead of KH short ones per output pixel, and
 * OpenBLAS multiplies it faster against a few output channels (measured
 * 1.8x for LeNet's 6). The input gradient (needed only when such a layer is
 * not first) still goes through the (rows, K) layout and col2im.
 *
 * One-channel inputs with fused 2x2 pooling and stride 1 (the first layer
 * of lenet and cnn) skip im2col altogether: tensor/kernels_direct.h does
 * conv + bias + ReLU + pool in one pass, and its backward the parameter
 * gradients when no input gradient is needed (a first layer).
 */
#define CONV_CHUNK_FLOATS (64 * 1024)

static void set_name(struct dt_layer *l, const char *name)
{
	snprintf(l->name, sizeof(l->name), "%s", name);
}

static void init_common(struct dt_layer *l, enum dt_layer_kind kind, const char *name, struct dt_shape in)
{
	memset(l, 0, sizeof(*l));
	l->kind = kind;
	set_name(l, name);
	l->in = in;
	l->out = in;
}

static enum dt_status check_input(const char *name, struct dt_shape in, struct dt_err *err)
{
	if (in.h < 1 || in.w < 1 || in.c < 1)
		return dt_err_set(err, DT_CONFIG, "layer '%s': empty input shape (%d, %d, %d)", name, in.h, in.w, in.c);
	return DT_OK;
}

enum dt_status dt_layer_dense(struct dt_layer *l, const char *name, struct dt_shape in, int units, int relu,
			      struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (units < 1)
		return dt_err_set(err, DT_CONFIG, "layer '%s': dense layer needs at least 1 unit, got %d", name, units);
	init_common(l, DT_LAYER_DENSE, name, in);
	l->out = (struct dt_shape){ 1, 1, units };
	l->relu = relu;
	l->act = relu ? DT_ACT_RELU : DT_ACT_LINEAR;
	l->dense_rows = 1;
	l->kernel_count = dt_shape_elems(in) * (size_t)units;
	l->bias_count = (size_t)units;
	return DT_OK;
}

enum dt_status dt_layer_conv2d(struct dt_layer *l, const char *name, struct dt_shape in, int kh, int kw,
			       int filters, int stride, int pad, int relu, struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (filters < 1)
		return dt_err_set(err, DT_CONFIG, "layer '%s': conv2d needs at least 1 filter, got %d", name, filters);
	struct dt_conv_geom g;
	if (dt_conv_geom_init(&g, in.h, in.w, in.c, kh, kw, stride, pad) != 0)
		return dt_err_set(err, DT_CONFIG,
				  "layer '%s': a %dx%d window with stride %d and padding %d does not fit input (%d, %d, %d)",
				  name, kh, kw, stride, pad, in.h, in.w, in.c);
	init_common(l, DT_LAYER_CONV2D, name, in);
	l->geom = g;
	l->out = (struct dt_shape){ g.OH, g.OW, filters };
	l->relu = relu;
	l->act = relu ? DT_ACT_RELU : DT_ACT_LINEAR;
	l->kernel_count = (size_t)dt_conv_k(&g) * (size_t)filters;
	l->bias_count = (size_t)filters;
	size_t per_image = (size_t)g.OH * (size_t)g.OW * (size_t)dt_conv_k(&g);
	l->chunk = per_image >= CONV_CHUNK_FLOATS ? 1 : (int)(CONV_CHUNK_FLOATS / per_image);
	return DT_OK;
}

enum dt_status dt_layer_fuse_pool(struct dt_layer *l, struct dt_err *err)
{
	DT_ASSERT(l->kind == DT_LAYER_CONV2D && !l->pool);
	if (l->out.h < 2 || l->out.w < 2)
		return dt_err_set(err, DT_CONFIG, "layer '%s': 2x2 max pooling needs an input of at least 2x2, got (%d, %d, %d)",
				  l->name, l->out.h, l->out.w, l->out.c);
	l->pool = 1;
	l->out = (struct dt_shape){ l->geom.OH / 2, l->geom.OW / 2, l->out.c };
	return DT_OK;
}

enum dt_status dt_layer_maxpool2(struct dt_layer *l, const char *name, struct dt_shape in, struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (in.h < 2 || in.w < 2)
		return dt_err_set(err, DT_CONFIG, "layer '%s': 2x2 max pooling needs an input of at least 2x2, got (%d, %d, %d)",
				  name, in.h, in.w, in.c);
	init_common(l, DT_LAYER_MAXPOOL2, name, in);
	l->out = (struct dt_shape){ in.h / 2, in.w / 2, in.c };
	return DT_OK;
}

enum dt_status dt_layer_relu(struct dt_layer *l, const char *name, struct dt_shape in, struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	init_common(l, DT_LAYER_RELU, name, in);
	return DT_OK;
}

enum dt_status dt_layer_dropout(struct dt_layer *l, const char *name, struct dt_shape in, float rate,
				struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	if (!(rate >= 0.0f && rate < 1.0f))
		return dt_err_set(err, DT_CONFIG, "layer '%s': dropout rate must be in [0, 1), got %g", name, (double)rate);
	init_common(l, DT_LAYER_DROPOUT, name, in);
	l->rate = rate;
	return DT_OK;
}

enum dt_status dt_layer_flatten(struct dt_layer *l, const char *name, struct dt_shape in, struct dt_err *err)
{
	enum dt_status st = check_input(name, in, err);
	if (st)
		return st;
	init_common(l, DT_LAYER_FLATTEN, name, in);
	l->out = (struct dt_shape){ 1, 1, (int)dt_shape_elems(in) };
	return DT_OK;
}

size_t dt_layer_num_params(const struct dt_layer *l)
{
	return l->kernel_count + l->bias_count + l->extra_count;
}

void dt_layer_bind(struct dt_layer *l, float *params, float *grads)
{
	if (dt_layer_num_params(l) == 0)
		return;
	l->kernel = params;
	l->bias = params + l->kernel_count;
	l->dkernel = grads;
	l->dbias = grads + l->kernel_count;
	if (l->extra_count) {
		l->moving = params + l->kernel_count + l->bias_count;
		l->dmoving = grads + l->kernel_count + l->bias_count;
	}
}

void dt_layer_alloc_state(struct dt_layer *l, int max_batch)
{
	DT_ASSERT(max_batch >= 1);
	dt_layer_release(l);
	l->max_batch = max_batch;
	if (l->kind == DT_LAYER_DROPOUT)
		l->mask = dt_xalloc_aligned((size_t)max_batch * dt_shape_elems(l->in), sizeof(float));
	else if (l->kind == DT_LAYER_MAXPOOL2 || (l->kind == DT_LAYER_CONV2D && l->pool) ||
		 (l->kind == DT_LAYER_POOL && l->pool_max))
		l->argmax = dt_xalloc_aligned((size_t)max_batch * dt_shape_elems(l->out), sizeof(int32_t));
	else if (l->kind == DT_LAYER_DENSE && (l->act == DT_ACT_GELU || l->act == DT_ACT_SWISH))
		l->pre = dt_xalloc_aligned((size_t)max_batch * dt_shape_elems(l->out), sizeof(float));
	else if (l->kind == DT_LAYER_BATCHNORM)
		l->stats = dt_xalloc_aligned(2 * (size_t)l->in.c, sizeof(float));
	else if (l->kind == DT_LAYER_LAYERNORM)
		l->stats = dt_xalloc_aligned(2 * (size_t)max_batch * (dt_shape_elems(l->in) / (size_t)l->in.c),
					     sizeof(float));
}

void dt_layer_release(struct dt_layer *l)
{
	if (!l)
		return;
	free(l->mask);
	free(l->argmax);
	free(l->pre);
	free(l->stats);
	free(l->attn);
	free(l->keep);
	l->attn = NULL;
	l->keep = NULL;
	l->mask = NULL;
	l->argmax = NULL;
	l->pre = NULL;
	l->stats = NULL;
	l->max_batch = 0;
}

size_t dt_layer_scratch_floats(const struct dt_layer *l, int batch)
{
	if (l->kind != DT_LAYER_CONV2D || dt__layer_is_pointwise(l))
		return 0;
	const size_t images = (size_t)(batch < l->chunk ? batch : l->chunk);
	const size_t rows = images * (size_t)l->geom.OH * (size_t)l->geom.OW;
	/* im2col rows (rows, K), then for a pooled layer the conv output (rows, OC) */
	/* and for a pooled layer the kernel transposed for the input gradient */
	size_t n = rows * (size_t)dt_conv_k(&l->geom) +
		   (l->pool ? rows * (size_t)l->out.c + dt_conv_kt_floats(&l->geom, l->out.c) : 0);
	if (l->pool && dt_conv1_pool_supported(&l->geom)) {
		const size_t direct = dt_conv1_pool_scratch_floats(&l->geom, l->out.c);
		n = n > direct ? n : direct;
	}
	return n;
}

int dt_layer_is_view(const struct dt_layer *l)
{
	return l->kind == DT_LAYER_FLATTEN || l->kind == DT_LAYER_RESHAPE;
}

/* ---- dense ---------------------------------------------------------------- */

/* y (R, N) += bias, then the fused ReLU; a bias-free layer only clamps. */
static void bias_act(const struct dt_layer *l, float *y, int R, int N)
{
	if (l->bias_count)
		dt_bias_act_forward(y, l->bias, R, N, l->relu);
	else if (l->relu)
		dt_relu_forward(y, y, (size_t)R * (size_t)N);
}

/* Rows are examples (flat input) or every position of the last axis. */
static void dense_forward(const struct dt_layer *l, const float *x, float *y, int B)
{
	const int OUT = l->out.c, IN = (int)(l->kernel_count / (size_t)OUT);
	B *= l->dense_rows;
	/* y (B, OUT) = x (B, IN) kernel (IN, OUT) */
	dt_matmul(0, 0, B, OUT, IN, 1.0f, x, IN, l->kernel, OUT, 0.0f, y, OUT);
	bias_act(l, y, B, OUT);
	if (l->act != DT_ACT_RELU && l->act != DT_ACT_LINEAR) {
		if (l->pre)
			memcpy(l->pre, y, (size_t)B * (size_t)OUT * sizeof(float));
		dt_act_forward(l->act, y, y, B, OUT);
	}
}

static void dense_backward(const struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B)
{
	const int OUT = l->out.c, IN = (int)(l->kernel_count / (size_t)OUT);
	B *= l->dense_rows;
	float *dbias = l->bias_count ? l->dbias : NULL;
	if (dbias)
		memset(dbias, 0, (size_t)OUT * sizeof(float));
	if (l->act != DT_ACT_RELU && l->act != DT_ACT_LINEAR)
		dt_act_backward(l->act, l->pre, y, dy, dy, B, OUT);
	dt_bias_act_backward(dy, y, dbias, B, OUT, l->relu); /* dy (B, OUT) becomes dL/d(pre-activation) */
	/* dkernel (IN, OUT) = x^T (IN, B) dy (B, OUT) */
	dt_matmul(1, 0, IN, OUT, B, 1.0f, x, IN, dy, OUT, 0.0f, l->dkernel, OUT);
	/* dx (B, IN) = dy (B, OUT) kernel^T (OUT, IN) */
	if (dx)
		dt_matmul(0, 1, B, IN, OUT, 1.0f, dy, OUT, l->kernel, OUT, 0.0f, dx, IN);
}

/* ---- conv2d --------------------------------------------------------------- */

/* Layer output per image: (OH, OW, OC), or (OH/2, OW/2, OC) when pooled. */
static void conv_forward(const struct dt_layer *l, const float *x, float *y, int B, float *scratch)
{
	const struct dt_conv_geom *g = &l->geom;
	const int K = dt_conv_k(g), OC = l->out.c;
	const size_t in_elems = dt_shape_elems(l->in), out_elems = dt_shape_elems(l->out);
	/* Scratch as dt_layer_scratch_floats lays it out for B examples. */
	const size_t chunk_rows = (size_t)(B < l->chunk ? B : l->chunk) * (size_t)g->OH * (size_t)g->OW;
	float *cols = scratch;                          /* (rows, K) or (K, rows) */
	float *conv = scratch + chunk_rows * (size_t)K; /* pooled: (rows, OC) */
	if (l->pool && dt_conv1_pool_supported(g)) {
		dt_conv1_pool_forward(g, OC, x, l->kernel, l->bias_count ? l->bias : NULL, l->relu, y, l->argmax, B,
				      scratch);
		return;
	}
	if (dt__layer_is_pointwise(l)) {
		dt__pointwise_forward(l, x, y, B);
		return;
	}
	for (int b0 = 0; b0 < B; b0 += l->chunk) {
		const int nb = B - b0 < l->chunk ? B - b0 : l->chunk;
		const int rows = nb * g->OH * g->OW;
		/* zc (rows, OC) = (nb, OH, OW, OC): the output itself, or scratch when pooled */
		float *zc = l->pool ? conv : y + (size_t)b0 * out_elems;
		if (g->C == 1) {
			dt_im2col_t(g, x + (size_t)b0 * in_elems, nb, cols, rows); /* (K, rows) */
			/* zc (rows, OC) = cols^T (rows, K) kernel (K, OC) */
			dt_matmul(1, 0, rows, OC, K, 1.0f, cols, rows, l->kernel, OC, 0.0f, zc, OC);
		} else {
			dt_im2col(g, x + (size_t)b0 * in_elems, nb, cols); /* (rows, K) */
			/* zc (rows, OC) = cols (rows, K) kernel (K, OC) */
			dt_matmul(0, 0, rows, OC, K, 1.0f, cols, K, l->kernel, OC, 0.0f, zc, OC);
		}
		bias_act(l, zc, rows, OC);
		if (l->pool)
			dt_maxpool2_forward(zc, y + (size_t)b0 * out_elems, l->argmax + (size_t)b0 * out_elems, nb, g->OH,
					    g->OW, OC);
	}
}

static void conv_backward(const struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B,
			  float *scratch)
{
	const struct dt_conv_geom *g = &l->geom;
	const int K = dt_conv_k(g), OC = l->out.c;
	const size_t in_elems = dt_shape_elems(l->in), out_elems = dt_shape_elems(l->out);
	const size_t chunk_rows = (size_t)(B < l->chunk ? B : l->chunk) * (size_t)g->OH * (size_t)g->OW;
	float *cols = scratch;
	float *conv = scratch + chunk_rows * (size_t)K;
	float *dbias = l->bias_count ? l->dbias : NULL;
	if (!dx && l->pool && dt_conv1_pool_supported(g)) {
		dt_conv1_pool_backward(g, OC, x, y, dy, l->argmax, l->relu, l->dkernel, dbias, B, scratch);
		return;
	}
	if (dt__layer_is_pointwise(l)) {
		dt__pointwise_backward(l, x, y, dy, dx, B);
		return;
	}
	if (dbias)
		memset(dbias, 0, (size_t)OC * sizeof(float));
	float *kt = conv + chunk_rows * (size_t)OC; /* pooled: the kernel transposed */
	if (dx && l->pool)
		dt_conv_kernel_transpose(g, l->kernel, OC, kt);
	for (int b0 = 0; b0 < B; b0 += l->chunk) {
		const int nb = B - b0 < l->chunk ? B - b0 : l->chunk;
		const int rows = nb * g->OH * g->OW;
		const int out_rows = nb * l->out.h * l->out.w;
		float *dyc = dy + (size_t)b0 * out_elems; /* (out_rows, OC) */
		/* The ReLU mask and the bias gradient, on the (pooled) output. */
		dt_bias_act_backward(dyc, y + (size_t)b0 * out_elems, dbias, out_rows, OC, l->relu);
		float *dz = dyc; /* (rows, OC): dL/d(conv output before bias) */
		if (l->pool) {
			dz = conv;
			dt_maxpool2_backward(dyc, l->argmax + (size_t)b0 * out_elems, dz, nb, g->OH, g->OW, OC);
		}
		const float beta = b0 == 0 ? 0.0f : 1.0f;
		if (g->C == 1) {
			dt_im2col_t(g, x + (size_t)b0 * in_elems, nb, cols, rows); /* (K, rows) */
			/* dkernel (K, OC) (+)= cols_t (K, rows) dz (rows, OC) */
			dt_matmul(0, 0, K, OC, rows, 1.0f, cols, rows, dz, OC, beta, l->dkernel, OC);
		} else {
			dt_im2col(g, x + (size_t)b0 * in_elems, nb, cols); /* (rows, K) */
			/* dkernel (K, OC) (+)= cols^T (K, rows) dz (rows, OC) */
			dt_matmul(1, 0, K, OC, rows, 1.0f, cols, K, dz, OC, beta, l->dkernel, OC);
		}
		if (dx && l->pool) {
			/* only each window's winner has a gradient: added straight into dx */
			dt_conv_pool_input_grad(g, OC, kt, dyc, l->argmax + (size_t)b0 * out_elems, dx + (size_t)b0 * in_elems,
						nb);
		} else if (dx) {
			/* dcols (rows, K) = dz (rows, OC) kernel^T (OC, K), then scattered back */
			dt_matmul(0, 1, rows, K, OC, 1.0f, dz, OC, l->kernel, OC, 0.0f, cols, K);
			dt_col2im(g, cols, nb, dx + (size_t)b0 * in_elems);
		}
	}
}

/* ---- dispatch ------------------------------------------------------------- */

void dt_layer_forward(struct dt_layer *l, const float *x, float *y, int B, int training, struct dt_rng *rng,
		      float *scratch)
{
	DT_ASSERT(B >= 0);
	const size_t n = (size_t)B * dt_shape_elems(l->in);
	switch (l->kind) {
	case DT_LAYER_DENSE:
		dense_forward(l, x, y, B);
		break;
	case DT_LAYER_CONV2D:
		conv_forward(l, x, y, B, scratch);
		break;
	case DT_LAYER_MAXPOOL2:
		DT_ASSERT(B <= l->max_batch);
		dt_maxpool2_forward(x, y, l->argmax, B, l->in.h, l->in.w, l->in.c);
		break;
	case DT_LAYER_RELU:
		dt_relu_forward(x, y, n);
		break;
	case DT_LAYER_DROPOUT:
		if (training && l->rate > 0.0f) {
			DT_ASSERT(B <= l->max_batch && rng != NULL);
			dt_dropout_forward(x, y, l->mask, n, l->rate, rng);
		} else {
			if (training) {
				DT_ASSERT(B <= l->max_batch);
				for (size_t i = 0; i < n; i++)
					l->mask[i] = 1.0f;
			}
			memcpy(y, x, n * sizeof(float));
		}
		break;
	case DT_LAYER_FLATTEN:
		if (y != x)
			memcpy(y, x, n * sizeof(float));
		break;
	default:
		dt__layer_forward_more(l, x, y, B, n, training);
		break;
	}
}

void dt_layer_backward(struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B,
		       float *scratch)
{
	const size_t n = (size_t)B * dt_shape_elems(l->in);
	switch (l->kind) {
	case DT_LAYER_DENSE:
		dense_backward(l, x, y, dy, dx, B);
		break;
	case DT_LAYER_CONV2D:
		conv_backward(l, x, y, dy, dx, B, scratch);
		break;
	case DT_LAYER_MAXPOOL2:
		if (dx)
			dt_maxpool2_backward(dy, l->argmax, dx, B, l->in.h, l->in.w, l->in.c);
		break;
	case DT_LAYER_RELU:
		if (dx)
			dt_relu_backward(y, dy, dx, n);
		break;
	case DT_LAYER_DROPOUT:
		if (dx)
			dt_dropout_backward(l->mask, dy, dx, n);
		break;
	case DT_LAYER_FLATTEN:
		if (dx && dx != dy)
			memcpy(dx, dy, n * sizeof(float));
		break;
	default:
		dt__layer_backward_more(l, x, y, dy, dx, B, n);
		break;
	}
}
