/*
 * Fast kernels: matmul, bias/ReLU, softmax cross-entropy, dropout.
 * Convolution and pooling kernels are in kernels_conv.c; the naive twins of
 * everything in kernels_naive.c.
 *
 * gcc 12 at -O2 vectorizes only loops that need no runtime checks and no
 * scalar epilogue (the "very cheap" cost model), and will not turn float
 * compare-and-select (ReLU masks) into vector blends while it must preserve
 * floating-point traps. These hot loops get the full cost model and no
 * traps (dtrain never enables FP exceptions; values are the same either
 * way).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif
#include "tensor/kernels.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "tensor/blas.h"

void dt_matmul(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
	       const float *B, int ldb, float beta, float *C, int ldc)
{
	DT_ASSERT(M >= 0 && N >= 0 && K >= 0);
	if (M == 0 || N == 0)
		return;
	dt_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/*
 * Bias rows repeat with period N along the flat (R*N) array. Row-by-row
 * loops are slow when N is small (6 or 16 conv channels: a loop set-up per
 * handful of floats), so the flat array is walked in blocks of P floats,
 * P the smallest multiple of N that is also a multiple of 16, against a
 * P-float tile of the bias (forward) or of partial sums (backward). Rows
 * that do not fill a last block, and N too large for a tile, go row by row.
 */
#define TILE_MAX 1024

static int tile_period(int N)
{
	int p = N;
	while (p % 16 != 0 && p <= TILE_MAX)
		p += N;
	return p <= TILE_MAX ? p : 0;
}

static void bias_act_rows(float *restrict y, const float *restrict bias, int R, int N, int relu)
{
	for (int r = 0; r < R; r++) {
		float *restrict yr = y + (size_t)r * (size_t)N;
		if (relu) {
			for (int n = 0; n < N; n++) {
				float v = yr[n] + bias[n];
				yr[n] = v > 0.0f ? v : 0.0f;
			}
		} else {
			for (int n = 0; n < N; n++)
				yr[n] += bias[n];
		}
	}
}

void dt_bias_act_forward(float *restrict y, const float *restrict bias, int R, int N, int relu)
{
	const int P = tile_period(N);
	const int rows_per_block = P ? P / N : 0;
	const int blocks = P ? R / rows_per_block : 0;
	if (blocks > 0) {
		float tile[TILE_MAX];
		for (int i = 0; i < P; i++)
			tile[i] = bias[i % N];
		for (int k = 0; k < blocks; k++) {
			float *restrict yb = y + (size_t)k * (size_t)P;
			if (relu) {
				for (int i = 0; i < P; i++) {
					float v = yb[i] + tile[i];
					yb[i] = v > 0.0f ? v : 0.0f;
				}
			} else {
				for (int i = 0; i < P; i++)
					yb[i] += tile[i];
			}
		}
	}
	const int done = blocks * rows_per_block;
	bias_act_rows(y + (size_t)done * (size_t)N, bias, R - done, N, relu);
}

static void bias_act_backward_rows(float *restrict dy, const float *restrict y, float *restrict dbias, int R, int N,
				   int relu)
{
	for (int r = 0; r < R; r++) {
		float *restrict dr = dy + (size_t)r * (size_t)N;
		const float *restrict yr = y + (size_t)r * (size_t)N;
		if (relu) {
			for (int n = 0; n < N; n++)
				dr[n] = yr[n] > 0.0f ? dr[n] : 0.0f;
		}
		if (dbias) {
			for (int n = 0; n < N; n++)
				dbias[n] += dr[n];
		}
	}
}

