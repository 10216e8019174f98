/*
 * dtrain train — train a model.
 *
 * With no cluster this trains in one process (train/local.h). Options follow
 * tensor2tensor's t2t-trainer: --model, --hparams_set, --hparams, --problem,
 * --train_steps.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/log.h"
#include "cmd/cmd.h"
#include "cmd/data_flags.h"
#include "cmd/secret.h"
#include "base/strutil.h"
#include "cluster/resolve.h"
#include "distribute/mirrored.h"
#include "models/builtin.h"
#include "nn/hparams.h"
#include "nn/model.h"
#include "tensor/blas.h"
#include "train/local.h"
#include "train/ps_roles.h"
#include "train/sync_roles.h"
#include "train/allreduce_role.h"
#include "train/evaluator.h"
#include "train/summary.h"

static const char usage[] =
	"dtrain train [--model=NAME] [--problem=NAME] [--train_steps=N] [--hparams='k=v,...'] [options]";

struct train_args {
	const char *model, *hparams_set, *hparams, *log_level, *metrics_file, *keras_model;
	int64_t seed;
	double connect_timeout;
	double ps_idle_timeout;
	double step_timeout;            /* all-reduce: deadline of each collective */
	int64_t check_replicas_every;   /* all-reduce: compare the replicas' variables every N steps */
	int64_t min_workers;            /* all-reduce: elastic while this many remain; 0: all (not elastic) */
	int sync;                       /* --sync (hparam sync=1 is the same) */
	int replicas_to_aggregate;      /* sync through the ps: gradients per step; 0: every trainer */
	double sync_timeout;            /* sync: a step gathers its gradients within this */
	int worker_gpu, ps_gpu;         /* t2t's in-graph sync: replicas on the master and per ps */
	int ps_overlap;                 /* async ps: compute the next step while this one's round is in flight */
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
			const char *const *names = dt_models_builtin_names(&n);
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
	if ((st = dt_hparams_validate(hp, err)))
		return st;
	if (a->keras_model && *a->keras_model) {
		/* every role builds its model through dt_model_new, which reads this before the zoo */
		if (strlen(a->keras_model) >= sizeof(hp->keras_model))
			return dt_err_set(err, DT_USAGE, "--keras_model: path longer than %zu bytes",
					  sizeof(hp->keras_model) - 1);
		snprintf(hp->keras_model, sizeof(hp->keras_model), "%s", a->keras_model);
		snprintf(hp->model, sizeof(hp->model), "keras");
	}
	return DT_OK;
}

static enum dt_status write_metrics(const char *path, const struct dt_train_config *cfg,
				    const struct dt_train_result *res, const struct dt_sync_stats *sync, struct dt_err *err)
{
	struct dt_blas_info blas = dt_blas_info();
	json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:s}",
			      "model", cfg->hp.model, "problem", cfg->problem, "batch_size", cfg->hp.batch_size,
			      "threads", cfg->threads, "steps", (json_int_t)res->steps,
			      "num_params", (json_int_t)res->num_params, "train_seconds", res->train_seconds,
			      "examples_per_sec", res->examples_per_sec, "first_step_seconds", res->first_step_seconds,
			      "load_seconds", res->load_seconds, "final_train_loss", res->final_loss,
			      "blas_core", blas.core);
	json_object_set_new(o, "steady_cpu_seconds", json_real(res->steady_cpu_seconds));
	if (res->steady_positions > 0) {
		json_object_set_new(o, "steady_tokens", json_integer(res->steady_tokens));
		json_object_set_new(o, "steady_positions", json_integer(res->steady_positions));
		json_object_set_new(o, "steady_attention_pairs", json_integer(res->steady_attention_pairs));
	}
	if (cfg->eval_at_end) {
		json_object_set_new(o, "accuracy", json_real(res->eval.accuracy));
		json_object_set_new(o, "loss", json_real(res->eval.loss));
		json_object_set_new(o, "eval_examples", json_integer(res->eval.examples));
	}
	if (sync) {
		json_object_set_new(o, "replicas_to_aggregate", json_integer(sync->replicas_to_aggregate));
		json_object_set_new(o, "total_replicas", json_integer(sync->total_replicas));
		json_object_set_new(o, "barrier_seconds", json_real(sync->barrier_seconds));
		json_object_set_new(o, "barrier_share", json_real(sync->barrier_share));
		json_object_set_new(o, "stale_steps", json_integer(sync->stale_steps));
		json_object_set_new(o, "ps_recoveries", json_integer(sync->recoveries));
	}
	char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
	json_decref(o);
	size_t len = strlen(text);
	text[len] = '\n';
	enum dt_status st = dt_write_file_atomic(path, text, len + 1, err);
	free(text);
	return st ? dt_err_prefix(err, "--metrics_file") : DT_OK;
}

