"""Checkpoint documents: the JSON files that decide what is restored (version manifests,
snapshot and checkpoint handles, operator properties, commit markers), sealed against damage
and, with a key, against tampering.

A document of format 2 carries ``checksum``, the SHA-256 of its canonical form: the JSON of
every field except ``checksum``, ``hmac`` and ``root``, keys sorted, no whitespace, ASCII
only. With a key configured it also carries ``hmac``, HMAC-SHA256 of the same bytes. A reader
derives the canonical form again from the parsed document, so whitespace is free but every key
name and every value is covered; ``root`` is never persisted (a checkpoint is resolved against
the root it is read from, so it can be copied or moved).

Documents written before format 2 have no checksum. They are read only in exactly their old
shape (no ``checksum``/``hmac``, the old ``format`` marker, the old set of fields) and only while
no key is configured; a format-2 document without a valid checksum is corruption.
"""

from __future__ import annotations

import hashlib
import hmac as _hmac
import json
import math
import os
from dataclasses import dataclass
from typing import Any

from ..errors import CorruptionError

FORMAT = 2
KEY_ENV = "STATEENGINE_CHECKPOINT_KEY"
# A manifest lists every file of a checkpoint: ~200 bytes each, so this allows about a million
# files while a hostile size cannot make a reader buffer more.
MAX_DOCUMENT_BYTES = 256 << 20
_UNSEALED = ("checksum", "hmac", "root")


def resolve_key(key: bytes | str | None) -> bytes | None:
    """The HMAC key to use: ``key`` if given, else ``$STATEENGINE_CHECKPOINT_KEY`` (UTF-8), else
    None (documents carry a checksum only)."""
    if key is None:
        env = os.environ.get(KEY_ENV)
        return env.encode("utf-8") if env else None
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise ValueError("hmac_key must be non-empty bytes or str")
    return bytes(key)


def canonical(doc: dict[str, Any]) -> bytes:
    """The bytes the checksum and HMAC cover."""
    body = {k: v for k, v in doc.items() if k not in _UNSEALED}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def seal(doc: dict[str, Any], key: bytes | None) -> dict[str, Any]:
    """doc as format 2 with its checksum (and HMAC with a key); ``root`` is dropped."""
    body = {k: v for k, v in doc.items() if k not in _UNSEALED}
    body["format"] = FORMAT
    c = canonical(body)
    body["checksum"] = hashlib.sha256(c).hexdigest()
    if key:
        body["hmac"] = _hmac.new(key, c, hashlib.sha256).hexdigest()
    return body


def dumps(doc: dict[str, Any]) -> bytes:
    """A sealed document's file content: compact, sorted JSON (``stateengine`` or ``jq``
    print it readably)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii") + b"\n"


@dataclass(frozen=True)
class LegacyShape:
    """The exact shape of a document kind before format 2."""

    required: frozenset[str]
    optional: frozenset[str] = frozenset()
    format_marker: int | None = None  # the old "format" value, None if it had no such field

    def matches(self, doc: dict[str, Any]) -> bool:
        if "checksum" in doc or "hmac" in doc:
            return False
        if self.format_marker is None:
            if "format" in doc:
                return False
        elif type(doc.get("format")) is not int or doc["format"] != self.format_marker:
            return False
        keys = set(doc) - {"format"}
        return self.required <= keys <= self.required | self.optional


def parse(data: bytes, source: str) -> dict[str, Any]:
    """A JSON object from data, or CorruptionError naming source."""
    try:
        # NaN and Infinity are no JSON: a document holding one could not be canonicalised
        doc = json.loads(data, parse_constant=no_constant, parse_float=finite_float)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise CorruptionError(f"checkpoint file {source} is not valid JSON ({e}); it is "
                              f"corrupted or truncated") from None
    if not isinstance(doc, dict):
        raise CorruptionError(f"checkpoint file {source} holds a JSON {type(doc).__name__}, "
                              f"not an object; it is corrupted")
    return doc


def no_constant(name: str) -> Any:
    """json's parse_constant hook: NaN and Infinity are no JSON values (never written)."""
    raise ValueError(f"{name} is not a JSON value")


