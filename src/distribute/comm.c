/*
 * comm.c — the rendezvous and the communicator's lifetime.
 *
 * Links: rank r is linked, both ways, with every rank at distance 2^k
 * (mod n, either way round) for 2^k < n: its ring neighbours (distance 1)
 * and the partners of recursive doubling, recursive halving, the binomial
 * tree and the dissemination barrier (coll_algo.c), about 2 log2(n) peers.
 * Each direction is its own connection, opened by the sender.
 *
 * Every rank, in this order (no step waits on a peer that could be waiting
 * on us, so ranks may start in any order):
 *   1. listen on its own address (or take the caller's listening socket);
 *   2. connect to every linked peer, retrying with backoff until the
 *      deadline, and send its HELLO there (it fits in the socket buffer);
 *   3. accept every linked peer: read its HELLO, check fingerprint, model
 *      signature and that it is one of the linked peers, answer HELLO_OK or
 *      REFUSE; connections from anyone else are refused and accepting goes
 *      on, and all pending connections are judged at once, each within its
 *      own deadline, so a silent or slow stranger holds up nobody
 *      (comm_admit.c);
 *   4. read every linked peer's answer;
 *   5. agree per ring link whether the receiver reads the sender's memory
 *      directly (comm_cma.c);
 *   6. agree per link whether its frames go through shared memory
 *      (comm_shm.c);
 *   7. an all-reduce (#0, "dtrain/rendezvous") of how many ring links are
 *      not same-host reads, how many links not shared memory and how many
 *      ranks have a link to another host, so that every rank's cost model
 *      sees the same link kind (its alpha and beta) and dt_comm_new
 *      returns only once every rank is connected.
 */
#include "distribute/comm_internal.h"

#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/strutil.h"
#include "net/conn.h"
#include "net/handshake.h"

static const char *peer_role(const struct dt_comm_peer *p)
{
	return p->role && p->role[0] ? p->role : "worker";
}

static void task_name(const struct dt_comm_config *cfg, int rank, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s:%u", peer_role(&cfg->peers[rank]), cfg->peers[rank].index);
}

int dt_comm_size(const struct dt_comm *comm) { return comm->n; }
int dt_comm_rank(const struct dt_comm *comm) { return comm->rank; }
uint64_t dt_comm_next_seq(const struct dt_comm *comm) { return comm->seq; }
int dt_comm_reads_left_memory(const struct dt_comm *comm) { return comm->cma_left_pid != 0; }
int dt_comm_shared_memory_links(const struct dt_comm *comm)
{
	int k = 0;
	for (int q = 0; q < comm->n; q++)
		k += comm->out[q].shm != NULL && comm->in[q].shm != NULL;
	return k;
}

int dt_comm_lost_rank(const struct dt_comm *comm, const char **why)
{
	if (why)
		*why = comm->lost >= 0 ? comm->lost_why : "";
	return comm->broken ? comm->lost : -1;
}

