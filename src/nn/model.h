/*
 * model.h — models as named variables over one flat parameter buffer.
 *
 * A model is made three ways: from a layer graph (nn/graph.h,
 * dt_model_from_graph), from a custom definition whose callback computes
 * the loss and gradients (nn/custom.h), or by name (dt_model_new: a Keras
 * JSON, or a model of the zoo the program hands down — the built-ins "mlp",
 * "lenet", "cnn" are defined with the public builder in src/models/, above
 * the engine, so nn/ holds no list of them).
 * Every strategy trains all three alike through the entry points below.
 *
 * Its variables (conv_1/kernel, conv_1/bias, dense_1/kernel, ...) are
 * views into ONE flat float buffer of parameters, and their
 * gradients into ONE flat gradient buffer of the same layout, so all-reduce,
 * parameter-server shards and checkpoints work on byte ranges (llm.c's
 * malloc_and_point_parameters).
 *
 * Layouts (TensorFlow's): images are NHWC, (B, H, W, C); a conv kernel is
 * (KH, KW, C, OC); a dense kernel is (IN, OUT); biases are (OUT).
 *
 * A model also owns the activation buffers for up to `max_batch` examples,
 * so it is used by one thread at a time; replicas are separate models.
 */
#ifndef DT_NN_MODEL_H
#define DT_NN_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "base/rng.h"
#include "nn/hparams.h"
#include "tensor/tensor.h"

/* A variable's name: its layer's (up to DT_LAYER_NAME_MAX - 1 bytes), '/'
 * and the weight's ("kernel", "output_transform/kernel"), NUL included. */
#define DT_VAR_NAME_MAX 320
#define DT_MAX_DIMS 4

/*
 * What changes a variable (ARCHITECTURE.md, "Variables have kinds"). Every
 * update of the flat buffers goes by it: only trainable variables get
 * gradients, optimizer slots, weight decay and a share of the clipping norm.
 */
enum dt_var_kind {
	DT_VAR_TRAINABLE = 0,      /* trained by the optimizer */
	DT_VAR_MOVING_AVERAGE,     /* non-trainable state that each training batch moves toward its own
				    * value v (batch norm's moving statistics): x -= (x - v) * (1 - decay),
				    * TensorFlow's assign_moving_average; read as the mean over replicas
				    * (SyncOnRead MEAN); on a ps, the ps applies it (distribute/ps_server.h) */
	DT_VAR_FROZEN,             /* non-trainable and never changed (Keras's trainable False) */
};
/* "trainable", "moving_average", "frozen": the word checkpoints and
 * `ckpt inspect` carry. */
const char *dt_var_kind_name(enum dt_var_kind k);

struct dt_variable {
	char name[DT_VAR_NAME_MAX]; /* "dense_1/kernel" */
	int ndim;
	int64_t shape[DT_MAX_DIMS];
	size_t offset;              /* first element in the flat buffers */
	size_t count;               /* elements */
	enum dt_var_kind kind;
	float decay;                /* DT_VAR_MOVING_AVERAGE: the layer's momentum, in [0, 1) */
};

struct dt_model;

/* ---- initializers ----------------------------------------------------------- */

/* Keras's initializers. Each variable draws from its own stream, derived
 * from the seed and "init/<variable name>", so a variable's values do not
 * depend on the others. fan_in/fan_out as Keras counts them: a kernel
 * (..., IN, OUT) has receptive field r = the product of the leading
 * dimensions, fan_in r*IN and fan_out r*OUT; a vector (N) has N and N. */
