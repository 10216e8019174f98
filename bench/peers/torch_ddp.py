#!/usr/bin/python3
"""PyTorch DDP (gloo) peer of multi-worker `dtrain train`, for bench/scaling.

One process per rank, started by the caller with --rank/--world/--port (as
torchrun would set RANK/WORLD_SIZE/MASTER_PORT); with --world 1 it trains
without DDP or a process group (the one-worker baseline). Same models, data,
normalization, optimizer and initial seed as bench/peers/torch_train.py,
whose helpers it imports.

Data: each rank trains on its shard, every example i with i % world == rank,
reshuffled every epoch (a seeded torch.randperm of the shard), batches of
--batch (per rank; global batch = world * batch), the incomplete final batch
dropped, as dtrain's pipeline does. DDP broadcasts rank 0's parameters at
construction and all-reduces (averages) gradients in 25 MB buckets during
backward, its defaults.

Prints one JSON line on stdout per rank; rank 0's `examples_per_sec` is the
global rate: (steps - 1) * world * batch / time after step 1 (ranks move in
lock step). The caller sets OPENBLAS_CORETYPE / OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS before this process starts.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train  # noqa: E402  (same directory: read_idx, load_train, build_model, blas_core)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("mlp", "lenet"), required=True)
    ap.add_argument("--batch", type=int, default=64, help="examples per rank per step")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--port", type=int, default=29500, help="rank 0's rendezvous port on 127.0.0.1")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--timeout", type=float, default=120, help="seconds for the rendezvous and each collective")
    ap.add_argument("--data_dir", default=torch_train.DEFAULT_DATA_DIR)
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be at least 2 (step 1 is excluded from examples/s)")
    if a.world < 1 or not 0 <= a.rank < a.world:
        ap.error("need 0 <= --rank < --world")
    return a


def main():
    a = parse_args()
    import datetime
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = torch_train.load_train(torch, a.data_dir, a.model)
    shard = torch.arange(a.rank, x.shape[0], a.world)
    model = torch_train.build_model(nn, a.model)
    model.train()
    if a.world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(a.port)
        dist.init_process_group("gloo", rank=a.rank, world_size=a.world,
                                timeout=datetime.timedelta(seconds=a.timeout))
        model = nn.parallel.DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    gen = torch.Generator().manual_seed(a.seed * 1000 + a.rank)
    per_epoch = shard.numel() // a.batch
    order = None
    loss_sum = 0.0
    if a.world > 1:
        dist.barrier()

    t_start = time.perf_counter()
    t_after_first = None
    for step in range(a.steps):
        i = step % per_epoch
        if i == 0:
            order = shard[torch.randperm(shard.numel(), generator=gen)]
        idx = order[i * a.batch:(i + 1) * a.batch]
        xb, yb = x[idx], y[idx]
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        loss_sum += loss.item()
        if step == 0:
            t_after_first = time.perf_counter()
    t_end = time.perf_counter()
    if a.world > 1:
        dist.barrier()
        dist.destroy_process_group()

    steady = t_end - t_after_first
    print(json.dumps({
        "side": "pytorch_ddp",
        "model": a.model,
        "rank": a.rank,
        "world": a.world,
        "batch_per_rank": a.batch,
        "global_batch": a.batch * a.world,
        "steps": a.steps,
        "threads": torch.get_num_threads(),
        "examples_per_sec": (a.steps - 1) * a.batch * a.world / steady,
        "train_seconds": t_end - t_start,
        "final_train_loss": loss_sum / a.steps,
        "blas_core": torch_train.blas_core(),
        "torch_version": torch.__version__,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
