/*
 * dtrain train — train a model: a caller of the public API (include/dtrain.h).
 *
 * Options follow tensor2tensor's t2t-trainer: --model, --hparams_set,
 * --hparams, --problem, --train_steps. This file parses and checks the
 * flags, resolves the cluster and this task's role from them (the t2t
 * schedules and cross-checks of cluster/resolve.h need the option table),
 * fills the public dtrain_builtin and dtrain_session_options, and runs the
 * task through dtrain_session_new_builtin / dtrain_session_run: local,
 * mirrored, ps (async, sync, t2t's in-graph master), the std server,
 * multi-worker mirrored and the evaluator are the session's modes. What it
 * prints (the progress lines aside, which are the library's) and the
 * metrics file are made here from dtrain_session_result.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "dtrain.h"
#include "api/internal.h"
#include "base/atomic_file.h"
#include "base/log.h"
#include "base/trace.h"
#include "cmd/cmd.h"
#include "cmd/data_flags.h"
#include "cmd/secret.h"
#include "cluster/resolve.h"
#include "distribute/mirrored.h"
#include "nn/hparams.h"
#include "train/summary.h"

static const char usage[] =
	"dtrain train [--model=NAME] [--problem=NAME] [--train_steps=N] [--hparams='k=v,...'] [options]";

struct train_args {
	const char *model, *hparams_set, *hparams, *log_level, *metrics_file, *keras_model, *timeline;
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
	int worker_gpu_given;           /* --worker_gpu was on the command line */
	int ps_overlap;                 /* async ps: compute the next step while this one's round is in flight */
	int64_t train_steps;
};

/* The message of a failed library call, with the flag named as the CLI
 * spells it (dtrain_builtin's messages start with the field's name); the
 * exit code of its status, as dt_cmd_report. */
static int report(const dtrain_error *err)
{
	static const char *const fields[] = { "hparams: ", "keras_model: " };
	const char *msg = dtrain_error_message(err);
	const char *dashes = "";
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (strncmp(msg, fields[i], strlen(fields[i])) == 0)
			dashes = "--";
	fflush(stdout);
	fprintf(stderr, "error: %s%s\n", dashes, msg[0] ? msg : dtrain_status_message(dtrain_error_status(err)));
	return dtrain_status_exit_code(dtrain_error_status(err));
}

