/*
 * keras_impl.h — module-shared: the state of one Keras JSON load, shared by
 * keras.c (the file's structure: flavours, Sequential and Functional
 * topologies, inbound nodes) and keras_layers.c (each layer's config into
 * graph nodes).
 */
#ifndef DT_NN_KERAS_IMPL_H
#define DT_NN_KERAS_IMPL_H

#include <jansson.h>

#include "nn/graph.h"
#include "nn/keras.h"
#include "nn/layers.h"

#define DT__KERAS_MAX_LAYERS 512

struct dt__keras {
	struct dt_graph *g;
	const char *source;
	struct dt_err *err;
	int keras3;
	/* an activity_regularizer's penalty divided by the batch size: tf.keras
	 * (TF 2) does, Keras 3 and standalone Keras up to 2.3 do not */
	int activity_mean;
	const char *output;                        /* the output layer's Keras name */
	int n;                                     /* layers built so far */
	char kname[DT__KERAS_MAX_LAYERS][DT_LAYER_NAME_MAX]; /* Keras layer name */
	char gname[DT__KERAS_MAX_LAYERS][DT_LAYER_NAME_MAX]; /* the graph node giving its output */
	int extra;                                 /* helper nodes made (for unique names) */
	int layers;                                /* Keras layers built */
	struct dt_keras_info *info;                /* inputs are recorded as they are read */
};

/* DT_USAGE: "'<source>': layer '<layer>' (<cls>): <message>". */
enum dt_status dt__keras_fail(struct dt__keras *k, const char *layer, const char *cls, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Adds the graph nodes of one Keras layer reading graph nodes in[0..nin);
 * writes the node giving its output into out (DT_LAYER_NAME_MAX). */
enum dt_status dt__keras_layer(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, int nin,
			       const char *const *in, char *out);
/* An InputLayer (or a Sequential's first layer's batch_input_shape). */
enum dt_status dt__keras_input(struct dt__keras *k, const char *layer, json_t *cfg, char *out);
/* Regularizer and constraint fields (keras_reg.c): whether class cls
 * reads field key, and reading them onto the nodes a layer made: `node`
 * the main one (its variables), `out` the one giving its output. */
int dt__keras_reg_field(const char *cls, const char *key);
enum dt_status dt__keras_reg(struct dt__keras *k, const char *layer, const char *cls, json_t *cfg, const char *node,
			     const char *out);
/* The class name of a Keras object (Keras 2 or 3), or NULL. */
const char *dt__keras_class(json_t *obj);

#endif
