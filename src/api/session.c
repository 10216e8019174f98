/*
 * session.c — the public session over the training engine (train/session.h).
 *
 * A dtrain_session collects options until it starts (the first step, run,
 * evaluate or gradients); then it compiles the model (api/builder.c or the
 * custom adapter in api/model.c) and hands the engine a source
 * (train/local.h's dt_train_source): that model, more instances of it, an
 * engine input (train/input.h) whose batches carry nn/'s general batch,
 * and its evaluation on the caller's data. Every role builds from the
 * source instead of a problem and the model registry, and the session's
 * compute runs dt_model_step on the general batch, so any model — a layer
 * graph or a custom callback — trains on the one loop in every mode
 * (restore, save, summaries, progress lines, hooks are the engine's).
 *
 * Modes come from the cluster as TensorFlow picks them (dtrain.h): local
 * and mirrored open the engine session here, on the caller's thread; the
 * distributed trainers run the engine's role on a thread of their own
 * (api/roles.c) that the caller's calls drive; a ps serves (the engine's
 * std server) and an evaluator follows the checkpoints, each inside
 * dtrain_session_run.
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
#include "train/evaluator.h"
#include "train/sync_roles.h"
#include "train/ps_roles.h"
#include "train/session.h"
#include "train/strategy.h"

/* (the session, its modes and states: api/internal.h) */
static const char *const mode_names[] = { "local", "mirrored", "ps_async", "ps_sync", "multi_worker_mirrored",
					  "ps_server", "evaluator", "ps_sync_in_graph" };

static void on_step(void *arg, int64_t step, float loss, int examples)
{
	(void)step, (void)examples;
	((dtrain_session *)arg)->last_loss = loss;
}

enum dt__api_mode dt__api_mode(const dtrain_session *s)
{
	const struct dt_cluster *cl = s->cl;
	/* t2t's hparam sync=1 says the same as the option for a built-in model */
	const int sync = s->sync || (s->builtin && s->tc.hp.sync);
	if (cl->task.job == DT_JOB_PS)
		return M_PS_SERVER;
	if (s->evaluator || cl->task.job == DT_JOB_EVALUATOR)
		return M_EVALUATOR;
	if (cl->num_ps_replicas > 0) {
		/* t2t's in-graph layout: the master the only trainer, the ps computing
		 * (a program's own model too: its ps tasks run the same program) */
		if (sync && cl->jobs[DT_JOB_MASTER].slots > 0 && cl->num_worker_replicas == 1)
			return M_PS_SYNC_IN_GRAPH;
		return sync ? M_PS_SYNC : M_PS_ASYNC;
	}
	if (cl->num_worker_replicas > 1)
		return M_RING;
	return s->replicas > 1 ? M_MIRRORED : M_LOCAL;
}

/* A built-in session runs with dtrain_session_run only (its roles turn their own loops). */
#define BUILTIN_ONLY_RUN(s, e, fn)                                                                          \
	do {                                                                                                \
		if ((s)->builtin)                                                                           \
			return (dtrain_status)dt_err_set(e, DT_USAGE, "%s: a built-in session runs with "    \
							 "dtrain_session_run only", fn);                    \
	} while (0)

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
	dt__api_session_defaults(s);
	enum dt_status ds = dt_hparams_from_set("mlp_base", &s->tc.hp, e);
	DT_ASSERT(ds == DT_OK);
	snprintf(s->tc.hp.lr_schedule, sizeof(s->tc.hp.lr_schedule), "constant");
	model->frozen = 1;
	*out = s;
	return DTRAIN_OK;
}

