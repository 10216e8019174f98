/*
 * spec_riseml.c — seed 001's RiseML experiment form, and the `parameters:`
 * of a sweep in either form (params.h says what a sweep is).
 *
 * RiseML's form, mapped onto dtrain's spec:
 *
 *     project: ai-toaster             → name (the same rules)
 *     train:
 *       framework: tensorflow         → the only framework there is
 *       resources: {cpus: 2, mem: 16384, gpus: 4}     → every task's
 *       tensorflow:
 *         version: 1.2.1-gpu          → kept to show; the run command decides
 *         distributed:
 *           worker: 3                 → worker: 3 (the first is the chief, RiseML's master)
 *           ps: {count: 2, resources: {cpus: 2, mem: 16384, gpus: 0}}   → ps: 2, resources.ps
 *       run: python train.py ...      → command: (a shell line; a list runs line by line, set -e)
 *       parameters: ...               → the sweep (params.h), under train as RiseML puts it
 *       concurrency: 2
 *
 * `worker` and `ps` are each a count or {count, resources}. With ps the
 * mode is async (dtrain's name for TensorFlow's parameter-server
 * training); without `distributed` or with ps 0 it is mirrored (no ps).
 * `gpus` is kept (dt_launch_resources.gpus): dtrain's tasks run on CPUs,
 * and `dtrain launch` says so in one line when the host has no GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "launch/spec_internal.h"

const char *const dt__spec_sweep_keys[DT__SPEC_NSWEEP_KEYS] = { "parameters",  "search",
								"max_trials",  "seed",
								"concurrency", "max_failed_trials",
								"objective",   "early_stopping" };

int dt__spec_is_sweep_key(const char *key)
{
	for (int i = 0; i < DT__SPEC_NSWEEP_KEYS; i++)
		if (!strcmp(key, dt__spec_sweep_keys[i]))
			return 1;
	return 0;
}

/* ---- parameters ---- */

static int name_ok(const char *n)
{
	if (!*n)
		return 0;
	for (; *n; n++)
		if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') || *n == '_' ||
		      *n == '-' || *n == '.'))
			return 0;
	return 1;
}

static enum dt_status want_number(struct dt__walker *w, yaml_node_t *n, const char *key, double *out, int *integer)
{
	if (!n || n->type != YAML_SCALAR_NODE)
		return dt__spec_at(w, n, "'%s' must be a number", key);
	const char *t = dt__spec_scalar(n);
	char *end = NULL;
	double v = strtod(t, &end);
	if (end == t || *end || !isfinite(v))
		return dt__spec_at(w, n, "'%s' must be a number, got '%s'", key, t);
	*out = v;
	if (integer)
		*integer = strspn(t, "+-0123456789") == strlen(t) && fabs(v) < 1e15;
	return DT_OK;
}

static void add_value(struct dt_launch_param *p, const char *v)
{
	if ((p->nvalues & 15) == 0)
		p->values = dt_xrealloc(p->values, (size_t)(p->nvalues + 16) * sizeof(char *));
	p->values[p->nvalues++] = dt_xstrdup(v);
}

static enum dt_status read_list(struct dt__walker *w, yaml_node_t *list, struct dt_launch_param *p)
{
	for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++) {
		yaml_node_t *item = yaml_document_get_node(w->doc, *it);
		if (!item || item->type != YAML_SCALAR_NODE)
			return dt__spec_at(w, item ? item : list, "every value of parameter '%s' must be a scalar", p->name);
		if (p->nvalues >= DT_SWEEP_MAX_VALUES)
			return dt__spec_at(w, list, "parameter '%s' has more than %d values", p->name, DT_SWEEP_MAX_VALUES);
		add_value(p, dt__spec_scalar(item));
	}
	if (p->nvalues == 0)
		return dt__spec_at(w, list, "parameter '%s' has no values", p->name);
	return DT_OK;
}

