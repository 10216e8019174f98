/*
 * session.c — the public session over the training engine (train/session.h).
 *
 * A dtrain_session collects options until it starts (the first step, run,
 * evaluate or gradients); then it compiles the model (api/builder.c or the
 * custom adapter in api/model.c), wraps the data in an engine input
 * (train/input.h) whose batches carry nn/'s general batch, and opens an
 * engine session with the strategy of its mode. The strategy's compute
 * runs dt_model_step on that batch, so any model — a layer graph or a
 * custom callback — trains on the one loop (restore, save, summaries,
 * progress lines, hooks are the engine's).
 *
 * Modes come from the cluster as TensorFlow picks them (dtrain.h). Only
 * the modes whose strategy takes the general batch run here (see
 * mode_runs); the others say so with DT_CONFIG instead of training
 * something else.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/alloc.h"
#include "base/log.h"
#include "distribute/mirrored.h"
#include "nn/hparams.h"
#include "nn/model.h"
#include "tensor/blas.h"
#include "train/local.h"
#include "train/session.h"
#include "train/strategy.h"

enum mode { M_LOCAL, M_MIRRORED, M_PS_ASYNC, M_PS_SYNC, M_RING, M_PS_SERVER, M_EVALUATOR };
static const char *const mode_names[] = { "local", "mirrored", "ps_async", "ps_sync", "multi_worker_mirrored",
					  "ps_server", "evaluator" };
enum state { S_NEW, S_STARTED, S_CLOSED };

/* ---- the engine input over a public data source ---- */

struct api_batch {
	struct dt_batch b;      /* what the engine hands its strategy (first: the strategy casts back) */
	struct dt_model_batch mb;
};

struct api_input {
	struct dt_input base;   /* first: the engine holds a struct dt_input * */
	dtrain_data *data;
	const dtrain_model *pm;
	const struct dt_model *model;
	const int *feeds;       /* public input of each model input */
	int target_feed;
	int batch;
	uint64_t seed;
	struct dt__api_reader *r;
	void *bufs[DT_API_MAX_INPUTS]; /* by public input, (batch, per_example) */
	struct api_batch cur;
};

static enum dt_status in_start(struct dt_input *in, int index, int count, int64_t epoch, int64_t offset,
			       struct dt_err *err)
{
	struct api_input *a = (struct api_input *)in;
	dt__api_reader_free(a->r);
	a->r = NULL;
	enum dt_status st = dt__api_reader_new(a->data, a->pm, index, count, a->batch, a->seed, 0, &a->r, err);
	if (st)
		return st;
	dt__api_reader_seek(a->r, epoch, offset);
	return DT_OK;
}

/* The general batch over the buffers of a reader's batch of `size`. */
static void make_batch(struct dt_model_batch *mb, const struct dt_model *model, const int *feeds, int target_feed,
		       void *const *bufs, int size)
{
	memset(mb, 0, sizeof(*mb));
	mb->size = size;
	mb->num_inputs = dt_model_num_inputs(model);
	for (int i = 0; i < mb->num_inputs; i++) {
		mb->inputs[i].dtype = dt_model_input(model, i)->dtype;
		mb->inputs[i].data = bufs[feeds[i]];
	}
	mb->targets.dtype = dt_model_target(model)->dtype;
	mb->targets.data = bufs[target_feed];
}

static enum dt_status in_next(struct dt_input *in, const struct dt_batch **out, struct dt_err *err)
{
	struct api_input *a = (struct api_input *)in;
	int64_t epoch, offset;
	dt__api_reader_position(a->r, &epoch, &offset);
	int size = 0;
	enum dt_status st = dt__api_reader_next(a->r, 0, a->bufs, &size, err);
	if (st)
		return st;
	if (size < 1)
		return dt_err_set(err, DT_DATA, "the data gave an empty batch");
	make_batch(&a->cur.mb, a->model, a->feeds, a->target_feed, a->bufs, size);
	a->cur.b = (struct dt_batch){ .size = size, .epoch = epoch, .general = &a->cur.mb };
	*out = &a->cur.b;
	return DT_OK;
}

