/*
 * kernels.h — the compute kernels under dtrain's layers, each with its naive twin.
 *
 * Every optimized kernel here has a `_naive` twin written for obviousness,
 * not speed; the unit tests (tests/unit/test_tensor*.c) run both on odd shapes
 * and compare. The layers (nn/layers.h) call only the fast versions.
 *
 * Conventions:
 *   - Row-major float32, images NHWC: x is (B, H, W, C), channels innermost.
 *   - A conv kernel is (KH, KW, C, OC), i.e. a (KH*KW*C, OC) matrix whose
 *     rows match the columns of im2col's output.
 *   - Letters in shape comments: B batch, H/W input height/width, C input
 *     channels, OH/OW output height/width, OC output channels, K = KH*KW*C,
 *     R rows, N columns (classes or units).
 *   - Kernels never allocate, never fail (shapes are checked with DT_ASSERT),
 *     and are deterministic: the same inputs give bit-identical outputs.
 *   - Pointers marked restrict must not overlap.
 */
#ifndef DT_TENSOR_KERNELS_H
#define DT_TENSOR_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"

/* ---- matrix multiply ---------------------------------------------------- */

/* C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C; row-major with
 * row strides lda/ldb/ldc; op(X) is X or X^T. Backed by OpenBLAS (dt_sgemm).
 * beta == 0 overwrites C without reading it. */
void dt_matmul(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
	       const float *B, int ldb, float beta, float *C, int ldc);
/* The naive twin: triple loop, sums in double. */
void dt_matmul_naive(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
		     const float *B, int ldb, float beta, float *C, int ldc);

/* ---- bias and ReLU ------------------------------------------------------ */

/* y (R, N) += bias (N), then y = max(y, 0) if relu; one pass. */
void dt_bias_act_forward(float *y, const float *bias, int R, int N, int relu);
/* Backward of dt_bias_act_forward, one pass: if relu, dy (R, N) *= (y > 0)
 * in place (y is the forward output); then dbias (N) += column sums of dy
 * (accumulates, so chunks of rows can be summed; dbias may be NULL). */
void dt_bias_act_backward(float *dy, const float *y, float *dbias, int R, int N, int relu);
/* y (n) = max(x, 0); x and y may be the same array. */
void dt_relu_forward(const float *x, float *y, size_t n);
/* dx (n) = dy * (y > 0) with y the forward output; dx may alias dy. */
void dt_relu_backward(const float *y, const float *dy, float *dx, size_t n);

/* ---- im2col / col2im (convolution as one matrix multiply) -------------- */

/* Geometry of a 2-D convolution over NHWC images. */
struct dt_conv_geom {
	int H, W, C;      /* input image (H, W, C) */
	int KH, KW;       /* window */
	int stride, pad;  /* same in both directions; pad is zeros on every side */
	int OH, OW;       /* output: (H + 2*pad - KH) / stride + 1, same for W */
};

/* Fills g; returns 0, or -1 if the window does not fit (OH or OW < 1) or an
 * argument is out of range. */
int dt_conv_geom_init(struct dt_conv_geom *g, int H, int W, int C, int KH, int KW, int stride, int pad);
/* K = KH*KW*C, the length of one im2col row. */
static inline int dt_conv_k(const struct dt_conv_geom *g)
{
	return g->KH * g->KW * g->C;
}

/* cols (n*OH*OW, K): row (b, oh, ow) holds the window of x (n, H, W, C)
 * under output pixel (oh, ow), ordered (kh, kw, c); padding reads as 0. */
void dt_im2col(const struct dt_conv_geom *g, const float *x, int n, float *cols);
void dt_im2col_naive(const struct dt_conv_geom *g, const float *x, int n, float *cols);
/* The same matrix transposed: cols_t (K, ld), column r = row r of
 * dt_im2col's output for r < n*OH*OW (ld >= n*OH*OW). Fast for C == 1 and
 * stride 1, where each piece is a contiguous run of an input row; conv
 * layers use it for one-channel inputs. */
