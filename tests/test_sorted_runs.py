"""Dense batch reads table file by table file (csrc/sorted_runs.h): each sorted run (a level-0
file, a deeper level) is walked with its own iterator, newest first, where that returns what
RocksDB's merged iterator returns; otherwise the read walks the merged iterator.

Every test reads the same batches with MultiGets ("point") for the expected answer, and checks
which way the dense read went (``_batch_read_counts``): file by file over ingested batch puts,
flushed tables, a deeper level of several files and tombstones in the oldest run; the merged
iterator where the memtable holds writes, a newer run holds a tombstone or any run a range
tombstone or merge operand, or the read would open too many files.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from stateengine import (KeyedStateBackend, KeyGroupRange, ReducingStateDescriptor,
                         ValueStateDescriptor, _native, configure_memory, memory_usage, reducers)

STRUCT = "count long, total double"


@pytest.fixture
def read_mode():
    yield _native._set_batch_read_mode
    _native._set_batch_read_mode("auto")


@pytest.fixture
def long_state(make_backend, ingest_above):
    """A backend whose batch puts of 64 keys or more are ingested, its value state "v" of
    longs, and the 2,000 keys the tests write."""
    ingest_above(64)
    backend = make_backend()
    return backend, backend.get_state(ValueStateDescriptor("v", value_type="long")), \
        np.arange(2000, dtype=np.int64)


def ways_of(read):
    """Which way (point, scan or runs) the reads in read() went, and read()'s result."""
    before = _native._batch_read_counts()
    out = read()
    after = _native._batch_read_counts()
    return [w for w in ("point", "scan", "runs") for _ in range(after[w] - before[w])], out


def as_lists(values, found):
    values = values.to_pylist() if hasattr(values, "to_pylist") else values.tolist()
    return [v if f else None for v, f in zip(values, found.tolist())]


def check_dense_read(read_mode, state, batch, way):
    """batch read densely goes `way` and returns what MultiGets return."""
    read_mode("point")
    expected = as_lists(*state.get_many(batch))
    read_mode("auto")
    ways, got = ways_of(lambda: as_lists(*state.get_many(batch)))
    assert ways == [way]
    assert got == expected
    return expected


def struct_rows(rng, n):
    return {"count": rng.integers(0, 100, n), "total": rng.uniform(0, 1, n)}


def test_ingested_batches_are_read_file_by_file(make_backend, read_mode, ingest_above):
    ingest_above(64)
    rng = np.random.default_rng(1)
    backend = make_backend()
    acc = backend.get_state(ValueStateDescriptor("acc", value_type=STRUCT))
    universe = np.arange(-2000, 2000, dtype=np.int64)
    written = {}
    for rnd in range(5):  # one run per batch: the last level, then a level-0 file each
        keys = np.unique(rng.choice(universe, 1500))
        rows = struct_rows(rng, len(keys))
        acc.put_many(keys, rows)
        written.update({int(k): {"count": int(c), "total": float(t)}
                        for k, c, t in zip(keys, rows["count"], rows["total"])})
        assert backend._native_files_per_level()[0] == rnd  # nothing went through the memtable
        got = check_dense_read(read_mode, acc, universe, "runs")
        assert got == [written.get(int(k)) for k in universe]  # the newest value of each key


def test_keys_sorted_or_not_with_duplicates_and_keys_outside_every_file(make_backend, read_mode,
                                                                         ingest_above):
    ingest_above(64)
    rng = np.random.default_rng(2)
    backend = make_backend()
    v = backend.get_state(ValueStateDescriptor("v", value_type="long"))
    for _ in range(3):
        keys = np.unique(rng.integers(0, 3000, 1200))
        v.put_many(keys, rng.integers(-9, 9, len(keys)))
    everything = np.arange(-100, 3100, dtype=np.int64)  # before and after every file's keys
    check_dense_read(read_mode, v, everything, "runs")
    shuffled = rng.permutation(np.concatenate([everything, everything[:700]]))
    check_dense_read(read_mode, v, shuffled, "runs")


def test_flushed_tables_and_a_compacted_level_are_runs_too(make_backend, read_mode):
    rng = np.random.default_rng(3)
    backend = make_backend()
    v = backend.get_state(ValueStateDescriptor("v", value_type="long"))
    keys = np.arange(4000, dtype=np.int64)
    for rnd in range(3):
        for k in rng.choice(keys, 300).tolist():  # scalar puts through the memtable
            backend.set_current_key(k)
            v.update(rnd * 10_000 + k)
        backend._native_flush()
    check_dense_read(read_mode, v, keys, "runs")
    backend._native_compact()
    check_dense_read(read_mode, v, keys, "runs")