static void in_position(const struct dt_input *in, int64_t *epoch, int64_t *offset)
{
	dt__api_reader_position(((const struct api_input *)in)->r, epoch, offset);
}

static int64_t in_shard_size(const struct dt_input *in)
{
	const struct api_input *a = (const struct api_input *)in;
	return a->r ? dt__api_reader_shard_size(a->r) : 0;
}

static void free_bufs(void **bufs)
{
	for (int i = 0; i < DT_API_MAX_INPUTS; i++) {
		free(bufs[i]);
		bufs[i] = NULL;
	}
}

static void in_free(struct dt_input *in)
{
	struct api_input *a = (struct api_input *)in;
	dt__api_reader_free(a->r);
	free_bufs(a->bufs);
	free(a);
}

static const struct dt_input_ops api_input_ops = {
	.start = in_start, .next = in_next, .position = in_position, .shard_size = in_shard_size, .free = in_free,
};

/* Buffers for `batch` examples of every public input; DT_NOMEM when too big. */
static enum dt_status alloc_bufs(const dtrain_model *pm, int batch, void **bufs, struct dt_err *err)
{
	for (int i = 0; i < pm->ninputs; i++)
		if (dt_try_malloc(&bufs[i], (size_t)batch * (size_t)pm->inputs[i].per_example * 4, err)) {
			free_bufs(bufs);
			return dt_err_prefix(err, "input '%s' for batches of %d", pm->inputs[i].name, batch);
		}
	return DT_OK;
}

/* ---- the session ---- */

struct dtrain_session {
	dtrain_model *pm;
	dtrain_data *train, *eval;
	const struct dt_cluster *cl;
	struct dt_cluster local_cl;
	enum state state;
	struct dt_train_config tc;
	char output_dir[1024];
	int sync;
	int replicas;           /* in-process replicas (the engine's own config keeps 1: the group is ours) */
	struct dt_mirrored *group;
	/* started */
	struct dt_model *model;
	int feeds[DT_API_MAX_INPUTS], target_feed;
	struct dt_strategy strategy;
	struct dt_session *eng;
	char mode_name[32];
	double last_loss;       /* of the last step (the engine's hook) */
};

static void on_step(void *arg, int64_t step, float loss, int examples)
{
	(void)step, (void)examples;
	((dtrain_session *)arg)->last_loss = loss;
}

/* The engine's local strategy with the general batch's compute: one
 * model, or the in-process replicas splitting the batch (mirrored). */
static enum dt_status api_compute(struct dt_session *s, void *self, struct dt_step_figures *out, struct dt_err *err)
{
	dtrain_session *api = self;
	if (!api->group) /* the engine's compute takes the general batch (dt_batch's `general`) */
		return dt__session_compute(s, out, err);
	const struct dt_batch *b;
	enum dt_status st = dt__session_next_batch(s, &b, err);
	if (st)
		return st;
	struct dt_step_result res;
	st = dt_mirrored_step_general(api->group, b->general, &res, err);
	if (st)
		return dt_err_prefix(err, "step %lld", (long long)dt_session_global_step(s) + 1);
	out->loss = res.loss;
	out->correct = res.correct;
	out->examples = b->size;
	return DT_OK;
}

static enum mode mode_of(const dtrain_session *s)
{
	const struct dt_cluster *cl = s->cl;
	if (cl->task.job == DT_JOB_PS)
		return M_PS_SERVER;
	if (cl->task.job == DT_JOB_EVALUATOR)
		return M_EVALUATOR;
	if (cl->num_ps_replicas > 0)
		return s->sync ? M_PS_SYNC : M_PS_ASYNC;
	if (cl->num_worker_replicas > 1)
		return M_RING;
	return s->replicas > 1 ? M_MIRRORED : M_LOCAL;
}

