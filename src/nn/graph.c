/*
 * The layer-graph builder (nn/graph.h) and its compilation into a model
 * (nn/model_impl.h). Every add call checks everything first and changes
 * the graph only when it succeeds, so a failed call leaves it as it was.
 */
#include "nn/graph.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "nn/graph_impl.h"

static const char *const prefixes[P_COUNT] = {
	"input",    "dense",    "conv",      "pool",       "avg_pool",       "flatten",        "reshape",
	"activation", "dropout", "embedding", "layer_norm", "add",            "concat",         "depthwise_conv2d",
	"separable_conv2d", "batch_normalization", "zero_padding2d", "global_average_pooling2d", "global_max_pooling2d",
	"inputs", "multihead_attention", "timing", "shift_right", "symbol", "logits"
};

struct dt_graph *dt_graph_new(void)
{
	return dt_xcalloc(1, sizeof(struct dt_graph));
}

void dt_graph_free(struct dt_graph *g)
{
	free(g);
}

const char *dt_graph_last(const struct dt_graph *g)
{
	return g && g->n > 0 ? g->nodes[g->n - 1].layer.name : "";
}

int dt_graph_num_nodes(const struct dt_graph *g)
{
	return g ? g->n : 0;
}

int dt_graph_node_dims(const struct dt_graph *g, const char *name, int dims[3])
{
	for (int i = 0; g && name && i < g->n; i++)
		if (strcmp(g->nodes[i].layer.name, name) == 0) {
			memcpy(dims, g->nodes[i].dims, sizeof(g->nodes[i].dims));
			return g->nodes[i].rank;
		}
	return 0;
}

/* ---- helpers ------------------------------------------------------------------ */

void dt__graph_fmt_dims(char *buf, size_t cap, int rank, const int *dims)
{
	int64_t d[3];
	for (int i = 0; i < rank; i++)
		d[i] = dims[i];
	dt_shape_format(buf, cap, rank, d);
}

struct dt_shape dt__graph_to_shape(int rank, const int *d)
{
	if (rank == 1)
		return (struct dt_shape){ 1, 1, d[0] };
	if (rank == 2)
		return (struct dt_shape){ 1, d[0], d[1] };
	return (struct dt_shape){ d[0], d[1], d[2] };
}

void dt__graph_set_dims(struct dt__node *n, int rank, struct dt_shape s)
{
	n->rank = rank;
	const int all[3] = { s.h, s.w, s.c };
	for (int i = 0; i < rank; i++)
		n->dims[i] = all[3 - rank + i];
}

long dt__graph_elems(int rank, const int *d)
{
	long e = 1;
	for (int i = 0; i < rank; i++)
		e *= d[i];
	return e;
}

static int find(const struct dt_graph *g, const char *name)
{
	for (int i = 0; i < g->n; i++)
		if (strcmp(g->nodes[i].layer.name, name) == 0)
			return i;
	return -1;
}

static enum dt_status check_name(const struct dt_graph *g, const char *name, struct dt_err *err)
{
	const size_t len = strlen(name);
	if (len == 0)
		return dt_err_set(err, DT_CONFIG, "node name is empty (names have 1 to %d bytes)", DT_LAYER_NAME_MAX - 1);
	if (len >= DT_LAYER_NAME_MAX)
		return dt_err_set(err, DT_CONFIG, "node name '%.64s...' has %zu bytes, more than the %d allowed", name, len,
				  DT_LAYER_NAME_MAX - 1);
	if (!dt_utf8_name_ok(name, len))
		return dt_err_set(err, DT_CONFIG, "node name '%s' is not UTF-8 text without control characters", name);
	if (name[0] == '/' || name[len - 1] == '/' || strstr(name, "//"))
		return dt_err_set(err, DT_CONFIG, "node name '%s': a '/' may only separate scopes (none first, last or "
				  "twice in a row)", name);
	if (find(g, name) >= 0)
		return dt_err_set(err, DT_CONFIG, "node name '%s' is already used in this graph", name);
	return DT_OK;
}

/* Picks the node's name (the caller's or the next free default) into
 * `out`; checks there is room. Counters advance only on commit. */
enum dt_status dt__graph_begin(struct dt_graph *g, const char *name, enum dt__prefix p, char *out, int *number,
			    struct dt_err *err)
{
	if (!g)
		return dt_err_set(err, DT_USAGE, "no graph (NULL)");
	if (g->n >= DT__MAX_NODES)
		return dt_err_set(err, DT_CONFIG, "graph has %d nodes already, the most it can hold", DT__MAX_NODES);
	*number = g->counter[p];
	if (name) {
		snprintf(out, DT_LAYER_NAME_MAX, "%s", name);
		return check_name(g, name, err);
	}
	do
		snprintf(out, DT_LAYER_NAME_MAX, "%s_%d", prefixes[p], ++*number);
	while (find(g, out) >= 0);
	return DT_OK;
}

