/*
 * slurm.c — the cluster of an srun step, as TensorFlow's
 * SlurmClusterResolver builds it (engines.md §6.2):
 *
 *   1. rank = SLURM_PROCID; tasks = SLURM_STEP_NUM_TASKS (else SLURM_NTASKS);
 *   2. hosts = expand(SLURM_STEP_NODELIST) zipped with
 *      expand(SLURM_STEP_TASKS_PER_NODE), then sorted by host name;
 *   3. task list: for each host, for local index k: "host:<port_base + k>";
 *   4. jobs in name order take consecutive ranks (ps before worker), and
 *      this task is (job, rank - offset of its job).
 *
 * On top of TensorFlow: when SLURMD_NODENAME and SLURM_LOCALID are set, the
 * node and local index Slurm actually gave this rank must match the
 * address the layout gives it (they do not under `srun -m cyclic`, where
 * TensorFlow silently hands out wrong addresses).
 */
#include "cluster/slurm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "cluster/internal.h"

struct strvec {
	char **v;
	int n, cap;
};

static void strvec_push(struct strvec *s, char *str)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 8;
		s->v = dt_xrealloc(s->v, (size_t)s->cap * sizeof(*s->v));
	}
	s->v[s->n++] = str;
}

static void strvec_free(struct strvec *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}

void dt_slurm_hosts_free(char **hosts, int count)
{
	for (int i = 0; i < count; i++)
		free(hosts[i]);
	free(hosts);
}

static enum dt_status bad_hostlist(const char *list, const char *why, struct dt_err *err)
{
	return dt_err_set(err, DT_CONFIG, "Invalid hostlist format \"%.300s\": %s", list, why);
}

static char *concat(const char *a, size_t alen, const char *b, size_t blen)
{
	char *s = dt_xmalloc(alen + blen + 1);
	memcpy(s, a, alen);
	memcpy(s + alen, b, blen);
	s[alen + blen] = '\0';
	return s;
}

/* Reads a decimal number of at most 9 digits at *p; returns its digit count. */
static int read_number(const char **p, long *out)
{
	int digits = 0;
	long v = 0;
	while (**p >= '0' && **p <= '9' && digits < 10) {
		v = v * 10 + (**p - '0');
		(*p)++;
		digits++;
	}
	*out = v;
	return digits > 9 ? -1 : digits;
}

/* Multiplies every name in `names` by the range list between p and end
 * ("01-03,07"), replacing `names`. */
static enum dt_status expand_ranges(const char *list, const char *p, const char *end, struct strvec *names,
				    struct dt_err *err)
{
	struct strvec values = { 0 };
	enum dt_status st = DT_OK;
	while (p < end && !st) {
		long lo, hi;
		int width = read_number(&p, &lo);
		if (width <= 0) {
			st = bad_hostlist(list, "a range must be numbers like 1-3", err);
			break;
		}
		hi = lo;
		if (*p == '-') {
			p++;
			if (read_number(&p, &hi) <= 0) {
				st = bad_hostlist(list, "a range must be numbers like 1-3", err);
				break;
			}
		}
		if (p < end && *p != ',') {
			st = bad_hostlist(list, "a range must be numbers like 1-3", err);
			break;
		}
		if (*p == ',' && ++p == end) {
			st = bad_hostlist(list, "a range ends with ','", err);
			break;
		}
		if (hi < lo) {
			st = bad_hostlist(list, "a range goes from low to high", err);
			break;
		}
		if (hi - lo + 1 > DT_SLURM_MAX_HOSTS || (long)values.n + (hi - lo + 1) > DT_SLURM_MAX_HOSTS) {
			st = bad_hostlist(list, "too many hosts", err);
			break;
		}
		for (long v = lo; v <= hi; v++) {
			char buf[32];
			snprintf(buf, sizeof(buf), "%0*ld", width, v);
			strvec_push(&values, dt_xstrdup(buf));
		}
	}
	if (!st && values.n == 0)
		st = bad_hostlist(list, "empty range '[]'", err);
	if (!st && (long)names->n * values.n > DT_SLURM_MAX_HOSTS)
		st = bad_hostlist(list, "too many hosts", err);
	if (!st) {
		struct strvec out = { 0 };
		for (int i = 0; i < names->n; i++)
			for (int k = 0; k < values.n; k++)
				strvec_push(&out, concat(names->v[i], strlen(names->v[i]), values.v[k], strlen(values.v[k])));
		strvec_free(names);
		*names = out;
	}
	strvec_free(&values);
	return st;
}

