/*
 * The Keras JSON loader's structure (nn/keras.h): which flavour, where the
 * layers are, which layer reads which, in what order to build them.
 * keras_layers.c turns each layer's config into graph nodes.
 */
#include "nn/keras.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/strutil.h"
#include "nn/keras_impl.h"

enum dt_status dt__keras_fail(struct dt__keras *k, const char *layer, const char *cls, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (layer)
		return dt_err_set(k->err, DT_USAGE, "keras model '%s': layer '%s' (%s): %s", k->source, layer,
				  cls ? cls : "?", msg);
	return dt_err_set(k->err, DT_USAGE, "keras model '%s': %s", k->source, msg);
}

const char *dt__keras_class(json_t *obj)
{
	return json_string_value(json_object_get(obj, "class_name"));
}

static const char *layer_name(json_t *l)
{
	const char *n = json_string_value(json_object_get(l, "name"));
	if (!n)
		n = json_string_value(json_object_get(json_object_get(l, "config"), "name"));
	return n;
}

static int lookup(const struct dt__keras *k, const char *name)
{
	for (int i = 0; i < k->n; i++)
		if (strcmp(k->kname[i], name) == 0)
			return i;
	return -1;
}

static enum dt_status remember(struct dt__keras *k, const char *layer, const char *gname)
{
	if (k->n >= DT__KERAS_MAX_LAYERS)
		return dt__keras_fail(k, layer, NULL, "more than %d layers", DT__KERAS_MAX_LAYERS);
	if (strlen(layer) >= sizeof(k->kname[0]))
		return dt__keras_fail(k, NULL, NULL, "layer '%.64s...': its name has %zu bytes, more than the %zu allowed",
				      layer, strlen(layer), sizeof(k->kname[0]) - 1);
	if (lookup(k, layer) >= 0)
		return dt__keras_fail(k, layer, NULL, "a second layer with this name");
	snprintf(k->kname[k->n], sizeof(k->kname[0]), "%s", layer);
	snprintf(k->gname[k->n], sizeof(k->gname[0]), "%s", gname);
	k->n++;
	return DT_OK;
}

/* ---- inbound nodes ----------------------------------------------------------- */

#define MAX_IN 8

/* Keras 3: collects keras_history layer names from args, depth first. */
static int collect3(json_t *v, const char **names, int cap, int n, int depth)
{
	if (depth > 8 || n > cap)
		return cap + 1;
	if (json_is_array(v)) {
		size_t i;
		json_t *e;
		json_array_foreach(v, i, e) n = collect3(e, names, cap, n, depth + 1);
		return n;
	}
	if (!json_is_object(v))
		return n;
	const char *cls = dt__keras_class(v);
	if (cls && strcmp(cls, "__keras_tensor__") == 0) {
		json_t *h = json_object_get(json_object_get(v, "config"), "keras_history");
		const char *name = json_string_value(json_array_get(h, 0));
		if (!name || json_integer_value(json_array_get(h, 2)) != 0)
			return cap + 1;
		if (n < cap)
			names[n] = name;
		return n + 1;
	}
	return n;
}

/* The input layer names of Functional layer l: *nin of them (0 for an
 * InputLayer). A layer called more than once (shared) is refused. */
static enum dt_status inbound(struct dt__keras *k, json_t *l, const char *name, const char *cls, const char **names,
			      int *nin)
{
	json_t *nodes = json_object_get(l, "inbound_nodes");
	*nin = 0;
	if (!nodes || (json_is_array(nodes) && json_array_size(nodes) == 0))
		return DT_OK;
	if (!json_is_array(nodes))
		return dt__keras_fail(k, name, cls, "field 'inbound_nodes' is not a list");
	if (json_array_size(nodes) > 1)
		return dt__keras_fail(k, name, cls,
				      "field 'inbound_nodes': the layer is called %zu times (shared layers are not supported; "
				      "supported: each layer called once)",
				      json_array_size(nodes));
	json_t *node = json_array_get(nodes, 0);
	int n = 0;
	if (json_is_object(node)) { /* Keras 3 */
		n = collect3(json_object_get(node, "args"), names, MAX_IN, 0, 0);
	} else if (json_is_array(node)) { /* Keras 2, TF.js: [["name", node, tensor, {kwargs}], ...] */
		size_t i;
		json_t *e;
		json_array_foreach(node, i, e)
		{
			const char *in = json_string_value(json_array_get(e, 0));
			if (!in || json_integer_value(json_array_get(e, 2)) != 0) {
				n = MAX_IN + 1;
				break;
			}
			if (n < MAX_IN)
				names[n] = in;
			n++;
		}
	}
	if (n < 1 || n > MAX_IN)
		return dt__keras_fail(k, name, cls,
				      "field 'inbound_nodes': want 1 to %d input tensors, each a layer's first output, got %d",
				      MAX_IN, n);
	*nin = n;
	return DT_OK;
}

