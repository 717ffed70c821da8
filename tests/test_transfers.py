"""Concurrent file transfers (stateengine/checkpoint/transfers.py): a commit to object storage
uploads its new files several at once and a restore downloads them several at once, seen at
a proxy in front of a real S3 server as requests whose times overlap; one thread moves one
file after another. Failures wait for every call started and raise the first in order."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from stateengine import (StateStoreProvider, ValueStateDescriptor, configure_file_cache,
                         set_transfer_threads, transfer_threads)
from stateengine.checkpoint.transfers import transfer_each

VALUE = ValueStateDescriptor("value", value_type=bytes)
KEYS = np.arange(30_000, dtype=np.int64)


@pytest.fixture
def threads():
    """Restores the process's transfer threads after the test."""
    previous = transfer_threads()
    yield set_transfer_threads
    set_transfer_threads(previous)


def _values(seed: int, keys: np.ndarray) -> list[bytes]:
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, (len(keys), 64), dtype=np.uint8)
    return [int(k).to_bytes(8, "big") + bytes(row) for k, row in zip(keys, noise)]


def _overlapping(exchanges) -> int:
    """Pairs of requests that were in flight at the same time."""
    spans = sorted((e.started, e.ended) for e in exchanges)
    return sum(1 for i, (_, end) in enumerate(spans) for start, _ in spans[i + 1:] if start < end)


@pytest.fixture(autouse=True)
def _batches_become_tables(ingest_above):
    ingest_above(1_000)


def _commit_files(s3, s3_proxy, tmp_path, name: str):
    """Commits two versions whose files are several SSTs (three ingested batches each) to S3 behind
    the proxy; returns the uri, the PUTs of the last commit and the state it holds."""
    uri = s3.uri(name, endpoint=s3_proxy.endpoint)
    prov = StateStoreProvider(uri, "op", 0, 1, key_type=int, descriptors=[VALUE],
                              local_dir=str(tmp_path / f"{name}-writer"))
    want: dict[int, bytes] = {}
    version = 0
    for v in (1, 2):
        store = prov.get_store(version)
        state = store.get_state(VALUE)
        for part in np.array_split(KEYS[v - 1::2], 3):  # a table file each (ingest_above)
            vals = _values(v * 10 + int(part[0]), part)
            state.put_many(part, vals)
            want.update(zip(part.tolist(), vals))
        s3_proxy.reset_counts()
        version = store.commit()
        puts = [e for e in s3_proxy.snapshot() if e.method == "PUT"]
    prov.close()
    return uri, version, puts, want


def _restore_elsewhere(uri: str, version: int, tmp_path, name: str, s3_proxy, want):
    configure_file_cache(None)  # another machine: nothing to link, every file downloaded
    with StateStoreProvider(uri, "op", 0, 1, key_type=int, descriptors=[VALUE],
                            local_dir=str(tmp_path / f"{name}-reader")) as prov:
        s3_proxy.reset_counts()
        store = prov.get_store(version)
        gets = [e for e in s3_proxy.snapshot() if e.method == "GET" and ".sst" in e.path]
        got, found = store.get_state(VALUE).get_many(KEYS)
        assert found.all()
        assert [bytes(g) for g in got] == [want[k] for k in KEYS.tolist()]
        store.abort()
    return gets


def test_a_commit_uploads_and_a_restore_downloads_several_files_at_once(
        s3, s3_proxy, tmp_path, threads):
    threads(4)
    s3_proxy.delay(0.15, method="PUT")
    s3_proxy.delay(0.15, method="GET")
    uri, version, puts, want = _commit_files(s3, s3_proxy, tmp_path, "four")
    # three new tables and MANIFEST, CURRENT, OPTIONS, then the manifest
    assert len(puts) >= 6
    assert _overlapping(puts) >= 3, [(e.path, e.started, e.ended) for e in puts]
    gets = _restore_elsewhere(uri, version, tmp_path, "four", s3_proxy, want)
    assert len(gets) >= 4
    assert _overlapping(gets) >= 3


def test_one_thread_moves_one_file_after_another(s3, s3_proxy, tmp_path, threads):
    threads(1)
    s3_proxy.delay(0.05, method="PUT")
    s3_proxy.delay(0.05, method="GET")
    uri, version, puts, want = _commit_files(s3, s3_proxy, tmp_path, "one")
    assert len(puts) >= 6 and _overlapping(puts) == 0
    gets = _restore_elsewhere(uri, version, tmp_path, "one", s3_proxy, want)
    assert len(gets) >= 4 and _overlapping(gets) == 0


def test_a_failed_upload_fails_the_commit_and_keeps_the_last_version(
        s3, s3_proxy, tmp_path, threads, monkeypatch):
    monkeypatch.setenv("STATEENGINE_STORAGE_ATTEMPTS", "2")
    monkeypatch.setenv("STATEENGINE_STORAGE_RETRY_DELAY", "0.01")
    threads(4)
    uri, version, _, want = _commit_files(s3, s3_proxy, tmp_path, "fail")
    with StateStoreProvider(uri, "op", 0, 1, key_type=int, descriptors=[VALUE],
                            local_dir=str(tmp_path / "fail-again")) as prov:
        store = prov.get_store(version)
        store.get_state(VALUE).put_many(KEYS[:100], [b"x"] * 100)
        s3_proxy.fail(500, method="PUT", path="/OPTIONS-", times=None)
        with pytest.raises(Exception, match="OPTIONS"):
            store.commit()
        s3_proxy.clear_faults()
        assert prov.latest_version() == version
    _restore_elsewhere(uri, version, tmp_path, "fail", s3_proxy, want)


def test_transfer_each_keeps_order_waits_for_every_call_and_raises_the_first_error(threads):
    threads(4)
    assert transfer_each(lambda i: i * i, list(range(10)), remote=True) == \
        [i * i for i in range(10)]
    finished: list[int] = []

    def slow_or_failing(i: int) -> int:
        if i == 0:
            time.sleep(0.2)
            finished.append(i)
            return i
        raise ValueError(f"item {i}")

    with pytest.raises(ValueError, match="item 1"):
        transfer_each(slow_or_failing, [0, 1, 2], remote=True)
    assert finished == [0]  # the call in flight finished before the error was raised

    started: list[int] = []

    def first_fails(i: int) -> int:
        started.append(i)
        raise ValueError(f"item {i}")

    with pytest.raises(ValueError, match="item 0"):
        transfer_each(first_fails, [0, 1, 2], remote=False)
    assert started == [0]  # local storage: one after another, none after a failure


def test_transfer_each_runs_calls_at_once_only_on_remote_storage(threads):
    threads(3)
    running, peak, lock = [0], [0], threading.Lock()

    def track(_: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    transfer_each(track, list(range(9)), remote=True)
    assert peak[0] == 3
    peak[0] = 0
    transfer_each(track, list(range(4)), remote=False)
    assert peak[0] == 1


@pytest.mark.parametrize("bad", [0, -1, 65, True, 2.0, "4", None])
def test_bad_thread_counts_are_refused(bad, threads):
    threads(5)
    with pytest.raises(ValueError, match="transfer threads must be an int from 1 to 64"):
        set_transfer_threads(bad)
    assert transfer_threads() == 5  # unchanged


def test_the_environment_sets_the_threads_and_a_bad_value_is_named():
    env = dict(os.environ, STATEENGINE_TRANSFER_THREADS="7")
    code = "import stateengine; print(stateengine.transfer_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "7", out.stderr
    env["STATEENGINE_TRANSFER_THREADS"] = "many"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "$STATEENGINE_TRANSFER_THREADS ('many') must be an int from 1 to 64" in out.stderr