def finite_float(text: str) -> float:
    """A JSON number as a float, refused where it overflows (``1e999`` parses as infinity,
    which no writer produces and canonical() cannot encode)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of the range of a double")
    return value


def open_sealed(doc: dict[str, Any], source: str, key: bytes | None,
                legacy: LegacyShape | None) -> bool:
    """Checks a parsed document's seal; returns True if it is a legacy (format 1) document.

    Raises CorruptionError naming source for a missing or wrong checksum, a format this build
    does not know, a legacy document while a key is configured, or a missing or wrong HMAC."""
    if legacy is not None and legacy.matches(doc):
        if key:
            raise CorruptionError(
                f"checkpoint file {source} carries no HMAC (it predates checksums or was written "
                f"without a key) but a checkpoint key is configured; refusing an unauthenticated "
                f"document")
        return True
    fmt = doc.get("format")
    if type(fmt) is not int or fmt != FORMAT:
        raise CorruptionError(
            f"checkpoint file {source} has format {fmt!r}, not {FORMAT}, and is not a valid "
            f"document of an earlier format; it is corrupted (or written by a newer stateengine)")
    checksum = doc.get("checksum")
    if not isinstance(checksum, str):
        raise CorruptionError(f"checkpoint file {source} has no checksum (format {FORMAT} "
                              f"documents always carry one); it is corrupted")
    c = canonical(doc)
    if not _same(checksum, hashlib.sha256(c).hexdigest()):
        raise CorruptionError(f"checkpoint file {source} fails its checksum: its content is not "
                              f"what was written; it is corrupted")
    if key:
        mac = doc.get("hmac")
        if not isinstance(mac, str):
            raise CorruptionError(f"checkpoint file {source} carries no HMAC but a checkpoint "
                                  f"key is configured; refusing an unauthenticated document")
        if not _same(mac, _hmac.new(key, c, hashlib.sha256).hexdigest()):
            raise CorruptionError(f"checkpoint file {source} fails its HMAC check: it was "
                                  f"tampered with or written with another key")
    return False


def _same(found: str, expected: str) -> bool:
    # compare_digest refuses non-ASCII str; a damaged digest may hold anything
    return _hmac.compare_digest(found.encode("utf-8", "replace"), expected.encode("ascii"))


def load(data: bytes, source: str, key: bytes | None,
         legacy: LegacyShape | None) -> tuple[dict[str, Any], bool]:
    """(document, is legacy) of a sealed document's bytes."""
    doc = parse(data, source)
    return doc, open_sealed(doc, source, key, legacy)


# ---- field checks ------------------------------------------------------------------------------
# Used by the decoders after the seal is checked: a sealed document can still be legacy, or
# written by a buggy or hostile writer, so every field's type and range is checked too. They
# raise Invalid; decoders turn it into a CorruptionError naming the file.

class Invalid(ValueError):
    pass


def want_int(value: Any, what: str, lo: int | None = None, hi: int | None = None) -> int:
    if type(value) is not int:
        raise Invalid(f"{what} is {value!r}, not an integer")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise Invalid(f"{what} {value} lies outside [{lo}, {hi}]")
    return value


def want_bool(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise Invalid(f"{what} is {value!r}, not true/false")
    return value


def want_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise Invalid(f"{what} is {value!r}, not a string")
    return value


def want_list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise Invalid(f"{what} is {type(value).__name__}, not a list")
    return value


def want_dict(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise Invalid(f"{what} is {type(value).__name__}, not an object")
    return value


def field(doc: dict, name: str, what: str) -> Any:
    if name not in doc:
        raise Invalid(f"{what} has no field '{name}'")
    return doc[name]
