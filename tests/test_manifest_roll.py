"""RocksDB's MANIFEST is rolled at 64 KiB (csrc/db.h, kMaxManifestBytes). Each flush appends an
edit to it and every checkpoint copies (and uploads) the whole file, so without the roll a
long-running job's every version would carry a MANIFEST as large as all its commits' edits."""

from __future__ import annotations

import os

from stateengine import KeyedStateBackend, ValueStateDescriptor

VALUE = ValueStateDescriptor("v", value_type=int)


def _manifest_bytes(root: str, handle) -> int:
    (manifest,) = [f for f in handle.private if f.local_name.startswith("MANIFEST-")]
    return os.path.getsize(os.path.join(root, manifest.path))


def test_checkpoints_carry_a_bounded_manifest_and_restore(tmp_path):
    root = str(tmp_path / "ckpt")
    be = KeyedStateBackend(str(tmp_path / "db"), key_type=int)
    try:
        v = be.get_state(VALUE)
        flushes = 1_500
        for i in range(flushes):  # a table per flush, merged by compaction: a few live tables
            for k in range(10):
                be.set_current_key(k)
                v.update(i * 10 + k)
            be._native_flush()
        handle = be.checkpoint(1, root).result()
    finally:
        be.dispose()
    # 1,500 flushes and their compactions append far more than 80 KiB of edits (each names
    # tables and their key ranges); the copy holds at most 64 KiB of them after a snapshot of
    # the few live tables
    assert _manifest_bytes(root, handle) < 80 << 10
    restored = KeyedStateBackend.restore(str(tmp_path / "restored"), [handle])
    try:
        got, found = restored.get_state(VALUE).get_many(list(range(10)))
        assert found.all() and got.tolist() == [(flushes - 1) * 10 + k for k in range(10)]
    finally:
        restored.dispose()
