/* CLI tests of what `dtrain launch` shows while it runs: `monitor` in a
 * real tmux pane has a non-zero steps/s and an ETA on every screen, and
 * `status` the global step, % done, steps/s and ETA (both from the tasks'
 * progress files, base/progress.h); "--> RUNNING" comes before a task's
 * first line; and the exit codes docs/EXIT_CODES.md promises (a missing
 * spec 2, a port already in use 3 naming the port). */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "cluster_procs.h"
#include "dt_test.h"
#include "launch/state.h"

/* Waits until experiment `id` has every task RUNNING and the chief's
 * progress file shows a rate; 1 when it did within timeout_s. */
static int wait_rate(const char *id, double timeout_s)
{
	char home[600];
	dt_exp_home(home, sizeof(home));
	double end = cli_now_s() + timeout_s;
	while (cli_now_s() < end) {
		struct dt_exp e;
		if (dt_exp_load(home, id, &e, NULL) == DT_OK) {
			struct dt_exp_progress p;
			dt_exp_progress(&e, dt_wall_seconds(), &p, NULL, 0);
			int ok = p.have && p.rate > 0;
			dt_exp_release(&e);
			if (ok)
				return 1;
		} else {
			dt_exp_release(&e);
		}
		cli_sleep_ms(100);
	}
	return 0;
}

/* The chief's row of one monitor screen: its STEPS/S and ETA columns. */
static int chief_row(const char *screen, double *rate, char *eta, size_t cap)
{
	const char *row = strstr(screen, "1.chief ");
	if (!row)
		return 0;
	char state[16], cpu[16], memp[16], used[16], slash[4], total[16], step[32], done[16], sps[16], e[32];
	if (sscanf(row, "%*s %15s %15s %15s %15s %3s %15s %31s %15s %15s %31s", state, cpu, memp, used, slash, total,
		   step, done, sps, e) != 10)
		return 0;
	*rate = atof(sps);
	snprintf(eta, cap, "%s", e);
	return 1;
}

DT_TEST_TIMEOUT(launch_progress, monitor_in_tmux_shows_rate_and_eta_on_every_screen, 120)
{
	cli_private_home();
	if (system("command -v tmux >/dev/null 2>&1") != 0)
		DT_SKIP("tmux is not installed (Debian: tmux)");
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "long.yaml",
		       "name: watched\nmodel: mlp\nproblem: fashion_mnist\ntrain_steps: 200000\n"
		       "args: [--log_every=1000, --noeval]\ndistributed: {worker: 2, ps: 1}\ngrace_period: 3\n");
	struct task launcher;
	task_start(&launcher, "launch", (const char *[]){ "dtrain", "launch", spec, NULL }, NULL);
	DT_CHECK(wait_rate("1", 60));

	/* status: the experiment's global step, % done, steps/s and ETA. */
	struct dt_run r;
	cli_run(&r, (const char *[]){ "status", "1", NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "global step: ");
	DT_CHECK_CONTAINS(r.out, "/200000 (");
	DT_CHECK_CONTAINS(r.out, " steps/s, ETA ");
	DT_CHECK_CONTAINS(r.out, "newest checkpoint: ");
	DT_CHECK_CONTAINS(r.out, "STEPS/S");
	dt_run_release(&r);

	/* monitor in a tmux pane (its own server socket in the temp dir), a
	 * screen every 0.5 s; five captures 0.7 s apart, each a whole screen. */
	char sock[600], cmd[1400];
	dt_test_path(sock, sizeof(sock), "tmux.sock");
	snprintf(cmd, sizeof(cmd), "tmux -S '%s' new-session -d -x 200 -y 30 '%s monitor 1 --interval=0.5'", sock,
		 dt_test_dtrain_bin());
	DT_CHECK_INT_EQ(system(cmd), 0);
	int screens = 0;
	char failure[3000] = "";
	char cap[700];
	dt_test_path(cap, sizeof(cap), "pane.txt");
	/* The first screen, drawn once monitor has started (bounded: a loaded
	 * host may take seconds to start it); then every screen must show it. */
	for (int waited = 0; waited < 50; waited++) {
		snprintf(cmd, sizeof(cmd), "tmux -S '%s' capture-pane -p > '%s'", sock, cap);
		char *first = system(cmd) == 0 ? cli_read_file(cap) : NULL;
		int drawn = first && strstr(first, "STEPS/S");
		free(first);
		if (drawn)
			break;
		cli_sleep_ms(200);
	}
	for (int i = 0; i < 5 && !failure[0]; i++) {
		cli_sleep_ms(700);
		snprintf(cmd, sizeof(cmd), "tmux -S '%s' capture-pane -p > '%s'", sock, cap);
		if (system(cmd) != 0) {
			snprintf(failure, sizeof(failure), "tmux capture-pane failed");
			break;
		}
		char *screen = cli_read_file(cap);
		double rate = 0;
		char eta[32] = "";
		if (!screen || !chief_row(screen, &rate, eta, sizeof(eta)) || !(rate > 0) || !strcmp(eta, "-") ||
		    !strstr(screen, " steps/s  ETA "))
			snprintf(failure, sizeof(failure), "screen %d lacks a chief row with a rate and an ETA:\n%.2500s", i,
				 screen ? screen : "(none)");
		else
			screens++;
		free(screen);
	}
	snprintf(cmd, sizeof(cmd), "tmux -S '%s' kill-server", sock);
	DT_CHECK_INT_EQ(system(cmd), 0);
	cli_run(&r, (const char *[]){ "kill", "1", NULL }, 30);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	DT_CHECK_INT_EQ(task_wait(&launcher, 20), 143);
	task_kill(&launcher);
	if (failure[0])
		dt_test_fail(__FILE__, __LINE__, "%s", failure);
	DT_CHECK_INT_EQ(screens, 5);
}

