#include "cli_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "launch/state.h"

double cli_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

char *cli_read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = calloc(1, 1);
	DT_CHECK(buf != NULL);
	size_t len = 0;
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		char *grown = realloc(buf, len + n + 1);
		DT_CHECK(grown != NULL);
		buf = grown;
		memcpy(buf + len, chunk, n);
		len += n;
		buf[len] = 0;
	}
	fclose(f);
	return buf;
}

/* The lowest port of the kernel's ephemeral range (the ports a connect()
 * without bind() takes), or 32768, its default, when it cannot be read. */
static int ephemeral_low(void)
{
	int lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	return lo;
}

/* Whether `port` (0: any) binds on loopback now; *got: the port bound. */
static int binds(int port, int *got)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	DT_CHECK(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0;
	close(fd);
	*got = ntohs(a.sin_port);
	return ok;
}

void cli_free_ports(int *ports, int n)
{
	/* Below the ephemeral range where it leaves room: a port the kernel
	 * handed out for port 0 is free now, but any test's outgoing connection
	 * (a stranger's, a dial) may take it before the task listens there
	 * ("Address already in use" in a -j2 sanitizer run); a port below the
	 * range is only ever taken by an explicit bind. */
	const int lo = ephemeral_low(), below = lo > 11024 ? lo - 10024 : 0;
	unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
	for (int i = 0; i < n; i++) {
		for (int attempt = 0;; attempt++) {
			DT_CHECK(attempt < 100);
			int port = 0;
			if (!binds(below && attempt < 90 ? 10000 + (int)(rand_r(&seed) % (unsigned)below) : 0, &port))
				continue;
			int dup = 0;
			for (int j = 0; j < i; j++)
				dup |= ports[j] == port;
			if (!dup) {
				ports[i] = port;
				break;
			}
		}
	}
}

double cli_accuracy_of(const char *text)
{
	const char *p = text ? strstr(text, "accuracy = ") : NULL;
	return p ? atof(p + strlen("accuracy = ")) : -1;
}

int cli_check_t2t_lines(const char *who, const char *log)
{
	int lines = 0;
	for (const char *p = log; (p = strstr(p, " loss ")) != NULL; p += 6) {
		const char *end = strchr(p, '\n');
		const int n = (int)(end ? (size_t)(end - p) : strlen(p));
		char line[600];
		snprintf(line, sizeof(line), "%.*s", n, p);
		if (!strstr(line, " eta ")) /* not a progress line (the run's summary, an evaluation) */
			continue;
		lines++;
		if (!strstr(line, " accuracy ") || !strstr(line, " accuracy_per_sequence ") ||
		    !strstr(line, " neg_log_perplexity ") || !strstr(line, " tokens/s")) {
			fprintf(stderr, "%s: a progress line without t2t's metrics and tokens/s:%s\n", who, line);
			DT_CHECK(0);
		}
	}
	fprintf(stderr, "%s: %d progress line(s) with t2t's metrics and tokens/s\n", who, lines);
	return lines;
}

int cli_events_name(const char *dir, const char *tag)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "grep -aqF '%s' '%s'/events.out.tfevents.*", tag, dir);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "/bin/sh", "-c", cmd, NULL }, NULL, 20);
	const int found = r.exit_code == 0;
	dt_run_release(&r);
	return found;
}

void cli_check_t2t_summaries(const char *who, const char *dir, const char *problem, int bleu)
{
	static const char *const metrics[] = { "accuracy", "accuracy_per_sequence", "neg_log_perplexity",
					       "approx_bleu_score" };
	for (int i = 0; i < 4; i++) {
		char t2t[200];
		snprintf(t2t, sizeof(t2t), "metrics-%s/targets/%s", problem, metrics[i]);
		const int want = i < 3 || bleu, plain = cli_events_name(dir, metrics[i]), theirs = cli_events_name(dir, t2t);
		if (plain != want || theirs != want) {
			fprintf(stderr, "%s: the summaries in '%s' %s '%s' (%s) and %s '%s' (%s)\n", who, dir,
				plain ? "have" : "lack", metrics[i], want ? "wanted" : "unwanted", theirs ? "have" : "lack",
				t2t, want ? "wanted" : "unwanted");
			DT_CHECK(0);
		}
	}
}

void cli_private_home(void)
{
	char home[600];
	dt_test_path(home, sizeof(home), "home");
	setenv("DTRAIN_HOME", home, 1);
	unsetenv("TF_CONFIG");
	unsetenv("SLURM_PROCID");
	unsetenv("OMPI_COMM_WORLD_RANK");
}

void cli_write_spec(char *path, size_t cap, const char *name, const char *text)
{
	dt_test_path(path, cap, name);
	dt_test_write_file(path, text, strlen(text));
}

void cli_run(struct dt_run *r, const char *const *args, double timeout_s)
{
	const char *argv[32] = { "dtrain" };
	int n = 1;
	for (; args[n - 1] && n < 31; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	dt_test_run(r, argv, NULL, timeout_s);
	DT_CHECK(!r->timed_out);
}

int cli_pid_alive(pid_t pid)
{
	return dt_proc_start_time(pid) != 0;
}

int cli_proc_mentions(pid_t pid, const char *text)
{
	const char *files[] = { "environ", "cmdline" };
	enum { CAP = 1 << 16 };
	char *buf = malloc(CAP);
	DT_CHECK(buf != NULL);
	int found = 0;
	for (int f = 0; f < 2 && !found; f++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[f]);
		FILE *fp = fopen(path, "rb");
		if (!fp)
			continue;
		size_t n = fread(buf, 1, CAP - 1, fp);
		fclose(fp);
		for (size_t i = 0; i < n; i++)
			if (buf[i] == '\0')
				buf[i] = '\n';
		buf[n] = '\0';
		found = strstr(buf, text) != NULL;
	}
	free(buf);
	return found;
}

/* True when the environment block env (len bytes of NUL-ended entries) holds `entry`. */
static int env_has(const char *env, size_t len, const char *entry)
{
	for (size_t k = 0; k < len; k += strlen(env + k) + 1)
		if (strcmp(env + k, entry) == 0)
			return 1;
	return 0;
}

int cli_processes_with_env(const char *const *entries, double timeout_s)
{
	double end = cli_now_s() + timeout_s;
	int left;
	do {
		left = 0;
		DIR *proc = opendir("/proc");
		struct dirent *de;
		while (proc && (de = readdir(proc)) != NULL) {
			pid_t pid = atoi(de->d_name);
			if (pid <= 1 || pid == getpid() || !cli_pid_alive(pid))
				continue;
			char path[64];
			snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
			FILE *f = fopen(path, "rb");
			if (!f)
				continue;
			static char env[1 << 16];
			size_t len = fread(env, 1, sizeof(env) - 1, f);
			fclose(f);
			env[len] = '\0';
			int all = 1;
			for (int i = 0; entries[i] && all; i++)
				all = env_has(env, len, entries[i]);
			left += all;
		}
		if (proc)
			closedir(proc);
		if (left)
			cli_sleep_ms(50);
	} while (left && cli_now_s() < end);
	return left;
}
