/*
 * membership.h — how the survivors of an elastic ring agree on who is still
 * in it (multi-worker mirrored with --min_workers, docs/DISTRIBUTED.md
 * "Elastic all-reduce").
 *
 * When a collective fails, every surviving rank frees its comm and reports
 * to the coordinator — the chief, rank 0 of the full rank table, which is
 * not elastic: its loss ends the job, as in TensorFlow — on the chief's own
 * ring address (MEMBER_REPORT, docs/PROTOCOL.md §3.7): its rank, the ring
 * epoch it was in, the last step whose update its variables hold, and the
 * rank it saw fail directly, if any (a closed or reset connection, a
 * collective's deadline), with how. The coordinator collects reports until
 * every member of the failed ring has either reported or been reported lost
 * by someone (a killed worker: at once), or until its deadline (a silent
 * one: the members that did not report are out), then answers every
 * reporter with the same MEMBER_VIEW: the members in their new rank order
 * (the coordinator first, then by table rank), a new epoch, the step the
 * ring continues after (the largest step any member holds: at most one step
 * apart, since no rank completes a collective that another has not entered)
 * and the root whose variables everyone takes (the first member holding it).
 * A report from a rank that was not in the failed ring (a restarted worker)
 * makes it a member too.
 *
 * Everything waits against deadlines: a coordinator that never listens (it
 * is dead) is a DT_PEER naming it, a reporter that dies after reporting
 * makes the new ring's rendezvous fail, and the caller agrees again with
 * the next epoch. Reports are not authenticated: the caller refuses
 * membership changes on a cluster with a secret (net/auth.h).
 */
#ifndef DT_DIST_MEMBERSHIP_H
#define DT_DIST_MEMBERSHIP_H

#include <stdint.h>

#include "base/err.h"

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

/*
 * The coordinator's side. *lfd: a socket listening on `addr` (the
 * coordinator's ring address), or -1 to bind one here; it stays open on
 * return (the caller hands it to the next rendezvous, dt_comm_config's
 * listen_fd, so that late reporters are refused there by name). old: the
 * failed ring's members (table ranks, old[0] the coordinator), table_n the
 * size of the full rank table. Waits until every old member has reported or
 * been seen lost, or until `deadline`, then sends the view to every reporter.
 */
enum dt_status dt_member_coordinate(int *lfd, const char *addr, const uint32_t *old, int nold, int table_n,
				    const struct dt_member_report *mine, int64_t deadline, struct dt_member_view *view,
				    struct dt_err *err) DT_MUST_CHECK;

/* A member's side: connects to the coordinator at `addr` (`name` in errors,
 * "worker:0", the connect error adds the address), retrying until `deadline`, reports, and
 * waits for the view. */
enum dt_status dt_member_report(const char *addr, const char *name, const struct dt_member_report *mine,
				int64_t deadline, struct dt_member_view *view, struct dt_err *err) DT_MUST_CHECK;

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
