"""Spark's ``StatefulProcessor`` (transformWithState), unchanged, on stateengine state.

``transform_with_state_in_pandas(df, processor, grouping, output_schema, checkpoint, ...)``
runs a processor written for Spark's ``transformWithStateInPandas`` (``handleInputRows(key,
rows: Iterator[pandas.DataFrame], timerValues)``), ``transform_with_state`` one written for
``transformWithState`` (iterators of ``Row``). Each returns a lazy DataFrame, like
``apply_with_state``: one Spark task per state partition loads version ``batch_id``, runs the
processor over its keys and commits version ``batch_id + 1``. On a streaming DataFrame the
result is a streaming DataFrame whose tasks take their batch from Spark (see ``batch.py``).

What a task does, in the order Spark's own operator does it
(docs/coming-from-transformwithstate/index.md, "How Spark runs a processor"):

1. ``init(handle)`` on a fresh copy of the processor (each task deserializes its own);
2. in the operator's first batch only, ``handleInitialState`` for every key of the initial
   state, before any input;
3. ``handleInputRows`` once per key with input, after dropping late rows in time mode
   EventTime (event time at or before the previous batch's watermark);
4. ``handleExpiredTimer`` for every timer that is due when the input is done (processing
   time: the batch timestamp; event time: the batch watermark), in time order; each is
   deleted after its handler, and timers registered meanwhile fire in a later batch;
5. ``close()``.

An exception raised in any of these methods reaches the driver as ``UserFunctionError``
naming the method, the operator, the key, the batch and the partition (``user_errors.py``);
output that does not fit ``output_schema`` as ``OutputSchemaError``.

On the driver, ``init`` runs once on a copy of the processor with a handle that records the
states it declares (as Spark's driver does), so DDL schemas are parsed by the session and
mistakes (TTL outside ProcessingTime, timers in init) are reported before any task runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import GeneratorType
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.versions import INITIAL_STATE_DIR, VersionCatalog
from ..errors import KeyTypeError, OutputSchemaError, ProcessorUsageError, StateEngineError
from ..keygroups import DEFAULT_MAX_PARALLELISM
from .apply import _batch_facts, _iter_groups, _schema, _sorted_by_key, config_from_facts
from .frames import FrameRun, RowSlices, without_columns
from .metrics import internal_schema, metrics_batch, metrics_frame, observe_state, tagged, \
    tagged_arrow
from .no_data_batches import attach, auto_for_processor, watermark_columns
from .output_schema import FrameCheck, check_rows, rows_error
from .routing import INTERNAL_COLS, KG_COL, MARKER_COL, PID_COL, key_codecs_for, key_columns, \
    quote, route
from .runtime import TaskState, guarded
from .user_errors import NO_KEY, CallSite

OUTPUT_MODES = ("append", "update", "complete")  # Spark's operator takes all three
# Spark hands a key's rows to handleInputRows in frames of at most this many rows (its Arrow
# batch size; 0 or less: no limit), read on the driver.
MAX_RECORDS_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
DEFAULT_MAX_RECORDS = 10_000
EVENT_COL = "__se_event_us"  # the event time in microseconds, for dropping late rows
WATERMARK_STATE = "tws-watermark"  # operator state: the watermark of the last batch
_FLUSH_ROWS = 16_384
_DDL_SCHEMAS: dict[str, T.StructType] = {}  # DDL text -> schema, parsed once per driver


# ---- driver: what init() declares -----------------------------------------------------------

@dataclass
class _Plan:
    """The processor's states as its init() declares them, with parsed DDL schemas."""

    time_mode: str
    decls: dict[str, Any] = field(default_factory=dict)  # name -> StateDecl
    schemas: dict[str, T.StructType] = field(default_factory=dict)  # DDL -> schema

    @property
    def has_ttl(self) -> bool:
        return any(d.ttl_ms is not None for d in self.decls.values())

    def descriptors(self) -> list[Any]:
        from .processor_handle import timer_index_descriptor

        out = [d.descriptor() for d in self.decls.values()]
        if self.time_mode != "None":
            out.append(timer_index_descriptor())
        return out


