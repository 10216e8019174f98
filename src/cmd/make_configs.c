/*
 * make_configs.c — `dtrain make-configs`: t2t-make-tf-configs, with checks.
 *
 *   --format=t2t (default)  exactly t2t's output: the banner line on stdout,
 *                           then per task '<TF_CONFIG>' TAB <flags>
 *   --format=json           one JSON object per line and task:
 *                           {"type": ..., "index": ..., "TF_CONFIG": "<text>", "args": [...]}
 *   --format=shell          "# <banner>", then per task
 *                           TF_CONFIG='<json>' dtrain train <flags>
 *
 * The plan itself (cluster/plan.h) refuses what t2t silently mangles.
 * --secret_file=PATH adds --cluster_secret_file=PATH to every task's flags
 * (after t2t's, which stay exactly as t2t prints them): PATH must be where
 * each task's machine finds the secret, and it is checked here as a task
 * would check it (SECURITY.md). Without it, a plan whose tasks are not all
 * on loopback gets a note on stderr: such tasks refuse to start without one.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "cluster/plan.h"
#include "cmd/cmd.h"
#include "cmd/secret.h"
#include "net/auth.h"

static const char *const formats[] = { "t2t", "json", "shell" };

/* A flag as a program receives it once the shell has removed the quotes
 * make-configs prints around --worker_job's value. */
static char *unquoted(const char *flag)
{
	size_t len = strlen(flag);
	char *out = dt_xmalloc(len + 1);
	size_t k = 0;
	for (size_t i = 0; i < len; i++)
		if (flag[i] != '\'')
			out[k++] = flag[i];
	out[k] = '\0';
	return out;
}

/* The extra flag (--secret_file), as a shell word and as the program gets it; "" when none. */
static char secret_word[1200], secret_arg[1100];

static void print_json(const struct dt_plan *plan)
{
	for (int i = 0; i < plan->ntasks; i++) {
		const struct dt_plan_task *t = &plan->tasks[i];
		char *conf = dt_plan_json_quote(t->tf_config);
		printf("{\"type\": \"%s\", \"index\": %d, \"TF_CONFIG\": %s, \"args\": [", dt_job_name(t->task.job),
		       t->task.index, conf);
		free(conf);
		int first = 1;
		for (int k = 0; k < t->nflags; k++) {
			if (!t->flags[k][0])
				continue;
			char *plain = unquoted(t->flags[k]);
			char *q = dt_plan_json_quote(plain);
			printf("%s%s", first ? "" : ", ", q);
			first = 0;
			free(q);
			free(plain);
		}
		if (secret_arg[0]) {
			char *q = dt_plan_json_quote(secret_arg);
			printf("%s%s", first ? "" : ", ", q);
			free(q);
		}
		printf("]}\n");
	}
}

static void print_shell(const struct dt_plan *plan)
{
	printf("# %s\n", plan->banner);
	for (int i = 0; i < plan->ntasks; i++) {
		const struct dt_plan_task *t = &plan->tasks[i];
		printf("TF_CONFIG='%s' dtrain train", t->tf_config);
		for (int k = 0; k < t->nflags; k++)
			if (t->flags[k][0])
				printf(" %s", t->flags[k]);
		printf("%s%s\n", secret_word[0] ? " " : "", secret_word);
	}
}

static void print_t2t(const struct dt_plan *plan)
{
	printf("%s\n", plan->banner);
	for (int i = 0; i < plan->ntasks; i++) {
		char *flags = dt_plan_t2t_flags(&plan->tasks[i]);
		printf("'%s'\t%s%s%s\n", plan->tasks[i].tf_config, flags, secret_word[0] ? " " : "", secret_word);
		free(flags);
	}
}

/* Whether every address of the comma-separated lists is loopback. */
static int all_loopback(const char *const *lists, int n)
{
	for (int i = 0; i < n; i++) {
		char *copy = dt_xstrdup(lists[i]), *save = NULL;
		int ok = 1;
		for (char *a = strtok_r(copy, ",", &save); a && ok; a = strtok_r(NULL, ",", &save))
			ok = dt_cmd_addr_is_loopback(a);
		free(copy);
		if (!ok)
			return 0;
	}
	return 1;
}

