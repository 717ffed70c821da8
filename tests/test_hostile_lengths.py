"""Bounded memory on hostile input: a length or count read from a checkpoint never makes a
reader allocate more than the bytes that are there.

The damage sits behind valid checksums (the file's size and CRC-32C in its handle are
recomputed, as if a buggy writer had produced it), so only the reader's own bounds stand
between it and the allocation. Restores run in a child process under RLIMIT_AS 2 GiB: an
allocation of 1 GiB per key group would abort it with std::bad_alloc (two groups: 2 GiB).
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

from stateengine import CorruptionError, KeyedStateBackend, ValueStateDescriptor, _native
from stateengine.checkpoint import documents
from stateengine.checkpoint.handles import FileRef, read_handle, write_handle
from stateengine.checkpoint.storage import CheckpointStorage
from stateengine.cli import main as cli
from tests.campaigns.mutations import rewrite

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1 << 30

CHILD = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from stateengine import CorruptionError, KeyedStateBackend, load_handle
    try:
        KeyedStateBackend.restore(sys.argv[2], [load_handle(sys.argv[1], "snap.handle.json")])
    except CorruptionError as e:
        print("CorruptionError:", e)
        print("peak RSS KiB:", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        sys.exit(0)
    print("restored")
    sys.exit(3)
""")


def _snapshot(tmp_path, compress):
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    v = b.get_state(ValueStateDescriptor("v", bytes))
    for k in range(2000):
        b.set_current_key(k)
        v.update(os.urandom(8))
    root = tmp_path / "cp"
    handle = b.snapshot(root, "snap", compress=compress).result()
    b.dispose()
    return str(root), handle


def _reseal_file(root: str, handle) -> None:
    """Recomputes the data file's size and CRC-32C in the handle and publishes it again."""
    path = os.path.join(root, handle.file.path)
    crc, size = _native.file_crc32c(path)
    fixed = dataclasses.replace(handle, file=FileRef(handle.file.path, size, crc))
    write_handle(CheckpointStorage(root), "snap.handle.json", fixed, None)


def _restore_in_child(tmp_path, root):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [PROJECT, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", CHILD, root, str(tmp_path / "restored")],
                          capture_output=True, text=True, env=env, timeout=300)


def _frame(raw: bytes) -> bytes:
    """A snappy framed stream of uncompressed chunks (each with its masked CRC-32C)."""
    out = bytearray(b"\xff\x06\x00\x00sNaPpY")
    for i in range(0, len(raw), 1 << 16):
        piece = raw[i:i + (1 << 16)]
        crc = _native.crc32c(piece)
        masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        out += bytes([0x01]) + (len(piece) + 4).to_bytes(3, "little") + \
            masked.to_bytes(4, "little") + piece
    return bytes(out)


# The snapshot reader (csrc/snapshot_reader.cc) allocates only for bytes present, so a 1 GiB
# length field is refused before any large buffer exists (see also tests/test_hostile_input.py).
@pytest.mark.parametrize("compress", [False, True], ids=["raw", "snappy"])
def test_a_one_gib_entry_length_in_two_key_groups_is_corruption_under_2_gib(tmp_path, compress):
    import snappy

    root, handle = _snapshot(tmp_path, compress=compress)
    path = os.path.join(root, handle.file.path)
    data = open(path, "rb").read()
    kgs = sorted(handle.offsets)
    bounds = [handle.offsets[kg] for kg in kgs] + [len(data)]
    sections = {kg: data[bounds[i]:bounds[i + 1]] for i, kg in enumerate(kgs)}
    for kg in kgs[-2:]:  # sections: u16 state id, i32 key length, key, ...
        raw = bytearray(snappy.StreamDecompressor().decompress(sections[kg]) if compress
                        else sections[kg])
        raw[2:6] = struct.pack(">i", GIB)
        sections[kg] = _frame(bytes(raw)) if compress else bytes(raw)
    body, offsets = bytearray(data[:bounds[0]]), {}
    for kg in kgs:
        offsets[kg] = len(body)
        body += sections[kg]
    rewrite(path, bytes(body))
    _reseal_file(root, dataclasses.replace(handle, offsets=offsets))
    result = _restore_in_child(tmp_path, root)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-2000:])
    assert "CorruptionError" in result.stdout and "snap" in result.stdout
    peak = int(result.stdout.rsplit("peak RSS KiB:", 1)[1])
    assert peak < 400 << 10, f"the reader touched {peak >> 10} MiB for a {len(body)}-byte file"


def test_a_hostile_meta_block_length_is_corruption(tmp_path):
    root, handle = _snapshot(tmp_path, compress=True)
    path = os.path.join(root, handle.file.path)
    data = bytearray(open(path, "rb").read())
    data[6:10] = struct.pack(">I", 0xFFFFFFF0)  # the meta block's own length field
    rewrite(path, bytes(data))
    _reseal_file(root, handle)
    result = _restore_in_child(tmp_path, root)
    assert result.returncode == 0 and "meta block" in result.stdout, \
        (result.returncode, result.stdout, result.stderr[-2000:])
    assert cli(["meta", path]) == 1


def test_hostile_sizes_in_documents_are_refused_without_reading_them(tmp_path, monkeypatch):
    root, handle = _snapshot(tmp_path, compress=True)
    storage = CheckpointStorage(root)
    doc_path = os.path.join(root, "snap.handle.json")
    original = open(doc_path, "rb").read()
    for field, value in (("meta_length", 1 << 40), ("size", 1 << 40)):
        doc = json.loads(original)
        (doc["file"] if field == "size" else doc)[field] = value
        rewrite(doc_path, documents.dumps(documents.seal(doc, None)))
        with pytest.raises(CorruptionError, match="snap"):
            KeyedStateBackend.restore(tmp_path / f"r-{field}", [read_handle(storage, "snap.handle.json", None)[0]])
    # a document larger than any handle may be is refused before it is parsed
    monkeypatch.setattr(documents, "MAX_DOCUMENT_BYTES", 1 << 20)
    with open(doc_path, "wb") as f:
        f.write(b"{" + b" " * (2 << 20) + b"}")
    with pytest.raises(CorruptionError, match="larger than"):
        read_handle(storage, "snap.handle.json", None)
