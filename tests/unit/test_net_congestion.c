/* Tests for src/net/congestion.c: which TCP congestion control dtrain's bulk
 * connections take (a name, "host", the environment, the default that
 * replaces bbr), and that it is on a socket where it must be: set before a
 * dial, and inherited from a listener by every accepted socket (what
 * dt_server's congestion relies on). reno is the name set throughout: the
 * kernel lets any process set it. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dt_test.h"
#include "base/clock.h"
#include "net/congestion.h"
#include "net/handshake.h"
#include "net/loop.h"
#include "net/server.h"
#include "net/socket.h"

static void cc_of(int fd, char name[DT_TCP_CC_MAX])
{
	socklen_t len = DT_TCP_CC_MAX - 1;
	memset(name, 0, DT_TCP_CC_MAX);
	DT_CHECK(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0);
}

/* Dials a listener on loopback (opts may be NULL) and accepts: *a the dialled end, *b the accepted. */
static void dial_and_accept(int lfd, int port, struct dt_connect_opts *opts, int *a, int *b)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_sock_connect("127.0.0.1", port, "peer", dt_deadline_in(5), opts, a, &err), &err);
	*b = -1;
	const int64_t deadline = dt_deadline_in(5);
	while (*b < 0 && !dt_deadline_passed(deadline)) {
		DT_CHECK_OK(dt_sock_accept(lfd, b, NULL, 0, &err), &err);
		if (*b < 0)
			dt_sleep(0.001);
	}
	DT_CHECK(*b >= 0);
}

DT_TEST(net_congestion, a_name_host_and_the_environment_choose_in_that_order)
{
	DT_CHECK(unsetenv(DT_TCP_CC_ENV) == 0);
	char out[DT_TCP_CC_MAX];
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_tcp_cc_choose("reno", "the test's", out, &err), &err);
	DT_CHECK_STR_EQ(out, "reno");
	DT_CHECK_OK(dt_tcp_cc_choose("host", "the test's", out, &err), &err);
	DT_CHECK_STR_EQ(out, "");
	DT_CHECK(setenv(DT_TCP_CC_ENV, "reno", 1) == 0);
	DT_CHECK_OK(dt_tcp_cc_choose(NULL, NULL, out, &err), &err);
	DT_CHECK_STR_EQ(out, "reno");
	DT_CHECK_OK(dt_tcp_cc_choose("", NULL, out, &err), &err);
	DT_CHECK_STR_EQ(out, "reno");
	DT_CHECK_OK(dt_tcp_cc_choose("host", "the test's", out, &err), &err); /* a given name wins */
	DT_CHECK_STR_EQ(out, "");
	DT_CHECK(setenv(DT_TCP_CC_ENV, "host", 1) == 0);
	DT_CHECK_OK(dt_tcp_cc_choose(NULL, NULL, out, &err), &err);
	DT_CHECK_STR_EQ(out, "");
	DT_CHECK(unsetenv(DT_TCP_CC_ENV) == 0);
}

/* The host's default unless it is bbr: then cubic where this process may
 * set it, else reno. Which branch runs depends on the host's sysctl. */
DT_TEST(net_congestion, the_hosts_default_is_kept_unless_it_is_bbr)
{
	DT_CHECK(unsetenv(DT_TCP_CC_ENV) == 0);
	char host[DT_TCP_CC_MAX], out[DT_TCP_CC_MAX];
	DT_CHECK_INT_EQ(dt_tcp_cc_default(host), 0);
	DT_CHECK(host[0] != 0);
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_tcp_cc_choose(NULL, NULL, out, &err), &err);
	if (strncmp(host, "bbr", 3) != 0)
		DT_CHECK_STR_EQ(out, "");
	else
		DT_CHECK_STR_EQ(out, dt_tcp_cc_usable("cubic") == 0 ? "cubic" : "reno");
}

DT_TEST(net_congestion, a_name_that_cannot_be_set_is_a_config_error_naming_it_and_where_it_came_from)
{
	char out[DT_TCP_CC_MAX];
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_tcp_cc_choose("no-such-cc", "--test_flag", out, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "TCP congestion control 'no-such-cc' (--test_flag) cannot be set: ");
	DT_CHECK_CONTAINS(err.msg, "this kernel has ");
	DT_CHECK_CONTAINS(err.msg, "'host' keeps the host's default");
	DT_CHECK_STR_EQ(out, "");
	DT_CHECK(setenv(DT_TCP_CC_ENV, "a-name-longer-than-sixteen", 1) == 0);
	DT_CHECK_INT_EQ(dt_tcp_cc_choose(NULL, NULL, out, &err), DT_CONFIG);
	DT_CHECK(unsetenv(DT_TCP_CC_ENV) == 0);
	DT_CHECK_CONTAINS(err.msg, "'a-name-longer-than-sixteen' (DTRAIN_TCP_CONGESTION) cannot be set");
	DT_CHECK_INT_EQ(dt_tcp_cc_usable("no-such-cc"), ENOENT);
	DT_CHECK_INT_EQ(dt_tcp_cc_set(-1, NULL), 0); /* nothing to set */
}

DT_TEST(net_congestion, a_dial_sets_it_before_connecting_and_an_accepted_socket_inherits_its_listeners)
{
	char host[DT_TCP_CC_MAX], name[DT_TCP_CC_MAX];
	DT_CHECK_INT_EQ(dt_tcp_cc_default(host), 0);
	struct dt_err err = DT_ERR_INIT;
	int lfd, port, a, b;
	DT_CHECK_OK(dt_sock_listen("127.0.0.1", 0, 4, &lfd, &port, &err), &err);
	struct dt_connect_opts opts = { .congestion = "reno" };
	dial_and_accept(lfd, port, &opts, &a, &b);
	cc_of(a, name);
	DT_CHECK_STR_EQ(name, "reno");
	cc_of(b, name);
	DT_CHECK_STR_EQ(name, host);
	close(a), close(b);
	DT_CHECK_INT_EQ(dt_tcp_cc_set(lfd, "reno"), 0);
	dial_and_accept(lfd, port, NULL, &a, &b);
	cc_of(a, name);
	DT_CHECK_STR_EQ(name, host);
	cc_of(b, name);
	DT_CHECK_STR_EQ(name, "reno");
	close(a), close(b), close(lfd);
}

DT_TEST(net_congestion, a_server_whose_congestion_control_cannot_be_set_does_not_start)
{
	struct dt_loop *loop = NULL;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_loop_new(&loop, &err), &err);
	struct dt_hello hello;
	dt_hello_init(&hello, "ps", 0, 0);
	struct dt_server_config sc = { .host = "127.0.0.1", .local = &hello, .congestion = "no-such-cc" };
	struct dt_server *s = NULL;
	DT_CHECK_INT_EQ(dt_server_new(loop, &sc, &s, &err), DT_CONFIG);
	DT_CHECK(s == NULL);
	DT_CHECK_CONTAINS(err.msg, "cannot set TCP congestion control 'no-such-cc' on the listening socket");
	sc.congestion = "reno";
	DT_CHECK_OK(dt_server_new(loop, &sc, &s, &err), &err);
	dt_server_free(s);
	dt_hello_release(&hello);
	dt_loop_free(loop);
}
