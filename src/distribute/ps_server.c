#include "distribute/ps_server.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "distribute/ps_positions.h"
#include "distribute/ps_snapshot.h"
#include "distribute/ps_wire.h"
#include "net/bytes.h"
#include "net/congestion.h"
#include "net/conn.h"
#include "net/server.h"
#include "nn/optimizer.h"

struct held_shard {
	size_t offset, count;
	struct dt_ps_sync_shard rule; /* the same range, and how pushes update it */
	size_t rows;      /* of its variable's first axis: count / rows elements each */
	int initialized;
	int64_t updates;  /* pushes applied: Adam's bias-correction step */
};

struct dt_ps_server {
	struct dt_ps_server_config cfg;
	struct dt_server *server;
	float *params;               /* (num_params), only this server's shards are used */
	struct dt_optimizer opt;     /* slots over (num_params) too */
	struct held_shard *shards;   /* the shards this server holds */
	int nshards, ninitialized;
	int64_t global_step;
	int ended;
	struct dt_loop *loop;
	int async_used;              /* a PS_PUSH or PS_STEP came: no synchronous training on this ps */
	struct dt_ps_sync *sync;     /* the synchronous side (distribute/ps_sync.h) */
	struct dt_timer sync_timer;  /* fires at the open step's deadline */
	struct dt_ps_server_stats stats;
	float *dense;                /* (largest shard) a row push densified: momentum, Adam, synchronous */
	char name[16];               /* "ps:1" */
	struct dt_ps_positions positions; /* ps:0: each asynchronous trainer's data position (ps_positions.h) */
};

static struct held_shard *find_shard(struct dt_ps_server *s, uint64_t offset, uint64_t count)
{
	for (int i = 0; i < s->nshards; i++)
		if (s->shards[i].offset == offset && s->shards[i].count == count)
			return &s->shards[i];
	return NULL;
}

static void refuse(struct dt_ps_server *s, struct dt_conn *c, const struct dt_frame_header *h, enum dt_status st,
		   const char *what)
{
	s->stats.refused_requests++;
	dt_warn("refused %s from %s: %s", dt_msg_name(h->type), dt_conn_peer(c), what);
	(void)dt_conn_reply_error(c, h->request_id, st, "%s: %s", s->name, what);
}

/* A failed reply closes the conn and the loop reports it through on_close;
 * here it is only worth a debug line. */
static void replied(struct dt_conn *c, enum dt_status st)
{
	if (st)
		dt_debug("reply to %s not sent (%s); the connection closes", dt_conn_peer(c), dt_status_message(st));
}

static void reply_empty(struct dt_conn *c, const struct dt_frame_header *h)
{
	replied(c, dt_conn_send(c, h->type, DT_FRAME_F_REPLY, h->request_id, NULL, 0, NULL));
}

/* Decodes the (offset, count) that starts INIT/PULL/PUSH payloads and finds
 * its shard; checks that `len` is exactly header + count floats (0 floats for PULL). */
static struct held_shard *shard_of(struct dt_ps_server *s, struct dt_conn *c, const struct dt_frame_header *h,
				   const uint8_t *p, size_t header, int with_values)
{
	if (h->length < DT_PS_RANGE_BYTES) {
		refuse(s, c, h, DT_PROTOCOL, "payload shorter than a range");
		return NULL;
	}
	uint64_t offset = dt_get_u64le(p), count = dt_get_u64le(p + 8);
	struct held_shard *sh = find_shard(s, offset, count);
	char what[160];
	if (!sh) {
		snprintf(what, sizeof(what), "holds no shard [%llu, %llu)", (unsigned long long)offset,
			 (unsigned long long)(offset + count));
		refuse(s, c, h, DT_CONFIG, what);
		return NULL;
	}
	uint64_t want = header + (with_values ? count * sizeof(float) : 0);
	if (h->length != want) {
		snprintf(what, sizeof(what), "%s of %llu bytes for a shard of %llu elements (expected %llu)",
			 dt_msg_name(h->type), (unsigned long long)h->length, (unsigned long long)count,
			 (unsigned long long)want);
		refuse(s, c, h, DT_PROTOCOL, what);
		return NULL;
	}
	return sh;
}

