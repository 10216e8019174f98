#!/usr/bin/env python3
"""tests/tools/check_timeline.py FILE... — an independent reader of `dtrain train --timeline` files
(the Chrome trace event format, JSON object form), one task's or `dtrain timeline merge`'s of several:
checks each file's shape and that on every thread the spans nest and never overlap, then prints one
JSON summary on stdout:

  {"processes": {"chief:0": {"pid": P, "spans": {"step/compute": N, ...}}, ...},
   "buckets": {"chief:0": [[ts, end, bytes], ...], ...}, "rounds": {...: [[ts, end, bytes], ...]}}

Times are read as exact decimals (Decimal): microseconds since the epoch with nanosecond digits do
not fit a double. Exit 1 with the reason on the first violation.
"""
import json
import sys
from decimal import Decimal


def fail(msg):
    print("check_timeline: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    out = {"processes": {}, "buckets": {}, "rounds": {}}
    for path in sys.argv[1:]:
        with open(path) as f:
            doc = json.load(f, parse_float=Decimal)
        if not {"traceEvents", "displayTimeUnit", "otherData"} <= set(doc):
            fail(f"{path}: top-level keys {sorted(doc)}")
        names, spans = {}, []
        for e in doc["traceEvents"]:
            if e.get("ph") == "M":
                if e["name"] == "process_name":
                    names[e["pid"]] = e["args"]["name"]
                continue
            if e.get("ph") != "X":
                fail(f"{path}: event of phase {e.get('ph')!r}")
            for k in ("name", "cat", "ts", "dur", "pid", "tid", "args"):
                if k not in e:
                    fail(f"{path}: span without {k!r}: {e}")
            if e["dur"] < 0:
                fail(f"{path}: negative duration: {e}")
            spans.append(e)
        if not names:
            fail(f"{path}: no process name")
        threads = {}
        for e in spans:
            if e["pid"] not in names:
                fail(f"{path}: span of a process without a name: {e}")
            threads.setdefault((e["pid"], e["tid"]), []).append(e)
        for (pid, tid), es in threads.items():
            es.sort(key=lambda e: (e["ts"], -e["dur"]))
            stack = []
            for e in es:
                end = e["ts"] + e["dur"]
                while stack and stack[-1][0] <= e["ts"]:
                    stack.pop()
                if stack and end > stack[-1][0]:
                    fail(f"{path}: {names[pid]} thread {tid}: '{e['cat']}/{e['name']}' [{e['ts']}, {end}] overlaps "
                         f"'{stack[-1][1]}' ending at {stack[-1][0]} without nesting in it")
                stack.append((end, e["cat"] + "/" + e["name"]))
        for pid, task in names.items():
            mine = sorted((e for e in spans if e["pid"] == pid), key=lambda e: e["ts"])
            counts = {}
            for e in mine:
                key = e["cat"] + "/" + e["name"]
                counts[key] = counts.get(key, 0) + 1
            out["processes"][task] = {"pid": pid, "spans": counts, "dropped": doc["otherData"].get("dropped", 0)}
            out["buckets"][task] = [[str(e["ts"]), str(e["ts"] + e["dur"]), e["args"].get("bytes", -1)]
                                    for e in mine if e["cat"] == "allreduce"]
            out["rounds"][task] = [[str(e["ts"]), str(e["ts"] + e["dur"]), e["args"].get("bytes", -1)]
                                   for e in mine if e["cat"] == "ps"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
