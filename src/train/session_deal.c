/*
 * session_deal.c — --deterministic on the training session (session.h):
 * the same bits at any worker or replica count.
 *
 * A global step is fixed_slices slices of the global batch, each cut into
 * micro-batches of micro_batch examples; which task computes a slice does
 * not change what it is (its examples come from the global order, its
 * dropout stream from the step and its index). dt__session_deal deals the
 * slices over the tasks there are (one each, or several when an elastic
 * ring lost workers); compute keeps every micro-batch's gradient apart;
 * apply sums them and applies their mean by one of fixed_point.h's two
 * methods, chosen by K (the global step's micro-batches) alone:
 *
 *   K <= DT_ORDERED_MAX_TERMS, the ordered sum: every deal ends with every
 *     task holding all K gradients, one task alone computing them all, or
 *     the raw floats all-gathered (each task's block of ceil(slices / tasks)
 *     slices, also for an uneven deal after an elastic loss), and each
 *     task sums them in micro-batch index order: the order is the index,
 *     never the task, so any worker count gives the same bits. A NaN or an
 *     infinity in any gradient makes the mean non-finite, the same on
 *     every task: the step fails as diverged everywhere. Where nothing
 *     reads the mean before the update (no weight decay, no clipping) it
 *     is made chunk by chunk inside the update (apply_ordered_fused).
 *   K > DT_ORDERED_MAX_TERMS, fixed point: compute also keeps each
 *     micro-batch's exponents; apply agrees on one scale per variable (the
 *     exponents' maximum over every task, which also carries a non-finite
 *     gradient), each task sums its own in 64-bit fixed point, and an
 *     int64 all-reduce sums the tasks' (exact, in any order).
 *
 * The method never depends on the deal or the worker count: one K, one
 * method, at 1 worker, at 4, and across an elastic loss and rejoin.
 * The loop and everything else is session.c's; the state is
 * session_state.h's.
 */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "distribute/mirrored.h"
#include "train/fixed_point.h"
#include "train/session_state.h"

/* --deterministic: the buffers of the micro-batches, and the input as a
 * slice of the global batch (data/pipeline.h), so that a step's examples and
 * its micro-batches are the same at any task count. */
enum dt_status dt__session_start_fixed(struct dt_session *s, const struct dt_strategy_start *at, struct dt_err *err)
{
	const struct dt_train_config *tc = s->cfg;
	const int b = tc->hp.batch_size, m = tc->micro_batch, reps = tc->replicas > 1 ? tc->replicas : 1;
	if (!s->input->ops->start_slice)
		return dt_err_set(err, DT_USAGE, "--deterministic needs an input that reads global batches in slices");
	if (!dt_model_set_grads(s->model, NULL)) /* each micro-batch computes into a buffer of its own */
		return dt_err_set(err, DT_USAGE, "--deterministic is built for layer-graph models, not custom or "
				  "sequence models");
	if (b % m || m > (b + reps - 1) / reps) {
		enum dt_status st = dt_err_set(err, DT_USAGE,
					       "--micro_batch=%d must divide the batch of %d per worker and fit each of "
					       "its %d replica(s) (at most %d)", m, b, reps, (b + reps - 1) / reps);
		return dt_err_hint(err, "pick --micro_batch dividing batch_size / replicas"), st;
	}
	const size_t np = dt_model_num_params(s->model);
	const int nv = dt_model_num_variables(s->model);
	s->micro_local = b / m;
	s->fixed_slices = s->info.fixed_slices ? s->info.fixed_slices : s->info.shard_count;
	s->ordered = (int64_t)s->fixed_slices * s->micro_local <= DT_ORDERED_MAX_TERMS;
	if (s->ordered && s->fixed_slices > 1 && !s->strategy->allgather)
		return dt_err_set(err, DT_INTERNAL, "--deterministic with %d micro-batches a step over %d tasks sums them "
				  "in order after an all-gather, which strategy %s lacks", s->micro_local * s->fixed_slices,
				  s->fixed_slices, s->strategy->name);
	if (!s->ordered) {
		s->fixed_sum = dt_xmallocarray(np ? np : 1, sizeof(int64_t));
		s->fixed_exp = dt_xmallocarray((size_t)s->fixed_slices * (size_t)(nv ? nv : 1), sizeof(int64_t));
		s->fixed_scale = dt_xmallocarray((size_t)(nv ? nv : 1), sizeof(int));
	}
	enum dt_status st = dt__session_deal(s, s->info.shard_index, s->info.shard_count, at->epoch, at->offset, err);
	if (st)
		return at->step ? dt_err_prefix(err, "cannot resume at step %lld", (long long)at->step) : st;
	dt_info("deterministic: micro-batches of %d, %d per step on this task (%d in all), gradients summed in %s%s; "
		"the data read in global batches of %d, this task slice %d of %d", m, s->micro_local * s->ndeal,
		s->micro_local * s->fixed_slices, s->ordered ? "micro-batch order" : "64-bit fixed point",
		s->gather ? " (every task's all-gathered and summed by each)" : "", b * s->fixed_slices,
		s->info.shard_index, s->fixed_slices);
	return DT_OK;
}

