#!/usr/bin/python3
"""PyTorch peer of `dtrain train --keras_model=MobileNetV2`, for bench/mobilenet.

Trains torchvision.models.mobilenet_v2(num_classes=5, width_mult=ALPHA)
(torchvision 0.14: the same inverted residuals, depthwise 3x3, ReLU6 and
batch norm as keras.applications.MobileNetV2) on an image folder
(scripts/make_flowers.py's layout) and prints one JSON line on stdout:

  examples_per_sec     steady state: (steps - 1) * batch / time after step 1
  steady_cpu_seconds   the process's CPU time (time.process_time) over those steps
  train_seconds        all steps, step 1 included
  steps, batch_size, size, alpha, threads, torch_version, final_train_loss

Data: the folder's first --preload images (classes sorted by name, files
sorted), decoded with Pillow, resized to --size (bilinear) and scaled to
[-1, 1] (MobileNetV2's preprocess_input), preloaded as one float32 NCHW
tensor; batches are drawn from a seeded shuffle of it, so decoding is not
timed on this side (dtrain decodes inside its timed steps: the comparison
leans toward PyTorch). Optimizer: SGD lr 0.01, momentum 0.9;
CrossEntropyLoss; model.train() (batch statistics, as Keras's fit).

The caller sets OPENBLAS_CORETYPE, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS
before this process starts. Run with Debian's /usr/bin/python3.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torchvision
from PIL import Image


def load(data_dir, size, n):
    classes = sorted(d for d in os.listdir(data_dir) if not d.startswith(".")
                     and os.path.isdir(os.path.join(data_dir, d)))
    files = []
    for label, c in enumerate(classes):
        files += [(os.path.join(data_dir, c, f), label) for f in sorted(os.listdir(os.path.join(data_dir, c)))]
    rng = np.random.default_rng(1)
    pick = rng.permutation(len(files))[:n]
    x = np.empty((len(pick), 3, size, size), np.float32)
    y = np.empty(len(pick), np.int64)
    for i, j in enumerate(pick):
        im = Image.open(files[j][0]).convert("RGB").resize((size, size), Image.BILINEAR)
        x[i] = np.asarray(im, np.float32).transpose(2, 0, 1) / 127.5 - 1.0
        y[i] = files[j][1]
    return torch.from_numpy(x), torch.from_numpy(y), len(classes)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data_dir", required=True)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--preload", type=int, default=256, help="images decoded into memory and cycled")
    a = ap.parse_args()
    if a.steps < 2 or a.batch < 1:
        ap.error("--steps >= 2 and --batch >= 1")
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    x, y, classes = load(a.data_dir, a.size, max(a.preload, a.batch))
    model = torchvision.models.mobilenet_v2(num_classes=classes, width_mult=a.alpha)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(1)
    order = torch.randperm(len(x), generator=g)
    pos, t0, t1, loss = 0, time.perf_counter(), None, None
    for step in range(a.steps):
        if pos + a.batch > len(order):
            order, pos = torch.randperm(len(x), generator=g), 0
        idx = order[pos:pos + a.batch]
        pos += a.batch
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if step == 0:
            t1, c1 = time.perf_counter(), time.process_time()
    t2, c2 = time.perf_counter(), time.process_time()
    print(json.dumps({"examples_per_sec": (a.steps - 1) * a.batch / (t2 - t1), "train_seconds": t2 - t0,
                      "steady_cpu_seconds": c2 - c1,
                      "steps": a.steps, "batch_size": a.batch, "size": a.size, "alpha": a.alpha,
                      "threads": torch.get_num_threads(), "torch_version": torch.__version__,
                      "torchvision_version": torchvision.__version__, "final_train_loss": float(loss)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
