/*
 * membership.h — how the survivors of an elastic ring agree on who is still
 * in it (multi-worker mirrored with --min_workers, docs/DISTRIBUTED.md
 * "Elastic all-reduce").
 *
 * When a collective fails, every surviving rank frees its comm and reports
 * to the coordinator — the lowest table rank still in the ring: the chief
 * while it is a member, else the next (every member knows the ring from the
 * last view, so all of them pick the same one, with no election) — on the
 * coordinator's own ring address (MEMBER_REPORT, docs/PROTOCOL.md §3.7):
 * its rank, the ring epoch it was in, the last step whose update its
 * variables hold, and the rank it saw fail directly, if any (a closed or
 * reset connection, a collective's deadline), with how. The coordinator
 * collects reports until every member of the failed ring has either
 * reported or been reported lost by someone (a killed worker: at once), or
 * until its deadline (a silent one: the members that did not report are
 * out), then answers every reporter with the same MEMBER_VIEW: the members
 * in their new rank order (by table rank, so the lowest, the next
 * coordinator, is first), a new epoch, the step the ring continues after
 * (the largest step any member holds: at most one step apart, since no rank
 * completes a collective that another has not entered) and the root whose
 * variables everyone takes (the first member holding it). A report from a
 * rank that was not in the failed ring (a restarted worker) makes it a
 * member too.
 *
 * Every member of an elastic ring keeps a desk on its own ring address
 * while it trains, so that a reporter tells a dead coordinator (its
 * address refuses the connection: the process is gone) from one still
 * waiting out a collective's deadline (it accepts, and answers when it
 * coordinates), and moves on to the next lowest member only for the first.
 *
 * Everything waits against deadlines: a coordinator that never listens (it
 * is dead) is a DT_PEER naming it, a reporter that dies after reporting
 * makes the new ring's rendezvous fail, and the caller agrees again with
 * the next epoch.
 *
 * Authentication: on a cluster with a secret (dt_member_id.auth) a report
 * goes as every other connection's frames do (net/auth.h, PROTOCOL.md
 * §4.2): AUTH_HELLO, AUTH_CHALLENGE, AUTH_PROOF, then the MEMBER_REPORT and
 * the MEMBER_VIEW (or a REFUSE) tagged; the transcript binds the reporter's
 * role:index, and the coordinator takes a report only from the task its
 * rank names (a worker cannot report for another). A stranger, one without
 * the secret or with another one, is refused (REFUSE, then closed) and
 * never counts as a member.
 *
 * The desk: a member's listener and the connections on it that have not
 * been answered yet. Between agreements the coordinator polls it at every step
 * boundary without blocking (dt_member_desk_poll): handshakes and reports
 * advance as their bytes come, and only a whole, authentic report from a
 * rank of the table makes it ask for a re-formation, so a stranger's
 * connection costs the ring nothing. The agreement then starts from the
 * reports the desk already holds.
 */
#ifndef DT_DIST_MEMBERSHIP_H
#define DT_DIST_MEMBERSHIP_H

#include <stdint.h>

#include "base/err.h"
#include "distribute/collective.h"
#include "net/auth.h"

/* Ranks in one view. */
#define DT_MEMBER_MAX 256
#define DT_MEMBER_WHY_MAX 48

struct dt_member_report {
	uint64_t fingerprint;         /* the cluster's: a report from another cluster is refused */
	uint32_t rank;                /* the reporter's rank in the full rank table */
	uint32_t epoch;               /* the membership epoch of the ring it was in */
	int64_t done_step;            /* the last step whose update its variables hold */
	int32_t lost;                 /* table rank it saw fail directly; -1: it was only told */
	char why[DT_MEMBER_WHY_MAX];  /* how: "connection reset", "no answer for 5.0 s" */
};

struct dt_member_view {
	uint32_t epoch;               /* the new ring's */
	int64_t step;                 /* the step the new ring continues after */
	uint32_t root;                /* the new rank whose variables every member takes */
	int n;                        /* members */
	uint32_t ranks[DT_MEMBER_MAX];/* their table ranks, in new rank order */
	int nlost;                    /* members of the failed ring that are not in this one */
	uint32_t lost[DT_MEMBER_MAX];
	char why[DT_MEMBER_MAX][DT_MEMBER_WHY_MAX];
};

/* This task and its cluster, for the exchange's authentication. Borrowed. */
struct dt_member_id {
	const struct dt_auth *auth;       /* the cluster secret; NULL: none, the frames go bare */
	uint64_t fingerprint;             /* the cluster's (the reports carry it; the transcript's) */
	const struct dt_comm_peer *peers; /* (table_n) each table rank's address, role and index */
	int table_n;
	uint32_t self;                    /* this task's table rank */
};

