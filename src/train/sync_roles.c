#include "train/sync_roles.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/retry.h"
#include "base/rng.h"
#include "data/pipeline.h"
#include "distribute/ps_client.h"
#include "distribute/ps_wire.h"
#include "net/conn.h"
#include "net/socket.h"
#include "nn/optimizer.h"
#include "tensor/blas.h"
#include "train/checkpoint.h"
#include "train/common.h"
#include "train/ps_recovery.h"
#include "train/roles.h"
#include "train/summary.h"

/* Progress of one trainer between log lines. */
struct window {
	double loss_sum;
	int64_t correct, examples, steps, start_ns;
};

static void log_progress(const struct dt_train_config *tc, struct window *w, int64_t local_steps, int64_t gstep,
			 float lr, int64_t train_start, double barrier_s, struct dt_train_result *res)
{
	int64_t now = dt_now_ns();
	double secs = (double)(now - w->start_ns) / 1e9, elapsed = (double)(now - train_start) / 1e9;
	char eta[32];
	/* local_steps, not gstep: a resumed run did the steps before it elsewhen. */
	dt_train_format_eta(local_steps > 0 ? elapsed / (double)local_steps * (double)(tc->train_steps - gstep) : -1, eta,
			    sizeof(eta));
	dt_info("step %lld (global %lld/%lld) loss %.4f acc %.3f lr %.3g %.0f examples/s barrier %.0f%% eta %s",
		(long long)local_steps, (long long)gstep, (long long)tc->train_steps, w->loss_sum / (double)w->steps,
		(double)w->correct / (double)w->examples, (double)lr, secs > 0 ? (double)w->examples / secs : 0,
		elapsed > 0 ? 100.0 * barrier_s / elapsed : 0.0, eta);
	res->final_loss = w->loss_sum / (double)w->steps;
	*w = (struct window){ .start_ns = dt_now_ns() };
}

static double sync_timeout(const struct dt_ps_run_config *cfg)
{
	return dt__or_default(cfg->sync_timeout_s, DT_SYNC_TIMEOUT_DEFAULT_S);
}

/*
 * --eval_every on the chief or the master: when the global step crosses a
 * multiple of N (and is not the last, evaluated at the end anyway), the
 * variables it just got are evaluated on a thread of their own while it
 * trains on (train/common.h), so the others never wait for it at the
 * barrier (--sync_timeout) or the std servers for their next step. It waits
 * only when the previous evaluation has not finished by the next one, turning
 * its loop (heartbeats) meanwhile; then --sync_timeout must cover the rest of
 * that evaluation, as it covers a slow step.
 */
static enum dt_status eval_during_training(const struct dt_train_config *tc, struct dt_train_bg_eval *ev,
					   struct dt_loop *loop, const float *params, int64_t *evaluated_at,
					   int64_t gstep, struct dt_err *err)
{
	enum dt_status st = dt_train_bg_eval_poll(ev, 0, err);
	if (st || !ev || gstep >= tc->train_steps || gstep / tc->eval_every <= *evaluated_at / tc->eval_every)
		return st;
	if (dt_train_bg_eval_busy(ev))
		dt_debug("step %lld: waiting for the evaluation before the next one (--eval_every=%lld)",
			 (long long)gstep, (long long)tc->eval_every);
	while (!st && dt_train_bg_eval_busy(ev))
		st = dt_loop_run_once(loop, dt_deadline_in(1.0), err);
	if (st || (st = dt_train_bg_eval_poll(ev, 1, err)))
		return st;
	dt_train_bg_eval_start(ev, params, gstep);
	*evaluated_at = gstep;
	return DT_OK;
}

/* ---- layout 1: through the parameter servers ---- */

