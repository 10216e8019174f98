/*
 * warm_start_tfjs.c — a TF.js layers model (`model.json` + weight shards)
 * as a warm-start source (warm_start.h, item 4).
 *
 * The layout TF.js's `model.save('file://...')` writes:
 *   1. model.json: {"modelTopology": ..., "weightsManifest": [GROUP, ...]}
 *      where GROUP is {"paths": ["group1-shard1of2.bin", ...],
 *      "weights": [{"name": "conv2d_Conv2D1/kernel", "shape": [3,3,1,8],
 *      "dtype": "float32", "quantization": {...}?}, ...]};
 *   2. a group's shards, concatenated in `paths` order, are its weights'
 *      bytes back to back in `weights` order, little-endian, nothing else;
 *   3. a weight's bytes: float32 (4 a value); quantized (tfjs-converter's
 *      --quantize_*): {"dtype": "uint8" or "uint16", "scale": S, "min": M}
 *      (value = q * S + M, 1 or 2 bytes), or {"dtype": "float16"} (2
 *      bytes, IEEE half).
 * A weight is `<layer>/<name>`; weights match by layer name and by order
 * inside the layer, as the HDF5 layouts do. Shard paths are relative to the
 * model.json's directory; absolute paths and ".." are refused.
 */
#include "train/warm_start.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/atomic_file.h"

#define MAX_SHARD ((size_t)1 << 30)

enum quant { Q_F32, Q_U8, Q_U16, Q_F16 };

struct tw {
	int group;
	size_t offset;
	enum quant q;
	double scale, min;
};

struct tfjs {
	int num_groups;
	unsigned char **data; /* (num_groups) each group's shards, concatenated */
	size_t *len;
	struct tw *w;         /* (num tensors) */
	int cap;
};

static void tfjs_close(struct dt__warm_source *s)
{
	struct tfjs *t = s->impl;
	if (!t)
		return;
	for (int g = 0; g < t->num_groups; g++)
		free(t->data[g]);
	free(t->data);
	free(t->len);
	free(t->w);
	free(t);
	s->impl = NULL;
}

static enum dt_status tfjs_read(struct dt__warm_source *s, int i, float *out, struct dt_err *err)
{
	(void)err; /* every byte range was checked at open */
	struct tfjs *t = s->impl;
	const struct tw *w = &t->w[i];
	const unsigned char *p = t->data[w->group] + w->offset;
	for (int64_t k = 0; k < s->t[i].count; k++) {
		switch (w->q) {
		case Q_F32: {
			uint32_t b = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 | (uint32_t)p[4 * k + 2] << 16 |
				     (uint32_t)p[4 * k + 3] << 24;
			memcpy(&out[k], &b, 4);
			break;
		}
		case Q_U8: out[k] = (float)(p[k] * w->scale + w->min); break;
		case Q_U16: out[k] = (float)((p[2 * k] | p[2 * k + 1] << 8) * w->scale + w->min); break;
		case Q_F16: out[k] = dt__half_to_float((uint16_t)(p[2 * k] | p[2 * k + 1] << 8)); break;
		}
	}
	return DT_OK;
}

static enum dt_status bad(struct dt_err *err, const char *path, const char *what, const char *name)
{
	return dt_err_set(err, DT_CKPT, "TF.js model '%s' cannot be read: %s%s%s%s", path, what, name ? " '" : "",
			  name ? name : "", name ? "'" : "");
}

static int safe_rel(const char *p)
{
	return *p && p[0] != '/' && !strstr(p, "..") && strlen(p) < 1024;
}

/* One weight of a group: its shape, byte size and quantization. */
static enum dt_status add_weight(struct dt__warm_source *s, json_t *w, int group, size_t *at, struct dt_err *err)
{
	struct tfjs *t = s->impl;
	const char *name = json_string_value(json_object_get(w, "name"));
	json_t *shape = json_object_get(w, "shape");
	const char *dtype = json_string_value(json_object_get(w, "dtype"));
	if (!name || !*name || !json_is_array(shape) || !dtype)
		return bad(err, s->path, "a weight without name, shape or dtype in group", NULL);
	if (strcmp(dtype, "float32") != 0)
		return bad(err, s->path, "a weight that is not float32:", name);
	size_t nd = json_array_size(shape);
	if (nd > DT_WARM_MAX_DIMS)
		return bad(err, s->path, "a shape of more than 8 dimensions:", name);
	int64_t dims[DT_WARM_MAX_DIMS];
	for (size_t k = 0; k < nd; k++) {
		json_t *d = json_array_get(shape, k);
		if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > ((json_int_t)1 << 40))
			return bad(err, s->path, "an impossible shape:", name);
		dims[k] = (int64_t)json_integer_value(d);
	}
	struct tw tw = { .group = group, .offset = *at, .q = Q_F32 };
	json_t *q = json_object_get(w, "quantization");
	size_t bytes = 4;
	if (q) {
		const char *qd = json_string_value(json_object_get(q, "dtype"));
		json_t *sc = json_object_get(q, "scale"), *mn = json_object_get(q, "min");
		if (qd && strcmp(qd, "float16") == 0) {
			tw.q = Q_F16;
			bytes = 2;
		} else if (qd && (strcmp(qd, "uint8") == 0 || strcmp(qd, "uint16") == 0) && json_is_number(sc) &&
			   json_is_number(mn) && isfinite(json_number_value(sc)) && isfinite(json_number_value(mn))) {
			tw.q = qd[4] == '8' ? Q_U8 : Q_U16;
			bytes = tw.q == Q_U8 ? 1 : 2;
			tw.scale = json_number_value(sc);
			tw.min = json_number_value(mn);
		} else {
			return bad(err, s->path, "an unknown quantization of weight", name);
		}
	}
	const char *slash = strrchr(name, '/');
	char layer[1024];
	snprintf(layer, sizeof(layer), "%.*s", slash ? (int)(slash - name) : 0, name);
	int index = 0;
	for (int i = s->num - 1; i >= 0 && strcmp(s->t[i].layer, layer) == 0; i--)
		index++;
	struct dt__warm_tensor *tt = dt__warm_add(s, name, layer, index, (int)nd, dims);
	if (tt->count < 0 || (uint64_t)tt->count > (uint64_t)(t->len[group] - *at) / bytes)
		return bad(err, s->path, "shards shorter than their weights (truncated?) at weight", name);
	*at += (size_t)tt->count * bytes;
	if (s->num > t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		t->w = dt_xrealloc(t->w, (size_t)t->cap * sizeof(*t->w));
	}
	t->w[s->num - 1] = tw;
	return DT_OK;
}

