/*
 * collective.h — ring all-reduce, broadcast and barrier between the ranks of
 * a multi-worker mirrored job, over TCP sockets, reading same-host neighbours'
 * memory directly for large segments (docs/COLLECTIVES.md).
 *
 * The split follows gloo's: comm.c is the rendezvous (every rank listens on
 * its address, connects to its right neighbour with backoff until a deadline,
 * accepts its left neighbour, both sides check the HELLO: cluster
 * fingerprint, role:index, model signature), ring_plan.c the algorithms
 * (which segment goes where, after what), ring.c the progress engine that
 * runs them, ring_wire.c the collective frames (docs/PROTOCOL.md §3.7).
 *
 * Topology: rank r is linked both ways with every rank at distance 2^k
 * (mod n) — the ring neighbours among them — one connection per direction,
 * opened by the sender. Which algorithm runs a collective is chosen per call
 * by a cost model (coll_algo.c, dt_comm_choose), the same on every rank:
 * recursive doubling for small all-reduces, halving-doubling (Rabenseifner)
 * for medium, the ring below for large; a binomial tree or the ring pipeline
 * for broadcast; dissemination for the barrier. Each fixes its reduction
 * order per element, so results are bit-identical across ranks and runs.
 *
 * The ring all-reduce is reduce-scatter then all-gather: the buffer is split into n
 * chunks (sizes differ by at most one element), each chunk into segments;
 * a segment is sent as soon as the segment it depends on has arrived, so
 * several segments are in flight while others are being reduced, and sends
 * and receives progress in one nonblocking loop (a step can never deadlock on
 * full socket buffers). Every rank's result is bit-identical: each element is
 * reduced once, in ring order, then copied.
 *
 * Matching: every collective carries this comm's sequence number (the n-th
 * call on every rank is #n), its kind, element count, root and name. A rank
 * whose neighbour issued a different collective fails (DT_CONFIG) with an
 * error naming both ("collective mismatch: worker:1 at 127.0.0.1:4001 called
 * allreduce 'grads/0' (#3, 1000 float32) but worker:0 at 127.0.0.1:4000 called
 * broadcast 'init' (#3, 4000 bytes from rank 0)"), never with wrong numbers.
 *
 * Failures: every call has a deadline. A peer that closes or resets is
 * DT_PEER naming it ("worker:2 at 127.0.0.1:4002 closed the connection during
 * allreduce 'g' (#7)"); a deadline is DT_TIMEOUT listing the rank found
 * missing and since when (a rank that waits announces on whom to its right
 * neighbour, so the blame follows the chain to the rank that is really
 * missing, Horovod's stall inspector idea). A failing rank tells every
 * linked rank why (COLL_ABORT) and they fail with that reason and pass it on. After any error the comm is broken: every later
 * call returns the first error again; free it. Both statuses map to exit code 3.
 *
 * Threads: a comm is used by one thread at a time (no locking inside). The
 * caller may run collectives on a communication thread of its own while it
 * computes on another; different comms are independent. Waiting blocks in
 * poll() (no spinning unless spin_us is set): a spinning thread on a 2-core
 * machine costs everyone a scheduler tick (reference/performance.md); on
 * links to other hosts after up to 100 us of sched_yield between looks (the
 * next segment comes within microseconds); on shared-memory links in
 * FUTEX_WAIT after a short, adaptive spin.
 *
 * Shared memory: ranks on one host (same kernel, same pid namespace, the
 * same user) pass every frame through ring buffers in a memfd mapping
 * instead of loopback TCP, each rank sleeping on a futex word its peers
 * bump; the sockets stay for the return path and to see a peer die, and
 * nothing outlives the processes (a memfd has no name). Agreed per link
 * while the ring is set up; no_shm / DTRAIN_COLLECTIVE_SHM=0 turn it off.
 *
 * Same host: when a neighbour runs on the same kernel in the same pid
 * namespace and may read this process's memory (checked once, with a probe
 * token, while the ring is set up), large segments are not sent: the frame
 * says where they are and the receiver reads them with process_vm_readv,
 * reducing straight from what it read. Control frames, deadlines and failure
 * detection stay on the TCP connections. Open MPI's CMA single-copy path is
 * the model.
 *
 * Ownership: the comm owns its sockets; buffers passed to a collective are
 * borrowed for the duration of the call only.
 */