enum dt_init_kind {
	DT_INIT_GLOROT_UNIFORM,   /* U(-l, l), l = sqrt(6 / (fan_in + fan_out)) */
	DT_INIT_HE_NORMAL,        /* truncated normal (2 sd) with sd sqrt(2 / fan_in) after truncation */
	DT_INIT_ZEROS,
	DT_INIT_ONES,
	DT_INIT_RANDOM_NORMAL,    /* N(0, stddev^2) */
	DT_INIT_TRUNCATED_NORMAL, /* N(0, stddev^2), values beyond 2 stddev redrawn */
	DT_INIT_VARIANCE_SCALING, /* Keras's VarianceScaling: n = fan_in, fan_out or their mean;
				   * truncated_normal: sd sqrt(scale/n) after truncation at 2 sd;
				   * untruncated_normal: sd sqrt(scale/n); uniform: U(-l, l), l = sqrt(3 scale/n) */
	DT_INIT_RANDOM_UNIFORM,   /* U(a, b) */
	DT_INIT_CONSTANT,         /* every value a */
};
enum dt_fan_mode { DT_FAN_IN, DT_FAN_OUT, DT_FAN_AVG };
enum dt_vs_dist { DT_VS_TRUNCATED_NORMAL, DT_VS_UNTRUNCATED_NORMAL, DT_VS_UNIFORM };
struct dt_init {
	enum dt_init_kind kind;
	float stddev;             /* random_normal, truncated_normal; 0 means Keras's 0.05 */
	float scale;              /* variance_scaling (> 0) */
	enum dt_fan_mode mode;    /* variance_scaling */
	enum dt_vs_dist dist;     /* variance_scaling */
	float a, b;               /* random_uniform: [a, b); constant: a */
};
/* Parses "glorot_uniform", "he_normal", "zeros", "ones", "random_normal",
 * "random_normal(0.02)", "truncated_normal", "truncated_normal(0.02)",
 * "variance_scaling(SCALE,fan_in|fan_out|fan_avg,truncated_normal|
 * untruncated_normal|uniform)", "random_uniform(A,B)", "constant(A)", and
 * Keras's other names as variance scaling: "glorot_normal", "he_uniform",
 * "lecun_normal", "lecun_uniform".
 * Anything else → DT_USAGE listing the valid names. */
enum dt_status dt_init_parse(const char *text, struct dt_init *out, struct dt_err *err) DT_MUST_CHECK;

/* ---- batches for the general entry points ------------------------------------ */

#define DT_MODEL_MAX_INPUTS 8

/* One tensor of a batch: (B, per-example shape), row-major, borrowed. */
struct dt_data {
	enum dt_dtype dtype;
	const void *data;
};
/* inputs in the model's input order (dt_model_input); targets: int32
 * labels (B, rows) for softmax cross-entropy, float (B, output shape) for
 * sigmoid cross-entropy and mean squared error. */
struct dt_model_batch {
	int size;                                  /* B, 1 .. max_batch; sequence models: sequences */
	int length;                                /* sequence models (dt_graph_sequence_input): L, every
						      tensor (B, L), B * L <= max_batch tokens; else 0 */
	int num_inputs;
	struct dt_data inputs[DT_MODEL_MAX_INPUTS];
	struct dt_data targets;
	/* a padded sequence loss: also t2t's approx_bleu_score of the batch
	 * (nn/bleu.h) into the step result; set for t2t's text2text problems */
	int bleu;
};
/* What one of the model's tensors looks like per example. */
struct dt_io_info {
	char name[DT_VAR_NAME_MAX];
	enum dt_dtype dtype;
	int ndim;                                  /* 1 .. 3 */
	int64_t shape[3];
	size_t count;                              /* elements per example */
};
enum dt_loss { DT_LOSS_SOFTMAX_XENT, DT_LOSS_SIGMOID_XENT, DT_LOSS_MSE, DT_LOSS_CUSTOM, DT_LOSS_PADDED_XENT };
/* A step's outcome: the mean loss and, for the classification losses
 * (and custom models that count), `correct` predictions out of `counted`
 * (rows for softmax, elements for sigmoid); counted is 0 without accuracy. */
