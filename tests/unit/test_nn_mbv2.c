/*
 * MobileNetV2's fast paths: batch norm with its ReLU or ReLU6 fused (one
 * pass forward, the mask taken inside both backward passes) against its
 * naive twin and by finite differences; pointwise (1x1) convolutions run
 * as one matrix multiply against the im2col path's arithmetic and by
 * finite differences; the graph folds each BN -> ReLU6 pair; and a small
 * inverted-residual block (pointwise, BN+ReLU6, depthwise, Add) whose
 * whole-model gradient is checked by finite differences of the training
 * loss.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/graph.h"
#include "nn/keras.h"
#include "nn/layers.h"
#include "nn/layers_more.h"
#include "nn/model.h"
#include "nn/model_impl.h"
#include "tensor/kernels.h"

static void check_close(const char *what, const float *a, const float *b, size_t n, double tol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs((double)a[i] - (double)b[i]) <= tol * (1.0 + fabs((double)b[i])))) {
			dt_test_fail(__FILE__, __LINE__, "%s[%zu]: %.7g vs naive %.7g", what, i, (double)a[i], (double)b[i]);
			return;
		}
}

DT_TEST(nn_mbv2, batch_norm_with_fused_activation_matches_its_naive_twin)
{
	/* odd sizes (no multiple of a vector width), values across both clamps */
	const int R = 37, C = 19;
	const size_t n = (size_t)R * C;
	float *x = random_floats(n, 1, 4.0f), *dy = random_floats(n, 2, 1.0f), *p = random_floats(4 * (size_t)C, 3, 1.0f);
	float *gamma = p, *beta = p + C, *mean = p + 2 * C, *rstd = p + 3 * C;
	for (int c = 0; c < C; c++) {
		gamma[c] = 1.0f + 0.5f * gamma[c];
		beta[c] = 3.0f + 2.0f * beta[c]; /* some outputs above 6 */
		rstd[c] = 0.5f + 0.1f * (float)c;
	}
	float *y1 = dt_xmalloc(n * 4), *y2 = dt_xmalloc(n * 4), *dx1 = dt_xmalloc(n * 4), *dx2 = dt_xmalloc(n * 4);
	float dg1[19], dg2[19], db1[19], db2[19];
	const enum dt_act acts[3] = { DT_ACT_LINEAR, DT_ACT_RELU, DT_ACT_RELU6 };
	for (int a = 0; a < 3; a++) {
		dt_batchnorm_apply(x, mean, rstd, gamma, beta, y1, R, C, acts[a]);
		dt_batchnorm_apply_naive(x, mean, rstd, gamma, beta, y2, R, C, acts[a]);
		check_close("bn y", y1, y2, n, 1e-6);
		int low = 0, high = 0;
		for (size_t i = 0; i < n; i++)
			low += y1[i] == 0.0f, high += y1[i] == 6.0f;
		if (acts[a] != DT_ACT_LINEAR)
			DT_CHECK(low > 10); /* the mask is exercised */
		if (acts[a] == DT_ACT_RELU6)
			DT_CHECK(high > 10);
		for (int batch_stats = 0; batch_stats < 2; batch_stats++) {
			dt_batchnorm_backward(dy, x, mean, rstd, gamma, beta, dx1, dg1, db1, R, C, batch_stats, acts[a]);
			dt_batchnorm_backward_naive(dy, x, mean, rstd, gamma, beta, dx2, dg2, db2, R, C, batch_stats, acts[a]);
			check_close("bn dx", dx1, dx2, n, 1e-4);
			check_close("bn dgamma", dg1, dg2, (size_t)C, 1e-4);
			check_close("bn dbeta", db1, db2, (size_t)C, 1e-4);
		}
	}
	/* dx NULL: the parameter gradients alone, the same */
	dt_batchnorm_backward(dy, x, mean, rstd, gamma, beta, NULL, dg1, db1, R, C, 1, DT_ACT_RELU6);
	check_close("bn dgamma without dx", dg1, dg2, (size_t)C, 1e-4);
	free(x), free(dy), free(p), free(y1), free(y2), free(dx1), free(dx2);
}

