/*
 * child.c — starting one task: fork, set up the child, exec; and free ports.
 *
 * The child, between fork and exec: its own process group; PDEATHSIG so it
 * dies with the launcher; stdin from /dev/null, stdout and stderr into the
 * launcher's pipe; signals back to their defaults; CPU affinity; the memory
 * limit; the task's environment. An exec failure is written (errno, 4 bytes)
 * to a close-on-exec pipe: the launcher reads EOF when the exec succeeded,
 * which is the moment a task becomes RUNNING.
 *
 * Memory limit: cgroup v2 when the launcher's own cgroup is writable and
 * has the memory controller (memory.max in a child cgroup per task: the
 * kernel counts page cache and kills the task on excess, as a container
 * would); otherwise setrlimit(RLIMIT_AS), which every Linux allows but which
 * limits address space (an allocation past it fails, the task exits with an
 * error). That is what happens on cgroup v1 machines and inside containers
 * without a delegated cgroup.
 */
#include "launch/internal.h"
#include "launch/run.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/rng.h"

/* Our cgroup v2 directory with the memory controller available, or "". */
static void own_cgroup(char *buf, size_t cap)
{
	buf[0] = '\0';
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return;
	char line[1024], rel[900] = "";
	int v2 = 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) == 0) {
			snprintf(rel, sizeof(rel), "%.*s", (int)strcspn(line + 3, "\n"), line + 3);
			v2 = 1;
		}
	}
	fclose(f);
	if (!v2)
		return;
	char path[1100], ctl[1200];
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s", strcmp(rel, "/") == 0 ? "" : rel);
	snprintf(ctl, sizeof(ctl), "%s/cgroup.subtree_control", path);
	FILE *c = fopen(ctl, "re");
	if (!c)
		return;
	char ctrls[256] = "";
	if (!fgets(ctrls, sizeof(ctrls), c))
		ctrls[0] = '\0';
	fclose(c);
	if (strstr(ctrls, "memory") && access(path, W_OK) == 0)
		snprintf(buf, cap, "%s", path);
}

/* Creates <our cgroup>/dtrain-<label> with memory.max; "" when cgroup v2
 * cannot do it (the child then uses RLIMIT_AS). */
void dt__cgroup_prepare(const char *label, int64_t bytes, char *dir, size_t cap)
{
	dir[0] = '\0';
	char base[1100];
	own_cgroup(base, sizeof(base));
	if (!base[0])
		return;
	char path[1300], file[1400];
	snprintf(path, sizeof(path), "%s/dtrain-%s", base, label);
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		return;
	snprintf(file, sizeof(file), "%s/memory.max", path);
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char num[32];
	int n = snprintf(num, sizeof(num), "%lld", (long long)bytes);
	ssize_t w = write(fd, num, (size_t)n);
	close(fd);
	if (w == n)
		snprintf(dir, cap, "%s", path);
	else
		rmdir(path);
}

static void child_fail(int fd, int code)
{
	int e = errno;
	ssize_t w = write(fd, &e, sizeof(e));
	(void)w;
	_exit(code);
}

pid_t dt__child_spawn(const struct dt__child *c, int *exec_fd, struct dt_err *err)
{
	int status_pipe[2];
	if (pipe2(status_pipe, O_CLOEXEC) != 0)
		return dt_err_set(err, DT_RUNTIME, "cannot create a pipe: %s", strerror(errno)), -1;
	pid_t parent = getpid();
	fflush(NULL);
	/* Signals stay blocked across fork until the child has reset every
	 * handler: one that came in between would otherwise run the
	 * launcher's handler in the child and write to the launcher's own
	 * self-pipe (a SIGTERM to a task still starting, as the chief's
	 * failure sends, read as the launcher's own: exit 143 for nothing). */
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid_t pid = fork();
	if (pid != 0)
		sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		int e = errno;
		close(status_pipe[0]);
		close(status_pipe[1]);
		dt_err_set(err, DT_RUNTIME, "cannot start task '%s': fork: %s", c->label, strerror(e));
		return -1;
	}
	if (pid > 0) {
		close(status_pipe[1]);
		/* Also from the parent, so a signal sent right after fork already
		 * reaches the group (the child does the same; one of them wins). */
		setpgid(pid, pid);
		*exec_fd = status_pipe[0];
		return pid;
	}
	/* The child. */
	close(status_pipe[0]);
	int fd = status_pipe[1];
	setpgid(0, 0);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		child_fail(fd, 126);
	for (int sig = 1; sig < 32; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	sigset_t none; /* a signal sent since fork is taken now, by its default action */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(c->out_fd, 1) < 0 || dup2(c->out_fd, 2) < 0)
		child_fail(fd, 126);
	if (c->ncpus > 0 && sched_setaffinity(0, sizeof(c->cpus), &c->cpus) != 0)
		child_fail(fd, 126);
	if (c->mem_bytes > 0) {
		int done = 0;
		if (c->cgroup_dir && c->cgroup_dir[0]) {
			char procs[1400];
			snprintf(procs, sizeof(procs), "%s/cgroup.procs", c->cgroup_dir);
			int pf = open(procs, O_WRONLY | O_CLOEXEC);
			done = pf >= 0 && write(pf, "0", 1) == 1;
			if (pf >= 0)
				close(pf);
		}
		struct rlimit rl = { (rlim_t)c->mem_bytes, (rlim_t)c->mem_bytes };
		if (!done && setrlimit(RLIMIT_AS, &rl) != 0)
			child_fail(fd, 126);
	}
	for (int i = 0; c->env[i]; i++)
		if (putenv(c->env[i]) != 0)
			child_fail(fd, 126);
	execv(c->argv[0], c->argv);
	if (errno == ENOENT || errno == EACCES || errno == ENOEXEC) {
		/* A bare command name: look it up in PATH as a shell would. */
		execvp(c->argv[0], c->argv);
	}
	child_fail(fd, errno == ENOENT ? 127 : 126);
	return -1;
}

