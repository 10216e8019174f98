/*
 * state.c — the experiment state directory (see state.h).
 */
#include "launch/state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/atomic_file.h"

static const char *const state_names[] = {
#define DT__TS_NAME(n) #n,
	DT_TASK_STATE_MAP(DT__TS_NAME)
#undef DT__TS_NAME
};

const char *dt_task_state_name(enum dt_task_state s)
{
	return (unsigned)s < DT_ARRAY_LEN(state_names) ? state_names[s] : "?";
}

static enum dt_task_state state_parse(const char *s)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(state_names); i++)
		if (s && !strcmp(s, state_names[i]))
			return (enum dt_task_state)i;
	return DT_TS_LOST;
}

int dt_task_state_final(enum dt_task_state s)
{
	return s == DT_TS_FINISHED || s == DT_TS_FAILED || s == DT_TS_KILLED || s == DT_TS_LOST;
}

void dt_exp_home(char *buf, size_t cap)
{
	const char *home = getenv("DTRAIN_HOME");
	if (home && *home) {
		snprintf(buf, cap, "%s", home);
		return;
	}
	const char *user = getenv("HOME");
	snprintf(buf, cap, "%s/.dtrain", user && *user ? user : ".");
}

static enum dt_status mkdir_p(const char *path, struct dt_err *err)
{
	char tmp[1024];
	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
			return dt_err_set(err, DT_IO, "cannot create directory '%s': %s", tmp, strerror(errno));
		*p = '/';
	}
	if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
		return dt_err_set(err, DT_IO, "cannot create directory '%s': %s", tmp, strerror(errno));
	return DT_OK;
}

int dt_exp_list(const char *home, int **ids)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/experiments", home);
	*ids = NULL;
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char *end;
		long v = strtol(de->d_name, &end, 10);
		if (end == de->d_name || *end || v <= 0 || v > 1000000000)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			*ids = dt_xrealloc(*ids, (size_t)cap * sizeof(int));
		}
		(*ids)[n++] = (int)v;
	}
	closedir(d);
	for (int i = 1; i < n; i++) /* insertion sort: tens of entries */
		for (int j = i; j > 0 && (*ids)[j - 1] > (*ids)[j]; j--) {
			int t = (*ids)[j];
			(*ids)[j] = (*ids)[j - 1];
			(*ids)[j - 1] = t;
		}
	return n;
}

static enum dt_status make_subdirs(const struct dt_exp *exp, struct dt_err *err)
{
	static const char *const subs[] = { "logs", "progress" };
	for (size_t i = 0; i < DT_ARRAY_LEN(subs); i++) {
		char path[600];
		snprintf(path, sizeof(path), "%s/%s", exp->dir, subs[i]);
		if (mkdir(path, 0755) != 0)
			return dt_err_set(err, DT_IO, "cannot create '%s': %s", path, strerror(errno));
	}
	return DT_OK;
}

enum dt_status dt_exp_create_id(const char *home, const char *id, struct dt_exp *exp, struct dt_err *err)
{
	char base[1024];
	snprintf(base, sizeof(base), "%s/experiments", home);
	enum dt_status st = mkdir_p(base, err);
	if (st)
		return dt_err_prefix(err, "cannot create the state directory ($DTRAIN_HOME)");
	snprintf(exp->id, sizeof(exp->id), "%s", id);
	int len = snprintf(exp->dir, sizeof(exp->dir), "%s/%s", base, id);
	if (len < 0 || (size_t)len >= sizeof(exp->dir) - 64)
		return dt_err_set(err, DT_CONFIG, "state directory '%s' is too long", base);
	if (mkdir(exp->dir, 0755) != 0)
		return dt_err_set(err, DT_IO, "cannot create '%s': %s", exp->dir, strerror(errno));
	return make_subdirs(exp, err);
}

