/*
 * net_test_util.h — helpers shared by the network tests (tests/unit/test_net_*.c).
 *
 * A test server is a forked child process running a dt_server on its own
 * loop on 127.0.0.1 with a kernel-assigned port. The child reports the port
 * through a pipe, serves until the parent stops it (or its lifetime ends,
 * so it can never outlive a test by much), and reports its dt_server_stats
 * on the way out. The parent's side waits on raw sockets through its own
 * loop, so a good client on the same loop keeps sending heartbeats while a
 * test watches a bad peer being thrown out.
 */
#ifndef DT_NET_TEST_UTIL_H
#define DT_NET_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "net/conn.h"
#include "net/loop.h"
#include "net/messages.h"
#include "net/server.h"

#define TEST_FINGERPRINT 0x5eed0000cafe0001ull

/* The test model: dense_1/kernel (784, hidden), dense_1/bias (hidden), dense_2/kernel (hidden, 10). */
void test_signature(struct dt_signature *sig, uint64_t hidden);
/* A hello for role:index with the test model; release with dt_hello_release. */
void test_hello(struct dt_hello *h, const char *role, uint32_t index, uint64_t fingerprint, uint64_t hidden);

struct test_server_opts {
	double heartbeat_s, silence_s, handshake_s; /* 0: conn defaults */
	uint64_t max_payload;                       /* 0: conn default */
	size_t pending_max;                         /* 0: server default */
	uint64_t pending_bytes;                     /* 0: server default */
	uint64_t hidden;                            /* model width; 0: 256 */
	double lifetime_s;                          /* 0: 30 s */
};

struct test_server {
	pid_t pid;
	int port;
	int ctl_fd;    /* parent's write end; closing it stops the child */
	int report_fd; /* parent's read end: "port N" then "stats ..." */
};

void test_server_start(struct test_server *ts, const struct test_server_opts *o);
/* Stops the child, reads its stats and reaps it; fails the test if it crashed. */
void test_server_stop(struct test_server *ts, struct dt_server_stats *stats);

/* A connected raw socket to 127.0.0.1:port (nonblocking). */
int test_raw_connect(int port);
/* Waits (running `loop`, so other conns on it stay alive) until the peer
 * closes fd or resets it; fails the test after timeout_s. Whatever arrived
 * before is stored in buf (up to cap; *got says how much). Returns the
 * seconds waited. Closes fd. */
double test_wait_closed(struct dt_loop *loop, int fd, double timeout_s, uint8_t *buf, size_t cap, size_t *got);
/* Runs the loop for `seconds`. */
void test_run_loop_for(struct dt_loop *loop, double seconds);
/* Parses the first frame of buf as an ERROR or REFUSE and returns its text (static buffer). */
const char *test_first_reason(const uint8_t *buf, size_t len, uint16_t *type);
/* A client conn to the test server as worker:1 with the test model. */
struct dt_conn *test_client(struct dt_loop *loop, int port, const struct dt_conn_config *cfg);
/* One ECHO round trip through c; fails the test if it does not come back intact. */
void test_echo_ok(struct dt_conn *c, const char *text);

#endif
