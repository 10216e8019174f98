/*
 * emit.c — the Kubernetes manifests and the Kubeflow TFJob (see emit.h).
 *
 * Every document is built as a libyaml node tree and written by libyaml's
 * emitter, so any value (an argument with a newline, quotes, ': ', '#',
 * unicode, a leading '-') is quoted and escaped as YAML requires and parses
 * back to the same string. Values are double-quoted scalars (so "0" stays a
 * string, as an env value must); keys, kinds and numbers are plain.
 */
#include "launch/emit.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/alloc.h"
#include "launch/tasks.h"

#define K8S_PORT 2222
#define PVC_SIZE "10Gi"

struct doc {
	yaml_document_t d;
};

static int plain(struct doc *d, const char *v)
{
	int id = yaml_document_add_scalar(&d->d, NULL, (yaml_char_t *)(uintptr_t)v, -1, YAML_PLAIN_SCALAR_STYLE);
	DT_ASSERT(id);
	return id;
}

static int str(struct doc *d, const char *v)
{
	int id = yaml_document_add_scalar(&d->d, NULL, (yaml_char_t *)(uintptr_t)v, -1,
					  YAML_DOUBLE_QUOTED_SCALAR_STYLE);
	DT_ASSERT(id);
	return id;
}

static int num(struct doc *d, long long v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%lld", v);
	return plain(d, buf);
}

static int map(struct doc *d)
{
	int id = yaml_document_add_mapping(&d->d, NULL, YAML_BLOCK_MAPPING_STYLE);
	DT_ASSERT(id);
	return id;
}

static int seq(struct doc *d)
{
	int id = yaml_document_add_sequence(&d->d, NULL, YAML_BLOCK_SEQUENCE_STYLE);
	DT_ASSERT(id);
	return id;
}

static void put(struct doc *d, int m, const char *key, int value)
{
	DT_ASSERT(yaml_document_append_mapping_pair(&d->d, m, plain(d, key), value));
}

static void push(struct doc *d, int s, int item)
{
	DT_ASSERT(yaml_document_append_sequence_item(&d->d, s, item));
}

static int new_doc(struct doc *d)
{
	yaml_tag_directive_t none = { NULL, NULL };
	DT_ASSERT(yaml_document_initialize(&d->d, NULL, &none, &none, 1, 1));
	return map(d);
}

static const char *spec_name(const struct dt_launch_spec *s)
{
	return s->name ? s->name : "dtrain";
}

static const char *namespace_of(const struct dt_launch_spec *s)
{
	return s->k8s_namespace ? s->k8s_namespace : "default";
}

static const char *output_dir_of(const struct dt_launch_spec *s)
{
	return s->output_dir ? s->output_dir : "/output";
}

/* apiVersion, kind, metadata {name, namespace, labels}; returns the root. */
static int object(struct doc *d, const struct dt_launch_spec *s, const char *api, const char *kind, const char *name,
		  const char *job)
{
	int root = new_doc(d);
	put(d, root, "apiVersion", plain(d, api));
	put(d, root, "kind", plain(d, kind));
	int meta = map(d);
	put(d, meta, "name", str(d, name));
	if (strcmp(kind, "Namespace"))
		put(d, meta, "namespace", str(d, namespace_of(s)));
	int labels = map(d);
	put(d, labels, "app", str(d, "dtrain"));
	put(d, labels, "dtrain-experiment", str(d, spec_name(s)));
	if (job)
		put(d, labels, "dtrain-job", str(d, job));
	put(d, meta, "labels", labels);
	put(d, root, "metadata", meta);
	return root;
}

static int env_var(struct doc *d, const char *name, const char *value)
{
	int e = map(d);
	put(d, e, "name", plain(d, name));
	put(d, e, "value", str(d, value));
	return e;
}

/* requests and limits: the spec's cpus and mem (the same, so the pod is
 * Guaranteed and the task gets what `launch` gives it); -1 when none. */
static int resources(struct doc *d, const struct dt_launch_resources *r)
{
	if (r->cpus <= 0 && r->mem_bytes <= 0)
		return -1;
	int res = map(d);
	const char *kinds[] = { "requests", "limits" };
	for (int k = 0; k < 2; k++) {
		int m = map(d);
		char buf[32];
		if (r->cpus > 0) {
			snprintf(buf, sizeof(buf), "%d", r->cpus);
			put(d, m, "cpu", str(d, buf));
		}
		if (r->mem_bytes > 0) {
			snprintf(buf, sizeof(buf), "%lld", (long long)r->mem_bytes);
			put(d, m, "memory", str(d, buf));
		}
		put(d, res, kinds[k], m);
	}
	return res;
}

