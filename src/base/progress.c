/*
 * progress.c — a task's progress file (see progress.h).
 */
#include "base/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/clock.h"

void dt_progress_writer_init(struct dt_progress_writer *w, const char *path)
{
	memset(w, 0, sizeof(*w));
	snprintf(w->path, sizeof(w->path), "%s", path ? path : "");
	w->interval_s = 1.0;
	w->last_step = -1;
}

static void add_sample(struct dt_progress_writer *w, int64_t step, double now)
{
	if (w->nsamples) {
		int newest = (w->head + w->nsamples - 1) % DT_PROGRESS_SAMPLES;
		/* One sample a second at most: the window spans seconds, whatever the step rate. */
		if (now - w->samples[newest].t < 1.0)
			return;
	}
	if (w->nsamples == DT_PROGRESS_SAMPLES) {
		w->head = (w->head + 1) % DT_PROGRESS_SAMPLES;
		w->nsamples--;
	}
	int at = (w->head + w->nsamples) % DT_PROGRESS_SAMPLES;
	w->samples[at].t = now;
	w->samples[at].step = step;
	w->samples[at].calls = w->calls;
	w->nsamples++;
}

double dt_progress_writer_rate(const struct dt_progress_writer *w)
{
	if (w->nsamples < 2)
		return 0;
	int newest = (w->head + w->nsamples - 1) % DT_PROGRESS_SAMPLES;
	double t1 = w->samples[newest].t;
	int64_t s1 = w->samples[newest].step;
	for (int k = 0; k < w->nsamples - 1; k++) {
		int i = (w->head + k) % DT_PROGRESS_SAMPLES;
		if (w->samples[i].t >= t1 - DT_PROGRESS_WINDOW_S - 1e-9) {
			double dt = t1 - w->samples[i].t;
			return dt > 0 ? (double)(s1 - w->samples[i].step) / dt : 0;
		}
	}
	return 0;
}

/* The oldest sample within the window before the newest one, or -1. */
static int window_start(const struct dt_progress_writer *w)
{
	if (w->nsamples < 2)
		return -1;
	double t1 = w->samples[(w->head + w->nsamples - 1) % DT_PROGRESS_SAMPLES].t;
	for (int k = 0; k < w->nsamples - 1; k++) {
		int i = (w->head + k) % DT_PROGRESS_SAMPLES;
		if (w->samples[i].t >= t1 - DT_PROGRESS_WINDOW_S - 1e-9)
			return i;
	}
	return -1;
}

double dt_progress_writer_step_time(const struct dt_progress_writer *w)
{
	int i = window_start(w);
	if (i < 0)
		return 0;
	int newest = (w->head + w->nsamples - 1) % DT_PROGRESS_SAMPLES;
	int64_t calls = w->samples[newest].calls - w->samples[i].calls;
	return calls > 0 ? (w->samples[newest].t - w->samples[i].t) / (double)calls : 0;
}

