/*
 * retry.h — one wait for a peer as a small state machine: attempt, and on a
 * failure a retry can fix, pause (exponential backoff with jitter) and
 * attempt again, until the wait's own deadline; then give up with an error
 * that names that deadline ("--connect_timeout=120 s"), how many attempts
 * were made and what the last one said.
 *
 *      ┌──────────┐  failed, transient, deadline ahead   ┌────────┐
 *      │ ATTEMPT  │ ───────────────────────────────────▶ │ PAUSE  │
 *      └──────────┘ ◀─────────────────────────────────── └────────┘
 *        │      │          next_at reached
 *   done │      │ failed for good (a refusal), or the deadline passed
 *        ▼      ▼
 *      (ok)   GAVE_UP: dt_retry_give_up()
 *
 * "Transient" is what status.h calls retryable: the exit-code-3 statuses
 * (DT_PEER: refused, reset, closed; DT_TIMEOUT: a connect, a hello or a
 * request with no answer, a half-open connection gone silent; DT_PROTOCOL: a
 * peer cut off mid-frame). Everything else (a refusal at the handshake is
 * DT_CONFIG, a local failure DT_IO or DT_NOMEM) ends the wait at once with
 * its own error: trying again would not change it.
 *
 * Pure: every function takes the time it should act on, so tests drive it
 * with made-up clocks. No allocation; a struct dt_retry is the caller's
 * storage. Not thread-safe (one wait, one thread).
 */
#ifndef DT_BASE_RETRY_H
#define DT_BASE_RETRY_H

#include <stdint.h>

#include "base/err.h"

#define DT_RETRY_FIRST_PAUSE_S 0.05
#define DT_RETRY_MAX_PAUSE_S 1.0

struct dt_retry {
	int64_t deadline;       /* absolute (monotonic ns): no attempt starts after it */
	char deadline_name[96]; /* "--connect_timeout=120 s": what users can change */
	int64_t started;        /* when the wait began */
	double pause_s;         /* the next pause's base (doubles up to max_pause_s) */
	double max_pause_s;
	uint64_t jitter;        /* state of the pause's jitter (xorshift) */
	int attempts;           /* failed attempts so far */
	int64_t next_at;        /* after a transient failure: when to attempt again */
	enum dt_status last;    /* the last failure's status (DT_OK: none yet) */
	struct dt_err last_err; /* and its message */
};

/* Starts a wait at `now` that ends at absolute `deadline`; `deadline_name`
 * (copied, truncated to fit) names it in the final error. `seed` varies the
 * jitter between tasks (a pid, a port). */
void dt_retry_init(struct dt_retry *r, int64_t now, int64_t deadline, const char *deadline_name, uint64_t seed);

/* 1 when a failure with this status may go away by trying again. */
int dt_retry_transient(enum dt_status st);

/* Records a failed attempt (st != DT_OK, `why` may be NULL) at `now`.
 * Returns 1 when the caller should attempt again at r->next_at (never later
 * than the deadline), 0 when the wait is over: st is not transient, or the
 * deadline has passed. */
int dt_retry_failed(struct dt_retry *r, enum dt_status st, const struct dt_err *why, int64_t now);

/* The end of a wait dt_retry_failed said is over: a non-transient failure is
 * returned as it was (`err` gets its message); a deadline is DT_TIMEOUT
 *   "<what> within <deadline_name> (<n> attempts over <s> s); the last: <last error>"
 * Returns the status. `now` is for the elapsed time. */
enum dt_status dt_retry_give_up(const struct dt_retry *r, const char *what, int64_t now, struct dt_err *err);

/* The deadline for one attempt that should end by `by` at the latest
 * (absolute), cut to the wait's own deadline. */
int64_t dt_retry_attempt_deadline(const struct dt_retry *r, int64_t by);

#endif
