"""The backend's reading interface for state readers, the CLI and deleteIfExists: stored
entries in key order a chunk at a time, their keys parsed, and a whole state deleted."""

from __future__ import annotations

import pytest

from stateengine import KeyedStateBackend, MapStateDescriptor, ValueStateDescriptor
from stateengine.errors import UnknownStateError


def test_stored_entries_come_in_bounded_chunks_in_key_order(tmp_path):
    be = KeyedStateBackend(tmp_path / "b", key_type=int)
    try:
        v = be.get_state(ValueStateDescriptor("v", value_type=int))
        m = be.get_state(MapStateDescriptor("m", user_key_type=str, value_type=int))
        for k in range(1000):
            be.set_current_key(k)
            v.update(k * 2)
            m.put("a", k)
            m.put("b", -k)
        chunks = list(be.stored_entries("v", chunk=64))
        assert [len(c) for c in chunks] == [64] * 15 + [40]
        raw_keys = [key for c in chunks for key, _ in c]
        assert raw_keys == sorted(raw_keys) and len(set(raw_keys)) == 1000
        meta = be.state_meta("v")
        parsed = [be.parse_state_key(key, meta["namespace_codec"], False) for key in raw_keys]
        assert sorted(key for _, key, _, _ in parsed) == list(range(1000))
        # map entries: one per user key, the user key's bytes after the namespace
        entries = [e for c in be.stored_entries("m", chunk=7) for e in c]
        assert len(entries) == 2000
        meta = be.state_meta("m")
        user_keys = {be.parse_state_key(key, meta["namespace_codec"], True)[3] for key, _ in entries}
        assert len(user_keys) == 2
        with pytest.raises(UnknownStateError, match="no state named 'nope'"):
            list(be.stored_entries("nope"))
    finally:
        be.dispose()


def test_delete_all_entries_empties_one_state_only(tmp_path):
    be = KeyedStateBackend(tmp_path / "b", key_type=int)
    try:
        v = be.get_state(ValueStateDescriptor("v", value_type=int))
        w = be.get_state(ValueStateDescriptor("w", value_type=int))
        for k in range(300):
            be.set_current_key(k)
            v.update(k)
            w.update(k)
        be.delete_all_entries("v")
        assert list(be.stored_entries("v")) == []
        be.set_current_key(7)
        assert v.value() is None and w.value() == 7
        assert be.num_state_entries("w") == 300
        with pytest.raises(UnknownStateError):
            be.delete_all_entries("nope")
    finally:
        be.dispose()
