#include "distribute/ps_positions.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "net/bytes.h"
#include "net/messages.h"

void dt_ps_position_block_encode(int trainer, int trainers, int64_t epoch, int64_t taken,
				 uint8_t out[DT_PS_POSITION_BLOCK])
{
	dt_put_u32le(out, DT_PS_POSITION_VERSION);
	dt_put_u32le(out + 4, (uint32_t)trainer);
	dt_put_u32le(out + 8, (uint32_t)trainers);
	dt_put_u32le(out + 12, 0);
	dt_put_u64le(out + 16, (uint64_t)epoch);
	dt_put_u64le(out + 24, (uint64_t)taken);
}

static void reset(struct dt_ps_positions *t, int trainers)
{
	free(t->at);
	t->trainers = trainers;
	t->at = dt_xcalloc((size_t)trainers, sizeof(*t->at));
	for (int j = 0; j < trainers; j++)
		t->at[j].epoch = -1;
}

enum dt_status dt_ps_positions_note(struct dt_ps_positions *t, const uint8_t *p, size_t len, int64_t step,
				    struct dt_err *err)
{
	if (len != DT_PS_POSITION_BLOCK)
		return dt_err_set(err, DT_PROTOCOL, "position block of %zu bytes, not %u", len, DT_PS_POSITION_BLOCK);
	const uint32_t version = dt_get_u32le(p), j = dt_get_u32le(p + 4), m = dt_get_u32le(p + 8);
	const uint64_t epoch = dt_get_u64le(p + 16), taken = dt_get_u64le(p + 24);
	if (version != DT_PS_POSITION_VERSION)
		return dt_err_set(err, DT_PROTOCOL, "position block version %u, this ps knows %u", version,
				  DT_PS_POSITION_VERSION);
	if (m < 1 || m > DT_PS_POSITIONS_MAX_TRAINERS || j >= m || dt_get_u32le(p + 12) != 0 ||
	    epoch >= (uint64_t)DT_PS_POSITIONS_MAX_VALUE || taken >= (uint64_t)DT_PS_POSITIONS_MAX_VALUE)
		return dt_err_set(err, DT_PROTOCOL, "position block out of range (trainer %u of %u, epoch %llu, taken %llu)",
				  j, m, (unsigned long long)epoch, (unsigned long long)taken);
	if ((uint32_t)t->trainers != m)
		reset(t, (int)m);
	t->at[j] = (struct dt_ps_position){ (int64_t)epoch, (int64_t)taken, step };
	return DT_OK;
}

uint8_t *dt_ps_positions_encode(const struct dt_ps_positions *t, size_t *len)
{
	*len = DT_PS_POSITIONS_HEADER + (size_t)t->trainers * DT_PS_POSITIONS_RECORD;
	uint8_t *out = dt_xmalloc(*len);
	dt_put_u32le(out, (uint32_t)t->trainers);
	dt_put_u32le(out + 4, 0);
	for (int j = 0; j < t->trainers; j++) {
		uint8_t *r = out + DT_PS_POSITIONS_HEADER + (size_t)j * DT_PS_POSITIONS_RECORD;
		dt_put_u64le(r, (uint64_t)t->at[j].epoch);
		dt_put_u64le(r + 8, (uint64_t)t->at[j].taken);
		dt_put_u64le(r + 16, (uint64_t)t->at[j].step);
	}
	return out;
}

enum dt_status dt_ps_positions_decode(const uint8_t *p, size_t len, struct dt_ps_positions *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len < DT_PS_POSITIONS_HEADER)
		return dt_err_set(err, DT_PROTOCOL, "ps_positions reply of %zu bytes, shorter than its header", len);
	const uint32_t m = dt_get_u32le(p);
	if (m > DT_PS_POSITIONS_MAX_TRAINERS || dt_get_u32le(p + 4) != 0 ||
	    len != DT_PS_POSITIONS_HEADER + (size_t)m * DT_PS_POSITIONS_RECORD)
		return dt_err_set(err, DT_PROTOCOL, "ps_positions reply of %zu bytes for %u trainers", len, m);
	if (m == 0)
		return DT_OK;
	struct dt_ps_position *at = dt_xcalloc(m, sizeof(*at));
	for (uint32_t j = 0; j < m; j++) {
		const uint8_t *r = p + DT_PS_POSITIONS_HEADER + (size_t)j * DT_PS_POSITIONS_RECORD;
		const int64_t e = (int64_t)dt_get_u64le(r), t = (int64_t)dt_get_u64le(r + 8), s = (int64_t)dt_get_u64le(r + 16);
		if (e < -1 || e >= DT_PS_POSITIONS_MAX_VALUE || t < 0 || t >= DT_PS_POSITIONS_MAX_VALUE || s < 0) {
			free(at);
			return dt_err_set(err, DT_PROTOCOL, "ps_positions record %u out of range", j);
		}
		at[j] = (struct dt_ps_position){ e, t, s };
	}
	out->trainers = (int)m;
	out->at = at;
	return DT_OK;
}

void dt_ps_positions_release(struct dt_ps_positions *t)
{
	free(t->at);
	memset(t, 0, sizeof(*t));
}

enum dt_status dt_ps_positions_get(struct dt_conn *c, struct dt_ps_positions *out, int64_t deadline, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	const size_t cap = DT_PS_POSITIONS_HEADER + (size_t)DT_PS_POSITIONS_MAX_TRAINERS * DT_PS_POSITIONS_RECORD;
	uint8_t *buf = dt_xmalloc(cap);
	size_t len = 0;
	enum dt_status st = dt_conn_call(c, DT_MSG_PS_POSITIONS, NULL, 0, buf, cap, &len, deadline, err);
	if (!st)
		st = dt_ps_positions_decode(buf, len, out, err);
	free(buf);
	return st ? dt_err_prefix(err, "cannot read the trainers' positions from %s", dt_conn_peer(c)) : DT_OK;
}
