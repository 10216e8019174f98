#include "distribute/ps_sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"

struct acc {
	uint32_t n;              /* gradients accumulated for the open step */
	float lr;                /* of the first one */
};

struct trainer {
	char name[48];           /* "worker:1" */
	int shards_pushed;       /* shards pushed for the open step */
	int64_t heard_ns;        /* last sync request from it; 0: never */
	int64_t gone_ns;         /* when its connection closed; 0: connected or never */
};

struct dt_ps_sync {
	char name[32];
	struct dt_ps_sync_shard *shards;
	struct acc *acc;         /* (nshards) */
	int nshards;
	size_t num_params;
	float *params;
	struct dt_optimizer *opt;
	float *sum;              /* (num_params) accumulators; only the shards' ranges are used; lazily */
	struct trainer *trainers;
	int num_trainers;

	int configured;
	struct dt_ps_sync_config cfg;
	char configured_by[48];
	int64_t first_step;      /* the step at configuration */
	int64_t step;
	int64_t open_ns;         /* first gradient of the open step; 0: none yet */
	struct dt_ps_sync_waiter *waiters;
	int failed;
	struct dt_err failure;
	struct dt_ps_sync_stats stats;
};

struct dt_ps_sync *dt_ps_sync_new(const struct dt_ps_sync_params *p)
{
	struct dt_ps_sync *s = dt_xcalloc(1, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", p->name);
	s->nshards = p->nshards;
	s->shards = dt_xcalloc((size_t)(p->nshards ? p->nshards : 1), sizeof(*s->shards));
	memcpy(s->shards, p->shards, (size_t)p->nshards * sizeof(*s->shards));
	s->acc = dt_xcalloc((size_t)(p->nshards ? p->nshards : 1), sizeof(*s->acc));
	s->num_params = p->num_params;
	s->params = p->params;
	s->opt = p->opt;
	s->num_trainers = p->num_trainers;
	s->trainers = dt_xcalloc((size_t)(p->num_trainers ? p->num_trainers : 1), sizeof(*s->trainers));
	for (int i = 0; i < p->num_trainers; i++)
		snprintf(s->trainers[i].name, sizeof(s->trainers[i].name), "%s", p->trainers[i]);
	return s;
}

void dt_ps_sync_free(struct dt_ps_sync *s)
{
	if (!s)
		return;
	while (s->waiters) {
		struct dt_ps_sync_waiter *w = s->waiters;
		s->waiters = w->next_;
		if (w->drop)
			w->drop(w);
	}
	free(s->sum);
	free(s->trainers);
	free(s->acc);
	free(s->shards);
	free(s);
}

enum dt_status dt_ps_sync_configure(struct dt_ps_sync *s, const struct dt_ps_sync_config *cfg, const char *who,
				    int64_t step, struct dt_err *err)
{
	if (s->configured) {
		const struct dt_ps_sync_config *c = &s->cfg;
		if (c->replicas_to_aggregate != cfg->replicas_to_aggregate || c->total_replicas != cfg->total_replicas ||
		    c->step_timeout_s != cfg->step_timeout_s) {
			dt_err_set(err, DT_CONFIG,
				   "%s trains synchronously with %u of %u replicas per step and a %g s step timeout "
				   "(configured by %s), but %s asks for %u of %u and %g s",
				   s->name, c->replicas_to_aggregate, c->total_replicas, c->step_timeout_s, s->configured_by,
				   who, cfg->replicas_to_aggregate, cfg->total_replicas, cfg->step_timeout_s);
			dt_err_hint(err, "start every trainer with the same --replicas_to_aggregate and --sync_timeout");
			return DT_CONFIG;
		}
		return DT_OK;
	}
	if ((int)cfg->total_replicas != s->num_trainers) {
		dt_err_set(err, DT_CONFIG, "%s asks %s to aggregate over %u replicas, but the cluster has %d trainers", who,
			   s->name, cfg->total_replicas, s->num_trainers);
		return DT_CONFIG;
	}
	s->cfg = *cfg;
	s->configured = 1;
	snprintf(s->configured_by, sizeof(s->configured_by), "%s", who);
	s->first_step = s->step = step;
	if (!s->sum)
		s->sum = dt_xcalloc(s->num_params ? s->num_params : 1, sizeof(float));
	return DT_OK;
}

int dt_ps_sync_configured(const struct dt_ps_sync *s) { return s->configured; }
int64_t dt_ps_sync_step(const struct dt_ps_sync *s) { return s->step; }
const struct dt_err *dt_ps_sync_failure(const struct dt_ps_sync *s) { return s->failed ? &s->failure : NULL; }

void dt_ps_sync_get_stats(const struct dt_ps_sync *s, struct dt_ps_sync_stats *out)
{
	*out = s->stats;
	out->step = s->step;
}

int dt_ps_sync_trainer_of(const struct dt_ps_sync *s, const char *role, uint32_t index)
{
	char name[48];
	snprintf(name, sizeof(name), "%s:%u", role, index);
	for (int i = 0; i < s->num_trainers; i++)
		if (strcmp(s->trainers[i].name, name) == 0)
			return i;
	return -1;
}

int dt_ps_sync_shard_of(const struct dt_ps_sync *s, uint64_t offset, uint64_t count)
{
	for (int i = 0; i < s->nshards; i++)
		if (s->shards[i].offset == offset && s->shards[i].count == count)
			return i;
	return -1;
}

void dt_ps_sync_heard(struct dt_ps_sync *s, int trainer, int64_t now)
{
	if (trainer >= 0 && trainer < s->num_trainers) {
		s->trainers[trainer].heard_ns = now;
		s->trainers[trainer].gone_ns = 0;
	}
}

void dt_ps_sync_gone(struct dt_ps_sync *s, int trainer, int64_t now)
{
	if (trainer >= 0 && trainer < s->num_trainers)
		s->trainers[trainer].gone_ns = now;
}

static void release_ready(struct dt_ps_sync *s, int64_t now)
{
	struct dt_ps_sync_waiter **pp = &s->waiters;
	while (*pp) {
		struct dt_ps_sync_waiter *w = *pp;
		if (s->failed || w->after < s->step) {
			*pp = w->next_;
			w->next_ = NULL;
			w->release(w, s->step, (uint64_t)(now - w->since_ns), s->failed ? &s->failure : NULL);
		} else {
			pp = &w->next_;
		}
	}
}

void dt_ps_shard_apply(const struct dt_ps_sync_shard *sh, struct dt_optimizer *opt, float *params, const float *sum,
		       int summed, float lr, int64_t step)
{
	switch (sh->kind) {
	case DT_VAR_TRAINABLE:
		dt_optimizer_apply_mean(opt, params, sum, summed, sh->offset, sh->count, lr, step);
		break;
	case DT_VAR_MOVING_AVERAGE:
		dt_moving_average_apply(params + sh->offset, sum, summed, sh->count, sh->decay);
		break;
	case DT_VAR_FROZEN:
		break;
	}
}

/* Every shard has its gradients: average, apply, next step, release. The
 * moving statistics move once per aggregated step, toward the mean of its
 * trainers' batch values: the mean of a global batch's halves' means is the
 * global batch's, as with all-reduce (SyncOnRead MEAN), and no trainer's
 * arrival order changes it (TensorFlow's SyncReplicasOptimizer instead lets
 * each worker's update ops assign on the ps as they come, stale or not). */
static void apply_step(struct dt_ps_sync *s, int64_t now)
{
	s->stats.applied++;
	for (int i = 0; i < s->nshards; i++) {
		dt_ps_shard_apply(&s->shards[i], s->opt, s->params, s->sum + s->shards[i].offset, (int)s->acc[i].n,
				  s->acc[i].lr, (int64_t)s->stats.applied);
		s->acc[i].n = 0;
	}
	for (int t = 0; t < s->num_trainers; t++)
		s->trainers[t].shards_pushed = 0;
	s->step++;
	s->open_ns = 0;
	release_ready(s, now);
}

void dt_ps_sync_restore(struct dt_ps_sync *s, int64_t step, uint64_t applied, int64_t now)
{
	for (int i = 0; i < s->nshards; i++)
		s->acc[i].n = 0;
	for (int t = 0; t < s->num_trainers; t++)
		s->trainers[t].shards_pushed = 0;
	/* The trainers are (re)starting, as after configuration: the first step's timeout. */
	s->first_step = s->step = step;
	s->stats.applied = applied;
	s->open_ns = 0;
	release_ready(s, now);
}

enum dt_status dt_ps_sync_push(struct dt_ps_sync *s, int shard, int trainer, int64_t step, float lr,
			       const float *grads, int64_t now, int *dropped, struct dt_err *err)
{
	*dropped = 0;
	DT_ASSERT(shard >= 0 && shard < s->nshards);
	if (s->failed) {
		if (err)
			*err = s->failure;
		return s->failure.status;
	}
	if (!s->configured)
		return dt_err_set(err, DT_CONFIG, "%s is not configured for synchronous training", s->name);
	if (step > s->step)
		return dt_err_set(err, DT_PROTOCOL, "%s got gradients for step %lld while at step %lld", s->name,
				  (long long)step, (long long)s->step);
	if (step < s->step) {
		*dropped = 1;
		s->stats.dropped++;
		return DT_OK;
	}
	const struct dt_ps_sync_shard *sh = &s->shards[shard];
	struct acc *a = &s->acc[shard];
	float *sum = s->sum + sh->offset;
	if (a->n == 0) {
		memcpy(sum, grads, sh->count * sizeof(float));
		a->lr = lr;
	} else {
		for (size_t j = 0; j < sh->count; j++)
			sum[j] += grads[j];
	}
	a->n++;
	s->stats.accepted++;
	if (s->open_ns == 0)
		s->open_ns = now;
	if (trainer >= 0 && trainer < s->num_trainers)
		s->trainers[trainer].shards_pushed++;
	for (int i = 0; i < s->nshards; i++)
		if (s->acc[i].n < s->cfg.replicas_to_aggregate)
			return DT_OK;
	apply_step(s, now);
	return DT_OK;
}

void dt_ps_sync_wait(struct dt_ps_sync *s, struct dt_ps_sync_waiter *w, int64_t now)
{
	w->since_ns = now;
	w->next_ = s->waiters;
	s->waiters = w;
	release_ready(s, now);
}

void dt_ps_sync_drop_owner(struct dt_ps_sync *s, void *owner)
{
	struct dt_ps_sync_waiter **pp = &s->waiters;
	while (*pp) {
		if ((*pp)->owner == owner) {
			struct dt_ps_sync_waiter *w = *pp;
			*pp = w->next_;
			if (w->drop)
				w->drop(w);
		} else {
			pp = &(*pp)->next_;
		}
	}
}

int64_t dt_ps_sync_deadline(const struct dt_ps_sync *s)
{
	if (!s->configured || s->failed || s->open_ns == 0)
		return INT64_MAX;
	double t = s->step == s->first_step ? s->cfg.first_step_timeout_s : s->cfg.step_timeout_s;
	return s->open_ns + (int64_t)(t * 1e9);
}

/* "worker:0 (silent for 5.3 s, disconnected 5.2 s ago)" for each trainer
 * whose gradients are missing from the open step. */
static void describe_missing(struct dt_ps_sync *s, int64_t now, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = '\0';
	for (int t = 0; t < s->num_trainers && n < cap; t++) {
		const struct trainer *tr = &s->trainers[t];
		if (tr->shards_pushed >= s->nshards)
			continue;
		char part[160];
		if (tr->heard_ns == 0)
			snprintf(part, sizeof(part), "%s (never heard from)", tr->name);
		else if (tr->gone_ns)
			snprintf(part, sizeof(part), "%s (silent for %.1f s, disconnected %.1f s ago)", tr->name,
				 (double)(now - tr->heard_ns) / 1e9, (double)(now - tr->gone_ns) / 1e9);
		else
			snprintf(part, sizeof(part), "%s (silent for %.1f s)", tr->name, (double)(now - tr->heard_ns) / 1e9);
		int w = snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", part);
		if (w < 0)
			break;
		n += (size_t)w;
	}
}

enum dt_status dt_ps_sync_check(struct dt_ps_sync *s, int64_t now)
{
	if (s->failed)
		return s->failure.status;
	int64_t deadline = dt_ps_sync_deadline(s);
	if (deadline == INT64_MAX || now < deadline)
		return DT_OK;
	uint32_t have = UINT32_MAX;
	for (int i = 0; i < s->nshards; i++)
		if (s->acc[i].n < have)
			have = s->acc[i].n;
	char missing[600];
	describe_missing(s, now, missing, sizeof(missing));
	double waited = (double)(now - s->open_ns) / 1e9;
	dt_err_set(&s->failure, DT_TIMEOUT, "%s: step %lld timed out after %.1f s with %u of %u gradients; missing: %s",
		   s->name, (long long)s->step, waited, have == UINT32_MAX ? 0 : have, s->cfg.replicas_to_aggregate,
		   *missing ? missing : "none (a trainer died mid-push)");
	dt_err_hint(&s->failure, "restart the cluster; add backup workers (--replicas_to_aggregate below the number of "
				 "trainers) to ride over a slow or dead one, or raise --sync_timeout");
	s->failed = 1;
	release_ready(s, now);
	return DT_TIMEOUT;
}

/* ---- glue: the PS_SYNC_* messages on a connection ---- */

struct pull_waiter {
	struct dt_ps_sync_waiter w;
	struct dt_ps_sync *s;
	struct dt_conn *c;
	uint64_t request_id;
	uint8_t header[DT_PS_SYNC_PULL_REPLY_HEADER];
};

/* A failed reply closes the conn, which the loop reports through on_close. */
static void replied(struct dt_conn *c, enum dt_status st)
{
	if (st)
		dt_debug("reply to %s not sent (%s); the connection closes", dt_conn_peer(c), dt_status_message(st));
}

static void refuse(struct dt_ps_sync *s, struct dt_conn *c, const struct dt_frame_header *h, enum dt_status st,
		   const char *what)
{
	dt_warn("refused %s from %s: %s", dt_msg_name(h->type), dt_conn_peer(c), what);
	(void)dt_conn_reply_error(c, h->request_id, st, "%s: %s", s->name, what);
}

static void sent(void *arg, enum dt_status st)
{
	(void)st;
	free(arg);
}

static void drop_pull(struct dt_ps_sync_waiter *w)
{
	free(w); /* w is the first member of its pull_waiter */
}

static void release_pull(struct dt_ps_sync_waiter *w, int64_t step, uint64_t held_ns, const struct dt_err *failed)
{
	struct pull_waiter *pw = (struct pull_waiter *)w;
	if (failed) {
		(void)dt_conn_reply_error(pw->c, pw->request_id, failed->status, "%s", failed->msg);
		free(pw);
		return;
	}
	const struct dt_ps_sync_shard *sh = &pw->s->shards[w->shard];
	dt_ps_sync_pull_reply_encode_header(step, held_ns, pw->header);
	struct iovec parts[2] = { { pw->header, sizeof(pw->header) },
				  { pw->s->params + sh->offset, sh->count * sizeof(float) } };
	/* The values are sent from the live variables: they change only when the
	 * next step is applied, which needs this trainer's next gradients (or,
	 * for a backup, may tear its read, as TensorFlow's unlocked reads do). */
	if (dt_conn_sendv_ref(pw->c, DT_MSG_PS_SYNC_PULL, DT_FRAME_F_REPLY, pw->request_id, parts, 2, sent, pw, NULL))
		free(pw);
}

static int trainer_of_conn(struct dt_ps_sync *s, struct dt_conn *c)
{
	const struct dt_hello *r = dt_conn_remote(c);
	return r ? dt_ps_sync_trainer_of(s, r->role, r->index) : -1;
}

void dt_ps_sync_on_frame(struct dt_ps_sync *s, struct dt_conn *c, const struct dt_frame_header *h,
			 const uint8_t *p)
{
	struct dt_err err = DT_ERR_INIT;
	const int64_t now = dt_now_ns();
	const int trainer = trainer_of_conn(s, c);
	if (trainer < 0) {
		refuse(s, c, h, DT_CONFIG, "synchronous requests come from the cluster's trainers only");
		return;
	}
	dt_ps_sync_heard(s, trainer, now);
	if (h->type == DT_MSG_PS_SYNC_CONFIG) {
		struct dt_ps_sync_config cfg;
		if (dt_ps_sync_config_decode(p, (size_t)h->length, &cfg, &err) ||
		    dt_ps_sync_configure(s, &cfg, s->trainers[trainer].name, s->step, &err)) {
			refuse(s, c, h, err.status, err.msg);
			return;
		}
		replied(c, dt_conn_send(c, h->type, DT_FRAME_F_REPLY, h->request_id, NULL, 0, NULL));
		return;
	}
	if (!s->configured) {
		refuse(s, c, h, DT_CONFIG, "not configured for synchronous training (the chief sends ps_sync_config first)");
		return;
	}
	if (s->failed) {
		(void)dt_conn_reply_error(c, h->request_id, s->failure.status, "%s", s->failure.msg);
		return;
	}
	if (h->type == DT_MSG_PS_SYNC_PUSH) {
		struct dt_ps_push m;
		int shard = -1, dropped = 0;
		if (dt_ps_sync_push_decode(p, (size_t)h->length, &m, &err)) {
			refuse(s, c, h, DT_PROTOCOL, err.msg);
			return;
		}
		if ((shard = dt_ps_sync_shard_of(s, m.range.offset, m.range.count)) < 0) {
			char what[96];
			snprintf(what, sizeof(what), "holds no shard [%llu, %llu)", (unsigned long long)m.range.offset,
				 (unsigned long long)(m.range.offset + m.range.count));
			refuse(s, c, h, DT_CONFIG, what);
			return;
		}
		if (dt_ps_sync_push(s, shard, trainer, m.step, m.lr, m.grads, now, &dropped, &err)) {
			refuse(s, c, h, err.status, err.msg);
			return;
		}
		struct dt_ps_sync_push_reply r = { dropped ? DT_PS_SYNC_PUSH_DROPPED : 0, s->step };
		uint8_t out[DT_PS_SYNC_PUSH_REPLY_BYTES];
		dt_ps_sync_push_reply_encode(&r, out);
		replied(c, dt_conn_send(c, h->type, DT_FRAME_F_REPLY, h->request_id, out, sizeof(out), NULL));
		return;
	}
	if (h->type == DT_MSG_PS_SYNC_PULL) {
		struct dt_ps_sync_pull m;
		int shard;
		if (dt_ps_sync_pull_decode(p, (size_t)h->length, &m, &err)) {
			refuse(s, c, h, DT_PROTOCOL, err.msg);
			return;
		}
		if ((shard = dt_ps_sync_shard_of(s, m.range.offset, m.range.count)) < 0) {
			refuse(s, c, h, DT_CONFIG, "holds no such shard");
			return;
		}
		struct pull_waiter *pw = dt_xcalloc(1, sizeof(*pw));
		pw->w = (struct dt_ps_sync_waiter){ .shard = shard, .after = m.after, .owner = c, .release = release_pull,
					    .drop = drop_pull };
		pw->s = s;
		pw->c = c;
		pw->request_id = h->request_id;
		dt_ps_sync_wait(s, &pw->w, now);
		return;
	}
	refuse(s, c, h, DT_PROTOCOL, "not a synchronous request");
}

void dt_ps_sync_on_close(struct dt_ps_sync *s, struct dt_conn *c)
{
	dt_ps_sync_drop_owner(s, c);
	int trainer = trainer_of_conn(s, c);
	if (trainer >= 0)
		dt_ps_sync_gone(s, trainer, dt_now_ns());
}
