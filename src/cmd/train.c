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
#include "train/ps_roles.h"

static const char usage[] =
	"dtrain train [--model=NAME] [--problem=NAME] [--train_steps=N] [--hparams='k=v,...'] [options]";

struct train_args {
	const char *model, *hparams_set, *hparams, *log_level, *metrics_file;
	int64_t seed;
	double connect_timeout;
	double ps_idle_timeout;
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

/* What this process does in its cluster. */
enum train_mode {
	MODE_LOCAL,     /* no cluster: one process */
	MODE_PS,        /* a parameter server (--schedule=run_std_server, or the ps job) */
	MODE_TRAINER,   /* chief/master/worker of asynchronous training through the ps */
};

/* Resolves the cluster and this task's role. Built: one process, and
 * asynchronous between-graph training through parameter servers; the other
 * distributed layouts are refused with a clear message rather than trained
 * wrongly. t2t's schedules: `train` skips the final evaluation;
 * `train_and_evaluate` and `continuous_train_and_eval` keep it;
 * `run_std_server` is the ps. */
static enum dt_status resolve_role(const struct dt_cluster_flags *cf, const struct dt_option *opts, int *eval,
				   struct dt_cluster *cl, enum train_mode *mode, struct dt_err *err)
{
	enum dt_status st = dt_cluster_resolve(cf, opts, cl, err);
	if (st)
		return st;
	const char *schedule = cf->schedule;
	*mode = MODE_LOCAL;
	if (!dt_cluster_is_local(cl)) {
		const char *src = dt_cluster_source_name(cl->source);
		if (cl->task.job == DT_JOB_EVALUATOR) {
			dt_err_set(err, DT_CONFIG, "this %s cluster makes this task the evaluator, which is not built yet", src);
			dt_err_hint(err, "start only the ps, chief/master and worker tasks");
			return DT_CONFIG;
		}
		if (cl->num_ps_replicas == 0) {
			dt_err_set(err, DT_CONFIG, "this %s cluster has no ps job: that is all-reduce training, which is "
						   "not built yet; asynchronous training through parameter servers is", src);
			dt_err_hint(err, "add a ps job (TF_CONFIG's cluster or --ps_hosts)");
			return DT_CONFIG;
		}
		if (cf->sync) {
			dt_err_set(err, DT_CONFIG, "synchronous training (--sync) is not built yet; "
						   "asynchronous training through parameter servers is");
			dt_err_hint(err, "drop --sync to train asynchronously");
			return DT_CONFIG;
		}
		if (cl->task.job == DT_JOB_PS) {
			*mode = MODE_PS;
		} else {
			/* (run_std_server on a trainer is refused by the resolver's cross-checks.) */
			*mode = MODE_TRAINER;
		}
		dt_log_set_identity(dt_job_name(cl->task.job), cl->task.index);
	} else {
		dt_log_set_identity("chief", 0);
	}
	if (*mode == MODE_PS)
		return DT_OK;
	if (strcmp(schedule, "train") == 0) {
		const struct dt_option *o = dt_opts_find(opts, "eval");
		if (!o->was_set)
			*eval = 0;
	} else if (strcmp(schedule, "train_and_evaluate") != 0 && strcmp(schedule, "continuous_train_and_eval") != 0) {
		dt_err_set(err, DT_USAGE, "--schedule=%s is not built yet", schedule);
		dt_err_hint(err, "use --schedule=train or --schedule=train_and_evaluate");
		return DT_USAGE;
	}
	return DT_OK;
}

/* Runs this task's role and prints its outcome; returns the exit code. */
static int run_mode(enum train_mode mode, const struct dt_cluster *cl, const struct dt_train_config *cfg,
		    const struct train_args *a)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_train_result res;
	struct dt_ps_run_config pc = { .train = cfg, .cluster = cl, .connect_s = a->connect_timeout,
				       .wait_model_s = a->connect_timeout, .ps_idle_s = a->ps_idle_timeout };
	if (mode != MODE_LOCAL && cfg->hp.sync) {
		dt_err_set(&err, DT_CONFIG, "synchronous training (hparam sync=1) is not built yet; "
					    "asynchronous training through parameter servers is");
		return dt_cmd_report(&err);
	}
	if (mode == MODE_PS) {
		dt_info("parameter server for %s on %s (%d ps, %d trainers)", cfg->hp.model, cfg->problem,
			cl->num_ps_replicas, cl->num_worker_replicas);
		if (dt_train_std_server(&pc, &err))
			return dt_cmd_report(&err);
		return 0;
	}
	dt_info("training %s on %s for %lld %ssteps, batch %d, %s lr %g (%s), seed %lld", cfg->hp.model, cfg->problem,
		(long long)cfg->train_steps, mode == MODE_LOCAL ? "" : "global ", cfg->hp.batch_size, cfg->hp.optimizer,
		cfg->hp.learning_rate, cfg->hp.lr_schedule, (long long)a->seed);
	int evaluated = cfg->eval_at_end;
	if (mode == MODE_TRAINER && cfg->eval_every > 0)
		dt_warn("--eval_every is not built for distributed training yet: the chief evaluates once, at the end");
	if (mode == MODE_TRAINER) {
		if (dt_train_ps_trainer(&pc, &res, &err))
			return dt_cmd_report(&err);
		evaluated = evaluated && cl->is_chief;
		dt_info("trained %.1f s: %.0f examples/s from this task", res.train_seconds, res.examples_per_sec);
	} else {
		if (dt_train_local(cfg, &res, &err))
			return dt_cmd_report(&err);
		dt_info("trained %lld steps in %.1f s: %.0f examples/s, first step %.3f s after start",
			(long long)res.steps, res.train_seconds, res.examples_per_sec, res.first_step_seconds);
	}
	if (evaluated)
		printf("eval (test split, %lld examples) at global step %lld: accuracy = %.4f, loss = %.4f\n",
		       (long long)res.eval.examples, (long long)res.steps, res.eval.accuracy, res.eval.loss);
	fflush(stdout);
	if (*a->metrics_file) {
		struct dt_train_config mc = *cfg;
		mc.eval_at_end = evaluated;
		if (write_metrics(a->metrics_file, &mc, &res, &err))
			return dt_cmd_report(&err);
	}
	return 0;
}