/* The "Checkpoints and summaries" flags, before validation. */
struct ckpt_args {
	const char *output_dir;
	int64_t save_steps;
	double save_secs;
	int keep_max;
	int64_t summary_steps;
};

/* Validates the checkpoint flags into cfg. --output_dir falls back to the
 * environment's OUTPUT_DIR (which `dtrain launch` sets); the two cadences are
 * exclusive, and with neither the saver uses TensorFlow's 600 seconds. */
static enum dt_status resolve_ckpt_args(const struct ckpt_args *ck, const struct dt_option *opts,
					struct dt_train_config *cfg, struct dt_err *err)
{
	const char *dir = ck->output_dir;
	if (!dt_opts_find(opts, "output_dir")->was_set) {
		const char *env = getenv("OUTPUT_DIR");
		if (env && *env)
			dir = env;
	}
	if (ck->save_steps < 0 || ck->summary_steps < 0)
		return dt_err_set(err, DT_USAGE, "--%s must not be negative",
				  ck->save_steps < 0 ? "save_checkpoints_steps" : "save_summary_steps");
	if (!(ck->save_secs >= 0 && ck->save_secs <= 1e9))
		return dt_err_set(err, DT_USAGE, "--save_checkpoints_secs must be between 0 and 1e9 seconds, got %g",
				  ck->save_secs);
	if (ck->save_steps > 0 && ck->save_secs > 0) {
		dt_err_set(err, DT_USAGE, "--save_checkpoints_steps and --save_checkpoints_secs are mutually exclusive");
		dt_err_hint(err, "set only one of them (neither: every 600 seconds)");
		return DT_USAGE;
	}
	if (ck->keep_max < 0)
		return dt_err_set(err, DT_USAGE, "--keep_checkpoint_max must not be negative (0 keeps all), got %d",
				  ck->keep_max);
	cfg->output_dir = dir;
	cfg->save_checkpoints_steps = ck->save_steps;
	cfg->save_checkpoints_secs = ck->save_secs;
	cfg->keep_checkpoint_max = ck->keep_max;
	cfg->save_summary_steps = ck->summary_steps;
	return DT_OK;
}

/* What this process does in its cluster. */
enum train_mode {
	MODE_LOCAL,     /* no cluster: one process */
	MODE_PS,        /* a parameter server (--schedule=run_std_server, or the ps job) */
	MODE_TRAINER,   /* chief/master/worker of asynchronous training through the ps */
	MODE_ALLREDUCE, /* chief/master/worker of a cluster with no ps: multi-worker mirrored */
	MODE_EVAL,      /* the evaluator job, or --schedule=continuous_eval*: evaluates checkpoints */
};

/* t2t's evaluation schedules: which split, and whether once or continuously. */
static int is_eval_schedule(const char *schedule, enum dt_split *split, int *once)
{
	static const struct { const char *name; enum dt_split split; int once; } evals[] = {
		{ "continuous_eval", DT_SPLIT_TEST, 0 },
		{ "continuous_eval_on_train_data", DT_SPLIT_TRAIN, 0 },
		{ "evaluate", DT_SPLIT_TEST, 1 },
		{ "evaluate_on_train_data", DT_SPLIT_TRAIN, 1 },
		/* not t2t's: the text problems' dev split (t2t's length 400) beside the held-out test split */
		{ "evaluate_on_dev_data", DT_SPLIT_DEV, 1 },
	};
	for (size_t i = 0; i < sizeof(evals) / sizeof(evals[0]); i++) {
		if (strcmp(schedule, evals[i].name) == 0) {
			if (split)
				*split = evals[i].split;
			if (once)
				*once = evals[i].once;
			return 1;
		}
	}
	return 0;
}

