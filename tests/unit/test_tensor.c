/* Unit tests for src/tensor: every fast kernel against its naive twin on odd
 * shapes, plus the small tensor helpers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "tensor/kernels.h"
#include "tensor/tensor.h"

static float *random_floats(size_t n, uint64_t seed)
{
	struct dt_rng rng;
	dt_rng_seed(&rng, seed);
	float *p = dt_xalloc_aligned(n ? n : 1, sizeof(float));
	for (size_t i = 0; i < n; i++)
		p[i] = dt_rng_normal(&rng);
	return p;
}

/* Largest |a - b| over n floats. */
static double max_abs_diff(const float *a, const float *b, size_t n)
{
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);
		if (!(d <= worst))
			worst = d;
	}
	return worst;
}

DT_TEST(tensor, view_count_and_shape_format)
{
	float data[6];
	int64_t shape[3] = { 1, 2, 3 };
	struct dt_tensor t = dt_tensor_view(data, 3, shape);
	DT_CHECK_INT_EQ(dt_tensor_count(&t), 6);
	DT_CHECK(t.data == data);
	char buf[64];
	dt_shape_format(buf, sizeof(buf), 3, shape);
	DT_CHECK_STR_EQ(buf, "(1, 2, 3)");
	dt_shape_format(buf, sizeof(buf), 0, shape);
	DT_CHECK_STR_EQ(buf, "()");
	dt_shape_format(buf, 5, 3, shape);
	DT_CHECK_STR_EQ(buf, "(1, ");
	struct dt_tensor s = dt_tensor_view(data, 0, NULL);
	DT_CHECK_INT_EQ(dt_tensor_count(&s), 1);
}

/* ---- matmul ---------------------------------------------------------------- */

static void check_matmul(int ta, int tb, int M, int N, int K, float alpha, float beta)
{
	/* Row strides larger than the minimum, to exercise lda/ldb/ldc. */
	const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
	const int arows = ta ? K : M, brows = tb ? N : K;
	float *A = random_floats((size_t)arows * (size_t)lda, 1);
	float *B = random_floats((size_t)brows * (size_t)ldb, 2);
	float *C1 = random_floats((size_t)M * (size_t)ldc, 3);
	float *C2 = dt_xmalloc((size_t)M * (size_t)ldc * sizeof(float));
	memcpy(C2, C1, (size_t)M * (size_t)ldc * sizeof(float));
	dt_matmul(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C1, ldc);
	dt_matmul_naive(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C2, ldc);
	double tol = 1e-5 * (K + 1);
	for (int i = 0; i < M; i++)
		for (int j = 0; j < ldc; j++) {
			size_t at = (size_t)i * (size_t)ldc + (size_t)j;
			if (j >= N) /* padding columns untouched */
				DT_CHECK(C1[at] == C2[at]);
			else
				DT_CHECK_NEAR(C1[at], C2[at], tol);
		}
	free(A);
	free(B);
	free(C1);
	free(C2);
}

DT_TEST(tensor, matmul_matches_naive_for_every_transpose_and_odd_shapes)
{
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			check_matmul(ta, tb, 7, 13, 5, 1.0f, 0.0f);
			check_matmul(ta, tb, 1, 1, 1, 1.0f, 0.0f);
			check_matmul(ta, tb, 33, 6, 25, 0.5f, 1.0f);
			check_matmul(ta, tb, 3, 17, 64, 1.0f, -2.0f);
		}
}

DT_TEST(tensor, matmul_beta_zero_ignores_garbage_in_c)
{
	float A[2 * 3] = { 1, 2, 3, 4, 5, 6 }, B[3 * 2] = { 1, 0, 0, 1, 1, 1 };
	float C[4] = { NAN, NAN, NAN, NAN };
	dt_matmul(0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);
	DT_CHECK_NEAR(C[0], 4, 0);
	DT_CHECK_NEAR(C[1], 5, 0);
	DT_CHECK_NEAR(C[2], 10, 0);
	DT_CHECK_NEAR(C[3], 11, 0);
}

/* ---- im2col / col2im ------------------------------------------------------- */

struct conv_case {
	int H, W, C, KH, KW, stride, pad, n;
};

