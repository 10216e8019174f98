/*
 * ps_server.h — one parameter server: its shards of the variables, their
 * optimizer slots, and the global step (on ps 0).
 *
 * The server listens with net/server.h, so the handshake refuses a peer whose
 * cluster fingerprint or model signature differs (the peer prints the reason)
 * and garbage closes only that connection. On the loop it serves
 * (ps_wire.h has the payloads):
 *
 *   PS_STATUS  initialized? run ended? global step
 *   PS_INIT    the chief's initial values of one shard; the server is
 *              "initialized" once every shard it holds has been set
 *   PS_PULL    a shard's current values (refused until initialized)
 *   PS_PUSH    gradients of one shard, applied on arrival with the server-side
 *              optimizer at the learning rate the worker sends (asynchronous:
 *              no locks, pulls may see another worker's update half-way,
 *              as TensorFlow's ps with use_locking=False)
 *   PS_PUSH_ROWS, PS_PULL_ROWS  a row-sparse table's rows (TensorFlow's
 *              IndexedSlices): SGD and Adagrad applied to the rows, momentum
 *              and Adam densely (the rows scattered into a zeroed shard), so
 *              the variables equal a dense push's; announced by the
 *              DT_PS_FEATURE_SPARSE_ROWS bit of the hello the caller gives
 *   PS_STEP    adds to the global step (ps 0 only)
 *   PS_END     from the chief only: the run is over; dt_ps_server_ended()
 *              turns true and the caller shuts the server down
 *   PS_SYNC_*  synchronous training (distribute/ps_sync.h): once a trainer has
 *              configured the ps for it, PS_PUSH and PS_STEP are refused, the
 *              ps keeps the step itself, and a step that times out fails the
 *              server (dt_ps_server_failure)
 *   others     handed to cfg.extension, if any (t2t's in-graph replicas,
 *              train/sync_roles.h), else refused
 *
 * Memory: parameters and slots are allocated over the whole flat parameter
 * range (num_params floats each), of which this server uses only its
 * shards' ranges; that keeps offsets global and costs (num_ps - 1) / num_ps
 * of the model in untouched (never paged-in) virtual memory.
 *
 * Single-threaded: everything runs on the caller's loop.
 */
#ifndef DT_DIST_PS_SERVER_H
#define DT_DIST_PS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "distribute/placement.h"
#include "distribute/ps_sync.h"
#include "net/loop.h"
#include "net/messages.h"
#include "nn/hparams.h"

struct dt_ps_server;

/* Messages the ps does not know itself, for a layer above (distribute/ cannot
 * depend on train/). */
struct dt_ps_server_extension {
	/* Returns 1 when it handled (and answered) the frame. */
	int (*on_frame)(void *arg, struct dt_conn *c, const struct dt_frame_header *h, uint8_t *payload);
	/* `ended`: the chief had ended the run (PS_END) before this close, so an
	 * orderly close is the end it announced; without it even an orderly
	 * close (SHUTDOWN) is a peer that left mid-run. */
	void (*on_close)(void *arg, struct dt_conn *c, const struct dt_err *why, int ended);
	void *arg;
};

struct dt_ps_server_config {
	const char *host;              /* listen address */
	int port;                      /* 0: the kernel picks */
	int index;                     /* this ps's index */
	const struct dt_hello *local;  /* role "ps", fingerprint, signature; borrowed, outlives the server */
	const struct dt_placement *placement; /* borrowed */
	size_t num_params;             /* elements of the flat parameter buffer */
	const struct dt_hparams *hp;   /* the optimizer to apply pushes with */
	const char *chief_role;        /* who may end the run: "chief", "master" or "worker" */
	uint32_t chief_index;
	double silence_s;              /* 0: the net default */
	const char *const *trainers;   /* (num_trainers) "chief:0", "worker:0": who may train synchronously */
	int num_trainers;
	const struct dt_ps_server_extension *extension; /* optional, borrowed */
};

struct dt_ps_server_stats {
	uint64_t pushes, pulls, inits, refused_requests;
	uint64_t sync_accepted, sync_dropped;  /* synchronous gradients accumulated, dropped as stale */
	int64_t global_step;
};

enum dt_status dt_ps_server_new(struct dt_loop *loop, const struct dt_ps_server_config *cfg,
				struct dt_ps_server **out, struct dt_err *err) DT_MUST_CHECK;
/* Closes every connection at once and frees. NULL is a no-op. */
void dt_ps_server_free(struct dt_ps_server *s);

int dt_ps_server_port(const struct dt_ps_server *s);
int dt_ps_server_initialized(const struct dt_ps_server *s);
/* True once the chief sent PS_END. */
int dt_ps_server_ended(const struct dt_ps_server *s);
/* Sends SHUTDOWN("the run is over") to every peer; returns the number of
 * connections still open (run the loop until it is 0, or a short deadline). */
size_t dt_ps_server_shutdown(struct dt_ps_server *s);
size_t dt_ps_server_conn_count(const struct dt_ps_server *s);
void dt_ps_server_get_stats(const struct dt_ps_server *s, struct dt_ps_server_stats *out);
/* Synchronous training failed (a step timed out): why; NULL while it has not. */
const struct dt_err *dt_ps_server_failure(const struct dt_ps_server *s);
/* The synchronous side, or NULL before a trainer configured it. */
const struct dt_ps_sync *dt_ps_server_sync(const struct dt_ps_server *s);

#endif
