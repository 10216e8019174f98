/*
 * input.h — where a training session takes its batches from.
 *
 * The session (train/session.h) reads training data only through this small
 * interface, so that the built-in problems and, later, a user's batch
 * callback plug in the same way. An input serves one shard of the data
 * (shard `index` of `count`, told by the session once it knows its place in
 * the cluster) from a resume position (epoch, offset into the epoch), and
 * reports the position of its next batch so that a checkpoint can continue
 * the stream exactly.
 *
 * Lifecycle: the session calls `start` before the first `next` (and again
 * whenever it has to reposition: a resume, a recovery); `next` returns a batch
 * valid until the next call; `free` releases everything the input owns.
 * Every call comes from the session's thread.
 *
 * The built-in implementation, dt_input_dataset_new, is today's pipeline
 * (data/pipeline.h) over a loaded dataset: sharded, shuffled per epoch with
 * the seed, prefetched on a background thread when asked.
 */
#ifndef DT_TRAIN_INPUT_H
#define DT_TRAIN_INPUT_H

#include <stdint.h>

#include "base/err.h"
#include "data/pipeline.h"
#include "data/problem.h"

struct dt_input;

struct dt_input_ops {
	/* Positions the input at (epoch, offset) of shard `index` of `count`. */
	enum dt_status (*start)(struct dt_input *in, int index, int count, int64_t epoch, int64_t offset,
				struct dt_err *err);
	/* (optional) Positions the input at (epoch, offset) of the whole data,
	 * read in global batches of batch size x `count`, of which `next`
	 * returns slice `index` (data/pipeline.h's slices; --deterministic:
	 * the examples of a step are the same however many tasks share it).
	 * position then reports the global batch's position, the same on
	 * every task. NULL: the input cannot do that. */
	enum dt_status (*start_slice)(struct dt_input *in, int index, int count, int64_t epoch, int64_t offset,
				      struct dt_err *err);
	/* (optional) Positions the input at (epoch, taken) of trainer `index`
	 * of layout `l` (data/units.h: asynchronous ps trainers; copied);
	 * position then reports (epoch, taken). NULL: the input cannot. */
	enum dt_status (*start_units)(struct dt_input *in, const struct dt_units_layout *l, int index, int64_t epoch,
				      int64_t taken, struct dt_err *err);
	/* (with start_units) Units per epoch: whole batches in the whole data. */
	int64_t (*units_per_epoch)(const struct dt_input *in);
	/* The next batch of the shard (*out valid until the next call). */
	enum dt_status (*next)(struct dt_input *in, const struct dt_batch **out, struct dt_err *err);
	/* The position of the batch `next` would return. */
	void (*position)(const struct dt_input *in, int64_t *epoch, int64_t *offset);
	/* Examples per epoch of the shard (whole batches are read from it). */
	int64_t (*shard_size)(const struct dt_input *in);
	/* Optional: positions the input `batches` batches into shard `index`
	 * of `count` from (0, 0), for inputs whose batches are not a fixed
	 * number of examples (token batches); NULL: derived from batch_size. */
	enum dt_status (*start_at_batch)(struct dt_input *in, int index, int count, int64_t batches,
					 struct dt_err *err);
	void (*free)(struct dt_input *in);
};

/* Implementations embed this first and fill `ops`. */
struct dt_input {
	const struct dt_input_ops *ops;
};

/* The built-in input: batches of `batch_size` from `data` (borrowed; must
 * outlive the input), shuffled per epoch from `seed`, prefetched when
 * `prefetch` is set. *out: dt_input_free. */
struct dt_input *dt_input_dataset_new(const struct dt_dataset *data, int batch_size, uint64_t seed, int prefetch);

/* The convenience wrappers the session uses; dt_input_free accepts NULL. */
static inline enum dt_status dt_input_start(struct dt_input *in, int index, int count, int64_t epoch, int64_t offset,
					    struct dt_err *err)
{
	return in->ops->start(in, index, count, epoch, offset, err);
}
static inline enum dt_status dt_input_next(struct dt_input *in, const struct dt_batch **out, struct dt_err *err)
{
	return in->ops->next(in, out, err);
}
static inline void dt_input_position(const struct dt_input *in, int64_t *epoch, int64_t *offset)
{
	in->ops->position(in, epoch, offset);
}
static inline int64_t dt_input_shard_size(const struct dt_input *in) { return in->ops->shard_size(in); }
void dt_input_free(struct dt_input *in);

/* Positions `in` `batches` whole batches into its shard (of `count`): the
 * position of synchronous step `batches`, where every step reads exactly one
 * batch per shard and positions are derived, not saved. */
enum dt_status dt_input_start_at_batch(struct dt_input *in, int index, int count, int batch_size, int64_t batches,
				       struct dt_err *err) DT_MUST_CHECK;

#endif
