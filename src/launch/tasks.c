/*
 * tasks.c — a spec's tasks, their TF_CONFIG and their command lines.
 */
#include "launch/tasks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cluster/plan.h"

static void add(struct dt_launch_task *tasks, int *n, enum dt_job job, int index, enum dt_launch_group g)
{
	DT_ASSERT(*n < DT_LAUNCH_MAX_TASKS);
	struct dt_launch_task *t = &tasks[(*n)++];
	t->ref.job = job;
	t->ref.index = index;
	t->group = g;
	if (job == DT_JOB_CHIEF || job == DT_JOB_EVALUATOR)
		snprintf(t->name, sizeof(t->name), "%s", dt_job_name(job));
	else
		snprintf(t->name, sizeof(t->name), "%s.%d", dt_job_name(job), index);
}

int dt_launch_tasks(const struct dt_launch_spec *s, struct dt_launch_task *tasks)
{
	int n = 0;
	int ps = s->mode == DT_LAUNCH_MIRRORED ? 0 : s->ps;
	for (int i = 0; i < ps; i++)
		add(tasks, &n, DT_JOB_PS, i, DT_GROUP_PS);
	add(tasks, &n, DT_JOB_CHIEF, 0, DT_GROUP_WORKER);
	for (int i = 0; i + 1 < s->workers; i++)
		add(tasks, &n, DT_JOB_WORKER, i, DT_GROUP_WORKER);
	for (int i = 0; i < s->evaluators; i++)
		add(tasks, &n, DT_JOB_EVALUATOR, i, DT_GROUP_EVALUATOR);
	return n;
}

struct sbuf {
	char *p;
	size_t len, cap;
};

static void put(struct sbuf *b, const char *s)
{
	size_t n = strlen(s);
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = dt_xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, s, n + 1);
	b->len += n;
}

char *dt_launch_tf_config(const struct dt_launch_task *tasks, int ntasks, const char *const *addrs, int self)
{
	/* The evaluator is not listed: no task connects to it, and TensorFlow's
	 * RunConfig and the training operator leave it out of `cluster`. */
	static const enum dt_job order[] = { DT_JOB_CHIEF, DT_JOB_WORKER, DT_JOB_PS };
	struct sbuf b = { 0 };
	put(&b, "{\"cluster\": {");
	int first_job = 1;
	for (size_t j = 0; j < DT_ARRAY_LEN(order); j++) {
		int first = 1;
		/* Tasks of one job are laid out in index order by dt_launch_tasks. */
		for (int i = 0; i < ntasks; i++) {
			if (tasks[i].ref.job != order[j])
				continue;
			if (first) {
				put(&b, first_job ? "\"" : ", \"");
				put(&b, dt_job_name(order[j]));
				put(&b, "\": [");
				first_job = 0;
			} else {
				put(&b, ", ");
			}
			char *q = dt_plan_json_quote(addrs[i]);
			put(&b, q);
			free(q);
			first = 0;
		}
		if (!first)
			put(&b, "]");
	}
	char task[96];
	snprintf(task, sizeof(task), "}, \"task\": {\"type\": \"%s\", \"index\": %d}, \"environment\": \"cloud\"}",
		 dt_job_name(tasks[self].ref.job), tasks[self].ref.index);
	put(&b, task);
	return b.p;
}

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *out = NULL;
	int n = vasprintf(&out, fmt, ap);
	va_end(ap);
	DT_ASSERT(n >= 0);
	return out;
}

char **dt_launch_argv(const struct dt_launch_spec *s, const struct dt_launch_task *t, const char *bin,
		      const char *output_dir, int *argc)
{
	(void)output_dir; /* reaches the task as OUTPUT_DIR in its environment */
	int cap = s->nargs + s->ncommand + 16;
	char **argv = dt_xcalloc((size_t)cap, sizeof(char *));
	int n = 0;
	if (s->ncommand) {
		if (s->shell) {
			argv[n++] = dt_xstrdup("/bin/sh");
			argv[n++] = dt_xstrdup("-c");
			argv[n++] = dt_xstrdup(s->command[0]);
		} else {
			for (int i = 0; i < s->ncommand; i++)
				argv[n++] = dt_xstrdup(s->command[i]);
		}
	} else {
		argv[n++] = dt_xstrdup(bin);
		argv[n++] = dt_xstrdup("train");
		if (s->model) /* the flags form passes everything in args */
			argv[n++] = xprintf("--model=%s", s->model);
		if (s->problem)
			argv[n++] = xprintf("--problem=%s", s->problem);
		if (s->hparams_set)
			argv[n++] = xprintf("--hparams_set=%s", s->hparams_set);
		/* Sync mode is hparam sync=1 (nn/hparams.h), for every task: the
		 * ps must agree with the trainers on how updates are applied. */
		int sync = s->mode == DT_LAUNCH_SYNC && t->ref.job != DT_JOB_EVALUATOR;
		if (s->hparams && s->hparams[0])
			argv[n++] = xprintf("--hparams=%s%s", s->hparams, sync ? ",sync=1" : "");
		else if (sync)
			argv[n++] = dt_xstrdup("--hparams=sync=1");
		if (s->train_steps > 0)
			argv[n++] = xprintf("--train_steps=%lld", (long long)s->train_steps);
		if (t->ref.job == DT_JOB_PS)
			argv[n++] = dt_xstrdup("--schedule=run_std_server");
		int cpus = s->res[t->group].cpus;
		if (cpus > 0)
			argv[n++] = xprintf("--threads=%d", cpus);
		for (int i = 0; i < s->nargs; i++)
			argv[n++] = dt_xstrdup(s->args[i]);
	}
	DT_ASSERT(n < cap);
	argv[n] = NULL;
	if (argc)
		*argc = n;
	return argv;
}

void dt_launch_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

void dt_launch_task_label(char *buf, size_t cap, const char *exp_id, const struct dt_launch_task *t)
{
	snprintf(buf, cap, "%s.%s", exp_id, t->name);
}
