/*
 * builtin.c — a session of dtrain's own models on its problems by name
 * (include/dtrain.h's dtrain_session_new_builtin): the zoo (models/builtin.h),
 * a Keras JSON or t2t's transformer, the hyper-parameters resolved t2t's way,
 * each role loading its data as it starts. `dtrain train` is this and flags.
 *
 * Its run is the engine's roles as they are (train/local.h, ps_roles.h,
 * sync_roles.h, allreduce_role.h, evaluator.h) on this thread, with no
 * source: the roles load the problem and build hp.model themselves, so a
 * built-in session trains exactly as the roles do, bit for bit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/alloc.h"
#include "base/log.h"
#include "base/strutil.h"
#include "models/builtin.h"
#include "nn/hparams.h"
#include "nn/keras.h"
#include "nn/model.h"
#include "train/evaluator.h"

void dtrain_builtin_init(dtrain_builtin *b)
{
	if (!b)
		return;
	*b = (dtrain_builtin){ .model = "cnn", .problem = "fashion_mnist", .data_threads = 2 };
}

static const char *str(const char *s)
{
	return s ? s : "";
}

/* t2t's way: the set gives the values, `model` picks the model (and the
 * default set), `hparams` overrides, a Keras JSON replaces the model. */
static enum dt_status resolve_hparams(const dtrain_builtin *b, struct dt_hparams *hp, struct dt_err *err)
{
	const char *model = b->model && *b->model ? b->model : "cnn";
	const char *set = str(b->hparams_set);
	if (!*set) {
		set = dt_hparams_default_set(model);
		if (!set) {
			size_t n;
			const char *const *names = dt_models_builtin_names(&n);
			char valid[256];
			dt_join(valid, sizeof(valid), names, n, ", ");
			const char *near = dt_nearest(model, names, n);
			return dt_err_set(err, DT_USAGE, "unknown model '%s'%s%s%s; valid: %s", model,
					  near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "", valid);
		}
	}
	enum dt_status st = dt_hparams_from_set(set, hp, err);
	if (st)
		return st;
	snprintf(hp->model, sizeof(hp->model), "%s", model);
	if (*str(b->hparams) && (st = dt_hparams_parse(hp, b->hparams, err)))
		return dt_err_prefix(err, "hparams");
	if ((st = dt_hparams_validate(hp, err)))
		return st;
	const char *keras = str(b->keras_model);
	if (*keras) {
		/* every role builds its model through dt_model_new, which reads this before the zoo */
		if (strlen(keras) >= sizeof(hp->keras_model))
			return dt_err_set(err, DT_USAGE, "keras_model: path longer than %zu bytes",
					  sizeof(hp->keras_model) - 1);
		snprintf(hp->keras_model, sizeof(hp->keras_model), "%s", keras);
		snprintf(hp->model, sizeof(hp->model), "keras");
	}
	return DT_OK;
}

/* The data options; sizes and channels not given come from the Keras
 * model's input when there is one. */
static enum dt_status resolve_data(const dtrain_builtin *b, struct dt_data_options *o, struct dt_err *err)
{
	dt_data_options_init(o);
	o->validation_split = b->validation_split;
	o->crop_to_aspect_ratio = b->crop_to_aspect_ratio;
	o->random_flip = b->random_flip;
	o->random_crop = b->random_crop;
	o->data_threads = b->data_threads;
	o->bad_images = b->skip_bad_images ? DT_BAD_IMAGES_SKIP : DT_BAD_IMAGES_FAIL;
	if (strlen(str(b->label_column)) >= sizeof(o->label_column))
		return dt_err_set(err, DT_USAGE, "label_column: longer than %zu bytes", sizeof(o->label_column) - 1);
	snprintf(o->label_column, sizeof(o->label_column), "%s", str(b->label_column));
	if (strlen(str(b->vocab_file)) >= sizeof(o->vocab_file))
		return dt_err_set(err, DT_USAGE, "vocab_file: longer than %zu bytes", sizeof(o->vocab_file) - 1);
	snprintf(o->vocab_file, sizeof(o->vocab_file), "%s", str(b->vocab_file));
	if (b->image_height < 0 || b->image_width < 0 || (b->image_height > 0) != (b->image_width > 0))
		return dt_err_set(err, DT_USAGE, "image_height, image_width: %dx%d; both positive, or both 0 (the "
						 "default)", b->image_height, b->image_width);
	if (b->channels != 0 && b->channels != 1 && b->channels != 3 && b->channels != 4)
		return dt_err_set(err, DT_USAGE, "channels: %d; 1, 3, 4, or 0 (the default)", b->channels);
	const char *keras = str(b->keras_model);
	if (*keras && (!b->image_height || !b->channels)) {
		struct dt_model *m;
		struct dt_keras_info info;
		enum dt_status st = dt_keras_load(keras, 1, &m, &info, err);
		if (st)
			return st;
		dt_model_free(m);
		if (info.input_rank == 3) {
			o->image_height = info.input_shape[0];
			o->image_width = info.input_shape[1];
			o->channels = info.input_shape[2];
		}
	}
	if (b->image_height) {
		o->image_height = b->image_height;
		o->image_width = b->image_width;
	}
	if (b->channels)
		o->channels = b->channels;
	return DT_OK;
}

