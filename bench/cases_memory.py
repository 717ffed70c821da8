"""Peak RSS of a process whose state is ten times its memory budget.

Two fresh subprocesses (so nothing else this run allocated counts):

* ``empty``: imports stateengine and numpy, sets the budget, opens a backend, writes and reads
  one value. Its peak RSS is the fixed overhead (interpreter, libraries, RocksDB's static
  structures, one backend).
* ``load``: the same, then writes ``memory_factor`` x budget of incompressible 1000-byte values
  with ``put_many`` in small chunks, flushes, reads every value back with ``get_many`` (checking
  them) in shuffled order plus a sample of scalar ``value()`` calls.

Allowance = budget + the empty process's peak RSS; the target is peak RSS <= allowance.
Peak RSS is the kernel's high-water mark (VmHWM in /proc/self/status).

The pair runs a second time with glibc told to hand freed memory back (one arena, mmap for
blocks >= 64 KiB, trimming at once): how much of the excess over the allowance is memory
malloc keeps after RocksDB freed it, rather than memory RocksDB holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # also as a child script, which PYTHONSAFEPATH (builds.py) leaves off
    sys.path.insert(0, HERE)

from harness import Bench, Result, timed_case  # noqa: E402

MiB = 1 << 20
VALUE_BYTES = 1000
CHUNK_ROWS = 1024  # ~1 MB of values per call: the application's own buffers stay small


TIGHT_MALLOC = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": "65536",
                "MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_TOP_PAD_": "0"}


def case_names() -> list[str]:
    return ["memory.overhead", "memory.allowance", "memory.peak_rss",
            "memory.tight_malloc.allowance", "memory.tight_malloc.peak_rss"]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _child(mode: str, budget_mib: int, factor: int, path: str) -> dict:
    import numpy as np

    import stateengine
    from stateengine import KeyedStateBackend, ValueStateDescriptor

    stateengine.configure_memory(budget_mib * MiB)
    backend = KeyedStateBackend(path, key_type=int)
    blob = backend.get_state(ValueStateDescriptor("blob", value_type=bytes))
    out: dict = {"mode": mode}
    if mode == "empty":
        backend.set_current_key(1)
        blob.update(b"x" * VALUE_BYTES)
        assert blob.value() == b"x" * VALUE_BYTES
    else:
        n = factor * budget_mib * MiB // VALUE_BYTES
        n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS

        def chunk(i: int) -> tuple[np.ndarray, np.ndarray]:
            rng = np.random.default_rng(i)  # regenerable, so reads can be checked
            keys = np.arange(i * CHUNK_ROWS, min(n, (i + 1) * CHUNK_ROWS), dtype=np.int64)
            vals = rng.integers(1, 256, (len(keys), VALUE_BYTES), dtype=np.uint8)
            return keys, vals.view(f"S{VALUE_BYTES}").ravel()

        peak_cache = peak_mem = 0
        t0 = time.perf_counter()
        for i in range(n_chunks):
            blob.put_many(*chunk(i))
            if i % 16 == 0:
                u = stateengine.memory_usage()
                peak_cache, peak_mem = max(peak_cache, u["cache"]), max(peak_mem, u["memtables"])
        backend._native_flush()
        out["write_seconds"] = round(time.perf_counter() - t0, 2)
        out["rss_after_write_kib"] = _status_kib("VmRSS")
        t0 = time.perf_counter()
        order = np.random.default_rng(99).permutation(n_chunks)
        checked = 0
        for i in order:
            keys, expect = chunk(int(i))
            got, found = blob.get_many(keys)
            if not found.all() or got[0] != expect[0] or got[-1] != expect[-1]:
                raise SystemExit(f"chunk {i}: read back differs from what was written")
            checked += len(keys)
            if checked % (64 * CHUNK_ROWS) == 0:
                u = stateengine.memory_usage()
                peak_cache, peak_mem = max(peak_cache, u["cache"]), max(peak_mem, u["memtables"])
        for k in np.random.default_rng(7).integers(0, n, 20_000).tolist():
            backend.set_current_key(k)
            if blob.value() is None:
                raise SystemExit(f"key {k} lost")
        out.update(read_seconds=round(time.perf_counter() - t0, 2), entries=n,
                   state_bytes=n * VALUE_BYTES, rows_checked=checked,
                   peak_cache_bytes=peak_cache, peak_memtable_bytes=peak_mem,
                   sst_bytes=sum(os.path.getsize(os.path.join(r, f))
                                 for r, _, fs in os.walk(path) for f in fs if f.endswith(".sst")))
    backend.close()
    out["peak_rss_kib"] = _status_kib("VmHWM")
    out["budget_bytes"] = budget_mib * MiB
    return out


def _spawn(bench: Bench, mode: str, env: dict | None = None) -> dict:
    s = bench.scale
    path = os.path.join(bench.tmpdir(f"memory-{mode}"), "db")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), mode,
                           str(s.memory_budget_mib), str(s.memory_factor), path],
                          capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if proc.returncode != 0:
        raise RuntimeError(f"memory child {mode} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(bench: Bench) -> None:
    s = bench.scale
    budget = s.memory_budget_mib * MiB
    with timed_case(bench):
        empty = _spawn(bench, "empty")
        load = _spawn(bench, "load")
        overhead = empty["peak_rss_kib"] * 1024
        peak = load["peak_rss_kib"] * 1024
        bench.add(Result("memory.overhead", "memory", overhead / MiB, "MiB",
                         "peak RSS of a process that imported stateengine and opened a backend",
                         empty))
        bench.add(Result("memory.allowance", "memory", (budget + overhead) / MiB, "MiB",
                         f"budget {s.memory_budget_mib} MiB + fixed overhead", {}))
        bench.add(Result("memory.peak_rss", "memory", peak / MiB, "MiB",
                         f"peak RSS, {load['state_bytes'] / MiB:,.0f} MiB of state "
                         f"({s.memory_factor}x the budget) written and read back",
                         dict(load, above_overhead_mib=round((peak - overhead) / MiB, 1))))
    with timed_case(bench):
        empty = _spawn(bench, "empty", TIGHT_MALLOC)
        load = _spawn(bench, "load", TIGHT_MALLOC)
        overhead = empty["peak_rss_kib"] * 1024
        peak = load["peak_rss_kib"] * 1024
        knobs = " ".join(f"{k}={v}" for k, v in TIGHT_MALLOC.items())
        bench.add(Result("memory.tight_malloc.allowance", "memory", (budget + overhead) / MiB,
                         "MiB", f"budget + overhead of an empty process, both with {knobs}",
                         {"overhead": empty}))
        bench.add(Result("memory.tight_malloc.peak_rss", "memory", peak / MiB, "MiB",
                         "the same load with glibc returning freed memory",
                         dict(load, above_overhead_mib=round((peak - overhead) / MiB, 1))))


if __name__ == "__main__":
    mode, budget_mib, factor, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    print(json.dumps(_child(mode, budget_mib, factor, path)))
