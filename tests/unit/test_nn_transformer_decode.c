/*
 * The fast decoder (nn/transformer_decode.h) against the graph it reads:
 * at every step, each beam's logits equal the graph's last-position logits
 * over that beam's whole prefix, through beam reorders, for small random
 * transformers with and without inputs, with shared and with unshared
 * tables; and what it refuses.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/graph.h"
#include "nn/model.h"
#include "nn/transformer.h"
#include "nn/transformer_decode.h"
#include "train/input_text.h"

#define P 9      /* positions */
#define K 3      /* beams */

static struct dt_model *random_transformer(int has_inputs, int shared, uint64_t seed)
{
	struct dt_err err = DT_ERR_INIT;
	const struct dt_transformer_config c = {
		.has_inputs = has_inputs, .input_vocab = shared ? 11 : 7, .target_vocab = 11, .max_length = P,
		.hidden_size = 12, .filter_size = 10, .num_heads = 3, .num_encoder_layers = 2,
		.num_decoder_layers = 2, .layer_prepostprocess_dropout = 0.1f, .attention_dropout = 0.1f,
		.relu_dropout = 0.1f, .label_smoothing = 0.1f, .shared_embedding_and_softmax_weights = shared,
		.shared_embedding = shared,
	};
	struct dt_graph *g;
	struct dt_model *m;
	DT_CHECK_OK(dt_transformer_graph(&c, &g, &err), &err);
	DT_CHECK_OK(dt_model_from_graph(g, "transformer", K * P, &m, &err), &err);
	dt_graph_free(g);
	dt_model_init_params(m, seed);
	/* the norms' gamma 1 and beta 0 and the zero biases would hide a
	 * parameter read from the wrong place: every variable random */
	struct dt_rng rng;
	dt_rng_seed(&rng, seed ^ 0x5eed);
	float *p = dt_model_params(m);
	for (int i = 0; i < dt_model_num_variables(m); i++) {
		const struct dt_variable *v = dt_model_variable(m, i);
		if (!dt_model_variable_is_kernel(m, i))
			for (size_t j = 0; j < v->count; j++)
				p[v->offset + j] += 0.3f * (dt_rng_uniform(&rng) - 0.5f);
	}
	return m;
}

/* Decodes P - 1 positions with K beams choosing random tokens and random
 * parents, and checks each step's logits against the graph's. */
static void check_against_graph(int has_inputs, int shared, uint64_t seed)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_model *m = random_transformer(has_inputs, shared, seed);
	struct dt_transformer_decoder *d;
	DT_CHECK_OK(dt_transformer_decoder_new(m, K, P, &d, &err), &err);
	const int V = dt_transformer_decoder_vocab(d), Vin = shared ? 11 : 7;
	DT_CHECK_INT_EQ(V, 11);
	struct dt_rng rng;
	dt_rng_seed(&rng, seed + 7);
	const int n_in = has_inputs ? 5 : 0;
	int32_t in[P] = { 0 };
	for (int i = 0; i < n_in; i++)
		in[i] = 2 + (int32_t)dt_rng_below(&rng, (uint32_t)(Vin - 2));
	if (n_in)
		in[n_in - 1] = 1; /* EOS */
	DT_CHECK_OK(dt_transformer_decoder_start(d, has_inputs ? in : NULL, n_in, &err), &err);
	int32_t seqs[K][P] = { { 0 } }, next[K][P], ids[K];
	int32_t bin[K * P], btg[K * P];
	int parent[K], alive = 1;
	double worst = 0;
	for (int t = 0; t < P - 1; t++) {
		if (t > 0) { /* the next beams: random parents (repeats allowed), as a search picks them */
			const int now = 1 + (int)dt_rng_below(&rng, K);
			for (int k = 0; k < now; k++) {
				parent[k] = (int)dt_rng_below(&rng, (uint32_t)alive);
				memcpy(next[k], seqs[parent[k]], sizeof(next[k]));
				next[k][t - 1] = 2 + (int32_t)dt_rng_below(&rng, (uint32_t)(V - 2));
			}
			memcpy(seqs, next, sizeof(seqs));
			alive = now;
			dt_transformer_decoder_reorder(d, parent, alive);
		}
		for (int k = 0; k < alive; k++)
			ids[k] = t ? seqs[k][t - 1] : 0;
		const float *fast;
		DT_CHECK_OK(dt_transformer_decoder_step(d, ids, alive, &fast, &err), &err);
		/* the graph over each beam's prefix, padded to L; a placeholder at t */
		const int L = n_in > t + 1 ? n_in : t + 1;
		memset(bin, 0, sizeof(bin));
		memset(btg, 0, sizeof(btg));
		for (int k = 0; k < alive; k++) {
			memcpy(bin + k * L, in, (size_t)n_in * sizeof(int32_t));
			memcpy(btg + k * L, seqs[k], (size_t)t * sizeof(int32_t));
			btg[k * L + t] = 1;
		}
		struct dt_model_batch mb;
		dt_text_batch_set(&mb, has_inputs, alive, L, bin, btg);
		struct dt_step_result r;
		DT_CHECK_OK(dt_model_evaluate(m, &mb, &r, &err), &err);
		const float *full = dt_model_logits(m);
		for (int k = 0; k < alive; k++) {
			const float *want = full + ((size_t)k * L + t) * V, *got = fast + (size_t)k * V;
			float scale = 1.0f;
			for (int v = 0; v < V; v++)
				scale = fabsf(want[v]) > scale ? fabsf(want[v]) : scale;
			for (int v = 0; v < V; v++) {
				const double e = fabs((double)got[v] - (double)want[v]) / (double)scale;
				worst = e > worst ? e : worst;
				if (e > 1e-4)
					DT_CHECK_NEAR(got[v], want[v], 1e-4 * (double)scale);
			}
		}
	}
	fprintf(stderr, "inputs %d, shared %d: worst relative difference %.2g over %d steps\n", has_inputs, shared, worst,
		P - 1);
	DT_CHECK(worst <= 1e-4);
	dt_transformer_decoder_free(d);
	dt_model_free(m);
}

