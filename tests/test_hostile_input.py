"""Hostile lengths in checkpoint bytes never make the native reader allocate beyond the file.

A length field is only a claim: the snapshot reader allocates for bytes as they arrive, never
for the number a field states, so a 1 GiB length inside a 30 KB snapshot is a CorruptionError
naming the file, raised within the memory of a normal restore. The snapshots here carry a
valid file CRC in their handle, so the size and checksum checks pass and the reader is what
must defend itself. Restores run in a child process under RLIMIT_AS of 2 GiB: without the
bound the reader asks for 1 GiB per key group (two at once, on two threads), which aborts the
process with std::bad_alloc instead of raising.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import textwrap

import pytest
import snappy

from stateengine import (CorruptionError, KeyedStateBackend, ListStateDescriptor,
                         MapStateDescriptor, ValueStateDescriptor, _native)

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30
STREAM_HEADER = b"\xff\x06\x00\x00sNaPpY"


def masked_crc(data: bytes) -> int:
    crc = _native.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def write_snapshot(root, compress: bool):
    """A ~30 KB snapshot of three states over 128 key groups; returns (handle, descriptors)."""
    descs = [ValueStateDescriptor("v", str), ListStateDescriptor("l", int),
             MapStateDescriptor("m", str, int)]
    b = KeyedStateBackend(root / "src", key_type=int)
    v, lst, m = (b.get_state(d) for d in descs)
    for k in range(300):
        b.set_current_key(k)
        v.update(f"value {k} " * 3)
        lst.add_all([k, k + 1])
        m.put(f"u{k}", k)
    handle = b.snapshot(root / "snaps", f"full-{compress}", compress=compress).result()
    b.close()
    return handle


def with_file(handle, data: bytes):
    """Writes data over the handle's file and returns a handle whose size and CRC match it."""
    path = os.path.join(handle.root, handle.file.path)
    with open(path, "wb") as f:
        f.write(data)
    ref = dataclasses.replace(handle.file, size=len(data), crc32c=_native.crc32c(data))
    return dataclasses.replace(handle, file=ref)


def hostile_raw(handle, groups: list[int], length: int = GiB):
    """An uncompressed snapshot whose first key length in each of groups claims `length`."""
    path = os.path.join(handle.root, handle.file.path)
    data = bytearray(open(path, "rb").read())
    for kg in groups:
        off = handle.offsets[kg] + 2  # after the u16 state id
        data[off:off + 4] = struct.pack(">I", length)
    return with_file(handle, bytes(data))


def hostile_framed(handle, groups: list[int], length: int = GiB):
    """A snappy snapshot whose first chunk in each of groups is replaced, at the same size, by
    an uncompressed chunk (valid CRC) whose first key length claims `length`."""
    path = os.path.join(handle.root, handle.file.path)
    data = bytearray(open(path, "rb").read())
    for kg in groups:
        off = handle.offsets[kg]
        assert data[off:off + 10] == STREAM_HEADER
        head = off + 10
        chunk_len = int.from_bytes(data[head + 1:head + 4], "little")
        body = bytes(data[head + 8:head + 4 + chunk_len])
        payload = snappy.uncompress(body) if data[head] == 0 else body
        forged = payload[:2] + struct.pack(">I", length)  # the same state id, a hostile length
        forged += b"\x00" * (chunk_len - 4 - len(forged))
        assert len(forged) <= 65536
        data[head:head + 4 + chunk_len] = (b"\x01" + chunk_len.to_bytes(3, "little") +
                                           struct.pack("<I", masked_crc(forged)) + forged)
    return with_file(handle, bytes(data))


CHILD = textwrap.dedent("""
    import json, resource, sys
    project, limit, handle_json, target = sys.argv[1:5]
    sys.path.insert(0, project)
    resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
    from stateengine import CorruptionError, KeyedStateBackend
    from stateengine.checkpoint.handles import handle_from_dict
    handle = handle_from_dict(json.loads(handle_json))
    try:
        b = KeyedStateBackend.restore(target, [handle])
        outcome = {"restored": b.num_state_entries()}
        b.close()
    except CorruptionError as e:
        outcome = {"corruption": str(e)}
    except BaseException as e:  # anything else is reported, not hidden
        outcome = {"other": f"{type(e).__name__}: {e}"}
    outcome["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(outcome), flush=True)
""")


def restore_in_child(handle, target) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, PROJECT, str(2 * GiB),
                           json.dumps(handle.to_dict()), str(target)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        f"the restoring process died (exit {proc.returncode}) instead of raising:\n"
        f"{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("compress", [True, False], ids=["snappy", "raw"])
