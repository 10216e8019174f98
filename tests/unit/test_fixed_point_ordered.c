/* --deterministic's ordered sum (train/fixed_point.h, K <= DT_ORDERED_MAX_TERMS):
 * the vector means (the build's and the portable) against the formula
 * written out in scalars, on floats of every kind (zeros of both signs,
 * subnormals, the largest, NaN and infinities), at every size around the
 * eight-lane blocks and in place; the non-finite flag in every position;
 * K = 2's float loop on pairs whose sums reach every binade; and the mean
 * fused into the optimizer's update (nn/optimizer.h's
 * dt_optimizer_apply_made, as the session uses it) against the mean
 * written out and then applied, bit for bit. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "dt_test.h"
#include "nn/hparams.h"
#include "nn/optimizer.h"
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

/* Two floats whose sum lands anywhere: near cancellation (sums in the
 * subnormals and the smallest normals, where the float sum is exact), far
 * apart in exponent (the double sum inexact), equal (a tie of the halving),
 * near FLT_MAX (a float sum past it, a finite mean), or random bits. */
static void any_pair(struct dt_rng *rng, float *a, float *b)
{
	const uint64_t r = dt_rng_next(rng);
	uint32_t bits = (uint32_t)(r >> 32), other = (uint32_t)r;
	memcpy(a, &bits, sizeof(*a));
	switch (r % 6) {
	case 0: /* -a moved by a few units in the last place */
		bits ^= 0x80000000u;
		bits += (uint32_t)(other % 9) - 4u;
		break;
	case 1: { /* an exponent 20..40 below a's (0: a subnormal), either sign */
		const int eb = (int)((bits >> 23) & 0xff) - 20 - (int)(other % 21);
		bits = (other & 0x807fffffu) | ((uint32_t)(eb > 0 ? eb : 0) << 23);
		break;
	}
	case 2:
		break; /* b = a */
	case 3: /* both near FLT_MAX */
		bits = (bits & 0x80000000u) | (0x7f7fffffu - other % 4096u);
		memcpy(a, &bits, sizeof(*a));
		bits = (bits & 0x80000000u) | (0x7f7fffffu - (other >> 12) % 4096u);
		break;
	default:
		bits = other;
		break;
	}
	memcpy(b, &bits, sizeof(*b));
}

DT_TEST(fixed_point, ordered_mean_of_two_in_floats_is_the_formula_on_every_pair)
{
	enum { N = 4099 }; /* every lane of the sixteen, a tail */
	static float x0[N], x1[N], got[N];
	struct dt_rng rng;
	dt_rng_derive(&rng, 17, "fixed_point", 5);
	for (int round = 0; round < 64; round++) { /* 262k pairs */
		for (int i = 0; i < N; i++)
			any_pair(&rng, &x0[i], &x1[i]);
		const float *xs[] = { x0, x1 };
		int bad = 0;
		for (int i = 0; i < N; i++)
			bad |= !isfinite(naive_mean(xs, 2, (size_t)i));
		for (int portable = 0; portable < 2; portable++) {
			memset(got, 0x5a, sizeof(got));
			const int flag = portable ? dt__ordered_mean_k_portable(got, xs, 2, N)
						  : dt_ordered_mean_k(got, xs, 2, N);
			DT_CHECK_INT_EQ(flag, bad);
			for (int i = 0; i < N; i++) {
				const float want = naive_mean(xs, 2, (size_t)i);
				if (!same_float(want, got[i]))
					dt_test_fail(__FILE__, __LINE__, "%s: %a + %a: %a, the formula %a",
						     portable ? "portable" : "build's", (double)x0[i], (double)x1[i],
						     (double)got[i], (double)want);
			}
		}
	}
}

/* The session's maker (train/session_deal.c's make_ordered): the ordered
 * mean of a range of every term. */
struct terms {
	const float *x[DT_ORDERED_MAX_TERMS];
	int k;
	int flushed; /* a call found subnormals flushed: the rule's mode, not the caller's */
};

static int make_mean(void *arg, float *out, size_t offset, size_t n)
{
	struct terms *t = arg;
	volatile float tiny = 0x1p-149f;
	t->flushed |= tiny * 1.0f == 0.0f;
	const float *xs[DT_ORDERED_MAX_TERMS];
	for (int j = 0; j < t->k; j++)
		xs[j] = t->x[j] + offset;
	return dt_ordered_mean_k(out, xs, t->k, n);
}

