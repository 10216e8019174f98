/*
 * Keras layers into graph nodes (nn/keras.h lists what is supported). Each
 * builder reads its config's fields, refuses values it does not implement
 * with the field's name and the supported set, and adds the node(s): the
 * main node keeps the Keras name (so its variables are Keras's), and an
 * activation the node cannot fuse follows as a helper node whose name has
 * a '.' and a counter.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/strutil.h"
#include "nn/keras_impl.h"

#define FAIL(...) dt__keras_fail(k, layer, cls, __VA_ARGS__)

/* Fields any layer may carry that change nothing here. */
static const char *const common_fields[] = { "name", "trainable", "dtype", "batch_input_shape", "batch_shape",
					     "input_shape", "seed", "autocast", "build_config", NULL };

static int in_list(const char *key, const char *const *list)
{
	for (int i = 0; list && list[i]; i++)
		if (strcmp(key, list[i]) == 0)
			return 1;
	return 0;
}

/* A field we do not know is refused unless it is null, false, 0, "" or empty. */
static int is_default(json_t *v)
{
	return !v || json_is_null(v) || json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0) ||
	       (json_is_string(v) && json_string_length(v) == 0) || (json_is_array(v) && json_array_size(v) == 0) ||
	       (json_is_object(v) && json_object_size(v) == 0);
}

static enum dt_status check_fields(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg,
				   const char *const *known)
{
	const char *key;
	json_t *v;
	json_object_foreach(cfg, key, v)
	{
		if (in_list(key, common_fields) || in_list(key, known) || is_default(v) || dt__keras_reg_field(cls, key))
			continue;
		char list[400] = "";
		size_t at = 0;
		for (int i = 0; known[i] && at < sizeof(list); i++)
			at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", i ? ", " : "", known[i]);
		return FAIL("field '%s' is not supported (supported fields: %s)", key, list[0] ? list : "none");
	}
	return DT_OK;
}

static enum dt_status get_int(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *key,
			      int dflt, int lo, int hi, int *out)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v)) {
		*out = dflt;
		return DT_OK;
	}
	if (json_is_array(v) && json_array_size(v) == 1) /* Keras 3 writes some as [n] */
		v = json_array_get(v, 0);
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return FAIL("field '%s' must be an integer from %d to %d", key, lo, hi);
	*out = (int)json_integer_value(v);
	return DT_OK;
}

static enum dt_status get_float(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg,
				const char *key, double dflt, double lo, double hi, float *out)
{
	json_t *v = json_object_get(cfg, key);
	double d = dflt;
	if (v && !json_is_null(v)) {
		if (!json_is_number(v))
			return FAIL("field '%s' must be a number", key);
		d = json_number_value(v);
	}
	if (!(d >= lo && d <= hi))
		return FAIL("field '%s' is %g, must be from %g to %g", key, d, lo, hi);
	*out = (float)d;
	return DT_OK;
}

static enum dt_status get_bool(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *key,
			       int dflt, int *out)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v)) {
		*out = dflt;
		return DT_OK;
	}
	if (!json_is_boolean(v))
		return FAIL("field '%s' must be true or false", key);
	*out = json_is_true(v);
	return DT_OK;
}

/* An int n (both n) or a list [a, b]. */
static enum dt_status get_pair(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *key,
			       int dflt, int lo, int hi, int out[2])
{
	json_t *v = json_object_get(cfg, key);
	out[0] = out[1] = dflt;
	if (!v || json_is_null(v))
		return DT_OK;
	if (json_is_integer(v)) {
		out[0] = out[1] = (int)json_integer_value(v);
	} else if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
		   json_is_integer(json_array_get(v, 1))) {
		out[0] = (int)json_integer_value(json_array_get(v, 0));
		out[1] = (int)json_integer_value(json_array_get(v, 1));
	} else {
		return FAIL("field '%s' must be an integer or a list of two", key);
	}
	if (json_is_integer(v) && (json_integer_value(v) < lo || json_integer_value(v) > hi))
		out[0] = lo - 1;
	if (out[0] < lo || out[0] > hi || out[1] < lo || out[1] > hi)
		return FAIL("field '%s' values must be from %d to %d", key, lo, hi);
	return DT_OK;
}

