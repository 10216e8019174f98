/*
 * Keras's layers and the Keras JSON loader (nn/keras.h): depthwise
 * convolution and batch norm against their naive twins and by finite
 * differences, batch norm's training and inference outputs against a
 * reference written here, zero padding, ReLU6 and swish; the fixtures
 * (tests/fixtures/keras, make_fixtures.py) load with Keras's variable
 * names and counts, train, and keep frozen variables unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "nn/keras.h"
#include "nn/layers.h"
#include "nn/hparams.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "tensor/kernels.h"

#define RTOL 5e-3
#define ATOL 2e-3
#define FIXTURES "tests/fixtures/keras/"

static void check_close(const char *what, const float *a, const float *b, size_t n, double tol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs((double)a[i] - (double)b[i]) <= tol * (1.0 + fabs((double)b[i])))) {
			dt_test_fail(__FILE__, __LINE__, "%s[%zu]: %.7g vs naive %.7g", what, i, (double)a[i], (double)b[i]);
			return;
		}
}

static void depthwise_vs_naive(struct dt_dw_geom g, int B, int bias, uint64_t seed)
{
	const size_t nx = (size_t)B * g.H * g.W * g.C, ny = (size_t)B * g.OH * g.OW * g.C * g.M;
	const size_t nk = (size_t)g.KH * g.KW * g.C * g.M;
	float *x = random_floats(nx, seed, 1.0f), *k = random_floats(nk, seed + 1, 1.0f);
	float *b = random_floats((size_t)g.C * g.M, seed + 2, 1.0f), *dy = random_floats(ny, seed + 3, 1.0f);
	float *y1 = dt_xmalloc(ny * 4), *y2 = dt_xmalloc(ny * 4), *dx1 = dt_xmalloc(nx * 4), *dx2 = dt_xmalloc(nx * 4);
	float *dk1 = dt_xmalloc(nk * 4), *dk2 = dt_xmalloc(nk * 4), *db1 = dt_xmalloc((size_t)g.C * g.M * 4),
	      *db2 = dt_xmalloc((size_t)g.C * g.M * 4);
	dt_depthwise_forward(&g, x, k, bias ? b : NULL, y1, B);
	dt_depthwise_forward_naive(&g, x, k, bias ? b : NULL, y2, B);
	check_close("y", y1, y2, ny, 1e-5);
	dt_depthwise_backward(&g, x, k, dy, dx1, dk1, db1, B);
	dt_depthwise_backward_naive(&g, x, k, dy, dx2, dk2, db2, B);
	check_close("dx", dx1, dx2, nx, 1e-5);
	check_close("dk", dk1, dk2, nk, 1e-4);
	check_close("dbias", db1, db2, (size_t)g.C * g.M, 1e-4);
	free(x), free(k), free(b), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(dk1), free(dk2), free(db1),
		free(db2);
}

DT_TEST(nn_keras, depthwise_matches_its_naive_twin)
{
	struct dt_layer l;
	struct dt_err err = DT_ERR_INIT;
	/* same padding, stride 2, multiplier 1 (MobileNet's), odd sizes */
	DT_CHECK_OK(dt_layer_depthwise(&l, "dw", (struct dt_shape){ 9, 7, 5 }, 3, 3, 1, 2, 2, 1, 1, 1, &err), &err);
	DT_CHECK(l.out.h == 5 && l.out.w == 4 && l.out.c == 5);
	depthwise_vs_naive(l.dw, 3, 1, 10);
	/* valid, multiplier 3, dilation 2, unequal window */
	DT_CHECK_OK(dt_layer_depthwise(&l, "dw", (struct dt_shape){ 8, 9, 4 }, 3, 2, 3, 1, 1, 2, 2, 0, &err), &err);
	DT_CHECK(l.out.h == 4 && l.out.w == 7 && l.out.c == 12);
	depthwise_vs_naive(l.dw, 2, 0, 20);
	/* same padding with dilation: the padding covers the dilated window */
	DT_CHECK_OK(dt_layer_depthwise(&l, "dw", (struct dt_shape){ 6, 6, 3 }, 3, 3, 2, 1, 1, 2, 2, 1, &err), &err);
	DT_CHECK(l.out.h == 6 && l.dw.PT == 2);
	depthwise_vs_naive(l.dw, 2, 1, 30);
	DT_CHECK(dt_layer_depthwise(&l, "dw", (struct dt_shape){ 6, 6, 3 }, 3, 3, 1, 2, 2, 2, 2, 1, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "strides above 1 with dilation above 1");
}

