/*
 * Fast convolution and pooling kernels: im2col (both layouts), col2im, 2x2
 * max pooling.
 *
 * gcc 12 at -O2 vectorizes only loops that need no runtime checks and no
 * scalar epilogue (the "very cheap" cost model), and will not turn float
 * compare-and-select (ReLU masks, max pooling) into vector blends while it
 * must preserve floating-point traps. These hot loops get the full cost
 * model and no traps (dtrain never enables FP exceptions; values are the
 * same either way). Short copy and zero loops must stay inline, not become
 * memcpy/memset calls (a call costs more than copying 5 floats), hence
 * no-tree-loop-distribute-patterns.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math", "no-tree-loop-distribute-patterns")
#endif
#include "tensor/kernels.h"

#include <string.h>

#include "base/alloc.h"

int dt_conv_geom_init(struct dt_conv_geom *g, int H, int W, int C, int KH, int KW, int stride, int pad)
{
	memset(g, 0, sizeof(*g));
	if (H < 1 || W < 1 || C < 1 || KH < 1 || KW < 1 || stride < 1 || pad < 0)
		return -1;
	int eh = H + 2 * pad - KH, ew = W + 2 * pad - KW;
	if (eh < 0 || ew < 0)
		return -1;
	*g = (struct dt_conv_geom){
		.H = H, .W = W, .C = C, .KH = KH, .KW = KW, .stride = stride, .pad = pad,
		.OH = eh / stride + 1, .OW = ew / stride + 1,
	};
	return 0;
}

/*
 * The window row of output pixel (oh, ow) for one kh is KW*C floats that are
 * contiguous in x (columns iw0 .. iw0+KW-1 of input row ih, all channels),
 * whatever the stride; only the columns that fall into the padding are
 * zeros. So each (row, kh) segment is: zeros, one contiguous copy, zeros.
 *
 * The copies are short (5 floats for LeNet's first layer, 3 for a 3x3 one
 * on one channel), far too short for memcpy calls, so copy_floats() moves
 * them as two overlapping fixed-size moves, one aligned to the start and one
 * to the end (8 floats for n >= 8, then 4, 2, 1), which the compiler turns
 * into a few vector loads and stores.
 *
 * Most output pixels are interior (their window is all inside the image
 * columns); for those, dt_im2col loops kh outside and ow inside with no
 * per-window bookkeeping. Border pixels take the general path.
 */
static inline __attribute__((always_inline)) void copy_floats(float *restrict d, const float *restrict s, size_t n)
{
	if (n >= 8) {
		size_t i = 0;
		for (; i + 8 <= n; i += 8)
			memcpy(d + i, s + i, 8 * sizeof(float));
		if (i < n)
			memcpy(d + n - 8, s + n - 8, 8 * sizeof(float));
	} else if (n >= 4) {
		memcpy(d, s, 4 * sizeof(float));
		memcpy(d + n - 4, s + n - 4, 4 * sizeof(float));
	} else if (n >= 2) {
		memcpy(d, s, 2 * sizeof(float));
		memcpy(d + n - 2, s + n - 2, 2 * sizeof(float));
	} else if (n == 1) {
		d[0] = s[0];
	}
}

/* copy_floats() of n floats, `count` times, advancing dst by dstep and src
 * by sstep; the size dispatch is hoisted out of the loop. */
static void copy_strided(float *restrict dst, size_t dstep, const float *restrict src, size_t sstep, int count,
			 size_t n)
{
	if (n >= 8) {
		for (int i = 0; i < count; i++, dst += dstep, src += sstep)
			copy_floats(dst, src, n);
	} else if (n >= 4) {
		for (int i = 0; i < count; i++, dst += dstep, src += sstep) {
			memcpy(dst, src, 4 * sizeof(float));
			memcpy(dst + n - 4, src + n - 4, 4 * sizeof(float));
		}
	} else if (n >= 2) {
		for (int i = 0; i < count; i++, dst += dstep, src += sstep) {
			memcpy(dst, src, 2 * sizeof(float));
			memcpy(dst + n - 2, src + n - 2, 2 * sizeof(float));
		}
	} else if (n == 1) {
		for (int i = 0; i < count; i++, dst += dstep, src += sstep)
			dst[0] = src[0];
	}
}

static inline void zero_floats(float *d, size_t n)
{
	for (size_t i = 0; i < n; i++)
		d[i] = 0.0f;
}

