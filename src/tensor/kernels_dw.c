/*
 * Depthwise convolution and batch normalization (tensor/kernels.h), each
 * with its naive twin. The fast depthwise kernels walk output pixels and
 * window taps and run the innermost loop over the contiguous channels of
 * the input pixel, the kernel row and the output pixel, which compilers
 * vectorize; batch norm keeps per-channel accumulators so that every pass
 * over (R, C) is one streaming sweep vectorized over C, with the ReLU or
 * ReLU6 that follows it (MobileNetV2's) applied, and its mask taken, in
 * the same sweep.
 *
 * MobileNetV2's activations are tens of megabytes per layer, so these
 * sweeps are bound by memory, not arithmetic: what counts is the number of
 * passes over (R, C). As in kernels.c, gcc 12 at -O2 would leave these
 * loops scalar (the "very cheap" cost model) and keep float selects as
 * branches; they get the full cost model and no traps.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif
#include "tensor/kernels.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

/* Input row of output row o and tap k, or -1 outside the image. */
static inline int in_pos(int o, int k, int stride, int dil, int pad, int size)
{
	const int i = o * stride - pad + k * dil;
	return i >= 0 && i < size ? i : -1;
}

/* Output row (or column) that tap k of input row i feeds, or -1: the
 * inverse of in_pos, for the gather form of dx. */
static inline int out_pos(int i, int k, int stride, int dil, int pad, int size)
{
	const int t = i + pad - k * dil;
	if (t < 0 || t % stride)
		return -1;
	return t / stride < size ? t / stride : -1;
}

/* ---- multiplier 1, channels a multiple of 16 (MobileNet's) ------------------------
 *
 * Sixteen channels at a time in a vector (one AVX-512 register, two AVX2
 * ones): each output element is summed in a register over the window's
 * taps and stored once, with no per-tap loop set-up, where the plain loops
 * below read and write the output row once per tap. The order of the sums
 * is the plain loops' (bias, then the taps in (kh, kw) order), so both give
 * the same bits. */
typedef float v16 __attribute__((vector_size(64), aligned(4), __may_alias__));
#define V16_MAX_TAPS 49

/* Macros, not functions: a function returning a 64-byte vector has another
 * ABI without AVX-512 (gcc's -Wpsabi, the sanitizer build's generic x86-64). */
#define ld16(p) (*(const v16 *)(p))
#define st16(p, v) (*(v16 *)(p) = (v))

static int use_v16(const struct dt_dw_geom *g)
{
	return g->M == 1 && g->C % 16 == 0 && g->KH * g->KW <= V16_MAX_TAPS;
}

/* The valid taps of output pixel (b, oh, ow): offsets into x and the kernel. */
static int taps_of_output(const struct dt_dw_geom *g, int b, int oh, int ow, size_t *xo, size_t *ko)
{
	int n = 0;
	for (int kh = 0; kh < g->KH; kh++) {
		const int ih = in_pos(oh, kh, g->SH, g->DH, g->PT, g->H);
		if (ih < 0)
			continue;
		for (int kw = 0; kw < g->KW; kw++) {
			const int iw = in_pos(ow, kw, g->SW, g->DW, g->PL, g->W);
			if (iw < 0)
				continue;
			xo[n] = (((size_t)b * g->H + ih) * g->W + iw) * (size_t)g->C;
			ko[n++] = ((size_t)kh * g->KW + kw) * (size_t)g->C;
		}
	}
	return n;
}

static void depthwise_forward_v16(const struct dt_dw_geom *g, const float *x, const float *k, const float *bias,
				  float *y, int B)
{
	const int C = g->C;
	size_t xo[V16_MAX_TAPS], ko[V16_MAX_TAPS];
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < g->OH; oh++)
			for (int ow = 0; ow < g->OW; ow++) {
				const int n = taps_of_output(g, b, oh, ow, xo, ko);
				float *yr = y + (((size_t)b * g->OH + oh) * g->OW + ow) * (size_t)C;
				for (int c = 0; c < C; c += 16) {
					v16 acc = bias ? ld16(bias + c) : (v16){ 0 };
					for (int t = 0; t < n; t++)
						acc += ld16(x + xo[t] + c) * ld16(k + ko[t] + c);
					st16(yr + c, acc);
				}
			}
}

