#include "slurm_util.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"

void slurm_start(struct dt_run *r, char *dir, size_t cap)
{
	char script[PATH_MAX];
	dt_test_path(dir, cap, "slurm");
	DT_CHECK(mkdir(dir, 0700) == 0);
	DT_CHECK(realpath("tests/slurm/start-cluster.sh", script) != NULL);
	int ports[2];
	cli_free_ports(ports, 2);
	char ctld[16], slurmd[16];
	snprintf(ctld, sizeof(ctld), "%d", ports[0]);
	snprintf(slurmd, sizeof(slurmd), "%d", ports[1]);
	dt_test_run(r, (const char *[]){ script, dir, ctld, slurmd, NULL }, NULL, 30);
}

/* The parent of `pid`, or 0. */
static pid_t parent_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *stat = cli_read_file(path);
	char *close_paren = stat ? strrchr(stat, ')') : NULL;
	pid_t ppid = close_paren ? (pid_t)atoi(close_paren + 4) : 0; /* ") S <ppid>" */
	free(stat);
	return ppid;
}

/* True while a process of the test's Slurm runs that is neither one of
 * the n `daemons` nor their child (slurmctld keeps a slurmscriptd): a
 * slurmstepd or a task; with n = 0, any process of it. */
static int others_running(const char *dir, const pid_t *daemons, int n)
{
	DIR *proc = opendir("/proc");
	if (!proc)
		return 0;
	int found = 0;
	struct dirent *de;
	while (!found && (de = readdir(proc)) != NULL) {
		pid_t pid = atoi(de->d_name);
		if (pid <= 1 || pid == getpid() || !cli_pid_alive(pid) || !cli_proc_mentions(pid, dir))
			continue;
		pid_t ppid = parent_of(pid);
		int daemon = 0;
		for (int i = 0; i < n; i++)
			daemon |= daemons[i] && (daemons[i] == pid || daemons[i] == ppid);
		found = !daemon;
	}
	closedir(proc);
	return found;
}

/* The name of process `pid` (its comm), "?" when it is gone. */
static void comm_of(pid_t pid, char *comm, size_t cap)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	char *name = cli_read_file(path);
	snprintf(comm, cap, "%.*s", name ? (int)strcspn(name, "\n") : 1, name ? name : "?");
	free(name);
}

/* True for Slurm's and munge's own programs, as against the tasks they ran. */
static int is_slurm_daemon(const char *comm)
{
	const char *daemons[] = { "slurmd", "slurmctld", "slurmstepd", "slurmscriptd", "munged" };
	for (size_t i = 0; i < sizeof(daemons) / sizeof(daemons[0]); i++)
		if (strcmp(comm, daemons[i]) == 0)
			return 1;
	return 0;
}

void slurm_stop(const char *dir, char *report, size_t cap)
{
	const char *names[] = { "slurmd", "slurmctld", "munged" };
	pid_t pids[3] = { 0, 0, 0 };
	for (int i = 0; i < 3; i++) {
		char path[700];
		snprintf(path, sizeof(path), "%s/%s.pid", dir, names[i]);
		char *text = cli_read_file(path);
		if (text && atoi(text) > 0 && cli_proc_mentions(atoi(text), dir))
			pids[i] = atoi(text);
		free(text);
	}
	/* slurmstepd outlives srun or sbatch --wait for a moment, and slurmd stopped meanwhile
	 * waits for it: let the step end first (bounded). */
	double deadline = cli_now_s() + 10;
	while (cli_now_s() < deadline && others_running(dir, pids, 3))
		usleep(50000);
	for (int i = 0; i < 3; i++)
		if (pids[i])
			kill(pids[i], SIGTERM);
	/* Every process of this Slurm, the daemons' own children included (slurmd forks one
	 * per request), gets the same bounded time to end after SIGTERM. */
	deadline = cli_now_s() + 10;
	while (cli_now_s() < deadline && others_running(dir, NULL, 0))
		usleep(20000);
	for (int round = 0; round < 2; round++) {
		DIR *proc = opendir("/proc");
		if (!proc)
			return;
		struct dirent *de;
		while ((de = readdir(proc)) != NULL) {
			pid_t pid = atoi(de->d_name);
			if (pid <= 1 || pid == getpid() || !cli_pid_alive(pid) || !cli_proc_mentions(pid, dir))
				continue;
			char comm[64];
			comm_of(pid, comm, sizeof(comm));
			kill(pid, SIGKILL);
			/* A Slurm daemon slow to end on a loaded host is Slurm's business, not a leak of
			 * the test's tasks: say so, but only a task needing SIGKILL fails the test. */
			if (round == 0 && is_slurm_daemon(comm)) {
				fprintf(stderr, "note: process %d (%s) of the test's Slurm needed SIGKILL\n", (int)pid, comm);
				continue;
			}
			size_t used = strlen(report);
			snprintf(report + used, cap - used, "process %d (%s) of the test's Slurm %s; ", (int)pid, comm,
				 round ? "survived SIGKILL" : "needed SIGKILL");
		}
		closedir(proc);
		usleep(200000);
	}
}
