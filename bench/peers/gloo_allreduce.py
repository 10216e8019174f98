"""PyTorch gloo all-reduce timed like bench/allreduce_bench.c times dtrain.

    /usr/bin/python3 bench/peers/gloo_allreduce.py RANKS SAMPLES MIN_SAMPLE_MS SIZE...

Starts RANKS processes (one torch thread each) that join a gloo group over
127.0.0.1 (TCP). Per size: 3 warm-ups, rank 0 picks `inner` so a sample lasts
>= MIN_SAMPLE_MS and broadcasts it, SAMPLES samples of `inner` back-to-back
float32 SUM all-reduces; time per call = max over ranks, median sample
reported. Rank 0 prints one JSON line per size ("impl": "gloo").
"""
import json
import math
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, n, port, samples, min_ms, sizes):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    for size in sizes:
        buf = torch.zeros(size // 4, dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(buf)
        t0 = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(buf)
        per = (time.perf_counter() - t0) / 3
        inner = torch.tensor([max(1, min(100000, math.ceil(min_ms / 1e3 / max(per, 1e-7))))], dtype=torch.int64)
        dist.broadcast(inner, 0)
        inner = int(inner.item())
        times = []
        for _ in range(samples):
            s0 = time.perf_counter()
            for _ in range(inner):
                dist.all_reduce(buf)
            us = torch.tensor([(time.perf_counter() - s0) * 1e6 / inner], dtype=torch.float64)
            dist.all_reduce(us, op=dist.ReduceOp.MAX)
            times.append(float(us.item()))
        if rank == 0:
            times.sort()
            us = times[len(times) // 2]
            bus = 2.0 * (n - 1) / n * size / (us * 1e-6) / 1e9
            print(json.dumps({"impl": "gloo", "ranks": n, "bytes": size, "us": round(us, 2),
                              "busbw_gbs": round(bus, 3), "min_us": round(times[0], 2),
                              "max_us": round(times[-1], 2), "inner": inner}), flush=True)
    dist.destroy_process_group()


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    n, samples, min_ms = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    sizes = [int(s) // 4 * 4 for s in sys.argv[4:]]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(rank_main, args=(n, port, samples, min_ms, sizes), nprocs=n, start_method="fork")


if __name__ == "__main__":
    main()
