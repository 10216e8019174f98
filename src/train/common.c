#include "train/common.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/trace.h"
#include "data/pipeline.h"
#include "net/loop.h"
#include "tensor/blas.h"
#include "train/roles.h"
#include "train/session.h"

void dt_train_format_eta(double seconds, char *buf, size_t cap)
{
	if (!(seconds >= 0) || seconds > 1e7) {
		snprintf(buf, cap, "?");
		return;
	}
	long s = lround(seconds);
	if (s >= 3600)
		snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
	else
		snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

void dt_train_add_weight_decay_range(struct dt_model *m, float wd, size_t lo, size_t hi)
{
	float *p = dt_model_params(m), *g = dt_model_grads(m);
	for (int i = 0; i < dt_model_num_variables(m); i++) {
		if (!dt_model_variable_is_kernel(m, i))
			continue;
		const struct dt_variable *v = dt_model_variable(m, i);
		size_t a = v->offset > lo ? v->offset : lo;
		size_t z = v->offset + v->count < hi ? v->offset + v->count : hi;
		for (size_t j = a; j < z; j++)
			g[j] += wd * p[j];
	}
}

void dt_train_add_weight_decay(struct dt_model *m, float wd)
{
	dt_train_add_weight_decay_range(m, wd, 0, dt_model_num_params(m));
}

double dt_train_clip_grads(struct dt_model *m, const struct dt_hparams *hp, int summed)
{
	if (!(hp->clip_grad_norm > 0))
		return 0;
	float *g = dt_model_grads(m);
	const size_t nma = dt_model_sync_mean_floats(m);
	if (nma == 0)
		return dt_clip_by_global_norm(g, dt_model_num_params(m), summed, hp->clip_grad_norm);
	/* Where moving averages' batch values ride in the buffer (a replica's sum
	 * to the in-graph master: nn/model.h's dt_model_moving_average_values)
	 * they are no gradient: set aside, out of the norm, and put back unscaled. */
	float *kept = dt_xmalloc(nma * sizeof(float)), *k = kept;
	for (int i = 0; i < dt_model_num_variables(m); i++) {
		const struct dt_variable *v = dt_model_variable(m, i);
		if (v->kind == DT_VAR_MOVING_AVERAGE) {
			memcpy(k, g + v->offset, v->count * sizeof(float));
			memset(g + v->offset, 0, v->count * sizeof(float));
			k += v->count;
		}
	}
	const double norm = dt_clip_by_global_norm(g, dt_model_num_params(m), summed, hp->clip_grad_norm);
	k = kept;
	for (int i = 0; i < dt_model_num_variables(m); i++) {
		const struct dt_variable *v = dt_model_variable(m, i);
		if (v->kind == DT_VAR_MOVING_AVERAGE) {
			memcpy(g + v->offset, k, v->count * sizeof(float));
			k += v->count;
		}
	}
	free(kept);
	return norm;
}

static enum dt_status evaluate_shard(struct dt_model *model, const struct dt_dataset *ds, int shard_index,
				     int shard_count, double sums[DT_EVAL_SUMS], struct dt_err *err);

enum dt_status dt_train_evaluate_shard(struct dt_model *model, const struct dt_dataset *ds, int shard_index,
				       int shard_count, double sums[DT_EVAL_SUMS], struct dt_err *err)
{
	const int64_t t0 = dt_trace_begin();
	enum dt_status st = evaluate_shard(model, ds, shard_index, shard_count, sums, err);
	dt_trace_end(t0, "evaluate", "evaluation", -1, -1);
	return st;
}

static enum dt_status evaluate_shard(struct dt_model *model, const struct dt_dataset *ds, int shard_index,
				     int shard_count, double sums[DT_EVAL_SUMS], struct dt_err *err)
{
	if (ds->text)
		return dt__train_evaluate_text(model, ds->text, shard_index, shard_count, sums, err);
	struct dt_pipeline_config pc = {
		.data = ds, .batch_size = dt_model_max_batch(model), .shard_index = shard_index,
		.shard_count = shard_count, .single_pass = 1,
	};
	struct dt_pipeline *p;
	enum dt_status st = dt_pipeline_new(&pc, &p, err);
	if (st)
		return dt_err_prefix(err, "cannot evaluate");
	double loss_sum = 0;
	int64_t correct = 0, n = 0;
	const struct dt_batch *b;
	while ((b = dt_pipeline_next(p))) {
		int c = 0;
		float loss = dt_model_eval_batch(model, b->x, b->y, b->size, &c);
		loss_sum += (double)loss * b->size;
		correct += c;
		n += b->size;
	}
	dt_pipeline_free(p);
	sums[0] = loss_sum;
	sums[1] = (double)correct;
	sums[2] = sums[3] = (double)n;
	sums[4] = (double)correct;
	sums[5] = loss_sum;
	sums[6] = sums[7] = 0; /* no approx_bleu_score off text */
	return DT_OK;
}

void dt_train_eval_result(const double v[DT_EVAL_SUMS], int text, struct dt_eval_result *out)
{
	memset(out, 0, sizeof(*out));
	out->examples = (int64_t)v[3];
	out->accuracy = v[2] > 0 ? v[1] / v[2] : 0;
	out->loss = v[2] > 0 ? v[0] / v[2] : 0;
	out->text = text;
	out->accuracy_per_sequence = v[3] > 0 ? v[4] / v[3] : 0;
	out->neg_log_perplexity = v[2] > 0 ? -v[5] / v[2] : 0;
	out->bleu = text && v[7] > 0;
	out->approx_bleu_score = out->bleu ? v[6] / v[7] : 0;
}

void dt_train_log_eval(int64_t step, const struct dt_eval_result *r)
{
	char bleu[48] = "";
	if (r->bleu)
		snprintf(bleu, sizeof(bleu), " approx_bleu_score %.4f", r->approx_bleu_score);
	if (r->text)
		dt_info("eval at step %lld: accuracy %.4f accuracy_per_sequence %.4f neg_log_perplexity %.4f%s loss %.4f",
			(long long)step, r->accuracy, r->accuracy_per_sequence, r->neg_log_perplexity, bleu, r->loss);
	else
		dt_info("eval at step %lld: accuracy %.4f loss %.4f", (long long)step, r->accuracy, r->loss);
}

enum dt_status dt_train_evaluate(struct dt_model *model, const struct dt_dataset *ds, struct dt_eval_result *out,
				 struct dt_err *err)
{
	double v[DT_EVAL_SUMS];
	enum dt_status st = dt_train_evaluate_shard(model, ds, 0, 1, v, err);
	if (st)
		return st;
	dt_train_eval_result(v, ds->text != NULL, out);
	return DT_OK;
}

struct dt_train_bg_eval {
	struct dt_model *model;          /* the evaluation's own: params are the snapshot */
	const struct dt_train_source *src; /* the caller's evaluation, or NULL: `test` */
	const struct dt_dataset *test;
	struct dt_loop *loop;            /* woken at the end; may be NULL */
	pthread_t thread;
	int running;                     /* started, not polled yet */
	int threaded;                    /* `thread` must be joined */
	atomic_int finished;
	int64_t step;
	double delay_s;                  /* DTRAIN_TEST_EVAL_DELAY_S (tests): a slow evaluation */
	struct dt_eval_result res;
	enum dt_status st;
	struct dt_err err;
};

static void *bg_eval_main(void *arg)
{
	struct dt_train_bg_eval *e = arg;
	if (e->delay_s > 0)
		dt_sleep(e->delay_s);
	e->st = e->src ? e->src->evaluate(e->src->arg, e->model, &e->res, &e->err)
		       : dt_train_evaluate(e->model, e->test, &e->res, &e->err);
	atomic_store(&e->finished, 1);
	if (e->loop)
		dt_loop_wake(e->loop);
	return NULL;
}

enum dt_status dt_train_bg_eval_new(const struct dt_train_config *tc, const struct dt_dataset *test, int batch,
				    struct dt_loop *loop, struct dt_train_bg_eval **out, struct dt_err *err)
{
	*out = NULL;
	struct dt_train_bg_eval *e = dt_xcalloc(1, sizeof(*e));
	e->src = tc->source;
	enum dt_status st = dt_train_make_model(tc, test, batch > 0 ? batch : 1, &e->model, err);
	if (st) {
		free(e);
		return dt_err_prefix(err, "cannot build the model for --eval_every");
	}
	e->test = test;
	e->loop = loop;
	/* Fault injection for the tests: an evaluation longer than the peers'
	 * deadlines must not fail their steps. */
	const char *delay = getenv("DTRAIN_TEST_EVAL_DELAY_S");
	e->delay_s = delay ? atof(delay) : 0;
	*out = e;
	return DT_OK;
}

void dt_train_bg_eval_start(struct dt_train_bg_eval *e, const float *params, int64_t step)
{
	DT_ASSERT(!e->running);
	memcpy(dt_model_params(e->model), params, dt_model_num_params(e->model) * sizeof(float));
	e->step = step;
	e->err = (struct dt_err)DT_ERR_INIT;
	e->running = 1;
	atomic_store(&e->finished, 0);
	int rc = pthread_create(&e->thread, NULL, bg_eval_main, e);
	e->threaded = rc == 0;
	if (rc) { /* slower, never wrong: the peers wait as long as it takes */
		dt_debug("cannot start the evaluation thread (%s): evaluating inline", strerror(rc));
		bg_eval_main(e);
	}
}

int dt_train_bg_eval_busy(const struct dt_train_bg_eval *e)
{
	return e && e->running && !atomic_load(&e->finished);
}

enum dt_status dt_train_bg_eval_poll(struct dt_train_bg_eval *e, int wait, struct dt_err *err)
{
	if (!e || !e->running || (!wait && !atomic_load(&e->finished)))
		return DT_OK;
	if (e->threaded) {
		int rc = pthread_join(e->thread, NULL);
		DT_ASSERT(rc == 0);
		e->threaded = 0;
	}
	e->running = 0;
	if (e->st) {
		if (err) {
			*err = e->err;
			dt_err_prefix(err, "cannot evaluate step %lld", (long long)e->step);
		}
		return e->st;
	}
	dt_train_log_eval(e->step, &e->res);
	return DT_OK;
}

void dt_train_bg_eval_free(struct dt_train_bg_eval *e)
{
	if (!e)
		return;
	if (e->threaded)
		pthread_join(e->thread, NULL);
	dt_model_free(e->model);
	free(e);
}

enum dt_status dt_train_make_model(const struct dt_train_config *tc, const struct dt_dataset *shape, int max_batch,
				   struct dt_model **out, struct dt_err *err)
{
	if (tc->source)
		return tc->source->make_model(tc->source->arg, max_batch, out, err);
	return dt_train_model_new(tc->models, &tc->hp, shape, max_batch, out, err);
}

enum dt_status dt_train_make_input(const struct dt_train_config *tc, const struct dt_dataset *train,
				   const struct dt_model *model, struct dt_input **out, struct dt_err *err)
{
	*out = NULL;
	if (tc->source)
		return tc->source->make_input(tc->source->arg, model, tc->hp.batch_size, tc->seed, out, err);
	*out = dt_train_input_new(train, &tc->hp, tc->seed, tc->prefetch);
	return DT_OK;
}

enum dt_status dt_train_setup_load(const struct dt_train_config *cfg, int load_test, struct dt_train_setup *out,
				   struct dt_err *err)
{
	const struct dt_hparams *hp = &cfg->hp;
	enum dt_status st = dt_blas_load(cfg->threads, err);
	if (st)
		return st;
	struct dt_blas_info blas = dt_blas_info();
	dt_info("blas: OpenBLAS core %s (%s), %d thread(s)", blas.core, blas.core_source, blas.threads);
	if (cfg->source) { /* the caller's model and data: nothing to load */
		out->model = cfg->source->model;
		out->model_borrowed = 1;
		return dt_train_make_input(cfg, NULL, out->model, &out->input, err);
	}
	int64_t t0 = dt_now_ns();
	if ((st = dt_problem_load(cfg->problem, cfg->data_dir, cfg->data, DT_SPLIT_TRAIN, cfg->seed, &out->train, err)))
		return st;
	if (load_test && (st = dt_problem_load(cfg->problem, cfg->data_dir, cfg->data, DT_SPLIT_TEST, cfg->seed, &out->test, err)))
		return st;
	out->load_seconds = (double)(dt_now_ns() - t0) / 1e9;
	dt_info("data: %u train, %u test examples: %s (%.2f s)", out->train.count, out->test.count, out->train.source,
		out->load_seconds);
	const struct dt_dataset *d = &out->train;
	if ((st = dt_train_make_model(cfg, d, dt_train_max_batch(hp, d), &out->model, err)))
		return st;
	char desc[256];
	dt_model_describe(out->model, desc, sizeof(desc));
	dt_info("model: %s", desc);
	struct dt_model_memory mm;
	dt_model_memory(out->model, &mm);
	if (mm.activation_bytes)
		dt_info("memory for a batch of %d: activations %.1f MiB, their gradients %.1f MiB (%.1f MiB unshared)",
			mm.batch, (double)mm.activation_bytes / 1048576.0, (double)mm.gradient_bytes / 1048576.0,
			(double)mm.gradient_bytes_unshared / 1048576.0);
	return dt_train_make_input(cfg, &out->train, out->model, &out->input, err);
}

void dt_train_setup_session(struct dt_train_setup *s, const struct dt_train_config *cfg,
			    struct dt_session_config *out)
{
	*out = (struct dt_session_config){
		.train = cfg, .model = s->model, .input = s->input, .test = &s->test, .train_split = &s->train, .height = s->train.height,
		.width = s->train.width, .channels = s->train.channels, .num_classes = s->train.num_classes,
	};
	s->input = NULL; /* the session owns it now */
}

void dt_train_setup_release(struct dt_train_setup *s)
{
	dt_input_free(s->input);
	if (!s->model_borrowed)
		dt_model_free(s->model);
	dt_dataset_release(&s->test);
	dt_dataset_release(&s->train);
}

enum dt_status dt_train_drive(const struct dt_train_config *cfg, struct dt_session *s, struct dt_err *err)
{
	if (cfg->source && cfg->source->drive)
		return cfg->source->drive(cfg->source->arg, s, err);
	return dt_session_run(s, err);
}

enum dt_status dt_train_run(const struct dt_train_config *cfg, int load_test, const struct dt_strategy *strategy,
			    void *arg, struct dt_train_result *res, struct dt_err *err)
{
	struct dt_train_setup t;
	memset(&t, 0, sizeof(t));
	struct dt_session *s = NULL;
	enum dt_status st = dt_train_setup_load(cfg, load_test, &t, err);
	if (!st) {
		struct dt_session_config sc;
		dt_train_setup_session(&t, cfg, &sc);
		sc.strategy = strategy;
		sc.strategy_arg = arg;
		if (!(st = dt_session_new(&sc, &s, err)))
			st = dt_train_drive(cfg, s, err);
	}
	if (s)
		dt_session_result(s, res);
	res->load_seconds = t.load_seconds;
	dt_session_free(s);
	dt_train_setup_release(&t);
	return st;
}

enum dt_status dt__role_train(const struct dt_ps_run_config *cfg, struct dt__role *r, int with_input, int load_test,
			      const struct dt_strategy *strategy, void *arg, struct dt_train_result *res,
			      struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	enum dt_status st = dt_blas_load(tc->threads, err);
	if (st)
		return st;
	int64_t t0 = dt_now_ns();
	st = dt__role_setup(cfg, with_input, load_test, -1, r, err);
	double load_seconds = (double)(dt_now_ns() - t0) / 1e9;
	if (st)
		return st;
	const struct dt_dataset *shape = with_input ? &r->train : &r->test;
	struct dt_session_config sc = {
		.train = tc, .strategy = strategy, .strategy_arg = arg, .model = r->model, .test = &r->test,
		.train_split = with_input ? &r->train : NULL,
		.height = shape->height, .width = shape->width, .channels = shape->channels,
		.num_classes = shape->num_classes,
	};
	if (with_input && (st = dt_train_make_input(tc, &r->train, r->model, &sc.input, err)))
		return st;
	struct dt_session *s = NULL;
	if (!(st = dt_session_new(&sc, &s, err)))
		st = dt_train_drive(tc, s, err);
	if (s)
		dt_session_result(s, res);
	res->load_seconds = load_seconds;
	dt_session_free(s);
	return st;
}

void dt__ps_chief_config(const struct dt_ps_run_config *cfg, struct dt_train_config *tc_out,
			 struct dt_ps_run_config *out)
{
	*tc_out = *cfg->train;
	tc_out->save_summary_steps = 0;
	*out = *cfg;
	out->train = tc_out;
}
