/*
 * warm_start_h5.c — Keras's HDF5 weights files as a warm-start source
 * (warm_start.h, items 3a and 3b), read with libhdf5 from an image in
 * memory (the core driver), so a file and a fuzz input take one path.
 *
 * Only the index is read here: layer names, weight names, shapes. Data are
 * read later, for the tensors a variable matched, after their shapes were
 * checked against the model, so a lying shape never sizes an allocation
 * the model did not.
 */
#include "train/warm_start.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* Bounds on what a file's index may claim before we believe it. */
#define MAX_NAMES (1 << 20)   /* entries of one name list */
#define MAX_NAME_BYTES 4096   /* one layer or weight name */
#define MAX_DEPTH 8           /* nested Keras 3 models */

struct h5 {
	hid_t fapl, file;
	char **where;         /* (num) each tensor's dataset path */
	int cap;
};

static void h5_close(struct dt__warm_source *s)
{
	struct h5 *h = s->impl;
	if (!h)
		return;
	for (int i = 0; i < s->num && h->where; i++)
		free(h->where[i]);
	free(h->where);
	if (h->file >= 0)
		H5Fclose(h->file);
	if (h->fapl >= 0)
		H5Pclose(h->fapl);
	free(h);
	s->impl = NULL;
}

static enum dt_status bad(struct dt_err *err, const char *path, const char *what, const char *name)
{
	return dt_err_set(err, DT_CKPT, "warm-start file '%s' is not a readable Keras weights file: %s%s%s%s", path,
			  what, name ? " '" : "", name ? name : "", name ? "'" : "");
}

/* A string-array attribute (numpy 'S' arrays, or h5py's variable-length
 * strings) as heap strings. */
static enum dt_status read_strings(hid_t obj, const char *attr, const char *path, char ***out, int *n,
				   struct dt_err *err)
{
	*out = NULL;
	*n = 0;
	hid_t a = H5Aopen(obj, attr, H5P_DEFAULT);
	if (a < 0)
		return bad(err, path, "no attribute", attr);
	hid_t type = H5Aget_type(a), space = H5Aget_space(a), mem = -1;
	enum dt_status st = DT_OK;
	int nd = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
	hssize_t count = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
	if (type < 0 || H5Tget_class(type) != H5T_STRING || nd < 0 || nd > 1 || count < 0 || count > MAX_NAMES) {
		st = bad(err, path, "not a list of names: attribute", attr);
		goto out;
	}
	char **names = dt_xcalloc((size_t)count + 1, sizeof(*names));
	htri_t var = H5Tis_variable_str(type);
	if (var > 0) {
		mem = H5Tcopy(H5T_C_S1);
		H5Tset_size(mem, H5T_VARIABLE);
		H5Tset_cset(mem, H5Tget_cset(type)); /* h5py writes UTF-8; HDF5 converts no charset */
		char **raw = dt_xcalloc((size_t)count + 1, sizeof(*raw));
		if (H5Aread(a, mem, raw) < 0) {
			st = bad(err, path, "cannot read attribute", attr);
		} else {
			for (hssize_t i = 0; i < count; i++)
				names[i] = dt_xstrdup(raw[i] ? raw[i] : "");
		}
		H5Dvlen_reclaim(mem, space, H5P_DEFAULT, raw); /* also what a failed read filled */
		free(raw);
	} else if (var == 0) {
		size_t width = H5Tget_size(type);
		if (width == 0 || width > MAX_NAME_BYTES) {
			st = bad(err, path, "names too long in attribute", attr);
		} else {
			mem = H5Tcopy(H5T_C_S1);
			H5Tset_size(mem, width);
			H5Tset_strpad(mem, H5T_STR_NULLPAD);
			H5Tset_cset(mem, H5Tget_cset(type));
			char *buf = dt_xcalloc((size_t)count + 1, width);
			if (H5Aread(a, mem, buf) < 0)
				st = bad(err, path, "cannot read attribute", attr);
			for (hssize_t i = 0; !st && i < count; i++) {
				names[i] = dt_xcalloc(1, width + 1);
				memcpy(names[i], buf + (size_t)i * width, width);
			}
			free(buf);
		}
	} else {
		st = bad(err, path, "cannot read attribute", attr);
	}
	if (st) {
		for (hssize_t i = 0; i < count; i++)
			free(names[i]);
		free(names);
	} else {
		*out = names;
		*n = (int)count;
	}
out:
	if (mem >= 0)
		H5Tclose(mem);
	if (type >= 0)
		H5Tclose(type);
	if (space >= 0)
		H5Sclose(space);
	H5Aclose(a);
	return st;
}

static void free_strings(char **s, int n)
{
	for (int i = 0; i < n; i++)
		free(s[i]);
	free(s);
}

/* Records the dataset at `where` (relative to the root) as tensor `name`
 * of `layer`, its shape and type checked. */

/* A dataset's chunks (if chunked) hold at most 64 Mi elements each, as
 * Keras's weights do many times over. */
