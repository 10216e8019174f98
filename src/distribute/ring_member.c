/*
 * ring_member.c — the membership agreement of an elastic ring
 * (distribute/membership.h): the coordinator collecting reports on its
 * address, a member reporting, and the two frames' wire forms.
 */
#include "distribute/membership.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "net/bytes.h"
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

/* ---- the coordinator ---- */

struct pending {
	int fd;
	struct dt_frame_decoder dec;
	int reported; /* 1: `report` holds its report and fd awaits the view */
	struct dt_member_report report;
};

static void drop(struct pending *p)
{
	dt_sock_close(p->fd);
	p->fd = -1;
	dt_frame_decoder_release(&p->dec);
}

/* Reads what pending connection p has sent; a bad or foreign report closes it. */
static void read_report(struct pending *p, uint64_t fingerprint, int table_n)
{
	char peer[64];
	dt_sock_peer_name(p->fd, peer, sizeof(peer));
	struct dt_err e = DT_ERR_INIT;
	int ready = 0;
	if (dt_frame_recv_fd_some(p->fd, &p->dec, peer, &ready, &e)) {
		drop(p);
		return;
	}
	if (!ready)
		return;
	if (p->dec.header.type != DT_MSG_MEMBER_REPORT ||
	    dt_member_report_decode(&p->report, dt_frame_decoder_payload(&p->dec), (size_t)p->dec.header.length, &e) ||
	    p->report.fingerprint != fingerprint || (int)p->report.rank <= 0 || (int)p->report.rank >= table_n) {
		/* Not a member of this cluster's ring (a stranger, another cluster, the
		 * coordinator's own rank): refused by closing, it learns nothing. */
		drop(p);
		return;
	}
	p->reported = 1;
}

