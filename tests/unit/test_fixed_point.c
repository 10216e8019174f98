/* --deterministic's fixed point (train/fixed_point.h): the exponent, the
 * scale and its overflow rule, rounding, order independence, the mean. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/rng.h"
#include "dt_test.h"
#include "train/fixed_point.h"

DT_TEST(fixed_point, exponent_bounds_the_largest_magnitude)
{
	const float a[] = { 0.25f, -0.75f, 0.5f };
	DT_CHECK_INT_EQ(dt_fixed_exponent(a, 3), 0); /* 0.75 < 2^0 */
	const float b[] = { 1.0f };
	DT_CHECK_INT_EQ(dt_fixed_exponent(b, 1), 1); /* 1 is not < 2^0 */
	const float c[] = { -3.0f, 1e-3f };
	DT_CHECK_INT_EQ(dt_fixed_exponent(c, 2), 2);
	const float tiny[] = { 1e-45f }; /* the smallest subnormal, 2^-149 */
	DT_CHECK_INT_EQ(dt_fixed_exponent(tiny, 1), -148);
	const float zero[] = { 0.0f, -0.0f };
	DT_CHECK_INT_EQ(dt_fixed_exponent(zero, 2), DT_FIXED_EXP_ZERO);
	DT_CHECK_INT_EQ(dt_fixed_exponent(zero, 0), DT_FIXED_EXP_ZERO);
	float bad[] = { 1.0f, NAN, 2.0f };
	DT_CHECK_INT_EQ(dt_fixed_exponent(bad, 3), DT_FIXED_EXP_NONFINITE);
	bad[1] = -INFINITY;
	DT_CHECK_INT_EQ(dt_fixed_exponent(bad, 3), DT_FIXED_EXP_NONFINITE);
	bad[0] = NAN; /* first element: not taken for the running maximum */
	bad[1] = 0.0f;
	DT_CHECK_INT_EQ(dt_fixed_exponent(bad, 3), DT_FIXED_EXP_NONFINITE);
}

DT_TEST(fixed_point, scale_leaves_room_for_every_term)
{
	DT_CHECK_INT_EQ(dt_fixed_scale(0, 1), 62);
	DT_CHECK_INT_EQ(dt_fixed_scale(0, 2), 61);
	DT_CHECK_INT_EQ(dt_fixed_scale(0, 3), 60); /* ceil(log2 3) = 2 */
	DT_CHECK_INT_EQ(dt_fixed_scale(3, 1024), 62 - 10 - 3);
	DT_CHECK_INT_EQ(dt_fixed_scale(-148, 4), 62 - 2 + 148);
	DT_CHECK_INT_EQ(dt_fixed_scale(DT_FIXED_EXP_ZERO, 7), 0);
	/* The overflow rule at its edge: K terms, each the largest value of
	 * exponent e (just below 2^e, rounding up to 2^(62-c)), of one sign and
	 * of the other; the sums reach +-2^62 and no further. */
	const int64_t ks[] = { 1, 2, 3, 5, 64, 1000 };
	for (size_t t = 0; t < sizeof(ks) / sizeof(ks[0]); t++) {
		const int64_t k = ks[t];
		const float big = nextafterf(8.0f, 0.0f), neg = -big; /* < 2^3 */
		DT_CHECK_INT_EQ(dt_fixed_exponent(&big, 1), 3);
		int s = dt_fixed_scale(3, k);
		int64_t up = 0, down = 0;
		for (int64_t j = 0; j < k; j++) {
			dt_fixed_accumulate(&up, &big, 1, s);
			dt_fixed_accumulate(&down, &neg, 1, s);
		}
		DT_CHECK(up > 0 && up <= (int64_t)1 << 62);
		DT_CHECK(down < 0 && down >= -((int64_t)1 << 62));
		DT_CHECK(up == -down);
		float mean;
		dt_fixed_mean(&mean, &up, 1, s, k);
		DT_CHECK(mean == big); /* 24 bits survive 62 - c */
	}
}

DT_TEST(fixed_point, rounds_half_to_even)
{
	/* scale 1: x * 2 = 0.5, 1.5, 2.5, -0.5, -2.5 */
	const float x[] = { 0.25f, 0.75f, 1.25f, -0.25f, -1.25f };
	int64_t acc[5] = { 0 };
	dt_fixed_accumulate(acc, x, 5, 1);
	DT_CHECK(acc[0] == 0 && acc[1] == 2 && acc[2] == 2 && acc[3] == 0 && acc[4] == -2);
	/* a negative scale: 3 * 2^-2 = 0.75 -> 1 */
	const float three = 3.0f;
	int64_t q = 0;
	dt_fixed_accumulate(&q, &three, 1, -2);
	DT_CHECK(q == 1);
}