/* The node `input` names (NULL: the last one), as its index in *idx. */
enum dt_status dt__graph_resolve(const struct dt_graph *g, const char *node, const char *input, int *idx,
			      struct dt_err *err)
{
	if (!input) {
		if (g->n == 0)
			return dt_err_set(err, DT_CONFIG, "node '%s': no input given and the graph is empty (add an input first)",
					  node);
		*idx = g->n - 1;
		return DT_OK;
	}
	*idx = find(g, input);
	if (*idx < 0)
		return dt_err_set(err, DT_CONFIG, "node '%s': no node named '%s' in the graph", node, input);
	return DT_OK;
}

enum dt_status dt__graph_want_float(const struct dt_graph *g, const char *node, int in, struct dt_err *err)
{
	if (g->nodes[in].dtype != DT_FLOAT32)
		return dt_err_set(err, DT_CONFIG, "node '%s': needs a float32 input, but '%s' is %s (token ids go into an embedding)",
				  node, g->nodes[in].layer.name, dt_dtype_name(g->nodes[in].dtype));
	return DT_OK;
}

enum dt_status dt__graph_want_rank(const struct dt_graph *g, const char *node, const char *what, int in, int rank,
				struct dt_err *err)
{
	if (g->nodes[in].rank == rank)
		return DT_OK;
	char s[64];
	dt__graph_fmt_dims(s, sizeof(s), g->nodes[in].rank, g->nodes[in].dims);
	return dt_err_set(err, DT_CONFIG, "node '%s': %s needs an input of rank %d, but '%s' gives %s", node, what, rank,
			  g->nodes[in].layer.name, s);
}

enum dt_status dt__graph_begin_on(struct dt_graph *g, const char *name, enum dt__prefix p, const char *input,
				  char *out, int *number, int *in, struct dt_err *err)
{
	enum dt_status st = dt__graph_begin(g, name, p, out, number, err);
	return st ? st : dt__graph_resolve(g, out, input, in, err);
}

enum dt_status dt__graph_want_image(const struct dt_graph *g, const char *node, const char *what, int in,
				    struct dt_err *err)
{
	enum dt_status st = dt__graph_want_float(g, node, in, err);
	return st ? st : dt__graph_want_rank(g, node, what, in, 3, err);
}

enum dt_status dt__graph_get_init(const char *node, const char *text, const char *dflt, struct dt_init *out,
			       struct dt_err *err)
{
	if (dt_init_parse(text ? text : dflt, out, err) == DT_OK)
		return DT_OK;
	dt_err_prefix(err, "node '%s'", node);
	return err ? (err->status = DT_CONFIG) : DT_CONFIG;
}

/* Adds node `n` (filled by the caller) and advances its prefix's counter. */
void dt__graph_commit(struct dt_graph *g, const struct dt__node *n, enum dt__prefix p, int number)
{
	g->nodes[g->n++] = *n;
	g->counter[p] = number;
}

enum dt_status dt__graph_layer_status(enum dt_status st, const char *node, const struct dt_graph *g, int in,
				   struct dt_err *err)
{
	if (st) {
		char s[64];
		dt__graph_fmt_dims(s, sizeof(s), g->nodes[in].rank, g->nodes[in].dims);
		dt_err_prefix(err, "node '%s' on '%s' %s", node, g->nodes[in].layer.name, s);
	}
	return st;
}

/* ---- nodes ---------------------------------------------------------------------- */

enum dt_status dt_graph_input(struct dt_graph *g, const char *name, enum dt_dtype dtype, int ndim, const int *shape,
			      struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number;
	enum dt_status st = dt__graph_begin(g, name, P_INPUT, nm, &number, err);
	if (st)
		return st;
	int inputs = 0;
	for (int i = 0; i < g->n; i++)
		inputs += g->nodes[i].layer.kind == DT_LAYER_INPUT;
	if (inputs >= DT_MODEL_MAX_INPUTS)
		return dt_err_set(err, DT_CONFIG, "input '%s': a model takes at most %d inputs", nm, DT_MODEL_MAX_INPUTS);
	if (dtype != DT_FLOAT32 && dtype != DT_INT32)
		return dt_err_set(err, DT_CONFIG, "input '%s': unknown dtype %d", nm, (int)dtype);
	if (g->seq_max_len > 0)
		return dt_err_set(err, DT_CONFIG, "input '%s': a sequence graph takes sequence inputs only", nm);
	if (ndim < 1 || ndim > 3 || !shape)
		return dt_err_set(err, DT_CONFIG, "input '%s': per-example shape must have rank 1 to 3, got %d", nm, ndim);
	long e = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 1 || shape[i] > MAX_ELEMS)
			return dt_err_set(err, DT_CONFIG, "input '%s': dimension %d is %d, must be 1 to %ld", nm, i, shape[i],
					  MAX_ELEMS);
		e *= shape[i];
		if (e > MAX_ELEMS)
			return dt_err_set(err, DT_CONFIG, "input '%s': more than %ld values per example", nm, MAX_ELEMS);
	}
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	n.rank = ndim;
	memcpy(n.dims, shape, (size_t)ndim * sizeof(int));
	n.dtype = dtype;
	dt_layer_shape_only(&n.layer, DT_LAYER_INPUT, nm, dt__graph_to_shape(ndim, n.dims), dt__graph_to_shape(ndim, n.dims));
	dt__graph_commit(g, &n, P_INPUT, number);
	return DT_OK;
}

