"""State handles: what a finished snapshot or checkpoint is, as plain JSON-able data.

Every file a handle references carries its size and CRC-32C (and, when a checkpoint key is
configured, its SHA-256), which restore verifies; paths are relative to the checkpoint root.
In memory a handle also knows its ``root`` (the storage it was written to or read from), so a
restore needs nothing but handles; persisted handles and manifests never record the root: they
are resolved against the directory they are read from, so a checkpoint can be copied or moved.

Persisted form (``encode_handle`` / ``decode_handle``): a sealed document (documents.py) whose
every field is checked on the way in, types and ranges: a key-group range inside max
parallelism, snapshot offsets inside the file and increasing, known codec ids, sizes that are
not negative, paths confined to the root (paths.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field as dc_field
from typing import Any

from ..errors import CorruptionError
from ..keygroups import KeyGroupRange
from . import documents as docs
from .documents import Invalid, want_dict, want_int, want_list, want_str
from .meta import HEADER, check_key_layout, check_state_entry
from .paths import UnsafePath, check_name, check_relative

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MANIFEST_NAME = re.compile(r"^MANIFEST-\d+$")
# The fields handles had before format 2, plus what StateStore added to its manifests.
_STORE_EXTRA = frozenset({"created_at", "version", "partition", "num_partitions", "operator"})
LEGACY_FULL = docs.LegacyShape(
    frozenset({"root", "file", "key_group_range", "max_parallelism", "offsets", "meta_length",
               "stats", "operator_state", "kind"}))
# value_format: unsealed manifests written between the typed value encoding (H3) and sealed
# documents carry it (always 2); older ones have none (1).
LEGACY_INCREMENTAL = docs.LegacyShape(
    frozenset({"root", "checkpoint_id", "key_group_range", "max_parallelism", "states",
               "key_codecs", "key_is_tuple", "shared", "private", "stats", "operator_state",
               "kind"}), _STORE_EXTRA | {"value_format"})
RESERVED_FIELDS = frozenset({"format", "checksum", "hmac", "root", "kind"})


@dataclass(frozen=True)
class FileRef:
    """A file in checkpoint storage (path relative to the root) and what it must contain."""

    path: str
    size: int
    crc32c: int
    local_name: str = ""  # name in the RocksDB directory (incremental checkpoints)
    sha256: str = ""  # hex digest, written when a checkpoint key is configured

    def to_dict(self) -> dict[str, Any]:
        d = {"path": self.path, "size": self.size, "crc32c": self.crc32c,
             "local_name": self.local_name}
        if self.sha256:
            d["sha256"] = self.sha256
        return d


@dataclass
class OperatorStateRef:
    file: FileRef
    operator_index: int
    parallelism: int

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file.to_dict(), "operator_index": self.operator_index,
                "parallelism": self.parallelism}


def _op_dict(ref: OperatorStateRef | None) -> dict[str, Any] | None:
    return None if ref is None else ref.to_dict()


@dataclass
class FullSnapshotHandle:
    """A full snapshot in the unified savepoint layout (one file)."""

    root: str
    file: FileRef
    key_group_range: KeyGroupRange
    max_parallelism: int
    offsets: dict[int, int]  # key group -> offset of its section (only non-empty groups)
    meta_length: int
    stats: dict[str, int] = dc_field(default_factory=dict)
    operator_state: OperatorStateRef | None = None
    kind: str = "full"
    # where the handle was read from, for messages (never persisted; "" for a new handle)
    source: str = dc_field(default="", compare=False)

    def files(self) -> list[FileRef]:
        return [self.file] + ([self.operator_state.file] if self.operator_state else [])

    def document(self) -> dict[str, Any]:
        """The persisted fields (everything but the root)."""
        return {"kind": self.kind, "file": self.file.to_dict(),
                "key_group_range": [self.key_group_range.start, self.key_group_range.end],
                "max_parallelism": self.max_parallelism,
                "offsets": {str(k): v for k, v in sorted(self.offsets.items())},
                "meta_length": self.meta_length, "stats": dict(self.stats),
                "operator_state": _op_dict(self.operator_state)}

    def to_dict(self, hmac_key: bytes | str | None = None) -> dict[str, Any]:
        """The sealed document plus ``root``: the in-memory form that ``handle_from_dict`` and
        ``KeyedStateBackend.restore`` take (e.g. to ship handles to Spark tasks)."""
        return dict(docs.seal(self.document(), docs.resolve_key(hmac_key)), root=self.root)


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
    stats: dict[str, int] = dc_field(default_factory=dict)
    operator_state: OperatorStateRef | None = None
    kind: str = "incremental"
    value_format: int = VALUE_FORMAT
    source: str = dc_field(default="", compare=False)  # as FullSnapshotHandle.source
    # where its manifest is published, relative to root ("" if unknown): a commit that reuses
    # this checkpoint's files checks that it still is (incremental.py)
    manifest: str = dc_field(default="", compare=False)

    def files(self) -> list[FileRef]:
        """The RocksDB files (not the operator-state file)."""
        return [*self.shared, *self.private]

    def all_files(self) -> list[FileRef]:
        return self.files() + ([self.operator_state.file] if self.operator_state else [])

    def document(self) -> dict[str, Any]:
        return {"kind": self.kind, "checkpoint_id": self.checkpoint_id,
                "key_group_range": [self.key_group_range.start, self.key_group_range.end],
                "max_parallelism": self.max_parallelism,
                "states": [dict(s) for s in self.states],
                "key_codecs": list(self.key_codecs) if self.key_codecs else None,
                "key_is_tuple": self.key_is_tuple,
                "shared": [f.to_dict() for f in self.shared],
                "private": [f.to_dict() for f in self.private],
                "stats": dict(self.stats), "operator_state": _op_dict(self.operator_state),
                "value_format": self.value_format}

    def to_dict(self, hmac_key: bytes | str | None = None) -> dict[str, Any]:
        return dict(docs.seal(self.document(), docs.resolve_key(hmac_key)), root=self.root)


Handle = FullSnapshotHandle | IncrementalHandle


def encode_handle(handle: Handle, hmac_key: bytes | None,
                  extra: dict[str, Any] | None = None) -> bytes:
    """The bytes of a handle's persisted, sealed document (``extra`` fields included)."""
    doc = handle.document()
    if extra:
        clash = RESERVED_FIELDS.union(doc).intersection(extra)
        if clash:
            raise ValueError(f"extra manifest fields {sorted(clash)} would replace the handle's own")
        doc.update(extra)
    return docs.dumps(docs.seal(doc, hmac_key))