static void check_layer(struct dt_layer *l, int B, uint64_t seed, float x_scale)
{
	struct rig g = { 0 };
	g.layer = *l;
	rig_init(&g, B, seed);
	for (size_t i = 0; i < g.in_n; i++)
		g.x[i] *= x_scale;
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
}

DT_TEST(nn_keras, gradient_checks_depthwise_zero_pad_relu6_swish)
{
	struct dt_layer l;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_layer_depthwise(&l, "dw", (struct dt_shape){ 7, 6, 3 }, 3, 3, 2, 2, 2, 1, 1, 1, &err), &err);
	check_layer(&l, 2, 40, 1.0f);
	DT_CHECK_OK(dt_layer_depthwise(&l, "dw", (struct dt_shape){ 7, 7, 2 }, 2, 3, 1, 1, 1, 2, 1, 0, &err), &err);
	dt_layer_drop_bias(&l);
	DT_CHECK_INT_EQ(dt_layer_num_params(&l), 12);
	check_layer(&l, 2, 50, 1.0f);
	DT_CHECK_OK(dt_layer_zeropad(&l, "pad", (struct dt_shape){ 3, 4, 2 }, 0, 1, 2, 1, &err), &err);
	DT_CHECK(l.out.h == 4 && l.out.w == 7);
	check_layer(&l, 2, 60, 1.0f);
	DT_CHECK_OK(dt_layer_activation(&l, "relu6", (struct dt_shape){ 2, 3, 5 }, DT_ACT_RELU6, &err), &err);
	struct rig g = { 0 };
	g.layer = l;
	rig_init(&g, 2, 70);
	for (size_t i = 0; i < g.in_n; i++) /* away from the kinks at 0 and 6 */
		g.x[i] = (float)(i % 9) - 1.5f + 0.1f * (float)(i % 3);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
	DT_CHECK_OK(dt_layer_activation(&l, "swish", (struct dt_shape){ 2, 3, 5 }, DT_ACT_SWISH, &err), &err);
	check_layer(&l, 2, 80, 3.0f);
	float x[3] = { -1.0f, 0.0f, 7.0f }, y[3];
	dt_act_forward(DT_ACT_RELU6, x, y, 1, 3);
	DT_CHECK(y[0] == 0.0f && y[1] == 0.0f && y[2] == 6.0f);
	dt_act_forward(DT_ACT_SWISH, x, y, 1, 3);
	DT_CHECK_NEAR(y[0], -0.268941, 1e-5); /* -1 * sigmoid(-1) */
}

/* Batch norm by the book, in double: (R, C) rows. */
static void bn_reference(const float *x, const float *gamma, const float *beta, const float *mean, const float *var,
			 double eps, float *y, int R, int C)
{
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++)
			y[r * C + c] = (float)(((double)x[r * C + c] - (double)mean[c]) / sqrt((double)var[c] + eps) * (double)gamma[c] +
					       (double)beta[c]);
}

