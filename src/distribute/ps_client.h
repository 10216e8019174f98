/*
 * ps_client.h — a trainer's connections to every parameter server.
 *
 * The client connects to all ps tasks (with backoff until a deadline), then
 * moves the model's flat buffers to and from them shard by shard, as
 * distribute/placement.h maps it. Every shard is its own request, and all of a
 * round's requests are in flight at once on all servers, so pulls and pushes
 * to different servers proceed in parallel. Nothing is copied: pushes are
 * written straight from the gradient buffer (dt_conn_sendv_ref) and pull
 * replies are received straight into the parameter buffer (reply_buf; under a
 * cluster secret copied there once their tag verified, net/conn.h).
 *
 * One round (dt_ps_client_round) does, on each connection in this order,
 * push → step → pull: the server handles a connection's frames in order, so
 * the pull sees this worker's own push applied; one round trip per step.
 *
 * A synchronous round (dt_ps_client_sync_round, distribute/ps_sync.h) is the same
 * shape: PS_SYNC_PUSH of every shard tagged with the trainer's step, then
 * PS_SYNC_PULL of every shard, which each ps holds at its barrier until the
 * step is applied; pull replies land in a staging buffer per shard (they
 * carry the step in a header) and are copied into the params buffer.
 *
 * The params/grads buffers are borrowed; they must not be touched while a
 * call runs. Every call takes a deadline; a ps that does not answer by it is
 * DT_TIMEOUT naming "ps:1 at host:port", a dead one DT_PEER.
 *
 * Single-threaded: every call runs `loop` until it is done, which also keeps
 * the connections' heartbeats flowing.
 */
#ifndef DT_DIST_PS_CLIENT_H
#define DT_DIST_PS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/retry.h"
#include "distribute/placement.h"
#include "distribute/ps_wire.h"
#include "net/conn.h"
#include "net/loop.h"
#include "net/messages.h"

struct dt_ps_client;

struct dt_ps_client_config {
	const char *const *ps_addrs;  /* (num_ps) "host:port" */
	const struct dt_hello *local; /* borrowed, outlives the client */
	const struct dt_placement *placement; /* borrowed */
	float *params;                /* (num_params) borrowed */
	float *grads;                 /* (num_params) borrowed */
	double silence_s;             /* 0: the net default */
	int64_t last_step;            /* > 0: PS_STEP never moves the global step past it (--train_steps) */
	const char *deadline_name;    /* names the connect deadline in errors ("--connect_timeout=120 s"); may be NULL */
};

/* Connects to every ps until `deadline`, retrying whatever a retry can fix
 * (refused, reset, a HELLO with no answer: net/conn.h, dt_conn_dial). */
enum dt_status dt_ps_client_new(struct dt_loop *loop, const struct dt_ps_client_config *cfg, int64_t deadline,
				struct dt_ps_client **out, struct dt_err *err) DT_MUST_CHECK;
/* Closes every connection in order (SHUTDOWN, short linger) and frees. NULL is a no-op. */
void dt_ps_client_free(struct dt_ps_client *c);

struct dt_ps_status {
	int initialized;
	int ended;
	int64_t global_step;
};
enum dt_status dt_ps_client_status(struct dt_ps_client *c, int ps, struct dt_ps_status *out, int64_t deadline,
				   struct dt_err *err) DT_MUST_CHECK;

/* Sends every shard held by ps `ps` from the params buffer (PS_INIT). */
enum dt_status dt_ps_client_init(struct dt_ps_client *c, int ps, int64_t deadline,
				 struct dt_err *err) DT_MUST_CHECK;

/* Replaces the borrowed params and grads buffers (num_params floats each);
 * only between calls. A trainer that computes while its round is in flight
 * gives the round buffers of its own (train/ps_roles.c, --ps_overlap). */
void dt_ps_client_set_buffers(struct dt_ps_client *c, float *params, float *grads);

/* From now on every PS_STEP carries this position of trainer `trainer` of
 * `trainers` (distribute/ps_positions.h): its data position after the batch
 * whose gradient the same round pushes. Only between calls. */
void dt_ps_client_set_position(struct dt_ps_client *c, int trainer, int trainers, int64_t epoch, int64_t taken);

/* One round: if `push`, every shard of the grads buffer at learning rate lr;
 * if step_inc >= 0, PS_STEP(step_inc) to ps 0 with the new global step in
 * *global_step; if `pull`, every shard into the params buffer. */
