/*
 * The sequence kernels (nn/seq.h) against their naive twins and finite
 * differences: attention with padding and causal masks and dropout, the
 * timing signal's values, the symbol modality's embedding and logits, and
 * the padded, label-smoothed cross-entropy with t2t's metrics.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "grad_check.h"
#include "base/alloc.h"
#include "base/rng.h"
#include "nn/seq.h"

static double max_rel(const float *a, const float *b, size_t n)
{
	double worst = 0, scale = 1e-6;
	for (size_t i = 0; i < n; i++)
		scale = fmax(scale, fabs((double)b[i]));
	for (size_t i = 0; i < n; i++)
		worst = fmax(worst, fabs((double)a[i] - (double)b[i]) / scale);
	return worst;
}

struct attn_rig {
	struct dt_attn_dims d;
	float rate;
	int32_t *ids;
	float *xq, *xkv, *w, *y, *r, *scratch;
	struct dt_attn_buf buf;
	int self;   /* xq is xkv */
};

static void alloc_buf(struct dt_attn_buf *b, const struct dt_attn_dims *d)
{
	const size_t RD = (size_t)d->B * (size_t)d->L * (size_t)d->D;
	const size_t P = (size_t)d->B * (size_t)d->H * (size_t)d->L * (size_t)d->L;
	b->q = dt_xcalloc(RD, sizeof(float));
	b->k = dt_xcalloc(RD, sizeof(float));
	b->v = dt_xcalloc(RD, sizeof(float));
	b->ctx = dt_xcalloc(RD, sizeof(float));
	b->p = dt_xcalloc(P, sizeof(float));
	b->keep = dt_xcalloc(P, 1);
}

static void free_buf(struct dt_attn_buf *b)
{
	free(b->q);
	free(b->k);
	free(b->v);
	free(b->ctx);
	free(b->p);
	free(b->keep);
}

static void rig_setup(struct attn_rig *g, int B, int L, int D, int H, int causal, int pad, int self, float rate)
{
	memset(g, 0, sizeof(*g));
	g->d = (struct dt_attn_dims){ B, L, D, H, causal };
	g->rate = rate;
	g->self = self;
	const size_t RD = (size_t)B * (size_t)L * (size_t)D;
	g->xq = random_floats(RD, 11, 1.0f);
	g->xkv = self ? g->xq : random_floats(RD, 12, 1.0f);
	g->w = random_floats(4 * (size_t)D * (size_t)D, 13, 0.4f);
	g->r = random_floats(RD, 14, 1.0f);
	g->y = dt_xcalloc(RD, sizeof(float));
	g->scratch = dt_xcalloc(dt_attention_scratch_floats(&g->d), sizeof(float));
	g->ids = dt_xcalloc((size_t)B * (size_t)L, sizeof(int32_t));
	for (int b = 0; b < B; b++)
		for (int t = 0; t < L; t++) /* sequence b has L - b tokens, then padding */
			g->ids[b * L + t] = pad && t >= L - b ? 0 : 1 + (b + t) % 5;
	alloc_buf(&g->buf, &g->d);
	if (rate > 0) { /* one fixed mask, read by both forwards */
		struct dt_rng rng;
		dt_rng_seed(&rng, 5);
		const size_t P = (size_t)B * (size_t)H * (size_t)L * (size_t)L;
		for (size_t i = 0; i < P; i++)
			g->buf.keep[i] = dt_rng_uniform(&rng) >= rate;
	}
}

static void rig_free(struct attn_rig *g)
{
	if (!g->self)
		free(g->xkv);
	free(g->xq);
	free(g->w);
	free(g->r);
	free(g->y);
	free(g->scratch);
	free(g->ids);
	free_buf(&g->buf);
}

/* L = sum(y * r), through the naive forward (which reads the fixed mask). */
static double attn_loss(void *ctx)
{
	struct attn_rig *g = ctx;
	dt_attention_forward_naive(&g->d, g->xq, g->xkv, g->ids, g->w, g->y, &g->buf, g->rate);
	double s = 0;
	const size_t RD = (size_t)g->d.B * (size_t)g->d.L * (size_t)g->d.D;
	for (size_t i = 0; i < RD; i++)
		s += (double)g->y[i] * (double)g->r[i];
	return s;
}

