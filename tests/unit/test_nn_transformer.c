/*
 * t2t's transformer as a sequence graph (nn/transformer.h, nn/graph.h's
 * sequence nodes) through the general entry points: every variable's
 * gradient against finite differences of the loss (encoder-decoder with
 * padding, and decoder only), the shared tables' names, t2t's metrics in
 * the step result, bad sequence batches, and a tiny model that learns to
 * reverse a fixed batch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/graph.h"
#include "nn/model.h"
#include "nn/transformer.h"

#define B 3
#define L 5
#define V 6

struct tctx {
	struct dt_model *m;
	struct dt_model_batch batch;
	int32_t inputs[B * L], targets[B * L];
};

static void tiny_config(struct dt_transformer_config *c, int has_inputs, float dropout)
{
	memset(c, 0, sizeof(*c));
	*c = (struct dt_transformer_config){ .has_inputs = has_inputs, .input_vocab = V, .target_vocab = V,
					     .max_length = 8, .hidden_size = 8, .filter_size = 6, .num_heads = 2,
					     .num_encoder_layers = 1, .num_decoder_layers = 1,
					     .layer_prepostprocess_dropout = dropout, .attention_dropout = dropout,
					     .relu_dropout = dropout, .label_smoothing = 0.1f,
					     .shared_embedding_and_softmax_weights = 1 };
}

/* post_norm: t2t's "none"/"dan" layout (transformer_base_v1's) */
static void tctx_build_layout(struct tctx *t, int has_inputs, int post_norm, uint64_t seed)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_transformer_config c;
	tiny_config(&c, has_inputs, 0.0f);
	c.post_norm = post_norm;
	struct dt_graph *g;
	DT_CHECK_OK(dt_transformer_graph(&c, &g, &err), &err);
	DT_CHECK_OK(dt_model_from_graph(g, "transformer", B * 8, &t->m, &err), &err);
	dt_graph_free(g);
	dt_model_init_params(t->m, seed);
	struct dt_rng rng;
	dt_rng_seed(&rng, seed + 1);
	for (int b = 0; b < B; b++) /* sequence b: L - b tokens then padding; the targets reverse the inputs */
		for (int i = 0; i < L; i++) {
			const int n = L - b;
			t->inputs[b * L + i] = i < n ? 2 + (int)dt_rng_below(&rng, V - 2) : 0;
		}
	for (int b = 0; b < B; b++)
		for (int i = 0; i < L; i++) {
			const int n = L - b;
			t->targets[b * L + i] = i < n ? t->inputs[b * L + n - 1 - i] : 0;
		}
	memset(&t->batch, 0, sizeof(t->batch));
	t->batch.size = B;
	t->batch.length = L;
	t->batch.num_inputs = has_inputs ? 2 : 1;
	t->batch.inputs[0] = (struct dt_data){ DT_INT32, has_inputs ? t->inputs : t->targets };
	t->batch.inputs[1] = (struct dt_data){ DT_INT32, t->targets };
	t->batch.targets = (struct dt_data){ DT_INT32, t->targets };
}

static void tctx_build(struct tctx *t, int has_inputs, uint64_t seed)
{
	tctx_build_layout(t, has_inputs, 0, seed);
}

static double tloss(void *p)
{
	struct tctx *t = p;
	struct dt_step_result r;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_model_evaluate(t->m, &t->batch, &r, &err), &err);
	return r.loss;
}

static void check_grads_layout(int has_inputs, int post_norm)
{
	struct tctx t;
	tctx_build_layout(&t, has_inputs, post_norm, 21);
	struct dt_err err = DT_ERR_INIT;
	struct dt_step_result r;
	DT_CHECK_OK(dt_model_step(t.m, &t.batch, NULL, NULL, NULL, &r, &err), &err);
	DT_CHECK_INT_EQ(r.counted, 5 + 4 + 3);
	DT_CHECK_INT_EQ(r.seqs, B);
	DT_CHECK(r.nll_sum > 0);
	const size_t n = dt_model_num_params(t.m);
	float *g = dt_xcalloc(n, sizeof(float));
	memcpy(g, dt_model_grads(t.m), n * sizeof(float));
	float *p = dt_model_params(t.m);
	for (int v = 0; v < dt_model_num_variables(t.m); v++) {
		const struct dt_variable *var = dt_model_variable(t.m, v);
		check_array(var->name, p + var->offset, var->count, g + var->offset, tloss, &t, 5e-2, 2e-3, 1);
	}
	free(g);
	dt_model_free(t.m);
}

static void check_grads(int has_inputs)
{
	check_grads_layout(has_inputs, 0);
}

DT_TEST_TIMEOUT(nn_transformer, encoder_decoder_gradients_match_differences, 120)
{
	check_grads(1);
}

/* transformer_base_v1's post-norm layout: a norm after each residual (named
 * as the pre-norm one), none at the stacks' ends; its gradients checked too */
