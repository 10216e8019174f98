/*
 * sweep.c — a sweep's event loop (see sweep.h for its rules): a self-pipe
 * for SIGCHLD, SIGINT and SIGTERM, one forked child per running trial
 * (each a whole dt_launch_run), and state.json rewritten after each round.
 */
#include "launch/sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/status.h"
#include "launch/state.h"

#define HISTORY_MAX 64 /* (step, value) points kept per finished trial for early stopping */

struct history {
	long long steps[HISTORY_MAX];
	double values[HISTORY_MAX];
	int n;
};

struct sweep {
	const struct dt_launch_spec *spec;
	const struct dt_launch_sweep *sw;
	const struct dt_launch_opts *opts;
	struct dt_exp exp;             /* tasks[k - 1] is trial k */
	char output_dir[512];          /* the trials' parent dir */
	int64_t next;                  /* the next trial to start (1-based) */
	int running, failed;
	int first_failure;             /* exit code of the first failed trial, 0 while none */
	int interrupted;
	int stop_starting;
	int reached;                   /* 1: a trial reached the objective's target (2: said so) */
	struct history **done;         /* [ntrials]: finished trials' metric histories (early stopping) */
	int dirty;
};

static int sig_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	int e = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t w = write(sig_pipe[1], &b, 1);
	(void)w;
	errno = e;
}

static void say(struct sweep *S, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct sweep *S, const char *fmt, ...)
{
	char ts[32], text[1200];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	fprintf(S->opts->out, "%-*s | [%s] %s\n", (int)strlen(S->exp.id) + 2, S->exp.id, ts, text);
	fflush(S->opts->out);
}

static void save(struct sweep *S)
{
	if (!S->dirty)
		return;
	struct dt_err err = DT_ERR_INIT;
	if (dt_exp_save(&S->exp, &err))
		say(S, "warning: %s", err.msg);
	S->dirty = 0;
}

/* {"lr": "0.1", ...}: the trial's values for DTRAIN_TRIAL_PARAMS. */
static char *params_json(const struct dt_launch_sweep *sw, char *const *values)
{
	json_t *o = json_object();
	for (int i = 0; i < sw->nparams; i++)
		json_object_set_new(o, sw->params[i].name, json_string(values[i]));
	char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	DT_ASSERT(text);
	return text;
}

/* The child: trial k as a plain experiment with id "N.k". Never returns. */
static void run_trial(struct sweep *S, struct dt_launch_spec *t, const char *id, char *const *env)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigemptyset(&dfl.sa_mask);
	sigaction(SIGCHLD, &dfl, NULL);
	sigaction(SIGINT, &dfl, NULL);
	sigaction(SIGTERM, &dfl, NULL);
	close(sig_pipe[0]);
	close(sig_pipe[1]);
	sigset_t none; /* blocked since fork (start_trial) */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	struct dt_launch_opts o = *S->opts;
	o.exp_id = id;
	o.env = env;
	int code = 1;
	struct dt_err err = DT_ERR_INIT;
	if (dt_launch_run(t, &o, &code, &err)) {
		fprintf(stderr, "error: trial %s: %s\n", id, err.msg);
		code = dt_status_exit_code(err.status);
	}
	fflush(NULL);
	_exit(code);
}

