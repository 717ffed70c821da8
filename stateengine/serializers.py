"""Serializer choice: which byte encoding (codec) a key, namespace, value or user key uses.

The encodings themselves live in C++ (csrc/codec.h) and are applied by the native bindings;
this module maps what users write in descriptors (``int``, ``str``, ``numpy.float32``,
``"bigint"``, ``object``...) to codec ids, which snapshots persist.

Values default to ``ANY``: a tag byte then a native encoding for ``None``, ``bool``, ``int``
(any size), ``float``, ``str``, ``bytes``, numpy scalars of those kinds (decoded as the matching
Python type) and tuples, lists and dicts of all these (nested up to 64 levels, decoded as the
same container types). ANY never pickles: other objects raise ``SerializationError``; store them
in a state declared ``value_type="pickle"`` on a backend opened with ``allow_pickle=True``. A
concrete ``value_type`` selects a strict codec without the tag, which refuses other types with
``SerializationError``. A Spark schema (a DDL string such as ``"count long, last string"`` or a
pyspark ``DataType``; see sparktypes.py) selects STRUCT, the typed row codec, whose schema the
state's meta carries as its ``value_schema`` / ``user_key_schema`` attribute.

Namespaces and map user keys of ANY use the same encoding, which is canonical (equal values of
one type have equal bytes), so tuples work as windows and composite user keys.
"""

from __future__ import annotations

import base64
import json
from enum import IntEnum
from typing import Any

import numpy as np

from . import _native, sparktypes
from .errors import KeyTypeError, StateRegistrationError


class Codec(IntEnum):
    """Codec ids; persisted in snapshot metas, so values never change."""

    VOID = 0
    ANY = 1
    BIGINT = 2
    DOUBLE = 3
    STRING = 4
    BINARY = 5
    BOOLEAN = 6
    PICKLE = 7
    INT = 8
    FLOAT = 9
    ORDERED_BIGINT = 10
    ORDERED_DOUBLE = 11
    ORDERED_STRING = 12
    ORDERED_BINARY = 13
    STRUCT = 14


_BY_NAME = {
    "any": Codec.ANY, "object": Codec.ANY, "pickle": Codec.PICKLE,
    "bigint": Codec.BIGINT, "long": Codec.BIGINT, "int64": Codec.BIGINT,
    "int": Codec.INT, "integer": Codec.INT, "int32": Codec.INT,
    "double": Codec.DOUBLE, "float64": Codec.DOUBLE,
    "float": Codec.FLOAT, "float32": Codec.FLOAT,
    "string": Codec.STRING, "str": Codec.STRING,
    "binary": Codec.BINARY, "bytes": Codec.BINARY,
    "boolean": Codec.BOOLEAN, "bool": Codec.BOOLEAN,
}

_BY_TYPE: dict[Any, Codec] = {
    object: Codec.ANY, int: Codec.BIGINT, float: Codec.DOUBLE, str: Codec.STRING,
    bytes: Codec.BINARY, bool: Codec.BOOLEAN,
    np.int64: Codec.BIGINT, np.int32: Codec.INT, np.float64: Codec.DOUBLE,
    np.float32: Codec.FLOAT, np.bool_: Codec.BOOLEAN,
}

_KEY_CODECS = {Codec.BIGINT, Codec.INT, Codec.DOUBLE, Codec.FLOAT, Codec.STRING, Codec.BINARY,
               Codec.BOOLEAN}

_ORDERED = {Codec.BIGINT: Codec.ORDERED_BIGINT, Codec.INT: Codec.ORDERED_BIGINT,
            Codec.DOUBLE: Codec.ORDERED_DOUBLE, Codec.FLOAT: Codec.ORDERED_DOUBLE,
            Codec.STRING: Codec.ORDERED_STRING, Codec.BINARY: Codec.ORDERED_BINARY}


def _lookup(spec: Any, what: str) -> Codec:
    if isinstance(spec, Codec):
        return spec
    if isinstance(spec, str):
        codec = _BY_NAME.get(spec.lower())
    else:
        codec = _BY_TYPE.get(spec) or _BY_TYPE.get(getattr(np.dtype(spec), "type", None)
                                                  if _is_dtype_like(spec) else None)
    if codec is None:
        raise StateRegistrationError(
            f"unsupported {what} {spec!r}; use one of int, float, str, bytes, bool, numpy "
            f"int32/int64/float32/float64, object (the default serializer), or the names "
            f"{sorted(_BY_NAME)}")
    return codec


