/*
 * conn.h — a framed connection to one peer over the event loop.
 *
 * A dt_conn owns one connected socket after (or, on a server, during) its
 * handshake. It reads into a buffer and decodes frames incrementally, writes
 * queued frames with writev, answers HEARTBEAT and ECHO itself, matches
 * replies to requests, and watches the peer:
 *
 *   - Heartbeats: when nothing was sent for heartbeat_s, a HEARTBEAT goes out,
 *     so an idle but healthy connection is never silent.
 *   - Silence: when nothing at all arrived for silence_s, the connection is
 *     closed with DT_TIMEOUT "no data from worker:1 at 127.0.0.1:53412 for 10.0 s".
 *     A dead peer usually shows up sooner, as a reset or end of stream (DT_PEER).
 *   - Requests: every request has a deadline; a missing reply becomes
 *     DT_TIMEOUT naming the peer and the message type, and the connection stays up.
 *   - Trust: any protocol violation (bad magic, version, CRC, flags, unknown
 *     type, oversized length, a frame not allowed in the current state, a
 *     truncated frame) closes this connection only, after a best-effort ERROR
 *     frame telling the peer why (not for bad magic: that peer does not speak
 *     the protocol).
 *
 * Memory: the read buffer, the payload buffer and the send queue grow to the
 * largest need and are reused; steady traffic allocates nothing per message.
 * Payloads can avoid copies both ways: dt_conn_sendv_ref writes straight from
 * the caller's memory, and on_dest (or dt_request.reply_buf) receives a
 * payload straight into the caller's memory — a reply_buf only on a link
 * without a cluster secret: on an authenticated one the reply is received
 * into the connection's buffer and copied there once its tag verified, so
 * no forged byte ever reaches the caller's memory.
 *
 * Callbacks run only from dt_loop_run_once, never from inside a dt_conn_*
 * call: a send that fails records the failure and the close is reported on
 * the next loop round. When a connection closes, in this order: send-done
 * callbacks of unsent payloads get the error, pending requests complete with
 * it, then on_close runs once. The conn object stays valid until its owner
 * calls dt_conn_free (for conns accepted by a dt_server, the server frees them
 * after on_close). dt_conn_free may be called from the conn's own callbacks.
 *
 * Threading: one loop thread, like loop.h. Heartbeats, deadlines and replies
 * happen only while the loop runs: a task that computes for longer than its
 * peers' silence_s without turning its loop looks dead to them. Run the loop
 * on its own thread (hand it work with dt_loop_wake), or turn it between
 * steps, or raise silence_s above the longest step.
 */
#ifndef DT_NET_CONN_H
#define DT_NET_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/err.h"
#include "base/retry.h"
#include "net/frame.h"
#include "net/loop.h"
#include "net/messages.h"
#include "net/socket.h"

struct dt_conn;

/* Defaults (docs/PROTOCOL.md, "Deadlines and heartbeats"). */
#define DT_NET_HEARTBEAT_S 1.0
#define DT_NET_SILENCE_S 10.0
#define DT_NET_HANDSHAKE_S 10.0
#define DT_NET_LINGER_S 1.0             /* a closing side waits this long for its last frame to leave */
#define DT_NET_MAX_QUEUED (64u << 20)   /* copied bytes queued to one peer before we stop reading from it */
#define DT_CONN_MAX_PARTS 8

struct dt_conn_handler {
	/* The handshake finished, on either side (for dt_conn_connect, before it
	 * returns); the peer's identity: dt_conn_remote(). Optional. */
	void (*on_open)(struct dt_conn *c, void *arg);
	/* A frame that is not connection control (HELLO..ECHO) and not a reply to
	 * one of our requests. `payload` is the destination on_dest gave, or the
	 * conn's buffer, valid until return. Without on_frame such frames are
	 * answered with an ERROR (requests) or ignored (one-way messages). */
	void (*on_frame)(struct dt_conn *c, const struct dt_frame_header *h, uint8_t *payload, void *arg);
	/* Optional: where the payload of this frame should be received (h->length
	 * bytes, no copy), or NULL for the conn's buffer. */
	void *(*on_dest)(struct dt_conn *c, const struct dt_frame_header *h, void *arg);
	/* The connection ended. why->status is DT_OK for an orderly close (our
	 * dt_conn_shutdown, or the peer's SHUTDOWN), else the error naming the peer. */
	void (*on_close)(struct dt_conn *c, const struct dt_err *why, void *arg);
};

/* Zero fields take the defaults above. */
struct dt_conn_config {
	double heartbeat_s;
	double silence_s;
	double handshake_s;   /* server side: the peer's HELLO must arrive within this */
	uint64_t max_payload; /* default DT_FRAME_MAX_PAYLOAD_DEFAULT */
	size_t max_queued;
	const struct dt_conn_handler *handler; /* may be NULL */
	void *arg;
	/* dt_conn_connect / dt_conn_dial: TCP_CONGESTION set before dialling
	 * (net/congestion.h); NULL or "" keeps the host's default. */
	const char *congestion;
};

