#include "train/allreduce_role.h"
#include "train/allreduce_buckets.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/rng.h"
#include "data/pipeline.h"
#include "data/problem.h"
#include "distribute/collective.h"
#include "distribute/mirrored.h"
#include "distribute/ps_wire.h"
#include "net/handshake.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "tensor/blas.h"
#include "train/checkpoint.h"
#include "train/summary.h"
#include "train/common.h"

static double or_default(double v, double d) { return v > 0 ? v : d; }

/* ---- ranks ---------------------------------------------------------------- */

/* The trainer jobs in rank order: the chief's job first, then the others
 * alphabetically (enum dt_job is alphabetical). */
static int rank_jobs(const struct dt_cluster *cl, enum dt_job *order)
{
	int n = 0;
	order[n++] = cl->chief.job;
	const enum dt_job trainers[] = { DT_JOB_CHIEF, DT_JOB_MASTER, DT_JOB_WORKER };
	for (size_t i = 0; i < sizeof(trainers) / sizeof(trainers[0]); i++)
		if (trainers[i] != cl->chief.job)
			order[n++] = trainers[i];
	return n;
}

/* Calls fn(job, index, rank) for every trainer task in rank order; returns the count. */
static int walk_ranks(const struct dt_cluster *cl, void (*fn)(void *, enum dt_job, int, int), void *arg)
{
	enum dt_job order[4];
	int njobs = rank_jobs(cl, order), rank = 0;
	for (int k = 0; k < njobs; k++) {
		const struct dt_cluster_job *j = &cl->jobs[order[k]];
		for (int i = 0; i < j->slots; i++) {
			if (!j->addrs || !j->addrs[i])
				continue;
			if (fn)
				fn(arg, order[k], i, rank);
			rank++;
		}
	}
	return rank;
}

struct find_self {
	const struct dt_cluster *cl;
	int rank;
};

static void note_self(void *arg, enum dt_job job, int index, int rank)
{
	struct find_self *f = arg;
	if (f->cl->task.job == job && f->cl->task.index == index)
		f->rank = rank;
}

int dt_allreduce_rank(const struct dt_cluster *cl, int *size)
{
	struct find_self f = { cl, -1 };
	int n = walk_ranks(cl, note_self, &f);
	if (size)
		*size = n;
	return f.rank;
}

/* Every rank as the communicator sees it, and its "worker:1" name, in rank order. */
struct rank_table {
	struct dt_comm_peer *peers; /* (size) strings borrowed from the cluster */
	char (*names)[48];          /* (size) */
};

static void note_rank(void *arg, enum dt_job job, int index, int rank)
{
	struct { const struct dt_cluster *cl; struct rank_table *t; } *a = arg;
	a->t->peers[rank] = (struct dt_comm_peer){ dt_cluster_address(a->cl, job, index), dt_job_name(job),
						   (uint32_t)index };
	snprintf(a->t->names[rank], sizeof(a->t->names[rank]), "%s:%d", dt_job_name(job), index);
}

/* ---- the communication thread -------------------------------------------- */

/*
 * All-reduces the buckets of one step in order, each as soon as the main
 * thread says its whole range is final: during the backward pass when it
 * is overlapped (ready grows as layers finish), or all at once after it.
 * Meanwhile the main thread applies the optimizer to the buckets already
 * reduced. One comm, one user at a time (distribute/collective.h): the main
 * thread touches the comm only between steps, once every bucket is done.
 */
struct comm_thread {
	struct dt_comm *comm;
	float *grads;
	const struct dt_allreduce_bucket *buckets;
	int nbuckets;
	double step_s;
	pthread_t thread;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int64_t requested;  /* steps started */
	int64_t served;     /* steps the thread has taken up */
	int ready;          /* buckets of the current step whose range is final */
	int done;           /* buckets of the current step reduced */
	int stop;
	enum dt_status st;  /* first failure; the thread stops reducing after it */
	struct dt_err err;
	int announced;      /* main thread only: `ready` as it last set it */
};

static enum dt_status reduce_bucket(struct dt_comm *comm, float *grads, const struct dt_allreduce_bucket *b, int k,
				    double step_s, struct dt_err *err)
{
	char name[32];
	snprintf(name, sizeof(name), "grads/bucket_%d", k);
	return dt_allreduce_sum_f32(comm, grads + b->offset, b->count, name, dt_deadline_in(step_s), err);
}

