/*
 * Direct one-channel convolution fused with bias, ReLU and 2x2 max pooling
 * (kernels_direct.h explains the why and the layout; this file the how).
 *
 * Planes. Each image is copied once into two planes of XW floats per
 * padded row: xe[r][j] = xpad[r][2j] and xo[r][j] = xpad[r][2j + 1], where
 * xpad is the image with its zero padding (row r = ih + pad, column
 * c = iw + pad). The conv output at row oh, column 2j + par, tap (kh, kw)
 * reads xpad[oh + kh][2j + par + kw], which for the 16 pooled columns j is
 * one contiguous vector of a plane:
 *
 *   par 0, kw even: xe[.][j + kw/2]     par 1, kw even: xo[.][j + kw/2]
 *   par 0, kw odd:  xo[.][j + kw/2]     par 1, kw odd:  xe[.][j + kw/2 + 1]
 *
 * Forward keeps, per output channel, the four conv rows of a pooling
 * window row (row 2ph or 2ph + 1, even or odd column) as four 16-lane
 * accumulators, walks the KH + 1 input rows those two output rows read
 * and the KW taps, and pools in registers. Lanes past the pooled width
 * compute on the planes' zero tail and are never stored.
 *
 * Backward builds dz, the gradient at the conv output before bias, in the
 * same four-vector layout (zero except at each window's winner, masked by
 * ReLU), and accumulates dk[kh][kw][o] as 16-lane partial sums over every
 * image and row, reduced across lanes once at the end.
 *
 * Register blocking (output channels per pass): chosen for AVX-512's 32
 * vector registers or the 16 of AVX2 and older; GCC's vector extensions
 * lower the 16-float vectors to whatever the target has. The window width
 * is a compile-time constant for 3 and 5 (dtrain's models) so the tap loop
 * unrolls and the backward accumulators stay in registers.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast", "vect-cost-model=dynamic")
#endif
#include "tensor/kernels_direct.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

#define LANES 16
#define XW 32 /* even (odd) columns split per padded row: 16 pooled columns plus the taps' reach */

#if defined(__AVX512F__)
#define OCB_FWD 6
#define OCB_BWD 1
#else
#define OCB_FWD 1
#define OCB_BWD 1
#endif

/* Unaligned vector load and store (memcpy compiles to one move). Pointer
 * arguments only: passing 64-byte vectors by value changes the ABI on
 * targets without AVX-512 and gcc warns about it. */
static inline __attribute__((always_inline)) void ld(v16 *v, const float *p)
{
	memcpy(v, p, sizeof(*v));
}

static inline __attribute__((always_inline)) void st(float *p, const v16 *v)
{
	memcpy(p, v, sizeof(*v));
}

/*
 * Multiply-adds are fused (one rounding) on every build, so that results
 * do not depend on the target: where the CPU has FMA (every AVX2 and
 * AVX-512 machine) `acc += a * b` is contracted into one instruction
 * (fp-contract=fast above); without it (the sanitizer build, which is not
 * -march=native) each lane calls fmaf, slow but rounded the same.
 */
#if defined(__FMA__) || defined(__AVX512F__)
#define HAVE_FMA 1
#else
#define HAVE_FMA 0
#endif

/* *acc += *a * b */
static inline __attribute__((always_inline)) void fma_s(v16 *acc, const v16 *a, float b)
{
	if (HAVE_FMA) {
		*acc += *a * b;
		return;
	}
	for (int i = 0; i < LANES; i++)
		(*acc)[i] = __builtin_fmaf((*a)[i], b, (*acc)[i]);
}

/* *acc += *a * *b */
static inline __attribute__((always_inline)) void fma_v(v16 *acc, const v16 *a, const v16 *b)
{
	if (HAVE_FMA) {
		*acc += *a * *b;
		return;
	}
	for (int i = 0; i < LANES; i++)
		(*acc)[i] = __builtin_fmaf((*a)[i], (*b)[i], (*acc)[i]);
}

