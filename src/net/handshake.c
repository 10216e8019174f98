#include "net/handshake.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/strutil.h"
#include "net/auth.h"
#include "net/socket.h"

/* ---- incarnation ---- */

static pthread_mutex_t incarnation_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t incarnation_value;
static pid_t incarnation_pid;

static uint64_t draw_random64(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v) && v)
		return v;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, &v, sizeof(v));
		close(fd);
		if (n == (ssize_t)sizeof(v) && v)
			return v;
	}
	/* No entropy source at all: still distinct per start, just guessable. */
	v = (uint64_t)dt_now_ns() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 17 ^ (uint64_t)dt_wall_seconds();
	return v ? v : 1;
}

uint64_t dt_net_incarnation(void)
{
	pthread_mutex_lock(&incarnation_lock);
	/* The pid check gives a forked child its own incarnation. */
	if (incarnation_value == 0 || incarnation_pid != getpid()) {
		incarnation_value = draw_random64();
		incarnation_pid = getpid();
	}
	uint64_t v = incarnation_value;
	pthread_mutex_unlock(&incarnation_lock);
	return v;
}

/* ---- hello ---- */

void dt_hello_init(struct dt_hello *h, const char *role, uint32_t index, uint64_t cluster_fingerprint)
{
	memset(h, 0, sizeof(*h));
	h->protocol_version = DT_PROTOCOL_VERSION;
	h->incarnation = dt_net_incarnation();
	snprintf(h->role, sizeof(h->role), "%s", role);
	h->index = index;
	h->cluster_fingerprint = cluster_fingerprint;
	dt_signature_init(&h->signature);
}

void dt_hello_name(const struct dt_hello *h, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s:%u", h->role, h->index);
}

static const struct dt_sig_var *find_var(const struct dt_signature *s, const char *name)
{
	for (uint32_t i = 0; i < s->count; i++)
		if (strcmp(s->vars[i].name, name) == 0)
			return &s->vars[i];
	return NULL;
}

int dt_signature_diff(const struct dt_signature *a, const char *a_label, const struct dt_signature *b,
		      const char *b_label, char *buf, size_t cap)
{
	char sa[200], sb[200];
	uint32_t n = a->count < b->count ? a->count : b->count;
	for (uint32_t i = 0; i < n; i++) {
		const struct dt_sig_var *va = &a->vars[i], *vb = &b->vars[i];
		if (strcmp(va->name, vb->name) != 0) {
			if (!find_var(b, va->name)) {
				dt_sig_shape_str(va, sa, sizeof(sa));
				dt_fmt(buf, cap, "variable '%s' %s exists on %s but not on %s", va->name, sa, a_label, b_label);
			} else if (!find_var(a, vb->name)) {
				dt_sig_shape_str(vb, sb, sizeof(sb));
				dt_fmt(buf, cap, "variable '%s' %s exists on %s but not on %s", vb->name, sb, b_label, a_label);
			} else {
				dt_fmt(buf, cap, "variables are in a different order: number %u is '%s' on %s but '%s' on %s",
					 i, va->name, a_label, vb->name, b_label);
			}
			return 1;
		}
		int same_shape = va->rank == vb->rank;
		for (unsigned d = 0; same_shape && d < va->rank; d++)
			same_shape = va->dims[d] == vb->dims[d];
		if (!same_shape) {
			dt_sig_shape_str(va, sa, sizeof(sa));
			dt_sig_shape_str(vb, sb, sizeof(sb));
			dt_fmt(buf, cap, "variable '%s' is %s on %s but %s on %s", va->name, sa, a_label, sb, b_label);
			return 1;
		}
		if (va->dtype != vb->dtype) {
			dt_fmt(buf, cap, "variable '%s' is %s on %s but %s on %s", va->name, dt_wire_dtype_name(va->dtype),
				 a_label, dt_wire_dtype_name(vb->dtype), b_label);
			return 1;
		}
	}
	if (a->count != b->count) {
		const struct dt_signature *more = a->count > b->count ? a : b;
		const char *more_label = more == a ? a_label : b_label, *less_label = more == a ? b_label : a_label;
		const struct dt_sig_var *extra = &more->vars[n];
		dt_sig_shape_str(extra, sa, sizeof(sa));
		dt_fmt(buf, cap, "%s has %u variables and %s %u: variable '%s' %s exists on %s but not on %s",
			 a_label, a->count, b_label, b->count, extra->name, sa, more_label, less_label);
		return 1;
	}
	if (cap)
		buf[0] = '\0';
	return 0;
}

