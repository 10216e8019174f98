#include "nn/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"

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

static const char *const schedule_names[] = { "constant", "linear_warmup_decay" };

const char *const *dt_lr_schedule_names(size_t *count)
{
	if (count)
		*count = DT_ARRAY_LEN(schedule_names);
	return schedule_names;
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
 */
void dt_optimizer_apply(struct dt_optimizer *opt, float *params, const float *grads, size_t offset, size_t n,
			float lr, int64_t step)
{
	DT_ASSERT(offset <= opt->count && n <= opt->count - offset);
	float *restrict p = params + offset;
	const float *restrict g = grads;
	switch (opt->kind) {
	case DT_OPTIM_SGD:
		for (size_t i = 0; i < n; i++)
			p[i] -= lr * g[i];
		break;
	case DT_OPTIM_MOMENTUM: {
		float *restrict a = opt->slots + offset;
		const float mu = (float)opt->momentum;
		for (size_t i = 0; i < n; i++) {
			a[i] = mu * a[i] + g[i];
			p[i] -= lr * a[i];
		}
		break;
	}
	case DT_OPTIM_ADAM: {
		DT_ASSERT(step >= 1);
		float *restrict m = opt->slots + offset;
		float *restrict v = opt->slots + opt->count + offset;
		const float b1 = (float)opt->beta1, b2 = (float)opt->beta2, eps = (float)opt->epsilon;
		const float c1 = (float)(1.0 - opt->beta1), c2 = (float)(1.0 - opt->beta2);
		const double t = (double)step;
		const float lr_t = (float)((double)lr * sqrt(1.0 - pow(opt->beta2, t)) / (1.0 - pow(opt->beta1, t)));
		for (size_t i = 0; i < n; i++) {
			m[i] = b1 * m[i] + c1 * g[i];
			v[i] = b2 * v[i] + c2 * (g[i] * g[i]);
			p[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps);
		}
		break;
	}
	case DT_OPTIM_ADAGRAD: {
		float *restrict acc = opt->slots + offset;
		const float eps = (float)opt->epsilon;
		for (size_t i = 0; i < n; i++) {
			acc[i] += g[i] * g[i];
			p[i] -= lr * g[i] / (sqrtf(acc[i]) + eps);
		}
		break;
	}
	}
}

float dt_lr_at(const struct dt_hparams *hp, int64_t step, int64_t total_steps)
{
	const double lr = hp->learning_rate;
	if (strcmp(hp->lr_schedule, "constant") == 0)
		return (float)lr;
	DT_ASSERT(strcmp(hp->lr_schedule, "linear_warmup_decay") == 0);
	if (step < 0)
		step = 0;
	const int64_t warm = hp->warmup_steps > 0 ? hp->warmup_steps : 0;
	if (step < warm)
		return (float)(lr * (double)step / (double)warm);
	if (total_steps <= warm)
		return (float)lr;
	double frac = (double)(step - warm) / (double)(total_steps - warm);
	if (frac > 1)
		frac = 1;
	return (float)(lr * (1.0 - frac * (1.0 - hp->lr_decay_end)));
}
