/*
 * input_text.c — the session's input for text problems (train/input.h):
 * t2t's token batches with length buckets.
 *
 * t2t's batching_scheme: bucket boundaries from min_length_bucket, each the
 * previous times length_bucket_step (at least + 1), below max_length; a
 * bucket of boundary b batches batch_size / b sequences (the last bucket
 * batch_size / max_length), each rounded down to a divisor of a highly
 * composite window size, so a batch holds fewer than batch_size tokens once
 * padded to its longest example. Training drops examples longer than
 * max_length (drop_long_sequences). An example's length is the longer of
 * its inputs and targets, EOS included; bucket i holds lengths in
 * [boundaries[i-1], boundaries[i]).
 *
 * The shard: examples i with i % count == index that fit; for examples read
 * from t2t's data files (data/text.h) with at least `count` files, the
 * examples of files f with f % count == index instead (by file, then by
 * record, as tf.data shards a list of files). The stream: the shard is
 * shuffled per epoch from (seed, epoch); examples go to their bucket in
 * that order and a full bucket is the next batch. Partial buckets are
 * dropped at the end of an epoch, so the position (epoch, examples of the
 * epoch's order consumed) says everything: `start` replays the epoch's
 * first `offset` examples into the buckets and the stream continues
 * exactly.
 */
#include "train/input_text.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "data/text.h"
#include "nn/model.h"

#define MAX_BUCKETS 128

struct text_input {
	struct dt_input base;
	const struct dt_text_set *t;
	uint64_t seed;
	struct dt_token_batching bt;
	int index, count;
	uint32_t *shard;              /* (shard_n) example ids of this shard that fit, in id order */
	uint32_t *order;              /* (shard_n) this epoch's order */
	int64_t shard_n;
	int64_t epoch, offset;
	uint32_t *bucket[MAX_BUCKETS]; /* (batch_sizes[i]) example ids */
	int fill[MAX_BUCKETS];
	int32_t *inputs, *targets;    /* (B, L) of the batch, PAD-filled */
	struct dt_model_batch mb;
	struct dt_batch batch;
};

/* t2t's highly composite window sizes (data_reader.py). */
static const int highly_composite[] = { 1,     2,     4,     6,      12,     24,     36,     48,     60,
					120,   180,   240,   360,    720,    840,    1260,   1680,   2520,
					5040,  7560,  10080, 15120,  20160,  25200,  27720,  45360,  50400,
					55440, 83160, 110880, 166320, 221760, 277200, 332640, 498960, 554400,
					665280, 720720 };

void dt_token_batching_init(struct dt_token_batching *s, int batch_size, int max_length, int min_length_bucket,
			    double length_bucket_step)
{
	memset(s, 0, sizeof(*s));
	s->batch_size = batch_size;
	s->max_length = max_length > 0 ? max_length : batch_size;
	int x = min_length_bucket;
	while (x < s->max_length && s->num_boundaries < DT_TOKEN_MAX_BUCKETS - 1) {
		s->boundaries[s->num_boundaries++] = x;
		int next = (int)(x * length_bucket_step);
		x = next > x + 1 ? next : x + 1;
	}
	int max_bs = 1;
	for (int i = 0; i <= s->num_boundaries; i++) {
		int len = i < s->num_boundaries ? s->boundaries[i] : s->max_length;
		s->batch_sizes[i] = batch_size / len > 1 ? batch_size / len : 1;
		if (s->batch_sizes[i] > max_bs)
			max_bs = s->batch_sizes[i];
	}
	int window = 1;
	for (size_t i = 0; i < DT_ARRAY_LEN(highly_composite); i++)
		if (highly_composite[i] <= 3 * max_bs)
			window = highly_composite[i];
	for (int i = 0; i <= s->num_boundaries; i++) {
		int d = s->batch_sizes[i];
		while (window % d)
			d--;
		s->batch_sizes[i] = d;
	}
	s->window_size = window;
}

int dt_token_batching_bucket(const struct dt_token_batching *s, int length)
{
	int i = 0;
	while (i < s->num_boundaries && length >= s->boundaries[i])
		i++;
	return i;
}

