/*
 * comm_cma.c — same-host ring links: agreeing, once per link while the ring
 * is set up, whether the receiver may read the sender's memory with
 * process_vm_readv ("cross-memory attach", Open MPI's single-copy path), and
 * the read itself.
 *
 * A receiver reads a neighbour's memory only if all of these hold:
 *   - both run on the same kernel (the same boot id) in the same pid
 *     namespace, so the pid it was given names that neighbour;
 *   - the kernel lets it: with Yama's ptrace_scope 1 the sender names its
 *     reader with prctl(PR_SET_PTRACER, reader pid) — that one process, not
 *     any — and with scope 2 or 3 nothing is read;
 *   - it reads back the 16 random bytes the sender put at the address it
 *     sent. That proves the pid and address are that process's, whatever the
 *     namespaces look like.
 * Anything else leaves the link on TCP; either way the collectives work the
 * same and give the same bits.
 *
 * The exchange, on every rank (each step waits only for a step its
 * neighbour took before, so it cannot deadlock):
 *   1. COLL_PEER to the left: "I am your reader" (pid, namespace, boot id);
 *   2. COLL_PEER from the right (its reader); allow it if same host and
 *      namespace; COLL_PEER to the right: the offer, with the token address;
 *   3. COLL_PEER from the left (its offer); probe; COLL_PEER_OK to the left
 *      with 0 or the errno that ruled it out;
 *   4. COLL_PEER_OK from the right: may we send COLL_REFs?
 */
#include "distribute/comm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "net/bytes.h"
#include "net/handshake.h"

/* Yama's ptrace_scope: -1 without Yama (plain ptrace rules), else 0..3. */
static int ptrace_scope(void)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
	if (!f)
		return -1;
	int v = -1;
	if (fscanf(f, "%d", &v) != 1)
		v = 3; /* unreadable: assume the strictest */
	fclose(f);
	return v;
}

/* The boot id "8f2c...-..." as 16 bytes; 0 if it cannot be read. */
static int read_boot_id(uint8_t out[16])
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (!f)
		return 0;
	char text[64] = "";
	int ok = fgets(text, sizeof(text), f) != NULL;
	fclose(f);
	int n = 0;
	for (const char *p = text; ok && *p && *p != '\n' && n < 32; p++) {
		if (*p == '-')
			continue;
		int v = (*p >= '0' && *p <= '9') ? *p - '0' : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10 : -1;
		if (v < 0)
			return 0;
		out[n / 2] = (uint8_t)(n % 2 ? out[n / 2] | v : v << 4);
		n++;
	}
	return ok && n == 32;
}

int dt__comm_describe_self(struct dt_coll_peer *me)
{
	memset(me, 0, sizeof(*me));
	struct stat st;
	if (stat("/proc/self/ns/pid", &st) != 0 || !read_boot_id(me->boot_id))
		return 0;
	me->pid = (uint32_t)getpid();
	me->pid_ns = (uint64_t)st.st_ino;
	return 1;
}

/* Who this process is, for its neighbours; pid 0 if it cannot be read. */
static void describe_self(struct dt_comm *comm, int enabled, int scope, struct dt_coll_peer *me)
{
	memset(me, 0, sizeof(*me));
	if (!enabled || scope >= 2 || !dt__comm_describe_self(me) ||
	    getrandom(comm->cma_token, sizeof(comm->cma_token), 0) != (ssize_t)sizeof(comm->cma_token))
		memset(me, 0, sizeof(*me));
}

int dt__comm_same_host(const struct dt_coll_peer *a, const struct dt_coll_peer *b)
{
	return a->pid && b->pid && a->pid_ns == b->pid_ns && memcmp(a->boot_id, b->boot_id, 16) == 0;
}

enum dt_status dt__cma_read(pid_t pid, void *dst, uint64_t src, size_t len, int *err_no)
{
	size_t done = 0;
	while (done < len) {
		struct iovec local = { (uint8_t *)dst + done, len - done };
		struct iovec remote = { (void *)(uintptr_t)(src + done), len - done };
		ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*err_no = n < 0 ? errno : EFAULT;
			return DT_PEER;
		}
		done += (size_t)n;
	}
	return DT_OK;
}

enum dt_status dt__comm_send_setup(int fd, struct dt_wire_sec *sec, uint16_t type, const void *payload, size_t len,
				int64_t deadline, const char *peer, struct dt_err *err)
{
	enum dt_status st;
	if (sec) {
		uint8_t copy[DT_COLL_PEER_BYTES]; /* sealing encrypts in place */
		memcpy(copy, payload, len);
		st = dt_frame_send_fd_sealed(fd, sec, type, 0, copy, len, deadline, peer, err);
	} else {
		st = dt_frame_send_fd(fd, type, 0, 0, payload, len, deadline, peer, err);
	}
	return st ? dt_err_prefix(err, "ring setup") : DT_OK;
}

