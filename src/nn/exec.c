/*
 * The graph executor: per-node buffers, and one forward (+ loss, +
 * backward) pass over a compiled graph (nn/model_impl.h describes the node
 * list). Forward runs the nodes in order; backward runs them in reverse,
 * each consumer handing its input gradient to the node it read: the first
 * hand-over writes the gradient, later ones (a node read twice, as a
 * residual connection does) add to it through `tmp`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/trace.h"
#include "nn/bleu.h"
#include "nn/model_impl.h"
#include "nn/seq.h"
#include "tensor/kernels.h"

static int is_seq(const struct dt_layer *l)
{
	return l->kind == DT_LAYER_ATTENTION || l->kind == DT_LAYER_TIMING || l->kind == DT_LAYER_SHIFT ||
	       l->kind == DT_LAYER_SYMBOL || l->kind == DT_LAYER_LOGITS;
}

/* Rows the nodes run on: examples, or a sequence model's tokens. */
static int rows_of(const struct dt_model *m, const struct dt_model_batch *b)
{
	return m->seq_max_len > 0 ? b->size * b->length : b->size;
}

static int is_view(const struct dt__node *n)
{
	return n->fused || dt_layer_is_view(&n->layer);
}

static size_t round16(size_t n)
{
	return (n + 15) / 16 * 16; /* each buffer 64-byte aligned */
}

/*
 * The plan of the output gradients' memory (a graph without sequence nodes).
 * Backward runs the nodes from the last to the first; the gradient of a
 * node t that owns memory (its `store`) is written first at the backward
 * step of its last consumer — at the start of backward for the loss's input
 * and for a node with an output regularizer — and read last at t's own step.
 * So it lives over the steps [t, last], and two gradients whose steps do not
 * meet can share memory: each is placed, largest first, at the lowest
 * offset clear of those it meets (the greedy-by-size plan of TFLite's
 * arena). A chain such as MobileNetV2 then holds a few gradients at a time
 * instead of one per node: about half of what training keeps. Every
 * gradient buffer is written whole before it is read (the first hand-over
 * copies, dt__graph_give; a layer's backward writes its dx whole), so what
 * a buffer held before does not matter. Returns the floats the plan needs
 * (offsets in floats into it in off[]).
 */
static size_t plan_grads(const struct dt_model *m, const int *owns, size_t *off)
{
	const int N = m->num_nodes;
	const size_t B = (size_t)m->max_batch;
	int *last = dt_xcalloc((size_t)N, sizeof(int)), *order = dt_xcalloc((size_t)N, sizeof(int));
	size_t *size = dt_xcalloc((size_t)N, sizeof(size_t));
	int n = 0;
	for (int i = 0; i < N; i++) {
		const struct dt__node *nd = &m->nodes[i];
		if (!owns[i])
			continue;
		last[i] = i;
		size[i] = round16(dt_shape_elems(nd->layer.out)) * B;
		order[n++] = i;
		if (i == m->store[m->output] || dt_regularizer_on(nd->reg[2]))
			last[i] = N;
	}
	for (int i = 0; i < N; i++) {
		const struct dt__node *nd = &m->nodes[i];
		if (nd->layer.kind == DT_LAYER_INPUT || is_view(nd) || !m->needs_grad[i])
			continue;
		for (int k = 0; k < nd->ninputs; k++) {
			const int t = m->store[nd->inputs[k]];
			if (m->needs_grad[nd->inputs[k]] && owns[t] && last[t] < i)
				last[t] = i;
		}
	}
	for (int a = 1; a < n; a++) /* largest first; ties by node, so the plan is the same every time */
		for (int b = a; b > 0 && (size[order[b]] > size[order[b - 1]] ||
					  (size[order[b]] == size[order[b - 1]] && order[b] < order[b - 1])); b--) {
			const int t = order[b];
			order[b] = order[b - 1];
			order[b - 1] = t;
		}
	size_t total = 0;
	for (int a = 0; a < n; a++) {
		const int t = order[a];
		size_t at = 0;
		for (int moved = 1; moved;) { /* the lowest offset clear of every placed one it meets */
			moved = 0;
			for (int c = 0; c < a; c++) {
				const int u = order[c];
				const int meet = t <= last[u] && u <= last[t];
				if (meet && at < off[u] + size[u] && off[u] < at + size[t]) {
					at = off[u] + size[u];
					moved = 1;
				}
			}
		}
		off[t] = at;
		total = at + size[t] > total ? at + size[t] : total;
	}
	free(last);
	free(order);
	free(size);
	return total;
}