def decode_handle(data: bytes, root: str, source: str, hmac_key: bytes | None) -> tuple[Handle, dict]:
    """(handle resolved against root, the whole document) from a persisted handle's bytes."""
    if len(data) > docs.MAX_DOCUMENT_BYTES:
        raise CorruptionError(f"checkpoint file {source} has {len(data)} bytes, more than a "
                              f"handle may ({docs.MAX_DOCUMENT_BYTES}); it is not a handle")
    doc = docs.parse(data, source)
    return _from_document(doc, root, source, hmac_key), doc


def handle_from_dict(d: dict[str, Any], root: str | None = None, source: str = "handle",
                     hmac_key: bytes | str | None = None) -> Handle:
    """A handle from its dict form (``to_dict``, or a manifest's document with ``root``);
    the seal and every field are checked as for a persisted handle."""
    if not isinstance(d, dict):
        raise CorruptionError(f"{source} is a {type(d).__name__}, not a handle document")
    where = root if root is not None else d.get("root")
    if not isinstance(where, str) or not where:
        raise CorruptionError(f"{source} names no checkpoint root; pass root= (the directory or "
                              f"URI the checkpoint lives in)")
    return _from_document(d, where, source, docs.resolve_key(hmac_key))


def _from_document(doc: dict[str, Any], root: str, source: str, key: bytes | None) -> Handle:
    kind = doc.get("kind")
    legacy_shape = LEGACY_FULL if kind == "full" else LEGACY_INCREMENTAL
    legacy = docs.open_sealed(doc, source, key, legacy_shape)
    try:
        if kind == "full":
            handle: Handle = _full(doc, root, key)
        elif kind == "incremental":
            handle = _incremental(doc, root, key, legacy)
        else:
            raise Invalid(f"has unknown handle kind {kind!r}")
    except (Invalid, UnsafePath, ValueError) as e:
        raise CorruptionError(f"checkpoint handle {source} is invalid: {e}; it is corrupted"
                              ) from None
    handle.source = source
    return handle


# ---- field decoding --------------------------------------------------------------------------

def _file(d: Any, what: str, key: bytes | None) -> FileRef:
    d = want_dict(d, what)
    unknown = set(d) - {"path", "size", "crc32c", "local_name", "sha256"}
    if unknown:
        raise Invalid(f"{what} has unknown fields {sorted(unknown)}")
    path = check_relative(want_str(docs.field(d, "path", what), f"{what} path"), f"{what} path")
    size = want_int(docs.field(d, "size", what), f"{what} size", 0)
    crc = want_int(docs.field(d, "crc32c", what), f"{what} crc32c", 0, 0xFFFFFFFF)
    local = want_str(docs.field(d, "local_name", what), f"{what} local_name")
    if local:
        check_name(local, f"{what} local_name")
    sha = d.get("sha256", "")
    if sha and (not isinstance(sha, str) or not _SHA256.match(sha)):
        raise Invalid(f"{what} has a malformed sha256 {sha!r}")
    if key and not sha:
        raise Invalid(f"{what} ({path}) carries no SHA-256 although a checkpoint key is "
                      f"configured (its content would not be authenticated)")
    return FileRef(path, size, crc, local, sha)


