/*
 * session.c — the training engine's one loop (session.h): the session's
 * start (the strategy's connect and start, restore or initialize, the
 * summaries, the dropout stream, in-process replicas, the input at its
 * position), each step (compute, apply, hook, summaries, progress lines,
 * checkpoints, evaluations), the finish and the run's figures. What
 * --deterministic changes (micro-batches dealt over the tasks, fixed-point
 * sums) is session_deal.c; the state both files share, session_state.h.
 */
#include "train/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/trace.h"
#include "distribute/mirrored.h"
#include "nn/regularize.h"
#include "train/checkpoint.h"
#include "train/common.h"
#include "train/evaluator.h"
#include "train/events.h"
#include "train/session_state.h"
#include "train/summary.h"
#include "train/warm_start.h"

/* This process's CPU time (every thread) in ns: the benchmarks' figure on
 * a shared host, where wall time counts other tenants' turns too. */
static int64_t cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (int64_t)t.tv_sec * DT_NSEC_PER_SEC + t.tv_nsec;
}

/* (the session's state: train/session_state.h) */

struct dt_model *dt__session_model(struct dt_session *s) { return s->model; }
struct dt_optimizer *dt__session_optimizer(struct dt_session *s) { return &s->opt; }
const struct dt_train_config *dt__session_config(const struct dt_session *s) { return s->cfg; }
struct dt_dataset *dt__session_test(struct dt_session *s) { return s->test; }
struct dt_summary *dt__session_summary(struct dt_session *s) { return s->summary; }
int64_t dt_session_global_step(const struct dt_session *s) { return s->step; }
int dt_session_should_stop(const struct dt_session *s) { return s->ended || s->step >= s->cfg->train_steps; }
void dt__session_end_run(struct dt_session *s) { s->ended = 1; }

static enum dt_status start_slices(struct dt_session *s, const struct dt_strategy_start *at, int announce,
				   struct dt_err *err);

enum dt_status dt__session_seek(struct dt_session *s, const struct dt_strategy_start *at, struct dt_err *err)
{
	if (!s->input)
		return DT_OK;
	DT_ASSERT(s->cfg->micro_batch == 0); /* --deterministic is not built for the strategies that seek */
	if (s->global_position && s->info.shard_count > 1)
		return start_slices(s, at, 0, err);
	if (at->global || at->batches == 0)
		return dt_input_start(s->input, s->info.shard_index, s->info.shard_count, at->epoch, at->offset, err);
	return dt_input_start_at_batch(s->input, s->info.shard_index, s->info.shard_count, s->cfg->hp.batch_size,
				       at->batches, err);
}

int dt__session_input_position(const struct dt_session *s, int64_t *epoch, int64_t *offset)
{
	*epoch = *offset = 0;
	if (!s->input)
		return 0;
	dt_input_position(s->input, epoch, offset);
	return s->global_position;
}
struct dt_rng *dt__session_rng(struct dt_session *s) { return &s->dropout_rng; }

int64_t dt__session_units_per_epoch(const struct dt_session *s)
{
	return s->input && s->input->ops->start_units ? s->input->ops->units_per_epoch(s->input) : 0;
}

void dt_session_set_hook(struct dt_session *s, dt_session_hook_fn fn, void *arg)
{
	s->hook = fn;
	s->hook_arg = arg;
}

static int has_output_dir(const struct dt_train_config *tc) { return tc->output_dir && *tc->output_dir; }

/* The session's saver on --output_dir, at the run's cadence and keep, and
 * the hyperparameters its checkpoints carry: one set-up for the session that
 * starts with the checkpoints (dt__session_restore_or_init) and for the one
 * that takes them over from a lost chief (dt__session_take_chief). */
static enum dt_status start_saving(struct dt_session *s, struct dt_err *err)
{
	const struct dt_train_config *tc = s->cfg;
	enum dt_status st = dt_saver_init(&s->saver, tc->output_dir, tc->save_checkpoints_steps,
					  tc->save_checkpoints_secs, tc->keep_checkpoint_max, err);
	if (st)
		return st;
	s->saving = 1;
	if (!s->hparams_json) /* a chief dropped and taken again keeps the one it made */
		s->hparams_json = dt_ckpt_hparams_json(&tc->hp);
	return DT_OK;
}

enum dt_status dt__session_restore_or_init(struct dt_session *s, struct dt_strategy_start *out, struct dt_err *err)
{
	const struct dt_train_config *tc = s->cfg;
	memset(out, 0, sizeof(*out));
	if (!has_output_dir(tc))
		return dt_warm_start_init(s->model, tc->seed, tc->warm_start_from, tc->warm_start_vars, err);
	enum dt_status st = start_saving(s, err);
	if (st)
		return st;
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, s->model);
	dt_ckpt_contents_set_optimizer(&c, &s->opt);
	int found;
	char path[DT_CKPT_PATH_MAX];
	if ((st = dt_ckpt_restore_latest(tc->output_dir, &c, &found, path, sizeof(path), err)))
		return st;
	if (!found) {
		if (tc->warm_start_from && *tc->warm_start_from)
			dt_info("no checkpoint in '%s': warm-starting from '%s'", tc->output_dir, tc->warm_start_from);
		else
			dt_info("no checkpoint in '%s': training from scratch", tc->output_dir);
		return dt_warm_start_init(s->model, tc->seed, tc->warm_start_from, tc->warm_start_vars, err);
	}
	dt_info("restored step %lld from %s", (long long)c.global_step, path);
	dt_saver_mark(&s->saver, c.global_step);
	out->step = c.global_step;
	out->epoch = c.pipeline_epoch;
	out->offset = c.pipeline_offset;
	out->global = c.pipeline_global;
	out->has_rng = c.has_rng;
	out->rng = c.dropout_rng;
	return DT_OK;
}