/* Builds trial k's spec, output dir and params.yaml, and forks its launcher. */
static enum dt_status start_trial(struct sweep *S, int64_t k, struct dt_err *err)
{
	struct dt_exp_task *et = &S->exp.tasks[k - 1];
	struct dt_launch_spec t;
	enum dt_status st = dt_launch_spec_trial(S->spec, k, &t, err);
	if (st) {
		dt_launch_spec_release(&t);
		return st;
	}
	char dir[1100];
	snprintf(dir, sizeof(dir), "%s/%s", S->output_dir, et->name);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		dt_launch_spec_release(&t);
		return dt_err_set(err, DT_IO, "cannot create the trial's output dir '%s': %s", dir, strerror(errno));
	}
	free(t.output_dir);
	t.output_dir = dt_xstrdup(dir);
	char *yaml = NULL;
	size_t len = 0;
	dt_launch_values_yaml(S->sw, t.trial_values, &yaml, &len);
	char path[1200];
	snprintf(path, sizeof(path), "%s/params.yaml", dir);
	st = dt_write_file_atomic(path, yaml, len, err);
	free(yaml);
	if (st) {
		dt_launch_spec_release(&t);
		return st;
	}
	char *json = params_json(S->sw, t.trial_values), *env[3] = { NULL, NULL, NULL };
	DT_ASSERT(asprintf(&env[0], "%s=%s", DT_TRIAL_ENV, et->name) >= 0);
	DT_ASSERT(asprintf(&env[1], "%s=%s", DT_TRIAL_PARAMS_ENV, json) >= 0);
	free(json);
	fflush(NULL);
	pid_t parent = getpid();
	/* Blocked across fork until the child has reset the sweep's handlers
	 * (as child.c does for tasks): else a signal in between would run the
	 * sweep's handler in the child and write to the sweep's self-pipe. */
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid_t pid = fork();
	if (pid != 0)
		sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid == 0) {
		/* The trial's launcher dies with the sweep; its guard then ends its
		 * tasks. Its own process group: a Ctrl-C reaches the sweep alone,
		 * which passes one SIGTERM on (a second would mean SIGKILL now). */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
			_exit(137);
		setpgid(0, 0);
		run_trial(S, &t, et->name, env);
	}
	int e = errno;
	free(env[0]);
	free(env[1]);
	dt_launch_spec_release(&t);
	if (pid < 0)
		return dt_err_set(err, DT_RUNTIME, "cannot fork the launcher of trial %s: %s", et->name, strerror(e));
	et->pid = pid;
	et->pid_start = dt_proc_start_time(pid);
	et->started = dt_wall_seconds();
	et->exit_code = -1;
	et->state = DT_TS_RUNNING;
	S->running++;
	S->dirty = 1;
	say(S, "--> trial %s RUNNING (%s); output dir %s", et->name, et->params, dir);
	return DT_OK;
}

/* Whether trial `id` recorded itself KILLED (`dtrain kill N.k`). */
static int trial_was_killed(const struct sweep *S, const char *id)
{
	struct dt_exp e;
	int killed = dt_exp_load(S->opts->home, id, &e, NULL) == DT_OK && e.state == DT_TS_KILLED;
	dt_exp_release(&e);
	return killed;
}

/* Trial `id`'s value of the objective's metric (its evaluator's, else its chief's). */
static int trial_metric(const struct sweep *S, const char *id, double *v)
{
	struct dt_exp e;
	int found = dt_exp_load(S->opts->home, id, &e, NULL) == DT_OK && dt_exp_metric(&e, S->sw->metric, v);
	dt_exp_release(&e);
	return found;
}