def test_a_level_of_several_files_is_one_run(tmp_path, read_mode, ingest_above):
    """A restore from two partitions' snapshots puts two files side by side in the last level;
    then a level-0 file over both."""
    ingest_above(64)
    handles = []
    everything = np.arange(-50, 6050, dtype=np.int64)
    for i, r in enumerate([KeyGroupRange(0, 63), KeyGroupRange(64, 127)]):
        with KeyedStateBackend(tmp_path / f"part{i}", key_group_range=r) as b:
            v = b.get_state(ValueStateDescriptor("v", value_type="long"))
            keys = np.arange(0, 6000, dtype=np.int64)
            keys = keys[[r.start <= b.key_group_of(int(k)) <= r.end for k in keys]]
            v.put_many(keys, keys * 3 + i)
            handles.append(b.snapshot(str(tmp_path / "snap"), f"s{i}", hmac_key="k").result())
    with KeyedStateBackend.restore(tmp_path / "restored", handles, hmac_key="k") as b:
        v = b.get_state(ValueStateDescriptor("v", value_type="long"))
        assert b._native_files_per_level() == [0, 0, 0, 0, 0, 0, 2]
        got = check_dense_read(read_mode, v, everything, "runs")
        assert got == [k * 3 + (b.key_group_of(k) >= 64) if 0 <= k < 6000 else None
                       for k in everything.tolist()]
        newer = np.arange(0, 6000, 7, dtype=np.int64)
        v.put_many(newer, -newer)  # a level-0 file over both
        assert b._native_files_per_level()[0] == 1
        got = check_dense_read(read_mode, v, everything, "runs")
        assert [g for g, k in zip(got, everything.tolist()) if 0 <= k < 6000 and k % 7 == 0] \
            == [-k for k in newer.tolist()]


def test_a_tombstone_in_the_oldest_run_is_read_file_by_file(long_state, read_mode):
    backend, v, keys = long_state
    vals = keys.astype(object)
    vals[::4] = None  # deletes, in the last level's file
    v.put_many(keys, vals)
    v.put_many(keys[1::2], keys[1::2] * 5)  # a level-0 file of values over it
    got = check_dense_read(read_mode, v, keys, "runs")
    assert got == [None if k % 4 == 0 else (k * 5 if k % 2 else k) for k in keys.tolist()]


def test_a_tombstone_in_a_newer_run_reads_the_merged_iterator(long_state, read_mode):
    backend, v, keys = long_state
    v.put_many(keys, keys)
    vals = keys.astype(object)
    vals[::3] = None  # tombstones in a level-0 file over values of the last level
    v.put_many(keys, vals)
    got = check_dense_read(read_mode, v, keys, "scan")
    assert got == [None if k % 3 == 0 else k for k in keys.tolist()]
    backend._native_compact()  # the tombstones drop out with the values they hid
    check_dense_read(read_mode, v, keys, "runs")


def test_writes_in_the_memtable_read_the_merged_iterator(long_state, read_mode):
    backend, v, keys = long_state
    v.put_many(keys, keys)
    backend.set_current_key(5)
    v.update(-5)
    got = check_dense_read(read_mode, v, keys, "scan")
    assert got[5] == -5
    backend._native_flush()
    assert check_dense_read(read_mode, v, keys, "runs")[5] == -5
    backend.set_current_key(6)
    v.clear()  # a tombstone in the memtable
    assert check_dense_read(read_mode, v, keys, "scan")[6] is None


def test_merge_operands_and_range_tombstones_read_the_merged_iterator(make_backend, read_mode,
                                                                     ingest_above):
    ingest_above(64)
    backend = make_backend()
    total = backend.get_state(ReducingStateDescriptor("sum", reducers.SUM, value_type="long"))
    v = backend.get_state(ValueStateDescriptor("v", value_type="long"))
    keys = np.arange(2000, dtype=np.int64)
    total.add_many(keys, np.ones(len(keys), dtype=np.int64))
    total.add_many(keys, np.ones(len(keys), dtype=np.int64))
    v.put_many(keys, keys)
    backend._native_flush()
    check_dense_read(read_mode, total, keys, "scan")  # operands in the tables
    check_dense_read(read_mode, v, keys, "runs")  # the other state is not affected
    backend._native_delete_range(v.column_family, bytes([10]), bytes([20]))
    backend._native_flush()
    got = check_dense_read(read_mode, v, keys, "scan")
    assert [k for k, g in zip(keys.tolist(), got) if g is None] \
        == [k for k in keys.tolist() if 10 <= backend.key_group_of(k) < 20]


def test_more_files_than_the_limit_read_the_merged_iterator(make_backend, read_mode):
    backend = make_backend()
    v = backend.get_state(ValueStateDescriptor("v", value_type="long"))
    keys = np.arange(2000, dtype=np.int64)
    limit = 64  # SortedRuns::kMaxFiles
    for i in range(limit + 1):
        backend.set_current_key(i)
        v.update(i)
        backend._native_flush()
    assert sum(backend._native_files_per_level()) > limit
    assert check_dense_read(read_mode, v, keys, "scan")[:3] == [0, 1, 2]