/* The container `tensorflow` (Kubeflow's name, which the operator looks
 * for) running task `t`; `tf_config` NULL for a TFJob (the operator sets it). */
static int container(struct doc *d, const struct dt_launch_spec *s, const struct dt_launch_task *t,
		     const char *tf_config, const char *experiment_id)
{
	int c = map(d);
	put(d, c, "name", plain(d, "tensorflow"));
	put(d, c, "image", str(d, s->image ? s->image : "dtrain:latest"));
	int cmd = seq(d);
	char **argv = dt_launch_argv(s, t, "dtrain", output_dir_of(s), NULL);
	for (char **a = argv; *a; a++)
		push(d, cmd, str(d, *a));
	dt_launch_argv_free(argv);
	put(d, c, "command", cmd);
	int env = seq(d);
	if (tf_config)
		push(d, env, env_var(d, "TF_CONFIG", tf_config));
	push(d, env, env_var(d, "OUTPUT_DIR", output_dir_of(s)));
	push(d, env, env_var(d, "EXPERIMENT_ID", experiment_id));
	if (tf_config) {
		char index[16];
		snprintf(index, sizeof(index), "%d", t->ref.index);
		push(d, env, env_var(d, "TASK_TYPE", dt_job_name(t->ref.job)));
		push(d, env, env_var(d, "TASK_INDEX", index));
		push(d, env, env_var(d, "DTRAIN_TASK", t->name));
	}
	put(d, c, "env", env);
	int ports = seq(d), p = map(d);
	put(d, p, "name", plain(d, "tfjob-port"));
	put(d, p, "containerPort", num(d, K8S_PORT));
	push(d, ports, p);
	put(d, c, "ports", ports);
	int res = resources(d, &s->res[t->group]);
	if (res > 0)
		put(d, c, "resources", res);
	int mounts = seq(d), m = map(d);
	put(d, m, "name", plain(d, "output"));
	put(d, m, "mountPath", str(d, output_dir_of(s)));
	push(d, mounts, m);
	put(d, c, "volumeMounts", mounts);
	return c;
}

/* A pod spec with one container and the output volume. */
static int pod_spec(struct doc *d, const struct dt_launch_spec *s, int c, const char *restart_policy)
{
	int spec = map(d);
	if (restart_policy)
		put(d, spec, "restartPolicy", plain(d, restart_policy));
	int cs = seq(d);
	push(d, cs, c);
	put(d, spec, "containers", cs);
	int vols = seq(d), v = map(d), pvc = map(d);
	char claim[96];
	snprintf(claim, sizeof(claim), "%s-output", spec_name(s));
	put(d, pvc, "claimName", str(d, s->output_claim ? s->output_claim : claim));
	put(d, v, "name", plain(d, "output"));
	put(d, v, "persistentVolumeClaim", pvc);
	push(d, vols, v);
	put(d, spec, "volumes", vols);
	return spec;
}

static enum dt_status dump(yaml_emitter_t *e, struct doc *d, struct dt_err *err)
{
	if (!yaml_emitter_dump(e, &d->d)) /* deletes the document either way */
		return dt_err_set(err, DT_IO, "cannot write the manifests: %s", e->problem ? e->problem : "emitter error");
	return DT_OK;
}

/* The Namespace (unless "default") and the output dir's claim (unless the
 * spec names an existing one). */
static enum dt_status emit_common(yaml_emitter_t *e, const struct dt_launch_spec *s, struct dt_err *err)
{
	struct doc d;
	enum dt_status st = DT_OK;
	if (strcmp(namespace_of(s), "default")) {
		(void)object(&d, s, "v1", "Namespace", namespace_of(s), NULL);
		if ((st = dump(e, &d, err)))
			return st;
	}
	if (!s->output_claim) {
		char claim[96];
		snprintf(claim, sizeof(claim), "%s-output", spec_name(s));
		int root = object(&d, s, "v1", "PersistentVolumeClaim", claim, NULL);
		int spec = map(&d), modes = seq(&d), res = map(&d), req = map(&d);
		push(&d, modes, plain(&d, "ReadWriteMany"));
		put(&d, spec, "accessModes", modes);
		put(&d, req, "storage", str(&d, PVC_SIZE));
		put(&d, res, "requests", req);
		put(&d, spec, "resources", res);
		put(&d, root, "spec", spec);
		st = dump(e, &d, err);
	}
	return st;
}

