/*
 * run.c — the launcher's event loop (see run.h for the rules it applies).
 *
 * One thread, one poll(): a self-pipe written by the SIGCHLD, SIGINT and
 * SIGTERM handlers, each task's output pipe and exec-status pipe; the poll
 * timeout is the nearest timer (a restart, the ps and evaluator teardown,
 * the SIGKILL after the grace period), at most a second.
 */
#include "launch/run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "launch/internal.h"
#include "launch/state.h"
#include "launch/tasks.h"
#include "net/auth.h"

#define LINE_MAX_BYTES 8192
#define PS_END_GRACE_S 5.0
#define DT_SWEEP_MAX_ENV 4 /* opts->env entries taken */

struct rt_task {
	struct dt_launch_task def;
	char label[64];
	char *tf_config;
	char **argv;
	char cgroup[1400];
	cpu_set_t cpus;
	int ncpus;
	pid_t pid;
	int out_fd, exec_fd; /* -1 when closed */
	char line[LINE_MAX_BYTES];
	size_t used;
	FILE *log;
	int64_t restart_at;  /* monotonic ns; 0: none pending */
	int stopping;        /* the launcher sent SIGTERM */
};

struct launcher {
	const struct dt_launch_spec *spec;
	const struct dt_launch_opts *opts;
	struct dt_exp exp;
	struct rt_task *t;
	int n;
	int label_width;
	int restarts_used;
	int first_failure;   /* exit code of the first failure, 0 while none */
	int interrupted;     /* the signal that interrupts, 0 if none */
	int tearing_down;    /* stopping everything */
	int64_t kill_at;     /* SIGKILL deadline once tearing down */
	int64_t ps_stop_at, eval_stop_at;
	int dirty;           /* state.json needs a rewrite */
	int guard_fd;        /* child.c's guard, -1 without one */
	pid_t guard_pid;
	char output_dir[512];
	char secret_path[600]; /* the experiment's cluster secret (<dir>/cluster_secret, 0600) */
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

static void utc_now(char *buf, size_t cap)
{
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* "<label> | [<time>] <text>" on the launcher's output and in the log. */
static void emit(struct launcher *L, struct rt_task *t, const char *text)
{
	char ts[32];
	utc_now(ts, sizeof(ts));
	const char *label = t ? t->label : L->exp.id;
	fprintf(L->opts->out, "%-*s | [%s] %s\n", L->label_width, label, ts, text);
	fflush(L->opts->out);
	if (t && t->log) {
		fprintf(t->log, "[%s] %s\n", ts, text);
		fflush(t->log);
	}
}

static void set_state(struct launcher *L, struct rt_task *t, enum dt_task_state s, const char *why)
{
	struct dt_exp_task *et = &L->exp.tasks[t - L->t];
	et->state = s;
	char text[300];
	snprintf(text, sizeof(text), "--> %s%s%s", dt_task_state_name(s), why ? " " : "", why ? why : "");
	emit(L, t, text);
	L->dirty = 1;
}

static void save(struct launcher *L)
{
	if (!L->dirty)
		return;
	struct dt_err err = DT_ERR_INIT;
	if (dt_exp_save(&L->exp, &err)) {
		char text[DT_ERR_MSG_MAX + 32];
		snprintf(text, sizeof(text), "warning: %s", err.msg);
		emit(L, NULL, text);
	}
	L->dirty = 0;
}

/* Splits what the task wrote into lines; `eof` flushes a last partial one. */
static void take_output(struct launcher *L, struct rt_task *t, int eof)
{
	char *start = t->line;
	for (;;) {
		char *nl = memchr(start, '\n', t->used - (size_t)(start - t->line));
		if (!nl)
			break;
		*nl = '\0';
		emit(L, t, start);
		start = nl + 1;
	}
	size_t left = t->used - (size_t)(start - t->line);
	memmove(t->line, start, left);
	t->used = left;
	if (t->used == sizeof(t->line) - 1 || (eof && t->used)) {
		t->line[t->used] = '\0';
		emit(L, t, t->line);
		t->used = 0;
	}
}

/* The exec-status pipe (child.c): EOF once the exec succeeded (RUNNING),
 * 4 bytes of errno when it failed. Called before any output of the task is
 * shown, so "--> RUNNING" always precedes the task's own first line: the
 * pipe closes at exec, before the program can write anything. */
static void take_exec_status(struct launcher *L, struct rt_task *t)
{
	if (t->exec_fd < 0)
		return;
	int e = 0;
	ssize_t got;
	do
		got = read(t->exec_fd, &e, sizeof(e));
	while (got < 0 && errno == EINTR);
	if (got < 0 && errno == EAGAIN)
		return; /* not exec'd yet */
	close(t->exec_fd);
	t->exec_fd = -1;
	if (got == 0 && t->pid > 0) {
		set_state(L, t, DT_TS_RUNNING, NULL);
	} else if (got == (ssize_t)sizeof(e)) {
		char text[300];
		snprintf(text, sizeof(text), "cannot start '%s': %s", t->argv[0], strerror(e));
		emit(L, t, text);
	}
}

static void read_output(struct launcher *L, struct rt_task *t)
{
	take_exec_status(L, t);
	for (int rounds = 0; t->out_fd >= 0 && rounds < 64; rounds++) {
		ssize_t n = read(t->out_fd, t->line + t->used, sizeof(t->line) - 1 - t->used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			take_output(L, t, 1);
			close(t->out_fd);
			t->out_fd = -1;
			return;
		}
		t->used += (size_t)n;
		take_output(L, t, 0);
	}
}

static int is_trainer(const struct rt_task *t)
{
	return t->def.group == DT_GROUP_WORKER;
}

static void env_add(char **env, int *n, const char *name, const char *v)
{
	char *s = NULL;
	DT_ASSERT(asprintf(&s, "%s=%s", name, v) >= 0);
	env[(*n)++] = s;
}

static enum dt_status start_task(struct launcher *L, struct rt_task *t, struct dt_err *err)
{
	if (t->out_fd >= 0) { /* the previous run's pipe */
		read_output(L, t);
		if (t->out_fd >= 0)
			close(t->out_fd);
		t->out_fd = -1;
	}
	int out[2];
	if (pipe2(out, O_CLOEXEC) != 0)
		return dt_err_set(err, DT_RUNTIME, "cannot create a pipe for '%s': %s", t->label, strerror(errno));
	char index[16];
	snprintf(index, sizeof(index), "%d", t->def.ref.index);
	char *env[12 + DT_SWEEP_MAX_ENV] = { 0 };
	int ne = 0;
	env_add(env, &ne, "TF_CONFIG", t->tf_config);
	env_add(env, &ne, "OUTPUT_DIR", L->output_dir);
	env_add(env, &ne, "EXPERIMENT_ID", L->exp.id);
	env_add(env, &ne, "TASK_TYPE", dt_job_name(t->def.ref.job));
	env_add(env, &ne, "TASK_INDEX", index);
	env_add(env, &ne, "DTRAIN_TASK", t->def.name);
	env_add(env, &ne, "DTRAIN", L->opts->bin);
	char progress[700];
	dt_exp_progress_path(&L->exp, t->def.name, progress, sizeof(progress));
	env_add(env, &ne, DT_PROGRESS_ENV, progress);
	/* Every task authenticates with the experiment's own secret (SECURITY.md). */
	env_add(env, &ne, DT_AUTH_ENV, L->secret_path);
	for (int i = 0; L->opts->env && L->opts->env[i] && i < DT_SWEEP_MAX_ENV; i++)
		env[ne++] = dt_xstrdup(L->opts->env[i]);
	struct dt__child c = { .label = t->label, .argv = t->argv, .env = env, .out_fd = out[1], .cpus = t->cpus,
			       .ncpus = t->ncpus, .mem_bytes = L->spec->res[t->def.group].mem_bytes,
			       .cgroup_dir = t->cgroup };
	set_state(L, t, DT_TS_STARTING, NULL);
	int exec_fd = -1;
	pid_t pid = dt__child_spawn(&c, &exec_fd, err);
	for (int i = 0; i < ne; i++)
		free(env[i]);
	close(out[1]);
	if (pid < 0) {
		close(out[0]);
		return err->status;
	}
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	fcntl(exec_fd, F_SETFL, O_NONBLOCK);
	dt__guard_send(L->guard_fd, 'A', pid);
	t->pid = pid;
	t->out_fd = out[0];
	t->exec_fd = exec_fd;
	t->stopping = 0;
	t->restart_at = 0;
	struct dt_exp_task *et = &L->exp.tasks[t - L->t];
	et->pid = pid;
	et->pid_start = dt_proc_start_time(pid);
	et->exit_code = -1;
	et->started = dt_wall_seconds();
	return DT_OK;
}

static void stop_task(struct launcher *L, struct rt_task *t, int sig)
{
	if (t->pid > 0) {
		t->stopping = 1;
		kill(-t->pid, sig);
		kill(t->pid, sig);
	}
	if (t->restart_at) { /* a restart that will not happen */
		t->restart_at = 0;
		set_state(L, t, DT_TS_KILLED, "(restart cancelled)");
	}
}

static void teardown(struct launcher *L, const char *why)
{
	if (L->tearing_down)
		return;
	L->tearing_down = 1;
	L->kill_at = dt_deadline_in(L->spec->grace_s);
	char text[200];
	snprintf(text, sizeof(text), "%s: stopping every task (SIGTERM, SIGKILL after %g s)", why, L->spec->grace_s);
	emit(L, NULL, text);
	for (int i = 0; i < L->n; i++)
		stop_task(L, &L->t[i], SIGTERM);
}

static double backoff_s(int attempt)
{
	double d = 1;
	for (int i = 1; i < attempt && d < 8; i++)
		d *= 2;
	return d;
}

static void task_ended(struct launcher *L, struct rt_task *t, int wstatus)
{
	int signaled = WIFSIGNALED(wstatus);
	int code = signaled ? 128 + WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
	/* What its process group still holds (a shell's background jobs) goes
	 * with it: the group exists while they do, so the id is still theirs. */
	kill(-t->pid, SIGKILL);
	dt__guard_send(L->guard_fd, 'D', t->pid);
	read_output(L, t); /* its last lines before its end */
	if (t->out_fd >= 0) { /* drained; a killed grandchild may not have closed its copy yet */
		close(t->out_fd);
		t->out_fd = -1;
	}
	struct dt_exp_task *et = &L->exp.tasks[t - L->t];
	et->exit_code = code;
	et->pid = 0;
	t->pid = 0;
	char why[128];
	if (signaled)
		snprintf(why, sizeof(why), "(killed by signal %d)", WTERMSIG(wstatus));
	else
		snprintf(why, sizeof(why), "(exit code %d)", code);
	if (code == 0 && !signaled) {
		set_state(L, t, DT_TS_FINISHED, why);
		return;
	}
	if (t->stopping) {
		set_state(L, t, DT_TS_KILLED, why);
		return;
	}
	if (!L->tearing_down && dt_launch_should_restart(L->spec->restart, code, signaled) &&
	    L->restarts_used < L->spec->backoff_limit) {
		L->restarts_used++;
		et->restarts++;
		double d = backoff_s(et->restarts);
		char more[200];
		snprintf(more, sizeof(more), "%s, restart %d of %d (%s) in %g s", why, L->restarts_used,
			 L->spec->backoff_limit, dt_restart_policy_name(L->spec->restart), d);
		set_state(L, t, DT_TS_FAILED, more);
		t->restart_at = dt_deadline_in(d);
		return;
	}
	set_state(L, t, DT_TS_FAILED, why);
	if (!L->first_failure)
		L->first_failure = code;
	if (t->def.ref.job == DT_JOB_CHIEF)
		teardown(L, "the chief failed");
}

static int task_live(const struct rt_task *t)
{
	return t->pid > 0 || t->restart_at;
}

/* Teardown rules once trainers end; returns 1 when nothing runs any more. */
static int check_end(struct launcher *L)
{
	int trainers = 0, others = 0;
	for (int i = 0; i < L->n; i++) {
		if (task_live(&L->t[i]))
			*(is_trainer(&L->t[i]) ? &trainers : &others) += 1;
	}
	if (trainers + others == 0)
		return 1;
	if (trainers || L->tearing_down)
		return 0;
	int64_t now = dt_now_ns();
	if (!L->ps_stop_at) {
		L->ps_stop_at = dt_deadline_in(PS_END_GRACE_S);
		L->eval_stop_at = dt_deadline_in(L->spec->evaluator_timeout_s);
		emit(L, NULL, "every trainer ended: the ps get a few seconds to end, the evaluator until it has "
			      "evaluated the last checkpoint");
	}
	for (int i = 0; i < L->n; i++) {
		struct rt_task *t = &L->t[i];
		if (!task_live(t) || t->stopping)
			continue;
		int64_t at = t->def.ref.job == DT_JOB_EVALUATOR ? L->eval_stop_at : L->ps_stop_at;
		if (now >= at) {
			if (t->def.ref.job == DT_JOB_EVALUATOR)
				emit(L, NULL, "the evaluator did not end within evaluator_timeout: stopping it");
			stop_task(L, t, SIGTERM);
			if (!L->kill_at)
				L->kill_at = dt_deadline_in(L->spec->grace_s);
		}
	}
	return 0;
}

static void reap(struct launcher *L)
{
	for (;;) {
		int ws;
		pid_t pid = waitpid(-1, &ws, WNOHANG);
		if (pid <= 0)
			return;
		for (int i = 0; i < L->n; i++)
			if (L->t[i].pid == pid)
				task_ended(L, &L->t[i], ws);
	}
}

static int64_t next_timer(const struct launcher *L)
{
	int64_t at = dt_deadline_in(1.0);
	for (int i = 0; i < L->n; i++)
		if (L->t[i].restart_at && L->t[i].restart_at < at)
			at = L->t[i].restart_at;
	if (L->kill_at && L->kill_at < at)
		at = L->kill_at;
	/* The end-of-training deadlines count while a task still waits on one
	 * (once passed, they have done their job: no busy loop). */
	for (int i = 0; L->ps_stop_at && !L->tearing_down && i < L->n; i++) {
		const struct rt_task *t = &L->t[i];
		if (!task_live(t) || t->stopping || is_trainer(t))
			continue;
		int64_t due = t->def.ref.job == DT_JOB_EVALUATOR ? L->eval_stop_at : L->ps_stop_at;
		if (due < at)
			at = due;
	}
	return at;
}

static void loop(struct launcher *L)
{
	struct pollfd *fds = dt_xcalloc((size_t)(2 * L->n + 1), sizeof(*fds));
	struct rt_task **owner = dt_xcalloc((size_t)(2 * L->n + 1), sizeof(*owner));
	for (;;) {
		save(L);
		int nf = 0;
		fds[nf].fd = sig_pipe[0];
		fds[nf].events = POLLIN;
		owner[nf++] = NULL;
		for (int i = 0; i < L->n; i++) {
			if (L->t[i].out_fd >= 0) {
				fds[nf] = (struct pollfd){ .fd = L->t[i].out_fd, .events = POLLIN };
				owner[nf++] = &L->t[i];
			}
			if (L->t[i].exec_fd >= 0) {
				fds[nf] = (struct pollfd){ .fd = L->t[i].exec_fd, .events = POLLIN };
				owner[nf++] = &L->t[i];
			}
		}
		int r = poll(fds, (nfds_t)nf, dt_deadline_ms_left(next_timer(L)));
		if (r < 0 && errno != EINTR)
			break;
		for (int k = 0; r > 0 && k < nf; k++) {
			if (!fds[k].revents)
				continue;
			struct rt_task *t = owner[k];
			if (!t) {
				unsigned char sigs[64];
				ssize_t got = read(sig_pipe[0], sigs, sizeof(sigs));
				for (ssize_t j = 0; j < got; j++)
					if ((sigs[j] == SIGINT || sigs[j] == SIGTERM) && L->interrupted) {
						emit(L, NULL, "interrupted again: SIGKILL to every task now");
						L->kill_at = dt_now_ns();
					} else if (sigs[j] == SIGINT || sigs[j] == SIGTERM) {
						L->interrupted = sigs[j];
						teardown(L, sigs[j] == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)");
					}
			} else if (fds[k].fd == t->exec_fd) {
				take_exec_status(L, t);
			} else {
				read_output(L, t);
			}
		}
		reap(L);
		int64_t now = dt_now_ns();
		for (int i = 0; i < L->n; i++) {
			struct rt_task *t = &L->t[i];
			if (t->restart_at && now >= t->restart_at && !L->tearing_down) {
				struct dt_err err = DT_ERR_INIT;
				t->restart_at = 0;
				if (start_task(L, t, &err)) {
					emit(L, t, err.msg);
					set_state(L, t, DT_TS_FAILED, "(restart failed)");
					if (!L->first_failure)
						L->first_failure = 1;
				}
			}
		}
		if (L->kill_at && now >= L->kill_at) {
			for (int i = 0; i < L->n; i++)
				if (L->t[i].pid > 0 && L->t[i].stopping) {
					kill(-L->t[i].pid, SIGKILL);
					kill(L->t[i].pid, SIGKILL);
				}
			L->kill_at = 0;
		}
		if (check_end(L)) {
			/* Drain what the ended tasks left in their pipes. */
			for (int i = 0; i < L->n; i++)
				if (L->t[i].out_fd >= 0)
					read_output(L, &L->t[i]);
			break;
		}
	}
	free(fds);
	free(owner);
}

/* CPU sets: each task with `cpus` gets that many of the launcher's allowed
 * CPUs, handed out round-robin so tasks spread over the machine. */
static void assign_cpus(struct launcher *L)
{
	cpu_set_t allowed;
	int list[CPU_SETSIZE], nlist = 0;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
		return;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &allowed))
			list[nlist++] = c;
	if (!nlist)
		return;
	int next = 0;
	for (int i = 0; i < L->n; i++) {
		int want = L->spec->res[L->t[i].def.group].cpus;
		CPU_ZERO(&L->t[i].cpus);
		L->t[i].ncpus = 0;
		for (int k = 0; k < want && k < nlist; k++) {
			CPU_SET(list[next % nlist], &L->t[i].cpus);
			next++;
			L->t[i].ncpus++;
		}
	}
}

