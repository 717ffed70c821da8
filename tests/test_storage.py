"""Checkpoint storage: verification of files against their handles."""

import os

import pytest

from stateengine import CorruptionError, KeyedStateBackend, ValueStateDescriptor
from stateengine.checkpoint import storage as storage_mod


def checkpointed(tmp_path):
    b = KeyedStateBackend(tmp_path / "b")
    v = b.get_state(ValueStateDescriptor("v"))
    for k in range(500):
        b.set_current_key(k)
        v.update(k)
    handle = b.checkpoint(1, str(tmp_path / "ck")).result()
    b.close()
    return handle


def test_a_verified_file_is_not_read_again_until_it_changes(tmp_path, monkeypatch):
    handle = checkpointed(tmp_path)
    reads = []
    real = storage_mod._native.file_crc32c
    monkeypatch.setattr(storage_mod._native, "file_crc32c", lambda p: reads.append(p) or real(p))
    KeyedStateBackend.restore(tmp_path / "r1", [handle]).dispose()
    first = len(reads)
    KeyedStateBackend.restore(tmp_path / "r2", [handle]).dispose()
    assert any(p.endswith(".sst") for p in reads[:first])
    # SSTs are hard-linked, so the second restore reuses their verification; only the small
    # private files (copied, hence new inodes) are read again
    assert [p for p in reads[first:] if p.endswith(".sst")] == []

    sst = next(f for f in handle.shared)
    path = os.path.join(handle.root, sst.path)
    with open(path, "r+b") as f:  # same size, one byte flipped: the mtime changes
        f.seek(sst.size // 2)
        b = f.read(1)
        f.seek(sst.size // 2)
        f.write(bytes([b[0] ^ 0x01]))
    with pytest.raises(CorruptionError, match=os.path.basename(sst.path)):
        KeyedStateBackend.restore(tmp_path / "r3", [handle])
    assert not os.path.exists(tmp_path / "r3" / "db")  # nothing half-restored left behind


@pytest.fixture
def remote_uri(tmp_path):
    """A URI whose file system is not pyarrow's LocalFileSystem, so every upload, download and
    publish takes the path used for S3 and HDFS (streams, scratch copies, moves)."""
    import pyarrow.fs as pafs

    from stateengine.checkpoint.storage import register_filesystem

    base = tmp_path / "remote"
    base.mkdir()
    register_filesystem("setest", lambda uri: (
        pafs.SubTreeFileSystem(str(base), pafs.LocalFileSystem()), uri.split("://", 1)[1]))
    return "setest://checkpoints", base


def test_non_local_storage_round_trips_snapshots_checkpoints_and_versions(tmp_path, remote_uri):
    from stateengine import KeyGroupRange, StateStoreProvider
    from stateengine.checkpoint.storage import CheckpointStorage

    uri, base = remote_uri
    assert not CheckpointStorage(uri).is_local
    b = KeyedStateBackend(tmp_path / "b")
    v = b.get_state(ValueStateDescriptor("v"))
    for k in range(300):
        b.set_current_key(k)
        v.update(k * 3)
    full = b.snapshot(uri, "full-1").result()
    inc = b.checkpoint(1, uri).result()
    b.close()
    assert (base / "checkpoints" / "full-1").exists()
    for i, handle in enumerate([full, inc]):
        parts = [KeyedStateBackend.restore(tmp_path / f"r{i}-{p}", [handle],
                                           KeyGroupRange.for_operator(p, 2, 128)) for p in range(2)]
        seen = {}
        for r in parts:
            rv = r.get_state(ValueStateDescriptor("v"))
            for k in r.get_keys("v"):
                r.set_current_key(k)
                seen[k] = rv.value()
            r.dispose()
        assert seen == {k: k * 3 for k in range(300)}

    d = [ValueStateDescriptor("count", value_type=int, default=0)]
    version = 0
    for n in (1, 2):
        for p in range(n):
            provider = StateStoreProvider(uri, "op", p, n, local_dir=str(tmp_path / "local"),
                                          descriptors=d)
            store = provider.get_store(version)
            c = store.get_state(d[0])
            for k in range(50):
                if provider.key_group_range.contains(store.backend.key_group_of(k)):
                    store.backend.set_current_key(k)
                    c.update(c.value() + 1)
            committed = store.commit()
            provider.close()
        version = committed
    provider = StateStoreProvider(uri, "op", 0, 1, local_dir=str(tmp_path / "local"), descriptors=d)
    store = provider.get_store(version)
    store.backend.set_current_key(7)
    assert store.get_state(d[0]).value() == 2
    provider.close()


def test_non_local_storage_names_corrupted_files(tmp_path, remote_uri):
    uri, base = remote_uri
    b = KeyedStateBackend(tmp_path / "b")
    b.get_state(ValueStateDescriptor("v"))
    b.set_current_key(1)
    b.get_state(ValueStateDescriptor("v")).update("x" * 1000)
    handle = b.snapshot(uri, "snap").result()
    b.close()
    path = base / "checkpoints" / "snap"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match="setest://checkpoints/snap"):
        KeyedStateBackend.restore(tmp_path / "r", [handle])
