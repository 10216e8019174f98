/*
 * kernels_direct.h — direct (no im2col) convolution of one-channel images,
 * fused with bias, ReLU and 2x2 max pooling, forward and backward.
 *
 * Why: the first layer of LeNet (1 -> 6 channels, 5x5) and of dtrain's cnn
 * (1 -> 32, 3x3) on 28x28 images. Through im2col every input pixel is
 * written KH*KW times for only OC multiply-adds each, and the conv output
 * makes three more passes over memory (bias + ReLU, pooling, and in
 * backward pool routing + ReLU mask + bias sums). Here each image is split
 * once into its even and odd padded columns, so that the conv values under
 * the left and the right column of every 2x2 pooling window are two
 * contiguous vectors over the pooled output columns; the kernel
 * accumulates the four values of each window (two rows x even/odd) in
 * registers, adds the bias, applies ReLU, pools and writes only the pooled
 * output and its argmax. Backward routes the pooled gradient to the
 * window's winner in the same even/odd layout and correlates it with the
 * input for the kernel gradient, again vectorized over pooled columns.
 *
 * Same conventions as kernels.h: NHWC, kernel (KH, KW, 1, OC), the argmax
 * of dt_maxpool2_forward (winner 0..3 as dh*2 + dw, ties to the first),
 * no allocation (the caller passes scratch), deterministic. Results equal
 * conv + dt_bias_act_forward + dt_maxpool2_forward up to float
 * reassociation (sums in another order); the naive twins spell out that
 * composition and the unit tests compare the two.
 *
 * Vector width and register blocking are chosen at compile time (the build
 * uses -march=native): AVX-512 keeps more output channels in registers than
 * AVX2; other targets run the same portable C with GCC vector extensions.
 * Every multiply-add is fused (one rounding) on every target, in hardware
 * or through fmaf, and each output's sum runs in the same order whatever
 * the blocking, so the bits do not depend on the build (the sanitizer
 * build, without -march=native, gives the same gradients).
 */
#ifndef DT_TENSOR_KERNELS_DIRECT_H
#define DT_TENSOR_KERNELS_DIRECT_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/kernels.h"

/* 1 when the direct kernels handle geometry g with 2x2 pooling: one input
 * channel, stride 1, a pooled output at most 16 columns wide (OW / 2 <= 16),
 * KW <= 16 and at least one pooled row and column. */
int dt_conv1_pool_supported(const struct dt_conv_geom *g);

/* Floats of scratch the forward and backward kernels need for OC output
 * channels (independent of the batch size). */
size_t dt_conv1_pool_scratch_floats(const struct dt_conv_geom *g, int OC);

/* y (B, OH/2, OW/2, OC) = maxpool2(act(conv(x (B, H, W, 1), k) + bias)),
 * act = ReLU if relu else identity; bias (OC) may be NULL; argmax as
 * dt_maxpool2_forward's. scratch: dt_conv1_pool_scratch_floats floats. */
void dt_conv1_pool_forward(const struct dt_conv_geom *g, int OC, const float *x, const float *k, const float *bias,
			   int relu, float *y, int32_t *argmax, int B, float *scratch);
void dt_conv1_pool_forward_naive(const struct dt_conv_geom *g, int OC, const float *x, const float *k,
				 const float *bias, int relu, float *y, int32_t *argmax, int B);

/* The parameter gradients of dt_conv1_pool_forward from dy (B, OH/2, OW/2,
 * OC) and the forward's x, pooled output y (for the ReLU mask) and argmax:
 * dk (KH, KW, 1, OC) and dbias (OC, may be NULL) are overwritten. dy is
 * not modified. (The input gradient is not computed: this is a first
 * layer's kernel; layers that need dx take the im2col path.) */
void dt_conv1_pool_backward(const struct dt_conv_geom *g, int OC, const float *x, const float *y, const float *dy,
			    const int32_t *argmax, int relu, float *dk, float *dbias, int B, float *scratch);
void dt_conv1_pool_backward_naive(const struct dt_conv_geom *g, int OC, const float *x, const float *y,
				  const float *dy, const int32_t *argmax, int relu, float *dk, float *dbias, int B);

/* ---- the input gradient of a conv with fused 2x2 max pooling ------------- */

/* Any geometry (channels, stride, padding). Only one conv output in four
 * gets a gradient through 2x2 max pooling (the window's winner), so
 * instead of dz (B*OH*OW, OC) kernel^T as one dense GEMM followed by
 * col2im, each pooled gradient is added, scaled, straight into the input
 * window under its winner: a quarter of the multiply-adds and no (rows, K)
 * buffer. dx (B, H, W, C) = the input gradient from dy (B, OH/2, OW/2, OC),
 * the pooled gradient already through the ReLU mask, and argmax (as
 * dt_maxpool2_forward's); kt is the kernel transposed and padded by
 * dt_conv_kernel_transpose. Overwrites dx. The sums run in another order
 * than the GEMM's. */
void dt_conv_pool_input_grad(const struct dt_conv_geom *g, int OC, const float *kt, const float *dy,
			     const int32_t *argmax, float *dx, int B);
/* The naive twin: routes dy to a dense dz, then every dz entry times every
 * kernel tap into the input pixel it read. */
void dt_conv_pool_input_grad_naive(const struct dt_conv_geom *g, int OC, const float *kt, const float *dy,
				   const int32_t *argmax, float *dx, int B);
/* kt (OC, KH, SEGP) = k (KH, KW*C, OC) transposed, each (o, kh) row of
 * KW*C taps followed by zeros up to SEGP (KW*C rounded up to 16), so the
 * input gradient adds whole vectors: the zeros add exactly 0 to the
 * pixels after the window. dt_conv_kt_floats is its size. */
size_t dt_conv_kt_floats(const struct dt_conv_geom *g, int OC);
void dt_conv_kernel_transpose(const struct dt_conv_geom *g, const float *k, int OC, float *kt);

#endif
