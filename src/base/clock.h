/*
 * clock.h — monotonic time and deadlines.
 *
 * Every network wait in dtrain has a deadline; a deadline is an absolute
 * monotonic time in nanoseconds, so it survives being passed down through
 * several calls without drift. DT_DEADLINE_NONE is only for waits that are
 * bounded by something else (a child process that is itself bounded).
 */
#ifndef DT_BASE_CLOCK_H
#define DT_BASE_CLOCK_H

#include <stdint.h>

#define DT_NSEC_PER_SEC 1000000000LL
#define DT_DEADLINE_NONE INT64_MAX

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t dt_now_ns(void);
/* Seconds since the epoch, with fractions (CLOCK_REALTIME), for timestamps. */
double dt_wall_seconds(void);

/* Absolute deadline `seconds` from now. */
int64_t dt_deadline_in(double seconds);
/* Milliseconds left until `deadline`, clamped to [0, INT32_MAX]; for poll(). */
int dt_deadline_ms_left(int64_t deadline);
int dt_deadline_passed(int64_t deadline);

/* Sleeps `seconds`, resuming after signals. */
void dt_sleep(double seconds);



/* Seconds since this process started (from /proc/self/stat, 10 ms
 * resolution); -1 if it cannot be read. Used to report start-up latency. */
double dt_process_age_seconds(void);

#endif
