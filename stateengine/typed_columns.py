"""Columns of typed values for the batch calls of typed states.

A batch call on a typed state takes its values (and map user keys) as columns: a pyarrow
``StructArray``, ``RecordBatch`` or ``Table``, a pandas ``DataFrame``, or a dict of columns,
matched to the schema's fields by name (a non-struct schema takes one column). Such columns
become one Arrow array of the schema's exact Arrow type here, which C++ encodes row by row
without Python (csrc/arrow_rows.h). Conversions are only the lossless ones a Spark cast would
make without ANSI errors: integers to wider integers, decimals or floats, float to double,
decimal rescaling without rounding, date64 to date32, timestamps of any unit or zone to
microseconds (naive ones read as UTC); anything else, an overflow or a lost digit is a
``SerializationError`` naming the field. pandas columns follow pandas' convention that NaN
in a float column is missing (null), as pyspark's ``createDataFrame`` does.

Columns of Python objects (lists of tuples, Rows or dicts; object columns that are not all
text, bytes, dates, datetimes or decimals) take the scalar encoder row by row instead, which
checks each value exactly like ``update()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import sparktypes as st
from .errors import SerializationError

_FLOAT32_MAX = 3.4028234663852886e38


def _pa():
    import pyarrow

    return pyarrow


def _is_pandas(x: Any, name: str) -> bool:
    return type(x).__module__.startswith("pandas") and type(x).__name__ == name


def conform(t: st.DataType, values: Any, what: str) -> tuple[Any, list | None]:
    """(a pyarrow Array of ``to_arrow(t)``, None) for columnar input, or (None, rows) for rows
    of Python objects that the scalar encoder must check one by one."""
    pa = _pa()
    columns = _columns(values)
    if columns is not None:
        if not isinstance(t, st.StructType):
            raise SerializationError(
                f"{what}: the schema is {t}, not a struct, so it takes one column, not "
                f"{type(values).__name__}")
        return _struct_from_columns(t, columns, values, what)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if isinstance(t, st.StructType) and pa.types.is_struct(values.type):
            return _struct_from_struct_array(t, values, what), None
        return _conform_array(t, values, what), None
    if _is_pandas(values, "Series") or (isinstance(values, np.ndarray) and values.dtype != object):
        arr = _from_column(values)
        if arr is not None and _compatible(arr.type, t):
            return _conform_array(t, arr, what), None
    rows = values.tolist() if hasattr(values, "tolist") else list(values)
    return None, rows


def _columns(values: Any) -> dict[str, Any] | None:
    pa = _pa()
    if isinstance(values, dict):
        return values
    if isinstance(values, (pa.RecordBatch, pa.Table)):
        return {n: values.column(i) for i, n in enumerate(values.schema.names)}
    if _is_pandas(values, "DataFrame"):
        return {str(c): values[c] for c in values.columns}
    if isinstance(values, pa.ChunkedArray) and pa.types.is_struct(values.type):
        values = values.combine_chunks()
    return None


def _from_column(col: Any) -> Any:
    """A pyarrow array of a column if pyarrow converts it exactly, else None (object columns
    other than text, bytes, dates, datetimes or decimals: the scalar path checks those)."""
    pa = _pa()
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks()
    if isinstance(col, pa.Array):
        return col
    pandas = _is_pandas(col, "Series")
    try:
        arr = pa.array(col, from_pandas=pandas) if (pandas or isinstance(col, np.ndarray)) \
            else pa.array(list(col))
    except (pa.ArrowException, TypeError, ValueError, OverflowError, UnicodeError):
        return None
    object_column = (pandas and col.dtype == object) or not (pandas or isinstance(col, np.ndarray)) \
        or col.dtype == object
    if object_column and not (pa.types.is_string(arr.type) or pa.types.is_binary(arr.type) or
                              pa.types.is_large_string(arr.type) or pa.types.is_date(arr.type) or
                              pa.types.is_timestamp(arr.type) or pa.types.is_decimal(arr.type) or
                              pa.types.is_null(arr.type)):
        return None  # ints, floats and bools in Python objects: pyarrow would coerce them
    return arr


def _struct_from_columns(t: st.StructType, columns: dict[str, Any], source: Any,
                         what: str) -> tuple[Any, list | None]:
    pa = _pa()
    names = t.names
    missing = [n for n in names if n not in columns]
    if missing:
        raise SerializationError(
            f"{what}: field {missing[0]!r} of the schema {t} has no column (columns: "
            f"{', '.join(map(repr, columns))}); pass one column per field")
    extra = [n for n in columns if n not in names]
    if extra:
        raise SerializationError(
            f"{what}: column {extra[0]!r} is not a field of the schema {t}; select the "
            f"schema's fields ({', '.join(names)})")
    arrays = [_from_column(columns[n]) for n in names]
    lengths = {len(columns[n]) for n in names}
    if len(lengths) > 1:
        raise SerializationError(f"{what}: the columns have different lengths {sorted(lengths)}")
    if any(a is None or not _compatible(a.type, f.type) for a, f in zip(arrays, t.fields)):
        # Python objects somewhere: every row goes through the scalar encoder.
        cols = [columns[n] for n in names]
        lists = [c.to_pylist() if isinstance(c, (pa.Array, pa.ChunkedArray)) else
                 (c.tolist() if hasattr(c, "tolist") else list(c)) for c in cols]
        return None, [tuple(r) for r in zip(*lists)]
    children = [_conform_array(f.type, a, what, f.name) for a, f in zip(arrays, t.fields)]
    fields = list(_pa_fields(t))
    return pa.StructArray.from_arrays(children, fields=fields), None


def _struct_from_struct_array(t: st.StructType, arr: Any, what: str) -> Any:
    """A StructArray's fields matched to the schema by name (its null rows kept)."""
    pa = _pa()
    if arr.type == st.to_arrow(t):
        return arr
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    columns = {n: arr.field(i) for i, n in enumerate(names)}
    if len(columns) != len(names):
        raise SerializationError(f"{what}: the StructArray repeats a field name ({names})")
    built, rows = _struct_from_columns(t, columns, arr, what)
    if built is None:  # cannot happen for Arrow columns; kept for safety
        raise SerializationError(f"{what}: the StructArray's fields do not convert to {t}")
    if arr.null_count:
        built = pa.StructArray.from_arrays(
            [built.field(i) for i in range(built.type.num_fields)], fields=list(_pa_fields(t)),
            mask=arr.is_null())
    return built


