"""What a Spark ``StatefulProcessor`` sees when it runs on stateengine: its handle and states.

``ProcessorHandle`` subclasses pyspark's ``StatefulProcessorHandle`` and the states subclass
pyspark's ``ValueState``, ``ListState`` and ``MapState``, so code written for Spark (type hints,
``isinstance`` checks included) runs unchanged; every call goes to the task's keyed backend
instead of Spark's state server. Values pass through ``RowCodec`` (their Spark schema).

Each state is one stateengine state of the same name, keyed by the grouping key: a value state
per key, a list state of element tuples, a map state of user-key tuples to value tuples. Timers
live in the backend's timer service (processing or event time, by the time mode) and in a
per-key sorted map ``$timers`` so that ``listTimers()`` reads one key's timers without scanning
others. State names starting with ``$`` are reserved for these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from pyspark.sql.streaming import stateful_processor as sp
from pyspark.sql import types as T

from ..descriptors import (ListStateDescriptor, MapStateDescriptor, SortedMapStateDescriptor,
                           StateDescriptor, ValueStateDescriptor)
from ..errors import ProcessorUsageError, StateRegistrationError
from ..times import to_millis
from .processor_values import RowCodec

TIME_MODES = {"none": "None", "processingtime": "ProcessingTime", "eventtime": "EventTime"}
TIMER_INDEX = "$timers"
RESERVED_PREFIX = "$"


def time_mode_name(time_mode: Any) -> str:
    """Spark's spelling of a time mode given in any case ("processingtime" -> ProcessingTime)."""
    name = TIME_MODES.get(str(time_mode).lower()) if isinstance(time_mode, str) else None
    if name is None:
        raise ValueError(f"time_mode must be one of None, ProcessingTime, EventTime (as in "
                         f"Spark's transformWithState), got {time_mode!r}")
    return name


@dataclass(frozen=True)
class StateDecl:
    """One state as the processor's ``init`` declares it: name, kind, schemas (parsed), TTL."""

    name: str
    kind: str  # "value", "list" or "map"
    schema: T.StructType
    user_key_schema: T.StructType | None = None
    ttl_ms: int | None = None
    # schema evolution (stateengine-only keywords of getValueState & co.), as item tuples
    renamed_from: tuple = ()
    field_defaults: tuple = ()

    def descriptor(self) -> StateDescriptor:
        """The stateengine descriptor: a typed state of the same schema (so ``read_state``
        shows its fields; a changed schema evolves where stateengine allows it)."""
        ttl = _ttl_config(self.ttl_ms) if self.ttl_ms is not None else None
        extra: dict[str, Any] = {"ttl": ttl} if ttl is not None else {}
        if self.renamed_from:
            extra["renamed_from"] = dict(self.renamed_from)
        if self.field_defaults:
            extra["field_defaults"] = dict(self.field_defaults)
        if self.kind == "value":
            return ValueStateDescriptor(self.name, value_type=self.schema, **extra)
        if self.kind == "list":
            return ListStateDescriptor(self.name, value_type=self.schema, **extra)
        return MapStateDescriptor(self.name, user_key_type=self.user_key_schema,
                                  value_type=self.schema, **extra)


def evolution_items(renamed_from: Mapping[str, str] | None,
                    field_defaults: Mapping[str, Any] | None) -> tuple[tuple, tuple]:
    """A state declaration's renamed_from / field_defaults as StateDecl keeps them."""
    return (tuple(sorted(dict(renamed_from or {}).items())),
            tuple(sorted(dict(field_defaults or {}).items(), key=lambda kv: kv[0])))


def _ttl_config(ttl_ms: int) -> Any:
    """Spark's TTL is Flink's OnCreateAndWrite, never returning expired values, measured by
    the batch timestamp: an entry written at batch time t expires in the first batch whose
    time is >= t + ttl (Spark: ``batchTimestampMs >= expirationMs``)."""
    try:
        from ..ttl import StateTtlConfig
    except ImportError:  # pragma: no cover - State TTL not in this build
        raise ProcessorUsageError(
            "ttlDurationMs needs stateengine's State TTL, which this build does not include; "
            "declare the state without ttlDurationMs") from None
    return StateTtlConfig(ttl_ms=ttl_ms)


