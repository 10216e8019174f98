/*
 * common.h — pieces every training loop shares (local, parameter-server,
 * synchronous and all-reduce roles).
 */
#ifndef DT_TRAIN_COMMON_H
#define DT_TRAIN_COMMON_H

#include <stddef.h>
#include "base/err.h"
#include "data/problem.h"
#include "nn/model.h"
#include "train/input.h"
#include "train/local.h"

struct dt_session;

/* Sums over shard `shard_index` of `shard_count` of `ds` (example i is in
 * shard i % shard_count), once, dropout off: sums = { loss x counted,
 * correct, counted, examples, sequences all correct, summed unsmoothed
 * cross-entropy }, where `counted` is examples for images and non-pad
 * tokens for text; dt_train_eval_result turns them (summed over shards)
 * into the figures. */
#define DT_EVAL_SUMS 8
enum dt_status dt_train_evaluate_shard(struct dt_model *model, const struct dt_dataset *ds, int shard_index,
				       int shard_count, double sums[DT_EVAL_SUMS], struct dt_err *err) DT_MUST_CHECK;
void dt_train_eval_result(const double sums[DT_EVAL_SUMS], int text, struct dt_eval_result *out);

/* ---- text problems (data/text.h; text_model.c) ---- */
/* The model for dataset d: t2t's transformer (hp's sizes, the data's
 * vocabularies) for a text problem, else dt_model_new (zoo's hp->model, or
 * hp's Keras JSON) on its images. */
enum dt_status dt_train_model_new(const struct dt_model_zoo *zoo, const struct dt_hparams *hp, const struct dt_dataset *d,
				  int max_batch, struct dt_model **out, struct dt_err *err) DT_MUST_CHECK;
/* The model's max_batch for training on d: hp's batch_size (examples, or
 * tokens for text). */
int dt_train_max_batch(const struct dt_hparams *hp, const struct dt_dataset *d);
/* The session's input over d: token batches for text, the pipeline for images. */
struct dt_input *dt_train_input_new(const struct dt_dataset *d, const struct dt_hparams *hp, uint64_t seed,
				    int prefetch);
enum dt_status dt__train_evaluate_text(struct dt_model *model, const struct dt_text_set *t, int shard, int count,
				       double sums[DT_EVAL_SUMS], struct dt_err *err) DT_MUST_CHECK;

/* The "eval at step N: ..." log line (t2t's metrics for text). */
void dt_train_log_eval(int64_t step, const struct dt_eval_result *r);
/* Evaluates the model on every example of `ds` once (dropout off). */
enum dt_status dt_train_evaluate(struct dt_model *model, const struct dt_dataset *ds, struct dt_eval_result *out,
				 struct dt_err *err) DT_MUST_CHECK;

/*
 * The chief's evaluation during training (--eval_every) where others wait on
 * it (synchronous training through the ps, t2t's in-graph master): a copy of
 * the variables taken between two steps is evaluated on a model of its own,
 * on a thread of its own, while this thread trains on (and turns its loop),
 * so no peer's deadline (--sync_timeout at the ps's barrier, heartbeats)
 * sees the evaluation. When it is done, dt_train_bg_eval_poll logs
 * "eval at step S: accuracy A loss L", the line local training and the
 * asynchronous chief print. One evaluation at a time: the caller waits for
 * the previous one (dt_train_bg_eval_busy) before it starts the next.
 */
struct dt_loop;
struct dt_train_bg_eval;

/* A model like the trainer's (tc's source's make_model, else hp and the
 * test split's shapes; `batch`) for evaluating `test` (borrowed; must
 * outlive it), or with a source its `evaluate`. `loop` (may be NULL) is
 * woken when an evaluation ends. *out: dt_train_bg_eval_free. */
enum dt_status dt_train_bg_eval_new(const struct dt_train_config *tc, const struct dt_dataset *test, int batch,
				    struct dt_loop *loop, struct dt_train_bg_eval **out, struct dt_err *err) DT_MUST_CHECK;
/* Copies `params` (the trainer model's, num_params) and evaluates them as
 * those of global step `step`. Must not be busy or hold an unpolled result. */
void dt_train_bg_eval_start(struct dt_train_bg_eval *e, const float *params, int64_t step);
/* Started and not finished yet. NULL e: 0. */
int dt_train_bg_eval_busy(const struct dt_train_bg_eval *e);
/* A finished evaluation (or, with `wait`, a running one once it finishes):
 * logs it and returns its status; DT_OK when there is none. NULL e: DT_OK. */
