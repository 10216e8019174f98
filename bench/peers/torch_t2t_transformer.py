#!/usr/bin/python3
"""PyTorch peer of dtrain's t2t transformer, for bench/transformer_quality.

Trains the architecture of dtrain's `--model=transformer` (src/nn/
transformer.c, nn/seq.h) on the token ids of dtrain's own `dtrain datagen`
TFRecord files, evaluates held-out perplexity and, for a problem with
inputs, greedily decodes the held-out inputs. One JSON line on stdout.

What is matched, and where dtrain does it:
  model    pre-norm encoder-decoder (decoder only without inputs): x =
           dropout(symbol(ids) * sqrt(D), rows of id 0 zero, + t2t's
           timing signal); per layer x += dropout(attn(norm(x))),
           [x += dropout(encdec_attn(norm(x), memory))], x += dropout(
           dense(relu_dropout(relu(dense(norm(x)))))); memory / logits
           through a final norm; logits = norm(y) table^T with the
           decoder's symbol table (shared_embedding_and_softmax_weights);
           the encoder has its own table (shared_embedding off). Attention
           without biases, q scaled by (D/H)^-0.5, -1e9 on padded keys
           (encoder, encoder-decoder) and on later keys (decoder), dropout
           on the probabilities. Layer norm eps 1e-6.
  init     symbol tables N(0, D^-0.5); attention and dense kernels
           glorot_uniform; biases 0, norms 1 and 0 (dtrain's defaults).
  loss     t2t's padded, label-smoothed cross-entropy minus its entropy
           floor, mean over the batch's non-pad target tokens.
  optim    TensorFlow's Adam (lr_t = lr sqrt(1 - b2^t) / (1 - b1^t),
           eps added to sqrt(v)), dense on every variable; lr by t2t's
           constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size at the
           global step before the update (0 on the first step), as dtrain.
  batches  t2t's batching_scheme (dtrain's train/input_text.c): length
           buckets from min_length_bucket 8 by length_bucket_step 1.1,
           batch_size / boundary sequences rounded down to divisors of the
           highly composite window, a full bucket is the next batch, padded
           to its longest example; examples over max_length dropped; a new
           shuffle per epoch (Python's random, not dtrain's stream: the
           same scheme, not the same batches).
  eval     sum of -log p(label) over every non-pad target token (EOS
           included) of the held-out split / their count: dtrain's
           neg_log_perplexity; dropout off.
  decode   greedy as dtrain's train/decode.c: argmax over ids >= 1 (PAD
           never chosen), stop at EOS, at most len(inputs) + 50 tokens
           (and positions - 1); the decoder runs over the whole prefix
           each step. Verses decode in batches (masks make that exact).

Run with Debian's /usr/bin/python3 (python3-torch); the caller sets
OMP_NUM_THREADS / OPENBLAS_NUM_THREADS before the process starts.
"""
import argparse
import json
import math
import os
import random
import re
import resource
import sys
import time

START = time.time()
sys.dont_write_bytecode = True  # no __pycache__ beside the imported peer and test tools
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))

import t2t_files  # noqa: E402  (tests/tools: TFRecord framing, CRC-32C, the Example proto)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PAD, EOS = 0, 1
NEG = -1e9
HIGHLY_COMPOSITE = [1, 2, 4, 6, 12, 24, 36, 48, 60, 120, 180, 240, 360, 720, 840, 1260, 1680, 2520, 5040, 7560,
                    10080, 15120, 20160, 25200, 27720, 45360, 50400, 55440, 83160, 110880, 166320, 221760, 277200,
                    332640, 498960, 554400, 665280, 720720]
HPARAMS_SETS = {"transformer_tiny": (2, 128, 512, 4), "transformer_small": (2, 256, 1024, 4),
                "transformer_base": (6, 512, 2048, 8), "transformer_test": (2, 16, 8, 2)}


# ---- data ----------------------------------------------------------------

