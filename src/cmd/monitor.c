/*
 * monitor.c — `dtrain monitor ID`: live CPU and memory use of an
 * experiment's tasks, from /proc, and their training speed from their logs
 * (RiseML's `riseml monitor`, seed 001).
 *
 * CPU% is the task's utime + stime over the refresh interval, 100 per core
 * (so 262 means 2.6 cores); MEM% its resident set over the machine's
 * MemTotal; MEM-USED / TOTAL in GiB; STEP, DONE (% of train_steps), STEPS/S
 * and ETA from the task's progress file (base/progress.h): the global step
 * the task itself counts and its steps/s over a sliding window of that
 * counter (10 s), written by the task once a second, so every screen shows
 * the current rate however often it refreshes (log lines come every
 * --log_every steps, seconds apart). Above the table: the experiment's
 * global step, % done and ETA (the chief's), the newest checkpoint and
 * the newest evaluation. The table is redrawn in place (ANSI: cursor home,
 * clear) every --interval seconds until the experiment ends; --once prints
 * one table, measured over one interval, and exits.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "cmd/cmd.h"
#include "launch/state.h"

struct sample {
	unsigned long long ticks; /* utime + stime */
	long long rss_pages;
	int alive;
};

static void sample_task(const struct dt_exp *e, const struct dt_exp_task *t, struct sample *s)
{
	memset(s, 0, sizeof(*s));
	(void)e;
	if (!dt_proc_same(t->pid, t->pid_start))
		return;
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)t->pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (!p)
		return;
	/* Fields after ")": 3 state ... 14 utime, 15 stime, ... 24 rss. */
	unsigned long long utime = 0, stime = 0;
	long long rss = 0;
	int field = 2;
	for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " ")) {
		field++;
		if (field == 14)
			utime = strtoull(tok, NULL, 10);
		else if (field == 15)
			stime = strtoull(tok, NULL, 10);
		else if (field == 24) {
			rss = strtoll(tok, NULL, 10);
			break;
		}
	}
	s->ticks = utime + stime;
	s->rss_pages = rss;
	s->alive = 1;
}

static double mem_total_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	double kb = 0;
	if (f) {
		char line[256];
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "MemTotal: %lf kB", &kb) == 1)
				break;
		fclose(f);
	}
	return kb * 1024;
}

static volatile sig_atomic_t stop;
static void on_int(int sig)
{
	(void)sig;
	stop = 1;
}

