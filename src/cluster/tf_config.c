/*
 * tf_config.c — reads the TF_CONFIG environment variable's JSON.
 *
 * Layout accepted (TensorFlow's, tf-config-and-t2t.md §2.1):
 *
 *   {"cluster": {"<job>": ["host:port", ...] | {"<index>": "host:port", ...}, ...},
 *    "task": {"type": "<job>", "index": <int> | "<int>"},
 *    "rpc_layer": "grpc", "session_master": "...", "eval_session_master": "...",
 *    "model_dir": "...", "service": {...}, "environment": "cloud"}
 *
 * Every key is optional; an empty text is "{}" (local mode), as RunConfig
 * reads `os.environ.get('TF_CONFIG') or '{}'`. Unknown keys are errors
 * (TensorFlow ignores them, which hides typos such as "clutser").
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "cluster/cluster.h"
#include "cluster/internal.h"

static const char *const top_keys[] = {
	"cluster", "task", "rpc_layer", "session_master", "eval_session_master", "model_dir", "service", "environment",
};

static const char *const task_keys[] = { "type", "index" };

static const char *kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "a list";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE: return "true";
	case JSON_FALSE: return "false";
	case JSON_NULL: return "null";
	}
	return "a value";
}

static enum dt_status unknown_key(const char *key, const char *where, const char *const *known, size_t n,
				  struct dt_err *err)
{
	const char *near = dt_nearest(key, known, n);
	enum dt_status st;
	if (near)
		st = dt_err_set(err, DT_CONFIG, "unknown key '%.80s' in %s (did you mean '%s'?)", key, where, near);
	else
		st = dt_err_set(err, DT_CONFIG, "unknown key '%.80s' in %s", key, where);
	char list[256];
	dt_join(list, sizeof(list), known, n, ", ");
	if (strcmp(key, "ps_hosts") == 0 || strcmp(key, "worker_hosts") == 0)
		dt_err_hint(err, "TF_CONFIG lists hosts by job: {\"cluster\": {\"ps\": [...], \"worker\": [...]}}; "
				 "--ps_hosts and --worker_hosts are flags");
	else
		dt_err_hint(err, "the keys of %s are: %s", where, list);
	return st;
}

static enum dt_status read_string(const json_t *v, const char *key, char **out, struct dt_err *err)
{
	if (!json_is_string(v))
		return dt_err_set(err, DT_CONFIG, "\"%s\" in TF_CONFIG must be a string, not %s", key, kind(v));
	if (memchr(json_string_value(v), '\0', json_string_length(v)) != NULL)
		return dt_err_set(err, DT_CONFIG, "\"%s\" in TF_CONFIG contains a NUL character", key);
	*out = dt_xstrdup(json_string_value(v));
	return DT_OK;
}

/* A sparse dict key: a decimal index without sign or spaces. */
static int parse_index_key(const char *key, int *out)
{
	if (!*key)
		return 0;
	long v = 0;
	for (const char *p = key; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		v = v * 10 + (*p - '0');
		if (v >= DT_CLUSTER_MAX_TASKS)
			return 0;
	}
	*out = (int)v;
	return 1;
}

static enum dt_status read_address(struct dt_cluster *out, enum dt_job job, int index, const json_t *v,
				   struct dt_err *err)
{
	if (!json_is_string(v))
		return dt_err_set(err, DT_CONFIG, "TF_CONFIG: %s:%d in \"cluster\" is %s, expected a \"host:port\" string",
				  dt_job_name(job), index, kind(v));
	if (strlen(json_string_value(v)) != json_string_length(v))
		return dt_err_set(err, DT_CONFIG, "TF_CONFIG: the address of %s:%d contains a NUL character",
				  dt_job_name(job), index);
	return dt_cluster_add(out, job, index, json_string_value(v), "TF_CONFIG", err);
}

