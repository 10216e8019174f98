#include "train/ps_roles.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/rng.h"
#include "data/pipeline.h"
#include "data/problem.h"
#include "dist/placement.h"
#include "dist/ps_client.h"
#include "dist/ps_server.h"
#include "dist/ps_wire.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "net/socket.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "tensor/blas.h"
#include "train/common.h"

/* What every role builds: the data it needs, the model, the map, its hello. */
struct role {
	struct dt_dataset train, test;
	struct dt_model *model;
	struct dt_placement placement;
	struct dt_hello hello;
	struct dt_loop *loop;
	const struct dt_variable *vars; /* (nvars) the model's, contiguous copy */
	struct dt_variable *vars_copy;
	int nvars;
};

static void role_release(struct role *r)
{
	dt_loop_free(r->loop);
	dt_hello_release(&r->hello);
	dt_placement_release(&r->placement);
	free(r->vars_copy);
	dt_model_free(r->model);
	dt_dataset_release(&r->test);
	dt_dataset_release(&r->train);
}

static double or_default(double v, double d) { return v > 0 ? v : d; }

/* Loads data (train for trainers, test for the chief's evaluation and for a
 * ps, which needs only the input shape), builds the model, the placement and
 * the hello. */
static enum dt_status role_setup(const struct dt_ps_run_config *cfg, int load_train, int load_test, struct role *r,
				 struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	const struct dt_cluster *cl = cfg->cluster;
	enum dt_status st;
	if (load_train && (st = dt_problem_load(tc->problem, tc->data_dir, DT_SPLIT_TRAIN, tc->seed, &r->train, err)))
		return st;
	if (load_test && (st = dt_problem_load(tc->problem, tc->data_dir, DT_SPLIT_TEST, tc->seed, &r->test, err)))
		return st;
	const struct dt_dataset *d = load_train ? &r->train : &r->test;
	if ((st = dt_model_new(&tc->hp, d->height, d->width, d->channels, d->num_classes,
			       load_train ? tc->hp.batch_size : 1, &r->model, err)))
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
	if ((st = dt_ps_signature_add_vars(&r->hello.signature, r->vars, r->nvars, err)))
		return st;
	return dt_loop_new(&r->loop, err);
}

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

enum dt_status dt_train_std_server(const struct dt_ps_run_config *cfg, struct dt_err *err)
{
	const struct dt_cluster *cl = cfg->cluster;
	struct role r;
	memset(&r, 0, sizeof(r));
	struct dt_ps_server *ps = NULL;
	enum dt_status st = role_setup(cfg, 0, 1, &r, err);
	const char *addr = dt_cluster_address(cl, DT_JOB_PS, cl->task.index);
	char host[DT_HOST_MAX], bind_host[DT_HOST_MAX];
	int port = 0;
	if (!st)
		st = dt_sock_split_hostport(addr, host, sizeof(host), &port, err);
	if (!st) {
		listen_host(host, bind_host, sizeof(bind_host));
		struct dt_ps_server_config pc = {
			.host = bind_host, .port = port, .index = cl->task.index, .local = &r.hello,
			.placement = &r.placement, .num_params = dt_model_num_params(r.model), .hp = &cfg->train->hp,
			.chief_role = dt_ps_role_name(cl->chief.job), .chief_index = (uint32_t)cl->chief.index,
		};
		st = dt_ps_server_new(r.loop, &pc, &ps, err);
	}
	if (!st) {
		dt_info("serving %zu shard(s) on %s:%d; waiting for the chief (%s:%d)",
			r.placement.ps_shards[cl->task.index], bind_host, dt_ps_server_port(ps),
			dt_ps_role_name(cl->chief.job), cl->chief.index);
		/* Serves until the chief ends the run, as TensorFlow's server.join() but with an end,
		 * and with a deadline: a ps that no trainer has talked to for ps_idle_s gives up
		 * (TensorFlow's ps waits forever for a chief that is never coming back). */
		int64_t idle_since = dt_now_ns();
		while (!st && !dt_ps_server_ended(ps)) {
			st = dt_loop_run_once(r.loop, dt_deadline_in(1.0), err);
			if (dt_ps_server_conn_count(ps) > 0)
				idle_since = dt_now_ns();
			else if (!st && cfg->ps_idle_s > 0 && (double)(dt_now_ns() - idle_since) / 1e9 > cfg->ps_idle_s)
				st = idle_timeout(cfg, err);
		}
	}
	if (!st) {
		struct dt_ps_server_stats s;
		dt_ps_server_get_stats(ps, &s);
		dt_info("run over: %llu pushes applied, %llu pulls served, global step %lld; shutting down",
			(unsigned long long)s.pushes, (unsigned long long)s.pulls, (long long)s.global_step);
		if (dt_ps_server_shutdown(ps) > 0) {
			enum dt_status lingered = dt_loop_run_until(r.loop, server_closed, ps, dt_deadline_in(2.0),
								    "connections to close", NULL);
			(void)lingered;
		}
	}
	dt_ps_server_free(ps);
	role_release(&r);
	return st;
}