void dt__graph_allocate(struct dt_model *m)
{
	const int N = m->num_nodes;
	const size_t B = (size_t)m->max_batch;
	m->out = dt_xcalloc((size_t)N, sizeof(*m->out));
	m->grad = dt_xcalloc((size_t)N, sizeof(*m->grad));
	m->val = dt_xcalloc((size_t)N, sizeof(*m->val));
	m->written = dt_xcalloc((size_t)N, sizeof(int));
	dt__model_alloc_params(m);
	size_t off = 0, act_floats = 0, dact_floats = 0, largest = 1, scratch = 0;
	for (int i = 0; i < N; i++) {
		struct dt__node *n = &m->nodes[i];
		struct dt_layer *l = &n->layer;
		if (n->fused)
			continue;
		dt_layer_bind(l, m->params + off, m->grads + off);
		off += dt_layer_num_params(l);
		dt_layer_alloc_state(l, m->max_batch);
		const size_t e = dt_shape_elems(l->out);
		largest = e > largest ? e : largest;
		if (l->kind == DT_LAYER_INPUT || is_view(n))
			continue;
		act_floats += round16(e);
		if (m->needs_grad[i] || i == m->store[m->output])
			dact_floats += round16(e);
		const size_t s = dt_layer_scratch_floats(l, m->max_batch);
		scratch = s > scratch ? s : scratch;
	}
	DT_ASSERT(off == m->num_params);
	if (m->seq_max_len > 0) {
		const size_t s = dt__seq_allocate(m);
		scratch = s > scratch ? s : scratch;
	}
	int *owns = dt_xcalloc((size_t)N, sizeof(int));
	size_t *goff = dt_xcalloc((size_t)N, sizeof(size_t));
	for (int i = 0; i < N; i++) {
		const struct dt__node *n = &m->nodes[i];
		owns[i] = !n->fused && n->layer.kind != DT_LAYER_INPUT && !is_view(n) &&
			  (m->needs_grad[i] || i == m->store[m->output]);
	}
	/* Sequence nodes read and write other nodes' gradients of their own
	 * (exec_seq.c): each gradient keeps its own memory there. */
	size_t planned = dact_floats * B;
	if (m->seq_max_len == 0)
		planned = plan_grads(m, owns, goff);
	m->acts = dt_xalloc_aligned(act_floats * B + 1, sizeof(float));
	m->dacts = dt_xalloc_aligned(planned + 1, sizeof(float));
	m->dacts_floats = planned;
	float *p = m->acts, *q = m->dacts;
	for (int i = 0; i < N; i++) {
		struct dt__node *n = &m->nodes[i];
		if (n->fused || n->layer.kind == DT_LAYER_INPUT || is_view(n))
			continue;
		const size_t e = round16(dt_shape_elems(n->layer.out)) * B;
		m->out[i] = p;
		p += e;
		if (!owns[i])
			continue;
		if (m->seq_max_len == 0) {
			m->grad[i] = m->dacts + goff[i];
		} else {
			m->grad[i] = q;
			q += e;
		}
	}
	m->acts_floats = act_floats * B;
	m->dacts_unplanned = dact_floats * B;
	free(owns);
	free(goff);
	m->scratch = dt_xalloc_aligned(scratch + 1, sizeof(float));
	m->tmp = dt_xalloc_aligned(largest * B, sizeof(float));
	m->labels32 = dt_xalloc_aligned((size_t)m->rows * B + 1, sizeof(int32_t));
}

/* Token ids must index the table: checked before anything runs. */
static enum dt_status check_ids(const struct dt_model *m, const struct dt__node *n, const int32_t *ids, int B,
				struct dt_err *err)
{
	const size_t per = dt_shape_elems(n->layer.in);
	for (size_t i = 0; i < (size_t)B * per; i++)
		if (ids[i] < 0 || ids[i] >= n->layer.vocab)
			return dt_err_set(err, DT_USAGE,
					  "model '%s': example %zu, position %zu: token id %d out of range [0, %d) for embedding '%s'",
					  m->name, i / per, i % per, (int)ids[i], n->layer.vocab, n->layer.name);
	return DT_OK;
}

