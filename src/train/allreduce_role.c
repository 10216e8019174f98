#include "train/allreduce_role.h"
#include "train/allreduce_buckets.h"
#include "train/allreduce_comm.h"
#include "train/allreduce_elastic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/rng.h"
#include "data/pipeline.h"
#include "distribute/collective.h"
#include "distribute/ps_wire.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "nn/regularize.h"
#include "train/common.h"
#include "train/session.h"

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

/* ---- the multi-worker mirrored strategy (train/strategy.h) --------------- */

struct ring {
	const struct dt_allreduce_run_config *cfg;
	struct dt_strategy_info *info; /* the session's, kept for the --eval_every agreed at start */
	double step_s;
	struct dt_hello hello;
	struct dt_comm *comm;
	struct dt_allreduce_bucket *buckets;
	int nbuckets;
	struct dt__allreduce_comm ct;
	int overlap;             /* buckets start during the backward pass */
	struct rank_table ranks;
	int rank, size;
	int64_t diverge_at;      /* fault injection (DTRAIN_TEST_DIVERGE_AT_STEP); 0: none */
	size_t nsync;            /* floats of the sync-mean variables (batch norm's moving statistics) */
	float *sync;             /* (nsync): their sum over the ranks */
	struct dt_elastic el;    /* the members (all of the table unless elastic) and the rollback point */
	int joined;              /* this task was restarted and joined a running ring (dt_elastic_join) */
	/* Elastic: "a restarted worker waits to join" (join_mine: 1 only on the
	 * coordinator, ring rank 0) summed over the ring inside the step's first collective, so every
	 * member re-forms after the same step: the spare float past the gradients
	 * (nn/model.h) in bucket 0; under --deterministic (join_pending: the next
	 * collective carries it) one more int64 after the fixed-point exponents
	 * (reduce_i64), or the last float of each task's block of the ordered
	 * sum's all-gather (allgather); with no collective (the ordered sum on a
	 * ring of one) this task's flag is the sum. */
	int join_mine, join_pending, join_seen;
};

/* "worker:1" of rank q of the current ring. */
static const char *rank_name(const struct ring *r, int q)
{
	return r->ranks.names[r->el.min_workers ? (int)r->el.members[q] : q];
}

/* Batch norm's moving statistics (nn/model.h's dt_model_variable_sync_mean:
 * TensorFlow's SyncOnRead, MEAN): each rank updated its own copy from its
 * own batch; every rank's copy becomes the mean over the ranks, summed in
 * one all-reduce that gives every rank the same bits, so checkpoints,
 * evaluations and exports see the mean and the replica check stays exact. */