/* RiseML's {min, max, step}: min, min + step, ... up to max (inclusive). */
static enum dt_status read_range(struct dt__walker *w, yaml_node_t *r, struct dt_launch_param *p)
{
	static const char *const keys[] = { "min", "max", "step" };
	for (yaml_node_pair_t *q = r->data.mapping.pairs.start; q < r->data.mapping.pairs.top; q++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, q->key);
		if (!k || k->type != YAML_SCALAR_NODE || !(!strcmp(dt__spec_scalar(k), "min") ||
							  !strcmp(dt__spec_scalar(k), "max") ||
							  !strcmp(dt__spec_scalar(k), "step")))
			return dt__spec_at(w, k ? k : r, "unknown key '%s' in the range of parameter '%s'; valid: min, max, step",
					   k && k->type == YAML_SCALAR_NODE ? dt__spec_scalar(k) : "?", p->name);
	}
	double v[3];
	int integer[3];
	for (int i = 0; i < 3; i++) {
		yaml_node_t *n = dt__spec_get(w, r, keys[i]);
		if (!n)
			return dt__spec_at(w, r, "the range of parameter '%s' needs '%s' (min, max and step)", p->name, keys[i]);
		enum dt_status st = want_number(w, n, keys[i], &v[i], &integer[i]);
		if (st)
			return st;
	}
	if (!(v[2] > 0))
		return dt__spec_at(w, dt__spec_get(w, r, "step"), "the range of parameter '%s' is empty: step must be "
								   "positive, got %g", p->name, v[2]);
	if (v[0] > v[1])
		return dt__spec_at(w, r, "the range of parameter '%s' is empty: min %g is above max %g", p->name, v[0], v[1]);
	double count = floor((v[1] - v[0]) / v[2] + 1e-9) + 1;
	if (count > DT_SWEEP_MAX_VALUES)
		return dt__spec_at(w, r, "the range of parameter '%s' has %.0f values, more than %d", p->name, count,
				   DT_SWEEP_MAX_VALUES);
	int ints = integer[0] && integer[1] && integer[2];
	for (int i = 0; i < (int)count; i++) {
		char buf[64];
		double x = v[0] + i * v[2];
		if (ints)
			snprintf(buf, sizeof(buf), "%lld", (long long)llround(x));
		else
			snprintf(buf, sizeof(buf), "%.15g", x);
		add_value(p, buf);
	}
	return DT_OK;
}

