/* --deterministic's ordered sum (train/fixed_point.h, K <= DT_ORDERED_MAX_TERMS):
 * the vector means (the build's and the portable) against the formula
 * written out in scalars, on floats of every kind (zeros of both signs,
 * subnormals, the largest, NaN and infinities), at every size around the
 * eight-lane blocks and in place; the non-finite flag in every position. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/rng.h"
#include "dt_test.h"
#include "train/fixed_point.h"

/* fixed_point.h's definition, element by element: the naive twin. */
static float naive_mean(const float *const *x, int k, size_t i)
{
	double a = (double)x[0][i];
	for (int j = 1; j < k; j++)
		a = a + (double)x[j][i];
	return (float)(a * (1.0 / (double)k));
}

/* The same bits, except that a NaN's payload may come from either operand
 * (x86 keeps the first's, and a compiler may swap an addition's): both NaN. */
static int same_float(float a, float b)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return memcmp(&a, &b, sizeof(a)) == 0;
}

/* A float of random kind: a random bit pattern (every exponent: zeros,
 * subnormals, normals, infinities and NaNs), or one of the edge values. */
static float any_float(struct dt_rng *rng)
{
	static const float edges[] = { 0.0f, -0.0f, 1e-45f, -1e-45f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
				       INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 0.1f };
	const uint64_t r = dt_rng_next(rng);
	if (r % 4 == 0)
		return edges[(r >> 8) % (sizeof(edges) / sizeof(edges[0]))];
	uint32_t bits = (uint32_t)(r >> 16);
	if (r % 4 == 1) /* a subnormal or zero */
		bits &= 0x807fffffu;
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

DT_TEST(fixed_point, ordered_mean_equals_its_formula_on_every_kind_of_float)
{
	enum { K = 5, N = 67 };
	static float x[K * N], want[N], got[N];
	struct dt_rng rng;
	dt_rng_derive(&rng, 17, "fixed_point", 3);
	for (int round = 0; round < 300; round++) {
		const int k = 1 + round % K;
		const size_t n = (size_t)(round % (N + 1)); /* 0 .. 67: every tail length */
		for (int i = 0; i < K * N; i++)
			x[i] = round % 3 ? any_float(&rng) : (float)((double)dt_rng_uniform(&rng) - 0.5);
		const float *xs[K];
		for (int j = 0; j < K; j++)
			xs[j] = x + (size_t)j * N;
		int bad = 0;
		for (size_t i = 0; i < n; i++) {
			want[i] = naive_mean(xs, k, i);
			bad |= !isfinite(want[i]);
		}
		memset(got, 0x5a, sizeof(got));
		DT_CHECK_INT_EQ(dt_ordered_mean_k(got, xs, k, n), bad);
		for (size_t i = 0; i < n; i++)
			if (!same_float(want[i], got[i]))
				dt_test_fail(__FILE__, __LINE__, "k %d n %zu element %zu: %a, the formula %a", k, n, i,
					     (double)got[i], (double)want[i]);
		memset(got, 0x5a, sizeof(got));
		DT_CHECK_INT_EQ(dt__ordered_mean_k_portable(got, xs, k, n), bad);
		for (size_t i = 0; i < n; i++)
			DT_CHECK(same_float(want[i], got[i]));
		/* in place over the last term, as the session sums */
		DT_CHECK_INT_EQ(dt_ordered_mean_k(x + (size_t)(k - 1) * N, xs, k, n), bad);
		for (size_t i = 0; i < n; i++)
			DT_CHECK(same_float(want[i], x[(size_t)(k - 1) * N + i]));
	}
}

DT_TEST(fixed_point, ordered_mean_is_the_index_order_and_flags_non_finite)
{
	/* (a + b) + c in double, then times 1/3: the index order, exactly */
	const float a[] = { 1.0f, -0.0f, 1e-45f }, b[] = { 0x1p-30f, -0.0f, 1e-45f }, c[] = { -1.0f, 0.0f, 1e-45f };
	const float *xs[] = { a, b, c };
	float out[3];
	DT_CHECK_INT_EQ(dt_ordered_mean_k(out, xs, 3, 3), 0);
	DT_CHECK(out[0] == (float)(0x1p-30 * (1.0 / 3.0)));
	DT_CHECK(out[1] == 0.0f && !signbit(out[1])); /* -0 + -0 + 0 = +0 */
	DT_CHECK(out[2] == 1e-45f);                   /* 3 subnormals of 2^-149, a third of them */
	const float *two[] = { b, b };
	DT_CHECK_INT_EQ(dt_ordered_mean_k(out, two, 2, 3), 0);
	DT_CHECK(out[1] == 0.0f && signbit(out[1])); /* -0 + -0 = -0 */
	/* the largest floats: their sum is finite in double, and so the mean */
	const float big[] = { FLT_MAX, -FLT_MAX };
	const float *bigs[] = { big, big };
	DT_CHECK_INT_EQ(dt_ordered_mean_k(out, bigs, 2, 2), 0);
	DT_CHECK(out[0] == FLT_MAX && out[1] == -FLT_MAX);
	/* one NaN or infinity in any term at any position (each lane, the tail) */
	static float p[3][41];
	for (size_t at = 0; at < 41; at++)
		for (int j = 0; j < 3; j++) {
			for (int t = 0; t < 3; t++)
				for (size_t i = 0; i < 41; i++)
					p[t][i] = (float)(int)(i % 7) - 3.0f;
			p[j][at] = at % 2 ? NAN : (j % 2 ? -INFINITY : INFINITY);
			const float *ps[] = { p[0], p[1], p[2] };
			static float o[41];
			DT_CHECK_INT_EQ(dt_ordered_mean_k(o, ps, 3, 41), 1);
			DT_CHECK(!isfinite(o[at]));
			p[j][at] = 1.0f;
			DT_CHECK_INT_EQ(dt_ordered_mean_k(o, ps, 3, 41), 0);
		}
}
