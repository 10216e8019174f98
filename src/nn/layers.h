/*
 * layers.h — the layers models are built from, with forward and backward.
 *
 * A `struct dt_layer` describes one layer: its kind, its per-example input
 * and output shapes, and views of its parameters and their gradients in
 * buffers someone else owns (a model's flat buffers, or a test's arrays;
 * see dt_layer_bind). It owns only the state its backward pass needs and
 * that is not an activation: dropout's mask and max pooling's arg-max, both
 * sized for `max_batch` examples (dt_layer_alloc_state).
 *
 * Kinds (shapes per example; the batch B is always the leading dimension):
 *   dense    (IN) -> (OUT)         y = x kernel + bias [, ReLU]; kernel (IN, OUT),
 *                                  bias (OUT); any input shape is read as flat
 *   conv2d   (H, W, C) -> (OH, OW, OC)   im2col + one matmul per chunk of
 *                                  images [, ReLU] [, 2x2 max pool: (OH/2, OW/2, OC)];
 *                                  kernel (KH, KW, C, OC), bias (OC)
 *   maxpool2 (H, W, C) -> (H/2, W/2, C)  2x2 windows, stride 2, floor
 *   relu     any -> same
 *   dropout  any -> same           inverted: kept values scaled by 1/(1-rate)
 *   flatten  (H, W, C) -> (H*W*C)  a view: output memory is the input's
 *
 * and, for the graph builder (nn/graph.h; layers_more.c):
 *   pool       (H, W, C) -> (OH, OW, C)  max or average, any window, strides,
 *                                  padding valid or same (tensor/kernels.h)
 *   activation any -> same         sigmoid, tanh, softmax (last axis), gelu, relu, linear
 *   reshape    any -> same count   a view, like flatten
 *   embedding  (T) int32 ids -> (T, D)   table (V, D) in `kernel`; through
 *                                  dt_layer_embedding_forward/backward, not the float entry points
 *   layernorm  (..., D) -> same    over the last axis; gamma in `kernel`, beta in `bias`
 *   add, concat, input             shapes only: the graph runs them (several inputs)
 *   custom                         a custom model's whole parameter buffer (nn/custom.h)
 *
 * and, for Keras's models (layers_keras.c):
 *   depthwise  (H, W, C) -> (OH, OW, C*M)  each channel with its own M filters,
 *                                  strides and dilation per axis, padding valid or
 *                                  same; kernel (KH, KW, C, M), bias (C*M) or none
 *   batchnorm  (..., C) -> same    over every axis but the last; gamma in
 *                                  `kernel`, beta in `bias`, then moving_mean and
 *                                  moving_variance (`extra_count` = 2C, at `moving`).
 *                                  Training: batch statistics, and the moving ones
 *                                  updated in place (m = m*momentum + batch*(1-momentum),
 *                                  the biased variance as Keras 3 keeps it); their
 *                                  gradients are always zero. Evaluating, or `frozen`
 *                                  (Keras: a BatchNormalization with trainable False
 *                                  runs in inference mode): the moving statistics
 *                                  normalize and stay unchanged.
 *   zeropad    (H, W, C) -> (H+t+b, W+l+r, C)   zeros around the image
 *
 * dt_layer_drop_bias makes a dense, conv2d or depthwise layer bias-free
 * (Keras's use_bias False): bias_count 0, no bias added.
 *
 * Dense reads its input as flat (IN = H*W*C) from dt_layer_dense, or applies
 * to the last axis (Keras's Dense: (..., IN) -> (..., OUT), `dense_rows`
 * rows per example) from dt_layer_dense_act with last_axis set. Its fused
 * activation may be any enum dt_act; GELU keeps its pre-activation (`pre`).
 *
 * ReLU after a dense or conv layer is fused into it (`relu` flag): the bias
 * add and the clamp are one pass forward, and the mask and bias gradient
 * one pass backward. The stand-alone relu layer exists for other uses.
 *
 * A 2x2 max pooling after a conv layer can be fused into it too
 * (dt_layer_fuse_pool, `pool` flag): the conv output of each chunk of
 * images then lives only in scratch memory, in cache, and is pooled
 * straight into the layer's output; backward applies the ReLU mask and sums
 * the bias gradient on the pooled gradient (4x smaller; routing it back to
 * the window maxima keeps every sum) and scatters it into scratch. Models
 * fuse every pool that follows a conv; results are those of conv then pool.
 *
 * Forward and backward never allocate. Backward overwrites the layer's
 * parameter gradients (dkernel, dbias), may modify dy in place (the fused
 * ReLU mask), and writes dx unless dx is NULL (the first layer of a model
 * needs no input gradient).
 */
#ifndef DT_NN_LAYERS_H
#define DT_NN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/rng.h"
#include "tensor/kernels.h"

