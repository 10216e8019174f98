/*
 * decode.h — t2t-decoder's search over a trained transformer (nn/
 * transformer.h) for a text problem (data/text.h): greedy, and beam search
 * with t2t's length penalty ((5 + length) / 6)^alpha.
 *
 * Each step scores the next position of every live beam one of two ways,
 * under one search:
 *   - fast (t2t's fast_decode, nn/transformer_decode.h): the encoder once
 *     per input, then one position per step with each decoder layer's keys
 *     and values cached per beam (reordered as beams are chosen) and logits
 *     for the new position only: a step costs one position per beam;
 *   - the graph (fast NULL): the whole model again over the prefix, a
 *     forward pass of max(inputs, t + 1) positions per beam at step t. It
 *     is the reference the fast one is checked and measured against
 *     (`dtrain decode --decode_hparams=cache=0`); its model must hold
 *     beam_size sequences of max_length positions (max_batch >= beam_size
 *     * positions).
 * Both give the same logits up to the order of float sums, so the same
 * decodes but for near ties.
 */
#ifndef DT_TRAIN_DECODE_H
#define DT_TRAIN_DECODE_H

#include <stdint.h>

#include "base/err.h"
#include "nn/model.h"
#include "nn/transformer_decode.h"

struct dt_text_set;

struct dt_decode_config {
	int beam_size;        /* 1: greedy */
	double alpha;         /* t2t's length penalty exponent (beam only) */
	int extra_length;     /* t2t's decode_length: outputs up to inputs + this (50) */
	int positions;        /* the model's positions: inputs and outputs stay within */
	int cache;            /* 1: the fast decoder (the default); 0: the graph (the reference) */
};

/* Decodes `in` (n_in ids ending in EOS) into out (at most cap ids, EOS
 * not included); *n_out gets the count. For a problem without inputs (a
 * language model) `in` is a prompt (a final EOS dropped; n_in 0: none)
 * that begins every beam, and out gets what follows it (t2t's partial
 * targets). fast: a decoder over m for at least beam_size beams of positions
 * positions (dt_transformer_decoder_new), or NULL for the graph. Failures
 * are the model's (dt_model_evaluate) or the decoder's (an id out of
 * range: DT_USAGE). */
enum dt_status dt_decode(struct dt_model *m, struct dt_transformer_decoder *fast, const struct dt_text_set *t,
			 const struct dt_decode_config *c, const int32_t *in, int n_in, int32_t *out, int cap,
			 int *n_out, struct dt_err *err) DT_MUST_CHECK;

#endif
