/*
 * internal.h — what the files of launch/ share (dt__ names): starting a
 * child process with its limits (child.c).
 */
#ifndef DT_LAUNCH_INTERNAL_H
#define DT_LAUNCH_INTERNAL_H

#include <sched.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"

struct dt__child {
	const char *label;      /* "7.worker.0", for messages */
	char **argv;            /* argv[0] a path or a name looked up in PATH */
	char **env;             /* "NAME=value" entries added to the environment, NULL-ended */
	int out_fd;             /* becomes the child's stdout and stderr */
	cpu_set_t cpus;         /* affinity when ncpus > 0 */
	int ncpus;
	int64_t mem_bytes;      /* 0: no limit */
	const char *cgroup_dir; /* from dt__cgroup_prepare, "" for RLIMIT_AS */
};

/* Forks and execs; returns the pid (-1 with err set) and the read end of
 * the exec-status pipe (EOF once exec succeeded, 4 bytes of errno if not). */
pid_t dt__child_spawn(const struct dt__child *c, int *exec_fd, struct dt_err *err);

/* See child.c: a per-task cgroup v2 with memory.max, or "" in `dir`. */
void dt__cgroup_prepare(const char *label, int64_t bytes, char *dir, size_t cap);

/* The guard (child.c): returns the write end of its pipe (-1 on failure)
 * and its pid. Messages: 'A' add a process group, 'D' drop one, 'Q' quit. */
int dt__guard_start(pid_t *pid);
void dt__guard_send(int fd, char what, pid_t group);

#endif