static enum dt_status forward(struct dt_model *m, const struct dt_model_batch *b, int training, struct dt_rng *rng,
			      struct dt_err *err)
{
	const int B = rows_of(m, b);
	int next_input = 0;
	for (int i = 0; i < m->num_nodes; i++) {
		struct dt__node *n = &m->nodes[i];
		struct dt_layer *l = &n->layer;
		const void *x = n->ninputs > 0 ? m->val[n->inputs[0]] : NULL;
		if (l->kind == DT_LAYER_INPUT) {
			m->val[i] = b->inputs[next_input++].data;
			continue;
		}
		if (is_view(n)) {
			m->val[i] = x;
			continue;
		}
		float *y = m->out[i];
		m->val[i] = y;
		const size_t e = dt_shape_elems(l->out) * (size_t)B;
		if (is_seq(l)) {
			enum dt_status st = dt__seq_forward(m, i, training, rng, err);
			if (st)
				return st;
			continue;
		}
		switch (l->kind) {
		case DT_LAYER_EMBEDDING: {
			enum dt_status st = check_ids(m, n, x, B, err);
			if (st)
				return st;
			dt_layer_embedding_forward(l, x, y, B);
			break;
		}
		case DT_LAYER_ADD:
			memcpy(y, x, e * sizeof(float));
			for (int j = 1; j < n->ninputs; j++) {
				const float *xj = m->val[n->inputs[j]];
				for (size_t k = 0; k < e; k++)
					y[k] += xj[k];
			}
			break;
		case DT_LAYER_CONCAT: {
			const size_t rows = e / (size_t)l->out.c;
			size_t at = 0;
			for (int j = 0; j < n->ninputs; j++) {
				const size_t cj = (size_t)m->nodes[n->inputs[j]].layer.out.c;
				const float *xj = m->val[n->inputs[j]];
				for (size_t r = 0; r < rows; r++)
					memcpy(y + r * (size_t)l->out.c + at, xj + r * cj, cj * sizeof(float));
				at += cj;
			}
			break;
		}
		default:
			dt_layer_forward(l, x, y, B, training, rng, m->scratch);
			break;
		}
	}
	return DT_OK;
}

/* Hands gradient `src` (rows, width) with row stride `ld` to node j's
 * output gradient: written by the first consumer, added by the others. */
void dt__graph_give(struct dt_model *m, int j, const float *src, size_t rows, size_t width, size_t ld)
{
	const int t = m->store[j];
	float *dst = m->grad[t];
	DT_ASSERT(dst != NULL);
	if (!m->written[t]) {
		for (size_t r = 0; r < rows; r++)
			memcpy(dst + r * width, src + r * ld, width * sizeof(float));
		m->written[t] = 1;
		return;
	}
	for (size_t r = 0; r < rows; r++)
		for (size_t k = 0; k < width; k++)
			dst[r * width + k] += src[r * ld + k];
}

/* ---- regularizers (nn/regularize.h) ---- */

/* The kernel-like variable's regularizer on reg[0], the bias-like one's on
 * reg[1]: their gradients join the layer's before its range is reported. */
static void weight_penalty_grads(const struct dt__node *n)
{
	const struct dt_layer *l = &n->layer;
	if (dt_regularizer_on(n->reg[0]))
		dt_regularizer_grad(n->reg[0], 1.0f, l->kernel, l->dkernel, l->kernel_count);
	if (n->reg[0].orth != 0.0f) /* a dense kernel (IN, OUT) */
		(void)dt_orthogonal_penalty(n->reg[0].orth, n->reg[0].orth_cols, l->kernel,
					    (int)(l->kernel_count / (size_t)l->out.c), l->out.c, l->dkernel);
	if (dt_regularizer_on(n->reg[1]) && l->bias_count)
		dt_regularizer_grad(n->reg[1], 1.0f, l->bias, l->dbias, l->bias_count);
}

/* The output regularizers' gradients, handed to their nodes before any
 * consumer's (dt__graph_give adds what comes after). */
