/* CLI tests for `dtrain launch` and the commands around it (status, logs,
 * monitor, kill), and the example spec; the emitters are tested in
 * test_launch_emit.c. Each test has its own $DTRAIN_HOME in its temp dir;
 * the launcher runs as a child of the test (tests/cli/cluster_procs.h), its
 * tasks as its children. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster_procs.h"
#include "dt_test.h"
#include "base/clock.h"
#include "launch/state.h"
#include "net/handshake.h"
#include "net/socket.h"

/* Loads experiment `id` from the test's home; 0 when it is not there yet. */
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

/* Waits until every task of experiment `id` is RUNNING (and, when
 * want_step, the chief's log shows a step); fills pids. */
static int wait_running(const char *id, pid_t *pids, int *n, int want_step, double timeout_s)
{
	double end = cli_now_s() + timeout_s;
	while (cli_now_s() < end) {
		struct dt_exp e;
		if (load(id, &e)) {
			int all = e.ntasks > 0;
			for (int i = 0; i < e.ntasks; i++)
				all &= e.tasks[i].state == DT_TS_RUNNING;
			if (all && want_step) {
				char log[700];
				dt_exp_log_path(&e, "chief", log, sizeof(log));
				all = dt_exp_log_step(log) > 0;
			}
			if (all) {
				*n = e.ntasks;
				for (int i = 0; i < e.ntasks; i++)
					pids[i] = e.tasks[i].pid;
				dt_exp_release(&e);
				return 1;
			}
			dt_exp_release(&e);
		}
		usleep(50000);
	}
	return 0;
}

/* Waits until none of pids is alive; returns how many still are. */
static int wait_gone(const pid_t *pids, int n, double timeout_s)
{
	double end = cli_now_s() + timeout_s;
	int left = n;
	while (cli_now_s() < end) {
		left = 0;
		for (int i = 0; i < n; i++)
			left += cli_pid_alive(pids[i]);
		if (!left)
			break;
		usleep(20000);
	}
	return left;
}

/* True when a line of `out` starts with `prefix` and contains `text`. */
static int has_line(const char *out, const char *prefix, const char *text)
{
	for (const char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		size_t len = strcspn(line, "\n");
		if (strncmp(line, prefix, strlen(prefix)) != 0)
			continue;
		const char *hit = strstr(line, text);
		if (hit && hit < line + len)
			return 1;
	}
	return 0;
}

/* Processes whose environment has EXPERIMENT_ID=<id> and this test's
 * DTRAIN_HOME (tasks and what they started), waiting up to timeout_s for
 * them to go; returns how many are left. */
static int experiment_processes(const char *id, double timeout_s)
{
	char want_id[64], want_home[700];
	snprintf(want_id, sizeof(want_id), "EXPERIMENT_ID=%s", id);
	snprintf(want_home, sizeof(want_home), "DTRAIN_HOME=%s", getenv("DTRAIN_HOME"));
	return cli_processes_with_env((const char *[]){ want_id, want_home, NULL }, timeout_s);
}

#define MLP_SHORT "model: mlp\nproblem: fashion_mnist\ntrain_steps: 200\nargs: [--log_every=100]\n"

