/*
 * Models: models by name (a Keras JSON, or the zoo a program hands down),
 * variables and their initializers, the accessors, and the entry points,
 * which check a batch and hand it to the graph executor (exec.c) or to a
 * custom model's callback (custom.c).
 */
#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "nn/graph.h"
#include "nn/keras.h"
#include "nn/model_impl.h"
#include "tensor/kernels.h"

/* ---- models by name ---------------------------------------------------------- */

/* A Keras model for data of (height, width, channels) and num_classes:
 * the JSON must agree, or the run is misconfigured. */
static enum dt_status keras_model_new(const char *path, int height, int width, int channels, int num_classes,
				      int max_batch, struct dt_model **out, struct dt_err *err)
{
	struct dt_keras_info info;
	enum dt_status st = dt_keras_load(path, max_batch, out, &info, err);
	if (st)
		return st;
	const int *s = info.input_shape;
	const int rank3 = info.input_rank == 3 && s[0] == height && s[1] == width && s[2] == channels;
	/* A vector input (CSV features) is data of (1, 1, features): the same bytes. */
	const int rank1 = info.input_rank == 1 && height == 1 && width == 1 && s[0] == channels;
	if (info.num_inputs != 1 || info.input_is_int || !(rank3 || rank1) || info.classes != num_classes) {
		dt_model_free(*out);
		*out = NULL;
		dt_err_set(err, DT_USAGE,
			   "keras model '%s' takes %d float input(s) of shape (%d, %d, %d) and gives %d classes, but the data "
			   "has images of (%d, %d, %d) and %d classes",
			   path, info.num_inputs, s[0], info.input_rank > 1 ? s[1] : 0, info.input_rank > 2 ? s[2] : 0,
			   info.classes, height, width, channels, num_classes);
		dt_err_hint(err, "build the Keras model with input_shape=(%d, %d, %d) and %d output units", height, width,
			    channels, num_classes);
		return DT_USAGE;
	}
	return DT_OK;
}

enum dt_status dt_model_new(const struct dt_model_zoo *zoo, const struct dt_hparams *hp, int height, int width,
			    int channels, int num_classes, int max_batch, struct dt_model **out, struct dt_err *err)
{
	*out = NULL;
	if (hp->keras_model[0])
		return keras_model_new(hp->keras_model, height, width, channels, num_classes, max_batch, out, err);
	if (!zoo)
		return dt_err_set(err, DT_CONFIG, "model '%s': no models by name were handed down to build it from",
				  hp->model);
	return zoo->make(hp, height, width, channels, num_classes, max_batch, out, err);
}

void dt_model_free(struct dt_model *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->num_nodes; i++)
		dt_layer_release(&m->nodes[i].layer);
	if (m->custom_free)
		m->custom_free(m->custom_state);
	free(m->nodes);
	free(m->store);
	free(m->needs_grad);
	free(m->written);
	free(m->out);
	free(m->grad);
	free(m->val);
	free(m->layer_node);
	free(m->vars);
	free(m->var_is_kernel);
	free(m->var_init);
	free(m->params);
	free(m->grads_own);
	free(m->acts);
	free(m->dacts);
	free(m->scratch);
	free(m->tmp);
	free(m->labels32);
	free(m);
}

/* ---- variables and initialization ------------------------------------------- */

void dt__model_add_var(struct dt_model *m, const char *node, const char *suffix, int ndim, const int64_t *shape,
		       int is_kernel, struct dt_init init)
{
	DT_ASSERT(ndim >= 0 && ndim <= DT_MAX_DIMS);
	if (m->num_vars == m->cap_vars) {
		m->cap_vars = m->cap_vars ? 2 * m->cap_vars : 16;
		m->vars = dt_xrealloc(m->vars, (size_t)m->cap_vars * sizeof(*m->vars));
		m->var_is_kernel = dt_xrealloc(m->var_is_kernel, (size_t)m->cap_vars * sizeof(int));
		m->var_init = dt_xrealloc(m->var_init, (size_t)m->cap_vars * sizeof(*m->var_init));
	}
	struct dt_variable *v = &m->vars[m->num_vars];
	memset(v, 0, sizeof(*v));
	if (suffix)
		snprintf(v->name, sizeof(v->name), "%s/%s", node, suffix);
	else
		snprintf(v->name, sizeof(v->name), "%s", node);
	v->ndim = ndim;
	size_t count = 1;
	for (int i = 0; i < ndim; i++) {
		v->shape[i] = shape[i];
		count *= (size_t)shape[i];
	}
	v->offset = m->num_params;
	v->count = count;
	m->var_is_kernel[m->num_vars] = is_kernel;
	m->var_init[m->num_vars] = init;
	m->num_params += count;
	m->num_vars++;
}

