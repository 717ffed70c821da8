"""Restoring a backend from handles, at the same or another parallelism.

Full snapshots: an empty backend reads the key groups of its range from each snapshot.
Incremental checkpoints: the handle overlapping the target range most becomes the database
(its files are opened directly); if it covers more than the target range it is clipped with
DeleteRange; the key groups the target needs from other handles are copied from temporary
instances of those handles. Either way every file is checked against its recorded size and
CRC-32C first, the handles' ranges must cover the target range, and a failed restore disposes
the partial backend (and any files it placed) before raising.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import TYPE_CHECKING, Any, Sequence

from .. import _native
from ..descriptors import check_no_pickle
from ..errors import CheckpointNotFoundError, IncompatibleStateError
from ..keygroups import KeyGroupRange
from ..operator_state import OperatorStateBackend
from .full import restore_full
from .handles import FileRef, FullSnapshotHandle, IncrementalHandle, handle_from_dict
from .legacy import convert_legacy, is_legacy
from .storage import CheckpointStorage

if TYPE_CHECKING:
    from ..backend import KeyedStateBackend

Handle = FullSnapshotHandle | IncrementalHandle


def normalize_handles(handles: Sequence[Handle | dict[str, Any]]) -> list[Handle]:
    out = [handle_from_dict(h) if isinstance(h, dict) else h for h in handles]
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
    snapshots = []
    sources = []
    for h in handles:
        if h.operator_state is None:
            continue
        storage = CheckpointStorage(h.root)
        local = storage.open_verified(h.operator_state.file, scratch)
        with open(local, "rb") as f:
            snapshots.append(f.read())
        sources.append(storage.describe(h.operator_state.file.path))
        if not storage.is_local:
            os.remove(local)
    source = sources[0] if len(sources) == 1 else f"operator state ({', '.join(sources)})"
    return OperatorStateBackend.restore(snapshots, operator_index, parallelism, source,
                                        allow_pickle=allow_pickle)


def _materialize(handle: IncrementalHandle, db_dir: str) -> None:
    """Places a checkpoint's files as an openable RocksDB directory, verifying each."""
    storage = CheckpointStorage(handle.root)
    os.makedirs(db_dir, exist_ok=True)
    for ref in handle.files():
        dest = os.path.join(db_dir, ref.local_name or os.path.basename(ref.path))
        if storage.is_local and dest.endswith(".sst"):
            _link_or_copy(storage, ref, dest)
        else:
            storage.download(ref, dest)


def _link_or_copy(storage: CheckpointStorage, ref: FileRef, dest: str) -> None:
    # SST files are immutable, so the live DB may share them with the checkpoint by hard link.
    src = storage.full_path(ref.path)
    if not os.path.exists(src):
        raise CheckpointNotFoundError(f"checkpoint file {storage.describe(ref.path)} does not exist")
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)
    storage.verify_local(ref, dest)


def restore_incremental(cls: type["KeyedStateBackend"], path: str, handles: list[IncrementalHandle],
                        target: KeyGroupRange, max_parallelism: int,
                        key_type: Any, allow_pickle: bool = False) -> "KeyedStateBackend":
    relevant = [h for h in handles if not h.key_group_range.intersection(target).is_empty()]
    if not relevant:
        return cls(path, max_parallelism, target, key_type, allow_pickle=allow_pickle)
    base = max(relevant, key=lambda h: len(h.key_group_range.intersection(target)))
    _prepare(path)
    try:
        _materialize(base, os.path.join(path, "db"))
        backend = cls._open_existing(path, max_parallelism, target, base.states, key_type,
                                     allow_pickle)
    except BaseException:  # no half-materialized directory may stay behind
        shutil.rmtree(path, ignore_errors=True)
        raise
    try:
        source = CheckpointStorage(base.root).describe(f"checkpoint {base.checkpoint_id}")
        backend._check_restored_layout(base.max_parallelism, base.key_codecs, base.key_is_tuple,
                                       source)
        if (base.key_group_range.start < target.start or base.key_group_range.end > target.end):
            _native.clip_to_range(backend)
        for h in relevant:
            if h is base:
                continue
            _copy_from(cls, backend, h, target)
        backend._checkpointer.adopt(base)
    except BaseException:
        backend.dispose()
        raise
    return backend


def _copy_from(cls: type["KeyedStateBackend"], backend: "KeyedStateBackend",
               handle: IncrementalHandle, target: KeyGroupRange) -> None:
    tmp = os.path.join(backend._staging_dir, f"restore-{uuid.uuid4().hex}")
    os.makedirs(tmp)
    _materialize(handle, os.path.join(tmp, "db"))
    src = cls._open_existing(tmp, handle.max_parallelism, handle.key_group_range, handle.states, None)
    try:
        source = CheckpointStorage(handle.root).describe(f"checkpoint {handle.checkpoint_id}")
        backend._check_restored_layout(handle.max_parallelism, handle.key_codecs,
                                       handle.key_is_tuple, source)
        cf_map = [(src._cf_index[m["name"]], backend._ensure_cf(m, source)) for m in handle.states]
        overlap = handle.key_group_range.intersection(target)
        _native.copy_key_groups(src, backend, cf_map, overlap.start, overlap.end)
    finally:
        src.dispose()


def _prepare(path: str) -> None:
    if os.path.exists(path) and os.listdir(path):
        from ..errors import StateEngineError

        raise StateEngineError(f"restore target {path} is not empty; restore into a fresh directory")
    os.makedirs(path, exist_ok=True)


def _register(backend: "KeyedStateBackend", descriptors: Sequence[Any]) -> None:
    """Registers descriptors; a clash with restored state is an IncompatibleStateError."""
    from ..errors import StateRegistrationError

    for d in descriptors:
        try:
            backend.get_state(d)
        except StateRegistrationError as e:
            raise IncompatibleStateError(f"restored state does not fit the descriptors: {e}") from None


def restore_backend(cls: type["KeyedStateBackend"], path: str, handles: Sequence[Any],
                    key_group_range: KeyGroupRange | None, max_parallelism: int | None,
                    key_type: Any, descriptors: Sequence[Any], operator_index: int,
                    parallelism: int, allow_pickle: bool = False,
                    keyed_only: bool = False) -> "KeyedStateBackend":
    """See KeyedStateBackend.restore; ``keyed_only`` skips operator state and the conversion
    of old checkpoints (KeyedStateBackend.open_for_reading)."""
    if not allow_pickle:
        for d in descriptors:
            check_no_pickle(d)  # before any file is read
    hs = normalize_handles(handles)
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
            _register(backend, descriptors)
            backend.last_restore_stats = restore_full(backend, hs)  # type: ignore[arg-type]
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
                                                        backend._staging_dir, allow_pickle)
    except BaseException:
        backend.dispose()
        raise
    return backend