static enum dt_status open_summaries(struct dt_session *s, struct dt_err *err);

enum dt_status dt__session_take_chief(struct dt_session *s, struct dt_err *err)
{
	const struct dt_train_config *tc = s->cfg;
	enum dt_status st;
	if (has_output_dir(tc) && !s->saving) {
		if ((st = start_saving(s, err)))
			return dt_err_prefix(err, "cannot take over the chief's checkpoints");
		/* The lost chief may have died halfway through a save: its
		 * temporary file goes, the state file only names whole ones. */
		dt_ckpt_remove_stale_temps(tc->output_dir, (double)time(NULL));
		char path[DT_CKPT_PATH_MAX];
		int64_t newest = 0;
		enum dt_ckpt_poll found = DT_CKPT_POLL_NONE;
		if ((st = dt_ckpt_latest_path(tc->output_dir, path, sizeof(path), &newest, &found, err)))
			return dt_err_prefix(err, "cannot take over the chief's checkpoints");
		if (found != DT_CKPT_POLL_FOUND)
			newest = 0;
		dt_saver_mark(&s->saver, newest > s->step ? newest : s->step);
		dt_info("this task saves the checkpoints in '%s' from now on (the newest is at step %lld)",
			tc->output_dir, (long long)newest);
	}
	if (s->info.chief) /* a restarted chief: the session opens its summaries and test split as always */
		return DT_OK;
	s->info.chief = 1;
	if (!s->summary && (st = open_summaries(s, err)))
		return dt_err_prefix(err, "cannot take over the chief's summaries");
	if (tc->eval_at_end && s->test->count == 0 && !tc->source &&
	    (st = dt_problem_load(tc->problem, tc->data_dir, tc->data, DT_SPLIT_TEST, tc->seed, s->test, err)))
		return dt_err_prefix(err, "cannot load the test split for the evaluation at the end");
	return DT_OK;
}

void dt__session_drop_chief(struct dt_session *s)
{
	if (!s->info.chief)
		return;
	s->info.chief = 0;
	if (s->saving) {
		dt_saver_release(&s->saver);
		s->saving = 0;
	}
	dt_summary_free(s->summary);
	s->summary = NULL;
	dt_events_free(s->eval_events);
	s->eval_events = NULL;
}

/* The problem for t2t's summary tags: none for a program's own data. */
static const char *tc_problem(const struct dt_session *s)
{
	return s->cfg->source ? NULL : s->cfg->problem;
}

/* The chief's TensorBoard files, when there is an output dir. */
static enum dt_status open_summaries(struct dt_session *s, struct dt_err *err)
{
	const struct dt_train_config *tc = s->cfg;
	enum dt_status st;
	if (s->info.chief && s->info.eval_every > 0 && s->info.eval_where != DT_EVAL_INLINE &&
	    (st = dt_train_bg_eval_new(tc, s->test, tc->hp.batch_size, s->info.loop, &s->bg, err)))
		return st;
	if (!s->info.chief || !has_output_dir(tc) || s->summary) /* s->summary: taken over already */
		return DT_OK;
	if (tc->save_summary_steps > 0) {
		struct dt_summary_config sc = { .dir = tc->output_dir, .every = tc->save_summary_steps,
						.last_step = tc->train_steps, .hp = &tc->hp, .problem = tc_problem(s),
						.batch_size = s->info.summary_batch ? s->info.summary_batch
										   : s->info.global_batch };
		if ((st = dt_summary_new(&sc, &s->summary, err)))
			return st;
	}
	if (tc->eval_after_save && s->info.files)
		return dt_eval_open_events(tc->output_dir, DT_SPLIT_TEST, &s->eval_events, err);
	return DT_OK;
}

/* Lock-step tasks (strategy info `slices`): the input as slice shard_index
 * of each global batch of the whole dataset's order, at a global position,
 * so a checkpoint written by N workers resumes on M with the examples of the
 * epoch that nobody has read yet. A checkpoint from before global positions
 * holds one shard's (epoch, offset), written at the worker count that
 * resumes it (which was required then): its offset times the shard count is
 * as many examples of the epoch, in the global order. */
