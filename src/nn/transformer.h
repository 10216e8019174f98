/*
 * transformer.h — t2t's transformer as a sequence graph (nn/graph.h).
 *
 * The layout of tensor2tensor's models/transformer.py with
 * layer_preprocess_sequence=n and layer_postprocess_sequence=da (pre-norm):
 *
 *   encoder (problems with inputs):
 *     x = dropout(symbol(inputs) + timing signal)
 *     per layer: x += dropout(self_attention(norm(x)), padding masked)
 *                x += dropout(dense(relu_dropout(dense_relu(norm(x)))))
 *     memory = norm(x)
 *   decoder:
 *     y = dropout(symbol(shift_right(targets)) + timing signal)
 *     per layer: y += dropout(causal self_attention(norm(y)))
 *                y += dropout(attention(norm(y), memory, inputs' padding masked))   (with inputs)
 *                y += dropout(ffn(norm(y)))
 *     logits = norm(y) table^T
 *   loss: padded cross-entropy with label smoothing
 *
 * With post_norm (t2t's layer_preprocess_sequence "none" and
 * layer_postprocess_sequence "dan", transformer_base_v1's layout) each
 * sublayer is x = norm(x + dropout(f(x))), its norm named as the pre-norm
 * one ("enc0.self.norm"), and the stacks end without enc.norm and dec.norm.
 * Layer norms use t2t's epsilon 1e-6; every dropout named is its hparam.
 * Tables: the targets' symbol table is the softmax's when
 * shared_embedding_and_softmax_weights (t2t's transformer_base), and the
 * inputs' too when shared_embedding. Without inputs (a language model)
 * the decoder has no encoder-decoder attention.
 */
#ifndef DT_NN_TRANSFORMER_H
#define DT_NN_TRANSFORMER_H

#include "base/err.h"
#include "nn/graph.h"

struct dt_transformer_config {
	int has_inputs;              /* 0: decoder only */
	int input_vocab, target_vocab;
	int max_length;              /* positions per sequence */
	int hidden_size, filter_size, num_heads;
	int num_encoder_layers, num_decoder_layers;
	float layer_prepostprocess_dropout, attention_dropout, relu_dropout;
	float label_smoothing;
	int shared_embedding_and_softmax_weights, shared_embedding;
	int post_norm;               /* 1: t2t's "none"/"dan" layout (above); 0: "n"/"da" */
};

/* A new graph (dt_graph_free) with inputs "inputs" (when has_inputs) and
 * "targets", in that order; the batch's targets are the targets' ids too. */
enum dt_status dt_transformer_graph(const struct dt_transformer_config *c, struct dt_graph **out,
				    struct dt_err *err) DT_MUST_CHECK;

#endif
