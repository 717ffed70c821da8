"""Typed state: a descriptor declares its values (and map user keys) as a Spark schema, and the
engine stores them with the struct codec, reads them back as properly typed Python values and
Arrow columns, refuses values that do not fit naming the field, and keeps the schema through
snapshots and restores.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from decimal import Context, Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateengine import (AggregateFunction, AggregatingStateDescriptor, CorruptionError,
                         KeyedStateBackend, ListStateDescriptor,
                         MapStateDescriptor, NullElementError, ReducingStateDescriptor,
                         SerializationError, SortedMapStateDescriptor, StateRegistrationError,
                         ValueStateDescriptor, _native, sparktypes)
from stateengine.errors import IncompatibleStateError
from stateengine.serializers import Codec
from stateengine.sparktypes import (ArrayType, AtomicType, DecimalType, MapType, StructField,
                                    StructType, parse_ddl)

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

UTC = dt.timezone.utc
SCHEMA = "count long, last string, seen array<long>"


def raw(backend, state):
    return backend._raw_scan(state.column_family)


# ---- schemas -------------------------------------------------------------------------------

def test_ddl_field_lists_and_types_parse_to_canonical_schemas():
    t = parse_ddl("count long, last STRING not null, `odd name` array<bigint>, "
                  "m map<string, decimal(10,2)>, s struct<a: int, b short>, d date COMMENT 'x'")
    assert t.canonical() == ("struct<count:bigint,last:string NOT NULL,`odd name`:array<bigint>,"
                             "m:map<string,decimal(10,2)>,s:struct<a:int,b:smallint>,d:date>")
    assert parse_ddl(t.canonical()) == t  # canonical strings parse back to the same schema
    assert parse_ddl("array<long>") == ArrayType(AtomicType("bigint"))
    assert parse_ddl("decimal") == DecimalType(10, 0)
    assert parse_ddl("date date, n long").names == ["date", "n"]  # a field named like a type
    assert parse_ddl("array<int NOT NULL>") == ArrayType(AtomicType("int"), False)


@pytest.mark.parametrize("ddl, message", [
    ("count lon", "unknown type 'lon'"),
    ("a int,", "unexpected end at position 6"),
    ("a decimal(40,2)", "precision 1..38"),
    ("a decimal(5,6)", "scale 0..precision"),
    ("a struct<>", "at least one field"),
    ("a int, a long", "appears twice"),
    ("m map<map<int,int>,int>", "map key cannot contain a map"),
    ("a " + "array<" * 40 + "int" + ">" * 40, "deeper than"),
])
def test_bad_schemas_are_refused_at_registration(ddl, message):
    with pytest.raises(StateRegistrationError, match=message):
        ValueStateDescriptor("v", value_type=ddl)


def test_pyspark_types_need_no_session():
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("count", T.LongType(), False),
                           T.StructField("tags", T.MapType(T.StringType(), T.ArrayType(T.IntegerType(), False))),
                           T.StructField("price", T.DecimalType(12, 3)),
                           T.StructField("at", T.TimestampType()),
                           T.StructField("local", T.TimestampNTZType())])
    d = ValueStateDescriptor("v", value_type=schema)
    assert d.value_codec == Codec.STRUCT
    assert d.value_schema == parse_ddl(
        "count long not null, tags map<string, array<int not null>>, price decimal(12,3), "
        "at timestamp, local timestamp_ntz")
    assert d.meta()["value_schema"] == d.value_schema.canonical()
    # Spark types that an existing codec stores keep that codec.
    assert ValueStateDescriptor("v", value_type=T.LongType()).value_codec == Codec.BIGINT
    with pytest.raises(StateRegistrationError, match="not supported"):
        ValueStateDescriptor("v", value_type=T.StructType([T.StructField("x", T.NullType())]))


def test_primitive_names_keep_their_codecs():
    for name, codec in (("int", Codec.INT), ("bigint", Codec.BIGINT), ("string", Codec.STRING),
                        ("long", Codec.BIGINT), ("real", Codec.FLOAT), ("boolean", Codec.BOOLEAN)):
        assert ValueStateDescriptor("v", value_type=name).value_codec == codec, name
    assert ValueStateDescriptor("v", value_type="smallint").value_codec == Codec.STRUCT
    assert ValueStateDescriptor("v", value_type="a int").value_codec == Codec.STRUCT


def test_sorted_map_user_keys_cannot_be_structs():
    with pytest.raises(StateRegistrationError, match="SortedMapState user keys"):
        SortedMapStateDescriptor("s", "a int, b string")
    with pytest.raises(StateRegistrationError, match="compare by value"):
        MapStateDescriptor("m", user_key_type="k map<string,int>")


# ---- scalar values -------------------------------------------------------------------------

def test_values_round_trip_with_their_python_types(backend):
    ddl = ("l long, i int, s short, b byte, d double, f float, str string, bin binary, "
           "ok boolean, dec decimal(38,6), day date, at timestamp, wall timestamp_ntz, "
           "tags array<string>, m map<int, struct<x: double>>, inner struct<a: long, b: array<int>>")
    state = backend.get_state(ValueStateDescriptor("v", value_type=ddl))
    backend.set_current_key("k")
    value = (-2**63, 2**31 - 1, -32768, 127, -0.5, 1.5, "ünï", b"\x00\xff", True,
             Decimal("-12345678901234567890123456789012.345678"), dt.date(1, 1, 1),
             dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
             dt.datetime(9999, 12, 31, 23, 59, 59), ["a", None, ""], {1: (0.25,), 2: None},
             (7, [1, None]))
    state.update(value)
    got = state.value()
    assert got == value
    assert type(got) is tuple and type(got[13]) is list and type(got[14]) is dict
    assert type(got[9]) is Decimal and str(got[9]) == "-12345678901234567890123456789012.345678"
    assert got[11].tzinfo is not None and got[12].tzinfo is None
    state.update((0,) * 4 + (0.0, 0.0, "", b"", False, Decimal(0), dt.date(1970, 1, 1),
                  dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(1970, 1, 1), [], {}, (0, [])))
    assert state.value()[9] == 0


def test_rows_dicts_and_lists_are_structs_and_values_come_back_as_tuples(backend):
    from pyspark.sql import Row

    state = backend.get_state(ValueStateDescriptor("v", value_type=SCHEMA))
    backend.set_current_key(1)
    for given_value in (Row(count=1, last="a", seen=[2]), {"seen": [2], "last": "a", "count": 1},
                        [1, "a", (2,)], (1, "a", np.array([2]))):
        state.update(given_value)
        assert state.value() == (1, "a", [2])
    state.update((np.int32(1), np.str_("a"), [np.int64(2)]))
    assert state.value() == (1, "a", [2])


def test_timestamps_are_utc_instants_and_naive_datetimes_are_read_as_utc(backend):
    state = backend.get_state(ValueStateDescriptor("v", value_type="at timestamp, wall timestamp_ntz"))
    backend.set_current_key(1)
    paris = dt.timezone(dt.timedelta(hours=2))
    state.update((dt.datetime(2024, 6, 1, 12, tzinfo=paris), dt.datetime(2024, 6, 1, 12)))
    at, wall = state.value()
    assert at == dt.datetime(2024, 6, 1, 10, tzinfo=UTC) and at.tzinfo == UTC
    assert wall == dt.datetime(2024, 6, 1, 12) and wall.tzinfo is None
    state.update((dt.datetime(2024, 6, 1, 12), dt.datetime(2024, 6, 1, 12)))
    assert state.value()[0] == dt.datetime(2024, 6, 1, 12, tzinfo=UTC)
    with pytest.raises(SerializationError, match="field 'wall': timestamp_ntz holds wall-clock"):
        state.update((None, dt.datetime(2024, 6, 1, tzinfo=UTC)))


@pytest.mark.parametrize("value, message", [
    ((1, "x", [1, 2, 3, "4"]), "field 'seen\\[3\\]': expected bigint, got str"),
    (("1", "x", []), "field 'count': expected bigint, got str"),
    ((True, "x", []), "field 'count': expected bigint, got bool"),
    ((1.0, "x", []), "field 'count': expected bigint, got float"),
    ((2**63, "x", []), "field 'count': 9223372036854775808 is out of range for bigint"),
    ((1, b"x", []), "field 'last': expected string, got bytes"),
    ((1, "\udcff", []), "field 'last': text .* lone surrogate"),
    ((1, "x"), "expected a struct of 3 fields \\(count, last, seen\\), got a tuple of 2 items"),
    ({"count": 1, "last": "x"}, "field 'seen' is missing"),
    ({"count": 1, "last": "x", "seen": [], "extra": 1}, "keys that are not fields.*'extra'"),
    (5, "expected a struct \\(count, last, seen\\) as a tuple, Row or dict, got int"),
    ((1, "x", "abc"), "field 'seen': expected array<bigint>, got str"),
])
def test_a_value_that_does_not_fit_names_the_field_and_writes_nothing(backend, value, message):
    state = backend.get_state(ValueStateDescriptor("v", value_type=SCHEMA))
    backend.set_current_key(1)
    state.update((1, "before", [1]))
    before = raw(backend, state)
    with pytest.raises(SerializationError, match=message):
        state.update(value)
    assert raw(backend, state) == before and state.value() == (1, "before", [1])


@pytest.mark.parametrize("ddl, value, message", [
    ("a int", (2**31,), "out of range for int"),
    ("a short", (-32769,), "out of range for smallint"),
    ("a byte", (128,), "out of range for tinyint"),
    ("a float", (1e39,), "outside the range of the 32-bit 'float'"),
    ("a decimal(5,2)", (Decimal("1.005"),), "more than 2 digits after the point"),
    ("a decimal(5,2)", (Decimal("1234.5"),), "more than 3 digits before the point"),
    ("a decimal(5,2)", (Decimal("NaN"),), "not a finite decimal"),
    ("a decimal(5,2)", (1.5,), "expected decimal\\(5,2\\), got float"),
    ("a date", (dt.datetime(2024, 1, 1),), "expected date, got datetime"),
    ("a int not null", (None,), "field 'a': is NOT NULL but got None"),
    ("a array<int not null>", ([1, None],), "field 'a\\[1\\]': is NOT NULL"),
    ("m map<string,int not null>", ({"x": None},), "field 'm\\[entry 0\\].value': is NOT NULL"),
    ("m map<string,int>", ({None: 1},), "map keys cannot be None"),
    ("m map<string,int>", ({"x": "y"},), "field 'm\\[entry 0\\].value': expected int, got str"),
    ("s struct<a: struct<b: int>>", (((None,),),), None),
    ("s struct<a: struct<b: int>>", ((("x",),),), "field 's.a.b': expected int"),
])
def test_field_checks(backend, ddl, value, message):
    state = backend.get_state(ValueStateDescriptor("v", value_type=ddl))
    backend.set_current_key(1)
    if message is None:
        state.update(value)
        assert state.value() == value
    else:
        with pytest.raises(SerializationError, match=message):
            state.update(value)
        assert state.value() is None


def test_list_map_reducing_states_with_schemas(backend):
    backend.set_current_key("u")
    events = backend.get_state(ListStateDescriptor("events", value_type="kind string, at long"))
    events.add(("click", 1))
    events.add_all([("view", 2), {"kind": "buy", "at": 3}])
    assert events.get() == [("click", 1), ("view", 2), ("buy", 3)]
    with pytest.raises(SerializationError, match="field 'at': expected bigint"):
        events.add_all([("ok", 4), ("bad", "5")])
    assert len(events.get()) == 3
    pages = backend.get_state(MapStateDescriptor("pages", user_key_type="path string, q int",
                                                 value_type="hits long, last date"))
    pages.put(("/home", 1), (2, dt.date(2024, 1, 1)))
    pages.put_all({("/cart", None): None, ("/home", 2): (1, None)})
    assert pages.get(("/home", 1)) == (2, dt.date(2024, 1, 1))
    assert pages.contains(("/cart", None)) and pages.get(("/cart", None)) is None
    assert sorted(pages.keys()) == [("/cart", None), ("/home", 1), ("/home", 2)]
    assert dict(pages.entries())[("/home", 2)] == (1, None)
    with pytest.raises(SerializationError, match="field 'q': expected int"):
        pages.put(("/x", "1"), (1, None))
    longest = backend.get_state(ReducingStateDescriptor(
        "longest", lambda a, b: a if a[1] >= b[1] else b, value_type="name string, n int"))
    longest.add(("a", 1))
    longest.add(("b", 3))
    longest.add(("c", 2))
    assert longest.get() == ("b", 3)


def test_default_must_fit_the_schema(backend):
    with pytest.raises(StateRegistrationError, match="default .* does not fit"):
        ValueStateDescriptor("v", value_type="a int", default=("x",))
    state = backend.get_state(ValueStateDescriptor("v", value_type="a int, b string",
                                                   default=(0, "none")))
    backend.set_current_key(1)
    assert state.value() == (0, "none")
    values, found = state.get_many([1, 2])
    assert values.to_pylist() == [{"a": 0, "b": "none"}] * 2 and not found.any()


# ---- batch calls over columns --------------------------------------------------------------

THREE = "count long, last string, score double"


def three_rows(n):
    return [(i * 7 - 3, None if i % 5 == 0 else f"v{i}", i / 4) for i in range(n)]


def column_forms(rows):
    """The same rows as every kind of column a typed batch call takes."""
    cols = {"count": [r[0] for r in rows], "last": [r[1] for r in rows],
            "score": [r[2] for r in rows]}
    table = pa.table({"count": pa.array(cols["count"], pa.int64()),
                      "last": pa.array(cols["last"], pa.string()),
                      "score": pa.array(cols["score"], pa.float64())})
    yield "pandas", pd.DataFrame(cols)
    yield "dict of lists", cols
    yield "dict of numpy/arrow", {"count": np.array(cols["count"]), "score": np.array(cols["score"]),
                                  "last": pa.array(cols["last"])}
    yield "record batch", table.to_batches()[0]
    yield "table (chunked)", pa.concat_tables([table.slice(0, 3), table.slice(3)])
    yield "struct array", pa.StructArray.from_arrays(
        [table.column(n).combine_chunks() for n in ("count", "last", "score")],
        names=["count", "last", "score"])
    yield "struct array, other field order and int32", pa.StructArray.from_arrays(
        [table.column("score").combine_chunks(), table.column("last").combine_chunks(),
         pa.array(cols["count"], pa.int32())], names=["score", "last", "count"])
    yield "list of tuples", list(rows)
    yield "list of dicts", [dict(zip(("count", "last", "score"), r)) for r in rows]


def test_value_put_many_equals_scalar_updates_bytewise_for_every_column_form(make_backend):
    rows = three_rows(12)
    keys = list(range(100, 112))
    scalar = make_backend()
    sv = scalar.get_state(ValueStateDescriptor("v", value_type=THREE))
    for k, r in zip(keys, rows):
        scalar.set_current_key(k)
        sv.update(r)
    expected = raw(scalar, sv)
    for name, column in column_forms(rows):
        be = make_backend()
        state = be.get_state(ValueStateDescriptor("v", value_type=THREE))
        state.put_many(np.array(keys), column)
        assert raw(be, state) == expected, name
        values, found = state.get_many(np.array(keys + [1]))
        assert isinstance(values, pa.StructArray) and values.type == pa.struct(
            [("count", pa.int64()), ("last", pa.string()), ("score", pa.float64())])
        values.validate(full=True)
        assert values.to_pylist() == [dict(zip(("count", "last", "score"), r)) for r in rows] + [None]
        assert found.tolist() == [True] * 12 + [False]


def test_value_put_many_null_rows_clear_and_last_row_wins(backend):
    state = backend.get_state(ValueStateDescriptor("v", value_type=THREE))
    state.put_many([1, 2, 1], [(1, "a", 0.5), (2, "b", 1.0), (3, "c", 1.5)])
    assert state.get_many([1])[0].to_pylist() == [{"count": 3, "last": "c", "score": 1.5}]
    arr = pa.array([None, {"count": 9, "last": "z", "score": 0.0}],
                   pa.struct([("count", pa.int64()), ("last", pa.string()), ("score", pa.float64())]))
    state.put_many([1, 2], arr)
    values, found = state.get_many([1, 2])
    assert found.tolist() == [False, True] and values.to_pylist()[0] is None


@pytest.mark.parametrize("column, message", [
    (pd.DataFrame({"count": [1, 2, 3], "last": ["a", "b", "c"], "score": ["x", "y", "z"]}),
     "row 0: field 'score': expected double, got str"),
    (pd.DataFrame({"count": [1.5, 2.0, 3.0], "last": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]}),
     "row 0: field 'count': expected bigint, got float \\(1.5\\)"),
    ({"count": np.array([1.5, 2.0, 3.0]), "last": pa.array(["a", "b", "c"]),
      "score": np.array([1.0, 2.0, 3.0])},
     "row 0: field 'count': expected bigint, got float"),
    ({"count": [1, 2, 3], "last": ["a", "b", "c"]}, "field 'score' of the schema .* has no column"),
    ({"count": [1, 2, 3], "last": ["a", "b", "c"], "score": [1.0] * 3, "x": [0] * 3},
     "column 'x' is not a field"),
    ([(1, "a", 1.0), (2, "b", 2.0), (3, 4, 3.0)], "row 2: field 'last': expected string, got int"),
    (pa.table({"count": pa.array([1, 2, 2**40], pa.int64()), "last": ["a", "b", "c"],
               "score": [1.0, 2.0, 3.0]}).cast(pa.schema([("count", pa.int64()), ("last", pa.string()),
                                                        ("score", pa.float64())])), None),
])
def test_a_bad_row_in_a_batch_writes_nothing(backend, column, message):
    state = backend.get_state(ValueStateDescriptor("v", value_type=THREE))
    state.put_many([7], [(0, "keep", 0.0)])
    before = raw(backend, state)
    if message is None:
        state.put_many([1, 2, 3], column)
        return
    with pytest.raises(SerializationError, match=message):
        state.put_many([1, 2, 3], column)
    assert raw(backend, state) == before


def test_arrow_columns_are_checked_in_cpp_naming_row_and_field(backend):
    state = backend.get_state(ValueStateDescriptor("v", value_type="a int not null, d date, "
                                                   "s array<long not null>"))
    good = {"a": pa.array([1, 2], pa.int32()), "d": pa.array([dt.date(2024, 1, 1), None]),
            "s": pa.array([[1], []], pa.list_(pa.int64()))}
    state.put_many([1, 2], good)
    before = raw(backend, state)
    bad_cases = [
        (dict(good, a=pa.array([1, None], pa.int32())), "field 'a' is NOT NULL .* row 1"),
        (dict(good, d=pa.array([0, 2932896 + 1], pa.int32()).cast(pa.date32())),
         "field 'd' of row 1 is out of range"),
        (dict(good, s=pa.array([[1], [2, None]], pa.list_(pa.int64()))),
         "field 's\\[1\\]' is NOT NULL .* row 1"),
        (dict(good, a=pa.array([1, 2**40], pa.int64())), "field 'a': a value does not fit int"),
        (dict(good, s=pa.array([["1"], []])), "row 0: field 's\\[0\\]': expected bigint, got str"),
    ]
    for column, message in bad_cases:
        with pytest.raises(SerializationError, match=message):
            state.put_many([1, 2], column)
        assert raw(backend, state) == before


def test_float_fields_refuse_doubles_beyond_float32_in_batches_too(backend):
    state = backend.get_state(ValueStateDescriptor("v", value_type="f float"))
    with pytest.raises(SerializationError, match="outside the range of float"):
        state.put_many([1, 2], {"f": np.array([1.0, 1e39])})
    state.put_many([1, 2], {"f": np.array([1.5, np.inf])})
    assert state.get_many([1, 2])[0].to_pylist() == [{"f": 1.5}, {"f": float("inf")}]


def test_list_state_batches(make_backend):
    be = make_backend()
    events = be.get_state(ListStateDescriptor("e", value_type="kind string, at long"))
    events.add_many([1, 2, 1], pd.DataFrame({"kind": ["a", "b", "c"], "at": [10, 20, 30]}))
    events.add_many([2], [("d", 40)])
    lists = events.get_many([1, 2, 3])
    assert isinstance(lists, pa.ListArray)
    lists.validate(full=True)
    assert lists.to_pylist() == [[{"kind": "a", "at": 10}, {"kind": "c", "at": 30}],
                                 [{"kind": "b", "at": 20}, {"kind": "d", "at": 40}], []]
    scalar = make_backend()
    sl = scalar.get_state(ListStateDescriptor("e", value_type="kind string, at long"))
    for k, v in ((1, ("a", 10)), (2, ("b", 20)), (1, ("c", 30)), (2, ("d", 40))):
        scalar.set_current_key(k)
        sl.add(v)
    assert raw(be, events) == raw(scalar, sl)
    with pytest.raises(NullElementError):
        events.add_many([1, 2], pa.array([{"kind": "x", "at": 1}, None],
                                         pa.struct([("kind", pa.string()), ("at", pa.int64())])))
    with pytest.raises(NullElementError):
        events.add_many([1, 2], [("x", 1), None])



class Average(AggregateFunction):
    def create_accumulator(self):
        return (0.0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def test_reducing_and_aggregating_batches_with_python_functions(make_backend):
    be = make_backend()
    longest = be.get_state(ReducingStateDescriptor(
        "longest", lambda a, b: a if a[1] >= b[1] else b, value_type="name string, n int"))
    # a reduce function sees struct columns as the tuples value() returns
    longest.add_many([1, 1, 2], pa.table({"name": ["a", "b", "c"], "n": pa.array([1, 3, 2], pa.int32())}))
    assert longest.get_many([1, 2])[0].to_pylist() == [{"name": "b", "n": 3}, {"name": "c", "n": 2}]
    # an aggregate's inputs (here Arrow doubles) are not of its accumulator's schema
    avg = be.get_state(AggregatingStateDescriptor("avg", Average(),
                                                  accumulator_type="total double, n long"))
    avg.add_many(pa.array([1, 1, 2]), pa.array([1.0, 2.0, 5.0]))
    avg.add_many(np.array([2]), np.array([7.0]))
    be.set_current_key(1)
    assert avg.get() == 1.5
    be.set_current_key(2)
    assert avg.get() == 6.0
def test_map_state_batches_with_typed_user_keys_and_values(make_backend):
    be = make_backend()
    m = be.get_state(MapStateDescriptor("m", user_key_type="path string, q int",
                                        value_type="hits long"))
    uks = pd.DataFrame({"path": ["/a", "/b", "/a"], "q": [1, 2, 1]})
    m.put_many([1, 1, 2], uks, pa.table({"hits": [5, 6, None]}))
    values, found = m.get_many([1, 1, 2, 2], pd.DataFrame({"path": ["/a", "/b", "/a", "/z"],
                                                          "q": [1, 2, 1, 0]}))
    assert values.to_pylist() == [{"hits": 5}, {"hits": 6}, {"hits": None}, None]
    assert found.tolist() == [True, True, True, False]
    scalar = make_backend()
    sm = scalar.get_state(MapStateDescriptor("m", user_key_type="path string, q int",
                                             value_type="hits long"))
    for k, uk, v in ((1, ("/a", 1), (5,)), (1, ("/b", 2), (6,)), (2, ("/a", 1), (None,))):
        scalar.set_current_key(k)
        sm.put(uk, v)
    assert raw(be, m) == raw(scalar, sm)
    m.put_many([3], [("/n", 1)], [None])  # a None value, as put(uk, None)
    be.set_current_key(3)
    assert m.contains(("/n", 1)) and m.get(("/n", 1)) is None
    with pytest.raises(SerializationError, match="user keys: row 0 is None"):
        m.put_many([3], [None], [(1,)])


def test_non_struct_schemas_take_one_column(backend):
    state = backend.get_state(ValueStateDescriptor("v", value_type="array<decimal(6,2)>"))
    backend.set_current_key(1)
    state.update([Decimal("1.5"), None])
    assert state.value() == [Decimal("1.50"), None]
    state.put_many([2, 3], pa.array([[Decimal("2.25")], []], pa.list_(pa.decimal128(6, 2))))
    values, _ = state.get_many([1, 2, 3])
    assert values.type == pa.list_(pa.field("element", pa.decimal128(6, 2)))
    assert values.to_pylist() == [[Decimal("1.50"), None], [Decimal("2.25")], []]
    with pytest.raises(SerializationError, match="not a struct, so it takes one column"):
        state.put_many([1], {"x": [1]})


def test_empty_batches(backend):
    state = backend.get_state(ValueStateDescriptor("v", value_type=THREE))
    state.put_many([], [])
    values, found = state.get_many([])
    assert len(values) == 0 and values.type.num_fields == 3 and len(found) == 0
    lists = backend.get_state(ListStateDescriptor("l", value_type=THREE)).get_many([])
    assert len(lists) == 0


# ---- snapshots, registration, corruption ----------------------------------------------------

def test_schema_survives_snapshot_and_restore_and_must_match(tmp_path, make_backend):
    be = make_backend()
    state = be.get_state(ValueStateDescriptor("v", value_type=SCHEMA))
    state.put_many(list(range(50)), [(i, f"s{i}", list(range(i % 4))) for i in range(50)])
    full = be.snapshot(str(tmp_path / "cp"), "full").result()
    inc = be.checkpoint(1, str(tmp_path / "cp")).result()
    for handle in (full, inc):
        restored = KeyedStateBackend.restore(str(tmp_path / f"r-{uuid.uuid4().hex[:6]}"), [handle])
        try:
            assert restored.state_meta("v")["value_schema"] == parse_ddl(SCHEMA).canonical()
            again = restored.get_state(ValueStateDescriptor("v", value_type=SCHEMA))
            restored.set_current_key(7)
            assert again.value() == (7, "s7", [0, 1, 2])
            # registered, a state keeps its schema in this backend (it evolves on restore)
            with pytest.raises(StateRegistrationError, match="registered with value schema "
                               "struct<count:bigint,last:string,seen:array<bigint>>.*declares "
                               "struct<count:bigint,last:string> .*one schema per state"):
                restored.get_state(ValueStateDescriptor("v", value_type="count long, last string"))
        finally:
            restored.dispose()
    with pytest.raises(IncompatibleStateError, match=r"v value.count: bigint -> int \(narrowing"):
        KeyedStateBackend.restore(str(tmp_path / "r-x"), [full], descriptors=[
            ValueStateDescriptor("v", value_type="count int, last string, seen array<long>")])


def test_registering_another_schema_under_the_same_name_is_refused(backend):
    backend.get_state(ValueStateDescriptor("v", value_type="a int"))
    with pytest.raises(StateRegistrationError, match="registered with value schema struct<a:int>"):
        backend.get_state(ValueStateDescriptor("v", value_type="a long"))
    with pytest.raises(StateRegistrationError, match="value serializer 'struct'"):
        backend.get_state(ValueStateDescriptor("v"))
    backend.get_state(MapStateDescriptor("m", user_key_type="a int"))
    with pytest.raises(StateRegistrationError, match="user key schema struct<a:int>"):
        backend.get_state(MapStateDescriptor("m", user_key_type="b int"))


@pytest.mark.parametrize("data", [
    b"",                                  # nothing
    b"\x00" + b"\x00" * 7,                # bigint cut short
    b"\x00" + b"\x00" * 8 + b"\x05ab" + b"\x00",   # string longer than the bytes left
    b"\x08" + b"\x00" * 8 + b"\x01a",     # a null bit on a field past the last one
    b"\x00" + b"\x00" * 8 + b"\x00" + b"\xff\xff\xff\xff\x0f",  # array count beyond the bytes
    b"\x00" + b"\x00" * 8 + b"\x02\xc3\x28" + b"\x00",  # invalid UTF-8
])
def test_corrupt_bytes_are_corruption_errors_in_every_path(backend, data):
    state = backend.get_state(ValueStateDescriptor("v", value_type=SCHEMA))
    codec = _native.row_codec(parse_ddl(SCHEMA))
    assert codec.length(data) == -1
    backend.set_current_key(1)
    state._raw_put_in(data)
    with pytest.raises(CorruptionError):
        state.value()
    with pytest.raises(CorruptionError):
        state.get_many([1])


# ---- properties over random schemas --------------------------------------------------------

ATOMIC = ["bigint", "int", "smallint", "tinyint", "double", "float", "string", "binary",
          "boolean", "date", "timestamp", "timestamp_ntz"]
KEYABLE = ["bigint", "int", "string", "binary", "boolean", "date", "tinyint"]


def schemas(depth: int = 3):
    atomic = st.one_of(st.sampled_from(ATOMIC).map(AtomicType),
                       st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(
                           lambda s: DecimalType(p, s))))
    if depth == 0:
        return atomic
    inner = schemas(depth - 1)
    return st.one_of(
        atomic,
        st.builds(ArrayType, inner, st.booleans()),
        st.builds(MapType, st.sampled_from(KEYABLE).map(AtomicType), inner, st.booleans()),
        structs(inner))


def structs(inner):
    return st.lists(st.tuples(st.sampled_from("abcdefghij"), inner, st.booleans()), min_size=1,
                    max_size=9, unique_by=lambda f: f[0]).map(
        lambda fs: StructType(tuple(StructField(n, t, nullable) for n, t, nullable in fs)))


def values_of(t, nullable=True):
    def maybe_null(s):
        return st.one_of(st.none(), s) if nullable else s

    if isinstance(t, AtomicType):
        n = t.name
        base = {
            "bigint": st.integers(-2**63, 2**63 - 1), "int": st.integers(-2**31, 2**31 - 1),
            "smallint": st.integers(-2**15, 2**15 - 1), "tinyint": st.integers(-128, 127),
            "double": st.floats(allow_nan=False), "float": st.floats(width=32, allow_nan=False),
            "string": st.text(max_size=8), "binary": st.binary(max_size=8),
            "boolean": st.booleans(), "date": st.dates(),
            "timestamp": st.datetimes(timezones=st.just(UTC)),
            "timestamp_ntz": st.datetimes(),
        }[n]
        return maybe_null(base)
    if isinstance(t, DecimalType):
        bound = 10 ** t.precision - 1
        return maybe_null(st.integers(-bound, bound).map(
            lambda u: Decimal(u).scaleb(-t.scale, Context(prec=100))))
    if isinstance(t, ArrayType):
        return maybe_null(st.lists(values_of(t.element, t.contains_null), max_size=5))
    if isinstance(t, MapType):
        return maybe_null(st.dictionaries(values_of(t.key, False),
                                          values_of(t.value, t.value_contains_null), max_size=4))
    return maybe_null(st.tuples(*[values_of(f.type, f.nullable) for f in t.fields]))


def to_arrow_py(t, v):
    """A Python value as pyarrow.array takes it for type t (structs as dicts)."""
    if v is None:
        return None
    if isinstance(t, StructType):
        return {f.name: to_arrow_py(f.type, x) for f, x in zip(t.fields, v)}
    if isinstance(t, ArrayType):
        return [to_arrow_py(t.element, x) for x in v]
    if isinstance(t, MapType):
        return [(to_arrow_py(t.key, k), to_arrow_py(t.value, x)) for k, x in v.items()]
    return v


def from_arrow_py(t, v):
    """Arrow's to_pylist form back to the scalar decoder's (tuples, dicts)."""
    if v is None:
        return None
    if isinstance(t, StructType):
        return tuple(from_arrow_py(f.type, v[f.name]) for f in t.fields)
    if isinstance(t, ArrayType):
        return [from_arrow_py(t.element, x) for x in v]
    if isinstance(t, MapType):
        return {from_arrow_py(t.key, k): from_arrow_py(t.value, x) for k, x in v}
    if isinstance(t, AtomicType) and t.name == "timestamp":
        return v.astimezone(UTC)
    return v


@SETTINGS
@given(data=st.data(), t=schemas())
def test_scalar_and_arrow_paths_agree_on_random_schemas(t, data):
    """Every value round-trips through the scalar codec; Arrow columns of the same values
    encode (C++) to the same bytes and decode (C++) to the same values."""
    t = sparktypes.check_type(t)
    codec = _native.row_codec(t)
    rows = data.draw(st.lists(values_of(t, nullable=False), min_size=1, max_size=6))
    encoded = [codec.encode_bytes(v) for v in rows]
    for v, b in zip(rows, encoded):
        assert codec.length(b + b"tail") == len(b)
        assert codec.decode_bytes(b) == v
    arr = pa.array([to_arrow_py(t, v) for v in rows], type=codec.arrow_type)
    assert _native.encode_rows_from_arrow(codec, arr) == encoded
    assert _native.encode_rows_from_arrow(codec, pa.concat_arrays([arr[:1], arr]).slice(1)) == encoded
    back = _native.decode_rows_to_arrow(codec, encoded, "value")
    back.validate(full=True)
    assert back.type == codec.arrow_type
    assert [from_arrow_py(t, x) for x in back.to_pylist()] == rows
    lists = _native.decode_rows_to_arrow(codec, [b",".join(encoded), b""], "list")
    lists.validate(full=True)
    assert [[from_arrow_py(t, x) for x in lst] for lst in lists.to_pylist()] == [rows, []]


@SETTINGS
@given(data=st.data(), t=structs(schemas(2)))
def test_batch_writes_equal_scalar_writes_and_survive_a_snapshot(tmp_path, t, data):
    t = sparktypes.check_type(t)
    rows = data.draw(st.lists(values_of(t, nullable=False), min_size=1, max_size=8))
    keys = list(range(len(rows)))
    root = str(tmp_path / uuid.uuid4().hex[:8])
    scalar = KeyedStateBackend(os.path.join(root, "s"))
    batch = KeyedStateBackend(os.path.join(root, "b"))
    try:
        sv = scalar.get_state(ValueStateDescriptor("v", value_type=t))
        for k, v in zip(keys, rows):
            scalar.set_current_key(k)
            sv.update(v)
        bv = batch.get_state(ValueStateDescriptor("v", value_type=t))
        arrow_rows = pa.array([to_arrow_py(t, v) for v in rows], type=sparktypes.to_arrow(t))
        bv.put_many(keys, pa.RecordBatch.from_struct_array(arrow_rows))
        assert raw(batch, bv) == raw(scalar, sv)
        handle = batch.snapshot(os.path.join(root, "cp"), "full").result()
        restored = KeyedStateBackend.restore(os.path.join(root, "r"), [handle])
        try:
            rv = restored.get_state(ValueStateDescriptor("v", value_type=t))
            got, found = rv.get_many(keys)
            assert found.all()
            assert [from_arrow_py(t, x) for x in got.to_pylist()] == rows
        finally:
            restored.close()
    finally:
        scalar.close()
        batch.close()


FIXED_WIDTH = ["bigint", "int", "double", "float", "date", "timestamp", "timestamp_ntz"]


def fixed_width_structs():
    return st.lists(st.tuples(st.sampled_from("abcdefghijkl"),
                              st.sampled_from(FIXED_WIDTH).map(AtomicType), st.booleans()),
                    min_size=1, max_size=12, unique_by=lambda f: f[0]).map(
        lambda fs: StructType(tuple(StructField(n, t, nullable) for n, t, nullable in fs)))


@SETTINGS
@given(data=st.data(), t=fixed_width_structs())
def test_structs_of_fixed_width_fields_agree_with_the_codec_on_good_and_damaged_bytes(t, data):
    """Structs of 4- and 8-byte scalars only are read and written by a path of their own
    (FlatStruct in csrc/arrow_rows.cc): the bytes it writes are the scalar codec's, the values
    it reads are the codec's (null fields, more than 8 fields: two bitmap bytes), and of
    damaged bytes it refuses exactly those the codec's own check refuses."""
    t = sparktypes.check_type(t)
    codec = _native.row_codec(t)
    rows = data.draw(st.lists(values_of(t, nullable=False), min_size=1, max_size=8))
    encoded = [codec.encode_bytes(v) for v in rows]
    arr = pa.array([to_arrow_py(t, v) for v in rows], type=codec.arrow_type)
    assert _native.encode_rows_from_arrow(codec, arr) == encoded
    sliced = pa.concat_arrays([arr[:1], arr]).slice(1)  # a struct and its children offset
    assert _native.encode_rows_from_arrow(codec, sliced) == encoded
    back = _native.decode_rows_to_arrow(codec, encoded, "value")
    back.validate(full=True)
    assert [from_arrow_py(t, x) for x in back.to_pylist()] == rows
    for b in encoded:
        at = data.draw(st.integers(0, len(b)))
        bad = data.draw(st.sampled_from([
            b[:at],                                          # cut short
            b + data.draw(st.binary(min_size=1, max_size=9)),  # trailing bytes
            b[:at] + bytes([data.draw(st.integers(0, 255))]) + b[at + 1:],  # one byte changed
        ]))
        if codec.length(bad) == len(bad):
            got = _native.decode_rows_to_arrow(codec, [bad], "value")
            # repr: a changed byte may make a NaN, which equals nothing
            assert (repr([from_arrow_py(t, x) for x in got.to_pylist()])
                    == repr([codec.decode_bytes(bad)]))
        else:
            with pytest.raises(CorruptionError):
                _native.decode_rows_to_arrow(codec, [bad], "value")