static enum dt_status setup(struct launcher *L, struct dt_err *err)
{
	const struct dt_launch_spec *s = L->spec;
	struct dt_launch_task defs[DT_LAUNCH_MAX_TASKS];
	L->n = dt_launch_tasks(s, defs);
	L->t = dt_xcalloc((size_t)L->n, sizeof(*L->t));
	enum dt_status st = L->opts->exp_id ? dt_exp_create_id(L->opts->home, L->opts->exp_id, &L->exp, err)
					    : dt_exp_create(L->opts->home, &L->exp, err);
	if (st)
		return st;
	/* One secret per experiment, in its state directory, readable by its owner only. */
	snprintf(L->secret_path, sizeof(L->secret_path), "%.500s/cluster_secret", L->exp.dir);
	if ((st = dt_auth_secret_new(L->secret_path, err)))
		return dt_err_prefix(err, "experiment %s", L->exp.id);
	snprintf(L->exp.name, sizeof(L->exp.name), "%s", s->name ? s->name : "experiment");
	snprintf(L->exp.spec, sizeof(L->exp.spec), "%s", s->path ? s->path : "");
	if (s->output_dir) {
		char abs[PATH_MAX];
		if (s->output_dir[0] != '/' && getcwd(abs, sizeof(abs)))
			snprintf(L->output_dir, sizeof(L->output_dir), "%.200s/%.300s", abs, s->output_dir);
		else
			snprintf(L->output_dir, sizeof(L->output_dir), "%s", s->output_dir);
	} else {
		snprintf(L->output_dir, sizeof(L->output_dir), "%.500s/output", L->exp.dir);
	}
	snprintf(L->exp.output_dir, sizeof(L->exp.output_dir), "%s", L->output_dir);
	L->exp.launcher_pid = getpid();
	L->exp.launcher_start = dt_proc_start_time(getpid());
	L->exp.state = DT_TS_RUNNING;
	L->exp.exit_code = -1;
	L->exp.started = dt_wall_seconds();
	L->exp.tasks = dt_xcalloc((size_t)L->n, sizeof(*L->exp.tasks));
	L->exp.ntasks = L->n;

