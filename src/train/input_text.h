/*
 * input_text.h — the session's input for t2t's text problems (data/text.h):
 * batches counted in tokens with t2t's length buckets (input_text.c says
 * how), each a general batch (nn/model.h's dt_model_batch) of int32 ids:
 * "inputs" (B, L) when the problem has inputs, "targets" (B, L), and the
 * targets' ids as labels; PAD (0) fills each row past its EOS.
 */
#ifndef DT_TRAIN_INPUT_TEXT_H
#define DT_TRAIN_INPUT_TEXT_H

#include <stdint.h>

#include "nn/hparams.h"
#include "train/input.h"

struct dt_text_set;
struct dt_model_batch;

#define DT_TOKEN_MAX_BUCKETS 128

/* t2t's batching_scheme for batch_size tokens (data_reader.py). */
struct dt_token_batching {
	int batch_size, max_length;
	int num_boundaries;
	int boundaries[DT_TOKEN_MAX_BUCKETS];      /* (num_boundaries), increasing */
	int batch_sizes[DT_TOKEN_MAX_BUCKETS];     /* (num_boundaries + 1) sequences per batch of each bucket */
	int window_size;                           /* every batch size divides it */
};
/* max_length 0: batch_size, as t2t does. */
void dt_token_batching_init(struct dt_token_batching *s, int batch_size, int max_length, int min_length_bucket,
			    double length_bucket_step);
/* The bucket of an example of `length` tokens. */
int dt_token_batching_bucket(const struct dt_token_batching *s, int length);

/* The input over `t` (borrowed; must outlive it) with hp's batch_size
 * (tokens), max_length, min_length_bucket and length_bucket_step, shuffled
 * per epoch from `seed`. */
struct dt_input *dt_input_text_new(const struct dt_text_set *t, const struct dt_hparams *hp, uint64_t seed);

/* The most tokens (B * L) a batch of this input holds: what the model's
 * max_batch must be. */
int dt_text_max_tokens(const struct dt_hparams *hp);

/* Points mb at (B, L) ids: inputs (when has_inputs) and targets, the
 * targets as labels too (nn/transformer.h's input order). */
void dt_text_batch_set(struct dt_model_batch *mb, int has_inputs, int B, int L, const int32_t *inputs,
		       const int32_t *targets);

#endif
