#include "distribute/ps_client.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "distribute/ps_positions.h"
#include "distribute/ps_wire.h"
#include "net/bytes.h"
#include "net/congestion.h"
#include "net/conn.h"
#include "net/socket.h"

struct dt_ps_client {
	struct dt_loop *loop;
	struct dt_ps_client_config cfg;
	char tcp_cc[DT_TCP_CC_MAX]; /* set on every connection to a ps ("": the host's; net/congestion.h) */
	int num_ps;
	struct dt_conn **conns;           /* (num_ps) */
	const struct dt_placement *pl;
	struct dt_request *push_reqs, *pull_reqs, *init_reqs, *end_reqs; /* (num_shards) x3, (num_ps) */
	uint8_t (*push_hdr)[DT_PS_PUSH_HEADER];  /* (num_shards) */
	uint8_t (*range_hdr)[DT_PS_RANGE_BYTES]; /* (num_shards) */
	struct dt_request step_req, status_req;
	/* synchronous rounds */
	struct dt_request *sync_cfg_reqs;  /* (num_ps) */
	uint8_t sync_cfg[DT_PS_SYNC_CONFIG_BYTES];
	uint8_t (*sync_push_hdr)[DT_PS_SYNC_PUSH_HEADER];   /* (num_shards) */
	uint8_t (*sync_push_reply)[DT_PS_SYNC_PUSH_REPLY_BYTES]; /* (num_shards) */
	uint8_t (*sync_pull_req)[DT_PS_SYNC_PULL_BYTES];    /* (num_shards) */
	uint8_t **sync_pull_reply;        /* (num_shards) staging: header + the shard's values */
	uint8_t step_payload[DT_PS_STEP_WITH_POSITION], step_reply[8], status_reply[DT_PS_STATUS_BYTES];
	/* row-sparse variables: per shard */
	unsigned char *sparse;            /* (num_shards) moved by rows */
	uint32_t **rows;                  /* (num_shards) this step's shard-local rows; (shard rows) each */
	size_t *nrows;                    /* (num_shards) */
	uint8_t **rows_buf;               /* (num_shards) a row push, then a row pull's reply */
	uint8_t (*rows_hdr)[DT_PS_ROWS_HEADER]; /* (num_shards) */
	int has_position;             /* step_payload + 16 holds this trainer's position block */
	struct dt_request **inflight;     /* requests of the current call */
	int ninflight, inflight_cap;
};

static void inflight_add(struct dt_ps_client *c, struct dt_request *r)
{
	DT_ASSERT(c->ninflight < c->inflight_cap);
	c->inflight[c->ninflight++] = r;
}

/* Registers r on ps `ps` with a deadline; on failure to send it is not in flight. */
static enum dt_status issue(struct dt_ps_client *c, int ps, struct dt_request *r, uint16_t type,
			    const struct iovec *parts, int nparts, void *reply_buf, size_t reply_cap, int64_t deadline,
			    struct dt_err *err)
{
	memset(r, 0, sizeof(*r));
	r->type = type;
	r->deadline = deadline;
	r->reply_buf = reply_buf;
	r->reply_cap = reply_cap;
	enum dt_status st = dt_conn_request(c->conns[ps], r, parts, nparts, 0, err);
	if (st)
		return st;
	inflight_add(c, r);
	return DT_OK;
}

static int all_done(void *arg)
{
	struct dt_ps_client *c = arg;
	for (int i = 0; i < c->ninflight; i++)
		if (!c->inflight[i]->done)
			return 0;
	return 1;
}

/* A synchronous round's wait also ends when a ps connection is lost: the
 * other ps hold this trainer's pulls at a barrier that may now never pass
 * (the lost ps's trainers stopped pushing), and the recovery
 * (train/ps_recovery.h) restores them all anyway. */
static int all_done_or_lost(void *arg)
{
	struct dt_ps_client *c = arg;
	for (int ps = 0; ps < c->num_ps; ps++)
		if (dt_ps_client_lost(c, ps))
			return 1;
	return all_done(c);
}

/* Waits for every request in flight (each times out by its own deadline);
 * returns the first failure. `first` is an error from issuing, if any. */