static const struct conv_case conv_cases[] = {
	{ 9, 7, 3, 3, 3, 2, 1, 2 },  /* the brief's odd case: stride 2, padding 1 */
	{ 28, 28, 1, 5, 5, 1, 2, 3 }, /* LeNet conv_1 */
	{ 14, 14, 6, 5, 5, 1, 0, 2 }, /* LeNet conv_2 */
	{ 6, 5, 1, 3, 3, 1, 1, 2 },   /* 3x3 on one channel: 3-float segments */
	{ 5, 6, 2, 3, 2, 1, 2, 2 },   /* padding wider than needed, rectangular window */
	{ 4, 4, 1, 3, 3, 1, 3, 1 },   /* windows entirely in the padding */
	{ 7, 9, 5, 4, 3, 3, 1, 2 },   /* stride 3, segments of 15 floats */
	{ 3, 3, 16, 1, 1, 1, 0, 2 },  /* 1x1 */
	{ 8, 8, 3, 2, 2, 2, 0, 1 },
	{ 5, 11, 1, 2, 4, 2, 1, 3 },  /* one channel with stride 2 */
	{ 1, 1, 9, 1, 1, 1, 1, 1 },
};

DT_TEST(tensor, conv_geometry_output_sizes_and_rejections)
{
	struct dt_conv_geom g;
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 9, 7, 3, 3, 3, 2, 1), 0);
	DT_CHECK_INT_EQ(g.OH, 5);
	DT_CHECK_INT_EQ(g.OW, 4);
	DT_CHECK_INT_EQ(dt_conv_k(&g), 27);
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 28, 28, 1, 5, 5, 1, 2), 0);
	DT_CHECK_INT_EQ(g.OH, 28);
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 4, 4, 1, 5, 5, 1, 0), -1); /* window larger than input */
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 4, 4, 1, 3, 3, 0, 0), -1); /* stride 0 */
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 4, 4, 0, 3, 3, 1, 0), -1); /* no channels */
	DT_CHECK_INT_EQ(dt_conv_geom_init(&g, 4, 4, 1, 3, 3, 1, -1), -1);
}

DT_TEST(tensor, im2col_and_transposed_im2col_match_naive)
{
	for (size_t t = 0; t < DT_ARRAY_LEN(conv_cases); t++) {
		const struct conv_case *c = &conv_cases[t];
		struct dt_conv_geom g;
		DT_CHECK_INT_EQ(dt_conv_geom_init(&g, c->H, c->W, c->C, c->KH, c->KW, c->stride, c->pad), 0);
		const size_t rows = (size_t)c->n * (size_t)g.OH * (size_t)g.OW, K = (size_t)dt_conv_k(&g);
		float *x = random_floats((size_t)c->n * (size_t)c->H * (size_t)c->W * (size_t)c->C, 10 + t);
		/* Poison the outputs so a skipped element shows. */
		float *fast = random_floats(rows * K, 99), *slow = random_floats(rows * K, 98);
		dt_im2col(&g, x, c->n, fast);
		dt_im2col_naive(&g, x, c->n, slow);
		for (size_t i = 0; i < rows * K; i++)
			if (fast[i] != slow[i])
				dt_test_fail(__FILE__, __LINE__, "case %zu: im2col differs at %zu: %g vs %g", t, i,
					     (double)fast[i], (double)slow[i]);
		/* Transposed layout with a leading dimension larger than rows. */
		const int ld = (int)rows + 5;
		float *tf = random_floats(K * (size_t)ld, 97), *ts = random_floats(K * (size_t)ld, 97);
		dt_im2col_t(&g, x, c->n, tf, ld);
		dt_im2col_t_naive(&g, x, c->n, ts, ld);
		for (size_t k = 0; k < K; k++)
			for (size_t r = 0; r < (size_t)ld; r++) {
				float a = tf[k * (size_t)ld + r], b = ts[k * (size_t)ld + r];
				if (a != b)
					dt_test_fail(__FILE__, __LINE__, "case %zu: im2col_t differs at (%zu, %zu)", t, k, r);
				if (r < rows && a != slow[r * K + k])
					dt_test_fail(__FILE__, __LINE__, "case %zu: im2col_t is not im2col transposed", t);
			}
		free(x);
		free(fast);
		free(slow);
		free(tf);
		free(ts);
	}
}

