#!/usr/bin/python3
"""PyTorch peer of `dtrain train --model=transformer`, for bench/transformer.

Trains torch.nn.Transformer (norm_first=True: t2t's pre-norm, with the
final layer norm on each stack) of t2t's shape on t2t's
algorithmic_reverse_binary40, generated here as dtrain generates it
(lengths 1..40 uniform, symbols 2 and 3, EOS 1 appended, the targets the
reversed inputs; vocabulary 4), batched as t2t batches it (the
batching_scheme of data_reader.py: buckets from min_length_bucket 8 by
x1.1 below max_length, batch_size // boundary sequences rounded down to a
divisor of the highly composite window, a full bucket is a batch padded
to its longest example; inputs and targets padded to the same length, as
dtrain does). Around it t2t's transformer as dtrain builds it: symbol
modality (embedding x sqrt(D), PAD rows zero, random_normal(D^-0.5)), the
targets' table shared with the softmax, a separate inputs' table, the
sinusoidal timing signal, dropout after the embedding; encoder
self-attention and encoder-decoder attention masked on the inputs'
padding, causal decoder self-attention; cross-entropy with label
smoothing over the non-pad targets; Adam (0.9, 0.997, 1e-9) with t2t's
constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size schedule.

Prints one JSON line on stdout, over the steps after the first:
  tokens_per_sec, tokens_per_cpu_sec   non-pad target tokens
  steady_tokens, steady_positions (sum of B*L), steady_attention_pairs
  (sum of B*L*L), steady_seconds, steady_cpu_seconds, train_seconds,
  final_train_loss, num_params, torch_version, threads

The caller sets OPENBLAS_CORETYPE, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS
before this process starts. Run with Debian's /usr/bin/python3.
"""
import argparse
import json
import math
import random
import sys
import time

import torch
import torch.nn.functional as F

HIGHLY_COMPOSITE = [1, 2, 4, 6, 12, 24, 36, 48, 60, 120, 180, 240, 360, 720, 840, 1260, 1680, 2520, 5040, 7560,
                    10080, 15120, 20160, 25200, 27720, 45360, 50400, 55440, 83160, 110880, 166320, 221760, 277200,
                    332640, 498960, 554400, 665280, 720720]


