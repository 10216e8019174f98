/*
 * cli_util.h — small helpers shared by the CLI tests in tests/cli: the
 * monotonic clock, whole files read into strings, free loopback ports, the
 * accuracy a run printed, and what the `dtrain launch` tests set up (a
 * private $DTRAIN_HOME, spec files, `dtrain <command>` runs).
 *
 * Every wait here is bounded; a helper that cannot go on fails the test
 * (dt_test_fail) instead of returning an error. Strings returned are the
 * caller's to free(); none of these helpers keeps state between calls.
 */
#ifndef DT_TEST_CLI_UTIL_H
#define DT_TEST_CLI_UTIL_H

#include <stddef.h>
#include <sys/types.h>

#include "dt_test.h"

/* Seconds on the monotonic clock (for deadlines and durations). */
double cli_now_s(void);
/* Sleeps `ms` milliseconds. */
void cli_sleep_ms(int ms);

/* The whole file at `path`, NUL-terminated, malloc'd (the caller frees);
 * NULL when it cannot be opened. Works for /proc files (size 0 on stat). */
char *cli_read_file(const char *path);

/* `n` distinct free loopback ports, each bound and released: picked at
 * random below the kernel's ephemeral range (10000 up to it), where no
 * outgoing connection takes one before the task listens on it; port 0's
 * pick after 90 tries, or when the range leaves no room (at most 100 tries
 * in all per port; the test fails past that). */
void cli_free_ports(int *ports, int n);

/* The figure after the first "accuracy = " in `text` (an eval line a run
 * printed); -1 when there is none or `text` is NULL. */
double cli_accuracy_of(const char *text);

/* Checks that every progress line of a text problem's `log` (a line with
 * " loss " and " eta ") carries t2t's metrics and tokens/s (" accuracy ",
 * " accuracy_per_sequence ", " neg_log_perplexity ", " tokens/s"), failing
 * the test naming `who` and the line where one does not; returns how many
 * progress lines it saw. */
int cli_check_t2t_lines(const char *who, const char *log);

/* Whether the event files under `dir` name scalar `tag` (its bytes). */
int cli_events_name(const char *dir, const char *tag);
/* Checks that the event files under `dir` carry a text problem's t2t
 * metrics under the plain tags and under t2t's own,
 * "metrics-<problem>/targets/<metric>" (approx_bleu_score only when `bleu`,
 * and then under both), failing the test naming `who` and the tag. */
void cli_check_t2t_summaries(const char *who, const char *dir, const char *problem, int bleu);

/* ---- `dtrain launch` and the commands around it ---- */

/* Points $DTRAIN_HOME at "<tmpdir>/home" and unsets the cluster variables
 * the outer environment might set (TF_CONFIG, SLURM_PROCID,
 * OMPI_COMM_WORLD_RANK). */
void cli_private_home(void);
/* Writes `text` to "<tmpdir>/<name>"; its path goes into `path` (cap bytes). */
void cli_write_spec(char *path, size_t cap, const char *name, const char *text);
/* Runs `dtrain <args...>` (args NULL-terminated, at most 30) with no extra
 * environment; fails the test if it runs past timeout_s. Release r with
 * dt_run_release. */
void cli_run(struct dt_run *r, const char *const *args, double timeout_s);
/* True while process `pid` runs and is not a zombie (launch/state.h's
 * dt_proc_start_time). */
int cli_pid_alive(pid_t pid);

/* The processes (not this one) whose environment holds every entry of
 * `entries` ("K=V", NULL-terminated), waiting up to timeout_s for them to
 * go; returns how many are left. */
int cli_processes_with_env(const char *const *entries, double timeout_s);

/* True when /proc/<pid>/environ or /proc/<pid>/cmdline contains `text` (a
 * test's private directory: the process came from what the test started). */
int cli_proc_mentions(pid_t pid, const char *text);

#endif
