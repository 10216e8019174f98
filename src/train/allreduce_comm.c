/*
 * allreduce_comm.c — the communication thread of multi-worker mirrored
 * training (train/allreduce_comm.h): one step's buckets all-reduced in
 * order, each once the main thread has announced it final.
 */
#include "train/allreduce_comm.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/trace.h"

enum dt_status dt__allreduce_reduce_bucket(struct dt_comm *comm, float *grads, const struct dt_allreduce_bucket *b,
					   int k, int tail, double step_s, struct dt_err *err)
{
	char name[32];
	snprintf(name, sizeof(name), "grads/bucket_%d", k);
	const size_t n = b->count + (k == 0 ? (size_t)tail : 0);
	const int64_t t0 = dt_trace_begin();
	enum dt_status st = dt_allreduce_sum_f32(comm, grads + b->offset, n, name, dt_deadline_in(step_s), err);
	dt_trace_end(t0, "allreduce", "gradient bucket", -1, (int64_t)(n * sizeof(float)));
	return st;
}

static void *comm_main(void *arg)
{
	struct dt__allreduce_comm *c = arg;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		while (!c->stop && c->served == c->requested)
			pthread_cond_wait(&c->cv, &c->mu);
		if (c->stop) {
			pthread_mutex_unlock(&c->mu);
			return NULL;
		}
		c->served++;
		int failed = c->st != DT_OK;
		pthread_mutex_unlock(&c->mu);
		for (int k = 0; k < c->nbuckets && !failed; k++) {
			pthread_mutex_lock(&c->mu);
			while (!c->stop && c->ready <= k)
				pthread_cond_wait(&c->cv, &c->mu);
			int stop = c->stop;
			pthread_mutex_unlock(&c->mu);
			if (stop)
				return NULL; /* the main thread gave up mid-step */
			struct dt_err e = DT_ERR_INIT;
			enum dt_status st =
				dt__allreduce_reduce_bucket(c->comm, c->grads, &c->buckets[k], k, c->tail, c->step_s, &e);
			pthread_mutex_lock(&c->mu);
			if (st) {
				c->st = st;
				c->err = e;
				failed = 1;
			}
			c->done = k + 1;
			pthread_cond_broadcast(&c->cv);
			pthread_mutex_unlock(&c->mu);
		}
	}
}

void dt__allreduce_comm_begin_step(struct dt__allreduce_comm *c)
{
	pthread_mutex_lock(&c->mu);
	c->ready = 0;
	c->done = 0;
	c->requested++;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	c->announced = 0;
}

void dt__allreduce_comm_announce(struct dt__allreduce_comm *c, int ready)
{
	if (ready <= c->announced)
		return;
	c->announced = ready;
	pthread_mutex_lock(&c->mu);
	c->ready = ready;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

void dt__allreduce_comm_grads_ready(void *arg, size_t offset, size_t count)
{
	(void)count;
	struct dt__allreduce_comm *c = arg;
	int k = c->announced;
	while (k < c->nbuckets && c->buckets[k].offset >= offset)
		k++;
	dt__allreduce_comm_announce(c, k);
}

void dt__allreduce_comm_stop(struct dt__allreduce_comm *c)
{
	if (!c->started)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	c->started = 0;
}

void dt__allreduce_comm_init(struct dt__allreduce_comm *c)
{
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
}

void dt__allreduce_comm_destroy(struct dt__allreduce_comm *c)
{
	dt__allreduce_comm_stop(c);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
}

enum dt_status dt__allreduce_comm_start(struct dt__allreduce_comm *c, struct dt_comm *comm, float *grads,
					const struct dt_allreduce_bucket *buckets, int nbuckets, int tail,
					double step_s, struct dt_err *err)
{
	c->comm = comm;
	c->grads = grads;
	c->buckets = buckets;
	c->nbuckets = nbuckets;
	c->tail = tail;
	c->step_s = step_s;
	c->requested = c->served = 0;
	c->ready = c->done = c->stop = c->announced = 0;
	c->st = DT_OK;
	c->err = (struct dt_err)DT_ERR_INIT;
	int rc = pthread_create(&c->thread, NULL, comm_main, c);
	if (rc)
		return dt_err_set(err, DT_RUNTIME, "cannot start the communication thread: %s", strerror(rc));
	c->started = 1;
	return DT_OK;
}

enum dt_status dt__allreduce_comm_wait(struct dt__allreduce_comm *c, int k, struct dt_err *err)
{
	pthread_mutex_lock(&c->mu);
	while (c->done <= k && c->st == DT_OK)
		pthread_cond_wait(&c->cv, &c->mu);
	enum dt_status st = c->st;
	if (st && err)
		*err = c->err;
	pthread_mutex_unlock(&c->mu);
	return st;
}
