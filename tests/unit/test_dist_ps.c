/* The parameter-server store and its client, in one process on one loop:
 * init, pull, push, the global step, the end of the run, refusals, and a
 * push cut off mid-frame. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "distribute/placement.h"
#include "distribute/ps_client.h"
#include "distribute/ps_server.h"
#include "distribute/ps_wire.h"
#include "dt_test.h"
#include "net/bytes.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "net/socket.h"
#include "nn/hparams.h"
#include "nn/model.h"

#define FP 0x1234abcdull
#define ROWS 300
#define COLS 300 /* 360 KB: split over both servers */

struct fixture {
	struct dt_variable vars[2];
	struct dt_placement pl;
	struct dt_hparams hp;
	struct dt_hello ps_hello[2], chief_hello, worker_hello;
	struct dt_loop *loop;
	struct dt_ps_server *ps[2];
	char addr[2][64];
	const char *addrs[2];
	size_t n;
	float *params, *grads, *init;
};

static void fixture_hello(struct fixture *f, struct dt_hello *h, const char *role, uint32_t index)
{
	struct dt_err err = DT_ERR_INIT;
	dt_hello_init(h, role, index, FP);
	DT_CHECK_OK(dt_ps_signature_add_vars(&h->signature, f->vars, 2, &err), &err);
}

static void fixture_start(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	struct dt_err err = DT_ERR_INIT;
	f->vars[0] = (struct dt_variable){ .name = "dense_1/kernel", .ndim = 2, .shape = { ROWS, COLS }, .offset = 0,
					   .count = ROWS * COLS };
	f->vars[1] = (struct dt_variable){ .name = "dense_1/bias", .ndim = 1, .shape = { COLS }, .offset = ROWS * COLS,
					   .count = COLS };
	f->n = ROWS * COLS + COLS;
	DT_CHECK_OK(dt_placement_compute(f->vars, 2, 2, 0, &f->pl, &err), &err);
	DT_CHECK(f->pl.num_shards == 3);
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &f->hp, &err), &err);
	snprintf(f->hp.optimizer, sizeof(f->hp.optimizer), "sgd");
	DT_CHECK_OK(dt_loop_new(&f->loop, &err), &err);
	for (int i = 0; i < 2; i++) {
		fixture_hello(f, &f->ps_hello[i], "ps", (uint32_t)i);
		struct dt_ps_server_config sc = {
			.host = "127.0.0.1", .port = 0, .index = i, .local = &f->ps_hello[i], .placement = &f->pl,
			.num_params = f->n, .hp = &f->hp, .chief_role = "chief", .chief_index = 0,
		};
		DT_CHECK_OK(dt_ps_server_new(f->loop, &sc, &f->ps[i], &err), &err);
		snprintf(f->addr[i], sizeof(f->addr[i]), "127.0.0.1:%d", dt_ps_server_port(f->ps[i]));
		f->addrs[i] = f->addr[i];
	}
	fixture_hello(f, &f->chief_hello, "chief", 0);
	fixture_hello(f, &f->worker_hello, "worker", 1);
	f->params = calloc(f->n, sizeof(float));
	f->grads = calloc(f->n, sizeof(float));
	f->init = calloc(f->n, sizeof(float));
	for (size_t i = 0; i < f->n; i++)
		f->init[i] = (float)(i % 1000) * 0.001f;
}

static void fixture_stop(struct fixture *f)
{
	for (int i = 0; i < 2; i++) {
		dt_ps_server_free(f->ps[i]);
		dt_hello_release(&f->ps_hello[i]);
	}
	dt_hello_release(&f->chief_hello);
	dt_hello_release(&f->worker_hello);
	dt_loop_free(f->loop);
	dt_placement_release(&f->pl);
	free(f->params), free(f->grads), free(f->init);
}

static struct dt_ps_client *client(struct fixture *f, const struct dt_hello *h)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_ps_client_config cc = { .ps_addrs = f->addrs, .local = h, .placement = &f->pl,
					  .params = f->params, .grads = f->grads };
	struct dt_ps_client *c;
	DT_CHECK_OK(dt_ps_client_new(f->loop, &cc, dt_deadline_in(10), &c, &err), &err);
	return c;
}