int dt_conv1_pool_supported(const struct dt_conv_geom *g)
{
	return g->C == 1 && g->stride == 1 && g->OH >= 2 && g->OW >= 2 && g->OW / 2 <= LANES && g->KW <= LANES &&
	       g->W + g->pad <= 2 * XW;
}

/* Plane rows the kernels read: the last pooled row's second conv row plus KH - 1. */
static int plane_rows(const struct dt_conv_geom *g)
{
	return 2 * (g->OH / 2) + g->KH - 1;
}

/* Shifts kept per plane: 0 .. KW/2 (the table at the top). */
static inline int plane_shifts(int KW)
{
	return KW / 2 + 1;
}

/* Floats of one padded row in the planes: even then odd, each shifted by
 * 0 .. NS-1, LANES floats each; a multiple of LANES, so every vector the
 * kernels load is 64-byte aligned and no load splits a cache line. */
static inline size_t plane_row_floats(int KW)
{
	return 2 * (size_t)plane_shifts(KW) * LANES;
}

size_t dt_conv1_pool_scratch_floats(const struct dt_conv_geom *g, int OC)
{
	const size_t planes = (size_t)plane_rows(g) * plane_row_floats(g->KW) + LANES; /* + alignment slack */
	const size_t dz = (size_t)OC * (size_t)(g->OH / 2) * 4 * LANES;
	const size_t acc = (size_t)OC * (size_t)g->KH * (size_t)g->KW * LANES + (size_t)OC;
	return planes + dz + acc;
}