static enum dt_status start_slices(struct dt_session *s, const struct dt_strategy_start *at, int announce,
				   struct dt_err *err)
{
	const int n = s->info.shard_count;
	int64_t epoch = at->epoch, offset = at->offset;
	if (at->batches > 0 && !at->global) {
		/* A position derived from the step: that many global batches in. */
		enum dt_status st = s->input->ops->start_slice(s->input, s->info.shard_index, n, 0, 0, err);
		if (st)
			return st;
		dt_pipeline_batch_position(dt_input_shard_size(s->input), s->cfg->hp.batch_size * n, at->batches, &epoch,
					   &offset);
	} else if (at->step > 0 && !at->global) {
		offset *= n;
		dt_info("the checkpoint holds one data shard's position (written before global positions, at %d "
			"workers): resuming %lld examples into epoch %lld of the whole data", n, (long long)offset,
			(long long)at->epoch);
	}
	enum dt_status st = s->input->ops->start_slice(s->input, s->info.shard_index, n, epoch, offset, err);
	if (st)
		return at->step ? dt_err_prefix(err, "cannot resume at step %lld", (long long)at->step) : st;
	s->global_position = 1;
	if (!announce)
		return DT_OK; /* a seek mid-run (dt__session_seek) */
	dt_info("data: slice %d of %d of every global batch %d (the whole data, %lld examples per epoch)",
		s->info.shard_index, n, s->cfg->hp.batch_size * n, (long long)dt_input_shard_size(s->input));
	return DT_OK;
}

/* An in-process replica of a text problem's model (distribute/mirrored.h's
 * make): the primary's vocabularies, and its max batch in tokens, since a
 * slice of B / N sequences is padded to the whole batch's length. */
static enum dt_status make_text_replica(void *arg, int max_batch, struct dt_model **out, struct dt_err *err)
{
	struct dt_session *s = arg;
	(void)max_batch;
	return dt_train_model_new(s->cfg->models, &s->cfg->hp, s->train_split, dt_model_max_batch(s->model), out, err);
}

/* The dropout stream, the in-process replicas and the input, from where the
 * run continues. One rule for every mode: a restored stream, else the one
 * derived for this shard (and, where streams are not saved, the step). */
static enum dt_status start_compute(struct dt_session *s, const struct dt_strategy_start *at, struct dt_err *err)
{
	const struct dt_train_config *tc = s->cfg;
	uint64_t stream = (s->info.dropout_per_resume ? (uint64_t)at->step * 65536u : 0) + (uint64_t)s->info.shard_index;
	if (at->has_rng)
		s->dropout_rng = at->rng;
	else
		dt_rng_derive(&s->dropout_rng, tc->seed, "dropout", stream);
	enum dt_status st;
	if (tc->replicas > 1) {
		const int text = !tc->source && s->train_split && s->train_split->text;
		struct dt_mirrored_config mc = {
			.hp = &tc->hp, .height = s->shape[0], .width = s->shape[1], .channels = s->shape[2],
			.num_classes = s->shape[3],
			.replicas = tc->replicas, .batch_size = tc->hp.batch_size, .seed = tc->seed, .stream_base = stream,
			.make = tc->source ? tc->source->make_model : NULL, .make_arg = tc->source ? tc->source->arg : NULL,
			.models = tc->models,
		};
		if (text) { /* batches of up to that many sequences, of at least one token each */
			mc.make = make_text_replica;
			mc.make_arg = s;
			mc.batch_size = dt_model_max_batch(s->model);
		}
		if ((st = dt_mirrored_new(s->model, &mc, &s->mirror, err)))
			return st;
		dt_info("mirrored: %d replicas on threads split each batch of %d%s, OpenBLAS 1 thread each", tc->replicas,
			tc->hp.batch_size, text ? " tokens" : "");
	}
	const char *cnode = NULL, *cfield = NULL;
	if (!s->strategy->constraints && dt_model_has_constraints(s->model, &cnode, &cfield))
		return dt_err_set(err, DT_USAGE, "layer '%s': field '%s' is not supported in %s training (the constraint "
				  "runs after each update where the variables are updated: local, --replicas, "
				  "multi-worker all-reduce and in-graph training)", cnode, cfield, s->strategy->name);
	/* before the in-graph master's return: its replicas would not sum in fixed point */
	if (tc->micro_batch > 0 && !s->strategy->fixed_point)
		return dt_err_set(err, DT_USAGE, "--deterministic is not built for %s training", s->strategy->name);
	if (!s->input) /* the strategy computes elsewhere (t2t's in-graph master) */
		return DT_OK;
	if (tc->micro_batch > 0)
		return dt__session_start_fixed(s, at, err);
	if (at->units) {
		st = s->input->ops->start_units(s->input, at->units, s->info.shard_index, at->epoch, at->offset, err);
		return st ? dt_err_prefix(err, "cannot start the input of trainer %d of %d", s->info.shard_index,
					  at->units->trainers) : DT_OK;
	}
	if (s->info.slices && s->info.shard_count > 1 && s->input->ops->start_slice)
		return start_slices(s, at, 1, err);
	if (at->batches > 0)
		st = dt_input_start_at_batch(s->input, s->info.shard_index, s->info.shard_count, tc->hp.batch_size,
					     at->batches, err);
	else
		st = dt_input_start(s->input, s->info.shard_index, s->info.shard_count, at->epoch, at->offset, err);
	s->global_position = s->info.shard_count == 1;
	if (st)
		return at->step ? dt_err_prefix(err, "cannot resume at step %lld", (long long)at->step) : st;
	if (s->info.shard_count > 1 && s->info.global_batch != tc->hp.batch_size)
		dt_info("data: shard %d of %d, %lld examples per epoch; batch %d per worker%s, global batch %d",
			s->info.shard_index, s->info.shard_count, (long long)dt_input_shard_size(s->input),
			tc->hp.batch_size, tc->replicas > 1 ? " split over its replicas" : "", s->info.global_batch);
	else if (s->info.shard_count > 1)
		dt_info("data: shard %d of %d, %lld examples per epoch", s->info.shard_index, s->info.shard_count,
			(long long)dt_input_shard_size(s->input));
	return DT_OK;
}

