#include "net/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/rng.h"
#include "base/strutil.h"
#include "net/congestion.h"

enum dt_status dt_sock_split_hostport(const char *addr, char *host, size_t host_cap, int *port, struct dt_err *err)
{
	const char *colon, *h = addr;
	size_t hlen;
	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');
		if (!close || close[1] != ':')
			return dt_err_set(err, DT_CONFIG, "bad address '%s': expected [ipv6]:port", addr);
		h = addr + 1;
		hlen = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon || strchr(addr, ':') != colon)
			return dt_err_set(err, DT_CONFIG, "bad address '%s': expected host:port", addr);
		hlen = (size_t)(colon - addr);
	}
	if (hlen == 0 || hlen >= host_cap)
		return dt_err_set(err, DT_CONFIG, "bad address '%s': the host is empty or too long", addr);
	char *end;
	errno = 0;
	long p = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || errno || p < 0 || p > 65535)
		return dt_err_set(err, DT_CONFIG, "bad address '%s': the port must be a number in 0..65535", addr);
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*port = (int)p;
	return DT_OK;
}

static void format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)ss;
		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		snprintf(buf, cap, "%s:%u", ip, ntohs(a->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(buf, cap, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else {
		snprintf(buf, cap, "?");
	}
}

void dt_sock_peer_name(int fd, char *buf, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	memset(&ss, 0, sizeof(ss));
	if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
		ss.ss_family = AF_UNSPEC;
	format_sockaddr(&ss, buf, cap);
}

void dt_sock_local_name(int fd, char *buf, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	memset(&ss, 0, sizeof(ss));
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		ss.ss_family = AF_UNSPEC;
	format_sockaddr(&ss, buf, cap);
}

int dt_sock_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)(const void *)&ss)->sin6_port);
	return -1;
}

void dt_sock_close(int fd)
{
	if (fd >= 0)
		close(fd);
}

enum dt_status dt_sock_set_nonblocking(int fd, struct dt_err *err)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return dt_err_set(err, DT_IO, "cannot make socket %d nonblocking: %s", fd, strerror(errno));
	return DT_OK;
}

enum dt_status dt_sock_set_nodelay(int fd, struct dt_err *err)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
		return dt_err_set(err, DT_IO, "cannot set TCP_NODELAY on socket %d: %s", fd, strerror(errno));
	return DT_OK;
}

enum dt_status dt_sock_set_bufsizes(int fd, int sndbuf, int rcvbuf, struct dt_err *err)
{
	if (sndbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) != 0)
		return dt_err_set(err, DT_IO, "cannot set SO_SNDBUF to %d: %s", sndbuf, strerror(errno));
	if (rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) != 0)
		return dt_err_set(err, DT_IO, "cannot set SO_RCVBUF to %d: %s", rcvbuf, strerror(errno));
	return DT_OK;
}

static int resolve(const char *host, int port, int passive, struct addrinfo **res)
{
	struct addrinfo hints;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	char service[16];
	snprintf(service, sizeof(service), "%d", port);
	return getaddrinfo(host, service, &hints, res);
}

enum dt_status dt_sock_listen(const char *host, int port, int backlog, int *fd_out, int *bound_port, struct dt_err *err)
{
	*fd_out = -1;
	struct addrinfo *res = NULL;
	int rc = resolve(host, port, 1, &res);
	if (rc != 0)
		return dt_err_set(err, DT_CONFIG, "cannot listen on %s:%d: %s", host, port, gai_strerror(rc));
	int saved = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog > 0 ? backlog : 128) == 0) {
			freeaddrinfo(res);
			*fd_out = fd;
			if (bound_port)
				*bound_port = dt_sock_local_port(fd);
			return DT_OK;
		}
		saved = errno;
		close(fd);
	}
	freeaddrinfo(res);
	/* A port in use is another process's, for now: retryable (exit 3, which
	 * restart policies restart), unlike a port we may never have (EACCES)
	 * or an address that is not ours (EADDRNOTAVAIL): configuration (2). */
	if (saved == EADDRINUSE)
		return dt_err_set(err, DT_PEER, "cannot listen on %s:%d: %s (port %d is taken by another process; "
						"another job on this host? a restart may find it free)", host, port,
				  strerror(saved), port);
	enum dt_status st = saved == EACCES || saved == EADDRNOTAVAIL ? DT_CONFIG : DT_IO;
	return dt_err_set(err, st, "cannot listen on %s:%d: %s", host, port, strerror(saved));
}