/* Expands one host expression (no top-level commas) and appends to `hosts`. */
static enum dt_status expand_one(const char *list, const char *p, const char *end, struct strvec *hosts,
				 struct dt_err *err)
{
	if (p == end)
		return bad_hostlist(list, "empty host name", err);
	struct strvec names = { 0 };
	strvec_push(&names, dt_xstrdup(""));
	enum dt_status st = DT_OK;
	while (p < end && !st) {
		if (*p == '[') {
			const char *close = memchr(p, ']', (size_t)(end - p));
			if (!close) {
				st = bad_hostlist(list, "'[' without ']'", err);
				break;
			}
			st = expand_ranges(list, p + 1, close, &names, err);
			p = close + 1;
		} else if (*p == ']') {
			st = bad_hostlist(list, "']' without '['", err);
		} else {
			const char *lit = p;
			while (p < end && *p != '[' && *p != ']')
				p++;
			for (int i = 0; i < names.n; i++) {
				char *grown = concat(names.v[i], strlen(names.v[i]), lit, (size_t)(p - lit));
				free(names.v[i]);
				names.v[i] = grown;
			}
		}
	}
	if (!st && hosts->n + names.n > DT_SLURM_MAX_HOSTS)
		st = bad_hostlist(list, "too many hosts", err);
	if (!st) {
		for (int i = 0; i < names.n; i++)
			strvec_push(hosts, names.v[i]);
		free(names.v);
	} else {
		strvec_free(&names);
	}
	return st;
}

enum dt_status dt_slurm_expand_hostlist(const char *list, char ***hosts, int *count, struct dt_err *err)
{
	*hosts = NULL;
	*count = 0;
	struct strvec out = { 0 };
	const char *p = list;
	enum dt_status st = DT_OK;
	if (!*list)
		st = bad_hostlist(list, "empty list", err);
	while (*p && !st) {
		/* Split at a comma outside brackets. */
		const char *start = p;
		int depth = 0;
		while (*p && (depth || *p != ',')) {
			if (*p == '[')
				depth++;
			else if (*p == ']')
				depth--;
			if (depth < 0 || depth > 1) {
				st = bad_hostlist(list, "unbalanced brackets", err);
				break;
			}
			p++;
		}
		if (!st && depth)
			st = bad_hostlist(list, "'[' without ']'", err);
		if (!st)
			st = expand_one(list, start, p, &out, err);
		if (!st && *p == ',') {
			p++;
			if (!*p)
				st = bad_hostlist(list, "empty host name", err);
		}
	}
	if (st) {
		strvec_free(&out);
		return st;
	}
	*hosts = out.v;
	*count = out.n;
	return DT_OK;
}

