/* Finite-difference gradient checks shared by the nn test suites
 * (grad_check.h). */
#include "grad_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/alloc.h"

#define MAX_CHECKS 400

float *random_floats(size_t n, uint64_t seed, float scale)
{
	struct dt_rng rng;
	dt_rng_seed(&rng, seed);
	float *p = dt_xalloc_aligned(n ? n : 1, sizeof(float));
	for (size_t i = 0; i < n; i++)
		p[i] = scale * dt_rng_normal(&rng);
	return p;
}

void rig_init(struct rig *g, int B, uint64_t seed)
{
	struct dt_layer *l = &g->layer;
	g->B = B;
	g->in_n = (size_t)B * dt_shape_elems(l->in);
	g->out_n = (size_t)B * dt_shape_elems(l->out);
	g->np = dt_layer_num_params(l);
	g->x = random_floats(g->in_n, seed, 1.0f);
	g->y = dt_xalloc_aligned(g->out_n, sizeof(float));
	g->r = random_floats(g->out_n, seed + 1, 1.0f);
	g->params = random_floats(g->np, seed + 2, 0.5f);
	g->grads = dt_xalloc_aligned(g->np ? g->np : 1, sizeof(float));
	g->scratch = dt_xalloc_aligned(dt_layer_scratch_floats(l, B) + 1, sizeof(float));
	g->dy = dt_xalloc_aligned(g->out_n, sizeof(float));
	g->dx = dt_xalloc_aligned(g->in_n, sizeof(float));
	g->dropout_seed = seed + 3;
	dt_layer_bind(l, g->params, g->grads);
	dt_layer_alloc_state(l, B);
}

void rig_release(struct rig *g)
{
	dt_layer_release(&g->layer);
	free(g->x);
	free(g->y);
	free(g->r);
	free(g->params);
	free(g->grads);
	free(g->scratch);
	free(g->dy);
	free(g->dx);
}

/* Forward with the same dropout mask every time; returns sum(y * r). */
double rig_loss(struct rig *g)
{
	struct dt_rng rng;
	dt_rng_seed(&rng, g->dropout_seed);
	dt_layer_forward(&g->layer, g->x, g->y, g->B, 1, &rng, g->scratch);
	double s = 0;
	for (size_t i = 0; i < g->out_n; i++)
		s += (double)g->y[i] * (double)g->r[i];
	return s;
}

/* Analytic gradients: dx into g->dx, parameter gradients into g->grads. */
void rig_backward(struct rig *g)
{
	rig_loss(g);
	memcpy(g->dy, g->r, g->out_n * sizeof(float));
	memset(g->dx, 0, g->in_n * sizeof(float));
	dt_layer_backward(&g->layer, g->x, g->y, g->dy, g->dx, g->B, g->scratch);
}

/* Compares analytic[i] with central differences of `loss` over v[i], for
 * all i (or MAX_CHECKS spread over v): each must be within
 * rtol * max(|num|, |ana|) + atol. Returns the aggregate relative error,
 * sum |num - ana| / sum |ana|.
 *
 * With skip_kinks, an entry whose forward and backward one-sided differences
 * disagree (the perturbation crossed a ReLU or pooling kink somewhere in a
 * whole model) is skipped; at most 5% of the entries may be. */
double check_array(const char *what, float *v, size_t n, const float *analytic, double (*loss)(void *),
			  void *ctx, double rtol, double atol, int skip_kinks)
{
	double err_sum = 0, ana_sum = 0;
	size_t step = n > MAX_CHECKS ? n / MAX_CHECKS : 1, checked = 0, skipped = 0;
	const double l0 = skip_kinks ? loss(ctx) : 0;
	for (size_t i = 0; i < n; i += step) {
		const float orig = v[i];
		const float up = orig + EPS, down = orig - EPS;
		v[i] = up;
		double lp = loss(ctx);
		v[i] = down;
		double lm = loss(ctx);
		v[i] = orig;
		checked++;
		if (skip_kinks) {
			double fwd = (lp - l0) / ((double)up - (double)orig), bwd = (l0 - lm) / ((double)orig - (double)down);
			if (fabs(fwd - bwd) > rtol * fmax(fabs(fwd), fabs(bwd)) + atol) {
				skipped++;
				continue;
			}
		}
		double num = (lp - lm) / ((double)up - (double)down);
		double ana = (double)analytic[i];
		double err = fabs(num - ana);
		if (!(err <= rtol * fmax(fabs(num), fabs(ana)) + atol))
			dt_test_fail(__FILE__, __LINE__, "%s[%zu]: analytic %.8g, numerical %.8g (error %.3g)", what, i, ana,
				     num, err);
		err_sum += err;
		ana_sum += fabs(ana);
	}
	if (skipped * 20 > checked)
		dt_test_fail(__FILE__, __LINE__, "%s: %zu of %zu entries sit on kinks", what, skipped, checked);
	return ana_sum > 0 ? err_sum / ana_sum : err_sum;
}

double rig_loss_cb(void *ctx)
{
	return rig_loss(ctx);
}

/* Checks dx, dkernel and dbias of the rig's layer. */
void check_rig(struct rig *g, double rtol, double atol)
{
	rig_backward(g);
	float *dx = dt_xmalloc(g->in_n * sizeof(float)), *dp = dt_xmalloc((g->np ? g->np : 1) * sizeof(float));
	memcpy(dx, g->dx, g->in_n * sizeof(float));
	memcpy(dp, g->grads, g->np * sizeof(float));
	char what[DT_LAYER_NAME_MAX + 16];
	snprintf(what, sizeof(what), "%s dx", g->layer.name);
	check_array(what, g->x, g->in_n, dx, rig_loss_cb, g, rtol, atol, 0);
	if (g->np) {
		snprintf(what, sizeof(what), "%s dkernel", g->layer.name);
		check_array(what, g->params, g->layer.kernel_count, dp, rig_loss_cb, g, rtol, atol, 0);
		snprintf(what, sizeof(what), "%s dbias", g->layer.name);
		check_array(what, g->params + g->layer.kernel_count, g->layer.bias_count, dp + g->layer.kernel_count,
			    rig_loss_cb, g, rtol, atol, 0);
	}
	free(dx);
	free(dp);
}

