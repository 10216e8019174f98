/* Row-sparse variables through the ps (DISTRIBUTED.md "Sparse rows",
 * PROTOCOL.md §3.6): a table pushed and pulled by rows ends bit-identical to
 * the same table pushed densely, under every optimizer; the bytes a step
 * moves stay within the touched rows plus indices and framing; a push with a
 * row out of range is refused and the ps keeps serving. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/rng.h"
#include "distribute/placement.h"
#include "distribute/ps_client.h"
#include "distribute/ps_server.h"
#include "distribute/ps_wire.h"
#include "dt_test.h"
#include "net/bytes.h"
#include "net/conn.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "nn/hparams.h"

#define FP 0x5eedull
#define VOCAB 4096
#define WIDTH 64  /* 1 MiB: split over both servers */
#define TOUCHED 96
#define STEPS 6

struct side {
	struct dt_hello ps_hello[2], chief_hello, worker_hello;
	struct dt_ps_server *ps[2];
	char addr[2][64];
	const char *addrs[2];
	float *params, *grads;
	struct dt_ps_client *c;
	/* synchronous: a second trainer, worker:0 */
	float *wparams, *wgrads;
	struct dt_ps_client *w;
};

static const char *const sync_trainers[2] = { "chief:0", "worker:0" };

static struct dt_variable vars[2];
static size_t total;

static void hello(struct dt_hello *h, const char *role, uint32_t index)
{
	struct dt_err err = DT_ERR_INIT;
	dt_hello_init(h, role, index, FP);
	if (strcmp(role, "ps") == 0)
		h->features = DT_PS_FEATURE_SPARSE_ROWS;
	DT_CHECK_OK(dt_ps_signature_add_vars(&h->signature, vars, 2, &err), &err);
}

/* Two ps, the chief's client, and with `sync` a worker's: both trainers of a
 * synchronous step of two (the chief configured it and initialized the ps). */
static void side_start(struct side *s, struct dt_loop *loop, const struct dt_placement *pl, const struct dt_hparams *hp,
		       const float *init, int sync)
{
	struct dt_err err = DT_ERR_INIT;
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < 2; i++) {
		hello(&s->ps_hello[i], "ps", (uint32_t)i);
		struct dt_ps_server_config sc = { .host = "127.0.0.1", .index = i, .local = &s->ps_hello[i],
						  .placement = pl, .num_params = total, .hp = hp, .chief_role = "chief",
						  .trainers = sync ? sync_trainers : NULL, .num_trainers = sync ? 2 : 0 };
		DT_CHECK_OK(dt_ps_server_new(loop, &sc, &s->ps[i], &err), &err);
		snprintf(s->addr[i], sizeof(s->addr[i]), "127.0.0.1:%d", dt_ps_server_port(s->ps[i]));
		s->addrs[i] = s->addr[i];
	}
	hello(&s->chief_hello, "chief", 0);
	s->params = calloc(total, sizeof(float));
	s->grads = calloc(total, sizeof(float));
	memcpy(s->params, init, total * sizeof(float));
	struct dt_ps_client_config cc = { .ps_addrs = s->addrs, .local = &s->chief_hello, .placement = pl,
					  .params = s->params, .grads = s->grads };
	DT_CHECK_OK(dt_ps_client_new(loop, &cc, dt_deadline_in(10), &s->c, &err), &err);
	if (sync) {
		struct dt_ps_sync_config scfg = { 2, 2, 30, 30 };
		DT_CHECK_OK(dt_ps_client_sync_config(s->c, &scfg, dt_deadline_in(10), &err), &err);
		hello(&s->worker_hello, "worker", 0);
		s->wparams = calloc(total, sizeof(float));
		s->wgrads = calloc(total, sizeof(float));
		struct dt_ps_client_config wc = { .ps_addrs = s->addrs, .local = &s->worker_hello, .placement = pl,
						  .params = s->wparams, .grads = s->wgrads };
		DT_CHECK_OK(dt_ps_client_new(loop, &wc, dt_deadline_in(10), &s->w, &err), &err);
	}
	for (int ps = 0; ps < 2; ps++)
		DT_CHECK_OK(dt_ps_client_init(s->c, ps, dt_deadline_in(5), &err), &err);
}