enum dt_status dt_graph_dense(struct dt_graph *g, const char *name, const char *input, int units, enum dt_act act,
			      const char *kernel_init, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	enum dt_status st = dt__graph_begin_on(g, name, P_DENSE, input, nm, &number, &in, err);
	if (!st)
		st = dt__graph_want_float(g, nm, in, err);
	if (!st)
		st = dt__graph_get_init(nm, kernel_init, "glorot_uniform", &n.init[0], err);
	if (st)
		return st;
	if ((int)act < DT_ACT_LINEAR || (int)act > DT_ACT_LAST)
		return dt_err_set(err, DT_CONFIG, "node '%s': unknown activation %d", nm, (int)act);
	const struct dt__node *src = &g->nodes[in];
	const long fan_in = src->dims[src->rank - 1];
	if (units < 1 || units > MAX_ELEMS || fan_in * (long)units > 4 * MAX_ELEMS ||
	    dt__graph_elems(src->rank, src->dims) / fan_in * units > MAX_ELEMS)
		return dt_err_set(err, DT_CONFIG, "node '%s': dense needs 1 to %ld units (and a kernel of at most %ld values), got %d",
				  nm, MAX_ELEMS, 4 * MAX_ELEMS, units);
	st = dt__graph_layer_status(dt_layer_dense_act(&n.layer, nm, src->layer.out, units, act, 1, err), nm, g, in, err);
	if (st)
		return st;
	n.ninputs = 1;
	n.inputs[0] = in;
	n.rank = src->rank;
	memcpy(n.dims, src->dims, sizeof(n.dims));
	n.dims[n.rank - 1] = units;
	n.init[1] = (struct dt_init){ .kind = DT_INIT_ZEROS };
	dt__graph_commit(g, &n, P_DENSE, number);
	return DT_OK;
}

enum dt_status dt_graph_conv2d(struct dt_graph *g, const char *name, const char *input, int filters, int kh, int kw,
			       int stride, enum dt_padding padding, enum dt_act act, const char *kernel_init,
			       struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	enum dt_status st = dt__graph_begin_on(g, name, P_CONV, input, nm, &number, &in, err);
	if (!st)
		st = dt__graph_want_image(g, nm, "conv2d", in, err);
	if (!st)
		st = dt__graph_get_init(nm, kernel_init, "glorot_uniform", &n.init[0], err);
	if (st)
		return st;
	if (act != DT_ACT_RELU && act != DT_ACT_LINEAR)
		return dt_err_set(err, DT_CONFIG, "node '%s': conv2d fuses relu or linear only (add an activation node)", nm);
	if (padding != DT_PADDING_VALID && padding != DT_PADDING_SAME)
		return dt_err_set(err, DT_CONFIG, "node '%s': unknown padding %d", nm, (int)padding);
	const struct dt__node *src = &g->nodes[in];
	if (filters < 1 || filters > 65536 || kh < 1 || kw < 1 || kh > 4096 || kw > 4096 || stride < 1 || stride > 4096 ||
	    (long)kh * kw * src->dims[2] * filters > 4 * MAX_ELEMS)
		return dt_err_set(err, DT_CONFIG,
				  "node '%s': conv2d with %d filters, a %dx%d window and stride %d is out of range", nm,
				  filters, kh, kw, stride);
	if (padding == DT_PADDING_SAME)
		st = dt_layer_conv2d_same(&n.layer, nm, src->layer.out, kh, kw, filters, stride, act == DT_ACT_RELU, err);
	else
		st = dt_layer_conv2d(&n.layer, nm, src->layer.out, kh, kw, filters, stride, 0, act == DT_ACT_RELU, err);
	if (dt__graph_layer_status(st, nm, g, in, err))
		return st;
	if ((long)dt_shape_elems(n.layer.out) > MAX_ELEMS ||
	    (long)n.layer.geom.OH * n.layer.geom.OW * dt_conv_k(&n.layer.geom) > 4 * MAX_ELEMS)
		return dt_err_set(err, DT_CONFIG, "node '%s': conv2d output or im2col too large", nm);
	n.ninputs = 1;
	n.inputs[0] = in;
	dt__graph_set_dims(&n, 3, n.layer.out);
	n.init[1] = (struct dt_init){ .kind = DT_INIT_ZEROS };
	dt__graph_commit(g, &n, P_CONV, number);
	return DT_OK;
}

