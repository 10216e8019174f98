/*
 * The graph builder's sequence nodes (nn/graph.h, "Sequence graphs"):
 * checks and shapes; exec_seq.c runs them. As in graph.c, a call that
 * fails changes nothing.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn/graph_impl.h"

#define MAX_WIDTH (1 << 20)
#define MAX_VOCAB (1 << 24)

static void token_node(struct dt__node *n, enum dt_layer_kind kind, const char *name, int width,
		       enum dt_dtype dtype, struct dt_shape in)
{
	memset(n, 0, sizeof(*n));
	dt_layer_shape_only(&n->layer, kind, name, in, (struct dt_shape){ 1, 1, width });
	n->rank = 1;
	n->dims[0] = width;
	n->dtype = dtype;
}

static enum dt_status want_ids(const struct dt_graph *g, const char *node, int in, struct dt_err *err)
{
	if (g->nodes[in].dtype == DT_INT32 && g->seq_max_len > 0)
		return DT_OK;
	return dt_err_set(err, DT_CONFIG, "node '%s': needs the token ids of a sequence input, but '%s' is not one", node,
			  g->nodes[in].layer.name);
}

static enum dt_status want_token_float(const struct dt_graph *g, const char *node, int in, struct dt_err *err)
{
	enum dt_status st = dt__graph_want_float(g, node, in, err);
	if (st)
		return st;
	if (g->seq_max_len > 0 && g->nodes[in].rank == 1)
		return DT_OK;
	char s[64];
	dt__graph_fmt_dims(s, sizeof(s), g->nodes[in].rank, g->nodes[in].dims);
	return dt_err_set(err, DT_CONFIG, "node '%s': needs one vector per token of a sequence graph, but '%s' gives %s",
			  node, g->nodes[in].layer.name, s);
}

/* The symbol node that owns the table `share_with` names (following shares). */
static enum dt_status table_owner(const struct dt_graph *g, const char *node, const char *share_with, int *owner,
				  struct dt_err *err)
{
	enum dt_status st = dt__graph_resolve(g, node, share_with, owner, err);
	if (st)
		return st;
	const struct dt_layer *l = &g->nodes[*owner].layer;
	if (l->kind != DT_LAYER_SYMBOL)
		return dt_err_set(err, DT_CONFIG, "node '%s': can share the table of a symbol node only, and '%s' is not one",
				  node, share_with);
	if (l->share)
		*owner = l->share - 1;
	return DT_OK;
}

enum dt_status dt_graph_sequence_input(struct dt_graph *g, const char *name, int max_length, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number;
	enum dt_status st = dt__graph_begin(g, name, P_SEQ_INPUT, nm, &number, err);
	if (st)
		return st;
	int inputs = 0;
	for (int i = 0; i < g->n; i++)
		inputs += g->nodes[i].layer.kind == DT_LAYER_INPUT;
	if (inputs >= DT_MODEL_MAX_INPUTS)
		return dt_err_set(err, DT_CONFIG, "input '%s': a model takes at most %d inputs", nm, DT_MODEL_MAX_INPUTS);
	if (inputs > 0 && g->seq_max_len == 0)
		return dt_err_set(err, DT_CONFIG, "input '%s': a sequence input cannot join a graph of other inputs", nm);
	if (max_length < 1 || max_length > 65536 || (g->seq_max_len > 0 && max_length != g->seq_max_len))
		return dt_err_set(err, DT_CONFIG, "input '%s': max_length %d must be 1 to 65536 and the same for every input%s",
				  nm, max_length, g->seq_max_len > 0 ? " (the graph's is different)" : "");
	struct dt__node n;
	token_node(&n, DT_LAYER_INPUT, nm, 1, DT_INT32, (struct dt_shape){ 1, 1, 1 });
	g->seq_max_len = max_length;
	dt__graph_commit(g, &n, P_SEQ_INPUT, number);
	return DT_OK;
}

