"""Restoring a backend from handles, at the same or another parallelism.

Full snapshots: an empty backend reads the key groups of its range from each snapshot.
Incremental checkpoints: the handle overlapping the target range most becomes the database
(its files are opened directly); if it covers more than the target range it is clipped with
DeleteRange; the key groups the target needs from other handles are copied from temporary
instances of those handles. Either way every file is checked against its recorded size and
CRC-32C first, every path is confined to its checkpoint root, the handles' ranges must cover
the target range, a restored RocksDB directory is opened only if it exists (never created
empty), and a failed restore disposes the partial backend (and any files it placed) before
raising. Keyed state written before snapshot format 2 is converted (or, without
``allow_pickle``, checked) once it is in place (legacy.py); nothing is unpickled unless the
caller allowed it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any, Sequence

from .. import _native
from ..descriptors import check_no_pickle
from ..errors import (CheckpointNotFoundError, CorruptionError, IncompatibleStateError,
                      SchemaEvolutionError, StateEngineError, StateRegistrationError,
                      StorageError)
from ..evolution import check_descriptors
from ..keygroups import KeyGroupRange
from ..operator_state import OperatorStateBackend
from .crosscheck import check_data_layout, check_operator_instance, check_options, naming
from .full import restore_full
from .handles import FullSnapshotHandle, IncrementalHandle, handle_from_dict
from .interface import BackendFactory, RestoreTarget
from .legacy import convert_legacy, is_legacy
from .storage import CheckpointStorage
from .transfers import transfer_each
from .untrusted import check_rocksdb_files

Handle = FullSnapshotHandle | IncrementalHandle


def normalize_handles(handles: Sequence[Handle | dict[str, Any]],
                      hmac_key: bytes | None = None) -> list[Handle]:
    """Handle objects as given; dicts (``to_dict`` forms) decoded with their seal checked."""
    out = [handle_from_dict(h, source=f"handle {i}", hmac_key=hmac_key) if isinstance(h, dict)
           else h for i, h in enumerate(handles)]
    if any(not isinstance(h, (FullSnapshotHandle, IncrementalHandle)) for h in out):
        raise TypeError("restore takes snapshot or checkpoint handles (or their to_dict() forms)")
    if not out:
        raise CheckpointNotFoundError("restore needs at least one snapshot or checkpoint handle")
    kinds = {h.kind for h in out}
    if len(kinds) > 1:
        raise IncompatibleStateError("cannot restore from full snapshots and incremental "
                                     "checkpoints at once; pass handles of one kind")
    max_ps = {h.max_parallelism for h in out}
    if len(max_ps) > 1:
        raise IncompatibleStateError(f"handles disagree on max_parallelism: {sorted(max_ps)}")
    return out


def default_range(handles: list[Handle]) -> KeyGroupRange:
    """The union of the handles' ranges, which must be contiguous."""
    ranges = sorted((h.key_group_range for h in handles), key=lambda r: r.start)
    start, end = ranges[0].start, ranges[0].end
    for r in ranges[1:]:
        if r.start > end + 1:
            raise IncompatibleStateError(
                "the handles' key-group ranges leave a gap; pass key_group_range explicitly")
        end = max(end, r.end)
    return KeyGroupRange(start, end)


def uncovered(handles: list[Handle], target: KeyGroupRange) -> list[tuple[int, int]]:
    """The key-group ranges of target that no handle's range includes."""
    gaps, need = [], target.start
    for r in sorted((h.key_group_range for h in handles), key=lambda r: r.start):
        if need > target.end:
            break
        if r.is_empty() or r.end < need:
            continue
        if r.start > need:
            gaps.append((need, min(r.start - 1, target.end)))
        need = max(need, r.end + 1)
    if need <= target.end:
        gaps.append((need, target.end))
    return gaps


def restore_operator_state(handles: list[Handle], operator_index: int, parallelism: int,
                           scratch: str, allow_pickle: bool = False) -> OperatorStateBackend:
    snapshots, sources = [], []
    for h in handles:
        if h.operator_state is None:
            continue
        storage = CheckpointStorage(h.root)
        try:
            local = storage.open_verified(h.operator_state.file, scratch)
        except CorruptionError as e:
            raise naming(e, h) from None
        with open(local, "rb") as f:  # verified: exactly the size its handle recorded
            snapshots.append(f.read())
        sources.append(storage.describe(h.operator_state.file.path))
        check_operator_instance(h, snapshots[-1], sources[-1])
        if not storage.is_local:
            os.remove(local)
    source = "operator state " + ", ".join(sources) if sources else "operator state"
    return OperatorStateBackend.restore(snapshots, operator_index, parallelism, source=source,
                                        allow_pickle=allow_pickle)


