#include "cluster_procs.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dt_test.h"

/* ---- tasks ---- */

void task_start(struct task *t, const char *name, const char *const *argv, const char *const *env)
{
	memset(t, 0, sizeof(*t));
	t->status = -1;
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->out, sizeof(t->out), "%s/%s.out", dt_test_tmpdir(), name);
	snprintf(t->err, sizeof(t->err), "%s/%s.err", dt_test_tmpdir(), name);
	/* Truncated here, before the fork, not in the child: a task started again
	 * under the same name (a second cluster in one test) must not show its
	 * predecessor's output to a task_wait_log that runs before the child is
	 * scheduled (on a loaded machine, a stale "step 100/" matched at once and
	 * the test killed a task that had not started yet). */
	int out = open(t->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int err = open(t->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	DT_CHECK(out >= 0 && err >= 0);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		if (in < 0)
			_exit(126);
		dup2(in, 0);
		dup2(out, 1);
		dup2(err, 2);
		for (int i = 0; env && env[i]; i++)
			putenv(strdup(env[i]));
		char *args[64];
		int n = 0;
		for (; argv[n] && n < 63; n++)
			args[n] = strdup(argv[n]);
		args[n] = NULL;
		const char *prog = strcmp(argv[0], "dtrain") == 0 ? dt_test_dtrain_bin() : argv[0];
		execv(prog, args);
		_exit(127);
	}
	close(out);
	close(err);
	t->pid = pid;
}

int task_wait(struct task *t, double timeout_s)
{
	if (!t->pid)
		return t->status;
	double end = cli_now_s() + timeout_s;
	for (;;) {
		int st;
		pid_t r = waitpid(t->pid, &st, WNOHANG);
		if (r == t->pid) {
			t->pid = 0;
			t->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			return t->status;
		}
		if (cli_now_s() >= end)
			return -1;
		cli_sleep_ms(20);
	}
}

void task_kill(struct task *t)
{
	if (!t->pid)
		return;
	kill(t->pid, SIGKILL);
	int st;
	while (waitpid(t->pid, &st, 0) < 0 && errno == EINTR) {
	}
	t->pid = 0;
	t->status = 128 + SIGKILL;
}

char *task_read(const struct task *t, int err)
{
	char *s = cli_read_file(err ? t->err : t->out);
	if (!s) {
		s = calloc(1, 1);
		DT_CHECK(s != NULL);
	}
	return s;
}

int task_wait_log(const struct task *t, const char *text, double timeout_s)
{
	double end = cli_now_s() + timeout_s;
	for (;;) {
		char *s = task_read(t, 1);
		int found = strstr(s, text) != NULL;
		free(s);
		if (found)
			return 1;
		if (cli_now_s() >= end)
			return 0;
		cli_sleep_ms(50);
	}
}

void tasks_dump(const struct task *tasks, int n)
{
	for (int i = 0; i < n; i++) {
		char *s = task_read(&tasks[i], 1);
		size_t len = strlen(s);
		fprintf(stderr, "---- %s (status %d), last of stderr:\n%s\n", tasks[i].name, tasks[i].status,
			len > 1500 ? s + len - 1500 : s);
		free(s);
	}
}

/* ---- clusters ---- */

/* Appends `"job": ["127.0.0.1:P", ...]` for ports[from..from+count) to the spec being built. */
static void add_job(char *spec, size_t cap, const char *job, const int *ports, int from, int count)
{
	if (!count)
		return;
	size_t used = strlen(spec);
	snprintf(spec + used, cap - used, "%s\"%s\": [", used > 1 ? ", " : "", job);
	for (int i = 0; i < count; i++) {
		used = strlen(spec);
		snprintf(spec + used, cap - used, "%s\"127.0.0.1:%d\"", i ? ", " : "", ports[from + i]);
	}
	used = strlen(spec);
	snprintf(spec + used, cap - used, "]");
}

void cluster_init(struct cluster *c, const char *head, int workers, int ps)
{
	memset(c, 0, sizeof(*c));
	c->head = head != NULL;
	c->workers = workers;
	c->ps = ps;
	int total = c->head + workers + ps;
	DT_CHECK(total >= 1 && total <= CLUSTER_MAX_TASKS);
	cli_free_ports(c->ports, total);
	snprintf(c->spec, sizeof(c->spec), "{");
	if (head)
		add_job(c->spec, sizeof(c->spec), head, c->ports, 0, 1);
	add_job(c->spec, sizeof(c->spec), "worker", c->ports, c->head, workers);
	add_job(c->spec, sizeof(c->spec), "ps", c->ports, c->head + workers, ps);
	size_t used = strlen(c->spec);
	snprintf(c->spec + used, sizeof(c->spec) - used, "}");
	DT_CHECK(strlen(c->spec) < sizeof(c->spec) - 1);
}

