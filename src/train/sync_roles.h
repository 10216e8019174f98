/*
 * sync_roles.h — synchronous distributed training (docs/DISTRIBUTED.md,
 * "Synchronous training"), in its two layouts.
 *
 * 1. Through the parameter servers (--sync or hparam sync=1 on the
 *    trainers of a chief/worker + ps cluster): TensorFlow's
 *    SyncReplicasOptimizer. The chief configures every ps
 *    (replicas_to_aggregate of the trainers, the step timeout), then
 *    initializes them; each step every trainer computes gradients on its
 *    shard of the data at the variables of step s, pushes them tagged with
 *    s, and waits at the ps's barrier until the ps has applied the average
 *    of the first replicas_to_aggregate (distribute/ps_sync.h); the release brings
 *    the new variables. The other trainers are backups. The chief ends the
 *    run at train_steps and evaluates.
 *
 * 2. t2t's one-master layout (a `master` job as the only trainer, the ps
 *    tasks started with --schedule=run_std_server, --sync): in-graph
 *    replication. The std servers are the compute replicas: the master
 *    holds the variables and the optimizer; each step it sends the
 *    variables to every std server, each computes the gradients of its
 *    replicas' shards of the data, and the master averages them and applies.
 *    Replicas per std server: t2t's --ps_gpu (0 counts as 1, as t2t then
 *    computes on the ps's CPU); a task's replicas run one after another on
 *    its CPU threads. The master computes nothing (t2t: --worker_gpu=0 in
 *    this layout; another value is ignored with a warning).
 *
 * Both trainers are the session's loop (train/session.h) with a strategy
 * each (train/strategy.h).
 *
 * With eval_every, the chief (or master) evaluates a copy of the variables
 * on a thread of its own while it trains on (train/common.h,
 * dt_train_bg_eval_*), so the barrier never waits on an evaluation.
 *
 * Every wait has a deadline: a missing trainer fails the step on the ps
 * after --sync_timeout (exit 3 everywhere, naming it); a dead replica or
 * master ends the in-graph run with exit 3.
 */
#ifndef DT_TRAIN_SYNC_ROLES_H
#define DT_TRAIN_SYNC_ROLES_H

#include <stdint.h>

#include "base/err.h"
#include "distribute/ps_server.h"
#include "nn/model.h"
#include "train/local.h"
#include "train/ps_roles.h"

#define DT_SYNC_TIMEOUT_DEFAULT_S 300.0

struct dt_sync_stats {
	int replicas_to_aggregate, total_replicas;
	double barrier_seconds;   /* time this trainer's pulls were held at the barrier */
	double barrier_share;     /* of its training time */
	int64_t stale_steps;      /* steps whose gradients were dropped as stale (a backup's) */
};

/* A trainer of synchronous training through the ps (layout 1). */
enum dt_status dt_train_sync_trainer(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				     struct dt_sync_stats *stats, struct dt_err *err) DT_MUST_CHECK;

/* The master of t2t's in-graph layout (layout 2). */
enum dt_status dt_train_sync_master(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				    struct dt_sync_stats *stats, struct dt_err *err) DT_MUST_CHECK;

/* ---- the std server's side of layout 2 ---- */

struct dt_replica;

/* For a std server: computes when an in-graph master sets it up
 * (PS_REPLICA_SETUP, then PS_REPLICA_STEP); `model` is the server's (for the
 * parameter count), borrowed. */
enum dt_status dt_replica_new(const struct dt_ps_run_config *cfg, const struct dt_model *model,
			      struct dt_replica **out, struct dt_err *err) DT_MUST_CHECK;
void dt_replica_free(struct dt_replica *r);
const struct dt_ps_server_extension *dt_replica_extension(struct dt_replica *r);
/* Why the replica cannot go on (its master was lost mid-run), or NULL. NULL r: NULL. */
const struct dt_err *dt_replica_failure(const struct dt_replica *r);
int64_t dt_replica_steps(const struct dt_replica *r);

/* ---- resuming (docs/CHECKPOINTS.md) ----
 *
 * Both layouts resume from the chief's newest checkpoint after a restart:
 * layout 1's chief restores it onto the ps tasks (train/ps_recovery.h, with
 * the synchronous step and Adam's update count), layout 2's master into its
 * own variables and optimizer. A synchronous step reads exactly one batch per
 * data shard, so the input position of step s is derived, not saved: each
 * pipeline starts s batches in (a std server when the master's first step
 * after setting it up is s > 0). */

struct dt_pipeline;
struct dt_pipeline_config;
/* Replaces *p (made from pc) by a pipeline from pc positioned `batches`
 * batches in (epochs of shard_size / batch_size whole batches). */
enum dt_status dt__pipeline_at(const struct dt_pipeline_config *pc, int64_t batches, struct dt_pipeline **p,
			       struct dt_err *err) DT_MUST_CHECK;

#endif
