/*
 * status.c — `dtrain status`, `dtrain logs` and `dtrain kill`: reading and
 * acting on the experiments `dtrain launch` records under $DTRAIN_HOME
 * (launch/state.h). `dtrain monitor` is in monitor.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "cmd/cmd.h"
#include "launch/state.h"

/* argv with git's one-letter flags spelled long (the option tables know
 * long names only); the strings are argv's own or string constants. */
/* dt_cmd_parse, with the one short flag these commands take (`shortf`, e.g.
 * "-a") read as its long spelling (`longf`); argv itself is not rewritten. */
static int parse_with_short(struct dt_option *opts, int argc, char **argv, const char *shortf,
			    const char *longf, const char *usage, struct dt_args *args, int *code)
{
	char **av = dt_xcalloc((size_t)argc + 1, sizeof(char *));
	for (int i = 0; i < argc; i++)
		av[i] = strcmp(argv[i], shortf) == 0 ? (char *)(uintptr_t)longf : argv[i];
	int ok = dt_cmd_parse(opts, argc, av, usage, args, code);
	free(av);
	return ok;
}

static void fmt_uptime(char *buf, size_t cap, double secs)
{
	if (secs < 0)
		snprintf(buf, cap, "-");
	else if (secs < 3600)
		snprintf(buf, cap, "%dm%02ds", (int)secs / 60, (int)secs % 60);
	else
		snprintf(buf, cap, "%dh%02dm", (int)secs / 3600, (int)secs % 3600 / 60);
}

/* "1200/2400", "1200" without a total, "-" without a step. */
static void fmt_step(char *buf, size_t cap, const struct dt_exp_progress *p)
{
	if (p->p.step < 0)
		snprintf(buf, cap, "-");
	else if (p->p.total > 0)
		snprintf(buf, cap, "%lld/%lld", (long long)p->p.step, (long long)p->p.total);
	else
		snprintf(buf, cap, "%lld", (long long)p->p.step);
}

static void print_tasks(const struct dt_exp *e)
{
	printf("%-18s %-9s %8s %5s %8s %11s %5s %8s %7s %s\n", "TASK", "STATE", "PID", "EXIT", "UPTIME", "STEP", "DONE",
	       "STEPS/S", "ETA", "RESTARTS");
	double now = dt_wall_seconds();
	for (int i = 0; i < e->ntasks; i++) {
		const struct dt_exp_task *t = &e->tasks[i];
		char label[64], pid[16] = "-", code[16] = "-", up[32] = "-", step[48], done[16] = "-", rate[16] = "-",
								      eta[32] = "-";
		snprintf(label, sizeof(label), "%s.%s", e->id, t->name);
		if (t->pid > 0 && !dt_task_state_final(t->state))
			snprintf(pid, sizeof(pid), "%d", (int)t->pid);
		if (t->exit_code >= 0)
			snprintf(code, sizeof(code), "%d", t->exit_code);
		if (t->started > 0 && (t->state == DT_TS_RUNNING || t->state == DT_TS_STARTING))
			fmt_uptime(up, sizeof(up), now - t->started);
		struct dt_exp_progress p;
		dt_exp_task_progress(e, t, now, &p);
		fmt_step(step, sizeof(step), &p);
		if (p.pct >= 0)
			snprintf(done, sizeof(done), "%.0f%%", p.pct);
		if (p.have && t->state == DT_TS_RUNNING)
			snprintf(rate, sizeof(rate), "%.1f", p.rate);
		if (p.eta_s >= 0 && t->state == DT_TS_RUNNING)
			dt_progress_fmt_duration(eta, sizeof(eta), p.eta_s);
		printf("%-18s %-9s %8s %5s %8s %11s %5s %8s %7s %d\n", label, dt_task_state_name(t->state), pid, code, up,
		       step, done, rate, eta, t->restarts);
	}
}

/* A sweep's trials (launch/sweep.h): each with its values, state, exit
 * code, the trial's own progress (its chief's global step) and, with an
 * objective, its metric; ranked by the objective (trials without a value
 * after, in order), the best marked '*'. */
struct trial_row {
	int index;
	int have;
	double value;
	char up[32], step[48], done[16];
};

