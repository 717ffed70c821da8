"""The thread model: closing a backend while other threads use it never crashes.

Calls that run inside RocksDB without the GIL finish before close() closes RocksDB; calls
that start afterwards, and open iterators at their next step, raise BackendClosedError; a
snapshot or checkpoint running at close() raises SnapshotCancelledError. The campaign in
tests/campaigns/threads.py races close() against every kind of call; here it runs small, in a
child process so that a crash is a failure and not the end of the test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from stateengine import (BackendClosedError, KeyedStateBackend, MapStateDescriptor,
                         SortedMapStateDescriptor, ValueStateDescriptor)
from stateengine.errors import SnapshotCancelledError

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_thread_abuse_campaign_small():
    proc = subprocess.run(
        [sys.executable, "-m", "tests.campaigns.threads", "--iterations", "24", "--json"],
        cwd=PROJECT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": PROJECT})
    assert proc.returncode in (0, 1), (
        f"the campaign process died (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["unexpected"] == 0, "\n".join(summary["unexpected_samples"])
    assert proc.returncode == 0
    outcomes = summary["outcomes"]
    assert outcomes.get("ok", 0) > 0 and outcomes.get("BackendClosedError", 0) > 0, outcomes
    assert summary["by_operation"]["close"] == {"ok": 24}


@pytest.fixture
def filled(tmp_path):
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    v = b.get_state(ValueStateDescriptor("v", int))
    m = b.get_state(MapStateDescriptor("m", int, int))
    keys = np.arange(5000, dtype=np.int64)
    v.put_many(keys, keys)
    b.set_current_key(1)
    m.put_all({i: i for i in range(3000)})
    yield b, v, m
    b.close()


def test_iterators_open_at_close_raise_at_their_next_step(filled):
    b, v, m = filled
    keys_it, entries_it = b.get_keys("v"), m.entries()
    assert next(keys_it) is not None and next(entries_it) == (0, 0)
    b.close()
    for it in (keys_it, entries_it):
        with pytest.raises(BackendClosedError):
            next(it)
    with pytest.raises(BackendClosedError):
        m.keys()
    with pytest.raises(BackendClosedError):
        v.get_many([1, 2])


def test_close_waits_for_a_batch_call_running_on_another_thread(filled):
    b, v, _ = filled
    big = np.arange(400_000, dtype=np.int64)
    started, result = threading.Event(), {}

    def write():
        started.set()
        try:
            v.put_many(big, big)
            result["outcome"] = "ok"
        except BackendClosedError:
            result["outcome"] = "closed"

    t = threading.Thread(target=write)
    t.start()
    started.wait()
    b.close()
    t.join()
    # Either the batch got in before close() (and completed, since close waited for it) or it
    # was refused as a whole; never a crash, never half a batch.
    assert result["outcome"] in ("ok", "closed")


def test_a_second_close_returns_once_the_backend_is_closed(filled):
    b, _, m = filled
    it = m.entries()
    next(it)
    closers = [threading.Thread(target=b.close) for _ in range(4)]
    for t in closers:
        t.start()
    for t in closers:
        t.join()
    assert b.closed
    with pytest.raises(BackendClosedError):
        next(it)


def test_a_snapshot_taken_before_close_and_written_after_is_cancelled(filled, tmp_path):
    b, _, _ = filled
    from stateengine import _native
    native = _native.NativeFullSnapshot.take(b, [(0, 0)], True)
    b.close()  # frees the iterators the snapshot pinned
    with pytest.raises(SnapshotCancelledError, match="closed"):
        native.write(str(tmp_path / "late"), b"meta")
    native.release()
    assert not (tmp_path / "late").exists()


def test_states_registered_while_other_threads_read(tmp_path):
    """Column families are created while batch calls on other threads index theirs."""
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    v = b.get_state(ValueStateDescriptor("v", int))
    keys = np.arange(2000, dtype=np.int64)
    v.put_many(keys, keys)
    stop, errors = threading.Event(), []

    def read():
        try:
            while not stop.is_set():
                values, found = v.get_many(keys)
                assert found.all() and (values == keys).all()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    handles = [b.get_state(SortedMapStateDescriptor(f"s{i}", int, int)) for i in range(24)]
    stop.set()
    for t in readers:
        t.join()
    assert not errors
    b.set_current_key(7)
    handles[-1].put(1, 2)
    assert handles[-1].get(1) == 2
    b.close()
