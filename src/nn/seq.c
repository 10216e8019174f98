/*
 * The sequence kernels (nn/seq.h): attention through OpenBLAS GEMMs, the
 * timing signal, the symbol modality and the padded, label-smoothed
 * cross-entropy. The naive twins are in seq_naive.c.
 */
#include "nn/seq.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "tensor/kernels.h"

size_t dt_attention_scratch_floats(const struct dt_attn_dims *d)
{
	const size_t R = (size_t)d->B * (size_t)d->L, LL = (size_t)d->L * (size_t)d->L;
	return 4 * R * (size_t)d->D + 2 * LL; /* dctx, dq, dk, dv; pd and dpd */
}

/* dt_softmax_rows' loops are elementwise or in eight lanes (-O2 leaves
 * reductions scalar); only expf is a call per element. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

void dt_softmax_rows(float *s, int R, int N)
{
	const int N8 = N & ~7;
	for (int i = 0; i < R; i++) {
		float *row = s + (size_t)i * (size_t)N;
		v8f m8;
		float mx = row[0];
		if (N8) {
			memcpy(&m8, row, sizeof(m8));
			for (int j = 8; j < N8; j += 8) {
				v8f v;
				memcpy(&v, row + j, sizeof(v));
				const v8i gt = v > m8; /* C has no ?: on vectors */
				m8 = (v8f)(((v8i)v & gt) | ((v8i)m8 & ~gt));
			}
			for (int k = 0; k < 8; k++)
				mx = m8[k] > mx ? m8[k] : mx;
		}
		for (int j = N8; j < N; j++)
			mx = row[j] > mx ? row[j] : mx;
		for (int j = 0; j < N; j++)
			row[j] = expf(row[j] - mx);
		v8f acc = { 0 };
		for (int j = 0; j < N8; j += 8) {
			v8f v;
			memcpy(&v, row + j, sizeof(v));
			acc += v;
		}
		float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
		for (int j = N8; j < N; j++)
			sum += row[j];
		const float inv = 1.0f / sum;
		for (int j = 0; j < N; j++)
			row[j] *= inv;
	}
}

/* Adds the mask's bias to s (L, L) and turns each row into its softmax.
 * pad (L): the bias of each key for padding (0 or DT_ATTN_NEG); a causal
 * row's later keys get DT_ATTN_NEG once whether or not they are padding. */
static void masked_softmax(const struct dt_attn_dims *d, const float *pad, float *s)
{
	const int L = d->L;
	for (int i = 0; i < L; i++) {
		float *row = s + (size_t)i * (size_t)L;
		const int open = d->causal ? i + 1 : L;
		if (pad)
			for (int j = 0; j < open; j++)
				row[j] += pad[j];
		for (int j = open; j < L; j++)
			row[j] += DT_ATTN_NEG;
	}
	dt_softmax_rows(s, L, L);
}

/* pd = p * keep / (1 - rate) into out (n). */
static void apply_keep(const float *p, const uint8_t *keep, float rate, float *out, size_t n)
{
	const float s = 1.0f / (1.0f - rate);
	for (size_t i = 0; i < n; i++)
		out[i] = keep[i] ? p[i] * s : 0.0f;
}

