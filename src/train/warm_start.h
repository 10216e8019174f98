/*
 * warm_start.h — starting a model from weights trained elsewhere
 * (--warm_start_from, t2t's and Estimator's name), matched as Keras
 * matches them.
 *
 * Sources, recognized by their content, not their name:
 *   1. a directory: a dtrain output dir, its newest checkpoint (the state
 *      file's, train/checkpoint.h), fully verified (checksums, signature);
 *   2. a safetensors file (first 8 bytes: the header length, then '{'): a
 *      dtrain checkpoint (verified the same way) or any other safetensors
 *      file; tensors match variables by exact name (`dense_1/kernel`);
 *      `global_step` and optimizer slots are never loaded (Estimator's
 *      warm start loads variables only); F32, F16, BF16 and F64 tensors are
 *      converted to float;
 *   3. an HDF5 file (signature 89 48 44 46 0d 0a 1a 0a at byte 0):
 *      a. Keras 2's save_weights layout (keras_h5.h): root attribute
 *         `layer_names`, a group per layer with attribute `weight_names`,
 *         a dataset per name; a Keras full-model `.h5` holds the same under
 *         its group `model_weights`;
 *      b. Keras 3's `.weights.h5`: `layers/<layer name>/vars/0`, `vars/1`,
 *         ... in the order the layer created them.
 *      A layer's weights match its variables in Keras's order for the layer
 *      (kernel, bias; gamma, beta, moving_mean, moving_variance; ...: the
 *      order of keras_h5.h), so batch norm's moving statistics are loaded
 *      too. Layers match by name; a Keras 2 file none of whose layer
 *      names is the model's (another model's automatic names) matches by
 *      layer order when both have as many layers with weights, as Keras's
 *      plain load_weights does.
 *   4. a TF.js layers model (JSON beginning with '{'): its
 *      `weightsManifest` and the weight shards beside it, float32 or
 *      quantized (uint8, uint16, float16), matched by layer name and
 *      order inside the layer (warm_start_tfjs.c has the layout);
 *      JSON without a manifest (a Keras JSON) is DT_USAGE.
 *   5. a Keras 3 `.keras` archive (zip, "PK\3\4"): its member
 *      model.weights.h5, read as 3b (warm_start_keras.c).
 *
 * `vars` (may be NULL or ""): a POSIX extended regular expression
 * (Estimator's vars_to_warm_start); only variables whose names it matches
 * are loaded, the others stay at their initializer.
 *
 * Errors, and no half-loaded model: everything is read and checked into a
 * staging copy before the model's parameters change. A matched variable
 * whose shape differs → DT_USAGE (exit 2) naming the variable, the file's
 * tensor and both shapes; a file that is truncated, damaged or lies about
 * its shapes or types → DT_CKPT (exit 4) naming the file and the tensor; a
 * path that cannot be read → DT_IO. A source that matches no variable at
 * all → DT_USAGE.
 *
 * The report (struct dt_warm_report, and one log line each): variables
 * loaded, variables left at their initializer, tensors of the file not
 * used, each with up to a few names.
 */
#ifndef DT_TRAIN_WARM_START_H
#define DT_TRAIN_WARM_START_H

#include <stddef.h>
#include <stdint.h>
#include "base/err.h"
#include "nn/model.h"

/* Whole files are read into memory; this caps them (1 GiB). */
#define DT_WARM_MAX_FILE (1ull << 30)
/* Names shown per report line before "and N more". */
#define DT_WARM_REPORT_NAMES 8
/* A file's tensor with more dimensions is refused (Keras's weights have at most 5). */
#define DT_WARM_MAX_DIMS 8

enum dt_warm_format {
	DT_WARM_DTRAIN,      /* a dtrain checkpoint (file or output dir) */
	DT_WARM_SAFETENSORS, /* any other safetensors file */
	DT_WARM_KERAS2_H5,   /* Keras 2 save_weights / full-model .h5 */
	DT_WARM_KERAS3_H5,   /* Keras 3 .weights.h5 */
	DT_WARM_TFJS,        /* TF.js model.json + weight shards */
	DT_WARM_KERAS_ARCHIVE, /* Keras 3 .keras (zip) */
};
const char *dt_warm_format_name(enum dt_warm_format f);

struct dt_warm_report {
	enum dt_warm_format format;
	char path[4096];        /* the file read (the checkpoint, for a dir) */
	int loaded, left, unused;
	int by_order;           /* Keras 2 layers matched by order */
	int64_t global_step;    /* a dtrain checkpoint's; 0 for other sources */
};