void dt_im2col_t(const struct dt_conv_geom *g, const float *x, int n, float *cols_t, int ld);
void dt_im2col_t_naive(const struct dt_conv_geom *g, const float *x, int n, float *cols_t, int ld);
/* The adjoint of im2col: dx (n, H, W, C) = sum of each cols (n*OH*OW, K)
 * entry into the input pixel it was read from. Overwrites dx. */
void dt_col2im(const struct dt_conv_geom *g, const float *cols, int n, float *dx);
void dt_col2im_naive(const struct dt_conv_geom *g, const float *cols, int n, float *dx);

/* ---- 2x2 max pooling, stride 2 ------------------------------------------ */

/* y (B, H/2, W/2, C) = max over each 2x2 window of x (B, H, W, C); odd H or
 * W drop the last row/column (TensorFlow's "valid" padding). argmax
 * (B, H/2, W/2, C) gets the winner's position in its window, 0..3 as
 * (dh*2 + dw); ties go to the first. */
void dt_maxpool2_forward(const float *x, float *y, int32_t *argmax, int B, int H, int W, int C);
void dt_maxpool2_forward_naive(const float *x, float *y, int32_t *argmax, int B, int H, int W, int C);
/* dx (B, H, W, C) = dy (B, H/2, W/2, C) routed to each window's winner,
 * 0 elsewhere (including the dropped row/column). Overwrites dx. */
void dt_maxpool2_backward(const float *dy, const int32_t *argmax, float *dx, int B, int H, int W, int C);
void dt_maxpool2_backward_naive(const float *dy, const int32_t *argmax, float *dx, int B, int H, int W, int C);

/* ---- softmax cross-entropy ---------------------------------------------- */

/* Mean over the batch of -log softmax(logits)[label], logits (B, N),
 * labels (B) each < N. If dlogits (B, N) is not NULL it gets the gradient of
 * the mean loss, (softmax - onehot) / B, in the same pass. *correct (may be
 * NULL) gets the number of rows whose arg-max (first on ties) is the label. */
float dt_softmax_xent(const float *logits, const uint8_t *labels, int B, int N, float *dlogits, int *correct);
/* The naive twin: softmax in double, then the loss and gradient. */
float dt_softmax_xent_naive(const float *logits, const uint8_t *labels, int B, int N, float *dlogits,
			    int *correct);

/* ---- dropout (inverted) ------------------------------------------------- */

/* mask (n) = 1/(1-rate) with probability 1-rate, else 0, drawn in order
 * from a dt_rng_bulk seeded by one draw of rng (base/rng.h: a 32-bit word
 * per element, in parallel lanes); y (n) = x * mask. 0 <= rate < 1. */
void dt_dropout_forward(const float *x, float *y, float *mask, size_t n, float rate, struct dt_rng *rng);
/* dx (n) = dy * mask; dx may alias dy. */
void dt_dropout_backward(const float *mask, const float *dy, float *dx, size_t n);

/* ---- activations --------------------------------------------------------- */

/* Activation functions, as Keras names them. GELU is the tanh approximation
 * (Keras's gelu(approximate=True)); softmax runs over the last axis. */
/* RELU6 is min(max(x, 0), 6) (Keras's ReLU(max_value=6)); SWISH is
 * x * sigmoid(x) (Keras's swish, also silu). DT_ACT_LAST marks the end. */
enum dt_act { DT_ACT_LINEAR, DT_ACT_RELU, DT_ACT_SIGMOID, DT_ACT_TANH, DT_ACT_SOFTMAX, DT_ACT_GELU, DT_ACT_RELU6,
	      DT_ACT_SWISH };
#define DT_ACT_LAST DT_ACT_SWISH

/* y (R, N) = act(x (R, N)); x and y may be the same array. */
void dt_act_forward(enum dt_act act, const float *x, float *y, int R, int N);
/* dx (R, N) = dL/dx given dy = dL/dy, the forward input x and output y
 * (GELU and swish read x, the others y; x may be NULL for them). dx may alias dy. */
