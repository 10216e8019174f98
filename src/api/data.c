/*
 * data.c — the public data sources (a batch callback, arrays in memory, a
 * built-in problem) and the readers a session draws batches from.
 *
 * Arrays: example i belongs to shard i % num_shards (the input pipeline's
 * rule, data/pipeline.h); each epoch the shard is shuffled with a generator
 * derived from (seed, "shuffle", epoch), so every shard of a run sees the
 * same order whatever the thread timing, and an incomplete last batch of an
 * epoch is dropped. A single pass reads the whole source in order, the last
 * batch short.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "data/problem.h"

enum data_kind { DATA_CALLBACK, DATA_ARRAYS };

struct data_array {
	char name[DT_API_NAME_MAX];
	dtrain_dtype dtype;
	int64_t per_example;
	void *values; /* (count, per_example), owned */
};

struct dtrain_data {
	enum data_kind kind;
	dtrain_batch_fn fn;
	void *user;
	int64_t examples_per_epoch;
	int64_t count;
	int narrays;
	struct data_array arrays[DT_API_MAX_INPUTS];
};

dtrain_status dtrain_data_from_callback(dtrain_batch_fn fn, void *user, int64_t examples_per_epoch, dtrain_data **out,
					dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_data_from_callback: out is NULL");
	*out = NULL;
	if (!fn)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_data_from_callback: the callback is NULL");
	if (examples_per_epoch < 0)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_data_from_callback: examples_per_epoch is %lld",
						 (long long)examples_per_epoch);
	dtrain_data *d = calloc(1, sizeof(*d));
	if (!d)
		return (dtrain_status)dt_err_set(e, DT_NOMEM, "cannot allocate a data source");
	d->kind = DATA_CALLBACK;
	d->fn = fn;
	d->user = user;
	d->examples_per_epoch = examples_per_epoch;
	*out = d;
	return DTRAIN_OK;
}

dtrain_status dtrain_data_from_arrays(int64_t count, dtrain_data **out, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_data_from_arrays: out is NULL");
	*out = NULL;
	if (count < 1 || count > UINT32_MAX)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_data_from_arrays: count is %lld; give 1 to %u",
						 (long long)count, UINT32_MAX);
	dtrain_data *d = calloc(1, sizeof(*d));
	if (!d)
		return (dtrain_status)dt_err_set(e, DT_NOMEM, "cannot allocate a data source");
	d->kind = DATA_ARRAYS;
	d->count = count;
	*out = d;
	return DTRAIN_OK;
}

static dtrain_status add_array(dtrain_data *d, const char *input, dtrain_dtype dtype, const void *values,
			       int64_t per_example, const char *fn, struct dt_err *e)
{
	if (!d)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "%s: the data source is NULL", fn);
	if (d->kind != DATA_ARRAYS)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "%s: the data source is a callback, not arrays", fn);
	if (!input || !*input || strlen(input) >= DT_API_NAME_MAX)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "%s: the input name is NULL, empty or too long", fn);
	if (!values)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "%s '%s': values is NULL", fn, input);
	for (int i = 0; i < d->narrays; i++)
		if (strcmp(d->arrays[i].name, input) == 0)
			return (dtrain_status)dt_err_set(e, DT_USAGE, "%s: '%s' was added already", fn, input);
	if (d->narrays == DT_API_MAX_INPUTS)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "%s '%s': at most %d arrays", fn, input,
						 DT_API_MAX_INPUTS);
	if (per_example < 1 || per_example > DT_API_MAX_ELEMS / d->count)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "%s '%s': per_example is %lld; give 1 to %lld", fn, input,
						 (long long)per_example, (long long)(DT_API_MAX_ELEMS / d->count));
	size_t bytes = (size_t)d->count * (size_t)per_example * 4;
	void *copy;
	if (dt_try_malloc(&copy, bytes, e))
		return (dtrain_status)dt_err_prefix(e, "%s '%s'", fn, input);
	memcpy(copy, values, bytes);
	struct data_array *a = &d->arrays[d->narrays++];
	snprintf(a->name, sizeof(a->name), "%s", input);
	a->dtype = dtype;
	a->per_example = per_example;
	a->values = copy;
	return DTRAIN_OK;
}