DT_TEST(launch_cli, bad_specs_exit_2_with_line_and_column)
{
	cli_private_home();
	struct {
		const char *text, *want;
	} cases[] = {
		{ "name: t\nmodel: mlp\ndistributed:\n  wroker: 2\n", ":4:3: unknown key 'wroker' in 'distributed' (did you mean 'worker'?)" },
		{ "name: t\nmodel: mlp\ndistributed: {worker: 2, ps: -1}\n", ":3:30: 'ps' must be between 0 and 64, got -1" },
		{ "name: t\ndistributed:\n  worker: 2\n", ":1:1: missing command" },
		{ "name: t\ncommand: true\nmodel: mlp\n", ":3:8: 'command' and the dtrain train keys" },
		{ "model: mlp\nrestart_policy: Sometimes\n", ":2:17: unknown restart_policy 'Sometimes'" },
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
}

DT_TEST_TIMEOUT(launch_cli, async_spec_runs_to_completion, 90)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "async.yaml",
		       "name: small\n" MLP_SHORT "distributed: {mode: async, worker: 2, ps: 1}\nresources: {cpus: 1}\n");
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 80);
	if (r.exit_code != 0)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	const char *want[] = { "1.ps.0     | [", "1.chief    | [", "1.worker.0 | [", "--> CREATED", "--> STARTING",
			       "--> RUNNING", "1.chief    | [", "eval (test split", "1          | [" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		DT_CHECK_CONTAINS(r.out, want[i]);
	dt_run_release(&r);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_FINISHED);
	DT_CHECK_INT_EQ(e.exit_code, 0);
	DT_CHECK_INT_EQ(e.ntasks, 3);
	for (int i = 0; i < e.ntasks; i++)
		DT_CHECK_INT_EQ(e.tasks[i].state, DT_TS_FINISHED);
	dt_exp_release(&e);
	cli_run(&r, (const char *[]){ "status", "-a", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "small");
	DT_CHECK_CONTAINS(r.out, "FINISHED");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(launch_cli, flags_form_runs_a_cluster, 90)
{
	cli_private_home();
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", "--workers=2", "--ps=1", "--name=quick", "--", "--model=mlp",
				      "--problem=fashion_mnist", "--train_steps=100", "--log_every=50", NULL }, 80);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "--> STARTING experiment 'quick' (3 tasks, mode async, restart Never)");
	DT_CHECK_CONTAINS(r.out, "1.worker.0 | [");
	DT_CHECK_CONTAINS(r.out, "1          | [");
	DT_CHECK_CONTAINS(r.out, "--> FINISHED (exit code 0)");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "launch", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "say what to launch");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "launch", "--mode=mirrored", "--ps=1", "--", "--model=mlp", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "mode mirrored uses no parameter servers");
	dt_run_release(&r);
}

/* Each mode: the spec's mode reaches the tasks (sync: hparam sync=1,
 * mirrored: no ps); with an evaluator, it evaluates the last checkpoint and
 * ends by itself, and then the launcher ends. */
static void run_mode(const char *mode, int evaluator, int ntasks)
{
	cli_private_home();
	char spec[700], text[512];
	snprintf(text, sizeof(text), "name: m\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 200\n"
		 "args: [--log_every=100, --save_checkpoints_steps=100]\n"
		 "distributed: {mode: %s, worker: 2, evaluator: %d}\noutput_dir: out\nevaluator_timeout: 30\n", mode,
		 evaluator);
	cli_write_spec(spec, sizeof(spec), "mode.yaml", text);
	char cwd[600];
	DT_CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	DT_CHECK(chdir(dt_test_tmpdir()) == 0); /* output_dir is relative to the launcher's directory */
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 100);
	DT_CHECK(chdir(cwd) == 0);
	if (r.exit_code != 0)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	char want[160];
	snprintf(want, sizeof(want), "(%d tasks, mode %s, restart Never)", ntasks, mode);
	DT_CHECK_CONTAINS(r.out, want);
	if (evaluator) {
		/* Async may end one step past train_steps (pushes in flight). */
		DT_CHECK(has_line(r.out, "1.evaluator | ", "eval (test split, 10000 examples) at global step 20"));
		DT_CHECK(has_line(r.out, "1.evaluator | ", "--> FINISHED (exit code 0)"));
	} else {
		DT_CHECK(has_line(r.out, "1.chief ", "eval (test split, 10000 examples) at global step 20"));
	}
	dt_run_release(&r);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.ntasks, ntasks);
	for (int i = 0; i < e.ntasks; i++)
		DT_CHECK_INT_EQ(e.tasks[i].state, DT_TS_FINISHED);
	if (evaluator)
		DT_CHECK_STR_EQ(e.tasks[e.ntasks - 1].name, "evaluator");
	dt_exp_release(&e);
}

DT_TEST_TIMEOUT(launch_cli, mirrored_mode_with_an_evaluator, 110)
{
	run_mode("mirrored", 1, 3);
}

DT_TEST_TIMEOUT(launch_cli, sync_mode, 110)
{
	run_mode("sync", 0, 3);
}

DT_TEST_TIMEOUT(launch_cli, async_mode_with_an_evaluator, 110)
{
	run_mode("async", 1, 4);
}

