/*
 * launch.c — `dtrain launch`: a whole cluster on this machine from an
 * experiment spec (launch/spec.h) or from flags, or its Kubernetes
 * manifests and Slurm batch script (--emit). docs/LAUNCH.md.
 *
 *   dtrain launch SPEC.yaml
 *   dtrain launch --workers=2 --ps=1 --evaluator -- --model=cnn --problem=fashion_mnist
 *   dtrain launch --emit=k8s|tfjob|slurm SPEC.yaml [--emit_file=PATH]
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cmd/cmd.h"
#include "launch/emit.h"
#include "launch/run.h"
#include "launch/spec.h"
#include "launch/state.h"
#include "launch/sweep.h"

static const char usage[] = "dtrain launch SPEC.yaml | dtrain launch [--workers=N] [--ps=N] [--evaluator] "
			    "[--mode=async|sync|mirrored] -- TRAIN_FLAGS... | dtrain launch --emit=k8s|tfjob|slurm SPEC.yaml | "
			    "dtrain launch --resume=ID";

/* The dtrain binary the tasks run: this very program. */
static void self_path(char *buf, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
	if (n <= 0)
		snprintf(buf, cap, "dtrain");
	else
		buf[n] = '\0';
}

/* Whether this host has a GPU the tasks could use (NVIDIA's or AMD's driver). */
static int host_has_gpu(void)
{
	return access("/dev/nvidia0", F_OK) == 0 || access("/dev/kfd", F_OK) == 0;
}

/* RiseML's `gpus`: dtrain's tasks run on CPUs; one line says so when the
 * spec asks for GPUs this host does not have. */
static void gpu_notice(const struct dt_launch_spec *s)
{
	static const char *const groups[] = { "worker", "ps", "evaluator" };
	char what[160] = "";
	size_t used = 0;
	for (int g = 0; g < DT_GROUP_COUNT; g++)
		if (s->res[g].gpus > 0 && used < sizeof(what) &&
		    (g == DT_GROUP_WORKER || (g == DT_GROUP_PS && s->ps > 0) || (g == DT_GROUP_EVALUATOR && s->evaluators > 0)))
			used += (size_t)snprintf(what + used, sizeof(what) - used, "%s%d per %s", used ? ", " : "",
						 s->res[g].gpus, groups[g]);
	if (used && !host_has_gpu())
		fprintf(stderr, "notice: the spec asks for GPUs (%s) and this host has none: every task runs on its "
				"CPUs\n", what);
}

static int has_double_dash(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--"))
			return 1;
	return 0;
}

