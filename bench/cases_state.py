"""State access cases in the spirit of flink-benchmarks, plus the raw baselines.

Each state kind gets a fresh backend holding ``setup_keys`` keys (one value / one list element
/ ``map_user_keys`` map entries per key, as flink-benchmarks sets up), flushed and compacted
so reads hit SST files through the block cache. Then:

* scalar: ``set_current_key(k)`` + one call per element, the loop flink-benchmarks times;
* batch: the ``*_many`` calls over numpy columns, in two labelled workloads: ``distinct``
  (every row another key) and ``repeated`` (``batch_rows`` rows over ``repeated_keys`` keys).

One scalar call and one batch row count as one operation, so their rates compare directly.
Baselines run in the same process on the same key count: rocksdict (raw bytes, WAL off, the
same block-cache capacity as the engine's default budget) and a Python dict. Engine cases and
their rocksdict baselines alternate repetition by repetition, so drifting machine load hits
both alike.
"""

from __future__ import annotations

import fnmatch
import gc
import os
import struct
import time
from typing import Any, Callable

import numpy as np

from harness import Bench, Result, chunks, rate_result, rates, timed_case
from targets import FLOORS

SCALAR_STATE_CASES = [
    "valueUpdate", "valueGet", "valueAdd", "listAppend", "listGet", "listAddAll", "mapPut",
    "mapGet", "mapContains", "mapIterate", "reducingAdd", "aggregatingAdd",
]
# Cases with batch variants; mapIterate has no batch call.
BATCH_STATE_CASES = [c for c in SCALAR_STATE_CASES if c != "mapIterate"]
BASELINES = ["baseline.rocksdict.get", "baseline.rocksdict.put", "baseline.rocksdict.mapGet",
             "baseline.rocksdict.mapPut", "baseline.dict.get", "baseline.dict.put"]


def case_names() -> list[str]:
    names = [f"state.{c}.scalar" for c in SCALAR_STATE_CASES]
    names.append("state.aggregatingAdd.scalar.python")
    for c in BATCH_STATE_CASES:
        if c == "listAddAll":
            names.append("state.listAddAll.batch")
        else:
            names += [f"state.{c}.batch.distinct", f"state.{c}.batch.repeated"]
    names += [f"floor.{c}.{k}" for c, point, batch in FLOORS for k in (point, batch)]
    return names + BASELINES


MAP_BASELINE_SETUP_CHUNK = 200_000


class Workload:
    """Random keys of one state case, generated before any timing."""

    def __init__(self, bench: Bench, seed: int) -> None:
        s = bench.scale
        self.s = s
        self.rng = np.random.default_rng(seed)
        self.n = s.setup_keys

    def scalar_keys(self, n: int | None = None) -> list[list[int]]:
        """One list of random existing keys per repetition (index -1 is the warm-up)."""
        n = n or self.s.scalar_ops
        return [self.rng.integers(0, self.n, n).tolist() for _ in range(self.s.repeats + 1)]

    def distinct_batches(self) -> list[np.ndarray]:
        return [self.rng.choice(self.n, self.s.batch_rows, replace=False).astype(np.int64)
                for _ in range(self.s.batch_calls)]

    def repeated_batches(self) -> list[np.ndarray]:
        out = []
        for _ in range(self.s.batch_calls):
            hot = self.rng.choice(self.n, self.s.repeated_keys, replace=False)
            out.append(self.rng.choice(hot, self.s.batch_rows).astype(np.int64))
        return out


def open_backend(bench: Bench, tag: str) -> Any:
    from stateengine import KeyedStateBackend

    return KeyedStateBackend(os.path.join(bench.tmpdir(tag), "db"), key_type=int)


def settle(backend: Any) -> None:
    """Flush and compact, as flink-benchmarks does after setup, so every case starts from
    the same SST layout instead of a half-full memtable."""
    backend._native_flush()
    backend._native_compact()


def fresh_case(bench: Bench, *stores: Any) -> timed_case:
    """Settles the stores (untimed), then times a case: each case starts from compacted files
    and an empty memtable, not from whatever the previous case wrote (flink-benchmarks gets
    the same from a fresh fork per benchmark)."""
    for store in stores:
        store.settle() if isinstance(store, RocksdictBaseline) else settle(store)
    return timed_case(bench)


def batch_label(kind: str, s: Any, call: str) -> str:
    if kind == "distinct":
        return f"{call}, {s.batch_rows:,} distinct keys per call"
    return f"{call}, {s.batch_rows:,} rows over {s.repeated_keys:,} keys per call"


