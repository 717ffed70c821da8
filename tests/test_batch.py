"""Batch state access (``*_many``) is the scalar API applied row by row, only faster.

Each test runs the same operations through the batch calls on one backend and through
``set_current_key`` + the scalar calls on another, then compares what both hold: the values the
API returns and, where the layout matters, the raw RocksDB bytes.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateengine import (AggregatingStateDescriptor, KeyGroupOutOfRangeError, KeyGroupRange, KeyTypeError,
                         ListStateDescriptor, MapStateDescriptor, NullElementError,
                         ReducingStateDescriptor, SerializationError, SortedMapStateDescriptor,
                         ValueStateDescriptor, aggregates, reducers)
from tests.user_functions import Average

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])



def scalar_values(backend, state, keys, read):
    out = []
    for k in keys:
        backend.set_current_key(k)
        out.append(read(state))
    return out


def raw_contents(backend, state):
    return backend._raw_scan(state.column_family)


# ---- key columns ---------------------------------------------------------------------------

INT_KEYS = [0, 1, -1, 7, 2**40, -2**63, 2**63 - 1, 12345]
FLOAT_KEYS = [0.0, -0.0, 1.5, -2.25, float("nan"), 1e300, float("inf")]
STR_KEYS = ["", "a", "bb", "ünï", "日本語", "x" * 300, "a\x00b"]


def key_columns(keys):
    """The same keys in every column layout the batch calls accept."""
    first = keys[0]
    if isinstance(first, str):
        yield "list", list(keys)
        yield "object", np.array(keys, dtype=object)
        if not any("\x00" in k for k in keys):  # numpy 'U' strips trailing NULs, not inner ones
            yield "numpy-U", np.array(keys)
        yield "arrow-string", pa.array(keys, pa.string())
        yield "arrow-large", pa.array(keys, pa.large_string())
        yield "arrow-chunked", pa.chunked_array([pa.array(keys[:1]), pa.array(keys[1:])])
        sliced = pa.array(["pad"] + list(keys))[1:]
        yield "arrow-sliced", sliced
    elif isinstance(first, float):
        yield "float64", np.array(keys, dtype=np.float64)
        yield "list", list(keys)
    else:
        yield "int64", np.array(keys, dtype=np.int64)
        yield "list", list(keys)
        yield "arrow-int64", pa.array(keys, pa.int64())


@pytest.mark.parametrize("keys", [INT_KEYS, FLOAT_KEYS, STR_KEYS], ids=["int", "float", "str"])
def test_value_put_many_matches_scalar_updates_bytewise(make_backend, keys):
    values = [f"v{i}" for i in range(len(keys))]
    scalar_be = make_backend()
    sv = scalar_be.get_state(ValueStateDescriptor("v"))
    for k, v in zip(keys, values):
        scalar_be.set_current_key(k)
        sv.update(v)
    expected = scalar_values(scalar_be, sv, keys, lambda s: s.value())  # -0.0 is 0.0's key
    for name, column in key_columns(keys):
        be = make_backend()
        state = be.get_state(ValueStateDescriptor("v"))
        state.put_many(column, np.array(values, dtype=object))
        assert raw_contents(be, state) == raw_contents(scalar_be, sv), name
        got, found = state.get_many(column)
        assert found.all(), name
        assert list(got) == expected, name


def test_binary_keys_from_numpy_and_arrow(make_backend):
    keys = [b"", b"\x00\x01", b"abc", b"\xff" * 20]
    scalar_be = make_backend(key_type=bytes)
    sv = scalar_be.get_state(ValueStateDescriptor("v", value_type=int))
    for i, k in enumerate(keys):
        scalar_be.set_current_key(k)
        sv.update(i)
    for column in (keys, pa.array(keys, pa.binary()), pa.array(keys, pa.large_binary())):
        be = make_backend(key_type=bytes)
        state = be.get_state(ValueStateDescriptor("v", value_type=int))
        state.put_many(column, np.arange(len(keys)))
        assert raw_contents(be, state) == raw_contents(scalar_be, sv)
    be = make_backend(key_type=bytes)
    state = be.get_state(ValueStateDescriptor("v", value_type=int))
    fixed = np.array([b"ab", b"c"])  # numpy 'S' pads with NULs that are not part of the key
    state.put_many(fixed, np.array([1, 2]))
    be.set_current_key(b"c")
    assert state.value() == 2


def test_key_type_is_inferred_from_the_first_batch(make_backend):
    be = make_backend()
    state = be.get_state(ValueStateDescriptor("v", value_type=int))
    state.put_many(np.array([5, 6], dtype=np.int64), np.array([50, 60]))
    assert be.key_codecs == (2,)  # bigint
    be.set_current_key(6)
    assert state.value() == 60


def test_tuple_keys_go_through_the_scalar_encoder(make_backend):
    keys = [(1, "a"), (2, "b"), (1, "a")]
    be = make_backend(key_type=(int, str))
    state = be.get_state(ValueStateDescriptor("v", value_type=int))
    state.put_many(keys, [1, 2, 3])
    values, found = state.get_many(keys)
    assert values.tolist() == [3, 2, 3] and found.all()
    be.set_current_key((1, "a"))
    assert state.value() == 3


# ---- value state ---------------------------------------------------------------------------

ops_keys = st.lists(st.integers(-5, 5), min_size=1, max_size=40)


@SETTINGS
@given(keys=ops_keys, data=st.data())
def test_value_batches_equal_scalar_model(make_backend, keys, data):
    values = data.draw(st.lists(st.integers(-2**63, 2**63 - 1), min_size=len(keys),
                                max_size=len(keys)))
    be = make_backend()
    state = be.get_state(ValueStateDescriptor("v", value_type=int, default=-7))
    state.put_many(np.array(keys, dtype=np.int64), np.array(values, dtype=np.int64))
    model = dict(zip(keys, values))  # the last row of a key wins
    probe = list(range(-6, 7))
    got, found = state.get_many(np.array(probe))
    assert got.dtype == np.int64
    assert got.tolist() == [model.get(k, -7) for k in probe]
    assert found.tolist() == [k in model for k in probe]
    assert scalar_values(be, state, probe, lambda s: s.value()) == got.tolist()


def test_value_get_many_types(make_backend):
    be = make_backend()
    f = be.get_state(ValueStateDescriptor("f", value_type=float))
    f.put_many([1, 2], np.array([0.5, -1.0]))
    got, found = f.get_many([1, 2, 3])
    assert got.dtype == np.float64 and got.tolist() == [0.5, -1.0, 0.0]
    assert found.tolist() == [True, True, False]
    anyv = be.get_state(ValueStateDescriptor("any", default=[]))
    anyv.put_many([1, 2], [{"a": 1}, (1, 2)])
    got, found = anyv.get_many([1, 2, 3, 3])
    assert got.dtype == object
    assert got[0] == {"a": 1} and got[1] == (1, 2) and got[2] == [] and got[3] == []
    assert got[2] is not got[3]  # a mutable default is copied, as value() does


def test_value_put_many_none_clears(make_backend):
    be = make_backend()
    state = be.get_state(ValueStateDescriptor("v"))
    state.put_many([1, 2], ["a", "b"])
    state.put_many([1, 2], [None, "c"])
    _, found = state.get_many([1, 2])
    assert found.tolist() == [False, True]


def test_value_typed_numpy_encodings_match_scalar(make_backend):
    cases = [(int, np.array([1, -2, 2**62])), (float, np.array([0.25, -0.0, np.inf])),
             (None, np.array([1, -2])), (None, np.array([0.5, 2.0])),
             (None, np.array([True, False])), (bool, np.array([True, False])),
             ("int", np.array([7, -2**31])), ("float", np.array([1.5, 3.0])),
             (str, np.array(["x", "yz"])), (bytes, np.array([b"x", b"yz"], dtype=object))]
    for value_type, values in cases:
        a, b = make_backend(), make_backend()
        sa = a.get_state(ValueStateDescriptor("v", value_type=value_type))
        sb = b.get_state(ValueStateDescriptor("v", value_type=value_type))
        keys = [10, 20, 30][:len(values)]
        sa.put_many(keys, values)
        for k, v in zip(keys, values.tolist()):
            b.set_current_key(k)
            sb.update(v)
        assert raw_contents(a, sa) == raw_contents(b, sb), value_type


# ---- reducing and aggregating state --------------------------------------------------------

# Halves keep float sums exact, so regrouping the additions cannot change them.
numbers = st.one_of(st.integers(-2**40, 2**40), st.integers(-1000, 1000).map(lambda i: i / 2))


@SETTINGS
@given(keys=ops_keys, data=st.data(),
       fn=st.sampled_from([reducers.SUM, reducers.MIN, reducers.MAX]),
       value_type=st.sampled_from([int, float, None]))
def test_reducing_add_many_equals_scalar_adds(make_backend, keys, data, fn, value_type):
    if value_type is int:
        elems = st.integers(-2**62, 2**62)
    else:
        elems = st.integers(-1000, 1000).map(lambda i: i / 2)
    values = data.draw(st.lists(elems, min_size=len(keys), max_size=len(keys)))
    a, b = make_backend(), make_backend()
    sa = a.get_state(ReducingStateDescriptor("r", fn, value_type=value_type))
    sb = b.get_state(ReducingStateDescriptor("r", fn, value_type=value_type))
    half = len(keys) // 2  # two batches: the second merges into stored values
    sa.add_many(np.array(keys[:half], dtype=np.int64), np.array(values[:half]))
    sa.add_many(np.array(keys[half:], dtype=np.int64), np.array(values[half:]))
    for k, v in zip(keys, values):
        b.set_current_key(k)
        sb.add(v)
    probe = sorted(set(keys)) + [99]
    got, found = sa.get_many(probe)
    expected = scalar_values(b, sb, probe, lambda s: s.get())
    assert found.tolist() == [e is not None for e in expected]
    assert [g if f else None for g, f in zip(got.tolist(), found)] == expected
    if value_type is not None:
        assert got.dtype == (np.int64 if value_type is int else np.float64)


def test_reducing_add_many_mixed_object_values(make_backend):
    a, b = make_backend(), make_backend()
    sa = a.get_state(ReducingStateDescriptor("r", reducers.SUM))
    sb = b.get_state(ReducingStateDescriptor("r", reducers.SUM))
    keys, values = [1, 1, 2, 1], [1, 0.5, 3, np.int64(4)]
    sa.add_many(keys, values)
    for k, v in zip(keys, values):
        b.set_current_key(k)
        sb.add(v)
    got, _ = sa.get_many([1, 2])
    assert got.tolist() == scalar_values(b, sb, [1, 2], lambda s: s.get()) == [5.5, 3]


def test_aggregating_count_and_sum(make_backend):
    be = make_backend()
    count = be.get_state(AggregatingStateDescriptor("c", aggregates.COUNT, accumulator_type=int))
    total = be.get_state(AggregatingStateDescriptor("s", aggregates.SUM, accumulator_type=float))
    keys = np.array([3, 1, 3, 3, 2])
    count.add_many(keys, np.array(["a", "b", "c", "d", "e"], dtype=object))
    count.add_many(keys[:2], np.array([1.0, 2.0]))
    total.add_many(keys, np.array([1, 2, 3, 4, 5]))
    c, _ = count.get_many([1, 2, 3])
    s, _ = total.get_many([1, 2, 3])
    assert c.tolist() == [2, 1, 4]
    assert s.tolist() == [2.0, 5.0, 8.0]
    assert scalar_values(be, count, [1, 2, 3], lambda st_: st_.get()) == [2, 1, 4]




def test_python_functions_fold_in_input_order(make_backend):
    a, b = make_backend(), make_backend()
    concat = lambda x, y: x + y  # noqa: E731 - order-sensitive on purpose
    ra = a.get_state(ReducingStateDescriptor("r", concat))
    rb = b.get_state(ReducingStateDescriptor("r", concat))
    ma = a.get_state(AggregatingStateDescriptor("m", Average()))
    mb = b.get_state(AggregatingStateDescriptor("m", Average()))
    keys = ["k", "j", "k", "k", "j"]
    words = ["a", "b", "c", "d", "e"]
    ra.add_many(keys, words)
    ra.add_many(["k"], ["z"])
    ma.add_many(keys, np.array([1, 2, 3, 4, 6]))
    for k, w, n in zip(keys, words, [1, 2, 3, 4, 6]):
        b.set_current_key(k)
        rb.add(w)
        mb.add(n)
    b.set_current_key("k")
    rb.add("z")
    assert ra.get_many(["k", "j", "x"])[0].tolist() == ["acdz", "be", None]
    assert ra.get_many(["k", "j"])[0].tolist() == scalar_values(b, rb, ["k", "j"], lambda s: s.get())
    assert ma.get_many(["k", "j"])[0].tolist() == scalar_values(b, mb, ["k", "j"],
                                                               lambda s: s.get())


def test_python_function_error_writes_nothing(make_backend):
    be = make_backend()

    def picky(x, y):
        if y == "boom":
            raise RuntimeError("boom")
        return x + y

    r = be.get_state(ReducingStateDescriptor("r", picky))
    r.add_many(["a", "b"], ["x", "y"])
    with pytest.raises(RuntimeError):
        r.add_many(["a", "b", "a"], ["1", "2", "boom"])
    assert r.get_many(["a", "b"])[0].tolist() == ["x", "y"]


# ---- list state ----------------------------------------------------------------------------

@SETTINGS
@given(keys=ops_keys, data=st.data())
def test_list_add_many_appends_in_input_order(make_backend, keys, data):
    elems = data.draw(st.lists(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=5)),
                               min_size=len(keys), max_size=len(keys)))
    a, b = make_backend(), make_backend()
    la = a.get_state(ListStateDescriptor("l"))
    lb = b.get_state(ListStateDescriptor("l"))
    la.add_many(keys, elems)
    la.add_many(np.array(keys, dtype=np.int64), np.arange(len(keys)))
    for k, e in zip(keys, elems):
        b.set_current_key(k)
        lb.add(e)
    for k, i in zip(keys, range(len(keys))):
        b.set_current_key(k)
        lb.add(i)
    probe = sorted(set(keys)) + [100]
    assert la.get_many(probe) == scalar_values(b, lb, probe, lambda s: s.get())
    assert raw_contents(a, la) == raw_contents(b, lb)


# ---- map state -----------------------------------------------------------------------------

@SETTINGS
@given(rows=st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["p", "q", 1, 2.5]),
                               st.one_of(st.none(), st.integers(), st.text(max_size=3))),
                     min_size=1, max_size=30))
def test_map_batches_equal_scalar_model(make_backend, rows):
    a, b = make_backend(), make_backend()
    ma = a.get_state(MapStateDescriptor("m"))
    mb = b.get_state(MapStateDescriptor("m"))
    keys, uks, values = (list(c) for c in zip(*rows))
    ma.put_many(keys, uks, values)
    for k, uk, v in rows:
        b.set_current_key(k)
        mb.put(uk, v)
    assert raw_contents(a, ma) == raw_contents(b, mb)
    probe = [(k, uk) for k in range(6) for uk in ["p", "q", 1, 2.5, "r"]]
    got, found = ma.get_many([k for k, _ in probe], [uk for _, uk in probe])
    for (k, uk), g, f in zip(probe, got, found):
        b.set_current_key(k)
        assert g == mb.get(uk) and f == mb.contains(uk)


def test_map_typed_values(make_backend):
    be = make_backend()
    m = be.get_state(MapStateDescriptor("m", user_key_type=int, value_type=float))
    m.put_many(np.array([1, 1, 2]), np.array([10, 20, 10]), np.array([0.5, 1.5, 2.5]))
    got, found = m.get_many(np.array([1, 1, 2, 2]), np.array([10, 20, 10, 20]))
    assert got.dtype == np.float64 and got.tolist() == [0.5, 1.5, 2.5, 0.0]
    assert found.tolist() == [True, True, True, False]


def test_sorted_map_put_many_iterates_in_order(make_backend):
    be = make_backend(key_type=str)
    sm = be.get_state(SortedMapStateDescriptor("s", user_key_type=str, value_type=int))
    sm.put_many(["k", "k", "k"], pa.array(["b", "a", "c"]), np.array([2, 1, 3]))
    be.set_current_key("k")
    assert list(sm.entries()) == [("a", 1), ("b", 2), ("c", 3)]
    assert sm.get_many(["k", "k"], ["a", "z"])[0].tolist() == [1, 0]


# ---- namespaces and the current key --------------------------------------------------------

def test_batches_use_the_current_namespace_and_keep_the_current_key(make_backend):
    be = make_backend()
    v = be.get_state(ValueStateDescriptor("v", value_type=int, namespace_type=object))
    be.set_current_key(42)
    v.set_current_namespace("w1")
    v.put_many([1, 2], [10, 20])
    v.set_current_namespace("w2")
    v.put_many([1], [11])
    assert be.get_current_key() == 42
    assert v.get_many([1, 2])[0].tolist() == [11, 0]
    v.set_current_namespace("w1")
    assert v.get_many([1, 2])[0].tolist() == [10, 20]
    be.set_current_key(2)
    assert v.value() == 20
    v.set_current_namespace(None)
    assert v.value() is None


def test_variable_key_and_namespace_use_flink_length_suffixes(make_backend):
    a, b = make_backend(), make_backend()
    la = a.get_state(ListStateDescriptor("l", namespace_type=object))
    lb = b.get_state(ListStateDescriptor("l", namespace_type=object))
    la.set_current_namespace("window-1")
    lb.set_current_namespace("window-1")
    la.add_many(np.array(["x", "yy", "x"]), np.array([1, 2, 3]))
    for k, e in zip(["x", "yy", "x"], [1, 2, 3]):
        b.set_current_key(k)
        lb.add(e)
    assert raw_contents(a, la) == raw_contents(b, lb)


# ---- errors leave state unchanged ----------------------------------------------------------

def test_out_of_range_key_writes_nothing(make_backend):
    kgr = KeyGroupRange.for_operator(0, 2, 128)
    be = make_backend(key_group_range=kgr, key_type=int)
    v = be.get_state(ValueStateDescriptor("v", value_type=int))
    r = be.get_state(ReducingStateDescriptor("r", reducers.SUM, value_type=int))
    keys = np.arange(200)
    owned = np.array([kgr.start <= be.key_group_of(int(k)) <= kgr.end for k in keys])
    v.put_many(keys[owned], keys[owned])
    before = raw_contents(be, v)
    with pytest.raises(KeyGroupOutOfRangeError, match="outside this backend's range"):
        v.put_many(keys, keys + 1)
    with pytest.raises(KeyGroupOutOfRangeError):
        r.add_many(keys, keys)
    with pytest.raises(KeyGroupOutOfRangeError):
        v.get_many(keys)
    assert raw_contents(be, v) == before
    assert raw_contents(be, r) == []
    got, found = v.get_many(keys[owned])
    assert found.all() and (got == keys[owned]).all()


def test_none_list_element_writes_nothing(make_backend):
    be = make_backend()
    lst = be.get_state(ListStateDescriptor("l"))
    lst.add_many([1, 2], ["a", "b"])
    with pytest.raises(NullElementError):
        lst.add_many([1, 2, 3], ["c", None, "d"])
    with pytest.raises(NullElementError):
        lst.add_many(pa.array([1, 2]), pa.array(["c", None]))
    assert lst.get_many([1, 2, 3]) == [["a"], ["b"], []]


def test_wrong_value_types_write_nothing(make_backend):
    be = make_backend()
    v = be.get_state(ValueStateDescriptor("v", value_type=int))
    r = be.get_state(ReducingStateDescriptor("r", reducers.SUM, value_type=int))
    a = be.get_state(AggregatingStateDescriptor("a", aggregates.COUNT))
    v.put_many([1], [1])
    with pytest.raises(SerializationError):
        v.put_many([1, 2], np.array([5.5, 6.5]))
    with pytest.raises(SerializationError):
        v.put_many([1, 2], [5, "six"])
    with pytest.raises(SerializationError):
        r.add_many([1, 2], np.array([1.5, 2.0]))
    with pytest.raises(SerializationError):
        r.add_many([1, 2], ["x", 1])
    with pytest.raises(NullElementError):
        a.add_many([1, 2], ["x", None])
    i32 = be.get_state(ValueStateDescriptor("i32", value_type="int"))
    with pytest.raises(SerializationError, match="32-bit"):
        i32.put_many([1, 2], np.array([1, 2**40]))
    assert v.get_many([1, 2])[0].tolist() == [1, 0]
    assert raw_contents(be, r) == [] and raw_contents(be, a) == [] and raw_contents(be, i32) == []


def test_key_and_length_errors(make_backend):
    be = make_backend(key_type=int)
    v = be.get_state(ValueStateDescriptor("v"))
    with pytest.raises(KeyTypeError):
        v.put_many(["a", "b"], [1, 2])
    with pytest.raises(KeyTypeError):
        v.put_many([1, None], [1, 2])
    with pytest.raises(ValueError, match="values"):
        v.put_many([1, 2], [1])
    with pytest.raises(TypeError):
        v.get_many("abc")
    assert raw_contents(be, v) == []
    empty, found = v.get_many(np.array([], dtype=np.int64))
    assert empty.size == 0 and found.size == 0


def test_float_keys_normalize_like_scalar(make_backend):
    be = make_backend(key_type=float)
    v = be.get_state(ValueStateDescriptor("v", value_type=int))
    v.put_many(np.array([-0.0, float("nan")]), np.array([1, 2]))
    be.set_current_key(0.0)
    assert v.value() == 1
    be.set_current_key(float("nan"))
    assert v.value() == 2
    got, _ = v.get_many([0.0, math.nan])
    assert got.tolist() == [1, 2]


# ---- ordering of batches that take the radix sort (64 rows and more) ----------------------

# Composite keys of 1 + len + 1 bytes (key group, varint-prefixed text, void namespace) over
# the 8-, 16- and 24-byte word sorts and the byte-compare sort above 24 bytes; prefixes of one
# another and keys equal up to their zero padding must still order by bytes, then by row.
radix_text = st.text(alphabet="ab\x00\x01\xffé", max_size=26)


@SETTINGS
@given(keys=st.lists(radix_text, min_size=64, max_size=300))
def test_list_add_many_keeps_input_order_in_large_text_batches(make_backend, keys):
    a, b = make_backend(key_type=str), make_backend(key_type=str)
    la = a.get_state(ListStateDescriptor("l", value_type=int))
    lb = b.get_state(ListStateDescriptor("l", value_type=int))
    la.add_many(keys, np.arange(len(keys)))
    for i, k in enumerate(keys):
        b.set_current_key(k)
        lb.add(i)
    assert raw_contents(a, la) == raw_contents(b, lb)
    probe = sorted(set(keys))
    assert la.get_many(probe) == scalar_values(b, lb, probe, lambda s: s.get())


@SETTINGS
@given(rows=st.lists(st.tuples(st.sampled_from(["k", "kk"]), st.sampled_from(["a", "a\x00",
                                                                              "a\x00\x00", "", "\x00"])),
                     min_size=64, max_size=200))
def test_sorted_map_user_keys_equal_up_to_zero_padding(make_backend, rows):
    """Ordered user keys are not self-delimiting, so one composite key can be another plus
    zero bytes: the sort must put the shorter first and keep rows of one key in input order."""
    keys, uks = (list(c) for c in zip(*rows))
    a, b = make_backend(key_type=str), make_backend(key_type=str)
    sa = a.get_state(SortedMapStateDescriptor("s", user_key_type=str, value_type=int))
    sb = b.get_state(SortedMapStateDescriptor("s", user_key_type=str, value_type=int))
    sa.put_many(keys, uks, np.arange(len(keys)))
    for i, (k, uk) in enumerate(rows):
        b.set_current_key(k)
        sb.put(uk, i)
    assert raw_contents(a, sa) == raw_contents(b, sb)
    # RocksDB is told that a batch's lookups arrive sorted: a misordered pair would be missed
    got, found = sa.get_many(keys, uks)
    assert found.all()
    expected = []
    for k, uk in rows:
        b.set_current_key(k)
        expected.append(sb.get(uk))
    assert got.tolist() == expected


@SETTINGS
@given(keys=st.lists(st.integers(-2**63, 2**63 - 1) | st.integers(-3, 3), min_size=64,
                     max_size=300),
       max_parallelism=st.sampled_from([1, 128, 4096]), namespace=st.sampled_from([None, 7, "w"]),
       in_order=st.booleans())
def test_bigint_batches_match_scalar_bytes(make_backend, keys, max_parallelism, namespace,
                                           in_order):
    """int64 keys take their own encoding path: its bytes (2-byte key-group prefixes above 128
    groups, namespaces) and its order (the last row of a key wins) are the scalar path's, for
    rows in any order and for rows already in the order of their key bytes (np.unique's output
    of non-negative keys), which skip the sort by value."""
    if in_order:
        keys = sorted(keys, key=lambda k: k % 2**64)  # the bytes' order: negatives last
    values = np.arange(len(keys), dtype=np.int64)
    a = make_backend(key_type=int, max_parallelism=max_parallelism)
    b = make_backend(key_type=int, max_parallelism=max_parallelism)
    va = a.get_state(ValueStateDescriptor("v", value_type=int, namespace_type=object))
    vb = b.get_state(ValueStateDescriptor("v", value_type=int, namespace_type=object))
    va.set_current_namespace(namespace)
    vb.set_current_namespace(namespace)
    va.put_many(np.array(keys, dtype=np.int64), values)
    for k, v in zip(keys, values.tolist()):
        b.set_current_key(k)
        vb.update(v)
    assert raw_contents(a, va) == raw_contents(b, vb)
    got, found = va.get_many(np.array(keys, dtype=np.int64))
    assert found.all()
    assert got.tolist() == scalar_values(b, vb, keys, lambda s: s.value())


# ---- larger batches and other column sources -----------------------------------------------

def test_large_batches_span_several_multiget_chunks(make_backend):
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 6000, 20_000)
    values = rng.integers(-1000, 1000, 20_000)
    be = make_backend()
    v = be.get_state(ValueStateDescriptor("v", value_type=int))
    r = be.get_state(ReducingStateDescriptor("r", reducers.SUM, value_type=int))
    v.put_many(keys, values)
    r.add_many(keys, values)
    last, total = {}, {}
    for k, x in zip(keys.tolist(), values.tolist()):
        last[k] = x
        total[k] = total.get(k, 0) + x
    probe = np.arange(6500)
    got, found = v.get_many(probe)
    assert found.tolist() == [k in last for k in probe.tolist()]
    assert got.tolist() == [last.get(k, 0) for k in probe.tolist()]
    sums, _ = r.get_many(probe[::-1])
    assert sums.tolist() == [total.get(k, 0) for k in probe[::-1].tolist()]


@pytest.mark.parametrize("ingest_min_keys", [0, 1_000], ids=["memtable", "ingested"])
def test_large_shuffled_batches_of_every_value_column(make_backend, ingest_above,
                                                      ingest_min_keys):
    """Batch writes walk the rows in key order and fetch rows ahead of it (csrc/prefetch.h):
    every kind of value column, with repeated keys in random order and None values, against
    a dict of the last write (a key's sum and list) per key, read back one key at a time;
    batch puts through the memtable and ingested as a table file (csrc/batch_ingest.h)."""
    ingest_above(ingest_min_keys)
    _check_every_value_column(make_backend, over_a_table=ingest_min_keys > 0)


def _check_every_value_column(make_backend, over_a_table: bool):
    """over_a_table: each state first gets the same puts in reverse and a flush, so that the
    checked batch put finds an L0 table under it (only then is a batch ingested)."""
    rng = np.random.default_rng(7)
    n = 5_000
    keys = rng.integers(0, 1_500, n)
    ints = rng.integers(-10**6, 10**6, n)
    texts = [f"t{x}" * int(x % 4) for x in ints.tolist()]  # empty strings too
    columns = {
        "int64": (int, ints, ints.tolist()),
        "float64": (float, ints / 4, (ints / 4).tolist()),
        "numpy U": (str, np.array(texts), texts),
        "numpy S": (bytes, np.array([t.encode() for t in texts]), [t.encode() for t in texts]),
        "arrow string": (str, pa.array(texts), texts),
        "arrow large_binary": (bytes, pa.array([t.encode() for t in texts], pa.large_binary()),
                               [t.encode() for t in texts]),
        "objects with None": (str, np.array([None if x % 5 == 0 else t for x, t in zip(ints.tolist(), texts)],
                                            dtype=object),
                              [None if x % 5 == 0 else t for x, t in zip(ints.tolist(), texts)]),
    }
    be = make_backend()
    for name, (vtype, column, plain) in columns.items():
        v = be.get_state(ValueStateDescriptor(f"v {name}", value_type=vtype))
        if over_a_table:
            v.put_many(keys[::-1], column[::-1])
            be._native_flush()
            files = be.metrics()["sst_files"]
        v.put_many(keys, column)
        if over_a_table:
            assert be.metrics()["sst_files"] == files + 1, name  # ingested, not in memtable
        last = {}
        for k, x in zip(keys.tolist(), plain):
            last[k] = x
        probe = sorted(set(keys.tolist()))
        assert scalar_values(be, v, probe, lambda s: s.value()) == [last[k] for k in probe], name
    struct = be.get_state(ValueStateDescriptor("s", value_type="count long, total double"))
    if over_a_table:
        struct.put_many(keys[::-1], {"count": ints[::-1], "total": ints[::-1] / 2})
        be._native_flush()
    struct.put_many(keys, {"count": ints, "total": ints / 2})
    last = {}
    for k, c in zip(keys.tolist(), ints.tolist()):
        last[k] = {"count": c, "total": c / 2}
    probe = sorted(last)
    got, _ = struct.get_many(np.array(probe))
    assert got.to_pylist() == [last[k] for k in probe]
    total = be.get_state(ReducingStateDescriptor("sum", reducers.SUM, value_type=float))
    lst = be.get_state(ListStateDescriptor("list", value_type=str))
    total.add_many(keys, ints / 4)
    lst.add_many(keys, pa.array(texts))
    sums, lists = {}, {}
    for k, x, t in zip(keys.tolist(), (ints / 4).tolist(), texts):
        sums[k] = sums.get(k, 0.0) + x
        lists.setdefault(k, []).append(t)
    assert scalar_values(be, total, probe, lambda s: s.get()) == [sums[k] for k in probe]
    assert lst.get_many(np.array(probe)) == [lists[k] for k in probe]


def test_pandas_series_columns(make_backend):
    pd = pytest.importorskip("pandas")
    be = make_backend()
    lst = be.get_state(ListStateDescriptor("l", value_type=float))
    frame = pd.DataFrame({"user": ["a", "b", "a"], "amount": [1.5, 2.0, 3.0]})
    lst.add_many(frame["user"], frame["amount"])
    assert lst.get_many(pd.Series(["a", "b", "c"])) == [[1.5, 3.0], [2.0], []]


def test_null_keys_are_refused(make_backend):
    be = make_backend(key_type=str)
    v = be.get_state(ValueStateDescriptor("v"))
    with pytest.raises(KeyTypeError):
        v.put_many(pa.array(["a", None]), ["x", "y"])
    with pytest.raises(KeyTypeError):
        v.put_many(np.array(["a", None], dtype=object), ["x", "y"])
    assert raw_contents(be, v) == []


def test_rocksdb_floor_leaves_the_state_unchanged(make_backend):
    """The bench's RocksDB-only timings (csrc/rocksdb_floor.h) rewrite what they read."""
    from stateengine import _native

    be = make_backend(key_type=int)
    v = be.get_state(ValueStateDescriptor("v", value_type=int))
    keys = np.arange(300, dtype=np.int64)
    v.put_many(keys[::2], keys[::2] * 3)
    before = raw_contents(be, v)
    for op in ("point_get", "multiget", "point_put", "write_batch"):
        assert _native._rocksdb_floor(v, keys, op) >= 0.0
        assert raw_contents(be, v) == before, op
    with pytest.raises(ValueError, match="unknown floor operation"):
        _native._rocksdb_floor(v, keys, "scan")