enum dt_status dt_session_new(const struct dt_session_config *cfg, struct dt_session **out, struct dt_err *err)
{
	*out = NULL;
	struct dt_session *s = dt_xcalloc(1, sizeof(*s));
	const struct dt_train_config *tc = cfg->train;
	s->cfg = tc;
	s->strategy = cfg->strategy;
	s->self = cfg->strategy_arg;
	s->model = cfg->model;
	s->input = cfg->input;
	s->test = cfg->test;
	s->train_split = cfg->train_split;
	s->shape[0] = cfg->height, s->shape[1] = cfg->width, s->shape[2] = cfg->channels, s->shape[3] = cfg->num_classes;
	s->last_eval_step = -1;
	s->info = (struct dt_strategy_info){ .chief = 1, .shard_count = 1, .global_batch = tc->hp.batch_size,
					     .examples_note = "", .save_rng = 1, .eval_every = tc->eval_every,
					     .files = 1, .lr_scale = 1 };
	s->res.num_params = (int64_t)dt_model_num_params(s->model);
	struct dt_strategy_start at;
	memset(&at, 0, sizeof(at));
	enum dt_status st = dt_optimizer_init(&s->opt, &tc->hp, dt_model_num_params(s->model), err);
	if (!st && s->strategy->connect)
		st = s->strategy->connect(s, s->self, &s->info, err);
	if (!st)
		st = s->strategy->start(s, s->self, &at, err);
	if (!st && tc->hp.clip_grad_norm > 0)
		dt_info("clip_grad_norm=%g: the gradient is scaled to global norm <= %g %s", tc->hp.clip_grad_norm,
			tc->hp.clip_grad_norm, s->strategy->clip_where ? s->strategy->clip_where : "before the update");
	if (!st)
		st = open_summaries(s, err);
	if (!st)
		st = start_compute(s, &at, err);
	if (st) {
		dt_session_free(s);
		return st;
	}
	s->step0 = s->step = s->evaluated_at = at.step;
	if (s->step0 >= tc->train_steps && !s->info.shared_step)
		dt_info("the checkpoint is at step %lld, train_steps is %lld: nothing to train", (long long)s->step0,
			(long long)tc->train_steps);
	s->w = (struct window){ .start_ns = dt_now_ns() };
	s->train_start_ns = s->w.start_ns;
	*out = s;
	return DT_OK;
}

void dt_session_free(struct dt_session *s)
{
	if (!s)
		return;
	if (s->saving)
		dt_saver_release(&s->saver);
	free(s->hparams_json);
	free(s->pushed_before);
	dt_train_bg_eval_free(s->bg);
	dt_events_free(s->eval_events);
	dt_summary_free(s->summary);
	dt_mirrored_free(s->mirror);
	dt_input_free(s->input);
	dt__session_free_fixed(s);
	dt_optimizer_release(&s->opt);
	free(s);
}

/* Sums `n` figures over every task (strategy), or leaves them alone. */
static enum dt_status reduce(struct dt_session *s, double *v, int n, const char *what, struct dt_err *err)
{
	if (!s->strategy->reduce)
		return DT_OK;
	float f[16];
	DT_ASSERT(n <= 16);
	for (int i = 0; i < n; i++)
		f[i] = (float)v[i]; /* counts <= 2^24 stay exact */
	enum dt_status st = s->strategy->reduce(s, s->self, f, (size_t)n, what, err);
	for (int i = 0; i < n; i++)
		v[i] = (double)f[i];
	return st;
}

enum dt_status dt_session_evaluate(struct dt_session *s, struct dt_eval_result *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (!s->test || s->test->count == 0)
		return dt_err_set(err, DT_USAGE, "cannot evaluate: no test split was loaded for this session");
	double v[DT_EVAL_SUMS];
	int shard = s->strategy->reduce ? s->info.shard_index : 0, count = s->strategy->reduce ? s->info.shard_count : 1;
	enum dt_status st = dt_train_evaluate_shard(s->model, s->test, shard, count, v, err);
	if (!st)
		st = reduce(s, v, DT_EVAL_SUMS, "eval/sums", err);
	if (st)
		return dt_err_prefix(err, "cannot evaluate at step %lld", (long long)s->step);
	dt_train_eval_result(v, s->test->text != NULL, out);
	return DT_OK;
}

/* A step whose update failed part way leaves the variables torn (some of
 * that step's, some not): never saved, never stepped on. */
static enum dt_status refuse_torn(const struct dt_session *s, const char *what, struct dt_err *err)
{
	enum dt_status st = dt_err_set(err, DT_RUNTIME, "cannot %s: step %lld diverged after its update had begun "
				       "(--deterministic applies the mean as it computes it), so the variables are "
				       "neither that step's nor the one before", what, (long long)s->torn_step);
	return dt_err_hint(err, "resume from the last checkpoint, with a lower learning rate or clip_grad_norm"), st;
}

