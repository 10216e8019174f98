/* CLI tests for seed 001's experiment spec as written (RiseML's form) and
 * for sweeps: `parameters:`, `{{ }}` templates, trials N.1 ... N.k run as
 * whole distributed experiments, `concurrency`, `max_failed_trials`, kill
 * of one trial and of the sweep (src/launch/sweep.h, docs/LAUNCH.md
 * "Sweeps"). Each test has its own $DTRAIN_HOME; the trials run shell
 * one-liners (or, in one test, a few steps of dtrain train on synthetic
 * data), so each test takes seconds. */
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster_procs.h"
#include "dt_test.h"
#include "launch/state.h"

static int load(const char *id, struct dt_exp *e)
{
	char home[600];
	dt_exp_home(home, sizeof(home));
	if (dt_exp_load(home, id, e, NULL) != DT_OK) {
		dt_exp_release(e);
		return 0;
	}
	return 1;
}

/* Processes whose environment has this test's DTRAIN_HOME (launchers,
 * trials' launchers, tasks, what tasks started), waiting up to timeout_s
 * for them to go; returns how many are left. */
static int home_processes(double timeout_s)
{
	char want[700];
	snprintf(want, sizeof(want), "DTRAIN_HOME=%s", getenv("DTRAIN_HOME"));
	return cli_processes_with_env((const char *[]){ want, NULL }, timeout_s);
}

/* Waits until trial `id`'s state in sweep `sweep` is `state`. */
static int wait_trial(const char *sweep, const char *id, enum dt_task_state state, double timeout_s)
{
	double end = cli_now_s() + timeout_s;
	while (cli_now_s() < end) {
		struct dt_exp e;
		if (load(sweep, &e)) {
			for (int i = 0; i < e.ntasks; i++)
				if (!strcmp(e.tasks[i].name, id) && e.tasks[i].state == state) {
					dt_exp_release(&e);
					return 1;
				}
			dt_exp_release(&e);
		}
		cli_sleep_ms(50);
	}
	return 0;
}

/* Waits until experiment (or trial) `id` has every task RUNNING. */
static int wait_exp_running(const char *id, double timeout_s)
{
	double end = cli_now_s() + timeout_s;
	while (cli_now_s() < end) {
		struct dt_exp e;
		if (load(id, &e)) {
			int all = e.ntasks > 0;
			for (int i = 0; i < e.ntasks; i++)
				all &= e.tasks[i].state == DT_TS_RUNNING;
			dt_exp_release(&e);
			if (all)
				return 1;
		}
		cli_sleep_ms(50);
	}
	return 0;
}

/* Seed 001's spec, its keys as written; `run` prints what a task sees. */
#define SEED_001                                                                                    \
	"project: ai-toaster\n"                                                                     \
	"train:\n"                                                                                  \
	"  framework: tensorflow\n"                                                                 \
	"  resources:\n"                                                                            \
	"    cpus: 1\n"                                                                             \
	"    mem: 16384\n"                                                                          \
	"    gpus: 4\n"                                                                             \
	"  tensorflow:\n"                                                                           \
	"    version: 1.2.1-gpu\n"                                                                  \
	"    distributed:\n"                                                                        \
	"      worker: 3\n"                                                                         \
	"      ps:\n"                                                                               \
	"        count: 2\n"                                                                        \
	"        resources:\n"                                                                      \
	"          cpus: 1\n"                                                                       \
	"          mem: 16384\n"                                                                    \
	"          gpus: 0\n"                                                                       \
	"  run: >-\n"                                                                               \
	"    echo \"run $DTRAIN_TRIAL $DTRAIN_TASK --num-layers {{ num-layers }}\n"                   \
	"          --learning-rate {{ learning-rate }} --batch {{ batch }} TF_CONFIG=$TF_CONFIG\"\n"  \
	"  parameters:\n"                                                                           \
	"    num-layers: [1, 2]\n"                                                                  \
	"    learning-rate:\n"                                                                      \
	"      range: {min: 0.1, max: 0.2, step: 0.1}\n"                                             \
	"    batch: [16, 32]\n"                                                                     \
	"  concurrency: 2\n"

