/*
 * test_api_train.c — outside programs compiled against the INSTALLED
 * library train the same model code in every mode, to a target:
 * examples/layers.c (a layer graph; the mode from TF_CONFIG) locally, with
 * mirrored replicas, through parameter servers asynchronously (chief +
 * worker + ps) and synchronously, and with multi-worker mirrored (2
 * workers, ring all-reduce; the same program as the ps and the evaluator);
 * examples/custom_model.c (its own forward and backward) locally, mirrored,
 * through a ps (async and sync), t2t's in-graph layout (a master and 2 ps
 * computing) and multi-worker mirrored; examples/
 * low_level_distributed.c as seed 003 runs it, from the four flags. Every
 * trainer's dtrain_session_result is checked too (steps, a finite loss, a
 * throughput, the parameter count), the ps's and the evaluator's. The
 * clusters are separate processes on free loopback ports (cluster_procs.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_util.h"
#include "cluster_procs.h"

/* The accuracy the layers example's chief printed ("... accuracy A"), or -1. */
static double printed_accuracy(const char *out)
{
	const char *p = out ? strstr(out, " accuracy ") : NULL;
	return p ? atof(p + 10) : -1;
}

/* The parameters of the examples' models: custom_model.c's W1 (2x32), b1,
 * w2 (32x1), b2; layers.c's conv 3x3x1x8 + 8, dense 1568x64 + 64, dense
 * 64x64 + 64, dense 64x10 + 10. */
#define CUSTOM_PARAMS (2 * 32 + 32 + 32 + 1)
#define LAYERS_PARAMS (3 * 3 * 8 + 8 + 14 * 14 * 8 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10)

/* The example's "result ..." line (dtrain_session_result on its task):
 * every mode fills it from the engine that trained — the global step
 * (`steps`; -1: any past 0, an async worker's last view of it), a
 * training loss that is a loss (finite, above 0: both models' losses are),
 * a throughput, the model's parameter count. */
static void check_result(const char *out, long long steps, long long params)
{
	const char *p = out ? strstr(out, "result steps ") : NULL;
	DT_CHECK(p != NULL);
	if (!p)
		return;
	long long got_steps = -1, got_params = -1;
	double loss = -1, eps = -1;
	DT_CHECK_INT_EQ(sscanf(p, "result steps %lld final_loss %lf examples_per_sec %lf num_params %lld", &got_steps,
			       &loss, &eps, &got_params),
			4);
	if (steps >= 0)
		DT_CHECK_INT_EQ(got_steps, steps);
	else
		DT_CHECK(got_steps > 0);
	DT_CHECK(isfinite(loss) && loss > 0);
	DT_CHECK(eps > 0);
	DT_CHECK_INT_EQ(got_params, params);
}

static void build(struct api_tree *t, const char *example, char *exe, size_t cap)
{
	char src[200], name[64];
	snprintf(src, sizeof(src), "examples/%s.c", example);
	snprintf(name, sizeof(name), "%s_prog", example);
	api_install(t);
	api_compile(t, src, name, exe, cap);
}

/* One process: `exe args...`; returns its stdout (the caller frees). */
static char *run_one(const struct api_tree *t, const char *exe, const char *const *args, int want_exit)
{
	const char *argv[16] = { exe };
	int n = 1;
	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	const char *env[] = { t->ld_env, "TF_CONFIG=", NULL };
	struct dt_run r;
	dt_test_run(&r, argv, env, 240);
	if (r.exit_code != want_exit)
		dt_test_fail(__FILE__, __LINE__, "%s exited %d (want %d)\n--- stdout\n%s\n--- stderr\n%s", exe,
			     r.exit_code, want_exit, r.out, r.err);
	char *out = r.out;
	r.out = NULL;
	dt_run_release(&r);
	return out;
}

static const char *const layers_args[] = { "problem=synthetic", "train_steps=300", "log_every=0", "target=0.95",
					   NULL };

DT_TEST_TIMEOUT(api_train, layers_local, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "layers", exe, sizeof(exe));
	char *out = run_one(&t, exe, layers_args, 0);
	DT_CHECK_CONTAINS(out, "mode local step 300 ");
	DT_CHECK(printed_accuracy(out) >= 0.95);
	check_result(out, 300, LAYERS_PARAMS);
	free(out);
}