/* 1 when the peer's end of fd is closed (its FIN read: POLLRDHUP) or reset. */
static int peer_closed(int fd)
{
	struct pollfd p = { fd, POLLRDHUP, 0 };
	return fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

void dt_comm_closed_ranks(const struct dt_comm *comm, int *closed, int n)
{
	for (int q = 0; q < n; q++)
		closed[q] = q < comm->n && q != comm->rank && (peer_closed(comm->in[q].fd) || peer_closed(comm->out[q].fd));
}

const char *dt_comm_peer_label(const struct dt_comm *comm, int rank)
{
	if (rank < 0 || rank >= comm->n)
		return "?";
	return comm->labels[rank];
}

int dt__comm_linked(int n, int a, int b)
{
	if (a == b || n < 2)
		return 0;
	int d = ((b - a) % n + n) % n;
	for (int k = 1; k < n; k *= 2)
		if (d == k || d == n - k)
			return 1;
	return 0;
}

void dt__comm_use_ring(struct dt_comm *c)
{
	c->lrank = (c->rank - 1 + c->n) % c->n;
	c->rrank = (c->rank + 1) % c->n;
	c->L = &c->in[c->lrank];
	c->R = &c->out[c->rrank];
}

void dt_comm_free(struct dt_comm *comm)
{
	if (!comm)
		return;
	dt__comm_shm_free(comm); /* closes the rings first: a peer still reading sees their end */
	for (int q = 0; q < comm->n && comm->in; q++) {
		dt_sock_close(comm->in[q].fd);
		dt_sock_close(comm->out[q].fd);
		free(comm->in[q].stage);
		sodium_memzero(&comm->in[q].sec, sizeof(comm->in[q].sec));
		sodium_memzero(&comm->out[q].sec, sizeof(comm->out[q].sec));
	}
	free(comm->in);
	free(comm->out);
	free(comm->used);
	free(comm->labels);
	free(comm->scratch);
	free(comm->cma_stage);
	free(comm->send_items);
	free(comm->recv_items);
	free(comm->sealed);
	free(comm->txbuf);
	free(comm);
}

static enum dt_status send_hello(int fd, uint16_t type, uint32_t flags, const struct dt_hello *h, int64_t deadline,
				 const char *peer, struct dt_err *err)
{
	size_t len;
	uint8_t *buf = dt_hello_encode_alloc(h, &len);
	enum dt_status st = dt_frame_send_fd(fd, type, flags, 0, buf, len, deadline, peer, err);
	free(buf);
	return st;
}

static enum dt_status answer_right(struct dt_comm *comm, const struct dt_comm_config *cfg, const struct dt_hello *local,
				   struct dt__ring_right *rr, int64_t deadline, struct dt_err *err)
{
	int right = rr->peer;
	const char *peer = comm->labels[right];
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_HANDSHAKE);
	if (local->auth)
		d.trailer = DT_AUTH_TAG_BYTES; /* the answer to an authenticated hello is tagged */
	enum dt_status st = dt_frame_recv_fd(comm->out[right].fd, &d, deadline, peer, err);
	if (!st && local->auth)
		st = dt_frame_open_fd(&d, &rr->sec, peer, err);
	if (st) {
		dt_frame_decoder_release(&d);
		return dt_err_prefix(err, "ring handshake");
	}
	const uint8_t *payload = dt_frame_decoder_payload(&d);
	size_t len = (size_t)d.header.length;
	char reason[DT_REASON_MAX];
	if (d.header.type == DT_MSG_HELLO_OK) {
		struct dt_hello remote;
		st = dt_hello_decode(&remote, payload, len, err);
		if (st)
			dt_err_prefix(err, "ring handshake with %s", peer);
		else if (dt_handshake_check(local, &remote, reason, sizeof(reason)))
			st = dt_err_set(err, DT_CONFIG, "ring handshake with %s: %s", peer, reason);
		else if (strcmp(remote.role, peer_role(&cfg->peers[right])) != 0 || remote.index != cfg->peers[right].index)
			st = dt_err_set(err, DT_CONFIG,
					"ring handshake with %s: the task there is %s:%u (are the addresses right?)", peer,
					remote.role, remote.index);
		dt_hello_release(&remote);
	} else if (d.header.type == DT_MSG_REFUSE || d.header.type == DT_MSG_ERROR) {
		struct dt_reason_msg r;
		st = dt_reason_decode(&r, payload, len, err);
		if (st)
			dt_err_prefix(err, "ring handshake with %s: bad %s", peer, dt_msg_name(d.header.type));
		else
			st = dt_err_set(err, DT_CONFIG, "%s refused the ring connection: %s", peer, r.text);
	} else {
		st = dt_err_set(err, DT_PROTOCOL, "ring handshake with %s: expected hello_ok or refuse, got %s", peer,
				dt_msg_name(d.header.type));
	}
	dt_frame_decoder_release(&d);
	return st;
}

