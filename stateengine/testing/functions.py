"""``ApplyHarness`` and ``MapHarness``: ``apply_with_state`` / ``map_with_state`` functions
run batch by batch without Spark.

Each batch runs the task bodies of ``stateengine.spark.apply`` (``grouped_body`` /
``partition_body`` over ``task_data``) in one task per partition, on the same engine state,
with the same batch facts (watermark, processing time, the TTL clock) and the same output
checks as Spark's tasks.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from ..descriptors import StateDescriptor, check_no_pickle
from ..keygroups import DEFAULT_MAX_PARALLELISM
from ..spark.apply import grouped_body, partition_body, task_data
from ..spark.context import GroupContext
from ..spark.processor import DEFAULT_MAX_RECORDS
from ..spark.runtime import TaskState, ttl_clock
from ..times import to_millis
from . import convert
from .harness import BatchOutput, Harness


class _FunctionHarness(Harness):
    def __init__(self, func: Callable[..., Any], key: Any, schema: Any,
                 states: Sequence[StateDescriptor], grouped: bool,
                 on_timer: Callable[..., Any] | None, *, input_schema: Any,
                 num_partitions: int, max_parallelism: int, operator_id: str, time_zone: str,
                 allow_pickle: bool, max_records_per_batch: int,
                 directory: str | None, fsync: bool | None = None) -> None:
        super().__init__(key, schema, input_schema=input_schema,
                         num_partitions=num_partitions, max_parallelism=max_parallelism,
                         operator_id=operator_id, time_zone=time_zone,
                         max_records_per_batch=max_records_per_batch, directory=directory,
                         fsync=fsync)
        names = [d.name for d in states]
        if len(set(names)) != len(names):
            raise ValueError(f"state names must be unique, got {names}")
        if not allow_pickle:
            for d in states:
                check_no_pickle(d)
        self.states = list(states)
        self.allow_pickle = allow_pickle
        self.grouped = grouped
        from pyspark import cloudpickle

        body = grouped_body(func, on_timer, self.output_schema) if grouped else \
            partition_body(func, self.output_schema)
        self._pickled = cloudpickle.dumps(body)  # each task unpickles its own, as in Spark
        self._times: tuple[int | None, int | None, int | None] = (None, None, None)

    def run_batch(self, rows: Any = None, *, watermark: Any = None, processing_time: Any = None,
                  batch_timestamp_ms: Any = None,
                  num_partitions: int | None = None) -> BatchOutput:
        """Runs the next micro-batch over ``rows`` and returns its output. ``watermark`` and
        ``processing_time`` fire the timers they reach (None: none of that kind fire);
        ``batch_timestamp_ms`` is the TTL clock (default: ``processing_time``), as in
        ``apply_with_state``; ``num_partitions`` changes the partition count from this batch
        on."""
        n = self.num_partitions if num_partitions is None else self._partitions(num_partitions)
        zone = self.time_zone
        wm = None if watermark is None else to_millis(watermark, "watermark", zone)
        pt = None if processing_time is None else to_millis(processing_time, "processing_time",
                                                              zone)
        ttl = ttl_clock(self.states, batch_timestamp_ms, self.batch_id, pt, None, zone)
        table = self._input(rows)
        cfg = self._config(self.batch_id, n, self.states, wm, pt, ttl,
                           allow_pickle=self.allow_pickle)
        from pyspark import cloudpickle

        schema, size, grouped = self.input_schema, self.max_records_per_batch, self.grouped

        def body(task: TaskState, part: Any) -> Iterable[Any]:  # rows come sorted
            frames = convert.pandas_batches(part, schema, zone, size)
            return cloudpickle.loads(self._pickled)(task, task_data(task, frames, grouped, True))

        out = self._run(table, cfg, body,
                        lambda outs: convert.frames_to_table(outs, self.output_schema, zone))
        self._times = (wm, pt, ttl)
        return out

    def _probe_config(self) -> Any:
        wm, pt, ttl = self._times
        return self._config(self.batch_id, self.num_partitions, self.states, wm, pt, ttl,
                            allow_pickle=self.allow_pickle)

    def peek(self, name: str, key: Any) -> Any:
        """State ``name`` of ``key`` as the last batch left it: a value state's value, a list
        state's list, a map state's dict, a reducing or aggregating state's result."""
        def read(task: TaskState, k: Any) -> Any:
            handle = GroupContext(task).state(name)
            task.backend.set_current_key(k)
            if hasattr(handle, "value"):
                return handle.value()
            if hasattr(handle, "entries"):
                return dict(handle.entries())
            return handle.get()
        return self._peek(key, self._probe_config(), read)

    def timers(self) -> list[tuple[str, Any, int, Any]]:
        """Every registered timer as (``"event"`` or ``"processing"``, key, time,
        namespace), in time order per kind."""
        out: list[tuple[str, Any, int, Any]] = []
        cfg = self._probe_config()
        for pid in range(self.num_partitions):
            task = TaskState(cfg, (pid, 0))
            try:
                self._apply_pending(task)
                service = task.backend.timer_service
                for kind, fired in (("event", service.advance_watermark(1 << 62)),
                                    ("processing", service.advance_processing_time(1 << 62))):
                    out.extend((kind, t.key, t.timestamp, t.namespace) for t in fired)
            finally:
                task.abort()  # firing them here changed nothing that stays
        return out

    def seed(self, key: Any, change: Callable[[GroupContext], Any]) -> None:
        """``change(ctx)`` at the start of the next batch, with ``ctx`` the context a function
        gets for ``key`` (``ctx.state(name)``, ``ctx.timers``): seeds state or timers."""
        def apply(task: TaskState, k: Any) -> None:
            ctx = GroupContext(task)
            task.backend.set_current_key(k)
            ctx.key = k
            change(ctx)
        self._later(key, apply)


