#include "distribute/placement.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static int64_t rows_of(const struct dt_variable *v)
{
	return v->ndim > 0 ? v->shape[0] : 1;
}

/* Slices a variable is split into (TF's min_max_variable_partitioner). */
static int64_t slices_for(const struct dt_variable *v, int num_ps, size_t min_slice_bytes)
{
	size_t bytes = v->count * sizeof(float);
	if (bytes <= min_slice_bytes || num_ps == 1)
		return 1;
	int64_t want = (int64_t)((bytes + min_slice_bytes - 1) / min_slice_bytes);
	int64_t n = want < num_ps ? want : num_ps;
	int64_t rows = rows_of(v);
	return n < rows ? n : rows;
}

/* Largest first; ties in a fixed order (variable, slice) so the result is total. */
static int by_size_desc(const void *pa, const void *pb)
{
	const struct dt_shard *a = *(const struct dt_shard *const *)pa;
	const struct dt_shard *b = *(const struct dt_shard *const *)pb;
	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	if (a->variable != b->variable)
		return a->variable < b->variable ? -1 : 1;
	return a->slice - b->slice;
}

enum dt_status dt_placement_compute(const struct dt_variable *vars, int n, int num_ps, size_t min_slice_bytes,
				    struct dt_placement *out, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	if (num_ps < 1)
		return dt_err_set(err, DT_CONFIG, "cannot place variables on %d parameter servers", num_ps);
	if (min_slice_bytes == 0)
		min_slice_bytes = DT_PLACEMENT_MIN_SLICE_BYTES;
	int total = 0;
	for (int i = 0; i < n; i++)
		total += (int)slices_for(&vars[i], num_ps, min_slice_bytes);

	out->num_ps = num_ps;
	out->num_shards = total;
	out->shards = dt_xcalloc((size_t)total, sizeof(*out->shards));
	out->ps_elements = dt_xcalloc((size_t)num_ps, sizeof(*out->ps_elements));
	out->ps_shards = dt_xcalloc((size_t)num_ps, sizeof(*out->ps_shards));

	int k = 0;
	for (int i = 0; i < n; i++) {
		const struct dt_variable *v = &vars[i];
		int64_t slices = slices_for(v, num_ps, min_slice_bytes);
		int64_t rows = rows_of(v);
		size_t row_elems = rows ? v->count / (size_t)rows : 0;
		for (int64_t s = 0; s < slices; s++) {
			/* The first rows % slices slices get one extra row, as TF does. */
			int64_t base = rows / slices, extra = rows % slices;
			int64_t begin = s * base + (s < extra ? s : extra);
			int64_t end = begin + base + (s < extra ? 1 : 0);
			struct dt_shard *sh = &out->shards[k++];
			sh->variable = i;
			sh->slice = (int)s;
			sh->num_slices = (int)slices;
			sh->row_begin = begin;
			sh->row_end = end;
			sh->offset = v->offset + (size_t)begin * row_elems;
			sh->count = slices == 1 ? v->count : (size_t)(end - begin) * row_elems;
			sh->kind = v->kind;
			sh->decay = v->decay;
		}
	}

	struct dt_shard **order = dt_xmallocarray((size_t)total, sizeof(*order));
	for (int i = 0; i < total; i++)
		order[i] = &out->shards[i];
	qsort(order, (size_t)total, sizeof(*order), by_size_desc);
	for (int i = 0; i < total; i++) {
		int best = 0;
		for (int p = 1; p < num_ps; p++)
			if (out->ps_elements[p] < out->ps_elements[best])
				best = p;
		order[i]->ps = best;
		out->ps_elements[best] += order[i]->count;
		out->ps_shards[best]++;
	}
	free(order);
	return DT_OK;
}

void dt_placement_release(struct dt_placement *p)
{
	if (!p)
		return;
	free(p->shards);
	free(p->ps_elements);
	free(p->ps_shards);
	memset(p, 0, sizeof(*p));
}

void dt_placement_print(const struct dt_placement *p, const struct dt_variable *vars, FILE *out)
{
	fprintf(out, "placement over %d parameter server(s):\n", p->num_ps);
	fprintf(out, "  %-28s %-14s %-16s %10s  %s\n", "variable", "shape", "rows", "bytes", "ps");
	for (int i = 0; i < p->num_shards; i++) {
		const struct dt_shard *s = &p->shards[i];
		const struct dt_variable *v = &vars[s->variable];
		char shape[64] = "(", rows[40];
		for (int d = 0; d < v->ndim; d++) {
			size_t used = strlen(shape);
			snprintf(shape + used, sizeof(shape) - used, "%s%lld", d ? ", " : "", (long long)v->shape[d]);
		}
		strncat(shape, ")", sizeof(shape) - strlen(shape) - 1);
		if (s->num_slices == 1)
			snprintf(rows, sizeof(rows), "all");
		else
			snprintf(rows, sizeof(rows), "%lld-%lld (%d/%d)", (long long)s->row_begin,
				 (long long)s->row_end - 1, s->slice + 1, s->num_slices);
		fprintf(out, "  %-28s %-14s %-16s %10zu  ps:%d\n", v->name, shape, rows, s->count * sizeof(float), s->ps);
	}
	for (int i = 0; i < p->num_ps; i++)
		fprintf(out, "  ps:%d holds %zu shard(s), %zu bytes\n", i, p->ps_shards[i], p->ps_elements[i] * sizeof(float));
}