const char *dt_var_kind_name(enum dt_var_kind k)
{
	switch (k) {
	case DT_VAR_TRAINABLE:
		return "trainable";
	case DT_VAR_MOVING_AVERAGE:
		return "moving_average";
	case DT_VAR_FROZEN:
		return "frozen";
	}
	return "?";
}

void dt__model_freeze_var(struct dt_model *m, int i)
{
	DT_ASSERT(i >= 0 && i < m->num_vars);
	m->vars[i].kind = DT_VAR_FROZEN;
	m->vars[i].decay = 0.0f;
	m->var_is_kernel[i] = 0;
}

void dt__model_moving_average_var(struct dt_model *m, int i, float decay)
{
	DT_ASSERT(i >= 0 && i < m->num_vars && decay >= 0.0f && decay < 1.0f);
	m->vars[i].kind = DT_VAR_MOVING_AVERAGE;
	m->vars[i].decay = decay;
	m->var_is_kernel[i] = 0;
}

int dt_model_variable_sync_mean(const struct dt_model *m, int i)
{
	DT_ASSERT(i >= 0 && i < m->num_vars);
	return m->vars[i].kind == DT_VAR_MOVING_AVERAGE;
}

size_t dt_model_sync_mean_floats(const struct dt_model *m)
{
	size_t n = 0;
	for (int i = 0; i < m->num_vars; i++)
		if (m->vars[i].kind == DT_VAR_MOVING_AVERAGE)
			n += m->vars[i].count;
	return n;
}

void dt_model_sync_mean_gather(const struct dt_model *m, float *buf)
{
	for (int i = 0; i < m->num_vars; i++)
		if (m->vars[i].kind == DT_VAR_MOVING_AVERAGE) {
			memcpy(buf, m->params + m->vars[i].offset, m->vars[i].count * sizeof(float));
			buf += m->vars[i].count;
		}
}

void dt_model_sync_mean_scatter(struct dt_model *m, const float *buf, float scale)
{
	for (int i = 0; i < m->num_vars; i++)
		if (m->vars[i].kind == DT_VAR_MOVING_AVERAGE) {
			float *p = m->params + m->vars[i].offset;
			for (size_t k = 0; k < m->vars[i].count; k++)
				p[k] = buf[k] * scale;
			buf += m->vars[i].count;
		}
}

void dt_model_moving_average_values(const struct dt_model *m, const float *before, float *out)
{
	for (int i = 0; i < m->num_vars; i++) {
		const struct dt_variable *v = &m->vars[i];
		if (v->kind != DT_VAR_MOVING_AVERAGE)
			continue;
		const float *now = m->params + v->offset;
		const double rate = 1.0 - (double)v->decay;
		for (size_t k = 0; k < v->count; k++)
			out[v->offset + k] = (float)((double)before[k] + ((double)now[k] - (double)before[k]) / rate);
		before += v->count;
	}
}

int dt_model_variable_trainable(const struct dt_model *m, int i)
{
	DT_ASSERT(i >= 0 && i < m->num_vars);
	return m->vars[i].kind == DT_VAR_TRAINABLE;
}

void dt__model_alloc_params(struct dt_model *m)
{
	const size_t n = m->num_params ? m->num_params : 1;
	m->params = dt_xalloc_aligned(n, sizeof(float));
	m->grads = m->grads_own = dt_xalloc_aligned(m->num_params + 1, sizeof(float)); /* the spare float (model.h) */
	memset(m->params, 0, n * sizeof(float));
	memset(m->grads, 0, (m->num_params + 1) * sizeof(float));
}

static const char *const init_names[] = { "glorot_uniform", "he_normal", "zeros", "ones", "random_normal",
					  "truncated_normal" };
static const char *const all_init_names[] = { "glorot_uniform", "he_normal", "zeros", "ones", "random_normal",
					      "truncated_normal", "variance_scaling", "random_uniform", "constant",
					      "glorot_normal", "he_uniform", "lecun_normal", "lecun_uniform" };
static const char *const fan_names[] = { "fan_in", "fan_out", "fan_avg" };
static const char *const dist_names[] = { "truncated_normal", "untruncated_normal", "uniform" };

