/*
 * The naive twins of the sequence kernels (nn/seq.h): plain loops with
 * sums in double, written from the formulas and not from the fast code.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "nn/seq.h"

/* out (M, N) = a (M, K) b (K, N), every operand given with its strides. */
static void mm(int M, int N, int K, const float *a, size_t ar, size_t ac, const float *b, size_t br, size_t bc,
	       double *out)
{
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				s += (double)a[(size_t)i * ar + (size_t)k * ac] * (double)b[(size_t)k * br + (size_t)j * bc];
			out[(size_t)i * (size_t)N + (size_t)j] = s;
		}
}

static void to_float(const double *src, float *dst, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = (float)(src[i] * (double)scale);
}

void dt_attention_forward_naive(const struct dt_attn_dims *d, const float *xq, const float *xkv,
				const int32_t *kv_ids, const float *w, float *y, struct dt_attn_buf *buf, float rate)
{
	const int B = d->B, L = d->L, D = d->D, H = d->H, dk = D / H, R = B * L;
	const size_t DD = (size_t)D * (size_t)D, RD = (size_t)R * (size_t)D;
	double *t = dt_xcalloc(RD + (size_t)L * (size_t)L, sizeof(double));
	const float scale = (float)(1.0 / sqrt((double)dk));
	mm(R, D, D, xq, (size_t)D, 1, w, (size_t)D, 1, t);
	to_float(t, buf->q, RD, scale);
	mm(R, D, D, xkv, (size_t)D, 1, w + DD, (size_t)D, 1, t);
	to_float(t, buf->k, RD, 1.0f);
	mm(R, D, D, xkv, (size_t)D, 1, w + 2 * DD, (size_t)D, 1, t);
	to_float(t, buf->v, RD, 1.0f);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			float *p = buf->p + ((size_t)b * (size_t)H + (size_t)h) * (size_t)L * (size_t)L;
			const uint8_t *keep = buf->keep + ((size_t)b * (size_t)H + (size_t)h) * (size_t)L * (size_t)L;
			for (int i = 0; i < L; i++) {
				double mx = -HUGE_VAL, sum = 0;
				double *row = t + RD; /* (L) */
				for (int j = 0; j < L; j++) {
					double v = 0;
					for (int c = 0; c < dk; c++)
						v += (double)buf->q[((size_t)b * (size_t)L + (size_t)i) * (size_t)D + (size_t)(h * dk + c)] *
						     (double)buf->k[((size_t)b * (size_t)L + (size_t)j) * (size_t)D + (size_t)(h * dk + c)];
					if ((kv_ids && kv_ids[(size_t)b * (size_t)L + (size_t)j] == 0) || (d->causal && j > i))
						v += (double)DT_ATTN_NEG;
					row[j] = v;
					mx = v > mx ? v : mx;
				}
				for (int j = 0; j < L; j++)
					sum += exp(row[j] - mx);
				for (int j = 0; j < L; j++)
					p[(size_t)i * (size_t)L + (size_t)j] = (float)(exp(row[j] - mx) / sum);
				for (int c = 0; c < dk; c++) {
					double v = 0;
					for (int j = 0; j < L; j++) {
						double pj = p[(size_t)i * (size_t)L + (size_t)j];
						if (rate > 0.0f)
							pj = keep[(size_t)i * (size_t)L + (size_t)j] ? pj / (1.0 - (double)rate) : 0.0;
						v += pj * (double)buf->v[((size_t)b * (size_t)L + (size_t)j) * (size_t)D + (size_t)(h * dk + c)];
					}
					buf->ctx[((size_t)b * (size_t)L + (size_t)i) * (size_t)D + (size_t)(h * dk + c)] = (float)v;
				}
			}
		}
	mm(R, D, D, buf->ctx, (size_t)D, 1, w + 3 * DD, (size_t)D, 1, t);
	to_float(t, y, RD, 1.0f);
	free(t);
}

