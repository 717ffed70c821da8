"""Spark SQL data types for typed state, without pyspark or a JVM.

A state declares its value (or map user key) type as a Spark schema: a DDL string such as
``"count long, last string, seen array<long>"`` or a ``pyspark.sql.types`` object (a
``StructType``, or any supported ``DataType``). This module parses both into a small type model,
gives every type a canonical string (persisted as the state's ``value_schema`` /
``user_key_schema`` attribute, so it must never change for a given type), maps types to Arrow
and back to Spark DDL, and compiles a type into the flat program the C++ row codec walks
(csrc/row_codec.h).

Supported: bigint (long), int (integer), smallint (short), tinyint (byte), double, float (real),
string (also char(n)/varchar(n)), binary, boolean, decimal(p, s) (p <= 38), date, timestamp,
timestamp_ntz, array<T>, map<K, V> and struct<...>, nested up to MAX_DEPTH levels, with
``NOT NULL`` on struct fields (and, beyond Spark's DDL, after an array's element type or a map's
value type).
"""

from __future__ import annotations

import re
import struct as _struct
from dataclasses import dataclass
from typing import Any

from .errors import StateRegistrationError

# Types nest at most this deep (a struct inside an array is two levels); the C++ walker's
# recursion is bounded by the schema's depth.
MAX_DEPTH = 32
MAX_FIELDS = 1 << 16
MAX_DECIMAL_PRECISION = 38