static void *comm_main(void *arg)
{
	struct comm_thread *c = arg;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		while (!c->stop && c->served == c->requested)
			pthread_cond_wait(&c->cv, &c->mu);
		if (c->stop) {
			pthread_mutex_unlock(&c->mu);
			return NULL;
		}
		c->served++;
		int failed = c->st != DT_OK;
		pthread_mutex_unlock(&c->mu);
		for (int k = 0; k < c->nbuckets && !failed; k++) {
			pthread_mutex_lock(&c->mu);
			while (!c->stop && c->ready <= k)
				pthread_cond_wait(&c->cv, &c->mu);
			int stop = c->stop;
			pthread_mutex_unlock(&c->mu);
			if (stop)
				return NULL; /* the main thread gave up mid-step */
			struct dt_err e = DT_ERR_INIT;
			enum dt_status st = reduce_bucket(c->comm, c->grads, &c->buckets[k], k, c->step_s, &e);
			pthread_mutex_lock(&c->mu);
			if (st) {
				c->st = st;
				c->err = e;
				failed = 1;
			}
			c->done = k + 1;
			pthread_cond_broadcast(&c->cv);
			pthread_mutex_unlock(&c->mu);
		}
	}
}

/* Main thread: a new step, no bucket ready yet. */
static void comm_thread_begin_step(struct comm_thread *c)
{
	pthread_mutex_lock(&c->mu);
	c->ready = 0;
	c->done = 0;
	c->requested++;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	c->announced = 0;
}

