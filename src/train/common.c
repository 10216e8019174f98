#include "train/common.h"

#include <math.h>
#include <stdio.h>

#include "data/pipeline.h"

void dt_train_format_eta(double seconds, char *buf, size_t cap)
{
	if (!(seconds >= 0) || seconds > 1e7) {
		snprintf(buf, cap, "?");
		return;
	}
	long s = lround(seconds);
	if (s >= 3600)
		snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
	else
		snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

void dt_train_add_weight_decay(struct dt_model *m, float wd)
{
	float *p = dt_model_params(m), *g = dt_model_grads(m);
	for (int i = 0; i < dt_model_num_variables(m); i++) {
		if (!dt_model_variable_is_kernel(m, i))
			continue;
		const struct dt_variable *v = dt_model_variable(m, i);
		for (size_t j = v->offset; j < v->offset + v->count; j++)
			g[j] += wd * p[j];
	}
}

enum dt_status dt_train_evaluate(struct dt_model *model, const struct dt_dataset *ds, struct dt_eval_result *out,
				 struct dt_err *err)
{
	struct dt_pipeline_config pc = {
		.data = ds, .batch_size = dt_model_max_batch(model), .shard_count = 1, .single_pass = 1,
	};
	struct dt_pipeline *p;
	enum dt_status st = dt_pipeline_new(&pc, &p, err);
	if (st)
		return dt_err_prefix(err, "cannot evaluate");
	double loss_sum = 0;
	int64_t correct = 0, n = 0;
	const struct dt_batch *b;
	while ((b = dt_pipeline_next(p))) {
		int c = 0;
		float loss = dt_model_eval_batch(model, b->x, b->y, b->size, &c);
		loss_sum += (double)loss * b->size;
		correct += c;
		n += b->size;
	}
	dt_pipeline_free(p);
	out->examples = n;
	out->accuracy = n ? (double)correct / (double)n : 0;
	out->loss = n ? loss_sum / (double)n : 0;
	return DT_OK;
}
