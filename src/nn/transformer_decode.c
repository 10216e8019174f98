/*
 * t2t's fast_decode over a trained transformer (nn/transformer_decode.h):
 * the variables found by name, the encoder run once, and one decoder
 * position per step with cached self-attention keys and values.
 */
#include "nn/transformer_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "nn/layers.h"
#include "nn/seq.h"
#include "tensor/kernels.h"

#define NORM_EPS 1e-6f /* nn/transformer.c's */
#define MAX_LAYERS 24

struct norm_w {
	const float *gamma, *beta;
};
struct attn_w {
	struct norm_w norm;
	const float *w; /* (4, D, D): q, k, v, output_transform, contiguous as the graph lays them out */
};
struct ffn_w {
	struct norm_w norm;
	const float *k1, *b1, *k2, *b2; /* (D, F), (F), (F, D), (D) */
};
struct enc_layer {
	struct attn_w self;
	struct ffn_w ffn;
};
struct dec_layer {
	struct attn_w self, encdec;
	struct ffn_w ffn;
	float *kc, *vc;     /* self-attention cache (beams, positions, D) */
	float *kc2, *vc2;   /* reorder's destination, swapped with kc, vc */
	float *mk, *mv;     /* encoder-decoder keys and values (positions, D) */
};

struct dt_transformer_decoder {
	struct dt_model *m;
	int D, F, H, V, Vin, P, beams, n_enc, n_dec, has_inputs;
	int n_mem;          /* the inputs of the current decode */
	int len;            /* positions decoded since start */
	int K;              /* beams of the last step */
	const float *enc_table, *dec_table, *softmax_table;
	struct norm_w enc_norm, dec_norm;
	struct enc_layer enc[MAX_LAYERS];
	struct dec_layer dec[MAX_LAYERS];
	/* per-row work, (max(beams, positions), D or F) */
	float *x, *n, *q, *ctx, *y, *h, *mean, *rstd;
	float *s;           /* scores: (beams, positions) */
	float *logits;      /* (beams, V) */
	float *att, *scratch; /* the encoder's dt_attention_forward buffers */
};

/* ---- the variables by name --------------------------------------------------- */

static const struct dt_variable *var_named(const struct dt_model *m, const char *name)
{
	for (int i = 0; i < dt_model_num_variables(m); i++)
		if (strcmp(dt_model_variable(m, i)->name, name) == 0)
			return dt_model_variable(m, i);
	return NULL;
}

/* The parameters of variable "<node>/<what>", which must hold `count`
 * floats; NULL (and err set) otherwise. */
static const float *param(struct dt_model *m, const char *node, const char *what, size_t count, struct dt_err *err)
{
	char name[DT_VAR_NAME_MAX];
	snprintf(name, sizeof(name), "%s/%s", node, what);
	const struct dt_variable *v = var_named(m, name);
	if (!v || v->count != count) {
		if (v)
			dt_err_set(err, DT_CONFIG, "variable '%s' has %zu values, and a transformer of this width needs %zu", name,
				   v->count, count);
		else
			dt_err_set(err, DT_CONFIG, "the model has no variable '%s': not t2t's transformer (nn/transformer.h)",
				   name);
		return NULL;
	}
	return dt_model_params(m) + v->offset;
}

static const struct dt_layer *layer_named(const struct dt_model *m, const char *name)
{
	for (int i = 0; i < dt_model_num_layers(m); i++)
		if (strcmp(dt_model_layer(m, i)->name, name) == 0)
			return dt_model_layer(m, i);
	return NULL;
}

static int get_norm(struct dt_transformer_decoder *d, const char *node, struct norm_w *w, struct dt_err *err)
{
	w->gamma = param(d->m, node, "gamma", (size_t)d->D, err);
	w->beta = w->gamma ? param(d->m, node, "beta", (size_t)d->D, err) : NULL;
	return w->beta != NULL;
}

/* prefix "dec0.self": its norm and its attention's four kernels, which the
 * graph keeps one after another (the kernels of nn/seq.h read them so). */
