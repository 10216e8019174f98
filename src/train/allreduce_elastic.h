/*
 * allreduce_elastic.h — the elastic part of the multi-worker mirrored
 * strategy (--min_workers, docs/DISTRIBUTED.md "Elastic all-reduce"): the
 * members of the ring, the rollback point of the step in flight, and the
 * re-formation of the ring after a failure (train/allreduce_role.c calls
 * it; the session's loop does not change).
 *
 * Invariants: `members` are the table ranks of the current ring in rank
 * order, which is table order: members[0], the lowest, is the coordinator
 * (the chief while it is a member; when it is lost, the next lowest, which
 * takes the chief's duties: dt__session_take_chief); `done_step` is the last step whose update this
 * task's variables hold and (done_epoch, done_offset) the global input
 * position after it; while `in_apply` (a step's update under way), `snap`
 * holds the variables and optimizer slots as they were at done_step over
 * [saved_from, num_params), so a step that failed halfway through its
 * update is undone before the agreement. Only what the update changes
 * while a collective of the step is still to come is saved (the ranges of
 * the gradient buckets applied before the last bucket's all-reduce, or all
 * of it before batch norm's moving statistics are averaged): what changes
 * after the step's last collective can no longer be undone by a failure,
 * so mlp's one-bucket update copies nothing.
 *
 * Re-forming (dt_elastic_reform): the failed comm is freed; the task
 * reports to the coordinator (the lowest member it did not see fail, or
 * itself), which decides the members (distribute/membership.h); a
 * candidate whose address refuses connections is gone and the next is
 * tried;
 * below min_workers it fails (DT_PEER, naming the lost workers: exit 3);
 * otherwise the members rendezvous again as a new comm whose handshakes
 * carry the new epoch (a task of an older ring is refused), every member
 * takes the variables, optimizer slots, step and input position of the
 * view's root by broadcast, and the step is done_step. A failure during all
 * this starts another agreement, at most three in all.
 *
 * Growing back (a restarted worker): every member keeps listening on its
 * ring address while it trains (dt_elastic_listen); a worker started again
 * with the same flags first reports to the lowest live member's
 * (dt_elastic_join, done_step -1; a restarted chief too, which becomes the
 * lowest member again and so the coordinator). At each step's start the coordinator looks whether a whole report waits
 * (dt_elastic_join_waiting) and every member learns it from a flag summed
 * inside the step's first gradient all-reduce (allreduce_role.c), so all
 * of them decide alike to re-form after that step; the agreement then takes the
 * newcomer's report as a member's, and the newcomer takes the variables,
 * slots, step and position by the same broadcast. A chief in a rendezvous
 * (its first, or a re-formation's) closes such a report (not a HELLO): the
 * worker reports again until someone connects to its own listener (a first
 * rendezvous: it joins it as usual) or its deadline. A stranger's connection
 * costs nothing (refused by the desk).
 *
 * Ownership: the peers and names are borrowed from the strategy's rank
 * table; snap and i64 are owned (dt_elastic_release).
 */
#ifndef DT_TRAIN_ALLREDUCE_ELASTIC_H
#define DT_TRAIN_ALLREDUCE_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "distribute/collective.h"
#include "distribute/membership.h"
#include "net/handshake.h"

struct dt_session;
struct dt_strategy_info;

struct dt_elastic {
	int min_workers;           /* 0: not elastic (a lost worker ends the job) */
	int table_n;               /* workers in the cluster spec */
	int self;                  /* this task's table rank */
	const struct dt_comm_peer *peers; /* (table_n) borrowed */
	const char (*names)[48];   /* (table_n) "worker:1", borrowed */
	uint64_t fingerprint;      /* the cluster's, before the epoch is mixed in */
	double step_s;             /* --step_timeout: the deadlines of the agreement */
	uint32_t members[DT_MEMBER_MAX];
	int n;
	uint32_t epoch;
	int64_t done_step, done_epoch, done_offset;
	int in_apply;              /* snap holds done_step's variables and slots over [saved_from, num_params) */
	size_t saved_from;
	float *snap;               /* (1 + slots) x num_params, allocated at the first save */
	size_t snap_floats;
	int64_t *i64;              /* (i64_cap) dt_elastic_sum_i64_join's buffer */
	size_t i64_cap;
	int64_t skip_reduce_step;  /* figures reduced at this step are this task's alone (-1: none) */
	int reforms;               /* membership changes so far */
	int64_t failed_ns;         /* when the last failure was seen (the figures bench/elastic reads) */
	int64_t reformed_ns;       /* when the ring was re-formed; 0 once its first step is done */
	struct dt_member_id id;    /* this task, its secret and the table, for the reports */
	struct dt_member_desk *desk; /* on this task's ring address between re-formations: the
					coordinator's takes the reports of restarted workers, anyone's
					tells a reporter this task is alive (NULL: none) */
};