enum dt_layer_kind { DT_LAYER_DENSE, DT_LAYER_CONV2D, DT_LAYER_MAXPOOL2, DT_LAYER_RELU, DT_LAYER_DROPOUT,
		     DT_LAYER_FLATTEN, DT_LAYER_POOL, DT_LAYER_ACTIVATION, DT_LAYER_RESHAPE, DT_LAYER_EMBEDDING,
		     DT_LAYER_LAYERNORM, DT_LAYER_ADD, DT_LAYER_CONCAT, DT_LAYER_INPUT, DT_LAYER_CUSTOM,
		     DT_LAYER_DEPTHWISE, DT_LAYER_BATCHNORM, DT_LAYER_ZEROPAD,
		     /* the sequence nodes (nn/seq.h, graph_seq.c, exec_seq.c) */
		     DT_LAYER_ATTENTION, DT_LAYER_TIMING, DT_LAYER_SHIFT, DT_LAYER_SYMBOL, DT_LAYER_LOGITS };

/* The shape of one example: (H, W, C); a flat vector of N is (1, 1, N). */
struct dt_shape {
	int h, w, c;
};

static inline size_t dt_shape_elems(struct dt_shape s)
{
	return (size_t)s.h * (size_t)s.w * (size_t)s.c;
}

/* A layer's name: 1 to DT_LAYER_NAME_MAX - 1 bytes of UTF-8 (Keras and
 * TF.js names, '/' between nested scopes; nn/graph.h's rules). */
#define DT_LAYER_NAME_MAX 256

struct dt_layer {
	enum dt_layer_kind kind;
	char name[DT_LAYER_NAME_MAX]; /* "conv_1", "pool_2", "dense_3", ... */
	struct dt_shape in, out;      /* per example */
	int relu;                     /* dense, conv2d: ReLU fused after the bias */
	struct dt_conv_geom geom;     /* conv2d */
	int chunk;                    /* conv2d: images per im2col chunk */
	int pool;                     /* conv2d: 2x2 max pooling fused after the ReLU */
	float rate;                   /* dropout: drop probability, [0, 1) */
	size_t kernel_count;          /* dense IN*OUT, conv KH*KW*C*OC, else 0 */
	size_t bias_count;            /* OUT or OC, else 0 */
	float *kernel, *bias;         /* parameters, views: (IN, OUT) or (KH, KW, C, OC); (OUT) */
	float *dkernel, *dbias;       /* their gradients, same shapes */
	int max_batch;                /* examples the state below holds */
	float *mask;                  /* dropout: (max_batch, IN), owned */
	int32_t *argmax;              /* maxpool2, pooled conv2d, max pool: (max_batch, out), owned */
	enum dt_act act;              /* dense: fused activation (relu sets `relu` too); batchnorm: linear, or
	                                 a fused relu or relu6; activation */
	int dense_rows;               /* dense: rows per example (1 when the input is read flat) */
	struct dt_pool_geom pgeom;    /* pool */
	int pool_max;                 /* pool: 1 max, 0 average */
	float eps;                    /* layernorm */
	int vocab;                    /* embedding: rows of the table */
	float *pre;                   /* dense with GELU: pre-activations (max_batch, out), owned */
	float *stats;                 /* layernorm: mean then rstd per row, (2, max_batch * rows), owned;
				       * batchnorm: the last forward's mean, rstd, (2, C), owned */
	struct dt_dw_geom dw;         /* depthwise */
	int pad[4];                   /* zeropad: top, bottom, left, right */
	float momentum;               /* batchnorm */
	int frozen;                   /* batchnorm: inference behaviour while training too */
	int bn_batch;                 /* batchnorm: the last forward used batch statistics */
	size_t extra_count;           /* batchnorm: 2C moving statistics after kernel and bias */
	float *moving, *dmoving;      /* batchnorm: (2, C) views: moving mean, moving variance */
	/* sequence nodes (exec_seq.c) */
	int heads, causal;            /* attention */
	float rate_attn;              /* attention: dropout on the weights */
	int share;                    /* symbol, logits: 1 + the node whose table this one uses; 0: its own */
	float *attn;                  /* attention: q, k, v, ctx (4, rows, D) then p (B, H, L, L); owned */
	uint8_t *keep;                /* attention: (B, H, L, L) dropout mask; owned */
};

/* Constructors: fill *l (no allocation). `name` is copied. A shape that does
 * not work (a window larger than the padded input, units < 1, ...) →
 * DT_CONFIG naming the layer and the shapes. */
