/* Misbehaving peers against a running server (a forked process): garbage,
 * other protocols, wrong versions, truncated frames, huge lengths, unknown
 * types, frames a byte at a time, and peers that say nothing. Each bad peer
 * must lose its own connection only, within a bounded time, while a good
 * client connected throughout keeps getting answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dt_test.h"
#include "net_test_util.h"
#include "base/clock.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/socket.h"

/* The test server's deadlines: short, so silent peers go quickly. */
static const struct test_server_opts server_opts = {
	.heartbeat_s = 0.1,
	.silence_s = 1.0,
	.handshake_s = 0.5,
	.max_payload = 64u << 20,
};

/* The good client heartbeats fast enough for the server's 1 s silence limit. */
static const struct dt_conn_config client_cfg = { .heartbeat_s = 0.1, .silence_s = 2.0 };

static size_t frame_bytes(uint8_t *out, uint16_t version, uint16_t type, uint32_t flags, uint64_t id, uint64_t length)
{
	struct dt_frame_header h = { version, type, flags, id, length };
	dt_frame_header_pack(&h, out);
	return DT_FRAME_HEADER_SIZE;
}

static size_t hello_frame(uint8_t *out, size_t cap)
{
	struct dt_hello me;
	test_hello(&me, "worker", 2, TEST_FINGERPRINT, 256);
	size_t len = dt_hello_encode(&me, NULL, 0);
	DT_CHECK(DT_FRAME_HEADER_SIZE + len <= cap);
	uint8_t *payload = malloc(len);
	dt_hello_encode(&me, payload, len);
	dt_frame_encode(out, DT_MSG_HELLO, 0, 0, payload, len);
	free(payload);
	dt_hello_release(&me);
	return DT_FRAME_HEADER_SIZE + len;
}

/* A raw socket that has completed the handshake as worker:2. */
static int handshaken_raw(int port)
{
	int fd = test_raw_connect(port);
	struct dt_hello me, remote;
	test_hello(&me, "worker", 2, TEST_FINGERPRINT, 256);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_handshake_client(fd, &me, "ps:0", "ps", 0, dt_deadline_in(5), &remote, &err), &err);
	dt_hello_release(&remote);
	dt_hello_release(&me);
	return fd;
}

struct bad_peer {
	const char *what;
	int handshake_first;   /* complete the handshake before misbehaving */
	uint8_t bytes[256];
	size_t len;
	int half_close;        /* shut our side after sending (truncation) */
	const char *reply;     /* text expected in an ERROR/REFUSE before the close, or NULL for none */
};

static void send_bad(struct dt_loop *loop, int port, const struct bad_peer *b)
{
	int fd = b->handshake_first ? handshaken_raw(port) : test_raw_connect(port);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_send_all(fd, b->bytes, b->len, dt_deadline_in(5), "ps:0", &err), &err);
	if (b->half_close)
		shutdown(fd, SHUT_WR);
	uint8_t got[4096];
	size_t n;
	double waited = test_wait_closed(loop, fd, 5, got, sizeof(got), &n);
	if (waited > 1.5)
		dt_test_fail(__FILE__, __LINE__, "%s: closed only after %.2f s", b->what, waited);
	if (b->reply) {
		uint16_t type;
		const char *text = test_first_reason(got, n, &type);
		if (!strstr(text, b->reply))
			dt_test_fail(__FILE__, __LINE__, "%s: the server said \"%s\", wanted \"%s\"", b->what, text, b->reply);
	} else if (n != 0) {
		dt_test_fail(__FILE__, __LINE__, "%s: the server answered %zu bytes to a peer that does not speak the protocol",
			     b->what, n);
	}
}

