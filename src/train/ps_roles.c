#include "train/ps_roles.h"

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
#include "distribute/in_graph.h"
#include "distribute/placement.h"
#include "distribute/ps_client.h"
#include "distribute/ps_server.h"
#include "distribute/ps_wire.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "net/socket.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "tensor/blas.h"
#include "train/common.h"
#include "train/session.h"
#include "train/ps_recovery.h"
#include "train/roles.h"
#include "train/sync_roles.h"

/* A ps listens on its own address's host when that is a loopback name, else
 * on every interface (the address may name this host as others see it). */
static void listen_host(const char *host, char *out, size_t cap)
{
	if (strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0)
		snprintf(out, cap, "%s", strcmp(host, "localhost") == 0 ? "127.0.0.1" : host);
	else
		snprintf(out, cap, "0.0.0.0");
}

static int server_closed(void *arg)
{
	return dt_ps_server_conn_count(arg) == 0;
}

static enum dt_status idle_timeout(const struct dt_ps_run_config *cfg, struct dt_err *err)
{
	const struct dt_cluster *cl = cfg->cluster;
	const char *chief = dt_cluster_address(cl, cl->chief.job, cl->chief.index);
	dt_err_set(err, DT_TIMEOUT, "no trainer has been connected for %g s and the chief (%s:%d at %s) has not ended the run",
		   cfg->ps_idle_s, dt_ps_role_name(cl->chief.job), cl->chief.index, chief ? chief : "?");
	dt_err_hint(err, "start the chief, or raise --ps_idle_timeout (0 waits forever)");
	return DT_TIMEOUT;
}

/* "chief:0", "worker:0", ...: the trainers, by global id. */
static char **trainer_names(const struct dt_cluster *cl, int *n)
{
	*n = cl->num_worker_replicas;
	char **names = dt_xcalloc((size_t)(*n ? *n : 1), sizeof(*names));
	int k = 0;
	const enum dt_job order[] = { cl->chief.job, DT_JOB_WORKER };
	for (int o = 0; o < 2; o++) {
		if (o == 1 && cl->chief.job == DT_JOB_WORKER)
			break;
		const struct dt_cluster_job *job = &cl->jobs[order[o]];
		for (int i = 0; i < job->slots && k < *n; i++) {
			if (!job->addrs[i])
				continue;
			names[k] = dt_xmalloc(48);
			snprintf(names[k], 48, "%s:%d", dt_ps_role_name(order[o]), i);
			k++;
		}
	}
	*n = k;
	return names;
}

/* Serves until the chief ends the run (TensorFlow's server.join(), but with
 * an end), a synchronous step or the in-graph master fails, or no trainer
 * has talked to it for ps_idle_s (TensorFlow's ps waits forever for a chief
 * that is never coming back). */
static enum dt_status serve(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_server *ps,
			    struct dt_in_graph_replica *replica, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	int64_t idle_since = dt_now_ns();
	while (!st && !dt_ps_server_ended(ps)) {
		st = dt_loop_run_once(r->loop, dt_deadline_in(1.0), err);
		const struct dt_err *failed = dt_ps_server_failure(ps);
		if (!failed)
			failed = dt_in_graph_replica_failure(replica);
		if (!st && failed) {
			if (err)
				*err = *failed;
			/* A moment for the error replies to leave; then every
			 * connection closes without SHUTDOWN, so no trainer takes
			 * this for the end of the run. */
			int64_t linger = dt_deadline_in(1.0);
			while (!dt_deadline_passed(linger) && !dt_loop_run_once(r->loop, linger, NULL))
				;
			return failed->status;
		}
		if (dt_ps_server_conn_count(ps) > 0)
			idle_since = dt_now_ns();
		else if (!st && cfg->ps_idle_s > 0 && (double)(dt_now_ns() - idle_since) / 1e9 > cfg->ps_idle_s)
			st = idle_timeout(cfg, err);
	}
	return st;
}

/* ---- a text problem's in-graph replicas (distribute/in_graph.h's text ops) ---- */

