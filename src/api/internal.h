/*
 * api/internal.h — what the files of src/api share: the public handles'
 * definitions over the internal types. Nothing here is exported; the
 * public functions are declared (and marked DTRAIN_API) in include/dtrain.h.
 */
#ifndef DT_API_INTERNAL_H
#define DT_API_INTERNAL_H

#include "dtrain.h"
#include "base/err.h"
#include "cluster/cluster.h"

struct dtrain_error {
	struct dt_err e;
};

/* &err->e, or NULL for a NULL err: what internal functions take. */
struct dt_err *dt__api_err(dtrain_error *err);

struct dtrain_cluster {
	struct dt_cluster cl;
	int ready;     /* validated: usable by a session */
	int from_code; /* built with dtrain_cluster_new/add_task/set_task */
};

/* The validated cluster a session uses: cl's own, or `local` filled as the
 * one-process cluster (cl NULL, or built in code with no task). NULL with
 * DT_USAGE in e when cl has tasks but no task set. */
const struct dt_cluster *dt__api_cluster(const dtrain_cluster *cl, struct dt_cluster *local, struct dt_err *e);

#endif
