/* Tests for src/net/handshake.c: signature comparison, the incarnation id, and
 * handshakes against a forked server: accepted, and refused for a different
 * protocol version, cluster fingerprint or model, with the reason arriving on
 * the refused side, while the server keeps serving. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dt_test.h"
#include "net_test_util.h"
#include "base/clock.h"
#include "net/auth.h"
#include "net/conn.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/socket.h"

DT_TEST(net_handshake, signature_diff_names_the_first_difference)
{
	struct dt_signature a, b;
	char buf[512];
	struct dt_err err = DT_ERR_INIT;
	dt_signature_init(&a);
	dt_signature_init(&b);
	test_signature(&a, 256);
	test_signature(&b, 256);
	DT_CHECK_INT_EQ(dt_signature_diff(&a, "ps:0", &b, "worker:1", buf, sizeof(buf)), 0);
	DT_CHECK_STR_EQ(buf, "");

	/* A different shape. */
	dt_signature_release(&b);
	test_signature(&b, 512);
	DT_CHECK_INT_EQ(dt_signature_diff(&a, "ps:0", &b, "worker:1", buf, sizeof(buf)), 1);
	DT_CHECK_STR_EQ(buf, "variable 'dense_1/kernel' is (784, 256) on ps:0 but (784, 512) on worker:1");

	/* A different dtype. */
	dt_signature_release(&b);
	const uint64_t k1[2] = { 784, 256 }, b1[1] = { 256 };
	DT_CHECK_OK(dt_signature_add(&b, "dense_1/kernel", DT_WIRE_F32, 2, k1, &err), &err);
	DT_CHECK_OK(dt_signature_add(&b, "dense_1/bias", DT_WIRE_BF16, 1, b1, &err), &err);
	DT_CHECK_INT_EQ(dt_signature_diff(&a, "ps:0", &b, "worker:1", buf, sizeof(buf)), 1);
	DT_CHECK_STR_EQ(buf, "variable 'dense_1/bias' is float32 on ps:0 but bfloat16 on worker:1");

	/* One side has fewer variables. */
	dt_signature_release(&b);
	DT_CHECK_OK(dt_signature_add(&b, "dense_1/kernel", DT_WIRE_F32, 2, k1, &err), &err);
	DT_CHECK_OK(dt_signature_add(&b, "dense_1/bias", DT_WIRE_F32, 1, b1, &err), &err);
	DT_CHECK_INT_EQ(dt_signature_diff(&a, "ps:0", &b, "worker:1", buf, sizeof(buf)), 1);
	DT_CHECK_STR_EQ(buf, "ps:0 has 3 variables and worker:1 2: variable 'dense_2/kernel' (256, 10) exists on ps:0 but not on worker:1");

	/* A renamed variable, and a reordering. */
	dt_signature_release(&b);
	const uint64_t k2[2] = { 256, 10 };
	DT_CHECK_OK(dt_signature_add(&b, "dense_1/kernel", DT_WIRE_F32, 2, k1, &err), &err);
	DT_CHECK_OK(dt_signature_add(&b, "dense_1/b", DT_WIRE_F32, 1, b1, &err), &err);
	DT_CHECK_OK(dt_signature_add(&b, "dense_2/kernel", DT_WIRE_F32, 2, k2, &err), &err);
	DT_CHECK_INT_EQ(dt_signature_diff(&a, "ps:0", &b, "worker:1", buf, sizeof(buf)), 1);
	DT_CHECK_STR_EQ(buf, "variable 'dense_1/bias' (256) exists on ps:0 but not on worker:1");
	dt_signature_release(&b);
	DT_CHECK_OK(dt_signature_add(&b, "dense_1/kernel", DT_WIRE_F32, 2, k1, &err), &err);
	DT_CHECK_OK(dt_signature_add(&b, "dense_2/kernel", DT_WIRE_F32, 2, k2, &err), &err);
	DT_CHECK_OK(dt_signature_add(&b, "dense_1/bias", DT_WIRE_F32, 1, b1, &err), &err);
	DT_CHECK_INT_EQ(dt_signature_diff(&a, "ps:0", &b, "worker:1", buf, sizeof(buf)), 1);
	DT_CHECK_STR_EQ(buf, "variables are in a different order: number 1 is 'dense_1/bias' on ps:0 but 'dense_2/kernel' on worker:1");

	/* Names the protocol cannot carry are refused when added. */
	DT_CHECK_INT_EQ(dt_signature_add(&b, "", DT_WIRE_F32, 0, NULL, &err), DT_CONFIG);
	uint64_t dims[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	DT_CHECK_INT_EQ(dt_signature_add(&b, "deep", DT_WIRE_F32, 9, dims, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "rank 9");
	dt_signature_release(&a);
	dt_signature_release(&b);
}

DT_TEST(net_handshake, incarnation_is_stable_nonzero_and_new_in_a_child)
{
	uint64_t mine = dt_net_incarnation();
	DT_CHECK(mine != 0);
	DT_CHECK_UINT_EQ(dt_net_incarnation(), mine);
	int p[2];
	DT_CHECK(pipe(p) == 0);
	fflush(NULL);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		uint64_t child = dt_net_incarnation();
		_exit(write(p[1], &child, sizeof(child)) == sizeof(child) ? 0 : 1);
	}
	uint64_t child = 0;
	DT_CHECK(read(p[0], &child, sizeof(child)) == sizeof(child));
	waitpid(pid, NULL, 0);
	DT_CHECK(child != 0);
	DT_CHECK(child != mine);
	close(p[0]);
	close(p[1]);
}