def _pa_fields(t: st.StructType):
    pa = _pa()
    for f in t.fields:
        yield pa.field(f.name, st.to_arrow(f.type), nullable=f.nullable)


def _compatible(src: Any, t: st.DataType) -> bool:
    """Whether an Arrow type converts to t without loss (checked per value by the cast)."""
    pa = _pa()
    types = pa.types
    if types.is_dictionary(src):
        return _compatible(src.value_type, t)
    if types.is_null(src):
        return True
    if isinstance(t, st.AtomicType):
        n = t.name
        if n in ("bigint", "int", "smallint", "tinyint"):
            return types.is_integer(src)
        if n in ("double", "float"):
            return types.is_integer(src) or types.is_floating(src)
        if n == "string":
            return types.is_string(src) or types.is_large_string(src) or \
                getattr(types, "is_string_view", lambda _: False)(src)
        if n == "binary":
            return types.is_binary(src) or types.is_large_binary(src) or \
                types.is_fixed_size_binary(src)
        if n == "boolean":
            return types.is_boolean(src)
        if n == "date":
            return types.is_date(src)
        if n == "timestamp":
            return types.is_timestamp(src)
        if n == "timestamp_ntz":
            return types.is_timestamp(src) and src.tz is None
        return False
    if isinstance(t, st.DecimalType):
        return types.is_decimal(src) or types.is_integer(src)
    if isinstance(t, st.ArrayType):
        return (types.is_list(src) or types.is_large_list(src) or types.is_fixed_size_list(src)) \
            and _compatible(src.value_type, t.element)
    if isinstance(t, st.MapType):
        return types.is_map(src) and _compatible(src.key_type, t.key) and \
            _compatible(src.item_type, t.value)
    if isinstance(t, st.StructType):
        return types.is_struct(src) and [src.field(i).name for i in range(src.num_fields)] == \
            t.names and all(_compatible(src.field(i).type, f.type) for i, f in enumerate(t.fields))
    return False


def _conform_array(t: st.DataType, arr: Any, what: str, field: str | None = None) -> Any:
    """arr cast to t's exact Arrow type with a safe cast; SerializationError naming the field
    (a top-level column) if the kinds differ or a value does not fit."""
    pa = _pa()
    where = f"field '{field}': " if field else ""
    target = st.to_arrow(t)
    if arr.type == target:
        return arr
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not _compatible(arr.type, t):
        raise SerializationError(
            f"{what}: {where}expected {t}, got a column of Arrow type {arr.type}, which does "
            f"not convert to it without loss")
    _check_float32(t, arr, f"{what}: {where}")
    try:
        return arr.cast(target, safe=True)
    except (pa.ArrowException, ValueError, OverflowError) as e:
        raise SerializationError(f"{what}: {where}a value does not fit {t} ({e}); nothing "
                                 f"was written") from None


def _check_float32(t: st.DataType, arr: Any, what: str) -> None:
    """A finite double beyond float32's range is refused (the scalar encoder does the same),
    not stored as infinity; checked on every float field reached through structs and lists."""
    pa = _pa()
    import pyarrow.compute as pc

    if isinstance(t, st.AtomicType) and t.name == "float":
        if pa.types.is_floating(arr.type) and arr.type != pa.float32():
            wide = arr.cast(pa.float64())
            narrow = wide.cast(pa.float32(), safe=False)
            bad = pc.and_(pc.is_inf(narrow), pc.is_finite(wide))
            if pc.any(bad).as_py():
                row = pc.index(bad, True).as_py()
                raise SerializationError(
                    f"{what}value {wide[row].as_py()!r} (element {row}) is outside the range of "
                    f"float (largest finite value 3.4028235e+38); nothing was written")
        return
    if isinstance(t, st.StructType) and pa.types.is_struct(arr.type):
        for i, f in enumerate(t.fields):
            _check_float32(f.type, arr.field(i), f"{what}field '{f.name}': ")
    elif isinstance(t, st.ArrayType) and hasattr(arr, "flatten") and not pa.types.is_struct(arr.type):
        _check_float32(t.element, arr.flatten(), what)
    elif isinstance(t, st.MapType) and pa.types.is_map(arr.type):
        _check_float32(t.key, arr.keys, what)
        _check_float32(t.value, arr.items, what)
