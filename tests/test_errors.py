"""Every misuse of issue 2 raises its own exception class, with a message that says what to
do, and leaves all stored state exactly as it was (compared byte for byte)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from stateengine import (AggregateFunction, AggregatingStateDescriptor, BackendClosedError,
                         IncompatibleStateError, KeyedStateBackend,
                         KeyGroupOutOfRangeError, KeyGroupRange, KeyTypeError,
                         ListStateDescriptor, MapStateDescriptor, NoCurrentKeyError,
                         NullElementError, ReducingStateDescriptor, SerializationError,
                         SortedMapStateDescriptor, StateRegistrationError,
                         ValueStateDescriptor, aggregates, assign_key_group, reducers)


class Concat(AggregateFunction):
    def create_accumulator(self):
        return ""

    def add(self, value, acc):
        return acc + str(value)

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a + b


def register(backend):
    """One state of every kind (the same descriptors every time)."""
    return {
        "v": backend.get_state(ValueStateDescriptor("v", namespace_type=object)),
        "vi": backend.get_state(ValueStateDescriptor("vi", value_type=int, default=-1)),
        "l": backend.get_state(ListStateDescriptor("l", value_type=str)),
        "la": backend.get_state(ListStateDescriptor("la")),
        "m": backend.get_state(MapStateDescriptor("m", user_key_type=int)),
        "sm": backend.get_state(SortedMapStateDescriptor("sm", str, value_type=int)),
        "r": backend.get_state(ReducingStateDescriptor("r", reducers.SUM)),
        "rp": backend.get_state(ReducingStateDescriptor("rp", lambda a, b: a + b)),
        "rl": backend.get_state(ReducingStateDescriptor("rl", lambda a, b: b)),  # keeps latest
        "ln": backend.get_state(ListStateDescriptor("ln", namespace_type=int)),
        "a": backend.get_state(AggregatingStateDescriptor("a", Concat())),
        "c": backend.get_state(AggregatingStateDescriptor("c", aggregates.COUNT)),
    }


def populate(backend, keys):
    s = register(backend)
    for i, key in enumerate(keys):
        backend.set_current_key(key)
        s["v"].update({"key": key})
        s["v"].set_current_namespace(i)
        s["v"].update(i)
        s["v"].set_current_namespace(None)
        s["vi"].update(i)
        s["l"].add_all([f"{key},{j}" for j in range(3)])
        s["la"].add_all([i, str(i)])
        s["m"].put_all({j: j * i for j in range(4)})
        s["sm"].put_all({f"{key}-{j}": j for j in range(3)})
        s["r"].add(i)
        s["r"].add(0.5)
        s["rp"].add(str(i))
        s["rp"].add("!")
        s["rl"].add(key)
        s["ln"].set_current_namespace(i % 2)
        s["ln"].add(key)
        s["ln"].set_current_namespace(None)
        s["a"].add(i)
        s["c"].add(key)
    return s


def raw_state(backend):
    """Every stored byte, per state."""
    return {name: backend._raw_scan(cf) for name, cf in sorted(backend._cf_index.items())}


KEYS = ["k0", "k1", "k2", "k3"]


@pytest.fixture
def populated(backend):
    states = populate(backend, KEYS)
    backend.set_current_key("k1")
    return backend, states, raw_state(backend)


def test_raw_state_sees_every_state(populated):
    # guards the "unchanged" checks below: they compare something real
    backend, _, before = populated
    assert set(before) == {"v", "vi", "l", "la", "m", "sm", "r", "rp", "rl", "ln", "a", "c"}
    assert all(len(entries) >= len(KEYS) for entries in before.values())


# ---- registration ---------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda n: ValueStateDescriptor(n), lambda n: ListStateDescriptor(n),
    lambda n: MapStateDescriptor(n), lambda n: SortedMapStateDescriptor(n, int),
    lambda n: ReducingStateDescriptor(n, reducers.SUM),
    lambda n: AggregatingStateDescriptor(n, aggregates.COUNT),
])
def test_state_named_default_is_refused(populated, make):
    backend, _, before = populated
    with pytest.raises(StateRegistrationError, match="reserved.*choose another name"):
        backend.get_state(make("default"))
    assert raw_state(backend) == before


@pytest.mark.parametrize("name", ["__timers", "__operator_state", "__"])
def test_reserved_prefix_is_refused(populated, name):
    backend, _, before = populated
    with pytest.raises(StateRegistrationError, match=f"reserved.*rename '{name}'"):
        backend.get_state(ListStateDescriptor(name))
    assert raw_state(backend) == before
    with pytest.raises(StateRegistrationError):
        backend.num_state_entries(name)


@pytest.mark.parametrize("other", [
    ListStateDescriptor("v"), MapStateDescriptor("v"), SortedMapStateDescriptor("v", int),
    ReducingStateDescriptor("v", reducers.SUM), AggregatingStateDescriptor("v", Concat()),
])
def test_same_name_as_another_kind_is_refused(populated, other):
    backend, states, before = populated
    with pytest.raises(StateRegistrationError,
                       match="registered as value state.*use another name"):
        backend.get_state(other)
    assert raw_state(backend) == before
    assert backend.get_state(ValueStateDescriptor("v", namespace_type=object)) is states["v"]
    assert states["v"].value() == {"key": "k1"}


@pytest.mark.parametrize("other", [
    ValueStateDescriptor("v", value_type=int, namespace_type=object),   # value serializer
    ValueStateDescriptor("v"),                                           # namespace serializer
    ValueStateDescriptor("vi", value_type=float),
    ListStateDescriptor("l", value_type=bytes),
    MapStateDescriptor("m", user_key_type=str),                          # user key serializer
    SortedMapStateDescriptor("sm", int, value_type=int),
    ReducingStateDescriptor("r", reducers.SUM, value_type=int),
    ReducingStateDescriptor("r", reducers.MAX),                          # native function
    ReducingStateDescriptor("r", lambda a, b: a + b),
    AggregatingStateDescriptor("c", aggregates.MAX),
])
def test_same_name_with_another_serializer_or_function_is_refused(populated, other):
    backend, _, before = populated
    with pytest.raises(StateRegistrationError,
                       match="keep the (serializer|function kind) or use another state name"):
        backend.get_state(other)
    assert raw_state(backend) == before


# ---- None -----------------------------------------------------------------------------------

def test_none_added_to_a_list_is_refused(populated):
    backend, s, before = populated
    with pytest.raises(NullElementError, match="does not accept None.*nothing was written"):
        s["l"].add(None)
    with pytest.raises(NullElementError, match="element 3 is None.*nothing was written"):
        s["l"].add_all(["x", "y", "z", None])
    with pytest.raises(NullElementError, match="nothing was written"):
        s["la"].add_all(iter([1, None, 2]))
    with pytest.raises(NullElementError, match="nothing was written"):
        s["l"].update(["replacement", None])
    with pytest.raises(NullElementError):
        s["r"].add(None)
    with pytest.raises(NullElementError):
        s["rp"].add(None)
    with pytest.raises(NullElementError):
        s["a"].add(None)
    with pytest.raises(NullElementError):
        s["c"].add(None)
    assert raw_state(backend) == before
    assert s["l"].get() == ["k1,0", "k1,1", "k1,2"]


# ---- current key ----------------------------------------------------------------------------

def _every_access(s):
    """A call of every per-key method of every state kind."""
    return [
        lambda: s["v"].value(), lambda: s["v"].update(1), lambda: s["v"].clear(),
        lambda: s["l"].get(), lambda: s["l"].add("x"), lambda: s["l"].add_all(["x"]),
        lambda: s["l"].update(["x"]), lambda: s["l"].clear(),
        lambda: s["m"].get(1), lambda: s["m"].put(1, 1), lambda: s["m"].put_all({1: 1}),
        lambda: s["m"].contains(1), lambda: s["m"].remove(1), lambda: list(s["m"].keys()),
        lambda: list(s["m"].values()), lambda: list(s["m"].entries()),
        lambda: s["m"].is_empty(), lambda: s["m"].clear(),
        lambda: s["sm"].first_entry(), lambda: s["sm"].last_entry(),
        lambda: list(s["sm"].head("a")), lambda: list(s["sm"].tail("a")),
        lambda: list(s["sm"].sub("a", "b")),
        lambda: s["r"].get(), lambda: s["r"].add(1), lambda: s["rp"].add(1),
        lambda: s["a"].get(), lambda: s["a"].add(1), lambda: s["c"].add(1),
        lambda: s["ln"].merge_namespaces(0, [1]),
    ]


def test_access_before_set_current_key_is_refused(make_backend):
    backend = make_backend()
    s = register(backend)
    for access in _every_access(s):
        with pytest.raises(NoCurrentKeyError, match="set the key of the element"):
            access()
    assert all(entries == [] for entries in raw_state(backend).values())
    with pytest.raises(NoCurrentKeyError):
        backend.get_current_key_group()


def test_access_before_set_current_key_with_declared_key_type(make_backend):
    backend = make_backend(key_type=int)
    s = register(backend)
    with pytest.raises(NoCurrentKeyError, match="set_current_key"):
        s["v"].update(1)
    with pytest.raises(NoCurrentKeyError):
        s["m"].put(1, 1)


# ---- key groups -----------------------------------------------------------------------------

@pytest.mark.parametrize("keys", [
    [f"user-{i}" for i in range(200)],            # str keys (fast path)
    list(range(200)),                             # bigint keys (fast path)
    [(i, f"u{i}") for i in range(200)],           # tuple keys (generic path)
    [np.int32(i) for i in range(200)],            # int keys (generic path)
], ids=["str", "bigint", "tuple", "int"])
def test_key_outside_the_backend_range_is_refused(make_backend, keys):
    r = KeyGroupRange.for_operator(0, 2, 128)
    backend = make_backend(max_parallelism=128, key_group_range=r)
    inside = [k for k in keys if assign_key_group(k, 128) in r]
    outside = [k for k in keys if assign_key_group(k, 128) not in r]
    assert inside and outside
    s = populate(backend, inside[:3])
    backend.set_current_key(inside[0])
    before = raw_state(backend)
    for key in outside[:20]:
        with pytest.raises(KeyGroupOutOfRangeError,
                           match=r"outside this backend's range \[0, 63\].*route each key"):
            backend.set_current_key(key)
        # the previous current key stays current and usable
        assert backend.get_current_key() == inside[0]
        assert s["v"].value() == {"key": inside[0]}
    assert raw_state(backend) == before
    s["vi"].update(99)
    backend.set_current_key(inside[1])
    backend.set_current_key(inside[0])
    assert s["vi"].value() == 99


def test_first_key_outside_the_range_leaves_no_current_key(make_backend):
    r = KeyGroupRange.for_operator(1, 2, 128)
    backend = make_backend(key_group_range=r)
    key = next(f"k{i}" for i in range(1000) if assign_key_group(f"k{i}", 128) not in r)
    v = backend.get_state(ValueStateDescriptor("v"))
    with pytest.raises(KeyGroupOutOfRangeError):
        backend.set_current_key(key)
    with pytest.raises(NoCurrentKeyError):
        v.update(1)
    assert backend.get_current_key() is None


# ---- serialization --------------------------------------------------------------------------

class Unpicklable:
    def __reduce__(self):
        raise TypeError("no pickling for you")


UNPICKLABLE = [lambda: None, threading.Lock(), Unpicklable()]


def test_value_its_serializer_cannot_encode(populated):
    backend, s, before = populated
    with pytest.raises(SerializationError, match="'bigint' serializer.*value_type=object"):
        s["vi"].update("x")
    with pytest.raises(SerializationError):
        s["vi"].update(1.5)
    with pytest.raises(SerializationError, match="does not fit in 64 bits"):
        s["vi"].update(2**64)
    with pytest.raises(SerializationError, match="'string' serializer"):
        s["l"].add(5)
    with pytest.raises(SerializationError):
        s["l"].add_all(["fine", "also fine", b"bytes"])
    with pytest.raises(SerializationError, match="'string' serializer"):
        s["l"].update(["a", 1])
    with pytest.raises(SerializationError):
        s["m"].put("not an int user key", 1)
    with pytest.raises(SerializationError):
        s["m"].put_all({1: "ok", "bad": 2})
    with pytest.raises(SerializationError):
        s["sm"].put(3, 1)
    with pytest.raises(SerializationError):
        s["sm"].put("ok", "not an int")
    with pytest.raises(SerializationError, match="native numeric reducer.*Python reduce function"):
        s["r"].add("x")
    with pytest.raises(SerializationError):
        s["r"].add(True)
    assert raw_state(backend) == before
    assert isinstance(SerializationError("x"), TypeError)  # `except TypeError` keeps working


@pytest.mark.parametrize("bad", UNPICKLABLE, ids=["lambda", "lock", "reduce-raises"])
def test_objects_the_any_serializer_cannot_store(populated, bad):
    backend, s, before = populated
    with pytest.raises(SerializationError,
                       match='default .any. serializer.*value_type="pickle".*allow_pickle=True'):
        s["v"].update(bad)
    with pytest.raises(SerializationError, match="inside a tuple, list or dict"):
        s["v"].update({"nested": [bad]})
    with pytest.raises(SerializationError):
        s["la"].add(bad)
    with pytest.raises(SerializationError):
        s["la"].add_all([1, 2, bad])
    with pytest.raises(SerializationError):
        s["la"].update([1, bad])
    with pytest.raises(SerializationError):
        s["m"].put(1, bad)
    with pytest.raises(SerializationError):
        s["m"].put_all([(1, "ok"), (2, bad)])
    with pytest.raises(SerializationError):
        s["rl"].add(bad)  # the reduced value cannot be stored
    assert raw_state(backend) == before


@pytest.mark.parametrize("bad", UNPICKLABLE, ids=["lambda", "lock", "reduce-raises"])
def test_unpicklable_values_in_a_pickle_state(make_backend, bad):
    backend = make_backend(allow_pickle=True)
    backend.set_current_key("k")
    state = backend.get_state(ValueStateDescriptor("p", value_type="pickle"))
    state.update({"fine": 1})
    with pytest.raises(SerializationError, match="cannot be pickled.*picklable value"):
        state.update(bad)
    with pytest.raises(SerializationError, match="cannot be pickled"):
        state.update({"nested": [bad]})
    assert state.value() == {"fine": 1}


def test_unencodable_namespace_keeps_the_current_namespace(populated):
    backend, s, before = populated
    s["v"].set_current_namespace(1)
    with pytest.raises(SerializationError):
        s["v"].set_current_namespace(threading.Lock())
    assert s["v"].get_current_namespace() == 1
    assert s["v"].value() == 1
    with pytest.raises(SerializationError, match="namespace_type=object"):
        s["vi"].set_current_namespace("w")
    assert s["vi"].get_current_namespace() is None
    assert s["vi"].value() == 1
    assert raw_state(backend) == before


def test_merging_namespaces_of_a_state_without_namespaces(populated):
    backend, s, before = populated
    with pytest.raises(SerializationError, match="declared without namespaces.*namespace_type="):
        s["la"].merge_namespaces(None, [1])
    with pytest.raises(SerializationError, match="declared without namespaces.*namespace_type="):
        s["r"].merge_namespaces("w", [None])
    assert raw_state(backend) == before


# ---- close ----------------------------------------------------------------------------------

def test_use_after_close_is_refused(populated):
    backend, s, _ = populated
    backend.close()
    assert backend.closed
    backend.close()  # closing twice is harmless
    calls = _every_access(s) + [
        lambda: backend.set_current_key("k1"),
        lambda: backend.get_state(ValueStateDescriptor("v", namespace_type=object)),
        lambda: backend.get_state(ValueStateDescriptor("new")),
        lambda: backend.get_keys("v"),
        lambda: backend.num_state_entries(),
        lambda: backend.num_state_entries("l"),
        lambda: backend.get_current_key_group(),
    ]
    for call in calls:
        with pytest.raises(BackendClosedError, match="backend is closed.*open a new"):
            call()


def test_close_during_iteration_is_refused(backend):
    backend.set_current_key("k")
    m = backend.get_state(MapStateDescriptor("m", user_key_type=int))
    m.put_all({i: i for i in range(3000)})
    entries = m.entries()
    next(entries)
    keys = backend.get_keys("m")
    backend.close()
    with pytest.raises(BackendClosedError):
        list(entries)
    with pytest.raises(BackendClosedError):
        list(keys)


# ---- key types ------------------------------------------------------------------------------

@pytest.mark.parametrize("first,wrong", [
    ("alice", 5), ("alice", b"alice"), ("alice", ("alice",)), (5, "5"), (5, 5.5), (5, True),
    (5, (5, "a")), (5.5, "x"), (b"x", "x"), (True, 1), ((1, "a"), ("a", 1)), ((1, "a"), (1,)),
    ((1, "a"), (1, "a", 2)), ((1, "a"), 1), ((1, "a"), [1, "a"]), (5, 2**64),
])
def test_wrong_key_type_after_the_first_key(backend, first, wrong):
    v = backend.get_state(ValueStateDescriptor("v"))
    backend.set_current_key(first)
    v.update("first")
    before = raw_state(backend)
    with pytest.raises(KeyTypeError, match="key"):
        backend.set_current_key(wrong)
    assert backend.get_current_key() == first
    assert v.value() == "first"
    assert raw_state(backend) == before


def test_wrong_key_type_message_says_what_to_do(backend):
    backend.set_current_key("alice")
    with pytest.raises(KeyTypeError, match="same type.*key_type="):
        backend.set_current_key(5)


def test_declared_key_type_refuses_other_keys(make_backend):
    backend = make_backend(key_type=str)
    with pytest.raises(KeyTypeError, match="'string'"):
        backend.set_current_key(5)
    with pytest.raises(KeyTypeError, match="32-bit"):
        make_backend(key_type="int").set_current_key(2**31)
    assert isinstance(KeyTypeError("x"), TypeError)


@pytest.mark.parametrize("key", [None, [1, 2], {"a": 1}, object(), ()])
def test_unsupported_keys(backend, key):
    with pytest.raises(KeyTypeError):
        backend.set_current_key(key)


def test_native_count_and_sum_are_distinct_functions(make_backend):
    from stateengine import AggregatingStateDescriptor, StateRegistrationError, aggregates

    backend = make_backend()
    backend.set_current_key(1)
    n = backend.get_state(AggregatingStateDescriptor("n", aggregates.COUNT))
    n.add(7)
    with pytest.raises(StateRegistrationError, match="native COUNT but the descriptor asks for native SUM"):
        backend.get_state(AggregatingStateDescriptor("n", aggregates.SUM))
    assert n.get() == 1


def test_max_parallelism_accepts_any_integer_type_but_not_bool_or_float(make_backend):
    import numpy as np

    assert make_backend(max_parallelism=np.int64(256)).max_parallelism == 256
    for bad in (True, 128.0, "128", 0, 32769):
        with pytest.raises(ValueError, match="max_parallelism must be an int"):
            make_backend(max_parallelism=bad)


def test_wrong_user_key_type_points_at_user_key_type(populated):
    backend, s, before = populated
    hint = r"map state '{}': a user key of type str .* serializer of its user_key_type"
    with pytest.raises(SerializationError, match=hint.format("m")):
        s["m"].put("not an int user key", 1)
    with pytest.raises(SerializationError, match=hint.format("m")):
        s["m"].get("not an int user key")
    with pytest.raises(SerializationError, match=hint.format("m")):
        s["m"].put_many(["k1"], ["not an int user key"], [1])
    with pytest.raises(SerializationError, match="map state 'sm': a user key of type int"):
        s["sm"].put(3, 1)
    with pytest.raises(SerializationError, match="map state 'sm': a user key of type int"):
        list(s["sm"].tail(3))
    # Values keep pointing at value_type.
    with pytest.raises(SerializationError, match="value_type=object"):
        s["sm"].put("ok", "not an int")
    assert raw_state(backend) == before


def test_typed_user_key_of_the_wrong_shape_points_at_user_key_type(backend):
    m = backend.get_state(MapStateDescriptor("typed", user_key_type="path string, q int",
                                             value_type=int))
    backend.set_current_key("k")
    hint = (r"map state 'typed': user key 5 does not fit its user_key_type "
            r"struct<path:string,q:int> \(.*\); pass user keys of that schema")
    for call in (lambda: m.put(5, 1), lambda: m.get(5), lambda: m.contains(5)):
        with pytest.raises(SerializationError, match=hint):
            call()
    m.put(("/a", 1), 2)
    assert m.get(("/a", 1)) == 2


def test_changed_key_type_says_what_to_do(make_backend, tmp_path):
    backend = make_backend(key_type=(int, str))
    handle = backend.snapshot(tmp_path / "ck", "s").result()
    with pytest.raises(IncompatibleStateError,
                       match=r"key type changed.*key_type=\('bigint', 'string'\).*bootstrap_state"):
        KeyedStateBackend.restore(tmp_path / "r", [handle], key_type=(int, int))
    KeyedStateBackend.restore(tmp_path / "r2", [handle], key_type=("bigint", "string")).dispose()