enum dt_status dt_train_sync_trainer(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				     struct dt_sync_stats *stats, struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	const struct dt_cluster *cl = cfg->cluster;
	memset(res, 0, sizeof(*res));
	memset(stats, 0, sizeof(*stats));
	enum dt_status st = dt_blas_load(tc->threads, err);
	if (st)
		return st;
	struct dt__role r;
	memset(&r, 0, sizeof(r));
	struct dt_ps_client *c = NULL;
	struct dt_pipeline *pipe = NULL;
	struct dt_ps_chief ch;
	memset(&ch, 0, sizeof(ch));
	struct dt_train_bg_eval *ev = NULL;
	const int chief = cl->is_chief, trainer = cl->trainer_index, trainers = cl->num_worker_replicas;
	const int aggregate = cfg->replicas_to_aggregate > 0 ? cfg->replicas_to_aggregate : trainers;
	stats->replicas_to_aggregate = aggregate;
	stats->total_replicas = trainers;
	int64_t t0 = dt_now_ns();
	if ((st = dt__role_setup(cfg, 1, chief && (tc->eval_at_end || tc->eval_every > 0), tc->hp.batch_size, &r, err)))
		goto out;
	if (chief && tc->eval_every > 0 &&
	    (st = dt_train_bg_eval_new(&tc->hp, &r.test, tc->hp.batch_size, r.loop, &ev, err)))
		goto out;
	res->load_seconds = (double)(dt_now_ns() - t0) / 1e9;
	res->num_params = (int64_t)dt_model_num_params(r.model);
	struct dt_pipeline_config pc = {
		.data = &r.train, .batch_size = tc->hp.batch_size, .seed = tc->seed,
		.shard_index = trainer, .shard_count = trainers, .prefetch = tc->prefetch,
	};
	if ((st = dt_pipeline_new(&pc, &pipe, err)))
		goto out;
	dt_info("synchronous: %d of %d trainers per step (%d backup%s), step timeout %g s; data shard %d of %d",
		aggregate, trainers, trainers - aggregate, trainers - aggregate == 1 ? "" : "s", sync_timeout(cfg), trainer,
		trainers);
	if ((st = dt__connect_ps(cfg, &r, &c, err)))
		goto out;

	const double round_s = dt__or_default(cfg->round_s, 60);
	const double first_s = fmax(dt__or_default(cfg->connect_s, 120), sync_timeout(cfg));
	struct dt_ps_sync_config sc = {
		.replicas_to_aggregate = (uint32_t)aggregate, .total_replicas = (uint32_t)trainers,
		.step_timeout_s = sync_timeout(cfg), .first_step_timeout_s = first_s,
	};
	int ended = 0;
	/* The chief's summaries count the global batch (aggregate trainers'
	 * batches per step), so it opens them itself: dt_ps_chief sees a copy of
	 * the configuration without save_summary_steps. */
	struct dt_train_config chief_tc = *tc;
	chief_tc.save_summary_steps = 0;
	struct dt_ps_run_config chief_cfg = *cfg;
	chief_cfg.train = &chief_tc;
	if (chief) {
		/* The configuration first: a ps is "initialized" only after it, and
		 * a restore sets the synchronous step (distribute/ps_sync.h). */
		st = dt_ps_client_sync_config(c, &sc, dt_deadline_in(round_s), err);
		if (!st)
			st = dt_ps_chief_init(&ch, &chief_cfg, r.model, &r.placement, err);
		ch.sync = 1;
		ch.meta[0].value = "parameter_server_sync";
		if (!st && ch.saving && tc->save_summary_steps > 0) {
			struct dt_summary_config smc = { .dir = tc->output_dir, .every = tc->save_summary_steps,
							 .last_step = tc->train_steps, .batch_size = tc->hp.batch_size * aggregate };
			st = dt_summary_new(&smc, &ch.summary, err);
		}
		/* Restores the newest checkpoint onto ps tasks that are not
		 * initialized, or initializes them (train/ps_recovery.h). */
		if (!st)
			st = dt_ps_chief_start(&ch, c, err);
	} else {
		st = dt__wait_for_model(cfg, &r, c, &ended, err);
		if (!st && !ended)
			st = dt_ps_client_sync_config(c, &sc, dt_deadline_in(round_s), err);
	}
	struct dt_ps_sync_result sr = { 0 };
	if (!st && !ended)
		st = dt_ps_client_sync_round(c, 0, 0, 0, -1, &sr, dt_deadline_in(round_s), err);
	if (st && !chief && dt_ps_client_ended_by_ps(c)) {
		/* A restarted run the chief found finished (its checkpoint at the last step). */
		dt_info("the parameter servers closed: the run is over");
		st = DT_OK;
		ended = 1;
	}
	if (st)
		goto out;
	/* A resumed run: every trainer has read one batch per step (a backup's
	 * dropped ones included), so the data goes on from there. */
	if (!ended && sr.min_step > 0) {
		if ((st = dt__pipeline_at(&pc, sr.min_step, &pipe, err)))
			goto out;
		dt_info("resuming at synchronous step %lld", (long long)sr.min_step);
	}

	struct dt_rng dropout_rng;
	dt_rng_derive(&dropout_rng, tc->seed, "dropout", (uint64_t)trainer);
	const float wd = (float)tc->hp.weight_decay;
	int64_t step = sr.min_step, gstep = sr.global_step, local_steps = 0;
	int64_t first_step = step, evaluated_at = gstep;
	uint64_t barrier_ns = 0;
	struct window w = { .start_ns = dt_now_ns() };
	int64_t train_start = w.start_ns;
	while (!ended && step < tc->train_steps) {
		const struct dt_batch *b = dt_pipeline_next(pipe);
		int correct = 0;
		float loss = dt_model_train_batch(r.model, b->x, b->y, b->size, &dropout_rng, &correct);
		if (!isfinite(loss)) {
			st = dt_err_set(err, DT_RUNTIME, "training diverged at step %lld: loss is %f", (long long)step,
					(double)loss);
			goto out;
		}
		if (wd > 0)
			dt_train_add_weight_decay(r.model, wd);
		float lr = dt_lr_at(&tc->hp, step, tc->train_steps);
		/* The ps's own deadline fails the step first, with the better message. */
		double wait_s = (step == first_step ? first_s : sync_timeout(cfg)) + round_s;
		if ((st = dt_ps_client_sync_round(c, 1, step, lr, step, &sr, dt_deadline_in(wait_s), err))) {
			if (!chief && dt_ps_client_ended_by_ps(c)) {
				dt_info("the parameter servers closed: the run is over");
				st = DT_OK;
				ended = 1;
				break;
			}
			dt_err_prefix(err, "synchronous training stopped at step %lld", (long long)step);
			goto out;
		}
		/* Summaries, and a checkpoint when due: with no backups the step
		 * cannot move on without this trainer, so the snapshot is one step's. */
		if (chief && (st = dt_ps_chief_after_step(&ch, c, sr.global_step, loss, correct, lr, err)))
			goto out;
		barrier_ns += sr.held_ns;
		stats->stale_steps += sr.dropped > 0;
		step = sr.min_step;
		gstep = sr.global_step;
		local_steps++;
		w.loss_sum += (double)loss;
		w.correct += correct;
		w.examples += b->size;
		w.steps++;
		if (tc->log_every > 0 && (local_steps % tc->log_every == 0))
			log_progress(tc, &w, local_steps, gstep, lr, train_start, (double)barrier_ns / 1e9, res);
		if ((st = eval_during_training(tc, ev, r.loop, dt_model_params(r.model), &evaluated_at, gstep, err)))
			goto out;
	}
	res->train_seconds = (double)(dt_now_ns() - train_start) / 1e9;
	if (local_steps > 0 && res->train_seconds > 0)
		res->examples_per_sec = (double)local_steps * tc->hp.batch_size / res->train_seconds;
	res->steps = gstep;
	stats->barrier_seconds = (double)barrier_ns / 1e9;
	stats->barrier_share = res->train_seconds > 0 ? stats->barrier_seconds / res->train_seconds : 0;
	dt_info("did %lld of %lld synchronous steps (%lld dropped as stale); %.1f s of %.1f s (%.0f%%) waiting at the "
		"barrier", (long long)local_steps, (long long)gstep, (long long)stats->stale_steps, stats->barrier_seconds,
		res->train_seconds, 100.0 * stats->barrier_share);
	if (chief) {
		/* The last release brought the final variables; with an output dir
		 * the final checkpoint is snapshot from the ps (the same values). */
		if ((st = dt_ps_chief_final(&ch, c, &gstep, err)) || (st = dt_ps_client_end(c, dt_deadline_in(round_s), err)))
			goto out;
		dt_info("ended the run on %d parameter server(s) at global step %lld", cl->num_ps_replicas,
			(long long)gstep);
		dt_ps_client_free(c);
		c = NULL;
		if ((st = dt_train_bg_eval_poll(ev, 1, err)) || /* one still running: nobody waits on it now */
		    (tc->eval_at_end && (st = dt_train_evaluate(r.model, &r.test, &res->eval, err))))
			goto out;
	}
out:
	dt_train_bg_eval_free(ev);
	dt_ps_chief_release(&ch);
	dt_ps_client_free(c);
	dt_pipeline_free(pipe);
	dt__role_release(&r);
	return st;
}