static enum dt_status write_metrics(const char *path, const char *problem, int threads, const dtrain_hparams_info *hp,
				    const dtrain_result *res, struct dt_err *err)
{
	json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:s}",
			      "model", hp->model, "problem", problem, "batch_size", hp->batch_size,
			      "threads", threads, "steps", (json_int_t)res->steps,
			      "num_params", (json_int_t)res->num_params, "train_seconds", res->train_seconds,
			      "examples_per_sec", res->examples_per_sec, "first_step_seconds", res->first_step_seconds,
			      "load_seconds", res->load_seconds, "final_train_loss", res->final_loss,
			      "blas_core", res->blas_core);
	json_object_set_new(o, "steady_cpu_seconds", json_real(res->steady_cpu_seconds));
	struct rusage ru; /* the process's peak resident memory, data and model and all */
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)ru.ru_maxrss * 1024));
	if (res->steady_positions > 0) {
		json_object_set_new(o, "steady_tokens", json_integer(res->steady_tokens));
		json_object_set_new(o, "steady_positions", json_integer(res->steady_positions));
		json_object_set_new(o, "steady_attention_pairs", json_integer(res->steady_attention_pairs));
	}
	if (res->evaluated) {
		json_object_set_new(o, "accuracy", json_real(res->eval.accuracy));
		json_object_set_new(o, "loss", json_real(res->eval.loss));
		json_object_set_new(o, "eval_examples", json_integer(res->eval.examples));
	}
	if (res->sync) {
		json_object_set_new(o, "replicas_to_aggregate", json_integer(res->replicas_to_aggregate));
		json_object_set_new(o, "total_replicas", json_integer(res->total_replicas));
		json_object_set_new(o, "barrier_seconds", json_real(res->barrier_seconds));
		json_object_set_new(o, "barrier_share", json_real(res->barrier_share));
		json_object_set_new(o, "stale_steps", json_integer(res->stale_steps));
		json_object_set_new(o, "ps_recoveries", json_integer(res->ps_recoveries));
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
/* --warm_start_from, --warm_start_vars, --predictions_file: session options
 * (dtrain_session_set) set after the others. */
struct warm_args {
	const char *from, *vars, *predictions;
};

static dtrain_status set_warm(dtrain_session *s, const struct warm_args *wa, dtrain_error *perr)
{
	dtrain_status st = DTRAIN_OK;
	if (*wa->from)
		st = dtrain_session_set(s, "warm_start_from", wa->from, perr);
	if (!st && *wa->vars)
		st = dtrain_session_set(s, "warm_start_vars", wa->vars, perr);
	if (!st && *wa->predictions)
		st = dtrain_session_set(s, "predictions_file", wa->predictions, perr);
	return st;
}

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
					dtrain_session_options *so, struct dt_err *err)
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
	so->output_dir = dir;
	so->save_checkpoints_steps = ck->save_steps;
	so->save_checkpoints_secs = ck->save_secs;
	so->keep_checkpoint_max = ck->keep_max;
	so->save_summary_steps = ck->summary_steps;
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
static int is_eval_schedule(const char *schedule, dtrain_split *split, int *once)
{
	static const struct { const char *name; dtrain_split split; int once; } evals[] = {
		{ "continuous_eval", DTRAIN_SPLIT_TEST, 0 },
		{ "continuous_eval_on_train_data", DTRAIN_SPLIT_TRAIN, 0 },
		{ "evaluate", DTRAIN_SPLIT_TEST, 1 },
		{ "evaluate_on_train_data", DTRAIN_SPLIT_TRAIN, 1 },
		/* not t2t's: the text problems' dev split (t2t's length 400) beside the held-out test split */
		{ "evaluate_on_dev_data", DTRAIN_SPLIT_DEV, 1 },
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
/* The facts of the cluster the messages and checks below use (the
 * resolved cluster is the session's once adopted). */
struct cluster_facts {
	int num_ps, num_trainers;
};

static int resolve_replicas(int replicas, const struct dt_option *opts, const struct dt_cluster_flags *cf,
			    const struct cluster_facts *cl, enum train_mode mode, struct dt_err *err)
{
	int given = dt_opts_find(opts, "replicas")->was_set;
	if (!given && cf->worker_gpu > 1 && cl->num_ps == 0)
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

/* --help-hparams: the set's values (the model's default set without
 * --hparams_set) with --hparams applied, as the JSON of hparams.json, on
 * stdout. The set's model stays unless --model is given. Exit 0, or 2 on a
 * bad set or override. */
static int print_hparams(const struct train_args *a, const struct dt_option *opts)
{
	struct dt_err err = DT_ERR_INIT;
	const int model_given = dt_opts_find(opts, "model")->was_set;
	const char *set = *a->hparams_set ? a->hparams_set : dt_hparams_default_set(a->model);
	if (!set) {
		dt_err_set(&err, DT_USAGE, "model '%s' has no default hparams set", a->model);
		dt_err_hint(&err, "name one with --hparams_set (dtrain train --help lists the models)");
		return dt_cmd_report(&err);
	}
	struct dt_hparams hp;
	if (dt_hparams_from_set(set, &hp, &err))
		return dt_cmd_report(&err);
	if (model_given)
		snprintf(hp.model, sizeof(hp.model), "%s", a->model);
	if (*a->hparams && dt_hparams_parse(&hp, a->hparams, &err)) {
		enum dt_status st = dt_err_prefix(&err, "--hparams");
		(void)st;
		return dt_cmd_report(&err);
	}
	if (dt_hparams_validate(&hp, &err))
		return dt_cmd_report(&err);
	dt_hparams_write_json(&hp, stdout);
	return 0;
}

/* The evaluator's flags. */
struct eval_args {
	const char *mode;               /* "latest" or "every" */
	double timeout_s;
};

static void print_eval(void *ctx, const dtrain_eval *r)
{
	(void)ctx;
	const char *split = r->split == DTRAIN_SPLIT_TRAIN ? "train" : r->split == DTRAIN_SPLIT_DEV ? "dev" : "test";
	char bleu[48] = "";
	if (r->bleu)
		snprintf(bleu, sizeof(bleu), ", approx_bleu_score = %.4f", r->approx_bleu_score);
	if (r->text) /* t2t's metrics, as t2t-trainer prints them */
		printf("eval (%s split, %lld examples) at global step %lld: accuracy = %.4f, accuracy_per_sequence = %.4f, "
		       "neg_log_perplexity = %.4f%s, loss = %.4f\n",
		       split, (long long)r->examples, (long long)r->step, r->accuracy, r->accuracy_per_sequence,
		       r->neg_log_perplexity, bleu, r->loss);
	else
		printf("eval (%s split, %lld examples) at global step %lld: accuracy = %.4f, loss = %.4f\n", split,
		       (long long)r->examples, (long long)r->step, r->accuracy, r->loss);
	fflush(stdout);
}

/* The evaluator's flags into the options: the schedule's split, once or not
 * (the evaluator job with no eval schedule: the test split, continuously). */
static enum dt_status eval_options(const char *schedule, const struct eval_args *ea, const struct warm_args *wa,
				   dtrain_session_options *so, struct dt_err *err)
{
	so->evaluator = 1;
	is_eval_schedule(schedule, &so->eval_split, &so->eval_once);
	if (strcmp(ea->mode, "latest") == 0)
		so->eval_walk = DTRAIN_EVAL_LATEST;
	else if (strcmp(ea->mode, "every") == 0)
		so->eval_walk = DTRAIN_EVAL_EVERY;
	else
		return dt_err_set(err, DT_USAGE, "--eval_mode=%s: expected latest or every", ea->mode);
	if (!(ea->timeout_s > 0 && ea->timeout_s <= 1e7))
		return dt_err_set(err, DT_USAGE, "--eval_timeout_secs must be between 0 and 10000000 seconds, got %g",
				  ea->timeout_s);
	if ((!so->output_dir || !*so->output_dir) && !(so->eval_once && *wa->from))
		return dt_err_set(err, DT_USAGE,
				  "the evaluator needs --output_dir: the directory the chief writes checkpoints to "
				  "(or, with --schedule=evaluate, --warm_start_from)");
	so->eval_timeout_secs = ea->timeout_s;
	return DT_OK;
}

/* Runs this task's session and prints its outcome; returns the exit code. */
static int run_mode(enum train_mode mode, const struct cluster_facts *cl, dtrain_session *s, const char *problem,
		    int threads, const struct train_args *a)
{
	dtrain_error *err = dtrain_error_new();
	struct dt_err e = DT_ERR_INIT;
	dtrain_hparams_info hp;
	dtrain_session_hparams(s, &hp);
	const char *smode = dtrain_session_mode(s);
	/* Synchronous through the ps (SyncReplicasOptimizer), or t2t's in-graph
	 * layout: one master as the only trainer, the ps tasks computing. */
	const int sync = strcmp(smode, "ps_sync") == 0 || strcmp(smode, "ps_sync_in_graph") == 0;
	const int in_graph = strcmp(smode, "ps_sync_in_graph") == 0;
	int rc = 0;
	dtrain_result res;
	/* t2t's flags name GPUs (seed 000's async lines say --worker_gpu=1):
	 * dtrain computes on the CPU, which is worth one line, not an error.
	 * The in-graph master says its own (the ps tasks compute there). */
	if (a->worker_gpu_given && a->worker_gpu >= 1 && mode != MODE_PS && !in_graph)
		dt_info("--worker_gpu=%d: dtrain has no GPU kernels; this task computes on the CPU%s", a->worker_gpu,
			a->worker_gpu > 1 && cl->num_ps == 0 ? ", one mirrored replica per GPU named, on threads" : "");
	if (a->replicas_to_aggregate && mode == MODE_TRAINER && (!sync || in_graph ||
								  a->replicas_to_aggregate > cl->num_trainers)) {
		dt_err_set(&e, DT_USAGE, "--replicas_to_aggregate=%d needs synchronous training through the ps with at "
					 "least that many trainers (this cluster has %d)", a->replicas_to_aggregate,
			   cl->num_trainers);
		dt_err_hint(&e, "add --sync, or drop --replicas_to_aggregate (default: every trainer)");
		rc = dt_cmd_report(&e);
		goto out;
	}
	if (mode == MODE_PS) {
		dt_info("parameter server for %s on %s (%d ps, %d trainers)", hp.model, problem, cl->num_ps,
			cl->num_trainers);
		rc = dtrain_session_run(s, err) ? report(err) : 0;
		goto out;
	}
	dt_info("training %s on %s for %lld %ssteps, batch %d, %s lr %g (%s), seed %lld", hp.model, problem,
		(long long)a->train_steps, mode == MODE_LOCAL ? "" : "global ", hp.batch_size, hp.optimizer,
		hp.learning_rate, hp.lr_schedule, (long long)a->seed);
	if (dtrain_session_run(s, err) || dtrain_session_result(s, &res, err)) {
		rc = report(err);
		goto out;
	}
	if (sync)
		dt_info("trained %.1f s: %.0f examples/s from this task; %.0f%% of it waiting at the barrier",
			res.train_seconds, res.examples_per_sec, 100.0 * res.barrier_share);
	else if (mode == MODE_TRAINER)
		dt_info("trained %.1f s: %.0f examples/s from this task", res.train_seconds, res.examples_per_sec);
	else if (mode == MODE_ALLREDUCE)
		dt_info("trained %lld steps in %.1f s: %.0f examples/s over all workers", (long long)res.steps,
			res.train_seconds, res.examples_per_sec);
	else
		dt_info("trained %lld steps in %.1f s: %.0f examples/s, first step %.3f s after start",
			(long long)res.steps, res.train_seconds, res.examples_per_sec, res.first_step_seconds);
	if (res.evaluated)
		print_eval(NULL, &res.eval);
	fflush(stdout);
	if (*a->metrics_file && write_metrics(a->metrics_file, problem, threads, &hp, &res, &e))
		rc = dt_cmd_report(&e);
out:
	dtrain_error_free(err);
	return rc;
}

int dt_cmd_train(int argc, char **argv)
{
	dtrain_session_options so;
	dtrain_session_options_init(&so);
	so.train_steps = 2000; /* the CLI's defaults (t2t's where it has them) */
	so.eval_at_end = 1;
	so.prefetch = 1;
	const char *problem = "fashion_mnist";
	struct train_args a = { .model = "cnn", .hparams = "", .hparams_set = "", .log_level = "info", .keras_model = "",
				.metrics_file = "", .timeline = "", .seed = 1,
				.connect_timeout = 120, .ps_idle_timeout = 600, .step_timeout = 60, .ps_overlap = 1,
				.sync_timeout = DT_SYNC_TIMEOUT_DEFAULT_S };
	int64_t steps = so.train_steps, eval_every = 0, log_every = so.log_every;
	int eval = 1, threads = 1, prefetch = 1;
	int replicas = 1, deterministic = 0, micro_batch = 32, help_hparams = 0;
	const char *data_dir = "";
	struct dt_data_flags df = DT_DATA_FLAGS_INIT;
	struct ckpt_args ck = { .output_dir = "", .keep_max = so.keep_checkpoint_max,
				.summary_steps = so.save_summary_steps };
	struct eval_args ea = { .mode = "latest", .timeout_s = 3600 };
	struct warm_args wa = { "", "", "" };
	struct dt_cluster_flags cf;
	dt_cluster_flags_init(&cf);
	struct dt_secret_flags sf = { "", "", 0 };
	struct dt_option opts[] = {
		DT_OPT_GROUP("Model"),
		DT_OPT_STRING("model", &a.model, "NAME", "model to train: mlp, lenet, cnn"),
		DT_OPT_STRING("hparams_set", &a.hparams_set, "NAME", "named hyper-parameter set [default: <model>_base]"),
		DT_OPT_STRING("hparams", &a.hparams, "K=V,...", "overrides, e.g. 'learning_rate=0.05,batch_size=128'"),
		DT_OPT_BOOL("help-hparams", &help_hparams,
			    "print the hyper-parameters of --hparams_set (or the model's default set), with --hparams "
			    "applied, as JSON on stdout and exit"),
		DT_OPT_STRING("keras_model", &a.keras_model, "PATH",
			      "train the Keras model of this JSON (model.to_json() or a TF.js model.json) instead of "
			      "--model; hparams from --hparams_set [default: cnn_base]"),
		DT_OPT_GROUP("Data"),
		DT_OPT_STRING("problem", &problem, "NAME",
			      "fashion_mnist, mnist, synthetic, image_folder, csv, t2t's text problems, or any problem "
			      "whose t2t shards are in --data_dir"),
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
			    "the same bits at any worker or replica count: micro-batches summed in 64-bit fixed point, "
			    "or in micro-batch order for at most 3 a global step (docs/DISTRIBUTED.md)"),
		DT_OPT_INT("micro_batch", &micro_batch, "N",
			   "--deterministic's unit of work in examples; must divide each replica's batch"),
		DT_OPT_GROUP("Output"),
		DT_OPT_INT64("log_every", &log_every, "N", "progress line every N steps (0: none)"),
		DT_OPT_STRING("log_level", &a.log_level, "LEVEL", "debug, info, warn or error"),
		DT_OPT_STRING("metrics_file", &a.metrics_file, "PATH", "write the run's figures as JSON here"),
		DT_OPT_STRING("timeline", &a.timeline, "PATH",
			      "write this task's timeline (input, forward, backward, all-reduce buckets, ps rounds, "
			      "checkpoints, evaluations) as a Chrome trace (Perfetto, chrome://tracing) at the end"),
		DT_OPT_GROUP("Checkpoints and summaries"),
		DT_OPT_STRING("output_dir", &ck.output_dir, "DIR",
			      "checkpoints and summaries go here; training resumes from its latest checkpoint "
			      "[default: $OUTPUT_DIR, else none]"),
		DT_OPT_INT64("save_checkpoints_steps", &ck.save_steps, "N", "save a checkpoint every N steps"),
		DT_OPT_DOUBLE("save_checkpoints_secs", &ck.save_secs, "SECONDS",
			      "save a checkpoint every SECONDS (0: by steps; neither set: 600)"),
		DT_OPT_INT("keep_checkpoint_max", &ck.keep_max, "N", "newest checkpoints kept (0: all)"),
		DT_OPT_INT64("save_summary_steps", &ck.summary_steps, "N", "TensorBoard scalars every N steps (0: none)"),
		DT_OPT_STRING("warm_start_from", &wa.from, "PATH",
			      "start the variables from a dtrain checkpoint or output dir, a safetensors file or Keras "
			      "HDF5 weights (save_weights .h5, Keras 3 .weights.h5) when --output_dir has no checkpoint "
			      "of its own (docs/CHECKPOINTS.md)"),
		DT_OPT_STRING("warm_start_vars", &wa.vars, "REGEX",
			      "only the variables whose names this regular expression matches are warm-started "
			      "(Estimator's vars_to_warm_start) [default: all]"),
		DT_OPT_STRING("predictions_file", &wa.predictions, "PATH",
			      "--schedule=evaluate: write each example's label, predicted class and logits here, one "
			      "JSON line each"),
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
	if (help_hparams)
		return print_hparams(&a, opts);

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
	a.worker_gpu_given = dt_opts_find(opts, "worker_gpu")->was_set;
	a.ps_gpu = cf.ps_gpu;
	if (!(a.ps_idle_timeout >= 0 && a.ps_idle_timeout <= 1e7)) {
		dt_err_set(&err, DT_USAGE, "--ps_idle_timeout must be between 0 and 10000000 seconds, got %g",
			   a.ps_idle_timeout);
		return dt_cmd_report(&err);
	}
	if (resolve_ckpt_args(&ck, opts, &so, &err))
		return dt_cmd_report(&err);
	struct dt_cluster cl;
	enum train_mode mode;
	if (resolve_role(&cf, opts, &eval, &cl, &mode, &err)) {
		dt_cluster_release(&cl);
		return dt_cmd_report(&err);
	}
	const struct cluster_facts facts = { .num_ps = cl.num_ps_replicas, .num_trainers = cl.num_worker_replicas };
	char task[64]; /* the timeline's name of this task, as its log lines' prefix */
	if (mode == MODE_LOCAL)
		snprintf(task, sizeof(task), "chief:0");
	else if (mode == MODE_EVAL && dt_cluster_is_local(&cl))
		snprintf(task, sizeof(task), "evaluator:0");
	else
		snprintf(task, sizeof(task), "%s:%d", dt_job_name(cl.task.job), cl.task.index);
	/* Every connection of a cluster task is authenticated when a secret is given. */
	const char *secret = NULL;
	dtrain_wire_security wire = DTRAIN_WIRE_AUTH;
	if (mode != MODE_LOCAL && mode != MODE_EVAL) {
		const char *own = dt_cluster_address(&cl, cl.task.job, cl.task.index);
		if (dt_cmd_cluster_secret(&sf, &own, 1, &secret, &wire, &err)) {
			dt_cluster_release(&cl);
			return dt_cmd_report(&err);
		}
	}
	dtrain_builtin b;
	dtrain_builtin_init(&b);
	b.model = a.model;
	b.hparams_set = a.hparams_set;
	b.hparams = a.hparams;
	b.keras_model = a.keras_model;
	b.problem = problem;
	b.data_dir = data_dir;
	if (dt_data_flags_resolve(&df, &b, &err)) {
		dt_cluster_release(&cl);
		return dt_cmd_report(&err);
	}
	/* The session takes the cluster this task resolved from its flags. */
	dtrain_cluster *pcl = NULL;
	dtrain_session *s = NULL;
	dtrain_error *perr = dtrain_error_new();
	int rc = 0;
	if (dt__api_cluster_adopt(&cl, &pcl, perr) || dtrain_session_new_builtin(&b, pcl, &s, perr) ||
	    (secret && dtrain_session_set_secret(s, secret, wire, perr))) {
		rc = report(perr);
		goto out;
	}
	so.train_steps = a.train_steps = steps;
	so.eval_every = eval_every;
	so.eval_at_end = eval;
	so.log_every = log_every;
	so.seed = (uint64_t)a.seed;
	so.threads = threads;
	so.prefetch = prefetch;
	so.sync = a.sync;
	so.replicas_to_aggregate = a.replicas_to_aggregate;
	so.sync_timeout_secs = a.sync_timeout;
	so.connect_timeout_secs = a.connect_timeout;
	so.ps_idle_timeout_secs = a.ps_idle_timeout;
	so.ps_overlap = a.ps_overlap;
	so.worker_gpu = a.worker_gpu;
	so.ps_gpu = a.ps_gpu;
	so.step_timeout_secs = a.step_timeout;
	so.check_replicas_every = a.check_replicas_every;
	so.min_workers = (int)a.min_workers;
	if ((so.replicas = resolve_replicas(replicas, opts, &cf, &facts, mode, &err)) < 1) {
		rc = dt_cmd_report(&err);
		goto out;
	}
	if (deterministic && (mode == MODE_PS || mode == MODE_TRAINER)) {
		dt_err_set(&err, DT_USAGE, "--deterministic is built for one process, --replicas and all-reduce clusters; "
					   "training through parameter servers applies float sums in arrival order");
		dt_err_hint(&err, "drop --deterministic, or train with all-reduce (a cluster with no ps job)");
		rc = dt_cmd_report(&err);
		goto out;
	}
	so.deterministic = deterministic;
	so.micro_batch = micro_batch;
	if (*a.timeline) {
		if (dt_trace_open(a.timeline, task, 0, &err)) {
			rc = dt_cmd_report(&err);
			goto out;
		}
	}
	if (mode == MODE_EVAL) {
		if (eval_options(cf.schedule, &ea, &wa, &so, &err)) {
			rc = dt_cmd_report(&err);
			goto out;
		}
		if (dtrain_session_configure(s, &so, perr) || set_warm(s, &wa, perr) ||
		    dtrain_session_set_eval_report(s, print_eval, NULL, perr) || dtrain_session_run(s, perr))
			rc = report(perr);
		goto out;
	}
	so.eval_after_save = strcmp(cf.schedule, "train_and_evaluate") == 0;
	if (*wa.predictions) {
		dt_err_set(&err, DT_USAGE, "--predictions_file is for an evaluation-only run");
		dt_err_hint(&err, "add --schedule=evaluate (or run `dtrain evaluate`)");
		rc = dt_cmd_report(&err);
		goto out;
	}
	if (dtrain_session_configure(s, &so, perr) || set_warm(s, &wa, perr)) {
		rc = report(perr);
		goto out;
	}
	/* The chief's run files (t2t's hparams.json and flags.txt). */
	char *flags = dt_summary_format_flags(opts);
	dtrain_status wst = dtrain_session_write_run_files(s, flags, perr);
	free(flags);
	if (wst) {
		rc = report(perr);
		goto out;
	}
	rc = run_mode(mode, &facts, s, problem, threads, &a);
out:
	if (dt_trace_on() && dt_trace_close(&err) && rc == 0)
		rc = dt_cmd_report(&err);
	dtrain_session_free(s);
	dtrain_cluster_free(pcl);
	dtrain_error_free(perr);
	dt_cluster_release(&cl);
	return rc;
}
