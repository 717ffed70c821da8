"""Snapshots taken while the backend keeps changing.

A snapshot's synchronous part (``snapshot()`` / ``checkpoint()`` returning) fixes its content:
it must hold exactly the state at that moment, although writes keep going on another thread
while the asynchronous part encodes and writes the file. ``cancel()`` stops a running snapshot:
``result()`` raises SnapshotCancelledError and no partial file stays behind.
"""

from __future__ import annotations

import copy
import os
import random
import subprocess
import sys
import threading
import time

import pytest

from tests.ckpt_model import Harness, assert_backend_matches, new_backend, random_ops
from stateengine import KeyedStateBackend, MapStateDescriptor
from stateengine.errors import SnapshotCancelledError

BALLAST = MapStateDescriptor("ballast", int, bytes)
BALLAST_KEYS = 600
BALLAST_PER_KEY = 1000  # 600k entries, ~70 MB of keys and values: the async part takes a while


def _fill_ballast(backend, keys=BALLAST_KEYS, per_key=BALLAST_PER_KEY):
    m = backend.get_state(BALLAST)
    rng = random.Random(1)
    chunk = [rng.randbytes(100) for _ in range(64)]
    for k in range(keys):
        backend.set_current_key(10_000 + k)
        m.put_all({i: chunk[(i * 7 + k) % 64] for i in range(per_key)})


def _check_ballast(backend, keys=BALLAST_KEYS, per_key=BALLAST_PER_KEY):
    assert backend.num_state_entries("ballast") == keys * per_key


def _restore(tmp_path, handle):
    return KeyedStateBackend.restore(str(tmp_path / f"restored-{time.monotonic_ns()}"), [handle])


def _files_under(path):
    out = []
    for dirpath, _dirs, files in os.walk(path):
        out.extend(os.path.relpath(os.path.join(dirpath, f), path) for f in files)
    return sorted(out)


@pytest.fixture
def loaded(tmp_path):
    harness = Harness(new_backend(str(tmp_path), key_type=int))
    _fill_ballast(harness.backend)
    yield harness
    harness.backend.dispose()


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_snapshot_taken_by_the_writing_thread_holds_exactly_the_sync_point(loaded, tmp_path, kind):
    """As in a Flink task: the thread that processes records takes the snapshot's sync part and
    goes on processing while the async part runs on the snapshot pool."""
    harness, keys = loaded, list(range(200))
    rng = random.Random(5)
    ops = random_ops(rng, keys, 30_000)
    sync_at = 8_000
    box: dict = {}

    def writer():
        snap = None
        for i, op in enumerate(ops):
            harness.apply(op)
            if i == sync_at:
                if kind == "full":
                    snap = harness.backend.snapshot(tmp_path / "cp", "savepoint")
                else:
                    snap = harness.backend.checkpoint(1, tmp_path / "cp")
                box["model"] = copy.deepcopy(harness.model)
                box["snap"] = snap
                box["during"] = 0
            elif snap is not None and not snap.done():
                box["during"] += 1  # this write completed while the async part was running
            if snap is not None and snap.done() and i > sync_at + 2000:
                break
        box["model_end"] = copy.deepcopy(harness.model)

    t = threading.Thread(target=writer)
    t.start()
    t.join(120)
    assert not t.is_alive()
    handle = box["snap"].result()
    assert box["during"] > 0, "the backend did not take writes while the async part ran"
    restored = _restore(tmp_path, handle)
    _check_ballast(restored)
    assert_backend_matches(restored, box["model"])
    restored.dispose()
    assert_backend_matches(harness.backend, box["model_end"])


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_snapshot_from_another_thread_while_a_writer_runs(loaded, tmp_path, kind):
    """A writer thread keeps bumping per-key counters (and recording how far it got); the main
    thread takes the snapshot between two of its writes, so it knows the exact counters."""
    backend = loaded.backend
    counter = backend.get_state(MapStateDescriptor("counters", int, int))
    lock = threading.Lock()
    counts = [0] * 300
    log: list[int] = []
    stop = threading.Event()
    status = {"during": 0, "snap": None}

    def writer():
        rng = random.Random(9)
        while not stop.is_set():
            key = rng.randrange(300)
            with lock:
                backend.set_current_key(key)
                counter.put(0, (counter.get(0) or 0) + 1)
                counts[key] += 1
                log.append(key)
                snap = status["snap"]
                if snap is not None and not snap.done():
                    status["during"] += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.2)
        with lock:  # between two writes of the writer
            if kind == "full":
                snap = backend.snapshot(tmp_path / "cp", "savepoint")
            else:
                snap = backend.checkpoint(1, tmp_path / "cp")
            expected = list(counts)
            sync_seq = len(log)
            status["snap"] = snap
        handle = snap.result(60)
        deadline = time.monotonic() + 5
        while len(log) < sync_seq + 100 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        t.join(30)
    assert sync_seq > 0 and len(log) > sync_seq + 100, "the writer made no progress"
    assert status["during"] > 0, "no write completed while the async part was running"
    restored = _restore(tmp_path, handle)
    c = restored.get_state(MapStateDescriptor("counters", int, int))
    got = [0] * 300
    for key in restored.get_keys("counters"):
        restored.set_current_key(key)
        got[key] = c.get(0)
    assert got == expected
    assert sum(got) == sync_seq
    _check_ballast(restored)
    restored.dispose()


