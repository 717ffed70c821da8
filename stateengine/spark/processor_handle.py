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

# The error classes Spark 4.3 raises for the misuses stateengine refuses too (measured by
# running Spark's operator on each, tests/test_spark_processor_misuse.py); stateengine's
# messages start with the same class.
NO_KEY_ERROR = "INTERNAL_ERROR_TWS"  # Spark: "Implicit key not found in state store"
TIME_MODE_ERROR = "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE"
HANDLE_STATE_ERROR = "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE"
TTL_TIME_MODE_ERROR = "STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL"
EMPTY_LIST_ERROR = "ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE"
RESERVED_NAME_ERROR = "STATE_STORE_CANNOT_CREATE_COLUMN_FAMILY_WITH_RESERVED_CHARS"

# Spark's handle states, in the order a task goes through them: init() runs in CREATED, the
# initial state and input in INITIALIZED, the timers in DATA_PROCESSED, close() in
# TIMER_PROCESSED. States are declared and deleted only in CREATED; timers are used only
# between INITIALIZED and DATA_PROCESSED.
CREATED, INITIALIZED, DATA_PROCESSED, TIMER_PROCESSED = (
    "CREATED", "INITIALIZED", "DATA_PROCESSED", "TIMER_PROCESSED")
_SPARK_TIME_MODE = {"None": "NoTime", "ProcessingTime": "ProcessingTime",
                    "EventTime": "EventTime"}
_IN_PHASE = {CREATED: "init()", INITIALIZED: "handleInputRows / handleInitialState",
             DATA_PROCESSED: "handleExpiredTimer", TIMER_PROCESSED: "close()"}


def check_declaring(operation: str, phase: str) -> None:
    """getValueState / getListState / getMapState / deleteIfExists: only in init(), as in
    Spark (``operation`` is Spark's name for it, e.g. get_value_state)."""
    if phase != CREATED:
        raise ProcessorUsageError(
            f"{operation} is allowed only in init(), not in {_IN_PHASE[phase]} (handle state "
            f"{phase}): declare and delete states in init(), as Spark requires",
            HANDLE_STATE_ERROR)


def check_timer_call(operation: str, time_mode: str, phase: str) -> None:
    """registerTimer / deleteTimer / listTimers: a time mode with timers, and a grouping key
    (handleInputRows, handleInitialState, handleExpiredTimer; not init() or close())."""
    if time_mode == "None":
        raise ProcessorUsageError(
            f"{operation} needs time mode ProcessingTime or EventTime; this processor runs "
            f"with time mode None (timeMode={_SPARK_TIME_MODE[time_mode]} in Spark)",
            TIME_MODE_ERROR)
    if phase in (CREATED, TIMER_PROCESSED):
        raise ProcessorUsageError(
            f"{operation} needs a grouping key: call it while handling a key (handleInputRows, "
            f"handleExpiredTimer, handleInitialState), not in {_IN_PHASE[phase]} (handle "
            f"state {phase})", HANDLE_STATE_ERROR)


def no_key_error(what: str) -> ProcessorUsageError:
    """State used without a grouping key (in init() or close())."""
    return ProcessorUsageError(
        f"{what} needs a grouping key: use it while handling a key (handleInputRows, "
        f"handleExpiredTimer, handleInitialState), not in init() or close() (Spark: implicit "
        f"key not found in state store)", NO_KEY_ERROR)


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
            f"time_mode='ProcessingTime' or drop the TTL", TTL_TIME_MODE_ERROR)
    return int(ttl)


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise StateRegistrationError(f"a state name must be a non-empty str, got {name!r:.80}")
    if name.startswith(RESERVED_PREFIX):
        raise StateRegistrationError(
            f"[{RESERVED_NAME_ERROR}] state names starting with '{RESERVED_PREFIX}' are "
            f"reserved (as in Spark; stateengine keeps its per-key timer index there); rename "
            f"'{name}'")
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
        self.phase = CREATED  # Spark's handle state; the task moves it on (processor.py)
        # What ValueState.exists() read last (state, stored value), for the get() that
        # usually follows it ("get() if exists() else ..."): taken once, and dropped by any
        # write and every key change, so no value object is ever handed out twice.
        self.read_state: Any = None
        self.read_value: Any = None
        self.handles: dict[str, list[Any]] = {}  # name -> the state handles given out

    def set_key(self, key: Any) -> None:
        self.backend.set_current_key(key)
        self.keyed = True
        self.read_state = None

    def check_keyed(self, what: str) -> None:
        if not self.keyed:
            raise no_key_error(what)

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

    def declare(self, decl: StateDecl, operation: str) -> Any:
        check_declaring(operation, self.phase)
        self.states[decl.name] = decl
        return self.backend.get_state(decl.descriptor())

    def handed_out(self, name: str, handle: Any) -> Any:
        """Registers a state handle given to the processor; a deleteIfExists of its state
        invalidates it, declaring the state again revives it (Spark's handles name their
        state, so both hold for Spark's)."""
        same = self.handles.setdefault(name, [])
        for old in same:
            old._revive(handle._state)
        same.append(handle)
        return handle

    # ---- timers ------------------------------------------------------------------------

    def _timer_call(self, what: str) -> None:
        check_timer_call(what, self.time_mode, self.phase)
        self.check_keyed(what)

    def register_timer(self, ts: Any) -> None:
        self._timer_call("register_timer")
        ts = to_millis(ts, "a timer's expiry time", self.time_zone)
        if self.time_mode == "ProcessingTime":
            self.timers.register_processing_time_timer(ts)
        else:
            self.timers.register_event_time_timer(ts)
        self.index.put(ts, True)

    def delete_timer(self, ts: Any) -> None:
        self._timer_call("delete_timer")
        self._forget_timer(to_millis(ts, "a timer's expiry time", self.time_zone))

    def _forget_timer(self, ts: int) -> None:
        if self.time_mode == "ProcessingTime":
            self.timers.delete_processing_time_timer(ts)
        else:
            self.timers.delete_event_time_timer(ts)
        self.index.remove(ts)

    def list_timers(self) -> Iterator[int]:
        self._timer_call("list_timers")
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
        """deleteIfExists (in init() only): every entry of the state in this partition, all
        keys; the handles given out for it raise from now on, as Spark's do, until the state
        is declared again."""
        check_declaring("delete_if_exists", self.phase)
        check_name(name)
        if name in self.backend.state_names:
            self.backend.delete_all_entries(name)
        self.states.pop(name, None)
        self.read_state = None
        for handle in self.handles.get(name, ()):
            handle._remove()


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
        return rt.handed_out(name, ValueState(rt, rt.declare(decl, "get_value_state"),
                                              RowCodec(s, name)))

    def getListState(self, stateName: str, schema: T.StructType | str,
                     ttlDurationMs: int | None = None, *,
                     renamed_from: Mapping[str, str] | None = None,
                     field_defaults: Mapping[str, Any] | None = None) -> sp.ListState:
        rt = self._rt
        name = check_name(stateName)
        s = rt.schema(name, schema)
        decl = StateDecl(name, "list", s, None, check_ttl(name, ttlDurationMs, rt.time_mode),
                         *evolution_items(renamed_from, field_defaults))
        return rt.handed_out(name, ListState(rt, rt.declare(decl, "get_list_state"),
                                             RowCodec(s, name)))

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
        return rt.handed_out(name, MapState(rt, rt.declare(decl, "get_map_state"),
                                            RowCodec(ks, name), RowCodec(vs, name)))

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self._rt.register_timer(expiryTimestampMs)

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self._rt.delete_timer(expiryTimestampMs)

    def listTimers(self) -> Iterator[int]:
        return self._rt.list_timers()

    def deleteIfExists(self, stateName: str) -> None:
        self._rt.delete_state(stateName)


