/*
 * dt_test.c — the runner: forks each test into its own process group with a
 * timeout and a private temp dir, runs up to -j of them at once, prints
 * each result and one summary line ("N passed, N failed, N skipped").
 */
#include "dt_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 2048
#define EXIT_SKIP 77

struct test_case {
	const char *suite, *name;
	dt_test_fn fn;
	int timeout_s;
};

/* LeakSanitizer's entry point, present only in sanitizer builds. Tests end
 * with _exit (which skips LSan's atexit check), so the runner asks for the
 * leak check itself after a test body returns. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static struct test_case tests[MAX_TESTS];
static int test_count;
static char current_tmpdir[512];

void dt_test_register(const char *suite, const char *name, dt_test_fn fn, int timeout_s)
{
	if (test_count >= MAX_TESTS) {
		fprintf(stderr, "too many tests (raise MAX_TESTS)\n");
		abort();
	}
	tests[test_count++] = (struct test_case){ suite, name, fn, timeout_s };
}

void dt_test_fail(const char *file, int line, const char *fmt, ...)
{
	fprintf(stderr, "%s:%d: ", file, line);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(NULL);
	_exit(1);
}

void dt_test_skip(const char *reason)
{
	fprintf(stderr, "skip reason: %s\n", reason);
	fflush(NULL);
	_exit(EXIT_SKIP);
}

const char *dt_test_tmpdir(void)
{
	return current_tmpdir;
}

char *dt_test_path(char *buf, size_t cap, const char *name)
{
	snprintf(buf, cap, "%s/%s", current_tmpdir, name);
	return buf;
}

void dt_test_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
		dt_test_fail(__FILE__, __LINE__, "cannot write fixture '%s': %s", path, strerror(errno));
}

const char *dt_test_dtrain_bin(void)
{
	const char *bin = getenv("DTRAIN_BIN");
	return bin && *bin ? bin : "build/dtrain";
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp_fd(int fd)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	lseek(fd, 0, SEEK_SET);
	for (;;) {
		if (len + 1024 > cap) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
		ssize_t r = read(fd, buf + len, cap - len - 1);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	buf[len] = '\0';
	return buf;
}

void dt_test_run(struct dt_run *r, const char *const *argv, const char *const *env, double timeout_s)
{
	memset(r, 0, sizeof(*r));
	char out_path[600], err_path[600];
	static int serial;
	snprintf(out_path, sizeof(out_path), "%s/.run%d.out", current_tmpdir[0] ? current_tmpdir : "/tmp", serial);
	snprintf(err_path, sizeof(err_path), "%s/.run%d.err", current_tmpdir[0] ? current_tmpdir : "/tmp", serial++);
	int out_fd = open(out_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int err_fd = open(err_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out_fd < 0 || err_fd < 0)
		dt_test_fail(__FILE__, __LINE__, "cannot create capture files: %s", strerror(errno));
	double start = now_s();
	pid_t pid = fork();
	if (pid < 0)
		dt_test_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		dup2(devnull, 0);
		dup2(out_fd, 1);
		dup2(err_fd, 2);
		for (const char *const *e = env; e && *e; e++)
			putenv((char *)(uintptr_t)*e);
		const char *prog = argv[0];
		if (strcmp(prog, "dtrain") == 0)
			prog = dt_test_dtrain_bin();
		execvp(prog, (char *const *)(uintptr_t)argv);
		fprintf(stderr, "cannot exec '%s': %s\n", prog, strerror(errno));
		_exit(127);
	}
	int status = 0;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (now_s() - start > timeout_s) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			r->timed_out = 1;
			break;
		}
		usleep(2000);
	}
	r->seconds = now_s() - start;
	r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	r->out = slurp_fd(out_fd);
	r->err = slurp_fd(err_fd);
	close(out_fd);
	close(err_fd);
	unlink(out_path);
	unlink(err_path);
}

void dt_run_release(struct dt_run *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

/* ---- the runner ---- */

struct running {
	pid_t pid;
	int index;
	double start;
	int log_fd;
	char tmpdir[512];
	int killed_for_timeout;
};

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(path);
}

static void remove_tree(const char *dir)
{
	nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int matches_filters(const struct test_case *t, int nfilters, char **filters)
{
	if (nfilters == 0)
		return 1;
	char full[256];
	snprintf(full, sizeof(full), "%s.%s", t->suite, t->name);
	for (int i = 0; i < nfilters; i++)
		if (strstr(full, filters[i]))
			return 1;
	return 0;
}

static void start_test(struct running *slot, int index)
{
	const struct test_case *t = &tests[index];
	const char *base = getenv("TMPDIR");
	snprintf(slot->tmpdir, sizeof(slot->tmpdir), "%s/dtrain-test-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(slot->tmpdir)) {
		perror("mkdtemp");
		exit(2);
	}
	char log_path[600];
	snprintf(log_path, sizeof(log_path), "%s.log", slot->tmpdir);
	slot->log_fd = open(log_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	unlink(log_path);
	slot->index = index;
	slot->start = now_s();
	slot->killed_for_timeout = 0;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0) {
		setpgid(0, 0);
		dup2(slot->log_fd, 1);
		dup2(slot->log_fd, 2);
		snprintf(current_tmpdir, sizeof(current_tmpdir), "%s", slot->tmpdir);
		if (chdir(getenv("DT_TEST_ROOT") ? getenv("DT_TEST_ROOT") : ".") != 0)
			_exit(2);
		t->fn();
		fflush(NULL);
		if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check()) {
			fprintf(stderr, "LeakSanitizer found leaks in this test (report above)\n");
			_exit(1);
		}
		_exit(0);
	}
	setpgid(pid, pid);
	slot->pid = pid;
}

