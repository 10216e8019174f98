/*
 * Kernels for the graph builder's layers (nn/graph.h): activations, layer
 * normalization, embedding lookups, general pooling and the float-target
 * losses. Written plainly: none of them is on the built-in models' hot
 * path, which keeps its tuned kernels (kernels.c, kernels_conv.c); layer
 * normalization, on the transformer's, sums in eight lanes.
 * Layer normalization's naive twin (in double) is in kernels_naive.c; the
 * general pooling is checked against the tuned 2x2 pooling in the tests.
 */
#include "tensor/kernels.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

/* GELU, tanh approximation: 0.5 x (1 + tanh(k (x + 0.044715 x^3))). */
#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

static float sigmoidf(float x)
{
	return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}

void dt_act_forward(enum dt_act act, const float *x, float *y, int R, int N)
{
	const size_t n = (size_t)R * (size_t)N;
	switch (act) {
	case DT_ACT_LINEAR:
		if (y != x)
			memmove(y, x, n * sizeof(float));
		break;
	case DT_ACT_RELU:
		dt_relu_forward(x, y, n);
		break;
	case DT_ACT_SIGMOID:
		for (size_t i = 0; i < n; i++)
			y[i] = sigmoidf(x[i]);
		break;
	case DT_ACT_TANH:
		for (size_t i = 0; i < n; i++)
			y[i] = tanhf(x[i]);
		break;
	case DT_ACT_GELU:
		for (size_t i = 0; i < n; i++) {
			float v = x[i];
			y[i] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_C * v * v * v)));
		}
		break;
	case DT_ACT_RELU6:
		for (size_t i = 0; i < n; i++) {
			const float v = x[i] > 0.0f ? x[i] : 0.0f;
			y[i] = v < 6.0f ? v : 6.0f;
		}
		break;
	case DT_ACT_SWISH:
		for (size_t i = 0; i < n; i++)
			y[i] = x[i] * sigmoidf(x[i]);
		break;
	case DT_ACT_SOFTMAX:
		for (int r = 0; r < R; r++) {
			const float *xr = x + (size_t)r * (size_t)N;
			float *yr = y + (size_t)r * (size_t)N;
			float mx = xr[0];
			for (int j = 1; j < N; j++)
				mx = xr[j] > mx ? xr[j] : mx;
			float sum = 0.0f;
			for (int j = 0; j < N; j++) {
				yr[j] = expf(xr[j] - mx);
				sum += yr[j];
			}
			const float inv = 1.0f / sum;
			for (int j = 0; j < N; j++)
				yr[j] *= inv;
		}
		break;
	}
}

void dt_act_backward(enum dt_act act, const float *x, const float *y, const float *dy, float *dx, int R, int N)
{
	const size_t n = (size_t)R * (size_t)N;
	switch (act) {
	case DT_ACT_LINEAR:
		if (dx != dy)
			memmove(dx, dy, n * sizeof(float));
		break;
	case DT_ACT_RELU:
		dt_relu_backward(y, dy, dx, n);
		break;
	case DT_ACT_SIGMOID:
		for (size_t i = 0; i < n; i++)
			dx[i] = dy[i] * y[i] * (1.0f - y[i]);
		break;
	case DT_ACT_TANH:
		for (size_t i = 0; i < n; i++)
			dx[i] = dy[i] * (1.0f - y[i] * y[i]);
		break;
	case DT_ACT_GELU:
		DT_ASSERT(x != NULL);
		for (size_t i = 0; i < n; i++) {
			float v = x[i], t = tanhf(GELU_K * (v + GELU_C * v * v * v));
			float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
			dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
		}
		break;
	case DT_ACT_RELU6:
		for (size_t i = 0; i < n; i++)
			dx[i] = y[i] > 0.0f && y[i] < 6.0f ? dy[i] : 0.0f;
		break;
	case DT_ACT_SWISH:
		DT_ASSERT(x != NULL);
		for (size_t i = 0; i < n; i++) {
			const float s = sigmoidf(x[i]);
			dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
		}
		break;
	case DT_ACT_SOFTMAX:
		for (int r = 0; r < R; r++) {
			const float *yr = y + (size_t)r * (size_t)N, *dyr = dy + (size_t)r * (size_t)N;
			float *dxr = dx + (size_t)r * (size_t)N;
			float dot = 0.0f;
			for (int j = 0; j < N; j++)
				dot += dyr[j] * yr[j];
			for (int j = 0; j < N; j++)
				dxr[j] = yr[j] * (dyr[j] - dot);
		}
		break;
	}
}

/* Eight lanes through GCC's vector extension (one AVX register, two SSE
 * ones): the sums over a row are reductions, which -O2 leaves scalar
 * because it may not reorder float additions; eight partial sums may be.
 * Loads and stores through an under-aligned, aliasing vector type, and
 * macros rather than functions: a 32-byte vector argument has another ABI
 * where AVX is off (the sanitizers' builds), which GCC warns about. */