enum dt_status dt_session_save(struct dt_session *s, struct dt_err *err)
{
	if (!s->saving)
		return DT_OK;
	if (s->torn_step)
		return refuse_torn(s, "save a checkpoint", err);
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, s->model);
	dt_ckpt_contents_set_optimizer(&c, &s->opt);
	c.global_step = s->step;
	c.has_rng = s->info.save_rng;
	c.dropout_rng = s->dropout_rng;
	if (s->input)
		dt_input_position(s->input, &c.pipeline_epoch, &c.pipeline_offset);
	c.pipeline_global = s->global_position;
	c.hparams = s->hparams_json;
	c.extra = s->info.ckpt_meta;
	c.num_extra = s->info.num_ckpt_meta;
	return dt_saver_save(&s->saver, &c, err);
}

void dt_session_scalars(struct dt_session *s, const char *const *tags, const float *values, int n)
{
	dt_summary_scalars(s->summary, s->step, tags, values, n);
}

/* The progress line over the window (its figures summed over every task),
 * and the run's final loss. */
static enum dt_status log_window(struct dt_session *s, float lr, struct dt_err *err)
{
	const struct dt_train_config *tc = s->cfg;
	struct window *w = &s->w;
	double v[9] = { w->loss_sum, (double)w->correct, (double)w->examples, (double)w->counted,
			(double)w->seqs_correct, w->nll_sum, w->bleu_sum, (double)w->bleu_batches, w->reg_sum };
	enum dt_status st = reduce(s, v, 9, "log/window", err);
	if (st)
		return dt_err_prefix(err, "training stopped at step %lld", (long long)s->step);
	double loss = v[0] / ((double)w->steps * (s->strategy->reduce ? s->info.shard_count : 1));
	/* Keras's regularization losses, apart (the loss includes them, as Keras's does) */
	char reg[48] = "";
	if (dt_model_has_regularizers(s->model))
		snprintf(reg, sizeof(reg), " (regularization %.4g)",
			 v[8] / ((double)w->steps * (s->strategy->reduce ? s->info.shard_count : 1)));
	s->res.final_loss = loss;
	s->loss_logged = 1;
	if (tc->log_every > 0 || s->info.log_last_step) {
		int64_t now = dt_now_ns();
		double secs = (double)(now - w->start_ns) / 1e9, elapsed = (double)(now - s->train_start_ns) / 1e9;
		char eta[32], note[64] = "", at[64];
		/* This task's steps, not the global step: a resumed run did the steps before it elsewhen. */
		dt_train_format_eta(elapsed / (double)s->local_steps * (double)(tc->train_steps - s->step), eta,
				    sizeof(eta));
		if (s->strategy->note)
			s->strategy->note(s, s->self, elapsed, note, sizeof(note));
		if (s->info.shared_step)
			snprintf(at, sizeof(at), "step %lld (global %lld/%lld)", (long long)s->local_steps,
				 (long long)s->step, (long long)tc->train_steps);
		else
			snprintf(at, sizeof(at), "step %lld/%lld", (long long)s->step, (long long)tc->train_steps);
		char clip[96] = ""; /* this task's norms (an all-reduce's are every rank's) */
		if (tc->hp.clip_grad_norm > 0)
			snprintf(clip, sizeof(clip), " grad_norm %.3g (max %.3g, clipped %lld of %lld steps)",
				 w->norm_sum / (double)w->steps, w->norm_max, (long long)w->clipped, (long long)w->steps);
		char bleu[48] = ""; /* translation: the mean of the batches' approx_bleu_score, as t2t's */
		if (v[7] > 0)
			snprintf(bleu, sizeof(bleu), " approx_bleu_score %.4f", v[6] / v[7]);
		if (v[3] > 0) /* text: t2t's metrics, tokens counted */
			dt_info("%s loss %.4f%s accuracy %.4f accuracy_per_sequence %.4f neg_log_perplexity %.4f%s lr %.3g%s "
				"%.0f examples/s %.0f tokens/s%s%s eta %s",
				at, loss, reg, v[1] / v[3], v[4] / v[2], -v[5] / v[3], bleu, (double)lr, clip,
				secs > 0 ? v[2] / secs : 0, secs > 0 ? v[3] / secs : 0, s->info.examples_note, note, eta);
		else
			dt_info("%s loss %.4f%s acc %.3f lr %.3g%s %.0f examples/s%s%s eta %s", at, loss, reg, v[1] / v[2],
				(double)lr, clip, secs > 0 ? v[2] / secs : 0, s->info.examples_note, note, eta);
	}
	*w = (struct window){ .start_ns = dt_now_ns() };
	return DT_OK;
}

/* Checkpoint cadence (the saver's, and the last step), then train_and_evaluate's evaluation. */
static enum dt_status maybe_save(struct dt_session *s, struct dt_err *err)
{
	if (!s->saving || !(dt_saver_due(&s->saver, s->step) || s->step == s->cfg->train_steps))
		return DT_OK;
	int64_t s0 = dt_now_ns();
	enum dt_status st = dt_session_save(s, err);
	if (!st && s->eval_events) {
		int64_t e0 = dt_now_ns();
		st = dt_eval_in_process(s->eval_events, s->model, s->test, tc_problem(s), s->step, &s->last_eval, err);
		s->last_eval_step = s->step;
		s->eval_ns += dt_now_ns() - e0;
	}
	s->w.start_ns += dt_now_ns() - s0;
	return st;
}

