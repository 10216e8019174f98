/* The update loops run over every parameter each step; gcc 12 at -O2 leaves
 * loops with a runtime trip count scalar (see tensor/kernels.c), so these
 * get the full vectorizer cost model. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif
#include "nn/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "tensor/tensor.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

/* X(name, kind, slots) — the optimizers, in the order hparams lists them. */
#define DT_OPTIMIZER_LIST(X)               \
	X(sgd, DT_OPTIM_SGD, 0)            \
	X(momentum, DT_OPTIM_MOMENTUM, 1)  \
	X(adam, DT_OPTIM_ADAM, 2)          \
	X(adagrad, DT_OPTIM_ADAGRAD, 1)

static const char *const optimizer_names[] = {
#define NAME(name, kind, slots) #name,
	DT_OPTIMIZER_LIST(NAME)
#undef NAME
};

static const struct {
	enum dt_optimizer_kind kind;
	int slots;
} optimizer_info[] = {
#define INFO(name, kind, slots) { kind, slots },
	DT_OPTIMIZER_LIST(INFO)
#undef INFO
};

const char *const *dt_optimizer_names(size_t *count)
{
	if (count)
		*count = DT_ARRAY_LEN(optimizer_names);
	return optimizer_names;
}

/*
 * Learning-rate schedules. Two are dtrain's own, on `learning_rate`:
 * "constant" and "linear_warmup_decay". Any other schedule is t2t's
 * (tensor2tensor/utils/learning_rate.py): a product of the factors below,
 * written "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size", each
 * computed from the hparams and the step. The one-word schedule "constant"
 * stays dtrain's (`learning_rate`); as a factor, "constant" is t2t's
 * `learning_rate_constant`. The factor "legacy" is t2t's
 * legacy_learning_rate_schedule with learning_rate_decay_scheme "noam" (the
 * one transformer_base_v1 uses, and the only one built): 5000 *
 * rsqrt(hidden_size) * min((s + 1) * warmup^-1.5, (s + 1)^-0.5) *
 * learning_rate, times 0.002 when the optimizer is Adam (t2t's
 * optimizer_correction).
 */
enum lr_factor {
	LR_CONSTANT,
	LR_LINEAR_WARMUP,
	LR_LINEAR_DECAY,
	LR_COSDECAY,
	LR_SINGLE_CYCLE_COS_DECAY,
	LR_RSQRT_DECAY,
	LR_RSQRT_NORMALIZED_DECAY,
	LR_EXP_DECAY,
	LR_RSQRT_HIDDEN_SIZE,
	LR_LEGACY,
};

static const char *const lr_factor_names[] = {
	[LR_CONSTANT] = "constant",
	[LR_LINEAR_WARMUP] = "linear_warmup",
	[LR_LINEAR_DECAY] = "linear_decay",
	[LR_COSDECAY] = "cosdecay",
	[LR_SINGLE_CYCLE_COS_DECAY] = "single_cycle_cos_decay",
	[LR_RSQRT_DECAY] = "rsqrt_decay",
	[LR_RSQRT_NORMALIZED_DECAY] = "rsqrt_normalized_decay",
	[LR_EXP_DECAY] = "exp_decay",
	[LR_RSQRT_HIDDEN_SIZE] = "rsqrt_hidden_size",
	[LR_LEGACY] = "legacy",
};

/* The factor named by [name, name + len), or -1. */
static int lr_factor_of(const char *name, size_t len)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(lr_factor_names); i++)
		if (strlen(lr_factor_names[i]) == len && strncmp(lr_factor_names[i], name, len) == 0)
			return (int)i;
	return -1;
}

/* The schedule's factor at p: its name and length without the blanks around
 * it (length 0 for an empty one, as in "a**b"). Returns where the next
 * factor starts, or NULL when this one was the last. */
static const char *next_factor(const char *p, const char **name, size_t *len)
{
	while (*p == ' ')
		p++;
	const size_t span = strcspn(p, "*");
	size_t end = span;
	while (end > 0 && p[end - 1] == ' ')
		end--;
	*name = p;
	*len = end;
	return p[span] ? p + span + 1 : NULL;
}

static int is_dtrain_schedule(const char *schedule)
{
	return strcmp(schedule, "constant") == 0 || strcmp(schedule, "linear_warmup_decay") == 0;
}

