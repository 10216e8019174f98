/*
 * ring_member.c — the membership agreement of an elastic ring
 * (distribute/membership.h): the coordinator's desk collecting reports on
 * its address, a member reporting, both authenticated with the cluster
 * secret when there is one, and the two frames' wire forms.
 */
#include "distribute/membership.h"

#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/strutil.h"
#include "net/auth.h"
#include "net/bytes.h"
#include "net/conn.h"
#include "net/handshake.h"
#include "net/messages.h"
#include "net/socket.h"

/* ---- wire forms ---- */

void dt_member_report_encode(const struct dt_member_report *r, uint8_t *out)
{
	dt_put_u64le(out, r->fingerprint);
	dt_put_u32le(out + 8, r->rank);
	dt_put_u32le(out + 12, r->epoch);
	dt_put_u64le(out + 16, (uint64_t)r->done_step);
	dt_put_u32le(out + 24, (uint32_t)r->lost);
	memset(out + 28, 0, DT_MEMBER_WHY_MAX);
	memcpy(out + 28, r->why, strnlen(r->why, DT_MEMBER_WHY_MAX - 1));
}

enum dt_status dt_member_report_decode(struct dt_member_report *r, const uint8_t *p, size_t len, struct dt_err *err)
{
	if (len != DT_MEMBER_REPORT_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "member_report of %zu bytes, expected %d", len,
				  DT_MEMBER_REPORT_BYTES);
	r->fingerprint = dt_get_u64le(p);
	r->rank = dt_get_u32le(p + 8);
	r->epoch = dt_get_u32le(p + 12);
	r->done_step = (int64_t)dt_get_u64le(p + 16);
	r->lost = (int32_t)dt_get_u32le(p + 24);
	memcpy(r->why, p + 28, DT_MEMBER_WHY_MAX);
	r->why[DT_MEMBER_WHY_MAX - 1] = '\0';
	return DT_OK;
}

/* epoch, step, root, n, nlost; n ranks; nlost (rank, why) */
#define VIEW_FIXED (4 + 8 + 4 + 4 + 4)

size_t dt_member_view_bytes(const struct dt_member_view *v)
{
	return VIEW_FIXED + 4 * (size_t)v->n + (4 + DT_MEMBER_WHY_MAX) * (size_t)v->nlost;
}

size_t dt_member_view_encode(const struct dt_member_view *v, uint8_t *out)
{
	dt_put_u32le(out, v->epoch);
	dt_put_u64le(out + 4, (uint64_t)v->step);
	dt_put_u32le(out + 12, v->root);
	dt_put_u32le(out + 16, (uint32_t)v->n);
	dt_put_u32le(out + 20, (uint32_t)v->nlost);
	uint8_t *p = out + VIEW_FIXED;
	for (int i = 0; i < v->n; i++, p += 4)
		dt_put_u32le(p, v->ranks[i]);
	for (int i = 0; i < v->nlost; i++, p += 4 + DT_MEMBER_WHY_MAX) {
		dt_put_u32le(p, v->lost[i]);
		memset(p + 4, 0, DT_MEMBER_WHY_MAX);
		memcpy(p + 4, v->why[i], strnlen(v->why[i], DT_MEMBER_WHY_MAX - 1));
	}
	return (size_t)(p - out);
}

enum dt_status dt_member_view_decode(struct dt_member_view *v, const uint8_t *p, size_t len, struct dt_err *err)
{
	if (len < VIEW_FIXED)
		return dt_err_set(err, DT_PROTOCOL, "member_view of %zu bytes is too short", len);
	v->epoch = dt_get_u32le(p);
	v->step = (int64_t)dt_get_u64le(p + 4);
	v->root = dt_get_u32le(p + 12);
	uint32_t n = dt_get_u32le(p + 16), nlost = dt_get_u32le(p + 20);
	if (n < 1 || n > DT_MEMBER_MAX || nlost > DT_MEMBER_MAX || v->root >= n ||
	    len != VIEW_FIXED + 4 * (size_t)n + (4 + DT_MEMBER_WHY_MAX) * (size_t)nlost)
		return dt_err_set(err, DT_PROTOCOL, "bad member_view: %u members, %u lost, root %u in %zu bytes", n,
				  nlost, v->root, len);
	v->n = (int)n;
	v->nlost = (int)nlost;
	const uint8_t *q = p + VIEW_FIXED;
	for (uint32_t i = 0; i < n; i++, q += 4)
		v->ranks[i] = dt_get_u32le(q);
	for (uint32_t i = 0; i < nlost; i++, q += 4 + DT_MEMBER_WHY_MAX) {
		v->lost[i] = dt_get_u32le(q);
		memcpy(v->why[i], q + 4, DT_MEMBER_WHY_MAX);
		v->why[i][DT_MEMBER_WHY_MAX - 1] = '\0';
	}
	return DT_OK;
}

