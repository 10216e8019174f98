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
	int sndbuf, rcvbuf;           /* SO_SNDBUF/SO_RCVBUF of accepted sockets; 0 keeps autotuning */
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
	uint64_t timeouts;   /* closed for silence or a missing hello (DT_TIMEOUT) */
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
void dt_server_get_stats(const struct dt_server *s, struct dt_server_stats *out);
/* Calls fn for every connection whose handshake is done. */
void dt_server_foreach(struct dt_server *s, void (*fn)(struct dt_conn *c, void *arg), void *arg);
/* Sends SHUTDOWN(reason) to every open connection and closes them in order. */
void dt_server_shutdown_all(struct dt_server *s, const char *reason);

#endif
