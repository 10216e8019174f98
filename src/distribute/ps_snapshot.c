#include "distribute/ps_snapshot.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "base/alloc.h"
#include "net/bytes.h"

size_t dt_ps_snapshot_bytes(uint64_t count, uint32_t num_slots)
{
	uint64_t per = (uint64_t)(1 + num_slots) * sizeof(float);
	if (num_slots > DT_PS_SNAPSHOT_MAX_SLOTS || count > (SIZE_MAX - DT_PS_SNAPSHOT_HEADER) / per)
		return 0;
	return (size_t)(DT_PS_SNAPSHOT_HEADER + count * per);
}

void dt_ps_snapshot_encode_header(uint64_t offset, uint64_t count, int64_t updates, uint32_t num_slots,
				  uint8_t out[DT_PS_SNAPSHOT_HEADER])
{
	dt_put_u64le(out, offset);
	dt_put_u64le(out + 8, count);
	dt_put_u64le(out + 16, (uint64_t)updates);
	dt_put_u32le(out + 24, num_slots);
	dt_put_u32le(out + 28, 0);
}

enum dt_status dt_ps_snapshot_decode(const uint8_t *p, size_t len, struct dt_ps_snapshot *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len < DT_PS_SNAPSHOT_HEADER)
		return dt_err_set(err, DT_PROTOCOL, "snapshot of %zu bytes is shorter than its %u-byte header", len,
				  DT_PS_SNAPSHOT_HEADER);
	out->range.offset = dt_get_u64le(p);
	out->range.count = dt_get_u64le(p + 8);
	uint64_t updates = dt_get_u64le(p + 16);
	out->num_slots = dt_get_u32le(p + 24);
	if (updates > INT64_MAX)
		return dt_err_set(err, DT_PROTOCOL, "snapshot with an update count over 2^63");
	out->updates = (int64_t)updates;
	if (out->num_slots > DT_PS_SNAPSHOT_MAX_SLOTS || dt_get_u32le(p + 28) != 0)
		return dt_err_set(err, DT_PROTOCOL, "snapshot with %u slots per element (at most %u) or a nonzero pad",
				  out->num_slots, DT_PS_SNAPSHOT_MAX_SLOTS);
	if (out->range.offset > UINT64_MAX - out->range.count)
		return dt_err_set(err, DT_PROTOCOL, "snapshot range overflows");
	size_t want = dt_ps_snapshot_bytes(out->range.count, out->num_slots);
	if (want == 0 || len != want)
		return dt_err_set(err, DT_PROTOCOL, "snapshot of %zu bytes does not hold %llu elements with %u slot(s)",
				  len, (unsigned long long)out->range.count, out->num_slots);
	out->values = p + DT_PS_SNAPSHOT_HEADER;
	out->slots = out->values + out->range.count * sizeof(float);
	return DT_OK;
}

enum dt_status dt_ps_set_step_decode(const uint8_t *p, size_t len, int64_t *step, struct dt_err *err)
{
	uint64_t v;
	enum dt_status st = dt_ps_u64_decode(p, len, (uint64_t)INT64_MAX, &v, err);
	if (st)
		return dt_err_prefix(err, "ps_set_step");
	*step = (int64_t)v;
	return DT_OK;
}

/* ---- ps side ---- */

static void free_payload(void *arg, enum dt_status st)
{
	(void)st;
	free(arg);
}

enum dt_status dt_ps_snapshot_reply(struct dt_conn *c, uint64_t request_id, const float *params,
				    const struct dt_optimizer *opt, uint64_t offset, uint64_t count, int64_t updates,
				    struct dt_err *err)
{
	uint32_t ns = (uint32_t)opt->num_slots;
	size_t bytes = dt_ps_snapshot_bytes(count, ns);
	DT_ASSERT(bytes > 0 && offset + count <= opt->count);
	uint8_t *buf = dt_xmalloc(bytes);
	dt_ps_snapshot_encode_header(offset, count, updates, ns, buf);
	uint8_t *at = buf + DT_PS_SNAPSHOT_HEADER;
	memcpy(at, params + offset, count * sizeof(float));
	for (uint32_t k = 0; k < ns; k++)
		memcpy(at + (k + 1) * count * sizeof(float), opt->slots + (size_t)k * opt->count + offset,
		       count * sizeof(float));
	struct iovec part = { buf, bytes };
	enum dt_status st = dt_conn_sendv_ref(c, DT_MSG_PS_SNAPSHOT, DT_FRAME_F_REPLY, request_id, &part, 1,
					      free_payload, buf, err);
	if (st)
		free(buf);
	return st;
}

