/*
 * conn_internal.h — private to src/net/conn*.c: the connection's state and
 * the functions its three files share.
 *
 *   conn.c       lifecycle (open, accept, connect, free), the timer
 *                (heartbeats, silence, deadlines), closing and its callbacks
 *   conn_send.c  the send queue and writev, sending, requests and replies
 *   conn_recv.c  reading, decoding, dispatch, both sides of the handshake
 *
 * Invariants: callbacks into the caller run only from the loop (on_io,
 * on_timer), never inside a dt_conn_* call; c->in_cb counts nesting so that
 * dt_conn_free from a callback is deferred; after dt__conn_fail the fd is
 * gone at once and everything else is reported on the next timer round.
 */
#ifndef DT_NET_CONN_INTERNAL_H
#define DT_NET_CONN_INTERNAL_H

#include <stdint.h>
#include <sys/uio.h>

#include "net/auth.h"
#include "net/conn.h"

/* With a cluster secret (net/auth.h) the handshake starts with CS_AUTH
 * (server: waiting for AUTH_HELLO), CS_AUTH_PROOF (server: challenge sent,
 * waiting for AUTH_PROOF) and CS_CLIENT_AUTH (client: AUTH_HELLO sent,
 * waiting for AUTH_CHALLENGE). Then CS_HANDSHAKE: server side, waiting for
 * HELLO; CS_CLIENT_HELLO: client side, HELLO sent, waiting for HELLO_OK or
 * REFUSE. The server's three first states are all "unjudged". */
enum { CS_AUTH, CS_AUTH_PROOF, CS_CLIENT_AUTH, CS_HANDSHAKE, CS_CLIENT_HELLO, CS_OPEN, CS_CLOSING, CS_CLOSED };
#define CS_UNJUDGED(s) ((s) == CS_AUTH || (s) == CS_AUTH_PROOF || (s) == CS_HANDSHAKE)
#define CS_HANDSHAKING(s) ((s) <= CS_CLIENT_HELLO)

#define RBUF_CAP (64u << 10)  /* one recv of small frames */
#define RBUF_PENDING 2048u     /* the same before the handshake: unjudged peers stay cheap */
#define DIRECT_MIN (16u << 10) /* payload bytes still missing before we recv into place */
#define READ_BUDGET 16         /* recv calls per readiness event, for fairness between peers */
#define IOV_BATCH 64
/* Authenticated frames are tagged and checked in pieces of this size while
 * they move (net/wire_crypto.h): small enough to stay in L2 between the MAC
 * and the kernel's copy, large enough that a call costs nothing. */
#define STREAM_MIN (64u << 10) /* smaller payloads are sealed whole when queued */
#define SEAL_AHEAD (256u << 10)
#define SEAL_AHEAD_IDLE (1u << 20) /* while the socket is full */
#define RX_PIECE (256u << 10)

struct out_entry {
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	uint8_t tag[DT_AUTH_TAG_BYTES]; /* sent after the payload when `tagged` */
	int tagged;
	/* Streamed (tagged payloads of STREAM_MIN bytes or more): the tag, and in
	 * encrypt mode the ciphertext, are made while the frame is sent, at most
	 * SEAL_AHEAD bytes ahead of the socket (conn_send.c, seal_ahead). Only
	 * bytes below `sealed` are sent, the tag once `streaming` is 0 again. */
	int streaming;   /* 0 done (or never), 1 waiting, 2 begun in c->tx_k */
	uint64_t frame_n; /* its number in this direction (dt_wire_take_tx at enqueue) */
	uint64_t sealed;  /* payload bytes tagged (and encrypted) so far */
	int from_parts;   /* encrypt: the ciphertext goes to wbuf from `parts` (the caller's memory) */
	uint64_t total; /* header + payload */
	uint64_t sent;
	int nparts;
	int copied;       /* payload is wbuf[copy_off .. copy_off + copy_len) */
	size_t copy_off, copy_len;
	struct iovec parts[DT_CONN_MAX_PARTS];
	dt_send_done_fn done;
	void *arg;
	struct dt_request *req; /* a request whose referenced payload this is */
};

struct deferred_done {
	dt_send_done_fn fn;
	void *arg;
	enum dt_status st;
};

struct dt_conn {
	struct dt_loop *loop;
	int fd;
	int state;
	char peer[DT_PEER_LABEL_MAX]; /* "worker:1 at 127.0.0.1:53412" */
	char addr[96];                /* "127.0.0.1:53412" */
	struct dt_conn_config cfg;
	struct dt_hello remote;
	int have_remote;
	struct dt__conn_accept_opts acc; /* acc.local: our hello during either handshake */
	char expect_role[DT_ROLE_MAX + 1]; /* client side: who should answer ("" for anyone) */
	uint32_t expect_index;
	int quiet_failure;                 /* dt_conn_connect returns a failed handshake itself */
	int evicted;                       /* closed unjudged to make room (dt__conn_evict) */
	uint32_t mismatch_code;            /* on_header saw the other side of a secret/no-secret mismatch */
	char mismatch[160];