DT_TEST_TIMEOUT(api_train, layers_mirrored, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "layers", exe, sizeof(exe));
	const char *args[] = { "problem=synthetic", "train_steps=300", "log_every=0", "target=0.95", "replicas=2", NULL };
	char *out = run_one(&t, exe, args, 0);
	DT_CHECK_CONTAINS(out, "mode mirrored step 300 ");
	check_result(out, 300, LAYERS_PARAMS);
	free(out);
}

static const char *const custom_args[] = { "train_steps=1500", "log_every=0", "target=0.02", NULL };

DT_TEST_TIMEOUT(api_train, custom_local, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "custom_model", exe, sizeof(exe));
	char *out = run_one(&t, exe, custom_args, 0);
	DT_CHECK_CONTAINS(out, "worker:0 mode local step 1500 loss ");
	check_result(out, 1500, CUSTOM_PARAMS);
	free(out);
	/* The target is real: far too few steps miss it (exit 1). */
	const char *few[] = { "train_steps=3", "log_every=0", "target=0.02", NULL };
	free(run_one(&t, exe, few, 1));
}


DT_TEST_TIMEOUT(api_train, custom_mirrored, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "custom_model", exe, sizeof(exe));
	const char *args[] = { "train_steps=1500", "log_every=0", "target=0.02", "replicas=2", NULL };
	char *out = run_one(&t, exe, args, 0);
	DT_CHECK_CONTAINS(out, "mode mirrored step 1500 loss ");
	check_result(out, 1500, CUSTOM_PARAMS);
	free(out);
}

/* Every task of cluster c (started in the order given) as `argv` with the
 * installed library's environment; each must exit 0 within the test's
 * time. Returns the stdout of task `want` (the caller frees). */
struct start {
	const char *type;
	int index;
};
static char *run_cluster(struct cluster *c, const struct api_tree *t, const char *const *argv,
			 const struct start *tasks, int n, int want)
{
	const char *env[] = { t->ld_env, NULL };
	struct task *started[CLUSTER_MAX_TASKS];
	for (int i = 0; i < n; i++)
		started[i] = cluster_start(c, tasks[i].type, tasks[i].index, NULL, argv, env);
	for (int i = 0; i < n; i++)
		if (task_wait(started[i], 50) != 0) {
			/* Every task's own verdict (its loss against the target) is on
			 * its stdout: whether the others missed too tells a run whose
			 * final variables missed from one task's copy of them. */
			for (int j = 0; j < n; j++)
				(void)task_wait(started[j], 20);
			tasks_dump(c->tasks, c->n);
			for (int j = 0; j < n; j++) {
				char *out = task_read(started[j], 0);
				fprintf(stderr, "    | ---- %s:%d's stdout (status %d):\n%s", tasks[j].type, tasks[j].index,
					started[j]->status, out ? out : "");
				free(out);
			}
			dt_test_fail(__FILE__, __LINE__, "%s:%d exited %d", tasks[i].type, tasks[i].index, started[i]->status);
		}
	return task_read(started[want], 0);
}

/* The same custom model, its own forward and backward, trained through a
 * ps asynchronously by 2 trainers, every one of them to the loss target on
 * the variables it ends with; the same program is the ps. */