typedef float dt__v8 __attribute__((vector_size(32)));
typedef float dt__v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define LD8(p) (*(const dt__v8u *)(const void *)(p))
#define ST8(p, v) (*(dt__v8u *)(void *)(p) = (v))
#define HSUM8(v) ((((v)[0] + (v)[4]) + ((v)[1] + (v)[5])) + (((v)[2] + (v)[6]) + ((v)[3] + (v)[7])))

void dt_layernorm_forward(const float *x, const float *gamma, const float *beta, float *y, float *mean,
			  float *rstd, int R, int D, float eps)
{
	const int D8 = D & ~7;
	for (int r = 0; r < R; r++) {
		const float *xr = x + (size_t)r * (size_t)D;
		float *yr = y + (size_t)r * (size_t)D;
		dt__v8 acc = { 0 };
		for (int j = 0; j < D8; j += 8)
			acc += LD8(xr + j);
		float m = HSUM8(acc);
		for (int j = D8; j < D; j++)
			m += xr[j];
		m /= (float)D;
		dt__v8 vacc = { 0 };
		for (int j = 0; j < D8; j += 8) {
			const dt__v8 c = LD8(xr + j) - m;
			vacc += c * c;
		}
		float v = HSUM8(vacc);
		for (int j = D8; j < D; j++)
			v += (xr[j] - m) * (xr[j] - m);
		v /= (float)D;
		const float s = 1.0f / sqrtf(v + eps);
		for (int j = 0; j < D8; j += 8)
			ST8(yr + j, (LD8(xr + j) - m) * s * LD8(gamma + j) + LD8(beta + j));
		for (int j = D8; j < D; j++)
			yr[j] = (xr[j] - m) * s * gamma[j] + beta[j];
		mean[r] = m;
		rstd[r] = s;
	}
}

void dt_layernorm_backward(const float *dy, const float *x, const float *mean, const float *rstd,
			   const float *gamma, float *dx, float *dgamma, float *dbeta, int R, int D)
{
	const int D8 = D & ~7;
	for (int r = 0; r < R; r++) {
		const float *dyr = dy + (size_t)r * (size_t)D, *xr = x + (size_t)r * (size_t)D;
		const float m = mean[r], s = rstd[r];
		/* dxhat = dy * gamma; dx = s (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) */
		dt__v8 va = { 0 }, vb = { 0 };
		for (int j = 0; j < D8; j += 8) {
			const dt__v8 d = LD8(dyr + j), xhat = (LD8(xr + j) - m) * s, g = d * LD8(gamma + j);
			va += g;
			vb += g * xhat;
			ST8(dgamma + j, LD8(dgamma + j) + d * xhat);
			ST8(dbeta + j, LD8(dbeta + j) + d);
		}
		float a = HSUM8(va), b = HSUM8(vb);
		for (int j = D8; j < D; j++) {
			const float xhat = (xr[j] - m) * s, g = dyr[j] * gamma[j];
			a += g;
			b += g * xhat;
			dgamma[j] += dyr[j] * xhat;
			dbeta[j] += dyr[j];
		}
		if (!dx)
			continue;
		a /= (float)D;
		b /= (float)D;
		float *dxr = dx + (size_t)r * (size_t)D;
		for (int j = 0; j < D8; j += 8) {
			const dt__v8 xhat = (LD8(xr + j) - m) * s;
			ST8(dxr + j, s * (LD8(dyr + j) * LD8(gamma + j) - a - xhat * b));
		}
		for (int j = D8; j < D; j++) {
			const float xhat = (xr[j] - m) * s;
			dxr[j] = s * (dyr[j] * gamma[j] - a - xhat * b);
		}
	}
}

void dt_embedding_forward(const int32_t *ids, const float *table, float *y, size_t n, int D)
{
	for (size_t i = 0; i < n; i++)
		memcpy(y + i * (size_t)D, table + (size_t)ids[i] * (size_t)D, (size_t)D * sizeof(float));
}

void dt_embedding_backward(const int32_t *ids, const float *dy, float *dtable, size_t n, int D)
{
	for (size_t i = 0; i < n; i++) {
		float *row = dtable + (size_t)ids[i] * (size_t)D;
		const float *d = dy + i * (size_t)D;
		for (int j = 0; j < D; j++)
			row[j] += d[j];
	}
}

int dt_pool_geom_init(struct dt_pool_geom *g, int H, int W, int C, int PH, int PW, int SH, int SW, int same)
{
	memset(g, 0, sizeof(*g));
	if (H < 1 || W < 1 || C < 1 || PH < 1 || PW < 1 || SH < 1 || SW < 1)
		return -1;
	*g = (struct dt_pool_geom){ .H = H, .W = W, .C = C, .PH = PH, .PW = PW, .SH = SH, .SW = SW };
	if (same) {
		g->OH = (H + SH - 1) / SH;
		g->OW = (W + SW - 1) / SW;
		int th = (g->OH - 1) * SH + PH - H, tw = (g->OW - 1) * SW + PW - W;
		g->top = th > 0 ? th / 2 : 0;
		g->left = tw > 0 ? tw / 2 : 0;
		/* a window wholly in the padding would have nothing to pool */
		if (PH <= g->top || PW <= g->left)
			return -1;
	} else {
		if (PH > H || PW > W)
			return -1;
		g->OH = (H - PH) / SH + 1;
		g->OW = (W - PW) / SW + 1;
	}
	return 0;
}

