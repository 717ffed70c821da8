"""The machine-local cache of remote checkpoints' SST files (checkpoint/file_cache.py), against
a real S3 server: a partition restored by another worker on the same machine downloads only
the files no database there holds, what comes from the cache is verified like a download,
and entries no database links any more are evicted."""

from __future__ import annotations

import os
import random

from stateengine import StateStoreProvider, ValueStateDescriptor, file_cache_stats
from stateengine.checkpoint import file_cache


def _provider(uri, local) -> StateStoreProvider:
    return StateStoreProvider(uri, "op", 0, 1, 128, key_type=int,
                              descriptors=[ValueStateDescriptor("v", value_type=int)],
                              local_dir=str(local))


def _commit(provider, version, keys, seed):
    store = provider.get_store(version)
    v = store.backend.get_state(ValueStateDescriptor("v", value_type=int))
    rng = random.Random(seed)
    for k in keys:
        store.backend.set_current_key(k)
        v.update(rng.randrange(1 << 40))
    store.backend._native_flush()  # an SST file per version
    store.commit()


def _read_all(provider, version, keys):
    store = provider.get_store(version)
    v = store.backend.get_state(ValueStateDescriptor("v", value_type=int))
    out = {}
    for k in keys:
        store.backend.set_current_key(k)
        out[k] = v.value()
    store.abort()
    return out


def _delta(before):
    now = file_cache_stats()
    return {k: now[k] - before[k] for k in now}


def test_another_worker_restores_from_the_files_this_machine_holds(s3, tmp_path):
    uri = s3.uri("cached")
    writer = _provider(uri, tmp_path / "local")  # worker A: writes versions 1..3
    for version in range(3):
        _commit(writer, version, range(version * 300, version * 300 + 400), version)
    want = _read_all(writer, 3, range(1300))
    root = file_cache.file_cache_root()
    assert root == os.path.join(str(tmp_path / "local"), "remote-files")

    before = file_cache_stats()
    reader = _provider(uri, tmp_path / "local")  # worker B, same machine, version 3
    assert _read_all(reader, 3, range(1300)) == want
    d = _delta(before)
    assert d["hits"] >= 3 and d["downloads"] == 0, d  # every SST came from A's uploads

    # a cached copy that went bad is dropped and downloaded again, never used
    entries = [os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs]
    victim = entries[0]
    os.chmod(victim, 0o644)
    with open(victim, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = file_cache_stats()
    other = _provider(uri, tmp_path / "local")
    assert _read_all(other, 3, range(1300)) == want
    d = _delta(before)
    assert d["dropped"] == 1 and d["downloads"] == 1, d


def test_entries_no_database_links_are_evicted(s3, tmp_path):
    uri = s3.uri("evicted")
    p = _provider(uri, tmp_path / "local")
    _commit(p, 0, range(200), 1)
    root = file_cache.file_cache_root()
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs]
    assert files and all(os.stat(f).st_nlink >= 2 for f in files)  # the database holds them
    assert file_cache.evict(force=True) == 0
    p._drop_backend()  # the worker lets the partition go: its database is deleted
    assert file_cache.evict(force=True) == len(files)
    assert not [f for _, _, fs in os.walk(root) for f in fs]
    # restoring again downloads what the machine no longer holds
    before = file_cache_stats()
    q = _provider(uri, tmp_path / "local")
    assert len(_read_all(q, 1, range(200))) == 200
    assert _delta(before)["downloads"] == len(files)


def test_local_checkpoints_use_no_cache(tmp_path):
    p = _provider(str(tmp_path / "ckpt"), tmp_path / "local")
    _commit(p, 0, range(50), 2)
    assert file_cache.file_cache_root() is None
