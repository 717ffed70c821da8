"""The Spark type of the values of a default-serializer ("any") state, inferred from the values.

``read_state`` gives every column a proper Spark type. Values of the default serializer carry
no declared type, so a first pass over the state infers one (each partition infers the type of
its values, the driver merges them), with the rules of Spark's own schema inference, plus
JSON's for dicts:

* ``None`` is a null of any type; ``bool`` is boolean, ``int`` bigint (ints beyond 64 bits:
  decimal(38,0) when they fit), ``float`` double (an int where doubles are seen widens to
  double), ``str`` string, ``bytes`` binary;
* a ``list`` is an array of its elements' merged type; a ``tuple`` a struct ``_1``, ``_2``...
  (tuples of one length, field by field);
* a ``dict`` is a map of its keys' and values' merged types when those agree; a dict with text
  keys whose values do not share one type is a record: a struct with a field per key seen
  (sorted by name, null where a dict lacks the key), as JSON objects are read by Spark;
* anything else, or values that do not merge (a bigint and a string in one place), cannot be
  inferred: the read fails with ``MixedTypesError`` naming the types and asking for an explicit
  type. A column of nulls only (or empty lists) reads as string.

Partial results travel from tasks to the driver as JSON (``to_json``/``from_json``).
"""

from __future__ import annotations

from typing import Any

from .. import sparktypes as st
from ..errors import MixedTypesError

# A dict with more distinct text keys than this is never read as a record.
MAX_RECORD_FIELDS = 200


class _Conflict:
    def __init__(self, why: str) -> None:
        self.why = why


class _Dict:
    """A dict seen during inference: a map, or (text keys) a record."""

    def __init__(self, key: Any, value: Any, fields: dict[str, Any] | None) -> None:
        self.key = key          # merged key type (None: no key seen)
        self.value = value      # merged value type, or a _Conflict
        self.fields = fields    # text key -> merged type; None if not a record


# Inferred types: None (nothing known), "bigint"/"double"/... (atomic), ("array", t),
# ("tuple", [t...]), _Dict, _Conflict.

def of(v: Any) -> Any:
    """The inferred type of one Python value."""
    if v is None:
        return None
    t = type(v)
    if t is bool:
        return "boolean"
    if t is int:
        if -2**63 <= v < 2**63:
            return "bigint"
        return "decimal(38,0)" if abs(v) < 10**38 else _Conflict(f"an integer of {v.bit_length()} bits")
    if t is float:
        return "double"
    if t is str:
        return "string"
    if t is bytes:
        return "binary"
    if t is list:
        elem = None
        for x in v:
            elem = merge(elem, of(x))
        return ("array", elem)
    if t is tuple:
        return ("tuple", [of(x) for x in v])
    if t is dict:
        key = value = None
        text = True
        for k, x in v.items():
            key = merge(key, of(k))
            value = merge(value, of(x))
            text = text and type(k) is str
        fields = {k: of(x) for k, x in v.items()} if text and len(v) <= MAX_RECORD_FIELDS else None
        return _Dict(key, value, fields)
    return _Conflict(f"Python type {t.__name__}")


def _name(t: Any) -> str:
    if t is None:
        return "null"
    if isinstance(t, str):
        return t
    if isinstance(t, _Conflict):
        return t.why
    if isinstance(t, _Dict):
        return "dict"
    return "list" if t[0] == "array" else f"tuple of {len(t[1])}"