int dt_cmd_train(int argc, char **argv)
{
	struct dt_train_config cfg;
	dt_train_config_defaults(&cfg);
	struct train_args a = { .model = "cnn", .hparams = "", .hparams_set = "", .log_level = "info",
				.metrics_file = "", .seed = 1,
				.connect_timeout = 120, .ps_idle_timeout = 600 };
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
		DT_OPT_GROUP("Parameter servers"),
		DT_OPT_DOUBLE("connect_timeout", &a.connect_timeout, "SECONDS",
			      "how long a trainer waits for the ps tasks to accept, and for the chief to initialize them"),
		DT_OPT_DOUBLE("ps_idle_timeout", &a.ps_idle_timeout, "SECONDS",
			      "a ps with no trainer connected this long exits 3 (0: wait forever)"),
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
	if (!(a.connect_timeout > 0 && a.connect_timeout <= 86400)) {
		dt_err_set(&err, DT_USAGE, "--connect_timeout must be between 0 and 86400 seconds, got %g", a.connect_timeout);
		return dt_cmd_report(&err);
	}
	if (!(a.ps_idle_timeout >= 0 && a.ps_idle_timeout <= 1e7)) {
		dt_err_set(&err, DT_USAGE, "--ps_idle_timeout must be between 0 and 10000000 seconds, got %g",
			   a.ps_idle_timeout);
		return dt_cmd_report(&err);
	}
	struct dt_cluster cl;
	enum train_mode mode;
	if (resolve_role(&cf, opts, &eval, &cl, &mode, &err) || resolve_hparams(&a, &cfg.hp, &err)) {
		dt_cluster_release(&cl);
		return dt_cmd_report(&err);
	}
	cfg.data_dir = data_dir;
	cfg.train_steps = steps;
	cfg.eval_every = eval_every;
	cfg.eval_at_end = eval;
	cfg.log_every = log_every;
	cfg.seed = (uint64_t)a.seed;
	cfg.threads = threads;
	cfg.prefetch = prefetch;
	int rc = run_mode(mode, &cl, &cfg, &a);
	dt_cluster_release(&cl);
	return rc;
}
