#!/usr/bin/python3
"""An independent reader and writer of t2t's data files for dtrain's tests.

TFRecord framing by hand (struct and a pure-Python CRC-32C, so nothing is
shared with dtrain's C code) and tf.train.Example through python3-protobuf
with the messages of t2t_example.proto, compiled here by protoc.

  t2t_files.py read DIR PROBLEM SPLIT COUNT
      reads every DIR/PROBLEM-SPLIT-*-of-* file, checks both masked CRCs of
      every record, parses each as an Example and checks algorithmic_reverse
      examples (int64 `inputs` and `targets` ending in EOS = 1, targets the
      reversed inputs); prints "ok N" and exits 0 when there are COUNT.
  t2t_files.py write DIR PROBLEM SPLIT SHARDS COUNT SEED
      writes COUNT reversal examples (binary symbols, ids 2 and 3, lengths 1
      to 40) round-robin into SHARDS files named as t2t names them; file k
      is plain and packed when k % 3 == 0, GZIP with unpacked values when
      k % 3 == 1, ZLIB when k % 3 == 2.
  t2t_files.py dir DIR PROBLEM KIND SEED [VOCAB_SRC VOCAB_NAME]
      writes a data dir as t2t-datagen would for a problem of KIND:
      PROBLEM-train-00000-of-00002, -00001-of-00002 and
      PROBLEM-dev-00000-of-00001 (plain TFRecord), and copies VOCAB_SRC to
      DIR/VOCAB_NAME when given. Text ids are in [3, 100) (a vocabulary of
      at least 100 ids holds them), each sequence ending in EOS:
        translate  int64 inputs and targets: targets are the inputs with
                   each id moved up by one (99 wraps to 3)
        lm         int64 targets alone: runs of consecutive ids
        wide       as translate, with ids in [3, 300): past the byte range and
                   past a vocabulary of 100 ids
        textclass  int64 inputs and a one-element targets class (0-3)
        image      image/encoded (8x8 grey PNG, written by hand here),
                   image/format "png", image/class/label: the class (0-3) is
                   the bright quadrant, under noise
      train 2000 examples (image: 800), dev 200.
"""
import gzip
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import zlib

from crc32c_ref import crc32c, masked


def load_pb2():
    here = os.path.dirname(os.path.abspath(__file__))
    out = tempfile.mkdtemp(prefix="t2t_pb2_")
    subprocess.run(["protoc", "-I" + here, "--python_out=" + out, os.path.join(here, "t2t_example.proto")],
                   check=True)
    sys.path.insert(0, out)
    import t2t_example_pb2  # noqa: E402
    return t2t_example_pb2


def records(blob, name):
    if blob[:2] == b"\x1f\x8b":
        blob = gzip.decompress(blob)
    elif len(blob) >= 12 and masked(blob[:8]) != struct.unpack("<I", blob[8:12])[0]:
        blob = zlib.decompress(blob)
    pos, k = 0, 0
    while pos < len(blob):
        (n,) = struct.unpack("<Q", blob[pos:pos + 8])
        assert masked(blob[pos:pos + 8]) == struct.unpack("<I", blob[pos + 8:pos + 12])[0], (name, k, "length crc")
        data = blob[pos + 12:pos + 12 + n]
        assert len(data) == n, (name, k, "truncated")
        assert masked(data) == struct.unpack("<I", blob[pos + 12 + n:pos + 16 + n])[0], (name, k, "data crc")
        yield data
        pos += 16 + n
        k += 1


def shard_files(d, problem, split):
    pat = re.compile(re.escape(problem + "-" + split + "-") + r"\d{5}-of-\d{5}$")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if pat.match(f))


def read(d, problem, split, count):
    pb = load_pb2()
    files = shard_files(d, problem, split)
    assert files, "no files"
    total = 0
    for path in files:
        with open(path, "rb") as f:
            blob = f.read()
        for data in records(blob, path):
            ex = pb.Example()
            ex.ParseFromString(data)
            feat = ex.features.feature
            assert set(feat.keys()) == {"inputs", "targets"}, feat.keys()
            inp = list(feat["inputs"].int64_list.value)
            tgt = list(feat["targets"].int64_list.value)
            assert inp[-1] == 1 and tgt[-1] == 1, (inp, tgt)
            assert all(i in (2, 3) for i in inp[:-1]), inp
            assert tgt[:-1] == inp[:-1][::-1], (inp, tgt)
            total += 1
    assert total == count, (total, count)
    print("ok", total, "examples in", len(files), "files")


