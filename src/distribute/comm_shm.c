/*
 * comm_shm.c — shared-memory links between ranks on one host: the bytes a
 * link would carry over loopback TCP (every collective frame: COLL_START,
 * COLL_DATA, COLL_REF, COLL_STALL, COLL_ABORT, with their tags on a tagged
 * ring) go through a ring buffer in a shared mapping instead, so a small
 * all-reduce costs two memcpy and, at most, one futex wake per hop rather
 * than a sendmsg, a recv and the wake-up out of poll().
 *
 * Regions. Every rank makes one memfd ("dtrain-coll": no name in /dev/shm or
 * anywhere else, so nothing is left behind by any exit, kill -9 included:
 * the memory goes with the last process that maps it). It holds a head (a
 * random token, the rank's doorbell: a futex word its peers bump) and one
 * ring per linked peer q, written only by q and read only by its owner:
 *   [0, 4096)                      struct dt__shm_head
 *   [4096 + k * SLOT, ... + SLOT)  the ring of the k-th linked peer in rank
 *                                  order: head, tail, closed (256 bytes), data
 * A writer copies into the ring in the reader's region and wakes the reader
 * if it sleeps; a reader copies out and wakes the writer if it sleeps (on a
 * full ring). Every rank sleeps on its own doorbell only, whichever of its
 * links it waits for.
 *
 * Agreeing (after comm_cma.c's exchange, on every link, over the link's own
 * connection, sealed on a tagged ring):
 *   1. COLL_SHM on every in link (back to the peer that opened it): pid, pid
 *      namespace, boot id, the memfd's number in that pid, the token (pid 0:
 *      no shared memory from us);
 *   2. COLL_SHM from every out link: open /proc/<pid>/fd/<n> (the ptrace
 *      read access CMA needs too, which Yama's scope 1 does not restrict:
 *      the same user, a dumpable process), check its size, map it, and find
 *      the token at its start;
 *   3. COLL_PEER_OK on every out link: 0, or the errno that ruled it out;
 *   4. COLL_PEER_OK from every in link. A pair of ranks uses shared memory
 *      only if both mapped the other's region (both directions, so each can
 *      wake the other); every memfd is closed then (the mappings keep it).
 * No step waits on a peer that could wait on us (steps 1 and 3 only send
 * small frames), so it cannot deadlock.
 *
 * What stays on the sockets: what goes back on an in link (COLL_DONE,
 * COLL_ABORT: the peer is poked through its doorbell to look) and the end
 * of the stream when a process dies. A sleeping rank wakes at least every
 * TCP_CHECK_NS to look at its sockets, so a peer killed with -9 (which
 * closes nothing in the ring) is noticed within that, and deadlines and
 * stall notices work as over TCP (the engine's loop is the same).
 */
#include "distribute/comm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "net/bytes.h"

#define HEAD_BYTES 4096u
/* Two pipeline segments and their headers in flight; a power of two. */
#define RING_BYTES (1u << 20)
#define RING_META 256u
#define SLOT_BYTES ((size_t)RING_META + RING_BYTES)
/* A sleeping rank looks at its sockets at least this often (a peer killed
 * with -9 closes its sockets, not its rings). */
#define TCP_CHECK_NS (DT_NSEC_PER_SEC / 500)
/* The shortest spin before sleeping (the adaptive budget's floor). */
#define SPIN_MIN_NS 1000
/* After the spin, how long to yield the core (sched_yield, looking at the
 * rings between yields) before sleeping on the futex. Measured with
 * 4 ranks on 2 vCPUs (docs/COLLECTIVES.md "Waiting"): 20-100 us all halve
 * the 4-64 KB all-reduces against none; a wait longer than this (a peer
 * computing) still sleeps. */
