/*
 * api/internal.h — what the files of src/api share: the public handles'
 * definitions over the internal types. Nothing here is exported; the
 * public functions are declared (and marked DTRAIN_API) in include/dtrain.h.
 */
#ifndef DT_API_INTERNAL_H
#define DT_API_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain.h"
#include "base/err.h"
#include "cluster/cluster.h"
#include "data/problem.h"
#include "net/auth.h"
#include "train/allreduce_role.h"
#include "train/evaluator.h"
#include "train/local.h"
#include "train/ps_roles.h"
#include "train/sync_roles.h"

struct dtrain_error {
	struct dt_err e;
};

/* &err->e, or NULL for a NULL err: what internal functions take. */
struct dt_err *dt__api_err(dtrain_error *err);

struct dtrain_cluster {
	struct dt_cluster cl;
	int ready;     /* validated: usable by a session */
	int from_code; /* built with dtrain_cluster_new/add_task/set_task */
};

/* ---- models (model.c) ---- */

#define DT_API_NAME_MAX 64
#define DT_API_MAX_INPUTS 16
#define DT_API_MAX_DIMS 4
/* Elements of one input per example, of one variable, of all parameters:
 * bounds that keep user shapes from overflowing sizes (2^31 floats = 8 GiB). */
#define DT_API_MAX_ELEMS ((int64_t)1 << 31)

struct dt__api_input {
	char name[DT_API_NAME_MAX];
	dtrain_dtype dtype;
	int ndim;
	int64_t shape[DT_API_MAX_DIMS];
	int64_t per_example; /* product of shape (1 for a scalar) */
};

struct dt__api_var {
	char name[DT_API_NAME_MAX];
	int ndim;
	int64_t shape[DT_API_MAX_DIMS];
	int64_t count;
	size_t offset; /* in the flat parameter and gradient buffers */
	dtrain_init init;
	float scale;
};

/* One builder call of a layer graph, kept to replay it into the graph a
 * session compiles (builder.c): the labels input of the loss is not a graph
 * input there, and only the loss call says which input that is. */
enum dt__api_op_kind {
	OP_INPUT, OP_DENSE, OP_CONV2D, OP_MAXPOOL, OP_AVGPOOL, OP_FLATTEN, OP_RESHAPE, OP_ACTIVATE, OP_DROPOUT,
	OP_EMBEDDING, OP_LAYER_NORM, OP_ADD, OP_CONCAT,
};
#define DT_API_OP_MAX_IN 8
struct dt__api_node {
	enum dt__api_op_kind kind;
	char name[32];                 /* the graph node's ("dense_1"; an input's own name) */
	int input;                     /* OP_INPUT: index in inputs[], else -1 */
	int in[DT_API_OP_MAX_IN], nin; /* the nodes it reads */
	int iarg[6];                   /* units, filters, kh, kw, stride, padding / size, stride / vocab, dim */
	int shape_n, shape[4];         /* OP_RESHAPE */
	float farg;                    /* dropout rate, layer norm epsilon */
	int act;                       /* enum dt_act */
};

struct dt_graph;

struct dtrain_model {
	struct dt_err first; /* the first builder error (sticky), DT_OK when none */
	int frozen;          /* a session uses it */
	int ninputs;
	struct dt__api_input inputs[DT_API_MAX_INPUTS];
	/* custom model */
	int nvars, vars_cap;
	struct dt__api_var *vars;
	size_t num_params;
	dtrain_forward_backward_fn fb;
	void *user;
	/* layer graph */
	int nnodes, nodes_cap;
	struct dt__api_node *nodes;
	struct dt_graph *eager; /* every call applied as it comes, for its shape errors */
	int loss_kind;          /* enum dt_loss; -1: no loss yet */
	int loss_output, loss_target; /* nodes */
	int layers;             /* layer calls made (a graph, not a custom model) */
	/* variables of a compiled layer graph, for dtrain_model_variable_* */
	struct dt_model *probe;
	/* what compiled models point at (custom adapters), freed with the model */
	void **kept;
	int nkept;
};

