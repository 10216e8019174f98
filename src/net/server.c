#include "net/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "net/congestion.h"
#include "net/handshake.h"
#include "net/socket.h"

#define ACCEPT_BUDGET 64         /* accepts per readiness event */
#define ACCEPT_PAUSE_S 0.1       /* after EMFILE and the like */

/* A connection not judged yet and the hello bytes its header announced. */
struct pending {
	struct dt_conn *c;
	uint64_t bytes;
};

struct dt_server {
	struct dt_loop *loop;
	struct dt_server_config cfg;
	int listen_fd;
	int port;
	struct dt_conn **conns;
	size_t nconns, conns_cap;
	struct pending *pend; /* oldest first; cfg.pending_max entries */
	size_t npend;
	uint64_t pend_bytes;
	struct dt_timer resume;
	struct dt_server_stats stats;
	const struct dt_conn_handler *user; /* the caller's handler, behind ours */
	void *user_arg;
	struct dt_conn_handler wrap;
};

static void remove_conn(struct dt_server *s, struct dt_conn *c)
{
	for (size_t i = 0; i < s->nconns; i++) {
		if (s->conns[i] == c) {
			s->conns[i] = s->conns[--s->nconns];
			return;
		}
	}
}

/* Forgets c as pending (judged or closed); no-op if it is not. */
static void pend_remove(struct dt_server *s, struct dt_conn *c)
{
	for (size_t i = 0; i < s->npend; i++) {
		if (s->pend[i].c == c) {
			s->pend_bytes -= s->pend[i].bytes;
			memmove(&s->pend[i], &s->pend[i + 1], (s->npend - i - 1) * sizeof(*s->pend));
			s->npend--;
			return;
		}
	}
}

/* Closes the oldest pending connection other than `keep` to make room. */
static void evict_oldest(struct dt_server *s, const struct dt_conn *keep, const char *why)
{
	for (size_t i = 0; i < s->npend; i++) {
		struct dt_conn *c = s->pend[i].c;
		if (c == keep)
			continue;
		pend_remove(s, c);
		s->stats.evicted++;
		/* A flood would log a line per socket: log the first and then at powers of two. */
		uint64_t n = s->stats.evicted;
		if ((n & (n - 1)) == 0)
			dt_warn("closing unjudged connections on port %d to make room (%llu so far, latest from %s): %s",
				s->port, (unsigned long long)n, dt_conn_peer(c), why);
		dt__conn_evict(c, why);
		return;
	}
}

/* A pending conn's hello header announced `bytes`; nothing is allocated yet. */
static void srv_reserve(void *arg, struct dt_conn *c, uint64_t bytes)
{
	struct dt_server *s = arg;
	struct pending *p = NULL;
	for (size_t i = 0; i < s->npend && !p; i++)
		if (s->pend[i].c == c)
			p = &s->pend[i];
	if (!p)
		return; /* already forgotten (cannot happen while it is pending) */
	s->pend_bytes += bytes - p->bytes;
	p->bytes = bytes;
	while (s->pend_bytes > s->cfg.pending_bytes && s->npend > 1) {
		char why[128];
		snprintf(why, sizeof(why), "unjudged connections announced %llu hello bytes, over the %llu-byte budget",
			 (unsigned long long)s->pend_bytes, (unsigned long long)s->cfg.pending_bytes);
		evict_oldest(s, c, why);
	}
	if (s->pend_bytes > s->stats.pending_bytes_peak)
		s->stats.pending_bytes_peak = s->pend_bytes;
}

static void srv_open(struct dt_conn *c, void *arg)
{
	struct dt_server *s = arg;
	pend_remove(s, c);
	s->stats.opened++;
	dt_debug("accepted %s", dt_conn_peer(c));
	if (s->user && s->user->on_open)
		s->user->on_open(c, s->user_arg);
}

static void srv_frame(struct dt_conn *c, const struct dt_frame_header *h, uint8_t *payload, void *arg)
{
	struct dt_server *s = arg;
	if (s->user && s->user->on_frame)
		s->user->on_frame(c, h, payload, s->user_arg);
	else if (h->request_id)
		(void)dt_conn_reply_error(c, h->request_id, DT_CONFIG, "this task does not serve %s requests",
					  dt_msg_name(h->type));
}

