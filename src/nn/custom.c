/* Custom models (nn/custom.h): variables over the flat buffers and one
 * callback per step, with its output checked before anyone trains on it. */
#include "nn/custom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "nn/model_impl.h"

struct custom_state {
	dt_custom_fn fn;
	void *user;
	float **params, **grads;  /* (num_vars) views */
};

static void custom_free(void *p)
{
	struct custom_state *s = p;
	if (!s)
		return;
	free(s->params);
	free(s->grads);
	free(s);
}

static enum dt_status check_tensor(const char *model, const char *what, const struct dt_custom_tensor *t,
				   struct dt_err *err)
{
	if (!t->name || !*t->name || strlen(t->name) >= DT_VAR_NAME_MAX)
		return dt_err_set(err, DT_CONFIG, "custom model '%s': %s needs a name of 1 to %d characters", model, what,
				  DT_VAR_NAME_MAX - 1);
	if (t->dtype != DT_FLOAT32 && t->dtype != DT_INT32)
		return dt_err_set(err, DT_CONFIG, "custom model '%s': %s '%s' has unknown dtype %d", model, what, t->name,
				  (int)t->dtype);
	if (t->ndim < 1 || t->ndim > 3)
		return dt_err_set(err, DT_CONFIG, "custom model '%s': %s '%s' has rank %d, must be 1 to 3", model, what,
				  t->name, t->ndim);
	long e = 1;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 1 || (e *= t->shape[i]) > (1L << 28))
			return dt_err_set(err, DT_CONFIG, "custom model '%s': %s '%s' dimension %d is %d (1 and up, %ld values at most)",
					  model, what, t->name, i, t->shape[i], 1L << 28);
	}
	return DT_OK;
}

static void fill_io(struct dt_io_info *io, const struct dt_custom_tensor *t)
{
	memset(io, 0, sizeof(*io));
	snprintf(io->name, sizeof(io->name), "%s", t->name);
	io->dtype = t->dtype;
	io->ndim = t->ndim;
	io->count = 1;
	for (int i = 0; i < t->ndim; i++) {
		io->shape[i] = t->shape[i];
		io->count *= (size_t)t->shape[i];
	}
}

static enum dt_status check_def(const struct dt_custom_def *d, int max_batch, struct dt_err *err)
{
	const char *name = d->name && *d->name ? d->name : "custom";
	if (strlen(name) >= DT_HP_NAME_MAX)
		return dt_err_set(err, DT_CONFIG, "custom model name '%s' is longer than %d characters", name,
				  DT_HP_NAME_MAX - 1);
	if (!d->fn)
		return dt_err_set(err, DT_CONFIG, "custom model '%s': no callback (fn is NULL)", name);
	if (max_batch < 1 || max_batch > (1 << 20))
		return dt_err_set(err, DT_CONFIG, "custom model '%s': max_batch must be 1 to %d, got %d", name, 1 << 20,
				  max_batch);
	if (d->num_vars < 1 || d->num_vars > DT_CUSTOM_MAX_VARS || !d->vars)
		return dt_err_set(err, DT_CONFIG, "custom model '%s': needs 1 to %d variables, got %d", name,
				  DT_CUSTOM_MAX_VARS, d->num_vars);
	if (d->num_inputs < 1 || d->num_inputs > DT_MODEL_MAX_INPUTS || !d->inputs)
		return dt_err_set(err, DT_CONFIG, "custom model '%s': needs 1 to %d inputs, got %d", name,
				  DT_MODEL_MAX_INPUTS, d->num_inputs);
	for (int i = 0; i < d->num_inputs; i++) {
		enum dt_status st = check_tensor(name, "input", &d->inputs[i], err);
		if (st)
			return st;
	}
	enum dt_status st = check_tensor(name, "targets", &d->targets, err);
	if (st)
		return st;
	size_t total = 0;
	for (int i = 0; i < d->num_vars; i++) {
		const struct dt_custom_var *v = &d->vars[i];
		if (!v->name || !*v->name || strlen(v->name) >= DT_VAR_NAME_MAX)
			return dt_err_set(err, DT_CONFIG, "custom model '%s': variable %d needs a name of 1 to %d characters",
					  name, i, DT_VAR_NAME_MAX - 1);
		for (int j = 0; j < i; j++)
			if (strcmp(d->vars[j].name, v->name) == 0)
				return dt_err_set(err, DT_CONFIG, "custom model '%s': variable name '%s' is used twice", name,
						  v->name);
		if (v->ndim < 1 || v->ndim > DT_MAX_DIMS)
			return dt_err_set(err, DT_CONFIG, "custom model '%s': variable '%s' has rank %d, must be 1 to %d", name,
					  v->name, v->ndim, DT_MAX_DIMS);
		size_t count = 1;
		for (int k = 0; k < v->ndim; k++) {
			if (v->shape[k] < 1 || v->shape[k] > (1L << 30) || (count *= (size_t)v->shape[k]) > (1UL << 30))
				return dt_err_set(err, DT_CONFIG,
						  "custom model '%s': variable '%s' dimension %d is %lld (1 and up, 2^30 values at most)",
						  name, v->name, k, (long long)v->shape[k]);
		}
		if ((total += count) > (1UL << 31))
			return dt_err_set(err, DT_CONFIG, "custom model '%s': more than 2^31 parameters", name);
		struct dt_init in;
		st = dt_init_parse(v->init ? v->init : "glorot_uniform", &in, err);
		if (st) {
			dt_err_prefix(err, "custom model '%s': variable '%s'", name, v->name);
			return err ? (err->status = DT_CONFIG) : DT_CONFIG;
		}
	}
	return DT_OK;
}

