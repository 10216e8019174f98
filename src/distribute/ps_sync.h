/*
 * ps_sync.h — one parameter server's side of synchronous training:
 * TensorFlow's SyncReplicasOptimizer, with the accumulators and the token
 * queue on the ps.
 *
 * Semantics (docs/DISTRIBUTED.md, "Synchronous training"):
 *   - The ps has a step s (ps 0's is the global step). Every shard it holds
 *     has an accumulator that takes gradients tagged with the trainer's step.
 *     A gradient tagged with a step below s is stale: it is dropped (the
 *     trainer is told so); one tagged above s is a protocol error.
 *   - Once every shard has at least replicas_to_aggregate gradients for s,
 *     each shard's average is applied with the optimizer at the learning rate
 *     of its first gradient, s becomes s + 1, and every trainer waiting at
 *     the barrier for a step > s is released with the new values.
 *   - With total_replicas > replicas_to_aggregate the other trainers are
 *     backups: the step does not wait for them, and their late gradients are
 *     dropped as stale.
 *   - Deadline: a step must collect its gradients within step_timeout_s of its
 *     first one (first_step_timeout_s for the first step after configuration,
 *     while trainers are still starting). When it does not, the ps fails for
 *     good: every waiting trainer, and every later sync request, gets a
 *     DT_TIMEOUT error naming the missing trainers and how long each has been
 *     silent. (TensorFlow's SyncReplicasOptimizer waits forever here.)
 *
 * The core (configure, push, wait, check) takes the time as an argument and
 * touches no socket, so tests drive it directly; dt_ps_sync_on_frame is the
 * glue that ps_server.c calls for the PS_SYNC_* messages.
 *
 * Single-threaded, on the ps's loop.
 */
#ifndef DT_DIST_PS_SYNC_H
#define DT_DIST_PS_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "distribute/ps_wire.h"
#include "net/conn.h"
#include "nn/optimizer.h"

struct dt_ps_sync;

struct dt_ps_sync_shard {
	size_t offset, count;    /* a range of the flat parameter buffer */
	enum dt_var_kind kind;   /* its variable's (distribute/placement.h) */
	float decay;             /* DT_VAR_MOVING_AVERAGE */
};

/* The one update of a shard on a ps, asynchronous or synchronous, from the
 * sum of `summed` pushed vectors (sum indexed from the shard's start): a
 * trainable shard's are gradients, applied as their mean by the optimizer at
 * lr (`step`: Adam's 1-based count); a moving-average shard's are its
 * trainers' batch values (nn/model.h's dt_model_moving_average_values),
 * whose mean it moves toward with its decay as TensorFlow's
 * assign_moving_average does on the ps; a frozen shard never changes. */
void dt_ps_shard_apply(const struct dt_ps_sync_shard *sh, struct dt_optimizer *opt, float *params, const float *sum,
		       int summed, float lr, int64_t step);

struct dt_ps_sync_params {
	const char *name;                        /* "ps:0", for messages */
	const struct dt_ps_sync_shard *shards;   /* (nshards) the shards this ps holds; copied */
	int nshards;
	size_t num_params;                       /* elements of the flat buffers */
	float *params;                           /* (num_params) borrowed: the live variables */
	struct dt_optimizer *opt;                /* borrowed: applies the averages */
	const char *const *trainers;             /* (num_trainers) "chief:0", "worker:0", ...; copied */
	int num_trainers;
};

/* A trainer waiting at the barrier for one shard; caller-owned until
 * release() runs (once), which may free it. */
struct dt_ps_sync_waiter {
	int shard;
	int64_t after;           /* released once the step is > after */
	int64_t since_ns;        /* when it started waiting */
	void *owner;             /* the connection, for dt_ps_sync_drop_owner */
	/* failed: NULL on release, else why the step failed (step and held_ns unset). */
	void (*release)(struct dt_ps_sync_waiter *w, int64_t step, uint64_t held_ns, const struct dt_err *failed);
	/* Optional: runs when a queued waiter is forgotten instead (its owner
	 * closed, or the ps is freed); may free it. */
	void (*drop)(struct dt_ps_sync_waiter *w);
	struct dt_ps_sync_waiter *next_;
};

