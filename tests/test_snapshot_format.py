"""The full snapshot file, parsed in Python independently of the C++ reader.

Layout (DESIGN.md, stateengine/checkpoint/meta.py): an uncompressed meta block, then one
section per non-empty key group starting at the offset the handle records. A section is a
standard snappy *framed* stream (or raw bytes when compress=False) holding ``u16 state id``,
then pairs ``i32 len | key | i32 len | value`` (big-endian); the top bit of ``key[0]`` marks the
last pair of a state's run, which is followed by ``u16 next state id`` or ``0xFFFF``.

The sections are decoded with python-snappy's framing decoder, every framing chunk is checked
by hand (stream identifier, chunk types, sizes, masked CRC-32C computed here in Python), and the
decoded entries must be exactly the backend's RocksDB contents, key group by key group.
"""

from __future__ import annotations

import os
import random
import json
import struct

import pytest
import snappy

from tests.ckpt_model import Harness, descriptors, new_backend, random_ops
from stateengine import (KeyGroupRange, KeyedStateBackend, MapStateDescriptor, ValueStateDescriptor,
                         _native)

END_OF_KEY_GROUP = 0xFFFF
META_FOLLOWS = 0x80
KIND_NAMES = {0: "value", 1: "list", 2: "map", 3: "sorted_map", 4: "reducing", 5: "aggregating",
              6: "timers"}


# ---- an independent CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) ------------------

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_crc32c_reference_value():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C


# ---- parsing -----------------------------------------------------------------------------

def parse_meta(data: bytes) -> tuple[dict, int]:
    magic, version, length = struct.unpack_from(">4sHI", data, 0)
    assert magic == b"SEKS" and version == 3
    pos = 10
    max_p, is_tuple, ncols = struct.unpack_from(">iBB", data, pos)
    pos += 6
    key_codecs = list(data[pos:pos + ncols])
    pos += ncols
    compression, nstates = struct.unpack_from(">BH", data, pos)
    pos += 3
    states = []
    for expected_id in range(nstates):
        sid, nlen = struct.unpack_from(">HH", data, pos)
        pos += 4
        assert sid == expected_id
        name = data[pos:pos + nlen].decode("utf-8")
        pos += nlen
        kind, vc, nc, uc, merge, op = struct.unpack_from(">6B", data, pos)
        pos += 6
        state = {"name": name, "kind": KIND_NAMES[kind], "value_codec": vc,
                 "namespace_codec": nc, "user_key_codec": uc, "merge": merge, "native_op": op}
        (alen,) = struct.unpack_from(">I", data, pos)  # format 3: per-state attributes (JSON)
        pos += 4
        if alen:
            state.update(json.loads(data[pos:pos + alen]))
        pos += alen
        states.append(state)
    assert pos == 10 + length, "meta block length does not match its contents"
    return {"max_parallelism": max_p, "key_is_tuple": bool(is_tuple), "key_codecs": key_codecs,
            "compression": compression, "states": states}, pos


def check_framing(section: bytes, stats: dict) -> None:
    """Walks the framing chunks by hand: identifier first, data chunks of at most 64 KiB of
    input, each carrying the masked CRC-32C of its uncompressed bytes."""
    assert section[:10] == b"\xff\x06\x00\x00sNaPpY", "section does not start a snappy stream"
    pos = 10
    while pos < len(section):
        ctype = section[pos]
        clen = int.from_bytes(section[pos + 1:pos + 4], "little")
        body = section[pos + 4:pos + 4 + clen]
        assert len(body) == clen, "chunk runs past the section"
        pos += 4 + clen
        assert ctype in (0x00, 0x01), f"unexpected chunk type {ctype:#x}"
        crc = int.from_bytes(body[:4], "little")
        payload = snappy.uncompress(body[4:]) if ctype == 0 else body[4:]
        assert 0 < len(payload) <= 65536
        assert masked(crc32c(payload)) == crc, "chunk checksum is wrong"
        stats["compressed" if ctype == 0 else "uncompressed"] += 1
    assert pos == len(section)


