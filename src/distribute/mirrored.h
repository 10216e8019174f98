/*
 * mirrored.h — mirrored replicas in one process: N copies of a model on a
 * small persistent team of threads split each batch and sum their gradients
 * in shared memory before one update (TensorFlow's MirroredStrategy on CPU
 * threads; `--replicas=N`, t2t's `--worker_gpu=N`).
 *
 * A group is built around a primary model the caller owns (replica 0; the
 * calling thread runs it). The group builds replicas 1..N-1 as their own
 * dt_models (same variables, own activations, max batch ceil(B/N)) and owns
 * N-1 threads that live as long as the group.
 *
 * One step, dt_mirrored_train_batch(group, x, y, B):
 *   1. replica r takes examples [off_r, off_r + n_r) of the batch, with
 *      n_r = B/N, plus one for the first B%N replicas (replicas with no
 *      example sit the step out when B < N);
 *   2. every replica r > 0 first copies the primary's parameters into its
 *      own buffer (a broadcast in shared memory: the copy is spread over the
 *      threads, and the primary's buffer is only read meanwhile), then runs
 *      forward/backward on its slice (dt_model_train_batch: the mean
 *      gradient of its slice);
 *   3. after a barrier, the threads sum the gradients, each over its own
 *      contiguous range of the flat buffer, weighted by n_r / B, into the
 *      primary's gradient buffer — once, so the primary then holds the
 *      gradient of the mean loss over the whole batch, as one replica of
 *      batch B would compute it (up to float rounding).
 *   In the same pass the primary's sync-mean variables (batch norm's moving
 *   statistics, nn/model.h's dt_model_variable_sync_mean) become the mean
 *   of the active replicas' own copies (TensorFlow's SyncOnRead MEAN); they
 *   are copied to the replicas by the caller's thread before the step, as
 *   the primary's forward pass updates them while the others copy the rest.
 *   The caller then applies weight decay and the optimizer to the primary as
 *   in single-replica training; the next step's copy (2) spreads the update.
 *
 * Why copy rather than share one parameter buffer: a dt_model owns its
 * buffers (nn/model.h) and nn/ has no call to bind foreign ones; the copy
 * costs one memcpy of the parameters per replica per step, done in
 * parallel by the replicas (0.9 MB for mlp, 13 MB for cnn: ~0.1 / ~1 ms,
 * against 1 / 35 ms of compute per step).
 *
 * Threads and BLAS: the replica threads are the parallelism. OpenBLAS keeps
 * one pool per process, so dt_mirrored_new sets it to one thread: each
 * replica's sgemm runs single-threaded on its own thread, and no two pools
 * fight over the cores (docs/BLAS.md). Waits block on a condition variable
 * or a barrier; nothing spins.
 *
 * Dropout: replica r draws from dt_rng_derive(seed, "dropout",
 * stream_base * N + r), so replica 0 of a lone process has the stream
 * single-replica training uses, and every (worker, replica) has its own.
 */
#ifndef DT_DIST_MIRRORED_H
#define DT_DIST_MIRRORED_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "base/rng.h"
#include "nn/hparams.h"
#include "nn/model.h"

#define DT_MIRRORED_MAX_REPLICAS 64

/* Makes a replica like the primary for batches of up to max_batch (a
 * layer graph or custom model no zoo builds by name). */
typedef enum dt_status (*dt_mirrored_make_fn)(void *arg, int max_batch, struct dt_model **out, struct dt_err *err);

struct dt_mirrored_config {
	const struct dt_hparams *hp;         /* the primary's hparams (model name, dropout) */
	dt_mirrored_make_fn make;            /* NULL: replicas by name, dt_model_new(models, hp, shape, classes); else this */
	const struct dt_model_zoo *models;   /* borrowed (nn/model.h) */
	void *make_arg;
	int height, width, channels;         /* one example's shape, as the primary was built */
	int num_classes;
	int replicas;                        /* N, 2..DT_MIRRORED_MAX_REPLICAS */
	int batch_size;                      /* B, the largest batch a step splits */
	uint64_t seed;                       /* dropout streams derive from it */
	uint64_t stream_base;                /* this process's index among processes (0 alone) */
};

struct dt_mirrored;

/* Builds replicas 1..N-1 around `primary` (borrowed; must outlive the
 * group), starts their threads and sets OpenBLAS to one thread. */
