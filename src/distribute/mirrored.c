#include "distribute/mirrored.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "tensor/blas.h"

/* One replica and its share of the current step. */
struct replica {
	struct dt_mirrored *group;
	int index;
	struct dt_model *model;   /* index 0: the primary (borrowed); else owned */
	struct dt_rng rng;        /* dropout stream */
	pthread_t thread;
	int started;
	/* This step, written by the caller before the start signal. */
	const float *x;           /* (n, H, W, C) */
	const uint8_t *y;         /* (n) */
	int n;
	const struct dt_model_batch *whole; /* general step: the batch this slice is cut from; else NULL */
	int off;                  /* general step: the slice's first example */
	int mb_first, mb_count;   /* micro step: its micro-batches (dt_mirrored_micro_step) */
	/* Written by the replica before the barrier. */
	float loss, reg_loss;     /* reg_loss: its regularization part (nn/regularize.h) */
	int correct, counted;
	int seqs, seqs_correct;   /* general step, a padded sequence loss (nn/model.h's dt_step_result) */
	double nll_sum, bleu;
	int bleu_batches;
	enum dt_status st;        /* general step */
	struct dt_err err;
};

struct dt_mirrored {
	int n;                    /* replicas */
	int batch_size;
	size_t example_floats;    /* H * W * C */
	size_t num_params;
	struct replica *reps;     /* (n) */
	float weights[DT_MIRRORED_MAX_REPLICAS]; /* n_r / B this step; 0 for idle replicas */
	int active;               /* replicas with at least one example this step */
	pthread_mutex_t mu;
	pthread_cond_t start_cv, done_cv;
	uint64_t generation;      /* bumped once per step (and to stop) */
	int pending;              /* threads that have not finished this step */
	int stop;
	pthread_barrier_t reduced; /* every replica's backward is done */
	struct dt_micro_step *micro; /* this step is a micro step; NULL otherwise */
	int nsync;                /* sync-mean variables (batch norm's moving statistics) */
	size_t *sync_lo, *sync_hi; /* (nsync): their ranges of the flat buffer */
};

/* Replica r > 0 takes the primary's parameters before its step: all but
 * the sync-mean ranges here, on its own thread, while the primary's forward
 * pass may already be updating those ranges (its moving statistics); they
 * were copied before the threads started (copy_sync). */
static void copy_params(struct dt_mirrored *g, struct dt_model *m)
{
	const float *src = dt_model_params(g->reps[0].model);
	float *dst = dt_model_params(m);
	size_t at = 0;
	for (int v = 0; v <= g->nsync; v++) {
		const size_t end = v < g->nsync ? g->sync_lo[v] : g->num_params;
		if (end > at)
			memcpy(dst + at, src + at, (end - at) * sizeof(float));
		if (v < g->nsync)
			at = g->sync_hi[v];
	}
}

/* The sync-mean ranges of every replica from the primary, before a step. */
static void copy_sync(struct dt_mirrored *g)
{
	const float *src = dt_model_params(g->reps[0].model);
	for (int r = 1; r < g->n; r++)
		for (int v = 0; v < g->nsync; v++)
			memcpy(dt_model_params(g->reps[r].model) + g->sync_lo[v], src + g->sync_lo[v],
			       (g->sync_hi[v] - g->sync_lo[v]) * sizeof(float));
}

int dt_mirrored_replicas(const struct dt_mirrored *g)
{
	return g->n;
}

/* Range [*lo, *hi) of the flat buffer replica r reduces and copies: n nearly
 * equal contiguous pieces, 16-float aligned. */
static void piece(const struct dt_mirrored *g, int r, size_t *lo, size_t *hi)
{
	size_t per = (g->num_params + (size_t)g->n - 1) / (size_t)g->n;
	per = (per + 15) / 16 * 16;
	*lo = (size_t)r * per < g->num_params ? (size_t)r * per : g->num_params;
	*hi = *lo + per < g->num_params ? *lo + per : g->num_params;
}