static enum dt_status get_padding(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg,
				  enum dt_padding *out)
{
	const char *p = json_string_value(json_object_get(cfg, "padding"));
	if (!p || strcmp(p, "valid") == 0)
		*out = DT_PADDING_VALID;
	else if (strcmp(p, "same") == 0)
		*out = DT_PADDING_SAME;
	else
		return FAIL("field 'padding' is '%s' (supported: valid, same)", p);
	return DT_OK;
}

static enum dt_status check_channels_last(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg)
{
	const char *f = json_string_value(json_object_get(cfg, "data_format"));
	if (f && strcmp(f, "channels_last") != 0)
		return FAIL("field 'data_format' is '%s' (supported: channels_last)", f);
	return DT_OK;
}

static const char *const act_names[] = { "linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "relu6", "swish" };

/* The activation in field `key` (a name, or Keras 3's object around one);
 * at the model's output a softmax becomes the loss's (linear here). */
static enum dt_status get_act(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *key,
			      enum dt_act *out)
{
	json_t *v = json_object_get(cfg, key);
	const char *a = json_string_value(v);
	if (json_is_object(v))
		a = json_string_value(json_object_get(v, "config"));
	if (!v || json_is_null(v))
		a = "linear";
	if (!a)
		return FAIL("field '%s' must be an activation name", key);
	int found = -1;
	for (int i = 0; i < (int)(sizeof(act_names) / sizeof(act_names[0])); i++)
		if (strcmp(a, act_names[i]) == 0)
			found = i;
	if (strcmp(a, "silu") == 0)
		found = DT_ACT_SWISH;
	if (found < 0)
		return FAIL("field '%s' is '%s' (supported: linear, relu, relu6, sigmoid, tanh, softmax, gelu, swish, silu)",
			    key, a);
	*out = (enum dt_act)found;
	if (k->output && strcmp(layer, k->output) == 0) {
		if (*out != DT_ACT_SOFTMAX && *out != DT_ACT_LINEAR)
			return FAIL("field '%s' is '%s' on the output layer (supported there: softmax or linear: the model "
				    "trains as a softmax classifier)",
				    key, a);
		*out = DT_ACT_LINEAR;
	}
	return DT_OK;
}

/* The initializer in field `key` as dt_init_parse text into out ("" when
 * the field is absent: the default). */
static enum dt_status get_init(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *key,
			       char *out, size_t cap)
{
	json_t *v = json_object_get(cfg, key);
	out[0] = '\0';
	if (!v || json_is_null(v))
		return DT_OK;
	const char *name = json_is_string(v) ? json_string_value(v) : dt__keras_class(v);
	json_t *c = json_object_get(v, "config");
	if (!name)
		return FAIL("field '%s' must be an initializer", key);
	double sd = json_is_number(json_object_get(c, "stddev")) ? json_number_value(json_object_get(c, "stddev")) : 0.05;
	double mean = json_is_number(json_object_get(c, "mean")) ? json_number_value(json_object_get(c, "mean")) : 0.0;
	static const struct {
		const char *keras, *ours;
	} simple[] = { { "GlorotUniform", "glorot_uniform" }, { "glorot_uniform", "glorot_uniform" },
		       { "GlorotNormal", "glorot_normal" },   { "glorot_normal", "glorot_normal" },
		       { "HeNormal", "he_normal" },           { "he_normal", "he_normal" },
		       { "HeUniform", "he_uniform" },         { "he_uniform", "he_uniform" },
		       { "LecunNormal", "lecun_normal" },     { "lecun_normal", "lecun_normal" },
		       { "LecunUniform", "lecun_uniform" },   { "lecun_uniform", "lecun_uniform" },
		       { "Zeros", "zeros" },                  { "zeros", "zeros" },
		       { "Ones", "ones" },                    { "ones", "ones" } };
	for (size_t i = 0; i < sizeof(simple) / sizeof(simple[0]); i++)
		if (strcmp(name, simple[i].keras) == 0) {
			snprintf(out, cap, "%s", simple[i].ours);
			return DT_OK;
		}
	if (mean != 0.0)
		return FAIL("field '%s': %s with mean %g (supported: mean 0)", key, name, mean);
	if (strcmp(name, "RandomNormal") == 0 || strcmp(name, "TruncatedNormal") == 0) {
		snprintf(out, cap, "%s(%.9g)", name[0] == 'R' ? "random_normal" : "truncated_normal", sd);
	} else if (strcmp(name, "RandomUniform") == 0) {
		json_t *lo = json_object_get(c, "minval"), *hi = json_object_get(c, "maxval");
		snprintf(out, cap, "random_uniform(%.9g,%.9g)", json_is_number(lo) ? json_number_value(lo) : -0.05,
			 json_is_number(hi) ? json_number_value(hi) : 0.05);
	} else if (strcmp(name, "Constant") == 0) {
		json_t *val = json_object_get(c, "value");
		snprintf(out, cap, "constant(%.9g)", json_is_number(val) ? json_number_value(val) : 0.0);
	} else if (strcmp(name, "VarianceScaling") == 0) {
		json_t *sc = json_object_get(c, "scale");
		const char *mode = json_string_value(json_object_get(c, "mode"));
		const char *dist = json_string_value(json_object_get(c, "distribution"));
		if (dist && strcmp(dist, "normal") == 0) /* Keras's old name for truncated_normal */
			dist = "truncated_normal";
		snprintf(out, cap, "variance_scaling(%.9g,%s,%s)", json_is_number(sc) ? json_number_value(sc) : 1.0,
			 mode ? mode : "fan_in", dist ? dist : "truncated_normal");
	} else {
		return FAIL("field '%s' is initializer '%s' (supported: GlorotUniform, GlorotNormal, HeNormal, HeUniform, "
			    "LecunNormal, LecunUniform, Zeros, Ones, Constant, RandomNormal, RandomUniform, "
			    "TruncatedNormal, VarianceScaling)",
			    key, name);
	}
	struct dt_init tmp;
	struct dt_err e2 = DT_ERR_INIT;
	if (dt_init_parse(out, &tmp, &e2))
		return FAIL("field '%s': %s", key, e2.msg);
	return DT_OK;
}

/* Graph failures (shapes that do not connect, bad names) are the file's. */
static enum dt_status graph_st(struct dt__keras *k, const char *layer, const char *cls, enum dt_status st)
{
	if (st)
		dt_err_prefix(k->err, "keras model '%s': layer '%s' (%s)", k->source, layer, cls);
	return st;
}

/* An activation node after `node` unless act is linear; out names the result. */
static enum dt_status then_act(struct dt__keras *k, const char *layer, const char *cls, const char *node,
			       enum dt_act act, char *out)
{
	snprintf(out, DT_LAYER_NAME_MAX, "%s", node);
	if (act == DT_ACT_LINEAR)
		return DT_OK;
	/* the layer's name cut on a character boundary to leave room for ".N" */
	const size_t keep = dt_utf8_prefix_len(layer, strnlen(layer, DT_LAYER_NAME_MAX - 8));
	snprintf(out, DT_LAYER_NAME_MAX, "%.*s.%d", (int)keep, layer, ++k->extra % 100000);
	return graph_st(k, layer, cls, dt_graph_activation(k->g, out, node, act, k->err));
}

static enum dt_status bias_and_init(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg)
{
	int use_bias = 1;
	char bi[96];
	enum dt_status st = get_bool(k, layer, cls, cfg, "use_bias", 1, &use_bias);
	if (!st)
		st = get_init(k, layer, cls, cfg, "bias_initializer", bi, sizeof(bi));
	if (st)
		return st;
	if (!use_bias)
		return graph_st(k, layer, cls, dt_graph_drop_bias(k->g, layer, k->err));
	if (bi[0] && strcmp(bi, "zeros") != 0)
		return graph_st(k, layer, cls, dt_graph_set_init(k->g, layer, 1, bi, k->err));
	return DT_OK;
}

enum dt_status dt__keras_input(struct dt__keras *k, const char *layer, json_t *cfg, char *out)
{
	static const char *const known[] = { "batch_input_shape", "batch_shape", "dtype", "sparse", "ragged", NULL };
	const char *cls = "InputLayer";
	enum dt_status st = check_fields(k, layer, cls, cfg, known);
	if (st)
		return st;
	json_t *shape = json_object_get(cfg, "batch_input_shape");
	if (!shape)
		shape = json_object_get(cfg, "batch_shape");
	const size_t n = json_array_size(shape);
	if (n < 2 || n > 4)
		return FAIL("field 'batch_shape' must list the batch and 1 to 3 dimensions (e.g. [null, 32, 32, 3])");
	int dims[3];
	for (size_t i = 1; i < n; i++) {
		json_t *d = json_array_get(shape, i);
		if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > (1 << 24))
			return FAIL("field 'batch_shape': dimension %zu is not a fixed size from 1 to %d (dtrain needs "
				    "every shape known)",
				    i, 1 << 24);
		dims[i - 1] = (int)json_integer_value(d);
	}
	const char *dt = json_string_value(json_object_get(cfg, "dtype"));
	if (json_is_object(json_object_get(cfg, "dtype"))) /* Keras 3: a DTypePolicy */
		dt = json_string_value(json_object_get(json_object_get(json_object_get(cfg, "dtype"), "config"), "name"));
	int is_int = dt && (strcmp(dt, "int32") == 0 || strcmp(dt, "int64") == 0);
	if (dt && !is_int && strcmp(dt, "float32") != 0)
		return FAIL("field 'dtype' is '%s' (supported: float32, int32, int64)", dt);
	snprintf(out, DT_LAYER_NAME_MAX, "%s", layer);
	st = dt_graph_input(k->g, layer, is_int ? DT_INT32 : DT_FLOAT32, (int)n - 1, dims, k->err);
	if (st)
		return graph_st(k, layer, cls, st);
	if (k->info->num_inputs++ == 0) {
		k->info->input_rank = (int)n - 1;
		memcpy(k->info->input_shape, dims, sizeof(int) * (n - 1));
		k->info->input_is_int = is_int;
	}
	return DT_OK;
}

