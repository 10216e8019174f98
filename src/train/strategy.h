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
 *                         applies the mean; figures summed over the ranks;
 *   ps async              train/ps_roles.c: the gradient (weight decay
 *                         included) pushed and the variables pulled in one
 *                         round, the global step the ps's; a lost ps
 *                         recovered (train/ps_recovery.h);
 *   ps sync, in-graph     train/sync_roles.c: the push waits at the ps's
 *                         barrier; t2t's master sums its std servers'
 *                         gradients and applies the mean itself.
 * The roles that do not train (std server, evaluator) are not strategies.
 *
 * Calls, all on the session's thread, in this order:
 *   connect  (optional) join the cluster; fills `info` (the defaults are one
 *            process's: chief, shard 0 of 1, global batch = batch size);
 *   start    the variables (and optimizer slots) initialized or restored
 *            (dt__session_restore_or_init is the one restore), and where the
 *            run continues: step and input position;
 *   compute  (optional; default: dt__session_compute, the next batch and
 *            dt_mirrored_step) forward/backward into the model's gradient buffer;
 *   apply    the gradient reduced and applied at learning rate `lr` (the
 *            schedule's at the global step before it), or pushed: the
 *            global step it reaches;
 *   reduce   (optional; NULL: one task) sums `n` floats over every task, for
 *            the log window and the sharded evaluation: every task calls it at
 *            the same steps;
 *   reduce_i64 (optional; NULL: one task) sums `n` int64s over every task
 *            (--deterministic's exponents and fixed-point gradients);
 *   allgather (optional; needed by a strategy of more than one task for
 *            --deterministic steps of at most DT_ORDERED_MAX_TERMS
 *            micro-batches) gives every task every task's block of `block`
 *            bytes (block r at r * block for the task of rank r, which holds
 *            that task's slices of a --deterministic step): the raw
 *            gradients of the ordered sum (train/fixed_point.h). The last
 *            float of each block is the strategy's (an elastic ring's join
 *            flag rides there): the caller keeps nothing in it;
 *   before_eval (optional) before a mid-run (--eval_every) evaluation;
 *   finish   (optional) after the last step, before the final evaluation:
 *            leaving the cluster in order (the ps chief's final checkpoint).
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
struct dt_loop;
struct dt_ckpt_kv;

enum dt_eval_where {
	DT_EVAL_INLINE,            /* between two steps, on this thread (summed with `reduce`) */
	DT_EVAL_COPY_WAIT,         /* a copy on a thread while `wait` keeps the connections alive */
	DT_EVAL_COPY_ASYNC,        /* a copy on a thread while training goes on; nobody waits on it */
};

/* This task's place in the run, as connect sees it. */
struct dt_strategy_info {
	int chief;                 /* saves, writes summaries, logs evaluations, evaluates at the end */
	int shard_index, shard_count; /* this task's data shard; also its test shard with `reduce` */
	int global_batch;          /* examples per step in examples/s (summaries too, without summary_batch) */
	int summary_batch;         /* examples per global step in the summaries; 0: global_batch */
	const char *task_name;     /* "worker:1", named in divergence errors; NULL alone */
	const char *examples_note; /* after "examples/s" in progress lines, e.g. " (all workers)"; "" */
	int log_last_step;         /* a progress line at the last step even with log_every 0 */
	int dropout_per_resume;    /* a resumed run's dropout stream derives from its step (not restored) */
	int save_rng;              /* checkpoints carry the dropout stream (and restore it) */
	int64_t eval_every;        /* --eval_every that every task follows (connect may agree on one) */
	enum dt_eval_where eval_where; /* of --eval_every's evaluations */
	int shared_step;           /* the cluster counts the steps (ps): lines "step L (global G/T)", the
				      log cadence on this task's steps, no line forced at the last */
	int files;                 /* the chief's checkpoints are the session's (0: the strategy's own, ps) */
	int slices;                /* every task takes a step at a time together (all-reduce): the input is
				      read as one global stream in global batches of batch size x
				      shard_count, this task slice shard_index of each (data/pipeline.h's
				      slices), so its position is global and a checkpoint resumes at any
				      worker count, each example once per epoch across the resize */
	int fixed_slices;          /* --deterministic: slices of every global step (the full ring's
				      workers); 0: shard_count. A task of a smaller ring computes
				      several (session.h's dt__session_deal) */
	float lr_scale;            /* the schedule's rate times this (t2t's async sqrt rule); 1 */
	struct dt_loop *loop;      /* woken when a background evaluation ends; may be NULL */
	const struct dt_ckpt_kv *ckpt_meta; /* extra metadata in the session's checkpoints */
	int num_ckpt_meta;
};

/* Where start leaves the run. */
struct dt_strategy_start {
	int64_t step;              /* the global step training continues after */
	int64_t epoch, offset;     /* the input position of the next batch */
	int64_t batches;           /* > 0: the position instead as whole batches in (of the global batch with
				      `slices`): a synchronous step reads one batch per trainer, so a position
				      with no checkpoint of that step is derived from the step */
	int global;                /* (epoch, offset) is a global position (the checkpoint says so); 0: one
				      shard's, from a checkpoint written before global positions */
	const struct dt_units_layout *units; /* set: the input reads units of this layout (data/units.h) as
				      trainer shard_index, from (epoch, offset = units taken) */
	int has_rng;               /* `rng` is the restored dropout stream */
	struct dt_rng rng;
};

/* One step's figures on this task's batch. */
struct dt_step_figures {
	float loss;                /* mean over the batch */
	int correct, examples;
	/* t2t's text metrics (a padded sequence loss; 0 otherwise): correct is
	 * then out of `counted` non-pad tokens, seqs_correct of the `examples`
	 * sequences are right in every token, nll_sum the unsmoothed loss summed */
	int counted, seqs_correct;
	double nll_sum;
	/* a sequence batch: its length L (the batch is examples x L positions,
	 * padding included); 0 otherwise. The benchmarks' work measure. */
	int length;
	/* translation (inputs and targets): t2t's approx_bleu_score of the
	 * batch in bleu_sum, bleu_batches 1 (nn/bleu.h); 0 otherwise */
	double bleu_sum;
	int bleu_batches;
	/* clip_grad_norm on, clipped in compute (ps trainers): the gradient's
	 * global norm before clipping; 0 otherwise */
	double grad_norm;
	/* the part of loss that is Keras's regularization losses (nn/regularize.h) */
	float reg_loss;
};

/* What apply did. */
struct dt_strategy_step {
	int64_t step;              /* in: s's step + 1; out: the global step now */
	int taken;                 /* in: 1; out: 0 when the step was not counted (a recovery redoes it, or the
				      run turned out to be over: dt__session_end_run) */
	double grad_norm;          /* out: clip_grad_norm on, clipped in apply: the norm before clipping */
};

struct dt_strategy {
	const char *name;
	enum dt_status (*connect)(struct dt_session *s, void *self, struct dt_strategy_info *info,
				  struct dt_err *err);
	enum dt_status (*start)(struct dt_session *s, void *self, struct dt_strategy_start *out, struct dt_err *err);
	enum dt_status (*compute)(struct dt_session *s, void *self, struct dt_step_figures *out, struct dt_err *err);
	enum dt_status (*apply)(struct dt_session *s, void *self, const struct dt_step_figures *fig, float lr,
				struct dt_strategy_step *io, struct dt_err *err);
	enum dt_status (*reduce)(struct dt_session *s, void *self, float *v, size_t n, const char *what,
				 struct dt_err *err);
	enum dt_status (*reduce_i64)(struct dt_session *s, void *self, int64_t *v, size_t n, const char *what,
				     struct dt_err *err);
	enum dt_status (*allgather)(struct dt_session *s, void *self, void *buf, size_t block, const char *what,
				    struct dt_err *err);
	/* Nonzero: with --deterministic (train config micro_batch > 0) its apply
	 * sums and applies through dt__session_apply_fixed; the session refuses
	 * --deterministic with a strategy that does not. */
	int fixed_point;
	/* Nonzero: its apply leaves the updated variables in this task's model
	 * and then runs the model's constraints (nn/regularize.h's
	 * dt_model_apply_constraints); the session refuses a model with
	 * constraints under a strategy that does not (the parameter servers
	 * update variables this task only copies). */
	int constraints;
	/* Where its apply (or compute) clips the gradient to hp.clip_grad_norm
	 * (dt_train_clip_grads), said in the log at the start when that is on:
	 * the end of "the gradient is scaled to global norm <= C ...". */
	const char *clip_where;
	/* (optional) While the session waits on a background evaluation: at
	 * most about a second of keeping the task's connections alive. */
	enum dt_status (*wait)(struct dt_session *s, void *self, struct dt_err *err);
	/* (optional) Text after "examples/s" in a progress line; `elapsed_s` of training so far. */
	void (*note)(struct dt_session *s, void *self, double elapsed_s, char *buf, size_t cap);
	/* (optional) Before an --eval_every evaluation on this task, after the
	 * step's apply: brings the model's copy of the variables up to that
	 * step where the strategy leaves some behind (ps: the tables moved by
	 * rows, of which the trainer holds only its batches' rows, pulled
	 * whole). A failure ends the session. */
	enum dt_status (*before_eval)(struct dt_session *s, void *self, struct dt_err *err);
	/* (optional) *step in: the global step reached; out: the run's last. */
	enum dt_status (*finish)(struct dt_session *s, void *self, int64_t *step, struct dt_err *err);
};

#endif
