/*
 * ps_cluster.h — helpers for the multi-process parameter-server tests: free
 * loopback ports, dtrain tasks started as processes with their output in
 * files of the test's temp dir, bounded waits, and cleanup.
 *
 * Every task is a child of the test process and so in the test's process
 * group: the harness kills whatever a failing test leaves behind.
 */
#ifndef DT_TEST_PS_CLUSTER_H
#define DT_TEST_PS_CLUSTER_H

#include <sys/types.h>

#define PS_MAX_TASKS 8

struct ps_task {
	pid_t pid;        /* 0 once reaped */
	int status;       /* exit code, 128+signal, or -1 while running */
	char name[32];    /* "ps0", "chief"... */
	char out[600], err[600]; /* paths of its stdout and stderr */
};

/* `n` distinct free loopback ports (bound with port 0 and released). */
void ps_free_ports(int *ports, int n);

/* Starts `dtrain <argv...>` with env entries (NULL-terminated, may be NULL)
 * added; argv[0] is "dtrain" or "/bin/sh" (for make-configs lines). */
void ps_task_start(struct ps_task *t, const char *name, const char *const *argv, const char *const *env);
/* Waits at most timeout_s for the task to exit; returns its status (-1 if it did not). */
int ps_task_wait(struct ps_task *t, double timeout_s);
/* SIGKILLs the task if it still runs and reaps it. */
void ps_task_kill(struct ps_task *t);
/* The task's stdout or stderr so far (malloc'd, NUL-terminated). */
char *ps_task_read(const struct ps_task *t, int err);
/* Waits until the task's stderr contains `text`, at most timeout_s; returns 1 if it does. */
int ps_task_wait_log(const struct ps_task *t, const char *text, double timeout_s);
/* Prints the tail of every task's stderr (for a failing test's report). */
void ps_tasks_dump(const struct ps_task *tasks, int n);

#endif
