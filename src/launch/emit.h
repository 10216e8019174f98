/*
 * emit.h — the same experiment beyond one machine: Kubernetes manifests and
 * a Slurm batch script, written from a spec (docs/DEPLOY.md).
 *
 * Kubernetes (Kubeflow TFJob's conventions, engines.md §6.1), written
 * through libyaml's emitter so that any value round-trips:
 *   --emit=k8s: plain objects, no operator needed: per task a headless
 *     Service and a batch/v1 Job named <name>-<job>-<index>, port 2222
 *     (named tfjob-port), the container named `tensorflow`, TF_CONFIG as
 *     the training operator writes it ("<name>-<job>-<index>.<ns>.svc:2222",
 *     no evaluator in `cluster`) built by the same code as the local
 *     launcher's (tasks.h), OUTPUT_DIR on a ReadWriteMany claim mounted at
 *     the output dir, cpus/mem as requests and limits, the restart policy as
 *     Job fields (Never: backoffLimit 0; OnFailure: restartPolicy OnFailure;
 *     ExitCode: a podFailurePolicy that fails the Job on permanent codes);
 *   --emit=tfjob: one kubeflow.org/v1 TFJob with PS/Chief/Worker/Evaluator
 *     replica specs (the operator creates the pods, services and TF_CONFIG),
 *     restartPolicy per replica, runPolicy {cleanPodPolicy: Running,
 *     backoffLimit};
 *   both: every object in the spec's namespace (a Namespace object when it
 *   is not "default"), and a PersistentVolumeClaim "<name>-output" unless
 *   the spec names an existing one (output_claim).
 *
 * Slurm (emit_slurm.c): an sbatch script that runs each task as its own
 * job step with the TF_CONFIG `launch` gives it (docs/DEPLOY.md).
 */
#ifndef DT_LAUNCH_EMIT_H
#define DT_LAUNCH_EMIT_H

#include <stdio.h>

#include "base/err.h"
#include "launch/spec.h"

/* Writes every manifest, "---"-separated, to `out`. */
enum dt_status dt_launch_emit_k8s(const struct dt_launch_spec *s, FILE *out, struct dt_err *err) DT_MUST_CHECK;
/* Writes the TFJob (and the Namespace and claim it needs). */
enum dt_status dt_launch_emit_tfjob(const struct dt_launch_spec *s, FILE *out, struct dt_err *err) DT_MUST_CHECK;
/* Writes the sbatch script; `bin` is the dtrain binary the nodes run. */
enum dt_status dt_launch_emit_slurm(const struct dt_launch_spec *s, const char *bin, FILE *out,
				    struct dt_err *err) DT_MUST_CHECK;

#endif