static enum dt_status check_config(const struct dt_comm_config *cfg, struct dt_err *err)
{
	if (!cfg || cfg->nranks < 1 || cfg->nranks > 65536)
		return dt_err_set(err, DT_CONFIG, "a ring needs 1 to 65536 ranks, not %d", cfg ? cfg->nranks : 0);
	if (cfg->rank < 0 || cfg->rank >= cfg->nranks)
		return dt_err_set(err, DT_CONFIG, "rank %d is outside the ring of %d ranks", cfg->rank, cfg->nranks);
	if (!cfg->peers)
		return dt_err_set(err, DT_CONFIG, "the ring of %d ranks has no peer list", cfg->nranks);
	for (int i = 0; i < cfg->nranks; i++)
		if (!cfg->peers[i].addr || !cfg->peers[i].addr[0])
			return dt_err_set(err, DT_CONFIG, "ring rank %d has no address", i);
	if (cfg->hello && (strcmp(cfg->hello->role, peer_role(&cfg->peers[cfg->rank])) != 0 ||
			   cfg->hello->index != cfg->peers[cfg->rank].index))
		return dt_err_set(err, DT_CONFIG, "this task is %s:%u but ring rank %d is %s:%u", cfg->hello->role,
				  cfg->hello->index, cfg->rank, peer_role(&cfg->peers[cfg->rank]),
				  cfg->peers[cfg->rank].index);
	return DT_OK;
}

static enum dt_status rendezvous(struct dt_comm *comm, const struct dt_comm_config *cfg, const struct dt_hello *local,
				 int lfd, int64_t deadline, struct dt_err *err)
{
	int64_t start = dt_now_ns();
	struct dt__ring_right *rights = dt_xcalloc((size_t)comm->n, sizeof(*rights));
	int nr = 0;
	enum dt_status st = DT_OK;
	/* 2. connect to every linked peer, the right neighbour first */
	for (int k = 1; k < comm->n && !st; k++) {
		int q = (cfg->rank + k) % comm->n;
		if (!dt__comm_linked(comm->n, cfg->rank, q))
			continue;
		char host[DT_HOST_MAX], task[48];
		int port;
		st = dt_sock_split_hostport(cfg->peers[q].addr, host, sizeof(host), &port, err);
		if (st) {
			dt_err_prefix(err, "ring rank %d", q);
			break;
		}
		task_name(cfg, q, task, sizeof(task));
		struct dt_connect_opts opts = { .congestion = comm->tcp_cc };
		st = dt_sock_connect(host, port, task, deadline, &opts, &comm->out[q].fd, err);
		if (st)
			break;
		struct dt__ring_right *rr = &rights[nr++];
		*rr = (struct dt__ring_right){ .peer = q, .label = comm->labels[q], .role = peer_role(&cfg->peers[q]),
					       .index = cfg->peers[q].index };
		dt_frame_decoder_init(&rr->dec, DT_MSG_CAP_SMALL);
		if (local->auth) {
			/* The HELLO follows the peer's challenge, read while accepting the others. */
			uint8_t buf[DT_AUTH_MSG_MAX];
			size_t len = dt_auth_client_hello(&rr->hs, local, buf);
			st = dt_frame_send_fd(comm->out[q].fd, DT_MSG_AUTH_HELLO, 0, 0, buf, len, deadline, rr->label, err);
			rr->active = 1;
		} else {
			st = send_hello(comm->out[q].fd, DT_MSG_HELLO, 0, local, deadline, comm->labels[q], err);
		}
		if (st)
			dt_err_prefix(err, "ring handshake");
	}
	/* 3. accept every linked peer (and prove ourselves to those we connected to) */
	if (!st)
		st = dt__comm_accept_links(comm, cfg, local, lfd, rights, nr, start, deadline, err);
	/* 4. their answers */
	for (int i = 0; i < nr && !st; i++) {
		st = answer_right(comm, cfg, local, &rights[i], deadline, err);
		if (!st && local->auth)
			comm->out[rights[i].peer].sec = rights[i].sec; /* every later frame is sealed with these */
	}
	if (!st && local->auth)
		comm->tagged = 1;
	for (int i = 0; i < nr; i++) {
		dt_frame_decoder_release(&rights[i].dec);
		sodium_memzero(&rights[i], sizeof(rights[i]));
	}
	free(rights);
	return st;
}