DT_TEST_TIMEOUT(api_train, custom_ps_async, 60)
{
	struct api_tree t;
	char exe[800];
	build(&t, "custom_model", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	/* The model is tiny (~3000 steps/s): a run of a few seconds, so that
	 * the worker, which looks for the chief's initialization every 0.2 s,
	 * trains in it too; a smaller rate than alone, for stale gradients,
	 * and decayed to zero at the last step. At a constant rate this was a
	 * flake under CPU contention (~1 run in 30-50): a trainer kept off a
	 * core for a scheduler tick or two (4-15 ms) pushes a gradient 60-400
	 * global steps stale, Adam's kick shows as a loss spike on both
	 * trainers, and a run that ended inside one missed the target on the
	 * chief and the worker alike. With the decay the last spikes are
	 * small: 100 runs of 100 passed beside two busy loops. */
	const char *argv[] = { exe, "train_steps=6000", "log_every=0", "target=0.02", "learning_rate=0.003",
			       "lr_schedule=linear_warmup_decay", NULL };
	/* The chief starts once the worker waits for the model: the worker's
	 * start-up (exec, the library, its connection: a second or more on a
	 * loaded host or under ASan) then cannot outlast the chief's 6000 steps,
	 * which left the worker "did 0 of 6000"; what is left is its 0.2 s poll. */
	const char *env[] = { t.ld_env, NULL };
	cluster_start(&c, "ps", 0, NULL, argv, env);
	struct task *worker = cluster_start(&c, "worker", 0, NULL, argv, env);
	EXPECT_LOG(&c, worker, "waiting for model", 60);
	const struct start tasks[] = { { "chief", 0 } };
	char *out = run_cluster(&c, &t, argv, tasks, 1, 0);
	for (int i = 0; i < 2; i++)
		if (task_wait(&c.tasks[i], 50) != 0) {
			tasks_dump(c.tasks, c.n);
			dt_test_fail(__FILE__, __LINE__, "%s exited %d", c.tasks[i].name, c.tasks[i].status);
		}
	DT_CHECK_CONTAINS(out, "chief:0 mode ps_async step 6000 loss ");
	check_result(out, 6000, CUSTOM_PARAMS);
	free(out);
	/* The worker took steps of its own and ended at the loss target too
	 * (its global step: the last it saw before the chief ended the run). */
	out = task_read(&c.tasks[1], 0);
	DT_CHECK_CONTAINS(out, "worker:0 mode ps_async step ");
	check_result(out, -1, CUSTOM_PARAMS);
	free(out);
	out = task_read(&c.tasks[1], 1);
	DT_CHECK_CONTAINS(out, "I did ");
	DT_CHECK(!strstr(out, "I did 0 of"));
	free(out);
}

/* Synchronously through the ps: each step gathers both trainers' gradients. */
DT_TEST_TIMEOUT(api_train, custom_ps_sync, 60)
{
	struct api_tree t;
	char exe[800];
	build(&t, "custom_model", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	const char *argv[] = { exe, "train_steps=800", "log_every=0", "target=0.02", "sync=1", NULL };
	const struct start tasks[] = { { "ps", 0 }, { "worker", 0 }, { "chief", 0 } };
	char *out = run_cluster(&c, &t, argv, tasks, 3, 2);
	DT_CHECK_CONTAINS(out, "chief:0 mode ps_sync step 800 loss ");
	check_result(out, 800, CUSTOM_PARAMS);
	free(out);
	out = task_read(&c.tasks[1], 0);
	DT_CHECK_CONTAINS(out, "worker:0 mode ps_sync step 800 loss ");
	check_result(out, 800, CUSTOM_PARAMS);
	free(out);
}

/* t2t's in-graph layout with the program's own model: a master, the only
 * trainer (sync=1), and 2 ps tasks running the same program, each of which
 * computes a replica's gradient on its shard of the program's data at the
 * master's variables every step. */
DT_TEST_TIMEOUT(api_train, custom_ps_sync_in_graph, 60)
{
	struct api_tree t;
	char exe[800];
	build(&t, "custom_model", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, "master", 0, 2);
	const char *argv[] = { exe, "train_steps=800", "log_every=0", "target=0.02", "sync=1", NULL };
	const struct start tasks[] = { { "ps", 0 }, { "ps", 1 }, { "master", 0 } };
	char *out = run_cluster(&c, &t, argv, tasks, 3, 2);
	DT_CHECK_CONTAINS(out, "master:0 mode ps_sync_in_graph step 800 loss ");
	check_result(out, 800, CUSTOM_PARAMS);
	free(out);
	for (int i = 0; i < 2; i++) {
		char *err = task_read(&c.tasks[i], 1), want[64];
		snprintf(want, sizeof(want), "in-graph replica %d-%d of 2 for master:0", i, i);
		DT_CHECK_CONTAINS(err, want);
		DT_CHECK_CONTAINS(err, "computed 800 in-graph replica steps");
		free(err);
	}
}

/* Multi-worker mirrored: 2 workers, ring all-reduce, bit-identical variables. */
DT_TEST_TIMEOUT(api_train, custom_multi_worker_mirrored, 60)
{
	struct api_tree t;
	char exe[800];
	build(&t, "custom_model", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	const char *argv[] = { exe, "train_steps=800", "log_every=0", "target=0.02", NULL };
	const struct start tasks[] = { { "worker", 0 }, { "worker", 1 } };
	char *out = run_cluster(&c, &t, argv, tasks, 2, 0);
	DT_CHECK_CONTAINS(out, "worker:0 mode multi_worker_mirrored step 800 loss ");
	check_result(out, 800, CUSTOM_PARAMS);
	char *other = task_read(&c.tasks[1], 0);
	check_result(other, 800, CUSTOM_PARAMS);
	/* the same variables on both: the same loss, to the last digit */
	const char *a = strstr(out, " loss "), *b = strstr(other, " loss ");
	DT_CHECK(a && b);
	if (a && b) {
		const size_t n = strcspn(a, "\n");
		DT_CHECK(n == strcspn(b, "\n") && strncmp(a, b, n) == 0);
	}
	free(other);
	free(out);
}

/* The layer graph through a ps (2 trainers), to the accuracy target, and
 * the same program as the evaluator following the chief's checkpoints to
 * the last one. Each task says the mode its TF_CONFIG gave it. */
DT_TEST_TIMEOUT(api_train, layers_ps_async_with_an_evaluator, 60)
{
	struct api_tree t;
	char exe[800];
	build(&t, "layers", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	cluster_output_dir(&c, "layers_ps");
	char od[700];
	snprintf(od, sizeof(od), "output_dir=%s", c.out_dir);
	const char *argv[] = { exe, "problem=synthetic", "train_steps=300", "log_every=0", "target=0.9", od,
			       "eval_timeout_secs=45", NULL };
	const struct start tasks[] = { { "ps", 0 }, { "evaluator", 0 }, { "worker", 0 }, { "chief", 0 } };
	char *out = run_cluster(&c, &t, argv, tasks, 4, 3);
	DT_CHECK_CONTAINS(out, "mode ps_async step 300 ");
	DT_CHECK(printed_accuracy(out) >= 0.9);
	check_result(out, 300, LAYERS_PARAMS);
	free(out);
	/* the ps has no figures; the evaluator's are its last checkpoint's */
	out = task_read(&c.tasks[0], 0);
	DT_CHECK_CONTAINS(out, "result steps 0 final_loss 0.00000 examples_per_sec 0 num_params 0 evaluated 0");
	free(out);
	out = task_read(&c.tasks[1], 0);
	DT_CHECK_CONTAINS(out, "result steps 300 final_loss 0.00000 examples_per_sec 0 num_params 0 evaluated 1");
	free(out);
	const char *modes[] = { "ps:0 runs as ps_server", "evaluator:0 runs as evaluator", "worker:0 runs as ps_async",
				"chief:0 runs as ps_async" };
	for (int i = 0; i < 4; i++) {
		char *err = task_read(&c.tasks[i], 1);
		DT_CHECK_CONTAINS(err, modes[i]);
		if (i == 1)
			DT_CHECK_CONTAINS(err, "global step 300, accuracy ");
		free(err);
	}
}

/* The layer graph in t2t's in-graph layout: the master trains, 2 ps tasks
 * (the same program) compute a replica each, to the accuracy target. */
DT_TEST_TIMEOUT(api_train, layers_ps_sync_in_graph, 60)
{
	struct api_tree t;
	char exe[800];
	build(&t, "layers", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, "master", 0, 2);
	const char *argv[] = { exe, "problem=synthetic", "train_steps=200", "log_every=0", "target=0.9", "sync=1", NULL };
	const struct start tasks[] = { { "ps", 0 }, { "ps", 1 }, { "master", 0 } };
	char *out = run_cluster(&c, &t, argv, tasks, 3, 2);
	DT_CHECK_CONTAINS(out, "mode ps_sync_in_graph step 200 ");
	DT_CHECK(printed_accuracy(out) >= 0.9);
	check_result(out, 200, LAYERS_PARAMS);
	free(out);
	char *err = task_read(&c.tasks[2], 1);
	DT_CHECK_CONTAINS(err, "master:0 runs as ps_sync_in_graph");
	free(err);
}

/* The layer graph with 2 workers and no ps: multi-worker mirrored. */
DT_TEST_TIMEOUT(api_train, layers_multi_worker_mirrored, 60)
{
	struct api_tree t;
	char exe[800];
	build(&t, "layers", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	const char *argv[] = { exe, "problem=synthetic", "train_steps=200", "log_every=0", "target=0.9", NULL };
	const struct start tasks[] = { { "worker", 0 }, { "worker", 1 } };
	char *out = run_cluster(&c, &t, argv, tasks, 2, 0);
	DT_CHECK_CONTAINS(out, "mode multi_worker_mirrored step 200 ");
	DT_CHECK(printed_accuracy(out) >= 0.9);
	check_result(out, 200, LAYERS_PARAMS);
	free(out);
}

/* Seed 003's program without a cluster: one local worker running its own
 * step loop to should_stop, then close. */
DT_TEST_TIMEOUT(api_train, low_level_distributed_alone, 240)
{
	struct api_tree t;
	char exe[800];
	build(&t, "low_level_distributed", exe, sizeof(exe));
	const char *args[] = { "problem=synthetic", "train_steps=200", "log_every=0", NULL };
	char *out = run_one(&t, exe, args, 0);
	DT_CHECK_CONTAINS(out, "worker 0 done: 200 local steps, global step 200");
	free(out);
}

/* Seed 003's program as seed 003 runs it: one ps and two workers from the
 * four low-level flags (no TF_CONFIG), each worker its own step loop until
 * the chief's global step reaches train_steps, then close. */
DT_TEST_TIMEOUT(api_train, low_level_distributed_ps_and_two_workers, 60)
{
	struct api_tree t;
	char exe[800];
	build(&t, "low_level_distributed", exe, sizeof(exe));
	struct cluster c;
	cluster_init(&c, NULL, 2, 1);
	char ps_hosts[64], worker_hosts[96];
	snprintf(ps_hosts, sizeof(ps_hosts), "--ps_hosts=127.0.0.1:%d", cluster_port(&c, "ps", 0));
	snprintf(worker_hosts, sizeof(worker_hosts), "--worker_hosts=127.0.0.1:%d,127.0.0.1:%d",
		 cluster_port(&c, "worker", 0), cluster_port(&c, "worker", 1));
	const char *env[] = { t.ld_env, "TF_CONFIG=", NULL };
	struct task tasks[3];
	const char *jobs[] = { "--job_name=ps", "--job_name=worker", "--job_name=worker" };
	const char *index[] = { "--task_index=0", "--task_index=1", "--task_index=0" };
	const char *names[] = { "ps0", "worker1", "worker0" };
	for (int i = 0; i < 3; i++) {
		const char *argv[] = { exe, ps_hosts, worker_hosts, jobs[i], index[i], "problem=synthetic",
				       "train_steps=600", "log_every=0", NULL };
		task_start(&tasks[i], names[i], argv, env);
	}
	for (int i = 0; i < 3; i++)
		if (task_wait(&tasks[i], 50) != 0) {
			tasks_dump(tasks, 3);
			dt_test_fail(__FILE__, __LINE__, "%s exited %d", names[i], tasks[i].status);
		}
	for (int i = 1; i < 3; i++) {
		char *out = task_read(&tasks[i], 0), want[64];
		snprintf(want, sizeof(want), "worker %d done: ", i == 2 ? 0 : 1);
		DT_CHECK_CONTAINS(out, want);
		const char *loss = strstr(out, "last loss ");
		DT_CHECK(loss && atof(loss + 10) < 0.1); /* the loss target */
		if (i == 2)
			DT_CHECK_CONTAINS(out, "global step 600,");
		free(out);
	}
}