struct dt_ps_sync_stats {
	int64_t step;             /* this ps's step */
	uint64_t accepted;        /* gradients accumulated (one per shard per trainer) */
	uint64_t dropped;         /* stale gradients dropped */
	uint64_t applied;         /* steps applied */
};

struct dt_ps_sync *dt_ps_sync_new(const struct dt_ps_sync_params *p);
/* Frees; waiters still queued are dropped (their drop(), not release()). NULL is a no-op. */
void dt_ps_sync_free(struct dt_ps_sync *s);

/* The first call configures the ps for synchronous training from step
 * `step`; later ones (other trainers, a restarted chief) must match it, else
 * DT_CONFIG naming both sides. `who` is the caller ("worker:1"). */
enum dt_status dt_ps_sync_configure(struct dt_ps_sync *s, const struct dt_ps_sync_config *cfg, const char *who,
				    int64_t step, struct dt_err *err) DT_MUST_CHECK;
int dt_ps_sync_configured(const struct dt_ps_sync *s);

/* The index of trainer "role:index" in the params' list, or -1. */
int dt_ps_sync_trainer_of(const struct dt_ps_sync *s, const char *role, uint32_t index);
/* The shard with exactly this range, or -1. */
int dt_ps_sync_shard_of(const struct dt_ps_sync *s, uint64_t offset, uint64_t count);

/* One trainer's gradients of one shard (shard-local, count elements),
 * tagged with its step. *dropped is set when they were stale. May apply the
 * step and release waiters. DT_TIMEOUT once the ps has failed. */
enum dt_status dt_ps_sync_push(struct dt_ps_sync *s, int shard, int trainer, int64_t step, float lr,
			       const float *grads, int64_t now, int *dropped, struct dt_err *err) DT_MUST_CHECK;

/* Queues w, or releases it at once when the step is already > w->after or the ps has failed. */
void dt_ps_sync_wait(struct dt_ps_sync *s, struct dt_ps_sync_waiter *w, int64_t now);
/* Drops the queued waiters of `owner` (its connection closed) without releasing them. */
void dt_ps_sync_drop_owner(struct dt_ps_sync *s, void *owner);

/* Liveness of trainers, for the timeout's message. */
void dt_ps_sync_heard(struct dt_ps_sync *s, int trainer, int64_t now);
void dt_ps_sync_gone(struct dt_ps_sync *s, int trainer, int64_t now);

/* When the open step times out (INT64_MAX when no step is open). */
int64_t dt_ps_sync_deadline(const struct dt_ps_sync *s);
/* Fails the ps if the open step's deadline has passed by `now`: releases
 * every waiter with the error and returns DT_TIMEOUT. */
enum dt_status dt_ps_sync_check(struct dt_ps_sync *s, int64_t now);
/* The failure, or NULL. */
const struct dt_err *dt_ps_sync_failure(const struct dt_ps_sync *s);

int64_t dt_ps_sync_step(const struct dt_ps_sync *s);
/* For a restore from a checkpoint: the step, and the updates applied so far
 * (Adam's bias-correction count; dt_ps_sync_stats.applied). Drops the open
 * step's gradients; waiters are released if the step passed them. The step
 * after a restore has the first step's timeout. ps_server.c calls it for
 * PS_SET_STEP and PS_RESTORE (distribute/ps_snapshot.h) on a synchronous ps. */
void dt_ps_sync_restore(struct dt_ps_sync *s, int64_t step, uint64_t applied, int64_t now);
void dt_ps_sync_get_stats(const struct dt_ps_sync *s, struct dt_ps_sync_stats *out);

/* ---- the glue ps_server.c calls ---- */

/* Handles a PS_SYNC_CONFIG, PS_SYNC_PUSH or PS_SYNC_PULL request from c
 * (the ps is initialized: the caller checked). Replies itself. */
void dt_ps_sync_on_frame(struct dt_ps_sync *s, struct dt_conn *c, const struct dt_frame_header *h,
			 const uint8_t *payload);
/* A connection closed: forgets its waiters and notes the trainer gone. */
void dt_ps_sync_on_close(struct dt_ps_sync *s, struct dt_conn *c);

#endif
