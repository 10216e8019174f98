/*
 * regularize.h — Keras's weight and activity regularizers and weight
 * constraints, as the nn layer runs them.
 *
 * Regularizers (keras.regularizers L1, L2, L1L2, and Keras 3's
 * OrthogonalRegularizer on a rank-2 kernel) add a penalty to the loss:
 *
 *     penalty(x) = l1 * sum |x| + l2 * sum x^2
 *
 * on a variable (kernel_regularizer, bias_regularizer, and Keras's other
 * per-weight ones: depthwise_, pointwise_, embeddings_, gamma_, beta_) or on
 * a node's output (activity_regularizer: the sum over the batch, divided by
 * the batch size as Keras 2 and TF.js do, or not as Keras 3 does). The
 * graph executor (exec.c) adds every penalty to the step's loss — training
 * and evaluation alike, as Keras's loss includes them — reports their sum
 * apart (dt_step_result.reg_loss), and adds their gradient
 * l1 * sign(x) + 2 * l2 * x (sign(0) = 0, TensorFlow's) to the variables'
 * gradients inside the backward pass, before a variable's range is reported
 * final: every strategy applies them as it applies the rest. Variables of
 * frozen nodes carry none (Keras 3 counts trainable weights only).
 *
 * Constraints (keras.constraints) project a variable after each update:
 *   MaxNorm(m, axis)          w * clip(n, 0, m) / (eps + n)
 *   UnitNorm(axis)            w / (eps + n)
 *   MinMaxNorm(a, b, r, axis) w * (r * clip(n, a, b) + (1 - r) * n) / (eps + n)
 *   NonNeg                    w * (w >= 0)
 * with n the L2 norm over the axes `axis` lists (the others kept: Keras's
 * default axis 0 of a dense kernel (IN, OUT) is one norm per output unit),
 * eps Keras's 1e-7. dt_model_apply_constraints runs them; the strategies
 * that update the variables in this process call it after their optimizer
 * (train/strategy.h's `constraints`).
 */
#ifndef DT_NN_REGULARIZE_H
#define DT_NN_REGULARIZE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct dt_model;
struct dt_graph;

struct dt_regularizer {
	float l1, l2;   /* >= 0; both 0 (and orth 0): none */
	float orth;     /* Keras 3's OrthogonalRegularizer factor (> 0: on; a rank-2 kernel only) */
	int orth_cols;  /* its mode: 0 "rows", 1 "columns" */
};

static inline int dt_regularizer_on(struct dt_regularizer r)
{
	return r.l1 != 0.0f || r.l2 != 0.0f || r.orth != 0.0f;
}

/* l1 * sum |x| + l2 * sum x^2 over x[0 .. n), in double. */
double dt_regularizer_penalty(struct dt_regularizer r, const float *x, size_t n);
/* g[i] += scale * (l1 * sign(x[i]) + 2 * l2 * x[i]). */
void dt_regularizer_grad(struct dt_regularizer r, float scale, const float *x, float *g, size_t n);
/* Keras 3's OrthogonalRegularizer(factor, mode) on w (rows, cols): the
 * vectors (w's rows, or its columns with by_cols) normalized to u_i =
 * v_i / max(|v_i|, 1e-7), and
 *     penalty = factor * 0.5 * sum_{i != j} |u_i . u_j| / (n (n - 1) / 2)
 * over the n vectors (0 when n < 2, where Keras's is NaN). Returns it and,
 * unless grad is NULL, adds its gradient to grad (rows, cols). */
double dt_orthogonal_penalty(float factor, int by_cols, const float *w, int rows, int cols, float *grad);

enum dt_constraint_kind { DT_CONSTRAINT_NONE, DT_CONSTRAINT_MAX_NORM, DT_CONSTRAINT_NON_NEG, DT_CONSTRAINT_UNIT_NORM,
			  DT_CONSTRAINT_MIN_MAX_NORM };
#define DT_CONSTRAINT_EPS 1e-7f
struct dt_constraint {
	enum dt_constraint_kind kind;
	float min_value, max_value, rate; /* MaxNorm: max_value; MinMaxNorm: all three */
	unsigned axes;                    /* bit a: axis a is reduced (normalized over) */
};

/* Projects w, of rank ndim (1 to 4) and shape, in place. */
void dt_constraint_apply(const struct dt_constraint *c, float *w, int ndim, const int64_t *shape);

/* On graph node `name` (dense, conv2d, depthwise, separable, batch or layer
 * norm, embedding): the regularizer of its kernel-like variable (which 0:
 * the kernel, gamma, embeddings; a separable node's pointwise kernel), its
 * bias-like one (1: bias, beta), a separable node's depthwise kernel (3),
 * or its output (2: `per_example` divides by the batch size, Keras 2's
 * rule; an output regularizer goes on any float node). Unknown node, kind,
 * or a negative factor → DT_CONFIG. */
enum dt_status dt_graph_set_regularizer(struct dt_graph *g, const char *name, int which, struct dt_regularizer r,
					int per_example, struct dt_err *err) DT_MUST_CHECK;
/* The constraint of node `name`'s variable `which` (0, 1, 3 as above);
 * `field` names it in messages (Keras's "kernel_constraint"). Axes past the
 * variable's rank are checked when the model is compiled (DT_CONFIG). */
enum dt_status dt_graph_set_constraint(struct dt_graph *g, const char *name, int which, const struct dt_constraint *c,
				       const char *field, struct dt_err *err) DT_MUST_CHECK;

/* True when the model has a constraint; then *node and *field (may be
 * NULL) name the first, for messages. */
int dt_model_has_constraints(const struct dt_model *m, const char **node, const char **field);
/* Applies every constraint to the model's variables (after an update). */
void dt_model_apply_constraints(struct dt_model *m);
/* True when the model has a regularizer (its loss has a penalty part). */
int dt_model_has_regularizers(const struct dt_model *m);
/* The regularization part of the last step's loss on m (train or
 * evaluate; any entry point); 0 before one or without regularizers. */
float dt_model_last_reg_loss(const struct dt_model *m);

#endif