DT_TEST_TIMEOUT(launch_sweep, seed_001_spec_runs_a_grid_of_distributed_trials, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "seed001.yaml", SEED_001);
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 50);
	if (r.exit_code != 0)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "--> STARTING sweep 'ai-toaster': 8 trials (grid search), 2 at a time");
	if (access("/dev/nvidia0", F_OK) != 0 && access("/dev/kfd", F_OK) != 0)
		DT_CHECK_CONTAINS(r.err, "notice: the spec asks for GPUs (4 per worker) and this host has none");
	DT_CHECK(strstr(r.err, "error") == NULL);
	dt_run_release(&r);

	/* RiseML's order: the last parameter varies fastest. */
	static const char *const want[8] = {
		"num-layers=1 learning-rate=0.1 batch=16", "num-layers=1 learning-rate=0.1 batch=32",
		"num-layers=1 learning-rate=0.2 batch=16", "num-layers=1 learning-rate=0.2 batch=32",
		"num-layers=2 learning-rate=0.1 batch=16", "num-layers=2 learning-rate=0.1 batch=32",
		"num-layers=2 learning-rate=0.2 batch=16", "num-layers=2 learning-rate=0.2 batch=32",
	};
	struct dt_exp sweep;
	DT_CHECK(load("1", &sweep));
	DT_CHECK(sweep.sweep);
	DT_CHECK_INT_EQ(sweep.state, DT_TS_FINISHED);
	DT_CHECK_INT_EQ(sweep.ntasks, 8);
	double started[8], ended[8];
	for (int k = 1; k <= 8; k++) {
		char id[16];
		snprintf(id, sizeof(id), "1.%d", k);
		const struct dt_exp_task *t = &sweep.tasks[k - 1];
		DT_CHECK_STR_EQ(t->name, id);
		DT_CHECK_STR_EQ(t->params, want[k - 1]);
		DT_CHECK_INT_EQ(t->state, DT_TS_FINISHED);
		DT_CHECK_INT_EQ(t->exit_code, 0);

		/* The trial: a whole experiment of its own, seed 001's shape. */
		struct dt_exp e;
		DT_CHECK(load(id, &e));
		DT_CHECK_INT_EQ(e.state, DT_TS_FINISHED);
		DT_CHECK_INT_EQ(e.ntasks, 5);
		started[k - 1] = e.started;
		ended[k - 1] = e.ended;
		static const char *const names[5] = { "ps.0", "ps.1", "chief", "worker.0", "worker.1" };
		for (int i = 0; i < 5; i++) {
			DT_CHECK_STR_EQ(e.tasks[i].name, names[i]);
			DT_CHECK_INT_EQ(e.tasks[i].state, DT_TS_FINISHED);
			char path[800], line[300];
			dt_exp_log_path(&e, names[i], path, sizeof(path));
			char *log = cli_read_file(path);
			DT_CHECK(log != NULL);
			/* The run line with the trial's values, TF_CONFIG naming this task. */
			int layers = k <= 4 ? 1 : 2, batch = k % 2 ? 16 : 32;
			const char *lr = (k - 1) / 2 % 2 ? "0.2" : "0.1";
			snprintf(line, sizeof(line), "run %s %s --num-layers %d --learning-rate %s --batch %d TF_CONFIG=", id,
				 names[i], layers, lr, batch);
			DT_CHECK_CONTAINS(log, line);
			DT_CHECK_CONTAINS(log, "\"cluster\": {\"chief\": [\"127.0.0.1:");
			const char *type = i < 2 ? "ps" : i == 2 ? "chief" : "worker";
			int index = i < 2 ? i : i == 2 ? 0 : i - 3;
			snprintf(line, sizeof(line), "\"task\": {\"type\": \"%s\", \"index\": %d}", type, index);
			DT_CHECK_CONTAINS(log, line);
			free(log);
		}
		/* Its parameters in its own output dir. */
		char path[800], yaml[200];
		snprintf(path, sizeof(path), "%s/%s/params.yaml", sweep.output_dir, id);
		char *text = cli_read_file(path);
		DT_CHECK(text != NULL);
		snprintf(yaml, sizeof(yaml), "num-layers: %d\nlearning-rate: %s\nbatch: %d\n", k <= 4 ? 1 : 2,
			 (k - 1) / 2 % 2 ? "0.2" : "0.1", k % 2 ? 16 : 32);
		DT_CHECK_STR_EQ(text, yaml);
		free(text);
		dt_exp_release(&e);
	}
	dt_exp_release(&sweep);
	/* Never more than `concurrency` trials at once, by their own records. */
	for (int a = 0; a < 8; a++) {
		int at_once = 0;
		for (int b = 0; b < 8; b++)
			at_once += started[b] <= started[a] && ended[b] > started[a];
		DT_CHECK(at_once <= 2);
	}
	DT_CHECK_INT_EQ(home_processes(5), 0);
	/* status lists every trial with its values; logs take a trial's id. */
	struct dt_run r2;
	cli_run(&r2, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_INT_EQ(r2.exit_code, 0);
	DT_CHECK_CONTAINS(r2.out, "sweep 1 'ai-toaster': FINISHED (exit code 0)");
	DT_CHECK_CONTAINS(r2.out, "trials: 8: 8 finished, 0 running, 0 failed, 0 killed, 0 waiting");
	DT_CHECK_CONTAINS(r2.out, "num-layers=2 learning-rate=0.1 batch=32");
	DT_CHECK(strstr(r2.out, "1.6        FINISHED      0") != NULL);
	dt_run_release(&r2);
	cli_run(&r2, (const char *[]){ "logs", "1.6", "chief", NULL }, 20);
	DT_CHECK_INT_EQ(r2.exit_code, 0);
	DT_CHECK_CONTAINS(r2.out, "run 1.6 chief --num-layers 2 --learning-rate 0.1 --batch 32");
	dt_run_release(&r2);
	cli_run(&r2, (const char *[]){ "logs", "1", "chief", NULL }, 20);
	DT_CHECK_INT_EQ(r2.exit_code, 2);
	DT_CHECK_CONTAINS(r2.err, "1 is a sweep: its trials have the logs, e.g. 'dtrain logs 1.1 chief'");
	dt_run_release(&r2);
}