def batching_scheme(batch_size, max_length, min_length_bucket=8, step=1.1):
    """t2t's boundaries and per-bucket sequence counts (dtrain's dt_token_batching_init)."""
    bounds, x = [], min_length_bucket
    while x < max_length:
        bounds.append(x)
        x = max(x + 1, int(x * step))
    sizes = [max(1, batch_size // b) for b in bounds + [max_length]]
    window = max(h for h in HIGHLY_COMPOSITE if h <= 3 * max(sizes))
    out = []
    for d in sizes:
        while window % d:
            d -= 1
        out.append(d)
    return bounds, out


def batches(batch_size, max_length, train_length, num_symbols, seed):
    """Endless (inputs, targets) LongTensors (B, L) of reverse_binary problems in t2t's buckets."""
    bounds, sizes = batching_scheme(batch_size, max_length)
    rng = random.Random(seed)
    buckets = [[] for _ in sizes]
    while True:
        n = rng.randint(1, train_length)
        a = [rng.randrange(num_symbols) + 2 for _ in range(n)]
        ex = (a + [1], a[::-1] + [1])
        length = n + 1
        b = sum(1 for x in bounds if length >= x)
        buckets[b].append(ex)
        if len(buckets[b]) == sizes[b]:
            L = max(len(e[0]) for e in buckets[b])
            inp = torch.zeros(sizes[b], L, dtype=torch.long)
            tgt = torch.zeros(sizes[b], L, dtype=torch.long)
            for i, (x, y) in enumerate(buckets[b]):
                inp[i, :len(x)] = torch.tensor(x)
                tgt[i, :len(y)] = torch.tensor(y)
            buckets[b] = []
            yield inp, tgt


def timing_signal(length, channels):
    """t2t's add_timing_signal_1d (dtrain's dt_timing_signal_value)."""
    n = channels // 2
    inc = math.log(1.0e4) / max(n - 1, 1)
    inv = torch.exp(torch.arange(n, dtype=torch.float64) * -inc)
    t = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    sig = torch.cat([torch.sin(t), torch.cos(t)], dim=1)
    if channels % 2:
        sig = F.pad(sig, (0, 1))
    return sig.float()


class T2TTransformer(torch.nn.Module):
    def __init__(self, vocab, layers, hidden, filt, heads, dropout, max_length):
        super().__init__()
        self.d = hidden
        self.src = torch.nn.Parameter(torch.randn(vocab, hidden) * hidden ** -0.5)
        self.tgt = torch.nn.Parameter(torch.randn(vocab, hidden) * hidden ** -0.5)
        self.net = torch.nn.Transformer(d_model=hidden, nhead=heads, num_encoder_layers=layers,
                                        num_decoder_layers=layers, dim_feedforward=filt, dropout=dropout,
                                        activation="relu", layer_norm_eps=1e-6, batch_first=True, norm_first=True)
        self.drop = torch.nn.Dropout(dropout)
        self.register_buffer("timing", timing_signal(max_length + 1, hidden))

    def bottom(self, table, ids):
        L = ids.shape[1]
        x = F.embedding(ids, table) * (self.d ** 0.5) * (ids != 0).unsqueeze(-1)
        return self.drop(x + self.timing[:L])

    def forward(self, inputs, targets):
        B, L = targets.shape
        shifted = F.pad(targets[:, :-1], (1, 0))
        pad = inputs == 0
        causal = torch.triu(torch.full((L, L), float("-inf")), diagonal=1)
        y = self.net(self.bottom(self.src, inputs), self.bottom(self.tgt, shifted), tgt_mask=causal,
                     src_key_padding_mask=pad, memory_key_padding_mask=pad)
        return y @ self.tgt.t()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--filter", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--batch_size", type=int, default=4096, help="tokens per batch (t2t's batch_size)")
    ap.add_argument("--max_length", type=int, default=256)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--label_smoothing", type=float, default=0.1)
    ap.add_argument("--train_length", type=int, default=40)
    ap.add_argument("--num_symbols", type=int, default=2)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps >= 2")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    vocab = a.num_symbols + 2
    model = T2TTransformer(vocab, a.layers, a.hidden, a.filter, a.heads, a.dropout, a.max_length)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.997), eps=1e-9)
    data = batches(a.batch_size, a.max_length, a.train_length, a.num_symbols, a.seed)
    t0 = time.perf_counter()
    tokens = positions = pairs = 0
    loss = None
    for step in range(a.steps):
        inputs, targets = next(data)
        s = step + 1  # t2t's schedule: constant 2 * min(1, s / 8000) * rsqrt(max(s, 8000)) * rsqrt(D)
        for g in opt.param_groups:
            g["lr"] = 2.0 * min(1.0, s / 8000) / math.sqrt(max(s, 8000)) / math.sqrt(a.hidden)
        opt.zero_grad(set_to_none=True)
        logits = model(inputs, targets)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=0,
                               label_smoothing=a.label_smoothing)
        loss.backward()
        opt.step()
        if step == 0:
            t1, c1 = time.perf_counter(), time.process_time()
        else:
            B, L = targets.shape
            tokens += int((targets != 0).sum())
            positions += B * L
            pairs += B * L * L
    t2, c2 = time.perf_counter(), time.process_time()
    print(json.dumps({"tokens_per_sec": tokens / (t2 - t1), "tokens_per_cpu_sec": tokens / (c2 - c1),
                      "steady_tokens": tokens, "steady_positions": positions, "steady_attention_pairs": pairs,
                      "steady_seconds": t2 - t1, "steady_cpu_seconds": c2 - c1, "train_seconds": t2 - t0,
                      "steps": a.steps, "final_train_loss": float(loss),
                      "num_params": sum(p.numel() for p in model.parameters()),
                      "threads": torch.get_num_threads(), "torch_version": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
