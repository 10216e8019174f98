/*
 * cluster.c — the public cluster handle (include/dtrain.h) over
 * cluster/resolve.h: the same resolution as the CLI, with the low-level
 * flags taken out of the program's own argv.
 */
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "base/strutil.h"
#include "cluster/resolve.h"

/* A new empty handle; NULL with DT_NOMEM in e. */
static dtrain_cluster *new_handle(struct dt_err *e)
{
	dtrain_cluster *h = calloc(1, sizeof(*h));
	if (!h) {
		dt_err_set(e, DT_NOMEM, "cannot allocate a cluster");
		return NULL;
	}
	dt_cluster_init(&h->cl);
	return h;
}

/* Resolves from flags and an environment (envp NULL: this process's). */
static dtrain_status resolve(const struct dt_cluster_flags *f, int use_env, dtrain_cluster **out, struct dt_err *e)
{
	dtrain_cluster *h = new_handle(e);
	if (!h)
		return DTRAIN_NOMEM;
	static const char *const no_env[] = { NULL };
	enum dt_status ds = use_env ? dt_cluster_resolve(f, NULL, &h->cl, e)
				    : dt_cluster_resolve_env(f, NULL, no_env, &h->cl, e);
	if (ds) {
		dtrain_cluster_free(h);
		return (dtrain_status)ds;
	}
	h->ready = 1;
	*out = h;
	return DTRAIN_OK;
}

/* The flags dtrain_cluster_resolve takes out of argv. */
enum flag_kind { F_STR, F_INT };
struct flag {
	const char *name;
	enum flag_kind kind;
	size_t offset;
};
static const struct flag flags[] = {
	{ "ps_hosts", F_STR, offsetof(struct dt_cluster_flags, ps_hosts) },
	{ "worker_hosts", F_STR, offsetof(struct dt_cluster_flags, worker_hosts) },
	{ "job_name", F_STR, offsetof(struct dt_cluster_flags, job_name) },
	{ "task_index", F_INT, offsetof(struct dt_cluster_flags, task_index) },
	{ "ps_replicas", F_INT, offsetof(struct dt_cluster_flags, ps_replicas) },
	{ "port_base", F_INT, offsetof(struct dt_cluster_flags, port_base) },
};

/* If argv[i] is one of the flags, stores its value and returns how many
 * entries it used (1 or 2); 0 when it is not one; -1 on an error. */
static int take_flag(struct dt_cluster_flags *f, int argc, char **argv, int i, struct dt_err *e)
{
	const char *a = argv[i];
	if (strncmp(a, "--", 2) != 0)
		return 0;
	a += 2;
	for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]); k++) {
		size_t n = strlen(flags[k].name);
		if (strncmp(a, flags[k].name, n) != 0 || (a[n] != '=' && a[n] != '\0'))
			continue;
		const char *val = NULL;
		int used = 1;
		if (a[n] == '=') {
			val = a + n + 1;
		} else if (i + 1 < argc && argv[i + 1]) {
			val = argv[i + 1];
			used = 2;
		} else {
			dt_err_set(e, DT_USAGE, "--%s needs a value", flags[k].name);
			return -1;
		}
		char *field = (char *)f + flags[k].offset;
		if (flags[k].kind == F_STR) {
			*(const char **)(void *)field = val;
		} else {
			char *end;
			long v = strtol(val, &end, 10);
			if (!*val || *end || v < 0 || v > 1000000) {
				dt_err_set(e, DT_USAGE, "--%s: '%s' is not a whole number from 0 to 1000000", flags[k].name,
					   val);
				return -1;
			}
			*(int *)(void *)field = (int)v;
		}
		return used;
	}
	return 0;
}

dtrain_status dtrain_cluster_resolve(int *argc, char **argv, dtrain_cluster **out, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_resolve: out is NULL");
	*out = NULL;
	if ((argc == NULL) != (argv == NULL))
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_resolve: give both argc and argv, or neither");
	struct dt_cluster_flags f;
	dt_cluster_flags_init(&f);
	if (argc) {
		/* Flags after "--" belong to the program. */
		int n = *argc, w = 0, i = 0;
		for (; i < n && argv[i]; i++) {
			if (strcmp(argv[i], "--") == 0)
				break;
			int used = i == 0 ? 0 : take_flag(&f, n, argv, i, e);
			if (used < 0)
				return (dtrain_status)e->status;
			if (used == 0)
				argv[w++] = argv[i];
			else
				i += used - 1;
		}
		for (; i < n; i++)
			argv[w++] = argv[i];
		if (w < n)
			argv[w] = NULL;
		*argc = w;
	}
	return resolve(&f, 1, out, e);
}

dtrain_status dtrain_cluster_from_flags(const char *ps_hosts, const char *worker_hosts, const char *job_name,
					int task_index, dtrain_cluster **out, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_from_flags: out is NULL");
	*out = NULL;
	struct dt_cluster_flags f;
	dt_cluster_flags_init(&f);
	f.ps_hosts = ps_hosts ? ps_hosts : "";
	f.worker_hosts = worker_hosts ? worker_hosts : "";
	f.job_name = job_name ? job_name : "";
	f.task_index = task_index < 0 ? 0 : task_index;
	return resolve(&f, 0, out, e);
}

