/*
 * ps_recovery.h — the chief's checkpoints and summaries in parameter-server
 * training, and what every trainer does when a ps dies (docs/DISTRIBUTED.md,
 * "Checkpoints and recovery in ps mode").
 *
 * The chief (struct dt_ps_chief):
 *   - at start, for the ps tasks that are not initialized: restores the
 *     newest checkpoint of --output_dir that loads (values, optimizer slots,
 *     global step) onto every ps, or, with none, initializes them from the
 *     seed as before; ps tasks that are all initialized keep their state (a
 *     restarted chief with live ps just continues);
 *   - after each of its steps, when the saver says a checkpoint is due:
 *     reads the global step from ps:0, pulls a snapshot of every shard
 *     (distribute/ps_snapshot.h) into a checkpoint-shaped buffer and saves it;
 *   - at the end, before ending the run on the ps: the final checkpoint,
 *     whose values it then evaluates, so its printed accuracy is the
 *     checkpoint's;
 *   - writes the TensorBoard scalars of its own steps (train/summary.h).
 *
 * Recovery (dt_ps_recover), after a trainer's round failed: when a ps
 * connection closed with an error, the trainer reconnects to that ps with
 * backoff until connect_s (a ps that does not come back by then is
 * DT_TIMEOUT naming it: exit 3). The chief then, if a ps came back not
 * initialized (a new process), restores the latest checkpoint onto every
 * ps — the global step returns to the checkpoint's, so the steps since are
 * redone, never counted twice — or, with no checkpoint yet, initializes
 * that ps from its own latest pulled copy of the variables (and sets the
 * global step it last saw, when ps:0 is the one), saying so. A worker waits
 * for the model as at start ("waiting for model: ps:1 not initialized"),
 * then continues.
 *
 * Single-threaded, on the trainer's loop; every call has a deadline.
 */
#ifndef DT_TRAIN_PS_RECOVERY_H
#define DT_TRAIN_PS_RECOVERY_H

#include <stdint.h>

#include "base/err.h"
#include "distribute/placement.h"
#include "distribute/ps_client.h"
#include "distribute/ps_snapshot.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "train/checkpoint.h"
#include "train/ps_roles.h"
#include "train/ps_units.h"
#include "train/summary.h"

struct dt_ps_chief {
	const struct dt_ps_run_config *cfg;
	struct dt_model *model;              /* borrowed: its params are the chief's pulled copy */
	const struct dt_placement *pl;       /* borrowed */
	int saving;                          /* an output dir is set */
	int sync;                            /* synchronous through the ps (train/sync_roles.h): every ps has a step */
	struct dt_saver saver;
	struct dt_optimizer opt;             /* only for its slot buffer and kind: the ps apply updates */
	struct dt_ps_state_bufs bufs;        /* the snapshot: params (owned) and opt's slots */
	char *hparams_json;                  /* owned */
	struct dt_summary *summary;          /* NULL without output dir or save_summary_steps */
	int64_t restored_step;               /* global step of the last restore; -1: none */
	int64_t last_gstep;                  /* the global step after the chief's previous step */
	struct dt_ckpt_kv meta[5];           /* extra checkpoint metadata: distribution, num_ps (and units' 3) */
	struct dt_ps_units *units;           /* asynchronous: the trainers' data positions (train/ps_units.h); borrowed */
	/* The input position the next checkpoint saves (synchronous training:
	 * the chief's, global, train/sync_roles.h); 0, 0, 0: none (async). */
	int64_t pos_epoch, pos_offset;
	int pos_global;
	char num_ps[16];
};

/* Sets up the saver, the snapshot buffers and the summaries (when
 * cfg->train->output_dir is set). Release with dt_ps_chief_release even on failure. */
enum dt_status dt_ps_chief_init(struct dt_ps_chief *ch, const struct dt_ps_run_config *cfg, struct dt_model *model,
				const struct dt_placement *pl, struct dt_err *err) DT_MUST_CHECK;
void dt_ps_chief_release(struct dt_ps_chief *ch);

/* At start: restores or initializes the ps tasks that need it (see above). */
enum dt_status dt_ps_chief_start(struct dt_ps_chief *ch, struct dt_ps_client *c, struct dt_err *err) DT_MUST_CHECK;

/* After a chief's step at global step `gstep`: the summary record and, when
 * due, a checkpoint. */
struct dt_step_figures;
enum dt_status dt_ps_chief_after_step(struct dt_ps_chief *ch, struct dt_ps_client *c, int64_t gstep,
				      const struct dt_step_figures *fig, float lr, struct dt_err *err) DT_MUST_CHECK;

/* At the end of the run, with an output dir: snapshots and saves the final
 * checkpoint and copies its values into the model; *gstep gets its step.
 * Without one: nothing. */
enum dt_status dt_ps_chief_final(struct dt_ps_chief *ch, struct dt_ps_client *c, int64_t *gstep,
				 struct dt_err *err) DT_MUST_CHECK;

/* True when some ps connection closed with an error. */
int dt_ps_any_lost(const struct dt_ps_client *c, int num_ps);

struct dt__role;

/* After a failed round with dt_ps_any_lost(): reconnects to the lost ps
 * tasks, each until --connect_timeout from its loss whatever the failure
 * (refused, reset, a paused ps that never answers the HELLO: train/roles.h,
 * dt__reconnect); the chief (ch != NULL) restores them, a worker waits for
 * the model; then pulls the variables. A ps lost again during any of that
 * (killed during its own restore) starts the recovery over: it is restored
 * again. *gstep is the trainer's last known global step, and gets the one it
 * continues from; *ended turns true when the run turned out to be over (a
 * worker that finds the ps ended, or gone with the final checkpoint in
 * --output_dir). The error names the deadline that ended the wait. */
enum dt_status dt_ps_recover(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
			     struct dt_ps_chief *ch, int64_t *gstep, int *ended, struct dt_err *err) DT_MUST_CHECK;

/* Synchronous training's recovery (train/sync_roles.h), the same passes:
 * after reconnecting, the chief configures the ps for synchronous training
 * (`sc`: a ps that came back is a new process that knows nothing) and
 * restores them (a checkpoint sets the step on every ps; with none, every ps
 * is set to the chief's last step *step and the empty ones initialized from
 * its copy); a worker waits for the model, then sends its configuration. The
 * final pull is synchronous and answered at once: *step gets the step every
 * ps is at, which the trainers continue from (holding their step until then
 * is what keeps the barrier whole). `ch`, when given, has ch->sync set. */
enum dt_status dt_ps_recover_sync(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
				  struct dt_ps_chief *ch, const struct dt_ps_sync_config *sc, int64_t *step, int *ended,
				  struct dt_err *err) DT_MUST_CHECK;

/* A trainer's start: the chief's dt_ps_chief_start (ch, initialized by
 * dt_ps_chief_init) or a worker's wait for the model (ch NULL), then the
 * first pull into *gstep; a ps lost meanwhile is recovered as mid-run. */
enum dt_status dt_ps_trainer_start(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
				   struct dt_ps_chief *ch, int64_t *gstep, int *ended, struct dt_err *err) DT_MUST_CHECK;

#endif
