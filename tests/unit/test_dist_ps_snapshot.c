/* Snapshots and restores of a parameter server (distribute/ps_snapshot.h): the
 * payload codec against hostile input, and the server's handling in one
 * process — a snapshot of a trained ps restored onto a fresh one gives the
 * same values, slots and update counts; only the chief restores; the step
 * lives on ps:0; a restore with the wrong number of slots is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "distribute/placement.h"
#include "distribute/ps_client.h"
#include "distribute/ps_server.h"
#include "distribute/ps_snapshot.h"
#include "distribute/ps_wire.h"
#include "dt_test.h"
#include "net/bytes.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "nn/hparams.h"
#include "nn/model.h"
#include "nn/optimizer.h"

#define FP 0x5eedull
#define ROWS 40
#define COLS 30

DT_TEST(dist_ps_snapshot, the_codec_round_trips_and_rejects_every_bad_length)
{
	struct dt_err err = DT_ERR_INIT;
	uint64_t count = 3;
	size_t bytes = dt_ps_snapshot_bytes(count, 2);
	DT_CHECK_UINT_EQ(bytes, DT_PS_SNAPSHOT_HEADER + 9 * 4);
	uint8_t *buf = calloc(1, bytes + 8);
	dt_ps_snapshot_encode_header(100, count, 77, 2, buf);
	for (int i = 0; i < 9; i++) {
		float v = (float)i + 0.5f;
		memcpy(buf + DT_PS_SNAPSHOT_HEADER + 4 * i, &v, 4);
	}
	struct dt_ps_snapshot m;
	DT_CHECK_OK(dt_ps_snapshot_decode(buf, bytes, &m, &err), &err);
	DT_CHECK_UINT_EQ(m.range.offset, 100);
	DT_CHECK_UINT_EQ(m.range.count, 3);
	DT_CHECK_INT_EQ(m.updates, 77);
	DT_CHECK_UINT_EQ(m.num_slots, 2);
	float v;
	memcpy(&v, m.slots + 4 * 4, 4); /* slot 1, element 1: the 8th float */
	DT_CHECK_NEAR(v, 7.5, 0);

	/* Every length but the exact one, and each bad field, is DT_PROTOCOL. */
	for (size_t len = 0; len < bytes + 8; len++)
		if (len != bytes)
			DT_CHECK_INT_EQ(dt_ps_snapshot_decode(buf, len, &m, &err), DT_PROTOCOL);
	dt_put_u32le(buf + 24, 3);
	DT_CHECK_INT_EQ(dt_ps_snapshot_decode(buf, bytes, &m, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "3 slots per element");
	dt_put_u32le(buf + 24, 2);
	dt_put_u32le(buf + 28, 1);
	DT_CHECK_INT_EQ(dt_ps_snapshot_decode(buf, bytes, &m, &err), DT_PROTOCOL);
	dt_put_u32le(buf + 28, 0);
	dt_put_u64le(buf + 16, UINT64_MAX);
	DT_CHECK_INT_EQ(dt_ps_snapshot_decode(buf, bytes, &m, &err), DT_PROTOCOL);
	dt_put_u64le(buf + 16, 0);
	/* A count whose byte size overflows, and a range past 2^64. */
	dt_put_u64le(buf + 8, UINT64_MAX / 4);
	DT_CHECK_INT_EQ(dt_ps_snapshot_decode(buf, bytes, &m, &err), DT_PROTOCOL);
	DT_CHECK_UINT_EQ(dt_ps_snapshot_bytes(UINT64_MAX / 4, 2), 0);
	dt_put_u64le(buf + 8, count);
	dt_put_u64le(buf, UINT64_MAX - 1);
	DT_CHECK_INT_EQ(dt_ps_snapshot_decode(buf, bytes, &m, &err), DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "overflows");

	int64_t step = 0;
	uint8_t s8[8];
	dt_put_u64le(s8, 1234);
	DT_CHECK_OK(dt_ps_set_step_decode(s8, 8, &step, &err), &err);
	DT_CHECK_INT_EQ(step, 1234);
	dt_put_u64le(s8, (uint64_t)INT64_MAX + 1);
	DT_CHECK_INT_EQ(dt_ps_set_step_decode(s8, 8, &step, &err), DT_PROTOCOL);
	DT_CHECK_INT_EQ(dt_ps_set_step_decode(s8, 7, &step, &err), DT_PROTOCOL);
	free(buf);
}