def _range(doc: dict, max_p: int) -> KeyGroupRange:
    r = want_list(docs.field(doc, "key_group_range", "the handle"), "key_group_range")
    if len(r) != 2:
        raise Invalid(f"key_group_range {r!r} is not [start, end]")
    start = want_int(r[0], "key_group_range start", 0, max_p)
    end = want_int(r[1], "key_group_range end", start - 1, max_p - 1)
    return KeyGroupRange(start, end)


def _layout(doc: dict) -> int:
    max_p = docs.field(doc, "max_parallelism", "the handle")
    check_key_layout(max_p, None, False, "the handle")
    return max_p


def _stats(doc: dict) -> dict[str, int]:
    stats = want_dict(doc.get("stats", {}), "stats")
    for k, v in stats.items():
        want_int(v, f"stats[{k!r}]")
    return dict(stats)


def _op_state(d: Any, key: bytes | None) -> OperatorStateRef | None:
    if d is None:
        return None
    d = want_dict(d, "operator_state")
    ref = _file(docs.field(d, "file", "operator_state"), "operator_state file", key)
    p = want_int(docs.field(d, "parallelism", "operator_state"), "operator_state parallelism", 1)
    i = want_int(docs.field(d, "operator_index", "operator_state"),
                 "operator_state operator_index", 0, p - 1)
    return OperatorStateRef(ref, i, p)


def _full(doc: dict, root: str, key: bytes | None) -> FullSnapshotHandle:
    max_p = _layout(doc)
    kgr = _range(doc, max_p)
    ref = _file(docs.field(doc, "file", "the handle"), "file", key)
    meta_length = want_int(docs.field(doc, "meta_length", "the handle"), "meta_length",
                           HEADER.size, ref.size)
    raw = want_dict(docs.field(doc, "offsets", "the handle"), "offsets")
    offsets: dict[int, int] = {}
    for k, v in raw.items():
        if not (k.isascii() and k.isdigit()) or str(int(k)) != k:
            raise Invalid(f"offsets has a key group {k!r} that is not a number")
        kg = int(k)
        if not kgr.contains(kg):
            raise Invalid(f"offsets names key group {kg} outside the handle's range {kgr}")
        offsets[kg] = want_int(v, f"offset of key group {kg}", meta_length, ref.size - 1)
    previous = -1
    for kg in sorted(offsets):  # sections are written in key-group order
        if offsets[kg] <= previous:
            raise Invalid(f"offset of key group {kg} ({offsets[kg]}) does not follow the "
                          f"previous group's ({previous})")
        previous = offsets[kg]
    stats, op = _stats(doc), _op_state(doc.get("operator_state"), key)
    if stats.get("file_bytes", ref.size) != ref.size:
        raise Invalid(f"stats record a snapshot of {stats['file_bytes']} bytes but file "
                      f"{ref.path} is recorded with {ref.size}")
    _check_operator_state_bytes(stats, op)
    return FullSnapshotHandle(root, ref, kgr, max_p, offsets, meta_length, stats, op)


def _check_operator_state_bytes(stats: dict[str, int], op: OperatorStateRef | None) -> None:
    """``operator_state_bytes`` (written since it was added; 0 without operator state) says a
    second time whether the handle has operator state: a dropped ``operator_state`` would
    otherwise restore as none at all (source offsets lost)."""
    recorded = stats.get("operator_state_bytes")
    if recorded is None:
        return
    have = op.file.size if op is not None else 0
    if recorded != have:
        held = f"an operator-state file of {have} bytes" if op is not None else "no operator state"
        raise Invalid(f"stats record {recorded} bytes of operator state but the handle names "
                      f"{held}")


def _check_file_figures(stats: dict[str, int], files: list[FileRef]) -> None:
    """An incremental checkpoint's figures against its file list: ``bytes_total`` is the
    sum of the RocksDB files' sizes, and every one of them was either uploaded or reused."""
    total = sum(f.size for f in files)
    if stats.get("bytes_total", total) != total:
        raise Invalid(f"stats record {stats['bytes_total']} bytes in all but the files listed "
                      f"hold {total}")
    if "files_uploaded" in stats and "files_reused" in stats and \
            stats["files_uploaded"] + stats["files_reused"] != len(files):
        raise Invalid(f"stats record {stats['files_uploaded']} files uploaded and "
                      f"{stats['files_reused']} reused but {len(files)} files are listed")
    if not 0 <= stats.get("bytes_uploaded", 0) <= total:
        raise Invalid(f"stats record {stats['bytes_uploaded']} bytes uploaded of {total}")