static enum dt_status read_job(struct dt_cluster *out, const char *name, const json_t *v, struct dt_err *err)
{
	enum dt_job job = dt_job_parse(name);
	if (job == DT_JOB_NONE) {
		/* "ps_hosts" and "worker_hosts" are seed 003's flag names. */
		size_t len = strlen(name);
		char stem[32] = "";
		if (len > 6 && len < sizeof(stem) + 6 && strcmp(name + len - 6, "_hosts") == 0)
			snprintf(stem, sizeof(stem), "%.*s", (int)(len - 6), name);
		const char *near = dt_job_parse(stem) != DT_JOB_NONE ? dt_job_name(dt_job_parse(stem)) : dt_job_nearest(name);
		enum dt_status st;
		if (near)
			st = dt_err_set(err, DT_CONFIG, "unknown job '%.80s' in TF_CONFIG \"cluster\" (did you mean '%s'?)",
					name, near);
		else
			st = dt_err_set(err, DT_CONFIG, "unknown job '%.80s' in TF_CONFIG \"cluster\"", name);
		dt_err_hint(err, "jobs are chief, evaluator, master, ps and worker");
		return st;
	}
	if (json_is_array(v)) {
		size_t n = json_array_size(v);
		if (n > DT_CLUSTER_MAX_TASKS)
			return dt_err_set(err, DT_CONFIG, "TF_CONFIG: job '%s' lists %zu tasks, more than %d", name, n,
					  DT_CLUSTER_MAX_TASKS);
		for (size_t i = 0; i < n; i++) {
			enum dt_status st = read_address(out, job, (int)i, json_array_get(v, i), err);
			if (st)
				return st;
		}
		return DT_OK;
	}
	if (json_is_object(v)) {
		/* Sparse: {"<index>": "host:port"} (ClusterSpec, TF PR #48065). */
		const char *key;
		json_t *addr;
		json_object_foreach((json_t *)(uintptr_t)v, key, addr) {
			int index;
			if (!parse_index_key(key, &index)) {
				enum dt_status st = dt_err_set(err, DT_CONFIG,
							       "TF_CONFIG: key '%.80s' of job '%s' is not a task index", key,
							       name);
				dt_err_hint(err, "a sparse job maps indices to addresses: {\"%s\": {\"0\": \"host:port\"}} "
						 "(indices 0-%d)", name, DT_CLUSTER_MAX_TASKS - 1);
				return st;
			}
			enum dt_status st = read_address(out, job, index, addr, err);
			if (st)
				return st;
		}
		return DT_OK;
	}
	enum dt_status st = dt_err_set(err, DT_CONFIG, "TF_CONFIG: job '%s' in \"cluster\" is %s", name, kind(v));
	dt_err_hint(err, "a job is a list of addresses, [\"host:port\", ...], or a dict {\"<index>\": \"host:port\"}");
	return st;
}

static enum dt_status read_cluster(struct dt_cluster *out, const json_t *v, struct dt_err *err)
{
	if (!json_is_object(v)) {
		enum dt_status st = dt_err_set(err, DT_CONFIG, "\"cluster\" in TF_CONFIG must be an object, not %s", kind(v));
		dt_err_hint(err, "\"cluster\": {\"chief\": [\"host:port\"], \"worker\": [\"host:port\", ...], \"ps\": [...]}");
		return st;
	}
	const char *key;
	json_t *job;
	json_object_foreach((json_t *)(uintptr_t)v, key, job) {
		enum dt_status st = read_job(out, key, job, err);
		if (st)
			return st;
	}
	return DT_OK;
}