static int from_chief(const struct dt_ps_server *s, struct dt_conn *c)
{
	const struct dt_hello *r = dt_conn_remote(c);
	return r && strcmp(r->role, s->cfg.chief_role) == 0 && r->index == s->cfg.chief_index;
}

/* Asynchronous requests on a ps that trains synchronously are refused;
 * otherwise they make the ps asynchronous for good. */
static int refuse_async(struct dt_ps_server *s, struct dt_conn *c, const struct dt_frame_header *h)
{
	if (dt_ps_sync_configured(s->sync)) {
		refuse(s, c, h, DT_CONFIG, "trains synchronously: start every trainer with the same --sync");
		return 1;
	}
	s->async_used = 1;
	return 0;
}

static void on_sync_deadline(struct dt_loop *loop, struct dt_timer *t, void *arg)
{
	struct dt_ps_server *s = arg;
	/* A failure is reported by whoever runs the server (dt_ps_server_failure). */
	if (dt_ps_sync_check(s->sync, dt_now_ns()) == DT_OK && dt_ps_sync_deadline(s->sync) != INT64_MAX)
		dt_timer_start(loop, t, dt_ps_sync_deadline(s->sync));
}

static void arm_sync_timer(struct dt_ps_server *s, struct dt_loop *loop)
{
	int64_t d = dt_ps_sync_deadline(s->sync);
	if (d == INT64_MAX)
		dt_timer_stop(loop, &s->sync_timer);
	else if (!dt_timer_active(&s->sync_timer) || s->sync_timer.when != d)
		dt_timer_start(loop, &s->sync_timer, d);
}

/* PS_RESTORE and PS_SET_STEP, from the chief only (distribute/ps_snapshot.h). On
 * a synchronous ps every ps has a step (ps:0's is the global step): SET_STEP
 * sets it on any ps, and both go to the accumulators' state
 * (dt_ps_sync_restore), whose `applied` is Adam's update count there. */
static void restore(struct dt_ps_server *s, struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *p)
{
	struct dt_err e = DT_ERR_INIT;
	struct dt_ps_snapshot m;
	struct held_shard *sh = NULL;
	int64_t step = 0;
	const int sync = dt_ps_sync_configured(s->sync);
	struct dt_ps_sync_stats ss;
	dt_ps_sync_get_stats(s->sync, &ss);
	const char *no = !from_chief(s, c)					       ? "only the chief restores a ps"
			 : h->type == DT_MSG_PS_SET_STEP && s->cfg.index != 0 && !sync ? "the global step lives on ps:0"
											: NULL;
	if (!no && h->type == DT_MSG_PS_SET_STEP && !dt_ps_set_step_decode(p, h->length, &step, &e)) {
		dt_info("%s step set to %lld (was %lld) by %s", sync ? "synchronous" : "global", (long long)step,
			(long long)(sync ? ss.step : s->global_step), dt_conn_peer(c));
		s->global_step = step;
		if (sync) {
			dt_ps_sync_restore(s->sync, step, ss.applied, dt_now_ns());
			arm_sync_timer(s, dt_conn_loop(c));
		}
		reply_empty(c, h);
		return;
	}
	if (!no && h->type == DT_MSG_PS_RESTORE && !dt_ps_snapshot_decode(p, h->length, &m, &e)) {
		if (!(sh = find_shard(s, m.range.offset, m.range.count)))
			no = "restore of a range that is not one of this ps's shards";
		else if (dt_ps_snapshot_apply(&m, s->params, &s->opt, &e))
			sh = NULL;
	}
	if (!sh) {
		refuse(s, c, h, no ? DT_CONFIG : e.status, no ? no : e.msg);
		return;
	}
	sh->updates = m.updates;
	if (sync) {
		dt_ps_sync_restore(s->sync, ss.step, (uint64_t)m.updates, dt_now_ns());
		arm_sync_timer(s, dt_conn_loop(c));
	}
	if (!sh->initialized) {
		sh->initialized = 1;
		if (++s->ninitialized == s->nshards)
			dt_info("restored by %s: %d shard(s)", dt_conn_peer(c), s->nshards);
	}
	reply_empty(c, h);
}

