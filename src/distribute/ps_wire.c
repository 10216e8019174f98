#include "distribute/ps_wire.h"

#include <string.h>

#include "net/bytes.h"

/* every model variable's name fits the handshake's signature */
_Static_assert(DT_VAR_NAME_MAX - 1 <= DT_SIG_NAME_MAX, "variable names longer than the signature carries");

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t dt_ps_cluster_fingerprint(const struct dt_cluster *cl)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (int j = 0; j < DT_JOB_COUNT; j++) {
		const struct dt_cluster_job *job = &cl->jobs[j];
		if (j == DT_JOB_EVALUATOR || job->slots == 0)
			continue;
		const char *name = dt_job_name((enum dt_job)j);
		h = fnv1a(h, name, strlen(name) + 1);
		for (int i = 0; i < job->slots; i++) {
			const char *a = job->addrs[i] ? job->addrs[i] : "";
			h = fnv1a(h, a, strlen(a) + 1);
		}
	}
	return h;
}

enum dt_status dt_ps_signature_add_vars(struct dt_signature *sig, const struct dt_variable *vars, int n,
					struct dt_err *err)
{
	for (int i = 0; i < n; i++) {
		uint64_t dims[DT_MAX_DIMS];
		for (int d = 0; d < vars[i].ndim; d++)
			dims[d] = (uint64_t)vars[i].shape[d];
		enum dt_status st = dt_signature_add(sig, vars[i].name, DT_WIRE_F32, (unsigned)vars[i].ndim, dims, err);
		if (st)
			return st;
	}
	return DT_OK;
}

const char *dt_ps_role_name(enum dt_job job)
{
	return dt_job_name(job);
}

/* ---- payload codecs ---- */

static float f32_of(uint32_t bits)
{
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

static uint32_t bits_of_f32(float f)
{
	uint32_t b;
	memcpy(&b, &f, sizeof(b));
	return b;
}

static double f64_of(uint64_t bits)
{
	double d;
	memcpy(&d, &bits, sizeof(d));
	return d;
}

static uint64_t bits_of_f64(double d)
{
	uint64_t b;
	memcpy(&b, &d, sizeof(b));
	return b;
}

/* Checks that `len` is exactly header + count * 4 without overflowing. */
static enum dt_status exact_values(const char *what, size_t len, size_t header, uint64_t count, struct dt_err *err)
{
	if (len < header)
		return dt_err_set(err, DT_PROTOCOL, "%s of %zu bytes is shorter than its %zu-byte header", what, len,
				  header);
	if (count > (len - header) / sizeof(float) || (len - header) != count * sizeof(float))
		return dt_err_set(err, DT_PROTOCOL, "%s of %zu bytes does not hold %llu values after its %zu-byte header",
				  what, len, (unsigned long long)count, header);
	return DT_OK;
}

enum dt_status dt_ps_range_decode(const uint8_t *p, size_t len, int values, struct dt_ps_range *out,
				  struct dt_err *err)
{
	if (len < DT_PS_RANGE_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "payload of %zu bytes is shorter than a range (16)", len);
	out->offset = dt_get_u64le(p);
	out->count = dt_get_u64le(p + 8);
	return exact_values("range payload", len, DT_PS_RANGE_BYTES, values ? out->count : 0, err);
}

static int lr_ok(float lr)
{
	return lr >= 0.0f && lr < 1e6f;
}

enum dt_status dt_ps_push_decode(const uint8_t *p, size_t len, struct dt_ps_push *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len < DT_PS_PUSH_HEADER)
		return dt_err_set(err, DT_PROTOCOL, "push of %zu bytes is shorter than its 24-byte header", len);
	out->range.offset = dt_get_u64le(p);
	out->range.count = dt_get_u64le(p + 8);
	out->lr = f32_of(dt_get_u32le(p + 16));
	if (!lr_ok(out->lr))
		return dt_err_set(err, DT_PROTOCOL, "learning rate out of range");
	enum dt_status st = exact_values("push", len, DT_PS_PUSH_HEADER, out->range.count, err);
	if (!st)
		out->grads = (const float *)(const void *)(p + DT_PS_PUSH_HEADER);
	return st;
}