void dt_attention_forward(const struct dt_attn_dims *d, const float *xq, const float *xkv, const int32_t *kv_ids,
			  const float *w, float *y, struct dt_attn_buf *buf, float rate, struct dt_rng *rng,
			  float *scratch)
{
	const int B = d->B, L = d->L, D = d->D, H = d->H, dk = D / H, R = B * L;
	const size_t DD = (size_t)D * (size_t)D, LL = (size_t)L * (size_t)L;
	DT_ASSERT(H >= 1 && D % H == 0 && (rate <= 0.0f || rng));
	const float scale = 1.0f / sqrtf((float)dk);
	dt_matmul(0, 0, R, D, D, scale, xq, D, w, D, 0.0f, buf->q, D);
	dt_matmul(0, 0, R, D, D, 1.0f, xkv, D, w + DD, D, 0.0f, buf->k, D);
	dt_matmul(0, 0, R, D, D, 1.0f, xkv, D, w + 2 * DD, D, 0.0f, buf->v, D);
	float *pd = scratch;
	struct dt_rng_bulk bulk;
	const uint32_t drop = dt_rng_u32_threshold(rate > 0.0f ? rate : 0.0f);
	if (rate > 0.0f)
		dt_rng_bulk_seed(&bulk, rng);
	float *pad = kv_ids ? scratch + LL : NULL; /* (L) the keys' padding bias of sequence b */
	for (int b = 0; b < B; b++) {
		for (int j = 0; pad && j < L; j++)
			pad[j] = kv_ids[(size_t)b * (size_t)L + (size_t)j] == 0 ? DT_ATTN_NEG : 0.0f;
		for (int h = 0; h < H; h++) {
			const size_t at = (size_t)b * (size_t)L * (size_t)D + (size_t)h * (size_t)dk;
			float *s = buf->p + ((size_t)b * (size_t)H + (size_t)h) * LL;
			dt_matmul(0, 1, L, L, dk, 1.0f, buf->q + at, D, buf->k + at, D, 0.0f, s, L);
			masked_softmax(d, pad, s);
			const float *use = s;
			if (rate > 0.0f) {
				uint8_t *keep = buf->keep + ((size_t)b * (size_t)H + (size_t)h) * LL;
				for (size_t c = 0; c < LL; c += 512) {
					uint32_t u[512];
					const size_t k = LL - c < 512 ? LL - c : 512;
					dt_rng_bulk_u32(&bulk, u, k);
					for (size_t i = 0; i < k; i++)
						keep[c + i] = u[i] >= drop;
				}
				apply_keep(s, keep, rate, pd, LL);
				use = pd;
			}
			dt_matmul(0, 0, L, dk, L, 1.0f, use, L, buf->v + at, D, 0.0f, buf->ctx + at, D);
		}
	}
	dt_matmul(0, 0, R, D, D, 1.0f, buf->ctx, D, w + 3 * DD, D, 0.0f, y, D);
}

