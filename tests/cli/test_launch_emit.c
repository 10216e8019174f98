/* CLI tests of `dtrain launch --emit`: the Kubernetes manifests parse and
 * carry the TF_CONFIG `launch` gives each task; the Slurm script, submitted
 * to a real one-node Slurm (tests/slurm/start-cluster.sh), trains. */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "cli_util.h"
#include "dt_test.h"
#include "net/auth.h"
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

/* Pod spec `pod` with container `c` mounts the Secret "kube-cluster-secret"
 * read-only with mode 0400, and DTRAIN_CLUSTER_SECRET_FILE names its key there. */
static void check_secret_mounted(yaml_document_t *d, yaml_node_t *pod, yaml_node_t *c)
{
	const char *file = NULL, *mount = NULL;
	yaml_node_t *env = map_get(d, c, "env");
	for (yaml_node_item_t *it = env->data.sequence.items.start; it < env->data.sequence.items.top; it++) {
		yaml_node_t *e = yaml_document_get_node(d, *it);
		if (!strcmp(scalar_of(map_get(d, e, "name")), "DTRAIN_CLUSTER_SECRET_FILE"))
			file = scalar_of(map_get(d, e, "value"));
	}
	yaml_node_t *mounts = map_get(d, c, "volumeMounts");
	for (yaml_node_item_t *it = mounts->data.sequence.items.start; it < mounts->data.sequence.items.top; it++) {
		yaml_node_t *m = yaml_document_get_node(d, *it);
		if (!strcmp(scalar_of(map_get(d, m, "name")), "cluster-secret")) {
			mount = scalar_of(map_get(d, m, "mountPath"));
			DT_CHECK_STR_EQ(scalar_of(map_get(d, m, "readOnly")), "true");
		}
	}
	DT_CHECK(file && mount);
	char want[300];
	snprintf(want, sizeof(want), "%s/cluster_secret", mount);
	DT_CHECK_STR_EQ(file, want);
	int found = 0;
	yaml_node_t *vols = map_get(d, pod, "volumes");
	for (yaml_node_item_t *it = vols->data.sequence.items.start; it < vols->data.sequence.items.top; it++) {
		yaml_node_t *v = yaml_document_get_node(d, *it);
		yaml_node_t *sec = map_get(d, v, "secret");
		if (!sec)
			continue;
		found++;
		DT_CHECK_STR_EQ(scalar_of(map_get(d, v, "name")), "cluster-secret");
		DT_CHECK_STR_EQ(scalar_of(map_get(d, sec, "secretName")), "kube-cluster-secret");
		DT_CHECK_STR_EQ(scalar_of(map_get(d, sec, "defaultMode")), "256"); /* 0400 */
	}
	DT_CHECK_INT_EQ(found, 1);
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
	int services = 0, jobs = 0, secrets = 0;
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
		if (!strcmp(kind, "PersistentVolumeClaim")) {
			DT_CHECK_STR_EQ(name, "kube-output");
		} else if (!strcmp(kind, "Secret")) {
			/* The cluster secret, in the form a task reads from its file. */
			secrets++;
			DT_CHECK_STR_EQ(name, "kube-cluster-secret");
			const char *hex = scalar_of(map_get(&d, map_get(&d, root, "stringData"), "cluster_secret"));
			DT_CHECK(hex != NULL);
			char path[700];
			dt_test_path(path, sizeof(path), "mounted_secret");
			dt_test_write_file(path, hex, strlen(hex));
			DT_CHECK(chmod(path, 0400) == 0);
			struct dt_auth a;
			struct dt_err err = DT_ERR_INIT;
			DT_CHECK_OK(dt_auth_load(&a, path, DT_WIRE_AUTH, &err), &err);
			DT_CHECK_INT_EQ(strlen(hex), 65);
		} else if (!strcmp(kind, "Service")) {
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
			check_secret_mounted(&d, pod, c);
			/* Addresses are the services' full names, as the training
			 * operator writes them; the evaluator is not in the cluster. */
			char self[128];
			snprintf(self, sizeof(self), "\"%s.default.svc:2222\"", name);
			if (!strstr(name, "evaluator"))
				DT_CHECK_CONTAINS(tf, self);
			else
				DT_CHECK(strstr(tf, "evaluator-0") == NULL);
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
	DT_CHECK_INT_EQ(secrets, 1);
	DT_CHECK_CONTAINS(r.out, "name: \"kube-ps-1\"\n");
	DT_CHECK_CONTAINS(r.out, "name: \"kube-worker-1\"\n");
	DT_CHECK_CONTAINS(r.out, "containerPort: 2222");
	dt_run_release(&r);
	free(launch_out);
}

/* ---- the Kubernetes schemas (npm kubernetes-models) and the TFJob rules ---- */

/* Installs kubernetes-models and js-yaml under build/k8s-schemas once (npm);
 * 1 when they are there. Skips the test, with npm's reason, only when npm
 * cannot reach the registry; any other npm failure fails the test. */
static int k8s_schemas(char *modules, size_t cap)
{
	if (system("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0)
		DT_SKIP("node and npm are not installed (Debian: nodejs npm): the Kubernetes schemas come from npm");
	snprintf(modules, cap, "build/k8s-schemas/node_modules");
	if (access("build/k8s-schemas/node_modules/kubernetes-models/package.json", F_OK) == 0 &&
	    access("build/k8s-schemas/node_modules/js-yaml/package.json", F_OK) == 0)
		return 1;
	DT_CHECK(system("mkdir -p build/k8s-schemas") == 0);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "npm", "install", "--no-audit", "--no-fund", "--prefix", "build/k8s-schemas",
					  "kubernetes-models@4", "js-yaml@4", NULL }, NULL, 280);
	int ok = !r.timed_out && r.exit_code == 0;
	if (!ok) {
		const char *why = strstr(r.err, "ENOTFOUND") ? "ENOTFOUND" : strstr(r.err, "EAI_AGAIN") ? "EAI_AGAIN" :
				  strstr(r.err, "ECONNREFUSED") ? "ECONNREFUSED" : strstr(r.err, "ETIMEDOUT") ? "ETIMEDOUT" :
				  strstr(r.err, "ENETUNREACH") ? "ENETUNREACH" : r.timed_out ? "timed out" : NULL;
		fprintf(stderr, "npm install failed (exit %d):\n%s\n", r.exit_code, r.err);
		dt_run_release(&r);
		if (why) {
			char reason[160];
			snprintf(reason, sizeof(reason), "npm cannot reach the registry (%s): no Kubernetes schemas", why);
			DT_SKIP(reason);
		}
		dt_test_fail(__FILE__, __LINE__, "npm install kubernetes-models js-yaml failed (see above)");
	}
	dt_run_release(&r);
	return 1;
}

/* Elastic all-reduce (--min_workers in a mirrored spec's args): the Slurm
 * script keeps the allocation when a node fails (--no-kill) and restarts
 * the step, which rejoins; a spec that is not elastic keeps Slurm's default.
 * Kubernetes: each task is a Job of its own whose pod restarts in place
 * (restartPolicy OnFailure), so a worker's restart touches no other pod. */
DT_TEST_TIMEOUT(launch_cli, elastic_specs_keep_the_slurm_job_and_restart_pods_in_place, 60)
{
	cli_private_home();
	const char *elastic = "name: ring\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 100\n"
			      "args: [--min_workers=2]\ndistributed: {mode: mirrored, worker: 3, ps: 0}\n"
			      "restart_policy: OnFailure\nbackoff_limit: 3\n";
	const char *plain = "name: ring\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 100\n"
			    "distributed: {mode: mirrored, worker: 3, ps: 0}\nrestart_policy: OnFailure\n";
	char spec[700];
	struct dt_run r;
	cli_write_spec(spec, sizeof(spec), "elastic.yaml", elastic);
	cli_run(&r, (const char *[]){ "launch", "--emit=slurm", spec, NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "#SBATCH --no-kill\n");
	DT_CHECK_CONTAINS(r.out, "#SBATCH --requeue\n");
	DT_CHECK_CONTAINS(r.out, "'--min_workers=2'");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "launch", "--emit=k8s", spec, NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	/* three Jobs (chief, worker 0, worker 1), each pod restarted in place */
	int jobs = 0, in_place = 0;
	for (const char *p = r.out; (p = strstr(p, "kind: Job")) != NULL; p++)
		jobs++;
	for (const char *p = r.out; (p = strstr(p, "restartPolicy: OnFailure")) != NULL; p++)
		in_place++;
	DT_CHECK_INT_EQ(jobs, 3);
	DT_CHECK_INT_EQ(in_place, 3);
	dt_run_release(&r);
	cli_write_spec(spec, sizeof(spec), "plain.yaml", plain);
	cli_run(&r, (const char *[]){ "launch", "--emit=slurm", spec, NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK(strstr(r.out, "--no-kill") == NULL);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(launch_cli, k8s_and_tfjob_pass_the_kubernetes_and_tfjob_schemas, 300)
{
	cli_private_home();
	char modules[300];
	k8s_schemas(modules, sizeof(modules));
	const char *specs[] = {
		"name: plain\nmodel: mlp\nproblem: fashion_mnist\noutput_dir: /out\n",
		"name: every\nmodel: cnn\nproblem: fashion_mnist\nhparams: 'learning_rate=0.05'\ntrain_steps: 2400\n"
		"args: [--log_every=100]\ndistributed: {mode: async, worker: 3, ps: 2, evaluator: 1}\n"
		"resources: {cpus: 2, mem: 2G, ps: {cpus: 1, mem: 512M}}\noutput_dir: /data/out\n"
		"restart_policy: ExitCode\nbackoff_limit: 4\nnamespace: ml-team\nimage: registry.example/dtrain:1.2\n",
		"name: mirror\nmodel: mlp\nproblem: fashion_mnist\ndistributed: {mode: mirrored, worker: 2}\n"
		"output_dir: /o\nrestart_policy: OnFailure\noutput_claim: shared-out\n",
		"name: syncer\ncommand: [sh, -c, 'echo \"$TF_CONFIG\" # not a comment']\n"
		"distributed: {mode: sync, worker: 2, ps: 1}\noutput_dir: /o\nrestart_policy: Never\n",
	};
	for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
		char spec[700], files[2][700];
		cli_write_spec(spec, sizeof(spec), "s.yaml", specs[i]);
		const char *kinds[] = { "--emit=k8s", "--emit=tfjob" };
		for (int k = 0; k < 2; k++) {
			char file_flag[760];
			snprintf(files[k], sizeof(files[k]), "%s/out%zu-%d.yaml", dt_test_tmpdir(), i, k);
			snprintf(file_flag, sizeof(file_flag), "--emit_file=%s", files[k]);
			struct dt_run r;
			cli_run(&r, (const char *[]){ "launch", kinds[k], spec, file_flag, NULL }, 20);
			DT_CHECK_INT_EQ(r.exit_code, 0);
			dt_run_release(&r);
		}
		struct dt_run r;
		dt_test_run(&r, (const char *[]){ "node", "tests/tools/k8s_validate.js", modules, files[0], files[1], NULL },
			    NULL, 60);
		if (r.exit_code != 0)
			fprintf(stderr, "spec %zu:\n%s\n%s", i, specs[i], r.err);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		DT_CHECK_CONTAINS(r.out, "\"kind\":\"TFJob\"");
		DT_CHECK_CONTAINS(r.out, "\"kind\":\"Job\"");
		DT_CHECK_CONTAINS(r.out, "\"kind\":\"Secret\"");
		/* Every TFJob replica's pods mount the secret the task is told of. */
		char *tfjob = cli_read_file(files[1]);
		DT_CHECK(tfjob != NULL);
		int replicas = 0, mounts = 0;
		for (const char *p = tfjob; (p = strstr(p, "restartPolicy:")) != NULL; p++)
			replicas++;
		for (const char *p = tfjob; (p = strstr(p, "secretName: \"")) != NULL; p++)
			mounts++;
		DT_CHECK(replicas > 0);
		DT_CHECK_INT_EQ(mounts, replicas);
		DT_CHECK_CONTAINS(tfjob, "value: \"/etc/dtrain/secret/cluster_secret\"");
		free(tfjob);
		if (i == 2)
			DT_CHECK(strstr(r.out, "PersistentVolumeClaim") == NULL); /* an existing claim is named */
		else
			DT_CHECK_CONTAINS(r.out, "PersistentVolumeClaim");
		dt_run_release(&r);
	}
	/* The validator is no rubber stamp: a wrong restartPolicy and a port
	 * that is not a number are refused. */
	char bad[700];
	dt_test_path(bad, sizeof(bad), "bad.yaml");
	const char *bad_docs[] = {
		"apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\nspec:\n  tfReplicaSpecs:\n"
		"    Worker: {replicas: 1, restartPolicy: Sometimes, template: {spec: {containers: [{name: tensorflow, "
		"image: i, ports: [{name: tfjob-port, containerPort: 2222}]}]}}}\n",
		"apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
		"      restartPolicy: Never\n      containers: [{name: c, image: i, ports: [{containerPort: 'x'}]}]\n",
	};
	for (size_t i = 0; i < sizeof(bad_docs) / sizeof(bad_docs[0]); i++) {
		dt_test_write_file(bad, bad_docs[i], strlen(bad_docs[i]));
		struct dt_run r;
		dt_test_run(&r, (const char *[]){ "node", "tests/tools/k8s_validate.js", modules, bad, NULL }, NULL, 60);
		DT_CHECK_INT_EQ(r.exit_code, 1);
		dt_run_release(&r);
	}
}

/* The training operator's own TF_CONFIG, unchanged: compact JSON from Go's
 * encoding/json (keys sorted: chief, ps, worker), "<job>-<i>.<ns>.svc:2222"
 * addresses, "environment": "cloud", the evaluator not in the cluster
 * (training-operator pkg/controller.v1/tensorflow/tensorflow.go,
 * genTFConfigJSONStr; the layout its TFJob guide shows). `dtrain config`
 * accepts it for every role, and a chief-only one trains. */
DT_TEST_TIMEOUT(launch_cli, the_training_operators_tf_config_is_accepted_unchanged, 90)
{
	cli_private_home();
	const char *cluster = "{\"chief\":[\"dist-mnist-chief-0.kubeflow.svc:2222\"],"
			      "\"ps\":[\"dist-mnist-ps-0.kubeflow.svc:2222\"],"
			      "\"worker\":[\"dist-mnist-worker-0.kubeflow.svc:2222\",\"dist-mnist-worker-1.kubeflow.svc:2222\"]}";
	const char *roles[][2] = { { "chief", "0" }, { "ps", "0" }, { "worker", "1" }, { "evaluator", "0" } };
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
		char tf[700];
		snprintf(tf, sizeof(tf), "TF_CONFIG={\"cluster\":%s,\"task\":{\"type\":\"%s\",\"index\":%s},"
					 "\"environment\":\"cloud\"}", cluster, roles[i][0], roles[i][1]);
		struct dt_run r;
		dt_test_run(&r, (const char *[]){ dt_test_dtrain_bin(), "config", NULL }, (const char *[]){ tf, NULL }, 20);
		if (r.exit_code != 0)
			fprintf(stderr, "%s\n%s", r.out, r.err);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		DT_CHECK_CONTAINS(r.out, "source:     TF_CONFIG");
		DT_CHECK_CONTAINS(r.out, "worker:1    dist-mnist-worker-1.kubeflow.svc:2222");
		char task[64];
		snprintf(task, sizeof(task), "task:       %s:%s", roles[i][0], roles[i][1]);
		DT_CHECK_CONTAINS(r.out, task);
		dt_run_release(&r);
	}
	char out_flag[700], tf[400];
	snprintf(out_flag, sizeof(out_flag), "--output_dir=%s/op", dt_test_tmpdir());
	snprintf(tf, sizeof(tf), "TF_CONFIG={\"cluster\":{\"chief\":[\"dist-mnist-chief-0.kubeflow.svc:2222\"]},"
				 "\"task\":{\"type\":\"chief\",\"index\":0},\"environment\":\"cloud\"}");
	/* Its addresses are not loopback: the task needs the cluster secret (SECURITY.md). */
	char secret[700], secret_flag[760];
	snprintf(secret, sizeof(secret), "%s/secret", dt_test_tmpdir());
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_auth_secret_new(secret, &err), &err);
	snprintf(secret_flag, sizeof(secret_flag), "--cluster_secret_file=%s", secret);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ dt_test_dtrain_bin(), "train", "--model=mlp", "--problem=fashion_mnist",
					  "--train_steps=50", out_flag, secret_flag, NULL },
		    (const char *[]){ tf, NULL }, 60);
	if (r.exit_code != 0)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "[chief:0] I step 50/50");
	dt_run_release(&r);
}

