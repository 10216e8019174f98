/*
 * spec.c — the experiment spec parser: libyaml's document tree, walked key
 * by key, every node checked against what its key allows, with the line and
 * column of the offending node in the message.
 */
#include "launch/spec.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/strutil.h"
#include "launch/spec_internal.h"

#define SPEC_MAX_BYTES (1 << 20)
#define SPEC_MAX_LIST 256

static const char *const mode_names[] = { "async", "sync", "mirrored" };
static const char *const policy_names[] = { "Never", "OnFailure", "ExitCode" };
static const char *const group_names[] = { "worker", "ps", "evaluator" };

const char *dt_launch_mode_name(enum dt_launch_mode m)
{
	return (unsigned)m < DT_ARRAY_LEN(mode_names) ? mode_names[m] : "?";
}

const char *dt_restart_policy_name(enum dt_restart_policy p)
{
	return (unsigned)p < DT_ARRAY_LEN(policy_names) ? policy_names[p] : "?";
}

void dt_launch_spec_init(struct dt_launch_spec *s)
{
	memset(s, 0, sizeof(*s));
	s->mode = DT_LAUNCH_ASYNC;
	s->workers = 1;
	s->ps = -1; /* not given: 1, or 0 in mirrored mode (parse_doc) */
	s->restart = DT_RESTART_NEVER;
	s->backoff_limit = 3;
	s->grace_s = 10;
	s->evaluator_timeout_s = 300;
	s->nodes = 1;
}

void dt__spec_free_list(char **items, int n)
{
	for (int i = 0; i < n; i++)
		free(items[i]);
	free(items);
}

void dt_launch_spec_release(struct dt_launch_spec *s)
{
	if (!s)
		return;
	free(s->path);
	free(s->name);
	free(s->model);
	free(s->problem);
	free(s->hparams);
	free(s->hparams_set);
	dt__spec_free_list(s->args, s->nargs);
	dt__spec_free_list(s->command, s->ncommand);
	free(s->output_dir);
	free(s->image);
	free(s->k8s_namespace);
	free(s->output_claim);
	free(s->tf_version);
	dt_launch_sweep_free(s->sweep);
	dt_launch_values_free(s->trial_values);
	dt_launch_spec_init(s);
}

int dt_launch_should_restart(enum dt_restart_policy policy, int code, int signaled)
{
	if (code == 0 && !signaled)
		return 0;
	switch (policy) {
	case DT_RESTART_NEVER:
		return 0;
	case DT_RESTART_ON_FAILURE:
		return 1;
	case DT_RESTART_EXIT_CODE:
		/* Kubeflow's pkg/util/train: 1, 2, 126-128, 139 and anything
		 * unknown are permanent; 130, 137, 138, 143 retryable. Ours on
		 * top: dtrain's exit 3 (peer failure or timeout) is retryable,
		 * and so is any death by signal. */
		if (signaled)
			return 1;
		return code == 3 || code == 130 || code == 137 || code == 138 || code == 143;
	}
	return 0;
}

enum dt_status dt_launch_parse_mem(const char *text, int64_t *out, struct dt_err *err)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	if (end == text || errno || v <= 0)
		return dt_err_set(err, DT_CONFIG, "'%s' is not a positive memory size (e.g. 2G, 512M, or MiB as a number)",
				  text);
	int64_t unit = 1 << 20; /* a bare number is MiB, as RiseML's `mem` */
	if (!strcmp(end, "K") || !strcmp(end, "Ki"))
		unit = 1 << 10;
	else if (!strcmp(end, "M") || !strcmp(end, "Mi"))
		unit = 1 << 20;
	else if (!strcmp(end, "G") || !strcmp(end, "Gi"))
		unit = 1 << 30;
	else if (*end)
		return dt_err_set(err, DT_CONFIG, "unknown unit '%s' in memory size '%s' (use K, M, G, Ki, Mi or Gi)", end,
				  text);
	if (v > INT64_MAX / unit / 2)
		return dt_err_set(err, DT_CONFIG, "memory size '%s' is too large", text);
	*out = v * unit;
	return DT_OK;
}

