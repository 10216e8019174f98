/*
 * state.h — what `dtrain launch` records about its experiments, for
 * `dtrain status`, `logs`, `monitor` and `kill` (run by other processes).
 *
 * Layout under $DTRAIN_HOME (default ~/.dtrain):
 *   experiments/<id>/state.json      the experiment and its tasks (below)
 *   experiments/<id>/logs/<task>.log each task's output, "[<UTC>] <line>"
 *   experiments/<id>/progress/<task> each task's progress file (base/progress.h),
 *                                    written by the task itself through
 *                                    DTRAIN_PROGRESS_FILE
 *   experiments/<id>/output/         the default output dir
 * Ids are 1, 2, 3...: the launcher takes the next free one by mkdir, which
 * is atomic, so two launches never share an id.
 *
 * state.json is rewritten whole with dt_write_file_atomic after state
 * changes, so a reader sees the previous or the next state, never half of
 * one. A pid is recorded with its start time (field 22 of /proc/<pid>/stat)
 * so that a reader never signals a process that reused the pid.
 */
#ifndef DT_LAUNCH_STATE_H
#define DT_LAUNCH_STATE_H

#include <stddef.h>
#include <sys/types.h>

#include "base/err.h"
#include "base/progress.h"

#define DT_TASK_STATE_MAP(X) \
	X(CREATED) X(STARTING) X(RUNNING) X(FINISHED) X(FAILED) X(KILLED) X(LOST)

enum dt_task_state {
#define DT__TS_ENUM(n) DT_TS_##n,
	DT_TASK_STATE_MAP(DT__TS_ENUM)
#undef DT__TS_ENUM
};

const char *dt_task_state_name(enum dt_task_state s);
/* FINISHED, FAILED, KILLED, LOST: nothing runs any more. */
int dt_task_state_final(enum dt_task_state s);

#define DT_LAUNCH_STATE_MAX_LOGS 130

struct dt_exp_task {
	char name[32];                 /* "worker.0" */
	enum dt_task_state state;
	pid_t pid;                     /* 0 when not running */
	unsigned long long pid_start;  /* start time of pid, clock ticks since boot */
	int exit_code;                 /* -1 until it ended; 128 + signal for a death by signal */
	double started;                /* epoch seconds of the latest start, 0 if never */
	int restarts;
	char params[256];              /* a sweep's trial: "lr=0.1 layers=2", else "" */
	int early_stopped;             /* a sweep's trial KILLED by early stopping */
};

struct dt_exp {
	char id[24];                   /* "4", or a sweep's trial "4.3" */
	char dir[512];                 /* $DTRAIN_HOME/experiments/<id> */
	char name[64];
	char spec[512];
	char output_dir[512];
	pid_t launcher_pid;
	unsigned long long launcher_start;
	enum dt_task_state state;      /* RUNNING until the launcher ends */
	int exit_code;                 /* -1 while running */
	double started, ended;
	int sweep;                     /* 1: a sweep, whose "tasks" are its trials "<id>.<k>" (sweep.h) */
	char metric[64];               /* a sweep's objective metric, "" without one */
	int maximize;                  /* its goal */
	int has_target;
	double target;
	struct dt_exp_task *tasks;     /* [ntasks] owned */
	int ntasks;
};

/* $DTRAIN_HOME, or ~/.dtrain. */
void dt_exp_home(char *buf, size_t cap);

/* Creates experiments/<next id>/ and logs/ under `home` and fills exp->id and
 * exp->dir. */
enum dt_status dt_exp_create(const char *home, struct dt_exp *exp, struct dt_err *err) DT_MUST_CHECK;
/* Creates experiments/<id>/ for a given id (a sweep's trial, "4.3");
 * DT_IO when it exists already. */
