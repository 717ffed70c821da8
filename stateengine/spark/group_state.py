"""Spark's ``applyInPandasWithState``, unchanged, on stateengine state.

``apply_in_pandas_with_state(df, func, grouping, output_schema, state_schema, output_mode,
timeout_conf, checkpoint, ...)`` calls a function written for Spark's
``groupBy(...).applyInPandasWithState`` as Spark does: ``func(key, pdfs, state)`` with the key
as a tuple, an iterator of the key's rows as pandas DataFrames and a pyspark ``GroupState``
(``exists``, ``get``, ``getOption``, ``update``, ``remove``, ``hasTimedOut``,
``setTimeoutDuration``, ``setTimeoutTimestamp``, ``getCurrentWatermarkMs``,
``getCurrentProcessingTimeMs``), yielding pandas DataFrames.

What Spark does, and so this operator (FlatMapGroupsWithState's rules, which
``applyInPandasWithState`` shares):

* each key with rows in the batch gets one call with ``hasTimedOut`` false; its timeout starts
  unset in every call (a function that wants one sets it again each time); with
  ``EventTimeTimeout`` rows at or before the previous batch's watermark are dropped first;
* after the keys with rows, every key whose timeout lies before the batch timestamp
  (``ProcessingTimeTimeout``) or the watermark (``EventTimeTimeout``) gets one call with
  ``hasTimedOut`` true and one empty DataFrame of the input's columns;
* after a call the state is written when it was updated or removed or its timeout changed;
  a removed state without a timeout is deleted.

State layout: one typed value state ``groupState`` of ``struct<groupState: <state schema>,
timeoutTimestamp: bigint>`` per key, which is the row Spark's own state store keeps (so
``migrate_spark_state`` copies Spark's state as it is), with ``timeoutTimestamp`` -1 for none;
and a timer at ``timeoutTimestamp + 1`` in the timeout's time domain, because a stateengine
timer fires at a time at or after its own while Spark times out strictly after the timeout.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Sequence

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..descriptors import ValueStateDescriptor
from ..errors import OutputSchemaError
from ..keygroups import DEFAULT_MAX_PARALLELISM
from .apply import _Output, _schema, run_stateful, task_config
from .processor import EVENT_COL, WATERMARK_STATE, _event_time_column, _with_event_time
from .no_data_batches import attach, auto_for_group_state, check_kind
from .processor_values import RowCodec
from .routing import key_columns
from .runtime import TaskState

GROUP_STATE = "groupState"  # the state's name, as the column Spark's state data source shows
NO_TIMESTAMP = -1
TIMEOUTS = ("NoTimeout", "ProcessingTimeTimeout", "EventTimeTimeout")
OUTPUT_MODES = ("append", "update")


def timeout_name(timeout_conf: Any) -> str:
    """Spark's spelling of a GroupStateTimeout (any case)."""
    for name in TIMEOUTS:
        if isinstance(timeout_conf, str) and timeout_conf.lower() == name.lower():
            return name
    raise ValueError(f"timeout_conf must be one of {', '.join(TIMEOUTS)} (pyspark's "
                     f"GroupStateTimeout), got {timeout_conf!r}")


def _nullable(t: T.DataType) -> T.DataType:
    """t with every field, element and map value nullable: the stored schema does not depend
    on how a StructType declared nullability (Spark and a DDL string may differ)."""
    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType), True) for f in t.fields])
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_nullable(t.elementType), True)
    if isinstance(t, T.MapType):
        return T.MapType(t.keyType, _nullable(t.valueType), True)
    return t


def group_state_descriptor(state_schema: T.StructType) -> ValueStateDescriptor:
    """The value state a GroupState of ``state_schema`` lives in (see the module docstring)."""
    if not isinstance(state_schema, T.StructType):
        raise ValueError(f"a GroupState's schema is a StructType, got {state_schema!r:.80}")
    row = T.StructType([T.StructField("groupState", state_schema, True),
                        T.StructField("timeoutTimestamp", T.LongType(), True)])
    return ValueStateDescriptor(GROUP_STATE, value_type=_nullable(row))