enum dt_status dt_ps_snapshot_apply(const struct dt_ps_snapshot *m, float *params, struct dt_optimizer *opt,
				    struct dt_err *err)
{
	if (m->num_slots != (uint32_t)opt->num_slots)
		return dt_err_set(err, DT_CONFIG, "restore carries %u optimizer slot(s) per element, this ps's optimizer "
						  "has %d", m->num_slots, opt->num_slots);
	if (m->range.offset > opt->count || m->range.count > opt->count - m->range.offset)
		return dt_err_set(err, DT_CONFIG, "restore range [%llu, +%llu) is outside the %zu parameters",
				  (unsigned long long)m->range.offset, (unsigned long long)m->range.count, opt->count);
	size_t n = (size_t)m->range.count * sizeof(float);
	memcpy(params + m->range.offset, m->values, n);
	for (uint32_t k = 0; k < m->num_slots; k++)
		memcpy(opt->slots + (size_t)k * opt->count + m->range.offset, m->slots + k * n, n);
	return DT_OK;
}

/* ---- trainer side ---- */

enum dt_status dt_ps_snapshot_pull(struct dt_conn *c, const struct dt_shard *sh, struct dt_ps_state_bufs *b,
				   int64_t *updates, int64_t deadline, struct dt_err *err)
{
	uint8_t req[DT_PS_RANGE_BYTES];
	dt_put_u64le(req, sh->offset);
	dt_put_u64le(req + 8, sh->count);
	size_t cap = dt_ps_snapshot_bytes(sh->count, b->num_slots);
	DT_ASSERT(cap > 0 && sh->offset + sh->count <= b->num_params);
	uint8_t *reply = dt_xmalloc(cap);
	size_t len = 0;
	struct dt_ps_snapshot m;
	enum dt_status st = dt_conn_call(c, DT_MSG_PS_SNAPSHOT, req, sizeof(req), reply, cap, &len, deadline, err);
	if (!st && (st = dt_ps_snapshot_decode(reply, len, &m, err)))
		dt_err_prefix(err, "%s", dt_conn_peer(c));
	if (!st && (m.range.offset != sh->offset || m.range.count != sh->count || m.num_slots != b->num_slots))
		st = dt_err_set(err, DT_PROTOCOL, "%s answered a snapshot of [%zu, +%zu) with [%llu, +%llu), %u slot(s)",
				dt_conn_peer(c), sh->offset, sh->count, (unsigned long long)m.range.offset,
				(unsigned long long)m.range.count, m.num_slots);
	if (!st) {
		size_t n = sh->count * sizeof(float);
		memcpy(b->params + sh->offset, m.values, n);
		for (uint32_t k = 0; k < b->num_slots; k++)
			memcpy(b->slots + (size_t)k * b->num_params + sh->offset, m.slots + k * n, n);
		*updates = m.updates;
	}
	free(reply);
	return st;
}

enum dt_status dt_ps_snapshot_push(struct dt_conn *c, const struct dt_shard *sh, const struct dt_ps_state_bufs *b,
				   int64_t updates, int64_t deadline, struct dt_err *err)
{
	size_t bytes = dt_ps_snapshot_bytes(sh->count, b->num_slots);
	DT_ASSERT(bytes > 0 && sh->offset + sh->count <= b->num_params);
	uint8_t *buf = dt_xmalloc(bytes);
	dt_ps_snapshot_encode_header(sh->offset, sh->count, updates, b->num_slots, buf);
	size_t n = sh->count * sizeof(float);
	memcpy(buf + DT_PS_SNAPSHOT_HEADER, b->params + sh->offset, n);
	for (uint32_t k = 0; k < b->num_slots; k++)
		memcpy(buf + DT_PS_SNAPSHOT_HEADER + (k + 1) * n, b->slots + (size_t)k * b->num_params + sh->offset, n);
	enum dt_status st = dt_conn_call(c, DT_MSG_PS_RESTORE, buf, bytes, NULL, 0, NULL, deadline, err);
	free(buf);
	return st;
}

enum dt_status dt_ps_set_step(struct dt_conn *c, int64_t step, int64_t deadline, struct dt_err *err)
{
	uint8_t req[8];
	dt_put_u64le(req, (uint64_t)step);
	return dt_conn_call(c, DT_MSG_PS_SET_STEP, req, sizeof(req), NULL, 0, NULL, deadline, err);
}
