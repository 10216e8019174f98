#include "train/fixed_point.h"

#include <math.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <string.h>

/* The largest magnitude is the largest of the bit patterns without the sign
 * (IEEE 754 orders non-negative floats as their bits), an integer maximum
 * that vectorizes; NaNs and infinities are the patterns from 0x7f800000 up.
 * Eight lanes at a time in a vector of GCC's and clang's extension: the
 * build's -O2 does not vectorize the scalar loop (it was 14% of an mlp
 * step's time), and the maximum is the same in any order. The lanes are
 * signed (the patterns without the sign are below 2^31), so the maximum is
 * one vpmaxsd: an unsigned compare, which AVX2 lacks, took three dependent
 * instructions a vector, and with one accumulator that chain, not the
 * memory, set the pass's speed (about 30 us for mlp's 235k floats, a tenth
 * of its step). Four accumulators hide the maximum's latency. */
typedef int32_t v8i32 __attribute__((vector_size(32)));

/* *m = max(*m, |x[i..i+8)|'s bits). Through a pointer: a 32-byte vector
 * argument or result changes the ABI where AVX is not enabled (-Wpsabi), as
 * in the sanitizer build. */
static inline void max8(v8i32 *m, const float *x, size_t i)
{
	v8i32 b;
	memcpy(&b, x + i, sizeof(b));
	b &= 0x7fffffff;
	const v8i32 gt = b > *m;
	*m = (b & gt) | (*m & ~gt);
}

int dt_fixed_exponent(const float *x, size_t n)
{
	v8i32 m0 = { 0 }, m1 = { 0 }, m2 = { 0 }, m3 = { 0 };
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		max8(&m0, x, i);
		max8(&m1, x, i + 8);
		max8(&m2, x, i + 16);
		max8(&m3, x, i + 24);
	}
	for (; i + 8 <= n; i += 8)
		max8(&m0, x, i);
	const v8i32 g1 = m1 > m0, g3 = m3 > m2;
	m0 = (m1 & g1) | (m0 & ~g1);
	m2 = (m3 & g3) | (m2 & ~g3);
	const v8i32 g2 = m2 > m0;
	m0 = (m2 & g2) | (m0 & ~g2);
	uint32_t m = 0;
	for (int l = 0; l < 8; l++)
		m = (uint32_t)m0[l] > m ? (uint32_t)m0[l] : m;
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
 * summed in registers (the tails of the vector loops below). */
static inline int64_t sum_k(const float *const *x, int k, size_t i, double f)
{
	int64_t a = 0;
	for (int j = 0; j < k; j++)
		a += (int64_t)llrint((double)x[j][i] * f);
	return a;
}

/* Eight elements at a time in vectors of GCC's and clang's extension. llrint
 * does not vectorize (one scalar cvtsd2si per element and micro-batch was
 * 22% of an mlp step's process). Without AVX-512DQ (below) the rounding is
 * done on the float's bits in 64-bit integer lanes, which vectorize with
 * AVX2's variable shifts
 * (vpsllvq, vpsrlvq) and wider: x = mant * 2^(E - 150) for the biased
 * exponent E (E = 1 for subnormals, whose mantissa has no implicit bit), so
 * x * 2^scale = mant * 2^sh with sh = E - 150 + scale, an exact left shift
 * when sh >= 0 and a right shift by r = -sh rounded half to even otherwise:
 * (mant + bias) >> r with bias = 2^(r-1) - 1 + (the kept part's lowest bit),
 * which carries exactly when the dropped part is above half, or is half and
 * the kept part is odd. Then the sign. The result is llrint's, bit for bit
 * (x * 2^scale is exact in double, and llrint rounds it half to even): the
 * unit test checks it against dt_fixed_accumulate over every kind of float. */
typedef int64_t v8i64 __attribute__((vector_size(64)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));
typedef double v8f64 __attribute__((vector_size(64)));
typedef float v8f32 __attribute__((vector_size(32)));

/* Vectors go through pointers, not by value: a 64-byte vector argument or
 * result changes the ABI where AVX-512 is not enabled (-Wpsabi), as in the
 * sanitizer build, which has no -march=native. */
