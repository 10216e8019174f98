/* Unit tests for tensor/kernels_direct.h: the direct one-channel conv +
 * bias + ReLU + 2x2 max pooling kernels against their naive twins (odd
 * sizes, every window width path, with and without bias and ReLU), and
 * through the conv layer: the same outputs and parameter gradients as the
 * im2col path, and finite differences of the gradients it computes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "nn/layers.h"
#include "tensor/kernels_direct.h"

/* |a - b| <= tol * (1 + |b|) for all n, else the first offender fails the test. */
static void check_close(const char *what, int shape, const float *a, const float *b, size_t n, double tol)
{
	for (size_t i = 0; i < n; i++) {
		const double d = fabs((double)a[i] - (double)b[i]);
		if (!(d <= tol * (1.0 + fabs((double)b[i])))) {
			dt_test_fail(__FILE__, __LINE__, "shape %d: %s differs at %zu: %.9g vs naive %.9g", shape, what, i,
				     (double)a[i], (double)b[i]);
			return;
		}
	}
}

struct direct_case {
	int B, H, W, K, pad, OC, relu, bias;
};

static void check_direct_case(int t, const struct direct_case *c)
{
	struct dt_conv_geom g;
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, c->H, c->W, 1, c->K, c->K, 1, c->pad), 0);
	DT_CHECK(dt_conv1_pool_supported(&g));
	const size_t xn = (size_t)c->B * (size_t)c->H * (size_t)c->W;
	const size_t kn = (size_t)c->K * (size_t)c->K * (size_t)c->OC;
	const size_t yn = (size_t)c->B * (size_t)(g.OH / 2) * (size_t)(g.OW / 2) * (size_t)c->OC;
	float *x = random_floats(xn, 10 + (uint64_t)t, 1.0f), *k = random_floats(kn, 20 + (uint64_t)t, 0.3f);
	float *bias = c->bias ? random_floats((size_t)c->OC, 30 + (uint64_t)t, 0.5f) : NULL;
	float *y1 = random_floats(yn, 1, 1.0f), *y2 = random_floats(yn, 2, 1.0f);
	int32_t *a1 = dt_xmalloc(yn * sizeof(int32_t)), *a2 = dt_xmalloc(yn * sizeof(int32_t));
	/* Scratch full of NaN: any lane or row the kernels read without writing shows. */
	const size_t sn = dt_conv1_pool_scratch_floats(&g, c->OC);
	float *scratch = dt_xmalloc(sn * sizeof(float));
	for (size_t i = 0; i < sn; i++)
		scratch[i] = NAN;

	dt_conv1_pool_forward(&g, c->OC, x, k, bias, c->relu, y1, a1, c->B, scratch);
	dt_conv1_pool_forward_naive(&g, c->OC, x, k, bias, c->relu, y2, a2, c->B);
	check_close("pooled output", t, y1, y2, yn, 1e-5);
	/* The winner must agree wherever it matters: where ReLU left the output
	 * at 0 every position gets a zero gradient, so any winner is right. */
	for (size_t i = 0; i < yn; i++)
		if ((!c->relu || y2[i] > 1e-4f) && a1[i] != a2[i]) {
			dt_test_fail(__FILE__, __LINE__, "shape %d: argmax differs at %zu: %d vs naive %d", t, i,
				     (int)a1[i], (int)a2[i]);
			break;
		}

	float *dy = random_floats(yn, 40 + (uint64_t)t, 1.0f), *dy_copy = dt_xmalloc(yn * sizeof(float));
	memcpy(dy_copy, dy, yn * sizeof(float));
	float *dk1 = random_floats(kn, 3, 1.0f), *dk2 = random_floats(kn, 4, 1.0f);
	float *db1 = random_floats((size_t)c->OC, 5, 1.0f), *db2 = random_floats((size_t)c->OC, 6, 1.0f);
	for (size_t i = 0; i < sn; i++)
		scratch[i] = NAN;
	dt_conv1_pool_backward(&g, c->OC, x, y1, dy, a1, c->relu, dk1, c->bias ? db1 : NULL, c->B, scratch);
	dt_conv1_pool_backward_naive(&g, c->OC, x, y1, dy, a1, c->relu, dk2, c->bias ? db2 : NULL, c->B);
	check_close("kernel gradient", t, dk1, dk2, kn, 1e-4);
	if (c->bias)
		check_close("bias gradient", t, db1, db2, (size_t)c->OC, 1e-4);
	DT_CHECK(memcmp(dy, dy_copy, yn * sizeof(float)) == 0); /* dy is read-only */

	free(x);
	free(k);
	free(bias);
	free(y1);
	free(y2);
	free(a1);
	free(a2);
	free(scratch);
	free(dy);
	free(dy_copy);
	free(dk1);
	free(dk2);
	free(db1);
	free(db2);
}

