/*
 * Keras's layers for the graph builder (nn/graph.h): depthwise and
 * separable convolutions, batch normalization, zero padding, global
 * pooling, and the per-node edits Keras's configs need (no bias, frozen,
 * initializers). Same rule as graph.c: a failed call changes nothing.
 */
#include <stdio.h>
#include <string.h>

#include "nn/graph_impl.h"

static int opt(int v)
{
	return v ? v : 1;
}

enum dt_status dt_graph_conv2d_opts(struct dt_graph *g, const char *name, const char *input, int filters, int kh,
				    int kw, enum dt_padding padding, enum dt_act act, const char *kernel_init,
				    const struct dt_conv_opts *o, struct dt_err *err)
{
	const struct dt_conv_opts d = { 0 };
	if (!o)
		o = &d;
	const char *nm = name ? name : "conv";
	if (opt(o->sh) != opt(o->sw))
		return dt_err_set(err, DT_CONFIG, "node '%s': conv2d strides (%d, %d) must be equal", nm, opt(o->sh),
				  opt(o->sw));
	if (opt(o->dh) != 1 || opt(o->dw) != 1)
		return dt_err_set(err, DT_CONFIG, "node '%s': conv2d dilation (%d, %d) must be 1 (depthwise takes any)", nm,
				  opt(o->dh), opt(o->dw));
	return dt_graph_conv2d(g, name, input, filters, kh, kw, opt(o->sh), padding, act, kernel_init, err);
}

/* Adds a depthwise node named nm reading node `in`; kernel variable
 * "<prefix>/<suffix>" (prefix "" = nm). */
static enum dt_status add_depthwise(struct dt_graph *g, const char *nm, int number, enum dt__prefix p, int in, int kh,
				    int kw, enum dt_padding padding, const char *init, const struct dt_conv_opts *o,
				    const char *prefix, int bias, struct dt_err *err)
{
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	enum dt_status st = dt__graph_want_float(g, nm, in, err);
	if (!st)
		st = dt__graph_want_rank(g, nm, "depthwise_conv2d", in, 3, err);
	if (!st)
		st = dt__graph_get_init(prefix[0] ? prefix : nm, init, "glorot_uniform", &n.init[0], err);
	if (st)
		return st;
	if (padding != DT_PADDING_VALID && padding != DT_PADDING_SAME)
		return dt_err_set(err, DT_CONFIG, "node '%s': unknown padding %d", nm, (int)padding);
	const struct dt__node *src = &g->nodes[in];
	st = dt_layer_depthwise(&n.layer, nm, src->layer.out, kh, kw, opt(o->depth_multiplier), opt(o->sh), opt(o->sw),
				opt(o->dh), opt(o->dw), padding == DT_PADDING_SAME, err);
	if (dt__graph_layer_status(st, prefix[0] ? prefix : nm, g, in, err))
		return st;
	if ((long)dt_shape_elems(n.layer.out) > MAX_ELEMS || n.layer.kernel_count > (size_t)MAX_ELEMS)
		return dt_err_set(err, DT_CONFIG, "node '%s': depthwise output or kernel too large", nm);
	if (!bias)
		dt_layer_drop_bias(&n.layer);
	n.ninputs = 1;
	n.inputs[0] = in;
	dt__graph_set_dims(&n, 3, n.layer.out);
	n.init[1] = (struct dt_init){ .kind = DT_INIT_ZEROS };
	snprintf(n.var_prefix, sizeof(n.var_prefix), "%s", prefix);
	n.kernel_suffix = prefix[0] ? "depthwise_kernel" : NULL;
	dt__graph_commit(g, &n, p, number);
	return DT_OK;
}

