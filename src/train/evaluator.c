#include "train/evaluator.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/progress.h"
#include "nn/model.h"
#include "tensor/blas.h"
#include "train/checkpoint.h"
#include "train/common.h"
#include "train/summary.h"
#include "train/warm_start.h"

const char *dt_eval_dir_name(enum dt_split split)
{
	return split == DT_SPLIT_TRAIN ? "eval_train" : split == DT_SPLIT_DEV ? "eval_dev" : "eval";
}

const char *dt_split_name(enum dt_split split)
{
	return split == DT_SPLIT_TRAIN ? "train" : split == DT_SPLIT_DEV ? "dev" : "test";
}

void dt_eval_write_summary(struct dt_events *w, int64_t step, const char *problem, const struct dt_eval_result *r)
{
	struct dt_scalar v[9] = {
		{ "accuracy", (float)r->accuracy },
		{ "loss", (float)r->loss },
		{ "accuracy_per_sequence", (float)r->accuracy_per_sequence },
		{ "neg_log_perplexity", (float)r->neg_log_perplexity },
		{ "approx_bleu_score", (float)r->approx_bleu_score },
	};
	const size_t plain = !r->text ? 2 : r->bleu ? 5 : 4;
	size_t n = plain;
	/* t2t's own tags (the evaluation's loss is Estimator's, untagged): accuracy (v[0]) and v[2 .. plain) */
	char tags[4][DT_SUMMARY_TAG_MAX];
	for (size_t i = 0; r->text && problem && problem[0] && i < plain; i = i == 0 ? 2 : i + 1) {
		dt_summary_t2t_tag(tags[n - plain], problem, v[i].tag);
		v[n] = (struct dt_scalar){ tags[n - plain], v[i].value };
		n++;
	}
	struct dt_err err = DT_ERR_INIT;
	if (dt_events_write_scalars(w, step, v, n, &err))
		dt_warn("eval summaries at step %lld lost: %s", (long long)step, err.msg);
}

enum dt_status dt_eval_open_events(const char *output_dir, enum dt_split split, struct dt_events **out,
				   struct dt_err *err)
{
	size_t cap = strlen(output_dir) + 16;
	char *dir = dt_xmalloc(cap);
	snprintf(dir, cap, "%s/%s", output_dir, dt_eval_dir_name(split));
	enum dt_status st = dt_events_open(dir, out, err);
	free(dir);
	return st ? dt_err_prefix(err, "cannot write eval summaries") : DT_OK;
}

enum dt_status dt_eval_in_process(struct dt_events *w, struct dt_model *model, const struct dt_dataset *data,
				  const char *problem, int64_t step, struct dt_eval_result *out, struct dt_err *err)
{
	struct dt_eval_result r;
	enum dt_status st = dt_train_evaluate(model, data, &r, err);
	if (st)
		return st;
	dt_train_log_eval(step, &r);
	dt_eval_write_summary(w, step, problem, &r);
	if (out)
		*out = r;
	return DT_OK;
}

/* Everything one evaluator owns, released in one place. */
struct evaluator {
	const struct dt_eval_config *cfg;
	struct dt_dataset data;
	struct dt_model *model;
	struct dt_events *events;
	struct dt_ckpt_contents contents;
	char signature[32];

	int64_t last_step;              /* newest step evaluated or given up on; -1: none */
	int64_t fail_step;              /* step of the checkpoint that failed to load last */
	int fail_count;                 /* consecutive failures of fail_step */
	char waiting_for[DT_CKPT_PATH_MAX]; /* a missing file already logged, to log it once */
	char state_error[DT_ERR_MSG_MAX];   /* the state file's last parse error; "" when fine */
};

static void release(struct evaluator *e)
{
	dt_events_free(e->events);
	dt_model_free(e->model);
	dt_dataset_release(&e->data);
}

