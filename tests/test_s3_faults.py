"""Object-store faults, injected by a proxy (tests/s3_proxy.py) between the checkpoint storage
and the S3 server: 500/503 answers for a while, the server stopped in the middle of an upload,
a download cut short, an upload the server stored truncated.

Each must leave the last committed version restorable and the next commit correct once the
store is healthy again; retries are bounded (STATEENGINE_STORAGE_ATTEMPTS), logged on the
``stateengine.storage`` logger and counted in the store's metrics (``storage_retries`` for a
commit, ``load_retries`` for a load).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

import numpy as np
import pytest

from stateengine import (StateStoreProvider, StorageError, ValueStateDescriptor,
                         configure_file_cache, transfer_threads)
from stateengine.checkpoint.storage import CheckpointStorage
from stateengine.checkpoint.versions import VersionCatalog
from stateengine.keygroups import KeyGroupRange

VALUE = ValueStateDescriptor("value", value_type=bytes)
KEYS = np.arange(20_000, dtype=np.int64)  # about 2 MB of SST: uploads take several reads


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setenv("STATEENGINE_STORAGE_RETRY_DELAY", "0.02")
    monkeypatch.setenv("STATEENGINE_STORAGE_ATTEMPTS", "8")


def values(version: int, keys=KEYS) -> list[bytes]:
    rng = np.random.default_rng(version)
    noise = rng.integers(0, 256, (len(keys), 92), dtype=np.uint8)
    return [int(k).to_bytes(8, "big") + bytes(row) for k, row in zip(keys, noise)]


def provider(uri, tmp_path, name="local") -> StateStoreProvider:
    return StateStoreProvider(uri, "op", 0, 1, key_type=int, descriptors=[VALUE],
                              local_dir=str(tmp_path / name))


def commit_version(prov: StateStoreProvider, version: int) -> dict:
    """Loads version - 1, rewrites every tenth key, commits version; returns the metrics."""
    store = prov.get_store(version - 1)
    keys = KEYS if version == 1 else KEYS[::10]
    store.get_state(VALUE).put_many(keys, values(version, keys))
    assert store.commit() == version
    return store.metrics


def expected(version: int) -> dict[int, bytes]:
    out = dict(zip(KEYS.tolist(), values(1)))
    for v in range(2, version + 1):
        out.update(zip(KEYS[::10].tolist(), values(v, KEYS[::10])))
    return out


def assert_restores(uri, tmp_path, version: int, name: str) -> dict:
    """A fresh provider (another worker) restores ``version`` and finds exactly its state."""
    with provider(uri, tmp_path, name) as prov:
        assert prov.latest_version() == version
        store = prov.get_store(version)
        got, found = store.get_state(VALUE).get_many(KEYS)
        assert found.all()
        want = expected(version)
        assert [bytes(g) for g in got] == [want[k] for k in KEYS.tolist()]
        store.abort()
        return prov.last_load


def retry_logs(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "stateengine.storage" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("status", [500, 503])
def test_error_answers_for_a_while_are_retried_and_reported(s3, s3_proxy, tmp_path, caplog,
                                                            status):
    uri = s3.uri("errors", endpoint=s3_proxy.endpoint)
    with provider(uri, tmp_path) as prov:
        commit_version(prov, 1)
        s3_proxy.fail(status, times=3)
        caplog.set_level(logging.WARNING, logger="stateengine.storage")
        metrics = commit_version(prov, 2)
    assert metrics["storage_retries"] == 3
    assert [e.status for e in s3_proxy.snapshot() if e.fault] == [status] * 3
    logged = retry_logs(caplog)
    assert len(logged) == 3 and all("retrying in" in m for m in logged)
    assert ("SLOW_DOWN" if status == 503 else "INTERNAL_FAILURE") in logged[0]
    assert_restores(uri, tmp_path, 2, "check")


def test_failures_beyond_the_bound_fail_the_commit_and_keep_the_last_version(
        s3, s3_proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("STATEENGINE_STORAGE_ATTEMPTS", "3")
    uri = s3.uri("bound", endpoint=s3_proxy.endpoint)
    with provider(uri, tmp_path) as prov:
        commit_version(prov, 1)
        s3_proxy.reset_counts()
        s3_proxy.fail(503, seconds=60)
        with pytest.raises(StorageError, match="failed 3 times, giving up"):
            commit_version(prov, 2)
        # each upload in flight (up to transfer_threads() at once) tried three times, no
        # more, and none started after they failed
        tried = Counter(e.path for e in s3_proxy.snapshot())
        assert set(tried.values()) == {3} and 1 <= len(tried) <= transfer_threads(), tried
        s3_proxy.clear_faults()
        assert_restores(uri, tmp_path, 1, "after-failure")
        commit_version(prov, 2)  # the store is healthy again: the same commit succeeds
    assert_restores(uri, tmp_path, 2, "after-recovery")


@pytest.mark.parametrize("downtime", [0.3, None], ids=["back-within-the-retries", "back-later"])
def test_server_stopped_in_the_middle_of_an_upload(s3, s3_proxy, tmp_path, monkeypatch,
                                                   downtime):
    uri = s3.uri("stopped", endpoint=s3_proxy.endpoint)
    if downtime is None:
        monkeypatch.setenv("STATEENGINE_STORAGE_ATTEMPTS", "3")
    with provider(uri, tmp_path) as prov:
        commit_version(prov, 1)
        # the first SST of version 2 is large: the server goes away after 64 KiB of it
        s3_proxy.stop_during_upload(64 << 10, path="/shared/", downtime=downtime)
        if downtime is not None:
            metrics = commit_version(prov, 2)
            assert metrics["storage_retries"] >= 1
        else:
            with pytest.raises(StorageError, match="giving up"):
                commit_version(prov, 2)
            s3_proxy.up()
            assert_restores(uri, tmp_path, 1, "while-broken")
            commit_version(prov, 2)
    assert [e.fault for e in s3_proxy.snapshot() if e.fault] == ["stop"]
    assert_restores(uri, tmp_path, 2, "recovered")


def test_a_download_cut_short_is_retried_not_used(s3, s3_proxy, tmp_path):
    uri = s3.uri("cut", endpoint=s3_proxy.endpoint)
    with provider(uri, tmp_path) as prov:
        commit_version(prov, 1)
        commit_version(prov, 2)
    s3_proxy.cut_download(4096, path="/shared/")
    configure_file_cache(None)  # the reader runs on another machine: it must download
    load = assert_restores(uri, tmp_path, 2, "reader")
    assert load["retries"] == 1
    assert [e.fault for e in s3_proxy.snapshot() if e.fault] == ["cut"]


def test_an_upload_stored_truncated_is_uploaded_again_before_the_version_is_published(
        s3, s3_proxy, tmp_path):
    """The server answers 200 but keeps only the first 1000 bytes of an SST (a store that
    checks neither length nor checksum): the commit sees the stored size differ from the
    file's and uploads it again, so the published version never names a truncated object."""
    uri = s3.uri("truncated", endpoint=s3_proxy.endpoint)
    with provider(uri, tmp_path) as prov:
        commit_version(prov, 1)
        s3_proxy.truncate_upload(1000, path="/shared/")
        metrics = commit_version(prov, 2)
    assert_restores(uri, tmp_path, 2, "check")
    assert metrics["storage_retries"] == 1
    assert [e.fault for e in s3_proxy.snapshot() if e.fault] == ["truncate"]