static enum dt_status read_task(const json_t *v, struct dt__tf_task *task, struct dt_err *err)
{
	if (!json_is_object(v)) {
		enum dt_status st = dt_err_set(err, DT_CONFIG, "\"task\" in TF_CONFIG must be an object, not %s", kind(v));
		dt_err_hint(err, "\"task\": {\"type\": \"worker\", \"index\": 0}");
		return st;
	}
	const char *key;
	json_t *val;
	json_object_foreach((json_t *)(uintptr_t)v, key, val) {
		if (strcmp(key, "type") == 0) {
			if (json_is_null(val))
				continue;
			if (!json_is_string(val))
				return dt_err_set(err, DT_CONFIG, "\"task\": {\"type\"} in TF_CONFIG must be a string, not %s",
						  kind(val));
			snprintf(task->type, sizeof(task->type), "%s", json_string_value(val));
			task->given.type = task->type;
		} else if (strcmp(key, "index") == 0) {
			if (json_is_null(val))
				continue;
			long long index;
			if (json_is_integer(val)) {
				index = json_integer_value(val);
			} else if (json_is_real(val) && json_real_value(val) == (double)(long long)json_real_value(val)) {
				index = (long long)json_real_value(val); /* Python's int(1.0) */
			} else if (json_is_string(val)) {
				int64_t parsed;
				if (dt_parse_i64(json_string_value(val), INT64_MIN, INT64_MAX, &parsed,
						 "\"task\": {\"index\"} in TF_CONFIG", err) != DT_OK) {
					if (err)
						err->status = DT_CONFIG;
					return DT_CONFIG;
				}
				index = parsed;
			} else {
				return dt_err_set(err, DT_CONFIG,
						  "\"task\": {\"index\"} in TF_CONFIG must be an integer, not %s", kind(val));
			}
			task->given.has_index = 1;
			task->given.index = index;
		} else {
			return unknown_key(key, "TF_CONFIG \"task\"", task_keys, DT_ARRAY_LEN(task_keys), err);
		}
	}
	return DT_OK;
}

static int blank(const char *text, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (text[i] != ' ' && text[i] != '\t' && text[i] != '\n' && text[i] != '\r')
			return 0;
	return 1;
}

enum dt_status dt__tf_config_read(const char *text, size_t len, struct dt_cluster *out, struct dt__tf_task *task,
				  struct dt_err *err)
{
	memset(task, 0, sizeof(*task));
	if (blank(text, len))
		return DT_OK;
	json_error_t jerr;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!root) {
		enum dt_status st = dt_err_set(err, DT_CONFIG, "malformed TF_CONFIG at line %d column %d: %s", jerr.line,
					       jerr.column, jerr.text);
		dt_err_hint(err, "TF_CONFIG is JSON, e.g. '{\"cluster\": {\"worker\": [\"localhost:2222\"]}, "
				 "\"task\": {\"type\": \"worker\", \"index\": 0}}'; mind the shell quoting");
		return st;
	}
	enum dt_status st = DT_OK;
	if (!json_is_object(root)) {
		st = dt_err_set(err, DT_CONFIG, "TF_CONFIG must be a JSON object, not %s", kind(root));
		dt_err_hint(err, "TF_CONFIG is an object: {\"cluster\": {...}, \"task\": {\"type\": ..., \"index\": ...}}");
		json_decref(root);
		return st;
	}
	const char *key;
	json_t *val;
	json_object_foreach(root, key, val) {
		if (strcmp(key, "cluster") == 0)
			st = read_cluster(out, val, err);
		else if (strcmp(key, "task") == 0)
			st = read_task(val, task, err);
		else if (strcmp(key, "rpc_layer") == 0)
			st = read_string(val, key, &out->rpc_layer, err);
		else if (strcmp(key, "session_master") == 0)
			st = read_string(val, key, &out->session_master, err);
		else if (strcmp(key, "eval_session_master") == 0)
			st = read_string(val, key, &out->eval_session_master, err);
		else if (strcmp(key, "environment") == 0)
			st = read_string(val, key, &out->environment, err);
		else if (strcmp(key, "model_dir") == 0) {
			st = read_string(val, key, &out->model_dir, err);
			if (!st && !out->model_dir[0])
				st = dt_err_set(err, DT_CONFIG, "\"model_dir\" in TF_CONFIG is empty");
		} else if (strcmp(key, "service") == 0) {
			if (!json_is_object(val))
				st = dt_err_set(err, DT_CONFIG, "\"service\" in TF_CONFIG must be an object, not %s", kind(val));
		} else {
			st = unknown_key(key, "TF_CONFIG", top_keys, DT_ARRAY_LEN(top_keys), err);
		}
		if (st)
			break;
	}
	json_decref(root);
	return st;
}

enum dt_status dt_tf_config_parse(const char *text, size_t len, struct dt_cluster *out, struct dt_err *err)
{
	dt_cluster_init(out);
	out->source = DT_SOURCE_TF_CONFIG;
	struct dt__tf_task task;
	enum dt_status st = dt__tf_config_read(text, len, out, &task, err);
	if (st)
		return st;
	return dt_cluster_validate(out, &task.given, err);
}
