#include "distribute/ring_wire.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32c.h"
#include "net/bytes.h"
#include "net/messages.h"

const char *dt_coll_kind_name(unsigned kind)
{
	switch (kind) {
	case DT_COLL_ALLREDUCE: return "allreduce";
	case DT_COLL_BROADCAST: return "broadcast";
	case DT_COLL_BARRIER: return "barrier";
	case DT_COLL_ALLGATHER: return "allgather";
	default: return "unknown collective";
	}
}

size_t dt_coll_start_encode(const struct dt_coll_start *s, uint8_t *buf)
{
	size_t n = strnlen(s->name, DT_COLL_NAME_WIRE_MAX);
	dt_put_u64le(buf + 0, s->seq);
	dt_put_u8(buf + 8, s->kind);
	dt_put_u8(buf + 9, s->dtype);
	dt_put_u16le(buf + 10, (uint16_t)n);
	dt_put_u32le(buf + 12, s->root);
	dt_put_u64le(buf + 16, s->count);
	dt_put_u32le(buf + 24, s->rank);
	dt_put_u32le(buf + 28, s->nranks);
	memcpy(buf + DT_COLL_START_FIXED, s->name, n);
	return DT_COLL_START_FIXED + n;
}

enum dt_status dt_coll_start_decode(struct dt_coll_start *out, const uint8_t *p, size_t len, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len < DT_COLL_START_FIXED)
		return dt_err_set(err, DT_PROTOCOL, "coll_start payload is %zu bytes, shorter than its %u fixed bytes",
				  len, DT_COLL_START_FIXED);
	size_t n = dt_get_u16le(p + 10);
	if (n > DT_COLL_NAME_WIRE_MAX)
		return dt_err_set(err, DT_PROTOCOL, "coll_start name of %zu bytes is longer than %u", n,
				  DT_COLL_NAME_WIRE_MAX);
	if (len != DT_COLL_START_FIXED + n)
		return dt_err_set(err, DT_PROTOCOL, "coll_start payload is %zu bytes but a name of %zu bytes needs %zu",
				  len, n, DT_COLL_START_FIXED + n);
	const uint8_t *name = p + DT_COLL_START_FIXED;
	for (size_t i = 0; i < n; i++)
		if (name[i] < 0x20 || name[i] > 0x7e)
			return dt_err_set(err, DT_PROTOCOL, "coll_start name has a non-printable byte 0x%02x at %zu",
					  name[i], i);
	out->seq = dt_get_u64le(p + 0);
	out->kind = dt_get_u8(p + 8);
	out->dtype = dt_get_u8(p + 9);
	out->root = dt_get_u32le(p + 12);
	out->count = dt_get_u64le(p + 16);
	out->rank = dt_get_u32le(p + 24);
	out->nranks = dt_get_u32le(p + 28);
	if (out->kind < DT_COLL_ALLREDUCE || out->kind > DT_COLL_ALLGATHER)
		return dt_err_set(err, DT_PROTOCOL, "coll_start has unknown kind %u", out->kind);
	memcpy(out->name, name, n);
	out->name[n] = '\0';
	return DT_OK;
}

void dt_coll_stall_encode(const struct dt_coll_stall *s, uint8_t buf[DT_COLL_STALL_BYTES])
{
	dt_put_u32le(buf + 0, s->rank);
	dt_put_u32le(buf + 4, s->blamed);
	dt_put_u64le(buf + 8, s->waited_ns);
}

enum dt_status dt_coll_stall_decode(struct dt_coll_stall *out, const uint8_t *p, size_t len, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len != DT_COLL_STALL_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "coll_stall payload is %zu bytes, expected %u", len,
				  DT_COLL_STALL_BYTES);
	out->rank = dt_get_u32le(p + 0);
	out->blamed = dt_get_u32le(p + 4);
	out->waited_ns = dt_get_u64le(p + 8);
	return DT_OK;
}

void dt_coll_ref_encode(const struct dt_coll_ref *r, uint8_t buf[DT_COLL_REF_BYTES])
{
	dt_put_u64le(buf + 0, r->address);
	dt_put_u64le(buf + 8, r->length);
}