static int index_of(const char *s, size_t len, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (strlen(names[i]) == len && strncmp(s, names[i], len) == 0)
			return i;
	return -1;
}

/* The initializers beyond the original six; 1 if text was one of them
 * (then *st says whether it parsed), 0 if not. */
static int parse_more(const char *text, struct dt_init *out, enum dt_status *st, struct dt_err *err)
{
	static const struct {
		const char *name;
		float scale;
		enum dt_fan_mode mode;
		enum dt_vs_dist dist;
	} aliases[] = { { "glorot_normal", 1, DT_FAN_AVG, DT_VS_TRUNCATED_NORMAL },
			{ "he_uniform", 2, DT_FAN_IN, DT_VS_UNIFORM },
			{ "lecun_normal", 1, DT_FAN_IN, DT_VS_TRUNCATED_NORMAL },
			{ "lecun_uniform", 1, DT_FAN_IN, DT_VS_UNIFORM } };
	memset(out, 0, sizeof(*out));
	*st = DT_OK;
	for (size_t i = 0; i < DT_ARRAY_LEN(aliases); i++)
		if (strcmp(text, aliases[i].name) == 0) {
			*out = (struct dt_init){ .kind = DT_INIT_VARIANCE_SCALING, .scale = aliases[i].scale,
						 .mode = aliases[i].mode, .dist = aliases[i].dist };
			return 1;
		}
	const size_t len = strcspn(text, "(");
	const char *args = text + len + 1;
	char *end = NULL;
	if (len == 16 && strncmp(text, "variance_scaling", len) == 0) {
		const double scale = text[len] ? strtod(args, &end) : 0.0;
		int mode = -1, dist = -1;
		if (end && end != args && *end == ',') {
			const char *m = end + 1;
			size_t ml = strcspn(m, ",");
			mode = index_of(m, ml, fan_names, 3);
			if (m[ml] == ',') {
				const char *d = m + ml + 1;
				size_t dl = strcspn(d, ")");
				dist = index_of(d, dl, dist_names, 3);
				if (strcmp(d + dl, ")") != 0)
					dist = -1;
			}
		}
		if (!(scale > 0 && scale < 1e6) || mode < 0 || dist < 0) {
			*st = dt_err_set(err, DT_USAGE,
					 "bad initializer '%s': want variance_scaling(SCALE,MODE,DISTRIBUTION) with SCALE > 0, "
					 "MODE fan_in, fan_out or fan_avg, DISTRIBUTION truncated_normal, untruncated_normal or "
					 "uniform",
					 text);
			return 1;
		}
		*out = (struct dt_init){ .kind = DT_INIT_VARIANCE_SCALING, .scale = (float)scale,
					 .mode = (enum dt_fan_mode)mode, .dist = (enum dt_vs_dist)dist };
		return 1;
	}
	const int uniform = len == 14 && strncmp(text, "random_uniform", len) == 0;
	const int constant = len == 8 && strncmp(text, "constant", len) == 0;
	if (!uniform && !constant)
		return 0;
	double a = 0.0, b = 0.0;
	int ok = text[len] == '(';
	if (ok) {
		a = strtod(args, &end);
		ok = end != args && isfinite(a) && fabs(a) < 1e6;
	}
	if (ok && uniform) {
		ok = *end == ',';
		const char *bs = end + 1;
		if (ok) {
			b = strtod(bs, &end);
			ok = end != bs && isfinite(b) && fabs(b) < 1e6 && b > a;
		}
	}
	if (!ok || strcmp(end, ")") != 0) {
		*st = dt_err_set(err, DT_USAGE, "bad initializer '%s': want %s", text,
				 uniform ? "random_uniform(MIN,MAX) with MIN < MAX" : "constant(VALUE)");
		return 1;
	}
	*out = (struct dt_init){ .kind = uniform ? DT_INIT_RANDOM_UNIFORM : DT_INIT_CONSTANT, .a = (float)a,
				 .b = (float)b };
	return 1;
}

