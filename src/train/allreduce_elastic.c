#include "train/allreduce_elastic.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/progress.h"
#include "net/socket.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "train/session.h"
#include "train/strategy.h"
#include "train/summary.h"

/* Attempts at agreeing and re-forming before the job gives up. */
#define REFORM_ATTEMPTS 3
/* A restarted worker whose report was closed reports again after this. */
#define REPORT_RETRY_MS 200
/* A candidate coordinator whose ring address refuses connections this long
 * is gone (a live member listens there all the time: its desk, or its
 * rendezvous's listener, and the desk reopens as soon as the rendezvous
 * ends): the next is tried. At once when this task saw its connection
 * with the candidate closed (dt_comm_closed_ranks: a live member that left
 * the failed ring listens all the same, so refusals then mean gone), or when
 * another survivor reports to this task meanwhile (it took the candidate for
 * lost too: dt_member_report's watched desk). */
#define COORDINATOR_GONE_S 0.5

void dt_elastic_init(struct dt_elastic *e, int min_workers, int table_n, int self, const struct dt_comm_peer *peers,
		     const char (*names)[48], uint64_t fingerprint, const struct dt_auth *auth, double step_s)
{
	memset(e, 0, sizeof(*e));
	e->min_workers = min_workers;
	e->table_n = table_n;
	e->self = self;
	e->peers = peers;
	e->names = names;
	e->fingerprint = fingerprint;
	e->step_s = step_s;
	e->n = table_n < DT_MEMBER_MAX ? table_n : DT_MEMBER_MAX;
	for (int i = 0; i < e->n; i++)
		e->members[i] = (uint32_t)i;
	e->skip_reduce_step = -1;
	e->id = (struct dt_member_id){ .auth = auth, .fingerprint = fingerprint, .peers = peers, .table_n = table_n,
				       .self = (uint32_t)self };
}

/* This task's desk closed, its listener with it. */
static void close_desk(struct dt_elastic *e)
{
	dt_sock_close(dt_member_desk_close(e->desk));
	e->desk = NULL;
}

void dt_elastic_release(struct dt_elastic *e)
{
	free(e->snap);
	e->snap = NULL;
	free(e->i64);
	e->i64 = NULL;
	close_desk(e);
}

void dt_elastic_listen(struct dt_elastic *e)
{
	if (!e->min_workers || e->desk)
		return;
	struct dt_err err = DT_ERR_INIT;
	if (dt_member_desk_open(&e->id, &e->desk, &err))
		dt_warn("%s: %s", err.msg,
			e->members[0] == (uint32_t)e->self
				? "a restarted worker cannot rejoin until the ring is re-formed"
				: "the other members take this task for lost if the coordinator is lost");
}

int dt_elastic_join_waiting(const struct dt_elastic *e)
{
	return dt_member_desk_poll(e->desk);
}

enum dt_status dt_elastic_sum_i64_join(struct dt_elastic *e, struct dt_comm *comm, int64_t *v, size_t n, int mine,
				       const char *what, int64_t deadline, int *seen, struct dt_err *err)
{
	if (e->i64_cap < n + 1) {
		e->i64_cap = n + 1;
		e->i64 = dt_xrealloc(e->i64, e->i64_cap * sizeof(int64_t));
	}
	memcpy(e->i64, v, n * sizeof(int64_t));
	e->i64[n] = mine;
	enum dt_status st = dt_allreduce_sum_i64(comm, e->i64, n + 1, what, deadline, err);
	if (!st) {
		memcpy(v, e->i64, n * sizeof(int64_t));
		*seen = e->i64[n] > 0;
	}
	return st;
}

void dt_elastic_snapshot(struct dt_elastic *e, struct dt_session *s)
{
	e->saved_from = dt_model_num_params(dt__session_model(s));
	e->in_apply = 1;
}

void dt_elastic_save(struct dt_elastic *e, struct dt_session *s, size_t offset, size_t count)
{
	struct dt_model *m = dt__session_model(s);
	const struct dt_optimizer *opt = dt__session_optimizer(s);
	const size_t np = dt_model_num_params(m);
	DT_ASSERT(e->in_apply && offset + count == e->saved_from);
	if (!e->snap) {
		e->snap_floats = np * (size_t)(1 + opt->num_slots);
		e->snap = dt_xmallocarray(e->snap_floats, sizeof(float));
	}
	memcpy(e->snap + offset, dt_model_params(m) + offset, count * sizeof(float));
	for (int j = 0; j < opt->num_slots; j++)
		memcpy(e->snap + (size_t)(j + 1) * np + offset, opt->slots + (size_t)j * np + offset,
		       count * sizeof(float));
	e->saved_from = offset;
}