/* ---- the coordinator's desk ---- */

enum { ST_AUTH_HELLO, ST_AUTH_PROOF, ST_REPORT, ST_REPORTED };

struct pending {
	int fd;          /* -1: a free slot */
	int64_t deadline; /* until it has reported: DT_NET_HANDSHAKE_S from its accept */
	int stage;
	char addr[64];
	struct dt_frame_decoder dec;
	struct dt_auth_hs hs;
	struct dt_wire_sec sec;
	struct dt_member_report report;
};

struct dt_member_desk {
	const struct dt_member_id *id;
	int lfd;
	struct dt_hello hello; /* this side of the transcript: role:index, fingerprint, secret */
	struct pending *p;
	int cap;
	uint64_t refused;      /* strangers refused so far (logged at powers of two) */
};

static const char *role_of(const struct dt_comm_peer *p)
{
	return p->role && p->role[0] ? p->role : "worker";
}

/* The hello the transcript is made of: no signature (nothing else is sent). */
static void id_hello(const struct dt_member_id *id, struct dt_hello *h)
{
	memset(h, 0, sizeof(*h));
	h->cluster_fingerprint = id->fingerprint;
	dt_fmt(h->role, sizeof(h->role), "%s", role_of(&id->peers[id->self]));
	h->index = id->peers[id->self].index;
	h->auth = id->auth;
}

static void drop(struct pending *p)
{
	dt_sock_close(p->fd);
	p->fd = -1;
	dt_frame_decoder_release(&p->dec);
	sodium_memzero(&p->sec, sizeof(p->sec));
}

/* Refuses p (best effort: the REFUSE, tagged once the link has keys) and
 * closes it. It learns why; it never counts as a member. */
static void refuse(struct dt_member_desk *d, struct pending *p, uint32_t code, const char *why)
{
	uint8_t buf[DT_REASON_PAYLOAD_MAX];
	size_t len = dt_reason_encode(code, why, buf, sizeof(buf));
	enum dt_status st = p->sec.mode ? dt_frame_send_fd_sealed(p->fd, &p->sec, DT_MSG_REFUSE, DT_FRAME_F_REPLY, buf,
								   len, dt_deadline_in(1.0), p->addr, NULL)
					: dt_frame_send_fd(p->fd, DT_MSG_REFUSE, DT_FRAME_F_REPLY, 0, buf, len,
							   dt_deadline_in(1.0), p->addr, NULL);
	(void)st;
	d->refused++;
	if ((d->refused & (d->refused - 1)) == 0) /* a flood logs a line at powers of two */
		dt_warn("membership: refused the report from %s: %s (%llu refused so far)", p->addr, why,
			(unsigned long long)d->refused);
	drop(p);
}