static enum dt_status setup(struct evaluator *e, struct dt_err *err)
{
	const struct dt_eval_config *cfg = e->cfg;
	enum dt_status st = dt_blas_load(cfg->threads, err);
	if (st)
		return st;
	if (cfg->source)
		st = cfg->source->make_model(cfg->source->arg, cfg->hp.batch_size, &e->model, err);
	else if (!(st = dt_problem_load(cfg->problem, cfg->data_dir, cfg->data, cfg->split, cfg->seed, &e->data, err)))
		st = dt_train_model_new(cfg->models, &cfg->hp, &e->data, dt_train_max_batch(&cfg->hp, &e->data), &e->model, err);
	if (st)
		return st;
	dt_ckpt_contents_for_model(&e->contents, e->model);
	dt_ckpt_model_signature(e->contents.vars, e->contents.num_vars, e->signature, sizeof(e->signature));

	if (!cfg->output_dir || !*cfg->output_dir)
		return DT_OK; /* a warm-start source evaluated once: no summaries */
	return dt_eval_open_events(cfg->output_dir, cfg->split, &e->events, err);
}

static int has_predictions(const struct dt_eval_config *cfg)
{
	return cfg->predictions_file && *cfg->predictions_file;
}

/* Evaluates e->model as it is now and reports it at `step`. */
static enum dt_status evaluate_model(struct evaluator *e, const char *what, int64_t step, struct dt_eval_outcome *out,
				     struct dt_err *err)
{
	const struct dt_eval_config *cfg = e->cfg;
	struct dt_eval_result r;
	enum dt_status st = cfg->source      ? cfg->source->evaluate(cfg->source->arg, e->model, &r, err)
			    : has_predictions(cfg) ? dt_eval_predictions(e->model, &e->data, cfg->predictions_file, &r, err)
						 : dt_train_evaluate(e->model, &e->data, &r, err);
	if (st)
		return st;
	dt_info("evaluated '%s': global step %lld, accuracy %.4f, loss %.4f", what, (long long)step, r.accuracy, r.loss);
	if (has_predictions(cfg))
		dt_info("wrote %lld predictions to '%s'", (long long)r.examples, cfg->predictions_file);
	char note[200];
	snprintf(note, sizeof(note), "eval at global step %lld: accuracy %.4f, loss %.4f", (long long)step, r.accuracy,
		 r.loss);
	dt_progress_note(step, cfg->train_steps, note); /* `dtrain status` shows the newest evaluation */
	if (e->events)
		dt_eval_write_summary(e->events, step, cfg->source ? NULL : cfg->problem, &r);
	if (cfg->report)
		cfg->report(cfg->report_ctx, cfg->split, step, &r);
	out->evaluated++;
	out->last_step = step;
	out->last = r;
	return DT_OK;
}

/* The next checkpoint to evaluate: *found = 0 when there is none yet. */
static enum dt_status next_checkpoint(struct evaluator *e, char *path, size_t cap, int64_t *step, int *found,
				      struct dt_err *err)
{
	const struct dt_eval_config *cfg = e->cfg;
	*found = 0;
	if (cfg->mode == DT_EVAL_LATEST) {
		enum dt_ckpt_poll res;
		enum dt_status st = dt_ckpt_latest_path(cfg->output_dir, path, cap, step, &res, err);
		if (st)
			return st;
		if (res == DT_CKPT_POLL_RETRY && strcmp(e->waiting_for, path) != 0) {
			dt_info("the state file names '%s', which is not there (yet or any more): waiting", path);
			snprintf(e->waiting_for, sizeof(e->waiting_for), "%s", path);
		}
		*found = res == DT_CKPT_POLL_FOUND && *step > e->last_step;
		return DT_OK;
	}
	struct dt_ckpt_state list;
	dt_ckpt_state_init(&list);
	enum dt_status st = dt_ckpt_list(cfg->output_dir, &list, err);
	for (int i = 0; !st && i < list.count; i++) {
		int64_t s = dt_ckpt_step_of(list.paths[i]);
		if (s > e->last_step) {
			snprintf(path, cap, "%s", list.paths[i]);
			*step = s;
			*found = 1;
			break;
		}
	}
	dt_ckpt_state_release(&list);
	return st;
}

/* True when `path` opens, its header checks out, and it carries a model
 * signature other than ours: a different model, which no retry can fix. (A
 * damaged header's signature says nothing: that file is skipped instead.) */