static int get_attn(struct dt_transformer_decoder *d, const char *prefix, struct attn_w *w, struct dt_err *err)
{
	char node[32];
	snprintf(node, sizeof(node), "%s.norm", prefix);
	if (!get_norm(d, node, &w->norm, err))
		return 0;
	snprintf(node, sizeof(node), "%s.attn", prefix);
	static const char *const names[4] = { "q/kernel", "k/kernel", "v/kernel", "output_transform/kernel" };
	const size_t DD = (size_t)d->D * (size_t)d->D;
	for (int i = 0; i < 4; i++) {
		const float *p = param(d->m, node, names[i], DD, err);
		if (!p)
			return 0;
		if (i == 0)
			w->w = p;
		else if (p != w->w + (size_t)i * DD) {
			dt_err_set(err, DT_CONFIG, "the kernels of '%s' are not one after another as the graph lays them out", node);
			return 0;
		}
	}
	const struct dt_layer *l = layer_named(d->m, node);
	if (!l || l->kind != DT_LAYER_ATTENTION || (d->H && l->heads != d->H)) {
		dt_err_set(err, DT_CONFIG, "layer '%s' is not an attention layer with the decoder's heads", node);
		return 0;
	}
	d->H = l->heads;
	return 1;
}

static int get_ffn(struct dt_transformer_decoder *d, const char *prefix, struct ffn_w *w, struct dt_err *err)
{
	char node[32];
	snprintf(node, sizeof(node), "%s.norm", prefix);
	if (!get_norm(d, node, &w->norm, err))
		return 0;
	const size_t D = (size_t)d->D, F = (size_t)d->F;
	snprintf(node, sizeof(node), "%s.conv1", prefix);
	if (!(w->k1 = param(d->m, node, "kernel", D * F, err)) || !(w->b1 = param(d->m, node, "bias", F, err)))
		return 0;
	snprintf(node, sizeof(node), "%s.conv2", prefix);
	return (w->k2 = param(d->m, node, "kernel", F * D, err)) && (w->b2 = param(d->m, node, "bias", D, err));
}

/* Sizes from the variables' shapes: D from the final norm, F from the
 * first filter, V from the softmax's table, the layers by counting. */
