/*
 * pipeline.c — shard, shuffle, batch and (optionally) prefetch.
 *
 * One function, produce(), makes every batch: it advances the producer
 * position (epoch, offset), reshuffles at each new epoch and converts the
 * examples into a slot's buffers. Without prefetch the caller runs it inside
 * dt_pipeline_next; with prefetch a thread runs it ahead of the caller into
 * the free one of two slots. Since the same code makes the same batches in
 * the same order either way, the output cannot depend on the mode.
 *
 * Slots with prefetch: FREE (the producer may fill it) -> FILLED (waiting for
 * the caller) -> HELD (returned by dt_pipeline_next, valid until the next
 * call) -> FREE. The producer writes a slot only while it is FREE and the
 * caller reads it only while it is HELD, so the buffers need no lock; the
 * states, the stop flag and the end flag live under `mu`, and every wait is
 * on the condition variable `cv`.
 *
 * A dataset of image files (image_folder) is decoded in produce() too, so
 * on the prefetch thread; with data_threads > 1 a small pool of decoders
 * shares each batch with it (example i goes to decoder i % threads), and
 * produce() returns when all of them are done, so the slot protocol above
 * is unchanged. A dataset of float features is copied as it is.
 */
#include "data/pipeline.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "data/image_folder.h"

#define MAX_BATCH_SIZE (1 << 20)

enum slot_state { SLOT_FREE, SLOT_FILLED, SLOT_HELD };

struct slot {
	float *x;                        /* (B, H, W, C) */
	uint8_t *y;                      /* (B) */
	struct dt_batch batch;           /* points at x and y */
	int64_t next_epoch, next_offset; /* position after this batch */
	uint32_t *idx;                   /* (B) the examples' dataset indices, with the input trace only */
	enum slot_state state;
};

/* Decoders of image files: the producer is decoder 0, the pool's threads
 * 1..n. A job is one batch; `gen` counts jobs, `pending` the pool's
 * threads still working on the current one; all under mu. */
struct decode_pool {
	int n;                      /* threads in the pool */
	pthread_t *threads;         /* (n) */
	uint8_t **scratch;          /* (n + 1) one example's pixels per decoder */
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	uint64_t gen;
	int pending, stop;
	struct slot *job_slot;      /* the job: slot, dataset indices, size, epoch */
	const uint32_t *job_idx;
	int job_size;
	int64_t job_epoch;
};

struct decoder_arg {
	struct dt_pipeline *p;
	int k;
};

struct dt_pipeline {
	const struct dt_dataset *data;
	int batch_size;
	int slice_index, slice_count; /* >= 1: a global batch is batch_size * slice_count */
	int has_units, unit_index;    /* units (data/units.h): offset counts this trainer's units */
	struct dt_units_layout units;
	int64_t *unread;              /* (units.nu) the unread units of order_epoch; unread_has: a base there */
	int unread_has;
	uint64_t seed;
	int single_pass;
	int64_t shard_size;
	size_t example_elems;  /* H * W * C */
	float lut[256];        /* (p/255 - mean) / std for every byte p */
	uint32_t *base;        /* (shard_size) the shard in dataset order */

	/* Producer side: only the producer (caller or thread) touches these. */
	int64_t epoch, offset; /* position of the next batch to produce */
	int64_t order_epoch;   /* epoch whose shuffle `order` holds; -1 none */
	uint32_t *order;       /* (shard_size) dataset indices for this epoch */

	/* Caller side. */
	int64_t pos_epoch, pos_offset; /* position of the next batch returned */
	int held;                      /* slot the caller holds, -1 none */
	int read_slot;                 /* slot the next batch comes from */
	int at_end;                    /* single pass finished */

	struct slot slots[2];

	/* Prefetch; mu guards slot states, stop and producer_done. */
	int prefetch;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
	int producer_done;

	/* The test hook DTRAIN_TEST_INPUT_TRACE (training only): every batch
	 * returned, one line "epoch index index ...", appended to that file. */
	FILE *trace;

	/* Image files only: decoders (threads = 1: the producer alone). */
	int decoders;
	struct decode_pool pool;
	struct decoder_arg *decoder_args; /* (pool.n) */
};

/* In training mode a batch never runs past the end of the shard: a position
 * with less than a batch left moves to the start of the next epoch. */
static void normalize_position(const struct dt_pipeline *p, int64_t *epoch, int64_t *offset)
{
	if (p->has_units) {
		struct dt_units_pos q = { *epoch, *offset };
		dt_units_normalize(&p->units, p->unit_index, &q);
		*epoch = q.epoch;
		*offset = q.taken;
		return;
	}
	if (!p->single_pass && *offset + (int64_t)p->batch_size * p->slice_count > p->shard_size) {
		*epoch += 1;
		*offset = 0;
	}
}

