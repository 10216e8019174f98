/*
 * server.h — a listening socket whose peers become framed connections.
 *
 * dt_server accepts connections on the event loop, runs the accepting side
 * of the handshake for each (version, cluster fingerprint, model signature,
 * then the caller's own admission check), and hands accepted peers to the
 * caller's conn handler. It is what a parameter server, the chief and a ring
 * neighbour listen with.
 *
 * A server never trusts a peer: a silent peer is dropped when its hello does
 * not come within handshake_s (or, later, when it is silent for silence_s),
 * and any garbage closes that one connection (conn.h). Through all of it the
 * listener and every other connection keep being served. Running out of
 * descriptors pauses accepting for a moment instead of spinning.
 *
 * Before its hello is judged a connection is pending, and what pending
 * connections may cost is bounded (docs/PROTOCOL.md §4.1): each may announce
 * at most a hello cap (handshake.h, from our own hello) and is refused on the
 * header, before anything is allocated; at most pending_max are pending, and
 * their announced hellos together stay within pending_bytes. A newcomer that
 * does not fit closes the oldest pending ones: a real peer sends its hello
 * the moment it connects and is judged within a round trip, so the oldest
 * pending connection is the likeliest to be a stranger, and keeping the
 * newest means a flood of silent sockets cannot lock real peers out for
 * handshake_s (closing newcomers would).
 *
 * The server owns the conns it accepted: each is freed after its on_close,
 * and dt_server_free closes the rest. Callers keep per-peer state with
 * dt_conn_set_user. Every close is logged once, naming the peer and why.
 */
#ifndef DT_NET_SERVER_H
#define DT_NET_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/conn.h"
#include "net/loop.h"
#include "net/messages.h"

struct dt_server;

struct dt_server_config {
	const char *host;             /* "127.0.0.1", "0.0.0.0", "::" */
	int port;                     /* 0: the kernel picks; see dt_server_port */
	int backlog;                  /* default 128 */
	const struct dt_hello *local; /* this task and its model; borrowed, must outlive the server */
	struct dt_conn_config conn;   /* per-connection deadlines, caps and the handler */
	size_t max_conns;             /* connections beyond this are closed at accept; default 4096 */
	size_t pending_max;           /* unjudged connections kept; default DT_NET_PENDING_MAX */
	uint64_t pending_bytes;       /* their announced hellos together; default dt_handshake_pending_budget */
	uint64_t hello_cap;           /* largest hello taken unjudged; default dt_handshake_hello_cap(local) */
	int sndbuf, rcvbuf;           /* SO_SNDBUF/SO_RCVBUF of accepted sockets; 0 keeps autotuning */
	const char *congestion;       /* TCP_CONGESTION of accepted sockets (net/congestion.h); NULL: the host's */
	/* Optional admission after the version, fingerprint and signature checks
	 * pass: 0 accepts, a dt_refuse_code refuses with the reason written to why. */
	uint32_t (*admit)(void *arg, struct dt_conn *c, const struct dt_hello *remote, char *why, size_t cap);
	void *admit_arg;
};

struct dt_server_stats {
	uint64_t accepted;   /* sockets accepted */
	uint64_t opened;     /* handshakes accepted */
	uint64_t refused;    /* handshakes refused (DT_CONFIG) */
	uint64_t violations; /* closed for a protocol violation (DT_PROTOCOL) */
	uint64_t timeouts;   /* closed for silence or a missing hello (DT_TIMEOUT), evictions included */
	uint64_t evicted;    /* pending connections closed to make room for newer ones */
	uint64_t pending_peak;       /* most connections pending at once */
	uint64_t pending_bytes_peak; /* most hello bytes announced by pending connections at once */
	uint64_t closed;     /* every close, the above included */
};

enum dt_status dt_server_new(struct dt_loop *loop, const struct dt_server_config *cfg, struct dt_server **out,
			     struct dt_err *err) DT_MUST_CHECK;
/* Stops listening and closes every connection at once (their on_close is not
 * called). NULL is a no-op. Not from inside one of its conns' callbacks. */
void dt_server_free(struct dt_server *s);

/* The port it listens on (the kernel's pick when configured with 0). */
int dt_server_port(const struct dt_server *s);
/* Connections accepted and not yet closed (handshaking ones included). */
size_t dt_server_conn_count(const struct dt_server *s);
/* Of those, the ones whose hello has not been judged yet. */
size_t dt_server_pending_count(const struct dt_server *s);
void dt_server_get_stats(const struct dt_server *s, struct dt_server_stats *out);
/* Calls fn for every connection whose handshake is done. */
void dt_server_foreach(struct dt_server *s, void (*fn)(struct dt_conn *c, void *arg), void *arg);
/* Sends SHUTDOWN(reason) to every open connection and closes them in order. */
void dt_server_shutdown_all(struct dt_server *s, const char *reason);

#endif
