/*
 * Layer graphs (nn/graph.h) and the general entry points: graphs that do
 * not connect (each message), a DAG with two inputs and every layer kind
 * gradient-checked through dt_model_step for each loss, the gradient-ready
 * contract on a DAG, bad batches, labels and token ids out of range, and
 * the built-in models giving the same parameters and losses, bit for bit,
 * as before they were built through the graph.
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
#include "nn/hparams.h"
#include "nn/layers.h"
#include "models/builtin.h"
#include "nn/model.h"
#include "tensor/blas.h"

#define CHECK_FAILS(expr, errp, needle)                      \
	do {                                                 \
		DT_CHECK((expr) == DT_CONFIG);               \
		DT_CHECK_CONTAINS((errp)->msg, needle);      \
	} while (0)

static struct dt_graph *image_graph(void)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = dt_graph_new();
	const int shape[3] = { 8, 8, 1 };
	DT_CHECK_OK(dt_graph_input(g, "image", DT_FLOAT32, 3, shape, &err), &err);
	return g;
}

DT_TEST(nn_graph, shapes_that_do_not_connect_name_the_node_and_the_shapes)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = image_graph();
	DT_CHECK_OK(dt_graph_flatten(g, NULL, NULL, &err), &err);
	CHECK_FAILS(dt_graph_conv2d(g, NULL, NULL, 4, 3, 3, 1, DT_PADDING_SAME, DT_ACT_RELU, NULL, &err), &err,
		    "node 'conv_1': conv2d needs an input of rank 3, but 'flatten_1' gives (64)");
	CHECK_FAILS(dt_graph_conv2d(g, "c", "image", 4, 9, 9, 1, DT_PADDING_VALID, DT_ACT_RELU, NULL, &err), &err,
		    "node 'c' on 'image' (8, 8, 1): layer 'c': a 9x9 window with stride 1 and padding 0 does not fit input (8, 8, 1)");
	CHECK_FAILS(dt_graph_dense(g, NULL, "nope", 3, DT_ACT_LINEAR, NULL, &err), &err,
		    "node 'dense_1': no node named 'nope' in the graph");
	DT_CHECK_OK(dt_graph_dense(g, "a", "flatten_1", 6, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "b", "flatten_1", 5, DT_ACT_LINEAR, NULL, &err), &err);
	const char *ab[2] = { "a", "b" };
	CHECK_FAILS(dt_graph_add(g, NULL, 2, ab, &err), &err, "node 'add_1': cannot add 'a' (6) and 'b' (5): the shapes differ");
	const int r23[2] = { 2, 3 }, r5[1] = { 5 }, r3m[2] = { 3, -1 };
	DT_CHECK_OK(dt_graph_reshape(g, "a2", "a", 2, r23, &err), &err);
	const char *a2b[2] = { "a2", "b" };
	CHECK_FAILS(dt_graph_concat(g, NULL, 2, a2b, &err), &err,
		    "node 'concat_1': cannot concatenate 'a2' (2, 3) and 'b' (5) along the last axis");
	CHECK_FAILS(dt_graph_reshape(g, NULL, "a", 1, r5, &err), &err, "node 'reshape_1': cannot reshape 'a' (6) (6 values) to (5)");
	CHECK_FAILS(dt_graph_reshape(g, NULL, "b", 2, r3m, &err), &err, "cannot reshape 'b' (5) (5 values) to (3, -1)");
	CHECK_FAILS(dt_graph_dense(g, "a", NULL, 3, DT_ACT_LINEAR, NULL, &err), &err, "node name 'a' is already used");
	CHECK_FAILS(dt_graph_dense(g, "x//y", NULL, 3, DT_ACT_LINEAR, NULL, &err), &err,
		    "node name 'x//y': a '/' may only separate scopes");
	CHECK_FAILS(dt_graph_dense(g, "x/", NULL, 3, DT_ACT_LINEAR, NULL, &err), &err, "node name 'x/': a '/' may only");
	CHECK_FAILS(dt_graph_dense(g, "x\ty", NULL, 3, DT_ACT_LINEAR, NULL, &err), &err,
		    "is not UTF-8 text without control characters");
	CHECK_FAILS(dt_graph_dense(g, "x\xc3(", NULL, 3, DT_ACT_LINEAR, NULL, &err), &err,
		    "is not UTF-8 text without control characters");
	char longest[DT_LAYER_NAME_MAX + 1];
	memset(longest, 'n', sizeof(longest) - 1);
	longest[DT_LAYER_NAME_MAX] = '\0';
	CHECK_FAILS(dt_graph_dense(g, longest, NULL, 3, DT_ACT_LINEAR, NULL, &err), &err,
		    "has 256 bytes, more than the 255 allowed");
	CHECK_FAILS(dt_graph_dense(g, NULL, NULL, 0, DT_ACT_LINEAR, NULL, &err), &err, "node 'dense_1': dense needs 1 to");
	CHECK_FAILS(dt_graph_dense(g, NULL, NULL, 3, DT_ACT_LINEAR, "uniformish", &err), &err,
		    "node 'dense_1': unknown initializer 'uniformish'; valid: glorot_uniform, he_normal");
	CHECK_FAILS(dt_graph_embedding(g, NULL, "a", 10, 4, NULL, &err), &err,
		    "node 'embedding_1': embedding needs int32 token ids, but 'a' (6) is float32");
	const int t4[1] = { 4 };
	DT_CHECK_OK(dt_graph_input(g, "ids", DT_INT32, 1, t4, &err), &err);
	CHECK_FAILS(dt_graph_dense(g, NULL, "ids", 3, DT_ACT_LINEAR, NULL, &err), &err,
		    "node 'dense_1': needs a float32 input, but 'ids' is int32");
	CHECK_FAILS(dt_graph_input(g, "ids2", DT_INT32, 4, r23, &err), &err, "input 'ids2': per-example shape must have rank 1 to 3");
	CHECK_FAILS(dt_graph_pool(g, NULL, "image", DT_POOL_AVG, 9, 9, 1, 1, DT_PADDING_VALID, &err), &err,
		    "a 9x9 pooling window with strides (1, 1) and padding 'valid' does not fit input (8, 8, 1)");
	CHECK_FAILS(dt_graph_loss(g, "ids", DT_LOSS_MSE, &err), &err, "node 'loss': needs a float32 input, but 'ids' is int32");
	struct dt_model *m = (struct dt_model *)1;
	CHECK_FAILS(dt_model_from_graph(g, "broken", 4, &m, &err), &err, "model 'broken': the graph has no loss");
	DT_CHECK(m == NULL);
	/* the failed calls added nothing: the graph still builds */
	DT_CHECK_INT_EQ(dt_graph_num_nodes(g), 6);
	DT_CHECK_OK(dt_graph_loss(g, "b", DT_LOSS_SOFTMAX_XENT, &err), &err);
	DT_CHECK_OK(dt_model_from_graph(g, "fixed", 4, &m, &err), &err);
	DT_CHECK_INT_EQ(dt_model_num_inputs(m), 2);
	DT_CHECK_STR_EQ(dt_model_input(m, 1)->name, "ids");
	DT_CHECK(dt_model_target(m)->dtype == DT_INT32 && dt_model_target(m)->count == 1);
	dt_model_free(m);
	dt_graph_free(g);
	struct dt_graph *empty = dt_graph_new();
	CHECK_FAILS(dt_graph_dense(empty, NULL, NULL, 3, DT_ACT_LINEAR, NULL, &err), &err,
		    "node 'dense_1': no input given and the graph is empty");
	dt_graph_free(empty);
	DT_CHECK(dt_graph_dense(NULL, NULL, NULL, 3, DT_ACT_LINEAR, NULL, &err) == DT_USAGE);
}