def timer_index_descriptor() -> StateDescriptor:
    return SortedMapStateDescriptor(TIMER_INDEX, int, value_type=bool)


def check_ttl(name: str, ttl: Any, time_mode: str) -> int | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise ProcessorUsageError(f"state '{name}': ttlDurationMs must be a positive int of "
                                  f"milliseconds, got {ttl!r}")
    if time_mode != "ProcessingTime":
        raise ProcessorUsageError(
            f"state '{name}' has ttlDurationMs, which Spark allows only in time mode "
            f"ProcessingTime (TTL is measured by the batch timestamp), not {time_mode}; use "
            f"time_mode='ProcessingTime' or drop the TTL")
    return int(ttl)


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise StateRegistrationError(f"a state name must be a non-empty str, got {name!r:.80}")
    if name.startswith(RESERVED_PREFIX):
        raise StateRegistrationError(
            f"state names starting with '{RESERVED_PREFIX}' are reserved for stateengine's "
            f"own per-key timer index; rename '{name}'")
    return name


class ProcessorRuntime:
    """The task side of a handle: the backend, the current grouping key, timers, codecs."""

    def __init__(self, backend: Any, time_mode: str, schemas: dict[str, T.StructType],
                 key_cols: list[str], time_zone: str | None = None) -> None:
        self.backend = backend
        self.time_zone = time_zone  # Spark's session zone, for timer times without one
        self.time_mode = time_mode
        self.schemas = schemas  # DDL string -> StructType, parsed on the driver
        self.key_cols = key_cols
        self.keyed = False  # whether a grouping key is current (not in init or close)
        self.timers = backend.timer_service
        self.index = backend.get_state(timer_index_descriptor()) if time_mode != "None" else None
        self.states: dict[str, StateDecl] = {}

    def set_key(self, key: Any) -> None:
        self.backend.set_current_key(key)
        self.keyed = True

    def check_keyed(self, what: str) -> None:
        if not self.keyed:
            raise ProcessorUsageError(
                f"{what} needs a grouping key: call it while handling a key (handleInputRows, "
                f"handleExpiredTimer, handleInitialState), not in init() or close()")

    def schema(self, state: str, schema: Any) -> T.StructType:
        if isinstance(schema, T.StructType):
            return schema
        if isinstance(schema, T.DataType):
            return T.StructType([T.StructField("value", schema)])
        parsed = self.schemas.get(schema) if isinstance(schema, str) else None
        if parsed is None:
            raise ProcessorUsageError(
                f"state '{state}': schema {schema!r:.80} was not declared when init() ran on "
                f"the driver; init() must declare the same states with the same schemas every "
                f"time it runs (DDL strings are parsed on the driver)")
        return parsed

    def declare(self, decl: StateDecl) -> Any:
        self.states[decl.name] = decl
        return self.backend.get_state(decl.descriptor())

    # ---- timers ------------------------------------------------------------------------

    def _timer_call(self, what: str) -> None:
        if self.time_mode == "None":
            raise ProcessorUsageError(
                f"{what} needs time mode ProcessingTime or EventTime; this processor runs "
                f"with time mode None (Spark refuses timer operations there too)")
        self.check_keyed(what)

    def register_timer(self, ts: Any) -> None:
        self._timer_call("registerTimer")
        ts = to_millis(ts, "a timer's expiry time", self.time_zone)
        if self.time_mode == "ProcessingTime":
            self.timers.register_processing_time_timer(ts)
        else:
            self.timers.register_event_time_timer(ts)
        self.index.put(ts, True)

    def delete_timer(self, ts: Any) -> None:
        self._timer_call("deleteTimer")
        self._forget_timer(to_millis(ts, "a timer's expiry time", self.time_zone))

    def _forget_timer(self, ts: int) -> None:
        if self.time_mode == "ProcessingTime":
            self.timers.delete_processing_time_timer(ts)
        else:
            self.timers.delete_event_time_timer(ts)
        self.index.remove(ts)

    def list_timers(self) -> Iterator[int]:
        self._timer_call("listTimers")
        return iter(list(self.index.keys()))

    def due_timers(self, up_to: int) -> list[tuple[Any, int]]:
        """(key, timestamp) of every timer due at ``up_to``, in time order, taken out of the
        timer service at once: Spark fires the timers that are due when the timer phase
        begins; those registered while they fire wait for the next batch."""
        if self.time_mode == "ProcessingTime":
            fired = self.timers.advance_processing_time(up_to)
        else:
            fired = self.timers.advance_watermark(up_to)
        return [(t.key, t.timestamp) for t in fired]

    def timer_fired(self, ts: int) -> None:
        """After handleExpiredTimer: Spark deletes the timer it fired, also when the handler
        registered the same time again."""
        self._forget_timer(ts)

    def delete_state(self, name: str) -> None:
        """deleteIfExists: every entry of the state in this partition, all keys."""
        check_name(name)
        if name in self.backend.state_names:
            self.backend.delete_all_entries(name)
        self.states.pop(name, None)