void dt_ps_status_encode(const struct dt_ps_status_msg *m, uint8_t out[DT_PS_STATUS_BYTES])
{
	dt_put_u32le(out, m->flags);
	dt_put_u32le(out + 4, 0);
	dt_put_u64le(out + 8, (uint64_t)m->global_step);
}

enum dt_status dt_ps_status_decode(const uint8_t *p, size_t len, struct dt_ps_status_msg *out, struct dt_err *err)
{
	if (len != DT_PS_STATUS_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "ps_status reply of %zu bytes, expected %u", len, DT_PS_STATUS_BYTES);
	out->flags = dt_get_u32le(p);
	uint64_t step = dt_get_u64le(p + 8);
	if (step > INT64_MAX)
		return dt_err_set(err, DT_PROTOCOL, "ps_status reply with a global step over 2^63");
	out->global_step = (int64_t)step;
	return DT_OK;
}

enum dt_status dt_ps_u64_decode(const uint8_t *p, size_t len, uint64_t max, uint64_t *out, struct dt_err *err)
{
	if (len != 8)
		return dt_err_set(err, DT_PROTOCOL, "payload of %zu bytes, expected 8", len);
	*out = dt_get_u64le(p);
	if (*out > max)
		return dt_err_set(err, DT_PROTOCOL, "value %llu is over %llu", (unsigned long long)*out,
				  (unsigned long long)max);
	return DT_OK;
}

/* ---- sync ---- */

static int timeout_ok(double s)
{
	return s > 0 && s <= DT_PS_SYNC_MAX_TIMEOUT_S;
}

void dt_ps_sync_config_encode(const struct dt_ps_sync_config *c, uint8_t out[DT_PS_SYNC_CONFIG_BYTES])
{
	dt_put_u32le(out, c->replicas_to_aggregate);
	dt_put_u32le(out + 4, c->total_replicas);
	dt_put_u64le(out + 8, bits_of_f64(c->step_timeout_s));
	dt_put_u64le(out + 16, bits_of_f64(c->first_step_timeout_s));
}

enum dt_status dt_ps_sync_config_decode(const uint8_t *p, size_t len, struct dt_ps_sync_config *out,
					struct dt_err *err)
{
	if (len != DT_PS_SYNC_CONFIG_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "sync config of %zu bytes, expected %u", len, DT_PS_SYNC_CONFIG_BYTES);
	out->replicas_to_aggregate = dt_get_u32le(p);
	out->total_replicas = dt_get_u32le(p + 4);
	out->step_timeout_s = f64_of(dt_get_u64le(p + 8));
	out->first_step_timeout_s = f64_of(dt_get_u64le(p + 16));
	if (out->total_replicas < 1 || out->total_replicas > DT_PS_SYNC_MAX_REPLICAS ||
	    out->replicas_to_aggregate < 1 || out->replicas_to_aggregate > out->total_replicas)
		return dt_err_set(err, DT_PROTOCOL, "sync config aggregates %u of %u replicas (1 <= aggregate <= total <= %u)",
				  out->replicas_to_aggregate, out->total_replicas, DT_PS_SYNC_MAX_REPLICAS);
	if (!timeout_ok(out->step_timeout_s) || !timeout_ok(out->first_step_timeout_s))
		return dt_err_set(err, DT_PROTOCOL, "sync config timeouts out of range (0 < s <= 1e7)");
	return DT_OK;
}

void dt_ps_sync_push_header_encode(const struct dt_ps_push *m, uint8_t out[DT_PS_SYNC_PUSH_HEADER])
{
	dt_put_u64le(out, m->range.offset);
	dt_put_u64le(out + 8, m->range.count);
	dt_put_u64le(out + 16, (uint64_t)m->step);
	dt_put_u32le(out + 24, bits_of_f32(m->lr));
	dt_put_u32le(out + 28, 0);
}