static void output_penalty_grads(struct dt_model *m, int B)
{
	for (int i = 0; i < m->num_nodes; i++) {
		const struct dt__node *n = &m->nodes[i];
		if (!dt_regularizer_on(n->reg[2]) || !m->needs_grad[i])
			continue;
		const size_t e = dt_shape_elems(n->layer.out) * (size_t)B;
		memset(m->tmp, 0, e * sizeof(float));
		dt_regularizer_grad(n->reg[2], n->reg_per_example ? 1.0f / (float)B : 1.0f, m->val[i], m->tmp, e);
		dt__graph_give(m, i, m->tmp, 1, e, e);
	}
}

/* Every penalty of the step: the trained variables' and the outputs'. */
static double penalties(const struct dt_model *m, int B)
{
	double sum = 0.0;
	for (int i = 0; i < m->num_nodes; i++) {
		const struct dt__node *n = &m->nodes[i];
		const struct dt_layer *l = &n->layer;
		if (!n->frozen && dt_regularizer_on(n->reg[0]))
			sum += dt_regularizer_penalty(n->reg[0], l->kernel, l->kernel_count);
		if (!n->frozen && n->reg[0].orth != 0.0f)
			sum += dt_orthogonal_penalty(n->reg[0].orth, n->reg[0].orth_cols, l->kernel,
						     (int)(l->kernel_count / (size_t)l->out.c), l->out.c, NULL);
		if (!n->frozen && dt_regularizer_on(n->reg[1]) && l->bias_count)
			sum += dt_regularizer_penalty(n->reg[1], l->bias, l->bias_count);
		if (dt_regularizer_on(n->reg[2])) {
			const size_t e = dt_shape_elems(l->out) * (size_t)B;
			const double p = dt_regularizer_penalty(n->reg[2], m->val[i], e);
			sum += n->reg_per_example ? p / (double)B : p;
		}
	}
	return sum;
}

static void backward(struct dt_model *m, int B, dt_grads_ready_fn on_ready, void *arg)
{
	output_penalty_grads(m, B);
	for (int i = m->num_nodes - 1; i >= 0; i--) {
		struct dt__node *n = &m->nodes[i];
		struct dt_layer *l = &n->layer;
		if (l->kind == DT_LAYER_INPUT || is_view(n) || !m->needs_grad[i])
			continue;
		const size_t np = dt_layer_num_params(l);
		float *dy = m->grad[i];
		const size_t e = dt_shape_elems(l->out) * (size_t)B;
		if (!m->written[i]) {
			/* nothing downstream reaches the loss: a zero gradient (shared
			 * tables were zeroed before the pass and may hold others' parts) */
			if (np && l->kind != DT_LAYER_SYMBOL && l->kind != DT_LAYER_LOGITS)
				memset(l->dkernel, 0, np * sizeof(float));
		} else if (is_seq(l)) {
			dt__seq_backward(m, i);
		} else if (l->kind == DT_LAYER_EMBEDDING) {
			dt_layer_embedding_backward(l, m->val[n->inputs[0]], dy, B);
		} else if (l->kind == DT_LAYER_ADD) {
			for (int j = 0; j < n->ninputs; j++)
				if (m->needs_grad[n->inputs[j]])
					dt__graph_give(m, n->inputs[j], dy, 1, e, e);
		} else if (l->kind == DT_LAYER_CONCAT) {
			const size_t rows = e / (size_t)l->out.c;
			size_t at = 0;
			for (int j = 0; j < n->ninputs; j++) {
				const size_t cj = (size_t)m->nodes[n->inputs[j]].layer.out.c;
				if (m->needs_grad[n->inputs[j]])
					dt__graph_give(m, n->inputs[j], dy + at, rows, cj, (size_t)l->out.c);
				at += cj;
			}
		} else {
			const int j = n->inputs[0], t = m->store[j];
			float *dx = NULL;
			int accumulate = 0;
			if (m->needs_grad[j]) {
				accumulate = m->written[t];
				dx = accumulate ? m->tmp : m->grad[t];
				m->written[t] = 1;
			}
			dt_layer_backward(l, m->val[j], m->out[i], dy, dx, B, m->scratch);
			if (accumulate) {
				const size_t ne = dt_shape_elems(l->in) * (size_t)B;
				float *g = m->grad[t];
				for (size_t k = 0; k < ne; k++)
					g[k] += m->tmp[k];
			}
		}
		if (n->frozen && np > 0) /* Keras's trainable False: nothing to apply */
			memset(l->dkernel, 0, np * sizeof(float));
		else if (np > 0)
			weight_penalty_grads(n);
		if (on_ready && np > 0)
			on_ready(arg, (size_t)(l->dkernel - m->grads), np);
	}
}

