"""KeyedStateBackend: Flink's RocksDB keyed state backend, in a Python process.

One backend owns one RocksDB instance in a local working directory, the key groups of one
``KeyGroupRange`` and one column family per registered state. The local directory is scratch
space, as in Flink: state survives through snapshots and checkpoints, never through the
directory, which is why the write-ahead log is off.

A backend is used by one thread at a time (like a Flink task); snapshots run their
asynchronous part on another thread without touching the current key. Other threads may still
call it, and may close it while calls run: see docs/reliability/thread-model.md.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from typing import Any, Callable, Iterator, overload

from typing import Sequence

from . import _native, evolution, serializers, sparktypes, workdirs
from .checkpoint.asynchronous import AsyncSnapshot
from .checkpoint.documents import resolve_key
from .checkpoint.full import take_full_snapshot
from .checkpoint.handles import HANDLE_SUFFIX, FullSnapshotHandle, IncrementalHandle
from .checkpoint.incremental import IncrementalCheckpointer
from .checkpoint.restore import restore_backend
from .checkpoint.storage import CheckpointStorage, as_storage
from .descriptors import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
                          ReducingStateDescriptor, SortedMapStateDescriptor, StateDescriptor,
                          StateKind, ValueStateDescriptor, check_no_pickle, validate_state_name)
from .functions import merge_operator_of
from .errors import (IncompatibleStateError, StateEngineError, StateRegistrationError,
                     UnknownStateError)
from .keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange, check_max_parallelism
from .operator_state import OperatorStateBackend
from .timers import TimerService
from .ttl import check_ttl_fits, check_ttl_time
from .state import (AggregatingState, ListState, MapState, ReducingState, SortedMapState,
                    ValueState)

_HANDLE_TYPES = {
    StateKind.VALUE: ValueState,
    StateKind.LIST: ListState,
    StateKind.MAP: MapState,
    StateKind.SORTED_MAP: SortedMapState,
    StateKind.REDUCING: ReducingState,
    StateKind.AGGREGATING: AggregatingState,
}

_META_FIELDS = ("value_codec", "namespace_codec", "user_key_codec", "merge", "native_op")
_FIELD_NAMES = {"value_codec": "value serializer", "namespace_codec": "namespace serializer",
                "user_key_codec": "user key serializer", "merge": "merge operator",
                "native_op": "native function"}


# The schemas of typed states: a value schema may evolve (evolution.py), a user key schema not.
_SCHEMA_ATTRIBUTES = {"value_schema": "values", "user_key_schema": "user keys"}

_FUNCTION_NAMES = {0: "none (a Python function or no function)", 1: "native SUM",
                   2: "native MIN", 3: "native MAX", 4: "native COUNT"}
_MERGE_NAMES = {0: "none", 1: "list append", 2: "native numeric"}


def describe_meta_conflict(name: str, have: dict, want: dict) -> str | None:
    """Why a descriptor cannot bind to a state registered (or restored) with meta ``have``."""
    if have["kind"] != want["kind"]:
        return (f"state '{name}' is registered as {have['kind']} state and cannot be re-registered "
                f"as {want['kind']} state; use another name for the new state")
    if bool(have.get("ttl")) != bool(want.get("ttl")):
        # A TTL state stores a timestamp with every entry: the bytes differ. Flink refuses the
        # same change (StateMigrationException) unless it migrates (Flink 2.2+); so do we.
        if want.get("ttl"):
            return (f"state '{name}' was written without TTL but the descriptor enables TTL "
                    f"(ttl=StateTtlConfig(...)); TTL cannot be turned on for existing state "
                    f"(its entries carry no timestamps). Keep the state without TTL or write "
                    f"the TTL state under another name")
        return (f"state '{name}' was written with TTL but the descriptor has none; TTL cannot "
                f"be turned off for existing state (its entries carry timestamps). Pass a "
                f"ttl=StateTtlConfig(...) to its descriptor (any duration) or use another name")
    for field in _META_FIELDS:
        if have.get(field) != want.get(field):
            what = _FIELD_NAMES[field]
            if field.endswith("codec"):
                return (f"state '{name}' has {what} '{serializers.codec_name(have[field])}' but the "
                        f"descriptor asks for '{serializers.codec_name(want[field])}'; keep the "
                        f"serializer or use another state name")
            names = _FUNCTION_NAMES if field == "native_op" else _MERGE_NAMES
            return (f"state '{name}' has {what} {names.get(have.get(field), have.get(field))} but "
                    f"the descriptor asks for {names.get(want.get(field), want.get(field))}; keep "
                    f"the function kind or use another state name")
    return None


def schemas_differ(a: dict, b: dict) -> bool:
    """Whether two metas of one state differ in their typed schemas or schema history."""
    return any(a.get(k) != b.get(k) for k in (*_SCHEMA_ATTRIBUTES, evolution.HISTORY))


class KeyedStateBackend(_native.NativeBackend):
    """Keyed state for the key groups of ``key_group_range`` out of ``max_parallelism``.

    ``key_type`` fixes the key's Spark column type(s) (``int``/``"bigint"``, ``numpy.int32``/
    ``"int"``, ``float``, ``str``, ``bytes``, ``bool``, or a tuple of them for several key
    columns); by default the first key decides, using Spark's type inference.

    ``allow_pickle`` (default False) lets this backend register states declared with
    ``value_type="pickle"`` / ``user_key_type="pickle"`` and unpickle what it reads: those
    states, and values that stateengine versions before snapshot format 2 pickled. Unpickling
    runs code chosen by whoever wrote the data, so turn it on only for checkpoints you trust;
    without it such reads raise ``PickleNotAllowedError`` and nothing is unpickled.
    """

    def __init__(self, path: str | os.PathLike, max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                 key_group_range: KeyGroupRange | None = None, key_type: Any = None,
                 allow_pickle: bool = False) -> None:
        self._setup(path, max_parallelism, key_group_range, key_type, cf_metas=[],
                    allow_pickle=allow_pickle)

    def _setup(self, path: str | os.PathLike, max_parallelism: int,
               key_group_range: KeyGroupRange | None, key_type: Any,
               cf_metas: list[dict], require_empty: bool = True,
               allow_pickle: bool = False) -> None:
        """``require_empty``: a new backend in an empty directory; otherwise the RocksDB
        directory a restore placed at path/db, which must exist as it is (never created)."""
        self._allow_pickle = bool(allow_pickle)
        # Held from a snapshot's or checkpoint's sync part until it is tracked, and by close()
        # while it refuses further calls: close() then waits for every tracked one.
        self._lifecycle = threading.Lock()
        self._max_parallelism = check_max_parallelism(max_parallelism)
        # `is None`, not `or`: an empty range has len() 0 and must stay empty, not become all
        kgr = KeyGroupRange.all(max_parallelism) if key_group_range is None else key_group_range
        if not isinstance(kgr, KeyGroupRange):
            raise TypeError(f"key_group_range must be a KeyGroupRange, got {kgr!r}")
        if not kgr.is_empty() and kgr.end >= max_parallelism:
            raise ValueError(f"{kgr} exceeds max_parallelism {max_parallelism} "
                             f"(key groups are 0..{max_parallelism - 1})")
        self._range = kgr
        self._path = os.path.abspath(os.fspath(path))
        if require_empty:
            _prepare_empty_dir(self._path)
        self._checkpoint_dir = os.path.join(self._path, "checkpoints")
        self._staging_dir = os.path.join(self._path, "staging")
        for d in (self._checkpoint_dir, self._staging_dir):
            os.makedirs(d, exist_ok=True)
        self._states: dict[str, Any] = {}
        self._pending: set[AsyncSnapshot[Any]] = set()
        specs = [_cf_spec(m) for m in cf_metas]
        workdirs.claim(self._path)  # no sweep of this process may lock (and so unlock) its LOCK
        try:
            self._native_open(os.path.join(self._path, "db"), max_parallelism, kgr.start,
                              kgr.end, specs, require_empty)
        except BaseException:
            workdirs.release(self._path)
            raise
        self._cf_index: dict[str, int] = {m["name"]: i for i, m in enumerate(cf_metas)}
        self._cf_metas: dict[str, dict] = {m["name"]: dict(m) for m in cf_metas}
        if key_type is not None:
            self._native_set_key_codecs(*serializers.key_codecs(key_type))
        self.timer_service = TimerService(self)
        self.operator_state = OperatorStateBackend()
        self._checkpointer = IncrementalCheckpointer(self)
        self.last_restore_stats: dict | None = None

    @classmethod
    def open_restored(cls, path: str, max_parallelism: int, key_group_range: KeyGroupRange,
                      cf_metas: Sequence[dict], key_type: Any,
                      allow_pickle: bool = False) -> "KeyedStateBackend":
        """Opens a restored RocksDB directory (path/db) with the column families it holds
        (checkpoint.interface.BackendFactory)."""
        backend = cls.__new__(cls)
        backend._setup(path, max_parallelism, key_group_range, key_type, list(cf_metas),
                       require_empty=False, allow_pickle=allow_pickle)
        return backend

    # ---- properties -------------------------------------------------------------------------

    @property
    def max_parallelism(self) -> int:
        """The number of key groups (fixed for the life of the state)."""
        return self._max_parallelism

    @property
    def key_group_range(self) -> KeyGroupRange:
        """The key groups this backend owns."""
        return self._range

    @property
    def path(self) -> str:
        """The local working directory (absolute)."""
        return self._path

    @property
    def allow_pickle(self) -> bool:
        """Whether this backend may unpickle what it reads (see the class docstring)."""
        return self._allow_pickle

    @property
    def state_names(self) -> list[str]:
        """Every keyed state this backend holds: registered now or restored from a snapshot."""
        return [n for n in list(self._cf_index) if not n.startswith("__")]  # one atomic copy

    def ttl_settings(self) -> dict[str, Any]:
        """The StateTtlConfig of every state registered with a TTL in this backend (the
        duration is configuration of the running job, not stored with the state)."""
        return {name: h.descriptor.ttl for name, h in list(self._states.items())
                if h.descriptor.ttl is not None}

    def state_meta(self, name: str) -> dict:
        """The stored meta of state ``name`` (see ``StateDescriptor.meta``)."""
        meta = self._cf_metas.get(name)
        if meta is None:
            raise UnknownStateError(self._unknown(name))
        return meta

    # ---- the checkpoint contract (checkpoint.interface) -------------------------------------

    @property
    def staging_dir(self) -> str:
        """Scratch directory of snapshots under construction (checkpoint layer)."""
        return self._staging_dir

    @property
    def checkpoint_dir(self) -> str:
        """Where RocksDB checkpoints (hard links of the live files) are made (checkpoint
        layer)."""
        return self._checkpoint_dir

    def column_families(self) -> list[tuple[str, int]]:
        """(name, index) of every column family (states and timers) in creation order: their
        snapshot state ids."""
        return sorted(self._cf_index.items(), key=lambda item: item[1])

    def column_family(self, name: str) -> int:
        """The column family index of state ``name`` (UnknownStateError if none)."""
        cf = self._cf_index.get(name)
        if cf is None:
            raise UnknownStateError(self._unknown(name))
        return cf

    def track_snapshot(self, snap: AsyncSnapshot[Any]) -> AsyncSnapshot[Any]:
        """Registers a running snapshot, which ``close()`` cancels and waits for."""
        self._pending = {s for s in self._pending if not s.done()}
        self._pending.add(snap)
        return snap

    def edge_entries(self, cf: int) -> tuple[tuple[bytes, bytes], ...]:
        """The first and last stored (key, value) of column family ``cf`` (none if empty):
        two seeks, so a restore can check the data against what its manifest records."""
        first = self._raw_scan(cf, limit=1)
        if not first:
            return ()
        return first[0], self._raw_scan(cf, limit=1, reverse=True)[0]

    def adopt_checkpoint(self, handle: IncrementalHandle) -> None:
        """Takes a restored checkpoint as the last confirmed one, so the next incremental
        checkpoint reuses its files."""
        self._checkpointer.adopt(handle)

    def _internal_cf(self, name: str, meta: dict) -> int:
        cf = self._cf_index.get(name)
        if cf is None:
            full = dict(meta, name=name)
            cf = self._native_create_cf(*_cf_spec(full))
            self._cf_metas[name] = full  # meta before index: snapshots list the index
            self._cf_index[name] = cf
        return cf

    def restored_column_family(self, meta: dict, source: str) -> int:
        """The column family for a restored state's meta, created if new; a conflicting meta
        under the same name is an IncompatibleStateError naming the source."""
        name = meta["name"]
        registered = self._cf_metas.get(name)
        if registered is not None:
            # Both were written: by the handles restored before this one, and this one.
            conflict = describe_meta_conflict(name, meta, registered)
            if conflict:
                raise IncompatibleStateError(f"{source}: {conflict}")
            if schemas_differ(meta, registered):
                merged = evolution.merge_histories(registered, meta)
                if merged is None or name in self._states:
                    raise IncompatibleStateError(
                        f"{source}: state '{name}' has schema {meta.get('value_schema')} "
                        f"(history {meta.get(evolution.HISTORY)}) but other handles of the "
                        f"restore have {registered.get('value_schema')} (history "
                        f"{registered.get(evolution.HISTORY)}); handles of one checkpoint "
                        f"version agree on every schema")
                self._cf_metas[name] = merged
            return self._cf_index[name]
        cf = self._native_create_cf(*_cf_spec(meta))
        self._cf_metas[name] = dict(meta)  # meta before index: snapshots list the index
        self._cf_index[name] = cf
        return cf

    def check_restored_layout(self, max_parallelism: int, key_codecs: Any, key_is_tuple: bool,
                              source: str) -> None:
        """Refuses restored data written with another max parallelism or key type
        (IncompatibleStateError naming ``source``); fixes the key type if none is set yet."""
        if max_parallelism != self._max_parallelism:
            raise IncompatibleStateError(
                f"{source} was written with max_parallelism {max_parallelism}, the backend has "
                f"{self._max_parallelism}; keep max_parallelism fixed for the life of the state")
        if not key_codecs:
            return
        codecs = tuple(key_codecs)
        if self.key_codecs is None:
            self._native_set_key_codecs(codecs, bool(key_is_tuple))
        elif tuple(self.key_codecs) != codecs or self.key_is_tuple != bool(key_is_tuple):
            names = lambda cs: ", ".join(serializers.codec_name(c) for c in cs)  # noqa: E731
            written = [serializers.codec_name(c) for c in codecs]
            hint = repr(tuple(written)) if key_is_tuple else repr(written[0])
            raise IncompatibleStateError(
                f"{source} holds keys of type ({names(codecs)}) but this backend's keys are "
                f"({names(self.key_codecs)}): the key type changed since the checkpoint was "
                f"written. Open it with key_type={hint} (the type it was written with), or "
                f"keep the new key type in a new checkpoint location; to convert the state, "
                f"read it with stateengine.spark.read_state, cast the key column and write it "
                f"with bootstrap_state")

    # ---- registration -----------------------------------------------------------------------

    # One overload per descriptor kind, so that editors and type checkers know the handle's
    # methods (SortedMap before Map: it is a subclass).
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
        """The handle of the state ``descriptor`` describes, registering it on first use."""
        if not isinstance(descriptor, StateDescriptor):
            raise TypeError(f"get_state takes a state descriptor (ValueStateDescriptor, ...), "
                            f"got {type(descriptor).__name__}")
        self._ensure_open()  # a cached handle must not hide that the backend is closed
        name = descriptor.name
        if not self._allow_pickle:
            check_no_pickle(descriptor)
        want = descriptor.meta()
        have = self._cf_metas.get(name)
        if have is not None:
            conflict = describe_meta_conflict(name, have, want)
            if conflict:
                raise StateRegistrationError(conflict)
            if name in self._states:
                registered = self._states[name].descriptor
                if any(have.get(k) != want.get(k) for k in _SCHEMA_ATTRIBUTES):
                    raise StateRegistrationError(
                        f"state '{name}' is registered with value schema "
                        f"{have.get('value_schema') or '(none)'} and user key schema "
                        f"{have.get('user_key_schema') or '(none)'}; the descriptor declares "
                        f"{want.get('value_schema') or '(none)'} and "
                        f"{want.get('user_key_schema') or '(none)'}. A backend keeps one schema "
                        f"per state: a value schema evolves when the state is restored into a "
                        f"new backend (docs: schema evolution)")
                if registered.ttl != descriptor.ttl:
                    raise StateRegistrationError(
                        f"state '{name}' is registered with {registered.ttl!r}; the descriptor "
                        f"asks for {descriptor.ttl!r}. A backend keeps one TTL setting per "
                        f"state: pass the same StateTtlConfig (it may change when the state is "
                        f"restored into a new backend)")
                return self._states[name]
            # A restored state: its stored schema may evolve into the declared one.
            want = evolution.evolve_meta(name, have, want, descriptor.evolution)
        if descriptor.ttl is not None:  # before anything is created: refused means unchanged
            check_ttl_fits(name, descriptor.ttl.ttl_ms, self.ttl_time)
        cf = self._cf_index.get(name)
        if cf is None:
            cf = self._native_create_cf(*_cf_spec(want))
            self._cf_metas[name] = want  # before the index: a snapshot on another thread
            self._cf_index[name] = cf  # lists the index, then reads each meta
        if descriptor.ttl is not None:
            ttl = descriptor.ttl
            # a typed list's elements are measured by their schema (csrc/ttl.h), and by the
            # schema of their version once it evolved
            program = (sparktypes.program(descriptor.value_schema)
                       if descriptor.value_schema is not None else b"")
            self._native_configure_ttl(cf, ttl.ttl_ms, ttl.update_on_read, ttl.return_expired,
                                       program, evolution.versions_spec(want))
        handle = _HANDLE_TYPES[descriptor.kind]()
        handle._bind(self, cf, descriptor, int(descriptor.value_codec),
                     int(descriptor.namespace_codec))
        if descriptor.value_schema is not None:
            handle._set_value_row(evolution.value_codec(want, f"state '{name}'",
                                                        descriptor.value_schema))
        kind = descriptor.kind
        if kind is StateKind.VALUE:
            handle._set_default(descriptor.default)
        elif kind in (StateKind.MAP, StateKind.SORTED_MAP):
            uk_schema = descriptor.user_key_schema
            handle._set_user_key_codec(int(descriptor.user_key_codec),
                                       None if uk_schema is None else _native.row_codec(uk_schema))
        elif kind is StateKind.REDUCING:
            handle._set_function(descriptor.reduce_function, descriptor.native)
        elif kind is StateKind.AGGREGATING:
            handle._set_function(descriptor.aggregate_function, descriptor.native)
        self._states[name] = handle
        self._cf_metas[name] = want
        return handle

    def _on_first_key(self, key: Any) -> None:
        self._native_set_key_codecs(_native.infer_key_codecs(key), isinstance(key, tuple))

    def _unknown(self, name: str) -> str:
        known = ", ".join(sorted(self.state_names)) or "none"
        return f"no state named '{name}' in this backend (states: {known})"

    def _cf_of(self, name: str) -> int:
        validate_state_name(name)
        cf = self._cf_index.get(name)
        if cf is None:
            raise UnknownStateError(self._unknown(name))
        return cf

    # ---- whole-backend queries --------------------------------------------------------------

    def get_keys(self, state_name: str, namespace: Any = None) -> Iterator[Any]:
        """Every key with an entry of ``state_name`` in ``namespace``, each once."""
        self._ensure_open()  # raise now, not at the first next() of the lazy iterator
        cf = self._cf_of(state_name)
        meta = self.state_meta(state_name)
        ns = _native.encode_for_codec(meta["namespace_codec"], namespace)
        has_user_key = meta["kind"] in (StateKind.MAP.value, StateKind.SORTED_MAP.value)
        return self._native_iter_keys(cf, meta["namespace_codec"], ns, has_user_key)

    def num_state_entries(self, state_name: str | None = None) -> int:
        """RocksDB entries of one state, or of all states (map states count one per user key)."""
        if state_name is not None:
            return self._native_count(self._cf_of(state_name))
        return sum(self._native_count(self._cf_index[n]) for n in self.state_names)

    # ---- stored entries (state readers, the CLI, deleteIfExists) -------------------------

    def stored_entries(self, name: str, chunk: int = 4096) -> Iterator[list[tuple[bytes, bytes]]]:
        """Entries of a state or timer column family as stored (composite key, value bytes
        with TTL stamps), in key order, as lists of at most ``chunk``: memory stays bounded
        however large the state. ``parse_state_key``/``parse_timer_key`` read the keys."""
        cf = self.column_family(name)
        lower = b""
        while True:
            entries = self._raw_scan(cf, lower, b"", chunk)
            if entries:
                yield entries
            if len(entries) < chunk:
                return
            lower = entries[-1][0] + b"\x00"  # the next key after the last one

    def parse_state_key(self, raw: bytes, namespace_codec: int,
                        has_user_key: bool) -> tuple[int, Any, bytes, bytes]:
        """(key group, key, namespace bytes, user key bytes) of a stored state key;
        ``CorruptionError`` when it does not fit the layout."""
        return self._parse_state_key(raw, namespace_codec, has_user_key)

    def parse_timer_key(self, raw: bytes) -> tuple[int, int, Any, bytes]:
        """(key group, timestamp, key, namespace bytes) of a stored timer key."""
        return self._parse_timer_key(raw)

    def delete_all_entries(self, name: str) -> None:
        """Every entry of a state in this backend, all keys and namespaces (Spark's
        ``deleteIfExists``); nothing when the state has none."""
        cf = self._cf_of(name)
        # Keys begin with a 1- or 2-byte key-group prefix below 0xFFFF: this spans them all.
        self._native_delete_range(cf, b"", b"\xff\xff\xff")

    def set_ttl_time(self, timestamp_ms: int) -> None:
        """The time, in milliseconds since the epoch, that states with TTL use from now on:
        writes stamp entries with it, reads check expiry against it, and the compaction filter
        purges what expired by it. TTL never reads the wall clock; pass processing time, or in
        a micro-batch the batch's timestamp so that a replay sees the same expiry. A time
        whose sum with the TTL of a registered state leaves int64 milliseconds is refused
        (``TtlTimeRangeError``) and the time stays as it was."""
        ttls = {n: h.descriptor.ttl.ttl_ms for n, h in list(self._states.items())
                if h.descriptor.ttl is not None}
        super().set_ttl_time(check_ttl_time(timestamp_ms, ttls))

    # ---- snapshots and checkpoints -------------------------------------------------------

    def snapshot(self, target: CheckpointStorage | str | os.PathLike, name: str,
                 compress: bool = True,
                 hmac_key: bytes | str | None = None) -> AsyncSnapshot[FullSnapshotHandle]:
        """Starts a full snapshot (savepoint layout) to ``name`` under ``target`` (a directory
        or URI), with its handle published beside it as ``name + ".handle.json"``. Writes after
        this call returns are not in it; ``result()`` gives the handle. ``hmac_key`` (default
        ``$STATEENGINE_CHECKPOINT_KEY``) authenticates the handle and the files' content."""
        storage, key = as_storage(target), resolve_key(hmac_key)
        with self._lifecycle:
            self.timer_service._return_in_flight()
            return take_full_snapshot(self, storage, name, compress, key)

    def checkpoint(self, checkpoint_id: int, target: CheckpointStorage | str | os.PathLike,
                   private_dir: str | None = None, manifest_path: str | None = None,
                   shared_dir: str = "shared",
                   extra: dict | Callable[[dict], dict] | None = None,
                   hmac_key: bytes | str | None = None,
                   deferred: bool = False) -> AsyncSnapshot[IncrementalHandle]:
        """Starts an incremental checkpoint: only SST files the last confirmed checkpoint does
        not hold are uploaded (to ``shared_dir``); other files go to ``private_dir`` (default
        ``chk-<id>/kg<start>-<end>-<unique>``, so several backends may checkpoint the same id
        into one root); the handle (plus ``extra`` fields) is published to ``manifest_path``
        (default, with the default private dir: ``<private dir>.handle.json``). ``hmac_key`` as
        for ``snapshot``; ``deferred``: the asynchronous part runs in the thread that asks for
        its result, for a caller that waits at once."""
        private = private_dir or (f"chk-{checkpoint_id}/kg{self._range.start}-{self._range.end}-"
                                  f"{uuid.uuid4().hex[:12]}")
        if manifest_path is None and private_dir is None:
            manifest_path = private + HANDLE_SUFFIX
        storage, key = as_storage(target), resolve_key(hmac_key)
        with self._lifecycle:
            self.timer_service._return_in_flight()
            return self._checkpointer.checkpoint(checkpoint_id, storage, private, manifest_path,
                                                 shared_dir, extra, key, deferred)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Confirms checkpoint ``checkpoint_id`` (see IncrementalCheckpointer)."""
        self._checkpointer.notify_checkpoint_complete(checkpoint_id)

    @property
    def num_retained_checkpoints(self) -> int | None:
        """How many confirmed incremental checkpoints are kept (None: all); setting it
        deletes older ones (files this backend uploaded and no retained checkpoint
        references)."""
        return self._checkpointer.num_retained

    @num_retained_checkpoints.setter
    def num_retained_checkpoints(self, n: int | None) -> None:
        """Keep only the newest n confirmed checkpoints; older ones are deleted (files this
        backend uploaded and no retained checkpoint references)."""
        self._checkpointer.num_retained = n

    @classmethod
    def restore(cls, path: str | os.PathLike, handles: Sequence[Any],
                key_group_range: KeyGroupRange | None = None, max_parallelism: int | None = None,
                key_type: Any = None, descriptors: Sequence[StateDescriptor] = (),
                operator_index: int = 0, parallelism: int = 1,
                allow_pickle: bool = False,
                hmac_key: bytes | str | None = None) -> "KeyedStateBackend":
        """A new backend at ``path`` holding ``key_group_range`` (default: the handles' union)
        restored from full snapshots or incremental checkpoints written at any parallelism.
        ``handles`` are handle objects, their ``to_dict()`` forms, or handles read with
        ``stateengine.load_handle``. ``descriptors`` are checked against the restored metas up
        front; operator state is redistributed to instance ``operator_index`` of
        ``parallelism``. ``hmac_key`` (default ``$STATEENGINE_CHECKPOINT_KEY``) is required of
        handle dicts.

        Checkpoints written before snapshot format 2 may hold pickles (values, namespaces and
        map user keys of the default serializer that were not primitives, and operator
        state). With ``allow_pickle=True`` they are unpickled and converted to the native
        encoding as they are restored; without it a pickled namespace, user key or operator
        state fails the restore with ``PickleNotAllowedError`` (nothing is unpickled), and
        pickled values raise it when read."""
        return restore_backend(cls, os.path.abspath(os.fspath(path)), handles, key_group_range,
                               max_parallelism, key_type, descriptors, operator_index, parallelism,
                               resolve_key(hmac_key), allow_pickle=allow_pickle)

    @classmethod
    def open_for_reading(cls, path: str | os.PathLike, handles: Sequence[Any],
                         key_group_range: KeyGroupRange | None = None,
                         allow_pickle: bool = False,
                         hmac_key: bytes | str | None = None) -> "KeyedStateBackend":
        """Keyed state of ``handles`` as stored, for tools that read raw entries (``stateengine
        dump``, ``stateengine.spark.read_state``): no operator state and no conversion of
        entries written before format 2, so a pickle stays a pickle until a reader with
        ``allow_pickle`` decodes it. ``hmac_key`` as for ``restore``."""
        return restore_backend(cls, os.path.abspath(os.fspath(path)), handles, key_group_range,
                               None, None, (), 0, 1, resolve_key(hmac_key),
                               allow_pickle=allow_pickle, keyed_only=True)

    def _wait_pending(self, cancel: bool) -> None:
        for snap in list(self._pending):
            if cancel:
                snap.cancel()
            try:
                snap.result()
            except BaseException:  # the owner of the snapshot sees its error
                pass
        self._pending.clear()

    def _seal(self, reason: str) -> None:
        """Refuses every later write, operator state included, with IllegalStoreStateError."""
        super()._seal(reason)
        self.operator_state._sealed = reason

    def _unseal(self) -> None:
        super()._unseal()
        self.operator_state._sealed = None

    # ---- lifecycle --------------------------------------------------------------------------

    def metrics(self) -> dict[str, int]:
        """What this backend holds now, from RocksDB's own figures (nothing is scanned):
        ``estimated_keys`` (entries over every state, RocksDB's estimate; ``state_keys`` of
        the user's states, ``timers`` of the timer families), ``live_sst_bytes``
        and ``sst_files`` (the files a checkpoint would reference), ``memtable_bytes`` (not yet
        flushed), ``table_reader_bytes`` (index and filter blocks outside the cache),
        ``pending_compaction_bytes``, ``pinned_bytes`` (pinned in the block cache, which all
        backends of the process share), ``block_cache_bytes`` (that cache's usage, memtables
        included), ``rows_read``/``rows_written``/``rows_deleted`` (rows the state handles
        read, wrote and deleted since the backend opened, one per element of a batch call;
        timers, restores and raw access do not count) and ``states`` (registered states and
        timers)."""
        m = self._native_metrics()
        m["states"] = len(self._cf_index)
        return m

    def close(self) -> None:
        """Cancels running snapshots, then closes RocksDB; every later call on the backend or
        its handles raises BackendClosedError. Calls running on other threads finish first (or
        raise BackendClosedError at their next step); a second close() waits for the first.
        The working directory stays (see ``dispose``)."""
        with self._lifecycle:
            began = self._native_begin_close()
        if not began:
            self._native_wait_closed()
            return
        try:
            self._wait_pending(cancel=True)
        finally:
            self._native_finish_close()
            workdirs.release(self._path)  # RocksDB has dropped its lock

    def dispose(self) -> None:
        """Closes the backend and deletes its working directory."""
        self.close()
        shutil.rmtree(self._path, ignore_errors=True)

    def __enter__(self) -> "KeyedStateBackend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (f"KeyedStateBackend({self._path!r}, max_parallelism={self._max_parallelism}, "
                f"{self._range}, {state})")


# Where a state with TTL keeps its timestamps (csrc/ttl.h TtlLayout), by kind.
_TTL_LAYOUTS = {StateKind.LIST.value: 3, StateKind.MAP.value: 2, StateKind.SORTED_MAP.value: 2}


def _cf_spec(meta: dict) -> tuple[str, int, int, int, int]:
    """(name, merge kind, C++ merge operator, value codec, TTL layout) of a state's column
    family; the layout is 0 without TTL, else 1 (value), 2 (map) or 3 (list)."""
    layout = _TTL_LAYOUTS.get(meta["kind"], 1) if meta.get("ttl") else 0
    return (meta["name"], meta["merge"], merge_operator_of(meta["native_op"]), meta["value_codec"],
            layout)


def _prepare_empty_dir(path: str) -> None:
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise StateEngineError(f"backend path {path} exists and is not a directory")
        if os.listdir(path):
            raise StateEngineError(
                f"backend path {path} is not empty; a backend's working directory is scratch "
                f"space and must start empty (restore state from a snapshot or checkpoint instead)")
    else:
        os.makedirs(path)