struct dt_step_result {
	float loss;
	int correct;
	int counted;
	/* DT_LOSS_PADDED_XENT (t2t's metrics): counted = non-pad tokens;
	 * sequences whose every non-pad token is right, of seqs; the summed
	 * unsmoothed cross-entropy (neg_log_perplexity = -nll_sum / counted) */
	int seqs_correct, seqs;
	double nll_sum;
	/* a batch with `bleu` set: t2t's approx_bleu_score of the batch
	 * (nn/bleu.h) in bleu, bleu_batches 1; 0 and 0 otherwise */
	double bleu;
	int bleu_batches;
	/* Keras's regularization losses (nn/regularize.h): their sum, which
	 * `loss` includes, as Keras's loss does; 0 without regularizers */
	float reg_loss;
};

/*
 * Models by name for images of (height, width, channels) and num_classes
 * classes (hp->model, hp->dropout): a zoo is a program's list of them and
 * the function that builds one. The engine holds none itself: the program
 * hands its zoo down (dt_train_config.models; the CLI's is the built-ins of
 * src/models/builtin.h, written with the public builder), so every role,
 * replica, ps and evaluator builds the same model by the same code. `make`
 * returns DT_USAGE for a name it does not know (listing `names`), DT_CONFIG
 * for shapes or hparams it cannot build; parameters zero until
 * dt_model_init_params.
 */
struct dt_model_zoo {
	const char *const *names;
	size_t count;
	enum dt_status (*make)(const struct dt_hparams *hp, int height, int width, int channels, int num_classes,
			       int max_batch, struct dt_model **out, struct dt_err *err);
};

/* Builds the model the hparams name for inputs (H, W, C) and `num_classes`
 * outputs, with activations for up to max_batch examples: the Keras JSON
 * of hp->keras_model when set (it must agree with the data: DT_USAGE), else
 * `zoo`'s hp->model (zoo NULL: DT_CONFIG, no model by name without one). */
enum dt_status dt_model_new(const struct dt_model_zoo *zoo, const struct dt_hparams *hp, int height, int width,
			    int channels, int num_classes, int max_batch, struct dt_model **out,
			    struct dt_err *err) DT_MUST_CHECK;
void dt_model_free(struct dt_model *m);

/* Seeds every variable from its initializer (above). The built-ins use
 * He-normal for kernels followed by ReLU, Glorot-uniform for the others,
 * zeros for biases. */
void dt_model_init_params(struct dt_model *m, uint64_t seed);

size_t dt_model_num_params(const struct dt_model *m);
float *dt_model_params(struct dt_model *m);        /* (num_params) */
/* (num_params), then one spare float the model never reads or writes: a
 * strategy's own, to send one more value with a collective over the
 * gradient's last range (the elastic ring's join flag, train/allreduce_role.c). */
float *dt_model_grads(struct dt_model *m);
/* Points the backward pass at `grads` (num_params floats, the caller's,
 * 64-byte aligned, outliving its use), or back at the model's own buffer
 * (NULL); dt_model_grads then returns it. Every training step writes each
 * variable's whole gradient there (the backward pass overwrites, it never
 * adds to what was there), except the gradients of variables no loss
 * reaches, which it never writes: the caller zeroes a new buffer once, as
 * the model's own was. --deterministic computes each micro-batch into its
 * own buffer this way instead of copying it out (train/session_deal.c). Returns
 * 0, and changes nothing, for models whose gradient views are bound
 * elsewhere (custom models, sequence models); 1 when done. */
int dt_model_set_grads(struct dt_model *m, float *grads);
int dt_model_num_variables(const struct dt_model *m);
const struct dt_variable *dt_model_variable(const struct dt_model *m, int i);
/* True for kernels and embeddings (weight decay applies), false for
 * biases and layer norm's gamma and beta; custom variables say. */
int dt_model_variable_is_kernel(const struct dt_model *m, int i);
/* False for variables no optimizer trains: those of frozen nodes (Keras's
 * trainable False) and batch norm's moving statistics (updated by the
 * training forward pass itself). Their gradients are always zero, so every
 * optimizer here (SGD, momentum, Adam, Adagrad, with slots starting at
 * zero) and every strategy (all-reduce, parameter servers) leaves them
 * exactly as they are; their slots exist in the flat layout but stay zero. */
