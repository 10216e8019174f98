/*
 * Regularizers and constraints (nn/regularize.h): their math, the graph
 * calls that attach them to nodes, and the constraints' pass over a
 * compiled model's variables. The penalties' place in a step is exec.c's.
 */
#include "nn/regularize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "nn/graph_impl.h"

double dt_regularizer_penalty(struct dt_regularizer r, const float *x, size_t n)
{
	double a = 0.0, q = 0.0;
	for (size_t i = 0; i < n; i++) {
		a += fabs((double)x[i]);
		q += (double)x[i] * (double)x[i];
	}
	return (double)r.l1 * a + (double)r.l2 * q;
}

void dt_regularizer_grad(struct dt_regularizer r, float scale, const float *x, float *g, size_t n)
{
	const float a = scale * r.l1, q = 2.0f * scale * r.l2;
	for (size_t i = 0; i < n; i++)
		g[i] += a * (float)((x[i] > 0.0f) - (x[i] < 0.0f)) + q * x[i];
}

double dt_orthogonal_penalty(float factor, int by_cols, const float *w, int rows, int cols, float *grad)
{
	const int n = by_cols ? cols : rows, d = by_cols ? rows : cols;
	if (n < 2)
		return 0.0;
	/* element k of vector i */
	const size_t si = by_cols ? 1 : (size_t)cols, sk = by_cols ? (size_t)cols : 1;
	double *u = dt_xmallocarray((size_t)n * (size_t)d, sizeof(double));
	double *r = dt_xmallocarray((size_t)n, sizeof(double));
	for (int i = 0; i < n; i++) {
		double q = 0;
		for (int k = 0; k < d; k++)
			q += (double)w[i * si + k * sk] * (double)w[i * si + k * sk];
		r[i] = fmax(sqrt(q), (double)DT_CONSTRAINT_EPS);
		for (int k = 0; k < d; k++)
			u[(size_t)i * d + k] = (double)w[i * si + k * sk] / r[i];
	}
	const double c = (double)factor * 0.5 / ((double)n * ((double)n - 1.0) / 2.0);
	double sum = 0;
	double *gu = grad ? dt_xcalloc((size_t)n * (size_t)d, sizeof(double)) : NULL;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			double p = 0;
			for (int k = 0; k < d; k++)
				p += u[(size_t)i * d + k] * u[(size_t)j * d + k];
			sum += 2.0 * fabs(p); /* P_ij and P_ji */
			if (!gu || p == 0.0)
				continue;
			const double s = p > 0 ? 2.0 * c : -2.0 * c; /* d/du_i of c (|P_ij| + |P_ji|) = 2c sign u_j */
			for (int k = 0; k < d; k++) {
				gu[(size_t)i * d + k] += s * u[(size_t)j * d + k];
				gu[(size_t)j * d + k] += s * u[(size_t)i * d + k];
			}
		}
	if (gu) {
		/* through u = v / max(|v|, eps): (g - u (u . g)) / |v| above eps, g / eps below */
		for (int i = 0; i < n; i++) {
			const double *g = gu + (size_t)i * d, *ui = u + (size_t)i * d;
			const int above = r[i] > (double)DT_CONSTRAINT_EPS;
			double ug = 0;
			for (int k = 0; k < d && above; k++)
				ug += ui[k] * g[k];
			for (int k = 0; k < d; k++)
				grad[i * si + k * sk] += (float)((g[k] - (above ? ui[k] * ug : 0.0)) / r[i]);
		}
		free(gu);
	}
	free(r);
	free(u);
	return c * sum;
}

/* ---- constraints -------------------------------------------------------------- */

/* Element i's norm group: its index over the kept axes (reduced ones read 0). */
static size_t group_of(size_t i, int ndim, const int64_t *shape, const size_t *stride, const size_t *nstride)
{
	size_t k = 0;
	for (int a = 0; a < ndim; a++)
		k += (i / stride[a]) % (size_t)shape[a] * nstride[a];
	return k;
}

