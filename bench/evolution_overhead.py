"""What schema evolution costs typed state, counted in instructions under callgrind.

    python bench/evolution_overhead.py --before /path/to/build-before --after .

Four variants of the same typed value, list and map states (values of the schema
``count bigint, last string, seen array<bigint>, flag boolean``), each read and written by
the scalar and the batch calls:

* ``before``: the build before schema evolution (a directory holding a built ``stateengine``,
  e.g. a copy of the tree at commit 5ae7088 built in place), state that never evolved;
* ``plain``: this build, the same state (no schema history);
* ``current``: this build, the state evolved from ``count int, last string, seen
  array<bigint>`` (a widened and an added field) and every entry written again since, so
  each carries the current version's marker;
* ``old``: this build, the same evolved state whose entries were all written before the
  evolution: every read upgrades an old entry (writes are in the current schema anyway).

Each variant runs once under valgrind's callgrind: the same setup in all (``--keys`` entries
written, restored under the new schema, written again, restored, flushed and compacted),
then one forked process per case (``--ops`` scalar calls, or ``--calls`` batch calls of
``--rows`` distinct keys), each with a profile of its own. The report is instructions per
operation counted inside the Cython entry point of each call, as bench/ttl_overhead.py
counts them, printed and written to bench/results/evolution-overhead-latest.json (with a line
in history.jsonl). The targets: ``plain`` and ``current`` cost what ``before`` does; ``old``
reads at most 1.5x. Instruction counts do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ttl_overhead import ENTRY_POINTS as TTL_ENTRY_POINTS  # noqa: E402

OLD = "count int, last string, seen array<bigint>"
NEW = "count bigint, last string, seen array<bigint>, flag boolean"
CASES = ["valueGet.scalar", "valueUpdate.scalar", "mapGet.scalar", "mapPut.scalar",
         "listGet.scalar", "listAppend.scalar", "valueGet.batch", "valueUpdate.batch",
         "mapGet.batch", "mapPut.batch", "listGet.batch", "listAppend.batch"]
# the Cython entry point each case calls (the same cases as bench/ttl_overhead.py)
ENTRY_POINTS = {c: TTL_ENTRY_POINTS[c] for c in CASES}
VARIANTS = ("before", "plain", "current", "old")


def child(variant: str, keys: int, ops: int, rows: int, calls: int) -> None:
    """Sets the states up as the variant says, then runs every case once."""
    import numpy as np
    import pyarrow as pa

    from stateengine import (KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
                             ValueStateDescriptor, _native)

    def descs(schema):
        return [ValueStateDescriptor("value", schema), ListStateDescriptor("list", schema),
                MapStateDescriptor("map", user_key_type=int, value_type=schema)]

    def columns(schema, ks):
        n = len(ks)
        cols = {"count": pa.array(ks, pa.int32() if schema == OLD else pa.int64()),
                "last": pa.array([f"s{k % 97}" for k in ks.tolist()]),
                "seen": pa.array([[1, 2, 3]] * n, pa.list_(pa.int64()))}
        if schema == NEW:
            cols["flag"] = pa.array([True] * n)
        return pa.StructArray.from_arrays(list(cols.values()), list(cols))

    path = tempfile.mkdtemp(prefix="evolution-overhead-")
    all_keys = np.arange(keys, dtype=np.int64)
    first = OLD if variant in ("current", "old") else NEW
    b = KeyedStateBackend(os.path.join(path, "b"), key_type=int)
    value, lst, mp = (b.get_state(d) for d in descs(first))

    def fill(value, lst, mp, schema):
        for a in range(0, keys, 10_000):
            k = all_keys[a:a + 10_000]
            col = columns(schema, k)
            value.put_many(k, col)
            mp.put_many(k, k % 10, col)
        # Lists are put, not merged: merge operands could stay unmerged after the compaction
        # below in one variant and not in another (see bench/ttl_overhead.py)
        extra = (True,) if schema == NEW else ()
        for key in all_keys.tolist():
            b.set_current_key(key)
            lst.update([(key, f"s{key % 97}", [1, 2, 3], *extra)])

    def snapshot_restore(name):
        nonlocal b
        handle = b.snapshot(os.path.join(path, name + "-snap"), "s").result()
        b.close()
        b = KeyedStateBackend.restore(os.path.join(path, name), [handle], key_type=int,
                                      descriptors=descs(NEW))
        return [b.get_state(d) for d in descs(NEW)]

    # The same sequence in every variant: write every entry, restore under the new schema,
    # write every entry again (to other states in "old", whose entries must stay old), restore.
    # RocksDB draws its memtable skip list heights from a per-thread random generator, so
    # writes cost the same only if every variant inserted as many entries before the cases.
    fill(value, lst, mp, first)
    print(f"{variant}: stateengine from {os.path.dirname(_native.__file__)}", file=sys.stderr)
    value, lst, mp = snapshot_restore("evolved")
    if variant == "old":
        fill(*(b.get_state(d) for d in [ValueStateDescriptor("value2", NEW),
                                        ListStateDescriptor("list2", NEW),
                                        MapStateDescriptor("map2", int, NEW)]), NEW)
    else:
        fill(value, lst, mp, NEW)
    value, lst, mp = snapshot_restore("final")
    b._native_flush()
    b._native_compact()
    rng = np.random.default_rng(7)
    scalar = rng.integers(0, keys, ops).tolist()
    batches = [rng.choice(keys, rows, replace=False).astype(np.int64) for _ in range(calls)]
    writes = [columns(NEW, k) for k in batches]
    set_key = b.set_current_key
    row = (1, "x", [1, 2, 3], True)

    def scalar_case(call):
        def run():
            for k in scalar:
                set_key(k)
                call(k)
        return run

    def batched(fn):
        def run():
            for i, k in enumerate(batches):
                fn(k, writes[i])
        return run

    runs = {
        "valueGet.scalar": scalar_case(lambda k: value.value()),
        "valueUpdate.scalar": scalar_case(lambda k: value.update(row)),
        "mapGet.scalar": scalar_case(lambda k: mp.get(k % 10)),
        "mapPut.scalar": scalar_case(lambda k: mp.put(k % 10, row)),
        "listGet.scalar": scalar_case(lambda k: lst.get()),
        "valueGet.batch": batched(lambda k, w: value.get_many(k)),
        "valueUpdate.batch": batched(lambda k, w: value.put_many(k, w)),
        "mapGet.batch": batched(lambda k, w: mp.get_many(k, k % 10)),
        "mapPut.batch": batched(lambda k, w: mp.put_many(k, k % 10, w)),
        "listGet.batch": batched(lambda k, w: lst.get_many(k)),
        "listAppend.scalar": scalar_case(lambda k: lst.add(row)),
        "listAppend.batch": batched(lambda k, w: lst.add_many(k, w)),
    }
    # One forked process per case: each starts from the same setup (the same memtables and
    # the same state of RocksDB's per-thread generator of skip list heights, from which a
    # write's cost depends), so that a case costs the same in two variants when its calls do.
    # Callgrind follows the fork; the marker call in the child dumps and zeroes its counts, so
    # each child's final profile holds its case alone.
    only = os.environ.get("EVOLUTION_OVERHEAD_ONLY")  # comma-separated cases, for profiling
    for name in CASES:
        if only and name not in only.split(","):
            continue
        pid = os.fork()
        if pid == 0:
            _native.crc32c(b"evolution_overhead: setup done")
            runs[name]()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise SystemExit(f"case {name} failed ({status})")
    b.close()
    shutil.rmtree(path, ignore_errors=True)


def callgrind_variant(root: str, cmd: list[str], per_case: dict[str, int]) -> dict[str, float]:
    """Instructions per operation of every case of one variant: one callgrind run whose
    forked children (one per case) each write their own profile."""
    import glob
    import re

    prefix = tempfile.mktemp(prefix="evolution-overhead-")
    # a fixed hash seed: Python's per-process string hashing otherwise moves every dict
    # lookup's probe count, and so the counts of one binary by ~0.5% from run to run
    env = dict(os.environ, PYTHONPATH=os.path.abspath(root), OPENBLAS_NUM_THREADS="1",
               PYTHONHASHSEED="0")
    proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={prefix}.%p",
                           "--dump-before=__pyx_pw_*crc32c(*", *cmd],
                          env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    result: dict[str, float] = {}
    for path in glob.glob(prefix + ".*"):
        if re.search(r"\.\d+\.\d+$", path):  # the dumps at the marker: setup, not cases
            continue
        annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                                    path], capture_output=True, text=True).stdout
        for case, entry in ENTRY_POINTS.items():
            m = re.search(r"^\s*([\d,]+) .*__pyx_pw_\w*" + re.escape(entry) + r"\(",
                          annotated, re.M)
            if m:
                result[case] = int(m.group(1).replace(",", "")) / per_case[case]
    for path in glob.glob(prefix + ".*"):
        os.remove(path)
    return result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="root of the build before schema evolution")
    p.add_argument("--after", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--keys", type=int, default=20_000)
    p.add_argument("--ops", type=int, default=2_000)
    p.add_argument("--rows", type=int, default=1_000)
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "results"),
                   help="where evolution-overhead-latest.json and history.jsonl's line go")
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.keys, args.ops, args.rows, args.calls)
        return 0
    per_case = {c: args.ops if c.endswith("scalar") else args.rows * args.calls for c in CASES}
    load = os.getloadavg()
    counts = {}
    for v in VARIANTS:
        cmd = [sys.executable, os.path.abspath(__file__), "--before", args.before, "--child", v,
               "--keys", str(args.keys), "--ops", str(args.ops), "--rows", str(args.rows),
               "--calls", str(args.calls)]
        counts[v] = callgrind_variant(args.before if v == "before" else args.after, cmd,
                                      per_case)
        print(f"{v} done", file=sys.stderr, flush=True)
    print(f"{'case':<20}" + "".join(f"{v + ' Ir/op':>15}" for v in VARIANTS) +
          f"{'plain/before':>14}{'current/before':>16}{'old/before':>12}")
    for case in CASES:
        b = counts["before"][case]
        print(f"{case:<20}" + "".join(f"{counts[v][case]:>15,.0f}" for v in VARIANTS) +
              f"{counts['plain'][case] / b:>14.4f}{counts['current'][case] / b:>16.4f}"
              f"{counts['old'][case] / b:>12.4f}")
    import history

    report = {"keys": args.keys, "ops": args.ops, "rows": args.rows, "calls": args.calls,
              "before": os.path.abspath(args.before), "load_average": load,
              "load_average_after": os.getloadavg(),
              "ir_per_op": {v: {c: round(counts[v][c]) for c in CASES} for v in VARIANTS},
              "ratio_to_before": {v: {c: round(counts[v][c] / counts["before"][c], 4)
                                      for c in CASES} for v in VARIANTS[1:]}}
    print(f"wrote {history.record(args.out, 'evolution_overhead', report)} and its line in "
          f"history.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
