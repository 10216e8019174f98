/*
 * progress.h — a task's progress file: its global step, the steps/s over a
 * sliding window of that step counter, and a short note (the evaluator's
 * last result), written by the task and read by `dtrain status` and
 * `dtrain monitor` (docs/LAUNCH.md).
 *
 * The launcher puts the file's path in the task's environment as
 * DTRAIN_PROGRESS_FILE (<experiment>/progress/<task>); without that
 * variable nothing is written. The training side makes ONE call per step:
 *
 *     dt_progress_step(global_step, train_steps);
 *
 * which costs a clock read and a comparison, and at most once a second a
 * rewrite of the file (~100 bytes, temp file + rename: a reader sees the
 * previous or the next file, never half of one; no fsync, since losing a
 * progress line to a crash costs nothing). The evaluator adds its result
 * with dt_progress_note, written at once.
 *
 * File layout, one "key value" per line, keys in this order, unknown keys
 * ignored by readers (so later fields can be added):
 *   1. step <int64>     the newest global step the task saw
 *   2. total <int64>    train_steps, 0 when unknown
 *   3. time <double>    epoch seconds when `step` was seen
 *   4. rate <double>    steps/s over the writer's window (the last
 *                       DT_PROGRESS_WINDOW_S seconds of samples, one sample
 *                       a second); 0 until two samples a second apart exist
 *   5. note <text>      optional, one line, at most 200 bytes
 *   6. ring <text>      optional: an elastic all-reduce ring's members and
 *                       its last change ("workers 0,2 (2 of 3); re-formed
 *                       1 time(s), last at step 812: worker 1 at ... lost: ...")
 *   7. step_time <double> optional: this task's OWN seconds per step (wall
 *                       time over its dt_progress_step calls) over the same
 *                       window; written once two samples exist. Unlike the
 *                       rate (of the global step, which every trainer of an
 *                       asynchronous cluster moves), it tells the tasks
 *                       apart: `status`/`monitor` name the slowest trainer
 *                       with its ratio to the median (launch/state.h).
 *
 * The writer state (struct dt_progress_writer) is transparent so tests
 * drive it with a fake clock; dt_progress_step/note use one per process.
 */
#ifndef DT_BASE_PROGRESS_H
#define DT_BASE_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DT_PROGRESS_ENV "DTRAIN_PROGRESS_FILE"
/* Tests only: "TASK:MS[,TASK:MS...]" makes the launched task named TASK
 * ($DTRAIN_TASK) sleep MS milliseconds in each dt_progress_step call, a
 * straggler on purpose (tests/cli/test_stragglers.c). */
#define DT_PROGRESS_SLOW_ENV "DTRAIN_DEBUG_SLOW_STEP"
#define DT_PROGRESS_WINDOW_S 10.0
#define DT_PROGRESS_SAMPLES 16

/* What a progress file says. */
struct dt_progress {
	int64_t step;   /* -1 when nothing was reported */
	int64_t total;  /* 0: unknown */
	double time;    /* epoch seconds of `step` */
	double rate;    /* steps/s, 0 while unknown */
	double step_time; /* this task's own seconds per step; 0 while unknown */
	char note[208];
	char ring[208]; /* "" when the task wrote none */
};

struct dt_progress_writer {
	char path[512];                 /* "" disables the writer */
	double interval_s;              /* minimum time between rewrites (1 s) */
	double last_write;              /* epoch seconds, 0 before the first */
	int64_t last_step;              /* the step in the file, -1 before the first */
	int64_t total;
	char note[208];
	char ring[208];
	int64_t calls;                  /* dt_progress_writer_step calls: this task's own steps */
	struct { double t; int64_t step, calls; } samples[DT_PROGRESS_SAMPLES]; /* ring, oldest at head */
	int nsamples, head;
};

/* An enabled writer for `path` (NULL or "" gives a disabled one). */
void dt_progress_writer_init(struct dt_progress_writer *w, const char *path);

/* Records `step` seen at `now` (epoch seconds); rewrites the file when
 * at least interval_s passed since the last rewrite, or on the first call,
 * or when step reaches total. Returns 1 when it wrote, 0 when it did not
 * need to, -1 when the write failed (errno set; the next call tries again). */
int dt_progress_writer_step(struct dt_progress_writer *w, int64_t step, int64_t total, double now);

/* Sets the note and rewrites the file at once (same returns). */
int dt_progress_writer_note(struct dt_progress_writer *w, const char *note, double now);
/* The same for the ring line (key 6). */
int dt_progress_writer_ring(struct dt_progress_writer *w, const char *ring, double now);

/* steps/s over the samples of the last DT_PROGRESS_WINDOW_S before the
 * newest one; 0 with fewer than two samples. */
double dt_progress_writer_rate(const struct dt_progress_writer *w);
/* This task's seconds per own step (dt_progress_writer_step calls) over
 * the same samples; 0 with fewer than two, or no call between them. */
double dt_progress_writer_step_time(const struct dt_progress_writer *w);

/* The delay DT_PROGRESS_SLOW_ENV's value `spec` gives task `task`, in
 * seconds (0 when it names it not, or the MS is not in (0, 60000]). */
double dt_progress_slow_step_s(const char *spec, const char *task);

/* The process's writer, opened from $DTRAIN_PROGRESS_FILE on the first
 * call: the training loop's one call per step (thread-unsafe: call it from
 * the thread that runs the loop). */
void dt_progress_step(int64_t step, int64_t total);
/* The process's writer: a note (e.g. "global step 800: accuracy 0.8800,
 * loss 0.3377") about `step`, written at once. */
void dt_progress_note(int64_t step, int64_t total, const char *note);
/* The ring line (an elastic ring's members, after each change), written at once. */
void dt_progress_ring(int64_t step, int64_t total, const char *ring);

/* Reads a progress file. DT_IO when it cannot be read (not written yet:
 * ENOENT), DT_DATA when a required key is missing or malformed. */
enum dt_status dt_progress_read(const char *path, struct dt_progress *out, struct dt_err *err) DT_MUST_CHECK;

/* "1h02m", "3m05s", "42s"; "-" for a negative or non-finite value. */
void dt_progress_fmt_duration(char *buf, size_t cap, double seconds);

#endif