/* builder.c: checks a layer graph (compiling it into m->probe) and compiles it. */
enum dt_status dt__api_check_graph(const dtrain_model *m, struct dt_err *err);
enum dt_status dt__api_compile_graph(const dtrain_model *m, const char *name, int max_batch, struct dt_model **out,
				     int feeds[DT_API_MAX_INPUTS], int *target_feed, struct dt_err *err);
/* For the models defined with the public builder inside dtrain (src/models/):
 * a layer graph's first builder error, or its check's, else the graph
 * compiled for max_batch examples and named `name` (its name in logs and
 * messages; the session's compile names it "model"). */
enum dt_status dt__api_compile_named(const dtrain_model *m, const char *name, int max_batch, struct dt_model **out,
				     struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt__api_compile_custom(const dtrain_model *m, int max_batch, struct dt_model **out,
				      int feeds[DT_API_MAX_INPUTS], int *target_feed, struct dt_err *err);
/* The node of a new input (its index in m->inputs): -1 after recording
 * an error. */
int dt__api_input_node(dtrain_model *m, int input);
/* Keeps p until the model is freed. */
void dt__api_model_keep(const dtrain_model *m, void *p);
/* model.c's builder bookkeeping, shared with builder.c: records the first
 * error (returns -1) and checks that a builder call may proceed. */
int dt__api_fail(dtrain_model *m, enum dt_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int dt__api_usable(dtrain_model *m, const char *fn);

/* The input called `name`, or -1. */
int dt__api_input_index(const dtrain_model *m, const char *name);

/* What a custom model's callback sees (model.c adapts nn/custom.h's
 * context to it). */
struct dtrain_step {
	const dtrain_model *model;
	int batch_size;
	int training;
	const void *inputs[DT_API_MAX_INPUTS]; /* by public input index, (batch, shape...) */
	float *const *params; /* (nvars) views */
	float *const *grads;  /* (nvars) views; NULL in evaluation */
	double loss;
	int loss_set;
	int64_t correct;      /* -1: not reported */
};

/* Compiles the model into an nn/ model for up to max_batch examples (a
 * layer graph through nn/graph.h, a custom model through nn/custom.h), and
 * tells which public input feeds each of its inputs and its targets:
 * feeds[i] for dt_model_input(i), *target_feed for the targets. */
struct dt_model;
enum dt_status dt__api_compile(const dtrain_model *m, int max_batch, struct dt_model **out,
			       int feeds[DT_API_MAX_INPUTS], int *target_feed, struct dt_err *err) DT_MUST_CHECK;

/* ---- data (data.c) ---- */

struct dtrain_batch {
	const dtrain_model *model;
	int shard, num_shards, size;
	int64_t step, epoch;
	void *const *inputs; /* [model->ninputs] */
};

/* A reader of one data source for one consumer: a training stream (this
 * shard, shuffled per epoch, forever) or one evaluation pass. */
struct dt__api_reader;
enum dt_status dt__api_reader_new(dtrain_data *d, const dtrain_model *m, int shard, int num_shards, int batch,
				  uint64_t seed, int single_pass, struct dt__api_reader **out, struct dt_err *err);
/* Fills the next batch into bufs (each sized for `batch` examples of its
 * input); *size gets the examples (0 at the end of a single pass). */
enum dt_status dt__api_reader_next(struct dt__api_reader *r, int64_t step, void *const *bufs, int *size,
				   struct dt_err *err);
void dt__api_reader_free(struct dt__api_reader *r);
/* Training streams: where the next batch comes from, moving there (as the
 * session's checkpoints record it), and examples per epoch of the shard. */
void dt__api_reader_position(const struct dt__api_reader *r, int64_t *epoch, int64_t *offset);
void dt__api_reader_seek(struct dt__api_reader *r, int64_t epoch, int64_t offset);
int64_t dt__api_reader_shard_size(const struct dt__api_reader *r);

/* ---- the distributed trainers (roles.c) ---- */

struct dt_session;
struct dt_train_config;
enum dt__api_role_kind { DT_API_ROLE_PS_ASYNC, DT_API_ROLE_PS_SYNC, DT_API_ROLE_RING, DT_API_ROLE_IN_GRAPH };
struct dt__api_role;
/* A request, run on the role's thread with its open engine session. */
typedef enum dt_status (*dt__api_role_fn)(struct dt_session *s, void *arg, struct dt_err *err);
/* Starts the role of `kind` (the async or sync ps trainer, a ring worker,
 * t2t's in-graph master: train/ps_roles.h, sync_roles.h, allreduce_role.h) for tc (borrowed, as cl and its options pc and
 * ac, until dt__api_role_free;
 * tc->source's drive must call dt__api_role_drive with *out, which is set
 * before the thread starts) on its thread, and
 * waits until its session is open: connected, initialized or restored.
 * The role's failure before that (a peer that never came, a refused
 * hello) is returned, the thread joined. */
enum dt_status dt__api_role_start(enum dt__api_role_kind kind, const struct dt_train_config *tc,
				  const struct dt_cluster *cl, const struct dt_ps_run_config *pc,
				  const struct dt_allreduce_run_config *ac, struct dt__api_role **out,
				  struct dt_err *err) DT_MUST_CHECK;
/* The train config's drive (on the role's thread): serves requests until
 * one fails or is the last. */
enum dt_status dt__api_role_drive(struct dt__api_role *r, struct dt_session *s, struct dt_err *err);
/* Runs fn(session, arg) on the role's thread; with `last` (fn finishes the
 * session), also waits for the role to leave the cluster and end. A failed
 * request ends the role too. DT_USAGE once the role has ended. */
enum dt_status dt__api_role_call(struct dt__api_role *r, dt__api_role_fn fn, void *arg, int last,
				 struct dt_err *err) DT_MUST_CHECK;
/* As of the last request: the session's should_stop (1 once ended) and global step. */
int dt__api_role_should_stop(struct dt__api_role *r);
int64_t dt__api_role_global_step(struct dt__api_role *r);
/* The engine's figures of the role's run (train/local.h's dt_train_result,
 * as dt__role_train and dt_train_run fill them), once it has ended (after
 * a `last` request); before that only `steps`, the global step. Returns 1
 * when *stats holds a sync trainer's barrier figures (a ps_sync run that
 * succeeded). */
int dt__api_role_result(struct dt__api_role *r, struct dt_train_result *res, struct dt_sync_stats *stats);
/* Ends a role still open (as a failure: its peers see it leave), joins; accepts NULL. */
void dt__api_role_free(struct dt__api_role *r);

/* ---- the engine input (input.c) ---- */

struct dt_input;
struct dt_model_batch;
/* The training input over `data` for `model` (compiled from pm; feeds and
 * target_feed as dt__api_compile gave them, borrowed): batches of `batch`,
 * shuffled per epoch from seed. *out: dt_input_free. */
enum dt_status dt__api_input_new(dtrain_data *data, const dtrain_model *pm, const struct dt_model *model,
				 const int *feeds, int target_feed, int batch, uint64_t seed, struct dt_input **out,
				 struct dt_err *err) DT_MUST_CHECK;
/* Buffers for `batch` examples of every public input (DT_NOMEM when too
 * big), and their release (accepts NULLs). */
enum dt_status dt__api_alloc_bufs(const dtrain_model *pm, int batch, void **bufs, struct dt_err *err) DT_MUST_CHECK;
void dt__api_free_bufs(void **bufs);
/* The general batch of `size` examples over those buffers. */
void dt__api_make_batch(struct dt_model_batch *mb, const struct dt_model *model, const int *feeds, int target_feed,
			void *const *bufs, int size);

/* The validated cluster a session uses: cl's own, or `local` filled as the
 * one-process cluster (cl NULL, or built in code with no task). NULL with
 * DT_USAGE in e when cl has tasks but no task set. */
const struct dt_cluster *dt__api_cluster(const dtrain_cluster *cl, struct dt_cluster *local, struct dt_err *e);

/* ---- the session (session.c; options.c, builtin.c) ---- */

enum dt__api_mode { M_LOCAL, M_MIRRORED, M_PS_ASYNC, M_PS_SYNC, M_RING, M_PS_SERVER, M_EVALUATOR, M_PS_SYNC_IN_GRAPH };
enum dt__api_state { S_NEW, S_STARTED, S_CLOSED };

struct dtrain_session {
	dtrain_model *pm;       /* NULL for a built-in session */
	dtrain_data *train, *eval;
	const struct dt_cluster *cl;
	struct dt_cluster local_cl;
	enum dt__api_state state;
	struct dt_train_config tc;
	char output_dir[1024];
	/* dtrain_session_set's warm_start_from and warm_start_vars (train/warm_start.h); the
	 * same size as output_dir, which bounds every string option */
	char warm_start_from[1024], warm_start_vars[1024];
	/* evaluate-only runs: per-example predictions go here ("": none) */
	char predictions_file[1024];
	int sync;
	int replicas;           /* in-process replicas (tc.replicas once started) */
	/* the roles' own options (dtrain_session_options); .train and .cluster set as a role starts */
	struct dt_ps_run_config pc;
	struct dt_allreduce_run_config ac;
	struct dt_auth auth;    /* tc.auth points here once a secret is set */
	/* the evaluator */
	int evaluator;          /* this process evaluates checkpoints whatever its task */
	enum dt_split eval_split;
	int eval_once;
	enum dt_eval_mode eval_walk;
	double eval_timeout_s;  /* an evaluator's wait for a new checkpoint */
	dtrain_eval_fn eval_fn;
	void *eval_user;
	/* a built-in session (builtin.c): the zoo's model on a problem by name */
	int builtin;
	char problem[64], data_dir[1024];
	struct dt_data_options data;
	/* the figures of dtrain_session_run */
	struct dt_train_result res;
	struct dt_sync_stats sync_stats;
	int has_res, has_sync, evaluated;
	/* started */
	struct dt_model *model; /* the trainer's; kept after the run (evaluate, read_variable) */
	int feeds[DT_API_MAX_INPUTS], target_feed;
	struct dt_train_source src;
	struct dt_session *eng; /* local and mirrored: the engine session, on this thread */
	struct dt__api_role *role; /* the distributed trainers: the role on its thread */
	char mode_name[32];
	double last_loss;       /* of the last step (the engine's hook) */
};

/* The mode the session runs in (dtrain.h's table), from its cluster and options. */
enum dt__api_mode dt__api_mode(const dtrain_session *s);
/* The session's defaults that do not depend on its model (session.c). */
void dt__api_session_defaults(dtrain_session *s);
/* A built-in session's whole run (builtin.c), in dtrain_session_run. */
enum dt_status dt__api_run_builtin(dtrain_session *s, struct dt_err *e) DT_MUST_CHECK;
/* An evaluator's report, turned into dtrain_eval for the caller's callback (options.c). */
void dt__api_report_eval(void *ctx, enum dt_split split, int64_t step, const struct dt_eval_result *r);
/* An evaluator's figures for dtrain_session_result (options.c): the global
 * step of the last checkpoint it evaluated and that evaluation (none: all 0). */
void dt__api_evaluator_result(dtrain_session *s, const struct dt_eval_outcome *o);

/* A public handle over a cluster the caller resolved itself (cluster/
 * resolve.h from its own option table: `dtrain train`'s t2t flags), moved
 * into it (*cl is left empty; released on failure). Not exported. */
dtrain_status dt__api_cluster_adopt(struct dt_cluster *cl, dtrain_cluster **out, dtrain_error *err);

#endif
