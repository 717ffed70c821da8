"""The raw RocksDB bytes follow DESIGN.md's layout (Flink's RocksDB layout):

key   = [key-group prefix, 1 byte if maxP <= 128 else 2, big-endian][key][namespace]
        (+ [user key] for map state); when key and namespace are both variable-length, each is
        followed by its length, little-endian bytes (Flink's writeVariableIntBytes)
value = map: null-flag byte + value; list: elements joined by ',' (0x2C), each
        self-delimiting; others: the value's encoding.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from stateengine import (ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                         SortedMapStateDescriptor, ValueStateDescriptor, assign_key_group,
                         reducers)
from stateengine import _native
from stateengine.serializers import Codec


def enc(codec: Codec, value) -> bytes:
    return _native.encode_for_codec(int(codec), value)


def prefix(key, max_p: int = 128) -> bytes:
    kg = assign_key_group(key, max_p)
    return kg.to_bytes(1 if max_p <= 128 else 2, "big")


def length_suffix(n: int) -> bytes:
    """Flink's writeVariableIntBytes: least significant byte first, at least one byte."""
    out = bytearray()
    while True:
        out.append(n & 0xFF)
        n >>= 8
        if not n:
            return bytes(out)


def only_entry(backend, name):
    entries = backend._raw_scan(backend._cf_index[name])
    assert len(entries) == 1, entries
    return entries[0]


# ---- encodings the layout is made of ---------------------------------------------------------

def test_codec_bytes():
    assert enc(Codec.VOID, None) == b"\x00"
    assert enc(Codec.BIGINT, -2) == b"\xff" * 7 + b"\xfe"
    assert enc(Codec.INT, 258) == b"\x00\x00\x01\x02"
    assert enc(Codec.DOUBLE, 1.5) == struct.pack(">d", 1.5)
    assert enc(Codec.FLOAT, 1.5) == struct.pack(">f", 1.5)
    assert enc(Codec.STRING, "é,") == b"\x03\xc3\xa9,"       # varint length + UTF-8
    assert enc(Codec.BINARY, b"x" * 200) == b"\xc8\x01" + b"x" * 200
    assert enc(Codec.BOOLEAN, True) == b"\x01"
    assert enc(Codec.ANY, None) == b"\x00"                   # same byte as the default namespace
    assert enc(Codec.ANY, 5) == b"\x01" + struct.pack(">q", 5)
    assert enc(Codec.ANY, 0.5) == b"\x02" + struct.pack(">d", 0.5)
    assert enc(Codec.ANY, "ab") == b"\x03\x02ab"
    assert enc(Codec.ANY, b"ab") == b"\x04\x02ab"
    assert enc(Codec.ANY, False) == b"\x05" and enc(Codec.ANY, True) == b"\x06"
    # containers (format 2): tag, varint count, then ANY-encoded elements; never a pickle
    assert enc(Codec.ANY, (1, "a")) == b"\x09\x02" + enc(Codec.ANY, 1) + enc(Codec.ANY, "a")
    assert enc(Codec.ANY, [None]) == b"\x0a\x01\x00"
    assert enc(Codec.ANY, {"k": True}) == b"\x0b\x01" + enc(Codec.ANY, "k") + b"\x06"
    assert enc(Codec.ANY, ()) == b"\x09\x00" and enc(Codec.ANY, {}) == b"\x0b\x00"
    # ints outside int64: varint length + minimal big-endian two's complement
    assert enc(Codec.ANY, 2**63) == b"\x08\x09\x00\x80" + b"\x00" * 7
    assert enc(Codec.ANY, -2**63 - 1) == b"\x08\x09\xff\x7f" + b"\xff" * 7
    assert enc(Codec.ANY, 2**63 - 1) == b"\x01\x7f" + b"\xff" * 7  # int64 keeps tag 1
    assert enc(Codec.ORDERED_BIGINT, -1) == b"\x7f" + b"\xff" * 7  # sign bit flipped
    assert enc(Codec.ORDERED_BIGINT, 0) == b"\x80" + b"\x00" * 7
    assert enc(Codec.ORDERED_STRING, "ab") == b"ab"


# ---- keys ------------------------------------------------------------------------------------

def test_value_state_key_is_prefix_key_default_namespace(backend):
    backend.set_current_key("alice")
    v = backend.get_state(ValueStateDescriptor("v"))
    v.update(7)
    key, value = only_entry(backend, "v")
    assert key == prefix("alice") + b"\x05alice" + b"\x00"
    assert key[0] == assign_key_group("alice", 128) == backend.get_current_key_group()
    assert value == enc(Codec.ANY, 7)


