/*
 * comm_internal.h — the communicator's state, shared by comm.c (rendezvous,
 * lifetime) and ring.c (the progress engine and the collectives). Not for
 * use outside src/distribute/comm*.c and ring*.c.
 */
#ifndef DT_DIST_COMM_INTERNAL_H
#define DT_DIST_COMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "base/err.h"
#include "distribute/collective.h"
#include "distribute/ring_wire.h"
#include "net/auth.h"
#include "net/congestion.h"
#include "net/socket.h"

/* One DATA frame of a collective's plan: buf[off, off + len). */
struct dt__coll_item {
	size_t off, len;
	long dep;   /* send item: the recv item that must be applied first, or -1; recv items: -1 */
	int reduce; /* recv item: add into buf (1) or copy (0) */
};

/* The receiving end of a link: the connection peer p opened to this rank
 * (data from p arrives here; COLL_DONE and COLL_ABORT go back on it). */
struct dt__in_link {
	int fd; /* -1: no link from that rank */
	/* Bytes received but not yet consumed; may hold the start of the next
	 * collective when the peer is ahead. Allocated with the link. */
	uint8_t *stage;
	size_t stage_cap, stage_pos, stage_len;
	uint64_t last_seq; /* seq of the last COLL_START seen on it; UINT64_MAX: none yet */
	/* The last COLL_START received on it (valid once has_start): a
	 * collective whose first frame here is a COLL_DATA is that call again
	 * with the DATA's request id as its seq (ring_recv.c). */
	struct dt_coll_start start_seen;
	int has_start;
	/* With a cluster secret: opens what comes in, seals what goes back. */
	struct dt_wire_sec sec;
	/* Shared-memory link (comm_shm.c): the frames that would come on fd come
	 * through this ring in our own region instead; fd still carries what we
	 * send back (COLL_DONE, COLL_ABORT) and tells us of the peer's death
	 * (end of stream). NULL: everything over fd. */
	struct dt__shm_ring *shm;
	struct dt__shm_head *peer_head; /* the writer's region: wake it when room is made */
	int tcp_eof;                    /* fd reached its end: the writer is gone */
};

/* The sending end of a link: the connection this rank opened to peer p. */
struct dt__out_link {
	int fd; /* -1: no link to that rank */
	/* The payload of the last COLL_START sent on it (start_sent_len 0: none
	 * yet): the next collective that is the same call (all but its seq)
	 * and begins here with a COLL_DATA leaves its START out (ring.c). */
	uint8_t start_sent[DT_COLL_START_FIXED + DT_COLL_NAME_WIRE_MAX];
	size_t start_sent_len;
	/* Bytes received back (only COLL_DONE and COLL_ABORT are legal there). */
	uint8_t back[DT_FRAME_HEADER_SIZE + DT_REASON_PAYLOAD_MAX + DT_AUTH_TAG_BYTES];
	size_t back_len;
	int eof; /* the peer closed after it had all it needed */
	/* With a cluster secret: seals what goes out, opens what comes back. */
	struct dt_wire_sec sec;
	/* Shared-memory link (comm_shm.c): frames go into this ring in the
	 * peer's region instead of fd; fd still brings back COLL_DONE and
	 * COLL_ABORT. NULL: everything over fd. */
	struct dt__shm_ring *shm;
	struct dt__shm_head *peer_head; /* the reader's region: wake it when bytes are in */
};

/* What the cost model (coll_algo.c) knows about the links: the same on
 * every rank (agreed in the rendezvous all-reduce, #0). */
enum dt__link_kind { DT__LINK_TCP = 0, DT__LINK_SAME_HOST = 1 };
/* Which α and β the cost model prices a step and a byte at (coll_algo.c's
 * table): every link of every rank on shared memory; else TCP, remote when
 * some rank has a link to another host (its peer's address neither
 * loopback nor its own), loopback when none has. */
enum dt__cost_kind { DT__COST_TCP_LOOPBACK = 0, DT__COST_TCP_REMOTE = 1, DT__COST_SHM = 2 };
/* Where the cost model's α and β came from (comm_costs.c). */
enum dt__costs_from { DT__COSTS_COMPILED = 0, DT__COSTS_GIVEN = 1, DT__COSTS_MEASURED = 2 };
/* γ: every byte added, or copied into or out of scratch (coll_algo.c's
 * measurement), in picoseconds; the same for every link kind. */
#define DT__GAMMA_PS 100.0

