/* Synchronous training through the ps: the accumulators and the barrier
 * (distribute/ps_sync.h) driven directly with made-up times, the payload codecs
 * (distribute/ps_wire.h) with truncated and garbage inputs, and one trainer
 * against two real servers on one loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/rng.h"
#include "distribute/placement.h"
#include "distribute/ps_client.h"
#include "distribute/ps_server.h"
#include "distribute/ps_sync.h"
#include "distribute/ps_wire.h"
#include "dt_test.h"
#include "net/bytes.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "nn/hparams.h"
#include "nn/optimizer.h"

#define SEC 1000000000LL

/* ---- the core, without sockets ---- */

struct core {
	struct dt_hparams hp;
	struct dt_optimizer opt;
	float params[10];
	struct dt_ps_sync *s;
};

/* Two shards: [0, 4) and [4, 10); sgd at lr 1 so params -= average. */
static void core_start(struct core *c, int trainers, int aggregate)
{
	memset(c, 0, sizeof(*c));
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &c->hp, &err), &err);
	snprintf(c->hp.optimizer, sizeof(c->hp.optimizer), "sgd");
	DT_CHECK_OK(dt_optimizer_init(&c->opt, &c->hp, 10, &err), &err);
	static const struct dt_ps_sync_shard shards[2] = { { 0, 4, DT_VAR_TRAINABLE, 0 }, { 4, 6, DT_VAR_TRAINABLE, 0 } };
	static const char *const names[3] = { "chief:0", "worker:0", "worker:1" };
	struct dt_ps_sync_params p = { .name = "ps:0", .shards = shards, .nshards = 2, .num_params = 10,
				       .params = c->params, .opt = &c->opt, .trainers = names, .num_trainers = trainers };
	c->s = dt_ps_sync_new(&p);
	struct dt_ps_sync_config cfg = { (uint32_t)aggregate, (uint32_t)trainers, 5.0, 20.0 };
	DT_CHECK_OK(dt_ps_sync_configure(c->s, &cfg, "chief:0", 0, &err), &err);
}

static void core_stop(struct core *c)
{
	dt_ps_sync_free(c->s);
	dt_optimizer_release(&c->opt);
}

/* Pushes value v on every element of both shards for trainer t at `step`; returns how many were dropped. */
static int push_all(struct core *c, int t, int64_t step, float v, int64_t now)
{
	float g[6];
	for (int i = 0; i < 6; i++)
		g[i] = v;
	int dropped_total = 0;
	for (int shard = 0; shard < 2; shard++) {
		int dropped;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_OK(dt_ps_sync_push(c->s, shard, t, step, 1.0f, g, now, &dropped, &err), &err);
		dropped_total += dropped;
	}
	return dropped_total;
}

DT_TEST(dist_sync, applies_the_average_once_every_replica_has_pushed)
{
	struct core c;
	core_start(&c, 2, 2);
	DT_CHECK_INT_EQ(push_all(&c, 0, 0, 1.0f, 1 * SEC), 0);
	DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), 0);
	DT_CHECK(c.params[0] == 0.0f);
	DT_CHECK_INT_EQ(push_all(&c, 1, 0, 3.0f, 2 * SEC), 0);
	DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), 1);
	for (int i = 0; i < 10; i++)
		DT_CHECK_NEAR(c.params[i], -2.0, 1e-6); /* -lr * (1 + 3) / 2 */
	struct dt_ps_sync_stats st;
	dt_ps_sync_get_stats(c.s, &st);
	DT_CHECK_INT_EQ(st.applied, 1);
	DT_CHECK_INT_EQ(st.accepted, 4);
	core_stop(&c);
}

DT_TEST(dist_sync, a_step_waits_for_every_shard)
{
	struct core c;
	core_start(&c, 2, 2);
	struct dt_err err = DT_ERR_INIT;
	float g[6] = { 1, 1, 1, 1, 1, 1 };
	int dropped;
	/* Both trainers push shard 0; shard 1 has one gradient: no step yet. */
	DT_CHECK_OK(dt_ps_sync_push(c.s, 0, 0, 0, 1.0f, g, SEC, &dropped, &err), &err);
	DT_CHECK_OK(dt_ps_sync_push(c.s, 0, 1, 0, 1.0f, g, SEC, &dropped, &err), &err);
	DT_CHECK_OK(dt_ps_sync_push(c.s, 1, 0, 0, 1.0f, g, SEC, &dropped, &err), &err);
	DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), 0);
	DT_CHECK_OK(dt_ps_sync_push(c.s, 1, 1, 0, 1.0f, g, SEC, &dropped, &err), &err);
	DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), 1);
	core_stop(&c);
}

