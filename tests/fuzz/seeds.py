"""Writes the seed corpora of tests/fuzz/corpus/<harness>/ from real data: sections of a real
full snapshot, ANY and struct encodings made by the encoders, keys and timer keys read from a
real backend, operator state files and checkpoint documents as the code writes them. Each seed
is named ``seed-<n>``; files named ``regress-*`` (inputs that found a bug, kept as regression
tests) are left alone. Rerun after a format change:

    python -m tests.fuzz.seeds
"""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import json
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))


def _write(harness: str, seeds: list[bytes]) -> None:
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    for old in glob.glob(os.path.join(d, "seed-*")):
        os.remove(old)
    for i, s in enumerate(dict.fromkeys(seeds)):  # unique, in order
        with open(os.path.join(d, f"seed-{i:03d}"), "wb") as f:
            f.write(s)


def _backend_data(tmp: str) -> dict:
    """A small real backend: its raw state keys, timer keys, a full snapshot's sections,
    an incremental checkpoint's handle document and its operator state file."""
    from stateengine import (KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
                             ValueStateDescriptor)
    from stateengine.checkpoint.handles import encode_handle

    out: dict = {"state_keys": [], "timer_keys": [], "sections": [], "documents": []}
    for key_type, keys in ((int, [1, -7, 2**40]), (str, ["a", "", "ünï"]),
                           ((int, str), [(1, "x"), (2, "")])):
        b = KeyedStateBackend(os.path.join(tmp, f"b{len(out['state_keys'])}"), key_type=key_type)
        try:
            value = b.get_state(ValueStateDescriptor("value", int))
            words = b.get_state(ListStateDescriptor("words", str, namespace_type=object))
            attrs = b.get_state(MapStateDescriptor("attrs", str))
            for k in keys:
                b.set_current_key(k)
                value.update(5)
                words.set_current_namespace(("w", 1))
                words.add("hello")
                attrs.put("k", [1, 2.5, None])
                b.timer_service.register_event_time_timer(1000)
            prefix = 1 if b.max_parallelism <= 128 else 2
            for name, cf in b.column_families():
                meta = b.state_meta(name)
                for raw, _ in b._raw_scan(cf):
                    if name.startswith("__timers"):
                        out["timer_keys"].append((prefix, b.key_codecs, raw))
                    else:
                        out["state_keys"].append((prefix, b.key_codecs,
                                                  meta["namespace_codec"],
                                                  meta["kind"] == "map", raw))
            root = os.path.join(tmp, f"ckpt{len(out['sections'])}")
            full = b.snapshot(root, "snap").result()
            data = open(os.path.join(root, full.file.path), "rb").read()
            offsets = sorted(full.offsets.items())
            ends = [o for _, o in offsets[1:]] + [len(data)]
            for (kg, start), end in zip(offsets, ends):
                out["sections"].append((kg, data[start:end]))
            out["documents"].append(encode_handle(full, None))
            out["documents"].append(data[:full.meta_length])  # the meta block
            inc = b.checkpoint(1, root).result()
            out["documents"].append(encode_handle(inc, None))
            b.operator_state.get_list_state("offsets").add_all([1, "two", (3, 4.0)])
            b.operator_state.get_list_state("all", "union").add({"a": [1]})
            out.setdefault("operator_state", []).append(b.operator_state.snapshot_bytes())
        finally:
            b.dispose()
    return out


def _any_values() -> list:
    return [None, True, False, 0, -1, 2**63 - 1, -2**63, 2**64, -2**100, 1.5, float("inf"),
            -0.0, "", "text", "ünïcode \U0001F600", b"", b"\x00\xff", (), (1, "a"), [1, [2, [3]]],
            {"k": 1, 2: (None,)}, [{"x": b"y"}] * 3]


