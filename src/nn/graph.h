/*
 * graph.h — layer graphs: a builder for sequential and DAG models.
 *
 * A graph starts with one or more named inputs (float features or int32
 * token ids, each with a per-example shape of rank 1 to 3) and grows one
 * node per call. Every node has a name (the caller's, or a default like
 * today's "dense_1", "conv_2": the kind's prefix and the next free number),
 * produces one output, and reads the outputs of nodes added before it,
 * named by the caller; input NULL means the node added last, so a
 * sequential model is a chain of calls with NULL inputs.
 *
 * Shapes are inferred as nodes are added. A call that does not fit (an
 * unknown input, shapes that do not connect, a bad size, a duplicate name)
 * adds nothing and returns DT_CONFIG with a message naming the node and the
 * shapes involved; the graph stays usable. Names: 1 to 255 bytes
 * (DT_LAYER_NAME_MAX - 1) of UTF-8 without control characters, any name
 * Keras 2, Keras 3 or TF.js writes; a '/' separates nested scopes (none
 * first, last or doubled). Variables are "<node>/kernel" and the like; two
 * variables that would share a name ("a" with "a/q/kernel" and a node
 * "a/q" with "a/q/kernel") make dt_model_from_graph fail with DT_CONFIG.
 *
 * Per-example shapes: (N), (T, D) or (H, W, C); the batch is implicit.
 *   dense       (..., IN) -> (..., units); over the last axis (Keras's Dense);
 *               variables <node>/kernel (IN, units), <node>/bias (units)
 *   conv2d      (H, W, C) -> (OH, OW, filters), padding valid or same;
 *               <node>/kernel (KH, KW, C, filters), <node>/bias (filters)
 *   pool        (H, W, C) -> (OH, OW, C), max or average
 *   flatten     any -> (N); reshape: any -> the given shape (one -1 allowed)
 *   activation  any -> same; dropout any -> same (off when evaluating)
 *   embedding   int32 (T) or (T1, T2) -> (T, dim) or (T1, T2, dim); <node>/embeddings (vocab, dim)
 *   layer_norm  (..., D) -> same; <node>/gamma (D) = 1, <node>/beta (D) = 0
 *   add         n same shapes -> that shape; concat: (..., Di) -> (..., sum Di)
 *
 * and Keras's layers (graph_keras.c; names and variables as Keras's):
 *   depthwise_conv2d  (H, W, C) -> (OH, OW, C*M); <node>/depthwise_kernel
 *               (KH, KW, C, M), <node>/bias (C*M)
 *   separable_conv2d  depthwise then a 1x1 conv: <node>/depthwise_kernel
 *               (KH, KW, C, M), <node>/pointwise_kernel (1, 1, C*M, filters),
 *               <node>/bias (filters); two executed layers, one node name
 *   batch_norm  (..., C) -> same; <node>/gamma, /beta (trained),
 *               /moving_mean, /moving_variance (not trained: nn/layers.h)
 *   zero_pad    (H, W, C) -> (H+top+bottom, W+left+right, C)
 *   global_pool (H, W, C) -> (C), average or max
 * dt_graph_drop_bias removes a dense or convolution node's bias (Keras's
 * use_bias False); dt_graph_set_trainable(.., 0) freezes a node (its
 * variables are never changed by training; a frozen batch norm normalizes
 * with its moving statistics, as Keras's does).
 *
 * Losses, on one float node's output (logits for the cross-entropies):
 *   softmax cross-entropy: int32 labels, one per row of the last axis
 *     ((T, V) logits take (T) labels); accuracy counts rows;
 *   sigmoid cross-entropy: float targets of the output's shape; accuracy
 *     counts elements on the 0.5 threshold;
 *   mean squared error: float targets of the output's shape.
 *
 * dt_model_from_graph compiles the graph into a model (nn/model.h): it
 * fuses a ReLU activation into the conv or dense node before it, a ReLU or
 * ReLU6 into the batch norm before it (MobileNetV2's pairs), and a 2x2
 * stride-2 valid max pool into the conv node before it, when that node
 * feeds nothing else (the built-ins' fast path), lays out the variables in
 * node order, and allocates for max_batch examples. A graph may make any
 * number of models (one per replica); the graph is not referenced after.
 * Not thread-safe; the caller owns the graph (dt_graph_free).
 */
#ifndef DT_NN_GRAPH_H
#define DT_NN_GRAPH_H

#include "base/err.h"
#include "nn/model.h"
#include "tensor/kernels.h"