uint32_t dt_handshake_check(const struct dt_hello *local, const struct dt_hello *remote, char *buf, size_t cap)
{
	char me[48], them[48];
	dt_hello_name(local, me, sizeof(me));
	dt_hello_name(remote, them, sizeof(them));
	if (remote->protocol_version != local->protocol_version) {
		dt_fmt(buf, cap, "protocol version differs: %s speaks version %u but %s speaks version %u",
			 me, local->protocol_version, them, remote->protocol_version);
		return DT_REFUSE_VERSION;
	}
	if (remote->cluster_fingerprint != local->cluster_fingerprint) {
		dt_fmt(buf, cap,
			 "cluster fingerprint differs: %016llx on %s but %016llx on %s (the tasks were started with different cluster specs)",
			 (unsigned long long)local->cluster_fingerprint, me, (unsigned long long)remote->cluster_fingerprint, them);
		return DT_REFUSE_FINGERPRINT;
	}
	char diff[700];
	if (dt_signature_diff(&local->signature, me, &remote->signature, them, diff, sizeof(diff))) {
		dt_fmt(buf, cap, "model signature differs: %s", diff);
		return DT_REFUSE_SIGNATURE;
	}
	if (cap)
		buf[0] = '\0';
	return 0;
}

enum dt_status dt_handshake_judge(const struct dt_hello *local, const uint8_t *payload, size_t len,
				  struct dt_hello *remote, uint32_t *refuse_code, char *reason, size_t reason_cap,
				  struct dt_err *err)
{
	*refuse_code = 0;
	enum dt_status st = dt_hello_decode(remote, payload, len, err);
	if (st)
		return st;
	*refuse_code = dt_handshake_check(local, remote, reason, reason_cap);
	return DT_OK;
}

/* ---- blocking frame I/O ---- */

enum dt_status dt_frame_send_fd_sealed(int fd, struct dt_wire_sec *sec, uint16_t type, uint32_t flags, uint8_t *payload,
				       size_t len, int64_t deadline, const char *peer, struct dt_err *err)
{
	uint8_t hdr[DT_FRAME_HEADER_SIZE], tag[DT_AUTH_TAG_BYTES];
	struct dt_frame_header h = dt_frame_header_make(type, flags, 0, len);
	dt_frame_header_pack(&h, hdr);
	struct iovec part = { payload, len };
	dt_wire_seal(sec, hdr, &part, len ? 1 : 0, tag);
	struct iovec iov[3] = { { hdr, sizeof(hdr) }, { payload, len }, { tag, sizeof(tag) } };
	if (!len)
		iov[1] = iov[2];
	return dt_sock_sendv_all(fd, iov, len ? 3 : 2, deadline, peer, err);
}

enum dt_status dt_frame_open_fd(struct dt_frame_decoder *d, struct dt_wire_sec *sec, const char *peer,
				struct dt_err *err)
{
	if (dt_wire_open(sec, d->hdr_raw, dt_frame_decoder_payload(d), (size_t)d->header.length, d->tag) == 0)
		return DT_OK;
	return dt_err_set(err, DT_PROTOCOL, "a %s frame from %s failed its authentication check", dt_msg_name(d->header.type),
			  peer);
}

enum dt_status dt_frame_send_fd(int fd, uint16_t type, uint32_t flags, uint64_t request_id, const void *payload,
				size_t len, int64_t deadline, const char *peer, struct dt_err *err)
{
	uint8_t hdr[DT_FRAME_HEADER_SIZE];
	struct dt_frame_header h = dt_frame_header_make(type, flags, request_id, len);
	dt_frame_header_pack(&h, hdr);
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { (void *)(uintptr_t)payload, len } };
	return dt_sock_sendv_all(fd, iov, len ? 2 : 1, deadline, peer, err);
}

