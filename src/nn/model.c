#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "nn/layers.h"
#include "tensor/kernels.h"
#include "tensor/tensor.h"

#define MAX_LAYERS 32
#define MAX_VARS (2 * MAX_LAYERS)

struct dt_model {
	char name[DT_HP_NAME_MAX];
	struct dt_shape input;         /* (H, W, C) of one example */
	int num_classes;
	int max_batch;
	int num_layers;
	struct dt_layer layers[MAX_LAYERS];
	int first_compute;             /* first layer that is not a view: it needs no dx */
	int num_vars;
	struct dt_variable vars[MAX_VARS];
	int var_layer[MAX_VARS];       /* layer owning each variable */
	int var_is_kernel[MAX_VARS];
	size_t num_params;
	float *params, *grads;         /* (num_params) each, 64-byte aligned, owned */
	float *acts;                   /* every layer output, one allocation, owned */
	float *out[MAX_LAYERS];        /* layer i's output (max_batch, out_i) in acts; NULL for views */
	const float *act[MAX_LAYERS + 1]; /* this step's activations: act[0] = x, act[i+1] = output of layer i */
	float *dbuf[2];                /* ping-pong activation gradients, (max_batch, largest activation) */
	float *scratch;                /* im2col rows, the largest any layer needs */
};

/* ---- building ------------------------------------------------------------- */

/* The layer being appended goes through this; it numbers layers per type
 * (conv_1, conv_2, dense_1, ...) and records their variables. */
struct builder {
	struct dt_model *m;
	struct dt_shape cur;
	int n_conv, n_dense, n_pool, n_flatten, n_dropout, n_relu;
	enum dt_status st;
	struct dt_err *err;
};

static struct dt_layer *next_layer(struct builder *b, char *name, size_t cap, const char *prefix, int *counter)
{
	if (b->st)
		return NULL;
	if (b->m->num_layers >= MAX_LAYERS) {
		b->st = dt_err_set(b->err, DT_INTERNAL, "model has more than %d layers", MAX_LAYERS);
		return NULL;
	}
	snprintf(name, cap, "%s_%d", prefix, ++*counter);
	return &b->m->layers[b->m->num_layers];
}

static void add_var(struct builder *b, const char *layer, const char *suffix, int ndim, const int64_t *shape,
		    size_t count, int is_kernel)
{
	struct dt_model *m = b->m;
	DT_ASSERT(m->num_vars < MAX_VARS);
	struct dt_variable *v = &m->vars[m->num_vars];
	memset(v, 0, sizeof(*v));
	snprintf(v->name, sizeof(v->name), "%s/%s", layer, suffix);
	v->ndim = ndim;
	for (int i = 0; i < ndim; i++)
		v->shape[i] = shape[i];
	v->offset = m->num_params;
	v->count = count;
	m->var_layer[m->num_vars] = m->num_layers;
	m->var_is_kernel[m->num_vars] = is_kernel;
	m->num_params += count;
	m->num_vars++;
}

/* Commits the layer just filled in: its variables, the running shape. */
static void commit(struct builder *b, enum dt_status st)
{
	if (st) {
		b->st = st;
		return;
	}
	struct dt_layer *l = &b->m->layers[b->m->num_layers];
	if (l->kind == DT_LAYER_DENSE) {
		int64_t ks[2] = { (int64_t)dt_shape_elems(l->in), l->out.c }, bs[1] = { l->out.c };
		add_var(b, l->name, "kernel", 2, ks, l->kernel_count, 1);
		add_var(b, l->name, "bias", 1, bs, l->bias_count, 0);
	} else if (l->kind == DT_LAYER_CONV2D) {
		int64_t ks[4] = { l->geom.KH, l->geom.KW, l->geom.C, l->out.c }, bs[1] = { l->out.c };
		add_var(b, l->name, "kernel", 4, ks, l->kernel_count, 1);
		add_var(b, l->name, "bias", 1, bs, l->bias_count, 0);
	}
	b->cur = l->out;
	b->m->num_layers++;
}

static void add_conv(struct builder *b, int k, int filters, int stride, int pad, int relu)
{
	char name[DT_LAYER_NAME_MAX];
	struct dt_layer *l = next_layer(b, name, sizeof(name), "conv", &b->n_conv);
	if (l)
		commit(b, dt_layer_conv2d(l, name, b->cur, k, k, filters, stride, pad, relu, b->err));
}

static void add_dense(struct builder *b, int units, int relu)
{
	char name[DT_LAYER_NAME_MAX];
	struct dt_layer *l = next_layer(b, name, sizeof(name), "dense", &b->n_dense);
	if (l)
		commit(b, dt_layer_dense(l, name, b->cur, units, relu, b->err));
}