#ifndef DT_DIST_COLLECTIVE_H
#define DT_DIST_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/messages.h"

struct dt_comm;

/* Default segment size; the last segment of a chunk may be shorter. */
#define DT_COMM_SEGMENT_BYTES (256u << 10)
/* The default when some link goes to another host: a received frame is
 * added as its bytes arrive, so smaller segments buy no overlap there, only
 * more headers and system calls (docs/COLLECTIVES.md, "Segments between
 * hosts"). */
#define DT_COMM_SEGMENT_REMOTE_BYTES (1u << 20)
/* The largest segment: a COLL_DATA's length is 32 bits on the wire (ring_wire.h). */
#define DT_COMM_SEGMENT_MAX (1u << 30)
/* Collectives of at least this many bytes send their segments by reference
 * on a same-host link (COLL_REF) rather than through the socket. Below it,
 * on an idle host, TCP's streaming (the receiver reduces while bytes still
 * arrive) beats a read per segment plus the COLL_DONE hop: the two cross
 * near 1 MB for 2 ranks (docs/BENCHMARKS.md); from 512 KiB the saved copy
 * pays off in training, where the other cores are busy computing. */
#define DT_COMM_CMA_MIN_BYTES (512u << 10)
/* The longest a rank waiting on a shared-memory link spins before it sleeps
 * on its futex: it spins about twice the recent typical wait when that fits
 * in this, else 1 us (a loaded host), unless spin_us fixes the spin
 * (docs/COLLECTIVES.md, "Shared-memory links"). */
#define DT_COMM_SHM_SPIN_NS 20000
/* Longest collective name carried on the wire (longer names are truncated). */
#define DT_COMM_NAME_MAX 128
#define DT_COMM_ADDR_MAX 280

/* One rank of the ring as every rank sees it. */
struct dt_comm_peer {
	const char *addr;   /* "host:port" it listens on */
	const char *role;   /* "worker", "chief": checked in the handshake; "worker" when NULL */
	uint32_t index;     /* its task index within the role */
};

