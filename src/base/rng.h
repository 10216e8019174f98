/*
 * rng.h — the seeded random number generator (xoshiro256**).
 *
 * dtrain never calls rand(): every random choice (initializers, dropout
 * masks, data shuffles, synthetic data) draws from a `struct dt_rng` that
 * was seeded explicitly, so the same --seed gives the same run. Streams are
 * derived, not shared: dt_rng_derive(seed, "shuffle", epoch) gives an
 * independent generator per purpose, so adding a draw in one place does not
 * shift the numbers everywhere else.
 *
 * The state is four 64-bit words and is transparent so checkpoints can save
 * and restore it byte for byte.
 */
#ifndef DT_BASE_RNG_H
#define DT_BASE_RNG_H

#include <stddef.h>
#include <stdint.h>

struct dt_rng {
	uint64_t s[4];
};

/* Seeds through splitmix64, as the xoshiro authors recommend. */
void dt_rng_seed(struct dt_rng *rng, uint64_t seed);
/* A generator for one purpose: mixes seed, a label and a counter. */
void dt_rng_derive(struct dt_rng *rng, uint64_t seed, const char *purpose, uint64_t counter);

/* The next 64 bits. Inline with dt_rng_uniform: dropout draws one per
 * element (tens of millions a transformer step), and a call each cost a
 * quarter of the step (bench/transformer). */
static inline uint64_t dt_rng_next(struct dt_rng *rng)
{
	uint64_t *s = rng->s;
	const uint64_t x = s[1] * 5, result = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = (s[3] << 45) | (s[3] >> 19);
	return result;
}
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t dt_rng_below(struct dt_rng *rng, uint64_t n);
/* Uniform float in [0, 1) with 24 random bits. */
static inline float dt_rng_uniform(struct dt_rng *rng)
{
	return (float)(dt_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}
/* Bulk draws for dropout masks (tens of millions a transformer step):
 * DT_RNG_LANES independent xoshiro256** generators seeded (splitmix64) from
 * one draw of a dt_rng, stepped together, so the lanes run in parallel
 * where one generator's steps depend on each other. Another stream than
 * dt_rng_next's, and as deterministic: the same dt_rng state gives the same
 * words. */
#define DT_RNG_LANES 8
struct dt_rng_bulk {
	uint64_t s[4][DT_RNG_LANES];
};
/* Takes one draw from rng. */
void dt_rng_bulk_seed(struct dt_rng_bulk *b, struct dt_rng *rng);
/* n uniform 32-bit words, two from each 64-bit output. */
void dt_rng_bulk_u32(struct dt_rng_bulk *b, uint32_t *out, size_t n);
/* t with P(word < t) = rate to 2^-32, for 0 <= rate < 1: a word below t
 * is a drop. */
static inline uint32_t dt_rng_u32_threshold(float rate)
{
	const double t = (double)rate * 4294967296.0;
	return t >= 4294967295.0 ? 4294967295u : (uint32_t)t + ((double)(uint32_t)t < t);
}
/* Standard normal (Box–Muller; one value per call, no cached spare). */
float dt_rng_normal(struct dt_rng *rng);
/* Fisher–Yates shuffle of `n` uint32 indices. */
void dt_rng_shuffle_u32(struct dt_rng *rng, uint32_t *items, uint64_t n);

#endif