enum dt_status dt_graph_pool(struct dt_graph *g, const char *name, const char *input, enum dt_pool_kind kind,
			     int ph, int pw, int sh, int sw, enum dt_padding padding, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	const enum dt__prefix p = kind == DT_POOL_AVG ? P_AVG_POOL : P_POOL;
	enum dt_status st = dt__graph_begin_on(g, name, p, input, nm, &number, &in, err);
	if (!st)
		st = dt__graph_want_image(g, nm, "pooling", in, err);
	if (st)
		return st;
	if ((kind != DT_POOL_MAX && kind != DT_POOL_AVG) || (padding != DT_PADDING_VALID && padding != DT_PADDING_SAME))
		return dt_err_set(err, DT_CONFIG, "node '%s': unknown pooling kind %d or padding %d", nm, (int)kind,
				  (int)padding);
	if (ph > 4096 || pw > 4096 || sh > 4096 || sw > 4096)
		return dt_err_set(err, DT_CONFIG, "node '%s': pooling window or strides above 4096", nm);
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	const struct dt__node *src = &g->nodes[in];
	if (kind == DT_POOL_MAX && ph == 2 && pw == 2 && sh == 2 && sw == 2 && padding == DT_PADDING_VALID)
		st = dt_layer_maxpool2(&n.layer, nm, src->layer.out, err); /* the tuned kernel; fusable */
	else
		st = dt_layer_pool(&n.layer, nm, src->layer.out, kind == DT_POOL_MAX, ph, pw, sh, sw,
				   padding == DT_PADDING_SAME, err);
	if (dt__graph_layer_status(st, nm, g, in, err))
		return st;
	n.ninputs = 1;
	n.inputs[0] = in;
	dt__graph_set_dims(&n, 3, n.layer.out);
	dt__graph_commit(g, &n, p, number);
	return DT_OK;
}

enum dt_status dt_graph_flatten(struct dt_graph *g, const char *name, const char *input, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, P_FLATTEN, input, nm, &number, &in, err);
	if (st)
		return st;
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	const struct dt__node *src = &g->nodes[in];
	if (dt__graph_layer_status(dt_layer_flatten(&n.layer, nm, src->layer.out, err), nm, g, in, err))
		return DT_CONFIG;
	n.ninputs = 1;
	n.inputs[0] = in;
	n.dtype = src->dtype;
	dt__graph_set_dims(&n, 1, n.layer.out);
	dt__graph_commit(g, &n, P_FLATTEN, number);
	return DT_OK;
}

enum dt_status dt_graph_reshape(struct dt_graph *g, const char *name, const char *input, int ndim, const int *shape,
				struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, P_RESHAPE, input, nm, &number, &in, err);
	if (st)
		return st;
	if (ndim < 1 || ndim > 3 || !shape)
		return dt_err_set(err, DT_CONFIG, "node '%s': reshape to rank %d, must be 1 to 3", nm, ndim);
	const struct dt__node *src = &g->nodes[in];
	const long total = dt__graph_elems(src->rank, src->dims);
	int dims[3], free_axis = -1;
	long known = 1;
	for (int i = 0; i < ndim; i++) {
		dims[i] = shape[i];
		if (shape[i] == -1 && free_axis < 0) {
			free_axis = i;
			continue;
		}
		if (shape[i] < 1 || shape[i] > MAX_ELEMS)
			return dt_err_set(err, DT_CONFIG, "node '%s': reshape dimension %d is %d (one -1 allowed, others >= 1)", nm,
					  i, shape[i]);
		known *= shape[i];
		if (known > MAX_ELEMS)
			break;
	}
	if (free_axis >= 0 && known > 0 && known <= MAX_ELEMS && total % known == 0)
		dims[free_axis] = (int)(total / known);
	char a[64], b[64];
	dt__graph_fmt_dims(a, sizeof(a), src->rank, src->dims);
	dt__graph_fmt_dims(b, sizeof(b), ndim, shape);
	if (known > MAX_ELEMS || (free_axis >= 0 && total % known != 0) || (free_axis < 0 && known != total))
		return dt_err_set(err, DT_CONFIG, "node '%s': cannot reshape '%s' %s (%ld values) to %s", nm,
				  src->layer.name, a, total, b);
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	if (dt__graph_layer_status(dt_layer_reshape(&n.layer, nm, src->layer.out, dt__graph_to_shape(ndim, dims), err), nm, g, in, err))
		return DT_CONFIG;
	n.ninputs = 1;
	n.inputs[0] = in;
	n.dtype = src->dtype;
	n.rank = ndim;
	memcpy(n.dims, dims, sizeof(dims));
	dt__graph_commit(g, &n, P_RESHAPE, number);
	return DT_OK;
}