static void shuffle_epoch(struct text_input *d)
{
	memcpy(d->order, d->shard, (size_t)d->shard_n * sizeof(*d->order));
	struct dt_rng r;
	dt_rng_derive(&r, d->seed, "text_shuffle", (uint64_t)d->epoch);
	dt_rng_shuffle_u32(&r, d->order, (uint64_t)d->shard_n);
	memset(d->fill, 0, sizeof(d->fill));
}

/* Takes the epoch's next example into its bucket; returns the bucket when
 * that filled it (emptied again for the caller to read), else -1. */
static int take(struct text_input *d)
{
	const uint32_t id = d->order[d->offset++];
	const int b = dt_token_batching_bucket(&d->bt, dt_text_len(d->t, id));
	d->bucket[b][d->fill[b]++] = id;
	if (d->fill[b] < d->bt.batch_sizes[b])
		return -1;
	d->fill[b] = 0;
	return b;
}

static enum dt_status ti_start(struct dt_input *in, int index, int count, int64_t epoch, int64_t offset,
			       struct dt_err *err)
{
	struct text_input *d = (struct text_input *)in;
	d->index = index;
	d->count = count;
	d->shard_n = 0;
	const struct dt_text_set *t = d->t;
	if (t->num_files >= count && count > 1) {
		/* t2t's data files: whole files per worker (file f to shard f % count), as
		 * tf.data's shard on a list of files */
		for (int f = index; f < t->num_files; f += count)
			for (int64_t i = t->file_off[f]; i < t->file_off[f + 1]; i++)
				if (dt_text_len(t, i) <= d->bt.max_length)
					d->shard[d->shard_n++] = (uint32_t)i;
		dt_info("input: shard %d of %d by file: %d of %d data files, %lld examples", index, count,
			(t->num_files - index + count - 1) / count, t->num_files, (long long)d->shard_n);
	} else {
		for (int64_t i = index; i < t->count; i += count)
			if (dt_text_len(t, i) <= d->bt.max_length)
				d->shard[d->shard_n++] = (uint32_t)i;
		if (t->num_files && count > 1)
			dt_info("input: shard %d of %d by record (%d data file(s), fewer than the shards): %lld examples",
				index, count, t->num_files, (long long)d->shard_n);
	}
	if (d->shard_n == 0)
		return dt_err_set(err, DT_DATA,
				  "shard %d of %d holds no example of at most max_length %d tokens (of %lld examples)",
				  index, count, d->bt.max_length, (long long)d->t->count);
	if (offset < 0 || offset > d->shard_n)
		return dt_err_set(err, DT_DATA, "cannot resume at example %lld of an epoch of %lld in shard %d of %d",
				  (long long)offset, (long long)d->shard_n, index, count);
	d->epoch = epoch;
	d->offset = 0;
	shuffle_epoch(d);
	while (d->offset < offset)
		take(d);
	return DT_OK;
}

/* The batch of bucket b, padded to its longest example. */
static void assemble(struct text_input *d, int b)
{
	const int B = d->bt.batch_sizes[b];
	int L = 1;
	for (int i = 0; i < B; i++)
		if (dt_text_len(d->t, d->bucket[b][i]) > L)
			L = dt_text_len(d->t, d->bucket[b][i]);
	memset(d->inputs, 0, (size_t)B * (size_t)L * sizeof(*d->inputs));
	memset(d->targets, 0, (size_t)B * (size_t)L * sizeof(*d->targets));
	for (int i = 0; i < B; i++) {
		const uint32_t id = d->bucket[b][i];
		if (d->t->has_inputs)
			memcpy(d->inputs + (size_t)i * L, d->t->in_tok + d->t->in_off[id],
			       (size_t)dt_text_in_len(d->t, id) * sizeof(int32_t));
		memcpy(d->targets + (size_t)i * L, d->t->tg_tok + d->t->tg_off[id],
		       (size_t)dt_text_tg_len(d->t, id) * sizeof(int32_t));
	}
	dt_text_batch_set(&d->mb, d->t->has_inputs, B, L, d->inputs, d->targets);
	d->mb.bleu = d->t->text2text;
	d->batch = (struct dt_batch){ .size = B, .epoch = d->epoch, .general = &d->mb };
}

