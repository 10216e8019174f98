/* The naive twins of the kernels in kernels.c and kernels_conv.c: written
 * to be obviously right, index by index, for the tests to compare against. */
#include "tensor/kernels.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

void dt_matmul_naive(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
		     const float *B, int ldb, float beta, float *C, int ldc)
{
	for (int i = 0; i < M; i++) {
		for (int j = 0; j < N; j++) {
			double s = 0;
			for (int k = 0; k < K; k++) {
				float a = trans_a ? A[(size_t)k * (size_t)lda + (size_t)i] : A[(size_t)i * (size_t)lda + (size_t)k];
				float b = trans_b ? B[(size_t)j * (size_t)ldb + (size_t)k] : B[(size_t)k * (size_t)ldb + (size_t)j];
				s += (double)a * (double)b;
			}
			float *c = &C[(size_t)i * (size_t)ldc + (size_t)j];
			double old = beta == 0.0f ? 0.0 : (double)beta * (double)*c;
			*c = (float)((double)alpha * s + old);
		}
	}
}

/* Input pixel read by entry (oh, ow, kh, kw) of a window; -1 if padding. */
static long input_index(const struct dt_conv_geom *g, int b, int oh, int ow, int kh, int kw)
{
	int ih = oh * g->stride - g->pad + kh;
	int iw = ow * g->stride - g->pad + kw;
	if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
		return -1;
	return (((long)b * g->H + ih) * g->W + iw) * g->C;
}

void dt_im2col_naive(const struct dt_conv_geom *g, const float *x, int n, float *cols)
{
	const int K = dt_conv_k(g);
	for (int b = 0; b < n; b++)
		for (int oh = 0; oh < g->OH; oh++)
			for (int ow = 0; ow < g->OW; ow++) {
				float *row = cols + (((size_t)b * (size_t)g->OH + (size_t)oh) * (size_t)g->OW + (size_t)ow) * (size_t)K;
				for (int kh = 0; kh < g->KH; kh++)
					for (int kw = 0; kw < g->KW; kw++)
						for (int c = 0; c < g->C; c++) {
							long at = input_index(g, b, oh, ow, kh, kw);
							row[(kh * g->KW + kw) * g->C + c] = at < 0 ? 0.0f : x[at + c];
						}
			}
}

void dt_im2col_t_naive(const struct dt_conv_geom *g, const float *x, int n, float *cols_t, int ld)
{
	const int K = dt_conv_k(g);
	for (int b = 0; b < n; b++)
		for (int oh = 0; oh < g->OH; oh++)
			for (int ow = 0; ow < g->OW; ow++) {
				size_t r = ((size_t)b * (size_t)g->OH + (size_t)oh) * (size_t)g->OW + (size_t)ow;
				for (int kh = 0; kh < g->KH; kh++)
					for (int kw = 0; kw < g->KW; kw++)
						for (int c = 0; c < g->C; c++) {
							long at = input_index(g, b, oh, ow, kh, kw);
							int k = (kh * g->KW + kw) * g->C + c;
							DT_ASSERT(k < K);
							cols_t[(size_t)k * (size_t)ld + r] = at < 0 ? 0.0f : x[at + c];
						}
			}
}

void dt_col2im_naive(const struct dt_conv_geom *g, const float *cols, int n, float *dx)
{
	const int K = dt_conv_k(g);
	memset(dx, 0, (size_t)n * (size_t)g->H * (size_t)g->W * (size_t)g->C * sizeof(*dx));
	for (int b = 0; b < n; b++)
		for (int oh = 0; oh < g->OH; oh++)
			for (int ow = 0; ow < g->OW; ow++) {
				const float *row = cols + (((size_t)b * (size_t)g->OH + (size_t)oh) * (size_t)g->OW + (size_t)ow) * (size_t)K;
				for (int kh = 0; kh < g->KH; kh++)
					for (int kw = 0; kw < g->KW; kw++) {
						long at = input_index(g, b, oh, ow, kh, kw);
						if (at < 0)
							continue;
						for (int c = 0; c < g->C; c++)
							dx[at + c] += row[(kh * g->KW + kw) * g->C + c];
					}
			}
}