/* activation, dropout, layer_norm: float in, same shape out. */
static enum dt_status same_shape(struct dt_graph *g, const char *name, const char *input, enum dt__prefix p,
				 enum dt_layer_kind kind, enum dt_act act, float value, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, p, input, nm, &number, &in, err);
	if (!st)
		st = dt__graph_want_float(g, nm, in, err);
	if (st)
		return st;
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	const struct dt__node *src = &g->nodes[in];
	if (kind == DT_LAYER_ACTIVATION)
		st = dt_layer_activation(&n.layer, nm, src->layer.out, act, err);
	else if (kind == DT_LAYER_DROPOUT)
		st = dt_layer_dropout(&n.layer, nm, src->layer.out, value, err);
	else
		st = dt_layer_layernorm(&n.layer, nm, src->layer.out, value, err);
	if (dt__graph_layer_status(st, nm, g, in, err))
		return st;
	n.ninputs = 1;
	n.inputs[0] = in;
	n.rank = src->rank;
	memcpy(n.dims, src->dims, sizeof(n.dims));
	n.init[0] = (struct dt_init){ .kind = DT_INIT_ONES };
	n.init[1] = (struct dt_init){ .kind = DT_INIT_ZEROS };
	dt__graph_commit(g, &n, p, number);
	return DT_OK;
}

enum dt_status dt_graph_activation(struct dt_graph *g, const char *name, const char *input, enum dt_act act,
				   struct dt_err *err)
{
	return same_shape(g, name, input, P_ACT, DT_LAYER_ACTIVATION, act, 0, err);
}

enum dt_status dt_graph_dropout(struct dt_graph *g, const char *name, const char *input, float rate,
				struct dt_err *err)
{
	return same_shape(g, name, input, P_DROPOUT, DT_LAYER_DROPOUT, DT_ACT_LINEAR, rate, err);
}

enum dt_status dt_graph_layer_norm(struct dt_graph *g, const char *name, const char *input, float eps,
				   struct dt_err *err)
{
	return same_shape(g, name, input, P_NORM, DT_LAYER_LAYERNORM, DT_ACT_LINEAR, eps, err);
}

enum dt_status dt_graph_embedding(struct dt_graph *g, const char *name, const char *input, int vocab, int dim,
				  const char *init, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	enum dt_status st = dt__graph_begin_on(g, name, P_EMB, input, nm, &number, &in, err);
	if (!st)
		st = dt__graph_get_init(nm, init, "random_normal(0.05)", &n.init[0], err);
	if (st)
		return st;
	const struct dt__node *src = &g->nodes[in];
	char s[64];
	dt__graph_fmt_dims(s, sizeof(s), src->rank, src->dims);
	if (src->dtype != DT_INT32)
		return dt_err_set(err, DT_CONFIG, "node '%s': embedding needs int32 token ids, but '%s' %s is %s", nm,
				  src->layer.name, s, dt_dtype_name(src->dtype));
	if (src->rank > 2)
		return dt_err_set(err, DT_CONFIG, "node '%s': embedding needs ids of rank 1 or 2, but '%s' gives %s", nm,
				  src->layer.name, s);
	if (vocab < 1 || dim < 1 || (long)vocab * dim > 4 * MAX_ELEMS || dt__graph_elems(src->rank, src->dims) * dim > MAX_ELEMS)
		return dt_err_set(err, DT_CONFIG, "node '%s': embedding of %d rows of %d is out of range", nm, vocab, dim);
	if (dt__graph_layer_status(dt_layer_embedding(&n.layer, nm, src->layer.out, vocab, dim, err), nm, g, in, err))
		return DT_CONFIG;
	n.ninputs = 1;
	n.inputs[0] = in;
	n.rank = src->rank + 1;
	memcpy(n.dims, src->dims, sizeof(n.dims));
	n.dims[src->rank] = dim;
	dt__graph_commit(g, &n, P_EMB, number);
	return DT_OK;
}