struct dt_comm {
	int n, rank;
	/* Links: rank r has one to and one from every rank at distance 2^k
	 * (mod n) for 2^k < n, the ring neighbours among them (comm.c,
	 * dt__comm_linked). Indexed by peer rank, n entries each. */
	struct dt__in_link *in;
	struct dt__out_link *out;
	/* The links the engine (ring.c) runs the current step over: data from
	 * `lrank` arrives on L, data to `rrank` leaves on R; either is NULL in a
	 * step that only sends or only receives. Outside a collective: the ring
	 * neighbours'. */
	struct dt__in_link *L;
	struct dt__out_link *R;
	int lrank, rrank;
	char (*labels)[DT_PEER_LABEL_MAX]; /* n labels: "worker:2 at 127.0.0.1:4002" */
	uint64_t seq;                      /* the next collective's number */
	size_t seg_bytes;
	int seg_given; /* the caller chose seg_bytes: the link kind does not change it */
	int algorithm; /* enum dt_comm_algorithm: 0 chooses by the cost model */
	unsigned spin_us;
	enum dt__link_kind link_kind;
	uint64_t logged[3]; /* per collective kind, the size classes whose choice was logged */
	/* per collective kind, the last size chosen for, plus one (0: none), and
	 * the choice: a training step all-reduces the same buckets every step,
	 * and the model is not worth evaluating again for them */
	size_t chosen_for[3];
	int chosen[3];

	int broken;            /* a collective failed: every later call returns `failure` */
	struct dt_err failure;
	int lost;              /* the rank the failure saw fail directly; -1: none (it was told) */
	char lost_why[48];     /* how: "connection reset", "no answer for 5.0 s" */

	/* With a cluster secret every frame on every link, after the
	 * rendezvous's HELLO and HELLO_OK, carries a 16-byte tag (and in encrypt
	 * mode an encrypted payload) under the keys and counters that link's
	 * handshake derived (net/auth.h, docs/PROTOCOL.md §4.2): an out link's
	 * sec seals what goes out and opens what comes back (COLL_DONE,
	 * COLL_ABORT); an in link's opens what comes in and seals what goes
	 * back. Frames are sealed in the order they are sent and opened in the
	 * order they arrive, so the counters stay in step across collectives.
	 * tagged 0: no secret, frames exactly as without one. */
	int tagged;
	/* Send side of a tagged link (ring.c): per frame of the step in
	 * flight (index k + 1, COLL_START at 0) its tag and, for a COLL_REF, its
	 * sealed payload; in encrypt mode the ciphertext of DATA frames sealed
	 * but not yet sent lies in txbuf[off, off + len) (the caller's buffer
	 * must stay plaintext). */
	struct dt__sealed {
		uint8_t tag[DT_AUTH_TAG_BYTES];
		uint8_t ref[DT_COLL_REF_BYTES];
		size_t off;
	} *sealed;
	size_t sealed_cap;
	uint8_t *txbuf;
	size_t txbuf_cap; /* >= the largest frame a plan makes (a segment) */

	/* Scratch for the algorithms' received halves and folded buffers, grown on demand. */
	uint8_t *scratch;
	size_t scratch_cap;

	/* Links the collective in flight has used: [2q] to q, [2q + 1] from q
	 * (the first use of each carries COLL_START). 2n entries. */
	uint8_t *used;

	/* Plan storage, grown on demand and reused. */
	struct dt__coll_item *send_items, *recv_items;
	size_t send_cap, recv_cap;

	/* Same-host links (comm.c negotiates them on the ring links; ring.c uses them). */
	int cma_send;         /* the right neighbour reads our segments: send COLL_REF for large ones */
	int cma_left_pid;     /* the left neighbour's pid, whose COLL_REFs we read; 0: none */
	size_t cma_min_bytes; /* collectives this size or larger send their segments by reference */
	uint8_t cma_token[DT_COLL_TOKEN_BYTES]; /* what the right neighbour's probe must find here */
	uint8_t *cma_stage;   /* reduce items are read here a piece at a time, then added */
	size_t cma_stage_cap;