void dt_act_backward(enum dt_act act, const float *x, const float *y, const float *dy, float *dx, int R, int N);

/* ---- layer normalization (over the last axis) ---------------------------- */

/* y (R, D) = (x - mean) / sqrt(var + eps) * gamma (D) + beta (D) per row;
 * mean (R) and rstd (R) keep each row's mean and 1/sqrt(var + eps). */
void dt_layernorm_forward(const float *x, const float *gamma, const float *beta, float *y, float *mean,
			  float *rstd, int R, int D, float eps);
void dt_layernorm_forward_naive(const float *x, const float *gamma, const float *beta, float *y, float *mean,
				float *rstd, int R, int D, float eps);
/* dx (R, D) (overwritten, may be NULL), dgamma (D) and dbeta (D)
 * (accumulated) from dy (R, D) and the forward's x, mean, rstd. */
void dt_layernorm_backward(const float *dy, const float *x, const float *mean, const float *rstd,
			   const float *gamma, float *dx, float *dgamma, float *dbeta, int R, int D);
void dt_layernorm_backward_naive(const float *dy, const float *x, const float *mean, const float *rstd,
				 const float *gamma, float *dx, float *dgamma, float *dbeta, int R, int D);

/* ---- embedding ------------------------------------------------------------ */

/* y (n, D) = table[ids[i]] for each of the n ids (each in [0, V), checked
 * by the caller). */
void dt_embedding_forward(const int32_t *ids, const float *table, float *y, size_t n, int D);
/* dtable[ids[i]] += dy[i] (D) for each i: only the rows used are touched. */
void dt_embedding_backward(const int32_t *ids, const float *dy, float *dtable, size_t n, int D);

/* ---- general 2-D pooling -------------------------------------------------- */

/* Max or average pooling with any window, strides and Keras's padding:
 * "valid" windows lie inside the image, OH = (H - PH) / SH + 1; "same" gives
 * OH = ceil(H / SH) with the padding split as TensorFlow splits it (the
 * extra row or column at the bottom or right). Padding never wins a max and
 * never counts in an average (Keras's count of valid elements). */
struct dt_pool_geom {
	int H, W, C;
	int PH, PW;        /* window */
	int SH, SW;        /* strides */
	int top, left;     /* padding before the first row and column */
	int OH, OW;
};
/* Fills g; 0, or -1 if an argument is out of range or the window does not fit. */
int dt_pool_geom_init(struct dt_pool_geom *g, int H, int W, int C, int PH, int PW, int SH, int SW, int same);
/* y (B, OH, OW, C); for max, argmax (B, OH, OW, C) gets the winner's pixel
 * index ih*W + iw in its image (argmax may be NULL for average). */
void dt_pool_forward(const struct dt_pool_geom *g, int is_max, const float *x, float *y, int32_t *argmax, int B);
/* dx (B, H, W, C), overwritten, from dy (B, OH, OW, C). */
void dt_pool_backward(const struct dt_pool_geom *g, int is_max, const float *dy, const int32_t *argmax, float *dx,
		      int B);

/* ---- depthwise convolution (kernels_dw.c) --------------------------------- */

/* Each input channel c convolved with its own M filters: output channel
 * c*M + m (Keras's DepthwiseConv2D, depth_multiplier M). Explicit padding
 * (PT rows above, PL columns left; whatever lies beyond the input on the
 * other sides reads as zero), strides and dilation per axis. The kernel is
 * (KH, KW, C, M), so row (kh, kw) of it is contiguous over the C*M output
 * channels, as the output pixel is: the fast kernels loop over output
 * pixels and window taps, vectorized over channels. */
struct dt_dw_geom {
	int H, W, C, M;   /* input (H, W, C); output channels C*M */
	int KH, KW;       /* window */
	int SH, SW;       /* strides */
	int DH, DW;       /* dilation */
	int PT, PL;       /* padding before the first row and column */
	int OH, OW;       /* output size, given by the caller */
};
/* y (B, OH, OW, C*M) = depthwise(x (B, H, W, C)) [+ bias (C*M), may be NULL]. */
void dt_depthwise_forward(const struct dt_dw_geom *g, const float *x, const float *k, const float *bias, float *y,
			  int B);
