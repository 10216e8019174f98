/*
 * err.h — error values that carry a message written where the failure happened.
 *
 * A fallible function takes an optional `struct dt_err *err` last and returns
 * an `enum dt_status`. On failure it fills `err` with the status and a
 * message naming what failed (file, peer, byte counts, deadline) and returns
 * the same status, so the usual shape is:
 *
 *     if (n < 0)
 *         return dt_err_set(err, DT_IO, "cannot read '%s': %s", path, strerror(errno));
 *
 * Callers add context on the way up with dt_err_prefix(). `err` may be NULL:
 * the status is still returned, the message is dropped. Messages follow
 * git's rules: what failed first, lowercase, no full stop, names quoted.
 *
 * Only cmd/ prints the final message (as "error: <msg>") and picks the exit
 * code from the status; library code never prints errors and never exits.
 */
#ifndef DT_BASE_ERR_H
#define DT_BASE_ERR_H

#include <stddef.h>
#include "base/status.h"

#define DT_ERR_MSG_MAX 1024

struct dt_err {
	enum dt_status status;
	char msg[DT_ERR_MSG_MAX];
};

#define DT_ERR_INIT { DT_OK, "" }

/* Sets status and message; returns `st` so it can be returned directly. */
enum dt_status dt_err_set(struct dt_err *err, enum dt_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prepends "<context>: " to the message already in `err`; returns err->status
 * (or DT_INTERNAL when err is NULL, since the caller is on an error path). */
enum dt_status dt_err_prefix(struct dt_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Appends a new line "hint: <text>" to the message (hints say how to fix it). */
void dt_err_hint(struct dt_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Resets to DT_OK and an empty message. */
void dt_err_clear(struct dt_err *err);

#endif
