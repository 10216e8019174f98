/*
 * builder.c — the public layer-graph builder over nn/graph.h.
 *
 * Each call is applied at once to an "eager" graph holding every input, so
 * a shape that does not connect is reported by the call that made it (as
 * the first, sticky error: model.c), and is recorded as a node to replay:
 * the graph a session compiles leaves out the input the loss takes as its
 * labels (nn/ feeds targets apart from inputs), which only the loss call
 * names. Public node ids index m->nodes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/alloc.h"
#include "nn/graph.h"
#include "nn/model.h"

static const enum dt_act acts[] = {
	[DTRAIN_LINEAR] = DT_ACT_LINEAR, [DTRAIN_RELU] = DT_ACT_RELU, [DTRAIN_SIGMOID] = DT_ACT_SIGMOID,
	[DTRAIN_TANH] = DT_ACT_TANH,     [DTRAIN_SOFTMAX] = DT_ACT_SOFTMAX, [DTRAIN_GELU] = DT_ACT_GELU,
};

static int node_count(const dtrain_model *m)
{
	return m->nnodes;
}

static struct dt__api_node *new_node(dtrain_model *m, enum dt__api_op_kind kind)
{
	if (m->nnodes == m->nodes_cap) {
		m->nodes_cap = m->nodes_cap ? 2 * m->nodes_cap : 16;
		m->nodes = dt_xrealloc(m->nodes, (size_t)m->nodes_cap * sizeof(*m->nodes));
	}
	struct dt__api_node *n = &m->nodes[m->nnodes];
	memset(n, 0, sizeof(*n));
	n->kind = kind;
	n->input = -1;
	return n;
}

/* An input's per-example shape as nn/ takes it: () becomes (1). */
static int graph_shape(const struct dt__api_input *in, int shape[3])
{
	for (int i = 0; i < 3; i++)
		shape[i] = i < in->ndim ? (int)in->shape[i] : 1;
	return in->ndim ? in->ndim : 1;
}

static enum dt_dtype dtype_of(dtrain_dtype t)
{
	return t == DTRAIN_INT32 ? DT_INT32 : DT_FLOAT32;
}

static enum dt_status add_input(struct dt_graph *g, const struct dt__api_input *in, struct dt_err *err)
{
	int shape[3];
	int ndim = graph_shape(in, shape);
	return dt_graph_input(g, in->name, dtype_of(in->dtype), ndim, shape, err);
}

int dt__api_input_node(dtrain_model *m, int input)
{
	struct dt__api_node *n = new_node(m, OP_INPUT);
	snprintf(n->name, sizeof(n->name), "%s", m->inputs[input].name);
	n->input = input;
	if (m->eager) {
		struct dt_err e = DT_ERR_INIT;
		if (add_input(m->eager, &m->inputs[input], &e))
			return dt__api_fail(m, e.status, "dtrain_input: %s", e.msg);
	}
	return m->nnodes++;
}

/* Applies node n (not yet counted in m->nnodes) to graph g under its
 * recorded name, or, when name_it, under a fresh name it then records. */
