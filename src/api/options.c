/*
 * options.c — a session's typed options, its figures, evaluation reports,
 * run files and cluster secret (include/dtrain.h): what `dtrain train`
 * sets and reads, for every session.
 */
#include <stdio.h>
#include <string.h>

#include "api/internal.h"
#include "distribute/mirrored.h"
#include "tensor/blas.h"
#include "train/summary.h"

#define NULL_SESSION(e, fn) (dtrain_status)dt_err_set(e, DT_USAGE, "%s: the session is NULL", fn)

void dtrain_session_options_init(dtrain_session_options *o)
{
	if (!o)
		return;
	*o = (dtrain_session_options){
		.train_steps = 1000, .seed = 1, .threads = 1, .replicas = 1, .micro_batch = 32, .log_every = 100,
		.output_dir = "", .keep_checkpoint_max = 5, .save_summary_steps = 100,
		.sync_timeout_secs = 300, .connect_timeout_secs = 120, .ps_idle_timeout_secs = 600,
		.worker_gpu = 1, .step_timeout_secs = 60, .eval_split = DTRAIN_SPLIT_TEST,
		.eval_walk = DTRAIN_EVAL_LATEST, .eval_timeout_secs = 3600,
	};
}

/* A field outside [lo, hi]: DT_USAGE naming it. */
static enum dt_status range(const char *field, double v, double lo, double hi, struct dt_err *e)
{
	if (v >= lo && v <= hi)
		return DT_OK;
	return dt_err_set(e, DT_USAGE, "dtrain_session_configure: %s is %g; it must be from %g to %g", field, v, lo,
			  hi);
}