def parse_key_group(raw: bytes, kg: int, prefix_bytes: int) -> list[tuple[int, bytes, bytes]]:
    """(state id, key, value) triples of one key group's decoded section."""
    out = []
    pos = 0

    def take(n):
        nonlocal pos
        assert pos + n <= len(raw), "section ends early"
        b = raw[pos:pos + n]
        pos += n
        return b

    sid = struct.unpack(">H", take(2))[0]
    assert sid != END_OF_KEY_GROUP, "a key group section without entries"
    seen_ids = []
    while sid != END_OF_KEY_GROUP:
        assert not seen_ids or sid > seen_ids[-1], "state runs out of state id order"
        seen_ids.append(sid)
        run = []
        while True:
            key = bytearray(take(struct.unpack(">i", take(4))[0]))
            value = take(struct.unpack(">i", take(4))[0])
            last = bool(key[0] & META_FOLLOWS)
            key[0] &= ~META_FOLLOWS & 0xFF
            key = bytes(key)
            assert int.from_bytes(key[:prefix_bytes], "big") == kg, \
                f"entry of key group {int.from_bytes(key[:prefix_bytes], 'big')} in section {kg}"
            run.append(key)
            out.append((sid, key, value))
            if last:
                break
        assert run == sorted(run), "keys of a state run are not in RocksDB order"
        sid = struct.unpack(">H", take(2))[0]
    assert pos == len(raw), "bytes after the end-of-key-group mark"
    return out


def parse_snapshot(path: str, handle, compressed: bool, chunk_stats: dict | None = None):
    with open(path, "rb") as f:
        data = f.read()
    meta, meta_len = parse_meta(data)
    assert meta_len == handle.meta_length
    assert meta["compression"] == (1 if compressed else 0)
    prefix_bytes = 1 if meta["max_parallelism"] <= 128 else 2
    groups = sorted(handle.offsets.items())
    if groups:
        assert groups[0][1] == meta_len, "the first section must follow the meta block"
    else:
        assert len(data) == meta_len
    entries = {}
    for i, (kg, off) in enumerate(groups):
        end = groups[i + 1][1] if i + 1 < len(groups) else len(data)
        assert off < end
        section = data[off:end]
        if compressed:
            if chunk_stats is not None:
                check_framing(section, chunk_stats)
            raw = snappy.StreamDecompressor().decompress(section)
        else:
            raw = section
        entries[kg] = parse_key_group(raw, kg, prefix_bytes)
    return meta, entries


def raw_contents(backend) -> dict[str, list[tuple[bytes, bytes]]]:
    return {name: backend._raw_scan(cf) for name, cf in backend.column_families()}


def check_against_backend(backend, handle, meta, entries) -> None:
    names = [n for n, _ in backend.column_families()]
    assert [s["name"] for s in meta["states"]] == names
    for s in meta["states"]:
        have = backend.state_meta(s["name"])
        assert {k: have[k] for k in s} == s
    assert meta["max_parallelism"] == backend.max_parallelism
    assert meta["key_codecs"] == list(backend.key_codecs or ())
    assert meta["key_is_tuple"] == backend.key_is_tuple
    prefix_bytes = 1 if backend.max_parallelism <= 128 else 2
    want: dict[int, list] = {}
    for sid, name in enumerate(names):
        for key, value in backend._raw_scan(backend._cf_index[name]):
            kg = int.from_bytes(key[:prefix_bytes], "big")
            want.setdefault(kg, []).append((sid, key, value))
    assert sorted(entries) == sorted(want), "key groups with entries differ"
    for kg in want:
        assert kg in backend.key_group_range
        assert entries[kg] == sorted(want[kg], key=lambda t: (t[0], t[1])), f"key group {kg}"
    assert handle.stats["entries"] == sum(len(v) for v in want.values())
    assert handle.stats["raw_bytes"] == sum(len(k) + len(v) for e in want.values()
                                            for _, k, v in e)
    path = os.path.join(handle.root, handle.file.path)
    assert handle.stats["file_bytes"] == os.path.getsize(path) == handle.file.size
    # the writer checksums what it writes; the recorded CRC is the file's
    assert handle.file.crc32c == _native.file_crc32c(path)[0]


def _populated(root, max_parallelism=128, key_type=int, kgr=None, keys=None, big_values=True):
    harness = Harness(new_backend(root, max_parallelism, kgr, key_type))
    rng = random.Random(4)
    if keys is None:
        keys = list(range(300)) if key_type is int else [f"user-{i}" for i in range(300)]
    if kgr is not None:
        keys = [k for k in keys if harness.backend.key_group_of(k) in kgr]
    for op in random_ops(rng, keys, 6 * len(keys)):
        harness.apply(op)
    if big_values:  # values larger than a framing chunk, compressible and not
        blob = harness.backend.get_state(ValueStateDescriptor("blob", bytes))
        for i, key in enumerate(keys[:4]):
            harness.backend.set_current_key(key)
            blob.update(rng.randbytes(200_000) if i % 2 else bytes(150_000) + b"tail")
        # one key group whose section is many chunks of small pairs
        many = harness.backend.get_state(MapStateDescriptor("many", int, str))
        harness.backend.set_current_key(keys[5])
        many.put_all({i: f"value number {i}" for i in range(20_000)})
    return harness.backend


