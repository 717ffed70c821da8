"""Values of a StatefulProcessor's state, checked and converted by their Spark schema.

Spark's ``ValueState.update((5, 2.5))`` takes a tuple (or a ``Row``, a list, a dict by field
name) laid out like the state's schema and returns tuples from ``get()``. The states are typed
stateengine states of the same schema (the struct codec); ``RowCodec`` sits in front of them and
makes values look as they do through Spark's handle: ``store(value)`` checks every field against
its Spark type, ``load(stored)`` returns what Spark's handle returns: a tuple of Python values,
timestamps as naive local datetimes (pyspark's ``TimestampType.fromInternal``), nested structs as
``Row``s.

Where Spark would silently store null, the codec converts or refuses instead: an int given for
a double field is stored as that number (Spark stores null), a float for an integer field is
refused unless it is integral, and a value of the wrong kind raises ``SerializationError``
naming the state and the field. Floats keep 32 bits and decimals their scale, as in Spark.
"""

from __future__ import annotations

import datetime
import decimal
import numbers
from typing import Any, Callable

import numpy as np
from pyspark.sql import Row
from pyspark.sql import types as T

from ..errors import SerializationError

_INT_RANGES = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64}
# Spark types whose stored form is the Python value itself; a field whose value already has
# exactly this Python type needs no conversion (the update fast path).
_EXACT = {T.LongType: int, T.IntegerType: int, T.ShortType: int, T.ByteType: int,
          T.DoubleType: float, T.FloatType: float, T.StringType: str, T.BooleanType: bool,
          T.BinaryType: bytes}


class _Fail(Exception):
    """A field that does not fit its type; turned into SerializationError with the path."""


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.60}"


def _int_field(bits: int, type_name: str) -> Callable[[Any], Any]:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def convert(v: Any) -> int:
        if isinstance(v, (numbers.Integral, np.integer)):
            n = int(v)
        elif isinstance(v, (float, np.floating)) and float(v).is_integer():
            n = int(v)
        else:
            raise _Fail(f"is {type_name}, got {_describe(v)}")
        if not lo <= n <= hi:
            raise _Fail(f"is {type_name}, and {n} is out of its range [{lo}, {hi}]")
        return n
    return convert


def _float_field(type_name: str, single: bool) -> Callable[[Any], Any]:
    def convert(v: Any) -> float:
        if isinstance(v, (numbers.Real, np.integer, np.floating)) and not isinstance(v, bool):
            # a float field holds what Spark's 32-bit float holds (0.1 -> 0.10000000149...)
            return float(np.float32(v)) if single else float(v)
        raise _Fail(f"is {type_name}, got {_describe(v)}")
    return convert


def _string_field(v: Any) -> str:
    if isinstance(v, str):
        return str(v)
    raise _Fail(f"is string, got {_describe(v)}")


