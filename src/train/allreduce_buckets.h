/*
 * allreduce_buckets.h — how multi-worker mirrored training groups the flat
 * gradient buffer into all-reduce buckets (train/allreduce_role.h,
 * docs/DISTRIBUTED.md "Buckets").
 *
 * Buckets run from the end of the flat buffer backwards, in layer order
 * reversed (the last layers' gradients are the first a backward pass
 * finishes), and every rank computes the same plan from the same model.
 * Following PyTorch's DDP, a bucket holds whole layers and closes once it
 * holds at least its cap: 1 MiB for the first, bucket_mb after; a layer
 * larger than bucket_mb is cut into bucket_mb pieces (they become final
 * together, but the optimizer on one still runs while the next is reduced).
 *
 * The first bucket also closes before the layer that would take its
 * layers' share of the backward pass's cost past one half, provided it
 * already holds a quarter of the bytes: at least half of the backward
 * pass then remains to hide an all-reduce worth starting early, and a
 * model whose gradients fit in 1 MiB can still get two buckets (lenet: the
 * dense layers, 96% of the bytes, then the convolutions). mlp keeps one:
 * its last two layers hold 14% of the bytes, and splitting them off
 * measured slower (one more collective, and on loopback the ring's CPU
 * work competing with the backward pass). The cost of a layer's backward
 * pass is estimated from its shapes: kernel and bias elements, times the
 * output pixels for a convolution, times 2 unless it is the first layer
 * that computes (no input gradient).
 *
 * The buckets, in order, cover [0, num_params) exactly once: bucket k+1
 * ends where bucket k begins, the last begins at 0.
 */
#ifndef DT_TRAIN_ALLREDUCE_BUCKETS_H
#define DT_TRAIN_ALLREDUCE_BUCKETS_H

#include <stddef.h>

#include "nn/model.h"

struct dt_allreduce_bucket {
	size_t offset, count;        /* a range of the flat gradient buffer */
	int first_layer, last_layer; /* the layers whose gradients it holds (for the log) */
};

/* The plan for model m with buckets of bucket_mb MiB (<= 0: 25) into *out
 * (malloc'd, the caller frees); returns the number of buckets (>= 1). */
int dt_allreduce_plan_buckets(const struct dt_model *m, double bucket_mb, struct dt_allreduce_bucket **out);

/* "2 buckets, from the end: 231 KiB (dense_3..dense_1), 10 KiB (conv_2..conv_1)"
 * into buf (truncated to cap). */
void dt_allreduce_describe_buckets(const struct dt_model *m, const struct dt_allreduce_bucket *b, int n, char *buf,
				   size_t cap);

#endif
