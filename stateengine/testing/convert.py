"""Spark's conversions at the edges of a task, done without Spark.

A test hands the harness rows as pandas DataFrames, lists of Rows (dicts, tuples) or Arrow
tables. They become Arrow data of the input's Spark schema, as Spark holds a DataFrame's rows;
each task then gets them as Spark's Python workers do: pandas frames for ``mapInPandas``
(timestamps naive in the session time zone) or Arrow batches for ``mapInArrow`` (timestamps
in UTC, tagged with the session zone), at most ``spark.sql.execution.arrow.maxRecordsPerBatch``
rows each. What the tasks yield is turned into Arrow data of the output schema as Spark does
(pandas columns by name, naive timestamps read in the session zone) and read back as a query's
consumer would: ``toPandas()`` or ``collect()``.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import types as T

from ..sparktypes import spark_struct

_TIMESTAMP = (T.TimestampType,)


def struct_of(schema: Any) -> T.StructType:
    """A schema given as DDL text or a pyspark type, as a StructType (no JVM)."""
    return spark_struct(schema)


def arrow_schema(schema: T.StructType) -> Any:
    """The Arrow schema Spark gives these columns (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # pyspark 3.5: no zone argument (timestamps are UTC there too)
        return to_arrow_schema(schema)


def infer_schema(data: Any) -> T.StructType:
    """The Spark schema of data that came without one: pandas dtypes (via Arrow, as
    ``createDataFrame`` infers them), an Arrow table's types, or the first Row's values."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    if isinstance(data, pd.DataFrame):
        return from_arrow_schema(pa.Schema.from_pandas(data, preserve_index=False),
                                 prefer_timestamp_ntz=False)
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        return from_arrow_schema(data.schema, prefer_timestamp_ntz=False)
    rows = list(data)
    if not rows or isinstance(rows[0], (tuple, list)) and not hasattr(rows[0], "__fields__"):
        raise ValueError("the schema of the input cannot be inferred from these rows (none, or "
                         "tuples without field names): pass input_schema=")
    from pyspark.sql.types import _infer_schema

    return _infer_schema(rows[0])


def to_table(data: Any, schema: T.StructType, zone: str) -> Any:
    """``data`` (pandas, Rows/dicts/tuples, Arrow) as an Arrow table of ``schema``; naive
    timestamps are times in ``zone``, as Spark reads them in the session time zone."""
    import pyarrow as pa

    target = arrow_schema(schema)
    if data is None:
        return target.empty_table()
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return data.select(schema.names).cast(target)
    if isinstance(data, pd.DataFrame):
        missing = [n for n in schema.names if n not in data.columns]
        if missing:
            raise ValueError(f"the rows lack the column(s) {', '.join(missing)} of the input "
                             f"schema {schema.simpleString()}")
        columns = []
        for f, t in zip(schema.fields, target):
            series = data[f.name]
            if isinstance(f.dataType, _TIMESTAMP):
                series = _zoned(series, zone)
            elif isinstance(series.dtype, np.dtype) and series.dtype.kind in "iufb":
                # the same conversion (NaN as null) from the column's array: a third of
                # the time of taking it from the Series
                series = series.to_numpy()
            columns.append(pa.Array.from_pandas(series, type=t.type, safe=False))
        return pa.Table.from_arrays(columns, schema=target)
    rows = [_as_dict(r, schema.names) for r in data]
    for f in schema.fields:
        if isinstance(f.dataType, _TIMESTAMP):
            for r in rows:
                r[f.name] = _zoned_value(r.get(f.name), zone)
    return pa.Table.from_pylist(rows, schema=target)


def _as_dict(row: Any, names: list[str]) -> dict:
    if hasattr(row, "asDict"):
        return row.asDict()
    if isinstance(row, dict):
        return dict(row)
    if isinstance(row, (tuple, list)):
        if len(row) != len(names):
            raise ValueError(f"a row of {len(row)} values for {len(names)} columns "
                             f"({', '.join(names)})")
        return dict(zip(names, row))
    raise TypeError(f"rows are pandas DataFrames, Arrow tables or lists of Rows, dicts or "
                    f"tuples, not {type(row).__name__}")


def _zoned(series: pd.Series, zone: str) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(series) and series.dt.tz is None:
        return series.dt.tz_localize(zone)
    return series


def _zoned_value(value: Any, zone: str) -> Any:
    if value is None or getattr(value, "tzinfo", None) is not None:
        return value
    return pd.Timestamp(value).tz_localize(zone).to_pydatetime()


def batches(table: Any, rows: int) -> list[Any]:
    """The table in Arrow batches of at most ``rows`` rows (<= 0: one batch)."""
    if not table.num_rows:
        return []
    return table.to_batches(max_chunksize=rows) if rows > 0 else \
        table.combine_chunks().to_batches()


def pandas_batches(table: Any, schema: T.StructType, zone: str,
                   rows: int) -> Iterator[pd.DataFrame]:
    """The frames a ``mapInPandas`` task gets: naive timestamps in the session zone."""
    for batch in batches(table, rows):
        yield table_to_pandas(batch, schema, zone)


def arrow_batches(table: Any, schema: T.StructType, zone: str, rows: int) -> Iterator[Any]:
    """The batches a ``mapInArrow`` task gets: timestamps tagged with the session zone."""
    import pyarrow as pa

    fields = []
    for f, af in zip(schema.fields, arrow_schema(schema)):
        if isinstance(f.dataType, _TIMESTAMP):
            af = af.with_type(pa.timestamp("us", tz=zone))
        fields.append(af)
    extra = [table.schema.field(n) for n in table.column_names if n not in schema.names]
    target = pa.schema(fields + extra)
    for batch in batches(table, rows):
        yield batch.cast(target) if hasattr(batch, "cast") else \
            pa.Table.from_batches([batch]).cast(target).to_batches()[0]


def table_to_pandas(table: Any, schema: T.StructType | None, zone: str) -> pd.DataFrame:
    """Arrow data as Spark's pandas conversions give it (timestamps naive in ``zone``)."""
    import pyarrow as pa

    pdf = table.to_pandas(date_as_object=True, use_threads=False)  # small: no thread pool
    # only zoned timestamps and maps need more (looked up on the Arrow schema: a column of
    # the frame costs more to reach than its Arrow field)
    names = [f.name for f in table.schema
             if pa.types.is_timestamp(f.type) and f.type.tz is not None or
             pa.types.is_map(f.type)]
    for name in names:
        s = pdf[name]
        if isinstance(s.dtype, pd.DatetimeTZDtype):
            pdf[name] = s.dt.tz_convert(zone).dt.tz_localize(None)
        elif schema is not None and name in schema.names and \
                isinstance(schema[name].dataType, T.MapType):
            pdf[name] = [None if v is None else dict(v) for v in s]  # pairs -> dicts
    return pdf


def frames_to_table(frames: Iterable[pd.DataFrame], schema: T.StructType, zone: str) -> Any:
    """The frames a ``mapInPandas`` task yielded, as Spark converts them to ``schema``:
    columns by name (by position where the labels are not all strings)."""
    import pyarrow as pa

    target = arrow_schema(schema)
    tables = []
    for frame in frames:
        if not all(isinstance(c, str) for c in frame.columns):
            frame = frame.set_axis(schema.names[:len(frame.columns)], axis=1)
        tables.append(to_table(frame, schema, zone))
    return pa.concat_tables(tables) if tables else target.empty_table()


def table_to_rows(table: Any, schema: T.StructType) -> list[Any]:
    """The rows as ``collect()`` returns them (pyspark's Row conversions, timestamps as naive
    datetimes of this process's local time)."""
    names = schema.names
    out = []
    for values in table.select(names).to_pylist():
        row = tuple(_python(values[f.name], f.dataType) for f in schema.fields)
        out.append(schema.fromInternal(schema.toInternal(row)))
    return out


def _python(value: Any, dtype: T.DataType) -> Any:
    """An Arrow value (``to_pylist``) as pyspark's conversions take it: maps as dicts."""
    if value is None:
        return None
    if isinstance(dtype, T.MapType):
        return {_python(k, dtype.keyType): _python(v, dtype.valueType) for k, v in value}
    if isinstance(dtype, T.ArrayType):
        return [_python(v, dtype.elementType) for v in value]
    if isinstance(dtype, T.StructType):
        return tuple(_python(value.get(f.name), f.dataType) for f in dtype.fields)
    return value
