/*
 * params.h — a spec's `parameters:` and the trials they make (RiseML's
 * hyperparameter sweeps, Katib's random search), and the `{{ name }}`
 * templates that put a trial's values into the spec.
 *
 *     parameters:
 *       lr: [0.1, 0.01]                     # a list: these values, as written
 *       layers: {range: {min: 1, max: 3, step: 1}}   # RiseML's range: 1, 2, 3
 *       wd: {min: 1e-5, max: 1e-2, scale: log}       # random search only
 *       opt: {choices: [sgd, adam]}                  # a list by another name
 *     search: grid            # grid (default) | random
 *     max_trials: 20          # random: required; grid: a cap (first N)
 *     seed: 7                 # random: the same seed gives the same trials
 *     concurrency: 2          # trials at once (default 1)
 *     max_failed_trials: 1    # the sweep stops starting trials past this
 *     objective: {metric: accuracy, goal: maximize, target: 0.9}
 *     early_stopping: median  # or {rule: median, min_trials: 3, start_step: 100}
 *
 * Trials are numbered 1..ntrials (the user sees "<id>.<k>"). Grid order is
 * itertools.product's over the parameters in the order the spec lists
 * them: the last one varies fastest. Random trial k draws each parameter
 * from its own generator, dt_rng_derive(seed, "sweep", k), so trial k is
 * the same whatever the concurrency and however many trials ran before.
 *
 * Values are text: a list's items exactly as written, a range's in the
 * shortest form that reads back to the same double ("%.15g"; integers
 * without a point when min, max and step are all integers), a random
 * uniform draw in "%.6g" (an integer when min and max are integers and the
 * scale is linear). A template "{{ name }}" (spaces optional) is replaced
 * by the value; any other "{{" is an error.
 *
 * Limits: a sweep of more than DT_SWEEP_DEFAULT_LIMIT trials needs
 * max_trials to say so; max_trials is at most DT_SWEEP_MAX_TRIALS.
 *
 * The sweep owns its parameters and the spec's text (dt_launch_sweep_free).
 */
#ifndef DT_LAUNCH_PARAMS_H
#define DT_LAUNCH_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DT_SWEEP_DEFAULT_LIMIT 1000
#define DT_SWEEP_MAX_TRIALS 100000
#define DT_SWEEP_MAX_PARAMS 32
#define DT_SWEEP_MAX_VALUES 10000 /* per parameter (a range's expansion included) */
#define DT_SWEEP_METRIC_MAX 63    /* bytes of an objective's metric name */

enum dt_param_kind {
	DT_PARAM_VALUES,  /* a list, a range or choices: values[] */
	DT_PARAM_UNIFORM, /* {min, max, scale}: drawn, random search only */
};

struct dt_launch_param {
	char *name;
	enum dt_param_kind kind;
	char **values;      /* [nvalues] owned (DT_PARAM_VALUES) */
	int nvalues;
	double min, max;    /* DT_PARAM_UNIFORM */
	int log_scale;      /* draw uniformly in log(min)..log(max) */
	int integer;        /* min and max were integers and the scale linear */
	size_t line, col;   /* 1-based position of the name in the spec */
};

enum dt_search { DT_SEARCH_GRID, DT_SEARCH_RANDOM };

struct dt_launch_sweep {
	struct dt_launch_param *params; /* [nparams] owned, in the spec's order */
	int nparams;
	enum dt_search search;
	int64_t max_trials;  /* 0: not given */
	uint64_t seed;
	int concurrency;     /* trials at once, >= 1 */
	int max_failed;      /* failed trials tolerated; -1: no limit */
	int64_t ntrials;     /* >= 1 */
	/* objective: {metric, goal, target}: NULL metric without one. */
	char *metric;        /* a name the trials' eval lines report ("accuracy", "loss") */
	int maximize;        /* goal: maximize (1) or minimize (0) */
	int has_target;      /* a finished trial that reaches `target` ends the sweep early */
	double target;
	/* early_stopping: median (Katib's medianstop): a running trial whose
	 * best value by its step s is worse than the median of the finished
	 * trials' best values by s is stopped. */
	int early_median;
	int es_min_trials;       /* finished trials needed for a median (default 3) */
	long long es_start_step; /* no trial is stopped before this step (default 0) */
	char *text;          /* the spec's YAML, re-read for each trial */
	size_t len;
};

void dt_launch_sweep_free(struct dt_launch_sweep *sw);

/* The values of trial k (1..ntrials), one per parameter in the sweep's
 * order; a NULL-ended heap array of heap strings (dt_launch_values_free). */
char **dt_launch_trial_values(const struct dt_launch_sweep *sw, int64_t k);
void dt_launch_values_free(char **values);

/* "lr=0.1 layers=2": a trial's values on one line (for status and logs). */
void dt_launch_values_line(const struct dt_launch_sweep *sw, char *const *values, char *buf, size_t cap);

/* Replaces each "{{ name }}" in `text` with values[i] of the parameter
 * named so (sw NULL: a spec without parameters) and marks used[i]. On an
 * unknown name or a broken "{{", DT_CONFIG with the message and *where set
 * to the byte offset of the "{{"; `*out` (heap) is set only on success. */
enum dt_status dt_launch_template_expand(const char *text, const struct dt_launch_sweep *sw, char *const *values,
					 unsigned char *used, char **out, size_t *where,
					 struct dt_err *err) DT_MUST_CHECK;

/* Writes "<name>: <value>\n" per parameter, the values quoted as YAML
 * strings when they would not read back as written (params.yaml). */
void dt_launch_values_yaml(const struct dt_launch_sweep *sw, char *const *values, char **text, size_t *len);

#endif