static int by_objective(const void *a, const void *b, void *maximize)
{
	const struct trial_row *x = a, *y = b;
	int goal_maximize = *(const int *)maximize;
	if (x->have != y->have)
		return x->have ? -1 : 1;
	if (x->have && x->value != y->value)
		return (x->value > y->value) == goal_maximize ? -1 : 1;
	return x->index - y->index;
}

static void print_trials(const char *home, const struct dt_exp *e)
{
	int counts[DT_TS_LOST + 1] = { 0 }, early = 0;
	for (int i = 0; i < e->ntasks; i++) {
		counts[e->tasks[i].state]++;
		early += e->tasks[i].early_stopped && e->tasks[i].state == DT_TS_KILLED;
	}
	printf("trials: %d: %d finished, %d running, %d failed, %d killed, %d waiting", e->ntasks,
	       counts[DT_TS_FINISHED], counts[DT_TS_RUNNING] + counts[DT_TS_STARTING], counts[DT_TS_FAILED],
	       counts[DT_TS_KILLED] - early, counts[DT_TS_CREATED]);
	if (early)
		printf(", %d stopped early", early);
	printf("\n");
	struct trial_row *rows = dt_xcalloc((size_t)(e->ntasks ? e->ntasks : 1), sizeof(*rows));
	double now = dt_wall_seconds();
	for (int i = 0; i < e->ntasks; i++) {
		const struct dt_exp_task *t = &e->tasks[i];
		struct trial_row *r = &rows[i];
		r->index = i;
		snprintf(r->up, sizeof(r->up), "-");
		snprintf(r->step, sizeof(r->step), "-");
		snprintf(r->done, sizeof(r->done), "-");
		struct dt_exp trial;
		memset(&trial, 0, sizeof(trial));
		if (t->state != DT_TS_CREATED && dt_exp_load(home, t->name, &trial, NULL) == DT_OK) {
			dt_exp_check_lost(&trial);
			struct dt_exp_progress p;
			dt_exp_progress(&trial, now, &p, NULL, 0);
			fmt_step(r->step, sizeof(r->step), &p);
			if (p.pct >= 0)
				snprintf(r->done, sizeof(r->done), "%.0f%%", p.pct);
			if (trial.started > 0)
				fmt_uptime(r->up, sizeof(r->up), (trial.ended > 0 ? trial.ended : now) - trial.started);
			if (e->metric[0])
				r->have = dt_exp_metric(&trial, e->metric, &r->value);
		}
		dt_exp_release(&trial);
	}
	if (e->metric[0]) {
		int maximize = e->maximize;
		qsort_r(rows, (size_t)e->ntasks, sizeof(*rows), by_objective, &maximize);
		printf("objective: %s %s", e->maximize ? "maximize" : "minimize", e->metric);
		if (e->has_target)
			printf(" (target %g)", e->target);
		if (e->ntasks && rows[0].have)
			printf("; best: %s, %s = %g", e->tasks[rows[0].index].name, e->metric, rows[0].value);
		printf("\n");
	}
	if (e->metric[0])
		printf("\n%-10s %-9s %5s %8s %11s %5s %12s  %s\n", "TRIAL", "STATE", "EXIT", "UPTIME", "STEP", "DONE",
		       e->metric, "PARAMETERS");
	else
		printf("\n%-10s %-9s %5s %8s %11s %5s  %s\n", "TRIAL", "STATE", "EXIT", "UPTIME", "STEP", "DONE",
		       "PARAMETERS");
	for (int i = 0; i < e->ntasks; i++) {
		const struct trial_row *r = &rows[i];
		const struct dt_exp_task *t = &e->tasks[r->index];
		char code[16] = "-", value[32] = "-", name[40];
		if (t->exit_code >= 0)
			snprintf(code, sizeof(code), "%d", t->exit_code);
		if (r->have)
			snprintf(value, sizeof(value), "%.6g", r->value);
		snprintf(name, sizeof(name), "%s%s", t->name, i == 0 && r->have ? " *" : "");
		/* KILLED by the sweep's early stopping */
		const char *state = t->early_stopped ? "STOPPED" : dt_task_state_name(t->state);
		if (e->metric[0])
			printf("%-10s %-9s %5s %8s %11s %5s %12s  %s\n", name, state, code, r->up,
			       r->step, r->done, value, t->params);
		else
			printf("%-10s %-9s %5s %8s %11s %5s  %s\n", name, state, code, r->up, r->step,
			       r->done, t->params);
	}
	free(rows);
}

