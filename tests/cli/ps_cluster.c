#include "ps_cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dt_test.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

void ps_free_ports(int *ports, int n)
{
	for (int i = 0; i < n; i++) {
		for (int attempt = 0;; attempt++) {
			DT_CHECK(attempt < 100);
			int fd = socket(AF_INET, SOCK_STREAM, 0);
			DT_CHECK(fd >= 0);
			struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
			a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			socklen_t len = sizeof(a);
			int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
				 getsockname(fd, (struct sockaddr *)&a, &len) == 0;
			close(fd);
			if (!ok)
				continue;
			int port = ntohs(a.sin_port), dup = 0;
			for (int j = 0; j < i; j++)
				dup |= ports[j] == port;
			if (!dup) {
				ports[i] = port;
				break;
			}
		}
	}
}

void ps_task_start(struct ps_task *t, const char *name, const char *const *argv, const char *const *env)
{
	memset(t, 0, sizeof(*t));
	t->status = -1;
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->out, sizeof(t->out), "%s/%s.out", dt_test_tmpdir(), name);
	snprintf(t->err, sizeof(t->err), "%s/%s.err", dt_test_tmpdir(), name);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		int out = open(t->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int err = open(t->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (in < 0 || out < 0 || err < 0)
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
	t->pid = pid;
}

int ps_task_wait(struct ps_task *t, double timeout_s)
{
	if (!t->pid)
		return t->status;
	double end = now_s() + timeout_s;
	for (;;) {
		int st;
		pid_t r = waitpid(t->pid, &st, WNOHANG);
		if (r == t->pid) {
			t->pid = 0;
			t->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			return t->status;
		}
		if (now_s() >= end)
			return -1;
		sleep_ms(20);
	}
}

void ps_task_kill(struct ps_task *t)
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

char *ps_task_read(const struct ps_task *t, int err)
{
	FILE *f = fopen(err ? t->err : t->out, "rb");
	char *buf = calloc(1, 1);
	if (!f)
		return buf;
	size_t len = 0;
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		buf = realloc(buf, len + n + 1);
		memcpy(buf + len, chunk, n);
		len += n;
		buf[len] = 0;
	}
	fclose(f);
	return buf;
}

int ps_task_wait_log(const struct ps_task *t, const char *text, double timeout_s)
{
	double end = now_s() + timeout_s;
	for (;;) {
		char *s = ps_task_read(t, 1);
		int found = strstr(s, text) != NULL;
		free(s);
		if (found)
			return 1;
		if (now_s() >= end)
			return 0;
		sleep_ms(50);
	}
}

void ps_tasks_dump(const struct ps_task *tasks, int n)
{
	for (int i = 0; i < n; i++) {
		char *s = ps_task_read(&tasks[i], 1);
		size_t len = strlen(s);
		fprintf(stderr, "---- %s (status %d), last of stderr:\n%s\n", tasks[i].name, tasks[i].status,
			len > 1500 ? s + len - 1500 : s);
		free(s);
	}
}