/* ---- walking the YAML tree ---- */



/* "<file>:<line>:<column>: <message>" (1-based, as editors count). */
enum dt_status dt__spec_at(struct dt__walker *w, const yaml_node_t *n, const char *fmt, ...)
{
	char msg[DT_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dt_err_set(w->err, DT_CONFIG, "%s:%zu:%zu: %s%s", w->path, n ? n->start_mark.line + 1 : 1,
			  n ? n->start_mark.column + 1 : 1, msg, w->trial_note ? w->trial_note : "");
}

const char *dt__spec_scalar(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

/* A scalar value with its "{{ name }}" templates expanded (owned by the
 * walker). An error points at the "{{" itself when the scalar sits on one
 * line as written (plain or quoted), else at the scalar. */
enum dt_status dt__spec_val(struct dt__walker *w, const yaml_node_t *n, const char **out)
{
	char *text = NULL;
	size_t where = 0;
	struct dt_err e = DT_ERR_INIT;
	if (dt_launch_template_expand(dt__spec_scalar(n), w->sw, w->values, w->used, &text, &where, &e)) {
		size_t line = n->start_mark.line + 1, col = n->start_mark.column + 1;
		yaml_scalar_style_t style = n->data.scalar.style;
		if (n->start_mark.line == n->end_mark.line &&
		    (style == YAML_PLAIN_SCALAR_STYLE || style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
		     style == YAML_DOUBLE_QUOTED_SCALAR_STYLE) &&
		    !memchr(dt__spec_scalar(n), '\\', where) && !memchr(dt__spec_scalar(n), '\'', where))
			col += where + (style != YAML_PLAIN_SCALAR_STYLE);
		/* No trial note: a template's name does not depend on the values. */
		return dt_err_set(w->err, DT_CONFIG, "%s:%zu:%zu: %s", w->path, line, col, e.msg);
	}
	if (w->nowned == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 16;
		w->owned = dt_xrealloc(w->owned, (size_t)w->cap * sizeof(char *));
	}
	w->owned[w->nowned++] = text;
	*out = text;
	return DT_OK;
}

enum dt_status dt__spec_string(struct dt__walker *w, const yaml_node_t *n, const char *key, char **out)
{
	if (n->type != YAML_SCALAR_NODE)
		return dt__spec_at(w, n, "'%s' must be a string", key);
	const char *text;
	enum dt_status st = dt__spec_val(w, n, &text);
	if (st)
		return st;
	free(*out);
	*out = dt_xstrdup(text);
	return DT_OK;
}

enum dt_status dt__spec_int(struct dt__walker *w, const yaml_node_t *n, const char *key, int64_t min, int64_t max,
			       int64_t *out)
{
	if (n->type != YAML_SCALAR_NODE)
		return dt__spec_at(w, n, "'%s' must be a number", key);
	const char *text;
	enum dt_status st = dt__spec_val(w, n, &text);
	if (st)
		return st;
	char *end = NULL;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	if (end == text || *end || errno)
		return dt__spec_at(w, n, "'%s' must be a whole number, got '%s'", key, text);
	if (v < min || v > max)
		return dt__spec_at(w, n, "'%s' must be between %lld and %lld, got %lld", key, (long long)min, (long long)max, v);
	*out = v;
	return DT_OK;
}

static enum dt_status want_seconds(struct dt__walker *w, const yaml_node_t *n, const char *key, double *out)
{
	if (n->type != YAML_SCALAR_NODE)
		return dt__spec_at(w, n, "'%s' must be a number of seconds", key);
	const char *text;
	enum dt_status st = dt__spec_val(w, n, &text);
	if (st)
		return st;
	char *end = NULL;
	double v = strtod(text, &end);
	if (end == text || *end || !(v >= 0 && v <= 86400))
		return dt__spec_at(w, n, "'%s' must be between 0 and 86400 seconds, got '%s'", key, text);
	*out = v;
	return DT_OK;
}

enum dt_status dt__spec_enum(struct dt__walker *w, const yaml_node_t *n, const char *key, const char *const *names,
				size_t count, int *out)
{
	if (n->type != YAML_SCALAR_NODE)
		return dt__spec_at(w, n, "'%s' must be one of its names", key);
	const char *text;
	enum dt_status st = dt__spec_val(w, n, &text);
	if (st)
		return st;
	for (size_t i = 0; i < count; i++)
		if (!strcmp(text, names[i])) {
			*out = (int)i;
			return DT_OK;
		}
	char valid[128];
	dt_join(valid, sizeof(valid), names, count, ", ");
	const char *near = dt_nearest(text, names, count);
	return dt__spec_at(w, n, "unknown %s '%s'%s%s%s; valid: %s", key, text, near ? " (did you mean '" : "",
		  near ? near : "", near ? "'?)" : "", valid);
}

enum dt_status dt__spec_list(struct dt__walker *w, const yaml_node_t *n, const char *key, char ***items, int *count)
{
	if (n->type != YAML_SEQUENCE_NODE)
		return dt__spec_at(w, n, "'%s' must be a list of strings", key);
	yaml_node_item_t *it = n->data.sequence.items.start, *end = n->data.sequence.items.top;
	if (end - it > SPEC_MAX_LIST)
		return dt__spec_at(w, n, "'%s' has more than %d items", key, SPEC_MAX_LIST);
	dt__spec_free_list(*items, *count);
	*items = dt_xcalloc((size_t)(end - it) + 1, sizeof(char *));
	*count = 0;
	for (; it < end; it++) {
		yaml_node_t *item = yaml_document_get_node(w->doc, *it);
		if (!item || item->type != YAML_SCALAR_NODE)
			return dt__spec_at(w, item ? item : n, "every item of '%s' must be a string", key);
		const char *text;
		enum dt_status st = dt__spec_val(w, item, &text);
		if (st)
			return st;
		(*items)[(*count)++] = dt_xstrdup(text);
	}
	return DT_OK;
}

yaml_node_t *dt__spec_get(struct dt__walker *w, yaml_node_t *map, const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
		if (k && k->type == YAML_SCALAR_NODE && !strcmp(dt__spec_scalar(k), key))
			return yaml_document_get_node(w->doc, p->value);
	}
	return NULL;
}

void dt__spec_walker_release(struct dt__walker *w)
{
	for (int i = 0; i < w->nowned; i++)
		free(w->owned[i]);
	free(w->owned);
	w->owned = NULL;
	w->nowned = w->cap = 0;
}

/* Calls `fn` for each key of a mapping, refusing unknown and repeated keys. */

enum dt_status dt__spec_map(struct dt__walker *w, yaml_node_t *map, const char *what, const char *const *keys,
			       size_t nkeys, dt__spec_key_fn fn, void *ctx)
{
	if (map->type != YAML_MAPPING_NODE)
		return dt__spec_at(w, map, "%s must be a mapping of keys to values", what);
	unsigned seen = 0;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
		yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
		if (!k || !v)
			return dt__spec_at(w, map, "%s has a broken entry", what);
		if (k->type != YAML_SCALAR_NODE)
			return dt__spec_at(w, k, "keys of %s must be plain names", what);
		size_t i = 0;
		while (i < nkeys && strcmp(keys[i], dt__spec_scalar(k)) != 0)
			i++;
		if (i == nkeys) {
			char valid[512];
			dt_join(valid, sizeof(valid), keys, nkeys, ", ");
			const char *near = dt_nearest(dt__spec_scalar(k), keys, nkeys);
			return dt__spec_at(w, k, "unknown key '%s' in %s%s%s%s; valid: %s", dt__spec_scalar(k), what,
				  near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "", valid);
		}
		if (seen & (1u << i))
			return dt__spec_at(w, k, "key '%s' appears twice in %s", dt__spec_scalar(k), what);
		seen |= 1u << i;
		enum dt_status st = fn(w, dt__spec_scalar(k), v, ctx);
		if (st)
			return st;
	}
	return DT_OK;
}

