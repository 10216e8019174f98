/* The training session (train/session.h): its step-by-step interface against
 * run-to-end, the per-step hook, calls in the wrong order, and the input
 * interface's repositioning (train/input.h). */
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "models/builtin.h"
#include "nn/model.h"
#include "train/common.h"
#include "train/session.h"

static void session_config(struct dt_train_config *cfg, int64_t steps)
{
	struct dt_err err = DT_ERR_INIT;
	dt_train_config_defaults(cfg);
	cfg->models = &dt_models_builtin;
	cfg->problem = "synthetic";
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &cfg->hp, &err), &err);
	DT_CHECK_OK(dt_hparams_parse(&cfg->hp, "dropout=0.3,weight_decay=0.0001,batch_size=16", &err), &err);
	cfg->train_steps = steps;
	cfg->eval_at_end = 1;
	cfg->log_every = 0;
	cfg->output_dir = "";
}

struct hook_log {
	int calls;
	int64_t last_step;
	int examples;
	int steps_in_order;
};

static void hook(void *arg, int64_t step, float loss, int examples)
{
	struct hook_log *h = arg;
	h->calls++;
	h->steps_in_order += step == h->last_step + 1 && loss == loss;
	h->last_step = step;
	h->examples += examples;
}

/* A local session on the synthetic problem; `t` holds its data and model. */
static struct dt_session *local_session(const struct dt_train_config *cfg, struct dt_train_setup *t)
{
	struct dt_err err = DT_ERR_INIT;
	memset(t, 0, sizeof(*t));
	DT_CHECK_OK(dt_train_setup_load(cfg, 1, t, &err), &err);
	struct dt_session_config sc;
	dt_train_setup_session(t, cfg, &sc);
	sc.strategy = &dt_strategy_local;
	struct dt_session *s = NULL;
	DT_CHECK_OK(dt_session_new(&sc, &s, &err), &err);
	return s;
}

DT_TEST(session, step_by_step_equals_run_to_end_and_calls_the_hook)
{
	struct dt_train_config cfg;
	session_config(&cfg, 25);
	struct dt_err err = DT_ERR_INIT;
	struct dt_train_setup ta, tb;
	struct dt_session *a = local_session(&cfg, &ta), *b = local_session(&cfg, &tb);
	DT_CHECK_INT_EQ(dt_session_global_step(a), 0);
	DT_CHECK_OK(dt_session_run(a, &err), &err);

	struct hook_log h = { 0 };
	dt_session_set_hook(b, hook, &h);
	for (int i = 0; i < 100 && !dt_session_should_stop(b); i++)
		DT_CHECK_OK(dt_session_step(b, &err), &err);
	DT_CHECK_INT_EQ(dt_session_global_step(b), 25);
	DT_CHECK_INT_EQ(h.calls, 25);
	DT_CHECK_INT_EQ(h.steps_in_order, 25);
	DT_CHECK_INT_EQ(h.examples, 25 * 16);
	/* No step past train_steps, and one finish. */
	DT_CHECK_INT_EQ(dt_session_step(b, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "no step left");
	DT_CHECK_OK(dt_session_finish(b, &err), &err);
	DT_CHECK_INT_EQ(dt_session_finish(b, &err), DT_USAGE);

	DT_CHECK(memcmp(dt_model_params(ta.model), dt_model_params(tb.model),
			dt_model_num_params(ta.model) * sizeof(float)) == 0);
	struct dt_train_result ra, rb;
	dt_session_result(a, &ra);
	dt_session_result(b, &rb);
	DT_CHECK_INT_EQ(ra.steps, 25);
	DT_CHECK(ra.final_loss == rb.final_loss);
	DT_CHECK(ra.eval.examples > 0 && ra.eval.accuracy == rb.eval.accuracy);
	/* An evaluation now sees the same variables as the final one. */
	struct dt_eval_result ev;
	DT_CHECK_OK(dt_session_evaluate(b, &ev, &err), &err);
	DT_CHECK(ev.accuracy == rb.eval.accuracy && ev.loss == rb.eval.loss);
	dt_session_free(a);
	dt_session_free(b);
	dt_train_setup_release(&ta);
	dt_train_setup_release(&tb);
}

/* Through dt_train_local, the figures equal the session's own. */
DT_TEST(session, local_training_is_the_session_run)
{
	struct dt_train_config cfg;
	session_config(&cfg, 12);
	struct dt_err err = DT_ERR_INIT;
	struct dt_train_result res, sres;
	DT_CHECK_OK(dt_train_local(&cfg, &res, &err), &err);
	struct dt_train_setup t;
	struct dt_session *s = local_session(&cfg, &t);
	DT_CHECK_OK(dt_session_run(s, &err), &err);
	dt_session_result(s, &sres);
	DT_CHECK_INT_EQ(res.steps, sres.steps);
	DT_CHECK(res.final_loss == sres.final_loss);
	DT_CHECK(res.eval.loss == sres.eval.loss);
	dt_session_free(s);
	dt_train_setup_release(&t);
}

DT_TEST(session, evaluate_without_a_test_split_is_a_usage_error)
{
	struct dt_train_config cfg;
	session_config(&cfg, 3);
	cfg.eval_at_end = 0;
	struct dt_err err = DT_ERR_INIT;
	struct dt_train_setup t;
	memset(&t, 0, sizeof(t));
	DT_CHECK_OK(dt_train_setup_load(&cfg, 0, &t, &err), &err);
	struct dt_session_config sc;
	dt_train_setup_session(&t, &cfg, &sc);
	sc.strategy = &dt_strategy_local;
	struct dt_session *s = NULL;
	DT_CHECK_OK(dt_session_new(&sc, &s, &err), &err);
	struct dt_eval_result ev;
	DT_CHECK_INT_EQ(dt_session_evaluate(s, &ev, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "no test split");
	DT_CHECK_OK(dt_session_run(s, &err), &err);
	dt_session_free(s);
	dt_train_setup_release(&t);
}

/* Starting k batches in gives the batch and position that reading k batches gives. */
DT_TEST(session, input_started_at_a_batch_continues_the_stream)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_dataset d;
	DT_CHECK_OK(dt_problem_load("synthetic", NULL, NULL, DT_SPLIT_TRAIN, 7, &d, &err), &err);
	struct dt_input *a = dt_input_dataset_new(&d, 32, 7, 1), *b = dt_input_dataset_new(&d, 32, 7, 0);
	DT_CHECK_OK(dt_input_start(a, 1, 3, 0, 0, &err), &err);
	const int64_t per_epoch = dt_input_shard_size(a) / 32, k = per_epoch + 3;
	const struct dt_batch *x = NULL, *y = NULL;
	for (int64_t i = 0; i < k; i++)
		DT_CHECK_OK(dt_input_next(a, &x, &err), &err);
	DT_CHECK_OK(dt_input_start_at_batch(b, 1, 3, 32, k, &err), &err);
	int64_t ea, oa, eb, ob;
	dt_input_position(a, &ea, &oa);
	dt_input_position(b, &eb, &ob);
	DT_CHECK_INT_EQ(ea, 1);
	DT_CHECK_INT_EQ(ea, eb);
	DT_CHECK_INT_EQ(oa, ob);
	DT_CHECK_OK(dt_input_next(a, &x, &err), &err);
	DT_CHECK_OK(dt_input_next(b, &y, &err), &err);
	DT_CHECK_INT_EQ(x->size, y->size);
	DT_CHECK(memcmp(x->y, y->y, (size_t)x->size) == 0);
	dt_input_free(a);
	dt_input_free(b);
	dt_dataset_release(&d);
}
