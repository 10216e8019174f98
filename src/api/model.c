/*
 * model.c — the public model handle: inputs, a custom model's variables and
 * callback, the sticky first error, and running a model on one batch.
 *
 * Builder calls record the FIRST error in m->first and turn every later
 * call into a no-op returning -1 (include/dtrain.h explains why);
 * dtrain_model_check reports it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/alloc.h"
#include "base/rng.h"

dtrain_model *dtrain_model_new(void)
{
	dtrain_model *m = calloc(1, sizeof(*m));
	if (m)
		dt_err_clear(&m->first);
	return m;
}

void dtrain_model_free(dtrain_model *m)
{
	if (!m)
		return;
	free(m->vars);
	free(m);
}

/* Records the first error of a builder call; returns -1 for the caller to return. */
__attribute__((format(printf, 3, 4))) static int fail(dtrain_model *m, enum dt_status st, const char *fmt, ...)
{
	if (m->first.status != DT_OK)
		return -1;
	m->first.status = st;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->first.msg, sizeof(m->first.msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* Common checks of a builder call: the model exists, holds no error, is not frozen. */
static int usable(dtrain_model *m, const char *fn)
{
	if (!m)
		return 0;
	if (m->first.status != DT_OK)
		return 0;
	if (m->frozen) {
		fail(m, DT_USAGE, "%s: the model is used by a session and cannot change", fn);
		return 0;
	}
	return 1;
}

static int valid_name(const char *name)
{
	if (!name || !*name || strlen(name) >= DT_API_NAME_MAX)
		return 0;
	for (const char *p = name; *p; p++)
		if (!(*p == '_' || *p == '/' || *p == '-' || *p == '.' || (*p >= '0' && *p <= '9') ||
		      (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
			return 0;
	return 1;
}

/* Checks a shape and returns its element count, or -1 after recording why. */
static int64_t shape_elems(dtrain_model *m, const char *fn, const char *name, int ndim, const int64_t *shape,
			   int scalar_ok)
{
	if (ndim < (scalar_ok ? 0 : 1) || ndim > DT_API_MAX_DIMS)
		return fail(m, DT_CONFIG, "%s '%s': %d dimensions; give %d to %d", fn, name, ndim, scalar_ok ? 0 : 1,
			    DT_API_MAX_DIMS);
	if (ndim > 0 && !shape)
		return fail(m, DT_USAGE, "%s '%s': shape is NULL for %d dimensions", fn, name, ndim);
	int64_t n = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 1 || shape[i] > DT_API_MAX_ELEMS || n * shape[i] > DT_API_MAX_ELEMS)
			return fail(m, DT_CONFIG, "%s '%s': dimension %d is %lld; each must be >= 1 and the product <= %lld",
				    fn, name, i, (long long)shape[i], (long long)DT_API_MAX_ELEMS);
		n *= shape[i];
	}
	return n;
}

int dt__api_input_index(const dtrain_model *m, const char *name)
{
	if (!m || !name)
		return -1;
	for (int i = 0; i < m->ninputs; i++)
		if (strcmp(m->inputs[i].name, name) == 0)
			return i;
	return -1;
}

dtrain_node dtrain_input(dtrain_model *m, const char *name, dtrain_dtype dtype, int ndim, const int64_t *shape)
{
	if (!usable(m, "dtrain_input"))
		return -1;
	if (!valid_name(name))
		return fail(m, DT_USAGE, "dtrain_input: name '%s' is not 1-%d letters, digits, '_', '/', '-', '.'",
			    name ? name : "(null)", DT_API_NAME_MAX - 1);
	if (dt__api_input_index(m, name) >= 0)
		return fail(m, DT_CONFIG, "dtrain_input: an input is already called '%s'", name);
	if (dtype != DTRAIN_FLOAT32 && dtype != DTRAIN_INT32)
		return fail(m, DT_USAGE, "dtrain_input '%s': dtype %d is not DTRAIN_FLOAT32 or DTRAIN_INT32", name,
			    (int)dtype);
	if (m->ninputs == DT_API_MAX_INPUTS)
		return fail(m, DT_CONFIG, "dtrain_input '%s': a model has at most %d inputs", name, DT_API_MAX_INPUTS);
	int64_t n = shape_elems(m, "dtrain_input", name, ndim, shape, 1);
	if (n < 0)
		return -1;
	struct dt__api_input *in = &m->inputs[m->ninputs];
	memset(in, 0, sizeof(*in));
	snprintf(in->name, sizeof(in->name), "%s", name);
	in->dtype = dtype;
	in->ndim = ndim;
	for (int i = 0; i < ndim; i++)
		in->shape[i] = shape[i];
	in->per_example = n;
	return m->ninputs++;
}

int dtrain_variable(dtrain_model *m, const char *name, int ndim, const int64_t *shape, dtrain_init init, float scale)
{
	if (!usable(m, "dtrain_variable"))
		return -1;
	if (m->layers)
		return fail(m, DT_USAGE, "dtrain_variable: the model is a layer graph; a model is a layer graph or a "
					 "custom model, not both");
	if (!valid_name(name))
		return fail(m, DT_USAGE, "dtrain_variable: name '%s' is not 1-%d letters, digits, '_', '/', '-', '.'",
			    name ? name : "(null)", DT_API_NAME_MAX - 1);
	for (int i = 0; i < m->nvars; i++)
		if (strcmp(m->vars[i].name, name) == 0)
			return fail(m, DT_CONFIG, "dtrain_variable: a variable is already called '%s'", name);
	if ((int)init < DTRAIN_INIT_ZEROS || (int)init > DTRAIN_INIT_HE_NORMAL)
		return fail(m, DT_USAGE, "dtrain_variable '%s': initializer %d is not a dtrain_init", name, (int)init);
	if (!isfinite(scale))
		return fail(m, DT_USAGE, "dtrain_variable '%s': scale is not finite", name);
	int64_t n = shape_elems(m, "dtrain_variable", name, ndim, shape, 0);
	if (n < 0)
		return -1;
	if ((int64_t)m->num_params + n > DT_API_MAX_ELEMS)
		return fail(m, DT_CONFIG, "dtrain_variable '%s': the model would have more than %lld parameters", name,
			    (long long)DT_API_MAX_ELEMS);
	if (m->nvars == m->vars_cap) {
		m->vars_cap = m->vars_cap ? 2 * m->vars_cap : 8;
		m->vars = dt_xrealloc(m->vars, (size_t)m->vars_cap * sizeof(*m->vars));
	}
	struct dt__api_var *v = &m->vars[m->nvars];
	memset(v, 0, sizeof(*v));
	snprintf(v->name, sizeof(v->name), "%s", name);
	v->ndim = ndim;
	for (int i = 0; i < ndim; i++)
		v->shape[i] = shape[i];
	v->count = n;
	/* 16-float (64-byte) alignment of each variable keeps vector loops aligned. */
	v->offset = (m->num_params + 15) & ~(size_t)15;
	m->num_params = v->offset + (size_t)n;
	v->init = init;
	v->scale = scale;
	return m->nvars++;
}

void dtrain_model_set_forward_backward(dtrain_model *m, dtrain_forward_backward_fn fn, void *user)
{
	if (!usable(m, "dtrain_model_set_forward_backward"))
		return;
	if (m->layers) {
		fail(m, DT_USAGE, "dtrain_model_set_forward_backward: the model is a layer graph; a model is a layer "
				  "graph or a custom model, not both");
		return;
	}
	if (!fn) {
		fail(m, DT_USAGE, "dtrain_model_set_forward_backward: the callback is NULL");
		return;
	}
	m->fb = fn;
	m->user = user;
}

dtrain_status dtrain_model_check(const dtrain_model *m, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!m)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "the model is NULL");
	if (m->first.status != DT_OK)
		return (dtrain_status)dt_err_set(e, m->first.status, "%s", m->first.msg);
	if (m->ninputs == 0) {
		dt_err_set(e, DT_CONFIG, "the model has no input");
		dt_err_hint(e, "declare what the data fills with dtrain_input");
		return DTRAIN_CONFIG;
	}
	if (!m->layers) {
		if (!m->fb) {
			dt_err_set(e, DT_CONFIG, "the model has no layers and no forward/backward callback");
			dt_err_hint(e, "build layers ending in a loss, or call dtrain_model_set_forward_backward");
			return DTRAIN_CONFIG;
		}
		if (m->nvars == 0) {
			dt_err_set(e, DT_CONFIG, "the custom model has no variable to train");
			dt_err_hint(e, "declare its parameters with dtrain_variable");
			return DTRAIN_CONFIG;
		}
	}
	return DTRAIN_OK;
}

int dtrain_model_num_variables(const dtrain_model *m)
{
	return m ? m->nvars : 0;
}

const char *dtrain_model_variable_name(const dtrain_model *m, int var)
{
	return m && var >= 0 && var < m->nvars ? m->vars[var].name : NULL;
}

int64_t dtrain_model_variable_size(const dtrain_model *m, int var)
{
	return m && var >= 0 && var < m->nvars ? m->vars[var].count : 0;
}

/* ---- initialization ---- */

void dt__api_init_params(const dtrain_model *m, float *params, uint64_t seed)
{
	for (int i = 0; i < m->nvars; i++) {
		const struct dt__api_var *v = &m->vars[i];
		float *p = params + v->offset;
		char purpose[DT_API_NAME_MAX + 8];
		snprintf(purpose, sizeof(purpose), "init/%s", v->name);
		struct dt_rng rng;
		dt_rng_derive(&rng, seed, purpose, 0);
		/* Fans as Keras computes them: the last dimension is fan-out,
		 * the rest (times the receptive field) fan-in. */
		double fan_out = (double)v->shape[v->ndim - 1];
		double fan_in = v->ndim > 1 ? (double)v->count / fan_out : fan_out;
		for (int64_t k = 0; k < v->count; k++) {
			switch (v->init) {
			case DTRAIN_INIT_ZEROS: p[k] = 0.0f; break;
			case DTRAIN_INIT_CONSTANT: p[k] = v->scale; break;
			case DTRAIN_INIT_NORMAL: p[k] = v->scale * dt_rng_normal(&rng); break;
			case DTRAIN_INIT_UNIFORM: p[k] = v->scale * (2.0f * dt_rng_uniform(&rng) - 1.0f); break;
			case DTRAIN_INIT_GLOROT_UNIFORM: {
				float lim = (float)sqrt(6.0 / (fan_in + fan_out));
				p[k] = lim * (2.0f * dt_rng_uniform(&rng) - 1.0f);
				break;
			}
			case DTRAIN_INIT_HE_NORMAL: p[k] = (float)sqrt(2.0 / fan_in) * dt_rng_normal(&rng); break;
			}
		}
	}
}

/* ---- one batch ---- */

int dtrain_step_batch_size(const dtrain_step *s)
{
	return s ? s->batch_size : 0;
}

int dtrain_step_training(const dtrain_step *s)
{
	return s ? s->training : 0;
}

static const void *step_input(const dtrain_step *s, const char *name, dtrain_dtype dtype)
{
	int i = s ? dt__api_input_index(s->model, name) : -1;
	return i >= 0 && s->model->inputs[i].dtype == dtype ? s->inputs[i] : NULL;
}

const float *dtrain_step_input_float(const dtrain_step *s, const char *name)
{
	return step_input(s, name, DTRAIN_FLOAT32);
}

const int32_t *dtrain_step_input_int32(const dtrain_step *s, const char *name)
{
	return step_input(s, name, DTRAIN_INT32);
}

const float *dtrain_step_param(const dtrain_step *s, int var)
{
	if (!s || var < 0 || var >= s->model->nvars)
		return NULL;
	return s->params + s->model->vars[var].offset;
}

float *dtrain_step_grad(dtrain_step *s, int var)
{
	if (!s || !s->grads || var < 0 || var >= s->model->nvars)
		return NULL;
	return s->grads + s->model->vars[var].offset;
}

void dtrain_step_set_loss(dtrain_step *s, double loss)
{
	if (s) {
		s->loss = loss;
		s->loss_set = 1;
	}
}

void dtrain_step_set_correct(dtrain_step *s, int64_t correct)
{
	if (s)
		s->correct = correct;
}

enum dt_status dt__api_model_run(struct dtrain_step *step, struct dt_err *err)
{
	const dtrain_model *m = step->model;
	step->loss = 0;
	step->loss_set = 0;
	step->correct = -1;
	if (step->grads)
		memset(step->grads, 0, m->num_params * sizeof(float));
	dtrain_error cb_err;
	dt_err_clear(&cb_err.e);
	dtrain_status st = m->fb(m->user, step, &cb_err);
	if (st != DTRAIN_OK) {
		enum dt_status ds = (int)st > 0 && (int)st < DT_STATUS_COUNT ? (enum dt_status)st : DT_RUNTIME;
		return dt_err_set(err, ds, "the forward/backward callback failed (%s): %s", dtrain_status_name(st),
				  cb_err.e.msg[0] ? cb_err.e.msg : "it gave no message");
	}
	if (!step->loss_set) {
		dt_err_set(err, DT_USAGE, "the forward/backward callback returned without a loss");
		dt_err_hint(err, "call dtrain_step_set_loss with the batch's mean loss");
		return DT_USAGE;
	}
	if (!isfinite(step->loss))
		return dt_err_set(err, DT_DATA, "the forward/backward callback gave a loss of %g", step->loss);
	if (step->grads) {
		for (int i = 0; i < m->nvars; i++) {
			const float *g = step->grads + m->vars[i].offset;
			for (int64_t k = 0; k < m->vars[i].count; k++)
				if (!isfinite(g[k]))
					return dt_err_set(err, DT_DATA,
							  "the forward/backward callback wrote %g into the gradient of "
							  "'%s' at element %lld",
							  (double)g[k], m->vars[i].name, (long long)k);
		}
	}
	return DT_OK;
}
