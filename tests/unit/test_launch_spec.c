/* Unit tests of the experiment spec (launch/spec.h), the task layout and
 * TF_CONFIG (launch/tasks.h), the restart rules, and the state directory
 * (launch/state.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "dt_test.h"
#include "launch/spec.h"
#include "launch/state.h"
#include "launch/tasks.h"

static enum dt_status parse(const char *text, struct dt_launch_spec *s, struct dt_err *err)
{
	return dt_launch_spec_parse(text, strlen(text), "x.yaml", s, err);
}

DT_TEST(launch_spec, full_spec_parses)
{
	const char *text = "name: fm\nmodel: cnn\nproblem: fashion_mnist\nhparams: 'learning_rate=0.01'\n"
			   "hparams_set: cnn_base\ntrain_steps: 1200\nargs: [--log_every=100, --seed=3]\n"
			   "distributed:\n  mode: sync\n  worker: 3\n  ps: 2\n  evaluator: 1\n"
			   "resources:\n  cpus: 2\n  mem: 2G\n  ps: {cpus: 1}\n  evaluator: {mem: 512M}\n"
			   "output_dir: /tmp/o\nrestart_policy: ExitCode\nbackoff_limit: 5\ngrace_period: 2.5\n"
			   "evaluator_timeout: 60\nimage: reg/dtrain:1\n";
	struct dt_launch_spec s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(parse(text, &s, &err), &err);
	DT_CHECK_STR_EQ(s.name, "fm");
	DT_CHECK_STR_EQ(s.model, "cnn");
	DT_CHECK_INT_EQ(s.train_steps, 1200);
	DT_CHECK_INT_EQ(s.nargs, 2);
	DT_CHECK_STR_EQ(s.args[1], "--seed=3");
	DT_CHECK_INT_EQ(s.mode, DT_LAUNCH_SYNC);
	DT_CHECK_INT_EQ(s.workers, 3);
	DT_CHECK_INT_EQ(s.ps, 2);
	DT_CHECK_INT_EQ(s.evaluators, 1);
	DT_CHECK_INT_EQ(s.res[DT_GROUP_WORKER].cpus, 2);
	DT_CHECK_INT_EQ(s.res[DT_GROUP_WORKER].mem_bytes, 2LL << 30);
	DT_CHECK_INT_EQ(s.res[DT_GROUP_PS].cpus, 1);
	DT_CHECK_INT_EQ(s.res[DT_GROUP_PS].mem_bytes, 2LL << 30);
	DT_CHECK_INT_EQ(s.res[DT_GROUP_EVALUATOR].cpus, 2);
	DT_CHECK_INT_EQ(s.res[DT_GROUP_EVALUATOR].mem_bytes, 512LL << 20);
	DT_CHECK_INT_EQ(s.restart, DT_RESTART_EXIT_CODE);
	DT_CHECK_INT_EQ(s.backoff_limit, 5);
	DT_CHECK_NEAR(s.grace_s, 2.5, 1e-9);
	DT_CHECK_STR_EQ(s.image, "reg/dtrain:1");
	dt_launch_spec_release(&s);
}

DT_TEST(launch_spec, errors_name_line_and_column)
{
	struct {
		const char *text, *want;
	} cases[] = {
		{ "model: mlp\nmodle: x\n", "x.yaml:2:1: unknown key 'modle' in the spec (did you mean 'model'?)" },
		{ "model: mlp\ndistributed: {worker: 0}\n", "x.yaml:2:23: 'worker' must be between 1 and 64, got 0" },
		{ "model: mlp\ndistributed:\n  ps: -2\n", "x.yaml:3:7: 'ps' must be between 0 and 64, got -2" },
		{ "model: mlp\ndistributed: {evaluator: 2}\n", "x.yaml:2:26: 'evaluator' must be between 0 and 1" },
		{ "name: a\n", "x.yaml:1:1: missing command" },
		{ "", "x.yaml:1:1: the spec is empty" },
		{ "- a\n- b\n", "x.yaml:1:1: the spec must be a mapping" },
		{ "command: []\n", "x.yaml:1:10: 'command' is empty" },
		{ "command: {a: 1}\n", "x.yaml:1:10: 'command' must be a shell line or a list" },
		{ "model: mlp\nmodel: cnn\n", "x.yaml:2:1: key 'model' appears twice" },
		{ "model: mlp\ntrain_steps: ten\n", "x.yaml:2:14: 'train_steps' must be a whole number, got 'ten'" },
		{ "model: mlp\nresources: {mem: 3T}\n", "x.yaml:2:18: 'mem': unknown unit 'T'" },
		{ "model: mlp\nresources: {gpus: 1}\n", "x.yaml:2:13: unknown key 'gpus' in 'resources'" },
		{ "model: mlp\ndistributed: {mode: mirrored, ps: 1}\n", "x.yaml:2:14: mode mirrored uses no parameter servers" },
		{ "model: mlp\ndistributed: {mode: asink}\n", "unknown mode 'asink' (did you mean 'async'?)" },
		{ "model: mlp\nname: Big_Name\n", "x.yaml:2:7: experiment name 'Big_Name' must be" },
		{ "model: mlp\nargs: [a, [b]]\n", "x.yaml:2:11: every item of 'args' must be a string" },
		{ "model: [mlp\n", "x.yaml:2:1: malformed YAML" },
		{ "model: mlp\n---\nmodel: cnn\n", "x.yaml:2:1: the spec must be one YAML document" },
		{ "model: mlp\ngrace_period: -1\n", "x.yaml:2:15: 'grace_period' must be between 0 and 86400" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct dt_launch_spec s;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_INT_EQ(parse(cases[i].text, &s, &err), DT_CONFIG);
		DT_CHECK_CONTAINS(err.msg, cases[i].want);
		dt_launch_spec_release(&s);
	}
}

DT_TEST(launch_spec, command_forms)
{
	struct dt_launch_spec s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(parse("command: echo hi\n", &s, &err), &err);
	DT_CHECK_INT_EQ(s.shell, 1);
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(&s, tasks);
	char **argv = dt_launch_argv(&s, &tasks[0], "/bin/dtrain", NULL, NULL);
	DT_CHECK_STR_EQ(argv[0], "/bin/sh");
	DT_CHECK_STR_EQ(argv[2], "echo hi");
	DT_CHECK(argv[3] == NULL);
	dt_launch_argv_free(argv);
	DT_CHECK_INT_EQ(n, 2); /* ps.0 and the chief by default */
	dt_launch_spec_release(&s);
	DT_CHECK_OK(parse("command: [/bin/echo, a b]\n", &s, &err), &err);
	DT_CHECK_INT_EQ(s.shell, 0);
	DT_CHECK_INT_EQ(s.ncommand, 2);
	dt_launch_spec_release(&s);
}