static void rollback(struct dt_elastic *e, struct dt_session *s)
{
	if (!e->in_apply)
		return;
	struct dt_model *m = dt__session_model(s);
	struct dt_optimizer *opt = dt__session_optimizer(s);
	const size_t np = dt_model_num_params(m), from = e->saved_from, count = np - from;
	if (count) {
		memcpy(dt_model_params(m) + from, e->snap + from, count * sizeof(float));
		for (int j = 0; j < opt->num_slots; j++)
			memcpy(opt->slots + (size_t)j * np + from, e->snap + (size_t)(j + 1) * np + from,
			       count * sizeof(float));
	}
	e->in_apply = 0;
}

void dt_elastic_done(struct dt_elastic *e, struct dt_session *s, int64_t step)
{
	if (e->reformed_ns) {
		int64_t now = dt_now_ns();
		dt_info("first step on the re-formed ring (step %lld) done %.3f s after the failure was seen (%.3f s after "
			"the re-formation)", (long long)step, (double)(now - e->failed_ns) / 1e9,
			(double)(now - e->reformed_ns) / 1e9);
		e->reformed_ns = e->failed_ns = 0;
	}
	e->in_apply = 0;
	e->done_step = step;
	dt__session_input_position(s, &e->done_epoch, &e->done_offset);
}

int dt_elastic_survivable(const struct dt_elastic *e, enum dt_status st)
{
	return e->min_workers > 0 && (st == DT_PEER || st == DT_TIMEOUT);
}

/* "workers 0,2" when every member has one role, else "chief 0, worker 2". */
static void describe(const struct dt_elastic *e, const uint32_t *ranks, int n, char *buf, size_t cap)
{
	int same = 1;
	for (int i = 1; i < n; i++)
		same &= strcmp(e->peers[ranks[i]].role, e->peers[ranks[0]].role) == 0;
	size_t len = 0;
	buf[0] = '\0';
	for (int i = 0; i < n && len + 48 < cap; i++) {
		const struct dt_comm_peer *p = &e->peers[ranks[i]];
		if (i == 0)
			len += (size_t)snprintf(buf, cap, "%s%s %u", p->role, same && n > 1 ? "s" : "", p->index);
		else if (same)
			len += (size_t)snprintf(buf + len, cap - len, ",%u", p->index);
		else
			len += (size_t)snprintf(buf + len, cap - len, ", %s %u", p->role, p->index);
	}
}

void dt_elastic_describe(const struct dt_elastic *e, char *buf, size_t cap)
{
	describe(e, e->members, e->n, buf, cap);
}

/* "worker 1 at 127.0.0.1:2223 lost: connection reset; ..." */
static void describe_lost(const struct dt_elastic *e, const struct dt_member_view *v, char *buf, size_t cap)
{
	size_t len = 0;
	buf[0] = '\0';
	for (int i = 0; i < v->nlost && len + 64 < cap; i++) {
		const struct dt_comm_peer *p = &e->peers[v->lost[i] < (uint32_t)e->table_n ? v->lost[i] : 0];
		len += (size_t)snprintf(buf + len, cap - len, "%s%s %u at %s lost: %s", i ? "; " : "", p->role, p->index,
					p->addr, v->why[i]);
	}
}

/* "worker 1 at 127.0.0.1:2223 rejoined" for the members of v not in the
 * current ring, appended to buf after "; " when buf holds something. */
static void describe_joined(const struct dt_elastic *e, const struct dt_member_view *v, char *buf, size_t cap)
{
	size_t len = strlen(buf);
	for (int i = 0; i < v->n && len + 64 < cap; i++) {
		int was = 0;
		for (int k = 0; k < e->n; k++)
			was |= e->members[k] == v->ranks[i];
		if (was)
			continue;
		const struct dt_comm_peer *p = &e->peers[v->ranks[i]];
		len += (size_t)snprintf(buf + len, cap - len, "%s%s %u at %s rejoined", len ? "; " : "", p->role, p->index,
					p->addr);
	}
}

