/*
 * layers_more.h — module-shared: the forward and backward of the graph
 * builder's single-input layers (pool, activation, reshape, layernorm),
 * which dt_layer_forward/backward dispatch to (nn/layers.h documents them).
 */
#ifndef DT_NN_LAYERS_MORE_H
#define DT_NN_LAYERS_MORE_H

#include <stddef.h>

#include "nn/layers.h"

/* n = B * in-elements; same contract as dt_layer_forward/backward. */
void dt__layer_forward_more(struct dt_layer *l, const float *x, float *y, int B, size_t n, int training);
void dt__layer_backward_more(struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B,
			     size_t n);

/* The same for Keras's layers (layers_keras.c): depthwise, batchnorm, zeropad. */
void dt__layer_forward_keras(struct dt_layer *l, const float *x, float *y, int B, int training);
void dt__layer_backward_keras(struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B);

/* Pointwise convolutions (1x1, stride 1, no padding, no fused pool:
 * MobileNetV2's expand and project layers) are one matrix multiply over
 * every pixel of the batch, reading x and writing dx in place, with no
 * im2col copy nor scratch (layers_keras.c); conv2d's forward and backward
 * hand them over. */
int dt__layer_is_pointwise(const struct dt_layer *l);
void dt__pointwise_forward(const struct dt_layer *l, const float *x, float *y, int B);
void dt__pointwise_backward(const struct dt_layer *l, const float *x, const float *y, float *dy, float *dx, int B);

#endif
