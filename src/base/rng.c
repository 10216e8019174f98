#include "base/rng.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void dt_rng_seed(struct dt_rng *rng, uint64_t seed)
{
	uint64_t x = seed;
	for (int i = 0; i < 4; i++)
		rng->s[i] = splitmix64(&x);
}

void dt_rng_derive(struct dt_rng *rng, uint64_t seed, const char *purpose, uint64_t counter)
{
	/* FNV-1a over the label, then mixed with seed and counter. */
	uint64_t h = 0xcbf29ce484222325ULL;
	for (const char *p = purpose; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
	uint64_t x = seed ^ h;
	uint64_t mixed = splitmix64(&x) ^ (counter * 0xd1342543de82ef95ULL);
	dt_rng_seed(rng, mixed);
}

uint64_t dt_rng_below(struct dt_rng *rng, uint64_t n)
{
	/* Rejection sampling: discard the top partial range. */
	uint64_t limit = UINT64_MAX - UINT64_MAX % n;
	uint64_t r;
	do {
		r = dt_rng_next(rng);
	} while (r >= limit);
	return r % n;
}

void dt_rng_bulk_seed(struct dt_rng_bulk *b, struct dt_rng *rng)
{
	uint64_t x = dt_rng_next(rng);
	for (int l = 0; l < DT_RNG_LANES; l++)
		for (int i = 0; i < 4; i++)
			b->s[i][l] = splitmix64(&x);
}

/* One step of every lane: out (2 * DT_RNG_LANES) words. */
static void bulk_step(struct dt_rng_bulk *b, uint32_t *out)
{
	uint64_t *s0 = b->s[0], *s1 = b->s[1], *s2 = b->s[2], *s3 = b->s[3];
	for (int l = 0; l < DT_RNG_LANES; l++) {
		const uint64_t x = s1[l] * 5, r = ((x << 7) | (x >> 57)) * 9, t = s1[l] << 17;
		s2[l] ^= s0[l];
		s3[l] ^= s1[l];
		s1[l] ^= s2[l];
		s0[l] ^= s3[l];
		s2[l] ^= t;
		s3[l] = (s3[l] << 45) | (s3[l] >> 19);
		out[2 * l] = (uint32_t)r;
		out[2 * l + 1] = (uint32_t)(r >> 32);
	}
}

void dt_rng_bulk_u32(struct dt_rng_bulk *b, uint32_t *out, size_t n)
{
	enum { W = 2 * DT_RNG_LANES };
	size_t i = 0;
	for (; i + W <= n; i += W)
		bulk_step(b, out + i);
	if (i < n) {
		uint32_t last[W];
		bulk_step(b, last);
		memcpy(out + i, last, (n - i) * sizeof(uint32_t));
	}
}

float dt_rng_normal(struct dt_rng *rng)
{
	double u1 = ((double)(dt_rng_next(rng) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
	double u2 = (double)(dt_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void dt_rng_shuffle_u32(struct dt_rng *rng, uint32_t *items, uint64_t n)
{
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = dt_rng_below(rng, i);
		uint32_t tmp = items[i - 1];
		items[i - 1] = items[j];
		items[j] = tmp;
	}
}
