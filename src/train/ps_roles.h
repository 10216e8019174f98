/*
 * ps_roles.h — the role loops of asynchronous between-graph training through
 * parameter servers (docs/DISTRIBUTED.md).
 *
 *   std server (job ps, --schedule=run_std_server): builds the model only to
 *     learn its variables, computes the placement, holds its shards
 *     (distribute/ps_server.h) and serves until the chief ends the run; then it
 *     closes every connection in order and returns DT_OK. The same server
 *     serves synchronous trainers (distribute/ps_sync.h) and, in t2t's one-master
 *     layout, computes as an in-graph replica (train/sync_roles.h); a
 *     synchronous step that times out, or an in-graph master lost mid-run,
 *     ends it with DT_TIMEOUT/DT_PEER (exit 3).
 *   trainer (chief/master/worker): connects to every ps, then
 *     - the chief (cluster.h's chief) initializes the variables on any ps
 *       that is not initialized yet;
 *     - the others wait, saying what for ("waiting for model: ps:1 not
 *       initialized"), at most wait_model_s;
 *     then each step: forward/backward on this trainer's shard of the data
 *     (shard = global id, of num_worker_replicas), one round of push →
 *     global step += 1 → pull; until the global step reaches train_steps.
 *     With `overlap`, step t+1's forward/backward runs on a helper thread,
 *     on the variables pulled by round t-1, while round t is in flight (its
 *     own copies of the buffers; every ps_client call stays on the calling
 *     thread): a gradient is one step staler than without. With
 *     train->eval_every, the chief evaluates its pulled copy on the test
 *     split each time the global step crosses a multiple of it, on a helper
 *     thread while it keeps turning its loop (heartbeats keep flowing).
 *     The chief then pulls the final variables, ends the run on every ps, and
 *     evaluates on the test split (res->eval, at global step res->steps),
 *     with no connection left open to time out meanwhile; the other trainers return
 *     when they see the global step reached or the ps close in order.
 *
 * The trainer is the session's loop (train/session.h) with the async
 * strategy (train/strategy.h); the std server is a role of its own.
 *
 * Learning rate: the schedule at the global step, divided by
 * sqrt(num_worker_replicas) when hp.scale_lr_by_workers is set (t2t's async
 * rule); the ps applies it with the optimizer of the hparams.
 */
#ifndef DT_TRAIN_PS_ROLES_H
#define DT_TRAIN_PS_ROLES_H

#include "base/err.h"
#include "cluster/cluster.h"
#include "train/local.h"

struct dt_ps_run_config {
	const struct dt_train_config *train;
	const struct dt_cluster *cluster;
	double connect_s;     /* how long to retry connecting to the ps tasks; default 120 */
	double wait_model_s;  /* how long a non-chief waits for the chief's initialization; default 300 */
	double round_s;       /* deadline of one push/pull round; default 60 */
	double ps_idle_s;     /* a ps with no trainer connected this long gives up (exit 3); 0: never */
	int overlap;          /* async trainer: compute step t+1 while step t's round is in flight */
	/* Synchronous training (train/sync_roles.h). */
	int replicas_to_aggregate; /* gradients per step; 0: every trainer */
	double sync_timeout_s;     /* a step gathers its gradients within this; default 300 */
	int worker_gpu, ps_gpu;    /* t2t's in-graph layout: replicas on the master and on each ps */
};

enum dt_status dt_train_std_server(const struct dt_ps_run_config *cfg, struct dt_err *err) DT_MUST_CHECK;

/* For the chief with train->eval_at_end, res->eval holds the evaluation. */
enum dt_status dt_train_ps_trainer(const struct dt_ps_run_config *cfg, struct dt_train_result *res,
				   struct dt_err *err) DT_MUST_CHECK;

#endif