class ApplyHarness(_FunctionHarness):
    """Runs an ``apply_with_state`` function (``func(key, rows, ctx)`` per key, ``on_timer``
    for due timers) batch by batch in this process, with no SparkSession or JVM; arguments as
    in ``apply_with_state``, plus ``input_schema`` (default: inferred from the first batch),
    ``time_zone`` (Spark's session time zone), ``max_records_per_batch``, ``directory`` and
    ``fsync`` (see ``ProcessorHarness``)."""

    def __init__(self, func: Callable[..., Any], key: str | Sequence[str], schema: Any,
                 states: Sequence[StateDescriptor], *,
                 on_timer: Callable[..., Any] | None = None, input_schema: Any = None,
                 num_partitions: int = 2, max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                 operator_id: str = "default", time_zone: str = "UTC",
                 allow_pickle: bool = False,
                 max_records_per_batch: int = DEFAULT_MAX_RECORDS,
                 directory: str | None = None, fsync: bool | None = None) -> None:
        super().__init__(func, key, schema, states, True, on_timer, input_schema=input_schema,
                         num_partitions=num_partitions, max_parallelism=max_parallelism,
                         operator_id=operator_id, time_zone=time_zone,
                         allow_pickle=allow_pickle, max_records_per_batch=max_records_per_batch,
                         directory=directory, fsync=fsync)


class MapHarness(_FunctionHarness):
    """Runs a ``map_with_state`` function (``func(rows, ctx)`` once per partition with rows)
    batch by batch in this process; arguments as in ``map_with_state`` and ``ApplyHarness``."""

    def __init__(self, func: Callable[..., Any], key: str | Sequence[str], schema: Any,
                 states: Sequence[StateDescriptor], *, input_schema: Any = None,
                 num_partitions: int = 2, max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                 operator_id: str = "default", time_zone: str = "UTC",
                 allow_pickle: bool = False,
                 max_records_per_batch: int = DEFAULT_MAX_RECORDS,
                 directory: str | None = None, fsync: bool | None = None) -> None:
        super().__init__(func, key, schema, states, False, None, input_schema=input_schema,
                         num_partitions=num_partitions, max_parallelism=max_parallelism,
                         operator_id=operator_id, time_zone=time_zone,
                         allow_pickle=allow_pickle, max_records_per_batch=max_records_per_batch,
                         directory=directory, fsync=fsync)
