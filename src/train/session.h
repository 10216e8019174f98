/*
 * session.h — the training engine: one session, one loop, every mode.
 *
 * A session owns what a training task runs on: the data input
 * (train/input.h), the optimizer, the checkpoint saver, the TensorBoard
 * summaries, the progress lines, the evaluation (--eval_every, at the end,
 * train_and_evaluate's after each save) and the per-step hook. The model is
 * the caller's (borrowed), so any model that fills nn/model.h's buffers
 * trains; the strategy (train/strategy.h) supplies only what the mode
 * changes. Each step:
 *
 *   batch ← input; loss ← compute (forward/backward); divergence check;
 *   apply (reduce and update) at the schedule's learning rate; hook;
 *   summaries; progress line every log_every steps (and at the last);
 *   checkpoint when the saver is due (and at the last step), then
 *   train_and_evaluate's evaluation; --eval_every's evaluation when the step
 *   crosses a multiple of it (not at the last: the final one follows).
 *
 * Only the chief (strategy info) saves, writes summaries and logs
 * evaluations; with a `reduce` every task evaluates its shard of the test
 * split and the figures are summed.
 *
 * Use: dt_session_new (connects, restores or initializes), then either
 * dt_session_run, or dt_session_step while !dt_session_should_stop and then
 * dt_session_finish. dt_session_result reads the figures at any time.
 * Statuses come with a struct dt_err; nothing here prints a final error or
 * exits. One thread drives a session.
 */
#ifndef DT_TRAIN_SESSION_H
#define DT_TRAIN_SESSION_H

#include <stdint.h>

#include "base/err.h"
#include "data/problem.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "train/input.h"
#include "train/local.h"
#include "train/strategy.h"

struct dt_session_config {
	const struct dt_train_config *train; /* borrowed; must outlive the session */
	const struct dt_strategy *strategy;  /* the mode */
	void *strategy_arg;                  /* its state, passed as `self`; owned by the caller */
	struct dt_model *model;              /* borrowed: the session trains its buffers */
	struct dt_input *input;              /* owned by the session from dt_session_new on, even on failure;
						NULL for a strategy that computes elsewhere (in-graph master) */
	struct dt_dataset *test;             /* borrowed; the test split, or NULL / empty: none loaded */
	const struct dt_dataset *train_split; /* borrowed; the train split (a text problem's in-process
						replicas are built for its vocabularies); may be NULL */
	int height, width, channels;         /* one example's shape, and the classes: in-process */
	int num_classes;                     /* replicas (replicas > 1) are built like the model */
};

/* After each step: the global step it completed, its loss, its examples. */
typedef void (*dt_session_hook_fn)(void *arg, int64_t step, float loss, int examples);

struct dt_session;

/* Builds the optimizer, connects (strategy), restores or initializes the
 * variables, opens the summaries and starts the input at the resume point.
 * *out: dt_session_free (NULL on failure). */
enum dt_status dt_session_new(const struct dt_session_config *cfg, struct dt_session **out,
			      struct dt_err *err) DT_MUST_CHECK;

/* True when the global step has reached train_steps. */
int dt_session_should_stop(const struct dt_session *s);
/* One step of the loop above. DT_USAGE when it should stop. */
enum dt_status dt_session_step(struct dt_session *s, struct dt_err *err) DT_MUST_CHECK;
/* After the last step: leaves the cluster (strategy) and, with eval_at_end,
 * the chief evaluates (reusing train_and_evaluate's evaluation of that step). */
enum dt_status dt_session_finish(struct dt_session *s, struct dt_err *err) DT_MUST_CHECK;
/* Steps until should_stop, then finish. */
enum dt_status dt_session_run(struct dt_session *s, struct dt_err *err) DT_MUST_CHECK;

/* Evaluates the current variables on the test split (every task its shard,
 * summed, with a `reduce`: then every task must call it at the same step). */
enum dt_status dt_session_evaluate(struct dt_session *s, struct dt_eval_result *out,
				   struct dt_err *err) DT_MUST_CHECK;
/* Saves a checkpoint of the current step now (the chief with an output dir;
 * others: DT_OK, nothing). */
enum dt_status dt_session_save(struct dt_session *s, struct dt_err *err) DT_MUST_CHECK;
/* Writes user scalars at the current step to the summaries (the chief's;
 * nothing without them). A failed write is a warning, as for the built-in ones. */
void dt_session_scalars(struct dt_session *s, const char *const *tags, const float *values, int n);
void dt_session_set_hook(struct dt_session *s, dt_session_hook_fn fn, void *arg);

int64_t dt_session_global_step(const struct dt_session *s);
/* Figures so far (all of them after dt_session_finish). */
void dt_session_result(const struct dt_session *s, struct dt_train_result *res);
void dt_session_free(struct dt_session *s);

/* ---- for strategies (train/strategy.h) ---- */

struct dt_model *dt__session_model(struct dt_session *s);
struct dt_optimizer *dt__session_optimizer(struct dt_session *s);
const struct dt_train_config *dt__session_config(const struct dt_session *s);
struct dt_dataset *dt__session_test(struct dt_session *s);
/* The session's summary writer (the chief's TensorBoard events), NULL before
 * the strategy has started or without --output_dir. */
struct dt_summary *dt__session_summary(struct dt_session *s);
/* The chief's one restore: with an output dir, sets up the saver and restores
 * the newest checkpoint that verifies into the model and optimizer (step,
 * input position, dropout stream into *out); without one, or with none found,
 * initializes the variables from the seed (*out zero). */