enum dt_status dt_sock_accept(int listen_fd, int *fd_out, char *peer, size_t peer_cap, struct dt_err *err)
{
	*fd_out = -1;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd = accept4(listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		switch (errno) {
		case EAGAIN:
#if EWOULDBLOCK != EAGAIN
		case EWOULDBLOCK:
#endif
		case EINTR:
		case ECONNABORTED:
		case EPROTO:
		case EPERM: /* a firewall said no to this one */
			return DT_OK;
		default:
			return dt_err_set(err, DT_IO, "cannot accept a connection: %s", strerror(errno));
		}
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (peer)
		format_sockaddr(&ss, peer, peer_cap);
	*fd_out = fd;
	return DT_OK;
}

/* Errors that a later attempt may not see: the listener is not up yet, the
 * route or the name is not there yet, the attempt timed out. */
static int retryable(int e)
{
	switch (e) {
	case ECONNREFUSED: case ETIMEDOUT: case ENETUNREACH: case EHOSTUNREACH: case ECONNRESET:
	case ECONNABORTED: case EAGAIN: case EADDRNOTAVAIL: case EINTR: case ENETDOWN: case EHOSTDOWN:
		return 1;
	default:
		return 0;
	}
}

/* One attempt on one address: 0 and *fd_out on success, else an errno. */
static int connect_once(const struct addrinfo *ai, int64_t until, const struct dt_connect_opts *o, int *fd_out)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0)
		return errno;
	int e = dt_sock_set_bufsizes(fd, o->sndbuf, o->rcvbuf, NULL) != DT_OK ? errno : dt_tcp_cc_set(fd, o->congestion);
	if (e) {
		close(fd);
		return e;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		e = errno;
		if (e == EINPROGRESS || e == EINTR) {
			struct pollfd p = { fd, POLLOUT, 0 };
			int r;
			do
				r = poll(&p, 1, dt_deadline_ms_left(until));
			while (r < 0 && errno == EINTR);
			socklen_t len = sizeof(e);
			if (r == 0)
				e = ETIMEDOUT;
			else if (r < 0)
				e = errno;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
				e = errno;
		}
	}
	if (e == 0) {
		/* Linux can connect a socket to itself (TCP simultaneous open) when
		 * dialling a free local port in the ephemeral range: that is a refusal. */
		char local[DT_PEER_LABEL_MAX], remote[DT_PEER_LABEL_MAX];
		dt_sock_local_name(fd, local, sizeof(local));
		dt_sock_peer_name(fd, remote, sizeof(remote));
		if (strcmp(local, remote) == 0)
			e = ECONNREFUSED;
	}
	if (e != 0) {
		close(fd);
		return e;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*fd_out = fd;
	return 0;
}

/* The pause between two attempts, `seconds`, in slices of 10 ms between
 * which the caller's stop is looked at. */
static void pause_unless_stopped(struct dt_connect_opts *o, double seconds)
{
	const int64_t until = dt_deadline_in(seconds);
	for (int ms; (ms = dt_deadline_ms_left(until)) > 0 && !o->stop(o->stop_arg);)
		dt_sleep((ms < 10 ? ms : 10) / 1e3);
}

enum dt_status dt_sock_connect(const char *host, int port, const char *task, int64_t deadline,
			       struct dt_connect_opts *opts, int *fd_out, struct dt_err *err)
{
	struct dt_connect_opts defaults = { .initial_backoff_s = 0.01, .max_backoff_s = 1.0, .attempt_timeout_s = 5.0 };
	struct dt_connect_opts *o = opts ? opts : &defaults;
	double backoff = o->initial_backoff_s > 0 ? o->initial_backoff_s : 0.01;
	double max_backoff = o->max_backoff_s > 0 ? o->max_backoff_s : 1.0;
	double attempt_s = o->attempt_timeout_s > 0 ? o->attempt_timeout_s : 5.0;
	char label[DT_PEER_LABEL_MAX];
	if (task && *task)
		dt_fmt(label, sizeof(label), "%s at %s:%d", task, host, port);
	else
		dt_fmt(label, sizeof(label), "%s:%d", host, port);

