#include "distribute/in_graph.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/retry.h"
#include "net/conn.h"
#include "net/socket.h"

struct replica_task {
	struct dt_conn *conn;
	struct dt_request req;
	uint8_t setup[DT_PS_REPLICA_SETUP_MAX];
	uint8_t header[DT_PS_REPLICA_STEP_HEADER];
	uint8_t *reply;            /* DT_PS_REPLICA_REPLY_HEADER + 4 * num_params */
};

struct dt_in_graph_master {
	struct replica_task *tasks; /* (ntasks) one per std server */
	int ntasks;
	uint32_t features;          /* the master's hello's */
	size_t num_params;          /* set up for; 0 before dt_in_graph_setup */
	struct dt_loop *loop;
};

/* Whether task t's replies carry the text figures: both hellos announced them. */
static int replies_text(const struct dt_in_graph_master *m, const struct replica_task *t)
{
	const struct dt_hello *them = dt_conn_remote(t->conn);
	return them && (them->features & m->features & DT_PS_FEATURE_REPLICA_TEXT) != 0;
}

static int all_replied(void *arg)
{
	struct dt_in_graph_master *m = arg;
	for (int i = 0; i < m->ntasks; i++)
		if (!m->tasks[i].req.done)
			return 0;
	return 1;
}

/* Sends one request to every task (parts built by `fill`), waits for every
 * reply, and returns the first failure. */
static enum dt_status round_trip(struct dt_in_graph_master *m, uint16_t type,
				 int (*fill)(struct dt_in_graph_master *, int, struct iovec *, void *), void *arg,
				 size_t reply_cap, int64_t deadline, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	int issued = 0;
	for (int i = 0; i < m->ntasks && !st; i++, issued++) {
		struct replica_task *t = &m->tasks[i];
		struct iovec parts[2];
		int n = fill(m, i, parts, arg);
		memset(&t->req, 0, sizeof(t->req));
		t->req.type = type;
		t->req.deadline = deadline;
		t->req.reply_buf = reply_cap ? t->reply : NULL;
		t->req.reply_cap = reply_cap;
		st = dt_conn_request(t->conn, &t->req, parts, n, 0, err);
		if (st)
			t->req.done = 1;
	}
	for (int i = issued; i < m->ntasks; i++)
		m->tasks[i].req.done = 1;
	if (st) {
		for (int i = 0; i < m->ntasks; i++)
			if (!m->tasks[i].req.done)
				dt_request_cancel(&m->tasks[i].req);
	}
	struct dt_err loop_err = DT_ERR_INIT;
	enum dt_status ls = dt_loop_run_until(m->loop, all_replied, m, deadline + 1000000000LL, "replies from the replicas",
					      &loop_err);
	if (ls) {
		for (int i = 0; i < m->ntasks; i++)
			if (!m->tasks[i].req.done)
				dt_request_cancel(&m->tasks[i].req);
	}
	if (st)
		return st;
	for (int i = 0; i < m->ntasks; i++)
		if (m->tasks[i].req.status) {
			if (err)
				*err = m->tasks[i].req.err;
			return m->tasks[i].req.status;
		}
	if (ls && err)
		*err = loop_err;
	return ls;
}

static int fill_setup(struct dt_in_graph_master *m, int i, struct iovec *parts, void *arg)
{
	size_t *lens = arg;
	parts[0] = (struct iovec){ m->tasks[i].setup, lens[i] };
	return 1;
}

struct step_args {
	int64_t step;
	const float *params;
	size_t n;
};

static int fill_step(struct dt_in_graph_master *m, int i, struct iovec *parts, void *arg)
{
	struct step_args *a = arg;
	dt_ps_replica_step_encode_header(a->step, a->n, m->tasks[i].header);
	parts[0] = (struct iovec){ m->tasks[i].header, DT_PS_REPLICA_STEP_HEADER };
	parts[1] = (struct iovec){ (void *)(uintptr_t)a->params, a->n * sizeof(float) }; /* sent, never written */
	return 2;
}


static int fill_end(struct dt_in_graph_master *m, int i, struct iovec *parts, void *arg)
{
	(void)m, (void)i, (void)parts, (void)arg;
	return 0;
}