/* ---- row-sparse pushes and pulls (ps_wire.h, docs/DISTRIBUTED.md "Sparse rows") ----
 * SGD and Adagrad apply to the rows pushed and nothing else (TensorFlow's
 * sparse apply): a row whose gradient is zero would not change under them
 * anyway, so the variables equal a dense push's bit for bit. Momentum and
 * Adam decay every row's slots each update (TensorFlow's Adam does the same
 * with a sparse gradient), so their rows are scattered into a zeroed copy of
 * the shard and applied densely: the same variables and slots as a dense
 * push, with only the rows on the wire. A synchronous push is densified
 * likewise into the step's accumulator. */

static void densify(struct dt_ps_server *s, const struct held_shard *sh, const struct dt_ps_rows_msg *m)
{
	memset(s->dense, 0, sh->count * sizeof(float));
	for (uint32_t i = 0; i < m->n; i++)
		memcpy(s->dense + (size_t)dt_ps_rows_at(m, i) * m->width, m->values + (size_t)i * m->width,
		       m->width * sizeof(float));
}

static void apply_rows(struct dt_ps_server *s, struct held_shard *sh, const struct dt_ps_rows_msg *m)
{
	const int64_t t = ++sh->updates;
	if (s->opt.kind == DT_OPTIM_SGD || s->opt.kind == DT_OPTIM_ADAGRAD) {
		for (uint32_t i = 0; i < m->n; i++)
			dt_optimizer_apply(&s->opt, s->params, m->values + (size_t)i * m->width,
					   sh->offset + (size_t)dt_ps_rows_at(m, i) * m->width, m->width, m->lr, t);
		return;
	}
	densify(s, sh, m);
	dt_optimizer_apply(&s->opt, s->params, s->dense, sh->offset, sh->count, m->lr, t);
}

/* A synchronous pull of rows held at the barrier (ps_sync.h's waiter). */
struct rows_waiter {
	struct dt_ps_sync_waiter w; /* first: ps_sync hands this back */
	struct dt_ps_server *s;
	struct dt_conn *c;
	uint64_t request_id;
	const struct held_shard *sh;
	uint32_t n;
	uint64_t width;
	uint32_t rows[];            /* (n) */
};

static void free_arg(void *arg, enum dt_status st)
{
	(void)st;
	free(arg);
}

/* Sends the rows' current values after a 16-byte (step, ns held) header. */
static void send_rows(struct dt_conn *c, uint64_t request_id, const float *params, const struct held_shard *sh,
		      const uint32_t *rows, uint32_t n, uint64_t width, int64_t step, uint64_t held_ns)
{
	const size_t bytes = DT_PS_PULL_ROWS_REPLY_HEADER + (size_t)n * width * sizeof(float);
	uint8_t *out = dt_xmalloc(bytes);
	dt_ps_sync_pull_reply_encode_header(step, held_ns, out);
	for (uint32_t i = 0; i < n; i++)
		memcpy(out + DT_PS_PULL_ROWS_REPLY_HEADER + (size_t)i * width * sizeof(float),
		       params + sh->offset + (size_t)rows[i] * width, width * sizeof(float));
	struct iovec part = { out, bytes };
	if (dt_conn_sendv_ref(c, DT_MSG_PS_PULL_ROWS, DT_FRAME_F_REPLY, request_id, &part, 1, free_arg, out, NULL))
		free(out);
}

static void rows_waiter_drop(struct dt_ps_sync_waiter *w) { free(w); }

static void rows_waiter_release(struct dt_ps_sync_waiter *w, int64_t step, uint64_t held_ns, const struct dt_err *failed)
{
	struct rows_waiter *rw = (struct rows_waiter *)w;
	if (failed)
		(void)dt_conn_reply_error(rw->c, rw->request_id, failed->status, "%s", failed->msg);
	else
		send_rows(rw->c, rw->request_id, rw->s->params, rw->sh, rw->rows, rw->n, rw->width, step, held_ns);
	free(rw);
}