/* Every mistake in a sweep: exit 2, the file, line and column. */
DT_TEST(launch_sweep, bad_specs_exit_2_with_line_and_column)
{
	cli_private_home();
	struct {
		const char *text, *want;
	} cases[] = {
		{ "command: echo {{ lr }} {{ nope }}\nparameters:\n  lr: [1]\n",
		  ":1:24: unknown parameter 'nope' in '{{ nope }}'; parameters: lr" },
		{ "command: echo hi\nparameters:\n  lr: [1, 2]\n", ":3:3: parameter 'lr' is not used" },
		{ "command: \"echo {{ lr }}\"\nparameters:\n  lr: {range: {min: 3, max: 1, step: 1}}\n",
		  ":3:15: the range of parameter 'lr' is empty: min 3 is above max 1" },
		{ "command: \"echo {{ lr }}\"\nparameters:\n  lr: {range: {min: 1, max: 3, step: 0}}\n",
		  ":3:38: the range of parameter 'lr' is empty: step must be positive" },
		{ "command: \"echo {{ lr }}\"\nparameters:\n  lr: []\n", ":3:7: parameter 'lr' has no values" },
		{ "command: \"echo {{ lr }}\"\nparameters:\n  lr: {min: 0.001, max: 0.1, scale: log}\n",
		  ":3:3: parameter 'lr' is drawn from {min, max}: that needs 'search: random'" },
		{ "command: \"echo {{ lr }}\"\nsearch: random\nparameters:\n  lr: {min: 0.001, max: 0.1, scale: log}\n",
		  ":2:9: search: random needs 'max_trials'" },
		{ "command: \"echo {{ lr }}\"\nsearch: random\nmax_trials: 2\nparameters:\n  lr: {min: 0, max: 0.1, scale: log}\n",
		  ":5:13: parameter 'lr' has scale log: min must be above 0" },
		{ "command: \"echo {{ a }} {{ b }}\"\nparameters:\n  a: {range: {min: 1, max: 40, step: 1}}\n"
		  "  b: {range: {min: 1, max: 40, step: 1}}\n",
		  ":3:3: the grid has 1600 trials, more than 1000: set 'max_trials: 1600'" },
		{ "model: mlp\ntrain_steps: \"{{ s }}\"\nparameters:\n  s: [10, abc]\n",
		  ":2:14: 'train_steps' must be a whole number, got 'abc' (in trial 2: s=abc)" },
		{ "command: echo {{ lr\nparameters:\n  lr: [1]\n", ":1:15: broken placeholder at '{{ lr'" },
		{ "command: echo hi\nconcurrency: 2\n", ":2:14: 'concurrency' is for sweeps: the spec has no 'parameters:'" },
		{ "command: echo {{ lr }}\nparameters:\n  lr: [1]\nconcurrency: 0\n", ":4:14: 'concurrency' must be between 1 and 64" },
		{ "project: p\ntrain:\n  framework: pytorch\n  run: echo\n", ":3:14: unknown framework 'pytorch'; valid: tensorflow" },
		{ "project: p\ntrain:\n  framework: tensorflow\n  tensorflow:\n    distributed:\n      wroker: 3\n  run: echo\n",
		  ":6:7: unknown key 'wroker' in 'tensorflow.distributed' (did you mean 'worker'?)" },
		{ "project: p\ntrain:\n  framework: tensorflow\n", ":3:3: missing 'run' in 'train'" },
		{ "project: Toaster\ntrain:\n  run: echo\n", ":1:10: project name 'Toaster' must be" },
		{ "project: p\ntrain:\n  run: echo {{ x }}\n  parameters:\n    x: [1]\n    x: [2]\n", ":6:5: parameter 'x' appears twice" },
		{ "command: echo {{ x }}\nparameters:\n  x: [1]\nobjective: {metric: bleu}\n",
		  ":4:12: 'objective' needs 'goal: maximize' or 'goal: minimize' for metric 'bleu'" },
		{ "command: echo {{ x }}\nparameters:\n  x: [1]\nobjective: {goal: maximize}\n", ":4:12: 'objective' needs 'metric'" },
		{ "command: echo {{ x }}\nparameters:\n  x: [1]\nobjective: {metric: acc, goal: up}\n", ":4:32: unknown goal 'up'" },
		{ "command: echo {{ x }}\nparameters:\n  x: [1]\nearly_stopping: median\n",
		  ":4:17: 'early_stopping' compares the trials by the objective" },
		{ "command: echo {{ x }}\nparameters:\n  x: [1]\nobjective: {metric: loss}\nearly_stopping: mean\n",
		  ":5:17: unknown early_stopping rule 'mean'" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char path[700];
		cli_write_spec(path, sizeof(path), "bad.yaml", cases[i].text);
		struct dt_run r;
		cli_run(&r, (const char *[]){ "launch", path, NULL }, 20);
		DT_CHECK_INT_EQ(r.exit_code, 2);
		DT_CHECK_CONTAINS(r.err, cases[i].want);
		DT_CHECK_CONTAINS(r.err, "bad.yaml:");
		dt_run_release(&r);
	}
	/* None of them started anything. */
	struct dt_exp e;
	DT_CHECK(!load("1", &e));
}

/* A grid of 1600 is refused without max_trials (above); with it, it is
 * accepted: --emit says so without running 1600 trials. */
DT_TEST(launch_sweep, max_trials_lets_a_large_grid_through)
{
	cli_private_home();
	char path[700];
	cli_write_spec(path, sizeof(path), "big.yaml",
		       "command: \"echo {{ a }} {{ b }}\"\nmax_trials: 1600\nparameters:\n"
		       "  a: {range: {min: 1, max: 40, step: 1}}\n  b: {range: {min: 1, max: 40, step: 1}}\n");
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", "--emit=k8s", path, NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--emit of a sweep");
	DT_CHECK(strstr(r.err, "1000") == NULL);
	dt_run_release(&r);
}