#define NULL_SESSION(e, fn) (dtrain_status)dt_err_set(e, DT_USAGE, "%s: the session is NULL", fn)

dtrain_status dtrain_session_new(dtrain_model *model, dtrain_data *train, const dtrain_cluster *cluster,
				 dtrain_session **out, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_new: out is NULL");
	*out = NULL;
	if (!model || !train)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_new: the %s is NULL", model ? "data" : "model");
	dtrain_status st = dtrain_model_check(model, err);
	if (st)
		return st;
	dtrain_session *s = dt_xcalloc(1, sizeof(*s));
	s->cl = dt__api_cluster(cluster, &s->local_cl, e);
	if (!s->cl) {
		free(s);
		return (dtrain_status)e->status;
	}
	s->pm = model;
	s->train = train;
	dt_train_config_defaults(&s->tc);
	s->tc.problem = "";
	s->tc.train_steps = 1000;
	s->tc.eval_at_end = 0;
	s->tc.prefetch = 0;
	s->tc.output_dir = s->output_dir;
	s->replicas = 1;
	enum dt_status ds = dt_hparams_from_set("mlp_base", &s->tc.hp, e);
	DT_ASSERT(ds == DT_OK);
	snprintf(s->tc.hp.lr_schedule, sizeof(s->tc.hp.lr_schedule), "constant");
	model->frozen = 1;
	*out = s;
	return DTRAIN_OK;
}

/* Options of the session itself (the rest are hparams). */
enum opt_kind { O_I64, O_INT, O_DBL, O_STR, O_BOOL };
struct opt {
	const char *name;
	enum opt_kind kind;
	size_t off;   /* in struct dtrain_session */
	double lo, hi;
};
#define TC(f) offsetof(struct dtrain_session, tc) + offsetof(struct dt_train_config, f)
static const struct opt opts[] = {
	{ "train_steps", O_I64, TC(train_steps), 1, 1e15 },
	{ "seed", O_I64, TC(seed), 0, 9.2e18 },
	{ "replicas", O_INT, offsetof(struct dtrain_session, replicas), 1, DT_MIRRORED_MAX_REPLICAS },
	{ "sync", O_BOOL, offsetof(struct dtrain_session, sync), 0, 1 },
	{ "threads", O_INT, TC(threads), 1, 1024 },
	{ "log_every", O_I64, TC(log_every), 0, 1e15 },
	{ "output_dir", O_STR, offsetof(struct dtrain_session, output_dir), 0, 0 },
	{ "save_checkpoints_steps", O_I64, TC(save_checkpoints_steps), 0, 1e15 },
	{ "save_checkpoints_secs", O_DBL, TC(save_checkpoints_secs), 0, 1e9 },
	{ "keep_checkpoint_max", O_INT, TC(keep_checkpoint_max), 0, 1e6 },
	{ "save_summary_steps", O_I64, TC(save_summary_steps), 0, 1e15 },
};
static const char hparam_names[] = "batch_size, learning_rate, optimizer, momentum, beta1, beta2, epsilon, "
				   "initial_accumulator_value, lr_schedule, warmup_steps, lr_decay_end, dropout, "
				   "weight_decay, scale_lr_by_workers";

static enum dt_status set_opt(dtrain_session *s, const struct opt *o, const char *value, struct dt_err *e)
{
	char *p = (char *)s + o->off, *end;
	if (o->kind == O_STR) {
		if (strlen(value) >= sizeof(s->output_dir))
			return dt_err_set(e, DT_USAGE, "option %s: the value is longer than %zu bytes", o->name,
					  sizeof(s->output_dir) - 1);
		snprintf(p, sizeof(s->output_dir), "%s", value);
		return DT_OK;
	}
	double v = strtod(value, &end);
	if (!*value || *end || !(v >= o->lo && v <= o->hi) || (o->kind != O_DBL && v != floor(v)))
		return dt_err_set(e, DT_USAGE, "option %s: '%s' is not %s from %g to %g", o->name, value,
				  o->kind == O_DBL ? "a number" : "a whole number", o->lo, o->hi);
	switch (o->kind) {
	case O_I64: *(int64_t *)(void *)p = (int64_t)v; break;
	case O_INT:
	case O_BOOL: *(int *)(void *)p = (int)v; break;
	case O_DBL: *(double *)(void *)p = v; break;
	case O_STR: break;
	}
	return DT_OK;
}