struct dt_comm_config {
	int nranks;                       /* >= 1 */
	int rank;                         /* this rank, 0..nranks-1 */
	const struct dt_comm_peer *peers; /* nranks entries, the same on every rank */
	/* This process's hello (role/index must equal peers[rank]; fingerprint and
	 * model signature are compared with each neighbour's). Borrowed during
	 * dt_comm_new only. NULL: a hello from peers[rank] with fingerprint 0 and
	 * an empty signature (tests, bench). */
	const struct dt_hello *hello;
	/* Optional: an already listening socket for this rank, used when
	 * listen_fd_set is nonzero (taken over, closed by dt_comm_new even on
	 * failure); otherwise peers[rank].addr is bound. Lets tests and
	 * launchers pick free ports. */
	int listen_fd;
	int listen_fd_set;
	size_t segment_bytes;             /* 0: DT_COMM_SEGMENT_BYTES, or DT_COMM_SEGMENT_REMOTE_BYTES when a
					   * link goes to another host; rounded down to a multiple of 4,
					   * >= 4, <= DT_COMM_SEGMENT_MAX */
	/* 0 (DT_COMM_ALG_AUTO): per collective by the cost model; else every
	 * all-reduce and broadcast uses this one (tests, the bench). */
	int algorithm;
	unsigned spin_us;                 /* busy-poll this long before sleeping in poll(); 0: never on loopback, yields on remote links (ring.c) */
	/* Same-host ranks read each other's segments with process_vm_readv (one
	 * copy, no kernel socket buffers) when the kernel lets them; see
	 * "Same-host links" in docs/COLLECTIVES.md. */
	int no_cma;                       /* nonzero: every byte over TCP (also DTRAIN_COLLECTIVE_CMA=0) */
	size_t cma_min_bytes;             /* 0: DT_COMM_CMA_MIN_BYTES; smaller collectives go over TCP */
	/* Same-host ranks pass their frames through ring buffers in shared
	 * memory (memfd) instead of loopback TCP, sleeping on a futex after a
	 * short spin; see "Shared-memory links" in docs/COLLECTIVES.md. */
	int no_shm;                       /* nonzero: frames over TCP (also DTRAIN_COLLECTIVE_SHM=0) */
	/* The TCP congestion control of the connections this rank dials (its
	 * bytes leave on them), as net/congestion.h's dt_tcp_cc_choose takes it:
	 * NULL or "" for DTRAIN_TCP_CONGESTION or the default (the host's, cubic
	 * instead of bbr), "host", or a name; one that cannot be set fails
	 * dt_comm_new (DT_CONFIG). */
	const char *tcp_congestion;
	/* The cost model's α and β (docs/COLLECTIVES.md "Choosing an
	 * algorithm"): by default compiled in per link kind, and measured at the
	 * rendezvous when some link is to another host. cost_alpha_us and
	 * cost_beta_ps both > 0 give them instead (µs per step, ps per byte;
	 * nothing is measured; the mean over the ranks that give them is used by
	 * all); measure_costs nonzero measures them even where every link is on
	 * one host (tests). When neither is set, DTRAIN_COLLECTIVE_COSTS=A,B
	 * (e.g. 50,8000) or =measure in the environment says the same. */
	double cost_alpha_us, cost_beta_ps;
	int measure_costs;
};

/* The algorithms (docs/COLLECTIVES.md "Choosing an algorithm"). */
enum dt_comm_algorithm {
	DT_COMM_ALG_AUTO = 0,
	DT_COMM_ALG_RING = 1,     /* segmented ring: reduce-scatter + all-gather; broadcast pipelined along it */
	DT_COMM_ALG_DOUBLING = 2, /* recursive doubling (all-reduce); binomial tree (broadcast) */
	DT_COMM_ALG_HALVING = 3,  /* recursive halving-doubling, Rabenseifner (all-reduce only) */
};
/* Collective kinds for dt_comm_choose. */
enum dt_comm_kind { DT_COMM_ALLREDUCE = 1, DT_COMM_BROADCAST = 2 };

/* Rendezvous: listens, connects to the right neighbour (retrying with backoff)
 * and accepts the left one until `deadline` (absolute, base/clock.h), checks
 * both handshakes, then runs a barrier so that it returns only once every rank
 * is connected. On a timeout the error names the missing neighbour:
 *   "no connection from worker:2 at 127.0.0.1:4002 within 3.0 s (...)"
 * A refused handshake is DT_CONFIG with the reason. Ranks may start in any
 * order. */
enum dt_status dt_comm_new(const struct dt_comm_config *cfg, int64_t deadline, struct dt_comm **out,
			   struct dt_err *err) DT_MUST_CHECK;
/* Closes the sockets and frees. NULL is a no-op. */
void dt_comm_free(struct dt_comm *comm);

int dt_comm_size(const struct dt_comm *comm);
int dt_comm_rank(const struct dt_comm *comm);
/* "worker:2 at 127.0.0.1:4002" for any rank of the comm. */
const char *dt_comm_peer_label(const struct dt_comm *comm, int rank);
/* After a failed collective: the rank this one saw fail directly (its
 * connection closed or reset, or nothing from it within the deadline) and,
 * in *why (may be NULL), how in a few words, or the rank a COLL_STALL
 * notice had named before it heard of the failure (COLL_ABORT); -1 when
 * the comm is not broken or this rank only heard of the failure. The elastic
 * ring's membership agreement (distribute/membership.h) uses it. */