/* ---- topologies ------------------------------------------------------------------ */

static enum dt_status build_one(struct dt__keras *k, json_t *l, const char *name, const char *cls, int nin,
				const char *const *in_keras)
{
	json_t *cfg = json_object_get(l, "config");
	if (!json_is_object(cfg))
		return dt__keras_fail(k, name, cls, "no 'config' object");
	char out[DT_LAYER_NAME_MAX];
	enum dt_status st;
	if (strcmp(cls, "InputLayer") == 0) {
		st = dt__keras_input(k, name, cfg, out);
	} else {
		const char *in[MAX_IN];
		for (int j = 0; j < nin; j++) {
			const int at = lookup(k, in_keras[j]);
			DT_ASSERT(at >= 0);
			in[j] = k->gname[at];
		}
		st = dt__keras_layer(k, name, cls, cfg, nin, in, out);
	}
	if (st)
		return st;
	json_t *tr = json_object_get(cfg, "trainable");
	if (json_is_false(tr) && strcmp(cls, "InputLayer") != 0) {
		/* every node this layer made: from its first to out */
		if ((st = dt_graph_set_trainable(k->g, out, 0, k->err)))
			return dt_err_prefix(k->err, "keras model '%s': layer '%s'", k->source, name);
	}
	k->layers++;
	return remember(k, name, out);
}

static enum dt_status functional(struct dt__keras *k, json_t *cfg)
{
	json_t *layers = json_object_get(cfg, "layers");
	if (!json_is_array(layers) || json_array_size(layers) == 0)
		return dt__keras_fail(k, NULL, NULL, "the model's config has no 'layers' list");
	const size_t n = json_array_size(layers);
	if (n > DT__KERAS_MAX_LAYERS)
		return dt__keras_fail(k, NULL, NULL, "%zu layers, more than the %d supported", n, DT__KERAS_MAX_LAYERS);
	json_t *outs = json_object_get(cfg, "output_layers");
	json_t *first = json_array_get(outs, 0);
	if (json_is_array(first)) {
		if (json_array_size(outs) != 1)
			return dt__keras_fail(k, NULL, NULL, "field 'output_layers': %zu outputs (supported: one)",
					      json_array_size(outs));
		outs = first;
	}
	k->output = json_string_value(json_array_get(outs, 0));
	if (!k->output)
		return dt__keras_fail(k, NULL, NULL, "field 'output_layers' names no layer");
	char *done = dt_xcalloc(n, 1);
	enum dt_status st = DT_OK;
	/* Keras lists layers in creation order, which is topological for
	 * models it built; repeated passes accept any order. */
	size_t built = 0;
	for (size_t pass = 0; pass < n && built < n && !st; pass++) {
		size_t before = built;
		for (size_t i = 0; i < n && !st; i++) {
			if (done[i])
				continue;
			json_t *l = json_array_get(layers, i);
			const char *name = layer_name(l), *cls = dt__keras_class(l);
			if (!name || !cls) {
				st = dt__keras_fail(k, NULL, NULL, "layer %zu has no name or class_name", i);
				break;
			}
			const char *in[MAX_IN];
			int nin;
			if ((st = inbound(k, l, name, cls, in, &nin)))
				break;
			int ready = 1;
			for (int j = 0; j < nin; j++)
				ready &= lookup(k, in[j]) >= 0;
			if (!ready)
				continue;
			if (nin == 0 && strcmp(cls, "InputLayer") != 0) {
				st = dt__keras_fail(k, name, cls, "field 'inbound_nodes': no inputs (only an InputLayer has none)");
				break;
			}
			st = build_one(k, l, name, cls, nin, in);
			done[i] = 1;
			built++;
		}
		if (!st && built == before) {
			for (size_t i = 0; i < n; i++)
				if (!done[i]) {
					json_t *l = json_array_get(layers, i);
					st = dt__keras_fail(k, layer_name(l), dt__keras_class(l),
							    "field 'inbound_nodes': reads a layer that does not exist or a cycle");
					break;
				}
		}
	}
	free(done);
	if (st)
		return st;
	if (lookup(k, k->output) < 0)
		return dt__keras_fail(k, NULL, NULL, "field 'output_layers': no layer named '%s'", k->output);
	return DT_OK;
}

