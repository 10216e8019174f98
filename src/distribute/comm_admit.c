/*
 * comm_admit.c — step 3 of the rendezvous (comm.c): accepting every linked
 * peer (the ring neighbours and the ranks at power-of-two distances,
 * dt__comm_linked) on a listener anyone can reach.
 *
 * Every connection to the listener is pending until its HELLO is judged, and
 * pending connections are judged concurrently: one poll() watches the
 * listener and all of them, each has its own deadline (DT_NET_HANDSHAKE_S
 * from its accept, never past the rendezvous deadline), and a stranger that
 * stays silent, trickles its hello a byte at a time, sends garbage, or is
 * some other task is closed alone while the others, the linked peers
 * among them, go on being read. Only the rendezvous deadline, or a peer that
 * claims to be a linked peer but trains another model or cluster (a
 * configuration error, DT_CONFIG), ends the wait.
 *
 * What strangers may cost is bounded as a dt_server bounds it
 * (docs/PROTOCOL.md §4.1): a hello header longer than dt_handshake_hello_cap
 * is refused before anything is allocated, at most DT_NET_PENDING_MAX
 * connections are pending, and their announced hellos together stay within
 * dt_handshake_pending_budget; a newcomer that does not fit closes the
 * oldest pending ones (the real neighbour speaks as soon as it connects).
 *
 * Reads never go past the end of the hello frame, so a linked peer's
 * descriptor carries on with nothing lost.
 */
#include "distribute/comm_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sodium.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/strutil.h"
#include "net/conn.h"
#include "net/handshake.h"

#define ACCEPTS_PER_ROUND 16
#define REFUSE_SEND_S 1.0 /* a refusal to a stranger is best effort: it never holds the others up longer */

struct admission;

/* A connection to the listener whose hello has not been judged. */
struct pending {
	struct admission *a;
	int fd;         /* -1: a free slot */
	uint64_t order; /* accept order: the smallest is the oldest */
	int64_t deadline;
	uint64_t bytes; /* hello bytes its header announced */
	char addr[DT_PEER_LABEL_MAX];
	struct dt_frame_decoder dec;
	/* With a secret: 0 waiting for AUTH_HELLO, 1 for AUTH_PROOF, 2 for the
	 * (tagged) HELLO; without one it starts at 2. */
	int stage;
	struct dt_auth_hs hs;
	struct dt_wire_sec sec;
};

struct admission {
	const struct dt_comm_config *cfg;
	const struct dt_hello *local;
	struct dt_comm *comm;
	int missing; /* linked peers not yet admitted */
	struct pending *slots; /* DT_NET_PENDING_MAX, fixed: decoders point at their slot */
	size_t npending;
	uint64_t next_order, bytes, hello_cap, budget;
	uint64_t strangers; /* connections closed without being a linked peer */
	char last[DT_ERR_MSG_MAX]; /* why the latest stranger was closed */
};

static const char *role_of(const struct dt_comm_peer *p)
{
	return p->role && p->role[0] ? p->role : "worker";
}

static void drop(struct pending *p, const char *why)
{
	struct admission *a = p->a;
	if (why) {
		a->strangers++;
		dt_fmt(a->last, sizeof(a->last), "%s", why);
		/* A flood would log a line per socket: the first, then at powers of two. */
		if ((a->strangers & (a->strangers - 1)) == 0)
			dt_warn("ring listener: %s (%llu closed so far)", why, (unsigned long long)a->strangers);
	}
	dt_sock_close(p->fd);
	p->fd = -1;
	a->bytes -= p->bytes;
	p->bytes = 0;
	dt_frame_decoder_release(&p->dec);
	sodium_memzero(&p->sec, sizeof(p->sec));
	a->npending--;
}

static void drop_oldest(struct admission *a, const struct pending *keep, const char *why)
{
	struct pending *old = NULL;
	for (size_t i = 0; i < DT_NET_PENDING_MAX; i++) {
		struct pending *p = &a->slots[i];
		if (p->fd >= 0 && p != keep && (!old || p->order < old->order))
			old = p;
	}
	if (old) {
		char text[DT_ERR_MSG_MAX];
		dt_fmt(text, sizeof(text), "closed %s before its hello: %s", old->addr, why);
		drop(old, text);
	}
}

/* The decoder's header check: only a HELLO, and within the budget, before
 * anything is allocated for its payload (the length is within hello_cap). */
