/*
 * spec_internal.h — what the spec parser's files share (dt__spec_ names):
 * the walker over libyaml's document tree and its checked readers
 * (spec.c), used by the RiseML form and the parameters (spec_riseml.c).
 *
 * Every reader reports "<file>:<line>:<column>: <message>" (DT_CONFIG) at
 * the node it was given. Value readers expand "{{ name }}" templates with
 * the walker's trial values first (params.h); keys are never expanded.
 */
#ifndef DT_LAUNCH_SPEC_INTERNAL_H
#define DT_LAUNCH_SPEC_INTERNAL_H

#include <stdint.h>
#include <yaml.h>

#include "base/err.h"
#include "launch/params.h"
#include "launch/spec.h"

struct dt__walker {
	yaml_document_t *doc;
	const char *path;
	struct dt_err *err;
	/* Templates: the sweep's parameters (NULL: none) and this trial's values. */
	const struct dt_launch_sweep *sw;
	char *const *values;
	unsigned char *used;    /* [nparams]: which parameters a template named, or NULL */
	char **owned;           /* expanded values, freed with the walker (dt__spec_walker_release) */
	int nowned, cap;
	const char *trial_note; /* " (in trial 3: lr=0.1)" when checking a later trial, else NULL */
};

void dt__spec_walker_release(struct dt__walker *w);

enum dt_status dt__spec_at(struct dt__walker *w, const yaml_node_t *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The node's text as written (no templates). */
const char *dt__spec_scalar(const yaml_node_t *n);
/* The node's text with its templates expanded (owned by the walker). */
enum dt_status dt__spec_val(struct dt__walker *w, const yaml_node_t *n, const char **out);
enum dt_status dt__spec_string(struct dt__walker *w, const yaml_node_t *n, const char *key, char **out);
enum dt_status dt__spec_int(struct dt__walker *w, const yaml_node_t *n, const char *key, int64_t min, int64_t max,
			    int64_t *out);
enum dt_status dt__spec_enum(struct dt__walker *w, const yaml_node_t *n, const char *key, const char *const *names,
			     size_t count, int *out);
enum dt_status dt__spec_list(struct dt__walker *w, const yaml_node_t *n, const char *key, char ***items, int *count);

/* Calls `fn` for each key of a mapping, refusing unknown and repeated keys
 * (at most 32 keys). */
typedef enum dt_status (*dt__spec_key_fn)(struct dt__walker *w, const char *key, yaml_node_t *value, void *ctx);
enum dt_status dt__spec_map(struct dt__walker *w, yaml_node_t *map, const char *what, const char *const *keys,
			    size_t nkeys, dt__spec_key_fn fn, void *ctx);
/* The value of `key` in a mapping node, or NULL. */
yaml_node_t *dt__spec_get(struct dt__walker *w, yaml_node_t *map, const char *key);

/* `cpus`, `mem` and `gpus` of a resources mapping into a dt_launch_resources. */
enum dt_status dt__spec_res_key(struct dt__walker *w, const char *key, yaml_node_t *v, void *ctx);

int dt__spec_name_ok(const char *name);
void dt__spec_free_list(char **items, int n);

/* ---- spec_riseml.c ---- */

/* The sweep keys, valid beside `parameters:` (at the top of dtrain's form,
 * under `train:` in RiseML's). */
extern const char *const dt__spec_sweep_keys[];
#define DT__SPEC_NSWEEP_KEYS 8
int dt__spec_is_sweep_key(const char *key);

/* Reads `parameters:` and the sweep keys of mapping `map` into a new sweep
 * (*out NULL when there are no parameters). */
enum dt_status dt__spec_sweep_read(struct dt__walker *w, yaml_node_t *map, struct dt_launch_sweep **out);

/* Whether the document is in RiseML's form (`project:` or `train:` at the top). */
int dt__spec_is_riseml(struct dt__walker *w, yaml_node_t *root);
/* Reads RiseML's form into `s` (the whole document). */
enum dt_status dt__spec_riseml(struct dt__walker *w, yaml_node_t *root, struct dt_launch_spec *s);

#endif
