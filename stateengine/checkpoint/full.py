"""Full snapshots in the unified savepoint layout, and restoring them at any parallelism.

Writing: the synchronous part pins a RocksDB snapshot (``NativeFullSnapshot.take``); the
asynchronous part streams meta block and key groups (csrc/snapshot_writer) into a temporary
file that is moved into place only when complete, then publishes the handle beside it
(``<name>.handle.json``, sealed: it holds the key-group offsets), so the snapshot directory
alone is enough to restore, wherever it is copied. Restoring reads only the key groups of the
target range, by their recorded offsets, from one or many snapshots.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from typing import Callable

from .. import _native
from ..errors import CorruptionError
from .asynchronous import AsyncSnapshot
from .handles import HANDLE_SUFFIX, FileRef, FullSnapshotHandle, OperatorStateRef, write_handle
from .interface import RestoreTarget, SnapshotSource
from .meta import SnapshotMeta
from .storage import CheckpointStorage, file_sha256


def snapshot_meta(backend: SnapshotSource, compressed: bool) -> SnapshotMeta:
    return SnapshotMeta(backend.max_parallelism, backend.key_codecs, backend.key_is_tuple,
                        compressed, [backend.state_meta(n) for n, _ in backend.column_families()])


def with_digest(ref: FileRef, local_path: str, hmac_key: bytes | None) -> FileRef:
    """ref with its SHA-256 when a key is configured: a CRC-32C can be forged to match, so an
    authenticated manifest must pin each file's content with a cryptographic hash."""
    return dataclasses.replace(ref, sha256=file_sha256(local_path)) if hmac_key else ref


def write_operator_state(backend: SnapshotSource, storage: CheckpointStorage, rel: str,
                         data: bytes | None, hmac_key: bytes | None) -> OperatorStateRef | None:
    if data is None:
        return None
    storage.write_atomic(rel, data)
    op = backend.operator_state
    ref = FileRef(rel, len(data), _native.crc32c(data))
    if hmac_key:
        import hashlib

        ref = dataclasses.replace(ref, sha256=hashlib.sha256(data).hexdigest())
    return OperatorStateRef(ref, op.operator_index, op.parallelism)


def take_full_snapshot(backend: SnapshotSource, storage: CheckpointStorage, rel: str,
                       compress: bool = True,
                       hmac_key: bytes | None = None) -> AsyncSnapshot[FullSnapshotHandle]:
    cfs = backend.column_families()
    meta_bytes = snapshot_meta(backend, compress).encode()
    op_bytes = None if backend.operator_state.is_empty() else backend.operator_state.snapshot_bytes()
    columns = [(cf, sid) for sid, (_, cf) in enumerate(cfs)]
    storage.check_target(rel + HANDLE_SUFFIX)  # a name that leaves the root fails before any work
    native = _native.NativeFullSnapshot.take(backend, columns, compress)  # the sync point
    staging = os.path.join(backend.staging_dir, f"full-{uuid.uuid4().hex}")
    key_group_range, max_p = backend.key_group_range, backend.max_parallelism

    def run() -> FullSnapshotHandle:
        tmp = None
        try:
            # The writer checksums the bytes as it writes them: no second pass over the file
            # (unless a key asks for a SHA-256 too).
            if storage.is_local:
                tmp = storage.place_local(rel)
                offsets, stats = native.write(tmp, meta_bytes)
                digest = file_sha256(tmp) if hmac_key else ""
                ref = storage.commit_local(tmp, rel, crc=stats.pop("file_crc32c"))
                ref = dataclasses.replace(ref, sha256=digest)
            else:
                tmp = staging  # a local copy to upload: the upload, not this file, is durable
                offsets, stats = native.write(tmp, meta_bytes, durable=False)
                ref = storage.upload(tmp, rel, crc=stats.pop("file_crc32c"))
                ref = with_digest(ref, tmp, hmac_key)
            op_ref = write_operator_state(backend, storage, rel + ".opstate", op_bytes, hmac_key)
            handle = FullSnapshotHandle(storage.uri, ref, key_group_range, max_p, dict(offsets),
                                        len(meta_bytes), stats, op_ref)
            write_handle(storage, rel + HANDLE_SUFFIX, handle, hmac_key)
            return handle
        finally:
            native.release()
            if tmp is not None and os.path.exists(tmp):
                os.remove(tmp)

    return backend.track_snapshot(AsyncSnapshot(run, native.cancel, release=native.release))


def restore_full(backend: RestoreTarget, handles: list[FullSnapshotHandle],
                 before_entries: Callable[[], None] | None = None) -> dict:
    """Restores the backend's key groups from full snapshots; returns restore statistics.
    ``before_entries`` runs once every snapshot's meta is read and before any entry is
    written (restore registers the descriptors there).

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
            local = storage.open_verified(h.file, backend.staging_dir)
            if not storage.is_local:
                downloaded.append(local)
            if not 0 < h.meta_length <= h.file.size:  # the read below is bounded by the file
                raise CorruptionError(f"{source}: its handle records a meta block of "
                                      f"{h.meta_length} bytes in a file of {h.file.size}")
            with open(local, "rb") as f:
                head = f.read(h.meta_length)
            meta, meta_end = SnapshotMeta.decode(head, source)
            if meta_end != h.meta_length:
                raise CorruptionError(f"{source}: the meta block has {meta_end} bytes but the "
                                      f"handle recorded {h.meta_length}")
            if any(not meta_end <= off < h.file.size for off in h.offsets.values()):
                raise CorruptionError(f"{source}: a key-group offset of the handle lies outside "
                                      f"the snapshot's sections")
            legacy = legacy or meta.format_version < 2  # may hold pickles (checkpoint/legacy.py)
            backend.check_restored_layout(meta.max_parallelism, meta.key_codecs,
                                          meta.key_is_tuple, source)
            cf_for_state = [backend.restored_column_family(s, source) for s in meta.states]
            index = len(files)
            files.append((local, meta.compressed, cf_for_state))
            sections.extend((index, kg, off) for kg, off in h.offsets.items()
                            if overlap.contains(kg))
        if before_entries is not None:
            before_entries()
        sections.sort(key=lambda s: s[1])
        sst_dir = os.path.join(backend.staging_dir, f"restore-{uuid.uuid4().hex}")
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
