"""What cannot be stored is refused with a clear error, by the scalar and the batch path alike.

* Text holding a lone surrogate (what ``surrogateescape`` decoding leaves for undecodable
  bytes) has no UTF-8 encoding: as a value, map user key or namespace it is a
  SerializationError, as a key a KeyTypeError, as a state name a StateRegistrationError.
* State names are at most ``MAX_STATE_NAME_BYTES`` UTF-8 bytes.
* A finite number beyond float32's range is a SerializationError (KeyTypeError for keys) for a
  32-bit 'float' serializer, instead of being stored as infinity; infinities and NaN given as
  such are stored.

Nothing is written by a refused call.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stateengine import (KeyTypeError, ListStateDescriptor, MapStateDescriptor,
                         SerializationError, SortedMapStateDescriptor, StateRegistrationError,
                         ValueStateDescriptor)
from stateengine.descriptors import MAX_STATE_NAME_BYTES

LONE = "ab\udc80c"  # as b"ab\x80c".decode("utf-8", "surrogateescape") gives


def stored(backend):
    """Every entry of every state (and the timers)."""
    return {name: backend._raw_scan(cf) for name, cf in backend._cf_index.items()
            if backend._raw_scan(cf)}


def test_lone_surrogates_in_values_user_keys_and_namespaces(backend):
    v = backend.get_state(ValueStateDescriptor("v"))
    s = backend.get_state(ValueStateDescriptor("s", str))
    lst = backend.get_state(ListStateDescriptor("l", str))
    m = backend.get_state(MapStateDescriptor("m", str, str))
    sm = backend.get_state(SortedMapStateDescriptor("sm", str, int))
    ns = backend.get_state(ValueStateDescriptor("ns", int, namespace_type=object))
    backend.set_current_key("k")
    before = stored(backend)
    for call in (lambda: v.update(LONE), lambda: s.update(LONE), lambda: lst.add(LONE),
                 lambda: lst.add_all(["ok", LONE]), lambda: m.put(LONE, "x"),
                 lambda: m.put("x", LONE), lambda: m.put_all({"a": "b", LONE: "c"}),
                 lambda: sm.put(LONE, 1), lambda: ns.set_current_namespace(LONE),
                 lambda: backend.timer_service.register_event_time_timer(5, LONE),
                 lambda: s.put_many(["k", "j"], ["fine", LONE]),
                 lambda: s.put_many(np.array(["k"]), np.array([LONE])),
                 lambda: m.put_many(["k", "k"], ["a", LONE], ["x", "y"]),
                 lambda: m.put_many(np.array(["k"]), np.array([LONE]), ["y"]),
                 lambda: lst.add_many(["k"], [LONE])):
        with pytest.raises(SerializationError, match="lone surrogate|not valid Unicode"):
            call()
    assert stored(backend) == before
    with pytest.raises(SerializationError):
        m.get(LONE)
    with pytest.raises(SerializationError):
        m.contains(LONE)


@pytest.mark.parametrize("keys", [
    lambda: LONE, lambda: np.str_(LONE), lambda: ("a", LONE)], ids=["str", "numpy-str", "tuple"])
def test_lone_surrogates_in_keys_are_key_type_errors(make_backend, keys):
    key = keys()
    b = make_backend(key_type=(str, str) if isinstance(key, tuple) else str)
    v = b.get_state(ValueStateDescriptor("v", int))
    with pytest.raises(KeyTypeError, match="lone surrogate"):
        b.set_current_key(key)
    assert b.get_current_key() is None
    with pytest.raises(KeyTypeError, match="lone surrogate"):
        b.key_group_of(key)
    column = np.empty(1, dtype=object)
    column[0] = key
    for column in ([key], column):
        with pytest.raises(KeyTypeError):
            v.put_many(column, [1])
        with pytest.raises(KeyTypeError):
            v.get_many(column)
    if not isinstance(key, tuple):
        with pytest.raises(KeyTypeError, match="not valid Unicode"):
            v.put_many(np.array([key]), [1])  # a numpy 'U' column holds the surrogate too
    assert b._raw_scan(v.column_family) == []


def test_state_names_that_cannot_be_stored(backend):
    with pytest.raises(StateRegistrationError, match="lone surrogate"):
        ValueStateDescriptor(LONE)
    longest = "é" * (MAX_STATE_NAME_BYTES // 2)  # two UTF-8 bytes each
    backend.get_state(ValueStateDescriptor(longest))
    for name in (longest + "x", "n" * 70_000):
        with pytest.raises(StateRegistrationError, match=f"at most {MAX_STATE_NAME_BYTES} bytes"):
            ValueStateDescriptor(name)
    with pytest.raises(StateRegistrationError):
        list(backend.get_keys("n" * 70_000))
    assert backend.state_names == [longest]


def test_a_snapshot_of_the_longest_name_restores(backend, tmp_path):
    from stateengine import KeyedStateBackend
    name = "ü" * (MAX_STATE_NAME_BYTES // 2)
    v = backend.get_state(ValueStateDescriptor(name, int))
    backend.set_current_key(1)
    v.update(3)
    handle = backend.snapshot(tmp_path / "s", "full").result()
    r = KeyedStateBackend.restore(tmp_path / "r", [handle])
    r.set_current_key(1)
    assert r.get_state(ValueStateDescriptor(name, int)).value() == 3
    r.close()


FLOAT32_MAX = float(np.finfo(np.float32).max)
TOO_BIG = [1e300, -1e300, 3.5e38, FLOAT32_MAX * 2, 3.4028235677973366e38]


@pytest.mark.parametrize("value", TOO_BIG)
def test_float32_overflow_is_refused(backend, value):
    s = backend.get_state(ValueStateDescriptor("f", "float"))
    m = backend.get_state(MapStateDescriptor("m", int, "float"))
    backend.set_current_key(1)
    with pytest.raises(SerializationError, match="outside the range of the 32-bit 'float'"):
        s.update(value)
    with pytest.raises(SerializationError, match="outside the range of the 32-bit 'float'"):
        m.put(1, value)
    with pytest.raises(SerializationError, match="outside the range of the 32-bit 'float'"):
        backend.get_state(ListStateDescriptor("l", "float")).add(value)
    for column in (np.array([0.5, value]), [0.5, value], np.array([0.5, value], dtype=object)):
        with pytest.raises(SerializationError, match="32-bit 'float'"):
            s.put_many([1, 2], column)
        with pytest.raises(SerializationError, match="32-bit 'float'"):
            m.put_many([1, 2], [1, 2], column)
    assert s.value() is None and m.get(1) is None
    assert backend._raw_scan(s.column_family) == []


def test_float32_keeps_what_it_can_hold(backend):
    s = backend.get_state(ValueStateDescriptor("f", "float"))
    halfway = 3.4028235677973366e38  # between the largest float32 and 2**128: rounds up
    values = [FLOAT32_MAX, -FLOAT32_MAX, float(np.nextafter(halfway, 0)),  # rounds down
              math.inf, -math.inf, 1e-50, 0.1]
    for i, x in enumerate(values):
        backend.set_current_key(i)
        s.update(x)
    backend.set_current_key(99)
    s.update(math.nan)
    assert math.isnan(s.value())
    got = [s.get_many([i])[0][0] for i in range(len(values))]
    assert got == [float(np.float32(x)) for x in values]
    s.put_many(np.arange(len(values)), np.array(values))
    assert [s.get_many([i])[0][0] for i in range(len(values))] == got


def test_float32_keys_out_of_range(make_backend):
    b = make_backend(key_type="float")
    v = b.get_state(ValueStateDescriptor("v", int))
    with pytest.raises(KeyTypeError, match="outside the range of the 32-bit 'float'"):
        b.set_current_key(1e300)
    with pytest.raises(KeyTypeError, match="32-bit 'float'"):
        v.put_many(np.array([1.0, 1e300]), [1, 2])
    b.set_current_key(math.inf)  # infinity itself is a key
    v.update(1)
    assert v.value() == 1
