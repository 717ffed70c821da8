"""Cross-checks: where a checkpoint says the same thing twice, restore compares the two.

A sealed document proves that it is what its last writer meant, not that its writer was right:
a bug, a half-finished tool or a hand edit can write a document that is intact and still
contradicts another part of the checkpoint. Without a checkpoint key nothing tells such a
document from one stateengine wrote, so every fact a checkpoint records twice is compared when
it is read, and a contradiction is a ``CorruptionError`` naming both places. The checks live
beside the code that reads each fact (handles.py: a handle's figures against its file list;
full.py: a snapshot's key-group offsets against its sections; versions.py: manifests against
their place, their commit marker and ``_operator.json``); this module holds those that compare
a document with the files it names (operator-state headers, RocksDB's OPTIONS file, the
key groups of the data). docs/reliability/cross-checks.md lists them all and what remains.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import CorruptionError
from ..operator_state import instance_of
from .handles import FullSnapshotHandle, IncrementalHandle
from .storage import CheckpointStorage

Handle = FullSnapshotHandle | IncrementalHandle


def handle_name(handle: Handle) -> str:
    """The document a handle was read from, as messages name it."""
    if handle.source:
        return handle.source
    storage = CheckpointStorage(handle.root)
    if isinstance(handle, FullSnapshotHandle):
        return f"the handle of {storage.describe(handle.file.path)}"
    return f"the manifest of {storage.describe(f'checkpoint {handle.checkpoint_id}')}"


def naming(e: CorruptionError, handle: Handle) -> CorruptionError:
    """e with the document that recorded the damaged file's size, checksum or offsets named
    too (a file's own message names the file only), same type."""
    name = handle_name(handle)
    if name in str(e):
        return e
    return type(e)(f"{e} (as recorded in {name})")


def check_operator_instance(handle: Handle, data: bytes, source: str) -> None:
    """The operator index and parallelism an operator-state file records against its handle's
    (they decide how the state is redistributed)."""
    found = instance_of(data)
    ref = handle.operator_state
    if found is None or ref is None:
        return
    if found != (ref.operator_index, ref.parallelism):
        raise CorruptionError(
            f"{source} holds the operator state of instance {found[0]} of {found[1]} but "
            f"{handle_name(handle)} records instance {ref.operator_index} of "
            f"{ref.parallelism}; one of them is corrupted")


# ---- RocksDB's own record of the column families ----------------------------------------------

_TTL_FILTER = "stateengine.TtlCompactionFilterFactory"
_NONE = "nullptr"


def expected_options(meta: dict[str, Any]) -> tuple[str, str]:
    """(merge_operator, compaction_filter_factory) RocksDB records for a state's column family:
    the names csrc/db.cc (MakeColumnFamilyOptions) and csrc/merge_operators.cc give them. A
    state's merge kind, native function, numeric value codec and TTL flag decide them, so the
    OPTIONS file of a checkpoint says a second time what its manifest's metas say."""
    from ..functions import merge_operator_of

    ttl = bool(meta.get("ttl"))
    if meta["merge"] == 1:
        merge = "stateengine.ListAppend"
    elif meta["merge"] == 2 and not ttl:  # with TTL a native add folds in C++: no operator
        merge = f"stateengine.Numeric.{merge_operator_of(meta['native_op'])}.{meta['value_codec']}"
    else:
        merge = _NONE
    return merge, _TTL_FILTER if ttl else _NONE


def _unescape(raw: bytes) -> str | None:
    """A column family name as RocksDB escapes it in an OPTIONS file (backslash before
    special characters, \\n and \\r for line breaks); None if it is no UTF-8 text."""
    out, i = bytearray(), 0
    while i < len(raw):
        c = raw[i:i + 1]
        if c == b"\\" and i + 1 < len(raw):
            nxt = raw[i + 1:i + 2]
            out += {b"n": b"\n", b"r": b"\r"}.get(nxt, nxt)
            i += 2
        else:
            out += c
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        return None


def parse_options(data: bytes) -> dict[str, dict[str, str]]:
    """{column family: {option: value}} of the merge_operator and compaction_filter_factory
    lines of a RocksDB OPTIONS file (an INI text; anything else in it is ignored)."""
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in data.split(b"\n"):
        line = line.strip()
        if line.startswith(b"["):
            current = None
            if line.startswith(b'[CFOptions "') and line.endswith(b'"]'):
                name = _unescape(line[len(b'[CFOptions "'):-2])
                if name is not None:
                    current = out.setdefault(name, {})
            continue
        if current is not None and b"=" in line:
            key, _, value = line.partition(b"=")
            if key in (b"merge_operator", b"compaction_filter_factory"):
                current[key.decode()] = value.decode("utf-8", "replace")
    return out


def check_options(handle: IncrementalHandle, db_dir: str) -> None:
    """The manifest's state metas against the OPTIONS file RocksDB wrote beside the data: each
    state's column family must be there with the merge operator and TTL compaction filter its
    meta implies (a merge kind, native function, numeric codec or TTL flag changed in the
    manifest would read the stored bytes the wrong way)."""
    names = sorted((f for f in handle.private if f.local_name.startswith("OPTIONS-")),
                   key=lambda f: (len(f.local_name), f.local_name))
    if not names:
        return  # no OPTIONS file (RocksDB writes one; a checkpoint without it is still opened)
    ref = names[-1]
    with open(os.path.join(db_dir, ref.local_name), "rb") as f:  # verified when placed
        options = parse_options(f.read())
    source = CheckpointStorage(handle.root).describe(ref.path)
    for meta in handle.states:
        have = options.get(meta["name"])
        if have is None:
            raise CorruptionError(
                f"{handle_name(handle)} lists state '{meta['name']}' but RocksDB's options "
                f"{source} have no column family of that name; one of them is corrupted")
        merge, ttl_filter = expected_options(meta)
        for option, want in (("merge_operator", merge), ("compaction_filter_factory", ttl_filter)):
            if option in have and have[option] != want:
                raise CorruptionError(
                    f"{handle_name(handle)} describes state '{meta['name']}' (merge "
                    f"{meta['merge']}, native function {meta['native_op']}, value codec "
                    f"{meta['value_codec']}, TTL {bool(meta.get('ttl'))}) as a column family "
                    f"with {option} {want}, but RocksDB's options {source} record "
                    f"{have[option]}; one of them is corrupted")


def check_data_layout(handle: IncrementalHandle, backend: Any) -> None:
    """The data against the manifest's key layout and state metas: the first and last entry
    of every column family must parse with the key codecs it records, lie in its key groups
    (a narrowed range would keep data no restore clips), and decode with the state's
    namespace, user key and value codecs (another codec would read other values). Two
    seeks and two decodes per column family; pickles are not unpickled."""
    name_of = handle_name(handle)
    r = handle.key_group_range
    if handle.key_codecs:
        backend.check_restored_layout(handle.max_parallelism, handle.key_codecs,
                                      handle.key_is_tuple, name_of)
    for meta in handle.states:
        edges = backend.edge_entries(backend.column_family(meta["name"]))
        if not edges:
            continue
        if not handle.key_codecs:
            raise CorruptionError(
                f"{name_of} records no key type (no key was ever set) but state "
                f"'{meta['name']}' holds entries; the manifest is corrupted")
        for raw_key, raw_value in edges:
            try:
                kg = _decode_entry(backend, meta, raw_key, raw_value)
            except (CorruptionError, ValueError) as e:
                raise CorruptionError(
                    f"{name_of} describes state '{meta['name']}' as {_codecs(meta)} with key "
                    f"codecs {list(handle.key_codecs)} (key_is_tuple {handle.key_is_tuple}), "
                    f"but its stored entries do not decode that way ({e}); the manifest or "
                    f"the data is corrupted") from None
            if not r.contains(kg):
                raise CorruptionError(
                    f"{name_of} records key groups {r.start}..{r.end} but its data holds an "
                    f"entry of '{meta['name']}' in key group {kg}; the manifest or the data is "
                    f"corrupted")


def _codecs(meta: dict[str, Any]) -> str:
    out = (f"{meta['kind']} with namespace codec {meta['namespace_codec']}, value codec "
           f"{meta['value_codec']}")
    if meta["kind"] in ("map", "sorted_map"):
        out += f", user key codec {meta['user_key_codec']}"
    return out + (", TTL" if meta.get("ttl") else "")


def _decode_entry(backend: Any, meta: dict[str, Any], raw_key: bytes, value: bytes) -> int:
    """Decodes one stored entry the way its meta says (key, namespace, user key, value);
    returns its key group. Pickles stay opaque: nothing is unpickled."""
    from .. import _native
    from ..evolution import value_codec
    from ..sparktypes import parse_ddl

    gate = _native.PickleGate(_native.PICKLE_OPAQUE, f"state '{meta['name']}'")
    if meta["kind"] == "timers":
        kg, _, _, ns = backend.parse_timer_key(raw_key)
        _native.decode_for_codec(meta["namespace_codec"], ns, gate)
        return kg
    has_uk = meta["kind"] in ("map", "sorted_map")
    kg, _, ns, uk = backend.parse_state_key(raw_key, meta["namespace_codec"], has_uk)
    _native.decode_for_codec(meta["namespace_codec"], ns, gate)
    # the value codec knows the state's schema history: entries may be of older versions
    rows = {"value_schema": value_codec(meta),
            "user_key_schema": _native.row_codec(parse_ddl(meta["user_key_schema"]))
            if meta.get("user_key_schema") else None}
    if has_uk:
        if rows["user_key_schema"] is not None:
            rows["user_key_schema"].decode_bytes(uk)
        else:
            _native.decode_for_codec(meta["user_key_codec"], uk, gate)
    row = rows["value_schema"]
    if meta.get("ttl"):
        value, _ = _native.split_ttl_value(meta["kind"], meta["value_codec"], value, row)
    _native.decode_stored_value(meta["kind"], meta["value_codec"], value, gate, row)
    return kg
