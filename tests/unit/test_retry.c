/* Tests for src/base/retry.c, the state machine of every wait for a peer:
 * driven with made-up clocks, so each transition is exact. */
#include <stdio.h>
#include <string.h>

#include "dt_test.h"
#include "base/retry.h"

#define S(x) ((int64_t)((x) * 1e9))

DT_TEST(retry, transient_is_what_exit_code_3_means)
{
	DT_CHECK(dt_retry_transient(DT_PEER));
	DT_CHECK(dt_retry_transient(DT_TIMEOUT));
	DT_CHECK(dt_retry_transient(DT_PROTOCOL));
	DT_CHECK(!dt_retry_transient(DT_OK));
	DT_CHECK(!dt_retry_transient(DT_CONFIG));  /* a refusal at the handshake */
	DT_CHECK(!dt_retry_transient(DT_USAGE));
	DT_CHECK(!dt_retry_transient(DT_IO));      /* no descriptors left: local */
	DT_CHECK(!dt_retry_transient(DT_NOMEM));
	DT_CHECK(!dt_retry_transient(DT_INTERNAL));
}

DT_TEST(retry, pauses_double_with_jitter_up_to_the_cap_and_never_pass_the_deadline)
{
	struct dt_retry r;
	const int64_t t0 = S(100);
	dt_retry_init(&r, t0, t0 + S(10), "--connect_timeout=10 s", 7);
	struct dt_err e = DT_ERR_INIT;
	dt_err_set(&e, DT_PEER, "reset");
	double base = DT_RETRY_FIRST_PAUSE_S;
	int64_t now = t0;
	int capped = 0;
	for (int i = 0; i < 12; i++) {
		DT_CHECK_INT_EQ(dt_retry_failed(&r, DT_PEER, &e, now), 1);
		double pause = (double)(r.next_at - now) / 1e9;
		/* Equal jitter: between half the base and the base. */
		if (pause < base * 0.5 - 1e-9 || pause > base + 1e-9)
			dt_test_fail(__FILE__, __LINE__, "pause %d is %.4f s, expected within [%.4f, %.4f]", i, pause,
				     base * 0.5, base);
		capped += base == DT_RETRY_MAX_PAUSE_S;
		base = base * 2 < DT_RETRY_MAX_PAUSE_S ? base * 2 : DT_RETRY_MAX_PAUSE_S;
		now = r.next_at;
	}
	DT_CHECK(capped >= 5); /* 0.05 · 2^5 > 1: the cap was reached and held */
	DT_CHECK_INT_EQ(r.attempts, 12);
	DT_CHECK(now < t0 + S(10));
	/* Near the deadline the next attempt is at the deadline, not after it. */
	DT_CHECK_INT_EQ(dt_retry_failed(&r, DT_TIMEOUT, &e, t0 + S(9.9)), 1);
	DT_CHECK(r.next_at == t0 + S(10));
	/* At the deadline: over. */
	DT_CHECK_INT_EQ(dt_retry_failed(&r, DT_TIMEOUT, &e, t0 + S(10)), 0);
	DT_CHECK_INT_EQ(r.attempts, 14);
	/* An attempt's own deadline is cut to the wait's. */
	DT_CHECK(dt_retry_attempt_deadline(&r, t0 + S(2)) == t0 + S(2));
	DT_CHECK(dt_retry_attempt_deadline(&r, t0 + S(60)) == t0 + S(10));
}

DT_TEST(retry, the_final_error_names_the_deadline_the_attempts_and_the_last_failure)
{
	struct dt_retry r;
	dt_retry_init(&r, S(5), S(8), "--connect_timeout=3 s", 1);
	struct dt_err e = DT_ERR_INIT;
	dt_err_set(&e, DT_PEER, "cannot connect to ps:0 at 127.0.0.1:9: Connection refused");
	DT_CHECK_INT_EQ(dt_retry_failed(&r, DT_PEER, &e, S(6)), 1);
	dt_err_set(&e, DT_TIMEOUT, "handshake with ps:0 at 127.0.0.1:9: no answer to our hello within 10.0 s");
	DT_CHECK_INT_EQ(dt_retry_failed(&r, DT_TIMEOUT, &e, S(8)), 0);
	struct dt_err out = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_retry_give_up(&r, "cannot reach ps:0 at 127.0.0.1:9", S(8.25), &out), DT_TIMEOUT);
	DT_CHECK_INT_EQ(out.status, DT_TIMEOUT);
	DT_CHECK_STR_EQ(out.msg, "cannot reach ps:0 at 127.0.0.1:9 within --connect_timeout=3 s (2 attempts over 3.2 s); "
				 "the last: handshake with ps:0 at 127.0.0.1:9: no answer to our hello within 10.0 s");
	/* err may be NULL: the status alone. */
	DT_CHECK_INT_EQ(dt_retry_give_up(&r, "x", S(9), NULL), DT_TIMEOUT);
}

DT_TEST(retry, a_refusal_ends_the_wait_at_once_with_its_own_error)
{
	struct dt_retry r;
	dt_retry_init(&r, 0, S(120), "--connect_timeout=120 s", 3);
	struct dt_err e = DT_ERR_INIT;
	dt_err_set(&e, DT_PEER, "reset");
	DT_CHECK_INT_EQ(dt_retry_failed(&r, DT_PEER, &e, S(1)), 1);
	dt_err_set(&e, DT_CONFIG, "ps:0 at 127.0.0.1:9 refused the connection: model signature differs");
	DT_CHECK_INT_EQ(dt_retry_failed(&r, DT_CONFIG, &e, S(2)), 0); /* long before the deadline */
	struct dt_err out = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_retry_give_up(&r, "cannot reach ps:0", S(2), &out), DT_CONFIG);
	DT_CHECK_STR_EQ(out.msg, "ps:0 at 127.0.0.1:9 refused the connection: model signature differs");
}

DT_TEST(retry, a_wait_whose_deadline_passed_before_any_attempt_says_so)
{
	struct dt_retry r;
	dt_retry_init(&r, S(3), S(3), NULL, 0); /* no name: a generic one; seed 0 still jitters */
	struct dt_err out = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_retry_give_up(&r, "cannot reach worker:1", S(3), &out), DT_TIMEOUT);
	DT_CHECK_STR_EQ(out.msg, "cannot reach worker:1 within the deadline (0 attempts over 0.0 s); the last: none was made");
	/* A failure without a message keeps the status's. */
	DT_CHECK_INT_EQ(dt_retry_failed(&r, DT_PEER, NULL, S(3)), 0);
	DT_CHECK_STR_EQ(r.last_err.msg, "peer failure");
	DT_CHECK_INT_EQ(r.last_err.status, DT_PEER);
}
