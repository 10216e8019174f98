/*
 * keras_h5.c — writing a Keras HDF5 weights file from a checkpoint
 * (keras_h5.h). The file is built in memory by HDF5's core driver and
 * written with dt_write_file_atomic, so a crash never leaves half a file.
 */
#include "train/keras_h5.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "nn/model.h"
#include "train/checkpoint.h"
#include "train/warm_start.h"

/* HDF5 keeps attributes in the object header, at most 64 KiB (Keras's
 * HDF5_OBJECT_HEADER_LIMIT); larger lists would need Keras's chunking. */
#define ATTR_LIMIT 64512

struct var {
	const struct dt_st_tensor_info *t;
	char layer[DT_VAR_NAME_MAX];
	const char *short_name; /* after the layer's '/' */
	int layer_rank, rank;   /* layer order; Keras's order inside the layer */
};

int dt__keras_weight_rank(const char *v)
{
	static const char *const order[] = { "kernel", "depthwise_kernel", "embeddings", "gamma", "pointwise_kernel",
					     "beta", "bias", "moving_mean", "moving_variance" };
	static const int rank[] = { 0, 0, 0, 0, 1, 1, 2, 3, 4 };
	for (size_t i = 0; i < DT_ARRAY_LEN(order); i++)
		if (strcmp(v, order[i]) == 0)
			return rank[i];
	return 5;
}

static int cmp_var(const void *a, const void *b)
{
	const struct var *x = a, *y = b;
	if (x->layer_rank != y->layer_rank)
		return x->layer_rank < y->layer_rank ? -1 : 1;
	int c = strcmp(x->layer, y->layer);
	if (c)
		return c;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return strcmp(x->short_name, y->short_name);
}

/* An optimizer slot: "<var>/Adam" and the like where <var> is a tensor. */
static int is_slot(const struct dt_st_file *f, const char *name)
{
	static const char *const suffixes[] = { "/Adam", "/Adam_1", "/Momentum", "/Adagrad" };
	size_t n = strlen(name);
	for (size_t i = 0; i < DT_ARRAY_LEN(suffixes); i++) {
		size_t s = strlen(suffixes[i]);
		if (n > s && strcmp(name + n - s, suffixes[i]) == 0) {
			char base[DT_VAR_NAME_MAX + 16];
			snprintf(base, sizeof(base), "%.*s", (int)(n - s), name);
			if (dt_st_find(f, base))
				return 1;
		}
	}
	return 0;
}

/* A fixed-length byte-string array attribute, as numpy's 'S' arrays. */
static int write_names(hid_t obj, const char *attr, const char *const *names, size_t n)
{
	size_t width = 1;
	for (size_t i = 0; i < n; i++)
		if (strlen(names[i]) > width)
			width = strlen(names[i]);
	if (width * n > ATTR_LIMIT)
		return -2;
	char *buf = dt_xcalloc(n ? n : 1, width);
	for (size_t i = 0; i < n; i++)
		memcpy(buf + i * width, names[i], strlen(names[i]));
	hsize_t dims[1] = { n };
	hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate_simple(1, dims, NULL), a = -1;
	int rc = -1;
	if (type >= 0 && H5Tset_size(type, width) >= 0 && H5Tset_strpad(type, H5T_STR_NULLPAD) >= 0 && space >= 0 &&
	    (a = H5Acreate2(obj, attr, type, space, H5P_DEFAULT, H5P_DEFAULT)) >= 0 && H5Awrite(a, type, buf) >= 0)
		rc = 0;
	if (a >= 0)
		H5Aclose(a);
	if (space >= 0)
		H5Sclose(space);
	if (type >= 0)
		H5Tclose(type);
	free(buf);
	return rc;
}

static int write_string(hid_t obj, const char *attr, const char *value)
{
	const char *one[1] = { value };
	hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate(H5S_SCALAR), a = -1;
	int rc = -1;
	if (type >= 0 && H5Tset_size(type, strlen(value)) >= 0 && space >= 0 &&
	    (a = H5Acreate2(obj, attr, type, space, H5P_DEFAULT, H5P_DEFAULT)) >= 0 && H5Awrite(a, type, one[0]) >= 0)
		rc = 0;
	if (a >= 0)
		H5Aclose(a);
	if (space >= 0)
		H5Sclose(space);
	if (type >= 0)
		H5Tclose(type);
	return rc;
}