static enum dt_status read_param(struct dt__walker *w, yaml_node_t *k, yaml_node_t *v, struct dt_launch_param *p)
{
	p->line = k->start_mark.line + 1;
	p->col = k->start_mark.column + 1;
	p->name = dt_xstrdup(dt__spec_scalar(k));
	if (!name_ok(p->name))
		return dt__spec_at(w, k, "parameter name '%s' must be letters, digits, '_', '-' and '.' (it is written "
					 "'{{ %s }}')", p->name, p->name);
	p->kind = DT_PARAM_VALUES;
	if (v->type == YAML_SCALAR_NODE) {
		add_value(p, dt__spec_scalar(v));
		return DT_OK;
	}
	if (v->type == YAML_SEQUENCE_NODE)
		return read_list(w, v, p);
	yaml_node_t *range = dt__spec_get(w, v, "range"), *choices = dt__spec_get(w, v, "choices");
	yaml_node_t *min = dt__spec_get(w, v, "min"), *max = dt__spec_get(w, v, "max");
	yaml_node_t *step = dt__spec_get(w, v, "step"), *scale = dt__spec_get(w, v, "scale");
	size_t nkeys = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	size_t known = (size_t)(!!range + !!choices + !!min + !!max + !!step + !!scale);
	if (nkeys != known || (range && nkeys != 1) || (choices && nkeys != 1)) {
		return dt__spec_at(w, v, "parameter '%s' must be a list of values, {range: {min, max, step}}, "
					 "{min, max, step}, {min, max, scale: linear|log} (random search) or "
					 "{choices: [...]}", p->name);
	}
	if (choices) {
		if (choices->type != YAML_SEQUENCE_NODE)
			return dt__spec_at(w, choices, "'choices' of parameter '%s' must be a list", p->name);
		return read_list(w, choices, p);
	}
	if (range) {
		if (range->type != YAML_MAPPING_NODE)
			return dt__spec_at(w, range, "'range' of parameter '%s' must be {min, max, step}", p->name);
		return read_range(w, range, p);
	}
	if (step) {
		if (scale)
			return dt__spec_at(w, scale, "parameter '%s': 'scale' is for random draws, 'step' for a range; "
						     "give one", p->name);
		return read_range(w, v, p);
	}
	if (!min || !max)
		return dt__spec_at(w, v, "parameter '%s' needs both 'min' and 'max'", p->name);
	int imin = 0, imax = 0;
	enum dt_status st = want_number(w, min, "min", &p->min, &imin);
	if (!st)
		st = want_number(w, max, "max", &p->max, &imax);
	if (st)
		return st;
	if (scale) {
		const char *t = scale->type == YAML_SCALAR_NODE ? dt__spec_scalar(scale) : "";
		if (strcmp(t, "linear") && strcmp(t, "log"))
			return dt__spec_at(w, scale, "unknown scale '%s' of parameter '%s'; valid: linear, log", t, p->name);
		p->log_scale = !strcmp(t, "log");
	}
	if (p->min > p->max)
		return dt__spec_at(w, v, "parameter '%s' is empty: min %g is above max %g", p->name, p->min, p->max);
	if (p->log_scale && !(p->min > 0))
		return dt__spec_at(w, min, "parameter '%s' has scale log: min must be above 0, got %g", p->name, p->min);
	p->integer = imin && imax && !p->log_scale;
	p->kind = DT_PARAM_UNIFORM;
	return DT_OK;
}

/* objective: {metric: NAME, goal: maximize|minimize, target: X}. */
struct objective_ctx {
	struct dt_launch_sweep *sw;
	int goal_given;
};

static enum dt_status objective_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct objective_ctx *o = ctx;
	if (!strcmp(key, "metric")) {
		enum dt_status st = dt__spec_string(w, v, key, &o->sw->metric);
		if (st)
			return st;
		const char *m = o->sw->metric;
		if (!*m || strlen(m) > DT_SWEEP_METRIC_MAX || strspn(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
									"0123456789_-./") != strlen(m))
			return dt__spec_at(w, v, "objective metric '%s' must be a name of letters, digits, '_', '-', '.' "
						 "and '/' (as the trials' eval lines write it: 'accuracy = 0.91')", m);
		return DT_OK;
	}
	if (!strcmp(key, "goal")) {
		static const char *const goals[] = { "minimize", "maximize" };
		o->goal_given = 1;
		return dt__spec_enum(w, v, "goal", goals, 2, &o->sw->maximize);
	}
	o->sw->has_target = 1;
	return want_number(w, v, "target", &o->sw->target, NULL);
}

/* early_stopping: median | {rule: median, min_trials: N, start_step: S}. */
static enum dt_status early_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct dt_launch_sweep *sw = ctx;
	int64_t n = 0;
	enum dt_status st;
	if (!strcmp(key, "rule")) {
		static const char *const rules[] = { "median" };
		int r = 0;
		return dt__spec_enum(w, v, "early_stopping rule", rules, 1, &r);
	}
	if (!strcmp(key, "min_trials")) {
		if (!(st = dt__spec_int(w, v, "min_trials", 1, DT_SWEEP_MAX_TRIALS, &n)))
			sw->es_min_trials = (int)n;
		return st;
	}
	if (!(st = dt__spec_int(w, v, "start_step", 0, INT64_MAX / 2, &n)))
		sw->es_start_step = n;
	return st;
}