enum dt_status dt__session_deal(struct dt_session *s, int index, int count, int64_t epoch, int64_t offset,
				struct dt_err *err)
{
	DT_ASSERT(s->cfg->micro_batch > 0 && count >= 1 && index < count && count <= s->fixed_slices);
	const size_t np = dt_model_num_params(s->model);
	const int nv = dt_model_num_variables(s->model);
	const int was_gather = s->gather, was_first = s->deal_first, was_block = s->gather_block;
	const int again = s->micro_slots > 0;
	s->deal_first = index;
	s->deal_stride = count;
	s->ndeal = (s->fixed_slices - index + count - 1) / count;
	/* the ordered sum needs all K gradients on every task: gathered
	 * whenever there are others, in blocks of the most slices a task has */
	s->gather = s->ordered && count > 1;
	s->gather_block = s->gather ? (s->fixed_slices + count - 1) / count * s->micro_local : 0;
	if (again && (s->gather != was_gather || s->gather_block != was_block))
		dt_info("deterministic: %s", !s->gather ? "one task computes every slice: its gradients summed in "
							  "micro-batch order, nothing gathered"
					     : count == s->fixed_slices ? "every task's gradients all-gathered again, one slice a task"
									: "the slices dealt over fewer tasks: blocks of "
									  "several slices a task all-gathered");
	const size_t n = s->gather ? (size_t)count * (size_t)s->gather_block : (size_t)s->ndeal * (size_t)s->micro_local;
	if (n > s->micro_slots || s->gather != was_gather ||
	    (s->gather && (index != was_first || s->gather_block != was_block))) {
		/* zero-filled: a gradient no loss reaches is never written
		 * (model.h); afresh when the layout or this task's block changes,
		 * so that no slot of its own holds another task's gradient from
		 * before */
		s->micro_stride = (np + 1 + 15) / 16 * 16; /* a spare float after each, as the model's own */
		free(s->micro_grads);
		s->micro_grads = dt_xalloc_aligned(n * s->micro_stride + 1, sizeof(float));
		s->micro_slots = n;
		s->micro_into = dt_xrealloc(s->micro_into, n * sizeof(*s->micro_into));
		s->micro_src = dt_xrealloc(s->micro_src, (n) * sizeof(*s->micro_src));
		s->micro_var = dt_xrealloc(s->micro_var, (n) * sizeof(*s->micro_var));
		s->micro_exp = dt_xrealloc(s->micro_exp, (n * (size_t)(nv ? nv : 1)) * sizeof(int));
		s->micro_losses = dt_xrealloc(s->micro_losses, (n) * sizeof(float));
		s->micro_correct = dt_xrealloc(s->micro_correct, (n) * sizeof(int));
	}
	/* this task's micro-batches compute into its own slots: its block of the
	 * gather (slot index * gather_block on), or the first ones */
	const size_t first = s->gather ? (size_t)index * (size_t)s->gather_block : 0;
	for (size_t j = 0; j < s->micro_slots - first; j++)
		s->micro_into[j] = s->micro_grads + (first + j) * s->micro_stride;
	s->global_position = 1;
	return s->input->ops->start_slice(s->input, index, s->fixed_slices, epoch, offset, err);
}