/* A whole frame from p, at its stage. */
static void take_frame(struct dt_member_desk *d, struct pending *p)
{
	const struct dt_member_id *id = d->id;
	const uint8_t *in = dt_frame_decoder_payload(&p->dec);
	const size_t len = (size_t)p->dec.header.length;
	const uint16_t type = p->dec.header.type;
	char why[DT_REASON_MAX];
	if (p->stage == ST_AUTH_HELLO || p->stage == ST_AUTH_PROOF) {
		uint16_t want = p->stage == ST_AUTH_HELLO ? DT_MSG_AUTH_HELLO : DT_MSG_AUTH_PROOF;
		if (type != want) {
			dt_fmt(why, sizeof(why), "expected %s, got %s (this ring's membership reports need the cluster secret)",
			       dt_msg_name(want), dt_msg_name(type));
			refuse(d, p, DT_REFUSE_AUTH, why);
			return;
		}
		uint32_t code;
		if (p->stage == ST_AUTH_HELLO) {
			uint8_t out[DT_AUTH_MSG_MAX];
			size_t out_len = 0;
			code = dt_auth_server_challenge(&p->hs, &d->hello, in, len, out, &out_len, why, sizeof(why));
			if (!code && dt_frame_send_fd(p->fd, DT_MSG_AUTH_CHALLENGE, DT_FRAME_F_REPLY, 0, out, out_len,
						      dt_deadline_in(1.0), p->addr, NULL) != DT_OK) {
				drop(p);
				return;
			}
		} else {
			code = dt_auth_server_check(&p->hs, in, len, &p->sec, why, sizeof(why));
		}
		if (code) {
			refuse(d, p, code, why);
			return;
		}
		dt_frame_decoder_next(&p->dec);
		if (++p->stage == ST_REPORT)
			p->dec.trailer = DT_AUTH_TAG_BYTES;
		return;
	}
	struct dt_err e = DT_ERR_INIT;
	if (p->sec.mode && dt_frame_open_fd(&p->dec, &p->sec, p->addr, &e) != DT_OK) {
		drop(p); /* not authentic: a forged or damaged frame gets no answer */
		return;
	}
	if (type != DT_MSG_MEMBER_REPORT) {
		dt_fmt(why, sizeof(why), "expected member_report, got %s%s", dt_msg_name(type),
		       type == DT_MSG_AUTH_HELLO ? " (the coordinator has no cluster secret)" : "");
		refuse(d, p, type == DT_MSG_AUTH_HELLO ? DT_REFUSE_AUTH : DT_REFUSE_IDENTITY, why);
		return;
	}
	struct dt_member_report *r = &p->report;
	if (dt_member_report_decode(r, in, len, &e)) {
		refuse(d, p, DT_REFUSE_IDENTITY, e.msg);
		return;
	}
	if (r->fingerprint != id->fingerprint) {
		refuse(d, p, DT_REFUSE_FINGERPRINT, "a report from another cluster spec");
		return;
	}
	if (r->rank == id->self || (int)r->rank >= id->table_n) {
		dt_fmt(why, sizeof(why), "a report for rank %u, not a worker of this ring", r->rank);
		refuse(d, p, DT_REFUSE_IDENTITY, why);
		return;
	}
	const struct dt_comm_peer *claimed = &id->peers[r->rank];
	if (p->sec.mode && (strcmp(p->hs.role_c, role_of(claimed)) != 0 || p->hs.index_c != claimed->index)) {
		dt_fmt(why, sizeof(why), "it authenticated as %s:%u but reports for %s:%u", p->hs.role_c, p->hs.index_c,
		       role_of(claimed), claimed->index);
		refuse(d, p, DT_REFUSE_IDENTITY, why);
		return;
	}
	p->stage = ST_REPORTED;
	/* A rank that reported twice (restarted meanwhile) keeps its newest connection. */
	for (int k = 0; k < d->cap; k++)
		if (&d->p[k] != p && d->p[k].fd >= 0 && d->p[k].stage == ST_REPORTED && d->p[k].report.rank == r->rank)
			drop(&d->p[k]);
}

/* Reads what p has sent, frame after frame, without blocking. */
static void read_some(struct dt_member_desk *d, struct pending *p)
{
	while (p->fd >= 0 && p->stage != ST_REPORTED) {
		struct dt_err e = DT_ERR_INIT;
		int ready = 0;
		if (dt_frame_recv_fd_some(p->fd, &p->dec, p->addr, &ready, &e)) {
			drop(p);
			return;
		}
		if (!ready)
			return;
		take_frame(d, p);
	}
}

/* Accepts what waits; beyond the desk's room the oldest unreported goes. */
static void accept_some(struct dt_member_desk *d)
{
	for (int n = 0; n < 16; n++) {
		int fd = -1;
		char addr[64];
		struct dt_err e = DT_ERR_INIT;
		if (dt_sock_accept(d->lfd, &fd, addr, sizeof(addr), &e) || fd < 0)
			return;
		struct pending *slot = NULL, *oldest = NULL;
		for (int k = 0; k < d->cap && !slot; k++) {
			if (d->p[k].fd < 0)
				slot = &d->p[k];
			else if (d->p[k].stage != ST_REPORTED && (!oldest || d->p[k].deadline < oldest->deadline))
				oldest = &d->p[k];
		}
		if (!slot && oldest) {
			drop(oldest);
			slot = oldest;
		}
		if (!slot) { /* every slot holds a report: a rank's newest replaces its older one */
			dt_sock_close(fd);
			continue;
		}
		*slot = (struct pending){ .fd = fd, .deadline = dt_deadline_in(DT_NET_HANDSHAKE_S),
					  .stage = d->id->auth ? ST_AUTH_HELLO : ST_REPORT };
		dt_fmt(slot->addr, sizeof(slot->addr), "%s", addr);
		dt_frame_decoder_init(&slot->dec, DT_AUTH_MSG_MAX); /* a report is smaller too */
	}
}