DT_TEST_TIMEOUT(net_server, garbage_closes_only_that_connection, 60)
{
	struct test_server ts;
	test_server_start(&ts, &server_opts);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_conn *good = test_client(loop, ts.port, &client_cfg);
	test_echo_ok(good, "before");

	static struct bad_peer cases[12];
	int n = 0;
	cases[n] = (struct bad_peer){ .what = "bad magic", .len = 40 };
	for (int i = 0; i < 40; i++)
		cases[n].bytes[i] = (uint8_t)(i * 37 + 1);
	n++;
	cases[n] = (struct bad_peer){ .what = "an HTTP request" };
	cases[n].len = strlen("GET / HTTP/1.1\r\n\r\n");
	memcpy(cases[n].bytes, "GET / HTTP/1.1\r\n\r\n", cases[n].len);
	n++;
	cases[n] = (struct bad_peer){ .what = "a TLS ClientHello",
				      .bytes = { 0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03 },
				      .len = 11 };
	n++;
	cases[n] = (struct bad_peer){ .what = "wrong protocol version", .reply = "speaks version 2" };
	cases[n].len = frame_bytes(cases[n].bytes, 2, DT_MSG_HELLO, 0, 0, 20);
	n++;
	cases[n] = (struct bad_peer){ .what = "a truncated header, then close", .half_close = 1 };
	cases[n].len = frame_bytes(cases[n].bytes, DT_PROTOCOL_VERSION, DT_MSG_HELLO, 0, 0, 20) - 19;
	n++;
	cases[n] = (struct bad_peer){ .what = "a truncated hello payload, then close", .half_close = 1 };
	cases[n].len = frame_bytes(cases[n].bytes, DT_PROTOCOL_VERSION, DT_MSG_HELLO, 0, 0, 200) + 10;
	n++;
	cases[n] = (struct bad_peer){ .what = "a length of 2^31 before the handshake", .reply = "bytes this task takes before it has judged a peer" };
	cases[n].len = frame_bytes(cases[n].bytes, DT_PROTOCOL_VERSION, DT_MSG_HELLO, 0, 0, 1ull << 31);
	n++;
	cases[n] = (struct bad_peer){ .what = "an echo before the handshake", .reply = "expected a hello first, got echo" };
	cases[n].len = frame_bytes(cases[n].bytes, DT_PROTOCOL_VERSION, DT_MSG_ECHO, 0, 1, 4);
	n++;
	cases[n] = (struct bad_peer){ .what = "an unknown type", .reply = "unknown message type 999" };
	cases[n].len = frame_bytes(cases[n].bytes, DT_PROTOCOL_VERSION, 999, 0, 1, 0);
	n++;
	cases[n] = (struct bad_peer){ .what = "a length of 2^31 after the handshake", .handshake_first = 1,
				      .reply = "echo payload of 2147483648 bytes exceeds the 67108864-byte cap" };
	cases[n].len = frame_bytes(cases[n].bytes, DT_PROTOCOL_VERSION, DT_MSG_ECHO, 0, 1, 1ull << 31);
	n++;
	cases[n] = (struct bad_peer){ .what = "a bad header crc after the handshake", .handshake_first = 1,
				      .reply = "header crc" };
	cases[n].len = frame_bytes(cases[n].bytes, DT_PROTOCOL_VERSION, DT_MSG_ECHO, 0, 1, 0);
	cases[n].bytes[15] ^= 0x40;
	n++;
	cases[n] = (struct bad_peer){ .what = "a second hello after the handshake", .handshake_first = 1,
				      .reply = "sent a hello after the handshake" };
	cases[n].len = hello_frame(cases[n].bytes, sizeof(cases[n].bytes));
	n++;

	for (int i = 0; i < n; i++) {
		send_bad(loop, ts.port, &cases[i]);
		char text[64];
		snprintf(text, sizeof(text), "after %s", cases[i].what);
		test_echo_ok(good, text);
	}
	DT_CHECK(dt_conn_is_open(good));
	dt_conn_free(good);
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
	DT_CHECK_UINT_EQ(stats.accepted, (uint64_t)n + 1);
	DT_CHECK_UINT_EQ(stats.refused, 1);     /* the wrong version */
	DT_CHECK_UINT_EQ(stats.violations, 9);  /* all but the version and the two truncations */
	DT_CHECK_UINT_EQ(stats.opened, 4);      /* the good client and the three handshaken bad ones */
}