enum dt_status dt_lr_schedule_check(const char *schedule, const char *what, struct dt_err *err)
{
	if (is_dtrain_schedule(schedule))
		return DT_OK;
	char valid[256];
	dt_join(valid, sizeof(valid), lr_factor_names, DT_ARRAY_LEN(lr_factor_names), ", ");
	int factors = 0;
	const char *p = schedule, *name;
	size_t end;
	do {
		p = next_factor(p, &name, &end);
		if (end > 0) {
			if (lr_factor_of(name, end) < 0) {
				char bad[DT_HP_NAME_MAX];
				snprintf(bad, sizeof(bad), "%.*s", (int)end, name);
				const char *near = dt_nearest(bad, lr_factor_names, DT_ARRAY_LEN(lr_factor_names));
				return dt_err_set(err, DT_USAGE,
						  "%s: unknown learning-rate factor '%s'%s%s%s in schedule '%s'; a schedule "
						  "is constant, linear_warmup_decay, or a product of t2t's factors "
						  "(e.g. constant*linear_warmup*rsqrt_decay): %s",
						  what, bad, near ? " (did you mean '" : "", near ? near : "",
						  near ? "'?)" : "", schedule, valid);
			}
			factors++;
		}
	} while (p);
	if (factors == 0)
		return dt_err_set(err, DT_USAGE,
				  "%s: empty schedule; use constant, linear_warmup_decay, or a product of t2t's factors: %s",
				  what, valid);
	return DT_OK;
}

enum dt_status dt_optimizer_init(struct dt_optimizer *opt, const struct dt_hparams *hp, size_t count,
				 struct dt_err *err)
{
	memset(opt, 0, sizeof(*opt));
	int which = -1;
	for (size_t i = 0; i < DT_ARRAY_LEN(optimizer_names); i++)
		if (strcmp(hp->optimizer, optimizer_names[i]) == 0)
			which = (int)i;
	if (which < 0) {
		char valid[128];
		dt_join(valid, sizeof(valid), optimizer_names, DT_ARRAY_LEN(optimizer_names), ", ");
		return dt_err_set(err, DT_USAGE, "unknown optimizer '%s'; valid: %s", hp->optimizer, valid);
	}
	opt->kind = optimizer_info[which].kind;
	opt->num_slots = optimizer_info[which].slots;
	opt->momentum = hp->momentum;
	opt->beta1 = hp->beta1;
	opt->beta2 = hp->beta2;
	opt->epsilon = hp->epsilon;
	opt->initial_accumulator_value = hp->initial_accumulator_value;
	opt->count = count;
	if (opt->num_slots > 0) {
		size_t n = (size_t)opt->num_slots * count;
		opt->slots = dt_xalloc_aligned(n ? n : 1, sizeof(float));
		if (opt->kind == DT_OPTIM_ADAGRAD) {
			const float init = (float)opt->initial_accumulator_value;
			for (size_t i = 0; i < count; i++)
				opt->slots[i] = init;
		}
	}
	return DT_OK;
}

void dt_optimizer_release(struct dt_optimizer *opt)
{
	if (!opt)
		return;
	free(opt->slots);
	opt->slots = NULL;
	opt->count = 0;
	opt->num_slots = 0;
}

/*
 * Every rule below is elementwise with no reduction, and the C11 build does
 * not contract a*b+c into FMAs, so an element's update is the same whether
 * it is applied alone, in a range, or with the whole buffer.
 *
 * Adam and Adagrad take a square root per element. gcc keeps sqrtf's errno
 * path (a branch and a call) unless the whole build has -fno-math-errno,
 * which a per-function pragma does not turn on, so those two loops would
 * stay scalar and cost more than the model's forward and backward pass
 * (2.4 ns per parameter measured, for a 0.7 ms MLP step). With AVX they run
 * 8 floats at a time below; the scalar tail does the same IEEE operations
 * in the same order (sqrt and division are exact, nothing is fused), so
 * every element gets the same bits either way. SGD and momentum have AVX
 * loops too: -O2's cheap vectorizer leaves their plain loops scalar (they
 * would need a remainder loop), which made momentum 6-10% of an MLP step.
 */
#if defined(__AVX__)
/* Adam over [0, n) rounded down to 8; returns how many were done. */
static size_t adam_avx(float *restrict p, const float *restrict g, float gs, float *restrict m, float *restrict v,
		       size_t n, float b1, float c1, float b2, float c2, float lr_t, float eps)
{
	const __m256 vb1 = _mm256_set1_ps(b1), vc1 = _mm256_set1_ps(c1), vb2 = _mm256_set1_ps(b2);
	const __m256 vc2 = _mm256_set1_ps(c2), vlr = _mm256_set1_ps(lr_t), veps = _mm256_set1_ps(eps);
	const __m256 vgs = _mm256_set1_ps(gs);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs);
		const __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(vc1, gi));
		const __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
						_mm256_mul_ps(vc2, _mm256_mul_ps(gi, gi)));
		const __m256 step = _mm256_div_ps(_mm256_mul_ps(vlr, mi), _mm256_add_ps(_mm256_sqrt_ps(vi), veps));
		_mm256_storeu_ps(m + i, mi);
		_mm256_storeu_ps(v + i, vi);
		_mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_loadu_ps(p + i), step));
	}
	return i;
}