dtrain_status dtrain_session_set(dtrain_session *s, const char *key, const char *value, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_set");
	if (!key || !value)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_set: the %s is NULL", key ? "value" : "key");
	if (s->state != S_NEW)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_set '%s': training has started; set options "
							      "before the first step",
						 key);
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (strcmp(key, opts[i].name) == 0)
			return (dtrain_status)set_opt(s, &opts[i], value, e);
	if (strcmp(key, "model") == 0 || strcmp(key, "sync") == 0 || strchr(key, ',') || strchr(key, '=') ||
	    strchr(value, ',') || strchr(value, '='))
		goto unknown;
	struct dt_hparams hp = s->tc.hp;
	char text[256];
	snprintf(text, sizeof(text), "%s=%s", key, value);
	struct dt_err he = DT_ERR_INIT;
	if (dt_hparams_parse(&hp, text, &he) == DT_OK) {
		if (dt_hparams_validate(&hp, &he))
			return (dtrain_status)dt_err_set(e, DT_USAGE, "option %s: %s", key, he.msg);
		s->tc.hp = hp;
		return DTRAIN_OK;
	}
	if (!strstr(he.msg, "unknown"))
		return (dtrain_status)dt_err_set(e, DT_USAGE, "option %s: %s", key, he.msg);
unknown:
	dt_err_set(e, DT_USAGE, "unknown option '%s'", key);
	char list[600] = "";
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s, ", opts[i].name);
	dt_err_hint(e, "the options are %s%s", list, hparam_names);
	return DTRAIN_USAGE;
}

dtrain_status dtrain_session_set_eval_data(dtrain_session *s, dtrain_data *eval, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_set_eval_data");
	if (!eval)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_set_eval_data: the data is NULL");
	s->eval = eval;
	return DTRAIN_OK;
}

const char *dtrain_session_mode(const dtrain_session *s)
{
	return s ? mode_names[mode_of(s)] : "";
}

/* Whether this build runs mode m through the API: the modes whose engine
 * strategy takes nn/'s general batch (api_compute). */
static int mode_runs(enum mode m)
{
	return m == M_LOCAL || m == M_MIRRORED;
}

/* A replica of the session's model (distribute/mirrored.h's make). */
static enum dt_status make_replica(void *arg, int max_batch, struct dt_model **out, struct dt_err *err)
{
	const dtrain_session *s = arg;
	int feeds[DT_API_MAX_INPUTS], target;
	return dt__api_compile(s->pm, max_batch, out, feeds, &target, err);
}

/* Compiles the model, opens the engine session: connect, restore or
 * initialize, summaries, the input at its position. */
