/*
 * warm_start.c — --warm_start_from (warm_start.h): recognizing the source,
 * safetensors sources, matching tensors to variables as Keras does, the
 * staged load and the report. The HDF5 layouts are warm_start_h5.c's.
 */
#include "train/warm_start.h"

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/log.h"
#include "train/checkpoint.h"
#include "train/checkpoint_internal.h"

const char *dt_warm_format_name(enum dt_warm_format f)
{
	switch (f) {
	case DT_WARM_DTRAIN: return "dtrain checkpoint";
	case DT_WARM_SAFETENSORS: return "safetensors";
	case DT_WARM_KERAS2_H5: return "Keras 2 HDF5 weights";
	case DT_WARM_KERAS3_H5: return "Keras 3 .weights.h5";
	case DT_WARM_TFJS: return "TF.js model.json and weight shards";
	case DT_WARM_KERAS_ARCHIVE: return "Keras 3 .keras archive";
	}
	return "?";
}

struct dt__warm_tensor *dt__warm_add(struct dt__warm_source *s, const char *name, const char *layer, int index,
				     int ndim, const int64_t *shape)
{
	s->t = dt_xrealloc(s->t, (size_t)(s->num + 1) * sizeof(*s->t));
	struct dt__warm_tensor *t = &s->t[s->num++];
	memset(t, 0, sizeof(*t));
	t->name = dt_xstrdup(name);
	t->layer = layer ? dt_xstrdup(layer) : NULL;
	t->index = index;
	t->ndim = ndim;
	t->count = 1;
	for (int k = 0; k < ndim; k++) {
		t->shape[k] = shape[k];
		t->count = shape[k] > 0 && t->count > INT64_MAX / shape[k] ? -1 : t->count * shape[k];
	}
	return t;
}

void dt__warm_source_release(struct dt__warm_source *s)
{
	if (s->close)
		s->close(s);
	for (int i = 0; i < s->num; i++) {
		free(s->t[i].name);
		free(s->t[i].layer);
	}
	free(s->t);
	s->t = NULL;
	s->num = 0;
}

/* ---- safetensors ---- */

struct st_impl {
	struct dt_st_file *f;
	const unsigned char *data; /* the byte buffer (item 3), borrowed */
	int *tensor;               /* (num) index into f->tensors */
};

static void st_close(struct dt__warm_source *s)
{
	struct st_impl *im = s->impl;
	if (!im)
		return;
	dt_st_free(im->f);
	free(im->tensor);
	free(im);
	s->impl = NULL;
}

float dt__half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, bits;
	if (exp == 0 && man == 0) {
		bits = sign;
	} else if (exp == 0) { /* subnormal: normalize */
		int e = -1;
		do {
			e++;
			man <<= 1;
		} while (!(man & 1024));
		bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 1023) << 13;
	} else if (exp == 31) {
		bits = sign | 0x7f800000u | man << 13;
	} else {
		bits = sign | (exp + 127 - 15) << 23 | man << 13;
	}
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

static enum dt_status st_read(struct dt__warm_source *s, int i, float *out, struct dt_err *err)
{
	struct st_impl *im = s->impl;
	const struct dt_st_tensor_info *t = &im->f->tensors[im->tensor[i]];
	const unsigned char *p = im->data + t->begin;
	int64_t n = s->t[i].count;
	(void)err; /* the parser checked that the bytes are there for the shape and dtype */
	for (int64_t k = 0; k < n; k++) {
		switch (t->dtype) {
		case DT_ST_F32: {
			uint32_t b = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 | (uint32_t)p[4 * k + 2] << 16 |
				     (uint32_t)p[4 * k + 3] << 24;
			memcpy(&out[k], &b, 4);
			break;
		}
		case DT_ST_F64: {
			uint64_t b = 0;
			for (int j = 7; j >= 0; j--)
				b = b << 8 | p[8 * k + j];
			double d;
			memcpy(&d, &b, 8);
			out[k] = (float)d;
			break;
		}
		case DT_ST_F16:
			out[k] = dt__half_to_float((uint16_t)(p[2 * k] | p[2 * k + 1] << 8));
			break;
		default: { /* BF16 */
			uint32_t b = (uint32_t)(p[2 * k] | p[2 * k + 1] << 8) << 16;
			memcpy(&out[k], &b, 4);
			break;
		}
		}
	}
	return DT_OK;
}