DT_TEST(nn_mbv2, batch_norm_relu6_layer_gradient_checks)
{
	struct dt_err err = DT_ERR_INIT;
	for (int a = 0; a < 2; a++) {
		struct rig g = { 0 };
		DT_CHECK_OK(dt_layer_batchnorm(&g.layer, "bn", (struct dt_shape){ 3, 2, 5 }, 0.9f, 1e-3f, &err), &err);
		g.layer.act = a ? DT_ACT_RELU6 : DT_ACT_RELU;
		rig_init(&g, 3, 100 + (uint64_t)a);
		for (int c = 0; c < 5; c++)
			g.params[5 + c] = 2.0f + 2.0f * (float)c; /* beta: some outputs clamp at 6 */
		for (int c = 0; c < 5; c++)
			g.params[c] = 1.5f; /* gamma */
		rig_backward(&g);
		float *dx = dt_xmalloc(g.in_n * 4), *dp = dt_xmalloc(g.np * 4);
		memcpy(dx, g.dx, g.in_n * 4);
		memcpy(dp, g.grads, g.np * 4);
		/* training mode: the batch statistics make every dx depend on
		 * every x; entries at a clamp's kink are skipped (skip_kinks) */
		check_array("bn+act dx", g.x, g.in_n, dx, rig_loss_cb, &g, 5e-2, 2e-3, 1);
		check_array("bn+act dgamma/dbeta", g.params, 10, dp, rig_loss_cb, &g, 1e-2, 2e-3, 1);
		/* the forward really clamped */
		rig_loss(&g);
		int top = 0;
		for (size_t i = 0; i < g.out_n; i++) {
			DT_CHECK(g.y[i] >= 0.0f);
			top += g.y[i] == 6.0f;
		}
		if (a)
			DT_CHECK(top > 0);
		free(dx), free(dp);
		rig_release(&g);
	}
}

DT_TEST(nn_mbv2, pointwise_conv_is_one_matmul_and_gradient_checks)
{
	struct dt_err err = DT_ERR_INIT;
	struct rig g = { 0 };
	DT_CHECK_OK(dt_layer_conv2d(&g.layer, "pw", (struct dt_shape){ 5, 3, 7 }, 1, 1, 6, 1, 0, 0, &err), &err);
	DT_CHECK(dt__layer_is_pointwise(&g.layer));
	DT_CHECK_INT_EQ(dt_layer_scratch_floats(&g.layer, 4), 0); /* no im2col copy */
	rig_init(&g, 4, 200);
	/* y = x (rows, C) kernel (C, OC) + bias, against the naive matmul */
	rig_loss(&g);
	const int rows = 4 * 5 * 3;
	float *ref = dt_xmalloc(g.out_n * 4);
	dt_matmul_naive(0, 0, rows, 6, 7, 1.0f, g.x, 7, g.layer.kernel, 6, 0.0f, ref, 6);
	for (int r = 0; r < rows; r++)
		for (int o = 0; o < 6; o++)
			ref[r * 6 + o] += g.layer.bias[o];
	check_close("pointwise y", g.y, ref, g.out_n, 1e-5);
	free(ref);
	check_rig(&g, 5e-3, 2e-3);
	rig_release(&g);
	/* with a fused ReLU and without bias */
	DT_CHECK_OK(dt_layer_conv2d(&g.layer, "pw", (struct dt_shape){ 4, 4, 3 }, 1, 1, 5, 1, 0, 1, &err), &err);
	dt_layer_drop_bias(&g.layer);
	rig_init(&g, 2, 210);
	check_rig(&g, 5e-3, 2e-3);
	rig_release(&g);
	/* stride 2 or padding is not pointwise: the im2col path keeps it */
	DT_CHECK_OK(dt_layer_conv2d(&g.layer, "c", (struct dt_shape){ 4, 4, 3 }, 1, 1, 5, 2, 0, 0, &err), &err);
	DT_CHECK(!dt__layer_is_pointwise(&g.layer));
}

