"""State descriptors: the name, kind and serializers of a keyed state, as in Flink.

A descriptor is registered with ``backend.get_state(descriptor)``. Registering the same name
again returns the same handle if kind and serializers agree, and raises
``StateRegistrationError`` otherwise. ``meta()`` is what snapshots persist and what restore
checks against.

Every descriptor takes ``ttl=StateTtlConfig(...)`` (stateengine/ttl.py) for State TTL; its meta
then carries the attribute ``"ttl": True`` (the duration is configuration, not persisted).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, ClassVar, Mapping

from . import evolution, serializers, sparktypes
from .aggregates import NativeAggregate
from .errors import SerializationError, StateRegistrationError
from .functions import AggregateFunction
from .reducers import NativeReducer
from .serializers import Codec
from .ttl import StateTtlConfig, check_ttl

RESERVED_PREFIX = "__"
# Longest state name, in UTF-8 bytes. Snapshot metas store a name's length in 16 bits; names
# are also column family names, written into RocksDB's MANIFEST and every checkpoint manifest,
# so the limit stays far below that.
MAX_STATE_NAME_BYTES = 1024


class StateKind(str, Enum):
    """The kind of a state; its value is the name stored in snapshot metas."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"
    SORTED_MAP = "sorted_map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"


class MergeKind:
    """How a state's column family merges (csrc/db.h MergeKind)."""

    NONE = 0
    LIST = 1
    NUMERIC = 2


_NUMERIC_CODECS = (Codec.ANY, Codec.BIGINT, Codec.DOUBLE)


def validate_state_name(name: Any) -> str:
    """name if it can name a state: a non-empty str of at most MAX_STATE_NAME_BYTES UTF-8
    bytes (no lone surrogates), neither 'default' nor starting with '__'."""
    if not isinstance(name, str) or not name:
        raise StateRegistrationError(f"a state name must be a non-empty str, got {name!r:.80}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise StateRegistrationError(
            f"state name {name!r:.80} is not valid Unicode text (it holds a lone surrogate at "
            f"position {e.start}, as surrogateescape decoding leaves them) and cannot be stored "
            f"as UTF-8; use a name of valid characters") from None
    if size > MAX_STATE_NAME_BYTES:
        raise StateRegistrationError(
            f"state name {name[:40]!r}... is {size} UTF-8 bytes long; state names may be at "
            f"most {MAX_STATE_NAME_BYTES} bytes, use a shorter name")
    if name == "default":
        raise StateRegistrationError(
            "'default' is RocksDB's reserved column family name and cannot name a state; "
            "choose another name")
    if name.startswith(RESERVED_PREFIX):
        raise StateRegistrationError(
            f"state names starting with '{RESERVED_PREFIX}' are reserved for the engine's own "
            f"column families (timers, operator state); rename '{name}'")
    return name


def check_no_pickle(descriptor: StateDescriptor) -> None:
    """Refuses a descriptor whose values or user keys are pickled, on a backend that did not
    opt in with allow_pickle."""
    pickled = [what for what, codec in (("value_type", descriptor.value_codec),
                                        ("user_key_type", descriptor.user_key_codec))
               if codec == Codec.PICKLE]
    if pickled:
        raise StateRegistrationError(
            f"state '{descriptor.name}' declares {' and '.join(pickled)}=\"pickle\", and reading "
            f"a pickle runs code chosen by whoever wrote the checkpoint; open the backend with "
            f"allow_pickle=True (KeyedStateBackend, restore, StateStoreProvider, the "
            f"stateengine.spark functions) if you trust its checkpoints, or use the default "
            f"serializer, which stores tuples, lists and dicts of primitives without pickle")