static int on_header(void *arg, const struct dt_frame_header *h, void **dest, char *why, size_t cap)
{
	(void)dest;
	struct pending *p = arg;
	struct admission *a = p->a;
	uint16_t want = p->stage == 0 ? DT_MSG_AUTH_HELLO : p->stage == 1 ? DT_MSG_AUTH_PROOF : DT_MSG_HELLO;
	if (h->type != want) {
		dt_fmt(why, cap, "expected %s first, got %s%s", dt_msg_name(want), dt_msg_name(h->type),
		       p->stage == 0 && h->type == DT_MSG_HELLO ? " (this ring requires the cluster secret)" : "");
		return -1;
	}
	if (p->stage < 2)
		return 0; /* small and capped by the decoder */
	a->bytes += h->length - p->bytes;
	p->bytes = h->length;
	while (a->bytes > a->budget && a->npending > 1) {
		char text[160];
		dt_fmt(text, sizeof(text), "pending connections announced %llu hello bytes, over the %llu-byte budget",
			 (unsigned long long)a->bytes, (unsigned long long)a->budget);
		drop_oldest(a, p, text);
	}
	return 0;
}

static void send_refuse(int fd, uint32_t code, const char *text, int64_t deadline, const char *peer)
{
	uint8_t buf[DT_REASON_PAYLOAD_MAX];
	size_t len = dt_reason_encode(code, text, buf, sizeof(buf));
	int64_t by = dt_deadline_in(REFUSE_SEND_S);
	/* Best effort: the connection is closed right after. */
	if (dt_frame_send_fd(fd, DT_MSG_REFUSE, DT_FRAME_F_REPLY, 0, buf, len, by < deadline ? by : deadline, peer,
			     NULL) != DT_OK)
		return;
}

/* The linked rank not yet admitted that is role:index, or -1. */
static int wanted_rank(const struct admission *a, const char *role, uint32_t index)
{
	const struct dt_comm *c = a->comm;
	for (int q = 0; q < c->n; q++)
		if (q != c->rank && c->in[q].fd < 0 && dt__comm_linked(c->n, c->rank, q) &&
		    strcmp(role_of(&a->cfg->peers[q]), role) == 0 && a->cfg->peers[q].index == index)
			return q;
	return -1;
}

/* A whole hello from p. Returns DT_OK with *is_left the peer's rank when p
 * is a linked peer not yet admitted, accepted and answered; DT_OK with
 * *is_left -1 when p was someone else (refused and closed); DT_CONFIG when a
 * linked peer itself does not match (another model or cluster: fatal). */
static enum dt_status judge(struct admission *a, struct pending *p, int64_t deadline, int *is_left, struct dt_err *err)
{
	struct dt_hello remote;
	uint32_t code = 0;
	char reason[DT_REASON_MAX];
	struct dt_err e = DT_ERR_INIT;
	*is_left = -1;
	enum dt_status st = dt_handshake_judge(a->local, dt_frame_decoder_payload(&p->dec),
					       (size_t)p->dec.header.length, &remote, &code, reason, sizeof(reason), &e);
	if (st) {
		dt_hello_release(&remote);
		char text[DT_ERR_MSG_MAX];
		dt_fmt(text, sizeof(text), "bad hello from %s: %s", p->addr, e.msg);
		drop(p, text);
		return DT_OK;
	}
	if (!code && p->sec.mode && (strcmp(remote.role, p->hs.role_c) != 0 || remote.index != p->hs.index_c)) {
		dt_fmt(reason, sizeof(reason), "it authenticated as %s:%u but its hello says %s:%u", p->hs.role_c,
		       p->hs.index_c, remote.role, remote.index);
		code = DT_REFUSE_IDENTITY;
	}
	int q = wanted_rank(a, remote.role, remote.index);
	int claims_left = q >= 0;
	if (!code && !claims_left) {
		dt_fmt(reason, sizeof(reason), "%s:%u is not a rank this one expects a link from (or is linked already)",
		       remote.role, remote.index);
		code = DT_REFUSE_IDENTITY;
	}
	if (code) {
		send_refuse(p->fd, code, reason, deadline, p->addr);
		char text[DT_REASON_MAX + DT_PEER_LABEL_MAX + 64];
		dt_fmt(text, sizeof(text), "refused %s:%u at %s: %s", remote.role, remote.index, p->addr, reason);
		dt_hello_release(&remote);
		if (claims_left) {
			st = dt_err_set(err, DT_CONFIG, "%s", text);
			drop(p, NULL);
			return st;
		}
		drop(p, text);
		return DT_OK;
	}
	dt_hello_release(&remote);
	size_t len;
	uint8_t *buf = dt_hello_encode_alloc(a->local, &len);
	if (p->sec.mode)
		st = dt_frame_send_fd_sealed(p->fd, &p->sec, DT_MSG_HELLO_OK, DT_FRAME_F_REPLY, buf, len, deadline, p->addr,
					     err);
	else
		st = dt_frame_send_fd(p->fd, DT_MSG_HELLO_OK, DT_FRAME_F_REPLY, 0, buf, len, deadline, p->addr, err);
	free(buf);
	if (st) {
		drop(p, err ? err->msg : "cannot answer its hello");
		return DT_OK; /* the neighbour went away meanwhile: it may connect again */
	}
	*is_left = q;
	return DT_OK;
}