#define CONV_FIELDS "kernel_size", "strides", "padding", "data_format", "dilation_rate", "activation", "use_bias", \
		    "bias_initializer"

static enum dt_status conv_like(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *in,
				char *out)
{
	const int depthwise = strcmp(cls, "DepthwiseConv2D") == 0, separable = strcmp(cls, "SeparableConv2D") == 0;
	static const char *const conv_known[] = { CONV_FIELDS, "filters", "groups", "kernel_initializer", NULL };
	static const char *const dw_known[] = { CONV_FIELDS, "groups", "depth_multiplier", "depthwise_initializer", NULL };
	static const char *const sep_known[] = { CONV_FIELDS, "filters", "groups", "depth_multiplier", "depthwise_initializer",
						 "pointwise_initializer", NULL };
	enum dt_status st = check_fields(k, layer, cls, cfg, depthwise ? dw_known : separable ? sep_known : conv_known);
	int filters = 0, ks[2], strides[2], dil[2], mult = 1, groups;
	enum dt_padding pad;
	enum dt_act act;
	char ki[96], pi[96];
	if (!st && !depthwise)
		st = get_int(k, layer, cls, cfg, "filters", 0, 1, 65536, &filters);
	if (!st)
		st = get_pair(k, layer, cls, cfg, "kernel_size", 0, 1, 4096, ks);
	if (!st)
		st = get_pair(k, layer, cls, cfg, "strides", 1, 1, 4096, strides);
	if (!st)
		st = get_pair(k, layer, cls, cfg, "dilation_rate", 1, 1, 4096, dil);
	if (!st)
		st = get_int(k, layer, cls, cfg, "depth_multiplier", 1, 1, 4096, &mult);
	if (!st)
		st = get_int(k, layer, cls, cfg, "groups", 1, 1, 1, &groups);
	if (!st)
		st = get_padding(k, layer, cls, cfg, &pad);
	if (!st)
		st = check_channels_last(k, layer, cls, cfg);
	if (!st)
		st = get_act(k, layer, cls, cfg, "activation", &act);
	if (!st)
		st = get_init(k, layer, cls, cfg, depthwise || separable ? "depthwise_initializer" : "kernel_initializer", ki,
			      sizeof(ki));
	if (!st)
		st = get_init(k, layer, cls, cfg, "pointwise_initializer", pi, sizeof(pi));
	if (st)
		return st;
	if (!depthwise && !separable && (strides[0] != strides[1] || dil[0] != 1 || dil[1] != 1))
		return FAIL("field '%s' is (%d, %d) (supported for Conv2D: equal strides, dilation_rate 1; "
			    "DepthwiseConv2D takes any)",
			    strides[0] != strides[1] ? "strides" : "dilation_rate",
			    strides[0] != strides[1] ? strides[0] : dil[0], strides[0] != strides[1] ? strides[1] : dil[1]);
	const struct dt_conv_opts o = { .sh = strides[0], .sw = strides[1], .dh = dil[0], .dw = dil[1],
					.depth_multiplier = mult };
	const int fuse = act == DT_ACT_RELU && !depthwise && !separable;
	if (depthwise)
		st = dt_graph_depthwise_conv2d(k->g, layer, in, ks[0], ks[1], pad, ki[0] ? ki : NULL, &o, k->err);
	else if (separable)
		st = dt_graph_separable_conv2d(k->g, layer, in, filters, ks[0], ks[1], pad, ki[0] ? ki : NULL,
					       pi[0] ? pi : NULL, &o, k->err);
	else
		st = dt_graph_conv2d_opts(k->g, layer, in, filters, ks[0], ks[1], pad, fuse ? DT_ACT_RELU : DT_ACT_LINEAR,
					  ki[0] ? ki : NULL, &o, k->err);
	if (graph_st(k, layer, cls, st) || (st = bias_and_init(k, layer, cls, cfg)))
		return st;
	return then_act(k, layer, cls, layer, fuse ? DT_ACT_LINEAR : act, out);
}