	/* Shared-memory links (comm_shm.c): our region (its head is our doorbell,
	 * its rings what linked peers write to us), the peers' regions we write
	 * into (n entries, NULL where none), and whether every link of every rank
	 * is one (agreed at #0, for the cost model). */
	struct dt__shm_head *shm_self;
	void **shm_peer;
	size_t shm_bytes; /* the size of every region */
	int shm_all;
	enum dt__cost_kind cost_kind; /* agreed at #0, with shm_all and link_kind */
	/* The cost model's α (per step) and β (per byte moved), in picoseconds:
	 * the table's for cost_kind, or given, or measured (comm_costs.c); the
	 * same bits on every rank. want_*: this rank's config or environment. */
	double alpha_ps, beta_ps;
	enum dt__costs_from costs_from;
	/* Where the links were measured, the timed crossover (comm_costs.c):
	 * all-reduces below doubling_below_bytes take recursive doubling, those
	 * from halving_from_bytes (> 0: halving-doubling timed faster from there
	 * up) halving-doubling or the ring, whatever α and β say; 0 and 0: the
	 * model alone. The same on every rank (decided from sums every rank
	 * holds alike). */
	size_t doubling_below_bytes, halving_from_bytes;
	double want_alpha_us, want_beta_ps; /* both > 0: given */
	int want_measure;
	int64_t shm_checked; /* when a sleeping step last looked at its sockets */
	int64_t shm_spin_ns; /* spin this long on shared-memory links before sleeping on the futex; 0: adaptive */
	int64_t shm_wait_avg; /* adaptive: a moving average of how long waits took (comm_shm.c) */
	int shm_yield_skip; /* waits left that skip the yield (a yield lost the core for long: comm_shm.c) */
	int64_t shm_slow_yield_ns; /* a yield longer than this lost the core to other jobs (dt__shm_set_slow_yield) */
	/* This comm's ranks known to be on this host (every rank when every
	 * link is on shared memory, else this one and its shared-memory peers)
	 * and the cores this process may run on (dt__shm_count_ranks_here). */
	int shm_ranks_here, cpus;
	char tcp_cc[DT_TCP_CC_MAX]; /* set on the connections this rank dials; "": the host's (net/congestion.h) */
	int64_t tcp_yield_after; /* steps on TCP links to other hosts yield from then on (ring.c: not after a slow yield) */
};

/* 1 if ranks a and b are linked (both directions): their distance (mod n)
 * is a power of two, either way round. */
int dt__comm_linked(int n, int a, int b);
/* Points L/R at the ring neighbours' links. */
void dt__comm_use_ring(struct dt_comm *c);

/* A collective's frames on this rank (ring_plan.c); the items live in the comm. */
struct dt__plan {
	const struct dt__coll_item *si, *ri;
	long ns, nr;
};
/* Chunk c of n over count elements: sizes differ by at most one. */
void dt__plan_chunk(size_t count, int n, int c, size_t *off, size_t *len);
/* Ring all-reduce of count elements of `esize` bytes (4: float32, 8: int64),
 * items relative to the caller's buffer; no item splits an element. */
void dt__plan_ring_allreduce(struct dt_comm *c, size_t count, size_t esize, struct dt__plan *p);
/* Ring all-gather of n blocks of `block` bytes (block r at r * block, this
 * rank's filled in), items relative to the caller's buffer. */
void dt__plan_ring_allgather(struct dt_comm *c, size_t block, struct dt__plan *p);
/* One message out (s_off, s_len) and/or in (r_off, r_len; reduce: added),
 * in bytes, cut into segments of a multiple of `esize` bytes (the element:
 * 1 for bytes, 4 float32, 8 int64), so no item splits an element when the
 * offsets and lengths are whole elements; either length may be 0 (no items). */
void dt__plan_span(struct dt_comm *c, size_t s_off, size_t s_len, size_t r_off, size_t r_len, int reduce,
		   size_t esize, struct dt__plan *p);
/* Broadcast of `bytes` bytes from root, items relative to the caller's buffer. */
void dt__plan_broadcast(struct dt_comm *c, size_t bytes, int root, struct dt__plan *p);

/* comm_admit.c: rendezvous step 3, accepting every linked peer on `lfd`
 * while judging every other pending connection concurrently (comm.c). On
 * success comm->in[p].fd is peer p's descriptor, answered HELLO_OK, for
 * every p linked to this rank. */
/* An outgoing link during an authenticated rendezvous (net/auth.h):
 * AUTH_HELLO has been sent; the admission loop reads the challenge as it
 * comes, proves and sends the HELLO, so that no rank waits on a peer before
 * it has started to accept the others. */