static void trial_ended(struct sweep *S, struct dt_exp_task *et, int ws)
{
	int code = WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : WEXITSTATUS(ws);
	et->exit_code = code;
	et->pid = 0;
	S->running--;
	S->dirty = 1;
	if (code == 0 && !et->early_stopped) {
		et->state = DT_TS_FINISHED;
	} else if (et->early_stopped || S->interrupted || trial_was_killed(S, et->name)) {
		et->state = DT_TS_KILLED;
	} else {
		et->state = DT_TS_FAILED;
		S->failed++;
		if (!S->first_failure)
			S->first_failure = code;
	}
	if (et->state == DT_TS_FINISHED && S->sw->early_median) {
		struct dt_exp e;
		struct history *h = dt_xcalloc(1, sizeof(*h));
		if (dt_exp_load(S->opts->home, et->name, &e, NULL) == DT_OK)
			h->n = dt_exp_metric_history(&e, S->sw->metric, h->steps, h->values, HISTORY_MAX);
		dt_exp_release(&e);
		S->done[et - S->exp.tasks] = h;
	}
	char value[128] = "";
	double v = 0;
	if (et->state == DT_TS_FINISHED && S->sw->metric && trial_metric(S, et->name, &v)) {
		snprintf(value, sizeof(value), ": %s = %g", S->sw->metric, v);
		if (S->sw->has_target && (S->sw->maximize ? v >= S->sw->target : v <= S->sw->target) && !S->reached) {
			S->reached = 1;
			S->stop_starting = 1;
		}
	}
	say(S, "--> trial %s %s (exit code %d)%s%s", et->name, dt_task_state_name(et->state), code, value,
	    et->early_stopped ? " (stopped early)" : "");
	if (S->reached == 1) {
		S->reached = 2;
		say(S, "trial %s reached the objective's target (%s %s %g): no new trial starts", et->name,
		    S->sw->metric, S->sw->maximize ? ">=" : "<=", S->sw->target);
	}
	if (et->state == DT_TS_FAILED && S->sw->max_failed >= 0 && S->failed > S->sw->max_failed && !S->stop_starting) {
		S->stop_starting = 1;
		say(S, "%d trials failed, more than max_failed_trials (%d): no new trial starts", S->failed,
		    S->sw->max_failed);
	}
}

static void reap(struct sweep *S)
{
	for (;;) {
		int ws;
		pid_t pid = waitpid(-1, &ws, WNOHANG);
		if (pid <= 0)
			return;
		for (int i = 0; i < S->exp.ntasks; i++)
			if (S->exp.tasks[i].pid == pid && S->exp.tasks[i].state == DT_TS_RUNNING)
				trial_ended(S, &S->exp.tasks[i], ws);
	}
}

static int better(const struct sweep *S, double a, double b)
{
	return S->sw->maximize ? a > b : a < b;
}

