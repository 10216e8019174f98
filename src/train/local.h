/*
 * local.h — training in one process, and the configuration every mode shares.
 *
 * dt_train_local() loads the problem, builds the model from the hparams,
 * initializes it from the seed, and runs `train_steps` steps of the session
 * (train/session.h) with the local strategy: pipeline → forward/backward →
 * optimizer, logging progress (step, loss,
 * batch accuracy, learning rate, examples/s, ETA). It evaluates on the test
 * split every `eval_every` steps (if > 0) and once at the end, and returns
 * the figures in a `struct dt_train_result`.
 *
 * With an output_dir it resumes from the directory's newest checkpoint that
 * verifies (train/checkpoint.h: parameters, optimizer slots, step, dropout
 * RNG, input position), saves on the saver's cadence and at the last step,
 * and, when the checkpoint is already at train_steps, trains nothing (it
 * still evaluates if asked). 100 steps plus 100 resumed give the same bytes
 * as 200 in one go.
 *
 * Determinism: the same config (seed, threads, hparams) gives bit-identical
 * losses and accuracy; every random draw comes from a generator derived
 * from the seed (init per variable, dropout, shuffle).
 */
#ifndef DT_TRAIN_LOCAL_H
#define DT_TRAIN_LOCAL_H

#include <stdint.h>
#include "base/err.h"
#include "nn/hparams.h"

struct dt_auth;
struct dt_data_options;
struct dt_model;
struct dt_model_zoo;
struct dt_input;
struct dt_session;
struct dt_eval_result;

/*
 * A caller's model and data in place of the problem and the model zoo
 * (the public API's, src/api/): every role builds from it — the trainer
 * trains `model`, the in-process replicas, a ps (the variables it holds)
 * and the evaluation copies are made by `make_model`, the training input
 * by `make_input`, evaluations go through `evaluate`. NULL in
 * dt_train_config: the problem by name and hp.model from the config's zoo.
 * Every function may be called from the role's thread; `evaluate` also
 * from an evaluation thread (--eval_every's copy) while training goes on.
 */
struct dt_train_source {
	/* The trainer's model (borrowed, not initialized: the strategy
	 * initializes or restores it); it stays the caller's after the run,
	 * holding the trained variables. */
	struct dt_model *model;
	/* Another instance of it (same variables, activations for up to
	 * max_batch examples); *out owned by the caller of make_model. */
	enum dt_status (*make_model)(void *arg, int max_batch, struct dt_model **out, struct dt_err *err);
	/* The training input for `model`: batches of batch_size as general
	 * batches (data/pipeline.h's dt_batch `general`), shuffled from seed;
	 * *out owned by the caller (the session takes it). */
	enum dt_status (*make_input)(void *arg, const struct dt_model *model, int batch_size, uint64_t seed,
				     struct dt_input **out, struct dt_err *err);
	/* Evaluates `m` (a model from make_model, or `model`) on the caller's
	 * evaluation data, dropout off. */
	enum dt_status (*evaluate)(void *arg, struct dt_model *m, struct dt_eval_result *out, struct dt_err *err);
	/* (optional) Drives the trainer's open session in place of
	 * dt_session_run (the API's step-by-step loop): steps it and finishes
	 * it (dt_session_finish), or returns a failure. */
	enum dt_status (*drive)(void *arg, struct dt_session *s, struct dt_err *err);
	void *arg;
};

struct dt_train_config {
	const char *problem;      /* "fashion_mnist", "mnist", "synthetic" */
	const char *data_dir;     /* NULL or "": the problem's default */
	const struct dt_data_options *data; /* image_folder and csv flags (data/problem.h); NULL: defaults */
	struct dt_hparams hp;     /* model, batch size, optimizer, schedule */
	int64_t train_steps;      /* > 0 */
	int64_t eval_every;       /* evaluate every N steps; 0: only at the end */
	int eval_at_end;          /* evaluate on the test split after training */
	int64_t log_every;        /* progress line every N steps; 0: none */
	uint64_t seed;
	int threads;              /* OpenBLAS threads (the process's one pool) */
	int prefetch;             /* prepare the next batch on a background thread */
	int replicas;             /* mirrored replicas on threads splitting each batch (distribute/mirrored.h); <= 1: one */
	/* --deterministic: micro-batches of this many examples are the unit of
	 * work and their gradients are summed in 64-bit fixed point, or in
	 * micro-batch order for at most three a global step
	 * (train/fixed_point.h), so the run's bits do not depend on how many
	 * workers or replicas share the global batch; 0: off. */
	int micro_batch;

