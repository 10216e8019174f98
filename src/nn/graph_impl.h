/*
 * graph_impl.h — module-shared: the inside of struct dt_graph and the
 * builder's helpers, for the files that add nodes: graph.c (the builder,
 * the layer nodes, compilation), graph_keras.c (Keras's layers: depthwise
 * and separable convolutions, batch norm, zero padding, global pooling,
 * frozen nodes) and graph_seq.c (the sequence nodes of nn/seq.h).
 */
#ifndef DT_NN_GRAPH_IMPL_H
#define DT_NN_GRAPH_IMPL_H

#include "nn/graph.h"
#include "nn/model_impl.h"

/* Per-example tensors and single variables stay far below int and size_t
 * overflow in every index computation. */
#define MAX_ELEMS (1L << 28)
#define MAX_PARAMS (1L << 28) /* a model's variables in all, float32s */

/* Default node names: the kind's prefix and the next free number. */
enum dt__prefix { P_INPUT, P_DENSE, P_CONV, P_POOL, P_AVG_POOL, P_FLATTEN, P_RESHAPE, P_ACT, P_DROPOUT, P_EMB, P_NORM,
		  P_ADD, P_CONCAT, P_DEPTHWISE, P_SEPARABLE, P_BATCH_NORM, P_ZERO_PAD, P_GLOBAL_AVG, P_GLOBAL_MAX,
		  P_SEQ_INPUT, P_ATTN, P_TIMING, P_SHIFT, P_SYMBOL, P_LOGITS, P_COUNT };

struct dt_graph {
	int n;
	struct dt__node nodes[DT__MAX_NODES];
	int counter[P_COUNT];
	int has_loss, output;
	enum dt_loss loss;
	float label_smoothing;     /* DT_LOSS_PADDED_XENT */
	int seq_max_len;           /* > 0: a sequence graph (its inputs are token ids, nodes per token) */
};

/* Helpers (graph.c); each failing one has set err. */
void dt__graph_fmt_dims(char *buf, size_t cap, int rank, const int *dims);
struct dt_shape dt__graph_to_shape(int rank, const int *d);
void dt__graph_set_dims(struct dt__node *n, int rank, struct dt_shape s);
long dt__graph_elems(int rank, const int *d);
/* Picks a new node's name (the caller's, or the next default for prefix p)
 * into out (DT_LAYER_NAME_MAX) and its prefix number. */
enum dt_status dt__graph_begin(struct dt_graph *g, const char *name, enum dt__prefix p, char *out, int *number,
			       struct dt_err *err);
/* The node `input` names (NULL: the last one). */
enum dt_status dt__graph_resolve(const struct dt_graph *g, const char *node, const char *input, int *idx,
				 struct dt_err *err);
/* dt__graph_begin, then dt__graph_resolve of its one input into *in: how
 * every node with one input starts. */
enum dt_status dt__graph_begin_on(struct dt_graph *g, const char *name, enum dt__prefix p, const char *input,
				  char *out, int *number, int *in, struct dt_err *err);
enum dt_status dt__graph_want_float(const struct dt_graph *g, const char *node, int in, struct dt_err *err);
enum dt_status dt__graph_want_rank(const struct dt_graph *g, const char *node, const char *what, int in, int rank,
				   struct dt_err *err);
/* A float (H, W, C) input, as the image layers (`what`) take. */
enum dt_status dt__graph_want_image(const struct dt_graph *g, const char *node, const char *what, int in,
				    struct dt_err *err);
enum dt_status dt__graph_get_init(const char *node, const char *text, const char *dflt, struct dt_init *out,
				  struct dt_err *err);
/* Adds node n and advances prefix p's counter to number. */
void dt__graph_commit(struct dt_graph *g, const struct dt__node *n, enum dt__prefix p, int number);
/* Prefixes a layer constructor's failure with the node and its input. */
enum dt_status dt__graph_layer_status(enum dt_status st, const char *node, const struct dt_graph *g, int in,
				      struct dt_err *err);

/* regularize.c: a compiled model's constraints fit their variables'
 * ranks (DT_CONFIG naming the field, node and variable otherwise). */
enum dt_status dt__model_check_constraints(const struct dt_model *m, const char *name, struct dt_err *err);

#endif
