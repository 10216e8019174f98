#include "train/roles.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/retry.h"
#include "distribute/ps_wire.h"
#include "net/conn.h"
#include "net/handshake.h"
#include "train/checkpoint.h"
#include "train/common.h"

void dt__role_release(struct dt__role *r)
{
	dt_loop_free(r->loop);
	dt_hello_release(&r->hello);
	dt_placement_release(&r->placement);
	free(r->vars_copy);
	if (!r->model_borrowed)
		dt_model_free(r->model);
	dt_dataset_release(&r->test);
	dt_dataset_release(&r->train);
}

double dt__or_default(double v, double d) { return v > 0 ? v : d; }

enum dt_status dt__role_setup(const struct dt_ps_run_config *cfg, int load_train, int load_test, int batch,
			      struct dt__role *r, struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	const struct dt_cluster *cl = cfg->cluster;
	enum dt_status st;
	if (tc->source) { /* the caller's model, trained (or, on a ps, its shapes read) in place */
		r->model = tc->source->model;
		r->model_borrowed = 1;
	} else if (!tc->source) {
		if (load_train &&
		    (st = dt_problem_load(tc->problem, tc->data_dir, tc->data, DT_SPLIT_TRAIN, tc->seed, &r->train, err)))
			return st;
		if (load_test && (st = dt_problem_load(tc->problem, tc->data_dir, tc->data, DT_SPLIT_TEST, tc->seed, &r->test, err)))
			return st;
	}
	const struct dt_dataset *d = load_train ? &r->train : &r->test;
	if (batch < 0)
		batch = tc->source ? tc->hp.batch_size : dt_train_max_batch(&tc->hp, d);
	if (!r->model && (st = dt_train_make_model(tc, d, batch > 0 ? batch : 1, &r->model, err)))
		return st;
	r->nvars = dt_model_num_variables(r->model);
	r->vars_copy = dt_xcalloc((size_t)r->nvars, sizeof(*r->vars_copy));
	for (int i = 0; i < r->nvars; i++)
		r->vars_copy[i] = *dt_model_variable(r->model, i);
	r->vars = r->vars_copy;
	if ((st = dt_placement_compute(r->vars, r->nvars, cl->num_ps_replicas, 0, &r->placement, err)))
		return st;
	char desc[256];
	dt_model_describe(r->model, desc, sizeof(desc));
	dt_info("model: %s", desc);
	if (dt_log_get_level() <= DT_LOG_INFO)
		dt_placement_print(&r->placement, r->vars, stderr);

	dt_hello_init(&r->hello, dt_ps_role_name(cl->task.job), (uint32_t)cl->task.index, dt_ps_cluster_fingerprint(cl));
	r->hello.auth = cfg->train->auth; /* every connection of this task authenticates with it */
	/* A ps's server serves row pushes and pulls, and its in-graph replicas
	 * reply with text figures; an in-graph master reads them (distribute/ps_wire.h). */
	if (cl->task.job == DT_JOB_PS)
		r->hello.features = DT_PS_FEATURE_SPARSE_ROWS | DT_PS_FEATURE_REPLICA_TEXT;
	else
		r->hello.features = DT_PS_FEATURE_REPLICA_TEXT;
	if ((st = dt_ps_signature_add_vars(&r->hello.signature, r->vars, r->nvars, err)))
		return st;
	return dt_loop_new(&r->loop, err);
}

/* The run is over when the output dir (the same on every task) holds a
 * checkpoint at --train_steps or past it: the chief saves its final one
 * just before it ends the run on the ps. */
static int run_over_on_disk(const struct dt_ps_run_config *cfg, int64_t *step, char *path, size_t cap)
{
	const char *dir = cfg->train->output_dir;
	enum dt_ckpt_poll found = DT_CKPT_POLL_NONE;
	*step = -1;
	if (!dir || !*dir || dt_ckpt_latest_path(dir, path, cap, step, &found, NULL) || found != DT_CKPT_POLL_FOUND)
		return 0;
	return *step >= cfg->train->train_steps;
}

struct run_over {
	const struct dt_ps_run_config *cfg;
	int64_t step;
	char path[DT_CKPT_PATH_MAX];
};

static int run_over_fn(void *arg)
{
	struct run_over *o = arg;
	return run_over_on_disk(o->cfg, &o->step, o->path, sizeof(o->path));
}

enum dt_status dt__reconnect(const struct dt_ps_run_config *cfg, struct dt_ps_client *c, int ps, int64_t gstep,
			     int64_t cap, int *ended, struct dt_err *err)
{
	const double wait_s = dt__or_default(cfg->connect_s, 120);
	struct dt_conn *old = dt_ps_client_conn(c, ps);
	char peer[160], at[48] = "", name[96];
	snprintf(peer, sizeof(peer), "%s", dt_conn_peer(old));
	if (gstep >= 0)
		snprintf(at, sizeof(at), " at global step %lld", (long long)gstep);
	dt_warn("lost %s%s (%s); reconnecting for up to %g s", peer, at, dt_conn_close_reason(old)->msg, wait_s);
	int64_t now = dt_now_ns(), deadline = now + (int64_t)(wait_s * 1e9);
	if (cap < deadline) {
		deadline = cap;
		snprintf(name, sizeof(name), "--connect_timeout=%g s of waiting for the model",
			 dt__or_default(cfg->wait_model_s, 300));
	} else {
		snprintf(name, sizeof(name), "--connect_timeout=%g s", wait_s);
	}
	struct dt_retry rt;
	dt_retry_init(&rt, now, deadline, name, (uint64_t)getpid() ^ ((uint64_t)ps << 32));
	/* A worker also looks for the end of the run between attempts: a ps
	 * gone for good after the chief ended the run is not a failure. */
	struct run_over over = { .cfg = cfg, .step = -1 };
	struct dt_dial_stop stop = { run_over_fn, &over };
	int fresh = 0;
	enum dt_status st = dt_ps_client_reconnect(c, ps, &rt, ended ? &stop : NULL, &fresh, err);
	if (st)
		return st;
	if (dt_ps_client_lost(c, ps)) { /* the stop: the run is over */
		dt_info("the run has ended: %s holds the final checkpoint (global step %lld, --train_steps=%lld); not "
			"waiting for ps:%d any more", over.path, (long long)over.step, (long long)cfg->train->train_steps, ps);
		*ended = 1;
		return DT_OK;
	}
	dt_info("reconnected to ps:%d (%s) after %d failed attempt(s)", ps, fresh ? "a new process" : "the same process",
		rt.attempts);
	return DT_OK;
}