def _is_dtype_like(spec: Any) -> bool:
    try:
        np.dtype(spec)
    except TypeError:
        return False
    return not isinstance(spec, str)


def value_codec(value_type: Any = None) -> Codec:
    """Codec of values (and list elements, accumulators): None means ANY."""
    return typed_codec(value_type, "value_type")[0]


# Spark types that an existing primitive codec stores: declared as a schema, they keep it.
_PRIMITIVE_SPARK = {"bigint": Codec.BIGINT, "int": Codec.INT, "double": Codec.DOUBLE,
                    "float": Codec.FLOAT, "string": Codec.STRING, "binary": Codec.BINARY,
                    "boolean": Codec.BOOLEAN}


def typed_codec(spec: Any, what: str) -> tuple[Codec, sparktypes.DataType | None]:
    """(codec, schema) of a value or user key type: None is ANY; names and Python types of
    the primitive codecs keep them (``"int"``, ``"bigint"``, ``str``...); any other string is
    Spark DDL and a pyspark DataType a schema, both stored by the STRUCT codec (a schema of
    one primitive Spark type, e.g. ``LongType()``, uses that type's primitive codec)."""
    if spec is None:
        return Codec.ANY, None
    if isinstance(spec, str) and spec.lower() in _BY_NAME:
        return _BY_NAME[spec.lower()], None
    if isinstance(spec, (str, sparktypes.DataType)) or sparktypes.is_spark_type(spec):
        schema = sparktypes.to_schema(spec)
        if isinstance(schema, sparktypes.AtomicType) and schema.name in _PRIMITIVE_SPARK:
            return _PRIMITIVE_SPARK[schema.name], None
        return Codec.STRUCT, schema
    return _lookup(spec, what), None


def namespace_codec(namespace_type: Any = None) -> Codec:
    """Namespaces are VOID (only the default namespace, one 0x00 byte) unless a state declares
    a namespace type; then they use ANY, whose encoding of None is that same 0x00 byte."""
    return Codec.VOID if namespace_type is None else Codec.ANY


def map_user_key_codec(user_key_type: Any = None) -> Codec:
    return typed_codec(user_key_type, "user_key_type")[0]


def sorted_user_key_codec(user_key_type: Any) -> Codec:
    """Order-preserving codec for SortedMapState user keys (int, float, str, bytes)."""
    codec = _ORDERED.get(typed_codec(user_key_type, "user_key_type")[0])
    if codec is None:
        raise StateRegistrationError(
            f"SortedMapState user keys must be int, float, str or bytes (their encodings sort "
            f"like their values), not {user_key_type!r}")
    return codec


def key_codecs(key_type: Any) -> tuple[tuple[int, ...], bool]:
    """(column codecs, is_tuple) for a backend key type: one type or a tuple of types."""
    if isinstance(key_type, (tuple, list)):
        if not key_type:
            raise KeyTypeError("key_type must name at least one column type")
        return tuple(_key_column(t) for t in key_type), True
    return (_key_column(key_type),), False


def _key_column(spec: Any) -> int:
    try:
        codec = _lookup(spec, "key column type")
    except StateRegistrationError as e:
        raise KeyTypeError(str(e)) from None
    if codec not in _KEY_CODECS:
        raise KeyTypeError(
            f"key columns must be bigint, int, double, float, string, binary or boolean (the types "
            f"whose Spark hash() the engine reproduces), not {spec!r}")
    return int(codec)


def codec_name(codec: int) -> str:
    return Codec(codec).name.lower()


def to_json(value: Any) -> Any:
    """A JSON-compatible form of a stored value, for dumps and state readers: tuples become
    lists, dict keys that are not str become their JSON text, a pickle that was not
    unpickled becomes ``{"pickled": "<base64>", "bytes": n}``, other scalars (bytes...) their
    repr."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else json.dumps(to_json(k)): to_json(v)
                for k, v in value.items()}
    if isinstance(value, _native.PickledValue):
        return {"pickled": base64.b64encode(value.data).decode("ascii"), "bytes": len(value.data)}
    return repr(value)
