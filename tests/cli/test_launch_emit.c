/* CLI tests of `dtrain launch --emit`: the Kubernetes manifests parse and
 * carry the TF_CONFIG `launch` gives each task; the Slurm script, submitted
 * to a real one-node Slurm (tests/slurm/start-cluster.sh), trains. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#include "cli_util.h"
#include "dt_test.h"
#include "slurm_util.h"

/* ---- the Kubernetes manifests ---- */

/* The value of `key` in a libyaml mapping node, or NULL. */
static yaml_node_t *map_get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(d, p->key);
		if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
			return yaml_document_get_node(d, p->value);
	}
	return NULL;
}

static const char *scalar_of(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* Replaces every address of a TF_CONFIG's cluster by "<job>-<index>", so
 * that configs with different addresses compare on their layout. */
static char *layout_of(const char *tf_config)
{
	json_error_t jerr;
	json_t *o = json_loads(tf_config, 0, &jerr);
	if (!o)
		return NULL;
	json_t *cluster = json_object_get(o, "cluster");
	const char *job;
	json_t *list;
	json_object_foreach(cluster, job, list) {
		for (size_t i = 0; i < json_array_size(list); i++) {
			char name[64];
			snprintf(name, sizeof(name), "%s-%zu", job, i);
			json_array_set_new(list, i, json_string(name));
		}
	}
	char *text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(o);
	return text;
}

DT_TEST_TIMEOUT(launch_cli, k8s_manifests_parse_and_carry_launchs_tf_config, 60)
{
	cli_private_home();
	/* What launch gives each task: a run whose command prints TF_CONFIG. */
	char spec[700], local[700];
	const char *layout = "distributed: {worker: 3, ps: 2, evaluator: 1}\nresources: {cpus: 1, mem: 1G}\n";
	char text[1024];
	snprintf(text, sizeof(text), "name: kube\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 100\n"
				     "output_dir: /data/out\nrestart_policy: ExitCode\n%s", layout);
	cli_write_spec(spec, sizeof(spec), "kube.yaml", text);
	snprintf(text, sizeof(text), "name: kube\ncommand: 'echo \"TFC $DTRAIN_TASK $TF_CONFIG\"'\n%s", layout);
	cli_write_spec(local, sizeof(local), "local.yaml", text);
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", local, NULL }, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	char *launch_out = r.out;
	r.out = NULL;
	dt_run_release(&r);

	cli_run(&r, (const char *[]){ "launch", "--emit=k8s", spec, NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	yaml_parser_t parser;
	DT_CHECK(yaml_parser_initialize(&parser));
	yaml_parser_set_input_string(&parser, (const unsigned char *)r.out, strlen(r.out));
	int services = 0, jobs = 0;
	for (int docs = 0; docs < 100; docs++) {
		yaml_document_t d;
		DT_CHECK(yaml_parser_load(&parser, &d));
		yaml_node_t *root = yaml_document_get_root_node(&d);
		if (!root) {
			yaml_document_delete(&d);
			break;
		}
		const char *kind = scalar_of(map_get(&d, root, "kind"));
		const char *name = scalar_of(map_get(&d, map_get(&d, root, "metadata"), "name"));
		DT_CHECK(kind && name);
		if (!strcmp(kind, "Service")) {
			services++;
			DT_CHECK_STR_EQ(scalar_of(map_get(&d, map_get(&d, root, "spec"), "clusterIP")), "None");
		} else {
			DT_CHECK_STR_EQ(kind, "Job");
			jobs++;
			yaml_node_t *pod = map_get(&d, map_get(&d, map_get(&d, root, "spec"), "template"), "spec");
			DT_CHECK_STR_EQ(scalar_of(map_get(&d, pod, "restartPolicy")), "Never");
			yaml_node_t *containers = map_get(&d, pod, "containers");
			DT_CHECK(containers && containers->type == YAML_SEQUENCE_NODE);
			yaml_node_t *c = yaml_document_get_node(&d, *containers->data.sequence.items.start);
			DT_CHECK_STR_EQ(scalar_of(map_get(&d, c, "name")), "tensorflow");
			const char *tf = NULL, *task = NULL;
			yaml_node_t *env = map_get(&d, c, "env");
			for (yaml_node_item_t *it = env->data.sequence.items.start; it < env->data.sequence.items.top; it++) {
				yaml_node_t *e = yaml_document_get_node(&d, *it);
				if (!strcmp(scalar_of(map_get(&d, e, "name")), "TF_CONFIG"))
					tf = scalar_of(map_get(&d, e, "value"));
			}
			DT_CHECK(tf != NULL);
			/* Addresses are the services', on port 2222. */
			char self[128];
			snprintf(self, sizeof(self), "\"%s:2222\"", name);
			DT_CHECK_CONTAINS(tf, self);
			/* The layout equals what launch gave the same task. */
			json_t *o = json_loads(tf, 0, NULL);
			DT_CHECK(o != NULL);
			const char *type = json_string_value(json_object_get(json_object_get(o, "task"), "type"));
			int index = (int)json_integer_value(json_object_get(json_object_get(o, "task"), "index"));
			char tname[64], needle[96];
			if (!strcmp(type, "chief") || !strcmp(type, "evaluator"))
				snprintf(tname, sizeof(tname), "%s", type);
			else
				snprintf(tname, sizeof(tname), "%s.%d", type, index);
			json_decref(o);
			snprintf(needle, sizeof(needle), "TFC %s ", tname);
			task = strstr(launch_out, needle);
			DT_CHECK(task != NULL);
			char local_tf[4096];
			snprintf(local_tf, sizeof(local_tf), "%.*s", (int)strcspn(task + strlen(needle), "\n"),
				 task + strlen(needle));
			char *a = layout_of(tf), *b = layout_of(local_tf);
			DT_CHECK(a && b);
			DT_CHECK_STR_EQ(a, b);
			free(a);
			free(b);
			yaml_node_t *pfp = map_get(&d, map_get(&d, root, "spec"), "podFailurePolicy");
			DT_CHECK(pfp != NULL);
		}
		yaml_document_delete(&d);
	}
	yaml_parser_delete(&parser);
	DT_CHECK_INT_EQ(services, 6);
	DT_CHECK_INT_EQ(jobs, 6);
	DT_CHECK_CONTAINS(r.out, "name: kube-ps-1\n");
	DT_CHECK_CONTAINS(r.out, "name: kube-worker-1\n");
	DT_CHECK_CONTAINS(r.out, "containerPort: 2222");
	dt_run_release(&r);
	free(launch_out);
}

/* ---- a real one-node Slurm (tests/slurm/start-cluster.sh) ---- */

DT_TEST_TIMEOUT(launch_slurm_real, emitted_sbatch_script_trains_to_completion, 120)
{
	cli_private_home();
	char dir[600], spec[700], job[700], out[700];
	struct dt_run r;
	slurm_start(&r, dir, sizeof(dir));
	if (r.exit_code == 77 || r.timed_out) {
		fprintf(stderr, "%s%s", r.out, r.err);
		dt_run_release(&r);
		char ignored[1024] = "";
		slurm_stop(dir, ignored, sizeof(ignored));
		DT_SKIP("slurm cannot start here (see the output)");
	}
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);

	char odir[700], text[1024];
	snprintf(odir, sizeof(odir), "%s/out", dir);
	snprintf(text, sizeof(text), "name: slurmy\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 300\n"
				     "args: [--log_every=100, --save_checkpoints_steps=100]\noutput_dir: %s\n"
				     "distributed: {worker: 2, ps: 1, evaluator: 1}\n", odir);
	cli_write_spec(spec, sizeof(spec), "slurmy.yaml", text);
	snprintf(job, sizeof(job), "%s/job.sh", dir);
	char emit_file[760];
	snprintf(emit_file, sizeof(emit_file), "--emit_file=%s", job);
	cli_run(&r, (const char *[]){ "launch", "--emit=slurm", spec, emit_file, NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	char *body = cli_read_file(job);
	DT_CHECK(body != NULL);
	DT_CHECK_CONTAINS(body, "--multi-prog");
	DT_CHECK_CONTAINS(body, "\n0 $DTRAIN train --model=mlp");
	DT_CHECK_CONTAINS(body, "\n1-2 $DTRAIN train --model=mlp");
	free(body);

	int ports[3];
	cli_free_ports(ports, 1);
	char conf[700], base[64], chdir_arg[700];
	snprintf(conf, sizeof(conf), "SLURM_CONF=%s/slurm.conf", dir);
	snprintf(base, sizeof(base), "DTRAIN_PORT_BASE=%d", ports[0] > 60000 ? 20000 + ports[0] % 10000 : ports[0]);
	snprintf(out, sizeof(out), "--output=%s/job.out", dir);
	snprintf(chdir_arg, sizeof(chdir_arg), "--chdir=%s", dir);
	double t0 = cli_now_s();
	dt_test_run(&r, (const char *[]){ "sbatch", "--wait", chdir_arg, out, job, NULL },
		    (const char *[]){ conf, base, NULL }, 90);
	char failure[2048] = "";
	if (r.timed_out || r.exit_code != 0)
		snprintf(failure, sizeof(failure), "sbatch %s (exit %d): %.800s %.800s",
			 r.timed_out ? "timed out" : "failed", r.exit_code, r.out, r.err);
	dt_run_release(&r);
	fprintf(stderr, "sbatch --wait took %.1f s\n", cli_now_s() - t0);
	char path[720];
	snprintf(path, sizeof(path), "%s/job.out", dir);
	char *log = cli_read_file(path);
	if (!failure[0] && (!log || !strstr(log, "eval (test split") || !strstr(log, "ended the run on 1 parameter server")))
		snprintf(failure, sizeof(failure), "the job's output lacks the chief's end: %.1500s", log ? log : "(none)");
	/* The evaluator, a second step, evaluated the last checkpoint (async may end one step past 300). */
	int evaluated_last = 0;
	for (const char *p = log; p && (p = strstr(p, "[evaluator:0] I evaluated")) != NULL; p++) {
		const char *step = strstr(p, ": global step 30");
		const char *eol = strchr(p, '\n');
		evaluated_last |= step && (!eol || step < eol);
	}
	if (!failure[0] && !evaluated_last)
		snprintf(failure, sizeof(failure), "the evaluator did not evaluate the last checkpoint: %.1500s", log);
	if (failure[0] && log)
		fprintf(stderr, "job output:\n%s\n", log);
	free(log);
	char leftovers[1024] = "";
	slurm_stop(dir, leftovers, sizeof(leftovers));
	if (failure[0])
		dt_test_fail(__FILE__, __LINE__, "%s", failure);
	DT_CHECK_STR_EQ(leftovers, "");
}