/* One im2col row (output pixel (oh, ow) of one image), any position. */
static void im2col_row(const struct dt_conv_geom *g, const float *restrict xb, int oh, int ow, float *restrict row)
{
	const int C = g->C, KH = g->KH, KW = g->KW;
	const size_t seg = (size_t)KW * (size_t)C, in_row = (size_t)g->W * (size_t)C;
	const int ih0 = oh * g->stride - g->pad, iw0 = ow * g->stride - g->pad;
	const int lo = iw0 < 0 ? -iw0 : 0, hi = iw0 + KW > g->W ? g->W - iw0 : KW;
	for (int kh = 0; kh < KH; kh++) {
		float *restrict dst = row + (size_t)kh * seg;
		const int ih = ih0 + kh;
		if (ih < 0 || ih >= g->H || hi <= lo) {
			zero_floats(dst, seg);
			continue;
		}
		const size_t zl = (size_t)lo * (size_t)C, len = (size_t)(hi - lo) * (size_t)C;
		zero_floats(dst, zl);
		copy_floats(dst + zl, xb + (size_t)ih * in_row + (size_t)(iw0 + lo) * (size_t)C, len);
		zero_floats(dst + zl + len, seg - zl - len);
	}
}

void dt_im2col(const struct dt_conv_geom *g, const float *restrict x, int n, float *restrict cols)
{
	const int H = g->H, W = g->W, C = g->C, KH = g->KH, KW = g->KW;
	const int S = g->stride, P = g->pad, OH = g->OH, OW = g->OW;
	const size_t seg = (size_t)KW * (size_t)C, K = (size_t)KH * seg, in_row = (size_t)W * (size_t)C;
	/* Interior output columns [ow_a, ow_b): iw0 >= 0 and iw0 + KW <= W. */
	int ow_b = W + P - KW >= 0 ? (W + P - KW) / S + 1 : 0;
	if (ow_b > OW)
		ow_b = OW;
	int ow_a = (P + S - 1) / S;
	if (ow_a > ow_b)
		ow_a = ow_b;
	for (int b = 0; b < n; b++) {
		const float *restrict xb = x + (size_t)b * (size_t)H * in_row; /* (H, W, C) */
		for (int oh = 0; oh < OH; oh++) {
			float *restrict rows = cols + ((size_t)b * (size_t)OH + (size_t)oh) * (size_t)OW * K; /* (OW, K) */
			for (int ow = 0; ow < ow_a; ow++)
				im2col_row(g, xb, oh, ow, rows + (size_t)ow * K);
			for (int ow = ow_b; ow < OW; ow++)
				im2col_row(g, xb, oh, ow, rows + (size_t)ow * K);
			if (ow_a == ow_b)
				continue;
			const int ih0 = oh * S - P;
			for (int kh = 0; kh < KH; kh++) {
				const int ih = ih0 + kh;
				float *restrict dst = rows + (size_t)ow_a * K + (size_t)kh * seg;
				if (ih < 0 || ih >= H) {
					for (int ow = ow_a; ow < ow_b; ow++, dst += K)
						zero_floats(dst, seg);
					continue;
				}
				const float *restrict src = xb + (size_t)ih * in_row + (size_t)(ow_a * S - P) * (size_t)C;
				copy_strided(dst, K, src, (size_t)S * (size_t)C, ow_b - ow_a, seg);
			}
		}
	}
}

/*
 * The transposed layout: row k = (kh, kw, c) of colsT holds, for every output
 * pixel, the input value that tap reads. For one output row (b, oh) that is
 * x[b, oh*S - P + kh, ow*S - P + kw, c] for ow = 0 .. OW-1: with C == 1 and
 * stride 1, a contiguous piece of one input row, so each (k, b, oh) is one
 * long copy with a few zeros at the ends.
 */