enum dt_status dt_coll_ref_decode(struct dt_coll_ref *out, const uint8_t *p, size_t len, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len != DT_COLL_REF_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "coll_ref payload is %zu bytes, expected %u", len, DT_COLL_REF_BYTES);
	out->address = dt_get_u64le(p + 0);
	out->length = dt_get_u64le(p + 8);
	return DT_OK;
}

void dt_coll_peer_encode(const struct dt_coll_peer *peer, uint8_t buf[DT_COLL_PEER_BYTES])
{
	dt_put_u32le(buf + 0, peer->pid);
	dt_put_u32le(buf + 4, 0);
	dt_put_u64le(buf + 8, peer->pid_ns);
	memcpy(buf + 16, peer->boot_id, 16);
	dt_put_u64le(buf + 32, peer->token_address);
	memcpy(buf + 40, peer->token, DT_COLL_TOKEN_BYTES);
}

enum dt_status dt_coll_peer_decode(struct dt_coll_peer *out, const uint8_t *p, size_t len, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len != DT_COLL_PEER_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "coll_peer payload is %zu bytes, expected %u", len,
				  DT_COLL_PEER_BYTES);
	if (dt_get_u32le(p + 4) != 0)
		return dt_err_set(err, DT_PROTOCOL, "coll_peer bytes 4..7 are 0x%08x, must be zero", dt_get_u32le(p + 4));
	out->pid = dt_get_u32le(p + 0);
	out->pid_ns = dt_get_u64le(p + 8);
	memcpy(out->boot_id, p + 16, 16);
	out->token_address = dt_get_u64le(p + 32);
	memcpy(out->token, p + 40, DT_COLL_TOKEN_BYTES);
	return DT_OK;
}

enum dt_status dt_coll_header_parse(const uint8_t b[DT_FRAME_HEADER_SIZE], struct dt_frame_header *h,
				    struct dt_err *err)
{
	memset(h, 0, sizeof(*h));
	if (b[0] != DT_FRAME_MAGIC0 || b[1] != DT_FRAME_MAGIC1 || b[2] != DT_FRAME_MAGIC2 || b[3] != DT_FRAME_MAGIC3)
		return dt_err_set(err, DT_PROTOCOL, "bad magic %02x %02x %02x %02x", b[0], b[1], b[2], b[3]);
	uint32_t want = dt_get_u32le(b + 28), got = dt_crc32c(b, 28);
	if (want != got)
		return dt_err_set(err, DT_PROTOCOL, "header crc 0x%08x does not match 0x%08x", want, got);
	h->version = dt_get_u16le(b + 4);
	h->type = dt_get_u16le(b + 6);
	h->flags = dt_get_u32le(b + 8);
	h->request_id = dt_get_u64le(b + 12);
	h->length = dt_get_u64le(b + 20);
	if (h->version != DT_PROTOCOL_VERSION)
		return dt_err_set(err, DT_PROTOCOL, "protocol version %u, this side speaks %u", h->version,
				  DT_PROTOCOL_VERSION);
	if (h->flags != 0)
		return dt_err_set(err, DT_PROTOCOL, "flags 0x%x on a %s frame (must be 0)", h->flags,
				  dt_msg_name(h->type));
	if (h->type < DT_MSG_COLLECTIVE_FIRST || h->type > DT_MSG_COLLECTIVE_LAST)
		return dt_err_set(err, DT_PROTOCOL, "unexpected message type %u (%s) on a ring link", h->type,
				  dt_msg_name(h->type));
	if (h->type == DT_MSG_COLL_DATA)
		return dt_err_set(err, DT_PROTOCOL,
				  "coll_data with a 32-byte frame header (it travels with its 16-byte data header: a "
				  "peer built from another dtrain?)");
	/* The type's cap, looked up in the catalogue once per type, not per
	 * frame (its linear search was a tenth of a small all-reduce's
	 * instructions). known: 0 not looked up yet, 1 caps[] holds it, 2 not
	 * in the catalogue; threads that race store the same values. */
	enum { NTYPES = DT_MSG_COLLECTIVE_LAST - DT_MSG_COLLECTIVE_FIRST + 1 };
	static _Atomic uint64_t caps[NTYPES];
	static _Atomic uint8_t known[NTYPES];
	const unsigned t = h->type - DT_MSG_COLLECTIVE_FIRST;
	unsigned k = atomic_load_explicit(&known[t], memory_order_acquire);
	if (!k) {
		const struct dt_msg_info *info = dt_msg_info(h->type);
		if (info)
			atomic_store_explicit(&caps[t], info->max_payload, memory_order_relaxed);
		k = info ? 1 : 2;
		atomic_store_explicit(&known[t], (uint8_t)k, memory_order_release);
	}
	if (k == 2)
		return dt_err_set(err, DT_PROTOCOL, "unexpected message type %u (%s) on a ring link", h->type,
				  dt_msg_name(h->type));
	uint64_t cap = atomic_load_explicit(&caps[t], memory_order_relaxed);
	if (h->length > cap)
		return dt_err_set(err, DT_PROTOCOL, "%s frame of %llu bytes exceeds its cap of %llu", dt_msg_name(h->type),
				  (unsigned long long)h->length, (unsigned long long)cap);
	return DT_OK;
}

