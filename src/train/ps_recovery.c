#include "train/ps_recovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/retry.h"
#include "net/conn.h"
#include "train/roles.h"
#include "train/strategy.h"
#include "train/warm_start.h"

static double or_default(double v, double d) { return v > 0 ? v : d; }

static int64_t round_deadline(const struct dt_ps_chief *ch)
{
	return dt_deadline_in(or_default(ch->cfg->round_s, 60));
}

enum dt_status dt_ps_chief_init(struct dt_ps_chief *ch, const struct dt_ps_run_config *cfg, struct dt_model *model,
				const struct dt_placement *pl, struct dt_err *err)
{
	memset(ch, 0, sizeof(*ch));
	ch->cfg = cfg;
	ch->model = model;
	ch->pl = pl;
	ch->restored_step = -1;
	snprintf(ch->num_ps, sizeof(ch->num_ps), "%d", pl->num_ps);
	ch->meta[0] = (struct dt_ckpt_kv){ "distribution", "parameter_server_async" };
	ch->meta[1] = (struct dt_ckpt_kv){ "num_ps", ch->num_ps };
	const struct dt_train_config *tc = cfg->train;
	if (!tc->output_dir || !*tc->output_dir)
		return DT_OK;
	size_t n = dt_model_num_params(model);
	enum dt_status st = dt_optimizer_init(&ch->opt, &tc->hp, n, err);
	if (st)
		return st;
	ch->bufs = (struct dt_ps_state_bufs){
		.params = dt_xcalloc(n ? n : 1, sizeof(float)), .slots = ch->opt.slots,
		.num_slots = (uint32_t)ch->opt.num_slots, .num_params = n,
	};
	if ((st = dt_saver_init(&ch->saver, tc->output_dir, tc->save_checkpoints_steps, tc->save_checkpoints_secs,
				tc->keep_checkpoint_max, err)))
		return st;
	ch->saving = 1;
	ch->hparams_json = dt_ckpt_hparams_json(&tc->hp);
	if (tc->save_summary_steps > 0) {
		struct dt_summary_config sc = { .dir = tc->output_dir, .every = tc->save_summary_steps,
						.last_step = tc->train_steps, .batch_size = tc->hp.batch_size,
						.hp = &tc->hp, .problem = tc->source ? NULL : tc->problem };
		if ((st = dt_summary_new(&sc, &ch->summary, err)))
			return st;
	}
	return DT_OK;
}

void dt_ps_chief_release(struct dt_ps_chief *ch)
{
	if (ch->saving)
		dt_saver_release(&ch->saver);
	dt_summary_free(ch->summary);
	free(ch->hparams_json);
	free(ch->bufs.params);
	dt_optimizer_release(&ch->opt);
	memset(ch, 0, sizeof(*ch));
}

/* The checkpoint's view of the snapshot buffers. */
static void contents_of(struct dt_ps_chief *ch, struct dt_ckpt_contents *c)
{
	dt_ckpt_contents_for_model(c, ch->model);
	dt_ckpt_contents_set_optimizer(c, &ch->opt);
	c->params = ch->bufs.params;
	c->hparams = ch->hparams_json;
	c->extra = ch->meta;
	c->num_extra = 2;
	if (ch->units && ch->units->text[0]) {
		memcpy(&ch->meta[2], ch->units->kv, sizeof(ch->units->kv));
		c->num_extra = 5;
	}
	c->pipeline_epoch = ch->pos_epoch;
	c->pipeline_offset = ch->pos_offset;
	c->pipeline_global = ch->pos_global;
}

/* Global step from ps:0, then every shard's snapshot into the buffers. */
static enum dt_status snapshot(struct dt_ps_chief *ch, struct dt_ps_client *c, int64_t *step, struct dt_err *err)
{
	struct dt_ps_status s;
	enum dt_status st = dt_ps_client_status(c, 0, &s, round_deadline(ch), err);
	for (int i = 0; !st && i < ch->pl->num_shards; i++) {
		const struct dt_shard *sh = &ch->pl->shards[i];
		int64_t updates;
		st = dt_ps_snapshot_pull(dt_ps_client_conn(c, sh->ps), sh, &ch->bufs, &updates, round_deadline(ch), err);
	}
	if (!st && ch->units) /* after the shards: positions at least as new as the values */
		st = dt_ps_units_meta(ch->units, dt_ps_client_conn(c, 0), round_deadline(ch), err);
	if (st)
		return dt_err_prefix(err, "cannot take a snapshot of the parameter servers");
	*step = s.global_step;
	return DT_OK;
}