/* ---- the keys ---- */

struct res_ctx {
	struct dt_launch_resources *res;
	int *set_cpus, *set_mem; /* which of this map's fields were given */
};

enum dt_status dt__spec_res_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct dt_launch_resources *r = ctx;
	if (!strcmp(key, "cpus")) {
		int64_t n;
		enum dt_status st = dt__spec_int(w, v, "cpus", 1, 1024, &n);
		r->cpus = (int)n;
		return st;
	}
	if (!strcmp(key, "gpus")) { /* RiseML's form only (its key lists name it) */
		int64_t n;
		enum dt_status st = dt__spec_int(w, v, "gpus", 0, 64, &n);
		r->gpus = (int)n;
		return st;
	}
	if (v->type != YAML_SCALAR_NODE)
		return dt__spec_at(w, v, "'mem' must be a size such as 2G, 512M or a number of MiB");
	struct dt_err e = DT_ERR_INIT;
	const char *text;
	enum dt_status st = dt__spec_val(w, v, &text);
	if (st)
		return st;
	if (dt_launch_parse_mem(text, &r->mem_bytes, &e))
		return dt__spec_at(w, v, "'mem': %s", e.msg);
	return DT_OK;
}

static const char *const res_keys[] = { "cpus", "mem" };
static const char *const top_res_keys[] = { "cpus", "mem", "worker", "ps", "evaluator" };