enum dt_status dt_frame_recv_fd_some(int fd, struct dt_frame_decoder *d, const char *peer, int *ready,
				     struct dt_err *err)
{
	*ready = 0;
	for (;;) {
		enum dt_frame_event ev = DT_FRAME_NEED_MORE;
		uint8_t tmp[DT_FRAME_HEADER_SIZE]; /* header and trailer bytes */
		uint8_t *where;
		size_t want;
		int in_payload = dt_frame_decoder_window(d, &where, &want);
		if (!in_payload) {
			where = tmp;
			want = dt_frame_decoder_want(d); /* never past the frame's end */
		}
		ssize_t n = recv(fd, where, want, MSG_DONTWAIT);
		if (n > 0) {
			if (in_payload)
				ev = dt_frame_decoder_advance(d, (size_t)n);
			else
				dt_frame_decoder_feed(d, tmp, (size_t)n, &ev);
			if (ev == DT_FRAME_READY) {
				*ready = 1;
				return DT_OK;
			}
			if (ev == DT_FRAME_ERROR)
				return dt_err_set(err, DT_PROTOCOL, "bad frame from %s: %s", peer, d->detail);
			continue;
		}
		if (n == 0) {
			if (dt_frame_decoder_finish(d) != DT_FRAME_OK)
				return dt_err_set(err, DT_PEER, "%s closed the connection: %s", peer, d->detail);
			return dt_err_set(err, DT_PEER, "%s closed the connection", peer);
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return DT_OK;
		return dt_err_set(err, DT_PEER, "cannot receive from %s: %s", peer, strerror(errno));
	}
}

enum dt_status dt_frame_recv_fd(int fd, struct dt_frame_decoder *d, int64_t deadline, const char *peer, struct dt_err *err)
{
	int64_t t0 = dt_now_ns();
	for (;;) {
		int ready;
		enum dt_status st = dt_frame_recv_fd_some(fd, d, peer, &ready, err);
		if (st || ready)
			return st;
		struct pollfd p = { fd, POLLIN, 0 };
		int r = poll(&p, 1, dt_deadline_ms_left(deadline));
		if (r < 0 && errno != EINTR)
			return dt_err_set(err, DT_IO, "poll failed: %s", strerror(errno));
		if (r == 0 && dt_deadline_passed(deadline))
			return dt_err_set(err, DT_TIMEOUT, "deadline exceeded after %.1f s waiting for a frame from %s",
					  (double)(dt_now_ns() - t0) / 1e9, peer);
	}
}

/* ---- client and single-peer server ---- */

static enum dt_status send_hello(int fd, uint16_t type, uint32_t flags, const struct dt_hello *h, int64_t deadline,
				 const char *peer, struct dt_err *err)
{
	size_t len;
	uint8_t *buf = dt_hello_encode_alloc(h, &len);
	enum dt_status st = dt_frame_send_fd(fd, type, flags, 0, buf, len, deadline, peer, err);
	free(buf);
	return st;
}

static void send_reason(int fd, uint16_t type, uint32_t code, const char *text, int64_t deadline, const char *peer)
{
	uint8_t buf[DT_REASON_PAYLOAD_MAX];
	size_t len = dt_reason_encode(code, text, buf, sizeof(buf));
	/* Best effort: the peer may already be gone, and we are closing anyway. */
	if (dt_frame_send_fd(fd, type, DT_FRAME_F_REPLY, 0, buf, len, deadline, peer, NULL) != DT_OK)
		return;
}

/* The blocking handshakes speak only the unauthenticated protocol (handshake.h). */
static enum dt_status refuse_secret(const char *fn, const char *peer, struct dt_err *err)
{
	return dt_err_set(err, DT_INTERNAL,
			  "%s with %s: this hello carries a cluster secret, but the blocking handshake is for tests "
			  "without one (connect with dt_conn_connect, which authenticates)",
			  fn, peer);
}

enum dt_status dt_handshake_client(int fd, const struct dt_hello *local, const char *peer, const char *expect_role,
				   uint32_t expect_index, int64_t deadline, struct dt_hello *remote, struct dt_err *err)
{
	memset(remote, 0, sizeof(*remote));
	if (local->auth)
		return refuse_secret("dt_handshake_client", peer, err);
	enum dt_status st = send_hello(fd, DT_MSG_HELLO, 0, local, deadline, peer, err);
	if (st)
		return dt_err_prefix(err, "handshake");
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, DT_MSG_CAP_HANDSHAKE);
	st = dt_frame_recv_fd(fd, &d, deadline, peer, err);
	if (st) {
		if (d.error == DT_FRAME_BAD_VERSION)
			st = dt_err_set(err, DT_CONFIG, "%s speaks protocol version %u, this side speaks version %u",
					peer, d.header.version, DT_PROTOCOL_VERSION);
		dt_frame_decoder_release(&d);
		return dt_err_prefix(err, "handshake");
	}
	const uint8_t *payload = dt_frame_decoder_payload(&d);
	size_t len = (size_t)d.header.length;
	char reason[DT_REASON_MAX];
	switch (d.header.type) {
	case DT_MSG_HELLO_OK:
		st = dt_hello_decode(remote, payload, len, err);
		if (st) {
			dt_err_prefix(err, "handshake with %s", peer);
			break;
		}
		if (dt_handshake_check(local, remote, reason, sizeof(reason))) {
			st = dt_err_set(err, DT_CONFIG, "handshake with %s: %s", peer, reason);
			break;
		}
		if (expect_role && (strcmp(remote->role, expect_role) != 0 || remote->index != expect_index))
			st = dt_err_set(err, DT_CONFIG, "handshake with %s: the task there is %s:%u, not %s:%u (are the cluster addresses right?)",
					peer, remote->role, remote->index, expect_role, expect_index);
		break;
	case DT_MSG_REFUSE:
	case DT_MSG_ERROR: {
		struct dt_reason_msg r;
		st = dt_reason_decode(&r, payload, len, err);
		if (st) {
			dt_err_prefix(err, "handshake with %s: bad %s", peer, dt_msg_name(d.header.type));
			break;
		}
		if (d.header.type == DT_MSG_REFUSE)
			st = dt_err_set(err, DT_CONFIG, "%s refused the connection: %s", peer, r.text);
		else
			st = dt_err_set(err, dt_wire_error_to_status(r.code), "handshake with %s failed there: %s", peer, r.text);
		break;
	}
	default:
		st = dt_err_set(err, DT_PROTOCOL, "handshake with %s: expected hello_ok or refuse, got %s", peer,
				dt_msg_name(d.header.type));
	}
	dt_frame_decoder_release(&d);
	if (st) {
		dt_hello_release(remote);
		memset(remote, 0, sizeof(*remote));
	}
	return st;
}