static enum dt_status text_model_new(const void *arg, const struct dt_hparams *hp, const struct dt_dataset *train,
				     struct dt_model **out, struct dt_err *err)
{
	const struct dt_ps_run_config *cfg = arg;
	return dt_train_model_new(cfg->train->models, hp, train, dt_train_max_batch(hp, train), out, err);
}

static enum dt_status text_input_new(const void *arg, const struct dt_dataset *train, const struct dt_hparams *hp,
				     uint64_t seed, int index, int count, int64_t batches, void **out, struct dt_err *err)
{
	(void)arg;
	struct dt_input *in = dt_train_input_new(train, hp, seed, 0);
	enum dt_status st = dt_input_start_at_batch(in, index, count, hp->batch_size, batches, err);
	if (st) {
		dt_input_free(in);
		return st;
	}
	*out = in;
	return DT_OK;
}

static enum dt_status text_input_next(void *in, const struct dt_batch **out, struct dt_err *err)
{
	return dt_input_next(in, out, err);
}

static void text_input_free(void *in) { dt_input_free(in); }

/* ---- a program's own model and data as in-graph replicas (the public API's source) ---- */

static enum dt_status source_model_new(const void *arg, const struct dt_hparams *hp, const struct dt_dataset *train,
				       struct dt_model **out, struct dt_err *err)
{
	const struct dt_train_source *src = ((const struct dt_ps_run_config *)arg)->train->source;
	(void)train;
	return src->make_model(src->arg, hp->batch_size, out, err);
}

/* Shard `index` of `count` of the program's data, `batches` batches in.
 * The input is made for the source's own model (its inputs' types and
 * sizes, which every instance of the model shares). */
static enum dt_status source_input_new(const void *arg, const struct dt_dataset *train, const struct dt_hparams *hp,
				       uint64_t seed, int index, int count, int64_t batches, void **out,
				       struct dt_err *err)
{
	const struct dt_train_source *src = ((const struct dt_ps_run_config *)arg)->train->source;
	(void)train;
	struct dt_input *in = NULL;
	enum dt_status st = src->make_input(src->arg, src->model, hp->batch_size, seed, &in, err);
	if (!st && (st = dt_input_start_at_batch(in, index, count, hp->batch_size, batches, err))) {
		dt_input_free(in);
		in = NULL;
	}
	*out = in;
	return st;
}