enum dt_status dt_exp_create(const char *home, struct dt_exp *exp, struct dt_err *err)
{
	char base[1024];
	snprintf(base, sizeof(base), "%s/experiments", home);
	enum dt_status st = mkdir_p(base, err);
	if (st)
		return dt_err_prefix(err, "cannot create the state directory ($DTRAIN_HOME)");
	int *ids;
	int n = dt_exp_list(home, &ids);
	int next = n ? ids[n - 1] + 1 : 1;
	free(ids);
	for (int tries = 0; tries < 1000; tries++, next++) {
		snprintf(exp->id, sizeof(exp->id), "%d", next);
		int len = snprintf(exp->dir, sizeof(exp->dir), "%s/%d", base, next);
		if (len < 0 || (size_t)len >= sizeof(exp->dir) - 64)
			return dt_err_set(err, DT_CONFIG, "state directory '%s' is too long", base);
		if (mkdir(exp->dir, 0755) == 0)
			return make_subdirs(exp, err);
		if (errno != EEXIST)
			return dt_err_set(err, DT_IO, "cannot create '%s': %s", exp->dir, strerror(errno));
	}
	return dt_err_set(err, DT_IO, "cannot find a free experiment id under '%s'", base);
}

void dt_exp_log_path(const struct dt_exp *exp, const char *task, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/logs/%s.log", exp->dir, task);
}

void dt_exp_progress_path(const struct dt_exp *exp, const char *task, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/progress/%s", exp->dir, task);
}

void dt_exp_task_progress(const struct dt_exp *exp, const struct dt_exp_task *t, double now,
			  struct dt_exp_progress *out)
{
	memset(out, 0, sizeof(*out));
	out->pct = out->eta_s = -1;
	char path[700];
	dt_exp_progress_path(exp, t->name, path, sizeof(path));
	if (dt_progress_read(path, &out->p, NULL) == DT_OK) {
		out->have = 1;
	} else {
		/* A task that writes no progress file (a `command:` of its own):
		 * the step its log reports, no rate. */
		dt_exp_log_path(exp, t->name, path, sizeof(path));
		memset(&out->p, 0, sizeof(out->p));
		out->p.step = dt_exp_log_step(path);
		return;
	}
	if (out->p.total > 0 && out->p.step >= 0)
		out->pct = 100.0 * (double)out->p.step / (double)out->p.total;
	int running = t->state == DT_TS_RUNNING;
	out->rate = running && now - out->p.time > DT_PROGRESS_WINDOW_S ? 0 : out->p.rate;
	if (out->p.total > 0 && out->p.step >= out->p.total)
		out->eta_s = 0;
	else if (running && out->rate > 0 && out->p.total > 0)
		out->eta_s = (double)(out->p.total - out->p.step) / out->rate - (now - out->p.time);
	if (out->eta_s < 0 && out->pct >= 0 && running && out->rate > 0)
		out->eta_s = 0;
}

void dt_exp_progress(const struct dt_exp *exp, double now, struct dt_exp_progress *out, char *note, size_t cap)
{
	memset(out, 0, sizeof(*out));
	out->pct = out->eta_s = -1;
	out->p.step = -1;
	if (note && cap)
		note[0] = '\0';
	double note_time = 0;
	int from_chief = 0;
	for (int i = 0; i < exp->ntasks; i++) {
		const struct dt_exp_task *t = &exp->tasks[i];
		struct dt_exp_progress p;
		dt_exp_task_progress(exp, t, now, &p);
		if (p.have && p.p.note[0] && p.p.time >= note_time && note && cap) {
			snprintf(note, cap, "%s (%s)", p.p.note, t->name);
			note_time = p.p.time;
		}
		int chief = !strcmp(t->name, "chief");
		int trainer = chief || !strncmp(t->name, "worker.", 7);
		if (!trainer || !p.have || from_chief)
			continue;
		/* The chief's view wins; else the most advanced trainer's. */
		if (chief || !out->have || p.p.step > out->p.step) {
			*out = p;
			from_chief = chief;
		}
	}
	out->p.note[0] = '\0'; /* a trainer's note is not the experiment's */
}