DT_TEST(nn_keras, batch_norm_training_and_inference_against_a_reference)
{
	const int B = 3, H = 2, W = 3, C = 4, R = B * H * W;
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_batchnorm(&g.layer, "bn", (struct dt_shape){ H, W, C }, 0.9f, 1e-3f, &err), &err);
	DT_CHECK_INT_EQ(dt_layer_num_params(&g.layer), 4 * C);
	rig_init(&g, B, 90);
	for (size_t i = 0; i < g.in_n; i++)
		g.x[i] = 2.0f * g.x[i] + 0.5f * (float)(i % C); /* a mean and a spread per channel */
	float *mm = g.params + 2 * C, *mv = g.params + 3 * C;
	for (int c = 0; c < C; c++) {
		mm[c] = 0.1f * (float)c;
		mv[c] = 1.0f + 0.5f * (float)c;
	}
	float old_mm[4], old_mv[4], bm[4], bv[4], *ref = dt_xmalloc(g.out_n * 4);
	memcpy(old_mm, mm, sizeof(old_mm));
	memcpy(old_mv, mv, sizeof(old_mv));
	/* training: the batch's statistics normalize; the moving ones move */
	dt_layer_forward(&g.layer, g.x, g.y, B, 1, NULL, g.scratch);
	dt_batchnorm_moments_naive(g.x, bm, bv, R, C);
	bn_reference(g.x, g.params, g.params + C, bm, bv, 1e-3, ref, R, C);
	check_close("training y", g.y, ref, g.out_n, 1e-5);
	for (int c = 0; c < C; c++) {
		DT_CHECK_NEAR(mm[c], 0.9 * (double)old_mm[c] + 0.1 * (double)bm[c], 1e-5);
		DT_CHECK_NEAR(mv[c], 0.9 * (double)old_mv[c] + 0.1 * (double)bv[c], 1e-5);
	}
	/* inference: the moving statistics normalize and stay */
	memcpy(old_mm, mm, sizeof(old_mm));
	dt_layer_forward(&g.layer, g.x, g.y, B, 0, NULL, g.scratch);
	bn_reference(g.x, g.params, g.params + C, mm, mv, 1e-3, ref, R, C);
	check_close("inference y", g.y, ref, g.out_n, 1e-5);
	DT_CHECK(memcmp(old_mm, mm, sizeof(old_mm)) == 0);
	/* the fast moments and backward against the naive twins */
	float m1[4], v1[4];
	dt_batchnorm_moments(g.x, m1, v1, R, C);
	check_close("mean", m1, bm, C, 1e-5);
	check_close("var", v1, bv, C, 1e-5);
	for (int mode = 0; mode < 2; mode++) {
		float dx1[72], dx2[72], dg1[4], dg2[4], db1[4], db2[4], rstd[4];
		for (int c = 0; c < C; c++)
			rstd[c] = 1.0f / sqrtf(v1[c] + 1e-3f);
		dt_batchnorm_backward(g.r, g.x, m1, rstd, g.params, g.params + C, dx1, dg1, db1, R, C, mode, DT_ACT_LINEAR);
		dt_batchnorm_backward_naive(g.r, g.x, m1, rstd, g.params, g.params + C, dx2, dg2, db2, R, C, mode,
					    DT_ACT_LINEAR);
		check_close("bn dx", dx1, dx2, (size_t)R * C, 1e-4);
		check_close("bn dgamma", dg1, dg2, C, 1e-4);
		check_close("bn dbeta", db1, db2, C, 1e-4);
	}
	/* finite differences in training mode: every parameter (the moving
	 * statistics do not change the output: their gradient is zero) */
	check_rig(&g, 1e-2, ATOL);
	/* frozen: inference behaviour while training; dx by finite differences */
	g.layer.frozen = 1;
	rig_backward(&g);
	float *dx = dt_xmalloc(g.in_n * 4);
	memcpy(dx, g.dx, g.in_n * 4);
	check_array("frozen bn dx", g.x, g.in_n, dx, rig_loss_cb, &g, 1e-2, ATOL, 0);
	free(dx);
	free(ref);
	rig_release(&g);
}

static int var_index(const struct dt_model *m, const char *name)
{
	for (int i = 0; i < dt_model_num_variables(m); i++)
		if (strcmp(dt_model_variable(m, i)->name, name) == 0)
			return i;
	return -1;
}

static void check_var(const struct dt_model *m, const char *name, int ndim, const int64_t *shape, int trainable)
{
	const int i = var_index(m, name);
	if (i < 0) {
		dt_test_fail(__FILE__, __LINE__, "no variable '%s'", name);
		return;
	}
	const struct dt_variable *v = dt_model_variable(m, i);
	DT_CHECK_INT_EQ(v->ndim, ndim);
	for (int d = 0; d < ndim; d++)
		DT_CHECK_INT_EQ((int)v->shape[d], (int)shape[d]);
	DT_CHECK_INT_EQ(dt_model_variable_trainable(m, i), trainable);
}