static int in_list(const uint32_t *v, int n, uint32_t x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

enum dt_status dt_member_coordinate(int *lfd, const char *addr, const uint32_t *old, int nold, int table_n,
				    const struct dt_member_report *mine, int64_t deadline, struct dt_member_view *view,
				    struct dt_err *err)
{
	memset(view, 0, sizeof(*view));
	if (table_n > DT_MEMBER_MAX || nold > table_n)
		return dt_err_set(err, DT_CONFIG, "an elastic ring holds at most %d workers, not %d", DT_MEMBER_MAX,
				  table_n);
	if (*lfd < 0) {
		char host[DT_HOST_MAX];
		int port;
		enum dt_status st = dt_sock_split_hostport(addr, host, sizeof(host), &port, err);
		if (!st)
			st = dt_sock_listen(host, port, 64, lfd, NULL, err);
		if (st)
			return dt_err_prefix(err, "cannot take the reports of the surviving workers");
	}
	struct pending *pend = dt_xcalloc((size_t)table_n * 2 + 8, sizeof(*pend));
	int npend = 0, cap = table_n * 2 + 8;
	/* lost_seen[r]: someone saw table rank r fail; why[r]: how */
	int *lost_seen = dt_xcalloc((size_t)table_n, sizeof(int));
	char(*why)[DT_MEMBER_WHY_MAX] = dt_xcalloc((size_t)table_n, sizeof(*why));
	if (mine->lost >= 0 && mine->lost < table_n) {
		lost_seen[mine->lost] = 1;
		snprintf(why[mine->lost], DT_MEMBER_WHY_MAX, "%s", mine->why);
	}
	for (;;) {
		/* Accounted for: every old member reported or seen lost. */
		int missing = 0;
		for (int i = 1; i < nold; i++) {
			int have = lost_seen[old[i]];
			for (int k = 0; k < npend && !have; k++)
				have = pend[k].fd >= 0 && pend[k].reported && pend[k].report.rank == old[i];
			missing += !have;
		}
		int64_t now = dt_now_ns();
		if (missing == 0 || now >= deadline)
			break;
		struct pollfd pf[1 + DT_MEMBER_MAX * 2 + 8];
		int np = 0;
		pf[np++] = (struct pollfd){ *lfd, POLLIN, 0 };
		int idx[DT_MEMBER_MAX * 2 + 8];
		for (int k = 0; k < npend; k++)
			if (pend[k].fd >= 0 && !pend[k].reported) {
				idx[np] = k;
				pf[np++] = (struct pollfd){ pend[k].fd, POLLIN, 0 };
			}
		int wait_ms = (int)((deadline - now) / 1000000) + 1;
		if (poll(pf, (nfds_t)np, wait_ms) < 0 && errno != EINTR)
			break;
		for (int j = 1; j < np; j++)
			if (pf[j].revents)
				read_report(&pend[idx[j]], mine->fingerprint, table_n);
		if (pf[0].revents & POLLIN) {
			for (;;) {
				int fd = -1;
				struct dt_err e = DT_ERR_INIT;
				if (dt_sock_accept(*lfd, &fd, NULL, 0, &e) || fd < 0)
					break;
				if (npend == cap) { /* a flood of strangers: no room for more */
					dt_sock_close(fd);
					continue;
				}
				pend[npend].fd = fd;
				dt_frame_decoder_init(&pend[npend].dec, DT_MSG_CAP_SMALL);
				npend++;
			}
		}
		/* What the new reports saw; a rank that reported twice (restarted)
		 * keeps its newest connection. */
		for (int k = 0; k < npend; k++) {
			if (pend[k].fd < 0 || !pend[k].reported)
				continue;
			const struct dt_member_report *r = &pend[k].report;
			if (r->lost > 0 && r->lost < table_n && !lost_seen[r->lost]) {
				lost_seen[r->lost] = 1;
				snprintf(why[r->lost], DT_MEMBER_WHY_MAX, "%s", r->why);
			}
			for (int j = 0; j < k; j++)
				if (pend[j].fd >= 0 && pend[j].reported && pend[j].report.rank == r->rank)
					drop(&pend[j]);
		}
	}
	/* The view: the coordinator, then the reporters by table rank. */
	view->ranks[view->n++] = old[0];
	view->step = mine->done_step;
	uint32_t epoch = mine->epoch;
	for (int t = 0; t < table_n; t++)
		for (int k = 0; k < npend; k++)
			if (pend[k].fd >= 0 && pend[k].reported && (int)pend[k].report.rank == t &&
			    !in_list(view->ranks, view->n, (uint32_t)t)) {
				view->ranks[view->n++] = (uint32_t)t;
				if (pend[k].report.done_step > view->step)
					view->step = pend[k].report.done_step;
				if (pend[k].report.epoch > epoch)
					epoch = pend[k].report.epoch;
			}
	view->epoch = epoch + 1;
	view->root = 0;
	if (mine->done_step != view->step)
		for (int i = 1; i < view->n; i++)
			for (int k = 0; k < npend; k++)
				if (pend[k].fd >= 0 && pend[k].reported && pend[k].report.rank == view->ranks[i] &&
				    pend[k].report.done_step == view->step && view->root == 0)
					view->root = (uint32_t)i;
	for (int i = 1; i < nold; i++) {
		if (in_list(view->ranks, view->n, old[i]))
			continue;
		view->lost[view->nlost] = old[i];
		if (lost_seen[old[i]])
			snprintf(view->why[view->nlost], DT_MEMBER_WHY_MAX, "%s", why[old[i]]);
		else
			snprintf(view->why[view->nlost], DT_MEMBER_WHY_MAX, "no report in time");
		view->nlost++;
	}
	uint8_t *buf = dt_xmalloc(dt_member_view_bytes(view));
	size_t len = dt_member_view_encode(view, buf);
	for (int k = 0; k < npend; k++) {
		if (pend[k].fd >= 0 && pend[k].reported) {
			struct dt_err e = DT_ERR_INIT;
			/* A reporter that died since is left to the rendezvous to find. */
			enum dt_status st = dt_frame_send_fd(pend[k].fd, DT_MSG_MEMBER_VIEW, 0, 0, buf, len,
							     dt_deadline_in(1.0), "a surviving worker", &e);
			(void)st;
		}
		if (pend[k].fd >= 0)
			drop(&pend[k]);
	}
	free(buf);
	free(pend);
	free(lost_seen);
	free(why);
	return DT_OK;
}

/* ---- a member ---- */

enum dt_status dt_member_report(const char *addr, const char *name, const struct dt_member_report *mine,
				int64_t deadline, struct dt_member_view *view, struct dt_err *err)
{
	memset(view, 0, sizeof(*view));
	char host[DT_HOST_MAX];
	int port, fd = -1;
	enum dt_status st = dt_sock_split_hostport(addr, host, sizeof(host), &port, err);
	if (!st)
		st = dt_sock_connect(host, port, name, deadline, NULL, &fd, err);
	if (st)
		return st;
	uint8_t buf[DT_MEMBER_REPORT_BYTES];
	dt_member_report_encode(mine, buf);
	st = dt_frame_send_fd(fd, DT_MSG_MEMBER_REPORT, 0, 0, buf, sizeof(buf), deadline, name, err);
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_SMALL);
	if (!st)
		st = dt_frame_recv_fd(fd, &d, deadline, name, err);
	if (!st && d.header.type == DT_MSG_MEMBER_VIEW)
		st = dt_member_view_decode(view, dt_frame_decoder_payload(&d), (size_t)d.header.length, err);
	else if (!st)
		st = dt_err_set(err, DT_PEER, "%s answered the membership report with %s: this worker is no longer "
					      "in the ring", name, dt_msg_name(d.header.type));
	dt_frame_decoder_release(&d);
	dt_sock_close(fd);
	return st;
}
