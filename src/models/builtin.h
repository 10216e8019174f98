/*
 * models/builtin.h — dtrain's built-in image classifiers, mlp, lenet and
 * cnn, written with the public builder of include/dtrain.h as any user's
 * program writes its model (docs/MODELS.md has their layers).
 *
 * The layer above api/: the engine below (train/, distribute/) knows no
 * model by name; a program hands a zoo down in dt_train_config.models (nn/
 * model.h), and the dtrain CLI hands this one, so the trainer, its
 * replicas, a ps, an in-graph std server and the evaluator all build the
 * same graph from the same calls.
 *
 * Each variable keeps the name, shape, initializer and place in the flat
 * buffer it had when nn/ held these models (conv_1/kernel He-normal,
 * dense_3/kernel Glorot-uniform, biases zero; every stream "init/<name>"
 * of the seed), so checkpoints and loss trajectories are those of before
 * (tests/unit/test_nn_graph.c keeps the bits).
 */
#ifndef DT_MODELS_BUILTIN_H
#define DT_MODELS_BUILTIN_H

#include <stddef.h>
#include "nn/model.h"

/* mlp, lenet, cnn, and transformer (named for messages: it reads text and
 * is built by train/'s text path, nn/transformer.h, not from this zoo). */
extern const struct dt_model_zoo dt_models_builtin;

/* The names above, in that order. */
const char *const *dt_models_builtin_names(size_t *count);

/* Builds hp->model for images of (height, width, channels) and num_classes
 * in [2, 256] (labels are bytes), hp->dropout in [0, 1) after each hidden
 * dense layer: DT_USAGE for an unknown name (the nearest and every valid
 * one named), DT_CONFIG for the transformer, a bad shape, class count,
 * max_batch or dropout, or windows that do not fit a small input. */
enum dt_status dt_models_builtin_new(const struct dt_hparams *hp, int height, int width, int channels,
				     int num_classes, int max_batch, struct dt_model **out,
				     struct dt_err *err) DT_MUST_CHECK;

#endif