/* Resolves the cluster and this task's role. Built: one process,
 * training through parameter servers (asynchronous, or synchronous with
 * --sync: run_mode picks sync_roles.h's layout), and all-reduce
 * (multi-worker mirrored) when there is no ps job; the other
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
		if (cl->task.job == DT_JOB_EVALUATOR) {
			/* It connects to nobody: it reads the chief's checkpoints (train/evaluator.h). */
			*mode = MODE_EVAL;
		} else if (cl->num_ps_replicas == 0) {
			/* No ps: multi-worker mirrored, synchronous by construction (--sync is moot). */
			*mode = MODE_ALLREDUCE;
		} else if (cl->task.job == DT_JOB_PS) {
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
	if (*mode == MODE_EVAL || is_eval_schedule(schedule, NULL, NULL)) {
		if (dt_cluster_is_local(cl))
			dt_log_set_identity("evaluator", 0);
		*mode = MODE_EVAL;
		return DT_OK;
	}
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

/* --replicas, or t2t's --worker_gpu=N > 1 in a cluster without ps (one GPU
 * tower per replica there; CPU threads here). 0 on a usage error. */
static int resolve_replicas(int replicas, const struct dt_option *opts, const struct dt_cluster_flags *cf,
			    const struct dt_cluster *cl, enum train_mode mode, struct dt_err *err)
{
	int given = dt_opts_find(opts, "replicas")->was_set;
	if (!given && cf->worker_gpu > 1 && cl->num_ps_replicas == 0)
		replicas = cf->worker_gpu;
	if (replicas < 1 || replicas > DT_MIRRORED_MAX_REPLICAS) {
		dt_err_set(err, DT_USAGE, "--%s must be between 1 and %d, got %d", given ? "replicas" : "worker_gpu",
			   DT_MIRRORED_MAX_REPLICAS, replicas);
		return 0;
	}
	if (replicas > 1 && (mode == MODE_PS || mode == MODE_TRAINER)) {
		dt_err_set(err, DT_USAGE, "--replicas=%d is for one process or all-reduce clusters; training through "
					  "parameter servers has one replica per task", replicas);
		dt_err_hint(err, "start more worker tasks instead");
		return 0;
	}
	return replicas;
}

/* The evaluator's flags. */
struct eval_args {
	const char *mode;               /* "latest" or "every" */
	double timeout_s;
};

static void print_eval(void *ctx, enum dt_split split, int64_t step, const struct dt_eval_result *r)
{
	char bleu[48] = "";
	if (r->bleu)
		snprintf(bleu, sizeof(bleu), ", approx_bleu_score = %.4f", r->approx_bleu_score);
	if (r->text) /* t2t's metrics, as t2t-trainer prints them */
		printf("eval (%s split, %lld examples) at global step %lld: accuracy = %.4f, accuracy_per_sequence = %.4f, "
		       "neg_log_perplexity = %.4f%s, loss = %.4f\n",
		       dt_split_name(split), (long long)r->examples, (long long)step, r->accuracy,
		       r->accuracy_per_sequence, r->neg_log_perplexity, bleu, r->loss);
	else
		printf("eval (%s split, %lld examples) at global step %lld: accuracy = %.4f, loss = %.4f\n",
		       dt_split_name(split), (long long)r->examples, (long long)step, r->accuracy, r->loss);
	fflush(stdout);
}

/* The evaluator task (train/evaluator.h); returns the exit code. */
static int run_evaluator(const struct dt_train_config *cfg, const char *schedule, const struct eval_args *ea)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_eval_config ec = {
		.models = cfg->models, .problem = cfg->problem, .data_dir = cfg->data_dir, .data = cfg->data, .hp = cfg->hp, .seed = cfg->seed,
		.threads = cfg->threads, .output_dir = cfg->output_dir, .split = DT_SPLIT_TEST,
		.train_steps = cfg->train_steps, .timeout_s = ea->timeout_s, .report = print_eval,
	};
	/* The evaluator job with no eval schedule given evaluates the test split continuously. */
	is_eval_schedule(schedule, &ec.split, &ec.once);
	if (strcmp(ea->mode, "latest") == 0) {
		ec.mode = DT_EVAL_LATEST;
	} else if (strcmp(ea->mode, "every") == 0) {
		ec.mode = DT_EVAL_EVERY;
	} else {
		dt_err_set(&err, DT_USAGE, "--eval_mode=%s: expected latest or every", ea->mode);
		return dt_cmd_report(&err);
	}
	if (!(ea->timeout_s > 0 && ea->timeout_s <= 1e7)) {
		dt_err_set(&err, DT_USAGE, "--eval_timeout_secs must be between 0 and 10000000 seconds, got %g",
			   ea->timeout_s);
		return dt_cmd_report(&err);
	}
	if (!cfg->output_dir || !*cfg->output_dir) {
		dt_err_set(&err, DT_USAGE, "the evaluator needs --output_dir: the directory the chief writes checkpoints to");
		return dt_cmd_report(&err);
	}
	if (dt_evaluator_run(&ec, NULL, &err))
		return dt_cmd_report(&err);
	return 0;
}