enum dt_status dt_exp_create_id(const char *home, const char *id, struct dt_exp *exp, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_exp_save(const struct dt_exp *exp, struct dt_err *err) DT_MUST_CHECK;
/* Loads experiments/<id> (an experiment "4" or a sweep's trial "4.3");
 * DT_USAGE naming the id when there is none. */
enum dt_status dt_exp_load(const char *home, const char *id, struct dt_exp *exp, struct dt_err *err) DT_MUST_CHECK;
void dt_exp_release(struct dt_exp *exp);
/* Experiment ids under home, ascending (caller frees with free()). */
int dt_exp_list(const char *home, int **ids);

/* "<dir>/logs/<task>.log". */
void dt_exp_log_path(const struct dt_exp *exp, const char *task, char *buf, size_t cap);

/* Start time of a live process (0 when it does not exist or is a zombie). */
unsigned long long dt_proc_start_time(pid_t pid);
/* True when pid runs and started at `start`. */
int dt_proc_same(pid_t pid, unsigned long long start);

/* Marks the experiment and its unfinished tasks LOST when the launcher that
 * owned it is gone without recording its end (killed -9, machine reboot);
 * returns 1 when it did so. Does not save. */
int dt_exp_check_lost(struct dt_exp *exp);

/* "<dir>/progress/<task>". */
void dt_exp_progress_path(const struct dt_exp *exp, const char *task, char *buf, size_t cap);

/* What `status` and `monitor` show of a task's progress, at `now` (epoch s). */
struct dt_exp_progress {
	int have;          /* 0: the task wrote no progress file (its log's step, if any, is in p.step) */
	struct dt_progress p;
	double pct;        /* of p.total; -1 when the total is unknown */
	double rate;       /* p.rate, or 0 when the file is stale (no step for DT_PROGRESS_WINDOW_S) */
	double eta_s;      /* (total - step) / rate; -1 when unknown */
};
void dt_exp_task_progress(const struct dt_exp *exp, const struct dt_exp_task *t, double now,
			  struct dt_exp_progress *out);
/* The experiment's progress: the chief's (or, without one, the most advanced
 * trainer's); `note` gets the newest evaluation a task reported ("" if none). */
void dt_exp_progress(const struct dt_exp *exp, double now, struct dt_exp_progress *out, char *note, size_t cap);
/* Stragglers: the running trainers' (chief, worker.N) own step times, from
 * their progress files' step_time (base/progress.h key 7, fresh within
 * DT_PROGRESS_WINDOW_S), their median, and the slowest with its ratio to
 * the median (the median of an even count is the mean of the middle two). */
struct dt_exp_stragglers {
	int n;                  /* trainers with a fresh step time */
	double median_s;        /* 0 when n == 0 */
	char slowest[64];       /* its task name; "" when n < 2 */
	double slowest_s, ratio;
};
void dt_exp_stragglers(const struct dt_exp *exp, double now, struct dt_exp_stragglers *out);
/* The line `status` and `monitor` print: "step time: chief 0.110 s,
 * worker.0 0.205 s; slowest worker.0: 1.30x the median 0.158 s"; "" when
 * no trainer has a step time. */
void dt_exp_stragglers_line(const struct dt_exp *exp, double now, char *buf, size_t cap);

/* The newest checkpoint the output dir's `checkpoint` state file names
 * (model_checkpoint_path), or "" when there is none yet. */
void dt_exp_newest_checkpoint(const struct dt_exp *exp, char *buf, size_t cap);

/* The latest global step in a task's log (progress lines "step N/M",
 * "step n (global N/M)", "global step N"); -1 when none. Reads at most
 * the last 64 KiB. */
long long dt_exp_log_step(const char *log_path);

/* The last value a log reports for `metric`: "<metric> = X", "<metric>=X"
 * or "<metric>: X", the name not the tail of a longer one (dtrain's eval
 * lines "... accuracy = 0.9180, loss = 0.2337", a command's own
 * "accuracy=0.91"). Reads at most the last 64 KiB; 1 when found. */
int dt_exp_log_metric(const char *log_path, const char *metric, double *out);
/* An experiment's value of `metric`: its evaluator's newest, else its
 * chief's (a sweep's objective, sweep.h); 1 when found. */
int dt_exp_metric(const struct dt_exp *exp, const char *metric, double *out);
/* The (global step, value) pairs of `metric` an experiment's lines report
 * with a step ("... at global step 800: accuracy = 0.88"), oldest first,
 * the newest `cap` of them: the evaluator's, else the chief's. Returns
 * the count (0: none). For a sweep's early stopping (sweep.h). */
int dt_exp_metric_history(const struct dt_exp *exp, const char *metric, long long *steps, double *values, int cap);

#endif
