/*
 * trace.h — a timeline of this process's spans (`--timeline=PATH`), in the
 * Chrome trace event format that Perfetto (ui.perfetto.dev) and
 * chrome://tracing open: where a step's time goes, task by task.
 *
 * A span is a named interval on one thread: the input wait, forward,
 * backward, each all-reduce bucket, each parameter-server round, the
 * optimizer, a checkpoint save, an evaluation. Code that has one calls
 *
 *     int64_t t0 = dt_trace_begin();
 *     ... the work ...
 *     dt_trace_end(t0, "allreduce", "bucket 3", step, bytes);
 *
 * Off (the default) dt_trace_begin returns 0 after one relaxed load and
 * dt_trace_end returns at once: nothing else is paid. On, the span goes into
 * a ring of the last `capacity` spans (a mutex around a few stores: a
 * training step has tens of spans, so the cost is microseconds a step), and
 * dt_trace_close writes the ring as one JSON file, atomically (temp file,
 * fsync, rename): a run that dies leaves the previous file or none, never a
 * half-written one.
 *
 * The file, one object (the format's "JSON Object Format"):
 *   1. "traceEvents": first two metadata events ("ph": "M") naming the
 *      process ("process_name": the task, "chief:0") and ordering it
 *      ("process_sort_index"); then one "thread_name" event a thread that
 *      has spans ("main", or the name given with dt_trace_thread_name);
 *   2. then one complete event ("ph": "X") a span, oldest first:
 *      {"name", "cat", "ph": "X", "ts": whole microseconds, "dur": whole
 *       microseconds (start and end each rounded down, so spans nest as they
 *       ran and the numbers are exact as doubles),
 *       "pid": this process's pid, "tid": the thread's id (gettid),
 *       "args": {"step": S, "bytes": B}} ("bytes" only when given, >= 0);
 *   3. "displayTimeUnit": "ms", and "otherData": {"dropped": spans the ring
 *      overwrote}.
 * Timestamps are CLOCK_REALTIME, so the files of the tasks of one host are
 * on one clock and merge by concatenating their traceEvents (what
 * `dtrain timeline merge` does); across hosts they are as aligned as the
 * hosts' clocks.
 *
 * Threads: dt_trace_end may be called from any thread. One trace per
 * process; open and close from the main thread, with no span in flight.
 */
#ifndef DT_BASE_TRACE_H
#define DT_BASE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DT_TRACE_DEFAULT_CAPACITY 65536

/* Starts recording for the file at `path` (written by dt_trace_close) as
 * task `process_name` ("chief:0"), keeping the last `capacity` spans (0: the
 * default). A path whose directory does not exist is DT_IO, now rather than
 * at the end of the run. */
enum dt_status dt_trace_open(const char *path, const char *process_name, size_t capacity,
			     struct dt_err *err) DT_MUST_CHECK;
/* True while recording. */
int dt_trace_on(void);
/* The start of a span: the time (ns, CLOCK_REALTIME) while recording, 0 when not. */
int64_t dt_trace_begin(void);
/* Ends the span begun at t0 (0: not recording, nothing done). `cat` and
 * `name` must outlive the trace (string literals, or names the caller keeps).
 * step < 0 and bytes < 0 are left out of its args. */
void dt_trace_end(int64_t t0, const char *cat, const char *name, int64_t step, int64_t bytes);
/* Names the calling thread's track ("comm", "prefetch", "replica 1"). */
void dt_trace_thread_name(const char *name);
/* Writes the file and stops recording (nothing when not recording). */
enum dt_status dt_trace_close(struct dt_err *err) DT_MUST_CHECK;

#endif
