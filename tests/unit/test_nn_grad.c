/*
 * Finite-difference gradient checks for every layer, the loss and whole
 * models.
 *
 * Layers: the scalar L = sum_i y_i * r_i for a fixed random r, so dL/dy = r;
 * backward's dx, dkernel and dbias are compared with central differences of
 * L, computed in double from the layer's float outputs. Outputs that a
 * perturbation does not touch are recomputed bit for bit (the kernels are
 * deterministic), so they cancel exactly and the difference carries only
 * the rounding of the outputs that changed.
 *
 * Piecewise-linear layers (ReLU, max pooling) have kinks where a
 * perturbation of eps could change which branch is taken; their inputs are
 * built to stay clear of them (|x| >= 0.05 for ReLU, window values at least
 * 0.01 apart for pooling, and a margin on pre-activations for fused ReLU).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/hparams.h"
#include "nn/layers.h"
#include "models/builtin.h"
#include "nn/model.h"
#include "tensor/kernels.h"
#include "tensor/kernels_direct.h"

/* For fused ReLU: the smallest |pre-activation| of the rig's layer. */
static double min_preactivation(struct rig *g)
{
	int relu = g->layer.relu;
	g->layer.relu = 0;
	rig_loss(g);
	g->layer.relu = relu;
	double m = HUGE_VAL;
	for (size_t i = 0; i < g->out_n; i++)
		if (fabs((double)g->y[i]) < m)
			m = fabs((double)g->y[i]);
	return m;
}

#define RTOL 5e-3
#define ATOL 2e-3

DT_TEST(nn_grad, dense)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_dense(&g.layer, "dense_1", (struct dt_shape){ 2, 3, 2 }, 5, 0, &err), &err);
	rig_init(&g, 3, 100);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
}

DT_TEST(nn_grad, dense_with_fused_relu)
{
	struct dt_err err = DT_ERR_INIT;
	/* Try seeds until no pre-activation is within 0.02 of the kink. */
	for (uint64_t seed = 200; seed < 300; seed++) {
		struct rig g = { 0 };
		DT_CHECK_OK(dt_layer_dense(&g.layer, "dense_2", (struct dt_shape){ 1, 1, 7 }, 6, 1, &err), &err);
		rig_init(&g, 3, seed);
		if (min_preactivation(&g) < 0.02) {
			rig_release(&g);
			continue;
		}
		check_rig(&g, RTOL, ATOL);
		rig_release(&g);
		return;
	}
	DT_CHECK(!"no seed gave pre-activations clear of the ReLU kink");
}

DT_TEST(nn_grad, conv2d_stride_2_padding_1_odd_input)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_conv2d(&g.layer, "conv_1", (struct dt_shape){ 9, 7, 3 }, 3, 3, 4, 2, 1, 0, &err), &err);
	rig_init(&g, 2, 300);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
}

DT_TEST(nn_grad, conv2d_one_channel_transposed_path_in_chunks)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_conv2d(&g.layer, "conv_1", (struct dt_shape){ 8, 6, 1 }, 5, 5, 3, 1, 2, 0, &err), &err);
	g.layer.chunk = 2; /* three chunks for B = 5: dkernel accumulates across them */
	rig_init(&g, 5, 400);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
}

DT_TEST(nn_grad, conv2d_valid_with_fused_relu_in_chunks)
{
	struct dt_err err = DT_ERR_INIT;
	for (uint64_t seed = 500; seed < 700; seed++) {
		struct rig g = { 0 };
		DT_CHECK_OK(dt_layer_conv2d(&g.layer, "conv_2", (struct dt_shape){ 5, 4, 2 }, 3, 2, 2, 1, 0, 1, &err), &err);
		g.layer.chunk = 1;
		rig_init(&g, 2, seed);
		if (min_preactivation(&g) < 0.02) {
			rig_release(&g);
			continue;
		}
		check_rig(&g, RTOL, ATOL);
		rig_release(&g);
		return;
	}
	DT_CHECK(!"no seed gave pre-activations clear of the ReLU kink");
}

DT_TEST(nn_grad, maxpool_odd_input)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_maxpool2(&g.layer, "pool_1", (struct dt_shape){ 5, 7, 3 }, &err), &err);
	rig_init(&g, 2, 700);
	/* Distinct values 0.01 apart in a shuffled order: no ties within eps. */
	uint32_t *perm = dt_xmalloc(g.in_n * sizeof(uint32_t));
	for (uint32_t i = 0; i < g.in_n; i++)
		perm[i] = i;
	struct dt_rng rng;
	dt_rng_seed(&rng, 701);
	dt_rng_shuffle_u32(&rng, perm, g.in_n);
	for (size_t i = 0; i < g.in_n; i++)
		g.x[i] = 0.01f * (float)perm[i] - 1.0f;
	free(perm);
	check_rig(&g, RTOL, ATOL);
	/* The dropped last row and column get no gradient. */
	for (int b = 0; b < 2; b++)
		for (int w = 0; w < 7; w++)
			for (int c = 0; c < 3; c++)
				DT_CHECK(g.dx[(((size_t)b * 5 + 4) * 7 + (size_t)w) * 3 + (size_t)c] == 0.0f);
	rig_release(&g);
}

