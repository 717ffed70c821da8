"""Micro-batches without data, so that timers fire while a stream is quiet.

Structured Streaming runs a micro-batch when a source brings data or when a stateful operator
of the last batch asks for one (``IncrementalExecution.shouldRunAnotherBatch``): Spark's
transformWithState asks at every trigger in time mode ProcessingTime and, in EventTime, when
the watermark moved past the one its last batch evicted with. stateengine's step is a
``mapInPandas``, which asks for nothing, so a query whose only stateful step is stateengine's
runs nothing while its sources are quiet and no timer fires. Each entry point therefore adds
to its output a branch that contributes no rows but makes Spark run the batches its own
operator would get:

* ``"processing_time"``: a ``rate-micro-batch`` source (one row per batch, one partition),
  filtered to nothing. A source with new data at every trigger makes Spark run a batch at
  every trigger, as it does for its processing-time operators; unlike theirs it also does so
  after a restart (a restarted query has no last batch to ask, so Spark's own operator waits
  for data). No state, no Python and one tiny task per batch.
* ``"event_time"``: a streaming ``dropDuplicates`` over the input, filtered to nothing by a
  nondeterministic predicate. Its ``shouldRunAnotherBatch`` is transformWithState's in
  EventTime (the input watermark moved), and its input carries the same watermark (Spark
  computes each stateful operator's watermark from the watermark nodes below it). The
  predicate must be nondeterministic: Spark would push a deterministic one below the
  watermark node, which would then see no rows and hold the query's watermark at 0 (the
  global watermark is the minimum over the watermark nodes). The branch reads the input a
  second time as a source of its own; the rows are dropped before the shuffle.
* ``"none"``: nothing is added.

Which one each entry point adds by default (``"auto"``) is decided by ``auto_for_processor``
and ``auto_for_apply``; docs/spark/quiet-streams.md explains the rule and its cost.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from .routing import quote

KINDS = ("auto", "processing_time", "event_time", "none")
# Where withWatermark records its delay: the metadata of the event-time column.
WATERMARK_METADATA = "spark.watermarkDelayMs"
_KEY = "__se_quiet"


def check_kind(kind: Any) -> str:
    """``kind`` if it names a way to run no-data batches, else a ValueError naming them."""
    if kind not in KINDS:
        raise ValueError(f"no_data_batches must be one of {', '.join(map(repr, KINDS))}, "
                         f"got {kind!r}")
    return kind


def watermark_columns(df: DataFrame) -> list[str]:
    """The columns of ``df`` that ``withWatermark`` marked as event time."""
    return [f.name for f in df.schema.fields if WATERMARK_METADATA in (f.metadata or {})]


def auto_for_processor(time_mode: Any) -> str:
    """A StatefulProcessor's batches are those Spark runs for its own operator in that time
    mode; in time mode None nothing can fire, so nothing is added (Spark's operator still
    asks when a watermark moves: docs/spark/quiet-streams.md)."""
    from .processor_handle import time_mode_name  # pyspark >= 4.0, as processors are

    return {"ProcessingTime": "processing_time",
            "EventTime": "event_time"}.get(time_mode_name(time_mode), "none")


def auto_for_apply(df: DataFrame, has_timers: bool) -> str:
    """``apply_with_state`` has no time mode: without ``on_timer`` nothing fires; with it, an
    input that carries a watermark gets event-time batches, any other processing-time ones
    (its event-time timers could only fire on a watermark from elsewhere in the query)."""
    if not has_timers:
        return "none"
    return "event_time" if watermark_columns(df) else "processing_time"


def attach(out: DataFrame, source: DataFrame, kind: str, auto: str) -> DataFrame:
    """``out`` (a stateful step's result) with the branch ``kind`` asks for (``"auto"``:
    ``auto``), built on ``source``, the step's input. A batch DataFrame (``foreachBatch``, batch
    jobs) runs whatever batches its own query runs: ``kind`` must be ``"auto"`` or ``"none"``."""
    check_kind(kind)
    if not out.isStreaming:
        if kind not in ("auto", "none"):
            raise ValueError(
                f"no_data_batches={kind!r} applies to a streaming DataFrame; with a batch "
                f"DataFrame (foreachBatch) add the branch to the query that calls it: "
                f"with_no_data_batches(stream, {kind!r})")
        return out
    return with_no_data_batches(out, auto if kind == "auto" else kind, source)


def with_no_data_batches(df: DataFrame, kind: str, source: DataFrame | None = None
                         ) -> DataFrame:
    """``df``, a streaming DataFrame, with the same rows and a branch that makes Spark run
    micro-batches without data: ``"processing_time"`` at every trigger (a ``rate-micro-batch``
    source filtered to nothing), ``"event_time"`` after each batch that moved the watermark of
    ``source`` (default ``df``: a ``dropDuplicates`` over it that passes no row), ``"none"``
    never (``df`` as is).

    The stateful steps add it themselves (their ``no_data_batches=``). In a ``foreachBatch``
    query whose function calls them, apply it to the stream before ``writeStream`` so that the
    function also runs on the quiet triggers. Either branch adds a source to the query, which
    Spark refuses when a query that ran without it restarts."""
    check_kind(kind)
    if kind == "auto":
        raise ValueError("with_no_data_batches needs 'processing_time', 'event_time' or 'none'")
    if not df.isStreaming:
        raise ValueError("with_no_data_batches takes a streaming DataFrame")
    if kind == "none":
        return df
    if kind == "processing_time":
        branch = (df.sparkSession.readStream.format("rate-micro-batch")
                  .option("rowsPerBatch", 1).option("numPartitions", 1)
                  .option("advanceMillisPerBatch", 0).load()
                  .where("false"))
    else:
        source = df if source is None else source
        if not source.isStreaming:
            raise ValueError("event-time no-data batches need a streaming source DataFrame")
        branch = (source.where("spark_partition_id() < 0")
                  .selectExpr(f"CAST(NULL AS INT) AS {_KEY}").dropDuplicates([_KEY]))
    nulls = [f"CAST(NULL AS {sql_type(f.dataType)}) AS {quote(f.name)}"
             for f in df.schema.fields]
    return df.union(branch.selectExpr(*nulls))


def sql_type(t: T.DataType) -> str:
    """``t`` as a SQL type name, nested field names quoted."""
    if isinstance(t, T.StructType):
        return "STRUCT<" + ", ".join(f"{quote(f.name)}: {sql_type(f.dataType)}"
                                     for f in t.fields) + ">"
    if isinstance(t, T.ArrayType):
        return f"ARRAY<{sql_type(t.elementType)}>"
    if isinstance(t, T.MapType):
        return f"MAP<{sql_type(t.keyType)}, {sql_type(t.valueType)}>"
    return t.simpleString()


def auto_for_group_state(timeout: str, watermarked: bool) -> str:
    """``applyInPandasWithState``'s operator asks for a batch at every trigger with
    ProcessingTimeTimeout and after the watermark moved with EventTimeTimeout (when the input
    has one); NoTimeout asks for nothing that could fire."""
    if timeout == "ProcessingTimeTimeout":
        return "processing_time"
    if timeout == "EventTimeTimeout" and watermarked:
        return "event_time"
    return "none"