/* The sync-mean variables' floats in [lo, hi) of the primary = the mean of
 * the active replicas' own updated copies (nn/model.h's
 * dt_model_variable_sync_mean), summed in replica order: the next step's
 * copy (run_step) hands the mean to every replica. */
static void mean_sync_piece(struct dt_mirrored *g, size_t lo, size_t hi)
{
	float *dst = dt_model_params(g->reps[0].model);
	const float inv = 1.0f / (float)g->active;
	for (int v = 0; v < g->nsync; v++) {
		const size_t a = g->sync_lo[v] > lo ? g->sync_lo[v] : lo;
		const size_t b = g->sync_hi[v] < hi ? g->sync_hi[v] : hi;
		for (size_t i = a; i < b; i++) {
			float sum = dst[i];
			for (int k = 1; k < g->active; k++)
				sum += dt_model_params(g->reps[k].model)[i];
			dst[i] = sum * inv;
		}
	}
}

/* This step's weights (after the barrier, when every replica's figures are
 * written): n_r / B, or, when every active replica's loss is a padded
 * sequence loss (a mean over its non-pad tokens), counted_r / the step's
 * tokens, so that the sum is the gradient of the mean over every token of
 * the batch, as t2t sums its shards' (numerator, denominator) losses. The
 * same pure function of the replicas' figures on every thread. */
static void step_weights(const struct dt_mirrored *g, float *w)
{
	int64_t tokens = 0;
	int by_tokens = g->reps[0].whole != NULL;
	for (int k = 0; k < g->active && by_tokens; k++) {
		by_tokens = g->reps[k].seqs > 0;
		tokens += g->reps[k].counted;
	}
	for (int k = 0; k < g->n; k++)
		w[k] = by_tokens && tokens > 0 ? (k < g->active ? (float)((double)g->reps[k].counted / (double)tokens) : 0.0f)
					     : g->weights[k];
}

/* primary grads[lo, hi) = sum over active replicas of weight_r * grads_r;
 * its sync-mean variables in [lo, hi) the mean of the replicas'. */
static void reduce_piece(struct dt_mirrored *g, int r)
{
	size_t lo, hi;
	piece(g, r, &lo, &hi);
	if (lo >= hi || g->active < 2)
		return;
	mean_sync_piece(g, lo, hi);
	float weights[DT_MIRRORED_MAX_REPLICAS];
	step_weights(g, weights);
	float *dst = dt_model_grads(g->reps[0].model);
	const float w0 = weights[0];
	for (size_t i = lo; i < hi; i++)
		dst[i] *= w0;
	for (int k = 1; k < g->active; k++) {
		const float *src = dt_model_grads(g->reps[k].model);
		const float w = weights[k];
		for (size_t i = lo; i < hi; i++)
			dst[i] += w * src[i];
	}
}

/* Bytes per example of each input (and the targets) of a model: a
 * sequence model's tensors are (B, L) with the batch's own L. */
static size_t io_bytes(const struct dt_io_info *io, const struct dt_model_batch *b)
{
	return (b->length > 0 ? (size_t)b->length : io->count) * 4; /* float32 and int32 */
}

/* A general step on examples [off, off + n) of rep->whole. */
static void general_slice(struct replica *rep)
{
	const struct dt_model_batch *b = rep->whole;
	struct dt_model_batch s = *b;
	s.size = rep->n;
	for (int i = 0; i < b->num_inputs; i++)
		s.inputs[i].data = (const char *)b->inputs[i].data +
				   (size_t)rep->off * io_bytes(dt_model_input(rep->model, i), b);
	s.targets.data = (const char *)b->targets.data + (size_t)rep->off * io_bytes(dt_model_target(rep->model), b);
	struct dt_step_result res = { 0 };
	dt_err_clear(&rep->err);
	rep->st = dt_model_step(rep->model, &s, &rep->rng, NULL, NULL, &res, &rep->err);
	rep->loss = res.loss;
	rep->reg_loss = res.reg_loss;
	rep->correct = res.correct;
	rep->counted = res.counted;
	rep->seqs = res.seqs;
	rep->seqs_correct = res.seqs_correct;
	rep->nll_sum = res.nll_sum;
	rep->bleu = res.bleu;
	rep->bleu_batches = res.bleu_batches;
}

