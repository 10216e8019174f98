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
#include "nn/custom.h"
#include "nn/graph.h"

dtrain_model *dtrain_model_new(void)
{
	dtrain_model *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	dt_err_clear(&m->first);
	m->loss_kind = -1;
	m->loss_output = m->loss_target = -1;
	return m;
}

void dtrain_model_free(dtrain_model *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->nkept; i++)
		free(m->kept[i]);
	free(m->kept);
	dt_model_free(m->probe);
	dt_graph_free(m->eager);
	free(m->nodes);
	free(m->vars);
	free(m);
}

void dt__api_model_keep(const dtrain_model *cm, void *p)
{
	dtrain_model *m = (dtrain_model *)(uintptr_t)cm; /* bookkeeping only: the model's meaning does not change */
	m->kept = dt_xrealloc(m->kept, (size_t)(m->nkept + 1) * sizeof(*m->kept));
	m->kept[m->nkept++] = p;
}

/* Records the first error of a builder call; returns -1 for the caller to return. */
int dt__api_fail(dtrain_model *m, enum dt_status st, const char *fmt, ...)
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
int dt__api_usable(dtrain_model *m, const char *fn)
{
	if (!m)
		return 0;
	if (m->first.status != DT_OK)
		return 0;
	if (m->frozen) {
		dt__api_fail(m, DT_USAGE, "%s: the model is used by a session and cannot change", fn);
		return 0;
	}
	return 1;
}