void dt_bias_act_backward(float *restrict dy, const float *restrict y, float *restrict dbias, int R, int N,
			  int relu)
{
	const int P = tile_period(N);
	const int rows_per_block = P ? P / N : 0;
	const int blocks = P ? R / rows_per_block : 0;
	if (blocks > 0) {
		float acc[TILE_MAX];
		for (int i = 0; i < P; i++)
			acc[i] = 0.0f;
		for (int k = 0; k < blocks; k++) {
			float *restrict db = dy + (size_t)k * (size_t)P;
			const float *restrict yb = y + (size_t)k * (size_t)P;
			if (relu) {
				for (int i = 0; i < P; i++) {
					float d = yb[i] > 0.0f ? db[i] : 0.0f;
					db[i] = d;
					acc[i] += d;
				}
			} else {
				for (int i = 0; i < P; i++)
					acc[i] += db[i];
			}
		}
		if (dbias)
			for (int i = 0; i < P; i++)
				dbias[i % N] += acc[i];
	}
	const int done = blocks * rows_per_block;
	bias_act_backward_rows(dy + (size_t)done * (size_t)N, y + (size_t)done * (size_t)N, dbias, R - done, N, relu);
}

void dt_relu_forward(const float *x, float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void dt_relu_backward(const float *y, const float *dy, float *dx, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* One row of softmax cross-entropy: returns -log softmax(z)[label], writes
 * the row's gradient (scaled by inv_b) when d is not NULL, and adds 1 to
 * *hits when the arg-max (first on ties) is the label. Shared by the uint8
 * and int32 entry points so both give the same bits. */
static inline __attribute__((always_inline)) float xent_row(const float *restrict z, int label, int N, float inv_b,
							   float *restrict d, int *hits)
{
	int best = 0;
	float mx = z[0];
	for (int n = 1; n < N; n++) {
		if (z[n] > mx) {
			mx = z[n];
			best = n;
		}
	}
	*hits += best == label;
	float sum = 0.0f;
	if (d) {
		for (int n = 0; n < N; n++) {
			d[n] = expf(z[n] - mx);
			sum += d[n];
		}
		float scale = inv_b / sum;
		for (int n = 0; n < N; n++)
			d[n] *= scale;
		d[label] -= inv_b;
	} else {
		for (int n = 0; n < N; n++)
			sum += expf(z[n] - mx);
	}
	return logf(sum) - (z[label] - mx);
}

float dt_softmax_xent(const float *restrict logits, const uint8_t *restrict labels, int B, int N,
		      float *restrict dlogits, int *correct)
{
	DT_ASSERT(N > 0);
	double loss = 0;
	int hits = 0;
	const float inv_b = 1.0f / (float)B;
	for (int b = 0; b < B; b++) {
		DT_ASSERT(labels[b] < N);
		loss += (double)xent_row(logits + (size_t)b * (size_t)N, labels[b], N, inv_b,
					 dlogits ? dlogits + (size_t)b * (size_t)N : NULL, &hits);
	}
	if (correct)
		*correct = hits;
	return B > 0 ? (float)(loss / B) : 0.0f;
}

float dt_softmax_xent_i32(const float *restrict logits, const int32_t *restrict labels, int R, int N,
			  float *restrict dlogits, int *correct)
{
	DT_ASSERT(N > 0);
	double loss = 0;
	int hits = 0;
	const float inv_b = 1.0f / (float)R;
	for (int b = 0; b < R; b++) {
		DT_ASSERT(labels[b] >= 0 && labels[b] < N);
		loss += (double)xent_row(logits + (size_t)b * (size_t)N, labels[b], N, inv_b,
					 dlogits ? dlogits + (size_t)b * (size_t)N : NULL, &hits);
	}
	if (correct)
		*correct = hits;
	return R > 0 ? (float)(loss / R) : 0.0f;
}

void dt_dropout_forward(const float *restrict x, float *restrict y, float *restrict mask, size_t n, float rate,
			struct dt_rng *rng)
{
	DT_ASSERT(rate >= 0.0f && rate < 1.0f);
	const float scale = 1.0f / (1.0f - rate);
	const uint32_t drop = dt_rng_u32_threshold(rate);
	struct dt_rng_bulk bulk;
	dt_rng_bulk_seed(&bulk, rng);
	uint32_t u[512];
	for (size_t at = 0; at < n; at += 512) {
		const size_t k = n - at < 512 ? n - at : 512;
		dt_rng_bulk_u32(&bulk, u, k);
		for (size_t i = 0; i < k; i++)
			mask[at + i] = u[i] < drop ? 0.0f : scale;
	}
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] * mask[i];
}

void dt_dropout_backward(const float *mask, const float *dy, float *dx, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = dy[i] * mask[i];
}
