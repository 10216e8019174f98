/*
 * ps_snapshot.h — reading and setting a parameter server's whole state, for
 * the chief's checkpoints and for restoring a ps that came back empty.
 *
 * The messages (numbers in net/messages.h, numbered down from the top of the
 * ps range; docs/PROTOCOL.md §3.7 has the same table). All integers
 * little-endian, floats IEEE-754 binary32 little-endian:
 *
 *   PS_SNAPSHOT request  u64 offset, u64 count: one shard (a range, as PS_PULL)
 *               reply    a snapshot (below) of that shard
 *   PS_RESTORE  request  a snapshot: sets the shard's values, optimizer slots
 *                        and update count, and marks the shard initialized
 *               reply    empty
 *   PS_SET_STEP request  u64 global step (< 2^63; ps 0 only)
 *               reply    empty
 *
 * A snapshot, byte by byte:
 *   1. [0, 8)    u64 offset of the shard in the flat parameter buffer
 *   2. [8, 16)   u64 count, elements of the shard
 *   3. [16, 24)  u64 updates: pushes applied to the shard (< 2^63; Adam's
 *                bias-correction step t)
 *   4. [24, 28)  u32 num_slots: optimizer slots per element, 0..2 (sgd 0,
 *                momentum and adagrad 1, adam 2: m then v)
 *   5. [28, 32)  u32 zero
 *   6. [32, ...) count f32 values, then num_slots blocks of count f32, slot 0
 *                first; nothing after them
 *
 * The ps takes a snapshot by copying the shard into the reply before it
 * handles anything else (it is single-threaded), so each shard's snapshot is
 * one consistent state; different shards (and the global step, read by
 * PS_STATUS) are taken at slightly different moments, which asynchronous
 * training tolerates as it tolerates stale pulls. A restore must carry exactly
 * the ps's num_slots (the trainers and the ps share the hparams).
 */
#ifndef DT_DIST_PS_SNAPSHOT_H
#define DT_DIST_PS_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "distribute/placement.h"
#include "distribute/ps_wire.h"
#include "net/conn.h"
#include "nn/optimizer.h"

#define DT_PS_SNAPSHOT_HEADER 32u
#define DT_PS_SNAPSHOT_MAX_SLOTS 2u

/* A decoded snapshot; the pointers point into the payload, which need not be
 * aligned: read them with memcpy (dt_ps_snapshot_apply does). */
struct dt_ps_snapshot {
	struct dt_ps_range range;
	int64_t updates;
	uint32_t num_slots;
	const uint8_t *values;   /* (count) f32 */
	const uint8_t *slots;    /* (num_slots, count) f32 */
};

/* Bytes of a snapshot of `count` elements with `num_slots` slots; 0 when
 * that overflows a size_t. */
size_t dt_ps_snapshot_bytes(uint64_t count, uint32_t num_slots);
void dt_ps_snapshot_encode_header(uint64_t offset, uint64_t count, int64_t updates, uint32_t num_slots,
				  uint8_t out[DT_PS_SNAPSHOT_HEADER]);
/* Checks every field and that `len` is exactly the header and the floats. */
enum dt_status dt_ps_snapshot_decode(const uint8_t *p, size_t len, struct dt_ps_snapshot *out,
				     struct dt_err *err) DT_MUST_CHECK;
/* PS_SET_STEP's payload: one u64 < 2^63. */
enum dt_status dt_ps_set_step_decode(const uint8_t *p, size_t len, int64_t *step, struct dt_err *err) DT_MUST_CHECK;

/* ---- the ps side (distribute/ps_server.c) ---- */

/* Copies shard [offset, offset + count) of params and of opt's slots (both
 * over the whole flat buffer) into a new snapshot payload and sends it as
 * the reply to `request_id`; the copy is freed once sent. */
enum dt_status dt_ps_snapshot_reply(struct dt_conn *c, uint64_t request_id, const float *params,
				    const struct dt_optimizer *opt, uint64_t offset, uint64_t count, int64_t updates,
				    struct dt_err *err) DT_MUST_CHECK;
/* Writes a decoded snapshot into params and opt's slots; DT_CONFIG when its
 * num_slots differs from opt's or the range is outside them. */
enum dt_status dt_ps_snapshot_apply(const struct dt_ps_snapshot *m, float *params, struct dt_optimizer *opt,
				    struct dt_err *err) DT_MUST_CHECK;

/* ---- the trainer side: one shard per call, over an idle connection ---- */

/* The model's state as a checkpoint holds it: flat buffers over every
 * element. Shards are read into and written from their ranges. */
struct dt_ps_state_bufs {
	float *params;           /* (num_params) */
	float *slots;            /* (num_slots, num_params), NULL when num_slots is 0 */
	uint32_t num_slots;
	size_t num_params;
};

/* PS_SNAPSHOT of shard `sh` into `b`; *updates gets the shard's update count. */
enum dt_status dt_ps_snapshot_pull(struct dt_conn *c, const struct dt_shard *sh, struct dt_ps_state_bufs *b,
				   int64_t *updates, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
/* PS_RESTORE of shard `sh` from `b` with `updates`. */
enum dt_status dt_ps_snapshot_push(struct dt_conn *c, const struct dt_shard *sh, const struct dt_ps_state_bufs *b,
				   int64_t updates, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
/* PS_SET_STEP on ps 0. */
enum dt_status dt_ps_set_step(struct dt_conn *c, int64_t step, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

#endif