static enum dt_status apply(const dtrain_model *m, struct dt_graph *g, struct dt__api_node *n, int name_it,
			    struct dt_err *err)
{
	const char *name = name_it ? NULL : n->name;
	const char *in[DT_API_OP_MAX_IN];
	for (int i = 0; i < n->nin; i++)
		in[i] = m->nodes[n->in[i]].name;
	const int *a = n->iarg;
	/* The initializers include/dtrain.h promises: He-normal kernels before
	 * a ReLU, Glorot-uniform otherwise (nn/'s default). */
	const char *kinit = n->act == (int)DT_ACT_RELU ? "he_normal" : NULL;
	enum dt_status st = DT_OK;
	switch (n->kind) {
	case OP_INPUT: return dt_err_set(err, DT_INTERNAL, "an input replayed as a layer");
	case OP_DENSE: st = dt_graph_dense(g, name, in[0], a[0], (enum dt_act)n->act, kinit, err); break;
	case OP_CONV2D:
		st = dt_graph_conv2d(g, name, in[0], a[0], a[1], a[2], a[3], a[4] ? DT_PADDING_SAME : DT_PADDING_VALID,
				     (enum dt_act)n->act, kinit, err);
		break;
	case OP_MAXPOOL:
	case OP_AVGPOOL:
		st = dt_graph_pool(g, name, in[0], n->kind == OP_MAXPOOL ? DT_POOL_MAX : DT_POOL_AVG, a[0], a[0], a[1], a[1],
				   DT_PADDING_VALID, err);
		break;
	case OP_FLATTEN: st = dt_graph_flatten(g, name, in[0], err); break;
	case OP_RESHAPE: st = dt_graph_reshape(g, name, in[0], n->shape_n, n->shape, err); break;
	case OP_ACTIVATE: st = dt_graph_activation(g, name, in[0], (enum dt_act)n->act, err); break;
	case OP_DROPOUT: st = dt_graph_dropout(g, name, in[0], n->farg, err); break;
	case OP_EMBEDDING: st = dt_graph_embedding(g, name, in[0], a[0], a[1], NULL, err); break;
	case OP_LAYER_NORM: st = dt_graph_layer_norm(g, name, in[0], n->farg, err); break;
	case OP_ADD: st = dt_graph_add(g, name, n->nin, in, err); break;
	case OP_CONCAT: st = dt_graph_concat(g, name, n->nin, in, err); break;
	}
	if (!st && name_it)
		snprintf(n->name, sizeof(n->name), "%s", dt_graph_last(g));
	return st;
}

/* The common part of every layer call: checks, the eager graph, the record. */
static dtrain_node layer(dtrain_model *m, const char *fn, struct dt__api_node proto)
{
	if (!dt__api_usable(m, fn))
		return -1;
	if (m->nvars || m->fb)
		return dt__api_fail(m, DT_USAGE, "%s: the model is a custom model (it has variables or a callback); a "
						  "model is a layer graph or a custom model, not both", fn);
	for (int i = 0; i < proto.nin; i++) {
		int x = proto.in[i];
		if (x < 0 || x >= node_count(m))
			return dt__api_fail(m, DT_USAGE, "%s: node %d does not exist (the model has %d node%s, 0 to %d)", fn,
					    x, node_count(m), node_count(m) == 1 ? "" : "s", node_count(m) - 1);
		if (x == m->loss_target)
			return dt__api_fail(m, DT_USAGE, "%s: node %d ('%s') is the loss's labels; a layer cannot read it",
					    fn, x, m->nodes[x].name);
	}
	if (!m->eager) {
		m->eager = dt_graph_new();
		for (int i = 0; i < m->nnodes; i++) {
			struct dt_err e = DT_ERR_INIT;
			if (m->nodes[i].kind == OP_INPUT && add_input(m->eager, &m->inputs[m->nodes[i].input], &e))
				return dt__api_fail(m, e.status, "%s: %s", fn, e.msg);
		}
	}
	m->layers++;
	struct dt__api_node *n = new_node(m, proto.kind);
	*n = proto;
	n->input = -1;
	struct dt_err e = DT_ERR_INIT;
	if (apply(m, m->eager, n, 1, &e))
		return dt__api_fail(m, e.status, "%s: %s", fn, e.msg);
	return m->nnodes++;
}

static int act_ok(dtrain_activation act)
{
	return (int)act >= DTRAIN_LINEAR && (int)act <= DTRAIN_GELU;
}

#define BAD_ACT(m, fn, act) dt__api_fail(m, DT_USAGE, "%s: activation %d is not a dtrain_activation", fn, (int)(act))

dtrain_node dtrain_dense(dtrain_model *m, dtrain_node x, int units, dtrain_activation act)
{
	if (m && !act_ok(act))
		return BAD_ACT(m, "dtrain_dense", act);
	struct dt__api_node p = { .kind = OP_DENSE, .in = { x }, .nin = 1, .iarg = { units } };
	p.act = m ? (int)acts[act] : 0;
	return layer(m, "dtrain_dense", p);
}

