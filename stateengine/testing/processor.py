"""``ProcessorHarness``: a Spark ``StatefulProcessor`` run batch by batch without Spark.

The processor runs exactly as ``transform_with_state_in_pandas`` (``flavour="pandas"``) and
``transform_with_state`` (``flavour="row"``) run it inside Spark's tasks: the same
``_Job.run_pandas`` / ``_Job.run_rows`` task code, on the same state handles and engine state,
after the same driver-side ``init()`` that learns the states. Each task unpickles its own copy
of the processor (as each Spark task does), so ``init`` and ``close`` run once per partition
and batch; timers fire after the input in the batch whose time reaches them; in EventTime
rows at or before the previous batch's watermark are dropped; TTL expires against the batch
timestamp; the initial state goes to ``handleInitialState`` in the first batch; a changed
``num_partitions`` restores state by key group as a rescaled query does; a key's rows come in
frames of at most ``max_records_per_batch`` rows (Spark's
``spark.sql.execution.arrow.maxRecordsPerBatch``).
"""

from __future__ import annotations

from typing import Any, Iterable

from ..checkpoint.storage import CheckpointStorage
from ..checkpoint.versions import VersionCatalog
from ..errors import KeyTypeError
from ..keygroups import DEFAULT_MAX_PARALLELISM
from ..spark.processor import (DEFAULT_MAX_RECORDS, EVENT_COL, _check_processor, _Job, _plan,
                               initial_state_dir, write_initial_partition)
from ..spark.routing import key_codecs_for, key_columns
from ..spark.runtime import TaskState
from ..times import to_millis
from . import convert, routing
from .harness import BatchOutput, Harness