void dt_attention_backward_naive(const struct dt_attn_dims *d, const float *xq, const float *xkv, const float *w,
				 const struct dt_attn_buf *buf, float rate, const float *dy, float *dxq, float *dxkv,
				 float *dw)
{
	const int B = d->B, L = d->L, D = d->D, H = d->H, dk = D / H, R = B * L;
	const size_t DD = (size_t)D * (size_t)D, RD = (size_t)R * (size_t)D;
	const double scale = 1.0 / sqrt((double)dk);
	float *g = dt_xcalloc(4 * RD, sizeof(float)); /* dctx, dq (of the scaled q), dk, dv */
	float *dctx = g, *dq = g + RD, *dkk = g + 2 * RD, *dv = g + 3 * RD;
	double *t = dt_xcalloc(DD > RD ? DD : RD, sizeof(double)), *dp = dt_xcalloc((size_t)L, sizeof(double));
	mm(R, D, D, dy, (size_t)D, 1, w + 3 * DD, 1, (size_t)D, t); /* dy Wo^T */
	to_float(t, dctx, RD, 1.0f);
	mm(D, D, R, buf->ctx, 1, (size_t)D, dy, (size_t)D, 1, t);
	for (size_t i = 0; i < DD; i++)
		dw[3 * DD + i] += (float)t[i];
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			const size_t pat = ((size_t)b * (size_t)H + (size_t)h) * (size_t)L * (size_t)L;
			for (int i = 0; i < L; i++) {
				const size_t qi = ((size_t)b * (size_t)L + (size_t)i) * (size_t)D + (size_t)(h * dk);
				double dot = 0;
				for (int j = 0; j < L; j++) {
					const size_t kj = ((size_t)b * (size_t)L + (size_t)j) * (size_t)D + (size_t)(h * dk);
					const double p = buf->p[pat + (size_t)i * (size_t)L + (size_t)j];
					const double mult =
						rate > 0.0f ? (buf->keep[pat + (size_t)i * (size_t)L + (size_t)j] ? 1.0 / (1.0 - (double)rate) : 0.0)
							    : 1.0;
					double dpd = 0;
					for (int c = 0; c < dk; c++) {
						dpd += (double)dctx[qi + (size_t)c] * (double)buf->v[kj + (size_t)c];
						dv[kj + (size_t)c] += (float)(p * mult * (double)dctx[qi + (size_t)c]);
					}
					dp[j] = dpd * mult;
					dot += dp[j] * p;
				}
				for (int j = 0; j < L; j++) {
					const size_t kj = ((size_t)b * (size_t)L + (size_t)j) * (size_t)D + (size_t)(h * dk);
					const double ds = (double)buf->p[pat + (size_t)i * (size_t)L + (size_t)j] * (dp[j] - dot);
					for (int c = 0; c < dk; c++) {
						dq[qi + (size_t)c] += (float)(ds * (double)buf->k[kj + (size_t)c]);
						dkk[kj + (size_t)c] += (float)(ds * (double)buf->q[qi + (size_t)c]);
					}
				}
			}
		}
	const float *gs[3] = { dq, dkk, dv };
	const float *xs[3] = { xq, xkv, xkv };
	for (int m = 0; m < 3; m++) {
		mm(D, D, R, xs[m], 1, (size_t)D, gs[m], (size_t)D, 1, t);
		for (size_t i = 0; i < DD; i++)
			dw[(size_t)m * DD + i] += (float)(t[i] * (m == 0 ? scale : 1.0));
	}
	mm(R, D, D, dq, (size_t)D, 1, w, 1, (size_t)D, t);
	to_float(t, dxq, RD, (float)scale);
	mm(R, D, D, dkk, (size_t)D, 1, w + DD, 1, (size_t)D, t);
	to_float(t, dxkv, RD, 1.0f);
	mm(R, D, D, dv, (size_t)D, 1, w + 2 * DD, 1, (size_t)D, t);
	for (size_t i = 0; i < RD; i++)
		dxkv[i] += (float)t[i];
	free(dp);
	free(t);
	free(g);
}

float dt_padded_xent_naive(const float *logits, const int32_t *labels, int B, int L, int V, float ls,
			   float *dlogits, struct dt_seq_metrics *m)
{
	memset(m, 0, sizeof(*m));
	const double conf = 1.0 - (double)ls, low = (double)ls / (double)(V - 1);
	double floor_ = -conf * log(conf);
	if (low > 0)
		floor_ -= (double)(V - 1) * low * log(low + 1e-20);
	int64_t tokens = 0;
	for (size_t r = 0; r < (size_t)B * (size_t)L; r++)
		tokens += labels[r] != 0;
	const double den = (double)(tokens > 1 ? tokens : 1);
	for (int b = 0; b < B; b++) {
		int ok = 1;
		for (int t = 0; t < L; t++) {
			const size_t r = (size_t)b * (size_t)L + (size_t)t;
			const float *z = logits + r * (size_t)V;
			const int y = labels[r];
			if (dlogits)
				memset(dlogits + r * (size_t)V, 0, (size_t)V * sizeof(float));
			if (y == 0)
				continue;
			double mx = z[0], se = 0, xent = 0;
			int arg = 0;
			for (int j = 1; j < V; j++)
				if ((double)z[j] > mx) {
					mx = z[j];
					arg = j;
				}
			for (int j = 0; j < V; j++)
				se += exp((double)z[j] - mx);
			for (int j = 0; j < V; j++) {
				const double lp = (double)z[j] - mx - log(se), soft = j == y ? conf : low;
				xent -= soft * lp;
				if (dlogits)
					dlogits[r * (size_t)V + (size_t)j] = (float)((exp(lp) - soft) / den);
			}
			m->loss_num += xent - floor_;
			m->nll_num += -((double)z[y] - mx - log(se));
			m->tokens++;
			m->tokens_correct += arg == y;
			ok &= arg == y;
		}
		m->seqs++;
		m->seqs_correct += ok;
	}
	return (float)(m->loss_num / den);
}
