/* The std server's side of t2t's in-graph sync (distribute/in_graph.h): a
 * compute replica that the master sets up and then drives step by step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "data/pipeline.h"
#include "data/problem.h"
#include "distribute/ps_wire.h"
#include "net/conn.h"
#include "distribute/in_graph.h"
#include "nn/model.h"

struct dt_in_graph_replica {
	struct dt_in_graph_replica_config cfg;
	size_t num_params;
	struct dt_ps_server_extension ext;
	/* set up by the master */
	struct dt_conn *master;
	struct dt_ps_replica_setup setup;
	struct dt_dataset train;
	struct dt_model *model;
	struct dt_pipeline *pipes[DT_PS_REPLICA_MAX_PER_TASK];
	/* the replicas' model and batches when the train layer builds them:
	 * cfg.source (the program's own), else cfg.text (a text problem's) */
	const struct dt_in_graph_text_ops *ops;
	void *texts[DT_PS_REPLICA_MAX_PER_TASK]; /* their inputs (ops), in place of pipes */
	struct dt_hparams hp;       /* the server's, with the master's dropout and batch size */
	struct dt_rng rngs[DT_PS_REPLICA_MAX_PER_TASK];
	float *sum;                 /* (num_params) the replicas' summed gradients */
	float *ma_before;           /* (dt_model_sync_mean_floats) the moving averages before a replica's step */
	struct dt_pipeline_config pcs[DT_PS_REPLICA_MAX_PER_TASK];
	uint8_t header[DT_PS_REPLICA_REPLY_TEXT_HEADER];
	int64_t next_step;          /* the step the pipelines are positioned for */
	int64_t steps;
	int failed;
	struct dt_err failure;
};

static void teardown(struct dt_in_graph_replica *r)
{
	for (uint32_t i = 0; i < DT_PS_REPLICA_MAX_PER_TASK; i++) {
		dt_pipeline_free(r->pipes[i]);
		r->pipes[i] = NULL;
		if (r->texts[i])
			r->ops->input_free(r->texts[i]);
		r->texts[i] = NULL;
	}
	dt_model_free(r->model);
	r->model = NULL;
	free(r->ma_before);
	r->ma_before = NULL;
	dt_dataset_release(&r->train);
	memset(&r->train, 0, sizeof(r->train));
	r->master = NULL;
}

/* A failed reply closes the conn, which the loop reports through on_close. */
static void replied(struct dt_conn *c, enum dt_status st)
{
	if (st)
		dt_debug("reply to %s not sent (%s); the connection closes", dt_conn_peer(c), dt_status_message(st));
}

static void refuse(struct dt_conn *c, const struct dt_frame_header *h, enum dt_status st, const char *what)
{
	dt_warn("refused %s from %s: %s", dt_msg_name(h->type), dt_conn_peer(c), what);
	(void)dt_conn_reply_error(c, h->request_id, st, "%s", what);
}

static int from_master(const struct dt_in_graph_replica *r, struct dt_conn *c)
{
	const struct dt_hello *h = dt_conn_remote(c);
	return h && strcmp(h->role, r->cfg.master_role) == 0 && h->index == r->cfg.master_index;
}

