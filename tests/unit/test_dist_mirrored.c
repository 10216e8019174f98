/*
 * Mirrored replicas in one process (distribute/mirrored.h): the gradient a group
 * of N replicas leaves in the primary equals the one-replica gradient of the
 * whole batch, for even and uneven splits and batches smaller than N; the
 * loss and the count of correct predictions too; and the replicas follow the
 * primary's parameters from step to step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "distribute/mirrored.h"
#include "nn/graph.h"
#include "nn/hparams.h"
#include "models/builtin.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "tensor/blas.h"

#define H 28
#define W 28
#define CLASSES 10

struct batch {
	float *x;    /* (B, H, W, 1) */
	uint8_t *y;  /* (B) */
};

static void batch_make(struct batch *b, int n, uint64_t seed)
{
	struct dt_rng rng;
	dt_rng_seed(&rng, seed);
	b->x = dt_xalloc_aligned((size_t)n * H * W, sizeof(float));
	b->y = dt_xcalloc((size_t)n, 1);
	for (size_t i = 0; i < (size_t)n * H * W; i++)
		b->x[i] = dt_rng_normal(&rng);
	for (int i = 0; i < n; i++)
		b->y[i] = (uint8_t)dt_rng_below(&rng, CLASSES);
}

static void batch_release(struct batch *b)
{
	free(b->x);
	free(b->y);
}

static struct dt_model *model_make(const struct dt_hparams *hp, int max_batch)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_model *m;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, hp, H, W, 1, CLASSES, max_batch, &m, &err), &err);
	dt_model_init_params(m, 7);
	return m;
}

/* Largest |a - b| relative to the largest |b| (gradients of the first
 * layers are small; a relative-to-max tolerance says "same vector"). */
static double max_rel_diff(const float *a, const float *b, size_t n)
{
	double diff = 0, scale = 1e-12;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(a[i]) || !isfinite(b[i]))
			return INFINITY; /* (fmax would skip a NaN) */
		diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
		scale = fmax(scale, fabs((double)b[i]));
	}
	return diff / scale;
}

/* One mirrored step of `replicas` over a batch of `batch` against one model
 * on the whole batch: gradient, loss and correct count agree. */
static void check_gradient(const char *model, int replicas, int batch)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_blas_load(1, &err), &err);
	struct dt_hparams hp;
	char set[32];
	snprintf(set, sizeof(set), "%s_base", model);
	DT_CHECK_OK(dt_hparams_from_set(set, &hp, &err), &err);
	hp.dropout = 0;
	struct batch b;
	batch_make(&b, batch, 11);

	struct dt_model *one = model_make(&hp, batch), *primary = model_make(&hp, batch);
	const size_t np = dt_model_num_params(one);
	int c1 = -1, cm = -1;
	float l1 = dt_model_train_batch(one, b.x, b.y, batch, NULL, &c1);

	struct dt_mirrored_config mc = { .hp = &hp, .models = &dt_models_builtin, .height = H, .width = W, .channels = 1, .num_classes = CLASSES,
					 .replicas = replicas, .batch_size = batch, .seed = 1 };
	struct dt_mirrored *g;
	DT_CHECK_OK(dt_mirrored_new(primary, &mc, &g, &err), &err);
	DT_CHECK_INT_EQ(dt_mirrored_replicas(g), replicas);
	/* Twice: the second step must give the same (the replicas' buffers are reused). */
	for (int rep = 0; rep < 2; rep++) {
		memset(dt_model_grads(primary), 0xff, np * sizeof(float)); /* NaN: every element must be rewritten */
		float lm = dt_mirrored_train_batch(g, b.x, b.y, batch, &cm);
		double d = max_rel_diff(dt_model_grads(primary), dt_model_grads(one), np);
		if (d > 2e-5)
			dt_test_fail(__FILE__, __LINE__, "%s, %d replicas, batch %d: gradient differs from one replica's by %g (relative to max)",
				     model, replicas, batch, d);
		DT_CHECK_NEAR(lm, l1, 1e-5 * fabs((double)l1) + 1e-6);
		DT_CHECK_INT_EQ(cm, c1);
	}
	dt_mirrored_free(g);
	dt_model_free(primary);
	dt_model_free(one);
	batch_release(&b);
	dt_blas_set_threads(1);
}

DT_TEST(dist_mirrored, two_replicas_give_the_one_process_gradient_mlp)
{
	check_gradient("mlp", 2, 64);
}