/* ---- a DAG with every kind, gradient-checked ---------------------------------- */

enum { B = 3, T = 4, V = 7 };

struct dag {
	struct dt_model *m;
	float x[B * 6 * 6 * 2];
	int32_t ids[B * T];
	int32_t labels[B];
	float targets[B * 5];
	struct dt_model_batch batch;
};

/*
 * image (6, 6, 2) -> conv same 3x3 (4) -> avg pool 2x2 same -> flatten (36) -+
 * ids (4) -> embedding (4, 5) -> layer_norm -> flatten (20) -----------------+-> concat (56)
 *   -> dense 8 tanh -> [dense 8 gelu, dropout 0] -> add (residual) -> dense 5 -> loss
 * plus max pool 3x3 stride 2 on the image into a sigmoid activation, concatenated too.
 */
static void dag_build(struct dag *d, enum dt_loss loss)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = dt_graph_new();
	const int img[3] = { 6, 6, 2 }, ids[1] = { T };
	DT_CHECK_OK(dt_graph_input(g, "image", DT_FLOAT32, 3, img, &err), &err);
	DT_CHECK_OK(dt_graph_input(g, "ids", DT_INT32, 1, ids, &err), &err);
	DT_CHECK_OK(dt_graph_conv2d(g, NULL, "image", 4, 3, 3, 1, DT_PADDING_SAME, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_pool(g, NULL, NULL, DT_POOL_AVG, 2, 2, 2, 2, DT_PADDING_SAME, &err), &err);
	DT_CHECK_OK(dt_graph_flatten(g, "img_flat", NULL, &err), &err);
	DT_CHECK_OK(dt_graph_pool(g, NULL, "image", DT_POOL_MAX, 3, 3, 2, 2, DT_PADDING_VALID, &err), &err);
	DT_CHECK_OK(dt_graph_activation(g, NULL, NULL, DT_ACT_SIGMOID, &err), &err);
	DT_CHECK_OK(dt_graph_flatten(g, "max_flat", NULL, &err), &err);
	DT_CHECK_OK(dt_graph_embedding(g, NULL, "ids", V, 5, "random_normal(0.5)", &err), &err);
	DT_CHECK_OK(dt_graph_layer_norm(g, NULL, NULL, 1e-3f, &err), &err);
	DT_CHECK_OK(dt_graph_flatten(g, "tok_flat", NULL, &err), &err);
	const char *cat[3] = { "img_flat", "tok_flat", "max_flat" };
	DT_CHECK_OK(dt_graph_concat(g, NULL, 3, cat, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "h", NULL, 8, DT_ACT_TANH, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, NULL, NULL, 8, DT_ACT_GELU, "he_normal", &err), &err);
	DT_CHECK_OK(dt_graph_dropout(g, NULL, NULL, 0.0f, &err), &err);
	const char *res[2] = { "h", dt_graph_last(g) };
	DT_CHECK_OK(dt_graph_add(g, NULL, 2, res, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, "out", NULL, 5, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_loss(g, NULL, loss, &err), &err);
	DT_CHECK_OK(dt_model_from_graph(g, "dag", B, &d->m, &err), &err);
	dt_graph_free(g);
	dt_model_init_params(d->m, 3);
	/* non-zero biases and betas */
	float *p = dt_model_params(d->m);
	for (int i = 0; i < dt_model_num_variables(d->m); i++) {
		const struct dt_variable *v = dt_model_variable(d->m, i);
		if (strstr(v->name, "/bias") || strstr(v->name, "/beta"))
			for (size_t j = 0; j < v->count; j++)
				p[v->offset + j] = 0.1f * ((float)(j % 5) - 2.0f);
	}
	float *x = random_floats(sizeof(d->x) / sizeof(float), 7, 1.0f);
	memcpy(d->x, x, sizeof(d->x));
	free(x);
	for (int i = 0; i < B * T; i++)
		d->ids[i] = (i * 5 + 1) % V;
	d->ids[1] = d->ids[0]; /* a row used twice: its gradient sums */
	for (int i = 0; i < B; i++)
		d->labels[i] = (i * 2) % 5;
	for (int i = 0; i < B * 5; i++)
		d->targets[i] = loss == DT_LOSS_SIGMOID_XENT ? (float)(i % 2) : 0.3f * (float)(i % 4) - 0.4f;
	d->batch = (struct dt_model_batch){ .size = B, .num_inputs = 2 };
	d->batch.inputs[0] = (struct dt_data){ DT_FLOAT32, d->x };
	d->batch.inputs[1] = (struct dt_data){ DT_INT32, d->ids };
	d->batch.targets = loss == DT_LOSS_SOFTMAX_XENT ? (struct dt_data){ DT_INT32, d->labels }
							: (struct dt_data){ DT_FLOAT32, d->targets };
}

static double dag_loss(void *p)
{
	struct dag *d = p;
	struct dt_step_result r;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_model_evaluate(d->m, &d->batch, &r, &err), &err);
	return r.loss;
}

