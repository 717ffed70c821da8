"""Routing rows to the Spark partition that owns their key group.

The key group is computed by Spark itself, ``pmod(hash(key cols...), max_parallelism)``, and
the engine computes the same number natively (tests compare both), so task ``p`` of ``N`` sees
exactly the keys of ``KeyGroupRange.for_operator(p, N, max_parallelism)``. Rows are placed
with ``DataFrame.repartitionById`` (pyspark >= 4.1), no hash partitioner involved.
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import KeyTypeError
from ..keygroups import check_max_parallelism
from ..serializers import Codec

KG_COL = "__se_kg"
PID_COL = "__se_pid"
INTERNAL_COLS = (KG_COL, PID_COL)

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


def key_codecs_for(df: DataFrame, cols: list[str]) -> tuple[int, ...]:
    """Engine key codecs for the Spark types of the key columns (their hash() rules)."""
    fields = {f.name: f.dataType for f in df.schema.fields}
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


def with_routing_columns(df: DataFrame, key: str | Sequence[str], num_partitions: int,
                         max_parallelism: int) -> DataFrame:
    """Adds ``__se_kg`` = pmod(hash(keys), maxP) and ``__se_pid`` = kg * N div maxP."""
    cols = key_columns(key)
    check_max_parallelism(max_parallelism)
    if not 1 <= num_partitions <= max_parallelism:
        raise ValueError(f"num_partitions {num_partitions} must lie in [1, max_parallelism="
                         f"{max_parallelism}]")
    hashed = F.hash(*[F.col(c) for c in cols])
    kg = F.pmod(hashed, F.lit(max_parallelism))
    return (df.withColumn(KG_COL, kg)
              .withColumn(PID_COL, F.expr(f"{KG_COL} * {num_partitions} div {max_parallelism}")
                          .cast("int")))


def route(df: DataFrame, key: str | Sequence[str], num_partitions: int,
          max_parallelism: int) -> DataFrame:
    """Rows placed so that partition p holds exactly the key groups of operator p of N.

    Spark runs a task for every one of the N partitions, empty ones included (each must
    commit its version); tasks check that their rows carry their own partition id.
    """
    routed = with_routing_columns(df, key, num_partitions, max_parallelism)
    return routed.repartitionById(num_partitions, F.col(PID_COL))


def check_partition(pdf, partition_id: int) -> None:  # pandas DataFrame
    """Guards against any placement but repartitionById's (state would land in the wrong
    backend): every row must carry this task's partition id."""
    if len(pdf) and (pdf[PID_COL].to_numpy() != partition_id).any():
        raise RuntimeError(
            f"rows routed to partition {partition_id} carry other partition ids; the "
            f"DataFrame was repartitioned after stateengine routed it")


def check_no_null_keys(pdf, cols: list[str]) -> None:  # pandas DataFrame
    nulls = pdf[cols].isna().any(axis=1)
    if nulls.any():
        bad = [c for c in cols if pdf[c].isna().any()]
        raise KeyTypeError(
            f"key column(s) {', '.join(bad)} hold nulls in {int(nulls.sum())} rows; keyed state "
            f"needs a key per row: filter the nulls out or fill them before stateengine")
