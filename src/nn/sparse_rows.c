/*
 * sparse_rows.c — which variables a batch reads by rows, and which rows
 * (nn/model.h, "Row-sparse variables"): what a parameter server moves as
 * TensorFlow's IndexedSlices (docs/DISTRIBUTED.md, "Sparse rows").
 */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "nn/model_impl.h"

/* The input node whose ids gather node i reads (through the decoder's
 * shift_right: *shifted), or -1 when they come from anywhere else. */
static int ids_source(const struct dt_model *m, int i, int *shifted)
{
	int src = m->nodes[i].inputs[0];
	*shifted = 0;
	if (m->nodes[src].layer.kind == DT_LAYER_SHIFT) {
		src = m->nodes[src].inputs[0];
		*shifted = 1;
	}
	return m->nodes[src].layer.kind == DT_LAYER_INPUT ? src : -1;
}

/* The node owning variable v's table when only gathers read it: an
 * embedding, or a symbol node that no logits node shares; else -1. */
static int gather_owner(const struct dt_model *m, int v)
{
	if (m->custom || m->vars[v].kind != DT_VAR_TRAINABLE)
		return -1;
	for (int i = 0; i < m->num_nodes; i++) {
		const struct dt_layer *l = &m->nodes[i].layer;
		const int owns = (l->kind == DT_LAYER_EMBEDDING || l->kind == DT_LAYER_SYMBOL) && !l->share &&
				 l->kernel == m->params + m->vars[v].offset;
		if (!owns)
			continue;
		int shifted;
		for (int j = 0; j < m->num_nodes; j++) {
			const struct dt_layer *r = &m->nodes[j].layer;
			if (r->kind == DT_LAYER_LOGITS && r->share == i + 1)
				return -1; /* a softmax on the table reads every row: its gradient is dense */
			if ((j == i || (r->kind == DT_LAYER_SYMBOL && r->share == i + 1)) && ids_source(m, j, &shifted) < 0)
				return -1;
		}
		return i;
	}
	return -1;
}

int dt_model_sparse_vars(const struct dt_model *m, int *vars, int cap)
{
	int n = 0;
	for (int v = 0; v < m->num_vars; v++)
		if (gather_owner(m, v) >= 0) {
			if (n < cap)
				vars[n] = v;
			n++;
		}
	return n;
}

/* The batch's tensor for input node `node` (inputs are taken in node order). */
static const int32_t *input_ids(const struct dt_model *m, const struct dt_model_batch *b, int node)
{
	int k = 0;
	for (int i = 0; i < node; i++)
		k += m->nodes[i].layer.kind == DT_LAYER_INPUT;
	return k < b->num_inputs ? b->inputs[k].data : NULL;
}

size_t dt_model_batch_rows(const struct dt_model *m, const struct dt_model_batch *b, int var, int64_t *rows)
{
	const int owner = gather_owner(m, var);
	DT_ASSERT(owner >= 0);
	const int64_t vocab = m->vars[var].shape[0];
	unsigned char *seen = dt_xcalloc((size_t)vocab, 1);
	for (int i = 0; i < m->num_nodes; i++) {
		const struct dt_layer *l = &m->nodes[i].layer;
		if (i != owner && !(l->kind == DT_LAYER_SYMBOL && l->share == owner + 1))
			continue;
		int shifted; /* the decoder's input: the targets shifted right, without their last position */
		const int32_t *ids = input_ids(m, b, ids_source(m, i, &shifted));
		if (!ids)
			continue; /* a batch without that input: the forward pass refuses it */
		const size_t B = (size_t)b->size;
		const size_t per = m->seq_max_len > 0 ? (size_t)b->length : dt_shape_elems(l->in);
		for (size_t e = 0; e < B; e++)
			for (size_t t = 0; t + (size_t)shifted < per; t++) {
				const int32_t id = ids[e * per + t];
				/* A symbol node never reads id 0's row (the padding: zero); ids out of
				 * range are the forward pass's to refuse. */
				if (id >= 0 && id < vocab && !(l->kind == DT_LAYER_SYMBOL && id == 0))
					seen[id] = 1;
			}
	}
	size_t n = 0;
	for (int64_t r = 0; r < vocab; r++)
		if (seen[r])
			rows[n++] = r;
	free(seen);
	return n;
}