void dt_exp_newest_checkpoint(const struct dt_exp *exp, char *buf, size_t cap)
{
	buf[0] = '\0';
	char path[700];
	snprintf(path, sizeof(path), "%s/checkpoint", exp->output_dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	char line[600];
	while (fgets(line, sizeof(line), f)) {
		const char *key = "model_checkpoint_path: \"";
		if (strncmp(line, key, strlen(key)))
			continue;
		char *v = line + strlen(key);
		v[strcspn(v, "\"")] = '\0';
		snprintf(buf, cap, "%s", v);
		break;
	}
	fclose(f);
}

enum dt_status dt_exp_save(const struct dt_exp *exp, struct dt_err *err)
{
	json_t *tasks = json_array();
	for (int i = 0; i < exp->ntasks; i++) {
		const struct dt_exp_task *t = &exp->tasks[i];
		json_t *jt = json_pack("{s:s, s:s, s:i, s:I, s:i, s:f, s:i}", "name", t->name, "state",
				       dt_task_state_name(t->state), "pid", (int)t->pid, "pid_start",
				       (json_int_t)t->pid_start, "exit_code", t->exit_code, "started", t->started,
				       "restarts", t->restarts);
		DT_ASSERT(jt);
		if (t->params[0])
			json_object_set_new(jt, "params", json_string(t->params));
		if (t->early_stopped)
			json_object_set_new(jt, "early_stopped", json_true());
		json_array_append_new(tasks, jt);
	}
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:s, s:i, s:f, s:f, s:o}", "id", exp->id, "name",
			      exp->name, "spec", exp->spec, "output_dir", exp->output_dir, "launcher_pid",
			      (int)exp->launcher_pid, "launcher_start", (json_int_t)exp->launcher_start, "state",
			      dt_task_state_name(exp->state), "exit_code", exp->exit_code, "started", exp->started,
			      "ended", exp->ended, "tasks", tasks);
	DT_ASSERT(o);
	if (exp->sweep)
		json_object_set_new(o, "sweep", json_true());
	if (exp->metric[0]) {
		json_t *obj = json_pack("{s:s, s:s}", "metric", exp->metric, "goal", exp->maximize ? "maximize" : "minimize");
		DT_ASSERT(obj);
		if (exp->has_target)
			json_object_set_new(obj, "target", json_real(exp->target));
		json_object_set_new(o, "objective", obj);
	}
	char *text = json_dumps(o, JSON_INDENT(1) | JSON_REAL_PRECISION(15));
	json_decref(o);
	char path[600];
	snprintf(path, sizeof(path), "%s/state.json", exp->dir);
	enum dt_status st = dt_write_file_atomic(path, text, strlen(text), err);
	free(text);
	return st;
}

