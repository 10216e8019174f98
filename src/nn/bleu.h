/*
 * bleu.h — t2t's BLEU over token sequences (tensor2tensor/utils/bleu_hook.py).
 *
 * compute_bleu: n-grams of orders 1..4, each translation n-gram's count
 * clipped by the reference's; corpus level (matches and possible n-grams,
 * and the lengths, summed over every pair before the precisions are
 * taken); t2t's smoothing of an order with no match, 1 / (2^k * possible)
 * for the k-th such order; an order with no n-gram at all counts as a
 * precision of 0 and is left out of the log sum, the geometric mean still
 * dividing by 4; the brevity penalty exp(1 - ref/hyp) when the translation
 * is shorter, 0 when it is empty.
 *
 * approx_bleu_score (t2t's metrics.bleu_score, which t2t's Text2TextProblem
 * family reports and its algorithmic problems do not) is compute_bleu of one
 * eval batch: each row's argmax over the logits against the row's labels,
 * both the whole padded row (t2t does not cut them at EOS or padding, so
 * padding positions count as tokens of id 0 on both sides); a run of
 * batches reports the mean of the batches' scores (tf.metrics.mean with
 * weight 1 per batch).
 *
 * Counts are plain sums, so partial corpora add (dt_bleu_merge).
 */
#ifndef DT_NN_BLEU_H
#define DT_NN_BLEU_H

#include <stdint.h>

#define DT_BLEU_MAX_ORDER 4

struct dt_bleu_counts {
	int64_t matches[DT_BLEU_MAX_ORDER];  /* clipped n-gram matches per order */
	int64_t possible[DT_BLEU_MAX_ORDER]; /* translation n-grams per order */
	int64_t ref_len, hyp_len;            /* tokens, summed */
};

/* Adds one (reference, translation) pair of token sequences to c; tokens
 * are any 32-bit values compared for equality. */
void dt_bleu_add(struct dt_bleu_counts *c, const int32_t *ref, int ref_len, const int32_t *hyp, int hyp_len);
void dt_bleu_merge(struct dt_bleu_counts *into, const struct dt_bleu_counts *c);
/* compute_bleu's score in [0, 1] (max_order 4, use_bp true); precisions
 * (may be NULL) gets the four per-order precisions as t2t smooths them. */
double dt_bleu_score(const struct dt_bleu_counts *c, double precisions[DT_BLEU_MAX_ORDER]);

/* approx_bleu_score of one batch: logits (B, L, V), labels (B, L). */
double dt_approx_bleu(const float *logits, const int32_t *labels, int B, int L, int V);

#endif