def read_split(data_dir, problem, split):
    """[(inputs, targets)] as lists of ids (EOS included) in dtrain's order: files sorted, records in order."""
    pb = t2t_files.load_pb2()
    files = t2t_files.shard_files(data_dir, problem, split)
    if not files:
        raise SystemExit(f"torch_t2t_transformer: no {problem}-{split}-*-of-* files in {data_dir}")
    out = []
    for path in files:
        with open(path, "rb") as f:
            blob = f.read()
        for data in t2t_files.records(blob, path):
            ex = pb.Example()
            ex.ParseFromString(data)
            feat = ex.features.feature
            inp = list(feat["inputs"].int64_list.value) if "inputs" in feat else []
            out.append((inp, list(feat["targets"].int64_list.value)))
    return out


def batching_scheme(batch_size, max_length, min_length_bucket=8, length_bucket_step=1.1):
    bounds, x = [], min_length_bucket
    while x < max_length:
        bounds.append(x)
        x = max(int(x * length_bucket_step), x + 1)
    sizes = [max(batch_size // b, 1) for b in bounds + [max_length]]
    window = max(h for h in HIGHLY_COMPOSITE if h <= 3 * max(sizes))
    sizes = [max(d for d in range(1, s + 1) if window % d == 0) for s in sizes]
    return bounds, sizes


def bucket_of(bounds, length):
    i = 0
    while i < len(bounds) and length >= bounds[i]:
        i += 1
    return i


def example_len(ex):
    return max(len(ex[0]), len(ex[1]))


def train_batches(examples, batch_size, max_length, seed):
    """Endless (inputs, targets) LongTensor pairs (B, L) of t2t's token batches."""
    bounds, sizes = batching_scheme(batch_size, max_length)
    keep = [e for e in examples if example_len(e) <= max_length]
    rng, epoch = random.Random(seed), 0
    while True:
        order = keep[:]
        rng.shuffle(order)
        buckets = [[] for _ in sizes]
        for ex in order:
            b = bucket_of(bounds, example_len(ex))
            buckets[b].append(ex)
            if len(buckets[b]) == sizes[b]:
                yield pad_batch(buckets[b])
                buckets[b] = []
        epoch += 1


def pad_batch(exs):
    L = max(1, max(example_len(e) for e in exs))
    inp = torch.zeros(len(exs), L, dtype=torch.long)
    tgt = torch.zeros(len(exs), L, dtype=torch.long)
    for i, (a, b) in enumerate(exs):
        if a:
            inp[i, :len(a)] = torch.tensor(a)
        tgt[i, :len(b)] = torch.tensor(b)
    return inp, tgt


def eval_batches(examples, batch_size):
    """Consecutive examples up to batch_size tokens (padded) per batch, as dtrain's evaluation reads a split."""
    i = 0
    while i < len(examples):
        j, L = i, 0
        while j < len(examples):
            L2 = max(L, example_len(examples[j]))
            if j > i and L2 * (j - i + 1) > batch_size:
                break
            L, j = L2, j + 1
        yield pad_batch(examples[i:j])
        i = j


# ---- model ---------------------------------------------------------------

def timing_signal(L, D):
    n = D // 2
    sig = torch.zeros(L, D)
    if n == 0:
        return sig
    inc = math.log(1.0e4) / max(n - 1, 1)
    inv = torch.exp(-torch.arange(n, dtype=torch.float64) * inc)
    t = torch.arange(L, dtype=torch.float64)[:, None] * inv[None, :]
    sig[:, :n] = torch.sin(t).float()
    sig[:, n:2 * n] = torch.cos(t).float()
    return sig


class Attention(nn.Module):
    def __init__(self, D, H, dropout):
        super().__init__()
        self.H, self.dropout = H, dropout
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        for lin in (self.q, self.k, self.v, self.o):
            nn.init.xavier_uniform_(lin.weight)

    def forward(self, xq, xkv, bias):
        B, Lq, D = xq.shape
        Lk, H, dk = xkv.shape[1], self.H, D // self.H
        q = (self.q(xq) * dk ** -0.5).view(B, Lq, H, dk).transpose(1, 2)
        k = self.k(xkv).view(B, Lk, H, dk).transpose(1, 2)
        v = self.v(xkv).view(B, Lk, H, dk).transpose(1, 2)
        p = torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1)
        p = F.dropout(p, self.dropout, self.training)
        return self.o((p @ v).transpose(1, 2).reshape(B, Lq, D))


class FFN(nn.Module):
    def __init__(self, D, Fd, relu_dropout):
        super().__init__()
        self.conv1, self.conv2, self.relu_dropout = nn.Linear(D, Fd), nn.Linear(Fd, D), relu_dropout
        for lin in (self.conv1, self.conv2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        return self.conv2(F.dropout(torch.relu(self.conv1(x)), self.relu_dropout, self.training))


class Transformer(nn.Module):
    def __init__(self, has_inputs, input_vocab, target_vocab, layers, D, Fd, H, drop, attn_drop, relu_drop, positions):
        super().__init__()
        self.has_inputs, self.D, self.drop = has_inputs, D, drop
        ln = lambda: nn.LayerNorm(D, eps=1e-6)  # noqa: E731
        self.register_buffer("timing", timing_signal(positions, D), persistent=False)
        self.dec_emb = nn.Parameter(torch.randn(target_vocab, D) * D ** -0.5)
        if has_inputs:
            self.enc_emb = nn.Parameter(torch.randn(input_vocab, D) * D ** -0.5)
            self.enc = nn.ModuleList(nn.ModuleList([ln(), Attention(D, H, attn_drop), ln(), FFN(D, Fd, relu_drop)])
                                     for _ in range(layers))
            self.enc_norm = ln()
        per = lambda: [ln(), Attention(D, H, attn_drop)] + ([ln(), Attention(D, H, attn_drop)] if has_inputs else [])  # noqa: E731
        self.dec = nn.ModuleList(nn.ModuleList(per() + [ln(), FFN(D, Fd, relu_drop)]) for _ in range(layers))
        self.dec_norm = ln()

    def bottom(self, table, ids):
        x = F.embedding(ids, table) * (self.D ** 0.5) * (ids != PAD).unsqueeze(-1).float()
        return F.dropout(x + self.timing[:ids.shape[1]], self.drop, self.training)

    def res(self, x, y):
        return x + F.dropout(y, self.drop, self.training)

    def encode(self, inputs):
        pad_bias = (inputs == PAD).float()[:, None, None, :] * NEG
        x = self.bottom(self.enc_emb, inputs)
        for n1, att, n2, ffn in self.enc:
            h = n1(x)
            x = self.res(x, att(h, h, pad_bias))
            x = self.res(x, ffn(n2(x)))
        return self.enc_norm(x), pad_bias

    def decode(self, dec_in, memory=None, pad_bias=None, at=None):
        """Logits (B, L, V), or (B, V) of position `at` only (greedy decoding's step)."""
        L = dec_in.shape[1]
        causal = torch.triu(torch.full((L, L), NEG), diagonal=1)
        y = self.bottom(self.dec_emb, dec_in)
        for layer in self.dec:
            h = layer[0](y)
            y = self.res(y, layer[1](h, h, causal))
            if self.has_inputs:
                y = self.res(y, layer[3](layer[2](y), memory, pad_bias))
            y = self.res(y, layer[-1](layer[-2](y)))
        if at is not None:
            y = y[:, at, :]
        return self.dec_norm(y) @ self.dec_emb.t()

    def forward(self, inputs, targets):
        dec_in = F.pad(targets, (1, 0))[:, :-1]  # shift_right
        if self.has_inputs:
            memory, pad_bias = self.encode(inputs)
            return self.decode(dec_in, memory, pad_bias)
        return self.decode(dec_in)


def padded_xent(logits, labels, ls):
    """t2t's padded label-smoothed cross-entropy minus its floor (mean over non-pad), and the NLL sum."""
    V = logits.shape[-1]
    conf, low = 1.0 - ls, ls / (V - 1)
    floor = -(conf * math.log(conf) + (V - 1) * low * math.log(low + 1e-20))
    lse = torch.logsumexp(logits, dim=-1)
    zy = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    mask = (labels != PAD).float()
    smoothed = lse - (conf * zy + low * (logits.sum(-1) - zy)) - floor
    tokens = mask.sum()
    return (smoothed * mask).sum() / tokens.clamp(min=1), ((lse - zy) * mask).sum(), tokens


class TFAdam:
    """TensorFlow's Adam (what dtrain's optimizer.c implements), dense on every variable."""

    def __init__(self, params, b1, b2, eps):
        self.params, self.b1, self.b2, self.eps = list(params), b1, b2, eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self, lr, t):
        lr_t = lr * math.sqrt(1 - self.b2 ** t) / (1 - self.b1 ** t)
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            p.sub_(lr_t * m / (v.sqrt() + self.eps))


def t2t_lr(step, constant, warmup, hidden):
    w = max(warmup, 1)
    return constant * min(1.0, step / w) / math.sqrt(max(step, w)) / math.sqrt(hidden)


# ---- subword text (t2t's SubwordTextEncoder.decode and tokenizer.decode) ----

def load_subwords(path):
    subs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if len(line) >= 2 and line[0] == line[-1] and line[0] in "'\"":
                line = line[1:-1]
            subs.append(line)
    return subs


_UNESCAPE = re.compile(r"\\u|\\\\|\\([0-9]+);")


def _unescape(tok):
    def sub(m):
        if m.group(1) is None:
            return "_" if m.group(0) == "\\u" else "\\"
        try:
            return chr(int(m.group(1)))
        except (ValueError, OverflowError):
            return "\u3013"
    return _UNESCAPE.sub(sub, tok)


def _alnum(ch):
    import unicodedata
    return unicodedata.category(ch)[0] in "LN"


def subword_decode(subs, ids):
    s = "".join(subs[i] for i in ids if 0 <= i < len(subs))
    toks = [_unescape(t) for t in s.split("_") if t]
    out = []
    for i, t in enumerate(toks):
        if i > 0 and _alnum(toks[i - 1][0]) and _alnum(t[0]):
            out.append(" ")
        out.append(t)
    return "".join(out)


# ---- run ------------------------------------------------------------------

@torch.no_grad()
def evaluate(model, examples, batch_size):
    model.eval()
    nll, tokens, correct = 0.0, 0, 0
    for inp, tgt in eval_batches(examples, batch_size):
        logits = model(inp, tgt)
        _, s, n = padded_xent(logits, tgt, 0.0)
        nll, tokens = nll + float(s), tokens + int(n)
        correct += int(((logits.argmax(-1) == tgt) & (tgt != PAD)).sum())
    model.train()
    return {"neg_log_perplexity": -nll / tokens, "perplexity": math.exp(nll / tokens), "tokens": tokens,
            "accuracy": correct / tokens}


@torch.no_grad()
def greedy(model, inputs_list, positions, extra_length=50, chunk=32):
    model.eval()
    outs = []
    for c in range(0, len(inputs_list), chunk):
        part = inputs_list[c:c + chunk]
        inp, _ = pad_batch([(a, a) for a in part])
        memory, pad_bias = model.encode(inp)
        limit = [min(len(a) + extra_length, positions - 1) for a in part]
        seqs = torch.zeros(len(part), 0, dtype=torch.long)
        done = [False] * len(part)
        res = [[] for _ in part]
        for t in range(max(limit)):
            dec_in = F.pad(seqs, (1, 0))  # shift_right of (prefix + placeholder)
            logits = model.decode(dec_in, memory, pad_bias, at=t)
            logits[:, PAD] = -float("inf")
            nxt = logits.argmax(-1)
            for i in range(len(part)):
                if done[i]:
                    continue
                if int(nxt[i]) == EOS:
                    done[i] = True
                else:
                    res[i].append(int(nxt[i]))
                    if len(res[i]) >= limit[i]:
                        done[i] = True
            if all(done):
                break
            seqs = torch.cat([seqs, nxt[:, None]], dim=1)
        outs.extend(res)
    model.train()
    return outs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", required=True)
    ap.add_argument("--data_dir", required=True)
    ap.add_argument("--hparams_set", default="transformer_tiny", choices=sorted(HPARAMS_SETS))
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch_size", type=int, default=4096, help="tokens")
    ap.add_argument("--max_length", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=8000)
    ap.add_argument("--lr_constant", type=float, default=2.0)
    ap.add_argument("--dropout", type=float, default=0.1, help="layer_prepostprocess, attention and relu dropout")
    ap.add_argument("--label_smoothing", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decode_to_file", default=None, help="greedy decodes of the dev inputs, text, one a line")
    ap.add_argument("--decode_verses", type=int, default=0, help="decode only the first N dev inputs (0: all)")
    ap.add_argument("--log_every", type=int, default=50)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    layers, D, Fd, H = HPARAMS_SETS[a.hparams_set]

    t0 = time.time()
    train = read_split(a.data_dir, a.problem, "train")
    dev = read_split(a.data_dir, a.problem, "dev")
    vocab_files = [f for f in os.listdir(a.data_dir) if f.startswith(f"vocab.{a.problem}.") and f.endswith(".subwords")]
    subs = load_subwords(os.path.join(a.data_dir, vocab_files[0]))
    has_inputs = bool(train[0][0])
    positions = max(a.max_length, max(example_len(e) for e in dev))
    load_s = time.time() - t0

    model = Transformer(has_inputs, len(subs), len(subs), layers, D, Fd, H, a.dropout, a.dropout, a.dropout,
                        positions)
    opt = TFAdam(model.parameters(), 0.9, 0.997, 1e-9)
    nparams = sum(p.numel() for p in model.parameters())
    batches = train_batches(train, a.batch_size, a.max_length, a.seed)
    model.train()
    t_train, c_train = time.time(), time.process_time()
    losses, tokens_seen = [], 0
    for step in range(a.steps):
        inp, tgt = next(batches)
        logits = model(inp, tgt)
        loss, _, n = padded_xent(logits, tgt, a.label_smoothing)
        for p in model.parameters():
            p.grad = None
        loss.backward()
        opt.step(t2t_lr(step, a.lr_constant, a.warmup, D), step + 1)
        losses.append(float(loss))
        tokens_seen += int(n)
        if a.log_every and (step + 1) % a.log_every == 0:
            print(f"torch step {step + 1}/{a.steps} loss {sum(losses[-a.log_every:]) / a.log_every:.4f} "
                  f"({time.time() - t_train:.0f} s)", file=sys.stderr, flush=True)
    train_s, train_cpu = time.time() - t_train, time.process_time() - c_train

    t_eval = time.time()
    ev = evaluate(model, dev, a.batch_size)
    eval_s = time.time() - t_eval
    cpu_to_eval_end = time.process_time()  # the whole process so far: import, load, training, evaluation
    res = {"side": "pytorch", "torch_version": torch.__version__, "problem": a.problem, "steps": a.steps,
           "num_params": nparams, "train_seconds": train_s, "train_cpu_seconds": train_cpu,
           "load_seconds": load_s, "eval_seconds": eval_s,
           "cpu_seconds_to_eval_end": cpu_to_eval_end, "target_tokens_trained": tokens_seen,
           "final_train_loss": sum(losses[-10:]) / len(losses[-10:]), "eval": ev,
           "train_examples": len(train), "dev_examples": len(dev)}
    if a.decode_to_file and has_inputs:
        t_dec = time.time()
        todo = dev[:a.decode_verses] if a.decode_verses > 0 else dev
        outs = greedy(model, [e[0] for e in todo], positions)
        with open(a.decode_to_file, "w", encoding="utf-8") as f:
            for ids in outs:
                f.write(subword_decode(subs, ids) + "\n")
        res["decode_seconds"] = time.time() - t_dec
        res["decode_tokens"] = sum(len(o) for o in outs)
    res["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