#define YIELD_NS 50000
/* A single yield that kept the core away longer than a peer's turn means
 * other jobs share the cores too (a loaded host): each yield then queues
 * behind all of them for their whole slices, while a sleeper woken by the
 * futex is scheduled promptly. So the next YIELD_BACKOFF waits go from the
 * spin straight to the futex, and then yielding is tried again.
 * A peer's turn is short (its spin, a copy and an add: under 250 us) unless
 * this host runs more of the comm's ranks than there are cores for them;
 * then a yield hands the core to one of them, whose turn may run through its
 * whole share of the collective before it waits (about 250 ps a byte of the
 * collective, 4 ranks on 2 vCPUs). There "longer" is that, at least 250 us
 * and at most 1 ms (another job's slice, EEVDF's 0.75 ms times 1 + log2 of
 * the CPUs, is still caught): a fixed 250 us took a 2-64 MB all-reduce's own
 * turns for other jobs, 10-20% slower; with a core per rank the scaled
 * threshold let yields behind other jobs' slices go on, 1.7x slower at 2
 * ranks and 4-16 MB beside two busy loops (docs/COLLECTIVES.md "Waiting"). */
#define YIELD_SLOW_MIN_NS 250000
#define YIELD_SLOW_MAX_NS 1000000
#define YIELD_SLOW_BYTES_PER_NS 4 /* 250 ps a byte */
#define YIELD_BACKOFF 64

struct dt__shm_head {
	uint8_t token[DT_COLL_TOKEN_BYTES];
	_Alignas(64) uint32_t bell; /* the futex word, bumped (__atomic) by whoever wakes the owner */
	_Atomic uint32_t sleeping;          /* the owner is in, or about to enter, FUTEX_WAIT */
	_Atomic uint32_t poke;              /* a peer sent something on a socket: look there */
};

struct dt__shm_ring {
	_Alignas(64) _Atomic uint64_t head; /* bytes written so far (the writer) */
	_Alignas(64) _Atomic uint64_t tail; /* bytes read so far (the reader) */
	_Alignas(64) _Atomic uint32_t closed; /* the writer will write no more */
};
_Static_assert(sizeof(struct dt__shm_ring) <= RING_META, "ring metadata fits before the data");
_Static_assert(sizeof(struct dt__shm_head) <= HEAD_BYTES, "region head fits its page");

static uint8_t *ring_data(struct dt__shm_ring *r)
{
	return (uint8_t *)r + RING_META;
}

/* Every rank has as many linked peers (the links are distances 2^k either
 * way round, the same from every rank), so every region has that many rings. */
static size_t region_bytes(int n)
{
	int links = 0;
	for (int q = 1; q < n; q++)
		links += dt__comm_linked(n, 0, q);
	return HEAD_BYTES + (size_t)links * SLOT_BYTES;
}

/* The ring `writer` writes in `owner`'s region: the writer's place among the
 * owner's linked peers in rank order. */
static struct dt__shm_ring *slot(void *region, int n, int owner, int writer)
{
	size_t k = 0;
	for (int q = 0; q < writer; q++)
		k += (size_t)dt__comm_linked(n, owner, q);
	return (struct dt__shm_ring *)((uint8_t *)region + HEAD_BYTES + k * SLOT_BYTES);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static void futex_wake(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* After publishing (a head, a tail, a closed flag or a poke): wakes the
 * owner of h if it sleeps. The fence pairs with the sleeper's store of
 * `sleeping` before it looks at the rings (Dekker): either it sees what we
 * published, or we see it sleeping. */
static void wake(struct dt__shm_head *h)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&h->sleeping, memory_order_relaxed)) {
		__atomic_fetch_add(&h->bell, 1, __ATOMIC_SEQ_CST);
		futex_wake(&h->bell);
	}
}

/* ---- the byte streams ---- */

ssize_t dt__link_recv(struct dt__in_link *in, void *dst, size_t cap)
{
	if (!in->shm)
		return recv(in->fd, dst, cap, MSG_DONTWAIT);
	struct dt__shm_ring *r = in->shm;
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	if (head == tail) {
		/* closed is stored after the last head: what head says after it is final */
		if (atomic_load_explicit(&r->closed, memory_order_acquire))
			head = atomic_load_explicit(&r->head, memory_order_acquire);
		if (head == tail) {
			if (in->tcp_eof || atomic_load_explicit(&r->closed, memory_order_acquire))
				return 0;
			errno = EAGAIN;
			return -1;
		}
	}
	size_t n = (size_t)(head - tail) < cap ? (size_t)(head - tail) : cap;
	size_t at = (size_t)(tail & (RING_BYTES - 1)), first = RING_BYTES - at < n ? RING_BYTES - at : n;
	memcpy(dst, ring_data(r) + at, first);
	memcpy((uint8_t *)dst + first, ring_data(r), n - first);
	atomic_store_explicit(&r->tail, tail + n, memory_order_release);
	wake(in->peer_head);
	return (ssize_t)n;
}