def test_fixed_width_struct_batches_refuse_nulls_and_times_out_of_range_naming_the_field(backend):
    state = backend.get_state(ValueStateDescriptor(
        "v", value_type="n long NOT NULL, at timestamp, day date"))
    state.put_many([1], {"n": [1], "at": [dt.datetime(2020, 1, 1, tzinfo=UTC)],
                         "day": [dt.date(2020, 1, 2)]})
    with pytest.raises(SerializationError, match="field 'n' is NOT NULL .* row 1 holds a null"):
        state.put_many([2, 3], pa.table({"n": pa.array([1, None], pa.int64()),
                                         "at": pa.array([None, None], pa.timestamp("us", "UTC")),
                                         "day": pa.array([None, None], pa.date32())}))
    with pytest.raises(SerializationError, match="field 'at' of row 0 is out of range for timestamp"):
        state.put_many([2], pa.table({"n": pa.array([1], pa.int64()),
                                      "at": pa.array([2**62], pa.timestamp("us", "UTC")),
                                      "day": pa.array([None], pa.date32())}))
    with pytest.raises(SerializationError, match="field 'day' of row 0 is out of range for date"):
        state.put_many([2], pa.table({"n": pa.array([1], pa.int64()),
                                      "at": pa.array([None], pa.timestamp("us", "UTC")),
                                      "day": pa.array([2**30], pa.date32())}))
    values, found = state.get_many([1, 2, 3])  # nothing of the refused batches was written
    assert found.tolist() == [True, False, False]
    assert values.to_pylist()[0] == {"n": 1, "at": dt.datetime(2020, 1, 1, tzinfo=UTC),
                                     "day": dt.date(2020, 1, 2)}