int dt_model_variable_trainable(const struct dt_model *m, int i);
/*
 * Row-sparse variables (TensorFlow's IndexedSlices): the tables that only
 * gathers read — an embedding's, and a symbol node's (nn/graph.h) unless a
 * logits node shares it (t2t's shared_embedding_and_softmax_weights: the
 * softmax reads every row, so its gradient is dense). A step reads, and its
 * gradient is non-zero in, only the rows of the ids its batch gives them.
 * dt_model_sparse_vars writes up to cap such variables' indices and returns
 * how many there are. dt_model_batch_rows writes the rows of sparse
 * variable `var` that batch b reads, ascending, into rows (room for its
 * first dimension) and returns how many.
 */
int dt_model_sparse_vars(const struct dt_model *m, int *vars, int cap);
size_t dt_model_batch_rows(const struct dt_model *m, const struct dt_model_batch *b, int var, int64_t *rows);
/*
 * True for DT_VAR_MOVING_AVERAGE variables, which TensorFlow makes SyncOnRead
 * with aggregation MEAN under MirroredStrategy and MultiWorkerMirroredStrategy:
 * batch norm's moving statistics of a node that is not frozen (the training
 * forward pass updates them; a frozen node's never change). Each replica or worker
 * updates its own copy from its own batches; a read (checkpoint, evaluation,
 * export, the replica check) sees the mean over them. The strategies replace
 * every copy by that mean after each step (distribute/mirrored.h,
 * train/allreduce_role.h): the update m*momentum + batch*(1-momentum) is
 * linear, so the mean of copies that were each averaged at every step is
 * the mean of copies that never were, and every read sees TensorFlow's value.
 * Always false for dt_model_variable_trainable's trainable variables.
 */
int dt_model_variable_sync_mean(const struct dt_model *m, int i);
/* The floats of every sync-mean variable together (0: none, the usual case). */
size_t dt_model_sync_mean_floats(const struct dt_model *m);
/* Copies them, in variable order, into buf (dt_model_sync_mean_floats). */
void dt_model_sync_mean_gather(const struct dt_model *m, float *buf);
/* Sets them, in the same order, to buf[k] * scale (1/N: buf holds a sum). */
void dt_model_sync_mean_scatter(struct dt_model *m, const float *buf, float scale);
/*
 * The parameter-server modes keep moving-average variables on the ps, which
 * moves them toward each trainer's batch value as TensorFlow's
 * assign_moving_average does there. A training step updates the model's own
 * copy in place, x' = x * decay + v * (1 - decay) (averaged over in-process
 * replicas); this recovers v = x + (x' - x) / (1 - decay), in double, from
 * `before` (dt_model_sync_mean_gather's copy from before the step) and the
 * variables now, and writes it at each such variable's offsets in `out` (a
 * (num_params) buffer: the gradient buffer a trainer pushes, where those
 * variables' gradients are otherwise unused). The division's rounding is
 * multiplied back by (1 - decay) on the ps, so its copy gets x' to within a
 * float's rounding when nothing moved it meanwhile (synchronous steps).
 */
void dt_model_moving_average_values(const struct dt_model *m, const float *before, float *out);
int dt_model_max_batch(const struct dt_model *m);
/* A one-line description: "cnn: 6 layers, 421642 parameters (1.6 MiB)"
 * (pooling is fused into conv layers and not counted). */
void dt_model_describe(const struct dt_model *m, char *buf, size_t cap);
/* The memory a step's activations take, for the batch the model was built
 * for (max_batch): bytes of the node outputs, of their gradients as planned
 * (buffers shared where their lifetimes in the backward pass do not meet),
 * and of those gradients had each its own buffer. 0 for custom models. */
struct dt_model_memory {
	int batch;
	size_t activation_bytes, gradient_bytes, gradient_bytes_unshared;
};
void dt_model_memory(const struct dt_model *m, struct dt_model_memory *out);
/* The layers in order (nn/layers.h), for summaries and tests; owned by m. */
struct dt_layer;
int dt_model_num_layers(const struct dt_model *m);
const struct dt_layer *dt_model_layer(const struct dt_model *m, int i);

