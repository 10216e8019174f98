/*
 * roles.h — what every distributed role builds, shared by the asynchronous
 * roles (ps_roles.c) and the synchronous ones (sync_roles.c). Private to
 * src/train/.
 */
#ifndef DT_TRAIN_ROLES_H
#define DT_TRAIN_ROLES_H

#include <stddef.h>

#include "base/err.h"
#include "data/problem.h"
#include "distribute/placement.h"
#include "distribute/ps_client.h"
#include "net/loop.h"
#include "net/messages.h"
#include "nn/model.h"
#include "train/ps_roles.h"

/* The data a role needs, the model, the placement, its hello, its loop. */
struct dt__role {
	struct dt_dataset train, test;
	struct dt_model *model;
	int model_borrowed;             /* the trainer's from cfg->train->source: not freed here */
	struct dt_placement placement;
	struct dt_hello hello;
	struct dt_loop *loop;
	const struct dt_variable *vars; /* (nvars) the model's, contiguous copy */
	struct dt_variable *vars_copy;
	int nvars;
};

/* Loads the train split (load_train) and/or the test split (the chief's
 * evaluation; a ps needs only the input shape), builds the model for
 * batches of `batch` (0: 1; -1: the training max_batch, dt_train_max_batch) — with train->source, no data: a trainer
 * (load_train) borrows the source's model, a ps makes one — the placement over the ps tasks and this task's
 * hello, and a loop. `r` must be zeroed; release it even on failure. */
enum dt_status dt__role_setup(const struct dt_ps_run_config *cfg, int load_train, int load_test, int batch,
			      struct dt__role *r, struct dt_err *err) DT_MUST_CHECK;
void dt__role_release(struct dt__role *r);

/* Row-sparse embedding tables through the ps (ps_sparse.c; nn/model.h's
 * dt_model_sparse_vars): start marks them on the client unless something
 * reads every row anyway (weight decay, replicas,
 * --deterministic) or a ps is too old to serve rows (then n stays 0 and the
 * tables move densely, as the log says); compute takes the next batch, pulls
 * the rows it reads (after: -1 at once, else past that synchronous step) and
 * runs its forward and backward pass, whose round then pushes those rows. A
 * row pull that finds a ps lost (or the run ended by the ps) does not fail
 * the step: the pass runs on the rows as they were and the round after it,
 * failing on the same ps, goes through the recovery that discards its
 * gradient, or ends the run (as after a dense pull). */
struct dt_session;
struct dt_step_figures;
struct dt__sparse_rows {
	int n;                          /* tables moved by rows; 0: none */
	int num_ps;
	int *vars;                      /* (n) variable indices */
	int64_t *rows;                  /* (largest first dimension) */
	struct dt_model *model;         /* borrowed */
};
enum dt_status dt__sparse_rows_start(struct dt__sparse_rows *sp, const struct dt_ps_run_config *cfg,
				     struct dt_model *m, struct dt_ps_client *c, struct dt_err *err) DT_MUST_CHECK;
void dt__sparse_rows_release(struct dt__sparse_rows *sp);
/* Every row of every table moved by rows, pulled at once into the model's
 * params (the strategy's before_eval, train/strategy.h): the trainer's copy
 * otherwise holds only the rows its recent batches pulled, as they were
 * before those steps' pushes. The next compute sets its batch's rows again.
 * A ps lost (or the run ended) meanwhile is not this call's failure: the
 * evaluation reads the rows as they were, and the next round meets the
 * loss. Nothing to do with n == 0. */
enum dt_status dt__sparse_rows_pull_all(struct dt__sparse_rows *sp, struct dt_ps_client *c, int64_t deadline,
				        struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt__sparse_rows_compute(struct dt__sparse_rows *sp, struct dt_session *s, struct dt_ps_client *c,
				       int64_t after, int64_t deadline, struct dt_step_figures *out,
				       struct dt_err *err) DT_MUST_CHECK;

/* v if positive, else d. */
double dt__or_default(double v, double d);

/* A non-chief waits for the chief's initialization, saying what it waits
 * for, until --connect_timeout (wait_model_s); a ps restarted or paused
 * meanwhile is reconnected to within the same wait (dt__reconnect). DT_OK
 * with *ended set when the run is already over. */
enum dt_status dt__wait_for_model(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
				  int *ended, struct dt_err *err) DT_MUST_CHECK;

/* The one round of a trainer that starts after the run reached
 * --train_steps (late, or restarted near the end; dt__wait_for_model said
 * *ended) and takes no step: it pulls the run's variables, every table
 * moved by rows too (sp), so that what it ends with (the API's result) is
 * the run's and not its own initialization. `sync`: a synchronous ps's pull
 * that waits for no step (a synchronous ps keeps no trainer positions: the
 * chief's checkpoints hold the one global position every trainer's derives
 * from); else PS_STEP(0) and a pull, the PS_STEP carrying the data position
 * the caller set (dt_ps_client_set_position), which the asynchronous chief's
 * final checkpoint waits for (dt_ps_units_wait_final). The chief may end
 * the run meanwhile: then there is nothing to pull, nobody waits for the
 * report, and the trainer ends with its own initial variables, as the log
 * says (DT_OK). *gstep: ps:0's global step when the pull brought it (what
 * the trainer's last line reports: "did 0 of N"), else unchanged. Any other
 * failure is returned. */
enum dt_status dt__late_round(const struct dt_ps_run_config *cfg, struct dt_ps_client *c, struct dt__sparse_rows *sp,
			      int sync, int64_t *gstep, struct dt_err *err) DT_MUST_CHECK;

/* Replaces the lost connection to ps `ps`, retrying whatever a retry can fix
 * (refused, reset, a HELLO with no answer from a paused ps) until
 * --connect_timeout from now or `cap` (absolute; DT_DEADLINE_NONE: none),
 * whichever comes first; the error names that deadline. gstep (-1: unknown)
 * is for the log. With `ended` (a worker): between attempts it looks for the
 * run's final checkpoint in --output_dir, and when it is there stops
 * waiting, sets *ended and says so (a worker paused across the end of the
 * run finds its ps gone for good). */
enum dt_status dt__reconnect(const struct dt_ps_run_config *cfg, struct dt_ps_client *c, int ps, int64_t gstep,
			     int64_t cap, int *ended, struct dt_err *err) DT_MUST_CHECK;

/* Connects to every ps of the cluster, with the buffers of r's model. */
enum dt_status dt__connect_ps(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client **out,
			      struct dt_err *err) DT_MUST_CHECK;

#endif
