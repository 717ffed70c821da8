"""State handles: what a finished snapshot or checkpoint is, as plain JSON-able data.

A handle names its checkpoint storage root (a URI), so restoring needs nothing but handles.
Every file a handle references carries its size and CRC-32C, which restore verifies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..keygroups import KeyGroupRange


@dataclass(frozen=True)
class FileRef:
    """A file in checkpoint storage (path relative to the root) and what it must contain."""

    path: str
    size: int
    crc32c: int
    local_name: str = ""  # name in the RocksDB directory (incremental checkpoints)


@dataclass
class OperatorStateRef:
    file: FileRef
    operator_index: int
    parallelism: int


@dataclass
class FullSnapshotHandle:
    """A full snapshot in the unified savepoint layout (one file)."""

    root: str
    file: FileRef
    key_group_range: KeyGroupRange
    max_parallelism: int
    offsets: dict[int, int]  # key group -> offset of its section (only non-empty groups)
    meta_length: int
    stats: dict[str, int] = field(default_factory=dict)
    operator_state: OperatorStateRef | None = None
    kind: str = "full"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["key_group_range"] = [self.key_group_range.start, self.key_group_range.end]
        d["offsets"] = {str(k): v for k, v in self.offsets.items()}
        return d


# Generation of the entry encodings an incremental checkpoint holds: 1 (no field in the
# manifest) may hold pickled ANY values, namespaces and user keys; 2 holds them natively
# (snapshot format 2, checkpoint/meta.py). Restore converts generation 1 (checkpoint/legacy.py).
VALUE_FORMAT = 2


@dataclass
class IncrementalHandle:
    """An incremental checkpoint: RocksDB's files, shared SSTs deduplicated across checkpoints."""

    root: str
    checkpoint_id: int
    key_group_range: KeyGroupRange
    max_parallelism: int
    states: list[dict[str, Any]]  # column family metas in column family order
    key_codecs: list[int] | None
    key_is_tuple: bool
    shared: list[FileRef]
    private: list[FileRef]
    stats: dict[str, int] = field(default_factory=dict)
    operator_state: OperatorStateRef | None = None
    kind: str = "incremental"
    value_format: int = VALUE_FORMAT

    def files(self) -> list[FileRef]:
        return [*self.shared, *self.private]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["key_group_range"] = [self.key_group_range.start, self.key_group_range.end]
        return d


def _file(d: dict[str, Any]) -> FileRef:
    return FileRef(**d)


def _op_state(d: dict[str, Any] | None) -> OperatorStateRef | None:
    if not d:
        return None
    return OperatorStateRef(_file(d["file"]), d["operator_index"], d["parallelism"])


def handle_from_dict(d: dict[str, Any]) -> FullSnapshotHandle | IncrementalHandle:
    kgr = KeyGroupRange(*d["key_group_range"])
    if d["kind"] == "full":
        return FullSnapshotHandle(
            root=d["root"], file=_file(d["file"]), key_group_range=kgr,
            max_parallelism=d["max_parallelism"],
            offsets={int(k): v for k, v in d["offsets"].items()},
            meta_length=d["meta_length"], stats=d.get("stats", {}),
            operator_state=_op_state(d.get("operator_state")))
    if d["kind"] == "incremental":
        return IncrementalHandle(
            root=d["root"], checkpoint_id=d["checkpoint_id"], key_group_range=kgr,
            max_parallelism=d["max_parallelism"], states=d["states"],
            key_codecs=d["key_codecs"], key_is_tuple=d["key_is_tuple"],
            shared=[_file(f) for f in d["shared"]], private=[_file(f) for f in d["private"]],
            stats=d.get("stats", {}), operator_state=_op_state(d.get("operator_state")),
            value_format=d.get("value_format", 1))
    raise ValueError(f"unknown handle kind {d.get('kind')!r}")