static enum dt_status wait_until(struct dt_ps_client *c, int (*done)(void *), enum dt_status first, int64_t deadline,
				 struct dt_err *err)
{
	struct dt_err loop_err = DT_ERR_INIT;
	enum dt_status st = DT_OK;
	if (first) {
		for (int i = 0; i < c->ninflight; i++)
			if (!c->inflight[i]->done)
				dt_request_cancel(c->inflight[i]);
	}
	/* The requests' own deadlines end the wait; the extra second is a backstop. */
	st = dt_loop_run_until(c->loop, done, c, deadline + 1000000000LL, "replies from the parameter servers",
			       &loop_err);
	if (!st && !all_done(c)) {
		/* `done` ended it early (a lost ps): the first failure is the lost ps's. */
		for (int i = 0; i < c->ninflight; i++)
			if (c->inflight[i]->done && c->inflight[i]->status) {
				struct dt_request *r = c->inflight[i];
				c->inflight[i] = c->inflight[0];
				c->inflight[0] = r;
				break;
			}
		for (int i = 0; i < c->ninflight; i++)
			if (!c->inflight[i]->done)
				dt_request_cancel(c->inflight[i]);
	}
	if (st) {
		for (int i = 0; i < c->ninflight; i++)
			if (!c->inflight[i]->done)
				dt_request_cancel(c->inflight[i]);
	}
	if (first) {
		c->ninflight = 0;
		return first;
	}
	for (int i = 0; i < c->ninflight; i++) {
		struct dt_request *r = c->inflight[i];
		if (r->done && r->status) {
			c->ninflight = 0;
			if (err) {
				*err = r->err;
			}
			return r->status;
		}
	}
	c->ninflight = 0;
	if (st && err)
		*err = loop_err;
	return st;
}

static enum dt_status wait_all(struct dt_ps_client *c, enum dt_status first, int64_t deadline, struct dt_err *err)
{
	return wait_until(c, all_done, first, deadline, err);
}

/* Connects to ps `ps`, retrying whatever a retry can fix until rt's deadline
 * (net/conn.h, dt_conn_dial); *out stays NULL when `stop` ended the wait. */
static enum dt_status dial(struct dt_ps_client *c, int ps, struct dt_retry *rt, const struct dt_dial_stop *stop,
			   struct dt_conn **out, struct dt_err *err)
{
	char host[DT_HOST_MAX];
	int port;
	struct dt_conn_config cc = { .silence_s = c->cfg.silence_s, .congestion = c->tcp_cc };
	enum dt_status st = dt_sock_split_hostport(c->cfg.ps_addrs[ps], host, sizeof(host), &port, err);
	if (!st)
		st = dt_conn_dial(c->loop, host, port, c->cfg.local, "ps", (uint32_t)ps, &cc, rt, stop, out, err);
	return st;
}