void dt_im2col_t(const struct dt_conv_geom *g, const float *restrict x, int n, float *restrict cols_t, int ld)
{
	const int H = g->H, W = g->W, C = g->C, KH = g->KH, KW = g->KW;
	const int S = g->stride, P = g->pad, OH = g->OH, OW = g->OW;
	const size_t in_row = (size_t)W * (size_t)C, image = (size_t)H * in_row;
	DT_ASSERT((size_t)ld >= (size_t)n * (size_t)OH * (size_t)OW);
	for (int kh = 0; kh < KH; kh++) {
		for (int kw = 0; kw < KW; kw++) {
			/* Output columns whose input column ow*S - P + kw is inside [0, W). */
			const int first = P - kw > 0 ? (P - kw + S - 1) / S : 0;
			int end = W + P - kw > 0 ? (W + P - kw + S - 1) / S : 0;
			if (end > OW)
				end = OW;
			const int lo = first < end ? first : end;
			for (int c = 0; c < C; c++) {
				float *restrict dst = cols_t + ((size_t)(kh * KW + kw) * (size_t)C + (size_t)c) * (size_t)ld;
				for (int b = 0; b < n; b++) {
					for (int oh = 0; oh < OH; oh++, dst += OW) {
						const int ih = oh * S - P + kh;
						if (ih < 0 || ih >= H || lo == end) {
							zero_floats(dst, (size_t)OW);
							continue;
						}
						const float *restrict src = x + (size_t)b * image + (size_t)ih * in_row +
									    (size_t)(lo * S - P + kw) * (size_t)C + (size_t)c;
						zero_floats(dst, (size_t)lo);
						if (S * C == 1)
							copy_floats(dst + lo, src, (size_t)(end - lo));
						else
							for (int ow = lo; ow < end; ow++, src += (size_t)S * (size_t)C)
								dst[ow] = *src;
						zero_floats(dst + end, (size_t)(OW - end));
					}
				}
			}
		}
	}
}

void dt_col2im(const struct dt_conv_geom *g, const float *restrict cols, int n, float *restrict dx)
{
	const int H = g->H, W = g->W, C = g->C, KH = g->KH, KW = g->KW;
	const int S = g->stride, P = g->pad, OH = g->OH, OW = g->OW;
	const size_t seg = (size_t)KW * (size_t)C, K = (size_t)KH * seg;
	const size_t image = (size_t)H * (size_t)W * (size_t)C;
	memset(dx, 0, (size_t)n * image * sizeof(float));
	const float *restrict row = cols;
	for (int b = 0; b < n; b++) {
		float *restrict xb = dx + (size_t)b * image; /* (H, W, C) */
		for (int oh = 0; oh < OH; oh++) {
			for (int ow = 0; ow < OW; ow++, row += K) {
				const int iw0 = ow * S - P;
				const int lo = iw0 < 0 ? -iw0 : 0;
				const int hi = iw0 + KW > W ? W - iw0 : KW;
				if (hi <= lo)
					continue;
				const size_t len = (size_t)(hi - lo) * (size_t)C;
				for (int kh = 0; kh < KH; kh++) {
					const int ih = oh * S - P + kh;
					if (ih < 0 || ih >= H)
						continue;
					const float *restrict src = row + (size_t)kh * seg + (size_t)lo * (size_t)C;
					float *restrict dst = xb + ((size_t)ih * (size_t)W + (size_t)(iw0 + lo)) * (size_t)C;
					for (size_t i = 0; i < len; i++)
						dst[i] += src[i];
				}
			}
		}
	}
}

/*
 * Max pooling walks output rows; each output (ow, c) reads x at columns
 * 2ow and 2ow+1 of input rows 2oh and 2oh+1. With C >= 8 channels the inner
 * loop runs over c, contiguous and vectorized. With fewer (LeNet's 6), a
 * loop over c would be a few iterations per window, all set-up; then c is
 * the outer loop and the inner one runs along the row with stride 2C.
 */
/* Both helpers are branch-free (comparisons become 0/1 integers), so the
 * scalar path does not mispredict on data and the vector path blends. */
static inline __attribute__((always_inline)) void pool_fwd_one(const float *restrict p0, const float *restrict p1,
								const float *restrict p2, const float *restrict p3,
								float *restrict y, int32_t *restrict a)
{
	const float v0 = *p0, v1 = *p1, v2 = *p2, v3 = *p3;
	const int32_t g01 = v1 > v0, g23 = v3 > v2;
	const float m01 = g01 ? v1 : v0, m23 = g23 ? v3 : v2;
	const int32_t g = m23 > m01;
	const int32_t k01 = g01, k23 = 2 + g23;
	*y = g ? m23 : m01;
	*a = k01 ^ ((k01 ^ k23) & -g);
}

static inline __attribute__((always_inline)) void pool_bwd_one(float d, int32_t k, float *restrict p0,
								float *restrict p1, float *restrict p2,
								float *restrict p3)
{
	*p0 = k == 0 ? d : 0.0f;
	*p1 = k == 1 ? d : 0.0f;
	*p2 = k == 2 ? d : 0.0f;
	*p3 = k == 3 ? d : 0.0f;
}

/* The scalar version: gcc compiles the comparisons above into branches when
 * it does not vectorize, so route through a one-hot table instead. */