/* A pool right after a conv layer is fused into it (nn/layers.h). */
static void add_pool(struct builder *b)
{
	if (b->st)
		return;
	struct dt_model *m = b->m;
	if (m->num_layers > 0) {
		struct dt_layer *prev = &m->layers[m->num_layers - 1];
		if (prev->kind == DT_LAYER_CONV2D && !prev->pool) {
			b->st = dt_layer_fuse_pool(prev, b->err);
			b->cur = prev->out;
			return;
		}
	}
	char name[DT_LAYER_NAME_MAX];
	struct dt_layer *l = next_layer(b, name, sizeof(name), "pool", &b->n_pool);
	if (l)
		commit(b, dt_layer_maxpool2(l, name, b->cur, b->err));
}

static void add_flatten(struct builder *b)
{
	char name[DT_LAYER_NAME_MAX];
	struct dt_layer *l = next_layer(b, name, sizeof(name), "flatten", &b->n_flatten);
	if (l)
		commit(b, dt_layer_flatten(l, name, b->cur, b->err));
}

/* Dropout follows every hidden dense layer when hp->dropout > 0. */
static void add_dropout(struct builder *b, double rate)
{
	if (rate <= 0)
		return;
	char name[DT_LAYER_NAME_MAX];
	struct dt_layer *l = next_layer(b, name, sizeof(name), "dropout", &b->n_dropout);
	if (l)
		commit(b, dt_layer_dropout(l, name, b->cur, (float)rate, b->err));
}

/* mlp: 784-256-128-10 with ReLU (for 28x28x1 inputs). */
static void build_mlp(struct builder *b, const struct dt_hparams *hp, int num_classes)
{
	add_flatten(b);
	add_dense(b, 256, 1);
	add_dropout(b, hp->dropout);
	add_dense(b, 128, 1);
	add_dropout(b, hp->dropout);
	add_dense(b, num_classes, 0);
}

/* lenet: LeNet-5 with ReLU and max pooling. */
static void build_lenet(struct builder *b, const struct dt_hparams *hp, int num_classes)
{
	add_conv(b, 5, 6, 1, 2, 1);
	add_pool(b);
	add_conv(b, 5, 16, 1, 0, 1);
	add_pool(b);
	add_flatten(b);
	add_dense(b, 120, 1);
	add_dropout(b, hp->dropout);
	add_dense(b, 84, 1);
	add_dropout(b, hp->dropout);
	add_dense(b, num_classes, 0);
}

/* cnn: two 3x3 conv blocks (32, 64 filters) and a 128-unit dense layer. */
static void build_cnn(struct builder *b, const struct dt_hparams *hp, int num_classes)
{
	add_conv(b, 3, 32, 1, 1, 1);
	add_pool(b);
	add_conv(b, 3, 64, 1, 1, 1);
	add_pool(b);
	add_flatten(b);
	add_dense(b, 128, 1);
	add_dropout(b, hp->dropout);
	add_dense(b, num_classes, 0);
}

/* X(name, builder) — the model registry. */
#define DT_MODEL_LIST(X) \
	X(mlp, build_mlp)     \
	X(lenet, build_lenet) \
	X(cnn, build_cnn)

static const char *const model_names[] = {
#define NAME(name, fn) #name,
	DT_MODEL_LIST(NAME)
#undef NAME
};

typedef void (*build_fn)(struct builder *b, const struct dt_hparams *hp, int num_classes);
static const build_fn model_builders[] = {
#define FN(name, fn) fn,
	DT_MODEL_LIST(FN)
#undef FN
};

const char *const *dt_model_names(size_t *count)
{
	if (count)
		*count = DT_ARRAY_LEN(model_names);
	return model_names;
}

static enum dt_status unknown_model(const char *name, struct dt_err *err)
{
	char valid[256];
	dt_join(valid, sizeof(valid), model_names, DT_ARRAY_LEN(model_names), ", ");
	const char *near = dt_nearest(name, model_names, DT_ARRAY_LEN(model_names));
	if (near)
		return dt_err_set(err, DT_USAGE, "unknown model '%s' (did you mean '%s'?); valid: %s", name, near, valid);
	return dt_err_set(err, DT_USAGE, "unknown model '%s'; valid: %s", name, valid);
}