enum dt_status dt_ps_sync_push_decode(const uint8_t *p, size_t len, struct dt_ps_push *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len < DT_PS_SYNC_PUSH_HEADER)
		return dt_err_set(err, DT_PROTOCOL, "sync push of %zu bytes is shorter than its 32-byte header", len);
	out->range.offset = dt_get_u64le(p);
	out->range.count = dt_get_u64le(p + 8);
	uint64_t step = dt_get_u64le(p + 16);
	out->lr = f32_of(dt_get_u32le(p + 24));
	if (step > INT64_MAX)
		return dt_err_set(err, DT_PROTOCOL, "sync push for step %llu (over 2^63)", (unsigned long long)step);
	out->step = (int64_t)step;
	if (!lr_ok(out->lr))
		return dt_err_set(err, DT_PROTOCOL, "learning rate out of range");
	enum dt_status st = exact_values("sync push", len, DT_PS_SYNC_PUSH_HEADER, out->range.count, err);
	if (!st)
		out->grads = (const float *)(const void *)(p + DT_PS_SYNC_PUSH_HEADER);
	return st;
}

void dt_ps_sync_push_reply_encode(const struct dt_ps_sync_push_reply *m, uint8_t out[DT_PS_SYNC_PUSH_REPLY_BYTES])
{
	dt_put_u32le(out, m->flags);
	dt_put_u32le(out + 4, 0);
	dt_put_u64le(out + 8, (uint64_t)m->step);
}

enum dt_status dt_ps_sync_push_reply_decode(const uint8_t *p, size_t len, struct dt_ps_sync_push_reply *out,
					    struct dt_err *err)
{
	if (len != DT_PS_SYNC_PUSH_REPLY_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "sync push reply of %zu bytes, expected %u", len,
				  DT_PS_SYNC_PUSH_REPLY_BYTES);
	out->flags = dt_get_u32le(p);
	uint64_t step = dt_get_u64le(p + 8);
	if (step > INT64_MAX || (out->flags & ~DT_PS_SYNC_PUSH_DROPPED))
		return dt_err_set(err, DT_PROTOCOL, "sync push reply with unknown flags or a step over 2^63");
	out->step = (int64_t)step;
	return DT_OK;
}

void dt_ps_sync_pull_encode(const struct dt_ps_sync_pull *m, uint8_t out[DT_PS_SYNC_PULL_BYTES])
{
	dt_put_u64le(out, m->range.offset);
	dt_put_u64le(out + 8, m->range.count);
	dt_put_u64le(out + 16, (uint64_t)m->after);
}

enum dt_status dt_ps_sync_pull_decode(const uint8_t *p, size_t len, struct dt_ps_sync_pull *out, struct dt_err *err)
{
	if (len != DT_PS_SYNC_PULL_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "sync pull of %zu bytes, expected %u", len, DT_PS_SYNC_PULL_BYTES);
	out->range.offset = dt_get_u64le(p);
	out->range.count = dt_get_u64le(p + 8);
	out->after = (int64_t)dt_get_u64le(p + 16);
	if (out->after < -1)
		return dt_err_set(err, DT_PROTOCOL, "sync pull after step %lld (must be >= -1)", (long long)out->after);
	return DT_OK;
}

void dt_ps_sync_pull_reply_encode_header(int64_t step, uint64_t held_ns, uint8_t out[DT_PS_SYNC_PULL_REPLY_HEADER])
{
	dt_put_u64le(out, (uint64_t)step);
	dt_put_u64le(out + 8, held_ns);
}

enum dt_status dt_ps_sync_pull_reply_decode(const uint8_t *p, size_t len, uint64_t count,
					    struct dt_ps_sync_pull_reply *out, struct dt_err *err)
{
	enum dt_status st = exact_values("sync pull reply", len, DT_PS_SYNC_PULL_REPLY_HEADER, count, err);
	if (st)
		return st;
	uint64_t step = dt_get_u64le(p);
	if (step > INT64_MAX)
		return dt_err_set(err, DT_PROTOCOL, "sync pull reply at step %llu (over 2^63)", (unsigned long long)step);
	out->step = (int64_t)step;
	out->held_ns = dt_get_u64le(p + 8);
	out->values = (const float *)(const void *)(p + DT_PS_SYNC_PULL_REPLY_HEADER);
	return DT_OK;
}