/* A member's listener and its unanswered connections (above). */
struct dt_member_desk;

/* Listens on this task's ring address (id->peers[id->self].addr); the desk
 * borrows id. */
enum dt_status dt_member_desk_open(const struct dt_member_id *id, struct dt_member_desk **out,
				   struct dt_err *err) DT_MUST_CHECK;
/* Never blocks: accepts what waits, advances the handshakes, reads the
 * reports, closes the connections past their handshake deadline
 * (DT_NET_HANDSHAKE_S) and the strangers. 1 when a whole report waits. */
int dt_member_desk_poll(struct dt_member_desk *d);
/* Hands the listener over (the next rendezvous takes it: dt_comm_config's
 * listen_fd) and closes every connection the desk holds; frees the desk. A
 * reporter closed so reports again (dt_member_report's callers retry). */
int dt_member_desk_close(struct dt_member_desk *d);

/*
 * The coordinator's side (this task, id->self), on its desk (*desk NULL:
 * one is opened here and stays, for dt_member_desk_close). old: the failed
 * ring's members (table ranks; the coordinator among them, or a member
 * that the lost ones' loss made the lowest). Waits until every other old
 * member has reported or been seen lost, or until `deadline`, then sends
 * the view to every reporter (whose connections then close).
 */
enum dt_status dt_member_coordinate(struct dt_member_desk **desk, const struct dt_member_id *id, const uint32_t *old,
				    int nold, const struct dt_member_report *mine, int64_t deadline,
				    struct dt_member_view *view, struct dt_err *err) DT_MUST_CHECK;

/* What ends a report's wait for its answer early (dt_member_report); the
 * desk and `closed` also end its retries of a refused connection. */
struct dt_member_watch {
	int fd;                       /* a listening socket: a connection waiting there (a peer in its
					 first rendezvous calls this task); -1: none */
	struct dt_member_desk *desk;  /* this task's desk: a whole report of a survivor (step >= 0) on
					 it (a member that took the one asked for lost, and so this
					 task for the next coordinator); NULL: none */
	int closed;                   /* 1: this task saw its connection with the one asked closed
					 (dt_comm_closed_ranks), so a refused connection means it is
					 gone: not retried (a live one listens all the time) */
};

/* A member's side: connects to the coordinator `to` (a table rank:
 * id->peers[to], `name` in errors, "worker:0"), retrying a refused
 * connection until `connect_deadline` (<= deadline), authenticates when id
 * has a secret, reports, and waits for the view until `deadline`, or until
 * `watch` (NULL: nothing) says. DT_PEER when it cannot connect (*why_not
 * DT_MEMBER_UNREACHABLE: nothing listens there, the process is gone or not
 * started; after one refused attempt with watch->closed), when the watch
 * ended the wait (DT_MEMBER_CALLED: a watched desk ends the retries of a
 * refused connection too, at once), or when the
 * connection closes before a view (the coordinator is dead, or is not
 * taking reports now: in a rendezvous); DT_CONFIG when it refuses this
 * task (another secret). why_not may be NULL. */
enum { DT_MEMBER_UNREACHABLE = 1, DT_MEMBER_CALLED = 2 };
enum dt_status dt_member_report(const struct dt_member_id *id, uint32_t to, const char *name,
				const struct dt_member_report *mine, int64_t connect_deadline, int64_t deadline,
				const struct dt_member_watch *watch, struct dt_member_view *view, int *why_not,
				struct dt_err *err) DT_MUST_CHECK;

/* The wire forms (docs/PROTOCOL.md §3.7), for the tests. */
#define DT_MEMBER_REPORT_BYTES (8 + 4 + 4 + 8 + 4 + DT_MEMBER_WHY_MAX)
void dt_member_report_encode(const struct dt_member_report *r, uint8_t *out);
enum dt_status dt_member_report_decode(struct dt_member_report *r, const uint8_t *p, size_t len,
				       struct dt_err *err) DT_MUST_CHECK;
/* Returns the bytes written (at most dt_member_view_bytes(v)). */
size_t dt_member_view_bytes(const struct dt_member_view *v);
size_t dt_member_view_encode(const struct dt_member_view *v, uint8_t *out);
enum dt_status dt_member_view_decode(struct dt_member_view *v, const uint8_t *p, size_t len,
				     struct dt_err *err) DT_MUST_CHECK;

#endif
