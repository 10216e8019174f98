/*
 * ps_sparse.c — a ps trainer's row-sparse variables (train/roles.h,
 * docs/DISTRIBUTED.md "Sparse rows"): before each forward pass the rows the
 * batch reads are pulled, and the round after it pushes those rows only;
 * before an --eval_every evaluation every row is pulled.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "train/common.h"
#include "train/ps_recovery.h"
#include "train/roles.h"
#include "train/session.h"

enum dt_status dt__sparse_rows_start(struct dt__sparse_rows *sp, const struct dt_ps_run_config *cfg,
				     struct dt_model *m, struct dt_ps_client *c, struct dt_err *err)
{
	const struct dt_train_config *tc = cfg->train;
	memset(sp, 0, sizeof(*sp));
	sp->model = m;
	sp->num_ps = cfg->cluster->num_ps_replicas;
	const int n = dt_model_sparse_vars(m, NULL, 0);
	if (n == 0)
		return DT_OK;
	/* Each of these reads or changes every row of a table on every step. */
	const char *why = tc->hp.weight_decay > 0 ? "weight decay adds to every row's gradient"
			  : tc->replicas > 1	   ? "in-process replicas read their own copies"
			  : tc->micro_batch > 0	   ? "--deterministic moves fixed-point gradients"
						   : NULL;
	if (why) {
		dt_info("%d embedding table(s) move densely: %s", n, why);
		return DT_OK;
	}
	sp->vars = dt_xmallocarray((size_t)n, sizeof(int));
	(void)dt_model_sparse_vars(m, sp->vars, n);
	int64_t most = 1;
	for (int i = 0; i < n; i++) {
		const struct dt_variable *v = dt_model_variable(m, sp->vars[i]);
		enum dt_status st = dt_ps_client_set_sparse(c, sp->vars[i], err);
		if (st == DT_CONFIG) { /* an older ps: every table stays dense */
			dt_info("embedding tables move densely: %s", err->msg);
			free(sp->vars);
			sp->vars = NULL;
			return DT_OK;
		}
		if (st)
			return st;
		most = v->shape[0] > most ? v->shape[0] : most;
		dt_info("%s %s moves by rows: the rows each batch reads are pulled and pushed",
			v->name, "(embedding)");
	}
	sp->rows = dt_xmallocarray((size_t)most, sizeof(int64_t));
	sp->n = n;
	return DT_OK;
}

void dt__sparse_rows_release(struct dt__sparse_rows *sp)
{
	free(sp->vars);
	free(sp->rows);
	memset(sp, 0, sizeof(*sp));
}

enum dt_status dt__sparse_rows_compute(struct dt__sparse_rows *sp, struct dt_session *s, struct dt_ps_client *c,
				       int64_t after, int64_t deadline, struct dt_step_figures *out, struct dt_err *err)
{
	const struct dt_batch *b;
	enum dt_status st = dt__session_next_batch(s, &b, err);
	if (st)
		return st;
	if (!b->general) /* an image dataset's batch has no ids: no tables */
		return dt__session_compute_batch(s, b, NULL, NULL, out, err);
	for (int i = 0; i < sp->n; i++) {
		const size_t n = dt_model_batch_rows(sp->model, b->general, sp->vars[i], sp->rows);
		dt_ps_client_set_rows(c, sp->vars[i], sp->rows, n);
	}
	if ((st = dt_ps_client_pull_rows(c, after, deadline, err))) {
		const int ended = dt_ps_client_ended_by_ps(c);
		if (!ended && !dt_ps_any_lost(c, sp->num_ps))
			return st;
		/* As a dense pull's failure: the round after this pass fails on the
		 * same ps (its connection stays closed until a recovery reconnects
		 * it), and the strategy's apply does what it does for a failed round:
		 * the recovery (train/ps_recovery.h), which discards this gradient, or
		 * the end of the run the ps announced. The pass runs on the rows as
		 * they were. */
		if (ended)
			dt_debug("pulling the batch's embedding rows: the parameter servers closed");
		else
			dt_warn("pulling the batch's embedding rows: %s; the step's round recovers",
				err ? err->msg : "a ps was lost");
	}
	/* Clipped before the push as a dense gradient is (weight decay, which
	 * would make the tables dense, is off here): the rows no id touched hold
	 * zeros, so the global norm is the touched rows' and the dense variables'. */
	dt__session_push_begin(s);
	st = dt__session_compute_batch(s, b, NULL, NULL, out, err);
	if (!st)
		dt__session_push_end(s, 0, out);
	return st;
}

enum dt_status dt__sparse_rows_pull_all(struct dt__sparse_rows *sp, struct dt_ps_client *c, int64_t deadline,
				        struct dt_err *err)
{
	if (sp->n == 0)
		return DT_OK;
	for (int i = 0; i < sp->n; i++) {
		const int64_t rows = dt_model_variable(sp->model, sp->vars[i])->shape[0];
		for (int64_t r = 0; r < rows; r++)
			sp->rows[r] = r;
		dt_ps_client_set_rows(c, sp->vars[i], sp->rows, (size_t)rows);
	}
	enum dt_status st = dt_ps_client_pull_rows(c, -1, deadline, err);
	if (st && (dt_ps_client_ended_by_ps(c) || dt_ps_any_lost(c, sp->num_ps))) {
		dt_warn("pulling every embedding row before the evaluation: %s; it reads the rows as they were",
			err ? err->msg : "a ps was lost");
		return DT_OK;
	}
	return st ? dt_err_prefix(err, "cannot pull the embedding tables for the evaluation") : DT_OK;
}