DT_TEST(launch_spec, train_argv_per_role)
{
	struct dt_launch_spec s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(parse("model: mlp\nhparams: lr=1\ntrain_steps: 5\nargs: [--x]\n"
			  "distributed: {mode: sync, worker: 2, ps: 1, evaluator: 1}\nresources: {cpus: 3}\n",
			  &s, &err), &err);
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(&s, tasks);
	DT_CHECK_INT_EQ(n, 4);
	DT_CHECK_STR_EQ(tasks[0].name, "ps.0");
	DT_CHECK_STR_EQ(tasks[1].name, "chief");
	DT_CHECK_STR_EQ(tasks[2].name, "worker.0");
	DT_CHECK_STR_EQ(tasks[3].name, "evaluator");
	const char *want[4] = {
		"D train --model=mlp --hparams=lr=1,sync=1 --train_steps=5 --schedule=run_std_server --threads=3 --x ",
		"D train --model=mlp --hparams=lr=1,sync=1 --train_steps=5 --threads=3 --x ",
		"D train --model=mlp --hparams=lr=1,sync=1 --train_steps=5 --threads=3 --x ",
		"D train --model=mlp --hparams=lr=1 --train_steps=5 --threads=3 --x ",
	};
	for (int i = 0; i < n; i++) {
		char **argv = dt_launch_argv(&s, &tasks[i], "D", NULL, NULL);
		char line[512] = "";
		for (char **a = argv; *a; a++)
			snprintf(line + strlen(line), sizeof(line) - strlen(line), "%s ", *a);
		DT_CHECK_STR_EQ(line, want[i]);
		dt_launch_argv_free(argv);
	}
	dt_launch_spec_release(&s);
}