static enum dt_status sync_mean(struct ring *r, struct dt_model *m, int64_t step, struct dt_err *err)
{
	if (r->nsync == 0 || r->size < 2)
		return DT_OK;
	dt_model_sync_mean_gather(m, r->sync);
	enum dt_status st = dt_allreduce_sum_f32(r->comm, r->sync, r->nsync, "sync/moving_statistics",
						 dt_deadline_in(r->step_s), err);
	if (st)
		return dt_err_prefix(err, "cannot average the moving statistics at step %lld", (long long)step);
	dt_model_sync_mean_scatter(m, r->sync, 1.0f / (float)r->size);
	return DT_OK;
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
static enum dt_status check_replicas(struct ring *r, const float *params, size_t np, int64_t step, struct dt_err *err)
{
	uint64_t h = params_hash(params, np);
	float *v = dt_xcalloc((size_t)r->size * 4, sizeof(float));
	for (int k = 0; k < 4; k++)
		v[r->rank * 4 + k] = (float)((h >> (16 * k)) & 0xffff);
	enum dt_status st = dt_allreduce_sum_f32(r->comm, v, (size_t)r->size * 4, "check/variables_hash",
						 dt_deadline_in(r->step_s), err);
	if (!st) {
		char bad[512] = "";
		int nbad = 0;
		for (int q = 1; q < r->size; q++) {
			if (memcmp(&v[q * 4], &v[0], 4 * sizeof(float)) == 0)
				continue;
			size_t len = strlen(bad);
			if (len + 64 < sizeof(bad))
				snprintf(bad + len, sizeof(bad) - len, "%s%s", nbad ? ", " : "", rank_name(r, q));
			nbad++;
		}
		if (nbad)
			st = dt_err_set(err, DT_RUNTIME, "replicas diverged at step %lld: the variables of %s differ "
							 "from those of %s (rank 0)", (long long)step, bad, rank_name(r, 0));
		else
			dt_debug("step %lld: the variables of all %d replicas are bit-identical (hash %016llx)",
				 (long long)step, r->size, (unsigned long long)h);
	}
	free(v);
	return st;
}


static void ring_release(struct ring *r)
{
	dt__allreduce_comm_destroy(&r->ct);
	dt_comm_free(r->comm);
	dt_elastic_release(&r->el);
	dt_hello_release(&r->hello);
	free(r->buckets);
	free(r->sync);
	free(r->ranks.peers);
	free(r->ranks.names);
}

/* The buckets, the hello (the cluster and the model: a peer started with
 * another model or cluster spec is refused by name), and every rank connected. */
static enum dt_status ring_connect(struct dt_session *s, void *self, struct dt_strategy_info *info,
				   struct dt_err *err)
{
	struct ring *r = self;
	const struct dt_train_config *tc = r->cfg->train;
	const struct dt_cluster *cl = r->cfg->cluster;
	struct dt_model *model = dt__session_model(s);
	r->info = info;
	info->chief = r->rank == 0;
	info->shard_index = r->rank;
	info->shard_count = r->size;
	info->global_batch = tc->hp.batch_size * r->size;
	info->task_name = r->ranks.names[r->rank];
	info->examples_note = " (all workers)";
	info->log_last_step = 1;
	info->dropout_per_resume = 1; /* the stream is not saved: a resume derives another */
	info->save_rng = 0;
	info->slices = 1; /* lock-step: one global stream, so a checkpoint resumes at any worker count */
	info->fixed_slices = r->size; /* --deterministic: the full ring's slices, whoever computes them */
	r->nbuckets = dt_allreduce_plan_buckets(model, r->cfg->bucket_mb, &r->buckets);
	r->nsync = dt_model_sync_mean_floats(model);
	r->sync = r->nsync ? dt_xcalloc(r->nsync, sizeof(float)) : NULL;
	/* The all-reduce starts during the backward pass unless there is only
	 * one bucket (nothing to start early), the worker's replicas sum their
	 * gradients only after all of theirs is done (distribute/mirrored.h), or the
	 * debug switch turns it off (tests compare both ways bit for bit). */
	const char *no_overlap = getenv("DTRAIN_ALLREDUCE_NO_OVERLAP");
	int disabled = no_overlap && *no_overlap && strcmp(no_overlap, "0") != 0;
	r->overlap = r->nbuckets > 1 && tc->replicas <= 1 && !disabled && !tc->micro_batch;
	char plan[512];
	dt_allreduce_describe_buckets(model, r->buckets, r->nbuckets, plan, sizeof(plan));
	dt_info("gradient all-reduce: %s; %s", plan,
		r->overlap ? "started during the backward pass"
		: tc->micro_batch ? "after the backward pass (--deterministic: its method in the line below)"
		: r->nbuckets == 1 ? "after the backward pass (one bucket)"
		: tc->replicas > 1 ? "after the backward pass (the replicas' gradients are summed at its end)"
				   : "after the backward pass (DTRAIN_ALLREDUCE_NO_OVERLAP)");
	dt_hello_init(&r->hello, dt_job_name(cl->task.job), (uint32_t)cl->task.index, dt_ps_cluster_fingerprint(cl));
	r->hello.auth = tc->auth; /* the ring's handshakes authenticate with it */
	int nvars = dt_model_num_variables(model);
	struct dt_variable *vars = dt_xcalloc((size_t)nvars, sizeof(*vars));
	for (int i = 0; i < nvars; i++)
		vars[i] = *dt_model_variable(model, i);
	enum dt_status st = dt_ps_signature_add_vars(&r->hello.signature, vars, nvars, err);
	free(vars);
	if (st)
		return st;
	double connect_s = or_default(r->cfg->connect_s, 120);
	dt_info("all-reduce over %d worker(s): this is rank %d (%s); waiting up to %.0f s for the others", r->size,
		r->rank, r->ranks.names[r->rank], connect_s);
	struct dt_comm_config cc = { .nranks = r->size, .rank = r->rank, .peers = r->ranks.peers, .hello = &r->hello };
	if (r->el.min_workers) {
		/* A worker started again (the chief too) joins the running ring, if
		 * there is one; listening first, for a peer in its first rendezvous
		 * connects here before it answers the report (by closing it). */
		char host[DT_HOST_MAX];
		int port, lfd = -1;
		if ((st = dt_sock_split_hostport(r->ranks.peers[r->rank].addr, host, sizeof(host), &port, err)) ||
		    (st = dt_sock_listen(host, port, 64, &lfd, NULL, err)))
			return dt_err_prefix(err, "ring rank %d (%s)", r->rank, r->ranks.names[r->rank]);
		st = dt_elastic_join(&r->el, s, info, &r->hello, &lfd, dt_deadline_in(connect_s), &r->comm, &r->rank,
				     &r->joined, err);
		if (st || r->joined) {
			dt_sock_close(lfd);
			r->size = r->el.n;
			return st;
		}
		cc.listen_fd = lfd;
		cc.listen_fd_set = 1;
	}
	if ((st = dt_comm_new(&cc, dt_deadline_in(connect_s), &r->comm, err)))
		return st;
	dt_info("connected to all %d worker(s)", r->size);
	dt_elastic_listen(&r->el); /* every member: reports of restarted workers, and alive to reporters */
	return DT_OK;
}

/* The communication thread on r->comm, from a clean state (at start, and
 * again on the re-formed ring's comm). */
static enum dt_status comm_thread_start(struct ring *r, struct dt_model *model, struct dt_err *err)
{
	if (r->nbuckets <= 1 || r->cfg->train->micro_batch) /* --deterministic: one int64 all-reduce, after the step */
		return DT_OK;
	return dt__allreduce_comm_start(&r->ct, r->comm, dt_model_grads(model), r->buckets, r->nbuckets,
					r->el.min_workers ? 1 : 0, r->step_s, err);
}

/* Elastic: the ring failed during `what` at step `step` (the session's step
 * in flight, or the one just done): the survivors re-form it and this task
 * continues from the agreed step (train/allreduce_elastic.h). */
static enum dt_status recover(struct dt_session *s, struct ring *r, const struct dt_err *cause, struct dt_err *err)
{
	if (cause->status)
		dt_warn("%s; the survivors re-form the ring (--min_workers=%d)", cause->msg, r->el.min_workers);
	else
		dt_info("a worker asks to join: the ring is re-formed after step %lld", (long long)r->el.done_step);
	dt__allreduce_comm_stop(&r->ct);
	enum dt_status st = dt_elastic_reform(&r->el, s, r->info, &r->hello, &r->comm, &r->rank, err);
	if (st)
		return st;
	r->size = r->el.n;
	return comm_thread_start(r, dt__session_model(s), err);
}

/* Every replica starts from rank 0's state: the variables and optimizer
 * slots it initialized or restored, its step, input position and
 * --eval_every. Then the communication thread starts. */
static enum dt_status ring_start(struct dt_session *s, void *self, struct dt_strategy_start *out, struct dt_err *err)
{
	struct ring *r = self;
	const struct dt_train_config *tc = r->cfg->train;
	struct dt_model *model = dt__session_model(s);
	struct dt_optimizer *opt = dt__session_optimizer(s);
	float *params = dt_model_params(model);
	const size_t np = dt_model_num_params(model);
	enum dt_status st;
	if (r->joined) {
		/* The variables, slots and position came with the re-formation
		 * (ring_connect); --eval_every is this task's own, as the flags are
		 * the same it was first started with. */
		*out = (struct dt_strategy_start){ .step = r->el.done_step, .epoch = r->el.done_epoch,
						   .offset = r->el.done_offset, .global = 1 };
		struct dt_dataset *test = dt__session_test(s);
		if (tc->eval_every > 0 && test->count == 0 && !tc->source &&
		    (st = dt_problem_load(tc->problem, tc->data_dir, tc->data, DT_SPLIT_TEST, tc->seed, test, err)))
			return st;
		return comm_thread_start(r, model, err);
	}
	/* Rank 0's restore failing must not leave the others waiting: it says so
	 * by closing (its error ends the run), they fail naming it. */
	if (r->rank == 0 && (st = dt__session_restore_or_init(s, out, err)))
		return st;
	/* step, pipeline epoch, pipeline offset, --eval_every, whether the position is global */
	int64_t pos[5] = { out->step, out->epoch, out->offset, r->rank == 0 ? tc->eval_every : 0, out->global };
	if ((st = dt_broadcast(r->comm, pos, sizeof(pos), 0, "init/position", dt_deadline_in(r->step_s), err)) ||
	    (st = dt_broadcast(r->comm, params, np * sizeof(float), 0, "init/variables", dt_deadline_in(r->step_s), err)) ||
	    (opt->num_slots > 0 &&
	     (st = dt_broadcast(r->comm, opt->slots, (size_t)opt->num_slots * np * sizeof(float), 0, "init/slots",
				dt_deadline_in(r->step_s), err))))
		return dt_err_prefix(err, "cannot receive the initial variables from %s", rank_name(r, 0));
	*out = (struct dt_strategy_start){ .step = pos[0], .epoch = pos[1], .offset = pos[2], .global = (int)pos[4] };
	r->info->eval_every = pos[3];
	if (r->rank > 0 && pos[3] != tc->eval_every)
		dt_warn("evaluating every %lld steps as %s does (this task has --eval_every=%lld)", (long long)pos[3],
			rank_name(r, 0), (long long)tc->eval_every);
	struct dt_dataset *test = dt__session_test(s);
	if (pos[3] > 0 && test->count == 0 && !tc->source && /* a source evaluates its own data */
	    (st = dt_problem_load(tc->problem, tc->data_dir, tc->data, DT_SPLIT_TEST, tc->seed, test, err)))
		return st;
	if (r->rank == 0)
		dt_info("%s the variables and broadcast them to %d worker(s)", pos[0] ? "restored" : "initialized",
			r->size - 1);
	else if (pos[0])
		dt_info("resuming at step %lld from %s's checkpoint", (long long)pos[0], rank_name(r, 0));
	r->el.done_step = pos[0];
	r->el.done_epoch = pos[1];
	r->el.done_offset = pos[2];
	return comm_thread_start(r, model, err);
}

/* Forward/backward; with overlap, each bucket's all-reduce starts as soon as
 * the backward pass has written it. */
static enum dt_status ring_compute(struct dt_session *s, void *self, struct dt_step_figures *out, struct dt_err *err)
{
	struct ring *r = self;
	if (r->el.min_workers) {
		/* Before any bucket can start: the join flag rides with bucket 0. */
		r->join_mine = r->rank == 0 && dt_elastic_join_waiting(&r->el);
		struct dt_model *m = dt__session_model(s);
		dt_model_grads(m)[dt_model_num_params(m)] = (float)r->join_mine;
	}
	if (!r->overlap) {
		if (r->ct.started)
			dt__allreduce_comm_begin_step(&r->ct);
		return dt__session_compute(s, out, err);
	}
	const struct dt_batch *b;
	enum dt_status st = dt__session_next_batch(s, &b, err);
	if (st)
		return st;
	dt__allreduce_comm_begin_step(&r->ct);
	return dt__session_compute_batch(s, b, dt__allreduce_comm_grads_ready, &r->ct, out, err);
}

/* Adds weight decay to bucket b of the summed gradient (size * wd * p, so
 * that its mean over the ranks carries wd * p). */
static void decay_bucket(struct dt_session *s, struct ring *r, const struct dt_allreduce_bucket *b)
{
	const float wd = (float)r->cfg->train->hp.weight_decay;
	if (wd > 0)
		dt_train_add_weight_decay_range(dt__session_model(s), wd * (float)r->size, b->offset,
						b->offset + b->count);
}

/* Applies the optimizer to bucket b of the summed gradient: the mean over the
 * ranks; `decayed`: weight decay is already in it. */
static void apply_bucket(struct dt_session *s, struct ring *r, const struct dt_allreduce_bucket *b, float lr,
			 int64_t step, int decayed)
{
	struct dt_model *m = dt__session_model(s);
	if (!decayed)
		decay_bucket(s, r, b);
	dt_optimizer_apply_mean(dt__session_optimizer(s), dt_model_params(m), dt_model_grads(m) + b->offset, r->size,
				b->offset, b->count, lr, step);
}

/* Elastic: before the update changes [offset, offset + count), which a
 * failure of a collective still to come in this step would have to undo
 * (another bucket's all-reduce unless `last`, or the moving statistics'),
 * the rollback point keeps that range (allreduce_elastic.h). */
static void keep_for_rollback(struct dt_session *s, struct ring *r, size_t offset, size_t count, int last)
{
	if (r->el.min_workers && (!last || (r->nsync > 0 && r->size >= 2)))
		dt_elastic_save(&r->el, s, offset, count);
}

/* The gradient all-reduce and update of one step: buckets on the
 * communication thread (or inline when there is one), the optimizer on
 * each as it arrives. With clip_grad_norm the global norm needs every
 * bucket: all of them are reduced first, then the sum is clipped (the same
 * bits on every rank, as the all-reduce leaves them) and applied. */
static enum dt_status reduce_and_apply(struct dt_session *s, struct ring *r, float lr, int64_t step,
				       double *norm, struct dt_err *err)
{
	if (r->nbuckets == 1) {
		float *grads = dt_model_grads(dt__session_model(s));
		enum dt_status st = dt__allreduce_reduce_bucket(r->comm, grads, &r->buckets[0], 0,
								r->el.min_workers ? 1 : 0, r->step_s, err);
		if (st)
			return st;
		decay_bucket(s, r, &r->buckets[0]);
		*norm = dt_train_clip_grads(dt__session_model(s), &r->cfg->train->hp, r->size);
		keep_for_rollback(s, r, r->buckets[0].offset, r->buckets[0].count, 1);
		apply_bucket(s, r, &r->buckets[0], lr, step, 1);
		return DT_OK;
	}
	const int clip = r->cfg->train->hp.clip_grad_norm > 0;
	dt__allreduce_comm_announce(&r->ct, r->nbuckets); /* the backward pass is over: every bucket is final */
	for (int k = 0; k < r->nbuckets; k++) {
		enum dt_status st = dt__allreduce_comm_wait(&r->ct, k, err);
		if (st)
			return st;
		if (clip) {
			decay_bucket(s, r, &r->buckets[k]);
			continue;
		}
		keep_for_rollback(s, r, r->buckets[k].offset, r->buckets[k].count, k == r->nbuckets - 1);
		apply_bucket(s, r, &r->buckets[k], lr, step, 0);
	}
	if (clip) { /* every bucket's all-reduce is done: only the moving statistics' may follow */
		*norm = dt_train_clip_grads(dt__session_model(s), &r->cfg->train->hp, r->size);
		for (int k = 0; k < r->nbuckets; k++) {
			keep_for_rollback(s, r, r->buckets[k].offset, r->buckets[k].count, 1);
			apply_bucket(s, r, &r->buckets[k], lr, step, 1);
		}
	}
	return DT_OK;
}

static enum dt_status ring_apply(struct dt_session *s, void *self, const struct dt_step_figures *fig, float lr,
				 struct dt_strategy_step *io, struct dt_err *err)
{
	(void)fig;
	struct ring *r = self;
	const int64_t step = io->step;
	const int fixed = r->cfg->train->micro_batch > 0;
	if (r->el.min_workers) {
		dt_elastic_snapshot(&r->el, s);
		r->join_pending = fixed; /* the first collective of dt__session_apply_fixed's, if any */
		r->join_seen = 0;
		if (fixed) /* its update comes after its all-reduces */
			keep_for_rollback(s, r, 0, dt_model_num_params(dt__session_model(s)), 1);
	}
	enum dt_status st = fixed ? dt__session_apply_fixed(s, lr, step, err)
				  : reduce_and_apply(s, r, lr, step, &io->grad_norm, err);
	if (!st) /* the same bits on every worker, as the update left them */
		dt_model_apply_constraints(dt__session_model(s));
	if (st) {
		r->join_pending = 0; /* it may have failed before its first collective */
	} else if (r->join_pending) {
		/* the ordered sum with every slice here: no collective, no other member */
		DT_ASSERT(r->size == 1);
		r->join_seen = r->join_mine;
		r->join_pending = 0;
	}
	if (!st)
		st = sync_mean(r, dt__session_model(s), step, err);
	int grow = 0;
	if (!st && r->el.min_workers) {
		dt_elastic_done(&r->el, s, step);
		struct dt_model *m = dt__session_model(s);
		DT_ASSERT(!r->join_pending); /* the flag went with the first collective */
		grow = fixed ? r->join_seen : dt_model_grads(m)[dt_model_num_params(m)] > 0.5f;
	}
	if (st && dt_elastic_survivable(&r->el, st)) {
		struct dt_err cause = *err;
		if ((st = recover(s, r, &cause, err)))
			return st;
		/* The agreed step: this one done (by this task or taken from the
		 * root), or the one before it, and then this one is redone with the
		 * new sharding. */
		io->step = r->el.done_step;
		io->taken = r->el.done_step >= step;
		return DT_OK;
	}
	if (st)
		return dt_err_prefix(err, "training stopped at step %lld", (long long)step);
	if (grow) {
		/* A worker asks to join: every member re-forms the ring with it after
		 * this step, which all of them have done. */
		struct dt_err cause = DT_ERR_INIT;
		if ((st = recover(s, r, &cause, err)))
			return dt_err_prefix(err, "training stopped at step %lld", (long long)step);
		io->step = r->el.done_step;
		io->taken = r->el.done_step >= step;
		return DT_OK;
	}
	float *params = dt_model_params(dt__session_model(s));
	const size_t np = dt_model_num_params(dt__session_model(s));
	if (step == r->diverge_at) {
		uint32_t bits;
		memcpy(&bits, params, sizeof(bits));
		bits ^= 1u;
		memcpy(params, &bits, sizeof(bits));
	}
	const int64_t every = r->cfg->check_every;
	if (every > 0 && (step % every == 0 || step == r->cfg->train->train_steps)) {
		st = check_replicas(r, params, np, step, err);
		if (st && dt_elastic_survivable(&r->el, st)) {
			struct dt_err cause = *err;
			if ((st = recover(s, r, &cause, err)))
				return st;
			io->step = r->el.done_step; /* >= step: this step's update was done */
		}
	}
	return st;
}

/* The log window's and the sharded evaluation's figures over every rank (as
 * Keras's fit with validation_data under MultiWorkerMirroredStrategy: each
 * rank evaluates 1/ranks of the test split, so nobody waits on a lone
 * evaluator beyond a step's deadline). */
static enum dt_status ring_reduce(struct dt_session *s, void *self, float *v, size_t n, const char *what,
				  struct dt_err *err)
{
	struct ring *r = self;
	if (!r->el.min_workers)
		return dt_allreduce_sum_f32(r->comm, v, n, what, dt_deadline_in(r->step_s), err);
	/* Elastic: figures are not worth a re-formation here, where the other
	 * survivors may be a step further on. A failed reduction leaves this
	 * task's own figures, scaled as if every worker had the same, and the
	 * broken comm makes the next step's update re-form the ring; after a
	 * re-formation the figures of the agreed step are each task's own too
	 * (the tasks that had done it summed them already). */
	float *mine = dt_xmallocarray(n ? n : 1, sizeof(float));
	memcpy(mine, v, n * sizeof(float));
	enum dt_status st = DT_OK;
	if (dt_session_global_step(s) != r->el.skip_reduce_step)
		st = dt_allreduce_sum_f32(r->comm, v, n, what, dt_deadline_in(r->step_s), err);
	if (st && !dt_elastic_survivable(&r->el, st)) {
		free(mine);
		return st;
	}
	if (st || dt_session_global_step(s) == r->el.skip_reduce_step) {
		if (st)
			dt_warn("%s: these figures are %s's alone", err->msg, r->ranks.names[r->el.self]);
		for (size_t i = 0; i < n; i++)
			v[i] = mine[i] * (float)r->size;
		st = DT_OK;
	}
	free(mine);
	return st;
}

/* Nobody leaves (closing its connections) while a peer still reduces, and
 * nobody waits on rank 0 while it evaluates (after this). */
static enum dt_status ring_reduce_i64(struct dt_session *s, void *self, int64_t *v, size_t n, const char *what,
				      struct dt_err *err)
{
	(void)s;
	struct ring *r = self;
	if (!r->join_pending)
		return dt_allreduce_sum_i64(r->comm, v, n, what, dt_deadline_in(r->step_s), err);
	r->join_pending = 0;
	return dt_elastic_sum_i64_join(&r->el, r->comm, v, n, r->join_mine, what, dt_deadline_in(r->step_s),
				       &r->join_seen, err);
}

/* --deterministic's raw gradients for the ordered sum (session_deal.c), the
 * step's first collective: the join flag rides in the last float of this
 * rank's block (strategy.h leaves it to the strategy), and is seen when any
 * block's is set, alike on every member. */
static enum dt_status ring_allgather(struct dt_session *s, void *self, void *buf, size_t block, const char *what,
				     struct dt_err *err)
{
	(void)s;
	struct ring *r = self;
	DT_ASSERT(block >= sizeof(float) && block % sizeof(float) == 0);
	const size_t last = block / sizeof(float) - 1;
	float *all = buf;
	const int carry = r->join_pending;
	if (carry)
		all[(size_t)r->rank * (last + 1) + last] = (float)r->join_mine;
	r->join_pending = 0;
	enum dt_status st = dt_allgather(r->comm, buf, block, what, dt_deadline_in(r->step_s), err);
	for (int q = 0; !st && carry && q < r->size; q++)
		r->join_seen |= all[(size_t)q * (last + 1) + last] > 0.5f;
	return st;
}

static enum dt_status ring_finish(struct dt_session *s, void *self, int64_t *step, struct dt_err *err)
{
	(void)step;
	struct ring *r = self;
	int64_t steps, compute_ns, reduce_ns, total_ns;
	dt__session_step_times(s, &steps, &compute_ns, &reduce_ns, &total_ns);
	/* With overlap the all-reduce of the first buckets runs inside the
	 * forward/backward time; the second figure is what is left after it. */
	if (steps > 0)
		dt_info("per step: %.2f ms forward/backward, %.2f ms gradient all-reduce (%d bucket%s) and update%s, "
			"%.2f ms the rest", (double)compute_ns / 1e6 / (double)steps,
			(double)reduce_ns / 1e6 / (double)steps, r->nbuckets, r->nbuckets == 1 ? "" : "s",
			r->overlap ? " after the backward pass (overlapped)" : "",
			((double)total_ns - (double)(compute_ns + reduce_ns)) / 1e6 / (double)steps);
	enum dt_status st = dt_barrier(r->comm, "end", dt_deadline_in(r->step_s), err);
	/* A worker lost at the end: the others may still be in the last step's
	 * update and re-form the ring to finish it. */
	for (int k = 0; k < 3 && st && dt_elastic_survivable(&r->el, st); k++) {
		struct dt_err cause = *err;
		r->el.in_apply = 0;
		if (!(st = recover(s, r, &cause, err)))
			st = dt_barrier(r->comm, "end", dt_deadline_in(r->step_s), err);
	}
	if (r->el.reforms)
		dt_info("the ring was re-formed %d time(s); it ended with %d of %d workers", r->el.reforms, r->el.n,
			r->el.table_n);
	if (!st) {
		dt__allreduce_comm_stop(&r->ct);
		dt_comm_free(r->comm);
		r->comm = NULL;
	}
	return st;
}

static const struct dt_strategy strategy_ring = {
	.name = "multi_worker_mirrored", .connect = ring_connect, .start = ring_start, .compute = ring_compute,
	.apply = ring_apply, .reduce = ring_reduce, .reduce_i64 = ring_reduce_i64,
	.allgather = ring_allgather, .finish = ring_finish,
	.fixed_point = 1, .constraints = 1,
	.clip_where = "after the all-reduce, once every bucket has arrived (with --deterministic, after the fixed-point "
		      "sum): the same bits on every worker",
};

enum dt_status dt_train_allreduce(const struct dt_allreduce_run_config *cfg, struct dt_train_result *res,
				  struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	const struct dt_cluster *cl = cfg->cluster;
	memset(res, 0, sizeof(*res));
	struct ring r;
	memset(&r, 0, sizeof(r));
	dt__allreduce_comm_init(&r.ct);
	r.cfg = cfg;
	r.step_s = or_default(cfg->step_s, 60);
	/* Fault injection for the test of --check_replicas_every: this task
	 * flips the lowest bit of its first variable after step N. */
	const char *diverge_env = getenv("DTRAIN_TEST_DIVERGE_AT_STEP");
	r.diverge_at = diverge_env ? atoll(diverge_env) : 0;
	enum dt_status st = DT_OK;
	r.rank = dt_allreduce_rank(cl, &r.size);
	if (r.rank < 0)
		st = dt_err_set(err, DT_CONFIG, "this task (%s:%d) is not a trainer of the all-reduce cluster",
				dt_job_name(cl->task.job), cl->task.index);
	if (!st) {
		r.ranks.peers = dt_xcalloc((size_t)r.size, sizeof(*r.ranks.peers));
		r.ranks.names = dt_xcalloc((size_t)r.size, sizeof(*r.ranks.names));
		struct { const struct dt_cluster *cl; struct rank_table *t; } arg = { cl, &r.ranks };
		walk_ranks(cl, note_rank, &arg);
		int elastic = cfg->min_workers > 0 && cfg->min_workers < r.size;
		if (cfg->min_workers > r.size)
			st = dt_err_set(err, DT_USAGE, "--min_workers=%d is more than the %d workers of the cluster",
					cfg->min_workers, r.size);
		else if (elastic && r.size > DT_MEMBER_MAX)
			st = dt_err_set(err, DT_USAGE, "--min_workers: an elastic ring holds at most %d workers, not %d",
					DT_MEMBER_MAX, r.size);
		dt_elastic_init(&r.el, elastic ? cfg->min_workers : 0, r.size, r.rank, r.ranks.peers,
				(const char(*)[48])r.ranks.names, dt_ps_cluster_fingerprint(cl), tc->auth, r.step_s);
		if (elastic)
			dt_info("elastic: the ring goes on without a lost worker while at least %d of %d remain "
				"(the chief, %s, too: the lowest member left coordinates)", cfg->min_workers, r.size,
				r.ranks.names[0]);
	}
	if (!st) {
		st = dt_train_run(tc, (r.rank == 0 && tc->eval_at_end) || tc->eval_every > 0, &strategy_ring, &r, res,
				  err);
	}
	ring_release(&r);
	return st;
}