enum dt_status dt__session_restore_or_init(struct dt_session *s, struct dt_strategy_start *out,
					   struct dt_err *err) DT_MUST_CHECK;
/* An elastic ring's new coordinator takes the chief's duties mid-run (its
 * chief was lost, train/allreduce_elastic.h): with an output dir, a saver
 * that counts from the directory's newest checkpoint (never a lower step;
 * a dead writer's "*.tmp.*" files removed) and a new TensorBoard events
 * file; the evaluations the chief logs, and the test split for the one at
 * the end. A restarted chief that rejoined a running ring gets the saver
 * (its summaries and test split come as at any start). */
enum dt_status dt__session_take_chief(struct dt_session *s, struct dt_err *err) DT_MUST_CHECK;
/* The coordinator hands the duties back (the restarted chief rejoined and
 * coordinates again): no more saves, its events file closed. */
void dt__session_drop_chief(struct dt_session *s);
/* The default compute: the next batch, forward/backward into the model's
 * gradient buffer (the in-process replicas' sum when replicas > 1) with the
 * session's dropout stream (dt__session_compute_batch). A strategy may call it from a helper thread while
 * the session's thread waits in its apply. */
enum dt_status dt__session_compute(struct dt_session *s, struct dt_step_figures *out,
				   struct dt_err *err) DT_MUST_CHECK;
/* The forward/backward of the session's compute on batch `b` (a dataset's
 * x and y, or b->general through dt_model_step): into the model's gradient
 * buffer, the in-process replicas' sum when replicas > 1. With `on_ready`
 * (one replica only), it is told as each range of the gradient is final
 * (nn/model.h), for a reduction overlapped with the backward pass. */
enum dt_status dt__session_compute_batch(struct dt_session *s, const struct dt_batch *b, dt_grads_ready_fn on_ready,
					 void *arg, struct dt_step_figures *out, struct dt_err *err) DT_MUST_CHECK;
/* The gradient a ps trainer pushes, for the ps to apply: push_begin keeps,
 * before the step's forward pass, the moving-average variables as pulled;
 * push_end, after the backward pass, adds weight decay (when `decay`),
 * clips to hp.clip_grad_norm (out->grad_norm: the norm before), and then
 * writes the moving-average variables' batch values where their gradients
 * would be (nn/model.h's dt_model_moving_average_values): the ps moves its
 * copy toward them (distribute/ps_sync.h's dt_ps_shard_apply). Nothing
 * after a loss that is not finite. */
void dt__session_push_begin(struct dt_session *s);
void dt__session_push_end(struct dt_session *s, int decay, struct dt_step_figures *out);
/* push_begin, dt__session_compute, push_end with weight decay: the whole
 * gradient of a step for the strategies that push it to a ps. */
enum dt_status dt__session_compute_decayed(struct dt_session *s, struct dt_step_figures *out,
					   struct dt_err *err) DT_MUST_CHECK;
/* The next batch of the input (for a strategy's own compute). */
enum dt_status dt__session_next_batch(struct dt_session *s, const struct dt_batch **out,
				      struct dt_err *err) DT_MUST_CHECK;
struct dt_rng *dt__session_rng(struct dt_session *s);
/* --deterministic's apply (train/fixed_point.h): the micro-batch gradients
 * of the last compute summed by the method K (the global step's
 * micro-batches) picks: at most DT_ORDERED_MAX_TERMS, every task's raw
 * gradients all-gathered through the strategy's allgather (when there are
 * others) and summed by each in micro-batch order; more, turned into int64
 * with the scale every task agrees on (their exponents summed through the
 * strategy's reduce_i64, one row per task) and summed (reduce_i64). Their
 * mean back in the model's gradient buffer, weight decay and the optimizer
 * at `lr`, step `step`. The same bits on every task and at any task or
 * replica count. */
enum dt_status dt__session_apply_fixed(struct dt_session *s, float lr, int64_t step, struct dt_err *err) DT_MUST_CHECK;
/* --deterministic in a ring of `count` of the info's fixed_slices workers
 * (an elastic ring that lost some): this task computes slices index,
 * index + count, ... of every global step (its micro-batches' streams and
 * exponent rows those slices'), so the step is the same micro-batches
 * whoever computes them and the sum the same bits; the input goes to the
 * global position (epoch, offset). */
enum dt_status dt__session_deal(struct dt_session *s, int index, int count, int64_t epoch, int64_t offset,
				struct dt_err *err) DT_MUST_CHECK;
/* Repositions the input mid-run, as `start` would have placed it (at's
 * epoch and offset when global, else `batches` whole batches — of the
 * global batch when the input reads slices — in), for a strategy whose run
 * went back to a restored step (a ps restored in place, train/sync_roles.h). */
enum dt_status dt__session_seek(struct dt_session *s, const struct dt_strategy_start *at,
				struct dt_err *err) DT_MUST_CHECK;
/* The position of the input's next batch; returns whether it is global
 * (strategy.h's `slices`, or one shard of 1). */
int dt__session_input_position(const struct dt_session *s, int64_t *epoch, int64_t *offset);
/* Units per epoch of the session's input (data/units.h); 0 when it cannot read units. */
int64_t dt__session_units_per_epoch(const struct dt_session *s);
/* The strategy found the run over (the ps closed it): should_stop from now on. */
void dt__session_end_run(struct dt_session *s);
/* Steps trained by this session, and the time spent computing, applying
 * (reducing included) and in all (evaluations left out). */
void dt__session_step_times(const struct dt_session *s, int64_t *steps, int64_t *compute_ns, int64_t *apply_ns,
			    int64_t *total_ns);

#endif
