#!/usr/bin/env node
// k8s_validate.js — validates dtrain's Kubernetes output against the
// Kubernetes API schemas (npm `kubernetes-models`, whose classes validate
// with the OpenAPI schemas of the Kubernetes release they were generated
// from) and against the TFJob rules of Kubeflow's training operator.
//
// usage: node k8s_validate.js NODE_MODULES FILE...
//
// NODE_MODULES holds kubernetes-models and js-yaml (the test installs them
// under build/). Every YAML document of every FILE must be a known kind:
// v1 Namespace, Service, PersistentVolumeClaim; batch/v1 Job; and
// kubeflow.org/v1 TFJob. No npm package carries the TFJob CRD's schema, so
// its rules that matter are written out below from the operator's CRD
// (kubeflow/training-operator, manifests/base/crds/kubeflow.org_tfjobs.yaml
// and pkg/apis/kubeflow.org/v1/tensorflow_types.go + common_types.go):
//   - spec.tfReplicaSpecs is required, its keys are replica types among
//     Chief, Master, PS, Worker, Evaluator (TFReplicaType), at most one of
//     Chief/Master and one replica of it, and at most one Evaluator;
//   - each ReplicaSpec: replicas an integer >= 1 (int32), restartPolicy one
//     of Always, OnFailure, Never, ExitCode (RestartPolicy), template a
//     PodTemplateSpec (required by the operator) whose pod spec is a valid
//     Kubernetes PodSpec, with a container named "tensorflow" that exposes
//     a port named "tfjob-port" (the operator's default container and port
//     names, which it reads to build TF_CONFIG);
//   - spec.runPolicy.cleanPodPolicy one of None, Running, All;
//     backoffLimit an integer >= 0;
//   - metadata.name a DNS-1123 label (the operator derives service names).
// Prints one JSON object {"docs": [{"apiVersion", "kind", "name"}]} and
// exits 0, or exits 1 naming the first invalid document and why.
"use strict";
const fs = require("fs");
const path = require("path");

const modules = path.resolve(process.argv[2]);
const files = process.argv.slice(3);
const yaml = require(path.join(modules, "js-yaml"));
const k8s = (p) => require(path.join(modules, "kubernetes-models", p));
const { Namespace, Service, PersistentVolumeClaim, Pod } = k8s("v1");
const { Job } = k8s("batch/v1");

function fail(where, msg) {
  process.stderr.write(`k8s_validate: ${where}: ${msg}\n`);
  process.exit(1);
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function checkTFJob(doc, where) {
  const name = doc.metadata && doc.metadata.name;
  if (typeof name !== "string" || !DNS_LABEL.test(name) || name.length > 63)
    fail(where, `metadata.name ${JSON.stringify(name)} is not a DNS-1123 label`);
  const spec = doc.spec;
  if (!spec || typeof spec !== "object") fail(where, "spec is required");
  const known = new Set(["tfReplicaSpecs", "runPolicy", "successPolicy", "enableDynamicWorker"]);
  for (const k of Object.keys(spec)) if (!known.has(k)) fail(where, `unknown field spec.${k}`);
  const rs = spec.tfReplicaSpecs;
  if (!rs || typeof rs !== "object" || !Object.keys(rs).length) fail(where, "spec.tfReplicaSpecs is required");
  const types = new Set(["Chief", "Master", "PS", "Worker", "Evaluator"]);
  const policies = new Set(["Always", "OnFailure", "Never", "ExitCode"]);
  if (rs.Chief && rs.Master) fail(where, "both Chief and Master replica specs");
  for (const [type, r] of Object.entries(rs)) {
    const at = `${where}: tfReplicaSpecs.${type}`;
    if (!types.has(type)) fail(at, `unknown replica type (valid: ${[...types].join(", ")})`);
    for (const k of Object.keys(r))
      if (!["replicas", "restartPolicy", "template"].includes(k)) fail(at, `unknown field ${k}`);
    if (!Number.isInteger(r.replicas) || r.replicas < 1 || r.replicas > 2147483647)
      fail(at, `replicas ${JSON.stringify(r.replicas)} is not an integer >= 1`);
    if ((type === "Chief" || type === "Master" || type === "Evaluator") && r.replicas !== 1)
      fail(at, `${type} must have exactly 1 replica`);
    if (r.restartPolicy !== undefined && !policies.has(r.restartPolicy))
      fail(at, `restartPolicy ${JSON.stringify(r.restartPolicy)} is not one of ${[...policies].join(", ")}`);
    if (!r.template || !r.template.spec) fail(at, "template.spec is required");
    try {
      new Pod({ metadata: r.template.metadata || { name: "x" }, spec: r.template.spec }).validate();
    } catch (e) {
      fail(at, `template is not a valid pod template: ${e.message}`);
    }
    const c = (r.template.spec.containers || []).find((c) => c.name === "tensorflow");
    if (!c) fail(at, 'no container named "tensorflow" (the operator\'s default container name)');
    if (!(c.ports || []).some((p) => p.name === "tfjob-port"))
      fail(at, 'the "tensorflow" container has no port named "tfjob-port"');
  }
  const run = spec.runPolicy || {};
  if (run.cleanPodPolicy !== undefined && !["None", "Running", "All"].includes(run.cleanPodPolicy))
    fail(where, `runPolicy.cleanPodPolicy ${JSON.stringify(run.cleanPodPolicy)} is not None, Running or All`);
  if (run.backoffLimit !== undefined && (!Number.isInteger(run.backoffLimit) || run.backoffLimit < 0))
    fail(where, `runPolicy.backoffLimit ${JSON.stringify(run.backoffLimit)} is not an integer >= 0`);
}

const out = [];
for (const file of files) {
  const docs = yaml.loadAll(fs.readFileSync(file, "utf8"));
  docs.forEach((doc, i) => {
    if (doc === null || doc === undefined) return;
    const where = `${file} document ${i + 1} (${doc.kind} ${doc.metadata && doc.metadata.name})`;
    const key = `${doc.apiVersion} ${doc.kind}`;
    const classes = {
      "v1 Namespace": Namespace,
      "v1 Service": Service,
      "v1 PersistentVolumeClaim": PersistentVolumeClaim,
      "batch/v1 Job": Job,
    };
    if (key === "kubeflow.org/v1 TFJob") {
      checkTFJob(doc, where);
    } else if (classes[key]) {
      try {
        new classes[key](doc).validate();
      } catch (e) {
        fail(where, e.message);
      }
    } else {
      fail(where, `unexpected kind '${key}'`);
    }
    out.push({ apiVersion: doc.apiVersion, kind: doc.kind, name: doc.metadata.name });
  });
}
process.stdout.write(JSON.stringify({ docs: out }) + "\n");