/* ---- replicas ---- */

size_t dt_ps_replica_setup_encode(const struct dt_ps_replica_setup *m, uint8_t out[DT_PS_REPLICA_SETUP_MAX])
{
	size_t plen = strnlen(m->problem, DT_PS_REPLICA_PROBLEM_MAX);
	dt_put_u32le(out, m->replicas);
	dt_put_u32le(out + 4, m->first_shard);
	dt_put_u32le(out + 8, m->total_shards);
	dt_put_u32le(out + 12, m->batch_size);
	dt_put_u64le(out + 16, m->seed);
	dt_put_u32le(out + 24, bits_of_f32(m->dropout));
	dt_put_u32le(out + 28, (uint32_t)plen);
	memcpy(out + DT_PS_REPLICA_SETUP_HEADER, m->problem, plen);
	return DT_PS_REPLICA_SETUP_HEADER + plen;
}

enum dt_status dt_ps_replica_setup_decode(const uint8_t *p, size_t len, struct dt_ps_replica_setup *out,
					  struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len < DT_PS_REPLICA_SETUP_HEADER)
		return dt_err_set(err, DT_PROTOCOL, "replica setup of %zu bytes is shorter than its 32-byte header", len);
	out->replicas = dt_get_u32le(p);
	out->first_shard = dt_get_u32le(p + 4);
	out->total_shards = dt_get_u32le(p + 8);
	out->batch_size = dt_get_u32le(p + 12);
	out->seed = dt_get_u64le(p + 16);
	out->dropout = f32_of(dt_get_u32le(p + 24));
	uint32_t plen = dt_get_u32le(p + 28);
	/* 0 bytes: no problem by name, the program's own data (in_graph.h's source) */
	if (plen > DT_PS_REPLICA_PROBLEM_MAX || len != DT_PS_REPLICA_SETUP_HEADER + plen)
		return dt_err_set(err, DT_PROTOCOL, "replica setup of %zu bytes with a problem name of %u bytes", len, plen);
	for (uint32_t i = 0; i < plen; i++) {
		uint8_t ch = p[DT_PS_REPLICA_SETUP_HEADER + i];
		if (ch < 0x21 || ch > 0x7e)
			return dt_err_set(err, DT_PROTOCOL, "replica setup: problem name is not printable ASCII");
	}
	memcpy(out->problem, p + DT_PS_REPLICA_SETUP_HEADER, plen);
	if (out->replicas < 1 || out->replicas > DT_PS_REPLICA_MAX_PER_TASK || out->total_shards < 1 ||
	    out->total_shards > DT_PS_SYNC_MAX_REPLICAS || out->first_shard > out->total_shards - out->replicas ||
	    out->replicas > out->total_shards)
		return dt_err_set(err, DT_PROTOCOL, "replica setup: shards %u..%u of %u are out of range", out->first_shard,
				  out->first_shard + out->replicas - 1, out->total_shards);
	if (out->batch_size < 1 || out->batch_size > (1u << 20))
		return dt_err_set(err, DT_PROTOCOL, "replica setup: batch size %u out of range", out->batch_size);
	if (!(out->dropout >= 0.0f && out->dropout < 1.0f))
		return dt_err_set(err, DT_PROTOCOL, "replica setup: dropout out of range");
	return DT_OK;
}

void dt_ps_replica_step_encode_header(int64_t step, uint64_t count, uint8_t out[DT_PS_REPLICA_STEP_HEADER])
{
	dt_put_u64le(out, (uint64_t)step);
	dt_put_u64le(out + 8, count);
}

static enum dt_status want_count_ok(const char *what, uint64_t count, uint64_t want, struct dt_err *err)
{
	if (count != want)
		return dt_err_set(err, DT_PROTOCOL, "%s carries %llu values, the model has %llu", what,
				  (unsigned long long)count, (unsigned long long)want);
	return DT_OK;
}