dtrain_node dtrain_conv2d(dtrain_model *m, dtrain_node x, int filters, int kernel_h, int kernel_w, int stride,
			  dtrain_padding padding, dtrain_activation act)
{
	if (m && !act_ok(act))
		return BAD_ACT(m, "dtrain_conv2d", act);
	if (m && padding != DTRAIN_VALID && padding != DTRAIN_SAME)
		return dt__api_fail(m, DT_USAGE, "dtrain_conv2d: padding %d is not DTRAIN_VALID or DTRAIN_SAME",
				    (int)padding);
	/* nn/ fuses ReLU into the conv; other activations follow as their own node. */
	int fused = act == DTRAIN_RELU || act == DTRAIN_LINEAR;
	struct dt__api_node p = { .kind = OP_CONV2D, .in = { x }, .nin = 1,
				  .iarg = { filters, kernel_h, kernel_w, stride, padding == DTRAIN_SAME } };
	p.act = fused ? (int)acts[act] : (int)DT_ACT_LINEAR;
	dtrain_node c = layer(m, "dtrain_conv2d", p);
	return fused || c < 0 ? c : dtrain_activate(m, c, act);
}

static dtrain_node pool(dtrain_model *m, enum dt__api_op_kind kind, const char *fn, dtrain_node x, int size, int stride)
{
	struct dt__api_node p = { .kind = kind, .in = { x }, .nin = 1, .iarg = { size, stride } };
	return layer(m, fn, p);
}

dtrain_node dtrain_max_pool2d(dtrain_model *m, dtrain_node x, int size, int stride)
{
	return pool(m, OP_MAXPOOL, "dtrain_max_pool2d", x, size, stride);
}

dtrain_node dtrain_avg_pool2d(dtrain_model *m, dtrain_node x, int size, int stride)
{
	return pool(m, OP_AVGPOOL, "dtrain_avg_pool2d", x, size, stride);
}

dtrain_node dtrain_flatten(dtrain_model *m, dtrain_node x)
{
	struct dt__api_node p = { .kind = OP_FLATTEN, .in = { x }, .nin = 1 };
	return layer(m, "dtrain_flatten", p);
}

dtrain_node dtrain_reshape(dtrain_model *m, dtrain_node x, int ndim, const int64_t *shape)
{
	if (m && (ndim < 1 || ndim > 3 || !shape))
		return dt__api_fail(m, DT_CONFIG, "dtrain_reshape: a shape of 1 to 3 dimensions, got %d%s", ndim,
				    shape ? "" : " (shape NULL)");
	struct dt__api_node p = { .kind = OP_RESHAPE, .in = { x }, .nin = 1, .shape_n = ndim };
	for (int i = 0; m && i < ndim; i++) {
		if (shape[i] < -1 || shape[i] == 0 || shape[i] > (1 << 30))
			return dt__api_fail(m, DT_CONFIG, "dtrain_reshape: dimension %d is %lld", i, (long long)shape[i]);
		p.shape[i] = (int)shape[i];
	}
	return layer(m, "dtrain_reshape", p);
}

dtrain_node dtrain_activate(dtrain_model *m, dtrain_node x, dtrain_activation act)
{
	if (m && !act_ok(act))
		return BAD_ACT(m, "dtrain_activate", act);
	struct dt__api_node p = { .kind = OP_ACTIVATE, .in = { x }, .nin = 1 };
	p.act = m ? (int)acts[act] : 0;
	return layer(m, "dtrain_activate", p);
}

dtrain_node dtrain_dropout(dtrain_model *m, dtrain_node x, float rate)
{
	struct dt__api_node p = { .kind = OP_DROPOUT, .in = { x }, .nin = 1, .farg = rate };
	return layer(m, "dtrain_dropout", p);
}

dtrain_node dtrain_embedding(dtrain_model *m, dtrain_node ids, int vocab, int dim)
{
	struct dt__api_node p = { .kind = OP_EMBEDDING, .in = { ids }, .nin = 1, .iarg = { vocab, dim } };
	return layer(m, "dtrain_embedding", p);
}