/* Main thread: the buckets before `ready` may be reduced now. */
static void comm_thread_announce(struct comm_thread *c, int ready)
{
	if (ready <= c->announced)
		return;
	c->announced = ready;
	pthread_mutex_lock(&c->mu);
	c->ready = ready;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/* dt_grads_ready_fn during the backward pass: gradients from `offset` to
 * the end of the buffer are final (nn/model.h), and so is every bucket that
 * starts at or after it. */
static void grads_ready(void *arg, size_t offset, size_t count)
{
	(void)count;
	struct comm_thread *c = arg;
	int k = c->announced;
	while (k < c->nbuckets && c->buckets[k].offset >= offset)
		k++;
	comm_thread_announce(c, k);
}

static void comm_thread_stop(struct comm_thread *c)
{
	if (!c->started)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	c->started = 0;
}

/* ---- one run --------------------------------------------------------------- */

struct run {
	struct dt_dataset train, test;
	struct dt_model *model;
	struct dt_mirrored *mirror;
	struct dt_optimizer opt;
	struct dt_pipeline *pipe;
	struct dt_hello hello;
	struct dt_comm *comm;
	struct dt_allreduce_bucket *buckets;
	int nbuckets;
	struct comm_thread ct;
	int overlap;             /* buckets start during the backward pass */
	struct rank_table ranks;
	int rank, size;
	int64_t step0;           /* the step training continues after (0, or the restored one) */
	int64_t eval_every;      /* rank 0's --eval_every, which every rank follows */
	struct dt_saver saver;   /* rank 0 with an output dir */
	int saving;
	struct dt_summary *summary; /* rank 0's TensorBoard scalars (output dir and save_summary_steps) */
	char *hparams_json;      /* for the checkpoints' metadata */
};

static void run_release(struct run *r)
{
	comm_thread_stop(&r->ct);
	pthread_cond_destroy(&r->ct.cv);
	pthread_mutex_destroy(&r->ct.mu);
	dt_comm_free(r->comm);
	dt_hello_release(&r->hello);
	dt_saver_release(&r->saver);
	dt_summary_free(r->summary);
	free(r->hparams_json);
	free(r->buckets);
	free(r->ranks.peers);
	free(r->ranks.names);
	dt_pipeline_free(r->pipe);
	dt_mirrored_free(r->mirror);
	dt_optimizer_release(&r->opt);
	dt_model_free(r->model);
	dt_dataset_release(&r->test);
	dt_dataset_release(&r->train);
}

static enum dt_status setup(const struct dt_allreduce_run_config *cfg, struct run *r, struct dt_train_result *res,
			    struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	const struct dt_cluster *cl = cfg->cluster;
	const struct dt_hparams *hp = &tc->hp;
	enum dt_status st;
	r->rank = dt_allreduce_rank(cl, &r->size);
	if (r->rank < 0)
		return dt_err_set(err, DT_CONFIG, "this task (%s:%d) is not a trainer of the all-reduce cluster",
				  dt_job_name(cl->task.job), cl->task.index);
	r->ranks.peers = dt_xcalloc((size_t)r->size, sizeof(*r->ranks.peers));
	r->ranks.names = dt_xcalloc((size_t)r->size, sizeof(*r->ranks.names));
	struct { const struct dt_cluster *cl; struct rank_table *t; } arg = { cl, &r->ranks };
	walk_ranks(cl, note_rank, &arg);

	int64_t t0 = dt_now_ns();
	if ((st = dt_problem_load(tc->problem, tc->data_dir, DT_SPLIT_TRAIN, tc->seed, &r->train, err)))
		return st;
	if (((r->rank == 0 && tc->eval_at_end) || tc->eval_every > 0) &&
	    (st = dt_problem_load(tc->problem, tc->data_dir, DT_SPLIT_TEST, tc->seed, &r->test, err)))
		return st;
	res->load_seconds = (double)(dt_now_ns() - t0) / 1e9;
	const struct dt_dataset *d = &r->train;
	if ((st = dt_model_new(hp, d->height, d->width, d->channels, d->num_classes, hp->batch_size, &r->model, err)))
		return st;
	char desc[256];
	dt_model_describe(r->model, desc, sizeof(desc));
	dt_info("model: %s", desc);
	res->num_params = (int64_t)dt_model_num_params(r->model);
	if ((st = dt_optimizer_init(&r->opt, hp, dt_model_num_params(r->model), err)))
		return st;
	r->nbuckets = dt_allreduce_plan_buckets(r->model, cfg->bucket_mb, &r->buckets);
	/* The all-reduce starts during the backward pass unless there is only
	 * one bucket (nothing to start early), the worker's replicas sum their
	 * gradients only after all of theirs is done (distribute/mirrored.h), or the
	 * debug switch turns it off (tests compare both ways bit for bit). */
	const char *no_overlap = getenv("DTRAIN_ALLREDUCE_NO_OVERLAP");
	int disabled = no_overlap && *no_overlap && strcmp(no_overlap, "0") != 0;
	r->overlap = r->nbuckets > 1 && tc->replicas <= 1 && !disabled;
	char plan[512];
	dt_allreduce_describe_buckets(r->model, r->buckets, r->nbuckets, plan, sizeof(plan));
	dt_info("gradient all-reduce: %s; %s", plan,
		r->overlap ? "started during the backward pass"
		: r->nbuckets == 1 ? "after the backward pass (one bucket)"
		: tc->replicas > 1 ? "after the backward pass (the replicas' gradients are summed at its end)"
				   : "after the backward pass (DTRAIN_ALLREDUCE_NO_OVERLAP)");

	/* The hello carries the cluster and the model: a peer started with
	 * another model or cluster spec is refused by name. */
	dt_hello_init(&r->hello, dt_job_name(cl->task.job), (uint32_t)cl->task.index, dt_ps_cluster_fingerprint(cl));
	r->hello.auth = tc->auth; /* the ring's handshakes authenticate with it */
	int nvars = dt_model_num_variables(r->model);
	struct dt_variable *vars = dt_xcalloc((size_t)nvars, sizeof(*vars));
	for (int i = 0; i < nvars; i++)
		vars[i] = *dt_model_variable(r->model, i);
	st = dt_ps_signature_add_vars(&r->hello.signature, vars, nvars, err);
	free(vars);
	return st;
}

/* The replicas' threads (with dropout streams that differ after a resume)
 * and the input pipeline at the position every rank resumes from. */
static enum dt_status start_compute(const struct dt_train_config *tc, struct run *r, int64_t epoch, int64_t offset,
				    struct dt_err *err)
{
	const struct dt_hparams *hp = &tc->hp;
	const struct dt_dataset *d = &r->train;
	enum dt_status st;
	if (tc->replicas > 1) {
		struct dt_mirrored_config mc = {
			.hp = hp, .height = d->height, .width = d->width, .channels = d->channels,
			.num_classes = d->num_classes, .replicas = tc->replicas, .batch_size = hp->batch_size,
			.seed = tc->seed, .stream_base = (uint64_t)r->step0 * 65536u + (uint64_t)r->rank,
		};
		if ((st = dt_mirrored_new(r->model, &mc, &r->mirror, err)))
			return st;
		dt_info("mirrored: %d replicas on threads split each batch of %d, OpenBLAS 1 thread each",
			tc->replicas, hp->batch_size);
	}
	struct dt_pipeline_config pc = {
		.data = &r->train, .batch_size = hp->batch_size, .seed = tc->seed,
		.shard_index = r->rank, .shard_count = r->size, .prefetch = tc->prefetch,
		.start_epoch = epoch, .start_offset = offset,
	};
	if ((st = dt_pipeline_new(&pc, &r->pipe, err)))
		return st;
	dt_info("data: shard %d of %d, %lld examples per epoch; batch %d per worker%s, global batch %d", r->rank,
		r->size, (long long)dt_pipeline_shard_size(r->pipe), hp->batch_size,
		tc->replicas > 1 ? " split over its replicas" : "", hp->batch_size * r->size);
	return DT_OK;
}

/* Rank 0 with an output dir: the saver, and the latest checkpoint if there
 * is one (variables, optimizer slots, step, input position into *pos). */
static enum dt_status chief_restore(const struct dt_train_config *tc, struct run *r, int64_t *pos, struct dt_err *err)
{
	if (!tc->output_dir || !*tc->output_dir) {
		dt_model_init_params(r->model, tc->seed);
		return DT_OK;
	}
	enum dt_status st = dt_saver_init(&r->saver, tc->output_dir, tc->save_checkpoints_steps,
					  tc->save_checkpoints_secs, tc->keep_checkpoint_max, err);
	if (st)
		return st;
	r->saving = 1;
	r->hparams_json = dt_ckpt_hparams_json(&tc->hp);
	if (tc->save_summary_steps > 0) {
		/* examples/sec counts every worker's batch: the global batch. */
		struct dt_summary_config sc = { .dir = tc->output_dir, .every = tc->save_summary_steps,
						.last_step = tc->train_steps, .batch_size = tc->hp.batch_size * r->size,
						.hp = &tc->hp };
		if ((st = dt_summary_new(&sc, &r->summary, err)))
			return st;
	}
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, r->model);
	dt_ckpt_contents_set_optimizer(&c, &r->opt);
	int found;
	char path[DT_CKPT_PATH_MAX];
	if ((st = dt_ckpt_restore_latest(tc->output_dir, &c, &found, path, sizeof(path), err)))
		return st;
	if (!found) {
		dt_info("no checkpoint in '%s': training from scratch", tc->output_dir);
		dt_model_init_params(r->model, tc->seed);
		return DT_OK;
	}
	dt_info("restored step %lld from %s", (long long)c.global_step, path);
	dt_saver_mark(&r->saver, c.global_step);
	pos[0] = c.global_step;
	pos[1] = c.pipeline_epoch;
	pos[2] = c.pipeline_offset;
	return DT_OK;
}