@pytest.mark.parametrize("compress", [True, False], ids=["snappy", "raw"])
@pytest.mark.parametrize("max_parallelism,key_type", [(128, int), (128, str), (4096, int),
                                                      (300, str), (32768, int)])
def test_snapshot_file_parses_independently(tmp_path, compress, max_parallelism, key_type):
    backend = _populated(str(tmp_path), max_parallelism, key_type)
    handle = backend.snapshot(tmp_path / "cp", "savepoint", compress=compress).result()
    chunk_stats = {"compressed": 0, "uncompressed": 0}
    meta, entries = parse_snapshot(str(tmp_path / "cp" / "savepoint"), handle, compress,
                                   chunk_stats)
    check_against_backend(backend, handle, meta, entries)
    if compress:
        # both chunk kinds occur: random bytes do not compress, zeros and small pairs do
        assert chunk_stats["compressed"] > 0 and chunk_stats["uncompressed"] > 0
    backend.dispose()


def test_compression_is_learned_per_state_and_retried(tmp_path):
    """Chunks of a state that does not compress are stored without trying for a while, but a
    compressible state next to it keeps being compressed, and a state whose bytes turn
    compressible is compressed again once the skipped chunks are done."""
    backend = KeyedStateBackend(tmp_path / "b", max_parallelism=1, key_type=int)
    noise = backend.get_state(ValueStateDescriptor("noise", bytes))
    text = backend.get_state(ValueStateDescriptor("text", bytes))
    turns = backend.get_state(ValueStateDescriptor("turns", bytes))
    rng = random.Random(7)
    for k in range(3000):  # one key group: every state is one long run
        backend.set_current_key(k)
        noise.update(rng.randbytes(1000))
        text.update(b"the same words again and again " * 30)
        # random for the first third of the keys, then zeros: compressible after ~45 chunks
        turns.update(rng.randbytes(1000) if k < 1000 else bytes(1000))
    handle = backend.snapshot(tmp_path / "cp", "sp").result()
    path = str(tmp_path / "cp" / "sp")
    meta, entries = parse_snapshot(path, handle, True, {"compressed": 0, "uncompressed": 0})
    check_against_backend(backend, handle, meta, entries)
    with open(path, "rb") as f:
        section = f.read()[handle.offsets[0]:]
    kinds = []  # (chunk type, uncompressed payload) in stream order: noise, text, turns
    pos = 10
    while pos < len(section):
        ctype, clen = section[pos], int.from_bytes(section[pos + 1:pos + 4], "little")
        body = section[pos + 8:pos + 4 + clen]
        kinds.append((ctype, snappy.uncompress(body) if ctype == 0 else body))
        pos += 4 + clen
    text_chunks = [t for t, payload in kinds if b"the same words" in payload]
    # next to noise, text is still compressed (but for a chunk it may share with turns)
    assert len(text_chunks) > 20 and text_chunks.count(1) <= 1
    noise_chunks = kinds[:40]
    assert sum(t == 1 for t, _ in noise_chunks) == 40  # random bytes are stored as they are
    zero_tail = kinds[-20:]  # the last 20 chunks: turns' zeros
    assert all(t == 0 for t, _ in zero_tail)  # compressed again after the skipped chunks
    assert os.path.getsize(path) < 6_000_000  # noise + random third ~4 MB, the rest shrinks
    backend.dispose()


def test_sub_range_backend_writes_only_its_key_groups(tmp_path):
    kgr = KeyGroupRange(10, 50)
    backend = _populated(str(tmp_path), 128, int, kgr=kgr, keys=list(range(1000)),
                         big_values=False)
    handle = backend.snapshot(tmp_path / "cp", "part").result()
    assert handle.key_group_range == kgr
    assert set(handle.offsets) <= set(range(10, 51)) and handle.offsets
    meta, entries = parse_snapshot(str(tmp_path / "cp" / "part"), handle, True)
    check_against_backend(backend, handle, meta, entries)
    backend.dispose()


def test_each_key_group_decodes_on_its_own(tmp_path):
    """A reader may start at any recorded offset with a fresh decoder (that is what restoring
    a sub-range does): decode the key groups in reverse order, one decoder each."""
    backend = _populated(str(tmp_path), 128, int, big_values=False)
    handle = backend.snapshot(tmp_path / "cp", "s").result()
    data = (tmp_path / "cp" / "s").read_bytes()
    bounds = sorted(handle.offsets.values()) + [len(data)]
    by_offset = {off: kg for kg, off in handle.offsets.items()}
    for off, end in reversed(list(zip(bounds, bounds[1:]))):
        raw = snappy.StreamDecompressor().decompress(data[off:end])
        parse_key_group(raw, by_offset[off], 1)
    backend.dispose()


