/*
 * keras_h5.h — a checkpoint's variables as a Keras HDF5 weights file, the
 * layout `model.load_weights("x.h5")` reads (Keras 2's
 * save_weights_to_hdf5_group, which Keras 3 still reads for a name ending
 * in .h5 through its legacy_h5_format):
 *
 *   1. root attributes: `layer_names` (fixed-length byte strings, the layers
 *      that have weights, in model order), `backend` = "tensorflow",
 *      `keras_version` = "2.15.0" (the layout's version; Keras converts
 *      only files of version "1");
 *   2. a group per layer, named as the layer, with attribute `weight_names`
 *      ("<layer>/kernel:0", "<layer>/bias:0", ... in Keras's order for the
 *      layer: kernel or depthwise_kernel or embeddings or gamma, then
 *      pointwise_kernel or beta, bias, moving_mean, moving_variance);
 *   3. the datasets `<layer>/<layer>/<var>:0`, float32, the variable's
 *      shape (Keras's own layouts: conv kernels (KH, KW, C, OC)).
 *
 * Variables are `<layer>/<var>` as dtrain names Keras models' variables
 * (MODELS.md); the layer is everything before the last '/'. Without the
 * model, layers come in name order, which model.load_weights(by_name=True)
 * accepts; with it (`order`), in the model's order, which plain
 * load_weights needs.
 */
#ifndef DT_TRAIN_KERAS_H5_H
#define DT_TRAIN_KERAS_H5_H

#include "base/err.h"

struct dt_model;

/* Writes the variables of checkpoint `ckpt_path` (verified first: layout,
 * checksums) to `h5_path`, atomically (temp file, fsync, rename). `order`
 * (may be NULL) is a model whose variables' names and shapes must be the
 * checkpoint's; its variable order gives the layer order. A checkpoint that
 * is not intact → DT_CKPT; a model that differs → DT_USAGE naming the
 * variable; HDF5 failures → DT_IO. *layers and *vars (may be NULL) get
 * what was written. */
enum dt_status dt_keras_h5_export(const char *ckpt_path, const struct dt_model *order, const char *h5_path,
				  int *layers, int *vars, struct dt_err *err) DT_MUST_CHECK;

#endif