def _plan(processor: Any, spark: Any, time_mode: str, operator_id: str | None = None) -> _Plan:
    """Runs init() and close() on a copy of the processor with a recording handle. DDL schemas
    are parsed by the session ``spark``, or without one (stateengine.testing) by
    ``sparktypes.spark_struct``."""
    from pyspark import cloudpickle
    from pyspark.sql.streaming import stateful_processor as sp

    from ..sparktypes import spark_struct
    from .processor_handle import CREATED, TIMER_PROCESSED, StateDecl, check_declaring, \
        check_name, check_timer_call, check_ttl, evolution_items, no_key_error

    plan = _Plan(time_mode)

    def parse(state: str, schema: Any) -> T.StructType:
        if isinstance(schema, T.StructType):
            return schema
        if isinstance(schema, T.DataType):
            return T.StructType([T.StructField("value", schema)])
        if not isinstance(schema, str):
            raise ProcessorUsageError(f"state '{state}': a schema is a StructType or a DDL "
                                      f"string, got {schema!r:.80}")
        if schema not in plan.schemas:
            parsed = _DDL_SCHEMAS.get(schema)
            if parsed is None:  # the session parses it (one round trip, then remembered)
                parsed = _DDL_SCHEMAS[schema] = (spark_struct(schema) if spark is None else
                                                 spark.createDataFrame([], schema).schema)
            plan.schemas[schema] = parsed
        return plan.schemas[schema]

    def timer_call(operation: str) -> Callable[..., Any]:
        def refuse(self: Any, *_: Any, **__: Any) -> Any:
            check_timer_call(operation, time_mode, self.phase)
        return refuse

    class _Unbound:
        def __init__(self, name: str) -> None:
            self._name = name

        def __getattr__(self, attr: str) -> Any:
            def refuse(*_: Any, **__: Any) -> Any:
                raise no_key_error(f"state '{self._name}'.{attr}()")
            return refuse

    class _RecordingHandle(sp.StatefulProcessorHandle):
        def __init__(self) -> None:
            self.phase = CREATED  # TIMER_PROCESSED while close() runs

        def _record(self, name: Any, kind: str, schema: Any, key_schema: Any,
                    ttl: Any, renamed_from: Any = None, field_defaults: Any = None) -> Any:
            check_declaring(f"get_{kind}_state", self.phase)
            name = check_name(name)
            decl = StateDecl(name, kind, parse(name, schema),
                             None if key_schema is None else parse(name, key_schema),
                             check_ttl(name, ttl, time_mode),
                             *evolution_items(renamed_from, field_defaults))
            decl.descriptor()  # a renamed_from / field_defaults that does not fit fails here
            old = plan.decls.get(name)
            if old is not None and old != decl:
                raise ProcessorUsageError(f"init() declares state '{name}' twice, as {old} "
                                          f"and as {decl}")
            plan.decls[name] = decl
            return _Unbound(name)

        def getValueState(self, stateName: str, schema: Any, ttlDurationMs: Any = None,
                          **evolve: Any) -> Any:
            return self._record(stateName, "value", schema, None, ttlDurationMs, **evolve)

        def getListState(self, stateName: str, schema: Any, ttlDurationMs: Any = None,
                         **evolve: Any) -> Any:
            return self._record(stateName, "list", schema, None, ttlDurationMs, **evolve)

        def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any,
                        ttlDurationMs: Any = None, **evolve: Any) -> Any:
            return self._record(stateName, "map", valueSchema, userKeySchema, ttlDurationMs,
                                **evolve)

        registerTimer = timer_call("register_timer")
        deleteTimer = timer_call("delete_timer")
        listTimers = timer_call("list_timers")

        def deleteIfExists(self, stateName: str) -> None:
            check_declaring("delete_if_exists", self.phase)
            check_name(stateName)

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    site = CallSite(operator_id, None, None)
    handle = _RecordingHandle()
    for method, args in (("init", (handle,)), ("close", ())):
        if method == "close":
            handle.phase = TIMER_PROCESSED
        fn = getattr(copy, method)
        try:
            fn(*args)
        except StateEngineError:  # the recording handle's own refusals say enough
            raise
        except Exception as e:
            raise site.error(fn, e) from e
    return plan


def state_descriptors(processor: Any, spark: Any, time_mode: str = "None") -> dict[str, Any]:
    """The stateengine descriptors of the states the processor's ``init()`` declares, as
    ``transform_with_state`` registers them: for ``read_state`` (the schema's fields as
    columns) and ``bootstrap_state`` (moving a Spark query's state over)."""
    _check_processor(processor)  # first: before pyspark 4.0 the handle cannot be imported
    from .processor_handle import time_mode_name

    plan = _plan(processor, spark, time_mode_name(time_mode))
    return {name: decl.descriptor() for name, decl in plan.decls.items()}


def _check_processor(processor: Any) -> None:
    try:
        from pyspark.sql.streaming import StatefulProcessor
    except ImportError:  # pyspark 3.5: no transformWithState
        raise ProcessorUsageError("StatefulProcessor needs pyspark >= 4.0, which defines "
                                  "pyspark.sql.streaming.StatefulProcessor") from None
    if not isinstance(processor, StatefulProcessor):
        raise TypeError(f"processor must be an instance of pyspark.sql.streaming."
                        f"StatefulProcessor, got {type(processor).__name__}")


def _event_time_column(df: DataFrame, given: str | None) -> str | None:
    """The column whose event time decides late rows: the one given, else the column that
    withWatermark marked (its metadata carries the delay)."""
    if given is not None:
        if given not in df.columns:
            raise ValueError(f"event_time_column '{given}' is not a column of the DataFrame "
                             f"(columns: {', '.join(df.columns)})")
        return given
    marked = watermark_columns(df)
    return marked[0] if len(marked) == 1 else None