static void rows_frame(struct dt_ps_server *s, struct dt_conn *c, const struct dt_frame_header *h, const uint8_t *p)
{
	const int push = h->type == DT_MSG_PS_PUSH_ROWS;
	struct held_shard *sh = NULL;
	if (h->length >= DT_PS_RANGE_BYTES)
		sh = find_shard(s, dt_get_u64le(p), dt_get_u64le(p + 8));
	if (!sh) {
		refuse(s, c, h, h->length >= DT_PS_RANGE_BYTES ? DT_CONFIG : DT_PROTOCOL,
		       "holds no such shard (or the payload is shorter than a range)");
		return;
	}
	struct dt_err e = DT_ERR_INIT;
	struct dt_ps_rows_msg m;
	if (dt_ps_rows_decode(p, (size_t)h->length, push, sh->rows, &m, &e)) {
		refuse(s, c, h, DT_PROTOCOL, e.msg);
		return;
	}
	if (!sh->initialized) {
		refuse(s, c, h, DT_PEER, "not initialized");
		return;
	}
	const int sync = dt_ps_sync_configured(s->sync);
	const int64_t step = m.step; /* push: its step; pull: `after` */
	if (push && (step >= 0) != sync) {
		refuse(s, c, h, DT_CONFIG,
		       sync ? "trains synchronously: a row push needs the trainer's step"
			    : "trains asynchronously (or is not configured for synchronous training): a row push with a step");
		return;
	}
	if (push && !sync) {
		if (refuse_async(s, c, h))
			return;
		apply_rows(s, sh, &m);
		s->stats.pushes++;
		reply_empty(c, h);
		return;
	}
	if (push) {
		const struct dt_hello *r = dt_conn_remote(c);
		const int trainer = r ? dt_ps_sync_trainer_of(s->sync, r->role, r->index) : -1;
		const int shard = dt_ps_sync_shard_of(s->sync, sh->offset, sh->count);
		int dropped = 0;
		const int64_t now = dt_now_ns();
		if (trainer < 0) {
			refuse(s, c, h, DT_CONFIG, "synchronous requests come from the cluster's trainers only");
			return;
		}
		dt_ps_sync_heard(s->sync, trainer, now);
		densify(s, sh, &m);
		if (dt_ps_sync_push(s->sync, shard, trainer, step, m.lr, s->dense, now, &dropped, &e)) {
			refuse(s, c, h, e.status, e.msg);
			return;
		}
		arm_sync_timer(s, dt_conn_loop(c));
		struct dt_ps_sync_stats ss;
		dt_ps_sync_get_stats(s->sync, &ss);
		struct dt_ps_sync_push_reply rep = { dropped ? DT_PS_SYNC_PUSH_DROPPED : 0, ss.step };
		uint8_t out[DT_PS_SYNC_PUSH_REPLY_BYTES];
		dt_ps_sync_push_reply_encode(&rep, out);
		replied(c, dt_conn_send(c, h->type, DT_FRAME_F_REPLY, h->request_id, out, sizeof(out), NULL));
		return;
	}
	s->stats.pulls++;
	/* The rows are 4-byte aligned in the payload (after its 32-byte header) and little-endian as the host. */
	const uint32_t *rows = (const uint32_t *)(const void *)m.rows;
	if (!sync || step < 0) {
		send_rows(c, h->request_id, s->params, sh, rows, m.n, m.width, sync ? dt_ps_sync_step(s->sync) : s->global_step,
			  0);
		return;
	}
	struct rows_waiter *rw = dt_xcalloc(1, sizeof(*rw) + (size_t)m.n * sizeof(uint32_t));
	rw->w = (struct dt_ps_sync_waiter){ .shard = dt_ps_sync_shard_of(s->sync, sh->offset, sh->count), .after = step,
					    .owner = c, .release = rows_waiter_release, .drop = rows_waiter_drop };
	rw->s = s;
	rw->c = c;
	rw->request_id = h->request_id;
	rw->sh = sh;
	rw->n = m.n;
	rw->width = m.width;
	if (m.n)
		memcpy(rw->rows, rows, (size_t)m.n * sizeof(uint32_t));
	dt_ps_sync_wait(s->sync, &rw->w, dt_now_ns());
	arm_sync_timer(s, dt_conn_loop(c));
}