enum dt_status dt__warm_tfjs_open(const void *json, size_t len, const char *path,
				  enum dt_status (*shard)(void *ctx, const char *rel, unsigned char **bytes, size_t *len,
							  struct dt_err *err),
				  void *ctx, struct dt__warm_source *s, struct dt_err *err)
{
	memset(s, 0, sizeof(*s));
	s->path = path;
	s->format = DT_WARM_TFJS;
	json_error_t je;
	json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return dt_err_set(err, DT_CKPT, "TF.js model '%s' is not valid JSON: line %d column %d: %s", path,
				  je.line, je.column, je.text);
	json_t *man = json_object_get(root, "weightsManifest");
	if (!json_is_array(man)) {
		json_decref(root);
		return dt_err_set(err, DT_USAGE, "warm-start file '%s' is JSON without a TF.js weightsManifest: a Keras "
						 "model's JSON holds no weights", path);
	}
	struct tfjs *t = dt_xcalloc(1, sizeof(*t));
	s->impl = t;
	s->read = tfjs_read;
	s->close = tfjs_close;
	size_t ng = json_array_size(man);
	t->data = dt_xcalloc(ng + 1, sizeof(*t->data));
	t->len = dt_xcalloc(ng + 1, sizeof(*t->len));
	enum dt_status st = DT_OK;
	for (size_t g = 0; g < ng && !st; g++) {
		json_t *grp = json_array_get(man, g), *paths = json_object_get(grp, "paths"),
		       *weights = json_object_get(grp, "weights");
		t->num_groups = (int)g + 1;
		if (!json_is_array(paths) || !json_is_array(weights)) {
			st = bad(err, path, "a manifest group without paths or weights", NULL);
			break;
		}
		for (size_t k = 0; k < json_array_size(paths) && !st; k++) {
			const char *rel = json_string_value(json_array_get(paths, k));
			if (!rel || !safe_rel(rel)) {
				st = bad(err, path, "a shard path that is absolute, climbs out with '..' or is empty:", rel);
				break;
			}
			unsigned char *b;
			size_t n;
			if ((st = shard(ctx, rel, &b, &n, err)))
				break;
			if (n > MAX_SHARD - t->len[g]) {
				free(b);
				st = bad(err, path, "shards over 1 GiB in group of", rel);
				break;
			}
			t->data[g] = dt_xrealloc(t->data[g], t->len[g] + n + 1);
			memcpy(t->data[g] + t->len[g], b, n);
			t->len[g] += n;
			free(b);
		}
		size_t at = 0;
		for (size_t k = 0; k < json_array_size(weights) && !st; k++)
			st = add_weight(s, json_array_get(weights, k), (int)g, &at, err);
		if (!st && at != t->len[g]) {
			char what[96];
			snprintf(what, sizeof(what), "group %zu's shards hold %zu bytes, its weights %zu:", g + 1, t->len[g], at);
			st = bad(err, path, what, json_string_value(json_array_get(paths, 0)));
		}
	}
	json_decref(root);
	if (st)
		dt__warm_source_release(s);
	return st;
}

struct dir_ctx {
	char dir[4096];
};

static enum dt_status shard_from_dir(void *ctx, const char *rel, unsigned char **bytes, size_t *len,
				     struct dt_err *err)
{
	const struct dir_ctx *d = ctx;
	char p[4096 + 1100];
	snprintf(p, sizeof(p), "%s%s", d->dir, rel);
	char *b;
	struct dt_err rerr = DT_ERR_INIT;
	if (dt_read_file(p, MAX_SHARD, &b, len, &rerr))
		return dt_err_set(err, DT_CKPT, "cannot read the TF.js weight shard '%s': %s", p, rerr.msg);
	*bytes = (unsigned char *)b;
	return DT_OK;
}

enum dt_status dt__warm_tfjs_open_file(const void *json, size_t len, const char *path, struct dt__warm_source *s,
				       struct dt_err *err)
{
	struct dir_ctx d;
	const char *slash = strrchr(path, '/');
	snprintf(d.dir, sizeof(d.dir), "%.*s", slash ? (int)(slash - path + 1) : 0, path);
	return dt__warm_tfjs_open(json, len, path, shard_from_dir, &d, s, err);
}