/* Allocates the flat buffers and activations once the layers are known. */
static void allocate(struct dt_model *m)
{
	m->params = dt_xalloc_aligned(m->num_params ? m->num_params : 1, sizeof(float));
	m->grads = dt_xalloc_aligned(m->num_params ? m->num_params : 1, sizeof(float));
	size_t off = 0, act_floats = 0, largest = dt_shape_elems(m->input), scratch = 0;
	for (int i = 0; i < m->num_layers; i++) {
		struct dt_layer *l = &m->layers[i];
		dt_layer_bind(l, m->params + off, m->grads + off);
		off += dt_layer_num_params(l);
		dt_layer_alloc_state(l, m->max_batch);
		size_t e = dt_shape_elems(l->out);
		if (!dt_layer_is_view(l))
			act_floats += (e + 15) / 16 * 16; /* each output 64-byte aligned */
		if (e > largest)
			largest = e;
		size_t s = dt_layer_scratch_floats(l, m->max_batch);
		if (s > scratch)
			scratch = s;
	}
	DT_ASSERT(off == m->num_params);
	const size_t B = (size_t)m->max_batch;
	m->acts = dt_xalloc_aligned(act_floats * B, sizeof(float));
	float *p = m->acts;
	for (int i = 0; i < m->num_layers; i++) {
		if (dt_layer_is_view(&m->layers[i]))
			continue;
		m->out[i] = p;
		p += (dt_shape_elems(m->layers[i].out) + 15) / 16 * 16 * B;
	}
	m->dbuf[0] = dt_xalloc_aligned(largest * B, sizeof(float));
	m->dbuf[1] = dt_xalloc_aligned(largest * B, sizeof(float));
	m->scratch = dt_xalloc_aligned(scratch ? scratch : 1, sizeof(float));
	m->first_compute = 0;
	while (m->first_compute < m->num_layers && dt_layer_is_view(&m->layers[m->first_compute]))
		m->first_compute++;
}

enum dt_status dt_model_new(const struct dt_hparams *hp, int height, int width, int channels, int num_classes,
			    int max_batch, struct dt_model **out, struct dt_err *err)
{
	*out = NULL;
	int which = -1;
	for (size_t i = 0; i < DT_ARRAY_LEN(model_names); i++)
		if (strcmp(hp->model, model_names[i]) == 0)
			which = (int)i;
	if (which < 0)
		return unknown_model(hp->model, err);
	if (height < 1 || width < 1 || channels < 1)
		return dt_err_set(err, DT_CONFIG, "model '%s': bad input shape (%d, %d, %d)", hp->model, height, width,
				  channels);
	if (num_classes < 2 || num_classes > 256)
		return dt_err_set(err, DT_CONFIG, "model '%s': num_classes must be in [2, 256] (labels are bytes), got %d",
				  hp->model, num_classes);
	if (max_batch < 1)
		return dt_err_set(err, DT_CONFIG, "model '%s': max_batch must be positive, got %d", hp->model, max_batch);
	if (!(hp->dropout >= 0 && hp->dropout < 1))
		return dt_err_set(err, DT_CONFIG, "model '%s': dropout must be in [0, 1), got %g", hp->model, hp->dropout);

	struct dt_model *m = dt_xcalloc(1, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "%s", hp->model);
	m->input = (struct dt_shape){ height, width, channels };
	m->num_classes = num_classes;
	m->max_batch = max_batch;
	struct builder b = { .m = m, .cur = m->input, .err = err };
	model_builders[which](&b, hp, num_classes);
	if (b.st) {
		dt_err_prefix(err, "cannot build model '%s' for input (%d, %d, %d)", hp->model, height, width, channels);
		free(m);
		return b.st;
	}
	allocate(m);
	*out = m;
	return DT_OK;
}

void dt_model_free(struct dt_model *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->num_layers; i++)
		dt_layer_release(&m->layers[i]);
	free(m->params);
	free(m->grads);
	free(m->acts);
	free(m->dbuf[0]);
	free(m->dbuf[1]);
	free(m->scratch);
	free(m);
}

/* ---- initialization ------------------------------------------------------- */

/* Keras's truncated normal: redraw beyond 2 standard deviations; the
 * constant makes the truncated distribution's deviation equal `stddev`. */
static float truncated_normal(struct dt_rng *rng, float stddev)
{
	for (;;) {
		float z = dt_rng_normal(rng);
		if (z >= -2.0f && z <= 2.0f)
			return z * stddev / 0.87962566103423978f;
	}
}

void dt_model_init_params(struct dt_model *m, uint64_t seed)
{
	for (int i = 0; i < m->num_vars; i++) {
		const struct dt_variable *v = &m->vars[i];
		float *p = m->params + v->offset;
		if (!m->var_is_kernel[i]) {
			memset(p, 0, v->count * sizeof(float));
			continue;
		}
		const struct dt_layer *l = &m->layers[m->var_layer[i]];
		/* fan_in / fan_out as Keras counts them: a conv kernel
		 * (KH, KW, C, OC) has fan_in KH*KW*C and fan_out KH*KW*OC. */
		int64_t receptive = v->ndim == 4 ? v->shape[0] * v->shape[1] : 1;
		double fan_in = (double)(receptive * v->shape[v->ndim - 2]);
		double fan_out = (double)(receptive * v->shape[v->ndim - 1]);
		char purpose[DT_VAR_NAME_MAX + 8];
		snprintf(purpose, sizeof(purpose), "init/%s", v->name);
		struct dt_rng rng;
		dt_rng_derive(&rng, seed, purpose, 0);
		if (l->relu) { /* He-normal */
			float stddev = (float)sqrt(2.0 / fan_in);
			for (size_t j = 0; j < v->count; j++)
				p[j] = truncated_normal(&rng, stddev);
		} else { /* Glorot-uniform */
			float limit = (float)sqrt(6.0 / (fan_in + fan_out));
			for (size_t j = 0; j < v->count; j++)
				p[j] = (2.0f * dt_rng_uniform(&rng) - 1.0f) * limit;
		}
	}
}