static size_t adagrad_avx(float *restrict p, const float *restrict g, float gs, float *restrict acc, size_t n,
			  float lr, float eps)
{
	const __m256 vlr = _mm256_set1_ps(lr), veps = _mm256_set1_ps(eps), vgs = _mm256_set1_ps(gs);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs);
		const __m256 ai = _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_mul_ps(gi, gi));
		const __m256 step = _mm256_div_ps(_mm256_mul_ps(vlr, gi), _mm256_add_ps(_mm256_sqrt_ps(ai), veps));
		_mm256_storeu_ps(acc + i, ai);
		_mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_loadu_ps(p + i), step));
	}
	return i;
}

static size_t sgd_avx(float *restrict p, const float *restrict g, float gs, size_t n, float lr)
{
	const __m256 vlr = _mm256_set1_ps(lr), vgs = _mm256_set1_ps(gs);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs);
		_mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_loadu_ps(p + i), _mm256_mul_ps(vlr, gi)));
	}
	return i;
}

static size_t momentum_avx(float *restrict p, const float *restrict g, float gs, float *restrict a, size_t n,
			   float mu, float lr)
{
	const __m256 vmu = _mm256_set1_ps(mu), vlr = _mm256_set1_ps(lr), vgs = _mm256_set1_ps(gs);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs);
		const __m256 ai = _mm256_add_ps(_mm256_mul_ps(vmu, _mm256_loadu_ps(a + i)), gi);
		_mm256_storeu_ps(a + i, ai);
		_mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_loadu_ps(p + i), _mm256_mul_ps(vlr, ai)));
	}
	return i;
}
#endif

/* A step's constants of the rule (Adam's bias-corrected rate among them):
 * computed once per update, however many ranges it is applied in. */
struct rule {
	float lr, mu, b1, b2, c1, c2, eps;
};

static struct rule rule_of(const struct dt_optimizer *opt, float lr, int64_t step)
{
	struct rule r = { .lr = lr, .mu = (float)opt->momentum, .b1 = (float)opt->beta1, .b2 = (float)opt->beta2,
			  .c1 = (float)(1.0 - opt->beta1), .c2 = (float)(1.0 - opt->beta2),
			  .eps = (float)opt->epsilon };
	if (opt->kind == DT_OPTIM_ADAM) {
		DT_ASSERT(step >= 1);
		const double t = (double)step;
		r.lr = (float)((double)lr * sqrt(1.0 - pow(opt->beta2, t)) / (1.0 - pow(opt->beta1, t)));
	}
	return r;
}

/* The update rules on params[offset, offset + n), for the gradient
 * gs * grads[i] (grads indexed from the range's start). The caller has
 * flushed denormals (dt_fp_flush_denormals). */
static void run_rule(struct dt_optimizer *opt, const struct rule *r, float *params, const float *grads, float gs,
		     size_t offset, size_t n)
{
	float *restrict p = params + offset;
	const float *restrict g = grads;
	const float lr = r->lr;
	switch (opt->kind) {
	case DT_OPTIM_SGD: {
		size_t i = 0;
#if defined(__AVX__)
		i = sgd_avx(p, g, gs, n, lr);
#endif
		for (; i < n; i++)
			p[i] -= lr * (g[i] * gs);
		break;
	}
	case DT_OPTIM_MOMENTUM: {
		float *restrict a = opt->slots + offset;
		const float mu = r->mu;
		size_t i = 0;
#if defined(__AVX__)
		i = momentum_avx(p, g, gs, a, n, mu, lr);
#endif
		for (; i < n; i++) {
			a[i] = mu * a[i] + g[i] * gs;
			p[i] -= lr * a[i];
		}
		break;
	}
	case DT_OPTIM_ADAM: {
		float *restrict m = opt->slots + offset;
		float *restrict v = opt->slots + opt->count + offset;
		const float b1 = r->b1, b2 = r->b2, eps = r->eps, c1 = r->c1, c2 = r->c2, lr_t = lr;
		size_t i = 0;
#if defined(__AVX__)
		i = adam_avx(p, g, gs, m, v, n, b1, c1, b2, c2, lr_t, eps);
#endif
		for (; i < n; i++) {
			const float gi = g[i] * gs;
			m[i] = b1 * m[i] + c1 * gi;
			v[i] = b2 * v[i] + c2 * (gi * gi);
			p[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps);
		}
		break;
	}
	case DT_OPTIM_ADAGRAD: {
		float *restrict acc = opt->slots + offset;
		const float eps = r->eps;
		size_t i = 0;
#if defined(__AVX__)
		i = adagrad_avx(p, g, gs, acc, n, lr, eps);
#endif
		for (; i < n; i++) {
			const float gi = g[i] * gs;
			acc[i] += gi * gi;
			p[i] -= lr * gi / (sqrtf(acc[i]) + eps);
		}
		break;
	}
	}
}