static enum dt_status read_model(struct dt_transformer_decoder *d, struct dt_err *err)
{
	struct dt_model *m = d->m;
	const struct dt_variable *v = var_named(m, "dec.norm/gamma"), *f = var_named(m, "dec0.ffn.conv1/bias");
	if (!v && f && var_named(m, "dec0.ffn.norm/gamma")) {
		enum dt_status st = dt_err_set(err, DT_CONFIG, "a post-norm transformer (layer_postprocess_sequence=dan, "
								 "transformer_base_v1's layout) has no fast decoder");
		dt_err_hint(err, "decode through the whole graph: --decode_hparams=cache=0");
		return st;
	}
	if (!v || !f)
		return dt_err_set(err, DT_CONFIG, "the model has no '%s': not t2t's transformer (nn/transformer.h)",
				  v ? "dec0.ffn.conv1/bias" : "dec.norm/gamma");
	d->D = (int)v->count;
	d->F = (int)f->count;
	d->has_inputs = var_named(m, "enc.norm/gamma") != NULL;
	const struct dt_variable *et = var_named(m, "enc.emb/weights"), *dt = var_named(m, "dec.emb/weights");
	const struct dt_variable *st = var_named(m, "softmax/weights");
	/* the graph's shares: the decoder's table is its own or the encoder's;
	 * the softmax's its own or the decoder's */
	if (!dt)
		dt = d->has_inputs ? et : NULL;
	if (!dt || (d->has_inputs && !et))
		return dt_err_set(err, DT_CONFIG, "the model has no symbol table for the %s: not t2t's transformer",
				  dt ? "inputs" : "targets");
	if (!st)
		st = dt;
	if (dt->ndim != 2 || dt->shape[1] != d->D || st->ndim != 2 || st->shape[1] != d->D ||
	    (et && (et->ndim != 2 || et->shape[1] != d->D)))
		return dt_err_set(err, DT_CONFIG, "the symbol tables are not (vocab, %d) as the model's width", d->D);
	const float *params = dt_model_params(m);
	d->V = (int)st->shape[0];
	d->Vin = et ? (int)et->shape[0] : 0;
	d->enc_table = et ? params + et->offset : NULL;
	d->dec_table = params + dt->offset;
	d->softmax_table = params + st->offset;
	if ((int)dt->shape[0] != d->V)
		return dt_err_set(err, DT_CONFIG, "the targets' table has %d symbols and the softmax %d", (int)dt->shape[0],
				  d->V);
	char p[32];
	for (d->n_enc = 0; d->has_inputs && d->n_enc <= MAX_LAYERS; d->n_enc++) {
		snprintf(p, sizeof(p), "enc%d.self.norm/gamma", d->n_enc);
		if (!var_named(m, p))
			break;
	}
	for (d->n_dec = 0; d->n_dec <= MAX_LAYERS; d->n_dec++) {
		snprintf(p, sizeof(p), "dec%d.self.norm/gamma", d->n_dec);
		if (!var_named(m, p))
			break;
	}
	if (d->n_enc > MAX_LAYERS || d->n_dec > MAX_LAYERS || d->n_dec < 1)
		return dt_err_set(err, DT_CONFIG, "%d encoder and %d decoder layers: a transformer has 1 to %d decoder "
				  "layers and at most %d encoder layers", d->n_enc, d->n_dec, MAX_LAYERS, MAX_LAYERS);
	for (int l = 0; l < d->n_enc; l++) {
		snprintf(p, sizeof(p), "enc%d.self", l);
		if (!get_attn(d, p, &d->enc[l].self, err))
			return DT_CONFIG;
		snprintf(p, sizeof(p), "enc%d.ffn", l);
		if (!get_ffn(d, p, &d->enc[l].ffn, err))
			return DT_CONFIG;
	}
	for (int l = 0; l < d->n_dec; l++) {
		snprintf(p, sizeof(p), "dec%d.self", l);
		if (!get_attn(d, p, &d->dec[l].self, err))
			return DT_CONFIG;
		snprintf(p, sizeof(p), "dec%d.encdec", l);
		if (d->has_inputs && !get_attn(d, p, &d->dec[l].encdec, err))
			return DT_CONFIG;
		snprintf(p, sizeof(p), "dec%d.ffn", l);
		if (!get_ffn(d, p, &d->dec[l].ffn, err))
			return DT_CONFIG;
	}
	if ((d->has_inputs && !get_norm(d, "enc.norm", &d->enc_norm, err)) || !get_norm(d, "dec.norm", &d->dec_norm, err))
		return DT_CONFIG;
	return DT_OK;
}