/* One round: waits up to wait_ms for something to read, takes it. */
static void desk_round(struct dt_member_desk *d, int wait_ms)
{
	struct pollfd *pf = dt_xcalloc((size_t)d->cap + 1, sizeof(*pf));
	int *idx = dt_xcalloc((size_t)d->cap + 1, sizeof(int));
	nfds_t np = 0;
	pf[np++] = (struct pollfd){ d->lfd, POLLIN, 0 };
	int64_t now = dt_now_ns();
	for (int k = 0; k < d->cap; k++) {
		struct pending *p = &d->p[k];
		if (p->fd < 0 || p->stage == ST_REPORTED)
			continue;
		if (now >= p->deadline) {
			drop(p); /* silent or trickling: a stranger */
			continue;
		}
		idx[np] = k;
		pf[np++] = (struct pollfd){ p->fd, POLLIN, 0 };
	}
	if (poll(pf, np, wait_ms) > 0) {
		for (nfds_t j = 1; j < np; j++)
			if (pf[j].revents)
				read_some(d, &d->p[idx[j]]);
		if (pf[0].revents & POLLIN)
			accept_some(d);
	}
	free(pf);
	free(idx);
}

enum dt_status dt_member_desk_open(const struct dt_member_id *id, struct dt_member_desk **out, struct dt_err *err)
{
	*out = NULL;
	if (id->table_n > DT_MEMBER_MAX || id->table_n < 1)
		return dt_err_set(err, DT_CONFIG, "an elastic ring holds at most %d workers, not %d", DT_MEMBER_MAX,
				  id->table_n);
	char host[DT_HOST_MAX];
	int port, lfd = -1;
	enum dt_status st = dt_sock_split_hostport(id->peers[id->self].addr, host, sizeof(host), &port, err);
	if (!st)
		st = dt_sock_listen(host, port, 64, &lfd, NULL, err);
	if (st)
		return dt_err_prefix(err, "cannot take the reports of the workers");
	struct dt_member_desk *d = dt_xcalloc(1, sizeof(*d));
	d->id = id;
	d->lfd = lfd;
	id_hello(id, &d->hello);
	d->cap = id->table_n * 2 + 8;
	d->p = dt_xcalloc((size_t)d->cap, sizeof(*d->p));
	for (int k = 0; k < d->cap; k++)
		d->p[k].fd = -1;
	*out = d;
	return DT_OK;
}

int dt_member_desk_poll(struct dt_member_desk *d)
{
	if (!d)
		return 0;
	desk_round(d, 0);
	for (int k = 0; k < d->cap; k++)
		if (d->p[k].fd >= 0 && d->p[k].stage == ST_REPORTED)
			return 1;
	return 0;
}

int dt_member_desk_close(struct dt_member_desk *d)
{
	if (!d)
		return -1;
	for (int k = 0; k < d->cap; k++)
		if (d->p[k].fd >= 0)
			drop(&d->p[k]);
	int lfd = d->lfd;
	free(d->p);
	free(d);
	return lfd;
}