/* Loads `path` into m's parameters (which the caller has initialized: the
 * variables not loaded keep those values). `report` may be NULL; it is
 * logged either way. */
enum dt_status dt_warm_start(struct dt_model *m, const char *path, const char *vars, struct dt_warm_report *report,
			     struct dt_err *err) DT_MUST_CHECK;

/* The one start of a run's variables when there is no checkpoint to
 * restore: every variable from its initializer (`seed`), then, when `from`
 * is set (not NULL or ""), the warm start above. What the local session,
 * sync and all-reduce chiefs (dt__session_restore_or_init) and the ps
 * chief (ps_recovery.c) call. */
enum dt_status dt_warm_start_init(struct dt_model *m, uint64_t seed, const char *from, const char *vars,
				  struct dt_err *err) DT_MUST_CHECK;

/* ---- the pieces, shared by warm_start*.c and the fuzz targets ---- */

/* One tensor of a source, as read from its index: for HDF5, `layer` and
 * `index` (its place among the layer's weights); for safetensors, `name`. */
struct dt__warm_tensor {
	char *name;             /* full name, for messages and exact matching; owned */
	char *layer;            /* owned; NULL for safetensors */
	int index;              /* within the layer */
	int ndim;               /* 0..DT_WARM_MAX_DIMS */
	int64_t shape[DT_WARM_MAX_DIMS];
	int64_t count;          /* elements */
	int used;               /* matched to a variable */
};

struct dt__warm_source {
	enum dt_warm_format format;
	const char *path;       /* borrowed, for messages */
	int64_t global_step;    /* a dtrain checkpoint's, else 0 */
	int num;
	struct dt__warm_tensor *t;  /* (num) in file order */
	/* Reads tensor i's `count` floats into out (DT_CKPT when the data
	 * is not there or not floats). */
	enum dt_status (*read)(struct dt__warm_source *s, int i, float *out, struct dt_err *err);
	void *impl;
	void (*close)(struct dt__warm_source *s);
};
void dt__warm_source_release(struct dt__warm_source *s);
/* Adds a tensor; the strings are copied. Returns it. */
struct dt__warm_tensor *dt__warm_add(struct dt__warm_source *s, const char *name, const char *layer, int index,
				     int ndim, const int64_t *shape);

/* Recognizes and opens a source held in memory (`bytes` borrowed until
 * release): what dt_warm_start does with a file's bytes, and the fuzz
 * target's entry point (a TF.js model.json's shards are read from `path`'s
 * directory). DT_CKPT for bytes that are no source; DT_USAGE for JSON
 * with no weights manifest. */
enum dt_status dt__warm_open_bytes(const void *bytes, size_t len, const char *path, struct dt__warm_source *s,
				   struct dt_err *err) DT_MUST_CHECK;
/* Opens an HDF5 image held in memory (`bytes` borrowed until release),
 * either Keras layout; DT_CKPT for anything else. */
enum dt_status dt__warm_h5_open(const void *bytes, size_t len, const char *path, struct dt__warm_source *s,
				struct dt_err *err) DT_MUST_CHECK;

/* A TF.js model.json held in memory; its shards come from `shard` (the
 * caller's: the files beside it, or the fuzz target's bytes), each a heap
 * buffer the reader frees. */
enum dt_status dt__warm_tfjs_open(const void *json, size_t len, const char *path,
				  enum dt_status (*shard)(void *ctx, const char *rel, unsigned char **bytes, size_t *len,
							  struct dt_err *err),
				  void *ctx, struct dt__warm_source *s, struct dt_err *err) DT_MUST_CHECK;
/* The same with the shards read from model.json's directory. */
enum dt_status dt__warm_tfjs_open_file(const void *json, size_t len, const char *path, struct dt__warm_source *s,
				       struct dt_err *err) DT_MUST_CHECK;
/* A .keras archive held in memory (its model.weights.h5 is copied out). */
enum dt_status dt__warm_keras_open(const void *bytes, size_t len, const char *path, struct dt__warm_source *s,
				   struct dt_err *err) DT_MUST_CHECK;
/* IEEE half to float (safetensors' F16, TF.js's float16 quantization). */
float dt__half_to_float(uint16_t h);

/* Keras's order of a weight inside its layer (keras_h5.c's): kernel 0 ...
 * moving_variance 4, others 5. */
int dt__keras_weight_rank(const char *short_name);

#endif