static void on_frame(struct dt_conn *c, const struct dt_frame_header *h, uint8_t *p, void *arg)
{
	struct dt_ps_server *s = arg;
	if (h->flags & DT_FRAME_F_REPLY)
		return; /* we send no requests: a stray reply */
	if (h->request_id == 0) {
		dt_warn("ignored one-way %s from %s", dt_msg_name(h->type), dt_conn_peer(c));
		return;
	}
	struct held_shard *sh;
	switch (h->type) {
	case DT_MSG_PS_STATUS: {
		uint8_t out[DT_PS_STATUS_BYTES];
		struct dt_ps_status_msg m = {
			.flags = (s->ninitialized == s->nshards ? DT_PS_STATUS_INITIALIZED : 0) |
				 (s->ended ? DT_PS_STATUS_ENDED : 0),
			.global_step = dt_ps_sync_configured(s->sync) ? dt_ps_sync_step(s->sync) : s->global_step,
		};
		dt_ps_status_encode(&m, out);
		replied(c, dt_conn_send(c, h->type, DT_FRAME_F_REPLY, h->request_id, out, sizeof(out), NULL));
		return;
	}
	case DT_MSG_PS_INIT:
		if (!(sh = shard_of(s, c, h, p, DT_PS_RANGE_BYTES, 1)))
			return;
		memcpy(s->params + sh->offset, p + DT_PS_RANGE_BYTES, sh->count * sizeof(float));
		if (!sh->initialized) {
			sh->initialized = 1;
			if (++s->ninitialized == s->nshards)
				dt_info("initialized by %s: %d shard(s)", dt_conn_peer(c), s->nshards);
		}
		s->stats.inits++;
		reply_empty(c, h);
		return;
	case DT_MSG_PS_PULL: {
		if (!(sh = shard_of(s, c, h, p, DT_PS_RANGE_BYTES, 0)))
			return;
		if (!sh->initialized) {
			refuse(s, c, h, DT_PEER, "not initialized");
			return;
		}
		/* Zero-copy from the live parameters; the buffer outlives every conn. */
		struct iovec part = { s->params + sh->offset, sh->count * sizeof(float) };
		s->stats.pulls++;
		replied(c, dt_conn_sendv_ref(c, h->type, DT_FRAME_F_REPLY, h->request_id, &part, 1, NULL, NULL, NULL));
		return;
	}
	case DT_MSG_PS_PUSH: {
		if (refuse_async(s, c, h) || !(sh = shard_of(s, c, h, p, DT_PS_PUSH_HEADER, 1)))
			return;
		if (!sh->initialized) {
			refuse(s, c, h, DT_PEER, "not initialized");
			return;
		}
		uint32_t bits = dt_get_u32le(p + 16);
		float lr;
		memcpy(&lr, &bits, sizeof(lr));
		if (!(lr >= 0.0f && lr < 1e6f)) {
			refuse(s, c, h, DT_PROTOCOL, "learning rate out of range");
			return;
		}
		/* The payload is 8-byte aligned in the conn's buffer and the header is 24 bytes. */
		const float *g = (const float *)(const void *)(p + DT_PS_PUSH_HEADER);
		dt_ps_shard_apply(&sh->rule, &s->opt, s->params, g, 1, lr, ++sh->updates);
		s->stats.pushes++;
		reply_empty(c, h);
		return;
	}
	case DT_MSG_PS_STEP: {
		if (refuse_async(s, c, h))
			return;
		if (s->cfg.index != 0) {
			refuse(s, c, h, DT_CONFIG, "the global step lives on ps:0");
			return;
		}
		if (h->length != 8 && h->length != 16 && h->length != DT_PS_STEP_WITH_POSITION) {
			refuse(s, c, h, DT_PROTOCOL, "step payload is not 8, 16 or 48 bytes");
			return;
		}
		uint64_t inc = dt_get_u64le(p), last = h->length >= 16 ? dt_get_u64le(p + 8) : 0;
		if (inc > 1000000 || last > (uint64_t)INT64_MAX) {
			refuse(s, c, h, DT_PROTOCOL, "step increment or last step out of range");
			return;
		}
		/* The step stops at the trainer's last step (StopAtStepHook's
		 * last_step): trainers racing for the last one do not push it past. */
		int64_t next = s->global_step + (int64_t)inc;
		if (last > 0 && next > (int64_t)last)
			next = s->global_step > (int64_t)last ? s->global_step : (int64_t)last;
		struct dt_err perr = DT_ERR_INIT;
		if (h->length == DT_PS_STEP_WITH_POSITION &&
		    dt_ps_positions_note(&s->positions, p + 16, DT_PS_POSITION_BLOCK, next, &perr)) {
			refuse(s, c, h, DT_PROTOCOL, perr.msg);
			return;
		}
		s->global_step = next;
		uint8_t out[8];
		dt_put_u64le(out, (uint64_t)s->global_step);
		replied(c, dt_conn_send(c, h->type, DT_FRAME_F_REPLY, h->request_id, out, sizeof(out), NULL));
		return;
	}
	case DT_MSG_PS_END:
		if (!from_chief(s, c)) {
			refuse(s, c, h, DT_CONFIG, "only the chief ends the run");
			return;
		}
		dt_info("the chief (%s) ended the run at global step %lld", dt_conn_peer(c),
			(long long)(dt_ps_sync_configured(s->sync) ? dt_ps_sync_step(s->sync) : s->global_step));
		s->ended = 1;
		dt_timer_stop(dt_conn_loop(c), &s->sync_timer);
		reply_empty(c, h);
		return;
	case DT_MSG_PS_SYNC_CONFIG:
	case DT_MSG_PS_SYNC_PUSH:
	case DT_MSG_PS_SYNC_PULL:
		if (h->type == DT_MSG_PS_SYNC_CONFIG && s->async_used) {
			refuse(s, c, h, DT_CONFIG, "trains asynchronously (it has applied asynchronous pushes)");
			return;
		}
		if (h->type != DT_MSG_PS_SYNC_CONFIG && s->ninitialized < s->nshards) {
			refuse(s, c, h, DT_PEER, "not initialized");
			return;
		}
		dt_ps_sync_on_frame(s->sync, c, h, p);
		arm_sync_timer(s, dt_conn_loop(c));
		return;
	case DT_MSG_PS_PUSH_ROWS:
	case DT_MSG_PS_PULL_ROWS:
		rows_frame(s, c, h, p);
		return;
	case DT_MSG_PS_SNAPSHOT: /* checkpoints and recovery: distribute/ps_snapshot.h */
		if (!(sh = shard_of(s, c, h, p, DT_PS_RANGE_BYTES, 0)))
			return;
		if (!sh->initialized) {
			refuse(s, c, h, DT_PEER, "not initialized");
			return;
		}
		/* Synchronous steps apply through ps_sync, which counts them itself. */
		if (dt_ps_sync_configured(s->sync)) {
			struct dt_ps_sync_stats ss;
			dt_ps_sync_get_stats(s->sync, &ss);
			sh->updates = (int64_t)ss.applied;
		}
		replied(c, dt_ps_snapshot_reply(c, h->request_id, s->params, &s->opt, sh->offset, sh->count, sh->updates,
						NULL));
		return;
	case DT_MSG_PS_POSITIONS: {
		if (s->cfg.index != 0 || h->length != 0) {
			refuse(s, c, h, DT_PROTOCOL, "the positions live on ps:0 and are asked for with an empty request");
			return;
		}
		size_t len;
		uint8_t *out = dt_ps_positions_encode(&s->positions, &len);
		replied(c, dt_conn_send(c, h->type, DT_FRAME_F_REPLY, h->request_id, out, len, NULL));
		free(out);
		return;
	}
	case DT_MSG_PS_RESTORE:
	case DT_MSG_PS_SET_STEP:
		restore(s, c, h, p);
		return;
	default:
		if (s->cfg.extension && s->cfg.extension->on_frame(s->cfg.extension->arg, c, h, p))
			return;
		refuse(s, c, h, DT_PROTOCOL, "not a parameter-server request");
		return;
	}
}