enum dt_status dt_train_std_server(const struct dt_ps_run_config *cfg, struct dt_err *err)
{
	const struct dt_cluster *cl = cfg->cluster;
	struct dt__role r;
	memset(&r, 0, sizeof(r));
	struct dt_ps_server *ps = NULL;
	struct dt_in_graph_replica *replica = NULL;
	int ntrainers = 0;
	char **trainers = trainer_names(cl, &ntrainers);
	const struct dt_in_graph_text_ops text_ops = { .model_new = text_model_new, .input_new = text_input_new,
						       .input_next = text_input_next, .input_free = text_input_free,
						       .arg = cfg };
	const struct dt_in_graph_text_ops source_ops = { .model_new = source_model_new, .input_new = source_input_new,
							 .input_next = text_input_next, .input_free = text_input_free,
							 .arg = cfg };
	enum dt_status st = dt__role_setup(cfg, 0, 1, 0, &r, err);
	const char *addr = dt_cluster_address(cl, DT_JOB_PS, cl->task.index);
	char host[DT_HOST_MAX], bind_host[DT_HOST_MAX];
	int port = 0;
	if (!st)
		st = dt_sock_split_hostport(addr, host, sizeof(host), &port, err);
	if (!st)
		st = dt_in_graph_replica_new(&(struct dt_in_graph_replica_config){
			.problem = cfg->train->problem, .data_dir = cfg->train->data_dir, .data = cfg->train->data,
			.hp = &cfg->train->hp, .models = cfg->train->models, .prefetch = cfg->train->prefetch, .master_role = dt_job_name(cl->chief.job),
			.master_index = (uint32_t)cl->chief.index, .num_params = dt_model_num_params(r.model),
			.features = r.hello.features,
			.text = &text_ops, .source = cfg->train->source ? &source_ops : NULL,
		}, &replica, err);
	if (!st) {
		listen_host(host, bind_host, sizeof(bind_host));
		struct dt_ps_server_config pc = {
			.host = bind_host, .port = port, .index = cl->task.index, .local = &r.hello,
			.placement = &r.placement, .num_params = dt_model_num_params(r.model), .hp = &cfg->train->hp,
			.chief_role = dt_ps_role_name(cl->chief.job), .chief_index = (uint32_t)cl->chief.index,
			.trainers = (const char *const *)trainers, .num_trainers = ntrainers,
			.extension = dt_in_graph_replica_extension(replica),
		};
		st = dt_ps_server_new(r.loop, &pc, &ps, err);
	}
	if (!st) {
		dt_info("serving %zu shard(s) on %s:%d; waiting for the chief (%s:%d)",
			r.placement.ps_shards[cl->task.index], bind_host, dt_ps_server_port(ps),
			dt_ps_role_name(cl->chief.job), cl->chief.index);
		st = serve(cfg, &r, ps, replica, err);
	}
	if (!st) {
		struct dt_ps_server_stats s;
		dt_ps_server_get_stats(ps, &s);
		if (dt_ps_server_sync(ps))
			dt_info("run over: %llu synchronous gradients accumulated, %llu dropped as stale, global step %lld; "
				"shutting down", (unsigned long long)s.sync_accepted, (unsigned long long)s.sync_dropped,
				(long long)s.global_step);
		else if (dt_in_graph_replica_steps(replica) > 0)
			dt_info("run over: computed %lld in-graph replica steps; shutting down",
				(long long)dt_in_graph_replica_steps(replica));
		else
			dt_info("run over: %llu pushes applied, %llu pulls served, global step %lld; shutting down",
				(unsigned long long)s.pushes, (unsigned long long)s.pulls, (long long)s.global_step);
		if (dt_ps_server_shutdown(ps) > 0) {
			enum dt_status lingered = dt_loop_run_until(r.loop, server_closed, ps, dt_deadline_in(2.0),
								    "connections to close", NULL);
			(void)lingered;
		}
	}
	dt_ps_server_free(ps);
	dt_in_graph_replica_free(replica);
	for (int i = 0; i < ntrainers; i++)
		free(trainers[i]);
	free(trainers);
	dt__role_release(&r);
	return st;
}

/* A job on a second thread while this one keeps the ps connections going:
 * the next step's compute while a round is in flight (--ps_overlap). Every
 * ps_client call stays on this thread. */
struct helper {
	pthread_t thread;
	int running;
	void (*fn)(void *arg);
	void *arg;
	struct dt_loop *loop;
	atomic_int done;
};

static void *helper_main(void *p)
{
	struct helper *h = p;
	h->fn(h->arg);
	atomic_store(&h->done, 1);
	dt_loop_wake(h->loop);
	return NULL;
}

/* Starts fn(arg) on the helper thread; where no thread can be had, runs it
 * here (slower, never wrong). */
static void helper_start(struct helper *h, void (*fn)(void *), void *arg)
{
	DT_ASSERT(!h->running);
	h->fn = fn;
	h->arg = arg;
	atomic_store(&h->done, 0);
	int rc = pthread_create(&h->thread, NULL, helper_main, h);
	if (rc) {
		dt_debug("cannot start a helper thread (%s): running the job inline", strerror(rc));
		fn(arg);
		atomic_store(&h->done, 1);
		return;
	}
	h->running = 1;
}

static void helper_join(struct helper *h)
{
	if (!h->running)
		return;
	int rc = pthread_join(h->thread, NULL);
	DT_ASSERT(rc == 0);
	h->running = 0;
}


/* ---- the asynchronous ps strategy (train/strategy.h) ----------------------
 * Each step: the gradient (weight decay included: the ps applies it as it
 * is) pushed, the global step += 1, the variables pulled, in one round. With
 * overlap, step t's round pushes from round_grads and pulls into round_params
 * while the helper computes step t+1's gradient on the model's params (those
 * of round t-1): one more step of staleness. */

