"""Operator (non-keyed) list state: even-split and union redistribution, as in Flink."""

from __future__ import annotations

import os
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import struct

from stateengine import (CorruptionError, KeyedStateBackend, OperatorStateBackend,
                         PickleNotAllowedError, SerializationError, StateRegistrationError,
                         _native)
from stateengine.operator_state import even_split


@pytest.mark.parametrize("parts", range(1, 8))
@pytest.mark.parametrize("n", [0, 1, 2, 5, 6, 7, 13, 20])
def test_even_split_sizes(n, parts):
    elements = list(range(n))
    split = even_split(elements, parts)
    assert len(split) == parts
    sizes = [len(p) for p in split]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True), "the larger parts come first"
    assert [e for p in split for e in p] == elements, "parts are contiguous and in order"
    assert sum(sizes) == n


def test_modes_and_conflicts():
    op = OperatorStateBackend()
    offsets = op.get_list_state("offsets")
    assert offsets.mode == "split"
    assert op.get_list_state("offsets", "split") is offsets
    with pytest.raises(StateRegistrationError, match="mode 'split'"):
        op.get_list_state("offsets", "union")
    with pytest.raises(StateRegistrationError):
        op.get_list_state("x", "broadcast")
    assert op.get_list_state("seen", "union").mode == "union"
    assert sorted(op.state_names) == ["offsets", "seen"]


def test_list_operations_and_none():
    op = OperatorStateBackend()
    s = op.get_list_state("l")
    s.add(1)
    s.add_all([2, 3])
    assert s.get() == [1, 2, 3]
    s.get().append(99)  # get returns a copy
    assert s.get() == [1, 2, 3]
    with pytest.raises(ValueError):
        s.add(None)
    with pytest.raises(ValueError, match="nothing added"):
        s.add_all([4, None])
    assert s.get() == [1, 2, 3]
    with pytest.raises(ValueError, match="not updated"):
        s.update([None])
    s.update(["a"])
    assert s.get() == ["a"]
    s.clear()
    assert s.get() == []


def _instances(lists_per_instance, modes):
    out = []
    p = len(lists_per_instance)
    for i, lists in enumerate(lists_per_instance):
        op = OperatorStateBackend(i, p)
        for name, values in lists.items():
            op.get_list_state(name, modes[name]).add_all(values)
        out.append(op.snapshot_bytes())
    return out


@settings(max_examples=60, deadline=None)
@given(old=st.lists(st.fixed_dictionaries({}, optional={
           "offsets": st.lists(st.integers(), max_size=6),
           "seen": st.lists(st.text(max_size=3), max_size=4)}), min_size=1, max_size=4),
       new_p=st.integers(1, 6), shuffle=st.randoms())
def test_redistribution_property(old, new_p, shuffle):
    modes = {"offsets": "split", "seen": "union"}
    snaps = _instances(old, modes)
    shuffle.shuffle(snaps)  # the order of the snapshots does not matter, the old index does
    restored = [OperatorStateBackend.restore(snaps, i, new_p) for i in range(new_p)]
    for name, mode in modes.items():
        everything = [e for lists in old for e in lists.get(name, [])]
        present = any(name in lists for lists in old)
        for i, op in enumerate(restored):
            assert op.operator_index == i and op.parallelism == new_p
            if not present:
                assert name not in op.state_names
                continue
            got = op.get_list_state(name, mode).get()
            if mode == "union":
                assert got == everything
            else:
                assert got == even_split(everything, new_p)[i]
        if present and mode == "split":
            assert [e for op in restored for e in op.get_list_state(name).get()] == everything


def test_conflicting_modes_across_instances_are_corruption():
    a = OperatorStateBackend(0, 2)
    a.get_list_state("x", "split").add(1)
    b = OperatorStateBackend(1, 2)
    b.get_list_state("x", "union").add(2)
    with pytest.raises(CorruptionError, match="two modes"):
        OperatorStateBackend.restore([a.snapshot_bytes(), b.snapshot_bytes()], 0, 1)