size_t dt__link_peek(struct dt__in_link *in, uint8_t **p)
{
	struct dt__shm_ring *r = in->shm;
	if (!r)
		return 0;
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	size_t at = (size_t)(tail & (RING_BYTES - 1)), n = (size_t)(head - tail);
	*p = ring_data(r) + at;
	return n < RING_BYTES - at ? n : RING_BYTES - at;
}

void dt__link_consume(struct dt__in_link *in, size_t n)
{
	struct dt__shm_ring *r = in->shm;
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	atomic_store_explicit(&r->tail, tail + n, memory_order_release);
	wake(in->peer_head);
}

ssize_t dt__link_sendv(struct dt__out_link *out, struct iovec *iov, int cnt)
{
	if (!out->shm) {
		struct msghdr m = { 0 };
		m.msg_iov = iov;
		m.msg_iovlen = (size_t)cnt;
		return sendmsg(out->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	struct dt__shm_ring *r = out->shm;
	if (atomic_load_explicit(&r->closed, memory_order_relaxed)) {
		errno = EPIPE;
		return -1;
	}
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	size_t room = RING_BYTES - (size_t)(head - tail), done = 0;
	if (room == 0) {
		errno = EAGAIN;
		return -1;
	}
	for (int i = 0; i < cnt && done < room; i++) {
		size_t len = iov[i].iov_len < room - done ? iov[i].iov_len : room - done;
		size_t at = (size_t)((head + done) & (RING_BYTES - 1));
		size_t first = RING_BYTES - at < len ? RING_BYTES - at : len;
		memcpy(ring_data(r) + at, iov[i].iov_base, first);
		memcpy(ring_data(r), (const uint8_t *)iov[i].iov_base + first, len - first);
		done += len;
	}
	atomic_store_explicit(&r->head, head + done, memory_order_release);
	wake(out->peer_head);
	return (ssize_t)done;
}

ssize_t dt__link_send_frame(struct dt__out_link *out, void *frame, size_t len)
{
	if (!out->shm)
		return send(out->fd, frame, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	struct dt__shm_ring *r = out->shm;
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	if (RING_BYTES - (size_t)(head - tail) < len) {
		errno = EAGAIN;
		return -1;
	}
	struct iovec iov = { frame, len };
	return dt__link_sendv(out, &iov, 1);
}

void dt__link_shut(struct dt__out_link *out)
{
	if (out->shm && !atomic_load_explicit(&out->shm->closed, memory_order_relaxed)) {
		atomic_store_explicit(&out->shm->closed, 1, memory_order_release);
		wake(out->peer_head);
	}
	if (out->fd >= 0)
		shutdown(out->fd, SHUT_WR);
}

void dt__link_poke_back(struct dt__in_link *in)
{
	if (!in->shm)
		return;
	atomic_store_explicit(&in->peer_head->poke, 1, memory_order_release);
	wake(in->peer_head);
}

/* ---- waiting ---- */

int64_t dt__shm_slow_yield_ns(size_t bytes, int ranks_here, int cpus)
{
	if (ranks_here <= cpus)
		return YIELD_SLOW_MIN_NS;
	int64_t turn = (int64_t)(bytes / YIELD_SLOW_BYTES_PER_NS);
	return turn < YIELD_SLOW_MIN_NS ? YIELD_SLOW_MIN_NS : turn > YIELD_SLOW_MAX_NS ? YIELD_SLOW_MAX_NS : turn;
}

void dt__shm_set_slow_yield(struct dt_comm *c, size_t bytes)
{
	c->shm_slow_yield_ns = dt__shm_slow_yield_ns(bytes, c->shm_ranks_here, c->cpus);
}

void dt__shm_count_ranks_here(struct dt_comm *c)
{
	c->shm_ranks_here = c->shm_all ? c->n : 1 + dt_comm_shared_memory_links(c);
	cpu_set_t set;
	c->cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (c->cpus < 1)
		c->cpus = 1;
}

/* Something for the step to do: bytes (or the end) from L while it still
 * wants some (bytes of the next collective are not for it), room on R when
 * it was full. */
static int ready(const struct dt_comm *c, int want_in, int blocked)
{
	if (want_in && c->L && c->L->shm) {
		struct dt__shm_ring *r = c->L->shm;
		if (atomic_load_explicit(&r->head, memory_order_acquire) != atomic_load_explicit(&r->tail, memory_order_relaxed) ||
		    atomic_load_explicit(&r->closed, memory_order_acquire))
			return 1;
	}
	if (blocked && c->R && c->R->shm) {
		struct dt__shm_ring *r = c->R->shm;
		if (atomic_load_explicit(&r->head, memory_order_relaxed) - atomic_load_explicit(&r->tail, memory_order_acquire) <
		    RING_BYTES)
			return 1;
	}
	return 0;
}

/* How long to spin before sleeping. A spin pays when the peer answers
 * within it (a hop on an idle host: a few microseconds, and the futex's
 * sleep and wake cost as much again); on a host with more runnable threads
 * than cores the answer takes a scheduler slice, and spinning only takes
 * the core the peer needs (measured: docs/COLLECTIVES.md). So spin about
 * twice the recent typical wait while that is short, else only briefly. */
static int64_t spin_budget(const struct dt_comm *c)
{
	if (c->shm_spin_ns)
		return c->shm_spin_ns;
	int64_t twice = 2 * c->shm_wait_avg;
	return twice <= DT_COMM_SHM_SPIN_NS ? (twice > SPIN_MIN_NS ? twice : SPIN_MIN_NS) : SPIN_MIN_NS;
}

/* The moving average of wait times (1/8 weight to the newest). */
static void note_wait(struct dt_comm *c, int64_t took)
{
	c->shm_wait_avg += (took - c->shm_wait_avg) / 8;
}

void dt__shm_wait(struct dt_comm *c, int want_in, int blocked, int64_t until_ns, int64_t *now, int *tcp_check)
{
	struct dt__shm_head *me = c->shm_self;
	const int64_t t0 = *now, spin_ns = spin_budget(c);
	/* Woken often for other rings, the sockets are still looked at in time. */
	*tcp_check = t0 - c->shm_checked >= TCP_CHECK_NS;
	if (*tcp_check)
		c->shm_checked = t0;
	/* The clock is read every 16 spins, not every spin (a read costs as
	 * much as a few dozen spins); the last reading goes back in *now. */
	for (unsigned i = 0;; i++) {
		if (ready(c, want_in, blocked)) {
			*now = dt_now_ns();
			note_wait(c, *now - t0);
			return;
		}
		if (atomic_exchange_explicit(&me->poke, 0, memory_order_acquire)) {
			*tcp_check = 1;
			return;
		}
		if ((i & 15) == 15 && (*now = dt_now_ns()) - t0 >= spin_ns)
			break;
		cpu_relax();
	}
	/* Then hand the core over: whoever else is runnable on it (on a host
	 * with more ranks than cores, often the very peer we wait for) runs at
	 * once, without the futex's wake-up on the way back. */
	if (c->shm_yield_skip)
		c->shm_yield_skip--;
	for (int64_t y0 = *now; !c->shm_yield_skip && y0 - t0 < YIELD_NS; y0 = *now) {
		sched_yield();
		*now = dt_now_ns();
		if (*now - y0 > c->shm_slow_yield_ns)
			c->shm_yield_skip = YIELD_BACKOFF; /* other jobs had the core: sleep rather than queue behind them */
		if (ready(c, want_in, blocked)) {
			note_wait(c, *now - t0);
			return;
		}
		if (atomic_exchange_explicit(&me->poke, 0, memory_order_acquire)) {
			*tcp_check = 1;
			return;
		}
	}
	uint32_t seq = __atomic_load_n(&me->bell, __ATOMIC_SEQ_CST);
	atomic_store(&me->sleeping, 1);
	if (!ready(c, want_in, blocked) && !atomic_load(&me->poke)) {
		int64_t left = until_ns - *now;
		if (left > TCP_CHECK_NS)
			left = TCP_CHECK_NS;
		if (left < 1000)
			left = 1000;
		struct timespec ts = { (time_t)(left / DT_NSEC_PER_SEC), (long)(left % DT_NSEC_PER_SEC) };
		if (syscall(SYS_futex, &me->bell, FUTEX_WAIT, seq, &ts, NULL, 0) != 0 && errno == ETIMEDOUT)
			*tcp_check = 1;
	}
	atomic_store(&me->sleeping, 0);
	*now = dt_now_ns();
	if (*tcp_check)
		c->shm_checked = *now;
	if (atomic_exchange_explicit(&me->poke, 0, memory_order_acquire))
		*tcp_check = 1;
	else if (!*tcp_check)
		note_wait(c, *now - t0); /* woken: a wait that took this long */
}

/* ---- agreeing ---- */

/* Our region and its memfd (returned; -1 if none could be made: no shared
 * memory from us, which is not an error). me's token fields describe it. */
static int create_region(struct dt_comm *c, struct dt_coll_peer *me)
{
	int fd = memfd_create("dtrain-coll", MFD_CLOEXEC);
	if (fd < 0) {
		dt_debug("no shared-memory links: memfd_create: %s", strerror(errno));
		return -1;
	}
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)c->shm_bytes) == 0)
		p = mmap(NULL, c->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	struct dt__shm_head *h = p;
	if (p == MAP_FAILED || getrandom(h->token, sizeof(h->token), 0) != (ssize_t)sizeof(h->token)) {
		dt_debug("no shared-memory links: cannot map a region of %zu bytes: %s", c->shm_bytes, strerror(errno));
		if (p != MAP_FAILED)
			munmap(p, c->shm_bytes);
		close(fd);
		return -1;
	}
	c->shm_self = h;
	me->token_address = (uint64_t)fd;
	memcpy(me->token, h->token, sizeof(me->token));
	return fd;
}

/* Step 2: maps q's region as its offer describes; 0 or why not. */
static int map_peer(struct dt_comm *c, int q, const struct dt_coll_peer *me, const struct dt_coll_peer *o)
{
	if (!me->pid || !o->pid)
		return ENOTSUP;
	if (!dt__comm_same_host(me, o))
		return EXDEV;
	if (o->token_address > 0x7fffffffu)
		return EBADF;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/fd/%u", o->pid, (unsigned)o->token_address);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno;
	struct stat st;
	void *p = MAP_FAILED;
	int why = 0;
	if (fstat(fd, &st) != 0 || (size_t)st.st_size != c->shm_bytes)
		why = EINVAL;
	else if ((p = mmap(NULL, c->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		why = errno;
	close(fd);
	if (why)
		return why;
	if (memcmp(((struct dt__shm_head *)p)->token, o->token, sizeof(o->token)) != 0) {
		munmap(p, c->shm_bytes);
		return EFAULT;
	}
	c->shm_peer[q] = p;
	return 0;
}

/* Allocates a ring's pages and maps them here now, not one page fault per
 * 4 KiB on each side during the first megabyte of collectives (on the
 * collective's critical path). MADV_POPULATE_WRITE faults pages in as
 * if written without writing, so it is safe while the peer already uses the
 * ring; kernels before 5.14 refuse it, and the faults then come as used. */
static void prefault(struct dt__shm_ring *r)
{
#ifdef MADV_POPULATE_WRITE
	(void)madvise(r, SLOT_BYTES, MADV_POPULATE_WRITE);
#else
	(void)r;
#endif
}

enum dt_status dt__comm_negotiate_shm(struct dt_comm *comm, int enabled, int64_t deadline, struct dt_err *err)
{
	const int n = comm->n;
	comm->shm_bytes = region_bytes(n);
	comm->shm_peer = dt_xcalloc((size_t)n, sizeof(*comm->shm_peer));
	struct dt_coll_peer me, other;
	int memfd = -1;
	if (!enabled || !dt__comm_describe_self(&me) || (memfd = create_region(comm, &me)) < 0)
		memset(&me, 0, sizeof(me));
	uint8_t buf[DT_COLL_PEER_BYTES], answer[DT_COLL_PEER_OK_BYTES];
	int *why = dt_xcalloc((size_t)n, sizeof(*why));
	int links = 0;
	enum dt_status st = DT_OK;
	/* 1. our offer to every peer that writes to us */
	dt_coll_peer_encode(&me, buf);
	for (int q = 0; q < n && !st; q++)
		if (comm->in[q].fd >= 0)
			st = dt__comm_send_setup(comm->in[q].fd, comm->tagged ? &comm->in[q].sec : NULL, DT_MSG_COLL_SHM,
						 buf, sizeof(buf), deadline, comm->labels[q], err);
	/* 2. every peer's offer: map its region */
	for (int q = 0; q < n && !st; q++) {
		if (comm->out[q].fd < 0)
			continue;
		st = dt__comm_recv_setup(comm->out[q].fd, comm->tagged ? &comm->out[q].sec : NULL, DT_MSG_COLL_SHM, buf,
					 sizeof(buf), deadline, comm->labels[q], err);
		if (!st && (st = dt_coll_peer_decode(&other, buf, sizeof(buf), err)))
			dt_err_prefix(err, "ring setup: from %s", comm->labels[q]);
		if (!st)
			why[q] = map_peer(comm, q, &me, &other);
	}
	/* 3. our answers */
	for (int q = 0; q < n && !st; q++) {
		if (comm->out[q].fd < 0)
			continue;
		dt_put_u32le(answer, (uint32_t)why[q]);
		st = dt__comm_send_setup(comm->out[q].fd, comm->tagged ? &comm->out[q].sec : NULL, DT_MSG_COLL_PEER_OK,
					 answer, sizeof(answer), deadline, comm->labels[q], err);
	}
	/* 4. theirs: a pair where both mapped the other's region uses it */
	for (int q = 0; q < n && !st; q++) {
		if (comm->in[q].fd < 0)
			continue;
		st = dt__comm_recv_setup(comm->in[q].fd, comm->tagged ? &comm->in[q].sec : NULL, DT_MSG_COLL_PEER_OK,
					 answer, sizeof(answer), deadline, comm->labels[q], err);
		if (st)
			break;
		uint32_t theirs = dt_get_u32le(answer);
		if (why[q] == 0 && theirs == 0) {
			comm->out[q].shm = slot(comm->shm_peer[q], n, q, comm->rank);
			comm->out[q].peer_head = comm->shm_peer[q];
			comm->in[q].shm = slot(comm->shm_self, n, comm->rank, q);
			comm->in[q].peer_head = comm->shm_peer[q];
			prefault(comm->out[q].shm);
			prefault(comm->in[q].shm);
			links++;
		} else if (comm->shm_peer[q]) {
			munmap(comm->shm_peer[q], comm->shm_bytes);
			comm->shm_peer[q] = NULL;
		}
		dt_debug("link with %s: %s%s", comm->labels[q], why[q] || theirs ? "over TCP: " : "shared memory",
			 why[q] ? strerror(why[q]) : theirs ? strerror((int)theirs) : "");
	}
	free(why);
	if (memfd >= 0)
		close(memfd); /* the mappings keep the memory; nothing has a name */
	if (!st && !links && comm->shm_self) {
		munmap(comm->shm_self, comm->shm_bytes);
		comm->shm_self = NULL;
	}
	return st;
}

void dt__comm_shm_free(struct dt_comm *comm)
{
	if (!comm->shm_peer)
		return;
	for (int q = 0; q < comm->n; q++) {
		if (comm->out[q].shm)
			dt__link_shut(&comm->out[q]);
		comm->out[q].shm = NULL;
		comm->in[q].shm = NULL;
		if (comm->shm_peer[q])
			munmap(comm->shm_peer[q], comm->shm_bytes);
	}
	if (comm->shm_self)
		munmap(comm->shm_self, comm->shm_bytes);
	comm->shm_self = NULL;
	free(comm->shm_peer);
	comm->shm_peer = NULL;
}