enum dt_status dt_ps_replica_step_decode(const uint8_t *p, size_t len, uint64_t want_count,
					 struct dt_ps_replica_step *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (len < DT_PS_REPLICA_STEP_HEADER)
		return dt_err_set(err, DT_PROTOCOL, "replica step of %zu bytes is shorter than its 16-byte header", len);
	uint64_t step = dt_get_u64le(p);
	out->count = dt_get_u64le(p + 8);
	if (step > INT64_MAX)
		return dt_err_set(err, DT_PROTOCOL, "replica step %llu (over 2^63)", (unsigned long long)step);
	out->step = (int64_t)step;
	enum dt_status st = exact_values("replica step", len, DT_PS_REPLICA_STEP_HEADER, out->count, err);
	if (!st)
		st = want_count_ok("replica step", out->count, want_count, err);
	if (!st)
		out->values = (const float *)(const void *)(p + DT_PS_REPLICA_STEP_HEADER);
	return st;
}

size_t dt_ps_replica_reply_encode_header(const struct dt_ps_replica_figures *f, uint64_t count, int text,
					 uint8_t out[DT_PS_REPLICA_REPLY_TEXT_HEADER])
{
	dt_put_u64le(out, bits_of_f64(f->loss_sum));
	dt_put_u32le(out + 8, f->correct);
	dt_put_u32le(out + 12, f->examples);
	dt_put_u64le(out + 16, count);
	if (!text)
		return DT_PS_REPLICA_REPLY_HEADER;
	dt_put_u32le(out + 24, f->counted);
	dt_put_u32le(out + 28, f->seqs_correct);
	dt_put_u64le(out + 32, bits_of_f64(f->nll_sum));
	dt_put_u64le(out + 40, bits_of_f64(f->bleu_sum));
	dt_put_u32le(out + 48, f->bleu_batches);
	dt_put_u32le(out + 52, 0);
	return DT_PS_REPLICA_REPLY_TEXT_HEADER;
}

enum dt_status dt_ps_replica_reply_decode(const uint8_t *p, size_t len, uint64_t want_count, int text,
					  struct dt_ps_replica_step *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	const size_t header = text ? DT_PS_REPLICA_REPLY_TEXT_HEADER : DT_PS_REPLICA_REPLY_HEADER;
	if (len < header)
		return dt_err_set(err, DT_PROTOCOL, "replica reply of %zu bytes is shorter than its %zu-byte header", len,
				  header);
	struct dt_ps_replica_figures *f = &out->fig;
	f->loss_sum = f64_of(dt_get_u64le(p));
	f->correct = dt_get_u32le(p + 8);
	f->examples = dt_get_u32le(p + 12);
	out->count = dt_get_u64le(p + 16);
	if (text) {
		f->counted = dt_get_u32le(p + 24);
		f->seqs_correct = dt_get_u32le(p + 28);
		f->nll_sum = f64_of(dt_get_u64le(p + 32));
		f->bleu_sum = f64_of(dt_get_u64le(p + 40));
		f->bleu_batches = dt_get_u32le(p + 48);
	}
	const uint32_t of = f->counted > 0 ? f->counted : f->examples;
	if (f->correct > of)
		return dt_err_set(err, DT_PROTOCOL, "replica reply: %u correct of %u %s", f->correct, of,
				  f->counted > 0 ? "tokens" : "examples");
	if (f->seqs_correct > f->examples || f->bleu_batches > DT_PS_REPLICA_MAX_PER_TASK)
		return dt_err_set(err, DT_PROTOCOL, "replica reply: %u of %u sequences right, %u BLEU batches (at most %u)",
				  f->seqs_correct, f->examples, f->bleu_batches, DT_PS_REPLICA_MAX_PER_TASK);
	enum dt_status st = exact_values("replica reply", len, header, out->count, err);
	if (!st)
		st = want_count_ok("replica reply", out->count, want_count, err);
	if (!st)
		out->values = (const float *)(const void *)(p + header);
	return st;
}

/* ---- row-sparse pushes and pulls ---- */

void dt_ps_rows_header_encode(const struct dt_ps_rows_msg *m, int push, uint8_t out[DT_PS_ROWS_HEADER])
{
	dt_put_u64le(out, m->range.offset);
	dt_put_u64le(out + 8, m->range.count);
	dt_put_u64le(out + 16, (uint64_t)m->step);
	if (push) {
		dt_put_u32le(out + 24, bits_of_f32(m->lr));
		dt_put_u32le(out + 28, m->n);
	} else {
		dt_put_u32le(out + 24, m->n);
		dt_put_u32le(out + 28, 0);
	}
}