void dt_constraint_apply(const struct dt_constraint *c, float *w, int ndim, const int64_t *shape)
{
	if (c->kind == DT_CONSTRAINT_NONE)
		return;
	size_t n = 1;
	for (int a = 0; a < ndim; a++)
		n *= (size_t)shape[a];
	if (c->kind == DT_CONSTRAINT_NON_NEG) {
		for (size_t i = 0; i < n; i++)
			w[i] = w[i] >= 0.0f ? w[i] : 0.0f;
		return;
	}
	/* row-major strides of w, and of the norms (the kept axes only) */
	size_t stride[4] = { 0 }, nstride[4] = { 0 }, groups = 1, s = 1;
	for (int a = ndim - 1; a >= 0; a--) {
		stride[a] = s;
		s *= (size_t)shape[a];
	}
	for (int a = ndim - 1; a >= 0; a--) {
		if (c->axes & (1u << a))
			continue;
		nstride[a] = groups;
		groups *= (size_t)shape[a];
	}
	double *sq = dt_xcalloc(groups, sizeof(double));
	for (size_t i = 0; i < n; i++)
		sq[group_of(i, ndim, shape, stride, nstride)] += (double)w[i] * (double)w[i];
	for (size_t k = 0; k < groups; k++) {
		const double norm = sqrt(sq[k]);
		double want = norm;
		if (c->kind == DT_CONSTRAINT_MAX_NORM)
			want = fmin(fmax(norm, 0.0), (double)c->max_value);
		else if (c->kind == DT_CONSTRAINT_UNIT_NORM)
			want = 1.0;
		else if (c->kind == DT_CONSTRAINT_MIN_MAX_NORM)
			want = (double)c->rate * fmin(fmax(norm, (double)c->min_value), (double)c->max_value) +
			       (1.0 - (double)c->rate) * norm;
		sq[k] = want / ((double)DT_CONSTRAINT_EPS + norm); /* now the scale */
	}
	for (size_t i = 0; i < n; i++)
		w[i] = (float)((double)w[i] * sq[group_of(i, ndim, shape, stride, nstride)]);
	free(sq);
}

/* ---- on graph nodes -------------------------------------------------------------- */

static int has_weights(enum dt_layer_kind k)
{
	return k == DT_LAYER_DENSE || k == DT_LAYER_CONV2D || k == DT_LAYER_DEPTHWISE || k == DT_LAYER_BATCHNORM ||
	       k == DT_LAYER_LAYERNORM || k == DT_LAYER_EMBEDDING;
}

/* Node `name` and, for which 3, its separable depthwise half (which 0 there). */
static enum dt_status target(struct dt_graph *g, const char *name, int *which, struct dt__node **out,
			     struct dt_err *err)
{
	int idx = -1;
	for (int i = 0; g && name && i < g->n; i++)
		if (strcmp(g->nodes[i].layer.name, name) == 0)
			idx = i;
	if (idx < 0)
		return dt_err_set(err, DT_CONFIG, "no node named '%s' in the graph", name ? name : "(null)");
	struct dt__node *n = &g->nodes[idx];
	if (*which == 3) {
		const int sep = n->kernel_suffix && strcmp(n->kernel_suffix, "pointwise_kernel") == 0;
		if (!sep)
			return dt_err_set(err, DT_CONFIG, "node '%s' is not a separable convolution: it has no depthwise "
					  "kernel of its own", name);
		n = &g->nodes[n->inputs[0]];
		*which = 0;
	}
	if (*which < 2 && !has_weights(n->layer.kind))
		return dt_err_set(err, DT_CONFIG, "node '%s' has no kernel or bias to regularize or constrain", name);
	if (*which == 1 && n->layer.bias_count == 0)
		return dt_err_set(err, DT_CONFIG, "node '%s' has no bias", name);
	if (*which < 0 || *which > 2)
		return dt_err_set(err, DT_CONFIG, "node '%s': no variable %d (0 kernel, 1 bias, 2 output, 3 depthwise)",
				  name, *which);
	*out = n;
	return DT_OK;
}

