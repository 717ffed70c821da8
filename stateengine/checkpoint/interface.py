"""What the checkpoint code needs from a keyed state backend, as a named contract.

The dependency runs one way: ``backend.py`` imports the checkpoint package and implements these
protocols; nothing in ``stateengine.checkpoint`` imports the backend or touches its private
members. The native snapshot and restore functions (``_native.NativeFullSnapshot.take``,
``create_checkpoint``, ``restore_sections``, ``clip_to_range``, ``copy_key_groups``,
``convert_legacy_entries``) take the backend object itself: it is a ``_native.NativeBackend``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence

from ..keygroups import KeyGroupRange

if TYPE_CHECKING:
    from ..operator_state import OperatorStateBackend
    from .asynchronous import AsyncSnapshot
    from .handles import IncrementalHandle


class SnapshotSource(Protocol):
    """A backend as snapshots and checkpoints read it."""

    operator_state: "OperatorStateBackend"

    @property
    def max_parallelism(self) -> int: ...

    @property
    def key_group_range(self) -> KeyGroupRange: ...

    @property
    def key_codecs(self) -> tuple[int, ...] | None: ...

    @property
    def key_is_tuple(self) -> bool: ...

    @property
    def staging_dir(self) -> str:
        """Local scratch space for downloads and temporary files."""

    @property
    def checkpoint_dir(self) -> str:
        """Local directory where RocksDB checkpoints (hard links) are created."""

    def column_families(self) -> list[tuple[str, int]]:
        """(name, column family index) of every state and timer column family, in creation
        order (their snapshot state ids)."""

    def state_meta(self, name: str) -> dict:
        """The meta (fixed fields and attributes, checkpoint/meta.py) of a column family named
        by ``column_families()``, timers included."""

    def track_snapshot(self, snap: "AsyncSnapshot[Any]") -> "AsyncSnapshot[Any]":
        """Registers a running snapshot, which ``close()`` cancels and waits for."""


class RestoreTarget(SnapshotSource, Protocol):
    """A backend being filled by a restore. The conversion of checkpoints written before
    format 2 (legacy.py) walks ``column_families()`` with ``state_meta()`` of each, timers
    included, and converts each column family natively."""

    last_restore_stats: dict | None

    def column_family(self, name: str) -> int:
        """The index of an existing column family (state or timers)."""

    def restored_column_family(self, meta: dict, source: str) -> int:
        """The column family for a restored state's meta, created if new; a conflicting meta
        under the same name raises IncompatibleStateError naming source."""

    def check_restored_layout(self, max_parallelism: int, key_codecs: Any, key_is_tuple: bool,
                              source: str) -> None:
        """Raises IncompatibleStateError unless restored data fits the backend's key layout;
        adopts the key type if the backend has none yet."""

    def edge_entries(self, cf: int) -> tuple[tuple[bytes, bytes], ...]:
        """The first and last stored (key, value) of column family ``cf`` (none if empty)."""

    def parse_state_key(self, raw: bytes, namespace_codec: int,
                        has_user_key: bool) -> tuple[int, Any, bytes, bytes]:
        """(key group, key, namespace bytes, user key bytes); CorruptionError if raw does not
        fit the backend's key layout."""

    def parse_timer_key(self, raw: bytes) -> tuple[int, int, Any, bytes]:
        """(key group, timestamp, key, namespace bytes) of a stored timer key."""

    def adopt_checkpoint(self, handle: "IncrementalHandle") -> None:
        """Lets the next incremental checkpoint reuse the restored checkpoint's files."""

    def get_state(self, descriptor: Any) -> Any: ...

    def dispose(self) -> None: ...


class BackendFactory(Protocol):
    """The backend class, as restore creates backends. ``allow_pickle`` is the reader's
    consent to unpickle what the backend reads (see KeyedStateBackend)."""

    def __call__(self, path: str, max_parallelism: int, key_group_range: KeyGroupRange,
                 key_type: Any, allow_pickle: bool = False) -> RestoreTarget:
        """A new, empty backend in an empty directory."""

    def open_restored(self, path: str, max_parallelism: int, key_group_range: KeyGroupRange,
                      cf_metas: Sequence[dict], key_type: Any,
                      allow_pickle: bool = False) -> RestoreTarget:
        """A backend over the RocksDB directory ``path/db`` a restore placed there, which must
        exist and hold exactly the column families of ``cf_metas``."""