	int64_t start = dt_now_ns();
	struct dt_rng rng;
	dt_rng_seed(&rng, (uint64_t)start ^ ((uint64_t)getpid() << 32) ^ (uint64_t)port);
	char last[160] = "no attempt was made";
	int stopped = 0;
	*fd_out = -1;
	o->attempts = 0;
	for (;;) {
		o->attempts++;
		struct addrinfo *res = NULL;
		int rc = resolve(host, port, 0, &res);
		if (rc != 0) {
			if (rc != EAI_AGAIN && rc != EAI_NONAME && rc != EAI_FAIL
#ifdef EAI_NODATA
			    && rc != EAI_NODATA
#endif
			)
				return dt_err_set(err, DT_CONFIG, "cannot connect to %s: %s", label, gai_strerror(rc));
			snprintf(last, sizeof(last), "%s", gai_strerror(rc));
		} else {
			for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
				int64_t until = dt_deadline_in(attempt_s);
				if (until > deadline)
					until = deadline;
				int e = connect_once(ai, until, o, fd_out);
				if (e == 0) {
					freeaddrinfo(res);
					return DT_OK;
				}
				snprintf(last, sizeof(last), "%s", strerror(e));
				if (!retryable(e)) {
					freeaddrinfo(res);
					enum dt_status st = (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) ? DT_IO : DT_CONFIG;
					return dt_err_set(err, st, "cannot connect to %s: %s (attempt %d)", label, last, o->attempts);
				}
			}
			freeaddrinfo(res);
		}
		if (dt_deadline_passed(deadline) || (stopped = o->stop && o->stop(o->stop_arg)))
			break;
		/* Equal jitter: half the backoff fixed, half random, so restarted
		 * workers do not all knock at the same instant. */
		double pause = backoff * (0.5 + 0.5 * (double)dt_rng_uniform(&rng));
		double left = (double)dt_deadline_ms_left(deadline) / 1e3;
		if (o->pause)
			o->pause(o->pause_arg, pause < left ? pause : left);
		else if (o->stop)
			pause_unless_stopped(o, pause < left ? pause : left);
		else
			dt_sleep(pause < left ? pause : left);
		backoff = backoff * 2 < max_backoff ? backoff * 2 : max_backoff;
		if (dt_deadline_passed(deadline))
			break;
	}
	if (stopped)
		return dt_err_set(err, DT_PEER, "cannot connect to %s: %s; stopped waiting after %d attempt%s in %.2f s",
				  label, last, o->attempts, o->attempts == 1 ? "" : "s",
				  (double)(dt_now_ns() - start) / 1e9);
	return dt_err_set(err, DT_PEER, "cannot connect to %s within %.1f s: %s (%d attempt%s)", label,
			  (double)(dt_now_ns() - start) / 1e9, last, o->attempts, o->attempts == 1 ? "" : "s");
}

/* Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error (errno). */
static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = { fd, events, 0 };
	for (;;) {
		int r = poll(&p, 1, dt_deadline_ms_left(deadline));
		if (r > 0)
			return 1;
		if (r == 0)
			return dt_deadline_passed(deadline) ? 0 : 1; /* ms rounding: look again */
		if (errno != EINTR)
			return -1;
	}
}

static double since(int64_t t0)
{
	return (double)(dt_now_ns() - t0) / 1e9;
}

enum dt_status dt_sock_sendv_all(int fd, const struct iovec *iov_in, int iovcnt, int64_t deadline, const char *peer,
				 struct dt_err *err)
{
	DT_ASSERT(iovcnt >= 0 && iovcnt <= DT_SOCK_IOV_MAX);
	struct iovec iov[DT_SOCK_IOV_MAX];
	size_t total = 0, done = 0;
	for (int i = 0; i < iovcnt; i++) {
		iov[i] = iov_in[i];
		total += iov[i].iov_len;
	}
	int64_t t0 = dt_now_ns();
	int first = 0;
	while (done < total) {
		while (first < iovcnt && iov[first].iov_len == 0)
			first++;
		struct msghdr msg;
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = iov + first;
		msg.msg_iovlen = (size_t)(iovcnt - first);
		ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			size_t left = (size_t)n;
			done += left;
			for (int i = first; i < iovcnt && left; i++) {
				size_t take = left < iov[i].iov_len ? left : iov[i].iov_len;
				iov[i].iov_base = (char *)iov[i].iov_base + take;
				iov[i].iov_len -= take;
				left -= take;
			}
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int w = wait_fd(fd, POLLOUT, deadline);
			if (w > 0)
				continue;
			if (w == 0)
				return dt_err_set(err, DT_TIMEOUT, "deadline exceeded sending to %s: %zu of %zu bytes sent in %.1f s",
						  peer, done, total, since(t0));
		}
		return dt_err_set(err, DT_PEER, "cannot send to %s: %s (%zu of %zu bytes sent)", peer,
				  strerror(errno), done, total);
	}
	return DT_OK;
}