/* A trial that exits non-zero counts against max_failed_trials; the sweep
 * goes on while within it, and stops starting trials past it. */
DT_TEST_TIMEOUT(launch_sweep, failed_trials_count_against_max_failed_trials, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "fails.yaml",
		       "name: flaky\ncommand: \"test {{ x }} != 2\"\ndistributed: {worker: 2, ps: 1}\n"
		       "parameters:\n  x: [1, 2, 3]\nmax_failed_trials: 1\n");
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 50);
	if (r.exit_code != 0)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "--> trial 1.2 FAILED (exit code 1)");
	DT_CHECK_CONTAINS(r.out, "2 of 3 trials finished, 1 failed");
	dt_run_release(&r);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.tasks[0].state, DT_TS_FINISHED);
	DT_CHECK_INT_EQ(e.tasks[1].state, DT_TS_FAILED);
	DT_CHECK_INT_EQ(e.tasks[2].state, DT_TS_FINISHED);
	dt_exp_release(&e);

	cli_write_spec(spec, sizeof(spec), "fails0.yaml",
		       "name: strict\ncommand: \"test {{ x }} != 2\"\ndistributed: {worker: 2, ps: 1}\n"
		       "parameters:\n  x: [1, 2, 3]\nmax_failed_trials: 0\n");
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 50);
	if (r.exit_code != 1)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 1);
	DT_CHECK_CONTAINS(r.out, "1 trials failed, more than max_failed_trials (0): no new trial starts");
	dt_run_release(&r);
	DT_CHECK(load("2", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_FAILED);
	DT_CHECK_INT_EQ(e.tasks[1].state, DT_TS_FAILED);
	DT_CHECK_INT_EQ(e.tasks[2].state, DT_TS_KILLED); /* never started */
	dt_exp_release(&e);
	DT_CHECK(!load("2.3", &e));
}