/* Wraps a connected descriptor whose handshake is done (or that needs none,
 * e.g. in tests). Takes ownership of fd (closed on failure too). `peer` is the
 * label for messages ("ps:0 at 127.0.0.1:41021"); `remote` (may be NULL) is
 * copied. */
enum dt_status dt_conn_open(struct dt_loop *loop, int fd, const char *peer, const struct dt_hello *remote,
			    const struct dt_conn_config *cfg, struct dt_conn **out, struct dt_err *err) DT_MUST_CHECK;

/* Connects to host:port with backoff until `deadline`, performs the client
 * handshake (expect_role may be NULL), and returns the open conn. Errors name
 * the peer as "<expect_role>:<expect_index> at host:port"; a refusal is
 * DT_CONFIG with the server's reason. While it waits (backoff pauses, the
 * answer to HELLO) it runs `loop`, so the other conns and servers on it stay
 * served: two tasks may connect to each other at the same time. Not from
 * inside a loop callback; on_close is not called for a failed attempt. */
enum dt_status dt_conn_connect(struct dt_loop *loop, const char *host, int port, const struct dt_hello *local,
			       const char *expect_role, uint32_t expect_index, const struct dt_conn_config *cfg,
			       int64_t deadline, struct dt_conn **out, struct dt_err *err) DT_MUST_CHECK;

/* dt_conn_connect retried as one wait (base/retry.h): a failure a retry can
 * fix — refused, reset, closed during the handshake, a connect or a HELLO
 * with no answer (a peer paused with SIGSTOP still completes TCP
 * handshakes in its kernel, then never answers) — is tried again with
 * backoff until rt->deadline, each HELLO with its whole handshake_s; a
 * refusal by the peer (DT_CONFIG) or a local failure ends it at once with
 * its own error. Past the deadline: DT_TIMEOUT "cannot reach ps:0 at
 * host:port within <rt's deadline name> (N attempts over S s); the last:
 * ...". `stop` (may be NULL) is asked between attempts, at least every
 * DT_DIAL_SLICE_S: when it says so the dial ends with DT_OK and *out NULL
 * (a reason not to wait any more was found elsewhere). `rt` is updated
 * (attempts, last error). Runs `loop` while it waits, like dt_conn_connect. */
#define DT_DIAL_SLICE_S 2.0
struct dt_dial_stop {
	int (*fn)(void *arg);
	void *arg;
};
enum dt_status dt_conn_dial(struct dt_loop *loop, const char *host, int port, const struct dt_hello *local,
			    const char *expect_role, uint32_t expect_index, const struct dt_conn_config *cfg,
			    struct dt_retry *rt, const struct dt_dial_stop *stop, struct dt_conn **out,
			    struct dt_err *err) DT_MUST_CHECK;

/* The client handshake without waiting, over a connected descriptor (taken
 * over, closed on failure): sends HELLO and returns. on_open runs once the
 * peer accepts; on_close runs with the reason if it refuses, fails, or does
 * not answer by min(deadline, handshake_s). `local` must stay valid until
 * then. For tasks that connect to several peers at once (a ring). */
enum dt_status dt_conn_start_client(struct dt_loop *loop, int fd, const char *peer, const struct dt_hello *local,
				    const char *expect_role, uint32_t expect_index, const struct dt_conn_config *cfg,
				    int64_t deadline, struct dt_conn **out, struct dt_err *err) DT_MUST_CHECK;

/* Closes at once if still open (on_close is not called; pending requests and
 * unsent payloads complete with DT_PEER) and frees. NULL is a no-op. */
void dt_conn_free(struct dt_conn *c);

/* Orderly close: sends SHUTDOWN with `reason`, flushes what is queued (at most
 * DT_NET_LINGER_S), then closes; on_close gets DT_OK. */
void dt_conn_shutdown(struct dt_conn *c, const char *reason);

/* ---- sending ---- */

/* Queues one frame, copying the payload, and writes as much as the socket takes now. */
enum dt_status dt_conn_send(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id, const void *payload,
			    size_t len, struct dt_err *err) DT_MUST_CHECK;

typedef void (*dt_send_done_fn)(void *arg, enum dt_status st);
/* Queues one frame whose payload is the concatenation of `parts` (at most
 * DT_CONN_MAX_PARTS), referenced, not copied: the memory must stay untouched
 * until done(arg, status) runs (from the loop, or never if this returns an
 * error). Header and parts go out in one writev. */
enum dt_status dt_conn_sendv_ref(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id,
				 const struct iovec *parts, int nparts, dt_send_done_fn done, void *arg,
				 struct dt_err *err) DT_MUST_CHECK;

