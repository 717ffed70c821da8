"""Stateful pandas functions over Spark DataFrames, batch after batch.

``apply_with_state`` calls ``func(key, rows, ctx)`` once per key with that key's rows (a pandas
DataFrame) and the context's state handles bound to the key. ``map_with_state`` calls
``func(rows, ctx)`` once per partition with all its rows, for code that uses the batch state
operations (numpy in, numpy out) and never loops over keys in Python.

Both return a lazy DataFrame of the same kind as their input. Computing it runs one Spark task
per partition that loads state version ``batch_id``, runs the function and commits version
``batch_id + 1``; computing it again (or replaying a batch id after a failure) reloads
``batch_id`` and yields the same committed state, so nothing is counted twice. Cache the result
if you use it more than once.

On a streaming DataFrame the result is a streaming DataFrame: the stateful step is part of the
query, and each micro-batch's tasks take the batch id from Spark (``streaming.sql.batchId``)
and, given the query's checkpoint location, its watermark and timestamp from the query's
offset log (``batch.py``). Every partition runs a task in every batch, empty ones included, so
each commits its version and fires the timers that came due (``routing.with_every_partition``).

Functions may return a pandas DataFrame, a list of row tuples (in schema order), or None.
An exception they raise reaches the driver as ``UserFunctionError`` naming the function, the
operator, the key, the batch and the partition (``user_errors.py``); a result that does not fit
the schema as ``OutputSchemaError`` (``output_schema.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

import numbers
import os

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..checkpoint.storage import CheckpointStorage
from ..descriptors import StateDescriptor, check_no_pickle
from ..errors import OutputSchemaError
from ..keygroups import DEFAULT_MAX_PARALLELISM
from ..times import to_millis
from .batch import query_storage
from .context import BatchContext, GroupContext
from .metrics import internal_schema, metrics_frame, observe_state, tagged
from .no_data_batches import attach, auto_for_apply
from .frames import RowSlices, without_columns
from .evolution_check import check_evolution
from .output_schema import FrameCheck, check_rows, rows_error
from .routing import INTERNAL_COLS, KG_COL, check_no_null_keys, default_num_partitions, \
    key_codecs_for, key_columns, partition_rows, route
from .runtime import TaskConfig, TaskState, guarded, ttl_clock
from .workers import check_workers

_FLUSH_ROWS = 16_384


def _schema(df: DataFrame, schema: T.StructType | str) -> T.StructType:
    """The output schema as a StructType. A DDL string is parsed by the DataFrame's own session
    (an empty DataFrame of that schema), which works alike on classic and Connect sessions."""
    if isinstance(schema, T.StructType):
        return schema
    if not isinstance(schema, str):
        raise ValueError(f"schema must be a StructType or a DDL string, got {schema!r}")
    return df.sparkSession.createDataFrame([], schema).schema


def _batch_facts(df: DataFrame, batch_id: Any, watermark: Any, processing_time: Any,
                 query_checkpoint: Any, needs_times: bool) -> dict[str, Any]:
    """The batch id and times as the tasks will use them, checked on the driver: explicit
    values (datetimes converted to ms in the session's time zone), or in a streaming query
    Spark's own, read by each task."""
    streaming = df.isStreaming
    if batch_id is not None:
        if isinstance(batch_id, bool) or not isinstance(batch_id, numbers.Integral) or \
                batch_id < 0:
            raise ValueError(f"batch_id must be an int >= 0, got {batch_id!r}")
        if streaming:
            raise ValueError(
                f"batch_id={batch_id} was given for a streaming DataFrame, which runs once per "
                f"micro-batch: leave batch_id out and each batch uses its own id")
    given = [n for n, v in (("watermark", watermark), ("processing_time", processing_time))
             if v is not None]
    if given and query_checkpoint is not None:
        raise ValueError(f"{' and '.join(given)} and query_checkpoint both set the batch's "
                         f"times: pass one or the other")
    if given and batch_id is None:
        raise ValueError(
            f"{' and '.join(given)} go with an explicit batch_id; without one (inside a "
            f"streaming query) pass query_checkpoint=<the query's checkpointLocation> and each "
            f"batch uses Spark's watermark and batch timestamp")
    if needs_times and batch_id is None and query_checkpoint is None:
        raise ValueError(
            "timers (and state TTL) in a streaming query need each batch's watermark and "
            "timestamp, which stateengine reads from the query's offset log: pass "
            "query_checkpoint=<the checkpointLocation given to writeStream>")
    zone = df.sparkSession.conf.get("spark.sql.session.timeZone")
    return {
        "batch_id": None if batch_id is None else int(batch_id),
        "watermark": None if watermark is None else to_millis(watermark, "watermark", zone),
        "processing_time": None if processing_time is None else
        to_millis(processing_time, "processing_time", zone),
        "query_checkpoint": None if query_checkpoint is None else
        query_storage(os.fspath(query_checkpoint)).uri,
        "time_zone": zone,
    }


def task_config(df: DataFrame, key: str | Sequence[str], states: Sequence[StateDescriptor],
                checkpoint: str, out: T.StructType, *, batch_id: Any, num_partitions: int | None,
                max_parallelism: int, operator_id: str, query_checkpoint: Any,
                watermark: Any = None, processing_time: Any = None, needs_times: bool = False,
                batch_timestamp_ms: Any = None, **extra: Any) -> TaskConfig:
    """Everything the tasks of a stateful step need, checked on the driver (state names,
    pickle, batch facts, the TTL clock, key types); also makes sure the Python workers import
    stateengine."""
    facts = _batch_facts(df, batch_id, watermark, processing_time, query_checkpoint,
                         needs_times or any(getattr(d, "ttl", None) for d in states))
    facts["ttl_time_ms"] = ttl_clock(states, batch_timestamp_ms, facts["batch_id"],
                                     facts["processing_time"], facts["query_checkpoint"],
                                     facts["time_zone"])
    return config_from_facts(df, key, states, checkpoint, out, facts,
                             num_partitions=num_partitions, max_parallelism=max_parallelism,
                             operator_id=operator_id, **extra)


def config_from_facts(df: DataFrame, key: str | Sequence[str],
                      states: Sequence[StateDescriptor], checkpoint: str, out: T.StructType,
                      facts: dict[str, Any], *, num_partitions: int | None,
                      max_parallelism: int, operator_id: str, **extra: Any) -> TaskConfig:
    """``task_config`` after the batch facts are settled (runners with their own rules for the
    batch's times, such as StatefulProcessors' time modes, settle them first)."""
    names = [d.name for d in states]
    if len(set(names)) != len(names):
        raise ValueError(f"state names must be unique, got {names}")
    if not extra.get("allow_pickle"):
        for d in states:  # refuse on the driver, not in every task
            check_no_pickle(d)
    cols = key_columns(key)
    n = num_partitions or default_num_partitions(df.sparkSession, max_parallelism)
    cfg = TaskConfig(
        checkpoint=CheckpointStorage(checkpoint).uri, operator_id=operator_id, num_partitions=n,
        max_parallelism=max_parallelism, key_cols=cols, key_codecs=key_codecs_for(df, cols),
        descriptors=list(states), output_cols=out.names, **facts, **extra)
    # a schema that cannot evolve from the checkpoint's fails here, not in every task
    check_evolution(cfg.checkpoint, operator_id, max_parallelism, states, cfg.key_codecs)
    check_workers(df.sparkSession)
    return cfg


def run_stateful(df: DataFrame, cfg: TaskConfig, out: T.StructType,
                 body: Callable[[TaskState, Iterator[Any]], Iterator[pd.DataFrame]],
                 grouped: bool) -> DataFrame:
    """The Spark side that every runner of user code shares: ``df`` routed so that each of the
    partitions runs one task per batch (empty ones included), and in each task
    ``body(task, data)`` between loading version ``batch_id`` and committing ``batch_id + 1``
    (``task.batch`` holds the batch id, watermark and timestamp). ``data`` yields ``(key,
    rows)`` per key, in key-group order, when ``grouped``; else the partition's rows as one
    frame (nothing when it has none). The result has the kind of ``df``: streaming or not."""
    routed = route(df, cfg.key_cols, cfg.num_partitions, cfg.max_parallelism,
                   every_partition=True)
    spark_sorts = grouped and not df.isStreaming
    if spark_sorts:  # keys arrive together, so a partition streams through with bounded memory
        routed = routed.sortWithinPartitions(KG_COL, *cfg.key_cols)

    def data(task: TaskState, batches: Iterator[pd.DataFrame]) -> Iterator[Any]:
        return task_data(task, batches, grouped, spark_sorts)

    if not df.isStreaming:  # a batch job reads its metrics with state_metrics()
        def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            yield from guarded(cfg, lambda task: body(task, data(task, batches)))

        return routed.mapInPandas(run, out)

    # In a streaming query each task adds its metrics row, observed into the query's progress
    # and dropped before anything downstream sees it (spark/metrics.py).
    def run_observed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield from guarded(cfg, lambda task: tagged(body(task, data(task, batches))),
                           lambda task: [metrics_frame(cfg.output_cols, task)])

    return observe_state(routed.mapInPandas(run_observed, internal_schema(out)), cfg.operator_id)


def task_data(task: TaskState, batches: Iterable[pd.DataFrame], grouped: bool,
              presorted: bool) -> Iterator[Any]:
    """What a task body gets from its partition's routed frames: ``(key, rows)`` per key when
    ``grouped`` (the task sorts them unless ``presorted``), else the partition's rows as one
    frame. Spark's tasks and stateengine.testing both call it."""
    if not grouped:
        return _whole_partition(batches, task.cfg.key_cols, task.partition_id)
    if not presorted:
        batches = _sorted_by_key(batches, task.cfg.key_cols, task.partition_id)
    return _iter_groups(batches, task.cfg.key_cols, task.partition_id)


class _Output:
    """Collects function results and hands them to Spark in large frames (one Arrow
    conversion per ~16k rows instead of one per key). Each result object is checked against
    the output schema (output_schema.py)."""

    def __init__(self, schema: T.StructType) -> None:
        self.schema = schema
        self.columns = schema.names
        self.check_frame = FrameCheck(schema)
        self.frames: list[pd.DataFrame] = []
        self.rows: list[tuple] = []
        self.count = 0

    def add(self, result: Any) -> Iterator[pd.DataFrame]:
        if result is None:
            return
        if isinstance(result, pd.DataFrame):
            self.check_frame(result)
            if len(result):
                self.frames.append(result)
                self.count += len(result)
        elif isinstance(result, list):
            check_rows(result, self.schema)
            self.rows.extend(result)
            self.count += len(result)
        elif isinstance(result, Iterable):
            for part in result:
                yield from self.add(part)
            return
        else:
            raise OutputSchemaError(
                f"stateful functions return a pandas DataFrame, a list of row tuples or None "
                f"(of {self.schema.simpleString()}), not {type(result).__name__}")
        if self.count >= _FLUSH_ROWS:
            yield from self.flush()

    def flush(self) -> Iterator[pd.DataFrame]:
        parts = list(self.frames)
        if self.rows:
            try:
                parts.append(pd.DataFrame.from_records(self.rows, columns=self.columns))
            except (ValueError, TypeError) as e:  # a later row of another length
                raise rows_error(e, self.schema) from None
        self.frames, self.rows, self.count = [], [], 0
        if parts:
            yield parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _data_rows(pdf: pd.DataFrame, partition_id: int) -> pd.DataFrame:
    return without_columns(partition_rows(pdf, partition_id), INTERNAL_COLS)


def _whole_partition(batches: Iterable[pd.DataFrame], cols: list[str],
                     partition_id: int) -> Iterator[pd.DataFrame]:
    parts = [p for p in (_data_rows(b, partition_id) for b in batches) if len(p)]
    if parts:
        rows = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        check_no_null_keys(rows, cols)
        yield rows.reset_index(drop=True)


def _sorted_by_key(batches: Iterable[pd.DataFrame], cols: list[str],
                   partition_id: int) -> Iterator[pd.DataFrame]:
    """A streaming micro-batch's partition as one frame sorted by key group and key (Spark
    refuses sortWithinPartitions on streaming DataFrames)."""
    parts = [p for p in (partition_rows(b, partition_id) for b in batches) if len(p)]
    if parts:
        pdf = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        yield pdf.sort_values([KG_COL, *cols], kind="stable", ignore_index=True)


def _iter_groups(batches: Iterable[pd.DataFrame], cols: list[str], partition_id: int,
                 chunk: int | None = None) -> Iterator[tuple[Any, Any]]:
    """(key, rows) per key from batches sorted by key, rows a frame indexed 0..n-1; a key may
    span batch boundaries. With ``chunk`` (StatefulProcessors) rows are instead the key's
    frames of at most ``chunk`` rows each, as Spark hands them to ``handleInputRows``: a
    1-tuple for a key within the limit (the common case costs one comparison), else a
    generator of slices."""
    carry: pd.DataFrame | None = None
    for raw in batches:
        pdf = _data_rows(raw, partition_id)
        if carry is not None and len(carry):
            pdf = pd.concat([carry, pdf], ignore_index=True)
        elif not _positional(pdf.index):
            pdf = pdf.reset_index(drop=True)
        if not len(pdf):
            continue
        check_no_null_keys(pdf, cols)
        starts = _run_starts(pdf, cols)
        # each key once, as pandas gives a column's values (Series.tolist: Python scalars,
        # Timestamps), read at the first row of its run only
        firsts = [pdf[c].take(starts).tolist() for c in cols]
        keys = firsts[0] if len(cols) == 1 else list(zip(*firsts))
        bounds = starts.tolist() + [len(pdf)]
        rows = RowSlices(pdf)  # frames indexed 0..n-1, as Spark's grouped pandas UDFs get them
        if chunk is None:
            for key, s, e in zip(keys[:-1], bounds[:-2], bounds[1:-1]):
                yield key, rows(s, e)
        else:
            for key, s, e in zip(keys[:-1], bounds[:-2], bounds[1:-1]):
                yield key, ((rows(s, e),) if e - s <= chunk else _chunks(rows, s, e, chunk))
        # the last key may go on in the next batch
        carry_key, carry = keys[-1], rows(bounds[-2], len(pdf))
    if carry is not None and len(carry):
        n = len(carry)
        yield carry_key, (carry if chunk is None else (carry,) if n <= chunk
                          else _chunks(RowSlices(carry), 0, n, chunk))


def _positional(index: pd.Index) -> bool:
    """Whether an index is already 0..n-1 (as Arrow's conversion gives it): no reset needed."""
    return type(index) is pd.RangeIndex and index.start == 0 and index.step == 1


# dtypes whose adjacent values compare as groupby groups them (no nulls reach here): numbers,
# booleans, datetimes; object columns (strings, bytes, dates, decimals) by Python's ==
_EXACT_KINDS = frozenset("iufbmMO")


def _run_starts(pdf: pd.DataFrame, cols: list[str]) -> np.ndarray:
    """The first row of each run of equal keys in a frame sorted by key: where any key
    column differs from the row before. One vectorised comparison per column (a groupby
    costs a few hundred microseconds a batch); other dtypes take the groupby."""
    n = len(pdf)
    change = np.zeros(max(n - 1, 0), dtype=bool)
    for c in cols:
        values = pdf[c].to_numpy()
        if values.ndim != 1 or values.dtype.kind not in _EXACT_KINDS:
            break
        try:
            differs = values[1:] != values[:-1]
        except (TypeError, ValueError):
            break
        if not isinstance(differs, np.ndarray) or differs.dtype != bool or \
                differs.shape != change.shape:
            break
        change |= differs
    else:
        return np.flatnonzero(np.r_[True, change])
    ids = pdf.groupby(cols, sort=False, dropna=False).ngroup().to_numpy()
    return np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])


