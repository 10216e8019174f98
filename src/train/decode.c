/*
 * decode.c — greedy and beam search over the transformer (decode.h).
 */
#include "train/decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "data/text.h"
#include "train/input_text.h"

struct hyp {
	double logp;
	int done;
};

/* t2t's beam_search length penalty. */
static double penalty(int length, double alpha) { return pow((5.0 + length) / 6.0, alpha); }

/* Each row of z (K, V) into its log-probabilities in lp. */
static void log_softmax(const float *logits, int K, int V, float *lp)
{
	for (int k = 0; k < K; k++) {
		const float *z = logits + (size_t)k * V;
		float mx = z[0];
		for (int v = 1; v < V; v++)
			mx = z[v] > mx ? z[v] : mx;
		double s = 0;
		for (int v = 0; v < V; v++)
			s += exp((double)(z[v] - mx));
		const float lse = mx + (float)log(s);
		for (int v = 0; v < V; v++)
			lp[(size_t)k * V + v] = z[v] - lse;
	}
}

/* The reference step (no cache): runs the whole model on K prefixes of
 * length len (rows of seqs, stride `stride`) and leaves the logits of each
 * row's next position in z (K, V). */
static enum dt_status graph_step(struct dt_model *m, const struct dt_text_set *t, const int32_t *in, int n_in,
				 const int32_t *seqs, int stride, int K, int len, int32_t *bin, int32_t *btg, float *z,
				 struct dt_err *err)
{
	const int L = n_in > len + 1 ? n_in : len + 1, V = t->target_vocab;
	memset(bin, 0, (size_t)K * (size_t)L * sizeof(*bin));
	memset(btg, 0, (size_t)K * (size_t)L * sizeof(*btg));
	for (int k = 0; k < K; k++) {
		if (n_in)
			memcpy(bin + (size_t)k * L, in, (size_t)n_in * sizeof(*in));
		memcpy(btg + (size_t)k * L, seqs + (size_t)k * stride, (size_t)len * sizeof(*btg));
		/* a placeholder the causal decoder cannot see at its own position;
		 * it keeps the loss counting one token */
		btg[(size_t)k * L + len] = DT_TEXT_EOS;
	}
	struct dt_model_batch mb;
	dt_text_batch_set(&mb, n_in > 0, K, L, bin, btg);
	struct dt_step_result r;
	enum dt_status st = dt_model_evaluate(m, &mb, &r, err);
	if (st)
		return st;
	const float *logits = dt_model_logits(m);
	for (int k = 0; k < K; k++)
		memcpy(z + (size_t)k * V, logits + ((size_t)k * L + len) * V, (size_t)V * sizeof(float));
	return DT_OK;
}

/* The cached step: beam k continues parent[k] of the last step; its
 * decoder input is the token chosen at position len - 1 (0 at 0). */
static enum dt_status fast_step(struct dt_transformer_decoder *fd, const int32_t *seqs, int stride, int K, int len,
				const int *parent, int32_t *ids, float *z, int V, struct dt_err *err)
{
	if (len > 0)
		dt_transformer_decoder_reorder(fd, parent, K);
	for (int k = 0; k < K; k++)
		ids[k] = len ? seqs[(size_t)k * stride + len - 1] : 0;
	const float *logits;
	enum dt_status st = dt_transformer_decoder_step(fd, ids, K, &logits, err);
	if (!st)
		memcpy(z, logits, (size_t)K * (size_t)V * sizeof(float));
	return st;
}

