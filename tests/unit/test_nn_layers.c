/*
 * The graph builder's layers and losses: finite-difference gradient checks
 * (grad_check.h), and their kernels against naive twins or the tuned
 * kernels they generalize.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/layers.h"
#include "tensor/kernels.h"

#define RTOL 5e-3
#define ATOL 2e-3

/* Distinct input values 0.01 apart in a shuffled order: no max-pool ties
 * within eps. */
static void spread_inputs(struct rig *g, uint64_t seed)
{
	uint32_t *perm = dt_xmalloc(g->in_n * sizeof(uint32_t));
	for (uint32_t i = 0; i < g->in_n; i++)
		perm[i] = i;
	struct dt_rng rng;
	dt_rng_seed(&rng, seed);
	dt_rng_shuffle_u32(&rng, perm, g->in_n);
	for (size_t i = 0; i < g->in_n; i++)
		g->x[i] = 0.01f * (float)perm[i] - 1.0f;
	free(perm);
}

static void check_pool(int is_max, struct dt_shape in, int ph, int pw, int sh, int sw, int same, int oh, int ow,
		       uint64_t seed)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_pool(&g.layer, "pool_1", in, is_max, ph, pw, sh, sw, same, &err), &err);
	DT_CHECK_INT_EQ(g.layer.out.h, oh);
	DT_CHECK_INT_EQ(g.layer.out.w, ow);
	rig_init(&g, 2, seed);
	spread_inputs(&g, seed);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
}

DT_TEST(nn_layers, pooling_max_and_average_valid_and_same)
{
	check_pool(1, (struct dt_shape){ 7, 5, 3 }, 3, 3, 2, 2, 1, 4, 3, 10);  /* same: ceil(7/2), ceil(5/2) */
	check_pool(1, (struct dt_shape){ 6, 7, 2 }, 3, 2, 1, 2, 0, 4, 3, 20);  /* valid, unequal strides */
	check_pool(0, (struct dt_shape){ 5, 6, 3 }, 2, 3, 2, 2, 1, 3, 3, 30);  /* average, same: padding not counted */
	check_pool(0, (struct dt_shape){ 4, 4, 1 }, 3, 3, 1, 1, 0, 2, 2, 40);  /* average, valid */
}

DT_TEST(nn_layers, average_pool_same_divides_by_the_valid_count)
{
	struct dt_pool_geom g;
	DT_CHECK_INT_EQ(dt_pool_geom_init(&g, 3, 3, 1, 2, 2, 2, 2, 1), 0);
	DT_CHECK(g.OH == 2 && g.OW == 2 && g.top == 0 && g.left == 0);
	const float x[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
	float y[4];
	dt_pool_forward(&g, 0, x, y, NULL, 1);
	DT_CHECK_NEAR(y[0], 3.0, 1e-6); /* (1 + 2 + 4 + 5) / 4 */
	DT_CHECK_NEAR(y[1], 4.5, 1e-6); /* (3 + 6) / 2: the padded column does not count */
	DT_CHECK_NEAR(y[3], 9.0, 1e-6);
	DT_CHECK_INT_EQ(dt_pool_geom_init(&g, 3, 3, 1, 4, 4, 1, 1, 0), -1); /* window larger than the input */
}

DT_TEST(nn_layers, general_max_pool_matches_the_tuned_2x2_kernel)
{
	const int B = 3, H = 7, W = 9, C = 5;
	float *x = random_floats((size_t)B * H * W * C, 50, 1.0f);
	struct dt_pool_geom g;
	DT_CHECK_INT_EQ(dt_pool_geom_init(&g, H, W, C, 2, 2, 2, 2, 0), 0);
	const size_t n = (size_t)B * 3 * 4 * C;
	float *y1 = dt_xmalloc(n * sizeof(float)), *y2 = dt_xmalloc(n * sizeof(float));
	int32_t *a1 = dt_xmalloc(n * sizeof(int32_t)), *a2 = dt_xmalloc(n * sizeof(int32_t));
	dt_pool_forward(&g, 1, x, y1, a1, B);
	dt_maxpool2_forward(x, y2, a2, B, H, W, C);
	DT_CHECK(memcmp(y1, y2, n * sizeof(float)) == 0);
	float *d = random_floats(n, 51, 1.0f), *dx1 = dt_xmalloc((size_t)B * H * W * C * sizeof(float));
	float *dx2 = dt_xmalloc((size_t)B * H * W * C * sizeof(float));
	dt_pool_backward(&g, 1, d, a1, dx1, B);
	dt_maxpool2_backward(d, a2, dx2, B, H, W, C);
	for (size_t i = 0; i < (size_t)B * H * W * C; i++) /* by value: the tuned one writes -0.0 for some zeros */
		if (dx1[i] != dx2[i])
			dt_test_fail(__FILE__, __LINE__, "dx[%zu]: %g vs %g", i, (double)dx1[i], (double)dx2[i]);
	free(x);
	free(y1);
	free(y2);
	free(a1);
	free(a2);
	free(d);
	free(dx1);
	free(dx2);
}

DT_TEST(nn_layers, activations)
{
	static const enum dt_act acts[] = { DT_ACT_LINEAR, DT_ACT_SIGMOID, DT_ACT_TANH, DT_ACT_SOFTMAX, DT_ACT_GELU };
	for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++) {
		struct dt_err err = DT_ERR_INIT;
		struct rig g = { 0 };
		DT_CHECK_OK(dt_layer_activation(&g.layer, "activation_1", (struct dt_shape){ 2, 3, 4 }, acts[i], &err), &err);
		rig_init(&g, 2, 60 + i);
		check_rig(&g, RTOL, ATOL);
		rig_release(&g);
	}
}

