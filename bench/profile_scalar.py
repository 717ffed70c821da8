"""Where the time of a scalar state call goes: py-spy (with native frames) over the loop
flink-benchmarks times, ``set_current_key(k)`` + one call, on a settled state.

    python bench/profile_scalar.py                     # valueGet and valueUpdate
    python bench/profile_scalar.py --op get --seconds 10 --rocksdb debian

Writes bench/results/profile-scalar-<op>.txt: the share of loop samples per stage (Python
interpreter, set_current_key, the binding, RocksDB and its parts) and the top frames.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import builds  # noqa: E402

LOOP = "hot_loop"
# (label, frame substring): shares of loop samples whose stack holds the frame
STAGES = [
    ("set_current_key (encode, hash, key-group prefix)", "set_current_key"),
    ("value() in the binding (incl. RocksDB)", "value (stateengine/_native"),
    ("update() in the binding (incl. RocksDB)", "update (stateengine/_native"),
    ("RocksDB Get", "rocksdb::DBImpl::Get"),
    ("RocksDB Put (WriteBatch + memtable insert)", "rocksdb::DBImpl::Put"),
    ("  memtable lookup", "rocksdb::MemTable::Get"),
    ("  memtable insert", "rocksdb::MemTable::Add"),
    ("  bloom filter probe", "FullFilterKeyMayMatch"),
    ("  index block seek", "rocksdb::IndexBlockIter::SeekImpl"),
    ("  data block seek", "rocksdb::DataBlockIter::SeekImpl"),
    ("  block cache lookups", "LRUCacheShard::Lookup"),
]


def child(op: str, keys_n: int, seconds: float) -> None:
    import numpy as np

    from stateengine import KeyedStateBackend, ValueStateDescriptor

    backend = KeyedStateBackend(os.path.join(tempfile.mkdtemp(), "db"), key_type=int)
    state = backend.get_state(ValueStateDescriptor("value", value_type=int))
    for a in range(0, keys_n, 100_000):
        k = np.arange(a, min(keys_n, a + 100_000), dtype=np.int64)
        state.put_many(k, k)
    backend._native_flush()
    backend._native_compact()
    keys = np.random.default_rng(1).integers(0, keys_n, 200_000).tolist()

    def hot_loop() -> int:
        set_key = backend.set_current_key
        call = state.value if op == "get" else state.update
        if op == "get":
            for k in keys:
                set_key(k)
                call()
        else:
            for k in keys:
                set_key(k)
                call(k)
        return len(keys)

    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        n += hot_loop()
    # py-spy stops the process for every native stack it samples, so this rate is far below
    # the unprofiled one; the shares are what the profile is for.
    print(f"{op}: {n / (time.perf_counter() - t0):,.0f} ops/s while sampled by py-spy")
    backend.dispose()


def summarize(raw: str, op: str, rate_line: str, build: str) -> str:
    incl: Counter[str] = Counter()
    total = 0
    with open(raw) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            if not any(LOOP in fr for fr in frames):
                continue
            total += int(n)
            for fr in set(frames):
                incl[fr] += int(n)
    if not total:
        return "no samples inside the loop\n"

    # Stacks are counted once per stage even if a substring matches several frames of it.
    def stage(sub: str) -> float:
        with open(raw) as f:
            hit = 0
            for line in f:
                stack, _, n = line.rstrip().rpartition(" ")
                if LOOP in stack and sub in stack:
                    hit += int(n)
        return 100.0 * hit / total

    native = stage("_native.cpython")
    lines = [f"scalar {op}: set_current_key(k) + {'value()' if op == 'get' else 'update(v)'}, "
             f"build {build}", rate_line.strip(), f"{total} samples inside the loop", "",
             f"{'stage':<52} share of loop samples"]
    lines.append(f"{'Python interpreter (loop, calls; outside the extension)':<52} {100 - native:5.1f}%")
    other = ("update()", "Put", "insert") if op == "get" else ("value()", "Get", "lookup")
    for label, sub in STAGES:
        if any(word in label for word in other):
            continue
        s = stage(sub)
        if s >= 0.05:
            lines.append(f"{label:<52} {s:5.1f}%")
    lines += ["", "top frames (inclusive):"]
    for fr, n in incl.most_common(40):
        lines.append(f"{100.0 * n / total:5.1f}%  {fr[:140]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", choices=("get", "update", "both"), default="both")
    p.add_argument("--keys", type=int, default=500_000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.op, args.keys, args.seconds)
        return 0
    build = builds.use(args.rocksdb, False, __file__)
    os.makedirs(args.out, exist_ok=True)
    for op in ("get", "update") if args.op == "both" else (args.op,):
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, "raw.txt")
            proc = subprocess.run(
                ["py-spy", "record", "--native", "-r", "250", "-f", "raw", "-o", raw, "--",
                 sys.executable, os.path.abspath(__file__), "--child", "--op", op,
                 "--keys", str(args.keys), "--seconds", str(args.seconds)],
                capture_output=True, text=True)
            if proc.returncode != 0:
                sys.stderr.write(proc.stdout + proc.stderr)
                return 1
            rate = next((ln for ln in proc.stdout.splitlines() if "ops/s" in ln), "")
            text = summarize(raw, op, rate, build)
        path = os.path.join(args.out, f"profile-scalar-{op}.txt")
        with open(path, "w") as f:
            f.write(text)
        print(text.split("\ntop frames")[0])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