/* Same-host reads unless the config or DTRAIN_COLLECTIVE_CMA=0 says no. */
static int cma_wanted(const struct dt_comm_config *cfg)
{
	const char *env = getenv("DTRAIN_COLLECTIVE_CMA");
	return !cfg->no_cma && !(env && strcmp(env, "0") == 0);
}

/* Shared-memory links unless the config or DTRAIN_COLLECTIVE_SHM=0 says no. */
static int shm_wanted(const struct dt_comm_config *cfg)
{
	const char *env = getenv("DTRAIN_COLLECTIVE_SHM");
	return !cfg->no_shm && !(env && strcmp(env, "0") == 0);
}

enum dt_status dt_comm_new(const struct dt_comm_config *cfg, int64_t deadline, struct dt_comm **out,
			   struct dt_err *err)
{
	*out = NULL;
	int lfd = cfg && cfg->listen_fd_set ? cfg->listen_fd : -1;
	enum dt_status st = check_config(cfg, err);
	if (st) {
		dt_sock_close(lfd);
		return st;
	}
	struct dt_comm *comm = dt_xcalloc(1, sizeof(*comm));
	comm->n = cfg->nranks;
	comm->rank = cfg->rank;
	comm->lost = -1;
	comm->in = dt_xcalloc((size_t)comm->n, sizeof(*comm->in));
	comm->out = dt_xcalloc((size_t)comm->n, sizeof(*comm->out));
	comm->used = dt_xcalloc(2, (size_t)comm->n);
	comm->seg_bytes = cfg->segment_bytes ? cfg->segment_bytes & ~(size_t)3 : DT_COMM_SEGMENT_BYTES;
	comm->seg_given = cfg->segment_bytes != 0;
	if (comm->seg_bytes < 4)
		comm->seg_bytes = 4;
	if (comm->seg_bytes > DT_COMM_SEGMENT_MAX)
		comm->seg_bytes = DT_COMM_SEGMENT_MAX;
	comm->algorithm = cfg->algorithm;
	comm->spin_us = cfg->spin_us;
	comm->shm_spin_ns = cfg->spin_us ? (int64_t)cfg->spin_us * 1000 : 0; /* 0: adaptive */
	comm->cma_min_bytes = cfg->cma_min_bytes ? cfg->cma_min_bytes : DT_COMM_CMA_MIN_BYTES;
	comm->labels = dt_xmallocarray((size_t)comm->n, sizeof(*comm->labels));
	for (int i = 0; i < comm->n; i++)
		dt_fmt(comm->labels[i], sizeof(comm->labels[i]), "%s:%u at %s", peer_role(&cfg->peers[i]),
			 cfg->peers[i].index, cfg->peers[i].addr);
	for (int q = 0; q < comm->n; q++) {
		comm->in[q].fd = comm->out[q].fd = -1;
		comm->in[q].last_seq = UINT64_MAX;
	}
	dt__comm_set_segment(comm, comm->seg_bytes);
	dt__comm_use_ring(comm);
	dt__comm_costs_compiled(comm); /* until the rendezvous agrees them */
	st = dt__comm_costs_config(comm, cfg, err);
	if (!st)
		st = dt_tcp_cc_choose(cfg->tcp_congestion, "the comm config's tcp_congestion", comm->tcp_cc, err);
	if (st) {
		dt_sock_close(lfd);
		dt_comm_free(comm);
		return st;
	}
	if (comm->n == 1) {
		dt_sock_close(lfd);
		*out = comm;
		return DT_OK;
	}