/* Saves the chief's checkpoint of `step` (rank 0 only; no collective). */
static enum dt_status chief_save(struct run *r, int64_t step, struct dt_err *err)
{
	struct dt_ckpt_contents c;
	dt_ckpt_contents_for_model(&c, r->model);
	dt_ckpt_contents_set_optimizer(&c, &r->opt);
	c.global_step = step;
	dt_pipeline_position(r->pipe, &c.pipeline_epoch, &c.pipeline_offset);
	c.hparams = r->hparams_json;
	return dt_saver_save(&r->saver, &c, err);
}

/* Connects to every rank (waiting for the late ones up to connect_s) and
 * starts every replica from rank 0's state: the variables and optimizer
 * slots it initialized or restored, its step and input position. */
static enum dt_status connect_and_init(const struct dt_allreduce_run_config *cfg, struct run *r, struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	double connect_s = or_default(cfg->connect_s, 120), step_s = or_default(cfg->step_s, 60);
	dt_info("all-reduce over %d worker(s): this is rank %d (%s); waiting up to %.0f s for the others", r->size,
		r->rank, r->ranks.names[r->rank], connect_s);
	struct dt_comm_config cc = { .nranks = r->size, .rank = r->rank, .peers = r->ranks.peers, .hello = &r->hello };
	enum dt_status st = dt_comm_new(&cc, dt_deadline_in(connect_s), &r->comm, err);
	if (st)
		return st;
	dt_info("connected to all %d worker(s)", r->size);
	float *params = dt_model_params(r->model);
	const size_t np = dt_model_num_params(r->model);
	/* step, pipeline epoch, pipeline offset, --eval_every */
	int64_t pos[4] = { 0, 0, 0, r->rank == 0 ? tc->eval_every : 0 };
	/* Rank 0's restore failing must not leave the others waiting: it says so
	 * by closing (its error ends the run), they fail naming it. */
	if (r->rank == 0 && (st = chief_restore(tc, r, pos, err)))
		return st;
	if ((st = dt_broadcast(r->comm, pos, sizeof(pos), 0, "init/position", dt_deadline_in(step_s), err)) ||
	    (st = dt_broadcast(r->comm, params, np * sizeof(float), 0, "init/variables", dt_deadline_in(step_s), err)) ||
	    (r->opt.num_slots > 0 &&
	     (st = dt_broadcast(r->comm, r->opt.slots, (size_t)r->opt.num_slots * np * sizeof(float), 0, "init/slots",
				dt_deadline_in(step_s), err))))
		return dt_err_prefix(err, "cannot receive the initial variables from %s", r->ranks.names[0]);
	r->step0 = pos[0];
	r->eval_every = pos[3];
	if (r->rank > 0 && r->eval_every != tc->eval_every)
		dt_warn("evaluating every %lld steps as %s does (this task has --eval_every=%lld)",
			(long long)r->eval_every, r->ranks.names[0], (long long)tc->eval_every);
	if (r->eval_every > 0 && r->test.count == 0 &&
	    (st = dt_problem_load(tc->problem, tc->data_dir, DT_SPLIT_TEST, tc->seed, &r->test, err)))
		return st;
	if (r->rank == 0)
		dt_info("%s the variables and broadcast them to %d worker(s)", pos[0] ? "restored" : "initialized",
			r->size - 1);
	else if (pos[0])
		dt_info("resuming at step %lld from %s's checkpoint", (long long)pos[0], r->ranks.names[0]);
	return start_compute(tc, r, pos[1], pos[2], err);
}