enum dt_padding { DT_PADDING_VALID, DT_PADDING_SAME };
enum dt_pool_kind { DT_POOL_MAX, DT_POOL_AVG };

struct dt_graph;

struct dt_graph *dt_graph_new(void);
void dt_graph_free(struct dt_graph *g);

/* A named input; shape (ndim 1..3) per example, every dimension >= 1. */
enum dt_status dt_graph_input(struct dt_graph *g, const char *name, enum dt_dtype dtype, int ndim, const int *shape,
			      struct dt_err *err) DT_MUST_CHECK;
/* kernel_init: an initializer name (dt_init_parse); NULL: glorot_uniform.
 * Biases start at zero. */
enum dt_status dt_graph_dense(struct dt_graph *g, const char *name, const char *input, int units, enum dt_act act,
			      const char *kernel_init, struct dt_err *err) DT_MUST_CHECK;
/* act: DT_ACT_RELU or DT_ACT_LINEAR (add an activation node for others). */
enum dt_status dt_graph_conv2d(struct dt_graph *g, const char *name, const char *input, int filters, int kh, int kw,
			       int stride, enum dt_padding padding, enum dt_act act, const char *kernel_init,
			       struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_pool(struct dt_graph *g, const char *name, const char *input, enum dt_pool_kind kind,
			     int ph, int pw, int sh, int sw, enum dt_padding padding, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_flatten(struct dt_graph *g, const char *name, const char *input,
				struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_reshape(struct dt_graph *g, const char *name, const char *input, int ndim, const int *shape,
				struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_activation(struct dt_graph *g, const char *name, const char *input, enum dt_act act,
				   struct dt_err *err) DT_MUST_CHECK;
/* rate in [0, 1). */
enum dt_status dt_graph_dropout(struct dt_graph *g, const char *name, const char *input, float rate,
				struct dt_err *err) DT_MUST_CHECK;
/* init NULL: random_normal(0.05). */
enum dt_status dt_graph_embedding(struct dt_graph *g, const char *name, const char *input, int vocab, int dim,
				  const char *init, struct dt_err *err) DT_MUST_CHECK;
/* eps > 0 (Keras's default is 1e-3). */
enum dt_status dt_graph_layer_norm(struct dt_graph *g, const char *name, const char *input, float eps,
				   struct dt_err *err) DT_MUST_CHECK;
/* n (2 .. 8) inputs by name. */
enum dt_status dt_graph_add(struct dt_graph *g, const char *name, int n, const char *const *inputs,
			    struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_concat(struct dt_graph *g, const char *name, int n, const char *const *inputs,
			       struct dt_err *err) DT_MUST_CHECK;
/* Keras's convolution options; zeros mean Keras's defaults (1). */
struct dt_conv_opts {
	int sh, sw;           /* strides (conv2d: sh == sw) */
	int dh, dw;           /* dilation (conv2d: 1 only) */
	int depth_multiplier; /* depthwise and separable */
};
/* conv2d with the options: act DT_ACT_RELU or DT_ACT_LINEAR. */
enum dt_status dt_graph_conv2d_opts(struct dt_graph *g, const char *name, const char *input, int filters, int kh,
				    int kw, enum dt_padding padding, enum dt_act act, const char *kernel_init,
				    const struct dt_conv_opts *o, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_depthwise_conv2d(struct dt_graph *g, const char *name, const char *input, int kh, int kw,
					 enum dt_padding padding, const char *kernel_init,
					 const struct dt_conv_opts *o, struct dt_err *err) DT_MUST_CHECK;
/* pointwise_init: the 1x1 kernel's initializer; depthwise_init the other's. */
enum dt_status dt_graph_separable_conv2d(struct dt_graph *g, const char *name, const char *input, int filters, int kh,
					 int kw, enum dt_padding padding, const char *depthwise_init,
					 const char *pointwise_init, const struct dt_conv_opts *o,
					 struct dt_err *err) DT_MUST_CHECK;
/* momentum in [0, 1) (Keras: 0.99), eps > 0 (Keras: 1e-3). */
enum dt_status dt_graph_batch_norm(struct dt_graph *g, const char *name, const char *input, float momentum, float eps,
				   struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_zero_pad(struct dt_graph *g, const char *name, const char *input, int top, int bottom,
				 int left, int right, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_global_pool(struct dt_graph *g, const char *name, const char *input, enum dt_pool_kind kind,
				    struct dt_err *err) DT_MUST_CHECK;
/* On node `name`: a dense, conv2d, depthwise or separable node without its
 * bias; and a node trainable or frozen. Unknown node or kind → DT_CONFIG. */
enum dt_status dt_graph_drop_bias(struct dt_graph *g, const char *name, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_set_trainable(struct dt_graph *g, const char *name, int trainable,
				      struct dt_err *err) DT_MUST_CHECK;
/* Sets the bias-like initializer (init[1]) of node `name` (dense, conv:
 * the bias; batch norm: beta) or the kernel-like one (init[0]: batch
 * norm's gamma) from a dt_init_parse name. */
enum dt_status dt_graph_set_init(struct dt_graph *g, const char *name, int which, const char *init,
				 struct dt_err *err) DT_MUST_CHECK;

/* The loss on node `output` (NULL: the last node); a later call replaces it. */
enum dt_status dt_graph_loss(struct dt_graph *g, const char *output, enum dt_loss loss,
			     struct dt_err *err) DT_MUST_CHECK;

/*
 * Sequence graphs (t2t's transformer; the kernels are nn/seq.h). A graph
 * whose inputs are sequence inputs runs per token: each input is a batch of
 * (B, L) int32 token ids (id 0 the padding), every node's per-example shape
 * is one token's, (D) or (V), and the position-wise nodes above (dense,
 * layer_norm, dropout, add, activation) apply to each of the B * L tokens;
 * the nodes below see the sequences. The compiled model's max_batch counts
 * tokens (t2t's batch_size); batches give B and L (nn/model.h).
 *   sequence_input  int32 ids, up to max_length positions; a sequence graph
 *                   takes no other kind of input
 *   symbol          ids -> (D): t2t's symbol modality bottom, table[id] * sqrt(D),
 *                   padding rows 0; <node>/weights (vocab, D), random_normal(D^-0.5)
 *                   unless init; share_with: use that symbol node's table instead
 *   timing_signal   (D) -> (D): adds t2t's sinusoidal position signal
 *   shift_right     ids -> ids: 0 then the ids without the last (the decoder's input)
 *   attention       query (D), memory (D) [, memory ids] -> (D): multi-head
 *                   dot-product attention, heads dividing D; padded memory
 *                   positions (id 0) masked when memory ids are given, later
 *                   positions masked when causal; dropout on the weights;
 *                   <node>/q/kernel, k/kernel, v/kernel, output_transform/kernel (D, D)
 *   logits          (D) -> (V): x table^T, with share_with's table (t2t's
 *                   shared_embedding_and_softmax_weights) or its own <node>/weights (V, D)
 *   sequence_loss   t2t's padded cross-entropy with label smoothing on a
 *                   logits node; labels are the targets' ids, padding skipped;
 *                   metrics: token accuracy, accuracy_per_sequence, neg_log_perplexity
 */
enum dt_status dt_graph_sequence_input(struct dt_graph *g, const char *name, int max_length,
				       struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_symbol(struct dt_graph *g, const char *name, const char *ids, int vocab, int dim,
			       const char *share_with, const char *init, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_timing_signal(struct dt_graph *g, const char *name, const char *input,
				      struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_shift_right(struct dt_graph *g, const char *name, const char *ids,
				    struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_attention(struct dt_graph *g, const char *name, const char *query, const char *memory,
				  const char *memory_ids, int heads, int causal, float dropout,
				  struct dt_err *err) DT_MUST_CHECK;
/* vocab is share_with's when it is given (pass 0). */
enum dt_status dt_graph_logits(struct dt_graph *g, const char *name, const char *input, int vocab,
			       const char *share_with, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_graph_sequence_loss(struct dt_graph *g, const char *logits, float label_smoothing,
				      struct dt_err *err) DT_MUST_CHECK;

/* The name of the node added last ("" when none); owned by g. */
const char *dt_graph_last(const struct dt_graph *g);
int dt_graph_num_nodes(const struct dt_graph *g);
/* The per-example output shape of node `name` into dims: its rank, or 0
 * when there is no such node. */
int dt_graph_node_dims(const struct dt_graph *g, const char *name, int dims[3]);

/* Compiles g into a new model named `name` for up to max_batch examples.
 * No loss set, or max_batch < 1 → DT_CONFIG. Parameters are zero until
 * dt_model_init_params. */
enum dt_status dt_model_from_graph(const struct dt_graph *g, const char *name, int max_batch, struct dt_model **out,
				   struct dt_err *err) DT_MUST_CHECK;

#endif
