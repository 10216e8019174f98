/*
 * run.h — the local orchestrator behind `dtrain launch`: a whole cluster as
 * child processes of one launcher (docs/LAUNCH.md is the user's page).
 *
 * What it does, in order:
 *   1. creates the experiment's state directory (state.h) and picks one
 *      free loopback port per task (random ports below the kernel's
 *      ephemeral range, each checked by bind, retrying on EADDRINUSE);
 *   2. starts every task (ps first, then the chief, the workers, the
 *      evaluator) by fork + exec, each in its own process group, with
 *      PR_SET_PDEATHSIG(SIGKILL) so it dies with the launcher (and a guard
 *      process that SIGKILLs the tasks' groups if the launcher dies), with
 *      TF_CONFIG, OUTPUT_DIR, EXPERIMENT_ID, TASK_TYPE, TASK_INDEX, DTRAIN set,
 *      its CPU affinity and memory limit applied in the child before exec;
 *   3. multiplexes the tasks' output (stdout and stderr, one pipe per task)
 *      line by line as "<id>.<task> | [<UTC time>] <line>", and prints each
 *      state change as "--> STATE"; each task's lines also go to its log;
 *   4. tears down: the chief fails (for good) → every task is stopped; all
 *      trainers ended → the ps are stopped (after a short grace to end by
 *      themselves) and the evaluator gets evaluator_timeout to finish;
 *   5. restarts failed tasks per the spec's policy, at most backoff_limit
 *      times in all, waiting 1, 2, 4 ... 8 s between tries;
 *   6. on SIGINT/SIGTERM, or dt_launch_run's own teardown: SIGTERM to each
 *      task's process group, SIGKILL after grace_period.
 * The exit code is 0 when every task ended well, else the first failure's
 * code (a task's exit code, 128 + signal for a death by signal), and
 * 128 + signal when the launcher itself was interrupted.
 */
#ifndef DT_LAUNCH_RUN_H
#define DT_LAUNCH_RUN_H

#include <stdio.h>

#include "base/err.h"
#include "launch/spec.h"

struct dt_launch_opts {
	const char *home; /* state directory ($DTRAIN_HOME) */
	const char *bin;  /* the dtrain binary (default command, $DTRAIN) */
	FILE *out;        /* where the multiplexed output goes */
	/* A sweep's trial (sweep.h): the id to take ("4.3", its state dir
	 * experiments/4.3 must not exist yet), NULL for the next free one; and
	 * "NAME=value" entries added to every task's environment, NULL-ended. */
	const char *exp_id;
	char *const *env;
	/* dt_launch_sweep_run only: the id of a sweep whose launcher died, to
	 * continue (sweep.h), or NULL for a new sweep. */
	const char *resume;
};

/* Runs the experiment to its end. DT_OK with *exit_code set once the tasks
 * started (whatever they did); an error status when the launch itself
 * failed (state directory, ports, fork). */
enum dt_status dt_launch_run(const struct dt_launch_spec *s, const struct dt_launch_opts *o, int *exit_code,
			     struct dt_err *err) DT_MUST_CHECK;

/* `n` distinct free loopback TCP ports (see step 1). */
enum dt_status dt_launch_pick_ports(int *ports, int n, struct dt_err *err) DT_MUST_CHECK;

#endif
