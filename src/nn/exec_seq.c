/*
 * The graph executor's sequence nodes (nn/graph.h, "Sequence graphs"):
 * their buffers, and each node's forward and backward over the step's
 * (B, L) token rows through the kernels of nn/seq.h.
 *
 * Shared tables: a symbol or logits node that shares another symbol node's
 * table points its kernel and gradient at the owner's. Every writer adds
 * into that gradient, so the executor zeroes the tables before a backward
 * pass (dt__seq_zero_tables); the owner comes first in node order, so its
 * range of the flat buffer is reported ready after every sharer has added.
 */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "nn/model_impl.h"
#include "nn/seq.h"

static size_t attn_scratch(const struct dt_model *m, int D)
{
	const size_t R = (size_t)m->max_batch, L = (size_t)m->seq_max_len;
	/* the kernel's (dctx, dq, dk, dv; pd, dpd), then dxq and dxkv */
	return 4 * R * (size_t)D + 2 * L * L + 2 * R * (size_t)D;
}

size_t dt__seq_allocate(struct dt_model *m)
{
	size_t scratch = 0;
	const size_t R = (size_t)m->max_batch, L = (size_t)m->seq_max_len;
	for (int i = 0; i < m->num_nodes; i++) {
		struct dt_layer *l = &m->nodes[i].layer;
		if ((l->kind == DT_LAYER_SYMBOL || l->kind == DT_LAYER_LOGITS) && l->share) {
			const struct dt_layer *o = &m->nodes[l->share - 1].layer;
			l->kernel = o->kernel;
			l->dkernel = o->dkernel;
		}
		if (l->kind == DT_LAYER_ATTENTION) {
			const size_t D = (size_t)l->in.c, P = R * (size_t)l->heads * L; /* B L H L with B L <= R */
			l->attn = dt_xalloc_aligned(4 * R * D + P, sizeof(float));
			l->keep = dt_xalloc_aligned(l->rate_attn > 0.0f ? P : 1, 1);
			const size_t s = attn_scratch(m, l->in.c);
			scratch = s > scratch ? s : scratch;
		} else if (l->kind == DT_LAYER_LOGITS) {
			const size_t s = R * (size_t)l->in.c;
			scratch = s > scratch ? s : scratch;
		}
	}
	return scratch;
}

static struct dt_attn_buf attn_buf(const struct dt_model *m, const struct dt_layer *l)
{
	const size_t RD = (size_t)m->max_batch * (size_t)l->in.c;
	return (struct dt_attn_buf){ l->attn, l->attn + RD, l->attn + 2 * RD, l->attn + 3 * RD, l->attn + 4 * RD,
				     l->keep };
}

void dt__seq_zero_tables(struct dt_model *m)
{
	for (int i = 0; i < m->num_nodes; i++) {
		const struct dt_layer *l = &m->nodes[i].layer;
		if ((l->kind == DT_LAYER_SYMBOL || l->kind == DT_LAYER_LOGITS) && !l->share)
			memset(l->dkernel, 0, l->kernel_count * sizeof(float));
	}
}

enum dt_status dt__seq_forward(struct dt_model *m, int i, int training, struct dt_rng *rng, struct dt_err *err)
{
	const struct dt__node *n = &m->nodes[i];
	struct dt_layer *l = &m->nodes[i].layer;
	const int B = m->seq_B, L = m->seq_L;
	const size_t R = (size_t)B * (size_t)L;
	const void *x = m->val[n->inputs[0]];
	float *y = m->out[i];
	switch (l->kind) {
	case DT_LAYER_SHIFT:
		dt_shift_right_ids(x, (int32_t *)(void *)y, B, L);
		break;
	case DT_LAYER_TIMING:
		dt_timing_signal_add(x, y, B, L, l->out.c);
		break;
	case DT_LAYER_SYMBOL: {
		const int32_t *ids = x;
		for (size_t r = 0; r < R; r++)
			if (ids[r] < 0 || ids[r] >= l->vocab)
				return dt_err_set(err, DT_USAGE,
						  "model '%s': sequence %zu, position %zu: token id %d out of range [0, %d) for '%s'",
						  m->name, r / (size_t)L, r % (size_t)L, (int)ids[r], l->vocab, l->name);
		dt_symbol_forward(l->kernel, ids, R, l->out.c, sqrtf((float)l->out.c), y);
		break;
	}
	case DT_LAYER_LOGITS:
		dt_symbol_logits_forward(x, l->kernel, R, l->in.c, l->vocab, y);
		break;
	case DT_LAYER_ATTENTION: {
		const struct dt_attn_dims d = { B, L, l->in.c, l->heads, l->causal };
		struct dt_attn_buf buf = attn_buf(m, l);
		const int32_t *ids = n->ninputs > 2 ? m->val[n->inputs[2]] : NULL;
		const float rate = training ? l->rate_attn : 0.0f;
		dt_attention_forward(&d, x, m->val[n->inputs[1]], ids, l->kernel, y, &buf, rate, rng, m->scratch);
		break;
	}
	default:
		DT_ASSERT(!"not a sequence node");
	}
	return DT_OK;
}

void dt__seq_backward(struct dt_model *m, int i)
{
	const struct dt__node *n = &m->nodes[i];
	struct dt_layer *l = &m->nodes[i].layer;
	const int B = m->seq_B, L = m->seq_L;
	const size_t R = (size_t)B * (size_t)L;
	const float *dy = m->grad[i];
	const int j = n->inputs[0];
	switch (l->kind) {
	case DT_LAYER_SHIFT:
		break;
	case DT_LAYER_TIMING:
		if (m->needs_grad[j])
			dt__graph_give(m, j, dy, 1, R * (size_t)l->out.c, R * (size_t)l->out.c);
		break;
	case DT_LAYER_SYMBOL:
		dt_symbol_backward(m->val[j], R, l->out.c, sqrtf((float)l->out.c), dy, l->dkernel);
		break;
	case DT_LAYER_LOGITS: {
		float *dx = m->needs_grad[j] ? m->scratch : NULL;
		dt_symbol_logits_backward(m->val[j], l->kernel, dy, R, l->in.c, l->vocab, dx, l->dkernel);
		if (dx)
			dt__graph_give(m, j, dx, 1, R * (size_t)l->in.c, R * (size_t)l->in.c);
		break;
	}
	case DT_LAYER_ATTENTION: {
		const struct dt_attn_dims d = { B, L, l->in.c, l->heads, l->causal };
		const struct dt_attn_buf buf = attn_buf(m, l);
		const size_t RD = R * (size_t)l->in.c;
		float *dxq = m->scratch + attn_scratch(m, l->in.c) - 2 * (size_t)m->max_batch * (size_t)l->in.c;
		float *dxkv = dxq + (size_t)m->max_batch * (size_t)l->in.c;
		memset(l->dkernel, 0, l->kernel_count * sizeof(float));
		dt_attention_backward(&d, m->val[j], m->val[n->inputs[1]], l->kernel, &buf, l->rate_attn, dy, dxq, dxkv,
				      l->dkernel, m->scratch);
		if (m->needs_grad[j])
			dt__graph_give(m, j, dxq, 1, RD, RD);
		if (m->needs_grad[n->inputs[1]])
			dt__graph_give(m, n->inputs[1], dxkv, 1, RD, RD);
		break;
	}
	default:
		DT_ASSERT(!"not a sequence node");
	}
}