/* Connects as worker:1 with the given hello and returns the handshake's status. */
static enum dt_status handshake_as(int port, struct dt_hello *me, struct dt_err *err)
{
	int fd = test_raw_connect(port);
	char peer[64];
	snprintf(peer, sizeof(peer), "ps:0 at 127.0.0.1:%d", port);
	struct dt_hello remote;
	enum dt_status st = dt_handshake_client(fd, me, peer, "ps", 0, dt_deadline_in(5), &remote, err);
	dt_hello_release(&remote);
	close(fd);
	return st;
}

DT_TEST(net_handshake, accepted_and_both_sides_learn_who_the_other_is)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_conn *c = test_client(loop, ts.port, NULL);
	const struct dt_hello *ps = dt_conn_remote(c);
	DT_CHECK(ps != NULL);
	DT_CHECK_STR_EQ(ps->role, "ps");
	DT_CHECK_INT_EQ(ps->index, 0);
	DT_CHECK(ps->incarnation != 0);
	DT_CHECK(ps->incarnation != dt_net_incarnation()); /* the forked server drew its own */
	DT_CHECK_INT_EQ(ps->signature.count, 3);
	char want[64];
	snprintf(want, sizeof(want), "ps:0 at 127.0.0.1:%d", ts.port);
	DT_CHECK_STR_EQ(dt_conn_peer(c), want);
	test_echo_ok(c, "ping");

	/* Expecting a different task at that address is refused on the client side. */
	struct dt_hello me;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 256);
	struct dt_conn *wrong;
	DT_CHECK_INT_EQ(dt_conn_connect(loop, "127.0.0.1", ts.port, &me, "ps", 1, NULL, dt_deadline_in(5), &wrong, &err),
			DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "the task there is ps:0, not ps:1 (are the cluster addresses right?)");
	DT_CHECK(wrong == NULL);
	dt_hello_release(&me);

	dt_conn_free(c);
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
	DT_CHECK_UINT_EQ(stats.opened, 2);
	DT_CHECK_UINT_EQ(stats.refused, 0);
}

