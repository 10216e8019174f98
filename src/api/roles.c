/*
 * roles.c — a public session's trainer in a distributed mode: the engine's
 * role for it (async ps, sync ps, multi-worker mirrored, t2t's in-graph
 * master; train/ps_roles.h, sync_roles.h, allreduce_role.h) runs on a thread of its own, and the
 * caller's thread drives its open engine session one request at a time.
 *
 * Why a thread: a role owns its whole run (connect, the session, leaving
 * the cluster in order, releasing) and hands its open session only to the
 * train config's `drive` (train/local.h). The public API is a custom loop
 * the caller turns (dtrain_session_step until should_stop, then close), so
 * the role's thread waits inside `drive` for the next request; every
 * engine call stays on that one thread ("one thread drives a session"),
 * and the caller's thread only waits for each request to be done. Nothing
 * runs between two requests: the caller's thread may read the model's
 * variables then.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/alloc.h"
#include "train/allreduce_role.h"
#include "train/ps_roles.h"
#include "train/session.h"
#include "train/sync_roles.h"

struct dt__api_role {
	enum dt__api_role_kind kind;
	const struct dt_train_config *tc;
	const struct dt_cluster *cl;
	const struct dt_ps_run_config *pc;       /* the options of the ps roles, */
	const struct dt_allreduce_run_config *ac; /* of all-reduce (borrowed) */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu */
	int open;                 /* the role is in drive with its session */
	int ended;                /* the role returned: st, err */
	int64_t req_seq, done_seq;
	dt__api_role_fn fn;       /* the request; NULL: abort */
	void *fn_arg;
	int last;                 /* the request ends the session */
	enum dt_status call_st;
	struct dt_err call_err;
	int should_stop;          /* the session's, after the last request */
	int64_t global_step;
	enum dt_status st;
	struct dt_err err;
	/* the role's figures once it ended (ps sync: its barrier statistics) */
	struct dt_train_result res;
	struct dt_sync_stats stats;
};