static enum dt_status sequential(struct dt__keras *k, json_t *cfg)
{
	json_t *layers = json_is_array(cfg) ? cfg : json_object_get(cfg, "layers"); /* Keras 2.2: the list itself */
	if (!json_is_array(layers) || json_array_size(layers) == 0)
		return dt__keras_fail(k, NULL, NULL, "the Sequential model has no 'layers' list");
	const size_t n = json_array_size(layers);
	if (n > DT__KERAS_MAX_LAYERS)
		return dt__keras_fail(k, NULL, NULL, "%zu layers, more than the %d supported", n, DT__KERAS_MAX_LAYERS);
	k->output = layer_name(json_array_get(layers, n - 1));
	enum dt_status st;
	size_t i = 0;
	json_t *l0 = json_array_get(layers, 0);
	const char *cls0 = dt__keras_class(l0);
	char prev[DT_LAYER_NAME_MAX] = "";
	if (cls0 && strcmp(cls0, "InputLayer") != 0) {
		/* no InputLayer: the first layer carries the shape (Keras 2's
		 * batch_input_shape, or the model's build_input_shape) */
		json_t *c0 = json_object_get(l0, "config");
		json_t *shape = json_object_get(c0, "batch_input_shape");
		if (!shape)
			shape = json_object_get(c0, "batch_shape");
		if (!shape && json_is_object(cfg))
			shape = json_object_get(cfg, "build_input_shape");
		if (!shape)
			return dt__keras_fail(k, NULL, NULL,
					      "the Sequential model has no InputLayer and its first layer no "
					      "'batch_input_shape' (build the model before to_json)");
		const char *dt = json_string_value(json_object_get(c0, "dtype"));
		json_t *tmp = json_pack("{s:O, s:s}", "batch_input_shape", shape, "dtype",
					dt && strcmp(dt, "int32") == 0 ? "int32" : "float32");
		st = dt__keras_input(k, "input", tmp, prev);
		json_decref(tmp);
		if (st)
			return st;
	}
	for (; i < n; i++) {
		json_t *l = json_array_get(layers, i);
		const char *name = layer_name(l), *cls = dt__keras_class(l);
		if (!name || !cls)
			return dt__keras_fail(k, NULL, NULL, "layer %zu has no name or class_name", i);
		if (strcmp(cls, "InputLayer") == 0 && i > 0)
			return dt__keras_fail(k, name, cls, "an InputLayer after the first layer of a Sequential model");
		const char *in[1] = { prev };
		json_t *cfgl = json_object_get(l, "config");
		char out[DT_LAYER_NAME_MAX];
		if (!json_is_object(cfgl))
			return dt__keras_fail(k, name, cls, "no 'config' object");
		if (strcmp(cls, "InputLayer") == 0)
			st = dt__keras_input(k, name, cfgl, out);
		else
			st = dt__keras_layer(k, name, cls, cfgl, 1, (const char *const *)in, out);
		if (st)
			return st;
		if (json_is_false(json_object_get(cfgl, "trainable")) && strcmp(cls, "InputLayer") != 0 &&
		    (st = dt_graph_set_trainable(k->g, out, 0, k->err)))
			return st;
		if ((st = remember(k, name, out)))
			return st;
		k->layers++;
		snprintf(prev, sizeof(prev), "%s", out);
	}
	return DT_OK;
}