int dt_cmd_monitor(int argc, char **argv)
{
	int once = 0;
	double interval = 1.0;
	struct dt_option opts[] = {
		DT_OPT_BOOL("once", &once, "print one table (measured over one interval) and exit"),
		DT_OPT_DOUBLE("interval", &interval, "SECONDS", "refresh period"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, "dtrain monitor ID [--once] [--interval=SECONDS]", &args, &code))
		return code;
	struct dt_err err = DT_ERR_INIT;
	if (args.count != 1 || !(interval >= 0.05 && interval <= 3600)) {
		dt_args_release(&args);
		dt_err_set(&err, DT_USAGE, "monitor takes one experiment id, and --interval between 0.05 and 3600 seconds");
		return dt_cmd_report(&err);
	}
	char home[512], id[64];
	dt_exp_home(home, sizeof(home));
	snprintf(id, sizeof(id), "%s", args.items[0]);
	dt_args_release(&args);
	struct sigaction sa = { .sa_handler = on_int };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	double total = mem_total_bytes();
	struct sample prev[DT_LAUNCH_STATE_MAX_LOGS], cur[DT_LAUNCH_STATE_MAX_LOGS];
	struct dt_exp e;
	if (dt_exp_load(home, id, &e, &err)) {
		dt_exp_release(&e);
		return dt_cmd_report(&err);
	}
	if (e.sweep) { /* its "tasks" are trials' launchers, not tasks */
		dt_err_set(&err, DT_USAGE, "%s is a sweep: monitor one of its trials, e.g. 'dtrain monitor %s.1' "
					   "('dtrain status %s' lists them)", e.id, e.id, e.id);
		dt_exp_release(&e);
		return dt_cmd_report(&err);
	}
	int n = e.ntasks < DT_LAUNCH_STATE_MAX_LOGS ? e.ntasks : DT_LAUNCH_STATE_MAX_LOGS;
	for (int i = 0; i < n; i++)
		sample_task(&e, &e.tasks[i], &prev[i]);
	int64_t t0 = dt_now_ns();
	while (!stop) {
		dt_sleep(interval);
		dt_exp_release(&e);
		if (dt_exp_load(home, id, &e, &err)) {
			dt_exp_release(&e);
			return dt_cmd_report(&err);
		}
		dt_exp_check_lost(&e);
		n = e.ntasks < DT_LAUNCH_STATE_MAX_LOGS ? e.ntasks : DT_LAUNCH_STATE_MAX_LOGS;
		int64_t t1 = dt_now_ns();
		double dt = (double)(t1 - t0) / 1e9;
		t0 = t1;
		if (!once)
			printf("\033[H\033[J");
		double now = dt_wall_seconds();
		struct dt_exp_progress ep;
		char note[300], ckpt[512], eta[32] = "-";
		dt_exp_progress(&e, now, &ep, note, sizeof(note));
		dt_exp_newest_checkpoint(&e, ckpt, sizeof(ckpt));
		printf("experiment %s '%s': %s", e.id, e.name, dt_task_state_name(e.state));
		if (ep.p.step >= 0) {
			printf("  global step %lld", (long long)ep.p.step);
			if (ep.p.total > 0)
				printf("/%lld (%.0f%%)", (long long)ep.p.total, ep.pct);
		}
		if (ep.have && !dt_task_state_final(e.state)) {
			if (ep.eta_s >= 0)
				dt_progress_fmt_duration(eta, sizeof(eta), ep.eta_s);
			printf("  %.1f steps/s  ETA %s", ep.rate, eta);
		}
		printf("\ncheckpoint: %s  evaluation: %s\n", ckpt[0] ? ckpt : "(none yet)", note[0] ? note : "(none yet)");
		char slow[1024];
		dt_exp_stragglers_line(&e, now, slow, sizeof(slow)); /* the slowest trainer named */
		if (slow[0])
			printf("%s\n", slow);
		printf("%-18s %-9s %7s %6s %18s %11s %5s %8s %7s\n", "ID", "STATE", "CPU %", "MEM %", "MEM-USED / TOTAL",
		       "STEP", "DONE", "STEPS/S", "ETA");
		for (int i = 0; i < n; i++) {
			const struct dt_exp_task *t = &e.tasks[i];
			sample_task(&e, t, &cur[i]);
			char label[64], cpu[16] = "N/A", memp[16] = "N/A", used[32] = "N/A", step[48] = "-", done[16] = "-",
			     sps[16] = "N/A", teta[32] = "-";
			snprintf(label, sizeof(label), "%s.%s", e.id, t->name);
			if (cur[i].alive && prev[i].alive && cur[i].ticks >= prev[i].ticks && dt > 0)
				snprintf(cpu, sizeof(cpu), "%.0f", 100.0 * (double)(cur[i].ticks - prev[i].ticks) / (double)hz / dt);
			if (cur[i].alive && total > 0) {
				double bytes = (double)cur[i].rss_pages * (double)page;
				snprintf(memp, sizeof(memp), "%.1f", 100.0 * bytes / total);
				snprintf(used, sizeof(used), "%.2f / %.1f", bytes / (1 << 30), total / (1 << 30));
			}
			struct dt_exp_progress tp;
			dt_exp_task_progress(&e, t, now, &tp);
			if (tp.p.step >= 0)
				snprintf(step, sizeof(step), "%lld", (long long)tp.p.step);
			if (tp.pct >= 0)
				snprintf(done, sizeof(done), "%.0f%%", tp.pct);
			if (tp.have && t->state == DT_TS_RUNNING)
				snprintf(sps, sizeof(sps), "%.1f", tp.rate);
			if (tp.eta_s >= 0 && t->state == DT_TS_RUNNING)
				dt_progress_fmt_duration(teta, sizeof(teta), tp.eta_s);
			printf("%-18s %-9s %7s %6s %18s %11s %5s %8s %7s\n", label, dt_task_state_name(t->state), cpu, memp,
			       used, step, done, sps, teta);
			prev[i] = cur[i];
		}
		fflush(stdout);
		if (once || dt_task_state_final(e.state))
			break;
	}
	dt_exp_release(&e);
	return 0;
}