/* The planes at the first 64-byte boundary of scratch. */
static float *planes_of(float *scratch)
{
	return (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
}

/* planes (rows, plane_row_floats) from image xb (H, W). */
static void split_image(const struct dt_conv_geom *g, const float *restrict xb, float *restrict planes)
{
	const int rows = plane_rows(g), P = g->pad, H = g->H, W = g->W, NS = plane_shifts(g->KW);
	const size_t rf = plane_row_floats(g->KW);
	for (int r = 0; r < rows; r++) {
		float t[2 * XW], e[XW], o[XW];
		memset(t, 0, sizeof(t));
		const int ih = r - P;
		if (ih >= 0 && ih < H)
			memcpy(t + P, xb + (size_t)ih * (size_t)W, (size_t)W * sizeof(float));
		for (int j = 0; j < XW; j++) {
			e[j] = t[2 * j];
			o[j] = t[2 * j + 1];
		}
		float *restrict row = planes + (size_t)r * rf;
		for (int sh = 0; sh < NS; sh++) {
			memcpy(row + (size_t)sh * LANES, e + sh, LANES * sizeof(float));
			memcpy(row + (size_t)(NS + sh) * LANES, o + sh, LANES * sizeof(float));
		}
	}
}

/* The plane vectors under even (E) and odd (O) output columns for tap kw
 * of plane row `row` (see the table at the top). */
static inline __attribute__((always_inline)) void tap_vectors(const float *row, int KW, int kw, v16 *E, v16 *O)
{
	const int NS = plane_shifts(KW);
	const float *e = row, *o = row + (size_t)NS * LANES;
	if (kw & 1) {
		ld(E, o + (size_t)(kw / 2) * LANES);
		ld(O, e + (size_t)(kw / 2 + 1) * LANES);
	} else {
		ld(E, e + (size_t)(kw / 2) * LANES);
		ld(O, o + (size_t)(kw / 2) * LANES);
	}
}

/* ---- forward ------------------------------------------------------------- */

/* Pooled row ph, output channels o0 .. o0+ocb-1: pool (OC, LANES) gets
 * act(max over each window of the conv + bias), arg (OC, LANES) the winner. */
static inline __attribute__((always_inline)) void fwd_channels(const struct dt_conv_geom *g, int OC,
								const float *planes, const float *restrict k,
								const float *restrict bias, int relu, int ph,
								float *restrict pool, int32_t *restrict arg, int o0,
								const int ocb, const int KW)
{
	const int KH = g->KH;
	const v16 zero = { 0 };
	v16 acc[OCB_FWD][4]; /* [o][dh*2 + dw] */
#pragma GCC unroll 8
	for (int o = 0; o < ocb; o++)
		acc[o][0] = acc[o][1] = acc[o][2] = acc[o][3] = zero;
	for (int kh = 0; kh < KH; kh++) {
		const size_t rf = plane_row_floats(KW);
		const float *r0 = planes + (size_t)(2 * ph + kh) * rf, *r1 = r0 + rf;
		const float *w = k + (size_t)kh * (size_t)KW * (size_t)OC + (size_t)o0;
#pragma GCC unroll 16
		for (int kw = 0; kw < KW; kw++) {
			v16 E0, O0, E1, O1;
			tap_vectors(r0, KW, kw, &E0, &O0);
			tap_vectors(r1, KW, kw, &E1, &O1);
#pragma GCC unroll 8
			for (int o = 0; o < ocb; o++) {
				const float wv = w[(size_t)kw * (size_t)OC + (size_t)o];
				fma_s(&acc[o][0], &E0, wv);
				fma_s(&acc[o][1], &O0, wv);
				fma_s(&acc[o][2], &E1, wv);
				fma_s(&acc[o][3], &O1, wv);
			}
		}
	}
#pragma GCC unroll 8
	for (int o = 0; o < ocb; o++) {
		/* dt_maxpool2_forward's tournament: ties go to the first. */
		const v16 *v = acc[o];
		const vi16 g01 = v[1] > v[0], g23 = v[3] > v[2];
		const v16 m01 = (v16)(((vi16)v[1] & g01) | ((vi16)v[0] & ~g01));
		const v16 m23 = (v16)(((vi16)v[3] & g23) | ((vi16)v[2] & ~g23));
		const vi16 gg = m23 > m01;
		v16 best = (v16)(((vi16)m23 & gg) | ((vi16)m01 & ~gg));
		if (bias)
			best += bias[o0 + o];
		if (relu)
			best = (v16)((vi16)best & (best > zero));
		const vi16 k01 = g01 & 1, k23 = (g23 & 1) + 2;
		const vi16 win = (k23 & gg) | (k01 & ~gg);
		st(pool + (size_t)(o0 + o) * LANES, &best);
		memcpy(arg + (size_t)(o0 + o) * LANES, &win, sizeof(win));
	}
}

/* One image: yb (PH, PW, OC) and ab from the planes. Bias and ReLU come
 * after the pooling: both are monotonic, so the maximum is the same, and
 * where ReLU makes several window values 0 the winner may differ from
 * pooling after ReLU, but then the output is 0 and the gradient through
 * every position is 0 either way. */
static inline __attribute__((always_inline)) void fwd_image(const struct dt_conv_geom *g, int OC,
							     const float *planes, const float *k, const float *bias,
							     int relu, float *restrict yb, int32_t *restrict ab,
							     float *restrict pool, int32_t *restrict arg, const int KW)
{
	const int PH = g->OH / 2, PW = g->OW / 2;
	for (int ph = 0; ph < PH; ph++) {
		int o0 = 0;
		for (; o0 + OCB_FWD <= OC; o0 += OCB_FWD)
			fwd_channels(g, OC, planes, k, bias, relu, ph, pool, arg, o0, OCB_FWD, KW);
		if (OCB_FWD > 4 && o0 + 4 <= OC) {
			fwd_channels(g, OC, planes, k, bias, relu, ph, pool, arg, o0, 4, KW);
			o0 += 4;
		}
		if (OCB_FWD > 2 && o0 + 2 <= OC) {
			fwd_channels(g, OC, planes, k, bias, relu, ph, pool, arg, o0, 2, KW);
			o0 += 2;
		}
		for (; o0 < OC; o0++)
			fwd_channels(g, OC, planes, k, bias, relu, ph, pool, arg, o0, 1, KW);
		/* (OC, LANES) -> (PW, OC) */
		float *restrict yr = yb + (size_t)ph * (size_t)PW * (size_t)OC;
		int32_t *restrict ar = ab + (size_t)ph * (size_t)PW * (size_t)OC;
		for (int pw = 0; pw < PW; pw++)
			for (int o = 0; o < OC; o++) {
				yr[(size_t)pw * (size_t)OC + (size_t)o] = pool[(size_t)o * LANES + (size_t)pw];
				ar[(size_t)pw * (size_t)OC + (size_t)o] = arg[(size_t)o * LANES + (size_t)pw];
			}
	}
}

void dt_conv1_pool_forward(const struct dt_conv_geom *g, int OC, const float *x, const float *k, const float *bias,
			   int relu, float *y, int32_t *argmax, int B, float *scratch)
{
	DT_ASSERT(dt_conv1_pool_supported(g) && OC >= 1);
	float *planes = planes_of(scratch);
	float *pool = planes + (size_t)plane_rows(g) * plane_row_floats(g->KW); /* (OC, LANES) */
	int32_t *arg = (int32_t *)(pool + (size_t)OC * LANES); /* (OC, LANES) */
	const size_t in_elems = (size_t)g->H * (size_t)g->W;
	const size_t out_elems = (size_t)(g->OH / 2) * (size_t)(g->OW / 2) * (size_t)OC;
	for (int b = 0; b < B; b++) {
		split_image(g, x + (size_t)b * in_elems, planes);
		float *yb = y + (size_t)b * out_elems;
		int32_t *ab = argmax + (size_t)b * out_elems;
		switch (g->KW) {
		case 3:
			fwd_image(g, OC, planes, k, bias, relu, yb, ab, pool, arg, 3);
			break;
		case 5:
			fwd_image(g, OC, planes, k, bias, relu, yb, ab, pool, arg, 5);
			break;
		default:
			fwd_image(g, OC, planes, k, bias, relu, yb, ab, pool, arg, g->KW);
			break;
		}
	}
}

/* ---- backward ------------------------------------------------------------ */

/* dz (OC, PH, 4, LANES) of one image: the pooled gradient (ReLU-masked) at
 * each window's winner q = dh*2 + dw, 0 elsewhere; sum (OC) += its sums. */
static void route_image(const struct dt_conv_geom *g, int OC, const float *restrict yb, const float *restrict dyb,
			const int32_t *restrict ab, int relu, float *restrict dz, float *restrict sum)
{
	const int PH = g->OH / 2, PW = g->OW / 2;
	memset(dz, 0, (size_t)OC * (size_t)PH * 4 * LANES * sizeof(float));
	for (int ph = 0; ph < PH; ph++)
		for (int pw = 0; pw < PW; pw++) {
			const size_t at = ((size_t)ph * (size_t)PW + (size_t)pw) * (size_t)OC;
			for (int o = 0; o < OC; o++) {
				/* branch-free: the ReLU mask is data, a branch would mispredict */
				const float keep = relu ? (float)(yb[at + (size_t)o] > 0.0f) : 1.0f;
				const float d = dyb[at + (size_t)o] * keep;
				sum[o] += d;
				const size_t q = (size_t)(ab[at + (size_t)o] & 3);
				dz[(((size_t)o * (size_t)PH + (size_t)ph) * 4 + q) * LANES + (size_t)pw] = d;
			}
		}
}

/* acc (OC, KH, KW, LANES) += the lane-wise kernel gradient of one image,
 * output channels o0 .. o0+ocb-1. */
static inline __attribute__((always_inline)) void bwd_channels(const struct dt_conv_geom *g, const float *planes,
								const float *restrict dz,
								float *restrict acc, int o0, const int ocb, const int KW)
{
	const int KH = g->KH, PH = g->OH / 2;
	for (int kh = 0; kh < KH; kh++) {
		/* Separate sums for the even and odd columns: two independent
		 * FMA chains per tap instead of one twice as long. */
		v16 sE[OCB_BWD][LANES] = { { { 0 } } }, sO[OCB_BWD][LANES] = { { { 0 } } };
		for (int ph = 0; ph < PH; ph++)
			for (int r = 0; r < 2; r++) {
				const float *row = planes + (size_t)(2 * ph + r + kh) * plane_row_floats(KW);
				v16 dE[OCB_BWD], dO[OCB_BWD];
#pragma GCC unroll 8
				for (int o = 0; o < ocb; o++) {
					const float *d = dz + (((size_t)(o0 + o) * (size_t)PH + (size_t)ph) * 4 + 2 * (size_t)r) * LANES;
					ld(&dE[o], d);
					ld(&dO[o], d + LANES);
				}
#pragma GCC unroll 16
				for (int kw = 0; kw < KW; kw++) {
					v16 E, O;
					tap_vectors(row, KW, kw, &E, &O);
#pragma GCC unroll 8
					for (int o = 0; o < ocb; o++) {
						fma_v(&sE[o][kw], &dE[o], &E);
						fma_v(&sO[o][kw], &dO[o], &O);
					}
				}
			}
#pragma GCC unroll 8
		for (int o = 0; o < ocb; o++)
#pragma GCC unroll 16
			for (int kw = 0; kw < KW; kw++) {
				float *a = acc + (((size_t)(o0 + o) * (size_t)KH + (size_t)kh) * (size_t)KW + (size_t)kw) * LANES;
				v16 t;
				ld(&t, a);
				t += sE[o][kw] + sO[o][kw];
				st(a, &t);
			}
	}
}

static inline __attribute__((always_inline)) void bwd_image(const struct dt_conv_geom *g, int OC,
							     const float *planes, const float *dz, float *acc,
							     const int KW)
{
	int o0 = 0;
	for (; o0 + OCB_BWD <= OC; o0 += OCB_BWD)
		bwd_channels(g, planes, dz, acc, o0, OCB_BWD, KW);
	for (; o0 < OC; o0++)
		bwd_channels(g, planes, dz, acc, o0, 1, KW);
}

void dt_conv1_pool_backward(const struct dt_conv_geom *g, int OC, const float *x, const float *y, const float *dy,
			    const int32_t *argmax, int relu, float *dk, float *dbias, int B, float *scratch)
{
	DT_ASSERT(dt_conv1_pool_supported(g) && OC >= 1);
	const int KH = g->KH, KW = g->KW;
	float *planes = planes_of(scratch);
	float *dz = planes + (size_t)plane_rows(g) * plane_row_floats(KW);
	float *acc = dz + (size_t)OC * (size_t)(g->OH / 2) * 4 * LANES;
	float *sum = acc + (size_t)OC * (size_t)KH * (size_t)KW * LANES; /* (OC) */
	memset(acc, 0, ((size_t)OC * (size_t)KH * (size_t)KW * LANES + (size_t)OC) * sizeof(float));
	const size_t in_elems = (size_t)g->H * (size_t)g->W;
	const size_t out_elems = (size_t)(g->OH / 2) * (size_t)(g->OW / 2) * (size_t)OC;
	for (int b = 0; b < B; b++) {
		const size_t at = (size_t)b * out_elems;
		route_image(g, OC, y + at, dy + at, argmax + at, relu, dz, sum);
		split_image(g, x + (size_t)b * in_elems, planes);
		switch (KW) {
		case 3:
			bwd_image(g, OC, planes, dz, acc, 3);
			break;
		case 5:
			bwd_image(g, OC, planes, dz, acc, 5);
			break;
		default:
			bwd_image(g, OC, planes, dz, acc, KW);
			break;
		}
	}
	/* dk (KH, KW, 1, OC) from the lane partial sums (OC, KH, KW, LANES). */
	for (int o = 0; o < OC; o++)
		for (int t = 0; t < KH * KW; t++) {
			const float *a = acc + ((size_t)o * (size_t)(KH * KW) + (size_t)t) * LANES;
			float s = 0.0f;
			for (int l = 0; l < LANES; l++)
				s += a[l];
			dk[(size_t)t * (size_t)OC + (size_t)o] = s;
		}
	if (dbias)
		memcpy(dbias, sum, (size_t)OC * sizeof(float));
}

/* ---- naive twins ----------------------------------------------------------- */

/* Conv output (before bias) at (b, oh, ow, o), summed in double. */
static double conv_at(const struct dt_conv_geom *g, int OC, const float *x, const float *k, int b, int oh, int ow,
		      int o)
{
	double s = 0;
	for (int kh = 0; kh < g->KH; kh++)
		for (int kw = 0; kw < g->KW; kw++) {
			const int ih = oh + kh - g->pad, iw = ow + kw - g->pad;
			if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
				continue;
			s += (double)x[((size_t)b * (size_t)g->H + (size_t)ih) * (size_t)g->W + (size_t)iw] *
			     (double)k[(size_t)(kh * g->KW + kw) * (size_t)OC + (size_t)o];
		}
	return s;
}

void dt_conv1_pool_forward_naive(const struct dt_conv_geom *g, int OC, const float *x, const float *k,
				 const float *bias, int relu, float *y, int32_t *argmax, int B)
{
	const int PH = g->OH / 2, PW = g->OW / 2;
	for (int b = 0; b < B; b++)
		for (int ph = 0; ph < PH; ph++)
			for (int pw = 0; pw < PW; pw++)
				for (int o = 0; o < OC; o++) {
					float best = 0.0f;
					int32_t arg = 0;
					for (int q = 0; q < 4; q++) {
						float v = (float)conv_at(g, OC, x, k, b, 2 * ph + q / 2, 2 * pw + q % 2, o);
						if (bias)
							v += bias[o];
						if (relu && !(v > 0.0f))
							v = 0.0f;
						if (q == 0 || v > best) { /* the first of equal values wins */
							best = v;
							arg = q;
						}
					}
					const size_t at = (((size_t)b * (size_t)PH + (size_t)ph) * (size_t)PW + (size_t)pw) *
								  (size_t)OC + (size_t)o;
					y[at] = best;
					argmax[at] = arg;
				}
}

void dt_conv1_pool_backward_naive(const struct dt_conv_geom *g, int OC, const float *x, const float *y,
				  const float *dy, const int32_t *argmax, int relu, float *dk, float *dbias, int B)
{
	const int PH = g->OH / 2, PW = g->OW / 2;
	for (int o = 0; o < OC; o++) {
		double sb = 0;
		for (int kh = 0; kh < g->KH; kh++)
			for (int kw = 0; kw < g->KW; kw++) {
				double s = 0;
				for (int b = 0; b < B; b++)
					for (int ph = 0; ph < PH; ph++)
						for (int pw = 0; pw < PW; pw++) {
							const size_t at = (((size_t)b * (size_t)PH + (size_t)ph) * (size_t)PW +
									   (size_t)pw) * (size_t)OC + (size_t)o;
							const double d = relu && !(y[at] > 0.0f) ? 0.0 : (double)dy[at];
							if (kh == 0 && kw == 0)
								sb += d;
							const int oh = 2 * ph + argmax[at] / 2, ow = 2 * pw + argmax[at] % 2;
							const int ih = oh + kh - g->pad, iw = ow + kw - g->pad;
							if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
								continue;
							s += d * (double)x[((size_t)b * (size_t)g->H + (size_t)ih) * (size_t)g->W +
									   (size_t)iw];
						}
				dk[(size_t)(kh * g->KW + kw) * (size_t)OC + (size_t)o] = (float)s;
			}
		if (dbias)
			dbias[o] = (float)sb;
	}
}

/* ---- input gradient through fused pooling --------------------------------- */

static size_t kt_seg_padded(const struct dt_conv_geom *g)
{
	const size_t seg = (size_t)g->KW * (size_t)g->C;
	return (seg + LANES - 1) / LANES * LANES;
}

size_t dt_conv_kt_floats(const struct dt_conv_geom *g, int OC)
{
	return (size_t)OC * (size_t)g->KH * kt_seg_padded(g);
}

void dt_conv_kernel_transpose(const struct dt_conv_geom *g, const float *restrict k, int OC, float *restrict kt)
{
	const size_t seg = (size_t)g->KW * (size_t)g->C, segp = kt_seg_padded(g);
	for (int o = 0; o < OC; o++)
		for (int kh = 0; kh < g->KH; kh++) {
			float *restrict row = kt + ((size_t)o * (size_t)g->KH + (size_t)kh) * segp;
			for (size_t j = 0; j < segp; j++)
				row[j] = j < seg ? k[((size_t)kh * seg + j) * (size_t)OC + (size_t)o] : 0.0f;
		}
}

/* dst (n) += d * src (n): a window clipped by the padding, or at the very end of dx. */
static void axpy(float *restrict dst, const float *restrict src, float d, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = HAVE_FMA ? dst[i] + d * src[i] : __builtin_fmaf(d, src[i], dst[i]);
}

#define OBLOCK 64 /* output channels bucketed at a time */
#define MAXNV 8    /* vectors per padded window row kept in registers */

/* The winners of one pooled pixel's channels that share window position
 * q: their gradients d and channels o. */
struct bucket {
	int n;
	float d[OBLOCK];
	int o[OBLOCK];
};

/* One window row: dst (NV vectors) += sum over the bucket of d * kt row,
 * summed in registers, then added to dx once. */
static inline __attribute__((always_inline)) void bucket_row(const struct bucket *bk, const float *kt, size_t row_off,
							      size_t o_stride, float *dst, const int NV)
{
	v16 acc[MAXNV];
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		acc[v] = (v16){ 0 };
	for (int i = 0; i < bk->n; i++) {
		const float d = bk->d[i];
		const float *w = kt + (size_t)bk->o[i] * o_stride + row_off;
	#pragma GCC unroll 8
	for (int v = 0; v < NV; v++) {
			v16 t;
			ld(&t, w + (size_t)v * LANES);
			fma_s(&acc[v], &t, d);
		}
	}
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++) {
		v16 t;
		ld(&t, dst + (size_t)v * LANES);
		t += acc[v];
		st(dst + (size_t)v * LANES, &t);
	}
}