def _chunks(rows: RowSlices, start: int, stop: int, chunk: int) -> Iterator[pd.DataFrame]:
    """Rows start..stop-1 as frames of at most ``chunk`` rows, each indexed 0..n-1."""
    for s in range(start, stop, chunk):
        yield rows(s, min(s + chunk, stop))


TaskBody = Callable[[TaskState, Iterator[Any]], Iterator[pd.DataFrame]]


def grouped_body(func: Callable[..., Any], on_timer: Callable[..., Any] | None,
                 out: T.StructType) -> TaskBody:
    """The task body of ``apply_with_state``: ``func`` per key, then the due timers through
    ``on_timer``; its Spark tasks and stateengine.testing run the same body."""

    def body(task: TaskState, groups: Iterator[Any]) -> Iterator[pd.DataFrame]:
        ctx = GroupContext(task)
        backend = task.backend
        site = task.site
        sink = _Output(out)
        for k, rows in groups:
            backend.set_current_key(k)
            ctx.key = k
            result = site.results(func, k, rows, ctx, key=k)  # per call, never per row
            try:
                yield from sink.add(result)
            except OutputSchemaError as e:
                raise site.output_error(func, e, k) from None
        if on_timer is not None:
            timers = backend.timer_service
            due = []
            if task.batch.watermark is not None:
                due.append(timers.advance_watermark(task.batch.watermark))
            if task.batch.processing_time is not None:
                due.append(timers.advance_processing_time(task.batch.processing_time))
            for fired in due:
                for timer in fired:
                    ctx.key = timer.key
                    result = site.results(on_timer, timer.key, timer, ctx, key=timer.key)
                    try:
                        yield from sink.add(result)
                    except OutputSchemaError as e:
                        raise site.output_error(on_timer, e, timer.key) from None
        try:
            yield from sink.flush()
        except OutputSchemaError as e:
            raise site.output_error(func, e) from None
    return body


