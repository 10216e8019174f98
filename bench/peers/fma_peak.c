/*
 * fma_peak.c — the FP32 FMA limit of one core, for bench/transformer.
 *
 * 24 independent chains of vector FMAs in registers (enough to cover a
 * 4-5 cycle latency on two FMA pipes) with AVX-512 where the CPU has it (-mavx512f
 * code behind a runtime check), else AVX2. Prints one JSON line:
 * {"isa": ..., "gflops": best of `reps` samples, "samples": [...]}, each
 * sample counted in this process's CPU time (CLOCK_PROCESS_CPUTIME_ID), so a
 * host where other processes take turns on the core does not lower it.
 *
 * Build: cc -O2 -o fma_peak fma_peak.c (the bench does it).
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 24
#define ITERS 4000000L

static double cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The chains are named variables, not an array: gcc keeps an array of
 * vectors in memory, and a load and a store per FMA measure the caches. */
#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
	X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

__attribute__((target("avx512f"))) static float run512(long iters)
{
	const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
#define DECL(i) __m512 c##i = _mm512_set1_ps((float)i);
#define STEP(i) c##i = _mm512_fmadd_ps(c##i, a, b);
#define SUM(i) s = _mm512_add_ps(s, c##i);
	EACH(DECL)
	for (long n = 0; n < iters; n++) {
		EACH(STEP)
	}
	__m512 s = _mm512_setzero_ps();
	EACH(SUM)
	return _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx2,fma"))) static float run256(long iters)
{
	const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
#define DECL(i) __m256 c##i = _mm256_set1_ps((float)i);
#define STEP(i) c##i = _mm256_fmadd_ps(c##i, a, b);
#define SUM(i) s = _mm256_add_ps(s, c##i);
	EACH(DECL)
	for (long n = 0; n < iters; n++) {
		EACH(STEP)
	}
	__m256 s = _mm256_setzero_ps();
	EACH(SUM)
	float out[8];
	_mm256_storeu_ps(out, s);
	return out[0] + out[7];
#undef DECL
#undef STEP
#undef SUM
}

int main(int argc, char **argv)
{
	const int reps = argc > 1 ? atoi(argv[1]) : 5;
	const int wide = __builtin_cpu_supports("avx512f");
	if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
		fprintf(stderr, "fma_peak: this CPU has neither AVX-512F nor AVX2+FMA\n");
		return 2;
	}
	const int lanes = wide ? 16 : 8;
	double best = 0.0;
	float sink = 0.0f;
	printf("{\"isa\": \"%s\", \"samples\": [", wide ? "avx512" : "avx2");
	for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
		const double t0 = cpu_s();
		sink += wide ? run512(ITERS) : run256(ITERS);
		const double g = 2.0 * lanes * CHAINS * (double)ITERS / (cpu_s() - t0) / 1e9;
		best = g > best ? g : best;
		printf("%s%.1f", r ? ", " : "", g);
	}
	printf("], \"gflops\": %.1f, \"sink\": %g}\n", best, (double)sink);
	return 0;
}
