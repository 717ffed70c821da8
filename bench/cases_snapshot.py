"""Full snapshots, incremental checkpoints and rescaling restores.

* Full snapshot write and restore of a mixed state (a BIGINT value state, a 100-byte value
  state, a map state), next to ``_native.iterate_baseline`` over the same column families: a
  plain native pass (iterator, no output) that bounds what any snapshot writer can do.
  Baseline and snapshot alternate repetition by repetition, all from warm page cache.
* Incremental checkpoint of a large state (full run: 10M entries of 100 incompressible bytes,
  over 1 GB on disk) after changing 1% of its keys, against a full snapshot of the same state.
* Rescaling: full snapshots and incremental checkpoints of 2 backends restored into 3, and of
  those 3 into 2; seconds for all target backends and entries per second.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from typing import Any

import numpy as np

from harness import Bench, Result, chunks, dir_bytes, timed_case

MB = 1e6


def case_names() -> list[str]:
    return ["snapshot.iterate.baseline", "snapshot.iterate.baseline.bytes",
            "snapshot.full.write", "snapshot.full.write.bytes", "snapshot.full.write.uncompressed",
            "snapshot.full.write.uncompressed.bytes", "snapshot.full.restore",
            "snapshot.full.restore.bytes", "checkpoint.first.seconds",
            "checkpoint.incremental.seconds", "checkpoint.full.seconds",
            "rescale.full.2to3", "rescale.full.3to2", "rescale.incremental.2to3",
            "rescale.incremental.3to2"]


def _settle(backend: Any) -> None:
    backend._native_flush()
    backend._native_compact()


def build_mixed_state(bench: Bench) -> Any:
    """A backend over all key groups with ~snapshot_entries entries in three states."""
    from stateengine import (KeyedStateBackend, MapStateDescriptor, ValueStateDescriptor)

    n = bench.scale.snapshot_entries // 3
    rng = np.random.default_rng(11)
    backend = KeyedStateBackend(os.path.join(bench.tmpdir("mixed"), "db"), key_type=int)
    count = backend.get_state(ValueStateDescriptor("count", value_type=int))
    profile = backend.get_state(ValueStateDescriptor("profile", value_type=bytes))
    items = backend.get_state(MapStateDescriptor("items", user_key_type=int, value_type=float))
    for a, b in chunks(n, 200_000):
        keys = np.arange(a, b, dtype=np.int64)
        count.put_many(keys, rng.integers(0, 1 << 40, len(keys)))
        # lowercase letters: text-like values that snappy compresses somewhat
        text = rng.integers(97, 123, (len(keys), 100), dtype=np.uint8).view("S100").ravel()
        profile.put_many(keys, text)
    per_key = 4
    for a, b in chunks(n // per_key, 50_000):
        keys = np.repeat(np.arange(a, b, dtype=np.int64), per_key)
        uks = np.tile(np.arange(per_key, dtype=np.int64), b - a)
        items.put_many(keys, uks, rng.random(len(keys)))
    _settle(backend)
    return backend


def full_snapshot_cases(bench: Bench, backend: Any) -> Any:
    """Returns the handle of the last snapshot (reused by the rescale cases)."""
    from stateengine import KeyedStateBackend, _native

    s = bench.scale
    cfs = [cf for _, cf in backend.column_families()]  # snapshot state id order
    target = bench.tmpdir("full-snapshots")
    runs: dict[str, list[tuple[float, int, int]]] = {"base": [], "write": [], "raw": []}
    handle = None

    def snapshot(name: str, compress: bool) -> Any:
        t0 = time.perf_counter()
        h = backend.snapshot(target, name, compress=compress).result()
        runs["write" if compress else "raw"].append(
            (time.perf_counter() - t0, h.stats["entries"], h.stats["raw_bytes"]))
        return h

    def add(name: str, samples: list[tuple[float, int, int]], label: str, **details: Any) -> None:
        secs = statistics.median(r[0] for r in samples)
        entries, raw = samples[0][1], samples[0][2]
        bench.add(Result(name, "snapshot", entries / secs, "entries/s", label,
                         dict(details, seconds=[round(r[0], 3) for r in samples],
                              entries=entries, raw_bytes=raw)))
        bench.add(Result(name + ".bytes", "snapshot", raw / secs / MB, "MB/s",
                         label + " (key + value bytes)", dict(seconds=round(secs, 3))))

    with timed_case(bench):
        _native.iterate_baseline(backend, cfs)  # warm the page cache for every variant
        for i in range(s.repeats + 1):  # the three alternate; round 0 is the warm-up
            t0 = time.perf_counter()
            stats = _native.iterate_baseline(backend, cfs)
            runs["base"].append((time.perf_counter() - t0, stats["entries"], stats["raw_bytes"]))
            raw = snapshot(f"raw-{i}", compress=False)
            os.remove(os.path.join(target, raw.file.path))
            if handle is not None:
                os.remove(os.path.join(target, handle.file.path))
            handle = snapshot(f"snap-{i}", compress=True)
        add("snapshot.iterate.baseline", runs["base"][1:],
            "_native.iterate_baseline over the same column families")
        add("snapshot.full.write", runs["write"][1:],
            "backend.snapshot(...).result() (default: snappy framed)",
            file_bytes=handle.stats["file_bytes"])
        add("snapshot.full.write.uncompressed", runs["raw"][1:],
            "backend.snapshot(..., compress=False).result()", file_bytes=raw.stats["file_bytes"])
    restore = []
    if bench.wants_any(["snapshot.full.restore", "snapshot.full.restore.bytes"]):
        with timed_case(bench):
            for i in range(s.repeats + 1):
                path = os.path.join(bench.tmpdir("restore"), "db")
                t0 = time.perf_counter()
                restored = KeyedStateBackend.restore(path, [handle])
                secs = time.perf_counter() - t0
                st = restored.last_restore_stats
                restored.dispose()
                restore.append((secs, st["entries"], st["raw_bytes"]))
            add("snapshot.full.restore", restore[1:],
                "KeyedStateBackend.restore(path, [full snapshot handle])")
    return handle


def rescale_cases(bench: Bench, handle: Any) -> None:
    """2 -> 3 and 3 -> 2 with full snapshots and with incremental checkpoints."""
    from stateengine import KeyedStateBackend, KeyGroupRange

    max_p = handle.max_parallelism

    def restore_all(handles: list[Any], parallelism: int, tag: str) -> tuple[list[Any], float]:
        backends, t0 = [], time.perf_counter()
        for i in range(parallelism):
            path = os.path.join(bench.tmpdir(tag), "db")
            backends.append(KeyedStateBackend.restore(
                path, handles, KeyGroupRange.for_operator(i, parallelism, max_p)))
        return backends, time.perf_counter() - t0

    def entries(backends: list[Any]) -> int:
        return sum(b.num_state_entries() for b in backends)

    def report(name: str, backends: list[Any], secs: float, label: str) -> None:
        n = entries(backends)
        bench.add(Result(name, "rescale", n / secs, "entries/s", f"{label}, {secs:.2f} s",
                         {"seconds": round(secs, 3), "entries": n}))

    two, _ = restore_all([handle], 2, "rescale-src")  # the starting point, untimed
    for b in two:
        _settle(b)
    target = bench.tmpdir("rescale-snapshots")
    with timed_case(bench):
        fulls = [b.snapshot(target, f"p{i}of2").result() for i, b in enumerate(two)]
        three, secs = restore_all(fulls, 3, "full3")
        report("rescale.full.2to3", three, secs, "2 full snapshots -> 3 backends")
    with timed_case(bench):
        fulls3 = [b.snapshot(target, f"p{i}of3").result() for i, b in enumerate(three)]
        back, secs = restore_all(fulls3, 2, "full2")
        report("rescale.full.3to2", back, secs, "3 full snapshots -> 2 backends")
    for b in three + back:
        b.dispose()
    # One storage root for every checkpoint here: a restored backend reuses the shared files
    # of the checkpoint it was restored from, by paths relative to that checkpoint's root.
    with timed_case(bench):
        incs = [b.checkpoint(1, target, private_dir=f"of2-{i}").result()
                for i, b in enumerate(two)]
        three, secs = restore_all(incs, 3, "inc3")
        report("rescale.incremental.2to3", three, secs,
               "2 incremental checkpoints -> 3 backends (hard links, clip, copy key groups)")
    with timed_case(bench):
        incs3 = [b.checkpoint(2, target, private_dir=f"of3-{i}").result()
                 for i, b in enumerate(three)]
        back, secs = restore_all(incs3, 2, "inc2")
        report("rescale.incremental.3to2", back, secs, "3 incremental checkpoints -> 2 backends")
    for b in two + three + back:
        b.dispose()
    shutil.rmtree(target, ignore_errors=True)


def incremental_cases(bench: Bench) -> None:
    """Checkpoint 1 of a large state, 1% of keys changed, checkpoint 2 vs a full snapshot."""
    from stateengine import KeyedStateBackend, ValueStateDescriptor

    s = bench.scale
    n, width = s.large_entries, s.large_value_bytes
    rng = np.random.default_rng(12)
    root = bench.tmpdir("large")
    backend = KeyedStateBackend(os.path.join(root, "db"), key_type=int)
    blob = backend.get_state(ValueStateDescriptor("blob", value_type=bytes))

    def values(rows: int) -> np.ndarray:
        # bytes 1..255: incompressible, and no trailing NUL for numpy's 'S' dtype to drop
        return rng.integers(1, 256, (rows, width), dtype=np.uint8).view(f"S{width}").ravel()

    t0 = time.perf_counter()
    for a, b in chunks(n, 200_000):
        blob.put_many(np.arange(a, b, dtype=np.int64), values(b - a))
    _settle(backend)
    build_secs = time.perf_counter() - t0
    on_disk = dir_bytes(os.path.join(root, "db"))
    target = os.path.join(root, "checkpoints")
    with timed_case(bench):
        t0 = time.perf_counter()
        first = backend.checkpoint(1, target).result()
        first_secs = time.perf_counter() - t0
        backend.notify_checkpoint_complete(1)
        changed = rng.choice(n, max(1, n // 100), replace=False).astype(np.int64)
        changed.sort()
        blob.put_many(changed, values(len(changed)))
        t0 = time.perf_counter()
        second = backend.checkpoint(2, target).result()
        inc_secs = time.perf_counter() - t0
        backend.notify_checkpoint_complete(2)
        t0 = time.perf_counter()
        full = backend.snapshot(target, "full-after-change").result()
        full_secs = time.perf_counter() - t0
    state = {"entries": n, "value_bytes": width, "state_bytes_on_disk": on_disk,
             "build_seconds": round(build_secs, 1), "changed_keys": int(len(changed))}
    bench.add(Result("checkpoint.first.seconds", "checkpoint", first_secs, "s",
                     f"checkpoint 1 of {on_disk / 1e9:.2f} GB on disk (uploads every file)",
                     dict(state, stats=first.stats)))
    bench.add(Result("checkpoint.incremental.seconds", "checkpoint", inc_secs, "s",
                     f"checkpoint 2 after changing 1% of {n:,} keys",
                     dict(state, stats=second.stats)))
    bench.add(Result("checkpoint.full.seconds", "checkpoint", full_secs, "s",
                     "full snapshot of the same state", dict(state, stats=full.stats)))
    backend.dispose()
    shutil.rmtree(root, ignore_errors=True)


def run(bench: Bench) -> None:
    mixed = ["snapshot.*", "rescale.*"]
    import fnmatch

    if bench.wants_any([c for c in case_names() if any(fnmatch.fnmatchcase(c, p) for p in mixed)]):
        backend = build_mixed_state(bench)
        handle = full_snapshot_cases(bench, backend)
        backend.dispose()
        if bench.wants_any([c for c in case_names() if c.startswith("rescale.")]):
            rescale_cases(bench, handle)
    if bench.wants_any([c for c in case_names() if c.startswith("checkpoint.")]):
        incremental_cases(bench)