/* The point of it all: any order, any grouping of the terms, the same bits;
 * the float sum of the same terms in two orders differs. */
DT_TEST(fixed_point, sums_are_the_same_in_any_order_and_grouping)
{
	enum { K = 16, N = 4096 };
	static float g[K][N];
	struct dt_rng rng;
	dt_rng_derive(&rng, 7, "fixed_point", 0);
	for (int k = 0; k < K; k++)
		for (int i = 0; i < N; i++)
			g[k][i] = (float)(((double)dt_rng_uniform(&rng) - 0.5) * ldexp(1.0, (int)(dt_rng_next(&rng) % 40) - 30));
	int e = DT_FIXED_EXP_ZERO;
	for (int k = 0; k < K; k++) {
		int ek = dt_fixed_exponent(g[k], N);
		e = ek > e ? ek : e;
	}
	const int s = dt_fixed_scale(e, K);
	/* forward, one accumulator */
	static int64_t fwd[N], grp[4][N], rev[N];
	memset(fwd, 0, sizeof(fwd));
	memset(grp, 0, sizeof(grp));
	memset(rev, 0, sizeof(rev));
	for (int k = 0; k < K; k++)
		dt_fixed_accumulate(fwd, g[k], N, s);
	/* four "workers" of 4 terms each, summed in reverse worker order */
	for (int k = 0; k < K; k++)
		dt_fixed_accumulate(grp[k % 4], g[k], N, s);
	for (int w = 3; w >= 0; w--)
		for (int i = 0; i < N; i++)
			rev[i] += grp[w][i];
	DT_CHECK(memcmp(fwd, rev, sizeof(fwd)) == 0);
	static float m1[N], m2[N];
	dt_fixed_mean(m1, fwd, N, s, K);
	dt_fixed_mean(m2, rev, N, s, K);
	DT_CHECK(memcmp(m1, m2, sizeof(m1)) == 0);
	/* Close to the exact mean (in double), and the float sums disagree. */
	int float_differs = 0;
	for (int i = 0; i < N; i++) {
		double exact = 0;
		float a = 0, b = 0;
		for (int k = 0; k < K; k++) {
			exact += (double)g[k][i];
			a += g[k][i];
			b += g[K - 1 - k][i];
		}
		exact /= K;
		DT_CHECK(fabs((double)m1[i] - exact) <= fabs(exact) * 1e-6 + ldexp(1.0, -s));
		float_differs += a != b;
	}
	DT_CHECK(float_differs > 0);
}

/* The fast paths against their naive twins, bit for bit: the k
 * accumulations fused (dt_fixed_sum_k) and the sum and mean in one pass
 * (dt_fixed_sum_mean_k), over buffers `stride` apart, odd sizes included. */
DT_TEST(fixed_point, fused_sums_equal_the_naive_accumulation_bit_for_bit)
{
	enum { K = 5, STRIDE = 1031 };
	static float x[K * STRIDE];
	struct dt_rng rng;
	dt_rng_derive(&rng, 11, "fixed_point", 1);
	for (int i = 0; i < K * STRIDE; i++)
		x[i] = (float)(((double)dt_rng_uniform(&rng) - 0.5) * ldexp(1.0, (int)(dt_rng_next(&rng) % 30) - 20));
	const size_t sizes[] = { 0, 1, 7, 1000, STRIDE };
	for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
		const size_t n = sizes[t];
		for (int k = 1; k <= K; k++) {
			int e = DT_FIXED_EXP_ZERO;
			for (int j = 0; j < k; j++) {
				int ej = dt_fixed_exponent(x + (size_t)j * STRIDE, n);
				e = ej > e ? ej : e;
			}
			const int s = dt_fixed_scale(e, k);
			static int64_t naive[STRIDE], fused[STRIDE];
			static float mean_naive[STRIDE], mean_fused[STRIDE];
			memset(naive, 0, sizeof(naive));
			memset(fused, 0x5a, sizeof(fused)); /* written, not added to */
			for (int j = 0; j < k; j++)
				dt_fixed_accumulate(naive, x + (size_t)j * STRIDE, n, s);
			const float *xs[K];
			for (int j = 0; j < K; j++)
				xs[j] = x + (size_t)j * STRIDE;
			dt_fixed_sum_k(fused, xs, k, n, s);
			DT_CHECK(memcmp(naive, fused, n * sizeof(int64_t)) == 0);
			dt_fixed_mean(mean_naive, naive, n, s, k);
			dt_fixed_sum_mean_k(mean_fused, xs, k, n, s, k);
			DT_CHECK(memcmp(mean_naive, mean_fused, n * sizeof(float)) == 0);
		}
	}
}

/* The vectorized exponent against a scalar twin, at every size around the
 * eight-lane blocks and the four accumulators' 32, with the largest
 * magnitude, and then a non-finite value, in each position. */