void dt_depthwise_forward_naive(const struct dt_dw_geom *g, const float *x, const float *k, const float *bias,
				float *y, int B);
/* From dy (B, OH, OW, C*M): dk (KH, KW, C, M) and dbias (C*M, may be NULL)
 * overwritten, dx (B, H, W, C) overwritten unless NULL. */
void dt_depthwise_backward(const struct dt_dw_geom *g, const float *x, const float *k, const float *dy, float *dx,
			   float *dk, float *dbias, int B);
void dt_depthwise_backward_naive(const struct dt_dw_geom *g, const float *x, const float *k, const float *dy,
				 float *dx, float *dk, float *dbias, int B);

/* ---- batch normalization (over the last axis, kernels_dw.c) ---------------- */

/* Per-channel mean (C) and biased variance var (C) of x (R, C) over its R rows. */
void dt_batchnorm_moments(const float *x, float *mean, float *var, int R, int C);
void dt_batchnorm_moments_naive(const float *x, float *mean, float *var, int R, int C);
/* y (R, C) = act((x - mean) * rstd * gamma + beta), rstd (C) = 1/sqrt(var +
 * eps) as the caller computed it (batch or moving statistics); act is
 * DT_ACT_LINEAR, DT_ACT_RELU or DT_ACT_RELU6 (the activation that follows
 * a batch norm, fused into its one pass). x and y may alias. */
void dt_batchnorm_apply(const float *x, const float *mean, const float *rstd, const float *gamma, const float *beta,
			float *y, int R, int C, enum dt_act act);
void dt_batchnorm_apply_naive(const float *x, const float *mean, const float *rstd, const float *gamma,
			      const float *beta, float *y, int R, int C, enum dt_act act);
/* Backward of dt_batchnorm_apply with its activation: dy (R, C) is masked
 * where the forward clamped (pre-activation <= 0, or >= 6 for ReLU6), the
 * pre-activation recomputed from x, mean, rstd, gamma and beta in the
 * forward's float arithmetic (so the mask is the forward's, bit for bit,
 * and the output need not be read). batch_stats 1: mean and rstd came
 * from x itself (training), so dx carries their dependence on x; 0: they
 * are constants (inference, frozen). dgamma, dbeta (C) overwritten; dx
 * (R, C) overwritten unless NULL; dy is not modified. */
void dt_batchnorm_backward(const float *dy, const float *x, const float *mean, const float *rstd, const float *gamma,
			   const float *beta, float *dx, float *dgamma, float *dbeta, int R, int C, int batch_stats,
			   enum dt_act act);
void dt_batchnorm_backward_naive(const float *dy, const float *x, const float *mean, const float *rstd,
				 const float *gamma, const float *beta, float *dx, float *dgamma, float *dbeta, int R,
				 int C, int batch_stats, enum dt_act act);

/* ---- more losses ----------------------------------------------------------- */

/* dt_softmax_xent with int32 labels over R rows (every label in [0, N),
 * checked by the caller); the same arithmetic, bit for bit. */
float dt_softmax_xent_i32(const float *logits, const int32_t *labels, int R, int N, float *dlogits, int *correct);
/* Mean over n elements of the sigmoid cross-entropy of logits z against
 * targets t in [0, 1], max(z, 0) - z t + log(1 + exp(-|z|)); dz (may be
 * NULL) = (sigmoid(z) - t) / n; *correct (may be NULL) counts elements with
 * (z > 0) == (t > 0.5). */
float dt_sigmoid_xent(const float *logits, const float *targets, size_t n, float *dlogits, int *correct);
/* Mean over n elements of (p - t)^2; dp (may be NULL) = 2 (p - t) / n. */
float dt_mse(const float *pred, const float *targets, size_t n, float *dpred);

#endif