DT_TEST(dist_sync, stale_gradients_are_dropped_and_future_ones_refused)
{
	struct core c;
	core_start(&c, 2, 2);
	push_all(&c, 0, 0, 1.0f, SEC);
	push_all(&c, 1, 0, 1.0f, SEC);
	DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), 1);
	float before = c.params[3];
	/* A gradient computed at step 0 arrives after step 0 was applied. */
	DT_CHECK_INT_EQ(push_all(&c, 1, 0, 100.0f, 2 * SEC), 2);
	DT_CHECK(c.params[3] == before);
	struct dt_ps_sync_stats st;
	dt_ps_sync_get_stats(c.s, &st);
	DT_CHECK_INT_EQ(st.dropped, 2);
	/* Nobody can be ahead of the ps. */
	struct dt_err err = DT_ERR_INIT;
	int dropped;
	float g[6] = { 0 };
	DT_CHECK_INT_EQ(dt_ps_sync_push(c.s, 0, 0, 5, 1.0f, g, 2 * SEC, &dropped, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "step 5 while at step 1");
	core_stop(&c);
}

DT_TEST(dist_sync, backups_do_not_hold_the_step)
{
	struct core c;
	core_start(&c, 3, 2);
	for (int64_t step = 0; step < 5; step++) {
		/* worker:1 never pushes; the other two make every step. */
		push_all(&c, 0, step, 1.0f, (step + 1) * SEC);
		DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), step);
		push_all(&c, 1, step, 1.0f, (step + 1) * SEC);
		DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), step + 1);
	}
	/* Its late step-3 gradients are stale. */
	DT_CHECK_INT_EQ(push_all(&c, 2, 3, 1.0f, 6 * SEC), 2);
	DT_CHECK_INT_EQ(dt_ps_sync_check(c.s, 100 * SEC), DT_OK); /* no step open: no deadline */
	core_stop(&c);
}

struct released {
	int count, failed;
	int64_t step;
	uint64_t held_ns;
	char msg[DT_ERR_MSG_MAX];
};

static void on_release(struct dt_ps_sync_waiter *w, int64_t step, uint64_t held_ns, const struct dt_err *failed)
{
	struct released *r = w->owner;
	r->count++;
	r->step = step;
	r->held_ns = held_ns;
	if (failed) {
		r->failed++;
		snprintf(r->msg, sizeof(r->msg), "%s", failed->msg);
	}
}

DT_TEST(dist_sync, the_barrier_releases_waiters_when_the_step_is_applied)
{
	struct core c;
	core_start(&c, 2, 2);
	struct released a = { 0 }, now = { 0 };
	struct dt_ps_sync_waiter wa = { .shard = 1, .after = 0, .owner = &a, .release = on_release };
	struct dt_ps_sync_waiter wn = { .shard = 0, .after = -1, .owner = &now, .release = on_release };
	dt_ps_sync_wait(c.s, &wn, SEC);
	DT_CHECK_INT_EQ(now.count, 1); /* after -1: at once */
	push_all(&c, 0, 0, 1.0f, SEC);
	dt_ps_sync_wait(c.s, &wa, 2 * SEC);
	DT_CHECK_INT_EQ(a.count, 0);
	push_all(&c, 1, 0, 1.0f, 5 * SEC);
	DT_CHECK_INT_EQ(a.count, 1);
	DT_CHECK_INT_EQ(a.failed, 0);
	DT_CHECK_INT_EQ(a.step, 1);
	DT_CHECK_INT_EQ(a.held_ns, 3 * SEC);
	core_stop(&c);
}