/* Trains `steps` steps of Adam at learning rate lr on random data; returns
 * the first and last loss. */
static void train_random(struct dt_model *m, int steps, int B, float lr, float *first, float *last)
{
	struct dt_err err = DT_ERR_INIT;
	const struct dt_io_info *in = dt_model_input(m, 0);
	float *x = random_floats((size_t)B * in->count, 7, 1.0f);
	int32_t *y = dt_xmalloc((size_t)B * sizeof(int32_t));
	for (int i = 0; i < B; i++)
		y[i] = i % 5;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("cnn_base", &hp, &err), &err);
	struct dt_optimizer opt;
	DT_CHECK_OK(dt_optimizer_init(&opt, &hp, dt_model_num_params(m), &err), &err);
	struct dt_model_batch b = { .size = B, .num_inputs = 1, .inputs = { { DT_FLOAT32, x } },
				    .targets = { DT_INT32, y } };
	struct dt_rng rng;
	dt_rng_seed(&rng, 3);
	for (int s = 0; s < steps; s++) {
		struct dt_step_result res;
		DT_CHECK_OK(dt_model_step(m, &b, &rng, NULL, NULL, &res, &err), &err);
		if (s == 0)
			*first = res.loss;
		*last = res.loss;
		dt_optimizer_apply(&opt, dt_model_params(m), dt_model_grads(m), 0, dt_model_num_params(m), lr, s + 1);
	}
	dt_optimizer_release(&opt);
	free(x);
	free(y);
}

DT_TEST(nn_keras, mobilenet_v2_loads_with_keras_names_and_counts_and_trains)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_model *m = NULL;
	struct dt_keras_info info;
	DT_CHECK_OK(dt_keras_load(FIXTURES "mobilenet_v2_k3.json", 4, &m, &info, &err), &err);
	if (!m)
		return;
	DT_CHECK_INT_EQ(info.keras_version, 3);
	DT_CHECK(info.input_rank == 3 && info.input_shape[0] == 32 && info.input_shape[2] == 3 && info.classes == 5);
	/* keras.applications.MobileNetV2(include_top=False) has 2,257,984
	 * weights; the top adds 1280*5 + 5; model.weights has 262 tensors */
	DT_CHECK_INT_EQ((long long)dt_model_num_params(m), 2257984 + 1280 * 5 + 5);
	DT_CHECK_INT_EQ(dt_model_num_variables(m), 262);
	check_var(m, "Conv1/kernel", 4, (int64_t[]){ 3, 3, 3, 32 }, 1);
	check_var(m, "bn_Conv1/gamma", 1, (int64_t[]){ 32 }, 1);
	check_var(m, "bn_Conv1/moving_mean", 1, (int64_t[]){ 32 }, 0);
	check_var(m, "bn_Conv1/moving_variance", 1, (int64_t[]){ 32 }, 0);
	check_var(m, "expanded_conv_depthwise/depthwise_kernel", 4, (int64_t[]){ 3, 3, 32, 1 }, 1);
	check_var(m, "block_1_expand/kernel", 4, (int64_t[]){ 1, 1, 16, 96 }, 1);
	check_var(m, "block_16_project/kernel", 4, (int64_t[]){ 1, 1, 960, 320 }, 1);
	check_var(m, "predictions/kernel", 2, (int64_t[]){ 1280, 5 }, 1);
	DT_CHECK_INT_EQ(var_index(m, "Conv1/bias"), -1); /* use_bias False */
	dt_model_init_params(m, 1);
	float first = 0, last = 0;
	/* at Adam's 0.01 four examples' losses jump about (6.7, then 3e-4, then
	 * 1.5) and the last-below-first check holds or not by the rounding of
	 * any kernel; 1e-3 descends steadily */
	train_random(m, 6, 4, 1e-3f, &first, &last);
	DT_CHECK(isfinite(first) && isfinite(last));
	DT_CHECK(last < first);
	dt_model_free(m);
}

