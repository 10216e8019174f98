/*
 * bleu.c — t2t's compute_bleu and approx_bleu_score (see bleu.h).
 *
 * The clipped counts are taken without a hash table: for each n-gram of the
 * translation that is the first of its kind there, its occurrences in the
 * translation and in the reference are counted by comparison. That is
 * O(L^2) per order, which for t2t's lengths (max_length 256) costs far less
 * than the logits it is computed beside, and it needs no allocation.
 */
#include "nn/bleu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static int same(const int32_t *a, const int32_t *b, int n)
{
	for (int k = 0; k < n; k++)
		if (a[k] != b[k])
			return 0;
	return 1;
}

static int64_t occurrences(const int32_t *seq, int len, const int32_t *gram, int n)
{
	int64_t c = 0;
	for (int i = 0; i + n <= len; i++)
		c += same(seq + i, gram, n);
	return c;
}

void dt_bleu_add(struct dt_bleu_counts *c, const int32_t *ref, int ref_len, const int32_t *hyp, int hyp_len)
{
	c->ref_len += ref_len;
	c->hyp_len += hyp_len;
	for (int n = 1; n <= DT_BLEU_MAX_ORDER; n++) {
		if (hyp_len >= n)
			c->possible[n - 1] += hyp_len - n + 1;
		for (int i = 0; i + n <= hyp_len; i++) {
			int first = 1;
			for (int j = 0; j < i && first; j++)
				first = !same(hyp + j, hyp + i, n);
			if (!first)
				continue;
			const int64_t in_hyp = occurrences(hyp, hyp_len, hyp + i, n);
			const int64_t in_ref = occurrences(ref, ref_len, hyp + i, n);
			c->matches[n - 1] += in_hyp < in_ref ? in_hyp : in_ref;
		}
	}
}

void dt_bleu_merge(struct dt_bleu_counts *into, const struct dt_bleu_counts *c)
{
	for (int i = 0; i < DT_BLEU_MAX_ORDER; i++) {
		into->matches[i] += c->matches[i];
		into->possible[i] += c->possible[i];
	}
	into->ref_len += c->ref_len;
	into->hyp_len += c->hyp_len;
}

double dt_bleu_score(const struct dt_bleu_counts *c, double precisions[DT_BLEU_MAX_ORDER])
{
	double p[DT_BLEU_MAX_ORDER], smooth = 1.0, log_sum = 0.0;
	int any = 0;
	for (int i = 0; i < DT_BLEU_MAX_ORDER; i++) {
		if (c->possible[i] == 0)
			p[i] = 0.0;
		else if (c->matches[i] > 0)
			p[i] = (double)c->matches[i] / (double)c->possible[i];
		else {
			smooth *= 2.0;
			p[i] = 1.0 / (smooth * (double)c->possible[i]);
		}
		if (p[i] > 0) {
			log_sum += log(p[i]);
			any = 1;
		}
		if (precisions)
			precisions[i] = p[i];
	}
	/* t2t: geo_mean stays 0 unless some precision is positive */
	const double geo_mean = any ? exp(log_sum / DT_BLEU_MAX_ORDER) : 0.0;
	double bp = 1.0;
	if (c->ref_len > 0) {
		const double ratio = (double)c->hyp_len / (double)c->ref_len;
		bp = ratio <= 0.0 ? 0.0 : ratio >= 1.0 ? 1.0 : exp(1.0 - 1.0 / ratio);
	}
	/* t2t returns np.float32(bleu) */
	return (double)(float)(geo_mean * bp);
}

double dt_approx_bleu(const float *logits, const int32_t *labels, int B, int L, int V)
{
	int32_t *pred = dt_xmalloc((size_t)L * sizeof(*pred));
	struct dt_bleu_counts c = { 0 };
	for (int b = 0; b < B; b++) {
		for (int t = 0; t < L; t++) {
			const float *z = logits + ((size_t)b * (size_t)L + (size_t)t) * (size_t)V;
			int arg = 0; /* tf.argmax: the first of equal maxima */
			for (int j = 1; j < V; j++)
				if (z[j] > z[arg])
					arg = j;
			pred[t] = arg;
		}
		dt_bleu_add(&c, labels + (size_t)b * (size_t)L, L, pred, L);
	}
	free(pred);
	return dt_bleu_score(&c, NULL);
}