void dt_pool_forward(const struct dt_pool_geom *g, int is_max, const float *x, float *y, int32_t *argmax, int B)
{
	const int C = g->C;
	for (int b = 0; b < B; b++) {
		const float *xb = x + (size_t)b * (size_t)g->H * (size_t)g->W * (size_t)C;
		for (int oh = 0; oh < g->OH; oh++) {
			const int h0 = oh * g->SH - g->top, h1 = h0 + g->PH;
			const int ha = h0 < 0 ? 0 : h0, hb = h1 > g->H ? g->H : h1;
			for (int ow = 0; ow < g->OW; ow++) {
				const int w0 = ow * g->SW - g->left, w1 = w0 + g->PW;
				const int wa = w0 < 0 ? 0 : w0, wb = w1 > g->W ? g->W : w1;
				const size_t o = (((size_t)b * (size_t)g->OH + (size_t)oh) * (size_t)g->OW + (size_t)ow) * (size_t)C;
				for (int c = 0; c < C; c++) {
					float best = -INFINITY, sum = 0.0f;
					int32_t at = ha * g->W + wa;
					for (int ih = ha; ih < hb; ih++)
						for (int iw = wa; iw < wb; iw++) {
							const float v = xb[((size_t)ih * (size_t)g->W + (size_t)iw) * (size_t)C + (size_t)c];
							sum += v;
							if (v > best) {
								best = v;
								at = ih * g->W + iw;
							}
						}
					if (is_max) {
						y[o + (size_t)c] = best;
						argmax[o + (size_t)c] = at;
					} else {
						y[o + (size_t)c] = sum / (float)((hb - ha) * (wb - wa));
					}
				}
			}
		}
	}
}

void dt_pool_backward(const struct dt_pool_geom *g, int is_max, const float *dy, const int32_t *argmax, float *dx,
		      int B)
{
	const int C = g->C;
	const size_t image = (size_t)g->H * (size_t)g->W * (size_t)C;
	memset(dx, 0, (size_t)B * image * sizeof(float));
	for (int b = 0; b < B; b++) {
		float *xb = dx + (size_t)b * image;
		for (int oh = 0; oh < g->OH; oh++) {
			const int h0 = oh * g->SH - g->top, h1 = h0 + g->PH;
			const int ha = h0 < 0 ? 0 : h0, hb = h1 > g->H ? g->H : h1;
			for (int ow = 0; ow < g->OW; ow++) {
				const int w0 = ow * g->SW - g->left, w1 = w0 + g->PW;
				const int wa = w0 < 0 ? 0 : w0, wb = w1 > g->W ? g->W : w1;
				const size_t o = (((size_t)b * (size_t)g->OH + (size_t)oh) * (size_t)g->OW + (size_t)ow) * (size_t)C;
				for (int c = 0; c < C; c++) {
					const float d = dy[o + (size_t)c];
					if (is_max) {
						xb[(size_t)argmax[o + (size_t)c] * (size_t)C + (size_t)c] += d;
						continue;
					}
					const float share = d / (float)((hb - ha) * (wb - wa));
					for (int ih = ha; ih < hb; ih++)
						for (int iw = wa; iw < wb; iw++)
							xb[((size_t)ih * (size_t)g->W + (size_t)iw) * (size_t)C + (size_t)c] += share;
				}
			}
		}
	}
}

float dt_sigmoid_xent(const float *logits, const float *targets, size_t n, float *dlogits, int *correct)
{
	double loss = 0;
	int hits = 0;
	const float inv = n ? 1.0f / (float)n : 0.0f;
	for (size_t i = 0; i < n; i++) {
		const float z = logits[i], t = targets[i];
		loss += (double)((z > 0.0f ? z : 0.0f) - z * t + log1pf(expf(-fabsf(z))));
		hits += (z > 0.0f) == (t > 0.5f);
		if (dlogits)
			dlogits[i] = (sigmoidf(z) - t) * inv;
	}
	if (correct)
		*correct = hits;
	return n ? (float)(loss / (double)n) : 0.0f;
}

float dt_mse(const float *pred, const float *targets, size_t n, float *dpred)
{
	double loss = 0;
	const float scale = n ? 2.0f / (float)n : 0.0f;
	for (size_t i = 0; i < n; i++) {
		const float e = pred[i] - targets[i];
		loss += (double)e * (double)e;
		if (dpred)
			dpred[i] = scale * e;
	}
	return n ? (float)(loss / (double)n) : 0.0f;
}
