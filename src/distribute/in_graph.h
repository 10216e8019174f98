/*
 * in_graph.h — t2t's in-graph replication over the ps wire (docs/PROTOCOL.md,
 * PS_REPLICA_*; docs/DISTRIBUTED.md, "t2t's sync layout"), both sides.
 *
 * The master (dt_in_graph_master, the client side, beside ps_client.h)
 * dials every std server, sets each up as `replicas` compute replicas
 * (PS_REPLICA_SETUP: problem, batch, seed, its data shards), and then each
 * step sends every server the variables (PS_REPLICA_STEP) and sums the
 * gradients and figures they reply with (a text problem's token counts and
 * t2t's metrics when both sides announce DT_PS_FEATURE_REPLICA_TEXT in
 * their hellos, as the trainer's roles do). It holds the variables and the optimizer
 * itself (train/sync_roles.c); this module only moves bytes. Every call has
 * a deadline; a server that fails or does not answer fails the call naming it.
 *
 * The replica (dt_in_graph_replica, the server side) is an extension of a
 * std server (ps_server.h): on PS_REPLICA_SETUP from the master (and only
 * from it) it loads the train split and builds a model and one pipeline per
 * replica (a text problem: one token input per replica, shard k of the
 * replicas, through the config's text ops; a program's own model and data,
 * the public API's, through its source ops, with nothing loaded by name); on each PS_REPLICA_STEP it computes every replica's gradient at
 * the master's variables, one after another, and replies with their sum.
 * Step s reads batch s of each shard, so a master resumed at step s > 0
 * repositions the pipelines without anything saved on the server. A master
 * that set the server up and then leaves before PS_END — killed, silent
 * past the connection's silence limit, or closing in order because it
 * failed itself — is this server's failure (DT_PEER; the whole cluster
 * restarts). Single-threaded, on the server's loop.
 */
#ifndef DT_DISTRIBUTE_IN_GRAPH_H
#define DT_DISTRIBUTE_IN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "distribute/ps_server.h"
#include "distribute/ps_wire.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "data/pipeline.h"
#include "data/problem.h"
#include "nn/hparams.h"

/* ---- the master's side ---- */

struct dt_in_graph_master;
struct dt_model_zoo;
struct dt_model;

/* One step's figures summed over every replica: dt_ps_replica_figures's
 * meanings (a text problem's token figures from every std server that
 * announced DT_PS_FEATURE_REPLICA_TEXT; `text` says whether all did). */
struct dt_in_graph_figures {
	double loss_sum;     /* of the replicas' mean batch losses */
	int64_t correct, examples;
	int64_t counted, seqs_correct;
	double nll_sum, bleu_sum;
	int64_t bleu_batches;
	int text;
};

/* Dials the `ntasks` std servers at `addrs` ("host:port") as `hello`,
 * retrying whatever a retry can fix until connect_s (named in the error as
 * --connect_timeout). *out: dt_in_graph_free. */
enum dt_status dt_in_graph_connect(struct dt_loop *loop, const char *const *addrs, int ntasks,
				   const struct dt_hello *hello, double connect_s, struct dt_in_graph_master **out,
				   struct dt_err *err) DT_MUST_CHECK;
/* Sets up server i with setups[i], for models of `num_params` parameters. */
enum dt_status dt_in_graph_setup(struct dt_in_graph_master *m, const struct dt_ps_replica_setup *setups,
				 size_t num_params, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
/* Step `step` at `params` (num_params): grad_sum (num_params) gets the sum of
 * every replica's gradient, *out the figures. */
enum dt_status dt_in_graph_step(struct dt_in_graph_master *m, int64_t step, const float *params, float *grad_sum,
				struct dt_in_graph_figures *out, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
/* Ends the run on every server (PS_END). */
enum dt_status dt_in_graph_end(struct dt_in_graph_master *m, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
/* A master that fails leaves without PS_END: closes every connection in
 * order, telling each std server why (SHUTDOWN's reason: "the master
 * failed: <why>"), which the server reports when it exits 3. Accepts NULL. */
void dt_in_graph_leave(struct dt_in_graph_master *m, const struct dt_err *why);
/* Closes every connection in order (a short wait for them to close); accepts NULL. */
void dt_in_graph_free(struct dt_in_graph_master *m);

/* ---- the std server's side ---- */

/* A text problem's side of a replica (data/text.h: token batches), which
 * this layer cannot build: the trainer's layer passes it down (train/'s
 * model and input for text problems). An image problem uses the zoo and
 * data/pipeline.h as before. */
struct dt_in_graph_text_ops {
	/* The model for `train`'s vocabularies, batches of hp->batch_size tokens. */
	enum dt_status (*model_new)(const void *arg, const struct dt_hparams *hp, const struct dt_dataset *train,
				    struct dt_model **out, struct dt_err *err);
	/* The token batches of shard `index` of `count` of `train` (borrowed),
	 * shuffled from `seed`, `batches` batches in: step s reads batch s. */
	enum dt_status (*input_new)(const void *arg, const struct dt_dataset *train, const struct dt_hparams *hp, uint64_t seed,
				    int index, int count, int64_t batches, void **out, struct dt_err *err);
	/* The next batch (its `general` set), valid until the next call. */
	enum dt_status (*input_next)(void *in, const struct dt_batch **out, struct dt_err *err);
	void (*input_free)(void *in); /* accepts NULL */
	const void *arg;
};

struct dt_in_graph_replica_config {
	const char *problem, *data_dir;  /* the server's own flags: the master's problem must match */
	const struct dt_data_options *data; /* image_folder and csv flags (data/problem.h); NULL: defaults */
	const struct dt_hparams *hp;     /* the server's (the master's dropout wins) */
	const struct dt_model_zoo *models; /* where hp->model is built from (nn/model.h), borrowed */
	int prefetch;
	const char *master_role;         /* only this task sets up replicas ("master", index 0) */
	uint32_t master_index;
	size_t num_params;               /* the model's, as the server built it */
	uint32_t features;               /* what the server's hello announces (DT_PS_FEATURE_*): with
					  * DT_PS_FEATURE_REPLICA_TEXT, replies to a master that announced
					  * it too carry the text figures */
	const struct dt_in_graph_text_ops *text; /* a text problem's model and batches; borrowed; NULL: images only */
	/* The program's own model and batches (the public API's source, train/
	 * local.h, through the same ops; `train` is empty for them): no problem
	 * is loaded, the master must name none. Borrowed; NULL: by problem. */
	const struct dt_in_graph_text_ops *source;
};

struct dt_in_graph_replica;

enum dt_status dt_in_graph_replica_new(const struct dt_in_graph_replica_config *cfg,
				       struct dt_in_graph_replica **out, struct dt_err *err) DT_MUST_CHECK;
void dt_in_graph_replica_free(struct dt_in_graph_replica *r);
const struct dt_ps_server_extension *dt_in_graph_replica_extension(struct dt_in_graph_replica *r);
/* Why the replica cannot go on (its master left before PS_END), or NULL. NULL r: NULL. */
const struct dt_err *dt_in_graph_replica_failure(const struct dt_in_graph_replica *r);
int64_t dt_in_graph_replica_steps(const struct dt_in_graph_replica *r);

#endif
