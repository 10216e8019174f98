/*
 * ps_client.h — a trainer's connections to every parameter server.
 *
 * The client connects to all ps tasks (with backoff until a deadline), then
 * moves the model's flat buffers to and from them shard by shard, as
 * dist/placement.h maps it. Every shard is its own request, and all of a
 * round's requests are in flight at once on all servers, so pulls and pushes
 * to different servers proceed in parallel. Nothing is copied: pushes are
 * written straight from the gradient buffer (dt_conn_sendv_ref) and pull
 * replies are received straight into the parameter buffer (reply_buf).
 *
 * One round (dt_ps_client_round) does, on each connection in this order,
 * push → step → pull: the server handles a connection's frames in order, so
 * the pull sees this worker's own push applied; one round trip per step.
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
#include "dist/placement.h"
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
};

/* Connects to every ps until `deadline`. */
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

/* One round: if `push`, every shard of the grads buffer at learning rate lr;
 * if step_inc >= 0, PS_STEP(step_inc) to ps 0 with the new global step in
 * *global_step; if `pull`, every shard into the params buffer. */
enum dt_status dt_ps_client_round(struct dt_ps_client *c, int push, float lr, int64_t step_inc, int pull,
				  int64_t *global_step, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* PS_END to every ps (the chief, at the end of the run). */
enum dt_status dt_ps_client_end(struct dt_ps_client *c, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* True when some ps closed its connection in order (it said the run is over). */
int dt_ps_client_ended_by_ps(const struct dt_ps_client *c);

#endif