enum dt_status dt_decode(struct dt_model *m, struct dt_transformer_decoder *fast, const struct dt_text_set *t,
			 const struct dt_decode_config *c, const int32_t *in, int n_in, int32_t *out, int cap, int *n_out,
			 struct dt_err *err)
{
	const int K = c->beam_size > 1 ? c->beam_size : 1, V = t->target_vocab;
	/* A language model's input is a prompt: its ids (without the EOS)
	 * begin every beam, and the output is what follows (t2t's partial
	 * targets, stripped from the decode). */
	const int32_t *prompt = NULL;
	int n_p = 0;
	if (!t->has_inputs) {
		prompt = in;
		n_p = n_in > 0 && in[n_in - 1] == DT_TEXT_EOS ? n_in - 1 : n_in;
		in = NULL, n_in = 0;
	}
	if (n_in > c->positions || n_p >= c->positions - 1)
		return dt_err_set(err, DT_USAGE, "the %s has %d tokens, and the model has %d positions: shorten it",
				  prompt ? "prompt" : "input", prompt ? n_p : n_in, c->positions);
	/* max_out: the positions decoded, prompt included */
	int max_out = n_p + n_in + c->extra_length;
	if (max_out > c->positions - 1)
		max_out = c->positions - 1;
	if (max_out > n_p + cap)
		max_out = n_p + cap;
	const int stride = max_out + 1, L = c->positions;
	int32_t *seqs = dt_xcalloc((size_t)K * stride, sizeof(int32_t)), *next = dt_xcalloc((size_t)K * stride, sizeof(int32_t));
	/* the graph's batch: K sequences of up to L positions */
	int32_t *bin = fast ? NULL : dt_xmallocarray((size_t)K * L, sizeof(int32_t));
	int32_t *btg = fast ? NULL : dt_xmallocarray((size_t)K * L, sizeof(int32_t));
	float *lp = dt_xmallocarray((size_t)K * V, sizeof(float));
	int parent[64], nparent[64];
	int32_t ids[64];
	double *score = dt_xcalloc((size_t)K, sizeof(double)), *nscore = dt_xcalloc((size_t)K, sizeof(double));
	int32_t *best = dt_xcalloc((size_t)stride, sizeof(int32_t));
	int best_len = -1, alive = 1;
	double best_score = -INFINITY;
	enum dt_status st = fast ? dt_transformer_decoder_start(fast, in, n_in, err) : DT_OK;
	parent[0] = 0;
	if (n_p)
		memcpy(seqs, prompt, (size_t)n_p * sizeof(int32_t));
	/* the fast decoder's caches take positions 0 .. n_p - 1 (inputs 0 and
	 * the prompt but its last token, which the search's first step feeds) */
	for (int j = 0; fast && j < n_p && !st; j++) {
		const int32_t id = j ? prompt[j - 1] : 0;
		const float *ignored;
		st = dt_transformer_decoder_step(fast, &id, 1, &ignored, err);
	}
	for (int len = n_p; len < max_out && alive > 0 && !st; len++) {
		st = fast ? fast_step(fast, seqs, stride, alive, len, parent, ids, lp, V, err)
			  : graph_step(m, t, in, n_in, seqs, stride, alive, len, bin, btg, lp, err);
		if (st)
			break;
		log_softmax(lp, alive, V, lp);
		/* The K best extensions of the alive beams (K small: selection by scan). */
		int taken = 0;
		int used_k[128], used_v[128];
		const int want = K < 64 ? K : 64;
		for (int pick = 0; pick < 2 * want; pick++) {
			int bk = -1, bv = -1;
			double bs = -INFINITY;
			for (int k = 0; k < alive; k++)
				for (int v = DT_TEXT_EOS; v < V; v++) {
					double s = score[k] + (double)lp[(size_t)k * V + v];
					if (s <= bs)
						continue;
					int seen = 0;
					for (int j = 0; j < pick && !seen; j++)
						seen = used_k[j] == k && used_v[j] == v;
					if (!seen)
						bk = k, bv = v, bs = s;
				}
			if (bk < 0)
				break;
			used_k[pick] = bk, used_v[pick] = bv;
			if (bv == DT_TEXT_EOS) { /* finished: length-normalized as t2t does */
				const double ns = K > 1 ? bs / penalty(len + 1, c->alpha) : bs;
				if (ns > best_score) {
					best_score = ns;
					best_len = len;
					memcpy(best, seqs + (size_t)bk * stride, (size_t)len * sizeof(int32_t));
				}
			} else if (taken < want) {
				memcpy(next + (size_t)taken * stride, seqs + (size_t)bk * stride, (size_t)len * sizeof(int32_t));
				next[(size_t)taken * stride + len] = bv;
				nparent[taken] = bk;
				nscore[taken++] = bs;
			}
			if (taken == want)
				break;
		}
		int32_t *tmp = seqs;
		seqs = next, next = tmp;
		double *ts = score;
		score = nscore, nscore = ts;
		alive = taken;
		memcpy(parent, nparent, (size_t)taken * sizeof(int));
		/* Greedy stops at its first EOS; a beam when no alive one can win
		 * (t2t's stop condition, with the longest length's penalty). */
		if (best_len >= 0 && (K == 1 || alive == 0 ||
				      score[0] / penalty(max_out, c->alpha) < best_score))
			break;
	}
	if (!st && best_len < 0) { /* no EOS within the length: the best alive one */
		best_len = max_out;
		memcpy(best, seqs, (size_t)max_out * sizeof(int32_t));
	}
	if (!st) {
		memcpy(out, best + n_p, (size_t)(best_len - n_p) * sizeof(int32_t));
		*n_out = best_len - n_p;
	}
	free(seqs), free(next), free(bin), free(btg), free(lp), free(score), free(nscore), free(best);
	return st;
}
