"""The task body of bench/scale.py's ``typed`` variant without Spark: CPU per distinct key.

One partition (of 2) of the job at ``--rows`` over ``--keys``: each of ``--batches`` batches
draws its rows as bench/scale.py does (uniform users, seed 21), keeps the partition's users, and
runs the ``typed`` body against one ``StateStoreProvider`` (get_store, ``np.unique`` +
``np.bincount``, ``get_many`` of the struct, Arrow -> numpy, ``put_many``, commit). Each step is
timed in CPU seconds of the whole process (RocksDB's background flushes and compactions
included, as they run in a Spark worker), divided by the batch's distinct keys; the table is
the mean of batches 2 to the last (the first starts from empty state).

    python bench/scale_body.py                        # 4M rows over 2M keys (~865k per partition)
    python bench/scale_body.py --rows 20000000 --keys 10000000
    python bench/scale_body.py --repeat 3             # best of 3 per step
    python bench/scale_body.py --ingest-min-keys 0    # batch puts through the memtable only
    python bench/scale_body.py --faults               # minor page faults per key, not CPU
    python bench/scale_body.py --wall                 # elapsed time per key (I/O waits too)

``--faults`` counts the process's minor page faults per step instead (fresh memory each step
touches: on a VM each costs one to ten µs, and unlike the CPU time the count does not move
with the machine's load).

Runs on the release wheel's RocksDB unless ``--rocksdb debian`` (bench/builds.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import builds  # noqa: E402

STEPS = ("unique+bincount", "get_many", "arrow->numpy", "put_many", "commit")


def _minor_faults() -> float:
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def run_once(rows: int, keys: int, batches: int, partition: int, scratch: str,
             measure: str = "cpu") -> list[dict[str, float]]:
    """One run from empty state; per batch the CPU µs (``measure`` "wall": elapsed µs,
    "faults": minor page faults) per distinct key of each step."""
    import numpy as np
    import pyarrow.compute as pc

    from scale import MAX_PARALLELISM, PARTITIONS, STRUCT, bigint_key_groups
    from stateengine import StateStoreProvider, ValueStateDescriptor

    desc = ValueStateDescriptor("acc", value_type=STRUCT)
    root = tempfile.mkdtemp(dir=scratch)
    provider = StateStoreProvider(os.path.join(root, "ckpt"), "default", partition, PARTITIONS,
                                  key_type=int, descriptors=[desc],
                                  local_dir=os.path.join(root, "local"))
    rng = np.random.default_rng(21)
    out = []
    clock = {"cpu": time.process_time, "wall": time.perf_counter, "faults": _minor_faults}[measure]
    faults = measure == "faults"
    try:
        for b in range(batches):
            users = rng.integers(0, keys, rows // batches).astype(np.int64)
            amount = rng.integers(0, 1000, rows // batches).astype(np.float64)
            mine = bigint_key_groups(users) * PARTITIONS // MAX_PARALLELISM == partition
            users, amount = users[mine], amount[mine]
            store = provider.get_store(b)
            acc = store.get_state(desc)
            t = {}
            t0 = clock()
            u, inverse, n = np.unique(users, return_inverse=True, return_counts=True)
            sums = np.bincount(inverse, weights=amount, minlength=len(u))
            t1 = clock()
            before, _ = acc.get_many(u)
            t2 = clock()
            count = n + pc.fill_null(pc.struct_field(before, "count"), 0).to_numpy()
            total = sums + pc.fill_null(pc.struct_field(before, "total"), 0.0).to_numpy()
            t3 = clock()
            acc.put_many(u, {"count": count, "total": total})
            t4 = clock()
            store.commit()
            t5 = clock()
            per = (1.0 if faults else 1e6) / len(u)
            t = {"keys": len(u), "unique+bincount": (t1 - t0) * per, "get_many": (t2 - t1) * per,
                 "arrow->numpy": (t3 - t2) * per, "put_many": (t4 - t3) * per,
                 "commit": (t5 - t4) * per}
            out.append(t)
        ckpt_bytes = sum(os.path.getsize(os.path.join(d, f))
                         for d, _, fs in os.walk(os.path.join(root, "ckpt")) for f in fs)
        out[-1]["checkpoint_mb"] = ckpt_bytes / 2**20
        # the result: the running totals after the last batch, against numpy
        check = np.random.default_rng(21)
        tot_n = np.zeros(keys, np.int64)
        tot_s = np.zeros(keys, np.float64)
        for b in range(batches):
            us = check.integers(0, keys, rows // batches)
            am = check.integers(0, 1000, rows // batches).astype(np.float64)
            np.add.at(tot_n, us, 1)
            np.add.at(tot_s, us, am)
        mine_all = np.nonzero(bigint_key_groups(np.arange(keys)) * PARTITIONS // MAX_PARALLELISM
                              == partition)[0]
        store = provider.get_store(batches)
        got, _ = store.get_state(desc).get_many(mine_all)
        gc = pc.fill_null(pc.struct_field(got, "count"), 0).to_numpy()
        gs = pc.fill_null(pc.struct_field(got, "total"), 0.0).to_numpy()
        if not (np.array_equal(gc, tot_n[mine_all]) and np.array_equal(gs, tot_s[mine_all])):
            raise SystemExit("bench/scale_body.py: the state's totals differ from numpy's")
        store.abort()
    finally:
        provider.close()
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--keys", type=int, default=2_000_000)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1, help="runs; each step's best mean is shown")
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None)
    p.add_argument("--scratch", default=None)
    p.add_argument("--faults", action="store_true",
                   help="minor page faults per distinct key instead of CPU µs")
    p.add_argument("--wall", action="store_true",
                   help="elapsed µs per distinct key instead of CPU µs (waits for I/O count)")
    p.add_argument("--ingest-min-keys", type=int, default=None,
                   help="batch puts of at least this many keys are ingested as a table file "
                        "(0: never; default: the library's threshold)")
    args = p.parse_args(argv)
    build = builds.use(args.rocksdb, False, __file__)  # may restart this script
    if args.ingest_min_keys is not None:
        from stateengine import configure_batch_ingest

        configure_batch_ingest(args.ingest_min_keys)
    measure = "faults" if args.faults else "wall" if args.wall else "cpu"
    unit = {"faults": "minor page faults", "wall": "µs elapsed", "cpu": "µs of CPU"}[measure]
    scratch = tempfile.mkdtemp(prefix="stateengine-body-", dir=args.scratch)
    try:
        best: dict[str, float] = {}
        for r in range(args.repeat):
            runs = run_once(args.rows, args.keys, args.batches, args.partition, scratch,
                            measure)
            later = runs[1:] or runs
            mean = {s: sum(b[s] for b in later) / len(later) for s in STEPS}
            state = sum(mean[s] for s in ("get_many", "arrow->numpy", "put_many", "commit"))
            print(f"run {r + 1}: keys per batch {[b['keys'] for b in runs]}, checkpoint files "
                  f"{runs[-1]['checkpoint_mb']:.0f} MiB, load "
                  f"{os.getloadavg()[0]:.2f}: " + ", ".join(f"{s} {mean[s]:.3f}" for s in STEPS)
                  + f", state total {state:.3f} {unit}/key", flush=True)
            for s in STEPS:
                best[s] = min(best.get(s, float("inf")), mean[s])
        state = sum(best[s] for s in ("get_many", "arrow->numpy", "put_many", "commit"))
        print(f"best ({build}, {args.rows} rows over {args.keys} keys, partition "
              f"{args.partition}): " + ", ".join(f"{s} {best[s]:.3f}" for s in STEPS)
              + f", state total {state:.3f} {unit} per distinct key and batch")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
