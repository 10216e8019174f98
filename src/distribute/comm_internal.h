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

#include "base/err.h"
#include "distribute/collective.h"
#include "distribute/ring_wire.h"
#include "net/auth.h"
#include "net/socket.h"

/* One DATA frame of a collective's plan: buf[off, off + len). */
struct dt__coll_item {
	size_t off, len;
	long dep;   /* send item: the recv item that must be applied first, or -1; recv items: -1 */
	int reduce; /* recv item: add into buf (1) or copy (0) */
};

struct dt_comm {
	int n, rank;
	int left_fd;  /* accepted from (rank - 1) % n: data arrives here */
	int right_fd; /* connected to (rank + 1) % n: data leaves here */
	char (*labels)[DT_PEER_LABEL_MAX]; /* n labels: "worker:2 at 127.0.0.1:4002" */
	uint64_t seq;                      /* the next collective's number */
	size_t seg_bytes, direct_bytes;
	int no_direct;
	unsigned spin_us;

	int broken;            /* a collective failed: every later call returns `failure` */
	struct dt_err failure;

	/* Bytes received from the left but not yet consumed; may hold the start
	 * of the next collective when the left neighbour is ahead. */
	uint8_t *stage;
	size_t stage_cap, stage_pos, stage_len;
	/* Bytes received from the right (only COLL_DONE and COLL_ABORT are legal there). */
	uint8_t back[DT_FRAME_HEADER_SIZE + DT_REASON_PAYLOAD_MAX + DT_AUTH_TAG_BYTES];
	size_t back_len;
	int right_eof; /* the right neighbour closed after it had all it needed */

	/* With a cluster secret every frame on both links, after the
	 * rendezvous's HELLO and HELLO_OK, carries a 16-byte tag (and in encrypt
	 * mode an encrypted payload) under the keys and counters that link's
	 * handshake derived (net/auth.h, docs/PROTOCOL.md §4.2): sec_right seals
	 * what goes right and opens what comes back (COLL_DONE, COLL_ABORT);
	 * sec_left opens what comes from the left and seals what goes back.
	 * Frames are sealed in the order they are sent and opened in the order
	 * they arrive, so the counters stay in step across collectives.
	 * tagged 0: no secret, frames exactly as without one. */
	int tagged;
	struct dt_wire_sec sec_left, sec_right;
	/* Send side of a tagged ring (ring.c): per frame of the collective in
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
	size_t txbuf_cap; /* >= the largest frame a plan makes (a segment or a gathered buffer) */

	/* Small all-reduces gather every rank's buffer here (n x bytes), grown on demand. */
	uint8_t *scratch;
	size_t scratch_cap;

	/* Plan storage, grown on demand and reused. */
	struct dt__coll_item *send_items, *recv_items;
	size_t send_cap, recv_cap;

	uint64_t left_last_seq; /* seq of the last COLL_START seen from the left; UINT64_MAX: none yet */

	/* Same-host links (comm.c negotiates them; ring.c uses them). */
	int cma_send;         /* the right neighbour reads our segments: send COLL_REF for large ones */
	int cma_left_pid;     /* the left neighbour's pid, whose COLL_REFs we read; 0: none */
	size_t cma_min_bytes; /* collectives this size or larger send their segments by reference */
	uint8_t cma_token[DT_COLL_TOKEN_BYTES]; /* what the right neighbour's probe must find here */
	uint8_t *cma_stage;   /* reduce items are read here a piece at a time, then added */
	size_t cma_stage_cap;
};

/* A collective's frames on this rank (ring_plan.c); the items live in the comm. */
struct dt__plan {
	const struct dt__coll_item *si, *ri;
	long ns, nr;
};
/* Ring all-reduce of count elements of `esize` bytes (4: float32, 8: int64),
 * items relative to the caller's buffer; no item splits an element. */
void dt__plan_ring_allreduce(struct dt_comm *c, size_t count, size_t esize, struct dt__plan *p);
/* Small all-reduce: copies buf into comm->scratch[rank]; items relative to comm->scratch. */
void dt__plan_gather(struct dt_comm *c, const void *buf, size_t bytes, struct dt__plan *p);
/* Broadcast of `bytes` bytes from root, items relative to the caller's buffer. */
void dt__plan_broadcast(struct dt_comm *c, size_t bytes, int root, struct dt__plan *p);

/* Same-host links (comm_cma.c): the exchange of steps 1-4 there, run by
 * every rank after the handshakes; enabled 0 takes part but reads nothing
 * and offers nothing. Sets cma_send, cma_left_pid and cma_stage. */
/* comm_admit.c: rendezvous step 3, accepting the left neighbour on `lfd`
 * while judging every other pending connection concurrently (comm.c). On
 * success comm->left_fd is the neighbour's descriptor, answered HELLO_OK. */
/* The link to the right neighbour during an authenticated rendezvous
 * (net/auth.h): AUTH_HELLO has been sent; the admission loop reads the
 * challenge as it comes, proves and sends the HELLO, so that no rank waits
 * on its right neighbour before it has started to accept its left one. */
struct dt__ring_right {
	int active;   /* 1 while the challenge is awaited; 0: nothing to do (no secret, or proved) */
	const char *label, *role;
	uint32_t index;
	struct dt_auth_hs hs;
	struct dt_wire_sec sec; /* the keys of the link, for the HELLO and its answer */
	struct dt_frame_decoder dec;
};
enum dt_status dt__comm_accept_left(struct dt_comm *comm, const struct dt_comm_config *cfg,
				    const struct dt_hello *local, int lfd, struct dt__ring_right *right, int64_t start,
				    int64_t deadline, struct dt_err *err) DT_MUST_CHECK;
enum dt_status dt__comm_negotiate_cma(struct dt_comm *comm, int enabled, int64_t deadline,
				      struct dt_err *err) DT_MUST_CHECK;
/* Reads len bytes at address src of process pid into dst; DT_PEER and
 * *err_no (EFAULT, ESRCH, EPERM...) if the kernel refuses or the range is bad. */
enum dt_status dt__cma_read(pid_t pid, void *dst, uint64_t src, size_t len, int *err_no) DT_MUST_CHECK;

/* The engine (ring.c): runs one collective; used by comm.c for the rendezvous barrier. */
enum dt_status dt__comm_barrier(struct dt_comm *comm, const char *name, int64_t deadline,
				struct dt_err *err) DT_MUST_CHECK;

#endif