static int other_model(const struct evaluator *e, const char *path)
{
	struct dt_st_file *f;
	if (dt_st_open(path, &f, NULL))
		return 0;
	if (dt_ckpt_check_header(f, NULL)) {
		dt_st_free(f);
		return 0;
	}
	const char *sig = dt_st_meta(f, "model_signature");
	int differs = sig && strcmp(sig, e->signature) != 0;
	dt_st_free(f);
	return differs;
}

/* Loads and evaluates one checkpoint. DT_OK with *evaluated = 0 when it
 * could not be loaded this time (logged; retried or skipped). */
static enum dt_status evaluate_one(struct evaluator *e, const char *path, int64_t step, int *evaluated,
				   struct dt_eval_outcome *out, struct dt_err *err)
{
	const struct dt_eval_config *cfg = e->cfg;
	*evaluated = 0;
	struct dt_err lerr = DT_ERR_INIT;
	enum dt_status st = dt_ckpt_load(path, &e->contents, &lerr);
	if (st) {
		if (st == DT_CKPT && other_model(e, path)) {
			/* The loader's hints are for trainers; the evaluator's fix is its flags. */
			char *hint = strstr(lerr.msg, "\nhint: ");
			if (hint)
				*hint = '\0';
			dt_err_set(err, DT_CKPT, "%s", lerr.msg);
			dt_err_hint(err, "run the evaluator with the trainers' --model, --hparams_set, --hparams and --problem");
			return DT_CKPT;
		}
		int gone = access(path, F_OK) != 0 && errno == ENOENT;
		if (step == e->fail_step) {
			e->fail_count++;
		} else {
			e->fail_step = step;
			e->fail_count = 1;
		}
		if (gone && cfg->mode == DT_EVAL_EVERY) {
			dt_warn("checkpoint '%s' was deleted before it could be evaluated: skipping it", path);
		} else if (e->fail_count < DT_EVAL_LOAD_ATTEMPTS) {
			dt_warn("cannot load checkpoint (attempt %d of %d, retrying): %s", e->fail_count,
				DT_EVAL_LOAD_ATTEMPTS, lerr.msg);
			return DT_OK;
		} else {
			dt_warn("cannot load checkpoint (attempt %d of %d, skipping it): %s", e->fail_count,
				DT_EVAL_LOAD_ATTEMPTS, lerr.msg);
		}
		e->last_step = step;
		out->skipped++;
		return DT_OK;
	}
	int64_t loaded = e->contents.global_step;
	if (loaded != step)
		dt_warn("checkpoint '%s' holds global step %lld, not the %lld of its name: reporting %lld", path,
			(long long)loaded, (long long)step, (long long)loaded);
	if ((st = evaluate_model(e, path, loaded, out, err)))
		return st;
	e->last_step = step > loaded ? step : loaded;
	*evaluated = 1;
	return DT_OK;
}

static enum dt_status timeout_error(const struct evaluator *e, struct dt_err *err)
{
	const struct dt_eval_config *cfg = e->cfg;
	if (e->last_step >= 0)
		dt_err_set(err, DT_TIMEOUT, "no new checkpoint in '%s' for %g s (last evaluated: global step %lld; "
					    "done at step %lld)", cfg->output_dir, cfg->timeout_s,
			   (long long)e->last_step, (long long)cfg->train_steps);
	else
		dt_err_set(err, DT_TIMEOUT, "no checkpoint appeared in '%s' in %g s", cfg->output_dir, cfg->timeout_s);
	if (e->state_error[0])
		dt_err_hint(err, "the state file could not be read: %s", e->state_error);
	dt_err_hint(err, "the chief writes checkpoints there when it trains with the same --output_dir; "
			 "--eval_timeout_secs sets how long to wait");
	return DT_TIMEOUT;
}