class ProcessorHarness(Harness):
    """Runs ``processor`` (a ``pyspark.sql.streaming.StatefulProcessor``) batch by batch in
    this process: no SparkSession, no JVM, and the task code of ``stateengine.spark``.

    ``grouping``, ``output_schema`` (DDL or StructType), ``time_mode`` (None, ProcessingTime,
    EventTime), ``initial_state`` (a pandas DataFrame, Arrow table or list of Rows, grouped by
    ``initial_state_grouping``, default the same names) and ``event_time_column`` are the
    arguments of ``transform_with_state_in_pandas``; ``flavour`` picks the pandas
    (``transformWithStateInPandas``) or ``"row"`` (``transformWithState``) calling convention.
    ``input_schema`` fixes the input's Spark types (default: inferred from the first batch, as
    ``createDataFrame`` infers them); key types decide key groups, so give the types the real
    query has. ``watermark_delay_ms`` makes the harness move the watermark as Spark's
    ``withWatermark(col, delay)`` does (the largest event time of the batches before, minus the
    delay) when ``run_batch`` is not given one. Times are int ms (or datetimes; naive ones in
    ``time_zone``, Spark's session time zone). State lives in ``directory`` (default: a
    temporary one, removed on close); ``fsync`` says whether commits there fsync their files
    as the Spark path's do (default: not in the harness's own temporary directory, whose
    state no crash of the machine needs to survive; yes in a given ``directory``).
    """

    def __init__(self, processor: Any, grouping: str | list[str], output_schema: Any, *,
                 flavour: str = "pandas", time_mode: str = "None", input_schema: Any = None,
                 initial_state: Any = None, initial_state_grouping: Any = None,
                 initial_state_schema: Any = None, event_time_column: str | None = None,
                 watermark_delay_ms: int | None = None, num_partitions: int = 2,
                 max_parallelism: int = DEFAULT_MAX_PARALLELISM, operator_id: str = "default",
                 time_zone: str = "UTC", max_records_per_batch: int = DEFAULT_MAX_RECORDS,
                 directory: str | None = None, fsync: bool | None = None) -> None:
        _check_processor(processor)
        from ..spark.processor_handle import time_mode_name

        if flavour not in ("pandas", "row"):
            raise ValueError(f"flavour must be 'pandas' (transformWithStateInPandas) or 'row' "
                             f"(transformWithState), got {flavour!r}")
        mode = time_mode_name(time_mode)
        if (event_time_column is not None or watermark_delay_ms is not None) and \
                mode != "EventTime":
            raise ValueError("event_time_column and watermark_delay_ms belong to time mode "
                             "EventTime")
        super().__init__(grouping, output_schema, input_schema=input_schema,
                         num_partitions=num_partitions, max_parallelism=max_parallelism,
                         operator_id=operator_id, time_zone=time_zone,
                         max_records_per_batch=max_records_per_batch, directory=directory,
                         fsync=fsync)
        self.processor = processor
        self.flavour = flavour
        self.time_mode = mode
        self.event_time_column = event_time_column
        self.watermark_delay_ms = watermark_delay_ms
        # init() on a copy with a recording handle, as the driver runs it (DDL parsed here)
        self.plan = _plan(processor, None, mode, operator_id)
        from pyspark import cloudpickle

        self._pickled = cloudpickle.dumps(processor)  # as a query pickles it when it starts
        self._initial = None
        if initial_state is not None:
            self._initial = (initial_state, key_columns(initial_state_grouping or grouping),
                             initial_state_schema)
        self.watermark: int | None = 0 if mode == "EventTime" else None
        self.processing_time: int | None = None if mode == "None" else 0
        self._max_event_ms: int | None = None

    # ---- batches -----------------------------------------------------------------------

    def run_batch(self, rows: Any = None, *, processing_time: Any = None, watermark: Any = None,
                  num_partitions: int | None = None) -> BatchOutput:
        """Runs the next micro-batch over ``rows`` (none: a batch without data, which fires
        due timers as Spark's no-data batches do) and returns its output.

        ``processing_time`` is the batch timestamp (default: the previous batch's, 0 at
        first) and ``watermark`` the batch's watermark in EventTime (default: the previous
        one, or with ``watermark_delay_ms`` Spark's rule); ``num_partitions`` changes the
        partition count from this batch on."""
        n = self.num_partitions if num_partitions is None else self._partitions(num_partitions)
        wm, pt = self._times(watermark, processing_time)
        table = self._input(rows)
        late_rows = self.event_time_column is not None
        if late_rows:
            table = self._with_event_time(table)
        staged = self._stage_initial_state(n)
        cfg = self._config(self.batch_id, n, self.plan.descriptors(), wm, pt)
        from pyspark import cloudpickle

        schema, zone, size = self.input_schema, self.time_zone, self.max_records_per_batch

        def body(task: TaskState, part: Any) -> Iterable[Any]:
            # each task unpickles its own processor, as Spark's tasks do (rows come sorted)
            job = _Job(cloudpickle.loads(self._pickled), self.plan, self.flavour,
                       self.key_cols, self.output_schema, late_rows, staged, True, size)
            if self.flavour == "pandas":
                return job.run_pandas(task, convert.pandas_batches(part, schema, zone, size))
            return job.run_rows(task, convert.arrow_batches(part, schema, zone, size))

        out = self._run(table, cfg, body, self._output_table)
        self.watermark, self.processing_time = wm, pt
        return out

    def _output_table(self, outputs: list[Any]) -> Any:
        import pyarrow as pa

        if self.flavour == "pandas":
            return convert.frames_to_table(outputs, self.output_schema, self.time_zone)
        target = convert.arrow_schema(self.output_schema)
        return pa.Table.from_batches([b.cast(target) for b in outputs], schema=target)

    def _times(self, watermark: Any, processing_time: Any) -> tuple[int | None, int | None]:
        zone = self.time_zone
        pt = self.processing_time if processing_time is None else \
            to_millis(processing_time, "processing_time", zone)
        if self.time_mode != "EventTime":
            if watermark is not None:
                raise ValueError(f"a watermark belongs to time mode EventTime; this processor "
                                 f"runs in {self.time_mode}")
            return None, pt
        if watermark is None:
            wm = self.watermark
            if self.watermark_delay_ms is not None and self._max_event_ms is not None:
                wm = max(wm, self._max_event_ms - self.watermark_delay_ms)
        else:
            wm = to_millis(watermark, "watermark", zone)
            if wm < self.watermark:
                raise ValueError(f"watermark {wm} is before the previous batch's "
                                 f"{self.watermark}: Spark's watermark never moves back")
        return wm, pt

    def _with_event_time(self, table: Any) -> Any:
        """The event time column in microseconds (``EVENT_COL``), as the Spark path adds it;
        remembers the largest event time for ``watermark_delay_ms``."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql import types as T

        col = self.event_time_column
        if col not in self.input_schema.names:
            raise ValueError(f"event_time_column '{col}' is not an input column "
                             f"({', '.join(self.input_schema.names)})")
        dtype = self.input_schema[col].dataType
        values = table.column(col)
        if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
            micros = pc.cast(pc.cast(values, pa.timestamp("us", tz="UTC")
                                     if isinstance(dtype, T.TimestampType)
                                     else pa.timestamp("us")), pa.int64())
        elif isinstance(dtype, (T.LongType, T.IntegerType)):
            micros = pc.multiply(pc.cast(values, pa.int64()), 1000)
        else:
            raise ValueError(f"event_time_column '{col}' has type {dtype.simpleString()}; event "
                             f"times are timestamps (or bigint milliseconds)")
        top = pc.max(micros).as_py()
        if top is not None:
            top //= 1000
            self._max_event_ms = top if self._max_event_ms is None else \
                max(self._max_event_ms, top)
        return table.append_column(EVENT_COL, micros)

    def _stage_initial_state(self, num_partitions: int) -> str | None:
        """The initial state staged per partition as the Spark path stages it, while the
        operator has no committed state (None afterwards: Spark calls handleInitialState
        only in the first batch)."""
        if self._initial is None:
            return None
        storage = CheckpointStorage(self.checkpoint)
        first = VersionCatalog(storage, self.operator_id).first_version()
        if first is not None and first != self.batch_id:
            return None
        rows, cols, given = self._initial
        schema = convert.struct_of(given) if given is not None else convert.infer_schema(rows)
        if len(cols) != len(self.key_cols):
            raise ValueError(f"initial_state_grouping names {len(cols)} columns, the input is "
                             f"grouped by {len(self.key_cols)} ({', '.join(self.key_cols)})")
        codecs = key_codecs_for(schema, cols)
        if codecs != self.key_codecs:
            raise KeyTypeError(f"initial state grouping columns {cols} hash differently from "
                               f"the input's grouping columns {self.key_cols}; give them the "
                               f"input's types")
        rel = initial_state_dir(self.operator_id, num_partitions)
        storage.delete_dir(rel)
        table = convert.to_table(rows, schema, self.time_zone)
        parts = routing.route(table, cols, codecs, num_partitions, self.max_parallelism)
        for pid, part in enumerate(parts):
            if part.num_rows:
                write_initial_partition(self.checkpoint, rel, pid, part)
        return rel

    # ---- state between batches ----------------------------------------------------------

    def _handle(self, task: TaskState, key: Any) -> tuple[Any, Any]:
        """A handle on the task's state with ``key`` current, as handlers get it."""
        from ..spark.processor_handle import INITIALIZED, ProcessorHandle, ProcessorRuntime

        rt = ProcessorRuntime(task.backend, self.time_mode, self.plan.schemas, self.key_cols,
                              self.time_zone)
        handle = ProcessorHandle(rt)
        states = {}
        for name, d in self.plan.decls.items():
            if d.kind == "value":
                states[name] = handle.getValueState(name, d.schema, d.ttl_ms)
            elif d.kind == "list":
                states[name] = handle.getListState(name, d.schema, d.ttl_ms)
            else:
                states[name] = handle.getMapState(name, d.user_key_schema, d.schema, d.ttl_ms)
        rt.phase = INITIALIZED
        rt.set_key(key)
        return handle, states

    def _state(self, states: dict, name: str) -> Any:
        if name not in states:
            raise KeyError(f"the processor's init() declares no state '{name}' (it declares: "
                           f"{', '.join(sorted(states)) or 'none'})")
        return states[name]

    def _read(self, key: Any, read: Any) -> Any:
        cfg = self._config(self.batch_id, self.num_partitions, self.plan.descriptors(),
                           self.watermark, self.processing_time)
        return self._peek(key, cfg, lambda task, k: read(*self._handle(task, k)))

    def peek_value_state(self, name: str, key: Any) -> tuple | None:
        """The value of ValueState ``name`` for ``key`` as ``get()`` returns it (None: none)."""
        return self._read(key, lambda h, s: self._state(s, name).get())

    def peek_list_state(self, name: str, key: Any) -> list[tuple]:
        """The elements of ListState ``name`` for ``key``."""
        return self._read(key, lambda h, s: list(self._state(s, name).get()))

    def peek_map_state(self, name: str, key: Any) -> dict:
        """MapState ``name`` for ``key`` as a dict of user key tuples to value tuples."""
        return self._read(key, lambda h, s: dict(self._state(s, name).iterator()))

    def peek_timers(self, key: Any) -> list[int]:
        """The times of ``key``'s registered timers, as ``listTimers()`` lists them."""
        return self._read(key, lambda h, s: list(h.listTimers()))

    def _change(self, key: Any, change: Any) -> None:
        self._later(key, lambda task, k: change(*self._handle(task, k)))

    def update_value_state(self, name: str, key: Any, value: Any) -> None:
        """Sets ValueState ``name`` of ``key`` (None clears it) before the next batch."""
        self._change(key, lambda h, s: self._state(s, name).clear() if value is None
                     else self._state(s, name).update(value))

    def update_list_state(self, name: str, key: Any, values: list[Any]) -> None:
        """Sets ListState ``name`` of ``key`` (an empty list clears it) before the next
        batch."""
        values = list(values)
        self._change(key, lambda h, s: self._state(s, name).put(values) if values
                     else self._state(s, name).clear())

    def update_map_state(self, name: str, key: Any, mapping: dict) -> None:
        """Sets MapState ``name`` of ``key`` to exactly ``mapping`` before the next batch."""
        items = list(dict(mapping).items())

        def change(h: Any, s: dict) -> None:
            state = self._state(s, name)
            state.clear()
            for k, v in items:
                state.updateValue(k, v)
        self._change(key, change)

    def register_timer(self, key: Any, expiry_ms: Any) -> None:
        """Registers a timer of ``key`` before the next batch (which fires it if due)."""
        self._change(key, lambda h, s: h.registerTimer(expiry_ms))

    def delete_timer(self, key: Any, expiry_ms: Any) -> None:
        """Deletes a timer of ``key`` before the next batch."""
        self._change(key, lambda h, s: h.deleteTimer(expiry_ms))