def apply_in_pandas_with_state(
        df: DataFrame, func: Callable[..., Any], grouping: str | Sequence[str],
        output_schema: T.StructType | str, state_schema: T.StructType | str,
        output_mode: str, timeout_conf: str, checkpoint: str, *,
        batch_id: int | None = None, watermark: Any = None, processing_time: Any = None,
        query_checkpoint: str | None = None, event_time_column: str | None = None,
        num_partitions: int | None = None,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM, operator_id: str = "default",
        min_versions_to_retain: int = 10, local_dir: str | None = None,
        memory_budget_mb: int | None = None, no_data_batches: str = "auto") -> DataFrame:
    """Runs ``func`` written for Spark's ``applyInPandasWithState`` (same arguments: the
    grouping columns, output and state schemas, ``output_mode`` Append or Update,
    ``timeout_conf`` NoTimeout, ProcessingTimeTimeout or EventTimeTimeout) on stateengine
    state in ``checkpoint``; returns its output rows.

    On a streaming DataFrame pass ``query_checkpoint`` (the query's checkpointLocation): each
    batch takes Spark's batch id, watermark and timestamp. In ``foreachBatch`` pass
    ``batch_id``, ``processing_time`` (default: the driver's clock now) and, with
    ``EventTimeTimeout``, ``watermark``. ``event_time_column`` (default: the column
    ``withWatermark`` marked) is what late rows are told by under ``EventTimeTimeout``. The
    other arguments are ``apply_with_state``'s.

    ``no_data_batches`` (streaming only): ``"auto"`` makes Spark run the micro-batches without
    data its own operator gets, so timeouts fire while the input is quiet (every trigger with
    ProcessingTimeTimeout, after the watermark moved with EventTimeTimeout); or
    ``"processing_time"``, ``"event_time"``, ``"none"`` (see ``with_no_data_batches``)."""
    timeout = timeout_name(timeout_conf)
    check_kind(no_data_batches)
    if not isinstance(output_mode, str) or output_mode.lower() not in OUTPUT_MODES:
        raise ValueError(f"output_mode must be Append or Update (as applyInPandasWithState), "
                         f"got {output_mode!r}")
    if not callable(func):
        raise TypeError(f"func must be a function, got {type(func).__name__}")
    out = _schema(df, output_schema)
    state_type = _schema(df, state_schema)
    cols = key_columns(grouping)
    event_col = _event_time_column(df, event_time_column)
    watermarked = event_col is not None
    if batch_id is not None and timeout != "NoTimeout" and processing_time is None and \
            query_checkpoint is None:
        processing_time = int(time.time() * 1000)
    if batch_id is not None and timeout == "EventTimeTimeout" and watermark is None:
        raise ValueError("EventTimeTimeout needs the batch's watermark: pass watermark= "
                         "(int ms or a datetime)")
    cfg = task_config(df, cols, [group_state_descriptor(state_type)], checkpoint, out,
                      batch_id=batch_id, num_partitions=num_partitions,
                      max_parallelism=max_parallelism, operator_id=operator_id,
                      query_checkpoint=query_checkpoint, watermark=watermark,
                      processing_time=processing_time,
                      needs_times=timeout != "NoTimeout" or watermarked,
                      min_versions_to_retain=min_versions_to_retain, local_dir=local_dir,
                      memory_budget_mb=memory_budget_mb)
    late_rows = timeout == "EventTimeTimeout" and watermarked  # Spark drops them only then
    source = _with_event_time(df, event_col) if late_rows else df
    columns = list(df.columns)

    def body(task: TaskState, groups: Iterator[Any]) -> Iterator[pd.DataFrame]:
        run = _GroupStateRun(task, func, state_type, timeout, watermarked, late_rows, columns)
        sink = _Output(out)
        key: Any = None
        try:
            for key, rows in groups:
                rows = run.without_late_rows(rows)
                if len(rows):
                    yield from sink.add(iter(run.call(key, rows, timed_out=False)))
            for key in run.timed_out_keys():
                yield from sink.add(iter(run.call(key, run.empty, timed_out=True)))
            run.finish()
            yield from sink.flush()
        except OutputSchemaError as e:
            raise task.site.output_error(func, e, key) from None

    return attach(run_stateful(source, cfg, out, body, grouped=True), df, no_data_batches,
                  auto_for_group_state(timeout, watermarked))


