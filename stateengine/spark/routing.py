"""Routing rows to the Spark partition that owns their key group.

The key group is computed by Spark itself, ``pmod(hash(key cols...), max_parallelism)``, and
the engine computes the same number natively (tests compare both), so task ``p`` of ``N`` sees
exactly the keys of ``KeyGroupRange.for_operator(p, N, max_parallelism)``.

Rows are placed on partition ``__se_pid`` in one of two exact ways:

* ``DataFrame.repartitionById(N, __se_pid)`` where the DataFrame has it (pyspark >= 4.1,
  classic and Connect): the partition id is taken as is.
* otherwise (pyspark 3.5 and 4.0) ``repartition(N, __se_route)``, a plain hash repartition whose
  partition is ``pmod(hash(__se_route), N)`` (Spark's ``HashPartitioning``). The driver picks,
  with the engine's Spark-identical hash, one int ``r_p`` per partition with
  ``pmod(hash(r_p), N) == p`` and maps ``__se_pid`` to it, so every row lands on its partition
  by construction. A repartition with an explicit partition count is one that adaptive query
  execution never coalesces or splits (it only does that to shuffles Spark added itself or to
  ``rebalance``/``repartition`` without a count).

Everything is written as SQL text (``selectExpr``, column names), never as ``Column`` objects,
so the same code serves classic sessions and Spark Connect sessions, even side by side in one
process.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any, Sequence

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from .. import _native
from ..errors import KeyTypeError
from ..keygroups import check_max_parallelism
from ..serializers import Codec

KG_COL = "__se_kg"
PID_COL = "__se_pid"
ROUTE_COL = "__se_route"
MARKER_COL = "__se_marker"
INTERNAL_COLS = (KG_COL, PID_COL, ROUTE_COL, MARKER_COL)

# "auto": by id where the DataFrame can, else by hash. The others force one way (tests).
ROUTING_METHODS = ("auto", "by_id", "hash")

_KEY_CODECS: dict[type, Codec] = {
    T.LongType: Codec.BIGINT, T.IntegerType: Codec.INT, T.ShortType: Codec.INT,
    T.ByteType: Codec.INT, T.DoubleType: Codec.DOUBLE, T.FloatType: Codec.FLOAT,
    T.StringType: Codec.STRING, T.BinaryType: Codec.BINARY, T.BooleanType: Codec.BOOLEAN,
}


def key_columns(key: str | Sequence[str]) -> list[str]:
    cols = [key] if isinstance(key, str) else list(key)
    if not cols or not all(isinstance(c, str) for c in cols):
        raise ValueError(f"key must name one or more columns, got {key!r}")
    return cols


def quote(name: str) -> str:
    """A column name as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def key_codecs_for(df: DataFrame | T.StructType, cols: list[str]) -> tuple[int, ...]:
    """Engine key codecs for the Spark types of the key columns (their hash() rules), given
    the DataFrame or its schema."""
    schema = df if isinstance(df, T.StructType) else df.schema
    fields = {f.name: f.dataType for f in schema.fields}
    out = []
    for c in cols:
        if c not in fields:
            raise KeyTypeError(f"key column '{c}' is not in the DataFrame (columns: "
                               f"{', '.join(fields)})")
        codec = _KEY_CODECS.get(type(fields[c]))
        if codec is None:
            raise KeyTypeError(
                f"key column '{c}' has Spark type {fields[c].simpleString()}; key columns must be "
                f"bigint, int, smallint, tinyint, double, float, string, binary or boolean")
        out.append(int(codec))
    return tuple(out)


def default_num_partitions(spark: Any, max_parallelism: int) -> int:
    """``spark.sql.shuffle.partitions`` capped at ``max_parallelism``.

    Spark's own stateful operators keep one state partition per shuffle partition; a SQL conf
    also reads the same on classic and Connect sessions (no SparkContext needed)."""
    raw = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        n = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"spark.sql.shuffle.partitions is {raw!r}, not a number of partitions; "
                         f"pass num_partitions= to choose the state's partition count") from None
    return max(1, min(n, check_max_parallelism(max_parallelism)))


def _check_partitions(num_partitions: int, max_parallelism: int) -> int:
    """num_partitions as a Python int (numpy ints too; Spark's calls want int itself)."""
    check_max_parallelism(max_parallelism)
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, numbers.Integral) or \
            not 1 <= num_partitions <= max_parallelism:
        raise ValueError(f"num_partitions {num_partitions!r} must be an int in [1, "
                         f"max_parallelism={max_parallelism}]")
    return int(num_partitions)


def with_routing_columns(df: DataFrame, key: str | Sequence[str], num_partitions: int,
                         max_parallelism: int) -> DataFrame:
    """Adds ``__se_kg`` = pmod(hash(keys), maxP) and ``__se_pid`` = kg * N div maxP."""
    cols = key_columns(key)
    num_partitions = _check_partitions(num_partitions, max_parallelism)
    hashed = f"hash({', '.join(quote(c) for c in cols)})"
    return (df.drop(*INTERNAL_COLS)
              .selectExpr("*", f"pmod({hashed}, {max_parallelism}) AS {KG_COL}")
              .selectExpr("*", f"CAST({KG_COL} * {num_partitions} div {max_parallelism} AS INT) "
                               f"AS {PID_COL}"))