/* cpus → CPU affinity; mem → RLIMIT_AS, or a cgroup v2 of its own. */
DT_TEST_TIMEOUT(launch_cli, resources_reach_every_task, 30)
{
#ifdef __SANITIZE_ADDRESS__
	/* The launcher's child applies RLIMIT_AS between fork and exec, where an
	 * AddressSanitizer build still runs instrumented code that maps shadow
	 * memory: it fails with "Failed to mmap". The plain build runs this test. */
	DT_SKIP("RLIMIT_AS cannot apply to an AddressSanitizer build (it maps terabytes of shadow memory)");
#endif
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "res.yaml",
		       "name: res\ncommand: 'echo \"RES $DTRAIN_TASK AS=$(ulimit -v) CPUS=$(grep Cpus_allowed_list /proc/self/status "
		       "| cut -f2) CG=$(grep -c dtrain-1- /proc/self/cgroup)\"'\n"
		       "distributed: {worker: 2, ps: 1}\nresources: {cpus: 1, mem: 48M, ps: {mem: 96M}}\n");
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 20);
	if (r.exit_code != 0)
		fprintf(stderr, "launch output:\n%s\n%s\n", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	const char *tasks[] = { "ps.0", "chief", "worker.0" };
	for (int i = 0; i < 3; i++) {
		char needle[64];
		snprintf(needle, sizeof(needle), "RES %s AS=", tasks[i]);
		const char *line = strstr(r.out, needle);
		DT_CHECK(line != NULL);
		long as = atol(line + strlen(needle));
		const char *cg = strstr(line, " CG=");
		DT_CHECK(cg != NULL);
		/* RLIMIT_AS in KiB, unless the task sits in its own memory cgroup. */
		if (atoi(cg + 4) == 0)
			DT_CHECK_INT_EQ(as, i == 0 ? 96 * 1024 : 48 * 1024);
		const char *cpus = strstr(line, "CPUS=");
		DT_CHECK(cpus != NULL);
		/* One CPU: a single number, no range or list. */
		size_t len = strcspn(cpus + 5, " ");
		DT_CHECK(len >= 1 && strspn(cpus + 5, "0123456789") == len);
	}
	dt_run_release(&r);
}

/* The flaky task: worker.0's first start exits 1 (a marker file records
 * it), its restart trains. Every task runs through this shell line. */
DT_TEST_TIMEOUT(launch_cli, on_failure_restarts_a_failed_worker, 120)
{
	cli_private_home();
	char marker[600], spec[700], text[2048];
	dt_test_path(marker, sizeof(marker), "failed-once");
	snprintf(text, sizeof(text),
		 "name: flaky\n"
		 "command: >-\n"
		 "  if [ \"$DTRAIN_TASK\" = worker.0 ] && [ ! -e '%s' ]; then touch '%s'; echo failing once; exit 1; fi;\n"
		 "  if [ \"$TASK_TYPE\" = ps ]; then set -- --schedule=run_std_server; fi;\n"
		 "  exec \"$DTRAIN\" train --model=mlp --problem=fashion_mnist --train_steps=2500 --log_every=500 --noeval \"$@\"\n"
		 "distributed: {worker: 2, ps: 1}\n"
		 "restart_policy: OnFailure\nbackoff_limit: 2\n",
		 marker, marker);
	cli_write_spec(spec, sizeof(spec), "flaky.yaml", text);
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", spec, NULL }, 110);
	if (r.exit_code != 0)
		fprintf(stderr, "%s\n%s", r.out, r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "1.worker.0 | [");
	DT_CHECK_CONTAINS(r.out, "failing once");
	DT_CHECK_CONTAINS(r.out, "--> FAILED (exit code 1), restart 1 of 2 (OnFailure)");
	dt_run_release(&r);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_FINISHED);
	DT_CHECK_STR_EQ(e.tasks[2].name, "worker.0");
	DT_CHECK_INT_EQ(e.tasks[2].restarts, 1);
	DT_CHECK_INT_EQ(e.tasks[2].state, DT_TS_FINISHED);
	dt_exp_release(&e);
}

/* An elastic ring of three under the launcher (restart_policy OnFailure,
 * --min_workers=2): task `victim` of chief, worker.0, worker.1 SIGKILLed
 * while the ring trains; the launcher (in *launcher, which the caller
 * kills at the end) must exit 0. Returns its stdout (the caller frees). */