struct dt__ring_right {
	int active;   /* 1 while the challenge is awaited; 0: nothing to do (no secret, or proved) */
	int peer;     /* its rank */
	const char *label, *role;
	uint32_t index;
	struct dt_auth_hs hs;
	struct dt_wire_sec sec; /* the keys of the link, for the HELLO and its answer */
	struct dt_frame_decoder dec;
};
enum dt_status dt__comm_accept_links(struct dt_comm *comm, const struct dt_comm_config *cfg,
				     const struct dt_hello *local, int lfd, struct dt__ring_right *rights, int nrights,
				     int64_t start, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
/* Same-host links (comm_cma.c): the exchange of steps 1-4 there, run by
 * every rank over the ring links after the handshakes; enabled 0 takes part
 * but reads nothing and offers nothing. Sets cma_send, cma_left_pid and
 * cma_stage. */
enum dt_status dt__comm_negotiate_cma(struct dt_comm *comm, int enabled, int64_t deadline,
				      struct dt_err *err) DT_MUST_CHECK;
/* Setup frames on a link (comm_cma.c, comm_shm.c): one frame of `type`
 * sent, or read into payload[want] (any other type or size is DT_PROTOCOL);
 * sec: the link's keys on a tagged ring, else NULL. Errors are prefixed
 * "ring setup". */
enum dt_status dt__comm_send_setup(int fd, struct dt_wire_sec *sec, uint16_t type, const void *payload, size_t len,
				   int64_t deadline, const char *peer, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt__comm_recv_setup(int fd, struct dt_wire_sec *sec, uint16_t type, uint8_t *payload, size_t want,
				   int64_t deadline, const char *peer, struct dt_err *err) DT_MUST_CHECK;
/* This process's pid, pid namespace and boot id (the rest zero); 0 and all
 * zero if they cannot be read. Same host: both nonzero and all equal. */
int dt__comm_describe_self(struct dt_coll_peer *me);
int dt__comm_same_host(const struct dt_coll_peer *a, const struct dt_coll_peer *b);
/* Reads len bytes at address src of process pid into dst; DT_PEER and
 * *err_no (EFAULT, ESRCH, EPERM...) if the kernel refuses or the range is bad. */
enum dt_status dt__cma_read(pid_t pid, void *dst, uint64_t src, size_t len, int *err_no) DT_MUST_CHECK;

/* comm_shm.c: the shared-memory links, negotiated on every link after the
 * same-host reads (the exchange there); enabled 0 takes part but offers and
 * maps nothing. Sets in[q].shm / out[q].shm where both directions between
 * this rank and q agreed. */
enum dt_status dt__comm_negotiate_shm(struct dt_comm *comm, int enabled, int64_t deadline,
				      struct dt_err *err) DT_MUST_CHECK;
/* Unmaps the regions (closing each shared-memory out link first). */
void dt__comm_shm_free(struct dt_comm *comm);
/* The engine's byte streams, over the ring when the link has one, else the
 * socket. dt__link_recv: like recv(MSG_DONTWAIT): > 0 bytes, 0 the end (the
 * writer closed or its socket ended), -1 with errno (EAGAIN: nothing yet).
 * dt__link_sendv: like sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL), partial writes
 * included. dt__link_send_frame: like send(), but on a ring a control frame
 * goes whole or not at all (-1, EAGAIN). dt__link_shut: no more frames on
 * this out link (the ring closed, the socket shut for writing). */
ssize_t dt__link_recv(struct dt__in_link *in, void *dst, size_t cap);
ssize_t dt__link_sendv(struct dt__out_link *out, struct iovec *iov, int cnt);
ssize_t dt__link_send_frame(struct dt__out_link *out, void *frame, size_t len);
void dt__link_shut(struct dt__out_link *out);
/* A shared-memory in link's unread bytes, read where they lie: *p is set to
 * the oldest, and the count returned runs up to the ring's wrap at most (0:
 * none now, or the link is not on shared memory; dt__link_recv tells the end
 * from nothing yet). They stay put until dt__link_consume(in, n) gives the
 * first n of them back to the writer (waking it if it waits for room). */
size_t dt__link_peek(struct dt__in_link *in, uint8_t **p);
void dt__link_consume(struct dt__in_link *in, size_t n);
/* After a frame was sent back on in->fd (COLL_DONE, COLL_ABORT): wakes the
 * writer, which sleeps on its futex rather than in poll(), to read it. */
void dt__link_poke_back(struct dt__in_link *in);
/* How long a yield in the waits of a collective of `bytes` bytes may keep
 * the core before it counts as lost to other jobs: 250 us, or where this
 * host runs more of the ranks than `cpus` (they take turns on the cores,
 * and the longer a collective, the longer a turn) 250 ps a byte, within
 * 250 us .. 1 ms (comm_shm.c). dt__shm_set_slow_yield sets it for the
 * collective about to run; dt__shm_count_ranks_here, once the rendezvous
 * has agreed shm_all, counts the ranks and cores it is weighed with. */
int64_t dt__shm_slow_yield_ns(size_t bytes, int ranks_here, int cpus);
void dt__shm_set_slow_yield(struct dt_comm *c, size_t bytes);
void dt__shm_count_ranks_here(struct dt_comm *c);
/* Sleeps until a shared-memory link of the step (L in, R out) may move or
 * the timeout passes, after spinning a while (shm_spin_ns, or adapted to
 * how long waits have taken: comm_shm.c); then *tcp_check is 1 if
 * the sockets should be looked at (a poke, the timeout, or 2 ms since they
 * were). want_in: the step still wants bytes from L; blocked: R is full.
 * *now: the clock (dt_now_ns) on entry, read by the caller just before;
 * on return, the wait's last reading of it.
 * Returns at once when something is ready. */
void dt__shm_wait(struct dt_comm *c, int want_in, int blocked, int64_t until_ns, int64_t *now, int *tcp_check);

/* coll_algo.c: the rendezvous's all-reduce (#0) of four floats: sums, by
 * recursive doubling, how many ring links do not read the neighbour's
 * memory and how many ranks have a link not on shared memory (the first),
 * how many have a link to another host (the second), how many ask for the
 * link costs to be measured (the third) and how many give them (the
 * fourth); sets link_kind, shm_all and cost_kind from them, the same on
 * every rank, then the costs (dt__comm_costs_agree). */
enum dt_status dt__comm_rendezvous_sum(struct dt_comm *comm, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
/* coll_algo.c: an all-reduce of `count` floats by recursive doubling,
 * whatever the config or the model says (the rendezvous's own sums and
 * probes: the fewest hops, the same on every rank). */
enum dt_status dt__allreduce_doubling(struct dt_comm *comm, float *buf, size_t count, const char *name,
				      int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
/* The same by the algorithm given (recursive doubling or halving-doubling):
 * the link probes time each. */
enum dt_status dt__allreduce_by(struct dt_comm *comm, enum dt_comm_algorithm alg, float *buf, size_t count,
				const char *name, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* comm_costs.c: the link costs the cost model prices with.
 * dt__comm_costs_config reads this rank's wish (the config, else
 * DTRAIN_COLLECTIVE_COSTS; DT_CONFIG when the variable does not parse).
 * dt__comm_costs_agree, after #0 agreed cost_kind and how many ranks ask
 * to measure (`measure`) and give costs (`given`): when some give them, the
 * mean of theirs; else when some ask, or cost_kind is TCP remote, measures
 * (dt__comm_measure_costs); else the compiled table's. Collective: every
 * rank calls it with the same sums. dt__comm_measure_costs times recursive
 * doubling of 4 bytes and of 256 KiB (a warm-up and 3 of each), fits α and
 * β to the model's formula for it, and sums the ranks' fits (one more
 * all-reduce): the mean on every rank, its bits the same everywhere; then
 * times recursive doubling against halving-doubling at 4-64 KB and sets
 * doubling_below_bytes and halving_from_bytes from the ranks' summed times.
 * Bounded by `deadline`; a peer that stops answering fails it as any
 * collective (named, DT_TIMEOUT or DT_PEER). */
enum dt_status dt__comm_costs_config(struct dt_comm *c, const struct dt_comm_config *cfg, struct dt_err *err) DT_MUST_CHECK;
/* Segments of `seg` bytes from the next collective on (every rank must
 * agree: the plans are cut by it): the stages, and in encrypt mode the
 * ciphertext window, grown to fit (never shrunk). Between collectives only. */
void dt__comm_set_segment(struct dt_comm *comm, size_t seg);
void dt__comm_costs_compiled(struct dt_comm *c);
const char *dt__comm_costs_name(const struct dt_comm *c);
enum dt_status dt__comm_costs_agree(struct dt_comm *c, int measure, int given, int64_t deadline,
				    struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt__comm_measure_costs(struct dt_comm *c, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

#endif
