/*
 * dtrain train — train a model.
 *
 * With no cluster this trains in one process (train/local.h). Options follow
 * tensor2tensor's t2t-trainer: --model, --hparams_set, --hparams, --problem,
 * --train_steps.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/log.h"
#include "cmd/cmd.h"
#include "base/strutil.h"
#include "cluster/resolve.h"
#include "nn/hparams.h"
#include "nn/model.h"
#include "tensor/blas.h"
#include "train/local.h"

static const char usage[] =
	"dtrain train [--model=NAME] [--problem=NAME] [--train_steps=N] [--hparams='k=v,...'] [options]";

struct train_args {
	const char *model, *hparams_set, *hparams, *log_level, *metrics_file;
	int64_t seed;
};

/* Resolves model + set + overrides into cfg->hp, t2t's way: the set gives the
 * values, --model picks the model (and the default set), --hparams overrides. */
static enum dt_status resolve_hparams(const struct train_args *a, struct dt_hparams *hp, struct dt_err *err)
{
	const char *set = a->hparams_set;
	if (!set || !*set) {
		set = dt_hparams_default_set(a->model);
		if (!set) {
			size_t n;
			const char *const *names = dt_model_names(&n);
			char valid[256];
			dt_join(valid, sizeof(valid), names, n, ", ");
			const char *near = dt_nearest(a->model, names, n);
			dt_err_set(err, DT_USAGE, "unknown model '%s'%s%s%s; valid: %s", a->model,
				   near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "", valid);
			return DT_USAGE;
		}
	}
	enum dt_status st = dt_hparams_from_set(set, hp, err);
	if (st)
		return st;
	if (a->model && *a->model)
		snprintf(hp->model, sizeof(hp->model), "%s", a->model);
	if (a->hparams && *a->hparams && (st = dt_hparams_parse(hp, a->hparams, err)))
		return dt_err_prefix(err, "--hparams");
	return dt_hparams_validate(hp, err);
}

static enum dt_status write_metrics(const char *path, const struct dt_train_config *cfg,
				    const struct dt_train_result *res, struct dt_err *err)
{
	struct dt_blas_info blas = dt_blas_info();
	json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:s}",
			      "model", cfg->hp.model, "problem", cfg->problem, "batch_size", cfg->hp.batch_size,
			      "threads", cfg->threads, "steps", (json_int_t)res->steps,
			      "num_params", (json_int_t)res->num_params, "train_seconds", res->train_seconds,
			      "examples_per_sec", res->examples_per_sec, "first_step_seconds", res->first_step_seconds,
			      "load_seconds", res->load_seconds, "final_train_loss", res->final_loss,
			      "blas_core", blas.core);
	if (cfg->eval_at_end) {
		json_object_set_new(o, "accuracy", json_real(res->eval.accuracy));
		json_object_set_new(o, "loss", json_real(res->eval.loss));
		json_object_set_new(o, "eval_examples", json_integer(res->eval.examples));
	}
	char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
	json_decref(o);
	size_t len = strlen(text);
	text[len] = '\n';
	enum dt_status st = dt_write_file_atomic(path, text, len + 1, err);
	free(text);
	return st ? dt_err_prefix(err, "--metrics_file") : DT_OK;
}

/* Resolves the cluster and this task's role. Only the single-process role is
 * built so far: a cluster of several tasks is refused with a clear message
 * rather than trained wrongly. t2t's schedules: `train` skips the final
 * evaluation; `train_and_evaluate` and `continuous_train_and_eval` keep it. */
static enum dt_status resolve_role(const struct dt_cluster_flags *cf, const struct dt_option *opts, int *eval,
				   struct dt_err *err)
{
	struct dt_cluster cl;
	enum dt_status st = dt_cluster_resolve(cf, opts, &cl, err);
	if (st) {
		dt_cluster_release(&cl);
		return st;
	}
	if (!dt_cluster_is_local(&cl)) {
		dt_err_set(err, DT_CONFIG,
			   "this %s cluster has several tasks, but distributed training is not built yet: "
			   "dtrain train runs as a single process for now",
			   dt_cluster_source_name(cl.source));
		dt_err_hint(err, "run 'dtrain config' to see the cluster; unset TF_CONFIG (and the cluster flags) "
				 "to train in one process");
		dt_cluster_release(&cl);
		return DT_CONFIG;
	}
	dt_cluster_release(&cl);
	const char *schedule = cf->schedule;
	if (strcmp(schedule, "train") == 0) {
		const struct dt_option *o = dt_opts_find(opts, "eval");
		if (!o->was_set)
			*eval = 0;
	} else if (strcmp(schedule, "train_and_evaluate") != 0 && strcmp(schedule, "continuous_train_and_eval") != 0) {
		dt_err_set(err, DT_USAGE, "--schedule=%s is not built yet", schedule);
		dt_err_hint(err, "use --schedule=train or --schedule=train_and_evaluate");
		return DT_USAGE;
	}
	dt_log_set_identity("chief", 0);
	return DT_OK;
}