/* ---- a real one-node Slurm (tests/slurm/start-cluster.sh) ---- */

/* Runs a Slurm client command with the test's slurm.conf; its stdout in
 * out (cap bytes); returns its exit code. */
static int slurm_cmd(const char *dir, const char *const *argv, char *out, size_t cap)
{
	char conf[700];
	snprintf(conf, sizeof(conf), "SLURM_CONF=%s/slurm.conf", dir);
	struct dt_run r;
	dt_test_run(&r, argv, (const char *[]){ conf, NULL }, 30);
	if (out)
		snprintf(out, cap, "%s%s", r.out ? r.out : "", r.err ? r.err : "");
	int code = r.timed_out ? 124 : r.exit_code;
	dt_run_release(&r);
	return code;
}

/* Submits `job` (sbatch, not waiting); its job id, or -1. */
static int submit(const char *dir, const char *job, const char *out_name)
{
	char out[760], chdir_arg[700], text[2048];
	snprintf(out, sizeof(out), "--output=%s/%s", dir, out_name);
	snprintf(chdir_arg, sizeof(chdir_arg), "--chdir=%s", dir);
	/* Submitted from the test's directory: the default OUTPUT_DIR is under
	 * SLURM_SUBMIT_DIR, which is sbatch's working directory (not --chdir). */
	char cwd[600];
	DT_CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	DT_CHECK(chdir(dir) == 0);
	int code = slurm_cmd(dir, (const char *[]){ "sbatch", "--parsable", chdir_arg, out, job, NULL }, text, sizeof(text));
	DT_CHECK(chdir(cwd) == 0);
	return code ? -1 : atoi(text);
}