/* ---- layout 2: t2t's in-graph master ---- */

struct replica_task {
	struct dt_conn *conn;
	struct dt_request req;
	uint8_t setup[DT_PS_REPLICA_SETUP_MAX];
	uint8_t header[DT_PS_REPLICA_STEP_HEADER];
	uint8_t *reply;            /* DT_PS_REPLICA_REPLY_HEADER + 4 * num_params */
};

struct master {
	struct replica_task *tasks; /* (ntasks) one per ps */
	int ntasks;
	struct dt_loop *loop;
};

static int all_replied(void *arg)
{
	struct master *m = arg;
	for (int i = 0; i < m->ntasks; i++)
		if (!m->tasks[i].req.done)
			return 0;
	return 1;
}

/* Sends one request to every task (parts built by `fill`), waits for every
 * reply, and returns the first failure. */
static enum dt_status round_trip(struct master *m, uint16_t type, int (*fill)(struct master *, int, struct iovec *, void *),
				 void *arg, size_t reply_cap, int64_t deadline, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	int issued = 0;
	for (int i = 0; i < m->ntasks && !st; i++, issued++) {
		struct replica_task *t = &m->tasks[i];
		struct iovec parts[2];
		int n = fill(m, i, parts, arg);
		memset(&t->req, 0, sizeof(t->req));
		t->req.type = type;
		t->req.deadline = deadline;
		t->req.reply_buf = reply_cap ? t->reply : NULL;
		t->req.reply_cap = reply_cap;
		st = dt_conn_request(t->conn, &t->req, parts, n, 0, err);
		if (st)
			t->req.done = 1;
	}
	for (int i = issued; i < m->ntasks; i++)
		m->tasks[i].req.done = 1;
	if (st) {
		for (int i = 0; i < m->ntasks; i++)
			if (!m->tasks[i].req.done)
				dt_request_cancel(&m->tasks[i].req);
	}
	struct dt_err loop_err = DT_ERR_INIT;
	enum dt_status ls = dt_loop_run_until(m->loop, all_replied, m, deadline + 1000000000LL, "replies from the replicas",
					      &loop_err);
	if (ls) {
		for (int i = 0; i < m->ntasks; i++)
			if (!m->tasks[i].req.done)
				dt_request_cancel(&m->tasks[i].req);
	}
	if (st)
		return st;
	for (int i = 0; i < m->ntasks; i++)
		if (m->tasks[i].req.status) {
			if (err)
				*err = m->tasks[i].req.err;
			return m->tasks[i].req.status;
		}
	if (ls && err)
		*err = loop_err;
	return ls;
}