#define RND_SPEC "name: rnd\ncommand: \"echo {{ lr }} {{ units }} {{ opt }}\"\n" \
	"distributed: {worker: 1, mode: mirrored}\nsearch: random\nmax_trials: 4\nseed: %d\n" \
	"concurrency: 4\nparameters:\n  lr: {min: 0.0001, max: 0.1, scale: log}\n" \
	"  units: {min: 16, max: 64}\n  opt: {choices: [sgd, adam]}\n"

/* Random search: the same seed gives the same trials, in range; another
 * seed others. */
DT_TEST_TIMEOUT(launch_sweep, random_search_is_reproducible_from_its_seed, 60)
{
	cli_private_home();
	char text[600], spec[700];
	char params[3][4][256];
	int seeds[3] = { 7, 7, 8 };
	for (int run = 0; run < 3; run++) {
		snprintf(text, sizeof(text), RND_SPEC, seeds[run]);
		cli_write_spec(spec, sizeof(spec), "rnd.yaml", text);
		struct dt_run r;
		cli_run(&r, (const char *[]){ "launch", spec, NULL }, 50);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		dt_run_release(&r);
		char id[8];
		snprintf(id, sizeof(id), "%d", run + 1);
		struct dt_exp e;
		DT_CHECK(load(id, &e));
		DT_CHECK_INT_EQ(e.ntasks, 4);
		for (int k = 0; k < 4; k++) {
			snprintf(params[run][k], sizeof(params[run][k]), "%s", e.tasks[k].params);
			double lr = 0;
			int units = 0;
			char opt[16];
			DT_CHECK_INT_EQ(sscanf(e.tasks[k].params, "lr=%lf units=%d opt=%15s", &lr, &units, opt), 3);
			DT_CHECK(lr >= 0.0001 && lr <= 0.1);
			DT_CHECK(units >= 16 && units <= 64);
			DT_CHECK(!strcmp(opt, "sgd") || !strcmp(opt, "adam"));
		}
		dt_exp_release(&e);
	}
	int same = 1, differ = 0;
	for (int k = 0; k < 4; k++) {
		same &= !strcmp(params[0][k], params[1][k]);
		differ |= strcmp(params[0][k], params[2][k]) != 0;
	}
	DT_CHECK(same);
	DT_CHECK(differ);
	DT_CHECK(strcmp(params[0][0], params[0][1]) != 0);
}

/* The HParams plugin's session-start hparams of the event files under
 * `dir`, decoded by the tests' independent reader (tests/tools/
 * read_events.py with protoc-compiled event.proto and hparams.proto, as
 * test_summaries_evaluator.c does); skips the test without protoc or
 * python3-protobuf. The caller json_decref()s the whole reader output
 * `*all`. */
static json_t *session_hparams(const char *dir, json_t **all)
{
	static char pb[512];
	struct dt_run r;
	if (!pb[0]) {
		dt_test_run(&r, (const char *[]){ "/bin/sh", "-c",
						  "command -v protoc >/dev/null && /usr/bin/python3 -c 'import google.protobuf'",
						  NULL },
			    NULL, 30);
		int have = r.exit_code == 0;
		dt_run_release(&r);
		if (!have)
			DT_SKIP("protoc or python3-protobuf missing (scripts/install-deps.sh installs them)");
		dt_test_path(pb, sizeof(pb), "pb");
		DT_CHECK(mkdir(pb, 0755) == 0);
		char flag[600];
		snprintf(flag, sizeof(flag), "--python_out=%s", pb);
		dt_test_run(&r, (const char *[]){ "protoc", "-Itests/tools", flag, "tests/tools/event.proto",
						  "tests/tools/hparams.proto", NULL },
			    NULL, 60);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		dt_run_release(&r);
	}
	dt_test_run(&r, (const char *[]){ "/usr/bin/python3", "tests/tools/read_events.py", pb, dir, NULL }, NULL, 60);
	if (r.exit_code != 0)
		fprintf(stderr, "read_events.py: %s\n", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	*all = json_loads(r.out, 0, NULL);
	dt_run_release(&r);
	DT_CHECK(*all != NULL);
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(*all, "hparams"), i, v)
		if (!strcmp(json_string_value(json_object_get(v, "tag")), "_hparams_/session_start_info"))
			return json_object_get(json_object_get(json_object_get(v, "data"), "session_start_info"), "hparams");
	return NULL;
}

/* dtrain train trials: the values reach hparams and args, and each trial's
 * chief writes its parameters into its HParams session (the bytes of the
 * parameter's name in the event file; test_summaries_evaluator.c decodes
 * the session with protobuf). */