static enum dt_status dense(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *in,
			    char *out)
{
	static const char *const known[] = { "units", "activation", "use_bias", "kernel_initializer", "bias_initializer",
					     NULL };
	int units;
	enum dt_act act;
	char ki[96];
	enum dt_status st = check_fields(k, layer, cls, cfg, known);
	if (!st)
		st = get_int(k, layer, cls, cfg, "units", 0, 1, 1 << 24, &units);
	if (!st)
		st = get_act(k, layer, cls, cfg, "activation", &act);
	if (!st)
		st = get_init(k, layer, cls, cfg, "kernel_initializer", ki, sizeof(ki));
	if (st)
		return st;
	st = dt_graph_dense(k->g, layer, in, units, act, ki[0] ? ki : NULL, k->err);
	if (graph_st(k, layer, cls, st) || (st = bias_and_init(k, layer, cls, cfg)))
		return st;
	snprintf(out, DT_LAYER_NAME_MAX, "%s", layer);
	return DT_OK;
}

static enum dt_status pooling(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *in,
			      char *out)
{
	const int global = strncmp(cls, "Global", 6) == 0;
	const int is_max = strstr(cls, "Max") != NULL;
	static const char *const known[] = { "pool_size", "strides", "padding", "data_format", NULL };
	static const char *const gknown[] = { "data_format", "keepdims", NULL };
	enum dt_status st = check_fields(k, layer, cls, cfg, global ? gknown : known);
	if (!st)
		st = check_channels_last(k, layer, cls, cfg);
	if (st)
		return st;
	snprintf(out, DT_LAYER_NAME_MAX, "%s", layer);
	int keep = 0;
	if (global && (st = get_bool(k, layer, cls, cfg, "keepdims", 0, &keep)))
		return st;
	if (keep)
		return FAIL("field 'keepdims' is true (supported: false)");
	if (global)
		return graph_st(k, layer, cls,
				dt_graph_global_pool(k->g, layer, in, is_max ? DT_POOL_MAX : DT_POOL_AVG, k->err));
	int ps[2], strides[2];
	enum dt_padding pad;
	st = get_pair(k, layer, cls, cfg, "pool_size", 2, 1, 4096, ps);
	if (!st)
		st = get_pair(k, layer, cls, cfg, "strides", 0, 1, 4096, strides);
	if (!st)
		st = get_padding(k, layer, cls, cfg, &pad);
	if (st)
		return st;
	if (strides[0] == 0) { /* null: the window */
		strides[0] = ps[0];
		strides[1] = ps[1];
	}
	return graph_st(k, layer, cls,
			dt_graph_pool(k->g, layer, in, is_max ? DT_POOL_MAX : DT_POOL_AVG, ps[0], ps[1], strides[0],
				      strides[1], pad, k->err));
}

