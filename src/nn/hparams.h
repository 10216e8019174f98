/*
 * hparams.h — hyper-parameters, their named sets, and --hparams overrides.
 *
 * As in tensor2tensor: a run starts from a named set (--hparams_set=mlp_base)
 * and applies comma-separated overrides (--hparams='learning_rate=0.05,batch_size=128').
 * Every field is listed once in a table (hparams.c) that drives parsing,
 * printing (hparams.json) and the list of valid names in errors, so an
 * unknown name is an error that lists the valid ones.
 */
#ifndef DT_NN_HPARAMS_H
#define DT_NN_HPARAMS_H

#include <stddef.h>
#include <stdio.h>
#include "base/err.h"

#define DT_HP_NAME_MAX 128 /* t2t's schedules are products of factor names: its base one has 52 characters */

struct dt_hparams {
	char model[DT_HP_NAME_MAX];       /* "mlp", "lenet", "cnn" */
	int batch_size;                   /* per worker (per replica group) */
	double learning_rate;             /* base rate before the schedule */
	char optimizer[DT_HP_NAME_MAX];   /* "sgd", "momentum", "adam", "adagrad" */
	double momentum;                  /* momentum optimizer */
	double beta1, beta2, epsilon;     /* adam (epsilon also adagrad) */
	double initial_accumulator_value; /* adagrad */
	char lr_schedule[DT_HP_NAME_MAX]; /* "constant", "linear_warmup_decay", or t2t's factors "a*b*c" */
	int warmup_steps;                 /* linear warm-up from 0 to learning_rate */
	double lr_decay_end;              /* final lr as a fraction of learning_rate, at train_steps */
	double dropout;                   /* drop probability in dropout layers; 0 disables */
	double weight_decay;              /* L2 added to gradients of kernels; 0 disables */
	double clip_grad_norm;            /* t2t's: the gradient scaled to global norm <= this; 0 disables */
	int sync;                         /* synchronous distributed training (later issues) */
	int scale_lr_by_workers;          /* async: lr /= sqrt(workers), as t2t does */
	/* t2t's transformer (nn/transformer.h), by t2t's names; t2t's aliases
	 * learning_rate_schedule, learning_rate_warmup_steps and
	 * optimizer_adam_beta1, _beta2, _epsilon set the fields above */
	int hidden_size, filter_size, num_heads;
	int num_hidden_layers;            /* encoder and decoder layers ... */
	int num_encoder_layers, num_decoder_layers; /* ... unless these are > 0 */
	int max_length;                   /* positions per sequence; longer training examples are dropped */
	double attention_dropout, relu_dropout, layer_prepostprocess_dropout;
	/* t2t's layouts of a sublayer, the two dtrain builds (nn/transformer.h):
	 * "n" and "da" (pre-norm: x + dropout(f(norm(x))), a norm at the stack's
	 * end; transformer_base_v2 on) or "none" and "dan" (post-norm:
	 * norm(x + dropout(f(x))); basic_params1's, transformer_base_v1's) */
	char layer_preprocess_sequence[DT_HP_NAME_MAX], layer_postprocess_sequence[DT_HP_NAME_MAX];
	double label_smoothing;
	double learning_rate_constant;    /* the schedule's "constant" factor */
	int learning_rate_decay_steps;    /* t2t's decay factors: linear_decay, cosdecay, exp_decay, ... */
	double learning_rate_decay_rate;  /* exp_decay's base */
	int learning_rate_decay_staircase; /* exp_decay's exponent floored */
	int shared_embedding_and_softmax_weights, shared_embedding;
	int min_length_bucket;            /* t2t's length buckets: 8, then x * length_bucket_step */
	double length_bucket_step;
	/* Not an hparam (no name in the table): the model's JSON when it is a
	 * Keras model (dtrain train --keras_model; model is then "keras"), read by
	 * dt_model_new wherever a role builds its model. "" otherwise. */
	char keras_model[1024];
};

/* Names of the registered sets ("mlp_base", "lenet_base", "cnn_base", ...). */
const char *const *dt_hparams_set_names(size_t *count);
/* The models the sets are for, each with its "<model>_base" set: what the
 * `model` field may name ("mlp", "lenet", "cnn", "transformer"). The sets
 * hold no model: a program's zoo builds it by this name (nn/model.h). */
const char *const *dt_hparams_model_names(size_t *count);
/* The set a model uses when --hparams_set is not given. */
const char *dt_hparams_default_set(const char *model);
/* Fills `out` from a named set; unknown set → DT_USAGE listing the valid ones. */
enum dt_status dt_hparams_from_set(const char *set, struct dt_hparams *out, struct dt_err *err) DT_MUST_CHECK;
/* Applies "name=value,name=value"; unknown name, bad value or malformed
 * text → DT_USAGE naming the item and (for names) listing the valid ones. */
enum dt_status dt_hparams_parse(struct dt_hparams *hp, const char *overrides, struct dt_err *err) DT_MUST_CHECK;
/* Checks ranges and names (batch_size > 0, known optimizer/model/schedule, ...). */
enum dt_status dt_hparams_validate(const struct dt_hparams *hp, struct dt_err *err) DT_MUST_CHECK;
/* Writes the hparams as one JSON object (t2t's hparams.json). */
void dt_hparams_write_json(const struct dt_hparams *hp, FILE *out);

#endif
