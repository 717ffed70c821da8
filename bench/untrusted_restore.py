"""What the child-process check of restored RocksDB files costs a restore
(stateengine/checkpoint/untrusted.py, docs/reliability/untrusted-files.md).

Builds a backend of ``--keys`` keys (a ValueState of ints and a MapState with a few entries
per 10 keys, flushed), takes an incremental checkpoint to a local directory, then restores it
``--rounds`` times with the check on and off in alternation (so drifting machine load hits
both alike), and times the check alone. Reports medians and the load average.

    python bench/untrusted_restore.py                 # 1,000,000 keys, 7 rounds
    python bench/untrusted_restore.py --keys 100000 --rounds 3
    python bench/untrusted_restore.py --rocksdb debian   # Debian's librocksdb

Like bench/run.py it runs on the release wheel's Release RocksDB (bench/builds.py) unless
``--rocksdb debian``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import builds  # noqa: E402


def build(root: str, scratch: str, keys: int) -> tuple[Any, Any]:
    """Writes checkpoint 1, then 2 after 1% of the keys changed (one more, small SST);
    returns both handles."""
    import numpy as np

    from stateengine import KeyedStateBackend, MapStateDescriptor, ValueStateDescriptor

    b = KeyedStateBackend(os.path.join(scratch, "src"), key_type=int)
    try:
        value = b.get_state(ValueStateDescriptor("value", int))
        attrs = b.get_state(MapStateDescriptor("attrs", str, int))
        step = 200_000
        for start in range(0, keys, step):
            k = np.arange(start, min(keys, start + step), dtype=np.int64)
            value.put_many(k, k * 7)
            some = k[::10]
            attrs.put_many(some, np.array([f"a{i % 13}" for i in some], dtype=object), some)
        b._native_flush()
        first = b.checkpoint(1, root).result()
        b.notify_checkpoint_complete(1)
        k = np.arange(0, keys, 100, dtype=np.int64)
        value.put_many(k, k * 9)
        b._native_flush()
        second = b.checkpoint(2, root).result()
    finally:
        b.dispose()
    return first, second


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None)
    args = p.parse_args(argv)
    linked = builds.use(args.rocksdb, False, __file__)  # may restart this script

    from stateengine import KeyedStateBackend, _native
    from stateengine.checkpoint import untrusted

    base = tempfile.mkdtemp(prefix="stateengine-untrusted-", dir=args.dir)
    try:
        root, scratch = os.path.join(base, "ckpt"), os.path.join(base, "scratch")
        started = time.perf_counter()
        handle, second = build(root, scratch, args.keys)
        built = time.perf_counter() - started
        times: dict[str, list[float]] = {"on": [], "off": [], "check alone": [],
                                         "child open": [], "child scan": []}
        n = 0
        read: dict = {}
        for _ in range(args.rounds):
            for mode in ("on", "off"):
                untrusted.set_rocksdb_file_checks(mode == "on")
                untrusted.forget_checks()  # every restore a first one: the cost without the memo
                target = os.path.join(scratch, f"r{n}")
                n += 1
                t = time.perf_counter()
                backend = KeyedStateBackend.restore(target, [handle])
                times[mode].append(time.perf_counter() - t)
                db_dir = os.path.join(target, "db")
                untrusted.set_rocksdb_file_checks(True)
                untrusted.forget_checks()
                t = time.perf_counter()
                read = untrusted.check_rocksdb_files(db_dir, "bench")
                if mode == "off":
                    times["check alone"].append(time.perf_counter() - t)
                    for step in ("open", "scan"):
                        times[f"child {step}"].append(read[f"{step}_s"])
                backend.dispose()
        untrusted.set_rocksdb_file_checks(True)
        # With the memo: checkpoint 2 restored after checkpoint 1 (only its new table is read),
        # and checkpoint 2 again (the same directory content: no child at all).
        for _ in range(args.rounds):
            untrusted.forget_checks()
            KeyedStateBackend.restore(os.path.join(scratch, f"r{n}"), [handle]).dispose()
            for mode in ("next checkpoint", "same checkpoint again"):
                n += 1
                t = time.perf_counter()
                KeyedStateBackend.restore(os.path.join(scratch, f"r{n}"), [second]).dispose()
                times.setdefault(mode, []).append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        report = {
            "keys": args.keys, "rounds": args.rounds, "entries_read_by_check": read["entries"],
            "checkpoint_bytes": handle.stats["bytes_total"], "native": _native.__file__,
            "rocksdb": builds.describe(linked)["rocksdb"],
            "median_restore_s": {"check on": round(med["on"], 4), "check off": round(med["off"], 4)},
            "median_check_alone_s": round(med["check alone"], 4),
            "median_child_steps_s": {k: round(med[f"child {k}"], 4)
                                     for k in ("open", "scan")},
            "added_s": round(med["on"] - med["off"], 4),
            "median_restore_with_memo_s": {k: round(med[k], 4) for k in
                                           ("next checkpoint", "same checkpoint again")},
            "ratio_on_off": round(med["on"] / med["off"], 2),
            "all_s": {k: [round(x, 4) for x in v] for k, v in times.items()},
            "build_s": round(built, 1), "loadavg": os.getloadavg(),
        }
        print(json.dumps(report, indent=1))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
