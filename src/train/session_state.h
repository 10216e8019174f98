/*
 * session_state.h — the training session's state, shared by the two files
 * of the engine and by nothing else: session.c (the loop: input, restore,
 * save, summaries, progress, evaluation, timing) and session_deal.c
 * (--deterministic: micro-batches dealt over the tasks, their gradients
 * summed in micro-batch order or in 64-bit fixed point). Strategies and roles see a session only
 * through session.h's functions; include this only from those two files.
 *
 * Ownership: the session owns its input, optimizer, saver, summary and
 * event writers, background evaluation, in-process replicas and the
 * --deterministic buffers (dt__session_free_fixed); it borrows its config,
 * strategy, model, test split and train split.
 */
#ifndef DT_TRAIN_SESSION_STATE_H
#define DT_TRAIN_SESSION_STATE_H

#include <stdint.h>

#include "base/rng.h"
#include "nn/optimizer.h"
#include "train/checkpoint.h"
#include "train/common.h"
#include "train/events.h"
#include "train/session.h"

struct dt_mirrored;
struct dt_summary;

/* Progress since the last progress line. */
struct window {
	double loss_sum, reg_sum; /* reg_sum: its regularization part */
	int64_t correct, examples, steps;
	int64_t counted, seqs_correct; /* text: tokens counted, sequences all right */
	double nll_sum;
	double bleu_sum; /* translation: approx_bleu_score summed over bleu_batches batches */
	int64_t bleu_batches;
	double norm_sum, norm_max; /* clip_grad_norm on: the gradient's norms before clipping */
	int64_t clipped;           /* ... and the steps whose norm was over the threshold */
	int64_t start_ns;
};

struct dt_session {
	const struct dt_train_config *cfg;
	const struct dt_strategy *strategy;
	void *self;
	struct dt_strategy_info info;
	struct dt_model *model;       /* borrowed */
	struct dt_input *input;       /* owned */
	struct dt_dataset *test;      /* borrowed; may be empty */
	const struct dt_dataset *train_split; /* borrowed; may be NULL */
	int shape[4];                 /* height, width, channels, classes */
	struct dt_optimizer opt;
	struct dt_mirrored *mirror;   /* in-process replicas; NULL with one */
	struct dt_rng dropout_rng;

	/* The chief's files. */
	int saving;
	int global_position;          /* the input's position is global (slices, or one shard of 1) */
	struct dt_saver saver;
	char *hparams_json;
	struct dt_summary *summary;
	struct dt_events *eval_events; /* train_and_evaluate's eval/; NULL otherwise */

	dt_session_hook_fn hook;
	void *hook_arg;

	struct dt_train_bg_eval *bg;  /* the evaluation copy (eval_where != DT_EVAL_INLINE) */
	int ended;                    /* the strategy found the run over */
	int64_t step0, step;          /* the step the run continued after; the global step now */
	int64_t local_steps;          /* steps this session took */
	int64_t seq_examples;         /* text problems: sequences in this task's batches after its first step */
	int64_t evaluated_at;         /* the step of the last --eval_every evaluation (or step0) */
	int64_t last_eval_step;       /* train_and_evaluate's last evaluation; -1: none */
	struct dt_eval_result last_eval;
	struct window w;
	double fixed_norm; /* --deterministic with clip_grad_norm: the last apply's norm before clipping */
	float *pushed_before; /* (dt_model_sync_mean_floats) the moving averages before a step pushed to a ps */
	int loss_logged;              /* a window's loss reached res.final_loss */
	int64_t train_start_ns, after_first_ns, end_ns;
	int64_t after_first_cpu_ns, end_cpu_ns; /* this process's CPU time, all threads */
	int64_t compute_ns, apply_ns, eval_ns;
	int finished;
	int64_t torn_step;            /* a --deterministic step whose fused update failed part way (its
				       * variables neither that step's nor the one before: no save, no
				       * step follows); 0 none */
	struct dt_train_result res;

	/* --deterministic (micro_batch > 0): this step's micro-batch gradients. */
	int micro_local;              /* micro-batches per slice (batch_size / micro_batch) */
	int fixed_slices;             /* slices of each global step: the full ring's worker count */
	int deal_first, deal_stride, ndeal; /* this task's slices: deal_first + i * deal_stride, i < ndeal */
	int micro_base, micro_final;  /* keep_micro: the slice's first index; whether its last may stay put */
	int ordered;                  /* K = fixed_slices * micro_local <= DT_ORDERED_MAX_TERMS: the gradients
				       * summed in micro-batch order, not in fixed point (fixed_point.h) */
	int gather;                   /* the raw gradients are all-gathered (ordered, and more than one task) */
	int gather_block;             /* gathering: the slots of each task's block, ceil(fixed_slices / tasks)
				       * * micro_local (a task dealt fewer slices leaves the last unused) */
	size_t micro_slots;           /* buffers in micro_grads (and entries of the arrays below) */
	float *micro_grads;           /* (micro_slots, micro_stride): each one's own gradient buffer; gathering,
				       * task r's block of gather_block from slot r * gather_block, its d-th
				       * slice's micro-batches from d * micro_local in it */
	size_t micro_stride;          /* num_params + 1 rounded up to 16 floats (each buffer 64-byte aligned) */
	float **micro_into;           /* (micro_slots): the buffers, which the model computes into
				       * (dt_model_set_grads) */
	const float **micro_src;      /* (micro_slots): where each one's gradient lies (a copy or a model's own) */
	const float **micro_var;      /* (micro_slots): scratch, micro_src + a variable's offset */
	int *micro_exp;               /* (micro_slots, num_variables): dt_fixed_exponent of each */
	float *micro_losses;          /* (ndeal * micro_local) */
	int *micro_correct;           /* (ndeal * micro_local) */
	int64_t *fixed_sum;           /* (num_params) */
	int64_t *fixed_exp;           /* (fixed_slices, num_variables) */
	int *fixed_scale;             /* (num_variables) */
};

/* ---- --deterministic (session_deal.c) ---- */

/* At the session's start (train_config micro_batch > 0): checks that the
 * strategy and the input can run it and micro_batch divides the batch,
 * allocates the buffers of the micro-batches and places the input on this
 * task's slices of the global batch (dt__session_deal), at `at`. */
enum dt_status dt__session_start_fixed(struct dt_session *s, const struct dt_strategy_start *at,
				       struct dt_err *err) DT_MUST_CHECK;
/* The compute of a --deterministic step: every micro-batch's gradient
 * apart, for each slice this task is dealt (their sum is
 * dt__session_apply_fixed's); *out the step's mean loss and counts. */
enum dt_status dt__session_compute_micro(struct dt_session *s, struct dt_step_figures *out,
					 struct dt_err *err) DT_MUST_CHECK;
/* Frees the --deterministic buffers (none allocated: nothing). */
void dt__session_free_fixed(struct dt_session *s);

#endif
