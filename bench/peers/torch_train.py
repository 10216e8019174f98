#!/usr/bin/python3
"""PyTorch peer of `dtrain train`, for bench/train_vs_pytorch.

Trains the same model on the same data with the same optimizer as dtrain's
benchmark command and prints one JSON line on stdout with its figures:

  examples_per_sec     steady state: (steps - 1) * batch / time after step 1
  first_step_wall_time time.time() when the first optimizer step finished
  import_wall_time     time.time() when `import torch` finished
  load_wall_time       time.time() when the data was loaded and normalized
  train_seconds        all steps, step 1 included
  steps, batch_size, model, threads, blas_core, torch_version, final_train_loss, ...

Models (PyTorch default init, ReLU, no dropout):
  mlp    784-256-128-10
  lenet  conv5x5x6 pad 2 - ReLU - maxpool2 - conv5x5x16 - ReLU - maxpool2 - fc 400-120-84-10
  cnn    conv3x3x32 pad 1 - ReLU - maxpool2 - conv3x3x64 pad 1 - ReLU - maxpool2 - fc 3136-128-10
         (dtrain's --model=cnn, the README's main job; not performance.md's 5x5 "Deep MNIST" net)

Data: Fashion-MNIST training split from the IDX .gz files, x/255 then
(x - 0.2860) / 0.3530, preloaded as one float32 tensor; every epoch is a new
shuffle (torch.randperm with a seeded generator) and a batch is an index
into it; the incomplete final batch of an epoch is dropped, as dtrain does.
Optimizer: SGD, lr 0.01, momentum 0.9, no weight decay; CrossEntropyLoss.

The caller sets the environment (OPENBLAS_CORETYPE, OPENBLAS_NUM_THREADS,
OMP_NUM_THREADS) before this process starts: OpenBLAS reads it at load time.
Run with Debian's /usr/bin/python3, which sees python3-torch.
"""
import argparse
import ctypes
import gzip
import json
import os
import sys
import time

START_WALL = time.time()

MEAN, STD = 0.2860, 0.3530
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("mlp", "lenet", "cnn"), required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, required=True, help="training steps (each one batch)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--data_dir", default=DEFAULT_DATA_DIR)
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be at least 2 (step 1 is excluded from examples/s)")
    if a.batch < 1:
        ap.error("--batch must be positive")
    return a


def read_idx(path, magic, header_ints):
    """Returns (dims, payload) of one gzipped IDX file; payload is one bytearray."""
    with gzip.open(path, "rb") as f:
        head = f.read(4 + 4 * header_ints)
        if len(head) != 4 + 4 * header_ints:
            raise SystemExit(f"error: '{path}': truncated IDX header")
        got = int.from_bytes(head[0:4], "big")
        if got != magic:
            raise SystemExit(f"error: '{path}': bad IDX magic 0x{got:08x}, expected 0x{magic:08x}")
        dims = [int.from_bytes(head[4 + 4 * i:8 + 4 * i], "big") for i in range(header_ints)]
        n = 1
        for d in dims:
            n *= d
        payload = bytearray(n)
        if f.readinto(payload) != n or f.read(1):
            raise SystemExit(f"error: '{path}': payload is not the {n} bytes its header says")
    return dims, payload


def load_train(torch, data_dir, model):
    (n, h, w), pixels = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"), 0x803, 3)
    (nl,), labels = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"), 0x801, 1)
    if nl != n:
        raise SystemExit(f"error: '{data_dir}': {n} training images but {nl} labels")
    x = torch.frombuffer(pixels, dtype=torch.uint8).to(torch.float32)
    x.div_(255.0).sub_(MEAN).div_(STD)
    x = x.view(n, 1, h, w) if model in ("lenet", "cnn") else x.view(n, h * w)
    y = torch.frombuffer(labels, dtype=torch.uint8).to(torch.int64)
    return x, y


def build_model(nn, name):
    if name == "mlp":
        return nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(3136, 128), nn.ReLU(),
            nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))


def blas_core():
    """openblas_get_corename() of the BLAS torch loaded, or None."""
    paths = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if "blas" in os.path.basename(p) and ".so" in p:
                    paths.add(p)
    except OSError:
        return None
    for p in sorted(paths):
        try:
            fn = ctypes.CDLL(p).openblas_get_corename
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_char_p
        return fn().decode()
    return None


def main():
    a = parse_args()
    import torch
    from torch import nn
    import_wall = time.time()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = load_train(torch, a.data_dir, a.model)
    load_wall = time.time()

    model = build_model(nn, a.model)
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    gen = torch.Generator().manual_seed(a.seed)
    n = x.shape[0]
    per_epoch = n // a.batch
    order = None
    loss_sum = 0.0

    t_start = time.perf_counter()
    first_wall = t_after_first = None
    for step in range(a.steps):
        i = step % per_epoch
        if i == 0:
            order = torch.randperm(n, generator=gen)
        idx = order[i * a.batch:(i + 1) * a.batch]
        xb, yb = x[idx], y[idx]
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        loss_sum += loss.item()
        if step == 0:
            t_after_first = time.perf_counter()
            first_wall = time.time()
    t_end = time.perf_counter()

    steady = t_end - t_after_first
    out = {
        "side": "pytorch",
        "model": a.model,
        "batch_size": a.batch,
        "steps": a.steps,
        "threads": torch.get_num_threads(),
        "examples_per_sec": (a.steps - 1) * a.batch / steady,
        "train_seconds": t_end - t_start,
        "steady_seconds": steady,
        "first_step_wall_time": first_wall,
        "start_wall_time": START_WALL,
        "import_wall_time": import_wall,
        "load_wall_time": load_wall,
        "final_train_loss": loss_sum / a.steps,
        "num_params": sum(p.numel() for p in model.parameters()),
        "blas_core": blas_core(),
        "torch_version": torch.__version__,
        "env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")},
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
