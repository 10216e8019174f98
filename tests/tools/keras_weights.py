#!/usr/bin/python3
"""An independent writer of Keras's weights layouts (h5py, numpy), for the
--warm_start_from tests: the values come from a dtrain checkpoint (read
here with the stdlib and numpy, not with dtrain), the layout is Keras's.

Usage: keras_weights.py CKPT OUT LAYOUT [MODEL_JSON]
       keras_weights.py --same|--differ CKPT_A CKPT_B NAME,...
         exit 0 when every named variable is bit-identical (--same) or
         differs (--differ) between the two checkpoints
  LAYOUT:
    keras2        save_weights: root attr layer_names (numpy 'S' array),
                  backend, keras_version; a group per layer with attr
                  weight_names ("<layer>/kernel:0", ...) and its datasets
    keras2_vlen   the same with variable-length string attributes (h5py's
                  default for a list of str)
    keras2_order  keras2 with every layer renamed ("renamed_<i>"): only
                  the layer order (MODEL_JSON's) can match it
    full          a full-model .h5: root attr model_config, the weights
                  under group model_weights
    keras3        Keras 3 .weights.h5: layers/<name>/vars/<i>, plus an
                  empty vars group for a layer with none and optimizer vars
    bad_shape     keras2 with the first kernel transposed
    lie_names     keras2 whose first layer lists a weight it does not hold
    int_data      keras2 with the first kernel stored as int32
    truncated     keras2 cut to half its length
    perturb       keras2 with every value of the first kernel plus 1
    tfjs          TF.js: OUT is model.json ({"modelTopology", "weightsManifest"}),
                  two groups, the first split over two shards, float32
    tfjs_u8       tfjs with every weight quantized to uint8 (scale, min)
    tfjs_f16      tfjs with every weight quantized to float16
                  (both also write OUT.expected.h5: the dequantized values,
                  computed here in double as TF.js defines them, as keras2)
    tfjs_short    tfjs with the last shard cut short
    st_mixed      a plain safetensors file (no dtrain metadata): the first
                  layer's weights F16, batch norm's F64, the rest alternately
                  BF16 and F32, plus a tensor of no variable and an Adam slot;
                  also OUT.expected.h5 (keras2) with the values as floats
    keras_zip     a Keras 3 .keras archive (Python's zipfile): metadata.json
                  and config.json deflated, model.weights.h5 (keras3) stored
    keras_zip_cut the archive cut to 60% of its length
    keras_zip_crc the archive with one byte of model.weights.h5 flipped
Within a layer, weights go in Keras's order: kernel (depthwise_kernel,
embeddings, gamma), pointwise_kernel or beta, bias, moving_mean,
moving_variance. Layers go in MODEL_JSON's order when given, else by name.
"""
import json
import struct
import sys

import h5py
import numpy as np

RANK = {"kernel": 0, "depthwise_kernel": 0, "embeddings": 0, "gamma": 0, "pointwise_kernel": 1, "beta": 1,
        "bias": 2, "moving_mean": 3, "moving_variance": 4}
SLOTS = ("/Adam", "/Adam_1", "/Momentum", "/Adagrad")


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32" or name.endswith(SLOTS):
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(t["shape"])
    return out


def layers_of(tensors, model_json):
    by_layer = {}
    for name, v in tensors.items():
        layer, short = name.rsplit("/", 1)
        by_layer.setdefault(layer, []).append((RANK.get(short, 5), short, v))
    order = sorted(by_layer)
    if model_json:
        with open(model_json) as f:
            cfg = json.load(f)
        names = [l.get("config", {}).get("name", l.get("name")) for l in cfg["config"]["layers"]]
        order = [n for n in names if n in by_layer]
    return [(l, [(s, v) for _, s, v in sorted(by_layer[l], key=lambda x: (x[0], x[1]))]) for l in order]