/* dt_micro_step's keep: where micro-batch k's gradient lies, its own
 * buffer (micro_into), or the model's for the last one that model computes
 * in the step's last slice (mirrored.h), which is then read there; for
 * fixed point also its exponents per variable, read while the gradient the
 * backward pass just wrote is in cache. k is the micro-batch's index in the
 * slice, whichever replica computes it: the ordered sum's order. */
static void keep_micro(void *arg, struct dt_model *m, int k, int last)
{
	struct dt_session *s = arg;
	(void)last;
	const int nv = dt_model_num_variables(m);
	const float *src = dt_model_grads(m);
	k += s->micro_base;
	for (int v = 0; v < nv && !s->ordered; v++) {
		const struct dt_variable *var = dt_model_variable(m, v);
		s->micro_exp[(size_t)k * (size_t)nv + (size_t)v] = dt_fixed_exponent(src + var->offset, var->count);
	}
	s->micro_src[k] = src;
}

/* --deterministic: every micro-batch's gradient apart (their sum is apply's),
 * for each slice this task is dealt (one, unless an elastic ring lost a
 * worker: then the input is placed on each slice in turn, at the step's
 * global position). */
enum dt_status dt__session_compute_micro(struct dt_session *s, struct dt_step_figures *out, struct dt_err *err)
{
	const int k = s->micro_local;
	int64_t epoch = 0, offset = 0;
	if (s->ndeal > 1)
		dt_input_position(s->input, &epoch, &offset);
	double loss = 0;
	out->correct = 0;
	out->examples = 0;
	for (int d = 0; d < s->ndeal; d++) {
		const int slice = s->deal_first + d * s->deal_stride;
		enum dt_status st = s->ndeal > 1 ? s->input->ops->start_slice(s->input, slice, s->fixed_slices, epoch,
									     offset, err)
						 : DT_OK;
		const struct dt_batch *b;
		if (st || (st = dt__session_next_batch(s, &b, err)))
			return st;
		s->micro_base = d * k;
		s->micro_final = d == s->ndeal - 1;
		struct dt_micro_step ms = {
			.x = b->x, .y = b->y, .batch = b->size, .micro = s->cfg->micro_batch,
			.example_floats = (size_t)s->shape[0] * (size_t)s->shape[1] * (size_t)s->shape[2],
			.seed = s->cfg->seed,
			/* micro-batch j of the global step: the same stream whoever computes it */
			.stream0 = (uint64_t)s->step * 1048576u + (uint64_t)slice * (uint64_t)k,
			.keep = keep_micro, .keep_arg = s, .losses = s->micro_losses + d * k,
			.correct = s->micro_correct + d * k,
			/* only the step's last slice may leave its last gradient in the
			 * model's buffer: a next slice computes on the same model; a
			 * gathered one must be in its block */
			.into = s->micro_into + d * k, .keep_last = s->micro_final && !s->gather,
		};
		dt_mirrored_micro_step(s->mirror, s->model, &ms);
		out->examples += b->size;
	}
	for (int j = 0; j < k * s->ndeal; j++) {
		loss += (double)s->micro_losses[j];
		out->correct += s->micro_correct[j];
	}
	out->loss = (float)(loss / (k * s->ndeal));
	return DT_OK;
}

/* The ordered sum (fixed_point.h): the step's K gradients on this task, all
 * of them (gathered when others computed some), micro_src in micro-batch
 * index order. */
static enum dt_status gather_ordered(struct dt_session *s, struct dt_err *err)
{
	const int ml = s->micro_local;
	if (!s->gather)
		return DT_OK; /* one task computed every slice, micro_src in index order (keep_micro) */
	/* every task's block (the last float of each is the strategy's:
	 * strategy.h), then slice t's micro-batch j found in the block of the
	 * task it was dealt to (t mod tasks), its (t / tasks)-th there */
	const size_t stride = s->micro_stride, block = (size_t)s->gather_block;
	const int count = s->deal_stride;
	enum dt_status st = s->strategy->allgather(s, s->self, s->micro_grads, block * stride * sizeof(float),
						   "grads/raw", err);
	if (st)
		return st;
	for (int t = 0; t < s->fixed_slices; t++)
		for (int j = 0; j < ml; j++)
			s->micro_src[t * ml + j] = s->micro_grads + ((size_t)(t % count) * block +
								     (size_t)(t / count * ml + j)) * stride;
	return DT_OK;
}