enum dt_status dt_train_bg_eval_poll(struct dt_train_bg_eval *e, int wait, struct dt_err *err) DT_MUST_CHECK;
/* Waits for a running evaluation (its result is dropped); accepts NULL. */
void dt_train_bg_eval_free(struct dt_train_bg_eval *e);

/* Adds wd * p to the gradient of every kernel (L2 regularization), all of
 * it or the elements in [lo, hi) of the flat buffer. The one place weight
 * decay is written: a strategy that applies a sum of `n` gradients passes
 * n * wd, so that the mean carries wd * p. */
void dt_train_add_weight_decay(struct dt_model *m, float wd);
void dt_train_add_weight_decay_range(struct dt_model *m, float wd, size_t lo, size_t hi);
/* t2t's clip_grad_norm: scales the model's gradient, the sum of `summed`
 * gradients (weight decay added: in t2t it is part of the loss), to global
 * norm <= hp->clip_grad_norm (nn/optimizer.h, dt_clip_by_global_norm);
 * nothing when that is 0. Returns the norm before clipping (0 when off),
 * which the strategy hands to the session's progress lines (strategy.h,
 * grad_norm). The one place clipping is written: each strategy calls it
 * where its gradient is final (strategy.h, clip_where). */
double dt_train_clip_grads(struct dt_model *m, const struct dt_hparams *hp, int summed);

/*
 * What a task trains on with a built-in problem: the train split (and the
 * test split when `load_test`), a model for its shapes and hparams (batches
 * of `batch`, not initialized: the session's strategy initializes or
 * restores it) and the training input over the train split. Zero it first;
 * release it even on failure.
 */
struct dt_train_setup {
	struct dt_dataset train, test;
	struct dt_model *model;
	int model_borrowed;         /* the source's (cfg->source): not freed here */
	struct dt_input *input;
	double load_seconds;
};
/* The one place a role's model and input are made: from cfg->source when
 * there is one (the caller's model and data), else the registry's model
 * hp.model for `shape`'s examples, and the input over `train` (borrowed).
 * Returned owned by the caller. */
enum dt_status dt_train_make_model(const struct dt_train_config *cfg, const struct dt_dataset *shape, int max_batch,
				   struct dt_model **out, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_train_make_input(const struct dt_train_config *cfg, const struct dt_dataset *train,
				   const struct dt_model *model, struct dt_input **out, struct dt_err *err) DT_MUST_CHECK;
/* dt_session_run, or the source's `drive` in its place. */
enum dt_status dt_train_drive(const struct dt_train_config *cfg, struct dt_session *s,
			      struct dt_err *err) DT_MUST_CHECK;
/* With cfg->source: no data is loaded, the model is the source's
 * (borrowed) and the input its make_input's. */
enum dt_status dt_train_setup_load(const struct dt_train_config *cfg, int load_test, struct dt_train_setup *out,
				   struct dt_err *err) DT_MUST_CHECK;
void dt_train_setup_release(struct dt_train_setup *s);
struct dt_strategy;
/* A role's whole run on a built-in problem: the setup, a session with
 * `strategy` (its state `arg`), run to the end; *res gets its figures. */
enum dt_status dt_train_run(const struct dt_train_config *cfg, int load_test, const struct dt_strategy *strategy,
			    void *arg, struct dt_train_result *res, struct dt_err *err) DT_MUST_CHECK;
struct dt_session_config;
/* The session configuration of a setup (train, model, input, test, shapes); the caller adds the strategy. */
void dt_train_setup_session(struct dt_train_setup *s, const struct dt_train_config *cfg,
			    struct dt_session_config *out);

/* "1:02:03" or "2:03"; "?" when unknown. */
void dt_train_format_eta(double seconds, char *buf, size_t cap);

/* A role of a ps cluster (ps_roles.c, sync_roles.c) trains: BLAS, the
 * role's setup into `r` (zeroed; the train split with `with_input`, else
 * none: the in-graph master reads no data; the test split when
 * `load_test`), then a session with `strategy` (state `arg`) run to the
 * end; *res gets its figures. Release `r` (dt__role_release) either way. */
struct dt__role;
struct dt_ps_run_config;
/* The configuration the ps chief's saver (train/ps_recovery.h) is given:
 * the run's without summaries, which the session writes. */
void dt__ps_chief_config(const struct dt_ps_run_config *cfg, struct dt_train_config *tc_out,
			 struct dt_ps_run_config *out);
enum dt_status dt__role_train(const struct dt_ps_run_config *cfg, struct dt__role *r, int with_input, int load_test,
			      const struct dt_strategy *strategy, void *arg, struct dt_train_result *res,
			      struct dt_err *err) DT_MUST_CHECK;

#endif
