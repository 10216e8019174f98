/*
 * custom.h — custom models: the caller's variables and a callback that
 * computes the loss and its gradients (any model written in C, llm.c
 * style, trained by every strategy like a built-in).
 *
 * The caller declares named variables (name, shape, initializer) and the
 * model's inputs and targets. The variables live in the model's one flat
 * parameter buffer and one flat gradient buffer, in declaration order, as a
 * graph's do (nn/model.h), so all-reduce, parameter servers and checkpoints
 * work on them unchanged. Each step calls
 *
 *     st = fn(user, &ctx, err)
 *
 * with ctx.batch the batch (inputs in declaration order, targets),
 * ctx.params[i] the view of variable i (row-major, its shape) and, when
 * ctx.training, ctx.grads[i] its gradient view, all zero on entry: the
 * callback adds d(loss)/d(variable) into them. It must set ctx.loss (the
 * mean loss of the batch) and may set ctx.correct and ctx.counted for an
 * accuracy. When evaluating (ctx.training 0) ctx.grads is NULL and ctx.rng
 * too. The callback must not write the parameters, keep the pointers past
 * its return, or call back into the model.
 *
 * A status other than DT_OK from the callback is returned as it is, with
 * its message prefixed by the model's name. A loss or gradient that is NaN
 * or infinite is reported as DT_RUNTIME naming the variable and the index,
 * and the gradient buffer is zeroed: the step must not be applied.
 */
#ifndef DT_NN_CUSTOM_H
#define DT_NN_CUSTOM_H

#include "base/err.h"
#include "base/rng.h"
#include "nn/model.h"

#define DT_CUSTOM_MAX_VARS 1024

struct dt_custom_var {
	const char *name;         /* "w1": 1 to 63 characters, unique */
	int ndim;                 /* 1 .. 4 */
	int64_t shape[DT_MAX_DIMS];
	const char *init;         /* dt_init_parse name; NULL: glorot_uniform */
	int decay;                /* weight decay applies (a kernel) */
};

/* One input or the targets, per example. */
struct dt_custom_tensor {
	const char *name;
	enum dt_dtype dtype;
	int ndim;                 /* 1 .. 3 */
	int shape[3];
};

struct dt_custom_ctx {
	const struct dt_model_batch *batch;
	int training;
	struct dt_rng *rng;       /* training only: the step's random stream (dropout) */
	int num_vars;
	float *const *params;     /* (num_vars) views */
	float *const *grads;      /* (num_vars) views, zeroed; NULL when evaluating */
	float loss;               /* out: mean loss */
	int correct, counted;     /* out, optional: accuracy */
};

typedef enum dt_status (*dt_custom_fn)(void *user, struct dt_custom_ctx *ctx, struct dt_err *err);

struct dt_custom_def {
	const char *name;
	int num_vars;
	const struct dt_custom_var *vars;
	int num_inputs;
	const struct dt_custom_tensor *inputs;
	struct dt_custom_tensor targets;
	dt_custom_fn fn;
	void *user;               /* borrowed; passed to fn */
};

/* Checks def (names, shapes, initializers, a callback) and makes the
 * model; anything wrong → DT_CONFIG naming it. def is copied. */
enum dt_status dt_model_new_custom(const struct dt_custom_def *def, int max_batch, struct dt_model **out,
				   struct dt_err *err) DT_MUST_CHECK;

#endif