enum dt_status dt_graph_depthwise_conv2d(struct dt_graph *g, const char *name, const char *input, int kh, int kw,
					 enum dt_padding padding, const char *kernel_init,
					 const struct dt_conv_opts *o, struct dt_err *err)
{
	const struct dt_conv_opts d = { 0 };
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, P_DEPTHWISE, input, nm, &number, &in, err);
	if (st)
		return st;
	return add_depthwise(g, nm, number, P_DEPTHWISE, in, kh, kw, padding, kernel_init, o ? o : &d, "", 1, err);
}

enum dt_status dt_graph_separable_conv2d(struct dt_graph *g, const char *name, const char *input, int filters, int kh,
					 int kw, enum dt_padding padding, const char *depthwise_init,
					 const char *pointwise_init, const struct dt_conv_opts *o,
					 struct dt_err *err)
{
	const struct dt_conv_opts d = { 0 };
	if (!o)
		o = &d;
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, P_SEPARABLE, input, nm, &number, &in, err);
	if (st)
		return st;
	if (g->n + 2 > DT__MAX_NODES)
		return dt_err_set(err, DT_CONFIG, "graph has %d nodes already; separable_conv2d '%s' needs two more", g->n, nm);
	/* The depthwise half: a node name of '~' and a number no other node
	 * has; its variables carry the separable node's name. */
	char inner[DT_LAYER_NAME_MAX];
	int tag = g->n;
	do /* a caller may have named a node "~5" itself */
		snprintf(inner, sizeof(inner), "~%d", tag++);
	while (dt_graph_node_dims(g, inner, (int[3]){ 0 }) > 0);
	const int saved = g->counter[P_SEPARABLE];
	st = add_depthwise(g, inner, saved, P_SEPARABLE, in, kh, kw, padding, depthwise_init, o, nm, 0, err);
	if (st)
		return st;
	struct dt_conv_opts pw = { 0 };
	st = dt_graph_conv2d_opts(g, nm, inner, filters, 1, 1, DT_PADDING_VALID, DT_ACT_LINEAR,
				  pointwise_init ? pointwise_init : "glorot_uniform", &pw, err);
	if (st) {
		g->n--; /* take the depthwise half back out */
		return st;
	}
	g->nodes[g->n - 1].kernel_suffix = "pointwise_kernel";
	g->counter[P_SEPARABLE] = number;
	return DT_OK;
}

enum dt_status dt_graph_batch_norm(struct dt_graph *g, const char *name, const char *input, float momentum, float eps,
				   struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, P_BATCH_NORM, input, nm, &number, &in, err);
	if (!st)
		st = dt__graph_want_float(g, nm, in, err);
	if (st)
		return st;
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	const struct dt__node *src = &g->nodes[in];
	st = dt_layer_batchnorm(&n.layer, nm, src->layer.out, momentum, eps, err);
	if (dt__graph_layer_status(st, nm, g, in, err))
		return st;
	n.ninputs = 1;
	n.inputs[0] = in;
	n.rank = src->rank;
	memcpy(n.dims, src->dims, sizeof(n.dims));
	n.init[0] = (struct dt_init){ .kind = DT_INIT_ONES };
	n.init[1] = (struct dt_init){ .kind = DT_INIT_ZEROS };
	dt__graph_commit(g, &n, P_BATCH_NORM, number);
	return DT_OK;
}

enum dt_status dt_graph_zero_pad(struct dt_graph *g, const char *name, const char *input, int top, int bottom,
				 int left, int right, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, P_ZERO_PAD, input, nm, &number, &in, err);
	if (!st)
		st = dt__graph_want_image(g, nm, "zero_padding2d", in, err);
	if (st)
		return st;
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	const struct dt__node *src = &g->nodes[in];
	st = dt_layer_zeropad(&n.layer, nm, src->layer.out, top, bottom, left, right, err);
	if (dt__graph_layer_status(st, nm, g, in, err))
		return st;
	if ((long)dt_shape_elems(n.layer.out) > MAX_ELEMS)
		return dt_err_set(err, DT_CONFIG, "node '%s': padded output too large", nm);
	n.ninputs = 1;
	n.inputs[0] = in;
	dt__graph_set_dims(&n, 3, n.layer.out);
	dt__graph_commit(g, &n, P_ZERO_PAD, number);
	return DT_OK;
}