/* Answers request `request_id` with an ERROR frame (code from st, text from fmt). */
enum dt_status dt_conn_reply_error(struct dt_conn *c, uint64_t request_id, enum dt_status st, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- requests ---- */

/* A request and, once done, its result. Caller-owned (no allocation per RPC);
 * must stay in place until `done` is set. Fill the first group, then call
 * dt_conn_request. */
struct dt_request {
	uint16_t type;      /* message type of the request */
	int64_t deadline;   /* absolute; required */
	void *reply_buf;    /* optional: the reply payload is received here (directly without a secret); */
	size_t reply_cap;   /*   a longer reply fails the request with DT_PROTOCOL */
	/* Optional, runs in the loop when the request completes; `reply` is the
	 * reply payload (NULL on error), valid during the call. */
	void (*on_done)(struct dt_request *r, const uint8_t *reply, void *arg);
	void *arg;

	/* results */
	int done;
	enum dt_status status;
	struct dt_frame_header reply; /* the reply's header (type, length) */
	struct dt_err err;

	/* private to conn.c */
	uint64_t id_;
	int64_t start_;
	int sending_;
	struct dt_conn *conn_;
	struct dt_request *next_;
};

/* Sends the request frame (parts copied if `copy`, else referenced until the
 * request is done) and registers it for its reply. */
enum dt_status dt_conn_request(struct dt_conn *c, struct dt_request *r, const struct iovec *parts, int nparts, int copy,
			       struct dt_err *err) DT_MUST_CHECK;
/* Gives up on a pending request: it completes with DT_RUNTIME "cancelled" (a
 * reply that arrives later is dropped), or, given up at or past its deadline,
 * with DT_TIMEOUT "no reply from <peer> ... within S s", as if the conn's
 * timer had expired it (a waiter whose own deadline passed while the process
 * was stopped may get there first). If its payload is still being sent the
 * connection has to close, since a frame cannot be taken back half-sent. */
void dt_request_cancel(struct dt_request *r);
/* For dt_loop_run_until: nonzero once the request (a struct dt_request *) is done. */
int dt_request_is_done(void *request);

/* One blocking round trip: sends `payload` (copied) as `type`, runs the loop
 * until the reply or the deadline. The reply payload lands in reply_buf
 * (reply_cap bytes; *reply_len says how much, may be NULL). An ERROR reply
 * returns its status and message. Not from inside a loop callback. */
enum dt_status dt_conn_call(struct dt_conn *c, uint16_t type, const void *payload, size_t len, void *reply_buf,
			    size_t reply_cap, size_t *reply_len, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* ---- state ---- */

/* "worker:1 at 127.0.0.1:53412" (the address alone before the handshake). */
const char *dt_conn_peer(const struct dt_conn *c);
/* The peer's hello, or NULL if none is known yet. */
const struct dt_hello *dt_conn_remote(const struct dt_conn *c);
int dt_conn_is_open(const struct dt_conn *c);
/* Why it closed (status DT_OK while open or after an orderly close). */
const struct dt_err *dt_conn_close_reason(const struct dt_conn *c);
struct dt_loop *dt_conn_loop(const struct dt_conn *c);
void dt_conn_set_user(struct dt_conn *c, void *user);
void *dt_conn_user(const struct dt_conn *c);

struct dt_conn_stats {
	uint64_t frames_in, frames_out;
	uint64_t bytes_in, bytes_out;
	uint64_t heartbeats_in, heartbeats_out;
};
void dt_conn_get_stats(const struct dt_conn *c, struct dt_conn_stats *out);

/* ---- private to net/ (server.c) ---- */

/* A conn for a freshly accepted socket, in the server side of the handshake:
 * it accepts only HELLO within handshake_s, judges it against `local`
 * (borrowed, must outlive the conn), then asks admit() (may be NULL) before
 * answering HELLO_OK. */
struct dt__conn_accept_opts {
	const struct dt_hello *local;
	uint32_t (*admit)(void *arg, struct dt_conn *c, const struct dt_hello *remote, char *why, size_t cap);
	void *admit_arg;
	/* The largest HELLO payload taken before the peer is judged; a header
	 * announcing more closes the conn before anything is allocated for it.
	 * 0: dt_handshake_hello_cap(local). */
	uint64_t hello_cap;
	/* Optional: told the length a HELLO header announces, after the cap check
	 * and before the payload buffer is allocated, so the owner can keep a
	 * budget over all its unjudged conns (server.c evicts older ones). */
	void (*reserve)(void *arg, struct dt_conn *c, uint64_t bytes);
	void *reserve_arg;
};
enum dt_status dt__conn_accept(struct dt_loop *loop, int fd, const char *addr, const struct dt_conn_config *cfg,
			       const struct dt__conn_accept_opts *opts, struct dt_conn **out, struct dt_err *err) DT_MUST_CHECK;
/* 1 while the conn waits for its peer's HELLO (not judged yet). */
int dt__conn_is_pending(const struct dt_conn *c);
/* Closes an unjudged conn at once to make room for newer ones (DT_TIMEOUT
 * with `why`); its on_close follows from the loop. */
void dt__conn_evict(struct dt_conn *c, const char *why);
/* 1 if dt__conn_evict closed it. */
int dt__conn_was_evicted(const struct dt_conn *c);

#endif
