/*
 * ring_run.h — one collective in flight: the state the progress engine
 * (ring.c) keeps while it runs a plan, shared by the engine's files: ring.c
 * (the loop and the steps), ring_send.c (the out link), ring_recv.c (the in
 * link), ring_fail.c (failures, stalls, timeouts), ring_reduce.c (the sums)
 * and ring_ref.c (segments sent and read by reference). Not for use outside
 * src/distribute/ring*.c.
 *
 * A run lives on the caller's stack for one call; it borrows the comm and
 * the caller's buffer. Any failure goes through dt__ring_fail, which marks
 * the comm broken and tells both neighbours why.
 */
#ifndef DT_DIST_RING_RUN_H
#define DT_DIST_RING_RUN_H

#include "distribute/comm_internal.h"

struct dt__ring_run {
	struct dt_comm *c;
	struct dt_coll_start me;
	/* "allreduce 'g' (#3, 1000 float32)", for messages only: empty until a
	 * failure needs it (formatting it costs ~0.2 us, a fifth of a small
	 * all-reduce on shared memory). dt__ring_fail, dt__ring_on_abort,
	 * dt__ring_timed_out and a broken comm's refusal fill it (dt__ring_what)
	 * before they format, so a caller may pass r->what as an argument. */
	char what[DT_COLL_NAME_WIRE_MAX + 96];
	uint8_t *buf;  /* the current step's receive items are relative to this */
	uint8_t *sbuf; /* and its send items to this: buf, except in dt__ring_step_apart */
	int64_t t0, deadline;
	/* The run's latest clock reading (dt_now_ns): taken when the loop finds
	 * nothing to do, and after each wait, not after every frame. Progress
	 * (last_in, last_out, a step's start) is stamped with it, so a stamp is
	 * at most one busy stretch of the loop old — nothing to messages in
	 * seconds and stall notices every 50 ms or more — while a clock read
	 * (20-50 ns) is not paid four or five times over a small all-reduce on
	 * shared memory (about 1 us in all). */
	int64_t now;
	/* The element type of an all-reduce: its size and its sum. */
	size_t esize;
	void (*add)(uint8_t *restrict dst, const uint8_t *restrict src, size_t bytes);

	/* send side: frame -1 is COLL_START, then send items 0..ns-1 */
	uint8_t start_frame[DT_FRAME_HEADER_SIZE + DT_COLL_START_FIXED + DT_COLL_NAME_WIRE_MAX + DT_AUTH_TAG_BYTES];
	size_t start_len; /* its tag included on a tagged ring */
	const struct dt__coll_item *si;
	long ns, s_idx;
	size_t s_done; /* bytes of frame s_idx already sent (header, payload, tag) */
	uint8_t ctrl[DT_FRAME_HEADER_SIZE + DT_COLL_STALL_BYTES + DT_AUTH_TAG_BYTES];
	size_t ctrl_len, ctrl_sent;
	/* tagged rings: frames s_idx .. sealed - 1 are sealed (their counters
	 * taken) and not yet wholly sent; a stall notice is sealed only when no
	 * frame is (ctrl_sealed), so that frames leave in the order they were
	 * numbered. tx_used: ciphertext bytes of them in comm->txbuf. */
	long sealed;
	int ctrl_sealed;
	size_t tx_used;
	int64_t last_out;

	/* receive side */
	int got_start;
	const struct dt__coll_item *ri;
	long nr, r_idx;
	int in_frame;
	size_t r_applied;
	uint8_t data_hdr[DT_FRAME_HEADER_SIZE]; /* tagged rings: the 32-byte header a DATA's tag covers */
	int64_t last_in;

	/* same-host links: segments sent and received by reference */
	int use_refs;  /* this collective sends its segments as COLL_REF */
	int refs_out;  /* we sent a COLL_REF: wait for the right's COLL_DONE before returning */
	int done_in;   /* the right's COLL_DONE arrived */
	long refs_in;  /* COLL_REFs read from the left: it waits for our COLL_DONE */
	int done_sent;

	/* stall inspector */
	int64_t stall_every, next_stall;
	int blamed;          /* the rank this one found missing */
	int64_t blamed_since; /* nothing from it since then */
	int stall_heard;     /* blamed came from a COLL_STALL notice (its left neighbour's) */
};

/* ring.c */

/* Starts collective #comm->seq on this rank: the COLL_START it sends on
 * each link it uses, the deadline, the stall inspector. Fails at once if the
 * comm is broken. */
enum dt_status dt__ring_begin(struct dt__ring_run *r, struct dt_comm *c, unsigned kind, unsigned dtype,
			      uint64_t count, int root, void *buf, const char *name, int64_t deadline,
			      struct dt_err *err) DT_MUST_CHECK;
/* One step of an algorithm: plan p's send items (relative to base) go to
 * rank `to`, its recv items come from rank `from` (-1: none that way), both
 * progressed together until all are done. by_reference: send segments as
 * COLL_REF (only on the ring link to a right neighbour that reads our
 * memory). The first step on a link of this collective carries COLL_START
 * there. After it the comm's L/R are the ring links again. */
enum dt_status dt__ring_step(struct dt__ring_run *r, const struct dt__plan *p, void *base, int to, int from,
			     int by_reference, struct dt_err *err) DT_MUST_CHECK;
