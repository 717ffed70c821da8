"""The StatefulProcessorHandle that stateengine gives a Spark processor, on a plain backend (no
Spark session): values by Spark schema as Spark's handle returns them, list and map
semantics, timers, deleteIfExists, and the refusals Spark makes too.

Expected values of the schema round trip are what Spark 4.3's own handle returned for the
same update (probed with transformWithStateInPandas on the RocksDB state store)."""

from __future__ import annotations

import datetime
import decimal

import pytest
from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.streaming import stateful_processor as sp

from stateengine.errors import ProcessorUsageError, SerializationError, StateRegistrationError
from stateengine.spark.processor_handle import INITIALIZED, TIMER_PROCESSED, ProcessorHandle, \
    ProcessorRuntime
from stateengine.spark.processor_values import RowCodec

ALL_TYPES = T.StructType([
    T.StructField("a", T.LongType()), T.StructField("b", T.DoubleType()),
    T.StructField("c", T.TimestampType()), T.StructField("d", T.DateType()),
    T.StructField("e", T.DecimalType(10, 2)), T.StructField("f", T.ArrayType(T.LongType())),
    T.StructField("g", T.MapType(T.StringType(), T.LongType())),
    T.StructField("h", T.StructType([T.StructField("x", T.LongType()),
                                     T.StructField("y", T.StringType())])),
    T.StructField("i", T.IntegerType()), T.StructField("j", T.FloatType())])


@pytest.fixture
def handle(make_backend):
    def factory(time_mode="ProcessingTime", schemas=None):
        rt = ProcessorRuntime(make_backend(key_type=str), time_mode, schemas or {}, ["k"], "UTC")
        return rt, ProcessorHandle(rt)
    return factory


def test_values_come_back_as_spark_returns_them(handle):
    rt, h = handle(schemas={"n long": T.StructType([T.StructField("n", T.LongType())])})
    v = h.getValueState("v", ALL_TYPES)
    assert isinstance(h, sp.StatefulProcessorHandle) and isinstance(v, sp.ValueState)
    rt.set_key("a")
    v.update((1, 2.5, datetime.datetime(2024, 5, 6, 7, 8, 9, 123456), datetime.date(2024, 1, 2),
              decimal.Decimal("3.14"), [1, 2], {"k": 3}, (4, "y"), 5, 1.5))
    got = v.get()
    assert got == (1, 2.5, datetime.datetime(2024, 5, 6, 7, 8, 9, 123456),
                   datetime.date(2024, 1, 2), decimal.Decimal("3.14"), [1, 2], {"k": 3},
                   Row(x=4, y="y"), 5, 1.5)
    assert type(got) is tuple and type(got[7]) is Row and got[7].y == "y"
    # conversions where Spark would store null or a float32 / a scaled decimal
    v.update((2, 3, datetime.datetime(2024, 1, 1), datetime.date(2024, 1, 1),
              decimal.Decimal("3.1"), [], {}, {"x": 1, "y": None}, 7.0, 0.1))
    got = v.get()
    assert got[1] == 3.0 and type(got[1]) is float and got[4] == decimal.Decimal("3.10")
    assert got[8] == 7 and got[9] == pytest.approx(0.1) and got[9] != 0.1  # 32-bit float
    counter = h.getValueState("counter", "n long")  # a DDL parsed on the driver
    counter.update((5,))
    assert counter.get() == (5,) and counter.exists()
    counter.clear()
    assert counter.get() is None and not counter.exists()


@pytest.mark.parametrize("value, message", [
    ((1, "x"), "field 'b' is double, got str"),
    ((1.5, 1.0), "field 'a' is bigint, got float 1.5"),
    ((1 << 63, 1.0), "out of its range"),
    ((1,), "has 1 fields but the schema has 2"),
    ("text", "must be a tuple, Row, list or dict"),
])
def test_values_that_do_not_fit_the_schema_are_refused(handle, value, message):
    rt, h = handle()
    v = h.getValueState("v", T.StructType([T.StructField("a", T.LongType()),
                                           T.StructField("b", T.DoubleType(), False)]))
    rt.set_key("a")
    v.update((1, 2.0))
    with pytest.raises(SerializationError, match=message):
        v.update(value)
    with pytest.raises(SerializationError, match="field 'b'"):
        v.update((1, None))  # b is not nullable
    assert v.get() == (1, 2.0)  # nothing was written
    with pytest.raises(ProcessorUsageError, match="update\\(None\\)"):
        v.update(None)
    assert RowCodec(T.StructType([T.StructField("a", T.LongType())]), "s").store(
        {"a": 3}) == (3,)