static void check_dag(enum dt_loss loss)
{
	struct dag d;
	dag_build(&d, loss);
	struct dt_err err = DT_ERR_INIT;
	struct dt_step_result r;
	struct dt_rng rng;
	dt_rng_seed(&rng, 1);
	DT_CHECK_OK(dt_model_step(d.m, &d.batch, &rng, NULL, NULL, &r, &err), &err);
	DT_CHECK_NEAR(r.loss, dag_loss(&d), 1e-6);
	DT_CHECK_INT_EQ(r.counted, loss == DT_LOSS_SOFTMAX_XENT ? B : loss == DT_LOSS_SIGMOID_XENT ? B * 5 : 0);
	const size_t np = dt_model_num_params(d.m);
	float *g = dt_xmalloc(np * sizeof(float));
	memcpy(g, dt_model_grads(d.m), np * sizeof(float));
	float *p = dt_model_params(d.m);
	for (int i = 0; i < dt_model_num_variables(d.m); i++) {
		const struct dt_variable *v = dt_model_variable(d.m, i);
		char what[DT_VAR_NAME_MAX + 32];
		snprintf(what, sizeof(what), "loss %d %s", (int)loss, v->name);
		double agg = check_array(what, p + v->offset, v->count, g + v->offset, dag_loss, &d, 0.05, 1e-3, 1);
		if (!(agg <= 2e-2))
			dt_test_fail(__FILE__, __LINE__, "%s: aggregate relative error %.3g", what, agg);
	}
	free(g);
	dt_model_free(d.m);
}