/* x -> pw expand (BN, ReLU6) -> depthwise 3x3 (BN, ReLU6) -> pw project
 * (BN) -> add x -> global average -> dense softmax: one inverted residual. */
static struct dt_model *block_model(int B)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = dt_graph_new();
	const int shape[3] = { 5, 5, 4 };
	DT_CHECK_OK(dt_graph_input(g, "x", DT_FLOAT32, 3, shape, &err), &err);
	DT_CHECK_OK(dt_graph_conv2d(g, "expand", "x", 12, 1, 1, 1, DT_PADDING_SAME, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_batch_norm(g, "expand_BN", NULL, 0.99f, 1e-3f, &err), &err);
	DT_CHECK_OK(dt_graph_activation(g, "expand_relu", NULL, DT_ACT_RELU6, &err), &err);
	DT_CHECK_OK(dt_graph_depthwise_conv2d(g, "dw", NULL, 3, 3, DT_PADDING_SAME, NULL, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_batch_norm(g, "dw_BN", NULL, 0.99f, 1e-3f, &err), &err);
	DT_CHECK_OK(dt_graph_activation(g, "dw_relu", NULL, DT_ACT_RELU6, &err), &err);
	DT_CHECK_OK(dt_graph_conv2d(g, "project", NULL, 4, 1, 1, 1, DT_PADDING_VALID, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_batch_norm(g, "project_BN", NULL, 0.99f, 1e-3f, &err), &err);
	DT_CHECK_OK(dt_graph_add(g, "add", 2, (const char *const[]){ "x", "project_BN" }, &err), &err);
	DT_CHECK_OK(dt_graph_global_pool(g, "gap", NULL, DT_POOL_AVG, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "out", NULL, 3, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_loss(g, "out", DT_LOSS_SOFTMAX_XENT, &err), &err);
	struct dt_model *m = NULL;
	DT_CHECK_OK(dt_model_from_graph(g, "block", B, &m, &err), &err);
	dt_graph_free(g);
	return m;
}

struct block_ctx {
	struct dt_model *m;
	struct dt_model_batch b;
};

static double block_loss(void *ctx)
{
	struct block_ctx *c = ctx;
	struct dt_err err = DT_ERR_INIT;
	struct dt_step_result res;
	struct dt_rng rng;
	dt_rng_seed(&rng, 1);
	DT_CHECK_OK(dt_model_step(c->m, &c->b, &rng, NULL, NULL, &res, &err), &err);
	return (double)res.loss;
}

DT_TEST(nn_mbv2, inverted_residual_block_fuses_and_gradient_checks)
{
	const int B = 6;
	struct block_ctx c = { .m = block_model(B) };
	if (!c.m)
		return;
	/* both ReLU6 nodes folded into their batch norms */
	int fused = 0;
	for (int i = 0; i < c.m->num_nodes; i++)
		if (c.m->nodes[i].fused) {
			fused++;
			DT_CHECK(c.m->nodes[i].layer.act == DT_ACT_RELU6);
			DT_CHECK(c.m->nodes[c.m->nodes[i].inputs[0]].layer.kind == DT_LAYER_BATCHNORM);
			DT_CHECK(c.m->nodes[c.m->nodes[i].inputs[0]].layer.act == DT_ACT_RELU6);
		}
	DT_CHECK_INT_EQ(fused, 2);
	dt_model_init_params(c.m, 7);
	float *x = random_floats((size_t)B * 100, 300, 1.5f);
	int32_t y[6] = { 0, 1, 2, 2, 1, 0 };
	c.b = (struct dt_model_batch){ .size = B, .num_inputs = 1, .inputs = { { DT_FLOAT32, x } },
				       .targets = { DT_INT32, y } };
	block_loss(&c);
	const size_t np = dt_model_num_params(c.m);
	float *grads = dt_xmalloc(np * 4);
	memcpy(grads, dt_model_grads(c.m), np * 4);
	/* every variable, the moving statistics included (their gradient is
	 * zero: they do not change the training loss) */
	const double rel = check_array("block params", dt_model_params(c.m), np, grads, block_loss, &c, 5e-2, 1e-3, 1);
	DT_CHECK(rel < 2e-2);
	free(grads);
	free(x);
	dt_model_free(c.m);
}

DT_TEST(nn_mbv2, moments_and_depthwise_on_mobilenet_sizes_match_their_naive_twins)
{
	/* more rows than a block of partial sums, channels a vector multiple
	 * and not: the layout the fast loops are vectorized for */
	const int R = 300;
	const int Cs[2] = { 32, 37 };
	for (int i = 0; i < 2; i++) {
		const int C = Cs[i];
		float *x = random_floats((size_t)R * C, 400 + (uint64_t)i, 2.0f);
		for (size_t j = 0; j < (size_t)R * C; j++)
			x[j] += 1.0f + (float)(j % (size_t)C) * 0.25f;
		float m1[37], v1[37], m2[37], v2[37];
		dt_batchnorm_moments(x, m1, v1, R, C);
		dt_batchnorm_moments_naive(x, m2, v2, R, C);
		check_close("mean", m1, m2, (size_t)C, 1e-5);
		check_close("var", v1, v2, (size_t)C, 1e-5);
		free(x);
	}
	struct dt_layer l;
	struct dt_err err = DT_ERR_INIT;
	const int strides[2] = { 1, 2 };
	for (int s = 0; s < 2; s++) {
		DT_CHECK_OK(dt_layer_depthwise(&l, "dw", (struct dt_shape){ 9, 8, 48 }, 3, 3, 1, strides[s], strides[s], 1, 1,
					       s == 0, &err),
			    &err);
		const struct dt_dw_geom g = l.dw;
		const int B = 2;
		const size_t nx = (size_t)B * g.H * g.W * g.C, ny = (size_t)B * g.OH * g.OW * g.C, nk = 9 * (size_t)g.C;
		float *x = random_floats(nx, 500, 1.0f), *k = random_floats(nk, 501, 1.0f), *dy = random_floats(ny, 502, 1.0f);
		float *y1 = dt_xmalloc(ny * 4), *y2 = dt_xmalloc(ny * 4), *dx1 = dt_xmalloc(nx * 4), *dx2 = dt_xmalloc(nx * 4);
		float *dk1 = dt_xmalloc(nk * 4), *dk2 = dt_xmalloc(nk * 4), db1[48], db2[48];
		dt_depthwise_forward(&g, x, k, dy, y1, B); /* any bias */
		dt_depthwise_forward_naive(&g, x, k, dy, y2, B);
		check_close("dw y", y1, y2, ny, 1e-5);
		dt_depthwise_backward(&g, x, k, dy, dx1, dk1, db1, B);
		dt_depthwise_backward_naive(&g, x, k, dy, dx2, dk2, db2, B);
		check_close("dw dx", dx1, dx2, nx, 1e-5);
		check_close("dw dk", dk1, dk2, nk, 1e-4);
		check_close("dw dbias", db1, db2, 48, 1e-4);
		free(x), free(k), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(dk1), free(dk2);
	}
}

/* ---- the gradients' memory plan (exec.c's plan_grads) ---- */

/* One training step of m on a seeded random batch of B images; the
 * parameters' gradient copied into g (num_params floats). */
static void one_step(struct dt_model *m, int B, float *g)
{
	const struct dt_io_info *in = dt_model_input(m, 0);
	const size_t n = (size_t)B * in->count;
	float *x = dt_xmalloc(n * sizeof(float));
	int32_t y[16];
	struct dt_rng rng;
	dt_rng_seed(&rng, 11);
	for (size_t i = 0; i < n; i++)
		x[i] = dt_rng_uniform(&rng) * 2.0f - 1.0f;
	for (int i = 0; i < B; i++)
		y[i] = (int32_t)dt_rng_below(&rng, 5);
	struct dt_model_batch b = { .size = B, .num_inputs = 1, .inputs = { { DT_FLOAT32, x } },
				    .targets = { DT_INT32, y } };
	struct dt_step_result res;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_model_step(m, &b, NULL, NULL, NULL, &res, &err), &err);
	memcpy(g, dt_model_grads(m), dt_model_num_params(m) * sizeof(float));
	free(x);
}

/* Gradients share memory only where their lifetimes in the backward pass do
 * not meet: MobileNetV2's (a chain of inverted residual blocks, 52 batch
 * norms, Add nodes) need a few buffers' worth instead of one a node, and the
 * step's gradient is bit-identical to the one computed with every node's
 * gradient in memory of its own (the plan changes where, never what). */
DT_TEST(nn_mbv2, gradient_buffers_are_shared_without_changing_a_bit)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_model *m = NULL;
	enum { B = 4 };
	DT_CHECK_OK(dt_keras_load("tests/fixtures/keras/mobilenet_v2_k3.json", B, &m, NULL, &err), &err);
	if (!m)
		return;
	dt_model_init_params(m, 3);
	struct dt_model_memory mm;
	dt_model_memory(m, &mm);
	fprintf(stderr, "batch %d: activations %zu bytes, their gradients %zu planned, %zu unshared\n", mm.batch,
		mm.activation_bytes, mm.gradient_bytes, mm.gradient_bytes_unshared);
	DT_CHECK(mm.gradient_bytes_unshared == mm.activation_bytes);
	DT_CHECK(mm.gradient_bytes * 4 < mm.gradient_bytes_unshared);
	/* the plan's invariant, checked on its own terms: buffers of nodes whose
	 * gradients are both live at some backward step do not overlap */
	const int N = m->num_nodes;
	int *last = calloc((size_t)N, sizeof(int));
	for (int i = 0; i < N; i++)
		last[i] = i == m->store[m->output] ? N : i;
	for (int i = 0; i < N; i++)
		for (int k = 0; k < m->nodes[i].ninputs; k++) {
			const int t = m->store[m->nodes[i].inputs[k]];
			if (m->grad[t] && m->needs_grad[i] && last[t] < i)
				last[t] = i;
		}
	int pairs = 0;
	for (int t = 0; t < N; t++)
		for (int u = t + 1; u < N; u++) {
			if (!m->grad[t] || !m->grad[u] || !(u <= last[t] && t <= last[u]))
				continue;
			const float *a = m->grad[t], *b = m->grad[u];
			const size_t na = dt_shape_elems(m->nodes[t].layer.out) * B,
				     nb = dt_shape_elems(m->nodes[u].layer.out) * B;
			DT_CHECK(a + na <= b || b + nb <= a);
			pairs++;
		}
	DT_CHECK(pairs > N); /* the check saw the graph's live pairs, not none */
	const size_t np = dt_model_num_params(m);
	float *planned = dt_xmalloc(np * sizeof(float)), *own = dt_xmalloc(np * sizeof(float));
	float *saved = dt_xmalloc(np * sizeof(float));
	memcpy(saved, dt_model_params(m), np * sizeof(float));
	one_step(m, B, planned);
	/* the same step with every gradient in a buffer of its own */
	float **mine = calloc((size_t)N, sizeof(float *));
	for (int i = 0; i < N; i++)
		if (m->grad[i]) {
			mine[i] = dt_xalloc_aligned(dt_shape_elems(m->nodes[i].layer.out) * B + 16, sizeof(float));
			m->grad[i] = mine[i];
		}
	memcpy(dt_model_params(m), saved, np * sizeof(float)); /* batch norm's statistics moved */
	one_step(m, B, own);
	DT_CHECK(memcmp(planned, own, np * sizeof(float)) == 0);
	for (int i = 0; i < N; i++)
		free(mine[i]);
	free(mine);
	free(last);
	free(planned), free(own), free(saved);
	dt_model_free(m);
}