/* dispatch on the vector count so each variant keeps acc in registers */
static void bucket_row_any(const struct bucket *bk, const float *kt, size_t row_off, size_t o_stride, float *dst,
			   int NV)
{
	switch (NV) {
	case 1: bucket_row(bk, kt, row_off, o_stride, dst, 1); break;
	case 2: bucket_row(bk, kt, row_off, o_stride, dst, 2); break;
	case 3: bucket_row(bk, kt, row_off, o_stride, dst, 3); break;
	case 4: bucket_row(bk, kt, row_off, o_stride, dst, 4); break;
	case 5: bucket_row(bk, kt, row_off, o_stride, dst, 5); break;
	case 6: bucket_row(bk, kt, row_off, o_stride, dst, 6); break;
	case 7: bucket_row(bk, kt, row_off, o_stride, dst, 7); break;
	default: bucket_row(bk, kt, row_off, o_stride, dst, MAXNV); break;
	}
}

/*
 * Per pooled pixel, the channels are bucketed by their winner's position
 * q (0..3): all channels in a bucket add into the same input window, so
 * their contributions are summed in registers, one window row of whole
 * vectors at a time, and dx is read and written once per (q, row) instead
 * of once per channel (consecutive read-modify-writes at overlapping,
 * shifted addresses stall on store forwarding). Windows clipped by the
 * padding, the last pixels of dx and rows wider than MAXNV vectors add
 * channel by channel with the exact length.
 */