static inline void to_fixed8_bits(v8i64 *out, const float *x, int64_t sh0)
{
	v8u32 u;
	memcpy(&u, x, sizeof(u));
	const v8i64 b = __builtin_convertvector(u, v8i64); /* zero-extended bits */
	const v8i64 a = b & 0x7fffffff, e = a >> 23;
	const v8i64 normal = (v8i64)(e != 0); /* -1 where the implicit bit is set */
	const v8i64 mant = (a & 0x7fffff) | (normal & 0x800000);
	const v8i64 sh = e + 1 + normal + sh0; /* max(E, 1) - 150 + scale */
	v8i64 left = sh & (v8i64)(sh > 0), right = -sh & (v8i64)(sh < 0);
	/* A shift count past 63 is undefined in C; a mantissa shifted right by
	 * 40 is 0 with a remainder below half, and a left shift above 39 only
	 * meets zeros when |x| < 2^e (the scale's promise), so clamp both. */
	right = (right & (v8i64)(right <= 40)) | (40 & (v8i64)(right > 40));
	left = (left & (v8i64)(left <= 63)) | (63 & (v8i64)(left > 63));
	const v8i64 one = (v8i64){ 1, 1, 1, 1, 1, 1, 1, 1 } << right;
	const v8i64 bias = ((one >> 1) - 1 + ((mant >> right) & 1)) & (one - 1);
	const v8i64 q = ((mant + bias) >> right) << left;
	const v8i64 neg = -(b >> 31);
	*out = (q ^ neg) - neg;
}

/* How to_fixed8 rounds: */
enum {
	BY_BITS,   /* the portable rounding above */
	BY_DOUBLE, /* AVX-512DQ, through double */
	BY_FLOAT,  /* AVX-512DQ, in float: 0 <= scale <= 127 */
};

/* With AVX-512DQ the hardware has llrint in vectors: vcvtpd2qq rounds as
 * the rounding mode says (to nearest, ties to even, as llrint does), after
 * the exact conversion to double and the exact product. A fifth of the
 * instructions of the portable rounding above, which double-pumped 512-bit
 * units (AMD's Zen 4) ran no faster than the scalar llrint. When 2^scale is
 * a normal float (0 <= scale <= 127, the usual case: a variable's largest
 * gradient between 2^-65 and 2^62), x * 2^scale is exact in float too (the
 * mantissa is x's, the result below 2^62, and scaling up never rounds),
 * and vcvtps2qq rounds it as vcvtpd2qq does the same value in double: two
 * 256-bit instructions instead of three 512-bit ones (the conversion to
 * double and the product), which the unit test checks bit for bit at every
 * scale. `how` is a constant at each call; BY_BITS is for the unit test on
 * any machine. */
static inline void to_fixed8(v8i64 *out, const float *x, int64_t sh0, double f, float ff, int how)
{
#if defined(__AVX512F__) && defined(__AVX512DQ__)
	if (how == BY_FLOAT) {
		const __m512i q = _mm512_cvtps_epi64(_mm256_mul_ps(_mm256_loadu_ps(x), _mm256_set1_ps(ff)));
		memcpy(out, &q, sizeof(*out));
		return;
	}
	if (how == BY_DOUBLE) {
		const __m512d d = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x)), _mm512_set1_pd(f));
		const __m512i q = _mm512_cvtpd_epi64(d);
		memcpy(out, &q, sizeof(*out));
		return;
	}
#else
	(void)f;
	(void)ff;
	(void)how;
#endif
	to_fixed8_bits(out, x, sh0);
}

/* Which rounding the build and the scale allow. */
static int fast_rounding(int scale)
{
#if defined(__AVX512F__) && defined(__AVX512DQ__)
	return scale >= 0 && scale <= 127 ? BY_FLOAT : BY_DOUBLE;
#else
	(void)scale;
	return BY_BITS;
#endif
}

static inline void sum_k8(v8i64 *a, const float *const *x, int k, size_t i, int64_t sh0, double f, float ff, int how)
{
	to_fixed8(a, x[0] + i, sh0, f, ff, how);
	for (int j = 1; j < k; j++) {
		v8i64 t;
		to_fixed8(&t, x[j] + i, sh0, f, ff, how);
		*a += t;
	}
}

static inline void mean8(float *out, const v8i64 *acc, double m)
{
	v8f64 d = __builtin_convertvector(*acc, v8f64);
	d *= m;
	const v8f32 f = __builtin_convertvector(d, v8f32);
	memcpy(out, &f, sizeof(f));
}

static inline void fixed_sum_k(int64_t *acc, const float *const *x, int k, size_t n, int scale, int how)
{
	const double f = ldexp(1.0, scale);
	const float ff = how == BY_FLOAT ? ldexpf(1.0f, scale) : 0.0f;
	const int64_t sh0 = (int64_t)scale - 150;
	size_t i = 0;
	for (; k > 0 && i + 8 <= n; i += 8) {
		v8i64 a;
		sum_k8(&a, x, k, i, sh0, f, ff, how);
		memcpy(acc + i, &a, sizeof(a));
	}
	for (; i < n; i++)
		acc[i] = sum_k(x, k, i, f);
}