uint64_t dt_handshake_hello_cap(const struct dt_hello *local)
{
	uint64_t own = dt_hello_encode(local, NULL, 0) + DT_ROLE_MAX;
	uint64_t cap = 2 * own + DT_HELLO_CAP_SLACK;
	return cap < DT_MSG_CAP_HANDSHAKE ? cap : DT_MSG_CAP_HANDSHAKE;
}

uint64_t dt_handshake_pending_budget(uint64_t hello_cap)
{
	return 2 * hello_cap > DT_NET_PENDING_BYTES ? 2 * hello_cap : DT_NET_PENDING_BYTES;
}

enum dt_status dt_handshake_server(int fd, const struct dt_hello *local, const char *peer, int64_t deadline,
				   struct dt_hello *remote, struct dt_err *err)
{
	memset(remote, 0, sizeof(*remote));
	if (local->auth)
		return refuse_secret("dt_handshake_server", peer, err);
	struct dt_frame_decoder d;
	dt_frame_decoder_init(&d, dt_handshake_hello_cap(local));
	enum dt_status st = dt_frame_recv_fd(fd, &d, deadline, peer, err);
	char reason[DT_REASON_MAX];
	if (st) {
		if (d.error == DT_FRAME_BAD_VERSION) {
			char me[48];
			dt_hello_name(local, me, sizeof(me));
			snprintf(reason, sizeof(reason), "protocol version differs: %s speaks version %u but the peer speaks version %u",
				 me, DT_PROTOCOL_VERSION, d.header.version);
			send_reason(fd, DT_MSG_REFUSE, DT_REFUSE_VERSION, reason, deadline, peer);
			st = dt_err_set(err, DT_CONFIG, "refused %s: %s", peer, reason);
		}
		dt_frame_decoder_release(&d);
		return dt_err_prefix(err, "handshake");
	}
	if (d.header.type != DT_MSG_HELLO) {
		snprintf(reason, sizeof(reason), "expected a hello, got %s", dt_msg_name(d.header.type));
		send_reason(fd, DT_MSG_ERROR, DT_WIRE_ERR_PROTOCOL, reason, deadline, peer);
		dt_frame_decoder_release(&d);
		return dt_err_set(err, DT_PROTOCOL, "handshake with %s: %s", peer, reason);
	}
	uint32_t code = 0;
	st = dt_handshake_judge(local, dt_frame_decoder_payload(&d), (size_t)d.header.length, remote, &code, reason,
				sizeof(reason), err);
	dt_frame_decoder_release(&d);
	if (st) {
		send_reason(fd, DT_MSG_ERROR, DT_WIRE_ERR_PROTOCOL, err ? err->msg : "bad hello", deadline, peer);
		dt_hello_release(remote);
		memset(remote, 0, sizeof(*remote));
		return dt_err_prefix(err, "handshake with %s", peer);
	}
	if (code) {
		send_reason(fd, DT_MSG_REFUSE, code, reason, deadline, peer);
		dt_hello_release(remote);
		memset(remote, 0, sizeof(*remote));
		return dt_err_set(err, DT_CONFIG, "refused %s: %s", peer, reason);
	}
	st = send_hello(fd, DT_MSG_HELLO_OK, DT_FRAME_F_REPLY, local, deadline, peer, err);
	if (st) {
		dt_hello_release(remote);
		memset(remote, 0, sizeof(*remote));
		return dt_err_prefix(err, "handshake");
	}
	return DT_OK;
}