/* dk and dbias over every output pixel; dx gathered per input pixel. */
static void depthwise_backward_v16(const struct dt_dw_geom *g, const float *x, const float *k, const float *dy,
				   float *dx, float *dk, float *dbias, int B)
{
	const int C = g->C;
	size_t xo[V16_MAX_TAPS], ko[V16_MAX_TAPS];
	memset(dk, 0, (size_t)g->KH * g->KW * (size_t)C * sizeof(float));
	if (dbias)
		memset(dbias, 0, (size_t)C * sizeof(float));
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < g->OH; oh++)
			for (int ow = 0; ow < g->OW; ow++) {
				const int n = taps_of_output(g, b, oh, ow, xo, ko);
				const float *dyr = dy + (((size_t)b * g->OH + oh) * g->OW + ow) * (size_t)C;
				for (int c = 0; c < C; c += 16) {
					const v16 d = ld16(dyr + c);
					if (dbias)
						st16(dbias + c, ld16(dbias + c) + d);
					for (int t = 0; t < n; t++)
						st16(dk + ko[t] + c, ld16(dk + ko[t] + c) + ld16(x + xo[t] + c) * d);
				}
			}
	if (!dx)
		return;
	for (int b = 0; b < B; b++)
		for (int ih = 0; ih < g->H; ih++)
			for (int iw = 0; iw < g->W; iw++) {
				int n = 0;
				for (int kh = 0; kh < g->KH; kh++) {
					const int oh = out_pos(ih, kh, g->SH, g->DH, g->PT, g->OH);
					if (oh < 0)
						continue;
					for (int kw = 0; kw < g->KW; kw++) {
						const int ow = out_pos(iw, kw, g->SW, g->DW, g->PL, g->OW);
						if (ow < 0)
							continue;
						xo[n] = (((size_t)b * g->OH + oh) * g->OW + ow) * (size_t)C; /* into dy */
						ko[n++] = ((size_t)kh * g->KW + kw) * (size_t)C;
					}
				}
				float *dxr = dx + (((size_t)b * g->H + ih) * g->W + iw) * (size_t)C;
				for (int c = 0; c < C; c += 16) {
					v16 acc = { 0 };
					for (int t = 0; t < n; t++)
						acc += ld16(k + ko[t] + c) * ld16(dy + xo[t] + c);
					st16(dxr + c, acc);
				}
			}
}

void dt_depthwise_forward(const struct dt_dw_geom *g, const float *restrict x, const float *restrict k,
			  const float *restrict bias, float *restrict y, int B)
{
	const int C = g->C, M = g->M, CM = C * M;
	if (use_v16(g)) {
		depthwise_forward_v16(g, x, k, bias, y, B);
		return;
	}
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < g->OH; oh++)
			for (int ow = 0; ow < g->OW; ow++) {
				float *restrict yr = y + (((size_t)b * g->OH + oh) * g->OW + ow) * (size_t)CM;
				if (bias)
					memcpy(yr, bias, (size_t)CM * sizeof(float));
				else
					memset(yr, 0, (size_t)CM * sizeof(float));
				for (int kh = 0; kh < g->KH; kh++) {
					const int ih = in_pos(oh, kh, g->SH, g->DH, g->PT, g->H);
					if (ih < 0)
						continue;
					for (int kw = 0; kw < g->KW; kw++) {
						const int iw = in_pos(ow, kw, g->SW, g->DW, g->PL, g->W);
						if (iw < 0)
							continue;
						const float *restrict xr = x + (((size_t)b * g->H + ih) * g->W + iw) * (size_t)C;
						const float *restrict kr = k + ((size_t)kh * g->KW + kw) * (size_t)CM;
						if (M == 1) {
							for (int c = 0; c < C; c++)
								yr[c] += xr[c] * kr[c];
						} else {
							for (int c = 0; c < C; c++)
								for (int m = 0; m < M; m++)
									yr[c * M + m] += xr[c] * kr[c * M + m];
						}
					}
				}
			}
}