/* The best of h's values up to step `s`; 0 when it has none. */
static int best_by(const struct sweep *S, const long long *steps, const double *values, int n, long long s,
		   double *best)
{
	int have = 0;
	for (int i = 0; i < n; i++)
		if (steps[i] <= s && (!have || better(S, values[i], *best))) {
			*best = values[i];
			have = 1;
		}
	return have;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Katib's median rule over every running trial (params.h): its best value
 * by its newest step s against the median of the finished trials' best
 * values by s, once min_trials finished trials have one. */
static void early_stop(struct sweep *S)
{
	if (!S->sw->early_median)
		return;
	double *medians = dt_xcalloc((size_t)S->exp.ntasks, sizeof(double));
	for (int i = 0; i < S->exp.ntasks; i++) {
		struct dt_exp_task *et = &S->exp.tasks[i];
		if (et->state != DT_TS_RUNNING || et->early_stopped || et->pid <= 0)
			continue;
		struct history h = { .n = 0 };
		struct dt_exp e;
		if (dt_exp_load(S->opts->home, et->name, &e, NULL) == DT_OK)
			h.n = dt_exp_metric_history(&e, S->sw->metric, h.steps, h.values, HISTORY_MAX);
		dt_exp_release(&e);
		if (!h.n || h.steps[h.n - 1] < S->sw->es_start_step)
			continue;
		long long s = h.steps[h.n - 1];
		double mine = 0;
		best_by(S, h.steps, h.values, h.n, s, &mine);
		int m = 0;
		for (int j = 0; j < S->exp.ntasks; j++) {
			const struct history *d = S->done[j];
			if (d && best_by(S, d->steps, d->values, d->n, s, &medians[m]))
				m++;
		}
		if (m < S->sw->es_min_trials)
			continue;
		qsort(medians, (size_t)m, sizeof(double), cmp_double);
		double median = m % 2 ? medians[m / 2] : (medians[m / 2 - 1] + medians[m / 2]) / 2;
		if (!better(S, median, mine))
			continue;
		et->early_stopped = 1;
		S->dirty = 1;
		say(S, "trial %s stops early: its best %s by step %lld, %g, is %s than the median %g of %d finished trials",
		    et->name, S->sw->metric, s, mine, S->sw->maximize ? "lower" : "higher", median, m);
		kill(et->pid, SIGTERM);
	}
	free(medians);
}

static void stop_all(struct sweep *S, int sig)
{
	for (int i = 0; i < S->exp.ntasks; i++)
		if (S->exp.tasks[i].pid > 0 && S->exp.tasks[i].state == DT_TS_RUNNING)
			kill(S->exp.tasks[i].pid, sig);
}

static void loop(struct sweep *S)
{
	for (;;) {
		while (!S->stop_starting && !S->interrupted && S->running < S->sw->concurrency && S->next <= S->sw->ntrials) {
			int64_t k = S->next++;
			if (S->exp.tasks[k - 1].state != DT_TS_CREATED)
				continue; /* a resumed sweep's trial that ended before */
			struct dt_err err = DT_ERR_INIT;
			if (start_trial(S, k, &err)) {
				struct dt_exp_task *et = &S->exp.tasks[k - 1];
				say(S, "error: trial %s: %s", et->name, err.msg);
				et->state = DT_TS_FAILED;
				et->exit_code = dt_status_exit_code(err.status);
				S->failed++;
				if (!S->first_failure)
					S->first_failure = et->exit_code;
				S->dirty = 1;
				if (S->sw->max_failed >= 0 && S->failed > S->sw->max_failed)
					S->stop_starting = 1;
			}
		}
		save(S);
		if (S->running == 0)
			break;
		struct pollfd pfd = { .fd = sig_pipe[0], .events = POLLIN };
		int r = poll(&pfd, 1, 1000);
		if (r < 0 && errno != EINTR)
			break;
		if (r > 0) {
			unsigned char sigs[64];
			ssize_t got = read(sig_pipe[0], sigs, sizeof(sigs));
			for (ssize_t j = 0; j < got; j++) {
				if (sigs[j] != SIGINT && sigs[j] != SIGTERM)
					continue;
				if (!S->interrupted)
					say(S, "%s: stopping every running trial", sigs[j] == SIGINT ? "interrupted (SIGINT)"
												 : "terminated (SIGTERM)");
				S->interrupted = sigs[j];
				stop_all(S, SIGTERM); /* a second signal: the trials' launchers SIGKILL their tasks */
			}
		}
		reap(S);
		early_stop(S);
	}
}

static enum dt_status setup(struct sweep *S, struct dt_err *err)
{
	const struct dt_launch_spec *s = S->spec;
	enum dt_status st = dt_exp_create(S->opts->home, &S->exp, err);
	if (st)
		return st;
	snprintf(S->exp.name, sizeof(S->exp.name), "%s", s->name ? s->name : "experiment");
	char spec_abs[PATH_MAX]; /* absolute, for --resume from anywhere */
	snprintf(S->exp.spec, sizeof(S->exp.spec), "%.500s",
		 s->path && realpath(s->path, spec_abs) ? spec_abs : s->path ? s->path : "");
	if (s->output_dir) {
		char abs[PATH_MAX];
		if (s->output_dir[0] != '/' && getcwd(abs, sizeof(abs)))
			snprintf(S->output_dir, sizeof(S->output_dir), "%.200s/%.300s", abs, s->output_dir);
		else
			snprintf(S->output_dir, sizeof(S->output_dir), "%s", s->output_dir);
	} else {
		snprintf(S->output_dir, sizeof(S->output_dir), "%.500s/output", S->exp.dir);
	}
	if (mkdir(S->output_dir, 0755) != 0 && errno != EEXIST)
		return dt_err_set(err, DT_IO, "cannot create the output dir '%s': %s", S->output_dir, strerror(errno));
	snprintf(S->exp.output_dir, sizeof(S->exp.output_dir), "%s", S->output_dir);
	S->exp.sweep = 1;
	if (S->sw->metric) {
		snprintf(S->exp.metric, sizeof(S->exp.metric), "%s", S->sw->metric);
		S->exp.maximize = S->sw->maximize;
		S->exp.has_target = S->sw->has_target;
		S->exp.target = S->sw->target;
	}
	S->exp.launcher_pid = getpid();
	S->exp.launcher_start = dt_proc_start_time(getpid());
	S->exp.state = DT_TS_RUNNING;
	S->exp.exit_code = -1;
	S->exp.started = dt_wall_seconds();
	S->exp.ntasks = (int)S->sw->ntrials;
	S->exp.tasks = dt_xcalloc((size_t)S->exp.ntasks, sizeof(*S->exp.tasks));
	S->done = dt_xcalloc((size_t)S->exp.ntasks, sizeof(*S->done));
	for (int64_t k = 1; k <= S->sw->ntrials; k++) {
		struct dt_exp_task *et = &S->exp.tasks[k - 1];
		snprintf(et->name, sizeof(et->name), "%.12s.%d", S->exp.id, (int)k); /* ids <= 10 digits, k <= DT_SWEEP_MAX_TRIALS */
		char **values = dt_launch_trial_values(S->sw, k);
		dt_launch_values_line(S->sw, values, et->params, sizeof(et->params));
		dt_launch_values_free(values);
		et->state = DT_TS_CREATED;
		et->exit_code = -1;
	}
	S->next = 1;
	S->dirty = 1;
	return DT_OK;
}

/* --resume: sweep `id`, whose launcher is gone, taken over. Its finished,
 * failed and killed trials stay as they are; the others (running when the
 * launcher died, or not started) run again, the state dir of a trial that
 * had started moved aside to "<id>.prev<n>" (its output dir stays, so a
 * dtrain train trial resumes from its newest checkpoint). */
static enum dt_status setup_resume(struct sweep *S, struct dt_err *err)
{
	enum dt_status st = dt_exp_load(S->opts->home, S->opts->resume, &S->exp, err);
	if (st)
		return st;
	if (!S->exp.sweep)
		return dt_err_set(err, DT_USAGE, "experiment %s is not a sweep: --resume continues sweeps (a plain "
						 "experiment restarts with 'dtrain launch SPEC', resuming from its checkpoints)",
				  S->exp.id);
	if (dt_proc_same(S->exp.launcher_pid, S->exp.launcher_start))
		return dt_err_set(err, DT_USAGE, "sweep %s still runs (its launcher is pid %d): --resume takes over a "
						 "sweep whose launcher died", S->exp.id, (int)S->exp.launcher_pid);
	if (S->exp.ntasks != S->sw->ntrials)
		return dt_err_set(err, DT_CONFIG, "the spec '%s' gives %lld trials, sweep %s has %d: it is not the spec "
						  "the sweep ran", S->spec->path, (long long)S->sw->ntrials, S->exp.id,
				  S->exp.ntasks);
	snprintf(S->output_dir, sizeof(S->output_dir), "%s", S->exp.output_dir);
	S->done = dt_xcalloc((size_t)S->exp.ntasks, sizeof(*S->done));
	int pending = 0;
	for (int64_t k = 1; k <= S->sw->ntrials; k++) {
		struct dt_exp_task *et = &S->exp.tasks[k - 1];
		char line[sizeof(et->params)];
		char **values = dt_launch_trial_values(S->sw, k);
		dt_launch_values_line(S->sw, values, line, sizeof(line));
		dt_launch_values_free(values);
		if (strcmp(line, et->params))
			return dt_err_set(err, DT_CONFIG, "the spec '%s' gives trial %s '%s', the sweep ran '%s': it is not "
							  "the spec the sweep ran", S->spec->path, et->name, line, et->params);
		if (et->state == DT_TS_FINISHED || et->state == DT_TS_FAILED || et->state == DT_TS_KILLED) {
			if (et->state == DT_TS_FAILED) {
				S->failed++;
				if (!S->first_failure)
					S->first_failure = et->exit_code > 0 ? et->exit_code : 1;
			}
			continue;
		}
		char dir[700], aside[760];
		snprintf(dir, sizeof(dir), "%s/experiments/%s", S->opts->home, et->name);
		for (int n = 1; access(dir, F_OK) == 0 && n < 1000; n++) {
			snprintf(aside, sizeof(aside), "%s.prev%d", dir, n);
			if (access(aside, F_OK) != 0 && rename(dir, aside) != 0)
				return dt_err_set(err, DT_IO, "cannot move trial %s's state aside to '%s': %s", et->name, aside,
						  strerror(errno));
		}
		et->state = DT_TS_CREATED;
		et->pid = 0;
		et->exit_code = -1;
		pending++;
	}
	S->exp.launcher_pid = getpid();
	S->exp.launcher_start = dt_proc_start_time(getpid());
	S->exp.state = DT_TS_RUNNING;
	S->exp.exit_code = -1;
	S->exp.ended = 0;
	S->next = 1;
	S->dirty = 1;
	say(S, "--> RESUMING sweep '%s': %d of %d trials to run, %d failed before", S->exp.name, pending,
	    S->exp.ntasks, S->failed);
	return DT_OK;
}

enum dt_status dt_launch_sweep_run(const struct dt_launch_spec *s, const struct dt_launch_opts *o, int *exit_code,
				   struct dt_err *err)
{
	DT_ASSERT(s->sweep);
	struct sweep S = { .spec = s, .sw = s->sweep, .opts = o };
	*exit_code = 1;
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return dt_err_set(err, DT_RUNTIME, "cannot create a pipe: %s", strerror(errno));
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART | SA_NOCLDSTOP }, old[3];
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, &old[0]);
	sigaction(SIGINT, &sa, &old[1]);
	sigaction(SIGTERM, &sa, &old[2]);
	enum dt_status st = o->resume ? setup_resume(&S, err) : setup(&S, err);
	if (!st && !o->resume) {
		say(&S, "--> STARTING sweep '%s': %lld trials (%s search), %d at a time; output dir %s; state %s",
		    S.exp.name, (long long)S.sw->ntrials, S.sw->search == DT_SEARCH_RANDOM ? "random" : "grid",
		    S.sw->concurrency, S.output_dir, S.exp.dir);
	}
	if (!st) {
		loop(&S);
		int within = S.sw->max_failed >= 0 && S.failed <= S.sw->max_failed;
		*exit_code = S.interrupted ? 128 + S.interrupted : within ? 0 : S.first_failure;
		int finished = 0;
		for (int i = 0; i < S.exp.ntasks; i++) {
			finished += S.exp.tasks[i].state == DT_TS_FINISHED;
			if (S.exp.tasks[i].state == DT_TS_CREATED) { /* never started */
				S.exp.tasks[i].state = DT_TS_KILLED;
				S.dirty = 1;
			}
		}
		S.exp.state = S.interrupted ? DT_TS_KILLED : *exit_code ? DT_TS_FAILED : DT_TS_FINISHED;
		S.exp.exit_code = *exit_code;
		S.exp.ended = dt_wall_seconds();
		S.dirty = 1;
		say(&S, "--> %s (exit code %d): %d of %lld trials finished, %d failed", dt_task_state_name(S.exp.state),
		    *exit_code, finished, (long long)S.sw->ntrials, S.failed);
		save(&S);
	}
	for (int i = 0; S.done && i < S.exp.ntasks; i++)
		free(S.done[i]);
	free(S.done);
	dt_exp_release(&S.exp);
	sigaction(SIGCHLD, &old[0], NULL);
	sigaction(SIGINT, &old[1], NULL);
	sigaction(SIGTERM, &old[2], NULL);
	close(sig_pipe[0]);
	close(sig_pipe[1]);
	sig_pipe[0] = sig_pipe[1] = -1;
	return st;
}