int dt_cmd_launch(int argc, char **argv)
{
	int workers = 1, ps = 1, evaluator = 0, backoff = 3;
	double grace = 10, eval_timeout = 300;
	const char *mode = "async", *name = "", *restart = "Never", *output_dir = "", *emit = "", *emit_file = "",
		   *cpus = "", *mem = "", *resume = "";
	struct dt_option opts[] = {
		DT_OPT_GROUP("Cluster (the flags form; a spec file says the same in YAML)"),
		DT_OPT_INT("workers", &workers, "N", "trainers, the chief included"),
		DT_OPT_INT("ps", &ps, "N", "parameter servers (0 with --mode=mirrored)"),
		DT_OPT_BOOL("evaluator", &evaluator, "add an evaluator task"),
		DT_OPT_STRING("mode", &mode, "MODE", "async, sync or mirrored"),
		DT_OPT_STRING("name", &name, "NAME", "experiment name [default: experiment]"),
		DT_OPT_STRING("output_dir", &output_dir, "DIR", "shared output dir [default: the experiment's state dir]"),
		DT_OPT_STRING("cpus", &cpus, "N", "CPUs per task: --threads and CPU affinity"),
		DT_OPT_STRING("mem", &mem, "SIZE", "memory limit per task (2G, 512M)"),
		DT_OPT_GROUP("Failures"),
		DT_OPT_STRING("restart_policy", &restart, "POLICY", "Never, OnFailure or ExitCode"),
		DT_OPT_INT("backoff_limit", &backoff, "N", "restarts allowed in all"),
		DT_OPT_DOUBLE("grace_period", &grace, "SECONDS", "between SIGTERM and SIGKILL when stopping tasks"),
		DT_OPT_DOUBLE("evaluator_timeout", &eval_timeout, "SECONDS", "the evaluator's time after training ends"),
		DT_OPT_GROUP("Sweeps"),
		DT_OPT_STRING("resume", &resume, "ID", "continue sweep ID, whose launcher died: only its unfinished trials run"),
		DT_OPT_GROUP("Beyond one machine"),
		DT_OPT_STRING("emit", &emit, "KIND", "print instead of running: k8s (manifests), tfjob (Kubeflow) or slurm (sbatch)"),
		DT_OPT_STRING("emit_file", &emit_file, "PATH", "write what --emit prints to PATH instead of stdout"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, usage, &args, &code))
		return code;
	struct dt_err err = DT_ERR_INIT;
	struct dt_launch_spec spec;
	dt_launch_spec_init(&spec);
	int flags_form = has_double_dash(argc, argv);
	for (const struct dt_option *o = opts; o->type != DT_OPT_T_END; o++)
		if (o->was_set && o->name && strcmp(o->name, "emit") && strcmp(o->name, "emit_file") &&
		    strcmp(o->name, "resume"))
			flags_form = 1;
	enum dt_status st = DT_OK;
	if (*resume) {
		/* The sweep's own spec file, as it recorded it. */
		char home[512];
		struct dt_exp e;
		memset(&e, 0, sizeof(e));
		dt_exp_home(home, sizeof(home));
		if (flags_form || args.count || *emit)
			st = dt_err_set(&err, DT_USAGE, "--resume takes the sweep's id alone: it reads the spec the sweep "
							"recorded");
		else if (!(st = dt_exp_load(home, resume, &e, &err)) && !e.sweep)
			st = dt_err_set(&err, DT_USAGE, "experiment %s is not a sweep: --resume continues sweeps", e.id);
		if (!st)
			st = dt_launch_spec_load(e.spec, &spec, &err);
		if (!st && !spec.sweep)
			st = dt_err_set(&err, DT_CONFIG, "the spec '%s' of sweep %s has no 'parameters:' any more", e.spec,
					e.id);
		dt_exp_release(&e);
	} else if (!flags_form && args.count == 0) {
		st = dt_err_set(&err, DT_USAGE, "say what to launch: a spec file, or cluster flags and '--' before the "
						"train flags (e.g. dtrain launch --workers=2 --ps=1 -- --model=mlp)");
	} else if (!flags_form) {
		if (args.count != 1) {
			st = dt_err_set(&err, DT_USAGE, "one spec file, got %d arguments (train flags go after '--')",
					args.count);
		} else {
			st = dt_launch_spec_load(args.items[0], &spec, &err);
		}
	} else {
		spec.path = dt_xstrdup("<flags>");
		spec.workers = workers;
		spec.ps = ps;
		spec.evaluators = evaluator;
		spec.backoff_limit = backoff;
		spec.grace_s = grace;
		spec.evaluator_timeout_s = eval_timeout;
		if (*name)
			spec.name = dt_xstrdup(name);
		if (*output_dir)
			spec.output_dir = dt_xstrdup(output_dir);
		const char *modes[] = { "async", "sync", "mirrored" };
		const char *policies[] = { "Never", "OnFailure", "ExitCode" };
		int m = -1, p = -1;
		for (int i = 0; i < 3; i++) {
			if (!strcmp(mode, modes[i]))
				m = i;
			if (!strcmp(restart, policies[i]))
				p = i;
		}
		if (m < 0)
			st = dt_err_set(&err, DT_USAGE, "unknown --mode '%s' (async, sync or mirrored)", mode);
		else if (p < 0)
			st = dt_err_set(&err, DT_USAGE, "unknown --restart_policy '%s' (Never, OnFailure or ExitCode)", restart);
		else if (!(grace >= 0 && grace <= 86400) || !(eval_timeout >= 0 && eval_timeout <= 86400) || backoff < 0)
			st = dt_err_set(&err, DT_USAGE, "--grace_period, --evaluator_timeout and --backoff_limit must not be "
							"negative");
		spec.mode = (enum dt_launch_mode)(m < 0 ? 0 : m);
		spec.restart = (enum dt_restart_policy)(p < 0 ? 0 : p);
		if (!st && spec.mode == DT_LAUNCH_MIRRORED && !dt_opts_find(opts, "ps")->was_set)
			spec.ps = 0;
		if (!st && *cpus) {
			char *end;
			long c = strtol(cpus, &end, 10);
			if (end == cpus || *end || c < 1 || c > 1024)
				st = dt_err_set(&err, DT_USAGE, "--cpus must be a number from 1 to 1024, got '%s'", cpus);
			for (int g = 0; g < DT_GROUP_COUNT; g++)
				spec.res[g].cpus = (int)c;
		}
		for (int g = 0; !st && *mem && g < DT_GROUP_COUNT; g++)
			if ((st = dt_launch_parse_mem(mem, &spec.res[g].mem_bytes, &err)))
				dt_err_prefix(&err, "--mem");
		if (!st) {
			spec.args = dt_xcalloc((size_t)args.count + 1, sizeof(char *));
			for (int i = 0; i < args.count; i++)
				spec.args[spec.nargs++] = dt_xstrdup(args.items[i]);
			st = dt_launch_spec_check(&spec, &err);
		}
	}
	dt_args_release(&args);
	if (st) {
		dt_launch_spec_release(&spec);
		return dt_cmd_report(&err);
	}

	char bin[PATH_MAX];
	self_path(bin, sizeof(bin));
	int rc = 0;
	if (!*emit)
		gpu_notice(&spec);
	if (*emit && spec.sweep) {
		dt_err_set(&err, DT_USAGE, "--emit of a sweep ('parameters:' in '%s') is not supported yet: emit one "
					   "trial's spec, with the values written in", spec.path);
		dt_launch_spec_release(&spec);
		return dt_cmd_report(&err);
	}
	if (*emit) {
		FILE *out = stdout;
		if (*emit_file && !(out = fopen(emit_file, "we"))) {
			dt_err_set(&err, DT_IO, "cannot write '%s'", emit_file);
			dt_launch_spec_release(&spec);
			return dt_cmd_report(&err);
		}
		if (!strcmp(emit, "k8s"))
			st = dt_launch_emit_k8s(&spec, out, &err);
		else if (!strcmp(emit, "tfjob"))
			st = dt_launch_emit_tfjob(&spec, out, &err);
		else if (!strcmp(emit, "slurm"))
			st = dt_launch_emit_slurm(&spec, bin, out, &err);
		else
			st = dt_err_set(&err, DT_USAGE, "unknown --emit '%s' (k8s, tfjob or slurm)", emit);
		if (out != stdout && fclose(out) != 0 && !st)
			st = dt_err_set(&err, DT_IO, "cannot write '%s'", emit_file);
		rc = st ? dt_cmd_report(&err) : 0;
	} else {
		char home[512];
		dt_exp_home(home, sizeof(home));
		struct dt_launch_opts lo = { .home = home, .bin = bin, .out = stdout, .resume = *resume ? resume : NULL };
		if (spec.sweep ? dt_launch_sweep_run(&spec, &lo, &rc, &err) : dt_launch_run(&spec, &lo, &rc, &err))
			rc = dt_cmd_report(&err);
	}
	dt_launch_spec_release(&spec);
	return rc;
}
