#include "train/local.h"
#include "train/common.h"

#include <string.h>

#include "nn/model.h"
#include "nn/optimizer.h"
#include "nn/regularize.h"
#include "train/session.h"

void dt_train_config_defaults(struct dt_train_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->problem = "fashion_mnist";
	cfg->train_steps = 2000;
	cfg->eval_at_end = 1;
	cfg->log_every = 100;
	cfg->seed = 1;
	cfg->threads = 1;
	cfg->prefetch = 1;
	cfg->output_dir = "";
	cfg->keep_checkpoint_max = 5;
	cfg->save_summary_steps = 100;
}

/* ---- the local strategy (train/strategy.h) ----
 * One process: the variables from the checkpoint or the seed, the gradient
 * (the in-process replicas' sum, if any) applied as it is. */

static enum dt_status local_start(struct dt_session *s, void *self, struct dt_strategy_start *out, struct dt_err *err)
{
	(void)self;
	return dt__session_restore_or_init(s, out, err);
}

static enum dt_status local_apply(struct dt_session *s, void *self, const struct dt_step_figures *fig, float lr,
				  struct dt_strategy_step *io, struct dt_err *err)
{
	(void)self, (void)fig;
	struct dt_model *m = dt__session_model(s);
	if (dt__session_config(s)->micro_batch > 0) {
		enum dt_status st = dt__session_apply_fixed(s, lr, io->step, err);
		if (!st)
			dt_model_apply_constraints(m);
		return st;
	}
	const float wd = (float)dt__session_config(s)->hp.weight_decay;
	if (wd > 0)
		dt_train_add_weight_decay(m, wd);
	io->grad_norm = dt_train_clip_grads(m, &dt__session_config(s)->hp, 1);
	dt_optimizer_apply(dt__session_optimizer(s), dt_model_params(m), dt_model_grads(m), 0, dt_model_num_params(m),
			   lr, io->step);
	dt_model_apply_constraints(m);
	return DT_OK;
}

const struct dt_strategy dt_strategy_local = {
	.name = "local", .start = local_start, .apply = local_apply, .fixed_point = 1, .constraints = 1,
	.clip_where = "before the update (after the replicas' reduce; with --deterministic, the fixed-point mean)",
};

enum dt_status dt_train_local(const struct dt_train_config *cfg, struct dt_train_result *res, struct dt_err *err)
{
	memset(res, 0, sizeof(*res));
	if (cfg->train_steps <= 0)
		return dt_err_set(err, DT_USAGE, "train_steps must be positive, got %lld", (long long)cfg->train_steps);
	enum dt_status st = dt_hparams_validate(&cfg->hp, err);
	if (st)
		return st;
	return dt_train_run(cfg, cfg->eval_at_end || cfg->eval_every > 0 || cfg->eval_after_save, &dt_strategy_local,
			    NULL, res, err);
}
