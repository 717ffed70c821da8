"""Backend metrics come from RocksDB's own figures and follow what the backend holds."""

from __future__ import annotations

import numpy as np
import pytest

from stateengine import (BackendClosedError, KeyedStateBackend, MapStateDescriptor,
                         ValueStateDescriptor)

FIELDS = {"estimated_keys", "live_sst_bytes", "sst_files", "memtable_bytes",
          "table_reader_bytes", "pending_compaction_bytes", "pinned_bytes", "states",
          "block_cache_bytes", "rows_read", "rows_written", "rows_deleted", "state_keys",
          "timers"}


def test_metrics_follow_writes_flushes_and_compaction(tmp_path, ingest_above):
    ingest_above(None)  # the batch goes through the memtable
    backend = KeyedStateBackend(tmp_path / "db", key_type=int)
    try:
        empty = backend.metrics()
        assert set(empty) == FIELDS
        assert empty["estimated_keys"] == 0 and empty["sst_files"] == 0
        state = backend.get_state(ValueStateDescriptor("v", int))
        state.put_many(np.arange(50_000), np.arange(50_000))
        written = backend.metrics()
        assert written["estimated_keys"] == 50_000
        assert written["memtable_bytes"] > 50_000 * 8
        assert written["states"] >= 1
        backend.checkpoint(1, tmp_path / "ck").result()  # flushes the memtables to SST files
        flushed = backend.metrics()
        assert flushed["sst_files"] >= 1
        assert flushed["live_sst_bytes"] > 0
        assert flushed["memtable_bytes"] < written["memtable_bytes"]
        assert flushed["estimated_keys"] == pytest.approx(50_000, rel=0.05)
    finally:
        backend.dispose()
    with pytest.raises(BackendClosedError):
        backend.metrics()


def test_row_counters_count_state_rows_not_timers_or_raw_access(tmp_path):
    backend = KeyedStateBackend(tmp_path / "db", key_type=int)
    try:
        value = backend.get_state(ValueStateDescriptor("v", int))

        def rows():
            m = backend.metrics()
            return m["rows_read"], m["rows_written"], m["rows_deleted"]

        assert rows() == (0, 0, 0)
        backend.set_current_key(1)
        value.update(5)
        assert value.value() == 5
        value.clear()
        assert value.value() is None  # a read that finds nothing is still a read
        assert rows() == (2, 1, 1)
        # batch calls count one row per element, duplicates included, None as a delete
        value.put_many(np.array([1, 2, 2, 3]), np.array([1, 2, 3, 4]))
        value.get_many(np.array([1, 2, 3, 4, 5]))
        assert rows() == (7, 5, 1)
        # timers and raw access are not state rows
        backend.set_current_key(9)
        backend.timer_service.register_event_time_timer(100)
        backend.timer_service.delete_event_time_timer(100)
        backend._raw_put(0, b"raw-key", b"raw-value")
        backend._raw_get(0, b"raw-key")
        assert rows() == (7, 5, 1)
        # iterating a map state reads a row per entry it yields
        m = backend.get_state(MapStateDescriptor("m", user_key_type=str, value_type=int))
        backend.set_current_key(3)
        m.put_all({"a": 1, "b": 2, "c": 3})
        assert sorted(m.keys()) == ["a", "b", "c"]
        assert rows() == (10, 8, 1)
        assert backend.metrics()["block_cache_bytes"] > 0  # memtables are charged to the cache
    finally:
        backend.dispose()