/* "scontrol show job ID" into text; the value of JobState into state. */
static void job_state(const char *dir, int id, char *text, size_t cap, char *state, size_t scap)
{
	char idt[32];
	snprintf(idt, sizeof(idt), "%d", id);
	slurm_cmd(dir, (const char *[]){ "scontrol", "show", "job", idt, NULL }, text, cap);
	const char *p = strstr(text, "JobState=");
	snprintf(state, scap, "%.*s", p ? (int)strcspn(p + 9, " \n") : 0, p ? p + 9 : "");
}

/* Waits (bounded) until job `id` is in a final state; fills state. */
static void wait_job(const char *dir, int id, double timeout_s, char *state, size_t scap)
{
	char text[4096];
	double end = cli_now_s() + timeout_s;
	do {
		job_state(dir, id, text, sizeof(text), state, scap);
		if (!strcmp(state, "COMPLETED") || !strcmp(state, "FAILED") || !strcmp(state, "CANCELLED") ||
		    !strcmp(state, "TIMEOUT") || !strcmp(state, "NODE_FAIL") || !strcmp(state, "OUT_OF_MEMORY"))
			return;
		cli_sleep_ms(250);
	} while (cli_now_s() < end);
}

static void emit_job(const char *dir, const char *spec_name, const char *spec_text, char *job, size_t cap)
{
	char spec[700], emit_file[760];
	cli_write_spec(spec, sizeof(spec), spec_name, spec_text);
	snprintf(job, cap, "%s/%s.sh", dir, spec_name);
	snprintf(emit_file, sizeof(emit_file), "--emit_file=%s", job);
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", "--emit=slurm", spec, emit_file, NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
}