DT_TEST(launch_spec, tf_config_of_every_task_parses_and_names_it)
{
	struct dt_launch_spec s;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(parse("model: mlp\ndistributed: {worker: 3, ps: 2, evaluator: 1}\n", &s, &err), &err);
	struct dt_launch_task tasks[DT_LAUNCH_MAX_TASKS];
	int n = dt_launch_tasks(&s, tasks);
	DT_CHECK_INT_EQ(n, 6);
	char buf[DT_LAUNCH_MAX_TASKS][32];
	const char *addrs[DT_LAUNCH_MAX_TASKS];
	for (int i = 0; i < n; i++) {
		snprintf(buf[i], sizeof(buf[i]), "127.0.0.1:%d", 5000 + i);
		addrs[i] = buf[i];
	}
	char *tf = dt_launch_tf_config(tasks, n, addrs, 3);
	DT_CHECK_STR_EQ(tf, "{\"cluster\": {\"chief\": [\"127.0.0.1:5002\"], \"worker\": [\"127.0.0.1:5003\", "
			    "\"127.0.0.1:5004\"], \"ps\": [\"127.0.0.1:5000\", \"127.0.0.1:5001\"]}, "
			    "\"task\": {\"type\": \"worker\", \"index\": 0}, \"environment\": \"cloud\"}");
	free(tf);
	/* The evaluator is named in "task" only, as the training operator writes it. */
	tf = dt_launch_tf_config(tasks, n, addrs, 5);
	DT_CHECK(strstr(tf, "\"evaluator\": [") == NULL);
	DT_CHECK_CONTAINS(tf, "\"task\": {\"type\": \"evaluator\", \"index\": 0}");
	free(tf);
	for (int i = 0; i < n; i++) {
		tf = dt_launch_tf_config(tasks, n, addrs, i);
		struct dt_cluster cl;
		DT_CHECK_OK(dt_tf_config_parse(tf, strlen(tf), &cl, &err), &err);
		DT_CHECK_INT_EQ(cl.task.job, tasks[i].ref.job);
		DT_CHECK_INT_EQ(cl.task.index, tasks[i].ref.index);
		DT_CHECK_INT_EQ(cl.num_worker_replicas, 3);
		DT_CHECK_INT_EQ(cl.num_ps_replicas, 2);
		dt_cluster_release(&cl);
		free(tf);
	}
	dt_launch_spec_release(&s);
}

DT_TEST(launch_spec, restart_rules_follow_kubeflow)
{
	DT_CHECK(!dt_launch_should_restart(DT_RESTART_NEVER, 1, 0));
	DT_CHECK(!dt_launch_should_restart(DT_RESTART_ON_FAILURE, 0, 0));
	DT_CHECK(dt_launch_should_restart(DT_RESTART_ON_FAILURE, 1, 0));
	DT_CHECK(dt_launch_should_restart(DT_RESTART_ON_FAILURE, 137, 1));
	int permanent[] = { 1, 2, 4, 126, 127, 128, 139 };
	for (size_t i = 0; i < sizeof(permanent) / sizeof(permanent[0]); i++)
		DT_CHECK(!dt_launch_should_restart(DT_RESTART_EXIT_CODE, permanent[i], 0));
	int retry[] = { 3, 130, 137, 138, 143 };
	for (size_t i = 0; i < sizeof(retry) / sizeof(retry[0]); i++)
		DT_CHECK(dt_launch_should_restart(DT_RESTART_EXIT_CODE, retry[i], 0));
	DT_CHECK(dt_launch_should_restart(DT_RESTART_EXIT_CODE, 128 + 11, 1));
}

