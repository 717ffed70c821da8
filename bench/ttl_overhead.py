"""What State TTL costs: states without TTL on two builds (before/after), and states with TTL
against the same states without it on one build. Every case runs in alternating child
processes.

    python bench/ttl_overhead.py --roots /path/to/build-before /path/to/build-after
    python bench/ttl_overhead.py --ttl-vs-plain /path/to/build

Each root is a directory holding a built ``stateengine`` package (e.g. a copy of the tree at
the commit before TTL, built in place, and this worktree). Every round runs one child per
root, in turn, so drifting machine load hits both alike; a child sets up value, list and map
states over ``--keys`` keys (flushed and compacted, as bench/cases_state.py does), then times
scalar ``set_current_key`` + one call, and the batch calls over distinct keys. The report is
the median rate per case and root and the ratio after/before (1.00 = no cost). Use it for
changes that touch the point and batch paths of every state.

``--ttl-vs-plain ROOT`` runs the same cases on one build twice per round: once as above, once
with every state declared with ``ttl=StateTtlConfig(...)`` (OnCreateAndWrite,
NeverReturnExpired, a TTL nothing reaches, so every read finds its entry). The ratio is then
plain/TTL rate, i.e. how many times longer a TTL call takes (the target is <= 1.3).

Rates on a loaded machine drift by tens of percent between runs; instruction counts do not.
``--callgrind`` runs every case once per variant under valgrind's callgrind (a few thousand
calls after the same setup, 20,000 keys at most) and reports instructions per operation,
counted inside the Cython entry point of each call (``__pyx_pw_*``: the binding, the C++ and
RocksDB under it; not the Python loop, nor ``set_current_key``)::

    python bench/ttl_overhead.py --roots BEFORE AFTER --callgrind
    python bench/ttl_overhead.py --ttl-vs-plain ROOT --callgrind
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = ["valueGet.scalar", "valueUpdate.scalar", "mapGet.scalar", "mapPut.scalar",
         "listGet.scalar", "listAppend.scalar", "valueGet.batch", "valueUpdate.batch",
         "mapGet.batch", "mapPut.batch", "listGet.batch", "listAppend.batch",
         "reducingAdd.scalar", "reducingAdd.batch"]


def child(keys: int, ops: int, rows: int, calls: int, once: bool = False,
          ttl: bool = False) -> dict[str, float]:
    """Runs in the child: rates (ops/s) of every case on this process's stateengine (with
    ``once``, each case runs a single time, without warm-up, for callgrind; with ``ttl``,
    every state has a TTL that nothing reaches)."""
    import numpy as np

    from stateengine import (KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
                             ReducingStateDescriptor, ValueStateDescriptor, reducers)

    opts = {}
    if ttl:
        from stateengine import StateTtlConfig
        opts = {"ttl": StateTtlConfig(ttl_ms=10 ** 12)}
    rng = np.random.default_rng(7)
    path = tempfile.mkdtemp(prefix="ttl-overhead-")
    b = KeyedStateBackend(os.path.join(path, "b"))
    if ttl:
        b.set_ttl_time(1_700_000_000_000)
    value = b.get_state(ValueStateDescriptor("value", value_type=int, **opts))
    lst = b.get_state(ListStateDescriptor("list", value_type=int, **opts))
    mp = b.get_state(MapStateDescriptor("map", user_key_type=int, value_type=float, **opts))
    # a native SUM: a merge without TTL, a read-fold-put in C++ with TTL (csrc/ttl.h)
    total = b.get_state(ReducingStateDescriptor("total", reducers.SUM, value_type=int, **opts))
    all_keys = np.arange(keys, dtype=np.int64)
    # Lists are written with update() (puts): a merge-only key stays as operands after the
    # compaction below when its family has no compaction filter (CompactRange moves the file
    # down without rewriting it), but is merged into a value when it has one (TTL), and the
    # two would not compare.
    for key in all_keys.tolist():
        b.set_current_key(key)
        lst.update([key])
    for a in range(0, keys, 100_000):
        k = all_keys[a:a + 100_000]
        value.put_many(k, k)
        mp.put_many(k, k % 10, k.astype(np.float64))
        total.add_many(k, k)
    b._native_flush()
    b._native_compact()
    scalar = rng.integers(0, keys, ops).tolist()
    batches = [rng.choice(keys, rows, replace=False).astype(np.int64) for _ in range(calls)]
    set_key = b.set_current_key

    def value_get() -> None:
        get = value.value
        for k in scalar:
            set_key(k)
            get()

    def value_update() -> None:
        put = value.update
        for k in scalar:
            set_key(k)
            put(k)

    def map_get() -> None:
        get = mp.get
        for k in scalar:
            set_key(k)
            get(k % 10)

    def map_put() -> None:
        put = mp.put
        for k in scalar:
            set_key(k)
            put(k % 10, 1.5)

    def list_get() -> None:
        get = lst.get
        for k in scalar:
            set_key(k)
            get()

    def list_append() -> None:
        add = lst.add
        for k in scalar:
            set_key(k)
            add(k)

    def reducing_add() -> None:
        add = total.add
        for k in scalar:
            set_key(k)
            add(1)

    def batched(fn):
        def run() -> None:
            for k in batches:
                fn(k)
        return run

    runs = {
        "valueGet.scalar": (value_get, ops), "valueUpdate.scalar": (value_update, ops),
        "mapGet.scalar": (map_get, ops), "mapPut.scalar": (map_put, ops),
        "listGet.scalar": (list_get, ops),
        "valueGet.batch": (batched(value.get_many), rows * calls),
        "valueUpdate.batch": (batched(lambda k: value.put_many(k, k)), rows * calls),
        "mapGet.batch": (batched(lambda k: mp.get_many(k, k % 10)), rows * calls),
        "mapPut.batch": (batched(lambda k: mp.put_many(k, k % 10, k * 0.5)), rows * calls),
        "listGet.batch": (batched(lst.get_many), rows * calls),
        # appends last: they grow the lists the reads above measure
        "listAppend.scalar": (list_append, ops),
        "listAppend.batch": (batched(lambda k: lst.add_many(k, k)), rows * calls),
        "reducingAdd.scalar": (reducing_add, ops),
        "reducingAdd.batch": (batched(lambda k: total.add_many(k, k)), rows * calls),
    }
    if once:
        # The marker callgrind dumps before (--dump-before): what follows is the cases only.
        from stateengine import _native
        _native.crc32c(b"ttl_overhead: setup done")
    out = {}
    for name, (fn, n) in runs.items():
        if not once:
            fn()  # warm-up
        t0 = time.perf_counter()
        fn()
        out[name] = n / (time.perf_counter() - t0)
    b.close()
    return out


# The Cython entry point each case calls (per-op instructions: its inclusive cost / ops).
ENTRY_POINTS = {
    "valueGet.scalar": "NativeValueState_3value", "valueUpdate.scalar": "NativeValueState_5update",
    "mapGet.scalar": "NativeMapState_3get", "mapPut.scalar": "NativeMapState_5put",
    "listGet.scalar": "NativeListState_1get", "listAppend.scalar": "NativeListState_3add",
    "valueGet.batch": "_value_get_many", "valueUpdate.batch": "_value_put_many",
    "mapGet.batch": "_map_get_many", "mapPut.batch": "_map_put_many",
    "listGet.batch": "_list_get_many", "listAppend.batch": "_list_add_many",
    "reducingAdd.scalar": "NativeReducingState_5add", "reducingAdd.batch": "_merging_add_many",
}


def child_args(keys: int, ops: int, rows: int, calls: int, ttl: bool) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--child", "--keys", str(keys), "--ops",
            str(ops), "--rows", str(rows), "--calls", str(calls), *(["--ttl"] if ttl else [])]


def callgrind(root: str, ttl: bool, keys: int, ops: int, rows: int,
              calls: int) -> dict[str, float]:
    """Instructions per operation of every case under one root (one valgrind run). Callgrind
    dumps and zeroes its counts at the child's marker call after setup (``--dump-before``;
    one ``--toggle-collect`` per entry point does not work: callgrind 3.19 honours only the
    first), so the final profile holds the cases alone and each entry point's inclusive cost
    is its case's."""
    import glob
    import re

    out = tempfile.mktemp(prefix="ttl-overhead-", suffix=".callgrind")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(root), OPENBLAS_NUM_THREADS="1")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           "--dump-before=__pyx_pw_*crc32c(*", *child_args(keys, ops, rows, calls, ttl), "--once"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                               capture_output=True, text=True).stdout
    for f in glob.glob(out + "*"):
        os.remove(f)
    result = {}
    for case, entry in ENTRY_POINTS.items():
        m = re.search(r"^\s*([\d,]+) .*__pyx_pw_\w*" + re.escape(entry) + r"\(", annotated, re.M)
        n = ops if case.endswith("scalar") else rows * calls
        result[case] = int(m.group(1).replace(",", "")) / n if m else float("nan")
    return result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--roots", nargs=2, metavar=("BEFORE", "AFTER"))
    p.add_argument("--ttl-vs-plain", metavar="ROOT",
                   help="one build: states without TTL (before) against the same with TTL")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--keys", type=int, default=200_000)
    p.add_argument("--ops", type=int, default=100_000)
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--callgrind", action="store_true",
                   help="instructions per operation under callgrind instead of rates")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ttl", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.keys, args.ops, args.rows, args.calls, args.once, args.ttl)))
        return 0
    if args.ttl_vs_plain:
        variants = [(args.ttl_vs_plain, False), (args.ttl_vs_plain, True)]
        labels = ("plain", "TTL", "TTL cost")
    elif args.roots:
        variants = [(r, False) for r in args.roots]
        labels = ("before", "after", "after/before")
    else:
        p.error("--roots BEFORE AFTER or --ttl-vs-plain ROOT is required")
    if args.callgrind:
        keys = min(args.keys, 20_000)
        ops, rows, calls = min(args.ops, 2_000), min(args.rows, 1_000), min(args.calls, 4)
        counts = [callgrind(r, t, keys, ops, rows, calls) for r, t in variants]
        print(f"{'case':<22}{labels[0] + ' Ir/op':>14}{labels[1] + ' Ir/op':>14}{labels[2]:>14}")
        for case in CASES:
            b, a = counts[0][case], counts[1][case]
            print(f"{case:<22}{b:>14,.0f}{a:>14,.0f}{a / b:>14.4f}")
        return 0
    samples: list[dict[str, list[float]]] = [{c: [] for c in CASES} for _ in variants]
    for rnd in range(args.rounds):
        for i, (root, ttl) in enumerate(variants):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(root), OPENBLAS_NUM_THREADS="1")
            proc = subprocess.run(child_args(args.keys, args.ops, args.rows, args.calls, ttl),
                                  env=env, capture_output=True, text=True,
                                  cwd=tempfile.gettempdir())
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr)
                return 1
            for case, rate in json.loads(proc.stdout.strip().splitlines()[-1]).items():
                samples[i][case].append(rate)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'case':<22}{labels[0] + ' ops/s':>14}{labels[1] + ' ops/s':>14}{labels[2]:>14}")
    for case in CASES:
        b = statistics.median(samples[0][case])
        a = statistics.median(samples[1][case])
        # before/after: the rate ratio (1.00 = no cost); plain/TTL: the time ratio (>= 1)
        ratio = b / a if args.ttl_vs_plain else a / b
        print(f"{case:<22}{b:>14,.0f}{a:>14,.0f}{ratio:>14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