void dt__api_session_defaults(dtrain_session *s)
{
	dt_train_config_defaults(&s->tc);
	s->tc.problem = "";
	s->tc.train_steps = 1000;
	s->tc.eval_at_end = 0;
	s->tc.prefetch = 0;
	s->tc.output_dir = s->output_dir;
	s->tc.warm_start_from = s->warm_start_from;
	s->tc.warm_start_vars = s->warm_start_vars;
	s->replicas = 1;
	/* zeros: the roles' own defaults (train/ps_roles.h, allreduce_role.h) */
	s->pc = (struct dt_ps_run_config){ .ps_idle_s = 600 };
	s->ac = (struct dt_allreduce_run_config){ 0 };
	s->eval_split = DT_SPLIT_TEST;
	s->eval_walk = DT_EVAL_LATEST;
	s->eval_timeout_s = 3600;
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
	{ "eval_timeout_secs", O_DBL, offsetof(struct dtrain_session, eval_timeout_s), 1, 1e7 },
	{ "sync", O_BOOL, offsetof(struct dtrain_session, sync), 0, 1 },
	{ "threads", O_INT, TC(threads), 1, 1024 },
	{ "log_every", O_I64, TC(log_every), 0, 1e15 },
	{ "output_dir", O_STR, offsetof(struct dtrain_session, output_dir), 0, 0 },
	{ "warm_start_from", O_STR, offsetof(struct dtrain_session, warm_start_from), 0, 0 },
	{ "warm_start_vars", O_STR, offsetof(struct dtrain_session, warm_start_vars), 0, 0 },
	{ "predictions_file", O_STR, offsetof(struct dtrain_session, predictions_file), 0, 0 },
	{ "save_checkpoints_steps", O_I64, TC(save_checkpoints_steps), 0, 1e15 },
	{ "save_checkpoints_secs", O_DBL, TC(save_checkpoints_secs), 0, 1e9 },
	{ "keep_checkpoint_max", O_INT, TC(keep_checkpoint_max), 0, 1e6 },
	{ "save_summary_steps", O_I64, TC(save_summary_steps), 0, 1e15 },
};
static const char hparam_names[] = "batch_size, learning_rate, optimizer, momentum, beta1, beta2, epsilon, "
				   "initial_accumulator_value, lr_schedule, warmup_steps, lr_decay_end, dropout, "
				   "weight_decay, clip_grad_norm, scale_lr_by_workers";

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
	if (!strstr(he.msg, "unknown hparam")) /* a known name with a bad value */
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
	return s ? mode_names[dt__api_mode(s)] : "";
}

/* A replica of the session's model (distribute/mirrored.h's make; the
 * source's make_model). */
static enum dt_status make_replica(void *arg, int max_batch, struct dt_model **out, struct dt_err *err)
{
	const dtrain_session *s = arg;
	int feeds[DT_API_MAX_INPUTS], target;
	return dt__api_compile(s->pm, max_batch, out, feeds, &target, err);
}

/* The source's make_input: the training data as general batches of `batch`. */
static enum dt_status make_input(void *arg, const struct dt_model *model, int batch, uint64_t seed,
				 struct dt_input **out, struct dt_err *err)
{
	dtrain_session *s = arg;
	return dt__api_input_new(s->train, s->pm, model, s->feeds, s->target_feed, batch, seed, out, err);
}

static enum dt_status pass(dtrain_session *s, struct dt_model *model, dtrain_data *d, int grads, double *loss,
			   double *acc, struct dt_err *e);

/* The source's evaluate: the eval data (the training data without one). */
static enum dt_status evaluate_source(void *arg, struct dt_model *model, struct dt_eval_result *out,
				      struct dt_err *err)
{
	dtrain_session *s = arg;
	double loss = 0, acc = 0;
	enum dt_status st = pass(s, model, s->eval ? s->eval : s->train, 0, &loss, &acc, err);
	out->loss = loss;
	out->accuracy = acc < 0 ? 0 : acc;
	out->examples = 0;
	return st;
}

/* The source's drive (the role's thread): the API's hook, then the requests. */
static enum dt_status drive(void *arg, struct dt_session *eng, struct dt_err *err)
{
	dtrain_session *s = arg;
	dt_session_set_hook(eng, on_step, s);
	return dt__api_role_drive(s->role, eng, err);
}

/* Compiles the model and fills the source. Local and mirrored open the
 * engine session here (connect, restore or initialize, summaries, the
 * input at its position); the distributed trainers start their role and
 * wait for its session to open; a ps and an evaluator start in run. */