/* Multiplier 1 (MobileNet's) dx, gathered: each input pixel's row written
 * once from the taps that read it, rather than cleared and then added to by
 * every tap (a pass over dx and eight read-modify-writes of it less per
 * pixel). */
static void depthwise_dx_gather_m1(const struct dt_dw_geom *g, const float *restrict k, const float *restrict dy,
				   float *restrict dx, int B)
{
	const int C = g->C;
	for (int b = 0; b < B; b++)
		for (int ih = 0; ih < g->H; ih++)
			for (int iw = 0; iw < g->W; iw++) {
				float *restrict dxr = dx + (((size_t)b * g->H + ih) * g->W + iw) * (size_t)C;
				memset(dxr, 0, (size_t)C * sizeof(float));
				for (int kh = 0; kh < g->KH; kh++) {
					const int oh = out_pos(ih, kh, g->SH, g->DH, g->PT, g->OH);
					if (oh < 0)
						continue;
					for (int kw = 0; kw < g->KW; kw++) {
						const int ow = out_pos(iw, kw, g->SW, g->DW, g->PL, g->OW);
						if (ow < 0)
							continue;
						const float *restrict dyr = dy + (((size_t)b * g->OH + oh) * g->OW + ow) * (size_t)C;
						const float *restrict kr = k + ((size_t)kh * g->KW + kw) * (size_t)C;
						for (int c = 0; c < C; c++)
							dxr[c] += kr[c] * dyr[c];
					}
				}
			}
}

/* dk and dbias summed over the output pixels tap by tap (each tap's row
 * stays in L1); dx scattered from each tap with a multiplier, gathered
 * afterwards without one. */
void dt_depthwise_backward(const struct dt_dw_geom *g, const float *restrict x, const float *restrict k,
			   const float *restrict dy, float *restrict dx, float *restrict dk, float *restrict dbias,
			   int B)
{
	const int C = g->C, M = g->M, CM = C * M;
	if (use_v16(g)) {
		depthwise_backward_v16(g, x, k, dy, dx, dk, dbias, B);
		return;
	}
	memset(dk, 0, (size_t)g->KH * g->KW * (size_t)CM * sizeof(float));
	if (dbias)
		memset(dbias, 0, (size_t)CM * sizeof(float));
	if (dx && M > 1)
		memset(dx, 0, (size_t)B * g->H * g->W * (size_t)C * sizeof(float));
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < g->OH; oh++)
			for (int ow = 0; ow < g->OW; ow++) {
				const float *restrict dyr = dy + (((size_t)b * g->OH + oh) * g->OW + ow) * (size_t)CM;
				if (dbias)
					for (int o = 0; o < CM; o++)
						dbias[o] += dyr[o];
				for (int kh = 0; kh < g->KH; kh++) {
					const int ih = in_pos(oh, kh, g->SH, g->DH, g->PT, g->H);
					if (ih < 0)
						continue;
					for (int kw = 0; kw < g->KW; kw++) {
						const int iw = in_pos(ow, kw, g->SW, g->DW, g->PL, g->W);
						if (iw < 0)
							continue;
						const size_t px = (((size_t)b * g->H + ih) * g->W + iw) * (size_t)C;
						const float *restrict xr = x + px;
						const size_t tap = ((size_t)kh * g->KW + kw) * (size_t)CM;
						const float *restrict kr = k + tap;
						float *restrict dkr = dk + tap;
						if (M == 1) {
							for (int c = 0; c < C; c++)
								dkr[c] += xr[c] * dyr[c];
						} else {
							for (int c = 0; c < C; c++)
								for (int m = 0; m < M; m++) {
									dkr[c * M + m] += xr[c] * dyr[c * M + m];
									if (dx)
										dx[px + (size_t)c] += kr[c * M + m] * dyr[c * M + m];
								}
						}
					}
				}
			}
	if (dx && M == 1)
		depthwise_dx_gather_m1(g, k, dy, dx, B);
}

/* The naive twins: one output (or parameter) element at a time, sums in double. */

