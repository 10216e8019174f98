/*
 * placement.h — which parameter server holds which rows of which variable.
 *
 * TensorFlow's recipe (replica_device_setter with a greedy load balancer and
 * min_max_variable_partitioner): a variable larger than a minimum slice
 * (256 KiB) is split along its first axis (rows) into
 *     min(num_ps, ceil(bytes / min_slice_bytes))
 * slices of nearly equal row counts; then all slices and unsplit variables are
 * assigned greedily, largest first, each to the least-loaded server (ties go
 * to the lower index). Variables are row-major and contiguous in the flat
 * parameter buffer, so every slice is one contiguous element range
 * [offset, offset + count) of it — pushes, pulls and checkpoints move ranges.
 *
 * The map is a pure function of the variables (names, shapes, order) and
 * the number of servers: every task computes the same one, with no
 * coordination, and prints it at start-up.
 */
#ifndef DT_DIST_PLACEMENT_H
#define DT_DIST_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "nn/model.h"

#define DT_PLACEMENT_MIN_SLICE_BYTES (256u * 1024u)

struct dt_shard {
	int variable;      /* index into the variables given */
	int slice;         /* 0-based slice of that variable */
	int num_slices;    /* slices the variable was split into (1: whole) */
	int64_t row_begin, row_end; /* rows [begin, end) of the first axis */
	size_t offset;     /* first element in the flat buffer */
	size_t count;      /* elements */
	int ps;            /* server that holds it */
	enum dt_var_kind kind; /* its variable's: how the ps updates it (distribute/ps_server.h) */
	float decay;       /* DT_VAR_MOVING_AVERAGE: its variable's */
};

struct dt_placement {
	int num_ps;
	int num_shards;
	struct dt_shard *shards;   /* ordered by (variable, slice); owned */
	size_t *ps_elements;       /* (num_ps) elements held by each server; owned */
	size_t *ps_shards;         /* (num_ps) shards held by each server; owned */
};

/* Computes the map for `n` variables over num_ps >= 1 servers. */
enum dt_status dt_placement_compute(const struct dt_variable *vars, int n, int num_ps, size_t min_slice_bytes,
				    struct dt_placement *out, struct dt_err *err) DT_MUST_CHECK;
void dt_placement_release(struct dt_placement *p);

/* Prints the map as a table: one row per shard, then bytes per server. */
void dt_placement_print(const struct dt_placement *p, const struct dt_variable *vars, FILE *out);

#endif