enum dt_status dt_graph_set_regularizer(struct dt_graph *g, const char *name, int which, struct dt_regularizer r,
					int per_example, struct dt_err *err)
{
	struct dt__node *n;
	enum dt_status st = target(g, name, &which, &n, err);
	if (st)
		return st;
	if (!(r.l1 >= 0.0f && r.l2 >= 0.0f && r.orth >= 0.0f && isfinite(r.l1) && isfinite(r.l2) && isfinite(r.orth)))
		return dt_err_set(err, DT_CONFIG, "node '%s': regularization factors l1 %g, l2 %g, orthogonal %g must be "
				  "finite and >= 0", name, (double)r.l1, (double)r.l2, (double)r.orth);
	if (r.orth != 0.0f && (which != 0 || n->layer.kind != DT_LAYER_DENSE))
		return dt_err_set(err, DT_CONFIG, "node '%s': an orthogonal regularizer needs a rank-2 kernel (a dense "
				  "node's)", name);
	if (which == 2 && n->dtype != DT_FLOAT32)
		return dt_err_set(err, DT_CONFIG, "node '%s': an output regularizer needs a float32 output", name);
	n->reg[which] = r;
	if (which == 2)
		n->reg_per_example = per_example != 0;
	return DT_OK;
}

enum dt_status dt_graph_set_constraint(struct dt_graph *g, const char *name, int which, const struct dt_constraint *c,
				       const char *field, struct dt_err *err)
{
	struct dt__node *n;
	if (which == 2)
		return dt_err_set(err, DT_CONFIG, "node '%s': a constraint is on a variable, not an output", name);
	enum dt_status st = target(g, name, &which, &n, err);
	if (st)
		return st;
	const int bad = (c->kind == DT_CONSTRAINT_MAX_NORM && !(c->max_value >= 0.0f)) ||
			(c->kind == DT_CONSTRAINT_MIN_MAX_NORM &&
			 !(c->min_value >= 0.0f && c->max_value >= c->min_value && c->rate >= 0.0f && c->rate <= 1.0f));
	if (bad)
		return dt_err_set(err, DT_CONFIG, "node '%s': %s: want 0 <= min_value <= max_value and rate in [0, 1]",
				  name, field ? field : "constraint");
	n->con[which] = *c;
	snprintf(n->con_field[which], sizeof(n->con_field[which]), "%s", field ? field : "constraint");
	return DT_OK;
}

/* ---- on compiled models ---------------------------------------------------------- */

int dt_model_has_constraints(const struct dt_model *m, const char **node, const char **field)
{
	for (int i = 0; m && i < m->num_nodes; i++)
		for (int w = 0; w < 2; w++)
			if (m->nodes[i].con[w].kind != DT_CONSTRAINT_NONE) {
				if (node)
					*node = m->nodes[i].var_prefix[0] ? m->nodes[i].var_prefix : m->nodes[i].layer.name;
				if (field)
					*field = m->nodes[i].con_field[w];
				return 1;
			}
	return 0;
}

int dt_model_has_regularizers(const struct dt_model *m)
{
	for (int i = 0; m && i < m->num_nodes; i++)
		for (int w = 0; w < 3; w++)
			if (dt_regularizer_on(m->nodes[i].reg[w]))
				return 1;
	return 0;
}

float dt_model_last_reg_loss(const struct dt_model *m)
{
	return m ? m->last_reg_loss : 0.0f;
}

enum dt_status dt__model_check_constraints(const struct dt_model *m, const char *name, struct dt_err *err)
{
	for (int i = 0; i < m->num_nodes; i++)
		for (int w = 0; w < 2; w++) {
			const struct dt__node *n = &m->nodes[i];
			if (n->con[w].kind == DT_CONSTRAINT_NONE || n->var_first < 0)
				continue;
			const struct dt_variable *v = &m->vars[n->var_first + w];
			if (n->con[w].axes >> v->ndim)
				return dt_err_set(err, DT_CONFIG, "model '%s': %s of '%s' normalizes over an axis past the "
						  "rank %d of its variable '%s'", name, n->con_field[w], n->layer.name,
						  v->ndim, v->name);
		}
	return DT_OK;
}

void dt_model_apply_constraints(struct dt_model *m)
{
	for (int i = 0; m && i < m->num_nodes; i++) {
		const struct dt__node *n = &m->nodes[i];
		for (int w = 0; w < 2; w++) {
			if (n->con[w].kind == DT_CONSTRAINT_NONE || n->var_first < 0 || n->frozen)
				continue;
			const struct dt_variable *v = &m->vars[n->var_first + w];
			dt_constraint_apply(&n->con[w], m->params + v->offset, v->ndim, v->shape);
		}
	}
}