static enum dt_status diverged(struct dt_err *err, int64_t step, const char *name)
{
	return dt_err_set(err, DT_RUNTIME, "training diverged at step %lld: the gradient of '%s' is not finite",
			  (long long)step, name);
}

/* The ordered mean into the model's gradient buffer, for what reads it
 * before the update (weight decay, clipping). */
static enum dt_status mean_ordered(struct dt_session *s, int64_t step, struct dt_err *err)
{
	struct dt_model *m = s->model;
	const int nv = dt_model_num_variables(m), terms = s->micro_local * s->fixed_slices;
	float *g = dt_model_grads(m);
	for (int v = 0; v < nv; v++) {
		const struct dt_variable *var = dt_model_variable(m, v);
		for (int j = 0; j < terms; j++)
			s->micro_var[j] = s->micro_src[j] + var->offset;
		/* in place where the last micro-batch's gradient is the model's own */
		if (dt_ordered_mean_k(g + var->offset, s->micro_var, terms, var->count))
			return diverged(err, step, var->name);
	}
	return DT_OK;
}

/* dt_optimizer_apply_made's maker: the ordered mean of parameters
 * [offset, offset + n), the same call as mean_ordered's on a shorter range
 * (the formula is elementwise: the same bits). */
static int make_ordered(void *arg, float *out, size_t offset, size_t n)
{
	struct dt_session *s = arg;
	const int terms = s->micro_local * s->fixed_slices;
	for (int j = 0; j < terms; j++)
		s->micro_var[j] = s->micro_src[j] + offset;
	return dt_ordered_mean_k(out, s->micro_var, terms, n);
}

/* The ordered mean fused into the update, for the common case where nothing
 * reads the mean before the update (no weight decay, no clipping): each
 * chunk of it is made in the optimizer's buffer and applied from there, so
 * the mean is never written to the gradient buffer and read back (mlp's
 * 238k floats at K = 2 with Adam: 71 us a step against 85 us for the mean
 * and the update apart, in a micro-benchmark; about 2% of its step). A non-finite chunk stops the
 * update before that chunk, alike on every task (they all compute the same
 * mean); the chunks before it are applied, so the session is marked torn:
 * dt_session_save and dt_session_step refuse it from then on (no caller
 * saves after a failed step today: this guards that rule, DISTRIBUTED.md). */
static enum dt_status apply_ordered_fused(struct dt_session *s, float lr, int64_t step, struct dt_err *err)
{
	struct dt_model *m = s->model;
	const size_t np = dt_model_num_params(m);
	const size_t at = dt_optimizer_apply_made(&s->opt, dt_model_params(m), 0, np, lr, step, make_ordered, s);
	if (at == np)
		return DT_OK;
	if (at > 0) /* the chunks before `at` are applied (at 0: nothing, the variables are the last step's) */
		s->torn_step = step;
	/* which variable: the unfused pass names the first one (into the
	 * gradient buffer, as before: nothing else reads it now) */
	enum dt_status st = mean_ordered(s, step, err);
	DT_ASSERT(st); /* the same means: one of them is not finite */
	return st;
}

/* Fixed point (fixed_point.h): one scale per variable from every task's
 * exponents, this task's sum in int64, every task's (all-reduced), the mean
 * into the model's gradient buffer. */