DT_TEST_TIMEOUT(launch_sweep, train_trials_carry_their_parameters_into_hparams, 120)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "train.yaml",
		       "name: lrs\nmodel: mlp\nproblem: synthetic\ntrain_steps: \"{{ nsteps }}\"\n"
		       "hparams: \"learning_rate={{ lr }}\"\nargs: [--log_every=10, --save_summary_steps=10, --noeval]\n"
		       "distributed: {mode: mirrored, worker: 1}\nresources: {cpus: 1}\n"
		       "parameters:\n  lr: [0.1, 0.05]\n  nsteps: [20]\nconcurrency: 2\n");
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 110);
	if (r.exit_code != 0)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	for (int k = 1; k <= 2; k++) {
		char dir[800], path[900];
		snprintf(dir, sizeof(dir), "%s/1.%d", e.output_dir, k);
		DT_CHECK(cli_events_name(dir, "_hparams_/session_start_info"));
		DT_CHECK(cli_events_name(dir, "nsteps")); /* a parameter that is no hparam */
		snprintf(path, sizeof(path), "%s/hparams.json", dir);
		char *hp = cli_read_file(path);
		DT_CHECK(hp != NULL);
		DT_CHECK_CONTAINS(hp, k == 1 ? "\"learning_rate\": 0.1" : "\"learning_rate\": 0.05");
		free(hp);
		/* Decoded: the trial's values in its HParams session. */
		json_t *all = NULL, *session = session_hparams(dir, &all);
		DT_CHECK(json_is_object(session));
		DT_CHECK(json_number_value(json_object_get(json_object_get(session, "nsteps"), "number_value")) == 20);
		DT_CHECK(json_number_value(json_object_get(json_object_get(session, "learning_rate"), "number_value")) ==
			 (k == 1 ? 0.1 : 0.05));
		json_decref(all);
	}
	dt_exp_release(&e);
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK(strstr(r.out, "FINISHED      0") != NULL);
	DT_CHECK_CONTAINS(r.out, "20/20  100%  lr=0.05 nsteps=20");
	dt_run_release(&r);
}

/* An objective: each finished trial's metric from its eval line (here a
 * command's own; the evaluator's log first, then the chief's), `status`
 * ranks the trials by it with the best marked, and a trial that reaches
 * the target ends the sweep early (the rest never start). */
DT_TEST_TIMEOUT(launch_sweep, objective_ranks_trials_and_its_target_ends_the_sweep, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "obj.yaml",
		       "name: obj\ncommand: \"echo eval at global step 10: accuracy = {{ acc }}, "
		       "accuracy_per_sequence = 0.99, loss = 0.5\"\n"
		       "distributed: {worker: 2, ps: 1}\nparameters:\n  acc: [0.5, 0.7, 0.95, 0.6]\n"
		       "objective: {metric: accuracy, target: 0.9}\n");
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 50);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "--> trial 1.2 FINISHED (exit code 0): accuracy = 0.7");
	DT_CHECK_CONTAINS(r.out, "trial 1.3 reached the objective's target (accuracy >= 0.9): no new trial starts");
	DT_CHECK_CONTAINS(r.out, "3 of 4 trials finished, 0 failed");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "objective: maximize accuracy (target 0.9); best: 1.3, accuracy = 0.95");
	const char *best = strstr(r.out, "1.3 *"), *second = strstr(r.out, "\n1.2 "), *third = strstr(r.out, "\n1.1 "),
		   *never = strstr(r.out, "\n1.4 ");
	DT_CHECK(best && second && third && never);
	DT_CHECK(best < second && second < third && third < never);
	DT_CHECK_CONTAINS(r.out, "KILLED        -        -           -     -            -  acc=0.6");
	dt_run_release(&r);

	/* minimize: the lowest first, no target: every trial runs. */
	cli_write_spec(spec, sizeof(spec), "min.yaml",
		       "name: minloss\ncommand: \"echo final loss: {{ l }}\"\ndistributed: {worker: 1, mode: mirrored}\n"
		       "parameters:\n  l: [0.3, 0.1, 0.2]\nobjective: {metric: loss}\n");
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 50);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "status", "2", NULL }, 20);
	DT_CHECK_CONTAINS(r.out, "objective: minimize loss; best: 2.2, loss = 0.1");
	best = strstr(r.out, "2.2 *");
	second = strstr(r.out, "\n2.3 ");
	third = strstr(r.out, "\n2.1 ");
	DT_CHECK(best && second && third && best < second && second < third);
	dt_run_release(&r);
}

