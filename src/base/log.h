/*
 * log.h — progress and diagnostic lines on stderr, prefixed by the task.
 *
 * Every line reads "[role:index] LEVEL message", e.g. "[worker:1] I step 100 ...",
 * so the interleaved output of a cluster stays attributable. The identity
 * is set once at start-up (default "[dtrain]" before the role is known).
 * Lines are written with one write(2) call, so concurrent threads and
 * processes sharing a terminal never interleave inside a line.
 *
 * Levels: DEBUG < INFO < WARN < ERROR. The threshold defaults to INFO and
 * comes from --log_level or DTRAIN_LOG_LEVEL (debug|info|warn|error).
 * Logging is for progress and diagnosis; the final error of a command is
 * printed by cmd/, not through here.
 */
#ifndef DT_BASE_LOG_H
#define DT_BASE_LOG_H

#include "base/err.h"

enum dt_log_level { DT_LOG_DEBUG, DT_LOG_INFO, DT_LOG_WARN, DT_LOG_ERROR, DT_LOG_OFF };

/* Sets the prefix to "[role:index]"; index < 0 gives "[role]". */
void dt_log_set_identity(const char *role, int index);
void dt_log_set_level(enum dt_log_level level);
enum dt_log_level dt_log_get_level(void);
/* Parses "debug", "info", "warn", "error", "off". */
enum dt_status dt_log_parse_level(const char *text, enum dt_log_level *out, struct dt_err *err) DT_MUST_CHECK;

void dt_log(enum dt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define dt_debug(...) dt_log(DT_LOG_DEBUG, __VA_ARGS__)
#define dt_info(...)  dt_log(DT_LOG_INFO, __VA_ARGS__)
#define dt_warn(...)  dt_log(DT_LOG_WARN, __VA_ARGS__)
#define dt_error(...) dt_log(DT_LOG_ERROR, __VA_ARGS__)

#endif
