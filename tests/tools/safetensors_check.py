#!/usr/bin/python3
"""An independent safetensors reader (stdlib only) that checks every layout
rule of huggingface/safetensors (shared/reference/checkpoints.md, section 2.1)
plus what dtrain's writer promises (docs/CHECKPOINTS.md):

  reference rules (as the Rust reader's read_metadata / validate):
    file >= 8 bytes; N <= 100,000,000; 8 + N <= file size; header UTF-8;
    valid JSON object, no duplicate keys; each tensor {dtype, shape,
    data_offsets} with a known dtype; sorted by offsets the tensors tile
    [0, buffer) with no hole, END >= BEGIN; whole-byte dtypes; END - BEGIN ==
    prod(shape) * bytes(dtype); buffer fully indexed (no trailing bytes);
    __metadata__ values all strings.
  dtrain writer rules (--strict):
    header begins with '{', padded with spaces to make 8 + N a multiple of 8,
    compact JSON with "__metadata__" as the first key; tensors laid out in
    (dtype alignment descending, name) order; metadata format/global_step/
    crc32c present, crc32c matches the buffer, global_step tensor matches;
    format dtrain.ckpt.v2 has header_crc32c, the CRC-32C of bytes [0, 8+N)
    with that value's 8 digits replaced by "00000000".

Usage: safetensors_check.py [--strict] FILE...   exit 0 when every file passes,
1 with "FILE: rule" lines otherwise.
"""
import json
import struct
import sys

from crc32c_ref import crc32c

BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
MAX_HEADER = 100_000_000


class Bad(Exception):
    pass


def no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise Bad("duplicate key %r in the header" % k)
        d[k] = v
    return d


def check(blob, strict):
    if len(blob) < 8:
        raise Bad("HeaderTooSmall: %d bytes" % len(blob))
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER:
        raise Bad("HeaderTooLarge: N = %d" % n)
    if 8 + n > len(blob):
        raise Bad("InvalidHeaderLength: N = %d, file %d bytes" % (n, len(blob)))
    raw = blob[8:8 + n]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Bad("InvalidHeader: not UTF-8 (%s)" % e)
    try:
        header = json.loads(text, object_pairs_hook=no_duplicates)
    except ValueError as e:
        raise Bad("InvalidHeaderDeserialization: %s" % e)
    if not isinstance(header, dict):
        raise Bad("InvalidHeaderDeserialization: header is not an object")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise Bad("InvalidHeaderDeserialization: __metadata__ values must all be strings")
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise Bad("InvalidHeaderDeserialization: tensor %r needs exactly dtype, shape, data_offsets" % name)
        dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in BITS:
            raise Bad("InvalidHeaderDeserialization: tensor %r has unknown dtype %r" % (name, dt))
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise Bad("InvalidHeaderDeserialization: tensor %r shape %r" % (name, shape))
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) and o >= 0 for o in offs)):
            raise Bad("InvalidHeaderDeserialization: tensor %r data_offsets %r" % (name, offs))
        tensors.append((offs[0], offs[1], name, dt, shape))
    tensors.sort()
    end = 0
    for begin, stop, name, dt, shape in tensors:
        if begin != end or stop < begin:
            raise Bad("InvalidOffset(%s): [%d, %d) expected to begin at %d" % (name, begin, stop, end))
        elems = 1
        for d in shape:
            elems *= d
        bits = elems * BITS[dt]
        if bits >= 1 << 64:
            raise Bad("ValidationOverflow: %s" % name)
        if BITS[dt] % 8:
            raise Bad("MisalignedSlice: %s is %s" % (name, dt))
        if stop - begin != bits // 8:
            raise Bad("TensorInvalidInfo: %s has %d bytes, shape %r %s needs %d" % (name, stop - begin, shape, dt,
                                                                                   bits // 8))
        end = stop
    if end + 8 + n != len(blob):
        raise Bad("MetadataIncompleteBuffer: tensors end at %d, buffer is %d bytes" % (end, len(blob) - 8 - n))
    if not strict:
        return
    if not raw.startswith(b"{"):
        raise Bad("strict: header does not begin with '{'")
    body = text.rstrip(" ")
    if (8 + n) % 8:
        raise Bad("strict: 8 + N = %d is not a multiple of 8" % (8 + n))
    if n - len(body.encode()) >= 8:
        raise Bad("strict: %d bytes of padding, more than 7" % (n - len(body.encode())))
    if not body.startswith('{"__metadata__":'):
        raise Bad("strict: __metadata__ is not the first key")
    if json.dumps(header, separators=(",", ":"), ensure_ascii=False) != body:
        raise Bad("strict: header is not compact JSON in the order written")
    order = sorted(tensors, key=lambda t: (-BITS[t[3]], t[2]))
    if [t[2] for t in order] != [t[2] for t in tensors]:
        raise Bad("strict: tensors not laid out by (alignment descending, name)")
    for key in ("format", "global_step", "crc32c"):
        if key not in meta:
            raise Bad("strict: no %r in __metadata__" % key)
    if meta.get("format") != "dtrain.ckpt.v1" or "header_crc32c" in meta:
        key = b'"header_crc32c":"'
        at = raw.find(key)
        if at < 0 or raw.find(key, at + 1) >= 0:
            raise Bad("strict: header_crc32c is not in the header exactly once")
        at += 8 + len(key)
        sealed = blob[:at] + b"00000000" + blob[at + 8:8 + n]
        if "%08x" % crc32c(sealed) != meta["header_crc32c"]:
            raise Bad("strict: header_crc32c of the header is %08x, __metadata__ says %s" %
                      (crc32c(sealed), meta["header_crc32c"]))
    data = blob[8 + n:]
    got = crc32c(data)
    if "%08x" % got != meta["crc32c"]:
        raise Bad("strict: crc32c of the buffer is %08x, __metadata__ says %s" % (got, meta["crc32c"]))
    gs = header.get("global_step")
    if not gs or gs["dtype"] != "I64" or gs["shape"] != []:
        raise Bad("strict: no rank-0 I64 tensor global_step")
    (step,) = struct.unpack("<q", data[gs["data_offsets"][0]:gs["data_offsets"][1]])
    if str(step) != meta["global_step"]:
        raise Bad("strict: global_step tensor %d, metadata %s" % (step, meta["global_step"]))


def main(argv):
    strict = "--strict" in argv
    files = [a for a in argv if a != "--strict"]
    if not files:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    bad = 0
    for path in files:
        with open(path, "rb") as f:
            blob = f.read()
        try:
            check(blob, strict)
            print("%s: ok" % path)
        except Bad as e:
            print("%s: %s" % (path, e))
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