def test_timers_and_every_state_kind_appear_with_their_meta(tmp_path):
    harness = Harness(new_backend(str(tmp_path), key_type=int))
    for k in range(20):
        for op in (("value_update", k, "w1", k), ("list_add", k, None, k),
                   ("map_put", k, 7, ("a", 1)), ("sorted_put", k, None, (k, "x")),
                   ("sum_add", k, None, k), ("concat_add", k, None, "c"),
                   ("sumcount_add", k, None, k), ("count_add", k, None, k),
                   ("event_timer", k, None, k), ("processing_timer", k, "w1", 100 + k)):
            harness.apply(op)
    backend = harness.backend
    handle = backend.snapshot(tmp_path / "cp", "s").result()
    meta, entries = parse_snapshot(str(tmp_path / "cp" / "s"), handle, True)
    check_against_backend(backend, handle, meta, entries)
    kinds = {s["name"]: s["kind"] for s in meta["states"]}
    assert kinds == {"value": "value", "list": "list", "map": "map", "sorted": "sorted_map",
                     "sum": "reducing", "concat": "reducing", "sumcount": "aggregating",
                     "count": "aggregating", "__timers_event__": "timers",
                     "__timers_processing__": "timers"}
    by_name = {s["name"]: s for s in meta["states"]}
    assert by_name["sum"]["merge"] == 2 and by_name["sum"]["native_op"] == 1
    assert by_name["list"]["merge"] == 1
    assert by_name["concat"]["merge"] == 0
    assert all(s["namespace_codec"] == 1 for n, s in by_name.items() if not n.startswith("__"))
    # timer keys: [kg][timestamp with the sign bit flipped, big-endian][key][namespace]
    tid = [s["name"] for s in meta["states"]].index("__timers_event__")
    timer_keys = [k for e in entries.values() for sid, k, _ in e if sid == tid]
    stamps = sorted(int.from_bytes(k[1:9], "big") ^ (1 << 63) for k in timer_keys)
    assert stamps == list(range(20))
    backend.dispose()


def test_restore_reads_what_the_independent_parser_reads(tmp_path):
    """Closing the loop: a backend restored by the C++ reader holds exactly the entries the
    Python parser found, for a sub-range too."""
    backend = _populated(str(tmp_path), 128, str, big_values=True)
    handle = backend.snapshot(tmp_path / "cp", "s").result()
    _, entries = parse_snapshot(str(tmp_path / "cp" / "s"), handle, True)
    names = [n for n, _ in backend.column_families()]
    backend.dispose()
    target = KeyGroupRange(0, 63)
    restored = KeyedStateBackend.restore(str(tmp_path / "r"), [handle], target,
                                         descriptors=descriptors())
    got = raw_contents(restored)
    want = {n: [] for n in names}
    for kg, triples in entries.items():
        if kg in target:
            for sid, k, v in triples:
                want[names[sid]].append((k, v))
    assert {n: got.get(n, []) for n in names} == {n: sorted(v) for n, v in want.items()}
    restored.dispose()


def test_meta_block_keeps_state_attributes_and_refuses_damaged_ones():
    """Attributes beyond the fixed fields (format 3) round-trip as JSON; a clash with a fixed
    field, a non-object or an overrunning length is corruption, never a raw exception."""
    import pytest

    from stateengine.checkpoint.meta import SnapshotMeta
    from stateengine.errors import CorruptionError

    base = {"name": "s", "kind": "value", "value_codec": 1, "namespace_codec": 0,
            "user_key_codec": 0, "merge": 0, "native_op": 0}
    meta = SnapshotMeta(128, (2,), False, True,
                        [dict(base, value_schema="a bigint", ttl=True), dict(base, name="t")])
    data = meta.encode()
    decoded, length = SnapshotMeta.decode(data)
    assert length == len(data) and decoded.format_version == 3
    assert decoded.states == meta.states
    parsed, _ = parse_meta(data)
    assert parsed["states"] == meta.states
    for bad in (b'[1]', b'{"kind":"list"}', b'{}', b'{"a":', b"[" * 100_000):
        blob = data.replace(b'{"ttl":true,"value_schema":"a bigint"}', bad)
        body_delta = len(bad) - len(b'{"ttl":true,"value_schema":"a bigint"}')
        at = data.index(b'{"ttl"') - 4
        blob = bytearray(blob)
        blob[at:at + 4] = len(bad).to_bytes(4, "big")
        blob[6:10] = (int.from_bytes(data[6:10], "big") + body_delta).to_bytes(4, "big")
        with pytest.raises(CorruptionError):
            SnapshotMeta.decode(bytes(blob))
