"""What a checkpoint holds, from its own metadata alone: no descriptors, no job code.

``checkpoint_catalog(root)`` lists every operator under a checkpoint root and, as of a version
(default: each operator's newest), its key (column names and Spark types), versions and
partitions, and every state: kind, key, namespace, user key and value types, TTL, and every
attribute its meta carries. Everything comes from what commits write:

* ``<op>/_operator.json``: max parallelism, key codecs, the version the state began at;
* each version's manifests: the state metas (name, kind, codecs, and attributes such as
  ``value_schema`` / ``user_key_schema`` for typed states and ``ttl``); since this catalog,
  also ``key_names`` (the key's column names, ``StateStoreProvider(key_names=)``), ``ttl_ms``
  (the TTL durations the committing job configured: a state's TTL is configuration, so the
  duration shown is the last job's), the state metrics (keys, timers) and, for migrated state,
  ``migrated_from``. Manifests written before these fields read without them: key columns are
  then named ``key`` (``key_0``, ``key_1``... for several), as ``read_state`` names them.

Types are Spark types: a typed state's schema as recorded; a primitive serializer's type
(``bigint``, ``string``...); ``any`` for the default serializer, whose values carry no declared
type (``read_state`` infers one per state); ``pickle`` for pickled values. States whose name
starts with ``$`` are stateengine's own (``$timers``: the per-key timer index of
``transform_with_state``); timers are counted, not listed as states.

A state whose schema evolved carries its schema history (the attribute
``value_schema_history``): ``StateEntry.schema_history`` lists each version's schema, oldest
first, with the renames its step declared. Attributes beyond the ones named here are shown as
they are (``StateEntry.attributes``), so whatever a later format adds to a state's meta is
listed by this catalog without a change here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .checkpoint.documents import resolve_key
from .checkpoint.storage import CheckpointStorage, as_storage
from .checkpoint.versions import VersionCatalog
from .errors import CheckpointNotFoundError, CorruptionError, StateEngineError
from .evolution import HISTORY  # the value schemas a state was written in, oldest first
from .functions import NativeOp
from .keygroups import KeyGroupRange
from .metrics import operators
from .serializers import Codec

SPARK_TYPES = {Codec.BIGINT: "bigint", Codec.INT: "int", Codec.DOUBLE: "double",
               Codec.FLOAT: "float", Codec.STRING: "string", Codec.BINARY: "binary",
               Codec.BOOLEAN: "boolean", Codec.ORDERED_BIGINT: "bigint",
               Codec.ORDERED_DOUBLE: "double", Codec.ORDERED_STRING: "string",
               Codec.ORDERED_BINARY: "binary", Codec.ANY: "any", Codec.PICKLE: "pickle"}
NATIVE_OPS = {NativeOp.SUM: "sum", NativeOp.MIN: "min", NativeOp.MAX: "max",
              NativeOp.COUNT: "count"}
INTERNAL_PREFIX = "$"
_SHOWN = ("value_schema", "user_key_schema", "ttl", HISTORY)  # the fields below show them


@dataclass
class StateEntry:
    """One state of an operator, as its meta describes it."""

    name: str
    kind: str  # value, list, map, sorted_map, reducing, aggregating
    value_type: str
    user_key_type: str | None = None  # map states
    namespace_type: str | None = None  # None: the default namespace only
    ttl: bool = False
    ttl_ms: int | None = None  # as the job that committed the version configured it
    function: str | None = None  # a native reducing/aggregating function (sum, min...)
    internal: bool = False  # stateengine's own ($timers)
    # the value schemas entries were written in, oldest first, each with the renames its step
    # declared ("old -> new"); empty while the schema never changed
    schema_history: list[dict[str, Any]] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)  # every meta attribute

    @property
    def extra_attributes(self) -> dict[str, Any]:
        """Attributes beyond schemas and the TTL flag (e.g. a schema history)."""
        return {k: v for k, v in self.attributes.items() if k not in _SHOWN}


@dataclass
class OperatorEntry:
    """One operator of a checkpoint root, as of ``version``."""

    name: str
    max_parallelism: int | None = None
    key_names: list[str] = field(default_factory=list)
    key_names_recorded: bool = False  # False: named key/key_N (manifests from before)
    key_types: list[str] = field(default_factory=list)
    first_version: int | None = None
    versions: list[int] = field(default_factory=list)
    version: int | None = None  # the version described (None: no committed version)
    num_partitions: int | None = None
    keys: int | None = None  # entries of the user's states (RocksDB's estimate), if recorded
    timers: int | None = None  # registered timers (RocksDB's estimate), if recorded
    migrated_from: dict[str, Any] | None = None
    states: list[StateEntry] = field(default_factory=list)
    damage: str | None = None  # why the operator could not be read, if it could not

    def state(self, name: str) -> StateEntry:
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_key_names(n: int) -> list[str]:
    """How key columns are named when no manifest recorded their names."""
    return ["key"] if n == 1 else [f"key_{i}" for i in range(n)]


def recorded_key_names(doc: dict[str, Any], n: int, source: str) -> list[str] | None:
    """The key column names a manifest recorded (None: none recorded). A malformed field
    behind a valid seal is corruption."""
    names = doc.get("key_names")
    if names is None:
        return None
    if not isinstance(names, list) or len(names) != n or \
            not all(isinstance(x, str) and x for x in names) or len(set(names)) != len(names):
        raise CorruptionError(f"checkpoint manifest {source} records key_names {names!r}, not "
                              f"{n} distinct non-empty column names; it is corrupted")
    return names


def checkpoint_catalog(checkpoint: CheckpointStorage | str | os.PathLike,
                       operator: str | None = None, version: int | None = None,
                       hmac_key: bytes | str | None = None) -> list[OperatorEntry]:
    """Every operator under ``checkpoint`` (or only ``operator``) as of ``version`` (default:
    each one's newest readable version); see the module docstring. An operator whose newest
    version is damaged is listed with ``damage`` saying why (read an older one by number)."""
    storage = as_storage(checkpoint)
    if not storage.is_dir(""):
        raise CheckpointNotFoundError(f"checkpoint directory {storage.location} does not exist")
    present = operators(storage)
    if operator is not None and operator not in present:
        raise CheckpointNotFoundError(f"{storage.location} has no operator '{operator}' "
                                      f"(operators: {', '.join(present) or 'none'})")
    key = resolve_key(hmac_key)
    out = []
    for name in [operator] if operator is not None else present:
        entry = OperatorEntry(name)
        try:
            _describe(VersionCatalog(storage, name, key), entry, version)
        except CheckpointNotFoundError as e:
            if operator is not None:
                raise
            entry.damage = str(e)  # the version asked for is not there
        except (CorruptionError, StateEngineError) as e:
            entry.damage = str(e)
        out.append(entry)
    return out


def _describe(catalog: VersionCatalog, entry: OperatorEntry, version: int | None) -> None:
    props = catalog.properties() or {}
    entry.max_parallelism = props.get("max_parallelism")
    entry.first_version = catalog.first_version()
    entry.versions = catalog.versions()
    full = KeyGroupRange.all(entry.max_parallelism or 128)
    v = catalog.latest_version(full) if version is None else version
    if v == 0:
        codecs = props.get("key_codecs") or []
        entry.key_types = [SPARK_TYPES[Codec(c)] for c in codecs]
        entry.key_names = default_key_names(len(codecs)) if codecs else []
        return
    handles = catalog.handles_for(v, full)
    manifests = catalog.manifests(v)
    entry.version = v
    # a batch re-run at another partition count leaves manifests of two counts: the count
    # the driver marked committed, else the larger (as metrics.version_metrics)
    counts = {n for _, n, _ in manifests}
    marked = catalog.committed_partitions(v)
    entry.num_partitions = marked if marked in counts else max(counts)
    docs = [doc for _, n, doc in manifests if n == entry.num_partitions]
    codecs = next((h.key_codecs for h in handles if h.key_codecs), None) or \
        props.get("key_codecs") or []
    entry.key_types = [SPARK_TYPES[Codec(c)] for c in codecs]
    source = catalog.describe() + f" version {v}"
    names = next((n for n in (recorded_key_names(d, len(codecs), source) for d in docs) if n),
                 None)
    entry.key_names_recorded = names is not None
    entry.key_names = names or (default_key_names(len(codecs)) if codecs else [])
    metrics = [d.get("metrics") for d in docs]
    if all(isinstance(m, dict) for m in metrics) and metrics:
        entry.keys = sum(int(m.get("keys", 0)) for m in metrics)
        entry.timers = sum(int(m.get("timers", 0)) for m in metrics)
    origins = [d.get("migrated_from") for d in docs if isinstance(d.get("migrated_from"), dict)]
    entry.migrated_from = origins[0] if origins else None
    ttl_ms: dict[str, int] = {}
    for d in docs:
        if isinstance(d.get("ttl_ms"), dict):
            ttl_ms.update({k: v for k, v in d["ttl_ms"].items() if isinstance(v, int)})
    seen: dict[str, dict[str, Any]] = {}
    for h in handles:  # every partition's states (one may hold a state another never saw)
        for meta in h.states:
            if meta["kind"] != "timers" and meta["name"] not in seen:
                seen[meta["name"]] = meta
    entry.states = [_state(meta, ttl_ms.get(name)) for name, meta in sorted(seen.items())]


def _type_of(codec: int, schema: str | None) -> str:
    if codec == Codec.STRUCT:
        return schema or "struct"
    return SPARK_TYPES.get(Codec(codec), Codec(codec).name.lower())


def _state(meta: dict[str, Any], ttl_ms: int | None) -> StateEntry:
    from .checkpoint.meta import state_attributes

    attrs = state_attributes(meta)
    kind = meta["kind"]
    has_uk = kind in ("map", "sorted_map")
    return StateEntry(
        name=meta["name"], kind=kind,
        value_type=_type_of(meta["value_codec"], attrs.get("value_schema")),
        user_key_type=_type_of(meta["user_key_codec"], attrs.get("user_key_schema"))
        if has_uk else None,
        namespace_type=None if meta["namespace_codec"] == Codec.VOID else
        _type_of(meta["namespace_codec"], None),
        ttl=bool(attrs.get("ttl")), ttl_ms=ttl_ms if attrs.get("ttl") else None,
        function=NATIVE_OPS.get(meta.get("native_op", 0)),
        internal=meta["name"].startswith(INTERNAL_PREFIX),
        schema_history=_history(attrs.get(HISTORY)), attributes=attrs)


def _history(raw: Any) -> list[dict[str, Any]]:
    """Each version of a schema history as {"version", "schema", "renamed"} (schema
    evolution validates the attribute when it restores the state; a catalog shows it)."""
    if not isinstance(raw, list):
        return []
    out = []
    for i, step in enumerate(raw):
        step = step if isinstance(step, dict) else {}
        renamed = step.get("renamed_from") if isinstance(step.get("renamed_from"), dict) else {}
        out.append({"version": i, "schema": step.get("schema"),
                    "renamed": [f"{old} -> {new}" for new, old in sorted(renamed.items())]})
    return out


def format_catalog(entries: list[OperatorEntry]) -> str:
    """The catalog as text (``stateengine catalog``)."""
    lines = []
    for op in entries:
        lines.append(f"operator {op.name}")
        if op.damage:
            lines.append(f"  DAMAGED: {op.damage}")
        if op.version is None and not op.damage:
            lines.append(f"  no committed version (versions present: {op.versions or 'none'})")
        keys = ", ".join(f"{n} {t}" for n, t in zip(op.key_names, op.key_types))
        if keys:
            lines.append(f"  key: {keys}" + ("" if op.key_names_recorded or op.version is None
                                             else "  (column names not recorded)"))
        if op.version is not None:
            span = (f"{op.versions[0]}..{op.versions[-1]}" if len(op.versions) > 1 else
                    str(op.versions[0]) if op.versions else "none")
            lines.append(f"  version {op.version} ({op.num_partitions} partition(s); versions "
                         f"{span}; state began at {op.first_version}; max parallelism "
                         f"{op.max_parallelism})")
        if op.keys is not None:
            lines.append(f"  entries: {op.keys}, timers: {op.timers} (RocksDB estimates)")
        if op.migrated_from:
            m = op.migrated_from
            lines.append(f"  migrated from Spark: {m.get('operator')} (operator "
                         f"{m.get('operator_id')}) of {m.get('spark_checkpoint')}, batch "
                         f"{m.get('batch_id')}")
        if op.states:
            lines.append("  states:")
        width = max((len(s.name) for s in op.states), default=0)
        for s in op.states:
            what = (f"{s.user_key_type} -> {s.value_type}" if s.user_key_type else s.value_type)
            extra = []
            if s.namespace_type:
                extra.append(f"namespace {s.namespace_type}")
            if s.function:
                extra.append(f"function {s.function}")
            if s.ttl:
                extra.append(f"ttl {s.ttl_ms} ms" if s.ttl_ms is not None else "ttl")
            if s.internal:
                extra.append("stateengine's own")
            for k, v in sorted(s.extra_attributes.items()):
                extra.append(f"{k} {json.dumps(v, sort_keys=True)}")
            tail = f"  ({'; '.join(extra)})" if extra else ""
            lines.append(f"    {s.name:<{width}}  {s.kind:<11} {what}{tail}")
            for h in s.schema_history:
                renamed = f" (renamed {', '.join(h['renamed'])})" if h["renamed"] else ""
                lines.append(f"    {'':<{width}}    schema version {h['version']}: "
                             f"{h['schema']}{renamed}")
    return "\n".join(lines)