def write_keras2(g, layers, vlen=False, rename=False, mutate=None):
    names = ["renamed_%d" % i if rename else l for i, (l, _) in enumerate(layers)]
    def strs(lst):
        if vlen:
            return np.array(lst, dtype=h5py.string_dtype())
        return np.array([s.encode("utf8") for s in lst])
    g.attrs["layer_names"] = strs(names)
    g.attrs["backend"] = b"tensorflow"
    g.attrs["keras_version"] = b"2.15.0"
    for i, (name, (_, ws)) in enumerate(zip(names, layers)):
        lg = g.create_group(name)
        wnames = ["%s/%s:0" % (name, s) for s, _ in ws]
        if mutate == "lie_names" and i == 0:
            wnames.append("%s/ghost:0" % name)
        lg.attrs["weight_names"] = strs(wnames)
        for j, (s, v) in enumerate(ws):
            if mutate == "bad_shape" and i == 0 and j == 0:
                v = v.reshape(v.shape[::-1]) if v.ndim == 2 else v.reshape((v.shape[-1],) + v.shape[:-1])
            if mutate == "perturb" and i == 0 and j == 0:
                v = v + np.float32(1)
            if mutate == "int_data" and i == 0 and j == 0:
                v = v.astype(np.int32)
            lg.create_dataset(wnames[j], data=v)


def compare(mode, a, b, names):
    ta, tb = read_safetensors(a), read_safetensors(b)
    for n in names.split(","):
        same = ta[n].shape == tb[n].shape and ta[n].tobytes() == tb[n].tobytes()
        if same != (mode == "--same"):
            sys.exit("%s: '%s' %s" % (mode, n, "is the same" if same else "differs"))
    print("ok " + mode[2:])


def write_tfjs(out, layers, quant=None, short=False):
    import os
    d = os.path.dirname(out) or "."
    weights = [("%s/%s" % (l, s), v) for l, ws in layers for s, v in ws]
    half = len(weights) // 2
    manifest, expected = [], {}
    for g, part in enumerate((weights[:half], weights[half:])):
        specs, blob = [], b""
        for name, v in part:
            spec = {"name": name, "shape": list(v.shape), "dtype": "float32"}
            if quant == "uint8":
                lo, hi = float(v.min()), float(v.max())
                scale = (hi - lo) / 255 if hi > lo else 1.0
                q = np.round((v - lo) / scale).astype(np.uint8)
                spec["quantization"] = {"dtype": "uint8", "scale": scale, "min": lo}
                blob += q.tobytes()
                expected[name] = (q.astype(np.float64) * scale + lo).astype(np.float32)
            elif quant == "float16":
                spec["quantization"] = {"dtype": "float16"}
                blob += v.astype("<f2").tobytes()
                expected[name] = v.astype("<f2").astype(np.float32)
            else:
                blob += v.astype("<f4").tobytes()
            specs.append(spec)
        cut = [blob[:len(blob) // 2], blob[len(blob) // 2:]] if g == 0 else [blob]
        paths = []
        for k, b in enumerate(cut):
            p = "group%d-shard%dof%d.bin" % (g + 1, k + 1, len(cut))
            if short and g == 1:
                b = b[:-3]
            with open(os.path.join(d, p), "wb") as f:
                f.write(b)
            paths.append(p)
        manifest.append({"paths": paths, "weights": specs})
    with open(out, "w") as f:
        json.dump({"format": "layers-model", "generatedBy": "keras_weights.py", "modelTopology": {},
                   "weightsManifest": manifest}, f)
    if quant:
        deq = [(l, [(s, expected["%s/%s" % (l, s)]) for s, _ in ws]) for l, ws in layers]
        with h5py.File(out + ".expected.h5", "w") as f:
            write_keras2(f, deq)


def write_keras3(f, layers):
    f.create_group("vars")
    lg = f.create_group("layers")
    lg.create_group("input_layer").create_group("vars")
    for name, ws in layers:
        vg = lg.create_group(name).create_group("vars")
        for j, (_, v) in enumerate(ws):
            vg.create_dataset(str(j), data=v)
    f.create_group("optimizer").create_group("vars").create_dataset("0", data=np.int64(7))


def write_st_mixed(out, layers):
    tensors, expected, k = [], [], 0
    for i, (l, ws) in enumerate(layers):
        exp_ws = []
        for s, v in ws:
            name = "%s/%s" % (l, s)
            if i == 0:
                dt, raw, e = "F16", v.astype("<f2").tobytes(), v.astype("<f2").astype(np.float32)
            elif s.startswith(("gamma", "beta", "moving")):
                dt, raw, e = "F64", v.astype("<f8").tobytes(), v
            elif k % 2 == 0:
                bits = (v.astype("<f4").view("<u4") >> 16).astype("<u2")
                dt, raw, e = "BF16", bits.tobytes(), (bits.astype("<u4") << 16).view("<f4")
                k += 1
            else:
                dt, raw, e = "F32", v.astype("<f4").tobytes(), v
                k += 1
            tensors.append((name, dt, list(v.shape), raw))
            exp_ws.append((s, e.astype(np.float32)))
        expected.append((l, exp_ws))
    first = "%s/%s" % (layers[0][0], layers[0][1][0][0])
    tensors.append((first + "/Adam", "F32", list(layers[0][1][0][1].shape), layers[0][1][0][1].astype("<f4").tobytes()))
    tensors.append(("not_in_the_model/kernel", "F32", [2], np.float32([1, 2]).tobytes()))
    header, at, blob = {"__metadata__": {"source": "keras_weights.py"}}, 0, b""
    for name, dt, shape, raw in sorted(tensors, key=lambda t: t[0]):
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(raw)]}
        at += len(raw)
        blob += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)
    with h5py.File(out + ".expected.h5", "w") as f:
        write_keras2(f, expected)


