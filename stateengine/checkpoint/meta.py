"""The meta block of a full snapshot: what restore checks before it touches any key group.

Layout (big-endian), never compressed::

    b"SEKS" | u16 format version | u32 body length | body
    body: i32 max parallelism | u8 key is tuple | u8 n key columns | n x u8 key codec
          | u8 compression (0 none, 1 snappy framed per key group)
          | u16 n states | per state: u16 state id | u16 name length | UTF-8 name | u8 kind
            | u8 value codec | u8 namespace codec | u8 user key codec | u8 merge kind
            | u8 native op | (format >= 3) u32 attributes length | UTF-8 JSON object

Timers are states of kind ``timers``; operator state is not keyed and lives in its own file.

Format versions: 3 is written; 1 and 2 are read. 1 was written before the default serializer
stored tuples, lists, dicts and big ints natively: its entries may hold pickles (ANY tag 7) in
values, namespaces and user keys, which restore converts (see checkpoint/legacy.py). The
layout of the stream is the same in all; the version keeps a reader of format 1 from
misreading the new ANY tags as corruption, and tells a newer reader that conversion may be
needed.
Format 3 adds, per state, the attributes of its meta beyond the fixed fields (a value schema,
a TTL flag...) as one compact JSON object with sorted keys (length 0: none); formats 1 and 2
have none. Attributes are checked generically on the way in (``check_attributes``: string
keys that are not fixed fields, plain JSON values); what an attribute means is checked by the
feature that adds it. Incremental manifests carry the same state metas, attributes included,
as JSON (checkpoint/handles.py).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptionError
from .documents import finite_float
from ..keygroups import MAX_MAX_PARALLELISM
from ..serializers import Codec

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
    if not isinstance(s.get("kind"), str) or s["kind"] not in KIND_IDS:
        raise ValueError(f"{what}: state '{name}' has unknown kind {s.get('kind')!r}")
    for f, allowed in (("value_codec", CODEC_IDS), ("namespace_codec", CODEC_IDS),
                       ("user_key_codec", CODEC_IDS), ("merge", MERGE_KINDS),
                       ("native_op", NATIVE_OPS)):
        v = s.get(f)
        if type(v) is not int or v not in allowed:
            raise ValueError(f"{what}: state '{name}' has unknown {f} {v!r}")
    _check_combination(s, name, what)
    check_attributes(state_attributes(s), f"{what} (state '{name}')")


_USER_KEY_KINDS = ("map", "sorted_map")


def _check_combination(s: dict[str, Any], name: str, what: str) -> None:
    """The fixed fields say some things twice: only map states have user keys, only list
    states merge by appending, only native reducers and aggregates merge numerically (and
    only they name a native function), and timers have one fixed layout. A meta that
    contradicts itself describes no state a descriptor can produce."""
    kind, merge, op = s["kind"], s["merge"], s["native_op"]
    if kind == "timers":  # the engine's own column families: one fixed meta
        from ..timers import EVENT_TIME_CF, PROCESSING_TIME_CF, TIMER_META

        wrong = {f: s[f] for f, v in TIMER_META.items() if s.get(f) != v}
        wrong.update(state_attributes(s))  # timers have no attributes (no TTL, no schema)
        if wrong or name not in (EVENT_TIME_CF, PROCESSING_TIME_CF):
            raise ValueError(f"{what}: timer column family '{name}' has {wrong or 'its name'}, "
                             f"not the timers' fixed layout {TIMER_META}")
        return
    if kind not in _USER_KEY_KINDS and s["user_key_codec"] != 0:
        raise ValueError(f"{what}: {kind} state '{name}' has user key codec "
                         f"{s['user_key_codec']} but no user keys")
    if (merge == 1) != (kind == "list"):
        raise ValueError(f"{what}: {kind} state '{name}' has merge kind {merge}; list states "
                         f"and only they merge by appending (1)")
    if merge == 2 and kind not in ("reducing", "aggregating"):
        raise ValueError(f"{what}: {kind} state '{name}' merges numerically (2); only native "
                         f"reducers and aggregates do")
    if (merge == 2) != (op != 0):
        raise ValueError(f"{what}: state '{name}' has merge kind {merge} and native function "
                         f"{op}; a native function goes with numeric merging (2), and only "
                         f"with it")


# Attributes are written by this code base (schemas, TTL settings), never deeply nested; the
# bound keeps a hostile document from exhausting the checker's recursion.
MAX_ATTRIBUTE_DEPTH = 32


def check_attributes(attrs: dict[str, Any], what: str) -> None:
    """Raises ValueError unless attrs can be the attributes of a state meta: keys that are
    non-empty strings and not fixed fields, values made only of JSON values (null, booleans,
    integers, finite floats, strings, lists, objects with string keys). Which attributes a
    state kind understands is for the feature that adds them to check."""
    for k, v in attrs.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"{what} has an attribute key {k!r} that is not a non-empty string")
        if k in FIXED_STATE_FIELDS:
            raise ValueError(f"{what} has an attribute '{k}' that is a fixed field")
        _check_json_value(v, f"{what}: attribute '{k}'", 0)


def _check_json_value(v: Any, what: str, depth: int) -> None:
    if depth > MAX_ATTRIBUTE_DEPTH:
        raise ValueError(f"{what} nests deeper than {MAX_ATTRIBUTE_DEPTH} levels")
    if v is None or type(v) in (bool, int, str):
        return
    if type(v) is float:
        if not math.isfinite(v):
            raise ValueError(f"{what} holds {v!r}, which JSON cannot represent")
        return
    if type(v) is list:
        for item in v:
            _check_json_value(item, what, depth + 1)
        return
    if type(v) is dict:
        for key, item in v.items():
            if not isinstance(key, str):
                raise ValueError(f"{what} holds an object key {key!r} that is not a string")
            _check_json_value(item, what, depth + 1)
        return
    raise ValueError(f"{what} holds a {type(v).__name__}, not a JSON value")


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
            blob = json.dumps(attrs, sort_keys=True, separators=(",", ":"),
                              allow_nan=False).encode() if attrs else b""
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
        except (struct.error, UnicodeDecodeError, ValueError, RecursionError) as e:
            raise CorruptionError(f"{source}: corrupted meta block ({e})") from None
        meta = cls(max_p, codecs or None, bool(is_tuple), compression == 1, states, version)
        return meta, end


def state_attributes(meta: dict[str, Any]) -> dict[str, Any]:
    """The attributes of a state meta: every key beyond the fixed fields."""
    return {k: v for k, v in meta.items() if k not in FIXED_STATE_FIELDS}


def decode_attributes(blob: bytes, entry: int) -> dict[str, Any]:
    """The attribute object of a state entry; ValueError unless it is a non-empty JSON object
    whose keys are not fixed fields (those are never attributes) and whose values are JSON
    values (check_attributes; NaN and infinities are refused as they are never written)."""
    attrs = json.loads(blob.decode("utf-8"), parse_constant=_refuse_constant,
                       parse_float=finite_float)
    if not isinstance(attrs, dict) or not attrs:
        raise ValueError(f"attributes of state entry {entry} are not a non-empty JSON object")
    clash = [k for k in attrs if k in FIXED_STATE_FIELDS]
    if clash:
        raise ValueError(f"attributes of state entry {entry} redefine fixed fields {clash}")
    check_attributes(attrs, f"attributes of state entry {entry}")
    return attrs


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")
