/*
 * plan.c — t2t-make-tf-configs, byte for byte where its input is valid,
 * refusing where t2t would print garbage. See plan.h for the algorithm.
 */
#include "cluster/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cluster/internal.h"

/* ---- a growable string ---- */

struct buf {
	char *s;
	size_t len, cap;
};

static void buf_add(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void buf_add(struct buf *b, const char *fmt, ...)
{
	for (;;) {
		size_t room = b->cap - b->len;
		va_list ap;
		va_start(ap, fmt);
		int n = b->s ? vsnprintf(b->s + b->len, room, fmt, ap) : -1;
		va_end(ap);
		if (n >= 0 && (size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t need = n >= 0 ? b->len + (size_t)n + 1 : 256;
		b->cap = b->cap * 2 > need ? b->cap * 2 : need;
		b->s = dt_xrealloc(b->s, b->cap);
	}
}

char *dt_plan_json_quote(const char *s)
{
	struct buf b = { 0 };
	buf_add(&b, "\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			buf_add(&b, "\\%c", *p);
		else if (*p == '\n')
			buf_add(&b, "\\n");
		else if (*p == '\t')
			buf_add(&b, "\\t");
		else if (*p == '\r')
			buf_add(&b, "\\r");
		else if (*p < 0x20 || *p == 0x7f)
			buf_add(&b, "\\u%04x", *p);
		else
			buf_add(&b, "%c", *p);
	}
	buf_add(&b, "\"");
	return b.s;
}

static void buf_json_string(struct buf *b, const char *s)
{
	char *q = dt_plan_json_quote(s);
	buf_add(b, "%s", q);
	free(q);
}

/* ---- address lists ---- */

struct list {
	char **items;
	int n;
	const char *flag;
};

static void list_free(struct list *l)
{
	for (int i = 0; i < l->n; i++)
		free(l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

static enum dt_status split(const char *text, const char *flag, struct list *out, struct dt_err *err)
{
	out->flag = flag;
	const char *p = text;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (out->n == DT_CLUSTER_MAX_TASKS)
			return dt_err_set(err, DT_CONFIG, "%s lists more than %d addresses", flag, DT_CLUSTER_MAX_TASKS);
		out->items = dt_xrealloc(out->items, (size_t)(out->n + 1) * sizeof(*out->items));
		char *item = dt_xmalloc(len + 1);
		memcpy(item, p, len);
		item[len] = '\0';
		out->items[out->n++] = item;
		char who[64];
		snprintf(who, sizeof(who), "entry %d of %s", out->n, flag);
		enum dt_status st = dt_hostport_check(item, who, err);
		if (st)
			return st;
		if (!comma)
			return DT_OK;
		p = comma + 1;
	}
}

struct entry {
	const char *addr;
	int list, item;
};

static int cmp_entry(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	int c = strcmp(x->addr, y->addr);
	if (c)
		return c;
	if (x->list != y->list)
		return x->list < y->list ? -1 : 1;
	return x->item < y->item ? -1 : x->item > y->item;
}

static enum dt_status check_unique(struct list *const *lists, int nlists, struct dt_err *err)
{
	size_t n = 0, k = 0;
	for (int a = 0; a < nlists; a++)
		n += (size_t)lists[a]->n;
	struct entry *e = dt_xmallocarray(n ? n : 1, sizeof(*e));
	for (int a = 0; a < nlists; a++)
		for (int i = 0; i < lists[a]->n; i++)
			e[k++] = (struct entry){ lists[a]->items[i], a, i };
	qsort(e, n, sizeof(*e), cmp_entry);
	enum dt_status st = DT_OK;
	for (size_t i = 1; i < n && !st; i++) {
		if (strcmp(e[i - 1].addr, e[i].addr) != 0)
			continue;
		st = dt_err_set(err, DT_CONFIG, "address '%.200s' is given twice: entry %d of %s and entry %d of %s",
				e[i].addr, e[i - 1].item + 1, lists[e[i - 1].list]->flag, e[i].item + 1,
				lists[e[i].list]->flag);
		dt_err_hint(err, "every task listens on its own address: give each one a different port");
	}
	free(e);
	return st;
}

/* ---- rows ---- */

static void add_flag(struct dt_plan_task *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add_flag(struct dt_plan_task *t, const char *fmt, ...)
{
	char tmp[1200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	t->flags = dt_xrealloc(t->flags, (size_t)(t->nflags + 1) * sizeof(*t->flags));
	t->flags[t->nflags++] = dt_xstrdup(tmp);
}

static void json_list(struct buf *b, const struct list *l, int from, int to)
{
	buf_add(b, "[");
	for (int i = from; i < to; i++) {
		if (i > from)
			buf_add(b, ", ");
		buf_json_string(b, l->items[i]);
	}
	buf_add(b, "]");
}

static struct dt_plan_task *new_task(struct dt_plan *plan, enum dt_job job, int index, const char *cluster)
{
	plan->tasks = dt_xrealloc(plan->tasks, (size_t)(plan->ntasks + 1) * sizeof(*plan->tasks));
	struct dt_plan_task *t = &plan->tasks[plan->ntasks++];
	memset(t, 0, sizeof(*t));
	t->task = (struct dt_task_ref){ job, index };
	struct buf b = { 0 };
	buf_add(&b, "{\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}, \"environment\": \"cloud\"}", cluster,
		dt_job_name(job), index);
	t->tf_config = b.s;
	return t;
}

enum dt_status dt_plan_make(const char *masters, const char *ps, const char *evaluator, struct dt_plan *out,
			    struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (!masters || !*masters || !ps || !*ps) {
		enum dt_status st = dt_err_set(err, DT_CONFIG, "Must provide --masters and --ps");
		dt_err_hint(err, "e.g. --masters=10.0.0.1:5555 --ps=10.0.0.2:5555,10.0.0.3:5555 (one master: sync, "
				 "the ps are the workers; several: async, the first is the chief)");
		return st;
	}
	struct list lm = { 0 }, lp = { 0 }, le = { 0 };
	struct list *all[3] = { &lm, &lp, &le };
	int with_eval = evaluator && *evaluator;
	enum dt_status st = split(masters, "--masters", &lm, err);
	if (!st)
		st = split(ps, "--ps", &lp, err);
	if (!st && with_eval) {
		st = split(evaluator, "--evaluator", &le, err);
		if (!st && le.n > 1) {
			st = dt_err_set(err, DT_CONFIG, "There must be at most one 'evaluator' job.");
			dt_err_hint(err, "give one --evaluator address");
		}
	}
	if (!st)
		st = check_unique(all, 3, err);
	out->sync = lm.n == 1;
	if (!st && with_eval && out->sync) {
		st = dt_err_set(err, DT_CONFIG,
				"--evaluator needs the async layout (two or more --masters): "
				"If `master` node exists in `cluster`, task_type `evaluator` is not supported.");
		dt_err_hint(err, "with one master, run the evaluator without TF_CONFIG, as t2t advises: "
				 "dtrain train --schedule=continuous_eval --output_dir=<the trainers' output dir>");
	}
	if (st)
		goto out;

	struct buf banner = { 0 };
	if (out->sync)
		buf_add(&banner, "Assuming SYNC distributed training with a single master and %d workers", lp.n);
	else
		buf_add(&banner, "Assuming ASYNC distributed training with %d workers and %d parameter servers", lm.n, lp.n);
	out->banner = banner.s;

	struct buf cluster = { 0 };
	buf_add(&cluster, "{\"ps\": ");
	json_list(&cluster, &lp, 0, lp.n);
	if (out->sync) {
		buf_add(&cluster, ", \"master\": ");
		json_list(&cluster, &lm, 0, 1);
	} else {
		buf_add(&cluster, ", \"chief\": ");
		json_list(&cluster, &lm, 0, 1);
		buf_add(&cluster, ", \"worker\": ");
		json_list(&cluster, &lm, 1, lm.n);
	}
	if (with_eval) {
		buf_add(&cluster, ", \"evaluator\": ");
		json_list(&cluster, &le, 0, 1);
	}
	buf_add(&cluster, "}");

	for (int i = 0; i < lm.n; i++) {
		enum dt_job job = out->sync ? DT_JOB_MASTER : i == 0 ? DT_JOB_CHIEF : DT_JOB_WORKER;
		struct dt_plan_task *t = new_task(out, job, out->sync || i == 0 ? i : i - 1, cluster.s);
		add_flag(t, "--master=grpc://%s", lm.items[i]);
		add_flag(t, "--ps_replicas=%d", lp.n);
		add_flag(t, "--worker_replicas=%d", lm.n);
		add_flag(t, "--worker_gpu=%d", out->sync ? 0 : 1);
		add_flag(t, "--worker_id=%d", i);
		add_flag(t, "--ps_gpu=%d", out->sync ? 1 : 0);
		add_flag(t, "%s", out->sync ? "--sync" : "");
		add_flag(t, "--schedule=train");
		add_flag(t, "--worker_job='/job:%s'", dt_job_name(job));
	}
	for (int i = 0; i < lp.n; i++)
		add_flag(new_task(out, DT_JOB_PS, i, cluster.s), "--schedule=run_std_server");
	if (with_eval)
		add_flag(new_task(out, DT_JOB_EVALUATOR, 0, cluster.s), "--schedule=continuous_eval");
	free(cluster.s);
out:
	for (int i = 0; i < 3; i++)
		list_free(all[i]);
	return st;
}

void dt_plan_release(struct dt_plan *plan)
{
	if (!plan)
		return;
	for (int i = 0; i < plan->ntasks; i++) {
		struct dt_plan_task *t = &plan->tasks[i];
		free(t->tf_config);
		for (int k = 0; k < t->nflags; k++)
			free(t->flags[k]);
		free(t->flags);
	}
	free(plan->tasks);
	free(plan->banner);
	memset(plan, 0, sizeof(*plan));
}

char *dt_plan_t2t_flags(const struct dt_plan_task *t)
{
	struct buf b = { 0 };
	buf_add(&b, "%s", "");
	for (int k = 0; k < t->nflags; k++)
		buf_add(&b, "%s%s", k ? " " : "", t->flags[k]);
	return b.s;
}