enum dt_status dt_ps_client_new(struct dt_loop *loop, const struct dt_ps_client_config *cfg, int64_t deadline,
				struct dt_ps_client **out, struct dt_err *err)
{
	*out = NULL;
	struct dt_ps_client *c = dt_xcalloc(1, sizeof(*c));
	c->loop = loop;
	c->cfg = *cfg;
	c->pl = cfg->placement;
	c->num_ps = cfg->placement->num_ps;
	size_t ns = (size_t)c->pl->num_shards;
	c->conns = dt_xcalloc((size_t)c->num_ps, sizeof(*c->conns));
	c->push_reqs = dt_xcalloc(ns, sizeof(*c->push_reqs));
	c->pull_reqs = dt_xcalloc(ns, sizeof(*c->pull_reqs));
	c->init_reqs = dt_xcalloc(ns, sizeof(*c->init_reqs));
	c->end_reqs = dt_xcalloc((size_t)c->num_ps, sizeof(*c->end_reqs));
	c->push_hdr = dt_xcalloc(ns, sizeof(*c->push_hdr));
	c->range_hdr = dt_xcalloc(ns, sizeof(*c->range_hdr));
	c->sync_cfg_reqs = dt_xcalloc((size_t)c->num_ps, sizeof(*c->sync_cfg_reqs));
	c->sync_push_hdr = dt_xcalloc(ns, sizeof(*c->sync_push_hdr));
	c->sync_push_reply = dt_xcalloc(ns, sizeof(*c->sync_push_reply));
	c->sync_pull_req = dt_xcalloc(ns, sizeof(*c->sync_pull_req));
	c->sync_pull_reply = dt_xcalloc(ns, sizeof(*c->sync_pull_reply));
	c->sparse = dt_xcalloc(ns, 1);
	c->rows = dt_xcalloc(ns, sizeof(*c->rows));
	c->nrows = dt_xcalloc(ns, sizeof(*c->nrows));
	c->rows_buf = dt_xcalloc(ns, sizeof(*c->rows_buf));
	c->rows_hdr = dt_xcalloc(ns, sizeof(*c->rows_hdr));
	c->inflight_cap = (int)(2 * ns + (size_t)c->num_ps + 2);
	c->inflight = dt_xcalloc((size_t)c->inflight_cap, sizeof(*c->inflight));
	for (size_t i = 0; i < ns; i++) {
		dt_put_u64le(c->range_hdr[i], c->pl->shards[i].offset);
		dt_put_u64le(c->range_hdr[i] + 8, c->pl->shards[i].count);
	}
	/* push and pull move the model both ways: the congestion control of
	 * both ends (the ps sets its listener's) */
	enum dt_status cc_st = dt_tcp_cc_choose(NULL, NULL, c->tcp_cc, err);
	if (cc_st) {
		dt_ps_client_free(c);
		return cc_st;
	}
	for (int i = 0; i < c->num_ps; i++) {
		struct dt_retry rt;
		dt_retry_init(&rt, dt_now_ns(), deadline, cfg->deadline_name ? cfg->deadline_name : "the connect deadline",
			      (uint64_t)getpid() ^ (uint64_t)i);
		enum dt_status st = dial(c, i, &rt, NULL, &c->conns[i], err);
		if (st) {
			dt_ps_client_free(c);
			return st;
		}
	}
	*out = c;
	return DT_OK;
}

static int all_closed(void *arg)
{
	struct dt_ps_client *c = arg;
	for (int i = 0; i < c->num_ps; i++)
		if (c->conns[i] && dt_conn_is_open(c->conns[i]))
			return 0;
	return 1;
}

void dt_ps_client_free(struct dt_ps_client *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->num_ps; i++)
		if (c->conns[i] && dt_conn_is_open(c->conns[i]))
			dt_conn_shutdown(c->conns[i], "this task is done");
	/* Best effort: a peer that does not read its SHUTDOWN is closed anyway below. */
	enum dt_status lingered = dt_loop_run_until(c->loop, all_closed, c, dt_deadline_in(2.0), "connections to close", NULL);
	(void)lingered;
	for (int i = 0; i < c->num_ps; i++)
		dt_conn_free(c->conns[i]);
	free(c->conns);
	free(c->push_reqs);
	free(c->pull_reqs);
	free(c->init_reqs);
	free(c->end_reqs);
	free(c->push_hdr);
	free(c->range_hdr);
	free(c->inflight);
	free(c->sync_cfg_reqs);
	free(c->sync_push_hdr);
	free(c->sync_push_reply);
	free(c->sync_pull_req);
	for (int i = 0; c->sync_pull_reply && i < c->pl->num_shards; i++)
		free(c->sync_pull_reply[i]);
	free(c->sync_pull_reply);
	for (int i = 0; c->rows && i < c->pl->num_shards; i++) {
		free(c->rows[i]);
		free(c->rows_buf[i]);
	}
	free(c->sparse);
	free(c->rows);
	free(c->nrows);
	free(c->rows_buf);
	free(c->rows_hdr);
	free(c);
}

void dt_ps_client_set_position(struct dt_ps_client *c, int trainer, int trainers, int64_t epoch, int64_t taken)
{
	dt_ps_position_block_encode(trainer, trainers, epoch, taken, c->step_payload + 16);
	c->has_position = 1;
}

void dt_ps_client_set_buffers(struct dt_ps_client *c, float *params, float *grads)
{
	DT_ASSERT(c->ninflight == 0); /* no call is running */
	c->cfg.params = params;
	c->cfg.grads = grads;
}