def _materialize(handle: IncrementalHandle, db_dir: str) -> None:
    """Places a checkpoint's files as an openable RocksDB directory, verifying each; SST files
    (immutable) are hard-linked when the checkpoint is local. Remote files are downloaded
    several at once (transfers.py)."""
    storage = CheckpointStorage(handle.root)
    os.makedirs(db_dir, exist_ok=True)
    places, taken = [], set()
    for ref in handle.files():
        dest = os.path.join(db_dir, ref.local_name or os.path.basename(ref.path))
        if os.path.dirname(dest) != db_dir or dest in taken or os.path.lexists(dest):
            raise CorruptionError(f"checkpoint {_describe(handle)}: local file name "
                                  f"{ref.local_name!r} is not a plain, unique name")
        places.append((ref, dest))
        taken.add(dest)
    try:
        transfer_each(lambda p: storage.place_verified(p[0], p[1], link=p[1].endswith(".sst")),
                      places, not storage.is_local)
    except CorruptionError as e:
        raise naming(e, handle) from None


def _describe(handle: IncrementalHandle) -> str:
    return handle.source or \
        CheckpointStorage(handle.root).describe(f"checkpoint {handle.checkpoint_id}")


def _name_sources(e: CorruptionError, handles: list[IncrementalHandle]) -> CorruptionError:
    """e with the checkpoint files named: RocksDB reports damage by its local file names
    (000017.sst, MANIFEST-000005), which say nothing about which checkpoint file it was."""
    text = str(e)
    named = [f"{ref.local_name} is {CheckpointStorage(h.root).describe(ref.path)}"
             for h in handles for ref in h.files()
             if ref.local_name and f"/db/{ref.local_name}" in text]
    if not named:
        return e
    return type(e)(f"{text} ({'; '.join(named)})")


def _open_materialized(cls: BackendFactory, handle: IncrementalHandle, path: str,
                       target: KeyGroupRange, key_type: Any,
                       allow_pickle: bool = False) -> RestoreTarget:
    """Opens what _materialize placed; a directory RocksDB cannot open (no CURRENT, a
    MANIFEST that names missing files or other column families) is a corrupted checkpoint.
    A child process reads it first (untrusted.py), so damage behind every checksum is an error,
    never a signal."""
    try:
        check_options(handle, os.path.join(path, "db"))
        check_rocksdb_files(os.path.join(path, "db"), _describe(handle))
        backend = cls.open_restored(path, handle.max_parallelism, target, handle.states,
                                    key_type, allow_pickle=allow_pickle)
    except CorruptionError as e:
        raise _name_sources(e, [handle]) from None
    except StorageError as e:
        storage = CheckpointStorage(handle.root)
        meta_files = ", ".join(storage.describe(f.path) for f in handle.private
                               if f.local_name == "CURRENT" or f.local_name.startswith("MANIFEST"))
        raise CorruptionError(f"checkpoint {_describe(handle)} does not open as a RocksDB "
                              f"database ({e}); its files are inconsistent (RocksDB's "
                              f"metadata: {meta_files or 'none listed'})") from None
    try:
        check_data_layout(handle, backend)
    except BaseException:
        backend.dispose()
        raise
    return backend


def restore_incremental(cls: BackendFactory, path: str, handles: list[IncrementalHandle],
                        target: KeyGroupRange, max_parallelism: int,
                        key_type: Any, allow_pickle: bool = False) -> RestoreTarget:
    relevant = [h for h in handles if not h.key_group_range.intersection(target).is_empty()]
    if not relevant:
        return cls(path, max_parallelism, target, key_type, allow_pickle=allow_pickle)
    base = max(relevant, key=lambda h: len(h.key_group_range.intersection(target)))
    _prepare(path)
    try:
        _materialize(base, os.path.join(path, "db"))
        backend = _open_materialized(cls, base, path, target, key_type, allow_pickle)
    except BaseException:  # no half-materialized directory may stay behind
        shutil.rmtree(path, ignore_errors=True)
        raise
    try:
        backend.check_restored_layout(base.max_parallelism, base.key_codecs, base.key_is_tuple,
                                      _describe(base))
        if (base.key_group_range.start < target.start or base.key_group_range.end > target.end):
            _native.clip_to_range(backend)
        for h in relevant:
            if h is base:
                continue
            _copy_from(cls, backend, h, target)
        backend.adopt_checkpoint(base)
    except CorruptionError as e:
        backend.dispose()
        raise _name_sources(e, relevant) from None
    except BaseException:
        backend.dispose()
        raise
    return backend