enum dt_status dt__wait_for_model(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
				  int *ended, struct dt_err *err)
{
	int num_ps = cfg->cluster->num_ps_replicas;
	int64_t deadline = dt_deadline_in(dt__or_default(cfg->wait_model_s, 300));
	int64_t next_log = 0;
	for (int ps = 0; ps < num_ps;) {
		struct dt_ps_status s;
		enum dt_status st = dt_ps_client_status(c, ps, &s, dt_deadline_in(dt__or_default(cfg->round_s, 60)), err);
		if (st && dt_retry_transient(st) && dt_ps_client_lost(c, ps)) {
			/* Restarted (or paused) while we wait: reconnect within the
			 * same wait, and look at every ps again (another may have been
			 * restarted meanwhile, empty). */
			if ((st = dt__reconnect(cfg, c, ps, -1, deadline, ended, err)) || *ended)
				return st;
			ps = 0;
			continue;
		}
		if (st && dt_ps_client_ended_by_ps(c)) {
			/* The chief ended the run while we waited: the ps said so. */
			dt_info("the parameter servers closed: the run is over");
			*ended = 1;
			return DT_OK;
		}
		if (st)
			return st;
		if (ps == 0 && (s.ended || s.global_step >= cfg->train->train_steps)) {
			*ended = 1;
			return DT_OK;
		}
		if (s.initialized) {
			ps++;
			continue;
		}
		if (dt_deadline_passed(deadline))
			return dt_err_set(err, DT_TIMEOUT, "model not initialized after %.0f s: ps:%d not initialized",
					  dt__or_default(cfg->wait_model_s, 300), ps);
		if (dt_now_ns() >= next_log) {
			dt_info("waiting for model: ps:%d not initialized", ps);
			next_log = dt_now_ns() + 2000000000LL;
		}
		if ((st = dt_loop_run_once(r->loop, dt_deadline_in(0.2), err)))
			return st;
	}
	return DT_OK;
}

enum dt_status dt__late_round(const struct dt_ps_run_config *cfg, struct dt_ps_client *c, struct dt__sparse_rows *sp,
			      int sync, int64_t *gstep, struct dt_err *err)
{
	const double round_s = dt__or_default(cfg->round_s, 60);
	struct dt_err e = DT_ERR_INIT;
	enum dt_status st;
	int64_t at = 0; /* ps:0's step */
	if (sync) {
		struct dt_ps_sync_result sr;
		st = dt_ps_client_sync_round(c, 0, 0, 0, -1, &sr, dt_deadline_in(round_s), &e);
		at = st ? 0 : sr.global_step;
	} else {
		st = dt_ps_client_round(c, 0, 0, 0, 1, &at, dt_deadline_in(round_s), &e);
	}
	if (!st)
		st = dt__sparse_rows_pull_all(sp, c, dt_deadline_in(round_s), &e);
	if (!st) {
		dt_info("the run had reached %sglobal step %lld (--train_steps=%lld) before this trainer's first step: "
			"took none, pulled the run's variables", sync ? "synchronous " : "", (long long)at,
			(long long)cfg->train->train_steps);
		*gstep = at;
		return DT_OK;
	}
	if (dt_ps_client_ended_by_ps(c) || dt_retry_transient(st)) {
		dt_info("the run ended before this trainer's first step, and before it could pull the run's variables "
			"(%s): it ends with its own initial ones", e.msg);
		return DT_OK;
	}
	*err = e;
	return st;
}

enum dt_status dt__connect_ps(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client **out,
			      struct dt_err *err)
{
	const struct dt_cluster *cl = cfg->cluster;
	struct dt_ps_client_config ccfg = {
		.ps_addrs = (const char *const *)cl->jobs[DT_JOB_PS].addrs, .local = &r->hello,
		.placement = &r->placement, .params = dt_model_params(r->model), .grads = dt_model_grads(r->model),
	};
	char name[64];
	snprintf(name, sizeof(name), "--connect_timeout=%g s", dt__or_default(cfg->connect_s, 120));
	ccfg.deadline_name = name;
	ccfg.last_step = cfg->train->train_steps;
	enum dt_status st = dt_ps_client_new(r->loop, &ccfg, dt_deadline_in(dt__or_default(cfg->connect_s, 120)), out,
					     err);
	if (!st)
		dt_info("connected to %d parameter server(s)", cl->num_ps_replicas);
	return st;
}