static void side_stop(struct side *s)
{
	dt_ps_client_free(s->c);
	if (s->w) {
		dt_ps_client_free(s->w);
		dt_hello_release(&s->worker_hello);
	}
	for (int i = 0; i < 2; i++) {
		dt_ps_server_free(s->ps[i]);
		dt_hello_release(&s->ps_hello[i]);
	}
	dt_hello_release(&s->chief_hello);
	free(s->params), free(s->grads), free(s->wparams), free(s->wgrads);
}

static void setup(struct dt_placement *pl, float **init)
{
	struct dt_err err = DT_ERR_INIT;
	vars[0] = (struct dt_variable){ .name = "emb/embeddings", .ndim = 2, .shape = { VOCAB, WIDTH }, .offset = 0,
					.count = VOCAB * WIDTH };
	vars[1] = (struct dt_variable){ .name = "dense/bias", .ndim = 1, .shape = { WIDTH }, .offset = VOCAB * WIDTH,
					.count = WIDTH };
	total = VOCAB * WIDTH + WIDTH;
	DT_CHECK_OK(dt_placement_compute(vars, 2, 2, DT_PLACEMENT_MIN_SLICE_BYTES, pl, &err), &err);
	DT_CHECK(pl->num_shards == 3); /* the table in two slices, one per ps */
	*init = malloc(total * sizeof(float));
	struct dt_rng rng;
	dt_rng_seed(&rng, 7);
	for (size_t i = 0; i < total; i++)
		(*init)[i] = dt_rng_uniform(&rng) - 0.5f;
}

/* This step's touched rows (ascending) and a gradient non-zero only there, and on the bias. */
static size_t make_step(struct dt_rng *rng, int64_t *rows, float *grads)
{
	memset(grads, 0, total * sizeof(float));
	unsigned char seen[VOCAB] = { 0 };
	for (int k = 0; k < TOUCHED; k++)
		seen[dt_rng_next(rng) % VOCAB] = 1;
	size_t n = 0;
	for (int64_t r = 0; r < VOCAB; r++)
		if (seen[r]) {
			rows[n++] = r;
			for (int j = 0; j < WIDTH; j++)
				grads[r * WIDTH + j] = dt_rng_uniform(rng) - 0.5f;
		}
	for (int j = 0; j < WIDTH; j++)
		grads[VOCAB * WIDTH + j] = dt_rng_uniform(rng) - 0.5f;
	return n;
}

static uint64_t moved(const struct dt_ps_client *c)
{
	uint64_t out, in;
	dt_ps_client_bytes(c, &out, &in);
	return out + in;
}

