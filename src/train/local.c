#include "train/local.h"
#include "train/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/rng.h"
#include "data/pipeline.h"
#include "data/problem.h"
#include "distribute/mirrored.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "tensor/blas.h"
#include "train/checkpoint.h"
#include "train/evaluator.h"
#include "train/summary.h"

void dt_train_config_defaults(struct dt_train_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->problem = "fashion_mnist";
	cfg->train_steps = 2000;
	cfg->eval_at_end = 1;
	cfg->log_every = 100;
	cfg->seed = 1;
	cfg->threads = 1;
	cfg->prefetch = 1;
	cfg->output_dir = "";
	cfg->keep_checkpoint_max = 5;
	cfg->save_summary_steps = 100;
}

/* Everything one local run owns, released in one place. */
struct run {
	struct dt_dataset train, test;
	struct dt_model *model;
	struct dt_optimizer opt;
	struct dt_pipeline *pipe;
	struct dt_mirrored *mirror; /* NULL with one replica */
	struct dt_summary *summary; /* TensorBoard scalars; NULL without output_dir */
	struct dt_events *eval_events; /* train_and_evaluate's eval/ summaries; NULL otherwise */
	int saving;                 /* output_dir set: checkpoints on */
	struct dt_saver saver;
	char *hparams_json;         /* saved into each checkpoint */
};

static void run_release(struct run *r)
{
	dt_saver_release(&r->saver);
	free(r->hparams_json);
	dt_events_free(r->eval_events);
	dt_summary_free(r->summary);
	dt_mirrored_free(r->mirror);
	dt_pipeline_free(r->pipe);
	dt_optimizer_release(&r->opt);
	dt_model_free(r->model);
	dt_dataset_release(&r->test);
	dt_dataset_release(&r->train);
}

static enum dt_status setup(const struct dt_train_config *cfg, struct run *r, struct dt_train_result *res,
			    struct dt_err *err)
{
	const struct dt_hparams *hp = &cfg->hp;
	enum dt_status st = dt_blas_load(cfg->threads, err);
	if (st)
		return st;
	struct dt_blas_info blas = dt_blas_info();
	dt_info("blas: OpenBLAS core %s (%s), %d thread(s)", blas.core, blas.core_source, blas.threads);

	int64_t t0 = dt_now_ns();
	if ((st = dt_problem_load(cfg->problem, cfg->data_dir, cfg->data, DT_SPLIT_TRAIN, cfg->seed, &r->train, err)))
		return st;
	if (cfg->eval_at_end || cfg->eval_every > 0 || cfg->eval_after_save)
		if ((st = dt_problem_load(cfg->problem, cfg->data_dir, cfg->data, DT_SPLIT_TEST, cfg->seed, &r->test, err)))
			return st;
	res->load_seconds = (double)(dt_now_ns() - t0) / 1e9;
	dt_info("data: %u train, %u test examples: %s (%.2f s)", r->train.count, r->test.count, r->train.source,
		res->load_seconds);

	const struct dt_dataset *d = &r->train;
	if ((st = dt_model_new(hp, d->height, d->width, d->channels, d->num_classes, hp->batch_size, &r->model, err)))
		return st;
	dt_model_init_params(r->model, cfg->seed);
	char desc[256];
	dt_model_describe(r->model, desc, sizeof(desc));
	dt_info("model: %s", desc);
	res->num_params = (int64_t)dt_model_num_params(r->model);

	if ((st = dt_optimizer_init(&r->opt, hp, dt_model_num_params(r->model), err)))
		return st;
	if (cfg->replicas > 1) {
		struct dt_mirrored_config mc = {
			.hp = hp, .height = d->height, .width = d->width, .channels = d->channels,
			.num_classes = d->num_classes, .replicas = cfg->replicas, .batch_size = hp->batch_size,
			.seed = cfg->seed,
		};
		if ((st = dt_mirrored_new(r->model, &mc, &r->mirror, err)))
			return st;
		dt_info("mirrored: %d replicas on threads split each batch of %d, OpenBLAS 1 thread each",
			cfg->replicas, hp->batch_size);
	}
	return DT_OK;
}

/* The training input, starting at a resume position (0, 0 for a fresh run). */
static enum dt_status start_pipeline(const struct dt_train_config *cfg, struct run *r, int64_t epoch,
				     int64_t offset, struct dt_err *err)
{
	struct dt_pipeline_config pc = {
		.data = &r->train, .batch_size = cfg->hp.batch_size, .seed = cfg->seed,
		.shard_count = 1, .prefetch = cfg->prefetch, .start_epoch = epoch, .start_offset = offset,
	};
	return dt_pipeline_new(&pc, &r->pipe, err);
}

/* With an output dir: sets up the saver and resumes from the directory's
 * latest checkpoint (parameters, optimizer slots, step, dropout RNG, input
 * position), so that 100 steps + 100 resumed equal 200 in one go. Starts the
 * pipeline either way; *step0 is the step to continue after. */