void dt_attention_backward(const struct dt_attn_dims *d, const float *xq, const float *xkv, const float *w,
			   const struct dt_attn_buf *buf, float rate, const float *dy, float *dxq, float *dxkv, float *dw,
			   float *scratch)
{
	const int B = d->B, L = d->L, D = d->D, H = d->H, dk = D / H, R = B * L;
	const size_t DD = (size_t)D * (size_t)D, LL = (size_t)L * (size_t)L, RD = (size_t)R * (size_t)D;
	const float scale = 1.0f / sqrtf((float)dk);
	float *dctx = scratch, *dq = dctx + RD, *dkk = dq + RD, *dv = dkk + RD, *pd = dv + RD, *ds = pd + LL;
	dt_matmul(0, 1, R, D, D, 1.0f, dy, D, w + 3 * DD, D, 0.0f, dctx, D);
	dt_matmul(1, 0, D, D, R, 1.0f, buf->ctx, D, dy, D, 1.0f, dw + 3 * DD, D);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++) {
			const size_t at = (size_t)b * (size_t)L * (size_t)D + (size_t)h * (size_t)dk;
			const size_t pat = ((size_t)b * (size_t)H + (size_t)h) * LL;
			const float *p = buf->p + pat, *use = p;
			if (rate > 0.0f) {
				apply_keep(p, buf->keep + pat, rate, pd, LL);
				use = pd;
			}
			/* d(pd) = dctx v^T; dv = pd^T dctx */
			dt_matmul(0, 1, L, L, dk, 1.0f, dctx + at, D, buf->v + at, D, 0.0f, ds, L);
			dt_matmul(1, 0, L, dk, L, 1.0f, use, L, dctx + at, D, 0.0f, dv + at, D);
			if (rate > 0.0f)
				apply_keep(ds, buf->keep + pat, rate, ds, LL);
			/* softmax backward, row by row: ds = p (dp - sum(dp p)) */
			for (int i = 0; i < L; i++) {
				float *g = ds + (size_t)i * (size_t)L;
				const float *pr = p + (size_t)i * (size_t)L;
				v8f acc = { 0 };
				int c = 0;
				for (; c + 8 <= L; c += 8) {
					v8f u, w8;
					memcpy(&u, g + c, sizeof(u));
					memcpy(&w8, pr + c, sizeof(w8));
					acc += u * w8;
				}
				float dot = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
				for (; c < L; c++)
					dot += g[c] * pr[c];
				for (int j = 0; j < L; j++)
					g[j] = pr[j] * (g[j] - dot);
			}
			/* s = q k^T (q scaled): dq = ds k, dk = ds^T q */
			dt_matmul(0, 0, L, dk, L, 1.0f, ds, L, buf->k + at, D, 0.0f, dq + at, D);
			dt_matmul(1, 0, L, dk, L, 1.0f, ds, L, buf->q + at, D, 0.0f, dkk + at, D);
		}
	/* q = scale xq Wq: the scale goes into Wq's and xq's gradients */
	dt_matmul(1, 0, D, D, R, scale, xq, D, dq, D, 1.0f, dw, D);
	dt_matmul(1, 0, D, D, R, 1.0f, xkv, D, dkk, D, 1.0f, dw + DD, D);
	dt_matmul(1, 0, D, D, R, 1.0f, xkv, D, dv, D, 1.0f, dw + 2 * DD, D);
	dt_matmul(0, 1, R, D, D, scale, dq, D, w, D, 0.0f, dxq, D);
	dt_matmul(0, 1, R, D, D, 1.0f, dkk, D, w + DD, D, 0.0f, dxkv, D);
	dt_matmul(0, 1, R, D, D, 1.0f, dv, D, w + 2 * DD, D, 1.0f, dxkv, D);
}

/* ---- timing signal ---------------------------------------------------------- */

float dt_timing_signal_value(int pos, int channel, int D)
{
	const int n = D / 2;
	if (n == 0 || channel >= 2 * n)
		return 0.0f;
	const double inc = log(1.0e4) / (double)(n > 1 ? n - 1 : 1);
	const int i = channel < n ? channel : channel - n;
	const double t = (double)pos * exp(-(double)i * inc);
	return (float)(channel < n ? sin(t) : cos(t));
}

void dt_timing_signal_add(const float *x, float *y, int B, int L, int D)
{
	float sig[4096];
	DT_ASSERT(D <= 4096);
	for (int t = 0; t < L; t++) {
		for (int c = 0; c < D; c++)
			sig[c] = dt_timing_signal_value(t, c, D);
		for (int b = 0; b < B; b++) {
			const size_t at = ((size_t)b * (size_t)L + (size_t)t) * (size_t)D;
			for (int c = 0; c < D; c++)
				y[at + (size_t)c] = x[at + (size_t)c] + sig[c];
		}
	}
}

/* ---- symbol modality --------------------------------------------------------- */

void dt_symbol_forward(const float *table, const int32_t *ids, size_t R, int D, float scale, float *y)
{
	for (size_t r = 0; r < R; r++) {
		float *row = y + r * (size_t)D;
		if (ids[r] == 0) {
			memset(row, 0, (size_t)D * sizeof(float));
			continue;
		}
		const float *e = table + (size_t)ids[r] * (size_t)D;
		for (int c = 0; c < D; c++)
			row[c] = e[c] * scale;
	}
}