/* Waits for the background evaluation, keeping the connections alive. */
static enum dt_status wait_for_copy(struct dt_session *s, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	while (!st && dt_train_bg_eval_busy(s->bg))
		st = s->strategy->wait ? s->strategy->wait(s, s->self, err) : (dt_sleep(0.01), DT_OK);
	return st ? st : dt_train_bg_eval_poll(s->bg, 1, err);
}

/*
 * --eval_every: when the global step crosses a multiple of it (other tasks
 * move a shared step too), except at the last step, evaluated at the end.
 * Where it runs is the strategy's: inline between two steps (every task its
 * shard, summed, with a `reduce`), or on a copy of the variables on a thread
 * of its own, so that no peer's deadline (a barrier, heartbeats) sees it:
 * waited for while the connections are kept alive, or not waited for at all
 * (training goes on; the next one waits for it if it is still running).
 */
static enum dt_status maybe_evaluate(struct dt_session *s, struct dt_err *err)
{
	int64_t every = s->info.eval_every;
	enum dt_status st = s->info.eval_where == DT_EVAL_COPY_ASYNC ? dt_train_bg_eval_poll(s->bg, 0, err) : DT_OK;
	if (st || every <= 0 || s->step >= s->cfg->train_steps || s->step / every <= s->evaluated_at / every)
		return st;
	if (!s->info.chief && s->info.eval_where != DT_EVAL_INLINE)
		return DT_OK;
	int64_t e0 = dt_now_ns();
	if (s->strategy->before_eval && (st = s->strategy->before_eval(s, s->self, err)))
		return st;
	if (s->info.eval_where == DT_EVAL_INLINE) {
		struct dt_eval_result ev;
		if ((st = dt_session_evaluate(s, &ev, err)))
			return st;
		if (s->info.chief)
			dt_train_log_eval(s->step, &ev);
	} else {
		if (dt_train_bg_eval_busy(s->bg))
			dt_debug("step %lld: waiting for the evaluation before the next one (--eval_every=%lld)",
				 (long long)s->step, (long long)every);
		if ((st = wait_for_copy(s, err)))
			return st;
		dt_train_bg_eval_start(s->bg, dt_model_params(s->model), s->step);
		if (s->info.eval_where == DT_EVAL_COPY_WAIT && (st = wait_for_copy(s, err)))
			return st;
	}
	s->evaluated_at = s->step;
	if (s->info.eval_where != DT_EVAL_COPY_ASYNC) {
		s->eval_ns += dt_now_ns() - e0;
		s->w.start_ns += dt_now_ns() - e0;
	}
	return DT_OK;
}

enum dt_status dt__session_next_batch(struct dt_session *s, const struct dt_batch **out, struct dt_err *err)
{
	if (!s->input)
		return dt_err_set(err, DT_USAGE, "this session has no training input (its strategy computes elsewhere)");
	enum dt_status st = dt_input_next(s->input, out, err);
	return st ? dt_err_prefix(err, "cannot read the batch after step %lld", (long long)s->step) : DT_OK;
}

enum dt_status dt__session_compute(struct dt_session *s, struct dt_step_figures *out, struct dt_err *err)
{
	if (s->cfg->micro_batch > 0)
		return dt__session_compute_micro(s, out, err);
	const struct dt_batch *b;
	const int64_t t0 = dt_trace_begin();
	enum dt_status st = dt__session_next_batch(s, &b, err);
	dt_trace_end(t0, "input", "next batch", s->step + 1, -1);
	return st ? st : dt__session_compute_batch(s, b, NULL, NULL, out, err);
}

enum dt_status dt__session_compute_batch(struct dt_session *s, const struct dt_batch *b, dt_grads_ready_fn on_ready,
					 void *arg, struct dt_step_figures *out, struct dt_err *err)
{
	DT_ASSERT(!on_ready || !s->mirror); /* the replicas' sum is whole only at the end */
	out->correct = 0;
	out->examples = b->size;
	if (!b->general) { /* the built-in path: a dataset's images and uint8 labels */
		out->loss = on_ready ? dt_model_train_batch_notify(s->model, b->x, b->y, b->size, &s->dropout_rng,
								   &out->correct, on_ready, arg)
				     : dt_mirrored_step(s->mirror, s->model, b->x, b->y, b->size, &s->dropout_rng,
							&out->correct);
		out->reg_loss = dt_model_last_reg_loss(s->model); /* replicas: the first one's */
		return DT_OK;
	}
	struct dt_step_result res;
	enum dt_status st = s->mirror ? dt_mirrored_step_general(s->mirror, b->general, &res, err)
				      : dt_model_step(s->model, b->general, &s->dropout_rng, on_ready, arg, &res, err);
	if (st)
		return dt_err_prefix(err, "step %lld", (long long)s->step + 1);
	out->loss = res.loss;
	out->reg_loss = res.reg_loss;
	out->correct = res.correct;
	out->length = b->general->length;
	if (res.seqs > 0) {
		out->counted = res.counted;
		out->seqs_correct = res.seqs_correct;
		out->nll_sum = res.nll_sum;
		out->bleu_sum = res.bleu;
		out->bleu_batches = res.bleu_batches;
	}
	return DT_OK;
}

