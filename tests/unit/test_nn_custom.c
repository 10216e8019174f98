/*
 * Custom models (nn/custom.h): a hand-written two-layer network whose
 * callback's gradients are checked by finite differences through the
 * model entry points; NaN and errors from a callback; bad definitions.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "nn/custom.h"
#include "nn/layers.h"
#include "nn/model.h"

enum { D = 3, H = 4, NB = 5 };

struct net {
	int poison;                /* 1: NaN into a gradient, 2: NaN loss, 3: fail */
	int calls;
};

/* y = w2 . tanh(W1 x + b1) + b2 against float targets, mean squared error. */
static enum dt_status net_fn(void *user, struct dt_custom_ctx *ctx, struct dt_err *err)
{
	struct net *n = user;
	n->calls++;
	if (n->poison == 3)
		return dt_err_set(err, DT_DATA, "cannot read shard 2");
	const float *x = ctx->batch->inputs[0].data, *t = ctx->batch->targets.data;
	const float *W1 = ctx->params[0], *b1 = ctx->params[1], *w2 = ctx->params[2], *b2 = ctx->params[3];
	double loss = 0;
	for (int b = 0; b < ctx->batch->size; b++) {
		float h[H], y = b2[0];
		for (int j = 0; j < H; j++) {
			float a = b1[j];
			for (int i = 0; i < D; i++)
				a += x[b * D + i] * W1[i * H + j];
			h[j] = tanhf(a);
			y += w2[j] * h[j];
		}
		const float e = y - t[b];
		loss += (double)e * (double)e;
		if (!ctx->training)
			continue;
		const float dy = 2.0f * e / (float)ctx->batch->size;
		ctx->grads[3][0] += dy;
		for (int j = 0; j < H; j++) {
			ctx->grads[2][j] += dy * h[j];
			const float da = dy * w2[j] * (1.0f - h[j] * h[j]);
			ctx->grads[1][j] += da;
			for (int i = 0; i < D; i++)
				ctx->grads[0][i * H + j] += da * x[b * D + i];
		}
	}
	ctx->loss = (float)(loss / ctx->batch->size);
	if (n->poison == 1 && ctx->training)
		ctx->grads[1][2] = NAN;
	if (n->poison == 2)
		ctx->loss = INFINITY;
	return DT_OK;
}

static const struct dt_custom_var vars[] = {
	{ "W1", 2, { D, H }, "glorot_uniform", 1 },
	{ "b1", 1, { H }, "random_normal(0.1)", 0 },
	{ "w2", 1, { H }, "truncated_normal(0.5)", 1 },
	{ "b2", 1, { 1 }, "ones", 0 },
};
static const struct dt_custom_tensor inputs[] = { { "x", DT_FLOAT32, 1, { D } } };

static struct dt_custom_def net_def(struct net *n)
{
	return (struct dt_custom_def){ .name = "net", .num_vars = 4, .vars = vars, .num_inputs = 1, .inputs = inputs,
				       .targets = { "y", DT_FLOAT32, 1, { 1 } }, .fn = net_fn, .user = n };
}

struct fixture {
	struct net net;
	struct dt_model *m;
	float x[NB * D], t[NB];
	struct dt_model_batch batch;
};

static void fixture_init(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	struct dt_err err = DT_ERR_INIT;
	struct dt_custom_def def = net_def(&f->net);
	DT_CHECK_OK(dt_model_new_custom(&def, NB, &f->m, &err), &err);
	dt_model_init_params(f->m, 9);
	float *x = random_floats(NB * D, 10, 1.0f);
	memcpy(f->x, x, sizeof(f->x));
	free(x);
	for (int b = 0; b < NB; b++)
		f->t[b] = 0.5f * (float)b - 1.0f;
	f->batch = (struct dt_model_batch){ .size = NB, .num_inputs = 1 };
	f->batch.inputs[0] = (struct dt_data){ DT_FLOAT32, f->x };
	f->batch.targets = (struct dt_data){ DT_FLOAT32, f->t };
}

static double fixture_loss(void *p)
{
	struct fixture *f = p;
	struct dt_step_result r;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_model_evaluate(f->m, &f->batch, &r, &err), &err);
	return r.loss;
}

struct ranges {
	int calls;
	size_t offset, count;
};

static void note(void *arg, size_t offset, size_t count)
{
	struct ranges *r = arg;
	r->calls++;
	r->offset = offset;
	r->count = count;
}