int dt_comm_lost_rank(const struct dt_comm *comm, const char **why);
/* closed[r] (r < n, the comm's ranks) = 1 for each rank whose end of a
 * connection with this one is closed or reset by now (its process is gone,
 * or it left the ring: a rank that failed a collective closes its links
 * after its COLL_ABORT), else 0 (this rank's own: 0). Never blocks. The
 * elastic agreement takes a candidate coordinator whose connection it saw
 * closed and whose address refuses for gone at once (allreduce_elastic.c),
 * which a rank only told of a failure cannot learn from dt_comm_lost_rank. */
void dt_comm_closed_ranks(const struct dt_comm *comm, int *closed, int n);
/* 1 if this rank reads its left neighbour's large segments straight from
 * that process's memory (same host, allowed by the kernel), 0 if they come
 * over TCP. */
int dt_comm_reads_left_memory(const struct dt_comm *comm);
/* How many linked peers this rank exchanges frames with through shared
 * memory (both directions; 0: every link over TCP). */
int dt_comm_shared_memory_links(const struct dt_comm *comm);
/* The congestion control set on the connections this rank dialled ("cubic"),
 * or "" where they kept the host's default (dt_comm_config.tcp_congestion). */
const char *dt_comm_tcp_congestion(const struct dt_comm *comm);
/* The sequence number the next collective will carry (starts at 1 after the
 * rendezvous barrier, which is #0). */
uint64_t dt_comm_next_seq(const struct dt_comm *comm);

/* The algorithm this comm runs for a collective of `kind` over `bytes`
 * bytes: a pure function of (bytes, ranks, the agreed link kind, the
 * config's algorithm), so every rank of a comm gets the same answer. */
enum dt_comm_algorithm dt_comm_choose(const struct dt_comm *comm, enum dt_comm_kind kind, size_t bytes);
/* "ring", "recursive doubling", "halving-doubling", "binomial tree". */
const char *dt_comm_algorithm_name(enum dt_comm_kind kind, enum dt_comm_algorithm alg);

/* In-place sum of `count` floats across all ranks; every rank passes the same
 * count and name, in the same order. count 0 is valid (it still matches the
 * call). Average = the caller scales by 1/n. */
enum dt_status dt_allreduce_sum_f32(struct dt_comm *comm, float *buf, size_t count, const char *name,
				    int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* The same for int64: an exact sum, wrapping on overflow (two's complement),
 * so every rank gets the same bits whatever the order of the additions
 * (train/fixed_point.h sums gradients this way). Its START carries dtype I64:
 * a rank calling the float32 one at the same point fails the match. */
enum dt_status dt_allreduce_sum_i64(struct dt_comm *comm, int64_t *buf, size_t count, const char *name,
				    int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* All-gather: buf holds n blocks of `block` bytes, block r at r * block;
 * each rank fills in its own (block `rank`) and gets every other rank's,
 * copied byte for byte (ring order, n - 1 steps of one block; its START is
 * kind ALLGATHER, count = block, so a rank calling another collective or
 * another block size at the same point fails the match). */
enum dt_status dt_allgather(struct dt_comm *comm, void *buf, size_t block, const char *name, int64_t deadline,
			    struct dt_err *err) DT_MUST_CHECK;

/* Copies `bytes` bytes of root's buf into every other rank's buf (pipelined
 * along the ring). */
enum dt_status dt_broadcast(struct dt_comm *comm, void *buf, size_t bytes, int root, const char *name,
			    int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* Returns once every rank has entered the barrier of the same name. */
enum dt_status dt_barrier(struct dt_comm *comm, const char *name, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* For tests and the bench: binds n listening sockets on 127.0.0.1 with
 * kernel-chosen ports, writing each descriptor into fds[i] and its
 * "127.0.0.1:port" into addrs[i]. On failure nothing stays open. */
enum dt_status dt_comm_listen_loopback(int n, int *fds, char (*addrs)[DT_COMM_ADDR_MAX], struct dt_err *err) DT_MUST_CHECK;

#endif