static int fill_setup(struct master *m, int i, struct iovec *parts, void *arg)
{
	size_t *lens = arg;
	parts[0] = (struct iovec){ m->tasks[i].setup, lens[i] };
	return 1;
}

struct step_args {
	int64_t step;
	float *params;
	size_t n;
};

static int fill_step(struct master *m, int i, struct iovec *parts, void *arg)
{
	struct step_args *a = arg;
	dt_ps_replica_step_encode_header(a->step, a->n, m->tasks[i].header);
	parts[0] = (struct iovec){ m->tasks[i].header, DT_PS_REPLICA_STEP_HEADER };
	parts[1] = (struct iovec){ a->params, a->n * sizeof(float) };
	return 2;
}

static int fill_end(struct master *m, int i, struct iovec *parts, void *arg)
{
	(void)m, (void)i, (void)parts, (void)arg;
	return 0;
}

static enum dt_status connect_replicas(const struct dt_ps_run_config *cfg, struct dt__role *r, struct master *m,
				       struct dt_err *err)
{
	const struct dt_cluster *cl = cfg->cluster;
	struct dt_conn_config cc = { 0 };
	const double connect_s = dt__or_default(cfg->connect_s, 120);
	int64_t deadline = dt_deadline_in(connect_s);
	char name[64];
	snprintf(name, sizeof(name), "--connect_timeout=%g s", connect_s);
	for (int i = 0; i < m->ntasks; i++) {
		char host[DT_HOST_MAX];
		int port;
		/* Retried whatever the failure (a std server paused or still
		 * starting) until --connect_timeout, like the ps clients. */
		struct dt_retry rt;
		dt_retry_init(&rt, dt_now_ns(), deadline, name, (uint64_t)getpid() ^ (uint64_t)i);
		enum dt_status st = dt_sock_split_hostport(cl->jobs[DT_JOB_PS].addrs[i], host, sizeof(host), &port, err);
		if (!st)
			st = dt_conn_dial(r->loop, host, port, &r->hello, "ps", (uint32_t)i, &cc, &rt, NULL, &m->tasks[i].conn,
					  err);
		if (st)
			return st;
	}
	return DT_OK;
}