def test_bigint_and_tuple_keys(make_backend):
    b = make_backend()
    b.set_current_key(-2)
    b.get_state(ValueStateDescriptor("v", value_type=int)).update(1)
    assert only_entry(b, "v") == (prefix(-2) + enc(Codec.BIGINT, -2) + b"\x00",
                                  enc(Codec.BIGINT, 1))
    t = make_backend()
    key = (np.int32(3), "x", b"\x01", True, 0.5)
    t.set_current_key(key)
    t.get_state(ValueStateDescriptor("v", value_type=str)).update("ok")
    assert only_entry(t, "v") == (
        prefix(key) + enc(Codec.INT, 3) + enc(Codec.STRING, "x") + enc(Codec.BINARY, b"\x01")
        + enc(Codec.BOOLEAN, True) + enc(Codec.DOUBLE, 0.5) + b"\x00",
        enc(Codec.STRING, "ok"))


def test_two_byte_prefix_above_128_key_groups(make_backend):
    b = make_backend(max_parallelism=32768)
    key = next(k for k in range(10_000) if assign_key_group(k, 32768) > 0x1FF)
    b.set_current_key(key)
    b.get_state(ValueStateDescriptor("v")).update(1)
    raw, _ = only_entry(b, "v")
    kg = assign_key_group(key, 32768)
    assert raw[:2] == bytes([kg >> 8, kg & 0xFF])
    assert raw == prefix(key, 32768) + enc(Codec.BIGINT, key) + b"\x00"
    assert b.get_current_key_group() == kg


@pytest.mark.parametrize("max_p,width", [(1, 1), (128, 1), (129, 2), (4096, 2)])
def test_prefix_width_follows_max_parallelism(make_backend, max_p, width):
    b = make_backend(max_parallelism=max_p)
    b.set_current_key(99)
    b.get_state(ValueStateDescriptor("v")).update(1)
    raw, _ = only_entry(b, "v")
    assert len(raw) == width + 8 + 1
    assert int.from_bytes(raw[:width], "big") == assign_key_group(99, max_p)


def test_fixed_length_key_with_namespace_has_no_length_suffixes(backend):
    backend.set_current_key(5)
    v = backend.get_state(ValueStateDescriptor("v", namespace_type=object))
    v.set_current_namespace("window-1")
    v.update(1)
    raw, _ = only_entry(backend, "v")
    assert raw == prefix(5) + enc(Codec.BIGINT, 5) + enc(Codec.ANY, "window-1")


def test_string_key_without_namespace_has_no_length_suffixes(backend):
    # the default namespace (VOID) is fixed-length, so the key cannot be ambiguous
    backend.set_current_key("k")
    backend.get_state(ListStateDescriptor("l")).add(1)
    raw, _ = only_entry(backend, "l")
    assert raw == prefix("k") + b"\x01k" + b"\x00"


@pytest.mark.parametrize("key", ["k", "x" * 300, "日本語" * 100], ids=["short", "long", "utf8"])
def test_variable_key_and_namespace_carry_flink_length_suffixes(backend, key):
    backend.set_current_key(key)
    v = backend.get_state(ValueStateDescriptor("v", namespace_type=object))
    m = backend.get_state(MapStateDescriptor("m", namespace_type=object))
    ns = "w" * 260
    key_bytes = enc(Codec.STRING, key)
    ns_bytes = enc(Codec.ANY, ns)
    v.set_current_namespace(ns)
    v.update(1)
    expected = (prefix(key) + key_bytes + length_suffix(len(key_bytes)) + ns_bytes
                + length_suffix(len(ns_bytes)))
    assert only_entry(backend, "v")[0] == expected
    assert len(length_suffix(len(ns_bytes))) == 2  # 263 bytes needs two suffix bytes
    m.set_current_namespace(ns)
    m.put("uk", "val")
    assert only_entry(backend, "m")[0] == expected + enc(Codec.ANY, "uk")
    # the default namespace is still one 0x00 byte, with its own length suffix
    v.set_current_namespace(None)
    v.update(2)
    keys = [k for k, _ in backend._raw_scan(backend._cf_index["v"])]
    assert prefix(key) + key_bytes + length_suffix(len(key_bytes)) + b"\x00\x01" in keys