static enum dt_status zero_pad(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *in,
			       char *out)
{
	static const char *const known[] = { "padding", "data_format", NULL };
	enum dt_status st = check_fields(k, layer, cls, cfg, known);
	if (!st)
		st = check_channels_last(k, layer, cls, cfg);
	if (st)
		return st;
	json_t *p = json_object_get(cfg, "padding");
	int v[4] = { 1, 1, 1, 1 }; /* top, bottom, left, right */
	int ok = 1;
	if (json_is_integer(p)) {
		v[0] = v[1] = v[2] = v[3] = (int)json_integer_value(p);
		ok = json_integer_value(p) >= 0 && json_integer_value(p) <= 4096;
	} else if (json_is_array(p) && json_array_size(p) == 2) {
		for (int a = 0; a < 2 && ok; a++) {
			json_t *e = json_array_get(p, (size_t)a);
			if (json_is_integer(e)) {
				v[2 * a] = v[2 * a + 1] = (int)json_integer_value(e);
				ok = json_integer_value(e) >= 0 && json_integer_value(e) <= 4096;
			} else if (json_is_array(e) && json_array_size(e) == 2) {
				for (int j = 0; j < 2 && ok; j++) {
					json_t *x = json_array_get(e, (size_t)j);
					ok = json_is_integer(x) && json_integer_value(x) >= 0 && json_integer_value(x) <= 4096;
					v[2 * a + j] = ok ? (int)json_integer_value(x) : 0;
				}
			} else {
				ok = 0;
			}
		}
	} else if (p) {
		ok = 0;
	}
	if (!ok)
		return FAIL("field 'padding' must be n, [h, w] or [[top, bottom], [left, right]] with values 0 to 4096");
	snprintf(out, DT_LAYER_NAME_MAX, "%s", layer);
	return graph_st(k, layer, cls, dt_graph_zero_pad(k->g, layer, in, v[0], v[1], v[2], v[3], k->err));
}

