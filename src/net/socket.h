/*
 * socket.h — TCP sockets with deadlines: listen, accept, connect with backoff,
 * and send/receive of whole buffers that never block past a deadline.
 *
 * Sockets are plain file descriptors (redis's anet style) that this module
 * makes nonblocking, close-on-exec and TCP_NODELAY. Every function that waits
 * takes an absolute monotonic deadline (base/clock.h) and waits in poll(), so
 * a thread blocks in the kernel, never spins, and never waits past it.
 *
 * Errors name the peer the way the rest of dtrain does, "ps:1 at
 * 127.0.0.1:41021", with the errno text, byte counts and time waited; the
 * `peer` arguments are that label (any string; "127.0.0.1:41021" when the
 * role is not known yet). A peer that closes or resets is DT_PEER, a deadline
 * is DT_TIMEOUT; both are retryable (exit code 3).
 *
 * Loopback facts that shaped the defaults (reference/performance.md): one TCP
 * stream moves ~6 GB/s and the kernel's buffer autotuning already reaches it,
 * so buffer sizes stay at the kernel default unless a caller sets them; the
 * small-message RTT is ~13 µs and is dominated by waking the other core, so
 * TCP_NODELAY is always on and nothing here sleeps to wait for data.
 */
#ifndef DT_NET_SOCKET_H
#define DT_NET_SOCKET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/err.h"

#define DT_HOST_MAX 256
/* "ps:1 at [2001:db8::1]:41021" fits. */
#define DT_PEER_LABEL_MAX 320

/* Splits "host:port" or "[v6addr]:port"; the port must be 0..65535. */
enum dt_status dt_sock_split_hostport(const char *addr, char *host, size_t host_cap, int *port,
				      struct dt_err *err) DT_MUST_CHECK;

/* Listens on host:port (port 0: the kernel picks one; *bound_port says which).
 * The socket is nonblocking with SO_REUSEADDR. EADDRINUSE fails at once,
 * naming the address. */
enum dt_status dt_sock_listen(const char *host, int port, int backlog, int *fd_out, int *bound_port,
			      struct dt_err *err) DT_MUST_CHECK;

/* Accepts one pending connection, nonblocking + TCP_NODELAY, and writes its
 * address ("127.0.0.1:53412") into peer (may be NULL). *fd_out is -1 and the
 * status DT_OK when nothing is pending or the client gave up before accept.
 * Running out of descriptors (EMFILE, ENFILE) or memory is DT_IO, so a
 * server can pause accepting instead of spinning. */
enum dt_status dt_sock_accept(int listen_fd, int *fd_out, char *peer, size_t peer_cap,
			      struct dt_err *err) DT_MUST_CHECK;

struct dt_connect_opts {
	double initial_backoff_s; /* first pause after a refused attempt; default 0.01 */
	double max_backoff_s;     /* pauses double up to this; default 1.0 */
	double attempt_timeout_s; /* one attempt waits at most this for the handshake; default 5.0 */
	int sndbuf, rcvbuf;       /* SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel's autotuning */
	/* TCP_CONGESTION set before connecting ("cubic"; net/congestion.h says
	 * why before); NULL or "" keeps the host's default. */
	const char *congestion;
	int attempts;             /* out: attempts made */
	/* Optional: how to wait between attempts (default: sleep). dt_conn_connect
	 * runs its event loop here so other connections keep being served. */
	void (*pause)(void *arg, double seconds);
	void *pause_arg;
	/* Optional: looked at after each failed attempt and, when `pause` is not
	 * set, every 10 ms of the pause between attempts; nonzero ends the dial at
	 * once with DT_PEER ("... stopped waiting after 3 attempts in 0.04 s"), as
	 * the deadline would (dt_member_report: another survivor reported to this
	 * task, so the one it dials is taken for lost without waiting it out). */
	int (*stop)(void *arg);
	void *stop_arg;
};

/* Connects to host:port, retrying refused, reset, unreachable and
 * not-yet-resolvable addresses with exponential backoff and jitter until
 * `deadline`. `task` names the peer in errors ("ps:1"; NULL for none). On
 * success *fd_out is nonblocking with TCP_NODELAY. On failure:
 *   "cannot connect to ps:1 at 127.0.0.1:41021 within 5.0 s: Connection refused (23 attempts)"
 * (DT_PEER), or at once for errors retrying cannot fix (DT_CONFIG: a bad
 * address; DT_IO: no descriptors). `opts` may be NULL. */
enum dt_status dt_sock_connect(const char *host, int port, const char *task, int64_t deadline,
			       struct dt_connect_opts *opts, int *fd_out, struct dt_err *err) DT_MUST_CHECK;

/* Writes/reads exactly len bytes before the deadline (the descriptor may be
 * blocking or not: each call uses MSG_DONTWAIT and waits in poll). */
enum dt_status dt_sock_send_all(int fd, const void *buf, size_t len, int64_t deadline, const char *peer,
				struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_sock_recv_all(int fd, void *buf, size_t len, int64_t deadline, const char *peer,
				struct dt_err *err) DT_MUST_CHECK;
/* Gathers up to DT_SOCK_IOV_MAX pieces into one stream (header + payload with
 * no copy); `iov` is not modified. */
#define DT_SOCK_IOV_MAX 64
enum dt_status dt_sock_sendv_all(int fd, const struct iovec *iov, int iovcnt, int64_t deadline, const char *peer,
				 struct dt_err *err) DT_MUST_CHECK;

/* Sends sbuf on sfd while receiving rbuf on rfd in one progress loop, so two
 * peers exchanging large buffers (a ring step) never deadlock on full kernel
 * buffers (NCCL's ncclSocketSendRecv). sfd and rfd may be the same socket. */
enum dt_status dt_sock_sendrecv(int sfd, const void *sbuf, size_t slen, const char *speer,
				int rfd, void *rbuf, size_t rlen, const char *rpeer,
				int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

enum dt_status dt_sock_set_nonblocking(int fd, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt_sock_set_nodelay(int fd, struct dt_err *err) DT_MUST_CHECK;
/* 0 leaves a size at the kernel default. */
enum dt_status dt_sock_set_bufsizes(int fd, int sndbuf, int rcvbuf, struct dt_err *err) DT_MUST_CHECK;

/* "127.0.0.1:53412" / "[::1]:53412" of the remote (peer_name) or local end;
 * "?" if unknown. */
void dt_sock_peer_name(int fd, char *buf, size_t cap);
void dt_sock_local_name(int fd, char *buf, size_t cap);
/* Local port of a bound socket, or -1. */
int dt_sock_local_port(int fd);

/* close() that ignores EINTR (Linux releases the descriptor anyway); NULL-safe style: -1 is a no-op. */
void dt_sock_close(int fd);

#endif