static void on_close(struct dt_conn *c, const struct dt_err *why, void *arg)
{
	struct dt_ps_server *s = arg;
	dt_ps_sync_on_close(s->sync, c);
	if (s->cfg.extension && s->cfg.extension->on_close)
		s->cfg.extension->on_close(s->cfg.extension->arg, c, why, s->ended);
}

static const struct dt_conn_handler handler = { .on_frame = on_frame, .on_close = on_close };

enum dt_status dt_ps_server_new(struct dt_loop *loop, const struct dt_ps_server_config *cfg,
				struct dt_ps_server **out, struct dt_err *err)
{
	*out = NULL;
	struct dt_ps_server *s = dt_xcalloc(1, sizeof(*s));
	s->cfg = *cfg;
	snprintf(s->name, sizeof(s->name), "ps:%d", cfg->index);
	const struct dt_placement *pl = cfg->placement;
	for (int i = 0; i < pl->num_shards; i++)
		if (pl->shards[i].ps == cfg->index)
			s->nshards++;
	s->shards = dt_xcalloc((size_t)(s->nshards ? s->nshards : 1), sizeof(*s->shards));
	for (int i = 0, k = 0; i < pl->num_shards; i++)
		if (pl->shards[i].ps == cfg->index)
			s->shards[k++] = (struct held_shard){
				.offset = pl->shards[i].offset, .count = pl->shards[i].count,
				.rule = { pl->shards[i].offset, pl->shards[i].count, pl->shards[i].kind, pl->shards[i].decay },
				.rows = (size_t)(pl->shards[i].row_end - pl->shards[i].row_begin),
			};
	size_t largest = 1;
	for (int i = 0; i < s->nshards; i++)
		largest = s->shards[i].count > largest ? s->shards[i].count : largest;
	s->dense = dt_xmalloc(largest * sizeof(float));
	s->params = dt_xcalloc(cfg->num_params ? cfg->num_params : 1, sizeof(float));
	s->loop = loop;
	dt_timer_init(&s->sync_timer, on_sync_deadline, s);
	enum dt_status st = dt_optimizer_init(&s->opt, cfg->hp, cfg->num_params, err);
	if (st) {
		dt_ps_server_free(s);
		return st;
	}
	struct dt_ps_sync_shard *held = dt_xcalloc((size_t)(s->nshards ? s->nshards : 1), sizeof(*held));
	for (int i = 0; i < s->nshards; i++)
		held[i] = s->shards[i].rule;
	struct dt_ps_sync_params sp = {
		.name = s->name, .shards = held, .nshards = s->nshards, .num_params = cfg->num_params,
		.params = s->params, .opt = &s->opt, .trainers = cfg->trainers, .num_trainers = cfg->num_trainers,
	};
	s->sync = dt_ps_sync_new(&sp);
	free(held);
	char cc[DT_TCP_CC_MAX]; /* set on the listener, so every accepted connection has it (net/congestion.h) */
	struct dt_server_config sc = {
		.host = cfg->host, .port = cfg->port, .local = cfg->local, .congestion = cc,
		.conn = { .silence_s = cfg->silence_s, .handler = &handler, .arg = s },
	};
	if ((st = dt_tcp_cc_choose(NULL, NULL, cc, err)) || (st = dt_server_new(loop, &sc, &s->server, err))) {
		dt_err_prefix(err, "cannot start %s", s->name); /* before the free: s->name is s's */
		dt_ps_server_free(s);
		return st;
	}
	*out = s;
	return DT_OK;
}