static int sane_chunks(hid_t d)
{
	hid_t plist = H5Dget_create_plist(d);
	if (plist < 0)
		return 0;
	int ok = 1;
	if (H5Pget_layout(plist) == H5D_CHUNKED) {
		hsize_t dims[32];
		int nd = H5Pget_chunk(plist, 32, dims);
		double elems = 1;
		for (int k = 0; k < nd; k++)
			elems *= (double)dims[k];
		ok = nd > 0 && elems <= (double)(1 << 26);
	}
	H5Pclose(plist);
	return ok;
}

static enum dt_status add_dataset(struct dt__warm_source *s, const char *where, const char *name, const char *layer,
				  int index, struct dt_err *err)
{
	struct h5 *h = s->impl;
	hid_t d = H5Dopen2(h->file, where, H5P_DEFAULT);
	if (d < 0)
		return bad(err, s->path, "no dataset", where);
	hid_t type = H5Dget_type(d), space = H5Dget_space(d);
	enum dt_status st = DT_OK;
	int nd = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
	if (type < 0 || H5Tget_class(type) != H5T_FLOAT) {
		st = bad(err, s->path, "not floating-point numbers: dataset", where);
	} else if (H5Tget_size(type) < 2 || H5Tget_size(type) > 8 || !sane_chunks(d)) {
		/* what libhdf5 would allocate to read it (a conversion buffer of
		 * elements of this size, a chunk) comes from the header: a damaged
		 * one asks for gigabytes */
		st = bad(err, s->path, "a damaged element size or chunk layout: dataset", where);
	} else if (nd < 0 || nd > DT_WARM_MAX_DIMS) {
		st = bad(err, s->path, "a shape of more than 8 dimensions: dataset", where);
	} else {
		hsize_t dims[DT_WARM_MAX_DIMS];
		int64_t shape[DT_WARM_MAX_DIMS];
		if (H5Sget_simple_extent_dims(space, dims, NULL) < 0)
			st = bad(err, s->path, "cannot read the shape of dataset", where);
		for (int k = 0; !st && k < nd; k++) {
			if (dims[k] > (hsize_t)1 << 40)
				st = bad(err, s->path, "an impossible shape: dataset", where);
			shape[k] = (int64_t)dims[k];
		}
		if (!st) {
			dt__warm_add(s, name, layer, index, nd, shape);
			if (s->num > h->cap) {
				h->cap = h->cap ? 2 * h->cap : 16;
				h->where = dt_xrealloc(h->where, (size_t)h->cap * sizeof(*h->where));
			}
			h->where[s->num - 1] = dt_xstrdup(where);
		}
	}
	if (type >= 0)
		H5Tclose(type);
	if (space >= 0)
		H5Sclose(space);
	H5Dclose(d);
	return st;
}

static enum dt_status h5_read(struct dt__warm_source *s, int i, float *out, struct dt_err *err)
{
	struct h5 *h = s->impl;
	hid_t d = H5Dopen2(h->file, h->where[i], H5P_DEFAULT);
	if (d < 0)
		return bad(err, s->path, "no dataset", h->where[i]);
	hid_t space = H5Dget_space(d);
	hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
	enum dt_status st = DT_OK;
	if (n != s->t[i].count)
		st = bad(err, s->path, "a shape that changed under us: dataset", h->where[i]);
	else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
		st = bad(err, s->path, "truncated or damaged data in dataset", h->where[i]);
	if (space >= 0)
		H5Sclose(space);
	H5Dclose(d);
	return st;
}

static int has_link(hid_t loc, const char *name)
{
	return H5Lexists(loc, name, H5P_DEFAULT) > 0;
}

/* Keras 2: `layer_names` on `root` ("/" or "/model_weights"). */
static enum dt_status read_keras2(struct dt__warm_source *s, const char *root, struct dt_err *err)
{
	struct h5 *h = s->impl;
	hid_t g = H5Gopen2(h->file, root, H5P_DEFAULT);
	if (g < 0)
		return bad(err, s->path, "no group", root);
	char **layers;
	int nl;
	enum dt_status st = read_strings(g, "layer_names", s->path, &layers, &nl, err);
	H5Gclose(g);
	for (int i = 0; !st && i < nl; i++) {
		char lpath[2 * MAX_NAME_BYTES + 8];
		snprintf(lpath, sizeof(lpath), "%s/%s", strcmp(root, "/") == 0 ? "" : root, layers[i]);
		if (!layers[i][0] || !has_link(h->file, lpath)) {
			st = bad(err, s->path, "layer_names lists a layer with no group:", layers[i]);
			break;
		}
		hid_t lg = H5Gopen2(h->file, lpath, H5P_DEFAULT);
		if (lg < 0) {
			st = bad(err, s->path, "not a group:", lpath);
			break;
		}
		char **weights;
		int nw;
		st = read_strings(lg, "weight_names", s->path, &weights, &nw, err);
		H5Gclose(lg);
		for (int j = 0; !st && j < nw; j++) {
			char wpath[4 * MAX_NAME_BYTES + 16];
			snprintf(wpath, sizeof(wpath), "%s/%s", lpath, weights[j]);
			if (!weights[j][0] || !has_link(h->file, wpath))
				st = bad(err, s->path, "weight_names lists a weight with no dataset:", weights[j]);
			else
				st = add_dataset(s, wpath, weights[j], layers[i], j, err);
		}
		free_strings(weights, nw);
	}
	free_strings(layers, nl);
	return st;
}