static int write_file(struct dt_progress_writer *w, double now)
{
	char text[768];
	int n = snprintf(text, sizeof(text), "step %lld\ntotal %lld\ntime %.3f\nrate %.4f\n", (long long)w->last_step,
			 (long long)w->total, now, dt_progress_writer_rate(w));
	if (w->note[0])
		n += snprintf(text + n, sizeof(text) - (size_t)n, "note %s\n", w->note);
	if (w->ring[0])
		n += snprintf(text + n, sizeof(text) - (size_t)n, "ring %s\n", w->ring);
	double step_time = dt_progress_writer_step_time(w);
	if (step_time > 0)
		n += snprintf(text + n, sizeof(text) - (size_t)n, "step_time %.6f\n", step_time);
	char tmp[600];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", w->path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	ssize_t put = write(fd, text, (size_t)n);
	int e = errno;
	close(fd);
	if (put != n || rename(tmp, w->path) != 0) {
		e = put != n ? e : errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	w->last_write = now;
	return 1;
}

/* `own`: a step of this task (counted for step_time), not a note's or ring's update. */
static int writer_step(struct dt_progress_writer *w, int64_t step, int64_t total, double now, int own)
{
	if (!w->path[0])
		return 0;
	w->calls += own;
	w->total = total;
	add_sample(w, step, now);
	int first = w->last_step < 0;
	int changed = step != w->last_step;
	w->last_step = step;
	if (!first && !(total > 0 && step >= total && changed) && now - w->last_write < w->interval_s)
		return 0;
	return write_file(w, now);
}

int dt_progress_writer_step(struct dt_progress_writer *w, int64_t step, int64_t total, double now)
{
	return writer_step(w, step, total, now, 1);
}

int dt_progress_writer_note(struct dt_progress_writer *w, const char *note, double now)
{
	if (!w->path[0])
		return 0;
	snprintf(w->note, sizeof(w->note), "%.*s", (int)strcspn(note, "\n"), note);
	return write_file(w, now);
}

int dt_progress_writer_ring(struct dt_progress_writer *w, const char *ring, double now)
{
	if (!w->path[0])
		return 0;
	snprintf(w->ring, sizeof(w->ring), "%.*s", (int)strcspn(ring, "\n"), ring);
	return write_file(w, now);
}

static struct dt_progress_writer process_writer;
static int process_writer_ready;
static double process_slow_s; /* DT_PROGRESS_SLOW_ENV's delay for this task, 0 without */

double dt_progress_slow_step_s(const char *spec, const char *task)
{
	if (!spec || !task || !task[0])
		return 0;
	size_t n = strlen(task);
	for (const char *p = spec; *p;) {
		const char *end = p + strcspn(p, ",");
		if ((size_t)(end - p) > n + 1 && !strncmp(p, task, n) && p[n] == ':') {
			double ms = strtod(p + n + 1, NULL);
			return ms > 0 && ms <= 60000 ? ms / 1000.0 : 0;
		}
		p = *end ? end + 1 : end;
	}
	return 0;
}

static struct dt_progress_writer *process(void)
{
	if (!process_writer_ready) {
		dt_progress_writer_init(&process_writer, getenv(DT_PROGRESS_ENV));
		process_slow_s = dt_progress_slow_step_s(getenv(DT_PROGRESS_SLOW_ENV), getenv("DTRAIN_TASK"));
		process_writer_ready = 1;
	}
	return &process_writer;
}

void dt_progress_step(int64_t step, int64_t total)
{
	struct dt_progress_writer *w = process();
	if (process_slow_s > 0)
		dt_sleep(process_slow_s);
	if (w->path[0])
		(void)dt_progress_writer_step(w, step, total, dt_wall_seconds());
}

void dt_progress_note(int64_t step, int64_t total, const char *note)
{
	struct dt_progress_writer *w = process();
	if (!w->path[0])
		return;
	double now = dt_wall_seconds();
	(void)writer_step(w, step, total, now, 0);
	(void)dt_progress_writer_note(w, note, now);
}

void dt_progress_ring(int64_t step, int64_t total, const char *ring)
{
	struct dt_progress_writer *w = process();
	if (!w->path[0])
		return;
	double now = dt_wall_seconds();
	(void)writer_step(w, step, total, now, 0);
	(void)dt_progress_writer_ring(w, ring, now);
}

enum dt_status dt_progress_read(const char *path, struct dt_progress *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	out->step = -1;
	char *text = NULL;
	size_t len = 0;
	enum dt_status st = dt_read_file(path, 4096, &text, &len, err);
	if (st)
		return st;
	int have = 0;
	for (char *line = text; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		long long v;
		double d;
		if (sscanf(line, "step_time %lf", &d) == 1) {
			out->step_time = isfinite(d) && d > 0 ? d : 0;
		} else if (sscanf(line, "step %lld", &v) == 1) {
			out->step = v;
			have |= 1;
		} else if (sscanf(line, "total %lld", &v) == 1) {
			out->total = v;
		} else if (sscanf(line, "time %lf", &d) == 1 && isfinite(d)) {
			out->time = d;
			have |= 2;
		} else if (sscanf(line, "rate %lf", &d) == 1 && isfinite(d) && d >= 0) {
			out->rate = d;
		} else if (!strncmp(line, "note ", 5)) {
			snprintf(out->note, sizeof(out->note), "%s", line + 5);
		} else if (!strncmp(line, "ring ", 5)) {
			snprintf(out->ring, sizeof(out->ring), "%s", line + 5);
		}
		line = nl ? nl + 1 : NULL;
	}
	free(text);
	if (have != 3)
		return dt_err_set(err, DT_DATA, "progress file '%s' lacks its 'step' or 'time' line", path);
	return DT_OK;
}

void dt_progress_fmt_duration(char *buf, size_t cap, double s)
{
	if (!(s >= 0) || !isfinite(s) || s > 1e9)
		snprintf(buf, cap, "-");
	else if (s < 60)
		snprintf(buf, cap, "%ds", (int)(s + 0.5));
	else if (s < 3600)
		snprintf(buf, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
	else
		snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)s % 3600 / 60);
}