static const float onehot[4][4] = { { 1, 0, 0, 0 }, { 0, 1, 0, 0 }, { 0, 0, 1, 0 }, { 0, 0, 0, 1 } };

static inline __attribute__((always_inline)) void pool_bwd_one_scalar(float d, int32_t k, float *restrict p0,
								       float *restrict p1, float *restrict p2,
								       float *restrict p3)
{
	const float *restrict h = onehot[k & 3];
	*p0 = h[0] * d;
	*p1 = h[1] * d;
	*p2 = h[2] * d;
	*p3 = h[3] * d;
}

void dt_maxpool2_forward(const float *restrict x, float *restrict y, int32_t *restrict argmax, int B, int H, int W,
			 int C)
{
	const int OH = H / 2, OW = W / 2;
	const size_t in_row = (size_t)W * (size_t)C, out_row = (size_t)OW * (size_t)C, c2 = 2 * (size_t)C;
	for (int b = 0; b < B; b++) {
		for (int oh = 0; oh < OH; oh++) {
			const float *restrict r0 = x + ((size_t)b * (size_t)H + 2 * (size_t)oh) * in_row;
			const float *restrict r1 = r0 + in_row;
			float *restrict yo = y + ((size_t)b * (size_t)OH + (size_t)oh) * out_row;
			int32_t *restrict ao = argmax + ((size_t)b * (size_t)OH + (size_t)oh) * out_row;
			if (C >= 8) {
				for (int ow = 0; ow < OW; ow++) {
					const float *restrict q0 = r0 + (size_t)ow * c2, *restrict q1 = r1 + (size_t)ow * c2;
					for (int c = 0; c < C; c++)
						pool_fwd_one(q0 + c, q0 + C + c, q1 + c, q1 + C + c, yo + (size_t)ow * (size_t)C + c,
							     ao + (size_t)ow * (size_t)C + c);
				}
			} else {
				for (int c = 0; c < C; c++)
					for (int ow = 0; ow < OW; ow++) {
						const size_t i = (size_t)ow * c2 + (size_t)c, o = (size_t)ow * (size_t)C + (size_t)c;
						pool_fwd_one(r0 + i, r0 + i + C, r1 + i, r1 + i + C, yo + o, ao + o);
					}
			}
		}
	}
}

void dt_maxpool2_backward(const float *restrict dy, const int32_t *restrict argmax, float *restrict dx, int B,
			  int H, int W, int C)
{
	const int OH = H / 2, OW = W / 2;
	const size_t in_row = (size_t)W * (size_t)C, out_row = (size_t)OW * (size_t)C, c2 = 2 * (size_t)C;
	for (int b = 0; b < B; b++) {
		float *restrict xb = dx + (size_t)b * (size_t)H * in_row;
		for (int oh = 0; oh < OH; oh++) {
			float *restrict r0 = xb + 2 * (size_t)oh * in_row;
			float *restrict r1 = r0 + in_row;
			const float *restrict dyo = dy + ((size_t)b * (size_t)OH + (size_t)oh) * out_row;
			const int32_t *restrict ao = argmax + ((size_t)b * (size_t)OH + (size_t)oh) * out_row;
			if (C >= 8) {
				for (int ow = 0; ow < OW; ow++) {
					float *restrict q0 = r0 + (size_t)ow * c2, *restrict q1 = r1 + (size_t)ow * c2;
					const float *restrict d = dyo + (size_t)ow * (size_t)C;
					const int32_t *restrict k = ao + (size_t)ow * (size_t)C;
					for (int c = 0; c < C; c++)
						pool_bwd_one(d[c], k[c], q0 + c, q0 + C + c, q1 + c, q1 + C + c);
				}
			} else {
				for (int c = 0; c < C; c++)
					for (int ow = 0; ow < OW; ow++) {
						const size_t i = (size_t)ow * c2 + (size_t)c, o = (size_t)ow * (size_t)C + (size_t)c;
						pool_bwd_one_scalar(dyo[o], ao[o], r0 + i, r0 + i + C, r1 + i, r1 + i + C);
					}
			}
			if (W & 1) { /* the dropped last column */
				memset(r0 + (size_t)OW * c2, 0, (size_t)C * sizeof(float));
				memset(r1 + (size_t)OW * c2, 0, (size_t)C * sizeof(float));
			}
		}
		if (H & 1) /* the dropped last row */
			memset(xb + (size_t)(H - 1) * in_row, 0, in_row * sizeof(float));
	}
}