/* Runs this task's role and prints its outcome; returns the exit code. */
static int run_mode(enum train_mode mode, const struct dt_cluster *cl, const struct dt_train_config *cfg,
		    const struct train_args *a)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_train_result res;
	struct dt_ps_run_config pc = { .train = cfg, .cluster = cl, .connect_s = a->connect_timeout,
				       .wait_model_s = a->connect_timeout, .ps_idle_s = a->ps_idle_timeout,
				       .overlap = a->ps_overlap,
				       .replicas_to_aggregate = a->replicas_to_aggregate, .sync_timeout_s = a->sync_timeout,
				       .worker_gpu = a->worker_gpu, .ps_gpu = a->ps_gpu };
	/* Synchronous through the ps (SyncReplicasOptimizer), or t2t's in-graph
	 * layout: one master as the only trainer, the ps tasks computing. */
	const int sync = mode == MODE_TRAINER && (a->sync || cfg->hp.sync);
	const int in_graph = sync && cl->jobs[DT_JOB_MASTER].slots > 0 && cl->num_worker_replicas == 1;
	struct dt_sync_stats sync_stats;
	if (a->replicas_to_aggregate && mode == MODE_TRAINER && (!sync || in_graph ||
								  a->replicas_to_aggregate > cl->num_worker_replicas)) {
		dt_err_set(&err, DT_USAGE, "--replicas_to_aggregate=%d needs synchronous training through the ps with at "
					   "least that many trainers (this cluster has %d)", a->replicas_to_aggregate,
			   cl->num_worker_replicas);
		dt_err_hint(&err, "add --sync, or drop --replicas_to_aggregate (default: every trainer)");
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
	if (sync) {
		if ((in_graph ? dt_train_sync_master : dt_train_sync_trainer)(&pc, &res, &sync_stats, &err))
			return dt_cmd_report(&err);
		evaluated = evaluated && cl->is_chief;
		dt_info("trained %.1f s: %.0f examples/s from this task; %.0f%% of it waiting at the barrier",
			res.train_seconds, res.examples_per_sec, 100.0 * sync_stats.barrier_share);
	} else if (mode == MODE_TRAINER) {
		if (dt_train_ps_trainer(&pc, &res, &err))
			return dt_cmd_report(&err);
		evaluated = evaluated && cl->is_chief;
		dt_info("trained %.1f s: %.0f examples/s from this task", res.train_seconds, res.examples_per_sec);
	} else if (mode == MODE_ALLREDUCE) {
		struct dt_allreduce_run_config ac = { .train = cfg, .cluster = cl, .connect_s = a->connect_timeout,
						      .step_s = a->step_timeout, .check_every = a->check_replicas_every,
						      .min_workers = (int)a->min_workers };
		if (dt_train_allreduce(&ac, &res, &err))
			return dt_cmd_report(&err);
		evaluated = evaluated && cl->is_chief;
		dt_info("trained %lld steps in %.1f s: %.0f examples/s over all workers", (long long)res.steps,
			res.train_seconds, res.examples_per_sec);
	} else {
		if (dt_train_local(cfg, &res, &err))
			return dt_cmd_report(&err);
		dt_info("trained %lld steps in %.1f s: %.0f examples/s, first step %.3f s after start",
			(long long)res.steps, res.train_seconds, res.examples_per_sec, res.first_step_seconds);
	}
	if (evaluated)
		print_eval(NULL, DT_SPLIT_TEST, res.steps, &res.eval);
	fflush(stdout);
	if (*a->metrics_file) {
		struct dt_train_config mc = *cfg;
		mc.eval_at_end = evaluated;
		if (write_metrics(a->metrics_file, &mc, &res, sync ? &sync_stats : NULL, &err))
			return dt_cmd_report(&err);
	}
	return 0;
}