	struct dt_hello own;
	const struct dt_hello *local = cfg->hello;
	if (!local) {
		dt_hello_init(&own, peer_role(&cfg->peers[cfg->rank]), cfg->peers[cfg->rank].index, 0);
		local = &own;
	}
	if (lfd < 0) {
		char host[DT_HOST_MAX];
		int port;
		st = dt_sock_split_hostport(cfg->peers[cfg->rank].addr, host, sizeof(host), &port, err);
		if (!st)
			st = dt_sock_listen(host, port, 64, &lfd, NULL, err);
		if (st)
			dt_err_prefix(err, "ring rank %d (%s)", cfg->rank, comm->labels[cfg->rank]);
	}
	if (!st)
		st = rendezvous(comm, cfg, local, lfd, deadline, err);
	dt_sock_close(lfd);
	if (!cfg->hello)
		dt_hello_release(&own);
	if (!st && comm->tagged && comm->R->sec.mode == DT_WIRE_ENCRYPT)
		dt__comm_set_segment(comm, comm->seg_bytes); /* now with the ciphertext window */
	if (!st)
		st = dt__comm_negotiate_cma(comm, cma_wanted(cfg), deadline, err);
	if (!st)
		st = dt__comm_negotiate_shm(comm, shm_wanted(cfg), deadline, err);
	if (!st) {
		comm->seq = 0;
		st = dt__comm_rendezvous_sum(comm, deadline, err);
	}
	if (!st)
		dt__shm_count_ranks_here(comm);
	if (st) {
		dt_comm_free(comm);
		return st;
	}
	*out = comm;
	return DT_OK;
}

const char *dt_comm_tcp_congestion(const struct dt_comm *comm)
{
	return comm->tcp_cc;
}

void dt__comm_set_segment(struct dt_comm *comm, size_t seg)
{
	DT_ASSERT(seg >= 4 && seg <= DT_COMM_SEGMENT_MAX && seg % 4 == 0);
	comm->seg_bytes = seg;
	/* A stage holds a whole frame of a tagged ring (its tag is checked before any byte is
	 * used), a START and a control frame besides; bytes already in it (the next
	 * collective's, from a faster neighbour) stay where they are. */
	const size_t stage = (seg < (64u << 10) ? 64u << 10 : seg) + 2 * DT_FRAME_HEADER_SIZE + DT_COLL_START_FIXED +
			     DT_COLL_NAME_WIRE_MAX + 4096;
	for (int q = 0; q < comm->n; q++) {
		if (!dt__comm_linked(comm->n, comm->rank, q) || comm->in[q].stage_cap >= stage)
			continue;
		comm->in[q].stage = dt_xrealloc(comm->in[q].stage, stage);
		comm->in[q].stage_cap = stage;
	}
	/* Encrypt mode: the ciphertext of the DATA frames sealed ahead (ring.c), two of the
	 * largest. Called between collectives, when nothing sealed is unsent. */
	if (comm->tagged && comm->R && comm->R->sec.mode == DT_WIRE_ENCRYPT && comm->txbuf_cap < 2 * stage) {
		free(comm->txbuf);
		comm->txbuf_cap = 2 * stage;
		comm->txbuf = dt_xmalloc(comm->txbuf_cap);
	}
}

enum dt_status dt_comm_listen_loopback(int n, int *fds, char (*addrs)[DT_COMM_ADDR_MAX], struct dt_err *err)
{
	for (int i = 0; i < n; i++) {
		int port = 0;
		enum dt_status st = dt_sock_listen("127.0.0.1", 0, 64, &fds[i], &port, err);
		if (st) {
			for (int j = 0; j < i; j++) {
				dt_sock_close(fds[j]);
				fds[j] = -1;
			}
			return st;
		}
		snprintf(addrs[i], DT_COMM_ADDR_MAX, "127.0.0.1:%d", port);
	}
	return DT_OK;
}