def _copy_from(cls: BackendFactory, backend: RestoreTarget, handle: IncrementalHandle,
               target: KeyGroupRange) -> None:
    tmp = os.path.join(backend.staging_dir, f"restore-{uuid.uuid4().hex}")
    os.makedirs(tmp)
    try:
        _materialize(handle, os.path.join(tmp, "db"))
        src = _open_materialized(cls, handle, tmp, handle.key_group_range, None)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        source = _describe(handle)
        backend.check_restored_layout(handle.max_parallelism, handle.key_codecs,
                                      handle.key_is_tuple, source)
        cf_map = [(src.column_family(m["name"]), backend.restored_column_family(m, source))
                  for m in handle.states]
        overlap = handle.key_group_range.intersection(target)
        _native.copy_key_groups(src, backend, cf_map, overlap.start, overlap.end)
    finally:
        src.dispose()


def _prepare(path: str) -> None:
    if os.path.exists(path) and os.listdir(path):
        raise StateEngineError(f"restore target {path} is not empty; restore into a fresh directory")
    os.makedirs(path, exist_ok=True)


def _register(backend: RestoreTarget, descriptors: Sequence[Any]) -> None:
    """Registers descriptors over the restored metas; a clash with restored state is an
    IncompatibleStateError, and schemas that cannot evolve are one SchemaEvolutionError for
    all descriptors."""
    check_descriptors({n: backend.state_meta(n) for n, _ in backend.column_families()},
                      descriptors, fixed=False)
    for d in descriptors:
        try:
            backend.get_state(d)
        except SchemaEvolutionError:
            raise
        except StateRegistrationError as e:
            raise IncompatibleStateError(f"restored state does not fit the descriptors: {e}") from None


def restore_backend(cls: BackendFactory, path: str, handles: Sequence[Any],
                    key_group_range: KeyGroupRange | None, max_parallelism: int | None,
                    key_type: Any, descriptors: Sequence[Any], operator_index: int,
                    parallelism: int, hmac_key: bytes | None = None,
                    allow_pickle: bool = False, keyed_only: bool = False) -> RestoreTarget:
    """See KeyedStateBackend.restore; ``hmac_key`` is the resolved checkpoint key (handle
    dicts are unsealed with it); ``keyed_only`` skips operator state and the conversion of old
    checkpoints (KeyedStateBackend.open_for_reading)."""
    if not allow_pickle:
        for d in descriptors:
            check_no_pickle(d)  # before any file is read
    hs = normalize_handles(handles, hmac_key)
    max_p = hs[0].max_parallelism
    if max_parallelism is not None and max_parallelism != max_p:
        raise IncompatibleStateError(
            f"the state was written with max_parallelism {max_p}; it cannot be restored with "
            f"{max_parallelism} (key groups would not line up). Keep max_parallelism fixed for "
            f"the life of the state")
    target = key_group_range or default_range(hs)
    gaps = uncovered(hs, target)
    if gaps:
        missing = ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in gaps)
        raise CheckpointNotFoundError(
            f"no handle holds key groups {missing} of the restore target {target}; pass the "
            f"handles of every instance that wrote the state")
    if hs[0].kind == "full":
        backend = cls(path, max_p, target, key_type, allow_pickle=allow_pickle)
        try:
            # descriptors register once every restored meta is known, before any entry is
            # written: a schema evolves from the stored one
            backend.last_restore_stats = restore_full(  # type: ignore[arg-type]
                backend, hs, before_entries=lambda: _register(backend, descriptors))
        except BaseException:
            backend.dispose()
            raise
    else:
        backend = restore_incremental(cls, path, hs, target, max_p, key_type,  # type: ignore[arg-type]
                                      allow_pickle)
        try:
            _register(backend, descriptors)
        except BaseException:
            backend.dispose()
            raise
    if keyed_only:
        return backend
    try:
        if any(is_legacy(h, backend.last_restore_stats) for h in hs):
            report = convert_legacy(backend, allow_pickle)
            backend.last_restore_stats = dict(backend.last_restore_stats or {}, legacy=report)
        backend.operator_state = restore_operator_state(hs, operator_index, parallelism,
                                                        backend.staging_dir, allow_pickle)
    except BaseException:
        backend.dispose()
        raise
    return backend
