"""What every benchmark case shares: its scale, its scratch space, timing and result records.

A case is measured as a few timed repetitions of the same work after one warm-up repetition;
the reported value is the median rate, with every repetition's rate and the load average
around the case kept in the record, because this machine may be shared with other work.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Scale:
    """Sizes of one run. ``full`` follows flink-benchmarks' state sizes; ``quick`` only checks
    that every case runs."""

    name: str
    setup_keys: int          # keys holding state before a state case starts
    scalar_ops: int          # point calls per timed repetition
    batch_rows: int          # rows per batch call
    batch_calls: int         # batch calls per timed repetition
    repeated_keys: int       # distinct keys of a repeated-key batch (batch_rows over these)
    repeats: int             # timed repetitions (after one warm-up)
    map_user_keys: int       # entries per key of a map state (flink-benchmarks: 10)
    list_add_all: int        # elements per add_all call (flink-benchmarks: 100)
    snapshot_entries: int    # entries of the snapshot/rescale state
    large_entries: int       # entries of the incremental-checkpoint state
    large_value_bytes: int
    spark_rows: int
    spark_keys: int
    spark_batches: int
    memory_budget_mib: int
    memory_factor: int       # state written = factor x budget


FULL = Scale("full", setup_keys=500_000, scalar_ops=200_000, batch_rows=10_000, batch_calls=20,
             repeated_keys=1_000, repeats=3, map_user_keys=10, list_add_all=100,
             snapshot_entries=2_000_000, large_entries=10_000_000, large_value_bytes=100,
             spark_rows=1_200_000, spark_keys=50_000, spark_batches=6, memory_budget_mib=64,
             memory_factor=10)

QUICK = Scale("quick", setup_keys=5_000, scalar_ops=5_000, batch_rows=1_000, batch_calls=3,
              repeated_keys=100, repeats=1, map_user_keys=10, list_add_all=100,
              snapshot_entries=20_000, large_entries=50_000, large_value_bytes=100,
              spark_rows=20_000, spark_keys=1_000, spark_batches=2, memory_budget_mib=16,
              memory_factor=2)


@dataclass
class Result:
    """One measured number. ``value`` is a rate unless ``unit`` says otherwise."""

    name: str
    group: str
    value: float
    unit: str
    label: str = ""                      # what exactly ran, for the table
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0                 # wall time of the whole case
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before and after


class Bench:
    """The run's settings, scratch directory and collected results."""

    def __init__(self, scale: Scale, only: list[str], scratch_root: str | None) -> None:
        self.scale = scale
        self.only = only
        self.results: list[Result] = []
        self.errors: dict[str, str] = {}
        self.scratch = tempfile.mkdtemp(prefix="stateengine-bench-", dir=scratch_root)

    def wants(self, name: str) -> bool:
        return not self.only or any(fnmatch.fnmatchcase(name, p) for p in self.only)

    def wants_any(self, names: list[str]) -> bool:
        return any(self.wants(n) for n in names)

    def tmpdir(self, tag: str) -> str:
        return tempfile.mkdtemp(prefix=f"{tag}-", dir=self.scratch)

    def add(self, result: Result) -> None:
        if result.load == (0.0, 0.0):  # added outside timed_case: the load now
            result.load = (round(loadavg(), 2), round(loadavg(), 2))
        self.results.append(result)
        rate = f"{result.value:,.0f}" if result.value >= 100 else f"{result.value:.3g}"
        print(f"  {result.name:<44} {rate:>14} {result.unit:<12} {result.label}", flush=True)

    def cleanup(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def loadavg() -> float:
    return os.getloadavg()[0]


def rates(run: Callable[[int], int], repeats: int, warmup: bool = True) -> list[float]:
    """Calls ``run(i)`` (which does the work of repetition i and returns its operation count)
    once to warm up and then ``repeats`` times, timing each; returns operations per second."""
    if warmup:
        run(-1)
    out = []
    for i in range(repeats):
        t0 = time.perf_counter()
        n = run(i)
        out.append(n / (time.perf_counter() - t0))
    return out


def rate_result(name: str, group: str, unit: str, label: str, samples: list[float],
                **details: Any) -> Result:
    """A Result whose value is the median of per-repetition rates."""
    return Result(name, group, statistics.median(samples), unit, label,
                  dict(details, samples=[round(s, 1) for s in samples]))


class timed_case:
    """Context manager stamping wall time and load average onto the results a case adds."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def __enter__(self) -> "timed_case":
        self.start = time.perf_counter()
        self.load0 = loadavg()
        self.first = len(self.bench.results)
        return self

    def __exit__(self, *exc: Any) -> None:
        seconds = time.perf_counter() - self.start
        load1 = loadavg()
        for r in self.bench.results[self.first:]:
            r.seconds = r.seconds or seconds
            r.load = (round(self.load0, 2), round(load1, 2))


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(n, start + size)