class StateDescriptor:
    """Base of all descriptors. ``namespace_type=None`` means the state only uses the default
    namespace; anything else (e.g. ``int`` or ``object``) enables ``set_current_namespace``.

    ``value_type`` may be a Spark schema: a DDL string (``"count long, last string, seen
    array<long>"``) or a pyspark ``DataType`` such as a ``StructType``. Values are then tuples
    (or pyspark Rows, or dicts keyed by field name) of that schema, stored by the typed row
    codec; ``value()`` returns tuples. See docs/concepts/typed-state.md.

    ``ttl`` (a StateTtlConfig) gives the state a time-to-live (stateengine/ttl.py).

    A typed value schema may evolve when the state is restored (see stateengine/evolution.py
    and the docs' "Schema evolution"): ``renamed_from`` maps a field path of the schema
    (``"address.zip"``; ``element`` / ``value`` step into arrays and map values) to the
    field's name in the stored schema, and ``field_defaults`` maps a field path to the value
    entries written before the field existed read for it (else null). Both only matter when
    the stored schema differs; they are recorded in the state's schema history."""

    kind: ClassVar[StateKind]

    def __init__(self, name: str, value_type: Any = None, namespace_type: Any = None, *,
                 ttl: StateTtlConfig | None = None,
                 renamed_from: Mapping[str, str] | None = None,
                 field_defaults: Mapping[str, Any] | None = None) -> None:
        self.name = validate_state_name(name)
        self.value_type = value_type
        self.value_codec, self.value_schema = serializers.typed_codec(value_type, "value_type")
        self.namespace_type = namespace_type
        self.namespace_codec = serializers.namespace_codec(namespace_type)
        self.ttl = check_ttl(self.name, ttl)
        self.renamed_from = dict(renamed_from or {})
        self.field_defaults = dict(field_defaults or {})
        self.evolution = evolution.declarations(self.value_schema, renamed_from, field_defaults,
                                                self.name)

    user_key_codec: Codec = Codec.VOID
    user_key_schema: sparktypes.DataType | None = None

    def merge_spec(self) -> tuple[int, int, int]:
        """(merge kind, native op, numeric codec) of the column family."""
        return (MergeKind.NONE, 0, 0)

    def meta(self) -> dict[str, Any]:
        """What a snapshot records about this state (kind, codecs, merge operator,
        function, TTL, schemas); restores check descriptors against it."""
        kind, op, _ = self.merge_spec()
        meta: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind.value,
            "value_codec": int(self.value_codec),
            "namespace_codec": int(self.namespace_codec),
            "user_key_codec": int(self.user_key_codec),
            "merge": kind,
            "native_op": op,
            # Attributes (persisted beside the fixed fields): the schemas of typed states.
            **({"value_schema": self.value_schema.canonical()} if self.value_schema else {}),
            **({"user_key_schema": self.user_key_schema.canonical()}
               if self.user_key_schema else {}),
        }
        if self.ttl is not None:
            meta["ttl"] = True  # timestamps are stored with every entry
        return meta

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    """A single value per key and namespace; ``value()`` returns ``default`` when unset."""

    kind = StateKind.VALUE

    def __init__(self, name: str, value_type: Any = None, default: Any = None,
                 namespace_type: Any = None, *, ttl: StateTtlConfig | None = None,
                 renamed_from: Mapping[str, str] | None = None,
                 field_defaults: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, value_type, namespace_type, ttl=ttl, renamed_from=renamed_from,
                         field_defaults=field_defaults)
        self.default = default
        if self.value_schema is not None and default is not None:
            from . import _native

            try:  # a default the schema cannot hold would fail every get_many
                _native.row_codec(self.value_schema).encode_bytes(default)
            except SerializationError as e:
                raise StateRegistrationError(
                    f"state '{name}': the default {default!r:.80} does not fit the value schema "
                    f"{self.value_schema}: {e}") from None


class ListStateDescriptor(StateDescriptor):
    """A list per key and namespace; ``value_type`` is the element type."""

    kind = StateKind.LIST

    def merge_spec(self) -> tuple[int, int, int]:
        """The list append merge operator."""
        return (MergeKind.LIST, 0, 0)


class MapStateDescriptor(StateDescriptor):
    """A map per key and namespace."""

    kind = StateKind.MAP

    def __init__(self, name: str, user_key_type: Any = None, value_type: Any = None,
                 namespace_type: Any = None, *, ttl: StateTtlConfig | None = None,
                 renamed_from: Mapping[str, str] | None = None,
                 field_defaults: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, value_type, namespace_type, ttl=ttl, renamed_from=renamed_from,
                         field_defaults=field_defaults)
        self.user_key_type = user_key_type
        self.user_key_codec, self.user_key_schema = serializers.typed_codec(user_key_type,
                                                                            "user_key_type")
        if self.user_key_schema is not None and sparktypes.contains_map(self.user_key_schema):
            raise StateRegistrationError(
                f"state '{name}': user keys must compare by value, and a map type in the user "
                f"key schema {self.user_key_schema} has no canonical order; use an array of "
                f"key/value structs instead")