struct fixture {
	struct dt_variable vars[2];
	struct dt_placement pl;
	struct dt_hparams hp;
	struct dt_hello ps_hello, chief_hello, worker_hello;
	struct dt_loop *loop;
	struct dt_ps_server *ps[2];      /* two ps:0 of the same model: the trained one and a fresh one */
	char addr[2][64];
	const char *addrs[2][1];
	size_t n;
	float *params, *grads;
};

static void hello(struct fixture *f, struct dt_hello *h, const char *role)
{
	struct dt_err err = DT_ERR_INIT;
	dt_hello_init(h, role, 0, FP);
	DT_CHECK_OK(dt_ps_signature_add_vars(&h->signature, f->vars, 2, &err), &err);
}

static void fixture_start(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	struct dt_err err = DT_ERR_INIT;
	f->vars[0] = (struct dt_variable){ .name = "dense_1/kernel", .ndim = 2, .shape = { ROWS, COLS }, .offset = 0,
					   .count = ROWS * COLS };
	f->vars[1] = (struct dt_variable){ .name = "dense_1/bias", .ndim = 1, .shape = { COLS },
					   .offset = ROWS * COLS, .count = COLS };
	f->n = ROWS * COLS + COLS;
	DT_CHECK_OK(dt_placement_compute(f->vars, 2, 1, 0, &f->pl, &err), &err);
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &f->hp, &err), &err);
	snprintf(f->hp.optimizer, sizeof(f->hp.optimizer), "adam");
	DT_CHECK_OK(dt_loop_new(&f->loop, &err), &err);
	hello(f, &f->ps_hello, "ps");
	hello(f, &f->chief_hello, "chief");
	hello(f, &f->worker_hello, "worker");
	for (int i = 0; i < 2; i++) {
		struct dt_ps_server_config sc = {
			.host = "127.0.0.1", .port = 0, .index = 0, .local = &f->ps_hello, .placement = &f->pl,
			.num_params = f->n, .hp = &f->hp, .chief_role = "chief", .chief_index = 0,
		};
		DT_CHECK_OK(dt_ps_server_new(f->loop, &sc, &f->ps[i], &err), &err);
		snprintf(f->addr[i], sizeof(f->addr[i]), "127.0.0.1:%d", dt_ps_server_port(f->ps[i]));
		f->addrs[i][0] = f->addr[i];
	}
	f->params = calloc(f->n, sizeof(float));
	f->grads = calloc(f->n, sizeof(float));
}

static void fixture_stop(struct fixture *f)
{
	for (int i = 0; i < 2; i++)
		dt_ps_server_free(f->ps[i]);
	dt_hello_release(&f->ps_hello);
	dt_hello_release(&f->chief_hello);
	dt_hello_release(&f->worker_hello);
	dt_loop_free(f->loop);
	dt_placement_release(&f->pl);
	free(f->params), free(f->grads);
}

static struct dt_ps_client *client(struct fixture *f, int server, const struct dt_hello *h)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_ps_client_config cc = { .ps_addrs = f->addrs[server], .local = h, .placement = &f->pl,
					  .params = f->params, .grads = f->grads };
	struct dt_ps_client *c;
	DT_CHECK_OK(dt_ps_client_new(f->loop, &cc, dt_deadline_in(10), &c, &err), &err);
	return c;
}

static void bufs_new(struct fixture *f, struct dt_ps_state_bufs *b)
{
	*b = (struct dt_ps_state_bufs){ .params = calloc(f->n, sizeof(float)), .slots = calloc(2 * f->n, sizeof(float)),
					.num_slots = 2, .num_params = f->n };
}

static void snapshot_all(struct fixture *f, struct dt_ps_client *c, struct dt_ps_state_bufs *b, int64_t *updates)
{
	struct dt_err err = DT_ERR_INIT;
	for (int i = 0; i < f->pl.num_shards; i++)
		DT_CHECK_OK(dt_ps_snapshot_pull(dt_ps_client_conn(c, 0), &f->pl.shards[i], b, &updates[i],
						dt_deadline_in(5), &err), &err);
}