class _GroupStateRun:
    """One task's keys: GroupStates built from the stored rows, written back after each call
    (Spark's rules, module docstring), and timers kept at each timeout + 1."""

    def __init__(self, task: TaskState, func: Callable[..., Any], state_type: T.StructType,
                 timeout: str, watermarked: bool, late_rows: bool, columns: list[str]) -> None:
        self.task = task
        self.func = func
        self.timeout = timeout
        self.watermarked = watermarked
        self.backend = task.backend
        self.state = task.handles[GROUP_STATE]
        self.codec = RowCodec(state_type, GROUP_STATE)
        self.state_type = state_type
        self.empty = pd.DataFrame({c: pd.Series([], dtype=object) for c in columns})
        batch = task.batch
        self.processing_time = batch.processing_time if batch.processing_time is not None \
            else NO_TIMESTAMP
        self.watermark = batch.watermark if batch.watermark is not None else 0
        self.timers = self.backend.timer_service
        self.late_before_us = None
        self.watermarks = None
        if late_rows:  # as processor.py: each partition keeps its batch's watermark
            self.watermarks = self.backend.operator_state.get_list_state(WATERMARK_STATE, "union")
            previous = [w for w in self.watermarks.get() if w is not None]
            if previous:
                self.late_before_us = max(previous) * 1000

    def without_late_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        if EVENT_COL not in rows.columns:
            return rows
        if self.late_before_us is not None:
            rows = rows[rows[EVENT_COL].to_numpy() > self.late_before_us]
        return rows.drop(columns=[EVENT_COL]).reset_index(drop=True)

    def _register(self, ts: int, delete: bool = False) -> None:
        at = ts + 1  # Spark times out strictly after the timeout, a timer fires at its time
        if self.timeout == "ProcessingTimeTimeout":
            (self.timers.delete_processing_time_timer if delete else
             self.timers.register_processing_time_timer)(at)
        else:
            (self.timers.delete_event_time_timer if delete else
             self.timers.register_event_time_timer)(at)

    def call(self, key: Any, rows: pd.DataFrame, timed_out: bool) -> list:
        """func's results for one key (its current key set here, or by the timer service),
        then the state written back as Spark writes it."""
        from pyspark.sql import Row
        from pyspark.sql.streaming.state import GroupState

        self.backend.set_current_key(key)
        stored = self.state.value()
        value, old_ts = (stored if stored is not None else (None, NO_TIMESTAMP))
        old_ts = NO_TIMESTAMP if old_ts is None else old_ts
        if old_ts != NO_TIMESTAMP and not timed_out:
            self._register(old_ts, delete=True)  # the call resets the timeout
        loaded = None if value is None else self.codec.load(value)
        state = GroupState(
            optionalValue=None if loaded is None else Row(*loaded),
            batchProcessingTimeMs=self.processing_time,
            eventTimeWatermarkMs=self.watermark if self.watermarked else NO_TIMESTAMP,
            timeoutConf=self.timeout, hasTimedOut=timed_out,
            watermarkPresent=self.watermarked, defined=loaded is not None, updated=False,
            removed=False, timeoutTimestamp=NO_TIMESTAMP, keyAsUnsafe=b"",
            valueSchema=self.state_type)
        key_tuple = key if isinstance(key, tuple) else (key,)
        site = self.task.site
        out = site.results(self.func, key_tuple, iter([rows]), state, key=key)
        if isinstance(out, pd.DataFrame):
            raise site.error(self.func, TypeError(
                "applyInPandasWithState functions return an iterator of pandas DataFrames "
                "(yield them), not a DataFrame"), key)
        results = [] if out is None else list(out)  # taken now: the call updates the state
        new_ts = int(state._timeout_timestamp)
        if state._removed and new_ts == NO_TIMESTAMP:
            self.state.clear()
        elif state._updated or state._removed or new_ts != old_ts:
            kept = self.codec.store(tuple(state._value)) if state.exists else None
            self.state.update((kept, new_ts))
        if new_ts != NO_TIMESTAMP:
            self._register(new_ts)
        return results

    def timed_out_keys(self) -> Iterator[Any]:
        """The key of every timeout due now, in time order (the timer service sets the key)."""
        if self.timeout == "ProcessingTimeTimeout":
            due = self.timers.advance_processing_time(self.processing_time)
        elif self.timeout == "EventTimeTimeout":
            due = self.timers.advance_watermark(self.watermark)
        else:
            return
        for timer in due:
            stored = self.state.value()
            if stored is not None and stored[1] is not None and stored[1] + 1 == timer.timestamp:
                yield timer.key

    def finish(self) -> None:
        if self.watermarks is not None:
            self.watermarks.update([self.watermark])
