/* dt_model_train_batch_notify: the ranges it reports cover every parameter
 * once, from the end of the flat buffer backwards, and each range's
 * gradient is already final when it is reported (the all-reduce of
 * multi-worker mirrored training starts on it during the backward pass).
 * dt_model_set_grads: a step computed into another buffer writes there the
 * bits it writes into the model's own (--deterministic's micro-batches). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/hparams.h"
#include "models/builtin.h"
#include "nn/model.h"

#define MAX_CALLS 64

struct seen {
	const float *live;      /* the notifying model's gradient buffer */
	const float *reference; /* the final gradients of a plain run */
	size_t offset[MAX_CALLS], count[MAX_CALLS];
	int calls;
	int mismatched_call;    /* first call whose range was not final yet, or -1 */
};

static void note(void *arg, size_t offset, size_t count)
{
	struct seen *s = arg;
	DT_CHECK(s->calls < MAX_CALLS);
	s->offset[s->calls] = offset;
	s->count[s->calls] = count;
	if (s->mismatched_call < 0 &&
	    memcmp(s->live + offset, s->reference + offset, count * sizeof(float)) != 0)
		s->mismatched_call = s->calls;
	s->calls++;
}

static struct dt_model *new_model(const char *name, int max_batch)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set(dt_hparams_default_set(name), &hp, &err), &err);
	struct dt_model *m = NULL;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, max_batch, &m, &err), &err);
	dt_model_init_params(m, 7);
	return m;
}

/* A batch of B 28x28 images (uniform noise from `seed`) with labels
 * i * step mod 10; the caller frees the images. */
static float *new_batch(int B, uint64_t seed, int step, uint8_t *labels)
{
	float *x = calloc((size_t)B * 28 * 28, sizeof(float));
	struct dt_rng data;
	dt_rng_seed(&data, seed);
	for (size_t i = 0; i < (size_t)B * 28 * 28; i++)
		x[i] = dt_rng_uniform(&data);
	for (int i = 0; i < B; i++)
		labels[i] = (uint8_t)(i * step % 10);
	return x;
}

static void check_model(const char *name)
{
	enum { B = 6 };
	struct dt_model *plain = new_model(name, B), *notified = new_model(name, B);
	const size_t np = dt_model_num_params(plain);
	uint8_t labels[B];
	float *x = new_batch(B, 11, 3, labels);
	/* Stale values in the notifying model's gradients: a range reported
	 * before its layer wrote it would not match. */
	float *g = dt_model_grads(notified);
	for (size_t i = 0; i < np; i++)
		g[i] = 12345.0f;

	struct dt_rng r1, r2; /* the same dropout masks in both runs */
	dt_rng_seed(&r1, 3);
	dt_rng_seed(&r2, 3);
	int c1 = -1, c2 = -2;
	float l1 = dt_model_train_batch(plain, x, labels, B, &r1, &c1);
	struct seen s = { .live = g, .reference = dt_model_grads(plain), .mismatched_call = -1 };
	float l2 = dt_model_train_batch_notify(notified, x, labels, B, &r2, &c2, note, &s);

	fprintf(stderr, "%s: %d ranges over %zu parameters\n", name, s.calls, np);
	DT_CHECK(l1 == l2);
	DT_CHECK_INT_EQ(c1, c2);
	DT_CHECK_INT_EQ(memcmp(g, dt_model_grads(plain), np * sizeof(float)), 0);
	DT_CHECK(s.calls >= 2);
	DT_CHECK_INT_EQ(s.mismatched_call, -1);
	size_t end = np;
	for (int k = 0; k < s.calls; k++) {
		DT_CHECK(s.count[k] > 0);
		DT_CHECK_UINT_EQ(s.offset[k] + s.count[k], end); /* contiguous, non-increasing */
		end = s.offset[k];
	}
	DT_CHECK_UINT_EQ(end, 0); /* every parameter exactly once */
	/* One range per layer with parameters, in reverse layer order. */
	int with_params = 0;
	for (int v = 0; v < dt_model_num_variables(plain); v++)
		with_params += dt_model_variable_is_kernel(plain, v);
	DT_CHECK_INT_EQ(s.calls, with_params);
	free(x);
	dt_model_free(plain);
	dt_model_free(notified);
}

DT_TEST(nn_model, notify_reports_each_layer_range_once_backwards_when_final_mlp)
{
	check_model("mlp");
}

DT_TEST(nn_model, notify_reports_each_layer_range_once_backwards_when_final_lenet)
{
	check_model("lenet");
}

DT_TEST(nn_model, notify_reports_each_layer_range_once_backwards_when_final_cnn)
{
	check_model("cnn");
}

/* The same step into a buffer of the caller's (dt_model_set_grads) and into
 * the model's own: the same bits, the own buffer untouched meanwhile, and
 * back to it after NULL. */
static void check_set_grads(const char *name)
{
	enum { B = 5 };
	struct dt_model *a = new_model(name, B), *b = new_model(name, B);
	const size_t np = dt_model_num_params(a);
	uint8_t labels[B];
	float *x = new_batch(B, 12, 7, labels);
	float *own = dt_model_grads(b);
	for (size_t i = 0; i < np; i++)
		own[i] = 12345.0f; /* must stay so while b computes elsewhere */
	float *buf = dt_xalloc_aligned(np, sizeof(float)); /* zero-filled */
	struct dt_rng r1, r2;
	dt_rng_seed(&r1, 4);
	dt_rng_seed(&r2, 4);
	float la = dt_model_train_batch(a, x, labels, B, &r1, NULL);
	DT_CHECK_INT_EQ(dt_model_set_grads(b, buf), 1);
	DT_CHECK(dt_model_grads(b) == buf);
	float lb = dt_model_train_batch(b, x, labels, B, &r2, NULL);
	DT_CHECK(la == lb);
	DT_CHECK_INT_EQ(memcmp(buf, dt_model_grads(a), np * sizeof(float)), 0);
	size_t touched = 0;
	for (size_t i = 0; i < np; i++)
		touched += own[i] != 12345.0f;
	DT_CHECK_UINT_EQ(touched, 0);
	DT_CHECK_INT_EQ(dt_model_set_grads(b, NULL), 1);
	DT_CHECK(dt_model_grads(b) == own);
	dt_rng_seed(&r2, 4);
	(void)dt_model_train_batch(b, x, labels, B, &r2, NULL);
	DT_CHECK_INT_EQ(memcmp(own, dt_model_grads(a), np * sizeof(float)), 0);
	free(buf);
	free(x);
	dt_model_free(a);
	dt_model_free(b);
}

DT_TEST(nn_model, set_grads_computes_the_same_bits_elsewhere_mlp)
{
	check_set_grads("mlp");
}

DT_TEST(nn_model, set_grads_computes_the_same_bits_elsewhere_cnn)
{
	check_set_grads("cnn");
}