static int is_float_dtype(enum dt_st_dtype d)
{
	return d == DT_ST_F32 || d == DT_ST_F64 || d == DT_ST_F16 || d == DT_ST_BF16;
}

static enum dt_status st_open(const void *bytes, size_t len, const char *path, struct dt__warm_source *s,
			      struct dt_err *err)
{
	memset(s, 0, sizeof(*s));
	s->path = path;
	struct dt_st_file *f;
	struct dt_err perr = DT_ERR_INIT;
	if (dt_st_parse(bytes, len, &f, &perr))
		return dt_err_set(err, DT_CKPT, "warm-start file '%s' is not a valid safetensors file: %s", path, perr.msg);
	const char *format = dt_st_meta(f, "format");
	s->format = format && strncmp(format, "dtrain.ckpt.", 12) == 0 ? DT_WARM_DTRAIN : DT_WARM_SAFETENSORS;
	if (s->format == DT_WARM_DTRAIN && dt_ckpt_verify(f, bytes, &perr)) {
		dt_st_free(f);
		return dt_err_set(err, DT_CKPT, "warm-start checkpoint '%s' does not verify: %s", path, perr.msg);
	}
	const char *gs = dt_st_meta(f, "global_step");
	if (s->format == DT_WARM_DTRAIN && gs)
		s->global_step = strtoll(gs, NULL, 10); /* verified above: decimal, equal to the tensor */
	struct st_impl *im = dt_xcalloc(1, sizeof(*im));
	im->f = f;
	im->data = (const unsigned char *)bytes + f->data_start;
	im->tensor = dt_xcalloc((size_t)f->num_tensors + 1, sizeof(int));
	s->impl = im;
	s->read = st_read;
	s->close = st_close;
	for (int i = 0; i < f->num_tensors; i++) {
		const struct dt_st_tensor_info *t = &f->tensors[i];
		if (strcmp(t->name, "global_step") == 0 || dt__ckpt_slot_base(t->name) > 0 || !is_float_dtype(t->dtype))
			continue; /* not a variable */
		im->tensor[s->num] = i;
		dt__warm_add(s, t->name, NULL, 0, t->ndim, t->shape);
	}
	return DT_OK;
}

/* ---- matching ---- */

struct pair {
	int var, tensor;
};

static void layer_of(const char *var, char *layer, size_t cap, const char **short_name)
{
	const char *slash = strrchr(var, '/');
	size_t n = slash ? (size_t)(slash - var) : 0;
	snprintf(layer, cap, "%.*s", (int)n, var);
	*short_name = slash ? slash + 1 : var;
}

/* The model's layers with variables, in model order; per layer its
 * variables in Keras's order. */
struct mlayer {
	char name[DT_VAR_NAME_MAX];
	int n, vars[16]; /* Keras's layers have at most 5 weights; more would fail pair_layer's count */
};

static int cmp_rank(const struct dt_model *m, int a, int b)
{
	const char *sa, *sb;
	char la[DT_VAR_NAME_MAX];
	layer_of(dt_model_variable(m, a)->name, la, sizeof(la), &sa);
	layer_of(dt_model_variable(m, b)->name, la, sizeof(la), &sb);
	int ra = dt__keras_weight_rank(sa), rb = dt__keras_weight_rank(sb);
	return ra != rb ? ra - rb : a - b;
}