/* Micro-batches [first, first + count) of a micro step on `m`, each
 * gradient handed to ms->keep: no sum here (the caller sums in fixed point). */
static void micro_range(struct dt_model *m, const struct dt_micro_step *ms, int first, int count)
{
	for (int k = first; k < first + count; k++) {
		struct dt_rng rng;
		dt_rng_derive(&rng, ms->seed, "dropout/micro", ms->stream0 + (uint64_t)k);
		int right = 0;
		const int last = k == first + count - 1;
		const size_t at = (size_t)k * (size_t)ms->micro;
		if (ms->into) {
			const int moved = dt_model_set_grads(m, last && ms->keep_last ? NULL : ms->into[k]);
			DT_ASSERT(moved);
		}
		ms->losses[k] = dt_model_train_batch(m, ms->x + at * ms->example_floats, ms->y + at, ms->micro, &rng,
						     &right);
		ms->correct[k] = right;
		ms->keep(ms->keep_arg, m, k, last);
	}
	if (ms->into) {
		const int back = dt_model_set_grads(m, NULL);
		DT_ASSERT(back);
	}
}

/* Replica r's part of a step: its forward/backward (parameters copied from
 * the primary first, for r > 0), the barrier, its piece of the sum. */
static void run_step(struct replica *rep)
{
	struct dt_mirrored *g = rep->group;
	if (g->micro) {
		if (rep->mb_count > 0 && rep->index > 0)
			copy_params(g, rep->model);
		micro_range(rep->model, g->micro, rep->mb_first, rep->mb_count);
		return;
	}
	if (rep->n > 0) {
		if (rep->index > 0)
			copy_params(g, rep->model);
		rep->correct = 0;
		if (rep->whole)
			general_slice(rep);
		else
			rep->loss = dt_model_train_batch(rep->model, rep->x, rep->y, rep->n, &rep->rng, &rep->correct);
	} else {
		rep->loss = 0;
		rep->correct = rep->counted = rep->seqs = rep->seqs_correct = rep->bleu_batches = 0;
		rep->nll_sum = rep->bleu = 0;
		rep->st = DT_OK;
	}
	pthread_barrier_wait(&g->reduced);
	reduce_piece(g, rep->index);
}

static void *replica_main(void *arg)
{
	struct replica *rep = arg;
	struct dt_mirrored *g = rep->group;
	uint64_t seen = 0;
	for (;;) {
		pthread_mutex_lock(&g->mu);
		while (g->generation == seen)
			pthread_cond_wait(&g->start_cv, &g->mu);
		seen = g->generation;
		int stop = g->stop;
		pthread_mutex_unlock(&g->mu);
		if (stop)
			return NULL;
		run_step(rep);
		pthread_mutex_lock(&g->mu);
		if (--g->pending == 0)
			pthread_cond_signal(&g->done_cv);
		pthread_mutex_unlock(&g->mu);
	}
}

static void stop_threads(struct dt_mirrored *g)
{
	pthread_mutex_lock(&g->mu);
	g->stop = 1;
	g->generation++;
	pthread_cond_broadcast(&g->start_cv);
	pthread_mutex_unlock(&g->mu);
	for (int r = 1; r < g->n; r++)
		if (g->reps[r].started)
			pthread_join(g->reps[r].thread, NULL);
}