void dt__session_push_begin(struct dt_session *s)
{
	const size_t n = dt_model_sync_mean_floats(s->model);
	if (n == 0)
		return;
	if (!s->pushed_before)
		s->pushed_before = dt_xmalloc(n * sizeof(float));
	dt_model_sync_mean_gather(s->model, s->pushed_before);
}

void dt__session_push_end(struct dt_session *s, int decay, struct dt_step_figures *out)
{
	if (!isfinite(out->loss))
		return;
	const float wd = (float)s->cfg->hp.weight_decay;
	if (decay && wd > 0)
		dt_train_add_weight_decay(s->model, wd);
	out->grad_norm = dt_train_clip_grads(s->model, &s->cfg->hp, 1);
	/* after the clip: the values are no gradient and count in no norm */
	if (s->pushed_before)
		dt_model_moving_average_values(s->model, s->pushed_before, dt_model_grads(s->model));
}

enum dt_status dt__session_compute_decayed(struct dt_session *s, struct dt_step_figures *out, struct dt_err *err)
{
	dt__session_push_begin(s);
	enum dt_status st = dt__session_compute(s, out, err);
	if (!st)
		dt__session_push_end(s, 1, out);
	return st;
}

/* Summary records are due when the step crosses a multiple of the cadence
 * (other tasks move a shared step too), and carry that multiple. */
static void summarize(struct dt_session *s, int64_t prev, const struct dt_step_figures *fig, float lr)
{
	int64_t every = s->cfg->save_summary_steps, step = s->step;
	int64_t tag = every > 0 && step / every > prev / every && step % every ? step / every * every : step;
	dt_summary_text(s->summary, fig->counted, fig->examples, fig->seqs_correct, fig->nll_sum, fig->bleu_sum,
			fig->bleu_batches);
	dt_summary_step(s->summary, tag, fig->loss, fig->correct, lr); /* the chief's own batch, as TF's chief */
}

enum dt_status dt_session_step(struct dt_session *s, struct dt_err *err)
{
	const struct dt_train_config *tc = s->cfg;
	if (dt_session_should_stop(s) || s->finished)
		return dt_err_set(err, DT_USAGE, "the session is at step %lld of %lld: no step left to take",
				  (long long)s->step, (long long)tc->train_steps);
	if (s->torn_step)
		return refuse_torn(s, "take another step", err);
	struct dt_step_figures fig = { 0 };
	int64_t t0 = dt_now_ns(), w0 = dt_trace_begin(); /* the step's halves on the timeline (base/trace.h) */
	enum dt_status st = s->strategy->compute ? s->strategy->compute(s, s->self, &fig, err)
						 : dt__session_compute(s, &fig, err);
	if (st)
		return st;
	if (!isfinite(fig.loss)) {
		const char *on = s->info.task_name ? " on " : "", *name = s->info.task_name ? s->info.task_name : "";
		return dt_err_set(err, DT_RUNTIME, "training diverged at step %lld%s%s: loss is %f", (long long)s->step + 1,
				  on, name, (double)fig.loss);
	}
	float lr = dt_lr_at(&tc->hp, s->step, tc->train_steps) * s->info.lr_scale;
	int64_t t1 = dt_now_ns();
	dt_trace_end(w0, "step", "compute", s->step + 1, -1);
	const int64_t w1 = dt_trace_begin();
	struct dt_strategy_step io = { .step = s->step + 1, .taken = 1 };
	if ((st = s->strategy->apply(s, s->self, &fig, lr, &io, err)))
		return st;
	s->compute_ns += t1 - t0;
	s->apply_ns += dt_now_ns() - t1;
	dt_trace_end(w1, "step", "apply", s->step + 1, -1);
	const int64_t prev = s->step;
	s->step = io.step;
	if (!io.taken)
		return DT_OK;
	if (s->local_steps++ == 0) {
		s->after_first_ns = dt_now_ns();
		s->after_first_cpu_ns = cpu_ns();
		s->res.first_step_seconds = dt_process_age_seconds();
		dt_debug("first step done %.3f s after process start", s->res.first_step_seconds);
	} else {
		s->res.steady_tokens += fig.counted;
		s->res.steady_positions += (int64_t)fig.examples * fig.length;
		s->res.steady_attention_pairs += (int64_t)fig.examples * fig.length * fig.length;
		if (fig.counted > 0) /* a text problem: sequences, for examples/s */
			s->seq_examples += fig.examples;
	}
	s->w.loss_sum += (double)fig.loss;
	s->w.reg_sum += (double)fig.reg_loss;
	s->w.correct += fig.correct;
	s->w.examples += fig.examples;
	s->w.counted += fig.counted;
	s->w.seqs_correct += fig.seqs_correct;
	s->w.nll_sum += fig.nll_sum;
	s->w.bleu_sum += fig.bleu_sum;
	s->w.bleu_batches += fig.bleu_batches;
	if (tc->hp.clip_grad_norm > 0) { /* clipped where the strategy says: in its compute or its apply */
		const double norm = io.grad_norm > 0 ? io.grad_norm : fig.grad_norm > 0 ? fig.grad_norm : s->fixed_norm;
		s->w.norm_sum += norm;
		s->w.norm_max = norm > s->w.norm_max ? norm : s->w.norm_max;
		s->w.clipped += norm > tc->hp.clip_grad_norm;
	}
	s->fixed_norm = 0;
	s->w.steps++;
	if (s->hook)
		s->hook(s->hook_arg, s->step, fig.loss, fig.examples);
	summarize(s, prev, &fig, lr);
	dt_progress_step(s->step, tc->train_steps); /* the launcher's STEP and STEPS/S (base/progress.h) */
	int log_due = s->info.shared_step
		? tc->log_every > 0 && s->local_steps % tc->log_every == 0
		: (tc->log_every > 0 && s->step % tc->log_every == 0) || s->step == tc->train_steps;
	/* The progress line, then the checkpoint, as one process always logged;
	 * where the cluster counts the steps the checkpoint comes first, as the
	 * ps modes and the in-graph master always did (a line at step S then
	 * says S is saved, when it is due). */
	const int save_first = s->info.shared_step;
	if ((save_first && (st = maybe_save(s, err))) || (log_due && (st = log_window(s, lr, err))) ||
	    (!save_first && (st = maybe_save(s, err))) || (st = maybe_evaluate(s, err)))
		return st;
	if (dt_session_should_stop(s)) {
		s->end_ns = dt_now_ns();
		s->end_cpu_ns = cpu_ns();
	}
	return DT_OK;
}