static enum dt_status save(struct dt_ps_chief *ch, struct dt_ps_client *c, int64_t *step, struct dt_err *err)
{
	enum dt_status st = snapshot(ch, c, step, err);
	if (st)
		return st;
	struct dt_ckpt_contents cc;
	contents_of(ch, &cc);
	cc.global_step = *step;
	return dt_saver_save(&ch->saver, &cc, err);
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

/* Fault injection for the tests (DTRAIN_TEST_RESTORE_DELAY_S, docs/TESTING.md):
 * a restore that stays in flight that long between the global step and the
 * shards, turning the loop, so a test can kill the ps in the middle of it. */
static void test_restore_delay(struct dt_ps_client *c)
{
	const char *env = getenv("DTRAIN_TEST_RESTORE_DELAY_S");
	double s = env ? atof(env) : 0;
	if (!(s > 0 && s < 600))
		return;
	dt_info("test hook: the restore pauses for %g s (DTRAIN_TEST_RESTORE_DELAY_S)", s);
	enum dt_status waited = dt_loop_run_until(dt_conn_loop(dt_ps_client_conn(c, 0)), never, NULL, dt_deadline_in(s),
						  "the test's restore delay", NULL);
	(void)waited;
}

/* Writes the loaded checkpoint (in the buffers, at `step`) onto every ps:
 * the step on ps:0 first, so no trainer sees ps:0 initialized at the old step.
 * The shards of the ps that are initialized go before those of the empty ones
 * (empty[ps]; NULL: none): a worker waits until every ps is initialized
 * (dt__wait_for_model), so it never pulls, or pushes a synchronous gradient
 * that a later shard's restore would drop, while the restore is half done. */
static enum dt_status restore_all(struct dt_ps_chief *ch, struct dt_ps_client *c, int64_t step, const int *empty,
				  struct dt_err *err)
{
	enum dt_status st = dt_ps_set_step(dt_ps_client_conn(c, 0), step, round_deadline(ch), err);
	for (int ps = 1; ch->sync && ps < ch->pl->num_ps && !st; ps++)
		st = dt_ps_set_step(dt_ps_client_conn(c, ps), step, round_deadline(ch), err);
	if (!st)
		test_restore_delay(c);
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; !st && i < ch->pl->num_shards; i++) {
			const struct dt_shard *sh = &ch->pl->shards[i];
			if ((empty && empty[sh->ps]) != pass)
				continue;
			/* Every round pushes every shard once, so a shard's update count is the global step. */
			st = dt_ps_snapshot_push(dt_ps_client_conn(c, sh->ps), sh, &ch->bufs, step, round_deadline(ch), err);
		}
	if (st)
		return dt_err_prefix(err, "cannot restore the checkpoint onto the parameter servers");
	ch->restored_step = step;
	ch->last_gstep = step;
	dt_saver_mark(&ch->saver, step);
	return DT_OK;
}

/* Loads the newest checkpoint into the buffers; *found = 0 when there is none. */
static enum dt_status load_latest(struct dt_ps_chief *ch, int *found, int64_t *step, char *path, size_t cap,
				  struct dt_err *err)
{
	*found = 0;
	if (!ch->saving)
		return DT_OK;
	struct dt_ckpt_contents cc;
	contents_of(ch, &cc);
	enum dt_status st = dt_ckpt_restore_latest(ch->cfg->train->output_dir, &cc, found, path, cap, err);
	if (st)
		return st;
	*step = cc.global_step;
	return DT_OK;
}

/* Which ps are empty, not initialized (out[ps] = 1), how many (*n), and ps:0's
 * global step (*step0). */
