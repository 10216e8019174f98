/*
 * ps_units.h — asynchronous ps training's data positions in its checkpoints:
 * what lets an asynchronous checkpoint written by N trainers resume on M
 * with each example read once per epoch (DISTRIBUTED.md, "Resume at another
 * worker count"; data/units.h has the layout, distribute/ps_positions.h the
 * wire).
 *
 * Every trainer reads units of one layout. At start it takes the layout of
 * the newest checkpoint of the output dir: the same trainer count goes on
 * with that layout, trainer j from its saved position; another count makes
 * the next layout from every saved position (dt_units_merge) and starts it.
 * No checkpoint, or one without units: a fresh layout. Each round's PS_STEP
 * carries the trainer's position; the chief's checkpoints save the layout
 * and the positions ps:0 holds (a trainer that has not reported since the
 * layout started keeps the one it was started from).
 *
 * The checkpoint metadata (CHECKPOINTS.md): pipeline_position = "units"
 * (not written by this code: the layout keys say it), pipeline_units
 * "M:UNITS:FIRST", pipeline_units_base "E:HEX;...", pipeline_units_at "E:T,...".
 */
#ifndef DT_TRAIN_PS_UNITS_H
#define DT_TRAIN_PS_UNITS_H

#include <stdint.h>

#include "base/err.h"
#include "data/units.h"
#include "net/conn.h"
#include "train/checkpoint.h"

struct dt_ps_units {
	struct dt_units_layout layout;
	struct dt_units_pos *from;         /* (layout.trainers): each one's latest known position (where it
					      started, until a checkpoint reads it from ps:0) */
	int index;                         /* this trainer */
	char *text[3];                     /* the metadata values of the last dt_ps_units_meta (owned) */
	struct dt_ckpt_kv kv[3];
};

/* The layout for trainer `index` of `trainers` over `nu` units an epoch,
 * from the newest checkpoint of `dir` (NULL or empty: none), and this
 * trainer's start (*epoch, *taken). A checkpoint with units of another
 * dataset or batch (not nu units an epoch) is DT_CKPT. */
enum dt_status dt_ps_units_start(struct dt_ps_units *u, const char *dir, int64_t nu, int trainers, int index,
				 int64_t *epoch, int64_t *taken, struct dt_err *err) DT_MUST_CHECK;
void dt_ps_units_release(struct dt_ps_units *u);

/* ps:0's table of positions over c0 into u->kv (the checkpoint's three keys). */
enum dt_status dt_ps_units_meta(struct dt_ps_units *u, struct dt_conn *c0, int64_t deadline,
				struct dt_err *err) DT_MUST_CHECK;

/* The chief at the end: waits (until `deadline`, turning c0's loop) until
 * every trainer has reported a position at a global step >= `step` (its
 * last round), so that the final checkpoint holds where each one stopped;
 * returns how many had not (a trainer that died, or never started). */
int dt_ps_units_wait_final(struct dt_ps_units *u, struct dt_conn *c0, int64_t step, int64_t deadline);

#endif