def run_batches(call: Callable[[np.ndarray], Any], batches: list[np.ndarray]) -> Callable[[int], int]:
    def run(_: int) -> int:
        for keys in batches:
            call(keys)
        return sum(len(k) for k in batches)
    return run


def alternate(runs: dict[str, Callable[[int], int]], repeats: int) -> dict[str, list[float]]:
    """Rates of several runs measured in alternation: warm-up of each, then repetition i of
    every run before repetition i + 1 of any."""
    out: dict[str, list[float]] = {k: [] for k in runs}
    for run in runs.values():
        run(-1)
    for i in range(repeats):
        for name, run in runs.items():
            gc.collect()
            t0 = time.perf_counter()
            n = run(i)
            out[name].append(n / (time.perf_counter() - t0))
    return out


def scalar_result(case: str, samples: list[float], label: str, **details: Any) -> Result:
    return rate_result(f"state.{case}.scalar", "state", "ops/s", label, samples, **details)


def batch_result(case: str, kind: str, samples: list[float], s: Any, call: str) -> Result:
    return rate_result(f"state.{case}.batch.{kind}", "state", "ops/s",
                       batch_label(kind, s, call), samples, call=call)


# ---- rocksdict baseline ---------------------------------------------------------------------

class RocksdictBaseline:
    """A raw-bytes rocksdict with the WAL off and the engine's default cache capacity."""

    def __init__(self, bench: Bench, tag: str) -> None:
        from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteOptions

        opts = Options(raw_mode=True)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(256 << 20))  # what the engine's default budget gives it
        opts.set_block_based_table_factory(table)
        self.db = Rdict(bench.tmpdir(tag), opts)
        wo = WriteOptions()
        wo.disable_wal = True
        self.db.set_write_options(wo)

    def load(self, items: Any) -> None:
        put = self.db.put
        for k, v in items:
            put(k, v)
        self.settle()

    def settle(self) -> None:
        self.db.flush()
        self.db.compact_range(None, None)

    def close(self) -> None:
        self.db.close()


def be64(keys: list[int]) -> list[bytes]:
    pack = struct.Struct(">q").pack
    return [pack(k) for k in keys]


# ---- value state ----------------------------------------------------------------------------