class ProcessorHandle(sp.StatefulProcessorHandle):
    """Spark's StatefulProcessorHandle over a stateengine backend (one per task)."""

    def __init__(self, runtime: ProcessorRuntime) -> None:  # no state server client
        self._rt = runtime

    # renamed_from / field_defaults (stateengine only, keywords after Spark's arguments):
    # how the value schema evolves from the one the checkpoint holds (StateDescriptor).

    def getValueState(self, stateName: str, schema: T.StructType | str,
                      ttlDurationMs: int | None = None, *,
                      renamed_from: Mapping[str, str] | None = None,
                      field_defaults: Mapping[str, Any] | None = None) -> sp.ValueState:
        rt = self._rt
        name = check_name(stateName)
        s = rt.schema(name, schema)
        decl = StateDecl(name, "value", s, None, check_ttl(name, ttlDurationMs, rt.time_mode),
                         *evolution_items(renamed_from, field_defaults))
        return ValueState(rt, rt.declare(decl), RowCodec(s, name))

    def getListState(self, stateName: str, schema: T.StructType | str,
                     ttlDurationMs: int | None = None, *,
                     renamed_from: Mapping[str, str] | None = None,
                     field_defaults: Mapping[str, Any] | None = None) -> sp.ListState:
        rt = self._rt
        name = check_name(stateName)
        s = rt.schema(name, schema)
        decl = StateDecl(name, "list", s, None, check_ttl(name, ttlDurationMs, rt.time_mode),
                         *evolution_items(renamed_from, field_defaults))
        return ListState(rt, rt.declare(decl), RowCodec(s, name))

    def getMapState(self, stateName: str, userKeySchema: T.StructType | str,
                    valueSchema: T.StructType | str,
                    ttlDurationMs: int | None = None, *,
                    renamed_from: Mapping[str, str] | None = None,
                    field_defaults: Mapping[str, Any] | None = None) -> sp.MapState:
        rt = self._rt
        name = check_name(stateName)
        ks, vs = rt.schema(name, userKeySchema), rt.schema(name, valueSchema)
        decl = StateDecl(name, "map", vs, ks, check_ttl(name, ttlDurationMs, rt.time_mode),
                         *evolution_items(renamed_from, field_defaults))
        return MapState(rt, rt.declare(decl), RowCodec(ks, name), RowCodec(vs, name))

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self._rt.register_timer(expiryTimestampMs)

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self._rt.delete_timer(expiryTimestampMs)

    def listTimers(self) -> Iterator[int]:
        return self._rt.list_timers()

    def deleteIfExists(self, stateName: str) -> None:
        self._rt.delete_state(stateName)


class ValueState(sp.ValueState):
    """Spark's ValueState: ``exists``, ``get`` (a tuple or None), ``update``, ``clear``."""

    def __init__(self, rt: ProcessorRuntime, state: Any, codec: RowCodec) -> None:
        self._rt, self._state, self._codec = rt, state, codec
        self._stateName = codec.state_name

    def exists(self) -> bool:
        self._rt.keyed or self._rt.check_keyed(f"state '{self._stateName}'")
        return self._state.value() is not None

    def get(self) -> tuple | None:
        self._rt.keyed or self._rt.check_keyed(f"state '{self._stateName}'")
        stored = self._state.value()
        return None if stored is None else self._codec.load(stored)

    def update(self, newValue: Any) -> None:
        self._rt.keyed or self._rt.check_keyed(f"state '{self._stateName}'")
        if newValue is None:
            raise ProcessorUsageError(f"state '{self._stateName}': update(None) is not allowed "
                                      f"(as in Spark); use clear() to remove the value")
        self._state.update(self._codec.store(newValue))

    def clear(self) -> None:
        self._rt.keyed or self._rt.check_keyed(f"state '{self._stateName}'")
        self._state.clear()