static enum dt_status check(const struct dt_launch_spec *s, struct dt_err *err)
{
	if (output_dir_of(s)[0] != '/')
		return dt_err_set(err, DT_CONFIG, "output_dir '%s' must be an absolute path in a container for --emit=k8s "
						  "or tfjob", output_dir_of(s));
	return DT_OK;
}

static enum dt_status open_emitter(yaml_emitter_t *e, FILE *out, struct dt_err *err)
{
	if (!yaml_emitter_initialize(e))
		return dt_err_set(err, DT_NOMEM, "cannot start the YAML emitter");
	yaml_emitter_set_output_file(e, out);
	yaml_emitter_set_unicode(e, 1);
	yaml_emitter_set_width(e, -1); /* no folding: one line per value */
	if (!yaml_emitter_open(e)) {
		dt_err_set(err, DT_IO, "cannot write the manifests: %s", e->problem ? e->problem : "emitter error");
		yaml_emitter_delete(e);
		return err ? err->status : DT_IO;
	}
	return DT_OK;
}

static enum dt_status close_emitter(yaml_emitter_t *e, FILE *out, enum dt_status st, struct dt_err *err)
{
	if (!yaml_emitter_close(e) && !st)
		st = dt_err_set(err, DT_IO, "cannot write the manifests: %s", e->problem ? e->problem : "emitter error");
	if (!yaml_emitter_flush(e) && !st)
		st = dt_err_set(err, DT_IO, "cannot write the manifests");
	yaml_emitter_delete(e);
	if ((fflush(out) != 0 || ferror(out)) && !st)
		st = dt_err_set(err, DT_IO, "cannot write the manifests");
	return st;
}

enum dt_status dt_launch_emit_k8s(const struct dt_launch_spec *s, FILE *out, struct dt_err *err)
{
	enum dt_status st = check(s, err);
	if (st)
		return st;
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(s, tasks);
	const char *name = spec_name(s), *ns = namespace_of(s);
	char names[DT_LAUNCH_MAX_TASKS][96], addr_buf[DT_LAUNCH_MAX_TASKS][200];
	const char *addrs[DT_LAUNCH_MAX_TASKS];
	for (int i = 0; i < n; i++) {
		/* The training operator's service names and addresses. */
		snprintf(names[i], sizeof(names[i]), "%s-%s-%d", name, dt_job_name(tasks[i].ref.job), tasks[i].ref.index);
		snprintf(addr_buf[i], sizeof(addr_buf[i]), "%.96s.%.60s.svc:%d", names[i], ns, K8S_PORT);
		addrs[i] = addr_buf[i];
	}
	yaml_emitter_t e;
	if ((st = open_emitter(&e, out, err)))
		return st;
	st = emit_common(&e, s, err);
	for (int i = 0; i < n && !st; i++) {
		const struct dt_launch_task *t = &tasks[i];
		const char *job = dt_job_name(t->ref.job);
		struct doc d;
		int root = object(&d, s, "v1", "Service", names[i], job);
		int spec = map(&d), sel = map(&d), ports = seq(&d), p = map(&d);
		put(&d, spec, "clusterIP", plain(&d, "None"));
		put(&d, sel, "dtrain-experiment", str(&d, name));
		put(&d, sel, "dtrain-task", str(&d, names[i]));
		put(&d, spec, "selector", sel);
		put(&d, p, "name", plain(&d, "tfjob-port"));
		put(&d, p, "port", num(&d, K8S_PORT));
		put(&d, p, "targetPort", num(&d, K8S_PORT));
		push(&d, ports, p);
		put(&d, spec, "ports", ports);
		put(&d, root, "spec", spec);
		if ((st = dump(&e, &d, err)))
			break;

		root = object(&d, s, "batch/v1", "Job", names[i], job);
		spec = map(&d);
		put(&d, spec, "backoffLimit", num(&d, s->restart == DT_RESTART_NEVER ? 0 : s->backoff_limit));
		if (s->restart == DT_RESTART_EXIT_CODE) {
			/* Kubeflow's permanent codes fail the Job; the others retry. */
			int pfp = map(&d), rules = seq(&d), rule = map(&d), on = map(&d), vals = seq(&d);
			put(&d, rule, "action", plain(&d, "FailJob"));
			put(&d, on, "containerName", plain(&d, "tensorflow"));
			put(&d, on, "operator", plain(&d, "NotIn"));
			const int retry[] = { 3, 130, 137, 138, 143 };
			for (size_t k = 0; k < DT_ARRAY_LEN(retry); k++)
				push(&d, vals, num(&d, retry[k]));
			put(&d, on, "values", vals);
			put(&d, rule, "onExitCodes", on);
			push(&d, rules, rule);
			put(&d, pfp, "rules", rules);
			put(&d, spec, "podFailurePolicy", pfp);
		}
		int tmpl = map(&d), tmeta = map(&d), tlabels = map(&d);
		put(&d, tlabels, "app", str(&d, "dtrain"));
		put(&d, tlabels, "dtrain-experiment", str(&d, name));
		put(&d, tlabels, "dtrain-task", str(&d, names[i]));
		put(&d, tmeta, "labels", tlabels);
		put(&d, tmpl, "metadata", tmeta);
		char *tf = dt_launch_tf_config(tasks, n, addrs, i);
		int c = container(&d, s, t, tf, name);
		free(tf);
		put(&d, tmpl, "spec", pod_spec(&d, s, c, s->restart == DT_RESTART_ON_FAILURE ? "OnFailure" : "Never"));
		put(&d, spec, "template", tmpl);
		put(&d, root, "spec", spec);
		st = dump(&e, &d, err);
	}
	return close_emitter(&e, out, st, err);
}

