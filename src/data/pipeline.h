/*
 * pipeline.h — the input pipeline: shard, shuffle per epoch, batch, prefetch.
 *
 * Training mode (single_pass = 0): the pipeline cycles through epochs
 * forever. This worker's shard is every example i with
 * i % shard_count == shard_index; each epoch the shard is shuffled with a
 * generator derived from (seed, epoch), so a run with the same seed sees the
 * same order, and a run can resume at (epoch, offset) later. Incomplete final
 * batches of an epoch are dropped (every step has batch_size examples).
 *
 * Slices (training mode, slice_count > 1): the stream is read in global
 * batches of batch_size * slice_count consecutive examples of the shard's
 * order, and this pipeline returns slice `slice_index` of each: examples
 * [slice_index * batch_size, (slice_index + 1) * batch_size) of the global
 * batch. Its position is the global batch's, the same for every slice, so
 * slice_count pipelines over shard 0 of 1 read exactly the batches one
 * pipeline of batch_size * slice_count would (--deterministic: the examples
 * of a step do not depend on how many workers share it). An epoch ends when
 * less than a global batch is left.
 *
 * Units (training mode, `units` set: asynchronous ps trainers): the whole
 * dataset's order (shard 0 of 1) cut into units of batch_size examples and
 * dealt as data/units.h's layout says; this pipeline is trainer `unit_index`
 * and its position is (epoch, units of its share taken), start_epoch and
 * start_offset likewise.
 *
 * Evaluation mode (single_pass = 1): the shard is read once, in order, no
 * shuffle, the last batch may be short, then dt_pipeline_next returns NULL.
 *
 * With prefetch on, a background thread prepares the next batch (converting
 * uint8 pixels to normalized floats) while the caller trains on the current
 * one; the results are identical with and without it.
 */
#ifndef DT_DATA_PIPELINE_H
#define DT_DATA_PIPELINE_H

#include <stdint.h>
#include "base/err.h"
#include "data/problem.h"
#include "data/units.h"

struct dt_pipeline_config {
	const struct dt_dataset *data; /* borrowed; must outlive the pipeline */
	int batch_size;
	uint64_t seed;
	int shard_index, shard_count;  /* 0, 1 for a single worker */
	int slice_index, slice_count;  /* training: this slice of each global batch; 0, 0 (or 0, 1): none */
	const struct dt_units_layout *units; /* training: units (copied); NULL: none */
	int unit_index;                /* this trainer of units->trainers */
	int single_pass;               /* evaluation mode */
	int prefetch;                  /* use a background thread */
	int64_t start_epoch;           /* resume position (0, 0 at the start) */
	int64_t start_offset;          /* examples into start_epoch's shard order */
};

struct dt_model_batch;

struct dt_batch {
	int size;          /* examples in this batch */
	const float *x;    /* (size, H, W, C), normalized */
	const uint8_t *y;  /* (size) */
	int64_t epoch;     /* epoch the batch came from */
	/* Any model's batch (nn/model.h: several named inputs, int32 or float
	 * targets), from inputs other than a dataset's (a user's data, token
	 * batches); x and y are then unused. NULL: x and y, as a pipeline's. */
	const struct dt_model_batch *general;
};

struct dt_pipeline;

enum dt_status dt_pipeline_new(const struct dt_pipeline_config *cfg, struct dt_pipeline **out,
			       struct dt_err *err) DT_MUST_CHECK;
/* The next batch, valid until the next call; NULL at the end of a single pass. */
const struct dt_batch *dt_pipeline_next(struct dt_pipeline *p);
/* Position of the next batch to be returned: (epoch, offset into the epoch). */
void dt_pipeline_position(const struct dt_pipeline *p, int64_t *epoch, int64_t *offset);
/* The position `batches` whole batches of `batch_size` into a shard of
 * `shard_size` examples (an epoch reads its whole batches only): the start
 * of a synchronous step, which reads one batch per shard. shard_size 0 or
 * batches 0: (0, 0). */
void dt_pipeline_batch_position(int64_t shard_size, int batch_size, int64_t batches, int64_t *epoch,
				int64_t *offset);
/* Examples per epoch in this shard (after sharding). */
int64_t dt_pipeline_shard_size(const struct dt_pipeline *p);
void dt_pipeline_free(struct dt_pipeline *p);

#endif