/* The in-graph master's checkpoints and summaries (train/checkpoint.h,
 * train/summary.h); all zero without an output dir. */
struct master_ckpt {
	int saving;
	struct dt_saver saver;
	struct dt_summary *summary;
	char *hparams_json;
	struct dt_ckpt_kv meta[2];
	char replicas[16];
};

/* With an output dir: sets up the saver and the summaries, and restores the
 * newest checkpoint into the model and the optimizer (*step gets its global
 * step); otherwise, or with no checkpoint, initializes the variables from the
 * seed. The std servers get the variables with every step, and position
 * their data from the step number (dt_replica), so nothing is restored there. */
static enum dt_status master_restore(const struct dt_train_config *tc, struct master_ckpt *k, struct dt_model *model,
				     struct dt_optimizer *opt, int global_batch, int64_t *step, struct dt_err *err)
{
	*step = 0;
	if (!tc->output_dir || !*tc->output_dir) {
		dt_model_init_params(model, tc->seed);
		return DT_OK;
	}
	enum dt_status st = dt_saver_init(&k->saver, tc->output_dir, tc->save_checkpoints_steps,
					  tc->save_checkpoints_secs, tc->keep_checkpoint_max, err);
	if (st)
		return st;
	k->saving = 1;
	k->hparams_json = dt_ckpt_hparams_json(&tc->hp);
	snprintf(k->replicas, sizeof(k->replicas), "%d", global_batch / tc->hp.batch_size);
	k->meta[0] = (struct dt_ckpt_kv){ "distribution", "in_graph_sync" };
	k->meta[1] = (struct dt_ckpt_kv){ "num_replicas", k->replicas };
	if (tc->save_summary_steps > 0) {
		struct dt_summary_config sc = { .dir = tc->output_dir, .every = tc->save_summary_steps,
						.last_step = tc->train_steps, .batch_size = global_batch };
		if ((st = dt_summary_new(&sc, &k->summary, err)))
			return st;
	}
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, model);
	dt_ckpt_contents_set_optimizer(&c, opt);
	int found;
	char path[DT_CKPT_PATH_MAX];
	if ((st = dt_ckpt_restore_latest(tc->output_dir, &c, &found, path, sizeof(path), err)))
		return st;
	if (!found) {
		dt_info("no checkpoint in '%s': training from scratch", tc->output_dir);
		dt_model_init_params(model, tc->seed);
		return DT_OK;
	}
	dt_info("restored step %lld from %s", (long long)c.global_step, path);
	dt_saver_mark(&k->saver, c.global_step);
	*step = c.global_step;
	return DT_OK;
}

static enum dt_status master_save(struct master_ckpt *k, struct dt_model *model, struct dt_optimizer *opt,
				  int64_t step, struct dt_err *err)
{
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, model);
	dt_ckpt_contents_set_optimizer(&c, opt);
	c.global_step = step;
	c.hparams = k->hparams_json;
	c.extra = k->meta;
	c.num_extra = 2;
	return dt_saver_save(&k->saver, &c, err);
}

static void master_ckpt_release(struct master_ckpt *k)
{
	if (k->saving)
		dt_saver_release(&k->saver);
	dt_summary_free(k->summary);
	free(k->hparams_json);
	memset(k, 0, sizeof(*k));
}

