/*
 * ps_wire.h — what the parameter-server messages carry, and who may talk.
 *
 * The message numbers live in net/messages.h (16..21); the payloads, byte by
 * byte (all integers little-endian, floats IEEE-754 binary32 little-endian;
 * docs/PROTOCOL.md §3.6 has the same table):
 *
 *   PS_STATUS request   empty
 *             reply     u32 flags (bit 0 initialized, bit 1 run ended), u32 zero, u64 global step
 *   PS_INIT   request   u64 offset, u64 count, then count f32: the initial values of one shard
 *             reply     empty
 *   PS_PULL   request   u64 offset, u64 count: one shard
 *             reply     count f32
 *   PS_PUSH   request   u64 offset, u64 count, f32 learning rate, u32 zero, then count f32 gradients
 *             reply     empty (sent after the update is applied)
 *   PS_STEP   request   u64 increment (ps 0 only)
 *             reply     u64 global step after the increment
 *   PS_END    request   empty (the chief only): the run is over
 *             reply     empty, then the ps closes every connection in order and exits
 *
 * A range (offset, count) must be exactly one shard of dist/placement.h's map
 * held by the receiving ps; anything else is refused with an ERROR reply.
 * A push is applied only after its whole payload has arrived (the connection
 * layer delivers complete frames only), so a worker that dies mid-push leaves
 * no half-applied update.
 */
#ifndef DT_DIST_PS_WIRE_H
#define DT_DIST_PS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "net/messages.h"
#include "nn/model.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "parameter payloads are sent as host floats: a big-endian host needs byte swaps here");

#define DT_PS_RANGE_BYTES 16u     /* offset, count */
#define DT_PS_PUSH_HEADER 24u     /* offset, count, lr, zero */
#define DT_PS_STATUS_BYTES 16u
#define DT_PS_STATUS_INITIALIZED 0x1u
#define DT_PS_STATUS_ENDED 0x2u

/* A 64-bit fingerprint of the training cluster: every job but the evaluator,
 * with its addresses in order (FNV-1a). Tasks started from different cluster
 * specs get different fingerprints and the handshake refuses them. */
uint64_t dt_ps_cluster_fingerprint(const struct dt_cluster *cl);

/* Appends the model's variables (name, float32, shape) to `sig`. */
enum dt_status dt_ps_signature_add_vars(struct dt_signature *sig, const struct dt_variable *vars, int n,
					struct dt_err *err) DT_MUST_CHECK;

/* "ps", "worker", "chief", "master": the role a task announces in its hello. */
const char *dt_ps_role_name(enum dt_job job);

#endif