	int ports[DT_LAUNCH_MAX_TASKS];
	if ((st = dt_launch_pick_ports(ports, L->n, err)))
		return st;
	char addr_buf[DT_LAUNCH_MAX_TASKS][32];
	const char *addrs[DT_LAUNCH_MAX_TASKS];
	for (int i = 0; i < L->n; i++) {
		snprintf(addr_buf[i], sizeof(addr_buf[i]), "127.0.0.1:%d", ports[i]);
		addrs[i] = addr_buf[i];
	}
	L->label_width = 0;
	for (int i = 0; i < L->n; i++) {
		struct rt_task *t = &L->t[i];
		t->def = defs[i];
		t->out_fd = t->exec_fd = -1;
		dt_launch_task_label(t->label, sizeof(t->label), L->exp.id, &t->def);
		int w = (int)strlen(t->label);
		if (w > L->label_width)
			L->label_width = w;
		t->tf_config = dt_launch_tf_config(defs, L->n, addrs, i);
		t->argv = dt_launch_argv(s, &t->def, L->opts->bin, L->output_dir, NULL);
		struct dt_exp_task *et = &L->exp.tasks[i];
		snprintf(et->name, sizeof(et->name), "%s", t->def.name);
		et->exit_code = -1;
		char path[700];
		dt_exp_log_path(&L->exp, t->def.name, path, sizeof(path));
		t->log = fopen(path, "ae");
		if (!t->log)
			return dt_err_set(err, DT_IO, "cannot open the log '%s': %s", path, strerror(errno));
		if (s->res[t->def.group].mem_bytes > 0) {
			char cg[80];
			snprintf(cg, sizeof(cg), "%s-%s", L->exp.id, t->def.name);
			dt__cgroup_prepare(cg, s->res[t->def.group].mem_bytes, t->cgroup, sizeof(t->cgroup));
		}
	}
	assign_cpus(L);
	if (mkdir(L->output_dir, 0755) != 0 && errno != EEXIST)
		return dt_err_set(err, DT_IO, "cannot create the output dir '%s': %s", L->output_dir, strerror(errno));
	return DT_OK;
}