def test_forced_modes_read_alike(make_backend, read_mode, ingest_above):
    """"scan" walks the merged iterator even where "runs" (and "auto") read file by file."""
    ingest_above(64)
    rng = np.random.default_rng(4)
    backend = make_backend()
    acc = backend.get_state(ValueStateDescriptor("acc", value_type=STRUCT))
    keys = np.arange(3000, dtype=np.int64)
    for _ in range(3):
        ks = np.unique(rng.choice(keys, 2000))
        acc.put_many(ks, struct_rows(rng, len(ks)))
    sparse = keys[::500]  # too few keys for a dense read in "auto"
    results = {}
    for mode in ("point", "scan", "runs"):
        read_mode(mode)
        ways, results[mode] = ways_of(lambda: (as_lists(*acc.get_many(keys)),
                                               as_lists(*acc.get_many(sparse))))
        assert ways == [mode, mode]
    assert results["scan"] == results["point"] == results["runs"]


@pytest.mark.parametrize("seed", [5, 6, 7, 8])
def test_random_histories_read_what_multiget_reads(make_backend, read_mode, ingest_above, seed):
    """Random mixes of ingested batch puts (with deletes), scalar writes, flushes and
    compactions: every dense read returns what MultiGets return, whichever way it goes."""
    ingest_above(64)
    rng = np.random.default_rng(seed)
    backend = make_backend(key_group_range=KeyGroupRange(20, 100))
    v = backend.get_state(ValueStateDescriptor("v", value_type="long"))
    candidates = np.arange(-4000, 4000, dtype=np.int64)
    kgs = np.array([backend.key_group_of(int(k)) for k in candidates])
    keys = candidates[(kgs >= 20) & (kgs <= 100)]
    ways = []
    for _ in range(12):
        op = rng.choice(["batch", "batch with deletes", "scalar", "flush", "compact"],
                        p=[0.4, 0.15, 0.2, 0.15, 0.1])
        if op.startswith("batch"):
            ks = np.unique(rng.choice(keys, int(len(keys) * rng.uniform(0.05, 0.9))))
            vals = rng.integers(-100, 100, len(ks)).astype(object)
            if op == "batch with deletes":
                vals[rng.random(len(ks)) < 0.3] = None
            v.put_many(ks, vals)
        elif op == "scalar":
            for k in rng.choice(keys, 20).tolist():
                backend.set_current_key(k)
                if rng.random() < 0.3:
                    v.clear()
                else:
                    v.update(int(rng.integers(-100, 100)))
        elif op == "flush":
            backend._native_flush()
        else:
            backend._native_compact()
        batch = np.sort(rng.choice(keys, int(len(keys) * rng.uniform(0.3, 1.0)), replace=False))
        read_mode("point")
        expected = as_lists(*v.get_many(batch))
        read_mode("runs")
        taken, got = ways_of(lambda: as_lists(*v.get_many(batch)))
        assert got == expected, op
        ways += taken
    assert set(ways) <= {"scan", "runs"}


def test_a_deleted_file_makes_the_read_fall_back(long_state, read_mode):
    """A file listed but gone when opened (a compaction deleted it since) declines the
    file-by-file read before any key is read: here the file is renamed away under RocksDB,
    which serves the merged iterator from the reader its table cache holds open."""
    backend, v, keys = long_state
    v.put_many(keys, keys)
    v.put_many(keys[::2], -keys[::2])
    read_mode("point")
    expected = as_lists(*v.get_many(keys))  # opens both files in the table cache
    db = os.path.join(backend.path, "db")
    tables = sorted(f for f in os.listdir(db) if f.endswith(".sst"))
    assert len(tables) == 2
    os.rename(os.path.join(db, tables[0]), os.path.join(db, "moved"))
    try:
        read_mode("auto")
        ways, got = ways_of(lambda: as_lists(*v.get_many(keys)))
    finally:
        os.rename(os.path.join(db, "moved"), os.path.join(db, tables[0]))
    assert ways == ["scan"]
    assert got == expected


@pytest.mark.parametrize("budget_mib, fills", [(256, True), (20, False)])
def test_the_read_fills_the_block_cache_only_with_a_state_that_fits_half_of_it(
        make_backend, read_mode, ingest_above, budget_mib, fills):
    """~6 MiB of keys and values: their blocks are cached for the next batch under the default
    budget, and left out of a cache of a few MiB, where they would only evict each other."""
    ingest_above(64)
    old = memory_usage()
    configure_memory(budget_mib << 20)
    try:
        backend = make_backend()
        acc = backend.get_state(ValueStateDescriptor("acc", value_type=STRUCT))
        keys = np.arange(200_000, dtype=np.int64)
        rng = np.random.default_rng(9)
        acc.put_many(keys, struct_rows(rng, len(keys)))
        acc.put_many(keys[::2], struct_rows(rng, len(keys[::2])))
        backend._native_flush()
        configure_memory(4 << 20)  # evicts what earlier reads cached
        configure_memory(budget_mib << 20)
        before = memory_usage()["cache_blocks"]
        ways, _ = ways_of(lambda: acc.get_many(keys))
        grew = memory_usage()["cache_blocks"] - before
        assert ways == ["runs"]
        assert (grew > 4 << 20) == fills, grew
    finally:
        configure_memory(old["budget"], old["write_buffer_ratio"])