static void check_attention_at(int L, int causal, int pad, int self, float rate)
{
	struct attn_rig g;
	rig_setup(&g, 3, L, 8, 2, causal, pad, self, rate);
	const struct dt_attn_dims *d = &g.d;
	const size_t RD = (size_t)d->B * (size_t)d->L * (size_t)d->D, DD4 = 4 * (size_t)d->D * (size_t)d->D;
	/* fast against naive, forward: the fast one draws its own mask only when
	 * rate > 0, so the comparison runs with the fixed one through rate 0 ... */
	float *y_fast = dt_xcalloc(RD, sizeof(float));
	struct dt_attn_buf fast;
	alloc_buf(&fast, d);
	if (rate == 0.0f) {
		dt_attention_forward(d, g.xq, g.xkv, g.ids, g.w, y_fast, &fast, 0.0f, NULL, g.scratch);
		attn_loss(&g);
		DT_CHECK(max_rel(y_fast, g.y, RD) < 1e-4);
		DT_CHECK(max_rel(fast.p, g.buf.p, (size_t)d->B * d->H * d->L * d->L) < 1e-4);
	} else { /* ... and with rate > 0 the naive one replays the fast one's mask */
		struct dt_rng rng;
		dt_rng_seed(&rng, 9);
		dt_attention_forward(d, g.xq, g.xkv, g.ids, g.w, y_fast, &fast, rate, &rng, g.scratch);
		memcpy(g.buf.keep, fast.keep, (size_t)d->B * d->H * d->L * d->L);
		attn_loss(&g);
		DT_CHECK(max_rel(y_fast, g.y, RD) < 1e-4);
	}
	/* backward: fast against naive */
	float *dxq = dt_xcalloc(RD, sizeof(float)), *dxkv = dt_xcalloc(RD, sizeof(float));
	float *dxq_n = dt_xcalloc(RD, sizeof(float)), *dxkv_n = dt_xcalloc(RD, sizeof(float));
	float *dw = dt_xcalloc(DD4, sizeof(float)), *dw_n = dt_xcalloc(DD4, sizeof(float));
	dt_attention_backward(d, g.xq, g.xkv, g.w, &g.buf, rate, g.r, dxq, dxkv, dw, g.scratch);
	dt_attention_backward_naive(d, g.xq, g.xkv, g.w, &g.buf, rate, g.r, dxq_n, dxkv_n, dw_n);
	DT_CHECK(max_rel(dxq, dxq_n, RD) < 1e-4);
	DT_CHECK(max_rel(dxkv, dxkv_n, RD) < 1e-4);
	DT_CHECK(max_rel(dw, dw_n, DD4) < 1e-4);
	/* finite differences of the naive forward */
	check_array("dw", g.w, DD4, dw, attn_loss, &g, 2e-2, 1e-3, 0);
	if (self) { /* one input read twice: its gradient is the sum */
		for (size_t i = 0; i < RD; i++)
			dxq[i] += dxkv[i];
		check_array("dx", g.xq, RD, dxq, attn_loss, &g, 2e-2, 1e-3, 0);
	} else {
		check_array("dxq", g.xq, RD, dxq, attn_loss, &g, 2e-2, 1e-3, 0);
		check_array("dxkv", g.xkv, RD, dxkv, attn_loss, &g, 2e-2, 1e-3, 0);
	}
	if (pad) { /* a padded key gets no weight, and so no gradient through k or v */
		for (int h = 0; h < d->H; h++)
			for (int i = 0; i < d->L; i++)
				DT_CHECK(g.buf.p[((size_t)(2 * d->H + h) * d->L + (size_t)i) * d->L + (size_t)(d->L - 1)] < 1e-6f);
	}
	if (causal) {
		for (int i = 0; i < d->L; i++)
			for (int j = i + 1; j < d->L; j++)
				DT_CHECK(g.buf.p[(size_t)i * d->L + (size_t)j] < 1e-6f);
	}
	free(dxq);
	free(dxkv);
	free(dxq_n);
	free(dxkv_n);
	free(dw);
	free(dw_n);
	free(y_fast);
	free_buf(&fast);
	rig_free(&g);
}

static void check_attention(int causal, int pad, int self, float rate)
{
	check_attention_at(5, causal, pad, self, rate);
}

DT_TEST(nn_seq, attention_self_with_padding_matches_naive_and_differences)
{
	check_attention(0, 1, 1, 0.0f);
}