/* add (concat 0) or concat (1) of n named inputs. */
static enum dt_status merge(struct dt_graph *g, const char *name, int count, const char *const *inputs, int concat,
			    struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number;
	const enum dt__prefix p = concat ? P_CONCAT : P_ADD;
	enum dt_status st = dt__graph_begin(g, name, p, nm, &number, err);
	if (st)
		return st;
	if (count < 2 || count > DT__MAX_NODE_INPUTS || !inputs)
		return dt_err_set(err, DT_CONFIG, "node '%s': %s takes 2 to %d inputs, got %d", nm, concat ? "concat" : "add",
				  DT__MAX_NODE_INPUTS, count);
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	long last = 0;
	for (int j = 0; j < count; j++) {
		if (!inputs[j])
			return dt_err_set(err, DT_CONFIG, "node '%s': input %d is NULL", nm, j);
		st = dt__graph_resolve(g, nm, inputs[j], &n.inputs[j], err);
		if (!st)
			st = dt__graph_want_float(g, nm, n.inputs[j], err);
		if (st)
			return st;
		const struct dt__node *a = &g->nodes[n.inputs[0]], *b = &g->nodes[n.inputs[j]];
		char sa[64], sb[64];
		dt__graph_fmt_dims(sa, sizeof(sa), a->rank, a->dims);
		dt__graph_fmt_dims(sb, sizeof(sb), b->rank, b->dims);
		int same_lead = a->rank == b->rank;
		for (int d = 0; same_lead && d + 1 < a->rank; d++)
			same_lead = a->dims[d] == b->dims[d];
		if (!concat && (!same_lead || a->dims[a->rank - 1] != b->dims[b->rank - 1]))
			return dt_err_set(err, DT_CONFIG, "node '%s': cannot add '%s' %s and '%s' %s: the shapes differ", nm,
					  a->layer.name, sa, b->layer.name, sb);
		if (concat && !same_lead)
			return dt_err_set(err, DT_CONFIG,
					  "node '%s': cannot concatenate '%s' %s and '%s' %s along the last axis: the other "
					  "dimensions differ",
					  nm, a->layer.name, sa, b->layer.name, sb);
		last += b->dims[b->rank - 1];
	}
	const struct dt__node *a = &g->nodes[n.inputs[0]];
	n.ninputs = count;
	n.rank = a->rank;
	memcpy(n.dims, a->dims, sizeof(n.dims));
	if (concat) {
		if (dt__graph_elems(a->rank - 1, a->dims) * last > MAX_ELEMS)
			return dt_err_set(err, DT_CONFIG, "node '%s': concatenation too large", nm);
		n.dims[n.rank - 1] = (int)last;
	}
	dt_layer_shape_only(&n.layer, concat ? DT_LAYER_CONCAT : DT_LAYER_ADD, nm, a->layer.out, dt__graph_to_shape(n.rank, n.dims));
	dt__graph_commit(g, &n, p, number);
	return DT_OK;
}

enum dt_status dt_graph_add(struct dt_graph *g, const char *name, int n, const char *const *inputs,
			    struct dt_err *err)
{
	return merge(g, name, n, inputs, 0, err);
}

enum dt_status dt_graph_concat(struct dt_graph *g, const char *name, int n, const char *const *inputs,
			       struct dt_err *err)
{
	return merge(g, name, n, inputs, 1, err);
}

enum dt_status dt_graph_loss(struct dt_graph *g, const char *output, enum dt_loss loss, struct dt_err *err)
{
	if (!g)
		return dt_err_set(err, DT_USAGE, "no graph (NULL)");
	int out;
	enum dt_status st = dt__graph_resolve(g, "loss", output, &out, err);
	if (!st)
		st = dt__graph_want_float(g, "loss", out, err);
	if (st)
		return st;
	if (loss != DT_LOSS_SOFTMAX_XENT && loss != DT_LOSS_SIGMOID_XENT && loss != DT_LOSS_MSE)
		return dt_err_set(err, DT_CONFIG, "loss on '%s': unknown loss %d", g->nodes[out].layer.name, (int)loss);
	g->has_loss = 1;
	g->output = out;
	g->loss = loss;
	return DT_OK;
}

/* ---- compilation ------------------------------------------------------------------ */

/* Folds ReLU activations and 2x2 max pools into the conv or dense node
 * they read, and ReLU or ReLU6 into a batch norm (MobileNetV2's pairs),
 * when nothing else reads that node (nn/graph.h). */
static void fuse(struct dt_model *m, const int *consumers)
{
	for (int i = 0; i < m->num_nodes; i++) {
		struct dt__node *n = &m->nodes[i];
		const int relu = n->layer.kind == DT_LAYER_ACTIVATION && n->layer.act == DT_ACT_RELU;
		const int relu6 = n->layer.kind == DT_LAYER_ACTIVATION && n->layer.act == DT_ACT_RELU6;
		/* a node whose output has a regularizer keeps that output as it is */
		if ((relu || relu6) && !m->nodes[n->inputs[0]].fused && consumers[n->inputs[0]] == 1 &&
		    !dt_regularizer_on(m->nodes[n->inputs[0]].reg[2]) &&
		    m->nodes[n->inputs[0]].layer.kind == DT_LAYER_BATCHNORM &&
		    m->nodes[n->inputs[0]].layer.act == DT_ACT_LINEAR) {
			m->nodes[n->inputs[0]].layer.act = n->layer.act;
			n->fused = 1;
			continue;
		}
		if (!relu && n->layer.kind != DT_LAYER_MAXPOOL2)
			continue;
		int c = n->inputs[0], ok = consumers[c] == 1 && !dt_regularizer_on(m->nodes[c].reg[2]);
		while (ok && m->nodes[c].fused) {
			c = m->nodes[c].inputs[0];
			ok = consumers[c] == 1 && !dt_regularizer_on(m->nodes[c].reg[2]);
		}
		struct dt_layer *l = &m->nodes[c].layer;
		if (!ok || l->pool)
			continue;
		if (relu && (l->kind == DT_LAYER_CONV2D || l->kind == DT_LAYER_DENSE) && l->act == DT_ACT_LINEAR) {
			l->relu = 1;
			l->act = DT_ACT_RELU;
			n->fused = 1;
		} else if (!relu && l->kind == DT_LAYER_CONV2D && l->out.h >= 2 && l->out.w >= 2) {
			DT_ASSERT(dt_layer_fuse_pool(l, NULL) == DT_OK);
			n->fused = 1;
		}
	}
}