enum dt_status dt_ps_client_round(struct dt_ps_client *c, int push, float lr, int64_t step_inc, int pull,
				  int64_t *global_step, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* ---- synchronous training (distribute/ps_sync.h) ---- */

/* PS_SYNC_CONFIG to every ps: the chief's configures them, the others' must match. */
enum dt_status dt_ps_client_sync_config(struct dt_ps_client *c, const struct dt_ps_sync_config *cfg, int64_t deadline,
					struct dt_err *err) DT_MUST_CHECK;

struct dt_ps_sync_result {
	int64_t min_step;        /* the lowest step over the ps: this trainer's next step */
	int64_t global_step;     /* ps 0's */
	uint64_t held_ns;        /* the longest any ps held this trainer's pull at the barrier */
	int dropped;             /* shards whose gradients a ps dropped as stale */
};

/* One synchronous round: if `push`, every shard of the grads buffer tagged
 * with `step` at lr (PS_SYNC_PUSH); then every shard pulled into the params
 * buffer once its ps has passed step `after` (PS_SYNC_PULL, held at the
 * barrier; after = -1: at once). A ps connection lost meanwhile ends the
 * round at once with that failure, the pulls other ps hold cancelled (their
 * barrier may never pass now; train/ps_recovery.h restores them all). */
enum dt_status dt_ps_client_sync_round(struct dt_ps_client *c, int push, int64_t step, float lr, int64_t after,
				       struct dt_ps_sync_result *out, int64_t deadline,
				       struct dt_err *err) DT_MUST_CHECK;

/* ---- row-sparse variables (TensorFlow's IndexedSlices; docs/DISTRIBUTED.md "Sparse rows") ----
 * A variable marked sparse is moved by rows: rounds push only the rows set
 * for it (PS_PUSH_ROWS, the rest of its gradient must be zero) and pull none
 * of it; dt_ps_client_pull_rows pulls the rows set (PS_PULL_ROWS). The rows
 * are the batch's, set before its forward pass and kept for its push. */

/* Marks variable `var` (of the placement's) sparse; DT_CONFIG when some ps
 * holding it did not announce DT_PS_FEATURE_SPARSE_ROWS in its hello (the
 * caller then keeps it dense). */
enum dt_status dt_ps_client_set_sparse(struct dt_ps_client *c, int var, struct dt_err *err) DT_MUST_CHECK;
/* This step's rows of sparse variable `var`: ascending, unique, each below
 * its first dimension; copied. */
void dt_ps_client_set_rows(struct dt_ps_client *c, int var, const int64_t *rows, size_t n);
/* Pulls the rows set of every sparse variable into the params buffer; after
 * >= 0 (synchronous): once each ps has passed that step. */
enum dt_status dt_ps_client_pull_rows(struct dt_ps_client *c, int64_t after, int64_t deadline,
				      struct dt_err *err) DT_MUST_CHECK;
/* Bytes sent and received on every ps connection, frames and heartbeats included. */
void dt_ps_client_bytes(const struct dt_ps_client *c, uint64_t *sent, uint64_t *received);

/* PS_END to every ps (the chief, at the end of the run). */
enum dt_status dt_ps_client_end(struct dt_ps_client *c, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* True when some ps closed its connection in order (it said the run is over). */
int dt_ps_client_ended_by_ps(const struct dt_ps_client *c);

/* ---- recovery (train/ps_recovery.h) ---- */

/* The connection to ps `ps` (for distribute/ps_snapshot.h's calls on an idle client). */
struct dt_conn *dt_ps_client_conn(struct dt_ps_client *c, int ps);
/* True when the connection to ps `ps` closed with an error (the ps died or
 * went silent), not in order. */
int dt_ps_client_lost(const struct dt_ps_client *c, int ps);
/* Replaces the connection to ps `ps` by a new one, retrying whatever a
 * retry can fix with backoff until rt's deadline (the error then names it);
 * *new_incarnation (may be NULL) turns true when the ps answering is another
 * process than before (it was restarted). When `stop` (may be NULL) ends the
 * wait first, DT_OK with the old connection left in place (still lost). */
enum dt_status dt_ps_client_reconnect(struct dt_ps_client *c, int ps, struct dt_retry *rt,
				      const struct dt_dial_stop *stop, int *new_incarnation,
				      struct dt_err *err) DT_MUST_CHECK;

#endif