static enum dt_status ti_next(struct dt_input *in, const struct dt_batch **out, struct dt_err *err)
{
	struct text_input *d = (struct text_input *)in;
	int64_t seen = 0;
	for (;;) {
		if (d->offset == d->shard_n) {
			d->epoch++;
			d->offset = 0;
			shuffle_epoch(d);
		}
		const int b = take(d);
		if (b >= 0) {
			assemble(d, b);
			*out = &d->batch;
			return DT_OK;
		}
		if (++seen > d->shard_n) /* a whole epoch without a full bucket */
			return dt_err_set(err, DT_DATA,
					  "shard %d of %d (%lld examples) never fills a bucket of the token batch %d: "
					  "lower --hparams=batch_size or use fewer workers",
					  d->index, d->count, (long long)d->shard_n, d->bt.batch_size);
	}
}

static void ti_position(const struct dt_input *in, int64_t *epoch, int64_t *offset)
{
	const struct text_input *d = (const struct text_input *)in;
	*epoch = d->epoch;
	*offset = d->offset;
}

static int64_t ti_shard_size(const struct dt_input *in) { return ((const struct text_input *)in)->shard_n; }

static enum dt_status ti_start_at_batch(struct dt_input *in, int index, int count, int64_t batches,
					struct dt_err *err)
{
	enum dt_status st = ti_start(in, index, count, 0, 0, err);
	const struct dt_batch *b;
	for (int64_t i = 0; i < batches && !st; i++)
		st = ti_next(in, &b, err);
	return st;
}

static void ti_free(struct dt_input *in)
{
	struct text_input *d = (struct text_input *)in;
	for (int i = 0; i < MAX_BUCKETS; i++)
		free(d->bucket[i]);
	free(d->shard);
	free(d->order);
	free(d->inputs);
	free(d->targets);
	free(d);
}

static const struct dt_input_ops text_ops = {
	.start = ti_start, .next = ti_next, .position = ti_position, .shard_size = ti_shard_size,
	.start_at_batch = ti_start_at_batch, .free = ti_free,
};

struct dt_input *dt_input_text_new(const struct dt_text_set *t, const struct dt_hparams *hp, uint64_t seed)
{
	_Static_assert(MAX_BUCKETS == DT_TOKEN_MAX_BUCKETS, "one bucket array per bucket");
	struct text_input *d = dt_xcalloc(1, sizeof(*d));
	d->base.ops = &text_ops;
	d->t = t;
	d->seed = seed;
	dt_token_batching_init(&d->bt, hp->batch_size, hp->max_length, hp->min_length_bucket, hp->length_bucket_step);
	for (int i = 0; i <= d->bt.num_boundaries; i++)
		d->bucket[i] = dt_xmallocarray((size_t)d->bt.batch_sizes[i], sizeof(uint32_t));
	d->shard = dt_xmallocarray((size_t)t->count + 1, sizeof(uint32_t));
	d->order = dt_xmallocarray((size_t)t->count + 1, sizeof(uint32_t));
	const size_t tokens = (size_t)dt_text_max_tokens(hp);
	d->inputs = dt_xmallocarray(tokens, sizeof(int32_t));
	d->targets = dt_xmallocarray(tokens, sizeof(int32_t));
	return &d->base;
}

int dt_text_max_tokens(const struct dt_hparams *hp)
{
	const int L = hp->max_length > 0 ? hp->max_length : hp->batch_size;
	return hp->batch_size > L ? hp->batch_size : L;
}

void dt_text_batch_set(struct dt_model_batch *mb, int has_inputs, int B, int L, const int32_t *inputs,
		       const int32_t *targets)
{
	memset(mb, 0, sizeof(*mb));
	mb->size = B;
	mb->length = L;
	mb->num_inputs = has_inputs ? 2 : 1;
	int k = 0;
	if (has_inputs)
		mb->inputs[k++] = (struct dt_data){ DT_INT32, inputs };
	mb->inputs[k] = (struct dt_data){ DT_INT32, targets };
	mb->targets = (struct dt_data){ DT_INT32, targets };
}