void dt_coll_data_head_pack(uint64_t seq, uint64_t len, uint8_t out[DT_COLL_DATA_HEAD_SIZE])
{
	DT_ASSERT(len <= UINT32_MAX);
	dt_put_u8(out + 0, DT_COLL_DATA_MAGIC0);
	dt_put_u8(out + 1, DT_COLL_DATA_MAGIC1);
	dt_put_u16le(out + 2, 0);
	dt_put_u32le(out + 4, (uint32_t)seq);
	dt_put_u32le(out + 8, (uint32_t)len);
	dt_put_u32le(out + 12, dt_crc32c(out, 12));
}

enum dt_status dt_coll_data_head_parse(const uint8_t b[DT_COLL_DATA_HEAD_SIZE], uint64_t seq,
				       struct dt_frame_header *h, struct dt_err *err)
{
	memset(h, 0, sizeof(*h));
	if (b[0] != DT_COLL_DATA_MAGIC0 || b[1] != DT_COLL_DATA_MAGIC1)
		return dt_err_set(err, DT_PROTOCOL, "bad data header magic %02x %02x", b[0], b[1]);
	uint32_t want = dt_get_u32le(b + 12), got = dt_crc32c(b, 12);
	if (want != got)
		return dt_err_set(err, DT_PROTOCOL, "data header crc 0x%08x does not match 0x%08x", want, got);
	if (dt_get_u16le(b + 2) != 0)
		return dt_err_set(err, DT_PROTOCOL, "data header bytes 2..3 are 0x%04x, must be zero", dt_get_u16le(b + 2));
	*h = dt_frame_header_make(DT_MSG_COLL_DATA, 0, (seq & ~(uint64_t)UINT32_MAX) | dt_get_u32le(b + 4),
				  dt_get_u32le(b + 8));
	return DT_OK;
}

void dt_coll_describe(const struct dt_coll_start *s, char *buf, size_t cap)
{
	switch (s->kind) {
	case DT_COLL_ALLREDUCE:
		snprintf(buf, cap, "allreduce '%s' (#%llu, %llu %s)", s->name, (unsigned long long)s->seq,
			 (unsigned long long)s->count, dt_wire_dtype_name(s->dtype));
		break;
	case DT_COLL_BROADCAST:
		snprintf(buf, cap, "broadcast '%s' (#%llu, %llu bytes from rank %u)", s->name,
			 (unsigned long long)s->seq, (unsigned long long)s->count, s->root);
		break;
	case DT_COLL_ALLGATHER:
		snprintf(buf, cap, "allgather '%s' (#%llu, %llu bytes a rank)", s->name, (unsigned long long)s->seq,
			 (unsigned long long)s->count);
		break;
	default:
		snprintf(buf, cap, "%s '%s' (#%llu)", dt_coll_kind_name(s->kind), s->name, (unsigned long long)s->seq);
	}
}