enum dt_status dt__spec_sweep_read(struct dt__walker *w, yaml_node_t *map, struct dt_launch_sweep **out)
{
	*out = NULL;
	yaml_node_t *params = dt__spec_get(w, map, "parameters");
	yaml_node_t *given[DT__SPEC_NSWEEP_KEYS];
	for (int i = 0; i < DT__SPEC_NSWEEP_KEYS; i++)
		given[i] = dt__spec_get(w, map, dt__spec_sweep_keys[i]);
	if (!params) {
		for (int i = 1; i < DT__SPEC_NSWEEP_KEYS; i++)
			if (given[i])
				return dt__spec_at(w, given[i], "'%s' is for sweeps: the spec has no 'parameters:'",
						   dt__spec_sweep_keys[i]);
		return DT_OK;
	}
	if (params->type != YAML_MAPPING_NODE)
		return dt__spec_at(w, params, "'parameters' must map each parameter's name to its values");
	size_t np = (size_t)(params->data.mapping.pairs.top - params->data.mapping.pairs.start);
	if (np == 0)
		return dt__spec_at(w, params, "'parameters' is empty");
	if (np > DT_SWEEP_MAX_PARAMS)
		return dt__spec_at(w, params, "'parameters' has more than %d parameters", DT_SWEEP_MAX_PARAMS);
	struct dt_launch_sweep *sw = dt_xcalloc(1, sizeof(*sw));
	sw->params = dt_xcalloc(np, sizeof(*sw->params));
	sw->concurrency = 1;
	sw->max_failed = -1;
	enum dt_status st = DT_OK;
	for (yaml_node_pair_t *q = params->data.mapping.pairs.start; !st && q < params->data.mapping.pairs.top; q++) {
		yaml_node_t *k = yaml_document_get_node(w->doc, q->key);
		yaml_node_t *v = yaml_document_get_node(w->doc, q->value);
		if (!k || !v || k->type != YAML_SCALAR_NODE) {
			st = dt__spec_at(w, k ? k : params, "parameter names must be plain names");
			break;
		}
		for (int i = 0; i < sw->nparams; i++)
			if (!strcmp(sw->params[i].name, dt__spec_scalar(k)))
				st = dt__spec_at(w, k, "parameter '%s' appears twice", dt__spec_scalar(k));
		if (!st)
			st = read_param(w, k, v, &sw->params[sw->nparams++]);
	}
	int64_t n = 0;
	if (!st && given[1]) {
		static const char *const searches[] = { "grid", "random" };
		int s = 0;
		st = dt__spec_enum(w, given[1], "search", searches, 2, &s);
		sw->search = (enum dt_search)s;
	}
	if (!st && given[2] && !(st = dt__spec_int(w, given[2], "max_trials", 1, DT_SWEEP_MAX_TRIALS, &n)))
		sw->max_trials = n;
	if (!st && given[3] && !(st = dt__spec_int(w, given[3], "seed", 0, INT64_MAX, &n)))
		sw->seed = (uint64_t)n;
	if (!st && given[4] && !(st = dt__spec_int(w, given[4], "concurrency", 1, 64, &n)))
		sw->concurrency = (int)n;
	if (!st && given[5] && !(st = dt__spec_int(w, given[5], "max_failed_trials", 0, DT_SWEEP_MAX_TRIALS, &n)))
		sw->max_failed = (int)n;
	if (!st && given[6]) {
		static const char *const keys[] = { "metric", "goal", "target" };
		struct objective_ctx o = { .sw = sw };
		st = dt__spec_map(w, given[6], "'objective'", keys, DT_ARRAY_LEN(keys), objective_key, &o);
		if (!st && !sw->metric)
			st = dt__spec_at(w, given[6], "'objective' needs 'metric' (e.g. {metric: accuracy, goal: maximize})");
		if (!st && !o.goal_given) {
			if (!strcmp(sw->metric, "accuracy"))
				sw->maximize = 1;
			else if (strcmp(sw->metric, "loss"))
				st = dt__spec_at(w, given[6], "'objective' needs 'goal: maximize' or 'goal: minimize' for metric "
							      "'%s' (accuracy is maximized, loss minimized by default)", sw->metric);
		}
	}
	if (!st && given[7]) {
		static const char *const keys[] = { "rule", "min_trials", "start_step" };
		sw->early_median = 1;
		sw->es_min_trials = 3;
		if (given[7]->type == YAML_SCALAR_NODE) {
			static const char *const rules[] = { "median" };
			int r = 0;
			st = dt__spec_enum(w, given[7], "early_stopping rule", rules, 1, &r);
		} else {
			st = dt__spec_map(w, given[7], "'early_stopping'", keys, DT_ARRAY_LEN(keys), early_key, sw);
		}
		if (!st && !sw->metric)
			st = dt__spec_at(w, given[7], "'early_stopping' compares the trials by the objective: add 'objective: "
						      "{metric: ..., goal: ...}'");
	}
	if (!st && sw->search == DT_SEARCH_RANDOM) {
		if (!sw->max_trials)
			st = dt__spec_at(w, given[1], "search: random needs 'max_trials' (how many trials to draw)");
		sw->ntrials = sw->max_trials;
	} else if (!st) {
		double product = 1;
		for (int i = 0; !st && i < sw->nparams; i++) {
			if (sw->params[i].kind == DT_PARAM_UNIFORM) {
				yaml_node_t *k = NULL;
				for (yaml_node_pair_t *q = params->data.mapping.pairs.start; q < params->data.mapping.pairs.top; q++)
					if (!k && (k = yaml_document_get_node(w->doc, q->key)) &&
					    strcmp(dt__spec_scalar(k), sw->params[i].name))
						k = NULL;
				st = dt__spec_at(w, k, "parameter '%s' is drawn from {min, max}: that needs 'search: random' (a "
						       "grid takes a list, a range with a step, or choices)", sw->params[i].name);
			}
			product *= sw->params[i].nvalues;
		}
		if (!st && !sw->max_trials && product > DT_SWEEP_DEFAULT_LIMIT)
			st = dt__spec_at(w, params, "the grid has %.0f trials, more than %d: set 'max_trials: %.0f' to run "
						    "them all (or a smaller one to run the first ones)", product,
					 DT_SWEEP_DEFAULT_LIMIT, product > DT_SWEEP_MAX_TRIALS ? (double)DT_SWEEP_MAX_TRIALS : product);
		if (!st)
			sw->ntrials = sw->max_trials && sw->max_trials < product ? sw->max_trials : (int64_t)product;
	}
	if (st) {
		dt_launch_sweep_free(sw);
		return st;
	}
	*out = sw;
	return DT_OK;
}

