/*
 * checkpoint_integrity.c — what makes a checkpoint trustworthy beyond the
 * safetensors layout (checkpoint.h, item 4; docs/CHECKPOINTS.md
 * "Integrity"): the header checksum and format rules, and the model
 * signature of a model or of a file's own variables.
 */
#include "train/checkpoint.h"
#include "train/checkpoint_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* One line of the model signature: "name DTYPE [d0,d1]\n". */
struct sig_item {
	const char *name, *dtype;
	int ndim;
	const int64_t *shape;
};

static int cmp_sig_items(const void *a, const void *b)
{
	const struct sig_item *x = a, *y = b;
	return strcmp(x->name, y->name);
}

/* FNV-1a 64 of the items' lines sorted by name (sorts `items`). */
static void signature_of(struct sig_item *items, int n, char *buf, size_t cap)
{
	qsort(items, (size_t)n, sizeof(*items), cmp_sig_items);
	uint64_t h = 0xcbf29ce484222325ull;
	for (int i = 0; i < n; i++) {
		char line[DT_VAR_NAME_MAX + 160];
		/* The signature's lines have no space after commas: "[784,256]". */
		int len = snprintf(line, sizeof(line), "%s %s [", items[i].name, items[i].dtype);
		for (int d = 0; d < items[i].ndim && len < (int)sizeof(line); d++)
			len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%" PRId64, d ? "," : "",
					items[i].shape[d]);
		if (len < (int)sizeof(line))
			len += snprintf(line + len, sizeof(line) - (size_t)len, "]\n");
		len = len < (int)sizeof(line) ? len : (int)sizeof(line) - 1;
		for (int j = 0; j < len; j++) {
			h ^= (unsigned char)line[j];
			h *= 0x100000001b3ull;
		}
	}
	snprintf(buf, cap, "%016" PRIx64, h);
}

void dt_ckpt_model_signature(const struct dt_variable *vars, int num_vars, char *buf, size_t cap)
{
	struct sig_item *items = dt_xcalloc(num_vars > 0 ? (size_t)num_vars : 1, sizeof(*items));
	for (int i = 0; i < num_vars; i++)
		items[i] = (struct sig_item){ vars[i].name, "F32", vars[i].ndim, vars[i].shape };
	signature_of(items, num_vars, buf, cap);
	free(items);
}

/* True when `name` is "<another tensor of f>/<an optimizer's slot suffix>". */
static int is_slot_in_file(const struct dt_st_file *f, const char *name)
{
	const size_t base = dt__ckpt_slot_base(name);
	if (!base)
		return 0;
	for (int i = 0; i < f->num_tensors; i++)
		if (strlen(f->tensors[i].name) == base && strncmp(f->tensors[i].name, name, base) == 0)
			return 1;
	return 0;
}

const char *dt_ckpt_tensor_kind(const struct dt_st_file *f, const char *name)
{
	if (strcmp(name, "global_step") == 0)
		return "step";
	if (is_slot_in_file(f, name))
		return "slot";
	const char *kinds = dt_st_meta(f, "non_trainable");
	json_t *o = kinds ? json_loads(kinds, 0, NULL) : NULL;
	const char *k = json_string_value(json_object_get(o, name));
	static const char *const names[] = { "moving_average", "frozen" };
	const char *kind = "trainable"; /* a static string, not the JSON's */
	for (size_t i = 0; k && i < DT_ARRAY_LEN(names); i++)
		if (strcmp(k, names[i]) == 0)
			kind = names[i];
	json_decref(o);
	return kind;
}

/* The signature of the variables a file holds: its tensors but global_step
 * and the optimizer slots, each with the dtype it has in the file. */
void dt__ckpt_file_signature(const struct dt_st_file *f, char *buf, size_t cap)
{
	struct sig_item *items = dt_xcalloc(f->num_tensors > 0 ? (size_t)f->num_tensors : 1, sizeof(*items));
	int n = 0;
	for (int i = 0; i < f->num_tensors; i++) {
		const struct dt_st_tensor_info *t = &f->tensors[i];
		if (strcmp(t->name, "global_step") == 0 || is_slot_in_file(f, t->name))
			continue;
		items[n++] = (struct sig_item){ t->name, dt_st_dtype_name(t->dtype), t->ndim, t->shape };
	}
	signature_of(items, n, buf, cap);
	free(items);
}


enum dt_status dt_ckpt_check_header(const struct dt_st_file *f, struct dt_err *err)
{
	/* The checksum first: when it fails, nothing else the header says
	 * (format, names, shapes) is worth reporting as if it were true. */
	const char *fmt = dt_st_meta(f, "format");
	const char *hv = dt_st_meta(f, "header_crc32c");
	int v1 = fmt && strcmp(fmt, DT_CKPT_FORMAT_V1) == 0;
	if (hv || !v1) {
		if (hv && !f->header_crc_found)
			return dt_err_set(err, DT_CKPT, "%s: header checksum: __metadata__ has 'header_crc32c' but "
							"the header's bytes do not show it exactly once as "
							"\"header_crc32c\":\"XXXXXXXX\" (the header is corrupt)", f->path);
		if (hv && (strlen(hv) != 8 || !f->header_crc_stored_ok))
			return dt_err_set(err, DT_CKPT, "%s: header checksum: __metadata__ 'header_crc32c' is \"%s\", "
							"not 8 lowercase hex digits (the header is corrupt)", f->path, hv);
		if (hv && f->header_crc_stored != f->header_crc_computed)
			return dt_err_set(err, DT_CKPT, "%s: header crc mismatch: the header's %llu bytes have CRC-32C "
							"%08" PRIx32 ", __metadata__ 'header_crc32c' says %08" PRIx32
							" (the header is corrupt: a name, shape, offset or metadata value "
							"cannot be trusted)", f->path, (unsigned long long)f->data_start,
					  f->header_crc_computed, f->header_crc_stored);
	}
	if (!fmt || (!v1 && strcmp(fmt, DT_CKPT_FORMAT) != 0))
		return dt_err_set(err, DT_CKPT, "%s: not a dtrain checkpoint: __metadata__ 'format' is %s%s%s, "
						"expected \"" DT_CKPT_FORMAT "\" (or \"" DT_CKPT_FORMAT_V1 "\")",
				  f->path, fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "");
	if (!v1 && !hv)
		return dt_err_set(err, DT_CKPT, "%s: no 'header_crc32c' in __metadata__ (required by format "
						DT_CKPT_FORMAT "; the header is corrupt)", f->path);
	const struct dt_st_tensor_info *gs = dt_st_find(f, "global_step");
	if (!gs || gs->dtype != DT_ST_I64 || gs->ndim != 0)
		return dt_err_set(err, DT_CKPT, "%s: no rank-0 I64 tensor 'global_step'", f->path);
	return DT_OK;
}


/* model_signature against `want` (the model's, or the file's own variables'). */
enum dt_status dt__ckpt_check_signature(const struct dt_st_file *f, const char *want, const char *whose,
					struct dt_err *err)
{
	const char *sig = dt_st_meta(f, "model_signature");
	if (!sig)
		return dt_err_set(err, DT_CKPT, "%s: no 'model_signature' in __metadata__", f->path);
	if (strcmp(sig, want) != 0)
		return dt_err_set(err, DT_CKPT, "%s: model_signature mismatch: __metadata__ says \"%s\" but %s "
						"have %s (the header is corrupt)", f->path, sig, whose, want);
	return DT_OK;
}