enum dt_status dt_transformer_decoder_new(struct dt_model *m, int beams, int positions,
					  struct dt_transformer_decoder **out, struct dt_err *err)
{
	*out = NULL;
	if (beams < 1 || beams > 1024 || positions < 1 || positions > 65536)
		return dt_err_set(err, DT_USAGE, "a decoder of %d beams of %d positions: 1 to 1024 beams, 1 to 65536 positions",
				  beams, positions);
	struct dt_transformer_decoder *d = dt_xcalloc(1, sizeof(*d));
	d->m = m;
	d->beams = beams;
	d->P = positions;
	enum dt_status st = read_model(d, err);
	if (st) {
		free(d);
		return dt_err_prefix(err, "fast decoding");
	}
	const size_t D = (size_t)d->D, P = (size_t)positions, R = (size_t)(beams > positions ? beams : positions);
	const size_t cache = (size_t)beams * P * D;
	for (int l = 0; l < d->n_dec; l++) {
		struct dec_layer *L = &d->dec[l];
		L->kc = dt_xmallocarray(cache, sizeof(float));
		L->vc = dt_xmallocarray(cache, sizeof(float));
		L->kc2 = dt_xmallocarray(cache, sizeof(float));
		L->vc2 = dt_xmallocarray(cache, sizeof(float));
		if (d->has_inputs) {
			L->mk = dt_xmallocarray(P * D, sizeof(float));
			L->mv = dt_xmallocarray(P * D, sizeof(float));
		}
	}
	d->x = dt_xmallocarray(R * D, sizeof(float));
	d->n = dt_xmallocarray(R * D, sizeof(float));
	d->q = dt_xmallocarray(R * D, sizeof(float));
	d->ctx = dt_xmallocarray(R * D, sizeof(float));
	d->y = dt_xmallocarray(R * D, sizeof(float));
	d->h = dt_xmallocarray(R * (size_t)d->F, sizeof(float));
	d->mean = dt_xmallocarray(R, sizeof(float));
	d->rstd = dt_xmallocarray(R, sizeof(float));
	d->s = dt_xmallocarray((size_t)beams * P, sizeof(float));
	d->logits = dt_xmallocarray((size_t)beams * (size_t)d->V, sizeof(float));
	if (d->has_inputs) {
		const struct dt_attn_dims ad = { 1, positions, d->D, d->H, 0 };
		d->att = dt_xmallocarray(4 * P * D + (size_t)d->H * P * P, sizeof(float));
		d->scratch = dt_xmallocarray(dt_attention_scratch_floats(&ad) + P, sizeof(float));
	}
	*out = d;
	return DT_OK;
}

void dt_transformer_decoder_free(struct dt_transformer_decoder *d)
{
	if (!d)
		return;
	for (int l = 0; l < d->n_dec; l++) {
		struct dec_layer *L = &d->dec[l];
		free(L->kc), free(L->vc), free(L->kc2), free(L->vc2), free(L->mk), free(L->mv);
	}
	free(d->x), free(d->n), free(d->q), free(d->ctx), free(d->y), free(d->h), free(d->mean), free(d->rstd);
	free(d->s), free(d->logits), free(d->att), free(d->scratch);
	free(d);
}

int dt_transformer_decoder_vocab(const struct dt_transformer_decoder *d) { return d->V; }

/* ---- the computation ---------------------------------------------------------- */

static void add_into(float *x, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] += y[i];
}

/* x (R, D) += ffn(norm(x)), as the graph's ffn and residual (dropout off). */
static void ffn(struct dt_transformer_decoder *d, const struct ffn_w *w, float *x, int R)
{
	const int D = d->D, F = d->F;
	dt_layernorm_forward(x, w->norm.gamma, w->norm.beta, d->n, d->mean, d->rstd, R, D, NORM_EPS);
	dt_matmul(0, 0, R, F, D, 1.0f, d->n, D, w->k1, F, 0.0f, d->h, F);
	dt_bias_act_forward(d->h, w->b1, R, F, 1);
	dt_matmul(0, 0, R, D, F, 1.0f, d->h, F, w->k2, D, 0.0f, d->y, D);
	dt_bias_act_forward(d->y, w->b2, R, D, 0);
	add_into(x, d->y, (size_t)R * (size_t)D);
}

