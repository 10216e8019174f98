/* Unit tests for t2t's clip_grad_norm (nn/optimizer.h,
 * dt_clip_by_global_norm, tf.clip_by_global_norm's rule): norms above, below
 * and at the threshold, zero and non-finite gradients, a held sum of several
 * gradients, a long buffer against a naive twin, and the hparam itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/hparams.h"
#include "nn/optimizer.h"

/* Checks that g (n) still holds exactly `want`'s bits. */
static void check_unchanged(const float *g, const float *want, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&g[i], &want[i], sizeof(float)) != 0)
			dt_test_fail(__FILE__, __LINE__, "%s: element %zu changed: %.9g, was %.9g", what, i, (double)g[i],
				     (double)want[i]);
}

DT_TEST(nn_clip, above_the_threshold_scales_to_the_clip_norm)
{
	float g[2] = { 3.0f, 4.0f };
	DT_CHECK(dt_clip_by_global_norm(g, 2, 1, 1.0) == 5.0);
	const float scale = (float)(1.0 / 5.0); /* clip / norm, as TensorFlow's clip / max(norm, clip) */
	DT_CHECK(g[0] == 3.0f * scale);
	DT_CHECK(g[1] == 4.0f * scale);
	DT_CHECK_NEAR(sqrt((double)g[0] * (double)g[0] + (double)g[1] * (double)g[1]), 1.0, 1e-7);
}

DT_TEST(nn_clip, below_or_at_the_threshold_nothing_changes)
{
	const float want[3] = { 0.3f, -0.4f, 0.0f };
	float g[3];
	memcpy(g, want, sizeof(g));
	const double norm = dt_clip_by_global_norm(g, 3, 1, 1.0);
	DT_CHECK_NEAR(norm, 0.5, 1e-7);
	check_unchanged(g, want, 3, "below");
	/* at the threshold: TensorFlow's clip * (1 / clip) may be one ulp off 1;
	 * here the gradient stays exactly as it is */
	const float at[2] = { 3.0f, 4.0f };
	memcpy(g, at, sizeof(at));
	DT_CHECK(dt_clip_by_global_norm(g, 2, 1, 5.0) == 5.0);
	check_unchanged(g, at, 2, "at");
	/* clip 0 is off (t2t's default): the norm is still measured */
	DT_CHECK(dt_clip_by_global_norm(g, 2, 1, 0.0) == 5.0);
	check_unchanged(g, at, 2, "off");
}

DT_TEST(nn_clip, zero_and_non_finite_gradients_stay_as_they_are)
{
	float z[5] = { 0 };
	const float zeros[5] = { 0 };
	DT_CHECK(dt_clip_by_global_norm(z, 5, 1, 1.0) == 0.0);
	check_unchanged(z, zeros, 5, "zeros");
	DT_CHECK(dt_clip_by_global_norm(z, 0, 1, 1.0) == 0.0); /* no variables */
	const float bad[3] = { INFINITY, 1.0f, 2.0f };
	float g[3];
	memcpy(g, bad, sizeof(g));
	DT_CHECK(!isfinite(dt_clip_by_global_norm(g, 3, 1, 1.0)));
	check_unchanged(g, bad, 3, "infinite");
	g[0] = NAN;
	DT_CHECK(isnan(dt_clip_by_global_norm(g, 3, 1, 1.0)));
	DT_CHECK(g[1] == 1.0f && g[2] == 2.0f);
}

DT_TEST(nn_clip, a_held_sum_is_clipped_by_the_norm_of_its_mean)
{
	/* the sum of 2 gradients whose mean is (3, 4): norm 5, not 10 */
	float g[2] = { 6.0f, 8.0f };
	DT_CHECK(dt_clip_by_global_norm(g, 2, 2, 1.0) == 5.0);
	DT_CHECK_NEAR((double)g[0] / 2.0, 0.6, 1e-7);
	DT_CHECK_NEAR((double)g[1] / 2.0, 0.8, 1e-7);
	/* mean (3, 4) under clip 7: nothing, though the sum's own norm is 10 */
	float h[2] = { 6.0f, 8.0f };
	DT_CHECK(dt_clip_by_global_norm(h, 2, 2, 7.0) == 5.0);
	DT_CHECK(h[0] == 6.0f && h[1] == 8.0f);
}

DT_TEST(nn_clip, a_long_buffer_matches_a_naive_twin_and_is_deterministic)
{
	const size_t n = 1003; /* 250 groups of 4 and a tail of 3 */
	float *g = dt_xmalloc(n * sizeof(float)), *copy = dt_xmalloc(n * sizeof(float));
	struct dt_rng rng;
	dt_rng_seed(&rng, 5);
	double naive = 0;
	for (size_t i = 0; i < n; i++) {
		g[i] = dt_rng_normal(&rng);
		naive += (double)g[i] * (double)g[i];
	}
	naive = sqrt(naive);
	memcpy(copy, g, n * sizeof(float));
	const double clip = naive / 4;
	const double norm = dt_clip_by_global_norm(g, n, 1, clip);
	DT_CHECK_NEAR(norm, naive, 1e-9 * naive);
	const float scale = (float)(clip / norm);
	for (size_t i = 0; i < n; i++)
		if (g[i] != copy[i] * scale)
			dt_test_fail(__FILE__, __LINE__, "element %zu: %.9g, expected %.9g", i, (double)g[i],
				     (double)(copy[i] * scale));
	double after = 0;
	for (size_t i = 0; i < n; i++)
		after += (double)g[i] * (double)g[i];
	DT_CHECK_NEAR(sqrt(after), clip, 1e-6 * clip);
	/* the same buffer again: the same bits (what keeps all-reduce workers equal) */
	float *again = dt_xmalloc(n * sizeof(float));
	memcpy(again, copy, n * sizeof(float));
	DT_CHECK(dt_clip_by_global_norm(again, n, 1, clip) == norm);
	DT_CHECK(memcmp(again, g, n * sizeof(float)) == 0);
	free(g);
	free(copy);
	free(again);
}

DT_TEST(nn_clip, the_hparam_parses_validates_and_defaults_to_off)
{
	struct dt_err err = DT_ERR_INIT;
	static const char *const sets[] = { "mlp_base", "transformer_base", "transformer_tiny" };
	for (size_t i = 0; i < DT_ARRAY_LEN(sets); i++) {
		struct dt_hparams hp;
		DT_CHECK_OK(dt_hparams_from_set(sets[i], &hp, &err), &err);
		DT_CHECK(hp.clip_grad_norm == 0.0); /* t2t's transformer_base; Keras's */
	}
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("transformer_tiny", &hp, &err), &err);
	DT_CHECK_OK(dt_hparams_parse(&hp, "clip_grad_norm=1.5", &err), &err);
	DT_CHECK(hp.clip_grad_norm == 1.5);
	DT_CHECK_OK(dt_hparams_validate(&hp, &err), &err);
	hp.clip_grad_norm = -1;
	DT_CHECK_INT_EQ(dt_hparams_validate(&hp, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "clip_grad_norm");
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	DT_CHECK(f != NULL);
	hp.clip_grad_norm = 1.5;
	dt_hparams_write_json(&hp, f);
	fclose(f);
	DT_CHECK_CONTAINS(buf, "\"clip_grad_norm\": 1.5");
	free(buf);
}