DT_TEST(nn_seq, attention_causal_matches_naive_and_differences)
{
	check_attention(1, 0, 1, 0.0f);
}

DT_TEST(nn_seq, attention_encoder_decoder_with_padding_and_dropout)
{
	check_attention(0, 1, 0, 0.25f);
}

/* Rows of 13 keys: the softmax's eight-lane loops and their tails, a
 * causal row ending inside and past a lane, padding and the causal mask on
 * the same keys, dropout. */
DT_TEST(nn_seq, attention_longer_rows_causal_padded_with_dropout_match_naive)
{
	check_attention_at(13, 1, 1, 1, 0.0f);
	check_attention_at(13, 1, 1, 1, 0.25f);
}

DT_TEST(nn_seq, timing_signal_is_t2ts)
{
	/* D = 8: 4 timescales 1, 1e4^(-1/3), 1e4^(-2/3), 1e-4; sin then cos */
	DT_CHECK_NEAR(dt_timing_signal_value(0, 0, 8), 0.0, 1e-7);
	DT_CHECK_NEAR(dt_timing_signal_value(0, 4, 8), 1.0, 1e-7);
	DT_CHECK_NEAR(dt_timing_signal_value(3, 0, 8), sin(3.0), 1e-6);
	DT_CHECK_NEAR(dt_timing_signal_value(3, 5, 8), cos(3.0 * pow(1e4, -1.0 / 3.0)), 1e-6);
	DT_CHECK_NEAR(dt_timing_signal_value(7, 3, 8), sin(7.0 * 1e-4), 1e-6);
	DT_CHECK_NEAR(dt_timing_signal_value(7, 8, 9), 0.0, 0); /* an odd channel count pads with 0 */
	float x[2 * 3 * 4], y[2 * 3 * 4];
	for (int i = 0; i < 24; i++)
		x[i] = (float)i;
	dt_timing_signal_add(x, y, 2, 3, 4);
	for (int b = 0; b < 2; b++)
		for (int t = 0; t < 3; t++)
			for (int c = 0; c < 4; c++) {
				const int i = (b * 3 + t) * 4 + c;
				DT_CHECK_NEAR(y[i], x[i] + dt_timing_signal_value(t, c, 4), 1e-6);
			}
}

struct sym_ctx {
	const int32_t *ids;
	float *table, *x, *r;
	size_t R;
	int D, V;
};

static double logits_loss(void *ctx)
{
	struct sym_ctx *c = ctx;
	float *z = dt_xcalloc(c->R * (size_t)c->V, sizeof(float));
	dt_symbol_logits_forward(c->x, c->table, c->R, c->D, c->V, z);
	double s = 0;
	for (size_t i = 0; i < c->R * (size_t)c->V; i++)
		s += (double)z[i] * (double)c->r[i];
	free(z);
	return s;
}

static double embed_loss(void *ctx)
{
	struct sym_ctx *c = ctx;
	float *y = dt_xcalloc(c->R * (size_t)c->D, sizeof(float));
	dt_symbol_forward(c->table, c->ids, c->R, c->D, sqrtf((float)c->D), y);
	double s = 0;
	for (size_t i = 0; i < c->R * (size_t)c->D; i++)
		s += (double)y[i] * (double)c->r[i];
	free(y);
	return s;
}

DT_TEST(nn_seq, symbol_modality_embedding_and_shared_logits)
{
	const int32_t ids[6] = { 3, 1, 0, 4, 3, 0 };
	struct sym_ctx c = { ids, random_floats(5 * 4, 1, 0.5f), random_floats(6 * 4, 2, 1.0f), NULL, 6, 4, 5 };
	c.r = random_floats(6 * 5, 3, 1.0f);
	float *dt = dt_xcalloc(20, sizeof(float)), *dx = dt_xcalloc(24, sizeof(float));
	dt_symbol_logits_backward(c.x, c.table, c.r, 6, 4, 5, dx, dt);
	check_array("dtable (logits)", c.table, 20, dt, logits_loss, &c, 1e-2, 1e-4, 0);
	check_array("dx (logits)", c.x, 24, dx, logits_loss, &c, 1e-2, 1e-4, 0);
	/* the embedding: padding rows are zero and take no gradient */
	float y[24];
	dt_symbol_forward(c.table, ids, 6, 4, 2.0f, y);
	for (int k = 0; k < 4; k++) {
		DT_CHECK(y[2 * 4 + k] == 0.0f);
		DT_CHECK_NEAR(y[k], 2.0f * c.table[3 * 4 + k], 1e-6);
	}
	free(c.r);
	c.r = random_floats(6 * 4, 4, 1.0f);
	memset(dt, 0, 20 * sizeof(float));
	dt_symbol_backward(ids, 6, 4, 2.0f, c.r, dt);
	for (int k = 0; k < 4; k++)
		DT_CHECK(dt[k] == 0.0f); /* row 0, the padding */
	check_array("dtable (embedding)", c.table, 20, dt, embed_loss, &c, 1e-2, 1e-4, 0);
	int32_t sh[6];
	dt_shift_right_ids(ids, sh, 2, 3);
	const int32_t want[6] = { 0, 3, 1, 0, 4, 3 };
	for (int i = 0; i < 6; i++)
		DT_CHECK_INT_EQ(sh[i], want[i]);
	free(c.table);
	free(c.x);
	free(c.r);
	free(dt);
	free(dx);
}