/* The run's timing figures: training steps only, evaluations left out. */
static void timing(struct dt_session *s)
{
	const int64_t trained = s->local_steps;
	struct dt_train_result *res = &s->res;
	int64_t end = s->end_ns - s->eval_ns;
	res->steps = s->step;
	res->train_seconds = trained > 0 ? (double)(end - s->train_start_ns) / 1e9 : 0;
	double steady = (double)(end - s->after_first_ns) / 1e9;
	/* A text problem's batch_size counts tokens, and its batches hold as
	 * many sequences as fit: the examples are the sequences this task took,
	 * times the batches a global step takes (global_batch / batch_size). */
	const double text_per_step = trained > 1 && s->seq_examples > 0
		? (double)s->seq_examples / (double)(trained - 1) * s->info.global_batch / s->cfg->hp.batch_size
		: 0.0;
	if (trained > 1 && steady > 0)
		res->examples_per_sec =
			(double)(trained - 1) * (text_per_step > 0 ? text_per_step : s->info.global_batch) / steady;
	else if (res->train_seconds > 0)
		res->examples_per_sec = (double)s->info.global_batch / res->train_seconds;
	if (trained > 1)
		res->steady_cpu_seconds = (double)(s->end_cpu_ns - s->after_first_cpu_ns) / 1e9;
}

void dt__session_step_times(const struct dt_session *s, int64_t *steps, int64_t *compute_ns, int64_t *apply_ns,
			    int64_t *total_ns)
{
	*steps = s->local_steps;
	*compute_ns = s->compute_ns;
	*apply_ns = s->apply_ns;
	*total_ns = (s->end_ns ? s->end_ns : dt_now_ns()) - s->eval_ns - s->train_start_ns;
}

enum dt_status dt_session_finish(struct dt_session *s, struct dt_err *err)
{
	if (s->finished)
		return dt_err_set(err, DT_USAGE, "the session is already finished");
	s->finished = 1;
	if (!s->end_ns) {
		s->end_ns = dt_now_ns();
		s->end_cpu_ns = cpu_ns();
	}
	/* A trainer through a ps logs a window every log_every of its own steps
	 * and only then: one that logged none (log_every 0, or fewer steps than
	 * that) ends with its own steps' mean loss, as the run's last window. */
	if (!s->loss_logged && s->w.steps > 0)
		s->res.final_loss = s->w.loss_sum / (double)s->w.steps;
	int64_t step = s->step;
	enum dt_status st = s->strategy->finish ? s->strategy->finish(s, s->self, &step, err) : DT_OK;
	s->step = step;
	timing(s);
	/* An evaluation still running: nobody waits on this task any more. */
	if (st || (st = dt_train_bg_eval_poll(s->bg, 1, err)) || !s->info.chief || !s->cfg->eval_at_end)
		return st;
	if (s->last_eval_step == s->step) {
		s->res.eval = s->last_eval; /* evaluated right after the final save */
		return DT_OK;
	}
	/* The whole split on the chief, after the others have left: nobody waits on it. */
	if (s->cfg->source)
		return s->cfg->source->evaluate(s->cfg->source->arg, s->model, &s->res.eval, err);
	return dt_train_evaluate(s->model, s->test, &s->res.eval, err);
}

enum dt_status dt_session_run(struct dt_session *s, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	while (!st && !dt_session_should_stop(s))
		st = dt_session_step(s, err);
	return st ? st : dt_session_finish(s, err);
}

void dt_session_result(const struct dt_session *s, struct dt_train_result *res)
{
	*res = s->res;
	if (!s->finished)
		res->steps = s->step;
}