/* The experiment's progress, newest checkpoint and evaluation. */
static void print_progress(const struct dt_exp *e)
{
	struct dt_exp_progress p;
	char note[300], ckpt[512], step[48], eta[32] = "-";
	double now = dt_wall_seconds();
	dt_exp_progress(e, now, &p, note, sizeof(note));
	dt_exp_newest_checkpoint(e, ckpt, sizeof(ckpt));
	fmt_step(step, sizeof(step), &p);
	if (p.eta_s >= 0)
		dt_progress_fmt_duration(eta, sizeof(eta), p.eta_s);
	printf("global step: %s", step);
	if (p.pct >= 0)
		printf(" (%.0f%%)", p.pct);
	if (p.have && !dt_task_state_final(e->state))
		printf(", %.1f steps/s, ETA %s", p.rate, eta);
	printf("\nnewest checkpoint: %s\nnewest evaluation: %s\n", ckpt[0] ? ckpt : "(none yet)",
	       note[0] ? note : "(none yet)");
	if (p.p.ring[0]) /* an elastic all-reduce ring's members and last change (the chief's) */
		printf("ring: %s\n", p.p.ring);
	char slow[1024];
	dt_exp_stragglers_line(e, now, slow, sizeof(slow)); /* each trainer's own step time, the slowest named */
	if (slow[0])
		printf("%s\n", slow);
}

int dt_cmd_status(int argc, char **argv)
{
	int all = 0;
	struct dt_option opts[] = {
		DT_OPT_BOOL("all", &all, "list finished experiments too (-a)"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!parse_with_short(opts, argc, argv, "-a", "--all", "dtrain status [-a] [ID]", &args, &code))
		return code;
	char home[512];
	dt_exp_home(home, sizeof(home));
	struct dt_err err = DT_ERR_INIT;
	if (args.count > 1) {
		dt_args_release(&args);
		dt_err_set(&err, DT_USAGE, "status takes at most one experiment id");
		return dt_cmd_report(&err);
	}
	if (args.count == 1) {
		struct dt_exp e;
		enum dt_status st = dt_exp_load(home, args.items[0], &e, &err);
		dt_args_release(&args);
		if (st) {
			dt_exp_release(&e);
			return dt_cmd_report(&err);
		}
		dt_exp_check_lost(&e);
		printf("%s %s '%s': %s", e.sweep ? "sweep" : "experiment", e.id, e.name, dt_task_state_name(e.state));
		if (e.exit_code >= 0)
			printf(" (exit code %d)", e.exit_code);
		if (e.sweep)
			printf("\nspec: %s\noutput dir: %s (a dir per trial)\nlogs: dtrain logs %s.K [TASK]\n", e.spec,
			       e.output_dir, e.id);
		else
			printf("\nspec: %s\noutput dir: %s\nlogs: %s/logs\n", e.spec, e.output_dir, e.dir);
		if (e.sweep) {
			print_trials(home, &e);
		} else {
			print_progress(&e);
			printf("\n");
			print_tasks(&e);
		}
		dt_exp_release(&e);
		return 0;
	}
	dt_args_release(&args);
	int *ids;
	int n = dt_exp_list(home, &ids);
	printf("%-6s %-24s %-9s %5s %6s %8s\n", "ID", "NAME", "STATE", "EXIT", "TASKS", "UPTIME");
	int shown = 0;
	for (int i = 0; i < n; i++) {
		char id[16];
		snprintf(id, sizeof(id), "%d", ids[i]);
		struct dt_exp e;
		if (dt_exp_load(home, id, &e, NULL)) {
			dt_exp_release(&e);
			continue;
		}
		dt_exp_check_lost(&e);
		if (all || !dt_task_state_final(e.state)) {
			char up[32] = "-", ec[16] = "-";
			if (e.started > 0)
				fmt_uptime(up, sizeof(up), (e.ended > 0 ? e.ended : dt_wall_seconds()) - e.started);
			if (e.exit_code >= 0)
				snprintf(ec, sizeof(ec), "%d", e.exit_code);
			printf("%-6s %-24s %-9s %5s %6d %8s\n", e.id, e.name, dt_task_state_name(e.state), ec, e.ntasks, up);
			shown++;
		}
		dt_exp_release(&e);
	}
	free(ids);
	if (!shown)
		printf("(no %sexperiments under %s%s)\n", all ? "" : "running ", home, all ? "" : "; -a lists all");
	return 0;
}

/* Copies the rest of `f` to stdout; returns bytes copied. */
static size_t pump(FILE *f, const char *prefix, int *at_line_start)
{
	char buf[8192];
	size_t total = 0, n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
		for (size_t i = 0; i < n; i++) {
			if (*at_line_start && prefix)
				fputs(prefix, stdout);
			fputc(buf[i], stdout);
			*at_line_start = buf[i] == '\n';
		}
		total += n;
	}
	clearerr(f);
	fflush(stdout);
	return total;
}