struct top_res {
	struct dt_launch_resources all;
	struct dt_launch_resources group[DT_GROUP_COUNT];
	int group_given[DT_GROUP_COUNT];
};

static enum dt_status top_res_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct top_res *t = ctx;
	for (int g = 0; g < DT_GROUP_COUNT; g++)
		if (!strcmp(key, group_names[g])) {
			char what[64];
			snprintf(what, sizeof(what), "'resources.%s'", key);
			t->group_given[g] = 1;
			t->group[g] = (struct dt_launch_resources){ -1, -1, -1 };
			return dt__spec_map(w, v, what, res_keys, DT_ARRAY_LEN(res_keys), dt__spec_res_key, &t->group[g]);
		}
	return dt__spec_res_key(w, key, v, &t->all);
}

static const char *const dist_keys[] = { "mode", "worker", "ps", "evaluator", "nodes" };

static enum dt_status dist_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct dt_launch_spec *s = ctx;
	int64_t n = 0;
	enum dt_status st;
	if (!strcmp(key, "mode")) {
		int m = 0;
		st = dt__spec_enum(w, v, "mode", mode_names, DT_ARRAY_LEN(mode_names), &m);
		s->mode = (enum dt_launch_mode)m;
		return st;
	}
	if (!strcmp(key, "worker")) {
		st = dt__spec_int(w, v, "worker", 1, 64, &n);
		s->workers = (int)n;
	} else if (!strcmp(key, "ps")) {
		st = dt__spec_int(w, v, "ps", 0, 64, &n);
		s->ps = (int)n;
	} else if (!strcmp(key, "nodes")) {
		st = dt__spec_int(w, v, "nodes", 1, DT_LAUNCH_MAX_NODES, &n);
		s->nodes = (int)n;
	} else {
		st = dt__spec_int(w, v, "evaluator", 0, 1, &n);
		s->evaluators = (int)n;
	}
	return st;
}

static const char *const top_keys[] = { "name", "model", "problem", "hparams", "hparams_set", "train_steps",
					"args", "command", "distributed", "resources", "output_dir", "restart_policy",
					"backoff_limit", "grace_period", "evaluator_timeout", "image", "namespace",
					"output_claim", "parameters", "search", "max_trials", "seed", "concurrency",
					"max_failed_trials", "objective", "early_stopping" };