DT_TEST_TIMEOUT(nn_graph, dag_gradients_softmax_cross_entropy, 120)
{
	check_dag(DT_LOSS_SOFTMAX_XENT);
}

DT_TEST_TIMEOUT(nn_graph, dag_gradients_sigmoid_cross_entropy, 120)
{
	check_dag(DT_LOSS_SIGMOID_XENT);
}

DT_TEST_TIMEOUT(nn_graph, dag_gradients_mean_squared_error, 120)
{
	check_dag(DT_LOSS_MSE);
}

DT_TEST(nn_graph, variables_follow_node_order_with_their_names)
{
	struct dag d;
	dag_build(&d, DT_LOSS_MSE);
	static const char *const names[] = { "conv_1/kernel", "conv_1/bias", "embedding_1/embeddings", "layer_norm_1/gamma",
					     "layer_norm_1/beta", "h/kernel", "h/bias", "dense_1/kernel", "dense_1/bias",
					     "out/kernel", "out/bias" };
	DT_CHECK_INT_EQ(dt_model_num_variables(d.m), 11);
	size_t off = 0;
	for (int i = 0; i < 11; i++) {
		const struct dt_variable *v = dt_model_variable(d.m, i);
		DT_CHECK_STR_EQ(v->name, names[i]);
		DT_CHECK_INT_EQ(v->offset, off);
		off += v->count;
	}
	DT_CHECK_INT_EQ(off, dt_model_num_params(d.m));
	const float *p = dt_model_params(d.m) + dt_model_variable(d.m, 3)->offset;
	DT_CHECK(p[0] == 1.0f && p[4] == 1.0f); /* gamma starts at one */
	DT_CHECK(!dt_model_variable_is_kernel(d.m, 3) && dt_model_variable_is_kernel(d.m, 2));
	dt_model_free(d.m);
}

/* ---- the gradient-ready contract on a DAG ---------------------------------------- */

struct seen {
	const float *live, *reference;
	size_t offset[64], count[64];
	int calls, mismatched;
};

static void note(void *arg, size_t offset, size_t count)
{
	struct seen *s = arg;
	DT_CHECK(s->calls < 64);
	s->offset[s->calls] = offset;
	s->count[s->calls] = count;
	if (s->mismatched < 0 && memcmp(s->live + offset, s->reference + offset, count * sizeof(float)) != 0)
		s->mismatched = s->calls;
	s->calls++;
}