DT_TEST_TIMEOUT(nn_transformer, post_norm_layout_names_and_gradients, 120)
{
	struct tctx t;
	tctx_build_layout(&t, 1, 1, 21);
	int norms = 0, ends = 0;
	for (int v = 0; v < dt_model_num_variables(t.m); v++) {
		const char *name = dt_model_variable(t.m, v)->name;
		norms += strstr(name, ".norm/gamma") != NULL;
		ends += strcmp(name, "enc.norm/gamma") == 0 || strcmp(name, "dec.norm/gamma") == 0;
	}
	DT_CHECK_INT_EQ(norms, 2 + 3); /* encoder: self, ffn; decoder: self, encdec, ffn */
	DT_CHECK_INT_EQ(ends, 0);
	dt_model_free(t.m);
	check_grads_layout(1, 1);
}

DT_TEST_TIMEOUT(nn_transformer, decoder_only_gradients_match_differences, 120)
{
	check_grads(0);
}

DT_TEST(nn_transformer, shared_tables_and_variable_names)
{
	struct tctx t;
	tctx_build(&t, 1, 3);
	int emb = 0, softmax = 0, attn = 0;
	for (int v = 0; v < dt_model_num_variables(t.m); v++) {
		const char *name = dt_model_variable(t.m, v)->name;
		emb += strstr(name, "emb/weights") != NULL;
		softmax += strncmp(name, "softmax", 7) == 0;
		attn += strstr(name, "attn/output_transform/kernel") != NULL;
	}
	DT_CHECK_INT_EQ(emb, 2);      /* inputs' and targets' tables */
	DT_CHECK_INT_EQ(softmax, 0);  /* the targets' table is the softmax's */
	DT_CHECK_INT_EQ(attn, 3);     /* encoder self, decoder self, encoder-decoder */
	DT_CHECK_INT_EQ(dt_model_num_inputs(t.m), 2);
	DT_CHECK_STR_EQ(dt_model_input(t.m, 0)->name, "inputs");
	DT_CHECK_STR_EQ(dt_model_input(t.m, 1)->name, "targets");
	dt_model_free(t.m);
}

DT_TEST(nn_transformer, bad_sequence_batches_are_refused)
{
	struct tctx t;
	tctx_build(&t, 1, 3);
	struct dt_err err = DT_ERR_INIT;
	struct dt_step_result r;
	struct dt_model_batch b = t.batch;
	b.length = 9;
	DT_CHECK(dt_model_step(t.m, &b, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "must be 1 to 8 positions and at most 24 tokens");
	t.inputs[7] = V;
	DT_CHECK(dt_model_step(t.m, &t.batch, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "sequence 1, position 2: token id 6 out of range [0, 6) for 'enc.emb'");
	t.inputs[7] = 2;
	t.targets[1] = -1;
	DT_CHECK(dt_model_evaluate(t.m, &t.batch, &r, &err) == DT_USAGE);
	dt_model_free(t.m);
	struct dt_graph *g = dt_graph_new();
	const int shape[1] = { 4 };
	DT_CHECK_OK(dt_graph_sequence_input(g, "ids", 8, &err), &err);
	DT_CHECK(dt_graph_input(g, "x", DT_FLOAT32, 1, shape, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "a sequence graph takes sequence inputs only");
	DT_CHECK_OK(dt_graph_symbol(g, "emb", "ids", 5, 6, NULL, NULL, &err), &err);
	DT_CHECK(dt_graph_attention(g, "a", "emb", NULL, "ids", 4, 0, 0.0f, &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "4 heads must divide the width 6");
	DT_CHECK(dt_graph_logits(g, "out", "emb", 0, "ids", &err) == DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "can share the table of a symbol node only");
	dt_graph_free(g);
}

DT_TEST_TIMEOUT(nn_transformer, tiny_model_learns_to_reverse_a_batch, 60)
{
	struct tctx t;
	tctx_build(&t, 1, 5);
	struct dt_err err = DT_ERR_INIT;
	struct dt_step_result r;
	float first = 0;
	const size_t n = dt_model_num_params(t.m);
	float *p = dt_model_params(t.m), *g = dt_model_grads(t.m);
	for (int step = 0; step < 300; step++) {
		DT_CHECK_OK(dt_model_step(t.m, &t.batch, NULL, NULL, NULL, &r, &err), &err);
		if (step == 0)
			first = r.loss;
		for (size_t i = 0; i < n; i++)
			p[i] -= 0.3f * g[i];
	}
	DT_CHECK_OK(dt_model_evaluate(t.m, &t.batch, &r, &err), &err);
	DT_CHECK(r.loss < 0.25f * first);
	DT_CHECK_INT_EQ(r.correct, r.counted);
	DT_CHECK_INT_EQ(r.seqs_correct, B);
	dt_model_free(t.m);
}