/* A whole AUTH_HELLO or AUTH_PROOF from p: answers or moves it on, or
 * refuses and drops it. Returns 1 if p is still pending. */
static int auth_step(struct admission *a, struct pending *p, int64_t deadline)
{
	char why[DT_REASON_MAX];
	const uint8_t *in = dt_frame_decoder_payload(&p->dec);
	size_t len = (size_t)p->dec.header.length;
	uint32_t code;
	if (p->stage == 0) {
		uint8_t out[DT_AUTH_MSG_MAX];
		size_t out_len = 0;
		code = dt_auth_server_challenge(&p->hs, a->local, in, len, out, &out_len, why, sizeof(why));
		int64_t by = dt_deadline_in(REFUSE_SEND_S);
		if (!code && dt_frame_send_fd(p->fd, DT_MSG_AUTH_CHALLENGE, DT_FRAME_F_REPLY, 0, out, out_len,
					      by < deadline ? by : deadline, p->addr, NULL) != DT_OK) {
			char text[DT_ERR_MSG_MAX];
			dt_fmt(text, sizeof(text), "cannot send a challenge to %s", p->addr);
			drop(p, text);
			return 0;
		}
	} else {
		code = dt_auth_server_check(&p->hs, in, len, &p->sec, why, sizeof(why));
	}
	if (code) {
		send_refuse(p->fd, code, why, deadline, p->addr);
		char text[DT_ERR_MSG_MAX];
		dt_fmt(text, sizeof(text), "refused %s: %s", p->addr, why);
		drop(p, text);
		return 0;
	}
	dt_frame_decoder_next(&p->dec);
	if (++p->stage == 2) {
		p->dec.trailer = DT_AUTH_TAG_BYTES;
		p->dec.max_payload = a->hello_cap;
	}
	return 1;
}

/* The right neighbour's answer to our AUTH_HELLO has arrived on rr: prove
 * and send the HELLO. A refusal or a failed proof ends the rendezvous. */
static enum dt_status right_step(const struct dt_hello *local, int fd, struct dt__ring_right *rr, int64_t deadline,
				 struct dt_err *err)
{
	const uint8_t *in = dt_frame_decoder_payload(&rr->dec);
	size_t len = (size_t)rr->dec.header.length;
	uint16_t type = rr->dec.header.type;
	rr->active = 0;
	if (type == DT_MSG_REFUSE || type == DT_MSG_ERROR) {
		struct dt_reason_msg m;
		if (dt_reason_decode(&m, in, len, err) != DT_OK)
			return dt_err_prefix(err, "ring handshake with %s: bad %s", rr->label, dt_msg_name(type));
		return dt_err_set(err, DT_CONFIG, "%s refused the ring connection: %s", rr->label, m.text);
	}
	if (type != DT_MSG_AUTH_CHALLENGE)
		return dt_err_set(err, DT_PROTOCOL, "ring handshake with %s: expected auth_challenge, got %s", rr->label,
				  dt_msg_name(type));
	char why[DT_REASON_MAX];
	uint8_t proof[DT_AUTH_MAC_BYTES];
	if (dt_auth_client_prove(&rr->hs, in, len, rr->role, rr->index, proof, &rr->sec, why, sizeof(why)))
		return dt_err_set(err, DT_CONFIG, "ring authentication with %s failed: %s", rr->label, why);
	enum dt_status st = dt_frame_send_fd(fd, DT_MSG_AUTH_PROOF, 0, 0, proof, sizeof(proof), deadline, rr->label, err);
	if (st)
		return dt_err_prefix(err, "ring handshake");
	size_t hl;
	uint8_t *hello = dt_hello_encode_alloc(local, &hl);
	st = dt_frame_send_fd_sealed(fd, &rr->sec, DT_MSG_HELLO, 0, hello, hl, deadline, rr->label, err);
	free(hello);
	return st ? dt_err_prefix(err, "ring handshake") : DT_OK;
}