DT_TEST(nn_graph, dag_reports_each_range_once_backwards_when_final)
{
	struct dag a, b;
	dag_build(&a, DT_LOSS_SOFTMAX_XENT);
	dag_build(&b, DT_LOSS_SOFTMAX_XENT);
	struct dt_err err = DT_ERR_INIT;
	struct dt_step_result r;
	DT_CHECK_OK(dt_model_step(a.m, &a.batch, NULL, NULL, NULL, &r, &err), &err);
	const size_t np = dt_model_num_params(b.m);
	float *stale = dt_model_grads(b.m);
	for (size_t i = 0; i < np; i++)
		stale[i] = 1e9f;
	struct seen s = { .live = dt_model_grads(b.m), .reference = dt_model_grads(a.m), .mismatched = -1 };
	DT_CHECK_OK(dt_model_step(b.m, &b.batch, NULL, note, &s, &r, &err), &err);
	DT_CHECK_INT_EQ(s.mismatched, -1);
	size_t end = np;
	for (int i = 0; i < s.calls; i++) {
		DT_CHECK(s.count[i] > 0);
		DT_CHECK_INT_EQ(s.offset[i] + s.count[i], end);
		end = s.offset[i];
	}
	DT_CHECK_INT_EQ(end, 0);
	DT_CHECK_INT_EQ(s.calls, 6); /* out, dense_1, h, layer_norm_1, embedding_1, conv_1 */
	dt_model_free(a.m);
	dt_model_free(b.m);
}

/* ---- bad batches, labels and ids ------------------------------------------------ */