/* Median early stopping (Katib's rule): three trials that learn finish;
 * the fourth reports accuracy 0 at every step (a learning rate of 0) and
 * would then sleep for 60 s: it is stopped as soon as its best by its step
 * is below the median of the finished trials' by that step. Its eval lines
 * are dtrain's form ("at global step N: accuracy = X"). */
DT_TEST_TIMEOUT(launch_sweep, median_early_stopping_stops_a_trial_that_cannot_learn, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "es.yaml",
		       "name: es\ncommand: \"for s in 10 20 30; do echo eval at global step $s: accuracy = "
		       "$(( s * {{ lr }} / 100 )).$(( s * {{ lr }} % 100 )); done; [ {{ lr }} -gt 0 ] || sleep 60\"\n"
		       "distributed: {worker: 1, mode: mirrored}\nparameters:\n  lr: [3, 2, 1, 0]\n"
		       "objective: {metric: accuracy}\nearly_stopping: median\n");
	double t0 = cli_now_s();
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 50);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK(cli_now_s() - t0 < 30); /* not the 60 s the last trial would take */
	/* The step it is judged at depends on how many of its lines the sweep
	 * had read: any of them is behind the median. */
	DT_CHECK_CONTAINS(r.out, "trial 1.4 stops early: its best accuracy by step ");
	DT_CHECK_CONTAINS(r.out, ", 0, is lower than the median 0.");
	DT_CHECK_CONTAINS(r.out, " of 3 finished trials");
	DT_CHECK_CONTAINS(r.out, "--> trial 1.4 KILLED (exit code 143) (stopped early)");
	DT_CHECK_CONTAINS(r.out, "3 of 4 trials finished, 0 failed");
	dt_run_release(&r);
	DT_CHECK_INT_EQ(home_processes(5), 0);
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_CONTAINS(r.out, "trials: 4: 3 finished, 0 running, 0 failed, 0 killed, 0 waiting, 1 stopped early");
	DT_CHECK_CONTAINS(r.out, "1.4        STOPPED     143");
	dt_run_release(&r);
}

/* `kill N.2` stops that trial only (KILLED, not counted as failed) and the
 * sweep goes on; `kill N` stops the sweep and every trial's tasks. */
DT_TEST_TIMEOUT(launch_sweep, kill_one_trial_then_the_sweep, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "sleepy.yaml",
		       "name: sleepy\ncommand: \"sleep 300 & sleep 30{{ x }}\"\ndistributed: {worker: 2, ps: 1}\n"
		       "grace_period: 2\nparameters:\n  x: [1, 2, 3]\nconcurrency: 2\n");
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	DT_CHECK(wait_exp_running("1.2", 20));
	struct dt_run r;
	cli_run(&r, (const char *[]){ "kill", "1.2", NULL }, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	DT_CHECK(wait_trial("1", "1.2", DT_TS_KILLED, 20));
	DT_CHECK(wait_exp_running("1.3", 20));
	cli_run(&r, (const char *[]){ "kill", "1", NULL }, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	DT_CHECK_INT_EQ(task_wait(&launcher, 20), 143);
	DT_CHECK_INT_EQ(home_processes(5), 0);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_KILLED);
	for (int i = 0; i < 3; i++)
		DT_CHECK_INT_EQ(e.tasks[i].state, DT_TS_KILLED);
	dt_exp_release(&e);
	DT_CHECK(load("1.3", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_KILLED);
	dt_exp_release(&e);
	task_kill(&launcher);
}

/* Ctrl-C at a terminal: SIGINT to the sweep's whole process group (the
 * launcher runs under setsid, its own group). Each running trial's
 * launcher, in a group of its own, gets one SIGTERM from the sweep and
 * stops its tasks within the grace period (not SIGKILL at once, as a
 * second signal would mean: the tasks here end on SIGTERM after writing a
 * line); exit 130. */
DT_TEST_TIMEOUT(launch_sweep, sigint_stops_every_trial_gracefully, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "trap.yaml",
		       "name: trap\ncommand: \"trap 'echo got TERM {{ x }}; exit 0' TERM; sleep 300 & wait\"\n"
		       "distributed: {worker: 1, mode: mirrored}\ngrace_period: 20\nparameters:\n  x: [1, 2]\nconcurrency: 2\n");
	struct task launcher;
	const char *bin = dt_test_dtrain_bin();
	task_start(&launcher, "launch", (const char *[]){ "/usr/bin/setsid", bin, "launch", spec, NULL }, NULL);
	DT_CHECK(wait_exp_running("1.1", 20));
	DT_CHECK(wait_exp_running("1.2", 20));
	DT_CHECK_INT_EQ(getpgid(launcher.pid), launcher.pid);
	kill(-launcher.pid, SIGINT);
	DT_CHECK_INT_EQ(task_wait(&launcher, 15), 130);
	DT_CHECK_INT_EQ(home_processes(5), 0);
	char *out = task_read(&launcher, 0);
	DT_CHECK(out != NULL);
	DT_CHECK_CONTAINS(out, "interrupted (SIGINT): stopping every running trial");
	DT_CHECK_CONTAINS(out, "got TERM 1");
	DT_CHECK_CONTAINS(out, "got TERM 2");
	DT_CHECK(strstr(out, "SIGKILL to every task now") == NULL);
	free(out);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_KILLED);
	DT_CHECK_INT_EQ(e.exit_code, 130);
	dt_exp_release(&e);
	task_kill(&launcher);
}