struct ps_async {
	const struct dt_ps_run_config *cfg;
	struct dt__role *r;
	struct dt_ps_client *c;
	struct dt_ps_chief ch;
	struct dt_train_config chief_tc;   /* the chief's saver sees no summaries: the session writes them */
	struct dt_ps_run_config chief_cfg;
	int chief;
	double round_s;
	struct helper h;
	float *round_params, *round_grads; /* the round's own buffers with overlap */
	int have;                          /* the model's grads hold `next`, not pushed yet */
	struct dt_session *s;              /* for the helper's compute */
	struct dt_step_figures next;
	enum dt_status next_st;
	struct dt_err next_err;
	struct dt__sparse_rows sp;         /* embeddings moved by rows (train/roles.h) */
	int has_units;                     /* the input reads units (train/ps_units.h) */
	struct dt_ps_units units;
};

static void ps_async_release(struct ps_async *a)
{
	helper_join(&a->h);
	dt_ps_chief_release(&a->ch);
	dt_ps_units_release(&a->units);
	dt_ps_client_free(a->c);
	free(a->round_params);
	free(a->round_grads);
	dt__sparse_rows_release(&a->sp);
}

static void compute_next(void *arg)
{
	struct ps_async *a = arg;
	a->next_err = (struct dt_err)DT_ERR_INIT;
	a->next_st = dt__session_compute_decayed(a->s, &a->next, &a->next_err);
}

static enum dt_status async_connect(struct dt_session *s, void *self, struct dt_strategy_info *info,
				    struct dt_err *err)
{
	struct ps_async *a = self;
	const struct dt_cluster *cl = a->cfg->cluster;
	const struct dt_train_config *tc = a->cfg->train;
	a->s = s;
	a->h.loop = a->r->loop;
	info->chief = a->chief;
	info->shard_index = cl->trainer_index;
	info->shard_count = cl->num_worker_replicas;
	info->shared_step = 1;
	info->files = 0;
	info->eval_where = DT_EVAL_COPY_WAIT; /* heartbeats flow while the chief evaluates */
	info->loop = a->r->loop;
	info->lr_scale = tc->hp.scale_lr_by_workers ? 1.0f / sqrtf((float)cl->num_worker_replicas) : 1.0f;
	return dt__connect_ps(a->cfg, a->r, &a->c, err);
}

/* The chief restores or initializes the ps tasks (train/ps_recovery.h), the
 * others wait for them; then every trainer pulls the variables. */
static enum dt_status async_start(struct dt_session *s, void *self, struct dt_strategy_start *out, struct dt_err *err)
{
	struct ps_async *a = self;
	int ended = 0;
	enum dt_status st = DT_OK;
	memset(out, 0, sizeof(*out));
	if (!a->chief || !(st = dt_ps_chief_init(&a->ch, &a->chief_cfg, a->r->model, &a->r->placement, err)))
		st = dt_ps_trainer_start(a->cfg, a->r, a->c, a->chief ? &a->ch : NULL, &out->step, &ended, err);
	if (st)
		return st;
	if (ended)
		dt__session_end_run(s);
	if ((st = dt__sparse_rows_start(&a->sp, a->cfg, a->r->model, a->c, err)))
		return st;
	/* The data as units of one layout (train/ps_units.h): a checkpoint of
	 * another trainer count resumes with every example once per epoch. */
	const int64_t nu = dt__session_units_per_epoch(s);
	if (nu > 0) {
		const struct dt_cluster *cl = a->cfg->cluster;
		if ((st = dt_ps_units_start(&a->units, a->cfg->train->output_dir, nu, cl->num_worker_replicas,
					    cl->trainer_index, &out->epoch, &out->offset, err)))
			return st;
		a->has_units = 1;
		out->units = &a->units.layout;
		if (a->chief)
			a->ch.units = &a->units;
	}
	if (ended && !a->chief) { /* one round: the run's variables, and this trainer's position reported */
		if (a->has_units)
			dt_ps_client_set_position(a->c, a->units.index, a->units.layout.trainers, out->epoch, out->offset);
		return dt__late_round(a->cfg, a->c, &a->sp, 0, &out->step, err);
	}
	if (a->cfg->overlap && a->sp.n) /* the next batch's rows are pulled before its forward pass */
		dt_info("--ps_overlap off: the embedding tables move by rows");
	else if (a->cfg->overlap) {
		const size_t bytes = dt_model_num_params(a->r->model) * sizeof(float);
		a->round_params = dt_xmalloc(bytes ? bytes : 1);
		a->round_grads = dt_xmalloc(bytes ? bytes : 1);
		memcpy(a->round_params, dt_model_params(a->r->model), bytes);
		dt_ps_client_set_buffers(a->c, a->round_params, a->round_grads);
		dt_info("overlapping each step's round with the next step's compute (--ps_overlap)");
	}
	return DT_OK;
}