/* ---- RiseML's form ---- */

int dt__spec_is_riseml(struct dt__walker *w, yaml_node_t *root)
{
	return root && root->type == YAML_MAPPING_NODE &&
	       (dt__spec_get(w, root, "train") || dt__spec_get(w, root, "project"));
}

struct rml {
	struct dt_launch_spec *s;
	struct dt_launch_resources all, ps;
	int ps_given;
	int have_distributed;
	yaml_node_t *run, *framework, *project;
};

static const char *const res_keys[] = { "cpus", "mem", "gpus" };

/* `worker: 3` or `worker: {count: 3, resources: {...}}`. */
struct role {
	struct dt__walker *w;
	int64_t count;
	struct dt_launch_resources res;
	int res_given;
	const char *what;
};

static enum dt_status role_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct role *r = ctx;
	if (!strcmp(key, "count"))
		return dt__spec_int(w, v, "count", !strcmp(r->what, "ps") ? 0 : 1, 64, &r->count);
	r->res_given = 1;
	char what[64];
	snprintf(what, sizeof(what), "'%s.resources'", r->what);
	return dt__spec_map(w, v, what, res_keys, DT_ARRAY_LEN(res_keys), dt__spec_res_key, &r->res);
}

static enum dt_status read_role(struct dt__walker *w, yaml_node_t *v, struct role *r)
{
	static const char *const keys[] = { "count", "resources" };
	if (v->type == YAML_SCALAR_NODE)
		return dt__spec_int(w, v, r->what, !strcmp(r->what, "ps") ? 0 : 1, 64, &r->count);
	char what[64];
	snprintf(what, sizeof(what), "'%s'", r->what);
	return dt__spec_map(w, v, what, keys, DT_ARRAY_LEN(keys), role_key, r);
}