struct walk {
	struct dt__warm_source *s;
	const char *base;
	int depth;
	struct dt_err *err;
	enum dt_status st;
};

static herr_t keras3_layer(hid_t loc, const char *name, const H5L_info_t *info, void *arg);

/* Keras 3: the layers under `base` ("layers", or a nested model's). */
static enum dt_status walk_layers(struct dt__warm_source *s, const char *base, int depth, struct dt_err *err)
{
	struct h5 *h = s->impl;
	if (depth > MAX_DEPTH)
		return bad(err, s->path, "layers nested too deep at", base);
	hid_t g = H5Gopen2(h->file, base, H5P_DEFAULT);
	if (g < 0)
		return bad(err, s->path, "not a group:", base);
	struct walk w = { s, base, depth, err, DT_OK };
	hsize_t idx = 0;
	herr_t r = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, keras3_layer, &w);
	H5Gclose(g);
	if (w.st)
		return w.st;
	if (r < 0)
		return bad(err, s->path, "cannot list the group", base);
	return DT_OK;
}

static herr_t keras3_layer(hid_t loc, const char *name, const H5L_info_t *info, void *arg)
{
	(void)loc;
	(void)info;
	struct walk *w = arg;
	struct dt__warm_source *s = w->s;
	struct h5 *h = s->impl;
	char lpath[4 * MAX_NAME_BYTES], vpath[4 * MAX_NAME_BYTES + 8];
	if (strlen(w->base) + strlen(name) + 16 >= sizeof(lpath)) {
		w->st = bad(w->err, s->path, "a layer path too long under", w->base);
		return -1;
	}
	snprintf(lpath, sizeof(lpath), "%s/%s", w->base, name);
	snprintf(vpath, sizeof(vpath), "%s/vars", lpath);
	if (has_link(h->file, vpath)) {
		for (int j = 0; j < MAX_NAMES; j++) {
			char dpath[4 * MAX_NAME_BYTES + 32];
			snprintf(dpath, sizeof(dpath), "%s/%d", vpath, j);
			if (!has_link(h->file, dpath))
				break;
			char tname[4 * MAX_NAME_BYTES + 32];
			snprintf(tname, sizeof(tname), "%s/vars/%d", name, j);
			if ((w->st = add_dataset(s, dpath, tname, name, j, w->err)))
				return -1;
		}
	}
	snprintf(vpath, sizeof(vpath), "%s/layers", lpath);
	if (has_link(h->file, vpath) && (w->st = walk_layers(s, vpath, w->depth + 1, w->err)))
		return -1;
	return 0;
}

enum dt_status dt__warm_h5_open(const void *bytes, size_t len, const char *path, struct dt__warm_source *s,
				struct dt_err *err)
{
	memset(s, 0, sizeof(*s));
	s->path = path;
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors come back as statuses, not printed */
	struct h5 *h = dt_xcalloc(1, sizeof(*h));
	h->fapl = h->file = -1;
	s->impl = h;
	s->read = h5_read;
	s->close = h5_close;
	/* STRONG: closing the file closes whatever an error path left open in it */
	if ((h->fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0 || H5Pset_fapl_core(h->fapl, 1 << 16, 0) < 0 ||
	    H5Pset_fclose_degree(h->fapl, H5F_CLOSE_STRONG) < 0 ||
	    H5Pset_file_image(h->fapl, (void *)(uintptr_t)bytes, len) < 0 ||
	    (h->file = H5Fopen("dtrain-warm-start.h5", H5F_ACC_RDONLY, h->fapl)) < 0) {
		dt__warm_source_release(s);
		return dt_err_set(err, DT_CKPT, "cannot open warm-start file '%s' as HDF5: truncated or damaged", path);
	}
	enum dt_status st;
	if (H5Aexists(h->file, "layer_names") > 0) {
		s->format = DT_WARM_KERAS2_H5;
		st = read_keras2(s, "/", err);
	} else if (has_link(h->file, "model_weights")) {
		s->format = DT_WARM_KERAS2_H5;
		hid_t g = H5Gopen2(h->file, "model_weights", H5P_DEFAULT);
		int ok = g >= 0 && H5Aexists(g, "layer_names") > 0;
		if (g >= 0)
			H5Gclose(g);
		st = ok ? read_keras2(s, "/model_weights", err)
			: bad(err, path, "a full-model file whose group has no attribute", "layer_names");
	} else if (has_link(h->file, "layers")) {
		s->format = DT_WARM_KERAS3_H5;
		st = walk_layers(s, "layers", 0, err);
	} else {
		st = dt_err_set(err, DT_CKPT, "warm-start file '%s' is HDF5 but not Keras weights: no attribute "
					      "'layer_names' (Keras 2), group 'model_weights' (a full-model .h5) or "
					      "group 'layers' (Keras 3 .weights.h5)", path);
	}
	if (st)
		dt__warm_source_release(s);
	return st;
}