/* The model object: a bare to_json(), or TF.js's model.json around it. */
static json_t *model_object(json_t *root)
{
	json_t *topo = json_object_get(root, "modelTopology");
	if (json_is_object(topo))
		root = topo;
	json_t *mc = json_object_get(root, "model_config");
	if (json_is_object(mc))
		root = mc;
	return root;
}

enum dt_status dt_keras_parse(const char *text, size_t len, const char *source, struct dt_graph **out,
			      struct dt_keras_info *info, struct dt_err *err)
{
	*out = NULL;
	struct dt_keras_info dummy;
	if (!info)
		info = &dummy;
	memset(info, 0, sizeof(*info));
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return dt_err_set(err, DT_USAGE, "keras model '%s': not JSON: %s at line %d, column %d", source, je.text,
				  je.line, je.column);
	struct dt__keras *k = dt_xcalloc(1, sizeof(*k));
	k->source = source;
	k->err = err;
	k->g = dt_graph_new();
	k->info = info;
	json_t *model = model_object(root);
	const char *cls = dt__keras_class(model);
	json_t *cfg = json_object_get(model, "config");
	k->keras3 = json_object_get(model, "module") != NULL || json_object_get(model, "registered_name") != NULL;
	const char *kv = json_string_value(json_object_get(root, "keras_version"));
	if (!kv)
		kv = json_string_value(json_object_get(json_object_get(root, "modelTopology"), "keras_version"));
	k->activity_mean = !k->keras3 && !(kv && strncmp(kv, "2.", 2) == 0 && kv[2] >= '0' && kv[2] <= '3' &&
					   (kv[3] == '.' || kv[3] == '\0') && !strstr(kv, "-tf"));
	enum dt_status st;
	if (!cls || !cfg)
		st = dt__keras_fail(k, NULL, NULL,
				    "no model: want the object of model.to_json() (class_name and config) or a TF.js "
				    "model.json with modelTopology");
	else if (strcmp(cls, "Sequential") == 0)
		st = sequential(k, cfg);
	else if (strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0)
		st = functional(k, cfg);
	else
		st = dt__keras_fail(k, NULL, NULL, "model class '%s' (supported: Sequential, Functional, Model)", cls);
	if (!st) {
		const int at = lookup(k, k->output);
		if ((st = dt_graph_loss(k->g, k->gname[at], DT_LOSS_SOFTMAX_XENT, err)))
			dt_err_prefix(err, "keras model '%s'", source);
	}
	if (!st) {
		const char *nm = json_string_value(json_object_get(cfg, "name"));
		dt_fmt(info->name, sizeof(info->name), "%s", nm ? nm : "keras");
		info->keras_version = k->keras3 ? 3 : 2;
		info->layers = k->layers;
		int dims[3];
		const int rank = dt_graph_node_dims(k->g, k->gname[lookup(k, k->output)], dims);
		info->classes = rank > 0 ? dims[rank - 1] : 0;
		*out = k->g;
		k->g = NULL;
	}
	dt_graph_free(k->g);
	free(k);
	json_decref(root);
	if (st && err)
		err->status = DT_USAGE; /* every fault in the file is the user's to fix */
	return st ? DT_USAGE : DT_OK;
}

enum dt_status dt_keras_load(const char *path, int max_batch, struct dt_model **out, struct dt_keras_info *info,
			     struct dt_err *err)
{
	*out = NULL;
	char *text = NULL;
	size_t len = 0;
	enum dt_status st = dt_read_file(path, (size_t)64 << 20, &text, &len, err);
	if (st)
		return dt_err_prefix(err, "--keras_model");
	struct dt_keras_info local;
	if (!info)
		info = &local;
	struct dt_graph *g = NULL;
	st = dt_keras_parse(text, len, path, &g, info, err);
	free(text);
	if (st)
		return st;
	st = dt_model_from_graph(g, info->name, max_batch, out, err);
	dt_graph_free(g);
	if (st)
		return dt_err_prefix(err, "keras model '%s'", path);
	return DT_OK;
}