dtrain_status dtrain_cluster_from_tf_config(const char *json, dtrain_cluster **out, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_from_tf_config: out is NULL");
	*out = NULL;
	if (!json)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_from_tf_config: json is NULL");
	dtrain_cluster *h = new_handle(e);
	if (!h)
		return DTRAIN_NOMEM;
	dt_cluster_release(&h->cl);
	if (dt_tf_config_parse(json, strlen(json), &h->cl, e)) {
		dtrain_cluster_free(h);
		return (dtrain_status)e->status;
	}
	h->ready = 1;
	*out = h;
	return DTRAIN_OK;
}

dtrain_status dtrain_cluster_new(dtrain_cluster **out, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!out)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_new: out is NULL");
	*out = NULL;
	dtrain_cluster *h = new_handle(e);
	if (!h)
		return DTRAIN_NOMEM;
	h->from_code = 1;
	*out = h;
	return DTRAIN_OK;
}

static enum dt_status job_of(const char *type, const char *fn, enum dt_job *job, struct dt_err *e)
{
	*job = type ? dt_job_parse(type) : DT_JOB_NONE;
	if (*job != DT_JOB_NONE)
		return DT_OK;
	const char *near = type ? dt_job_nearest(type) : NULL;
	dt_err_set(e, DT_CONFIG, "%s: unknown task type '%s'%s%s%s", fn, type ? type : "(null)",
		   near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
	dt_err_hint(e, "task types are chief, evaluator, master, ps and worker");
	return DT_CONFIG;
}

dtrain_status dtrain_cluster_add_task(dtrain_cluster *cl, const char *type, int index, const char *address,
				      dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!cl)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_add_task: cluster is NULL");
	if (cl->ready)
		return (dtrain_status)dt_err_set(e, DT_USAGE,
						 "dtrain_cluster_add_task: the cluster is complete (its task is set)");
	if (!address)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_add_task: address is NULL");
	enum dt_job job;
	if (job_of(type, "dtrain_cluster_add_task", &job, e))
		return DTRAIN_CONFIG;
	return (dtrain_status)dt_cluster_add(&cl->cl, job, index, address, "dtrain_cluster_add_task", e);
}

dtrain_status dtrain_cluster_set_task(dtrain_cluster *cl, const char *type, int index, dtrain_error *err)
{
	struct dt_err *e = dt__api_err(err);
	if (!cl)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_set_task: cluster is NULL");
	if (cl->ready)
		return (dtrain_status)dt_err_set(e, DT_USAGE, "dtrain_cluster_set_task: the task is already set");
	enum dt_job job;
	if (job_of(type, "dtrain_cluster_set_task", &job, e))
		return DTRAIN_CONFIG;
	struct dt_task_given given = { .type = type, .has_index = 1, .index = index };
	if (dt_cluster_validate(&cl->cl, &given, e))
		return (dtrain_status)e->status;
	cl->ready = 1;
	return DTRAIN_OK;
}

void dtrain_cluster_free(dtrain_cluster *cl)
{
	if (!cl)
		return;
	dt_cluster_release(&cl->cl);
	free(cl);
}

const char *dtrain_cluster_task_type(const dtrain_cluster *cl)
{
	if (!cl)
		return "";
	if (!cl->ready)
		return cl->from_code ? "worker" : "";
	return dt_job_name(cl->cl.task.job);
}

int dtrain_cluster_task_index(const dtrain_cluster *cl)
{
	if (!cl)
		return -1;
	return cl->ready ? cl->cl.task.index : 0;
}

int dtrain_cluster_is_chief(const dtrain_cluster *cl)
{
	if (!cl)
		return 0;
	return cl->ready ? cl->cl.is_chief : 1;
}

int dtrain_cluster_num_tasks(const dtrain_cluster *cl, const char *type)
{
	enum dt_job job = cl && type ? dt_job_parse(type) : DT_JOB_NONE;
	return job == DT_JOB_NONE ? 0 : cl->cl.jobs[job].present;
}

const char *dtrain_cluster_address(const dtrain_cluster *cl, const char *type, int index)
{
	enum dt_job job = cl && type ? dt_job_parse(type) : DT_JOB_NONE;
	return job == DT_JOB_NONE ? NULL : dt_cluster_address(&cl->cl, job, index);
}

const char *dtrain_cluster_source(const dtrain_cluster *cl)
{
	if (!cl)
		return "";
	return cl->from_code ? "code" : dt_cluster_source_name(cl->cl.source);
}

/* The validated cluster a session uses; a cluster built in code with no
 * task is the local one. NULL with a message when it is not usable. */
const struct dt_cluster *dt__api_cluster(const dtrain_cluster *cl, struct dt_cluster *local, struct dt_err *e)
{
	if (cl && cl->ready)
		return &cl->cl;
	if (cl && !dt_cluster_is_local(&cl->cl)) {
		dt_err_set(e, DT_USAGE, "the cluster has tasks but not this process's own");
		dt_err_hint(e, "call dtrain_cluster_set_task before dtrain_session_new");
		return NULL;
	}
	dt_cluster_init(local);
	struct dt_task_given none = { 0 };
	if (dt_cluster_validate(local, &none, e))
		return NULL;
	return local;
}

dtrain_status dt__api_cluster_adopt(struct dt_cluster *cl, dtrain_cluster **out, dtrain_error *err)
{
	dtrain_cluster *h = new_handle(dt__api_err(err));
	if (!h) {
		dt_cluster_release(cl);
		return DTRAIN_NOMEM;
	}
	h->cl = *cl; /* moved: the handle owns what cl held */
	dt_cluster_init(cl);
	h->ready = 1;
	*out = h;
	return DTRAIN_OK;
}