static void copy_str(char *dst, size_t cap, json_t *v)
{
	snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

enum dt_status dt_exp_load(const char *home, const char *id, struct dt_exp *exp, struct dt_err *err)
{
	memset(exp, 0, sizeof(*exp));
	char *end;
	long v = strtol(id, &end, 10), trial = 0;
	if (end != id && *end == '.' && end[1] >= '0' && end[1] <= '9') /* a sweep's trial: "4.3" */
		trial = strtol(end + 1, &end, 10);
	if (end == id || *end || v <= 0 || v > 1000000000 || trial < 0 || trial > 1000000000 || (trial == 0 && strchr(id, '.')))
		return dt_err_set(err, DT_USAGE, "'%s' is not an experiment id (ids are numbers, a sweep's trials "
						 "<id>.<k>; see 'dtrain status -a')", id);
	if (trial)
		snprintf(exp->id, sizeof(exp->id), "%d.%d", (int)v, (int)trial);
	else
		snprintf(exp->id, sizeof(exp->id), "%d", (int)v);
	snprintf(exp->dir, sizeof(exp->dir), "%.400s/experiments/%s", home, exp->id);
	char path[600];
	snprintf(path, sizeof(path), "%s/state.json", exp->dir);
	json_error_t jerr;
	json_t *o = json_load_file(path, 0, &jerr);
	if (!o) {
		if (access(exp->dir, F_OK) != 0)
			return dt_err_set(err, DT_USAGE, "no experiment %s under '%s' (see 'dtrain status -a')", id, home);
		return dt_err_set(err, DT_IO, "cannot read '%s': %s", path, jerr.text);
	}
	copy_str(exp->name, sizeof(exp->name), json_object_get(o, "name"));
	copy_str(exp->spec, sizeof(exp->spec), json_object_get(o, "spec"));
	copy_str(exp->output_dir, sizeof(exp->output_dir), json_object_get(o, "output_dir"));
	exp->launcher_pid = (pid_t)json_integer_value(json_object_get(o, "launcher_pid"));
	exp->launcher_start = (unsigned long long)json_integer_value(json_object_get(o, "launcher_start"));
	exp->state = state_parse(json_string_value(json_object_get(o, "state")));
	exp->exit_code = (int)json_integer_value(json_object_get(o, "exit_code"));
	exp->started = json_number_value(json_object_get(o, "started"));
	exp->ended = json_number_value(json_object_get(o, "ended"));
	exp->sweep = json_is_true(json_object_get(o, "sweep"));
	json_t *obj = json_object_get(o, "objective");
	copy_str(exp->metric, sizeof(exp->metric), json_object_get(obj, "metric"));
	exp->maximize = json_is_string(json_object_get(obj, "goal")) &&
			!strcmp(json_string_value(json_object_get(obj, "goal")), "maximize");
	exp->has_target = json_is_number(json_object_get(obj, "target"));
	exp->target = json_number_value(json_object_get(obj, "target"));
	json_t *tasks = json_object_get(o, "tasks");
	size_t n = json_array_size(tasks);
	exp->tasks = dt_xcalloc(n ? n : 1, sizeof(*exp->tasks));
	for (size_t i = 0; i < n; i++) {
		json_t *t = json_array_get(tasks, i);
		struct dt_exp_task *et = &exp->tasks[i];
		copy_str(et->name, sizeof(et->name), json_object_get(t, "name"));
		et->state = state_parse(json_string_value(json_object_get(t, "state")));
		et->pid = (pid_t)json_integer_value(json_object_get(t, "pid"));
		et->pid_start = (unsigned long long)json_integer_value(json_object_get(t, "pid_start"));
		et->exit_code = (int)json_integer_value(json_object_get(t, "exit_code"));
		et->started = json_number_value(json_object_get(t, "started"));
		et->restarts = (int)json_integer_value(json_object_get(t, "restarts"));
		copy_str(et->params, sizeof(et->params), json_object_get(t, "params"));
		et->early_stopped = json_is_true(json_object_get(t, "early_stopped"));
	}
	exp->ntasks = (int)n;
	json_decref(o);
	return DT_OK;
}

void dt_exp_release(struct dt_exp *exp)
{
	if (!exp)
		return;
	free(exp->tasks);
	exp->tasks = NULL;
	exp->ntasks = 0;
}

unsigned long long dt_proc_start_time(pid_t pid)
{
	if (pid <= 0)
		return 0;
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
		return 0;
	/* After ") ": field 3 (state) ... field 22 (starttime): 19 more spaces. */
	p += 2;
	for (int field = 3; field < 22 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	return p ? strtoull(p, NULL, 10) : 0;
}

int dt_proc_same(pid_t pid, unsigned long long start)
{
	return pid > 0 && start != 0 && dt_proc_start_time(pid) == start;
}

int dt_exp_check_lost(struct dt_exp *exp)
{
	if (dt_task_state_final(exp->state) || dt_proc_same(exp->launcher_pid, exp->launcher_start))
		return 0;
	exp->state = DT_TS_LOST;
	for (int i = 0; i < exp->ntasks; i++)
		if (!dt_task_state_final(exp->tasks[i].state) &&
		    !dt_proc_same(exp->tasks[i].pid, exp->tasks[i].pid_start))
			exp->tasks[i].state = DT_TS_LOST;
	return 1;
}

/* The step a progress line reports, or -1. */
static long long line_step(const char *line)
{
	const char *g = strstr(line, "(global ");
	if (g)
		return strtoll(g + 8, NULL, 10);
	g = strstr(line, "global step ");
	if (g)
		return strtoll(g + 12, NULL, 10);
	g = strstr(line, "] step ");
	if (!g)
		g = strstr(line, " step ");
	if (g) {
		const char *num = strstr(g, "step ") + 5;
		char *end;
		long long v = strtoll(num, &end, 10);
		if (end != num && *end == '/')
			return v;
	}
	return -1;
}

long long dt_exp_log_step(const char *log_path)
{
	int fd = open(log_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	off_t size = lseek(fd, 0, SEEK_END);
	off_t from = size > 65536 ? size - 65536 : 0;
	char *buf = dt_xmalloc(65537);
	ssize_t n = pread(fd, buf, 65536, from);
	close(fd);
	long long step = -1;
	if (n > 0) {
		buf[n] = '\0';
		for (char *line = buf; line && *line;) {
			char *nl = strchr(line, '\n');
			if (nl)
				*nl = '\0';
			long long s = line_step(line);
			if (s >= 0)
				step = s;
			line = nl ? nl + 1 : NULL;
		}
	}
	free(buf);
	return step;
}

static int metric_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
	       c == '.' || c == '/';
}

/* The last value `line` (NUL-ended) reports for `metric`; 1 when found. */
static int line_metric(const char *line, const char *metric, double *out)
{
	size_t mlen = strlen(metric);
	int found = 0;
	for (const char *p = strstr(line, metric); p && mlen; p = strstr(p + 1, metric)) {
		if ((p > line && metric_char(p[-1]) && p[-1] != '/') || metric_char(p[mlen]))
			continue;
		const char *q = p + mlen;
		while (*q == ' ')
			q++;
		if (*q != '=' && *q != ':')
			continue;
		q++;
		while (*q == ' ')
			q++;
		char *end = NULL;
		double v = strtod(q, &end);
		if (end == q || !isfinite(v))
			continue;
		*out = v;
		found = 1;
	}
	return found;
}

/* Calls `fn` for each line of the last 64 KiB of a log; 0 when unreadable. */
static int each_line(const char *log_path, void (*fn)(const char *line, void *ctx), void *ctx)
{
	int fd = open(log_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	off_t size = lseek(fd, 0, SEEK_END);
	off_t from = size > 65536 ? size - 65536 : 0;
	char *buf = dt_xmalloc(65537);
	ssize_t n = pread(fd, buf, 65536, from);
	close(fd);
	if (n > 0) {
		buf[n] = '\0';
		for (char *line = buf; line && *line;) {
			char *nl = strchr(line, '\n');
			if (nl)
				*nl = '\0';
			fn(line, ctx);
			line = nl ? nl + 1 : NULL;
		}
	}
	free(buf);
	return 1;
}

struct metric_scan {
	const char *metric;
	int found;
	double value;
	long long *steps; /* history: (step, value) of lines with both, the newest cap kept */
	double *values;
	int n, cap;
};

static void scan_line(const char *line, void *ctx)
{
	struct metric_scan *m = ctx;
	double v;
	if (!line_metric(line, m->metric, &v))
		return;
	m->found = 1;
	m->value = v;
	long long step = m->cap ? line_step(line) : -1;
	if (step < 0)
		return;
	if (m->n == m->cap) { /* keep the newest */
		memmove(m->steps, m->steps + 1, (size_t)(m->cap - 1) * sizeof(*m->steps));
		memmove(m->values, m->values + 1, (size_t)(m->cap - 1) * sizeof(*m->values));
		m->n--;
	}
	m->steps[m->n] = step;
	m->values[m->n++] = v;
}

int dt_exp_log_metric(const char *log_path, const char *metric, double *out)
{
	struct metric_scan m = { .metric = metric };
	each_line(log_path, scan_line, &m);
	if (m.found)
		*out = m.value;
	return m.found;
}

int dt_exp_metric_history(const struct dt_exp *exp, const char *metric, long long *steps, double *values, int cap)
{
	static const char *const from[] = { "evaluator", "chief" };
	for (size_t i = 0; i < DT_ARRAY_LEN(from); i++) {
		char path[700];
		dt_exp_log_path(exp, from[i], path, sizeof(path));
		struct metric_scan m = { .metric = metric, .steps = steps, .values = values, .cap = cap };
		each_line(path, scan_line, &m);
		if (m.n)
			return m.n;
	}
	return 0;
}

int dt_exp_metric(const struct dt_exp *exp, const char *metric, double *out)
{
	static const char *const from[] = { "evaluator", "chief" };
	for (size_t i = 0; i < DT_ARRAY_LEN(from); i++) {
		char path[700];
		dt_exp_log_path(exp, from[i], path, sizeof(path));
		if (dt_exp_log_metric(path, metric, out))
			return 1;
	}
	return 0;
}

static int trainer_name(const char *name)
{
	return !strcmp(name, "chief") || !strncmp(name, "worker.", 7);
}

/* Fills times[] (cap entries) with the fresh step times of running trainers; names[] with their index. */
static int step_times(const struct dt_exp *exp, double now, double *times, int *index, int cap)
{
	int n = 0;
	for (int i = 0; i < exp->ntasks && n < cap; i++) {
		const struct dt_exp_task *t = &exp->tasks[i];
		if (t->state != DT_TS_RUNNING || !trainer_name(t->name))
			continue;
		struct dt_exp_progress p;
		dt_exp_task_progress(exp, t, now, &p);
		if (!p.have || !(p.p.step_time > 0) || now - p.p.time > DT_PROGRESS_WINDOW_S)
			continue;
		times[n] = p.p.step_time;
		index[n++] = i;
	}
	return n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

void dt_exp_stragglers(const struct dt_exp *exp, double now, struct dt_exp_stragglers *out)
{
	memset(out, 0, sizeof(*out));
	double times[DT_LAUNCH_STATE_MAX_LOGS], sorted[DT_LAUNCH_STATE_MAX_LOGS];
	int index[DT_LAUNCH_STATE_MAX_LOGS];
	int n = step_times(exp, now, times, index, DT_LAUNCH_STATE_MAX_LOGS);
	out->n = n;
	if (n == 0)
		return;
	memcpy(sorted, times, (size_t)n * sizeof(*times));
	qsort(sorted, (size_t)n, sizeof(*sorted), cmp_double);
	out->median_s = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
	if (n < 2)
		return;
	int worst = 0;
	for (int k = 1; k < n; k++)
		worst = times[k] > times[worst] ? k : worst;
	snprintf(out->slowest, sizeof(out->slowest), "%s", exp->tasks[index[worst]].name);
	out->slowest_s = times[worst];
	out->ratio = out->median_s > 0 ? times[worst] / out->median_s : 0;
}

void dt_exp_stragglers_line(const struct dt_exp *exp, double now, char *buf, size_t cap)
{
	if (!cap)
		return;
	buf[0] = '\0';
	double times[DT_LAUNCH_STATE_MAX_LOGS];
	int index[DT_LAUNCH_STATE_MAX_LOGS];
	int n = step_times(exp, now, times, index, DT_LAUNCH_STATE_MAX_LOGS);
	if (n == 0)
		return;
	size_t at = (size_t)snprintf(buf, cap, "step time:");
	for (int k = 0; k < n && at < cap; k++)
		at += (size_t)snprintf(buf + at, cap - at, "%s %s %.3f s", k ? "," : "", exp->tasks[index[k]].name,
				       times[k]);
	struct dt_exp_stragglers st;
	dt_exp_stragglers(exp, now, &st);
	if (st.slowest[0] && at < cap)
		snprintf(buf + at, cap - at, "; slowest %s: %.2fx the median %.3f s", st.slowest, st.ratio, st.median_s);
}
