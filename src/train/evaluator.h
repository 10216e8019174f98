/*
 * evaluator.h — TensorFlow's evaluator task: evaluate the checkpoints the
 * chief writes, as they appear, and log the figures for TensorBoard.
 *
 * The evaluator connects to nobody. It builds the model from the same flags
 * as the trainers (model, hparams, problem), loads the split it evaluates,
 * and polls the chief's output dir (the `checkpoint` state file,
 * train/checkpoint.h) every DT_EVAL_POLL_SECONDS:
 *
 *   - mode `latest` (the default; TensorFlow's checkpoints_iterator) jumps
 *     to the newest checkpoint, so it may skip some when evaluation is
 *     slower than checkpointing; mode `every` evaluates each checkpoint the
 *     state file lists, oldest first (those deleted by keep_checkpoint_max
 *     before their turn are skipped, with a warning);
 *   - each evaluated checkpoint: one report (the callback; `dtrain train`
 *     prints "eval (test split, N examples) at global step S: accuracy = A,
 *     loss = L") and one events record with `accuracy` and `loss` at the
 *     checkpoint's global step in <output_dir>/eval/ (eval_train/ for the
 *     train split: Estimator's eval_dir);
 *   - a checkpoint that vanishes or does not verify under it (the chief
 *     deleting old ones, a half-written or damaged file) is logged and
 *     retried at the next poll, DT_EVAL_LOAD_ATTEMPTS times, then skipped;
 *     it never ends the evaluator. A checkpoint of a different model ends
 *     it (DT_CKPT, exit 4: retrying cannot help);
 *   - it returns DT_OK after evaluating a checkpoint whose global step is
 *     >= train_steps (TensorFlow's stop condition), or after the first
 *     evaluation when `once` is set, and DT_TIMEOUT (exit 3) when no new
 *     checkpoint has appeared for `timeout_s` seconds (counted from the
 *     start and from each evaluation). A state file that cannot be parsed
 *     is retried too (it is replaced atomically); if it is still bad at the
 *     deadline, the error says so.
 *
 * Evaluation itself is dt_train_evaluate (train/common.h): every example of
 * the split once, in order, in batches of the hparams' batch_size, dropout
 * off — the same computation as the chief's own final evaluation, so both
 * report the same accuracy for the same checkpoint.
 */
#ifndef DT_TRAIN_EVALUATOR_H
#define DT_TRAIN_EVALUATOR_H

#include <stdint.h>
#include "base/err.h"
#include "data/problem.h"
#include "nn/hparams.h"
#include "nn/model.h"
#include "train/events.h"
#include "train/local.h"

#define DT_EVAL_POLL_SECONDS 0.5
#define DT_EVAL_LOAD_ATTEMPTS 3

enum dt_eval_mode {
	DT_EVAL_LATEST, /* jump to the newest checkpoint */
	DT_EVAL_EVERY,  /* each checkpoint in order */
};

struct dt_eval_config {
	const char *problem, *data_dir; /* as for training */
	const struct dt_data_options *data; /* as for training; NULL: defaults */
	struct dt_hparams hp;           /* the trainers' resolved hparams */
	uint64_t seed;                  /* only the synthetic problem uses it */
	int threads;                    /* OpenBLAS threads */
	const char *output_dir;         /* the chief's output dir; required */
	enum dt_split split;            /* DT_SPLIT_TEST (continuous_eval) or TRAIN */
	enum dt_eval_mode mode;
	int once;                       /* evaluate the newest checkpoint once (t2t's `evaluate`) */
	int64_t train_steps;            /* done after evaluating a step >= this */
	double timeout_s;               /* > 0: give up after this long with nothing new */
	/* A caller's model and evaluation (train/local.h; the public API's),
	 * borrowed, in place of problem and hp.model: the model is made by its
	 * make_model, each checkpoint evaluated by its evaluate. NULL: none. */
	const struct dt_train_source *source;
	/* Where hp.model is built from (dt_train_config.models), borrowed. */
	const struct dt_model_zoo *models;
	/* An evaluation-only run (`once`): when output_dir has no checkpoint
	 * (or is NULL or ""), the model starts from warm_start_from
	 * (train/warm_start.h; only the variables warm_start_vars matches, the
	 * others from their initializers and `seed`) and is evaluated once at
	 * the source's global step (a dtrain checkpoint's, else 0). NULL or "": none. */
	const char *warm_start_from, *warm_start_vars;
	/* `once` only: each example's prediction goes here (dt_eval_predictions);
	 * NULL or "": none. Not with a caller's `source`. */
	const char *predictions_file;
	/* Called after each evaluation (may be NULL). */
	void (*report)(void *ctx, enum dt_split split, int64_t step, const struct dt_eval_result *r);
	void *report_ctx;
};

struct dt_eval_outcome {
	int64_t evaluated;              /* checkpoints evaluated */
	int64_t skipped;                /* checkpoints given up on (deleted, unreadable) */
	int64_t last_step;              /* global step of the last one evaluated; -1: none */
	struct dt_eval_result last;     /* its figures */
};

/* Runs the evaluator until it is done (see above). `out` may be NULL. */
enum dt_status dt_evaluator_run(const struct dt_eval_config *cfg, struct dt_eval_outcome *out,
				struct dt_err *err) DT_MUST_CHECK;

/* dt_train_evaluate's evaluation (the same figures, to the bit) that also
 * writes one JSON line per example to `path` (eval_predict.c): index, label,
 * predicted class, logits and their softmax. */
enum dt_status dt_eval_predictions(struct dt_model *model, const struct dt_dataset *ds, const char *path,
				   struct dt_eval_result *out, struct dt_err *err) DT_MUST_CHECK;

/* "eval" for the test split, "eval_train" for the train split. */
const char *dt_eval_dir_name(enum dt_split split);
/* "test" or "train". */
const char *dt_split_name(enum dt_split split);
/* Writes `accuracy` and `loss` at `step` to an eval events file, and for a
 * text problem accuracy_per_sequence, neg_log_perplexity, (translation)
 * approx_bleu_score and, with `problem` (NULL or "": none), t2t's own tags
 * of its metrics (train/summary.h, dt_summary_t2t_tag); a failure is logged
 * as a warning (the evaluation is still reported). */
void dt_eval_write_summary(struct dt_events *w, int64_t step, const char *problem, const struct dt_eval_result *r);
/* Opens a new events file in <output_dir>/eval (or eval_train). */
enum dt_status dt_eval_open_events(const char *output_dir, enum dt_split split, struct dt_events **out,
				   struct dt_err *err) DT_MUST_CHECK;

/* train_and_evaluate in one process: evaluates the model in memory on
 * `data` (dt_train_evaluate), logs the figures and writes them to `w` at
 * `step` (dt_eval_write_summary's, `problem` its). `out` may be NULL. */
enum dt_status dt_eval_in_process(struct dt_events *w, struct dt_model *model, const struct dt_dataset *data,
				  const char *problem, int64_t step, struct dt_eval_result *out,
				  struct dt_err *err) DT_MUST_CHECK;

#endif