enum dt_status dt__comm_recv_setup(int fd, struct dt_wire_sec *sec, uint16_t type, uint8_t *payload, size_t want,
				int64_t deadline, const char *peer, struct dt_err *err)
{
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_HANDSHAKE);
	if (sec)
		d.trailer = DT_AUTH_TAG_BYTES;
	enum dt_status st = dt_frame_recv_fd(fd, &d, deadline, peer, err);
	if (!st && sec)
		st = dt_frame_open_fd(&d, sec, peer, err);
	if (st) {
		dt_err_prefix(err, "ring setup");
	} else if (d.header.type != type || d.header.length != want) {
		st = dt_err_set(err, DT_PROTOCOL, "ring setup: %s sent %s of %llu bytes, expected %s of %zu", peer,
				dt_msg_name(d.header.type), (unsigned long long)d.header.length, dt_msg_name(type), want);
	} else {
		memcpy(payload, dt_frame_decoder_payload(&d), want);
	}
	dt_frame_decoder_release(&d);
	return st;
}

/* Step 3's probe: 0 if `offer`'s token reads back, else why not. */
static int probe(const struct dt_coll_peer *me, const struct dt_coll_peer *offer)
{
	if (!me->pid || !offer->pid)
		return ENOTSUP;
	if (!dt__comm_same_host(me, offer))
		return EXDEV;
	uint8_t got[DT_COLL_TOKEN_BYTES];
	int e = 0;
	if (dt__cma_read((pid_t)offer->pid, got, offer->token_address, sizeof(got), &e))
		return e;
	return memcmp(got, offer->token, sizeof(got)) == 0 ? 0 : EFAULT;
}

enum dt_status dt__comm_negotiate_cma(struct dt_comm *comm, int enabled, int64_t deadline, struct dt_err *err)
{
	const char *left = comm->labels[(comm->rank - 1 + comm->n) % comm->n];
	const char *right = comm->labels[(comm->rank + 1) % comm->n];
	struct dt_coll_peer me, other;
	uint8_t buf[DT_COLL_PEER_BYTES];
	const int scope = ptrace_scope();
	describe_self(comm, enabled, scope, &me);
	struct dt_wire_sec *lsec = comm->tagged ? &comm->L->sec : NULL;
	struct dt_wire_sec *rsec = comm->tagged ? &comm->R->sec : NULL;

	/* 1. to the left: its reader */
	dt_coll_peer_encode(&me, buf);
	enum dt_status st = dt__comm_send_setup(comm->L->fd, lsec, DT_MSG_COLL_PEER, buf, sizeof(buf), deadline, left, err);
	/* 2. from the right: our reader; let it read us, and make the offer */
	if (!st)
		st = dt__comm_recv_setup(comm->R->fd, rsec, DT_MSG_COLL_PEER, buf, sizeof(buf), deadline, right, err);
	if (!st && (st = dt_coll_peer_decode(&other, buf, sizeof(buf), err)))
		dt_err_prefix(err, "ring setup: from %s", right);
	if (st)
		return st;
	struct dt_coll_peer offer = me;
	if (!dt__comm_same_host(&me, &other) ||
	    (scope == 1 && prctl(PR_SET_PTRACER, (unsigned long)other.pid, 0, 0, 0) != 0))
		offer.pid = 0;
	offer.token_address = (uint64_t)(uintptr_t)comm->cma_token;
	memcpy(offer.token, comm->cma_token, sizeof(offer.token));
	dt_coll_peer_encode(&offer, buf);
	if ((st = dt__comm_send_setup(comm->R->fd, rsec, DT_MSG_COLL_PEER, buf, sizeof(buf), deadline, right, err)))
		return st;
	/* 3. from the left: its offer; probe it and answer */
	if ((st = dt__comm_recv_setup(comm->L->fd, lsec, DT_MSG_COLL_PEER, buf, sizeof(buf), deadline, left, err)))
		return st;
	if ((st = dt_coll_peer_decode(&other, buf, sizeof(buf), err)))
		return dt_err_prefix(err, "ring setup: from %s", left);
	int why = probe(&me, &other);
	comm->cma_left_pid = why ? 0 : (int)other.pid;
	uint8_t answer[DT_COLL_PEER_OK_BYTES];
	dt_put_u32le(answer, (uint32_t)why);
	if ((st = dt__comm_send_setup(comm->L->fd, lsec, DT_MSG_COLL_PEER_OK, answer, sizeof(answer), deadline, left, err)))
		return st;
	/* 4. from the right: may we send references? */
	if ((st = dt__comm_recv_setup(comm->R->fd, rsec, DT_MSG_COLL_PEER_OK, answer, sizeof(answer), deadline, right, err)))
		return st;
	uint32_t right_why = dt_get_u32le(answer);
	comm->cma_send = right_why == 0;
	if (comm->cma_left_pid) {
		comm->cma_stage_cap = 256u << 10; /* a piece that stays in L2 while it is added */
		comm->cma_stage = dt_xmalloc(comm->cma_stage_cap);
	}
	dt_debug("ring link from %s: %s%s; to %s: %s%s", left, why ? "over TCP: " : "read from its memory",
		 why ? strerror(why) : "", right, right_why ? "over TCP: " : "it reads ours",
		 right_why ? strerror((int)right_why) : "");
	return DT_OK;
}