void dt_fixed_sum_k(int64_t *acc, const float *const *x, int k, size_t n, int scale)
{
	switch (fast_rounding(scale)) { /* a loop for each, `how` a constant in it */
	case BY_FLOAT:
		fixed_sum_k(acc, x, k, n, scale, BY_FLOAT);
		break;
	case BY_DOUBLE:
		fixed_sum_k(acc, x, k, n, scale, BY_DOUBLE);
		break;
	default:
		fixed_sum_k(acc, x, k, n, scale, BY_BITS);
	}
}

void dt__fixed_sum_k_bits(int64_t *acc, const float *const *x, int k, size_t n, int scale)
{
	fixed_sum_k(acc, x, k, n, scale, BY_BITS);
}

static inline void fixed_sum_mean_k(float *out, const float *const *x, int k, size_t n, int scale, int64_t terms,
				    int how)
{
	const double f = ldexp(1.0, scale), m = ldexp(1.0, -scale) / (double)terms;
	const float ff = how == BY_FLOAT ? ldexpf(1.0f, scale) : 0.0f;
	const int64_t sh0 = (int64_t)scale - 150;
	size_t i = 0;
	for (; k > 0 && i + 8 <= n; i += 8) {
		v8i64 a;
		sum_k8(&a, x, k, i, sh0, f, ff, how);
		mean8(out + i, &a, m);
	}
	for (; i < n; i++)
		out[i] = (float)((double)sum_k(x, k, i, f) * m);
}

void dt_fixed_sum_mean_k(float *out, const float *const *x, int k, size_t n, int scale, int64_t terms)
{
	switch (fast_rounding(scale)) {
	case BY_FLOAT:
		fixed_sum_mean_k(out, x, k, n, scale, terms, BY_FLOAT);
		break;
	case BY_DOUBLE:
		fixed_sum_mean_k(out, x, k, n, scale, terms, BY_DOUBLE);
		break;
	default:
		fixed_sum_mean_k(out, x, k, n, scale, terms, BY_BITS);
	}
}

void dt_fixed_mean(float *out, const int64_t *acc, size_t n, int scale, int64_t terms)
{
	/* One factor for every element (2^-scale / terms, rounded once): the
	 * same bits on every task, and a multiplication rather than a division. */
	const double f = ldexp(1.0, -scale) / (double)terms;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		v8i64 a;
		memcpy(&a, acc + i, sizeof(a));
		mean8(out + i, &a, f);
	}
	for (; i < n; i++)
		out[i] = (float)((double)acc[i] * f);
}

/* The ordered sum's element i (fixed_point.h's formula): the vector loops'
 * tail, and its definition. */
static inline float ordered_mean1(const float *const *x, int k, size_t i, double m)
{
	double a = (double)x[0][i];
	for (int j = 1; j < k; j++)
		a += (double)x[j][i];
	return (float)(a * m);
}

/*
 * K = 2 in floats: out = fl32(a + b) * 0.5f, sixteen lanes at a time
 * (AVX-512F; eight in portable vectors), the formula's bits whenever
 * s = fl32(a + b) is finite. Why: if |a + b| <
 * 2^-125 the float sum is exact (a and b are multiples of 2^-149, and 24
 * bits at that spacing reach 2^-125), so s * 0.5f rounds (a + b) / 2 once,
 * as the formula does (its double sum is exact too, and halving a double
 * of a float's range is exact). Otherwise |a + b| >= 2^-125 and the
 * formula's fl32(fl64(a + b) / 2) = fl32(fl64(a + b)) / 2 (halving commutes
 * with rounding in the normal range) = fl32(a + b) / 2 (double rounding
 * through binary64 is innocuous for a sum of two binary32: 53 >= 2 * 24 + 2,
 * Figueroa 1995) = s * 0.5f, exact. A non-finite s (an infinity or a NaN
 * in a term, or a sum past FLT_MAX whose half is finite) ends the float
 * loop: the double loop below takes the rest. The conversions to double
 * and back were the double loop's cost (it runs at 0.12 ns an element with
 * the data in L1, 28 us for mlp's 238k floats: compute, not memory); this
 * one does one addition and one multiplication per vector. In the
 * default floating-point mode (no flush of denormals: the session's). The
 * unit test checks it against the formula on pairs of every kind.
 */