DT_TEST_TIMEOUT(net_server, frames_written_one_byte_at_a_time_are_served, 60)
{
	struct test_server ts;
	test_server_start(&ts, &server_opts);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_conn *good = test_client(loop, ts.port, &client_cfg);

	int fd = test_raw_connect(ts.port);
	uint8_t buf[1024];
	size_t len = hello_frame(buf, sizeof(buf));
	dt_frame_encode(buf + len, DT_MSG_ECHO, 0, 77, "slow", 4);
	size_t total = len + DT_FRAME_HEADER_SIZE + 4;
	for (size_t i = 0; i < total; i++) {
		DT_CHECK_OK(dt_sock_send_all(fd, buf + i, 1, dt_deadline_in(5), "ps:0", &err), &err);
		if (i % 8 == 0)
			test_run_loop_for(loop, 0.001); /* keeps the good client's heartbeats going */
	}
	/* hello_ok, then the echo reply. */
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, 1 << 20);
	DT_CHECK_OK(dt_frame_recv_fd(fd, &d, dt_deadline_in(5), "ps:0", &err), &err);
	DT_CHECK_INT_EQ(d.header.type, DT_MSG_HELLO_OK);
	dt_frame_decoder_next(&d);
	DT_CHECK_OK(dt_frame_recv_fd(fd, &d, dt_deadline_in(5), "ps:0", &err), &err);
	DT_CHECK_INT_EQ(d.header.type, DT_MSG_ECHO);
	DT_CHECK_UINT_EQ(d.header.flags, DT_FRAME_F_REPLY);
	DT_CHECK_UINT_EQ(d.header.request_id, 77);
	DT_CHECK(memcmp(dt_frame_decoder_payload(&d), "slow", 4) == 0);
	dt_frame_decoder_release(&d);
	close(fd);
	test_echo_ok(good, "after the slow peer");
	dt_conn_free(good);
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
	DT_CHECK_UINT_EQ(stats.violations, 0);
	DT_CHECK_UINT_EQ(stats.opened, 2);
}

DT_TEST_TIMEOUT(net_server, silent_peers_are_dropped_in_bounded_time, 60)
{
	struct test_server ts;
	test_server_start(&ts, &server_opts);
	struct dt_loop *loop;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_conn *good = test_client(loop, ts.port, &client_cfg);

	/* Connects and says nothing: dropped at the handshake deadline (0.5 s). */
	int fd = test_raw_connect(ts.port);
	double waited = test_wait_closed(loop, fd, 5, NULL, 0, NULL);
	if (waited < 0.45 || waited > 1.5)
		dt_test_fail(__FILE__, __LINE__, "a peer without a hello was dropped after %.2f s, expected ~0.5 s", waited);
	test_echo_ok(good, "after the mute peer");

	/* Handshakes, then goes silent (no heartbeats): dropped after the 1 s silence limit. */
	fd = handshaken_raw(ts.port);
	waited = test_wait_closed(loop, fd, 5, NULL, 0, NULL);
	if (waited < 0.95 || waited > 2.0)
		dt_test_fail(__FILE__, __LINE__, "a silent peer was dropped after %.2f s, expected ~1.0 s", waited);
	test_echo_ok(good, "after the silent peer");

	/* The good client, idle but heartbeating the whole time, is still there. */
	DT_CHECK(dt_conn_is_open(good));
	dt_conn_free(good);
	dt_loop_free(loop);
	struct dt_server_stats stats;
	test_server_stop(&ts, &stats);
	DT_CHECK_UINT_EQ(stats.timeouts, 2);
	DT_CHECK_UINT_EQ(stats.violations, 0);
}