def main():
    if sys.argv[1] in ("--same", "--differ"):
        return compare(*sys.argv[1:5])
    ckpt, out, layout = sys.argv[1:4]
    model_json = sys.argv[4] if len(sys.argv) > 4 else None
    layers = layers_of(read_safetensors(ckpt), model_json)
    if layout.startswith("tfjs"):
        write_tfjs(out, layers, quant={"tfjs_u8": "uint8", "tfjs_f16": "float16"}.get(layout),
                   short=layout == "tfjs_short")
        print("ok %d layers" % len(layers))
        return
    if layout == "st_mixed":
        write_st_mixed(out, layers)
        print("ok %d layers" % len(layers))
        return
    if layout.startswith("keras_zip"):
        import io, zipfile
        h5 = out + ".tmp.weights.h5"
        with h5py.File(h5, "w") as f:
            write_keras3(f, layers)
        with open(h5, "rb") as f:
            weights = f.read()
        import os
        os.remove(h5)
        with zipfile.ZipFile(out, "w") as z:
            z.writestr("metadata.json", json.dumps({"keras_version": "3.3.3"}), zipfile.ZIP_DEFLATED)
            z.writestr("config.json", json.dumps({"class_name": "Functional"}), zipfile.ZIP_DEFLATED)
            z.writestr("model.weights.h5", weights, zipfile.ZIP_STORED)
        with open(out, "rb") as f:
            data = bytearray(f.read())
        if layout == "keras_zip_cut":
            data = data[:len(data) * 6 // 10]
        if layout == "keras_zip_crc":
            at = data.find(weights[:64]) + len(weights) // 2
            data[at] ^= 0x40
        with open(out, "wb") as f:
            f.write(data)
        print("ok %d layers" % len(layers))
        return
    with h5py.File(out, "w") as f:
        if layout in ("keras2", "bad_shape", "lie_names", "int_data", "truncated", "perturb"):
            write_keras2(f, layers, mutate=layout)
        elif layout == "keras2_vlen":
            write_keras2(f, layers, vlen=True)
        elif layout == "keras2_order":
            write_keras2(f, layers, rename=True)
        elif layout == "full":
            f.attrs["model_config"] = json.dumps({"class_name": "Functional"}).encode()
            write_keras2(f.create_group("model_weights"), layers)
        elif layout == "keras3":
            write_keras3(f, layers)
        else:
            sys.exit("unknown layout " + layout)
    if layout == "truncated":
        with open(out, "rb") as f:
            data = f.read()
        with open(out, "wb") as f:
            f.write(data[:len(data) // 2])
    print("ok %d layers" % len(layers))


if __name__ == "__main__":
    main()