def test_two_overlapping_snapshots_each_hold_their_own_sync_point(loaded, tmp_path):
    harness = loaded
    rng = random.Random(3)
    keys = list(range(100))
    for op in random_ops(rng, keys, 3000):
        harness.apply(op)
    first = harness.backend.snapshot(tmp_path / "cp", "first", compress=False)
    model_first = copy.deepcopy(harness.model)
    for op in random_ops(rng, keys, 3000):
        harness.apply(op)
    second = harness.backend.checkpoint(1, tmp_path / "cp")
    model_second = copy.deepcopy(harness.model)
    for op in random_ops(rng, keys, 1000):
        harness.apply(op)
    for snap, model in ((first, model_first), (second, model_second)):
        restored = _restore(tmp_path, snap.result())
        assert_backend_matches(restored, model)
        restored.dispose()


def _wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.001)
    return False


@pytest.mark.parametrize("compress", [True, False])
def test_cancel_a_running_full_snapshot(loaded, tmp_path, compress):
    backend = loaded.backend
    target = tmp_path / "cp"
    snap = backend.snapshot(target, "savepoint", compress=compress)
    # the async part is running once its temporary file exists
    assert _wait_for(lambda: os.path.isdir(target) and any(
        f.startswith("savepoint") for f in os.listdir(target))), "the snapshot never started"
    assert not snap.done(), "the snapshot finished before it was cancelled: more ballast"
    snap.cancel()
    with pytest.raises(SnapshotCancelledError):
        snap.result(60)
    assert snap.done()
    assert _files_under(target) == [], "a cancelled snapshot left files behind"
    assert _files_under(backend._staging_dir) == []
    # the backend is unharmed: it takes writes and the next snapshot is complete
    loaded.apply(("value_update", 1, None, "after cancel"))
    handle = backend.snapshot(target, "savepoint").result()
    assert _files_under(target) == ["savepoint", "savepoint.handle.json"]
    restored = _restore(tmp_path, handle)
    _check_ballast(restored)
    assert_backend_matches(restored, loaded.model)
    restored.dispose()


def test_close_cancels_a_running_snapshot(tmp_path):
    backend = new_backend(str(tmp_path), key_type=int)
    _fill_ballast(backend)
    target = tmp_path / "cp"
    snap = backend.snapshot(target, "savepoint", compress=False)
    assert _wait_for(lambda: os.path.isdir(target) and os.listdir(target))
    backend.close()
    with pytest.raises(SnapshotCancelledError):
        snap.result(60)
    assert _files_under(target) == []
    backend.dispose()