enum dt_status dt_init_parse(const char *text, struct dt_init *out, struct dt_err *err)
{
	char valid[256];
	dt_join(valid, sizeof(valid), all_init_names, DT_ARRAY_LEN(all_init_names), ", ");
	if (!text)
		return dt_err_set(err, DT_USAGE, "missing initializer name; valid: %s", valid);
	enum dt_status more;
	if (parse_more(text, out, &more, err))
		return more;
	size_t len = strcspn(text, "(");
	for (size_t i = 0; i < DT_ARRAY_LEN(init_names); i++) {
		if (strlen(init_names[i]) != len || strncmp(text, init_names[i], len) != 0)
			continue;
		*out = (struct dt_init){ .kind = (enum dt_init_kind)i, .stddev = 0.0f };
		if (text[len] == '\0')
			return DT_OK;
		char *end = NULL;
		double sd = strtod(text + len + 1, &end);
		if ((out->kind != DT_INIT_RANDOM_NORMAL && out->kind != DT_INIT_TRUNCATED_NORMAL) || end == text + len + 1 ||
		    strcmp(end, ")") != 0 || !(sd > 0 && sd < 1e6))
			return dt_err_set(err, DT_USAGE,
					  "bad initializer '%s': only random_normal(stddev) and truncated_normal(stddev) take a "
					  "positive stddev in parentheses",
					  text);
		out->stddev = (float)sd;
		return DT_OK;
	}
	return dt_err_set(err, DT_USAGE, "unknown initializer '%s'; valid: %s (the normal ones also as name(stddev))",
			  text, valid);
}

/* Keras's truncated normal: redraw beyond 2 standard deviations; `fix`
 * (the variance-scaling initializers) makes the truncated distribution's
 * deviation equal `stddev`. */
static float truncated_normal(struct dt_rng *rng, float stddev, int fix)
{
	for (;;) {
		float z = dt_rng_normal(rng);
		if (z >= -2.0f && z <= 2.0f)
			return fix ? z * stddev / 0.87962566103423978f : z * stddev;
	}
}

void dt_model_init_params(struct dt_model *m, uint64_t seed)
{
	for (int i = 0; i < m->num_vars; i++) {
		const struct dt_variable *v = &m->vars[i];
		const struct dt_init in = m->var_init[i];
		float *p = m->params + v->offset;
		if (in.kind == DT_INIT_ZEROS || in.kind == DT_INIT_ONES || in.kind == DT_INIT_CONSTANT) {
			const float c = in.kind == DT_INIT_ONES ? 1.0f : in.kind == DT_INIT_CONSTANT ? in.a : 0.0f;
			for (size_t j = 0; j < v->count; j++)
				p[j] = c;
			continue;
		}
		int64_t receptive = 1;
		for (int d = 0; d + 2 < v->ndim; d++)
			receptive *= v->shape[d];
		double fan_in = v->ndim >= 2 ? (double)(receptive * v->shape[v->ndim - 2]) : (double)v->count;
		double fan_out = v->ndim >= 1 ? (double)(receptive * v->shape[v->ndim - 1]) : 1.0;
		char purpose[DT_VAR_NAME_MAX + 8];
		snprintf(purpose, sizeof(purpose), "init/%s", v->name);
		struct dt_rng rng;
		dt_rng_derive(&rng, seed, purpose, 0);
		const float sd = in.stddev > 0.0f ? in.stddev : 0.05f;
		switch (in.kind) {
		case DT_INIT_HE_NORMAL: {
			float stddev = (float)sqrt(2.0 / fan_in);
			for (size_t j = 0; j < v->count; j++)
				p[j] = truncated_normal(&rng, stddev, 1);
			break;
		}
		case DT_INIT_GLOROT_UNIFORM: {
			float limit = (float)sqrt(6.0 / (fan_in + fan_out));
			for (size_t j = 0; j < v->count; j++)
				p[j] = (2.0f * dt_rng_uniform(&rng) - 1.0f) * limit;
			break;
		}
		case DT_INIT_RANDOM_NORMAL:
			for (size_t j = 0; j < v->count; j++)
				p[j] = dt_rng_normal(&rng) * sd;
			break;
		case DT_INIT_TRUNCATED_NORMAL:
			for (size_t j = 0; j < v->count; j++)
				p[j] = truncated_normal(&rng, sd, 0);
			break;
		case DT_INIT_VARIANCE_SCALING: {
			const double n = in.mode == DT_FAN_IN ? fan_in : in.mode == DT_FAN_OUT ? fan_out : (fan_in + fan_out) / 2;
			const double var = (double)in.scale / (n > 1.0 ? n : 1.0);
			if (in.dist == DT_VS_UNIFORM) {
				const float limit = (float)sqrt(3.0 * var);
				for (size_t j = 0; j < v->count; j++)
					p[j] = (2.0f * dt_rng_uniform(&rng) - 1.0f) * limit;
			} else {
				const float stddev = (float)sqrt(var);
				for (size_t j = 0; j < v->count; j++)
					p[j] = in.dist == DT_VS_TRUNCATED_NORMAL ? truncated_normal(&rng, stddev, 1)
										 : dt_rng_normal(&rng) * stddev;
			}
			break;
		}
		case DT_INIT_RANDOM_UNIFORM:
			for (size_t j = 0; j < v->count; j++)
				p[j] = in.a + (in.b - in.a) * dt_rng_uniform(&rng);
			break;
		case DT_INIT_ZEROS:
		case DT_INIT_ONES:
		case DT_INIT_CONSTANT:
			break;
		}
	}
}