static enum dt_status start(dtrain_session *s, struct dt_err *e)
{
	if (s->state == S_STARTED)
		return DT_OK;
	if (s->state == S_CLOSED)
		return dt_err_set(e, DT_USAGE, "the session is closed");
	enum dt__api_mode m = dt__api_mode(s);
	snprintf(s->mode_name, sizeof(s->mode_name), "%s", mode_names[m]);
	enum dt_status st = dt_hparams_validate(&s->tc.hp, e);
	if (st)
		return st;
	if (m == M_PS_SYNC && s->replicas > 1)
		return dt_err_set(e, DT_CONFIG, "mode ps_sync with replicas=%d: a synchronous trainer runs one replica",
				  s->replicas);
	int batch = s->tc.hp.batch_size;
	if ((st = dt__api_compile(s->pm, batch, &s->model, s->feeds, &s->target_feed, e)))
		return st;
	/* From here a failure undoes everything, so that a later call starts afresh. */
	if ((st = dt_blas_load(s->tc.threads, e)))
		goto undo;
	s->src = (struct dt_train_source){ .model = s->model, .make_model = make_replica, .make_input = make_input,
					   .evaluate = evaluate_source, .drive = drive, .arg = s };
	s->tc.source = &s->src;
	s->tc.replicas = s->replicas;
	/* The CLI's prefixes: a process alone is the chief. */
	if (dt_cluster_is_local(s->cl))
		dt_log_set_identity("chief", 0);
	else
		dt_log_set_identity(dt_job_name(s->cl->task.job), s->cl->task.index);
	dt_blas_set_threads(s->tc.threads);
	if (m == M_PS_SERVER || m == M_EVALUATOR) {
		s->state = S_STARTED;
		return DT_OK;
	}
	if (m == M_PS_ASYNC || m == M_PS_SYNC || m == M_RING || m == M_PS_SYNC_IN_GRAPH) {
		enum dt__api_role_kind kind = m == M_RING	     ? DT_API_ROLE_RING
					      : m == M_PS_SYNC	     ? DT_API_ROLE_PS_SYNC
					      : m == M_PS_SYNC_IN_GRAPH ? DT_API_ROLE_IN_GRAPH
								   : DT_API_ROLE_PS_ASYNC;
		if ((st = dt__api_role_start(kind, &s->tc, s->cl, &s->pc, &s->ac, &s->role, e)))
			goto undo;
		s->state = S_STARTED;
		return DT_OK;
	}
	struct dt_session_config sc = { .train = &s->tc, .strategy = &dt_strategy_local, .model = s->model };
	if ((st = make_input(s, s->model, batch, s->tc.seed, &sc.input, e)))
		goto undo;
	/* the engine owns the input from dt_session_new on, even on failure */
	if ((st = dt_session_new(&sc, &s->eng, e)))
		goto undo;
	dt_session_set_hook(s->eng, on_step, s);
	s->state = S_STARTED;
	return DT_OK;
undo:
	s->tc.source = NULL;
	dt_model_free(s->model);
	s->model = NULL;
	return st;
}

/* Requests to a role's session (api/roles.c), on its thread. */
static enum dt_status req_step(struct dt_session *eng, void *arg, struct dt_err *err)
{
	(void)arg;
	return dt_session_step(eng, err);
}
static enum dt_status req_run(struct dt_session *eng, void *arg, struct dt_err *err)
{
	(void)arg;
	return dt_session_run(eng, err);
}
static enum dt_status req_finish(struct dt_session *eng, void *arg, struct dt_err *err)
{
	(void)arg;
	return dt_session_finish(eng, err);
}
static enum dt_status req_save(struct dt_session *eng, void *arg, struct dt_err *err)
{
	(void)arg;
	return dt_session_save(eng, err);
}
struct scalar_req {
	const char *tag;
	float value;
};
static enum dt_status req_scalar(struct dt_session *eng, void *arg, struct dt_err *err)
{
	(void)err;
	struct scalar_req *r = arg;
	dt_session_scalars(eng, &r->tag, &r->value, 1);
	return DT_OK;
}

/* A ps task: the engine's std server until the chief ends the run. */
static enum dt_status serve(dtrain_session *s, struct dt_err *e)
{
	struct dt_ps_run_config pc = s->pc;
	pc.train = &s->tc;
	pc.cluster = s->cl;
	return dt_train_std_server(&pc, e);
}

/* An evaluator task: each new checkpoint of output_dir, restored into a
 * model of its own and evaluated on the eval data, until train_steps. */