DT_TEST(tensor, conv1_pool_direct_matches_naive)
{
	static const struct direct_case cases[] = {
		/* B, H, W, K, pad, OC, relu, bias */
		{ 3, 28, 28, 5, 2, 6, 1, 1 },  /* LeNet's first layer */
		{ 2, 28, 28, 3, 1, 32, 1, 1 }, /* cnn's first layer */
		{ 2, 13, 11, 3, 0, 5, 0, 1 },  /* odd conv output (11x9), no ReLU */
		{ 1, 9, 7, 4, 1, 7, 1, 0 },    /* even window, no bias */
		{ 2, 32, 32, 7, 3, 3, 1, 1 },  /* 16 pooled columns: every lane used */
		{ 1, 17, 19, 9, 4, 13, 0, 0 }, /* window 9: the generic width path */
		{ 2, 4, 5, 3, 0, 2, 1, 1 },    /* one pooled row and column */
	};
	for (size_t t = 0; t < DT_ARRAY_LEN(cases); t++)
		check_direct_case((int)t, &cases[t]);
}

DT_TEST(tensor, conv1_pool_direct_declines_what_it_does_not_handle)
{
	struct dt_conv_geom g;
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 28, 28, 2, 5, 5, 1, 2), 0); /* two channels */
	DT_CHECK(!dt_conv1_pool_supported(&g));
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 28, 28, 1, 5, 5, 2, 2), 0); /* stride 2 */
	DT_CHECK(!dt_conv1_pool_supported(&g));
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 40, 40, 1, 5, 5, 1, 2), 0); /* 20 pooled columns */
	DT_CHECK(!dt_conv1_pool_supported(&g));
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 28, 1, 1, 1, 1, 1, 0), 0); /* no pooled column */
	DT_CHECK(!dt_conv1_pool_supported(&g));
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 28, 28, 1, 5, 5, 1, 2), 0);
	DT_CHECK(dt_conv1_pool_supported(&g));
}

/* The conv layer with fused pooling on one channel: its direct backward
 * (taken when no input gradient is asked for) gives the parameter
 * gradients of the im2col backward (taken when one is), and without ReLU
 * (whose kink at 0 many pre-activations sit near) both match finite
 * differences. */
static void check_layer_direct_backward(int relu, int fd)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_conv2d(&g.layer, "conv_1", (struct dt_shape){ 8, 8, 1 }, 5, 5, 3, 1, 2, relu, &err),
		    &err);
	DT_CHECK_OK(dt_layer_fuse_pool(&g.layer, &err), &err);
	DT_CHECK(dt_conv1_pool_supported(&g.layer.geom));
	rig_init(&g, 2, 1600);
	rig_loss(&g);
	/* With dx: the im2col path. */
	memcpy(g.dy, g.r, g.out_n * sizeof(float));
	dt_layer_backward(&g.layer, g.x, g.y, g.dy, g.dx, g.B, g.scratch);
	float *ref = dt_xmalloc(g.np * sizeof(float));
	memcpy(ref, g.grads, g.np * sizeof(float));
	/* Without: the direct path. */
	memset(g.grads, 0, g.np * sizeof(float));
	memcpy(g.dy, g.r, g.out_n * sizeof(float));
	dt_layer_backward(&g.layer, g.x, g.y, g.dy, NULL, g.B, g.scratch);
	check_close("direct vs im2col parameter gradient", relu, g.grads, ref, g.np, 1e-4);
	if (fd) {
		float *analytic = dt_xmalloc(g.np * sizeof(float));
		memcpy(analytic, g.grads, g.np * sizeof(float));
		check_array("params", g.params, g.np, analytic, rig_loss_cb, &g, 5e-3, 2e-3, 1);
		free(analytic);
	}
	free(ref);
	rig_release(&g);
}