DT_TEST(nn_transformer_decode, logits_equal_the_graphs_with_inputs_shared_tables)
{
	check_against_graph(1, 1, 11);
}

DT_TEST(nn_transformer_decode, logits_equal_the_graphs_with_inputs_own_tables)
{
	check_against_graph(1, 0, 12);
}

DT_TEST(nn_transformer_decode, logits_equal_the_graphs_without_inputs_shared_tables)
{
	check_against_graph(0, 1, 13);
}

DT_TEST(nn_transformer_decode, logits_equal_the_graphs_without_inputs_own_tables)
{
	check_against_graph(0, 0, 14);
}

DT_TEST(nn_transformer_decode, refuses_other_models_and_bad_ids)
{
	struct dt_err err = DT_ERR_INIT;
	/* a dense graph is not a transformer: the missing variable is named */
	struct dt_graph *g = dt_graph_new();
	const int shape[1] = { 4 };
	DT_CHECK_OK(dt_graph_input(g, "x", DT_FLOAT32, 1, shape, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "out", NULL, 3, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_loss(g, NULL, DT_LOSS_SOFTMAX_XENT, &err), &err);
	struct dt_model *m;
	DT_CHECK_OK(dt_model_from_graph(g, "mlp", 4, &m, &err), &err);
	dt_graph_free(g);
	struct dt_transformer_decoder *d = (void *)1;
	DT_CHECK_INT_EQ(dt_transformer_decoder_new(m, 2, 8, &d, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "dec.norm/gamma");
	DT_CHECK(d == NULL);
	dt_model_free(m);

	m = random_transformer(1, 0, 3);
	err = (struct dt_err)DT_ERR_INIT;
	DT_CHECK_OK(dt_transformer_decoder_new(m, 2, P, &d, &err), &err);
	const int32_t bad_in[2] = { 3, 7 }, good_in[2] = { 3, 1 }; /* 7 inputs symbols: 0 .. 6 */
	DT_CHECK_INT_EQ(dt_transformer_decoder_start(d, bad_in, 2, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "token id 7 out of range");
	DT_CHECK_INT_EQ(dt_transformer_decoder_start(d, good_in, 0, &err), DT_USAGE);
	DT_CHECK_OK(dt_transformer_decoder_start(d, good_in, 2, &err), &err);
	const int32_t ids[3] = { 0, 11, 0 };
	const float *z;
	DT_CHECK_INT_EQ(dt_transformer_decoder_step(d, ids, 3, &z, &err), DT_USAGE); /* 3 beams of 2 */
	DT_CHECK_INT_EQ(dt_transformer_decoder_step(d, ids, 2, &z, &err), DT_USAGE); /* id 11 of 11 */
	DT_CHECK_CONTAINS(err.msg, "token id 11");
	for (int t = 0; t < P; t++)
		DT_CHECK_OK(dt_transformer_decoder_step(d, ids, 1, &z, &err), &err);
	DT_CHECK_INT_EQ(dt_transformer_decoder_step(d, ids, 1, &z, &err), DT_USAGE); /* past the positions */
	DT_CHECK_CONTAINS(err.msg, "past the decoder's 9 positions");
	dt_transformer_decoder_free(d);
	dt_model_free(m);
}