int dt_cmd_train(int argc, char **argv)
{
	struct dt_train_config cfg;
	dt_train_config_defaults(&cfg);
	struct train_args a = { .model = "cnn", .hparams = "", .hparams_set = "", .log_level = "info",
				.metrics_file = "", .seed = 1 };
	int64_t steps = cfg.train_steps, eval_every = 0, log_every = cfg.log_every;
	int eval = 1, threads = 1, prefetch = 1;
	const char *data_dir = "";
	struct dt_cluster_flags cf;
	dt_cluster_flags_init(&cf);
	struct dt_option opts[] = {
		DT_OPT_GROUP("Model"),
		DT_OPT_STRING("model", &a.model, "NAME", "model to train: mlp, lenet, cnn"),
		DT_OPT_STRING("hparams_set", &a.hparams_set, "NAME", "named hyper-parameter set [default: <model>_base]"),
		DT_OPT_STRING("hparams", &a.hparams, "K=V,...", "overrides, e.g. 'learning_rate=0.05,batch_size=128'"),
		DT_OPT_GROUP("Data"),
		DT_OPT_STRING("problem", &cfg.problem, "NAME", "fashion_mnist, mnist or synthetic"),
		DT_OPT_STRING("data_dir", &data_dir, "DIR", "directory of the problem's IDX files [default: the problem's own]"),
		DT_OPT_GROUP("Training"),
		DT_OPT_INT64("train_steps", &steps, "N", "steps to train (each one batch)"),
		DT_OPT_INT64("eval_every", &eval_every, "N", "also evaluate on the test split every N steps (0: only at the end)"),
		DT_OPT_BOOL("eval", &eval, "evaluate on the test split at the end (--noeval to skip)"),
		DT_OPT_INT64("seed", &a.seed, "N", "seed of every random choice: init, dropout, shuffle"),
		DT_OPT_INT("threads", &threads, "N", "compute threads (OpenBLAS's pool)"),
		DT_OPT_BOOL("prefetch", &prefetch, "prepare the next batch on a background thread"),
		DT_OPT_GROUP("Output"),
		DT_OPT_INT64("log_every", &log_every, "N", "progress line every N steps (0: none)"),
		DT_OPT_STRING("log_level", &a.log_level, "LEVEL", "debug, info, warn or error"),
		DT_OPT_STRING("metrics_file", &a.metrics_file, "PATH", "write the run's figures as JSON here"),
		DT_CLUSTER_OPTIONS(&cf),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, usage, &args, &code))
		return code;
	struct dt_err err = DT_ERR_INIT;
	if (args.count > 0) {
		dt_err_set(&err, DT_USAGE, "unexpected argument '%s' (options are spelled --name=value)", args.items[0]);
		dt_args_release(&args);
		return dt_cmd_report(&err);
	}
	dt_args_release(&args);

	enum dt_log_level level;
	if (dt_log_parse_level(a.log_level, &level, &err))
		return dt_cmd_report(&err);
	dt_log_set_level(level);
	if (resolve_role(&cf, opts, &eval, &err))
		return dt_cmd_report(&err);

	if (steps <= 0) {
		dt_err_set(&err, DT_USAGE, "--train_steps must be a positive number of steps, got %lld", (long long)steps);
		return dt_cmd_report(&err);
	}
	if (eval_every < 0 || log_every < 0) {
		dt_err_set(&err, DT_USAGE, "--%s must not be negative", eval_every < 0 ? "eval_every" : "log_every");
		return dt_cmd_report(&err);
	}
	if (threads < 1 || threads > 256) {
		dt_err_set(&err, DT_USAGE, "--threads must be between 1 and 256, got %d", threads);
		return dt_cmd_report(&err);
	}
	if (resolve_hparams(&a, &cfg.hp, &err))
		return dt_cmd_report(&err);
	cfg.data_dir = data_dir;
	cfg.train_steps = steps;
	cfg.eval_every = eval_every;
	cfg.eval_at_end = eval;
	cfg.log_every = log_every;
	cfg.seed = (uint64_t)a.seed;
	cfg.threads = threads;
	cfg.prefetch = prefetch;

	dt_info("training %s on %s for %lld steps, batch %d, %s lr %g (%s), seed %lld", cfg.hp.model, cfg.problem,
		(long long)steps, cfg.hp.batch_size, cfg.hp.optimizer, cfg.hp.learning_rate, cfg.hp.lr_schedule,
		(long long)a.seed);
	struct dt_train_result res;
	if (dt_train_local(&cfg, &res, &err))
		return dt_cmd_report(&err);
	dt_info("trained %lld steps in %.1f s: %.0f examples/s, first step %.3f s after start", (long long)res.steps,
		res.train_seconds, res.examples_per_sec, res.first_step_seconds);
	if (cfg.eval_at_end)
		printf("eval (test split, %lld examples) at global step %lld: accuracy = %.4f, loss = %.4f\n",
		       (long long)res.eval.examples, (long long)res.steps, res.eval.accuracy, res.eval.loss);
	fflush(stdout);
	if (*a.metrics_file && write_metrics(a.metrics_file, &cfg, &res, &err))
		return dt_cmd_report(&err);
	return 0;
}