void dt_mirrored_free(struct dt_mirrored *g)
{
	if (!g)
		return;
	stop_threads(g);
	for (int r = 1; r < g->n; r++)
		dt_model_free(g->reps[r].model);
	free(g->reps);
	free(g->sync_lo);
	free(g->sync_hi);
	pthread_barrier_destroy(&g->reduced);
	pthread_cond_destroy(&g->start_cv);
	pthread_cond_destroy(&g->done_cv);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

enum dt_status dt_mirrored_new(struct dt_model *primary, const struct dt_mirrored_config *cfg,
			       struct dt_mirrored **out, struct dt_err *err)
{
	*out = NULL;
	if (cfg->replicas < 2 || cfg->replicas > DT_MIRRORED_MAX_REPLICAS)
		return dt_err_set(err, DT_USAGE, "mirrored replicas must be between 2 and %d, got %d",
				  DT_MIRRORED_MAX_REPLICAS, cfg->replicas);
	if (cfg->batch_size < 1 || cfg->batch_size > dt_model_max_batch(primary))
		return dt_err_set(err, DT_CONFIG, "mirrored batch %d does not fit the primary model (max batch %d)",
				  cfg->batch_size, dt_model_max_batch(primary));
	const int n = cfg->replicas;
	struct dt_mirrored *g = dt_xcalloc(1, sizeof(*g));
	g->n = n;
	g->batch_size = cfg->batch_size;
	g->example_floats = (size_t)cfg->height * (size_t)cfg->width * (size_t)cfg->channels;
	g->num_params = dt_model_num_params(primary);
	g->reps = dt_xcalloc((size_t)n, sizeof(*g->reps));
	const int nvars = dt_model_num_variables(primary);
	g->sync_lo = dt_xcalloc((size_t)nvars + 1, sizeof(size_t));
	g->sync_hi = dt_xcalloc((size_t)nvars + 1, sizeof(size_t));
	for (int i = 0; i < nvars; i++)
		if (dt_model_variable_sync_mean(primary, i)) {
			const struct dt_variable *v = dt_model_variable(primary, i);
			g->sync_lo[g->nsync] = v->offset;
			g->sync_hi[g->nsync++] = v->offset + v->count;
		}
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->start_cv, NULL);
	pthread_cond_init(&g->done_cv, NULL);
	pthread_barrier_init(&g->reduced, NULL, (unsigned)n);
	const int slice_max = (cfg->batch_size + n - 1) / n;
	enum dt_status st = DT_OK;
	for (int r = 0; r < n && !st; r++) {
		struct replica *rep = &g->reps[r];
		rep->group = g;
		rep->index = r;
		dt_rng_derive(&rep->rng, cfg->seed, "dropout", cfg->stream_base * (uint64_t)n + (uint64_t)r);
		if (r == 0) {
			rep->model = primary;
			continue;
		}
		st = cfg->make ? cfg->make(cfg->make_arg, slice_max, &rep->model, err)
			       : dt_model_new(cfg->models, cfg->hp, cfg->height, cfg->width, cfg->channels, cfg->num_classes, slice_max,
					      &rep->model, err);
		if (!st && dt_model_num_params(rep->model) != g->num_params)
			st = dt_err_set(err, DT_INTERNAL, "replica %d has %zu parameters, the primary %zu", r,
					dt_model_num_params(rep->model), g->num_params);
	}
	/* Replica threads are the parallelism: one OpenBLAS thread each. */
	if (!st)
		dt_blas_set_threads(1);
	for (int r = 1; r < n && !st; r++) {
		int rc = pthread_create(&g->reps[r].thread, NULL, replica_main, &g->reps[r]);
		if (rc != 0)
			st = dt_err_set(err, DT_RUNTIME, "cannot start mirrored replica thread %d of %d: %s", r, n,
					strerror(rc));
		else
			g->reps[r].started = 1;
	}
	if (st) {
		/* Threads not started never reach the barrier; stopping only joins the started ones. */
		dt_mirrored_free(g);
		return dt_err_prefix(err, "cannot set up %d mirrored replicas", n);
	}
	*out = g;
	return DT_OK;
}