enum dt_status dt_ps_client_status(struct dt_ps_client *c, int ps, struct dt_ps_status *out, int64_t deadline,
				   struct dt_err *err)
{
	enum dt_status st = issue(c, ps, &c->status_req, DT_MSG_PS_STATUS, NULL, 0, c->status_reply,
				  sizeof(c->status_reply), deadline, err);
	if ((st = wait_all(c, st, deadline, err)))
		return st;
	if (c->status_req.reply.length != DT_PS_STATUS_BYTES)
		return dt_err_set(err, DT_PROTOCOL, "%s answered ps_status with %llu bytes, expected %u",
				  dt_conn_peer(c->conns[ps]), (unsigned long long)c->status_req.reply.length,
				  DT_PS_STATUS_BYTES);
	uint32_t flags = dt_get_u32le(c->status_reply);
	out->initialized = !!(flags & DT_PS_STATUS_INITIALIZED);
	out->ended = !!(flags & DT_PS_STATUS_ENDED);
	out->global_step = (int64_t)dt_get_u64le(c->status_reply + 8);
	return DT_OK;
}

enum dt_status dt_ps_client_init(struct dt_ps_client *c, int ps, int64_t deadline, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	for (int i = 0; i < c->pl->num_shards && !st; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (sh->ps != ps)
			continue;
		struct iovec parts[2] = { { c->range_hdr[i], DT_PS_RANGE_BYTES },
					  { c->cfg.params + sh->offset, sh->count * sizeof(float) } };
		st = issue(c, ps, &c->init_reqs[i], DT_MSG_PS_INIT, parts, 2, NULL, 0, deadline, err);
	}
	return wait_all(c, st, deadline, err);
}

static size_t shard_rows(const struct dt_shard *sh) { return (size_t)(sh->row_end - sh->row_begin); }

/* PS_PUSH_ROWS of shard i's rows set, gathered from the grads buffer. */
static enum dt_status push_rows(struct dt_ps_client *c, int i, int64_t step, float lr, int64_t deadline,
				struct dt_err *err)
{
	const struct dt_shard *sh = &c->pl->shards[i];
	const size_t n = c->nrows[i], width = sh->count / shard_rows(sh);
	uint8_t *b = c->rows_buf[i];
	struct dt_ps_rows_msg m = { .range = { sh->offset, sh->count }, .step = step, .lr = lr, .n = (uint32_t)n };
	dt_ps_rows_header_encode(&m, 1, c->rows_hdr[i]);
	for (size_t k = 0; k < n; k++) {
		dt_put_u32le(b + 4 * k, c->rows[i][k]);
		memcpy(b + 4 * n + k * width * sizeof(float), c->cfg.grads + sh->offset + c->rows[i][k] * width,
		       width * sizeof(float));
	}
	const int sync = step >= 0;
	struct iovec parts[2] = { { c->rows_hdr[i], DT_PS_ROWS_HEADER }, { b, 4 * n + n * width * sizeof(float) } };
	return issue(c, sh->ps, &c->push_reqs[i], DT_MSG_PS_PUSH_ROWS, parts, 2, sync ? c->sync_push_reply[i] : NULL,
		     sync ? DT_PS_SYNC_PUSH_REPLY_BYTES : 0, deadline, err);
}

enum dt_status dt_ps_client_set_sparse(struct dt_ps_client *c, int var, struct dt_err *err)
{
	for (int i = 0; i < c->pl->num_shards; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (sh->variable != var)
			continue;
		const struct dt_hello *r = dt_conn_remote(c->conns[sh->ps]);
		if (!r || !(r->features & DT_PS_FEATURE_SPARSE_ROWS))
			return dt_err_set(err, DT_CONFIG, "%s does not serve row pushes and pulls (an older ps)",
					  dt_conn_peer(c->conns[sh->ps]));
		if (shard_rows(sh) == 0 || shard_rows(sh) > UINT32_MAX)
			return dt_err_set(err, DT_CONFIG, "shard of %lld rows cannot move by rows",
					  (long long)shard_rows(sh));
	}
	for (int i = 0; i < c->pl->num_shards; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (sh->variable != var || c->sparse[i])
			continue;
		c->sparse[i] = 1;
		c->rows[i] = dt_xmallocarray(shard_rows(sh), sizeof(uint32_t));
		c->rows_buf[i] = dt_xmalloc(DT_PS_PULL_ROWS_REPLY_HEADER + shard_rows(sh) * 4 + sh->count * sizeof(float));
	}
	return DT_OK;
}

