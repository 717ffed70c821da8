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
