/*
 * allreduce_comm.h — multi-worker mirrored training's communication
 * thread (train/allreduce_role.h): it all-reduces the buckets of one step
 * (train/allreduce_buckets.h) in order while the main thread applies the
 * optimizer to the buckets already summed.
 *
 * A step, from the main thread:
 *   dt__allreduce_comm_begin_step        a new step, no bucket final yet;
 *   dt__allreduce_comm_announce(c, k)    buckets [0, k) are final (their whole
 *                                        range of the gradient is written):
 *                                        during the backward pass through
 *                                        dt__allreduce_comm_grads_ready (the
 *                                        model's dt_grads_ready_fn), or all at
 *                                        once after it;
 *   dt__allreduce_comm_wait(c, k)        bucket k is summed, or the first
 *                                        failure of the step.
 * The thread reduces bucket k once it is announced and k-1 is done, so the
 * order of the collectives is the same on every rank. After a failure it
 * reduces nothing more in that step; the failure is kept (the caller ends
 * or re-forms the ring, and starts a new thread on the new comm).
 *
 * Ownership: the comm, the gradient buffer and the buckets are borrowed
 * from the caller and must outlive the thread. One comm, one user at a time
 * (distribute/collective.h): the main thread touches the comm only between
 * steps, once every bucket of the step is done, or after _stop.
 */
#ifndef DT_TRAIN_ALLREDUCE_COMM_H
#define DT_TRAIN_ALLREDUCE_COMM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "distribute/collective.h"
#include "train/allreduce_buckets.h"

struct dt__allreduce_comm {
	struct dt_comm *comm;
	float *grads;
	const struct dt_allreduce_bucket *buckets;
	int nbuckets;
	int tail;           /* floats past the gradients that bucket 0's all-reduce carries too (elastic: the join flag) */
	double step_s;
	pthread_t thread;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int64_t requested;  /* steps started */
	int64_t served;     /* steps the thread has taken up */
	int ready;          /* buckets of the current step whose range is final */
	int done;           /* buckets of the current step reduced */
	int stop;
	enum dt_status st;  /* first failure; the thread stops reducing after it */
	struct dt_err err;
	int announced;      /* main thread only: `ready` as it last set it */
};

/* Bucket k's all-reduce (sum) of `grads`, within step_s; bucket 0 ends
 * where the gradients do, so its `tail` floats past them go with it. Also
 * what a caller without the thread (one bucket) runs inline. */
enum dt_status dt__allreduce_reduce_bucket(struct dt_comm *comm, float *grads, const struct dt_allreduce_bucket *b,
					   int k, int tail, double step_s, struct dt_err *err) DT_MUST_CHECK;

/* The mutex and condition variable; once, before anything else. */
void dt__allreduce_comm_init(struct dt__allreduce_comm *c);
/* Stops the thread (if started) and destroys what _init made. */
void dt__allreduce_comm_destroy(struct dt__allreduce_comm *c);

/* Starts the thread on these borrowed buffers; DT_RUNTIME when no thread can be had. */
enum dt_status dt__allreduce_comm_start(struct dt__allreduce_comm *c, struct dt_comm *comm, float *grads,
					const struct dt_allreduce_bucket *buckets, int nbuckets, int tail,
					double step_s, struct dt_err *err) DT_MUST_CHECK;
/* Ends the thread, also in the middle of a step; a no-op when not started. */
void dt__allreduce_comm_stop(struct dt__allreduce_comm *c);

void dt__allreduce_comm_begin_step(struct dt__allreduce_comm *c);
void dt__allreduce_comm_announce(struct dt__allreduce_comm *c, int ready);
/* dt_grads_ready_fn (nn/model.h), arg the thread: gradients from `offset`
 * to the end of the buffer are final, and so is every bucket that starts at
 * or after it. */
void dt__allreduce_comm_grads_ready(void *arg, size_t offset, size_t count);
/* Waits until bucket k of the step is reduced; the thread's first failure
 * of the step (its message in *err) when there was one. */
enum dt_status dt__allreduce_comm_wait(struct dt__allreduce_comm *c, int k, struct dt_err *err) DT_MUST_CHECK;

#endif