DT_TEST(dist_mirrored, two_replicas_give_the_one_process_gradient_lenet)
{
	check_gradient("lenet", 2, 32);
}

DT_TEST(dist_mirrored, uneven_split_three_replicas_batch_7)
{
	check_gradient("mlp", 3, 7);
}

DT_TEST(dist_mirrored, batch_smaller_than_replicas_leaves_some_idle)
{
	check_gradient("mlp", 4, 3);
	check_gradient("mlp", 2, 1);
}

/* The replicas copy the primary's parameters each step: after the primary
 * changes (as an optimizer step changes it), the next mirrored gradient is
 * that of the new parameters. */
DT_TEST(dist_mirrored, replicas_follow_the_primary_parameters)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_blas_load(1, &err), &err);
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &hp, &err), &err);
	struct batch b;
	batch_make(&b, 16, 5);
	struct dt_model *one = model_make(&hp, 16), *primary = model_make(&hp, 16);
	struct dt_mirrored_config mc = { .hp = &hp, .models = &dt_models_builtin, .height = H, .width = W, .channels = 1, .num_classes = CLASSES,
					 .replicas = 2, .batch_size = 16, .seed = 1 };
	struct dt_mirrored *g;
	DT_CHECK_OK(dt_mirrored_new(primary, &mc, &g, &err), &err);
	const size_t np = dt_model_num_params(one);
	for (int step = 0; step < 3; step++) {
		(void)dt_mirrored_train_batch(g, b.x, b.y, 16, NULL);
		(void)dt_model_train_batch(one, b.x, b.y, 16, NULL, NULL);
		DT_CHECK(max_rel_diff(dt_model_grads(primary), dt_model_grads(one), np) <= 2e-5);
		/* An "update" on both, as the optimizer would do. */
		float *p1 = dt_model_params(one), *pm = dt_model_params(primary);
		const float *g1 = dt_model_grads(one);
		for (size_t i = 0; i < np; i++)
			pm[i] = p1[i] = p1[i] - 0.5f * g1[i];
	}
	dt_mirrored_free(g);
	dt_model_free(primary);
	dt_model_free(one);
	batch_release(&b);
}

DT_TEST(dist_mirrored, bad_replica_counts_are_refused)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &hp, &err), &err);
	struct dt_model *m = model_make(&hp, 8);
	struct dt_mirrored *g = NULL;
	struct dt_mirrored_config mc = { .hp = &hp, .models = &dt_models_builtin, .height = H, .width = W, .channels = 1, .num_classes = CLASSES,
					 .replicas = 1, .batch_size = 8 };
	DT_CHECK_INT_EQ(dt_mirrored_new(m, &mc, &g, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "between 2 and");
	mc.replicas = 2;
	mc.batch_size = 9;
	DT_CHECK_INT_EQ(dt_mirrored_new(m, &mc, &g, &err), DT_CONFIG);
	DT_CHECK(g == NULL);
	dt_mirrored_free(NULL);
	dt_model_free(m);
}

/* ---- the general step: any model (a layer graph here) ---- */