def merge(a: Any, b: Any) -> Any:
    """The type both a and b fit, or a _Conflict saying why there is none."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, _Conflict):
        return a
    if isinstance(b, _Conflict):
        return b
    if isinstance(a, str) and isinstance(b, str):
        if a == b:
            return a
        if {a, b} == {"bigint", "double"}:
            return "double"
        if {a, b} == {"bigint", "decimal(38,0)"}:
            return "decimal(38,0)"
        return _Conflict(f"{a} and {b}")
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0]:
        if a[0] == "array":
            return ("array", merge(a[1], b[1]))
        if len(a[1]) != len(b[1]):
            return _Conflict(f"tuples of {len(a[1])} and of {len(b[1])} items")
        return ("tuple", [merge(x, y) for x, y in zip(a[1], b[1])])
    if isinstance(a, _Dict) and isinstance(b, _Dict):
        fields = None
        if a.fields is not None and b.fields is not None:
            fields = dict(a.fields)
            for k, t in b.fields.items():
                fields[k] = merge(fields.get(k), t)
            if len(fields) > MAX_RECORD_FIELDS:
                fields = None
        return _Dict(merge(a.key, b.key), merge(a.value, b.value), fields)
    return _Conflict(f"{_name(a)} and {_name(b)}")


def finish(t: Any) -> st.DataType:
    """The Spark type of an inferred type; MixedTypesError (its message without context) if
    it has none."""
    if t is None:
        return st.STRING
    if isinstance(t, _Conflict):
        raise MixedTypesError(t.why)
    if isinstance(t, str):
        return st.parse_ddl(t)
    if isinstance(t, _Dict):
        if isinstance(t.key, _Conflict):
            raise MixedTypesError(f"dict keys of {t.key.why}")
        if not isinstance(t.value, _Conflict):
            return st.MapType(finish(t.key), finish(t.value))
        if t.fields is None:
            raise MixedTypesError(f"dict values of {t.value.why}")
        return st.StructType(tuple(st.StructField(k, finish(f))
                                   for k, f in sorted(t.fields.items())))
    if t[0] == "array":
        return st.ArrayType(finish(t[1]))
    if not t[1]:
        raise MixedTypesError("empty tuples")
    return st.StructType(tuple(st.StructField(f"_{i + 1}", finish(x)) for i, x in enumerate(t[1])))


def to_json(t: Any) -> Any:
    if t is None or isinstance(t, str):
        return t
    if isinstance(t, _Conflict):
        return {"conflict": t.why}
    if isinstance(t, _Dict):
        return {"dict": [to_json(t.key), to_json(t.value),
                         None if t.fields is None else {k: to_json(f) for k, f in t.fields.items()}]}
    return [t[0], to_json(t[1]) if t[0] == "array" else [to_json(x) for x in t[1]]]


def from_json(j: Any) -> Any:
    if j is None or isinstance(j, str):
        return j
    if isinstance(j, dict):
        if "conflict" in j:
            return _Conflict(j["conflict"])
        key, value, fields = j["dict"]
        return _Dict(from_json(key), from_json(value),
                     None if fields is None else {k: from_json(f) for k, f in fields.items()})
    return (j[0], from_json(j[1]) if j[0] == "array" else [from_json(x) for x in j[1]])


def shape(v: Any, t: st.DataType) -> Any:
    """v as the row codec of t takes it: a dict read as a record becomes a tuple in field
    order (null for a missing key; a key that is not a field is an error), recursively."""
    if v is None:
        return None
    if isinstance(t, st.StructType):
        if isinstance(v, dict):
            extra = [k for k in v if k not in set(t.names)]
            if extra:
                raise MixedTypesError(f"a dict has key {extra[0]!r}, which is not a field of {t}")
            return tuple(shape(v.get(f.name), f.type) for f in t.fields)
        if isinstance(v, (tuple, list)) and len(v) == len(t.fields):
            return tuple(shape(x, f.type) for x, f in zip(v, t.fields))
        return v
    if isinstance(t, st.ArrayType) and isinstance(v, (list, tuple)):
        return tuple(shape(x, t.element) for x in v)  # tuples: map keys must be hashable
    if isinstance(t, st.MapType) and isinstance(v, dict):
        return {shape(k, t.key): shape(x, t.value) for k, x in v.items()}
    return v


def needs_shaping(t: st.DataType) -> bool:
    if isinstance(t, st.StructType):
        return True
    if isinstance(t, st.ArrayType):
        return needs_shaping(t.element)
    if isinstance(t, st.MapType):
        return needs_shaping(t.key) or needs_shaping(t.value)
    return False