void dt_symbol_backward(const int32_t *ids, size_t R, int D, float scale, const float *dy, float *dtable)
{
	for (size_t r = 0; r < R; r++) {
		if (ids[r] == 0)
			continue;
		float *g = dtable + (size_t)ids[r] * (size_t)D;
		const float *src = dy + r * (size_t)D;
		for (int c = 0; c < D; c++)
			g[c] += src[c] * scale;
	}
}

void dt_symbol_logits_forward(const float *x, const float *table, size_t R, int D, int V, float *logits)
{
	dt_matmul(0, 1, (int)R, V, D, 1.0f, x, D, table, D, 0.0f, logits, V);
}

void dt_symbol_logits_backward(const float *x, const float *table, const float *dlogits, size_t R, int D, int V,
			       float *dx, float *dtable)
{
	if (dx)
		dt_matmul(0, 0, (int)R, D, V, 1.0f, dlogits, V, table, D, 0.0f, dx, D);
	dt_matmul(1, 0, V, D, (int)R, 1.0f, dlogits, V, x, D, 1.0f, dtable, D);
}

void dt_shift_right_ids(const int32_t *x, int32_t *y, int B, int L)
{
	for (int b = 0; b < B; b++) {
		const int32_t *src = x + (size_t)b * (size_t)L;
		int32_t *dst = y + (size_t)b * (size_t)L;
		memmove(dst + 1, src, (size_t)(L - 1) * sizeof(int32_t));
		dst[0] = 0;
	}
}

/* ---- padded, label-smoothed cross-entropy ------------------------------------ */

/* The entropy floor t2t subtracts: -(c log c + (V-1) l log(l + 1e-20)). */
static double smoothing_floor(int V, double ls)
{
	const double conf = 1.0 - ls, low = ls / (double)(V - 1);
	return -(conf * log(conf) + (double)(V - 1) * low * log(low + 1e-20));
}

float dt_padded_xent(const float *logits, const int32_t *labels, int B, int L, int V, float ls, float *dlogits,
		     struct dt_seq_metrics *m)
{
	DT_ASSERT(V >= 2 && ls >= 0.0f && ls < 1.0f);
	memset(m, 0, sizeof(*m));
	const float conf = 1.0f - ls, low = ls / (float)(V - 1);
	const double floor_ = smoothing_floor(V, ls);
	int64_t tokens = 0;
	for (size_t r = 0; r < (size_t)B * (size_t)L; r++)
		tokens += labels[r] != 0;
	const float inv = 1.0f / (float)(tokens > 1 ? tokens : 1);
	for (int b = 0; b < B; b++) {
		int seq_ok = 1;
		for (int t = 0; t < L; t++) {
			const size_t r = (size_t)b * (size_t)L + (size_t)t;
			const float *z = logits + r * (size_t)V;
			float *dz = dlogits ? dlogits + r * (size_t)V : NULL;
			const int y = labels[r];
			if (y == 0) {
				if (dz)
					memset(dz, 0, (size_t)V * sizeof(float));
				continue;
			}
			int arg = 0;
			float mx = z[0], zsum = 0.0f;
			for (int j = 0; j < V; j++) {
				zsum += z[j];
				if (z[j] > mx) {
					mx = z[j];
					arg = j;
				}
			}
			float se = 0.0f;
			for (int j = 0; j < V; j++)
				se += expf(z[j] - mx);
			const float lse = mx + logf(se);
			m->nll_num += (double)(lse - z[y]);
			m->loss_num += (double)(lse - (conf * z[y] + low * (zsum - z[y]))) - floor_;
			m->tokens++;
			m->tokens_correct += arg == y;
			seq_ok &= arg == y;
			if (dz) {
				for (int j = 0; j < V; j++)
					dz[j] = (expf(z[j] - lse) - low) * inv;
				dz[y] -= (conf - low) * inv;
			}
		}
		m->seqs++;
		m->seqs_correct += seq_ok;
	}
	return (float)(m->loss_num / (double)(tokens > 1 ? tokens : 1));
}
