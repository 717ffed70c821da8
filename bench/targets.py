"""The ratios issue 5 asks for ("What it must show"), evaluated on one run's results.

A target compares a case with its baseline: ``ratio = case / baseline``, passing when
``ratio >= threshold`` (rates) or ``ratio <= threshold`` (times). Informational comparisons
(``op=None``) are shown in the table without a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


# The floor.* cases: per state case, its RocksDB point-call and sorted batch-call case names.
FLOORS = (("valueGet", "point", "multiget"), ("valueUpdate", "point", "writebatch"))


@dataclass(frozen=True)
class Target:
    case: str
    baseline: str
    op: str | None         # ">=", "<=" or None (shown, not judged)
    threshold: float | None
    why: str


def _targets() -> list[Target]:
    out = []
    for case, base in (("valueGet", "get"), ("valueUpdate", "put"), ("mapGet", "mapGet"),
                       ("mapPut", "mapPut")):
        out.append(Target(f"state.{case}.scalar", f"baseline.rocksdict.{base}", ">=", 1.0,
                          "scalar call vs rocksdict's raw call"))
    for case in ("valueGet", "valueUpdate", "reducingAdd"):
        for kind in ("distinct", "repeated"):
            out.append(Target(f"state.{case}.batch.{kind}", f"state.{case}.scalar", ">=", 5.0,
                              "batch rows/s vs scalar ops/s of the same operation"))
    for case in ("valueAdd", "listAppend", "listGet", "mapPut", "mapGet", "mapContains",
                 "aggregatingAdd"):
        for kind in ("distinct", "repeated"):
            out.append(Target(f"state.{case}.batch.{kind}", f"state.{case}.scalar", None, None,
                              "batch vs scalar"))
    out.append(Target("state.listAddAll.batch", "state.listAddAll.scalar", None, None,
                      "batch vs scalar"))
    # RocksDB alone (bench/cases_state.floor_cases): the batch/scalar ratio that distinct keys
    # allow at most, and how close the state calls come to RocksDB's own cost.
    for case, point, batch in FLOORS:
        out.append(Target(f"floor.{case}.{batch}", f"state.{case}.scalar", None, None,
                          "ceiling of batch.distinct vs scalar: RocksDB's own sorted batch call "
                          "per key, no encoding or Python"))
        out.append(Target(f"floor.{case}.{batch}", f"floor.{case}.{point}", None, None,
                          "RocksDB alone: one sorted batch call vs one call per key"))
        out.append(Target(f"state.{case}.scalar", f"floor.{case}.{point}", None, None,
                          "scalar state call vs RocksDB's bare call on the same keys"))
        out.append(Target(f"state.{case}.batch.distinct", f"floor.{case}.{batch}", None, None,
                          "batch call vs RocksDB's bare batch call on the same keys"))
    # Typed state (bench/cases_typed.py): each schema against int64 state, same call.
    for op in ("valueGet", "valueUpdate"):
        for schema in ("struct3", "array"):
            out.append(Target(f"typed.{op}.batch.{schema}", f"typed.{op}.batch.int64", None, None,
                              "typed batch rows/s vs int64 state's"))
        out.append(Target(f"typed.{op}.scalar.struct3", f"typed.{op}.scalar.int64", None, None,
                          "typed scalar calls/s vs int64 state's"))
    out.append(Target("state.aggregatingAdd.scalar.python", "state.aggregatingAdd.scalar", None,
                      None, "Python AggregateFunction vs native SUM"))
    out += [
        Target("snapshot.full.write", "snapshot.iterate.baseline", ">=", 0.5,
               "full snapshot entries/s vs plain native iteration of the same column families"),
        Target("snapshot.full.write.uncompressed", "snapshot.iterate.baseline", None, None,
               "the same without snappy framing (compress=False)"),
        Target("snapshot.full.restore", "snapshot.iterate.baseline", ">=", 0.5,
               "restore entries/s vs the same iteration (the brief applies the write target)"),
        Target("checkpoint.incremental.seconds", "checkpoint.full.seconds", "<=", 0.10,
               "incremental checkpoint after a 1% change vs a full snapshot of the same state"),
        Target("spark.vectorized", "spark.transformWithStateInPandas", ">=", 20.0,
               "map_with_state vs transformWithStateInPandas (ValueState, RocksDB provider)"),
        Target("spark.grouped", "spark.applyInPandasWithState", ">=", 2.0,
               "apply_with_state vs applyInPandasWithState"),
        Target("memory.peak_rss", "memory.allowance", "<=", 1.0,
               "peak RSS with state 10x the budget vs budget + fixed overhead"),
        Target("memory.tight_malloc.peak_rss", "memory.tight_malloc.allowance", None, None,
               "the same with glibc returning freed memory"),
    ]
    return out


TARGETS = _targets()


def evaluate(values: dict[str, float]) -> list[dict[str, Any]]:
    """Every target whose case and baseline both ran, with its ratio and verdict."""
    out = []
    for t in TARGETS:
        if t.case not in values or t.baseline not in values or not values[t.baseline]:
            continue
        ratio = values[t.case] / values[t.baseline]
        passed = None
        if t.op == ">=":
            passed = ratio >= t.threshold
        elif t.op == "<=":
            passed = ratio <= t.threshold
        out.append({"case": t.case, "baseline": t.baseline, "ratio": ratio, "op": t.op,
                    "threshold": t.threshold, "passed": passed, "why": t.why})
    return out