DT_TEST(tensor, col2im_matches_naive_and_is_the_adjoint_of_im2col)
{
	for (size_t t = 0; t < DT_ARRAY_LEN(conv_cases); t++) {
		const struct conv_case *c = &conv_cases[t];
		struct dt_conv_geom g;
		DT_CHECK_INT_EQ(dt_conv_geom_init(&g, c->H, c->W, c->C, c->KH, c->KW, c->stride, c->pad), 0);
		const size_t rows = (size_t)c->n * (size_t)g.OH * (size_t)g.OW, K = (size_t)dt_conv_k(&g);
		const size_t xn = (size_t)c->n * (size_t)c->H * (size_t)c->W * (size_t)c->C;
		float *cols = random_floats(rows * K, 20 + t);
		float *fast = random_floats(xn, 1), *slow = random_floats(xn, 2);
		dt_col2im(&g, cols, c->n, fast);
		dt_col2im_naive(&g, cols, c->n, slow);
		DT_CHECK(max_abs_diff(fast, slow, xn) <= 1e-5);
		/* <im2col(x), cols> == <x, col2im(cols)> */
		float *x = random_floats(xn, 30 + t), *xc = dt_xmalloc(rows * K * sizeof(float) + 1);
		dt_im2col(&g, x, c->n, xc);
		double lhs = 0, rhs = 0;
		for (size_t i = 0; i < rows * K; i++)
			lhs += (double)xc[i] * (double)cols[i];
		for (size_t i = 0; i < xn; i++)
			rhs += (double)x[i] * (double)fast[i];
		DT_CHECK_NEAR(lhs, rhs, 1e-4 * (1 + fabs(lhs)));
		free(cols);
		free(fast);
		free(slow);
		free(x);
		free(xc);
	}
}

/* ---- pooling ---------------------------------------------------------------- */

DT_TEST(tensor, maxpool_matches_naive_on_odd_sizes_and_channel_counts)
{
	static const int shapes[][4] = { /* B, H, W, C */
		{ 2, 28, 28, 6 }, { 3, 7, 5, 3 }, { 1, 9, 9, 16 }, { 2, 2, 3, 1 }, { 2, 5, 4, 9 }, { 1, 3, 3, 32 },
	};
	for (size_t t = 0; t < DT_ARRAY_LEN(shapes); t++) {
		const int B = shapes[t][0], H = shapes[t][1], W = shapes[t][2], C = shapes[t][3];
		const size_t xn = (size_t)B * (size_t)H * (size_t)W * (size_t)C;
		const size_t yn = (size_t)B * (size_t)(H / 2) * (size_t)(W / 2) * (size_t)C;
		float *x = random_floats(xn, 40 + t);
		/* Some exact ties (ReLU zeros): the first of equal values wins. */
		for (size_t i = 0; i < xn; i += 3)
			x[i] = x[i] < 0 ? 0.0f : x[i];
		float *y1 = random_floats(yn, 1), *y2 = random_floats(yn, 2);
		int32_t *a1 = dt_xmalloc(yn * sizeof(int32_t)), *a2 = dt_xmalloc(yn * sizeof(int32_t));
		dt_maxpool2_forward(x, y1, a1, B, H, W, C);
		dt_maxpool2_forward_naive(x, y2, a2, B, H, W, C);
		for (size_t i = 0; i < yn; i++) {
			DT_CHECK(y1[i] == y2[i]);
			DT_CHECK_INT_EQ(a1[i], a2[i]);
		}
		float *dy = random_floats(yn, 50 + t);
		float *dx1 = random_floats(xn, 3), *dx2 = random_floats(xn, 4);
		dt_maxpool2_backward(dy, a1, dx1, B, H, W, C);
		dt_maxpool2_backward_naive(dy, a2, dx2, B, H, W, C);
		for (size_t i = 0; i < xn; i++)
			if (dx1[i] != dx2[i])
				dt_test_fail(__FILE__, __LINE__, "shape %zu: pool backward differs at %zu: %g vs %g", t, i,
					     (double)dx1[i], (double)dx2[i]);
		free(x);
		free(y1);
		free(y2);
		free(a1);
		free(a2);
		free(dy);
		free(dx1);
		free(dx2);
	}
}