DT_TEST(nn_keras, frozen_layers_are_unchanged_by_training_and_batch_norm_statistics_move)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_model *m = NULL;
	struct dt_keras_info info;
	DT_CHECK_OK(dt_keras_load(FIXTURES "small_residual_k2.json", 8, &m, &info, &err), &err);
	if (!m)
		return;
	DT_CHECK_INT_EQ(info.keras_version, 2);
	check_var(m, "frozen/kernel", 4, (int64_t[]){ 1, 1, 8, 4 }, 0);
	check_var(m, "dw/depthwise_kernel", 4, (int64_t[]){ 3, 3, 8, 2 }, 1);
	check_var(m, "sep/depthwise_kernel", 4, (int64_t[]){ 3, 3, 20, 1 }, 1);
	check_var(m, "sep/pointwise_kernel", 4, (int64_t[]){ 1, 1, 20, 8 }, 1);
	check_var(m, "sep/bias", 1, (int64_t[]){ 8 }, 1);
	check_var(m, "bn/moving_variance", 1, (int64_t[]){ 8 }, 0);
	dt_model_init_params(m, 2);
	const struct dt_variable *fk = dt_model_variable(m, var_index(m, "frozen/kernel"));
	const struct dt_variable *fb = dt_model_variable(m, var_index(m, "frozen/bias"));
	const struct dt_variable *c1 = dt_model_variable(m, var_index(m, "c1/kernel"));
	const struct dt_variable *mm = dt_model_variable(m, var_index(m, "bn/moving_mean"));
	const size_t nk = fk->count + fb->count;
	float *before = dt_xmalloc((nk + c1->count + mm->count) * 4);
	memcpy(before, dt_model_params(m) + fk->offset, fk->count * 4);
	memcpy(before + fk->count, dt_model_params(m) + fb->offset, fb->count * 4);
	memcpy(before + nk, dt_model_params(m) + c1->offset, c1->count * 4);
	memcpy(before + nk + c1->count, dt_model_params(m) + mm->offset, mm->count * 4);
	float first = 0, last = 0;
	train_random(m, 5, 8, 0.01f, &first, &last);
	DT_CHECK(memcmp(before, dt_model_params(m) + fk->offset, fk->count * 4) == 0);
	DT_CHECK(memcmp(before + fk->count, dt_model_params(m) + fb->offset, fb->count * 4) == 0);
	DT_CHECK(memcmp(before + nk, dt_model_params(m) + c1->offset, c1->count * 4) != 0);
	DT_CHECK(memcmp(before + nk + c1->count, dt_model_params(m) + mm->offset, mm->count * 4) != 0);
	free(before);
	dt_model_free(m);
}

DT_TEST(nn_keras, sequential_and_tfjs_load_alike)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_model *a = NULL, *b = NULL;
	DT_CHECK_OK(dt_keras_load(FIXTURES "sequential_k2.json", 2, &a, NULL, &err), &err);
	DT_CHECK_OK(dt_keras_load(FIXTURES "tfjs_model.json", 2, &b, NULL, &err), &err);
	if (a && b) {
		DT_CHECK_INT_EQ(dt_model_num_variables(a), 6);
		DT_CHECK_INT_EQ(dt_model_num_variables(b), 6);
		DT_CHECK_STR_EQ(dt_model_variable(a, 2)->name, "dense/kernel");
		DT_CHECK_INT_EQ((int)dt_model_num_params(a), (int)dt_model_num_params(b));
	}
	dt_model_free(a);
	dt_model_free(b);
	struct dt_graph *g = NULL;
	const char bad[] = "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": \"InputLayer\", "
			   "\"config\": {\"name\": \"in\", \"batch_input_shape\": [null, 4]}}, {\"class_name\": \"LSTM\", "
			   "\"config\": {\"name\": \"lstm\", \"units\": 3}}]}}";
	DT_CHECK(dt_keras_parse(bad, sizeof(bad) - 1, "bad.json", &g, NULL, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "layer 'lstm' (LSTM): layer class 'LSTM' is not supported (supported: InputLayer");
	DT_CHECK(dt_keras_parse("{", 1, "x.json", &g, NULL, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "not JSON");
	DT_CHECK(g == NULL);
}
