"""The default ("any") serializer's containers: tuples, lists, dicts and big ints, stored
natively (tags 8-11, csrc/codec.h) and never pickled.

- Every value of the supported types round-trips with its exact types, and the C++
  ElementLength agrees with the Python decoder on where it ends (list states and namespaces
  rely on it).
- The encoding is canonical: equal values of one type have one encoding, so tuples work as
  namespaces (windows), timer namespaces and map user keys.
- Hostile bytes (any mutation, huge counts, deep nesting) are a CorruptionError, never a
  crash, a hang or an allocation larger than the input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateengine import (CorruptionError, ListStateDescriptor, MapStateDescriptor,
                         PickleNotAllowedError, SerializationError, ValueStateDescriptor, _native)

ANY = 1


def enc(value) -> bytes:
    return _native.encode_for_codec(ANY, value)


def dec(data: bytes):
    return _native.decode_for_codec(ANY, data)


def typed(value):
    """Comparable form that tells tuple from list, int from float and bool from int."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    st.text(max_size=8), st.binary(max_size=8))
hashables = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.tuples(inner),
                         max_leaves=6)
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner)
                   | st.dictionaries(hashables, inner, max_size=3)),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(values)
def test_values_round_trip_with_their_types(value):
    data = enc(value)
    assert typed(dec(data)) == typed(value)
    assert _native.element_length(ANY, data + b"trailing") == len(data)


@settings(max_examples=150, deadline=None)
@given(values, st.data())
def test_damaged_bytes_are_corruption_or_another_valid_value(value, data):
    raw = bytearray(enc(value))
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if op == "flip" and raw:
            raw[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del raw[pos:]
        else:
            raw[pos:pos] = bytes([data.draw(st.integers(0, 255))])
    raw = bytes(raw)
    try:
        decoded = dec(raw)
    except CorruptionError:
        return
    except PickleNotAllowedError:  # a flip into tag 7: refused, never unpickled
        assert raw[0] == 7
        return
    assert _native.element_length(ANY, raw) == len(raw)  # C++ agrees it is one element
    assert dec(enc(decoded)) is not None or decoded is None


def test_encoding_is_canonical_for_keys():
    assert enc((1, "a")) == enc((np.int64(1), np.str_("a")))
    assert enc(np.uint64(2**64 - 1)) == enc(2**64 - 1) and enc(2**70) != enc(2**70 + 1)
    assert enc([1]) != enc((1,)) and enc((1,)) != enc(((1,),))  # types stay apart
    for v in (2**63, -2**63 - 1, 2**64, -2**64, 2**200, -2**200):
        raw = enc(v)
        assert raw[0] == 8 and raw[1] == (v.bit_length() + 8) // 8 and dec(raw) == v


@pytest.mark.parametrize("raw,why", [
    (b"\x09\xff\xff\xff\xff\x0f", "a tuple claiming 4G elements in 6 bytes"),
    (b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", "a list count of 2^63"),
    (b"\x0b\x02\x00\x00", "a dict claiming 2 pairs with bytes for 1"),
    (b"\x08\x40" + b"\x00" * 10, "a big int longer than the bytes left"),
    (b"\x08\x01\x05", "a big int that fits int64 (not canonical)"),
    (b"\x08\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01", "a big int with a redundant byte"),
    (b"\x09\x01\x07\x01x", "a pickle inside a tuple"),
    (b"\x0b\x01\x0a\x00\x00", "an unhashable dict key"),
    (b"\x0b\x02\x01" + bytes(8) + b"\x00\x01" + bytes(8) + b"\x00", "a repeated dict key"),
    (b"\x0a\x01" * 65 + b"\x00", "lists nested 65 deep"),
    (b"\x0c", "an unknown tag"),
])
def test_hostile_encodings_are_corruption(raw, why):
    with pytest.raises(CorruptionError):
        dec(raw)
    structural = "hashable" not in why and "repeated" not in why and "fits" not in why \
        and "redundant" not in why
    if structural:  # C++ refuses the same bytes when it sizes an element
        assert _native.element_length(ANY, raw) == -1, why


def test_nesting_limit_is_the_same_on_write_and_read():
    deep = None
    for _ in range(_native.MAX_NESTING):
        deep = [deep]
    assert dec(enc(deep)) == deep
    with pytest.raises(SerializationError, match="more than 64 deep"):
        enc([deep])
    loop: list = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="contains itself"):
        enc(loop)


def test_containers_through_every_state_kind(make_backend):
    backend = make_backend()
    backend.set_current_key("k")
    events = backend.get_state(ListStateDescriptor("events"))
    events.add((1, "a"))
    events.add_all([{"x": [1, 2]}, [None, 2**80]])  # one merge of pre-joined elements
    events.add(())
    assert typed(events.get()) == typed([(1, "a"), {"x": [1, 2]}, [None, 2**80], ()])
    pages = backend.get_state(MapStateDescriptor("pages"))
    pages.put(("2024-01-01", 7), {"views": 3})           # a composite user key
    pages.put(2**100, [1])
    assert pages.get(("2024-01-01", np.int64(7))) == {"views": 3}
    assert pages.contains(2**100) and not pages.contains((2**100,))
    assert sorted(map(typed, pages.entries()), key=repr) == sorted(
        map(typed, [(("2024-01-01", 7), {"views": 3}), (2**100, [1])]), key=repr)


def test_tuple_namespaces_and_timer_namespaces(make_backend):
    backend = make_backend(key_type=str)
    backend.set_current_key("k")
    window = backend.get_state(ValueStateDescriptor("w", namespace_type=object))
    for ns, v in (((0, 10), "first"), ((10, 20), "second")):
        window.set_current_namespace(ns)
        window.update(v)
    window.set_current_namespace((0, 10))
    assert window.value() == "first"
    assert list(backend.get_keys("w", (10, 20))) == ["k"]
    timers = backend.timer_service
    timers.register_event_time_timer(5, (0, 10))
    timers.register_event_time_timer(5, (0, 10))  # the same timer once
    timers.register_event_time_timer(6, ("w", [1]))
    timers.delete_event_time_timer(6, ("w", [1]))
    fired = [(t.timestamp, t.namespace) for t in timers.advance_watermark(10)]
    assert fired == [(5, (0, 10))]
