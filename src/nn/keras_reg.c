/*
 * Keras's regularizer and constraint fields (nn/regularize.h) onto the
 * graph nodes a layer made. Read in every spelling Keras writes them:
 *   Keras 2 / tf.keras   {"class_name": "L1L2", "config": {"l1": 0.0, "l2": 0.01}},
 *                        "L2" with {"l2": ...}, "L1" with {"l1": ...}
 *   Keras 3              the same with "module" and "registered_name"
 *   TF.js                "L1L2" (its l1() and l2() make one), or "L1"/"L2"
 *   a string             "l1", "l2", "l1_l2": Keras's defaults (0.01 each)
 * Constraints: MaxNorm, NonNeg, UnitNorm, MinMaxNorm (TF.js: "maxNorm",
 * "nonNeg", "unitNorm", "minMaxNorm" too) with Keras's defaults and an
 * axis as an integer or a list, negative ones counted from the end.
 * Keras 3's OrthogonalRegularizer(factor, mode rows or columns) on a Dense
 * kernel. Any other class is refused naming the field.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "nn/keras_impl.h"
#include "nn/regularize.h"

#define FAIL(...) dt__keras_fail(k, layer, cls, __VA_ARGS__)

/* One variable's fields in a layer's config: which variable (regularize.h's
 * `which`) and its rank, for the constraint's axes. */
struct wfield {
	const char *reg, *con;
	int which, rank;
};

/* The fields of each class; rank 0: read from the node's input (dense). */
static const struct wfield *fields_of(const char *cls, int *n)
{
	static const struct wfield dense[] = { { "kernel_regularizer", "kernel_constraint", 0, 2 },
					       { "bias_regularizer", "bias_constraint", 1, 1 } };
	static const struct wfield conv[] = { { "kernel_regularizer", "kernel_constraint", 0, 4 },
					      { "bias_regularizer", "bias_constraint", 1, 1 } };
	static const struct wfield dw[] = { { "depthwise_regularizer", "depthwise_constraint", 0, 4 },
					    { "bias_regularizer", "bias_constraint", 1, 1 } };
	static const struct wfield sep[] = { { "depthwise_regularizer", "depthwise_constraint", 3, 4 },
					     { "pointwise_regularizer", "pointwise_constraint", 0, 4 },
					     { "bias_regularizer", "bias_constraint", 1, 1 } };
	static const struct wfield norm[] = { { "gamma_regularizer", "gamma_constraint", 0, 1 },
					      { "beta_regularizer", "beta_constraint", 1, 1 } };
	*n = 0;
	if (strcmp(cls, "Dense") == 0)
		return *n = 2, dense;
	if (strcmp(cls, "Conv2D") == 0)
		return *n = 2, conv;
	if (strcmp(cls, "DepthwiseConv2D") == 0)
		return *n = 2, dw;
	if (strcmp(cls, "SeparableConv2D") == 0)
		return *n = 3, sep;
	if (strcmp(cls, "BatchNormalization") == 0 || strcmp(cls, "LayerNormalization") == 0)
		return *n = 2, norm;
	return NULL;
}

/* Layers whose output may carry an activity_regularizer. */
static int takes_activity(const char *cls)
{
	static const char *const none[] = { "InputLayer", "BatchNormalization", "LayerNormalization", NULL };
	for (int i = 0; none[i]; i++)
		if (strcmp(cls, none[i]) == 0)
			return 0;
	return 1;
}

int dt__keras_reg_field(const char *cls, const char *key)
{
	int n;
	const struct wfield *f = fields_of(cls, &n);
	for (int i = 0; i < n; i++)
		if (strcmp(key, f[i].reg) == 0 || strcmp(key, f[i].con) == 0)
			return 1;
	return strcmp(key, "activity_regularizer") == 0 && takes_activity(cls);
}

static enum dt_status factor(struct dt__keras *k, const char *layer, const char *cls, const char *key, json_t *c,
			     const char *name, double dflt, float *out)
{
	json_t *v = json_object_get(c, name);
	double d = dflt;
	if (v && !json_is_null(v)) {
		if (!json_is_number(v))
			return FAIL("field '%s': '%s' must be a number", key, name);
		d = json_number_value(v);
	}
	if (!(d >= 0.0 && d <= 1e6))
		return FAIL("field '%s': '%s' is %g (supported: 0 to 1e6)", key, name, d);
	*out = (float)d;
	return DT_OK;
}

