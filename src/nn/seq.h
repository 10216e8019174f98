/*
 * seq.h — the sequence kernels of t2t's transformer, each with its naive
 * twin (seq_naive.c) for the tests: multi-head dot-product attention with
 * padding and causal masks, the sinusoidal timing signal, t2t's symbol
 * modality (embedding scaled by sqrt(D), padding rows zero; logits through
 * the same or another table) and the label-smoothed cross-entropy that
 * skips padding, with t2t's metrics.
 *
 * A batch of sequences is (B, L) token ids, id 0 the padding (t2t's PAD);
 * activations are (B, L, D) row-major, R = B * L rows. The graph builder
 * (nn/graph.h) runs them on per-token nodes; these functions see (B, L).
 *
 * Attention (t2t's multihead_attention with dot_product attention):
 *   q = xq Wq * (D/H)^-0.5, k = xkv Wk, v = xkv Wv       (R, D) each
 *   per batch b and head h (columns h*D/H .. (h+1)*D/H):
 *     s = q_bh k_bh^T + bias                              (L, L)
 *     bias: -1e9 where the key is padding (kv_ids != NULL and id 0) or,
 *     causal, where the key comes after the query
 *     p = softmax(s) (kept for backward); pd = dropout(p) (rate, mask kept)
 *     ctx_bh = pd v_bh
 *   y = ctx Wo                                            (R, D)
 * Wq, Wk, Wv, Wo are (D, D) without biases, as t2t's. The products run as
 * OpenBLAS GEMMs (dt_matmul): 4 of (R, D, D) and per (b, h) two of
 * (L, L, D/H); no loop of the kernels here multiplies matrices itself.
 *
 * Ownership: the caller owns every buffer; struct dt_attn_buf names the
 * ones forward fills and backward reads.
 */
#ifndef DT_NN_SEQ_H
#define DT_NN_SEQ_H

#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"

/* t2t's attention bias for masked positions. */
#define DT_ATTN_NEG (-1e9f)

struct dt_attn_dims {
	int B, L, D, H;     /* sequences, positions, model width, heads (H divides D) */
	int causal;         /* mask keys after the query */
};

/* What forward keeps for backward. */
struct dt_attn_buf {
	float *q, *k, *v, *ctx;  /* (R, D) each; q already scaled */
	float *p;                /* (B, H, L, L) softmax probabilities before dropout */
	uint8_t *keep;           /* (B, H, L, L) dropout mask, read only when rate > 0 */
};

/* Floats of scratch dt_attention_forward/backward need. */
size_t dt_attention_scratch_floats(const struct dt_attn_dims *d);

/* y (R, D). w: Wq, Wk, Wv, Wo one after the other (4, D, D). kv_ids (B, L)
 * or NULL. rate > 0: dropout on p drawn from rng (training; a dt_rng_bulk
 * seeded by one draw, base/rng.h). */
void dt_attention_forward(const struct dt_attn_dims *d, const float *xq, const float *xkv, const int32_t *kv_ids,
			  const float *w, float *y, struct dt_attn_buf *buf, float rate, struct dt_rng *rng,
			  float *scratch);
/* Given dy (R, D): dxq, dxkv (R, D) written (distinct buffers), dw (4, D, D)
 * added to. xq, xkv, w, buf, rate as in the forward. */
void dt_attention_backward(const struct dt_attn_dims *d, const float *xq, const float *xkv, const float *w,
			   const struct dt_attn_buf *buf, float rate, const float *dy, float *dxq, float *dxkv, float *dw,
			   float *scratch);
/* Naive twins (loops, sums in double); the forward reads buf->keep when
 * rate > 0 instead of drawing it, and fills buf like the fast one. */
void dt_attention_forward_naive(const struct dt_attn_dims *d, const float *xq, const float *xkv,
				const int32_t *kv_ids, const float *w, float *y, struct dt_attn_buf *buf, float rate);
void dt_attention_backward_naive(const struct dt_attn_dims *d, const float *xq, const float *xkv, const float *w,
				 const struct dt_attn_buf *buf, float rate, const float *dy, float *dxq, float *dxkv,
				 float *dw);

/* Each row of s (R, N) into its softmax, in place (the attention's, and
 * the fast decoder's for one query: nn/transformer_decode.h). */
void dt_softmax_rows(float *s, int R, int N);

/* t2t's add_timing_signal_1d: y = x + [sin(pos * inv_t) | cos(pos * inv_t)]
 * over the channels, inv_t_i = exp(-i * log(1e4) / max(D/2 - 1, 1)), an odd
 * last channel 0. x, y (B, L, D); y may be x. */
void dt_timing_signal_add(const float *x, float *y, int B, int L, int D);
float dt_timing_signal_value(int pos, int channel, int D);

/* t2t's symbol modality bottom: y (R, D) = table[ids] * scale, rows of id 0
 * zero. Backward adds dy * scale into the rows of the ids (not id 0). */
void dt_symbol_forward(const float *table, const int32_t *ids, size_t R, int D, float scale, float *y);
void dt_symbol_backward(const int32_t *ids, size_t R, int D, float scale, const float *dy, float *dtable);
/* Its top: logits (R, V) = x (R, D) table^T; backward: dx (R, D) written,
 * dtable (V, D) added to. */
void dt_symbol_logits_forward(const float *x, const float *table, size_t R, int D, int V, float *logits);
void dt_symbol_logits_backward(const float *x, const float *table, const float *dlogits, size_t R, int D, int V,
			       float *dx, float *dtable);

/* shift_right on ids (B, L): y[b, 0] = 0, y[b, t] = x[b, t - 1]. */
void dt_shift_right_ids(const int32_t *x, int32_t *y, int B, int L);

/* t2t's padded metrics for one batch (sums, not means). */
struct dt_seq_metrics {
	double loss_num;         /* sum over non-pad tokens of the smoothed cross-entropy (minus its floor) */
	double nll_num;          /* same without smoothing: -neg_log_perplexity * tokens */
	int64_t tokens, tokens_correct;
	int64_t seqs, seqs_correct; /* a sequence is correct when every non-pad token is */
};

/* Label-smoothed softmax cross-entropy over logits (B, L, V) and labels
 * (B, L), padding (label 0) skipped, as t2t's padded_cross_entropy:
 * soft targets 1 - ls on the label and ls / (V - 1) elsewhere, minus the
 * entropy of that distribution so a perfect fit scores 0. Returns the mean
 * over non-pad tokens (loss_num / max(1, tokens)); dlogits (may be NULL)
 * gets its gradient. */
float dt_padded_xent(const float *logits, const int32_t *labels, int B, int L, int V, float ls, float *dlogits,
		     struct dt_seq_metrics *m);
float dt_padded_xent_naive(const float *logits, const int32_t *labels, int B, int L, int V, float ls,
			   float *dlogits, struct dt_seq_metrics *m);

#endif