static enum dt_status async_compute(struct dt_session *s, void *self, struct dt_step_figures *out, struct dt_err *err)
{
	struct ps_async *a = self;
	if (a->sp.n)
		return dt__sparse_rows_compute(&a->sp, s, a->c, -1, dt_deadline_in(a->round_s), out, err);
	if (!a->have)
		return dt__session_compute_decayed(s, out, err);
	a->have = 0;
	*out = a->next;
	if (a->next_st && err)
		*err = a->next_err;
	return a->next_st;
}

/* A ps died: reconnect, restore (chief) or wait (worker), go on; on the
 * model's own buffers, as the recovery expects. */
static enum dt_status recover(struct ps_async *a, int64_t *gstep, int *ended, struct dt_err *err)
{
	float *params = dt_model_params(a->r->model), *grads = dt_model_grads(a->r->model);
	const size_t bytes = dt_model_num_params(a->r->model) * sizeof(float);
	if (a->round_params) {
		memcpy(params, a->round_params, bytes);
		dt_ps_client_set_buffers(a->c, params, grads);
	}
	enum dt_status st = dt_ps_recover(a->cfg, a->r, a->c, a->chief ? &a->ch : NULL, gstep, ended, err);
	if (a->round_params) {
		memcpy(a->round_params, params, bytes);
		dt_ps_client_set_buffers(a->c, a->round_params, a->round_grads);
	}
	return st;
}

static enum dt_status async_apply(struct dt_session *s, void *self, const struct dt_step_figures *fig, float lr,
				  struct dt_strategy_step *io, struct dt_err *err)
{
	struct ps_async *a = self;
	float *params = dt_model_params(a->r->model), *grads = dt_model_grads(a->r->model);
	const size_t bytes = dt_model_num_params(a->r->model) * sizeof(float);
	int64_t gstep = io->step - 1;
	if (a->has_units) { /* after this step's batch, before the helper reads the next */
		int64_t epoch, taken;
		(void)dt__session_input_position(s, &epoch, &taken);
		dt_ps_client_set_position(a->c, a->units.index, a->units.layout.trainers, epoch, taken);
	}
	if (a->round_grads) {
		memcpy(a->round_grads, grads, bytes);
		helper_start(&a->h, compute_next, a);
	}
	uint64_t sent0, got0, sent1, got1;
	dt_ps_client_bytes(a->c, &sent0, &got0);
	const int64_t t0 = dt_trace_begin();
	enum dt_status st = dt_ps_client_round(a->c, 1, lr, 1, 1, &gstep, dt_deadline_in(a->round_s), err);
	dt_ps_client_bytes(a->c, &sent1, &got1);
	dt_trace_end(t0, "ps", "round: push, step, pull", gstep, (int64_t)(sent1 - sent0 + got1 - got0));
	if (!st && a->chief) /* checkpoints, snapshot from the ps when due */
		st = dt_ps_chief_after_step(&a->ch, a->c, gstep, fig, lr, err);
	if (a->round_grads) {
		helper_join(&a->h);
		a->have = !st; /* after a failure the recovery replaces the parameters it was computed on */
	}
	io->step = gstep;
	if (!st) {
		if (a->round_params)
			memcpy(params, a->round_params, bytes);
		return DT_OK;
	}
	int ended = 0;
	if (!a->chief && dt_ps_client_ended_by_ps(a->c)) {
		dt_info("the parameter servers closed: the run is over");
		ended = 1;
		st = DT_OK;
	} else if (dt_ps_any_lost(a->c, a->cfg->cluster->num_ps_replicas)) {
		st = recover(a, &gstep, &ended, err);
	}
	if (st)
		return dt_err_prefix(err, "training stopped at global step %lld", (long long)gstep);
	io->step = gstep; /* a recovery may have gone back to a checkpoint's: the steps since are redone */
	io->taken = 0;
	if (ended)
		dt__session_end_run(s);
	return DT_OK;
}