/* The axis field of a normalization or concatenation: the last axis only. */
static enum dt_status last_axis(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *in)
{
	json_t *a = json_object_get(cfg, "axis");
	if (json_is_array(a) && json_array_size(a) == 1)
		a = json_array_get(a, 0);
	int dims[3];
	const int rank = dt_graph_node_dims(k->g, in, dims);
	if (!a || json_is_null(a) || (json_is_integer(a) && (json_integer_value(a) == -1 || json_integer_value(a) == rank)))
		return DT_OK;
	return FAIL("field 'axis' must be the last axis (-1 or %d)", rank);
}

static enum dt_status norm(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *in,
			   char *out)
{
	const int bn = strcmp(cls, "BatchNormalization") == 0;
	static const char *const bn_known[] = { "axis", "momentum", "epsilon", "center", "scale", "beta_initializer",
						"gamma_initializer", "moving_mean_initializer",
						"moving_variance_initializer", "fused", "renorm_momentum", NULL };
	static const char *const ln_known[] = { "axis", "epsilon", "center", "scale", "beta_initializer",
						"gamma_initializer", NULL };
	float momentum = 0.99f, eps;
	int center = 1, scale = 1;
	char bi[96], gi[96], mi[96], vi[96];
	enum dt_status st = check_fields(k, layer, cls, cfg, bn ? bn_known : ln_known);
	if (!st)
		st = last_axis(k, layer, cls, cfg, in);
	if (!st && bn)
		st = get_float(k, layer, cls, cfg, "momentum", 0.99, 0.0, 0.999999, &momentum);
	if (!st)
		st = get_float(k, layer, cls, cfg, "epsilon", 1e-3, 1e-12, 1.0, &eps);
	if (!st)
		st = get_bool(k, layer, cls, cfg, "center", 1, &center);
	if (!st)
		st = get_bool(k, layer, cls, cfg, "scale", 1, &scale);
	if (!st)
		st = get_init(k, layer, cls, cfg, "beta_initializer", bi, sizeof(bi));
	if (!st)
		st = get_init(k, layer, cls, cfg, "gamma_initializer", gi, sizeof(gi));
	if (!st)
		st = get_init(k, layer, cls, cfg, "moving_mean_initializer", mi, sizeof(mi));
	if (!st)
		st = get_init(k, layer, cls, cfg, "moving_variance_initializer", vi, sizeof(vi));
	if (st)
		return st;
	if (!center || !scale)
		return FAIL("field '%s' is false (supported: center and scale true)", center ? "scale" : "center");
	if ((mi[0] && strcmp(mi, "zeros") != 0) || (vi[0] && strcmp(vi, "ones") != 0))
		return FAIL("field '%s' (supported: Zeros for the moving mean, Ones for the moving variance)",
			    mi[0] && strcmp(mi, "zeros") != 0 ? "moving_mean_initializer" : "moving_variance_initializer");
	st = bn ? dt_graph_batch_norm(k->g, layer, in, momentum, eps, k->err)
		: dt_graph_layer_norm(k->g, layer, in, eps, k->err);
	if (!st && gi[0])
		st = dt_graph_set_init(k->g, layer, 0, gi, k->err);
	if (!st && bi[0])
		st = dt_graph_set_init(k->g, layer, 1, bi, k->err);
	snprintf(out, DT_LAYER_NAME_MAX, "%s", layer);
	return graph_st(k, layer, cls, st);
}