enum dt_status dt_mirrored_new(struct dt_model *primary, const struct dt_mirrored_config *cfg,
			       struct dt_mirrored **out, struct dt_err *err) DT_MUST_CHECK;
/* Stops and joins the threads, frees the replicas; accepts NULL. */
void dt_mirrored_free(struct dt_mirrored *g);

int dt_mirrored_replicas(const struct dt_mirrored *g);

/* One step over x (B, H, W, C) and labels (B), 1 <= B <= batch_size: the
 * primary's gradient buffer gets d(mean loss over B)/d(params). Returns the
 * mean loss over the batch; *correct (may be NULL) counts correct arg-max
 * predictions over the batch. */
float dt_mirrored_train_batch(struct dt_mirrored *g, const float *x, const uint8_t *labels, int batch,
			      int *correct);

/* The hook training loops call instead of dt_model_train_batch: with a
 * group, a mirrored step (the group's own dropout streams; `rng` unused);
 * with g == NULL, dt_model_train_batch(model, ..., rng, correct). */
float dt_mirrored_step(struct dt_mirrored *g, struct dt_model *model, const float *x, const uint8_t *labels,
		       int batch, struct dt_rng *rng, int *correct);

/*
 * --deterministic's step (train/fixed_point.h): `batch` examples cut into
 * batch / micro micro-batches of `micro` examples (micro divides batch, and
 * is at most the replicas' max batch, ceil(batch_size / N)); micro-batch k
 * runs forward/backward alone, with the dropout stream
 * dt_rng_derive(seed, "dropout/micro", stream0 + k), its loss and correct
 * count go to losses[k] and correct[k], and `keep` is called on the thread
 * that computed it, with the model whose gradient buffer holds it. `last`
 * is 1 for the last micro-batch that model computes in this step: its
 * gradient buffer is then left alone until the next step, so the caller may
 * read it there instead of copying it (the copy of each micro-batch's
 * gradient, and a pass over the copies for their scale, were a fifth of an
 * mlp step; with `into` nothing is copied, and `keep` takes the scale
 * while the gradient is in cache).
 * Calls for different k may run at once on different threads. Nothing is
 * summed: the caller sums in fixed point. With g NULL `model` computes them
 * one after another; with a group the replicas take contiguous runs of
 * micro-batches. The results are the same bits either way (each
 * micro-batch is the same computation on the same parameters).
 */
struct dt_micro_step {
	const float *x;            /* (batch, H, W, C) */
	const uint8_t *y;          /* (batch) */
	int batch, micro;
	size_t example_floats;     /* H * W * C */
	uint64_t seed, stream0;
	void (*keep)(void *arg, struct dt_model *m, int k, int last);
	void *keep_arg;
	/* Not NULL: micro-batch k's gradient is computed into into[k]
	 * (dt_model_set_grads, no copy), except that with keep_last the last
	 * one a model computes stays in the model's own buffer; every model is
	 * pointed back at its own buffer before this returns. */
	float *const *into;
	int keep_last;
	float *losses;             /* (batch / micro), written */
	int *correct;              /* (batch / micro), written */
};
void dt_mirrored_micro_step(struct dt_mirrored *g, struct dt_model *model, struct dt_micro_step *ms);

/*
 * The same step for any model (nn/model.h's general entry point): batch b
 * (1 <= b->size <= batch_size) is split as above, every input and the
 * targets sliced by example (a sequence model's (B, L) tensors by rows of
 * the batch's L), and each replica runs dt_model_step on its slice. *res
 * gets the loss weighted as above and the summed correct and counted; with
 * a padded sequence loss (t2t's text metrics) the slices are weighted by
 * their non-pad tokens instead, in the loss and the gradient (t2t's sum of
 * its shards' numerators over their denominators), the text figures are
 * summed and approx_bleu_score is the slices' mean. If a replica's step fails (a label out of range in its slice, a
 * custom callback's error), the step returns the failure of the first such
 * replica, its message prefixed by "replica r", and the gradient is not to
 * be applied. Replicas must come from `make` or share the primary's inputs.
 */
enum dt_status dt_mirrored_step_general(struct dt_mirrored *g, const struct dt_model_batch *b,
					struct dt_step_result *res, struct dt_err *err) DT_MUST_CHECK;

#endif
