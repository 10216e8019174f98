/*
 * dtrain.h — the public C API of libdtrain: train your own model on your own
 * data, in one process or on a cluster, with the same program.
 *
 *     cc prog.c $(pkg-config --cflags --libs dtrain)
 *
 * The tutorial is docs/API.md; this header is the reference. Everything
 * public is named dtrain_* / DTRAIN_* (the library's internals use dt_*, and
 * the shared library exports nothing else).
 *
 * THE PIECES
 *   dtrain_error    a status and a message; every fallible call fills one
 *   dtrain_cluster  who is in the cluster and who this process is (TF_CONFIG,
 *                   --ps_hosts/--worker_hosts/--job_name/--task_index, Slurm,
 *                   MPI, or built in code)
 *   dtrain_model    a layer graph (dtrain_dense, dtrain_conv2d, ... and a loss)
 *                   or a custom model (named variables and your own
 *                   forward/backward callback)
 *   dtrain_data     where batches come from: your batch callback, arrays in
 *                   memory, or a built-in problem by name
 *   dtrain_session  trains the model on the data in the mode the cluster asks
 *                   for, step by step or to the end; evaluates; checkpoints
 *                   (typed options: dtrain_session_options; figures after a
 *                   run: dtrain_result; a built-in model on a built-in problem,
 *                   what `dtrain train` runs: dtrain_session_new_builtin)
 *
 * ERRORS
 *   Fallible functions return a dtrain_status (DTRAIN_OK is 0) and take an
 *   optional `dtrain_error *err` last; on failure the error holds the same
 *   status and a message saying what failed, where, and (on a line starting
 *   "hint:") how to fix it. err may be NULL: the status is still returned.
 *   The library never prints a final error and never exits the process; it
 *   does print progress lines to stderr while training (option "log_every",
 *   0 turns them off).
 *
 * OWNERSHIP AND LIFETIME
 *   Every handle is created by a _new, _from_ or _resolve function and freed
 *   by its _free, which accepts NULL. A session BORROWS its model, its data
 *   and its cluster: free those only after the session. Arrays passed to
 *   dtrain_data_add_* are copied. Strings returned (const char *) belong to
 *   the handle they came from and live as long as it, unless said otherwise.
 *
 * THREADING
 *   A handle is used by one thread at a time; different handles may be used
 *   from different threads. Callbacks you give the library (the batch
 *   callback, a custom model's forward/backward) may be called from threads
 *   the library starts, and with "replicas" > 1 from several threads at
 *   once, each call with its own dtrain_batch / dtrain_step: they must not
 *   share unprotected state through their `user` pointer.
 *
 * MISUSE
 *   A NULL handle, a shape that does not connect, a call in the wrong order
 *   (an option set after training started, a step after dtrain_session_close)
 *   returns DTRAIN_USAGE or DTRAIN_CONFIG with a message; the library does
 *   not crash on them. Passing a freed handle or a pointer to too little
 *   memory is undefined behaviour, as in any C library.
 */
#ifndef DTRAIN_H
#define DTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DTRAIN_VERSION "0.1.0"

/* Marks the functions the shared library exports (built with
 * -fvisibility=hidden: everything else stays inside). */
#if defined(__GNUC__)
#define DTRAIN_API __attribute__((visibility("default")))
#else
#define DTRAIN_API
#endif

/* "0.1.0": the library's version, which may differ from the header's
 * DTRAIN_VERSION when a newer libdtrain.so.0 is installed. */
DTRAIN_API const char *dtrain_version(void);

/* ======================================================================
 * Errors
 * ====================================================================== */

/* The statuses, with the process exit code a program may map them to
 * (dtrain's own CLI does: docs/EXIT_CODES.md). */
typedef enum dtrain_status {
	DTRAIN_OK = 0,       /* 0  success */
	DTRAIN_USAGE,        /* 2  a wrong argument, a NULL handle, a call out of order */
	DTRAIN_CONFIG,       /* 2  an invalid configuration: cluster, shapes, options */
	DTRAIN_NOMEM,        /* 1  out of memory */
	DTRAIN_IO,           /* 4  a file could not be read or written */
	DTRAIN_DATA,         /* 4  bad data: a corrupt data file, a batch with no example */
	DTRAIN_CKPT,         /* 4  a bad or incompatible checkpoint */
	DTRAIN_PEER,         /* 3  another task of the cluster failed (retryable) */
	DTRAIN_TIMEOUT,      /* 3  a deadline passed (retryable) */
	DTRAIN_PROTOCOL,     /* 3  a peer broke the protocol */
	DTRAIN_RUNTIME,      /* 1  a runtime failure: NaN from a callback, training diverged */
	DTRAIN_INTERNAL,     /* 1  a bug in dtrain: please report it */
} dtrain_status;

typedef struct dtrain_error dtrain_error;

/* A new error holding DTRAIN_OK; NULL only when out of memory. */
DTRAIN_API dtrain_error *dtrain_error_new(void);
DTRAIN_API void dtrain_error_free(dtrain_error *err);
/* The status of the last failure recorded (DTRAIN_OK when none, or err NULL). */
DTRAIN_API dtrain_status dtrain_error_status(const dtrain_error *err);
/* Its message, "" when none; valid until err is changed or freed. */
DTRAIN_API const char *dtrain_error_message(const dtrain_error *err);
/* Back to DTRAIN_OK and "". */
DTRAIN_API void dtrain_error_clear(dtrain_error *err);
/* For callbacks: records st and a printf-style message in err (may be NULL)
 * and returns st, so a callback can `return dtrain_error_set(err, ...)`. */