enum dt_status dt_slurm_expand_tasks_per_node(const char *list, int **counts, int *count, struct dt_err *err)
{
	*counts = NULL;
	*count = 0;
	int *v = NULL, n = 0, cap = 0;
	long total = 0;
	const char *p = list;
	const char *why = NULL;
	if (!*p)
		why = "empty list";
	while (*p && !why) {
		long tasks, reps = 1;
		if (read_number(&p, &tasks) <= 0) {
			why = "expected a count like 3 or 3(x2)";
			break;
		}
		if (*p == '(') {
			if (p[1] != 'x') {
				why = "expected a count like 3 or 3(x2)";
				break;
			}
			p += 2;
			if (read_number(&p, &reps) <= 0 || *p != ')') {
				why = "expected a count like 3 or 3(x2)";
				break;
			}
			if (reps == 0) {
				why = "a repeat count is at least 1";
				break;
			}
			p++;
		}
		if (*p && *p != ',') {
			why = "expected a count like 3 or 3(x2)";
			break;
		}
		if (*p == ',' && !*++p) {
			why = "empty count";
			break;
		}
		if (reps > DT_SLURM_MAX_HOSTS || n + reps > DT_SLURM_MAX_HOSTS || tasks > DT_CLUSTER_MAX_TASKS ||
		    (total += tasks * reps) > DT_CLUSTER_MAX_TASKS) {
			why = "too many tasks";
			break;
		}
		for (long r = 0; r < reps; r++) {
			if (n == cap) {
				cap = cap ? cap * 2 : 8;
				v = dt_xrealloc(v, (size_t)cap * sizeof(*v));
			}
			v[n++] = (int)tasks;
		}
	}
	if (why) {
		free(v);
		return dt_err_set(err, DT_CONFIG, "Invalid tasks-per-node list format \"%.300s\": %s", list, why);
	}
	*counts = v;
	*count = n;
	return DT_OK;
}

/* ---- the step's cluster ---- */

struct host_tasks {
	const char *host;
	int tasks;
};

static int cmp_host(const void *a, const void *b)
{
	return strcmp(((const struct host_tasks *)a)->host, ((const struct host_tasks *)b)->host);
}

static enum dt_status not_found(const char *var, struct dt_err *err)
{
	enum dt_status st = dt_err_set(err, DT_CONFIG, "%s not found in environment. Not running inside a SLURM step?", var);
	dt_err_hint(err, "start each task with srun (SLURM_PROCID is set but the step variables are not)");
	return st;
}

static enum dt_status env_int(const char *const *envp, const char *var, long long min, long long max, int *out,
			      struct dt_err *err)
{
	const char *v = dt__env_get(envp, var);
	if (!v)
		return not_found(var, err);
	return dt__env_parse_int(var, v, min, max, out, err);
}