/* Loads the train split and builds the model and one pipeline per replica. */
static enum dt_status set_up(struct dt_in_graph_replica *r, const struct dt_ps_replica_setup *s, struct dt_err *err)
{
	const struct dt_in_graph_replica_config *tc = &r->cfg;
	teardown(r);
	enum dt_status st;
	if (tc->source) {
		/* The program's own model and data (its std server runs the same
		 * program as the master): nothing to load by name. */
		if (s->problem[0])
			return dt_err_set(err, DT_CONFIG, "the master trains on problem '%s' but this task trains the "
							  "program's own model and data", s->problem);
	} else {
		if (!s->problem[0])
			return dt_err_set(err, DT_CONFIG, "the master trains its program's own model and data but this "
							  "task was started with --problem=%s", tc->problem);
		if (strcmp(s->problem, tc->problem) != 0) {
			dt_err_set(err, DT_CONFIG, "the master trains on problem '%s' but this task was started with "
						   "--problem=%s", s->problem, tc->problem);
			return DT_CONFIG;
		}
		if ((st = dt_problem_load(tc->problem, tc->data_dir, tc->data, DT_SPLIT_TRAIN, s->seed, &r->train, err)))
			return st;
	}
	struct dt_hparams hp = *tc->hp;
	hp.dropout = s->dropout;
	const int text = tc->source || r->train.text != NULL;
	if (text && !r->ops)
		return dt_err_set(err, DT_INTERNAL, "problem '%s' is text and this std server has no text ops", tc->problem);
	if (text) {
		hp.batch_size = (int)s->batch_size; /* tokens, or the program's examples */
		st = r->ops->model_new(r->ops->arg, &hp, &r->train, &r->model, err);
	} else {
		st = dt_model_new(tc->models, &hp, r->train.height, r->train.width, r->train.channels, r->train.num_classes,
				  (int)s->batch_size, &r->model, err);
	}
	if (st)
		return st;
	r->hp = hp;
	if (dt_model_num_params(r->model) != r->num_params)
		return dt_err_set(err, DT_INTERNAL, "replica model has %zu parameters, expected %zu",
				  dt_model_num_params(r->model), r->num_params);
	for (uint32_t i = 0; i < s->replicas && text; i++) {
		/* Replica k reads shard k of the token batches, as sync trainer k
		 * does through the ps (train/sync_roles.h). */
		if ((st = r->ops->input_new(r->ops->arg, &r->train, &hp, s->seed, (int)(s->first_shard + i),
					      (int)s->total_shards, 0, &r->texts[i], err)))
			return st;
		dt_rng_derive(&r->rngs[i], s->seed, "dropout", s->first_shard + i);
	}
	for (uint32_t i = 0; i < s->replicas && !text; i++) {
		/* Replica k reads slice k of each global batch of the whole data, as
		 * trainer k does through the ps (train/sync_roles.h, data/pipeline.h). */
		struct dt_pipeline_config pc = {
			.data = &r->train, .batch_size = (int)s->batch_size, .seed = s->seed, .shard_index = 0,
			.shard_count = 1, .slice_index = (int)(s->first_shard + i), .slice_count = (int)s->total_shards,
			.prefetch = tc->prefetch,
		};
		r->pcs[i] = pc;
		if ((st = dt_pipeline_new(&pc, &r->pipes[i], err)))
			return st;
		dt_rng_derive(&r->rngs[i], s->seed, "dropout", s->first_shard + i);
	}
	if (s->replicas > 1 && !r->sum)
		r->sum = dt_xcalloc(r->num_params ? r->num_params : 1, sizeof(float));
	const size_t nma = dt_model_sync_mean_floats(r->model);
	if (nma && !r->ma_before)
		r->ma_before = dt_xmalloc(nma * sizeof(float));
	r->setup = *s;
	r->next_step = 0;
	return DT_OK;
}

/* Replaces *p (made from pc) by a pipeline from pc positioned `batches`
 * global batches in: step s reads global batch s. */
static enum dt_status pipeline_at(const struct dt_pipeline_config *pc, int64_t batches, struct dt_pipeline **p,
				  struct dt_err *err)
{
	struct dt_pipeline_config at = *pc;
	const int slices = pc->slice_count > 1 ? pc->slice_count : 1;
	dt_pipeline_batch_position(*p ? dt_pipeline_shard_size(*p) : 0, pc->batch_size * slices, batches,
				   &at.start_epoch, &at.start_offset);
	dt_pipeline_free(*p);
	*p = NULL;
	return dt_pipeline_new(&at, p, err);
}

/* Replica i's token input, positioned at step `batches`. */
static enum dt_status text_at(struct dt_in_graph_replica *r, uint32_t i, int64_t batches, struct dt_err *err)
{
	r->ops->input_free(r->texts[i]);
	r->texts[i] = NULL;
	return r->ops->input_new(r->ops->arg, &r->train, &r->hp, r->setup.seed, (int)(r->setup.first_shard + i),
				      (int)r->setup.total_shards, batches, &r->texts[i], err);
}

