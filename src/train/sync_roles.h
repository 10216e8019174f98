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
 * master ends the in-graph run with exit 3. A ps that dies and comes back
 * within --connect_timeout is restored in place (layout 1): the trainers
 * hold their step, the chief restores the newest checkpoint onto every ps
 * (train/ps_recovery.h, dt_ps_recover_sync), every trainer repositions its
 * data at the restored step, and the barrier resumes.
 */
#ifndef DT_TRAIN_SYNC_ROLES_H
#define DT_TRAIN_SYNC_ROLES_H

#include <stdint.h>

#include "base/err.h"
#include "train/local.h"
#include "train/ps_roles.h"

#define DT_SYNC_TIMEOUT_DEFAULT_S 300.0

struct dt_sync_stats {
	int replicas_to_aggregate, total_replicas;
	double barrier_seconds;   /* time this trainer's pulls were held at the barrier */
	double barrier_share;     /* of its training time */
	int64_t stale_steps;      /* steps whose gradients were dropped as stale (a backup's) */
	int64_t recoveries;       /* lost parameter servers recovered in place (train/ps_recovery.h) */
};

/* A trainer of synchronous training through the ps (layout 1). */
enum dt_status dt_train_sync_trainer(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				     struct dt_sync_stats *stats, struct dt_err *err) DT_MUST_CHECK;

/* The master of t2t's in-graph layout (layout 2). */
enum dt_status dt_train_sync_master(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				    struct dt_sync_stats *stats, struct dt_err *err) DT_MUST_CHECK;

/* The std server's side of layout 2, and the master's client of it, are
 * distribute/in_graph.h. Resuming (docs/CHECKPOINTS.md): layout 1's chief
 * restores the newest checkpoint onto the ps tasks (train/ps_recovery.h,
 * with the synchronous step and Adam's update count), layout 2's master into
 * its own variables and optimizer. Layout 1's trainers read the data as one
 * global stream, each a slice of every global batch (train/strategy.h's
 * `slices`); the chief's checkpoints save its position, which is the global
 * one, so a checkpoint resumes at another trainer count; without one the
 * position of step s is s global batches in. Layout 2's replicas read slices
 * too and derive their position from the step. */

#endif
