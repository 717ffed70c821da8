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
from ..keygroups import KeyGroupRange
from .asynchronous import AsyncSnapshot
from .crosscheck import handle_name, naming
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
            stats["operator_state_bytes"] = op_ref.file.size if op_ref else 0
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

    A handle's offsets are checked against the file as far as the restore reads it: every
    section restored must end exactly where the next recorded one begins (or the file ends),
    and so must the last section before the target range, so that a key group whose offset
    was lost from the handle is found, not silently restored empty (``section_plan``).
    """
    target = backend.key_group_range
    files: list[tuple[str, bool, list[int]]] = []
    sections: list[tuple[int, int, int, int, bool]] = []
    downloaded: list[str] = []
    legacy = False
    whole = True  # every section of every handle read restored: the totals can be compared
    read: list[FullSnapshotHandle] = []
    tiled: list[str] = []  # "<snapshot> by <handle>", for the tiling error
    try:
        for h in handles:
            overlap = h.key_group_range.intersection(target)
            if overlap.is_empty():
                continue
            storage = CheckpointStorage(h.root)
            source = storage.describe(h.file.path)
            try:
                local = storage.open_verified(h.file, backend.staging_dir)
            except CorruptionError as e:
                raise naming(e, h) from None
            if not storage.is_local:
                downloaded.append(local)
            if not 0 < h.meta_length <= h.file.size:  # the read below is bounded by the file
                raise CorruptionError(f"{source}: {handle_name(h)} records a meta block of "
                                      f"{h.meta_length} bytes in a file of {h.file.size}")
            with open(local, "rb") as f:
                head = f.read(h.meta_length)
            try:
                meta, meta_end = SnapshotMeta.decode(head, source)
            except CorruptionError as e:  # e.g. truncated: the handle's length may be wrong
                raise naming(e, h) from None
            if meta_end != h.meta_length:
                raise CorruptionError(f"{source}: the meta block has {meta_end} bytes but "
                                      f"{handle_name(h)} records {h.meta_length}")
            if meta.max_parallelism != h.max_parallelism:
                raise CorruptionError(
                    f"{source} was written with max_parallelism {meta.max_parallelism} (its meta "
                    f"block) but {handle_name(h)} records {h.max_parallelism}; one of them is "
                    f"corrupted")
            legacy = legacy or meta.format_version < 2  # may hold pickles (checkpoint/legacy.py)
            backend.check_restored_layout(meta.max_parallelism, meta.key_codecs,
                                          meta.key_is_tuple, source)
            cf_for_state = [backend.restored_column_family(s, source) for s in meta.states]
            index = len(files)
            files.append((local, meta.compressed, cf_for_state))
            sections.extend((index, *s) for s in section_plan(h, overlap, source))
            tiled.append(f"{source} by {handle_name(h)}")
            whole = whole and overlap == h.key_group_range
            read.append(h)
        if before_entries is not None:
            before_entries()
        sections.sort(key=lambda s: s[1])
        sst_dir = os.path.join(backend.staging_dir, f"restore-{uuid.uuid4().hex}")
        os.makedirs(sst_dir)
        try:
            stats = _native.restore_sections(backend, files, sections, sst_dir)
        except CorruptionError as e:
            # the native reader names the local copy; say which handle's offsets these are
            raise CorruptionError(f"{e} (sections of {'; '.join(tiled)})") from None
        finally:
            shutil.rmtree(sst_dir, ignore_errors=True)
    finally:
        for local in downloaded:
            os.remove(local)
    if whole and read:
        _check_totals(read, stats)
    stats["files"] = len(files)
    stats["legacy_format"] = legacy
    return stats


def section_plan(h: FullSnapshotHandle, overlap: KeyGroupRange,
                 source: str) -> list[tuple[int, int, int, bool]]:
    """(key group, offset, end, decode only) of the sections a restore of ``overlap`` reads.

    The sections of a snapshot tile it: the first begins where the meta block ends, each ends
    where the next begins, the last at the end of the file (only non-empty key groups have
    one). The restored sections are checked to end where the next recorded one begins, and
    the last section before ``overlap`` is decoded (not restored) for the same check, so a
    lost offset of any key group in ``overlap`` leaves a section that does not end where the
    handle says: a CorruptionError naming the file, never that key group restored empty."""
    order = sorted(h.offsets.items())
    if not order:
        if h.meta_length != h.file.size:
            raise CorruptionError(
                f"{handle_name(h)} records no key-group section of {source} but the file "
                f"holds {h.file.size - h.meta_length} bytes after its meta block; the "
                f"handle's offsets are corrupted")
        return []
    if order[0][1] != h.meta_length:
        raise CorruptionError(
            f"{handle_name(h)} records the first key-group section of {source} at byte "
            f"{order[0][1]}, not where its meta block ends ({h.meta_length}); the handle's "
            f"offsets are corrupted")
    plan = []
    for i, (kg, offset) in enumerate(order):
        end = order[i + 1][1] if i + 1 < len(order) else h.file.size
        if overlap.contains(kg):
            plan.append((kg, offset, end, False))
        elif kg < overlap.start and (i + 1 == len(order) or order[i + 1][0] >= overlap.start):
            plan.append((kg, offset, end, True))  # the boundary: checked, not restored
    return plan


def _check_totals(handles: list[FullSnapshotHandle], stats: dict) -> None:
    """Entries and bytes restored against what the handles recorded when they were written
    (only when every section of every handle was read)."""
    for key in ("entries", "raw_bytes"):
        recorded = [h.stats.get(key) for h in handles]
        if any(r is None for r in recorded):
            return  # a handle written before these figures
        if sum(recorded) != stats[key]:
            names = ", ".join(handle_name(h) for h in handles)
            raise CorruptionError(
                f"{names}: restored {stats[key]} {key.replace('_', ' ')} but the handle(s) "
                f"recorded {sum(recorded)} when the snapshot was written; the handle's offsets "
                f"or figures are corrupted")