enum dt_status dt_sock_send_all(int fd, const void *buf, size_t len, int64_t deadline, const char *peer, struct dt_err *err)
{
	struct iovec iov = { (void *)(uintptr_t)buf, len };
	return dt_sock_sendv_all(fd, &iov, 1, deadline, peer, err);
}

enum dt_status dt_sock_recv_all(int fd, void *buf, size_t len, int64_t deadline, const char *peer, struct dt_err *err)
{
	size_t done = 0;
	int64_t t0 = dt_now_ns();
	while (done < len) {
		ssize_t n = recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0)
			return dt_err_set(err, DT_PEER, "%s closed the connection after %zu of %zu bytes", peer, done, len);
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int w = wait_fd(fd, POLLIN, deadline);
			if (w > 0)
				continue;
			if (w == 0)
				return dt_err_set(err, DT_TIMEOUT, "deadline exceeded receiving from %s: %zu of %zu bytes received in %.1f s",
						  peer, done, len, since(t0));
		}
		return dt_err_set(err, DT_PEER, "cannot receive from %s: %s (%zu of %zu bytes received)", peer,
				  strerror(errno), done, len);
	}
	return DT_OK;
}

enum dt_status dt_sock_sendrecv(int sfd, const void *sbuf, size_t slen, const char *speer,
				int rfd, void *rbuf, size_t rlen, const char *rpeer,
				int64_t deadline, struct dt_err *err)
{
	size_t sent = 0, got = 0;
	int64_t t0 = dt_now_ns();
	while (sent < slen || got < rlen) {
		int progressed = 0;
		if (sent < slen) {
			ssize_t n = send(sfd, (const char *)sbuf + sent, slen - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0) {
				sent += (size_t)n;
				progressed = 1;
			} else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				return dt_err_set(err, DT_PEER, "cannot send to %s: %s (%zu of %zu bytes sent)", speer,
						  strerror(errno), sent, slen);
			}
		}
		if (got < rlen) {
			ssize_t n = recv(rfd, (char *)rbuf + got, rlen - got, MSG_DONTWAIT);
			if (n > 0) {
				got += (size_t)n;
				progressed = 1;
			} else if (n == 0) {
				return dt_err_set(err, DT_PEER, "%s closed the connection after %zu of %zu bytes", rpeer, got, rlen);
			} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				return dt_err_set(err, DT_PEER, "cannot receive from %s: %s (%zu of %zu bytes received)", rpeer,
						  strerror(errno), got, rlen);
			}
		}
		if (progressed || (sent == slen && got == rlen))
			continue;
		struct pollfd p[2];
		int np = 0;
		if (sent < slen)
			p[np++] = (struct pollfd){ sfd, POLLOUT, 0 };
		if (got < rlen) {
			if (np == 1 && sfd == rfd)
				p[0].events |= POLLIN;
			else
				p[np++] = (struct pollfd){ rfd, POLLIN, 0 };
		}
		int r = poll(p, (nfds_t)np, dt_deadline_ms_left(deadline));
		if (r < 0 && errno != EINTR)
			return dt_err_set(err, DT_IO, "poll failed: %s", strerror(errno));
		if (r == 0 && dt_deadline_passed(deadline))
			return dt_err_set(err, DT_TIMEOUT,
					  "deadline exceeded exchanging data: %zu of %zu bytes sent to %s, %zu of %zu received from %s in %.1f s",
					  sent, slen, speer, got, rlen, rpeer, since(t0));
	}
	return DT_OK;
}