DT_TEST(launch_spec, memory_sizes)
{
	int64_t v;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_launch_parse_mem("1024", &v, &err), &err);
	DT_CHECK_INT_EQ(v, 1LL << 30);
	DT_CHECK_OK(dt_launch_parse_mem("3Gi", &v, &err), &err);
	DT_CHECK_INT_EQ(v, 3LL << 30);
	DT_CHECK_OK(dt_launch_parse_mem("64K", &v, &err), &err);
	DT_CHECK_INT_EQ(v, 64LL << 10);
	DT_CHECK_INT_EQ(dt_launch_parse_mem("0", &v, &err), DT_CONFIG);
	DT_CHECK_INT_EQ(dt_launch_parse_mem("-5M", &v, &err), DT_CONFIG);
	DT_CHECK_INT_EQ(dt_launch_parse_mem("99999999999999G", &v, &err), DT_CONFIG);
}

/* ---- the state directory (launch/state.h) ---- */

DT_TEST(launch_state, ids_save_load_and_log_steps)
{
	char home[600];
	dt_test_path(home, sizeof(home), "home");
	struct dt_err err = DT_ERR_INIT;
	struct dt_exp a = { 0 }, b = { 0 };
	DT_CHECK_OK(dt_exp_create(home, &a, &err), &err);
	DT_CHECK_OK(dt_exp_create(home, &b, &err), &err);
	DT_CHECK_STR_EQ(a.id, "1");
	DT_CHECK_STR_EQ(b.id, "2");
	struct dt_exp_task tasks[2] = { { .name = "chief", .state = DT_TS_RUNNING, .pid = 42, .pid_start = 7,
					  .exit_code = -1, .started = 1.5, .restarts = 0 },
					{ .name = "ps.0", .state = DT_TS_FAILED, .exit_code = 3, .restarts = 2 } };
	snprintf(b.name, sizeof(b.name), "n");
	b.tasks = tasks;
	b.ntasks = 2;
	b.state = DT_TS_RUNNING;
	b.exit_code = -1;
	DT_CHECK_OK(dt_exp_save(&b, &err), &err);
	struct dt_exp c;
	DT_CHECK_OK(dt_exp_load(home, "2", &c, &err), &err);
	DT_CHECK_STR_EQ(c.name, "n");
	DT_CHECK_INT_EQ(c.ntasks, 2);
	DT_CHECK_STR_EQ(c.tasks[1].name, "ps.0");
	DT_CHECK_INT_EQ(c.tasks[1].state, DT_TS_FAILED);
	DT_CHECK_INT_EQ(c.tasks[1].exit_code, 3);
	DT_CHECK_INT_EQ(c.tasks[1].restarts, 2);
	DT_CHECK_INT_EQ(c.tasks[0].pid, 42);
	/* Its launcher (pid 0) is not running: the experiment is LOST, and
	 * so is the task whose process is gone. */
	DT_CHECK(dt_exp_check_lost(&c));
	DT_CHECK_INT_EQ(c.state, DT_TS_LOST);
	DT_CHECK_INT_EQ(c.tasks[0].state, DT_TS_LOST);
	DT_CHECK_INT_EQ(c.tasks[1].state, DT_TS_FAILED);
	dt_exp_release(&c);
	DT_CHECK_INT_EQ(dt_exp_load(home, "9", &c, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "no experiment 9");
	dt_exp_release(&c);
	DT_CHECK_INT_EQ(dt_exp_load(home, "x", &c, &err), DT_USAGE);
	dt_exp_release(&c);
	int *ids;
	DT_CHECK_INT_EQ(dt_exp_list(home, &ids), 2);
	DT_CHECK_INT_EQ(ids[1], 2);
	free(ids);

	char log[700];
	dt_exp_log_path(&b, "chief", log, sizeof(log));
	DT_CHECK_INT_EQ(dt_exp_log_step(log), -1);
	const char *text = "[t] --> RUNNING\n"
			   "[t] [chief:0] I step 100/3000 loss 1.0 acc 0.5\n"
			   "[t] [chief:0] I step 50 (global 220/3000) loss 1.0\n"
			   "[t] [ps:0] I run over: 1 pushes applied, global step 250; shutting down\n"
			   "[t] [chief:0] I did 131 of 201 global steps\n";
	dt_test_write_file(log, text, strlen(text));
	DT_CHECK_INT_EQ(dt_exp_log_step(log), 250);
	DT_CHECK(dt_proc_start_time(getpid()) > 0);
	DT_CHECK(dt_proc_same(getpid(), dt_proc_start_time(getpid())));
	DT_CHECK(!dt_proc_same(getpid(), 1));
}