void dt_depthwise_forward_naive(const struct dt_dw_geom *g, const float *x, const float *k, const float *bias,
				float *y, int B)
{
	const int CM = g->C * g->M;
	for (int b = 0; b < B; b++)
		for (int o = 0; o < CM; o++)
			for (int oh = 0; oh < g->OH; oh++)
				for (int ow = 0; ow < g->OW; ow++) {
					const int c = o / g->M;
					double s = bias ? (double)bias[o] : 0.0;
					for (int kh = 0; kh < g->KH; kh++)
						for (int kw = 0; kw < g->KW; kw++) {
							const int ih = oh * g->SH - g->PT + kh * g->DH;
							const int iw = ow * g->SW - g->PL + kw * g->DW;
							if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
								continue;
							s += (double)x[(((size_t)b * g->H + ih) * g->W + iw) * g->C + c] *
							     (double)k[((size_t)kh * g->KW + kw) * CM + o];
						}
					y[(((size_t)b * g->OH + oh) * g->OW + ow) * CM + o] = (float)s;
				}
}

void dt_depthwise_backward_naive(const struct dt_dw_geom *g, const float *x, const float *k, const float *dy,
				 float *dx, float *dk, float *dbias, int B)
{
	const int CM = g->C * g->M;
	for (int o = 0; o < CM; o++) {
		const int c = o / g->M;
		double sb = 0.0;
		for (int b = 0; b < B; b++)
			for (int oh = 0; oh < g->OH; oh++)
				for (int ow = 0; ow < g->OW; ow++)
					sb += (double)dy[(((size_t)b * g->OH + oh) * g->OW + ow) * CM + o];
		if (dbias)
			dbias[o] = (float)sb;
		for (int kh = 0; kh < g->KH; kh++)
			for (int kw = 0; kw < g->KW; kw++) {
				double s = 0.0;
				for (int b = 0; b < B; b++)
					for (int oh = 0; oh < g->OH; oh++)
						for (int ow = 0; ow < g->OW; ow++) {
							const int ih = oh * g->SH - g->PT + kh * g->DH;
							const int iw = ow * g->SW - g->PL + kw * g->DW;
							if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
								continue;
							s += (double)x[(((size_t)b * g->H + ih) * g->W + iw) * g->C + c] *
							     (double)dy[(((size_t)b * g->OH + oh) * g->OW + ow) * CM + o];
						}
				dk[((size_t)kh * g->KW + kw) * CM + o] = (float)s;
			}
	}
	if (!dx)
		return;
	/* dx[b, ih, iw, c]: every (output pixel, tap, m) that read it */
	for (int b = 0; b < B; b++)
		for (int ih = 0; ih < g->H; ih++)
			for (int iw = 0; iw < g->W; iw++)
				for (int c = 0; c < g->C; c++) {
					double s = 0.0;
					for (int oh = 0; oh < g->OH; oh++)
						for (int ow = 0; ow < g->OW; ow++)
							for (int kh = 0; kh < g->KH; kh++)
								for (int kw = 0; kw < g->KW; kw++) {
									if (oh * g->SH - g->PT + kh * g->DH != ih ||
									    ow * g->SW - g->PL + kw * g->DW != iw)
										continue;
									for (int m = 0; m < g->M; m++) {
										const int o = c * g->M + m;
										s += (double)k[((size_t)kh * g->KW + kw) * CM + o] *
										     (double)dy[(((size_t)b * g->OH + oh) * g->OW + ow) * CM + o];
									}
								}
					dx[(((size_t)b * g->H + ih) * g->W + iw) * g->C + c] = (float)s;
				}
}

/* ---- batch normalization ------------------------------------------------------ */

/* Rows per block of the mean's per-channel sums: partials over a short
 * block, then added up, lose less to rounding on long batches. */
#define BN_BLOCK 64