@functools.lru_cache(maxsize=256)
def hash_routing_values(num_partitions: int) -> tuple[int, ...]:
    """``r_p`` for each partition ``p``: the smallest int >= 0 with
    ``pmod(hash(r_p), num_partitions) == p``, hash being Spark SQL's ``hash()`` of an int.

    Spark's int hash is a bijection of the 32-bit ints, so every residue has values and the
    scan ends after about N * ln(N) hashes (30 ms for N = 1000)."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    codecs = (int(Codec.INT),)
    found = [-1] * num_partitions
    missing, r = num_partitions, 0
    while missing:
        p = _native.spark_hash(r, codecs) % num_partitions  # Python's % is Spark's pmod here
        if found[p] < 0:
            found[p] = r
            missing -= 1
        r += 1
    return tuple(found)


def routing_method(df: DataFrame, method: str = "auto") -> str:
    """"by_id" where the DataFrame has ``repartitionById`` (checked on the object, so a Connect
    DataFrame answers for its own client), else "hash"."""
    if method not in ROUTING_METHODS:
        raise ValueError(f"routing method must be one of {', '.join(ROUTING_METHODS)}, "
                         f"got {method!r}")
    if method == "auto":
        return "by_id" if callable(getattr(df, "repartitionById", None)) else "hash"
    return method


def _marker_fill(data_type: T.DataType) -> str | None:
    """A non-null value for marker rows where a null would change the pandas dtype that
    Spark gives the column (integers with a null become float64, losing digits past 2**53;
    booleans become object); other types convert alike with or without nulls."""
    if isinstance(data_type, T.BooleanType):
        return "false"
    if isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return f"CAST(0 AS {data_type.simpleString()})"
    return None


def with_every_partition(routed: DataFrame, num_partitions: int) -> DataFrame:
    """Makes sure Spark runs a task for each of the N partitions even when no row arrives.

    A partition without rows still runs its task while the shuffle that routes rows is
    planned. Spark drops that shuffle when it can prove the input empty: the optimizer
    propagates an empty local relation (an empty DataFrame; in a streaming query, the sources
    of a micro-batch that brings no data) through projections and repartitions, and adaptive
    execution replaces a shuffle that wrote no rows by an empty relation; then no task runs
    and no version is committed. So:

    * a batch DataFrame gets one marker row per partition (``__se_marker`` true, placed like
      any row), which tasks drop before the user's code. Its integer and boolean columns hold
      0 and false rather than null, so the data rows that share its Arrow batch keep their
      pandas dtypes;
    * a streaming DataFrame (no union with a batch DataFrame is allowed there, and adaptive
      execution is off) gets a one-row generator per row, ``stack(1, 0)``, which the optimizer
      does not see through, so the shuffle stays and runs its N tasks in every micro-batch.
    """
    if routed.isStreaming:
        return routed.selectExpr("*", f"stack(1, 0) AS {MARKER_COL}").drop(MARKER_COL)
    fills = [f"{fill} AS {quote(f.name)}" for f in routed.schema.fields
             if f.name not in (KG_COL, PID_COL) and (fill := _marker_fill(f.dataType))]
    markers = routed.sparkSession.range(num_partitions).selectExpr(
        f"CAST(-1 AS INT) AS {KG_COL}", f"CAST(id AS INT) AS {PID_COL}",
        f"true AS {MARKER_COL}", *fills)
    return routed.unionByName(markers, allowMissingColumns=True)


def route(df: DataFrame, key: str | Sequence[str], num_partitions: int,
          max_parallelism: int, method: str = "auto", every_partition: bool = False) -> DataFrame:
    """Rows placed so that partition p holds exactly the key groups of operator p of N.

    Tasks check that their rows carry their own partition id. With ``every_partition`` each
    of the N partitions runs a task even if the input is empty (each must commit its
    version; see ``with_every_partition``). ``method`` picks the placement ("auto":
    ``repartitionById`` where available, else the hash route).
    """
    how = routing_method(df, method)
    num_partitions = _check_partitions(num_partitions, max_parallelism)
    routed = with_routing_columns(df, key, num_partitions, max_parallelism)
    if every_partition:
        routed = with_every_partition(routed, num_partitions)
    if how == "by_id":
        return routed.repartitionById(num_partitions, PID_COL)
    values = ", ".join(map(str, hash_routing_values(num_partitions)))
    routed = routed.selectExpr(
        "*", f"CAST(element_at(array({values}), {PID_COL} + 1) AS INT) AS {ROUTE_COL}")
    return routed.repartition(num_partitions, ROUTE_COL)


def check_partition(pdf, partition_id: int) -> None:  # pandas DataFrame
    """Guards against any placement but route()'s (state would land in the wrong backend):
    every row must carry this task's partition id."""
    if len(pdf) and (pdf[PID_COL].to_numpy() != partition_id).any():
        raise RuntimeError(
            f"rows routed to partition {partition_id} carry other partition ids; the "
            f"DataFrame was repartitioned after stateengine routed it")


def partition_rows(pdf, partition_id: int):  # pandas DataFrame -> pandas DataFrame
    """The data rows of a routed batch: checked to be this partition's, marker rows left out."""
    check_partition(pdf, partition_id)
    if MARKER_COL in pdf.columns and len(pdf):
        data = pdf[MARKER_COL].isna().to_numpy()
        if not data.all():
            pdf = pdf[data]
    return pdf


def _may_hold_nulls(column) -> bool:  # pandas Series
    """False for numpy integer and boolean columns, which cannot hold a null (checking them
    for NaN costs a pass over the column per batch)."""
    dtype = column.dtype
    return not (isinstance(dtype, np.dtype) and dtype.kind in "iub")


def check_no_null_keys(pdf, cols: list[str]) -> None:  # pandas DataFrame
    if not any(_may_hold_nulls(pdf[c]) and pdf[c].hasnans for c in cols):  # the usual case
        return
    nulls = pdf[cols].isna().any(axis=1)
    if nulls.any():
        bad = [c for c in cols if pdf[c].isna().any()]
        raise KeyTypeError(
            f"key column(s) {', '.join(bad)} hold nulls in {int(nulls.sum())} rows; keyed state "
            f"needs a key per row: filter the nulls out or fill them before stateengine")