static void *srv_dest(struct dt_conn *c, const struct dt_frame_header *h, void *arg)
{
	struct dt_server *s = arg;
	return s->user && s->user->on_dest ? s->user->on_dest(c, h, s->user_arg) : NULL;
}

/* After the caller's on_close: count, log, forget and free the conn. */
static void srv_close(struct dt_conn *c, const struct dt_err *why, void *arg)
{
	struct dt_server *s = arg;
	if (s->user && s->user->on_close)
		s->user->on_close(c, why, s->user_arg);
	pend_remove(s, c);
	s->stats.closed++;
	if (dt__conn_was_evicted(c)) { /* counted and logged by evict_oldest */
		s->stats.timeouts++;
		remove_conn(s, c);
		dt_conn_free(c);
		return;
	}
	switch (why->status) {
	case DT_OK:
		dt_debug("connection closed: %s", why->msg);
		break;
	case DT_CONFIG:
		s->stats.refused++;
		dt_warn("%s", why->msg);
		break;
	case DT_PROTOCOL:
		s->stats.violations++;
		dt_warn("closed the connection: %s", why->msg);
		break;
	case DT_TIMEOUT:
		s->stats.timeouts++;
		dt_warn("closed the connection: %s", why->msg);
		break;
	default:
		dt_info("connection lost: %s", why->msg);
	}
	remove_conn(s, c);
	dt_conn_free(c); /* deferred until the conn's callback returns */
}

static void resume_accept(struct dt_loop *loop, struct dt_timer *t, void *arg)
{
	struct dt_server *s = arg;
	struct dt_err err = DT_ERR_INIT;
	if (dt_loop_modify(loop, s->listen_fd, DT_LOOP_READ, &err) != DT_OK)
		dt_error("cannot resume accepting on port %d: %s", s->port, err.msg);
}

static void on_accept(struct dt_loop *loop, int fd, unsigned events, void *arg)
{
	struct dt_server *s = arg;
	for (int i = 0; i < ACCEPT_BUDGET; i++) {
		int cfd;
		char addr[DT_PEER_LABEL_MAX];
		struct dt_err err = DT_ERR_INIT;
		if (dt_sock_accept(fd, &cfd, addr, sizeof(addr), &err) != DT_OK) {
			/* Out of descriptors or memory: the pending connection stays in the
			 * backlog and a level-triggered loop would spin, so pause. */
			dt_warn("%s; pausing accepts on port %d for %.1f s", err.msg, s->port, ACCEPT_PAUSE_S);
			struct dt_err e2 = DT_ERR_INIT;
			if (dt_loop_modify(loop, fd, 0, &e2) == DT_OK)
				dt_timer_start(loop, &s->resume, dt_deadline_in(ACCEPT_PAUSE_S));
			return;
		}
		if (cfd < 0)
			return;
		s->stats.accepted++;
		if (s->nconns >= s->cfg.max_conns) {
			dt_warn("closing a connection from %s: already %zu connections", addr, s->nconns);
			dt_sock_close(cfd);
			continue;
		}
		if (s->npend >= s->cfg.pending_max) {
			char why[128];
			snprintf(why, sizeof(why), "%zu connections were waiting to be judged, the most this task keeps",
				 s->npend);
			evict_oldest(s, NULL, why);
		}
		struct dt__conn_accept_opts opts = {
			.local = s->cfg.local,
			.admit = s->cfg.admit,
			.admit_arg = s->cfg.admit_arg,
			.hello_cap = s->cfg.hello_cap,
			.reserve = srv_reserve,
			.reserve_arg = s,
		};
		struct dt_conn *c;
		if (dt__conn_accept(loop, cfd, addr, &s->cfg.conn, &opts, &c, &err) != DT_OK) {
			dt_warn("cannot serve a connection from %s: %s", addr, err.msg);
			continue;
		}
		s->pend[s->npend++] = (struct pending){ c, 0 };
		if (s->npend > s->stats.pending_peak)
			s->stats.pending_peak = s->npend;
		if (s->nconns == s->conns_cap) {
			s->conns_cap = s->conns_cap ? s->conns_cap * 2 : 16;
			s->conns = dt_xrealloc(s->conns, s->conns_cap * sizeof(*s->conns));
		}
		s->conns[s->nconns++] = c;
	}
}