static void *role_main(void *p)
{
	struct dt__api_role *r = p;
	struct dt_err e = DT_ERR_INIT;
	struct dt_train_result res;
	struct dt_sync_stats stats;
	memset(&stats, 0, sizeof(stats));
	enum dt_status st;
	struct dt_ps_run_config pc = *r->pc;
	pc.train = r->tc;
	pc.cluster = r->cl;
	if (r->kind == DT_API_ROLE_RING) {
		struct dt_allreduce_run_config ac = *r->ac;
		ac.train = r->tc;
		ac.cluster = r->cl;
		st = dt_train_allreduce(&ac, &res, &e);
	} else if (r->kind == DT_API_ROLE_PS_SYNC || r->kind == DT_API_ROLE_IN_GRAPH) {
		st = (r->kind == DT_API_ROLE_IN_GRAPH ? dt_train_sync_master : dt_train_sync_trainer)(&pc, &res, &stats,
												       &e);
	} else {
		st = dt_train_ps_trainer(&pc, &res, &e);
	}
	pthread_mutex_lock(&r->mu);
	r->ended = 1;
	r->open = 0;
	r->st = st;
	r->err = e;
	r->res = res;
	r->stats = stats;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

static void publish(struct dt__api_role *r, struct dt_session *s)
{
	r->should_stop = dt_session_should_stop(s);
	r->global_step = dt_session_global_step(s);
}

enum dt_status dt__api_role_drive(struct dt__api_role *r, struct dt_session *s, struct dt_err *err)
{
	pthread_mutex_lock(&r->mu);
	r->open = 1;
	publish(r, s);
	pthread_cond_broadcast(&r->cv);
	for (;;) {
		while (r->req_seq == r->done_seq)
			pthread_cond_wait(&r->cv, &r->mu);
		dt__api_role_fn fn = r->fn;
		void *arg = r->fn_arg;
		int last = r->last;
		pthread_mutex_unlock(&r->mu);
		struct dt_err e = DT_ERR_INIT;
		enum dt_status st = fn ? fn(s, arg, &e)
				       : dt_err_set(&e, DT_USAGE, "the session was freed before it was closed");
		pthread_mutex_lock(&r->mu);
		publish(r, s);
		r->call_st = st;
		r->call_err = e;
		r->done_seq = r->req_seq;
		if (st || last || !fn) {
			/* The role leaves the cluster (in order after `last`) and returns. */
			r->open = 0;
			pthread_cond_broadcast(&r->cv);
			pthread_mutex_unlock(&r->mu);
			if (st && err)
				*err = e;
			return st;
		}
		pthread_cond_broadcast(&r->cv);
	}
}

/* The role's end (under mu): joined, its status. */
static enum dt_status wait_end(struct dt__api_role *r)
{
	while (!r->ended)
		pthread_cond_wait(&r->cv, &r->mu);
	return r->st;
}

enum dt_status dt__api_role_start(enum dt__api_role_kind kind, const struct dt_train_config *tc,
				  const struct dt_cluster *cl, const struct dt_ps_run_config *pc,
				  const struct dt_allreduce_run_config *ac, struct dt__api_role **out, struct dt_err *err)
{
	struct dt__api_role *r = dt_xcalloc(1, sizeof(*r));
	r->kind = kind;
	r->tc = tc;
	r->cl = cl;
	r->pc = pc;
	r->ac = ac;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	*out = r; /* before the thread: its drive finds the role through the caller's handle */
	int rc = pthread_create(&r->thread, NULL, role_main, r);
	if (rc) {
		*out = NULL;
		pthread_cond_destroy(&r->cv);
		pthread_mutex_destroy(&r->mu);
		free(r);
		return dt_err_set(err, DT_RUNTIME, "cannot start the training thread: %s", strerror(rc));
	}
	/* Until the session is open (connected, initialized or restored), or the role failed before. */
	pthread_mutex_lock(&r->mu);
	while (!r->open && !r->ended)
		pthread_cond_wait(&r->cv, &r->mu);
	enum dt_status st = r->open ? DT_OK : r->st;
	if (!r->open && !st) /* a role that returns without a session has nothing to train */
		st = dt_err_set(&r->err, DT_INTERNAL, "the %s role ended before it trained", dt_job_name(cl->task.job));
	if (st && err)
		*err = r->err;
	pthread_mutex_unlock(&r->mu);
	if (st) {
		*out = NULL;
		dt__api_role_free(r);
	}
	return st;
}

enum dt_status dt__api_role_call(struct dt__api_role *r, dt__api_role_fn fn, void *arg, int last, struct dt_err *err)
{
	pthread_mutex_lock(&r->mu);
	if (!r->open) {
		enum dt_status st = r->ended && r->st ? r->st : DT_USAGE;
		if (err && r->ended && r->st)
			*err = r->err;
		else
			dt_err_set(err, DT_USAGE, "the run is over on this task (global step %lld)",
				   (long long)r->global_step);
		pthread_mutex_unlock(&r->mu);
		return st;
	}
	r->fn = fn;
	r->fn_arg = arg;
	r->last = last;
	const int64_t seq = ++r->req_seq;
	pthread_cond_broadcast(&r->cv);
	while (r->done_seq < seq)
		pthread_cond_wait(&r->cv, &r->mu);
	enum dt_status st = r->call_st;
	struct dt_err e = r->call_err;
	if (st || last) {
		/* The role is on its way out: its own failure (leaving the cluster,
		 * the final checkpoint) tells more than ours when ours is none. */
		enum dt_status end = wait_end(r);
		if (!st && end) {
			st = end;
			e = r->err;
		}
	}
	pthread_mutex_unlock(&r->mu);
	if (st && err)
		*err = e;
	return st;
}

int dt__api_role_should_stop(struct dt__api_role *r)
{
	pthread_mutex_lock(&r->mu);
	int stop = !r->open || r->should_stop;
	pthread_mutex_unlock(&r->mu);
	return stop;
}

int64_t dt__api_role_global_step(struct dt__api_role *r)
{
	pthread_mutex_lock(&r->mu);
	int64_t step = r->global_step;
	pthread_mutex_unlock(&r->mu);
	return step;
}

int dt__api_role_result(struct dt__api_role *r, struct dt_train_result *res, struct dt_sync_stats *stats)
{
	pthread_mutex_lock(&r->mu);
	const int ended = r->ended;
	if (ended) {
		*res = r->res;
		*stats = r->stats;
	} else {
		memset(res, 0, sizeof(*res));
		res->steps = r->global_step;
	}
	const int sync = ended && !r->st && (r->kind == DT_API_ROLE_PS_SYNC || r->kind == DT_API_ROLE_IN_GRAPH);
	pthread_mutex_unlock(&r->mu);
	return sync;
}

void dt__api_role_free(struct dt__api_role *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	if (r->open) { /* freed mid-run: the role leaves the cluster on a failure */
		r->fn = NULL;
		r->last = 1;
		++r->req_seq;
		pthread_cond_broadcast(&r->cv);
	}
	(void)wait_end(r);
	pthread_mutex_unlock(&r->mu);
	pthread_join(r->thread, NULL);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
}