/* SIGKILL to the sweep mid-way, then `launch --resume`: the finished trial
 * stays finished (its state untouched), only the missing ones run, and no
 * process of the killed launcher's trials is left. */
DT_TEST_TIMEOUT(launch_sweep, resume_after_sigkill_runs_only_the_missing_trials, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "res.yaml",
		       "name: res\ncommand: \"test -e $OUTPUT_DIR/../resumed || [ {{ x }} = 1 ] || sleep 300\"\n"
		       "distributed: {worker: 2, ps: 1}\nparameters:\n  x: [1, 2, 3, 4]\nconcurrency: 2\n");
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	DT_CHECK(wait_trial("1", "1.1", DT_TS_FINISHED, 20));
	DT_CHECK(wait_exp_running("1.2", 20));
	DT_CHECK(wait_exp_running("1.3", 20));
	kill(launcher.pid, SIGKILL);
	DT_CHECK_INT_EQ(task_wait(&launcher, 10), 137);
	DT_CHECK_INT_EQ(home_processes(10), 0);
	struct dt_exp e;
	DT_CHECK(load("1.1", &e));
	double first_started = e.started;
	char marker[800];
	snprintf(marker, sizeof(marker), "%s/../resumed", e.output_dir);
	dt_exp_release(&e);
	FILE *f = fopen(marker, "w");
	DT_CHECK(f != NULL);
	fclose(f);

	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", "--resume=1", NULL }, 50);
	if (r.exit_code != 0)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "--> RESUMING sweep 'res': 3 of 4 trials to run, 0 failed before");
	DT_CHECK(strstr(r.out, "trial 1.1 RUNNING") == NULL);
	DT_CHECK_CONTAINS(r.out, "trial 1.2 RUNNING");
	DT_CHECK_CONTAINS(r.out, "trial 1.4 RUNNING");
	DT_CHECK_CONTAINS(r.out, "4 of 4 trials finished, 0 failed");
	dt_run_release(&r);
	DT_CHECK(load("1.1", &e));
	DT_CHECK(e.started == first_started);
	dt_exp_release(&e);
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_FINISHED);
	for (int i = 0; i < 4; i++)
		DT_CHECK_INT_EQ(e.tasks[i].state, DT_TS_FINISHED);
	char aside[800];
	snprintf(aside, sizeof(aside), "%s/../1.2.prev1/state.json", e.dir);
	DT_CHECK(access(aside, F_OK) == 0); /* the killed run's state, kept */
	dt_exp_release(&e);
	DT_CHECK_INT_EQ(home_processes(5), 0);
	/* An id that names nothing: exit 2. */
	cli_run(&r, (const char *[]){ "launch", "--resume=7", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "no experiment 7");
	dt_run_release(&r);
	task_kill(&launcher);
}

/* SIGKILL to the sweep's launcher: every trial's launcher dies with it and
 * their guards end the tasks. */
DT_TEST_TIMEOUT(launch_sweep, sweep_sigkill_leaves_no_process, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "sleepy.yaml",
		       "name: sleepy\ncommand: \"sleep 300 & sleep 30{{ x }}\"\ndistributed: {worker: 2, ps: 1}\n"
		       "parameters:\n  x: [1, 2]\nconcurrency: 2\n");
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	DT_CHECK(wait_exp_running("1.1", 20));
	DT_CHECK(wait_exp_running("1.2", 20));
	kill(launcher.pid, SIGKILL);
	DT_CHECK_INT_EQ(task_wait(&launcher, 10), 137);
	DT_CHECK_INT_EQ(home_processes(10), 0);
	task_kill(&launcher);
}