static char *launch_elastic_and_kill(struct task *launcher, int victim)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "elastic.yaml",
		       "name: elastic\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 8000\n"
		       "args: [--log_every=100, --noeval, --min_workers=2, --step_timeout=4]\n"
		       "distributed: {mode: mirrored, worker: 3, ps: 0}\n"
		       "restart_policy: OnFailure\nbackoff_limit: 2\n");
	task_start(launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	pid_t pids[8];
	int n = 0;
	DT_CHECK(wait_running("1", pids, &n, 1, 60));
	DT_CHECK_INT_EQ(n, 3);
	kill(pids[victim], SIGKILL); /* tasks: chief, worker.0, worker.1 */
	int code = task_wait(launcher, 130);
	char *out = task_read(launcher, 0);
	if (code != 0)
		fprintf(stderr, "%s\n", out);
	DT_CHECK_INT_EQ(code, 0);
	return out;
}

/* Elastic all-reduce under the launcher (DISTRIBUTED.md "Elastic
 * all-reduce"): a worker SIGKILLed while the ring trains is restarted by
 * restart_policy OnFailure while the chief and the other worker go on, it
 * rejoins, the experiment completes, and `dtrain status` shows the ring. */
DT_TEST_TIMEOUT(launch_cli, on_failure_restarts_an_elastic_worker_that_rejoins_the_ring, 150)
{
	struct task launcher;
	char *out = launch_elastic_and_kill(&launcher, 2);
	DT_CHECK_CONTAINS(out, "--> FAILED (killed by signal 9), restart 1 of 2 (OnFailure)");
	DT_CHECK(has_line(out, "1.chief ", "ring re-formed at step "));
	DT_CHECK(has_line(out, "1.chief ", "worker 1 at 127.0.0.1:"));
	DT_CHECK(has_line(out, "1.worker.1 ", "(this worker, worker 1, rejoined)"));
	DT_CHECK(has_line(out, "1.chief ", "the ring was re-formed 2 time(s); it ended with 3 of 3 workers"));
	free(out);
	struct dt_run r;
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "experiment 1 'elastic': FINISHED");
	DT_CHECK_CONTAINS(r.out, "ring: chief 0, worker 0, worker 1 (3 of 3); re-formed 2 time(s), last at step ");
	DT_CHECK_CONTAINS(r.out, "rejoined");
	dt_run_release(&r);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_FINISHED);
	DT_CHECK_STR_EQ(e.tasks[2].name, "worker.1");
	DT_CHECK_INT_EQ(e.tasks[2].restarts, 1);
	DT_CHECK_INT_EQ(e.tasks[1].restarts, 0);
	dt_exp_release(&e);
	task_kill(&launcher);
}

/* The chief of an elastic ring under the launcher: SIGKILLed while the
 * ring trains, it is restarted by OnFailure while the two workers go on
 * (worker 0 coordinates meanwhile, nothing is torn down), it rejoins
 * through worker 0 and coordinates again, and the experiment completes. */
DT_TEST_TIMEOUT(launch_cli, on_failure_restarts_an_elastic_chief_that_rejoins_the_ring, 150)
{
	struct task launcher;
	char *out = launch_elastic_and_kill(&launcher, 0);
	DT_CHECK(has_line(out, "1.chief ", "--> FAILED (killed by signal 9), restart 1 of 2 (OnFailure)"));
	DT_CHECK(has_line(out, "1.worker.0 ", "the chief (chief:0 at 127.0.0.1:"));
	DT_CHECK(has_line(out, "1.worker.0 ", "worker:0 coordinates from step "));
	DT_CHECK(has_line(out, "1.chief ", "(this worker, chief 0, rejoined)"));
	DT_CHECK(has_line(out, "1.worker.0 ", "chief:0 (at 127.0.0.1:"));
	DT_CHECK(has_line(out, "1.worker.0 ", "the ring was re-formed 2 time(s); it ended with 3 of 3 workers"));
	DT_CHECK(has_line(out, "1.chief ", "saved checkpoint for step 8000"));
	DT_CHECK(strstr(out, "stopping every task") == NULL);
	free(out);
	struct dt_run r;
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "experiment 1 'elastic': FINISHED");
	DT_CHECK_CONTAINS(r.out, "ring: chief 0, worker 0, worker 1 (3 of 3); re-formed 1 time(s), last at step ");
	dt_run_release(&r);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_FINISHED);
	DT_CHECK_STR_EQ(e.tasks[0].name, "chief");
	DT_CHECK_INT_EQ(e.tasks[0].restarts, 1);
	DT_CHECK_INT_EQ(e.tasks[1].restarts, 0);
	DT_CHECK_INT_EQ(e.tasks[2].restarts, 0);
	dt_exp_release(&e);
	task_kill(&launcher);
}