dtrain_status dtrain_data_add_float(dtrain_data *d, const char *input, const float *values, int64_t per_example,
				    dtrain_error *err)
{
	return add_array(d, input, DTRAIN_FLOAT32, values, per_example, "dtrain_data_add_float", dt__api_err(err));
}

dtrain_status dtrain_data_add_int32(dtrain_data *d, const char *input, const int32_t *values, int64_t per_example,
				    dtrain_error *err)
{
	return add_array(d, input, DTRAIN_INT32, values, per_example, "dtrain_data_add_int32", dt__api_err(err));
}

dtrain_status dtrain_data_problem(const char *problem, const char *data_dir, const char *split, dtrain_data **out,
				  dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_data_problem: out is NULL");
	*out = NULL;
	if (!problem || !split)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_data_problem: problem or split is NULL");
	enum dt_split sp;
	if (strcmp(split, "train") == 0)
		sp = DT_SPLIT_TRAIN;
	else if (strcmp(split, "test") == 0)
		sp = DT_SPLIT_TEST;
	else
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_data_problem: split '%s' is not train or test",
						 split);
	struct dt_dataset ds;
	memset(&ds, 0, sizeof(ds));
	if (dt_problem_load(problem, data_dir, NULL, sp, 1, &ds, e))
		return (dtrain_status)e->status;
	if (ds.text) { /* token sequences are not image arrays */
		dt_dataset_release(&ds);
		return (dtrain_status)dt_err_set(e, DT_USAGE,
						 "dtrain_data_problem: '%s' is a text problem; the API serves image problems "
						 "only (train it with dtrain train --model=transformer)",
						 problem);
	}
	size_t per = (size_t)ds.height * (size_t)ds.width * (size_t)ds.channels;
	float *x = NULL;
	int32_t *y = NULL;
	dtrain_data *d = NULL;
	dtrain_status st = DTRAIN_OK;
	if (dt_try_malloc((void **)&x, (size_t)ds.count * per * sizeof(float), e) ||
	    dt_try_malloc((void **)&y, (size_t)ds.count * sizeof(int32_t), e)) {
		st = (dtrain_status)e->status;
		goto out;
	}
	/* The pipeline's normalization (data/pipeline.c): (p/255 - mean) / std. */
	for (size_t i = 0; i < (size_t)ds.count * per; i++)
		x[i] = ((float)ds.images[i] / 255.0f - ds.mean) / ds.std;
	for (uint32_t i = 0; i < ds.count; i++)
		y[i] = ds.labels[i];
	if ((st = dtrain_data_from_arrays(ds.count, &d, err)) || (st = dtrain_data_add_float(d, "image", x, (int64_t)per, err)) ||
	    (st = dtrain_data_add_int32(d, "label", y, 1, err))) {
		dtrain_data_free(d);
		goto out;
	}
	*out = d;
out:
	free(x);
	free(y);
	dt_dataset_release(&ds);
	return st;
}

void dtrain_data_free(dtrain_data *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->narrays; i++)
		free(d->arrays[i].values);
	free(d);
}

/* ---- in the batch callback ---- */

int dtrain_batch_shard(const dtrain_batch *b)
{
	return b ? b->shard : 0;
}

int dtrain_batch_num_shards(const dtrain_batch *b)
{
	return b ? b->num_shards : 0;
}

int64_t dtrain_batch_step(const dtrain_batch *b)
{
	return b ? b->step : 0;
}

int64_t dtrain_batch_epoch(const dtrain_batch *b)
{
	return b ? b->epoch : 0;
}

int dtrain_batch_size(const dtrain_batch *b)
{
	return b ? b->size : 0;
}