/* FNV-1a over the variables' bytes. */
static uint64_t params_hash(const float *p, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	const unsigned char *b = (const unsigned char *)p;
	for (size_t i = 0; i < n * sizeof(float); i++) {
		h ^= b[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* Every rank puts its hash, as four 16-bit floats (exact under summation
 * with zeros), in its slot; after the all-reduce every rank sees them all
 * and the mismatching ones are named. */
static enum dt_status check_replicas(const struct dt_allreduce_run_config *cfg, struct run *r, int64_t step,
				     struct dt_err *err)
{
	uint64_t h = params_hash(dt_model_params(r->model), dt_model_num_params(r->model));
	float *v = dt_xcalloc((size_t)r->size * 4, sizeof(float));
	for (int k = 0; k < 4; k++)
		v[r->rank * 4 + k] = (float)((h >> (16 * k)) & 0xffff);
	enum dt_status st = dt_allreduce_sum_f32(r->comm, v, (size_t)r->size * 4, "check/variables_hash",
						 dt_deadline_in(or_default(cfg->step_s, 60)), err);
	if (!st) {
		char bad[512] = "";
		int nbad = 0;
		for (int q = 1; q < r->size; q++) {
			if (memcmp(&v[q * 4], &v[0], 4 * sizeof(float)) == 0)
				continue;
			size_t len = strlen(bad);
			if (len + 64 < sizeof(bad))
				snprintf(bad + len, sizeof(bad) - len, "%s%s", nbad ? ", " : "", r->ranks.names[q]);
			nbad++;
		}
		if (nbad)
			st = dt_err_set(err, DT_RUNTIME, "replicas diverged at step %lld: the variables of %s differ "
							 "from those of %s (rank 0)", (long long)step, bad, r->ranks.names[0]);
		else
			dt_debug("step %lld: the variables of all %d replicas are bit-identical (hash %016llx)",
				 (long long)step, r->size, (unsigned long long)h);
	}
	free(v);
	return st;
}

/* Applies the optimizer to bucket b of the summed gradient: the mean over the
 * ranks, plus weight decay on its kernel elements (added to the sum as
 * size * wd * p, so the mean carries wd * p). */
static void apply_bucket(struct run *r, const struct dt_allreduce_bucket *b, float wd, float lr, int64_t step)
{
	float *p = dt_model_params(r->model), *g = dt_model_grads(r->model);
	const size_t lo = b->offset, hi = b->offset + b->count;
	if (wd > 0) {
		const float wd_sum = wd * (float)r->size;
		for (int v = 0; v < dt_model_num_variables(r->model); v++) {
			if (!dt_model_variable_is_kernel(r->model, v))
				continue;
			const struct dt_variable *var = dt_model_variable(r->model, v);
			size_t a = var->offset > lo ? var->offset : lo;
			size_t z = var->offset + var->count < hi ? var->offset + var->count : hi;
			for (size_t i = a; i < z; i++)
				g[i] += wd_sum * p[i];
		}
	}
	dt_optimizer_apply_mean(&r->opt, p, g + lo, r->size, lo, b->count, lr, step);
}

/* The gradient all-reduce and update of one step: buckets on the
 * communication thread (or inline when there is one), the optimizer on
 * each as it arrives. */
static enum dt_status reduce_and_apply(const struct dt_allreduce_run_config *cfg, struct run *r, float lr,
				       int64_t step, struct dt_err *err)
{
	const float wd = (float)cfg->train->hp.weight_decay;
	const double step_s = or_default(cfg->step_s, 60);
	if (r->nbuckets == 1) {
		enum dt_status st = reduce_bucket(r->comm, dt_model_grads(r->model), &r->buckets[0], 0, step_s, err);
		if (st)
			return st;
		apply_bucket(r, &r->buckets[0], wd, lr, step);
		return DT_OK;
	}
	struct comm_thread *c = &r->ct;
	comm_thread_announce(c, r->nbuckets); /* the backward pass is over: every bucket is final */
	for (int k = 0; k < r->nbuckets; k++) {
		pthread_mutex_lock(&c->mu);
		while (c->done <= k && c->st == DT_OK)
			pthread_cond_wait(&c->cv, &c->mu);
		enum dt_status st = c->st;
		if (st && err)
			*err = c->err;
		pthread_mutex_unlock(&c->mu);
		if (st)
			return st;
		apply_bucket(r, &r->buckets[k], wd, lr, step);
	}
	return DT_OK;
}

struct window {
	double loss_sum;
	int64_t correct, examples, steps, start_ns;
};

/*
 * --eval_every: every rank evaluates its shard of the test split (example i
 * on rank i % ranks) at the same step, between two steps, and one small
 * all-reduce sums (loss, correct, examples); rank 0 logs the line local
 * training and the asynchronous chief print (as Keras's fit with
 * validation_data under MultiWorkerMirroredStrategy: the evaluation is
 * distributed like the training). Nobody waits for rank 0 to evaluate
 * alone: each rank does 1/ranks of the work, and the all-reduce's step_s
 * deadline only has to cover the ranks' skew, as for a training step. Every
 * rank follows rank 0's --eval_every (broadcast at the start), so they agree
 * on the steps.
 */
static enum dt_status eval_sharded(const struct dt_allreduce_run_config *cfg, struct run *r, int64_t step,
				   struct dt_err *err)
{
	struct dt_pipeline_config pc = {
		.data = &r->test, .batch_size = dt_model_max_batch(r->model), .shard_index = r->rank,
		.shard_count = r->size, .single_pass = 1,
	};
	struct dt_pipeline *p;
	enum dt_status st = dt_pipeline_new(&pc, &p, err);
	if (st)
		return dt_err_prefix(err, "cannot evaluate at step %lld", (long long)step);
	double loss_sum = 0;
	int64_t correct = 0, n = 0;
	const struct dt_batch *b;
	while ((b = dt_pipeline_next(p))) {
		int c = 0;
		loss_sum += (double)dt_model_eval_batch(r->model, b->x, b->y, b->size, &c) * b->size;
		correct += c;
		n += b->size;
	}
	dt_pipeline_free(p);
	float v[3] = { (float)loss_sum, (float)correct, (float)n }; /* counts <= 2^24 stay exact */
	if ((st = dt_allreduce_sum_f32(r->comm, v, 3, "eval/sums", dt_deadline_in(or_default(cfg->step_s, 60)), err)))
		return dt_err_prefix(err, "cannot evaluate at step %lld", (long long)step);
	if (r->rank == 0)
		dt_info("eval at step %lld: accuracy %.4f loss %.4f", (long long)step,
			v[2] > 0 ? (double)v[1] / (double)v[2] : 0, v[2] > 0 ? (double)v[0] / (double)v[2] : 0);
	return DT_OK;
}

/* The window's loss and accuracy over every rank (one small all-reduce on
 * log steps, which every rank reaches together), then the progress line. */
static enum dt_status log_window(const struct dt_allreduce_run_config *cfg, struct run *r, int64_t step, float lr,
				 struct window *w, int64_t train_start, struct dt_train_result *res,
				 struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	float v[3] = { (float)w->loss_sum, (float)w->correct, (float)w->examples };
	enum dt_status st = dt_allreduce_sum_f32(r->comm, v, 3, "log/window", dt_deadline_in(or_default(cfg->step_s, 60)),
						 err);
	if (st)
		return st;
	int64_t now = dt_now_ns();
	double secs = (double)(now - w->start_ns) / 1e9, elapsed = (double)(now - train_start) / 1e9;
	char eta[32];
	dt_train_format_eta(elapsed / (double)(step - r->step0) * (double)(tc->train_steps - step), eta, sizeof(eta));
	double loss = (double)v[0] / ((double)w->steps * r->size);
	res->final_loss = loss;
	dt_info("step %lld/%lld loss %.4f acc %.3f lr %.3g %.0f examples/s (all workers) eta %s", (long long)step,
		(long long)tc->train_steps, loss, (double)v[1] / (double)v[2], (double)lr,
		secs > 0 ? (double)v[2] / secs : 0, eta);
	return DT_OK;
}

static enum dt_status train_loop(const struct dt_allreduce_run_config *cfg, struct run *r, struct dt_train_result *res,
				 struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	struct dt_rng dropout_rng;
	dt_rng_derive(&dropout_rng, tc->seed, "dropout", (uint64_t)r->step0 * 65536u + (uint64_t)r->rank);
	const int batch = tc->hp.batch_size;
	if (r->nbuckets > 1) {
		r->ct.comm = r->comm;
		r->ct.grads = dt_model_grads(r->model);
		r->ct.buckets = r->buckets;
		r->ct.nbuckets = r->nbuckets;
		r->ct.step_s = or_default(cfg->step_s, 60);
		int rc = pthread_create(&r->ct.thread, NULL, comm_main, &r->ct);
		if (rc)
			return dt_err_set(err, DT_RUNTIME, "cannot start the communication thread: %s", strerror(rc));
		r->ct.started = 1;
	}
	struct window w = { .start_ns = dt_now_ns() };
	int64_t train_start = w.start_ns, after_first = 0, compute_ns = 0, reduce_ns = 0, eval_ns = 0;
	enum dt_status st = DT_OK;
	const int64_t steps = tc->train_steps - r->step0;
	/* Fault injection for the test of --check_replicas_every: this task
	 * flips the lowest bit of its first variable after step N. */
	const char *diverge_env = getenv("DTRAIN_TEST_DIVERGE_AT_STEP");
	const int64_t diverge_at = diverge_env ? atoll(diverge_env) : 0;
	for (int64_t step = r->step0 + 1; step <= tc->train_steps; step++) {
		const struct dt_batch *b = dt_pipeline_next(r->pipe);
		float lr = dt_lr_at(&tc->hp, step - 1, tc->train_steps);
		int correct = 0;
		int64_t t0 = dt_now_ns();
		if (r->nbuckets > 1)
			comm_thread_begin_step(&r->ct);
		float loss = r->overlap ? dt_model_train_batch_notify(r->model, b->x, b->y, b->size, &dropout_rng,
								      &correct, grads_ready, &r->ct)
					: dt_mirrored_step(r->mirror, r->model, b->x, b->y, b->size, &dropout_rng, &correct);
		if (!isfinite(loss))
			return dt_err_set(err, DT_RUNTIME, "training diverged at step %lld on %s: loss is %f",
					  (long long)step, r->ranks.names[r->rank], (double)loss);
		int64_t t1 = dt_now_ns();
		if ((st = reduce_and_apply(cfg, r, lr, step, err)))
			return dt_err_prefix(err, "training stopped at step %lld", (long long)step);
		compute_ns += t1 - t0;
		reduce_ns += dt_now_ns() - t1;
		if (step == diverge_at) {
			uint32_t bits;
			memcpy(&bits, dt_model_params(r->model), sizeof(bits));
			bits ^= 1u;
			memcpy(dt_model_params(r->model), &bits, sizeof(bits));
		}
		if (step == r->step0 + 1)
			after_first = dt_now_ns();
		w.loss_sum += (double)loss;
		w.correct += correct;
		w.examples += b->size;
		w.steps++;
		dt_summary_step(r->summary, step, loss, correct, lr); /* rank 0's own batch, as TF's chief */
		dt_progress_step(step, tc->train_steps); /* the launcher's STEP and STEPS/S */
		if ((tc->log_every > 0 && step % tc->log_every == 0) || step == tc->train_steps) {
			if ((st = log_window(cfg, r, step, lr, &w, train_start, res, err)))
				return dt_err_prefix(err, "training stopped at step %lld", (long long)step);
			w = (struct window){ .start_ns = dt_now_ns() };
		}
		if (cfg->check_every > 0 && (step % cfg->check_every == 0 || step == tc->train_steps) &&
		    (st = check_replicas(cfg, r, step, err)))
			return st;
		if (r->saving && (dt_saver_due(&r->saver, step) || step == tc->train_steps)) {
			int64_t s0 = dt_now_ns();
			if ((st = chief_save(r, step, err)))
				return st;
			w.start_ns += dt_now_ns() - s0;
		}
		if (r->eval_every > 0 && step % r->eval_every == 0 && step != tc->train_steps) {
			int64_t e0 = dt_now_ns();
			if ((st = eval_sharded(cfg, r, step, err)))
				return st;
			eval_ns += dt_now_ns() - e0;
			w.start_ns += dt_now_ns() - e0;
		}
	}
	int64_t end = dt_now_ns() - eval_ns; /* the figures below leave the evaluations out */
	res->steps = tc->train_steps;
	if (steps <= 0)
		return DT_OK;
	/* With overlap the all-reduce of the first buckets runs inside the
	 * forward/backward time; the second figure is what is left after it. */
	dt_info("per step: %.2f ms forward/backward, %.2f ms gradient all-reduce (%d bucket%s) and update%s, "
		"%.2f ms the rest", (double)compute_ns / 1e6 / (double)steps, (double)reduce_ns / 1e6 / (double)steps,
		r->nbuckets, r->nbuckets == 1 ? "" : "s", r->overlap ? " after the backward pass (overlapped)" : "",
		((double)(end - train_start) - (double)(compute_ns + reduce_ns)) / 1e6 / (double)steps);
	res->train_seconds = (double)(end - train_start) / 1e9;
	double steady = (double)(end - after_first) / 1e9;
	double global_batch = (double)batch * r->size;
	if (steps > 1 && steady > 0)
		res->examples_per_sec = (double)(steps - 1) * global_batch / steady;
	else if (res->train_seconds > 0)
		res->examples_per_sec = global_batch / res->train_seconds;
	return DT_OK;
}

enum dt_status dt_train_allreduce(const struct dt_allreduce_run_config *cfg, struct dt_train_result *res,
				  struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	memset(res, 0, sizeof(*res));
	enum dt_status st = dt_blas_load(tc->threads, err);
	if (st)
		return st;
	struct run r;
	memset(&r, 0, sizeof(r));
	pthread_mutex_init(&r.ct.mu, NULL);
	pthread_cond_init(&r.ct.cv, NULL);
	if (!(st = setup(cfg, &r, res, err)) && !(st = connect_and_init(cfg, &r, err)))
		st = train_loop(cfg, &r, res, err);
	/* Nobody leaves (closing its connections) while a peer still reduces,
	 * and nobody waits on rank 0 while it evaluates. */
	if (!st)
		st = dt_barrier(r.comm, "end", dt_deadline_in(or_default(cfg->step_s, 60)), err);
	if (!st) {
		comm_thread_stop(&r.ct);
		dt_comm_free(r.comm);
		r.comm = NULL;
		if (r.rank == 0 && tc->eval_at_end)
			st = dt_train_evaluate(r.model, &r.test, &res->eval, err);
	}
	run_release(&r);
	return st;
}