struct top_ctx {
	struct dt_launch_spec *s;
	struct top_res res;
	yaml_node_t *train_key_node; /* first dtrain-train key, for "both given" */
	yaml_node_t *command_node;
};

static enum dt_status top_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct top_ctx *t = ctx;
	struct dt_launch_spec *s = t->s;
	int64_t n = 0;
	enum dt_status st = DT_OK;
	if (dt__spec_is_sweep_key(key))
		return DT_OK; /* read before the walk (dt__spec_sweep_read) */
	if (!strcmp(key, "model") || !strcmp(key, "problem") || !strcmp(key, "hparams") || !strcmp(key, "hparams_set") ||
	    !strcmp(key, "train_steps") || !strcmp(key, "args"))
		if (!t->train_key_node)
			t->train_key_node = v;
	if (!strcmp(key, "name"))
		return dt__spec_string(w, v, key, &s->name);
	if (!strcmp(key, "model"))
		return dt__spec_string(w, v, key, &s->model);
	if (!strcmp(key, "problem"))
		return dt__spec_string(w, v, key, &s->problem);
	if (!strcmp(key, "hparams"))
		return dt__spec_string(w, v, key, &s->hparams);
	if (!strcmp(key, "hparams_set"))
		return dt__spec_string(w, v, key, &s->hparams_set);
	if (!strcmp(key, "output_dir"))
		return dt__spec_string(w, v, key, &s->output_dir);
	if (!strcmp(key, "image"))
		return dt__spec_string(w, v, key, &s->image);
	if (!strcmp(key, "namespace"))
		return dt__spec_string(w, v, key, &s->k8s_namespace);
	if (!strcmp(key, "output_claim"))
		return dt__spec_string(w, v, key, &s->output_claim);
	if (!strcmp(key, "args"))
		return dt__spec_list(w, v, key, &s->args, &s->nargs);
	if (!strcmp(key, "train_steps")) {
		st = dt__spec_int(w, v, key, 1, INT64_MAX / 2, &s->train_steps);
		return st;
	}
	if (!strcmp(key, "command")) {
		t->command_node = v;
		if (v->type == YAML_SCALAR_NODE) {
			dt__spec_free_list(s->command, s->ncommand);
			s->command = dt_xcalloc(2, sizeof(char *));
			const char *text;
			if ((st = dt__spec_val(w, v, &text)))
				return st;
			s->command[0] = dt_xstrdup(text);
			s->ncommand = 1;
			s->shell = 1;
		} else if (v->type == YAML_SEQUENCE_NODE) {
			if ((st = dt__spec_list(w, v, key, &s->command, &s->ncommand)))
				return st;
			s->shell = 0;
		} else {
			return dt__spec_at(w, v, "'command' must be a shell line or a list of arguments");
		}
		if (s->ncommand == 0 || !s->command[0][0])
			return dt__spec_at(w, v, "'command' is empty");
		return DT_OK;
	}
	if (!strcmp(key, "distributed"))
		return dt__spec_map(w, v, "'distributed'", dist_keys, DT_ARRAY_LEN(dist_keys), dist_key, s);
	if (!strcmp(key, "resources"))
		return dt__spec_map(w, v, "'resources'", top_res_keys, DT_ARRAY_LEN(top_res_keys), top_res_key, &t->res);
	if (!strcmp(key, "restart_policy")) {
		int p = 0;
		st = dt__spec_enum(w, v, "restart_policy", policy_names, DT_ARRAY_LEN(policy_names), &p);
		s->restart = (enum dt_restart_policy)p;
		return st;
	}
	if (!strcmp(key, "backoff_limit")) {
		st = dt__spec_int(w, v, key, 0, 1000, &n);
		s->backoff_limit = (int)n;
		return st;
	}
	if (!strcmp(key, "grace_period"))
		return want_seconds(w, v, key, &s->grace_s);
	return want_seconds(w, v, key, &s->evaluator_timeout_s);
}

int dt__spec_name_ok(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len > 40 || name[0] < 'a' || name[0] > 'z' || name[len - 1] == '-')
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '-'))
			return 0;
	return 1;
}