/* Every change of membership: the coordinator's summaries get ring/members
 * and ring/reformations at the step, and each task's progress file (`dtrain
 * status`) the members and the change. */
static void record(struct dt_elastic *e, struct dt_session *s, const char *members, const char *change)
{
	if (e->members[0] == (uint32_t)e->self) {
		const char *const tags[] = { "ring/members", "ring/reformations" };
		const float values[] = { (float)e->n, (float)e->reforms };
		dt_summary_scalars(dt__session_summary(s), e->done_step, tags, values, 2);
	}
	char line[208];
	snprintf(line, sizeof(line), "%s (%d of %d); re-formed %d time(s), last at step %lld: %s", members, e->n,
		 e->table_n, e->reforms, (long long)e->done_step, change);
	dt_progress_ring(e->done_step, dt__session_config(s)->train_steps, line);
}

/*
 * One agreement: the view, from the coordinator or as the coordinator. The
 * coordinator is the lowest member of the ring (members[0]) that this task
 * did not see fail; one whose address refuses connections for
 * COORDINATOR_GONE_S, or that does not answer by the deadline, is taken
 * for lost too and the next is tried, down to this task itself (either
 * wait ends early when a survivor reports here: it skipped the candidate,
 * so this task is the next coordinator). Every
 * survivor walks the same list the same way, so they meet at the same one
 * unless one of them saw another survivor fail (then the one it skipped
 * coordinates a view without it, and it finds itself out: exit 3).
 */
static enum dt_status agree(struct dt_elastic *e, int lost, const char *why, const int *closed,
			    struct dt_member_view *v, struct dt_err *err)
{
	struct dt_member_report me = { .fingerprint = e->fingerprint, .rank = (uint32_t)e->self, .epoch = e->epoch,
				       .done_step = e->done_step, .lost = lost };
	snprintf(me.why, sizeof(me.why), "%s", why ? why : "");
	enum dt_status st = DT_OK;
	for (int i = 0; i < e->n; i++) {
		const uint32_t c = e->members[i];
		if ((int)c == lost)
			continue;
		if ((int)c == e->self)
			return dt_member_coordinate(&e->desk, &e->id, e->members, e->n, &me, dt_deadline_in(e->step_s),
						    v, err);
		/* It may still be waiting out its own collective's deadline. */
		int unreachable = 0;
		struct dt_err e2 = DT_ERR_INIT;
		/* A survivor reporting here meanwhile took c for lost: this task
		 * is the next coordinator (of a stopped chief, say, that one
		 * survivor saw stall and this one only heard of). */
		const struct dt_member_watch w = { .fd = -1, .desk = e->desk, .closed = closed[i] };
		st = dt_member_report(&e->id, c, e->names[c], &me, dt_deadline_in(COORDINATOR_GONE_S),
				      dt_deadline_in(2 * e->step_s + 5), &w, v, &unreachable, &e2);
		if (st != DT_PEER && st != DT_TIMEOUT) {
			*err = e2;
			return st;
		}
		dt_warn("%s, which would coordinate the ring, did not answer (%s): taken for lost, the next member "
			"coordinates", e->names[c], e2.msg);
		*err = e2;
		me.lost = me.lost < 0 ? (int32_t)c : me.lost;
		if (me.lost == (int32_t)c)
			snprintf(me.why, sizeof(me.why), "%s", unreachable ? "not listening" : "no membership answer");
	}
	return st ? st : dt_err_set(err, DT_INTERNAL, "no coordinator: this task is not a member of its ring");
}

/* The ring of view v: rendezvous under its epoch, then everyone takes the
 * root's variables, slots, step and position. */
