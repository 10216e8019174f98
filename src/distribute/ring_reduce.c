/*
 * ring_reduce.c — the reduction kernels the progress engine (ring.c) applies
 * to received bytes as they arrive: float32 sums and wrapping int64 sums,
 * element by element in the order the plan delivers them (so the result of
 * each algorithm is fixed per element, COLLECTIVES.md).
 */
#include "distribute/ring_run.h"

#include <string.h>

/* dst[i] += src[i] over bytes/4 floats; src may be unaligned (it sits in the
 * stage after variable-length frames). GCC's vector extension, because -O2's
 * cheap cost model leaves the plain loop scalar (it would need an alias check):
 * 8 floats per step, loads and stores through memcpy. */
typedef float dt__v8sf __attribute__((vector_size(32)));

void dt__ring_add_f32(uint8_t *restrict dst, const uint8_t *restrict src, size_t bytes)
{
	size_t n = bytes / 4, i = 0;
	for (; i + 8 <= n; i += 8) {
		dt__v8sf a, b;
		memcpy(&a, dst + 4 * i, sizeof(a));
		memcpy(&b, src + 4 * i, sizeof(b));
		a += b;
		memcpy(dst + 4 * i, &a, sizeof(a));
	}
	for (; i < n; i++) {
		float a, b;
		memcpy(&a, dst + 4 * i, 4);
		memcpy(&b, src + 4 * i, 4);
		a += b;
		memcpy(dst + 4 * i, &a, 4);
	}
}

/* Wrapping int64 sums (unsigned arithmetic: signed overflow is undefined in
 * C; two's complement wraps the same in any order, so the result does not
 * depend on the ring's order even if a caller lets it wrap). */
void dt__ring_add_i64(uint8_t *restrict dst, const uint8_t *restrict src, size_t bytes)
{
	size_t n = bytes / 8;
	for (size_t i = 0; i < n; i++) {
		uint64_t a, b;
		memcpy(&a, dst + 8 * i, 8);
		memcpy(&b, src + 8 * i, 8);
		a += b;
		memcpy(dst + 8 * i, &a, 8);
	}
}