/* Forward/backward of each replica's batch at the master's variables;
 * replies with the summed mean gradients. */
static void compute(struct dt_in_graph_replica *r, struct dt_conn *c, const struct dt_frame_header *h,
		    const struct dt_ps_replica_step *m)
{
	if (m->step != r->next_step) {
		/* A master resumed from a checkpoint: step s reads batch s of each shard. */
		struct dt_err err = DT_ERR_INIT;
		for (uint32_t i = 0; i < r->setup.replicas; i++)
			if (r->texts[i] ? text_at(r, i, m->step, &err) : pipeline_at(&r->pcs[i], m->step, &r->pipes[i], &err)) {
				teardown(r);
				refuse(c, h, err.status, err.msg);
				return;
			}
		dt_info("in-graph replica%s resuming at step %lld", r->setup.replicas > 1 ? "s" : "", (long long)m->step);
	}
	r->next_step = m->step + 1;
	memcpy(dt_model_params(r->model), m->values, r->num_params * sizeof(float));
	float *grads = dt_model_grads(r->model);
	/* The text figures go to a master that reads them (both hellos announce
	 * them); an older one gets the sequences right as `correct`, of the
	 * examples, as an image batch's count. */
	const struct dt_hello *mh = dt_conn_remote(c);
	const int text = mh && (mh->features & r->cfg.features & DT_PS_FEATURE_REPLICA_TEXT) != 0;
	struct dt_ps_replica_figures fig = { 0 };
	for (uint32_t i = 0; i < r->setup.replicas; i++) {
		int ok = 0;
		const struct dt_batch *b;
		/* Each replica's batch values of the moving averages ride where their
		 * gradients would (nn/model.h's dt_model_moving_average_values): the
		 * master moves its copy toward their mean. Its training forward pass
		 * normalizes by the batch's own moments, so the copy the replica
		 * before it moved changes nothing else. */
		if (r->ma_before)
			dt_model_sync_mean_gather(r->model, r->ma_before);
		if (r->texts[i]) {
			struct dt_err err = DT_ERR_INIT;
			struct dt_step_result res;
			if (r->ops->input_next(r->texts[i], &b, &err) ||
			    dt_model_step(r->model, b->general, &r->rngs[i], NULL, NULL, &res, &err)) {
				dt_err_prefix(&err, "in-graph replica %u at step %lld", r->setup.first_shard + i,
					      (long long)m->step);
				refuse(c, h, err.status, err.msg);
				return;
			}
			fig.loss_sum += (double)res.loss;
			ok = res.seqs > 0 && !text ? res.seqs_correct : res.correct;
			if (res.seqs > 0 && text) { /* as the session's own step (dt__session_compute_batch) */
				fig.counted += (uint32_t)res.counted;
				fig.seqs_correct += (uint32_t)res.seqs_correct;
				fig.nll_sum += res.nll_sum;
				fig.bleu_sum += res.bleu;
				fig.bleu_batches += (uint32_t)res.bleu_batches;
			}
		} else {
			b = dt_pipeline_next(r->pipes[i]);
			fig.loss_sum += (double)dt_model_train_batch(r->model, b->x, b->y, b->size, &r->rngs[i], &ok);
		}
		fig.correct += (uint32_t)ok;
		fig.examples += (uint32_t)b->size;
		if (r->ma_before)
			dt_model_moving_average_values(r->model, r->ma_before, grads);
		if (r->setup.replicas == 1)
			break;
		if (i == 0)
			memcpy(r->sum, grads, r->num_params * sizeof(float));
		else
			for (size_t j = 0; j < r->num_params; j++)
				r->sum[j] += grads[j];
	}
	r->steps++;
	const size_t header = dt_ps_replica_reply_encode_header(&fig, r->num_params, text, r->header);
	/* Sent from the model's (or the sum's) buffer: the master sends the next
	 * step only after this reply arrived. */
	struct iovec parts[2] = { { r->header, header },
				  { r->setup.replicas == 1 ? grads : r->sum,
				    r->num_params * sizeof(float) } };
	replied(c, dt_conn_sendv_ref(c, h->type, DT_FRAME_F_REPLY, h->request_id, parts, 2, NULL, NULL, NULL));
}