static enum dt_status rejoin(struct dt_elastic *e, struct dt_session *s, struct dt_hello *hello, int *lfd,
			     const struct dt_member_view *v, int rank, struct dt_comm **comm, struct dt_err *err)
{
	struct dt_comm_peer *peers = dt_xcalloc((size_t)v->n, sizeof(*peers));
	for (int i = 0; i < v->n; i++)
		peers[i] = e->peers[v->ranks[i]];
	/* A task still in an older ring carries another fingerprint: refused. */
	hello->cluster_fingerprint = e->fingerprint ^ ((uint64_t)v->epoch * 0x9E3779B97F4A7C15ULL);
	struct dt_comm_config cc = { .nranks = v->n, .rank = rank, .peers = peers, .hello = hello };
	if (*lfd >= 0) {
		cc.listen_fd = *lfd;
		cc.listen_fd_set = 1;
		*lfd = -1; /* dt_comm_new closes it */
	}
	enum dt_status st = dt_comm_new(&cc, dt_deadline_in(e->step_s), comm, err);
	free(peers);
	/* Listening again at once: a reporter takes a member whose address
	 * refuses connections for lost. */
	dt_elastic_listen(e);
	if (st)
		return dt_err_prefix(err, "cannot re-form the ring of %d workers", v->n);
	struct dt_model *m = dt__session_model(s);
	struct dt_optimizer *opt = dt__session_optimizer(s);
	const size_t np = dt_model_num_params(m);
	int64_t pos[3] = { e->done_step, e->done_epoch, e->done_offset };
	const int root = (int)v->root;
	/* A failure halfway through leaves this task's variables torn: it must
	 * not offer them in the next agreement. */
	if (rank != root)
		e->done_step = -1;
	if ((st = dt_broadcast(*comm, pos, sizeof(pos), root, "elastic/position", dt_deadline_in(e->step_s), err)) ||
	    (st = dt_broadcast(*comm, dt_model_params(m), np * sizeof(float), root, "elastic/variables",
			       dt_deadline_in(e->step_s), err)) ||
	    (opt->num_slots > 0 &&
	     (st = dt_broadcast(*comm, opt->slots, (size_t)opt->num_slots * np * sizeof(float), root, "elastic/slots",
				dt_deadline_in(e->step_s), err)))) {
		dt_comm_free(*comm);
		*comm = NULL;
		return dt_err_prefix(err, "cannot take the variables of the re-formed ring's root");
	}
	e->done_step = pos[0];
	e->done_epoch = pos[1];
	e->done_offset = pos[2];
	return DT_OK;
}