/* ---- accessors ------------------------------------------------------------ */

size_t dt_model_num_params(const struct dt_model *m)
{
	return m->num_params;
}

float *dt_model_params(struct dt_model *m)
{
	return m->params;
}

float *dt_model_grads(struct dt_model *m)
{
	return m->grads;
}

int dt_model_num_variables(const struct dt_model *m)
{
	return m->num_vars;
}

const struct dt_variable *dt_model_variable(const struct dt_model *m, int i)
{
	DT_ASSERT(i >= 0 && i < m->num_vars);
	return &m->vars[i];
}

int dt_model_variable_is_kernel(const struct dt_model *m, int i)
{
	DT_ASSERT(i >= 0 && i < m->num_vars);
	return m->var_is_kernel[i];
}

int dt_model_max_batch(const struct dt_model *m)
{
	return m->max_batch;
}

int dt_model_num_layers(const struct dt_model *m)
{
	return m->num_layers;
}

const struct dt_layer *dt_model_layer(const struct dt_model *m, int i)
{
	DT_ASSERT(i >= 0 && i < m->num_layers);
	return &m->layers[i];
}

void dt_model_describe(const struct dt_model *m, char *buf, size_t cap)
{
	double bytes = (double)m->num_params * sizeof(float);
	const char *unit = "KiB";
	double scaled = bytes / 1024;
	if (scaled >= 1024) {
		scaled /= 1024;
		unit = "MiB";
	}
	snprintf(buf, cap, "%s: %d layers, %zu parameters (%.1f %s)", m->name, m->num_layers, m->num_params, scaled,
		 unit);
}

/* ---- forward and backward ------------------------------------------------- */

static void forward(struct dt_model *m, const float *x, int B, int training, struct dt_rng *rng)
{
	DT_ASSERT(B >= 1 && B <= m->max_batch);
	m->act[0] = x;
	for (int i = 0; i < m->num_layers; i++) {
		struct dt_layer *l = &m->layers[i];
		if (dt_layer_is_view(l)) {
			m->act[i + 1] = m->act[i];
			continue;
		}
		dt_layer_forward(l, m->act[i], m->out[i], B, training, rng, m->scratch);
		m->act[i + 1] = m->out[i];
	}
}

float dt_model_train_batch(struct dt_model *m, const float *x, const uint8_t *labels, int batch,
			   struct dt_rng *rng, int *correct)
{
	return dt_model_train_batch_notify(m, x, labels, batch, rng, correct, NULL, NULL);
}

float dt_model_train_batch_notify(struct dt_model *m, const float *x, const uint8_t *labels, int batch,
				  struct dt_rng *rng, int *correct, dt_grads_ready_fn on_ready, void *arg)
{
	struct dt_fp_mode fp = dt_fp_flush_denormals();
	forward(m, x, batch, 1, rng);
	float *dy = m->dbuf[0], *dx = m->dbuf[1];
	float loss = dt_softmax_xent(m->act[m->num_layers], labels, batch, m->num_classes, dy, correct);
	for (int i = m->num_layers - 1; i >= m->first_compute; i--) {
		struct dt_layer *l = &m->layers[i];
		if (dt_layer_is_view(l))
			continue; /* the gradient passes through unchanged */
		dt_layer_backward(l, m->act[i], m->act[i + 1], dy, i > m->first_compute ? dx : NULL, batch, m->scratch);
		size_t count = dt_layer_num_params(l);
		if (on_ready && count > 0)
			on_ready(arg, (size_t)(l->dkernel - m->grads), count);
		float *t = dy;
		dy = dx;
		dx = t;
	}
	dt_fp_restore(fp);
	return loss;
}

float dt_model_eval_batch(struct dt_model *m, const float *x, const uint8_t *labels, int batch, int *correct)
{
	struct dt_fp_mode fp = dt_fp_flush_denormals();
	forward(m, x, batch, 0, NULL);
	float loss = dt_softmax_xent(m->act[m->num_layers], labels, batch, m->num_classes, NULL, correct);
	dt_fp_restore(fp);
	return loss;
}

const float *dt_model_logits(const struct dt_model *m)
{
	return m->act[m->num_layers];
}