dtrain_status dtrain_session_new_builtin(const dtrain_builtin *b, const dtrain_cluster *cluster, dtrain_session **out,
					 dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_new_builtin: out is NULL");
	*out = NULL;
	if (!b)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_new_builtin: the spec is NULL");
	const char *problem = b->problem && *b->problem ? b->problem : "fashion_mnist";
	if (strlen(problem) >= sizeof(((dtrain_session *)0)->problem) ||
	    strlen(str(b->data_dir)) >= sizeof(((dtrain_session *)0)->data_dir))
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_session_new_builtin: the %s is too long",
						 strlen(problem) >= 64 ? "problem name" : "data_dir");
	dtrain_session *s = dt_xcalloc(1, sizeof(*s));
	s->cl = dt__api_cluster(cluster, &s->local_cl, e);
	if (!s->cl) {
		free(s);
		return (dtrain_status)e->status;
	}
	dt__api_session_defaults(s);
	s->builtin = 1;
	enum dt_status st = resolve_hparams(b, &s->tc.hp, e);
	if (!st)
		st = resolve_data(b, &s->data, e);
	if (st) {
		dtrain_session_free(s);
		return (dtrain_status)st;
	}
	snprintf(s->problem, sizeof(s->problem), "%s", problem);
	snprintf(s->data_dir, sizeof(s->data_dir), "%s", str(b->data_dir));
	s->tc.problem = s->problem;
	s->tc.data_dir = s->data_dir;
	s->tc.data = &s->data;
	s->tc.models = &dt_models_builtin; /* mlp, lenet, cnn: written with the public builder */
	*out = s;
	return DTRAIN_OK;
}

/* The evaluator: the chief's checkpoints of output_dir on the problem's split. */
static enum dt_status evaluate_checkpoints(dtrain_session *s, struct dt_err *e)
{
	const struct dt_train_config *tc = &s->tc;
	if (!s->output_dir[0] && !(s->eval_once && s->warm_start_from[0]))
		return dt_err_set(e, DT_USAGE, "the evaluator needs output_dir: the directory the chief writes "
					       "checkpoints to (or, evaluating once, warm_start_from)");
	struct dt_eval_config ec = {
		.models = tc->models, .problem = tc->problem, .data_dir = tc->data_dir, .data = tc->data,
		.hp = tc->hp, .seed = tc->seed, .threads = tc->threads, .output_dir = s->output_dir,
		.split = s->eval_split, .mode = s->eval_walk, .once = s->eval_once, .train_steps = tc->train_steps,
		.timeout_s = s->eval_timeout_s, .report = dt__api_report_eval, .report_ctx = s,
		.warm_start_from = s->warm_start_from, .warm_start_vars = s->warm_start_vars,
		.predictions_file = s->predictions_file,
	};
	struct dt_eval_outcome o;
	enum dt_status st = dt_evaluator_run(&ec, &o, e);
	dt__api_evaluator_result(s, &o);
	return st;
}

enum dt_status dt__api_run_builtin(dtrain_session *s, struct dt_err *e)
{
	enum dt__api_mode m = dt__api_mode(s);
	const struct dt_cluster *cl = s->cl;
	snprintf(s->mode_name, sizeof(s->mode_name), "%s", dtrain_session_mode(s));
	if (dt_cluster_is_local(cl))
		dt_log_set_identity(m == M_EVALUATOR ? "evaluator" : "chief", 0);
	else
		dt_log_set_identity(dt_job_name(cl->task.job), cl->task.index);
	s->tc.replicas = s->replicas;
	if (m == M_EVALUATOR)
		return evaluate_checkpoints(s, e);
	struct dt_ps_run_config pc = s->pc;
	pc.train = &s->tc;
	pc.cluster = cl;
	if (m == M_PS_SERVER)
		return dt_train_std_server(&pc, e);
	enum dt_status st;
	switch (m) {
	case M_PS_SYNC:
	case M_PS_SYNC_IN_GRAPH:
		st = (m == M_PS_SYNC_IN_GRAPH ? dt_train_sync_master : dt_train_sync_trainer)(&pc, &s->res,
											  &s->sync_stats, e);
		s->has_sync = !st;
		break;
	case M_PS_ASYNC:
		st = dt_train_ps_trainer(&pc, &s->res, e);
		break;
	case M_RING: {
		struct dt_allreduce_run_config ac = s->ac;
		ac.train = &s->tc;
		ac.cluster = cl;
		st = dt_train_allreduce(&ac, &s->res, e);
		break;
	}
	default:
		st = dt_train_local(&s->tc, &s->res, e);
		break;
	}
	if (st)
		return st;
	s->has_res = 1;
	/* An elastic ring's coordinator evaluates too when the chief was lost
	 * (train/allreduce_elastic.h): its result holds examples. */
	s->evaluated = s->tc.eval_at_end && (m == M_LOCAL || m == M_MIRRORED || cl->is_chief || s->res.eval.examples > 0);
	return DT_OK;
}