int cluster_port(const struct cluster *c, const char *type, int index)
{
	if (strcmp(type, "worker") == 0) {
		DT_CHECK(index >= 0 && index < c->workers);
		return c->ports[c->head + index];
	}
	if (strcmp(type, "ps") == 0) {
		DT_CHECK(index >= 0 && index < c->ps);
		return c->ports[c->head + c->workers + index];
	}
	DT_CHECK(c->head && index == 0);
	return c->ports[0];
}

void cluster_output_dir(struct cluster *c, const char *name)
{
	snprintf(c->out_dir, sizeof(c->out_dir), "%s/%s", dt_test_tmpdir(), name);
	snprintf(c->out_flag, sizeof(c->out_flag), "--output_dir=%s", c->out_dir);
}

void cluster_tf_config(const struct cluster *c, const char *type, int index, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "TF_CONFIG={\"cluster\": %s, \"task\": {\"type\": \"%s\", \"index\": %d}}", c->spec,
			 type, index);
	DT_CHECK(n > 0 && (size_t)n < cap);
}

struct task *cluster_start(struct cluster *c, const char *type, int index, const char *name,
			   const char *const *argv, const char *const *extra_env)
{
	DT_CHECK(c->n < CLUSTER_MAX_TASKS);
	struct task *t = &c->tasks[c->n++];
	char tf_config[1400], own_name[32];
	cluster_tf_config(c, type, index, tf_config, sizeof(tf_config));
	if (!name) {
		snprintf(own_name, sizeof(own_name), "%s%d", type, index);
		name = own_name;
	}
	const char *env[8] = { tf_config };
	int n = 1;
	for (int i = 0; extra_env && extra_env[i]; i++) {
		DT_CHECK(n < 7);
		env[n++] = extra_env[i];
	}
	env[n] = NULL;
	task_start(t, name, argv, env);
	return t;
}

struct task *cluster_start_train_as(struct cluster *c, const char *type, int index, const char *name,
				    const char *const *args, const char *flag, const char *const *extra_env)
{
	const char *argv[24] = { "dtrain", "train" };
	int n = 2;
	for (int i = 0; args[i] && n < 22; i++)
		argv[n++] = args[i];
	if (flag)
		argv[n++] = flag;
	argv[n] = NULL;
	return cluster_start(c, type, index, name, argv, extra_env);
}

struct task *cluster_start_train(struct cluster *c, const char *type, int index, const char *const *args)
{
	return cluster_start_train_as(c, type, index, NULL, args, NULL, NULL);
}

int cluster_start_make_configs(struct cluster *c, char *out, int max, const char *train_flags, const char *head)
{
	memset(c, 0, sizeof(*c));
	DT_CHECK(max <= CLUSTER_MAX_TASKS);
	char want[64];
	snprintf(want, sizeof(want), "\"type\": \"%s\"", head);
	char *save = NULL;
	int found = -1;
	for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *tab = strchr(line, '\t');
		if (!tab)
			continue; /* the "Assuming ..." line */
		*tab = 0;
		DT_CHECK(c->n < max);
		char cmd[2048], name[16];
		int n = snprintf(cmd, sizeof(cmd), "TF_CONFIG=%s exec '%s' train %s %s", line, dt_test_dtrain_bin(), tab + 1,
				 train_flags);
		DT_CHECK(n > 0 && (size_t)n < sizeof(cmd));
		if (strstr(line, want))
			found = c->n;
		snprintf(name, sizeof(name), "line%d", c->n);
		task_start(&c->tasks[c->n], name, (const char *[]){ "/bin/sh", "-c", cmd, NULL }, NULL);
		c->n++;
	}
	return found;
}

void cluster_kill_all(struct cluster *c)
{
	for (int i = 0; i < c->n; i++) {
		if (c->tasks[i].pid > 0)
			kill(c->tasks[i].pid, SIGCONT);
		task_kill(&c->tasks[i]);
	}
}

void cluster_expect_exit(const char *file, int line, struct cluster *c, struct task *t, int code, double timeout_s)
{
	int st = task_wait(t, timeout_s);
	if (st != code) {
		tasks_dump(c->tasks, c->n);
		cluster_kill_all(c);
		dt_test_fail(file, line, "%s exited with %d, expected %d", t->name, st, code);
	}
}

void cluster_expect_log(const char *file, int line, struct cluster *c, const struct task *t, const char *text,
			double timeout_s)
{
	if (!task_wait_log(t, text, timeout_s)) {
		tasks_dump(c->tasks, c->n);
		cluster_kill_all(c);
		dt_test_fail(file, line, "%s never logged '%s'", t->name, text);
	}
}