static void *batch_input(dtrain_batch *b, const char *name, dtrain_dtype dtype)
{
	int i = b ? dt__api_input_index(b->model, name) : -1;
	return i >= 0 && b->model->inputs[i].dtype == dtype ? b->inputs[i] : NULL;
}

float *dtrain_batch_float(dtrain_batch *b, const char *input)
{
	return batch_input(b, input, DTRAIN_FLOAT32);
}

int32_t *dtrain_batch_int32(dtrain_batch *b, const char *input)
{
	return batch_input(b, input, DTRAIN_INT32);
}

/* ---- readers ---- */

struct dt__api_reader {
	dtrain_data *d;
	const dtrain_model *m;
	int shard, num_shards, batch, single_pass;
	uint64_t seed;
	int src[DT_API_MAX_INPUTS]; /* array feeding model input i */
	uint32_t *order;            /* arrays, training: this shard's examples in this epoch's order */
	int64_t shard_size, epoch, pos;
	int64_t callback_examples;  /* callback: examples handed out so far (for the epoch) */
};

enum dt_status dt__api_reader_new(dtrain_data *d, const dtrain_model *m, int shard, int num_shards, int batch,
				  uint64_t seed, int single_pass, struct dt__api_reader **out, struct dt_err *err)
{
	*out = NULL;
	struct dt__api_reader *r = dt_xcalloc(1, sizeof(*r));
	r->d = d;
	r->m = m;
	r->shard = shard;
	r->num_shards = num_shards;
	r->batch = batch;
	r->seed = seed;
	r->single_pass = single_pass;
	if (d->kind == DATA_ARRAYS) {
		/* Every model input needs an array of its dtype and size. */
		for (int i = 0; i < m->ninputs; i++) {
			const struct dt__api_input *in = &m->inputs[i];
			r->src[i] = -1;
			for (int k = 0; k < d->narrays; k++)
				if (strcmp(d->arrays[k].name, in->name) == 0)
					r->src[i] = k;
			if (r->src[i] < 0) {
				dt__api_reader_free(r);
				return dt_err_set(err, DT_CONFIG, "the data has no array for the model's input '%s'",
						  in->name);
			}
			const struct data_array *a = &d->arrays[r->src[i]];
			if (a->dtype != in->dtype || a->per_example != in->per_example) {
				dt__api_reader_free(r);
				return dt_err_set(err, DT_CONFIG,
						  "the array '%s' holds %lld %s per example; the model's input wants %lld %s",
						  in->name, (long long)a->per_example,
						  a->dtype == DTRAIN_FLOAT32 ? "floats" : "int32s", (long long)in->per_example,
						  in->dtype == DTRAIN_FLOAT32 ? "floats" : "int32s");
			}
		}
		if (single_pass) {
			r->shard_size = d->count;
		} else {
			r->shard_size = d->count / num_shards + (shard < d->count % num_shards);
			if (r->shard_size < batch) {
				long long have = (long long)r->shard_size;
				dt__api_reader_free(r);
				return dt_err_set(err, DT_CONFIG,
						  "shard %d of %d holds %lld examples, fewer than one batch of %d", shard,
						  num_shards, have, batch);
			}
			r->order = dt_xmallocarray((size_t)r->shard_size, sizeof(uint32_t));
			r->pos = r->shard_size; /* shuffle epoch 0 on the first batch */
			r->epoch = -1;
		}
	}
	*out = r;
	return DT_OK;
}

static void shuffle_epoch(struct dt__api_reader *r)
{
	r->epoch++;
	for (int64_t i = 0; i < r->shard_size; i++)
		r->order[i] = (uint32_t)(r->shard + i * r->num_shards);
	struct dt_rng rng;
	dt_rng_derive(&rng, r->seed, "shuffle", (uint64_t)r->epoch);
	dt_rng_shuffle_u32(&rng, r->order, (uint64_t)r->shard_size);
	r->pos = 0;
}