static void dense_against_rows(const char *optimizer)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_placement pl;
	float *init;
	setup(&pl, &init);
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &hp, &err), &err);
	snprintf(hp.optimizer, sizeof(hp.optimizer), "%s", optimizer);
	struct dt_loop *loop;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct side dense, sparse;
	side_start(&dense, loop, &pl, &hp, init, 0);
	side_start(&sparse, loop, &pl, &hp, init, 0);
	DT_CHECK_OK(dt_ps_client_set_sparse(sparse.c, 0, &err), &err);
	struct dt_rng rng;
	dt_rng_seed(&rng, 11);
	int64_t rows[VOCAB], g;
	uint64_t dense_bytes = 0, sparse_bytes = 0, bound = 0;
	for (int step = 0; step < STEPS; step++) {
		const size_t n = make_step(&rng, rows, dense.grads);
		memcpy(sparse.grads, dense.grads, total * sizeof(float));
		uint64_t b0 = moved(dense.c);
		DT_CHECK_OK(dt_ps_client_round(dense.c, 1, 0.05f, 1, 1, &g, dt_deadline_in(5), &err), &err);
		dense_bytes += moved(dense.c) - b0;
		b0 = moved(sparse.c);
		dt_ps_client_set_rows(sparse.c, 0, rows, n);
		DT_CHECK_OK(dt_ps_client_pull_rows(sparse.c, -1, dt_deadline_in(5), &err), &err);
		DT_CHECK_OK(dt_ps_client_round(sparse.c, 1, 0.05f, 1, 1, &g, dt_deadline_in(5), &err), &err);
		sparse_bytes += moved(sparse.c) - b0;
		/* rows out and back (values and u32 indices), the bias out and back;
		 * framing: a row pull and a row push per table shard (2 each), the bias
		 * push and pull, PS_STEP, each a request and a reply: 14 frames of a
		 * 32-byte frame header and at most 32 bytes of payload header */
		bound += 2 * (n * WIDTH * 4 + n * 4) + 2 * WIDTH * 4 + 14 * 64;
	}
	fprintf(stderr, "%s: %d steps, %d touched rows of %d (width %d): dense %.1f KB/step, rows %.1f KB/step (bound %.1f)\n",
		optimizer, STEPS, TOUCHED, VOCAB, WIDTH, dense_bytes / 1024.0 / STEPS, sparse_bytes / 1024.0 / STEPS,
		bound / 1024.0 / STEPS);
	DT_CHECK(sparse_bytes <= bound);
	DT_CHECK(dense_bytes >= (uint64_t)STEPS * 2 * VOCAB * WIDTH * 4);
	/* Every variable bit for bit: a full pull of both (a round without a push pulls every row). */
	DT_CHECK_OK(dt_ps_client_round(dense.c, 0, 0, -1, 1, NULL, dt_deadline_in(5), &err), &err);
	DT_CHECK_OK(dt_ps_client_round(sparse.c, 0, 0, -1, 1, NULL, dt_deadline_in(5), &err), &err);
	DT_CHECK(memcmp(dense.params, sparse.params, total * sizeof(float)) == 0);
	DT_CHECK(memcmp(dense.params, init, total * sizeof(float)) != 0);
	side_stop(&dense);
	side_stop(&sparse);
	dt_loop_free(loop);
	dt_placement_release(&pl);
	free(init);
}

DT_TEST(dist_ps_rows, sgd_by_rows_equals_dense_bit_for_bit_within_the_bytes_bound) { dense_against_rows("sgd"); }
DT_TEST(dist_ps_rows, adam_by_rows_equals_dense_bit_for_bit) { dense_against_rows("adam"); }
DT_TEST(dist_ps_rows, momentum_by_rows_equals_dense_bit_for_bit) { dense_against_rows("momentum"); }
DT_TEST(dist_ps_rows, adagrad_by_rows_equals_dense_bit_for_bit) { dense_against_rows("adagrad"); }

/* Synchronous: two trainers push each step's rows (different ones, some
 * shared) and the ps sums them by row into the step's accumulator, then
 * applies the average: the variables equal two dense pushes' bit for bit.
 * Each trainer pulls its rows once the step before is applied, as
 * train/sync_roles.c does; its round's pull asks for no later step (the
 * other trainer has not pushed yet), and the last pull waits for the last step. */