static int in_list(const uint32_t *v, int n, uint32_t x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

/* The report of table rank r the desk holds, or NULL. */
static const struct dt_member_report *report_of(const struct dt_member_desk *d, uint32_t r)
{
	for (int k = 0; k < d->cap; k++)
		if (d->p[k].fd >= 0 && d->p[k].stage == ST_REPORTED && d->p[k].report.rank == r)
			return &d->p[k].report;
	return NULL;
}

enum dt_status dt_member_coordinate(struct dt_member_desk **desk, const struct dt_member_id *id, const uint32_t *old,
				    int nold, const struct dt_member_report *mine, int64_t deadline,
				    struct dt_member_view *view, struct dt_err *err)
{
	memset(view, 0, sizeof(*view));
	if (nold > id->table_n)
		return dt_err_set(err, DT_INTERNAL, "a ring of %d members in a table of %d", nold, id->table_n);
	enum dt_status st;
	if (!*desk && (st = dt_member_desk_open(id, desk, err)))
		return st;
	struct dt_member_desk *d = *desk;
	const int table_n = id->table_n;
	/* lost_seen[r]: someone saw table rank r fail; why[r]: how */
	int *lost_seen = dt_xcalloc((size_t)table_n, sizeof(int));
	char(*why)[DT_MEMBER_WHY_MAX] = dt_xcalloc((size_t)table_n, sizeof(*why));
	if (mine->lost >= 0 && mine->lost < table_n) {
		lost_seen[mine->lost] = 1;
		snprintf(why[mine->lost], DT_MEMBER_WHY_MAX, "%s", mine->why);
	}
	for (;;) {
		/* What the reports saw; accounted for: every old member reported or seen lost. */
		int missing = 0;
		for (int k = 0; k < d->cap; k++) {
			const struct dt_member_report *r = &d->p[k].report;
			if (d->p[k].fd >= 0 && d->p[k].stage == ST_REPORTED && r->lost >= 0 && r->lost < table_n &&
			    r->lost != (int32_t)id->self && !lost_seen[r->lost]) {
				lost_seen[r->lost] = 1;
				snprintf(why[r->lost], DT_MEMBER_WHY_MAX, "%s", r->why);
			}
		}
		for (int i = 0; i < nold; i++)
			missing += old[i] != id->self && !lost_seen[old[i]] && !report_of(d, old[i]);
		int64_t now = dt_now_ns();
		if (missing == 0 || now >= deadline)
			break;
		desk_round(d, (int)((deadline - now) / 1000000) + 1);
	}
	/* The view: the coordinator and the reporters, by table rank (the
	 * lowest first: the next agreement's coordinator). */
	view->step = mine->done_step;
	uint32_t epoch = mine->epoch;
	for (int t = 0; t < table_n; t++) {
		const struct dt_member_report *r = (uint32_t)t == id->self ? mine : report_of(d, (uint32_t)t);
		if (!r)
			continue;
		view->ranks[view->n++] = (uint32_t)t;
		if (r->done_step > view->step)
			view->step = r->done_step;
		if (r->epoch > epoch)
			epoch = r->epoch;
	}
	view->epoch = epoch + 1;
	view->root = 0;
	for (int i = view->n - 1; i >= 0; i--) { /* the first member holding the step */
		const struct dt_member_report *r = view->ranks[i] == id->self ? mine : report_of(d, view->ranks[i]);
		if (r && r->done_step == view->step)
			view->root = (uint32_t)i;
	}
	for (int i = 0; i < nold; i++) {
		if (in_list(view->ranks, view->n, old[i]))
			continue;
		view->lost[view->nlost] = old[i];
		snprintf(view->why[view->nlost], DT_MEMBER_WHY_MAX, "%s",
			 lost_seen[old[i]] ? why[old[i]] : "no report in time");
		view->nlost++;
	}
	const size_t len = dt_member_view_bytes(view);
	uint8_t *plain = dt_xmalloc(len), *buf = dt_xmalloc(len);
	dt_member_view_encode(view, plain);
	for (int k = 0; k < d->cap; k++) {
		struct pending *p = &d->p[k];
		if (p->fd < 0 || p->stage != ST_REPORTED)
			continue;
		memcpy(buf, plain, len); /* encrypt mode seals in place */
		struct dt_err e = DT_ERR_INIT;
		/* A reporter that died since is left to the rendezvous to find. */
		st = p->sec.mode ? dt_frame_send_fd_sealed(p->fd, &p->sec, DT_MSG_MEMBER_VIEW, DT_FRAME_F_REPLY, buf, len,
							  dt_deadline_in(1.0), p->addr, &e)
				 : dt_frame_send_fd(p->fd, DT_MSG_MEMBER_VIEW, DT_FRAME_F_REPLY, 0, buf, len,
						    dt_deadline_in(1.0), p->addr, &e);
		(void)st;
		drop(p);
	}
	free(plain);
	free(buf);
	free(lost_seen);
	free(why);
	return DT_OK;
}

/* ---- a member ---- */

/* The answer's frame: a REFUSE is DT_CONFIG with its reason. */
static enum dt_status refused(struct dt_frame_decoder *dec, const char *name, struct dt_err *err)
{
	struct dt_reason_msg m;
	if (dt_reason_decode(&m, dt_frame_decoder_payload(dec), (size_t)dec->header.length, err))
		return dt_err_prefix(err, "%s: a bad refusal", name);
	return dt_err_set(err, DT_CONFIG, "%s refused this task's membership report: %s", name, m.text);
}

/* 1 when a survivor's whole report (step >= 0) waits on d; never blocks. */
static int survivor_waits(struct dt_member_desk *d)
{
	desk_round(d, 0);
	for (int k = 0; k < d->cap; k++)
		if (d->p[k].fd >= 0 && d->p[k].stage == ST_REPORTED && d->p[k].report.done_step >= 0)
			return 1;
	return 0;
}

/* A dial's stop (net/socket.h), looked at after each failed attempt: the
 * refusals are not waited out (dt_member_report's connect_deadline, kept
 * for a member whose listener is briefly between a rendezvous and its desk)
 * when this task saw the connection with the one dialled closed (`closed`:
 * a member that left the ring alive listens all the same), or when a
 * survivor's report waits on the watched desk (`stopped`): it took the one
 * dialled for lost, as this task is about to, so this task is the next
 * coordinator. */
struct dial_watch {
	struct dt_member_desk *desk;
	int closed;
	int stopped;
};

static int dial_stop(void *arg)
{
	struct dial_watch *w = arg;
	if (!w->stopped && w->desk)
		w->stopped = survivor_waits(w->desk);
	return w->stopped || w->closed;
}

/* How often a wait looks at a watched desk. */
#define WATCH_MS 50

/* Waits until fd has something to read, or `deadline` (the read that
 * follows then fails naming it), or until w says (DT_PEER, *why_not
 * DT_MEMBER_CALLED): a connection waits on w->fd (a peer in its first
 * rendezvous calls this task's own address, so the one asked is no running
 * ring's member, and neither is this task), or a survivor reported to w->desk
 * (it took the one asked for lost). */
static enum dt_status await_answer(int fd, const struct dt_member_watch *w, int64_t deadline, const char *name,
				   int *why_not, struct dt_err *err)
{
	const int wfd = w ? w->fd : -1;
	struct dt_member_desk *desk = w ? w->desk : NULL;
	for (int ms; (wfd >= 0 || desk) && (ms = dt_deadline_ms_left(deadline)) > 0;) {
		struct pollfd pf[2] = { { fd, POLLIN, 0 }, { wfd, POLLIN, 0 } };
		int r = poll(pf, wfd >= 0 ? 2 : 1, desk && ms > WATCH_MS ? WATCH_MS : ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || pf[0].revents)
			break;
		if (wfd >= 0 && (pf[1].revents & POLLIN)) {
			*why_not = DT_MEMBER_CALLED;
			return dt_err_set(err, DT_PEER, "%s did not answer before a peer called this task's own address "
							"(a first rendezvous)", name);
		}
		if (desk && survivor_waits(desk)) {
			*why_not = DT_MEMBER_CALLED;
			return dt_err_set(err, DT_PEER, "%s did not answer, and another member reported to this task "
							"instead", name);
		}
		if (r == 0 && !desk)
			break;
	}
	return DT_OK;
}

/* The challenge–response as the connecting side (net/auth.h). */
static enum dt_status prove(int fd, const struct dt_member_id *id, uint32_t to, const char *name, int64_t deadline,
			    const struct dt_member_watch *watch, int *why_not, struct dt_auth_hs *hs, struct dt_wire_sec *sec,
			    struct dt_err *err)
{
	struct dt_hello h;
	id_hello(id, &h);
	uint8_t msg[DT_AUTH_MSG_MAX];
	size_t n = dt_auth_client_hello(hs, &h, msg);
	enum dt_status st = dt_frame_send_fd(fd, DT_MSG_AUTH_HELLO, 0, 0, msg, n, deadline, name, err);
	if (!st)
		st = await_answer(fd, watch, deadline, name, why_not, err);
	if (st)
		return st;
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_SMALL);
	st = dt_frame_recv_fd(fd, &d, deadline, name, err);
	char why[DT_REASON_MAX];
	if (!st && d.header.type == DT_MSG_REFUSE)
		st = refused(&d, name, err);
	else if (!st && d.header.type != DT_MSG_AUTH_CHALLENGE)
		st = dt_err_set(err, DT_PROTOCOL, "%s answered an auth_hello with %s", name, dt_msg_name(d.header.type));
	else if (!st && dt_auth_client_prove(hs, dt_frame_decoder_payload(&d), (size_t)d.header.length,
					     role_of(&id->peers[to]), id->peers[to].index, msg, sec, why, sizeof(why)))
		st = dt_err_set(err, DT_CONFIG, "the membership report's authentication with %s failed: %s", name, why);
	dt_frame_decoder_release(&d);
	if (!st)
		st = dt_frame_send_fd(fd, DT_MSG_AUTH_PROOF, 0, 0, msg, DT_AUTH_MAC_BYTES, deadline, name, err);
	return st;
}