DT_TEST(fixed_point, exponent_equals_its_scalar_twin_at_every_size_and_position)
{
	static float x[67];
	for (size_t n = 0; n <= 67; n++)
		for (size_t at = 0; at < (n ? n : 1); at++) {
			for (size_t i = 0; i < n; i++)
				x[i] = (float)((int)(i % 5) - 2) * 0.01f;
			if (n)
				x[at] = at % 2 ? -3.5f : 3.5f;
			float big = 0;
			for (size_t i = 0; i < n; i++)
				big = fabsf(x[i]) > big ? fabsf(x[i]) : big;
			int want = DT_FIXED_EXP_ZERO;
			if (big > 0)
				(void)frexpf(big, &want);
			DT_CHECK_INT_EQ(dt_fixed_exponent(x, n), want);
			if (n) { /* a NaN or an infinity in any lane of any accumulator */
				x[at] = at % 3 ? NAN : -INFINITY;
				DT_CHECK_INT_EQ(dt_fixed_exponent(x, n), DT_FIXED_EXP_NONFINITE);
			}
		}
}

/* The vectorized rounding (on the float's bits, fixed_point.c) against
 * llrint's, bit for bit, over every kind of finite float below 2^e: random
 * bit patterns with every biased exponent from 0 (zeros and subnormals) to
 * the largest below 2^e, so that every right shift (ties to even included:
 * the lowest dropped bit is the half) and every left shift is taken, at
 * variable exponents from the subnormals' to 2^128 and 1 to 9 terms. */
DT_TEST(fixed_point, vector_rounding_equals_llrint_on_every_kind_of_float)
{
	enum { K = 9, N = 515 };
	static float x[K * N];
	static int64_t naive[N], fused[N];
	static float mean_naive[N], mean_fused[N];
	struct dt_rng rng;
	dt_rng_derive(&rng, 13, "fixed_point", 2);
	for (int round = 0; round < 200; round++) {
		/* -147 .. 128: scales from 209 down to -69, each of fixed_point.c's
		 * roundings (in float for 0..127, through double otherwise) */
		const int e = -147 + (int)(dt_rng_next(&rng) % 276);
		const int k = 1 + (int)(dt_rng_next(&rng) % K);
		/* biased exponents whose floats are < 2^e; below 2^-126 only
		 * subnormals, with mantissas below 2^(e + 149) */
		const uint32_t top = e > -126 ? (uint32_t)(e + 126) : 0;
		const uint32_t mmask = e > -126 ? 0x7fffffu : (1u << (uint32_t)(e + 149)) - 1;
		for (int i = 0; i < k * N; i++) {
			const uint64_t r = dt_rng_next(&rng);
			uint32_t bits = ((uint32_t)r & mmask) | (uint32_t)(r >> 63) << 31;
			bits |= (uint32_t)((r >> 23) % (top + 1)) << 23;
			if (i % 7 == 3) /* a mantissa ending in a lone 1: a tie at its shift */
				bits = (bits & ~0x7fffffu) | ((1u << (uint32_t)((r >> 40) % 23)) & mmask);
			memcpy(&x[i], &bits, sizeof(bits));
		}
		const int s = dt_fixed_scale(e, k);
		memset(naive, 0, sizeof(naive));
		for (int j = 0; j < k; j++)
			dt_fixed_accumulate(naive, x + (size_t)j * N, N, s);
		const float *xs[K];
		for (int j = 0; j < K; j++)
			xs[j] = x + (size_t)j * N;
		dt_fixed_sum_k(fused, xs, k, N, s);
		DT_CHECK(memcmp(naive, fused, sizeof(naive)) == 0);
		memset(fused, 0x5a, sizeof(fused));
		dt__fixed_sum_k_bits(fused, xs, k, N, s);
		DT_CHECK(memcmp(naive, fused, sizeof(naive)) == 0);
		/* the mean as fixed_point.h defines it, in scalars here */
		const double f = ldexp(1.0, -s) / (double)k;
		for (int i = 0; i < N; i++)
			mean_naive[i] = (float)((double)naive[i] * f);
		dt_fixed_mean(mean_fused, naive, N, s, k);
		DT_CHECK(memcmp(mean_naive, mean_fused, sizeof(mean_naive)) == 0);
		dt_fixed_sum_mean_k(mean_fused, xs, k, N, s, k);
		DT_CHECK(memcmp(mean_naive, mean_fused, sizeof(mean_naive)) == 0);
		/* in place over the last term, as the session sums */
		dt_fixed_sum_mean_k(x + (size_t)(k - 1) * N, xs, k, N, s, k);
		DT_CHECK(memcmp(mean_naive, x + (size_t)(k - 1) * N, sizeof(mean_naive)) == 0);
	}
}