static void apply_rule(struct dt_optimizer *opt, float *params, const float *grads, float gs, size_t offset, size_t n,
		       float lr, int64_t step)
{
	DT_ASSERT(offset <= opt->count && n <= opt->count - offset);
	const struct rule r = rule_of(opt, lr, step);
	struct dt_fp_mode fp = dt_fp_flush_denormals();
	run_rule(opt, &r, params, grads, gs, offset, n);
	dt_fp_restore(fp);
}

void dt_optimizer_apply(struct dt_optimizer *opt, float *params, const float *grads, size_t offset, size_t n,
			float lr, int64_t step)
{
	apply_rule(opt, params, grads, 1.0f, offset, n, lr, step); /* g * 1.0f is g, bit for bit */
}

void dt_optimizer_apply_mean(struct dt_optimizer *opt, float *params, const float *grad_sum, int summed, size_t offset,
			     size_t n, float lr, int64_t step)
{
	DT_ASSERT(summed >= 1);
	apply_rule(opt, params, grad_sum, 1.0f / (float)summed, offset, n, lr, step);
}

void dt_moving_average_apply(float *x, const float *value_sum, int summed, size_t n, float decay)
{
	DT_ASSERT(summed >= 1 && decay >= 0.0f && decay < 1.0f);
	const float scale = 1.0f / (float)summed, rate = 1.0f - decay;
	for (size_t i = 0; i < n; i++)
		x[i] -= (x[i] - value_sum[i] * scale) * rate;
}

void dt_optimizer_apply_vars(struct dt_optimizer *opt, const struct dt_variable *vars, int nvars, float *params,
			     const float *sum, int summed, float lr, int64_t step)
{
	for (int i = 0; i < nvars;) {
		const struct dt_variable *v = &vars[i];
		if (v->kind == DT_VAR_MOVING_AVERAGE)
			dt_moving_average_apply(params + v->offset, sum + v->offset, summed, v->count, v->decay);
		if (v->kind != DT_VAR_TRAINABLE) {
			i++;
			continue;
		}
		int j = i + 1; /* one call for each run of trainable variables: they are adjacent in the buffer */
		while (j < nvars && vars[j].kind == DT_VAR_TRAINABLE)
			j++;
		const size_t end = vars[j - 1].offset + vars[j - 1].count;
		dt_optimizer_apply_mean(opt, params, sum + v->offset, summed, v->offset, end - v->offset, lr, step);
		i = j;
	}
}

size_t dt_optimizer_apply_made(struct dt_optimizer *opt, float *params, size_t offset, size_t n, float lr,
			       int64_t step, dt_grad_make_fn make, void *arg)
{
	DT_ASSERT(offset <= opt->count && n <= opt->count - offset);
	const struct rule r = rule_of(opt, lr, step);
	/* 8 KB: with the ranges of the variables, the slots and the made-from
	 * buffers streaming past, it stays in a 32 KB L1 until the rule reads it */
	_Alignas(64) float chunk[DT_OPTIMIZER_CHUNK];
	for (size_t done = 0; done < n;) {
		const size_t len = n - done < DT_OPTIMIZER_CHUNK ? n - done : DT_OPTIMIZER_CHUNK;
		/* made in the caller's floating-point mode, as it would have been
		 * into a buffer of its own before dt_optimizer_apply: the rule's
		 * flush of denormals would change a sum of subnormals */
		if (make(arg, chunk, offset + done, len))
			return offset + done;
		struct dt_fp_mode fp = dt_fp_flush_denormals();
		run_rule(opt, &r, params, chunk, 1.0f, offset + done, len);
		dt_fp_restore(fp);
		done += len;
	}
	return offset + n;
}