static enum dt_status uninitialized(struct dt_ps_chief *ch, struct dt_ps_client *c, int *out, int *n, int64_t *step0,
				    struct dt_err *err)
{
	*n = 0;
	for (int ps = 0; ps < ch->pl->num_ps; ps++) {
		struct dt_ps_status s;
		enum dt_status st = dt_ps_client_status(c, ps, &s, round_deadline(ch), err);
		if (st)
			return st;
		out[ps] = !s.initialized;
		*n += out[ps];
		if (ps == 0)
			*step0 = s.global_step;
	}
	return DT_OK;
}

enum dt_status dt_ps_chief_start(struct dt_ps_chief *ch, struct dt_ps_client *c, struct dt_err *err)
{
	const int num_ps = ch->pl->num_ps;
	int *empty = dt_xcalloc((size_t)num_ps, sizeof(*empty));
	int64_t step0 = 0, step = 0;
	int n = 0, found = 0;
	enum dt_status st = uninitialized(ch, c, empty, &n, &step0, err);
	char path[DT_CKPT_PATH_MAX];
	if (!st && n > 0 && !(st = load_latest(ch, &found, &step, path, sizeof(path), err)) && found) {
		dt_info("restoring %s (global step %lld) onto %d parameter server(s)%s", path, (long long)step, num_ps,
			n < num_ps ? ", initialized ones included, so the model is one consistent state" : "");
		st = restore_all(ch, c, step, empty, err);
	} else if (!st && n > 0) {
		if (ch->saving)
			dt_info("no checkpoint in '%s': initializing the variables from the seed", ch->cfg->train->output_dir);
		const struct dt_train_config *tc = ch->cfg->train;
		st = dt_warm_start_init(ch->model, tc->seed, tc->warm_start_from, tc->warm_start_vars, err);
		for (int ps = 0; ps < num_ps && !st; ps++)
			if (empty[ps] && !(st = dt_ps_client_init(c, ps, round_deadline(ch), err)))
				dt_info("initialized ps:%d", ps);
	}
	for (int ps = 0; ps < num_ps && !st && !found; ps++)
		if (!empty[ps])
			dt_info("ps:%d is already initialized (global step %lld): keeping its variables", ps, (long long)step0);
	if (!st && !found)
		ch->last_gstep = step0;
	if (!st && ch->saving && !found)
		dt_saver_mark(&ch->saver, step0);
	free(empty);
	return st;
}

static int due(const struct dt_saver *s, int64_t step)
{
	if (s->every_steps > 0)
		return step > s->last_step && step / s->every_steps > s->last_step / s->every_steps;
	return dt_saver_due(s, step);
}

enum dt_status dt_ps_chief_after_step(struct dt_ps_chief *ch, struct dt_ps_client *c, int64_t gstep,
				      const struct dt_step_figures *fig, float lr, struct dt_err *err)
{
	/* Other trainers move the global step too, so the chief's steps skip
	 * numbers: a record (and a checkpoint by steps) is due when the step
	 * crosses a multiple of the cadence, not only when it lands on one. */
	int64_t every = ch->cfg->train->save_summary_steps, prev = ch->last_gstep;
	int64_t tag = every > 0 && gstep / every > prev / every && gstep % every ? gstep / every * every : gstep;
	dt_summary_text(ch->summary, fig->counted, fig->examples, fig->seqs_correct, fig->nll_sum, fig->bleu_sum,
			fig->bleu_batches); /* a text problem's t2t metrics, as the session's own summaries */
	dt_summary_step(ch->summary, tag, fig->loss, fig->correct, lr);
	ch->last_gstep = gstep;
	if (!ch->saving || !due(&ch->saver, gstep) || gstep >= ch->cfg->train->train_steps)
		return DT_OK; /* the last one is dt_ps_chief_final's */
	int64_t step;
	enum dt_status st = snapshot(ch, c, &step, err);
	if (st || step >= ch->cfg->train->train_steps)
		return st; /* another trainer reached the end: the final checkpoint is the one at the end */
	struct dt_ckpt_contents cc;
	contents_of(ch, &cc);
	cc.global_step = step;
	return dt_saver_save(&ch->saver, &cc, err);
}