DT_TEST(tensor, conv1_pool_layer_direct_backward_matches_im2col_and_differences)
{
	check_layer_direct_backward(1, 0);
	check_layer_direct_backward(0, 1);
}

/* The input gradient through fused pooling: the sparse scatter against the
 * naive dense routing, any channels, stride and padding, with the zeros
 * ReLU leaves in dy. */
DT_TEST(tensor, conv_pool_input_grad_matches_naive)
{
	static const int cases[][7] = {
		/* B, H, W, C, K, stride, pad; OC = C + 3 */
		{ 2, 14, 14, 6, 5, 1, 0 }, /* LeNet's second layer */
		{ 2, 14, 14, 8, 3, 1, 1 }, /* cnn's second, fewer channels */
		{ 3, 9, 7, 3, 3, 2, 1 },   /* stride 2, odd output */
		{ 1, 6, 11, 1, 4, 1, 2 },  /* one channel, even window, wide padding */
	};
	for (size_t t = 0; t < DT_ARRAY_LEN(cases); t++) {
		const int B = cases[t][0], H = cases[t][1], W = cases[t][2], C = cases[t][3], K = cases[t][4];
		const int OC = C + 3;
		struct dt_conv_geom g;
		DT_CHECK_INT_EQ(dt_conv_geom_init(&g, H, W, C, K, K, cases[t][5], cases[t][6]), 0);
		const size_t zn = (size_t)B * (size_t)g.OH * (size_t)g.OW * (size_t)OC;
		const size_t yn = (size_t)B * (size_t)(g.OH / 2) * (size_t)(g.OW / 2) * (size_t)OC;
		const size_t xn = (size_t)B * (size_t)H * (size_t)W * (size_t)C, kn = (size_t)dt_conv_k(&g) * (size_t)OC;
		float *z = random_floats(zn, 60 + t, 1.0f), *y = random_floats(yn, 61 + t, 1.0f);
		int32_t *a = dt_xmalloc(yn * sizeof(int32_t));
		dt_maxpool2_forward(z, y, a, B, g.OH, g.OW, OC);
		float *dy = random_floats(yn, 62 + t, 1.0f);
		for (size_t i = 0; i < yn; i += 3)
			dy[i] = 0.0f;
		const size_t ktn = dt_conv_kt_floats(&g, OC), seg = (size_t)K * (size_t)C;
		const size_t segp = ktn / ((size_t)OC * (size_t)K);
		DT_CHECK(segp >= seg && segp % 16 == 0 && segp < seg + 16);
		float *k = random_floats(kn, 63 + t, 0.5f), *kt = random_floats(ktn, 64, 1.0f);
		dt_conv_kernel_transpose(&g, k, OC, kt);
		for (int o = 0; o < OC; o++) /* kt (OC, KH, SEGP): taps, then zeros */
			for (int kh = 0; kh < K; kh++)
				for (size_t j = 0; j < segp; j++)
					DT_CHECK(kt[((size_t)o * (size_t)K + (size_t)kh) * segp + j] ==
						 (j < seg ? k[((size_t)kh * seg + j) * (size_t)OC + (size_t)o] : 0.0f));
		float *dx1 = random_floats(xn, 7, 1.0f), *dx2 = random_floats(xn, 8, 1.0f);
		dt_conv_pool_input_grad(&g, OC, kt, dy, a, dx1, B);
		dt_conv_pool_input_grad_naive(&g, OC, kt, dy, a, dx2, B);
		check_close("input gradient", (int)t, dx1, dx2, xn, 1e-5);
		free(z);
		free(y);
		free(a);
		free(dy);
		free(k);
		free(kt);
		free(dx1);
		free(dx2);
	}
}