def test_unreadable_snapshots_are_corruption():
    with pytest.raises(CorruptionError, match="file X: unreadable"):
        OperatorStateBackend.restore([b"not a stateengine file"], 0, 1, source="file X")
    with pytest.raises(CorruptionError, match="format 99"):
        OperatorStateBackend.restore([pickle.dumps((99, 0, 1, {}))], 0, 1, allow_pickle=True)
    good = _sample().snapshot_bytes()
    with pytest.raises(CorruptionError, match="format 4 is not supported"):
        OperatorStateBackend.restore([good[:4] + b"\x00\x04" + good[6:]], 0, 1)


def _sample() -> OperatorStateBackend:
    op = OperatorStateBackend(1, 3)
    op.get_list_state("offsets").add_all([7, (2, "p"), {"topic": [1, 2**70]}, b"\x00"])
    op.get_list_state("seen", "union").add("é")
    op.get_list_state("empty")
    return op


def test_file_format_is_typed_not_pickled():
    """b"SEOS" | u16 format 3 | u32 index | u32 parallelism | u32 n states, then per state:
    u16 name length | name | u8 mode | u32 body length | the elements as one ANY list; then
    the CRC-32C of everything before it."""
    data = _sample().snapshot_bytes()
    assert data[:18] == b"SEOS" + struct.pack(">HIII", 3, 1, 3, 3)
    body = _native.encode_for_codec(1, [7, (2, "p"), {"topic": [1, 2**70]}, b"\x00"])
    assert data[18:].startswith(b"\x00\x07offsets\x00" + struct.pack(">I", len(body)) + body)
    assert data[-4:] == struct.pack(">I", _native.crc32c(data[:-4]))
    restored = OperatorStateBackend.restore([data], 0, 1)
    assert restored.get_list_state("offsets").get() == [7, (2, "p"), {"topic": [1, 2**70]},
                                                        b"\x00"]
    assert restored.get_list_state("seen", "union").get() == ["é"]
    assert restored.get_list_state("empty").get() == []


def _format_2(data: bytes) -> bytes:
    """A format-3 file as format 2 wrote it: the same bytes, version 2, no CRC."""
    return data[:4] + struct.pack(">H", 2) + data[6:-4]


def _resealed(data: bytes) -> bytes:
    """data (format 3 without its CRC) with a CRC that matches: a writer's own bytes."""
    return data + struct.pack(">I", _native.crc32c(data))


def test_every_bit_flip_is_corruption():
    """The file's own CRC-32C catches what still decodes: a flipped bit of an element is a
    different element to the decoder, and a handle resealed over the damaged bytes (or damage
    before the handle's CRC was taken) would not notice it."""
    data = _sample().snapshot_bytes()
    for bit in range(len(data) * 8):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptionError, match="file Z: "):
            OperatorStateBackend.restore([bytes(damaged)], 0, 1, source="file Z")


def test_format_2_files_without_a_crc_still_restore():
    restored = OperatorStateBackend.restore([_format_2(_sample().snapshot_bytes())], 0, 1)
    assert restored.get_list_state("offsets").get() == [7, (2, "p"), {"topic": [1, 2**70]},
                                                        b"\x00"]
    assert restored.get_list_state("seen", "union").get() == ["é"]