enum dt_status dt_member_report(const struct dt_member_id *id, uint32_t to, const char *name,
				const struct dt_member_report *mine, int64_t connect_deadline, int64_t deadline,
				const struct dt_member_watch *watch, struct dt_member_view *view, int *why_not,
				struct dt_err *err)
{
	memset(view, 0, sizeof(*view));
	int ignored;
	int *unreachable = why_not ? why_not : &ignored;
	*unreachable = 0;
	if ((int)to >= id->table_n)
		return dt_err_set(err, DT_INTERNAL, "a report to rank %u of a table of %d", to, id->table_n);
	char host[DT_HOST_MAX];
	int port, fd = -1;
	struct dial_watch dw = { watch ? watch->desk : NULL, watch && watch->closed, 0 };
	struct dt_connect_opts opts = { .initial_backoff_s = 0.01, .max_backoff_s = 1.0, .attempt_timeout_s = 5.0,
					.stop = dw.desk || dw.closed ? dial_stop : NULL, .stop_arg = &dw };
	enum dt_status st = dt_sock_split_hostport(id->peers[to].addr, host, sizeof(host), &port, err);
	if (!st && (st = dt_sock_connect(host, port, name, connect_deadline < deadline ? connect_deadline : deadline,
					 &opts, &fd, err)) == DT_PEER) {
		*unreachable = dw.stopped ? DT_MEMBER_CALLED : DT_MEMBER_UNREACHABLE;
		if (dw.stopped)
			dt_err_prefix(err, "another member reported to this task while %s refused connections", name);
		else if (dw.closed)
			dt_err_prefix(err, "%s closed its connection with this task and refuses new ones", name);
	}
	if (st)
		return st;
	struct dt_auth_hs hs;
	struct dt_wire_sec sec = { .mode = DT_WIRE_NONE };
	if (id->auth)
		st = prove(fd, id, to, name, deadline, watch, unreachable, &hs, &sec, err);
	uint8_t buf[DT_MEMBER_REPORT_BYTES];
	dt_member_report_encode(mine, buf);
	if (!st)
		st = sec.mode ? dt_frame_send_fd_sealed(fd, &sec, DT_MSG_MEMBER_REPORT, 0, buf, sizeof(buf), deadline, name, err)
			      : dt_frame_send_fd(fd, DT_MSG_MEMBER_REPORT, 0, 0, buf, sizeof(buf), deadline, name, err);
	if (!st)
		st = await_answer(fd, watch, deadline, name, unreachable, err);
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_SMALL);
	if (sec.mode)
		d.trailer = DT_AUTH_TAG_BYTES;
	if (!st)
		st = dt_frame_recv_fd(fd, &d, deadline, name, err);
	if (!st && sec.mode)
		st = dt_frame_open_fd(&d, &sec, name, err);
	if (!st && d.header.type == DT_MSG_MEMBER_VIEW)
		st = dt_member_view_decode(view, dt_frame_decoder_payload(&d), (size_t)d.header.length, err);
	else if (!st && d.header.type == DT_MSG_REFUSE)
		st = refused(&d, name, err);
	else if (!st)
		st = dt_err_set(err, DT_PEER, "%s answered the membership report with %s: this worker is no longer "
					      "in the ring", name, dt_msg_name(d.header.type));
	dt_frame_decoder_release(&d);
	sodium_memzero(&sec, sizeof(sec));
	dt_sock_close(fd);
	return st;
}