DT_TEST(fixed_point, fused_mean_and_update_equal_the_mean_then_the_update)
{
	static const char *const names[] = { "sgd", "momentum", "adam", "adagrad" };
	const size_t n = 2 * DT_OPTIMIZER_CHUNK + 1003; /* chunks, and a tail of a chunk */
	struct dt_err err = DT_ERR_INIT;
	struct dt_rng rng;
	dt_rng_derive(&rng, 17, "fixed_point", 7);
	float *x = dt_xmalloc(DT_ORDERED_MAX_TERMS * n * sizeof(float)), *g = dt_xmalloc(n * sizeof(float));
	float *p0 = dt_xmalloc(n * sizeof(float)), *p1 = dt_xmalloc(n * sizeof(float));
	float *p2 = dt_xmalloc(n * sizeof(float));
	for (size_t o = 0; o < DT_ARRAY_LEN(names); o++)
		for (int k = 1; k <= DT_ORDERED_MAX_TERMS; k++) {
			struct dt_hparams hp;
			DT_CHECK_OK(dt_hparams_from_set("mlp_base", &hp, &err), &err);
			snprintf(hp.optimizer, sizeof(hp.optimizer), "%s", names[o]);
			struct dt_optimizer unfused, fused;
			DT_CHECK_OK(dt_optimizer_init(&unfused, &hp, n, &err), &err);
			DT_CHECK_OK(dt_optimizer_init(&fused, &hp, n, &err), &err);
			const size_t slot_bytes = (size_t)unfused.num_slots * n * sizeof(float);
			for (size_t i = 0; i < n; i++)
				p1[i] = p2[i] = dt_rng_uniform(&rng) - 0.5f;
			struct terms t = { .k = k };
			for (int j = 0; j < k; j++)
				t.x[j] = x + (size_t)j * n;
			for (int step = 1; step <= 3; step++) {
				/* finite floats of every kind (subnormals, zeros, the largest)
				 * in a tenth of the elements, gradient-sized ones elsewhere */
				for (size_t i = 0; i < (size_t)k * n; i++) {
					const float f = any_float(&rng), small = 1e-3f * (dt_rng_uniform(&rng) - 0.5f);
					x[i] = dt_rng_below(&rng, 10) == 0 && isfinite(f) ? f : small;
				}
				/* offsets 0 and 5: ranges that do not start on a chunk */
				const size_t off = step == 2 ? 5 : 0;
				DT_CHECK_INT_EQ(make_mean(&t, g, off, n - off), 0);
				if (off)
					dt_optimizer_apply(&unfused, p1, g, 0, off, 0.01f, step);
				dt_optimizer_apply(&unfused, p1, g, off, n - off, 0.01f, step);
				if (off)
					dt_optimizer_apply(&fused, p2, g, 0, off, 0.01f, step);
				const size_t done =
					dt_optimizer_apply_made(&fused, p2, off, n - off, 0.01f, step, make_mean, &t);
				DT_CHECK(done == n);
			}
			for (size_t i = 0; i < n; i++)
				if (memcmp(&p1[i], &p2[i], sizeof(float)) != 0)
					dt_test_fail(__FILE__, __LINE__, "%s k %d: element %zu: %a fused, %a unfused",
						     names[o], k, i, (double)p2[i], (double)p1[i]);
			if (unfused.num_slots)
				DT_CHECK(memcmp(unfused.slots, fused.slots, slot_bytes) == 0);
			DT_CHECK(!t.flushed);

			/* a NaN or an infinity in one term: the update stops at the
			 * chunk that holds it, the chunks before applied as unfused */
			const size_t at = (size_t)dt_rng_below(&rng, n);
			const size_t stop = at / DT_OPTIMIZER_CHUNK * DT_OPTIMIZER_CHUNK;
			x[(size_t)dt_rng_below(&rng, (uint64_t)k) * n + at] = at % 2 ? NAN : -INFINITY;
			memcpy(p0, p2, n * sizeof(float));
			DT_CHECK(make_mean(&t, g, 0, n) == 1);
			dt_optimizer_apply(&unfused, p1, g, 0, stop, 0.01f, 4);
			DT_CHECK(dt_optimizer_apply_made(&fused, p2, 0, n, 0.01f, 4, make_mean, &t) == stop);
			DT_CHECK(memcmp(p1, p2, stop * sizeof(float)) == 0);
			DT_CHECK(memcmp(p0 + stop, p2 + stop, (n - stop) * sizeof(float)) == 0); /* untouched */
			if (unfused.num_slots)
				DT_CHECK(memcmp(unfused.slots, fused.slots, slot_bytes) == 0);
			dt_optimizer_release(&unfused);
			dt_optimizer_release(&fused);
		}
	free(x);
	free(g);
	free(p0);
	free(p1);
	free(p2);
}
