/*
 * emit.h — the same experiment beyond one machine: Kubernetes manifests and
 * a Slurm batch script, written from a spec (docs/DEPLOY.md).
 *
 * Kubernetes (Kubeflow TFJob's conventions, engines.md §6.1): per task a
 * headless Service and a batch/v1 Job named <name>-<job>-<index>, port 2222
 * (named tfjob-port), the container named `tensorflow`, TF_CONFIG with the
 * services' addresses "<name>-<job>-<index>:2222" built by the same code as
 * the local launcher's (tasks.h), OUTPUT_DIR on a ReadWriteMany volume
 * claim "<name>-output" mounted at the output dir, cpus/mem as limits, and
 * the restart policy as Job fields (Never: backoffLimit 0; OnFailure:
 * restartPolicy OnFailure; ExitCode: a podFailurePolicy that fails the Job
 * on permanent codes and retries the others).
 *
 * Slurm: an sbatch script that runs the ps and trainers as one
 * `srun --multi-prog` step: ranks 0..P-1 the ps (--schedule=run_std_server),
 * the rest workers (worker 0 is the chief), all resolved by dtrain's Slurm
 * resolver (--ps_replicas=P); an evaluator runs as a second step beside it.
 */
#ifndef DT_LAUNCH_EMIT_H
#define DT_LAUNCH_EMIT_H

#include <stdio.h>

#include "base/err.h"
#include "launch/spec.h"

/* Writes every manifest, "---"-separated, to `out`. */
enum dt_status dt_launch_emit_k8s(const struct dt_launch_spec *s, FILE *out, struct dt_err *err) DT_MUST_CHECK;
/* Writes the sbatch script; `bin` is the dtrain binary the nodes run. */
enum dt_status dt_launch_emit_slurm(const struct dt_launch_spec *s, const char *bin, FILE *out,
				    struct dt_err *err) DT_MUST_CHECK;

#endif