enum dt_status dt_graph_symbol(struct dt_graph *g, const char *name, const char *ids, int vocab, int dim,
			       const char *share_with, const char *init, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX], dflt[48];
	int number, in, owner = -1;
	struct dt__node n;
	snprintf(dflt, sizeof(dflt), "random_normal(%.9g)", dim > 0 ? 1.0 / sqrt((double)dim) : 1.0);
	enum dt_status st = dt__graph_begin_on(g, name, P_SYMBOL, ids, nm, &number, &in, err);
	if (!st)
		st = want_ids(g, nm, in, err);
	if (!st && share_with)
		st = table_owner(g, nm, share_with, &owner, err);
	struct dt_init ini;
	if (!st)
		st = dt__graph_get_init(nm, init, dflt, &ini, err);
	if (st)
		return st;
	if (owner >= 0) {
		vocab = g->nodes[owner].layer.vocab;
		if (dim != g->nodes[owner].layer.out.c)
			return dt_err_set(err, DT_CONFIG, "node '%s': width %d differs from the table of '%s' (%d)", nm, dim,
					  g->nodes[owner].layer.name, g->nodes[owner].layer.out.c);
	}
	if (vocab < 2 || vocab > MAX_VOCAB || dim < 1 || dim > MAX_WIDTH || (long)vocab * dim > (1L << 30))
		return dt_err_set(err, DT_CONFIG, "node '%s': a table of %d symbols of width %d is out of range", nm, vocab, dim);
	token_node(&n, DT_LAYER_SYMBOL, nm, dim, DT_FLOAT32, g->nodes[in].layer.out);
	n.ninputs = 1;
	n.inputs[0] = in;
	n.layer.vocab = vocab;
	n.layer.share = owner + 1;
	n.layer.kernel_count = owner >= 0 ? 0 : (size_t)vocab * (size_t)dim;
	n.init[0] = ini;
	dt__graph_commit(g, &n, P_SYMBOL, number);
	return DT_OK;
}

enum dt_status dt_graph_timing_signal(struct dt_graph *g, const char *name, const char *input, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, P_TIMING, input, nm, &number, &in, err);
	if (!st)
		st = want_token_float(g, nm, in, err);
	if (st)
		return st;
	struct dt__node n;
	token_node(&n, DT_LAYER_TIMING, nm, g->nodes[in].dims[0], DT_FLOAT32, g->nodes[in].layer.out);
	n.ninputs = 1;
	n.inputs[0] = in;
	dt__graph_commit(g, &n, P_TIMING, number);
	return DT_OK;
}

enum dt_status dt_graph_shift_right(struct dt_graph *g, const char *name, const char *ids, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in;
	enum dt_status st = dt__graph_begin_on(g, name, P_SHIFT, ids, nm, &number, &in, err);
	if (!st)
		st = want_ids(g, nm, in, err);
	if (st)
		return st;
	struct dt__node n;
	token_node(&n, DT_LAYER_SHIFT, nm, 1, DT_INT32, g->nodes[in].layer.out);
	n.ninputs = 1;
	n.inputs[0] = in;
	dt__graph_commit(g, &n, P_SHIFT, number);
	return DT_OK;
}