/* A two-input graph: x (6) and e (int32 ids (3)) -> dense + embedding -> 4 classes. */
static struct dt_graph *general_graph(void)
{
	struct dt_graph *g = dt_graph_new();
	struct dt_err err = DT_ERR_INIT;
	const int xs[] = { 6 }, es[] = { 3 };
	DT_CHECK_OK(dt_graph_input(g, "x", DT_FLOAT32, 1, xs, &err), &err);
	DT_CHECK_OK(dt_graph_input(g, "e", DT_INT32, 1, es, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "h", "x", 5, DT_ACT_TANH, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_embedding(g, "emb", "e", 7, 5, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_flatten(g, "flat", "emb", &err), &err);
	const char *cat[] = { "h", "flat" };
	DT_CHECK_OK(dt_graph_concat(g, "c", 2, cat, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "logits", "c", 4, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_loss(g, "logits", DT_LOSS_SOFTMAX_XENT, &err), &err);
	return g;
}

static enum dt_status make_from_graph(void *arg, int max_batch, struct dt_model **out, struct dt_err *err)
{
	return dt_model_from_graph(arg, "g", max_batch, out, err);
}

DT_TEST(dist_mirrored, general_step_gives_the_one_process_gradient)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = general_graph();
	const int B = 7;
	struct dt_model *one, *primary;
	DT_CHECK_OK(dt_model_from_graph(g, "g", B, &one, &err), &err);
	DT_CHECK_OK(dt_model_from_graph(g, "g", B, &primary, &err), &err);
	dt_model_init_params(one, 5);
	memcpy(dt_model_params(primary), dt_model_params(one), dt_model_num_params(one) * sizeof(float));
	float x[7 * 6];
	int32_t e[7 * 3], y[7];
	struct dt_rng rng;
	dt_rng_seed(&rng, 9);
	for (int i = 0; i < B * 6; i++)
		x[i] = dt_rng_uniform(&rng) - 0.5f;
	for (int i = 0; i < B * 3; i++)
		e[i] = (int32_t)dt_rng_below(&rng, 7);
	for (int i = 0; i < B; i++)
		y[i] = (int32_t)dt_rng_below(&rng, 4);
	struct dt_model_batch b = { .size = B, .num_inputs = 2,
				    .inputs = { { DT_FLOAT32, x }, { DT_INT32, e } }, .targets = { DT_INT32, y } };
	struct dt_step_result r1, r3;
	DT_CHECK_OK(dt_model_step(one, &b, NULL, NULL, NULL, &r1, &err), &err);

	struct dt_mirrored_config mc = { .make = make_from_graph, .make_arg = g, .replicas = 3, .batch_size = B,
					 .seed = 1 };
	struct dt_mirrored *grp;
	DT_CHECK_OK(dt_mirrored_new(primary, &mc, &grp, &err), &err);
	DT_CHECK_OK(dt_mirrored_step_general(grp, &b, &r3, &err), &err);
	DT_CHECK_NEAR(r3.loss, r1.loss, 1e-5);
	DT_CHECK_INT_EQ(r3.correct, r1.correct);
	DT_CHECK_INT_EQ(r3.counted, r1.counted);
	const float *g1 = dt_model_grads(one), *g3 = dt_model_grads(primary);
	for (size_t i = 0; i < dt_model_num_params(one); i++)
		DT_CHECK_NEAR(g3[i], g1[i], 1e-5 + 1e-4 * fabs(g1[i]));

	/* A label out of range in the third replica's slice: its error, named. */
	y[6] = 4;
	enum dt_status st = dt_mirrored_step_general(grp, &b, &r3, &err);
	DT_CHECK_INT_EQ(st, DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "replica 2");
	dt_mirrored_free(grp);
	dt_model_free(one);
	dt_model_free(primary);
	dt_graph_free(g);
}

/* ---- batch norm's moving statistics: the mean over the replicas ---- */

/* x (6) -> dense (5) -> batch norm "bn" -> batch norm "frozen" (trainable
 * False) -> dense logits (4). */
static struct dt_graph *bn_graph(void)
{
	struct dt_graph *g = dt_graph_new();
	struct dt_err err = DT_ERR_INIT;
	const int xs[] = { 6 };
	DT_CHECK_OK(dt_graph_input(g, "x", DT_FLOAT32, 1, xs, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "h", "x", 5, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_batch_norm(g, "bn", "h", 0.5f, 1e-3f, &err), &err);
	DT_CHECK_OK(dt_graph_batch_norm(g, "frozen", "bn", 0.5f, 1e-3f, &err), &err);
	DT_CHECK_OK(dt_graph_set_trainable(g, "frozen", 0, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "logits", "frozen", 4, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_loss(g, "logits", DT_LOSS_SOFTMAX_XENT, &err), &err);
	return g;
}

static const float *var_of(struct dt_model *m, const char *name)
{
	for (int i = 0; i < dt_model_num_variables(m); i++)
		if (strcmp(dt_model_variable(m, i)->name, name) == 0)
			return dt_model_params(m) + dt_model_variable(m, i)->offset;
	DT_CHECK_STR_EQ(name, "(a variable of the model)");
	return dt_model_params(m);
}

static int sync_of(struct dt_model *m, const char *name)
{
	for (int i = 0; i < dt_model_num_variables(m); i++)
		if (strcmp(dt_model_variable(m, i)->name, name) == 0)
			return dt_model_variable_sync_mean(m, i);
	return -1;
}

DT_TEST(dist_mirrored, moving_statistics_are_the_mean_of_the_replicas_own)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = bn_graph();
	enum { B = 8, HALF = 4, STEPS = 3 };
	struct dt_model *alone[2], *primary;
	DT_CHECK_OK(dt_model_from_graph(g, "g", B, &primary, &err), &err);
	dt_model_init_params(primary, 5);
	const size_t np = dt_model_num_params(primary);
	for (int r = 0; r < 2; r++) {
		DT_CHECK_OK(dt_model_from_graph(g, "g", HALF, &alone[r], &err), &err);
		memcpy(dt_model_params(alone[r]), dt_model_params(primary), np * sizeof(float));
	}
	/* TensorFlow's SyncOnRead MEAN: the trained batch norm's moving
	 * statistics, not its gamma and beta, nor a frozen one's */
	DT_CHECK_INT_EQ(sync_of(primary, "bn/moving_mean"), 1);
	DT_CHECK_INT_EQ(sync_of(primary, "bn/moving_variance"), 1);
	DT_CHECK_INT_EQ(sync_of(primary, "bn/gamma"), 0);
	DT_CHECK_INT_EQ(sync_of(primary, "frozen/moving_mean"), 0);
	DT_CHECK_INT_EQ(sync_of(primary, "h/kernel"), 0);
	DT_CHECK(dt_model_sync_mean_floats(primary) == 10);

	struct dt_mirrored_config mc = { .make = make_from_graph, .make_arg = g, .replicas = 2, .batch_size = B,
					 .seed = 1 };
	struct dt_mirrored *grp;
	DT_CHECK_OK(dt_mirrored_new(primary, &mc, &grp, &err), &err);
	/* The halves differ in mean (+1 and -1) so each replica's own
	 * statistics differ from the mean. Every step, each replica alone
	 * starts from the group's statistics (no optimizer: the weights stay). */
	float x[B * 6];
	int32_t y[B];
	struct dt_rng rng;
	dt_rng_seed(&rng, 3);
	for (int step = 0; step < STEPS; step++) {
		for (int i = 0; i < B * 6; i++)
			x[i] = dt_rng_uniform(&rng) + (i < HALF * 6 ? 1.0f : -1.5f) * (float)(step + 1);
		for (int i = 0; i < B; i++)
			y[i] = (int32_t)dt_rng_below(&rng, 4);
		float expect[2][5];
		for (int r = 0; r < 2; r++) {
			memcpy(dt_model_params(alone[r]), dt_model_params(primary), np * sizeof(float));
			struct dt_model_batch hb = { .size = HALF, .num_inputs = 1,
						     .inputs = { { DT_FLOAT32, x + r * HALF * 6 } },
						     .targets = { DT_INT32, y + r * HALF } };
			struct dt_step_result res;
			DT_CHECK_OK(dt_model_step(alone[r], &hb, NULL, NULL, NULL, &res, &err), &err);
			for (int c = 0; c < 5; c++)
				expect[r][c] = var_of(alone[r], "bn/moving_mean")[c];
		}
		struct dt_model_batch b = { .size = B, .num_inputs = 1, .inputs = { { DT_FLOAT32, x } },
					    .targets = { DT_INT32, y } };
		struct dt_step_result res;
		DT_CHECK_OK(dt_mirrored_step_general(grp, &b, &res, &err), &err);
		const float *mm = var_of(primary, "bn/moving_mean");
		for (int c = 0; c < 5; c++) {
			const float mean = 0.5f * (expect[0][c] + expect[1][c]);
			DT_CHECK_NEAR(mm[c], mean, 1e-6 + 1e-5 * (double)fabsf(mean));
			/* and not the primary's own half alone */
			DT_CHECK(fabsf(mm[c] - expect[0][c]) > 0.1f);
		}
		/* the variance too: the mean of the two replicas' copies */
		const float *mv = var_of(primary, "bn/moving_variance");
		const float *v0 = var_of(alone[0], "bn/moving_variance"), *v1 = var_of(alone[1], "bn/moving_variance");
		for (int c = 0; c < 5; c++)
			DT_CHECK_NEAR(mv[c], 0.5f * (v0[c] + v1[c]), 1e-6 + 1e-5 * (double)fabsf(v0[c] + v1[c]));
		/* the frozen batch norm's never change */
		DT_CHECK(var_of(primary, "frozen/moving_mean")[0] == 0.0f);
		DT_CHECK(var_of(primary, "frozen/moving_variance")[0] == 1.0f);
	}
	dt_mirrored_free(grp);
	for (int r = 0; r < 2; r++)
		dt_model_free(alone[r]);
	dt_model_free(primary);
	dt_graph_free(g);
}

/* The parameter-server modes' moving averages (nn/model.h's dt_var_kind):
 * the values a step recovers for its pushed buffer, applied with each
 * variable's kind (nn/optimizer.h's dt_optimizer_apply_vars) to the
 * variables as they were before the step, give what the step itself made
 * of the statistics; the trained variables move by the optimizer, the frozen
 * ones not at all. */
DT_TEST(dist_mirrored, moving_average_values_rebuild_the_step_on_another_copy)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = bn_graph();
	enum { B = 8 };
	struct dt_model *m;
	DT_CHECK_OK(dt_model_from_graph(g, "g", B, &m, &err), &err);
	dt_model_init_params(m, 9);
	for (int i = 0; i < dt_model_num_variables(m); i++) {
		const struct dt_variable *v = dt_model_variable(m, i);
		const enum dt_var_kind want = strncmp(v->name, "frozen/", 7) == 0 ? DT_VAR_FROZEN
					      : strstr(v->name, "/moving_") ? DT_VAR_MOVING_AVERAGE
									  : DT_VAR_TRAINABLE;
		DT_CHECK_INT_EQ(v->kind, want);
		DT_CHECK(v->kind != DT_VAR_MOVING_AVERAGE || v->decay == 0.5f);
		DT_CHECK_INT_EQ(dt_model_variable_trainable(m, i), want == DT_VAR_TRAINABLE);
	}
	const size_t np = dt_model_num_params(m);
	float *before_params = malloc(np * sizeof(float)), *pushed = calloc(np + 1, sizeof(float));
	float before[10];
	DT_CHECK(dt_model_sync_mean_floats(m) == 10);
	memcpy(before_params, dt_model_params(m), np * sizeof(float));
	dt_model_sync_mean_gather(m, before);
	float x[B * 6];
	int32_t y[B];
	struct dt_rng rng;
	dt_rng_seed(&rng, 4);
	for (int i = 0; i < B * 6; i++)
		x[i] = 3.0f * dt_rng_uniform(&rng) + 2.0f;
	for (int i = 0; i < B; i++)
		y[i] = (int32_t)dt_rng_below(&rng, 4);
	struct dt_model_batch b = { .size = B, .num_inputs = 1, .inputs = { { DT_FLOAT32, x } },
				    .targets = { DT_INT32, y } };
	struct dt_step_result res;
	DT_CHECK_OK(dt_model_step(m, &b, NULL, NULL, NULL, &res, &err), &err);
	memcpy(pushed, dt_model_grads(m), np * sizeof(float));
	dt_model_moving_average_values(m, before, pushed);
	/* The ps's side: its copy is the one from before the step. */
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &hp, &err), &err);
	snprintf(hp.optimizer, sizeof(hp.optimizer), "sgd");
	struct dt_optimizer opt;
	DT_CHECK_OK(dt_optimizer_init(&opt, &hp, np, &err), &err);
	const struct dt_variable *vars = dt_model_variable(m, 0);
	dt_optimizer_apply_vars(&opt, vars, dt_model_num_variables(m), before_params, pushed, 1, 0.1f, 1);
	for (int i = 0; i < dt_model_num_variables(m); i++) {
		const struct dt_variable *v = dt_model_variable(m, i);
		const float *now = dt_model_params(m) + v->offset, *ps = before_params + v->offset;
		for (size_t k = 0; k < v->count; k++) {
			if (v->kind == DT_VAR_MOVING_AVERAGE) /* the step's own update, to a float's rounding */
				DT_CHECK_NEAR(ps[k], now[k], 1e-6 * (1.0 + fabs((double)now[k])));
			else if (v->kind == DT_VAR_FROZEN)
				DT_CHECK(ps[k] == now[k] && pushed[v->offset + k] == 0.0f);
			else /* sgd: p - 0.1 g */
				DT_CHECK_NEAR(ps[k], now[k] - 0.1f * dt_model_grads(m)[v->offset + k], 1e-6);
		}
	}
	/* and the statistics did move: a batch far from 0 and 1 */
	DT_CHECK(fabsf(var_of(m, "bn/moving_mean")[0] - before[0]) > 0.01f);
	dt_optimizer_release(&opt);
	free(before_params);
	free(pushed);
	dt_model_free(m);
	dt_graph_free(g);
}