DT_TEST(tensor, maxpool_picks_the_window_maximum)
{
	/* One 4x4 image, one channel: windows {1,5,2,6}, {3,7,4,8}, ... */
	const float x[16] = { 1, 2, 3, 4, 5, 6, 8, 7, 9, 0, 0, 0, 0, 0, 0, -1 };
	float y[4];
	int32_t a[4];
	dt_maxpool2_forward(x, y, a, 1, 4, 4, 1);
	DT_CHECK_NEAR(y[0], 6, 0);
	DT_CHECK_INT_EQ(a[0], 3);
	DT_CHECK_NEAR(y[1], 8, 0);
	DT_CHECK_INT_EQ(a[1], 2);
	DT_CHECK_NEAR(y[2], 9, 0);
	DT_CHECK_INT_EQ(a[2], 0);
	DT_CHECK_NEAR(y[3], 0, 0);
	DT_CHECK_INT_EQ(a[3], 0); /* tie between three zeros: the first */
}

/* ---- bias, ReLU, dropout ---------------------------------------------------- */

DT_TEST(tensor, bias_act_forward_and_backward_match_row_loops)
{
	/* N values with and without a tile period, R with leftover rows. */
	static const int dims[][2] = { { 37, 6 }, { 5, 16 }, { 9, 10 }, { 3, 84 }, { 2, 1000 }, { 1, 7 }, { 50, 3 } };
	for (size_t t = 0; t < DT_ARRAY_LEN(dims); t++) {
		const int R = dims[t][0], N = dims[t][1];
		const size_t n = (size_t)R * (size_t)N;
		for (int relu = 0; relu < 2; relu++) {
			float *y = random_floats(n, 60 + t), *bias = random_floats((size_t)N, 70 + t);
			float *ref = dt_xmalloc(n * sizeof(float));
			for (int r = 0; r < R; r++)
				for (int c = 0; c < N; c++) {
					float v = y[(size_t)r * (size_t)N + (size_t)c] + bias[c];
					ref[(size_t)r * (size_t)N + (size_t)c] = relu && v < 0 ? 0.0f : v;
				}
			dt_bias_act_forward(y, bias, R, N, relu);
			for (size_t i = 0; i < n; i++)
				DT_CHECK(y[i] == ref[i]);

			float *dy = random_floats(n, 80 + t), *dref = dt_xmalloc(n * sizeof(float));
			double *dbias_ref = dt_xcalloc((size_t)N, sizeof(double));
			for (size_t i = 0; i < n; i++) {
				dref[i] = relu && !(y[i] > 0) ? 0.0f : dy[i];
				dbias_ref[i % (size_t)N] += (double)dref[i];
			}
			float *dbias = dt_xmalloc((size_t)N * sizeof(float));
			for (int c = 0; c < N; c++)
				dbias[c] = 1.0f; /* accumulates onto what is there */
			dt_bias_act_backward(dy, y, dbias, R, N, relu);
			for (size_t i = 0; i < n; i++)
				DT_CHECK(dy[i] == dref[i]);
			for (int c = 0; c < N; c++)
				DT_CHECK_NEAR(dbias[c], dbias_ref[c] + 1.0, 1e-5 * R);
			free(y);
			free(bias);
			free(ref);
			free(dy);
			free(dref);
			free(dbias_ref);
			free(dbias);
		}
	}
}

DT_TEST(tensor, relu_forward_backward)
{
	const float x[5] = { -2, -0.0f, 0, 0.5f, 3 };
	float y[5], dx[5];
	const float dy[5] = { 1, 2, 3, 4, 5 };
	dt_relu_forward(x, y, 5);
	DT_CHECK(y[0] == 0 && y[1] == 0 && y[2] == 0 && y[3] == 0.5f && y[4] == 3);
	dt_relu_backward(y, dy, dx, 5);
	DT_CHECK(dx[0] == 0 && dx[1] == 0 && dx[2] == 0 && dx[3] == 4 && dx[4] == 5);
}