static inline size_t ordered_mean_2f(float *out, const float *const *x, size_t n, int portable)
{
	size_t i = 0;
#if defined(__AVX512F__)
	if (!portable) {
		const __m512 half = _mm512_set1_ps(0.5f);
		const __m512i ex = _mm512_set1_epi32(0x7f800000);
		for (; i + 16 <= n; i += 16) {
			const __m512 s = _mm512_add_ps(_mm512_loadu_ps(x[0] + i), _mm512_loadu_ps(x[1] + i));
			if (_mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(s), ex), ex))
				return i;
			_mm512_storeu_ps(out + i, _mm512_mul_ps(s, half));
		}
		return i;
	}
#else
	(void)portable;
#endif
	for (; i + 8 <= n; i += 8) {
		v8f32 a, b;
		memcpy(&a, x[0] + i, sizeof(a));
		memcpy(&b, x[1] + i, sizeof(b));
		a += b;
		v8i32 e;
		memcpy(&e, &a, sizeof(e));
		e = (e & 0x7f800000) == 0x7f800000;
		uint64_t w[4]; /* any lane: an OR of four words (a lane loop made this 10x slower with AVX2) */
		memcpy(w, &e, sizeof(w));
		if (w[0] | w[1] | w[2] | w[3])
			return i;
		a *= 0.5f;
		memcpy(out + i, &a, sizeof(a));
	}
	return i;
}

/* Eight elements at a time, the same operations in the same order per lane
 * as ordered_mean1, so the same bits. The non-finite check is an OR of the
 * exponent field's "all ones" over the results, in registers. With AVX-512F
 * in intrinsics: the vector extension's float-to-double conversion of eight
 * lanes compiles (GCC 12, -march=znver4) to two 128-bit conversions and an
 * insert, and the pass took 48 us for mlp's 235k floats at k = 2 against 27
 * us here. `k` is a constant at each call (dt_ordered_mean_k's switch), so
 * the loop over the terms unrolls; at k = 2 the float loop above goes
 * first, and this one takes what it leaves. */
static inline int ordered_mean_k(float *out, const float *const *x, int k, size_t n, int portable)
{
	const double m = 1.0 / (double)k;
	int nonfinite = 0;
	size_t i = k == 2 ? ordered_mean_2f(out, x, n, portable) : 0;
#if defined(__AVX512F__)
	if (!portable) {
		const __m512d mm = _mm512_set1_pd(m);
		const __m256i ex = _mm256_set1_epi32(0x7f800000);
		__m256i bad = _mm256_setzero_si256();
		for (; i + 8 <= n; i += 8) {
			__m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x[0] + i));
			for (int j = 1; j < k; j++)
				a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_loadu_ps(x[j] + i)));
			const __m256 f = _mm512_cvtpd_ps(_mm512_mul_pd(a, mm));
			_mm256_storeu_ps(out + i, f);
			bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(f), ex), ex));
		}
		nonfinite = !_mm256_testz_si256(bad, bad);
	}
#else
	(void)portable;
#endif
	v8i32 bad = { 0 };
	for (; i + 8 <= n; i += 8) {
		v8f32 f;
		memcpy(&f, x[0] + i, sizeof(f));
		v8f64 a = __builtin_convertvector(f, v8f64);
		for (int j = 1; j < k; j++) {
			memcpy(&f, x[j] + i, sizeof(f));
			a += __builtin_convertvector(f, v8f64);
		}
		a *= m;
		f = __builtin_convertvector(a, v8f32);
		memcpy(out + i, &f, sizeof(f));
		v8i32 b;
		memcpy(&b, &f, sizeof(b));
		bad |= (b & 0x7f800000) == 0x7f800000;
	}
	for (int l = 0; l < 8; l++)
		nonfinite |= bad[l] != 0;
	for (; i < n; i++) {
		out[i] = ordered_mean1(x, k, i, m);
		nonfinite |= !isfinite(out[i]);
	}
	return nonfinite;
}

int dt_ordered_mean_k(float *out, const float *const *x, int k, size_t n)
{
	switch (k) { /* a loop for each, k a constant in it */
	case 1:
		return ordered_mean_k(out, x, 1, n, 0);
	case 2:
		return ordered_mean_k(out, x, 2, n, 0);
	case 3:
		return ordered_mean_k(out, x, 3, n, 0);
	default:
		return ordered_mean_k(out, x, k, n, 0);
	}
}

int dt__ordered_mean_k_portable(float *out, const float *const *x, int k, size_t n)
{
	return ordered_mean_k(out, x, k, n, 1);
}
