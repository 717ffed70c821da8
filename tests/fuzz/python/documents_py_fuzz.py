"""atheris harness: the checkpoint document parsers: a handle's JSON document (documents.py
parse and seal check, handles.py field by field) and a full snapshot's meta block (meta.py).

Input: a document (starts with '{') or a meta block. A document that parses as a JSON object
is also tried resealed (its checksum recomputed, no key), so the fuzzer reaches the field
checks behind the seal. Oracles: only stateengine errors escape; a handle that decodes encodes
to a document that decodes to the same handle; a meta block that decodes encodes back to
the same bytes."""

from __future__ import annotations

import json

from harness import check, instrumented, main

with instrumented():
    from stateengine.checkpoint import documents
    from stateengine.checkpoint.handles import decode_handle, encode_handle
    from stateengine.checkpoint.meta import SnapshotMeta
    from stateengine.errors import StateEngineError


def _handle(data: bytes) -> None:
    try:
        handle, _ = decode_handle(data, "/root", "fuzz", None)
    except StateEngineError:
        return
    again, _ = decode_handle(encode_handle(handle, None), "/root", "again", None)
    check(again == handle, f"{handle} re-encoded decodes as {again}")


def test_one_input(data: bytes) -> None:
    if data[:1] != b"{":
        try:
            meta, end = SnapshotMeta.decode(data, "fuzz")
        except StateEngineError:
            return
        check(meta.encode(meta.format_version) == data[:end], "the meta block is not canonical")
        return
    _handle(data)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return
    if isinstance(doc, dict):
        doc.pop("checksum", None)
        try:
            resealed = documents.dumps(documents.seal(doc, None))
        except (TypeError, ValueError):  # not JSON the sealer writes (NaN, huge ints...)
            return
        _handle(resealed)


if __name__ == "__main__":
    main(test_one_input)