enum dt_status dt_launch_spec_check(const struct dt_launch_spec *s, struct dt_err *err)
{
	if (s->name && !dt__spec_name_ok(s->name))
		return dt_err_set(err, DT_CONFIG,
				  "experiment name '%s' must be 1-40 lowercase letters, digits and '-', starting with a "
				  "letter (it names Kubernetes services)", s->name);
	if (s->k8s_namespace && !dt__spec_name_ok(s->k8s_namespace))
		return dt_err_set(err, DT_CONFIG, "namespace '%s' must be 1-40 lowercase letters, digits and '-', starting "
						  "with a letter (a Kubernetes namespace name)", s->k8s_namespace);
	if (s->output_claim && !dt__spec_name_ok(s->output_claim))
		return dt_err_set(err, DT_CONFIG, "output_claim '%s' must be 1-40 lowercase letters, digits and '-', "
						  "starting with a letter (a PersistentVolumeClaim name)", s->output_claim);
	if (s->workers < 1 || s->ps < 0 || s->evaluators < 0 || s->evaluators > 1)
		return dt_err_set(err, DT_CONFIG, "needs at least 1 worker (the chief), 0 or more ps and at most 1 evaluator");
	if (s->mode == DT_LAUNCH_MIRRORED && s->ps > 0)
		return dt_err_set(err, DT_CONFIG, "mode mirrored uses no parameter servers, but the spec asks for %d ps",
				  s->ps);
	if (s->mode != DT_LAUNCH_MIRRORED && s->ps == 0)
		return dt_err_set(err, DT_CONFIG, "mode %s trains through parameter servers: give 'ps: 1' or more, or "
						  "use 'mode: mirrored'", dt_launch_mode_name(s->mode));
	return DT_OK;
}

static enum dt_status parse_doc(struct dt__walker *w, struct dt_launch_spec *s)
{
	yaml_node_t *root = yaml_document_get_root_node(w->doc);
	if (!root)
		return dt__spec_at(w, NULL, "the spec is empty; it needs at least 'model:' or 'command:'");
	if (dt__spec_is_riseml(w, root))
		return dt__spec_riseml(w, root, s);
	struct top_ctx t = { .s = s };
	for (int g = 0; g < DT_GROUP_COUNT; g++)
		t.res.group[g] = (struct dt_launch_resources){ -1, -1, -1 };
	enum dt_status st = dt__spec_map(w, root, "the spec", top_keys, DT_ARRAY_LEN(top_keys), top_key, &t);
	if (st)
		return st;
	if (t.command_node && t.train_key_node)
		return dt__spec_at(w, t.train_key_node,
			  "'command' and the dtrain train keys (model, problem, hparams, hparams_set, train_steps, "
			  "args) exclude each other; the command runs as given");
	if (!t.command_node && !s->model)
		return dt__spec_at(w, root, "missing command: the spec must say what to run, with 'model:' (dtrain train) or "
				   "'command:'");
	if (s->ps < 0)
		s->ps = s->mode == DT_LAUNCH_MIRRORED ? 0 : 1;
	for (int g = 0; g < DT_GROUP_COUNT; g++) {
		s->res[g] = t.res.all;
		if (t.res.group[g].cpus >= 0)
			s->res[g].cpus = t.res.group[g].cpus;
		if (t.res.group[g].mem_bytes >= 0)
			s->res[g].mem_bytes = t.res.group[g].mem_bytes;
		if (t.res.group[g].gpus >= 0)
			s->res[g].gpus = t.res.group[g].gpus;
	}
	struct dt_err e = DT_ERR_INIT;
	if (dt_launch_spec_check(s, &e)) {
		yaml_node_t *where = root;
		for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
			if (k && k->type == YAML_SCALAR_NODE &&
			    (!strcmp(dt__spec_scalar(k), strstr(e.msg, "name '") ? "name" : "distributed")))
				where = yaml_document_get_node(w->doc, p->value);
		}
		return dt__spec_at(w, where, "%s", e.msg);
	}
	return DT_OK;
}

