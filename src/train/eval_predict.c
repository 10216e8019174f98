/*
 * eval_predict.c — an evaluation that also writes each example's
 * prediction (evaluator.h's predictions_file), for comparing a model's
 * outputs with another runtime's.
 *
 * The figures are dt_train_evaluate's to the bit: the same single pass in
 * order, batches of the model's max batch, the same sums. The file is one
 * JSON object a line, in the split's order, written atomically:
 *   {"index":0,"label":9,"class":9,"logits":[...],"probabilities":[...]}
 * logits are the model's output before the softmax (the loss's input,
 * %.9g: a float's exact value), probabilities their softmax (computed in
 * double, %.9g); class is the first index of the largest logit, as
 * accuracy counts it.
 */
#include "train/evaluator.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "data/pipeline.h"
#include "train/common.h"

struct buf {
	char *p;
	size_t len, cap;
};

static void put(struct buf *b, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		DT_ASSERT(n >= 0);
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		b->cap = 2 * b->cap + (size_t)n + 1;
		b->p = dt_xrealloc(b->p, b->cap);
	}
}

enum dt_status dt_eval_predictions(struct dt_model *model, const struct dt_dataset *ds, const char *path,
				   struct dt_eval_result *out, struct dt_err *err)
{
	if (ds->text)
		return dt_err_set(err, DT_USAGE, "--predictions_file is built for image and CSV problems, not text problems");
	struct dt_pipeline_config pc = {
		.data = ds, .batch_size = dt_model_max_batch(model), .shard_index = 0, .shard_count = 1, .single_pass = 1,
	};
	struct dt_pipeline *p;
	enum dt_status st = dt_pipeline_new(&pc, &p, err);
	if (st)
		return dt_err_prefix(err, "cannot evaluate");
	const int k = ds->num_classes;
	struct buf b = { dt_xmalloc(1 << 16), 0, 1 << 16 };
	b.p[0] = '\0';
	double loss_sum = 0;
	int64_t correct = 0, n = 0;
	const struct dt_batch *bt;
	while ((bt = dt_pipeline_next(p))) {
		int c = 0;
		float loss = dt_model_eval_batch(model, bt->x, bt->y, bt->size, &c);
		loss_sum += (double)loss * bt->size;
		correct += c;
		const float *logits = dt_model_logits(model);
		DT_ASSERT(logits != NULL);
		for (int i = 0; i < bt->size; i++, n++) {
			const float *z = logits + (size_t)i * (size_t)k;
			int best = 0;
			for (int j = 1; j < k; j++)
				if (z[j] > z[best])
					best = j;
			double sum = 0;
			for (int j = 0; j < k; j++)
				sum += exp((double)z[j] - (double)z[best]);
			put(&b, "{\"index\":%lld,\"label\":%d,\"class\":%d,\"logits\":[", (long long)n, bt->y[i], best);
			for (int j = 0; j < k; j++)
				put(&b, "%s%.9g", j ? "," : "", (double)z[j]);
			put(&b, "],\"probabilities\":[");
			for (int j = 0; j < k; j++)
				put(&b, "%s%.9g", j ? "," : "", exp((double)z[j] - (double)z[best]) / sum);
			put(&b, "]}\n");
		}
	}
	dt_pipeline_free(p);
	double v[DT_EVAL_SUMS] = { loss_sum, (double)correct, (double)n, (double)n, (double)correct, loss_sum, 0, 0 };
	dt_train_eval_result(v, 0, out);
	st = dt_write_file_atomic(path, b.p, b.len, err);
	free(b.p);
	return st ? dt_err_prefix(err, "cannot write the predictions file") : DT_OK;
}