/* Takes what the listener has, closing the oldest pending ones beyond the cap. */
static enum dt_status accept_some(struct admission *a, int lfd, int64_t deadline, struct dt_err *err)
{
	for (int k = 0; k < ACCEPTS_PER_ROUND; k++) {
		int fd = -1;
		char addr[DT_PEER_LABEL_MAX];
		struct dt_err e = DT_ERR_INIT;
		if (dt_sock_accept(lfd, &fd, addr, sizeof(addr), &e) != DT_OK) {
			/* Out of descriptors: the strangers we hold are what to give up. */
			if (a->npending == 0)
				return dt_err_set(err, e.status, "%s", e.msg);
			drop_oldest(a, NULL, e.msg);
			continue;
		}
		if (fd < 0)
			return DT_OK;
		if (a->npending >= DT_NET_PENDING_MAX) {
			char why[96];
			dt_fmt(why, sizeof(why), "%d connections were waiting to be judged, the most a ring rank keeps",
				 DT_NET_PENDING_MAX);
			drop_oldest(a, NULL, why);
		}
		struct pending *p = NULL;
		for (size_t i = 0; i < DT_NET_PENDING_MAX && !p; i++)
			if (a->slots[i].fd < 0)
				p = &a->slots[i];
		DT_ASSERT(p);
		int64_t own = dt_deadline_in(DT_NET_HANDSHAKE_S);
		*p = (struct pending){ .a = a, .fd = fd, .order = a->next_order++, .deadline = own < deadline ? own : deadline };
		dt_fmt(p->addr, sizeof(p->addr), "%s", addr);
		dt_frame_decoder_init(&p->dec, a->local->auth ? DT_AUTH_MSG_MAX : a->hello_cap);
		p->stage = a->local->auth ? 0 : 2;
		p->dec.on_header = on_header;
		p->dec.on_header_arg = p;
		a->npending++;
	}
	return DT_OK;
}

