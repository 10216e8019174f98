#include "train/input.h"

#include <stdlib.h>

#include "base/alloc.h"

/* The pipeline over a dataset; built by `start`, rebuilt by every later one. */
struct dataset_input {
	struct dt_input base;
	struct dt_pipeline_config pc;
	struct dt_pipeline *pipe;
};

static enum dt_status ds_start(struct dt_input *in, int index, int count, int64_t epoch, int64_t offset,
			       struct dt_err *err)
{
	struct dataset_input *d = (struct dataset_input *)in;
	dt_pipeline_free(d->pipe);
	d->pipe = NULL;
	d->pc.shard_index = index;
	d->pc.shard_count = count;
	d->pc.slice_index = 0;
	d->pc.slice_count = 0;
	d->pc.start_epoch = epoch;
	d->pc.start_offset = offset;
	return dt_pipeline_new(&d->pc, &d->pipe, err);
}

static enum dt_status ds_start_slice(struct dt_input *in, int index, int count, int64_t epoch, int64_t offset,
				     struct dt_err *err)
{
	struct dataset_input *d = (struct dataset_input *)in;
	dt_pipeline_free(d->pipe);
	d->pipe = NULL;
	d->pc.shard_index = 0;
	d->pc.shard_count = 1;
	d->pc.slice_index = index;
	d->pc.slice_count = count;
	d->pc.start_epoch = epoch;
	d->pc.start_offset = offset;
	return dt_pipeline_new(&d->pc, &d->pipe, err);
}

static enum dt_status ds_start_units(struct dt_input *in, const struct dt_units_layout *l, int index, int64_t epoch,
				     int64_t taken, struct dt_err *err)
{
	struct dataset_input *d = (struct dataset_input *)in;
	dt_pipeline_free(d->pipe);
	d->pipe = NULL;
	d->pc.shard_index = 0;
	d->pc.shard_count = 1;
	d->pc.slice_index = 0;
	d->pc.slice_count = 0;
	d->pc.units = l;
	d->pc.unit_index = index;
	d->pc.start_epoch = epoch;
	d->pc.start_offset = taken;
	enum dt_status st = dt_pipeline_new(&d->pc, &d->pipe, err);
	d->pc.units = NULL; /* the pipeline copied it; a later start is not units unless it says so */
	return st;
}

static int64_t ds_units_per_epoch(const struct dt_input *in)
{
	const struct dataset_input *d = (const struct dataset_input *)in;
	return d->pc.batch_size > 0 ? (int64_t)d->pc.data->count / d->pc.batch_size : 0;
}

static enum dt_status ds_next(struct dt_input *in, const struct dt_batch **out, struct dt_err *err)
{
	struct dataset_input *d = (struct dataset_input *)in;
	DT_ASSERT(d->pipe); /* the session starts its input first */
	(void)err;
	*out = dt_pipeline_next(d->pipe);
	return DT_OK;
}

static void ds_position(const struct dt_input *in, int64_t *epoch, int64_t *offset)
{
	const struct dataset_input *d = (const struct dataset_input *)in;
	dt_pipeline_position(d->pipe, epoch, offset);
}

static int64_t ds_shard_size(const struct dt_input *in)
{
	const struct dataset_input *d = (const struct dataset_input *)in;
	return d->pipe ? dt_pipeline_shard_size(d->pipe) : 0;
}

static void ds_free(struct dt_input *in)
{
	struct dataset_input *d = (struct dataset_input *)in;
	dt_pipeline_free(d->pipe);
	free(d);
}

static const struct dt_input_ops dataset_ops = {
	.start = ds_start, .start_slice = ds_start_slice, .start_units = ds_start_units,
	.units_per_epoch = ds_units_per_epoch, .next = ds_next, .position = ds_position, .shard_size = ds_shard_size, .free = ds_free,
};

struct dt_input *dt_input_dataset_new(const struct dt_dataset *data, int batch_size, uint64_t seed, int prefetch)
{
	struct dataset_input *d = dt_xcalloc(1, sizeof(*d));
	d->base.ops = &dataset_ops;
	d->pc = (struct dt_pipeline_config){
		.data = data, .batch_size = batch_size, .seed = seed, .shard_count = 1, .prefetch = prefetch,
	};
	return &d->base;
}

void dt_input_free(struct dt_input *in)
{
	if (in)
		in->ops->free(in);
}

enum dt_status dt_input_start_at_batch(struct dt_input *in, int index, int count, int batch_size, int64_t batches,
				       struct dt_err *err)
{
	if (in->ops->start_at_batch)
		return in->ops->start_at_batch(in, index, count, batches, err);
	/* The shard's size is known once the input has a shard: start at 0 first. */
	enum dt_status st = dt_input_start(in, index, count, 0, 0, err);
	int64_t epoch, offset;
	dt_pipeline_batch_position(dt_input_shard_size(in), batch_size, batches, &epoch, &offset);
	if (st || (epoch == 0 && offset == 0))
		return st;
	return dt_input_start(in, index, count, epoch, offset, err);
}
