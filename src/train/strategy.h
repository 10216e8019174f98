/*
 * strategy.h — what one distribution mode supplies to the training session
 * (train/session.h): only what differs between modes. The session owns the
 * data input, the model (borrowed from its maker), the optimizer, the
 * checkpoint saver, the summaries, the progress lines, the evaluation and the
 * hooks, and turns the one loop; a strategy says how this task connects,
 * where its variables start from, how a gradient becomes an update, and how
 * figures are summed across tasks.
 *
 * Per mode (one file each, beside its role entry point):
 *   local                 train/local.c: one process, the batch split over
 *                         in-process replicas on threads when replicas > 1
 *                         (distribute/mirrored.h); apply = weight decay +
 *                         optimizer on the whole buffer;
 *   multi-worker mirrored train/allreduce_role.c: ring all-reduce of the
 *                         gradient in buckets overlapped with the backward
 *                         pass, rank 0 restores and broadcasts, every rank
 *                         applies the mean; figures summed over the ranks.
 *
 * Calls, all on the session's thread, in this order:
 *   connect  (optional) join the cluster; fills `info` (the defaults are one
 *            process's: chief, shard 0 of 1, global batch = batch size);
 *   start    the variables (and optimizer slots) initialized or restored
 *            (dt__session_restore_or_init is the one restore), and where the
 *            run continues: step and input position;
 *   compute  (optional; default: dt_mirrored_step) forward/backward of one
 *            batch into the model's gradient buffer;
 *   apply    the gradient of step `step` (1-based, the step it completes)
 *            reduced and applied at learning rate `lr`;
 *   reduce   (optional; NULL: one task) sums `n` floats over every task, for
 *            the log window and the sharded evaluation: every task calls it at
 *            the same steps;
 *   finish   (optional) after the last step, before the final evaluation:
 *            leaving the cluster in order.
 * A failing call ends the session with its status; its message names the
 * peer and the step where it has them.
 */
#ifndef DT_TRAIN_STRATEGY_H
#define DT_TRAIN_STRATEGY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/rng.h"
#include "data/pipeline.h"

struct dt_session;

/* This task's place in the run, as connect sees it. */
struct dt_strategy_info {
	int chief;                 /* saves, writes summaries, logs evaluations, evaluates at the end */
	int shard_index, shard_count; /* this task's data shard; also its test shard with `reduce` */
	int global_batch;          /* examples per global step (summaries, examples/s) */
	const char *task_name;     /* "worker:1", named in divergence errors; NULL alone */
	const char *examples_note; /* after "examples/s" in progress lines, e.g. " (all workers)"; "" */
	int log_last_step;         /* a progress line at the last step even with log_every 0 */
	int dropout_per_resume;    /* a resumed run's dropout stream derives from its step (not restored) */
	int save_rng;              /* checkpoints carry the dropout stream (and restore it) */
	int64_t eval_every;        /* --eval_every that every task follows (connect may agree on one) */
};

/* Where start leaves the run. */
struct dt_strategy_start {
	int64_t step;              /* the global step training continues after */
	int64_t epoch, offset;     /* the input position of the next batch */
	int has_rng;               /* `rng` is the restored dropout stream */
	struct dt_rng rng;
};

struct dt_strategy {
	const char *name;
	enum dt_status (*connect)(struct dt_session *s, void *self, struct dt_strategy_info *info,
				  struct dt_err *err);
	enum dt_status (*start)(struct dt_session *s, void *self, struct dt_strategy_start *out, struct dt_err *err);
	float (*compute)(struct dt_session *s, void *self, const struct dt_batch *b, struct dt_rng *rng, int *correct);
	enum dt_status (*apply)(struct dt_session *s, void *self, int64_t step, float lr, struct dt_err *err);
	enum dt_status (*reduce)(struct dt_session *s, void *self, float *v, size_t n, const char *what,
				 struct dt_err *err);
	enum dt_status (*finish)(struct dt_session *s, void *self, struct dt_err *err);
};

#endif