static enum dt_status get_reg(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *key,
			      struct dt_regularizer *out)
{
	json_t *v = json_object_get(cfg, key);
	*out = (struct dt_regularizer){ 0 };
	if (!v || json_is_null(v))
		return DT_OK;
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		if (strcmp(s, "l1") == 0 || strcmp(s, "L1") == 0)
			out->l1 = 0.01f;
		else if (strcmp(s, "l2") == 0 || strcmp(s, "L2") == 0)
			out->l2 = 0.01f;
		else if (strcmp(s, "l1_l2") == 0 || strcmp(s, "L1L2") == 0)
			out->l1 = out->l2 = 0.01f;
		else
			return FAIL("field '%s' is '%s' (supported: L1, L2, L1L2)", key, s);
		return DT_OK;
	}
	const char *name = dt__keras_class(v);
	json_t *c = json_object_get(v, "config");
	if (!name)
		return FAIL("field '%s' must be a regularizer (an object with class_name and config)", key);
	enum dt_status st = DT_OK;
	if (strcmp(name, "L1L2") == 0 || strcmp(name, "l1_l2") == 0) {
		if (!(st = factor(k, layer, cls, key, c, "l1", 0.0, &out->l1)))
			st = factor(k, layer, cls, key, c, "l2", 0.0, &out->l2);
	} else if (strcmp(name, "L1") == 0 || strcmp(name, "l1") == 0) {
		st = factor(k, layer, cls, key, c, "l1", 0.01, &out->l1);
	} else if (strcmp(name, "L2") == 0 || strcmp(name, "l2") == 0) {
		st = factor(k, layer, cls, key, c, "l2", 0.01, &out->l2);
	} else if (strcmp(name, "OrthogonalRegularizer") == 0 || strcmp(name, "orthogonal_regularizer") == 0) {
		/* Keras 3 raises on a kernel that is not rank 2: Dense's only */
		if (strcmp(cls, "Dense") != 0 || strcmp(key, "kernel_regularizer") != 0)
			return FAIL("field '%s' is an OrthogonalRegularizer (supported on a Dense kernel_regularizer "
				    "only: it needs a rank-2 weight)", key);
		const char *mode = json_string_value(json_object_get(c, "mode"));
		if (mode && strcmp(mode, "rows") != 0 && strcmp(mode, "columns") != 0)
			return FAIL("field '%s': mode '%s' (supported: rows, columns)", key, mode);
		out->orth_cols = mode && strcmp(mode, "columns") == 0;
		st = factor(k, layer, cls, key, c, "factor", 0.01, &out->orth);
	} else {
		return FAIL("field '%s' is regularizer '%s' (supported: L1, L2, L1L2, OrthogonalRegularizer)", key,
			    name);
	}
	return st;
}

/* The axes of a constraint's "axis" (int or list) for a variable of `rank`. */
static enum dt_status get_axes(struct dt__keras *k, const char *layer, const char *cls, const char *key, json_t *c,
			       int rank, unsigned *axes)
{
	json_t *a = json_object_get(c, "axis");
	*axes = 0;
	if (!a || json_is_null(a)) {
		*axes = 1; /* Keras's default: axis 0 */
		return DT_OK;
	}
	const size_t n = json_is_array(a) ? json_array_size(a) : 1;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_is_array(a) ? json_array_get(a, i) : a;
		if (!json_is_integer(e) || json_integer_value(e) < -rank || json_integer_value(e) >= rank)
			return FAIL("field '%s': 'axis' must be integers from %d to %d (the variable has rank %d)", key, -rank,
				    rank - 1, rank);
		const int ax = (int)json_integer_value(e);
		*axes |= 1u << (ax < 0 ? ax + rank : ax);
	}
	return DT_OK;
}