def test_bytes_key_with_namespace_is_ambiguous_too(backend):
    backend.set_current_key(b"\x00\x01")
    v = backend.get_state(ValueStateDescriptor("v", namespace_type=int))
    v.set_current_namespace(3)
    v.update(1)
    ns = enc(Codec.ANY, 3)
    assert only_entry(backend, "v")[0] == (prefix(b"\x00\x01") + b"\x02\x00\x01" + b"\x03"
                                           + ns + bytes([len(ns)]))


def test_parsed_key_matches_the_layout(backend):
    backend.set_current_key("alice")
    v = backend.get_state(ValueStateDescriptor("v", namespace_type=object))
    v.set_current_namespace(("w", 1))
    v.update(0)
    raw, _ = only_entry(backend, "v")
    kg, key, ns, user_key = backend._parse_state_key(raw, int(Codec.ANY), False)
    assert (kg, key, ns, user_key) == (assign_key_group("alice", 128), "alice",
                                       enc(Codec.ANY, ("w", 1)), b"")


# ---- map values --------------------------------------------------------------------------------

def test_map_entry_key_and_null_flag_value(backend):
    backend.set_current_key(1)
    m = backend.get_state(MapStateDescriptor("m", user_key_type=str, value_type=int))
    m.put("a", 10)
    m.put("b", None)
    entries = dict(backend._raw_scan(backend._cf_index["m"]))
    base = prefix(1) + enc(Codec.BIGINT, 1) + b"\x00"
    assert entries == {base + enc(Codec.STRING, "a"): b"\x00" + enc(Codec.BIGINT, 10),
                       base + enc(Codec.STRING, "b"): b"\x01"}


def test_sorted_map_user_keys_sort_bytewise(backend):
    backend.set_current_key(1)
    m = backend.get_state(SortedMapStateDescriptor("sm", int))
    for k in (5, -5, 0):
        m.put(k, k)
    raw_keys = [k for k, _ in backend._raw_scan(backend._cf_index["sm"])]
    base = prefix(1) + enc(Codec.BIGINT, 1) + b"\x00"
    assert raw_keys == [base + enc(Codec.ORDERED_BIGINT, k) for k in (-5, 0, 5)]


# ---- list values -------------------------------------------------------------------------------

def test_list_value_is_comma_joined_self_delimiting_elements(backend):
    backend.set_current_key("k")
    lst = backend.get_state(ListStateDescriptor("l", value_type=str))
    elems = ["a,b", ",", "", "日,本"]
    lst.add(elems[0])
    lst.add_all(elems[1:3])
    lst.add(elems[3])
    raw_key, raw_value = only_entry(backend, "l")
    assert raw_key == prefix("k") + b"\x01k" + b"\x00"
    assert raw_value == b",".join(enc(Codec.STRING, e) for e in elems)
    assert lst.get() == elems
    lst.update(["x", "y"])  # a put of the pre-joined list
    assert only_entry(backend, "l")[1] == enc(Codec.STRING, "x") + b"," + enc(Codec.STRING, "y")


def test_list_of_any_values_layout(backend):
    backend.set_current_key("k")
    lst = backend.get_state(ListStateDescriptor("l"))
    elems = [44, ",", b",,", 0.5, (1, ",")]
    lst.add_all(elems)
    assert only_entry(backend, "l")[1] == b",".join(enc(Codec.ANY, e) for e in elems)
    # 44 is 0x2C: a delimiter byte inside an element must not split it
    assert b"\x00" * 7 + b"\x2c" in only_entry(backend, "l")[1]
    assert lst.get() == elems


def test_list_elements_written_as_raw_bytes_decode(backend):
    """A list assembled by hand in Flink's layout reads back element by element."""
    backend.set_current_key("k")
    lst = backend.get_state(ListStateDescriptor("l", value_type=int))
    lst.add(0)
    raw_key, _ = only_entry(backend, "l")
    backend._raw_put(backend._cf_index["l"], raw_key,
                     b",".join(enc(Codec.BIGINT, i) for i in (44, 2**40, -1)))
    assert lst.get() == [44, 2**40, -1]


def test_native_reducer_value_is_the_plain_encoding(backend):
    backend.set_current_key("k")
    r = backend.get_state(ReducingStateDescriptor("r", reducers.SUM, value_type=float))
    r.add(1)
    r.add(0.5)
    assert only_entry(backend, "r")[1] == enc(Codec.DOUBLE, 1.5)