def _bool_field(v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise _Fail(f"is boolean, got {_describe(v)}")


def _binary_field(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise _Fail(f"is binary, got {_describe(v)}")


def _timestamp_field(data_type: T.DataType) -> tuple[Callable, Callable | None]:
    """Timestamps: an instant, stored in UTC. A naive datetime is local time, as pyspark reads
    it (``TimestampType.toInternal``), and ``get()`` returns naive local time as Spark's handle
    does; timestamp_ntz stays naive both ways."""
    ntz = isinstance(data_type, T.TimestampNTZType)

    def store(v: Any) -> datetime.datetime:
        if isinstance(v, np.datetime64):
            import pandas as pd

            v = pd.Timestamp(v).to_pydatetime()
        elif hasattr(v, "to_pydatetime"):  # pandas.Timestamp
            v = v.to_pydatetime()
        if not isinstance(v, datetime.datetime):
            raise _Fail(f"is {data_type.simpleString()}, got {_describe(v)}")
        if ntz:
            return v.replace(tzinfo=None) if v.tzinfo is None else \
                v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return v.astimezone(datetime.timezone.utc)  # a naive one is taken as local time

    def load(v: datetime.datetime) -> datetime.datetime:
        return v.astimezone().replace(tzinfo=None)

    return store, None if ntz else load


def _date_field(v: Any) -> datetime.date:
    if isinstance(v, datetime.datetime):
        v = v.date()
    if not isinstance(v, datetime.date):
        raise _Fail(f"is date, got {_describe(v)}")
    return v


def _decimal_field(data_type: T.DecimalType) -> Callable[[Any], Any]:
    """Decimals at the type's scale (Spark returns Decimal('3.10') for 3.1 stored in a
    decimal(10,2)); a value that needs more digits than the precision is refused."""
    step = decimal.Decimal(1).scaleb(-data_type.scale)

    def convert(v: Any) -> decimal.Decimal:
        if isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, bool):
            v = decimal.Decimal(int(v))
        if not isinstance(v, decimal.Decimal) or not v.is_finite():
            raise _Fail(f"is {data_type.simpleString()}, got {_describe(v)}")
        q = v.quantize(step, rounding=decimal.ROUND_HALF_UP)
        if len(q.as_tuple().digits) > data_type.precision:
            raise _Fail(f"is {data_type.simpleString()}, and {v} needs more than "
                        f"{data_type.precision} digits")
        return q
    return convert


class _Field:
    """How one Spark type is stored and loaded; ``load`` is None where stored is loaded."""

    def __init__(self, data_type: T.DataType) -> None:
        self.data_type = data_type
        self.load: Callable[[Any], Any] | None = None
        t = type(data_type)
        if t in _INT_RANGES:
            self.store = _int_field(_INT_RANGES[t], data_type.simpleString())
        elif t in (T.DoubleType, T.FloatType):
            self.store = _float_field(data_type.simpleString(), t is T.FloatType)
        elif t is T.StringType or isinstance(data_type, T.StringType):
            self.store = _string_field
        elif t is T.BooleanType:
            self.store = _bool_field
        elif t is T.BinaryType:
            self.store = _binary_field
        elif isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
            self.store, self.load = _timestamp_field(data_type)
        elif t is T.DateType:
            self.store = _date_field
        elif t is T.DecimalType:
            self.store = _decimal_field(data_type)
        elif t is T.ArrayType:
            self._array(data_type)
        elif t is T.MapType:
            self._map(data_type)
        elif t is T.StructType:
            self._struct(data_type)
        else:
            raise SerializationError(
                f"Spark type {data_type.simpleString()} is not supported in stateengine's "
                f"StatefulProcessor state; use numbers, strings, booleans, binary, timestamps, "
                f"dates, decimals, and arrays, maps and structs of them")

    def _array(self, data_type: T.ArrayType) -> None:
        element = _Field(data_type.elementType)
        nulls = data_type.containsNull

        def store(v: Any) -> list:
            if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__iter__"):
                raise _Fail(f"is {data_type.simpleString()}, got {_describe(v)}")
            return [_store_nullable(element, e, nulls, "element") for e in v]
        self.store = store
        if element.load is not None:
            self.load = lambda v: [None if e is None else element.load(e) for e in v]

    def _map(self, data_type: T.MapType) -> None:
        key, value = _Field(data_type.keyType), _Field(data_type.valueType)
        nulls = data_type.valueContainsNull

        def store(v: Any) -> dict:
            if not isinstance(v, dict):
                raise _Fail(f"is {data_type.simpleString()}, got {_describe(v)}")
            return {_store_nullable(key, k, False, "map key"):
                    _store_nullable(value, e, nulls, "map value") for k, e in v.items()}
        self.store = store
        if key.load is not None or value.load is not None:
            kl = key.load or (lambda x: x)
            vl = value.load or (lambda x: x)
            self.load = lambda v: {kl(k): None if e is None else vl(e) for k, e in v.items()}

    def _struct(self, data_type: T.StructType) -> None:
        codec = RowCodec(data_type, "")
        factory = Row(*data_type.names)

        def store(v: Any) -> tuple:
            try:
                return codec.store_fields(v)
            except SerializationError as e:
                raise _Fail(f"is {data_type.simpleString()}: {e.args[0]}") from None
        self.store = store
        self.load = lambda v: factory(*codec.load(v))


def _store_nullable(field: _Field, v: Any, nullable: bool, what: str) -> Any:
    if v is None:
        if nullable:
            return None
        raise _Fail(f"is a non-null {what}, got None")
    return field.store(v)


class RowCodec:
    """Stores and loads values of one StructType (a state's value or map key schema)."""

    def __init__(self, schema: T.StructType, state_name: str) -> None:
        if not isinstance(schema, T.StructType):
            schema = T.StructType([T.StructField("value", schema)])
        self.schema = schema
        self.state_name = state_name
        self.names = list(schema.names)
        self.fields = [_Field(f.dataType) for f in schema.fields]
        self.nullable = [f.nullable for f in schema.fields]
        exact = [_EXACT.get(type(f.dataType)) for f in schema.fields]
        self._exact: tuple | None = tuple(exact) if all(exact) else None
        # integer fields: (index, lowest, highest), range-checked on the fast path too
        self._ranges = [(i, -(1 << (b - 1)), (1 << (b - 1)) - 1)
                        for i, f in enumerate(schema.fields)
                        if (b := _INT_RANGES.get(type(f.dataType)))]
        self._loads = [(i, f.load) for i, f in enumerate(self.fields) if f.load is not None]
        self.row = Row(*self.names)

    def store(self, value: Any) -> tuple:
        """The stored form of a value given to ``update``/``appendValue``/``updateValue``."""
        exact = self._exact
        if exact is not None and type(value) is tuple and len(value) == len(exact):
            for v, t in zip(value, exact):
                if type(v) is not t:
                    break
            else:  # every field already has its Python type: nothing to convert
                for i, lo, hi in self._ranges:
                    if not lo <= value[i] <= hi:
                        break
                else:
                    return value
        return self.store_fields(value)

    def store_fields(self, value: Any) -> tuple:
        if isinstance(value, dict):
            missing = [n for n in self.names if n not in value]
            if missing:
                raise self._error(f"has no field(s) {', '.join(missing)}", value)
            value = [value[n] for n in self.names]
        elif isinstance(value, (tuple, list)):
            if len(value) != len(self.names):
                raise self._error(f"has {len(value)} fields but the schema has "
                                  f"{len(self.names)} ({self.schema.simpleString()})", value)
        else:
            raise self._error(f"must be a tuple, Row, list or dict of the schema "
                              f"{self.schema.simpleString()}", value)
        out = []
        for name, field, nullable, v in zip(self.names, self.fields, self.nullable, value):
            try:
                out.append(_store_nullable(field, v, nullable, "field"))
            except _Fail as e:
                if not self.state_name:  # a nested struct: the outer codec names the state
                    raise SerializationError(f"field '{name}' {e}") from None
                raise SerializationError(
                    f"state '{self.state_name}': field '{name}' {e}; give a value of the "
                    f"field's type (schema {self.schema.simpleString()})") from None
        return tuple(out)

    def load(self, stored: Any) -> tuple:
        """What Spark's handle returns for a stored value: a tuple of Python values."""
        if not self._loads:
            return stored  # the typed state returns a fresh tuple
        out = list(stored)
        for i, load in self._loads:
            if out[i] is not None:
                out[i] = load(out[i])
        return tuple(out)

    def load_row(self, stored: Any) -> Row:
        """The stored value as a ``Row`` of the schema's field names (MapState.getValue)."""
        return self.row(*self.load(stored))

    def _error(self, problem: str, value: Any) -> SerializationError:
        return SerializationError(f"state '{self.state_name}': the value {value!r:.80} "
                                  f"{problem}")