static void shuffle_for_epoch(struct dt_pipeline *p, int64_t epoch)
{
	memcpy(p->order, p->base, (size_t)p->shard_size * sizeof(uint32_t));
	struct dt_rng rng;
	dt_rng_derive(&rng, p->seed, "shuffle", (uint64_t)epoch);
	dt_rng_shuffle_u32(&rng, p->order, (uint64_t)p->shard_size);
	p->order_epoch = epoch;
	if (p->has_units)
		p->unread_has = dt_units_unread_list(&p->units, epoch, p->unread);
}

/* The hot loop: one example's bytes to normalized floats. restrict tells
 * the compiler the stores cannot change the table. */
static void convert(float *restrict dst, const uint8_t *restrict src, size_t n, const float *restrict lut)
{
	for (size_t k = 0; k < n; k++)
		dst[k] = lut[src[k]];
}

/* Decoder k's share of the current job: examples k, k + decoders, ... A file
 * that fails now passed the load's check, so it changed since: the example
 * is left zero-valued pixels and the failure is logged, naming the file. */
static void decode_share(struct dt_pipeline *p, int k)
{
	struct decode_pool *d = &p->pool;
	const size_t elems = p->example_elems;
	for (int i = k; i < d->job_size; i += p->decoders) {
		struct dt_err e = DT_ERR_INIT;
		if (dt_image_files_read(p->data->files, d->job_idx[i], d->job_epoch, d->scratch[k], &e))
			dt_log(DT_LOG_WARN, "%s (it was readable when the data was loaded; using zeros)", e.msg);
		convert(d->job_slot->x + (size_t)i * elems, d->scratch[k], elems, p->lut);
	}
}

