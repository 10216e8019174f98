/*
 * model_impl.h — module-shared: the inside of struct dt_model, for the
 * files that build and run models (model.c: registry, variables, the old
 * entry points; exec.c: the graph executor; graph.c: the builder and its
 * compilation into a model; custom.c: custom models).
 *
 * A graph model is a list of nodes in topological order (every node's
 * inputs come before it). Input nodes hold the caller's tensors; views
 * (flatten, reshape) and fused-away nodes (a ReLU or 2x2 max pool folded
 * into the conv or dense node before it) own no memory: their output and
 * gradient are those of their `store` node. Variables follow node order, so
 * each node's parameters are one contiguous range of the flat buffers and
 * the backward pass, in reverse node order, finishes ranges from the end of
 * the buffer backwards.
 */
#ifndef DT_NN_MODEL_IMPL_H
#define DT_NN_MODEL_IMPL_H

#include "nn/layers.h"
#include "nn/model.h"
#include "nn/regularize.h"

#define DT__MAX_NODES 256
#define DT__MAX_NODE_INPUTS 8

struct dt__node {
	struct dt_layer layer;             /* kind, shapes (h, w, c), parameters */
	int ninputs;
	int inputs[DT__MAX_NODE_INPUTS];   /* node indices, each < this node's */
	int rank;                          /* the user's per-example shape: dims[0 .. rank) */
	int dims[3];
	enum dt_dtype dtype;               /* of the output */
	struct dt_init init[2];            /* kernel-like and bias-like variables */
	int fused;                         /* folded into its input node: acts as a view */
	int frozen;                        /* Keras's trainable False: its gradients are zeroed */
	char var_prefix[DT_LAYER_NAME_MAX]; /* variables' "<prefix>/": "" means the node's name */
	const char *kernel_suffix;         /* the kernel variable's name: NULL means "kernel" */
	/* Keras's regularizers and constraints (nn/regularize.h): reg[0] on the
	 * kernel-like variable, reg[1] on the bias-like one, reg[2] on the
	 * output (divided by the batch when reg_per_example); con[0], con[1]
	 * on the variables, named in messages by con_field */
	struct dt_regularizer reg[3];
	int reg_per_example;
	struct dt_constraint con[2];
	char con_field[2][32];
	int var_first;                     /* compiled: its first variable, or -1 */
};

typedef enum dt_status (*dt__custom_fn)(struct dt_model *m, const struct dt_model_batch *b, int training,
					struct dt_rng *rng, struct dt_step_result *res, struct dt_err *err);

struct dt_model {
	char name[DT_HP_NAME_MAX];
	int max_batch;
	/* graph */
	int num_nodes;
	struct dt__node *nodes;            /* (num_nodes), owned */
	int *store;                        /* (num_nodes): node owning each output's memory */
	int *needs_grad;                   /* (num_nodes): a parameter at or before it */
	int *written;                      /* (num_nodes): backward, gradient of this store written */
	float **out, **grad;               /* (num_nodes): (max_batch, out) each, in acts/dacts; NULL if none */
	const void **val;                  /* (num_nodes): this step's output of each node */
	int num_layers;
	int *layer_node;                   /* (num_layers): executed nodes, for dt_model_layer */
	int num_inputs;
	int input_node[DT_MODEL_MAX_INPUTS];
	struct dt_io_info inputs[DT_MODEL_MAX_INPUTS];
	struct dt_io_info target;
	int output;                        /* the loss's input node */
	enum dt_loss loss;
	int classes, rows;                 /* softmax: classes (last axis) and label rows per example */
	float label_smoothing;             /* DT_LOSS_PADDED_XENT */
	int seq_max_len;                   /* > 0: a sequence model; nodes run on B * L token rows */
	int seq_B, seq_L;                  /* this step's sequences and length */
	float last_reg_loss;               /* the last step's regularization losses (nn/regularize.h) */
	/* variables */
	int num_vars, cap_vars;
	struct dt_variable *vars;
	int *var_is_kernel;
	struct dt_init *var_init;
	size_t num_params;
	float *params, *grads;             /* (num_params) each, 64-byte aligned; params owned, grads the
					    * buffer the backward pass writes now (dt_model_set_grads) */
	float *grads_own;                  /* (num_params), owned: grads unless redirected */
	float *acts, *dacts;               /* node outputs and their gradients, owned; gradients share
					    * memory where their lifetimes in backward do not meet (exec.c) */
	size_t acts_floats, dacts_floats;  /* their sizes */
	size_t dacts_unplanned;            /* the gradients' floats had each its own memory */
	float *scratch;                    /* the largest any layer needs */
	float *tmp;                        /* (max_batch, largest output): gradients to accumulate */
	int32_t *labels32;                 /* (max_batch * rows): the uint8 entry points' labels */
	/* custom models (custom.c) */
	dt__custom_fn custom;
	void *custom_state;                /* owned by custom.c */
	void (*custom_free)(void *state);
	struct dt_layer custom_layer;      /* one layer owning every parameter */
};

/* Appends a variable of node `node` (or -1) at the end of the flat layout;
 * it is trainable until dt__model_freeze_var or dt__model_moving_average_var
 * says otherwise. */
void dt__model_add_var(struct dt_model *m, const char *node, const char *suffix, int ndim, const int64_t *shape,
		       int is_kernel, struct dt_init init);
/* Marks variable i DT_VAR_FROZEN: never changed (and not a kernel: no weight decay). */
void dt__model_freeze_var(struct dt_model *m, int i);
/* Marks variable i DT_VAR_MOVING_AVERAGE with its layer's decay: updated by
 * the training forward pass, read as the mean over replicas. */
void dt__model_moving_average_var(struct dt_model *m, int i, float decay);
/* Allocates params/grads (zeroed) for the variables added so far. */
void dt__model_alloc_params(struct dt_model *m);
/* Graph execution (exec.c): allocation of the per-node buffers once the
 * nodes and variables are known, and one step. */
void dt__graph_allocate(struct dt_model *m);
enum dt_status dt__graph_run(struct dt_model *m, const struct dt_model_batch *b, int training, struct dt_rng *rng,
			     dt_grads_ready_fn on_ready, void *arg, struct dt_step_result *res, struct dt_err *err);

/* The sequence nodes (exec_seq.c): their state and scratch once the model
 * is laid out (the floats of scratch they need), one node forward or
 * backward, and the zeroing of shared tables before a backward pass. */
size_t dt__seq_allocate(struct dt_model *m);
enum dt_status dt__seq_forward(struct dt_model *m, int i, int training, struct dt_rng *rng, struct dt_err *err);
void dt__seq_backward(struct dt_model *m, int i);
void dt__seq_zero_tables(struct dt_model *m);
/* exec.c: hands gradient src (rows, width; row stride ld) to node j. */
void dt__graph_give(struct dt_model *m, int j, const float *src, size_t rows, size_t width, size_t ld);

#endif