static enum dt_status loop_for_a_second(struct dt_session *s, void *self, struct dt_err *err)
{
	(void)s;
	struct ps_async *a = self;
	return dt_loop_run_once(a->r->loop, dt_deadline_in(1.0), err);
}

/* The chief: the latest variables, then the final checkpoint (whose values
 * it evaluates), then the end of the run on every ps, so that nobody waits
 * on it while it evaluates (its connections, whose heartbeats stop
 * meanwhile, are closed by then). */
static enum dt_status async_finish(struct dt_session *s, void *self, int64_t *gstep, struct dt_err *err)
{
	struct ps_async *a = self;
	int64_t local, compute_ns, apply_ns, total_ns;
	dt__session_step_times(s, &local, &compute_ns, &apply_ns, &total_ns);
	dt_info("did %lld of %lld global steps", (long long)local, (long long)*gstep);
	if (a->round_params)
		dt_ps_client_set_buffers(a->c, dt_model_params(a->r->model), dt_model_grads(a->r->model));
	if (!a->chief)
		return DT_OK;
	enum dt_status st;
	if (a->has_units && a->ch.saving) {
		const int missing = dt_ps_units_wait_final(&a->units, dt_ps_client_conn(a->c, 0), *gstep,
							   dt_deadline_in(10.0));
		if (missing)
			dt_warn("%d trainer(s) did not report their last data position within 10 s; the final checkpoint "
				"holds their last one (a resume reads again what they read since)", missing);
	}
	if ((st = dt_ps_client_round(a->c, 0, 0, 0, 1, gstep, dt_deadline_in(a->round_s), err)) ||
	    (st = dt_ps_chief_final(&a->ch, a->c, gstep, err)) ||
	    (st = dt_ps_client_end(a->c, dt_deadline_in(a->round_s), err)))
		return st;
	dt_info("ended the run on %d parameter server(s) at global step %lld", a->cfg->cluster->num_ps_replicas,
		(long long)*gstep);
	dt_ps_client_free(a->c);
	a->c = NULL;
	return DT_OK;
}

static enum dt_status async_before_eval(struct dt_session *s, void *self, struct dt_err *err)
{
	(void)s;
	struct ps_async *a = self;
	return dt__sparse_rows_pull_all(&a->sp, a->c, dt_deadline_in(a->round_s), err);
}

static const struct dt_strategy strategy_ps_async = {
	.name = "parameter_server_async", .connect = async_connect, .start = async_start, .compute = async_compute,
	.apply = async_apply, .wait = loop_for_a_second, .before_eval = async_before_eval, .finish = async_finish,
	.clip_where = "on each trainer before its push, as TensorFlow's trainers do (tables moved by rows: the touched "
		      "rows)",
};

enum dt_status dt_train_ps_trainer(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				   struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	memset(res, 0, sizeof(*res));
	struct dt__role r;
	memset(&r, 0, sizeof(r));
	struct ps_async a;
	memset(&a, 0, sizeof(a));
	a.cfg = cfg;
	a.r = &r;
	a.chief = cfg->cluster->is_chief;
	a.round_s = dt__or_default(cfg->round_s, 60);
	dt__ps_chief_config(cfg, &a.chief_tc, &a.chief_cfg);
	enum dt_status st = dt__role_train(cfg, &r, 1, a.chief && (tc->eval_at_end || tc->eval_every > 0),
					   &strategy_ps_async, &a, res, err);
	ps_async_release(&a);
	dt__role_release(&r);
	return st;
}
