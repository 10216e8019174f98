/*
 * allreduce_role.h — multi-worker mirrored training: a cluster of
 * chief/master/worker tasks and no ps (TensorFlow's
 * MultiWorkerMirroredStrategy, seeds 002 and 004; docs/DISTRIBUTED.md).
 *
 * Every task runs the same loop on a full replica of the model:
 *   - ranks: the chief's job first (master:0, else chief:0, else worker:0
 *     is rank 0), then the other trainer jobs alphabetically, in index
 *     order; the data shard is the rank, of num_worker_replicas;
 *   - start: every rank connects to every other (distribute/collective.h) with the
 *     model signature and cluster fingerprint in its hello, retrying until
 *     connect_s and then failing with the ranks that are missing; rank 0
 *     initializes the variables from the seed and broadcasts them, so every
 *     replica starts bit-identical;
 *   - each step: forward/backward on this rank's batch (hp.batch_size per
 *     worker, split across `replicas` threads when > 1: distribute/mirrored.h),
 *     and the gradient all-reduced (summed) in buckets of whole layers on a
 *     communication thread, in reverse layer order (the end of the flat
 *     buffer first), the same buckets in the same order on every rank. With
 *     one replica per worker, a bucket's all-reduce starts during the
 *     backward pass, as soon as the layers it holds have written their
 *     gradients (dt_model_train_batch_notify); with replicas > 1 only after
 *     it (their gradients are summed at its end), and likewise with the
 *     debug environment variable DTRAIN_ALLREDUCE_NO_OVERLAP=1 (same buckets,
 *     same order, same bits). As each bucket arrives the main thread
 *     applies the optimizer to the mean of that range (weight decay
 *     included, dt_optimizer_apply_mean) while the communication thread reduces the next
 *     bucket. Every rank applies the same bits to the same bits, so the
 *     replicas stay bit-identical; check_every > 0 all-reduces a hash of the
 *     variables every N steps and fails (DT_RUNTIME) naming the ranks whose
 *     variables differ from rank 0's;
 *   - every eval_every steps (rank 0's value, broadcast at the start) each
 *     rank evaluates its shard of the test split between two steps, one
 *     small all-reduce sums the figures and rank 0 logs them, so no rank
 *     waits on a lone evaluator beyond a step's deadline;
 *   - end: a barrier, then rank 0 evaluates on the test split (res->eval at
 *     global step res->steps).
 * A collective that does not complete within step_s, or a peer that dies,
 * fails the step with DT_PEER/DT_TIMEOUT naming the missing task (exit 3).
 *
 * Global batch = ranks × hp.batch_size (t2t's batch_size is per worker, as
 * in parameter-server training); the learning rate is not rescaled.
 */
#ifndef DT_TRAIN_ALLREDUCE_ROLE_H
#define DT_TRAIN_ALLREDUCE_ROLE_H

#include "base/err.h"
#include "cluster/cluster.h"
#include "train/local.h"

struct dt_allreduce_run_config {
	const struct dt_train_config *train;
	const struct dt_cluster *cluster;
	double connect_s;          /* how long to wait for every peer at start; default 120 */
	double step_s;             /* deadline of each collective; default 60 */
	int64_t check_every;       /* compare a hash of the variables across ranks every N steps; 0: never */
	double bucket_mb;          /* gradient bucket size in MiB; default 25 (the first bucket is 1 MiB;
				      buckets hold whole layers: train/allreduce_buckets.h) */
	int min_workers;           /* elastic (train/allreduce_elastic.h): a lost worker other than the chief
				      is dropped and the ring re-formed while at least this many remain;
				      0 or the worker count: a lost worker ends the job */
};

/* This task's rank among the trainers (see above) and their count; -1 for
 * a task that does not train. */
int dt_allreduce_rank(const struct dt_cluster *cl, int *size);

/* Rank 0 with train->eval_at_end fills res->eval. */
enum dt_status dt_train_allreduce(const struct dt_allreduce_run_config *cfg, struct dt_train_result *res,
				  struct dt_err *err) DT_MUST_CHECK;

#endif