#define MLP_LONG \
	"model: mlp\nproblem: fashion_mnist\ntrain_steps: 1000000\nargs: [--log_every=20, --noeval]\n" \
	"distributed: {worker: 2, ps: 1}\ngrace_period: 3\n"

DT_TEST_TIMEOUT(launch_cli, chief_killed_stops_everything, 90)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "long.yaml", "name: victim\n" MLP_LONG);
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	pid_t pids[8];
	int n = 0;
	DT_CHECK(wait_running("1", pids, &n, 1, 60));
	DT_CHECK_INT_EQ(n, 3);
	kill(pids[1], SIGKILL); /* tasks: ps.0, chief, worker.0 */
	int code = task_wait(&launcher, 30);
	char *out = task_read(&launcher, 0);
	DT_CHECK_CONTAINS(out, "1.chief    | [");
	DT_CHECK_CONTAINS(out, "--> FAILED (killed by signal 9)");
	DT_CHECK_CONTAINS(out, "the chief failed: stopping every task");
	free(out);
	DT_CHECK_INT_EQ(code, 137);
	DT_CHECK_INT_EQ(wait_gone(pids, n, 5), 0);
	struct dt_exp e;
	DT_CHECK(load("1", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_FAILED);
	DT_CHECK_INT_EQ(e.tasks[0].state, DT_TS_KILLED);
	DT_CHECK_INT_EQ(e.tasks[2].state, DT_TS_KILLED);
	dt_exp_release(&e);
	task_kill(&launcher);
}

/* Tasks that ignore SIGTERM (and a grandchild each): SIGINT to the
 * launcher must still leave no process after the grace period. */
DT_TEST_TIMEOUT(launch_cli, sigint_leaves_no_process_after_the_grace_period, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "stubborn.yaml",
		       "name: stubborn\ncommand: \"trap '' TERM; sleep 300 & while :; do sleep 0.2; done\"\n"
		       "distributed: {worker: 3, ps: 1}\ngrace_period: 1.5\n");
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	pid_t pids[8];
	int n = 0;
	DT_CHECK(wait_running("1", pids, &n, 0, 30));
	DT_CHECK_INT_EQ(n, 4);
	usleep(300000); /* the shells start their sleeps */
	double t0 = cli_now_s();
	kill(launcher.pid, SIGINT);
	int code = task_wait(&launcher, 15);
	double took = cli_now_s() - t0;
	DT_CHECK_INT_EQ(code, 130);
	DT_CHECK(took < 1.5 + 3);
	DT_CHECK_INT_EQ(wait_gone(pids, n, 1), 0);
	/* No process anywhere still carries the experiment's environment. */
	DT_CHECK_INT_EQ(experiment_processes("1", 1), 0);
	char *out = task_read(&launcher, 0);
	DT_CHECK_CONTAINS(out, "interrupted (SIGINT): stopping every task");
	DT_CHECK_CONTAINS(out, "--> KILLED (killed by signal 9)");
	free(out);
	task_kill(&launcher);
}

