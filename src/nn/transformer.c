/*
 * t2t's transformer through the graph builder (nn/transformer.h). Node
 * names follow t2t's variable scopes with '.' for '/', which node names
 * cannot hold: "enc0.self.attn" is t2t's encoder/layer_0/self_attention.
 */
#include "nn/transformer.h"

#include <stdio.h>

#define NORM_EPS 1e-6f

struct tb {
	struct dt_graph *g;
	struct dt_err *err;
	enum dt_status st;
	const struct dt_transformer_config *c;
};

/* Name buffers: every node gets "<prefix>/<what>". */
static const char *nm(char *buf, const char *prefix, const char *what)
{
	snprintf(buf, 32, "%s.%s", prefix, what);
	return buf;
}

/* x + dropout(sublayer output `y`): t2t's "da" postprocess, then its "n"
 * when post-norm ("dan"). Returns the last node's name in out. */
static void residual(struct tb *b, const char *prefix, const char *x, const char *y, char *out)
{
	char d[32], xs[32], r[32];
	snprintf(xs, sizeof(xs), "%s", x); /* out may be x's buffer */
	if (!b->st)
		b->st = dt_graph_dropout(b->g, nm(d, prefix, "drop"), y, b->c->layer_prepostprocess_dropout, b->err);
	const char *in[2] = { xs, d };
	if (!b->st)
		b->st = dt_graph_add(b->g, nm(r, prefix, "res"), 2, in, b->err);
	if (!b->st && b->c->post_norm)
		b->st = dt_graph_layer_norm(b->g, nm(out, prefix, "norm"), r, NORM_EPS, b->err);
	else
		snprintf(out, 32, "%s", r);
}

/* The sublayer's input: norm(x) pre-norm ("n"), x itself post-norm ("none"). */
static void preprocess(struct tb *b, const char *prefix, const char *x, char *out)
{
	if (b->c->post_norm)
		snprintf(out, 32, "%s", x);
	else if (!b->st)
		b->st = dt_graph_layer_norm(b->g, nm(out, prefix, "norm"), x, NORM_EPS, b->err);
}

static void ffn(struct tb *b, const char *prefix, const char *x, char *out)
{
	char n[32], h[32], hd[32], o[32];
	preprocess(b, prefix, x, n);
	if (!b->st)
		b->st = dt_graph_dense(b->g, nm(h, prefix, "conv1"), n, b->c->filter_size, DT_ACT_RELU, NULL, b->err);
	if (!b->st)
		b->st = dt_graph_dropout(b->g, nm(hd, prefix, "relu_drop"), h, b->c->relu_dropout, b->err);
	if (!b->st)
		b->st = dt_graph_dense(b->g, nm(o, prefix, "conv2"), hd, b->c->hidden_size, DT_ACT_LINEAR, NULL, b->err);
	residual(b, prefix, x, o, out);
}

static void attention(struct tb *b, const char *prefix, const char *x, const char *memory, const char *ids,
		      int causal, char *out)
{
	char n[32], a[32];
	preprocess(b, prefix, x, n);
	if (!b->st)
		b->st = dt_graph_attention(b->g, nm(a, prefix, "attn"), n, memory ? memory : n, ids, b->c->num_heads, causal,
					   b->c->attention_dropout, b->err);
	residual(b, prefix, x, a, out);
}

/* symbol + timing + dropout; out: the last node's name. */
static void bottom(struct tb *b, const char *prefix, const char *ids, const char *share, int vocab, char *out)
{
	char e[32], t[32];
	if (!b->st)
		b->st = dt_graph_symbol(b->g, nm(e, prefix, "emb"), ids, vocab, b->c->hidden_size, share, NULL, b->err);
	if (!b->st)
		b->st = dt_graph_timing_signal(b->g, nm(t, prefix, "timing"), e, b->err);
	if (!b->st)
		b->st = dt_graph_dropout(b->g, nm(out, prefix, "drop"), t, b->c->layer_prepostprocess_dropout, b->err);
}

enum dt_status dt_transformer_graph(const struct dt_transformer_config *c, struct dt_graph **out, struct dt_err *err)
{
	*out = NULL;
	if (c->num_decoder_layers < 1 || c->num_decoder_layers > 24 || c->num_encoder_layers < 0 ||
	    c->num_encoder_layers > 24 || c->filter_size < 1 || c->hidden_size < 1)
		return dt_err_set(err, DT_CONFIG,
				  "transformer: %d encoder and %d decoder layers (1 to 24), hidden_size %d, filter_size %d "
				  "are out of range",
				  c->num_encoder_layers, c->num_decoder_layers, c->hidden_size, c->filter_size);
	struct tb b = { dt_graph_new(), err, DT_OK, c };
	char x[32], memory[32], p[32];
	const char *share_in = NULL;
	if (c->has_inputs) {
		b.st = dt_graph_sequence_input(b.g, "inputs", c->max_length, err);
		bottom(&b, "enc", "inputs", NULL, c->input_vocab, x);
		for (int l = 0; l < c->num_encoder_layers; l++) {
			snprintf(p, sizeof(p), "enc%d.self", l);
			attention(&b, p, x, NULL, "inputs", 0, x);
			snprintf(p, sizeof(p), "enc%d.ffn", l);
			ffn(&b, p, x, x);
		}
		/* t2t's layer_preprocess of the stack's output: a norm pre-norm, nothing post-norm */
		if (!b.st && !c->post_norm)
			b.st = dt_graph_layer_norm(b.g, "enc.norm", x, NORM_EPS, err);
		snprintf(memory, sizeof(memory), "%s", c->post_norm ? x : "enc.norm");
		if (c->shared_embedding && c->input_vocab == c->target_vocab)
			share_in = "enc.emb";
	}
	if (!b.st)
		b.st = dt_graph_sequence_input(b.g, "targets", c->max_length, err);
	if (!b.st)
		b.st = dt_graph_shift_right(b.g, "dec.shift", "targets", err);
	bottom(&b, "dec", "dec.shift", share_in, c->target_vocab, x);
	for (int l = 0; l < c->num_decoder_layers; l++) {
		snprintf(p, sizeof(p), "dec%d.self", l);
		attention(&b, p, x, NULL, NULL, 1, x);
		if (c->has_inputs) {
			snprintf(p, sizeof(p), "dec%d.encdec", l);
			attention(&b, p, x, memory, "inputs", 0, x);
		}
		snprintf(p, sizeof(p), "dec%d.ffn", l);
		ffn(&b, p, x, x);
	}
	if (!b.st && !c->post_norm)
		b.st = dt_graph_layer_norm(b.g, "dec.norm", x, NORM_EPS, err);
	if (!b.st)
		b.st = dt_graph_logits(b.g, "softmax", c->post_norm ? x : "dec.norm", c->target_vocab,
				       c->shared_embedding_and_softmax_weights ? "dec.emb" : NULL, err);
	if (!b.st)
		b.st = dt_graph_sequence_loss(b.g, "softmax", c->label_smoothing, err);
	if (b.st) {
		dt_graph_free(b.g);
		return dt_err_prefix(err, "transformer");
	}
	*out = b.g;
	return DT_OK;
}
