/*
 * decode.h — t2t-decoder's search over a trained transformer (nn/
 * transformer.h) for a text problem (data/text.h): greedy, and beam search
 * with t2t's length penalty ((5 + length) / 6)^alpha.
 *
 * Each step runs the whole decoder again over the prefix (no cached keys
 * and values): a step of a prefix of t tokens costs a forward pass of
 * max(inputs, t + 1) positions per beam. The model must hold beam_size
 * sequences of max_length positions (max_batch >= beam_size * positions).
 */
#ifndef DT_TRAIN_DECODE_H
#define DT_TRAIN_DECODE_H

#include <stdint.h>

#include "base/err.h"
#include "nn/model.h"

struct dt_text_set;

struct dt_decode_config {
	int beam_size;        /* 1: greedy */
	double alpha;         /* t2t's length penalty exponent (beam only) */
	int extra_length;     /* t2t's decode_length: outputs up to inputs + this (50) */
	int positions;        /* the model's positions: inputs and outputs stay within */
};

/* Decodes `in` (n_in ids ending in EOS, or none for a model without
 * inputs) into out (at most cap ids, EOS not included); *n_out gets the
 * count. Failures are the model's (dt_model_evaluate). */
enum dt_status dt_decode(struct dt_model *m, const struct dt_text_set *t, const struct dt_decode_config *c,
			 const int32_t *in, int n_in, int32_t *out, int cap, int *n_out,
			 struct dt_err *err) DT_MUST_CHECK;

#endif