DTRAIN_API dtrain_status dtrain_error_set(dtrain_error *err, dtrain_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "CONFIG" for DTRAIN_CONFIG; "UNKNOWN" for a value outside the enum. */
DTRAIN_API const char *dtrain_status_name(dtrain_status st);
/* "invalid configuration"; never NULL. */
DTRAIN_API const char *dtrain_status_message(dtrain_status st);
/* The exit code in the table above (1 for a value outside the enum). */
DTRAIN_API int dtrain_status_exit_code(dtrain_status st);

/* ======================================================================
 * Cluster
 * ====================================================================== */

typedef struct dtrain_cluster dtrain_cluster;

/*
 * Finds the cluster as the dtrain CLI does, first source found wins:
 *   1. TensorFlow's low-level flags in argv (seed 003): --ps_hosts,
 *      --worker_hosts, --job_name, --task_index (as --flag=value or
 *      --flag value), and --ps_replicas / --port_base for Slurm and MPI;
 *   2. the TF_CONFIG environment variable;
 *   3. a Slurm step (SLURM_PROCID), 4. an Open MPI launch (OMPI_COMM_WORLD_RANK);
 *   5. none: one local process, worker 0, the chief.
 * The flags it reads are REMOVED from argv and *argc lowered, so the program
 * parses the rest itself; other arguments keep their order. argc/argv may
 * be NULL (environment only). On success *out is a new cluster (free it);
 * on failure *out is NULL and the status is DTRAIN_CONFIG (a bad TF_CONFIG,
 * a task not in the cluster, a malformed address...) or DTRAIN_USAGE (a
 * flag without its value, a NULL out).
 */
DTRAIN_API dtrain_status dtrain_cluster_resolve(int *argc, char **argv, dtrain_cluster **out, dtrain_error *err);

/* The four low-level flags given as strings (NULL or "" for one not given;
 * task_index < 0 for not given). DTRAIN_CONFIG as for resolve. */
DTRAIN_API dtrain_status dtrain_cluster_from_flags(const char *ps_hosts, const char *worker_hosts,
						   const char *job_name, int task_index, dtrain_cluster **out,
						   dtrain_error *err);

/* A TF_CONFIG text ({"cluster": {...}, "task": {...}}), read as TensorFlow
 * reads it. DTRAIN_CONFIG with line and column for malformed JSON. */
DTRAIN_API dtrain_status dtrain_cluster_from_tf_config(const char *json, dtrain_cluster **out, dtrain_error *err);

/* Built in code: an empty cluster, then tasks, then which one this is.
 * dtrain_cluster_add_task: type "chief", "worker", "ps", "master" or
 * "evaluator", address "host:port"; DTRAIN_CONFIG for an unknown type, a bad
 * address or a slot already taken, DTRAIN_USAGE after set_task.
 * dtrain_cluster_set_task validates the whole cluster as TF_CONFIG would be
 * (DTRAIN_CONFIG naming the rule broken). A cluster is usable by a session
 * only once set_task succeeded, except the empty one: that is local. */
DTRAIN_API dtrain_status dtrain_cluster_new(dtrain_cluster **out, dtrain_error *err);
DTRAIN_API dtrain_status dtrain_cluster_add_task(dtrain_cluster *cl, const char *type, int index,
						 const char *address, dtrain_error *err);
DTRAIN_API dtrain_status dtrain_cluster_set_task(dtrain_cluster *cl, const char *type, int index,
						 dtrain_error *err);
DTRAIN_API void dtrain_cluster_free(dtrain_cluster *cl);

/* This process's task: "worker", 0; is_chief is 1 for the chief (master:0,
 * else chief:0, else worker:0, as TensorFlow decides). NULL cl: "", -1, 0. */
DTRAIN_API const char *dtrain_cluster_task_type(const dtrain_cluster *cl);
DTRAIN_API int dtrain_cluster_task_index(const dtrain_cluster *cl);
DTRAIN_API int dtrain_cluster_is_chief(const dtrain_cluster *cl);
/* Tasks in job `type` (0 for an absent job or unknown type). */
DTRAIN_API int dtrain_cluster_num_tasks(const dtrain_cluster *cl, const char *type);
/* "host:port" of type:index, NULL when there is no such task. */
DTRAIN_API const char *dtrain_cluster_address(const dtrain_cluster *cl, const char *type, int index);
/* Where it came from: "flags", "TF_CONFIG", "slurm", "mpi", "local", "code". */
DTRAIN_API const char *dtrain_cluster_source(const dtrain_cluster *cl);

/* ======================================================================
 * Models
 * ====================================================================== */

typedef struct dtrain_model dtrain_model;

/* A node of a layer graph: an input, a layer's output or a loss. Valid
 * nodes are >= 0; builder calls return -1 once the model holds an error. */
typedef int dtrain_node;

typedef enum dtrain_dtype { DTRAIN_FLOAT32, DTRAIN_INT32 } dtrain_dtype;

typedef enum dtrain_activation {
	DTRAIN_LINEAR, DTRAIN_RELU, DTRAIN_SIGMOID, DTRAIN_TANH, DTRAIN_SOFTMAX, DTRAIN_GELU
} dtrain_activation;

typedef enum dtrain_padding { DTRAIN_VALID, DTRAIN_SAME } dtrain_padding;

/* Initializers of a custom model's variables (layers choose their own:
 * Glorot-uniform kernels, He-normal before a ReLU, zero biases), Keras's:
 * GLOROT_UNIFORM U(-l, l) with l = sqrt(6 / (fan_in + fan_out)); HE_NORMAL
 * a normal of sd sqrt(2 / fan_in) truncated at 2 sd; NORMAL and
 * TRUNCATED_NORMAL of sd `scale` (0: 0.05); ZEROS; ONES. Fans as Keras
 * counts them: the last dimension is fan-out, the one before fan-in, times
 * the leading ones. Each variable draws from its own stream of the seed. */
typedef enum dtrain_init {
	DTRAIN_INIT_GLOROT_UNIFORM, DTRAIN_INIT_HE_NORMAL, DTRAIN_INIT_ZEROS, DTRAIN_INIT_ONES,
	DTRAIN_INIT_NORMAL, DTRAIN_INIT_TRUNCATED_NORMAL
} dtrain_init;

/* A new, empty model; NULL only when out of memory. */
DTRAIN_API dtrain_model *dtrain_model_new(void);
DTRAIN_API void dtrain_model_free(dtrain_model *m);

/*
 * BUILDING. Builder calls never fail loudly: a call with a bad argument
 * (a shape that does not connect, an unknown node, a NULL model) records
 * the FIRST error in the model and returns -1, and every later call returns
 * -1 and does nothing, so a graph is written straight down and checked
 * once, by dtrain_model_check (or dtrain_session_new, which calls it). The
 * message names the layer ("dense_2: input has 3 dimensions (7, 7, 64);
 * ...") and the shapes.
 *
 * Shapes are per example: the batch is never part of them. An image is
 * (height, width, channels); a dense kernel is (in, out); conv kernels are
 * (kh, kw, in_channels, filters). Layers are named as Keras names them
 * ("dense_1"; convolutions "conv_1", as dtrain's built-ins always were),
 * their variables "dense_1/kernel", "dense_1/bias".
 * A model may be used by one session at a time; once a session uses it, it
 * is frozen (builder calls → DTRAIN_USAGE recorded in the model).
 */

/* An input the data fills: `name` (unique; 1 to 31 of [A-Za-z0-9_.-]),
 * dtype, per-example shape of ndim (0..3) dimensions, ndim 0 meaning one
 * value per example. The labels of softmax cross-entropy are an INT32 input
 * of shape () (one class per example) or of the logits' shape less its last
 * axis. Also declares the inputs of a custom model. */
DTRAIN_API dtrain_node dtrain_input(dtrain_model *m, const char *name, dtrain_dtype dtype, int ndim,
				    const int64_t *shape);

/* Layers (x: a FLOAT32 node unless said). */
DTRAIN_API dtrain_node dtrain_dense(dtrain_model *m, dtrain_node x, int units, dtrain_activation act);
DTRAIN_API dtrain_node dtrain_conv2d(dtrain_model *m, dtrain_node x, int filters, int kernel_h, int kernel_w,
				     int stride, dtrain_padding padding, dtrain_activation act);
DTRAIN_API dtrain_node dtrain_max_pool2d(dtrain_model *m, dtrain_node x, int size, int stride);
DTRAIN_API dtrain_node dtrain_avg_pool2d(dtrain_model *m, dtrain_node x, int size, int stride);
DTRAIN_API dtrain_node dtrain_flatten(dtrain_model *m, dtrain_node x);
/* Same element count, new per-example shape. */
DTRAIN_API dtrain_node dtrain_reshape(dtrain_model *m, dtrain_node x, int ndim, const int64_t *shape);
DTRAIN_API dtrain_node dtrain_activate(dtrain_model *m, dtrain_node x, dtrain_activation act);
/* Inverted dropout: drops with probability rate in training, identity in evaluation. */
DTRAIN_API dtrain_node dtrain_dropout(dtrain_model *m, dtrain_node x, float rate);
/* ids: an INT32 node of shape (T) or (T1, T2); output (T..., dim). An id
 * outside [0, vocab) in a batch fails that step with DTRAIN_USAGE naming
 * the example, the position and the value. */
DTRAIN_API dtrain_node dtrain_embedding(dtrain_model *m, dtrain_node ids, int vocab, int dim);
/* Normalizes over the last dimension, learned gain and bias. */
DTRAIN_API dtrain_node dtrain_layer_norm(dtrain_model *m, dtrain_node x, float epsilon);
/* a + b, same shapes (a residual connection). */
DTRAIN_API dtrain_node dtrain_add(dtrain_model *m, dtrain_node a, dtrain_node b);
/* Joins n (2..8) nodes along the last dimension; the others must agree. */
DTRAIN_API dtrain_node dtrain_concatenate(dtrain_model *m, int n, const dtrain_node *xs);

/* Losses: exactly one per model; the model's loss is its mean over the
 * batch. softmax: logits (C) and an INT32 label () in [0, C) — a label out
 * of range fails that step with DTRAIN_USAGE naming the example; sigmoid: logits and FLOAT32
 * targets in [0, 1] of the same shape; mse: predictions and FLOAT32 targets
 * of the same shape. Accuracy is reported for softmax only. */
DTRAIN_API dtrain_node dtrain_softmax_cross_entropy(dtrain_model *m, dtrain_node logits, dtrain_node labels);
DTRAIN_API dtrain_node dtrain_sigmoid_cross_entropy(dtrain_model *m, dtrain_node logits, dtrain_node targets);
DTRAIN_API dtrain_node dtrain_mean_squared_error(dtrain_model *m, dtrain_node predictions, dtrain_node targets);

/*
 * CUSTOM MODELS: any model written in C. Declare inputs (dtrain_input) and
 * variables, then give one callback that, for a batch, computes the mean
 * loss and, in training, d(mean loss)/d(variable) for every variable. The
 * library keeps the variables in one flat buffer, initializes, distributes,
 * averages or pushes the gradients, applies the optimizer and checkpoints.
 * A model is a layer graph or a custom model, not both (DTRAIN_USAGE).
 */

/* Declares a variable (name: 1 to 63 of [A-Za-z0-9_./-]; ndim 1..4);
 * returns its index (0, 1, ...) for dtrain_step_param and dtrain_step_grad,
 * or -1 (the error is recorded in the model as above). */
DTRAIN_API int dtrain_variable(dtrain_model *m, const char *name, int ndim, const int64_t *shape,
			       dtrain_init init, float scale);

typedef struct dtrain_step dtrain_step;

/* The forward/backward callback. Read inputs and variables through `step`,
 * write gradients (training only) and the loss. Return DTRAIN_OK, or a
 * status with a message in err (dtrain_error_set): the session's call then
 * fails with that status and the message prefixed by the step. A loss or a
 * gradient that is not finite fails the step with DTRAIN_RUNTIME naming the
 * variable and the element; nothing of that step is applied. Called from
 * library threads (see THREADING). */
typedef dtrain_status (*dtrain_forward_backward_fn)(void *user, dtrain_step *step, dtrain_error *err);

/* Sets the callback; `user` is passed back untouched (owned by you). */
DTRAIN_API void dtrain_model_set_forward_backward(dtrain_model *m, dtrain_forward_backward_fn fn, void *user);

/* Inside the callback (all return 0/NULL for a NULL step or a wrong name): */
DTRAIN_API int dtrain_step_batch_size(const dtrain_step *s);
/* 1 when training (gradients wanted), 0 in evaluation (dtrain_step_grad NULL). */
DTRAIN_API int dtrain_step_training(const dtrain_step *s);
/* Input `name`, (batch, shape...) row-major; NULL for an unknown name or the
 * other dtype. */
DTRAIN_API const float *dtrain_step_input_float(const dtrain_step *s, const char *name);
DTRAIN_API const int32_t *dtrain_step_input_int32(const dtrain_step *s, const char *name);
/* Variable `var`'s values (read only) and its gradient, zeroed before the
 * call; both are the variable's element count long. */
DTRAIN_API const float *dtrain_step_param(const dtrain_step *s, int var);
DTRAIN_API float *dtrain_step_grad(dtrain_step *s, int var);
/* The mean loss over the batch (required), and, optionally, how many
 * examples were predicted right (for an accuracy in logs and evaluations). */
DTRAIN_API void dtrain_step_set_loss(dtrain_step *s, double loss);
DTRAIN_API void dtrain_step_set_correct(dtrain_step *s, int64_t correct);

/* Checks a finished model: the first builder error if any, else DTRAIN_CONFIG
 * for a model with no input, no loss (layer graph) or no callback and no
 * variable (custom model). */
DTRAIN_API dtrain_status dtrain_model_check(const dtrain_model *m, dtrain_error *err);
/* Variables, after a successful check: count, name, elements. */
DTRAIN_API int dtrain_model_num_variables(const dtrain_model *m);
DTRAIN_API const char *dtrain_model_variable_name(const dtrain_model *m, int var);
DTRAIN_API int64_t dtrain_model_variable_size(const dtrain_model *m, int var);

/* ======================================================================
 * Data
 * ====================================================================== */

typedef struct dtrain_data dtrain_data;
typedef struct dtrain_batch dtrain_batch;

/* Your batch callback: fill every input of the model for this batch. The
 * tensors are shaped by the model's inputs: (batch size, shape...), float
 * or int32. Return DTRAIN_OK, or a status and a message (dtrain_error_set):
 * the step fails with it. Called from library threads (see THREADING). */
typedef dtrain_status (*dtrain_batch_fn)(void *user, dtrain_batch *batch, dtrain_error *err);

/* A source calling fn for each batch. examples_per_epoch > 0 lets the
 * library count epochs for you (dtrain_batch_epoch); 0: always epoch 0. */
DTRAIN_API dtrain_status dtrain_data_from_callback(dtrain_batch_fn fn, void *user, int64_t examples_per_epoch,
						   dtrain_data **out, dtrain_error *err);

/* In the callback: which of the num_shards shards this task reads (its
 * trainer index), the step (batches this shard handed out before this
 * one: 0 first, also after a restore), the epoch, the batch size, and each
 * input's buffer to fill (NULL for an unknown name or the other dtype). */
DTRAIN_API int dtrain_batch_shard(const dtrain_batch *b);
DTRAIN_API int dtrain_batch_num_shards(const dtrain_batch *b);
DTRAIN_API int64_t dtrain_batch_step(const dtrain_batch *b);
DTRAIN_API int64_t dtrain_batch_epoch(const dtrain_batch *b);
DTRAIN_API int dtrain_batch_size(const dtrain_batch *b);
DTRAIN_API float *dtrain_batch_float(dtrain_batch *b, const char *input);
DTRAIN_API int32_t *dtrain_batch_int32(dtrain_batch *b, const char *input);

/* Arrays in memory: `count` examples; then one array per model input, each
 * copied (count * per_example values). Training reads this task's shard
 * (example i belongs to shard i % num_shards), reshuffled every epoch from
 * the session's seed, dropping an incomplete last batch; evaluation reads
 * every example once, in order. DTRAIN_USAGE for count < 1, a name added
 * twice, a NULL array. */
DTRAIN_API dtrain_status dtrain_data_from_arrays(int64_t count, dtrain_data **out, dtrain_error *err);
DTRAIN_API dtrain_status dtrain_data_add_float(dtrain_data *d, const char *input, const float *values,
					       int64_t per_example, dtrain_error *err);
DTRAIN_API dtrain_status dtrain_data_add_int32(dtrain_data *d, const char *input, const int32_t *values,
					       int64_t per_example, dtrain_error *err);

/* A built-in problem ("fashion_mnist", "mnist", "synthetic"), split "train"
 * or "test", as arrays with inputs "image" (28, 28, 1) FLOAT32, normalized,
 * and "label" () INT32. data_dir NULL: the problem's default. DTRAIN_USAGE
 * for an unknown name (listing the known ones), DTRAIN_DATA/DTRAIN_IO for
 * missing or bad files. */
DTRAIN_API dtrain_status dtrain_data_problem(const char *problem, const char *data_dir, const char *split,
					     dtrain_data **out, dtrain_error *err);
DTRAIN_API void dtrain_data_free(dtrain_data *d);

/* ======================================================================
 * Session: strategy, training, evaluation, checkpoints
 * ====================================================================== */

typedef struct dtrain_session dtrain_session;

/*
 * A session trains `model` on `train` as this task of `cluster` (NULL:
 * local). The mode follows from the cluster as TensorFlow chooses it:
 *   a "ps" job                      → parameter servers: "ps_async", or
 *                                     "ps_sync" with option sync=1;
 *                                     this task "ps_server" if it is a ps
 *   a "ps" job, one trainer that is → "ps_sync_in_graph", t2t's in-graph
 *   a "master", option sync=1          layout: the master is the only
 *                                     trainer and the ps tasks compute, each
 *                                     a replica's gradient on its shard of
 *                                     the data (dtrain_session_options'
 *                                     ps_gpu: replicas per ps); they run
 *                                     this same program, so they build
 *                                     your model and data too
 *   several trainers, no ps         → "multi_worker_mirrored" (ring all-reduce)
 *   one process, option replicas>1  → "mirrored" (replicas on threads)
 *   one process                     → "local"
 *   an "evaluator" task             → "evaluator" (evaluates checkpoints of
 *                                     output_dir as they appear)
 * so the SAME program runs on every task, the cluster telling each what to
 * be. The session borrows model, train and cluster (free them after it); it
 * checks the model (dtrain_model_check) and freezes it.
 *
 * Every mode runs the same model code. A distributed trainer (ps_async,
 * ps_sync, ps_sync_in_graph's master, multi_worker_mirrored) runs on a library thread that this
 * session's calls drive one at a time; between calls nothing runs (the
 * variables may be read), and its peers wait: keep the time between two
 * steps under the cluster's deadlines (60 s). A ps_server's run serves,
 * an evaluator's run needs output_dir and follows its checkpoints.
 */
DTRAIN_API dtrain_status dtrain_session_new(dtrain_model *model, dtrain_data *train, const dtrain_cluster *cluster,
					    dtrain_session **out, dtrain_error *err);

/*
 * Options, by the names of `dtrain train`'s flags and --hparams (values as
 * text), before the first step: train_steps (1000), batch_size (per trainer),
 * learning_rate, optimizer (sgd, momentum, adam, adagrad), momentum, beta1,
 * beta2, epsilon, lr_schedule (constant, linear_warmup_decay, or a product of
 * t2t's factors such as constant*linear_warmup*rsqrt_decay: docs/MODELS.md),
 * warmup_steps, weight_decay, clip_grad_norm
 * (0: off; t2t's, tf.clip_by_global_norm on the step's gradient), seed (1),
 * replicas (1), sync (0), threads (1), log_every (100; 0: quiet),
 * output_dir ("": no checkpoints), eval_timeout_secs (3600: an evaluator's
 * wait for a new checkpoint), save_checkpoints_steps,
 * keep_checkpoint_max, save_summary_steps, warm_start_from (a checkpoint,
 * output dir, safetensors or Keras weights file the variables start from
 * when output_dir has no checkpoint: docs/CHECKPOINTS.md), warm_start_vars
 * (a regular expression: only the variables it matches), predictions_file
 * (an evaluate-once run writes per-example predictions there). DTRAIN_USAGE for an unknown key
 * (listing the known ones), a bad value, or a call after training started.
 */
DTRAIN_API dtrain_status dtrain_session_set(dtrain_session *s, const char *key, const char *value,
					    dtrain_error *err);
/* Data for evaluations ("evaluator" tasks and eval_every); borrowed. */
DTRAIN_API dtrain_status dtrain_session_set_eval_data(dtrain_session *s, dtrain_data *eval, dtrain_error *err);

/* The mode named above ("local", ...); "" for a NULL session. */
DTRAIN_API const char *dtrain_session_mode(const dtrain_session *s);

/* Runs the task to the end: trains until the global step reaches
 * train_steps (restoring from output_dir's newest checkpoint first, saving
 * at the end), or, on a ps task, serves until the chief ends the run, or,
 * on an evaluator, evaluates each new checkpoint until the last. Then the
 * session is closed. DTRAIN_PEER/DTRAIN_TIMEOUT when another task fails. */
DTRAIN_API dtrain_status dtrain_session_run(dtrain_session *s, dtrain_error *err);

/* A custom loop: one training step (connecting, initializing or restoring
 * on the first), *loss (may be NULL) its mean loss. Only on trainer tasks
 * (DTRAIN_USAGE on a ps or evaluator: call dtrain_session_run). A first
 * call that finds the run already over (a worker joining after the chief
 * ended it) takes no step: DTRAIN_OK, *loss 0, should_stop then 1; later
 * calls past the end are DTRAIN_USAGE. */
DTRAIN_API dtrain_status dtrain_session_step(dtrain_session *s, double *loss, dtrain_error *err);
/* 1 once the global step reached train_steps (or the session is closed). */
DTRAIN_API int dtrain_session_should_stop(const dtrain_session *s);
DTRAIN_API int64_t dtrain_session_global_step(const dtrain_session *s);
/* Ends a custom loop: the final checkpoint, the end of the run for the
 * other tasks. After it only evaluate, read_variable and free work. */
DTRAIN_API dtrain_status dtrain_session_close(dtrain_session *s, dtrain_error *err);
DTRAIN_API void dtrain_session_free(dtrain_session *s);

/* Evaluates the current parameters on every example of `data` once
 * (dropout off): mean loss and accuracy (NULL-able; accuracy -1 when the
 * model reports none). */
DTRAIN_API dtrain_status dtrain_session_evaluate(dtrain_session *s, dtrain_data *data, double *loss,
						 double *accuracy, dtrain_error *err);

/* Checkpoints (safetensors in output_dir, docs/CHECKPOINTS.md): save now
 * (DTRAIN_USAGE without output_dir); restore the newest checkpoint that
 * verifies in `dir` (NULL: output_dir), before the first step: `dir`
 * becomes the output_dir, where training goes on saving, and the session
 * starts (a directory with no checkpoint starts from the seed). A session
 * with an output_dir restores from it by itself when it starts. */
DTRAIN_API dtrain_status dtrain_session_save(dtrain_session *s, dtrain_error *err);
DTRAIN_API dtrain_status dtrain_session_restore(dtrain_session *s, const char *dir, dtrain_error *err);

/* A scalar of yours in the TensorBoard summaries at the current step (chief
 * only; elsewhere, and without output_dir, a no-op returning DTRAIN_OK). */
DTRAIN_API dtrain_status dtrain_session_scalar(dtrain_session *s, const char *tag, double value,
					       dtrain_error *err);

/* Copies variable `name`'s values out (count = its size), or writes them in
 * (local and mirrored modes, before or between steps). */
DTRAIN_API dtrain_status dtrain_session_read_variable(dtrain_session *s, const char *name, float *dst, int64_t count,
						      dtrain_error *err);
DTRAIN_API dtrain_status dtrain_session_write_variable(dtrain_session *s, const char *name, const float *src,
						       int64_t count, dtrain_error *err);

/* The gradient of the mean loss on the first batch of `data` (dropout off),
 * without applying it: *loss gets the loss, and dtrain_session_read_gradient
 * the gradient of each variable. For gradient checks and saliency; local
 * and mirrored modes. */
DTRAIN_API dtrain_status dtrain_session_gradients(dtrain_session *s, dtrain_data *data, double *loss,
						  dtrain_error *err);
DTRAIN_API dtrain_status dtrain_session_read_gradient(dtrain_session *s, const char *name, float *dst,
						      int64_t count, dtrain_error *err);

/* ======================================================================
 * Typed session options, results and evaluation reports
 * ====================================================================== */

/* Which split an evaluator reads (t2t's schedules: continuous_eval reads
 * the test split, continuous_eval_on_train_data the train split; DEV is a
 * text problem's dev split). */
typedef enum dtrain_split { DTRAIN_SPLIT_TEST, DTRAIN_SPLIT_TRAIN, DTRAIN_SPLIT_DEV } dtrain_split;

/* How the evaluator walks the chief's checkpoints. */
typedef enum dtrain_eval_walk {
	DTRAIN_EVAL_LATEST, /* jump to the newest checkpoint */
	DTRAIN_EVAL_EVERY,  /* each checkpoint in order */
} dtrain_eval_walk;

/*
 * Every option of a session as typed fields: dtrain_session_options_init
 * fills the defaults (those of dtrain_session_set's list, and the ones
 * noted below), the caller changes what it wants, dtrain_session_configure
 * checks the whole struct and applies it. The strings are copied.
 */
typedef struct dtrain_session_options {
	/* the run */
	int64_t train_steps;          /* > 0 (1000) */
	uint64_t seed;                /* every random choice: init, dropout, shuffle (1) */
	int threads;                  /* compute threads, 1..1024 (1) */
	int prefetch;                 /* prepare the next batch on a background thread (0) */
	int replicas;                 /* in-process mirrored replicas, 1..64 (1) */
	int deterministic;            /* micro-batches summed in 64-bit fixed point (in micro-batch order
					 for at most 3 a global step): the same bits at any worker or
					 replica count; not with parameter servers (0) */
	int micro_batch;              /* deterministic's unit of work in examples (0: deterministic off);
					 one that does not divide each replica's batch fails as training
					 starts, DTRAIN_USAGE (32) */
	int64_t log_every;            /* a progress line every N steps; 0: none (100) */
	/* evaluation while training (on the built-in problem's test split, or the eval data) */
	int64_t eval_every;           /* also evaluate every N steps; 0: not during training (0) */
	int eval_at_end;              /* the chief evaluates after the last step (0) */
	int eval_after_save;          /* train_and_evaluate: evaluate after each checkpoint, into eval/ (0) */
	/* checkpoints and summaries */
	const char *output_dir;       /* NULL or "": none; copied (< 1024 bytes) */
	int64_t save_checkpoints_steps; /* every N steps; 0: by time (0) */
	double save_checkpoints_secs; /* every S seconds, 0..1e9; 0: by steps; both 0: 600 s (0) */
	int keep_checkpoint_max;      /* newest kept; 0: all (5) */
	int64_t save_summary_steps;   /* TensorBoard scalars every N steps; 0: none (100) */
	/* parameter servers */
	int sync;                     /* synchronous training through the ps (0) */
	int replicas_to_aggregate;    /* sync: gradients per step, the other trainers backups; 0: all (0) */
	double sync_timeout_secs;     /* sync: a step gathers its gradients within this, 0..1e7 (300) */
	double connect_timeout_secs;  /* wait for the ps (and the chief's initialization), or with no ps
					 for every other worker, 0..86400 (120) */
	double ps_idle_timeout_secs;  /* a ps with no trainer this long ends with DTRAIN_TIMEOUT; 0:
					 never; 0..1e7 (600) */
	int ps_overlap;               /* async: compute the next step during this one's push/pull, its
					 gradient one step staler (0) */
	int worker_gpu, ps_gpu;       /* t2t's in-graph layout (a master, sync, one trainer): replicas
					 on the master and per ps (1, 0) */
	/* all-reduce (several workers, no ps) */
	double step_timeout_secs;     /* deadline of each collective, 0..86400 (60) */
	int64_t check_replicas_every; /* debug: compare a hash of every worker's variables; 0: never (0) */
	int min_workers;              /* elastic: go on while this many workers remain, re-forming the
					 ring past a lost one and growing it back when it returns;
					 0: every worker, a lost one ends the run (0) */
	/* the evaluator: an "evaluator" task, or any process with evaluator = 1 */
	int evaluator;                /* this process evaluates the chief's checkpoints instead of
					 training (t2t's continuous_eval schedules) (0) */
	dtrain_split eval_split;      /* (DTRAIN_SPLIT_TEST) */
	int eval_once;                /* evaluate the newest checkpoint once and end (t2t's evaluate) (0) */
	dtrain_eval_walk eval_walk;   /* (DTRAIN_EVAL_LATEST) */
	double eval_timeout_secs;     /* end with DTRAIN_TIMEOUT after this long with no new checkpoint,
					 0..1e7 (3600) */
} dtrain_session_options;

/* Fills *o with the defaults above (NULL o: nothing). */
DTRAIN_API void dtrain_session_options_init(dtrain_session_options *o);
/* Checks every field (DTRAIN_USAGE naming the field, its value and the
 * range, and nothing changed) and applies them all, before the session
 * starts (DTRAIN_USAGE after). Hyper-parameters (batch_size, learning
 * rate...) stay with dtrain_session_set or the built-in spec. */
DTRAIN_API dtrain_status dtrain_session_configure(dtrain_session *s, const dtrain_session_options *o,
						  dtrain_error *err);

/* One evaluation's figures. text: a text problem's (t2t's metrics:
 * accuracy per token, accuracy_per_sequence, neg_log_perplexity); bleu: a
 * translation's approx_bleu_score is set. */
typedef struct dtrain_eval {
	dtrain_split split;
	int64_t step;                 /* the global step of the variables evaluated */
	int64_t examples;
	double accuracy, loss;
	int text;
	double accuracy_per_sequence, neg_log_perplexity;
	int bleu;
	double approx_bleu_score;
} dtrain_eval;

/* Called after each checkpoint an evaluator evaluates, on the thread that
 * runs it; `e` lives during the call. (Evaluations while training are
 * logged; the final one is in dtrain_result.) */
typedef void (*dtrain_eval_fn)(void *user, const dtrain_eval *e);
/* Sets it before the session runs (fn NULL: none). DTRAIN_USAGE for a NULL
 * session or after the start. */
DTRAIN_API dtrain_status dtrain_session_set_eval_report(dtrain_session *s, dtrain_eval_fn fn, void *user,
							dtrain_error *err);

/* What a finished run did on this task. */
typedef struct dtrain_result {
	int64_t steps;                /* the global step reached */
	int64_t num_params;
	double final_loss;            /* mean training loss over the last log window */
	double train_seconds;         /* training only, evaluations left out */
	double examples_per_sec;      /* after the first (warm-up) step */
	double steady_cpu_seconds;    /* the process's CPU time over those steps */
	int64_t steady_tokens;        /* text problems, over those steps: non-padding target tokens, */
	int64_t steady_positions;     /* sequence positions (sum of B * L) */
	int64_t steady_attention_pairs; /* and query-key pairs (sum of B * L * L); 0 for images */
	double first_step_seconds;    /* from process start to the end of the first step */
	double load_seconds;          /* loading the data */
	const char *blas_core;        /* the BLAS kernel the compute ran on ("Haswell"...); the library's */
	int evaluated;                /* `eval` holds the final evaluation (the chief with eval_at_end) */
	dtrain_eval eval;
	int sync;                     /* the ps_sync figures below are set */
	int replicas_to_aggregate, total_replicas;
	double barrier_seconds;       /* time this trainer's pulls were held at the barrier */
	double barrier_share;         /* of its training time */
	int64_t stale_steps;          /* steps whose gradients were dropped as a backup's */
	int64_t ps_recoveries;        /* lost parameter servers recovered in place */
} dtrain_result;

/* The figures of the run dtrain_session_run or dtrain_session_close
 * finished (zeros before), read from the engine that trained, in every mode:
 *   a trainer task (local, mirrored, ps_async, ps_sync, ps_sync_in_graph's
 *   master, multi_worker_mirrored; your own model or a built-in one): every
 *   field but `eval` (set, with `evaluated`, on the chief with option
 *   eval_at_end) and the sync figures (set, with `sync`, on a ps_sync
 *   trainer and the in-graph master). `steps` is the
 *   global step the run ended at (an async worker: the last it saw);
 *   final_loss, train_seconds, examples_per_sec and steady_cpu_seconds are
 *   this task's (examples_per_sec: the examples its steps took, all
 *   workers' batches in multi_worker_mirrored, this trainer's own through a
 *   ps); load_seconds is the trainer's setup before its session opened
 *   (loading a built-in problem; 0 for local and mirrored sessions on your
 *   dtrain_data, which you loaded).
 *   a "ps_server" task: only blas_core; every figure 0 (the trainers hold them).
 *   an "evaluator" task: `steps`, the global step of the last checkpoint it
 *   evaluated, and `eval` that evaluation (`evaluated` 1); 0 if it evaluated
 *   none. Every other figure 0.
 * DTRAIN_USAGE for a NULL s or out. */
DTRAIN_API dtrain_status dtrain_session_result(const dtrain_session *s, dtrain_result *out, dtrain_error *err);

/* ======================================================================
 * Built-in models and problems (what `dtrain train` trains)
 * ====================================================================== */

/*
 * A model from dtrain's zoo (mlp, lenet, cnn: layer graphs of this API;
 * transformer, for text problems) or a Keras JSON, with t2t's named
 * hyper-parameter sets and "k=v,..." overrides, trained on a built-in
 * problem by name: fashion_mnist, mnist, synthetic, image_folder (a folder
 * per class), csv, and the text problems (docs/DATA.md). Every task loads
 * its own data (shard) as it starts, so nothing is loaded by
 * dtrain_session_new_builtin itself.
 *
 * Such a session runs with dtrain_session_run only (the built-in roles turn
 * their own loops; dtrain_session_step, evaluate, gradients, save, restore
 * and the variable calls answer DTRAIN_USAGE); its modes are the table's at
 * dtrain_session_new ("ps_sync_in_graph" included: hparams sync=1 selects
 * it as option sync does).
 * A message about one field of dtrain_builtin starts with the field's name
 * and a colon ("hparams: ...", "keras_model: ...") unless it names the
 * model or the problem.
 */
typedef struct dtrain_builtin {
	const char *model;            /* "mlp", "lenet", "cnn", "transformer" ("cnn") */
	const char *hparams_set;      /* NULL or "": the model's default set ("<model>_base") */
	const char *hparams;          /* t2t's overrides, "learning_rate=0.05,batch_size=128"; NULL: none */
	const char *keras_model;      /* a Keras model JSON trained in place of `model`; NULL: none */
	const char *problem;          /* ("fashion_mnist") */
	const char *data_dir;         /* NULL or "": the problem's default */
	/* image_folder and csv */
	double validation_split;      /* held out (seeded) as the test split; 0: none */
	int image_height, image_width;/* image_folder: resize to; 0: the Keras model's input, else 256 */
	int channels;                 /* image_folder: 1, 3 or 4; 0: the Keras model's, else 3 */
	int crop_to_aspect_ratio;     /* image_folder: crop the centre to the output's aspect first */
	int random_flip;              /* image_folder: mirror training images left-right at random */
	double random_crop;           /* image_folder: train on a random crop of this fraction of each side */
	int skip_bad_images;          /* image_folder: leave corrupt images out (1) or fail (0) */
	int data_threads;             /* image_folder: decoding threads per pipeline (2) */
	const char *label_column;     /* csv: the label column's name (< 128 bytes) */
	const char *vocab_file;       /* a t2t data dir's text problem: its SubwordTextEncoder file
				       * (< 1024 bytes); NULL or "": found by t2t's names */
} dtrain_builtin;

/* Fills *b with the defaults above (NULL b: nothing). */
DTRAIN_API void dtrain_builtin_init(dtrain_builtin *b);

/* A session training b's model on b's problem as this task of `cluster`
 * (NULL: local; borrowed). The hyper-parameters are resolved here, t2t's
 * way: the set gives the values, `model` the model, `hparams` overrides.
 * DTRAIN_USAGE: a NULL b or out, an unknown model (naming the nearest and
 * the known ones), a bad override or set, a bad image size, channel count
 * or label column; DTRAIN_IO/DTRAIN_DATA: an unreadable Keras JSON; the
 * cluster's failures as at dtrain_session_new. *out NULL on failure. */
DTRAIN_API dtrain_status dtrain_session_new_builtin(const dtrain_builtin *b, const dtrain_cluster *cluster,
						    dtrain_session **out, dtrain_error *err);

/* The resolved hyper-parameters a session trains with, read-only; the
 * strings live as long as the session. NULL s: zeros and "". */
typedef struct dtrain_hparams_info {
	const char *model;            /* "cnn", "keras", "transformer", "model" (a custom or graph model) */
	int batch_size;               /* per trainer (tokens for text problems) */
	const char *optimizer;
	double learning_rate;
	const char *lr_schedule;
	int sync;                     /* the hparam sync=1 (t2t's), the same as the option */
} dtrain_hparams_info;
DTRAIN_API void dtrain_session_hparams(const dtrain_session *s, dtrain_hparams_info *out);

/* The run files t2t's trainer writes into output_dir before training:
 * hparams.json (the resolved hyper-parameters) and, when flags_text is not
 * NULL, flags.txt holding it (the command line, one flag per line). Only
 * the chief or a process alone writes them; elsewhere, and with no
 * output_dir, a no-op returning DTRAIN_OK. DTRAIN_IO naming the file. */
DTRAIN_API dtrain_status dtrain_session_write_run_files(dtrain_session *s, const char *flags_text,
							dtrain_error *err);

/* ======================================================================
 * Cluster secrets (docs/SECURITY.md)
 * ====================================================================== */

typedef enum dtrain_wire_security {
	DTRAIN_WIRE_AUTH,             /* every frame authenticated */
	DTRAIN_WIRE_ENCRYPT,          /* authenticated and encrypted */
} dtrain_wire_security;

/* Every connection this task makes or accepts is authenticated with the
 * cluster's shared secret, read now from secret_file (mode 0600, made by
 * `dtrain secret new PATH`); set it before the session starts, on every
 * task, with the same file. A session without one talks in the clear:
 * keep such clusters on loopback or a trusted network. DTRAIN_USAGE: NULL
 * s or path, a mode outside the enum, after the start; DTRAIN_CONFIG: an
 * unreadable, malformed or group/world-readable file. */
DTRAIN_API dtrain_status dtrain_session_set_secret(dtrain_session *s, const char *secret_file,
						   dtrain_wire_security mode, dtrain_error *err);

#ifdef __cplusplus
}
#endif

#endif