DT_TEST(nn_custom, gradients_match_finite_differences_and_variables_are_laid_out_flat)
{
	struct fixture f;
	fixture_init(&f);
	struct dt_err err = DT_ERR_INIT;
	const size_t np = dt_model_num_params(f.m);
	DT_CHECK_INT_EQ(np, D * H + H + H + 1);
	DT_CHECK_STR_EQ(dt_model_variable(f.m, 2)->name, "w2");
	DT_CHECK_INT_EQ(dt_model_variable(f.m, 2)->offset, D * H + H);
	DT_CHECK(dt_model_variable_is_kernel(f.m, 0) && !dt_model_variable_is_kernel(f.m, 1));
	DT_CHECK(dt_model_params(f.m)[np - 1] == 1.0f); /* b2: ones */
	/* one layer owning the whole buffer, for the all-reduce planner */
	DT_CHECK_INT_EQ(dt_model_num_layers(f.m), 1);
	DT_CHECK(dt_model_layer(f.m, 0)->kind == DT_LAYER_CUSTOM && dt_layer_num_params(dt_model_layer(f.m, 0)) == np);
	float *g = dt_model_grads(f.m);
	for (size_t i = 0; i < np; i++)
		g[i] = 5.0f; /* stale: the callback must see zeros */
	struct dt_step_result r;
	struct ranges rg = { 0 };
	DT_CHECK_OK(dt_model_step(f.m, &f.batch, NULL, note, &rg, &r, &err), &err);
	DT_CHECK(rg.calls == 1 && rg.offset == 0 && rg.count == np);
	DT_CHECK_NEAR(r.loss, fixture_loss(&f), 1e-6);
	float *ana = dt_xmalloc(np * sizeof(float));
	memcpy(ana, g, np * sizeof(float));
	double agg = check_array("net params", dt_model_params(f.m), np, ana, fixture_loss, &f, 1e-2, 5e-4, 0);
	DT_CHECK(agg < 1e-2);
	free(ana);
	dt_model_free(f.m);
}

DT_TEST(nn_custom, nan_from_the_callback_is_reported_and_not_trained_on)
{
	struct fixture f;
	fixture_init(&f);
	struct dt_err err = DT_ERR_INIT;
	struct dt_step_result r;
	struct ranges rg = { 0 };
	f.net.poison = 1;
	DT_CHECK(dt_model_step(f.m, &f.batch, NULL, note, &rg, &r, &err) == DT_RUNTIME);
	DT_CHECK_CONTAINS(err.msg, "custom model 'net': the callback wrote nan into the gradient of 'b1' at index 2; the step is not trained on");
	DT_CHECK_INT_EQ(rg.calls, 0);
	for (size_t i = 0; i < dt_model_num_params(f.m); i++)
		DT_CHECK(dt_model_grads(f.m)[i] == 0.0f);
	f.net.poison = 2;
	DT_CHECK(dt_model_evaluate(f.m, &f.batch, &r, &err) == DT_RUNTIME);
	DT_CHECK_CONTAINS(err.msg, "custom model 'net': the callback's loss is inf");
	f.net.poison = 3;
	DT_CHECK(dt_model_step(f.m, &f.batch, NULL, NULL, NULL, &r, &err) == DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "custom model 'net': the callback failed: cannot read shard 2");
	f.net.poison = 0;
	DT_CHECK_OK(dt_model_step(f.m, &f.batch, NULL, NULL, NULL, &r, &err), &err);
	/* the uint8 entry points are for one-input classifiers only: a custom model's batch goes through dt_model_step */
	DT_CHECK(dt_model_logits(f.m) == NULL);
	dt_model_free(f.m);
}

DT_TEST(nn_custom, bad_definitions_are_refused_naming_what_is_wrong)
{
	struct net n = { 0 };
	struct dt_err err = DT_ERR_INIT;
	struct dt_model *m = NULL;
	struct dt_custom_def def = net_def(&n);
	def.fn = NULL;
	DT_CHECK(dt_model_new_custom(&def, 4, &m, &err) == DT_CONFIG && m == NULL);
	DT_CHECK_CONTAINS(err.msg, "custom model 'net': no callback (fn is NULL)");
	struct dt_custom_var bad[2] = { { "w", 1, { 3 }, NULL, 1 }, { "w", 1, { 3 }, NULL, 0 } };
	def = net_def(&n);
	def.vars = bad;
	def.num_vars = 2;
	DT_CHECK(dt_model_new_custom(&def, 4, &m, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "variable name 'w' is used twice");
	bad[1] = (struct dt_custom_var){ "v", 2, { 3, 0 }, NULL, 0 };
	DT_CHECK(dt_model_new_custom(&def, 4, &m, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "variable 'v' dimension 1 is 0");
	bad[1] = (struct dt_custom_var){ "v", 1, { 3 }, "random_normal(-1)", 0 };
	DT_CHECK(dt_model_new_custom(&def, 4, &m, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "custom model 'net': variable 'v': bad initializer 'random_normal(-1)'");
	def = net_def(&n);
	def.targets.ndim = 0;
	DT_CHECK(dt_model_new_custom(&def, 4, &m, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "targets 'y' has rank 0");
	DT_CHECK(dt_model_new_custom(NULL, 4, &m, &err) == DT_USAGE);
	def = net_def(&n);
	DT_CHECK(dt_model_new_custom(&def, 0, &m, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "max_batch must be 1 to");
}