/* The non-chief's wait for the chief's initialization. Returns DT_OK with
 * *ended set when the run is already over. */
static enum dt_status wait_for_model(const struct dt_ps_run_config *cfg, struct role *r, struct dt_ps_client *c,
				     int *ended, struct dt_err *err)
{
	int num_ps = cfg->cluster->num_ps_replicas;
	int64_t deadline = dt_deadline_in(or_default(cfg->wait_model_s, 300));
	int64_t next_log = 0;
	for (int ps = 0; ps < num_ps;) {
		struct dt_ps_status s;
		enum dt_status st = dt_ps_client_status(c, ps, &s, dt_deadline_in(or_default(cfg->round_s, 60)), err);
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
					  or_default(cfg->wait_model_s, 300), ps);
		if (dt_now_ns() >= next_log) {
			dt_info("waiting for model: ps:%d not initialized", ps);
			next_log = dt_now_ns() + 2000000000LL;
		}
		if ((st = dt_loop_run_once(r->loop, dt_deadline_in(0.2), err)))
			return st;
	}
	return DT_OK;
}

struct window {
	double loss_sum;
	int64_t correct, examples, steps, start_ns;
};

enum dt_status dt_train_ps_trainer(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				   struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	const struct dt_cluster *cl = cfg->cluster;
	memset(res, 0, sizeof(*res));
	enum dt_status st = dt_blas_load(tc->threads, err);
	if (st)
		return st;
	struct role r;
	memset(&r, 0, sizeof(r));
	struct dt_ps_client *c = NULL;
	struct dt_pipeline *pipe = NULL;
	const int chief = cl->is_chief;
	int64_t t0 = dt_now_ns();
	if ((st = role_setup(cfg, 1, chief && tc->eval_at_end, &r, err)))
		goto out;
	res->load_seconds = (double)(dt_now_ns() - t0) / 1e9;
	res->num_params = (int64_t)dt_model_num_params(r.model);
	const int trainer = cl->global_id, trainers = cl->num_worker_replicas;
	struct dt_pipeline_config pc = {
		.data = &r.train, .batch_size = tc->hp.batch_size, .seed = tc->seed,
		.shard_index = trainer, .shard_count = trainers, .prefetch = tc->prefetch,
	};
	if ((st = dt_pipeline_new(&pc, &pipe, err)))
		goto out;
	dt_info("data: shard %d of %d, %lld examples per epoch", trainer, trainers,
		(long long)dt_pipeline_shard_size(pipe));

	float *params = dt_model_params(r.model);
	const char *const *addrs = (const char *const *)cl->jobs[DT_JOB_PS].addrs;
	struct dt_ps_client_config ccfg = {
		.ps_addrs = addrs, .local = &r.hello, .placement = &r.placement,
		.params = params, .grads = dt_model_grads(r.model),
	};
	if ((st = dt_ps_client_new(r.loop, &ccfg, dt_deadline_in(or_default(cfg->connect_s, 120)), &c, err)))
		goto out;
	dt_info("connected to %d parameter server(s)", cl->num_ps_replicas);

	const double round_s = or_default(cfg->round_s, 60);
	int64_t gstep = 0;
	int ended = 0;
	if (chief) {
		dt_model_init_params(r.model, tc->seed);
		for (int ps = 0; ps < cl->num_ps_replicas && !st; ps++) {
			struct dt_ps_status s;
			if ((st = dt_ps_client_status(c, ps, &s, dt_deadline_in(round_s), err)))
				break;
			if (s.initialized) {
				dt_info("ps:%d is already initialized (global step %lld): keeping its variables", ps,
					(long long)s.global_step);
				continue;
			}
			if (!(st = dt_ps_client_init(c, ps, dt_deadline_in(round_s), err)))
				dt_info("initialized ps:%d", ps);
		}
	} else {
		st = wait_for_model(cfg, &r, c, &ended, err);
	}
	if (!st && !ended)
		st = dt_ps_client_round(c, 0, 0, 0, 1, &gstep, dt_deadline_in(round_s), err);
	if (st)
		goto out;

	struct dt_rng dropout_rng;
	dt_rng_derive(&dropout_rng, tc->seed, "dropout", (uint64_t)trainer);
	const float scale = tc->hp.scale_lr_by_workers ? 1.0f / sqrtf((float)trainers) : 1.0f;
	const float wd = (float)tc->hp.weight_decay;
	struct window w = { .start_ns = dt_now_ns() };
	int64_t train_start = w.start_ns, local_steps = 0;
	while (!ended && gstep < tc->train_steps) {
		const struct dt_batch *b = dt_pipeline_next(pipe);
		int correct = 0;
		float loss = dt_model_train_batch(r.model, b->x, b->y, b->size, &dropout_rng, &correct);
		if (!isfinite(loss)) {
			st = dt_err_set(err, DT_RUNTIME, "training diverged at global step %lld: loss is %f",
					(long long)gstep, (double)loss);
			goto out;
		}
		if (wd > 0)
			dt_train_add_weight_decay(r.model, wd);
		float lr = dt_lr_at(&tc->hp, gstep, tc->train_steps) * scale;
		if ((st = dt_ps_client_round(c, 1, lr, 1, 1, &gstep, dt_deadline_in(round_s), err))) {
			if (!chief && dt_ps_client_ended_by_ps(c)) {
				dt_info("the parameter servers closed: the run is over");
				st = DT_OK;
				ended = 1;
				break;
			}
			dt_err_prefix(err, "training stopped at global step %lld", (long long)gstep);
			goto out;
		}
		local_steps++;
		w.loss_sum += (double)loss;
		w.correct += correct;
		w.examples += b->size;
		w.steps++;
		if (tc->log_every > 0 && (local_steps % tc->log_every == 0)) {
			int64_t now = dt_now_ns();
			double secs = (double)(now - w.start_ns) / 1e9, elapsed = (double)(now - train_start) / 1e9;
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
	}
	res->train_seconds = (double)(dt_now_ns() - train_start) / 1e9;
	if (local_steps > 0 && res->train_seconds > 0)
		res->examples_per_sec = (double)local_steps * tc->hp.batch_size / res->train_seconds;
	res->steps = gstep;
	dt_info("did %lld of %lld global steps", (long long)local_steps, (long long)gstep);
	if (chief) {
		/* The latest variables, then the end of the run, then the evaluation:
		 * nobody waits on the chief while it evaluates (and its connections,
		 * whose heartbeats stop meanwhile, are closed by then). */
		if ((st = dt_ps_client_round(c, 0, 0, 0, 1, &gstep, dt_deadline_in(round_s), err)))
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
	dt_ps_client_free(c);
	dt_pipeline_free(pipe);
	role_release(&r);
	return st;
}