/* The first non-finite gradient, as the variable and index. */
static int find_nonfinite(const struct dt_model *m, int *var, size_t *index)
{
	for (int i = 0; i < m->num_vars; i++) {
		const float *g = m->grads + m->vars[i].offset;
		for (size_t j = 0; j < m->vars[i].count; j++)
			if (!isfinite(g[j])) {
				*var = i;
				*index = j;
				return 1;
			}
	}
	return 0;
}

static enum dt_status custom_step(struct dt_model *m, const struct dt_model_batch *b, int training, struct dt_rng *rng,
				  struct dt_step_result *res, struct dt_err *err)
{
	struct custom_state *s = m->custom_state;
	if (training)
		memset(m->grads, 0, m->num_params * sizeof(float));
	struct dt_custom_ctx ctx = {
		.batch = b,
		.training = training,
		.rng = training ? rng : NULL,
		.num_vars = m->num_vars,
		.params = s->params,
		.grads = training ? s->grads : NULL,
		.loss = NAN,
	};
	enum dt_status st = s->fn(s->user, &ctx, err);
	if (st) {
		if (training)
			memset(m->grads, 0, m->num_params * sizeof(float));
		return dt_err_prefix(err, "custom model '%s': the callback failed", m->name);
	}
	res->loss = ctx.loss;
	res->correct = ctx.correct;
	res->counted = ctx.counted;
	if (!isfinite(ctx.loss)) {
		if (training)
			memset(m->grads, 0, m->num_params * sizeof(float));
		return dt_err_set(err, DT_RUNTIME, "custom model '%s': the callback's loss is %g; the step is not trained on",
				  m->name, (double)ctx.loss);
	}
	int var;
	size_t index;
	if (training && find_nonfinite(m, &var, &index)) {
		const float bad = m->grads[m->vars[var].offset + index];
		memset(m->grads, 0, m->num_params * sizeof(float));
		return dt_err_set(err, DT_RUNTIME,
				  "custom model '%s': the callback wrote %g into the gradient of '%s' at index %zu; the step "
				  "is not trained on",
				  m->name, (double)bad, m->vars[var].name, index);
	}
	return DT_OK;
}

enum dt_status dt_model_new_custom(const struct dt_custom_def *def, int max_batch, struct dt_model **out,
				   struct dt_err *err)
{
	if (!out)
		return dt_err_set(err, DT_USAGE, "dt_model_new_custom: output pointer is NULL");
	*out = NULL;
	if (!def)
		return dt_err_set(err, DT_USAGE, "dt_model_new_custom: definition is NULL");
	enum dt_status st = check_def(def, max_batch, err);
	if (st)
		return st;
	struct dt_model *m = dt_xcalloc(1, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "%s", def->name && *def->name ? def->name : "custom");
	m->max_batch = max_batch;
	m->loss = DT_LOSS_CUSTOM;
	m->num_inputs = def->num_inputs;
	for (int i = 0; i < def->num_inputs; i++)
		fill_io(&m->inputs[i], &def->inputs[i]);
	fill_io(&m->target, &def->targets);
	for (int i = 0; i < def->num_vars; i++) {
		const struct dt_custom_var *v = &def->vars[i];
		struct dt_init in;
		DT_ASSERT(dt_init_parse(v->init ? v->init : "glorot_uniform", &in, NULL) == DT_OK);
		dt__model_add_var(m, v->name, NULL, v->ndim, v->shape, v->decay != 0, in);
	}
	dt__model_alloc_params(m);
	struct custom_state *s = dt_xcalloc(1, sizeof(*s));
	s->fn = def->fn;
	s->user = def->user;
	s->params = dt_xcalloc((size_t)m->num_vars, sizeof(float *));
	s->grads = dt_xcalloc((size_t)m->num_vars, sizeof(float *));
	for (int i = 0; i < m->num_vars; i++) {
		s->params[i] = m->params + m->vars[i].offset;
		s->grads[i] = m->grads + m->vars[i].offset;
	}
	m->custom = custom_step;
	m->custom_state = s;
	m->custom_free = custom_free;
	dt_layer_shape_only(&m->custom_layer, DT_LAYER_CUSTOM, m->name, (struct dt_shape){ 1, 1, 1 },
			    (struct dt_shape){ 1, 1, 1 });
	m->custom_layer.kernel_count = m->num_params;
	dt_layer_bind(&m->custom_layer, m->params, m->grads);
	*out = m;
	return DT_OK;
}
