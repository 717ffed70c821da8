"""What ingesting large batch puts (csrc/batch_ingest.h) does to later reads: a state of
``--keys`` keys written by ``--batches`` batch puts of half the keys each (a checkpoint after
each, as a Spark task commits), once through the memtable and once ingested, then read by
sparse ``get_many`` batches of 1,000 and 20,000 random keys and by scalar ``value()`` calls:
CPU µs per key. Ingested files must land in L0, where compaction merges them as it merges a
flush's tables; stacked one per level, they slowed the scalar reads by 40%.

    python bench/batch_ingest.py                    # 4M keys, 4 batches, 2 rounds
    python bench/batch_ingest.py --keys 1000000 --batches 8

Runs on the release wheel's RocksDB unless ``--rocksdb debian`` (bench/builds.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import builds  # noqa: E402


def run(route: str, keys: int, batches: int, scratch: str) -> dict[str, float]:
    import numpy as np

    import stateengine
    from stateengine import KeyedStateBackend, ValueStateDescriptor

    old = stateengine.configure_batch_ingest(0 if route == "memtable" else
                                             stateengine._native.DEFAULT_BATCH_INGEST_MIN_KEYS)
    root = tempfile.mkdtemp(dir=scratch)
    backend = KeyedStateBackend(os.path.join(root, "db"), key_type=int)
    clock = time.process_time
    out: dict[str, float] = {}
    try:
        state = backend.get_state(ValueStateDescriptor("acc", value_type="count long, total double"))
        rng = np.random.default_rng(1)
        t0 = clock()
        for b in range(batches):
            users = np.unique(rng.integers(0, keys, keys // batches * 2))
            state.put_many(users, {"count": users, "total": users / 2})
            backend.checkpoint(b + 1, os.path.join(root, "ckpt")).result()
        out["writes+commits"] = (clock() - t0) / (keys // batches * 2 * batches) * 1e6
        for size in (1_000, 20_000):
            spent = 0.0
            for _ in range(30):
                probe = np.sort(rng.integers(0, keys, size))
                t0 = clock()
                state.get_many(probe)
                spent += clock() - t0
            out[f"get_many {size:,}"] = spent / (30 * size) * 1e6
        probe = rng.integers(0, keys, 100_000).tolist()
        t0 = clock()
        for k in probe:
            backend.set_current_key(k)
            state.value()
        out["value()"] = (clock() - t0) / len(probe) * 1e6
        out["sst_files"] = backend.metrics()["sst_files"]
    finally:
        backend.dispose()
        stateengine.configure_batch_ingest(old)
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=4_000_000)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None)
    args = p.parse_args(argv)
    build = builds.use(args.rocksdb, False, __file__)  # may restart this script
    scratch = tempfile.mkdtemp(prefix="stateengine-ingest-")
    print(f"bench/batch_ingest.py ({build}): {args.keys:,} keys, {args.batches} batch puts of "
          f"{args.keys // args.batches * 2:,} draws each; CPU µs per key", flush=True)
    try:
        for r in range(args.rounds):
            for route in (("memtable", "ingested") if r % 2 == 0 else ("ingested", "memtable")):
                got = run(route, args.keys, args.batches, scratch)
                print(f"round {r + 1} {route:9s} " + ", ".join(
                    f"{k} {v:.3f}" if k != "sst_files" else f"{k} {v:.0f}" for k, v in got.items())
                    + f"  (load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