/* ---- accessors ---------------------------------------------------------------- */

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

int dt_model_set_grads(struct dt_model *m, float *grads)
{
	if (m->custom || m->seq_max_len > 0) /* views bound elsewhere (custom.c, exec_seq.c's shared tables) */
		return 0;
	float *to = grads ? grads : m->grads_own;
	if (to == m->grads)
		return 1;
	m->grads = to;
	size_t off = 0;
	for (int i = 0; i < m->num_nodes; i++) {
		struct dt_layer *l = &m->nodes[i].layer;
		if (m->nodes[i].fused)
			continue;
		dt_layer_bind(l, m->params + off, m->grads + off);
		off += dt_layer_num_params(l);
	}
	DT_ASSERT(off == m->num_params);
	return 1;
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
	return m->custom ? 1 : m->num_layers;
}

const struct dt_layer *dt_model_layer(const struct dt_model *m, int i)
{
	if (m->custom) {
		DT_ASSERT(i == 0);
		return &m->custom_layer;
	}
	DT_ASSERT(i >= 0 && i < m->num_layers);
	return &m->nodes[m->layer_node[i]].layer;
}

int dt_model_num_inputs(const struct dt_model *m)
{
	return m->num_inputs;
}

const struct dt_io_info *dt_model_input(const struct dt_model *m, int i)
{
	DT_ASSERT(i >= 0 && i < m->num_inputs);
	return &m->inputs[i];
}

const struct dt_io_info *dt_model_target(const struct dt_model *m)
{
	return &m->target;
}

enum dt_loss dt_model_loss(const struct dt_model *m)
{
	return m->loss;
}

const char *dt_model_name(const struct dt_model *m)
{
	return m->name;
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
	snprintf(buf, cap, "%s: %d layers, %zu parameters (%.1f %s)", m->name, dt_model_num_layers(m), m->num_params,
		 scaled, unit);
}

void dt_model_memory(const struct dt_model *m, struct dt_model_memory *out)
{
	*out = (struct dt_model_memory){
		.batch = m->max_batch,
		.activation_bytes = m->acts_floats * sizeof(float),
		.gradient_bytes = m->dacts_floats * sizeof(float),
		.gradient_bytes_unshared = m->dacts_unplanned * sizeof(float),
	};
}

const float *dt_model_logits(const struct dt_model *m)
{
	return m->custom ? NULL : m->val[m->output];
}

/* ---- entry points -------------------------------------------------------------- */

static enum dt_status check_batch(const struct dt_model *m, const struct dt_model_batch *b, struct dt_err *err)
{
	if (!b)
		return dt_err_set(err, DT_USAGE, "model '%s': no batch (NULL)", m->name);
	if (m->seq_max_len > 0) {
		if (b->length < 1 || b->length > m->seq_max_len || b->size < 1 ||
		    (long)b->size * b->length > (long)m->max_batch)
			return dt_err_set(err, DT_USAGE,
					  "model '%s': batch of %d sequences of length %d, must be 1 to %d positions and at most %d tokens",
					  m->name, b->size, b->length, m->seq_max_len, m->max_batch);
	} else if (b->size < 1 || b->size > m->max_batch)
		return dt_err_set(err, DT_USAGE, "model '%s': batch of %d examples, must be 1 to %d (max_batch)", m->name,
				  b->size, m->max_batch);
	if (b->num_inputs != m->num_inputs)
		return dt_err_set(err, DT_USAGE, "model '%s': batch has %d input tensors, the model takes %d", m->name,
				  b->num_inputs, m->num_inputs);
	for (int i = 0; i < m->num_inputs; i++) {
		if (!b->inputs[i].data)
			return dt_err_set(err, DT_USAGE, "model '%s': input '%s' has no data (NULL)", m->name, m->inputs[i].name);
		if (b->inputs[i].dtype != m->inputs[i].dtype)
			return dt_err_set(err, DT_USAGE, "model '%s': input '%s' must be %s, got %s", m->name, m->inputs[i].name,
					  dt_dtype_name(m->inputs[i].dtype), dt_dtype_name(b->inputs[i].dtype));
	}
	if (!b->targets.data)
		return dt_err_set(err, DT_USAGE, "model '%s': batch has no targets (NULL)", m->name);
	if (b->targets.dtype != m->target.dtype)
		return dt_err_set(err, DT_USAGE, "model '%s': targets must be %s, got %s", m->name,
				  dt_dtype_name(m->target.dtype), dt_dtype_name(b->targets.dtype));
	return DT_OK;
}

