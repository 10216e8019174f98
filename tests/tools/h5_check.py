#!/usr/bin/python3
"""Checks a Keras HDF5 weights file written by `dtrain export --format=keras_h5`
against the checkpoint it came from, with h5py (python3-h5py) as the
independent reader:

  h5_check.py CKPT.safetensors WEIGHTS.h5 [MODEL.json]

- root attributes layer_names (byte strings), backend, keras_version;
- every layer group has weight_names "<layer>/<var>:0" and the datasets
  <layer>/<layer>/<var>:0;
- every variable of the checkpoint (all tensors but global_step and the
  optimizer slots) appears once, with its name, shape and values (float32,
  bit for bit), and nothing else does;
- inside a layer, Keras's weight order (kernel before bias, gamma, beta,
  moving_mean, moving_variance);
- with MODEL.json: layer_names follow the JSON's layer order.
Prints "ok N variables in M layers" or exits 1 with the reason.
"""
import json
import struct
import sys

import h5py
import numpy as np


def fail(msg):
    print("h5_check: " + msg, file=sys.stderr)
    sys.exit(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        if info["dtype"] == "F32":
            out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"])
    slots = ("/Adam", "/Adam_1", "/Momentum", "/Adagrad")
    return {k: v for k, v in out.items()
            if not any(k.endswith(s) and k[: -len(s)] in out for s in slots)}


def layer_order(model_json):
    m = json.load(open(model_json))
    if "modelTopology" in m:
        m = m["modelTopology"].get("model_config", m["modelTopology"])
    return [l["config"]["name"] if "name" in l.get("config", {}) else l["name"] for l in m["config"]["layers"]]


KERAS_ORDER = ["kernel", "depthwise_kernel", "embeddings", "gamma", "pointwise_kernel", "beta", "bias",
               "moving_mean", "moving_variance"]
RANK = {"kernel": 0, "depthwise_kernel": 0, "embeddings": 0, "gamma": 0, "pointwise_kernel": 1, "beta": 1,
        "bias": 2, "moving_mean": 3, "moving_variance": 4}


def main():
    ckpt = read_safetensors(sys.argv[1])
    f = h5py.File(sys.argv[2], "r")
    for a in ("layer_names", "backend", "keras_version"):
        if a not in f.attrs:
            fail("no root attribute " + a)
    if f.attrs["backend"] != b"tensorflow":
        fail("backend is %r" % f.attrs["backend"])
    layers = [n.decode("utf8") for n in f.attrs["layer_names"]]
    seen = {}
    for layer in layers:
        g = f[layer]
        names = [n.decode("utf8") for n in g.attrs["weight_names"]]
        ranks = []
        for wn in names:
            if not wn.startswith(layer + "/") or not wn.endswith(":0"):
                fail("weight name %s of layer %s" % (wn, layer))
            var = wn[:-2]
            ds = g[wn]
            if f[layer + "/" + wn].name != ds.name:
                fail("dataset %s is not at %s/%s" % (ds.name, layer, wn))
            if ds.dtype != np.float32:
                fail("%s is %s" % (wn, ds.dtype))
            if var not in ckpt:
                fail("%s is not a checkpoint variable" % var)
            if var in seen:
                fail("%s written twice" % var)
            v = ds[()]
            if tuple(v.shape) != tuple(ckpt[var].shape):
                fail("%s has shape %s, the checkpoint %s" % (var, v.shape, ckpt[var].shape))
            if v.tobytes() != np.ascontiguousarray(ckpt[var]).tobytes():
                fail("%s values differ" % var)
            seen[var] = True
            ranks.append(RANK.get(var.rsplit("/", 1)[1], 5))
        if ranks != sorted(ranks):
            fail("layer %s weights not in Keras's order: %s" % (layer, names))
    missing = sorted(set(ckpt) - set(seen))
    if missing:
        fail("checkpoint variables missing from the file: %s" % missing)
    if len(sys.argv) > 3:
        order = layer_order(sys.argv[3])
        idx = [order.index(l) for l in layers]
        if idx != sorted(idx):
            fail("layer_names %s are not in the model's order" % layers)
    print("ok %d variables in %d layers" % (len(seen), len(layers)))


main()
