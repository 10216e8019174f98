#include "train/sync_roles.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/trace.h"
#include "base/retry.h"
#include "distribute/in_graph.h"
#include "distribute/ps_client.h"
#include "distribute/ps_wire.h"
#include "nn/optimizer.h"
#include "nn/regularize.h"
#include "tensor/blas.h"
#include "train/checkpoint.h"
#include "train/common.h"
#include "train/ps_recovery.h"
#include "train/roles.h"
#include "train/session.h"

static double sync_timeout(const struct dt_ps_run_config *cfg)
{
	return dt__or_default(cfg->sync_timeout_s, DT_SYNC_TIMEOUT_DEFAULT_S);
}

/* What both layouts keep beside the session. */
struct sync_common {
	const struct dt_ps_run_config *cfg;
	struct dt__role *r;
	struct dt_sync_stats *stats;
	uint64_t barrier_ns;  /* time this task waited for the others (the barrier, the replicas) */
};

/* " barrier 12%": the share of training spent waiting. */
static void barrier_note(struct dt_session *s, void *self, double elapsed_s, char *buf, size_t cap)
{
	(void)s;
	const struct sync_common *k = self; /* first member of both layouts' state */
	snprintf(buf, cap, " barrier %.0f%%", elapsed_s > 0 ? 100.0 * (double)k->barrier_ns / 1e9 / elapsed_s : 0.0);
}

static enum dt_status loop_for_a_second(struct dt_session *s, void *self, struct dt_err *err)
{
	(void)s;
	const struct sync_common *k = self;
	return dt_loop_run_once(k->r->loop, dt_deadline_in(1.0), err);
}

/* The barrier's share of the training time, after the last step. */
static void barrier_stats(struct dt_session *s, struct sync_common *k)
{
	int64_t local, compute_ns, apply_ns, total_ns;
	dt__session_step_times(s, &local, &compute_ns, &apply_ns, &total_ns);
	k->stats->barrier_seconds = (double)k->barrier_ns / 1e9;
	k->stats->barrier_share = total_ns > 0 ? k->stats->barrier_seconds / ((double)total_ns / 1e9) : 0;
}

/* ---- layout 1: through the parameter servers ---- */

struct sync_trainer {
	struct sync_common k;     /* first: the shared callbacks see it */
	struct dt_ps_client *c;
	struct dt_ps_chief ch;
	struct dt_train_config chief_tc; /* the chief's saver sees no summaries: the session writes them */
	struct dt_ps_run_config chief_cfg;
	struct dt_ps_sync_config sc;
	int chief, aggregate;
	double round_s, first_s;
	int64_t first_step;       /* the synchronous step this trainer started at */
	int64_t gstep;            /* ps 0's global step after the last release */
	int64_t next_step;        /* the step its next push is tagged with */
	struct dt__sparse_rows sp; /* embeddings moved by rows (train/roles.h) */
};

static enum dt_status trainer_connect(struct dt_session *s, void *self, struct dt_strategy_info *info,
				      struct dt_err *err)
{
	(void)s;
	struct sync_trainer *t = self;
	const struct dt_cluster *cl = t->k.cfg->cluster;
	const struct dt_train_config *tc = t->k.cfg->train;
	const int trainers = cl->num_worker_replicas;
	info->chief = t->chief;
	info->shard_index = cl->trainer_index;
	info->shard_count = trainers;
	info->summary_batch = tc->hp.batch_size * t->aggregate; /* the global batch: aggregate trainers' */
	info->shared_step = 1;
	info->files = 0;
	info->slices = 1; /* every trainer reads one batch per step: one global stream */
	info->eval_where = DT_EVAL_COPY_ASYNC; /* the barrier never waits on an evaluation */
	info->loop = t->k.r->loop;
	dt_info("synchronous: %d of %d trainers per step (%d backup%s), step timeout %g s; data shard %d of %d",
		t->aggregate, trainers, trainers - t->aggregate, trainers - t->aggregate == 1 ? "" : "s",
		sync_timeout(t->k.cfg), cl->trainer_index, trainers);
	return dt__connect_ps(t->k.cfg, t->k.r, &t->c, err);
}

/* Where the input of synchronous step `step` is: the global position the
 * checkpoint of that step saved, when the output dir has one (the step a
 * restore went back to: it may have been written at another worker count),
 * else `step` global batches in (every trainer reads one batch per step). */