enum dt_status dt_evaluator_run(const struct dt_eval_config *cfg, struct dt_eval_outcome *out, struct dt_err *err)
{
	struct dt_eval_outcome local_out;
	if (!out)
		out = &local_out;
	*out = (struct dt_eval_outcome){ .last_step = -1 };
	const int warm = cfg->warm_start_from && *cfg->warm_start_from;
	if (warm && !cfg->once)
		return dt_err_set(err, DT_USAGE, "a warm-start source is evaluated by an evaluation-only run "
						 "(--schedule=evaluate), not by a continuous evaluator");
	if (has_predictions(cfg) && (!cfg->once || cfg->source))
		return dt_err_set(err, DT_USAGE, "--predictions_file is for an evaluation-only run (--schedule=evaluate) "
						 "of dtrain's own problems");
	if (!warm && (!cfg->output_dir || !*cfg->output_dir))
		return dt_err_set(err, DT_USAGE, "the evaluator needs the chief's output dir (--output_dir)");
	if (!(cfg->timeout_s > 0))
		return dt_err_set(err, DT_USAGE, "the evaluator's timeout must be positive, got %g", cfg->timeout_s);
	if (cfg->train_steps <= 0)
		return dt_err_set(err, DT_USAGE, "train_steps must be positive, got %lld", (long long)cfg->train_steps);

	struct evaluator e = { .cfg = cfg, .last_step = -1, .fail_step = -1 };
	enum dt_status st = setup(&e, err);
	if (st) {
		release(&e);
		return st;
	}
	if (warm) {
		/* Estimator's rule: a checkpoint of the run's own wins. */
		char path[DT_CKPT_PATH_MAX];
		int64_t step = 0;
		enum dt_ckpt_poll res = DT_CKPT_POLL_NONE;
		if (cfg->output_dir && *cfg->output_dir &&
		    (st = dt_ckpt_latest_path(cfg->output_dir, path, sizeof(path), &step, &res, err))) {
			release(&e);
			return st;
		}
		if (res == DT_CKPT_POLL_NONE) {
			/* reported at the source's global step (a dtrain checkpoint's; else 0) */
			struct dt_warm_report rep;
			dt_model_init_params(e.model, cfg->seed);
			if (!(st = dt_warm_start(e.model, cfg->warm_start_from, cfg->warm_start_vars, &rep, err)))
				st = evaluate_model(&e, cfg->warm_start_from, rep.global_step, out, err);
			release(&e);
			return st;
		}
	}
	char what[64];
	if (cfg->source)
		snprintf(what, sizeof(what), "the caller's evaluation data");
	else
		snprintf(what, sizeof(what), "%s split (%u examples)", dt_split_name(cfg->split), e.data.count);
	dt_info("evaluator: %s, %s of '%s', until global step %lld; "
		"summaries to '%s'", what,
		cfg->once ? "the newest checkpoint, once," : cfg->mode == DT_EVAL_EVERY ? "every checkpoint" : "the newest checkpoint",
		cfg->output_dir, (long long)cfg->train_steps, dt_events_path(e.events));

	int64_t deadline = dt_deadline_in(cfg->timeout_s);
	for (;;) {
		char path[DT_CKPT_PATH_MAX];
		int64_t step = -1;
		int found = 0;
		struct dt_err perr = DT_ERR_INIT;
		if ((st = next_checkpoint(&e, path, sizeof(path), &step, &found, &perr))) {
			if (strcmp(e.state_error, perr.msg) != 0)
				dt_warn("cannot read the checkpoint state (retrying): %s", perr.msg);
			snprintf(e.state_error, sizeof(e.state_error), "%s", perr.msg);
		} else {
			e.state_error[0] = '\0';
		}
		if (found) {
			int evaluated;
			if ((st = evaluate_one(&e, path, step, &evaluated, out, err)))
				break;
			if (evaluated) {
				if (cfg->once || out->last_step >= cfg->train_steps)
					break;
				deadline = dt_deadline_in(cfg->timeout_s);
				continue;
			}
		}
		if (dt_deadline_passed(deadline)) {
			st = timeout_error(&e, err);
			break;
		}
		double left = (double)dt_deadline_ms_left(deadline) / 1e3;
		dt_sleep(left < DT_EVAL_POLL_SECONDS ? left : DT_EVAL_POLL_SECONDS);
	}
	release(&e);
	return st;
}
