#include "base/retry.h"

#include <stdio.h>
#include <string.h>

#include "base/status.h"

void dt_retry_init(struct dt_retry *r, int64_t now, int64_t deadline, const char *deadline_name, uint64_t seed)
{
	memset(r, 0, sizeof(*r));
	r->deadline = deadline;
	r->started = now;
	snprintf(r->deadline_name, sizeof(r->deadline_name), "%s", deadline_name ? deadline_name : "the deadline");
	r->pause_s = DT_RETRY_FIRST_PAUSE_S;
	r->max_pause_s = DT_RETRY_MAX_PAUSE_S;
	r->jitter = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull; /* never 0 for xorshift */
	if (!r->jitter)
		r->jitter = 1;
	r->next_at = now;
	r->last = DT_OK;
	r->last_err = (struct dt_err)DT_ERR_INIT;
}

int dt_retry_transient(enum dt_status st)
{
	return st != DT_OK && dt_status_exit_code(st) == 3;
}

/* A number in [0, 1) from the xorshift64 state. */
static double jitter_next(struct dt_retry *r)
{
	uint64_t x = r->jitter;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	r->jitter = x;
	return (double)(x >> 11) / 9007199254740992.0;
}

int dt_retry_failed(struct dt_retry *r, enum dt_status st, const struct dt_err *why, int64_t now)
{
	r->attempts++;
	r->last = st;
	if (why)
		r->last_err = *why;
	else
		dt_err_set(&r->last_err, st, "%s", dt_status_message(st));
	r->last_err.status = st;
	if (!dt_retry_transient(st) || now >= r->deadline)
		return 0;
	/* Equal jitter: half the pause fixed, half random, so tasks that lost the
	 * same peer do not all knock at the same instant. */
	double pause = r->pause_s * (0.5 + 0.5 * jitter_next(r));
	r->pause_s = r->pause_s * 2 < r->max_pause_s ? r->pause_s * 2 : r->max_pause_s;
	int64_t at = now + (int64_t)(pause * 1e9);
	r->next_at = at < r->deadline ? at : r->deadline;
	return 1;
}

enum dt_status dt_retry_give_up(const struct dt_retry *r, const char *what, int64_t now, struct dt_err *err)
{
	if (r->last != DT_OK && !dt_retry_transient(r->last)) {
		if (err)
			*err = r->last_err;
		return r->last;
	}
	return dt_err_set(err, DT_TIMEOUT, "%s within %s (%d attempt%s over %.1f s); the last: %s", what,
			  r->deadline_name, r->attempts, r->attempts == 1 ? "" : "s", (double)(now - r->started) / 1e9,
			  r->last != DT_OK ? r->last_err.msg : "none was made");
}

int64_t dt_retry_attempt_deadline(const struct dt_retry *r, int64_t by)
{
	return by < r->deadline ? by : r->deadline;
}