	/* Checkpoints and summaries (train/checkpoint.h). */
	const char *output_dir;   /* NULL or "": no checkpoints, no summaries */
	int64_t save_checkpoints_steps; /* save every N steps; 0: by time */
	double save_checkpoints_secs;   /* save every S seconds; 0: by steps (both 0: 600 s) */
	int keep_checkpoint_max;  /* newest checkpoints kept; 0: keep all */
	int64_t save_summary_steps; /* TensorBoard scalars every N steps; 0: none */
	int eval_after_save;      /* train_and_evaluate: evaluate the test split after each save, into eval/ */
	/* --warm_start_from / --warm_start_vars (train/warm_start.h): where the
	 * variables start when the run has no checkpoint of its own in
	 * output_dir (a restore wins); NULL or "": from their initializers. */
	const char *warm_start_from;
	const char *warm_start_vars;

	/* A cluster task's secret (net/auth.h), borrowed; NULL: none (loopback or --insecure). */
	const struct dt_auth *auth;

	/* A caller's model and data (above), borrowed; NULL: `problem` and hp.model. */
	const struct dt_train_source *source;
	/* Where hp.model is built from (nn/model.h; the CLI's: models/builtin.h),
	 * borrowed; NULL: no model by name (only a source, a Keras JSON or a text
	 * problem's transformer). */
	const struct dt_model_zoo *models;
};

struct dt_eval_result {
	double accuracy;          /* fraction correct on the split (text: per non-pad token, t2t's `accuracy`) */
	double loss;              /* mean softmax cross-entropy (text: per token, label-smoothed) */
	int64_t examples;
	/* text problems (t2t's metrics): `text` set, the fraction of sequences
	 * whose every token is right, and minus the mean unsmoothed
	 * cross-entropy per token */
	int text;
	double accuracy_per_sequence, neg_log_perplexity;
	/* translation (inputs and targets): `bleu` set and t2t's
	 * approx_bleu_score, the mean over the eval batches (nn/bleu.h) */
	int bleu;
	double approx_bleu_score;
};

struct dt_train_result {
	int64_t steps;
	double final_loss;        /* mean training loss over the last log window */
	double train_seconds;     /* training steps only, evaluation excluded */
	double examples_per_sec;  /* after the first (warm-up) step */
	double steady_cpu_seconds;/* the process's CPU time over those steps (evaluations included) */
	/* text problems, over the same steps (this process's batches): non-pad
	 * target tokens, positions B * L summed (padding included) and B * L * L
	 * summed (the attention's query-key pairs); bench/transformer counts
	 * the work from them */
	int64_t steady_tokens, steady_positions, steady_attention_pairs;
	double first_step_seconds;/* process start to the end of the first step */
	double load_seconds;      /* loading the data */
	struct dt_eval_result eval; /* the final evaluation (if eval_at_end) */
	int64_t num_params;
};

/* Sensible defaults (cnn on fashion_mnist, 2000 steps, seed 1, 1 thread). */
void dt_train_config_defaults(struct dt_train_config *cfg);

/* Trains on one process through the session (train/session.h) with the
 * local strategy (train/strategy.h), which dt_strategy_local is. */
struct dt_strategy;
extern const struct dt_strategy dt_strategy_local;

enum dt_status dt_train_local(const struct dt_train_config *cfg, struct dt_train_result *res,
			      struct dt_err *err) DT_MUST_CHECK;

#endif