struct xent_ctx {
	float *z;
	const int32_t *labels;
	int B, L, V;
	float ls;
};

static double xent_loss(void *ctx)
{
	struct xent_ctx *c = ctx;
	struct dt_seq_metrics m;
	return dt_padded_xent_naive(c->z, c->labels, c->B, c->L, c->V, c->ls, NULL, &m);
}

DT_TEST(nn_seq, padded_smoothed_xent_matches_naive_skips_padding_and_counts_t2ts_metrics)
{
	const int B = 3, L = 4, V = 6;
	const int32_t labels[12] = { 2, 3, 1, 0, /**/ 5, 1, 0, 0, /**/ 4, 4, 4, 1 };
	float *z = random_floats(B * L * V, 7, 2.0f);
	/* sequence 1 predicted right everywhere it is not padding */
	for (int t = 0; t < 2; t++)
		z[(1 * L + t) * V + labels[1 * L + t]] = 20.0f;
	z[(1 * L + 2) * V + 3] = 50.0f; /* a wrong prediction on padding does not count */
	for (int k = 0; k < 2; k++) {
		const float ls = k ? 0.1f : 0.0f;
		float *d = dt_xcalloc(B * L * V, sizeof(float)), *dn = dt_xcalloc(B * L * V, sizeof(float));
		struct dt_seq_metrics m, mn;
		const float loss = dt_padded_xent(z, labels, B, L, V, ls, d, &m);
		const float loss_n = dt_padded_xent_naive(z, labels, B, L, V, ls, dn, &mn);
		DT_CHECK_NEAR(loss, loss_n, 1e-5);
		DT_CHECK(max_rel(d, dn, (size_t)B * L * V) < 1e-5);
		DT_CHECK_INT_EQ(m.tokens, 9);
		DT_CHECK_INT_EQ(mn.tokens, 9);
		DT_CHECK_INT_EQ(m.tokens_correct, mn.tokens_correct);
		DT_CHECK_INT_EQ(m.seqs, 3);
		DT_CHECK(m.seqs_correct >= 1);
		DT_CHECK_INT_EQ(m.seqs_correct, mn.seqs_correct);
		DT_CHECK_NEAR(m.nll_num, mn.nll_num, 1e-4);
		for (int j = 0; j < V; j++) /* no gradient on padding */
			DT_CHECK(d[(0 * L + 3) * V + j] == 0.0f);
		struct xent_ctx c = { z, labels, B, L, V, ls };
		check_array("dlogits", z, (size_t)B * L * V, d, xent_loss, &c, 1e-2, 2e-4, 0);
		free(d);
		free(dn);
	}
	/* a perfect, confident fit scores near 0 with smoothing (t2t subtracts the floor) */
	float *zz = dt_xcalloc(L * V, sizeof(float));
	const int32_t one[4] = { 1, 2, 3, 0 };
	const double conf = 0.9, low = 0.1 / 5;
	for (int t = 0; t < 3; t++)
		for (int j = 0; j < V; j++)
			zz[t * V + j] = (float)log(j == one[t] ? conf : low);
	struct dt_seq_metrics m;
	DT_CHECK_NEAR(dt_padded_xent(zz, one, 1, L, V, 0.1f, NULL, &m), 0.0, 1e-5);
	free(zz);
	free(z);
}
