/*
 * fixed_point.h — --deterministic's sums of micro-batch gradients: 64-bit
 * fixed point, and the ordered sum of a small step.
 *
 * Floating-point addition is not associative: the sum of the same gradients
 * in another order (two workers instead of one, a ring of four, replicas on
 * threads) differs in the last bits, and so does every variable after it.
 * Integer addition is associative. So with --deterministic, where partial
 * sums are combined across tasks, each micro-batch's gradient (the unit of
 * work: a fixed number of examples, wherever it is computed) is converted
 * to integers with a scale every task agrees on, the integers are summed
 * (locally, then by an int64 all-reduce), and the sum converted back once:
 * the same bits whichever tasks computed which micro-batches and in
 * whatever order they were added. Where no partial sum is ever combined
 * (every task holds all of a small step's gradients), a fixed order does
 * the same more cheaply: the ordered sum, below.
 *
 * The scale, per variable and per step: e is the smallest exponent with
 * |g| < 2^e for every element g of that variable in every micro-batch of the
 * global step (each task's maximum, then the maximum over the tasks); with K
 * micro-batches in the global step and c = ceil(log2 K),
 *
 *     q = round_half_even(g * 2^S),   S = 62 - c - e,
 *
 * so |q| <= 2^(62-c) and the sum of the K values is at most 2^62 in
 * magnitude: it cannot overflow, by construction (the "overflow rule" is
 * that the scale leaves room for K terms; no saturation is ever needed).
 * The mean is float((double)sum * f), f = 2^-S / K rounded once to double. Range and precision: the largest
 * element keeps 62 - c bits (float32 has 24); an element smaller than
 * 2^(e-62+c) — 2^-52 of the variable's largest for K = 1024 — becomes 0, an
 * update far below float32's resolution of the variables it would change.
 * A non-finite gradient has no scale: dt_fixed_exponent says so, every task
 * learns it with the exponents, and the step fails as diverged.
 *
 * Which method a step uses depends on K alone (the micro-batches of the
 * GLOBAL step: the full ring's slices times the micro-batches of a slice),
 * the same on every task and at every worker count, never on the deal:
 *
 *   K <= DT_ORDERED_MAX_TERMS: the ordered sum (dt_ordered_mean_k). Every
 *     task ends the step holding all K gradients (its own, or all-gathered)
 *     and sums them itself in micro-batch index order. No partial sum is
 *     ever combined across tasks, so the order of the additions is the
 *     index, whichever task computed which micro-batch: the same bits at
 *     any worker count, with no scale, no exponents and no int64 pass.
 *   K > DT_ORDERED_MAX_TERMS: fixed point as above, because there each task
 *     sums its own micro-batches and the partial sums are combined across
 *     tasks (an all-reduce whose order depends on the ring), which only
 *     integer addition makes order-free.
 *
 * Never both for one K: 1 worker and 2 workers would then sum the same
 * gradients by two methods and differ.
 *
 * Every function here is pure arithmetic on the caller's buffers.
 */
#ifndef DT_TRAIN_FIXED_POINT_H
#define DT_TRAIN_FIXED_POINT_H

#include <stddef.h>
#include <stdint.h>

/* dt_fixed_exponent of all zeros (smaller than any float's), and of a
 * buffer holding a NaN or an infinity (larger than any float's). The
 * maximum over buffers is then the combined answer for both. */
#define DT_FIXED_EXP_ZERO (-1000)
#define DT_FIXED_EXP_NONFINITE 1000

/* The smallest e with |x[i]| < 2^e for every i (frexp's exponent of the
 * largest magnitude), or one of the two values above. */
int dt_fixed_exponent(const float *x, size_t n);

/* S for a variable of exponent `e` summed over `terms` (>= 1) micro-batches;
 * 0 for DT_FIXED_EXP_ZERO (every value is 0). e must be finite-valued
 * (not DT_FIXED_EXP_NONFINITE). */
int dt_fixed_scale(int e, int64_t terms);

/* acc[i] += round_half_even(x[i] * 2^scale). The caller guarantees the
 * bound above (|x[i]| < 2^e of the scale's e). */
void dt_fixed_accumulate(int64_t *acc, const float *x, size_t n, int scale);

/* out[i] = float((double)acc[i] * (2^-scale / terms)): the mean of the terms. */
void dt_fixed_mean(float *out, const int64_t *acc, size_t n, int scale, int64_t terms);

/* The fast paths of --deterministic's step (train/session.c); their naive
 * twins are the ones above, which the unit test checks them against bit for
 * bit. x[j] (j < k) is the j-th micro-batch's gradient of one variable, n
 * elements. Both round in vectors (fixed_point.c): with AVX-512DQ by the
 * hardware's conversion, otherwise on the floats' bits. */
/* acc[i] = sum over j of round_half_even(x[j][i] * 2^scale): the k
 * accumulations in one pass, acc written once (not read: no memset). */
void dt_fixed_sum_k(int64_t *acc, const float *const *x, int k, size_t n, int scale);
/* dt_fixed_sum_k by the portable rounding on the floats' bits, whichever
 * the build's instruction set picks for dt_fixed_sum_k (the unit test checks
 * both on any machine). */
void dt__fixed_sum_k_bits(int64_t *acc, const float *const *x, int k, size_t n, int scale);
/* out[i] = dt_fixed_mean of that sum, with no int64 buffer: one task
 * (nothing to all-reduce), the same bits as the two steps. out may be one
 * of the x[j] (each element is read before it is written). */
void dt_fixed_sum_mean_k(float *out, const float *const *x, int k, size_t n, int scale, int64_t terms);

/* The most micro-batches in a global step summed in order (above): every
 * task then receives every other task's raw gradients, (n - 1) K / n
 * gradients' worth, against the int64 ring's 4 (n - 1) / n (8-byte
 * integers, reduce-scatter and all-gather): fewer bytes while K < 4. */
#define DT_ORDERED_MAX_TERMS 3

/* The ordered sum's mean, defined here and nowhere else:
 *
 *     out[i] = (float)((((double)x[0][i] + x[1][i]) + ... + x[k-1][i]) * (1.0 / k))
 *
 * the terms added left to right in double (micro-batch index order), the
 * sum multiplied by 1/k rounded once to double, the product rounded once to
 * float. Vectorized (fixed_point.c: AVX-512F where the build has it,
 * portable vectors otherwise); at k = 2 in floats, fl32(x[0][i] + x[1][i])
 * * 0.5f, which is the formula's value whenever that float sum is finite
 * (fixed_point.c says why; the rest goes through double). The unit test
 * checks both against the formula written out, bit for bit, in the default
 * floating-point mode (no flush of denormals). k >= 1. out may be one of the x[j]
 * (each element is read before it is written). Returns 1 when some out[i]
 * is a NaN or an infinity (every non-finite term makes the sum non-finite:
 * the step diverged, alike on every task, which all compute the same
 * mean), else 0. The session computes it chunk by chunk inside the
 * optimizer's update where nothing reads the whole mean first
 * (dt_optimizer_apply_made, train/session_deal.c): the same calls on
 * shorter ranges, the same bits. */
int dt_ordered_mean_k(float *out, const float *const *x, int k, size_t n);
/* dt_ordered_mean_k in the vector extension's portable vectors, whatever
 * the build's instruction set picks for it (the unit test checks both). */
int dt__ordered_mean_k_portable(float *out, const float *const *x, int k, size_t n);

#endif