static int on_frame(void *arg, struct dt_conn *c, const struct dt_frame_header *h, uint8_t *p)
{
	struct dt_in_graph_replica *r = arg;
	struct dt_err err = DT_ERR_INIT;
	if (h->type == DT_MSG_PS_REPLICA_SETUP) {
		struct dt_ps_replica_setup s;
		if (!from_master(r, c)) {
			refuse(c, h, DT_CONFIG, "only the master sets up in-graph replicas");
			return 1;
		}
		if (dt_ps_replica_setup_decode(p, (size_t)h->length, &s, &err) || set_up(r, &s, &err)) {
			teardown(r);
			refuse(c, h, err.status, err.msg);
			return 1;
		}
		r->master = c;
		dt_info("in-graph replica%s %u-%u of %u for %s, batch %u each", s.replicas > 1 ? "s" : "", s.first_shard,
			s.first_shard + s.replicas - 1, s.total_shards, dt_conn_peer(c), s.batch_size);
		replied(c, dt_conn_send(c, h->type, DT_FRAME_F_REPLY, h->request_id, NULL, 0, NULL));
		return 1;
	}
	if (h->type == DT_MSG_PS_REPLICA_STEP) {
		struct dt_ps_replica_step m;
		if (c != r->master || !r->model) {
			refuse(c, h, DT_CONFIG, "not set up as an in-graph replica by this peer");
			return 1;
		}
		if (dt_ps_replica_step_decode(p, (size_t)h->length, r->num_params, &m, &err)) {
			refuse(c, h, DT_PROTOCOL, err.msg);
			return 1;
		}
		compute(r, c, h, &m);
		return 1;
	}
	return 0;
}

/* The master's connection closed. After PS_END that is the end of the run;
 * before it, however it closed — killed (a reset or EOF), silent past the
 * connection's silence limit, or in order (SHUTDOWN: a master that failed,
 * say because another std server died, closes its connections cleanly on
 * the way out) — the master is gone mid-run and nothing will set this
 * server up again in this run: a loss (DT_PEER, exit 3, restart the
 * cluster). A master that closes before it set this server up (a dial it
 * retried, or killed while starting) leaves nothing behind: the server
 * waits for the next one as it waited for the first. */
static void on_close(void *arg, struct dt_conn *c, const struct dt_err *why, int ended)
{
	struct dt_in_graph_replica *r = arg;
	if (c != r->master)
		return;
	r->master = NULL;
	if (ended || r->failed)
		return;
	r->failed = 1;
	dt_err_set(&r->failure, DT_PEER, "the in-graph master was lost after %lld step(s): %s left without ending the run (%s)",
		   (long long)r->steps, dt_conn_peer(c), why->msg);
	dt_err_hint(&r->failure, "restart the cluster (every task): the master resumes from its newest checkpoint");
}

enum dt_status dt_in_graph_replica_new(const struct dt_in_graph_replica_config *cfg,
				       struct dt_in_graph_replica **out, struct dt_err *err)
{
	(void)err;
	struct dt_in_graph_replica *r = dt_xcalloc(1, sizeof(*r));
	r->cfg = *cfg;
	r->ops = cfg->source ? cfg->source : cfg->text;
	r->num_params = cfg->num_params;
	r->ext = (struct dt_ps_server_extension){ .on_frame = on_frame, .on_close = on_close, .arg = r };
	*out = r;
	return DT_OK;
}

void dt_in_graph_replica_free(struct dt_in_graph_replica *r)
{
	if (!r)
		return;
	teardown(r);
	free(r->sum);
	free(r);
}

const struct dt_ps_server_extension *dt_in_graph_replica_extension(struct dt_in_graph_replica *r) { return &r->ext; }
const struct dt_err *dt_in_graph_replica_failure(const struct dt_in_graph_replica *r)
{
	return r && r->failed ? &r->failure : NULL;
}
int64_t dt_in_graph_replica_steps(const struct dt_in_graph_replica *r) { return r ? r->steps : 0; }