static void sync_dense_against_rows(const char *optimizer)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_placement pl;
	float *init;
	setup(&pl, &init);
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &hp, &err), &err);
	snprintf(hp.optimizer, sizeof(hp.optimizer), "%s", optimizer);
	struct dt_loop *loop;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct side dense, sparse;
	side_start(&dense, loop, &pl, &hp, init, 1);
	side_start(&sparse, loop, &pl, &hp, init, 1);
	DT_CHECK_OK(dt_ps_client_set_sparse(sparse.c, 0, &err), &err);
	DT_CHECK_OK(dt_ps_client_set_sparse(sparse.w, 0, &err), &err);
	struct dt_ps_sync_result r;
	DT_CHECK_OK(dt_ps_client_sync_round(sparse.w, 0, 0, 0, -1, &r, dt_deadline_in(5), &err), &err);
	DT_CHECK(memcmp(sparse.wparams, init, total * sizeof(float)) == 0);
	struct dt_rng rng;
	dt_rng_seed(&rng, 13);
	int64_t rows[2][VOCAB];
	for (int64_t step = 0; step < STEPS; step++) {
		const size_t n0 = make_step(&rng, rows[0], dense.grads), n1 = make_step(&rng, rows[1], dense.wgrads);
		memcpy(sparse.grads, dense.grads, total * sizeof(float));
		memcpy(sparse.wgrads, dense.wgrads, total * sizeof(float));
		DT_CHECK_OK(dt_ps_client_sync_round(dense.c, 1, step, 0.05f, step - 1, &r, dt_deadline_in(5), &err), &err);
		DT_CHECK_OK(dt_ps_client_sync_round(dense.w, 1, step, 0.05f, step - 1, &r, dt_deadline_in(5), &err), &err);
		DT_CHECK_INT_EQ(r.dropped, 0);
		struct dt_ps_client *t[2] = { sparse.c, sparse.w };
		const size_t n[2] = { n0, n1 };
		for (int k = 0; k < 2; k++) {
			dt_ps_client_set_rows(t[k], 0, rows[k], n[k]);
			DT_CHECK_OK(dt_ps_client_pull_rows(t[k], step - 1, dt_deadline_in(5), &err), &err);
			DT_CHECK_OK(dt_ps_client_sync_round(t[k], 1, step, 0.05f, step - 1, &r, dt_deadline_in(5), &err),
				    &err);
			DT_CHECK_INT_EQ(r.dropped, 0);
		}
		/* The rows the worker pulled are the chief's (the same step's values). */
		for (size_t i = 0; i < n1; i++)
			DT_CHECK(memcmp(sparse.wparams + rows[1][i] * WIDTH, dense.params + rows[1][i] * WIDTH,
					WIDTH * sizeof(float)) == 0);
	}
	/* Every variable bit for bit, once the last step is applied. */
	DT_CHECK_OK(dt_ps_client_sync_round(dense.c, 0, 0, 0, STEPS - 1, &r, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(r.min_step, STEPS);
	DT_CHECK_OK(dt_ps_client_sync_round(sparse.c, 0, 0, 0, STEPS - 1, &r, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(r.min_step, STEPS);
	DT_CHECK(memcmp(dense.params, sparse.params, total * sizeof(float)) == 0);
	DT_CHECK(memcmp(dense.params, init, total * sizeof(float)) != 0);
	for (int i = 0; i < 2; i++)
		DT_CHECK(dt_ps_server_failure(sparse.ps[i]) == NULL);
	side_stop(&dense);
	side_stop(&sparse);
	dt_loop_free(loop);
	dt_placement_release(&pl);
	free(init);
}

DT_TEST(dist_ps_rows, sync_rows_of_two_trainers_sum_as_dense_pushes_under_sgd) { sync_dense_against_rows("sgd"); }
DT_TEST(dist_ps_rows, sync_rows_of_two_trainers_sum_as_dense_pushes_under_adam) { sync_dense_against_rows("adam"); }

static int req_done(void *arg) { return ((struct dt_request *)arg)->done; }

/* One raw request on the client's connection to ps 0; its status. */
static enum dt_status raw(struct dt_loop *loop, struct dt_conn *c, uint16_t type, uint8_t *p, size_t len,
			  struct dt_err *out)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_request r;
	memset(&r, 0, sizeof(r));
	r.type = type;
	r.deadline = dt_deadline_in(5);
	struct iovec part = { p, len };
	DT_CHECK_OK(dt_conn_request(c, &r, &part, 1, 0, &err), &err);
	DT_CHECK_OK(dt_loop_run_until(loop, req_done, &r, dt_deadline_in(6), "a reply", &err), &err);
	*out = r.err;
	return r.status;
}

DT_TEST(dist_ps_rows, a_row_out_of_range_is_refused_and_the_ps_keeps_serving)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_placement pl;
	float *init;
	setup(&pl, &init);
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &hp, &err), &err);
	struct dt_loop *loop;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct side s;
	side_start(&s, loop, &pl, &hp, init, 0);
	const struct dt_shard *sh = NULL;
	for (int i = 0; i < pl.num_shards; i++)
		if (pl.shards[i].variable == 0 && pl.shards[i].ps == 0)
			sh = &pl.shards[i];
	DT_CHECK(sh != NULL);
	const uint32_t rows = (uint32_t)(sh->row_end - sh->row_begin);
	uint8_t msg[DT_PS_ROWS_HEADER + 8 + 2 * WIDTH * 4];
	memset(msg, 0, sizeof(msg));
	struct dt_ps_rows_msg m = { .range = { sh->offset, sh->count }, .step = -1, .lr = 0.1f, .n = 2 };
	dt_ps_rows_header_encode(&m, 1, msg);
	struct dt_conn *c = dt_ps_client_conn(s.c, 0);
	const uint32_t bad[][2] = { { 3, rows }, { 5, 5 }, { 9, 4 }, { 0, UINT32_MAX } };
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		dt_put_u32le(msg + DT_PS_ROWS_HEADER, bad[k][0]);
		dt_put_u32le(msg + DT_PS_ROWS_HEADER + 4, bad[k][1]);
		struct dt_err why = DT_ERR_INIT;
		DT_CHECK_INT_EQ(raw(loop, c, DT_MSG_PS_PUSH_ROWS, msg, sizeof(msg), &why), DT_PROTOCOL);
		fprintf(stderr, "rows %u, %u: %s\n", bad[k][0], bad[k][1], why.msg);
		DT_CHECK_CONTAINS(why.msg, k == 0 || k == 3 ? "out of range" : "strictly ascending");
	}
	/* A pull of a row past the shard, and a push one row short. */
	struct dt_ps_rows_msg pm = { .range = { sh->offset, sh->count }, .step = -1, .n = 1 };
	uint8_t pull[DT_PS_ROWS_HEADER + 4];
	dt_ps_rows_header_encode(&pm, 0, pull);
	dt_put_u32le(pull + DT_PS_ROWS_HEADER, rows + 7);
	struct dt_err why = DT_ERR_INIT;
	DT_CHECK_INT_EQ(raw(loop, c, DT_MSG_PS_PULL_ROWS, pull, sizeof(pull), &why), DT_PROTOCOL);
	DT_CHECK_CONTAINS(why.msg, "out of range");
	dt_put_u32le(msg + DT_PS_ROWS_HEADER, 1);
	dt_put_u32le(msg + DT_PS_ROWS_HEADER + 4, 2);
	DT_CHECK_INT_EQ(raw(loop, c, DT_MSG_PS_PUSH_ROWS, msg, sizeof(msg) - 4, &why), DT_PROTOCOL);
	/* Nothing was applied, and the ps still answers on the same connection. */
	DT_CHECK_OK(dt_ps_client_round(s.c, 0, 0, -1, 1, NULL, dt_deadline_in(5), &err), &err);
	DT_CHECK(memcmp(s.params, init, total * sizeof(float)) == 0);
	struct dt_ps_server_stats st;
	dt_ps_server_get_stats(s.ps[0], &st);
	DT_CHECK(st.refused_requests == 6);
	DT_CHECK_INT_EQ(st.pushes, 0);
	side_stop(&s);
	dt_loop_free(loop);
	dt_placement_release(&pl);
	free(init);
}