class ListState(sp.ListState):
    """Spark's ListState: ``exists``, ``get`` (an iterator of tuples), ``put``,
    ``appendValue``, ``appendList``, ``clear``."""

    def __init__(self, rt: ProcessorRuntime, state: Any, codec: RowCodec) -> None:
        self._rt, self._state, self._codec = rt, state, codec
        self._stateName = codec.state_name

    def _check(self) -> None:
        self._rt.keyed or self._rt.check_keyed(f"state '{self._stateName}'")

    def exists(self) -> bool:
        self._check()
        return bool(self._state.get())

    def get(self) -> Iterator[tuple]:
        self._check()
        return map(self._codec.load, self._state.get())

    def _elements(self, values: Any, what: str) -> list[tuple]:
        if values is None or isinstance(values, (str, bytes, dict)) or \
                not hasattr(values, "__iter__"):
            raise ProcessorUsageError(f"state '{self._stateName}': {what} takes a list of "
                                      f"tuples, got {values!r:.80}")
        values = list(values)
        if not values:
            raise ProcessorUsageError(
                f"state '{self._stateName}': {what}([]) is refused, as Spark refuses to write "
                f"an empty list; use clear() to empty the list")
        out = []
        for v in values:
            if v is None:
                raise ProcessorUsageError(f"state '{self._stateName}': {what} got a None "
                                          f"element; list elements cannot be null (as in Spark)")
            out.append(self._codec.store(v))
        return out

    def put(self, newState: Any) -> None:
        self._check()
        self._state.update(self._elements(newState, "put"))

    def appendValue(self, newState: Any) -> None:
        self._check()
        if newState is None:
            raise ProcessorUsageError(f"state '{self._stateName}': appendValue(None) is not "
                                      f"allowed; list elements cannot be null (as in Spark)")
        self._state.add(self._codec.store(newState))

    def appendList(self, newState: Any) -> None:
        self._check()
        self._state.add_all(self._elements(newState, "appendList"))

    def clear(self) -> None:
        self._check()
        self._state.clear()


class MapState(sp.MapState):
    """Spark's MapState: ``exists``, ``getValue`` (a Row or None), ``containsKey``,
    ``updateValue``, ``iterator`` ((key tuple, value tuple) pairs), ``keys``, ``values``,
    ``removeKey``, ``clear``."""

    def __init__(self, rt: ProcessorRuntime, state: Any, keys: RowCodec,
                 values: RowCodec) -> None:
        self._rt, self._state, self._keys, self._values = rt, state, keys, values
        self._stateName = keys.state_name

    def _check(self) -> None:
        self._rt.keyed or self._rt.check_keyed(f"state '{self._stateName}'")

    def exists(self) -> bool:
        self._check()
        return not self._state.is_empty()

    def getValue(self, key: Any) -> Any:
        self._check()
        stored = self._state.get(self._keys.store(key))
        return None if stored is None else self._values.load_row(stored)

    def containsKey(self, key: Any) -> bool:
        self._check()
        return self._state.contains(self._keys.store(key))

    def updateValue(self, key: Any, value: Any) -> None:
        self._check()
        if value is None:
            raise ProcessorUsageError(f"state '{self._stateName}': updateValue(key, None) is "
                                      f"not allowed (as in Spark); use removeKey(key)")
        self._state.put(self._keys.store(key), self._values.store(value))

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        self._check()
        kl, vl = self._keys.load, self._values.load
        return ((kl(k), vl(v)) for k, v in self._state.entries())

    def keys(self) -> Iterator[tuple]:
        self._check()
        return map(self._keys.load, self._state.keys())

    def values(self) -> Iterator[tuple]:
        self._check()
        return map(self._values.load, self._state.values())

    def removeKey(self, key: Any) -> None:
        self._check()
        self._state.remove(self._keys.store(key))

    def clear(self) -> None:
        self._check()
        self._state.clear()
