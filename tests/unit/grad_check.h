/*
 * grad_check.h — finite-difference gradient checks for the nn tests.
 *
 * A `struct rig` holds one layer with its own parameters, input and
 * buffers; its scalar loss is L = sum_i y_i * r_i for a fixed random r, so
 * dL/dy = r. check_array compares analytic gradients with central
 * differences of any loss callback (see test_nn_grad.c for the method).
 */
#ifndef DT_TESTS_GRAD_CHECK_H
#define DT_TESTS_GRAD_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "nn/layers.h"

#define EPS 1e-3f

/* A layer under test with its own parameters, input and buffers. */
struct rig {
	struct dt_layer layer;
	int B;
	size_t in_n, out_n, np;
	float *x, *y, *r, *params, *grads, *scratch, *dy, *dx;
	uint64_t dropout_seed;
};

/* n floats, scale * N(0, 1) from `seed`, 64-byte aligned (free()). */
float *random_floats(size_t n, uint64_t seed, float scale);
void rig_init(struct rig *g, int B, uint64_t seed);
void rig_release(struct rig *g);
/* Forward with the same dropout mask every time; returns sum(y * r). */
double rig_loss(struct rig *g);
double rig_loss_cb(void *ctx);
/* Analytic gradients: dx into g->dx, parameter gradients into g->grads. */
void rig_backward(struct rig *g);
/* Compares analytic[i] with central differences of loss over v[i] (or
 * 400 entries spread over v); fails the test on an entry beyond
 * rtol * max(|num|, |ana|) + atol; returns sum |num - ana| / sum |ana|.
 * skip_kinks: entries whose one-sided differences disagree are skipped
 * (at most 5%). */
double check_array(const char *what, float *v, size_t n, const float *analytic, double (*loss)(void *), void *ctx,
		   double rtol, double atol, int skip_kinks);
/* Checks dx, dkernel and dbias of the rig's layer. */
void check_rig(struct rig *g, double rtol, double atol);

#endif