void dt_batchnorm_moments(const float *restrict x, float *restrict mean, float *restrict var, int R, int C)
{
	DT_ASSERT(R >= 1);
	float *restrict part = var; /* var holds block partials until the second pass */
	for (int c = 0; c < C; c++)
		mean[c] = 0.0f;
	/* Pass 1: the mean, from block partials (in var for now). */
	for (int r0 = 0; r0 < R; r0 += BN_BLOCK) {
		const int r1 = r0 + BN_BLOCK < R ? r0 + BN_BLOCK : R;
		for (int c = 0; c < C; c++)
			part[c] = 0.0f;
		for (int r = r0; r < r1; r++) {
			const float *restrict xr = x + (size_t)r * (size_t)C;
			for (int c = 0; c < C; c++)
				part[c] += xr[c];
		}
		for (int c = 0; c < C; c++)
			mean[c] += part[c];
	}
	const float inv = 1.0f / (float)R;
	for (int c = 0; c < C; c++)
		mean[c] *= inv;
	/* Pass 2: the variance about the mean (two passes: no cancellation). */
	for (int c = 0; c < C; c++)
		var[c] = 0.0f;
	for (int r = 0; r < R; r++) {
		const float *restrict xr = x + (size_t)r * (size_t)C;
		for (int c = 0; c < C; c++) {
			const float d = xr[c] - mean[c];
			var[c] += d * d;
		}
	}
	for (int c = 0; c < C; c++)
		var[c] *= inv;
}

void dt_batchnorm_moments_naive(const float *x, float *mean, float *var, int R, int C)
{
	for (int c = 0; c < C; c++) {
		double s = 0.0, q = 0.0;
		for (int r = 0; r < R; r++)
			s += (double)x[(size_t)r * C + c];
		const double m = s / R;
		for (int r = 0; r < R; r++) {
			const double d = (double)x[(size_t)r * C + c] - m;
			q += d * d;
		}
		mean[c] = (float)m;
		var[c] = (float)(q / R);
	}
}

/* The upper clamp of a fused activation: ReLU6's 6, ReLU's none. */
static float act_top(enum dt_act act)
{
	DT_ASSERT(act == DT_ACT_LINEAR || act == DT_ACT_RELU || act == DT_ACT_RELU6);
	return act == DT_ACT_RELU6 ? 6.0f : INFINITY;
}

void dt_batchnorm_apply(const float *x, const float *restrict mean, const float *restrict rstd,
			const float *restrict gamma, const float *restrict beta, float *y, int R, int C, enum dt_act act)
{
	const float top = act_top(act);
	for (int r = 0; r < R; r++) {
		const float *xr = x + (size_t)r * (size_t)C;
		float *yr = y + (size_t)r * (size_t)C;
		if (act == DT_ACT_LINEAR) {
			for (int c = 0; c < C; c++)
				yr[c] = (xr[c] - mean[c]) * (rstd[c] * gamma[c]) + beta[c];
		} else {
			for (int c = 0; c < C; c++) {
				float v = (xr[c] - mean[c]) * (rstd[c] * gamma[c]) + beta[c];
				v = v > 0.0f ? v : 0.0f;
				yr[c] = v < top ? v : top;
			}
		}
	}
}

void dt_batchnorm_apply_naive(const float *x, const float *mean, const float *rstd, const float *gamma,
			      const float *beta, float *y, int R, int C, enum dt_act act)
{
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			double v = ((double)x[(size_t)r * C + c] - (double)mean[c]) * (double)rstd[c] * (double)gamma[c] +
				   (double)beta[c];
			if (act != DT_ACT_LINEAR)
				v = fmin(fmax(v, 0.0), (double)act_top(act));
			y[(size_t)r * C + c] = (float)v;
		}
}

/* The forward's pre-activation of one element, in the same float
 * operations as dt_batchnorm_apply, so the backward's mask agrees with the
 * forward's clamp bit for bit without reading the forward's output. */
static inline float bn_pre(float x, float mean, float rstd, float gamma, float beta)
{
	return (x - mean) * (rstd * gamma) + beta;
}

/* dy where the fused activation passed its input (0 < v < top), else 0. */
static inline float act_pass(float dy, float v, float top)
{
	return v > 0.0f && v < top ? dy : 0.0f;
}

