"""Large batch puts are written as a table file and ingested (csrc/batch_ingest.h) instead of
going through the memtable: the same state either way, in every read path, over older values
in files and in the memtable, after checkpoints and restores (trusted or checked), and with
TTL."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from stateengine import (KeyedStateBackend, KeyGroupRange, MapStateDescriptor, StateTtlConfig,
                         ValueStateDescriptor, configure_batch_ingest)
from stateengine.keygroups import assign_key_group
from stateengine.checkpoint import restore as restore_module
from stateengine.checkpoint import untrusted
from tests.test_batch import raw_contents

N = 3_000  # distinct keys per batch put: above the threshold the tests set, below the default's


def _writes(be: KeyedStateBackend) -> list[int]:
    """Older values in two files, batch puts over them (duplicate keys, None deletes), a
    second batch put, and scalar puts over those: what each route must agree on.
    Returns how much the memtables grew at each batch put of `v` and `s` (none: ingested)."""
    rng = np.random.default_rng(11)
    v = be.get_state(ValueStateDescriptor("v", value_type=str))
    s = be.get_state(ValueStateDescriptor("s", value_type="count long, total double"))
    m = be.get_state(MapStateDescriptor("m", user_key_type=int, value_type=float))
    for k in range(0, 400, 3):  # older values in a file, under the batch's keys
        be.set_current_key(k)
        v.update(f"scalar {k}")
        s.update({"count": -k, "total": 0.5})
    be._native_flush()
    for k in range(1, 400, 3):  # and in a second one
        be.set_current_key(k)
        v.update(f"flushed {k}")
    be._native_flush()
    grew = []

    def put(state, *args) -> None:
        before = be.metrics()["memtable_bytes"]
        state.put_many(*args)
        grew.append(be.metrics()["memtable_bytes"] - before)

    keys = rng.integers(0, N + N // 2, N * 2)
    texts = np.array([None if x % 7 == 0 else f"batch {x}" for x in rng.integers(0, 10**6, keys.size)],
                     dtype=object)
    put(v, keys, texts)
    put(s, keys, {"count": keys * 2, "total": keys / 4})
    # a second batch over the first: into L0 whether or not compaction has moved the three
    # L0 tables into the last level meanwhile
    put(v, pa.array(np.arange(N, 2 * N)), pa.array([f"second {k}" for k in range(N, 2 * N)]))
    for k in range(2, 400, 5):  # scalar writes after the ingested files win over them
        be.set_current_key(int(k))
        v.update(f"after {k}")
    be.set_current_key(5)
    v.clear()
    be.set_current_key(9)
    m.put_all({i: i / 2 for i in range(5)})
    return grew


def _contents(be: KeyedStateBackend) -> dict:
    return {name: raw_contents(be, be.get_state(desc)) for name, desc in (
        ("v", ValueStateDescriptor("v", value_type=str)),
        ("s", ValueStateDescriptor("s", value_type="count long, total double")),
        ("m", MapStateDescriptor("m", user_key_type=int, value_type=float)))}


def test_ingested_batches_leave_the_state_the_memtable_route_leaves(make_backend, ingest_above):
    ingest_above(None)
    through_memtable = make_backend(key_type=int)
    assert sum(_writes(through_memtable)) > N * 8  # the memtables grew
    ingest_above(1_000)
    ingested = make_backend(key_type=int)
    assert _writes(ingested) == [0, 0, 0]  # every batch put became a file
    expected = _contents(through_memtable)
    assert _contents(ingested) == expected
    assert len(expected["v"]) > N
    # and read one key at a time, and by batch
    v = ingested.get_state(ValueStateDescriptor("v", value_type=str))
    probe = list(range(0, 2 * N, 7))
    values = []
    for k in probe:
        ingested.set_current_key(k)
        values.append(v.value())
    batch, found = v.get_many(np.array(probe))
    assert list(batch) == values and list(found) == [x is not None for x in values]
    mv = through_memtable.get_state(ValueStateDescriptor("v", value_type=str))
    assert list(mv.get_many(np.array(probe))[0]) == values
    ingested.set_current_key(5)
    assert v.value() is None
    ingested.set_current_key(2)
    assert v.value() == "after 2"


def test_large_first_batches_land_where_a_flush_or_compaction_would(make_backend, ingest_above):
    """An ingested file lands in the last level of an empty state and in L0 over existing
    state (dynamic level sizing keeps the levels between empty), and only a put into an
    empty memtable is ingested (batch_ingest.h); other batches go through the memtable."""
    ingest_above(1_000)
    be = make_backend(key_type=int)
    v = be.get_state(ValueStateDescriptor("v", value_type=int))
    empty = be.metrics()["memtable_bytes"]
    v.put_many(np.arange(2_000), np.arange(2_000))  # an empty state: into the last level
    assert be.metrics()["memtable_bytes"] == empty
    assert be._native_files_per_level() == [0] * 6 + [1]
    v.put_many(np.arange(1_500), np.arange(1_500) + 5)  # over it: into L0
    assert be.metrics()["memtable_bytes"] == empty
    assert be._native_files_per_level() == [1] + [0] * 5 + [1]
    v.put_many(np.arange(999), np.arange(999) + 7)  # below the threshold
    v.put_many(np.arange(1_000, 2_000), np.arange(1_000))  # into a memtable holding writes
    assert be.metrics()["memtable_bytes"] > 1_999 * 8
    assert be._native_files_per_level() == [1] + [0] * 5 + [1]
    got, _ = v.get_many(np.arange(2_000))
    assert got.tolist() == list(range(7, 1_006)) + [999 + 5] + list(range(1_000))
    be._native_flush()
    v.put_many(np.arange(500, 3_000), np.arange(2_500))  # over L0 and the last level: L0
    assert be._native_files_per_level() == [3] + [0] * 5 + [1]
    got, _ = v.get_many(np.arange(3_000))
    assert got.tolist() == list(range(7, 507)) + list(range(2_500))


def test_no_file_lands_below_a_level_holding_state(make_backend, ingest_above):
    """A state written before dynamic level sizing keeps its tables in L1. A put over them
    lands in L0 and is ingested; one beside them (keys of other key groups, no overlap) would
    land in the last level, below them, so it goes through the memtable."""
    ingest_above(1_000)
    be = make_backend(key_type=int, max_parallelism=128)
    v = be.get_state(ValueStateDescriptor("v", value_type=int))
    candidates = np.arange(20_000)
    groups = np.array([assign_key_group(int(k), 128, int) for k in candidates])
    low, high = candidates[groups < 64][:2_000], candidates[groups >= 64][:2_000]
    for k in high[:50]:  # in the upper key groups, then moved to L1
        be.set_current_key(int(k))
        v.update(-1)
    be._native_flush()
    be._native_compact(1)
    assert be._native_files_per_level() == [0, 1]
    empty = be.metrics()["memtable_bytes"]
    v.put_many(low, low)  # beside them
    assert be.metrics()["memtable_bytes"] > empty + 2_000 * 8
    assert be._native_files_per_level() == [0, 1]
    be._native_flush()
    assert be._native_files_per_level() == [1, 1]
    v.put_many(high, high + 1)  # over the L1 table only: into L0
    assert be._native_files_per_level() == [2, 1]
    assert v.get_many(low)[0].tolist() == low.tolist()
    assert v.get_many(high)[0].tolist() == (high + 1).tolist()


def test_ingested_state_survives_checkpoint_and_checked_restore(tmp_path, ingest_above,
                                                                 monkeypatch):
    """A restore on another machine reads every table it did not write (untrusted.py): an
    ingested file (its sequence number in the MANIFEST only) passes and reads the same."""
    ingest_above(1_000)
    monkeypatch.setattr(untrusted, "_shared_root", None)  # no machine-wide memo either
    monkeypatch.setattr(untrusted, "_shared_explicit", False)
    checks = []

    def check(db_dir, source):
        checks.append(untrusted.check_rocksdb_files(db_dir, source))
        return checks[-1]

    monkeypatch.setattr(restore_module, "check_rocksdb_files", check)
    src = KeyedStateBackend(str(tmp_path / "src"), key_type=int)
    try:
        _writes(src)
        expected = _contents(src)
        handle = src.checkpoint(1, str(tmp_path / "ck")).result()
        _writes(src)  # a second round over the first: newer files over older ones
        expected2 = _contents(src)
        handle2 = src.checkpoint(2, str(tmp_path / "ck")).result()
    finally:
        src.dispose()
    untrusted.forget_checks()
    try:
        for h, want, where in ((handle, expected, "r1"), (handle2, expected2, "r2")):
            untrusted.forget_checks()
            restored = KeyedStateBackend.restore(str(tmp_path / where), [h])
            try:
                assert checks[-1]["files"] == checks[-1]["scanned"] >= 3, checks
                assert _contents(restored) == want
            finally:
                restored.dispose()
        # rescaled: half the key groups, the entries of theirs
        half = KeyedStateBackend.restore(str(tmp_path / "half"), [handle2],
                                         key_group_range=KeyGroupRange(0, 63))
        try:
            got = _contents(half)
            assert 0 < len(got["v"]) < len(expected2["v"])
            assert set(got["v"]) <= set(expected2["v"])
        finally:
            half.dispose()
    finally:
        untrusted.forget_checks()


def test_ingested_puts_carry_ttl_stamps(make_backend, ingest_above):
    ingest_above(1_000)
    be = make_backend(key_type=int)
    v = be.get_state(ValueStateDescriptor("v", value_type=int, ttl=StateTtlConfig(100)))
    be.set_ttl_time(1_000)
    v.put_many(np.arange(2_000), np.arange(2_000))
    be._native_flush()
    v.put_many(np.arange(2_000), np.arange(2_000) * 3)
    assert be.metrics()["sst_files"] == 2
    be.set_ttl_time(1_099)
    got, found = v.get_many(np.arange(2_000))
    assert found.all() and got.tolist() == (np.arange(2_000) * 3).tolist()
    be.set_ttl_time(1_100)
    _, found = v.get_many(np.arange(2_000))
    assert not found.any()


def test_the_threshold_is_checked_and_set_from_the_environment(tmp_path):
    old = configure_batch_ingest()
    try:
        assert configure_batch_ingest(old) == 4096  # the default
        for bad in (-1, 1.5, "4096", True, None):
            with pytest.raises(ValueError, match="min_keys must be an int >= 0"):
                configure_batch_ingest(bad)
    finally:
        configure_batch_ingest(old)
    probe = ("import stateengine\n"
             "print(stateengine.configure_batch_ingest(7))\n")
    for value, expect in (("0", "0"), ("123", "123"), (" ", "4096")):
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             env={**os.environ, "STATEENGINE_BATCH_INGEST_MIN_KEYS": value})
        assert out.returncode == 0 and out.stdout.strip() == expect, out.stderr
    bad = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "STATEENGINE_BATCH_INGEST_MIN_KEYS": "lots"})
    assert bad.returncode != 0
    assert "STATEENGINE_BATCH_INGEST_MIN_KEYS ('lots') must be an int >= 0" in bad.stderr