def test_cancel_a_running_incremental_checkpoint(loaded, tmp_path, monkeypatch):
    from stateengine.checkpoint.storage import CheckpointStorage

    backend = loaded.backend
    loaded.apply(("value_update", 1, None, 1))
    started, release = threading.Event(), threading.Event()
    real_upload = CheckpointStorage.upload

    def slow_upload(self, local_file, rel, local_name="", **options):
        ref = real_upload(self, local_file, rel, local_name, **options)
        started.set()
        release.wait(30)
        return ref

    monkeypatch.setattr(CheckpointStorage, "upload", slow_upload)
    snap = backend.checkpoint(1, tmp_path / "cp", manifest_path="manifest.json")
    assert started.wait(30)
    snap.cancel()
    release.set()
    with pytest.raises(SnapshotCancelledError):
        snap.result(60)
    assert not (tmp_path / "cp" / "manifest.json").exists()
    assert os.listdir(backend._checkpoint_dir) == [], "the local checkpoint was not removed"
    monkeypatch.undo()
    handle = backend.checkpoint(2, tmp_path / "cp", manifest_path="manifest.json").result()
    restored = _restore(tmp_path, handle)
    _check_ballast(restored)
    restored.dispose()


def test_cancel_before_the_async_part_starts_then_close(tmp_path):
    """Both pool threads are busy, so the snapshots are still queued when cancelled: nothing of
    their sync part may stay pinned (close() used to fail and the process to crash)."""
    script = f"""
import os, sys, threading
sys.path.insert(0, {os.path.dirname(__file__)!r})
from stateengine.checkpoint import asynchronous
from stateengine.errors import SnapshotCancelledError
from tests.ckpt_model import Harness, new_backend
h = Harness(new_backend({str(tmp_path)!r}, key_type=int))
h.apply(("value_update", 1, None, 1))
b = h.backend
gate = threading.Event()
blockers = [asynchronous._executor().submit(gate.wait) for _ in range(2)]
full = b.snapshot({str(tmp_path / 'cp')!r}, "queued")
inc = b.checkpoint(1, {str(tmp_path / 'cp')!r})
try:
    for s in (full, inc):
        s.cancel()
        try:
            s.result()
            sys.exit("a cancelled snapshot returned a result")
        except SnapshotCancelledError:
            pass
finally:
    gate.set()
b.close()
assert os.listdir(b._checkpoint_dir) == [], os.listdir(b._checkpoint_dir)
del full, inc
import gc; gc.collect()
print("OK")
"""
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        project, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", \
        f"rc={proc.returncode}\nstdout={proc.stdout}\nstderr={proc.stderr[-3000:]}"
    assert not (tmp_path / "cp" / "queued").exists()



def test_a_deferred_snapshot_runs_in_the_thread_that_waits_for_it():
    """deferred=True (a store's commit): the asynchronous part runs once, in the thread that
    first asks for the result, and its error reaches that caller; cancelled before anyone
    asked, it never runs and its release frees what the synchronous part held."""
    import threading

    from stateengine.checkpoint.asynchronous import AsyncSnapshot
    from stateengine.errors import SnapshotCancelledError

    ran, released = [], []
    snap = AsyncSnapshot(lambda: ran.append(threading.current_thread()) or len(ran),
                         lambda: None, release=lambda: released.append(1), deferred=True)
    assert not ran and not snap.done()
    assert snap.result() == 1 and snap.result() == 1
    assert ran == [threading.current_thread()] and snap.done() and not released

    def fail():
        raise OSError("disk full")
    failing = AsyncSnapshot(fail, lambda: None, deferred=True)
    with pytest.raises(OSError, match="disk full"):
        failing.result()
    assert isinstance(failing.exception(), OSError)

    never = AsyncSnapshot(lambda: ran.append("late"), lambda: None,
                          release=lambda: released.append(1), deferred=True)
    never.cancel()
    with pytest.raises(SnapshotCancelledError):
        never.result()
    assert released == [1] and "late" not in ran