static enum dt_status relu(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *in,
			   char *out)
{
	static const char *const known[] = { "max_value", "negative_slope", "threshold", NULL };
	float mx, slope, thr;
	enum dt_status st = check_fields(k, layer, cls, cfg, known);
	if (!st)
		st = get_float(k, layer, cls, cfg, "max_value", 0.0, 0.0, 1e30, &mx);
	if (!st)
		st = get_float(k, layer, cls, cfg, "negative_slope", 0.0, 0.0, 0.0, &slope);
	if (!st)
		st = get_float(k, layer, cls, cfg, "threshold", 0.0, 0.0, 0.0, &thr);
	if (st)
		return st;
	json_t *m = json_object_get(cfg, "max_value");
	if (m && !json_is_null(m) && mx != 6.0f)
		return FAIL("field 'max_value' is %g (supported: none, or 6 for ReLU6)", (double)mx);
	const enum dt_act act = m && !json_is_null(m) ? DT_ACT_RELU6 : DT_ACT_RELU;
	snprintf(out, DT_LAYER_NAME_MAX, "%s", layer);
	return graph_st(k, layer, cls, dt_graph_activation(k->g, layer, in, act, k->err));
}

static enum dt_status activation(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg,
				 const char *in, char *out)
{
	static const char *const known[] = { "activation", "axis", NULL };
	enum dt_act act = DT_ACT_SOFTMAX;
	enum dt_status st = check_fields(k, layer, cls, cfg, known);
	if (!st && strcmp(cls, "Activation") == 0)
		st = get_act(k, layer, cls, cfg, "activation", &act);
	if (!st && strcmp(cls, "Softmax") == 0) {
		st = last_axis(k, layer, cls, cfg, in);
		if (k->output && strcmp(layer, k->output) == 0)
			act = DT_ACT_LINEAR;
	}
	if (st)
		return st;
	snprintf(out, DT_LAYER_NAME_MAX, "%s", layer);
	return graph_st(k, layer, cls, dt_graph_activation(k->g, layer, in, act, k->err));
}