def value_cases(bench: Bench) -> None:
    from stateengine import ValueStateDescriptor

    s = bench.scale
    w = Workload(bench, 1)
    backend = open_backend(bench, "value")
    state = backend.get_state(ValueStateDescriptor("value", value_type=int))
    for a, b in chunks(s.setup_keys, 100_000):
        keys = np.arange(a, b, dtype=np.int64)
        state.put_many(keys, keys)
    settle(backend)
    set_key = backend.set_current_key
    rdb = RocksdictBaseline(bench, "rocksdict-value")
    rdb.load((k, k) for k in be64(list(range(s.setup_keys))))
    scalar = w.scalar_keys()
    raw = [be64(ks) for ks in scalar]

    def value_get(i: int) -> int:
        get = state.value
        for k in scalar[i]:
            set_key(k)
            get()
        return len(scalar[i])

    def value_update(i: int) -> int:
        update = state.update
        for k in scalar[i]:
            set_key(k)
            update(k)
        return len(scalar[i])

    def rd_get(i: int) -> int:
        get = rdb.db.get
        for k in raw[i]:
            get(k)
        return len(raw[i])

    def rd_put(i: int) -> int:
        put = rdb.db.put
        for k in raw[i]:
            put(k, k)
        return len(raw[i])

    if bench.wants_any(["state.valueGet.scalar", "baseline.rocksdict.get"]):
        with fresh_case(bench, backend, rdb):
            r = alternate({"se": value_get, "rd": rd_get}, s.repeats)
            bench.add(scalar_result("valueGet", r["se"], "set_current_key + value()"))
            bench.add(rate_result("baseline.rocksdict.get", "baseline", "ops/s",
                                  "rocksdict Rdict.get(8-byte key), raw mode", r["rd"]))
    if bench.wants_any(["state.valueUpdate.scalar", "baseline.rocksdict.put"]):
        with fresh_case(bench, backend, rdb):
            r = alternate({"se": value_update, "rd": rd_put}, s.repeats)
            bench.add(scalar_result("valueUpdate", r["se"], "set_current_key + update(v)"))
            bench.add(rate_result("baseline.rocksdict.put", "baseline", "ops/s",
                                  "rocksdict Rdict.put(8-byte key, 8-byte value), WAL off",
                                  r["rd"]))
    rdb.close()

    # Reads and updates first, on the set-up keys only; the add cases grow the state after.
    distinct, repeated = w.distinct_batches(), w.repeated_batches()
    for kind, batches in (("distinct", distinct), ("repeated", repeated)):
        if bench.wants(f"state.valueGet.batch.{kind}"):
            with fresh_case(bench, backend):
                bench.add(batch_result("valueGet", kind, rates(
                    run_batches(state.get_many, batches), s.repeats), s, call="get_many(keys)"))
        if bench.wants(f"state.valueUpdate.batch.{kind}"):
            with fresh_case(bench, backend):
                bench.add(batch_result("valueUpdate", kind, rates(
                    run_batches(lambda k: state.put_many(k, k), batches), s.repeats), s,
                    call="put_many(keys, values)"))

    floor_cases(bench, backend, state, scalar, distinct)

    if bench.wants("state.valueAdd.scalar"):
        fresh = [(w.rng.permutation(s.scalar_ops) + s.setup_keys + j * s.scalar_ops).tolist()
                 for j in range(s.repeats + 1)]  # new keys, never used twice

        def value_add(i: int) -> int:
            update = state.update
            for k in fresh[i]:
                set_key(k)
                update(k)
            return len(fresh[i])

        with fresh_case(bench, backend):
            bench.add(scalar_result("valueAdd", rates(value_add, s.repeats),
                                    "set_current_key(new key) + update(v)"))
    for kind, batches in (("distinct", distinct), ("repeated", repeated)):
        if bench.wants(f"state.valueAdd.batch.{kind}"):
            space = 10**9 * (2 if kind == "distinct" else 3)

            def value_add_many(i: int, batches: list[np.ndarray] = batches,
                               space: int = space) -> int:
                shift = space + (i + 1) * 10**8  # a new key range every repetition
                for keys in batches:
                    state.put_many(keys + shift, keys)
                return sum(len(k) for k in batches)

            with fresh_case(bench, backend):
                bench.add(batch_result("valueAdd", kind, rates(value_add_many, s.repeats), s,
                                       call="put_many(new keys, values)"))
    backend.dispose()


def floor_cases(bench: Bench, backend: Any, state: Any, scalar: list[list[int]],
                distinct: list[np.ndarray]) -> None:
    """RocksDB alone on the value state's keys of the scalar loop and of the distinct batches
    (the floor.* cases of targets.FLOORS): how much of a state call is RocksDB's, and the most
    batching can gain when no key repeats (a batch still pays RocksDB's lookup or memtable
    insert once per distinct key)."""
    from stateengine import _native

    s = bench.scale
    scalar_arrays = [np.array(k, dtype=np.int64) for k in scalar]
    for name, op, keys, label in (
            ("floor.valueGet.point", "point_get", scalar_arrays,
             "RocksDB Get per key, C++ loop over the scalar case's keys"),
            ("floor.valueGet.multiget", "multiget", distinct,
             f"RocksDB sorted MultiGet, {s.batch_rows:,} distinct keys per call"),
            ("floor.valueUpdate.point", "point_put", scalar_arrays,
             "RocksDB Put per key, C++ loop over the scalar case's keys"),
            ("floor.valueUpdate.writebatch", "write_batch", distinct,
             f"RocksDB sorted WriteBatch, {s.batch_rows:,} distinct keys per call")):
        if not bench.wants(name):
            continue

        def run(i: int, op: str = op, keys: list[np.ndarray] = keys) -> tuple[int, float]:
            batches = [keys[i]] if op.startswith("point") else keys
            return (sum(len(k) for k in batches),
                    sum(_native._rocksdb_floor(state, k, op) for k in batches))

        with fresh_case(bench, backend):
            run(-1)
            samples = []
            for i in range(s.repeats):
                n, seconds = run(i)
                samples.append(n / seconds)
            bench.add(rate_result(name, "floor", "ops/s", label, samples))


# ---- list state -----------------------------------------------------------------------------

