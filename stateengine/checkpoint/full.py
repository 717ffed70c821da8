"""Full snapshots in the unified savepoint layout, and restoring them at any parallelism.

Writing: the synchronous part pins a RocksDB snapshot (``NativeFullSnapshot.take``); the
asynchronous part streams meta block and key groups (csrc/snapshot_writer) into a temporary
file that is moved into place only when complete. Restoring reads only the key groups of the
target range, by their recorded offsets, from one or many snapshots.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import TYPE_CHECKING

from .. import _native
from .asynchronous import AsyncSnapshot
from .handles import FileRef, FullSnapshotHandle, OperatorStateRef
from .meta import SnapshotMeta
from .storage import CheckpointStorage

if TYPE_CHECKING:
    from ..backend import KeyedStateBackend


def snapshot_meta(backend: "KeyedStateBackend", compressed: bool) -> SnapshotMeta:
    return SnapshotMeta(backend.max_parallelism, backend.key_codecs, backend.key_is_tuple,
                        compressed, [backend.state_meta(n) for n in backend._cf_names()])


def write_operator_state(backend: "KeyedStateBackend", storage: CheckpointStorage, rel: str,
                         data: bytes | None) -> OperatorStateRef | None:
    if data is None:
        return None
    storage.write_atomic(rel, data)
    op = backend.operator_state
    return OperatorStateRef(FileRef(rel, len(data), _native.crc32c(data)), op.operator_index,
                            op.parallelism)


def take_full_snapshot(backend: "KeyedStateBackend", storage: CheckpointStorage, rel: str,
                       compress: bool = True) -> AsyncSnapshot[FullSnapshotHandle]:
    names = backend._cf_names()
    meta_bytes = snapshot_meta(backend, compress).encode()
    op_bytes = None if backend.operator_state.is_empty() else backend.operator_state.snapshot_bytes()
    columns = [(backend._cf_index[n], sid) for sid, n in enumerate(names)]
    native = _native.NativeFullSnapshot.take(backend, columns, compress)  # the sync point
    staging = os.path.join(backend._staging_dir, f"full-{uuid.uuid4().hex}")
    key_group_range, max_p = backend.key_group_range, backend.max_parallelism

    def run() -> FullSnapshotHandle:
        tmp = None
        try:
            # The writer checksums the bytes as it writes them: no second pass over the file.
            if storage.is_local:
                tmp = storage.place_local(rel)
                offsets, stats = native.write(tmp, meta_bytes)
                ref = storage.commit_local(tmp, rel, crc=stats.pop("file_crc32c"))
            else:
                tmp = staging  # a local copy to upload: the upload, not this file, is durable
                offsets, stats = native.write(tmp, meta_bytes, durable=False)
                ref = storage.upload(tmp, rel, crc=stats.pop("file_crc32c"))
            op_ref = write_operator_state(backend, storage, rel + ".opstate", op_bytes)
            return FullSnapshotHandle(storage.uri, ref, key_group_range, max_p, dict(offsets),
                                      len(meta_bytes), stats, op_ref)
        finally:
            native.release()
            if tmp is not None and os.path.exists(tmp):
                os.remove(tmp)

    return backend._track(AsyncSnapshot(run, native.cancel, release=native.release))


def restore_full(backend: "KeyedStateBackend", handles: list[FullSnapshotHandle]) -> dict:
    """Restores the backend's key groups from full snapshots; returns restore statistics.

    The sections of all handles are restored in ascending key-group order, so every column
    family receives its keys sorted: they go into SST files that are ingested at the end
    (no memtable, flush or compaction work), and nothing becomes visible unless every section
    decoded and checked.
    """
    target = backend.key_group_range
    files: list[tuple[str, bool, list[int]]] = []
    sections: list[tuple[int, int, int]] = []
    downloaded: list[str] = []
    legacy = False
    try:
        for h in handles:
            overlap = h.key_group_range.intersection(target)
            if overlap.is_empty():
                continue
            storage = CheckpointStorage(h.root)
            source = storage.describe(h.file.path)
            local = storage.open_verified(h.file, backend._staging_dir)
            if not storage.is_local:
                downloaded.append(local)
            with open(local, "rb") as f:
                head = f.read(h.meta_length)
            meta, _ = SnapshotMeta.decode(head, source)
            legacy = legacy or meta.format_version < 2  # may hold pickles (checkpoint/legacy.py)
            backend._check_restored_layout(meta.max_parallelism, meta.key_codecs,
                                           meta.key_is_tuple, source)
            cf_for_state = [backend._ensure_cf(s, source) for s in meta.states]
            index = len(files)
            files.append((local, meta.compressed, cf_for_state))
            sections.extend((index, kg, off) for kg, off in h.offsets.items()
                            if overlap.contains(kg))
        sections.sort(key=lambda s: s[1])
        sst_dir = os.path.join(backend._staging_dir, f"restore-{uuid.uuid4().hex}")
        os.makedirs(sst_dir)
        try:
            stats = _native.restore_sections(backend, files, sections, sst_dir)
        finally:
            shutil.rmtree(sst_dir, ignore_errors=True)
    finally:
        for local in downloaded:
            os.remove(local)
    stats["files"] = len(files)
    stats["legacy_format"] = legacy
    return stats