def test_a_reader_never_sees_a_version_before_all_its_files(s3, s3_proxy, tmp_path):
    """Uploads are slowed down so each commit takes a while; a reader polls the versions and
    checks, straight at the server, that every file a visible version names is there whole.
    (The manifest is the one object that publishes a version and it is written last.)"""
    uri = s3.uri("visible", endpoint=s3_proxy.endpoint)
    storage = CheckpointStorage(s3.uri("visible"))  # the reader goes straight to the server
    catalog = VersionCatalog(storage, "op")
    s3_proxy.delay(0.05, method="PUT")
    done = threading.Event()
    checked, problems = [], []

    def scan():
        for v in catalog.versions():
            if v in checked:
                continue
            for handle in catalog.handles_for(v, KeyGroupRange.all(128)):
                for ref in handle.files():
                    info = s3.fs.get_file_info(s3.path(f"visible/{ref.path}"))
                    if info.size != ref.size:
                        problems.append((v, ref.path, info.size, ref.size))
            checked.append(v)

    def reader():
        try:
            while True:
                last = done.is_set()
                scan()
                if last:
                    return
                done.wait(0.01)
        except BaseException as e:  # reported by the test
            problems.append(e)

    t = threading.Thread(target=reader)
    t.start()
    try:
        with provider(uri, tmp_path) as prov:
            for version in (1, 2, 3):
                commit_version(prov, version)
    finally:
        done.set()
        t.join()
    assert checked == [1, 2, 3]
    assert not problems, problems