static void *decoder_main(void *arg)
{
	struct decoder_arg *a = arg;
	struct decode_pool *d = &a->p->pool;
	uint64_t seen = 0;
	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (!d->stop && d->gen == seen)
			pthread_cond_wait(&d->work, &d->mu);
		if (d->stop)
			break;
		seen = d->gen;
		pthread_mutex_unlock(&d->mu);
		decode_share(a->p, a->k);
		pthread_mutex_lock(&d->mu);
		if (--d->pending == 0)
			pthread_cond_signal(&d->done);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static void decode_batch(struct dt_pipeline *p, struct slot *s, const uint32_t *idx, int size)
{
	struct decode_pool *d = &p->pool;
	if (d->n == 0) {
		d->job_slot = s;
		d->job_idx = idx;
		d->job_size = size;
		d->job_epoch = p->epoch;
		decode_share(p, 0);
		return;
	}
	pthread_mutex_lock(&d->mu);
	d->job_slot = s;
	d->job_idx = idx;
	d->job_size = size;
	d->job_epoch = p->epoch;
	d->pending = d->n;
	d->gen++;
	pthread_cond_broadcast(&d->work);
	pthread_mutex_unlock(&d->mu);
	decode_share(p, 0);
	pthread_mutex_lock(&d->mu);
	while (d->pending > 0)
		pthread_cond_wait(&d->done, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

/* Starts the decoders of an image-file dataset (all signals blocked, as for
 * the prefetch thread); fewer threads than asked if some cannot start. */
static void pool_start(struct dt_pipeline *p)
{
	struct decode_pool *d = &p->pool;
	int want = p->data->files->threads - 1;
	if (want < 0)
		want = 0;
	d->scratch = dt_xcalloc((size_t)want + 1, sizeof(uint8_t *));
	for (int k = 0; k <= want; k++)
		d->scratch[k] = dt_xmalloc(p->example_elems);
	p->decoders = 1;
	if (want == 0)
		return;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->work, NULL);
	pthread_cond_init(&d->done, NULL);
	d->threads = dt_xcalloc((size_t)want, sizeof(pthread_t));
	p->decoder_args = dt_xcalloc((size_t)want, sizeof(struct decoder_arg));
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (int k = 0; k < want; k++) {
		p->decoder_args[k] = (struct decoder_arg){ p, k + 1 };
		if (pthread_create(&d->threads[k], NULL, decoder_main, &p->decoder_args[k]) != 0) {
			dt_log(DT_LOG_WARN, "input pipeline: started %d of %d decoding threads", k, want);
			break;
		}
		d->n++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	p->decoders = d->n + 1;
}

static void pool_stop(struct dt_pipeline *p)
{
	struct decode_pool *d = &p->pool;
	if (d->threads) {
		pthread_mutex_lock(&d->mu);
		d->stop = 1;
		pthread_cond_broadcast(&d->work);
		pthread_mutex_unlock(&d->mu);
		for (int k = 0; k < d->n; k++)
			pthread_join(d->threads[k], NULL);
		pthread_cond_destroy(&d->done);
		pthread_cond_destroy(&d->work);
		pthread_mutex_destroy(&d->mu);
		free(d->threads);
	}
	for (int k = 0; d->scratch && k < d->n + 1; k++)
		free(d->scratch[k]);
	free(d->scratch);
	free(p->decoder_args);
}

/* Makes the next batch into `s`; returns 0 when a single pass is over. */
static int produce(struct dt_pipeline *p, struct slot *s)
{
	int64_t left = p->shard_size - p->offset;
	int size = p->batch_size;
	if (p->single_pass) {
		if (left <= 0)
			return 0;
		if (left < size)
			size = (int)left;
	} else if (p->order_epoch != p->epoch) {
		shuffle_for_epoch(p, p->epoch);
	}

	const size_t elems = p->example_elems;
	const uint8_t *images = p->data->images;
	const uint32_t *idx = p->has_units ? p->order + dt_units_at(&p->units, p->unit_index, p->offset,
								    p->unread_has ? p->unread : NULL) * p->batch_size
					   : p->order + p->offset + (int64_t)p->slice_index * p->batch_size;
	const float *lut = p->lut;
	if (p->data->files) {
		decode_batch(p, s, idx, size);
	} else if (p->data->features) {
		for (int i = 0; i < size; i++)
			memcpy(s->x + (size_t)i * elems, p->data->features + (size_t)idx[i] * elems,
			       elems * sizeof(float));
	} else {
		for (int i = 0; i < size; i++)
			convert(s->x + (size_t)i * elems, images + (size_t)idx[i] * elems, elems, lut);
	}
	for (int i = 0; i < size; i++)
		s->y[i] = p->data->labels[idx[i]];
	if (s->idx)
		memcpy(s->idx, idx, (size_t)size * sizeof(uint32_t));
	s->batch.size = size;
	s->batch.x = s->x;
	s->batch.y = s->y;
	s->batch.epoch = p->epoch;

	p->offset += p->has_units ? 1 : (int64_t)size * p->slice_count;
	normalize_position(p, &p->epoch, &p->offset);
	s->next_epoch = p->epoch;
	s->next_offset = p->offset;
	return 1;
}

static void *producer_main(void *arg)
{
	struct dt_pipeline *p = arg;
	int w = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->slots[w].state != SLOT_FREE)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stop)
			break;
		pthread_mutex_unlock(&p->mu);
		int made = produce(p, &p->slots[w]);
		pthread_mutex_lock(&p->mu);
		if (!made) {
			p->producer_done = 1;
			pthread_cond_broadcast(&p->cv);
			break;
		}
		p->slots[w].state = SLOT_FILLED;
		pthread_cond_broadcast(&p->cv);
		w ^= 1;
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static enum dt_status check_config(const struct dt_pipeline_config *cfg, struct dt_err *err)
{
	const struct dt_dataset *ds = cfg->data;
	if (!ds)
		return dt_err_set(err, DT_INTERNAL, "input pipeline has no dataset");
	const int forms = (ds->images != NULL) + (ds->files != NULL) + (ds->features != NULL);
	if (ds->height <= 0 || ds->width <= 0 || ds->channels <= 0 || (ds->count && (forms != 1 || !ds->labels)))
		return dt_err_set(err, DT_INTERNAL, "dataset '%s' is not loaded (%dx%dx%d, %" PRIu32 " examples)",
				  ds->source, ds->height, ds->width, ds->channels, ds->count);
	if (!(ds->std > 0.0f) || !isfinite(ds->std) || !isfinite(ds->mean))
		return dt_err_set(err, DT_CONFIG, "dataset '%s' has normalization mean %g std %g; std must be positive",
				  ds->source, (double)ds->mean, (double)ds->std);
	if (cfg->batch_size < 1 || cfg->batch_size > MAX_BATCH_SIZE)
		return dt_err_set(err, DT_CONFIG, "batch_size %d is out of range (1 to %d)", cfg->batch_size,
				  MAX_BATCH_SIZE);
	if (cfg->shard_count < 1 || cfg->shard_index < 0 || cfg->shard_index >= cfg->shard_count)
		return dt_err_set(err, DT_CONFIG, "shard %d of %d is invalid: need 0 <= shard_index < shard_count",
				  cfg->shard_index, cfg->shard_count);
	if (cfg->slice_count < 0 || cfg->slice_index < 0 || (cfg->slice_count > 0 && cfg->slice_index >= cfg->slice_count) ||
	    (cfg->slice_count > 1 && cfg->single_pass))
		return dt_err_set(err, DT_CONFIG, "slice %d of %d is invalid: need 0 <= slice_index < slice_count, in training",
				  cfg->slice_index, cfg->slice_count);
	return DT_OK;
}

enum dt_status dt_pipeline_new(const struct dt_pipeline_config *cfg, struct dt_pipeline **out,
			       struct dt_err *err)
{
	*out = NULL;
	enum dt_status st = check_config(cfg, err);
	if (st)
		return st;
	const struct dt_dataset *ds = cfg->data;
	uint32_t count = ds->count, sc = (uint32_t)cfg->shard_count, si = (uint32_t)cfg->shard_index;
	int64_t n = count / sc + (si < count % sc ? 1 : 0);

	const int slices = cfg->slice_count > 1 ? cfg->slice_count : 1;
	if (!cfg->single_pass && n < (int64_t)cfg->batch_size * slices)
		return dt_err_set(err, DT_CONFIG,
				  "shard %d of %d of '%s' has %" PRId64 " examples, fewer than batch_size %d%s, "
				  "so training would never get a full batch",
				  cfg->shard_index, cfg->shard_count, ds->source, n, cfg->batch_size * slices,
				  slices > 1 ? " (the global batch of its slices)" : "");
	if (cfg->units && (cfg->shard_count != 1 || slices > 1 || cfg->single_pass || cfg->unit_index < 0 ||
			   cfg->unit_index >= cfg->units->trainers || cfg->units->nu != n / cfg->batch_size ||
			   cfg->units->nu < cfg->units->trainers)) {
		st = dt_err_set(err, DT_CONFIG,
				"units of %lld batches for trainer %d of %d do not fit '%s' (%" PRId64 " examples, %" PRId64
				" batches of %d)", (long long)cfg->units->nu, cfg->unit_index, cfg->units->trainers,
				ds->source, n, n / cfg->batch_size, cfg->batch_size);
		dt_err_hint(err, "was the checkpoint written with another dataset or batch size, or are there more "
			    "trainers than batches in an epoch?");
		return st;
	}
	if (cfg->start_epoch < 0 || cfg->start_offset < 0 || (!cfg->units && cfg->start_offset > n)) {
		st = dt_err_set(err, DT_CONFIG,
				"resume position (epoch %" PRId64 ", offset %" PRId64 ") is outside shard %d of %d, "
				"which has %" PRId64 " examples",
				cfg->start_epoch, cfg->start_offset, cfg->shard_index, cfg->shard_count, n);
		dt_err_hint(err, "was the checkpoint written with another dataset or number of workers?");
		return st;
	}

	struct dt_pipeline *p = dt_xcalloc(1, sizeof(*p));
	p->data = ds;
	p->batch_size = cfg->batch_size;
	p->slice_count = slices;
	p->slice_index = slices > 1 ? cfg->slice_index : 0;
	p->seed = cfg->seed;
	p->single_pass = cfg->single_pass ? 1 : 0;
	p->shard_size = n;
	if (cfg->units) {
		p->has_units = 1;
		p->unit_index = cfg->unit_index;
		dt_units_copy(&p->units, cfg->units);
		p->unread = dt_xmallocarray((size_t)p->units.nu, sizeof(int64_t));
	}
	p->example_elems = (size_t)ds->height * (size_t)ds->width * (size_t)ds->channels;
	for (int v = 0; v < 256; v++)
		p->lut[v] = ((float)v / 255.0f - ds->mean) / ds->std;
	p->base = dt_xmallocarray((size_t)n, sizeof(uint32_t));
	for (int64_t i = 0; i < n; i++)
		p->base[i] = si + (uint32_t)i * sc;
	/* A single pass reads the shard in dataset order; training shuffles a copy. */
	p->order = p->single_pass ? p->base : dt_xmallocarray((size_t)n, sizeof(uint32_t));
	p->order_epoch = -1;
	p->epoch = cfg->start_epoch;
	p->offset = cfg->start_offset;
	normalize_position(p, &p->epoch, &p->offset);
	p->pos_epoch = p->epoch;
	p->pos_offset = p->offset;
	p->held = -1;
	for (int i = 0; i < 2; i++) {
		p->slots[i].x = dt_xalloc_aligned((size_t)p->batch_size * p->example_elems, sizeof(float));
		p->slots[i].y = dt_xmalloc((size_t)p->batch_size);
	}

	/* A test hook, not for users: which examples a run trains on, in order
	 * (tests/cli/test_resize.c counts each example once per epoch across a
	 * change of the worker count). */
	const char *trace = getenv("DTRAIN_TEST_INPUT_TRACE");
	if (trace && *trace && !p->single_pass) {
		p->trace = fopen(trace, "a");
		if (!p->trace)
			dt_log(DT_LOG_WARN, "cannot open the input trace '%s': %s", trace, strerror(errno));
		for (int i = 0; p->trace && i < 2; i++)
			p->slots[i].idx = dt_xmallocarray((size_t)p->batch_size, sizeof(uint32_t));
	}
	if (ds->files)
		pool_start(p);
	if (cfg->prefetch) {
		int rc = pthread_mutex_init(&p->mu, NULL);
		if (rc == 0 && (rc = pthread_cond_init(&p->cv, NULL)) != 0)
			pthread_mutex_destroy(&p->mu);
		if (rc == 0) {
			/* The thread blocks every signal so they reach the caller's threads. */
			sigset_t all, old;
			sigfillset(&all);
			pthread_sigmask(SIG_SETMASK, &all, &old);
			rc = pthread_create(&p->thread, NULL, producer_main, p);
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			if (rc != 0) {
				pthread_cond_destroy(&p->cv);
				pthread_mutex_destroy(&p->mu);
			}
		}
		if (rc != 0) {
			dt_pipeline_free(p);
			return dt_err_set(err, DT_RUNTIME, "cannot start the input prefetch thread: %s", strerror(rc));
		}
		p->prefetch = 1;
	}
	*out = p;
	return DT_OK;
}

const struct dt_batch *dt_pipeline_next(struct dt_pipeline *p)
{
	if (p->at_end)
		return NULL;
	struct slot *s;
	if (!p->prefetch) {
		s = &p->slots[0];
		if (!produce(p, s)) {
			p->at_end = 1;
			return NULL;
		}
	} else {
		pthread_mutex_lock(&p->mu);
		if (p->held >= 0) {
			p->slots[p->held].state = SLOT_FREE;
			p->held = -1;
			pthread_cond_broadcast(&p->cv);
		}
		s = &p->slots[p->read_slot];
		while (s->state != SLOT_FILLED && !p->producer_done)
			pthread_cond_wait(&p->cv, &p->mu);
		if (s->state != SLOT_FILLED) {
			p->at_end = 1;
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		s->state = SLOT_HELD;
		p->held = p->read_slot;
		p->read_slot ^= 1;
		pthread_mutex_unlock(&p->mu);
	}
	p->pos_epoch = s->next_epoch;
	p->pos_offset = s->next_offset;
	if (p->trace) {
		fprintf(p->trace, "%" PRId64, s->batch.epoch);
		for (int i = 0; i < s->batch.size; i++)
			fprintf(p->trace, " %" PRIu32, s->idx[i]);
		fputc('\n', p->trace);
	}
	return &s->batch;
}

void dt_pipeline_position(const struct dt_pipeline *p, int64_t *epoch, int64_t *offset)
{
	if (epoch)
		*epoch = p->pos_epoch;
	if (offset)
		*offset = p->pos_offset;
}

int64_t dt_pipeline_shard_size(const struct dt_pipeline *p)
{
	return p->shard_size;
}

void dt_pipeline_free(struct dt_pipeline *p)
{
	if (!p)
		return;
	if (p->prefetch) {
		/* The thread finishes at most the batch it is making, then sees stop. */
		pthread_mutex_lock(&p->mu);
		p->stop = 1;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		int rc = pthread_join(p->thread, NULL);
		DT_ASSERT(rc == 0);
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
	}
	if (p->data->files)
		pool_stop(p);
	for (int i = 0; i < 2; i++) {
		free(p->slots[i].x);
		free(p->slots[i].y);
		free(p->slots[i].idx);
	}
	if (p->trace)
		fclose(p->trace);
	if (p->order != p->base)
		free(p->order);
	if (p->has_units)
		dt_units_release(&p->units);
	free(p->unread);
	free(p->base);
	free(p);
}

void dt_pipeline_batch_position(int64_t shard_size, int batch_size, int64_t batches, int64_t *epoch,
				int64_t *offset)
{
	int64_t per_epoch = batch_size > 0 ? shard_size / batch_size : 0;
	*epoch = *offset = 0;
	if (per_epoch > 0 && batches > 0) {
		*epoch = batches / per_epoch;
		*offset = batches % per_epoch * batch_size;
	}
}