	/* authentication (net/auth.h): the exchange, then the keys of every frame */
	struct dt_auth_hs hs;
	struct dt_wire_sec sec;
	struct dt_wire_kernel tx_k; /* the streamed frame being sent (at most one begun) */
	struct dt_wire_kernel rx_k; /* the frame being received, checked as it arrives */
	int rx_active;              /* rx_k holds the current incoming frame */
	uint64_t rx_done;           /* its payload bytes fed to rx_k */
	int was_open;
	void *user;

	/* reading */
	struct dt_frame_decoder dec;
	uint8_t *rbuf;
	size_t rpos, rlen, rcap;
	int64_t last_rx;
	int read_paused;
	struct dt_request *receiving; /* its reply payload is streaming into reply_buf */

	/* writing */
	struct out_entry *q; /* ring */
	size_t qhead, qlen, qcap;
	uint8_t *wbuf; /* copied payloads */
	size_t wlen, wcap;
	size_t copied_queued;
	int64_t last_tx;
	unsigned interest;
	struct deferred_done *dones;
	size_t ndones, dones_cap;

	/* requests */
	struct dt_request *pending;
	uint64_t next_id;

	/* time */
	struct dt_timer timer;
	int64_t handshake_by, linger_by;

	/* closing */
	struct dt_err why;
	int why_set;
	int notified;
	int in_cb;
	int free_pending;
	struct dt_conn_stats stats;
};

static inline double dt__secs(int64_t ns)
{
	return (double)ns / 1e9;
}

/* conn.c */
void dt__conn_teardown_fd(struct dt_conn *c);
/* Closes now with this reason (the first reason recorded wins); the callbacks follow from the timer. */
void dt__conn_fail(struct dt_conn *c, enum dt_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Sends what is queued (the last frame included), then closes within DT_NET_LINGER_S. */
void dt__conn_close_after_flush(struct dt_conn *c, enum dt_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A violation by a peer that speaks the protocol: an ERROR frame saying why, then close. */
void dt__conn_protocol_error(struct dt_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes the timer fire no later than `when`. */
void dt__conn_schedule(struct dt_conn *c, int64_t when);
/* Arms the timer for the next thing due in the current state. */
void dt__conn_schedule_next(struct dt_conn *c);
void dt__conn_really_free(struct dt_conn *c);

/* conn_send.c */
struct out_entry *dt__conn_entry(struct dt_conn *c, size_t i);
/* Queues a frame; copy: the parts are copied into wbuf, else referenced. */
struct out_entry *dt__conn_enqueue(struct dt_conn *c, uint16_t type, uint32_t flags, uint64_t request_id,
				   const struct iovec *parts, int nparts, int copy);
void dt__conn_pop_entry(struct dt_conn *c, enum dt_status st);
void dt__conn_flush(struct dt_conn *c);
void dt__conn_update_interest(struct dt_conn *c);
void dt__conn_run_dones(struct dt_conn *c);
void dt__conn_send_reason(struct dt_conn *c, uint16_t type, uint32_t flags, uint32_t code, const char *text);
struct dt_request *dt__conn_find_request(struct dt_conn *c, uint64_t id);
void dt__conn_finish_request(struct dt_conn *c, struct dt_request *r, enum dt_status st, const uint8_t *reply);
void dt__conn_fail_request(struct dt_conn *c, struct dt_request *r, enum dt_status st, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void dt__conn_expire_requests(struct dt_conn *c, int64_t now);

/* conn_auth.c */
/* Client: queues AUTH_HELLO (state CS_CLIENT_AUTH). */
void dt__conn_auth_start_client(struct dt_conn *c);
/* A frame in CS_AUTH, CS_AUTH_PROOF or CS_CLIENT_AUTH. */
void dt__conn_auth_frame(struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *payload);
/* Whether on_header takes type h in an auth state (why says what was wrong). */
int dt__conn_auth_header(struct dt_conn *c, const struct dt_frame_header *h, char *why, size_t cap);
/* Feeds the payload bytes of the frame being received that arrived since the
 * last call to its check (an authenticated connection's frames are checked
 * while they arrive); the frame's bytes are used only after
 * dt__conn_auth_check. */
void dt__conn_auth_progress(struct dt_conn *c);
/* Checks a completed frame of an authenticated connection; 0 if authentic,
 * else the conn is closed (naming the peer and the frame). */
int dt__conn_auth_check(struct dt_conn *c, const struct dt_frame_header *h, uint8_t *payload);
/* Queues the HELLO of the client side. */
void dt__conn_queue_hello(struct dt_conn *c);

/* conn_recv.c */
int dt__conn_on_header(void *arg, const struct dt_frame_header *h, void **dest, char *why, size_t cap);
void dt__conn_on_io(struct dt_loop *loop, int fd, unsigned events, void *arg);

#endif
