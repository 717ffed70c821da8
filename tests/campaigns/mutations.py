"""Damage applied to checkpoint files: bit flips, truncations, splices and structured edits of
sealed JSON documents (drop a field or an entry, change a number, a string, a type, one bit of
a key name), written in place and undone afterwards."""

from __future__ import annotations

import json
import os
import random
from typing import Any, Iterator

from stateengine.checkpoint import documents


def rewrite(path: str, data: bytes) -> None:
    """Replaces a file's content in place (same inode; no truncate-to-zero, which is slow on
    some file systems)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def flipped(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def dumps_like(doc: Any, original: bytes) -> bytes:
    """doc serialized the way the original document was (compact, sorted)."""
    return documents.dumps(doc) if original.endswith(b"\n") else json.dumps(doc).encode()


def _paths(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, path + (i,))


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        out = dict(doc)
        out[head] = _replace(doc[head], rest, value)
        return out
    out = list(doc)
    out[head] = _replace(doc[head], rest, value)
    return out


_DROP = object()


def _drop(doc: Any, path: tuple) -> Any:
    head, rest = path[0], path[1:]
    if rest:
        out = dict(doc) if isinstance(doc, dict) else list(doc)
        out[head] = _drop(doc[head], rest)
        return out
    if isinstance(doc, dict):
        return {k: v for k, v in doc.items() if k != head}
    return [v for i, v in enumerate(doc) if i != head]


def _rename_key(doc: Any, path: tuple, bit: int) -> Any:
    """The key at path with one bit of its first character flipped (a bit flip of a key)."""
    head, rest = path[0], path[1:]
    if rest:
        out = dict(doc) if isinstance(doc, dict) else list(doc)
        out[head] = _rename_key(doc[head], rest, bit)
        return out
    new = chr(ord(head[0]) ^ (1 << bit)) + head[1:]
    return {(new if k == head else k): v for k, v in doc.items()}


def _values_for(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return [not value, int(value), None]
    if isinstance(value, int):
        return [value + 1, value - 1, 0, -value - 1, 1 << 40, str(value), float(value) + 0.5,
                None, True]
    if isinstance(value, float):
        return [value + 1.0, 0.0, None]
    if isinstance(value, str):
        return [value + "x", "", value[:-1] if value else "y", "../" + value, "/" + value,
                value.upper() if value != value.upper() else value.lower(), 1, None]
    if isinstance(value, list):
        out: list[Any] = [[], value + value[:1] if value else [0], list(reversed(value)), {}]
        return out
    if isinstance(value, dict):
        return [{}, []]
    return [0, "x"]


def document_edits(doc: Any) -> Iterator[tuple[tuple, str, Any]]:
    """(path, description, edited document) of every structured edit of a parsed JSON
    document: every field dropped, every list entry dropped, every scalar changed a few ways
    (numbers, strings, types), and one bit of every key name flipped."""
    for path, node in _paths(doc):
        if path:
            yield path, f"drop {path}", _drop(doc, path)
            if isinstance(path[-1], str):
                yield path, f"rename key {path}", _rename_key(doc, path, 0)
        for new in _values_for(node):
            if new != node or type(new) is not type(node):
                yield path, f"set {path} = {new!r}"[:160], _replace(doc, path, new)


def structured_edits(data: bytes, limit: int | None = None,
                     rng: random.Random | None = None) -> list[tuple[str, bytes]]:
    """(description, new bytes) of the structured edits of a JSON document
    (``document_edits``). The checksum is left as it was (as damage would)."""
    out = []
    for _, what, new_doc in document_edits(json.loads(data)):
        new = dumps_like(new_doc, data)
        if new != data:
            out.append((what, new))
    if limit is not None and len(out) > limit:
        out = (rng or random.Random(0)).sample(out, limit)
    return out


def resealed(data: bytes, change: Any, key: bytes | None = None) -> bytes:
    """The document after change(doc) with its checksum (and HMAC, with key) recomputed, as a
    buggy or hostile writer would produce it."""
    doc = json.loads(data)
    change(doc)
    return documents.dumps(documents.seal(doc, key))


def splice(data: bytes, donor: bytes, rng: random.Random) -> bytes:
    """data with a run of bytes from donor written over (or into) a random place."""
    if not data:
        return donor[:16]
    n = rng.randint(1, max(1, min(len(donor), 64)))
    src = rng.randrange(0, max(1, len(donor) - n + 1))
    dst = rng.randrange(0, len(data))
    chunk = donor[src:src + n]
    if rng.random() < 0.5:
        return data[:dst] + chunk + data[dst + len(chunk):]
    return data[:dst] + chunk + data[dst:]