dtrain_node dtrain_layer_norm(dtrain_model *m, dtrain_node x, float epsilon)
{
	struct dt__api_node p = { .kind = OP_LAYER_NORM, .in = { x }, .nin = 1, .farg = epsilon };
	return layer(m, "dtrain_layer_norm", p);
}

dtrain_node dtrain_add(dtrain_model *m, dtrain_node a, dtrain_node b)
{
	struct dt__api_node p = { .kind = OP_ADD, .in = { a, b }, .nin = 2 };
	return layer(m, "dtrain_add", p);
}

dtrain_node dtrain_concatenate(dtrain_model *m, int n, const dtrain_node *xs)
{
	if (m && (n < 2 || n > DT_API_OP_MAX_IN || !xs))
		return dt__api_fail(m, DT_USAGE, "dtrain_concatenate: %d nodes%s; give 2 to %d", n, xs ? "" : " (NULL)",
				    DT_API_OP_MAX_IN);
	struct dt__api_node p = { .kind = OP_CONCAT, .nin = n };
	for (int i = 0; m && i < n; i++)
		p.in[i] = xs[i];
	return layer(m, "dtrain_concatenate", p);
}

/* ---- losses ---- */

static dtrain_node loss(dtrain_model *m, const char *fn, enum dt_loss kind, dtrain_node out, dtrain_node target,
			dtrain_dtype want)
{
	if (!dt__api_usable(m, fn))
		return -1;
	if (!m->layers)
		return dt__api_fail(m, DT_USAGE, "%s: the model has no layers to put a loss on", fn);
	if (m->loss_kind >= 0)
		return dt__api_fail(m, DT_CONFIG, "%s: the model has a loss already (on '%s'); it takes one", fn,
				    m->nodes[m->loss_output].name);
	if (out < 0 || out >= m->nnodes || target < 0 || target >= m->nnodes)
		return dt__api_fail(m, DT_USAGE, "%s: node %d does not exist (the model has %d nodes)", fn,
				    out < 0 || out >= m->nnodes ? out : target, m->nnodes);
	if (m->nodes[out].kind == OP_INPUT)
		return dt__api_fail(m, DT_CONFIG, "%s: '%s' is an input; the loss reads a layer's output", fn,
				    m->nodes[out].name);
	const struct dt__api_node *t = &m->nodes[target];
	if (t->kind != OP_INPUT)
		return dt__api_fail(m, DT_CONFIG, "%s: the %s ('%s') must be an input the data fills", fn,
				    kind == DT_LOSS_SOFTMAX_XENT ? "labels" : "targets", t->name);
	for (int i = 0; i < m->nnodes; i++)
		for (int k = 0; k < m->nodes[i].nin; k++)
			if (m->nodes[i].in[k] == target)
				return dt__api_fail(m, DT_CONFIG, "%s: '%s' is read by '%s'; the loss's %s cannot be a "
								  "layer's input too",
						    fn, t->name, m->nodes[i].name,
						    kind == DT_LOSS_SOFTMAX_XENT ? "labels" : "targets");
	if (m->inputs[t->input].dtype != want)
		return dt__api_fail(m, DT_CONFIG, "%s: '%s' holds %s; the %s must be %s", fn, t->name,
				    m->inputs[t->input].dtype == DTRAIN_INT32 ? "int32" : "float32",
				    kind == DT_LOSS_SOFTMAX_XENT ? "labels" : "targets",
				    want == DTRAIN_INT32 ? "DTRAIN_INT32 class ids" : "DTRAIN_FLOAT32");
	struct dt_err e = DT_ERR_INIT;
	if (dt_graph_loss(m->eager, m->nodes[out].name, kind, &e))
		return dt__api_fail(m, e.status, "%s: %s", fn, e.msg);
	m->loss_kind = (int)kind;
	m->loss_output = out;
	m->loss_target = target;
	return out;
}

dtrain_node dtrain_softmax_cross_entropy(dtrain_model *m, dtrain_node logits, dtrain_node labels)
{
	return loss(m, "dtrain_softmax_cross_entropy", DT_LOSS_SOFTMAX_XENT, logits, labels, DTRAIN_INT32);
}