static int model_layers(const struct dt_model *m, struct mlayer **out)
{
	int nv = dt_model_num_variables(m), nl = 0;
	struct mlayer *L = dt_xcalloc((size_t)nv + 1, sizeof(*L));
	for (int i = 0; i < nv; i++) {
		char name[DT_VAR_NAME_MAX];
		const char *sn;
		layer_of(dt_model_variable(m, i)->name, name, sizeof(name), &sn);
		int k = 0;
		while (k < nl && strcmp(L[k].name, name) != 0)
			k++;
		if (k == nl)
			snprintf(L[nl++].name, sizeof(L->name), "%s", name);
		if (L[k].n < (int)DT_ARRAY_LEN(L[k].vars)) {
			int j = L[k].n++;
			L[k].vars[j] = i; /* insertion sort by Keras's rank */
			while (j > 0 && cmp_rank(m, L[k].vars[j - 1], L[k].vars[j]) > 0) {
				int t = L[k].vars[j];
				L[k].vars[j] = L[k].vars[j - 1];
				L[k].vars[--j] = t;
			}
		}
	}
	*out = L;
	return nl;
}

/* The file's layers in file order: first tensor index of each. */
static int file_layers(const struct dt__warm_source *s, int *first)
{
	int n = 0;
	for (int i = 0; i < s->num; i++) {
		int seen = 0;
		for (int k = 0; k < n && !seen; k++)
			seen = strcmp(s->t[first[k]].layer, s->t[i].layer) == 0;
		if (!seen)
			first[n++] = i;
	}
	return n;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t cap)
{
	size_t at = (size_t)snprintf(buf, cap, "[");
	for (int k = 0; k < ndim && at < cap; k++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%lld", k ? ", " : "", (long long)shape[k]);
	if (at < cap)
		snprintf(buf + at, cap - at, "]");
}

static enum dt_status pair_layer(const struct mlayer *ml, const struct dt__warm_source *s, int first,
				 struct pair *pairs, int *np, struct dt_err *err)
{
	const char *fl = s->t[first].layer;
	int nt = 0;
	for (int i = first; i < s->num; i++)
		nt += strcmp(s->t[i].layer, fl) == 0;
	if (nt != ml->n)
		return dt_err_set(err, DT_USAGE, "cannot warm-start layer '%s' from '%s': the model's layer has %d "
						 "weights, the file's layer '%s' has %d", ml->name, s->path, ml->n, fl, nt);
	int j = 0;
	for (int i = first; i < s->num; i++)
		if (strcmp(s->t[i].layer, fl) == 0) {
			pairs[*np].var = ml->vars[j++];
			pairs[(*np)++].tensor = i;
		}
	return DT_OK;
}

static enum dt_status match(const struct dt_model *m, const struct dt__warm_source *s, struct pair *pairs, int *np,
			    int *by_order, struct dt_err *err)
{
	*np = 0;
	*by_order = 0;
	int nv = dt_model_num_variables(m);
	if (s->format == DT_WARM_DTRAIN || s->format == DT_WARM_SAFETENSORS) {
		for (int v = 0; v < nv; v++)
			for (int i = 0; i < s->num; i++)
				if (strcmp(s->t[i].name, dt_model_variable(m, v)->name) == 0) {
					pairs[*np].var = v;
					pairs[(*np)++].tensor = i;
					break;
				}
		return DT_OK;
	}
	struct mlayer *L;
	int nl = model_layers(m, &L);
	int *first = dt_xcalloc((size_t)s->num + 1, sizeof(int));
	int nf = file_layers(s, first);
	int common = 0;
	for (int k = 0; k < nf; k++)
		for (int l = 0; l < nl; l++)
			common += strcmp(s->t[first[k]].layer, L[l].name) == 0;
	enum dt_status st = DT_OK;
	if (s->format == DT_WARM_KERAS2_H5 && common == 0 && nf == nl && nf > 0) {
		*by_order = 1; /* Keras 2's plain load_weights: topological order */
		for (int k = 0; k < nf && !st; k++)
			st = pair_layer(&L[k], s, first[k], pairs, np, err);
	} else {
		for (int l = 0; l < nl && !st; l++)
			for (int k = 0; k < nf; k++)
				if (strcmp(s->t[first[k]].layer, L[l].name) == 0) {
					st = pair_layer(&L[l], s, first[k], pairs, np, err);
					break;
				}
	}
	free(first);
	free(L);
	return st;
}

/* ---- the load ---- */

struct names {
	char text[1024];
	int n;
};

static void names_add(struct names *l, const char *name)
{
	size_t at = strlen(l->text);
	if (l->n < DT_WARM_REPORT_NAMES && at + strlen(name) + 4 < sizeof(l->text))
		snprintf(l->text + at, sizeof(l->text) - at, "%s'%s'", l->n ? ", " : "", name);
	l->n++;
}

static void names_log(const char *what, const struct names *l)
{
	if (l->n == 0)
		dt_info("warm start: %s: none", what);
	else if (l->n <= DT_WARM_REPORT_NAMES)
		dt_info("warm start: %s: %d (%s)", what, l->n, l->text);
	else
		dt_info("warm start: %s: %d (%s and %d more)", what, l->n, l->text, l->n - DT_WARM_REPORT_NAMES);
}

static enum dt_status load_source(struct dt_model *m, struct dt__warm_source *s, const char *vars,
				  struct dt_warm_report *rep, struct dt_err *err)
{
	regex_t re;
	int have_re = vars && *vars;
	if (have_re && regcomp(&re, vars, REG_EXTENDED | REG_NOSUB) != 0)
		return dt_err_set(err, DT_USAGE, "--warm_start_vars '%s' is not a valid (POSIX extended) regular expression",
				  vars);
	int nv = dt_model_num_variables(m);
	struct pair *pairs = dt_xcalloc((size_t)nv + 1, sizeof(*pairs));
	int np, by_order;
	enum dt_status st = match(m, s, pairs, &np, &by_order, err);
	float *stage = NULL;
	int *loaded = dt_xcalloc((size_t)nv + 1, sizeof(int));
	if (!st) {
		size_t n = dt_model_num_params(m);
		stage = dt_xmallocarray(n ? n : 1, sizeof(float));
		memcpy(stage, dt_model_params(m), n * sizeof(float));
	}
	for (int p = 0; p < np && !st; p++) {
		const struct dt_variable *v = dt_model_variable(m, pairs[p].var);
		struct dt__warm_tensor *t = &s->t[pairs[p].tensor];
		if (have_re && regexec(&re, v->name, 0, NULL, 0) != 0)
			continue;
		int same = t->ndim == v->ndim;
		for (int k = 0; same && k < v->ndim; k++)
			same = t->shape[k] == v->shape[k];
		if (!same) {
			char a[128], b[128];
			shape_str(v->ndim, v->shape, a, sizeof(a));
			shape_str(t->ndim, t->shape, b, sizeof(b));
			st = dt_err_set(err, DT_USAGE, "cannot warm-start variable '%s' (shape %s) from '%s': its tensor "
							"'%s' has shape %s", v->name, a, s->path, t->name, b);
			dt_err_hint(err, "the file is another model's; --warm_start_vars=REGEX loads only the variables "
					 "it matches (e.g. all but the head)");
			break;
		}
		if ((st = s->read(s, pairs[p].tensor, stage + v->offset, err)))
			break;
		t->used = 1;
		loaded[pairs[p].var] = 1;
	}
	struct names ln = { "", 0 }, left = { "", 0 }, unused = { "", 0 };
	if (!st) {
		for (int v = 0; v < nv; v++)
			names_add(loaded[v] ? &ln : &left, dt_model_variable(m, v)->name);
		for (int i = 0; i < s->num; i++)
			if (!s->t[i].used)
				names_add(&unused, s->t[i].name);
		if (ln.n == 0) {
			st = dt_err_set(err, DT_USAGE, "--warm_start_from '%s' (%s) matches none of the model's %d variables",
					s->path, dt_warm_format_name(s->format), nv);
			dt_err_hint(err, "its tensors are %s%s; the model's variables are %s%s", unused.text,
				    unused.n > DT_WARM_REPORT_NAMES ? ", ..." : "", left.text,
				    left.n > DT_WARM_REPORT_NAMES ? ", ..." : "");
		}
	}
	if (!st) {
		memcpy(dt_model_params(m), stage, dt_model_num_params(m) * sizeof(float));
		dt_info("warm start from '%s' (%s%s)", s->path, dt_warm_format_name(s->format),
			by_order ? ", layers matched by order as Keras's load_weights does: no layer name is the model's" : "");
		names_log("variables loaded", &ln);
		names_log("variables left at their initializer", &left);
		names_log("tensors of the file not used", &unused);
		if (rep) {
			rep->format = s->format;
			rep->loaded = ln.n;
			rep->left = left.n;
			rep->unused = unused.n;
			rep->by_order = by_order;
			rep->global_step = s->global_step;
		}
	}
	free(stage);
	free(loaded);
	free(pairs);
	if (have_re)
		regfree(&re);
	return st;
}

enum dt_status dt_warm_start_init(struct dt_model *m, uint64_t seed, const char *from, const char *vars,
				  struct dt_err *err)
{
	dt_model_init_params(m, seed);
	if (!from || !*from)
		return DT_OK;
	return dt_warm_start(m, from, vars, NULL, err);
}

static int is_safetensors(const unsigned char *b, size_t len)
{
	if (len < 9)
		return 0;
	uint64_t n = 0;
	for (int k = 7; k >= 0; k--)
		n = n << 8 | b[k];
	return n >= 2 && n <= len - 8 && b[8] == '{';
}

enum dt_status dt_warm_start(struct dt_model *m, const char *path, const char *vars, struct dt_warm_report *report,
			     struct dt_err *err)
{
	char file[DT_CKPT_PATH_MAX];
	struct stat sb;
	if (stat(path, &sb) != 0)
		return dt_err_set(err, DT_IO, "cannot read warm-start source '%s': %s", path, strerror(errno));
	snprintf(file, sizeof(file), "%s", path);
	if (S_ISDIR(sb.st_mode)) {
		int64_t step;
		enum dt_ckpt_poll found;
		enum dt_status st = dt_ckpt_latest_path(path, file, sizeof(file), &step, &found, err);
		if (st)
			return dt_err_prefix(err, "cannot warm-start from '%s'", path);
		if (found != DT_CKPT_POLL_FOUND)
			return dt_err_set(err, found == DT_CKPT_POLL_NONE ? DT_USAGE : DT_CKPT,
					  "cannot warm-start from '%s': the directory has %s", path,
					  found == DT_CKPT_POLL_NONE ? "no checkpoint" : "a state file naming a missing checkpoint");
	}
	char *bytes;
	size_t len;
	enum dt_status st = dt_read_file(file, DT_WARM_MAX_FILE, &bytes, &len, err);
	if (st)
		return dt_err_prefix(err, "cannot read warm-start source");
	struct dt__warm_source s;
	st = dt__warm_open_bytes(bytes, len, file, &s, err);
	if (!st) {
		if (report) {
			memset(report, 0, sizeof(*report));
			snprintf(report->path, sizeof(report->path), "%s", file);
		}
		st = load_source(m, &s, vars, report, err);
		dt__warm_source_release(&s);
	}
	free(bytes);
	return st;
}

enum dt_status dt__warm_open_bytes(const void *bytes, size_t len, const char *file, struct dt__warm_source *s,
				   struct dt_err *err)
{
	const unsigned char *b = bytes;
	enum dt_status st;
	memset(s, 0, sizeof(*s));
	if (len >= 8 && memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0) {
		st = dt__warm_h5_open(bytes, len, file, s, err);
	} else if (len >= 4 && memcmp(b, "PK\x03\x04", 4) == 0) {
		st = dt__warm_keras_open(bytes, len, file, s, err);
	} else if (len > 0 && b[0] == '{') {
		st = dt__warm_tfjs_open_file(bytes, len, file, s, err);
	} else if (is_safetensors(b, len)) {
		st = st_open(bytes, len, file, s, err);
	} else {
		st = dt_err_set(err, DT_CKPT, "warm-start file '%s' (%zu bytes) is neither safetensors, HDF5 nor a dtrain "
					      "output dir: truncated or not weights", file, len);
	}
	return st;
}
