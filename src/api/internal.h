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

struct dtrain_model {
	struct dt_err first; /* the first builder error (sticky), DT_OK when none */
	int frozen;          /* a session uses it */
	int ninputs;
	struct dt__api_input inputs[DT_API_MAX_INPUTS];
	int nvars, vars_cap;
	struct dt__api_var *vars;
	size_t num_params;
	dtrain_forward_backward_fn fb; /* custom model */
	void *user;
	int layers;          /* layer-graph calls made (a graph, not a custom model) */
};

/* The input called `name`, or -1. */
int dt__api_input_index(const dtrain_model *m, const char *name);
/* Fills params with every variable's initializer, drawn from
 * dt_rng_derive(seed, "init/<variable>") so adding one leaves the others. */
void dt__api_init_params(const dtrain_model *m, float *params, uint64_t seed);

/* One forward/backward (training) or forward (evaluation) of a model on a
 * batch: what the session's loop calls, whatever kind the model is. */
struct dtrain_step {
	const dtrain_model *model;
	int batch_size;
	int training;
	void *const *inputs;  /* [model->ninputs], (batch, shape...) */
	const float *params;
	float *grads;         /* NULL in evaluation */
	double loss;
	int loss_set;
	int64_t correct;      /* -1: not reported */
};

/* Runs the model on one batch: fills step->loss (and correct), and in
 * training the gradients (zeroed first). DT_RUNTIME (or the callback's
 * status) when the callback fails, DT_DATA when the loss or a gradient is
 * not finite, naming the variable. */
enum dt_status dt__api_model_run(struct dtrain_step *step, struct dt_err *err);

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

/* The validated cluster a session uses: cl's own, or `local` filled as the
 * one-process cluster (cl NULL, or built in code with no task). NULL with
 * DT_USAGE in e when cl has tasks but no task set. */
const struct dt_cluster *dt__api_cluster(const dtrain_cluster *cl, struct dt_cluster *local, struct dt_err *e);

#endif