/*
 * One training step's computation: forward on x (B, H, W, C), softmax
 * cross-entropy against labels (B), backward. Overwrites the gradient
 * buffer with d(mean loss)/d(params). Dropout (if any) draws from `rng`.
 * Returns the mean loss; *correct (may be NULL) gets the number of
 * examples whose arg-max prediction equals the label. B <= max_batch.
 * Denormal floats are flushed to zero during the call (tensor/tensor.h).
 */
float dt_model_train_batch(struct dt_model *m, const float *x, const uint8_t *labels, int batch,
			   struct dt_rng *rng, int *correct);

/*
 * The same step, telling the caller as soon as a range of the gradient
 * buffer is final (to start its all-reduce while the backward pass goes
 * on): after each layer's backward has written its parameters' gradients,
 * on_ready(arg, offset, count) with that layer's range of the flat buffer
 * (count > 0; layers without parameters are not reported). Layers run
 * backward in reverse order and own contiguous ranges in layer order, so
 * the calls cover [0, num_params) exactly once, each range ending where
 * the previous one began (non-increasing offsets); a range reported is
 * never written again during the call. on_ready runs on the calling thread
 * with denormals flushed (tensor/tensor.h) and must not touch the model;
 * it may hand the range to another thread, which may read and write those
 * gradients while the backward pass goes on. on_ready NULL: exactly
 * dt_model_train_batch.
 */
typedef void (*dt_grads_ready_fn)(void *arg, size_t offset, size_t count);
float dt_model_train_batch_notify(struct dt_model *m, const float *x, const uint8_t *labels, int batch,
				  struct dt_rng *rng, int *correct, dt_grads_ready_fn on_ready, void *arg);

/* Inference: forward only, dropout off. Returns the mean loss and counts
 * correct predictions. Leaves the gradient buffer alone. */
float dt_model_eval_batch(struct dt_model *m, const float *x, const uint8_t *labels, int batch, int *correct);

/* The logits (batch, num_classes) of the last train or eval batch; owned by
 * m, valid until the next call. For any graph model: the loss's input,
 * (batch, output shape). NULL for a custom model. */
const float *dt_model_logits(const struct dt_model *m);

/* ---- the general entry points (any model) ------------------------------------ */

/*
 * One training step on batch b: forward, loss, backward; overwrites the
 * gradient buffer; dropout draws from rng (may be NULL when the model has
 * no dropout). on_ready as for dt_model_train_batch_notify (a custom model
 * reports its whole buffer once, after its callback). Failures, with the
 * gradient buffer then not to be applied:
 *   DT_USAGE  a batch that does not match the model (size, count, dtypes,
 *             NULL data), a label or token id out of range (the message
 *             names the example, the position and the value);
 *   DT_RUNTIME a non-finite loss or gradient (custom models: written by the
 *             callback), naming the variable and index;
 *   any status a custom callback returns, with its message.
 */
enum dt_status dt_model_step(struct dt_model *m, const struct dt_model_batch *b, struct dt_rng *rng,
			     dt_grads_ready_fn on_ready, void *arg, struct dt_step_result *res,
			     struct dt_err *err) DT_MUST_CHECK;
/* Forward and loss only, dropout off; leaves the gradient buffer alone.
 * Same failures as dt_model_step. */
enum dt_status dt_model_evaluate(struct dt_model *m, const struct dt_model_batch *b, struct dt_step_result *res,
				 struct dt_err *err) DT_MUST_CHECK;

/* The model's inputs in order, and what its targets look like. */
int dt_model_num_inputs(const struct dt_model *m);
const struct dt_io_info *dt_model_input(const struct dt_model *m, int i);
const struct dt_io_info *dt_model_target(const struct dt_model *m);
enum dt_loss dt_model_loss(const struct dt_model *m);
const char *dt_model_name(const struct dt_model *m);

#endif