/* Two jobs of the emitted script at once on one node (declared with 8
 * CPUs: one per task for both), each task its own step with >= 1 CPU,
 * ports that do not collide, both COMPLETED; then a job whose worker is
 * SIGKILLed is restarted by the script (restart_policy OnFailure). */
DT_TEST_TIMEOUT(launch_slurm_real, emitted_sbatch_script_runs_two_jobs_and_restarts_a_killed_worker, 300)
{
	cli_private_home();
	char dir[600];
	struct dt_run r;
	setenv("DT_SLURM_CPUS", "8", 1);
	slurm_start(&r, dir, sizeof(dir));
	unsetenv("DT_SLURM_CPUS");
	if (r.exit_code == 77 || r.timed_out) {
		fprintf(stderr, "%s%s", r.out, r.err);
		dt_run_release(&r);
		char ignored[1024] = "";
		slurm_stop(dir, ignored, sizeof(ignored));
		DT_SKIP("slurm cannot start here (see the output)");
	}
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);

	char job[760], text[1024];
	snprintf(text, sizeof(text), "name: slurmy\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 300\n"
				     "args: [--log_every=100, --save_checkpoints_steps=100]\n"
				     "distributed: {worker: 2, ps: 1, evaluator: 1}\nrestart_policy: OnFailure\n"
				     "backoff_limit: 2\n");
	emit_job(dir, "slurmy", text, job, sizeof(job));
	char *body = cli_read_file(job);
	DT_CHECK(body != NULL);
	const char *want[] = { "#SBATCH --nodes=1\n", "#SBATCH --ntasks=4\n", "#SBATCH --ntasks-per-node=4\n",
			       "#SBATCH --cpus-per-task=1\n", "#SBATCH --requeue\n", "srun --nodes=1 --ntasks=1 --exact",
			       "export DTRAIN_CLUSTER_SECRET_FILE=" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		DT_CHECK_CONTAINS(body, want[i]);
	DT_CHECK(strstr(body, "overcommit") == NULL);
	free(body);

	char failure[3000] = "";
	double t0 = cli_now_s();
	int ids[2] = { submit(dir, job, "a.out"), submit(dir, job, "b.out") };
	if (ids[0] < 0 || ids[1] < 0)
		snprintf(failure, sizeof(failure), "sbatch failed");
	for (int k = 0; k < 2 && !failure[0]; k++) {
		/* The allocation, read while the job runs or after. */
		char info[4096], state[32];
		job_state(dir, ids[k], info, sizeof(info), state, sizeof(state));
		const char *cpus = strstr(info, "NumCPUs="), *ntasks = strstr(info, "NumTasks=");
		if (!cpus || !ntasks || atoi(cpus + 8) < atoi(ntasks + 9) || atoi(ntasks + 9) != 4)
			snprintf(failure, sizeof(failure), "job %d: fewer CPUs than tasks:\n%.2000s", ids[k], info);
	}
	for (int k = 0; k < 2 && !failure[0]; k++) {
		char state[32];
		wait_job(dir, ids[k], 150, state, sizeof(state));
		char path[700];
		snprintf(path, sizeof(path), "%s/%s", dir, k ? "b.out" : "a.out");
		char *log = cli_read_file(path);
		char ckpt[700];
		snprintf(ckpt, sizeof(ckpt), "%s/slurmy-%d/checkpoint", dir, ids[k]); /* one output dir per job */
		/* Every task authenticated with the job's own secret, 0600 in the shared output dir. */
		char secret[760];
		snprintf(secret, sizeof(secret), "%s/slurmy-%d/cluster_secret.%d", dir, ids[k], ids[k]);
		struct stat sb;
		if (stat(secret, &sb) != 0 || (sb.st_mode & 0777) != 0600)
			snprintf(failure, sizeof(failure), "job %d: no cluster secret of mode 0600 at %s", ids[k], secret);
		else if (strcmp(state, "COMPLETED") != 0 || !log ||
			 !strstr(log, "slurmy.experiment --> FINISHED (exit code 0)") || !strstr(log, "[chief:0] I") ||
			 !strstr(log, "eval (test split") || access(ckpt, F_OK) != 0)
			snprintf(failure, sizeof(failure), "job %d ended %s:\n%.2500s", ids[k], state, log ? log : "(no output)");
		free(log);
	}
	fprintf(stderr, "two concurrent jobs took %.1f s\n", cli_now_s() - t0);

	/* A killed worker is restarted within the allocation. */
	snprintf(text, sizeof(text), "name: killed\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 3000\n"
				     "args: [--log_every=500]\ndistributed: {worker: 2, ps: 1}\n"
				     "restart_policy: OnFailure\nbackoff_limit: 1\n");
	emit_job(dir, "killed", text, job, sizeof(job));
	int id = failure[0] ? -1 : submit(dir, job, "c.out");
	int killed = 0;
	for (int tries = 0; id > 0 && !killed && tries < 300; tries++) {
		cli_sleep_ms(100);
		char path[700];
		snprintf(path, sizeof(path), "%s/c.out", dir);
		char *log = cli_read_file(path);
		int training = log && strstr(log, "[worker:0] I connected");
		free(log);
		if (!training)
			continue;
		/* The task itself (comm "dtrain"), not its srun. */
		DIR *proc = opendir("/proc");
		for (struct dirent *de; proc && !killed && (de = readdir(proc)) != NULL;) {
			pid_t p = (pid_t)atoi(de->d_name);
			char comm_path[300], comm[32] = "";
			snprintf(comm_path, sizeof(comm_path), "/proc/%s/comm", de->d_name);
			FILE *f = p > 0 ? fopen(comm_path, "re") : NULL;
			if (!f)
				continue;
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = '\0';
			fclose(f);
			if (!strcmp(comm, "dtrain\n") && cli_proc_mentions(p, "DTRAIN_TASK=worker.0") &&
			    cli_proc_mentions(p, dir) && kill(p, SIGKILL) == 0)
				killed = 1;
		}
		if (proc)
			closedir(proc);
	}
	if (!failure[0]) {
		char state[32];
		wait_job(dir, id, 150, state, sizeof(state));
		char path[700];
		snprintf(path, sizeof(path), "%s/c.out", dir);
		char *log = cli_read_file(path);
		if (!killed || strcmp(state, "COMPLETED") != 0 || !log ||
		    !strstr(log, "killed.worker.0 --> FAILED (exit code 137), restart in 1 s") ||
		    !strstr(log, "killed.experiment --> FINISHED (exit code 0)"))
			snprintf(failure, sizeof(failure), "killed %d, job %d ended %s:\n%.2500s", killed, id, state,
				 log ? log : "(no output)");
		free(log);
	}
	char leftovers[1024] = "";
	slurm_stop(dir, leftovers, sizeof(leftovers));
	if (failure[0])
		dt_test_fail(__FILE__, __LINE__, "%s", failure);
	DT_CHECK_STR_EQ(leftovers, "");
}
