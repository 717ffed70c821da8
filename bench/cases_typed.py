"""Typed state (a Spark schema per value) against int64 state: what the struct codec costs.

Three ValueStates on one backend, each holding ``setup_keys`` keys, flushed and compacted:

* ``int64``: ``value_type=int`` (BIGINT codec), the fastest state there is: the reference;
* ``struct3``: ``"count long, last string, score double"``, a row of three fields;
* ``array``: ``"count long, last string, seen array<long>"`` (the example of docs/concepts/typed-state.md), three
  longs in the array.

Batch cases time ``get_many(keys)`` and ``put_many(keys, values)`` over ``batch_rows``
distinct existing keys per call; the typed values go in as a pyarrow ``RecordBatch`` (what
``mapInArrow`` hands a task) and come out as a ``StructArray``, both encoded/decoded in C++
(csrc/arrow_rows.cc). Scalar cases time ``set_current_key`` + ``value()`` / ``update(tuple)``,
where the Cython row encoder runs per call. Cases of one operation are measured in
alternation (bench/cases_state.alternate), so machine load hits them alike; the report shows
each typed case as a ratio of its int64 case (bench/targets.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cases_state import Workload, alternate, fresh_case, open_backend
from harness import Bench, chunks, rate_result

SCHEMAS = {"int64": None, "struct3": "count long, last string, score double",
           "array": "count long, last string, seen array<long>"}
OPS = ("valueGet", "valueUpdate")


def case_names() -> list[str]:
    return ([f"typed.{op}.batch.{s}" for op in OPS for s in SCHEMAS]
            + [f"typed.{op}.scalar.{s}" for op in OPS for s in ("int64", "struct3")])


def _values(schema: str, keys: np.ndarray) -> Any:
    """The column put_many takes for these keys (a RecordBatch for typed states)."""
    import pyarrow as pa

    if schema == "int64":
        return keys
    cols = {"count": pa.array(keys), "last": pa.array([f"v{k}" for k in keys.tolist()])}
    if schema == "struct3":
        cols["score"] = pa.array(keys * 0.5)
    else:
        seen = np.repeat(keys, 3) + np.tile(np.arange(3), len(keys))
        cols["seen"] = pa.ListArray.from_arrays(np.arange(0, 3 * len(keys) + 1, 3, dtype=np.int32),
                                                pa.array(seen))
    return pa.RecordBatch.from_pydict(cols)


def _row(schema: str, k: int) -> Any:
    return k if schema == "int64" else (k, f"v{k}", k * 0.5)


def run(bench: Bench) -> None:
    from stateengine import ValueStateDescriptor, _native, sparktypes

    s = bench.scale
    w = Workload(bench, 7)
    backend = open_backend(bench, "typed")
    states = {name: backend.get_state(ValueStateDescriptor(
        f"v_{name}", value_type=int if ddl is None else ddl)) for name, ddl in SCHEMAS.items()}
    for a, b in chunks(s.setup_keys, 100_000):
        keys = np.arange(a, b, dtype=np.int64)
        for name, state in states.items():
            state.put_many(keys, _values(name, keys))
    k = s.setup_keys // 2  # the stored bytes of one value, for the report
    samples = {"struct3": (k, f"v{k}", k * 0.5), "array": (k, f"v{k}", [k, k + 1, k + 2])}
    sizes = {name: 8 if ddl is None else
             len(_native.row_codec(sparktypes.parse_ddl(ddl)).encode_bytes(samples[name]))
             for name, ddl in SCHEMAS.items()}
    batches = w.distinct_batches()
    values = {name: [_values(name, k) for k in batches] for name in SCHEMAS}  # built untimed

    def getter(name: str):
        get_many = states[name].get_many

        def go(_: int) -> int:
            for keys in batches:
                get_many(keys)
            return sum(len(k) for k in batches)
        return go

    def putter(name: str):
        put_many, vals = states[name].put_many, values[name]

        def go(_: int) -> int:
            for keys, v in zip(batches, vals):
                put_many(keys, v)
            return sum(len(k) for k in batches)
        return go

    def label(op: str, name: str) -> str:
        arrow = "StructArray" if op == "valueGet" else "RecordBatch"
        what = "int64 array" if name == "int64" else f"{arrow} of {SCHEMAS[name]}"
        call = f"get_many(keys) -> {what}" if op == "valueGet" else f"put_many(keys, {what})"
        return f"{call}, {s.batch_rows:,} distinct keys per call"

    for op, make in (("valueGet", getter), ("valueUpdate", putter)):
        names = [n for n in SCHEMAS if bench.wants(f"typed.{op}.batch.{n}")]
        if not names:
            continue
        with fresh_case(bench, backend):
            r = alternate({n: make(n) for n in names}, s.repeats)
        for n in names:
            bench.add(rate_result(
                f"typed.{op}.batch.{n}", "typed", "ops/s",
                label(op, n), r[n], schema=SCHEMAS[n] or "bigint", value_bytes=sizes[n]))

    scalar = w.scalar_keys()
    set_key = backend.set_current_key

    def scalar_get(name: str):
        def go(i: int) -> int:
            get = states[name].value
            for k in scalar[i]:
                set_key(k)
                get()
            return len(scalar[i])
        return go

    def scalar_update(name: str):
        rows = [[_row(name, k) for k in ks] for ks in scalar]  # the tuples exist before timing

        def go(i: int) -> int:
            update = states[name].update
            for k, v in zip(scalar[i], rows[i]):
                set_key(k)
                update(v)
            return len(scalar[i])
        return go

    for op, make, what in (("valueGet", scalar_get, "set_current_key + value()"),
                           ("valueUpdate", scalar_update, "set_current_key + update(v)")):
        names = [n for n in ("int64", "struct3") if bench.wants(f"typed.{op}.scalar.{n}")]
        if not names:
            continue
        with fresh_case(bench, backend):
            r = alternate({n: make(n) for n in names}, s.repeats)
        for n in names:
            bench.add(rate_result(f"typed.{op}.scalar.{n}", "typed", "ops/s",
                                  f"{what}, {'int' if n == 'int64' else 'tuple of 3 fields'}",
                                  r[n], schema=SCHEMAS[n] or "bigint", value_bytes=sizes[n]))
    backend.dispose()