enum dt_status dt_ps_chief_final(struct dt_ps_chief *ch, struct dt_ps_client *c, int64_t *gstep, struct dt_err *err)
{
	if (!ch->saving)
		return DT_OK;
	enum dt_status st = save(ch, c, gstep, err);
	if (!st)
		memcpy(dt_model_params(ch->model), ch->bufs.params, ch->bufs.num_params * sizeof(float));
	return st;
}

int dt_ps_any_lost(const struct dt_ps_client *c, int num_ps)
{
	for (int ps = 0; ps < num_ps; ps++)
		if (dt_ps_client_lost(c, ps))
			return 1;
	return 0;
}

/* The chief's part: the ps that came back empty get the latest checkpoint
 * (onto every ps) or, with none, the chief's own copy. */
static enum dt_status chief_restore(struct dt_ps_chief *ch, struct dt_ps_client *c, int64_t gstep, struct dt_err *err)
{
	const int num_ps = ch->pl->num_ps;
	int *empty = dt_xcalloc((size_t)num_ps, sizeof(*empty));
	int64_t step0 = 0, step = 0;
	int n = 0, found = 0;
	enum dt_status st = uninitialized(ch, c, empty, &n, &step0, err);
	/* Synchronous: restored even when every ps kept its state (one paused
	 * past the silence limit): the ps may have applied the step in flight or
	 * not, and a trainer whose connection closed may have pushed its
	 * gradient for it or not; a restore makes them one state again. */
	if (ch->sync && n == 0)
		n = -1;
	char path[DT_CKPT_PATH_MAX];
	if (!st && n != 0 && !(st = load_latest(ch, &found, &step, path, sizeof(path), err)) && found) {
		dt_warn("restoring %s onto the parameter servers: global step %lld -> %lld (%lld step(s) to redo)", path,
			(long long)gstep, (long long)step, (long long)(gstep - step));
		st = restore_all(ch, c, step, empty, err);
		if (!st)
			dt_info("restored global step %lld onto %d parameter server(s)", (long long)step, num_ps);
	} else if (!st && n != 0) {
		/* Synchronous: every ps has a step, and they must agree (the live
		 * ones may have applied the chief's last step or not); set first. */
		for (int ps = 0; ch->sync && ps < num_ps && !st; ps++)
			st = dt_ps_set_step(dt_ps_client_conn(c, ps), gstep, round_deadline(ch), err);
		for (int ps = 0; ps < num_ps && !st; ps++) {
			if (!empty[ps])
				continue;
			dt_warn("no checkpoint to restore ps:%d from: re-initializing it from this chief's latest copy of the "
				"variables (global step %lld); its optimizer slots start over", ps, (long long)gstep);
			if (ps == 0 && !ch->sync)
				st = dt_ps_set_step(dt_ps_client_conn(c, 0), gstep, round_deadline(ch), err);
			if (!st)
				st = dt_ps_client_init(c, ps, round_deadline(ch), err);
		}
	}
	free(empty);
	return st;
}

/* One pass of the recovery: reconnect every lost ps, restore (chief) or wait
 * for the model (worker), pull. *reconnected is 0 when the failure was a ps
 * that did not come back (its deadline has passed: final). With `sc`
 * (synchronous), the chief configures a ps that came back before it restores
 * it, a worker sends its configuration once the model is there, and the pull
 * is a synchronous one that is answered at once with the step every ps is at. */