void dt_ps_client_set_rows(struct dt_ps_client *c, int var, const int64_t *rows, size_t n)
{
	for (int i = 0; i < c->pl->num_shards; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (sh->variable != var || !c->sparse[i])
			continue;
		size_t k = 0;
		for (size_t j = 0; j < n; j++)
			if (rows[j] >= sh->row_begin && rows[j] < sh->row_end)
				c->rows[i][k++] = (uint32_t)(rows[j] - sh->row_begin);
		c->nrows[i] = k;
	}
}

enum dt_status dt_ps_client_pull_rows(struct dt_ps_client *c, int64_t after, int64_t deadline, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	const int ns = c->pl->num_shards;
	for (int i = 0; i < ns && !st; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (!c->sparse[i])
			continue;
		const size_t n = c->nrows[i], width = sh->count / shard_rows(sh);
		/* The request's rows go from rows_buf's tail; the reply lands at its start. */
		uint8_t *req = c->rows_buf[i] + DT_PS_PULL_ROWS_REPLY_HEADER + sh->count * sizeof(float);
		for (size_t k = 0; k < n; k++)
			dt_put_u32le(req + 4 * k, c->rows[i][k]);
		struct dt_ps_rows_msg m = { .range = { sh->offset, sh->count }, .step = after, .n = (uint32_t)n };
		dt_ps_rows_header_encode(&m, 0, c->rows_hdr[i]);
		struct iovec parts[2] = { { c->rows_hdr[i], DT_PS_ROWS_HEADER }, { req, 4 * n } };
		st = issue(c, sh->ps, &c->pull_reqs[i], DT_MSG_PS_PULL_ROWS, parts, 2, c->rows_buf[i],
			   DT_PS_PULL_ROWS_REPLY_HEADER + n * width * sizeof(float), deadline, err);
	}
	if ((st = wait_until(c, after >= 0 ? all_done_or_lost : all_done, st, deadline, err)))
		return st;
	for (int i = 0; i < ns; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (!c->sparse[i])
			continue;
		const size_t n = c->nrows[i], width = sh->count / shard_rows(sh);
		struct dt_ps_sync_pull_reply r;
		if ((st = dt_ps_pull_rows_reply_decode(c->rows_buf[i], (size_t)c->pull_reqs[i].reply.length, n, width, &r,
						       err)))
			return dt_err_prefix(err, "%s", dt_conn_peer(c->conns[sh->ps]));
		for (size_t k = 0; k < n; k++)
			memcpy(c->cfg.params + sh->offset + c->rows[i][k] * width, r.values + k * width,
			       width * sizeof(float));
	}
	return DT_OK;
}

void dt_ps_client_bytes(const struct dt_ps_client *c, uint64_t *sent, uint64_t *received)
{
	*sent = *received = 0;
	for (int i = 0; i < c->num_ps; i++) {
		struct dt_conn_stats cs;
		dt_conn_get_stats(c->conns[i], &cs);
		*sent += cs.bytes_out;
		*received += cs.bytes_in;
	}
}

