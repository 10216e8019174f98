/*
 * sweep.h — a spec with `parameters:` (params.h) run as a sweep: one whole
 * distributed experiment per trial, `concurrency` of them at a time
 * (docs/LAUNCH.md "Sweeps").
 *
 * The sweep takes an experiment id N like any launch (experiments/N, its
 * state.json marked "sweep", its "tasks" being the trials N.1 ... N.k with
 * their values, states, the pid of each trial's launcher and its exit
 * code). Trial k is a plain experiment with the fixed id "N.k"
 * (experiments/N.k, so status, logs, monitor and kill take "N.k" as they
 * take "N"), run by dt_launch_run in a forked child of the sweep's
 * process: its own ports, its own cluster secret, its own output dir
 * <output_dir>/N.k (output_dir: the spec's, or experiments/N/output),
 * where params.yaml holds the trial's values before any task starts.
 * Every task of the trial also gets DTRAIN_TRIAL=N.k and
 * DTRAIN_TRIAL_PARAMS (the values as one JSON object of strings), which
 * `dtrain train`'s chief adds to its TensorBoard HParams session, so the
 * HParams tab over <output_dir> compares the trials.
 *
 * Rules:
 *   - trials start in order (1, 2, ...), at most `concurrency` at a time;
 *   - a trial that ends non-zero is FAILED and counted; past
 *     max_failed_trials no new trial starts (running ones finish);
 *   - a trial stopped by `dtrain kill N.k` is KILLED and not counted;
 *   - with an objective: a finished trial reaching its target stops new
 *     starts; with early_stopping: median, a running trial behind the
 *     finished trials' median by its step gets SIGTERM (KILLED,
 *     early_stopped, not counted);
 *   - SIGINT/SIGTERM to the sweep: SIGTERM to every running trial's
 *     launcher (which stops its tasks), no new trial, then the end;
 *   - each trial's launcher dies with the sweep's (PR_SET_PDEATHSIG), and
 *     its guard then kills the trial's tasks, so SIGKILL to the sweep
 *     leaves no process.
 * Exit code: 0 when every trial finished, or when the failed ones are at
 * most max_failed_trials; else the first failed trial's code; 128 + the
 * signal when the sweep was interrupted.
 */
#ifndef DT_LAUNCH_SWEEP_H
#define DT_LAUNCH_SWEEP_H

#include "base/err.h"
#include "launch/run.h"
#include "launch/spec.h"

/* The environment variables a trial's tasks get (besides run.h's). */
#define DT_TRIAL_ENV "DTRAIN_TRIAL"
#define DT_TRIAL_PARAMS_ENV "DTRAIN_TRIAL_PARAMS"

/* Runs every trial of s->sweep (s from dt_launch_spec_parse, sweep not
 * NULL). DT_OK with *exit_code set once the sweep started; an error status
 * when it could not (state directory, output dir). */
enum dt_status dt_launch_sweep_run(const struct dt_launch_spec *s, const struct dt_launch_opts *o, int *exit_code,
				   struct dt_err *err) DT_MUST_CHECK;

#endif