static enum dt_status restore(const struct dt_train_config *cfg, struct run *r, struct dt_rng *dropout_rng,
			      int64_t *step0, struct dt_err *err)
{
	*step0 = 0;
	if (!cfg->output_dir || !*cfg->output_dir)
		return start_pipeline(cfg, r, 0, 0, err);
	enum dt_status st = dt_saver_init(&r->saver, cfg->output_dir, cfg->save_checkpoints_steps,
					  cfg->save_checkpoints_secs, cfg->keep_checkpoint_max, err);
	if (st)
		return st;
	r->saving = 1;
	r->hparams_json = dt_ckpt_hparams_json(&cfg->hp);
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, r->model);
	dt_ckpt_contents_set_optimizer(&c, &r->opt);
	int found;
	char path[DT_CKPT_PATH_MAX];
	if ((st = dt_ckpt_restore_latest(cfg->output_dir, &c, &found, path, sizeof(path), err)))
		return st;
	if (!found) {
		dt_info("no checkpoint in '%s': training from scratch", cfg->output_dir);
		return start_pipeline(cfg, r, 0, 0, err);
	}
	dt_info("restored step %lld from %s", (long long)c.global_step, path);
	*step0 = c.global_step;
	if (c.has_rng)
		*dropout_rng = c.dropout_rng;
	dt_saver_mark(&r->saver, c.global_step);
	if ((st = start_pipeline(cfg, r, c.pipeline_epoch, c.pipeline_offset, err)))
		return dt_err_prefix(err, "cannot resume from '%s'", path);
	return DT_OK;
}

/* Saves step `step` through the saver (train/checkpoint.h). */
static enum dt_status save_checkpoint(struct run *r, int64_t step, const struct dt_rng *dropout_rng,
				      struct dt_err *err)
{
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, r->model);
	dt_ckpt_contents_set_optimizer(&c, &r->opt);
	c.global_step = step;
	c.has_rng = 1;
	c.dropout_rng = *dropout_rng;
	dt_pipeline_position(r->pipe, &c.pipeline_epoch, &c.pipeline_offset);
	c.hparams = r->hparams_json;
	return dt_saver_save(&r->saver, &c, err);
}

/* The chief's TensorBoard files (train/summary.h, train/evaluator.h), when
 * there is an output dir. */
static enum dt_status open_summaries(const struct dt_train_config *cfg, struct run *r, struct dt_err *err)
{
	if (!cfg->output_dir || !*cfg->output_dir)
		return DT_OK;
	enum dt_status st;
	if (cfg->save_summary_steps > 0) {
		struct dt_summary_config sc = { .dir = cfg->output_dir, .every = cfg->save_summary_steps,
						.last_step = cfg->train_steps, .batch_size = cfg->hp.batch_size,
						.hp = &cfg->hp };
		if ((st = dt_summary_new(&sc, &r->summary, err)))
			return st;
	}
	if (cfg->eval_after_save)
		return dt_eval_open_events(cfg->output_dir, DT_SPLIT_TEST, &r->eval_events, err);
	return DT_OK;
}

/* Progress over the current log window. */
struct window {
	double loss_sum;
	int64_t correct, examples, steps;
	int64_t start_ns;
};

static void log_progress(const struct dt_train_config *cfg, int64_t step, int64_t step0, float lr,
			 struct window *w, int64_t train_start_ns)
{
	int64_t now = dt_now_ns();
	double secs = (double)(now - w->start_ns) / 1e9;
	double eps = secs > 0 ? (double)w->examples / secs : 0;
	double elapsed = (double)(now - train_start_ns) / 1e9;
	double eta_s = elapsed / (double)(step - step0) * (double)(cfg->train_steps - step);
	char eta[32];
	dt_train_format_eta(eta_s, eta, sizeof(eta));
	dt_info("step %lld/%lld loss %.4f acc %.3f lr %.3g %.0f examples/s eta %s", (long long)step,
		(long long)cfg->train_steps, w->loss_sum / (double)w->steps,
		(double)w->correct / (double)w->examples, (double)lr, eps, eta);
}

enum dt_status dt_train_local(const struct dt_train_config *cfg, struct dt_train_result *res, struct dt_err *err)
{
	memset(res, 0, sizeof(*res));
	if (cfg->train_steps <= 0)
		return dt_err_set(err, DT_USAGE, "train_steps must be positive, got %lld", (long long)cfg->train_steps);
	enum dt_status st = dt_hparams_validate(&cfg->hp, err);
	if (st)
		return st;

	struct run r;
	memset(&r, 0, sizeof(r));
	if ((st = setup(cfg, &r, res, err))) {
		run_release(&r);
		return st;
	}