static enum dt_status get_con(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *key,
			      int rank, struct dt_constraint *out)
{
	json_t *v = json_object_get(cfg, key);
	*out = (struct dt_constraint){ .kind = DT_CONSTRAINT_NONE };
	if (!v || json_is_null(v))
		return DT_OK;
	const char *name = json_is_string(v) ? json_string_value(v) : dt__keras_class(v);
	json_t *c = json_object_get(v, "config");
	if (!name)
		return FAIL("field '%s' must be a constraint (an object with class_name and config)", key);
	enum dt_status st = DT_OK;
	if (strcasecmp(name, "NonNeg") == 0 || strcmp(name, "non_neg") == 0) {
		out->kind = DT_CONSTRAINT_NON_NEG;
	} else if (strcasecmp(name, "MaxNorm") == 0 || strcmp(name, "max_norm") == 0) {
		out->kind = DT_CONSTRAINT_MAX_NORM;
		if (!(st = factor(k, layer, cls, key, c, "max_value", 2.0, &out->max_value)))
			st = get_axes(k, layer, cls, key, c, rank, &out->axes);
	} else if (strcasecmp(name, "UnitNorm") == 0 || strcmp(name, "unit_norm") == 0) {
		out->kind = DT_CONSTRAINT_UNIT_NORM;
		st = get_axes(k, layer, cls, key, c, rank, &out->axes);
	} else if (strcasecmp(name, "MinMaxNorm") == 0 || strcmp(name, "min_max_norm") == 0) {
		out->kind = DT_CONSTRAINT_MIN_MAX_NORM;
		if (!(st = factor(k, layer, cls, key, c, "min_value", 0.0, &out->min_value)) &&
		    !(st = factor(k, layer, cls, key, c, "max_value", 1.0, &out->max_value)) &&
		    !(st = factor(k, layer, cls, key, c, "rate", 1.0, &out->rate)))
			st = get_axes(k, layer, cls, key, c, rank, &out->axes);
		if (!st && (out->min_value > out->max_value || out->rate > 1.0f))
			return FAIL("field '%s': want min_value <= max_value and rate from 0 to 1", key);
	} else {
		return FAIL("field '%s' is constraint '%s' (supported: MaxNorm, NonNeg, UnitNorm, MinMaxNorm)", key, name);
	}
	return st;
}

/* A softmax the loss took over: an output regularizer would see logits. */
static int folded_softmax(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg)
{
	if (!k->output || strcmp(layer, k->output) != 0)
		return 0;
	json_t *a = json_object_get(cfg, "activation");
	const char *s = json_is_object(a) ? json_string_value(json_object_get(a, "config")) : json_string_value(a);
	return strcmp(cls, "Softmax") == 0 || (s && strcmp(s, "softmax") == 0);
}

enum dt_status dt__keras_reg(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *node,
			     const char *out)
{
	int n;
	const struct wfield *f = fields_of(cls, &n);
	const int no_bias = json_is_false(json_object_get(cfg, "use_bias"));
	for (int i = 0; i < n; i++) {
		struct dt_regularizer r;
		struct dt_constraint c;
		int rank = f[i].rank;
		if (f[i].which == 1 && no_bias)
			continue; /* no bias weight: Keras ignores its regularizer and constraint */
		if (i == 0 && strcmp(cls, "Dense") == 0)
			rank = 2; /* (IN, OUT) however many axes the input has */
		enum dt_status st = get_reg(k, layer, cls, cfg, f[i].reg, &r);
		if (!st)
			st = get_con(k, layer, cls, cfg, f[i].con, rank, &c);
		if (st)
			return st;
		if (dt_regularizer_on(r) && dt_graph_set_regularizer(k->g, node, f[i].which, r, 0, k->err))
			return dt_err_prefix(k->err, "keras model '%s': layer '%s' (%s): field '%s'", k->source, layer, cls,
					     f[i].reg);
		if (c.kind != DT_CONSTRAINT_NONE && dt_graph_set_constraint(k->g, node, f[i].which, &c, f[i].con, k->err))
			return dt_err_prefix(k->err, "keras model '%s': layer '%s' (%s): field '%s'", k->source, layer, cls,
					     f[i].con);
	}
	if (!takes_activity(cls))
		return DT_OK;
	struct dt_regularizer r;
	enum dt_status st = get_reg(k, layer, cls, cfg, "activity_regularizer", &r);
	if (st || !dt_regularizer_on(r))
		return st;
	if (folded_softmax(k, layer, cls, cfg))
		return FAIL("field 'activity_regularizer' on the output layer, whose softmax the loss takes over "
			    "(supported: on any other layer, or on a linear output)");
	if (dt_graph_set_regularizer(k->g, out, 2, r, k->activity_mean, k->err))
		return dt_err_prefix(k->err, "keras model '%s': layer '%s' (%s): field 'activity_regularizer'", k->source,
				     layer, cls);
	return DT_OK;
}