static void print_log(int fd)
{
	char *text = slurp_fd(fd);
	if (*text) {
		char *line = strtok(text, "\n");
		while (line) {
			printf("    | %s\n", line);
			line = strtok(NULL, "\n");
		}
	}
	free(text);
}

int main(int argc, char **argv)
{
	int jobs = 2, verbose = 0, list = 0;
	char **filters = calloc((size_t)argc, sizeof(char *));
	char **excludes = calloc((size_t)argc, sizeof(char *));
	int nfilters = 0, nexcludes = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-j") == 0 && i + 1 < argc)
			jobs = atoi(argv[++i]);
		else if (strncmp(argv[i], "-j", 2) == 0 && argv[i][2])
			jobs = atoi(argv[i] + 2);
		else if (strcmp(argv[i], "-v") == 0)
			verbose = 1;
		else if (strcmp(argv[i], "--list") == 0)
			list = 1;
		else if (strcmp(argv[i], "-x") == 0 && i + 1 < argc)
			excludes[nexcludes++] = argv[++i];
		else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			printf("usage: dtrain-tests [-j N] [-v] [--list] [-x EXCLUDE]... [FILTER...]\n"
			       "Runs every test whose suite.name contains one of the FILTERs (all if none)\n"
			       "and none of the EXCLUDEs.\n");
			free(filters);
			free(excludes);
			return 0;
		} else
			filters[nfilters++] = argv[i];
	}
	if (jobs < 1)
		jobs = 1;
	char cwd[512];
	if (!getenv("DT_TEST_ROOT") && getcwd(cwd, sizeof(cwd)))
		setenv("DT_TEST_ROOT", cwd, 1);

	int selected[MAX_TESTS], nsel = 0;
	for (int i = 0; i < test_count; i++)
		if (matches_filters(&tests[i], nfilters, filters) &&
		    (nexcludes == 0 || !matches_filters(&tests[i], nexcludes, excludes)))
			selected[nsel++] = i;
	if (list) {
		for (int i = 0; i < nsel; i++)
			printf("%s.%s\n", tests[selected[i]].suite, tests[selected[i]].name);
		free(filters);
		free(excludes);
		return 0;
	}

	struct running *slots = calloc((size_t)jobs, sizeof(*slots));
	int next = 0, active = 0, passed = 0, failed = 0, skipped = 0;
	double t0 = now_s();
	while (next < nsel || active > 0) {
		for (int s = 0; s < jobs && next < nsel; s++) {
			if (slots[s].pid == 0) {
				start_test(&slots[s], selected[next++]);
				active++;
			}
		}
		int status;
		pid_t done = waitpid(-1, &status, WNOHANG);
		if (done <= 0) {
			/* Enforce timeouts while waiting; bounded by each test's limit. */
			for (int s = 0; s < jobs; s++) {
				if (slots[s].pid && !slots[s].killed_for_timeout &&
				    now_s() - slots[s].start > tests[slots[s].index].timeout_s) {
					kill(-slots[s].pid, SIGKILL);
					slots[s].killed_for_timeout = 1;
				}
			}
			usleep(2000);
			continue;
		}
		int s = 0;
		while (s < jobs && slots[s].pid != done)
			s++;
		if (s == jobs)
			continue; /* a grandchild reparented to us; nothing to report */
		struct running *r = &slots[s];
		const struct test_case *t = &tests[r->index];
		kill(-r->pid, SIGKILL); /* stray children of the test die with it */
		double ms = (now_s() - r->start) * 1000.0;
		int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		if (r->killed_for_timeout) {
			printf("FAIL %s.%s (timed out after %d s)\n", t->suite, t->name, t->timeout_s);
			print_log(r->log_fd);
			failed++;
		} else if (code == 0) {
			printf("PASS %s.%s (%.0f ms)\n", t->suite, t->name, ms);
			if (verbose)
				print_log(r->log_fd);
			passed++;
		} else if (code == EXIT_SKIP) {
			printf("SKIP %s.%s\n", t->suite, t->name);
			print_log(r->log_fd);
			skipped++;
		} else {
			if (WIFSIGNALED(status))
				printf("FAIL %s.%s (killed by signal %d)\n", t->suite, t->name, WTERMSIG(status));
			else
				printf("FAIL %s.%s (exit %d)\n", t->suite, t->name, code);
			print_log(r->log_fd);
			failed++;
		}
		fflush(stdout);
		close(r->log_fd);
		remove_tree(r->tmpdir);
		r->pid = 0;
		active--;
	}
	printf("ran %d tests in %.1f s\n", nsel, now_s() - t0);
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	free(slots);
	free(filters);
	free(excludes);
	return failed ? 1 : 0;
}