/* Loads the one document of `text`; DT_CONFIG naming the place when the YAML
 * is malformed or there is a second document. */
static enum dt_status load_doc(const char *text, size_t len, const char *path, yaml_document_t *doc,
			       struct dt_err *err)
{
	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser))
		return dt_err_set(err, DT_NOMEM, "cannot start the YAML parser");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, doc)) {
		enum dt_status st = dt_err_set(err, DT_CONFIG, "%s:%zu:%zu: malformed YAML: %s%s%s", path,
					       parser.problem_mark.line + 1, parser.problem_mark.column + 1,
					       parser.problem ? parser.problem : "unknown error",
					       parser.context ? " " : "", parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		return st;
	}
	/* One document only: a second one would be silently ignored. */
	enum dt_status st = DT_OK;
	yaml_document_t more;
	if (yaml_parser_load(&parser, &more)) {
		if (yaml_document_get_root_node(&more))
			st = dt_err_set(err, DT_CONFIG, "%s:%zu:%zu: the spec must be one YAML document", path,
					more.start_mark.line + 1, more.start_mark.column + 1);
		yaml_document_delete(&more);
	}
	yaml_parser_delete(&parser);
	if (st)
		yaml_document_delete(doc);
	return st;
}

/* Walks `doc` into `out` with trial k's values of `sw` (sw NULL: a plain
 * spec); `used` collects the parameters its templates name. */
static enum dt_status parse_trial(yaml_document_t *doc, const char *path, const struct dt_launch_sweep *sw,
				  int64_t k, unsigned char *used, const char *note, struct dt_launch_spec *out,
				  struct dt_err *err)
{
	dt_launch_spec_init(out);
	out->path = dt_xstrdup(path);
	struct dt__walker w = { .doc = doc, .path = path, .err = err, .sw = sw, .used = used, .trial_note = note };
	char **values = sw ? dt_launch_trial_values(sw, k) : NULL;
	w.values = values;
	enum dt_status st = parse_doc(&w, out);
	dt__spec_walker_release(&w);
	if (sw) {
		out->trial = k;
		out->trial_values = values;
	}
	return st;
}

/* The trials checked when the spec is read: the first 64, and in a grid a
 * diagonal that takes every value of every parameter once (a value that
 * does not fit its key is found before the sweep starts). Returns the
 * count written to ks (capacity 64 + DT_SWEEP_MAX_VALUES). */
static int trials_to_check(const struct dt_launch_sweep *sw, int64_t *ks)
{
	int n = 0;
	for (int64_t k = 2; k <= sw->ntrials && k <= 64; k++)
		ks[n++] = k;
	if (sw->search != DT_SEARCH_GRID)
		return n;
	int maxn = 0;
	for (int i = 0; i < sw->nparams; i++)
		maxn = sw->params[i].nvalues > maxn ? sw->params[i].nvalues : maxn;
	for (int d = 0; d < maxn; d++) {
		int64_t idx = 0;
		for (int i = 0; i < sw->nparams; i++)
			idx = idx * sw->params[i].nvalues + d % sw->params[i].nvalues;
		if (idx + 1 > 64 && idx + 1 <= sw->ntrials)
			ks[n++] = idx + 1;
	}
	return n;
}