/* conv (+ ReLU) with fused pooling must equal conv then a pool layer: bit
 * for bit on the im2col path; within rounding where the fused layer takes
 * the direct one-channel kernels (tensor/kernels_direct.h), which sum in
 * another order. */
static void check_same(const float *a, const float *b, size_t n, int exact)
{
	if (exact) {
		DT_CHECK(memcmp(a, b, n * sizeof(float)) == 0);
		return;
	}
	for (size_t i = 0; i < n; i++)
		DT_CHECK_NEAR(a[i], b[i], 1e-4 * (1.0 + fabs((double)b[i])));
}

static void check_fused_pool(struct dt_shape in, int k, int filters, int stride, int pad, int relu, int chunk, int B)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig a = { 0 }, f = { 0 };
	DT_CHECK_OK(dt_layer_conv2d(&a.layer, "conv_1", in, k, k, filters, stride, pad, relu, &err), &err);
	DT_CHECK_OK(dt_layer_conv2d(&f.layer, "conv_1", in, k, k, filters, stride, pad, relu, &err), &err);
	DT_CHECK_OK(dt_layer_fuse_pool(&f.layer, &err), &err);
	a.layer.chunk = f.layer.chunk = chunk;
	rig_init(&a, B, 1500);
	rig_init(&f, B, 1500); /* same x, params */
	struct dt_layer pool;
	DT_CHECK_OK(dt_layer_maxpool2(&pool, "pool_1", a.layer.out, &err), &err);
	DT_CHECK(pool.out.h == f.layer.out.h && pool.out.w == f.layer.out.w && pool.out.c == f.layer.out.c);
	dt_layer_alloc_state(&pool, B);
	const size_t pn = f.out_n;
	float *py = dt_xmalloc(pn * sizeof(float)), *pdy = dt_xmalloc(pn * sizeof(float));
	dt_layer_forward(&a.layer, a.x, a.y, B, 1, NULL, a.scratch);
	dt_layer_forward(&pool, a.y, py, B, 1, NULL, NULL);
	dt_layer_forward(&f.layer, f.x, f.y, B, 1, NULL, f.scratch);
	const int exact = !dt_conv1_pool_supported(&f.layer.geom);
	check_same(f.y, py, pn, exact);
	/* Backward with the same upstream gradient. */
	memcpy(pdy, f.r, pn * sizeof(float));
	memcpy(f.dy, f.r, pn * sizeof(float));
	dt_layer_backward(&pool, a.y, py, pdy, a.dy, B, NULL);
	dt_layer_backward(&a.layer, a.x, a.y, a.dy, a.dx, B, a.scratch);
	dt_layer_backward(&f.layer, f.x, f.y, f.dy, f.dx, B, f.scratch);
	check_same(f.dx, a.dx, a.in_n, 0); /* dt_conv_pool_input_grad: another order */
	check_same(f.grads, a.grads, a.layer.kernel_count, exact);
	for (size_t i = 0; i < a.layer.bias_count; i++) /* summed in another order */
		DT_CHECK_NEAR(a.grads[a.layer.kernel_count + i], f.grads[f.layer.kernel_count + i], 1e-5);
	dt_layer_release(&pool);
	free(py);
	free(pdy);
	rig_release(&a);
	rig_release(&f);
}

DT_TEST(nn_grad, conv2d_fused_pool_equals_conv_then_pool)
{
	check_fused_pool((struct dt_shape){ 9, 7, 3 }, 3, 4, 1, 1, 1, 2, 5);  /* odd conv output: 9x7 */
	check_fused_pool((struct dt_shape){ 12, 12, 1 }, 5, 6, 1, 2, 1, 3, 4); /* one channel, LeNet-like */
	check_fused_pool((struct dt_shape){ 8, 9, 2 }, 3, 5, 2, 1, 0, 1, 3);   /* stride 2, no ReLU */
	check_fused_pool((struct dt_shape){ 6, 6, 4 }, 3, 8, 1, 0, 1, 64, 2);  /* one chunk */
}

DT_TEST(nn_grad, relu)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_relu(&g.layer, "relu_1", (struct dt_shape){ 3, 3, 2 }, &err), &err);
	rig_init(&g, 2, 800);
	for (size_t i = 0; i < g.in_n; i++)
		if (fabsf(g.x[i]) < 0.05f)
			g.x[i] = g.x[i] < 0 ? -0.05f : 0.05f;
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
}

DT_TEST(nn_grad, dropout_with_a_fixed_mask)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_dropout(&g.layer, "dropout_1", (struct dt_shape){ 1, 1, 40 }, 0.4f, &err), &err);
	rig_init(&g, 3, 900);
	check_rig(&g, RTOL, ATOL);
	size_t dropped = 0;
	for (size_t i = 0; i < g.in_n; i++)
		dropped += g.dx[i] == 0.0f;
	DT_CHECK(dropped > 10 && dropped < 90); /* the mask really drops some */
	rig_release(&g);
}