int dt_cmd_logs(int argc, char **argv)
{
	int follow = 0;
	struct dt_option opts[] = {
		DT_OPT_BOOL("follow", &follow, "keep printing while the experiment runs (-f)"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!parse_with_short(opts, argc, argv, "-f", "--follow", "dtrain logs ID [TASK] [-f]", &args, &code))
		return code;
	struct dt_err err = DT_ERR_INIT;
	if (args.count < 1 || args.count > 2) {
		dt_args_release(&args);
		dt_err_set(&err, DT_USAGE, "logs takes an experiment id and optionally a task ('worker.0', 'chief')");
		return dt_cmd_report(&err);
	}
	char home[512];
	dt_exp_home(home, sizeof(home));
	struct dt_exp e;
	enum dt_status st = dt_exp_load(home, args.items[0], &e, &err);
	const char *task = args.count == 2 ? args.items[1] : NULL;
	int sel = -1;
	if (!st && e.sweep) /* its trials keep the logs */
		st = dt_err_set(&err, DT_USAGE, "%s is a sweep: its trials have the logs, e.g. 'dtrain logs %s.1%s%s' "
						"('dtrain status %s' lists them)", e.id, e.id, task ? " " : "", task ? task : "",
				e.id);
	if (!st && task) {
		/* "worker.0" or "7.worker.0" */
		size_t idl = strlen(e.id);
		if (!strncmp(task, e.id, idl) && task[idl] == '.')
			task += idl + 1;
		for (int i = 0; i < e.ntasks; i++)
			if (!strcmp(e.tasks[i].name, task))
				sel = i;
		if (sel < 0) {
			char names[512] = "";
			for (int i = 0; i < e.ntasks; i++)
				snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
					 e.tasks[i].name);
			st = dt_err_set(&err, DT_USAGE, "experiment %s has no task '%s'; its tasks: %s", e.id, task, names);
		}
	}
	if (st) {
		dt_args_release(&args);
		dt_exp_release(&e);
		return dt_cmd_report(&err);
	}
	dt_args_release(&args);
	FILE *files[DT_LAUNCH_STATE_MAX_LOGS];
	char prefixes[DT_LAUNCH_STATE_MAX_LOGS][64];
	int starts[DT_LAUNCH_STATE_MAX_LOGS];
	int nf = 0;
	for (int i = 0; i < e.ntasks && nf < DT_LAUNCH_STATE_MAX_LOGS; i++) {
		if (sel >= 0 && i != sel)
			continue;
		char path[700];
		dt_exp_log_path(&e, e.tasks[i].name, path, sizeof(path));
		files[nf] = fopen(path, "re");
		snprintf(prefixes[nf], sizeof(prefixes[nf]), "%s.%s | ", e.id, e.tasks[i].name);
		starts[nf] = 1;
		if (files[nf])
			nf++;
	}
	/* Without -f, one task's log as it is; every task's one after the other. */
	for (int i = 0; i < nf; i++)
		pump(files[i], sel >= 0 ? NULL : prefixes[i], &starts[i]);
	while (follow) {
		struct dt_exp now;
		int ended = dt_exp_load(home, e.id, &now, NULL) != DT_OK;
		if (!ended) {
			dt_exp_check_lost(&now);
			ended = dt_task_state_final(now.state);
		}
		dt_exp_release(&now);
		size_t got = 0;
		for (int i = 0; i < nf; i++)
			got += pump(files[i], sel >= 0 ? NULL : prefixes[i], &starts[i]);
		if (ended && !got)
			break;
		if (!got)
			dt_sleep(0.2);
	}
	for (int i = 0; i < nf; i++)
		fclose(files[i]);
	dt_exp_release(&e);
	return 0;
}