static enum dt_status check(const dtrain_session_options *o, struct dt_err *e)
{
	enum dt_status st;
#define RANGE(f, lo, hi)                                          \
	if ((st = range(#f, (double)o->f, (lo), (hi), e)))         \
		return st;
	RANGE(train_steps, 1, 1e15)
	RANGE(threads, 1, 1024)
	RANGE(replicas, 1, DT_MIRRORED_MAX_REPLICAS)
	RANGE(log_every, 0, 1e15)
	RANGE(eval_every, 0, 1e15)
	RANGE(save_checkpoints_steps, 0, 1e15)
	RANGE(save_checkpoints_secs, 0, 1e9)
	RANGE(keep_checkpoint_max, 0, 1e6)
	RANGE(save_summary_steps, 0, 1e15)
	RANGE(replicas_to_aggregate, 0, 1e6)
	RANGE(sync_timeout_secs, 1e-3, 1e7)
	RANGE(connect_timeout_secs, 1e-3, 86400)
	RANGE(ps_idle_timeout_secs, 0, 1e7)
	RANGE(worker_gpu, 0, 1024)
	RANGE(ps_gpu, 0, 1024)
	RANGE(step_timeout_secs, 1e-3, 86400)
	RANGE(check_replicas_every, 0, 1e15)
	RANGE(min_workers, 0, 65536)
	RANGE(eval_timeout_secs, 1e-3, 1e7)
	RANGE(eval_split, DTRAIN_SPLIT_TEST, DTRAIN_SPLIT_DEV)
	RANGE(eval_walk, DTRAIN_EVAL_LATEST, DTRAIN_EVAL_EVERY)
	if (o->deterministic) /* 0: off; one that does not divide the batch fails as training starts */
		RANGE(micro_batch, 0, 1 << 30)
#undef RANGE
	if (o->save_checkpoints_steps > 0 && o->save_checkpoints_secs > 0) {
		dt_err_set(e, DT_USAGE, "dtrain_session_configure: save_checkpoints_steps and save_checkpoints_secs "
					"are mutually exclusive");
		dt_err_hint(e, "set only one of them (neither: every 600 seconds)");
		return DT_USAGE;
	}
	if (o->output_dir && strlen(o->output_dir) >= 1024)
		return dt_err_set(e, DT_USAGE, "dtrain_session_configure: output_dir is longer than 1023 bytes");
	return DT_OK;
}

dtrain_status dtrain_session_configure(dtrain_session *s, const dtrain_session_options *o, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_configure");
	if (!o)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_configure: the options are NULL");
	if (s->state != S_NEW)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_configure: training has started; "
							      "configure before the first step");
	enum dt_status st = check(o, e);
	if (st)
		return (dtrain_status)st;
	struct dt_train_config *tc = &s->tc;
	tc->train_steps = o->train_steps;
	tc->seed = o->seed;
	tc->threads = o->threads;
	tc->prefetch = o->prefetch;
	s->replicas = o->replicas;
	tc->micro_batch = o->deterministic ? o->micro_batch : 0;
	tc->log_every = o->log_every;
	tc->eval_every = o->eval_every;
	tc->eval_at_end = o->eval_at_end;
	tc->eval_after_save = o->eval_after_save;
	snprintf(s->output_dir, sizeof(s->output_dir), "%s", o->output_dir ? o->output_dir : "");
	tc->save_checkpoints_steps = o->save_checkpoints_steps;
	tc->save_checkpoints_secs = o->save_checkpoints_secs;
	tc->keep_checkpoint_max = o->keep_checkpoint_max;
	tc->save_summary_steps = o->save_summary_steps;
	s->sync = o->sync;
	s->pc.replicas_to_aggregate = o->replicas_to_aggregate;
	s->pc.sync_timeout_s = o->sync_timeout_secs;
	s->pc.connect_s = o->connect_timeout_secs;
	s->pc.wait_model_s = o->connect_timeout_secs;
	s->pc.ps_idle_s = o->ps_idle_timeout_secs;
	s->pc.overlap = o->ps_overlap;
	s->pc.worker_gpu = o->worker_gpu;
	s->pc.ps_gpu = o->ps_gpu;
	s->ac.connect_s = o->connect_timeout_secs;
	s->ac.step_s = o->step_timeout_secs;
	s->ac.check_every = o->check_replicas_every;
	s->ac.min_workers = o->min_workers;
	s->evaluator = o->evaluator;
	s->eval_split = o->eval_split == DTRAIN_SPLIT_TRAIN ? DT_SPLIT_TRAIN
			: o->eval_split == DTRAIN_SPLIT_DEV ? DT_SPLIT_DEV
							    : DT_SPLIT_TEST;
	s->eval_once = o->eval_once;
	s->eval_walk = o->eval_walk == DTRAIN_EVAL_EVERY ? DT_EVAL_EVERY : DT_EVAL_LATEST;
	s->eval_timeout_s = o->eval_timeout_secs;
	return DTRAIN_OK;
}

dtrain_status dtrain_session_set_eval_report(dtrain_session *s, dtrain_eval_fn fn, void *user, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_set_eval_report");
	if (s->state != S_NEW)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_set_eval_report: the session has started");
	s->eval_fn = fn;
	s->eval_user = user;
	return DTRAIN_OK;
}

static void to_public(enum dt_split split, int64_t step, const struct dt_eval_result *r, dtrain_eval *out)
{
	*out = (dtrain_eval){
		.split = split == DT_SPLIT_TRAIN ? DTRAIN_SPLIT_TRAIN : split == DT_SPLIT_DEV ? DTRAIN_SPLIT_DEV : DTRAIN_SPLIT_TEST,
		.step = step, .examples = r->examples, .accuracy = r->accuracy, .loss = r->loss, .text = r->text,
		.accuracy_per_sequence = r->accuracy_per_sequence, .neg_log_perplexity = r->neg_log_perplexity,
		.bleu = r->bleu, .approx_bleu_score = r->approx_bleu_score,
	};
}

void dt__api_report_eval(void *ctx, enum dt_split split, int64_t step, const struct dt_eval_result *r)
{
	dtrain_session *s = ctx;
	if (!s->eval_fn)
		return;
	dtrain_eval ev;
	to_public(split, step, r, &ev);
	s->eval_fn(s->eval_user, &ev);
}

void dt__api_evaluator_result(dtrain_session *s, const struct dt_eval_outcome *o)
{
	memset(&s->res, 0, sizeof(s->res));
	s->evaluated = o->evaluated > 0 && o->last_step >= 0;
	if (!s->evaluated)
		return;
	s->res.steps = o->last_step;
	s->res.eval = o->last;
	s->has_res = 1;
}

dtrain_status dtrain_session_result(const dtrain_session *s, dtrain_result *out, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s || !out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_result: the %s is NULL",
						 s ? "result" : "session");
	const struct dt_train_result *r = &s->res;
	*out = (dtrain_result){
		.steps = r->steps, .num_params = r->num_params, .final_loss = r->final_loss,
		.train_seconds = r->train_seconds, .examples_per_sec = r->examples_per_sec,
		.steady_cpu_seconds = r->steady_cpu_seconds, .first_step_seconds = r->first_step_seconds,
		.steady_tokens = r->steady_tokens, .steady_positions = r->steady_positions,
		.steady_attention_pairs = r->steady_attention_pairs,
		.load_seconds = r->load_seconds, .blas_core = dt_blas_info().core, .evaluated = s->evaluated,
		.sync = s->has_sync,
	};
	if (s->evaluated)
		to_public(DT_SPLIT_TEST, r->steps, &r->eval, &out->eval);
	if (s->has_sync) {
		const struct dt_sync_stats *y = &s->sync_stats;
		out->replicas_to_aggregate = y->replicas_to_aggregate;
		out->total_replicas = y->total_replicas;
		out->barrier_seconds = y->barrier_seconds;
		out->barrier_share = y->barrier_share;
		out->stale_steps = y->stale_steps;
		out->ps_recoveries = y->recoveries;
	}
	return DTRAIN_OK;
}

void dtrain_session_hparams(const dtrain_session *s, dtrain_hparams_info *out)
{
	if (!out)
		return;
	if (!s) {
		*out = (dtrain_hparams_info){ .model = "", .optimizer = "", .lr_schedule = "" };
		return;
	}
	const struct dt_hparams *hp = &s->tc.hp;
	*out = (dtrain_hparams_info){ .model = s->builtin ? hp->model : "model", .batch_size = hp->batch_size,
				      .optimizer = hp->optimizer, .learning_rate = hp->learning_rate,
				      .lr_schedule = hp->lr_schedule, .sync = hp->sync };
}

dtrain_status dtrain_session_write_run_files(dtrain_session *s, const char *flags_text, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_write_run_files");
	enum dt__api_mode m = dt__api_mode(s);
	const int chief = dt_cluster_is_local(s->cl) || s->cl->is_chief;
	if (!s->output_dir[0] || m == M_PS_SERVER || m == M_EVALUATOR || !chief)
		return DTRAIN_OK;
	return (dtrain_status)dt_summary_write_run_files(s->output_dir, &s->tc.hp, flags_text, e);
}

dtrain_status dtrain_session_set_secret(dtrain_session *s, const char *secret_file, dtrain_wire_security mode,
					dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!s)
		return NULL_SESSION(e, "dtrain_session_set_secret");
	if (!secret_file || !*secret_file)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_set_secret: the secret file is NULL or empty");
	if (mode != DTRAIN_WIRE_AUTH && mode != DTRAIN_WIRE_ENCRYPT)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_set_secret: wire security %d is not "
							      "DTRAIN_WIRE_AUTH or DTRAIN_WIRE_ENCRYPT", (int)mode);
	if (s->state != S_NEW)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_set_secret: the session has started");
	enum dt_status st = dt_auth_load(&s->auth, secret_file, mode == DTRAIN_WIRE_ENCRYPT ? DT_WIRE_ENCRYPT : DT_WIRE_AUTH, e);
	if (st) {
		s->tc.auth = NULL;
		return (dtrain_status)st;
	}
	s->tc.auth = &s->auth;
	return DTRAIN_OK;
}