void dt_conv_pool_input_grad(const struct dt_conv_geom *g, int OC, const float *kt, const float *dy,
			     const int32_t *argmax, float *dx, int B)
{
	const int H = g->H, W = g->W, C = g->C, KH = g->KH, KW = g->KW, S = g->stride, P = g->pad;
	const int PH = g->OH / 2, PW = g->OW / 2;
	const size_t segp = kt_seg_padded(g), image = (size_t)H * (size_t)W * (size_t)C;
	const size_t o_stride = (size_t)KH * segp;
	const int NV = (int)(segp / LANES);
	float *const end = dx + (size_t)B * image;
	memset(dx, 0, (size_t)B * image * sizeof(float));
	struct bucket bk[4];
	for (int b = 0; b < B; b++) {
		float *xb = dx + (size_t)b * image;
		for (int ph = 0; ph < PH; ph++)
			for (int pw = 0; pw < PW; pw++) {
				const size_t at = (((size_t)b * (size_t)PH + (size_t)ph) * (size_t)PW + (size_t)pw) * (size_t)OC;
				for (int o0 = 0; o0 < OC; o0 += OBLOCK) {
					const int o1 = OC - o0 < OBLOCK ? OC : o0 + OBLOCK;
					bk[0].n = bk[1].n = bk[2].n = bk[3].n = 0;
					for (int o = o0; o < o1; o++) {
						const float d = dy[at + (size_t)o];
						if (d == 0.0f) /* ReLU-masked or a zero gradient: nothing to add */
							continue;
						struct bucket *q = &bk[argmax[at + (size_t)o] & 3];
						q->d[q->n] = d;
						q->o[q->n++] = o;
					}
					for (int q = 0; q < 4; q++) {
						if (!bk[q].n)
							continue;
						const int ih0 = (2 * ph + q / 2) * S - P, iw0 = (2 * pw + q % 2) * S - P;
						const int lo = iw0 < 0 ? -iw0 : 0, hi = iw0 + KW > W ? W - iw0 : KW;
						if (hi <= lo)
							continue;
						const size_t len = (size_t)(hi - lo) * (size_t)C;
						for (int kh = 0; kh < KH; kh++) {
							const int ih = ih0 + kh;
							if (ih < 0 || ih >= H)
								continue;
							float *dst = xb + ((size_t)ih * (size_t)W + (size_t)(iw0 + lo)) * (size_t)C;
							const size_t row_off = (size_t)kh * segp + (size_t)lo * (size_t)C;
							if (lo == 0 && hi == KW && NV <= MAXNV && dst + segp <= end) {
								/* whole vectors; kt's zero padding adds 0 past the window */
								bucket_row_any(&bk[q], kt, row_off, o_stride, dst, NV);
								continue;
							}
							for (int i = 0; i < bk[q].n; i++)
								axpy(dst, kt + (size_t)bk[q].o[i] * o_stride + row_off, bk[q].d[i], len);
						}
					}
				}
			}
	}
}