DT_TEST(dist_ps_snapshot, a_trained_ps_restored_onto_a_fresh_one_is_the_same)
{
	struct fixture f;
	fixture_start(&f);
	struct dt_err err = DT_ERR_INIT;
	struct dt_ps_client *a = client(&f, 0, &f.chief_hello), *b = client(&f, 1, &f.chief_hello);
	struct dt_ps_client *wb = client(&f, 1, &f.worker_hello);
	struct dt_ps_state_bufs s1, s2;
	bufs_new(&f, &s1);
	bufs_new(&f, &s2);
	int64_t up1[4] = { 0 }, up2[4] = { 0 };
	DT_CHECK(f.pl.num_shards <= 4);

	/* Not initialized: a snapshot is refused. */
	DT_CHECK_INT_EQ(dt_ps_snapshot_pull(dt_ps_client_conn(a, 0), &f.pl.shards[0], &s1, &up1[0], dt_deadline_in(5),
					    &err), DT_PEER);
	DT_CHECK_CONTAINS(err.msg, "not initialized");

	/* Train ps A three steps with Adam, so values, both slots and the counts move. */
	for (size_t i = 0; i < f.n; i++)
		f.params[i] = (float)(i % 17) * 0.01f;
	DT_CHECK_OK(dt_ps_client_init(a, 0, dt_deadline_in(5), &err), &err);
	for (int k = 0; k < 3; k++) {
		for (size_t i = 0; i < f.n; i++)
			f.grads[i] = (float)((i + (size_t)k) % 7) - 3.0f;
		DT_CHECK_OK(dt_ps_client_round(a, 1, 0.01f, 1, 1, NULL, dt_deadline_in(5), &err), &err);
	}
	snapshot_all(&f, a, &s1, up1);
	DT_CHECK(memcmp(s1.params, f.params, f.n * sizeof(float)) == 0);
	for (int i = 0; i < f.pl.num_shards; i++)
		DT_CHECK_INT_EQ(up1[i], 3);
	int nonzero = 0;
	for (size_t i = 0; i < 2 * f.n; i++)
		nonzero += s1.slots[i] != 0.0f;
	DT_CHECK(nonzero > (int)f.n);

	/* Only the chief restores; a worker is refused and B stays empty. */
	DT_CHECK_INT_EQ(dt_ps_snapshot_push(dt_ps_client_conn(wb, 0), &f.pl.shards[0], &s1, 3, dt_deadline_in(5), &err),
			DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "only the chief restores a ps");
	DT_CHECK_INT_EQ(dt_ps_set_step(dt_ps_client_conn(wb, 0), 9, dt_deadline_in(5), &err), DT_CONFIG);
	/* Restore onto B: step first, then every shard; B is initialized by it. */
	DT_CHECK_OK(dt_ps_set_step(dt_ps_client_conn(b, 0), 3, dt_deadline_in(5), &err), &err);
	DT_CHECK(!dt_ps_server_initialized(f.ps[1]));
	for (int i = 0; i < f.pl.num_shards; i++)
		DT_CHECK_OK(dt_ps_snapshot_push(dt_ps_client_conn(b, 0), &f.pl.shards[i], &s1, up1[i], dt_deadline_in(5),
						&err), &err);
	DT_CHECK(dt_ps_server_initialized(f.ps[1]));
	snapshot_all(&f, b, &s2, up2);
	DT_CHECK(memcmp(s1.params, s2.params, f.n * sizeof(float)) == 0);
	DT_CHECK(memcmp(s1.slots, s2.slots, 2 * f.n * sizeof(float)) == 0);
	for (int i = 0; i < f.pl.num_shards; i++)
		DT_CHECK_INT_EQ(up2[i], 3);
	struct dt_ps_status st;
	DT_CHECK_OK(dt_ps_client_status(b, 0, &st, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(st.global_step, 3);

	/* The same next push on both gives the same values: the slots and the
	 * update count (Adam's t) came over too. */
	for (size_t i = 0; i < f.n; i++)
		f.grads[i] = (float)(i % 5) - 2.0f;
	DT_CHECK_OK(dt_ps_client_round(a, 1, 0.01f, 1, 0, NULL, dt_deadline_in(5), &err), &err);
	DT_CHECK_OK(dt_ps_client_round(b, 1, 0.01f, 1, 0, NULL, dt_deadline_in(5), &err), &err);
	snapshot_all(&f, a, &s1, up1);
	snapshot_all(&f, b, &s2, up2);
	DT_CHECK(memcmp(s1.params, s2.params, f.n * sizeof(float)) == 0);
	DT_CHECK(memcmp(s1.slots, s2.slots, 2 * f.n * sizeof(float)) == 0);

	/* A restore with another number of slots is refused, naming both. */
	struct dt_ps_state_bufs one = s1;
	one.num_slots = 1;
	DT_CHECK_INT_EQ(dt_ps_snapshot_push(dt_ps_client_conn(b, 0), &f.pl.shards[0], &one, 1, dt_deadline_in(5), &err),
			DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "restore carries 1 optimizer slot(s) per element, this ps's optimizer has 2");

	dt_ps_client_free(wb);
	dt_ps_client_free(b);
	dt_ps_client_free(a);
	free(s1.params), free(s1.slots), free(s2.params), free(s2.slots);
	fixture_stop(&f);
}