static enum dt_status follow_checkpoints(dtrain_session *s, struct dt_err *e)
{
	if (!s->output_dir[0] && !(s->eval_once && s->warm_start_from[0]))
		return dt_err_set(e, DT_USAGE, "an evaluator task needs output_dir: the directory the chief saves in");
	if (!s->eval)
		dt_info("evaluator: no eval data was set (dtrain_session_set_eval_data): evaluating the training data");
	struct dt_eval_config ec = {
		.problem = "", .hp = s->tc.hp, .seed = s->tc.seed, .threads = s->tc.threads, .output_dir = s->output_dir,
		.split = s->eval_split, .mode = s->eval_walk, .once = s->eval_once, .train_steps = s->tc.train_steps,
		.timeout_s = s->eval_timeout_s, .source = &s->src, .report = dt__api_report_eval, .report_ctx = s,
		.warm_start_from = s->warm_start_from, .warm_start_vars = s->warm_start_vars,
		.predictions_file = s->predictions_file,
	};
	struct dt_eval_outcome o;
	enum dt_status st = dt_evaluator_run(&ec, &o, e);
	dt__api_evaluator_result(s, &o);
	return st;
}

dtrain_status dtrain_session_step(dtrain_session *s, double *loss, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_step");
	BUILTIN_ONLY_RUN(s, e, "dtrain_session_step");
	if (s->state == S_CLOSED)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_step: the session is closed");
	enum dt__api_mode m = dt__api_mode(s);
	if (m == M_PS_SERVER || m == M_EVALUATOR) {
		dt_err_set(e, DT_USAGE, "dtrain_session_step: this task is a%s %s, not a trainer",
			   m == M_EVALUATOR ? "n" : "", m == M_EVALUATOR ? "evaluator" : "ps");
		dt_err_hint(e, "call dtrain_session_run: it serves (ps) or evaluates (evaluator) until the run ends");
		return DTRAIN_USAGE;
	}
	const int first = s->state == S_NEW;
	enum dt_status st = start(s, e);
	if (st)
		return (dtrain_status)st;
	if (first && dtrain_session_should_stop(s)) { /* a worker that joins a run already over */
		if (loss)
			*loss = 0;
		return DTRAIN_OK;
	}
	if (dtrain_session_should_stop(s))
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_step: the run is over (global step %lld of "
							      "train_steps %lld)",
						 (long long)dtrain_session_global_step(s), (long long)s->tc.train_steps);
	if ((st = s->role ? dt__api_role_call(s->role, req_step, NULL, 0, e) : dt_session_step(s->eng, e)))
		return (dtrain_status)st;
	if (loss)
		*loss = s->last_loss;
	return DTRAIN_OK;
}

int dtrain_session_should_stop(const dtrain_session *s)
{
	if (!s || s->state == S_CLOSED)
		return 1;
	if (s->role)
		return dt__api_role_should_stop(s->role);
	return s->eng ? dt_session_should_stop(s->eng) : 0;
}

int64_t dtrain_session_global_step(const dtrain_session *s)
{
	if (s && s->role)
		return dt__api_role_global_step(s->role);
	return s && s->eng ? dt_session_global_step(s->eng) : 0;
}

/* dtrain_session_result's figures, from the engine session that trained:
 * ours (local, mirrored), or the role's once its thread ended (the ps and
 * ring trainers: dt__role_train and dt_train_run read them from their
 * session as the built-in path does), with a sync trainer's barrier
 * figures. The final evaluation is the chief's with eval_at_end. */
static void collect_result(dtrain_session *s, enum dt_status st)
{
	if (s->eng)
		dt_session_result(s->eng, &s->res);
	else if (s->role)
		s->has_sync = dt__api_role_result(s->role, &s->res, &s->sync_stats);
	s->has_res = 1;
	const enum dt__api_mode m = dt__api_mode(s);
	/* An elastic ring's coordinator evaluates too when the chief was lost
	 * (train/allreduce_elastic.h): its result holds examples. */
	s->evaluated = !st && s->tc.eval_at_end &&
		       (m == M_LOCAL || m == M_MIRRORED || s->cl->is_chief || s->res.eval.examples > 0);
}