static enum dt_status misc(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, int nin,
			   const char *const *in, char *out)
{
	enum dt_status st;
	snprintf(out, DT_LAYER_NAME_MAX, "%s", layer);
	if (strcmp(cls, "Dropout") == 0) {
		static const char *const known[] = { "rate", "noise_shape", NULL };
		float rate;
		if ((st = check_fields(k, layer, cls, cfg, known)) ||
		    (st = get_float(k, layer, cls, cfg, "rate", 0.0, 0.0, 0.99, &rate)))
			return st;
		/* a noise_shape shares one mask over some axes (SpatialDropout's): other math */
		if (!is_default(json_object_get(cfg, "noise_shape")))
			return FAIL("field 'noise_shape' is set (supported: null, one mask value per element)");
		return graph_st(k, layer, cls, dt_graph_dropout(k->g, layer, in[0], rate, k->err));
	}
	if (strcmp(cls, "Flatten") == 0) {
		static const char *const known[] = { "data_format", NULL };
		if ((st = check_fields(k, layer, cls, cfg, known)) || (st = check_channels_last(k, layer, cls, cfg)))
			return st;
		return graph_st(k, layer, cls, dt_graph_flatten(k->g, layer, in[0], k->err));
	}
	if (strcmp(cls, "Reshape") == 0) {
		static const char *const known[] = { "target_shape", NULL };
		json_t *t = json_object_get(cfg, "target_shape");
		const size_t n = json_array_size(t);
		if ((st = check_fields(k, layer, cls, cfg, known)))
			return st;
		if (n < 1 || n > 3)
			return FAIL("field 'target_shape' must list 1 to 3 dimensions");
		int dims[3];
		for (size_t i = 0; i < n; i++) {
			json_t *d = json_array_get(t, i);
			if (!json_is_integer(d) || json_integer_value(d) < -1 || json_integer_value(d) > (1 << 28))
				return FAIL("field 'target_shape': dimension %zu must be -1 or a size", i);
			dims[i] = (int)json_integer_value(d);
		}
		return graph_st(k, layer, cls, dt_graph_reshape(k->g, layer, in[0], (int)n, dims, k->err));
	}
	if (strcmp(cls, "Add") == 0 || strcmp(cls, "Concatenate") == 0) {
		static const char *const known[] = { "axis", NULL };
		const int add = cls[0] == 'A';
		if ((st = check_fields(k, layer, cls, cfg, known)) || (!add && (st = last_axis(k, layer, cls, cfg, in[0]))))
			return st;
		if (nin < 2)
			return FAIL("field 'inbound_nodes': %d input (supported: 2 to 8)", nin);
		return graph_st(k, layer, cls,
				add ? dt_graph_add(k->g, layer, nin, in, k->err) : dt_graph_concat(k->g, layer, nin, in, k->err));
	}
	static const char *const known[] = { "input_dim", "output_dim", "embeddings_initializer", "input_length", NULL };
	int vocab, dim;
	char ei[96];
	if ((st = check_fields(k, layer, cls, cfg, known)) ||
	    (st = get_int(k, layer, cls, cfg, "input_dim", 0, 1, 1 << 24, &vocab)) ||
	    (st = get_int(k, layer, cls, cfg, "output_dim", 0, 1, 1 << 20, &dim)) ||
	    (st = get_init(k, layer, cls, cfg, "embeddings_initializer", ei, sizeof(ei))))
		return st;
	return graph_st(k, layer, cls, dt_graph_embedding(k->g, layer, in[0], vocab, dim, ei[0] ? ei : NULL, k->err));
}

static enum dt_status layer_nodes(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, int nin,
				  const char *const *in, char *out);

enum dt_status dt__keras_layer(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, int nin,
			       const char *const *in, char *out)
{
	static const char *const single[] = { "Dense", "Conv2D", "DepthwiseConv2D", "SeparableConv2D", "MaxPooling2D",
					      "AveragePooling2D", "GlobalAveragePooling2D", "GlobalMaxPooling2D",
					      "ZeroPadding2D", "BatchNormalization", "LayerNormalization", "ReLU",
					      "Activation", "Softmax", "Dropout", "Flatten", "Reshape", "Embedding", NULL };
	const int merge = strcmp(cls, "Add") == 0 || strcmp(cls, "Concatenate") == 0;
	if (!in_list(cls, single) && !merge)
		return FAIL("layer class '%s' is not supported (supported: InputLayer, Dense, Conv2D, DepthwiseConv2D, "
			    "SeparableConv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, "
			    "ZeroPadding2D, BatchNormalization, ReLU, Activation, Softmax, Dropout, Flatten, Reshape, Add, "
			    "Concatenate, Embedding, LayerNormalization)",
			    cls);
	if (!merge && nin != 1)
		return FAIL("field 'inbound_nodes': %d inputs (supported: 1)", nin);
	enum dt_status st = layer_nodes(k, layer, cls, cfg, nin, in, out);
	return st ? st : dt__keras_reg(k, layer, cls, cfg, layer, out);
}

/* The nodes of one layer, before its regularizers and constraints. */
static enum dt_status layer_nodes(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, int nin,
				  const char *const *in, char *out)
{
	if (strcmp(cls, "Dense") == 0)
		return dense(k, layer, cls, cfg, in[0], out);
	if (strstr(cls, "Conv2D"))
		return conv_like(k, layer, cls, cfg, in[0], out);
	if (strstr(cls, "Pooling2D"))
		return pooling(k, layer, cls, cfg, in[0], out);
	if (strcmp(cls, "ZeroPadding2D") == 0)
		return zero_pad(k, layer, cls, cfg, in[0], out);
	if (strstr(cls, "Normalization"))
		return norm(k, layer, cls, cfg, in[0], out);
	if (strcmp(cls, "ReLU") == 0)
		return relu(k, layer, cls, cfg, in[0], out);
	if (strcmp(cls, "Activation") == 0 || strcmp(cls, "Softmax") == 0)
		return activation(k, layer, cls, cfg, in[0], out);
	return misc(k, layer, cls, cfg, nin, in, out);
}