enum dt_status dt__api_reader_next(struct dt__api_reader *r, int64_t step, void *const *bufs, int *size,
				   struct dt_err *err)
{
	const dtrain_model *m = r->m;
	if (r->d->kind == DATA_CALLBACK) {
		int64_t per_epoch = r->d->examples_per_epoch;
		dtrain_batch b = {
			.model = m, .shard = r->shard, .num_shards = r->num_shards, .size = r->batch, .step = step,
			.epoch = per_epoch > 0 ? r->callback_examples * r->num_shards / per_epoch : 0, .inputs = bufs,
		};
		if (r->single_pass && per_epoch > 0) {
			int64_t left = per_epoch - r->callback_examples;
			if (left <= 0) {
				*size = 0;
				return DT_OK;
			}
			if (left < b.size)
				b.size = (int)left;
		}
		dtrain_error cb;
		dt_err_clear(&cb.e);
		b.step = r->callback_examples / (r->batch > 0 ? r->batch : 1);
		dtrain_status st = r->d->fn(r->d->user, &b, &cb);
		if (st != DTRAIN_OK) {
			enum dt_status ds = (int)st > 0 && (int)st < DT_STATUS_COUNT ? (enum dt_status)st : DT_RUNTIME;
			return dt_err_set(err, ds, "the batch callback failed at step %lld (%s): %s", (long long)b.step,
					  dtrain_status_name(st), cb.e.msg[0] ? cb.e.msg : "it gave no message");
		}
		r->callback_examples += b.size;
		*size = b.size;
		return DT_OK;
	}
	int n = r->batch;
	if (r->single_pass) {
		if (r->pos >= r->shard_size) {
			*size = 0;
			return DT_OK;
		}
		if (r->shard_size - r->pos < n)
			n = (int)(r->shard_size - r->pos);
	} else if (r->pos + n > r->shard_size) {
		shuffle_epoch(r);
	}
	for (int i = 0; i < m->ninputs; i++) {
		const struct data_array *a = &r->d->arrays[r->src[i]];
		size_t row = (size_t)a->per_example * 4;
		for (int k = 0; k < n; k++) {
			int64_t ex = r->single_pass ? r->pos + k : (int64_t)r->order[r->pos + k];
			memcpy((char *)bufs[i] + (size_t)k * row, (const char *)a->values + (size_t)ex * row, row);
		}
	}
	r->pos += n;
	*size = n;
	return DT_OK;
}

/* The training stream's position: arrays by (epoch, offset into this
 * epoch's order), a callback by (0, examples handed out). */
void dt__api_reader_position(const struct dt__api_reader *r, int64_t *epoch, int64_t *offset)
{
	if (r->d->kind == DATA_CALLBACK) {
		*epoch = 0;
		*offset = r->callback_examples;
	} else if (r->pos + r->batch > r->shard_size) {
		*epoch = r->epoch + 1;
		*offset = 0;
	} else {
		*epoch = r->epoch;
		*offset = r->pos;
	}
}

void dt__api_reader_seek(struct dt__api_reader *r, int64_t epoch, int64_t offset)
{
	if (r->d->kind == DATA_CALLBACK) {
		r->callback_examples = epoch * (r->d->examples_per_epoch / r->num_shards) + offset;
		return;
	}
	if (r->single_pass || (epoch == 0 && offset == 0))
		return;
	r->epoch = epoch - 1;
	shuffle_epoch(r); /* epoch `epoch`'s order */
	r->pos = offset;
}

int64_t dt__api_reader_shard_size(const struct dt__api_reader *r)
{
	if (r->d->kind == DATA_ARRAYS)
		return r->shard_size;
	/* A callback's epoch, if told; else a long one (positions are examples). */
	return r->d->examples_per_epoch > 0 ? r->d->examples_per_epoch / r->num_shards : (int64_t)1 << 40;
}

void dt__api_reader_free(struct dt__api_reader *r)
{
	if (!r)
		return;
	free(r->order);
	free(r);
}
