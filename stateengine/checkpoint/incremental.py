"""Incremental checkpoints: upload only the SST files the last confirmed checkpoint lacks.

Sync part: RocksDB ``Checkpoint`` (flush, then hard links of the live files) into the
backend's instance directory. Async part: SST files that the last *confirmed* checkpoint
already uploaded are referenced again; new SSTs go to the shared folder under unique names;
MANIFEST/CURRENT/OPTIONS go to the checkpoint's private folder; finally the handle is
published as a manifest (sealed, see documents.py), atomically. With a checkpoint key every
file also gets its SHA-256 and the manifest an HMAC.

Ownership: a checkpointer deletes (on ``discard``) only shared files it uploaded itself and no
retained checkpoint of it references; files adopted from a restored checkpoint are never
deleted by it (their owner's retention, e.g. StateStore's, handles them). A discarded
checkpoint loses its manifest first, then its files, so no published manifest ever names a
deleted file.

Reused files and their base: the SSTs a checkpoint reuses belong to the checkpoint it builds
on (its base: the last confirmed one, or the restored one). Retention deletes a file only once
no published manifest names it, so a writer that loaded its base long ago (a zombie task, a
stalled process) may find its base pruned, or replaced by another writer's commit of the same
version. Before its manifest is written, a commit checks that the base's manifest is still
published (with no known manifest: that each reused file exists); otherwise
``StaleCommitError`` and nothing is published. After its manifest is written it reads the
base's manifest, which must still be published and name every reused file, because retention
may have unpublished it in between; if not, the new manifest is withdrawn (if it is still the
one this commit wrote) and the commit fails. With retention's second look at the versions
(versions.py ``prune``), a commit that returns has files no retention deletes while its
manifest is published. On object storage this costs a HEAD before and a HEAD and GET after.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from typing import Callable

from .. import _native
from ..errors import (CheckpointNotFoundError, CorruptionError, SnapshotCancelledError,
                      StaleCommitError)
from .asynchronous import AsyncSnapshot
from .full import with_digest, write_operator_state
from .handles import FileRef, IncrementalHandle, decode_handle, encode_handle
from .interface import SnapshotSource
from .storage import CheckpointStorage
from .transfers import transfer_each
from .untrusted import trust_checkpoint_files, trust_tables


def shared_file_name(shared_dir: str) -> str:
    """Unique, creation-time-prefixed name: garbage collection uses the time as a guard."""
    return f"{shared_dir}/{int(time.time() * 1000):013d}-{uuid.uuid4().hex}.sst"


def shared_file_time_ms(path: str) -> int | None:
    base = path.rsplit("/", 1)[-1]
    head = base.split("-", 1)[0]
    return int(head) if head.isdigit() else None


class IncrementalCheckpointer:
    """Incremental checkpoints of one backend."""

    def __init__(self, backend: SnapshotSource, num_retained: int | None = None) -> None:
        self._backend = backend
        self.num_retained = num_retained
        self._lock = threading.Lock()
        self._confirmed: dict[str, FileRef] = {}  # local SST name -> uploaded file
        self._confirmed_root: str | None = None  # storage the confirmed files live in
        self._confirmed_id = -1
        self._confirmed_manifest = ""  # where the confirmed checkpoint is published, if known
        # the bytes this checkpointer published there (None: restored or unknown), so that the
        # check after publishing compares bytes instead of decoding its own manifest again
        self._confirmed_bytes: bytes | None = None
        self._written: dict[int, bytes] = {}  # checkpoint id -> its manifest's bytes
        self._completed: dict[int, IncrementalHandle] = {}
        self._retained: OrderedDict[int, IncrementalHandle] = OrderedDict()
        self._owned: set[str] = set()
        self._manifests: dict[int, tuple[str, str]] = {}  # checkpoint id -> (root, manifest)

    def adopt(self, handle: IncrementalHandle) -> None:
        """Makes a restored checkpoint's files reusable by the next checkpoint."""
        with self._lock:
            self._confirmed = {f.local_name: f for f in handle.shared}
            self._confirmed_root = handle.root
            self._confirmed_id = handle.checkpoint_id
            self._confirmed_manifest = handle.manifest
            self._confirmed_bytes = None

    def checkpoint(self, checkpoint_id: int, storage: CheckpointStorage, private_dir: str,
                   manifest_path: str | None = None, shared_dir: str = "shared",
                   extra: dict | Callable[[dict], dict] | None = None,
                   hmac_key: bytes | None = None,
                   deferred: bool = False) -> AsyncSnapshot[IncrementalHandle]:
        """Starts a checkpoint (see KeyedStateBackend.checkpoint; ``deferred`` as for
        AsyncSnapshot)."""
        backend = self._backend
        for rel in (private_dir, shared_dir, manifest_path):  # refused before any work
            if rel is not None:
                storage.check_target(rel)
        local_dir = os.path.join(backend.checkpoint_dir, f"chk-{checkpoint_id}-{uuid.uuid4().hex[:8]}")
        _native.create_checkpoint(backend, local_dir)  # the sync point
        # tables this database's RocksDB wrote itself: restores on this machine trust them
        written = _native.created_table_files(backend)
        states = [backend.state_meta(n) for n, _ in backend.column_families()]
        op_bytes = None if backend.operator_state.is_empty() else backend.operator_state.snapshot_bytes()
        with self._lock:
            # A file path is relative to its storage root: reuse only within the same root.
            same_root = self._confirmed_root == storage.uri
            base = dict(self._confirmed) if same_root else {}
            base_manifest = self._confirmed_manifest if same_root else ""
            base_bytes = self._confirmed_bytes if same_root else None
        cancelled = threading.Event()
        kgr, max_p = backend.key_group_range, backend.max_parallelism
        key_codecs, key_is_tuple = backend.key_codecs, backend.key_is_tuple

        def run() -> IncrementalHandle:
            try:
                if cancelled.is_set():
                    raise SnapshotCancelledError("the checkpoint was cancelled before it finished")
                # (name, the reused file or None) per file of the local checkpoint, in order
                plan: list[tuple[str, FileRef | None]] = []
                for name in sorted(os.listdir(local_dir)):
                    prior = base.get(name) if name.endswith(".sst") else None
                    # with a key, reuse only files whose content the manifest can pin
                    if prior is not None and (prior.size != os.path.getsize(
                            os.path.join(local_dir, name)) or (hmac_key and not prior.sha256)):
                        prior = None
                    plan.append((name, prior))

                def upload(name: str) -> FileRef:
                    if cancelled.is_set():
                        raise SnapshotCancelledError("the checkpoint was cancelled before it finished")
                    path = os.path.join(local_dir, name)
                    table = name.endswith(".sst")
                    ref = storage.upload(path, shared_file_name(shared_dir) if table
                                         else f"{private_dir}/{name}", local_name=name, link=True)
                    if table:
                        with self._lock:
                            self._owned.add(ref.path)
                    return with_digest(ref, path, hmac_key)

                # on remote storage several files at once (transfers.py); all of them have
                # finished, or failed, before the local checkpoint is deleted
                new = [name for name, prior in plan if prior is None]
                refs = dict(zip(new, transfer_each(upload, new, not storage.is_local)))
                shared, private, reused_refs = [], [], []
                for name, prior in plan:
                    ref = prior if prior is not None else refs[name]
                    (shared if name.endswith(".sst") else private).append(ref)
                    if prior is not None:
                        reused_refs.append(prior)
                reused = len(reused_refs)
                uploaded = len(new)
                uploaded_bytes = sum(refs[name].size for name in new)
                # tables this database's RocksDB wrote: where restores find them (the copy,
                # or the link), trusted without a check
                ours = [n for n in new if n.endswith(".sst") and n in written]
                if ours:
                    trust_tables([storage.resolve(refs[n].path) if storage.is_local
                                  else os.path.join(local_dir, n) for n in ours])
                op_ref = write_operator_state(backend, storage, f"{private_dir}/operator-state.bin",
                                              op_bytes, hmac_key)
                stats = {"files_uploaded": uploaded, "files_reused": reused,
                         "bytes_uploaded": uploaded_bytes,
                         "bytes_total": sum(f.size for f in shared) + sum(f.size for f in private),
                         "operator_state_bytes": op_ref.file.size if op_ref else 0}
                handle = IncrementalHandle(storage.uri, checkpoint_id, kgr, max_p, states,
                                           list(key_codecs) if key_codecs else None, key_is_tuple,
                                           shared, private, stats, op_ref)
                if storage.is_local:  # what a restore will place, as its RocksDB wrote it
                    trust_checkpoint_files({f.local_name: storage.full_path(f.path)
                                            for f in shared + private})
                if reused_refs:
                    check_base(storage, checkpoint_id, reused_refs, base_manifest, read=False)
                if manifest_path is not None:
                    # a callable extra sees the upload figures, sealed with the manifest
                    fields = extra(dict(stats)) if callable(extra) else extra
                    data = encode_handle(handle, hmac_key, fields)
                    storage.write_atomic(manifest_path, data)
                    handle.manifest = manifest_path
                    if reused_refs:  # retention may have unpublished the base meanwhile
                        try:
                            check_base(storage, checkpoint_id, reused_refs, base_manifest,
                                       known=base_bytes)
                        except StaleCommitError:
                            withdraw(storage, manifest_path, data)
                            raise
                with self._lock:
                    self._completed[checkpoint_id] = handle
                    if manifest_path is not None:
                        self._manifests[checkpoint_id] = (storage.uri, manifest_path)
                        self._written[checkpoint_id] = data
                return handle
            finally:
                shutil.rmtree(local_dir, ignore_errors=True)

        return backend.track_snapshot(AsyncSnapshot(
            run, cancelled.set, release=lambda: shutil.rmtree(local_dir, ignore_errors=True),
            deferred=deferred))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Confirms a checkpoint: its SSTs become the base of the next checkpoint, and with
        ``num_retained`` set, checkpoints beyond the newest ``num_retained`` are discarded."""
        with self._lock:
            handle = self._completed.pop(checkpoint_id, None)
            written = self._written.pop(checkpoint_id, None)
            for old in [i for i in self._written if i < checkpoint_id]:
                del self._written[old]
            if handle is None or checkpoint_id <= self._confirmed_id:
                return
            self._confirmed = {f.local_name: f for f in handle.shared}
            self._confirmed_root = handle.root
            self._confirmed_id = checkpoint_id
            self._confirmed_manifest = handle.manifest
            self._confirmed_bytes = written if handle.manifest else None
            self._retained[checkpoint_id] = handle
            discard = []
            if self.num_retained is not None:
                while len(self._retained) > self.num_retained:
                    discard.append(self._retained.popitem(last=False))
        for old_id, old in discard:
            self._discard(old_id, old)

    def _discard(self, checkpoint_id: int, handle: IncrementalHandle) -> None:
        storage = CheckpointStorage(handle.root)
        with self._lock:
            live = {f.path for h in self._retained.values() for f in h.shared}
            live |= {f.path for f in self._confirmed.values()}
            doomed = [f.path for f in handle.shared if f.path in self._owned and f.path not in live]
            self._owned.difference_update(doomed)
            manifest = self._manifests.pop(checkpoint_id, None)
        if manifest is not None and manifest[0] == handle.root:
            storage.delete_file(manifest[1])  # first: no manifest may outlive its files
        for path in doomed:
            storage.delete_file(path)
        for f in handle.private:
            storage.delete_file(f.path)
        if handle.operator_state is not None:
            storage.delete_file(handle.operator_state.file.path)


def check_base(storage: CheckpointStorage, checkpoint_id: int, reused: list[FileRef],
               base_manifest: str, read: bool = True, known: bytes | None = None) -> None:
    """Raises StaleCommitError unless the files a checkpoint reuses are still protected: the
    manifest of the checkpoint it builds on is still published and (``read``) names every one
    of them: retention deletes no file a published manifest names. Without ``read`` only its
    existence is checked (one HEAD on object storage: the cheap check before publishing; the
    one after reads it). ``known``: the bytes this writer published there itself, whose
    handle names every file it reuses; the manifest still holding exactly them settles it
    without decoding. Where that manifest is not known (a handle restored from its dict
    form) or is damaged, each reused file must exist."""
    reason = None
    if base_manifest:
        where = storage.describe(base_manifest)
        if not read:
            if storage.exists(base_manifest):
                return
            reason = f"its manifest {where} is no longer published"
        else:
            try:
                data = storage.read_bytes(base_manifest)
                if known is not None and data == known:
                    return
                base, _ = decode_handle(data, storage.uri, where, None)
            except CheckpointNotFoundError:
                reason = f"its manifest {where} is no longer published"
            except CorruptionError:
                base_manifest = ""  # damaged: fall back to the files themselves
            else:
                if not isinstance(base, IncrementalHandle):
                    base_manifest = ""
                else:
                    named = {f.path for f in base.shared}
                    lost = [r.path for r in reused if r.path not in named]
                    if not lost:
                        return
                    reason = (f"its manifest {where} no longer names "
                              f"{storage.describe(lost[0])}"
                              + (f" and {len(lost) - 1} more reused file(s)" if len(lost) > 1
                                 else ""))
    if not base_manifest:
        gone = [r.path for r in reused if not storage.exists(r.path)]
        if not gone:
            return
        reason = (f"{storage.describe(gone[0])}"
                  + (f" and {len(gone) - 1} more reused file(s)" if len(gone) > 1 else "")
                  + " no longer exist(s)")
    raise StaleCommitError(
        f"checkpoint {checkpoint_id} cannot be published: it reuses {len(reused)} file(s) "
        f"of the checkpoint it builds on, but {reason}. Retention removed that checkpoint "
        f"or another writer replaced it after this writer loaded it (a zombie task "
        f"committing after its query moved on?). Nothing was published; load the latest "
        f"version and commit again")


def withdraw(storage: CheckpointStorage, rel: str, data: bytes) -> None:
    """Deletes the manifest a failed commit published, unless another writer has replaced it
    since (then it is theirs, not ours, and stays)."""
    try:
        if storage.read_bytes(rel) == data:
            storage.delete_file(rel)
    except CheckpointNotFoundError:
        pass