static enum dt_status recover_once(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
				   struct dt_ps_chief *ch, const struct dt_ps_sync_config *sc, int64_t *gstep,
				   int *ended, int *reconnected, struct dt_err *err)
{
	const int num_ps = cfg->cluster->num_ps_replicas;
	enum dt_status st = DT_OK;
	*reconnected = 0;
	for (int ps = 0; ps < num_ps && !st && !*ended; ps++)
		if (dt_ps_client_lost(c, ps))
			st = dt__reconnect(cfg, c, ps, *gstep, DT_DEADLINE_NONE, ch ? NULL : ended, err);
	if (st)
		return st;
	*reconnected = 1;
	if (!*ended && ch && sc)
		st = dt_ps_client_sync_config(c, sc, dt_deadline_in(or_default(cfg->round_s, 60)), err);
	if (!st && !*ended)
		st = ch ? chief_restore(ch, c, *gstep, err) : dt__wait_for_model(cfg, r, c, ended, err);
	if (!st && !*ended && !ch && sc)
		st = dt_ps_client_sync_config(c, sc, dt_deadline_in(or_default(cfg->round_s, 60)), err);
	if (!st && !*ended && sc) {
		struct dt_ps_sync_result sr;
		st = dt_ps_client_sync_round(c, 0, 0, 0, -1, &sr, dt_deadline_in(or_default(cfg->round_s, 60)), err);
		if (!st)
			*gstep = sr.min_step;
	} else if (!st && !*ended) {
		st = dt_ps_client_round(c, 0, 0, 0, 1, gstep, dt_deadline_in(or_default(cfg->round_s, 60)), err);
	}
	if (st && !ch && dt_ps_client_ended_by_ps(c)) {
		/* The chief ended the run meanwhile: the ps said so in order. */
		dt_info("the parameter servers closed: the run is over");
		*ended = 1;
		return DT_OK;
	}
	return st;
}

static enum dt_status recover(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
			      struct dt_ps_chief *ch, const struct dt_ps_sync_config *sc, int64_t *gstep, int *ended,
			      struct dt_err *err)
{
	const int num_ps = cfg->cluster->num_ps_replicas;
	struct dt_err e = DT_ERR_INIT;
	/* A ps lost again while it is being restored (or while a worker waits
	 * for it, or pulls) is one more lost connection, not the end: each pass
	 * waits for it anew, every wait with its own deadline. Passes need a
	 * connection that came back and was lost again, so they end when the
	 * ps stops coming back (--connect_timeout) or stops dying. */
	for (int pass = 1;; pass++) {
		int reconnected = 0;
		enum dt_status st = recover_once(cfg, r, c, ch, sc, gstep, ended, &reconnected, &e);
		if (st && reconnected && dt_retry_transient(st) && dt_ps_any_lost(c, num_ps)) {
			dt_warn("a parameter server was lost again during recovery pass %d (%s): recovering again", pass,
				e.msg);
			continue;
		}
		if (st && err)
			*err = e;
		if (!st && !*ended)
			dt_info("continuing at %s step %lld", sc ? "synchronous" : "global", (long long)*gstep);
		return st;
	}
}

enum dt_status dt_ps_recover(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
			     struct dt_ps_chief *ch, int64_t *gstep, int *ended, struct dt_err *err)
{
	return recover(cfg, r, c, ch, NULL, gstep, ended, err);
}

enum dt_status dt_ps_recover_sync(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
				  struct dt_ps_chief *ch, const struct dt_ps_sync_config *sc, int64_t *step, int *ended,
				  struct dt_err *err)
{
	DT_ASSERT(!ch || ch->sync);
	return recover(cfg, r, c, ch, sc, step, ended, err);
}

enum dt_status dt_ps_trainer_start(const struct dt_ps_run_config *cfg, struct dt__role *r, struct dt_ps_client *c,
				   struct dt_ps_chief *ch, int64_t *gstep, int *ended, struct dt_err *err)
{
	enum dt_status st = ch ? dt_ps_chief_start(ch, c, err) : dt__wait_for_model(cfg, r, c, ended, err);
	if (!st && !*ended)
		st = dt_ps_client_round(c, 0, 0, 0, 1, gstep, dt_deadline_in(or_default(cfg->round_s, 60)), err);
	if (st && !ch && dt_ps_client_ended_by_ps(c)) {
		/* The chief ended the run meanwhile: the ps said so in order. */
		dt_info("the parameter servers closed: the run is over");
		*ended = 1;
		return DT_OK;
	}
	if (st && dt_retry_transient(st) && dt_ps_any_lost(c, cfg->cluster->num_ps_replicas)) {
		struct dt_err e = DT_ERR_INIT;
		dt_warn("a parameter server was lost while starting (%s): recovering", err ? err->msg : "?");
		st = dt_ps_recover(cfg, r, c, ch, gstep, ended, &e);
		if (st && err)
			*err = e;
	}
	return st;
}
