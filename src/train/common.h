/*
 * common.h — pieces every training loop shares (local, parameter-server roles).
 */
#ifndef DT_TRAIN_COMMON_H
#define DT_TRAIN_COMMON_H

#include <stddef.h>
#include "base/err.h"
#include "data/problem.h"
#include "nn/model.h"
#include "train/local.h"

/* Evaluates the model on every example of `ds` once (dropout off). */
enum dt_status dt_train_evaluate(struct dt_model *model, const struct dt_dataset *ds, struct dt_eval_result *out,
				 struct dt_err *err) DT_MUST_CHECK;

/* Adds weight_decay * p to the gradient of every kernel (L2 regularization). */
void dt_train_add_weight_decay(struct dt_model *m, float wd);

/* "1:02:03" or "2:03"; "?" when unknown. */
void dt_train_format_eta(double seconds, char *buf, size_t cap);

#endif