/* Names: 1 to max-1 of [A-Za-z0-9_.-], and '/' where slash is set. */
static int valid_name(const char *name, size_t max, int slash)
{
	if (!name || !*name || strlen(name) >= max)
		return 0;
	for (const char *p = name; *p; p++)
		if (!(*p == '_' || (*p == '/' && slash) || *p == '-' || *p == '.' || (*p >= '0' && *p <= '9') ||
		      (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
			return 0;
	return 1;
}

/* Checks a shape and returns its element count, or -1 after recording why. */
static int64_t shape_elems(dtrain_model *m, const char *fn, const char *name, int ndim, const int64_t *shape,
			   int scalar_ok)
{
	if (ndim < (scalar_ok ? 0 : 1) || ndim > DT_API_MAX_DIMS)
		return dt__api_fail(m, DT_CONFIG, "%s '%s': %d dimensions; give %d to %d", fn, name, ndim, scalar_ok ? 0 : 1,
			    DT_API_MAX_DIMS);
	if (ndim > 0 && !shape)
		return dt__api_fail(m, DT_USAGE, "%s '%s': shape is NULL for %d dimensions", fn, name, ndim);
	int64_t n = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 1 || shape[i] > DT_API_MAX_ELEMS || n * shape[i] > DT_API_MAX_ELEMS)
			return dt__api_fail(m, DT_CONFIG, "%s '%s': dimension %d is %lld; each must be >= 1 and the product <= %lld",
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
	if (!dt__api_usable(m, "dtrain_input"))
		return -1;
	if (!valid_name(name, 32, 0))
		return dt__api_fail(m, DT_USAGE, "dtrain_input: name '%s' is not 1 to 31 letters, digits, '_', '-', '.'",
			    name ? name : "(null)");
	if (dt__api_input_index(m, name) >= 0)
		return dt__api_fail(m, DT_CONFIG, "dtrain_input: an input is already called '%s'", name);
	if (dtype != DTRAIN_FLOAT32 && dtype != DTRAIN_INT32)
		return dt__api_fail(m, DT_USAGE, "dtrain_input '%s': dtype %d is not DTRAIN_FLOAT32 or DTRAIN_INT32", name,
			    (int)dtype);
	if (m->ninputs == DT_API_MAX_INPUTS)
		return dt__api_fail(m, DT_CONFIG, "dtrain_input '%s': a model has at most %d inputs", name, DT_API_MAX_INPUTS);
	if (ndim > 3)
		return dt__api_fail(m, DT_CONFIG, "dtrain_input '%s': %d dimensions; an input has 0 to 3", name, ndim);
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
	m->ninputs++;
	return dt__api_input_node(m, m->ninputs - 1);
}

int dtrain_variable(dtrain_model *m, const char *name, int ndim, const int64_t *shape, dtrain_init init, float scale)
{
	if (!dt__api_usable(m, "dtrain_variable"))
		return -1;
	if (m->layers)
		return dt__api_fail(m, DT_USAGE, "dtrain_variable: the model is a layer graph; a model is a layer graph or a "
					 "custom model, not both");
	if (!valid_name(name, DT_API_NAME_MAX, 1))
		return dt__api_fail(m, DT_USAGE, "dtrain_variable: name '%s' is not 1 to %d letters, digits, '_', '/', '-', '.'",
			    name ? name : "(null)", DT_API_NAME_MAX - 1);
	for (int i = 0; i < m->nvars; i++)
		if (strcmp(m->vars[i].name, name) == 0)
			return dt__api_fail(m, DT_CONFIG, "dtrain_variable: a variable is already called '%s'", name);
	if ((int)init < DTRAIN_INIT_GLOROT_UNIFORM || (int)init > DTRAIN_INIT_TRUNCATED_NORMAL)
		return dt__api_fail(m, DT_USAGE, "dtrain_variable '%s': initializer %d is not a dtrain_init", name, (int)init);
	if (!isfinite(scale) || scale < 0)
		return dt__api_fail(m, DT_USAGE, "dtrain_variable '%s': scale %g is not a finite number >= 0", name, (double)scale);
	int64_t n = shape_elems(m, "dtrain_variable", name, ndim, shape, 0);
	if (n < 0)
		return -1;
	if ((int64_t)m->num_params + n > DT_API_MAX_ELEMS)
		return dt__api_fail(m, DT_CONFIG, "dtrain_variable '%s': the model would have more than %lld parameters", name,
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
	if (!dt__api_usable(m, "dtrain_model_set_forward_backward"))
		return;
	if (m->layers) {
		dt__api_fail(m, DT_USAGE, "dtrain_model_set_forward_backward: the model is a layer graph; a model is a layer "
				  "graph or a custom model, not both");
		return;
	}
	if (!fn) {
		dt__api_fail(m, DT_USAGE, "dtrain_model_set_forward_backward: the callback is NULL");
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
	if (m->layers)
		return (dtrain_status)dt__api_check_graph(m, e);
	{
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

/* A layer graph's variables come from its compiled model (m->probe, made
 * by a successful dtrain_model_check or dtrain_session_new). */
int dtrain_model_num_variables(const dtrain_model *m)
{
	if (!m)
		return 0;
	return m->layers ? (m->probe ? dt_model_num_variables(m->probe) : 0) : m->nvars;
}

const char *dtrain_model_variable_name(const dtrain_model *m, int var)
{
	if (!m || var < 0 || var >= dtrain_model_num_variables(m))
		return NULL;
	return m->layers ? dt_model_variable(m->probe, var)->name : m->vars[var].name;
}

int64_t dtrain_model_variable_size(const dtrain_model *m, int var)
{
	if (!m || var < 0 || var >= dtrain_model_num_variables(m))
		return 0;
	return m->layers ? (int64_t)dt_model_variable(m->probe, var)->count : m->vars[var].count;
}

enum dt_status dt__api_compile(const dtrain_model *m, int max_batch, struct dt_model **out,
			       int feeds[DT_API_MAX_INPUTS], int *target_feed, struct dt_err *err)
{
	return m->layers ? dt__api_compile_graph(m, "model", max_batch, out, feeds, target_feed, err)
			 : dt__api_compile_custom(m, max_batch, out, feeds, target_feed, err);
}

/* ---- inside the custom callback ---- */

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
	return s && var >= 0 && var < s->model->nvars ? s->params[var] : NULL;
}

float *dtrain_step_grad(dtrain_step *s, int var)
{
	return s && s->grads && var >= 0 && var < s->model->nvars ? s->grads[var] : NULL;
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

/* ---- compiling a custom model (nn/custom.h) ----
 * nn/ keeps the inputs and the targets of a batch apart; a public custom
 * model has inputs only, so its last input travels as the targets (and, when
 * it is the only one, as an input too): the callback finds every input by
 * its name whichever way it came. */

struct custom_adapter {
	const dtrain_model *m;
	int num_model_inputs; /* public inputs 0 .. n-1 are the nn/ inputs, in order */
};

static enum dt_status custom_fn(void *user, struct dt_custom_ctx *ctx, struct dt_err *err)
{
	const struct custom_adapter *a = user;
	const dtrain_model *m = a->m;
	dtrain_step step;
	memset(&step, 0, sizeof(step));
	step.model = m;
	step.batch_size = ctx->batch->size;
	step.training = ctx->training;
	for (int i = 0; i < a->num_model_inputs; i++)
		step.inputs[i] = ctx->batch->inputs[i].data;
	step.inputs[m->ninputs - 1] = ctx->batch->targets.data;
	step.params = ctx->params;
	step.grads = ctx->training ? ctx->grads : NULL;
	step.correct = -1;
	dtrain_error cb;
	dt_err_clear(&cb.e);
	dtrain_status st = m->fb(m->user, &step, &cb);
	if (st != DTRAIN_OK) {
		enum dt_status ds = (int)st > 0 && (int)st < DT_STATUS_COUNT ? (enum dt_status)st : DT_RUNTIME;
		return dt_err_set(err, ds, "the forward/backward callback failed (%s): %s", dtrain_status_name(st),
				  cb.e.msg[0] ? cb.e.msg : "it gave no message");
	}
	if (!step.loss_set) {
		dt_err_set(err, DT_USAGE, "the forward/backward callback returned without a loss");
		dt_err_hint(err, "call dtrain_step_set_loss with the batch's mean loss");
		return DT_USAGE;
	}
	ctx->loss = (float)step.loss; /* nn/custom.c refuses a loss or gradient that is not finite */
	if (step.correct >= 0) {
		ctx->correct = (int)step.correct;
		ctx->counted = step.batch_size;
	}
	return DT_OK;
}

static const char *const init_names[] = {
	[DTRAIN_INIT_GLOROT_UNIFORM] = "glorot_uniform", [DTRAIN_INIT_HE_NORMAL] = "he_normal",
	[DTRAIN_INIT_ZEROS] = "zeros", [DTRAIN_INIT_ONES] = "ones",
	[DTRAIN_INIT_NORMAL] = "random_normal", [DTRAIN_INIT_TRUNCATED_NORMAL] = "truncated_normal",
};

static void io_of(const struct dt__api_input *in, struct dt_custom_tensor *t)
{
	memset(t, 0, sizeof(*t));
	t->name = in->name;
	t->dtype = in->dtype == DTRAIN_INT32 ? DT_INT32 : DT_FLOAT32;
	t->ndim = in->ndim ? in->ndim : 1;
	for (int i = 0; i < 3; i++)
		t->shape[i] = i < in->ndim ? (int)in->shape[i] : 1;
}

enum dt_status dt__api_compile_custom(const dtrain_model *m, int max_batch, struct dt_model **out,
				      int feeds[DT_API_MAX_INPUTS], int *target_feed, struct dt_err *err)
{
	/* The adapter lives as long as the process's models of m: one per
	 * model, freed with the public model (m->adapters). */
	struct custom_adapter *a = dt_xcalloc(1, sizeof(*a));
	a->m = m;
	a->num_model_inputs = m->ninputs > 1 ? m->ninputs - 1 : 1;
	struct dt_custom_var *vars = dt_xcalloc((size_t)m->nvars, sizeof(*vars));
	char (*inits)[40] = dt_xcalloc((size_t)m->nvars, sizeof(*inits));
	for (int i = 0; i < m->nvars; i++) {
		const struct dt__api_var *v = &m->vars[i];
		vars[i].name = v->name;
		vars[i].ndim = v->ndim;
		for (int k = 0; k < v->ndim; k++)
			vars[i].shape[k] = v->shape[k];
		if ((v->init == DTRAIN_INIT_NORMAL || v->init == DTRAIN_INIT_TRUNCATED_NORMAL) && v->scale > 0)
			snprintf(inits[i], sizeof(inits[i]), "%s(%g)", init_names[v->init], (double)v->scale);
		else
			snprintf(inits[i], sizeof(inits[i]), "%s", init_names[v->init]);
		vars[i].init = inits[i];
		vars[i].decay = v->ndim > 1;
	}
	struct dt_custom_tensor ins[DT_API_MAX_INPUTS];
	for (int i = 0; i < a->num_model_inputs; i++) {
		io_of(&m->inputs[i], &ins[i]);
		feeds[i] = i;
	}
	struct dt_custom_def def = {
		.name = "custom", .num_vars = m->nvars, .vars = vars, .num_inputs = a->num_model_inputs, .inputs = ins,
		.fn = custom_fn, .user = a,
	};
	io_of(&m->inputs[m->ninputs - 1], &def.targets);
	*target_feed = m->ninputs - 1;
	enum dt_status st = dt_model_new_custom(&def, max_batch, out, err);
	free(vars);
	free(inits);
	if (st) {
		free(a);
		return st;
	}
	dt__api_model_keep(m, a);
	return DT_OK;
}
