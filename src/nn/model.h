/*
 * model.h — models as named variables over one flat parameter buffer.
 *
 * A model is a sequence of layers built from the model registry ("mlp",
 * "lenet", "cnn"). Its variables (conv_1/kernel, conv_1/bias, dense_1/kernel,
 * ...) are views into ONE flat float buffer of parameters, and their
 * gradients into ONE flat gradient buffer of the same layout, so all-reduce,
 * parameter-server shards and checkpoints work on byte ranges (llm.c's
 * malloc_and_point_parameters).
 *
 * Layouts (TensorFlow's): images are NHWC, (B, H, W, C); a conv kernel is
 * (KH, KW, C, OC); a dense kernel is (IN, OUT); biases are (OUT).
 *
 * A model also owns the activation buffers for up to `max_batch` examples,
 * so it is used by one thread at a time; replicas are separate models.
 */
#ifndef DT_NN_MODEL_H
#define DT_NN_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "base/rng.h"
#include "nn/hparams.h"

#define DT_VAR_NAME_MAX 64
#define DT_MAX_DIMS 4

struct dt_variable {
	char name[DT_VAR_NAME_MAX]; /* "dense_1/kernel" */
	int ndim;
	int64_t shape[DT_MAX_DIMS];
	size_t offset;              /* first element in the flat buffers */
	size_t count;               /* elements */
};

struct dt_model;

/* Names of the registered models. */
const char *const *dt_model_names(size_t *count);

/* Builds model `hp->model` for inputs (H, W, C) and `num_classes` outputs,
 * with activations for up to max_batch examples. Unknown model → DT_USAGE
 * listing the valid ones. Parameters are zero until dt_model_init_params. */
enum dt_status dt_model_new(const struct dt_hparams *hp, int height, int width, int channels, int num_classes,
			    int max_batch, struct dt_model **out, struct dt_err *err) DT_MUST_CHECK;
void dt_model_free(struct dt_model *m);

/* Seeded initializers: Glorot-uniform for kernels followed by no ReLU,
 * He-normal for kernels followed by ReLU, zeros for biases. */
void dt_model_init_params(struct dt_model *m, uint64_t seed);

size_t dt_model_num_params(const struct dt_model *m);
float *dt_model_params(struct dt_model *m);        /* (num_params) */
float *dt_model_grads(struct dt_model *m);         /* (num_params) */
int dt_model_num_variables(const struct dt_model *m);
const struct dt_variable *dt_model_variable(const struct dt_model *m, int i);
/* True for kernels (weight decay applies), false for biases. */
int dt_model_variable_is_kernel(const struct dt_model *m, int i);
int dt_model_max_batch(const struct dt_model *m);
/* A one-line description: "cnn: 6 layers, 421642 parameters (1.6 MiB)"
 * (pooling is fused into conv layers and not counted). */
void dt_model_describe(const struct dt_model *m, char *buf, size_t cap);
/* The layers in order (nn/layers.h), for summaries and tests; owned by m. */
struct dt_layer;
int dt_model_num_layers(const struct dt_model *m);
const struct dt_layer *dt_model_layer(const struct dt_model *m, int i);

/*
 * One training step's computation: forward on x (B, H, W, C), softmax
 * cross-entropy against labels (B), backward. Overwrites the gradient
 * buffer with d(mean loss)/d(params). Dropout (if any) draws from `rng`.
 * Returns the mean loss; *correct (may be NULL) gets the number of
 * examples whose arg-max prediction equals the label. B <= max_batch.
 * Denormal floats are flushed to zero during the call (tensor/tensor.h).
 */
float dt_model_train_batch(struct dt_model *m, const float *x, const uint8_t *labels, int batch,
			   struct dt_rng *rng, int *correct);

/*
 * The same step, telling the caller as soon as a range of the gradient
 * buffer is final (to start its all-reduce while the backward pass goes
 * on): after each layer's backward has written its parameters' gradients,
 * on_ready(arg, offset, count) with that layer's range of the flat buffer
 * (count > 0; layers without parameters are not reported). Layers run
 * backward in reverse order and own contiguous ranges in layer order, so
 * the calls cover [0, num_params) exactly once, each range ending where
 * the previous one began (non-increasing offsets); a range reported is
 * never written again during the call. on_ready runs on the calling thread
 * with denormals flushed (tensor/tensor.h) and must not touch the model;
 * it may hand the range to another thread, which may read and write those
 * gradients while the backward pass goes on. on_ready NULL: exactly
 * dt_model_train_batch.
 */
typedef void (*dt_grads_ready_fn)(void *arg, size_t offset, size_t count);
float dt_model_train_batch_notify(struct dt_model *m, const float *x, const uint8_t *labels, int batch,
				  struct dt_rng *rng, int *correct, dt_grads_ready_fn on_ready, void *arg);

/* Inference: forward only, dropout off. Returns the mean loss and counts
 * correct predictions. Leaves the gradient buffer alone. */
float dt_model_eval_batch(struct dt_model *m, const float *x, const uint8_t *labels, int batch, int *correct);

/* The logits (batch, num_classes) of the last train or eval batch; owned by
 * m, valid until the next call. */
const float *dt_model_logits(const struct dt_model *m);

#endif
