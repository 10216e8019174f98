#include "train/fixed_point.h"

#include <math.h>
#include <string.h>

int dt_fixed_exponent(const float *x, size_t n)
{
	/* The largest magnitude is the largest of the bit patterns without the
	 * sign (IEEE 754 orders non-negative floats as their bits), an integer
	 * maximum that vectorizes; NaNs and infinities are the patterns from
	 * 0x7f800000 up. */
	/* Eight lanes at a time in a vector of GCC's and clang's extension:
	 * the build's -O2 does not vectorize the scalar loop (it was 14% of an
	 * mlp step's time), and the maximum is the same in any order. */
	typedef uint32_t v8u32 __attribute__((vector_size(32)));
	v8u32 mv = { 0 };
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		v8u32 b;
		memcpy(&b, &x[i], sizeof(b));
		b &= 0x7fffffffu;
		v8u32 gt = (v8u32)(b > mv);
		mv = (b & gt) | (mv & ~gt);
	}
	uint32_t m = 0;
	for (int l = 0; l < 8; l++)
		m = mv[l] > m ? mv[l] : m;
	for (; i < n; i++) {
		uint32_t b;
		memcpy(&b, &x[i], sizeof(b));
		b &= 0x7fffffffu;
		m = b > m ? b : m;
	}
	if (m >= 0x7f800000u)
		return DT_FIXED_EXP_NONFINITE;
	if (m == 0)
		return DT_FIXED_EXP_ZERO;
	float f;
	memcpy(&f, &m, sizeof(f));
	int e;
	(void)frexpf(f, &e); /* f = g * 2^e, 0.5 <= g < 1, so every |x| < 2^e */
	return e;
}

int dt_fixed_scale(int e, int64_t terms)
{
	if (e <= DT_FIXED_EXP_ZERO)
		return 0;
	int c = 0;
	while (c < 62 && ((int64_t)1 << c) < terms)
		c++;
	return 62 - c - e;
}

void dt_fixed_accumulate(int64_t *acc, const float *x, size_t n, int scale)
{
	/* x * 2^scale is exact in double (24 significant bits; 2^scale and the
	 * product within double's range for any float and |scale| <= 62 + 149);
	 * llrint rounds it half to even in the default rounding mode (one
	 * cvtsd2si on x86-64 with -fno-math-errno), and the result fits. */
	const double f = ldexp(1.0, scale);
	for (size_t i = 0; i < n; i++)
		acc[i] += (int64_t)llrint((double)x[i] * f);
}

/* The k terms of element i: the same expression as dt_fixed_accumulate's,
 * summed in registers. */
static inline int64_t sum_k(const float *x, size_t stride, int k, size_t i, double f)
{
	int64_t a = 0;
	for (int j = 0; j < k; j++)
		a += (int64_t)llrint((double)x[(size_t)j * stride + i] * f);
	return a;
}

void dt_fixed_sum_k(int64_t *acc, const float *x, size_t stride, int k, size_t n, int scale)
{
	const double f = ldexp(1.0, scale);
	for (size_t i = 0; i < n; i++)
		acc[i] = sum_k(x, stride, k, i, f);
}

void dt_fixed_sum_mean_k(float *out, const float *x, size_t stride, int k, size_t n, int scale, int64_t terms)
{
	const double f = ldexp(1.0, scale), m = ldexp(1.0, -scale) / (double)terms;
	for (size_t i = 0; i < n; i++)
		out[i] = (float)((double)sum_k(x, stride, k, i, f) * m);
}

void dt_fixed_mean(float *out, const int64_t *acc, size_t n, int scale, int64_t terms)
{
	/* One factor for every element (2^-scale / terms, rounded once): the
	 * same bits on every task, and a multiplication rather than a division. */
	const double f = ldexp(1.0, -scale) / (double)terms;
	for (size_t i = 0; i < n; i++)
		out[i] = (float)((double)acc[i] * f);
}
