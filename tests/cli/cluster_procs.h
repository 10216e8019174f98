/*
 * cluster_procs.h — dtrain tasks as child processes of a multi-process CLI
 * test, in every distributed mode (parameter servers, sync, all-reduce,
 * in-graph, launch, the evaluator): each task's stdout and stderr go to
 * files in the test's temp dir, every wait has a deadline, and a loopback
 * cluster (free ports, each task's TF_CONFIG) is one struct.
 *
 * Every task is a child of the test process and so in the test's process
 * group: the harness kills whatever a failing test leaves behind. A struct
 * task and a struct cluster are the caller's storage (on its stack); the
 * strings task_read returns are the caller's to free().
 */
#ifndef DT_TEST_CLUSTER_PROCS_H
#define DT_TEST_CLUSTER_PROCS_H

#include <sys/types.h>

#include "cli_util.h"

#define CLUSTER_MAX_TASKS 8

struct task {
	pid_t pid;        /* 0 once reaped */
	int status;       /* exit code, 128+signal, or -1 while running */
	char name[32];    /* "ps0", "chief0"...: also names its log files */
	char out[600], err[600]; /* paths of its stdout and stderr */
};

/* Starts argv (NULL-terminated, at most 63 entries) as task `name`, with
 * env entries "K=V" (NULL-terminated, may be NULL) added to the test's
 * environment and stdin from /dev/null; argv[0] is "dtrain" (the binary
 * under test) or a path such as "/bin/sh". Its stdout and stderr go to
 * "<tmpdir>/<name>.out" and ".err" (truncated: a name used again starts
 * them afresh). */
void task_start(struct task *t, const char *name, const char *const *argv, const char *const *env);
/* Waits at most timeout_s for the task to exit; returns its status (-1 if
 * it did not; 0 s only polls). */
int task_wait(struct task *t, double timeout_s);
/* SIGKILLs the task if it still runs and reaps it. */
void task_kill(struct task *t);
/* The task's stdout (err = 0) or stderr (err = 1) so far: malloc'd,
 * NUL-terminated, "" when there is none yet; the caller frees it. */
char *task_read(const struct task *t, int err);
/* Waits until the task's stderr contains `text`, at most timeout_s; returns 1 if it does. */
int task_wait_log(const struct task *t, const char *text, double timeout_s);
/* Prints the tail of every task's stderr (for a failing test's report). */
void tasks_dump(const struct task *tasks, int n);

/* A cluster on free loopback ports and the tasks started in it. */
struct cluster {
	char spec[1024];                       /* the "cluster" object of TF_CONFIG */
	int ports[CLUSTER_MAX_TASKS];          /* head, then workers, then ps */
	int head, workers, ps;                 /* how many of each (head: 0 or 1) */
	char out_dir[600], out_flag[640];      /* cluster_output_dir's, else "" */
	struct task tasks[CLUSTER_MAX_TASKS]; /* in the order started */
	int n;
};

/* `head` ("chief", "master", or NULL for none), `workers` workers and `ps`
 * ps on distinct free loopback ports, in that order in TF_CONFIG (a job
 * with no task is left out): {"chief": [...], "worker": [...], "ps": [...]}. */
void cluster_init(struct cluster *c, const char *head, int workers, int ps);
/* The port of task type:index (type "chief"/"master" for the head, "worker" or "ps"). */
int cluster_port(const struct cluster *c, const char *type, int index);
/* Sets out_dir to "<tmpdir>/<name>" and out_flag to "--output_dir=<out_dir>". */
void cluster_output_dir(struct cluster *c, const char *name);
/* Writes "TF_CONFIG={"cluster": <spec>, "task": {"type": ..., "index": ...}}" into buf. */
void cluster_tf_config(const struct cluster *c, const char *type, int index, char *buf, size_t cap);

/* Starts task type:index as `argv` (task_start's) with its TF_CONFIG and
 * `extra_env` (NULL-terminated, at most 6, may be NULL); `name` picks its
 * log files (NULL: "<type><index>"; a restarted task gets a new name so its
 * logs are its own). Returns the task, which lives in c. */
struct task *cluster_start(struct cluster *c, const char *type, int index, const char *name,
			   const char *const *argv, const char *const *extra_env);
/* cluster_start of `dtrain train <args...>` (at most 21 args), named "<type><index>". */
struct task *cluster_start_train(struct cluster *c, const char *type, int index, const char *const *args);
/* The same with one more flag after args (NULL: none; at most 20 args
 * then), named `name` (cluster_start's: a restarted task's), with
 * `extra_env` (cluster_start's, may be NULL). */
struct task *cluster_start_train_as(struct cluster *c, const char *type, int index, const char *name,
				    const char *const *args, const char *flag, const char *const *extra_env);
/* Starts every task line of `dtrain make-configs` output `out` (lines
 * "'<TF_CONFIG>'\t<flags>"; others, such as "Assuming ...", are skipped;
 * `out` is cut up in place) as task "line<i>", through /bin/sh:
 * `TF_CONFIG=<json> exec dtrain train <flags> <train_flags>`. c is reset
 * first and holds no ports of its own. More than `max` lines fail the test.
 * Returns the index in c->tasks of the line whose task type is `head`
 * ("chief", "master"), or -1 when there is none. */
int cluster_start_make_configs(struct cluster *c, char *out, int max, const char *train_flags, const char *head);
/* SIGCONTs (a stopped task) and SIGKILLs every task of c that still runs, and reaps it. */
void cluster_kill_all(struct cluster *c);

/* Waits for t to exit with `code`; on anything else prints every task's
 * log, kills them all and fails the test at file:line. */
void cluster_expect_exit(const char *file, int line, struct cluster *c, struct task *t, int code, double timeout_s);
/* Waits for t's stderr to contain `text`; past timeout_s does what cluster_expect_exit does. */
void cluster_expect_log(const char *file, int line, struct cluster *c, const struct task *t, const char *text,
			double timeout_s);
#define EXPECT_EXIT(c, t, code, timeout_s) cluster_expect_exit(__FILE__, __LINE__, c, t, code, timeout_s)
#define EXPECT_LOG(c, t, text, timeout_s) cluster_expect_log(__FILE__, __LINE__, c, t, text, timeout_s)

#endif