static enum dt_status loss(struct dt_model *m, const struct dt_model_batch *b, int training, struct dt_step_result *res,
			   struct dt_err *err)
{
	const int B = rows_of(m, b);
	const float *z = m->val[m->output];
	float *dz = training ? m->grad[m->store[m->output]] : NULL;
	const size_t n = dt_shape_elems(m->nodes[m->output].layer.out) * (size_t)B;
	switch (m->loss) {
	case DT_LOSS_SOFTMAX_XENT: {
		const int32_t *labels = b->targets.data;
		const size_t rows = (size_t)m->rows * (size_t)B;
		for (size_t r = 0; r < rows; r++)
			if (labels[r] < 0 || labels[r] >= m->classes) {
				if (m->rows == 1)
					return dt_err_set(err, DT_USAGE, "model '%s': example %zu: label %d out of range [0, %d)",
							  m->name, r, (int)labels[r], m->classes);
				return dt_err_set(err, DT_USAGE,
						  "model '%s': example %zu, position %zu: label %d out of range [0, %d)", m->name,
						  r / (size_t)m->rows, r % (size_t)m->rows, (int)labels[r], m->classes);
			}
		res->loss = dt_softmax_xent_i32(z, labels, (int)rows, m->classes, dz, &res->correct);
		res->counted = (int)rows;
		break;
	}
	case DT_LOSS_SIGMOID_XENT:
		res->loss = dt_sigmoid_xent(z, b->targets.data, n, dz, &res->correct);
		res->counted = (int)n;
		break;
	case DT_LOSS_MSE:
		res->loss = dt_mse(z, b->targets.data, n, dz);
		break;
	case DT_LOSS_PADDED_XENT: {
		const int32_t *labels = b->targets.data;
		for (size_t r = 0; r < (size_t)B; r++)
			if (labels[r] < 0 || labels[r] >= m->classes)
				return dt_err_set(err, DT_USAGE, "model '%s': sequence %zu, position %zu: target %d out of range [0, %d)",
						  m->name, r / (size_t)b->length, r % (size_t)b->length, (int)labels[r], m->classes);
		struct dt_seq_metrics sm;
		res->loss = dt_padded_xent(z, labels, b->size, b->length, m->classes, m->label_smoothing, dz, &sm);
		res->correct = (int)sm.tokens_correct;
		res->counted = (int)sm.tokens;
		res->seqs_correct = (int)sm.seqs_correct;
		res->seqs = (int)sm.seqs;
		res->nll_sum = sm.nll_num;
		if (b->bleu) {
			res->bleu = dt_approx_bleu(z, labels, b->size, b->length, m->classes);
			res->bleu_batches = 1;
		}
		break;
	}
	case DT_LOSS_CUSTOM:
		DT_ASSERT(!"a graph has no custom loss");
	}
	res->reg_loss = (float)penalties(m, B);
	res->loss += res->reg_loss;
	m->last_reg_loss = res->reg_loss;
	if (!isfinite(res->loss))
		return dt_err_set(err, DT_RUNTIME, "model '%s': the loss is %g; the step is not trained on", m->name,
				  (double)res->loss);
	return DT_OK;
}

enum dt_status dt__graph_run(struct dt_model *m, const struct dt_model_batch *b, int training, struct dt_rng *rng,
			     dt_grads_ready_fn on_ready, void *arg, struct dt_step_result *res, struct dt_err *err)
{
	if (m->seq_max_len > 0) {
		m->seq_B = b->size;
		m->seq_L = b->length;
	}
	int64_t t0 = dt_trace_begin();
	enum dt_status st = forward(m, b, training, rng, err);
	if (!st)
		st = loss(m, b, training, res, err);
	dt_trace_end(t0, "compute", training ? "forward" : "forward (evaluation)", -1, -1);
	if (st || !training)
		return st;
	t0 = dt_trace_begin();
	memset(m->written, 0, (size_t)m->num_nodes * sizeof(int));
	m->written[m->store[m->output]] = 1;
	if (m->seq_max_len > 0)
		dt__seq_zero_tables(m);
	backward(m, rows_of(m, b), on_ready, arg);
	dt_trace_end(t0, "compute", "backward", -1, -1);
	return DT_OK;
}