enum dt_status dt_layer_dense(struct dt_layer *l, const char *name, struct dt_shape in, int units, int relu,
			      struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_conv2d(struct dt_layer *l, const char *name, struct dt_shape in, int kh, int kw,
			       int filters, int stride, int pad, int relu, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_maxpool2(struct dt_layer *l, const char *name, struct dt_shape in,
				 struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_relu(struct dt_layer *l, const char *name, struct dt_shape in,
			     struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_dropout(struct dt_layer *l, const char *name, struct dt_shape in, float rate,
				struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_flatten(struct dt_layer *l, const char *name, struct dt_shape in,
				struct dt_err *err) DT_MUST_CHECK;

/* The graph builder's layers (layers_more.c); same contract as above. */
enum dt_status dt_layer_dense_act(struct dt_layer *l, const char *name, struct dt_shape in, int units,
				  enum dt_act act, int last_axis, struct dt_err *err) DT_MUST_CHECK;
/* conv2d with Keras's "same" padding: OH = ceil(H / stride). The kernels
 * pad the same amount before the rows and the columns, so a shape needing
 * different amounts → DT_CONFIG saying so. */
enum dt_status dt_layer_conv2d_same(struct dt_layer *l, const char *name, struct dt_shape in, int kh, int kw,
				    int filters, int stride, int relu, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_pool(struct dt_layer *l, const char *name, struct dt_shape in, int is_max, int ph, int pw,
			     int sh, int sw, int same, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_activation(struct dt_layer *l, const char *name, struct dt_shape in, enum dt_act act,
				   struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_reshape(struct dt_layer *l, const char *name, struct dt_shape in, struct dt_shape out,
				struct dt_err *err) DT_MUST_CHECK;
/* in (1, 1, T) or (1, T1, T2) ids -> out (1, T, D) or (T1, T2, D). */
enum dt_status dt_layer_embedding(struct dt_layer *l, const char *name, struct dt_shape in, int vocab, int dim,
				  struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_layernorm(struct dt_layer *l, const char *name, struct dt_shape in, float eps,
				  struct dt_err *err) DT_MUST_CHECK;
/* Keras's layers (layers_keras.c). Depthwise: same 1 gives Keras's "same"
 * (OH = ceil(H / SH), the odd padding row or column at the bottom or
 * right), 0 "valid" (OH = (H - (KH-1)*DH - 1) / SH + 1). */
enum dt_status dt_layer_depthwise(struct dt_layer *l, const char *name, struct dt_shape in, int kh, int kw, int mult,
				  int sh, int sw, int dh, int dw, int same, struct dt_err *err) DT_MUST_CHECK;
/* momentum in [0, 1), eps > 0. */
enum dt_status dt_layer_batchnorm(struct dt_layer *l, const char *name, struct dt_shape in, float momentum, float eps,
				  struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_layer_zeropad(struct dt_layer *l, const char *name, struct dt_shape in, int top, int bottom,
				int left, int right, struct dt_err *err) DT_MUST_CHECK;
void dt_layer_drop_bias(struct dt_layer *l);
/* Shape-only layers: out is given (add, concat, input) or the whole
 * parameter count (custom, in kernel_count). No checks beyond emptiness. */
void dt_layer_shape_only(struct dt_layer *l, enum dt_layer_kind kind, const char *name, struct dt_shape in,
			 struct dt_shape out);

/* Embedding: y (B, T, D) = table[ids (B, T)]; ids in [0, vocab) (the
 * caller checks). Backward overwrites the table's gradient: zero, then
 * adds dy into the rows the batch used (only they are computed). */
void dt_layer_embedding_forward(const struct dt_layer *l, const int32_t *ids, float *y, int B);
void dt_layer_embedding_backward(const struct dt_layer *l, const int32_t *ids, const float *dy, int B);

/* Fuses a following 2x2 max pooling into conv layer l (see above): its
 * output becomes (OH/2, OW/2, OC). Needs OH, OW >= 2 (else DT_CONFIG). */
enum dt_status dt_layer_fuse_pool(struct dt_layer *l, struct dt_err *err) DT_MUST_CHECK;

/* Parameters of the layer: kernel_count + bias_count + extra_count. */
size_t dt_layer_num_params(const struct dt_layer *l);
/* Points kernel/bias at params[0 .. kernel_count) and [kernel_count ..
 * num_params), and dkernel/dbias at the same places in grads. */
void dt_layer_bind(struct dt_layer *l, float *params, float *grads);
/* Allocates the backward state for up to max_batch examples. */
void dt_layer_alloc_state(struct dt_layer *l, int max_batch);
/* Frees the state; accepts NULL. Leaves the parameter views alone. */
void dt_layer_release(struct dt_layer *l);
/* Floats of scratch memory forward and backward need for `batch` examples. */
size_t dt_layer_scratch_floats(const struct dt_layer *l, int batch);
/* True for layers whose output is their input's memory (flatten). */
int dt_layer_is_view(const struct dt_layer *l);

/* y (B, out) = layer(x (B, in)). `training` turns dropout on (drawing from
 * rng); otherwise dropout is the identity and rng may be NULL. For a view
 * layer, y may equal x (then nothing happens) or be a copy target. */
void dt_layer_forward(struct dt_layer *l, const float *x, float *y, int B, int training, struct dt_rng *rng,
		      float *scratch);
/* Given x (B, in) and y (B, out) of the last training forward and
 * dy = dL/dy (B, out): writes dL/dkernel, dL/dbias and, unless dx is NULL,
 * dx = dL/dx (B, in). dy may be changed. */
void dt_layer_backward(struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B,
		       float *scratch);

#endif