class SortedMapStateDescriptor(MapStateDescriptor):
    """A map whose entries iterate in user-key order; user keys are int, float, str or bytes."""

    kind = StateKind.SORTED_MAP

    def __init__(self, name: str, user_key_type: Any, value_type: Any = None,
                 namespace_type: Any = None, *, ttl: StateTtlConfig | None = None,
                 renamed_from: Mapping[str, str] | None = None,
                 field_defaults: Mapping[str, Any] | None = None) -> None:
        StateDescriptor.__init__(self, name, value_type, namespace_type, ttl=ttl,
                                 renamed_from=renamed_from, field_defaults=field_defaults)
        self.user_key_type = user_key_type
        self.user_key_codec = serializers.sorted_user_key_codec(user_key_type)


def _check_native_codec(name: str, codec: Codec, fn: Any) -> None:
    if codec not in _NUMERIC_CODECS:
        raise StateRegistrationError(
            f"state '{name}': the native function {fn!r} works on numbers; use value_type None, "
            f"int or float (got serializer '{codec.name.lower()}')")


class ReducingStateDescriptor(StateDescriptor):
    """Reduces added values with ``reduce_function(a, b)``; the native reducers
    (stateengine.reducers.SUM/MIN/MAX) run in C++ merge operators."""

    kind = StateKind.REDUCING

    def __init__(self, name: str, reduce_function: Any, value_type: Any = None,
                 namespace_type: Any = None, *, ttl: StateTtlConfig | None = None,
                 renamed_from: Mapping[str, str] | None = None,
                 field_defaults: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, value_type, namespace_type, ttl=ttl, renamed_from=renamed_from,
                         field_defaults=field_defaults)
        if not callable(reduce_function):
            raise StateRegistrationError(
                f"state '{name}': reduce_function must be callable (a, b) -> c or one of "
                f"stateengine.reducers.SUM/MIN/MAX, got {reduce_function!r}")
        self.reduce_function = reduce_function
        self.native = isinstance(reduce_function, NativeReducer)
        if self.native:
            _check_native_codec(name, self.value_codec, reduce_function)

    def merge_spec(self) -> tuple[int, int, int]:
        """The native numeric merge operator for native functions, else none."""
        if self.native:
            return (MergeKind.NUMERIC, self.reduce_function.op, int(self.value_codec))
        return (MergeKind.NONE, 0, 0)


class AggregatingStateDescriptor(StateDescriptor):
    """Aggregates added values with an AggregateFunction; ``accumulator_type`` picks the
    accumulator's serializer. stateengine.aggregates.COUNT/SUM/MIN/MAX run natively."""

    kind = StateKind.AGGREGATING

    def __init__(self, name: str, aggregate_function: AggregateFunction,
                 accumulator_type: Any = None, namespace_type: Any = None, *,
                 ttl: StateTtlConfig | None = None,
                 renamed_from: Mapping[str, str] | None = None,
                 field_defaults: Mapping[str, Any] | None = None) -> None:
        super().__init__(name, accumulator_type, namespace_type, ttl=ttl,
                         renamed_from=renamed_from, field_defaults=field_defaults)
        missing = [m for m in ("create_accumulator", "add", "get_result", "merge")
                   if not callable(getattr(aggregate_function, m, None))]
        if missing:
            raise StateRegistrationError(
                f"state '{name}': aggregate_function needs create_accumulator, add, get_result "
                f"and merge (missing {', '.join(missing)}); subclass stateengine.AggregateFunction")
        self.aggregate_function = aggregate_function
        self.native = isinstance(aggregate_function, NativeAggregate)
        if self.native:
            _check_native_codec(name, self.value_codec, aggregate_function)

    def merge_spec(self) -> tuple[int, int, int]:
        """The native numeric merge operator for native functions, else none."""
        if self.native:
            return (MergeKind.NUMERIC, self.aggregate_function.op, int(self.value_codec))
        return (MergeKind.NONE, 0, 0)