def partition_body(func: Callable[..., Any], out: T.StructType) -> TaskBody:
    """The task body of ``map_with_state``: ``func`` once with the partition's rows."""

    def body(task: TaskState, partition: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        site = task.site
        sink = _Output(out)
        for rows in partition:
            result = site.results(func, rows, BatchContext(task))
            try:
                yield from sink.add(result)
            except OutputSchemaError as e:
                raise site.output_error(func, e) from None
        try:
            yield from sink.flush()
        except OutputSchemaError as e:
            raise site.output_error(func, e) from None
    return body


def apply_with_state(df: DataFrame, key: str | Sequence[str],
                     func: Callable[[Any, pd.DataFrame, GroupContext], Any],
                     schema: T.StructType | str, states: Sequence[StateDescriptor],
                     checkpoint: str, batch_id: int | None = None,
                     num_partitions: int | None = None,
                     max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                     operator_id: str = "default",
                     on_timer: Callable[[Any, Any, GroupContext], Any] | None = None,
                     watermark: Any = None, processing_time: Any = None,
                     min_versions_to_retain: int = 10, local_dir: str | None = None,
                     memory_budget_mb: int | None = None,
                     bottommost_bloom_filters: bool = False,
                     allow_pickle: bool = False,
                     batch_timestamp_ms: Any = None,
                     query_checkpoint: str | None = None,
                     no_data_batches: str = "auto") -> DataFrame:
    """Runs ``func(key, rows, ctx)`` per key with keyed state; returns its outputs. ``rows`` is
    the key's rows of the batch as a pandas DataFrame indexed 0..n-1 (as Spark's grouped
    pandas functions get them).

    ``states`` declares the descriptors (``ctx.state(name)`` gives the handle, bound to the
    key). After all keys, event-time timers up to ``watermark`` and processing-time timers up
    to ``processing_time`` fire through ``on_timer(key, timer, ctx)`` (only when ``on_timer``
    is given); times are int ms or ``datetime``/``pandas.Timestamp``/``numpy.datetime64``
    (without a zone: in ``spark.sql.session.timeZone``).

    ``batch_id`` is the micro-batch (``foreachBatch``'s id, or any increasing count in batch
    jobs): version ``batch_id`` is loaded and ``batch_id + 1`` committed. Leave it out on a
    streaming DataFrame: the result is a streaming DataFrame whose tasks take Spark's batch id;
    with ``query_checkpoint`` (the ``checkpointLocation`` of the query) they also take the
    batch's watermark and timestamp from the query's offset log, for timers and TTL. A
    ``batch_id`` past 0 on an operator without state starts from empty state.

    State lives in ``checkpoint`` (a directory or URI every executor can reach) under
    ``operator_id``; ``num_partitions`` (default: ``spark.sql.shuffle.partitions`` capped at
    ``max_parallelism``) may change between batches (state is redistributed by key group) but
    ``max_parallelism`` must stay fixed. ``memory_budget_mb`` sets each Python
    worker's budget; ``bottommost_bloom_filters`` keeps Bloom filters on every level, for
    states mostly asked about keys they do not hold (see ``configure_bloom_filters``).
    ``allow_pickle`` lets the tasks register ``value_type="pickle"`` states and unpickle what
    they read (KeyedStateBackend's ``allow_pickle``); only for checkpoints you trust.
    ``batch_timestamp_ms`` is the clock of states with TTL (``ttl=StateTtlConfig(...)``) with
    an explicit ``batch_id``: an entry expires ``ttl`` after its last access as of this time,
    which a replayed batch must repeat (Spark's batchTimestampMs does). Without it the TTL
    clock is the batch's processing time (``processing_time``, or Spark's from the offset log
    with ``query_checkpoint``); with neither, states with TTL raise TtlTimeNotSetError.

    ``no_data_batches`` (streaming only) decides which micro-batches without data Spark runs
    for the step, so that timers fire while the input is quiet: ``"auto"`` none without
    ``on_timer``, else those after the watermark moved when ``df`` carries a watermark
    (``withWatermark``) and one at every trigger when it does not; or ``"processing_time"``,
    ``"event_time"``, ``"none"`` (see ``with_no_data_batches``).
    """
    out = _schema(df, schema)
    cfg = task_config(df, key, states, checkpoint, out, batch_id=batch_id,
                      num_partitions=num_partitions, max_parallelism=max_parallelism,
                      operator_id=operator_id, query_checkpoint=query_checkpoint,
                      watermark=watermark, processing_time=processing_time,
                      needs_times=on_timer is not None,
                      min_versions_to_retain=min_versions_to_retain, local_dir=local_dir,
                      memory_budget_mb=memory_budget_mb,
                      bottommost_bloom_filters=bottommost_bloom_filters,
                      allow_pickle=allow_pickle, batch_timestamp_ms=batch_timestamp_ms)

    return attach(run_stateful(df, cfg, out, grouped_body(func, on_timer, out), grouped=True),
                  df, no_data_batches, auto_for_apply(df, on_timer is not None))


def map_with_state(df: DataFrame, key: str | Sequence[str],
                   func: Callable[[pd.DataFrame, BatchContext], Any],
                   schema: T.StructType | str, states: Sequence[StateDescriptor],
                   checkpoint: str, batch_id: int | None = None,
                   num_partitions: int | None = None,
                   max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                   operator_id: str = "default", min_versions_to_retain: int = 10,
                   local_dir: str | None = None,
                   memory_budget_mb: int | None = None,
                   bottommost_bloom_filters: bool = False,
                   allow_pickle: bool = False,
                   batch_timestamp_ms: Any = None,
                   query_checkpoint: str | None = None,
                   no_data_batches: str = "auto") -> DataFrame:
    """Runs ``func(rows, ctx)`` once per partition with all its rows (pandas) and state
    handles whose batch operations (``get_many``, ``put_many``, ``add_many``) take key arrays.
    Versions, batch ids (also inside a streaming query, with ``query_checkpoint`` for
    ``ctx.watermark`` and ``ctx.processing_time``), routing, rescaling, ``allow_pickle`` and
    ``batch_timestamp_ms`` (the TTL clock) behave as in ``apply_with_state``; a partition
    without rows commits its version without calling ``func``, so ``no_data_batches``
    (``"auto"``) adds no batches; ``"processing_time"`` or ``"event_time"`` add them anyway.
    """
    out = _schema(df, schema)
    cfg = task_config(df, key, states, checkpoint, out, batch_id=batch_id,
                      num_partitions=num_partitions, max_parallelism=max_parallelism,
                      operator_id=operator_id, query_checkpoint=query_checkpoint,
                      min_versions_to_retain=min_versions_to_retain, local_dir=local_dir,
                      memory_budget_mb=memory_budget_mb,
                      bottommost_bloom_filters=bottommost_bloom_filters,
                      allow_pickle=allow_pickle, batch_timestamp_ms=batch_timestamp_ms)

    return attach(run_stateful(df, cfg, out, partition_body(func, out), grouped=False), df,
                  no_data_batches, "none")