/* Sets up the state of a ring of table_n workers (all members, epoch 0). */
void dt_elastic_init(struct dt_elastic *e, int min_workers, int table_n, int self, const struct dt_comm_peer *peers,
		     const char (*names)[48], uint64_t fingerprint, const struct dt_auth *auth, double step_s);
void dt_elastic_release(struct dt_elastic *e);

/* Before a step's update: the rollback point opens, holding nothing yet. */
void dt_elastic_snapshot(struct dt_elastic *e, struct dt_session *s);
/* Before the update changes [offset, offset + count) of the variables and
 * slots while a collective of the step is still to come: that range is
 * copied. Ranges come from the end down, as the buckets do: each ends
 * where the saved part begins (num_params for the first). */
void dt_elastic_save(struct dt_elastic *e, struct dt_session *s, size_t offset, size_t count);
/* After it: step `step` is done, the input is at the position after it. */
void dt_elastic_done(struct dt_elastic *e, struct dt_session *s, int64_t step);

/* 1 if a collective that failed with `st` is survivable here. */
int dt_elastic_survivable(const struct dt_elastic *e, enum dt_status st);

/* Re-forms the ring after *comm failed (see above): on success *comm is the
 * new comm, *rank this task's rank in it, and the session's variables,
 * slots and input (resharded: info's shard *rank of e->n, its global
 * batch too) are at e->done_step.
 * `hello` is the ring's, its fingerprint changed to the new epoch's. */
enum dt_status dt_elastic_reform(struct dt_elastic *e, struct dt_session *s, struct dt_strategy_info *info,
				 struct dt_hello *hello, struct dt_comm **comm, int *rank, struct dt_err *err) DT_MUST_CHECK;

/* Every member (a no-op when not elastic): listens on its ring address, if
 * it does not already: for restarted workers (the coordinator's), and so
 * that a reporter finds it alive. A failure to bind is only logged. */
void dt_elastic_listen(struct dt_elastic *e);
/* The coordinator: 1 if a whole, authentic report of a restarted worker waits
 * (dt_member_desk_poll: a stranger's connection is refused there and asks
 * for nothing); never blocks. */
int dt_elastic_join_waiting(const struct dt_elastic *e);

/* Every task of an elastic ring at its start (the chief too): reports as a
 * restarted worker (within `deadline`) to the other table ranks in index
 * order, skipping an address that refuses connections (gone, or not
 * started yet), so the first that answers is the lowest live member, the
 * coordinator. *lfd: this task's listening ring socket, bound before: a
 * peer in its first rendezvous connects to it (or reports to it), and a
 * connection waiting there, before or while a report waits for its answer,
 * means there is no running ring but a first rendezvous. The new ring's
 * rendezvous takes *lfd over when this task joins (then -1), else it stays
 * for the caller's. *joined 0: no running ring took it (err says why) and
 * the caller joins the first rendezvous as usual. *joined 1: it is a
 * member of the re-formed ring *comm as *rank, the session's variables and
 * slots hold the root's and (done_step, done_epoch, done_offset) the
 * position to start at; info's shard, global batch and chief are set (the
 * lowest member, a restarted chief, takes the duties back). */
enum dt_status dt_elastic_join(struct dt_elastic *e, struct dt_session *s, struct dt_strategy_info *info,
			       struct dt_hello *hello, int *lfd, int64_t deadline, struct dt_comm **comm, int *rank,
			       int *joined, struct dt_err *err) DT_MUST_CHECK;

/* The all-reduce of the n int64s of v with the join flag as one more
 * (`mine`: this task's say, 1 when the coordinator has a restarted worker
 * waiting); *seen: 1 when the sum of the flags is not 0, alike on every
 * member. Copies v (a few hundred bytes: --deterministic's exponents). */
enum dt_status dt_elastic_sum_i64_join(struct dt_elastic *e, struct dt_comm *comm, int64_t *v, size_t n, int mine,
				       const char *what, int64_t deadline, int *seen, struct dt_err *err) DT_MUST_CHECK;

/* "workers 0,2" for the current members. */
void dt_elastic_describe(const struct dt_elastic *e, char *buf, size_t cap);

#endif