enum dt_status dt_transformer_decoder_start(struct dt_transformer_decoder *d, const int32_t *in, int n_in,
					    struct dt_err *err)
{
	d->len = 0;
	d->K = 1;
	if (!d->has_inputs) {
		if (n_in != 0)
			return dt_err_set(err, DT_USAGE, "this model has no inputs, and %d input tokens were given", n_in);
		return DT_OK;
	}
	if (n_in < 1 || n_in > d->P)
		return dt_err_set(err, DT_USAGE, "the input has %d tokens: 1 to the decoder's %d positions", n_in, d->P);
	for (int i = 0; i < n_in; i++)
		if (in[i] < 1 || in[i] >= d->Vin)
			return dt_err_set(err, DT_USAGE, "input position %d: token id %d out of range [1, %d)", i, (int)in[i],
					  d->Vin);
	const int D = d->D;
	const size_t RD = (size_t)n_in * (size_t)D, PD = (size_t)d->P * (size_t)D;
	float *x = d->x;
	dt_symbol_forward(d->enc_table, in, (size_t)n_in, D, sqrtf((float)D), x);
	dt_timing_signal_add(x, x, 1, n_in, D);
	const struct dt_attn_dims ad = { 1, n_in, D, d->H, 0 };
	struct dt_attn_buf buf = { d->att, d->att + PD, d->att + 2 * PD, d->att + 3 * PD, d->att + 4 * PD, NULL };
	for (int l = 0; l < d->n_enc; l++) {
		const struct enc_layer *L = &d->enc[l];
		dt_layernorm_forward(x, L->self.norm.gamma, L->self.norm.beta, d->n, d->mean, d->rstd, n_in, D, NORM_EPS);
		dt_attention_forward(&ad, d->n, d->n, in, L->self.w, d->y, &buf, 0.0f, NULL, d->scratch);
		add_into(x, d->y, RD);
		ffn(d, &L->ffn, x, n_in);
	}
	/* memory = norm(x), projected once into every layer's keys and values */
	dt_layernorm_forward(x, d->enc_norm.gamma, d->enc_norm.beta, d->n, d->mean, d->rstd, n_in, D, NORM_EPS);
	const size_t DD = (size_t)D * (size_t)D;
	for (int l = 0; l < d->n_dec; l++) {
		const struct dec_layer *L = &d->dec[l];
		dt_matmul(0, 0, n_in, D, D, 1.0f, d->n, D, L->encdec.w + DD, D, 0.0f, L->mk, D);
		dt_matmul(0, 0, n_in, D, D, 1.0f, d->n, D, L->encdec.w + 2 * DD, D, 0.0f, L->mv, D);
	}
	d->n_mem = n_in;
	return DT_OK;
}

void dt_transformer_decoder_reorder(struct dt_transformer_decoder *d, const int *parent, int K)
{
	DT_ASSERT(K >= 1 && K <= d->beams);
	int identity = 1;
	for (int k = 0; k < K; k++) {
		DT_ASSERT(parent[k] >= 0 && parent[k] < d->K);
		identity &= parent[k] == k;
	}
	d->K = K;
	if (identity || d->len == 0)
		return;
	const size_t row = (size_t)d->P * (size_t)d->D, used = (size_t)d->len * (size_t)d->D * sizeof(float);
	for (int l = 0; l < d->n_dec; l++) {
		struct dec_layer *L = &d->dec[l];
		for (int k = 0; k < K; k++) {
			memcpy(L->kc2 + (size_t)k * row, L->kc + (size_t)parent[k] * row, used);
			memcpy(L->vc2 + (size_t)k * row, L->vc + (size_t)parent[k] * row, used);
		}
		float *t = L->kc;
		L->kc = L->kc2, L->kc2 = t;
		t = L->vc;
		L->vc = L->vc2, L->vc2 = t;
	}
}

/* x (K, D) += self_attention(norm(x)) over each beam's positions 0 .. t,
 * the new keys and values appended to the cache first. */
static void self_attention(struct dt_transformer_decoder *d, struct dec_layer *L, float *x, int K, int t)
{
	const int D = d->D, H = d->H, dk = D / H, n = t + 1;
	const size_t DD = (size_t)D * (size_t)D, row = (size_t)d->P * (size_t)D;
	const float *w = L->self.w;
	dt_layernorm_forward(x, L->self.norm.gamma, L->self.norm.beta, d->n, d->mean, d->rstd, K, D, NORM_EPS);
	dt_matmul(0, 0, K, D, D, 1.0f / sqrtf((float)dk), d->n, D, w, D, 0.0f, d->q, D);
	/* the new position's keys and values land in row t of each beam's cache */
	dt_matmul(0, 0, K, D, D, 1.0f, d->n, D, w + DD, D, 0.0f, L->kc + (size_t)t * D, (int)row);
	dt_matmul(0, 0, K, D, D, 1.0f, d->n, D, w + 2 * DD, D, 0.0f, L->vc + (size_t)t * D, (int)row);
	for (int k = 0; k < K; k++)
		for (int h = 0; h < H; h++) {
			const size_t at = (size_t)k * (size_t)D + (size_t)h * (size_t)dk;
			const size_t c = (size_t)k * row + (size_t)h * (size_t)dk;
			/* causal: position t sees every cached key, so no mask */
			dt_matmul(0, 1, 1, n, dk, 1.0f, d->q + at, D, L->kc + c, D, 0.0f, d->s, n);
			dt_softmax_rows(d->s, 1, n);
			dt_matmul(0, 0, 1, dk, n, 1.0f, d->s, n, L->vc + c, D, 0.0f, d->ctx + at, D);
		}
	dt_matmul(0, 0, K, D, D, 1.0f, d->ctx, D, w + 3 * DD, D, 0.0f, d->y, D);
	add_into(x, d->y, (size_t)K * (size_t)D);
}

