"""The API of every state kind, namespaces, key handling and whole-backend queries."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from stateengine import (AggregatingStateDescriptor, KeyGroupRange,
                         ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                         SerializationError, SortedMapStateDescriptor, ValueStateDescriptor,
                         aggregates, assign_key_group, reducers)
from tests.user_functions import Average


@dataclasses.dataclass
class Point:
    x: int
    y: int




# ---- value state ----------------------------------------------------------------------------

def test_value_state_value_update_clear(backend):
    backend.set_current_key("alice")
    count = backend.get_state(ValueStateDescriptor("count", default=0))
    assert count.value() == 0
    count.update(3)
    assert count.value() == 3
    count.update(count.value() + 1)
    assert count.value() == 4
    count.clear()
    assert count.value() == 0
    count.update(5)
    count.update(None)  # Flink: update(null) clears
    assert count.value() == 0


def test_value_state_without_default_is_none(backend):
    backend.set_current_key(1)
    v = backend.get_state(ValueStateDescriptor("v"))
    assert v.value() is None
    v.update(0)
    assert v.value() == 0


def test_value_state_is_per_key(backend):
    v = backend.get_state(ValueStateDescriptor("v", default="none"))
    for key in ["a", "b", "c"]:
        backend.set_current_key(key)
        v.update(key * 2)
    for key in ["c", "a", "b"]:
        backend.set_current_key(key)
        assert v.value() == key * 2
    backend.set_current_key("d")
    assert v.value() == "none"


def test_mutable_default_is_copied_per_read(backend):
    backend.set_current_key("k")
    v = backend.get_state(ValueStateDescriptor("v", default={"seen": []}))
    first = v.value()
    first["seen"].append(1)
    assert v.value() == {"seen": []}
    assert v.value() is not v.value()


@pytest.mark.parametrize("value", [
    0, -1, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**80, -2**100, 1.5, -0.0, math.inf, "",
    "héllo, wörld", "\U0001F600", b"", b"\x00,\xff", True, False, (1, "a"), [1, [2, 3]],
    {"a": 1}, (), [], {}, ((),), {(1, "k"): [None, {"x": (2**70, b"")}], 2.5: True, None: 0},
    None,
])
def test_any_values_round_trip(backend, value):
    backend.set_current_key("k")
    v = backend.get_state(ValueStateDescriptor("v", default="unset"))
    v.update(value)
    if value is None:
        assert v.value() == "unset"
        return
    got = v.value()
    assert got == value and type(got) is type(value)
    if isinstance(value, float):
        assert math.copysign(1.0, got) == math.copysign(1.0, value)


@pytest.mark.parametrize("value", [
    frozenset({1, 2}), Point(1, 2), Fraction(1, 3), 1 + 2j, bytearray(b"x"), (1, Point(1, 2)),
])
def test_objects_need_a_pickle_state(make_backend, value):
    """The default serializer never pickles: other objects are refused (nothing is written)
    and round-trip through value_type="pickle" on a backend that allows pickle."""
    plain = make_backend()
    plain.set_current_key("k")
    v = plain.get_state(ValueStateDescriptor("v"))
    with pytest.raises(SerializationError, match='value_type="pickle".*allow_pickle=True'):
        v.update(value)
    assert v.value() is None and plain.num_state_entries("v") == 0
    trusting = make_backend(allow_pickle=True)
    trusting.set_current_key("k")
    p = trusting.get_state(ValueStateDescriptor("p", value_type="pickle"))
    p.update(value)
    assert p.value() == value and type(p.value()) is type(value)


def test_nan_value_round_trips(backend):
    backend.set_current_key("k")
    v = backend.get_state(ValueStateDescriptor("v", value_type=float))
    v.update(math.nan)
    assert math.isnan(v.value())


def test_numpy_scalars_decode_as_python_types(backend):
    backend.set_current_key("k")
    v = backend.get_state(ValueStateDescriptor("v"))
    for value, expected in [(np.int64(7), 7), (np.int32(-3), -3), (np.float32(0.5), 0.5),
                            (np.float64(2.25), 2.25), (np.bool_(True), True)]:
        v.update(value)
        got = v.value()
        assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("value_type,value", [
    (int, -2**63), (int, 12), ("int", -2**31), (np.int32, 2**31 - 1), (float, -1.25),
    (np.float32, 0.5), (str, "x,y"), (bytes, b"\x00\x01"), (bool, False), ("pickle", {1: 2}),
    ("pickle", Point(3, 4)), (object, {"point": (3, 4)}),
])
def test_typed_values_round_trip(make_backend, value_type, value):
    backend = make_backend(allow_pickle=value_type == "pickle")
    backend.set_current_key("k")
    v = backend.get_state(ValueStateDescriptor("v", value_type=value_type))
    v.update(value)
    assert v.value() == value


# ---- list state -----------------------------------------------------------------------------

def test_list_state_add_add_all_get_update_clear(backend):
    backend.set_current_key("k")
    events = backend.get_state(ListStateDescriptor("events"))
    assert events.get() == []
    events.add(1)
    events.add("two")
    events.add_all([3.0, b"four"])
    events.add_all(x for x in [(5,), {"six": [6]}])  # any iterable, containers too
    assert events.get() == [1, "two", 3.0, b"four", (5,), {"six": [6]}]
    events.add_all([])
    assert len(events.get()) == 6
    events.update(["x", "y"])
    assert events.get() == ["x", "y"]
    events.update([])
    assert events.get() == []
    events.add("z")
    events.clear()
    assert events.get() == []


def test_list_elements_containing_the_delimiter_round_trip(backend):
    backend.set_current_key("k")
    for value_type in (str, bytes, None):
        lst = backend.get_state(ListStateDescriptor(f"l-{value_type}", value_type=value_type))
        elems = [",", ",,", "a,b", "", ", "] if value_type is not bytes else \
            [b",", b"", b"\x2c\x2c", b"a,b"]
        for e in elems:
            lst.add(e)
        lst.add_all(elems)
        assert lst.get() == elems + elems


def test_typed_list_state(backend):
    backend.set_current_key("k")
    ints = backend.get_state(ListStateDescriptor("ints", value_type=int))
    ints.add_all(range(-3, 1000))
    ints.add(2**63 - 1)
    assert ints.get() == list(range(-3, 1000)) + [2**63 - 1]


def test_list_state_is_per_key(backend):
    lst = backend.get_state(ListStateDescriptor("l"))
    for key in range(20):
        backend.set_current_key(key)
        lst.add_all([key] * (key % 4))
    for key in range(20):
        backend.set_current_key(key)
        assert lst.get() == [key] * (key % 4)


# ---- map state ------------------------------------------------------------------------------

def test_map_state_api(backend):
    backend.set_current_key("k")
    m = backend.get_state(MapStateDescriptor("m"))
    assert m.is_empty()
    assert m.get("a") is None and not m.contains("a")
    m.put("a", 1)
    m.put(2, "two")
    m.put(("t", 1), [1, 2])
    m.put_all({"b": 2.5, "c": None})
    m.put_all([("d", b"dd"), ("a", 10)])
    assert not m.is_empty()
    assert m.get("a") == 10 and m.get(2) == "two" and m.get(("t", 1)) == [1, 2]
    assert m.contains("c") and m.get("c") is None  # a None value is stored (null flag)
    assert not m.contains("zz")
    expected = {"a": 10, 2: "two", ("t", 1): [1, 2], "b": 2.5, "c": None, "d": b"dd"}
    assert dict(m.entries()) == expected
    assert dict(m.items()) == expected
    assert sorted(map(repr, m.keys())) == sorted(map(repr, expected))
    assert sorted(map(repr, m.values())) == sorted(map(repr, expected.values()))
    assert sorted(map(repr, iter(m))) == sorted(map(repr, expected))
    m.remove("a")
    m.remove("never-there")
    assert not m.contains("a") and m.get("a") is None
    assert len(list(m.entries())) == 5
    m.clear()
    assert m.is_empty() and list(m.entries()) == [] and list(m.keys()) == []


def test_map_state_is_per_key_and_clear_touches_one_key(backend):
    m = backend.get_state(MapStateDescriptor("m", user_key_type=int, value_type=str))
    for key in ["a", "b", "c"]:
        backend.set_current_key(key)
        m.put_all({i: key * i for i in range(5)})
    backend.set_current_key("b")
    m.clear()
    assert m.is_empty()
    for key in ["a", "c"]:
        backend.set_current_key(key)
        assert dict(m.entries()) == {i: key * i for i in range(5)}


def test_map_iteration_spans_many_chunks(backend):
    backend.set_current_key("k")
    m = backend.get_state(MapStateDescriptor("m", user_key_type=int, value_type=int))
    m.put_all({i: -i for i in range(2500)})
    backend.set_current_key("other")
    m.put(1, 1)
    backend.set_current_key("k")
    assert dict(m.entries()) == {i: -i for i in range(2500)}
    assert sorted(m.keys()) == list(range(2500))
    assert sorted(m.values()) == sorted(-i for i in range(2500))


# ---- reducing state -------------------------------------------------------------------------

def test_reducing_state_with_python_function(backend):
    backend.set_current_key("k")
    r = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + "|" + b))
    assert r.get() is None
    r.add("a")
    assert r.get() == "a"
    r.add("b")
    r.add("c")
    assert r.get() == "a|b|c"
    r.clear()
    assert r.get() is None


@pytest.mark.parametrize("reducer,values,expected", [
    (reducers.SUM, [1, 2, 3, -10], -4),
    (reducers.SUM, [0.5, 0.25, -1.0], -0.25),
    (reducers.SUM, [1, 0.5, 2], 3.5),
    (reducers.SUM, [2**63 - 1, 1], -2**63),  # wraps like Java's long
    (reducers.MIN, [5, -3, 7], -3),
    (reducers.MIN, [2.5, -0.5, 1.0], -0.5),
    (reducers.MIN, [3, 2.5, 4], 2.5),
    (reducers.MIN, [3, 3.0], 3),  # ties keep the value seen first, like Python's min
    (reducers.MAX, [5, -3, 7], 7),
    (reducers.MAX, [2.5, -0.5, 1.0], 2.5),
    (reducers.MAX, [3, 3.5, 2], 3.5),
    (reducers.MAX, [2**62, 2.0**62], 2**62),
])
def test_native_reducers(backend, reducer, values, expected):
    backend.set_current_key("k")
    r = backend.get_state(ReducingStateDescriptor("r", reducer))
    assert r.get() is None
    for v in values:
        r.add(v)
    got = r.get()
    assert got == expected and type(got) is type(expected)
    r.clear()
    assert r.get() is None


def test_native_reducers_survive_flush_and_compaction(backend):
    backend.set_current_key("k")
    total = backend.get_state(ReducingStateDescriptor("total", reducers.SUM, value_type=int))
    low = backend.get_state(ReducingStateDescriptor("low", reducers.MIN, value_type=float))
    for i in range(1, 101):
        total.add(i)
        low.add(float(100 - i))
        if i % 25 == 0:
            backend._native_flush()  # operands now merge across files (partial merges)
    backend._native_compact()
    assert total.get() == 5050
    assert low.get() == 0.0


def test_typed_native_reducers(backend):
    backend.set_current_key("k")
    as_float = backend.get_state(ReducingStateDescriptor("f", reducers.SUM, value_type=float))
    as_float.add(1)
    as_float.add(2)
    assert as_float.get() == 3.0 and isinstance(as_float.get(), float)
    as_int = backend.get_state(ReducingStateDescriptor("i", reducers.MAX, value_type=int))
    as_int.add(np.int64(4))
    as_int.add(-9)
    assert as_int.get() == 4 and isinstance(as_int.get(), int)


def test_reducing_state_is_per_key(backend):
    r = backend.get_state(ReducingStateDescriptor("r", reducers.SUM))
    for i in range(100):
        backend.set_current_key(i % 7)
        r.add(i)
    for key in range(7):
        backend.set_current_key(key)
        assert r.get() == sum(i for i in range(100) if i % 7 == key)


# ---- aggregating state ----------------------------------------------------------------------

def test_aggregating_state_with_python_aggregate(backend):
    backend.set_current_key("k")
    avg = backend.get_state(AggregatingStateDescriptor("avg", Average()))
    assert avg.get() is None
    for v in [1, 2, 3, 6]:
        avg.add(v)
    assert avg.get() == 3.0
    avg.clear()
    assert avg.get() is None
    avg.add(10)
    assert avg.get() == 10.0


def test_native_aggregates(backend):
    backend.set_current_key("k")
    count = backend.get_state(AggregatingStateDescriptor("count", aggregates.COUNT))
    total = backend.get_state(AggregatingStateDescriptor("sum", aggregates.SUM))
    low = backend.get_state(AggregatingStateDescriptor("min", aggregates.MIN))
    high = backend.get_state(AggregatingStateDescriptor("max", aggregates.MAX))
    assert count.get() is None and total.get() is None
    for v in [3, 1.5, -2, 10]:
        count.add(v)
        total.add(v)
        low.add(v)
        high.add(v)
    count.add("anything counts")
    assert count.get() == 5
    assert total.get() == 12.5
    assert low.get() == -2
    assert high.get() == 10
    count.clear()
    assert count.get() is None


# ---- sorted map state -----------------------------------------------------------------------

SORTED_KEYS = {
    int: [0, -1, 1, -2**63, 2**63 - 1, 255, 256, -256, 65536, -7, 42],
    float: [0.0, -0.5, 0.5, -1e300, 1e300, -math.inf, math.inf, 5e-324, -5e-324, -3.0, 2.0],
    str: ["", "a", "ab", "b", "B", "a\x00", "é", "z", "日本", "\U0001F600", "aa", "ab\U0001F600"],
    bytes: [b"", b"\x00", b"\x00\x00", b"\x01", b"\xff", b"\xff\x00", b"a", b"ab", b"\x7f", b"\x80"],
}


@pytest.mark.parametrize("user_key_type", list(SORTED_KEYS), ids=lambda t: t.__name__)
def test_sorted_map_orders_by_user_key(backend, user_key_type):
    keys = SORTED_KEYS[user_key_type]
    backend.set_current_key("k")
    m = backend.get_state(SortedMapStateDescriptor("sm", user_key_type))
    assert m.first_entry() is None and m.last_entry() is None
    for i, k in enumerate(keys):
        m.put(k, i)
    backend.set_current_key("other")  # neighbours must not leak into ranges
    m.put_all({k: "other" for k in keys})
    backend.set_current_key("k")
    model = sorted((k, i) for i, k in enumerate(keys))
    assert list(m.entries()) == model
    assert list(m.keys()) == [k for k, _ in model]
    assert m.first_entry() == model[0]
    assert m.last_entry() == model[-1]
    for bound in keys:
        assert list(m.head(bound)) == [(k, v) for k, v in model if k < bound]
        assert list(m.tail(bound)) == [(k, v) for k, v in model if k >= bound]
        for upper in keys:
            assert list(m.sub(bound, upper)) == [(k, v) for k, v in model if bound <= k < upper]
    m.remove(model[0][0])
    assert m.first_entry() == model[1]
    assert m.get(model[1][0]) == model[1][1] and m.contains(model[-1][0])


def test_sorted_map_last_entry_with_many_entries(backend):
    backend.set_current_key("k")
    m = backend.get_state(SortedMapStateDescriptor("sm", int, value_type=int))
    m.put_all({i: i * i for i in range(-1500, 1500)})
    assert m.first_entry() == (-1500, 1500 ** 2)
    assert m.last_entry() == (1499, 1499 ** 2)
    assert [k for k, _ in m.tail(1000)] == list(range(1000, 1500))
    assert [k for k, _ in m.entries()] == list(range(-1500, 1500))


def test_sorted_map_float_zero_is_one_key(backend):
    backend.set_current_key("k")
    m = backend.get_state(SortedMapStateDescriptor("sm", float))
    m.put(-0.0, "neg")
    m.put(0.0, "pos")
    assert list(m.entries()) == [(0.0, "pos")]


# ---- namespaces -----------------------------------------------------------------------------

def test_namespaces_separate_state(backend):
    backend.set_current_key("k")
    v = backend.get_state(ValueStateDescriptor("v", namespace_type=object))
    assert v.get_current_namespace() is None
    v.update("default")
    for ns in [1, "w", (1, 2), b"b", 2.5]:
        v.set_current_namespace(ns)
        assert v.get_current_namespace() == ns
        assert v.value() is None
        v.update(ns)
    for ns in [(1, 2), 1, b"b", "w", 2.5]:
        v.set_current_namespace(ns)
        assert v.value() == ns
    v.set_current_namespace(None)
    assert v.value() == "default"


def test_map_namespaces_separate_entries(backend):
    backend.set_current_key("k")
    m = backend.get_state(MapStateDescriptor("m", namespace_type=int))
    for ns in range(3):
        m.set_current_namespace(ns)
        m.put_all({f"{ns}-{i}": i for i in range(ns + 1)})
    m.set_current_namespace(1)
    assert dict(m.entries()) == {"1-0": 0, "1-1": 1}
    m.clear()
    m.set_current_namespace(2)
    assert len(list(m.entries())) == 3


def test_list_merge_namespaces(backend):
    backend.set_current_key("k")
    lst = backend.get_state(ListStateDescriptor("l", namespace_type=int))
    for ns, elems in [(1, ["a", "b"]), (2, ["c"]), (3, []), (4, ["d", "e,f"])]:
        lst.set_current_namespace(ns)
        lst.add_all(elems)
    backend.set_current_key("other")
    lst.set_current_namespace(2)
    lst.add("other key")
    backend.set_current_key("k")
    lst.set_current_namespace(9)
    lst.merge_namespaces(1, [2, 3, 4, 1, 5])
    lst.set_current_namespace(1)
    assert lst.get() == ["a", "b", "c", "d", "e,f"]
    for ns in (2, 3, 4, 5):
        lst.set_current_namespace(ns)
        assert lst.get() == []
    lst.merge_namespaces(7, [1])  # into an empty namespace
    lst.set_current_namespace(7)
    assert lst.get() == ["a", "b", "c", "d", "e,f"]
    backend.set_current_key("other")
    lst.set_current_namespace(2)
    assert lst.get() == ["other key"]


@pytest.mark.parametrize("reduce_function", [reducers.SUM, lambda a, b: a + b],
                         ids=["native", "python"])
def test_reducing_merge_namespaces(backend, reduce_function):
    backend.set_current_key("k")
    r = backend.get_state(ReducingStateDescriptor("r", reduce_function, namespace_type=object))
    for ns, values in [("a", [1, 2]), ("b", [10]), ("c", [100, 200])]:
        r.set_current_namespace(ns)
        for v in values:
            r.add(v)
    r.merge_namespaces("a", ["b", "c", "missing"])
    r.set_current_namespace("a")
    assert r.get() == 313
    for ns in ("b", "c"):
        r.set_current_namespace(ns)
        assert r.get() is None
    r.merge_namespaces("new", ["a"])
    r.set_current_namespace("new")
    assert r.get() == 313
    r.add(1)
    assert r.get() == 314


@pytest.mark.parametrize("fn,expected", [(aggregates.COUNT, 5), (aggregates.SUM, 15),
                                         (Average(), 3.0)],
                         ids=["native-count", "native-sum", "python"])
def test_aggregating_merge_namespaces(backend, fn, expected):
    backend.set_current_key("k")
    agg = backend.get_state(AggregatingStateDescriptor("agg", fn, namespace_type=int))
    for ns, values in [(1, [1, 2]), (2, [3]), (3, [4, 5])]:
        agg.set_current_namespace(ns)
        for v in values:
            agg.add(v)
    agg.merge_namespaces(1, [2, 3])
    agg.set_current_namespace(1)
    assert agg.get() == expected
    agg.set_current_namespace(3)
    assert agg.get() is None


def test_merge_namespaces_of_equal_but_distinct_namespaces(backend):
    # 1, 1.0 and True are equal in Python but distinct namespaces (distinct encodings).
    backend.set_current_key("k")
    lst = backend.get_state(ListStateDescriptor("l", namespace_type=object))
    for ns in (1, 1.0, True):
        lst.set_current_namespace(ns)
        lst.add(repr(ns))
    lst.merge_namespaces(1, [1.0, True])
    lst.set_current_namespace(1)
    assert lst.get() == ["1", "1.0", "True"]
    for ns in (1.0, True):
        lst.set_current_namespace(ns)
        assert lst.get() == []


# ---- keys -----------------------------------------------------------------------------------

def test_get_keys(backend):
    v = backend.get_state(ValueStateDescriptor("v", namespace_type=object))
    m = backend.get_state(MapStateDescriptor("m", namespace_type=object))
    for key in range(50):
        backend.set_current_key(key)
        v.set_current_namespace("even" if key % 2 == 0 else None)
        v.update(key)
        m.set_current_namespace(None if key % 3 else "x")
        m.put_all({i: i for i in range(key % 4)})
    keys = list(backend.get_keys("v"))
    assert sorted(keys) == [k for k in range(50) if k % 2]
    assert sorted(backend.get_keys("v", "even")) == [k for k in range(50) if k % 2 == 0]
    # a map key appears once however many user keys it holds
    assert sorted(backend.get_keys("m")) == [k for k in range(50) if k % 3 and k % 4]
    assert sorted(backend.get_keys("m", "x")) == [k for k in range(50) if k % 3 == 0 and k % 4]
    assert list(backend.get_keys("v", "nothing here")) == []
    backend.set_current_key(1)
    v.set_current_namespace(None)
    v.clear()
    assert 1 not in set(backend.get_keys("v"))


def test_get_keys_many_keys_and_string_keys(backend):
    lst = backend.get_state(ListStateDescriptor("l"))
    keys = {f"user-{i}" for i in range(3000)}
    for key in keys:
        backend.set_current_key(key)
        lst.add_all([1, 2])
    got = list(backend.get_keys("l"))
    assert len(got) == len(keys) and set(got) == keys


def test_num_state_entries(backend):
    v = backend.get_state(ValueStateDescriptor("v", namespace_type=int))
    m = backend.get_state(MapStateDescriptor("m"))
    lst = backend.get_state(ListStateDescriptor("l"))
    assert backend.num_state_entries() == 0
    for key in range(10):
        backend.set_current_key(key)
        v.update(key)
        v.set_current_namespace(1)
        v.update(key)
        v.set_current_namespace(None)
        m.put_all({i: i for i in range(key)})
        lst.add_all(range(key))  # one entry per key however long the list
    assert backend.num_state_entries("v") == 20
    assert backend.num_state_entries("m") == sum(range(10))
    assert backend.num_state_entries("l") == 9
    assert backend.num_state_entries() == 20 + 45 + 9
    backend.set_current_key(9)
    m.clear()
    assert backend.num_state_entries("m") == 45 - 9


def test_tuple_keys(backend):
    v = backend.get_state(ValueStateDescriptor("v"))
    keys = [(i, f"s{j}") for i in range(5) for j in range(5)]
    for key in keys:
        backend.set_current_key(key)
        assert backend.get_current_key() == key
        assert backend.get_current_key_group() == assign_key_group(key, 128)
        v.update(key[0] * 10 + int(key[1][1:]))
    for key in reversed(keys):
        backend.set_current_key(key)
        assert v.value() == key[0] * 10 + int(key[1][1:])
    assert sorted(backend.get_keys("v")) == sorted(keys)


@pytest.mark.parametrize("key_type,keys", [
    (str, ["a", "", "日本"]),
    (int, [0, -5, 2**62]),
    ("int", [0, -5, 2**31 - 1]),
    (np.int32, [np.int32(7), 8]),
    (float, [0.5, -0.0, 3]),
    (bytes, [b"", b"\xff"]),
    (bool, [True, False]),
    ((int, str), [(1, "a"), (2, "")]),
    ((str, bytes, bool), [("x", b"y", True)]),
])
def test_backend_key_type(make_backend, key_type, keys):
    backend = make_backend(key_type=key_type)
    v = backend.get_state(ValueStateDescriptor("v"))
    for i, key in enumerate(keys):
        backend.set_current_key(key)
        assert backend.get_current_key_group() == assign_key_group(key, 128, key_type=key_type)
        v.update(i)
    for i, key in enumerate(keys):
        backend.set_current_key(key)
        assert v.value() == i


@pytest.mark.parametrize("numpy_key,python_key", [
    (np.str_("alice"), "alice"), (np.int64(-5), -5), (np.float64(2.5), 2.5),
    (np.bytes_(b"ab"), b"ab"), (np.bool_(True), True),
])
def test_numpy_scalar_keys_are_their_python_values(make_backend, numpy_key, python_key):
    # e.g. keys taken from numpy arrays or np.unique: same Spark type, same key, same state
    assert assign_key_group(numpy_key, 32768) == assign_key_group(python_key, 32768)
    backend = make_backend(max_parallelism=32768)
    v = backend.get_state(ValueStateDescriptor("v"))
    backend.set_current_key(numpy_key)
    assert backend.get_current_key_group() == assign_key_group(python_key, 32768)
    v.update("stored under the numpy key")
    backend.set_current_key(python_key)
    assert v.value() == "stored under the numpy key"
    backend.set_current_key(numpy_key)
    assert v.value() == "stored under the numpy key"


def test_float_keys_compare_by_value(backend):
    v = backend.get_state(ValueStateDescriptor("v"))
    backend.set_current_key(0.0)
    v.update("zero")
    backend.set_current_key(-0.0)
    assert v.value() == "zero"
    backend.set_current_key(math.nan)
    v.update("nan")
    backend.set_current_key(float("-nan"))
    assert v.value() == "nan"


def test_get_state_returns_the_registered_handle(backend):
    d = ValueStateDescriptor("v", default=1)
    h = backend.get_state(d)
    assert backend.get_state(ValueStateDescriptor("v", default=1)) is h
    assert backend.state_names == ["v"]


def test_partial_key_group_range(make_backend):
    r = KeyGroupRange.for_operator(1, 4, 256)
    backend = make_backend(max_parallelism=256, key_group_range=r)
    v = backend.get_state(ValueStateDescriptor("v"))
    owned = [k for k in range(2000) if assign_key_group(k, 256) in r]
    assert owned
    for k in owned:
        backend.set_current_key(k)
        v.update(-k)
    assert sorted(backend.get_keys("v")) == owned
