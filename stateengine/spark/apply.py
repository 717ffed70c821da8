"""Stateful pandas functions over Spark DataFrames, batch after batch.

``apply_with_state`` calls ``func(key, rows, ctx)`` once per key with that key's rows (a pandas
DataFrame) and the context's state handles bound to the key. ``map_with_state`` calls
``func(rows, ctx)`` once per partition with all its rows, for code that uses the batch state
operations (numpy in, numpy out) and never loops over keys in Python.

Both return a lazy DataFrame. Computing it runs one Spark task per partition that loads state
version ``batch_id``, runs the function and commits version ``batch_id + 1``; computing it again
(or replaying a batch id after a failure) reloads ``batch_id`` and yields the same committed
state, so nothing is counted twice. Cache the result if you use it more than once.

Functions may return a pandas DataFrame, a list of row tuples (in schema order), or None.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..checkpoint.storage import CheckpointStorage
from ..descriptors import StateDescriptor, check_no_pickle
from ..keygroups import DEFAULT_MAX_PARALLELISM
from .context import BatchContext, GroupContext
from .routing import INTERNAL_COLS, KG_COL, check_no_null_keys, check_partition, \
    default_num_partitions, key_codecs_for, key_columns, route
from .runtime import TaskConfig, TaskState, guarded, ttl_clock

_FLUSH_ROWS = 16_384


def _schema(df: DataFrame, schema: T.StructType | str) -> T.StructType:
    """The output schema as a StructType. A DDL string is parsed by the DataFrame's own session
    (an empty DataFrame of that schema), which works alike on classic and Connect sessions."""
    if isinstance(schema, T.StructType):
        return schema
    if not isinstance(schema, str):
        raise ValueError(f"schema must be a StructType or a DDL string, got {schema!r}")
    return df.sparkSession.createDataFrame([], schema).schema


def _config(df: DataFrame, key: str | Sequence[str], states: Sequence[StateDescriptor],
            checkpoint: str, batch_id: int, num_partitions: int | None, max_parallelism: int,
            operator_id: str, out: T.StructType, **extra: Any) -> TaskConfig:
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise ValueError(f"batch_id must be an int >= 0, got {batch_id!r}")
    names = [d.name for d in states]
    if len(set(names)) != len(names):
        raise ValueError(f"state names must be unique, got {names}")
    if not extra.get("allow_pickle"):
        for d in states:  # refuse on the driver, not in every task
            check_no_pickle(d)
    cols = key_columns(key)
    n = num_partitions or default_num_partitions(df.sparkSession, max_parallelism)
    return TaskConfig(
        checkpoint=CheckpointStorage(checkpoint).uri, operator_id=operator_id, num_partitions=n,
        max_parallelism=max_parallelism, key_cols=cols, key_codecs=key_codecs_for(df, cols),
        descriptors=list(states), batch_id=batch_id, output_cols=out.names, **extra)


class _Output:
    """Collects function results and hands them to Spark in large frames (one Arrow
    conversion per ~16k rows instead of one per key)."""

    def __init__(self, columns: list[str]) -> None:
        self.columns = columns
        self.frames: list[pd.DataFrame] = []
        self.rows: list[tuple] = []
        self.count = 0

    def add(self, result: Any) -> Iterator[pd.DataFrame]:
        if result is None:
            return
        if isinstance(result, pd.DataFrame):
            if len(result):
                self.frames.append(result)
                self.count += len(result)
        elif isinstance(result, list):
            self.rows.extend(result)
            self.count += len(result)
        elif isinstance(result, Iterable):
            for part in result:
                yield from self.add(part)
            return
        else:
            raise TypeError(f"stateful functions return a pandas DataFrame, a list of row tuples "
                            f"or None, not {type(result).__name__}")
        if self.count >= _FLUSH_ROWS:
            yield from self.flush()

    def flush(self) -> Iterator[pd.DataFrame]:
        parts = list(self.frames)
        if self.rows:
            parts.append(pd.DataFrame.from_records(self.rows, columns=self.columns))
        self.frames, self.rows, self.count = [], [], 0
        if parts:
            yield parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _data_rows(pdf: pd.DataFrame, partition_id: int) -> pd.DataFrame:
    check_partition(pdf, partition_id)
    return pdf.drop(columns=[c for c in INTERNAL_COLS if c in pdf.columns])


def _iter_groups(batches: Iterable[pd.DataFrame], cols: list[str],
                 partition_id: int) -> Iterator[tuple[Any, pd.DataFrame]]:
    """(key, rows) per key from batches sorted by key; a key may span batch boundaries."""
    carry: pd.DataFrame | None = None
    for raw in batches:
        pdf = _data_rows(raw, partition_id)
        if carry is not None and len(carry):
            pdf = pd.concat([carry, pdf], ignore_index=True)
        else:
            pdf = pdf.reset_index(drop=True)
        if not len(pdf):
            continue
        check_no_null_keys(pdf, cols)
        ids = pdf.groupby(cols, sort=False, dropna=False).ngroup().to_numpy()
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        key_values = [pdf[c].tolist() for c in cols]
        bounds = list(starts) + [len(pdf)]
        for s, e in zip(bounds[:-2], bounds[1:-1]):
            yield _key_at(key_values, s), pdf.iloc[s:e]
        carry = pdf.iloc[bounds[-2]:]
    if carry is not None and len(carry):
        key_values = [carry[c].tolist() for c in cols]
        yield _key_at(key_values, 0), carry


def _key_at(key_values: list[list[Any]], i: int) -> Any:
    if len(key_values) == 1:
        return key_values[0][i]
    return tuple(k[i] for k in key_values)


def apply_with_state(df: DataFrame, key: str | Sequence[str],
                     func: Callable[[Any, pd.DataFrame, GroupContext], Any],
                     schema: T.StructType | str, states: Sequence[StateDescriptor],
                     checkpoint: str, batch_id: int, num_partitions: int | None = None,
                     max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                     operator_id: str = "default",
                     on_timer: Callable[[Any, Any, GroupContext], Any] | None = None,
                     watermark: int | None = None, processing_time: int | None = None,
                     min_versions_to_retain: int = 10, local_dir: str | None = None,
                     memory_budget_mb: int | None = None,
                     bottommost_bloom_filters: bool = False,
                     allow_pickle: bool = False,
                     batch_timestamp_ms: int | None = None) -> DataFrame:
    """Runs ``func(key, rows, ctx)`` per key with keyed state; returns its outputs.

    ``states`` declares the descriptors (``ctx.state(name)`` gives the handle, bound to the
    key). After all keys, event-time timers up to ``watermark`` and processing-time timers up
    to ``processing_time`` fire through ``on_timer(key, timer, ctx)`` (only when ``on_timer``
    is given). State lives in ``checkpoint`` (a directory or URI every executor can reach) under
    ``operator_id``; ``num_partitions`` (default: ``spark.sql.shuffle.partitions`` capped at
    ``max_parallelism``) may change between batches (state is redistributed by key group) but
    ``max_parallelism`` must stay fixed. ``memory_budget_mb`` sets each Python
    worker's budget; ``bottommost_bloom_filters`` keeps Bloom filters on every level, for
    states mostly asked about keys they do not hold (see ``configure_bloom_filters``).
    ``allow_pickle`` lets the tasks register ``value_type="pickle"`` states and unpickle what
    they read (KeyedStateBackend's ``allow_pickle``); only for checkpoints you trust.
    ``batch_timestamp_ms`` is the clock of states with TTL (``ttl=StateTtlConfig(...)``):
    entries expire ``ttl`` after their last write as of this batch's timestamp, which a
    replayed batch must repeat; without it ``processing_time`` is used.
    """
    out = _schema(df, schema)
    clock = ttl_clock(states, batch_timestamp_ms, processing_time)
    cfg = _config(df, key, states, checkpoint, batch_id, num_partitions, max_parallelism,
                  operator_id, out, watermark=watermark, processing_time=processing_time,
                  min_versions_to_retain=min_versions_to_retain, local_dir=local_dir,
                  memory_budget_mb=memory_budget_mb,
                  bottommost_bloom_filters=bottommost_bloom_filters, allow_pickle=allow_pickle,
                  ttl_time_ms=clock)
    routed = route(df, cfg.key_cols, cfg.num_partitions, max_parallelism)
    routed = routed.sortWithinPartitions(KG_COL, *cfg.key_cols)

    def body(task: TaskState, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        ctx = GroupContext(task)
        backend = task.backend
        sink = _Output(cfg.output_cols)
        for k, rows in _iter_groups(batches, cfg.key_cols, task.partition_id):
            backend.set_current_key(k)
            ctx.key = k
            yield from sink.add(func(k, rows, ctx))
        if on_timer is not None:
            timers = backend.timer_service
            due = []
            if cfg.watermark is not None:
                due.append(timers.advance_watermark(cfg.watermark))
            if cfg.processing_time is not None:
                due.append(timers.advance_processing_time(cfg.processing_time))
            for fired in due:
                for timer in fired:
                    ctx.key = timer.key
                    yield from sink.add(on_timer(timer.key, timer, ctx))
        yield from sink.flush()

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield from guarded(cfg, lambda task: body(task, batches))

    return routed.mapInPandas(run, out)


def map_with_state(df: DataFrame, key: str | Sequence[str],
                   func: Callable[[pd.DataFrame, BatchContext], Any],
                   schema: T.StructType | str, states: Sequence[StateDescriptor],
                   checkpoint: str, batch_id: int, num_partitions: int | None = None,
                   max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                   operator_id: str = "default", min_versions_to_retain: int = 10,
                   local_dir: str | None = None,
                   memory_budget_mb: int | None = None,
                   bottommost_bloom_filters: bool = False,
                   allow_pickle: bool = False,
                   batch_timestamp_ms: int | None = None) -> DataFrame:
    """Runs ``func(rows, ctx)`` once per partition with all its rows (pandas) and state
    handles whose batch operations (``get_many``, ``put_many``, ``add_many``) take key arrays.
    Versions, routing, rescaling, ``allow_pickle`` and ``batch_timestamp_ms`` (the TTL clock)
    behave as in ``apply_with_state``."""
    out = _schema(df, schema)
    clock = ttl_clock(states, batch_timestamp_ms)
    cfg = _config(df, key, states, checkpoint, batch_id, num_partitions, max_parallelism,
                  operator_id, out, min_versions_to_retain=min_versions_to_retain,
                  local_dir=local_dir, memory_budget_mb=memory_budget_mb,
                  bottommost_bloom_filters=bottommost_bloom_filters, allow_pickle=allow_pickle,
                  ttl_time_ms=clock)
    routed = route(df, cfg.key_cols, cfg.num_partitions, max_parallelism)

    def body(task: TaskState, batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        parts = [p for p in (_data_rows(b, task.partition_id) for b in batches) if len(p)]
        sink = _Output(cfg.output_cols)
        if parts:
            rows = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
            check_no_null_keys(rows, cfg.key_cols)
            yield from sink.add(func(rows.reset_index(drop=True), BatchContext(task)))
        yield from sink.flush()

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield from guarded(cfg, lambda task: body(task, batches))

    return routed.mapInPandas(run, out)
