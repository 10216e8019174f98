#include "train/local.h"
#include "train/common.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/rng.h"
#include "data/pipeline.h"
#include "data/problem.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "tensor/blas.h"

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
}

/* Everything one local run owns, released in one place. */
struct run {
	struct dt_dataset train, test;
	struct dt_model *model;
	struct dt_optimizer opt;
	struct dt_pipeline *pipe;
};

static void run_release(struct run *r)
{
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
	if ((st = dt_problem_load(cfg->problem, cfg->data_dir, DT_SPLIT_TRAIN, cfg->seed, &r->train, err)))
		return st;
	if (cfg->eval_at_end || cfg->eval_every > 0)
		if ((st = dt_problem_load(cfg->problem, cfg->data_dir, DT_SPLIT_TEST, cfg->seed, &r->test, err)))
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
	struct dt_pipeline_config pc = {
		.data = &r->train, .batch_size = hp->batch_size, .seed = cfg->seed,
		.shard_count = 1, .prefetch = cfg->prefetch,
	};
	return dt_pipeline_new(&pc, &r->pipe, err);
}

/* Progress over the current log window. */
struct window {
	double loss_sum;
	int64_t correct, examples, steps;
	int64_t start_ns;
};

static void log_progress(const struct dt_train_config *cfg, int64_t step, float lr, struct window *w,
			 int64_t train_start_ns)
{
	int64_t now = dt_now_ns();
	double secs = (double)(now - w->start_ns) / 1e9;
	double eps = secs > 0 ? (double)w->examples / secs : 0;
	double elapsed = (double)(now - train_start_ns) / 1e9;
	double eta_s = elapsed / (double)step * (double)(cfg->train_steps - step);
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

	struct window w = { .start_ns = dt_now_ns() };
	int64_t train_start = w.start_ns, after_first = 0;
	double eval_seconds = 0, window_loss = 0;
	for (int64_t step = 1; step <= cfg->train_steps; step++) {
		const struct dt_batch *b = dt_pipeline_next(r.pipe);
		float lr = dt_lr_at(&cfg->hp, step - 1, cfg->train_steps);
		int correct = 0;
		float loss = dt_model_train_batch(r.model, b->x, b->y, b->size, &dropout_rng, &correct);
		if (!isfinite(loss)) {
			run_release(&r);
			return dt_err_set(err, DT_RUNTIME, "training diverged at step %lld: loss is %f",
					  (long long)step, (double)loss);
		}
		if (wd > 0)
			dt_train_add_weight_decay(r.model, wd);
		dt_optimizer_apply(&r.opt, params, grads, 0, nparams, lr, step);

		if (step == 1) {
			after_first = dt_now_ns();
			res->first_step_seconds = dt_process_age_seconds();
			dt_debug("first step done %.3f s after process start", res->first_step_seconds);
		}
		w.loss_sum += (double)loss;
		w.correct += correct;
		w.examples += batch;
		w.steps++;
		if ((cfg->log_every > 0 && step % cfg->log_every == 0) || step == cfg->train_steps) {
			window_loss = w.loss_sum / (double)w.steps;
			if (cfg->log_every > 0)
				log_progress(cfg, step, lr, &w, train_start);
			w = (struct window){ .start_ns = dt_now_ns() };
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
	res->steps = cfg->train_steps;
	res->final_loss = window_loss;
	res->train_seconds = (double)(train_end - train_start) / 1e9 - eval_seconds;
	double steady = (double)(train_end - after_first) / 1e9 - eval_seconds;
	if (cfg->train_steps > 1 && steady > 0)
		res->examples_per_sec = (double)(cfg->train_steps - 1) * batch / steady;
	else if (res->train_seconds > 0)
		res->examples_per_sec = (double)batch / res->train_seconds;

	if (cfg->eval_at_end) {
		if ((st = dt_train_evaluate(r.model, &r.test, &res->eval, err))) {
			run_release(&r);
			return st;
		}
	}
	run_release(&r);
	return DT_OK;
}