dtrain_node dtrain_sigmoid_cross_entropy(dtrain_model *m, dtrain_node logits, dtrain_node targets)
{
	return loss(m, "dtrain_sigmoid_cross_entropy", DT_LOSS_SIGMOID_XENT, logits, targets, DTRAIN_FLOAT32);
}

dtrain_node dtrain_mean_squared_error(dtrain_model *m, dtrain_node predictions, dtrain_node targets)
{
	return loss(m, "dtrain_mean_squared_error", DT_LOSS_MSE, predictions, targets, DTRAIN_FLOAT32);
}

/* ---- compiling ---- */

enum dt_status dt__api_compile_graph(const dtrain_model *m, const char *name, int max_batch, struct dt_model **out,
				     int feeds[DT_API_MAX_INPUTS], int *target_feed, struct dt_err *err)
{
	*out = NULL;
	struct dt_graph *g = dt_graph_new();
	enum dt_status st = DT_OK;
	for (int i = 0; i < m->nnodes && !st; i++) {
		struct dt__api_node n = m->nodes[i];
		if (n.kind == OP_INPUT)
			st = i == m->loss_target ? DT_OK : add_input(g, &m->inputs[n.input], err);
		else
			st = apply(m, g, &n, 0, err);
	}
	if (!st)
		st = dt_graph_loss(g, m->nodes[m->loss_output].name, (enum dt_loss)m->loss_kind, err);
	if (!st)
		st = dt_model_from_graph(g, name, max_batch, out, err);
	dt_graph_free(g);
	if (st)
		return st;
	for (int i = 0; i < dt_model_num_inputs(*out); i++)
		feeds[i] = dt__api_input_index(m, dt_model_input(*out, i)->name);
	const struct dt__api_input *lab = &m->inputs[m->nodes[m->loss_target].input];
	const struct dt_io_info *t = dt_model_target(*out);
	if ((size_t)lab->per_example != t->count) {
		dt_err_set(err, DT_CONFIG, "the loss on '%s' takes %zu %s per example; '%s' holds %lld",
			   m->nodes[m->loss_output].name, t->count, m->loss_kind == DT_LOSS_SOFTMAX_XENT ? "labels" : "targets",
			   lab->name, (long long)lab->per_example);
		dt_err_hint(err, "softmax cross-entropy takes one int32 class per row of the logits' last axis; the "
				 "others a float target per output");
		dt_model_free(*out);
		*out = NULL;
		return DT_CONFIG;
	}
	*target_feed = m->nodes[m->loss_target].input;
	return DT_OK;
}

enum dt_status dt__api_check_graph(const dtrain_model *cm, struct dt_err *err)
{
	dtrain_model *m = (dtrain_model *)(uintptr_t)cm; /* the probe is a cache of what m compiles to */
	if (m->loss_kind < 0) {
		dt_err_set(err, DT_CONFIG, "the layer graph has no loss");
		dt_err_hint(err, "end it with dtrain_softmax_cross_entropy, dtrain_sigmoid_cross_entropy or "
				 "dtrain_mean_squared_error");
		return DT_CONFIG;
	}
	if (m->probe)
		return DT_OK;
	int feeds[DT_API_MAX_INPUTS], target;
	return dt__api_compile_graph(m, "model", 1, &m->probe, feeds, &target, err);
}

enum dt_status dt__api_compile_named(const dtrain_model *m, const char *name, int max_batch, struct dt_model **out,
				     struct dt_err *err)
{
	*out = NULL;
	if (!m)
		return dt_err_set(err, DT_USAGE, "model '%s': no model (NULL)", name);
	if (m->first.status)
		return dt_err_set(err, m->first.status, "%s", m->first.msg);
	if (!m->layers)
		return dt_err_set(err, DT_INTERNAL, "model '%s' is not a layer graph", name);
	if (m->loss_kind < 0) /* its message and hint; no probe is compiled for a graph that has a loss */
		return dt__api_check_graph(m, err);
	int feeds[DT_API_MAX_INPUTS], target;
	return dt__api_compile_graph(m, name, max_batch, out, feeds, &target, err);
}