void dt_conv_pool_input_grad_naive(const struct dt_conv_geom *g, int OC, const float *kt, const float *dy,
				   const int32_t *argmax, float *dx, int B)
{
	const int PH = g->OH / 2, PW = g->OW / 2;
	const size_t image = (size_t)g->H * (size_t)g->W * (size_t)g->C, segp = kt_seg_padded(g);
	memset(dx, 0, (size_t)B * image * sizeof(float));
	for (int b = 0; b < B; b++)
		for (int oh = 0; oh < g->OH; oh++)
			for (int ow = 0; ow < g->OW; ow++)
				for (int o = 0; o < OC; o++) {
					/* dz at (oh, ow): the pooled gradient if this is its window's winner */
					const int ph = oh / 2, pw = ow / 2;
					if (ph >= PH || pw >= PW)
						continue;
					const size_t at = (((size_t)b * (size_t)PH + (size_t)ph) * (size_t)PW + (size_t)pw) *
								  (size_t)OC + (size_t)o;
					if (argmax[at] != (oh % 2) * 2 + ow % 2)
						continue;
					for (int kh = 0; kh < g->KH; kh++)
						for (int kw = 0; kw < g->KW; kw++)
							for (int c = 0; c < g->C; c++) {
								const int ih = oh * g->stride - g->pad + kh;
								const int iw = ow * g->stride - g->pad + kw;
								if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
									continue;
								dx[(size_t)b * image + ((size_t)ih * (size_t)g->W + (size_t)iw) * (size_t)g->C +
								   (size_t)c] += dy[at] * kt[((size_t)o * (size_t)g->KH + (size_t)kh) * segp +
											     (size_t)(kw * g->C + c)];
							}
				}
}