DT_TEST(nn_layers, activation_values_are_keras)
{
	float x[3] = { -1.0f, 0.0f, 2.0f }, y[3];
	dt_act_forward(DT_ACT_GELU, x, y, 1, 3);
	DT_CHECK_NEAR(y[0], -0.158808, 1e-5); /* tf.keras.activations.gelu(x, approximate=True) */
	DT_CHECK_NEAR(y[1], 0.0, 1e-7);
	DT_CHECK_NEAR(y[2], 1.954598, 1e-5);
	dt_act_forward(DT_ACT_SOFTMAX, x, y, 1, 3);
	DT_CHECK_NEAR(y[0] + y[1] + y[2], 1.0, 1e-6);
	DT_CHECK_NEAR(y[2], 0.843795, 1e-5);
	dt_act_forward(DT_ACT_SIGMOID, x, y, 1, 3);
	DT_CHECK_NEAR(y[0], 0.268941, 1e-5);
}

DT_TEST(nn_layers, layer_norm)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_layernorm(&g.layer, "layer_norm_1", (struct dt_shape){ 1, 3, 6 }, 1e-3f, &err), &err);
	DT_CHECK_INT_EQ(dt_layer_num_params(&g.layer), 12);
	rig_init(&g, 2, 70);
	check_rig(&g, 1e-2, ATOL);
	rig_release(&g);
	DT_CHECK(dt_layer_layernorm(&g.layer, "ln", (struct dt_shape){ 1, 1, 4 }, 0.0f, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "epsilon must be positive");
}

DT_TEST(nn_layers, layer_norm_matches_its_naive_twin)
{
	const int R = 5, D = 37;
	float *x = random_floats((size_t)R * D, 80, 3.0f), *gm = random_floats(D, 81, 1.0f), *bt = random_floats(D, 82, 1.0f);
	float *dy = random_floats((size_t)R * D, 83, 1.0f);
	float y1[185], y2[185], m1[5], m2[5], s1[5], s2[5], dx1[185], dx2[185];
	float dg1[37] = { 0 }, dg2[37] = { 0 }, db1[37] = { 0 }, db2[37] = { 0 };
	dt_layernorm_forward(x, gm, bt, y1, m1, s1, R, D, 1e-3f);
	dt_layernorm_forward_naive(x, gm, bt, y2, m2, s2, R, D, 1e-3f);
	for (int i = 0; i < R * D; i++)
		DT_CHECK_NEAR(y1[i], y2[i], 1e-4);
	dt_layernorm_backward(dy, x, m1, s1, gm, dx1, dg1, db1, R, D);
	dt_layernorm_backward_naive(dy, x, m2, s2, gm, dx2, dg2, db2, R, D);
	for (int i = 0; i < R * D; i++)
		DT_CHECK_NEAR(dx1[i], dx2[i], 1e-4);
	for (int j = 0; j < D; j++) {
		DT_CHECK_NEAR(dg1[j], dg2[j], 1e-4);
		DT_CHECK_NEAR(db1[j], db2[j], 1e-5);
	}
	free(x);
	free(gm);
	free(bt);
	free(dy);
}