DT_TEST(nn_grad, flatten)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_flatten(&g.layer, "flatten_1", (struct dt_shape){ 2, 3, 4 }, &err), &err);
	DT_CHECK_INT_EQ(g.layer.out.c, 24);
	DT_CHECK(dt_layer_is_view(&g.layer));
	rig_init(&g, 2, 1000);
	check_rig(&g, RTOL, ATOL);
	rig_release(&g);
}

/* ---- the loss ---------------------------------------------------------------- */

struct xent_ctx {
	float *logits;
	const uint8_t *labels;
	int B, N;
};

static double xent_loss(void *p)
{
	struct xent_ctx *c = p;
	return (double)dt_softmax_xent(c->logits, c->labels, c->B, c->N, NULL, NULL);
}

DT_TEST(nn_grad, softmax_cross_entropy)
{
	const int B = 4, N = 10;
	float *z = random_floats((size_t)B * N, 1100, 2.0f);
	const uint8_t labels[4] = { 0, 9, 4, 4 };
	float d[40];
	dt_softmax_xent(z, labels, B, N, d, NULL);
	struct xent_ctx c = { z, labels, B, N };
	check_array("dlogits", z, (size_t)B * N, d, xent_loss, &c, 1e-2, 2e-4, 0);
	free(z);
}

/* ---- whole models ------------------------------------------------------------- */

struct model_ctx {
	struct dt_model *m;
	const float *x;
	const uint8_t *labels;
	int B, N;
};

/* Mean cross-entropy in double from the model's float logits. */
static double model_loss(void *p)
{
	struct model_ctx *c = p;
	dt_model_eval_batch(c->m, c->x, c->labels, c->B, NULL);
	const float *z = dt_model_logits(c->m);
	double total = 0;
	for (int b = 0; b < c->B; b++) {
		const float *row = z + (size_t)b * (size_t)c->N;
		double mx = row[0], s = 0;
		for (int n = 1; n < c->N; n++)
			mx = fmax(mx, (double)row[n]);
		for (int n = 0; n < c->N; n++)
			s += exp((double)row[n] - mx);
		total += log(s) + mx - (double)row[c->labels[b]];
	}
	return total / c->B;
}

static void check_model(const char *name, int H, int W, int C, int B, uint64_t seed)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set(dt_hparams_default_set(name), &hp, &err), &err);
	hp.dropout = 0;
	const int N = 4;
	struct dt_model *m;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, H, W, C, N, B, &m, &err), &err);
	dt_model_init_params(m, seed);
	/* Non-zero biases, so ReLUs and pools see varied values. */
	float *p = dt_model_params(m);
	struct dt_rng rng;
	dt_rng_seed(&rng, seed + 1);
	for (int v = 0; v < dt_model_num_variables(m); v++) {
		const struct dt_variable *var = dt_model_variable(m, v);
		if (!dt_model_variable_is_kernel(m, v))
			for (size_t j = 0; j < var->count; j++)
				p[var->offset + j] = 0.1f * dt_rng_normal(&rng);
	}
	float *x = random_floats((size_t)B * (size_t)(H * W * C), seed + 2, 1.0f);
	uint8_t labels[8];
	for (int b = 0; b < B; b++)
		labels[b] = (uint8_t)(b % N);
	float loss = dt_model_train_batch(m, x, labels, B, &rng, NULL);
	const size_t np = dt_model_num_params(m);
	float *g = dt_xmalloc(np * sizeof(float));
	memcpy(g, dt_model_grads(m), np * sizeof(float));
	struct model_ctx c = { m, x, labels, B, N };
	DT_CHECK_NEAR(loss, model_loss(&c), 1e-5);
	for (int v = 0; v < dt_model_num_variables(m); v++) {
		const struct dt_variable *var = dt_model_variable(m, v);
		char what[DT_VAR_NAME_MAX + 64];
		snprintf(what, sizeof(what), "%s %s", name, var->name);
		double agg = check_array(what, p + var->offset, var->count, g + var->offset, model_loss, &c, 0.1, 2e-3, 1);
		if (!(agg <= 1e-2))
			dt_test_fail(__FILE__, __LINE__, "%s: aggregate relative error %.3g > 1e-2", what, agg);
	}
	free(g);
	free(x);
	dt_model_free(m);
}

DT_TEST_TIMEOUT(nn_grad, mlp_parameters_via_train_batch, 120)
{
	check_model("mlp", 4, 4, 1, 3, 1200);
}

DT_TEST_TIMEOUT(nn_grad, lenet_parameters_via_train_batch, 120)
{
	check_model("lenet", 12, 12, 1, 2, 1300);
}

DT_TEST_TIMEOUT(nn_grad, cnn_parameters_via_train_batch, 120)
{
	check_model("cnn", 6, 6, 2, 2, 1400);
}