static void master_release(struct master *m)
{
	for (int i = 0; i < m->ntasks; i++) {
		if (m->tasks[i].conn && dt_conn_is_open(m->tasks[i].conn))
			dt_conn_shutdown(m->tasks[i].conn, "the master is done");
	}
	for (int i = 0; m->loop && i < 20; i++) {
		int open = 0;
		for (int k = 0; k < m->ntasks; k++)
			open += m->tasks[k].conn && dt_conn_is_open(m->tasks[k].conn);
		if (!open || dt_loop_run_once(m->loop, dt_deadline_in(0.1), NULL))
			break;
	}
	for (int i = 0; i < m->ntasks; i++) {
		dt_conn_free(m->tasks[i].conn);
		free(m->tasks[i].reply);
	}
	free(m->tasks);
}

enum dt_status dt_train_sync_master(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				    struct dt_sync_stats *stats, struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	const struct dt_cluster *cl = cfg->cluster;
	memset(res, 0, sizeof(*res));
	memset(stats, 0, sizeof(*stats));
	enum dt_status st = dt_blas_load(tc->threads, err);
	if (st)
		return st;
	struct dt__role r;
	memset(&r, 0, sizeof(r));
	struct master m = { 0 };
	struct master_ckpt k;
	memset(&k, 0, sizeof(k));
	struct dt_optimizer opt;
	memset(&opt, 0, sizeof(opt));
	float *grad_sum = NULL;
	struct dt_train_bg_eval *ev = NULL;
	int64_t t0 = dt_now_ns();
	if ((st = dt__role_setup(cfg, 0, 1, tc->hp.batch_size, &r, err)))
		goto out;
	if (tc->eval_every > 0 && (st = dt_train_bg_eval_new(&tc->hp, &r.test, tc->hp.batch_size, r.loop, &ev, err)))
		goto out;
	res->load_seconds = (double)(dt_now_ns() - t0) / 1e9;
	const size_t n = dt_model_num_params(r.model);
	res->num_params = (int64_t)n;
	if ((st = dt_optimizer_init(&opt, &tc->hp, n, err)))
		goto out;
	const int per_task = cfg->ps_gpu > 0 ? cfg->ps_gpu : 1;
	m.ntasks = cl->num_ps_replicas;
	m.loop = r.loop;
	m.tasks = dt_xcalloc((size_t)m.ntasks, sizeof(*m.tasks));
	const int total = m.ntasks * per_task;
	stats->replicas_to_aggregate = stats->total_replicas = total;
	if (per_task > (int)DT_PS_REPLICA_MAX_PER_TASK) {
		st = dt_err_set(err, DT_USAGE, "--ps_gpu=%d: at most %u replicas per task", cfg->ps_gpu,
				DT_PS_REPLICA_MAX_PER_TASK);
		goto out;
	}
	if (cfg->worker_gpu > 0)
		dt_warn("--worker_gpu=%d is ignored: in t2t's one-master sync layout the ps tasks compute (--ps_gpu)",
			cfg->worker_gpu);
	dt_info("in-graph synchronous training: %d std server(s) x %d replica(s), batch %d each: global batch %d",
		m.ntasks, per_task, tc->hp.batch_size, total * tc->hp.batch_size);
	if ((st = connect_replicas(cfg, &r, &m, err)))
		goto out;
	size_t *lens = dt_xcalloc((size_t)m.ntasks, sizeof(*lens));
	for (int i = 0; i < m.ntasks; i++) {
		struct dt_ps_replica_setup s = {
			.replicas = (uint32_t)per_task, .first_shard = (uint32_t)(i * per_task), .total_shards = (uint32_t)total,
			.batch_size = (uint32_t)tc->hp.batch_size, .seed = tc->seed, .dropout = (float)tc->hp.dropout,
		};
		snprintf(s.problem, sizeof(s.problem), "%s", tc->problem);
		lens[i] = dt_ps_replica_setup_encode(&s, m.tasks[i].setup);
		m.tasks[i].reply = dt_xmalloc(DT_PS_REPLICA_REPLY_HEADER + n * sizeof(float));
	}
	st = round_trip(&m, DT_MSG_PS_REPLICA_SETUP, fill_setup, lens,
			0, dt_deadline_in(dt__or_default(cfg->connect_s, 120)), err);
	free(lens);
	if (st)
		goto out;
	dt_info("%d replica(s) ready", total);

	float *params = dt_model_params(r.model), *grads = dt_model_grads(r.model);
	int64_t step = 0;
	if ((st = master_restore(tc, &k, r.model, &opt, total * tc->hp.batch_size, &step, err)))
		goto out;
	const int64_t first_step = step;
	int64_t evaluated_at = step;
	grad_sum = grads;
	const float wd = (float)tc->hp.weight_decay;
	struct window w = { .start_ns = dt_now_ns() };
	int64_t train_start = w.start_ns;
	uint64_t wait_ns = 0;
	const int64_t step_ns = (int64_t)(sync_timeout(cfg) * 1e9);
	for (; step < tc->train_steps; step++) {
		struct step_args a = { step, params, n };
		int64_t sent = dt_now_ns();
		if ((st = round_trip(&m, DT_MSG_PS_REPLICA_STEP, fill_step, &a, DT_PS_REPLICA_REPLY_HEADER + n * sizeof(float),
				     sent + step_ns, err))) {
			dt_err_prefix(err, "in-graph training stopped at step %lld", (long long)step);
			goto out;
		}
		wait_ns += (uint64_t)(dt_now_ns() - sent);
		double loss = 0;
		int64_t correct = 0, examples = 0;
		for (int i = 0; i < m.ntasks; i++) {
			struct dt_ps_replica_step rep;
			struct replica_task *t = &m.tasks[i];
			if ((st = dt_ps_replica_reply_decode(t->reply, (size_t)t->req.reply.length, n, &rep, err))) {
				dt_err_prefix(err, "%s", dt_conn_peer(t->conn));
				goto out;
			}
			loss += rep.loss_sum;
			correct += rep.correct;
			examples += rep.examples;
			if (i == 0)
				memcpy(grad_sum, rep.values, n * sizeof(float));
			else
				for (size_t j = 0; j < n; j++)
					grad_sum[j] += rep.values[j];
		}
		loss /= total;
		if (!isfinite(loss)) {
			st = dt_err_set(err, DT_RUNTIME, "training diverged at step %lld: loss is %f", (long long)step, loss);
			goto out;
		}
		if (wd > 0) /* adding total * wd * p to the sum puts wd * p in its mean */
			dt_train_add_weight_decay(r.model, wd * (float)total);
		float lr = dt_lr_at(&tc->hp, step, tc->train_steps);
		dt_optimizer_apply_mean(&opt, params, grad_sum, total, 0, n, lr, step + 1);
		w.loss_sum += loss;
		w.correct += correct;
		w.examples += examples;
		w.steps++;
		dt_summary_step(k.summary, step + 1, (float)loss, (int)correct, lr);
		if (k.saving && (dt_saver_due(&k.saver, step + 1) || step + 1 == tc->train_steps)) {
			int64_t s0 = dt_now_ns();
			if ((st = master_save(&k, r.model, &opt, step + 1, err)))
				goto out;
			w.start_ns += dt_now_ns() - s0;
		}
		if (tc->log_every > 0 && ((step + 1) % tc->log_every == 0))
			log_progress(tc, &w, step + 1 - first_step, step + 1, lr, train_start, (double)wait_ns / 1e9, res);
		if ((st = eval_during_training(tc, ev, r.loop, params, &evaluated_at, step + 1, err)))
			goto out;
	}
	res->train_seconds = (double)(dt_now_ns() - train_start) / 1e9;
	if (step > first_step && res->train_seconds > 0)
		res->examples_per_sec = (double)(step - first_step) * total * tc->hp.batch_size / res->train_seconds;
	res->steps = step;
	stats->barrier_seconds = (double)wait_ns / 1e9;
	stats->barrier_share = res->train_seconds > 0 ? stats->barrier_seconds / res->train_seconds : 0;
	if ((st = round_trip(&m, DT_MSG_PS_END, fill_end, NULL, 0, dt_deadline_in(dt__or_default(cfg->round_s, 60)), err)))
		goto out;
	dt_info("ended the run on %d std server(s) at step %lld", m.ntasks, (long long)step);
	master_release(&m);
	memset(&m, 0, sizeof(m));
	if (!(st = dt_train_bg_eval_poll(ev, 1, err)) && tc->eval_at_end)
		st = dt_train_evaluate(r.model, &r.test, &res->eval, err);
out:
	dt_train_bg_eval_free(ev);
	master_release(&m);
	master_ckpt_release(&k);
	dt_optimizer_release(&opt);
	dt__role_release(&r);
	return st;
}