enum dt_status dt_elastic_reform(struct dt_elastic *e, struct dt_session *s, struct dt_strategy_info *info,
				 struct dt_hello *hello, struct dt_comm **comm, int *rank, struct dt_err *err)
{
	const char *why = "";
	int lost_rank = *comm ? dt_comm_lost_rank(*comm, &why) : -1;
	char why_copy[DT_MEMBER_WHY_MAX];
	snprintf(why_copy, sizeof(why_copy), "%s", why);
	int lost = lost_rank >= 0 && lost_rank < e->n ? (int)e->members[lost_rank] : -1;
	if (!e->failed_ns)
		e->failed_ns = dt_now_ns();
	int closed[DT_MEMBER_MAX] = { 0 }; /* by old ring rank: seen closed (agree) */
	if (*comm)
		dt_comm_closed_ranks(*comm, closed, e->n);
	dt_comm_free(*comm);
	*comm = NULL;
	rollback(e, s);
	enum dt_status st = DT_OK;
	struct dt_member_view *v = dt_xcalloc(1, sizeof(*v));
	for (int attempt = 0; attempt < REFORM_ATTEMPTS; attempt++) {
		if ((st = agree(e, lost, why_copy, closed, v, err)))
			break;
		int me = -1;
		for (int i = 0; i < v->n; i++)
			if ((int)v->ranks[i] == e->self)
				me = i;
		char members[256], gone[1024];
		describe(e, v->ranks, v->n, members, sizeof(members));
		describe_lost(e, v, gone, sizeof(gone));
		describe_joined(e, v, gone, sizeof(gone));
		if (me < 0) {
			st = dt_err_set(err, DT_PEER, "%s re-formed the ring without this task (%s): it was too late "
						      "to report", e->names[v->ranks[0]], members);
			break;
		}
		if (v->n < e->min_workers) {
			st = dt_err_set(err, DT_PEER, "below --min_workers=%d: %d of %d workers left (%s)", e->min_workers,
					v->n, e->table_n, gone[0] ? gone : "none reported lost");
			break;
		}
		if (v->step < 0) {
			st = dt_err_set(err, DT_PEER, "no surviving worker holds whole variables (%s): cannot go on", gone);
			break;
		}
		const uint32_t was = e->members[0];
		e->epoch = v->epoch;
		e->n = v->n;
		memcpy(e->members, v->ranks, sizeof(uint32_t) * (size_t)v->n);
		if (v->ranks[0] != was) {
			/* The coordinator's duties move with the role: checkpoints,
			 * summaries, the evaluation at the end (session.h). */
			const char *how = NULL;
			for (int i = 0; i < v->nlost; i++)
				if (v->lost[i] == was)
					how = v->why[i];
			if (how || v->ranks[0] > was)
				dt_warn("the %s (%s at %s) was lost (%s): %s coordinates from step %lld",
					was == 0 ? "chief" : "coordinator", e->names[was], e->peers[was].addr,
					how ? how : "no report in time", e->names[v->ranks[0]], (long long)v->step);
			else /* a lower one came back: the lowest member coordinates */
				dt_info("%s (at %s) rejoined: it coordinates from step %lld", e->names[v->ranks[0]],
					e->peers[v->ranks[0]].addr, (long long)v->step);
			if (was == (uint32_t)e->self)
				dt__session_drop_chief(s);
		}
		if (v->ranks[0] == (uint32_t)e->self && (st = dt__session_take_chief(s, err)))
			break;
		struct dt_err e2 = DT_ERR_INIT;
		/* This task's listener goes to the rendezvous (late reporters are
		 * closed there and report again); the desk is rebuilt after it. */
		int lfd = e->desk ? dt_member_desk_close(e->desk) : -1;
		e->desk = NULL;
		/* Fault injection for the test of a restarted worker's report that
		 * comes while the chief re-forms: the window held open this long. */
		const char *pause = v->ranks[0] == (uint32_t)e->self ? getenv("DTRAIN_TEST_REFORM_PAUSE_S") : NULL;
		if (pause && *pause)
			dt_sleep(atof(pause));
		if ((st = rejoin(e, s, hello, &lfd, v, me, comm, &e2))) {
			dt_warn("%s; agreeing again (attempt %d of %d)", e2.msg, attempt + 2, REFORM_ATTEMPTS);
			*err = e2;
			lost = -1;
			why_copy[0] = '\0';
			memset(closed, 0, sizeof(closed)); /* of the ring that failed first, not of this rendezvous */
			continue;
		}
		*rank = me;
		info->shard_index = me;
		info->shard_count = v->n;
		if (dt__session_config(s)->micro_batch > 0) {
			/* --deterministic: the same global batch, its slices dealt over
			 * the members (the step's bits do not depend on who computes). */
			info->global_batch = dt__session_config(s)->hp.batch_size * e->table_n;
			st = dt__session_deal(s, me, v->n, e->done_epoch, e->done_offset, err);
		} else {
			info->global_batch = dt__session_config(s)->hp.batch_size * v->n;
			struct dt_strategy_start at = { .step = e->done_step, .epoch = e->done_epoch,
							.offset = e->done_offset, .global = 1 };
			st = dt__session_seek(s, &at, err);
		}
		if (st)
			break;
		e->reforms++;
		e->skip_reduce_step = e->done_step;
		dt_info("ring re-formed at step %lld: %s (%s)", (long long)e->done_step, members,
			gone[0] ? gone : "no worker lost or joined");
		record(e, s, members, gone[0] ? gone : "no worker lost or joined");
		dt_info("ring re-formed %.3f s after the failure was seen; epoch %u, %d workers, global batch %d",
			(double)(dt_now_ns() - e->failed_ns) / 1e9, e->epoch, e->n, info->global_batch);
		e->reformed_ns = dt_now_ns();
		dt_elastic_listen(e);
		break;
	}
	if (st)
		close_desk(e);
	free(v);
	return st;
}

/* 1 when a connection waits on listening socket fd. */
static int called(int fd)
{
	struct pollfd pf = { fd, POLLIN, 0 };
	return poll(&pf, 1, 0) > 0;
}

/* One round of a restarted task's report: to every other table rank in
 * order, the lowest first (the lowest live member is the coordinator),
 * skipping those whose address refuses connections (gone, or not started).
 * DT_OK: *v is the view. DT_CONFIG: refused. DT_PEER: nobody answered;
 * *first: a peer called this task's own address lfd (a first rendezvous). */