class DataType:
    """Base of the type model; instances are immutable and compare by value."""

    def canonical(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def ddl(self) -> str:
        """The type in Spark's DDL (nullability of nested types left out, as Spark reads it)."""
        return self.canonical()

    def __str__(self) -> str:
        return self.canonical()


@dataclass(frozen=True)
class AtomicType(DataType):
    name: str  # one of ATOMIC_NAMES

    def canonical(self) -> str:
        return self.name


@dataclass(frozen=True)
class DecimalType(DataType):
    precision: int = 10
    scale: int = 0

    def canonical(self) -> str:
        return f"decimal({self.precision},{self.scale})"


@dataclass(frozen=True)
class ArrayType(DataType):
    element: DataType
    contains_null: bool = True

    def canonical(self) -> str:
        return f"array<{self.element.canonical()}{'' if self.contains_null else ' NOT NULL'}>"

    def ddl(self) -> str:
        return f"array<{self.element.ddl()}>"


@dataclass(frozen=True)
class MapType(DataType):
    key: DataType
    value: DataType
    value_contains_null: bool = True

    def canonical(self) -> str:
        return (f"map<{self.key.canonical()},{self.value.canonical()}"
                f"{'' if self.value_contains_null else ' NOT NULL'}>")

    def ddl(self) -> str:
        return f"map<{self.key.ddl()},{self.value.ddl()}>"


@dataclass(frozen=True)
class StructField:
    name: str
    type: DataType
    nullable: bool = True


@dataclass(frozen=True)
class StructType(DataType):
    fields: tuple[StructField, ...]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def canonical(self) -> str:
        return "struct<" + ",".join(
            f"{_quote(f.name)}:{f.type.canonical()}{'' if f.nullable else ' NOT NULL'}"
            for f in self.fields) + ">"

    def ddl(self) -> str:
        return "struct<" + ",".join(f"{_quote(f.name)}:{f.type.ddl()}" for f in self.fields) + ">"

    def field_list_ddl(self) -> str:
        """``a bigint, b string``: the struct as a DDL field list (a DataFrame schema)."""
        return ", ".join(f"{_quote(f.name)} {f.type.ddl()}" for f in self.fields)


ATOMIC_NAMES = ("bigint", "int", "smallint", "tinyint", "double", "float", "string", "binary",
                "boolean", "date", "timestamp", "timestamp_ntz")

_ALIASES = {
    "long": "bigint", "bigint": "bigint", "int": "int", "integer": "int", "short": "smallint",
    "smallint": "smallint", "byte": "tinyint", "tinyint": "tinyint", "double": "double",
    "float": "float", "real": "float", "string": "string", "binary": "binary",
    "boolean": "boolean", "bool": "boolean", "date": "date", "timestamp": "timestamp",
    "timestamp_ltz": "timestamp", "timestamp_ntz": "timestamp_ntz",
}

BIGINT = AtomicType("bigint")
DOUBLE = AtomicType("double")
STRING = AtomicType("string")
BINARY = AtomicType("binary")
BOOLEAN = AtomicType("boolean")


def _quote(name: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return name
    return "`" + name.replace("`", "``") + "`"


# ---- DDL parsing --------------------------------------------------------------------------

class SchemaError(StateRegistrationError):
    """A schema string or object that is not a supported Spark type."""


_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|('(?:[^'\\]|\\.)*')"
                    r"|(\S))")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while True:
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                break
            quoted, ident, number, literal, sym = m.groups()
            at = m.start(m.lastindex)
            if quoted is not None:
                self.tokens.append(("name", quoted[1:-1].replace("``", "`"), at))
            elif ident is not None:
                self.tokens.append(("ident", ident, at))
            elif number is not None:
                self.tokens.append(("number", number, at))
            elif literal is not None:
                self.tokens.append(("literal", literal, at))
            else:
                self.tokens.append(("sym", sym, at))
            pos = m.end()
        if text[pos:].strip():
            raise self.error("unexpected text", pos)
        self.i = 0

    def error(self, what: str, at: int | None = None) -> SchemaError:
        if at is None:
            at = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        return SchemaError(f"cannot parse the schema {self.text!r}: {what} at position {at} "
                           f"(write it as Spark DDL, e.g. \"count long, last string, seen "
                           f"array<long>\", or pass a pyspark StructType)")

    def peek(self, offset: int = 0) -> tuple[str, str, int] | None:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else None

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def take(self) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise self.error("unexpected end")
        self.i += 1
        return tok

    def accept_sym(self, sym: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == "sym" and tok[1] == sym:
            self.i += 1
            return True
        return False

    def expect_sym(self, sym: str) -> None:
        if not self.accept_sym(sym):
            raise self.error(f"expected '{sym}'")

    def accept_word(self, word: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == "ident" and tok[1].lower() == word:
            self.i += 1
            return True
        return False

    def not_null(self) -> bool:
        """Consumes ``NOT NULL`` if it comes next (``NULL`` alone is the default)."""
        if self.accept_word("not"):
            if not self.accept_word("null"):
                raise self.error("expected NULL after NOT")
            return True
        self.accept_word("null")
        return False

    def number(self) -> int:
        kind, text, _ = self.take()
        if kind != "number":
            raise self.error("expected a number")
        return int(text)

    def data_type(self, depth: int) -> DataType:
        if depth > MAX_DEPTH:
            raise self.error(f"types nest deeper than {MAX_DEPTH} levels")
        kind, word, at = self.take()
        if kind != "ident":
            self.i -= 1
            raise self.error("expected a type name")
        w = word.lower()
        if w in ("array",):
            self.expect_sym("<")
            element = self.data_type(depth + 1)
            contains_null = not self.not_null()
            self.expect_sym(">")
            return ArrayType(element, contains_null)
        if w == "map":
            self.expect_sym("<")
            key = self.data_type(depth + 1)
            self.expect_sym(",")
            value = self.data_type(depth + 1)
            value_null = not self.not_null()
            self.expect_sym(">")
            return MapType(key, value, value_null)
        if w == "struct":
            self.expect_sym("<")
            fields: list[StructField] = []
            if not self.accept_sym(">"):
                while True:
                    fields.append(self.field(depth + 1, colon_optional=True))
                    if self.accept_sym(">"):
                        break
                    self.expect_sym(",")
            return StructType(tuple(fields))
        if w in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.accept_sym("("):
                precision = self.number()
                if self.accept_sym(","):
                    scale = self.number()
                self.expect_sym(")")
            return DecimalType(precision, scale)
        if w in ("char", "varchar"):
            self.expect_sym("(")
            self.number()
            self.expect_sym(")")
            return STRING
        name = _ALIASES.get(w)
        if name is None:
            self.i -= 1
            raise self.error(f"unknown type {word!r}")
        return AtomicType(name)

    def field(self, depth: int, colon_optional: bool) -> StructField:
        kind, name, _ = self.take()
        if kind not in ("ident", "name"):
            self.i -= 1
            raise self.error("expected a field name")
        self.accept_sym(":")
        t = self.data_type(depth)
        nullable = not self.not_null()
        if self.accept_word("comment"):
            k, _, _ = self.take()
            if k != "literal":
                raise self.error("expected a quoted comment")
        return StructField(name, t, nullable)


def parse_ddl(text: str) -> DataType:
    """The type a Spark DDL string describes: a type (``array<long>``, ``struct<a:int>``,
    ``decimal(10,2)``) or a field list (``a int, b string NOT NULL``), which is a struct."""
    if not isinstance(text, str) or not text.strip():
        raise SchemaError(f"a schema string must be non-empty DDL, got {text!r}")
    p = _Parser(text)
    try:  # as Spark does: first as one type, then as the fields of a struct
        t = p.data_type(1)
        if p.at_end():
            return check_type(t)
    except SchemaError:
        pass
    p.i = 0
    fields = [p.field(1, colon_optional=True)]
    while not p.at_end():
        p.expect_sym(",")
        fields.append(p.field(1, colon_optional=True))
    return check_type(StructType(tuple(fields)))


def check_type(t: DataType, depth: int = 1, where: str = "the schema") -> DataType:
    """t if every part is supported: decimals within Spark's precision, non-empty structs with
    distinct field names, map keys without maps (they must compare by value), bounded depth."""
    if depth > MAX_DEPTH:
        raise SchemaError(f"{where} nests deeper than {MAX_DEPTH} levels")
    if isinstance(t, DecimalType):
        if not (1 <= t.precision <= MAX_DECIMAL_PRECISION and 0 <= t.scale <= t.precision):
            raise SchemaError(f"{where}: decimal({t.precision},{t.scale}) is not a Spark decimal "
                              f"(precision 1..{MAX_DECIMAL_PRECISION}, scale 0..precision)")
    elif isinstance(t, ArrayType):
        check_type(t.element, depth + 1, where)
    elif isinstance(t, MapType):
        if contains_map(t.key):
            raise SchemaError(f"{where}: a map key cannot contain a map ({t.canonical()}); Spark "
                              f"refuses map keys that hold maps")
        check_type(t.key, depth + 1, where)
        check_type(t.value, depth + 1, where)
    elif isinstance(t, StructType):
        if not t.fields:
            raise SchemaError(f"{where}: a struct needs at least one field")
        if len(t.fields) > MAX_FIELDS:
            raise SchemaError(f"{where}: a struct has at most {MAX_FIELDS} fields")
        seen = set()
        for f in t.fields:
            if not isinstance(f.name, str) or not f.name:
                raise SchemaError(f"{where}: field names must be non-empty strings")
            if f.name in seen:
                raise SchemaError(f"{where}: field name {f.name!r} appears twice")
            seen.add(f.name)
            check_type(f.type, depth + 1, where)
    elif not (isinstance(t, AtomicType) and t.name in ATOMIC_NAMES):
        raise SchemaError(f"{where}: unsupported type {t!r}")
    return t


def contains_map(t: DataType) -> bool:
    if isinstance(t, MapType):
        return True
    if isinstance(t, ArrayType):
        return contains_map(t.element)
    if isinstance(t, StructType):
        return any(contains_map(f.type) for f in t.fields)
    return False


# ---- pyspark types ------------------------------------------------------------------------

_SPARK_ATOMIC = {
    "LongType": "bigint", "IntegerType": "int", "ShortType": "smallint", "ByteType": "tinyint",
    "DoubleType": "double", "FloatType": "float", "StringType": "string", "CharType": "string",
    "VarcharType": "string", "BinaryType": "binary", "BooleanType": "boolean",
    "DateType": "date", "TimestampType": "timestamp", "TimestampNTZType": "timestamp_ntz",
}


def is_spark_type(obj: Any) -> bool:
    """Whether obj is a pyspark.sql.types.DataType (checked without importing pyspark)."""
    return any(c.__name__ == "DataType" and c.__module__.startswith("pyspark.sql.types")
               for c in type(obj).__mro__)


def from_spark(dt: Any, depth: int = 1) -> DataType:
    """The type model of a pyspark DataType (works without a SparkSession or JVM)."""
    if depth > MAX_DEPTH:
        raise SchemaError(f"the schema nests deeper than {MAX_DEPTH} levels")
    name = type(dt).__name__
    if name in _SPARK_ATOMIC:
        return AtomicType(_SPARK_ATOMIC[name])
    if name == "DecimalType":
        return DecimalType(dt.precision, dt.scale)
    if name == "ArrayType":
        return ArrayType(from_spark(dt.elementType, depth + 1), bool(dt.containsNull))
    if name == "MapType":
        return MapType(from_spark(dt.keyType, depth + 1), from_spark(dt.valueType, depth + 1),
                       bool(dt.valueContainsNull))
    if name == "StructType":
        return StructType(tuple(StructField(f.name, from_spark(f.dataType, depth + 1),
                                            bool(f.nullable)) for f in dt.fields))
    raise SchemaError(f"Spark type {dt!r} is not supported in typed state; use bigint, int, "
                      f"smallint, tinyint, double, float, string, binary, boolean, decimal, "
                      f"date, timestamp, timestamp_ntz, array, map or struct")


_TO_SPARK_ATOMIC = {name: spark for spark, name in _SPARK_ATOMIC.items()
                    if spark not in ("CharType", "VarcharType")}


def to_spark(t: DataType) -> Any:
    """The pyspark DataType of t (built without a SparkSession or JVM)."""
    from pyspark.sql import types as T

    if isinstance(t, AtomicType):
        return getattr(T, _TO_SPARK_ATOMIC[t.name])()
    if isinstance(t, DecimalType):
        return T.DecimalType(t.precision, t.scale)
    if isinstance(t, ArrayType):
        return T.ArrayType(to_spark(t.element), t.contains_null)
    if isinstance(t, MapType):
        return T.MapType(to_spark(t.key), to_spark(t.value), t.value_contains_null)
    return T.StructType([T.StructField(f.name, to_spark(f.type), f.nullable) for f in t.fields])


def spark_struct(spec: Any) -> Any:
    """A DataFrame schema as pyspark's StructType, from DDL (``"user string, n long"``) or a
    pyspark type, without a JVM: what ``spark.createDataFrame([], spec).schema`` gives (a
    type that is not a struct becomes the single field ``value``)."""
    if not isinstance(spec, str) and is_spark_type(spec) and type(spec).__name__ == "StructType":
        return spec
    t = to_schema(spec)
    if not isinstance(t, StructType):
        t = StructType((StructField("value", t, True),))
    return to_spark(t)


def to_schema(spec: Any) -> DataType:
    """The type model of a DDL string, a pyspark DataType or a type of this module."""
    if isinstance(spec, DataType):
        return check_type(spec)
    if isinstance(spec, str):
        return parse_ddl(spec)
    if is_spark_type(spec):
        return check_type(from_spark(spec))
    raise SchemaError(f"a schema is a Spark DDL string or a pyspark DataType, not {spec!r}")


def schema_from_canonical(text: Any, what: str = "schema") -> DataType:
    """Parses a persisted canonical schema string; ValueError (not a registration error) if it
    is malformed, for checkpoint readers that report corruption."""
    if not isinstance(text, str):
        raise ValueError(f"{what} is not a string: {text!r:.80}")
    try:
        return parse_ddl(text)
    except SchemaError as e:
        raise ValueError(f"{what} is not a valid schema: {e}") from None


# ---- Arrow ---------------------------------------------------------------------------------

def to_arrow(t: DataType, nullable: bool = False) -> Any:
    """The Arrow type of t: what batch calls take and return for it. ``nullable=True`` makes
    every nested field nullable (how Spark declares the columns it reads from Arrow)."""
    import pyarrow as pa

    def null(flag: bool) -> bool:
        return True if nullable else flag

    if isinstance(t, AtomicType):
        return {"bigint": pa.int64(), "int": pa.int32(), "smallint": pa.int16(),
                "tinyint": pa.int8(), "double": pa.float64(), "float": pa.float32(),
                "string": pa.string(), "binary": pa.binary(), "boolean": pa.bool_(),
                "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
                "timestamp_ntz": pa.timestamp("us")}[t.name]
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, ArrayType):
        return pa.list_(pa.field("element", to_arrow(t.element, nullable),
                                 nullable=null(t.contains_null)))
    if isinstance(t, MapType):
        return pa.map_(pa.field("key", to_arrow(t.key, nullable), nullable=False),
                       pa.field("value", to_arrow(t.value, nullable),
                                nullable=null(t.value_contains_null)))
    assert isinstance(t, StructType)
    return pa.struct([pa.field(f.name, to_arrow(f.type, nullable), nullable=null(f.nullable))
                      for f in t.fields])


# ---- the program of the C++ row codec -----------------------------------------------------

# Node type ids of csrc/row_codec.h (RowType).
NODE_IDS = {"bigint": 1, "int": 2, "smallint": 3, "tinyint": 4, "double": 5, "float": 6,
            "string": 7, "binary": 8, "boolean": 9, "decimal": 10, "date": 11, "timestamp": 12,
            "timestamp_ntz": 13, "array": 14, "map": 15, "struct": 16}
_NODE = _struct.Struct(">BBBBI")


def program(t: DataType) -> bytes:
    """t as the C++ row codec's program: nodes in preorder, each ``u8 type | u8 nullable |
    u8 precision | u8 scale | u32 children``. The root is nullable; array elements, map values
    and struct fields carry their own nullability, map keys are never null."""
    out = bytearray()

    def emit(node: DataType, nullable: bool) -> None:
        if isinstance(node, AtomicType):
            out.extend(_NODE.pack(NODE_IDS[node.name], nullable, 0, 0, 0))
        elif isinstance(node, DecimalType):
            out.extend(_NODE.pack(NODE_IDS["decimal"], nullable, node.precision, node.scale, 0))
        elif isinstance(node, ArrayType):
            out.extend(_NODE.pack(NODE_IDS["array"], nullable, 0, 0, 1))
            emit(node.element, node.contains_null)
        elif isinstance(node, MapType):
            out.extend(_NODE.pack(NODE_IDS["map"], nullable, 0, 0, 2))
            emit(node.key, False)
            emit(node.value, node.value_contains_null)
        else:
            assert isinstance(node, StructType)
            out.extend(_NODE.pack(NODE_IDS["struct"], nullable, 0, 0, len(node.fields)))
            for f in node.fields:
                emit(f.type, f.nullable)

    emit(t, True)
    return bytes(out)


def path_name(t: DataType, path: list[int]) -> str:
    """A field path in a value of type t, as error messages name it (``seen[3]``,
    ``tags{'a'}``): struct steps are field indexes, array steps element indexes, map steps
    2 * entry + (0 for the key, 1 for the value)."""
    out = ""
    node = t
    for step in path:
        if isinstance(node, StructType) and 0 <= step < len(node.fields):
            f = node.fields[step]
            out += ("." if out else "") + f.name
            node = f.type
        elif isinstance(node, ArrayType):
            out += f"[{step}]"
            node = node.element
        elif isinstance(node, MapType):
            out += f"[entry {step // 2}].{'key' if step % 2 == 0 else 'value'}"
            node = node.key if step % 2 == 0 else node.value
        else:
            break
    return out or "value"


def type_at(t: DataType, path: list[int]) -> DataType:
    node = t
    for step in path:
        if isinstance(node, StructType) and 0 <= step < len(node.fields):
            node = node.fields[step].type
        elif isinstance(node, ArrayType):
            node = node.element
        elif isinstance(node, MapType):
            node = node.key if step % 2 == 0 else node.value
        else:
            break
    return node


# ---- JSON ---------------------------------------------------------------------------------

def to_json_value(t: DataType, v: Any) -> Any:
    """A typed value as JSON (``stateengine dump``): structs as objects with their field
    names, maps with text keys as objects (other maps as lists of {"key", "value"}), decimals,
    dates and timestamps as their ISO text, binary as base64."""
    import base64

    if v is None:
        return None
    if isinstance(t, StructType):
        return {f.name: to_json_value(f.type, x) for f, x in zip(t.fields, v)}
    if isinstance(t, ArrayType):
        return [to_json_value(t.element, x) for x in v]
    if isinstance(t, MapType):
        if t.key == STRING:
            return {k: to_json_value(t.value, x) for k, x in v.items()}
        return [{"key": to_json_value(t.key, k), "value": to_json_value(t.value, x)}
                for k, x in v.items()]
    if isinstance(t, DecimalType):
        return str(v)
    if isinstance(t, AtomicType):
        if t.name in ("date", "timestamp", "timestamp_ntz"):
            return v.isoformat()
        if t.name == "binary":
            return base64.b64encode(v).decode("ascii")
    return v