DT_TEST(tensor, dropout_is_inverted_seeded_and_masks_the_gradient)
{
	const size_t n = 20000;
	float *x = dt_xmalloc(n * sizeof(float)), *y = dt_xmalloc(n * sizeof(float));
	float *mask = dt_xmalloc(n * sizeof(float)), *mask2 = dt_xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		x[i] = 1.0f;
	struct dt_rng rng;
	dt_rng_seed(&rng, 5);
	dt_dropout_forward(x, y, mask, n, 0.25f, &rng);
	size_t kept = 0;
	double sum = 0;
	for (size_t i = 0; i < n; i++) {
		DT_CHECK(mask[i] == 0.0f || mask[i] == 1.0f / 0.75f);
		DT_CHECK(y[i] == x[i] * mask[i]);
		kept += mask[i] != 0.0f;
		sum += (double)y[i];
	}
	/* 15000 expected; 5 standard deviations is about 300. */
	DT_CHECK(kept > 14700 && kept < 15300);
	DT_CHECK_NEAR(sum / (double)n, 1.0, 0.03); /* inverted: the mean is kept */
	dt_rng_seed(&rng, 5);
	dt_dropout_forward(x, y, mask2, n, 0.25f, &rng);
	DT_CHECK(memcmp(mask, mask2, n * sizeof(float)) == 0);
	dt_dropout_backward(mask, x, y, n);
	for (size_t i = 0; i < n; i++)
		DT_CHECK(y[i] == mask[i]);
	free(x);
	free(y);
	free(mask);
	free(mask2);
}

/* ---- softmax cross-entropy --------------------------------------------------- */

DT_TEST(tensor, softmax_xent_matches_naive_and_known_values)
{
	const int B = 7, N = 10;
	float *z = random_floats((size_t)B * N, 90);
	z[3] = 80.0f; /* large logits must not overflow */
	z[N + 1] = -90.0f;
	uint8_t labels[7] = { 3, 0, 9, 5, 5, 1, 2 };
	float d1[70], d2[70];
	int c1 = -1, c2 = -2, c3 = -3;
	float l1 = dt_softmax_xent(z, labels, B, N, d1, &c1);
	float l2 = dt_softmax_xent_naive(z, labels, B, N, d2, &c2);
	float l3 = dt_softmax_xent(z, labels, B, N, NULL, &c3);
	DT_CHECK(isfinite(l1));
	DT_CHECK_NEAR(l1, l2, 1e-5);
	DT_CHECK(l1 == l3);
	DT_CHECK_INT_EQ(c1, c2);
	DT_CHECK_INT_EQ(c1, c3);
	DT_CHECK(max_abs_diff(d1, d2, 70) <= 1e-6);
	/* Each gradient row sums to zero. */
	for (int b = 0; b < B; b++) {
		double s = 0;
		for (int n = 0; n < N; n++)
			s += (double)d1[b * N + n];
		DT_CHECK_NEAR(s, 0, 1e-6);
	}
	/* Equal logits: loss log(N), gradient (1/N - onehot)/B. */
	float flat[2 * 4] = { 0 };
	uint8_t lab[2] = { 1, 3 };
	float d[8];
	int correct = -1;
	float loss = dt_softmax_xent(flat, lab, 2, 4, d, &correct);
	DT_CHECK_NEAR(loss, log(4.0), 1e-6);
	DT_CHECK_NEAR(d[0], 0.125, 1e-7);
	DT_CHECK_NEAR(d[1], (0.25 - 1) / 2, 1e-7);
	DT_CHECK_INT_EQ(correct, 0); /* ties go to class 0 */
	free(z);
}

DT_TEST(tensor, denormals_flush_inside_and_restore_after)
{
#if defined(__SSE__)
	volatile float tiny = 1e-30f, scale = 1e-10f;
	float before = tiny * scale; /* 1e-40 is a denormal */
	DT_CHECK(before != 0.0f && fpclassify(before) == FP_SUBNORMAL);
	struct dt_fp_mode mode = dt_fp_flush_denormals();
	float inside = tiny * scale;
	DT_CHECK(inside == 0.0f);
	dt_fp_restore(mode);
	float after = tiny * scale;
	DT_CHECK(after == before);
#else
	DT_SKIP("denormal flushing is x86 (SSE) only");
#endif
}