static void position_of_step(const struct sync_trainer *t, int64_t step, struct dt_strategy_start *at)
{
	at->batches = step;
	const char *dir = t->k.cfg->train->output_dir;
	if (step <= 0 || !dir || !*dir)
		return;
	char name[64], path[DT_CKPT_PATH_MAX];
	dt_ckpt_file_name(step, name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	struct dt_st_file *f = NULL;
	struct dt_err e = DT_ERR_INIT;
	if (dt_st_open(path, &f, &e))
		return; /* none of that step (a trainer joining live ps): derived */
	const char *g = dt_st_meta(f, "pipeline_position"), *ep = dt_st_meta(f, "pipeline_epoch"),
		   *off = dt_st_meta(f, "pipeline_offset");
	if (g && strcmp(g, "global") == 0 && ep && off) {
		at->global = 1;
		at->epoch = strtoll(ep, NULL, 10);
		at->offset = strtoll(off, NULL, 10);
		at->batches = 0;
	}
	dt_st_free(f);
}

/* The chief's checkpoints save its input position: after its batch of a
 * step, that of the step the snapshot is at. */
static void note_position(struct dt_session *s, struct sync_trainer *t)
{
	if (t->chief)
		t->ch.pos_global = dt__session_input_position(s, &t->ch.pos_epoch, &t->ch.pos_offset);
}

/* The chief configures every ps (a ps is "initialized" only after it, and a
 * restore sets the synchronous step: distribute/ps_sync.h), then restores or
 * initializes them (train/ps_recovery.h); the others wait for it. A resumed
 * run's input goes on from the step: every trainer read one batch per step
 * (a backup's dropped ones included). A worker that finds the run at its
 * last step takes none but pulls the run's variables (dt__late_round). */
static enum dt_status trainer_start(struct dt_session *s, void *self, struct dt_strategy_start *out,
				    struct dt_err *err)
{
	struct sync_trainer *t = self;
	int ended = 0;
	enum dt_status st;
	memset(out, 0, sizeof(*out));
	if (t->chief) {
		st = dt_ps_client_sync_config(t->c, &t->sc, dt_deadline_in(t->round_s), err);
		if (!st)
			st = dt_ps_chief_init(&t->ch, &t->chief_cfg, t->k.r->model, &t->k.r->placement, err);
		t->ch.sync = 1;
		t->ch.meta[0].value = "parameter_server_sync";
		if (!st)
			st = dt_ps_chief_start(&t->ch, t->c, err);
	} else {
		st = dt__wait_for_model(t->k.cfg, t->k.r, t->c, &ended, err);
		if (!st && !ended)
			st = dt_ps_client_sync_config(t->c, &t->sc, dt_deadline_in(t->round_s), err);
	}
	struct dt_ps_sync_result sr = { 0 };
	if (!st && !ended)
		st = dt_ps_client_sync_round(t->c, 0, 0, 0, -1, &sr, dt_deadline_in(t->round_s), err);
	if (st && dt_retry_transient(st) && (!t->chief || t->ch.cfg) &&
	    dt_ps_any_lost(t->c, t->k.cfg->cluster->num_ps_replicas)) {
		/* A ps lost while the trainers start (the chief's first restore, a
		 * worker's wait): recovered as mid-run, from the step ps:0 had. */
		struct dt_err e = DT_ERR_INIT;
		dt_warn("a parameter server was lost while starting (%s): recovering", err ? err->msg : "?");
		int64_t step = 0;
		st = dt_ps_recover_sync(t->k.cfg, t->k.r, t->c, t->chief ? &t->ch : NULL, &t->sc, &step, &ended, &e);
		if (st && err)
			*err = e;
		sr.min_step = sr.global_step = step;
	}
	if (st && !t->chief && dt_ps_client_ended_by_ps(t->c)) {
		/* A restarted run the chief found finished (its checkpoint at the last step). */
		dt_info("the parameter servers closed: the run is over");
		st = DT_OK;
		ended = 1;
	}
	if (st)
		return st;
	if (ended)
		dt__session_end_run(s);
	out->step = t->first_step = t->next_step = sr.min_step;
	t->gstep = sr.global_step;
	if ((st = dt__sparse_rows_start(&t->sp, t->k.cfg, t->k.r->model, t->c, err)))
		return st;
	if (ended && !t->chief) /* after the last step: one pull, the run's variables (train/roles.h) */
		return dt__late_round(t->k.cfg, t->c, &t->sp, 1, &t->gstep, err);
	if (!ended && sr.min_step > 0) {
		position_of_step(t, sr.min_step, out);
		dt_info("resuming at synchronous step %lld", (long long)sr.min_step);
	}
	return DT_OK;
}

/* With tables moved by rows, the batch's rows are pulled first, once the ps
 * has applied the step before this one: the values the release of the last
 * round brought for the other variables (the barrier holds the pull until
 * then when this trainer's earlier pushes have not been applied yet). */
static enum dt_status trainer_compute(struct dt_session *s, void *self, struct dt_step_figures *out,
				      struct dt_err *err)
{
	struct sync_trainer *t = self;
	if (t->sp.n) {
		const double wait_s = (t->next_step == t->first_step ? t->first_s : sync_timeout(t->k.cfg)) + t->round_s;
		return dt__sparse_rows_compute(&t->sp, s, t->c, t->next_step - 1, dt_deadline_in(wait_s), out, err);
	}
	return dt__session_compute_decayed(s, out, err);
}

/* A ps died (or its connection did): every trainer holds its step — it
 * pushes nothing until the recovery is done (train/ps_recovery.h): the chief
 * configures the restarted ps and restores the newest checkpoint onto every
 * ps, the workers wait for it; then all pull the restored step and continue
 * from there with the barrier whole again, their data repositioned at it (a
 * synchronous step reads one batch per shard), so the steps since the
 * checkpoint are redone on the same batches and none is counted twice. The
 * step after a restore has the first step's deadline, on the ps and here. */
static enum dt_status trainer_recover(struct dt_session *s, struct sync_trainer *t, struct dt_strategy_step *io,
				      struct dt_err *err)
{
	int64_t step = t->gstep;
	int ended = 0;
	dt_warn("synchronous step %lld: a parameter server was lost; holding the step until it is restored",
		(long long)(io->step - 1));
	enum dt_status st = dt_ps_recover_sync(t->k.cfg, t->k.r, t->c, t->chief ? &t->ch : NULL, &t->sc, &step, &ended,
					       err);
	struct dt_strategy_start at = { .step = step };
	if (!st && !ended) {
		position_of_step(t, step, &at);
		st = dt__session_seek(s, &at, err);
	}
	if (st)
		return dt_err_prefix(err, "synchronous training stopped at step %lld", (long long)(io->step - 1));
	t->k.stats->recoveries++;
	io->taken = 0;
	if (ended) {
		dt__session_end_run(s);
		io->step = t->gstep;
		return DT_OK;
	}
	t->gstep = step;
	t->first_step = t->next_step = step;
	io->step = step;
	return DT_OK;
}

/* Pushes the gradient tagged with its step and waits at the ps's barrier
 * until the average of the first replicas_to_aggregate is applied; the
 * release brings the new variables. */
static enum dt_status trainer_apply(struct dt_session *s, void *self, const struct dt_step_figures *fig, float lr,
				    struct dt_strategy_step *io, struct dt_err *err)
{
	struct sync_trainer *t = self;
	const int64_t step = io->step - 1;
	/* The ps's own deadline fails the step first, with the better message. */
	double wait_s = (step == t->first_step ? t->first_s : sync_timeout(t->k.cfg)) + t->round_s;
	struct dt_ps_sync_result sr;
	uint64_t sent0, got0, sent1, got1;
	dt_ps_client_bytes(t->c, &sent0, &got0);
	const int64_t t0 = dt_trace_begin();
	enum dt_status st = dt_ps_client_sync_round(t->c, 1, step, lr, step, &sr, dt_deadline_in(wait_s), err);
	dt_ps_client_bytes(t->c, &sent1, &got1);
	dt_trace_end(t0, "ps", "sync round: push, barrier, pull", step + 1, (int64_t)(sent1 - sent0 + got1 - got0));
	if (st && !t->chief && dt_ps_client_ended_by_ps(t->c)) {
		dt_info("the parameter servers closed: the run is over");
		dt__session_end_run(s);
		io->step = step;
		io->taken = 0;
		return DT_OK;
	}
	const int num_ps = t->k.cfg->cluster->num_ps_replicas;
	if (st && dt_ps_any_lost(t->c, num_ps))
		return trainer_recover(s, t, io, err);
	if (st)
		return dt_err_prefix(err, "synchronous training stopped at step %lld", (long long)step);
	/* Checkpoints when due: with no backups the step cannot move on without
	 * this trainer, so the snapshot is one step's. */
	note_position(s, t);
	if (t->chief && (st = dt_ps_chief_after_step(&t->ch, t->c, sr.global_step, fig, lr, err))) {
		if (!dt_ps_any_lost(t->c, num_ps))
			return st;
		t->gstep = sr.global_step;
		return trainer_recover(s, t, io, err);
	}
	t->k.barrier_ns += sr.held_ns;
	t->k.stats->stale_steps += sr.dropped > 0;
	t->gstep = sr.global_step;
	io->step = t->next_step = sr.min_step;
	return DT_OK;
}

/* Fault injection for the tests (DTRAIN_TEST_END_DELAY_S, docs/DISTRIBUTED.md):
 * the chief holds the end of the run that long after its last step, its
 * loop turning, so that a test can start a trainer after the last step
 * while the ps still serve (the window is otherwise a checkpoint's save). */
static void test_end_delay(struct sync_trainer *t)
{
	const char *env = getenv("DTRAIN_TEST_END_DELAY_S");
	const double s = env ? atof(env) : 0;
	if (!(s > 0 && s < 600))
		return;
	dt_info("test hook: the chief holds the end of the run for %g s (DTRAIN_TEST_END_DELAY_S)", s);
	const int64_t until = dt_deadline_in(s);
	while (!dt_deadline_passed(until) && !dt_loop_run_once(t->k.r->loop, until, NULL))
		;
}

/* The last release brought the final variables; with an output dir the
 * final checkpoint is snapshot from the ps (the same values). */
static enum dt_status trainer_finish(struct dt_session *s, void *self, int64_t *step, struct dt_err *err)
{
	struct sync_trainer *t = self;
	int64_t local, compute_ns, apply_ns, total_ns;
	dt__session_step_times(s, &local, &compute_ns, &apply_ns, &total_ns);
	barrier_stats(s, &t->k);
	*step = t->gstep;
	dt_info("did %lld of %lld synchronous steps (%lld dropped as stale); %.1f s of %.1f s (%.0f%%) waiting at the "
		"barrier", (long long)local, (long long)t->gstep, (long long)t->k.stats->stale_steps,
		t->k.stats->barrier_seconds, (double)total_ns / 1e9, 100.0 * t->k.stats->barrier_share);
	if (!t->chief)
		return DT_OK;
	int64_t gstep = t->gstep;
	enum dt_status st;
	note_position(s, t);
	test_end_delay(t);
	if ((st = dt_ps_chief_final(&t->ch, t->c, &gstep, err)) ||
	    (st = dt_ps_client_end(t->c, dt_deadline_in(t->round_s), err)))
		return st;
	dt_info("ended the run on %d parameter server(s) at global step %lld", t->k.cfg->cluster->num_ps_replicas,
		(long long)gstep);
	dt_ps_client_free(t->c);
	t->c = NULL;
	return DT_OK;
}

/* The step's rows of every table: the ps holds the chief's step until its
 * next push (with backups it may move on; the rows are then the newer). */
static enum dt_status trainer_before_eval(struct dt_session *s, void *self, struct dt_err *err)
{
	(void)s;
	struct sync_trainer *t = self;
	return dt__sparse_rows_pull_all(&t->sp, t->c, dt_deadline_in(t->round_s), err);
}

static const struct dt_strategy strategy_ps_sync = {
	.name = "parameter_server_sync", .connect = trainer_connect, .start = trainer_start, .compute = trainer_compute,
	.apply = trainer_apply, .wait = loop_for_a_second, .note = barrier_note, .before_eval = trainer_before_eval,
	.finish = trainer_finish,
	/* As TensorFlow's SyncReplicasOptimizer under t2t's optimize_loss: each
	 * worker clips what it pushes and the ps averages the clipped gradients
	 * (a norm of the mean would need every ps shard's sum of squares: one
	 * more round each step) */
	.clip_where = "on each trainer before its push; the ps averages the clipped gradients (as TensorFlow's "
		      "SyncReplicasOptimizer under t2t's optimize_loss)",
};

enum dt_status dt_train_sync_trainer(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				     struct dt_sync_stats *stats, struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	memset(res, 0, sizeof(*res));
	memset(stats, 0, sizeof(*stats));
	struct dt__role r;
	memset(&r, 0, sizeof(r));
	struct sync_trainer t;
	memset(&t, 0, sizeof(t));
	const int trainers = cfg->cluster->num_worker_replicas;
	t.k = (struct sync_common){ .cfg = cfg, .r = &r, .stats = stats };
	t.chief = cfg->cluster->is_chief;
	t.aggregate = cfg->replicas_to_aggregate > 0 ? cfg->replicas_to_aggregate : trainers;
	t.round_s = dt__or_default(cfg->round_s, 60);
	t.first_s = fmax(dt__or_default(cfg->connect_s, 120), sync_timeout(cfg));
	t.sc = (struct dt_ps_sync_config){
		.replicas_to_aggregate = (uint32_t)t.aggregate, .total_replicas = (uint32_t)trainers,
		.step_timeout_s = sync_timeout(cfg), .first_step_timeout_s = t.first_s,
	};
	dt__ps_chief_config(cfg, &t.chief_tc, &t.chief_cfg);
	stats->replicas_to_aggregate = t.aggregate;
	stats->total_replicas = trainers;
	enum dt_status st = dt__role_train(cfg, &r, 1, t.chief && (tc->eval_at_end || tc->eval_every > 0),
					   &strategy_ps_sync, &t, res, err);
	dt_ps_chief_release(&t.ch);
	dt_ps_client_free(t.c);
	dt__sparse_rows_release(&t.sp);
	dt__role_release(&r);
	return st;
}

/* ---- layout 2: t2t's in-graph master ---- */

/* The in-graph master: the std servers compute, it holds the variables and
 * the optimizer (the session's), restores and saves (the session's saver,
 * with the layout in the metadata). */
struct in_graph {
	struct sync_common k;     /* first: the shared callbacks see it */
	struct dt_in_graph_master *m;
	int ntasks;
	int per_task, total;
	struct dt_ckpt_kv meta[2];
	char replicas[16];
};

static enum dt_status master_connect(struct dt_session *s, void *self, struct dt_strategy_info *info,
				     struct dt_err *err)
{
	(void)s;
	struct in_graph *g = self;
	const struct dt_ps_run_config *cfg = g->k.cfg;
	const struct dt_train_config *tc = cfg->train;
	info->global_batch = g->total * tc->hp.batch_size;
	info->shared_step = 1;
	info->save_rng = 0; /* the replicas' streams are theirs */
	info->eval_where = DT_EVAL_COPY_ASYNC; /* the std servers never wait on an evaluation */
	info->loop = g->k.r->loop;
	info->ckpt_meta = g->meta;
	info->num_ckpt_meta = 2;
	if (g->per_task > (int)DT_PS_REPLICA_MAX_PER_TASK)
		return dt_err_set(err, DT_USAGE, "--ps_gpu=%d: at most %u replicas per task", cfg->ps_gpu,
				  DT_PS_REPLICA_MAX_PER_TASK);
	if (cfg->worker_gpu > 0)
		dt_warn("--worker_gpu=%d is ignored: in t2t's one-master sync layout the ps tasks compute (--ps_gpu)",
			cfg->worker_gpu);
	dt_info("in-graph synchronous training: %d std server(s) x %d replica(s), batch %d each: global batch %d",
		g->ntasks, g->per_task, tc->hp.batch_size, g->total * tc->hp.batch_size);
	enum dt_status st = dt_in_graph_connect(g->k.r->loop, (const char *const *)cfg->cluster->jobs[DT_JOB_PS].addrs,
						g->ntasks, &g->k.r->hello, dt__or_default(cfg->connect_s, 120), &g->m, err);
	if (st)
		return st;
	struct dt_ps_replica_setup *setups = dt_xcalloc((size_t)g->ntasks, sizeof(*setups));
	for (int i = 0; i < g->ntasks; i++) {
		setups[i] = (struct dt_ps_replica_setup){
			.replicas = (uint32_t)g->per_task, .first_shard = (uint32_t)(i * g->per_task),
			.total_shards = (uint32_t)g->total, .batch_size = (uint32_t)tc->hp.batch_size, .seed = tc->seed,
			.dropout = (float)tc->hp.dropout,
		};
		snprintf(setups[i].problem, sizeof(setups[i].problem), "%s", tc->problem);
	}
	st = dt_in_graph_setup(g->m, setups, dt_model_num_params(g->k.r->model),
			       dt_deadline_in(dt__or_default(cfg->connect_s, 120)), err);
	free(setups);
	if (!st)
		dt_info("%d replica(s) ready", g->total);
	return st;
}

/* The std servers get the variables with every step and position their data
 * from the step number (dt_replica), so nothing is restored there. */
static enum dt_status master_start(struct dt_session *s, void *self, struct dt_strategy_start *out,
				   struct dt_err *err)
{
	(void)self;
	return dt__session_restore_or_init(s, out, err);
}

/* Every replica's gradient of this step at the master's variables, summed
 * into the model's gradient buffer; the figures over every replica. */
static enum dt_status master_compute(struct dt_session *s, void *self, struct dt_step_figures *out,
				     struct dt_err *err)
{
	struct in_graph *g = self;
	struct dt_model *model = dt__session_model(s);
	float *grad_sum = dt_model_grads(model);
	const int64_t step = dt_session_global_step(s);
	struct dt_in_graph_figures f;
	int64_t sent = dt_now_ns();
	enum dt_status st = dt_in_graph_step(g->m, step, dt_model_params(model), grad_sum, &f,
					     sent + (int64_t)(sync_timeout(g->k.cfg) * 1e9), err);
	if (st)
		return dt_err_prefix(err, "in-graph training stopped at step %lld", (long long)step);
	g->k.barrier_ns += (uint64_t)(dt_now_ns() - sent);
	out->loss = (float)(f.loss_sum / g->total);
	out->correct = (int)f.correct;
	out->examples = (int)f.examples;
	if (f.text && f.counted > 0) { /* t2t's metrics in the progress lines and summaries, as every mode's */
		out->counted = (int)f.counted;
		out->seqs_correct = (int)f.seqs_correct;
		out->nll_sum = f.nll_sum;
		out->bleu_sum = f.bleu_sum;
		out->bleu_batches = (int)f.bleu_batches;
	}
	return DT_OK;
}

/* The mean of the replicas' gradients, weight decay included (total * wd * p
 * added to the sum puts wd * p in its mean); the moving statistics toward the
 * mean of the replicas' batch values, once a step as on a synchronous ps. */
static enum dt_status master_apply(struct dt_session *s, void *self, const struct dt_step_figures *fig, float lr,
				   struct dt_strategy_step *io, struct dt_err *err)
{
	(void)fig, (void)err;
	struct in_graph *g = self;
	struct dt_model *model = dt__session_model(s);
	const float wd = (float)g->k.cfg->train->hp.weight_decay;
	if (wd > 0)
		dt_train_add_weight_decay(model, wd * (float)g->total);
	io->grad_norm = dt_train_clip_grads(model, &g->k.cfg->train->hp, g->total);
	dt_optimizer_apply_vars(dt__session_optimizer(s), g->k.r->vars, g->k.r->nvars, dt_model_params(model),
				dt_model_grads(model), g->total, lr, io->step);
	dt_model_apply_constraints(model); /* the next step sends the replicas these variables */
	return DT_OK;
}

static enum dt_status master_finish(struct dt_session *s, void *self, int64_t *step, struct dt_err *err)
{
	struct in_graph *g = self;
	barrier_stats(s, &g->k);
	enum dt_status st = dt_in_graph_end(g->m, dt_deadline_in(dt__or_default(g->k.cfg->round_s, 60)), err);
	if (st)
		return st;
	dt_info("ended the run on %d std server(s) at step %lld", g->ntasks, (long long)*step);
	dt_in_graph_free(g->m);
	g->m = NULL;
	return DT_OK;
}

static const struct dt_strategy strategy_in_graph = {
	.name = "in_graph_sync", .connect = master_connect, .start = master_start, .compute = master_compute,
	.apply = master_apply, .wait = loop_for_a_second, .note = barrier_note, .finish = master_finish,
	.constraints = 1,
	.clip_where = "on the master, the replicas' mean",
};

enum dt_status dt_train_sync_master(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				    struct dt_sync_stats *stats, struct dt_err *err)
{
	memset(res, 0, sizeof(*res));
	memset(stats, 0, sizeof(*stats));
	struct dt__role r;
	memset(&r, 0, sizeof(r));
	struct in_graph g;
	memset(&g, 0, sizeof(g));
	g.k = (struct sync_common){ .cfg = cfg, .r = &r, .stats = stats };
	g.per_task = cfg->ps_gpu > 0 ? cfg->ps_gpu : 1;
	g.ntasks = cfg->cluster->num_ps_replicas;
	g.total = g.ntasks * g.per_task;
	snprintf(g.replicas, sizeof(g.replicas), "%d", g.total);
	g.meta[0] = (struct dt_ckpt_kv){ "distribution", "in_graph_sync" };
	g.meta[1] = (struct dt_ckpt_kv){ "num_replicas", g.replicas };
	stats->replicas_to_aggregate = stats->total_replicas = g.total;
	enum dt_status st = dt__role_train(cfg, &r, 0, 1, &strategy_in_graph, &g, res, err);
	if (st)
		dt_in_graph_leave(g.m, err);
	dt_in_graph_free(g.m);
	dt__role_release(&r);
	return st;
}