static enum dt_status report_round(struct dt_elastic *e, const struct dt_member_report *me, int lfd,
				   int64_t deadline, struct dt_member_view *v, int *first, struct dt_err *err)
{
	enum dt_status st = dt_err_set(err, DT_PEER, "no other worker of the cluster is listening");
	*first = 0;
	for (int c = 0; c < e->table_n && !dt_deadline_passed(deadline); c++) {
		if (c == e->self)
			continue;
		if (called(lfd)) {
			*first = 1;
			return dt_err_set(err, DT_PEER, "a peer called this task's own address (a first rendezvous)");
		}
		int why_not = 0;
		const struct dt_member_watch w = { .fd = lfd };
		st = dt_member_report(&e->id, (uint32_t)c, e->names[c], me, dt_deadline_in(COORDINATOR_GONE_S / 4),
				      deadline, &w, v, &why_not, err);
		*first = why_not == DT_MEMBER_CALLED;
		if (st != DT_PEER || why_not != DT_MEMBER_UNREACHABLE)
			return st;
	}
	return st;
}

enum dt_status dt_elastic_join(struct dt_elastic *e, struct dt_session *s, struct dt_strategy_info *info,
			       struct dt_hello *hello, int *lfd, int64_t deadline, struct dt_comm **comm, int *rank,
			       int *joined, struct dt_err *err)
{
	*joined = 0;
	struct dt_member_report me = { .fingerprint = e->fingerprint, .rank = (uint32_t)e->self, .epoch = 0,
				       .done_step = -1, .lost = -1 };
	snprintf(me.why, sizeof(me.why), "restarted");
	struct dt_member_view *v = dt_xcalloc(1, sizeof(*v));
	/* A member in a rendezvous closes the report: in its first (then a peer
	 * soon connects here, for this task is in that ring too), or in a
	 * re-formation's, a few ms (then nobody connects here, and the report
	 * is taken once the coordinator trains again). So report again until
	 * one of the two, every REPORT_RETRY_MS. */
	enum dt_status st;
	for (int tries = 1;; tries++) {
		struct dt_err e2 = DT_ERR_INIT;
		int first = 0;
		st = report_round(e, &me, *lfd, deadline, v, &first, &e2);
		if (!st)
			break;
		if (st == DT_CONFIG) { /* refused: another secret or cluster spec */
			free(v);
			*err = e2;
			return dt_err_prefix(err, "this restarted worker cannot rejoin the ring");
		}
		if (tries == 1 && !first)
			dt_info("no running ring took this worker's report (%s): the others are in a rendezvous (their "
				"first, or a re-formation's) or not started; reporting again every %d ms", e2.msg,
				REPORT_RETRY_MS);
		struct pollfd pf = { *lfd, POLLIN, 0 };
		int ms = dt_deadline_ms_left(deadline);
		if (first || poll(&pf, 1, ms < REPORT_RETRY_MS ? ms : REPORT_RETRY_MS) > 0 || dt_deadline_passed(deadline)) {
			if (tries > 1)
				dt_info("%d membership report(s) not taken (%s): joining the first rendezvous", tries,
					e2.msg);
			free(v);
			return DT_OK; /* not a running ring: the first rendezvous */
		}
	}
	int me_at = -1;
	for (int i = 0; i < v->n; i++)
		if ((int)v->ranks[i] == e->self)
			me_at = i;
	if (me_at < 0 || v->n < e->min_workers || v->step < 0) {
		const uint32_t by = v->ranks[0];
		free(v);
		return dt_err_set(err, DT_PEER, "%s (at %s) re-formed the ring without this restarted worker",
				  e->names[by], e->peers[by].addr);
	}
	char members[256];
	describe(e, v->ranks, v->n, members, sizeof(members));
	e->epoch = v->epoch;
	e->n = v->n;
	memcpy(e->members, v->ranks, sizeof(uint32_t) * (size_t)v->n);
	st = rejoin(e, s, hello, lfd, v, me_at, comm, err);
	free(v);
	if (st)
		return dt_err_prefix(err, "this restarted worker cannot rejoin the ring");
	*joined = 1;
	*rank = me_at;
	info->shard_index = me_at;
	info->shard_count = e->n;
	info->global_batch = dt__session_config(s)->hp.batch_size *
			     (dt__session_config(s)->micro_batch > 0 ? e->table_n : e->n);
	/* The lowest member coordinates: a restarted chief takes its duties back
	 * (or a worker below the coordinator, the chief being gone). */
	if (me_at == 0 && (st = dt__session_take_chief(s, err)))
		return st;
	if (me_at != 0)
		info->chief = 0;
	e->reforms++;
	dt_info("ring re-formed at step %lld: %s (this worker, %s %u, rejoined)", (long long)e->done_step, members,
		e->peers[e->self].role, e->peers[e->self].index);
	record(e, s, members, "this worker rejoined");
	return DT_OK;
}
