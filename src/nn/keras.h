/*
 * keras.h — Keras models from the JSON of `model.to_json()`, as layer
 * graphs (nn/graph.h).
 *
 * Reads both flavours Keras writes: Keras 2 (tf.keras; inbound nodes as
 * [[["layer", 0, 0, {}], ...]]) and Keras 3 (every object with `module` and
 * `registered_name`, inbound nodes as {"args": [...], "kwargs": {...}} with
 * tensors naming their layer in `keras_history`); `Sequential` and
 * `Functional`/`Model` with any DAG of named layers; and the
 * `modelTopology` of a TF.js layers `model.json` (Keras 2's shape, bare or
 * under `model_config`).
 *
 * Layers: InputLayer, Dense, Conv2D, DepthwiseConv2D, SeparableConv2D,
 * MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D,
 * GlobalMaxPooling2D, ZeroPadding2D, BatchNormalization, ReLU (max_value
 * 6 or none), Activation, Softmax, Dropout, Flatten, Reshape, Add,
 * Concatenate, Embedding, LayerNormalization; activations linear, relu,
 * relu6, sigmoid, tanh, softmax, gelu, swish (silu); initializers by
 * Keras's class names and configs (VarianceScaling, GlorotUniform,
 * GlorotNormal, HeNormal, HeUniform, LecunNormal, LecunUniform, Zeros,
 * Ones, Constant, RandomNormal, RandomUniform, TruncatedNormal);
 * `trainable: false` freezes a layer; regularizers (L1, L2, L1L2) and
 * constraints (MaxNorm, NonNeg, UnitNorm, MinMaxNorm) as nn/regularize.h
 * runs them (keras_reg.c reads them). Anything else — a layer class, a
 * config field with a value we do not implement (channels_first, an
 * OrthogonalRegularizer, a shared layer, ...) — is refused with DT_USAGE
 * naming the layer, the field and what is supported; a config field we do
 * not know at all is refused too unless it is null or false. Layer names
 * are any Keras or TF.js writes, up to 255 bytes (nn/graph.h).
 *
 * Nodes and variables keep Keras's names (`block_1_expand/kernel`,
 * `bn_Conv1/moving_mean`) in Keras's weight order, so checkpoints map one
 * to one onto the Keras model. The model is a classifier trained with
 * softmax cross-entropy on its one output: a final softmax (the output
 * layer's activation, or an Activation/Softmax layer) is folded into the
 * loss, so the graph's output is the logits; another final activation is
 * refused. Reading never crashes on malformed input: every shape, count
 * and type is checked (tests/fuzz/fuzz_keras.c).
 */
#ifndef DT_NN_KERAS_H
#define DT_NN_KERAS_H

#include <stddef.h>

#include "base/err.h"
#include "nn/graph.h"

/* What a loaded model expects. */
struct dt_keras_info {
	char name[64];          /* the model's name in the JSON */
	int num_inputs;
	int input_rank;         /* of the first input: 1 to 3 */
	int input_shape[3];     /* per example, e.g. (32, 32, 3) */
	int input_is_int;       /* int32 token ids (an Embedding reads it) */
	int classes;            /* the output's last dimension */
	int keras_version;      /* 2 or 3 (3 when the JSON has Keras 3's `module` fields) */
	int layers;             /* Keras layers read */
};

/* Builds a graph (with its softmax cross-entropy loss) from JSON text of
 * len bytes; `source` names it in messages. *out is the caller's
 * (dt_graph_free). Malformed JSON → DT_USAGE with the line and column. */
enum dt_status dt_keras_parse(const char *text, size_t len, const char *source, struct dt_graph **out,
			      struct dt_keras_info *info, struct dt_err *err) DT_MUST_CHECK;

/* Reads the file at `path` (at most 64 MiB; unreadable → DT_IO), parses it
 * and compiles a model for max_batch examples, named as the Keras model. */
enum dt_status dt_keras_load(const char *path, int max_batch, struct dt_model **out, struct dt_keras_info *info,
			     struct dt_err *err) DT_MUST_CHECK;

#endif