void dt_batchnorm_backward(const float *restrict dy, const float *restrict x, const float *restrict mean,
			   const float *restrict rstd, const float *restrict gamma, const float *restrict beta,
			   float *restrict dx, float *restrict dgamma, float *restrict dbeta, int R, int C,
			   int batch_stats, enum dt_act act)
{
	const float top = act_top(act);
	for (int c = 0; c < C; c++) {
		dgamma[c] = 0.0f;
		dbeta[c] = 0.0f;
	}
	/* dbeta = sum g, dgamma = sum g * xhat, xhat = (x - mean) * rstd, with
	 * g = dy through the activation's mask, recomputed from x in both
	 * passes: two streams (dy, x) per pass instead of three */
	for (int r = 0; r < R; r++) {
		const float *restrict dyr = dy + (size_t)r * (size_t)C, *restrict xr = x + (size_t)r * (size_t)C;
		if (act == DT_ACT_LINEAR) {
			for (int c = 0; c < C; c++) {
				dbeta[c] += dyr[c];
				dgamma[c] += dyr[c] * (xr[c] - mean[c]);
			}
		} else {
			for (int c = 0; c < C; c++) {
				const float g = act_pass(dyr[c], bn_pre(xr[c], mean[c], rstd[c], gamma[c], beta[c]), top);
				dbeta[c] += g;
				dgamma[c] += g * (xr[c] - mean[c]);
			}
		}
	}
	for (int c = 0; c < C; c++)
		dgamma[c] *= rstd[c];
	if (!dx)
		return;
	const float inv = 1.0f / (float)R;
	for (int r = 0; r < R; r++) {
		const float *restrict dyr = dy + (size_t)r * (size_t)C, *restrict xr = x + (size_t)r * (size_t)C;
		float *restrict dxr = dx + (size_t)r * (size_t)C;
		if (batch_stats && act != DT_ACT_LINEAR) {
			/* dx = gamma * rstd * (g - mean(g) - xhat * mean(g * xhat)) */
			for (int c = 0; c < C; c++) {
				const float g = act_pass(dyr[c], bn_pre(xr[c], mean[c], rstd[c], gamma[c], beta[c]), top);
				const float xhat = (xr[c] - mean[c]) * rstd[c];
				dxr[c] = gamma[c] * rstd[c] * (g - dbeta[c] * inv - xhat * dgamma[c] * inv);
			}
		} else if (batch_stats) {
			for (int c = 0; c < C; c++) {
				const float xhat = (xr[c] - mean[c]) * rstd[c];
				dxr[c] = gamma[c] * rstd[c] * (dyr[c] - dbeta[c] * inv - xhat * dgamma[c] * inv);
			}
		} else if (act != DT_ACT_LINEAR) {
			for (int c = 0; c < C; c++)
				dxr[c] = gamma[c] * rstd[c] *
					 act_pass(dyr[c], bn_pre(xr[c], mean[c], rstd[c], gamma[c], beta[c]), top);
		} else {
			for (int c = 0; c < C; c++)
				dxr[c] = gamma[c] * rstd[c] * dyr[c];
		}
	}
}

void dt_batchnorm_backward_naive(const float *dy, const float *x, const float *mean, const float *rstd,
				 const float *gamma, const float *beta, float *dx, float *dgamma, float *dbeta, int R,
				 int C, int batch_stats, enum dt_act act)
{
	const float top = act_top(act);
	for (int c = 0; c < C; c++) {
		double sb = 0.0, sg = 0.0;
		/* the mask: where the forward's float pre-activation was not clamped */
#define PASSES(r) (act == DT_ACT_LINEAR || act_pass(1.0f, bn_pre(x[(size_t)(r) * C + c], mean[c], rstd[c], gamma[c], beta[c]), top) != 0.0f)
		for (int r = 0; r < R; r++) {
			const double d = PASSES(r) ? (double)dy[(size_t)r * C + c] : 0.0;
			sb += d;
			sg += d * ((double)x[(size_t)r * C + c] - (double)mean[c]) * (double)rstd[c];
		}
		dbeta[c] = (float)sb;
		dgamma[c] = (float)sg;
		if (!dx)
			continue;
		for (int r = 0; r < R; r++) {
			const double xhat = ((double)x[(size_t)r * C + c] - (double)mean[c]) * (double)rstd[c];
			const double d = PASSES(r) ? (double)dy[(size_t)r * C + c] : 0.0;
			dx[(size_t)r * C + c] = batch_stats ? (float)((double)gamma[c] * (double)rstd[c] * (d - sb / R - xhat * sg / R))
							    : (float)((double)gamma[c] * (double)rstd[c] * d);
		}
#undef PASSES
	}
}
