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
#include "base/rng.h"
#include "data/pipeline.h"
#include "data/problem.h"
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
			    struct dt_replica *replica, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	int64_t idle_since = dt_now_ns();
	while (!st && !dt_ps_server_ended(ps)) {
		st = dt_loop_run_once(r->loop, dt_deadline_in(1.0), err);
		const struct dt_err *failed = dt_ps_server_failure(ps);
		if (!failed)
			failed = dt_replica_failure(replica);
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

enum dt_status dt_train_std_server(const struct dt_ps_run_config *cfg, struct dt_err *err)
{
	const struct dt_cluster *cl = cfg->cluster;
	struct dt__role r;
	memset(&r, 0, sizeof(r));
	struct dt_ps_server *ps = NULL;
	struct dt_replica *replica = NULL;
	int ntrainers = 0;
	char **trainers = trainer_names(cl, &ntrainers);
	enum dt_status st = dt__role_setup(cfg, 0, 1, 0, &r, err);
	const char *addr = dt_cluster_address(cl, DT_JOB_PS, cl->task.index);
	char host[DT_HOST_MAX], bind_host[DT_HOST_MAX];
	int port = 0;
	if (!st)
		st = dt_sock_split_hostport(addr, host, sizeof(host), &port, err);
	if (!st)
		st = dt_replica_new(cfg, r.model, &replica, err);
	if (!st) {
		listen_host(host, bind_host, sizeof(bind_host));
		struct dt_ps_server_config pc = {
			.host = bind_host, .port = port, .index = cl->task.index, .local = &r.hello,
			.placement = &r.placement, .num_params = dt_model_num_params(r.model), .hp = &cfg->train->hp,
			.chief_role = dt_ps_role_name(cl->chief.job), .chief_index = (uint32_t)cl->chief.index,
			.trainers = (const char *const *)trainers, .num_trainers = ntrainers,
			.extension = dt_replica_extension(replica),
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
		else if (dt_replica_steps(replica) > 0)
			dt_info("run over: computed %lld in-graph replica steps; shutting down",
				(long long)dt_replica_steps(replica));
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
	dt_replica_free(replica);
	for (int i = 0; i < ntrainers; i++)
		free(trainers[i]);
	free(trainers);
	dt__role_release(&r);
	return st;
}

struct window {
	double loss_sum;
	int64_t correct, examples, steps, start_ns;
};

/* One step's forward and backward on the next batch of this trainer's shard,
 * leaving the gradient (weight decay included) in the model's grads buffer. */
struct compute {
	struct dt_model *model;
	struct dt_pipeline *pipe;
	struct dt_rng *rng;
	float wd;
	float loss;      /* out */
	int correct, size;
};

static void compute_step(void *arg)
{
	struct compute *k = arg;
	const struct dt_batch *b = dt_pipeline_next(k->pipe);
	k->correct = 0;
	k->size = b->size;
	k->loss = dt_model_train_batch(k->model, b->x, b->y, b->size, k->rng, &k->correct);
	if (isfinite(k->loss) && k->wd > 0)
		dt_train_add_weight_decay(k->model, k->wd);
}

/* The chief's evaluation during training (--eval_every). */
struct eval_job {
	struct dt_model *model;
	const struct dt_dataset *test;
	struct dt_eval_result res;
	enum dt_status st;
	struct dt_err err;
};

static void eval_main(void *arg)
{
	struct eval_job *e = arg;
	e->st = dt_train_evaluate(e->model, e->test, &e->res, &e->err);
}

/* A job on a second thread while this one keeps the ps connections going:
 * the next step's compute while a round is in flight (--ps_overlap), or the
 * chief's evaluation while the loop keeps the heartbeats flowing. Every
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

static int helper_done(void *arg)
{
	return atomic_load(&((struct helper *)arg)->done);
}

/* The chief evaluates its pulled copy of the variables (the model's params)
 * on a helper thread while this thread turns the loop, so its connections
 * keep their heartbeats and nobody takes it for dead however long it takes. */
static enum dt_status eval_now(struct dt__role *r, struct helper *h, int64_t gstep, struct dt_err *err)
{
	struct eval_job e = { .model = r->model, .test = &r->test, .err = DT_ERR_INIT };
	helper_start(h, eval_main, &e);
	enum dt_status st = DT_OK;
	while (!st && !helper_done(h))
		st = dt_loop_run_once(r->loop, dt_deadline_in(1.0), err);
	helper_join(h);
	if (!st && e.st && err)
		*err = e.err;
	if (!st && !(st = e.st))
		dt_info("eval at step %lld: accuracy %.4f loss %.4f", (long long)gstep, e.res.accuracy, e.res.loss);
	return st;
}

/* True when the global step crossed a multiple of `every` since `prev` (other
 * trainers move it too, so the chief's steps skip numbers). */
static int crossed(int64_t prev, int64_t now, int64_t every)
{
	return every > 0 && now / every > prev / every;
}

enum dt_status dt_train_ps_trainer(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				   struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	const struct dt_cluster *cl = cfg->cluster;
	memset(res, 0, sizeof(*res));
	enum dt_status st = dt_blas_load(tc->threads, err);
	if (st)
		return st;
	struct dt__role r;
	memset(&r, 0, sizeof(r));
	struct dt_ps_client *c = NULL;
	struct dt_pipeline *pipe = NULL;
	struct dt_ps_chief ch;
	memset(&ch, 0, sizeof(ch));
	struct helper h = { .running = 0 };
	float *round_params = NULL, *round_grads = NULL; /* the round's own buffers with overlap */
	const int chief = cl->is_chief;
	int64_t t0 = dt_now_ns();
	if ((st = dt__role_setup(cfg, 1, chief && (tc->eval_at_end || tc->eval_every > 0), tc->hp.batch_size, &r,
				 err)))
		goto out;
	h.loop = r.loop;
	res->load_seconds = (double)(dt_now_ns() - t0) / 1e9;
	res->num_params = (int64_t)dt_model_num_params(r.model);
	const int trainer = cl->trainer_index, trainers = cl->num_worker_replicas;
	struct dt_pipeline_config pc = {
		.data = &r.train, .batch_size = tc->hp.batch_size, .seed = tc->seed,
		.shard_index = trainer, .shard_count = trainers, .prefetch = tc->prefetch,
	};
	if ((st = dt_pipeline_new(&pc, &pipe, err)))
		goto out;
	dt_info("data: shard %d of %d, %lld examples per epoch", trainer, trainers,
		(long long)dt_pipeline_shard_size(pipe));

	if ((st = dt__connect_ps(cfg, &r, &c, err)))
		goto out;

	const double round_s = dt__or_default(cfg->round_s, 60);
	int64_t gstep = 0;
	int ended = 0;
	/* The chief restores a checkpoint or initializes, a worker waits for the
	 * model; then the first pull (train/ps_recovery.h). */
	if (!chief || !(st = dt_ps_chief_init(&ch, cfg, r.model, &r.placement, err)))
		st = dt_ps_trainer_start(cfg, &r, c, chief ? &ch : NULL, &gstep, &ended, err);
	if (st)
		goto out;

	/* With overlap, step t's round pushes from round_grads and pulls into
	 * round_params while the helper computes step t+1's gradient on the
	 * model's params (those of round t-1): one more step of staleness. */
	const size_t np = dt_model_num_params(r.model), bytes = np * sizeof(float);
	float *params = dt_model_params(r.model), *grads = dt_model_grads(r.model);
	if (cfg->overlap) {
		round_params = dt_xmalloc(bytes ? bytes : 1);
		round_grads = dt_xmalloc(bytes ? bytes : 1);
		memcpy(round_params, params, bytes);
		dt_ps_client_set_buffers(c, round_params, round_grads);
		dt_info("overlapping each step's round with the next step's compute (--ps_overlap)");
	}
	struct dt_rng dropout_rng;
	dt_rng_derive(&dropout_rng, tc->seed, "dropout", (uint64_t)trainer);
	struct compute k = { .model = r.model, .pipe = pipe, .rng = &dropout_rng, .wd = (float)tc->hp.weight_decay };
	const float scale = tc->hp.scale_lr_by_workers ? 1.0f / sqrtf((float)trainers) : 1.0f;
	struct window w = { .start_ns = dt_now_ns() };
	int64_t train_start = w.start_ns, local_steps = 0, evaluated_at = gstep, eval_ns = 0;
	int have = 0; /* the model's grads hold a gradient not pushed yet (k's figures) */
	while (!ended && gstep < tc->train_steps) {
		if (!have)
			compute_step(&k);
		have = 0;
		if (!isfinite(k.loss)) {
			st = dt_err_set(err, DT_RUNTIME, "training diverged at global step %lld: loss is %f",
					(long long)gstep, (double)k.loss);
			goto out;
		}
		const float loss = k.loss;
		const int correct = k.correct, size = k.size;
		float lr = dt_lr_at(&tc->hp, gstep, tc->train_steps) * scale;
		if (round_grads) {
			memcpy(round_grads, grads, bytes);
			helper_start(&h, compute_step, &k);
		}
		if (!(st = dt_ps_client_round(c, 1, lr, 1, 1, &gstep, dt_deadline_in(round_s), err)) && chief)
			st = dt_ps_chief_after_step(&ch, c, gstep, loss, correct, lr, err); /* summaries, checkpoints */
		if (round_grads) {
			helper_join(&h);
			have = !st; /* after a failure the recovery replaces the parameters it was computed on */
		}
		if (st) {
			if (!chief && dt_ps_client_ended_by_ps(c)) {
				dt_info("the parameter servers closed: the run is over");
				st = DT_OK;
				ended = 1;
				break;
			}
			/* A ps died: reconnect, restore (chief) or wait (worker), go on;
			 * on the model's own buffers, as the recovery expects. */
			if (dt_ps_any_lost(c, cl->num_ps_replicas)) {
				if (round_params) {
					memcpy(params, round_params, bytes);
					dt_ps_client_set_buffers(c, params, grads);
				}
				st = dt_ps_recover(cfg, &r, c, chief ? &ch : NULL, &gstep, &ended, err);
				if (round_params) {
					memcpy(round_params, params, bytes);
					dt_ps_client_set_buffers(c, round_params, round_grads);
				}
				if (!st)
					continue;
			}
			dt_err_prefix(err, "training stopped at global step %lld", (long long)gstep);
			goto out;
		}
		if (round_params)
			memcpy(params, round_params, bytes);
		local_steps++;
		w.loss_sum += (double)loss;
		w.correct += correct;
		w.examples += size;
		w.steps++;
		if (tc->log_every > 0 && (local_steps % tc->log_every == 0)) {
			int64_t now = dt_now_ns();
			double secs = (double)(now - w.start_ns) / 1e9, elapsed = (double)(now - train_start - eval_ns) / 1e9;
			char eta[32];
			dt_train_format_eta(gstep > 0 ? elapsed / (double)gstep * (double)(tc->train_steps - gstep) : -1,
					    eta, sizeof(eta));
			dt_info("step %lld (global %lld/%lld) loss %.4f acc %.3f lr %.3g %.0f examples/s eta %s",
				(long long)local_steps, (long long)gstep, (long long)tc->train_steps,
				w.loss_sum / (double)w.steps, (double)w.correct / (double)w.examples, (double)lr,
				secs > 0 ? (double)w.examples / secs : 0, eta);
			res->final_loss = w.loss_sum / (double)w.steps;
			w = (struct window){ .start_ns = dt_now_ns() };
		}
		if (chief && gstep < tc->train_steps && crossed(evaluated_at, gstep, tc->eval_every)) {
			int64_t e0 = dt_now_ns();
			if ((st = eval_now(&r, &h, gstep, err)))
				goto out;
			evaluated_at = gstep;
			eval_ns += dt_now_ns() - e0;
			w.start_ns += dt_now_ns() - e0;
		}
	}
	res->train_seconds = (double)(dt_now_ns() - train_start - eval_ns) / 1e9;
	if (local_steps > 0 && res->train_seconds > 0)
		res->examples_per_sec = (double)local_steps * tc->hp.batch_size / res->train_seconds;
	res->steps = gstep;
	dt_info("did %lld of %lld global steps", (long long)local_steps, (long long)gstep);
	if (round_params)
		dt_ps_client_set_buffers(c, params, grads);
	if (chief) {
		/* The latest variables, then the end of the run, then the evaluation:
		 * nobody waits on the chief while it evaluates (and its connections,
		 * whose heartbeats stop meanwhile, are closed by then). */
		if ((st = dt_ps_client_round(c, 0, 0, 0, 1, &gstep, dt_deadline_in(round_s), err)) ||
		    (st = dt_ps_chief_final(&ch, c, &gstep, err))) /* the final checkpoint, whose values are evaluated */
			goto out;
		res->steps = gstep;
		if ((st = dt_ps_client_end(c, dt_deadline_in(round_s), err)))
			goto out;
		dt_info("ended the run on %d parameter server(s) at global step %lld", cl->num_ps_replicas,
			(long long)gstep);
		dt_ps_client_free(c);
		c = NULL;
		if (tc->eval_at_end && (st = dt_train_evaluate(r.model, &r.test, &res->eval, err)))
			goto out;
	}
out:
	helper_join(&h);
	dt_ps_chief_release(&ch);
	dt_ps_client_free(c);
	free(round_params);
	free(round_grads);
	dt_pipeline_free(pipe);
	dt__role_release(&r);
	return st;
}