DT_TEST(nn_layers, dense_with_each_fused_activation_and_over_the_last_axis)
{
	static const enum dt_act acts[] = { DT_ACT_SIGMOID, DT_ACT_TANH, DT_ACT_SOFTMAX, DT_ACT_GELU };
	for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++) {
		struct dt_err err = DT_ERR_INIT;
		struct rig g = { 0 };
		DT_CHECK_OK(dt_layer_dense_act(&g.layer, "dense_1", (struct dt_shape){ 1, 1, 7 }, 5, acts[i], 1, &err), &err);
		rig_init(&g, 3, 90 + i);
		check_rig(&g, RTOL, ATOL);
		rig_release(&g);
	}
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_dense_act(&g.layer, "dense_2", (struct dt_shape){ 2, 3, 4 }, 5, DT_ACT_GELU, 1, &err), &err);
	DT_CHECK(g.layer.out.h == 2 && g.layer.out.w == 3 && g.layer.out.c == 5 && g.layer.dense_rows == 6);
	DT_CHECK_INT_EQ(g.layer.kernel_count, 20);
	rig_init(&g, 2, 99);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
}

DT_TEST(nn_layers, conv2d_same_padding_with_strides)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	/* 7x7, 3x3 stride 2: out 4x4, padding 1 before and 1 after */
	DT_CHECK_OK(dt_layer_conv2d_same(&g.layer, "conv_1", (struct dt_shape){ 7, 7, 2 }, 3, 3, 3, 2, 0, &err), &err);
	DT_CHECK(g.layer.out.h == 4 && g.layer.out.w == 4 && g.layer.geom.pad == 1);
	rig_init(&g, 2, 110);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
	/* 8x8, 4x4 stride 2: out 4x4, padding 1 before and 2 after (TensorFlow's split) */
	DT_CHECK_OK(dt_layer_conv2d_same(&g.layer, "conv_2", (struct dt_shape){ 8, 8, 3 }, 4, 4, 2, 2, 0, &err), &err);
	DT_CHECK(g.layer.out.h == 4 && g.layer.out.w == 4 && g.layer.geom.pad == 1);
	rig_init(&g, 2, 120);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
	/* rows and columns needing different padding: refused, saying so */
	DT_CHECK(dt_layer_conv2d_same(&g.layer, "conv_3", (struct dt_shape){ 8, 7, 1 }, 5, 3, 2, 1, 0, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "layer 'conv_3': padding 'same'");
	DT_CHECK_CONTAINS(err.msg, "(8, 7, 1)");
}

DT_TEST(nn_layers, reshape_is_a_view)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_reshape(&g.layer, "reshape_1", (struct dt_shape){ 2, 3, 4 }, (struct dt_shape){ 1, 6, 4 }, &err),
		    &err);
	DT_CHECK(dt_layer_is_view(&g.layer));
	rig_init(&g, 2, 130);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
	DT_CHECK(dt_layer_reshape(&g.layer, "r", (struct dt_shape){ 2, 3, 4 }, (struct dt_shape){ 1, 5, 5 }, &err) ==
		 DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "cannot reshape (2, 3, 4) to (1, 5, 5)");
}

/* ---- losses ------------------------------------------------------------------ */

struct float_loss_ctx {
	float *z;
	const float *t;
	size_t n;
	int mse;
};

static double float_loss(void *p)
{
	struct float_loss_ctx *c = p;
	return c->mse ? (double)dt_mse(c->z, c->t, c->n, NULL) : (double)dt_sigmoid_xent(c->z, c->t, c->n, NULL, NULL);
}

