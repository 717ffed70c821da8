"""Versioned state stores: Spark's state-store discipline over incremental checkpoints.

``StateStoreProvider`` owns the state of one (checkpoint, operator, partition of N). Its
``get_store(version)`` returns a ``StateStore`` in UPDATING; ``commit()`` publishes version + 1
and moves to COMMITTED; ``abort()`` moves to ABORTED and throws the changes away; writes after
either raise ``IllegalStoreStateError`` ("Cannot put after already committed or aborted").

The backend stays open between versions: loading the version the provider just committed
reuses it; any other version (a retry, a replay, another partition count) is restored from
the checkpoint directory, at any number of partitions. A retried commit of an existing version
is atomic: readers see the earlier manifest or the new one, both complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from enum import Enum
from typing import TYPE_CHECKING, Any, Sequence, overload

from . import workdirs
from .backend import KeyedStateBackend
from .checkpoint import file_cache, untrusted
from .checkpoint.documents import resolve_key
from .checkpoint.storage import CheckpointStorage, as_storage
from .checkpoint.versions import VersionCatalog
from .descriptors import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
                          ReducingStateDescriptor, SortedMapStateDescriptor, StateDescriptor,
                          ValueStateDescriptor, check_no_pickle)
from .errors import CheckpointNotFoundError, IllegalStoreStateError, StateEngineError
from .keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange
from .metrics import batch_metrics, row_counts

if TYPE_CHECKING:
    from .state import (AggregatingState, ListState, MapState, ReducingState, SortedMapState,
                        ValueState)


class StoreState(str, Enum):
    """Where a StateStore is in its life: UPDATING until ``commit()`` (COMMITTED) or
    ``abort()`` (ABORTED); a finished store refuses further writes."""

    UPDATING = "UPDATING"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


def default_local_dir() -> str:
    """``$STATEENGINE_LOCAL_DIR``, else ``<tmp>/stateengine-scratch-<uid>``: a name no import
    can resolve (a ``<tmp>/stateengine`` directory would shadow the package for a Python
    started in the temp directory), and one per user, so users never share scratch space."""
    return os.environ.get("STATEENGINE_LOCAL_DIR") or os.path.join(
        tempfile.gettempdir(), f"stateengine-scratch-{_uid()}")


def _uid() -> str:
    getuid = getattr(os, "getuid", None)
    if getuid is not None:
        return str(getuid())
    import getpass

    return getpass.getuser()


class StateStoreProvider:
    """Versioned keyed state of partition ``partition_id`` of ``num_partitions``.

    The partition owns ``KeyGroupRange.for_operator(partition_id, num_partitions,
    max_parallelism)``. ``min_versions_to_retain`` newest versions stay restorable; partition 0
    prunes older ones (and the shared files only they used) after each commit, or with
    ``prune_every`` after the commit of every ``prune_every``-th version (maintenance on an
    interval, as Spark's; up to ``prune_every - 1`` more versions stay meanwhile).
    ``allow_pickle`` is KeyedStateBackend's: without it nothing read from the checkpoint is
    ever unpickled (versions written before format 2 may need it once, see restore).
    ``hmac_key`` (default ``$STATEENGINE_CHECKPOINT_KEY``) authenticates every manifest and
    file written and is required of every one read. ``key_names`` (the key's column names)
    are recorded in every manifest this provider commits, for readers that have only the
    checkpoint (``stateengine.catalog``).
    """

    def __init__(self, checkpoint: CheckpointStorage | str | os.PathLike, operator_id: str,
                 partition_id: int, num_partitions: int,
                 max_parallelism: int = DEFAULT_MAX_PARALLELISM, key_type: Any = None,
                 descriptors: Sequence[StateDescriptor] = (), local_dir: str | None = None,
                 min_versions_to_retain: int = 10, allow_pickle: bool = False,
                 hmac_key: bytes | str | None = None,
                 key_names: Sequence[str] | None = None, prune_every: int = 1) -> None:
        if min_versions_to_retain < 1:
            raise ValueError("min_versions_to_retain must be at least 1")
        if isinstance(prune_every, bool) or not isinstance(prune_every, int) or prune_every < 1:
            raise ValueError(f"prune_every must be an int of at least 1, got {prune_every!r}")
        self.storage = as_storage(checkpoint)
        self.hmac_key = resolve_key(hmac_key)
        self.catalog = VersionCatalog(self.storage, operator_id, self.hmac_key)
        self.operator_id = operator_id
        self.partition_id = partition_id
        self.num_partitions = num_partitions
        self.max_parallelism = max_parallelism
        self.key_group_range = KeyGroupRange.for_operator(partition_id, num_partitions,
                                                          max_parallelism)
        self.key_type = key_type
        self.descriptors = list(descriptors)
        self.min_versions_to_retain = min_versions_to_retain
        self.prune_every = prune_every
        self.allow_pickle = allow_pickle
        self.key_names = list(key_names) if key_names else None
        if not allow_pickle:
            for d in self.descriptors:
                check_no_pickle(d)
        self._local_root = local_dir or default_local_dir()
        if not self.storage.is_local and file_cache.file_cache_root() is None:
            # restores on this machine link the SSTs its databases already hold
            file_cache.configure_file_cache(os.path.join(self._local_root, "remote-files"))
        # restores on this machine skip the tables its databases wrote or checked
        untrusted.follow_local_dir(self._local_root)
        self._backend: KeyedStateBackend | None = None
        self._backend_version: int | None = None  # version the open backend holds, if clean
        self._first_version = 0  # the version this partition's state began at (see _load)
        self.last_load: dict[str, Any] = {}
        self.catalog.check_properties(max_parallelism)

    def __repr__(self) -> str:
        return (f"StateStoreProvider({self.storage.location!r}, op={self.operator_id!r}, "
                f"part={self.partition_id}/{self.num_partitions})")

    @property
    def first_version(self) -> int:
        """The version this partition's state began at when the open backend was created
        empty (0 unless the operator's state began at a later batch); a backend restored from
        a committed version leaves it at 0."""
        return self._first_version

    def latest_version(self) -> int:
        """The newest version readable for this partition's key groups (0 if none); a newest
        version that is damaged raises CorruptionError (load an older one by number)."""
        return self.catalog.latest_version(self.key_group_range)

    def get_store(self, version: int) -> "StateStore":
        """A store holding ``version``, ready for updates.

        Version 0 is the empty state, and so is the first version of an operator without any
        committed state (a job that adds stateengine at batch 41 starts from empty state at
        version 41). Once state exists, every other version must be restorable: a missing one
        is ``CheckpointNotFoundError``, never an empty start."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version must be an int >= 0, got {version!r}")
        started = time.perf_counter()
        retries = self.storage.retries
        reused = self._backend is not None and self._backend_version == version
        kind = "reused"
        if not reused:
            self._drop_backend()
            self._backend, kind = self._load(version)
        self._backend_version = None  # dirty until committed
        self._backend._unseal()
        self.last_load = {"version": version, "reused": reused, "kind": kind,
                          "seconds": time.perf_counter() - started,
                          "retries": self.storage.retries - retries}
        return StateStore(self, version, self._backend)

    def _load(self, version: int) -> tuple[KeyedStateBackend, str]:
        """(backend holding version, "empty" or "restored")."""
        os.makedirs(self._local_root, exist_ok=True)
        # once per process: directories left by processes that ended without close()
        workdirs.sweep_in_background(self._local_root)
        path = os.path.join(self._local_root, workdirs.workdir_name(
            self.operator_id, self.partition_id, self.num_partitions))
        kind = "restored"
        if version == 0 or self._begins_at(version):
            kind = "empty"
            self._first_version = version
            backend = KeyedStateBackend(path, self.max_parallelism, self.key_group_range,
                                        self.key_type, allow_pickle=self.allow_pickle)
            for d in self.descriptors:
                backend.get_state(d)
        else:
            handles = self.catalog.handles_for(version, self.key_group_range)
            backend = KeyedStateBackend.restore(
                path, handles, self.key_group_range, self.max_parallelism, self.key_type,
                self.descriptors, self.partition_id, self.num_partitions,
                allow_pickle=self.allow_pickle, hmac_key=self.hmac_key)
        backend.operator_state.operator_index = self.partition_id
        backend.operator_state.parallelism = self.num_partitions
        return backend, kind

    def _begins_at(self, version: int) -> bool:
        """Whether ``version`` is where this operator's state begins (empty)."""
        first = self.catalog.first_version()
        if first is None:
            return True  # no state yet
        self.catalog.check_begins_after(version, first)
        if first == version:
            return True  # another task of the first batch committed already
        if version < first:
            raise CheckpointNotFoundError(
                f"version {version} of {self.catalog.describe()} is before the version its "
                f"state began at ({first}): the batch ids of this run are older than those "
                f"that wrote the state. Use a new checkpoint directory or operator_id for a "
                f"query that starts over")
        return False

    def _drop_backend(self) -> None:
        if self._backend is not None:
            path = self._backend.path
            try:
                self._backend.dispose()
            finally:
                shutil.rmtree(path, ignore_errors=True)
        self._backend = None
        self._backend_version = None

    def close(self) -> None:
        """Disposes the local backend; committed versions stay in the checkpoint directory."""
        self._drop_backend()

    def __enter__(self) -> "StateStoreProvider":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StateStore:
    """One version of a partition's state being updated (Spark's StateStore)."""

    def __init__(self, provider: StateStoreProvider, version: int,
                 backend: KeyedStateBackend) -> None:
        self._provider = provider
        self.version = version
        self._backend = backend
        self.state = StoreState.UPDATING
        self.metrics: dict[str, Any] = {}
        self._start_counts = row_counts(backend)  # this version's rows and timers start here
        self._opened = time.perf_counter()

    def __repr__(self) -> str:
        p = self._provider
        return (f"StateStore[op={p.operator_id}, part={p.partition_id}/{p.num_partitions}, "
                f"version={self.version}, {self.state.value}]")

    @property
    def backend(self) -> KeyedStateBackend:
        """The partition's backend (set its current key, reach its timers and operator
        state)."""
        return self._backend

    @overload
    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState: ...
    @overload
    def get_state(self, descriptor: ListStateDescriptor) -> ListState: ...
    @overload
    def get_state(self, descriptor: SortedMapStateDescriptor) -> SortedMapState: ...
    @overload
    def get_state(self, descriptor: MapStateDescriptor) -> MapState: ...
    @overload
    def get_state(self, descriptor: ReducingStateDescriptor) -> ReducingState: ...
    @overload
    def get_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState: ...
    @overload
    def get_state(self, descriptor: StateDescriptor) -> Any: ...

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The handle of the state ``descriptor`` describes (see KeyedStateBackend.get_state)."""
        return self._backend.get_state(descriptor)

    @property
    def has_committed(self) -> bool:
        """Whether ``commit()`` succeeded."""
        return self.state is StoreState.COMMITTED

    def _refuse(self, action: str) -> None:
        raise IllegalStoreStateError(
            f"Cannot {action} after already committed or aborted ({self}); load a store with "
            f"get_store(version) to make new changes")

    def commit(self, extra: dict[str, Any] | None = None) -> int:
        """Publishes this store's state as version + 1 and returns that version.

        Partition 0 then prunes old versions (after each ``prune_every``-th version);
        pruning is maintenance, so its failure is reported in ``metrics["prune_error"]`` and
        does not undo or fail the commit.
        ``extra`` adds fields to the version's manifest (under its checksum), e.g. where
        migrated state came from."""
        if self.state is not StoreState.UPDATING:
            self._refuse("commit")
        p = self._provider
        new_version = self.version + 1
        started = time.perf_counter()
        retries = p.storage.retries  # storage calls retried during this commit (retry.py)
        attempt = uuid.uuid4().hex[:12]
        sealed: dict[str, Any] = {}

        def seal(stats: dict[str, Any]) -> dict[str, Any]:
            # Called with the upload figures just before the manifest is written, so the
            # manifest carries the batch's metrics under its checksum.
            sealed.update(batch_metrics(
                self._backend, self._start_counts, p.last_load, stats,
                (started - self._opened) * 1e3, (time.perf_counter() - started) * 1e3,
                p.storage.retries - retries))
            doc = {"created_at": int(time.time() * 1000), "version": new_version,
                   "partition": p.partition_id, "num_partitions": p.num_partitions,
                   "operator": p.operator_id, "metrics": dict(sealed)}
            # What a reader with nothing but the checkpoint needs (checkpoint/catalog.py): the
            # key's column names and the TTL the committing job configured per state.
            if p.key_names:
                doc["key_names"] = list(p.key_names)
            ttls = self._backend.ttl_settings()
            if ttls:
                doc["ttl_ms"] = {name: t.ttl_ms for name, t in sorted(ttls.items())}
            doc.update(extra or {})
            return doc

        try:
            codecs = self._backend.key_codecs
            p.catalog.write_properties(p.max_parallelism, list(codecs) if codecs else None,
                                       p._first_version, self._backend.key_is_tuple)
            handle = self._backend.checkpoint(
                new_version, p.storage,
                private_dir=p.catalog.private_dir(new_version, p.partition_id, p.num_partitions, attempt),
                manifest_path=p.catalog.manifest_path(new_version, p.partition_id, p.num_partitions),
                shared_dir=p.catalog.shared_dir,
                extra=seal,
                hmac_key=p.hmac_key,
                deferred=True,  # waited for at once: run here, not handed to the pool
            ).result()
        except BaseException:
            self._abort_backend()
            raise
        self._backend.notify_checkpoint_complete(new_version)
        self.state = StoreState.COMMITTED
        self._backend._seal(f"Cannot put after already committed or aborted ({self})")
        p._backend_version = new_version
        pruned = {"versions": 0, "files": 0}
        prune_error = None
        if p.partition_id == 0 and new_version % p.prune_every == 0:
            try:
                pruned = p.catalog.prune(new_version, p.min_versions_to_retain,
                                         num_partitions=p.num_partitions)
            except StateEngineError as e:  # maintenance must not fail a published commit
                prune_error = str(e)
        self.metrics = {
            "version": new_version,
            "keys": self._backend._native_estimate_keys(),
            "bytes": handle.stats["bytes_total"],
            "files_uploaded": handle.stats["files_uploaded"],
            "files_reused": handle.stats["files_reused"],
            "bytes_uploaded": handle.stats["bytes_uploaded"],
            "commit_seconds": time.perf_counter() - started,
            "versions_pruned": pruned["versions"],
            "files_deleted": pruned["files"],
            "prune_error": prune_error,
            "storage_retries": p.storage.retries - retries,
            "load_reused_backend": p.last_load.get("reused", False),
            "load_seconds": p.last_load.get("seconds", 0.0),
            "load_retries": p.last_load.get("retries", 0),
            "state": sealed,  # what the manifest carries (stateengine/metrics.py)
        }
        return new_version

    def abort(self) -> None:
        """Throws away this store's changes. Aborting a committed store changes nothing."""
        if self.state is not StoreState.UPDATING:
            return
        self._abort_backend()

    def _abort_backend(self) -> None:
        self.state = StoreState.ABORTED
        if not self._backend.closed:
            self._backend._seal(f"Cannot put after already committed or aborted ({self})")
        self._provider._backend_version = None  # the next load restores a clean copy