DT_TEST(nn_graph, bad_batches_labels_and_ids_get_a_status_and_a_message)
{
	struct dag d;
	dag_build(&d, DT_LOSS_SOFTMAX_XENT);
	struct dt_err err = DT_ERR_INIT;
	struct dt_step_result r;
	DT_CHECK(dt_model_step(d.m, NULL, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "model 'dag': no batch (NULL)");
	DT_CHECK(dt_model_evaluate(NULL, &d.batch, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "no model (NULL)");
	struct dt_model_batch b = d.batch;
	b.size = B + 1;
	DT_CHECK(dt_model_step(d.m, &b, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "batch of 4 examples, must be 1 to 3 (max_batch)");
	b = d.batch;
	b.num_inputs = 1;
	DT_CHECK(dt_model_evaluate(d.m, &b, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "batch has 1 input tensors, the model takes 2");
	b = d.batch;
	b.inputs[1].dtype = DT_FLOAT32;
	DT_CHECK(dt_model_step(d.m, &b, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "input 'ids' must be int32, got float32");
	b = d.batch;
	b.targets.data = NULL;
	DT_CHECK(dt_model_step(d.m, &b, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "batch has no targets");
	d.labels[2] = 5;
	DT_CHECK(dt_model_step(d.m, &d.batch, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "model 'dag': example 2: label 5 out of range [0, 5)");
	d.labels[2] = -1;
	DT_CHECK(dt_model_evaluate(d.m, &d.batch, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "example 2: label -1 out of range");
	d.labels[2] = 0;
	d.ids[6] = V;
	DT_CHECK(dt_model_step(d.m, &d.batch, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "example 1, position 2: token id 7 out of range [0, 7) for embedding 'embedding_1'");
	d.ids[6] = 0;
	DT_CHECK_OK(dt_model_step(d.m, &d.batch, NULL, NULL, NULL, &r, &err), &err);
	dt_model_free(d.m);
}

DT_TEST(nn_graph, sequence_labels_any_class_count)
{
	/* (T, V) logits with (T) labels, 300 classes: labels past 255 work */
	struct dt_err err = DT_ERR_INIT;
	struct dt_graph *g = dt_graph_new();
	const int ids[1] = { 3 };
	DT_CHECK_OK(dt_graph_input(g, "ids", DT_INT32, 1, ids, &err), &err);
	DT_CHECK_OK(dt_graph_embedding(g, NULL, NULL, 10, 4, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_dense(g, NULL, NULL, 300, DT_ACT_LINEAR, NULL, &err), &err);
	DT_CHECK_OK(dt_graph_loss(g, NULL, DT_LOSS_SOFTMAX_XENT, &err), &err);
	struct dt_model *m;
	DT_CHECK_OK(dt_model_from_graph(g, "seq", 2, &m, &err), &err);
	dt_graph_free(g);
	DT_CHECK(dt_model_target(m)->ndim == 1 && dt_model_target(m)->shape[0] == 3);
	DT_CHECK_INT_EQ(dt_model_variable(m, 1)->shape[0], 4); /* dense over the last axis: kernel (4, 300) */
	dt_model_init_params(m, 1);
	int32_t x[6] = { 1, 2, 3, 4, 5, 6 }, y[6] = { 299, 0, 256, 7, 8, 9 };
	struct dt_model_batch b = { .size = 2, .num_inputs = 1 };
	b.inputs[0] = (struct dt_data){ DT_INT32, x };
	b.targets = (struct dt_data){ DT_INT32, y };
	struct dt_step_result r;
	DT_CHECK_OK(dt_model_step(m, &b, NULL, NULL, NULL, &r, &err), &err);
	DT_CHECK_INT_EQ(r.counted, 6);
	DT_CHECK_NEAR(r.loss, log(300.0), 0.05); /* small initial logits: about uniform */
	y[4] = 300;
	DT_CHECK(dt_model_step(m, &b, NULL, NULL, NULL, &r, &err) == DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "example 1, position 1: label 300 out of range [0, 300)");
	dt_model_free(m);
}

/* ---- the built-ins, as before ---------------------------------------------------- */

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* Computed with the models as they were before the graph builder (commit
 * bdaac0f): seed 7, 8 examples of 28x28x1 from stream 11, labels i*3 % 10,
 * dropout stream 5; FNV-1a of the initial parameters and of the gradients,
 * the bits of the training and evaluation losses. lenet's and cnn's
 * gradient hashes were taken again when their convolutions moved to the
 * kernels of tensor/kernels_direct.h (the direct first layer and the input
 * gradient through pooling: float sums in another order; the kernels are
 * checked against the im2col path and naive twins in test_tensor_direct.c);
 * their losses kept every bit. cnn's gradient hash was taken again when
 * dropout masks moved to base/rng.h's bulk lanes (another stream of the
 * same distribution: other elements dropped), with its training loss
 * (2.8305 -> 2.8365) and correct count (1 -> 0 of 8, at initialization);
 * its parameters and evaluation loss kept every bit.
 * The products go through OpenBLAS, whose kernel sets add in different
 * orders, so the bits after the first product are per kernel set: the one
 * tensor/blas.c loads (SkylakeX where the CPU has AVX-512, else Haswell;
 * dt_blas_info().core; Cooperlake's, for one, gives other bits again). The
 * Haswell rows are the ones above; the SkylakeX rows were taken on
 * 2026-11-25 from this test's code, unchanged since the Haswell rows (on an
 * Intel Xeon; the same binary with OPENBLAS_CORETYPE=Haswell reproduces
 * every Haswell row there). The initial parameters do not go through
 * OpenBLAS: one hash for both. */
static const struct {
	const char *core; /* OpenBLAS's kernel set */
	const char *name;
	uint64_t params, grads;
	uint32_t loss, eval;
	int correct;
} before[] = {
	{ "Haswell", "mlp", 0xedef942c78925caeull, 0x3225a3605a06b668ull, 0x401dde1cu, 0x401dde1cu, 1 },
	{ "Haswell", "lenet", 0x83d4482bfa7a0d3full, 0x302d70df80b28737ull, 0x401887c4u, 0x401887c4u, 1 },
	{ "Haswell", "cnn", 0x9c4f7afaedaff52eull, 0xce88fc5120b97dc2ull, 0x403588b6u, 0x402cef1eu, 0 },
	{ "SkylakeX", "mlp", 0xedef942c78925caeull, 0x93a6ae30205964ffull, 0x401dde1du, 0x401dde1du, 1 },
	{ "SkylakeX", "lenet", 0x83d4482bfa7a0d3full, 0x4772835866091fceull, 0x401887c5u, 0x401887c5u, 1 },
	{ "SkylakeX", "cnn", 0x9c4f7afaedaff52eull, 0xd0a193a2f0a7b615ull, 0x403588b4u, 0x402cef1eu, 0 },
};

DT_TEST(nn_graph, builtin_models_give_the_same_bits_as_before)
{
	/* OpenBLAS's Zen set adds with Haswell's kernels (the same bits, checked
	 * with OPENBLAS_CORETYPE=Zen), so it keeps Haswell's rows */
	const char *loaded = dt_blas_info().core;
	const char *core = strcmp(loaded, "Zen") == 0 ? "Haswell" : loaded;
	int rows = 0;
	for (size_t k = 0; k < sizeof(before) / sizeof(before[0]); k++) {
		if (strcmp(before[k].core, core) != 0)
			continue;
		rows++;
		struct dt_err err = DT_ERR_INIT;
		struct dt_hparams hp;
		DT_CHECK_OK(dt_hparams_from_set(dt_hparams_default_set(before[k].name), &hp, &err), &err);
		struct dt_model *m;
		enum { NB = 8 };
		DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, NB, &m, &err), &err);
		dt_model_init_params(m, 7);
		const size_t np = dt_model_num_params(m);
		float *x = dt_xmalloc((size_t)NB * 784 * sizeof(float));
		uint8_t lab[NB];
		struct dt_rng data, drop;
		dt_rng_seed(&data, 11);
		for (size_t i = 0; i < (size_t)NB * 784; i++)
			x[i] = dt_rng_uniform(&data);
		for (int i = 0; i < NB; i++)
			lab[i] = (uint8_t)(i * 3 % 10);
		DT_CHECK_UINT_EQ(fnv(dt_model_params(m), np * sizeof(float)), before[k].params);
		dt_rng_seed(&drop, 5);
		int c = 0, ce = 0;
		float loss = dt_model_train_batch(m, x, lab, NB, &drop, &c);
		DT_CHECK_UINT_EQ(fnv(dt_model_grads(m), np * sizeof(float)), before[k].grads);
		float el = dt_model_eval_batch(m, x, lab, NB, &ce);
		uint32_t lb, eb;
		memcpy(&lb, &loss, 4);
		memcpy(&eb, &el, 4);
		DT_CHECK_UINT_EQ(lb, before[k].loss);
		DT_CHECK_UINT_EQ(eb, before[k].eval);
		DT_CHECK_INT_EQ(c, before[k].correct);
		free(x);
		dt_model_free(m);
	}
	if (rows == 0) /* OPENBLAS_CORETYPE set by hand, or a CPU without AVX2 */
		DT_SKIP("no recorded bits for OpenBLAS's kernel set here (recorded: Haswell and Zen, SkylakeX)");
}

/* The built-ins come from the CLI's zoo (models/builtin.h, written with the
 * public builder): every variable's name, shape, kernel flag and place in
 * the flat buffer as when nn/ built them, the model's name in its
 * description, and no model by name without a zoo. */
DT_TEST(nn_graph, builtin_models_keep_their_variables_through_the_public_builder)
{
	static const char *const want =
		"conv_1/kernel(3,3,1,32)K@0 conv_1/bias(32)@288 conv_2/kernel(3,3,32,64)K@320 "
		"conv_2/bias(64)@18752 dense_1/kernel(3136,128)K@18816 dense_1/bias(128)@420224 "
		"dense_2/kernel(128,10)K@420352 dense_2/bias(10)@421632 ";
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("cnn_base", &hp, &err), &err);
	struct dt_model *m;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, 4, &m, &err), &err);
	char got[1024] = "";
	size_t len = 0;
	for (int i = 0; i < dt_model_num_variables(m); i++) {
		const struct dt_variable *v = dt_model_variable(m, i);
		len += (size_t)snprintf(got + len, sizeof(got) - len, "%s(", v->name);
		for (int d = 0; d < v->ndim; d++)
			len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%lld", d ? "," : "", (long long)v->shape[d]);
		len += (size_t)snprintf(got + len, sizeof(got) - len, ")%s@%zu ", dt_model_variable_is_kernel(m, i) ? "K" : "",
					v->offset);
	}
	DT_CHECK_STR_EQ(got, want);
	char desc[128];
	dt_model_describe(m, desc, sizeof(desc));
	DT_CHECK_STR_EQ(desc, "cnn: 6 layers, 421642 parameters (1.6 MiB)");
	DT_CHECK_INT_EQ(dt_model_num_inputs(m), 1);
	DT_CHECK_STR_EQ(dt_model_input(m, 0)->name, "x");
	dt_model_free(m);
	m = (struct dt_model *)&err; /* must be reset to NULL */
	DT_CHECK_INT_EQ(dt_model_new(NULL, &hp, 28, 28, 1, 10, 4, &m, &err), DT_CONFIG);
	DT_CHECK(m == NULL);
	DT_CHECK_CONTAINS(err.msg, "model 'cnn': no models by name were handed down");
}