class _Removed:
    """Stands in for a state that deleteIfExists removed: every call raises what Spark's
    handle raises then (its state server no longer knows the state)."""

    def __init__(self, kind: str, name: str) -> None:
        self._kind, self._name = kind, name

    def __getattr__(self, attr: str) -> Any:
        raise ProcessorUsageError(
            f"{self._kind} state {self._name} is not initialized: deleteIfExists('{self._name}') "
            f"removed it in init(); declare it again with get{self._kind}State to use it (Spark "
            f"raises the same)")


def _nothing() -> Iterator[Any]:
    return iter(())


class _Handle:
    """What the three state classes share: removal by deleteIfExists and revival by a new
    declaration, without a check in any call (the handle's ``_state`` is swapped)."""

    _kind = ""
    _stateName = ""
    _state: Any
    # Calls that Spark answers with nothing on a removed state instead of raising.
    _empty_when_removed: tuple[str, ...] = ()

    def _remove(self) -> None:
        self._state = _Removed(self._kind, self._stateName)
        for name in self._empty_when_removed:
            setattr(self, name, _nothing)  # shadows the method on this handle only

    def _revive(self, state: Any) -> None:
        self._state = state
        for name in self._empty_when_removed:
            self.__dict__.pop(name, None)


class ValueState(_Handle, sp.ValueState):
    """Spark's ValueState: ``exists``, ``get`` (a tuple or None), ``update``, ``clear``."""

    _kind = "Value"

    def __init__(self, rt: ProcessorRuntime, state: Any, codec: RowCodec) -> None:
        self._rt, self._state, self._codec = rt, state, codec
        self._stateName = codec.state_name

    def exists(self) -> bool:
        rt = self._rt
        rt.keyed or rt.check_keyed(f"state '{self._stateName}'")
        stored = rt.read_value = self._state.value()
        rt.read_state = self._state
        return stored is not None

    def get(self) -> tuple | None:
        rt = self._rt
        rt.keyed or rt.check_keyed(f"state '{self._stateName}'")
        if rt.read_state is self._state:  # read by exists() just before: take it
            stored = rt.read_value
            rt.read_state = None
        else:
            stored = self._state.value()
        return None if stored is None else self._codec.load(stored)

    def update(self, newValue: Any) -> None:
        rt = self._rt
        rt.keyed or rt.check_keyed(f"state '{self._stateName}'")
        if newValue is None:
            raise ProcessorUsageError(f"state '{self._stateName}': update(None) is not allowed "
                                      f"(as in Spark); use clear() to remove the value")
        rt.read_state = None
        self._state.update(self._codec.store(newValue))

    def clear(self) -> None:
        rt = self._rt
        rt.keyed or rt.check_keyed(f"state '{self._stateName}'")
        rt.read_state = None
        self._state.clear()


class ListState(_Handle, sp.ListState):
    """Spark's ListState: ``exists``, ``get`` (an iterator of tuples), ``put``,
    ``appendValue``, ``appendList``, ``clear``."""

    _kind = "List"
    _empty_when_removed = ("get",)

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
                f"an empty list; use clear() to empty the list", EMPTY_LIST_ERROR)
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


class MapState(_Handle, sp.MapState):
    """Spark's MapState: ``exists``, ``getValue`` (a Row or None), ``containsKey``,
    ``updateValue``, ``iterator`` ((key tuple, value tuple) pairs), ``keys``, ``values``,
    ``removeKey``, ``clear``."""

    _kind = "Map"
    _empty_when_removed = ("iterator", "keys", "values")

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
