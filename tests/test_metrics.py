"""Backend metrics come from RocksDB's own figures and follow what the backend holds."""

from __future__ import annotations

import numpy as np
import pytest

from stateengine import BackendClosedError, KeyedStateBackend, ValueStateDescriptor

FIELDS = {"estimated_keys", "live_sst_bytes", "sst_files", "memtable_bytes",
          "table_reader_bytes", "pending_compaction_bytes", "pinned_bytes", "states"}


def test_metrics_follow_writes_flushes_and_compaction(tmp_path):
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