/* Splits `batch` examples over the replicas (sizes, offsets, weights). */
static void split(struct dt_mirrored *g, int batch, const float *x, const uint8_t *labels,
		  const struct dt_model_batch *whole)
{
	DT_ASSERT(batch >= 1 && batch <= g->batch_size);
	const int n = g->n;
	int off = 0;
	g->active = 0;
	for (int r = 0; r < n; r++) {
		struct replica *rep = &g->reps[r];
		rep->n = batch / n + (r < batch % n);
		rep->whole = whole;
		rep->off = off;
		rep->x = x ? x + (size_t)off * g->example_floats : NULL;
		rep->y = labels ? labels + off : NULL;
		off += rep->n;
		g->weights[r] = (float)rep->n / (float)batch;
		if (rep->n > 0)
			g->active++;
	}
	DT_ASSERT(off == batch);
}

/* Runs one step on every replica: the threads, then replica 0 here. */
static void run_all(struct dt_mirrored *g)
{
	const int n = g->n;
	copy_sync(g);
	pthread_mutex_lock(&g->mu);
	g->pending = n - 1;
	g->generation++;
	pthread_cond_broadcast(&g->start_cv);
	pthread_mutex_unlock(&g->mu);

	run_step(&g->reps[0]);

	pthread_mutex_lock(&g->mu);
	while (g->pending > 0)
		pthread_cond_wait(&g->done_cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

float dt_mirrored_train_batch(struct dt_mirrored *g, const float *x, const uint8_t *labels, int batch,
			      int *correct)
{
	const int n = g->n;
	split(g, batch, x, labels, NULL);
	run_all(g);
	double loss = 0;
	int right = 0;
	for (int r = 0; r < n; r++) {
		loss += (double)g->weights[r] * (double)g->reps[r].loss;
		right += g->reps[r].correct;
	}
	if (correct)
		*correct = right;
	return (float)loss;
}

float dt_mirrored_step(struct dt_mirrored *g, struct dt_model *model, const float *x, const uint8_t *labels,
		       int batch, struct dt_rng *rng, int *correct)
{
	if (!g)
		return dt_model_train_batch(model, x, labels, batch, rng, correct);
	return dt_mirrored_train_batch(g, x, labels, batch, correct);
}

void dt_mirrored_micro_step(struct dt_mirrored *g, struct dt_model *model, struct dt_micro_step *ms)
{
	const int k = ms->batch / ms->micro;
	if (!g) {
		micro_range(model, ms, 0, k);
		return;
	}
	/* Replica r: a contiguous run of micro-batches, sizes differing by at
	 * most one; which replica computes one does not change its bits. */
	for (int r = 0, first = 0; r < g->n; r++) {
		g->reps[r].mb_first = first;
		g->reps[r].mb_count = k / g->n + (r < k % g->n);
		first += g->reps[r].mb_count;
	}
	g->micro = ms;
	run_all(g);
	g->micro = NULL;
}

enum dt_status dt_mirrored_step_general(struct dt_mirrored *g, const struct dt_model_batch *b,
					struct dt_step_result *res, struct dt_err *err)
{
	split(g, b->size, NULL, NULL, b);
	run_all(g);
	float weights[DT_MIRRORED_MAX_REPLICAS];
	step_weights(g, weights);
	double loss = 0, reg = 0;
	memset(res, 0, sizeof(*res));
	for (int r = 0; r < g->n; r++) {
		const struct replica *rep = &g->reps[r];
		if (rep->st) {
			if (err)
				*err = rep->err;
			return dt_err_prefix(err, "replica %d", r);
		}
		loss += (double)weights[r] * (double)rep->loss;
		reg += (double)weights[r] * (double)rep->reg_loss;
		res->correct += rep->correct;
		res->counted += rep->counted;
		res->seqs += rep->seqs;
		res->seqs_correct += rep->seqs_correct;
		res->nll_sum += rep->nll_sum;
		res->bleu += rep->bleu;
		res->bleu_batches += rep->bleu_batches;
	}
	/* t2t's approx_bleu_score is a batch's: the mean of the slices' here */
	if (res->bleu_batches > 1) {
		res->bleu /= res->bleu_batches;
		res->bleu_batches = 1;
	}
	res->loss = (float)loss;
	res->reg_loss = (float)reg;
	return DT_OK;
}