/* Reads tensor t's floats from the checkpoint file. */
static enum dt_status read_tensor(FILE *in, const struct dt_st_file *f, const struct dt_st_tensor_info *t,
				  float **out, struct dt_err *err)
{
	size_t bytes = (size_t)(t->end - t->begin);
	float *v = dt_xmalloc(bytes ? bytes : 1);
	if (fseeko(in, (off_t)(f->data_start + t->begin), SEEK_SET) != 0 || fread(v, 1, bytes, in) != bytes) {
		free(v);
		return dt_err_set(err, DT_CKPT, "cannot read tensor '%s' of '%s'", t->name, f->path);
	}
	*out = v;
	return DT_OK;
}

/* Orders the variables: by the model when given (checking it matches). */
static enum dt_status order_vars(const struct dt_st_file *f, const struct dt_model *m, struct var *vars, int n,
				 struct dt_err *err)
{
	if (m && dt_model_num_variables(m) != n)
		return dt_err_set(err, DT_USAGE, "the Keras model has %d variables but the checkpoint '%s' has %d",
				  dt_model_num_variables(m), f->path, n);
	for (int i = 0; i < n; i++) {
		vars[i].layer_rank = 0;
		if (!m)
			continue;
		int found = -1;
		for (int j = 0; j < n && found < 0; j++)
			if (strcmp(dt_model_variable(m, j)->name, vars[i].t->name) == 0)
				found = j;
		if (found < 0)
			return dt_err_set(err, DT_USAGE, "checkpoint variable '%s' is not a variable of the Keras model",
					  vars[i].t->name);
		const struct dt_variable *mv = dt_model_variable(m, found);
		int same = mv->ndim == vars[i].t->ndim;
		for (int d = 0; same && d < mv->ndim; d++)
			same = mv->shape[d] == vars[i].t->shape[d];
		if (!same)
			return dt_err_set(err, DT_USAGE, "variable '%s' has another shape in the Keras model than in the "
					  "checkpoint", mv->name);
		/* the layer's rank is the model index of its first variable */
		int first = found;
		for (int j = 0; j < found; j++) {
			const char *nj = dt_model_variable(m, j)->name;
			size_t ll = strlen(vars[i].layer);
			if (strncmp(nj, vars[i].layer, ll) == 0 && nj[ll] == '/' && !strchr(nj + ll + 1, '/')) {
				first = j;
				break;
			}
		}
		vars[i].layer_rank = first;
	}
	qsort(vars, (size_t)n, sizeof(struct var), cmp_var);
	return DT_OK;
}