static enum dt_status dist_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	struct rml *m = ctx;
	struct role r = { .w = w, .count = 1, .res = { -1, -1, -1 }, .what = key };
	enum dt_status st = read_role(w, v, &r);
	if (st)
		return st;
	if (!strcmp(key, "worker")) {
		m->s->workers = (int)r.count;
		if (r.res_given)
			return dt__spec_at(w, v, "per-role resources for 'worker' are not supported: the workers take "
						 "'train.resources' (only 'ps' has its own)");
	} else {
		m->s->ps = (int)r.count;
		if (r.res_given) {
			m->ps = r.res;
			m->ps_given = 1;
		}
	}
	return DT_OK;
}

static enum dt_status tf_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	static const char *const dist_keys[] = { "worker", "ps" };
	struct rml *m = ctx;
	if (!strcmp(key, "version"))
		return dt__spec_string(w, v, key, &m->s->tf_version);
	m->have_distributed = 1;
	return dt__spec_map(w, v, "'tensorflow.distributed'", dist_keys, DT_ARRAY_LEN(dist_keys), dist_key, m);
}

/* Seed 001 writes `run: >-` with its flags on lines indented under the
 * command; YAML keeps the line breaks before more-indented lines of a
 * folded scalar, which a shell would run as commands of their own. Such a
 * break (a newline and the indentation after it) becomes one space. */
static void join_continuations(char *line)
{
	char *out = line;
	for (const char *p = line; *p; p++) {
		if (*p == '\n' && (p[1] == ' ' || p[1] == '\t')) {
			while (p[1] == ' ' || p[1] == '\t')
				p++;
			*out++ = ' ';
			continue;
		}
		*out++ = *p;
	}
	*out = '\0';
}

static enum dt_status train_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	static const char *const tf_keys[] = { "version", "distributed" };
	struct rml *m = ctx;
	struct dt_launch_spec *s = m->s;
	if (dt__spec_is_sweep_key(key))
		return DT_OK; /* read before the walk (dt__spec_sweep_read) */
	if (!strcmp(key, "framework")) {
		static const char *const fw[] = { "tensorflow" };
		int i = 0;
		m->framework = v;
		return dt__spec_enum(w, v, "framework", fw, 1, &i);
	}
	if (!strcmp(key, "resources"))
		return dt__spec_map(w, v, "'train.resources'", res_keys, DT_ARRAY_LEN(res_keys), dt__spec_res_key, &m->all);
	if (!strcmp(key, "tensorflow"))
		return dt__spec_map(w, v, "'train.tensorflow'", tf_keys, DT_ARRAY_LEN(tf_keys), tf_key, m);
	/* run: a shell line, or a list of them run in order, stopping at the first that fails */
	m->run = v;
	enum dt_status st;
	char *line = NULL;
	if (v->type == YAML_SCALAR_NODE) {
		if ((st = dt__spec_string(w, v, "run", &line)))
			return st;
		if (v->data.scalar.style == YAML_FOLDED_SCALAR_STYLE)
			join_continuations(line);
	} else if (v->type == YAML_SEQUENCE_NODE) {
		char **items = NULL;
		int n = 0;
		if ((st = dt__spec_list(w, v, "run", &items, &n))) {
			dt__spec_free_list(items, n);
			return st;
		}
		size_t len = 8;
		for (int i = 0; i < n; i++)
			len += strlen(items[i]) + 1;
		line = dt_xmalloc(len);
		strcpy(line, "set -e\n");
		for (int i = 0; i < n; i++) {
			strcat(line, items[i]);
			strcat(line, i + 1 < n ? "\n" : "");
		}
		dt__spec_free_list(items, n);
		if (n == 0)
			line[0] = '\0';
	} else {
		return dt__spec_at(w, v, "'run' must be a shell line or a list of them");
	}
	if (!line[strspn(line, " \t\n")]) {
		free(line);
		return dt__spec_at(w, v, "'run' is empty");
	}
	dt__spec_free_list(s->command, s->ncommand);
	s->command = dt_xcalloc(2, sizeof(char *));
	s->command[0] = line;
	s->ncommand = 1;
	s->shell = 1;
	return DT_OK;
}