	struct dt_rng dropout_rng;
	dt_rng_derive(&dropout_rng, cfg->seed, "dropout", 0);
	const int batch = cfg->hp.batch_size;
	const float wd = (float)cfg->hp.weight_decay;
	float *params = dt_model_params(r.model);
	const float *grads = dt_model_grads(r.model);
	const size_t nparams = dt_model_num_params(r.model);

	int64_t step0;
	if ((st = restore(cfg, &r, &dropout_rng, &step0, err)) || (st = open_summaries(cfg, &r, err))) {
		run_release(&r);
		return st;
	}
	if (step0 >= cfg->train_steps)
		dt_info("the checkpoint is at step %lld, train_steps is %lld: nothing to train", (long long)step0,
			(long long)cfg->train_steps);
	struct window w = { .start_ns = dt_now_ns() };
	int64_t train_start = w.start_ns, after_first = 0;
	double eval_seconds = 0, window_loss = 0;
	struct dt_eval_result last_eval = { 0 };
	int64_t last_eval_step = -1;
	for (int64_t step = step0 + 1; step <= cfg->train_steps; step++) {
		const struct dt_batch *b = dt_pipeline_next(r.pipe);
		float lr = dt_lr_at(&cfg->hp, step - 1, cfg->train_steps);
		int correct = 0;
		float loss = dt_mirrored_step(r.mirror, r.model, b->x, b->y, b->size, &dropout_rng, &correct);
		if (!isfinite(loss)) {
			run_release(&r);
			return dt_err_set(err, DT_RUNTIME, "training diverged at step %lld: loss is %f",
					  (long long)step, (double)loss);
		}
		if (wd > 0)
			dt_train_add_weight_decay(r.model, wd);
		dt_optimizer_apply(&r.opt, params, grads, 0, nparams, lr, step);

		if (step == step0 + 1) {
			after_first = dt_now_ns();
			res->first_step_seconds = dt_process_age_seconds();
			dt_debug("first step done %.3f s after process start", res->first_step_seconds);
		}
		w.loss_sum += (double)loss;
		w.correct += correct;
		w.examples += batch;
		w.steps++;
		dt_summary_step(r.summary, step, loss, correct, lr);
		dt_progress_step(step, cfg->train_steps); /* the launcher's STEP and STEPS/S */
		if ((cfg->log_every > 0 && step % cfg->log_every == 0) || step == cfg->train_steps) {
			window_loss = w.loss_sum / (double)w.steps;
			if (cfg->log_every > 0)
				log_progress(cfg, step, step0, lr, &w, train_start);
			w = (struct window){ .start_ns = dt_now_ns() };
		}
		if (r.saving && (dt_saver_due(&r.saver, step) || step == cfg->train_steps)) {
			int64_t s0 = dt_now_ns();
			if ((st = save_checkpoint(&r, step, &dropout_rng, err))) {
				run_release(&r);
				return st;
			}
			if (r.eval_events) { /* train_and_evaluate */
				int64_t e0 = dt_now_ns();
				if ((st = dt_eval_in_process(r.eval_events, r.model, &r.test, step, &last_eval, err))) {
					run_release(&r);
					return st;
				}
				last_eval_step = step;
				eval_seconds += (double)(dt_now_ns() - e0) / 1e9;
			}
			w.start_ns += dt_now_ns() - s0;
		}
		if (cfg->eval_every > 0 && step % cfg->eval_every == 0 && step != cfg->train_steps) {
			int64_t e0 = dt_now_ns();
			struct dt_eval_result ev;
			if ((st = dt_train_evaluate(r.model, &r.test, &ev, err))) {
				run_release(&r);
				return st;
			}
			dt_info("eval at step %lld: accuracy %.4f loss %.4f", (long long)step, ev.accuracy, ev.loss);
			double es = (double)(dt_now_ns() - e0) / 1e9;
			eval_seconds += es;
			w.start_ns += dt_now_ns() - e0;
		}
	}
	int64_t train_end = dt_now_ns();
	const int64_t trained = cfg->train_steps > step0 ? cfg->train_steps - step0 : 0;
	res->steps = step0 > cfg->train_steps ? step0 : cfg->train_steps;
	res->final_loss = window_loss;
	res->train_seconds = trained ? (double)(train_end - train_start) / 1e9 - eval_seconds : 0;
	double steady = (double)(train_end - after_first) / 1e9 - eval_seconds;
	if (trained > 1 && steady > 0)
		res->examples_per_sec = (double)(trained - 1) * batch / steady;
	else if (res->train_seconds > 0)
		res->examples_per_sec = (double)batch / res->train_seconds;

	if (cfg->eval_at_end && last_eval_step == res->steps) {
		res->eval = last_eval; /* evaluated right after the final save */
	} else if (cfg->eval_at_end) {
		if ((st = dt_train_evaluate(r.model, &r.test, &res->eval, err))) {
			run_release(&r);
			return st;
		}
	}
	run_release(&r);
	return DT_OK;
}