int dt_cmd_make_configs(int argc, char **argv)
{
	const char *masters = "", *ps = "", *evaluator = "", *format = "t2t", *secret_file = "";
	struct dt_option opts[] = {
		DT_OPT_GROUP("Cluster"),
		DT_OPT_STRING("masters", &masters, "HOST:PORT,...",
			      "trainers: one means sync (the ps are the workers), several async (the first is the chief)"),
		DT_OPT_STRING("ps", &ps, "HOST:PORT,...", "parameter servers (with one master: the workers)"),
		DT_OPT_STRING("evaluator", &evaluator, "HOST:PORT", "add an evaluator task (async layout only)"),
		DT_OPT_STRING("secret_file", &secret_file, "PATH",
			      "add --cluster_secret_file=PATH to every task (the secret's path on the tasks' machines; "
			      "make one with `dtrain secret new PATH`)"),
		DT_OPT_GROUP("Output"),
		DT_OPT_STRING("format", &format, "FORMAT",
			      "t2t (t2t-make-tf-configs' lines), json (an object per task), shell (lines to paste)"),
		DT_OPT_END,
	};
	const char *usage = "dtrain make-configs --masters=HOST:PORT,... --ps=HOST:PORT,... [--evaluator=HOST:PORT] "
			    "[--secret_file=PATH] [--format=t2t|json|shell]";
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, usage, &args, &code))
		return code;
	if (args.count > 0) {
		fprintf(stderr, "error: unexpected argument '%s'\n(see 'dtrain make-configs --help')\n", args.items[0]);
		dt_args_release(&args);
		return 2;
	}
	dt_args_release(&args);
	int fmt = -1;
	for (int i = 0; i < (int)(sizeof(formats) / sizeof(formats[0])); i++)
		if (strcmp(format, formats[i]) == 0)
			fmt = i;
	if (fmt < 0) {
		const char *near = dt_nearest(format, formats, sizeof(formats) / sizeof(formats[0]));
		fprintf(stderr, "error: unknown --format '%s'%s%s%s\n(formats: t2t, json, shell)\n", format,
			near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
		return 2;
	}

	struct dt_plan plan;
	struct dt_err err = DT_ERR_INIT;
	if (dt_plan_make(masters, ps, evaluator, &plan, &err) != DT_OK) {
		dt_plan_release(&plan);
		return dt_cmd_report(&err);
	}
	secret_word[0] = secret_arg[0] = '\0';
	if (secret_file[0]) {
		struct dt_auth a;
		if (dt_auth_load(&a, secret_file, DT_WIRE_AUTH, &err) != DT_OK) {
			dt_plan_release(&plan);
			dt_err_prefix(&err, "--secret_file");
			return dt_cmd_report(&err);
		}
		sodium_memzero(&a, sizeof(a));
		if (strchr(secret_file, '\'')) {
			dt_plan_release(&plan);
			fprintf(stderr, "error: --secret_file '%s' has a single quote; use a path without one\n", secret_file);
			return 2;
		}
		snprintf(secret_arg, sizeof(secret_arg), "--cluster_secret_file=%s", secret_file);
		/* A shell word: quoted unless every byte is plainly safe. */
		int plain = 1;
		for (const char *c = secret_file; *c; c++)
			plain &= (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
				 strchr("/._-+:@%,=", *c) != NULL;
		snprintf(secret_word, sizeof(secret_word), plain ? "--cluster_secret_file=%s" : "--cluster_secret_file='%s'",
			 secret_file);
	} else if (!all_loopback((const char *const[]){ masters, ps, evaluator }, 3)) {
		fprintf(stderr, "note: these tasks are not all on loopback: each refuses to start without a cluster "
				"secret; make one with `dtrain secret new PATH`, copy it (mode 0600) to every machine and "
				"add --secret_file=PATH here\n");
	}
	if (fmt == 0)
		print_t2t(&plan);
	else if (fmt == 1)
		print_json(&plan);
	else
		print_shell(&plan);
	dt_plan_release(&plan);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "error: cannot write the plan to stdout\n");
		return 1;
	}
	return 0;
}