/* dtrain's linear_warmup_decay on learning_rate. */
static double linear_warmup_decay(const struct dt_hparams *hp, int64_t step, int64_t total_steps)
{
	const double lr = hp->learning_rate;
	const int64_t warm = hp->warmup_steps > 0 ? hp->warmup_steps : 0;
	if (step < warm)
		return lr * (double)step / (double)warm;
	if (total_steps <= warm)
		return lr;
	double frac = (double)(step - warm) / (double)(total_steps - warm);
	if (frac > 1)
		frac = 1;
	return lr * (1.0 - frac * (1.0 - hp->lr_decay_end));
}

/* One of t2t's factors at step s (as t2t's step_num) of total_steps (t2t's
 * train_steps). A warm-up of 0 steps counts as 1 where t2t would divide by it
 * or take rsqrt(0) at step 0. */
static double lr_factor_at(enum lr_factor factor, const struct dt_hparams *hp, double s, double total_steps)
{
	const double warm = hp->warmup_steps > 0 ? (double)hp->warmup_steps : 1.0;
	const double decay = (double)hp->learning_rate_decay_steps;
	switch (factor) {
	case LR_CONSTANT:
		return hp->learning_rate_constant;
	case LR_LINEAR_WARMUP:
		return fmin(1.0, s / warm);
	case LR_LINEAR_DECAY:
		return fmin(1.0, fmax(0.0, (total_steps - s) / decay));
	case LR_COSDECAY: /* OpenAI GPT's: 1 through the warm-up, then cos from step 0's phase */
		return s <= warm ? 1.0 : 0.5 * (1.0 + cos(M_PI * s / decay));
	case LR_SINGLE_CYCLE_COS_DECAY:
		return cos((fmax(s, warm) - warm) * M_PI / decay) / 2.0 + 0.5;
	case LR_RSQRT_DECAY:
		return 1.0 / sqrt(fmax(s, warm));
	case LR_RSQRT_NORMALIZED_DECAY:
		return sqrt(warm) / sqrt(fmax(s, warm));
	case LR_EXP_DECAY: {
		double p = fmax(0.0, (s - warm) / decay);
		if (hp->learning_rate_decay_staircase)
			p = floor(p);
		return pow(hp->learning_rate_decay_rate, p);
	}
	case LR_RSQRT_HIDDEN_SIZE:
		return 1.0 / sqrt((double)(hp->hidden_size > 0 ? hp->hidden_size : 1));
	case LR_LEGACY: {
		const double noam = 5000.0 / sqrt((double)(hp->hidden_size > 0 ? hp->hidden_size : 1)) *
				    fmin((s + 1) * pow(warm, -1.5), 1.0 / sqrt(s + 1));
		return noam * (strstr(hp->optimizer, "adam") ? 0.002 : 1.0) * hp->learning_rate;
	}
	}
	return 1.0;
}

float dt_lr_at(const struct dt_hparams *hp, int64_t step, int64_t total_steps)
{
	if (step < 0)
		step = 0;
	if (strcmp(hp->lr_schedule, "constant") == 0)
		return (float)hp->learning_rate;
	if (strcmp(hp->lr_schedule, "linear_warmup_decay") == 0)
		return (float)linear_warmup_decay(hp, step, total_steps);
	/* t2t's product of factors; dt_hparams_validate has checked the names */
	double lr = 1.0;
	const char *p = hp->lr_schedule, *name;
	size_t len;
	do {
		p = next_factor(p, &name, &len);
		const int factor = len > 0 ? lr_factor_of(name, len) : -1;
		if (factor >= 0)
			lr *= lr_factor_at((enum lr_factor)factor, hp, (double)step, (double)total_steps);
	} while (p);
	return (float)lr;
}

double dt_clip_by_global_norm(float *grads, size_t n, int summed, double clip)
{
	/* four partial sums: independent chains the compiler keeps in registers,
	 * in a fixed order (the result depends on the buffer alone) */
	double acc[4] = { 0, 0, 0, 0 };
	size_t i = 0;
	for (; i + 4 <= n; i += 4)
		for (int k = 0; k < 4; k++)
			acc[k] += (double)grads[i + (size_t)k] * (double)grads[i + (size_t)k];
	for (; i < n; i++)
		acc[0] += (double)grads[i] * (double)grads[i];
	const double norm = sqrt((acc[0] + acc[1]) + (acc[2] + acc[3])) / (summed > 0 ? summed : 1);
	if (!(clip > 0) || !isfinite(norm) || norm <= clip)
		return norm;
	const float scale = (float)(clip / norm);
	for (size_t j = 0; j < n; j++)
		grads[j] *= scale;
	return norm;
}