def _with_event_time(df: DataFrame, col: str) -> DataFrame:
    dtype = df.schema[col].dataType
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        expr = f"unix_micros(CAST({quote(col)} AS TIMESTAMP))"
    elif isinstance(dtype, (T.LongType, T.IntegerType)):
        expr = f"CAST({quote(col)} AS BIGINT) * 1000"  # int event times are milliseconds
    else:
        raise ValueError(f"event_time_column '{col}' has type {dtype.simpleString()}; event "
                         f"times are timestamps (or bigint milliseconds)")
    return df.selectExpr("*", f"{expr} AS {EVENT_COL}")


# ---- driver: the entry points -----------------------------------------------------------------

def transform_with_state_in_pandas(
        df: DataFrame, processor: Any, grouping: str | Sequence[str],
        output_schema: T.StructType | str, checkpoint: str, *, time_mode: str = "None",
        output_mode: str = "Update", batch_id: int | None = None, watermark: Any = None,
        processing_time: Any = None, query_checkpoint: str | None = None,
        initial_state: DataFrame | None = None,
        initial_state_grouping: str | Sequence[str] | None = None,
        event_time_column: str | None = None, num_partitions: int | None = None,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM, operator_id: str = "default",
        min_versions_to_retain: int = 10, local_dir: str | None = None,
        memory_budget_mb: int | None = None, no_data_batches: str = "auto") -> DataFrame:
    """Runs a ``StatefulProcessor`` written for Spark's ``transformWithStateInPandas`` on
    stateengine state; returns its output rows (``output_schema``).

    ``grouping`` names the grouping columns (Spark's ``groupBy``); ``time_mode`` is None,
    ProcessingTime or EventTime and ``output_mode`` Append or Update, as in Spark. In
    ``foreachBatch`` pass ``batch_id``; ``processing_time`` (int ms or a datetime; default: the
    driver's clock now) is the batch timestamp of time mode ProcessingTime, ``watermark`` the
    batch's watermark in EventTime (required there). On a streaming DataFrame leave them out and
    pass ``query_checkpoint`` (the query's checkpointLocation): each batch then takes Spark's
    own batch id, watermark and timestamp. ``initial_state`` is a DataFrame whose rows go to
    ``handleInitialState`` in the operator's first batch, grouped by ``initial_state_grouping``
    (default: the same column names). ``event_time_column`` (default: the column
    ``withWatermark`` marked) drops late rows in EventTime, as Spark does. State lives in
    ``checkpoint`` under ``operator_id``; the remaining arguments are ``apply_with_state``'s.
    ``no_data_batches`` (streaming only) decides which micro-batches without data Spark runs
    for the step: ``"auto"`` those it runs for its own operator in ``time_mode`` (every trigger
    in ProcessingTime, after the watermark moved in EventTime, none in None), or
    ``"processing_time"``, ``"event_time"``, ``"none"`` (see ``with_no_data_batches``).
    """
    out = _transform(df, processor, grouping, output_schema, checkpoint, "pandas", time_mode,
                     output_mode, batch_id, watermark, processing_time, query_checkpoint,
                     initial_state, initial_state_grouping, event_time_column, num_partitions,
                     max_parallelism, operator_id, min_versions_to_retain, local_dir,
                     memory_budget_mb)
    return attach(out, df, no_data_batches, auto_for_processor(time_mode))


def transform_with_state(
        df: DataFrame, processor: Any, grouping: str | Sequence[str],
        output_schema: T.StructType | str, checkpoint: str, *, time_mode: str = "None",
        output_mode: str = "Update", batch_id: int | None = None, watermark: Any = None,
        processing_time: Any = None, query_checkpoint: str | None = None,
        initial_state: DataFrame | None = None,
        initial_state_grouping: str | Sequence[str] | None = None,
        event_time_column: str | None = None, num_partitions: int | None = None,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM, operator_id: str = "default",
        min_versions_to_retain: int = 10, local_dir: str | None = None,
        memory_budget_mb: int | None = None, no_data_batches: str = "auto") -> DataFrame:
    """Runs a ``StatefulProcessor`` written for Spark's ``transformWithState`` (Row flavour:
    ``handleInputRows(key, rows: Iterator[Row], timerValues)`` yielding ``Row``s) on
    stateengine state. Arguments as in ``transform_with_state_in_pandas``."""
    out = _transform(df, processor, grouping, output_schema, checkpoint, "row", time_mode,
                     output_mode, batch_id, watermark, processing_time, query_checkpoint,
                     initial_state, initial_state_grouping, event_time_column, num_partitions,
                     max_parallelism, operator_id, min_versions_to_retain, local_dir,
                     memory_budget_mb)
    return attach(out, df, no_data_batches, auto_for_processor(time_mode))