static enum dt_status start(dtrain_session *s, struct dt_err *e)
{
	if (s->state == S_STARTED)
		return DT_OK;
	if (s->state == S_CLOSED)
		return dt_err_set(e, DT_USAGE, "the session is closed");
	enum mode m = mode_of(s);
	snprintf(s->mode_name, sizeof(s->mode_name), "%s", mode_names[m]);
	if (!mode_runs(m)) {
		dt_err_set(e, DT_CONFIG, "mode %s does not run through the API in this build", mode_names[m]);
		dt_err_hint(e, "local and mirrored run (one process); the engine's %s strategy does not take a "
			       "custom or layer-graph model's batches yet",
			    mode_names[m]);
		return DT_CONFIG;
	}
	enum dt_status st = dt_hparams_validate(&s->tc.hp, e);
	if (st)
		return st;
	int batch = s->tc.hp.batch_size;
	if ((st = dt__api_compile(s->pm, batch, &s->model, s->feeds, &s->target_feed, e)))
		return st;
	/* From here a failure undoes everything, so that a later call starts afresh. */
	struct api_input *in = dt_xcalloc(1, sizeof(*in));
	in->base.ops = &api_input_ops;
	in->data = s->train;
	in->pm = s->pm;
	in->model = s->model;
	in->feeds = s->feeds;
	in->target_feed = s->target_feed;
	in->batch = batch;
	in->seed = s->tc.seed;
	if ((st = alloc_bufs(s->pm, batch, in->bufs, e)) || (st = dt_blas_load(s->tc.threads, e)))
		goto undo;
	/* The CLI's prefixes: a process alone is the chief. */
	if (dt_cluster_is_local(s->cl))
		dt_log_set_identity("chief", 0);
	else
		dt_log_set_identity(dt_job_name(s->cl->task.job), s->cl->task.index);
	dt_blas_set_threads(s->tc.threads);
	if (m == M_MIRRORED) {
		struct dt_mirrored_config mc = { .hp = &s->tc.hp, .make = make_replica, .make_arg = s,
						 .replicas = s->replicas, .batch_size = batch, .seed = s->tc.seed };
		if ((st = dt_mirrored_new(s->model, &mc, &s->group, e)))
			goto undo;
		dt_info("mirrored: %d replicas on threads split each batch of %d", s->replicas, batch);
	}
	s->strategy = dt_strategy_local;
	s->strategy.compute = api_compute;
	struct dt_session_config sc = { .train = &s->tc, .strategy = &s->strategy, .strategy_arg = s,
					.model = s->model, .input = &in->base };
	in = NULL; /* the engine owns the input from dt_session_new on, even on failure */
	if ((st = dt_session_new(&sc, &s->eng, e)))
		goto undo;
	dt_session_set_hook(s->eng, on_step, s);
	s->state = S_STARTED;
	return DT_OK;
undo:
	if (in)
		in_free(&in->base);
	dt_mirrored_free(s->group);
	s->group = NULL;
	dt_model_free(s->model);
	s->model = NULL;
	return st;
}

dtrain_status dtrain_session_step(dtrain_session *s, double *loss, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_step");
	if (s->state == S_CLOSED)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_step: the session is closed");
	enum mode m = mode_of(s);
	if (m == M_PS_SERVER || m == M_EVALUATOR) {
		dt_err_set(e, DT_USAGE, "dtrain_session_step: this task is a%s %s, not a trainer",
			   m == M_EVALUATOR ? "n" : "", m == M_EVALUATOR ? "evaluator" : "ps");
		dt_err_hint(e, "call dtrain_session_run: it serves (ps) or evaluates (evaluator) until the run ends");
		return DTRAIN_USAGE;
	}
	enum dt_status st = start(s, e);
	if (st)
		return (dtrain_status)st;
	if (dt_session_should_stop(s->eng))
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_step: the run is over (global step %lld of "
							      "train_steps %lld)",
						 (long long)dt_session_global_step(s->eng), (long long)s->tc.train_steps);
	if ((st = dt_session_step(s->eng, e)))
		return (dtrain_status)st;
	if (loss)
		*loss = s->last_loss;
	return DTRAIN_OK;
}

int dtrain_session_should_stop(const dtrain_session *s)
{
	if (!s || s->state == S_CLOSED)
		return 1;
	return s->eng ? dt_session_should_stop(s->eng) : 0;
}

int64_t dtrain_session_global_step(const dtrain_session *s)
{
	return s && s->eng ? dt_session_global_step(s->eng) : 0;
}