def frame(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


def write(d, problem, split, shards, count, seed):
    pb = load_pb2()
    rng = random.Random(seed)
    out = [[] for _ in range(shards)]
    for i in range(count):
        k = i % shards
        syms = [rng.randrange(2) + 2 for _ in range(rng.randint(1, 40))]
        ex = pb.ExampleUnpacked() if k % 3 == 1 else pb.Example()
        ex.features.feature["inputs"].int64_list.value.extend(syms + [1])
        ex.features.feature["targets"].int64_list.value.extend(syms[::-1] + [1])
        out[k].append(frame(ex.SerializeToString()))
    for k in range(shards):
        blob = b"".join(out[k])
        blob = blob if k % 3 == 0 else gzip.compress(blob) if k % 3 == 1 else zlib.compress(blob)
        with open(os.path.join(d, "%s-%s-%05d-of-%05d" % (problem, split, k, shards)), "wb") as f:
            f.write(blob)
    print("wrote", count, "examples in", shards, "files")


def png_grey(w, h, pixels):
    """A minimal 8-bit greyscale PNG: IHDR, one IDAT (filter 0 rows), IEND."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    raw = b"".join(b"\x00" + bytes(pixels[y * w:(y + 1) * w]) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def dir_example(pb, kind, rng):
    ex = pb.Example()
    feat = ex.features.feature
    if kind == "image":
        label = rng.randrange(4)
        px = [rng.randrange(0, 90) for _ in range(64)]
        for y in range(4):
            for x in range(4):
                px[(y + 4 * (label // 2)) * 8 + x + 4 * (label % 2)] = rng.randrange(170, 256)
        feat["image/encoded"].bytes_list.value.append(png_grey(8, 8, px))
        feat["image/format"].bytes_list.value.append(b"png")
        feat["image/class/label"].int64_list.value.append(label)
        return ex
    n = rng.randint(2, 12)
    if kind == "lm":
        start = rng.randrange(3, 100)
        feat["targets"].int64_list.value.extend([3 + (start - 3 + j) % 97 for j in range(n)] + [1])
        return ex
    top = 300 if kind == "wide" else 100
    ids = [rng.randrange(3, top) for _ in range(n)]
    feat["inputs"].int64_list.value.extend(ids + [1])
    if kind == "textclass":
        feat["targets"].int64_list.value.append(sum(ids) % 4)
    else:
        feat["targets"].int64_list.value.extend([3 + (i - 3 + 1) % (top - 3) for i in ids] + [1])
    return ex


def write_dir(d, problem, kind, seed, vocab_src=None, vocab_name=None):
    assert kind in ("translate", "wide", "lm", "textclass", "image"), kind
    pb = load_pb2()
    rng = random.Random(seed)
    os.makedirs(d, exist_ok=True)
    train = 800 if kind == "image" else 2000
    for split, shards, count in (("train", 2, train), ("dev", 1, 200)):
        out = [[] for _ in range(shards)]
        for i in range(count):
            out[i % shards].append(frame(dir_example(pb, kind, rng).SerializeToString()))
        for k in range(shards):
            with open(os.path.join(d, "%s-%s-%05d-of-%05d" % (problem, split, k, shards)), "wb") as f:
                f.write(b"".join(out[k]))
    if vocab_src:
        with open(vocab_src, "rb") as f, open(os.path.join(d, vocab_name), "wb") as g:
            g.write(f.read())
    print("wrote", problem, kind, "in", d)


if __name__ == "__main__":
    assert crc32c(b"123456789") == 0xE3069283
    a = sys.argv[1:]
    if a and a[0] == "read" and len(a) == 5:
        read(a[1], a[2], a[3], int(a[4]))
    elif a and a[0] == "write" and len(a) == 7:
        write(a[1], a[2], a[3], int(a[4]), int(a[5]), int(a[6]))
    elif a and a[0] == "dir" and len(a) in (5, 7):
        write_dir(a[1], a[2], a[3], int(a[4]), *a[5:])
    else:
        sys.exit(__doc__)