void dt_ps_server_free(struct dt_ps_server *s)
{
	if (!s)
		return;
	dt_server_free(s->server);
	if (s->loop)
		dt_timer_stop(s->loop, &s->sync_timer);
	dt_ps_sync_free(s->sync);
	dt_ps_positions_release(&s->positions);
	dt_optimizer_release(&s->opt);
	free(s->params);
	free(s->dense);
	free(s->shards);
	free(s);
}

int dt_ps_server_port(const struct dt_ps_server *s) { return dt_server_port(s->server); }
int dt_ps_server_initialized(const struct dt_ps_server *s) { return s->ninitialized == s->nshards; }
int dt_ps_server_ended(const struct dt_ps_server *s) { return s->ended; }
size_t dt_ps_server_conn_count(const struct dt_ps_server *s) { return dt_server_conn_count(s->server); }

size_t dt_ps_server_shutdown(struct dt_ps_server *s)
{
	dt_server_shutdown_all(s->server, "the run is over");
	return dt_server_conn_count(s->server);
}

void dt_ps_server_get_stats(const struct dt_ps_server *s, struct dt_ps_server_stats *out)
{
	*out = s->stats;
	out->global_step = s->global_step;
	if (dt_ps_sync_configured(s->sync)) {
		struct dt_ps_sync_stats ss;
		dt_ps_sync_get_stats(s->sync, &ss);
		out->global_step = ss.step;
		out->sync_accepted = ss.accepted;
		out->sync_dropped = ss.dropped;
	}
}

const struct dt_err *dt_ps_server_failure(const struct dt_ps_server *s) { return dt_ps_sync_failure(s->sync); }

const struct dt_ps_sync *dt_ps_server_sync(const struct dt_ps_server *s)
{
	return dt_ps_sync_configured(s->sync) ? s->sync : NULL;
}