def main() -> None:
    from stateengine import _native
    from stateengine.sparktypes import parse_ddl, program

    with tempfile.TemporaryDirectory() as tmp:
        data = _backend_data(tmp)

    # snapshot_reader: flags | states | u16 kg | section bytes (compressed sections)
    seeds = []
    for kg, sec in data["sections"][:12]:
        seeds.append(bytes([0b001, 3]) + struct.pack(">H", kg) + sec)
    seeds.append(bytes([0b101, 2, 0, 5]) + os.urandom(0) + b"\x00\x01\x05abcdefgh" * 8)
    seeds.append(bytes([0b100, 1, 0, 9]) + b"\x10\x03xyz\x81\x05" * 6)
    _write("snapshot_reader", seeds)

    # codec: codec id | key columns | bytes
    seeds = []
    for v in _any_values():
        seeds.append(bytes([1, 0]) + _native.encode_for_codec(1, v))
    for codec, v in ((2, 7), (3, 2.5), (4, "abc"), (5, b"\x00"), (6, True), (8, 5), (9, 1.5),
                     (10, -3), (11, -0.5), (12, "z"), (13, b"q")):
        seeds.append(bytes([codec, codec * 5]) + _native.encode_for_codec(codec, v))
    _write("codec", seeds)

    # composite_key: layout | namespace codec index | key columns | raw key
    ns_index = {0: 0, 1: 1, 2: 2, 4: 3, 5: 4, 6: 5, 8: 6, 3: 7, 14: 8}
    col_index = {2: 0, 8: 1, 3: 2, 9: 3, 6: 4, 4: 5, 5: 6}
    seeds = []
    for prefix, codecs, ns, is_map, raw in data["state_keys"][:40]:
        cols = (len(codecs) - 1) | (col_index[codecs[0]] << 1) | \
            ((col_index[codecs[-1]] << 4) if len(codecs) > 1 else 0)
        seeds.append(bytes([(prefix - 1) | (2 if is_map else 0), ns_index[ns], cols]) + raw)
    for prefix, codecs, raw in data["timer_keys"][:10]:
        cols = (len(codecs) - 1) | (col_index[codecs[0]] << 1) | \
            ((col_index[codecs[-1]] << 4) if len(codecs) > 1 else 0)
        seeds.append(bytes([(prefix - 1) | 4, 0, cols]) + raw)
    _write("composite_key", seeds)

    # row_codec: mode 1 | u16 program length | program | value
    from stateengine._native import row_codec as make_codec

    seeds = []
    for ddl, value in (
            ("a bigint, b string", (1, "x")),
            ("a int, b double, c boolean", (None, 2.5, True)),
            ("d decimal(10,2), t timestamp, dd date", (decimal.Decimal("12.34"),
                                                        dt.datetime(2020, 1, 2, tzinfo=dt.timezone.utc),
                                                        dt.date(1999, 12, 31))),
            ("l array<int>, m map<string,bigint>", ([1, None, 3], {"k": 1, "n": None})),
            ("s struct<x: smallint, y: tinyint, z: float>, b binary", ((1, 2, 0.5), b"\x00")),
            ("n timestamp_ntz, deep array<array<struct<q: string>>>",
             (dt.datetime(2001, 1, 1), [[("a",), None], []]))):
        t = parse_ddl(ddl)
        prog = program(t)
        seeds.append(b"\x01" + struct.pack(">H", len(prog)) + prog + make_codec(t).encode_bytes(value))
    _write("row_codec", seeds)

    # row_evolution: u16 spec length | spec | u8 whole | a stored value of some version (its
    # marker, then its encoding under that version's schema; the current one as written now)
    from stateengine import evolution

    seeds = []
    for steps, values in (
            ([("a int, b string", {}, {}), ("b string, a bigint, c double", {}, {})],
             [(0, (1, "x")), (1, ("y", 2, 0.5))]),
            ([("l array<struct<x: int>>", {}, {}),
              ("l array<struct<x: double, y: int NOT NULL>>", {}, {"l.element.y": 7})],
             [(0, ([(1,), None],)), (1, ([(1.5, 2)],))]),
            ([("m map<string,struct<n: smallint>>, k int", {}, {}),
              ("mm map<string,struct<n: bigint>>", {"mm": "m"}, {})],
             [(0, ({"a": (3,)}, 4)), (1, ({"b": (5,)},))]),
            # three versions: a default added at step 1 is widened by step 2; 8 nullable
            # fields (an escape of 0xFF 0xFE)
            ([("a tinyint, b int, c int, d int, e int, f int, g int, h int", {}, {}),
              ("a smallint, b int, c int, d int, e int, f int, g int, h int, "
               "i int NOT NULL", {}, {"i": 3}),
              ("a bigint, c int, d int, e int, f int, g int, h int, i bigint NOT NULL, "
               "j decimal(9,2)", {}, {})],
             [(0, (None,) * 8), (0, (1, 2, 3, 4, 5, 6, 7, 8)),
              (1, (1, 2, None, None, None, None, None, None, 9)),
              (2, (1, 2, 3, 4, 5, 6, 7, 8, decimal.Decimal("1.25")))]),
            # non-struct roots: an array (escape 0x80 0x00), a decimal (escape 0xFF)
            ([("array<int>", {}, {}), ("array<bigint>", {}, {}), ("array<double>", {}, {})],
             [(0, [1, None, 3]), (1, [4]), (2, [0.5, None])]),
            ([("decimal(5,2)", {}, {}), ("decimal(12,2)", {}, {})],
             [(0, decimal.Decimal("123.45")), (1, decimal.Decimal("-1234567890.12"))])):
        history = evolution.History([evolution.Version(parse_ddl(steps[0][0]))])
        for ddl, renames, defaults in steps[1:]:
            t = parse_ddl(ddl)
            history = evolution.History(history.versions + [evolution.Version(
                t, evolution.declarations(t, renames, defaults, "seed"))])
        spec = history.spec()
        codec = evolution.value_codec({"name": "s", "value_schema": history.current.canonical(),
                                       evolution.HISTORY: history.attribute()})
        for version, value in values:
            if version == len(history.versions) - 1:
                raw = codec.encode_bytes(value)
            else:
                marker = b"" if version == 0 else history.escape() + bytes([version])
                raw = marker + make_codec(history.versions[version].schema).encode_bytes(value)
            head = struct.pack(">H", len(spec)) + spec
            seeds.append(head + b"\x01" + raw)
            seeds.append(head + b"\x00" + raw + b",")  # a list element, then its delimiter
    _write("row_evolution", seeds)

    # Python harnesses
    _write("any_codec_py", [bytes([1]) + _native.encode_for_codec(1, v) for v in _any_values()])
    _write("keys_py", [bytes([0 if len(c) == 1 and c[0] == 2 else 1, ns]) + raw
                       for _, c, ns, _, raw in data["state_keys"][:20]])
    _write("operator_state_py", data["operator_state"])
    _write("documents_py", data["documents"])


if __name__ == "__main__":
    main()
