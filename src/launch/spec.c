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

static void free_list(char **items, int n)
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
	free_list(s->args, s->nargs);
	free_list(s->command, s->ncommand);
	free(s->output_dir);
	free(s->image);
	free(s->k8s_namespace);
	free(s->output_claim);
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

struct walker {
	yaml_document_t *doc;
	const char *path;
	struct dt_err *err;
};

static enum dt_status at(struct walker *w, const yaml_node_t *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "<file>:<line>:<column>: <message>" (1-based, as editors count). */
static enum dt_status at(struct walker *w, const yaml_node_t *n, const char *fmt, ...)
{
	char msg[DT_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return dt_err_set(w->err, DT_CONFIG, "%s:%zu:%zu: %s", w->path, n ? n->start_mark.line + 1 : 1,
			  n ? n->start_mark.column + 1 : 1, msg);
}

static const char *scalar(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static enum dt_status want_string(struct walker *w, const yaml_node_t *n, const char *key, char **out)
{
	if (n->type != YAML_SCALAR_NODE)
		return at(w, n, "'%s' must be a string", key);
	free(*out);
	*out = dt_xstrdup(scalar(n));
	return DT_OK;
}

static enum dt_status want_int(struct walker *w, const yaml_node_t *n, const char *key, int64_t min, int64_t max,
			       int64_t *out)
{
	if (n->type != YAML_SCALAR_NODE)
		return at(w, n, "'%s' must be a number", key);
	char *end = NULL;
	errno = 0;
	long long v = strtoll(scalar(n), &end, 10);
	if (end == scalar(n) || *end || errno)
		return at(w, n, "'%s' must be a whole number, got '%s'", key, scalar(n));
	if (v < min || v > max)
		return at(w, n, "'%s' must be between %lld and %lld, got %lld", key, (long long)min, (long long)max, v);
	*out = v;
	return DT_OK;
}

static enum dt_status want_seconds(struct walker *w, const yaml_node_t *n, const char *key, double *out)
{
	if (n->type != YAML_SCALAR_NODE)
		return at(w, n, "'%s' must be a number of seconds", key);
	char *end = NULL;
	double v = strtod(scalar(n), &end);
	if (end == scalar(n) || *end || !(v >= 0 && v <= 86400))
		return at(w, n, "'%s' must be between 0 and 86400 seconds, got '%s'", key, scalar(n));
	*out = v;
	return DT_OK;
}

static enum dt_status want_enum(struct walker *w, const yaml_node_t *n, const char *key, const char *const *names,
				size_t count, int *out)
{
	if (n->type != YAML_SCALAR_NODE)
		return at(w, n, "'%s' must be one of its names", key);
	for (size_t i = 0; i < count; i++)
		if (!strcmp(scalar(n), names[i])) {
			*out = (int)i;
			return DT_OK;
		}
	char valid[128];
	dt_join(valid, sizeof(valid), names, count, ", ");
	const char *near = dt_nearest(scalar(n), names, count);
	return at(w, n, "unknown %s '%s'%s%s%s; valid: %s", key, scalar(n), near ? " (did you mean '" : "",
		  near ? near : "", near ? "'?)" : "", valid);
}

static enum dt_status want_list(struct walker *w, const yaml_node_t *n, const char *key, char ***items, int *count)
{
	if (n->type != YAML_SEQUENCE_NODE)
		return at(w, n, "'%s' must be a list of strings", key);
	yaml_node_item_t *it = n->data.sequence.items.start, *end = n->data.sequence.items.top;
	if (end - it > SPEC_MAX_LIST)
		return at(w, n, "'%s' has more than %d items", key, SPEC_MAX_LIST);
	free_list(*items, *count);
	*items = dt_xcalloc((size_t)(end - it) + 1, sizeof(char *));
	*count = 0;
	for (; it < end; it++) {
		yaml_node_t *item = yaml_document_get_node(w->doc, *it);
		if (!item || item->type != YAML_SCALAR_NODE)
			return at(w, item ? item : n, "every item of '%s' must be a string", key);
		(*items)[(*count)++] = dt_xstrdup(scalar(item));
	}
	return DT_OK;
}

/* Calls `fn` for each key of a mapping, refusing unknown and repeated keys. */
typedef enum dt_status (*key_fn)(struct walker *w, const char *key, yaml_node_t *value, void *ctx);

static enum dt_status walk_map(struct walker *w, yaml_node_t *map, const char *what, const char *const *keys,
			       size_t nkeys, key_fn fn, void *ctx)
{
	if (map->type != YAML_MAPPING_NODE)
		return at(w, map, "%s must be a mapping of keys to values", what);
	unsigned seen = 0;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
		yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
		if (!k || !v)
			return at(w, map, "%s has a broken entry", what);
		if (k->type != YAML_SCALAR_NODE)
			return at(w, k, "keys of %s must be plain names", what);
		size_t i = 0;
		while (i < nkeys && strcmp(keys[i], scalar(k)) != 0)
			i++;
		if (i == nkeys) {
			char valid[512];
			dt_join(valid, sizeof(valid), keys, nkeys, ", ");
			const char *near = dt_nearest(scalar(k), keys, nkeys);
			return at(w, k, "unknown key '%s' in %s%s%s%s; valid: %s", scalar(k), what,
				  near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "", valid);
		}
		if (seen & (1u << i))
			return at(w, k, "key '%s' appears twice in %s", scalar(k), what);
		seen |= 1u << i;
		enum dt_status st = fn(w, scalar(k), v, ctx);
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

static enum dt_status res_key(struct walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct dt_launch_resources *r = ctx;
	if (!strcmp(key, "cpus")) {
		int64_t n;
		enum dt_status st = want_int(w, v, "cpus", 1, 1024, &n);
		r->cpus = (int)n;
		return st;
	}
	if (v->type != YAML_SCALAR_NODE)
		return at(w, v, "'mem' must be a size such as 2G, 512M or a number of MiB");
	struct dt_err e = DT_ERR_INIT;
	if (dt_launch_parse_mem(scalar(v), &r->mem_bytes, &e))
		return at(w, v, "'mem': %s", e.msg);
	return DT_OK;
}

static const char *const res_keys[] = { "cpus", "mem" };
static const char *const top_res_keys[] = { "cpus", "mem", "worker", "ps", "evaluator" };

struct top_res {
	struct dt_launch_resources all;
	struct dt_launch_resources group[DT_GROUP_COUNT];
	int group_given[DT_GROUP_COUNT];
};

static enum dt_status top_res_key(struct walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct top_res *t = ctx;
	for (int g = 0; g < DT_GROUP_COUNT; g++)
		if (!strcmp(key, group_names[g])) {
			char what[64];
			snprintf(what, sizeof(what), "'resources.%s'", key);
			t->group_given[g] = 1;
			t->group[g] = (struct dt_launch_resources){ -1, -1 };
			return walk_map(w, v, what, res_keys, DT_ARRAY_LEN(res_keys), res_key, &t->group[g]);
		}
	return res_key(w, key, v, &t->all);
}

static const char *const dist_keys[] = { "mode", "worker", "ps", "evaluator", "nodes" };

static enum dt_status dist_key(struct walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct dt_launch_spec *s = ctx;
	int64_t n = 0;
	enum dt_status st;
	if (!strcmp(key, "mode")) {
		int m = 0;
		st = want_enum(w, v, "mode", mode_names, DT_ARRAY_LEN(mode_names), &m);
		s->mode = (enum dt_launch_mode)m;
		return st;
	}
	if (!strcmp(key, "worker")) {
		st = want_int(w, v, "worker", 1, 64, &n);
		s->workers = (int)n;
	} else if (!strcmp(key, "ps")) {
		st = want_int(w, v, "ps", 0, 64, &n);
		s->ps = (int)n;
	} else if (!strcmp(key, "nodes")) {
		st = want_int(w, v, "nodes", 1, DT_LAUNCH_MAX_NODES, &n);
		s->nodes = (int)n;
	} else {
		st = want_int(w, v, "evaluator", 0, 1, &n);
		s->evaluators = (int)n;
	}
	return st;
}

static const char *const top_keys[] = { "name", "model", "problem", "hparams", "hparams_set", "train_steps",
					"args", "command", "distributed", "resources", "output_dir", "restart_policy",
					"backoff_limit", "grace_period", "evaluator_timeout", "image", "namespace",
					"output_claim" };

struct top_ctx {
	struct dt_launch_spec *s;
	struct top_res res;
	yaml_node_t *train_key_node; /* first dtrain-train key, for "both given" */
	yaml_node_t *command_node;
};

static enum dt_status top_key(struct walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct top_ctx *t = ctx;
	struct dt_launch_spec *s = t->s;
	int64_t n = 0;
	enum dt_status st = DT_OK;
	if (!strcmp(key, "model") || !strcmp(key, "problem") || !strcmp(key, "hparams") || !strcmp(key, "hparams_set") ||
	    !strcmp(key, "train_steps") || !strcmp(key, "args"))
		if (!t->train_key_node)
			t->train_key_node = v;
	if (!strcmp(key, "name"))
		return want_string(w, v, key, &s->name);
	if (!strcmp(key, "model"))
		return want_string(w, v, key, &s->model);
	if (!strcmp(key, "problem"))
		return want_string(w, v, key, &s->problem);
	if (!strcmp(key, "hparams"))
		return want_string(w, v, key, &s->hparams);
	if (!strcmp(key, "hparams_set"))
		return want_string(w, v, key, &s->hparams_set);
	if (!strcmp(key, "output_dir"))
		return want_string(w, v, key, &s->output_dir);
	if (!strcmp(key, "image"))
		return want_string(w, v, key, &s->image);
	if (!strcmp(key, "namespace"))
		return want_string(w, v, key, &s->k8s_namespace);
	if (!strcmp(key, "output_claim"))
		return want_string(w, v, key, &s->output_claim);
	if (!strcmp(key, "args"))
		return want_list(w, v, key, &s->args, &s->nargs);
	if (!strcmp(key, "train_steps")) {
		st = want_int(w, v, key, 1, INT64_MAX / 2, &s->train_steps);
		return st;
	}
	if (!strcmp(key, "command")) {
		t->command_node = v;
		if (v->type == YAML_SCALAR_NODE) {
			free_list(s->command, s->ncommand);
			s->command = dt_xcalloc(2, sizeof(char *));
			s->command[0] = dt_xstrdup(scalar(v));
			s->ncommand = 1;
			s->shell = 1;
		} else if (v->type == YAML_SEQUENCE_NODE) {
			if ((st = want_list(w, v, key, &s->command, &s->ncommand)))
				return st;
			s->shell = 0;
		} else {
			return at(w, v, "'command' must be a shell line or a list of arguments");
		}
		if (s->ncommand == 0 || !s->command[0][0])
			return at(w, v, "'command' is empty");
		return DT_OK;
	}
	if (!strcmp(key, "distributed"))
		return walk_map(w, v, "'distributed'", dist_keys, DT_ARRAY_LEN(dist_keys), dist_key, s);
	if (!strcmp(key, "resources"))
		return walk_map(w, v, "'resources'", top_res_keys, DT_ARRAY_LEN(top_res_keys), top_res_key, &t->res);
	if (!strcmp(key, "restart_policy")) {
		int p = 0;
		st = want_enum(w, v, "restart_policy", policy_names, DT_ARRAY_LEN(policy_names), &p);
		s->restart = (enum dt_restart_policy)p;
		return st;
	}
	if (!strcmp(key, "backoff_limit")) {
		st = want_int(w, v, key, 0, 1000, &n);
		s->backoff_limit = (int)n;
		return st;
	}
	if (!strcmp(key, "grace_period"))
		return want_seconds(w, v, key, &s->grace_s);
	return want_seconds(w, v, key, &s->evaluator_timeout_s);
}

static int name_ok(const char *name)
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
	if (s->name && !name_ok(s->name))
		return dt_err_set(err, DT_CONFIG,
				  "experiment name '%s' must be 1-40 lowercase letters, digits and '-', starting with a "
				  "letter (it names Kubernetes services)", s->name);
	if (s->k8s_namespace && !name_ok(s->k8s_namespace))
		return dt_err_set(err, DT_CONFIG, "namespace '%s' must be 1-40 lowercase letters, digits and '-', starting "
						  "with a letter (a Kubernetes namespace name)", s->k8s_namespace);
	if (s->output_claim && !name_ok(s->output_claim))
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

static enum dt_status parse_doc(struct walker *w, struct dt_launch_spec *s)
{
	yaml_node_t *root = yaml_document_get_root_node(w->doc);
	if (!root)
		return at(w, NULL, "the spec is empty; it needs at least 'model:' or 'command:'");
	struct top_ctx t = { .s = s };
	for (int g = 0; g < DT_GROUP_COUNT; g++)
		t.res.group[g] = (struct dt_launch_resources){ -1, -1 };
	enum dt_status st = walk_map(w, root, "the spec", top_keys, DT_ARRAY_LEN(top_keys), top_key, &t);
	if (st)
		return st;
	if (t.command_node && t.train_key_node)
		return at(w, t.train_key_node,
			  "'command' and the dtrain train keys (model, problem, hparams, hparams_set, train_steps, "
			  "args) exclude each other; the command runs as given");
	if (!t.command_node && !s->model)
		return at(w, root, "missing command: the spec must say what to run, with 'model:' (dtrain train) or "
				   "'command:'");
	if (s->ps < 0)
		s->ps = s->mode == DT_LAUNCH_MIRRORED ? 0 : 1;
	for (int g = 0; g < DT_GROUP_COUNT; g++) {
		s->res[g] = t.res.all;
		if (t.res.group[g].cpus >= 0)
			s->res[g].cpus = t.res.group[g].cpus;
		if (t.res.group[g].mem_bytes >= 0)
			s->res[g].mem_bytes = t.res.group[g].mem_bytes;
	}
	struct dt_err e = DT_ERR_INIT;
	if (dt_launch_spec_check(s, &e)) {
		yaml_node_t *where = root;
		for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
			if (k && k->type == YAML_SCALAR_NODE &&
			    (!strcmp(scalar(k), strstr(e.msg, "name '") ? "name" : "distributed")))
				where = yaml_document_get_node(w->doc, p->value);
		}
		return at(w, where, "%s", e.msg);
	}
	return DT_OK;
}

enum dt_status dt_launch_spec_parse(const char *text, size_t len, const char *path, struct dt_launch_spec *out,
				    struct dt_err *err)
{
	dt_launch_spec_init(out);
	out->path = dt_xstrdup(path);
	yaml_parser_t parser;
	if (!yaml_parser_initialize(&parser))
		return dt_err_set(err, DT_NOMEM, "cannot start the YAML parser");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	yaml_document_t doc;
	if (!yaml_parser_load(&parser, &doc)) {
		enum dt_status st = dt_err_set(err, DT_CONFIG, "%s:%zu:%zu: malformed YAML: %s%s%s", path,
					       parser.problem_mark.line + 1, parser.problem_mark.column + 1,
					       parser.problem ? parser.problem : "unknown error",
					       parser.context ? " " : "", parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		return st;
	}
	struct walker w = { &doc, path, err };
	enum dt_status st = parse_doc(&w, out);
	yaml_document_delete(&doc);
	if (!st) {
		/* One document only: a second one would be silently ignored. */
		yaml_document_t more;
		if (yaml_parser_load(&parser, &more)) {
			if (yaml_document_get_root_node(&more))
				st = dt_err_set(err, DT_CONFIG, "%s:%zu:%zu: the spec must be one YAML document", path,
						more.start_mark.line + 1, more.start_mark.column + 1);
			yaml_document_delete(&more);
		}
	}
	yaml_parser_delete(&parser);
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
