"""Checks that what a user function returned fits the declared output schema.

Without them a wrong shape surfaces deep in pandas or Arrow ("2 columns passed, passed data
had 1 columns"). The checks look at each result object, never at each row:

- a pandas DataFrame: its column names when they are strings (Spark matches them by name;
  a missing name is an error, and the message also lists unexpected ones), else its column
  count (Spark matches by position); and each column's dtype
  where the dtype alone shows it cannot hold the Spark type (numbers, booleans or datetimes
  for a struct, array or map; booleans for a timestamp or date; datetimes for a boolean;
  numbers for binary). Columns of dtype ``object`` are not looked into: their values are
  converted by Spark, which reports its own errors;
- a list of rows: its first row (tuple length; a Row or dict must have every field name of
  the schema, extra names pass, as conversion by name ignores them); the other
  rows of the list are not checked one by one, and a later row of another length is reported
  when the rows are turned into a frame (``OutputSchemaError`` naming the schema, too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import types as T

from ..errors import OutputSchemaError
from .frames import column_arrays

_NESTED = (T.StructType, T.ArrayType, T.MapType)
_TIMES = (T.TimestampType, T.DateType) + ((T.TimestampNTZType,)
                                          if hasattr(T, "TimestampNTZType") else ())
_MAX_SHOWN = 10


def describe(schema: T.StructType) -> str:
    """The schema as Spark's DDL-like ``struct<...>`` text."""
    return schema.simpleString()


def _names(names: Any) -> str:
    names = [str(n) for n in names]
    shown = ", ".join(names[:_MAX_SHOWN])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _MAX_SHOWN else "")


def _unfit(kind: str, dtype: T.DataType) -> bool:
    """True if a numpy dtype of this kind can never become the Spark type."""
    if kind in "iufbMm" and isinstance(dtype, _NESTED):
        return True
    if kind == "b" and isinstance(dtype, _TIMES):
        return True
    if kind in "Mm" and isinstance(dtype, T.BooleanType):
        return True
    return kind in "iuf" and isinstance(dtype, T.BinaryType)


def _checkable(dtype: T.DataType) -> bool:
    """True for the Spark types some numpy dtype can never hold (see ``_unfit``)."""
    return isinstance(dtype, _NESTED + _TIMES + (T.BooleanType, T.BinaryType))


class FrameCheck:
    """``check_frame`` for one schema, for the many frames of a task: the column labels of a
    frame already found to fit are remembered, and dtypes are read only for the fields whose
    type some dtype cannot hold (a few microseconds per frame in all)."""

    _MAX_REMEMBERED = 64

    def __init__(self, schema: T.StructType) -> None:
        self.schema = schema
        self.typed = [(i, f) for i, f in enumerate(schema.fields) if _checkable(f.dataType)]
        self.fitting: dict[tuple, list[int]] = {}  # labels -> positions of the typed fields

    def __call__(self, frame: pd.DataFrame, arrays: list | None = None,
                 labels: tuple | None = None) -> None:
        """Raises OutputSchemaError if frame does not fit; ``arrays`` and ``labels``: its
        column arrays and labels when the caller has them already."""
        if labels is None:
            labels = tuple(frame.columns)
        positions = self.fitting.get(labels)
        if positions is None:
            positions = self._check_labels(labels)
            if len(self.fitting) < self._MAX_REMEMBERED:
                self.fitting[labels] = positions
        if positions:
            self._check_dtypes(frame, positions, arrays)

    def _check_labels(self, labels: tuple) -> list[int]:
        schema, expected = self.schema, self.schema.names
        by_name = all(isinstance(c, str) for c in labels)
        if by_name:
            missing = [n for n in expected if n not in labels]
            if missing:
                extra = [n for n in labels if n not in expected]
                raise OutputSchemaError(
                    f"expected a DataFrame with the columns of {describe(schema)}, got columns "
                    f"[{_names(labels)}] (missing {_names(missing)}"
                    f"{'; unexpected ' + _names(extra) if extra else ''})")
            return [labels.index(f.name) for _, f in self.typed]
        if len(labels) != len(expected):
            raise OutputSchemaError(
                f"expected a DataFrame with {len(expected)} columns ({describe(schema)}), got "
                f"{len(labels)} columns [{_names(labels)}]")
        return [i for i, _ in self.typed]

    def _check_dtypes(self, frame: pd.DataFrame, positions: list[int],
                      arrays: list | None) -> None:
        if arrays is None:  # pandas' column arrays, without building a Series of dtypes
            arrays = column_arrays(frame)
        if arrays is not None:
            dtypes = [arrays[p].dtype for p in positions]
        else:
            dtypes = [frame.dtypes.iloc[p] for p in positions]
        for (_, field), dtype in zip(self.typed, dtypes):
            if isinstance(dtype, np.dtype) and _unfit(dtype.kind, field.dataType):
                raise OutputSchemaError(
                    f"column '{field.name}' has dtype {dtype}, which cannot hold "
                    f"{field.dataType.simpleString()} (expected {describe(self.schema)})")


def check_frame(frame: pd.DataFrame, schema: T.StructType) -> None:
    """Raises OutputSchemaError if frame's columns cannot be the schema's (see the module)."""
    FrameCheck(schema)(frame)


def check_rows(rows: list, schema: T.StructType) -> None:
    """Raises OutputSchemaError if the first of rows does not fit the schema."""
    if not rows:
        return
    row = rows[0]
    expected = schema.names
    if hasattr(row, "__fields__"):  # a pyspark Row with names
        if any(n not in row.__fields__ for n in expected):
            raise OutputSchemaError(f"expected rows of {describe(schema)}, got a Row with "
                                    f"fields [{_names(row.__fields__)}]")
    elif isinstance(row, dict):
        if any(n not in row for n in expected):
            raise OutputSchemaError(f"expected rows of {describe(schema)}, got a dict with "
                                    f"keys [{_names(row)}]")
    elif isinstance(row, (tuple, list)):
        if len(row) != len(expected):
            raise OutputSchemaError(f"expected rows of {len(expected)} values "
                                    f"({describe(schema)}), got a row of {len(row)}: "
                                    f"{_short_repr(row)}")
    else:
        raise OutputSchemaError(f"expected rows of {describe(schema)} (tuples, Rows or "
                                f"dicts), got {type(row).__name__}: {_short_repr(row)}")


def rows_error(exc: Exception, schema: T.StructType) -> OutputSchemaError:
    """An OutputSchemaError for a failure turning rows into a frame or Arrow batch."""
    return OutputSchemaError(f"rows returned do not fit {describe(schema)}: "
                             f"{type(exc).__name__}: {exc}")


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
