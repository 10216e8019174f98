/*
 * slurm.h — Slurm's compressed lists, expanded as TensorFlow's
 * SlurmClusterResolver expands them.
 *
 *   hostlist        "n[1-2],m5,o[3-4,6,7-9]"  ->  n1 n2 m5 o3 o4 o6 o7 o8 o9
 *                   "node[01-03,07]"          ->  node01 node02 node03 node07
 *                   "rack[1-2]-n[1-2]"        ->  rack1-n1 rack1-n2 rack2-n1 rack2-n2
 *   tasks per node  "3(x2),2,1"               ->  3 3 2 1
 *
 * A range keeps the width of its first number ("01-10" gives 01..10, as
 * Python's zfill does). Several brackets in one name multiply out (Slurm
 * allows it; TensorFlow's expander does not). Errors use TensorFlow's
 * wording: 'Invalid hostlist format "<list>": <why>'.
 */
#ifndef DT_CLUSTER_SLURM_H
#define DT_CLUSTER_SLURM_H

#include "base/err.h"

/* Most names one list may expand to (a guard against "n[0-99999999]"). */
#define DT_SLURM_MAX_HOSTS 65536

/* Expands `list` into *hosts (an array of *count owned strings; free with
 * dt_slurm_hosts_free). DT_CONFIG on a malformed list. */
enum dt_status dt_slurm_expand_hostlist(const char *list, char ***hosts, int *count,
					struct dt_err *err) DT_MUST_CHECK;
void dt_slurm_hosts_free(char **hosts, int count);

/* Expands SLURM_STEP_TASKS_PER_NODE into *counts (owned, free()). */
enum dt_status dt_slurm_expand_tasks_per_node(const char *list, int **counts, int *count,
					      struct dt_err *err) DT_MUST_CHECK;

#endif