enum dt_status dt_graph_attention(struct dt_graph *g, const char *name, const char *query, const char *memory,
				  const char *memory_ids, int heads, int causal, float dropout, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, q, kv, ids = -1;
	enum dt_status st = dt__graph_begin_on(g, name, P_ATTN, query, nm, &number, &q, err);
	if (!st)
		st = want_token_float(g, nm, q, err);
	if (!st)
		st = dt__graph_resolve(g, nm, memory ? memory : g->nodes[q].layer.name, &kv, err);
	if (!st)
		st = want_token_float(g, nm, kv, err);
	if (!st && memory_ids) {
		st = dt__graph_resolve(g, nm, memory_ids, &ids, err);
		if (!st)
			st = want_ids(g, nm, ids, err);
	}
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	if (!st)
		st = dt__graph_get_init(nm, NULL, "glorot_uniform", &n.init[0], err);
	if (st)
		return st;
	const int D = g->nodes[q].dims[0];
	if (g->nodes[kv].dims[0] != D)
		return dt_err_set(err, DT_CONFIG, "node '%s': query '%s' has width %d but memory '%s' has %d", nm,
				  g->nodes[q].layer.name, D, g->nodes[kv].layer.name, g->nodes[kv].dims[0]);
	if (heads < 1 || D % heads != 0 || D > 16384)
		return dt_err_set(err, DT_CONFIG, "node '%s': %d heads must divide the width %d (at most 16384)", nm, heads, D);
	if (!(dropout >= 0.0f && dropout < 1.0f))
		return dt_err_set(err, DT_CONFIG, "node '%s': attention dropout %g must be in [0, 1)", nm, (double)dropout);
	const struct dt_init ini = n.init[0];
	token_node(&n, DT_LAYER_ATTENTION, nm, D, DT_FLOAT32, g->nodes[q].layer.out);
	n.init[0] = ini;
	n.ninputs = ids >= 0 ? 3 : 2;
	n.inputs[0] = q;
	n.inputs[1] = kv;
	n.inputs[2] = ids >= 0 ? ids : 0;
	n.layer.heads = heads;
	n.layer.causal = causal != 0;
	n.layer.rate_attn = dropout;
	n.layer.kernel_count = 4 * (size_t)D * (size_t)D;
	dt__graph_commit(g, &n, P_ATTN, number);
	return DT_OK;
}

enum dt_status dt_graph_logits(struct dt_graph *g, const char *name, const char *input, int vocab,
			       const char *share_with, struct dt_err *err)
{
	char nm[DT_LAYER_NAME_MAX];
	int number, in, owner = -1;
	struct dt__node n;
	memset(&n, 0, sizeof(n));
	enum dt_status st = dt__graph_begin_on(g, name, P_LOGITS, input, nm, &number, &in, err);
	if (!st)
		st = want_token_float(g, nm, in, err);
	if (!st && share_with)
		st = table_owner(g, nm, share_with, &owner, err);
	if (!st)
		st = dt__graph_get_init(nm, NULL, "glorot_uniform", &n.init[0], err);
	if (st)
		return st;
	const int D = g->nodes[in].dims[0];
	if (owner >= 0) {
		vocab = g->nodes[owner].layer.vocab;
		if (g->nodes[owner].layer.out.c != D)
			return dt_err_set(err, DT_CONFIG, "node '%s': input width %d differs from the table of '%s' (%d)", nm, D,
					  g->nodes[owner].layer.name, g->nodes[owner].layer.out.c);
	}
	if (vocab < 2 || vocab > MAX_VOCAB || (long)vocab * D > (1L << 30))
		return dt_err_set(err, DT_CONFIG, "node '%s': %d classes of width %d is out of range", nm, vocab, D);
	const struct dt_init ini = n.init[0];
	token_node(&n, DT_LAYER_LOGITS, nm, vocab, DT_FLOAT32, g->nodes[in].layer.out);
	n.init[0] = ini;
	n.ninputs = 1;
	n.inputs[0] = in;
	n.layer.vocab = vocab;
	n.layer.share = owner + 1;
	n.layer.kernel_count = owner >= 0 ? 0 : (size_t)vocab * (size_t)D;
	dt__graph_commit(g, &n, P_LOGITS, number);
	return DT_OK;
}

enum dt_status dt_graph_sequence_loss(struct dt_graph *g, const char *logits, float label_smoothing,
				      struct dt_err *err)
{
	if (!g)
		return dt_err_set(err, DT_USAGE, "no graph (NULL)");
	int out;
	enum dt_status st = dt__graph_resolve(g, "loss", logits, &out, err);
	if (!st)
		st = want_token_float(g, "loss", out, err);
	if (st)
		return st;
	if (g->nodes[out].dims[0] < 2)
		return dt_err_set(err, DT_CONFIG, "loss on '%s': needs at least 2 classes", g->nodes[out].layer.name);
	if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f))
		return dt_err_set(err, DT_CONFIG, "loss on '%s': label_smoothing %g must be in [0, 1)",
				  g->nodes[out].layer.name, (double)label_smoothing);
	g->has_loss = 1;
	g->output = out;
	g->loss = DT_LOSS_PADDED_XENT;
	g->label_smoothing = label_smoothing;
	return DT_OK;
}