def test_list_and_map_state_methods(handle):
    rt, h = handle()
    lst = h.getListState("l", T.StructType([T.StructField("x", T.LongType())]))
    m = h.getMapState("m", T.StructType([T.StructField("k", T.StringType())]),
                      T.StructType([T.StructField("n", T.LongType()),
                                    T.StructField("z", T.DoubleType())]))
    rt.set_key("a")
    assert not lst.exists() and list(lst.get()) == [] and not m.exists()
    lst.appendValue((1,))
    lst.appendList([(2,), (3,)])
    assert lst.exists() and list(lst.get()) == [(1,), (2,), (3,)]
    lst.put([(9,)])
    assert list(lst.get()) == [(9,)]
    for call in (lambda: lst.put([]), lambda: lst.appendList([])):
        with pytest.raises(ProcessorUsageError, match="empty list"):
            call()
    with pytest.raises(ProcessorUsageError, match="None element"):
        lst.appendList([(1,), None])
    assert list(lst.get()) == [(9,)]
    lst.clear()
    assert not lst.exists()

    m.updateValue(("a",), (1, 2.5))
    m.updateValue(("b",), (2, 3))
    assert m.getValue(("a",)) == Row(n=1, z=2.5) and m.getValue(("a",)).z == 2.5
    assert m.getValue(("zz",)) is None and m.containsKey(("b",)) and not m.containsKey(("c",))
    assert sorted(m.iterator()) == [(("a",), (1, 2.5)), (("b",), (2, 3.0))]
    assert sorted(m.keys()) == [("a",), ("b",)] and sorted(m.values()) == [(1, 2.5), (2, 3.0)]
    m.removeKey(("a",))
    assert list(m.keys()) == [("b",)]
    rt.set_key("other")
    assert not m.exists() and not lst.exists()
    rt.set_key("a")
    m.clear()
    assert not m.exists()


def test_state_needs_a_grouping_key_and_reserved_names(handle):
    rt, h = handle()
    v = h.getValueState("v", T.StructType([T.StructField("n", T.LongType())]))
    with pytest.raises(ProcessorUsageError, match=r"^\[INTERNAL_ERROR_TWS\] state 'v' needs a "
                                                  r"grouping key") as info:
        v.get()  # as in init()
    assert info.value.error_class == "INTERNAL_ERROR_TWS"
    with pytest.raises(ProcessorUsageError, match=r"^\[STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_"
                                                  r"WITH_INVALID_HANDLE_STATE\] register_timer "
                                                  r"needs a grouping key.*not in init\(\)"):
        h.registerTimer(5)
    with pytest.raises(StateRegistrationError, match=r"^\[STATE_STORE_CANNOT_CREATE_COLUMN_FAMILY_"
                                                     r"WITH_RESERVED_CHARS\] .*reserved"):
        h.getValueState("$timers", T.StructType([T.StructField("n", T.LongType())]))
    with pytest.raises(ProcessorUsageError, match="was not declared"):
        h.getValueState("w", "n long")  # a DDL the driver never parsed


def test_timers_per_key_fire_from_a_snapshot_and_are_deleted_after_their_handler(handle):
    rt, h = handle("ProcessingTime")
    rt.phase = INITIALIZED  # as after init()
    rt.set_key("a")
    for ts in (30, 10, 20, 10):
        h.registerTimer(ts)
    rt.set_key("b")
    h.registerTimer(15)
    h.registerTimer(99)
    assert list(h.listTimers()) == [15, 99]
    rt.set_key("a")
    assert list(h.listTimers()) == [10, 20, 30]  # one timer per time, in time order
    h.deleteTimer(30)
    due = rt.due_timers(20)
    assert due == [("a", 10), ("b", 15), ("a", 20)]
    rt.set_key("a")
    assert list(h.listTimers()) == [10, 20]  # listed until its handler ran, as in Spark
    h.registerTimer(10)  # the handler registers the firing time again: deleted after it
    h.registerTimer(5)   # a past time: fires in the next batch
    rt.timer_fired(10)
    assert list(h.listTimers()) == [5, 20]
    assert rt.due_timers(20) == [("a", 5)]  # not 10; 20 was taken in the first snapshot


def test_timer_calls_are_refused_in_time_mode_none(handle):
    rt, h = handle("None")
    rt.set_key("a")
    rt.phase = INITIALIZED
    for op, call in (("register_timer", lambda: h.registerTimer(1)),
                     ("delete_timer", lambda: h.deleteTimer(1)), ("list_timers", h.listTimers)):
        with pytest.raises(ProcessorUsageError, match="time mode None") as info:
            call()
        assert str(info.value).startswith(
            f"[STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE] {op} ")


