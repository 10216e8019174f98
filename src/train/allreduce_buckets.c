#include "train/allreduce_buckets.h"

#include <stdio.h>

#include "base/alloc.h"
#include "nn/layers.h"

/* A rough cost of layer l's backward pass, in multiply-adds per example:
 * the kernel gradient, and as much again for the input gradient unless l is
 * the first layer that computes (it needs none). Only the ratios matter. */
static double backward_cost(const struct dt_layer *l, int needs_dx)
{
	double k = (double)l->kernel_count + (double)l->bias_count;
	if (l->kind == DT_LAYER_CONV2D)
		k *= (double)l->geom.OH * (double)l->geom.OW;
	return needs_dx ? 2 * k : k;
}

int dt_allreduce_plan_buckets(const struct dt_model *m, double bucket_mb, struct dt_allreduce_bucket **out)
{
	const size_t nparams = dt_model_num_params(m);
	size_t big = (size_t)((bucket_mb > 0 ? bucket_mb : 25) * 1024 * 1024 / sizeof(float));
	size_t first = (size_t)(1024 * 1024 / sizeof(float));
	big = big < 16 ? 16 : big / 16 * 16;
	if (first > big)
		first = big;
	const int nlayers = dt_model_num_layers(m);
	int first_compute = 0;
	while (first_compute < nlayers && dt_layer_is_view(dt_model_layer(m, first_compute)))
		first_compute++;
	double total = 0;
	for (int i = 0; i < nlayers; i++)
		total += backward_cost(dt_model_layer(m, i), i > first_compute);
	size_t cap = nparams / big + (size_t)nlayers + 2;
	struct dt_allreduce_bucket *b = dt_xcalloc(cap, sizeof(*b));
	int n = 0;
	size_t end = nparams; /* the open bucket is [pos, end) */
	size_t pos = nparams;
	double first_cost = 0;
	for (int i = nlayers - 1; i >= 0; i--) {
		const struct dt_layer *l = dt_model_layer(m, i);
		size_t count = dt_layer_num_params(l);
		if (count == 0)
			continue;
		double cost = backward_cost(l, i > first_compute);
		if (n == 0 && pos < end && first_cost + cost > total / 2 && (end - pos) * 4 >= nparams) {
			DT_ASSERT((size_t)n < cap);
			b[n++].count = end - pos; /* offset and layers filled below */
			end = pos;
		}
		if (n == 0)
			first_cost += cost;
		size_t lo = pos - count;
		DT_ASSERT(pos >= count);
		while (pos > lo) {
			size_t piece = pos - lo > big ? big : pos - lo;
			pos -= piece;
			if (end - pos >= (n == 0 ? first : big)) {
				DT_ASSERT((size_t)n < cap);
				b[n++].count = end - pos;
				end = pos;
			}
		}
	}
	DT_ASSERT(pos == 0);
	if (end > 0) {
		DT_ASSERT((size_t)n < cap);
		b[n++].count = end;
	}
	/* Offsets, and the layers each bucket touches. */
	size_t hi = nparams;
	for (int k = 0; k < n; k++) {
		b[k].offset = hi - b[k].count;
		hi = b[k].offset;
		b[k].first_layer = nlayers;
		b[k].last_layer = -1;
	}
	DT_ASSERT(hi == 0);
	size_t off = 0;
	for (int i = 0; i < nlayers; i++) {
		size_t count = dt_layer_num_params(dt_model_layer(m, i));
		for (int k = 0; k < n && count > 0; k++) {
			if (b[k].offset < off + count && off < b[k].offset + b[k].count) {
				if (i < b[k].first_layer)
					b[k].first_layer = i;
				if (i > b[k].last_layer)
					b[k].last_layer = i;
			}
		}
		off += count;
	}
	*out = b;
	return n;
}

void dt_allreduce_describe_buckets(const struct dt_model *m, const struct dt_allreduce_bucket *b, int n, char *buf,
				   size_t cap)
{
	int len = snprintf(buf, cap, "%d bucket%s, from the end:", n, n == 1 ? "" : "s");
	for (int k = 0; k < n && len >= 0 && (size_t)len < cap; k++) {
		double kib = (double)b[k].count * sizeof(float) / 1024;
		const char *hi = dt_model_layer(m, b[k].last_layer)->name, *lo = dt_model_layer(m, b[k].first_layer)->name;
		if (b[k].first_layer == b[k].last_layer)
			len += snprintf(buf + len, cap - (size_t)len, "%s %.0f KiB (%s)", k ? "," : "", kib, hi);
		else
			len += snprintf(buf + len, cap - (size_t)len, "%s %.0f KiB (%s..%s)", k ? "," : "", kib, hi, lo);
	}
}