enum dt_status dt_graph_global_pool(struct dt_graph *g, const char *name, const char *input, enum dt_pool_kind kind,
				    struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	const enum dt__prefix p = kind == DT_POOL_MAX ? P_GLOBAL_MAX : P_GLOBAL_AVG;
	enum dt_status st = dt__graph_begin_on(g, name, p, input, nm, &number, &in, err);
	if (!st)
		st = dt__graph_want_image(g, nm, "global pooling", in, err);
	if (st)
		return st;
	if (kind != DT_POOL_MAX && kind != DT_POOL_AVG)
		return dt_err_set(err, DT_CONFIG, "node '%s': unknown pooling kind %d", nm, (int)kind);
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	const struct dt__node *src = &g->nodes[in];
	const struct dt_shape s = src->layer.out;
	st = dt_layer_pool(&n.layer, nm, s, kind == DT_POOL_MAX, s.h, s.w, 1, 1, 0, err);
	if (dt__graph_layer_status(st, nm, g, in, err))
		return st;
	n.ninputs = 1;
	n.inputs[0] = in;
	n.rank = 1;
	n.dims[0] = s.c;
	dt__graph_commit(g, &n, p, number);
	return DT_OK;
}

static enum dt_status find_node(struct dt_graph *g, const char *name, const char *what, struct dt__node **out,
				struct dt_err *err)
{
	if (!g || !name)
		return dt_err_set(err, DT_USAGE, "%s: no graph or node name (NULL)", what);
	for (int i = 0; i < g->n; i++)
		if (strcmp(g->nodes[i].layer.name, name) == 0) {
			*out = &g->nodes[i];
			return DT_OK;
		}
	return dt_err_set(err, DT_CONFIG, "%s: no node named '%s' in the graph", what, name);
}

enum dt_status dt_graph_drop_bias(struct dt_graph *g, const char *name, struct dt_err *err)
{
	struct dt__node *n;
	enum dt_status st = find_node(g, name, "drop bias", &n, err);
	if (st)
		return st;
	const enum dt_layer_kind k = n->layer.kind;
	if (k != DT_LAYER_DENSE && k != DT_LAYER_CONV2D && k != DT_LAYER_DEPTHWISE)
		return dt_err_set(err, DT_CONFIG, "node '%s': only dense and convolution nodes have a bias to drop", name);
	dt_layer_drop_bias(&n->layer);
	return DT_OK;
}

enum dt_status dt_graph_set_trainable(struct dt_graph *g, const char *name, int trainable, struct dt_err *err)
{
	struct dt__node *n;
	enum dt_status st = find_node(g, name, "set trainable", &n, err);
	if (st)
		return st;
	n->frozen = !trainable;
	n->layer.frozen = !trainable;
	/* a separable node's depthwise half freezes with it */
	if (n->kernel_suffix && strcmp(n->kernel_suffix, "pointwise_kernel") == 0) {
		struct dt__node *dw = &g->nodes[n->inputs[0]];
		dw->frozen = !trainable;
		dw->layer.frozen = !trainable;
	}
	return DT_OK;
}

enum dt_status dt_graph_set_init(struct dt_graph *g, const char *name, int which, const char *init,
				 struct dt_err *err)
{
	struct dt__node *n;
	enum dt_status st = find_node(g, name, "set initializer", &n, err);
	if (st)
		return st;
	if (which != 0 && which != 1)
		return dt_err_set(err, DT_CONFIG, "node '%s': initializer slot %d, must be 0 or 1", name, which);
	struct dt_init in;
	if ((st = dt__graph_get_init(name, init, "zeros", &in, err)))
		return st;
	n->init[which] = in;
	return DT_OK;
}