/* Every task's "--> RUNNING" precedes its own first line (four tasks that
 * print at once, three launches: the order must not depend on timing). */
DT_TEST_TIMEOUT(launch_progress, running_is_shown_before_the_tasks_first_line, 60)
{
	cli_private_home();
	char spec[700];
	cli_write_spec(spec, sizeof(spec), "echo.yaml",
		       "name: echo\ncommand: 'echo first-line-of-$DTRAIN_TASK'\ndistributed: {worker: 3, ps: 1}\n");
	for (int round = 0; round < 3; round++) {
		struct dt_run r;
		cli_run(&r, (const char *[]){ "launch", spec, NULL }, 20);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		const char *names[] = { "ps.0", "chief", "worker.0", "worker.1" };
		for (int i = 0; i < 4; i++) {
			char running[64], first[64];
			snprintf(running, sizeof(running), ".%s", names[i]);
			snprintf(first, sizeof(first), "first-line-of-%s\n", names[i]);
			/* The RUNNING line of this task: "<id>.<task> ... --> RUNNING". */
			const char *run_at = NULL;
			for (const char *p = r.out; (p = strstr(p, "--> RUNNING")) != NULL; p++) {
				const char *bol = p;
				while (bol > r.out && bol[-1] != '\n')
					bol--;
				const char *dot = strchr(bol, '.');
				if (dot && !strncmp(dot, running, strlen(running)) && dot[strlen(running)] == ' ') {
					run_at = p;
					break;
				}
			}
			const char *first_at = strstr(r.out, first);
			DT_CHECK(run_at != NULL && first_at != NULL);
			if (!(run_at < first_at))
				dt_test_fail(__FILE__, __LINE__, "'%s' printed before its --> RUNNING:\n%s", names[i], r.out);
		}
		dt_run_release(&r);
	}
}

DT_TEST_TIMEOUT(launch_progress, missing_spec_exits_2_and_a_port_in_use_exits_3, 60)
{
	cli_private_home();
	struct dt_run r;
	char missing[600];
	dt_test_path(missing, sizeof(missing), "no-such-spec.yaml");
	cli_run(&r, (const char *[]){ "launch", missing, NULL }, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "cannot read the experiment spec");
	DT_CHECK_CONTAINS(r.err, "no-such-spec.yaml");
	dt_run_release(&r);

	/* A ps whose port another process holds: exit 3 (retryable), naming it. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	DT_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 1) == 0);
	socklen_t len = sizeof(a);
	DT_CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	int taken = ntohs(a.sin_port), ports[1];
	cli_free_ports(ports, 1);
	char tf[400];
	snprintf(tf, sizeof(tf), "TF_CONFIG={\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"ps\": [\"127.0.0.1:%d\"]}, "
				 "\"task\": {\"type\": \"ps\", \"index\": 0}}", ports[0], taken);
	dt_test_run(&r, (const char *[]){ dt_test_dtrain_bin(), "train", "--model=mlp", "--problem=fashion_mnist",
					  "--schedule=run_std_server", NULL },
		    (const char *[]){ tf, NULL }, 30);
	close(fd);
	DT_CHECK_INT_EQ(r.exit_code, 3);
	char want[64];
	snprintf(want, sizeof(want), "port %d is taken", taken);
	DT_CHECK_CONTAINS(r.err, want);
	dt_run_release(&r);
}