uint32_t dt_ps_rows_at(const struct dt_ps_rows_msg *m, uint32_t i)
{
	return dt_get_u32le(m->rows + 4 * (size_t)i);
}

enum dt_status dt_ps_rows_decode(const uint8_t *p, size_t len, int push, uint64_t shard_rows,
				 struct dt_ps_rows_msg *out, struct dt_err *err)
{
	const char *what = push ? "row push" : "row pull";
	memset(out, 0, sizeof(*out));
	if (len < DT_PS_ROWS_HEADER)
		return dt_err_set(err, DT_PROTOCOL, "%s of %zu bytes is shorter than its 32-byte header", what, len);
	out->range.offset = dt_get_u64le(p);
	out->range.count = dt_get_u64le(p + 8);
	out->step = (int64_t)dt_get_u64le(p + 16);
	if (push) {
		out->lr = f32_of(dt_get_u32le(p + 24));
		out->n = dt_get_u32le(p + 28);
		if (!lr_ok(out->lr))
			return dt_err_set(err, DT_PROTOCOL, "%s: learning rate out of range", what);
	} else {
		out->n = dt_get_u32le(p + 24);
		if (dt_get_u32le(p + 28) != 0)
			return dt_err_set(err, DT_PROTOCOL, "%s: reserved word is not zero", what);
	}
	if (out->step < -1)
		return dt_err_set(err, DT_PROTOCOL, "%s: step %lld is below -1", what, (long long)out->step);
	if (shard_rows == 0 || out->range.count % shard_rows != 0)
		return dt_err_set(err, DT_PROTOCOL, "%s: a range of %llu elements is not %llu whole rows", what,
				  (unsigned long long)out->range.count, (unsigned long long)shard_rows);
	out->width = out->range.count / shard_rows;
	if (out->n > shard_rows)
		return dt_err_set(err, DT_PROTOCOL, "%s of %u rows for a shard of %llu rows", what, out->n,
				  (unsigned long long)shard_rows);
	/* n <= shard_rows and n * width <= count: no product below overflows. */
	const uint64_t want = DT_PS_ROWS_HEADER + 4ull * out->n + (push ? 4ull * out->n * out->width : 0);
	if (len != want)
		return dt_err_set(err, DT_PROTOCOL, "%s of %zu bytes for %u rows of %llu (expected %llu)", what, len, out->n,
				  (unsigned long long)out->width, (unsigned long long)want);
	out->rows = p + DT_PS_ROWS_HEADER;
	for (uint32_t i = 0; i < out->n; i++) {
		const uint32_t r = dt_ps_rows_at(out, i);
		if (r >= shard_rows)
			return dt_err_set(err, DT_PROTOCOL, "%s: row index %u out of range [0, %llu) of the shard", what, r,
					  (unsigned long long)shard_rows);
		if (i > 0 && r <= dt_ps_rows_at(out, i - 1))
			return dt_err_set(err, DT_PROTOCOL, "%s: row index %u after %u (rows must be strictly ascending)",
					  what, r, dt_ps_rows_at(out, i - 1));
	}
	if (push) /* 4-byte aligned: the payload is 8-byte aligned, the header 32 and the rows 4 n bytes */
		out->values = (const float *)(const void *)(p + DT_PS_ROWS_HEADER + 4 * (size_t)out->n);
	return DT_OK;
}

enum dt_status dt_ps_pull_rows_reply_decode(const uint8_t *p, size_t len, uint64_t n, uint64_t width,
					    struct dt_ps_sync_pull_reply *out, struct dt_err *err)
{
	if (width != 0 && n > UINT64_MAX / 4 / width)
		return dt_err_set(err, DT_PROTOCOL, "row pull reply of %llu rows of %llu is too large",
				  (unsigned long long)n, (unsigned long long)width);
	return dt_ps_sync_pull_reply_decode(p, len, n * width, out, err);
}