dtrain_status dtrain_session_close(dtrain_session *s, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_close");
	BUILTIN_ONLY_RUN(s, e, "dtrain_session_close");
	if (s->state == S_CLOSED)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_close: the session is closed already");
	enum dt_status st = DT_OK;
	if (s->role)
		st = dt__api_role_call(s->role, req_finish, NULL, 1, e);
	else if (s->eng)
		st = dt_session_finish(s->eng, e);
	collect_result(s, st);
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
	if (s->builtin) {
		enum dt_status bst = dt__api_run_builtin(s, e);
		s->state = S_CLOSED;
		return (dtrain_status)bst;
	}
	enum dt_status st = start(s, e);
	if (st)
		return (dtrain_status)st;
	enum dt__api_mode m = dt__api_mode(s);
	if (m == M_PS_SERVER || m == M_EVALUATOR) {
		st = m == M_PS_SERVER ? serve(s, e) : follow_checkpoints(s, e);
		s->state = S_CLOSED;
		return (dtrain_status)st;
	}
	if (s->role) {
		st = dt__api_role_call(s->role, req_run, NULL, 1, e);
		collect_result(s, st);
		s->state = S_CLOSED;
		return (dtrain_status)st;
	}
	while (!dt_session_should_stop(s->eng))
		if ((st = dt_session_step(s->eng, e)))
			return (dtrain_status)st;
	return dtrain_session_close(s, err);
}

void dtrain_session_free(dtrain_session *s)
{
	if (!s)
		return;
	dt__api_role_free(s->role); /* before the model it trains */
	dt_session_free(s->eng);
	dt_model_free(s->model);
	dt_cluster_release(&s->local_cl);
	free(s);
}

/* ---- evaluation, gradients, variables ---- */

/* Every example of d once through the model (dropout off): the mean loss
 * and accuracy (-1 without one). With grads, the first batch only,
 * training mode with dropout off, gradients left in the model. */
static enum dt_status pass(dtrain_session *s, struct dt_model *model, dtrain_data *d, int grads, double *loss,
			   double *acc, struct dt_err *e)
{
	int batch = s->tc.hp.batch_size;
	void *bufs[DT_API_MAX_INPUTS] = { 0 };
	struct dt__api_reader *r = NULL;
	enum dt_status st = dt__api_alloc_bufs(s->pm, batch, bufs, e);
	if (!st)
		st = dt__api_reader_new(d, s->pm, 0, 1, batch, s->tc.seed, 1, &r, e);
	double loss_sum = 0;
	int64_t examples = 0, correct = 0, counted = 0;
	while (!st) {
		int size = 0;
		if ((st = dt__api_reader_next(r, 0, bufs, &size, e)) || size == 0)
			break;
		struct dt_model_batch mb;
		dt__api_make_batch(&mb, model, s->feeds, s->target_feed, bufs, size);
		struct dt_step_result res;
		st = grads ? dt_model_step(model, &mb, NULL, NULL, NULL, &res, e) : dt_model_evaluate(model, &mb, &res, e);
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
	dt__api_free_bufs(bufs);
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
	if (s->builtin)
		return dt_err_set(e, DT_USAGE, "%s: a built-in session runs with dtrain_session_run only", fn);
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
	return (dtrain_status)pass(s, s->model, data, 0, loss, accuracy, e);
}

dtrain_status dtrain_session_gradients(dtrain_session *s, dtrain_data *data, double *loss, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	enum dt_status st = ready(s, "dtrain_session_gradients", e);
	if (st)
		return (dtrain_status)st;
	if (!data)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_gradients: the data is NULL");
	return (dtrain_status)pass(s, s->model, data, 1, loss, NULL, e);
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
	if (!s->eng && !s->role)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_save: this task does not train");
	if (!s->output_dir[0])
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_save: no output_dir to save to");
	if (s->role)
		return (dtrain_status)dt__api_role_call(s->role, req_save, NULL, 0, e);
	return (dtrain_status)dt_session_save(s->eng, e);
}

dtrain_status dtrain_session_restore(dtrain_session *s, const char *dir, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_restore");
	BUILTIN_ONLY_RUN(s, e, "dtrain_session_restore");
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
	struct scalar_req r = { tag, (float)value };
	if (s->role && !dt__api_role_should_stop(s->role)) {
		enum dt_status st = dt__api_role_call(s->role, req_scalar, &r, 0, e);
		(void)st; /* a write that fails is a warning (train/session.h) */
	} else if (s->eng) {
		dt_session_scalars(s->eng, &r.tag, &r.value, 1);
	}
	return DTRAIN_OK;
}