DT_TEST(nn_layers, sigmoid_cross_entropy_and_mean_squared_error)
{
	const size_t n = 24;
	float *z = random_floats(n, 140, 2.0f), *t = random_floats(n, 141, 1.0f), d[24];
	for (size_t i = 0; i < n; i++)
		t[i] = t[i] > 0 ? 1.0f : (i % 3 ? 0.0f : 0.25f); /* hard and soft targets */
	for (int mse = 0; mse <= 1; mse++) {
		struct float_loss_ctx c = { z, t, n, mse };
		int correct = -1;
		if (mse)
			dt_mse(z, t, n, d);
		else
			dt_sigmoid_xent(z, t, n, d, &correct);
		check_array(mse ? "mse dpred" : "sigmoid dlogits", z, n, d, float_loss, &c, 1e-2, 2e-4, 0);
		if (!mse) {
			int want = 0;
			for (size_t i = 0; i < n; i++)
				want += (z[i] > 0) == (t[i] > 0.5f);
			DT_CHECK_INT_EQ(correct, want);
		}
	}
	/* large logits stay finite */
	const float big[2] = { 100.0f, -100.0f }, tt[2] = { 0.0f, 1.0f };
	DT_CHECK_NEAR(dt_sigmoid_xent(big, tt, 2, NULL, NULL), 100.0, 1e-3);
	free(z);
	free(t);
}

DT_TEST(nn_layers, softmax_cross_entropy_int32_gives_the_uint8_bits)
{
	const int B = 6, N = 11;
	float *z = random_floats((size_t)B * N, 150, 3.0f);
	const uint8_t l8[6] = { 0, 10, 3, 3, 7, 1 };
	const int32_t l32[6] = { 0, 10, 3, 3, 7, 1 };
	float d8[66], d32[66], dn[66];
	int c8, c32, cn;
	float a = dt_softmax_xent(z, l8, B, N, d8, &c8), b = dt_softmax_xent_i32(z, l32, B, N, d32, &c32);
	float c = dt_softmax_xent_naive(z, l8, B, N, dn, &cn);
	DT_CHECK(memcmp(&a, &b, sizeof(a)) == 0 && memcmp(d8, d32, sizeof(d8)) == 0);
	DT_CHECK_INT_EQ(c8, c32);
	DT_CHECK_INT_EQ(c32, cn);
	DT_CHECK_NEAR(b, c, 1e-5);
	for (int i = 0; i < B * N; i++)
		DT_CHECK_NEAR(d32[i], dn[i], 1e-6);
	free(z);
}

DT_TEST(nn_layers, embedding_forward_and_sparse_backward)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_layer l;
	DT_CHECK_OK(dt_layer_embedding(&l, "embedding_1", (struct dt_shape){ 1, 1, 3 }, 5, 2, &err), &err);
	DT_CHECK(l.out.h == 1 && l.out.w == 3 && l.out.c == 2 && l.kernel_count == 10);
	float table[10] = { 0, 1, 10, 11, 20, 21, 30, 31, 40, 41 }, dtable[10];
	for (int i = 0; i < 10; i++)
		dtable[i] = 99.0f; /* stale values from an earlier step */
	dt_layer_bind(&l, table, dtable);
	const int32_t ids[6] = { 4, 1, 1, 0, 4, 4 };
	float y[12], dy[12];
	dt_layer_embedding_forward(&l, ids, y, 2);
	DT_CHECK(y[0] == 40 && y[1] == 41 && y[2] == 10 && y[6] == 0 && y[11] == 41);
	for (int i = 0; i < 12; i++)
		dy[i] = (float)(i + 1);
	dt_layer_embedding_backward(&l, ids, dy, 2);
	/* row 4: positions 0, 4, 5 -> (1 + 9 + 11, 2 + 10 + 12); row 1: 1, 2; row 0: 3; rows 2, 3: zero */
	DT_CHECK(dtable[8] == 21 && dtable[9] == 24 && dtable[2] == 3 + 5 && dtable[3] == 4 + 6);
	DT_CHECK(dtable[0] == 7 && dtable[1] == 8 && dtable[4] == 0 && dtable[7] == 0);
}
