"""Scalar point calls try RocksDB's non-waiting variants with the GIL held and repeat the call
with the GIL released when RocksDB would have to read a file. Both paths must give the same
answers: after a flush, values live only in SST files, so the first reads take the slow path."""

from __future__ import annotations

import threading

from stateengine import (KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
                         ReducingStateDescriptor, ValueStateDescriptor, reducers)


def test_reads_after_flush_fall_back_to_file_reads(tmp_path):
    be = KeyedStateBackend(tmp_path / "b", key_type=int)
    try:
        v = be.get_state(ValueStateDescriptor("v", value_type=int))
        r = be.get_state(ReducingStateDescriptor("r", reducers.SUM, value_type=int))
        lst = be.get_state(ListStateDescriptor("l"))
        m = be.get_state(MapStateDescriptor("m"))
        for k in range(2000):
            be.set_current_key(k)
            v.update(k * 3)
            r.add(k)
            r.add(1)
            lst.add(str(k))
            m.put("x", k)
        be._native_flush()
        for k in range(2000):
            be.set_current_key(k)
            assert v.value() == k * 3
            assert r.get() == k + 1
            assert lst.get() == [str(k)]
            assert m.get("x") == k and m.contains("x") and not m.contains("y")
        be.set_current_key(5000)
        assert v.value() is None and r.get() is None and lst.get() == []
    finally:
        be.dispose()


def test_point_calls_from_two_threads(tmp_path):
    """Each thread has its own backend; holding the GIL on cache hits must not deadlock or
    mix up results when RocksDB's background threads flush underneath."""
    errors = []

    def work(i):
        be = KeyedStateBackend(tmp_path / f"t{i}", key_type=int)
        try:
            v = be.get_state(ValueStateDescriptor("v", value_type=int))
            for k in range(3000):
                be.set_current_key(k)
                v.update(k + i)
            be._native_flush()
            for k in range(3000):
                be.set_current_key(k)
                if v.value() != k + i:
                    errors.append((i, k))
        finally:
            be.dispose()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
