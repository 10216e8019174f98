/*
 * transformer_decode.h — t2t's fast_decode for a trained transformer
 * (nn/transformer.h): the encoder runs once, the decoder one position at
 * a time with cached keys and values, and logits only for the new position.
 *
 * The decoder reads the model's variables by their names (nn/transformer.c:
 * "enc.emb/weights", "dec0.self.attn/q/kernel", ...) and the heads from
 * its attention layers, so it needs no configuration of its own: every
 * size is the model's. Inference only: no dropout, the same timing signal,
 * pre-norm layout and kernels (nn/seq.h, the OpenBLAS GEMMs) as the graph,
 * so its logits are the graph's last-position logits up to the order of
 * float sums.
 *
 * State, for up to `beams` hypotheses of up to `positions` positions:
 *   - the encoder's memory projected into each decoder layer's
 *     encoder-decoder keys and values (inputs, D) — computed by start,
 *     shared by every beam;
 *   - per decoder layer and beam, the self-attention keys and values of
 *     the positions decoded so far (beams, positions, D).
 * A step appends one position to every live beam; reorder makes beam k the
 * continuation of beam parent[k] (beam search's choice) by copying caches.
 *
 * Ownership: the decoder borrows the model (its parameters are read at
 * every call, so a checkpoint restored after new is the one used; the model
 * must outlive the decoder) and owns its caches. One thread at a time.
 */
#ifndef DT_NN_TRANSFORMER_DECODE_H
#define DT_NN_TRANSFORMER_DECODE_H

#include <stdint.h>

#include "base/err.h"
#include "nn/model.h"

struct dt_transformer_decoder;

/* A decoder over m (a dt_transformer_graph model) for up to `beams`
 * hypotheses of `positions` positions (1 .. 65536; the timing signal is
 * no variable, so more than the model's training length work as in the
 * graph). A model that is not such a transformer (a variable missing or
 * of another shape) → DT_CONFIG naming the variable. */
enum dt_status dt_transformer_decoder_new(struct dt_model *m, int beams, int positions,
					  struct dt_transformer_decoder **out, struct dt_err *err) DT_MUST_CHECK;
void dt_transformer_decoder_free(struct dt_transformer_decoder *d);

/* The target vocabulary: the width of each logits row. */
int dt_transformer_decoder_vocab(const struct dt_transformer_decoder *d);

/* Begins a decode: runs the encoder over `in` (n_in ids, 1 .. positions,
 * none of them padding; n_in 0 and in NULL for a model without inputs)
 * and empties every beam's cache. Wrong n_in or an id out of the input
 * vocabulary → DT_USAGE. */
enum dt_status dt_transformer_decoder_start(struct dt_transformer_decoder *d, const int32_t *in, int n_in,
					    struct dt_err *err) DT_MUST_CHECK;

/* Beam k (k < K) continues beam parent[k] (each < the K of the last step):
 * the caches of the positions decoded so far are copied. */
void dt_transformer_decoder_reorder(struct dt_transformer_decoder *d, const int *parent, int K);

/* Decodes the next position (0 after start, then one more per call, up to
 * positions) for beams 0 .. K - 1 (1 .. beams): ids[k] is beam k's decoder
 * input there, the graph's shift_right of the targets (0 at position 0,
 * then the token chosen at the position before). Returns the logits (K, V)
 * of that position, owned by d until the next call; an id out of the
 * target vocabulary or a position past the end → DT_USAGE. */
enum dt_status dt_transformer_decoder_step(struct dt_transformer_decoder *d, const int32_t *ids, int K,
					   const float **logits, struct dt_err *err) DT_MUST_CHECK;

#endif