DT_TEST(dist_sync, a_missing_trainer_times_the_step_out_naming_it)
{
	struct core c;
	core_start(&c, 2, 2);
	dt_ps_sync_heard(c.s, 1, 1 * SEC);
	push_all(&c, 0, 0, 1.0f, 1 * SEC);
	push_all(&c, 1, 0, 1.0f, 1 * SEC);
	/* Step 1 opens at 10 s with the chief's gradients; worker:0 was last heard at 1 s and is gone at 3 s. */
	dt_ps_sync_gone(c.s, 1, 3 * SEC);
	push_all(&c, 0, 1, 1.0f, 10 * SEC);
	struct released a = { 0 };
	struct dt_ps_sync_waiter wa = { .shard = 0, .after = 1, .owner = &a, .release = on_release };
	dt_ps_sync_wait(c.s, &wa, 10 * SEC);
	DT_CHECK_INT_EQ(dt_ps_sync_deadline(c.s), 15 * SEC);
	DT_CHECK_INT_EQ(dt_ps_sync_check(c.s, 14 * SEC), DT_OK);
	DT_CHECK_INT_EQ(a.count, 0);
	DT_CHECK_INT_EQ(dt_ps_sync_check(c.s, 15 * SEC + 1), DT_TIMEOUT);
	DT_CHECK_INT_EQ(a.failed, 1);
	DT_CHECK_CONTAINS(a.msg, "ps:0: step 1 timed out after 5.0 s with 1 of 2 gradients; missing: worker:0 "
				 "(silent for 14.0 s, disconnected 12.0 s ago)");
	DT_CHECK(strstr(a.msg, "chief:0") == NULL);
	/* Failed for good: later pushes and waits get the same error. */
	struct dt_err err = DT_ERR_INIT;
	int dropped;
	float g[6] = { 0 };
	DT_CHECK_INT_EQ(dt_ps_sync_push(c.s, 0, 0, 1, 1.0f, g, 16 * SEC, &dropped, &err), DT_TIMEOUT);
	DT_CHECK_CONTAINS(err.msg, "timed out");
	struct released b = { 0 };
	struct dt_ps_sync_waiter wb = { .shard = 0, .after = 1, .owner = &b, .release = on_release };
	dt_ps_sync_wait(c.s, &wb, 16 * SEC);
	DT_CHECK_INT_EQ(b.failed, 1);
	core_stop(&c);
}

DT_TEST(dist_sync, the_first_step_has_its_own_deadline_and_silent_trainers_are_named)
{
	struct core c;
	core_start(&c, 3, 3);
	push_all(&c, 0, 0, 1.0f, 1 * SEC);
	DT_CHECK_INT_EQ(dt_ps_sync_deadline(c.s), 21 * SEC); /* first_step_timeout_s = 20 */
	DT_CHECK_INT_EQ(dt_ps_sync_check(c.s, 22 * SEC), DT_TIMEOUT);
	const struct dt_err *f = dt_ps_sync_failure(c.s);
	DT_CHECK(f != NULL);
	DT_CHECK_CONTAINS(f->msg, "missing: worker:0 (never heard from), worker:1 (never heard from)");
	core_stop(&c);
}

DT_TEST(dist_sync, a_restore_sets_the_step_and_forgets_the_open_one)
{
	struct core c;
	core_start(&c, 2, 2);
	push_all(&c, 0, 0, 1.0f, SEC);
	struct released a = { 0 };
	struct dt_ps_sync_waiter wa = { .shard = 0, .after = 5, .owner = &a, .release = on_release };
	dt_ps_sync_wait(c.s, &wa, SEC);
	dt_ps_sync_restore(c.s, 7, 7, 2 * SEC);
	DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), 7);
	DT_CHECK_INT_EQ(a.count, 1);
	DT_CHECK_INT_EQ(a.step, 7);
	DT_CHECK_INT_EQ(dt_ps_sync_deadline(c.s), INT64_MAX);
	/* The half-gathered step 0 is gone: step 7 needs both trainers again. */
	push_all(&c, 0, 7, 1.0f, 3 * SEC);
	DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), 7);
	push_all(&c, 1, 7, 1.0f, 3 * SEC);
	DT_CHECK_INT_EQ(dt_ps_sync_step(c.s), 8);
	struct dt_ps_sync_stats st;
	dt_ps_sync_get_stats(c.s, &st);
	DT_CHECK_INT_EQ(st.applied, 8);
	core_stop(&c);
}

