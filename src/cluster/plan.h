/*
 * plan.h — launch plans: the TF_CONFIG and flags of every task of a
 * cluster, as t2t-make-tf-configs computes them (tf-config-and-t2t.md §1.2).
 *
 * Given --masters=M0,M1,... and --ps=P0,P1,...:
 *   1. one master means SYNC: cluster {"ps": [P...], "master": [M0]}; the ps
 *      are really the workers (t2t's in-graph sync);
 *   2. several mean ASYNC: cluster {"ps": [P...], "chief": [M0], "worker":
 *      [M1...]}; the first master is the chief;
 *   3. one row per master, in --masters order, then one per ps. A master
 *      row's flags, in this order (t2t's list, joined by single spaces, so
 *      the empty slot of an async row shows as a double space):
 *        --master=grpc://<addr> --ps_replicas=<#ps> --worker_replicas=<#masters>
 *        --worker_gpu=<sync ? 0 : 1> --worker_id=<position in --masters>
 *        --ps_gpu=<sync ? 1 : 0> <"--sync" or ""> --schedule=train
 *        --worker_job='/job:<master|chief|worker>'
 *      a ps row's flags: --schedule=run_std_server;
 *   4. each TF_CONFIG is Python's json.dumps of {"cluster": ..., "task":
 *      {"type": ..., "index": ...}, "environment": "cloud"}: keys in that
 *      order, ", " and ": " separators. The task index is per job (worker
 *      i-1 for master i) while --worker_id stays global.
 *
 * Ours on top: every address must be host:port and unique (t2t prints
 * "--master=grpc://" and "" entries instead), and --evaluator=ADDR adds an
 * "evaluator" job to every row's cluster and an evaluator row
 * (--schedule=continuous_eval); TensorFlow supports no evaluator beside a
 * `master` job, so it needs the async layout. Every TF_CONFIG a plan holds
 * passes dt_tf_config_parse and every row's flags pass
 * dt_cluster_check_flags against it.
 */
#ifndef DT_CLUSTER_PLAN_H
#define DT_CLUSTER_PLAN_H

#include "base/err.h"
#include "cluster/cluster.h"

struct dt_plan_task {
	struct dt_task_ref task;
	char *tf_config; /* JSON text, t2t's bytes (owned) */
	char **flags;    /* [nflags] t2t's tokens: "" for async's --sync slot, */
	int nflags;      /*   --worker_job='/job:x' with its shell quotes (owned) */
};

struct dt_plan {
	int sync;                   /* one master */
	char *banner;               /* "Assuming SYNC ..." without newline (owned) */
	struct dt_plan_task *tasks; /* [ntasks]: masters, then ps, then the evaluator */
	int ntasks;
};

/* Builds the plan from comma-separated address lists. `evaluator` may be
 * NULL or "". `out` is initialised here; release it whatever the result.
 * DT_CONFIG (exit 2) on missing lists or bad, empty or repeated addresses. */
enum dt_status dt_plan_make(const char *masters, const char *ps, const char *evaluator, struct dt_plan *out,
			    struct dt_err *err) DT_MUST_CHECK;
void dt_plan_release(struct dt_plan *plan);

/* t2t's row: the flags joined by single spaces, empty slots included
 * (owned by the caller, free()). */
char *dt_plan_t2t_flags(const struct dt_plan_task *t);

/* `s` as a JSON string literal, quoted and escaped as Python's json.dumps
 * escapes ASCII (owned by the caller, free()). */
char *dt_plan_json_quote(const char *s);

#endif
