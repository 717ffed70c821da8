"""Whether a small batch's cost grows with the number of batches a job has run: one partition's
``StateStoreProvider`` runs ``--commits`` micro-batches of ``--keys`` keys each (get_store,
``put_many``, commit), as a long-running streaming query does; per window of ``--window``
batches the median wall time of a batch, and the size of the MANIFEST the newest version
carries (each version's checkpoint copies it whole). RocksDB appends an edit to the MANIFEST at
every flush and rolls it only past ``max_manifest_file_size``, so without a small limit the
copy grows with every commit ever made.

    python bench/commit_growth.py                     # 3,000 batches of 10 keys
    python bench/commit_growth.py --commits 20000 --window 2000

Runs on the release wheel's RocksDB unless ``--rocksdb debian`` (bench/builds.py).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import builds  # noqa: E402


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commits", type=int, default=3_000)
    p.add_argument("--keys", type=int, default=10)
    p.add_argument("--window", type=int, default=500)
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None)
    args = p.parse_args(argv)
    build = builds.use(args.rocksdb, False, __file__)  # may restart this script
    import numpy as np

    from stateengine import StateStoreProvider, ValueStateDescriptor

    root = tempfile.mkdtemp(prefix="stateengine-commit-growth-")
    desc = ValueStateDescriptor("v", value_type=int)
    provider = StateStoreProvider(os.path.join(root, "ckpt"), "default", 0, 1, key_type=int,
                                  descriptors=[desc], local_dir=os.path.join(root, "local"))
    print(f"bench/commit_growth.py ({build}): {args.commits:,} batches of {args.keys} keys, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    try:
        times: list[float] = []
        for b in range(args.commits):
            t0 = time.perf_counter()
            store = provider.get_store(b)
            store.get_state(desc).put_many(np.arange(args.keys) + b % 1000, np.full(args.keys, b))
            store.commit()
            times.append(time.perf_counter() - t0)
            if (b + 1) % args.window == 0:
                manifests = glob.glob(os.path.join(root, "ckpt", "**", "MANIFEST-*"), recursive=True)
                newest = max(manifests, key=os.path.getmtime)
                print(f"batches {b + 1 - args.window:6,}-{b:6,}: median "
                      f"{statistics.median(times[-args.window:]) * 1e3:6.2f} ms per batch, MANIFEST "
                      f"of the newest version {os.path.getsize(newest) / 1024:7.1f} KiB  "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        provider.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
