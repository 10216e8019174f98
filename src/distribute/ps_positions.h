/*
 * ps_positions.h — where each asynchronous trainer is in its data, kept by
 * ps:0 for the chief's checkpoints, so that an asynchronous checkpoint
 * resumes at another trainer count (docs/DISTRIBUTED.md, data/units.h).
 *
 * Each trainer's PS_STEP (ps:0, every step) carries its position after the
 * batch whose gradient the same round pushed; ps:0 keeps the latest of each
 * trainer with the global step that PS_STEP made; the chief reads the table
 * with PS_POSITIONS when it saves. The messages (numbers in net/messages.h;
 * docs/PROTOCOL.md §3.6.4 has the same table), little-endian:
 *
 *   PS_STEP      request  u64 increment, u64 last step (0: none), then a
 *                         position block of 32 bytes: u32 block version (1),
 *                         u32 trainer index, u32 trainers, u32 zero, u64
 *                         epoch, u64 units taken (48 bytes in all; the 8 and
 *                         16 bytes of before still mean what they did)
 *   PS_POSITIONS request  empty (ps:0 only)
 *                reply    u32 trainers M (0: none reported since the ps
 *                         started), u32 zero, then M records of 24 bytes:
 *                         i64 epoch (-1: not reported), u64 units taken,
 *                         u64 the global step after the PS_STEP that carried it
 *
 * A block from another trainer count than the table's (a resized run on a
 * ps that lived through it) starts a new table. The decoders treat their
 * input as hostile (tests/fuzz/fuzz_ps_payloads.c runs them).
 */
#ifndef DT_DIST_PS_POSITIONS_H
#define DT_DIST_PS_POSITIONS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/conn.h"

#define DT_PS_POSITION_BLOCK 32u
#define DT_PS_POSITION_VERSION 1u
#define DT_PS_STEP_WITH_POSITION 48u
#define DT_PS_POSITIONS_HEADER 8u
#define DT_PS_POSITIONS_RECORD 24u
#define DT_PS_POSITIONS_MAX_TRAINERS 65536u
#define DT_PS_POSITIONS_MAX_VALUE ((int64_t)1 << 62)

struct dt_ps_position {
	int64_t epoch;           /* -1: not reported */
	int64_t taken, step;
};

/* A table (ps:0's, or a decoded reply); at is owned. */
struct dt_ps_positions {
	int trainers;            /* 0: none */
	struct dt_ps_position *at; /* (trainers) */
};

void dt_ps_position_block_encode(int trainer, int trainers, int64_t epoch, int64_t taken,
				 uint8_t out[DT_PS_POSITION_BLOCK]);
/* Decodes a block (exactly DT_PS_POSITION_BLOCK bytes) into the table,
 * with the global step it came with. */
enum dt_status dt_ps_positions_note(struct dt_ps_positions *t, const uint8_t *p, size_t len, int64_t step,
				    struct dt_err *err) DT_MUST_CHECK;
/* The reply to PS_POSITIONS, heap (the caller frees), *len bytes. */
uint8_t *dt_ps_positions_encode(const struct dt_ps_positions *t, size_t *len);
enum dt_status dt_ps_positions_decode(const uint8_t *p, size_t len, struct dt_ps_positions *out,
				      struct dt_err *err) DT_MUST_CHECK;
void dt_ps_positions_release(struct dt_ps_positions *t);

/* PS_POSITIONS to ps:0 over `c` (a blocking call, not from a loop callback). */
enum dt_status dt_ps_positions_get(struct dt_conn *c, struct dt_ps_positions *out, int64_t deadline,
				   struct dt_err *err) DT_MUST_CHECK;

#endif