static void cleanup(struct launcher *L)
{
	for (int i = 0; i < L->n; i++) {
		struct rt_task *t = &L->t[i];
		free(t->tf_config);
		dt_launch_argv_free(t->argv);
		if (t->out_fd >= 0)
			close(t->out_fd);
		if (t->exec_fd >= 0)
			close(t->exec_fd);
		if (t->log)
			fclose(t->log);
		if (t->cgroup[0])
			rmdir(t->cgroup);
	}
	free(L->t);
	dt_exp_release(&L->exp);
}

enum dt_status dt_launch_run(const struct dt_launch_spec *s, const struct dt_launch_opts *o, int *exit_code,
			     struct dt_err *err)
{
	struct launcher L = { .spec = s, .opts = o, .guard_fd = -1 };
	*exit_code = 1;
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return dt_err_set(err, DT_RUNTIME, "cannot create a pipe: %s", strerror(errno));
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART | SA_NOCLDSTOP }, old[3];
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, &old[0]);
	sigaction(SIGINT, &sa, &old[1]);
	sigaction(SIGTERM, &sa, &old[2]);
	struct sigaction ign = { .sa_handler = SIG_IGN }, old_pipe;
	sigaction(SIGPIPE, &ign, &old_pipe);

	enum dt_status st = setup(&L, err);
	if (!st && (L.guard_fd = dt__guard_start(&L.guard_pid)) < 0)
		st = dt_err_set(err, DT_RUNTIME, "cannot start the launcher's guard process: %s", strerror(errno));
	if (!st) {
		char text[1400];
		snprintf(text, sizeof(text), "--> STARTING experiment '%s' (%d tasks, mode %s, restart %s); output dir %s; "
					     "state %s", L.exp.name, L.n, dt_launch_mode_name(s->mode),
			 dt_restart_policy_name(s->restart), L.output_dir, L.exp.dir);
		emit(&L, NULL, text);
		for (int i = 0; i < L.n; i++)
			set_state(&L, &L.t[i], DT_TS_CREATED, NULL);
		save(&L);
		for (int i = 0; i < L.n && !st; i++)
			st = start_task(&L, &L.t[i], err);
		if (st)
			teardown(&L, "a task could not start");
		loop(&L);
		*exit_code = L.interrupted ? 128 + L.interrupted : L.first_failure;
		if (st && !*exit_code)
			*exit_code = 1;
		L.exp.state = L.interrupted ? DT_TS_KILLED : *exit_code ? DT_TS_FAILED : DT_TS_FINISHED;
		L.exp.exit_code = *exit_code;
		L.exp.ended = dt_wall_seconds();
		char end[128];
		snprintf(end, sizeof(end), "--> %s (exit code %d)", dt_task_state_name(L.exp.state), *exit_code);
		emit(&L, NULL, end);
		L.dirty = 1;
		save(&L);
		if (st)
			st = DT_OK; /* reported above; the exit code carries it */
	}
	if (L.guard_fd >= 0) {
		dt__guard_send(L.guard_fd, 'Q', 0);
		close(L.guard_fd);
		int ws;
		while (waitpid(L.guard_pid, &ws, 0) < 0 && errno == EINTR) {
		}
	}
	cleanup(&L);
	sigaction(SIGCHLD, &old[0], NULL);
	sigaction(SIGINT, &old[1], NULL);
	sigaction(SIGTERM, &old[2], NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	close(sig_pipe[0]);
	close(sig_pipe[1]);
	sig_pipe[0] = sig_pipe[1] = -1;
	return st;
}