enum dt_status dt_ps_client_round(struct dt_ps_client *c, int push, float lr, int64_t step_inc, int pull,
				  int64_t *global_step, int64_t deadline, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	uint32_t lr_bits;
	memcpy(&lr_bits, &lr, sizeof(lr_bits));
	for (int i = 0; push && i < c->pl->num_shards && !st; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (c->sparse[i]) {
			st = push_rows(c, i, -1, lr, deadline, err);
			continue;
		}
		uint8_t *h = c->push_hdr[i];
		dt_put_u64le(h, sh->offset);
		dt_put_u64le(h + 8, sh->count);
		dt_put_u32le(h + 16, lr_bits);
		dt_put_u32le(h + 20, 0);
		struct iovec parts[2] = { { h, DT_PS_PUSH_HEADER }, { c->cfg.grads + sh->offset, sh->count * sizeof(float) } };
		st = issue(c, sh->ps, &c->push_reqs[i], DT_MSG_PS_PUSH, parts, 2, NULL, 0, deadline, err);
	}
	if (step_inc >= 0 && !st) {
		dt_put_u64le(c->step_payload, (uint64_t)step_inc);
		dt_put_u64le(c->step_payload + 8, (uint64_t)(c->cfg.last_step > 0 ? c->cfg.last_step : 0));
		struct iovec part = { c->step_payload, c->has_position ? DT_PS_STEP_WITH_POSITION
							     : c->cfg.last_step > 0 ? 16 : 8 };
		st = issue(c, 0, &c->step_req, DT_MSG_PS_STEP, &part, 1, c->step_reply, sizeof(c->step_reply), deadline,
			   err);
	}
	for (int i = 0; pull && i < c->pl->num_shards && !st; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (push && c->sparse[i])
			continue; /* its rows are pulled before the next forward pass */
		struct iovec part = { c->range_hdr[i], DT_PS_RANGE_BYTES };
		st = issue(c, sh->ps, &c->pull_reqs[i], DT_MSG_PS_PULL, &part, 1, c->cfg.params + sh->offset,
			   sh->count * sizeof(float), deadline, err);
	}
	if ((st = wait_all(c, st, deadline, err)))
		return st;
	for (int i = 0; pull && i < c->pl->num_shards; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (push && c->sparse[i])
			continue;
		if (c->pull_reqs[i].reply.length != sh->count * sizeof(float))
			return dt_err_set(err, DT_PROTOCOL, "%s answered a pull of %zu elements with %llu bytes",
					  dt_conn_peer(c->conns[sh->ps]), sh->count,
					  (unsigned long long)c->pull_reqs[i].reply.length);
	}
	if (step_inc >= 0) {
		if (c->step_req.reply.length != 8)
			return dt_err_set(err, DT_PROTOCOL, "%s answered ps_step with %llu bytes, expected 8",
					  dt_conn_peer(c->conns[0]), (unsigned long long)c->step_req.reply.length);
		if (global_step)
			*global_step = (int64_t)dt_get_u64le(c->step_reply);
	}
	return DT_OK;
}

enum dt_status dt_ps_client_end(struct dt_ps_client *c, int64_t deadline, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	for (int i = 0; i < c->num_ps && !st; i++)
		st = issue(c, i, &c->end_reqs[i], DT_MSG_PS_END, NULL, 0, NULL, 0, deadline, err);
	return wait_all(c, st, deadline, err);
}

struct dt_conn *dt_ps_client_conn(struct dt_ps_client *c, int ps) { return c->conns[ps]; }

int dt_ps_client_lost(const struct dt_ps_client *c, int ps)
{
	return !dt_conn_is_open(c->conns[ps]) && dt_conn_close_reason(c->conns[ps])->status != DT_OK;
}

enum dt_status dt_ps_client_reconnect(struct dt_ps_client *c, int ps, struct dt_retry *rt,
				      const struct dt_dial_stop *stop, int *new_incarnation, struct dt_err *err)
{
	DT_ASSERT(c->ninflight == 0);
	const struct dt_hello *old = dt_conn_remote(c->conns[ps]);
	uint64_t was = old ? old->incarnation : 0;
	struct dt_conn *nc = NULL;
	enum dt_status st = dial(c, ps, rt, stop, &nc, err);
	if (st || !nc)
		return st;
	if (new_incarnation)
		*new_incarnation = dt_conn_remote(nc)->incarnation != was;
	dt_conn_free(c->conns[ps]);
	c->conns[ps] = nc;
	return DT_OK;
}

int dt_ps_client_ended_by_ps(const struct dt_ps_client *c)
{
	for (int i = 0; i < c->num_ps; i++)
		if (c->conns[i] && !dt_conn_is_open(c->conns[i]) && dt_conn_close_reason(c->conns[i])->status == DT_OK)
			return 1;
	return 0;
}