DT_TEST(dist_sync, a_second_configuration_must_match_the_first)
{
	struct core c;
	core_start(&c, 2, 2);
	struct dt_err err = DT_ERR_INIT;
	struct dt_ps_sync_config same = { 2, 2, 5.0, 99.0 }, other = { 1, 2, 5.0, 20.0 };
	DT_CHECK_OK(dt_ps_sync_configure(c.s, &same, "worker:0", 0, &err), &err);
	DT_CHECK_INT_EQ(dt_ps_sync_configure(c.s, &other, "worker:0", 0, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "with 2 of 2 replicas per step and a 5 s step timeout (configured by chief:0), but "
				   "worker:0 asks for 1 of 2 and 5 s");
	DT_CHECK_INT_EQ(dt_ps_sync_trainer_of(c.s, "worker", 0), 1);
	DT_CHECK_INT_EQ(dt_ps_sync_trainer_of(c.s, "worker", 7), -1);
	DT_CHECK_INT_EQ(dt_ps_sync_shard_of(c.s, 4, 6), 1);
	DT_CHECK_INT_EQ(dt_ps_sync_shard_of(c.s, 4, 5), -1);
	core_stop(&c);
}

/* ---- codecs ---- */

/* Every strict prefix of a fixed-size payload fails to decode, and so does one extra byte. */
#define CHECK_PREFIXES_FAIL(buf, len, decode_call)                                   \
	do {                                                                         \
		uint8_t tmp_[512];                                                   \
		DT_CHECK((len) + 1 <= sizeof(tmp_));                                 \
		memcpy(tmp_, buf, len);                                              \
		tmp_[len] = 0;                                                       \
		for (size_t n_ = 0; n_ <= (len) + 1; n_++) {                         \
			if (n_ == (len))                                             \
				continue;                                            \
			struct dt_err e_ = DT_ERR_INIT;                              \
			const uint8_t *p_ = tmp_;                                    \
			size_t l_ = n_;                                              \
			DT_CHECK_INT_EQ(decode_call, DT_PROTOCOL);                   \
			(void)p_, (void)l_;                                          \
		}                                                                    \
	} while (0)

DT_TEST(dist_sync, sync_payloads_round_trip_and_refuse_truncation)
{
	struct dt_err err = DT_ERR_INIT;
	uint8_t b[64];
	struct dt_ps_sync_config cfg = { 2, 3, 7.5, 120 }, cfg2;
	dt_ps_sync_config_encode(&cfg, b);
	DT_CHECK_OK(dt_ps_sync_config_decode(b, DT_PS_SYNC_CONFIG_BYTES, &cfg2, &err), &err);
	DT_CHECK(cfg2.replicas_to_aggregate == 2 && cfg2.total_replicas == 3 && cfg2.step_timeout_s == 7.5 &&
		 cfg2.first_step_timeout_s == 120);
	CHECK_PREFIXES_FAIL(b, DT_PS_SYNC_CONFIG_BYTES, dt_ps_sync_config_decode(p_, l_, &cfg2, &e_));
	struct dt_ps_sync_config bad = { 4, 3, 7.5, 120 };
	dt_ps_sync_config_encode(&bad, b);
	DT_CHECK_INT_EQ(dt_ps_sync_config_decode(b, DT_PS_SYNC_CONFIG_BYTES, &cfg2, &err), DT_PROTOCOL);
	bad = (struct dt_ps_sync_config){ 1, 3, -1, 120 };
	dt_ps_sync_config_encode(&bad, b);
	DT_CHECK_INT_EQ(dt_ps_sync_config_decode(b, DT_PS_SYNC_CONFIG_BYTES, &cfg2, &err), DT_PROTOCOL);

	struct dt_ps_sync_push_reply r = { DT_PS_SYNC_PUSH_DROPPED, 41 }, r2;
	dt_ps_sync_push_reply_encode(&r, b);
	DT_CHECK_OK(dt_ps_sync_push_reply_decode(b, DT_PS_SYNC_PUSH_REPLY_BYTES, &r2, &err), &err);
	DT_CHECK(r2.flags == DT_PS_SYNC_PUSH_DROPPED && r2.step == 41);
	CHECK_PREFIXES_FAIL(b, DT_PS_SYNC_PUSH_REPLY_BYTES, dt_ps_sync_push_reply_decode(p_, l_, &r2, &e_));

	struct dt_ps_sync_pull pl = { { 100, 7 }, -1 }, pl2;
	dt_ps_sync_pull_encode(&pl, b);
	DT_CHECK_OK(dt_ps_sync_pull_decode(b, DT_PS_SYNC_PULL_BYTES, &pl2, &err), &err);
	DT_CHECK(pl2.range.offset == 100 && pl2.range.count == 7 && pl2.after == -1);
	CHECK_PREFIXES_FAIL(b, DT_PS_SYNC_PULL_BYTES, dt_ps_sync_pull_decode(p_, l_, &pl2, &e_));
	pl.after = -2;
	dt_ps_sync_pull_encode(&pl, b);
	DT_CHECK_INT_EQ(dt_ps_sync_pull_decode(b, DT_PS_SYNC_PULL_BYTES, &pl2, &err), DT_PROTOCOL);
}

DT_TEST(dist_sync, value_payloads_must_hold_exactly_their_count)
{
	struct dt_err err = DT_ERR_INIT;
	/* 8-byte aligned, as the connection layer delivers payloads */
	uint64_t store[16];
	uint8_t *b = (uint8_t *)store;
	float g[3] = { 1.5f, -2.0f, 3.25f };
	struct dt_ps_push m = { .range = { 10, 3 }, .lr = 0.5f, .step = 9 }, m2;
	dt_ps_sync_push_header_encode(&m, b);
	memcpy(b + DT_PS_SYNC_PUSH_HEADER, g, sizeof(g));
	size_t len = DT_PS_SYNC_PUSH_HEADER + sizeof(g);
	DT_CHECK_OK(dt_ps_sync_push_decode(b, len, &m2, &err), &err);
	DT_CHECK(m2.range.offset == 10 && m2.range.count == 3 && m2.step == 9 && m2.lr == 0.5f && m2.grads[2] == 3.25f);
	CHECK_PREFIXES_FAIL(b, len, dt_ps_sync_push_decode(p_, l_, &m2, &e_));
	/* A count whose byte size overflows is not a size. */
	dt_put_u64le(b + 8, UINT64_MAX / 2);
	DT_CHECK_INT_EQ(dt_ps_sync_push_decode(b, len, &m2, &err), DT_PROTOCOL);

	struct dt_ps_sync_pull_reply pr;
	dt_ps_sync_pull_reply_encode_header(12, 345, b);
	memcpy(b + DT_PS_SYNC_PULL_REPLY_HEADER, g, sizeof(g));
	len = DT_PS_SYNC_PULL_REPLY_HEADER + sizeof(g);
	DT_CHECK_OK(dt_ps_sync_pull_reply_decode(b, len, 3, &pr, &err), &err);
	DT_CHECK(pr.step == 12 && pr.held_ns == 345 && pr.values[1] == -2.0f);
	DT_CHECK_INT_EQ(dt_ps_sync_pull_reply_decode(b, len, 4, &pr, &err), DT_PROTOCOL);
	CHECK_PREFIXES_FAIL(b, len, dt_ps_sync_pull_reply_decode(p_, l_, 3, &pr, &e_));

	struct dt_ps_replica_step st;
	dt_ps_replica_step_encode_header(4, 3, b);
	memcpy(b + DT_PS_REPLICA_STEP_HEADER, g, sizeof(g));
	len = DT_PS_REPLICA_STEP_HEADER + sizeof(g);
	DT_CHECK_OK(dt_ps_replica_step_decode(b, len, 3, &st, &err), &err);
	DT_CHECK(st.step == 4 && st.count == 3 && st.values[0] == 1.5f);
	DT_CHECK_INT_EQ(dt_ps_replica_step_decode(b, len, 2, &st, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "carries 3 values, the model has 2");
	CHECK_PREFIXES_FAIL(b, len, dt_ps_replica_step_decode(p_, l_, 3, &st, &e_));

	struct dt_ps_replica_figures fig = { .loss_sum = 1.25, .correct = 5, .examples = 8, .counted = 40 };
	DT_CHECK_INT_EQ(dt_ps_replica_reply_encode_header(&fig, 3, 0, b), DT_PS_REPLICA_REPLY_HEADER);
	memcpy(b + DT_PS_REPLICA_REPLY_HEADER, g, sizeof(g));
	len = DT_PS_REPLICA_REPLY_HEADER + sizeof(g);
	DT_CHECK_OK(dt_ps_replica_reply_decode(b, len, 3, 0, &st, &err), &err);
	DT_CHECK(st.fig.loss_sum == 1.25 && st.fig.correct == 5 && st.fig.examples == 8 && st.values[2] == 3.25f);
	DT_CHECK(st.fig.counted == 0); /* the older layout carries no token figures */
	CHECK_PREFIXES_FAIL(b, len, dt_ps_replica_reply_decode(p_, l_, 3, 0, &st, &e_));
	fig.correct = 9; /* more correct than examples */
	dt_ps_replica_reply_encode_header(&fig, 3, 0, b);
	DT_CHECK_INT_EQ(dt_ps_replica_reply_decode(b, len, 3, 0, &st, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "9 correct of 8 examples");
}

DT_TEST(dist_sync, replica_reply_with_text_figures_round_trips_and_checks_its_counts)
{
	struct dt_err err = DT_ERR_INIT;
	uint64_t store[(DT_PS_REPLICA_REPLY_TEXT_HEADER + 12) / 8 + 1];
	uint8_t *b = (uint8_t *)store;
	const float g[3] = { 1.5f, -2.0f, 3.25f };
	struct dt_ps_replica_figures fig = { .loss_sum = 0.75, .correct = 37, .examples = 4, .counted = 41,
					     .seqs_correct = 3, .nll_sum = 12.5, .bleu_sum = 0.625, .bleu_batches = 2 };
	DT_CHECK_INT_EQ(dt_ps_replica_reply_encode_header(&fig, 3, 1, b), DT_PS_REPLICA_REPLY_TEXT_HEADER);
	memcpy(b + DT_PS_REPLICA_REPLY_TEXT_HEADER, g, sizeof(g));
	size_t len = DT_PS_REPLICA_REPLY_TEXT_HEADER + sizeof(g);
	struct dt_ps_replica_step st;
	DT_CHECK_OK(dt_ps_replica_reply_decode(b, len, 3, 1, &st, &err), &err);
	DT_CHECK(st.fig.loss_sum == 0.75 && st.fig.correct == 37 && st.fig.examples == 4 && st.fig.counted == 41 &&
		 st.fig.seqs_correct == 3 && st.fig.nll_sum == 12.5 && st.fig.bleu_sum == 0.625 &&
		 st.fig.bleu_batches == 2 && st.count == 3 && st.values[0] == 1.5f && st.values[2] == 3.25f);
	/* The first 24 bytes are the older layout's: read as one, the length is off by the text part. */
	DT_CHECK_INT_EQ(dt_ps_replica_reply_decode(b, len, 3, 0, &st, &err), DT_PROTOCOL);
	CHECK_PREFIXES_FAIL(b, len, dt_ps_replica_reply_decode(p_, l_, 3, 1, &st, &e_));
	fig.correct = 42; /* more tokens right than counted */
	dt_ps_replica_reply_encode_header(&fig, 3, 1, b);
	DT_CHECK_INT_EQ(dt_ps_replica_reply_decode(b, len, 3, 1, &st, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "42 correct of 41 tokens");
	fig.correct = 37;
	fig.seqs_correct = 5; /* more sequences right than sent */
	dt_ps_replica_reply_encode_header(&fig, 3, 1, b);
	DT_CHECK_INT_EQ(dt_ps_replica_reply_decode(b, len, 3, 1, &st, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "5 of 4 sequences right");
	fig.seqs_correct = 3;
	fig.bleu_batches = DT_PS_REPLICA_MAX_PER_TASK + 1;
	dt_ps_replica_reply_encode_header(&fig, 3, 1, b);
	DT_CHECK_INT_EQ(dt_ps_replica_reply_decode(b, len, 3, 1, &st, &err), DT_PROTOCOL);
}

DT_TEST(dist_sync, replica_setup_round_trips_and_checks_its_ranges)
{
	struct dt_err err = DT_ERR_INIT;
	uint8_t b[DT_PS_REPLICA_SETUP_MAX];
	struct dt_ps_replica_setup s = { .replicas = 2, .first_shard = 2, .total_shards = 4, .batch_size = 64,
					 .seed = 7, .dropout = 0.25f, .problem = "fashion_mnist" }, s2;
	size_t len = dt_ps_replica_setup_encode(&s, b);
	DT_CHECK_INT_EQ(len, DT_PS_REPLICA_SETUP_HEADER + strlen("fashion_mnist"));
	DT_CHECK_OK(dt_ps_replica_setup_decode(b, len, &s2, &err), &err);
	DT_CHECK(s2.replicas == 2 && s2.first_shard == 2 && s2.total_shards == 4 && s2.batch_size == 64 && s2.seed == 7 &&
		 s2.dropout == 0.25f);
	DT_CHECK_STR_EQ(s2.problem, "fashion_mnist");
	for (size_t n = 0; n < len; n++)
		DT_CHECK_INT_EQ(dt_ps_replica_setup_decode(b, n, &s2, &err), DT_PROTOCOL);
	s.first_shard = 3; /* shards 3..4 of 4 */
	len = dt_ps_replica_setup_encode(&s, b);
	DT_CHECK_INT_EQ(dt_ps_replica_setup_decode(b, len, &s2, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "shards 3..4 of 4");
	s.first_shard = 0;
	len = dt_ps_replica_setup_encode(&s, b);
	b[DT_PS_REPLICA_SETUP_HEADER] = '\n';
	DT_CHECK_INT_EQ(dt_ps_replica_setup_decode(b, len, &s2, &err), DT_PROTOCOL);
	/* no problem: a public API master's own model and data */
	s.problem[0] = '\0';
	len = dt_ps_replica_setup_encode(&s, b);
	DT_CHECK_INT_EQ(len, DT_PS_REPLICA_SETUP_HEADER);
	DT_CHECK_OK(dt_ps_replica_setup_decode(b, len, &s2, &err), &err);
	DT_CHECK_STR_EQ(s2.problem, "");
}

DT_TEST(dist_sync, garbage_never_crashes_a_decoder)
{
	struct dt_rng rng;
	dt_rng_derive(&rng, 1, "garbage", 0);
	uint64_t store[16];
	uint8_t *b = (uint8_t *)store;
	for (int iter = 0; iter < 20000; iter++) {
		size_t len = dt_rng_next(&rng) % sizeof(store);
		for (size_t i = 0; i < len; i++)
			b[i] = (uint8_t)dt_rng_next(&rng);
		if (iter & 1 && len >= 16) /* small counts, so the length checks get exercised */
			dt_put_u64le(b + 8, dt_rng_next(&rng) % 32);
		struct dt_ps_sync_config c;
		struct dt_ps_push p;
		struct dt_ps_sync_push_reply r;
		struct dt_ps_sync_pull pl;
		struct dt_ps_sync_pull_reply pr;
		struct dt_ps_replica_setup s;
		struct dt_ps_replica_step st;
		struct dt_ps_range rg;
		struct dt_ps_status_msg sm;
		uint64_t u;
		int ok = 0;
		ok += !dt_ps_sync_config_decode(b, len, &c, NULL);
		if (!dt_ps_sync_push_decode(b, len, &p, NULL)) /* a success means an exact size */
			DT_CHECK_INT_EQ(len, DT_PS_SYNC_PUSH_HEADER + p.range.count * 4);
		if (!dt_ps_push_decode(b, len, &p, NULL))
			DT_CHECK_INT_EQ(len, DT_PS_PUSH_HEADER + p.range.count * 4);
		ok += !dt_ps_sync_push_reply_decode(b, len, &r, NULL);
		ok += !dt_ps_sync_pull_decode(b, len, &pl, NULL);
		ok += !dt_ps_sync_pull_reply_decode(b, len, 3, &pr, NULL);
		if (!dt_ps_replica_setup_decode(b, len, &s, NULL))
			DT_CHECK(s.first_shard + s.replicas <= s.total_shards && strlen(s.problem) > 0);
		ok += !dt_ps_replica_step_decode(b, len, 3, &st, NULL);
		ok += !dt_ps_replica_reply_decode(b, len, 3, 0, &st, NULL);
		ok += !dt_ps_replica_reply_decode(b, len, 3, 1, &st, NULL);
		ok += !dt_ps_range_decode(b, len, (int)(iter & 1), &rg, NULL);
		ok += !dt_ps_status_decode(b, len, &sm, NULL);
		ok += !dt_ps_u64_decode(b, len, 1000000, &u, NULL);
		DT_CHECK(ok <= 10);
	}
}

/* ---- one trainer against two real servers ---- */

DT_TEST(dist_sync, one_trainer_steps_through_two_servers_and_async_pushes_are_refused)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_variable vars[2] = {
		{ .name = "dense_1/kernel", .ndim = 2, .shape = { 300, 300 }, .offset = 0, .count = 90000 },
		{ .name = "dense_1/bias", .ndim = 1, .shape = { 300 }, .offset = 90000, .count = 300 },
	};
	const size_t n = 90300;
	struct dt_placement pl;
	DT_CHECK_OK(dt_placement_compute(vars, 2, 2, 0, &pl, &err), &err);
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &hp, &err), &err);
	snprintf(hp.optimizer, sizeof(hp.optimizer), "sgd");
	struct dt_loop *loop;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_hello ps_hello[2], chief_hello;
	const char *trainers[1] = { "chief:0" };
	struct dt_ps_server *ps[2];
	char addr[2][64];
	const char *addrs[2];
	for (int i = 0; i < 2; i++) {
		dt_hello_init(&ps_hello[i], "ps", (uint32_t)i, 7);
		DT_CHECK_OK(dt_ps_signature_add_vars(&ps_hello[i].signature, vars, 2, &err), &err);
		struct dt_ps_server_config sc = {
			.host = "127.0.0.1", .index = i, .local = &ps_hello[i], .placement = &pl, .num_params = n, .hp = &hp,
			.chief_role = "chief", .chief_index = 0, .trainers = trainers, .num_trainers = 1,
		};
		DT_CHECK_OK(dt_ps_server_new(loop, &sc, &ps[i], &err), &err);
		snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", dt_ps_server_port(ps[i]));
		addrs[i] = addr[i];
	}
	dt_hello_init(&chief_hello, "chief", 0, 7);
	DT_CHECK_OK(dt_ps_signature_add_vars(&chief_hello.signature, vars, 2, &err), &err);
	float *params = calloc(n, sizeof(float)), *grads = calloc(n, sizeof(float));
	struct dt_ps_client_config cc = { .ps_addrs = addrs, .local = &chief_hello, .placement = &pl, .params = params,
					  .grads = grads };
	struct dt_ps_client *c;
	DT_CHECK_OK(dt_ps_client_new(loop, &cc, dt_deadline_in(10), &c, &err), &err);

	struct dt_ps_sync_config cfg = { 1, 1, 30, 30 };
	DT_CHECK_OK(dt_ps_client_sync_config(c, &cfg, dt_deadline_in(10), &err), &err);
	/* A sync pull before the init is refused. */
	struct dt_ps_sync_result r;
	DT_CHECK_INT_EQ(dt_ps_client_sync_round(c, 0, 0, 0, -1, &r, dt_deadline_in(5), &err), DT_PEER);
	DT_CHECK_CONTAINS(err.msg, "not initialized");
	for (size_t i = 0; i < n; i++)
		params[i] = 1.0f;
	for (int i = 0; i < 2; i++)
		DT_CHECK_OK(dt_ps_client_init(c, i, dt_deadline_in(10), &err), &err);
	for (int64_t step = 0; step < 3; step++) {
		for (size_t i = 0; i < n; i++)
			grads[i] = 0.5f;
		DT_CHECK_OK(dt_ps_client_sync_round(c, 1, step, 0.1f, step, &r, dt_deadline_in(10), &err), &err);
		DT_CHECK_INT_EQ(r.min_step, step + 1);
		DT_CHECK_INT_EQ(r.global_step, step + 1);
		DT_CHECK_INT_EQ(r.dropped, 0);
	}
	DT_CHECK_NEAR(params[0], 1.0 - 3 * 0.05, 1e-5);
	DT_CHECK_NEAR(params[n - 1], 1.0 - 3 * 0.05, 1e-5);
	/* A stale push is dropped, and the pull comes back at once. */
	DT_CHECK_OK(dt_ps_client_sync_round(c, 1, 1, 0.1f, 1, &r, dt_deadline_in(10), &err), &err);
	DT_CHECK_INT_EQ(r.dropped, pl.num_shards);
	DT_CHECK_INT_EQ(r.min_step, 3);
	struct dt_ps_status s;
	DT_CHECK_OK(dt_ps_client_status(c, 0, &s, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(s.global_step, 3);
	/* The ps trains synchronously: an asynchronous push is refused with a reason. */
	DT_CHECK_INT_EQ(dt_ps_client_round(c, 1, 0.1f, -1, 0, NULL, dt_deadline_in(5), &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "trains synchronously");
	DT_CHECK(dt_ps_server_failure(ps[0]) == NULL);

	dt_ps_client_free(c);
	for (int i = 0; i < 2; i++) {
		dt_ps_server_free(ps[i]);
		dt_hello_release(&ps_hello[i]);
	}
	dt_hello_release(&chief_hello);
	dt_loop_free(loop);
	dt_placement_release(&pl);
	free(params), free(grads);
}

/* Each shard by its variable's kind (distribute/ps_sync.h's dt_ps_shard_apply):
 * a moving average moves toward its trainers' mean value once a step, a
 * frozen one never changes, a trainable one takes the optimizer's update. */
DT_TEST(dist_sync, each_shard_moves_by_its_kind)
{
	struct core c;
	core_start(&c, 2, 2);
	const struct dt_ps_sync_shard ma = { 0, 4, DT_VAR_MOVING_AVERAGE, 0.75f }, fz = { 4, 2, DT_VAR_FROZEN, 0 },
				      tr = { 6, 4, DT_VAR_TRAINABLE, 0 };
	float params[10] = { 1, 1, 1, 1, 5, 5, 0, 0, 0, 0 };
	const float sum[4] = { 2 + 4, 2 + 4, 2 + 4, 2 + 4 }; /* two trainers' values 2 and 4 */
	dt_ps_shard_apply(&ma, &c.opt, params, sum, 2, 1.0f, 1);
	dt_ps_shard_apply(&fz, &c.opt, params, sum, 2, 1.0f, 1);
	dt_ps_shard_apply(&tr, &c.opt, params, sum, 2, 1.0f, 1);
	for (int i = 0; i < 4; i++)
		DT_CHECK_NEAR(params[i], 1.0 - (1.0 - 3.0) * 0.25, 1e-6); /* x -= (x - mean) (1 - decay) */
	DT_CHECK(params[4] == 5.0f && params[5] == 5.0f);
	for (int i = 6; i < 10; i++)
		DT_CHECK_NEAR(params[i], -3.0, 1e-6); /* sgd at lr 1: -mean gradient */
	core_stop(&c);
}