enum dt_status dt_in_graph_connect(struct dt_loop *loop, const char *const *addrs, int ntasks,
				   const struct dt_hello *hello, double connect_s, struct dt_in_graph_master **out,
				   struct dt_err *err)
{
	struct dt_in_graph_master *m = dt_xcalloc(1, sizeof(*m));
	m->loop = loop;
	m->ntasks = ntasks;
	m->features = hello->features;
	m->tasks = dt_xcalloc((size_t)(ntasks > 0 ? ntasks : 1), sizeof(*m->tasks));
	struct dt_conn_config cc = { 0 };
	int64_t deadline = dt_deadline_in(connect_s);
	char name[64];
	snprintf(name, sizeof(name), "--connect_timeout=%g s", connect_s);
	enum dt_status st = DT_OK;
	for (int i = 0; i < ntasks && !st; i++) {
		char host[DT_HOST_MAX];
		int port;
		/* Retried whatever the failure (a std server paused or still
		 * starting) until --connect_timeout, like the ps clients. */
		struct dt_retry rt;
		dt_retry_init(&rt, dt_now_ns(), deadline, name, (uint64_t)getpid() ^ (uint64_t)i);
		st = dt_sock_split_hostport(addrs[i], host, sizeof(host), &port, err);
		if (!st)
			st = dt_conn_dial(loop, host, port, hello, "ps", (uint32_t)i, &cc, &rt, NULL, &m->tasks[i].conn, err);
	}
	if (st) {
		dt_in_graph_free(m);
		m = NULL;
	}
	*out = m;
	return st;
}

enum dt_status dt_in_graph_setup(struct dt_in_graph_master *m, const struct dt_ps_replica_setup *setups,
				 size_t num_params, int64_t deadline, struct dt_err *err)
{
	size_t *lens = dt_xcalloc((size_t)(m->ntasks > 0 ? m->ntasks : 1), sizeof(*lens));
	m->num_params = num_params;
	for (int i = 0; i < m->ntasks; i++) {
		lens[i] = dt_ps_replica_setup_encode(&setups[i], m->tasks[i].setup);
		free(m->tasks[i].reply);
		m->tasks[i].reply = dt_xmalloc(DT_PS_REPLICA_REPLY_TEXT_HEADER + num_params * sizeof(float));
	}
	enum dt_status st = round_trip(m, DT_MSG_PS_REPLICA_SETUP, fill_setup, lens, 0, deadline, err);
	free(lens);
	return st;
}

enum dt_status dt_in_graph_step(struct dt_in_graph_master *m, int64_t step, const float *params, float *grad_sum,
				struct dt_in_graph_figures *out, int64_t deadline, struct dt_err *err)
{
	const size_t n = m->num_params;
	struct step_args a = { step, params, n };
	enum dt_status st = round_trip(m, DT_MSG_PS_REPLICA_STEP, fill_step, &a,
				       DT_PS_REPLICA_REPLY_TEXT_HEADER + n * sizeof(float), deadline, err);
	if (st)
		return st;
	*out = (struct dt_in_graph_figures){ .text = 1 };
	for (int i = 0; i < m->ntasks; i++) {
		struct dt_ps_replica_step rep;
		struct replica_task *t = &m->tasks[i];
		const int text = replies_text(m, t);
		if ((st = dt_ps_replica_reply_decode(t->reply, (size_t)t->req.reply.length, n, text, &rep, err)))
			return dt_err_prefix(err, "%s", dt_conn_peer(t->conn));
		out->loss_sum += rep.fig.loss_sum;
		out->correct += rep.fig.correct;
		out->examples += rep.fig.examples;
		out->counted += rep.fig.counted;
		out->seqs_correct += rep.fig.seqs_correct;
		out->nll_sum += rep.fig.nll_sum;
		out->bleu_sum += rep.fig.bleu_sum;
		out->bleu_batches += rep.fig.bleu_batches;
		out->text &= text;
		if (i == 0)
			memcpy(grad_sum, rep.values, n * sizeof(float));
		else
			for (size_t j = 0; j < n; j++)
				grad_sum[j] += rep.values[j];
	}
	return DT_OK;
}

enum dt_status dt_in_graph_end(struct dt_in_graph_master *m, int64_t deadline, struct dt_err *err)
{
	return round_trip(m, DT_MSG_PS_END, fill_end, NULL, 0, deadline, err);
}

static void shut_down_all(struct dt_in_graph_master *m, const char *reason)
{
	for (int i = 0; i < m->ntasks; i++) {
		if (m->tasks[i].conn && dt_conn_is_open(m->tasks[i].conn))
			dt_conn_shutdown(m->tasks[i].conn, reason);
	}
}

void dt_in_graph_leave(struct dt_in_graph_master *m, const struct dt_err *why)
{
	if (!m)
		return;
	char reason[DT_ERR_MSG_MAX + 32];
	snprintf(reason, sizeof(reason), "the master failed: %s", why && why->msg[0] ? why->msg : "(no reason)");
	shut_down_all(m, reason);
}

void dt_in_graph_free(struct dt_in_graph_master *m)
{
	if (!m)
		return;
	shut_down_all(m, "the master is done");
	for (int i = 0; m->loop && i < 20; i++) {
		int open = 0;
		for (int k = 0; k < m->ntasks; k++)
			open += m->tasks[k].conn && dt_conn_is_open(m->tasks[k].conn);
		if (!open || dt_loop_run_once(m->loop, dt_deadline_in(0.1), NULL))
			break;
	}
	for (int i = 0; i < m->ntasks; i++) {
		dt_conn_free(m->tasks[i].conn);
		free(m->tasks[i].reply);
	}
	free(m->tasks);
	free(m);
}