static enum dt_status root_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx)
{
	static const char *const train_keys[] = { "framework",   "resources",         "tensorflow", "run",
						  "parameters",  "search",            "max_trials", "seed",
						  "concurrency", "max_failed_trials", "objective",  "early_stopping" };
	struct rml *m = ctx;
	if (!strcmp(key, "project")) {
		m->project = v;
		enum dt_status st = dt__spec_string(w, v, key, &m->s->name);
		if (!st && !dt__spec_name_ok(m->s->name))
			return dt__spec_at(w, v, "project name '%s' must be 1-40 lowercase letters, digits and '-', starting "
						 "with a letter (it names the experiment)", m->s->name);
		return st;
	}
	return dt__spec_map(w, v, "'train'", train_keys, DT_ARRAY_LEN(train_keys), train_key, m);
}

enum dt_status dt__spec_riseml(struct dt__walker *w, yaml_node_t *root, struct dt_launch_spec *s)
{
	static const char *const root_keys[] = { "project", "train" };
	struct rml m = { .s = s, .all = { 0, 0, 0 } };
	enum dt_status st = dt__spec_map(w, root, "RiseML's experiment (project, train)", root_keys,
					 DT_ARRAY_LEN(root_keys), root_key, &m);
	if (st)
		return st;
	yaml_node_t *train = dt__spec_get(w, root, "train");
	if (!train)
		return dt__spec_at(w, root, "missing 'train': RiseML's experiment says what runs under 'train:' (with "
					    "'run:')");
	if (!m.run)
		return dt__spec_at(w, train, "missing 'run' in 'train': the command every task runs");
	if (!m.framework && m.have_distributed)
		return dt__spec_at(w, train, "'tensorflow.distributed' needs 'framework: tensorflow' in 'train'");
	if (!m.have_distributed) {
		s->workers = 1;
		s->ps = 0;
	}
	if (s->ps < 0)
		s->ps = 0; /* `distributed` without `ps`: workers only */
	s->mode = s->ps > 0 ? DT_LAUNCH_ASYNC : DT_LAUNCH_MIRRORED;
	for (int g = 0; g < DT_GROUP_COUNT; g++)
		s->res[g] = m.all;
	if (m.ps_given) {
		struct dt_launch_resources *r = &s->res[DT_GROUP_PS];
		if (m.ps.cpus >= 0)
			r->cpus = m.ps.cpus;
		if (m.ps.mem_bytes >= 0)
			r->mem_bytes = m.ps.mem_bytes;
		if (m.ps.gpus >= 0)
			r->gpus = m.ps.gpus;
	}
	struct dt_err e = DT_ERR_INIT;
	if (dt_launch_spec_check(s, &e))
		return dt__spec_at(w, train, "%s", e.msg);
	return DT_OK;
}