static enum dt_status write_h5(const struct dt_st_file *f, struct var *vars, int n, const char *h5_path,
			       int *layers_out, struct dt_err *err)
{
	FILE *in = fopen(f->path, "rb");
	if (!in)
		return dt_err_set(err, DT_CKPT, "cannot open '%s'", f->path);
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors come back as statuses, not printed */
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), lcpl = H5Pcreate(H5P_LINK_CREATE), file = -1;
	enum dt_status st = DT_OK;
	const char **layer_names = dt_xcalloc((size_t)n + 1, sizeof(char *));
	const char **weight_names = dt_xcalloc((size_t)n + 1, sizeof(char *));
	char **owned = dt_xcalloc((size_t)n + 1, sizeof(char *));
	int nl = 0;
	if (fapl < 0 || lcpl < 0 || H5Pset_fapl_core(fapl, 1 << 20, 0) < 0 ||
	    H5Pset_create_intermediate_group(lcpl, 1) < 0 ||
	    (file = H5Fcreate("dtrain-keras-weights.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl)) < 0) {
		st = dt_err_set(err, DT_IO, "cannot create an HDF5 file in memory for '%s'", h5_path);
		goto done;
	}
	for (int i = 0; i < n && !st;) {
		int j = i;
		while (j < n && strcmp(vars[j].layer, vars[i].layer) == 0)
			j++;
		layer_names[nl++] = vars[i].layer;
		hid_t g = H5Gcreate2(file, vars[i].layer, lcpl, H5P_DEFAULT, H5P_DEFAULT);
		if (g < 0) {
			st = dt_err_set(err, DT_IO, "cannot create HDF5 group '%s' in '%s'", vars[i].layer, h5_path);
			break;
		}
		for (int k = i; k < j && !st; k++) {
			size_t len = strlen(vars[k].t->name) + 3;
			owned[k] = dt_xmalloc(len);
			snprintf(owned[k], len, "%s:0", vars[k].t->name);
			weight_names[k - i] = owned[k];
			float *v = NULL;
			if ((st = read_tensor(in, f, vars[k].t, &v, err)))
				break;
			hsize_t dims[DT_ST_MAX_DIMS];
			for (int d = 0; d < vars[k].t->ndim; d++)
				dims[d] = (hsize_t)vars[k].t->shape[d];
			hid_t space = vars[k].t->ndim ? H5Screate_simple(vars[k].t->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
			hid_t ds = space < 0 ? -1 : H5Dcreate2(g, owned[k], H5T_IEEE_F32LE, space, lcpl, H5P_DEFAULT,
							      H5P_DEFAULT);
			if (ds < 0 || H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
				st = dt_err_set(err, DT_IO, "cannot write HDF5 dataset '%s/%s' of '%s'", vars[i].layer,
						owned[k], h5_path);
			if (ds >= 0)
				H5Dclose(ds);
			if (space >= 0)
				H5Sclose(space);
			free(v);
		}
		if (!st && write_names(g, "weight_names", weight_names, (size_t)(j - i)) != 0)
			st = dt_err_set(err, DT_IO, "cannot write the weight_names of layer '%s' in '%s'", vars[i].layer,
					h5_path);
		H5Gclose(g);
		i = j;
	}
	if (!st) {
		int rc = write_names(file, "layer_names", layer_names, (size_t)nl);
		if (rc == 0)
			rc = write_string(file, "backend", "tensorflow");
		if (rc == 0)
			rc = write_string(file, "keras_version", "2.15.0");
		if (rc == -2)
			st = dt_err_set(err, DT_IO, "the %d layer names do not fit one HDF5 attribute (64 KiB) of '%s'", nl,
					h5_path);
		else if (rc != 0)
			st = dt_err_set(err, DT_IO, "cannot write the root attributes (%d layers) of '%s'", nl, h5_path);
	}
	if (!st && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0)
		st = dt_err_set(err, DT_IO, "cannot flush the HDF5 image of '%s'", h5_path);
	if (!st) {
		ssize_t size = H5Fget_file_image(file, NULL, 0);
		void *image = size > 0 ? dt_xmalloc((size_t)size) : NULL;
		if (!image || H5Fget_file_image(file, image, (size_t)size) != size)
			st = dt_err_set(err, DT_IO, "cannot get the HDF5 image of '%s'", h5_path);
		else
			st = dt_write_file_atomic(h5_path, image, (size_t)size, err);
		free(image);
	}
done:
	if (file >= 0)
		H5Fclose(file);
	if (lcpl >= 0)
		H5Pclose(lcpl);
	if (fapl >= 0)
		H5Pclose(fapl);
	for (int k = 0; k < n; k++)
		free(owned[k]);
	free(owned);
	free(layer_names);
	free(weight_names);
	fclose(in);
	if (layers_out)
		*layers_out = nl;
	return st;
}

enum dt_status dt_keras_h5_export(const char *ckpt_path, const struct dt_model *order, const char *h5_path,
				  int *layers, int *vars_out, struct dt_err *err)
{
	struct dt_st_file *f;
	enum dt_status st = dt_st_open(ckpt_path, &f, err);
	if (st)
		return st;
	if ((st = dt_ckpt_verify(f, NULL, err))) {
		dt_st_free(f);
		return st;
	}
	struct var *vars = dt_xcalloc((size_t)f->num_tensors + 1, sizeof(struct var));
	int n = 0;
	for (int i = 0; i < f->num_tensors && !st; i++) {
		const struct dt_st_tensor_info *t = &f->tensors[i];
		if (strcmp(t->name, "global_step") == 0 || is_slot(f, t->name))
			continue;
		const char *slash = strrchr(t->name, '/');
		if (t->dtype != DT_ST_F32 || !slash || slash == t->name || (size_t)(slash - t->name) >= DT_VAR_NAME_MAX) {
			st = dt_err_set(err, DT_USAGE, "checkpoint variable '%s' is not a Keras '<layer>/<weight>' float32 "
					"variable", t->name);
			break;
		}
		vars[n].t = t;
		snprintf(vars[n].layer, sizeof(vars[n].layer), "%.*s", (int)(slash - t->name), t->name);
		vars[n].short_name = slash + 1;
		vars[n].rank = dt__keras_weight_rank(slash + 1);
		n++;
	}
	if (!st && n == 0)
		st = dt_err_set(err, DT_CKPT, "checkpoint '%s' has no variables", ckpt_path);
	if (!st)
		st = order_vars(f, order, vars, n, err);
	if (!st)
		st = write_h5(f, vars, n, h5_path, layers, err);
	if (vars_out)
		*vars_out = n;
	free(vars);
	dt_st_free(f);
	return st;
}