enum dt_status dt_launch_spec_parse(const char *text, size_t len, const char *path, struct dt_launch_spec *out,
				    struct dt_err *err)
{
	dt_launch_spec_init(out);
	out->path = dt_xstrdup(path);
	yaml_document_t doc;
	enum dt_status st = load_doc(text, len, path, &doc, err);
	if (st)
		return st;
	struct dt__walker w = { .doc = &doc, .path = path, .err = err };
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	struct dt_launch_sweep *sw = NULL;
	if (root && root->type == YAML_MAPPING_NODE) {
		yaml_node_t *where = dt__spec_is_riseml(&w, root) ? dt__spec_get(&w, root, "train") : root;
		if (where && where->type == YAML_MAPPING_NODE)
			st = dt__spec_sweep_read(&w, where, &sw);
	}
	dt__spec_walker_release(&w);
	unsigned char used[DT_SWEEP_MAX_PARAMS] = { 0 };
	if (!st) {
		char note[340] = "";
		if (sw) {
			char **values = dt_launch_trial_values(sw, 1), line[300];
			dt_launch_values_line(sw, values, line, sizeof(line));
			dt_launch_values_free(values);
			snprintf(note, sizeof(note), " (in trial 1: %s)", line);
		}
		dt_launch_spec_release(out);
		st = parse_trial(&doc, path, sw, 1, used, sw ? note : NULL, out, err);
	}
	for (int i = 0; !st && sw && i < sw->nparams; i++)
		if (!used[i])
			st = dt_err_set(err, DT_CONFIG, "%s:%zu:%zu: parameter '%s' is not used: no '{{ %s }}' in the spec "
							"(remove it, or put it where the trial should use it)", path,
					sw->params[i].line, sw->params[i].col, sw->params[i].name, sw->params[i].name);
	/* The other trials' specs, so that a value that does not fit is
	 * found now and not when its trial starts. */
	int64_t *ks = sw ? dt_xcalloc(64 + DT_SWEEP_MAX_VALUES, sizeof(int64_t)) : NULL;
	int nks = sw && !st ? trials_to_check(sw, ks) : 0;
	for (int c = 0; !st && c < nks; c++) {
		int64_t k = ks[c];
		struct dt_launch_spec t;
		char **values = dt_launch_trial_values(sw, k);
		char line[300], note[340];
		dt_launch_values_line(sw, values, line, sizeof(line));
		dt_launch_values_free(values);
		snprintf(note, sizeof(note), " (in trial %lld: %s)", (long long)k, line);
		st = parse_trial(&doc, path, sw, k, NULL, note, &t, err);
		dt_launch_spec_release(&t);
	}
	free(ks);
	yaml_document_delete(&doc);
	if (st) {
		dt_launch_sweep_free(sw);
		return st;
	}
	if (sw) {
		sw->text = dt_xmalloc(len + 1);
		memcpy(sw->text, text, len);
		sw->text[len] = '\0';
		sw->len = len;
		out->sweep = sw;
	}
	return DT_OK;
}

enum dt_status dt_launch_spec_trial(const struct dt_launch_spec *s, int64_t k, struct dt_launch_spec *out,
				    struct dt_err *err)
{
	DT_ASSERT(s->sweep && k >= 1 && k <= s->sweep->ntrials);
	dt_launch_spec_init(out);
	yaml_document_t doc;
	enum dt_status st = load_doc(s->sweep->text, s->sweep->len, s->path, &doc, err);
	if (st)
		return st;
	char **values = dt_launch_trial_values(s->sweep, k);
	char line[300], note[340];
	dt_launch_values_line(s->sweep, values, line, sizeof(line));
	dt_launch_values_free(values);
	snprintf(note, sizeof(note), " (in trial %lld: %s)", (long long)k, line);
	st = parse_trial(&doc, s->path, s->sweep, k, NULL, note, out, err);
	yaml_document_delete(&doc);
	return st;
}

enum dt_status dt_launch_spec_load(const char *path, struct dt_launch_spec *out, struct dt_err *err)
{
	char *text = NULL;
	size_t len = 0;
	dt_launch_spec_init(out);
	enum dt_status st = dt_read_file(path, SPEC_MAX_BYTES, &text, &len, err);
	if (st) { /* a spec that is not there is a bad spec: exit 2, as EXIT_CODES.md says */
		dt_err_prefix(err, "cannot read the experiment spec");
		if (err)
			err->status = DT_CONFIG;
		return DT_CONFIG;
	}
	st = dt_launch_spec_parse(text, len, path, out, err);
	free(text);
	return st;
}