def test_gigabyte_length_in_a_small_snapshot_is_corruption_under_2_gib(tmp_path, compress):
    handle = write_snapshot(tmp_path, compress)
    assert handle.file.size < 64 << 10
    normal = restore_in_child(handle, tmp_path / "normal")
    assert "restored" in normal, normal
    groups = sorted(handle.offsets)
    first, last = groups[0], groups[-1]  # restored by the two threads, one each
    forge = hostile_framed if compress else hostile_raw
    hostile = forge(handle, [first, last])
    got = restore_in_child(hostile, tmp_path / "hostile")
    assert "corruption" in got, got
    message = got["corruption"]
    assert handle.file.path in message, "the error names the file"
    assert f"length {GiB}" in message and "exceeds what is left of the file" in message
    # The reader never held more than the bytes it had: no more memory than a normal restore.
    assert got["maxrss_kib"] <= normal["maxrss_kib"] + 32 * 1024, (got, normal)
    assert not os.path.exists(tmp_path / "hostile"), "a failed restore leaves nothing behind"


@pytest.mark.parametrize("length", [70_000, 1 << 24, (1 << 32) - 1])
def test_any_length_beyond_the_file_is_reported_before_reading(tmp_path, length):
    handle = write_snapshot(tmp_path, compress=False)
    hostile = hostile_raw(handle, [sorted(handle.offsets)[3]], length)
    with pytest.raises(CorruptionError, match="exceeds what is left of the file|implausible"):
        KeyedStateBackend.restore(tmp_path / "r", [hostile])


def _forge_chunk(handle, kg: int, chunk: bytes):
    """Replaces the first chunk of kg's section with `chunk` (the file grows or shrinks; the
    offsets of the groups behind it move with it)."""
    path = os.path.join(handle.root, handle.file.path)
    data = open(path, "rb").read()
    head = handle.offsets[kg] + 10
    old = 4 + int.from_bytes(data[head + 1:head + 4], "little")
    shift = len(chunk) - old
    offsets = {g: (o + shift if o > handle.offsets[kg] else o) for g, o in handle.offsets.items()}
    forged = with_file(handle, data[:head] + chunk + data[head + old:])
    return dataclasses.replace(forged, offsets=offsets)


@pytest.mark.parametrize("chunk, why", [
    (b"\x00\xff\xff\xff" + b"\x00" * 12, "snappy chunk of 16777215 bytes but only"),  # 16 MiB
    (b"\xfe\xff\xff\xff" + b"\x00" * 12, "snappy chunk of 16777215 bytes but only"),  # padding
    (b"\x01\x05\x00\x01" + b"\x00" * 16, "snappy chunk of 65541 bytes but only"),
    # a compressed chunk whose varint header claims 4 GiB of output
    (b"\x00\x0a\x00\x00" + b"\x00" * 4 + b"\xff\xff\xff\xff\x0f" + b"\x00", "bad snappy chunk length"),
], ids=["chunk-16MiB", "padding-16MiB", "uncompressed-64KiB+5", "uncompressed-length-4GiB"])
def test_snappy_chunk_lengths_are_checked_against_the_file(tmp_path, chunk, why):
    handle = write_snapshot(tmp_path, compress=True)
    hostile = _forge_chunk(handle, sorted(handle.offsets)[5], chunk)
    with pytest.raises(CorruptionError, match=why):
        KeyedStateBackend.restore(tmp_path / "r", [hostile])


def test_lengths_inside_restored_values_are_checked_before_decoding(tmp_path):
    """A value that restored intact but whose own varint length lies is a CorruptionError when
    read, by the scalar and the batch path alike, never an allocation of the stated size."""
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    s = b.get_state(ValueStateDescriptor("s", str))
    lst = b.get_state(ListStateDescriptor("l", str))
    b.set_current_key(1)
    s.update("x")
    lst.add_all(["a", "b"])
    key = b._raw_scan(s.column_family)[0][0]
    b._raw_put(s.column_family, key, b"\xff\xff\xff\xff\x0fxyz")  # varint: 4 GiB
    lkey = b._raw_scan(lst.column_family)[0][0]
    b._raw_put(lst.column_family, lkey, b"\x01a,\xff\xff\xff\x7fb")  # second element: 256 MiB
    with pytest.raises(CorruptionError):
        s.value()
    with pytest.raises(CorruptionError):
        s.get_many([1])
    with pytest.raises(CorruptionError):
        lst.get()
    with pytest.raises(CorruptionError):
        lst.get_many([1])
    b.close()
