/*
 * cluster.c — the cluster spec: storage, address checks, TensorFlow's
 * validation rules and the facts derived from a valid cluster.
 *
 * The rules and their wording come from tf.estimator.RunConfig
 * (run_config.py: _validate_task_type_and_task_id and the `master` path),
 * train_and_evaluate (training.py) and tf.distribute's
 * multi_worker_util; see docs/CLUSTER.md for the list and their order.
 */
#include "cluster/cluster.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "cluster/internal.h"

static const char *const job_names[DT_JOB_COUNT] = {
#define DT__JOB_TEXT(name, text) text,
	DT_JOB_MAP(DT__JOB_TEXT)
#undef DT__JOB_TEXT
};

static const char *const source_names[DT_SOURCE_COUNT] = {
	"flags", "TF_CONFIG", "slurm", "mpi", "local",
};

const char *dt_job_name(enum dt_job job)
{
	if (job < 0 || job >= DT_JOB_COUNT)
		return "none";
	return job_names[job];
}

enum dt_job dt_job_parse(const char *name)
{
	for (int j = 0; j < DT_JOB_COUNT; j++)
		if (name && strcmp(name, job_names[j]) == 0)
			return (enum dt_job)j;
	return DT_JOB_NONE;
}

const char *dt_job_nearest(const char *name)
{
	return dt_nearest(name, job_names, DT_JOB_COUNT);
}

const char *dt_cluster_source_name(enum dt_cluster_source src)
{
	if (src < 0 || src >= DT_SOURCE_COUNT)
		return "unknown";
	return source_names[src];
}

char *dt_task_ref_format(struct dt_task_ref t, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s:%d", dt_job_name(t.job), t.index);
	return buf;
}

void dt_cluster_init(struct dt_cluster *cl)
{
	memset(cl, 0, sizeof(*cl));
	cl->task = (struct dt_task_ref){ DT_JOB_NONE, -1 };
	cl->chief = (struct dt_task_ref){ DT_JOB_NONE, -1 };
	cl->global_id = -1;
	cl->trainer_index = -1;
	cl->source = DT_SOURCE_LOCAL;
}

void dt_cluster_release(struct dt_cluster *cl)
{
	if (!cl)
		return;
	for (int j = 0; j < DT_JOB_COUNT; j++) {
		for (int i = 0; i < cl->jobs[j].slots; i++)
			free(cl->jobs[j].addrs[i]);
		free(cl->jobs[j].addrs);
	}
	free(cl->rpc_layer);
	free(cl->session_master);
	free(cl->eval_session_master);
	free(cl->environment);
	free(cl->model_dir);
	free(cl->master);
	free(cl->peers);
	dt_cluster_init(cl);
}

const char *dt_cluster_address(const struct dt_cluster *cl, enum dt_job job, int index)
{
	if (job < 0 || job >= DT_JOB_COUNT || index < 0 || index >= cl->jobs[job].slots)
		return NULL;
	return cl->jobs[job].addrs[index];
}

int dt_cluster_is_local(const struct dt_cluster *cl)
{
	for (int j = 0; j < DT_JOB_COUNT; j++)
		if (cl->jobs[j].slots > 0)
			return 0;
	return 1;
}

/* ---- addresses ---- */

static int host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '-' || c == '_';
}

/* Hex digits, ':' and '.' (an embedded IPv4 tail); after a '%', a zone id
 * such as "eth0". */
static int ipv6_char(char c, int in_zone)
{
	if (in_zone)
		return host_char(c);
	return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') || c == ':' || c == '.';
}

#define ADDR_MAX 1024