dtrain_status dtrain_session_close(dtrain_session *s, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_close");
	if (s->state == S_CLOSED)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_close: the session is closed already");
	enum dt_status st = DT_OK;
	if (s->state == S_STARTED)
		st = dt_session_finish(s->eng, e);
	s->state = S_CLOSED;
	return (dtrain_status)st;
}

dtrain_status dtrain_session_run(dtrain_session *s, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_run");
	if (s->state == S_CLOSED)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_run: the session is closed");
	enum dt_status st = start(s, e);
	if (st)
		return (dtrain_status)st;
	while (!dt_session_should_stop(s->eng))
		if ((st = dt_session_step(s->eng, e)))
			return (dtrain_status)st;
	return dtrain_session_close(s, err);
}

void dtrain_session_free(dtrain_session *s)
{
	if (!s)
		return;
	dt_session_free(s->eng);
	dt_mirrored_free(s->group);
	dt_model_free(s->model);
	dt_cluster_release(&s->local_cl);
	free(s);
}

/* ---- evaluation, gradients, variables ---- */

/* Every example of d once through the model (dropout off): the mean loss
 * and accuracy (-1 without one). With grads, the first batch only,
 * training mode with dropout off, gradients left in the model. */
static enum dt_status pass(dtrain_session *s, dtrain_data *d, int grads, double *loss, double *acc, struct dt_err *e)
{
	int batch = s->tc.hp.batch_size;
	void *bufs[DT_API_MAX_INPUTS] = { 0 };
	struct dt__api_reader *r = NULL;
	enum dt_status st = alloc_bufs(s->pm, batch, bufs, e);
	if (!st)
		st = dt__api_reader_new(d, s->pm, 0, 1, batch, s->tc.seed, 1, &r, e);
	double loss_sum = 0;
	int64_t examples = 0, correct = 0, counted = 0;
	while (!st) {
		int size = 0;
		if ((st = dt__api_reader_next(r, 0, bufs, &size, e)) || size == 0)
			break;
		struct dt_model_batch mb;
		make_batch(&mb, s->model, s->feeds, s->target_feed, bufs, size);
		struct dt_step_result res;
		st = grads ? dt_model_step(s->model, &mb, NULL, NULL, NULL, &res, e)
			   : dt_model_evaluate(s->model, &mb, &res, e);
		if (st)
			break;
		loss_sum += (double)res.loss * size;
		examples += size;
		correct += res.correct;
		counted += res.counted;
		if (grads)
			break;
	}
	dt__api_reader_free(r);
	free_bufs(bufs);
	if (st)
		return st;
	if (examples == 0)
		return dt_err_set(e, DT_DATA, "the data gave no example to evaluate");
	if (loss)
		*loss = loss_sum / (double)examples;
	if (acc)
		*acc = counted > 0 ? (double)correct / (double)counted : -1;
	return DT_OK;
}

/* The session must hold variables: started (initialized or restored). */
static enum dt_status ready(dtrain_session *s, const char *fn, struct dt_err *e)
{
	if (!s)
		return dt_err_set(e, DT_USAGE, "%s: the session is NULL", fn);
	if (s->state == S_NEW) {
		enum dt_status st = start(s, e);
		if (st)
			return st;
	}
	if (!s->model)
		return dt_err_set(e, DT_USAGE, "%s: the session was closed before it started", fn);
	return DT_OK;
}

dtrain_status dtrain_session_evaluate(dtrain_session *s, dtrain_data *data, double *loss, double *accuracy,
				      dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	enum dt_status st = ready(s, "dtrain_session_evaluate", e);
	if (st)
		return (dtrain_status)st;
	if (!data)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_evaluate: the data is NULL");
	return (dtrain_status)pass(s, data, 0, loss, accuracy, e);
}

dtrain_status dtrain_session_gradients(dtrain_session *s, dtrain_data *data, double *loss, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	enum dt_status st = ready(s, "dtrain_session_gradients", e);
	if (st)
		return (dtrain_status)st;
	if (!data)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_gradients: the data is NULL");
	return (dtrain_status)pass(s, data, 1, loss, NULL, e);
}