static enum dt_status run(struct dt_model *m, const struct dt_model_batch *b, int training, struct dt_rng *rng,
			  dt_grads_ready_fn on_ready, void *arg, struct dt_step_result *res, struct dt_err *err)
{
	struct dt_step_result local;
	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	if (!m)
		return dt_err_set(err, DT_USAGE, "no model (NULL)");
	enum dt_status st = check_batch(m, b, err);
	if (st)
		return st;
	struct dt_fp_mode fp = dt_fp_flush_denormals();
	if (m->custom) {
		st = m->custom(m, b, training, rng, res, err);
		if (!st && training && on_ready && m->num_params > 0)
			on_ready(arg, 0, m->num_params);
	} else {
		st = dt__graph_run(m, b, training, rng, on_ready, arg, res, err);
	}
	dt_fp_restore(fp);
	return st;
}

enum dt_status dt_model_step(struct dt_model *m, const struct dt_model_batch *b, struct dt_rng *rng,
			     dt_grads_ready_fn on_ready, void *arg, struct dt_step_result *res, struct dt_err *err)
{
	return run(m, b, 1, rng, on_ready, arg, res, err);
}

enum dt_status dt_model_evaluate(struct dt_model *m, const struct dt_model_batch *b, struct dt_step_result *res,
				 struct dt_err *err)
{
	return run(m, b, 0, NULL, NULL, NULL, res, err);
}

/* The uint8 entry points: one float input, softmax cross-entropy, one label
 * per example (what the built-ins are). A label out of range is the
 * caller's bug here, as it always was. */
static float u8_run(struct dt_model *m, const float *x, const uint8_t *labels, int batch, int training,
		    struct dt_rng *rng, int *correct, dt_grads_ready_fn on_ready, void *arg)
{
	DT_ASSERT(!m->custom && m->num_inputs == 1 && m->inputs[0].dtype == DT_FLOAT32 &&
		  m->loss == DT_LOSS_SOFTMAX_XENT && m->rows == 1);
	DT_ASSERT(batch >= 1 && batch <= m->max_batch);
	for (int i = 0; i < batch; i++)
		m->labels32[i] = labels[i];
	struct dt_model_batch b = { .size = batch, .num_inputs = 1 };
	b.inputs[0] = (struct dt_data){ DT_FLOAT32, x };
	b.targets = (struct dt_data){ DT_INT32, m->labels32 };
	struct dt_step_result res;
	struct dt_err err = DT_ERR_INIT;
	enum dt_status st = run(m, &b, training, rng, on_ready, arg, &res, &err);
	if (st == DT_RUNTIME) /* a non-finite loss: the old entry points returned it */
		return NAN;
	DT_ASSERT(st == DT_OK);
	if (correct)
		*correct = res.correct;
	return res.loss;
}

float dt_model_train_batch(struct dt_model *m, const float *x, const uint8_t *labels, int batch,
			   struct dt_rng *rng, int *correct)
{
	return u8_run(m, x, labels, batch, 1, rng, correct, NULL, NULL);
}

float dt_model_train_batch_notify(struct dt_model *m, const float *x, const uint8_t *labels, int batch,
				  struct dt_rng *rng, int *correct, dt_grads_ready_fn on_ready, void *arg)
{
	return u8_run(m, x, labels, batch, 1, rng, correct, on_ready, arg);
}

float dt_model_eval_batch(struct dt_model *m, const float *x, const uint8_t *labels, int batch, int *correct)
{
	return u8_run(m, x, labels, batch, 0, NULL, correct, NULL, NULL);
}