static enum dt_status mean_fixed(struct dt_session *s, int64_t step, struct dt_err *err)
{
	struct dt_model *m = s->model;
	const size_t np = dt_model_num_params(m);
	const int nv = dt_model_num_variables(m), k = s->micro_local * s->ndeal, tasks = s->fixed_slices;
	const int64_t terms = (int64_t)s->micro_local * tasks;
	enum dt_status st;
	/* 1. the exponents: this task's rows (one per slice it computed, each the
	 * largest of its micro-batches': the maximum is the same), the others'
	 * zero, summed = gathered */
	memset(s->fixed_exp, 0, (size_t)tasks * (size_t)nv * sizeof(int64_t));
	for (int v = 0; v < nv; v++) {
		int e = DT_FIXED_EXP_ZERO;
		for (int j = 0; j < k; j++) {
			const int ej = s->micro_exp[(size_t)j * (size_t)nv + (size_t)v];
			e = ej > e ? ej : e;
		}
		for (int d = 0; d < s->ndeal; d++)
			s->fixed_exp[(size_t)(s->deal_first + d * s->deal_stride) * (size_t)nv + (size_t)v] = e;
	}
	if (s->strategy->reduce_i64 &&
	    (st = s->strategy->reduce_i64(s, s->self, s->fixed_exp, (size_t)tasks * (size_t)nv, "grads/exponents", err)))
		return st;
	for (int v = 0; v < nv; v++) {
		int64_t e = DT_FIXED_EXP_ZERO;
		for (int t = 0; t < tasks; t++)
			e = s->fixed_exp[(size_t)t * (size_t)nv + (size_t)v] > e ? s->fixed_exp[(size_t)t * (size_t)nv + (size_t)v]
										  : e;
		if (e >= DT_FIXED_EXP_NONFINITE)
			return diverged(err, step, dt_model_variable(m, v)->name);
		s->fixed_scale[v] = dt_fixed_scale((int)e, terms);
	}
	/* 2. this task's sum in fixed point, then every task's; 3. the mean.
	 * One task has nothing to all-reduce: the sum and the mean in one pass,
	 * the same bits (fixed_point.h's fast paths). */
	float *g = dt_model_grads(m);
	const int alone = s->ndeal == tasks || !s->strategy->reduce_i64;
	for (int v = 0; v < nv; v++) {
		const struct dt_variable *var = dt_model_variable(m, v);
		for (int j = 0; j < k; j++)
			s->micro_var[j] = s->micro_src[j] + var->offset;
		if (alone) /* in place where the last micro-batch's gradient is the model's own */
			dt_fixed_sum_mean_k(g + var->offset, s->micro_var, k, var->count, s->fixed_scale[v], terms);
		else
			dt_fixed_sum_k(s->fixed_sum + var->offset, s->micro_var, k, var->count, s->fixed_scale[v]);
	}
	if (alone)
		return DT_OK;
	if ((st = s->strategy->reduce_i64(s, s->self, s->fixed_sum, np, "grads/fixed", err)))
		return st;
	for (int v = 0; v < nv; v++) {
		const struct dt_variable *var = dt_model_variable(m, v);
		dt_fixed_mean(g + var->offset, s->fixed_sum + var->offset, var->count, s->fixed_scale[v], terms);
	}
	return DT_OK;
}

enum dt_status dt__session_apply_fixed(struct dt_session *s, float lr, int64_t step, struct dt_err *err)
{
	struct dt_model *m = s->model;
	const float wd = (float)s->cfg->hp.weight_decay;
	enum dt_status st = s->ordered ? gather_ordered(s, err) : DT_OK;
	if (st)
		return st;
	/* the fused update is for the common case; weight decay and clipping
	 * read the whole mean before the update: they keep it in the gradient
	 * buffer */
	if (s->ordered && !(wd > 0) && !(s->cfg->hp.clip_grad_norm > 0))
		return apply_ordered_fused(s, lr, step, err);
	if ((st = s->ordered ? mean_ordered(s, step, err) : mean_fixed(s, step, err)))
		return st;
	if (wd > 0)
		dt_train_add_weight_decay(m, wd);
	s->fixed_norm = dt_train_clip_grads(m, &s->cfg->hp, 1); /* the mean, the same bits on every task */
	dt_optimizer_apply(&s->opt, dt_model_params(m), dt_model_grads(m), 0, dt_model_num_params(m), lr, step);
	return DT_OK;
}

void dt__session_free_fixed(struct dt_session *s)
{
	free(s->micro_grads);
	free(s->micro_into);
	free(s->micro_src);
	free(s->micro_var);
	free(s->micro_exp);
	free(s->micro_losses);
	free(s->micro_correct);
	free(s->fixed_sum);
	free(s->fixed_exp);
	free(s->fixed_scale);
}
