"""The meta block of a full snapshot: what restore checks before it touches any key group.

Layout (big-endian), never compressed::

    b"SEKS" | u16 format version | u32 body length | body
    body: i32 max parallelism | u8 key is tuple | u8 n key columns | n x u8 key codec
          | u8 compression (0 none, 1 snappy framed per key group)
          | u16 n states | per state: u16 state id | u16 name length | UTF-8 name | u8 kind
            | u8 value codec | u8 namespace codec | u8 user key codec | u8 merge kind
            | u8 native op | (format >= 3) u32 attributes length | UTF-8 JSON object

Timers are states of kind ``timers``; operator state is not keyed and lives in its own file.

Format versions: 2 is written. 1 (read too) was written before the default serializer stored
tuples, lists, dicts and big ints natively: its entries may hold pickles (ANY tag 7) in values,
namespaces and user keys, which restore converts (see checkpoint/legacy.py). The layout of the
stream is the same in both; the version keeps a reader of format 1 from misreading the new
ANY tags as corruption, and tells a reader of format 2 that conversion may be needed.
Format 3 adds, per state, the attributes of its meta beyond the fixed fields (a value schema,
a TTL flag...) as one compact JSON object with sorted keys (length 0: none); formats 1 and 2
have none.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptionError

MAGIC = b"SEKS"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
# The fields every state meta has, stored as fixed-width fields; any other key of a state meta
# is an attribute (format >= 3), persisted as JSON.
FIXED_STATE_FIELDS = ("name", "kind", "value_codec", "namespace_codec", "user_key_codec",
                      "merge", "native_op")
HEADER = struct.Struct(">4sHI")

KIND_IDS = {"value": 0, "list": 1, "map": 2, "sorted_map": 3, "reducing": 4, "aggregating": 5,
            "timers": 6}
KIND_NAMES = {v: k for k, v in KIND_IDS.items()}


@dataclass
class SnapshotMeta:
    max_parallelism: int
    key_codecs: tuple[int, ...] | None
    key_is_tuple: bool
    compressed: bool
    states: list[dict[str, Any]] = field(default_factory=list)  # in state id order
    format_version: int = FORMAT_VERSION  # of the snapshot read; encode() always writes the newest

    def encode(self, version: int = FORMAT_VERSION) -> bytes:
        """The meta block in ``version`` (the newest unless a test or tool asks for an older
        layout; formats before 3 cannot carry attributes)."""
        if version not in READABLE_VERSIONS:
            raise ValueError(f"unknown snapshot format {version}")
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
            attrs = state_attributes(s)
            if version < 3:
                if attrs:
                    raise ValueError(f"format {version} cannot hold the attributes of "
                                     f"state {s['name']!r}: {sorted(attrs)}")
                continue
            blob = json.dumps(attrs, sort_keys=True, separators=(",", ":")).encode() if attrs \
                else b""
            body += struct.pack(">I", len(blob)) + blob
        return HEADER.pack(MAGIC, version, len(body)) + bytes(body)

    @classmethod
    def decode(cls, data: bytes, source: str = "snapshot") -> tuple["SnapshotMeta", int]:
        """(meta, length of the meta block) from the start of a snapshot file."""
        if len(data) < HEADER.size:
            raise CorruptionError(f"{source}: file is shorter than a snapshot header (truncated)")
        magic, version, length = HEADER.unpack_from(data)
        if magic != MAGIC:
            raise CorruptionError(f"{source}: not a stateengine snapshot (bad magic {magic!r})")
        if version not in READABLE_VERSIONS:
            raise CorruptionError(f"{source}: snapshot format version {version} is not supported "
                                  f"(this build reads versions {READABLE_VERSIONS})")
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
                if version >= 3:
                    (alen,) = struct.unpack_from(">I", data, pos)
                    pos += 4
                    if alen > end - pos:
                        raise ValueError(f"attributes of state entry {expected} overrun the block")
                    if alen:
                        state.update(decode_attributes(data[pos:pos + alen], expected))
                    pos += alen
                states.append(state)
            if pos != end:
                raise ValueError("meta block length does not match its contents")
        except (struct.error, UnicodeDecodeError, ValueError, RecursionError) as e:
            raise CorruptionError(f"{source}: corrupted meta block ({e})") from None
        meta = cls(max_p, codecs or None, bool(is_tuple), compression == 1, states, version)
        return meta, end


def state_attributes(meta: dict[str, Any]) -> dict[str, Any]:
    """The attributes of a state meta: every key beyond the fixed fields."""
    return {k: v for k, v in meta.items() if k not in FIXED_STATE_FIELDS}


def decode_attributes(blob: bytes, entry: int) -> dict[str, Any]:
    """The attribute object of a state entry; ValueError unless it is a JSON object whose keys
    are not fixed fields (those are never attributes)."""
    attrs = json.loads(blob.decode("utf-8"))
    if not isinstance(attrs, dict) or not attrs:
        raise ValueError(f"attributes of state entry {entry} are not a non-empty JSON object")
    clash = [k for k in attrs if k in FIXED_STATE_FIELDS]
    if clash:
        raise ValueError(f"attributes of state entry {entry} redefine fixed fields {clash}")
    return attrs