static void io_info(struct dt_io_info *io, const char *name, enum dt_dtype dtype, int rank, const int *dims)
{
	memset(io, 0, sizeof(*io));
	snprintf(io->name, sizeof(io->name), "%s", name);
	io->dtype = dtype;
	io->ndim = rank;
	io->count = 1;
	for (int i = 0; i < rank; i++) {
		io->shape[i] = dims[i];
		io->count *= (size_t)dims[i];
	}
}

static void add_vars(struct dt_model *m, struct dt__node *n)
{
	const struct dt_layer *l = &n->layer;
	const char *name = n->var_prefix[0] ? n->var_prefix : l->name;
	const char *kernel = n->kernel_suffix ? n->kernel_suffix : "kernel";
	const int first = m->num_vars;
	n->var_first = dt_layer_num_params(l) > 0 ? first : -1;
	const int64_t bs[1] = { (int64_t)l->bias_count };
	if (l->kind == DT_LAYER_DENSE) {
		const int64_t ks[2] = { (int64_t)(l->kernel_count / (size_t)l->out.c), l->out.c };
		dt__model_add_var(m, name, kernel, 2, ks, 1, n->init[0]);
		if (l->bias_count)
			dt__model_add_var(m, name, "bias", 1, bs, 0, n->init[1]);
	} else if (l->kind == DT_LAYER_CONV2D) {
		const int64_t ks[4] = { l->geom.KH, l->geom.KW, l->geom.C, l->out.c };
		dt__model_add_var(m, name, kernel, 4, ks, 1, n->init[0]);
		if (l->bias_count)
			dt__model_add_var(m, name, "bias", 1, bs, 0, n->init[1]);
	} else if (l->kind == DT_LAYER_DEPTHWISE) {
		const int64_t ks[4] = { l->dw.KH, l->dw.KW, l->dw.C, l->dw.M };
		dt__model_add_var(m, name, n->kernel_suffix ? kernel : "depthwise_kernel", 4, ks, 1, n->init[0]);
		if (l->bias_count)
			dt__model_add_var(m, name, "bias", 1, bs, 0, n->init[1]);
	} else if (l->kind == DT_LAYER_LAYERNORM || l->kind == DT_LAYER_BATCHNORM) {
		const int64_t s[1] = { l->in.c };
		dt__model_add_var(m, name, "gamma", 1, s, 0, n->init[0]);
		dt__model_add_var(m, name, "beta", 1, s, 0, n->init[1]);
		if (l->kind == DT_LAYER_BATCHNORM) {
			dt__model_add_var(m, name, "moving_mean", 1, s, 0, (struct dt_init){ .kind = DT_INIT_ZEROS });
			dt__model_add_var(m, name, "moving_variance", 1, s, 0, (struct dt_init){ .kind = DT_INIT_ONES });
			dt__model_freeze_var(m, m->num_vars - 2);
			dt__model_freeze_var(m, m->num_vars - 1);
		}
	} else if (l->kind == DT_LAYER_ATTENTION) {
		const int64_t s[2] = { l->in.c, l->in.c };
		static const char *const w[4] = { "q/kernel", "k/kernel", "v/kernel", "output_transform/kernel" };
		for (int i = 0; i < 4; i++)
			dt__model_add_var(m, name, w[i], 2, s, 1, n->init[0]);
	} else if ((l->kind == DT_LAYER_SYMBOL || l->kind == DT_LAYER_LOGITS) && !l->share) {
		const int64_t s[2] = { l->vocab, l->kind == DT_LAYER_SYMBOL ? l->out.c : l->in.c };
		dt__model_add_var(m, name, "weights", 2, s, 1, n->init[0]);
	} else if (l->kind == DT_LAYER_EMBEDDING) {
		const int64_t s[2] = { l->vocab, l->out.c };
		dt__model_add_var(m, name, "embeddings", 2, s, 1, n->init[0]);
	}
	if (n->frozen)
		for (int i = first; i < m->num_vars; i++)
			dt__model_freeze_var(m, i);
	else if (l->kind == DT_LAYER_BATCHNORM) {
		dt__model_moving_average_var(m, m->num_vars - 2, l->momentum);
		dt__model_moving_average_var(m, m->num_vars - 1, l->momentum);
	}
}