def _value_format(doc: dict, legacy: bool) -> int:
    """The manifest's value encoding generation: required of sealed manifests (the checksum
    covers it, so a damaged one cannot make restore skip or force the conversion of old
    entries); an unsealed manifest without it predates the field (generation 1)."""
    if legacy and "value_format" not in doc:
        return 1
    return want_int(docs.field(doc, "value_format", "the handle"), "value_format", 1,
                    VALUE_FORMAT)


def _incremental(doc: dict, root: str, key: bytes | None, legacy: bool) -> IncrementalHandle:
    max_p = _layout(doc)
    kgr = _range(doc, max_p)
    cid = want_int(docs.field(doc, "checkpoint_id", "the handle"), "checkpoint_id")
    key_codecs = docs.field(doc, "key_codecs", "the handle")
    key_is_tuple = docs.field(doc, "key_is_tuple", "the handle")
    check_key_layout(max_p, key_codecs, key_is_tuple, "the handle")
    states = want_list(docs.field(doc, "states", "the handle"), "states")
    for i, s in enumerate(states):
        # fields beyond the fixed ones are the state's attributes (meta.py), checked generically
        check_state_entry(want_dict(s, f"state {i}"), f"state {i}")
    if len({s["name"] for s in states}) != len(states):
        raise Invalid("two states have the same name")
    shared = [_file(f, f"shared file {i}", key)
              for i, f in enumerate(want_list(docs.field(doc, "shared", "the handle"), "shared"))]
    private = [_file(f, f"private file {i}", key)
               for i, f in enumerate(want_list(docs.field(doc, "private", "the handle"), "private"))]
    local_names = [f.local_name for f in shared + private]
    if any(not n for n in local_names) or len(set(local_names)) != len(local_names):
        raise Invalid("the RocksDB files' local names are missing or not unique")
    if any(not n.endswith(".sst") for n in local_names[:len(shared)]) or \
            any(n.endswith(".sst") for n in local_names[len(shared):]):
        raise Invalid("SST files must be shared and only SST files may be shared")
    private_names = local_names[len(shared):]
    if "CURRENT" not in private_names or not any(_MANIFEST_NAME.match(n) for n in private_names):
        raise Invalid("the handle lists no CURRENT or no MANIFEST file: the RocksDB directory "
                      "it describes cannot be opened")
    stats, op = _stats(doc), _op_state(doc.get("operator_state"), key)
    _check_file_figures(stats, shared + private)
    _check_operator_state_bytes(stats, op)
    return IncrementalHandle(root, cid, kgr, max_p, [dict(s) for s in states],
                             list(key_codecs) if key_codecs else None, key_is_tuple, shared,
                             private, stats, op, value_format=_value_format(doc, legacy))


# ---- handles in storage ------------------------------------------------------------------------

HANDLE_SUFFIX = ".handle.json"


def write_handle(storage: Any, rel: str, handle: Handle, hmac_key: bytes | None,
                 extra: dict[str, Any] | None = None) -> None:
    """Publishes handle (sealed, without its root) at rel of a CheckpointStorage, atomically."""
    storage.write_atomic(rel, encode_handle(handle, hmac_key, extra))


def read_handle(storage: Any, rel: str, hmac_key: bytes | None) -> tuple[Handle, dict]:
    """(handle, document) published at rel, resolved against that storage's root."""
    handle, doc = decode_handle(storage.read_bytes(rel), storage.uri, storage.describe(rel),
                                hmac_key)
    if isinstance(handle, IncrementalHandle):
        handle.manifest = rel
    return handle, doc


def load_handle(target: Any, path: str, hmac_key: bytes | str | None = None) -> Handle:
    """The handle published at ``path`` under ``target`` (a checkpoint directory, URI or
    CheckpointStorage): a full snapshot's ``<name>.handle.json``, an incremental checkpoint's
    manifest, or a StateStore version's ``p<P>-of-<N>.json``. It resolves against ``target``,
    wherever the checkpoint was written: a copied or moved checkpoint restores from the copy.
    ``hmac_key`` defaults to ``$STATEENGINE_CHECKPOINT_KEY``."""
    from .storage import as_storage

    return read_handle(as_storage(target), path, docs.resolve_key(hmac_key))[0]