enum dt_status dt_ps_client_sync_config(struct dt_ps_client *c, const struct dt_ps_sync_config *cfg, int64_t deadline,
					struct dt_err *err)
{
	dt_ps_sync_config_encode(cfg, c->sync_cfg);
	struct iovec part = { c->sync_cfg, sizeof(c->sync_cfg) };
	enum dt_status st = DT_OK;
	for (int i = 0; i < c->num_ps && !st; i++)
		st = issue(c, i, &c->sync_cfg_reqs[i], DT_MSG_PS_SYNC_CONFIG, &part, 1, NULL, 0, deadline, err);
	return wait_all(c, st, deadline, err);
}

enum dt_status dt_ps_client_sync_round(struct dt_ps_client *c, int push, int64_t step, float lr, int64_t after,
				       struct dt_ps_sync_result *out, int64_t deadline, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	const int ns = c->pl->num_shards;
	for (int i = 0; push && i < ns && !st; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (c->sparse[i]) {
			st = push_rows(c, i, step, lr, deadline, err);
			continue;
		}
		struct dt_ps_push m = { .range = { sh->offset, sh->count }, .lr = lr, .step = step };
		dt_ps_sync_push_header_encode(&m, c->sync_push_hdr[i]);
		struct iovec parts[2] = { { c->sync_push_hdr[i], DT_PS_SYNC_PUSH_HEADER },
					  { c->cfg.grads + sh->offset, sh->count * sizeof(float) } };
		st = issue(c, sh->ps, &c->push_reqs[i], DT_MSG_PS_SYNC_PUSH, parts, 2, c->sync_push_reply[i],
			   DT_PS_SYNC_PUSH_REPLY_BYTES, deadline, err);
	}
	for (int i = 0; i < ns && !st; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (push && c->sparse[i])
			continue; /* its rows are pulled before the next forward pass */
		size_t cap = DT_PS_SYNC_PULL_REPLY_HEADER + sh->count * sizeof(float);
		if (!c->sync_pull_reply[i])
			c->sync_pull_reply[i] = dt_xmalloc(cap);
		struct dt_ps_sync_pull m = { .range = { sh->offset, sh->count }, .after = after };
		dt_ps_sync_pull_encode(&m, c->sync_pull_req[i]);
		struct iovec part = { c->sync_pull_req[i], DT_PS_SYNC_PULL_BYTES };
		st = issue(c, sh->ps, &c->pull_reqs[i], DT_MSG_PS_SYNC_PULL, &part, 1, c->sync_pull_reply[i], cap, deadline,
			   err);
	}
	if ((st = wait_until(c, all_done_or_lost, st, deadline, err)))
		return st;
	memset(out, 0, sizeof(*out));
	out->min_step = INT64_MAX;
	for (int i = 0; push && i < ns; i++) {
		struct dt_ps_sync_push_reply r;
		if ((st = dt_ps_sync_push_reply_decode(c->sync_push_reply[i], (size_t)c->push_reqs[i].reply.length, &r, err)))
			return dt_err_prefix(err, "%s", dt_conn_peer(c->conns[c->pl->shards[i].ps]));
		out->dropped += !!(r.flags & DT_PS_SYNC_PUSH_DROPPED);
	}
	for (int i = 0; i < ns; i++) {
		const struct dt_shard *sh = &c->pl->shards[i];
		if (push && c->sparse[i])
			continue;
		struct dt_ps_sync_pull_reply r;
		if ((st = dt_ps_sync_pull_reply_decode(c->sync_pull_reply[i], (size_t)c->pull_reqs[i].reply.length,
						       sh->count, &r, err)))
			return dt_err_prefix(err, "%s", dt_conn_peer(c->conns[sh->ps]));
		memcpy(c->cfg.params + sh->offset, r.values, sh->count * sizeof(float));
		if (r.step < out->min_step)
			out->min_step = r.step;
		if (sh->ps == 0 && r.step > out->global_step)
			out->global_step = r.step;
		if (r.held_ns > out->held_ns)
			out->held_ns = r.held_ns;
	}
	return DT_OK;
}