int dt_cmd_train(int argc, char **argv)
{
	struct dt_train_config cfg;
	dt_train_config_defaults(&cfg);
	cfg.models = &dt_models_builtin; /* mlp, lenet, cnn: written with the public builder */
	struct train_args a = { .model = "cnn", .hparams = "", .hparams_set = "", .log_level = "info", .keras_model = "",
				.metrics_file = "", .seed = 1,
				.connect_timeout = 120, .ps_idle_timeout = 600, .step_timeout = 60, .ps_overlap = 1,
				.sync_timeout = DT_SYNC_TIMEOUT_DEFAULT_S };
	int64_t steps = cfg.train_steps, eval_every = 0, log_every = cfg.log_every;
	int eval = 1, threads = 1, prefetch = 1;
	int replicas = 1, deterministic = 0, micro_batch = 32;
	const char *data_dir = "";
	struct dt_data_flags df = DT_DATA_FLAGS_INIT;
	struct dt_data_options data_opts;
	struct ckpt_args ck = { .output_dir = "", .keep_max = cfg.keep_checkpoint_max,
				.summary_steps = cfg.save_summary_steps };
	struct eval_args ea = { .mode = "latest", .timeout_s = 3600 };
	struct dt_cluster_flags cf;
	dt_cluster_flags_init(&cf);
	struct dt_secret_flags sf = { "", "", 0 };
	struct dt_auth auth;
	struct dt_option opts[] = {
		DT_OPT_GROUP("Model"),
		DT_OPT_STRING("model", &a.model, "NAME", "model to train: mlp, lenet, cnn"),
		DT_OPT_STRING("hparams_set", &a.hparams_set, "NAME", "named hyper-parameter set [default: <model>_base]"),
		DT_OPT_STRING("hparams", &a.hparams, "K=V,...", "overrides, e.g. 'learning_rate=0.05,batch_size=128'"),
		DT_OPT_STRING("keras_model", &a.keras_model, "PATH",
			      "train the Keras model of this JSON (model.to_json() or a TF.js model.json) instead of "
			      "--model; hparams from --hparams_set [default: cnn_base]"),
		DT_OPT_GROUP("Data"),
		DT_OPT_STRING("problem", &cfg.problem, "NAME", "fashion_mnist, mnist, synthetic, image_folder or csv"),
		DT_OPT_STRING("data_dir", &data_dir, "DIR",
			      "the problem's IDX files, image folder or CSV file [default: the problem's own]"),
		DT_DATA_FLAG_OPTIONS(&df),
		DT_OPT_GROUP("Training"),
		DT_OPT_INT64("train_steps", &steps, "N", "steps to train (each one batch)"),
		DT_OPT_INT64("eval_every", &eval_every, "N", "also evaluate on the test split every N steps (0: only at the end)"),
		DT_OPT_BOOL("eval", &eval, "evaluate on the test split at the end (--noeval to skip)"),
		DT_OPT_INT64("seed", &a.seed, "N", "seed of every random choice: init, dropout, shuffle"),
		DT_OPT_INT("threads", &threads, "N", "compute threads (OpenBLAS's pool)"),
		DT_OPT_BOOL("prefetch", &prefetch, "prepare the next batch on a background thread"),
		DT_OPT_INT("replicas", &replicas, "N",
			   "mirrored replicas on threads, each batch split across them (t2t's --worker_gpu=N > 1 sets it when there is no ps)"),
		DT_OPT_BOOL("deterministic", &deterministic,
			    "the same bits at any worker or replica count: micro-batches summed in 64-bit fixed point "
			    "(docs/DISTRIBUTED.md)"),
		DT_OPT_INT("micro_batch", &micro_batch, "N",
			   "--deterministic's unit of work in examples; must divide each replica's batch"),
		DT_OPT_GROUP("Output"),
		DT_OPT_INT64("log_every", &log_every, "N", "progress line every N steps (0: none)"),
		DT_OPT_STRING("log_level", &a.log_level, "LEVEL", "debug, info, warn or error"),
		DT_OPT_STRING("metrics_file", &a.metrics_file, "PATH", "write the run's figures as JSON here"),
		DT_OPT_GROUP("Checkpoints and summaries"),
		DT_OPT_STRING("output_dir", &ck.output_dir, "DIR",
			      "checkpoints and summaries go here; training resumes from its latest checkpoint "
			      "[default: $OUTPUT_DIR, else none]"),
		DT_OPT_INT64("save_checkpoints_steps", &ck.save_steps, "N", "save a checkpoint every N steps"),
		DT_OPT_DOUBLE("save_checkpoints_secs", &ck.save_secs, "SECONDS",
			      "save a checkpoint every SECONDS (0: by steps; neither set: 600)"),
		DT_OPT_INT("keep_checkpoint_max", &ck.keep_max, "N", "newest checkpoints kept (0: all)"),
		DT_OPT_INT64("save_summary_steps", &ck.summary_steps, "N", "TensorBoard scalars every N steps (0: none)"),
		DT_OPT_GROUP("Evaluator (--schedule=continuous_eval, or the evaluator task)"),
		DT_OPT_STRING("eval_mode", &ea.mode, "MODE",
			      "latest: jump to the newest checkpoint; every: evaluate each checkpoint in order"),
		DT_OPT_DOUBLE("eval_timeout_secs", &ea.timeout_s, "SECONDS",
			      "exit 3 after this long with no new checkpoint"),
		DT_CLUSTER_OPTIONS(&cf),
		DT_SECRET_OPTIONS(&sf),
		DT_OPT_GROUP("Parameter servers"),
		DT_OPT_DOUBLE("connect_timeout", &a.connect_timeout, "SECONDS",
			      "how long a trainer waits for the ps tasks to accept, and for the chief to initialize them; "
			      "with no ps, for every other worker to connect"),
		DT_OPT_DOUBLE("ps_idle_timeout", &a.ps_idle_timeout, "SECONDS",
			      "a ps with no trainer connected this long exits 3 (0: wait forever)"),
		DT_OPT_BOOL("ps_overlap", &a.ps_overlap,
			    "async: compute the next step while this step's push/pull is in flight (gradients one "
			    "step staler; --nops_overlap: off)"),
		DT_OPT_INT("replicas_to_aggregate", &a.replicas_to_aggregate, "N",
			   "--sync through the ps: gradients per step; the other trainers are backups [default: all]"),
		DT_OPT_DOUBLE("sync_timeout", &a.sync_timeout, "SECONDS",
			      "--sync: a step gathers its gradients within this, else every task exits 3 naming the "
			      "missing ones"),
		DT_OPT_GROUP("All-reduce (a cluster with no ps)"),
		DT_OPT_DOUBLE("step_timeout", &a.step_timeout, "SECONDS",
			      "deadline of each collective (gradients, broadcast, barrier); a missing worker fails the step, exit 3"),
		DT_OPT_INT64("check_replicas_every", &a.check_replicas_every, "N",
			     "debug: compare a hash of every worker's variables every N steps, fail on a mismatch (0: never)"),
		DT_OPT_INT64("min_workers", &a.min_workers, "N",
			     "elastic: a lost worker (not the chief) is dropped, the ring re-formed and the step redone "
			     "while at least N workers remain, else exit 3 [default: all workers, not elastic]"),
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
	if (a.min_workers < 0 || a.min_workers > 65536) {
		dt_err_set(&err, DT_USAGE, "--min_workers must be between 1 and the worker count, got %lld",
			   (long long)a.min_workers);
		return dt_cmd_report(&err);
	}
	if (!(a.step_timeout > 0 && a.step_timeout <= 86400) || a.check_replicas_every < 0) {
		if (a.check_replicas_every < 0)
			dt_err_set(&err, DT_USAGE, "--check_replicas_every must not be negative, got %lld",
				   (long long)a.check_replicas_every);
		else
			dt_err_set(&err, DT_USAGE, "--step_timeout must be between 0 and 86400 seconds, got %g", a.step_timeout);
		return dt_cmd_report(&err);
	}
	if (!(a.sync_timeout > 0 && a.sync_timeout <= 1e7) || a.replicas_to_aggregate < 0) {
		if (a.replicas_to_aggregate < 0)
			dt_err_set(&err, DT_USAGE, "--replicas_to_aggregate must not be negative, got %d",
				   a.replicas_to_aggregate);
		else
			dt_err_set(&err, DT_USAGE, "--sync_timeout must be between 0 and 10000000 seconds, got %g",
				   a.sync_timeout);
		return dt_cmd_report(&err);
	}
	a.sync = cf.sync;
	a.worker_gpu = cf.worker_gpu;
	a.ps_gpu = cf.ps_gpu;
	if (!(a.ps_idle_timeout >= 0 && a.ps_idle_timeout <= 1e7)) {
		dt_err_set(&err, DT_USAGE, "--ps_idle_timeout must be between 0 and 10000000 seconds, got %g",
			   a.ps_idle_timeout);
		return dt_cmd_report(&err);
	}
	if (resolve_ckpt_args(&ck, opts, &cfg, &err))
		return dt_cmd_report(&err);
	struct dt_cluster cl;
	enum train_mode mode;
	if (resolve_role(&cf, opts, &eval, &cl, &mode, &err) || resolve_hparams(&a, &cfg.hp, &err)) {
		dt_cluster_release(&cl);
		return dt_cmd_report(&err);
	}
	if (mode != MODE_LOCAL && mode != MODE_EVAL) {
		/* Every connection of a cluster task is authenticated when a secret is given. */
		const char *own = dt_cluster_address(&cl, cl.task.job, cl.task.index);
		if (dt_cmd_cluster_auth(&sf, &own, 1, &auth, &cfg.auth, &err)) {
			dt_cluster_release(&cl);
			return dt_cmd_report(&err);
		}
	}
	if (dt_data_flags_resolve(&df, a.keras_model, &data_opts, &err)) {
		dt_cluster_release(&cl);
		return dt_cmd_report(&err);
	}
	cfg.data_dir = data_dir;
	cfg.data = &data_opts;
	cfg.train_steps = steps;
	cfg.eval_every = eval_every;
	cfg.eval_at_end = eval;
	cfg.log_every = log_every;
	cfg.seed = (uint64_t)a.seed;
	cfg.threads = threads;
	cfg.prefetch = prefetch;
	if ((cfg.replicas = resolve_replicas(replicas, opts, &cf, &cl, mode, &err)) < 1) {
		dt_cluster_release(&cl);
		return dt_cmd_report(&err);
	}
	if (deterministic && (mode == MODE_PS || mode == MODE_TRAINER)) {
		dt_err_set(&err, DT_USAGE, "--deterministic is built for one process, --replicas and all-reduce clusters; "
					   "training through parameter servers applies float sums in arrival order");
		dt_err_hint(&err, "drop --deterministic, or train with all-reduce (a cluster with no ps job)");
		dt_cluster_release(&cl);
		return dt_cmd_report(&err);
	}
	cfg.micro_batch = deterministic ? micro_batch : 0;
	int rc;
	if (mode == MODE_EVAL) {
		rc = run_evaluator(&cfg, cf.schedule, &ea);
	} else {
		cfg.eval_after_save = strcmp(cf.schedule, "train_and_evaluate") == 0;
		/* The chief's run files (t2t's hparams.json and flags.txt). */
		if (cfg.output_dir && *cfg.output_dir && mode != MODE_PS && (mode == MODE_LOCAL || cl.is_chief) &&
		    dt_summary_write_run_files(cfg.output_dir, &cfg.hp, opts, &err)) {
			dt_cluster_release(&cl);
			return dt_cmd_report(&err);
		}
		rc = run_mode(mode, &cl, &cfg, &a);
	}
	dt_cluster_release(&cl);
	return rc;
}
