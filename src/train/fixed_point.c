#include "train/fixed_point.h"

#include <math.h>

int dt_fixed_exponent(const float *x, size_t n)
{
	float m = 0.0f;
	for (size_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);
		if (!(a <= m)) { /* also true for NaN: caught below */
			if (!isfinite(a))
				return DT_FIXED_EXP_NONFINITE;
			m = a;
		}
	}
	if (m == 0.0f)
		return DT_FIXED_EXP_ZERO;
	int e;
	(void)frexpf(m, &e); /* m = f * 2^e, 0.5 <= f < 1, so m < 2^e */
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
	/* x * 2^scale is exact in double (24 significant bits, exponent within
	 * double's range for any float and |scale| <= 62 + 149); rint rounds it
	 * half to even in the default rounding mode, and the result fits. */
	for (size_t i = 0; i < n; i++)
		acc[i] += (int64_t)rint(ldexp((double)x[i], scale));
}

void dt_fixed_mean(float *out, const int64_t *acc, size_t n, int scale, int64_t terms)
{
	const double k = (double)terms;
	for (size_t i = 0; i < n; i++)
		out[i] = (float)(ldexp((double)acc[i], -scale) / k);
}