DT_TEST(net_handshake, refused_for_version_fingerprint_and_model_while_others_are_served)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_conn *good = test_client(loop, ts.port, NULL);
	char prefix[96];
	snprintf(prefix, sizeof(prefix), "ps:0 at 127.0.0.1:%d refused the connection: ", ts.port);

	/* A different protocol version in the hello. */
	struct dt_hello me;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 256);
	me.protocol_version = 2;
	DT_CHECK_INT_EQ(handshake_as(ts.port, &me, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, prefix);
	DT_CHECK_CONTAINS(err.msg, "protocol version differs: ps:0 speaks version 1 but worker:1 speaks version 2");
	dt_hello_release(&me);
	test_echo_ok(good, "after version");

	/* A different cluster. */
	test_hello(&me, "worker", 1, 0x1234, 256);
	DT_CHECK_INT_EQ(handshake_as(ts.port, &me, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, prefix);
	DT_CHECK_CONTAINS(err.msg, "cluster fingerprint differs: 5eed0000cafe0001 on ps:0 but 0000000000001234 on worker:1");
	dt_hello_release(&me);
	test_echo_ok(good, "after fingerprint");

	/* A different model. */
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 512);
	DT_CHECK_INT_EQ(handshake_as(ts.port, &me, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, prefix);
	DT_CHECK_CONTAINS(err.msg, "model signature differs: variable 'dense_1/kernel' is (784, 256) on ps:0 but (784, 512) on worker:1");
	DT_CHECK_INT_EQ(dt_status_exit_code(DT_CONFIG), 2);
	dt_hello_release(&me);
	test_echo_ok(good, "after model");
	DT_CHECK(dt_conn_is_open(good));

	dt_conn_free(good);
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
	DT_CHECK_UINT_EQ(stats.refused, 3);
	DT_CHECK_UINT_EQ(stats.opened, 1);
}

DT_TEST(net_handshake, a_frame_of_another_protocol_version_gets_a_refusal_it_can_read)
{
	struct test_server ts;
	struct test_server_opts o = { 0 };
	test_server_start(&ts, &o);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	/* A version-2 peer: its header says 2; bytes 0..5 are the same in every version. */
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	struct dt_frame_header h = { 2, DT_MSG_HELLO, 0, 0, 0 };
	dt_frame_header_pack(&h, hdr);
	int fd = test_raw_connect(ts.port);
	DT_CHECK_OK(dt_sock_send_all(fd, hdr, sizeof(hdr), dt_deadline_in(5), "ps:0", &err), &err);
	uint8_t buf[2048];
	size_t got;
	test_wait_closed(loop, fd, 5, buf, sizeof(buf), &got);
	uint16_t type;
	const char *reason = test_first_reason(buf, got, &type);
	DT_CHECK_INT_EQ(type, DT_MSG_REFUSE);
	DT_CHECK_STR_EQ(reason, "protocol version differs: ps:0 speaks version 1 but the peer speaks version 2");
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
	DT_CHECK_UINT_EQ(stats.refused, 1);
}

DT_TEST(net_handshake, blocking_client_and_single_peer_server)
{
	/* The forms a ring neighbour uses: one accept, one blocking handshake. */
	int sv[2];
	DT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	fflush(NULL);
	pid_t pid = fork();
	DT_CHECK(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		struct dt_hello local, remote;
		test_hello(&local, "worker", 0, TEST_FINGERPRINT, 256);
		struct dt_err e = DT_ERR_INIT;
		enum dt_status st = dt_handshake_server(sv[1], &local, "worker:?", dt_deadline_in(5), &remote, &e);
		int ok = st == DT_OK && strcmp(remote.role, "worker") == 0 && remote.index == 1;
		dt_hello_release(&remote);
		/* A second, mismatched hello on the same socket is refused with the reason. */
		st = dt_handshake_server(sv[1], &local, "worker:1", dt_deadline_in(5), &remote, &e);
		ok = ok && st == DT_CONFIG && strstr(e.msg, "refused worker:1: model signature differs") != NULL;
		dt_hello_release(&remote);
		dt_hello_release(&local);
		_exit(ok ? 0 : 1);
	}
	close(sv[1]);
	struct dt_hello me, remote;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 256);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_handshake_client(sv[0], &me, "worker:0", "worker", 0, dt_deadline_in(5), &remote, &err), &err);
	DT_CHECK_STR_EQ(remote.role, "worker");
	dt_hello_release(&remote);
	dt_hello_release(&me);
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 100);
	DT_CHECK_INT_EQ(dt_handshake_client(sv[0], &me, "worker:0", "worker", 0, dt_deadline_in(5), &remote, &err), DT_CONFIG);
	DT_CHECK_STR_EQ(err.msg, "worker:0 refused the connection: model signature differs: "
				 "variable 'dense_1/kernel' is (784, 256) on worker:0 but (784, 100) on worker:1");
	dt_hello_release(&me);
	int status;
	DT_CHECK(waitpid(pid, &status, 0) == pid);
	DT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(sv[0]);
}

DT_TEST(net_handshake, a_server_that_never_answers_fails_the_client_by_its_deadline)
{
	struct dt_err err = DT_ERR_INIT;
	int lfd, port;
	DT_CHECK_OK(dt_sock_listen("127.0.0.1", 0, 4, &lfd, &port, &err), &err);
	int fd = test_raw_connect(port); /* sits in the backlog: nobody answers */
	struct dt_hello me, remote;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 256);
	int64_t t0 = dt_now_ns();
	DT_CHECK_INT_EQ(dt_handshake_client(fd, &me, "ps:0 at here", "ps", 0, dt_deadline_in(0.3), &remote, &err), DT_TIMEOUT);
	double waited = (double)(dt_now_ns() - t0) / 1e9;
	DT_CHECK(waited >= 0.29 && waited < 2.0);
	/* The figure is the time measured, 0.3 s or a little more on a loaded machine. */
	DT_CHECK(strncmp(err.msg, "handshake: deadline exceeded after 0.", 37) == 0);
	DT_CHECK_CONTAINS(err.msg, " s waiting for a frame from ps:0 at here");
	dt_hello_release(&me);
	close(fd);
	close(lfd);
}

DT_TEST(net_handshake, the_blocking_handshakes_refuse_a_secret_before_any_byte)
{
	/* They return no keys, so they speak only the unauthenticated protocol
	 * (tests and tools): a hello with a secret is refused at once. */
	int sv[2];
	DT_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	struct dt_auth auth = { .mode = DT_WIRE_AUTH };
	struct dt_hello me, remote;
	test_hello(&me, "worker", 1, TEST_FINGERPRINT, 16);
	me.auth = &auth;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_handshake_client(sv[0], &me, "ps:0", "ps", 0, dt_deadline_in(5), &remote, &err), DT_INTERNAL);
	DT_CHECK_CONTAINS(err.msg, "dt_handshake_client with ps:0: this hello carries a cluster secret");
	DT_CHECK_INT_EQ(dt_handshake_server(sv[0], &me, "worker:0", dt_deadline_in(5), &remote, &err), DT_INTERNAL);
	DT_CHECK_CONTAINS(err.msg, "dt_conn_connect");
	uint8_t b;
	DT_CHECK(recv(sv[1], &b, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN); /* nothing was sent */
	me.auth = NULL;
	dt_hello_release(&me);
	close(sv[0]);
	close(sv[1]);
}