enum dt_status dt_launch_emit_tfjob(const struct dt_launch_spec *s, FILE *out, struct dt_err *err)
{
	enum dt_status st = check(s, err);
	if (st)
		return st;
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(s, tasks);
	yaml_emitter_t e;
	if ((st = open_emitter(&e, out, err)))
		return st;
	st = emit_common(&e, s, err);
	if (!st) {
		struct doc d;
		int root = object(&d, s, "kubeflow.org/v1", "TFJob", spec_name(s), NULL);
		int spec = map(&d), run = map(&d), replicas = map(&d);
		/* Running: the ps (which never end by themselves if the chief is
		 * gone) are deleted once the job has succeeded or failed. */
		put(&d, run, "cleanPodPolicy", plain(&d, "Running"));
		put(&d, run, "backoffLimit", num(&d, s->restart == DT_RESTART_NEVER ? 0 : s->backoff_limit));
		put(&d, spec, "runPolicy", run);
		/* Replica types in the operator's spelling, each from its first task. */
		static const struct {
			enum dt_job job;
			const char *type;
		} kinds[] = { { DT_JOB_PS, "PS" }, { DT_JOB_CHIEF, "Chief" }, { DT_JOB_WORKER, "Worker" },
			      { DT_JOB_EVALUATOR, "Evaluator" } };
		static const char *const policy[] = { [DT_RESTART_NEVER] = "Never", [DT_RESTART_ON_FAILURE] = "OnFailure",
						      [DT_RESTART_EXIT_CODE] = "ExitCode" };
		for (size_t k = 0; k < DT_ARRAY_LEN(kinds); k++) {
			int count = 0, first = -1;
			for (int i = 0; i < n; i++)
				if (tasks[i].ref.job == kinds[k].job && count++ == 0)
					first = i;
			if (!count)
				continue;
			int rs = map(&d), tmpl = map(&d);
			put(&d, rs, "replicas", num(&d, count));
			put(&d, rs, "restartPolicy", plain(&d, policy[s->restart]));
			int c = container(&d, s, &tasks[first], NULL, spec_name(s));
			put(&d, tmpl, "spec", pod_spec(&d, s, c, NULL));
			put(&d, rs, "template", tmpl);
			put(&d, replicas, kinds[k].type, rs);
		}
		put(&d, spec, "tfReplicaSpecs", replicas);
		put(&d, root, "spec", spec);
		st = dump(&e, &d, err);
	}
	return close_emitter(&e, out, st, err);
}
