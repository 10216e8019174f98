/*
 * input.c — the engine input (train/input.h) over a public data source:
 * this shard of the data, shuffled per epoch, as nn/'s general batches
 * (data/pipeline.h's dt_batch `general`) for a compiled model.
 */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/alloc.h"
#include "nn/model.h"
#include "train/input.h"

/* The engine's batch, whose `general` points at the general batch beside it. */
struct api_batch {
	struct dt_batch b;
	struct dt_model_batch mb;
};

struct api_input {
	struct dt_input base;   /* first: the engine holds a struct dt_input * */
	dtrain_data *data;
	const dtrain_model *pm;
	const struct dt_model *model;
	const int *feeds;       /* public input of each model input */
	int target_feed;
	int batch;
	uint64_t seed;
	struct dt__api_reader *r;
	void *bufs[DT_API_MAX_INPUTS]; /* by public input, (batch, per_example) */
	struct api_batch cur;
};

static enum dt_status in_start(struct dt_input *in, int index, int count, int64_t epoch, int64_t offset,
			       struct dt_err *err)
{
	struct api_input *a = (struct api_input *)in;
	dt__api_reader_free(a->r);
	a->r = NULL;
	enum dt_status st = dt__api_reader_new(a->data, a->pm, index, count, a->batch, a->seed, 0, &a->r, err);
	if (st)
		return st;
	dt__api_reader_seek(a->r, epoch, offset);
	return DT_OK;
}

void dt__api_make_batch(struct dt_model_batch *mb, const struct dt_model *model, const int *feeds, int target_feed,
		       void *const *bufs, int size)
{
	memset(mb, 0, sizeof(*mb));
	mb->size = size;
	mb->num_inputs = dt_model_num_inputs(model);
	for (int i = 0; i < mb->num_inputs; i++) {
		mb->inputs[i].dtype = dt_model_input(model, i)->dtype;
		mb->inputs[i].data = bufs[feeds[i]];
	}
	mb->targets.dtype = dt_model_target(model)->dtype;
	mb->targets.data = bufs[target_feed];
}

static enum dt_status in_next(struct dt_input *in, const struct dt_batch **out, struct dt_err *err)
{
	struct api_input *a = (struct api_input *)in;
	int64_t epoch, offset;
	dt__api_reader_position(a->r, &epoch, &offset);
	int size = 0;
	enum dt_status st = dt__api_reader_next(a->r, 0, a->bufs, &size, err);
	if (st)
		return st;
	if (size < 1)
		return dt_err_set(err, DT_DATA, "the data gave an empty batch");
	dt__api_make_batch(&a->cur.mb, a->model, a->feeds, a->target_feed, a->bufs, size);
	a->cur.b = (struct dt_batch){ .size = size, .epoch = epoch, .general = &a->cur.mb };
	*out = &a->cur.b;
	return DT_OK;
}

static void in_position(const struct dt_input *in, int64_t *epoch, int64_t *offset)
{
	dt__api_reader_position(((const struct api_input *)in)->r, epoch, offset);
}

static int64_t in_shard_size(const struct dt_input *in)
{
	const struct api_input *a = (const struct api_input *)in;
	return a->r ? dt__api_reader_shard_size(a->r) : 0;
}

void dt__api_free_bufs(void **bufs)
{
	for (int i = 0; i < DT_API_MAX_INPUTS; i++) {
		free(bufs[i]);
		bufs[i] = NULL;
	}
}

static void in_free(struct dt_input *in)
{
	struct api_input *a = (struct api_input *)in;
	dt__api_reader_free(a->r);
	dt__api_free_bufs(a->bufs);
	free(a);
}

static const struct dt_input_ops api_input_ops = {
	.start = in_start, .next = in_next, .position = in_position, .shard_size = in_shard_size, .free = in_free,
};

enum dt_status dt__api_alloc_bufs(const dtrain_model *pm, int batch, void **bufs, struct dt_err *err)
{
	for (int i = 0; i < pm->ninputs; i++)
		if (dt_try_malloc(&bufs[i], (size_t)batch * (size_t)pm->inputs[i].per_example * 4, err)) {
			dt__api_free_bufs(bufs);
			return dt_err_prefix(err, "input '%s' for batches of %d", pm->inputs[i].name, batch);
		}
	return DT_OK;
}

enum dt_status dt__api_input_new(dtrain_data *data, const dtrain_model *pm, const struct dt_model *model,
				 const int *feeds, int target_feed, int batch, uint64_t seed, struct dt_input **out,
				 struct dt_err *err)
{
	*out = NULL;
	struct api_input *in = dt_xcalloc(1, sizeof(*in));
	in->base.ops = &api_input_ops;
	in->data = data;
	in->pm = pm;
	in->model = model;
	in->feeds = feeds;
	in->target_feed = target_feed;
	in->batch = batch;
	in->seed = seed;
	enum dt_status st = dt__api_alloc_bufs(pm, batch, in->bufs, err);
	if (st) {
		in_free(&in->base);
		return st;
	}
	*out = &in->base;
	return DT_OK;
}
