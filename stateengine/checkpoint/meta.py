"""The meta block of a full snapshot: what restore checks before it touches any key group.

Layout (big-endian), never compressed::

    b"SEKS" | u16 format version | u32 body length | body
    body: i32 max parallelism | u8 key is tuple | u8 n key columns | n x u8 key codec
          | u8 compression (0 none, 1 snappy framed per key group)
          | u16 n states | per state: u16 state id | u16 name length | UTF-8 name | u8 kind
            | u8 value codec | u8 namespace codec | u8 user key codec | u8 merge kind
            | u8 native op

Timers are states of kind ``timers``; operator state is not keyed and lives in its own file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptionError
from ..keygroups import MAX_MAX_PARALLELISM
from ..serializers import Codec

MAGIC = b"SEKS"
FORMAT_VERSION = 1
HEADER = struct.Struct(">4sHI")

KIND_IDS = {"value": 0, "list": 1, "map": 2, "sorted_map": 3, "reducing": 4, "aggregating": 5,
            "timers": 6}
KIND_NAMES = {v: k for k, v in KIND_IDS.items()}
CODEC_IDS = frozenset(int(c) for c in Codec)
KEY_CODEC_IDS = frozenset(int(c) for c in (Codec.BIGINT, Codec.INT, Codec.DOUBLE, Codec.FLOAT,
                                           Codec.STRING, Codec.BINARY, Codec.BOOLEAN))
MERGE_KINDS = frozenset({0, 1, 2})      # descriptors.MergeKind
NATIVE_OPS = frozenset({0, 1, 2, 3, 4})  # none, functions.NativeOp


def check_state_entry(s: dict[str, Any], what: str) -> None:
    """Raises ValueError unless s is a state meta this build can restore: a name RocksDB and
    the meta block can hold, a known kind, codec ids, merge kind and native function."""
    name = s.get("name")
    if not isinstance(name, str) or not name or name == "default":
        raise ValueError(f"{what} has an invalid state name {name!r}")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} has a state name that is not valid Unicode") from None
    if len(encoded) > 0xFFFF or "\x00" in name:
        raise ValueError(f"{what} has a state name RocksDB cannot hold")
    if s.get("kind") not in KIND_IDS:
        raise ValueError(f"{what}: state '{name}' has unknown kind {s.get('kind')!r}")
    for f, allowed in (("value_codec", CODEC_IDS), ("namespace_codec", CODEC_IDS),
                       ("user_key_codec", CODEC_IDS), ("merge", MERGE_KINDS),
                       ("native_op", NATIVE_OPS)):
        v = s.get(f)
        if type(v) is not int or v not in allowed:
            raise ValueError(f"{what}: state '{name}' has unknown {f} {v!r}")


def check_key_layout(max_parallelism: Any, key_codecs: Any, key_is_tuple: Any, what: str) -> None:
    """Raises ValueError unless these describe a key layout this build can restore."""
    if type(max_parallelism) is not int or not 1 <= max_parallelism <= MAX_MAX_PARALLELISM:
        raise ValueError(f"{what} has max_parallelism {max_parallelism!r}, outside "
                         f"[1, {MAX_MAX_PARALLELISM}]")
    if type(key_is_tuple) is not bool:
        raise ValueError(f"{what} has key_is_tuple {key_is_tuple!r}, not true/false")
    if key_codecs is None:
        return
    if not isinstance(key_codecs, (list, tuple)) or not key_codecs or \
            any(type(c) is not int or c not in KEY_CODEC_IDS for c in key_codecs):
        raise ValueError(f"{what} has key codecs {key_codecs!r}; keys are encoded by codecs "
                         f"{sorted(KEY_CODEC_IDS)}")
    if not key_is_tuple and len(key_codecs) != 1:
        raise ValueError(f"{what} has {len(key_codecs)} key columns but keys are not tuples")


@dataclass
class SnapshotMeta:
    max_parallelism: int
    key_codecs: tuple[int, ...] | None
    key_is_tuple: bool
    compressed: bool
    states: list[dict[str, Any]] = field(default_factory=list)  # in state id order

    def encode(self) -> bytes:
        codecs = self.key_codecs or ()
        body = bytearray(struct.pack(">iBB", self.max_parallelism, self.key_is_tuple, len(codecs)))
        body += bytes(codecs)
        body += struct.pack(">BH", 1 if self.compressed else 0, len(self.states))
        for sid, s in enumerate(self.states):
            name = s["name"].encode("utf-8")
            body += struct.pack(">HH", sid, len(name)) + name
            body += struct.pack(">BBBBBB", KIND_IDS[s["kind"]], s["value_codec"],
                                s["namespace_codec"], s["user_key_codec"], s["merge"],
                                s["native_op"])
        return HEADER.pack(MAGIC, FORMAT_VERSION, len(body)) + bytes(body)

    @classmethod
    def decode(cls, data: bytes, source: str = "snapshot") -> tuple["SnapshotMeta", int]:
        """(meta, length of the meta block) from the start of a snapshot file."""
        if len(data) < HEADER.size:
            raise CorruptionError(f"{source}: file is shorter than a snapshot header (truncated)")
        magic, version, length = HEADER.unpack_from(data)
        if magic != MAGIC:
            raise CorruptionError(f"{source}: not a stateengine snapshot (bad magic {magic!r})")
        if version != FORMAT_VERSION:
            raise CorruptionError(f"{source}: snapshot format version {version} is not supported "
                                  f"(this build reads version {FORMAT_VERSION})")
        end = HEADER.size + length
        if len(data) < end:
            raise CorruptionError(f"{source}: meta block is truncated")
        try:
            pos = HEADER.size
            max_p, is_tuple, ncols = struct.unpack_from(">iBB", data, pos)
            pos += 6
            codecs = tuple(data[pos:pos + ncols])
            pos += ncols
            compression, nstates = struct.unpack_from(">BH", data, pos)
            pos += 3
            states = []
            for expected in range(nstates):
                sid, nlen = struct.unpack_from(">HH", data, pos)
                pos += 4
                name = data[pos:pos + nlen].decode("utf-8")
                pos += nlen
                kind, vc, nc, uc, merge, op = struct.unpack_from(">BBBBBB", data, pos)
                pos += 6
                if sid != expected or kind not in KIND_NAMES:
                    raise ValueError(f"state entry {expected} is malformed")
                state = {"name": name, "kind": KIND_NAMES[kind], "value_codec": vc,
                         "namespace_codec": nc, "user_key_codec": uc, "merge": merge,
                         "native_op": op}
                check_state_entry(state, f"state entry {expected}")
                states.append(state)
            if pos != end:
                raise ValueError("meta block length does not match its contents")
            if compression not in (0, 1):
                raise ValueError(f"unknown compression {compression}")
            if len({s["name"] for s in states}) != len(states):
                raise ValueError("two state entries have the same name")
            check_key_layout(max_p, list(codecs) or None, bool(is_tuple), "the meta block")
            if is_tuple not in (0, 1):
                raise ValueError(f"key-is-tuple flag {is_tuple} is not 0 or 1")
        except (struct.error, UnicodeDecodeError, ValueError) as e:
            raise CorruptionError(f"{source}: corrupted meta block ({e})") from None
        meta = cls(max_p, codecs or None, bool(is_tuple), compression == 1, states)
        return meta, end