def list_cases(bench: Bench) -> None:
    from stateengine import ListStateDescriptor

    s = bench.scale
    w = Workload(bench, 2)
    backend = open_backend(bench, "list")
    state = backend.get_state(ListStateDescriptor("list", value_type=int))
    many = backend.get_state(ListStateDescriptor("listAddAll", value_type=int))
    for a, b in chunks(s.setup_keys, 100_000):
        keys = np.arange(a, b, dtype=np.int64)
        state.add_many(keys, keys)
        many.add_many(keys, keys)
    settle(backend)
    set_key = backend.set_current_key
    scalar = w.scalar_keys()

    def list_get(i: int) -> int:
        get = state.get
        for k in scalar[i]:
            set_key(k)
            get()
        return len(scalar[i])

    def list_append(i: int) -> int:
        add = state.add
        for k in scalar[i]:
            set_key(k)
            add(k)
        return len(scalar[i])

    # listGet runs before the appends so every list holds one element, as in flink-benchmarks.
    if bench.wants("state.listGet.scalar"):
        with fresh_case(bench, backend):
            bench.add(scalar_result("listGet", rates(list_get, s.repeats), "set_current_key + get()"))
    distinct, repeated = w.distinct_batches(), w.repeated_batches()
    for kind, batches in (("distinct", distinct), ("repeated", repeated)):
        if bench.wants(f"state.listGet.batch.{kind}"):
            with fresh_case(bench, backend):
                bench.add(batch_result("listGet", kind, rates(
                    run_batches(state.get_many, batches), s.repeats), s, call="get_many(keys)"))
    if bench.wants("state.listAppend.scalar"):
        with fresh_case(bench, backend):
            bench.add(scalar_result("listAppend", rates(list_append, s.repeats),
                                    "set_current_key + add(v)"))
    for kind, batches in (("distinct", distinct), ("repeated", repeated)):
        if bench.wants(f"state.listAppend.batch.{kind}"):
            with fresh_case(bench, backend):
                bench.add(batch_result("listAppend", kind, rates(
                    run_batches(lambda k: state.add_many(k, k), batches), s.repeats), s,
                    call="add_many(keys, values)"))

    # add_all of list_add_all elements per call; fewer calls per repetition keep lists small.
    n_calls = max(1, s.scalar_ops // 10)
    add_keys = w.scalar_keys(n_calls)
    elements = w.rng.integers(0, 1 << 40, s.list_add_all).tolist()
    if bench.wants("state.listAddAll.scalar"):
        def list_add_all(i: int) -> int:
            add_all = many.add_all
            for k in add_keys[i]:
                set_key(k)
                add_all(elements)
            return len(add_keys[i])

        with fresh_case(bench, backend):
            bench.add(scalar_result("listAddAll", rates(list_add_all, s.repeats),
                                    f"set_current_key + add_all({s.list_add_all} elements)",
                                    elements_per_call=s.list_add_all))
    if bench.wants("state.listAddAll.batch"):
        per_call = max(1, s.batch_rows // s.list_add_all)
        batches = [np.repeat(w.rng.choice(s.setup_keys, per_call, replace=False),
                             s.list_add_all).astype(np.int64) for _ in range(s.batch_calls)]
        values = np.tile(np.asarray(elements, dtype=np.int64), per_call)

        def run(_: int) -> int:
            for keys in batches:
                many.add_many(keys, values)
            return per_call * len(batches)  # add_all equivalents: one per key

        with fresh_case(bench, backend):
            bench.add(rate_result(
                "state.listAddAll.batch", "state", "ops/s",
                f"add_many(keys, values), {per_call} keys x {s.list_add_all} elements per "
                f"call (1 op = one key's {s.list_add_all} elements)", rates(run, s.repeats),
                call="add_many(keys, values)"))
    backend.dispose()


# ---- map state ------------------------------------------------------------------------------

def map_cases(bench: Bench) -> None:
    from stateengine import MapStateDescriptor

    s = bench.scale
    u = s.map_user_keys
    w = Workload(bench, 3)
    backend = open_backend(bench, "map")
    state = backend.get_state(MapStateDescriptor("map", user_key_type=int, value_type=float))
    for a, b in chunks(s.setup_keys, max(1, 200_000 // u)):
        keys = np.repeat(np.arange(a, b, dtype=np.int64), u)
        uks = np.tile(np.arange(u, dtype=np.int64), b - a)
        state.put_many(keys, uks, w.rng.random(len(keys)))
    settle(backend)
    set_key = backend.set_current_key
    scalar = w.scalar_keys()
    uk_lists = [w.rng.integers(0, u, len(ks)).tolist() for ks in scalar]
    values = w.rng.random(s.scalar_ops).tolist()

    def pairs(i: int) -> Any:
        return zip(scalar[i], uk_lists[i])

    def map_get(i: int) -> int:
        get = state.get
        for k, uk in pairs(i):
            set_key(k)
            get(uk)
        return len(scalar[i])

    def map_contains(i: int) -> int:
        contains = state.contains
        for k, uk in pairs(i):
            set_key(k)
            contains(uk)
        return len(scalar[i])

    def map_put(i: int) -> int:
        put = state.put
        for (k, uk), v in zip(pairs(i), values):
            set_key(k)
            put(uk, v)
        return len(scalar[i])

    def map_iterate(i: int) -> int:
        entries = state.entries
        for k in scalar[i]:
            set_key(k)
            for _ in entries():
                pass
        return len(scalar[i])

    need_rdb = bench.wants_any(["state.mapGet.scalar", "state.mapPut.scalar",
                                "baseline.rocksdict.mapGet", "baseline.rocksdict.mapPut"])
    if need_rdb:
        rdb = RocksdictBaseline(bench, "rocksdict-map")
        pack = struct.Struct(">qq").pack
        fval = struct.Struct(">d").pack
        rdb.load((pack(k, j), fval(0.5)) for k in range(s.setup_keys) for j in range(u))
        raw = [[pack(k, uk) for k, uk in pairs(i)] for i in range(len(scalar))]
        raw_values = [fval(v) for v in values]

        def rd_get(i: int) -> int:
            get = rdb.db.get
            for k in raw[i]:
                get(k)
            return len(raw[i])

        def rd_put(i: int) -> int:
            put = rdb.db.put
            for k, v in zip(raw[i], raw_values):
                put(k, v)
            return len(raw[i])

        with fresh_case(bench, backend, rdb):
            r = alternate({"se": map_get, "rd": rd_get}, s.repeats)
            bench.add(scalar_result("mapGet", r["se"], "set_current_key + get(user key)"))
            bench.add(rate_result("baseline.rocksdict.mapGet", "baseline", "ops/s",
                                  f"rocksdict get(16-byte key), {u} entries per key", r["rd"]))
        with fresh_case(bench, backend, rdb):
            r = alternate({"se": map_put, "rd": rd_put}, s.repeats)
            bench.add(scalar_result("mapPut", r["se"], "set_current_key + put(user key, v)"))
            bench.add(rate_result("baseline.rocksdict.mapPut", "baseline", "ops/s",
                                  "rocksdict put(16-byte key, 8-byte value), WAL off", r["rd"]))
        rdb.close()
    if bench.wants("state.mapContains.scalar"):
        with fresh_case(bench, backend):
            bench.add(scalar_result("mapContains", rates(map_contains, s.repeats),
                                    "set_current_key + contains(user key)"))
    if bench.wants("state.mapIterate.scalar"):
        with fresh_case(bench, backend):
            bench.add(scalar_result("mapIterate", rates(map_iterate, s.repeats),
                                    f"set_current_key + iterate entries() ({u} per key)",
                                    entries_per_op=u))

    for kind, batches in (("distinct", w.distinct_batches()), ("repeated", w.repeated_batches())):
        uks = [w.rng.integers(0, u, len(k)).astype(np.int64) for k in batches]
        vals = [w.rng.random(len(k)) for k in batches]
        by_keys = {id(k): (uk, v) for k, uk, v in zip(batches, uks, vals)}
        if bench.wants(f"state.mapGet.batch.{kind}"):
            with fresh_case(bench, backend):
                bench.add(batch_result("mapGet", kind, rates(run_batches(
                    lambda k: state.get_many(k, by_keys[id(k)][0]), batches), s.repeats), s,
                    call="get_many(keys, user_keys)"))
        if bench.wants(f"state.mapContains.batch.{kind}"):
            with fresh_case(bench, backend):
                bench.add(batch_result("mapContains", kind, rates(run_batches(
                    lambda k: state.get_many(k, by_keys[id(k)][0])[1], batches), s.repeats), s,
                    call="get_many(keys, user_keys)[1] (the found mask)"))
        if bench.wants(f"state.mapPut.batch.{kind}"):
            with fresh_case(bench, backend):
                bench.add(batch_result("mapPut", kind, rates(run_batches(
                    lambda k: state.put_many(k, *by_keys[id(k)]), batches), s.repeats), s,
                    call="put_many(keys, user_keys, values)"))
    backend.dispose()


# ---- reducing and aggregating state -----------------------------------------------------------

def merging_cases(bench: Bench) -> None:
    from stateengine import (AggregateFunction, AggregatingStateDescriptor,
                             ReducingStateDescriptor, aggregates, reducers)

    class PySum(AggregateFunction):
        """A Python aggregate, to show what a user function costs next to the native SUM."""

        def create_accumulator(self) -> int:
            return 0

        def add(self, value: int, acc: int) -> int:
            return acc + value

        def get_result(self, acc: int) -> int:
            return acc

        def merge(self, a: int, b: int) -> int:
            return a + b

    s = bench.scale
    w = Workload(bench, 4)
    backend = open_backend(bench, "merging")
    red = backend.get_state(ReducingStateDescriptor("reducing", reducers.SUM, value_type=int))
    agg = backend.get_state(AggregatingStateDescriptor("aggregating", aggregates.SUM,
                                                       accumulator_type=int))
    pyagg = backend.get_state(AggregatingStateDescriptor("aggregatingPy", PySum(),
                                                         accumulator_type=int))
    for a, b in chunks(s.setup_keys, 100_000):
        keys = np.arange(a, b, dtype=np.int64)
        red.add_many(keys, keys)
        agg.add_many(keys, keys)
        pyagg.add_many(keys, keys)
    settle(backend)
    set_key = backend.set_current_key
    scalar = w.scalar_keys()

    def adder(state: Any) -> Callable[[int], int]:
        def run(i: int) -> int:
            add = state.add
            for k in scalar[i]:
                set_key(k)
                add(k)
            return len(scalar[i])
        return run

    if bench.wants("state.reducingAdd.scalar"):
        with fresh_case(bench, backend):
            bench.add(scalar_result("reducingAdd", rates(adder(red), s.repeats),
                                    "set_current_key + add(v), native SUM"))
    if bench.wants("state.aggregatingAdd.scalar"):
        with fresh_case(bench, backend):
            bench.add(scalar_result("aggregatingAdd", rates(adder(agg), s.repeats),
                                    "set_current_key + add(v), native SUM"))
    if bench.wants("state.aggregatingAdd.scalar.python"):
        with fresh_case(bench, backend):
            r = rates(adder(pyagg), s.repeats)
            bench.add(rate_result("state.aggregatingAdd.scalar.python", "state", "ops/s",
                                  "set_current_key + add(v), Python AggregateFunction", r))
    for kind, batches in (("distinct", w.distinct_batches()), ("repeated", w.repeated_batches())):
        for case, state in (("reducingAdd", red), ("aggregatingAdd", agg)):
            if bench.wants(f"state.{case}.batch.{kind}"):
                with fresh_case(bench, backend):
                    bench.add(batch_result(case, kind, rates(run_batches(
                        lambda k, st=state: st.add_many(k, k), batches), s.repeats), s,
                        call="add_many(keys, values), native SUM"))
    backend.dispose()


# ---- Python dict ------------------------------------------------------------------------------

def dict_cases(bench: Bench) -> None:
    s = bench.scale
    w = Workload(bench, 5)
    d = {k: k for k in range(s.setup_keys)}
    scalar = w.scalar_keys()

    def get(i: int) -> int:
        g = d.get
        for k in scalar[i]:
            g(k)
        return len(scalar[i])

    def put(i: int) -> int:
        for k in scalar[i]:
            d[k] = k
        return len(scalar[i])

    if bench.wants("baseline.dict.get"):
        with timed_case(bench):
            bench.add(rate_result("baseline.dict.get", "baseline", "ops/s", "dict.get(int)",
                                  rates(get, s.repeats)))
    if bench.wants("baseline.dict.put"):
        with timed_case(bench):
            bench.add(rate_result("baseline.dict.put", "baseline", "ops/s", "d[int] = int",
                                  rates(put, s.repeats)))


def run(bench: Bench) -> None:
    groups = [
        (value_cases, ["state.value*", "floor.value*", "baseline.rocksdict.get",
                       "baseline.rocksdict.put"]),
        (list_cases, ["state.list*"]),
        (map_cases, ["state.map*", "baseline.rocksdict.map*"]),
        (merging_cases, ["state.reducing*", "state.aggregating*"]),
        (dict_cases, ["baseline.dict.*"]),
    ]
    for fn, patterns in groups:
        names = [n for n in case_names() if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
        if bench.wants_any(names):
            fn(bench)