enum dt_status dt__slurm_read(const char *const *envp, int ps_tasks, int port_base, struct dt_cluster *out,
			      struct dt_task_given *task, int *found, struct dt_err *err)
{
	*found = dt__env_get(envp, "SLURM_PROCID") != NULL;
	if (!*found)
		return DT_OK;
	int rank, ntasks;
	enum dt_status st = env_int(envp, "SLURM_PROCID", 0, DT_CLUSTER_MAX_TASKS - 1, &rank, err);
	if (st)
		return st;
	const char *ntasks_var = dt__env_get(envp, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
	st = env_int(envp, ntasks_var, 1, DT_CLUSTER_MAX_TASKS, &ntasks, err);
	if (st)
		return st;
	const char *nodelist = dt__env_get(envp, "SLURM_STEP_NODELIST");
	const char *tpn = dt__env_get(envp, "SLURM_STEP_TASKS_PER_NODE");
	if (!nodelist)
		return not_found("SLURM_STEP_NODELIST", err);
	if (!tpn)
		return not_found("SLURM_STEP_TASKS_PER_NODE", err);

	char **hosts = NULL;
	int nhosts = 0, *counts = NULL, ncounts = 0;
	struct host_tasks *ht = NULL;
	char **addrs = NULL;
	int naddrs = 0;
	st = dt_slurm_expand_hostlist(nodelist, &hosts, &nhosts, err);
	if (!st)
		st = dt_slurm_expand_tasks_per_node(tpn, &counts, &ncounts, err);
	if (st)
		goto out;
	if (nhosts != ncounts) {
		st = dt_err_set(err, DT_CONFIG,
				"SLURM_STEP_NODELIST names %d node%s but SLURM_STEP_TASKS_PER_NODE gives counts for %d",
				nhosts, nhosts == 1 ? "" : "s", ncounts);
		goto out;
	}
	ht = dt_xmallocarray((size_t)nhosts, sizeof(*ht));
	long total = 0;
	for (int i = 0; i < nhosts; i++) {
		ht[i] = (struct host_tasks){ hosts[i], counts[i] };
		total += counts[i];
	}
	qsort(ht, (size_t)nhosts, sizeof(*ht), cmp_host);
	for (int i = 1; i < nhosts; i++)
		if (strcmp(ht[i - 1].host, ht[i].host) == 0) {
			st = dt_err_set(err, DT_CONFIG, "SLURM_STEP_NODELIST names node '%.100s' twice", ht[i].host);
			goto out;
		}
	if (total < ntasks) {
		st = dt_err_set(err, DT_CONFIG, "Requested %d tasks but only %ld were assigned.", ntasks, total);
		dt__err_append(err, " (%s=%d, SLURM_STEP_TASKS_PER_NODE=%.100s)", ntasks_var, ntasks, tpn);
		goto out;
	}
	addrs = dt_xmallocarray((size_t)ntasks, sizeof(*addrs));
	const char *my_host = NULL;
	int my_local = -1;
	for (int i = 0; i < nhosts && naddrs < ntasks; i++) {
		for (int k = 0; k < ht[i].tasks && naddrs < ntasks; k++) {
			if (port_base + k > 65535) {
				st = dt_err_set(err, DT_CONFIG,
						"--port_base=%d leaves no port for task %d on node '%.100s' (%d > 65535)",
						port_base, k, ht[i].host, port_base + k);
				goto out;
			}
			char buf[320];
			snprintf(buf, sizeof(buf), "%.300s:%d", ht[i].host, port_base + k);
			if (naddrs == rank) {
				my_host = ht[i].host;
				my_local = k;
			}
			addrs[naddrs++] = dt_xstrdup(buf);
		}
	}
	if (rank >= ntasks) {
		st = dt_err_set(err, DT_CONFIG, "SLURM_PROCID=%d is not below %s=%d", rank, ntasks_var, ntasks);
		goto out;
	}
	const char *node = dt__env_get(envp, "SLURMD_NODENAME");
	const char *localid = dt__env_get(envp, "SLURM_LOCALID");
	if ((node && strcmp(node, my_host) != 0) || (localid && atoi(localid) != my_local)) {
		st = dt_err_set(err, DT_CONFIG,
				"Slurm runs rank %d as local task %s on node '%.100s', but the layout every rank computes "
				"puts it at %.100s:%d (local task %d on '%.100s')",
				rank, localid ? localid : "?", node ? node : my_host, my_host, port_base + my_local,
				my_local, my_host);
		dt_err_hint(err, "TensorFlow's Slurm layout assumes block distribution: use srun's default "
				 "(-m block), not -m cyclic or --arbitrary");
		goto out;
	}
	if (ps_tasks >= ntasks) {
		st = dt_err_set(err, DT_CONFIG, "--ps_replicas=%d leaves no worker among the %d tasks of the Slurm step",
				ps_tasks, ntasks);
		dt_err_hint(err, "start more tasks (srun -n %d or more) or ask for fewer ps", ps_tasks + 1);
		goto out;
	}
	struct dt__rank_layout layout = { { 0 } };
	layout.counts[DT_JOB_PS] = ps_tasks;
	layout.counts[DT_JOB_WORKER] = ntasks - ps_tasks;
	st = dt__cluster_from_ranks(out, &layout, addrs, ntasks, rank, "Slurm", task, err);
	if (st)
		goto out;
	const char *job = dt__env_get(envp, "SLURM_JOB_ID");
	const char *step = dt__env_get(envp, "SLURM_STEP_ID");
	int n = snprintf(out->source_detail, sizeof(out->source_detail), "Slurm rank %d of %d", rank, ntasks);
	if (job && n > 0 && (size_t)n < sizeof(out->source_detail))
		snprintf(out->source_detail + n, sizeof(out->source_detail) - (size_t)n, ", job %.20s step %.20s", job,
			 step ? step : "?");
out:
	for (int i = 0; i < naddrs; i++)
		free(addrs[i]);
	free(addrs);
	free(ht);
	free(counts);
	dt_slurm_hosts_free(hosts, nhosts);
	return st;
}
