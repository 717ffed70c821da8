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
from ..errors import SnapshotCancelledError
from .asynchronous import AsyncSnapshot
from .full import with_digest, write_operator_state
from .handles import FileRef, IncrementalHandle, write_handle
from .interface import SnapshotSource
from .storage import CheckpointStorage


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

    def checkpoint(self, checkpoint_id: int, storage: CheckpointStorage, private_dir: str,
                   manifest_path: str | None = None, shared_dir: str = "shared",
                   extra: dict | Callable[[dict], dict] | None = None,
                   hmac_key: bytes | None = None) -> AsyncSnapshot[IncrementalHandle]:
        backend = self._backend
        for rel in (private_dir, shared_dir, manifest_path):  # refused before any work
            if rel is not None:
                storage.check_target(rel)
        local_dir = os.path.join(backend.checkpoint_dir, f"chk-{checkpoint_id}-{uuid.uuid4().hex[:8]}")
        _native.create_checkpoint(backend, local_dir)  # the sync point
        states = [backend.state_meta(n) for n, _ in backend.column_families()]
        op_bytes = None if backend.operator_state.is_empty() else backend.operator_state.snapshot_bytes()
        with self._lock:
            # A file path is relative to its storage root: reuse only within the same root.
            base = dict(self._confirmed) if self._confirmed_root == storage.uri else {}
        cancelled = threading.Event()
        kgr, max_p = backend.key_group_range, backend.max_parallelism
        key_codecs, key_is_tuple = backend.key_codecs, backend.key_is_tuple

        def run() -> IncrementalHandle:
            try:
                shared, private = [], []
                uploaded = reused = uploaded_bytes = 0
                for name in sorted(os.listdir(local_dir)):
                    if cancelled.is_set():
                        raise SnapshotCancelledError("the checkpoint was cancelled before it finished")
                    path = os.path.join(local_dir, name)
                    if name.endswith(".sst"):
                        prior = base.get(name)
                        # with a key, reuse only files whose content the manifest can pin
                        if prior is not None and prior.size == os.path.getsize(path) and \
                                (prior.sha256 or not hmac_key):
                            shared.append(prior)
                            reused += 1
                            continue
                        ref = storage.upload(path, shared_file_name(shared_dir), local_name=name)
                        with self._lock:
                            self._owned.add(ref.path)
                        shared.append(with_digest(ref, path, hmac_key))
                    else:
                        ref = storage.upload(path, f"{private_dir}/{name}", local_name=name)
                        private.append(with_digest(ref, path, hmac_key))
                    uploaded += 1
                    uploaded_bytes += ref.size
                op_ref = write_operator_state(backend, storage, f"{private_dir}/operator-state.bin",
                                              op_bytes, hmac_key)
                stats = {"files_uploaded": uploaded, "files_reused": reused,
                         "bytes_uploaded": uploaded_bytes,
                         "bytes_total": sum(f.size for f in shared) + sum(f.size for f in private),
                         "operator_state_bytes": op_ref.file.size if op_ref else 0}
                handle = IncrementalHandle(storage.uri, checkpoint_id, kgr, max_p, states,
                                           list(key_codecs) if key_codecs else None, key_is_tuple,
                                           shared, private, stats, op_ref)
                if manifest_path is not None:
                    # a callable extra sees the upload figures, sealed with the manifest
                    fields = extra(dict(stats)) if callable(extra) else extra
                    write_handle(storage, manifest_path, handle, hmac_key, fields)
                with self._lock:
                    self._completed[checkpoint_id] = handle
                    if manifest_path is not None:
                        self._manifests[checkpoint_id] = (storage.uri, manifest_path)
                return handle
            finally:
                shutil.rmtree(local_dir, ignore_errors=True)

        return backend.track_snapshot(AsyncSnapshot(
            run, cancelled.set, release=lambda: shutil.rmtree(local_dir, ignore_errors=True)))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Confirms a checkpoint: its SSTs become the base of the next checkpoint, and with
        ``num_retained`` set, checkpoints beyond the newest ``num_retained`` are discarded."""
        with self._lock:
            handle = self._completed.pop(checkpoint_id, None)
            if handle is None or checkpoint_id <= self._confirmed_id:
                return
            self._confirmed = {f.local_name: f for f in handle.shared}
            self._confirmed_root = handle.root
            self._confirmed_id = checkpoint_id
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