/* The same with send items relative to send_base and receive items to
 * recv_base (no references): recursive doubling over TCP sends the caller's
 * buffer as it is and receives the partner's into scratch, adding it once
 * the step is done — by then every byte sent has left the buffer (into a
 * socket or a ring), so no copy into scratch is needed. */
enum dt_status dt__ring_step_apart(struct dt__ring_run *r, const struct dt__plan *p, const void *send_base,
				   void *recv_base, int to, int from, struct dt_err *err) DT_MUST_CHECK;

/* ring_fail.c */

/* Fills r->what if it is still empty; returns it. */
const char *dt__ring_what(struct dt__ring_run *r);

/* Sets the comm's failure (status st, printf-style message), tells both
 * neighbours and returns st; err (may be NULL) gets a copy. */
/* Notes that the failure about to be raised saw peer `rank` fail directly
 * (closed, reset, silent past the deadline), `why` in a few words; the
 * first one sticks (dt_comm_lost_rank). */
void dt__ring_blame(struct dt__ring_run *r, int rank, const char *why);
__attribute__((format(printf, 4, 5))) enum dt_status dt__ring_fail(struct dt__ring_run *r, struct dt_err *err,
								   enum dt_status st, const char *fmt, ...);
/* A COLL_ABORT from neighbour `from`: fail with its reason and pass it on. */
enum dt_status dt__ring_on_abort(struct dt__ring_run *r, const char *from, const uint8_t *p, size_t len,
				 struct dt_err *err);
/* The stall inspector's turn (now: the clock): a COLL_STALL naming the rank
 * this one has heard nothing from, to every out link (the step's own queues
 * it between its frames). Nothing once this step has received all. */
void dt__ring_queue_stall(struct dt__ring_run *r, int64_t now);
/* The deadline passed: fails naming whom this step waits for (the missing
 * rank the stall chain reported, a neighbour not reading) and how far it got. */
enum dt_status dt__ring_timed_out(struct dt__ring_run *r, int64_t now, struct dt_err *err) DT_MUST_CHECK;

/* ring_send.c */

/* Sends what can go now on the step's out link. Returns 1 if bytes left, 0
 * if nothing could move, -1 on error (err set). *blocked: the link is full. */
int dt__ring_try_send(struct dt__ring_run *r, int *blocked, struct dt_err *err);
/* Send item k's frame size on the wire (k = -1: COLL_START), tag included. */
size_t dt__ring_frame_size(const struct dt__ring_run *r, long k);
/* Reads what the right neighbour sends back on the out link's socket:
 * COLL_DONE, COLL_ABORT, or a close. */
enum dt_status dt__ring_read_back(struct dt__ring_run *r, struct dt_err *err) DT_MUST_CHECK;

/* ring_recv.c */

/* This step has its COLL_START and every recv item. */
static inline int dt__ring_recv_done(const struct dt__ring_run *r)
{
	return r->got_start && r->r_idx >= r->nr;
}
/* Consumes complete frames and payload bytes already in the in link's stage. */
enum dt_status dt__ring_parse_stage(struct dt__ring_run *r, struct dt_err *err) DT_MUST_CHECK;
/* Reads what is there from the left. 1 progress, 0 nothing, -1 error. */
int dt__ring_try_recv(struct dt__ring_run *r, struct dt_err *err);
/* Data came from the left: whatever it had reported missing has shown up. */
void dt__ring_left_moves(struct dt__ring_run *r);
/* Checks (and in encrypt mode decrypts in place) the next frame from a
 * tagged link: sec the link's keys, hdr its 32 header bytes. DT_OK, or the
 * comm fails naming `from` and the frame. */
enum dt_status dt__ring_open(struct dt__ring_run *r, struct dt_wire_sec *sec, const char *from,
			     const uint8_t *hdr, uint8_t *payload, size_t len, const uint8_t *tag,
			     struct dt_err *err) DT_MUST_CHECK;

/* ring_reduce.c */

/* dst[i] += src[i] over bytes / 4 floats; either may be unaligned. */
void dt__ring_add_f32(uint8_t *restrict dst, const uint8_t *restrict src, size_t bytes);
/* dst[i] += src[i] over bytes / 8 int64s, wrapping (two's complement, so
 * the sum is the same in any order); either may be unaligned. */
void dt__ring_add_i64(uint8_t *restrict dst, const uint8_t *restrict src, size_t bytes);

/* ring_ref.c */

/* A COLL_REF from the left (its payload p[len], its header h): read the
 * segment out of the left neighbour's memory into the current recv item. */
enum dt_status dt__ring_apply_ref(struct dt__ring_run *r, const struct dt_frame_header *h, const uint8_t *p,
				  size_t len, struct dt_err *err) DT_MUST_CHECK;
/* Before COLL_DONE: fails if the left neighbour's COLL_ABORT (or close) is
 * already queued behind the last segment read by reference. */
enum dt_status dt__ring_pending_abort(struct dt__ring_run *r, struct dt_err *err) DT_MUST_CHECK;
/* Tells the left neighbour its referenced segments have all been read. */
enum dt_status dt__ring_send_done(struct dt__ring_run *r, struct dt_err *err) DT_MUST_CHECK;
/* A failing sender with unconfirmed references waits, briefly, for the
 * right neighbour's answer before it returns. */
void dt__ring_release_reader(struct dt__ring_run *r);

#endif