void dt_maxpool2_forward_naive(const float *x, float *y, int32_t *argmax, int B, int H, int W, int C)
{
	const int OH = H / 2, OW = W / 2;
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++)
				for (int c = 0; c < C; c++) {
					float best = 0.0f;
					int32_t at = -1;
					for (int k = 0; k < 4; k++) {
						int ih = 2 * oh + k / 2, iw = 2 * ow + k % 2;
						float v = x[(((size_t)b * (size_t)H + (size_t)ih) * (size_t)W + (size_t)iw) * (size_t)C + (size_t)c];
						if (at < 0 || v > best) {
							best = v;
							at = k;
						}
					}
					size_t o = (((size_t)b * (size_t)OH + (size_t)oh) * (size_t)OW + (size_t)ow) * (size_t)C + (size_t)c;
					y[o] = best;
					argmax[o] = at;
				}
}

void dt_maxpool2_backward_naive(const float *dy, const int32_t *argmax, float *dx, int B, int H, int W, int C)
{
	const int OH = H / 2, OW = W / 2;
	memset(dx, 0, (size_t)B * (size_t)H * (size_t)W * (size_t)C * sizeof(*dx));
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++)
				for (int c = 0; c < C; c++) {
					size_t o = (((size_t)b * (size_t)OH + (size_t)oh) * (size_t)OW + (size_t)ow) * (size_t)C + (size_t)c;
					int k = argmax[o];
					int ih = 2 * oh + k / 2, iw = 2 * ow + k % 2;
					dx[(((size_t)b * (size_t)H + (size_t)ih) * (size_t)W + (size_t)iw) * (size_t)C + (size_t)c] += dy[o];
				}
}

float dt_softmax_xent_naive(const float *logits, const uint8_t *labels, int B, int N, float *dlogits,
			    int *correct)
{
	double loss = 0;
	int hits = 0;
	for (int b = 0; b < B; b++) {
		const float *z = logits + (size_t)b * (size_t)N;
		int best = 0;
		for (int n = 1; n < N; n++)
			if (z[n] > z[best])
				best = n;
		hits += best == labels[b];
		double mx = z[best], sum = 0;
		for (int n = 0; n < N; n++)
			sum += exp((double)z[n] - mx);
		double p_label = exp((double)z[labels[b]] - mx) / sum;
		loss += -log(p_label);
		if (dlogits)
			for (int n = 0; n < N; n++) {
				double p = exp((double)z[n] - mx) / sum;
				dlogits[(size_t)b * (size_t)N + (size_t)n] = (float)((p - (n == labels[b])) / B);
			}
	}
	if (correct)
		*correct = hits;
	return B > 0 ? (float)(loss / B) : 0.0f;
}

void dt_layernorm_forward_naive(const float *x, const float *gamma, const float *beta, float *y, float *mean,
				float *rstd, int R, int D, float eps)
{
	for (int r = 0; r < R; r++) {
		const float *xr = x + (size_t)r * (size_t)D;
		double m = 0, v = 0;
		for (int j = 0; j < D; j++)
			m += (double)xr[j];
		m /= D;
		for (int j = 0; j < D; j++)
			v += ((double)xr[j] - m) * ((double)xr[j] - m);
		v /= D;
		const double s = 1.0 / sqrt(v + (double)eps);
		for (int j = 0; j < D; j++)
			y[(size_t)r * (size_t)D + (size_t)j] = (float)(((double)xr[j] - m) * s * (double)gamma[j] + (double)beta[j]);
		mean[r] = (float)m;
		rstd[r] = (float)s;
	}
}

/* Backward through the definition: xhat = (x - m) s, with m and s
 * functions of every x in the row; each dx_j sums over all k in double. */
void dt_layernorm_backward_naive(const float *dy, const float *x, const float *mean, const float *rstd,
				 const float *gamma, float *dx, float *dgamma, float *dbeta, int R, int D)
{
	for (int r = 0; r < R; r++) {
		const float *xr = x + (size_t)r * (size_t)D, *dyr = dy + (size_t)r * (size_t)D;
		const double m = (double)mean[r], s = (double)rstd[r];
		for (int j = 0; j < D; j++) {
			dgamma[j] = (float)((double)dgamma[j] + (double)dyr[j] * ((double)xr[j] - m) * s);
			dbeta[j] += dyr[j];
		}
		if (!dx)
			continue;
		for (int j = 0; j < D; j++) {
			double acc = 0;
			const double ej = (double)xr[j] - m;
			for (int k = 0; k < D; k++) {
				/* d xhat_k / d x_j = s (delta_jk - 1/D) - (x_k - m) s^3 (x_j - m) / D */
				const double ek = (double)xr[k] - m;
				const double d = s * ((j == k) - 1.0 / D) - ek * s * s * s * ej / D;
				acc += (double)dyr[k] * (double)gamma[k] * d;
			}
			dx[(size_t)r * (size_t)D + (size_t)j] = (float)acc;
		}
	}
}