def test_states_are_declared_and_deleted_only_in_init_and_timers_only_with_a_key(handle):
    """Spark's handle states: declaring and deleting in init() (CREATED) only; timers from
    the input on, not in close() (TIMER_PROCESSED)."""
    rt, h = handle("ProcessingTime", schemas={"n long": T.StructType([T.StructField(
        "n", T.LongType())])})
    h.getValueState("v", "n long")
    rt.phase = INITIALIZED
    rt.set_key("a")
    h.registerTimer(5)
    for op, call in (("get_value_state", lambda: h.getValueState("w", "n long")),
                     ("get_list_state", lambda: h.getListState("w", "n long")),
                     ("get_map_state", lambda: h.getMapState("w", "n long", "n long")),
                     ("delete_if_exists", lambda: h.deleteIfExists("v"))):
        with pytest.raises(ProcessorUsageError) as info:
            call()
        assert info.value.error_class == "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_" \
                                         "INVALID_HANDLE_STATE"
        assert f"] {op} is allowed only in init(), not in handleInputRows" in str(info.value)
    rt.phase = TIMER_PROCESSED
    with pytest.raises(ProcessorUsageError, match=r"not in close\(\) \(handle state "
                                                  r"TIMER_PROCESSED\)"):
        h.registerTimer(6)


def test_delete_if_exists_clears_a_state_for_every_key(handle):
    rt, h = handle()
    old = h.getValueState("old", T.StructType([T.StructField("n", T.LongType())]))
    keep = h.getValueState("keep", T.StructType([T.StructField("n", T.LongType())]))
    for k in ("a", "b", "c"):
        rt.set_key(k)
        old.update((1,))
        keep.update((2,))
    h.deleteIfExists("old")
    h.deleteIfExists("never-declared")  # nothing to delete
    for k in ("a", "b", "c"):
        rt.set_key(k)
        assert keep.get() == (2,)
        for call in (old.get, old.exists, old.clear, lambda: old.update((3,))):
            with pytest.raises(ProcessorUsageError, match="^Value state old is not initialized: "
                                                          r"deleteIfExists\('old'\) removed it"):
                call()  # as Spark's handle raises; nothing is written again
    again = h.getValueState("old", T.StructType([T.StructField("n", T.LongType())]))
    for k in ("a", "b", "c"):
        rt.set_key(k)
        assert again.get() is None and old.get() is None  # declared again: both handles work
    old.update((4,))
    assert again.get() == (4,)


def test_a_deleted_list_or_map_reads_as_empty_and_raises_elsewhere_as_in_spark(handle):
    rt, h = handle()
    lst = h.getListState("l", T.StructType([T.StructField("x", T.LongType())]))
    m = h.getMapState("m", T.StructType([T.StructField("k", T.LongType())]),
                      T.StructType([T.StructField("n", T.LongType())]))
    rt.set_key("a")
    lst.appendValue((1,))
    m.updateValue((1,), (2,))
    h.deleteIfExists("l")
    h.deleteIfExists("m")
    assert list(lst.get()) == [] and list(m.iterator()) == [] and list(m.keys()) == [] \
        and list(m.values()) == []
    for kind, call in (("List", lst.exists), ("List", lambda: lst.put([(1,)])),
                       ("List", lambda: lst.appendValue((1,))), ("List", lst.clear),
                       ("List", lambda: lst.appendList([(1,)])), ("Map", m.exists),
                       ("Map", lambda: m.getValue((1,))), ("Map", lambda: m.containsKey((1,))),
                       ("Map", lambda: m.updateValue((1,), (3,))), ("Map", m.clear),
                       ("Map", lambda: m.removeKey((1,)))):
        with pytest.raises(ProcessorUsageError, match=f"^{kind} state . is not initialized"):
            call()


def test_get_after_exists_reads_once_and_never_hands_out_a_value_twice(handle):
    """exists() keeps what it read for the get() that follows it; a write, another key or a
    second get() reads again, and each get() returns its own objects."""
    rt, h = handle()
    schema = T.StructType([T.StructField("n", T.LongType()),
                           T.StructField("xs", T.ArrayType(T.LongType()))])
    v, w = h.getValueState("v", schema), h.getValueState("w", schema)
    rt.set_key("a")
    v.update((1, [1]))
    rt.set_key("b")
    v.update((2, [2]))
    assert v.exists() and v.get() == (2, [2])
    assert v.exists()
    v.update((3, [3]))
    assert v.get() == (3, [3])  # not what exists() saw before the update
    assert v.exists()
    rt.set_key("a")
    assert v.get() == (1, [1])  # another key
    assert v.exists() and not w.exists() and v.get() == (1, [1])  # w's read is not v's
    assert v.exists()
    first = v.get()
    first[1].append(99)
    assert v.get() == (1, [1])  # a fresh read: the first value's list is its own
    assert v.exists()
    v.clear()
    assert v.get() is None