static const struct dt_variable *find_var(dtrain_session *s, const char *fn, const char *name, int64_t count,
					  struct dt_err *e)
{
	if (!name) {
		dt_err_set(e, DT_USAGE, "%s: the name is NULL", fn);
		return NULL;
	}
	for (int i = 0; i < dt_model_num_variables(s->model); i++) {
		const struct dt_variable *v = dt_model_variable(s->model, i);
		if (strcmp(v->name, name) != 0)
			continue;
		if (count != (int64_t)v->count) {
			dt_err_set(e, DT_USAGE, "%s '%s': count is %lld; the variable has %zu elements", fn, name,
				   (long long)count, v->count);
			return NULL;
		}
		return v;
	}
	dt_err_set(e, DT_USAGE, "%s: the model has no variable '%s'", fn, name);
	return NULL;
}

static dtrain_status copy_var(dtrain_session *s, const char *fn, const char *name, float *dst, const float *src,
			      int64_t count, int grad, struct dt_err *e)
{
	enum dt_status st = ready(s, fn, e);
	if (st)
		return (dtrain_status)st;
	if (!dst && !src)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "%s: the buffer is NULL", fn);
	const struct dt_variable *v = find_var(s, fn, name, count, e);
	if (!v)
		return DTRAIN_USAGE;
	float *base = (grad ? dt_model_grads(s->model) : dt_model_params(s->model)) + v->offset;
	if (dst)
		memcpy(dst, base, v->count * sizeof(float));
	else
		memcpy(base, src, v->count * sizeof(float));
	return DTRAIN_OK;
}

dtrain_status dtrain_session_read_variable(dtrain_session *s, const char *name, float *dst, int64_t count,
					   dtrain_error *err)
{
	return copy_var(s, "dtrain_session_read_variable", name, dst, NULL, count, 0, dt__api_err(err));
}

dtrain_status dtrain_session_write_variable(dtrain_session *s, const char *name, const float *src, int64_t count,
					    dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!src)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_write_variable: the buffer is NULL");
	return copy_var(s, "dtrain_session_write_variable", name, NULL, src, count, 0, e);
}

dtrain_status dtrain_session_read_gradient(dtrain_session *s, const char *name, float *dst, int64_t count,
					   dtrain_error *err)
{
	return copy_var(s, "dtrain_session_read_gradient", name, dst, NULL, count, 1, dt__api_err(err));
}

/* ---- checkpoints and summaries ---- */

dtrain_status dtrain_session_save(dtrain_session *s, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	enum dt_status st = ready(s, "dtrain_session_save", e);
	if (st)
		return (dtrain_status)st;
	if (!s->eng)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_save: the session did not start");
	if (!s->output_dir[0])
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_save: no output_dir to save to");
	return (dtrain_status)dt_session_save(s->eng, e);
}

dtrain_status dtrain_session_restore(dtrain_session *s, const char *dir, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_restore");
	if (s->state != S_NEW)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_restore: training has started; restore "
							      "before the first step");
	if (dir && *dir) {
		if (strlen(dir) >= sizeof(s->output_dir))
			return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_restore: the path is too long");
		snprintf(s->output_dir, sizeof(s->output_dir), "%s", dir);
	}
	if (!s->output_dir[0])
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_restore: no directory (and no output_dir)");
	/* The engine restores the newest checkpoint that verifies as it starts. */
	return (dtrain_status)start(s, e);
}

dtrain_status dtrain_session_scalar(dtrain_session *s, const char *tag, double value, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_scalar");
	if (!tag || !*tag)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_scalar: the tag is NULL or empty");
	if (s->eng) {
		float v = (float)value;
		dt_session_scalars(s->eng, &tag, &v, 1);
	}
	return DTRAIN_OK;
}