enum dt_status dt_hostport_check(const char *addr, const char *who, struct dt_err *err)
{
	enum dt_status st;
	size_t len = strlen(addr);
	if (len == 0) {
		st = dt_err_set(err, DT_CONFIG, "%s has an empty address", who);
		dt_err_hint(err, "every task needs a \"host:port\" address, e.g. \"10.0.0.1:2222\"");
		return st;
	}
	if (len > ADDR_MAX)
		return dt_err_set(err, DT_CONFIG, "the address of %s is longer than %d characters", who, ADDR_MAX);
	if (strstr(addr, "://")) {
		st = dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has a scheme", addr, who);
		dt_err_hint(err, "cluster addresses are plain host:port; the protocol goes in \"rpc_layer\"");
		return st;
	}
	const char *colon;
	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');
		if (!close) {
			st = dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has no closing ']'", addr, who);
			dt_err_hint(err, "write an IPv6 address in brackets: [::1]:2222");
			return st;
		}
		if (close == addr + 1)
			return dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has no host", addr, who);
		int in_zone = 0;
		for (const char *p = addr + 1; p < close; p++) {
			if (*p == '%' && !in_zone && p > addr + 1 && p + 1 < close) {
				in_zone = 1;
				continue;
			}
			if (!ipv6_char(*p, in_zone))
				return dt_err_set(err, DT_CONFIG, "address '%.200s' of %s is not a valid IPv6 address ('%c' is not allowed)",
						  addr, who, *p);
		}
		if (close[1] != ':') {
			st = dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has no port", addr, who);
			dt_err_hint(err, "write it as host:port, e.g. '%.*s:2222'", (int)(close - addr + 1), addr);
			return st;
		}
		colon = close + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon) {
			st = dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has no port", addr, who);
			dt_err_hint(err, "write it as host:port, e.g. '%.200s:2222'", addr);
			return st;
		}
		if (colon == addr) {
			st = dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has no host", addr, who);
			dt_err_hint(err, "write it as host:port, e.g. 'localhost%.200s'", addr);
			return st;
		}
		for (const char *p = addr; p < colon; p++) {
			if (*p == ':') {
				st = dt_err_set(err, DT_CONFIG, "address '%.200s' of %s is not host:port", addr, who);
				dt_err_hint(err, "an IPv6 host goes in brackets: [::1]:2222");
				return st;
			}
			if (!host_char(*p)) {
				st = dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has a host with a character that is not allowed ('%c')",
						addr, who, *p);
				dt_err_hint(err, "hosts are names or IP addresses: letters, digits, '.', '-', '_'");
				return st;
			}
		}
	}
	const char *port = colon + 1;
	if (!*port) {
		st = dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has no port", addr, who);
		dt_err_hint(err, "write it as host:port, e.g. '%.200s2222'", addr);
		return st;
	}
	long value = 0;
	for (const char *p = port; *p; p++) {
		if (*p < '0' || *p > '9')
			return dt_err_set(err, DT_CONFIG, "address '%.200s' of %s has a port that is not a number ('%.40s')",
					  addr, who, port);
		if (value <= 65535)
			value = value * 10 + (*p - '0');
	}
	if (value < 1 || value > 65535) {
		st = dt_err_set(err, DT_CONFIG, "port %.40s of %s ('%.200s') is outside 1-65535", port, who, addr);
		dt_err_hint(err, "pick a free TCP port between 1 and 65535 (above 1024 needs no privileges)");
		return st;
	}
	return DT_OK;
}

enum dt_status dt_cluster_add(struct dt_cluster *cl, enum dt_job job, int index, const char *addr,
			      const char *what, struct dt_err *err)
{
	DT_ASSERT(job >= 0 && job < DT_JOB_COUNT);
	char who[64];
	dt_task_ref_format((struct dt_task_ref){ job, index }, who, sizeof(who));
	if (index < 0 || index >= DT_CLUSTER_MAX_TASKS)
		return dt_err_set(err, DT_CONFIG, "%s: task index %d of job '%s' is outside 0-%d", what, index,
				  dt_job_name(job), DT_CLUSTER_MAX_TASKS - 1);
	if (dt_hostport_check(addr, who, err) != DT_OK)
		return dt_err_prefix(err, "%s", what);
	struct dt_cluster_job *j = &cl->jobs[job];
	if (index >= j->slots) {
		j->addrs = dt_xrealloc(j->addrs, (size_t)(index + 1) * sizeof(*j->addrs));
		for (int i = j->slots; i <= index; i++)
			j->addrs[i] = NULL;
		j->slots = index + 1;
	}
	if (j->addrs[index])
		return dt_err_set(err, DT_CONFIG, "%s: %s is listed twice ('%.200s' and '%.200s')", what, who,
				  j->addrs[index], addr);
	j->addrs[index] = dt_xstrdup(addr);
	j->present++;
	return DT_OK;
}