/* A client whose PS_STEPs carry a last step (--train_steps). */
static struct dt_ps_client *client_until(struct fixture *f, const struct dt_hello *h, int64_t last_step)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_ps_client_config cc = { .ps_addrs = f->addrs, .local = h, .placement = &f->pl,
					  .params = f->params, .grads = f->grads, .last_step = last_step };
	struct dt_ps_client *c;
	DT_CHECK_OK(dt_ps_client_new(f->loop, &cc, dt_deadline_in(10), &c, &err), &err);
	return c;
}

DT_TEST(dist_ps, the_global_step_stops_at_the_last_step_when_trainers_race_for_it)
{
	struct fixture f;
	fixture_start(&f);
	struct dt_err err = DT_ERR_INIT;
	struct dt_ps_client *chief = client_until(&f, &f.chief_hello, 3), *worker = client_until(&f, &f.worker_hello, 3);
	memcpy(f.params, f.init, f.n * sizeof(float));
	for (int ps = 0; ps < 2; ps++)
		DT_CHECK_OK(dt_ps_client_init(chief, ps, dt_deadline_in(5), &err), &err);
	int64_t a = -1, b = -1;
	DT_CHECK_OK(dt_ps_client_round(chief, 1, 0.01f, 1, 1, &a, dt_deadline_in(5), &err), &err);
	DT_CHECK_OK(dt_ps_client_round(worker, 1, 0.01f, 1, 1, &b, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(a, 1);
	DT_CHECK_INT_EQ(b, 2);
	/* Both saw step 2 and both take "the last step": the step stops at 3. */
	DT_CHECK_OK(dt_ps_client_round(chief, 1, 0.01f, 1, 1, &a, dt_deadline_in(5), &err), &err);
	DT_CHECK_OK(dt_ps_client_round(worker, 1, 0.01f, 1, 1, &b, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(a, 3);
	DT_CHECK_INT_EQ(b, 3);
	struct dt_ps_server_stats st0;
	dt_ps_server_get_stats(f.ps[0], &st0);
	DT_CHECK_INT_EQ(st0.global_step, 3);
	/* An 8-byte PS_STEP (no last step, an older client's) still counts on. */
	struct dt_ps_client *old = client(&f, &f.worker_hello);
	DT_CHECK_OK(dt_ps_client_round(old, 0, 0, 1, 0, &b, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(b, 4);
	dt_ps_client_free(old);
	dt_ps_client_free(worker);
	dt_ps_client_free(chief);
	fixture_stop(&f);
}

DT_TEST(dist_ps, init_pull_push_step_and_end)
{
	struct fixture f;
	fixture_start(&f);
	struct dt_err err = DT_ERR_INIT;
	struct dt_ps_client *chief = client(&f, &f.chief_hello), *worker = client(&f, &f.worker_hello);

	struct dt_ps_status s;
	DT_CHECK_OK(dt_ps_client_status(worker, 1, &s, dt_deadline_in(5), &err), &err);
	DT_CHECK(!s.initialized && !s.ended);
	/* Before the chief's init a pull is refused, naming the server. */
	DT_CHECK_INT_EQ(dt_ps_client_round(worker, 0, 0, -1, 1, NULL, dt_deadline_in(5), &err), DT_PEER);
	DT_CHECK_CONTAINS(err.msg, "not initialized");

	memcpy(f.params, f.init, f.n * sizeof(float));
	for (int ps = 0; ps < 2; ps++)
		DT_CHECK_OK(dt_ps_client_init(chief, ps, dt_deadline_in(5), &err), &err);
	DT_CHECK(dt_ps_server_initialized(f.ps[0]) && dt_ps_server_initialized(f.ps[1]));

	/* The worker pulls what the chief set, pushes gradients of 1 at lr 0.5 (sgd)
	 * and gets the global step and the updated values in the same round. */
	memset(f.params, 0, f.n * sizeof(float));
	int64_t step = -1;
	DT_CHECK_OK(dt_ps_client_round(worker, 0, 0, 0, 1, &step, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(step, 0);
	DT_CHECK(memcmp(f.params, f.init, f.n * sizeof(float)) == 0);
	for (size_t i = 0; i < f.n; i++)
		f.grads[i] = 1.0f;
	DT_CHECK_OK(dt_ps_client_round(worker, 1, 0.5f, 1, 1, &step, dt_deadline_in(5), &err), &err);
	DT_CHECK_INT_EQ(step, 1);
	for (size_t i = 0; i < f.n; i += 997)
		DT_CHECK_NEAR(f.params[i], f.init[i] - 0.5f, 1e-6);
	DT_CHECK_NEAR(f.params[f.n - 1], f.init[f.n - 1] - 0.5f, 1e-6);
	struct dt_ps_server_stats st0, st1;
	dt_ps_server_get_stats(f.ps[0], &st0);
	dt_ps_server_get_stats(f.ps[1], &st1);
	DT_CHECK_INT_EQ(st0.pushes + st1.pushes, 3);
	DT_CHECK_INT_EQ(st0.global_step, 1);

	/* Only the chief ends the run. */
	DT_CHECK_INT_EQ(dt_ps_client_end(worker, dt_deadline_in(5), &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "only the chief ends the run");
	DT_CHECK(!dt_ps_server_ended(f.ps[0]));
	DT_CHECK_OK(dt_ps_client_end(chief, dt_deadline_in(5), &err), &err);
	DT_CHECK(dt_ps_server_ended(f.ps[0]) && dt_ps_server_ended(f.ps[1]));
	/* Shutting the servers down closes the worker in order: it reads that as "the run is over". */
	dt_ps_server_shutdown(f.ps[0]);
	dt_ps_server_shutdown(f.ps[1]);
	int64_t deadline = dt_deadline_in(5);
	while (!dt_ps_client_ended_by_ps(worker) && !dt_deadline_passed(deadline))
		DT_CHECK_OK(dt_loop_run_once(f.loop, dt_deadline_in(0.05), &err), &err);
	DT_CHECK(dt_ps_client_ended_by_ps(worker));
	dt_ps_client_free(worker);
	dt_ps_client_free(chief);
	fixture_stop(&f);
}

DT_TEST(dist_ps, a_request_for_a_range_the_ps_does_not_hold_is_refused)
{
	struct fixture f;
	fixture_start(&f);
	struct dt_err err = DT_ERR_INIT;
	/* A client whose map says ps:0 holds everything. */
	struct dt_placement wrong;
	DT_CHECK_OK(dt_placement_compute(f.vars, 2, 1, 0, &wrong, &err), &err);
	wrong.num_ps = 1;
	struct dt_ps_client_config cc = { .ps_addrs = f.addrs, .local = &f.chief_hello, .placement = &wrong,
					  .params = f.params, .grads = f.grads };
	struct dt_ps_client *c;
	DT_CHECK_OK(dt_ps_client_new(f.loop, &cc, dt_deadline_in(10), &c, &err), &err);
	DT_CHECK_INT_EQ(dt_ps_client_init(c, 0, dt_deadline_in(5), &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "ps:0: holds no shard [");
	dt_ps_client_free(c);
	dt_placement_release(&wrong);
	fixture_stop(&f);
}

/* A worker that dies half-way through a push: the ps applies nothing. */
DT_TEST(dist_ps, a_push_cut_off_mid_frame_changes_nothing)
{
	struct fixture f;
	fixture_start(&f);
	struct dt_err err = DT_ERR_INIT;
	struct dt_ps_client *chief = client(&f, &f.chief_hello);
	memcpy(f.params, f.init, f.n * sizeof(float));
	for (int ps = 0; ps < 2; ps++)
		DT_CHECK_OK(dt_ps_client_init(chief, ps, dt_deadline_in(5), &err), &err);
	const struct dt_shard *sh = &f.pl.shards[0];
	int port = dt_ps_server_port(f.ps[sh->ps]);

	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		struct dt_err e = DT_ERR_INIT;
		int fd;
		struct dt_hello remote;
		if (dt_sock_connect("127.0.0.1", port, "ps", dt_deadline_in(5), NULL, &fd, &e))
			_exit(10);
		if (dt_handshake_client(fd, &f.worker_hello, "ps", "ps", (uint32_t)sh->ps, dt_deadline_in(5), &remote, &e))
			_exit(11);
		dt_hello_release(&remote);
		size_t len = DT_PS_PUSH_HEADER + sh->count * sizeof(float);
		uint8_t *frame = calloc(1, DT_FRAME_HEADER_SIZE + len);
		struct dt_frame_header h = { DT_PROTOCOL_VERSION, DT_MSG_PS_PUSH, 0, 1, len };
		dt_frame_header_pack(&h, frame);
		uint8_t *p = frame + DT_FRAME_HEADER_SIZE;
		dt_put_u64le(p, sh->offset);
		dt_put_u64le(p + 8, sh->count);
		float lr = 1.0f;
		memcpy(p + 16, &lr, 4);
		float *g = (float *)(void *)(p + DT_PS_PUSH_HEADER);
		for (size_t i = 0; i < sh->count; i++)
			g[i] = 100.0f;
		/* Everything but the last 1000 bytes, then die. */
		if (dt_sock_send_all(fd, frame, DT_FRAME_HEADER_SIZE + len - 1000, dt_deadline_in(5), "ps", &e))
			_exit(12);
		_exit(0);
	}
	/* Serve until the child is gone and the ps has dropped its connection. */
	int status = -1;
	int64_t deadline = dt_deadline_in(20);
	while (!dt_deadline_passed(deadline)) {
		DT_CHECK_OK(dt_loop_run_once(f.loop, dt_deadline_in(0.02), &err), &err);
		if (status < 0 && waitpid(pid, &status, WNOHANG) == pid)
			DT_CHECK_INT_EQ(WEXITSTATUS(status), 0);
		if (status >= 0 && dt_ps_server_conn_count(f.ps[sh->ps]) == 1)
			break;
	}
	DT_CHECK(status >= 0);
	DT_CHECK_INT_EQ(dt_ps_server_conn_count(f.ps[sh->ps]), 1);
	struct dt_ps_server_stats st;
	dt_ps_server_get_stats(f.ps[sh->ps], &st);
	DT_CHECK_INT_EQ(st.pushes, 0);
	memset(f.params, 0, f.n * sizeof(float));
	DT_CHECK_OK(dt_ps_client_round(chief, 0, 0, -1, 1, NULL, dt_deadline_in(5), &err), &err);
	DT_CHECK(memcmp(f.params, f.init, f.n * sizeof(float)) == 0);
	dt_ps_client_free(chief);
	fixture_stop(&f);
}

DT_TEST(dist_ps, the_cluster_fingerprint_changes_with_any_address)
{
	struct dt_cluster a, b;
	struct dt_err err = DT_ERR_INIT;
	const char *ta = "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\", \"h:3\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}";
	const char *tb = "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\", \"h:4\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}";
	DT_CHECK_OK(dt_tf_config_parse(ta, strlen(ta), &a, &err), &err);
	DT_CHECK_OK(dt_tf_config_parse(tb, strlen(tb), &b, &err), &err);
	DT_CHECK(dt_ps_cluster_fingerprint(&a) != dt_ps_cluster_fingerprint(&b));
	dt_cluster_release(&b);
	const char *tc = "{\"cluster\": {\"chief\": [\"h:1\"], \"ps\": [\"h:2\", \"h:3\"]}, \"task\": {\"type\": \"chief\", \"index\": 0}}";
	DT_CHECK_OK(dt_tf_config_parse(tc, strlen(tc), &b, &err), &err);
	/* The task does not matter: every task of one cluster agrees. */
	DT_CHECK_UINT_EQ(dt_ps_cluster_fingerprint(&a), dt_ps_cluster_fingerprint(&b));
	dt_cluster_release(&a);
	dt_cluster_release(&b);
}
