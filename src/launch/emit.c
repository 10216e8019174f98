/*
 * emit.c — Kubernetes manifests and the Slurm batch script (see emit.h).
 */
#include "launch/emit.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "launch/tasks.h"

#define K8S_PORT 2222

/* A YAML single-quoted scalar: only ' needs escaping (as ''). */
static void yq(FILE *out, const char *s)
{
	fputc('\'', out);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', out);
		fputc(*s, out);
	}
	fputc('\'', out);
}

static const char *spec_name(const struct dt_launch_spec *s)
{
	return s->name ? s->name : "dtrain";
}

static void service_name(char *buf, size_t cap, const struct dt_launch_spec *s, const struct dt_launch_task *t)
{
	snprintf(buf, cap, "%s-%s-%d", spec_name(s), dt_job_name(t->ref.job), t->ref.index);
}

enum dt_status dt_launch_emit_k8s(const struct dt_launch_spec *s, FILE *out, struct dt_err *err)
{
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(s, tasks);
	char names[DT_LAUNCH_MAX_TASKS][96];
	const char *addrs[DT_LAUNCH_MAX_TASKS];
	char addr_buf[DT_LAUNCH_MAX_TASKS][110];
	for (int i = 0; i < n; i++) {
		service_name(names[i], sizeof(names[i]), s, &tasks[i]);
		snprintf(addr_buf[i], sizeof(addr_buf[i]), "%.96s:%d", names[i], K8S_PORT);
		addrs[i] = addr_buf[i];
	}
	const char *outdir = s->output_dir ? s->output_dir : "/output";
	if (outdir[0] != '/')
		return dt_err_set(err, DT_CONFIG, "output_dir '%s' must be an absolute path in a container for --emit=k8s",
				  outdir);
	const char *name = spec_name(s);
	fprintf(out, "# dtrain launch --emit=k8s: experiment '%s', %d tasks, mode %s.\n", name, n,
		dt_launch_mode_name(s->mode));
	fprintf(out, "# Needs a ReadWriteMany PersistentVolumeClaim '%s-output' (the shared output dir).\n", name);
	for (int i = 0; i < n; i++) {
		const struct dt_launch_task *t = &tasks[i];
		const char *job = dt_job_name(t->ref.job);
		fprintf(out, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n", names[i]);
		fprintf(out, "  labels: {app: dtrain, dtrain-experiment: %s, dtrain-job: %s}\n", name, job);
		fprintf(out, "spec:\n  clusterIP: None\n  selector: {dtrain-experiment: %s, dtrain-task: %s}\n", name,
			names[i]);
		fprintf(out, "  ports:\n  - {name: tfjob-port, port: %d, targetPort: %d}\n", K8S_PORT, K8S_PORT);

		fprintf(out, "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: %s\n", names[i]);
		fprintf(out, "  labels: {app: dtrain, dtrain-experiment: %s, dtrain-job: %s}\n", name, job);
		fprintf(out, "spec:\n");
		int backoff = s->restart == DT_RESTART_NEVER ? 0 : s->backoff_limit;
		fprintf(out, "  backoffLimit: %d\n", backoff);
		if (s->restart == DT_RESTART_EXIT_CODE) {
			fprintf(out, "  podFailurePolicy:\n    rules:\n    - action: FailJob\n      onExitCodes:\n"
				     "        containerName: tensorflow\n        operator: NotIn\n"
				     "        values: [3, 130, 137, 138, 143]\n");
		}
		fprintf(out, "  template:\n    metadata:\n      labels: {app: dtrain, dtrain-experiment: %s, dtrain-task: "
			     "%s}\n", name, names[i]);
		fprintf(out, "    spec:\n      restartPolicy: %s\n",
			s->restart == DT_RESTART_ON_FAILURE ? "OnFailure" : "Never");
		fprintf(out, "      containers:\n      - name: tensorflow\n        image: ");
		yq(out, s->image ? s->image : "dtrain:latest");
		fprintf(out, "\n        command:\n");
		char **argv = dt_launch_argv(s, t, "dtrain", outdir, NULL);
		for (char **a = argv; *a; a++) {
			fprintf(out, "        - ");
			yq(out, *a);
			fputc('\n', out);
		}
		dt_launch_argv_free(argv);
		char *tf = dt_launch_tf_config(tasks, n, addrs, i);
		fprintf(out, "        env:\n        - name: TF_CONFIG\n          value: ");
		yq(out, tf);
		free(tf);
		fprintf(out, "\n        - {name: OUTPUT_DIR, value: ");
		yq(out, outdir);
		fprintf(out, "}\n        - {name: EXPERIMENT_ID, value: ");
		yq(out, name);
		fprintf(out, "}\n        - {name: TASK_TYPE, value: %s}\n        - {name: TASK_INDEX, value: '%d'}\n", job,
			t->ref.index);
		fprintf(out, "        ports:\n        - {name: tfjob-port, containerPort: %d}\n", K8S_PORT);
		const struct dt_launch_resources *r = &s->res[t->group];
		if (r->cpus > 0 || r->mem_bytes > 0) {
			fprintf(out, "        resources:\n          limits: {");
			if (r->cpus > 0)
				fprintf(out, "cpu: '%d'%s", r->cpus, r->mem_bytes > 0 ? ", " : "");
			if (r->mem_bytes > 0)
				fprintf(out, "memory: '%lld'", (long long)r->mem_bytes);
			fprintf(out, "}\n");
		}
		fprintf(out, "        volumeMounts:\n        - {name: output, mountPath: ");
		yq(out, outdir);
		fprintf(out, "}\n      volumes:\n      - name: output\n        persistentVolumeClaim: {claimName: %s-output}\n",
			name);
	}
	if (fflush(out) != 0 || ferror(out))
		return dt_err_set(err, DT_IO, "cannot write the manifests");
	return DT_OK;
}

/* srun --multi-prog files have no quoting: refuse what it cannot carry. */
static enum dt_status multiprog_word(const char *w, struct dt_err *err)
{
	for (const char *p = w; *p; p++)
		if (*p == ' ' || *p == '\t' || *p == '\'' || *p == '"' || *p == '\\' || *p == '$' || *p == '`' ||
		    *p == '\n' || *p == '%')
			return dt_err_set(err, DT_CONFIG,
					  "argument '%s' cannot go into an srun --multi-prog file (no quoting there: "
					  "no spaces, quotes, '$', '%%' or backslashes)", w);
	return DT_OK;
}

static enum dt_status multiprog_line(FILE *out, const char *ranks, char **argv, struct dt_err *err)
{
	fprintf(out, "%s", ranks);
	for (char **a = argv; *a; a++) {
		int ours = strncmp(*a, "--port_base=${", 14) == 0; /* expanded by the script's shell */
		enum dt_status st = a == argv || ours ? DT_OK : multiprog_word(*a, err);
		if (st)
			return st;
		fprintf(out, " %s", a == argv ? "$DTRAIN" : *a);
	}
	fprintf(out, "\n");
	return DT_OK;
}

enum dt_status dt_launch_emit_slurm(const struct dt_launch_spec *s, const char *bin, FILE *out, struct dt_err *err)
{
	if (s->ncommand)
		return dt_err_set(err, DT_CONFIG, "--emit=slurm runs dtrain train through its Slurm resolver; a spec with "
						  "'command:' cannot be mapped to ranks");
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(s, tasks);
	int ps = s->mode == DT_LAUNCH_MIRRORED ? 0 : s->ps;
	int trainers = s->workers;
	int ranks = ps + trainers;
	const char *name = spec_name(s);
	fprintf(out, "#!/bin/bash\n");
	fprintf(out, "# dtrain launch --emit=slurm: experiment '%s', mode %s: %d ps and %d trainers%s.\n", name,
		dt_launch_mode_name(s->mode), ps, trainers, s->evaluators ? ", and an evaluator as a second step" : "");
	fprintf(out, "# Ranks follow dtrain's Slurm resolver (--ps_replicas=%d): the first %d rank(s) ps, the rest\n"
		     "# workers, worker 0 the chief; ports --port_base + local index on each node.\n"
		     "# Submit: sbatch <this file>\n", ps, ps);
	fprintf(out, "#SBATCH --job-name=%s\n#SBATCH --ntasks=%d\n#SBATCH --overcommit\n", name, ranks + s->evaluators);
	fprintf(out, "#SBATCH --output=%s-%%j.out\n", name);
	const struct dt_launch_resources *r = &s->res[DT_GROUP_WORKER];
	if (r->cpus > 0)
		fprintf(out, "#SBATCH --cpus-per-task=%d\n", r->cpus);
	if (r->mem_bytes > 0)
		fprintf(out, "#SBATCH --mem-per-cpu=%lldM\n", (long long)(r->mem_bytes >> 20) / (r->cpus > 0 ? r->cpus : 1));
	fprintf(out, "set -eu\n");
	fprintf(out, "DTRAIN=${DTRAIN:-");
	yq(out, bin);
	fprintf(out, "}\nexport OUTPUT_DIR=${OUTPUT_DIR:-");
	yq(out, s->output_dir ? s->output_dir : "output");
	fprintf(out, "}\nexport EXPERIMENT_ID=%s-${SLURM_JOB_ID:-0}\nunset TF_CONFIG\nmkdir -p \"$OUTPUT_DIR\"\n", name);
	fprintf(out, "conf=$(mktemp)\ntrap 'rm -f \"$conf\"' EXIT\ncat > \"$conf\" <<EOF\n");
	char rng[64], extra[64];
	snprintf(extra, sizeof(extra), "--ps_replicas=%d", ps);
	char port_base[] = "--port_base=${DTRAIN_PORT_BASE:-8888}";
	for (int i = 0; i < n; i++) {
		const struct dt_launch_task *t = &tasks[i];
		if (t->ref.job == DT_JOB_EVALUATOR)
			continue;
		/* One line for the ps ranks, one for the trainers. */
		if (t->ref.job == DT_JOB_PS && t->ref.index != 0)
			continue;
		if (t->ref.job == DT_JOB_WORKER)
			continue;
		int lo = t->ref.job == DT_JOB_PS ? 0 : ps;
		int hi = t->ref.job == DT_JOB_PS ? ps - 1 : ranks - 1;
		if (lo == hi)
			snprintf(rng, sizeof(rng), "%d", lo);
		else
			snprintf(rng, sizeof(rng), "%d-%d", lo, hi);
		int argc;
		char **argv = dt_launch_argv(s, t, "dtrain", NULL, &argc);
		char **with = dt_xcalloc((size_t)argc + 3, sizeof(char *));
		memcpy(with, argv, (size_t)argc * sizeof(char *));
		with[argc] = extra;
		with[argc + 1] = port_base;
		enum dt_status st = multiprog_line(out, rng, with, err);
		free(with);
		dt_launch_argv_free(argv);
		if (st)
			return st;
	}
	fprintf(out, "EOF\n");
	if (s->evaluators) {
		/* The evaluator talks to no task (it reads the output dir), so its
		 * TF_CONFIG names its role only. */
		fprintf(out, "TF_CONFIG='{\"cluster\": {\"chief\": [\"slurm-step:%d\"]}, \"task\": {\"type\": \"evaluator\", "
			     "\"index\": 0}, \"environment\": \"cloud\"}' \\\n  srun -n1 --overlap",
			8888);
		struct dt_launch_task *ev = &tasks[n - 1];
		char **argv = dt_launch_argv(s, ev, "dtrain", NULL, NULL);
		for (char **a = argv; *a; a++) {
			fputc(' ', out);
			if (a == argv) {
				fprintf(out, "\"$DTRAIN\"");
			} else {
				yq(out, *a);
			}
		}
		dt_launch_argv_free(argv);
		fprintf(out, " &\nevaluator=$!\n");
	}
	fprintf(out, "srun -n %d --overcommit --kill-on-bad-exit=1 --multi-prog \"$conf\"\n", ranks);
	if (s->evaluators)
		fprintf(out, "wait \"$evaluator\"\n");
	if (fflush(out) != 0 || ferror(out))
		return dt_err_set(err, DT_IO, "cannot write the batch script");
	return DT_OK;
}