enum dt_status dt_server_new(struct dt_loop *loop, const struct dt_server_config *cfg, struct dt_server **out,
			     struct dt_err *err)
{
	DT_ASSERT(cfg->local);
	*out = NULL;
	struct dt_server *s = dt_xcalloc(1, sizeof(*s));
	s->loop = loop;
	s->cfg = *cfg;
	if (!s->cfg.host)
		s->cfg.host = "127.0.0.1";
	if (s->cfg.max_conns == 0)
		s->cfg.max_conns = 4096;
	if (s->cfg.pending_max == 0)
		s->cfg.pending_max = DT_NET_PENDING_MAX;
	if (s->cfg.hello_cap == 0)
		s->cfg.hello_cap = dt_handshake_hello_cap(cfg->local);
	if (s->cfg.pending_bytes == 0)
		s->cfg.pending_bytes = dt_handshake_pending_budget(s->cfg.hello_cap);
	s->pend = dt_xmallocarray(s->cfg.pending_max, sizeof(*s->pend));
	s->user = cfg->conn.handler;
	s->user_arg = cfg->conn.arg;
	s->wrap = (struct dt_conn_handler){ srv_open, srv_frame, srv_dest, srv_close };
	s->cfg.conn.handler = &s->wrap;
	s->cfg.conn.arg = s;
	dt_timer_init(&s->resume, resume_accept, s);
	enum dt_status st = dt_sock_listen(s->cfg.host, cfg->port, cfg->backlog, &s->listen_fd, &s->port, err);
	if (!st) /* accepted sockets inherit the listener's buffer sizes and congestion control */
		st = dt_sock_set_bufsizes(s->listen_fd, cfg->sndbuf, cfg->rcvbuf, err);
	int e = st ? 0 : dt_tcp_cc_set(s->listen_fd, cfg->congestion);
	if (e)
		st = dt_err_set(err, DT_CONFIG, "cannot set TCP congestion control '%s' on the listening socket: %s",
				cfg->congestion, strerror(e));
	if (!st)
		st = dt_loop_add(loop, s->listen_fd, DT_LOOP_READ, on_accept, s, err);
	if (st) {
		dt_sock_close(s->listen_fd);
		free(s->pend);
		free(s);
		return st;
	}
	*out = s;
	return DT_OK;
}

void dt_server_free(struct dt_server *s)
{
	if (!s)
		return;
	dt_timer_stop(s->loop, &s->resume);
	dt_loop_remove(s->loop, s->listen_fd);
	dt_sock_close(s->listen_fd);
	/* dt_conn_free does not run on_close, so srv_close does not touch the list. */
	for (size_t i = 0; i < s->nconns; i++)
		dt_conn_free(s->conns[i]);
	free(s->conns);
	free(s->pend);
	free(s);
}

int dt_server_port(const struct dt_server *s)
{
	return s->port;
}

size_t dt_server_conn_count(const struct dt_server *s)
{
	return s->nconns;
}

size_t dt_server_pending_count(const struct dt_server *s)
{
	return s->npend;
}

void dt_server_get_stats(const struct dt_server *s, struct dt_server_stats *out)
{
	*out = s->stats;
}

void dt_server_foreach(struct dt_server *s, void (*fn)(struct dt_conn *c, void *arg), void *arg)
{
	/* fn may close conns; their removal waits for the loop, so the array is stable here. */
	for (size_t i = 0; i < s->nconns; i++)
		if (dt_conn_is_open(s->conns[i]))
			fn(s->conns[i], arg);
}

static void shutdown_one(struct dt_conn *c, void *arg)
{
	dt_conn_shutdown(c, arg);
}

void dt_server_shutdown_all(struct dt_server *s, const char *reason)
{
	dt_server_foreach(s, shutdown_one, (void *)(uintptr_t)reason);
}