/* Signals a recorded process (group) only when it is still the same one. */
static int signal_task(pid_t pid, unsigned long long start, int sig)
{
	if (!dt_proc_same(pid, start))
		return 0;
	kill(-pid, sig);
	kill(pid, sig);
	return 1;
}

int dt_cmd_kill(int argc, char **argv)
{
	int force = 0;
	double wait_s = 30;
	struct dt_option opts[] = {
		DT_OPT_BOOL("force", &force, "SIGKILL every task and the launcher at once (-f)"),
		DT_OPT_DOUBLE("wait", &wait_s, "SECONDS", "how long to wait for the experiment to end"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!parse_with_short(opts, argc, argv, "-f", "--force", "dtrain kill ID [-f]", &args, &code))
		return code;
	struct dt_err err = DT_ERR_INIT;
	if (args.count != 1) {
		dt_args_release(&args);
		dt_err_set(&err, DT_USAGE, "kill takes one experiment id");
		return dt_cmd_report(&err);
	}
	char home[512];
	dt_exp_home(home, sizeof(home));
	struct dt_exp e;
	enum dt_status st = dt_exp_load(home, args.items[0], &e, &err);
	dt_args_release(&args);
	if (st) {
		dt_exp_release(&e);
		return dt_cmd_report(&err);
	}
	if (dt_task_state_final(e.state)) {
		printf("experiment %s already ended: %s\n", e.id, dt_task_state_name(e.state));
		dt_exp_release(&e);
		return 0;
	}
	int launcher = dt_proc_same(e.launcher_pid, e.launcher_start);
	if (force || !launcher) {
		/* Tasks first, so that the launcher does not restart them. */
		if (launcher)
			kill(e.launcher_pid, SIGKILL);
		for (int i = 0; i < e.ntasks; i++)
			signal_task(e.tasks[i].pid, e.tasks[i].pid_start, SIGKILL);
	} else {
		kill(e.launcher_pid, SIGTERM); /* it stops its tasks: SIGTERM, SIGKILL after the grace period */
	}
	printf("experiment %s: sent %s to %s\n", e.id, force || !launcher ? "SIGKILL" : "SIGTERM",
	       launcher && !force ? "the launcher (it stops every task)" : "every task");
	fflush(stdout);
	int64_t deadline = dt_deadline_in(wait_s);
	int left = 1;
	while (left && !dt_deadline_passed(deadline)) {
		left = dt_proc_same(e.launcher_pid, e.launcher_start);
		for (int i = 0; i < e.ntasks; i++)
			left |= dt_proc_same(e.tasks[i].pid, e.tasks[i].pid_start);
		if (left)
			dt_sleep(0.05);
	}
	if (left) {
		dt_err_set(&err, DT_TIMEOUT, "experiment %s still has processes after %g s (try 'dtrain kill -f %s')", e.id,
			   wait_s, e.id);
		dt_exp_release(&e);
		return dt_cmd_report(&err);
	}
	if (force || !launcher) {
		/* Nobody is left to record the end: do it here. */
		struct dt_exp now;
		if (dt_exp_load(home, e.id, &now, NULL) == DT_OK) {
			now.state = DT_TS_KILLED;
			now.exit_code = 137;
			now.ended = dt_wall_seconds();
			for (int i = 0; i < now.ntasks; i++)
				if (!dt_task_state_final(now.tasks[i].state))
					now.tasks[i].state = DT_TS_KILLED;
			if (dt_exp_save(&now, &err)) {
				dt_exp_release(&now);
				dt_exp_release(&e);
				return dt_cmd_report(&err);
			}
		}
		dt_exp_release(&now);
	}
	printf("experiment %s: every process has ended\n", e.id);
	dt_exp_release(&e);
	return 0;
}