DT_TEST_TIMEOUT(launch_cli, status_logs_monitor_and_kill_a_running_experiment, 90)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "long.yaml", "name: watched\n" MLP_LONG);
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	pid_t pids[8];
	int n = 0;
	DT_CHECK(wait_running("1", pids, &n, 1, 60));
	struct dt_run r;
	cli_run(&r, (const char *[]){ "status", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "watched");
	DT_CHECK_CONTAINS(r.out, "RUNNING");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "experiment 1 'watched': RUNNING");
	char want[64];
	snprintf(want, sizeof(want), "1.chief            RUNNING   %8d", (int)pids[1]);
	DT_CHECK_CONTAINS(r.out, want);
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "logs", "1", "chief", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "--> RUNNING");
	DT_CHECK_CONTAINS(r.out, "(global ");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "logs", "1", "nosuch", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "experiment 1 has no task 'nosuch'; its tasks: ps.0, chief, worker.0");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "monitor", "1", "--once", "--interval=0.5", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "CPU %");
	DT_CHECK_CONTAINS(r.out, "STEPS/S");
	DT_CHECK_CONTAINS(r.out, "1.ps.0             RUNNING");
	/* The chief trains: a measured CPU %, memory in use, a step rate. */
	const char *row = strstr(r.out, "1.chief ");
	DT_CHECK(row != NULL);
	char state[16], cpu[16], memp[16], used[16], slash[4], total[16], step[32], done[16], sps[16];
	DT_CHECK_INT_EQ(sscanf(row, "%*s %15s %15s %15s %15s %3s %15s %31s %15s %15s", state, cpu, memp, used, slash,
			       total, step, done, sps), 9);
	DT_CHECK_STR_EQ(state, "RUNNING");
	DT_CHECK(atof(cpu) > 0);
	DT_CHECK(atof(used) > 0);
	DT_CHECK(strcmp(sps, "N/A") != 0);
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "kill", "1", NULL }, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "every process has ended");
	dt_run_release(&r);
	DT_CHECK_INT_EQ(wait_gone(pids, n, 1), 0);
	DT_CHECK_INT_EQ(task_wait(&launcher, 10), 143);
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_CONTAINS(r.out, "KILLED");
	dt_run_release(&r);
	cli_run(&r, (const char *[]){ "kill", "1", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "already ended");
	dt_run_release(&r);
	/* -f on an ended experiment prints everything and returns. */
	cli_run(&r, (const char *[]){ "logs", "1", "-f", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK(has_line(r.out, "1.worker.0 | ", "--> KILLED"));
	DT_CHECK(has_line(r.out, "1.chief | ", "(global "));
	dt_run_release(&r);
	task_kill(&launcher);
}

/* SIGKILL to the launcher: PR_SET_PDEATHSIG takes its tasks, and status
 * says LOST; then kill -f on another experiment. */
DT_TEST_TIMEOUT(launch_cli, launcher_sigkill_and_kill_force_leave_no_process, 90)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "sleepy.yaml",
		       "name: sleepy\ncommand: 'sleep 300 & sleep 301'\ndistributed: {worker: 2, ps: 1}\n");
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	pid_t pids[8];
	int n = 0;
	DT_CHECK(wait_running("1", pids, &n, 0, 30));
	kill(launcher.pid, SIGKILL);
	DT_CHECK_INT_EQ(task_wait(&launcher, 10), 137);
	DT_CHECK_INT_EQ(wait_gone(pids, n, 5), 0);
	DT_CHECK_INT_EQ(experiment_processes("1", 5), 0); /* the shells' sleeps too */
	struct dt_run r;
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_CONTAINS(r.out, "experiment 1 'sleepy': LOST");
	dt_run_release(&r);

	task_start(&launcher, "launch2", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	DT_CHECK(wait_running("2", pids, &n, 0, 30));
	cli_run(&r, (const char *[]){ "kill", "2", "-f", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "sent SIGKILL to every task");
	dt_run_release(&r);
	DT_CHECK_INT_EQ(task_wait(&launcher, 10), 137);
	DT_CHECK_INT_EQ(wait_gone(pids, n, 5), 0);
	DT_CHECK_INT_EQ(experiment_processes("2", 5), 0);
	struct dt_exp e;
	DT_CHECK(load("2", &e));
	DT_CHECK_INT_EQ(e.state, DT_TS_KILLED);
	DT_CHECK_INT_EQ(e.exit_code, 137);
	dt_exp_release(&e);
	task_kill(&launcher);
}

/* ---- the example spec (slow: a cnn trained for a few minutes) ---- */

DT_TEST_TIMEOUT(launch_slow, example_fashion_mnist_evaluator_reaches_89_percent, 900)
{
	cli_private_home();
	struct dt_run r;
	cli_run(&r, (const char *[]){ "launch", "examples/fashion_mnist.yaml", NULL }, 880);
	if (r.exit_code != 0)
		fprintf(stderr, "%.4000s\n%s", r.out + (strlen(r.out) > 4000 ? strlen(r.out) - 4000 : 0), r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	fprintf(stderr, "example spec took %.0f s\n", r.seconds);
	/* The evaluator's last line with an accuracy. */
	const char *last = NULL;
	for (const char *p = r.out; (p = strstr(p, ".evaluator | ")) != NULL; p++) {
		const char *eol = strchr(p, '\n');
		const char *acc = strstr(p, "accuracy = ");
		if (acc && (!eol || acc < eol))
			last = acc;
	}
	DT_CHECK(last != NULL);
	double accuracy = atof(last + strlen("accuracy = "));
	fprintf(stderr, "evaluator accuracy %.4f\n", accuracy);
	DT_CHECK(accuracy >= 0.89);
	dt_run_release(&r);
}

/* The launcher makes one secret per experiment (0600, in its state
 * directory) and gives it to every task: a stranger that knows the ps's
 * address from TF_CONFIG but not the secret is refused while the cluster
 * trains, and the run still finishes. */
DT_TEST_TIMEOUT(launch_cli, tasks_authenticate_with_the_experiments_secret, 150)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "guarded.yaml",
		       "name: guarded\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 400\n"
		       "args: [--log_every=20, --noeval]\ndistributed: {worker: 2, ps: 1}\n");
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	pid_t pids[8];
	int n = 0;
	DT_CHECK(wait_running("1", pids, &n, 1, 60));
	char home[600], secret[700];
	dt_exp_home(home, sizeof(home));
	snprintf(secret, sizeof(secret), "%s/experiments/1/cluster_secret", home);
	struct stat st;
	DT_CHECK(stat(secret, &st) == 0);
	DT_CHECK_INT_EQ(st.st_mode & 0777, 0600);
	/* The ps (the first task) has the secret's path and its own address. */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pids[0]);
	FILE *f = fopen(path, "rb");
	DT_CHECK(f != NULL);
	static char env[1 << 16];
	size_t len = fread(env, 1, sizeof(env) - 1, f);
	fclose(f);
	env[len] = '\0';
	int port = 0, has_secret = 0;
	for (size_t k = 0; k < len; k += strlen(env + k) + 1) {
		char want[800];
		snprintf(want, sizeof(want), "DTRAIN_CLUSTER_SECRET_FILE=%s", secret);
		has_secret |= strcmp(env + k, want) == 0;
		const char *ps = strncmp(env + k, "TF_CONFIG=", 10) == 0 ? strstr(env + k, "\"ps\"") : NULL;
		const char *addr = ps ? strstr(ps, "127.0.0.1:") : NULL;
		if (addr)
			port = atoi(addr + 10);
	}
	DT_CHECK(has_secret);
	DT_CHECK(port > 0);
	/* A stranger speaking the documented HELLO without the secret. */
	struct dt_err err = DT_ERR_INIT;
	int fd;
	DT_CHECK_OK(dt_sock_connect("127.0.0.1", port, "ps:0", dt_deadline_in(10), NULL, &fd, &err), &err);
	struct dt_hello h;
	dt_hello_init(&h, "chief", 0, 0);
	size_t hl;
	uint8_t *hb = dt_hello_encode_alloc(&h, &hl);
	DT_CHECK_OK(dt_frame_send_fd(fd, DT_MSG_HELLO, 0, 0, hb, hl, dt_deadline_in(10), "ps:0", &err), &err);
	free(hb);
	dt_hello_release(&h);
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_SMALL);
	DT_CHECK_OK(dt_frame_recv_fd(fd, &d, dt_deadline_in(10), "ps:0", &err), &err);
	DT_CHECK_INT_EQ(d.header.type, DT_MSG_REFUSE);
	struct dt_reason_msg m;
	DT_CHECK_OK(dt_reason_decode(&m, dt_frame_decoder_payload(&d), (size_t)d.header.length, &err), &err);
	DT_CHECK_INT_EQ(m.code, DT_REFUSE_AUTH);
	dt_frame_decoder_release(&d);
	close(fd);
	DT_CHECK_INT_EQ(task_wait(&launcher, 120), 0);
	char *out = task_read(&launcher, 0);
	DT_CHECK(has_line(out, "1.ps.0", "refused"));
	DT_CHECK_CONTAINS(out, "--> FINISHED");
	free(out);
}