@pytest.mark.parametrize("fmt", [3, 2])
def test_every_truncation_and_hostile_length_is_corruption(fmt):
    """Also behind a matching CRC (a writer's bug) or in format 2: the structure is checked
    against the bytes present before anything is allocated."""
    data = _sample().snapshot_bytes()
    seal = _resealed if fmt == 3 else (lambda d: _format_2(d + b"\x00" * 4))
    for cut in range(len(data)):
        with pytest.raises(CorruptionError):
            OperatorStateBackend.restore([data[:cut]], 0, 1)
    inner = data[:-4]
    with pytest.raises(CorruptionError, match="follow the last state"):
        OperatorStateBackend.restore([seal(inner + b"\x00")], 0, 1)
    huge_count = inner[:14] + struct.pack(">I", 2**32 - 1) + inner[18:]
    with pytest.raises(CorruptionError, match="cannot fit"):
        OperatorStateBackend.restore([seal(huge_count)], 0, 1)
    name_end = 18 + 2 + len("offsets")
    huge_body = inner[:name_end + 1] + struct.pack(">I", 2**31) + inner[name_end + 5:]
    with pytest.raises(CorruptionError, match="past the end"):
        OperatorStateBackend.restore([seal(huge_body)], 0, 1)


def test_elements_the_any_codec_cannot_store_are_refused_when_added():
    state = OperatorStateBackend().get_list_state("s")
    with pytest.raises(SerializationError, match="operator state 's'.*default 'any'"):
        state.add(object())
    with pytest.raises(SerializationError):
        state.add_all([1, {2, 3}])
    with pytest.raises(SerializationError):
        state.update([lambda: 1])
    assert state.get() == []


class _Marker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_format_1_pickles_restore_only_with_allow_pickle(tmp_path):
    marker = tmp_path / "ran"
    legacy = pickle.dumps((1, 0, 1, {"offsets": ("split", [1, _Marker(str(marker))])}), protocol=5)
    with pytest.raises(PickleNotAllowedError, match="file Y: operator state written by "
                                                   "stateengine before format 2.*allow_pickle"):
        OperatorStateBackend.restore([legacy], 0, 1, source="file Y")
    assert not marker.exists()
    plain = pickle.dumps((1, 0, 1, {"offsets": ("split", [1, (2, "x")])}), protocol=5)
    restored = OperatorStateBackend.restore([plain], 0, 1, allow_pickle=True)
    assert restored.get_list_state("offsets").get() == [1, (2, "x")]
    assert OperatorStateBackend.restore([restored.snapshot_bytes()], 0, 1) \
        .get_list_state("offsets").get() == [1, (2, "x")]


def test_operator_state_in_backend_snapshots(tmp_path):
    backends = []
    handles = {"full": [], "incremental": []}
    for i in range(3):
        b = KeyedStateBackend(tmp_path / f"b{i}", key_type=int)
        b.operator_state.operator_index, b.operator_state.parallelism = i, 3
        b.operator_state.get_list_state("offsets").add_all([f"{i}.{j}" for j in range(i + 1)])
        b.operator_state.get_list_state("seen", "union").add(i)
        handles["full"].append(b.snapshot(tmp_path / "cp", f"s{i}").result())
        handles["incremental"].append(b.checkpoint(1, tmp_path / "cp").result())
        backends.append(b)
    assert handles["full"][0].operator_state.file.path == "s0.opstate"
    everything = ["0.0", "1.0", "1.1", "2.0", "2.1", "2.2"]
    for kind, hs in handles.items():
        for new_p in (1, 2, 4):
            for i in range(new_p):
                r = KeyedStateBackend.restore(tmp_path / f"r-{kind}-{new_p}-{i}", hs,
                                              operator_index=i, parallelism=new_p)
                assert r.operator_state.get_list_state("offsets").get() == \
                    even_split(everything, new_p)[i]
                assert r.operator_state.get_list_state("seen", "union").get() == [0, 1, 2]
                r.dispose()
    for b in backends:
        b.dispose()


def test_no_operator_state_writes_no_file(tmp_path):
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    full = b.snapshot(tmp_path / "cp", "s").result()
    inc = b.checkpoint(1, tmp_path / "cp").result()
    assert full.operator_state is None and inc.operator_state is None
    assert not os.path.exists(tmp_path / "cp" / "s.opstate")
    r = KeyedStateBackend.restore(tmp_path / "r", [full])
    assert r.operator_state.is_empty()
    r.dispose()
    b.dispose()