static int port_free(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	int e = errno;
	close(fd);
	errno = e;
	return ok;
}

enum dt_status dt_launch_pick_ports(int *ports, int n, struct dt_err *err)
{
	/* Below the ephemeral range, so no outgoing connection's local port
	 * takes ours between the check and the task's bind. */
	int lo = 20000, hi = 32767;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
	if (f) {
		int a, b;
		if (fscanf(f, "%d %d", &a, &b) == 2 && a > 2048) {
			hi = a - 1;
			lo = hi > 12000 ? hi - 10000 : 1025;
		}
		fclose(f);
	}
	struct dt_rng rng;
	dt_rng_seed(&rng, (uint64_t)dt_now_ns() ^ ((uint64_t)getpid() << 32));
	int tries = 0;
	for (int i = 0; i < n; i++) {
		for (;;) {
			if (++tries > 2000)
				return dt_err_set(err, DT_RUNTIME, "cannot find %d free loopback ports in %d-%d after %d tries", n,
						  lo, hi, tries - 1);
			int p = lo + (int)dt_rng_below(&rng, (uint64_t)(hi - lo + 1));
			int dup = 0;
			for (int k = 0; k < i; k++)
				dup |= ports[k] == p;
			if (dup)
				continue;
			int r = port_free(p);
			if (r == 1) {
				ports[i] = p;
				break;
			}
			if (r < 0 || (errno != EADDRINUSE && errno != EACCES))
				return dt_err_set(err, DT_RUNTIME, "cannot check loopback port %d: %s", p, strerror(errno));
		}
	}
	return DT_OK;
}

/* ---- the guard: no task outlives the launcher ----
 * PR_SET_PDEATHSIG reaches only the task's own process, not what it starts
 * (a shell's children). The guard is a small process forked first, which
 * reads the process groups of the tasks from a pipe; when the launcher dies
 * in any way (SIGKILL included) the kernel closes the pipe, the guard reads
 * EOF and SIGKILLs every group still listed. The launcher drops a group once
 * it has reaped the task and killed what was left in it, so a reused id is
 * never signalled; at a normal end it says 'Q' and the guard exits. */

#define GUARD_MAX 1024

static void guard_main(int fd)
{
	signal(SIGINT, SIG_IGN); /* Ctrl-C reaches the launcher's process group */
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	static pid_t groups[GUARD_MAX];
	int n = 0;
	for (;;) {
		unsigned char msg[5];
		size_t got = 0;
		while (got < sizeof(msg)) {
			ssize_t r = read(fd, msg + got, sizeof(msg) - got);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			got += (size_t)r;
		}
		if (got < sizeof(msg)) { /* EOF: the launcher is gone */
			for (int i = 0; i < n; i++)
				kill(-groups[i], SIGKILL);
			_exit(0);
		}
		pid_t pg = (pid_t)((uint32_t)msg[1] | (uint32_t)msg[2] << 8 | (uint32_t)msg[3] << 16 | (uint32_t)msg[4] << 24);
		if (msg[0] == 'Q')
			_exit(0);
		if (msg[0] == 'A' && n < GUARD_MAX)
			groups[n++] = pg;
		if (msg[0] == 'D')
			for (int i = 0; i < n; i++)
				if (groups[i] == pg) {
					groups[i] = groups[--n];
					break;
				}
	}
}

int dt__guard_start(pid_t *pid)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	fflush(NULL);
	pid_t g = fork();
	if (g < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (g == 0) {
		close(p[1]);
		/* Only the read end stays: other fds of the launcher would keep
		 * pipes open for no one. */
		for (int fd = 3; fd < 1024; fd++)
			if (fd != p[0])
				close(fd);
		guard_main(p[0]);
	}
	close(p[0]);
	*pid = g;
	return p[1];
}

void dt__guard_send(int fd, char what, pid_t group)
{
	if (fd < 0)
		return;
	uint32_t v = (uint32_t)group;
	unsigned char msg[5] = { (unsigned char)what, (unsigned char)v, (unsigned char)(v >> 8),
				 (unsigned char)(v >> 16), (unsigned char)(v >> 24) };
	ssize_t w = write(fd, msg, sizeof(msg)); /* 5 bytes < PIPE_BUF: atomic */
	(void)w;
}