enum dt_status dt__comm_accept_links(struct dt_comm *comm, const struct dt_comm_config *cfg,
				     const struct dt_hello *local, int lfd, struct dt__ring_right *rights, int nrights,
				     int64_t start, int64_t deadline, struct dt_err *err)
{
	struct admission a = { .cfg = cfg, .local = local, .comm = comm };
	for (int q = 0; q < comm->n; q++)
		a.missing += q != comm->rank && dt__comm_linked(comm->n, comm->rank, q);
	a.hello_cap = dt_handshake_hello_cap(local);
	a.budget = dt_handshake_pending_budget(a.hello_cap);
	a.slots = dt_xcalloc(DT_NET_PENDING_MAX, sizeof(*a.slots));
	for (size_t i = 0; i < DT_NET_PENDING_MAX; i++)
		a.slots[i].fd = -1;
	size_t first = 1 + (size_t)nrights;
	struct pollfd *pfd = dt_xcalloc(DT_NET_PENDING_MAX + first, sizeof(*pfd));
	struct pending **polled = dt_xcalloc(DT_NET_PENDING_MAX + first, sizeof(*polled));
	enum dt_status st = DT_OK;
	for (;;) {
		int proving = 0;
		for (int i = 0; i < nrights; i++)
			proving += rights[i].active;
		if (!a.missing && !proving)
			break;
		int64_t now = dt_now_ns(), wake = deadline;
		nfds_t n = 0;
		pfd[n++] = (struct pollfd){ lfd, a.missing ? POLLIN : 0, 0 };
		for (int i = 0; i < nrights; i++)
			pfd[n++] = (struct pollfd){ rights[i].active ? comm->out[rights[i].peer].fd : -1, POLLIN, 0 };
		for (size_t i = 0; i < DT_NET_PENDING_MAX; i++) {
			struct pending *p = &a.slots[i];
			if (p->fd < 0)
				continue;
			if (now >= p->deadline) {
				char text[DT_ERR_MSG_MAX];
				dt_fmt(text, sizeof(text), "no hello from %s within %.1f s", p->addr, DT_NET_HANDSHAKE_S);
				drop(p, text);
				continue;
			}
			if (p->deadline < wake)
				wake = p->deadline;
			polled[n] = p;
			pfd[n++] = (struct pollfd){ p->fd, POLLIN, 0 };
		}
		if (dt_deadline_passed(deadline) && !a.missing) {
			for (int i = 0; i < nrights; i++)
				if (rights[i].active) {
					st = dt_err_set(err, DT_TIMEOUT,
							"ring handshake with %s: no answer to our auth_hello within %.1f s",
							rights[i].label, (double)(dt_now_ns() - start) / 1e9);
					break;
				}
			break;
		}
		if (dt_deadline_passed(deadline)) {
			/* All that are missing: a rank that cannot reach one waits for it
			 * before it links with the rest, so the absent one may hide
			 * behind a rank that is merely waiting for it. */
			char who[DT_ERR_MSG_MAX / 2];
			size_t used = 0;
			who[0] = 0;
			for (int q = 0; q < comm->n && used + 8 < sizeof(who); q++)
				if (q != comm->rank && comm->in[q].fd < 0 && dt__comm_linked(comm->n, comm->rank, q))
					used += (size_t)dt_fmt(who + used, sizeof(who) - used, "%s%s", used ? ", " : "",
								comm->labels[q]);
			st = dt_err_set(err, DT_TIMEOUT,
					"no connection from %s within %.1f s (not started, or it cannot reach this rank at %s)",
					who, (double)(dt_now_ns() - start) / 1e9, cfg->peers[cfg->rank].addr);
			if (a.strangers)
				dt_err_hint(err, "%llu other connection(s) closed meanwhile, the latest: %s",
					    (unsigned long long)a.strangers, a.last);
			break;
		}
		int r = poll(pfd, n, dt_deadline_ms_left(wake));
		if (r < 0 && errno != EINTR) {
			st = dt_err_set(err, DT_IO, "poll on the ring listener failed: %s", strerror(errno));
			break;
		}
		if (r <= 0)
			continue;
		for (int i = 0; i < nrights && !st; i++) {
			struct dt__ring_right *rr = &rights[i];
			if (!rr->active || !pfd[1 + i].revents)
				continue;
			int fd = comm->out[rr->peer].fd, ready = 0;
			st = dt_frame_recv_fd_some(fd, &rr->dec, rr->label, &ready, err);
			if (!st && ready)
				st = right_step(local, fd, rr, deadline, err);
			if (st)
				dt_err_prefix(err, "ring handshake");
		}
		if (st)
			break;
		for (nfds_t i = first; i < n && !st; i++) {
			struct pending *p = polled[i];
			/* A slot closed earlier in this round (over the budget) may have been reused: skip it. */
			if (!pfd[i].revents || p->fd != pfd[i].fd)
				continue;
			int ready = 0;
			struct dt_err e = DT_ERR_INIT;
			if (dt_frame_recv_fd_some(p->fd, &p->dec, p->addr, &ready, &e) != DT_OK) {
				drop(p, e.msg);
				continue;
			}
			if (!ready)
				continue;
			if (p->stage < 2) {
				(void)auth_step(&a, p, deadline);
				continue;
			}
			if (p->sec.mode && dt_frame_open_fd(&p->dec, &p->sec, p->addr, &e) != DT_OK) {
				drop(p, e.msg);
				continue;
			}
			int q = -1;
			st = judge(&a, p, deadline, &q, err);
			if (!st && q >= 0) {
				comm->in[q].fd = p->fd;
				comm->in[q].sec = p->sec; /* the link's keys, for every later frame (ring.c) */
				p->fd = -1; /* handed over, not closed */
				a.bytes -= p->bytes;
				p->bytes = 0;
				dt_frame_decoder_release(&p->dec);
				sodium_memzero(&p->sec, sizeof(p->sec));
				a.npending--;
				a.missing--;
			}
		}
		if (st)
			break;
		if (a.missing && pfd[0].revents && (st = accept_some(&a, lfd, deadline, err)) != DT_OK)
			break;
	}
	for (size_t i = 0; i < DT_NET_PENDING_MAX; i++)
		if (a.slots[i].fd >= 0)
			drop(&a.slots[i], NULL);
	free(a.slots);
	free(pfd);
	free(polled);
	return st;
}