/* ---- messages ---- */

void dt__err_append(struct dt_err *err, const char *fmt, ...)
{
	if (!err)
		return;
	size_t used = strlen(err->msg);
	if (used + 1 >= sizeof(err->msg))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg + used, sizeof(err->msg) - used, fmt, ap);
	va_end(ap);
}

static void append_addr(char *buf, size_t cap, size_t *used, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void append_addr(char *buf, size_t cap, size_t *used, const char *fmt, ...)
{
	if (*used + 1 >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *used, cap - *used, fmt, ap);
	va_end(ap);
	if (n > 0)
		*used += (size_t)n < cap - *used ? (size_t)n : cap - *used - 1;
}

void dt_cluster_format_jobs(const struct dt_cluster *cl, char *buf, size_t cap, int max_per_job)
{
	size_t used = 0;
	buf[0] = '\0';
	if (dt_cluster_is_local(cl)) {
		append_addr(buf, cap, &used, "  (no jobs: one local process)");
		return;
	}
	int first_line = 1;
	for (int j = 0; j < DT_JOB_COUNT; j++) {
		const struct dt_cluster_job *job = &cl->jobs[j];
		if (job->slots == 0)
			continue;
		append_addr(buf, cap, &used, "%s  %-9s ", first_line ? "" : "\n", job_names[j]);
		first_line = 0;
		int shown = 0, sparse = job->present != job->slots;
		for (int i = 0; i < job->slots; i++) {
			if (!job->addrs[i])
				continue;
			if (shown == max_per_job) {
				append_addr(buf, cap, &used, ", ... (%d more)", job->present - shown);
				break;
			}
			if (sparse)
				append_addr(buf, cap, &used, "%s%d=%.200s", shown ? ", " : "", i, job->addrs[i]);
			else
				append_addr(buf, cap, &used, "%s%.200s", shown ? ", " : "", job->addrs[i]);
			shown++;
		}
	}
}

static const char *origin(const struct dt_cluster *cl)
{
	return cl->source_detail[0] ? cl->source_detail : dt_cluster_source_name(cl->source);
}

/* Appends "\ncluster (from X):\n<jobs>" and, when given, "\ntask: t:i". */
static void append_cluster(const struct dt_cluster *cl, const struct dt_task_given *g, struct dt_err *err)
{
	char jobs[600];
	dt_cluster_format_jobs(cl, jobs, sizeof(jobs), 4);
	dt__err_append(err, "\ncluster (from %s):\n%s", origin(cl), jobs);
	if (g) {
		char index[32] = "(not set)";
		if (g->has_index)
			snprintf(index, sizeof(index), "%lld", g->index);
		dt__err_append(err, "\ntask: %.60s:%s", g->type && *g->type ? g->type : "(not set)", index);
	}
}

/* TensorFlow's two messages that embed the cluster spec. */
static void append_spec_note(const struct dt_cluster *cl, struct dt_err *err)
{
	char jobs[600];
	dt_cluster_format_jobs(cl, jobs, sizeof(jobs), 4);
	dt__err_append(err, "\n%s\n\nNote that these values may be coming from the TF_CONFIG environment variable.", jobs);
}

/* How the task's type and index are spelled by the source, for hints. */
static const char *type_key(const struct dt_cluster *cl)
{
	return cl->source == DT_SOURCE_FLAGS ? "--job_name" : "the task's \"type\"";
}

static const char *index_key(const struct dt_cluster *cl)
{
	return cl->source == DT_SOURCE_FLAGS ? "--task_index" : "the task's \"index\"";
}

/* "chief, ps, worker": the jobs this cluster has. */
static void present_jobs(const struct dt_cluster *cl, char *buf, size_t cap)
{
	const char *names[DT_JOB_COUNT];
	size_t n = 0;
	for (int j = 0; j < DT_JOB_COUNT; j++)
		if (cl->jobs[j].slots)
			names[n++] = job_names[j];
	dt_join(buf, cap, names, n, ", ");
}

/* ---- duplicate addresses ---- */

struct addr_entry {
	const char *addr;
	struct dt_task_ref ref;
};

static int cmp_addr_entry(const void *a, const void *b)
{
	const struct addr_entry *x = a, *y = b;
	int c = strcmp(x->addr, y->addr);
	if (c)
		return c;
	if (x->ref.job != y->ref.job)
		return x->ref.job < y->ref.job ? -1 : 1;
	return x->ref.index < y->ref.index ? -1 : x->ref.index > y->ref.index;
}

static enum dt_status check_duplicates(const struct dt_cluster *cl, struct dt_err *err)
{
	size_t n = 0;
	for (int j = 0; j < DT_JOB_COUNT; j++)
		n += (size_t)cl->jobs[j].present;
	if (n < 2)
		return DT_OK;
	struct addr_entry *e = dt_xmallocarray(n, sizeof(*e));
	size_t k = 0;
	for (int j = 0; j < DT_JOB_COUNT; j++)
		for (int i = 0; i < cl->jobs[j].slots; i++)
			if (cl->jobs[j].addrs[i])
				e[k++] = (struct addr_entry){ cl->jobs[j].addrs[i], { (enum dt_job)j, i } };
	qsort(e, n, sizeof(*e), cmp_addr_entry);
	enum dt_status st = DT_OK;
	for (size_t i = 1; i < n && !st; i++) {
		if (strcmp(e[i - 1].addr, e[i].addr) != 0)
			continue;
		char a[64], b[64];
		st = dt_err_set(err, DT_CONFIG, "address '%.200s' is used by both %s and %s", e[i].addr,
				dt_task_ref_format(e[i - 1].ref, a, sizeof(a)), dt_task_ref_format(e[i].ref, b, sizeof(b)));
		append_cluster(cl, NULL, err);
		dt_err_hint(err, "every task listens on its own address: give each one a different port");
	}
	free(e);
	return st;
}

/* ---- derived facts ---- */

static void add_peer(struct dt_cluster *cl, enum dt_job job, int index, int *cap)
{
	if (cl->task.job == job && cl->task.index == index)
		return;
	if (cl->npeers == *cap) {
		*cap = *cap ? *cap * 2 : 8;
		cl->peers = dt_xrealloc(cl->peers, (size_t)*cap * sizeof(*cl->peers));
	}
	cl->peers[cl->npeers++] = (struct dt_task_ref){ job, index };
}

static void add_job_peers(struct dt_cluster *cl, enum dt_job job, int *cap)
{
	for (int i = 0; i < cl->jobs[job].slots; i++)
		if (cl->jobs[job].addrs[i])
			add_peer(cl, job, i, cap);
}

static int is_trainer(enum dt_job job)
{
	return job == DT_JOB_CHIEF || job == DT_JOB_MASTER || job == DT_JOB_WORKER;
}

static void derive(struct dt_cluster *cl)
{
	free(cl->master);
	free(cl->peers);
	cl->master = NULL;
	cl->peers = NULL;
	cl->npeers = 0;
	const struct dt_cluster_job *jobs = cl->jobs;

	if (dt_cluster_is_local(cl)) {
		cl->chief = (struct dt_task_ref){ DT_JOB_WORKER, 0 };
		cl->is_chief = 1;
		cl->num_worker_replicas = 1;
		cl->num_ps_replicas = 0;
		cl->global_id = 0;
		cl->trainer_index = 0;
		cl->master = dt_xstrdup("");
		return;
	}

	enum dt_job chief_job = jobs[DT_JOB_MASTER].slots ? DT_JOB_MASTER
				: jobs[DT_JOB_CHIEF].slots ? DT_JOB_CHIEF : DT_JOB_WORKER;
	cl->chief = (struct dt_task_ref){ chief_job, 0 };
	cl->is_chief = cl->task.job == chief_job && cl->task.index == 0;
	cl->num_worker_replicas = jobs[DT_JOB_WORKER].present + jobs[DT_JOB_CHIEF].present + jobs[DT_JOB_MASTER].present;
	cl->num_ps_replicas = jobs[DT_JOB_PS].present;

	/* Global id: the chief's job, the others alphabetically, ps last; the
	 * trainer index: the same walk over the trainer jobs only. */
	cl->global_id = -1;
	cl->trainer_index = -1;
	if (cl->task.job != DT_JOB_EVALUATOR) {
		enum dt_job order[DT_JOB_COUNT];
		int n = 0;
		order[n++] = chief_job;
		for (int j = 0; j < DT_JOB_COUNT; j++)
			if (j != (int)chief_job && j != DT_JOB_PS)
				order[n++] = (enum dt_job)j;
		order[n++] = DT_JOB_PS;
		int offset = 0, trainers_before = 0;
		for (int k = 0; k < n; k++) {
			if (order[k] == cl->task.job) {
				cl->global_id = offset + cl->task.index;
				if (order[k] != DT_JOB_PS)
					cl->trainer_index = trainers_before + cl->task.index;
				break;
			}
			offset += jobs[order[k]].slots;
			if (order[k] != DT_JOB_EVALUATOR)
				trainers_before += jobs[order[k]].slots;
		}
	}

	/* Session target, as RunConfig / TFConfigClusterResolver compute it. */
	int njobs = 0, single = 0;
	for (int j = 0; j < DT_JOB_COUNT; j++)
		if (jobs[j].slots) {
			njobs++;
			single = jobs[j].slots == 1;
		}
	if (cl->task.job == DT_JOB_EVALUATOR) {
		cl->master = dt_xstrdup(cl->eval_session_master ? cl->eval_session_master : "");
	} else if (cl->session_master) {
		cl->master = dt_xstrdup(cl->session_master);
	} else if (njobs == 1 && single) {
		cl->master = dt_xstrdup("");
	} else {
		const char *addr = dt_cluster_address(cl, cl->task.job, cl->task.index);
		const char *scheme = cl->rpc_layer && *cl->rpc_layer ? cl->rpc_layer : "grpc";
		size_t len = strlen(scheme) + 3 + strlen(addr) + 1;
		cl->master = dt_xmalloc(len);
		snprintf(cl->master, len, "%s://%s", scheme, addr);
	}

	/* Peers: TensorFlow's default device filters. */
	int cap = 0;
	if (cl->task.job == DT_JOB_EVALUATOR)
		return;
	if (cl->num_ps_replicas > 0) {
		if (cl->task.job == DT_JOB_PS) {
			add_job_peers(cl, DT_JOB_CHIEF, &cap);
			add_job_peers(cl, DT_JOB_MASTER, &cap);
			add_job_peers(cl, DT_JOB_WORKER, &cap);
		} else {
			add_job_peers(cl, DT_JOB_PS, &cap);
		}
		return;
	}
	for (int j = 0; j < DT_JOB_COUNT; j++)
		if (is_trainer((enum dt_job)j))
			add_job_peers(cl, (enum dt_job)j, &cap);
}

/* ---- validation ---- */

static enum dt_status fail_tail(const struct dt_cluster *cl, const struct dt_task_given *g, struct dt_err *err)
{
	append_cluster(cl, g, err);
	return DT_CONFIG;
}

enum dt_status dt_cluster_validate(struct dt_cluster *cl, const struct dt_task_given *given, struct dt_err *err)
{
	const struct dt_task_given none = { NULL, 0, 0 };
	const struct dt_task_given *g = given ? given : &none;
	const char *type = g->type && *g->type ? g->type : NULL;
	struct dt_cluster_job *jobs = cl->jobs;
	char list[128];

	if (dt_cluster_is_local(cl)) {
		/* RunConfig's local mode: task type defaults to worker, index to 0. */
		if (type && strcmp(type, "worker") != 0) {
			dt_err_set(err, DT_CONFIG, "If \"cluster\" is not set in TF_CONFIG, task type must be WORKER.");
			fail_tail(cl, g, err);
			dt_err_hint(err, "add a \"cluster\" that lists the '%.60s' job, or leave \"task\" out to run one local process",
				    type);
			return DT_CONFIG;
		}
		if (g->has_index && g->index != 0) {
			dt_err_set(err, DT_CONFIG, "If \"cluster\" is not set in TF_CONFIG, task index must be 0.");
			fail_tail(cl, g, err);
			dt_err_hint(err, "a process without a cluster is worker:0; add a \"cluster\" to run task %lld", g->index);
			return DT_CONFIG;
		}
		cl->task = (struct dt_task_ref){ DT_JOB_WORKER, 0 };
		derive(cl);
		return DT_OK;
	}

	if (jobs[DT_JOB_MASTER].slots) {
		/* The legacy path: `master` plays the chief. */
		if (jobs[DT_JOB_CHIEF].slots) {
			dt_err_set(err, DT_CONFIG, "If `master` node exists in `cluster`, job `chief` is not supported.");
			fail_tail(cl, g, err);
			dt_err_hint(err, "keep one of them: \"chief\" (TensorFlow 2, async training) or \"master\" (t2t sync training)");
			return DT_CONFIG;
		}
		if (type && strcmp(type, "evaluator") == 0) {
			dt_err_set(err, DT_CONFIG, "If `master` node exists in `cluster`, task_type `evaluator` is not supported.");
			fail_tail(cl, g, err);
			dt_err_hint(err, "rename the \"master\" job to \"chief\", or run the evaluator without TF_CONFIG "
					 "(t2t: --schedule=continuous_eval)");
			return DT_CONFIG;
		}
		if (jobs[DT_JOB_MASTER].slots > 1) {
			dt_err_set(err, DT_CONFIG, "The \"cluster\" in TF_CONFIG must have only one \"master\" node.");
			fail_tail(cl, g, err);
			dt_err_hint(err, "keep one address in \"master\" and list the others under \"worker\"");
			return DT_CONFIG;
		}
	} else if (jobs[DT_JOB_CHIEF].slots > 1) {
		dt_err_set(err, DT_CONFIG, "The \"cluster\" in TF_CONFIG must have only one \"chief\" node.");
		fail_tail(cl, g, err);
		dt_err_hint(err, "keep one address in \"chief\" and list the others under \"worker\"");
		return DT_CONFIG;
	}
	if (jobs[DT_JOB_EVALUATOR].slots > 1) {
		dt_err_set(err, DT_CONFIG, "There must be at most one 'evaluator' job.");
		fail_tail(cl, g, err);
		dt_err_hint(err, "list one evaluator address; an evaluator only reads checkpoints");
		return DT_CONFIG;
	}
	if (!jobs[DT_JOB_CHIEF].slots && !jobs[DT_JOB_MASTER].slots && !jobs[DT_JOB_WORKER].slots) {
		dt_err_set(err, DT_CONFIG, "the cluster has no \"chief\", \"master\" or \"worker\" job, so no task would train");
		fail_tail(cl, g, err);
		dt_err_hint(err, "add a \"worker\" job (worker 0 is the chief) or a \"chief\" job");
		return DT_CONFIG;
	}

	present_jobs(cl, list, sizeof(list));
	if (!type) {
		dt_err_set(err, DT_CONFIG, "If \"cluster\" is set in TF_CONFIG, task type must be set.");
		fail_tail(cl, g, err);
		dt_err_hint(err, "name this process's task with %s: one of %s", type_key(cl), list);
		return DT_CONFIG;
	}
	if (!g->has_index) {
		dt_err_set(err, DT_CONFIG, "If \"cluster\" is set in TF_CONFIG, task index must be set.");
		fail_tail(cl, g, err);
		dt_err_hint(err, "give this process's index with %s (counted from 0)", index_key(cl));
		return DT_CONFIG;
	}
	if (g->index < 0) {
		dt_err_set(err, DT_CONFIG, "Task index must be non-negative number.");
		fail_tail(cl, g, err);
		dt_err_hint(err, "task indices count from 0 within each job");
		return DT_CONFIG;
	}

	enum dt_job job = dt_job_parse(type);
	if (job == DT_JOB_EVALUATOR) {
		/* The evaluator is not part of the training cluster (RunConfig). */
		if (g->index > 0) {
			dt_err_set(err, DT_CONFIG,
				   "For distributed training, there can only be one `evaluator` task (with task id 0).");
			fail_tail(cl, g, err);
			dt_err_hint(err, "use index 0 for the evaluator");
			return DT_CONFIG;
		}
	} else if (job == DT_JOB_NONE || jobs[job].slots == 0) {
		dt_err_set(err, DT_CONFIG, "%.60s is not a valid task_type in the cluster_spec:", type);
		append_spec_note(cl, err);
		const char *near = job == DT_JOB_NONE ? dt_job_nearest(type) : NULL;
		if (near && jobs[dt_job_parse(near)].slots)
			dt_err_hint(err, "did you mean '%s'? %s must be one of the jobs in the cluster: %s", near,
				    type_key(cl), list);
		else
			dt_err_hint(err, "%s must be one of the jobs in the cluster (%s), or add a '%.60s' job", type_key(cl),
				    list, type);
		return DT_CONFIG;
	} else if (g->index >= jobs[job].slots || !jobs[job].addrs[g->index]) {
		dt_err_set(err, DT_CONFIG, "%lld is not a valid task_id for task_type %s in the cluster_spec:", g->index,
			   type);
		append_spec_note(cl, err);
		if (jobs[job].present == jobs[job].slots)
			dt_err_hint(err, "%s lists %d task%s, so %s goes from 0 to %d (or add the address of %s:%lld)",
				    type, jobs[job].slots, jobs[job].slots == 1 ? "" : "s", index_key(cl),
				    jobs[job].slots - 1, type, g->index);
		else
			dt_err_hint(err, "%s is a sparse job without index %lld; add \"%lld\": \"host:port\" to it", type,
				    g->index, g->index);
		return DT_CONFIG;
	}

	enum dt_status st = check_duplicates(cl, err);
	if (st)
		return st;
	cl->task = (struct dt_task_ref){ job, (int)g->index };
	derive(cl);
	return DT_OK;
}

static int str_same(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a, b) == 0;
}

int dt_cluster_same(const struct dt_cluster *a, const struct dt_cluster *b)
{
	for (int j = 0; j < DT_JOB_COUNT; j++) {
		if (a->jobs[j].slots != b->jobs[j].slots)
			return 0;
		for (int i = 0; i < a->jobs[j].slots; i++)
			if (!str_same(a->jobs[j].addrs[i], b->jobs[j].addrs[i]))
				return 0;
	}
	return a->task.job == b->task.job && a->task.index == b->task.index && str_same(a->rpc_layer, b->rpc_layer);
}
