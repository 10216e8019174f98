/*
 * optimizer.h — SGD, momentum, Adam and Adagrad over flat buffers, and
 * learning-rate schedules.
 *
 * An optimizer owns its slots (momentum, Adam's m and v, Adagrad's
 * accumulator) as one flat allocation laid out slot-major:
 * slot k of parameter element i is slots[k * count + i]. That lets a
 * parameter server apply updates to any byte range of the flat parameter
 * buffer (dt_optimizer_apply with offset/count) and lets checkpoints save
 * slots per variable.
 *
 * Update rules follow TensorFlow's (tf.keras.optimizers / tf.train):
 *   sgd:      p -= lr * g
 *   momentum: a = m*a + g;           p -= lr * a
 *   adam:     m = b1*m + (1-b1)*g;   v = b2*v + (1-b2)*g²;
 *             lr_t = lr * sqrt(1-b2^t)/(1-b1^t);  p -= lr_t * m / (sqrt(v) + eps)
 *   adagrad:  acc += g²;             p -= lr * g / (sqrt(acc) + eps)
 */
#ifndef DT_NN_OPTIMIZER_H
#define DT_NN_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "nn/hparams.h"
#include "nn/model.h"

enum dt_optimizer_kind { DT_OPTIM_SGD, DT_OPTIM_MOMENTUM, DT_OPTIM_ADAM, DT_OPTIM_ADAGRAD };

struct dt_optimizer {
	enum dt_optimizer_kind kind;
	double momentum, beta1, beta2, epsilon, initial_accumulator_value;
	size_t count;   /* parameters covered */
	int num_slots;  /* 0 sgd, 1 momentum/adagrad, 2 adam */
	float *slots;   /* (num_slots, count), owned */
};

/* Names of the optimizers ("sgd", "momentum", "adam", "adagrad"). */
const char *const *dt_optimizer_names(size_t *count);

/* Checks a learning-rate schedule: dtrain's "constant" or
 * "linear_warmup_decay" (on learning_rate), or a '*'-product of t2t's factors
 * (constant, linear_warmup, linear_decay, cosdecay, single_cycle_cos_decay,
 * rsqrt_decay, rsqrt_normalized_decay, exp_decay, rsqrt_hidden_size; blanks
 * around names ignored). An unknown factor is DT_USAGE whose message starts
 * with `what`, names the factor and lists the valid ones. */
enum dt_status dt_lr_schedule_check(const char *schedule, const char *what, struct dt_err *err) DT_MUST_CHECK;

/* Sets up an optimizer for `count` parameters from the hparams. */
enum dt_status dt_optimizer_init(struct dt_optimizer *opt, const struct dt_hparams *hp, size_t count,
				 struct dt_err *err) DT_MUST_CHECK;
void dt_optimizer_release(struct dt_optimizer *opt);

/* Applies one update to params[offset .. offset+n) using grads[0 .. n)
 * (grads is indexed from the start of the range). `step` is the 1-based
 * number of this update, used by Adam's bias correction. */
void dt_optimizer_apply(struct dt_optimizer *opt, float *params, const float *grads, size_t offset, size_t n,
			float lr, int64_t step);

/* As dt_optimizer_apply, for the mean of `summed` gradients given as their
 * sum (sync training and all-reduce): the rule sees grad_sum[i] / summed,
 * computed as grad_sum[i] * (1.0f / summed) inside the update's own pass, so
 * averaging costs no extra sweep over the buffer. grad_sum is not changed. */
void dt_optimizer_apply_mean(struct dt_optimizer *opt, float *params, const float *grad_sum, int summed, size_t offset,
			     size_t n, float lr, int64_t step);

/* Moves the n values of x toward the mean of `summed` values given as their
 * sum: x -= (x - value_sum / summed) * (1 - decay), TensorFlow's
 * assign_moving_average (the non-trainable DT_VAR_MOVING_AVERAGE variables of
 * nn/model.h: batch norm's moving statistics on a ps). */
void dt_moving_average_apply(float *x, const float *value_sum, int summed, size_t n, float decay);

/* The whole flat buffer of a model's variables by their kinds (nn/model.h):
 * the trainable ones as dt_optimizer_apply_mean of the sum of `summed`
 * gradients, the moving averages toward the mean of `summed` batch values
 * (dt_moving_average_apply), the frozen ones not at all. For a master that
 * applies what its replicas sent (t2t's in-graph sync, train/sync_roles.c). */
void dt_optimizer_apply_vars(struct dt_optimizer *opt, const struct dt_variable *vars, int nvars, float *params,
			     const float *sum, int summed, float lr, int64_t step);

/* The gradient of parameters [offset, offset + n) (n <= DT_OPTIMIZER_CHUNK)
 * written into out; 0, or non-zero to stop the update there (a gradient
 * that is not finite: the caller's check, made before the rule sees it). */
typedef int (*dt_grad_make_fn)(void *arg, float *out, size_t offset, size_t n);

/* The floats of the gradient dt_optimizer_apply_made makes at a time. */
#define DT_OPTIMIZER_CHUNK 2048

/* As dt_optimizer_apply, with the gradient made a chunk at a time by `make`
 * into a buffer of the apply's own, just before the rule reads it there:
 * a gradient computed from other buffers (--deterministic's ordered mean
 * of its micro-batches, train/fixed_point.h) is then never written to
 * memory and read back. The rule is this file's one, so every element's
 * update has the same bits as dt_optimizer_apply of the made gradient.
 * `make` runs in the caller's floating-point mode (not the rule's flush of
 * denormals), chunk by chunk in index order. Returns offset + n when every
 * chunk was applied, else the offset of the chunk `make` refused: the
 * chunks before it ARE applied (variables and slots), that one and those
 * after it are not — the caller must treat the parameters as torn. */
size_t dt_optimizer_apply_made(struct dt_optimizer *opt, float *params, size_t offset, size_t n, float lr,
			       int64_t step, dt_grad_make_fn make, void *arg);

/*
 * t2t's clip_grad_norm, with tf.clip_by_global_norm's rule: the gradient g
 * is scaled by clip / max(||g||, clip), ||g|| the L2 norm over every
 * variable together. `grads` (n) holds the sum of `summed` gradients (1: the
 * gradient itself; all-reduce and in-graph sync hold their sum), so the
 * gradient applied is grads / summed and its norm ||grads|| / summed. Above
 * the threshold every element is multiplied in place by clip / norm; at or
 * below it, with clip <= 0 (off) or a norm that is not finite (the step's
 * divergence check reports that), grads stay exactly as they are. The sum
 * of squares is taken in double, in index order: equal buffers give equal
 * bits, so workers holding the same all-reduced sum clip it identically.
 * Rows a step does not touch hold zeros, so over a row-sparse table the
 * norm is that of the touched rows. Returns the norm before clipping.
 */
double dt_clip_by_global_norm(float *grads, size_t n, int summed, double clip);

/* The learning rate at `step` (0-based) of `total_steps` under hp's schedule
 * (a checked one; docs/MODELS.md gives each factor's formula). total_steps is
 * t2t's train_steps for linear_decay. */
float dt_lr_at(const struct dt_hparams *hp, int64_t step, int64_t total_steps);

#endif