def _transform(df: DataFrame, processor: Any, grouping: Any, output_schema: Any,
               checkpoint: str, flavour: str, time_mode: Any, output_mode: Any, batch_id: Any,
               watermark: Any, processing_time: Any, query_checkpoint: Any,
               initial_state: DataFrame | None, initial_state_grouping: Any,
               event_time_column: str | None, num_partitions: int | None,
               max_parallelism: int, operator_id: str, min_versions_to_retain: int,
               local_dir: str | None, memory_budget_mb: int | None) -> DataFrame:
    _check_processor(processor)  # first: before pyspark 4.0 the handle cannot be imported
    from .processor_handle import time_mode_name

    mode = time_mode_name(time_mode)
    if not isinstance(output_mode, str) or output_mode.lower() not in OUTPUT_MODES:
        raise ValueError(f"output_mode must be Append, Update or Complete (as in Spark's "
                         f"transformWithState), got {output_mode!r}")
    cols = key_columns(grouping)
    out = _schema(df, output_schema)
    plan = _plan(processor, df.sparkSession, mode, operator_id)
    facts = _batch_facts(df, batch_id, watermark, processing_time, query_checkpoint,
                         needs_times=mode != "None")
    if facts["batch_id"] is not None:  # foreachBatch or a batch job: times given or defaulted
        if mode == "EventTime" and facts["watermark"] is None:
            raise ValueError("time mode EventTime needs the batch's watermark: pass watermark= "
                             "(int ms or a datetime; 0 before the query has one)")
        if mode == "ProcessingTime" and facts["processing_time"] is None:
            facts["processing_time"] = int(time.time() * 1000)
    facts["ttl_time_ms"] = None  # Spark's TTL runs on each batch's processing time
    if facts["processing_time"] is not None:  # refused on the driver, before any task runs
        from ..ttl import check_ttl_time

        check_ttl_time(facts["processing_time"],
                       {n: d.ttl_ms for n, d in plan.decls.items() if d.ttl_ms is not None},
                       "processing_time (the batch's TTL time)")
    cfg = config_from_facts(df, cols, plan.descriptors(), checkpoint, out, facts,
                            num_partitions=num_partitions, max_parallelism=max_parallelism,
                            operator_id=operator_id, min_versions_to_retain=min_versions_to_retain,
                            local_dir=local_dir, memory_budget_mb=memory_budget_mb)
    event_col = _event_time_column(df, event_time_column) if mode == "EventTime" else None
    source = _with_event_time(df, event_col) if event_col else df
    staged = None
    if initial_state is not None:
        staged = _stage_initial_state(initial_state, initial_state_grouping or cols, cfg,
                                      facts["batch_id"])
    routed = route(source, cols, cfg.num_partitions, max_parallelism, every_partition=True)
    spark_sorts = not df.isStreaming
    if spark_sorts:
        routed = routed.sortWithinPartitions(KG_COL, *cols)
    job = _Job(processor, plan, flavour, cols, out, bool(event_col), staged, spark_sorts,
               max_records(df.sparkSession.conf.get(MAX_RECORDS_CONF, None)))

    if flavour == "pandas" and df.isStreaming:  # metrics observed as in apply.run_stateful
        def run_observed(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            yield from guarded(cfg, lambda task: tagged(job.run_pandas(task, batches)),
                               lambda task: [metrics_frame(out.names, task)])
        return observe_state(routed.mapInPandas(run_observed, internal_schema(out)),
                             operator_id)

    if flavour == "pandas":
        def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            yield from guarded(cfg, lambda task: job.run_pandas(task, batches))
        return routed.mapInPandas(run, out)

    if df.isStreaming:
        inner = internal_schema(out)
        arrow = _arrow_schema(inner)  # the same zone as _RowSink's batches, which it wraps

        def run_arrow_observed(batches: Iterator[Any]) -> Iterator[Any]:
            yield from guarded(cfg, lambda task: tagged_arrow(job.run_rows(task, batches), arrow),
                               lambda task: [metrics_batch(arrow, task)])
        return observe_state(routed.mapInArrow(run_arrow_observed, inner), operator_id)

    def run_arrow(batches: Iterator[Any]) -> Iterator[Any]:
        yield from guarded(cfg, lambda task: job.run_rows(task, batches))
    return routed.mapInArrow(run_arrow, out)


def max_records(conf: Any) -> int:
    """The rows per frame that handleInputRows gets, from Spark's conf (text, None: unset)."""
    try:
        return DEFAULT_MAX_RECORDS if conf is None else int(conf)
    except (TypeError, ValueError):
        raise ValueError(f"{MAX_RECORDS_CONF} is {conf!r}, not a number of rows") from None


# ---- initial state ---------------------------------------------------------------------------

def _stage_initial_state(initial: DataFrame, grouping: Any, cfg: Any,
                         batch_id: int | None) -> str | None:
    """Writes the initial state, routed like the input, as one Arrow file per partition under
    the operator's checkpoint directory, when the operator has no state yet; the tasks of its
    first batch read their partition's file. Returns the directory (None: not the first batch,
    so Spark would not call handleInitialState either)."""
    import pyarrow as pa

    storage = CheckpointStorage(cfg.checkpoint)
    first = VersionCatalog(storage, cfg.operator_id).first_version()
    if first is not None and (batch_id is None or first != batch_id):
        return None
    init_cols = key_columns(grouping)
    if len(init_cols) != len(cfg.key_cols):
        raise ValueError(f"initial_state_grouping names {len(init_cols)} columns, the input is "
                         f"grouped by {len(cfg.key_cols)} ({', '.join(cfg.key_cols)})")
    if key_codecs_for(initial, init_cols) != tuple(cfg.key_codecs):
        have = [initial.schema[c].dataType.simpleString() for c in init_cols]
        raise KeyTypeError(f"initial state grouping columns {init_cols} have types {have}, "
                           f"which hash differently from the input's grouping columns "
                           f"{cfg.key_cols}; cast them to the input's types")
    rel = initial_state_dir(cfg.operator_id, cfg.num_partitions)
    storage.delete_dir(rel)
    routed = route(initial, init_cols, cfg.num_partitions, cfg.max_parallelism)
    routed = routed.sortWithinPartitions(KG_COL, *init_cols)
    uri = storage.uri

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        pid = TaskContext.get().partitionId()
        parts = [b for b in batches if b.num_rows]
        rows = 0
        if parts:
            rows = write_initial_partition(uri, rel, pid, pa.Table.from_batches(parts))
        yield pa.RecordBatch.from_pydict({"partition": [pid], "rows": [rows]},
                                         schema=pa.schema([("partition", pa.int32()),
                                                           ("rows", pa.int64())]))

    routed.mapInArrow(write, "partition int, rows long").collect()
    return rel


def initial_state_dir(operator_id: str, num_partitions: int) -> str:
    """Where an operator's initial state is staged (relative to its checkpoint)."""
    return f"{operator_id}/{INITIAL_STATE_DIR}/n{num_partitions}"


def write_initial_partition(uri: str, rel: str, partition_id: int, table: Any) -> int:
    """Stages one partition's initial state rows (routed, sorted by key group and key) as the
    Arrow file its first task reads; returns the row count."""
    import pyarrow as pa

    if (np.asarray(table.column(PID_COL)) != partition_id).any():
        raise RuntimeError("initial state rows reached the wrong partition")
    table = table.select([n for n in table.column_names if n not in INTERNAL_COLS])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    CheckpointStorage(uri).write_atomic(f"{rel}/p{partition_id:05d}.arrow",
                                        sink.getvalue().to_pybytes())
    return table.num_rows


def _read_initial_state(uri: str, rel: str, partition_id: int) -> Any:
    """This partition's staged initial state as an Arrow table (None if it has no rows)."""
    import pyarrow as pa

    storage = CheckpointStorage(uri)
    name = f"{rel}/p{partition_id:05d}.arrow"
    if not storage.exists(name):
        return None
    return pa.ipc.open_file(pa.BufferReader(storage.read_bytes(name))).read_all()


# ---- tasks -----------------------------------------------------------------------------------

class _Job:
    """Everything a task needs besides its rows; pickled with the Spark closure, so each task
    works on its own copy of the processor (Spark, too, runs init() in every task)."""

    def __init__(self, processor: Any, plan: _Plan, flavour: str, cols: list[str],
                 out: T.StructType, late_rows: bool, staged: str | None,
                 spark_sorts: bool, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        self.processor = processor
        self.plan = plan
        self.flavour = flavour
        self.cols = cols
        self.out = out
        self.late_rows = late_rows
        self.staged = staged
        self.spark_sorts = spark_sorts
        # rows per frame of handleInputRows (pandas), as Spark cuts a key's rows
        self.chunk = max_records if max_records > 0 else 1 << 62

    # -- the phases of one task, in Spark's order --

    def _start(self, task: TaskState) -> "_TaskRun":
        return _TaskRun(self, task)

    def run_pandas(self, task: TaskState, batches: Iterator[pd.DataFrame]
                   ) -> Iterator[pd.DataFrame]:
        run = self._start(task)
        sink = _FrameSink(self.out)
        initial = run.initial_state()
        if initial is not None:
            for key, rows in _table_groups(initial, self.cols):
                run.initial_pandas(key, rows)
        if not self.spark_sorts:
            batches = _sorted_by_key(batches, self.cols, task.partition_id)
        data = (run.without_late_rows(b) for b in batches)
        key: Any = NO_KEY
        try:  # around the loop, not per key: naming the key costs nothing until it fails
            for key, frames in _iter_groups(data, self.cols, task.partition_id, self.chunk):
                if sink.add(run.input_rows(key, frames)):
                    yield from sink.flush()
        except OutputSchemaError as e:
            raise run.output_error("handleInputRows", e, key) from None
        yield from run.emit_expired_timers(sink)
        run.finish()
        try:
            yield from sink.flush()
        except OutputSchemaError as e:
            raise run.output_error("handleInputRows", e) from None

    def run_rows(self, task: TaskState, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        run = self._start(task)
        sink = _RowSink(self.out)
        initial = run.initial_state()
        if initial is not None:
            for key, rows in _row_groups(initial, self.cols):
                for row in rows:
                    run.initial_row(key, row)
        parts = []
        for b in batches:
            b = _arrow_partition_rows(b, task.partition_id)
            if b.num_rows:
                parts.append(b)
        if parts:
            table = pa.Table.from_batches(parts)
            if not self.spark_sorts:
                table = table.sort_by([(KG_COL, "ascending")] +
                                      [(c, "ascending") for c in self.cols])
            table = run.without_late_arrow(table)
            table = table.select([n for n in table.column_names if n not in _ALL_INTERNAL])
            key: Any = NO_KEY
            try:
                for key, rows in _row_groups(table, self.cols):
                    if sink.add(run.input_rows(key, iter(rows))):
                        yield from sink.flush()
            except OutputSchemaError as e:
                raise run.output_error("handleInputRows", e, key) from None
        yield from run.emit_expired_timers(sink)
        run.finish()
        try:
            yield from sink.flush()
        except OutputSchemaError as e:
            raise run.output_error("handleInputRows", e) from None


_ALL_INTERNAL = (*INTERNAL_COLS, MARKER_COL, EVENT_COL)


class _TaskRun:
    """One task's processor: init, keys, timers, close."""

    def __init__(self, job: _Job, task: TaskState) -> None:
        from pyspark.sql import Row
        from pyspark.sql.streaming.stateful_processor import TimerValues

        from .processor_handle import INITIALIZED, ProcessorHandle, ProcessorRuntime

        self.job = job
        self.task = task
        mode = job.plan.time_mode
        batch = task.batch
        self.rt = ProcessorRuntime(task.backend, mode, job.plan.schemas, job.cols,
                                   task.cfg.time_zone)
        self.processor = job.processor
        self.site = task.site
        self.single = len(job.cols) == 1
        self.key_row = Row(*job.cols)
        if mode == "None":
            self.timer_values = TimerValues(-1, -1)
            self.timer_time = None
        else:
            wm = batch.watermark if batch.watermark is not None else 0
            pt = batch.processing_time if batch.processing_time is not None else -1
            self.timer_values = TimerValues(pt, wm)
            self.timer_time = pt if mode == "ProcessingTime" else wm
        # In EventTime Spark drops input rows at or before the previous batch's watermark;
        # each partition keeps its batch's watermark in operator state (union: after a
        # rescale every partition sees them all) for the next batch.
        self.watermark_state = None
        self.late_before_us = None
        if mode == "EventTime":
            self.watermark_state = task.backend.operator_state.get_list_state(WATERMARK_STATE,
                                                                              "union")
            previous = [w for w in self.watermark_state.get() if w is not None]
            if previous and job.late_rows:
                self.late_before_us = max(previous) * 1000
        self._call("init", NO_KEY, False, ProcessorHandle(self.rt))
        self.rt.phase = INITIALIZED
        self.handle_input_rows = self.processor.handleInputRows  # once per task, after init

    def _call(self, method: str, key: Any, results: bool, /, *args: Any,
              **kwargs: Any) -> Any:
        """processor.method(*args, **kwargs), its exception a UserFunctionError (per call,
        user_errors.py); with ``results`` what it yields is taken now, inside the same guard
        (init, close and handleInitialState return nothing Spark reads)."""
        fn = getattr(self.processor, method)
        try:
            out = fn(*args, **kwargs)
            return _consume(out) if results else None
        except Exception as e:
            raise self.site.error(fn, e, key) from e

    def output_error(self, method: str, exc: OutputSchemaError, key: Any = NO_KEY) -> Exception:
        return self.site.output_error(getattr(self.processor, method), exc, key)

    def _key_tuple(self, key: Any) -> tuple:
        return (key,) if self.single else key

    def initial_state(self) -> Any:
        """This partition's initial state, only in the operator's first batch."""
        job, task = self.job, self.task
        if job.staged is None or task.provider.first_version != task.batch.batch_id or \
                task.provider.last_load.get("reused"):
            return None
        return _read_initial_state(task.cfg.checkpoint, job.staged, task.partition_id)

    def initial_pandas(self, key: Any, rows: pd.DataFrame) -> None:
        self.rt.set_key(key)
        self._call("handleInitialState", key, False, self._key_tuple(key), rows, self.timer_values)

    def initial_row(self, key: Any, row: Any) -> None:
        self.rt.set_key(key)
        self._call("handleInitialState", key, False, self._key_tuple(key), row, self.timer_values)

    def without_late_rows(self, pdf: pd.DataFrame) -> pd.DataFrame:
        if EVENT_COL not in pdf.columns:
            return pdf
        if self.late_before_us is not None and len(pdf):
            pdf = pdf[pdf[EVENT_COL].to_numpy() > self.late_before_us]
        return without_columns(pdf, (EVENT_COL,))

    def without_late_arrow(self, table: Any) -> Any:
        import pyarrow.compute as pc

        if EVENT_COL in table.column_names and self.late_before_us is not None:
            table = table.filter(pc.greater(table.column(EVENT_COL), self.late_before_us))
        return table

    def input_rows(self, key: Any, rows: Iterable[Any]) -> list:
        """handleInputRows(key, rows, timerValues)'s results (``_call`` inlined: once per key)."""
        self.rt.set_key(key)
        fn = self.handle_input_rows
        try:
            return _consume(fn((key,) if self.single else key, iter(rows), self.timer_values))
        except Exception as e:
            raise self.site.error(fn, e, key) from e

    def expired_timers(self) -> Iterator[Any]:
        """(key, results of handleExpiredTimer) for every timer due now (keyword arguments,
        as Spark passes them)."""
        from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo

        from .processor_handle import DATA_PROCESSED

        rt = self.rt
        rt.phase = DATA_PROCESSED
        if self.timer_time is None:
            return
        for key, ts in rt.due_timers(self.timer_time):
            rt.set_key(key)
            key_row = self.key_row(*self._key_tuple(key))
            yield key, self._call("handleExpiredTimer", key, True, key=key_row,
                                  timerValues=self.timer_values,
                                  expiredTimerInfo=ExpiredTimerInfo(ts))
            rt.timer_fired(ts)

    def emit_expired_timers(self, sink: Any) -> Iterator[Any]:
        """The sink's output for the results of every due timer."""
        key: Any = NO_KEY
        try:
            for key, result in self.expired_timers():
                if sink.add(result):
                    yield from sink.flush()
        except OutputSchemaError as e:
            raise self.output_error("handleExpiredTimer", e, key) from None

    def finish(self) -> None:
        from .processor_handle import TIMER_PROCESSED

        self.rt.keyed = False
        self.rt.phase = TIMER_PROCESSED
        self._call("close", NO_KEY, False)
        if self.watermark_state is not None:
            self.watermark_state.update([self.timer_time])


def _consume(result: Any) -> list:
    """A handler's results, taken now, while its key is current (handlers are often
    generators, which run only when iterated)."""
    if type(result) is GeneratorType:  # the common case first
        return list(result)
    if result is None:
        return []
    if isinstance(result, list):
        return result
    if isinstance(result, pd.DataFrame):
        return [result]
    return list(result)


# ---- grouping --------------------------------------------------------------------------------

def _arrow_partition_rows(batch: Any, partition_id: int) -> Any:
    """A routed Arrow batch's data rows: checked to be this partition's, markers dropped."""
    import pyarrow.compute as pc

    if not batch.num_rows:
        return batch
    if (np.asarray(batch.column(PID_COL)) != partition_id).any():
        raise RuntimeError(f"rows routed to partition {partition_id} carry other partition "
                           f"ids; the DataFrame was repartitioned after stateengine routed it")
    names = batch.schema.names
    if MARKER_COL in names:
        batch = batch.filter(pc.is_null(batch.column(MARKER_COL)))
    return batch


def _key_bounds(table: Any, cols: list[str]) -> tuple[list[Any], list[int]]:
    """Keys (scalars, or tuples for several columns) and start offsets of the runs of equal
    keys in a table sorted by key."""
    values = [table.column(c).to_pylist() for c in cols]
    if any(v is None for col in values for v in col):
        raise KeyTypeError(f"grouping column(s) {', '.join(cols)} hold nulls; keyed state needs "
                           f"a key per row: filter the nulls out or fill them")
    keys = values[0] if len(cols) == 1 else list(zip(*values))
    starts = [0] + [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]]
    return keys, starts


def _row_groups(table: Any, cols: list[str]) -> Iterator[tuple[Any, list[Any]]]:
    """(key, [Row, ...]) per key of an Arrow table sorted by key, Rows with every column."""
    from pyspark.sql import Row

    if not table.num_rows:
        return
    keys, starts = _key_bounds(table, cols)
    factory = Row(*table.column_names)
    rows = [factory(*r) for r in zip(*(c.to_pylist() for c in table.columns))]
    bounds = starts + [len(rows)]
    for s, e in zip(bounds[:-1], bounds[1:]):
        yield keys[s], rows[s:e]


def _table_groups(table: Any, cols: list[str]) -> Iterator[tuple[Any, pd.DataFrame]]:
    """(key, pandas rows) per key of an Arrow table sorted by key."""
    if not table.num_rows:
        return
    keys, starts = _key_bounds(table, cols)
    pdf = table.to_pandas()
    rows = RowSlices(pdf)
    bounds = starts + [len(pdf)]
    for s, e in zip(bounds[:-1], bounds[1:]):
        yield keys[s], rows(s, e)


# ---- output ----------------------------------------------------------------------------------

class _FrameSink:
    """Collects the DataFrames handlers yield and hands them to Spark in large frames.

    Handlers typically yield one small frame per key. ``pd.concat`` over thousands of them
    costs more than the handlers themselves, so a run of frames of one layout is kept as their
    blocks' arrays and joined block by block with numpy (``FrameRun``); frames of another
    shape or with pandas extension arrays (nullable ints, Arrow strings) go through
    ``pd.concat``. A frame is checked against the schema when it starts a run (the run's
    other frames have its labels and dtypes). Rows keep the order the handlers yielded them
    in."""

    def __init__(self, schema: T.StructType) -> None:
        self.schema = schema
        self.names = list(schema.names)
        self.check_frame = FrameCheck(schema)
        self.parts: list[pd.DataFrame] = []
        self.run: FrameRun | None = None  # the frames joined since the last part
        self.count = 0  # rows in parts and run

    def add(self, result: list) -> bool:
        """Takes a handler's results (``_consume``d); True when a flush is due."""
        run = self.run
        for frame in result:
            if run is not None and type(frame) is pd.DataFrame:
                n = run.take(frame)
                if n >= 0:
                    self.count += n
                    continue
            if frame is not None:
                run = self._new_layout(frame)
        return self.count >= _FLUSH_ROWS

    def _new_layout(self, frame: Any) -> FrameRun | None:
        """Checks a frame the current run did not take; starts a run with it or keeps it as a
        part of its own. The run after it."""
        if not isinstance(frame, pd.DataFrame):
            raise OutputSchemaError(
                f"handlers of transform_with_state_in_pandas yield pandas DataFrames (as "
                f"Spark's transformWithStateInPandas) of {self.schema.simpleString()}, "
                f"got {type(frame).__name__}")
        run = FrameRun.start(frame)
        self.check_frame(frame, None, tuple(run.labels) if run else tuple(frame.columns))
        n = len(frame)
        if not n:  # nothing to join: the current run goes on
            return self.run
        self._close_run()
        self.count += n
        if run is not None and run.take(frame) >= 0:
            self.run = run
        else:
            self.parts.append(frame)
        return self.run

    def _close_run(self) -> None:
        if self.run is not None and self.run.rows:
            self.parts.append(self.run.frame())
        self.run = None

    def flush(self) -> Iterator[pd.DataFrame]:
        self._close_run()
        parts, self.parts, self.count = self.parts, [], 0
        if not parts:
            return
        for i, f in enumerate(parts):  # columns not named by strings match by position
            if not all(isinstance(c, str) for c in f.columns):
                parts[i] = f.set_axis(self.names[:len(f.columns)], axis=1)
        yield parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _arrow_schema(schema: T.StructType) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    try:  # pyspark >= 4 requires a zone for TimestampType (Arrow timestamps are UTC)
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # older signature, without the zone
        return to_arrow_schema(schema)


class _RowSink:
    """Collects the Rows handlers yield and hands them to Spark as Arrow batches. The first
    row of each handler's results is checked against the schema (output_schema.py)."""

    def __init__(self, schema: T.StructType) -> None:
        self.schema = schema
        self.names = schema.names
        self.arrow_schema = _arrow_schema(schema)
        self.rows: list[dict] = []

    def add(self, results: list) -> bool:
        """Takes a handler's results (``_consume``d); True when a flush is due."""
        names = self.names
        if results:
            check_rows(results, self.schema)
        for row in results:
            if hasattr(row, "__fields__"):
                self.rows.append(row.asDict(True))
            elif isinstance(row, dict):
                self.rows.append(row)
            elif isinstance(row, (tuple, list)):
                self.rows.append(dict(zip(names, row)))
            else:
                raise OutputSchemaError(
                    f"handlers of transform_with_state yield Rows (as Spark's "
                    f"transformWithState) of {self.schema.simpleString()}, got "
                    f"{type(row).__name__}")
        return len(self.rows) >= _FLUSH_ROWS

    def flush(self) -> Iterator[Any]:
        import pyarrow as pa

        rows, self.rows = self.rows, []
        if rows:
            try:
                batch = pa.RecordBatch.from_pylist(rows, schema=self.arrow_schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
                raise rows_error(e, self.schema) from None
            yield batch