enum dt_status dt_model_from_graph(const struct dt_graph *g, const char *name, int max_batch, struct dt_model **out,
				   struct dt_err *err)
{
	if (out)
		*out = NULL;
	if (!g || !out)
		return dt_err_set(err, DT_USAGE, "dt_model_from_graph: graph or output pointer is NULL");
	if (!name || !*name)
		name = "model";
	if (!g->has_loss)
		return dt_err_set(err, DT_CONFIG, "model '%s': the graph has no loss (call dt_graph_loss)", name);
	if (max_batch < 1 || (long)max_batch > (1L << 20))
		return dt_err_set(err, DT_CONFIG, "model '%s': max_batch must be 1 to %ld, got %d", name, 1L << 20, max_batch);
	struct dt_model *m = dt_xcalloc(1, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->max_batch = max_batch;
	m->num_nodes = g->n;
	m->nodes = dt_xcalloc((size_t)g->n, sizeof(*m->nodes));
	memcpy(m->nodes, g->nodes, (size_t)g->n * sizeof(*m->nodes));
	m->output = g->output;
	m->loss = g->loss;

	int *consumers = dt_xcalloc((size_t)g->n, sizeof(int));
	for (int i = 0; i < g->n; i++)
		for (int j = 0; j < g->nodes[i].ninputs; j++)
			consumers[g->nodes[i].inputs[j]]++;
	consumers[m->output]++;
	fuse(m, consumers);
	free(consumers);

	m->store = dt_xcalloc((size_t)g->n, sizeof(int));
	m->needs_grad = dt_xcalloc((size_t)g->n, sizeof(int));
	m->layer_node = dt_xcalloc((size_t)g->n, sizeof(int));
	for (int i = 0; i < g->n; i++) {
		const struct dt__node *n = &m->nodes[i];
		m->nodes[i].var_first = -1;
		const int view = n->fused || dt_layer_is_view(&n->layer);
		m->store[i] = view ? m->store[n->inputs[0]] : i;
		m->needs_grad[i] = !n->fused && dt_layer_num_params(&n->layer) > 0;
		for (int j = 0; j < n->ninputs; j++)
			m->needs_grad[i] |= m->needs_grad[n->inputs[j]];
		if (n->layer.kind == DT_LAYER_INPUT) {
			io_info(&m->inputs[m->num_inputs], n->layer.name, n->dtype, n->rank, n->dims);
			m->input_node[m->num_inputs++] = i;
		} else if (!n->fused) {
			m->layer_node[m->num_layers++] = i;
			add_vars(m, &m->nodes[i]);
		}
	}
	const struct dt__node *o = &m->nodes[m->output];
	m->rows = 1;
	m->seq_max_len = g->seq_max_len;
	m->label_smoothing = g->label_smoothing;
	if (m->loss == DT_LOSS_PADDED_XENT) {
		const int one = 1;
		m->classes = o->dims[0];
		io_info(&m->target, "targets", DT_INT32, 1, &one);
	} else if (m->loss == DT_LOSS_SOFTMAX_XENT) {
		m->classes = o->dims[o->rank - 1];
		m->rows = (int)(dt__graph_elems(o->rank, o->dims) / m->classes);
		const int one = 1;
		if (o->rank == 1)
			io_info(&m->target, "labels", DT_INT32, 1, &one);
		else
			io_info(&m->target, "labels", DT_INT32, o->rank - 1, o->dims);
	} else {
		io_info(&m->target, "targets", DT_FLOAT32, o->rank, o->dims);
	}
	if (dt__model_check_constraints(m, name, err)) {
		dt_model_free(m);
		return DT_CONFIG;
	}
	/* Names may hold '/' (Keras's scopes), so node "a" with variable
	 * "a/q/kernel" and node "a/q" with "a/q/kernel" would be one name. */
	for (int i = 0; i < m->num_vars; i++)
		for (int j = 0; j < i; j++)
			if (strcmp(m->vars[i].name, m->vars[j].name) == 0) {
				dt_err_set(err, DT_CONFIG, "model '%s': two variables named '%s' (rename one of their nodes)",
					   name, m->vars[i].name);
				dt_model_free(m);
				return DT_CONFIG;
			}
	if (m->num_params > (size_t)MAX_PARAMS) { /* each layer's limit still lets their sum grow past memory */
		const size_t np = m->num_params;
		dt_model_free(m);
		return dt_err_set(err, DT_CONFIG, "model '%s': %zu parameters, more than the %ld (1 GiB of float32) a "
				  "model may hold", name, np, MAX_PARAMS);
	}
	dt__graph_allocate(m);
	*out = m;
	return DT_OK;
}