/* x (K, D) += attention(norm(x), memory): every beam reads the same
 * memory, so each head is two GEMMs over all K beams. */
static void encdec_attention(struct dt_transformer_decoder *d, const struct dec_layer *L, float *x, int K)
{
	const int D = d->D, H = d->H, dk = D / H, M = d->n_mem;
	const size_t DD = (size_t)D * (size_t)D;
	const float *w = L->encdec.w;
	dt_layernorm_forward(x, L->encdec.norm.gamma, L->encdec.norm.beta, d->n, d->mean, d->rstd, K, D, NORM_EPS);
	dt_matmul(0, 0, K, D, D, 1.0f / sqrtf((float)dk), d->n, D, w, D, 0.0f, d->q, D);
	for (int h = 0; h < H; h++) {
		const size_t at = (size_t)h * (size_t)dk;
		dt_matmul(0, 1, K, M, dk, 1.0f, d->q + at, D, L->mk + at, D, 0.0f, d->s, M);
		dt_softmax_rows(d->s, K, M);
		dt_matmul(0, 0, K, dk, M, 1.0f, d->s, M, L->mv + at, D, 0.0f, d->ctx + at, D);
	}
	dt_matmul(0, 0, K, D, D, 1.0f, d->ctx, D, w + 3 * DD, D, 0.0f, d->y, D);
	add_into(x, d->y, (size_t)K * (size_t)D);
}

enum dt_status dt_transformer_decoder_step(struct dt_transformer_decoder *d, const int32_t *ids, int K,
					   const float **logits, struct dt_err *err)
{
	*logits = NULL;
	const int t = d->len, D = d->D;
	if (K < 1 || K > d->beams || (t > 0 && K != d->K))
		return dt_err_set(err, DT_USAGE, "a step of %d beams: 1 to %d, and the last step's or reorder's %d", K,
				  d->beams, d->K);
	if (t >= d->P)
		return dt_err_set(err, DT_USAGE, "position %d is past the decoder's %d positions", t, d->P);
	for (int k = 0; k < K; k++)
		if (ids[k] < 0 || ids[k] >= d->V)
			return dt_err_set(err, DT_USAGE, "beam %d: token id %d out of range [0, %d)", k, (int)ids[k], d->V);
	float *x = d->x;
	dt_symbol_forward(d->dec_table, ids, (size_t)K, D, sqrtf((float)D), x);
	for (int c = 0; c < D; c++) {
		const float sig = dt_timing_signal_value(t, c, D);
		for (int k = 0; k < K; k++)
			x[(size_t)k * (size_t)D + (size_t)c] += sig;
	}
	for (int l = 0; l < d->n_dec; l++) {
		struct dec_layer *L = &d->dec[l];
		self_attention(d, L, x, K, t);
		if (d->has_inputs)
			encdec_attention(d, L, x, K);
		ffn(d, &L->ffn, x, K);
	}
	dt_layernorm_forward(x, d->dec_norm.gamma, d->dec_norm.beta, d->n, d->mean, d->rstd, K, D, NORM_EPS);
	dt_symbol_logits_forward(d->n, d->softmax_table, (size_t)K, D, d->V, d->logits);
	d->len = t + 1;
	d->K = K;
	*logits = d->logits;
	return DT_OK;
}
