"""What user functions receive next to their data: state handles, timers, batch facts."""

from __future__ import annotations

from typing import Any

from ..timers import TimerService
from .runtime import TaskState


class _BaseContext:
    def __init__(self, task: TaskState) -> None:
        self._task = task
        batch = task.batch
        self.batch_id: int = batch.batch_id
        self.partition_id: int = task.partition_id
        self.num_partitions: int = task.cfg.num_partitions
        # ms since the epoch; in a streaming query Spark's batchWatermarkMs and
        # batchTimestampMs of this batch (None: not known)
        self.watermark: int | None = batch.watermark
        self.processing_time: int | None = batch.processing_time
        # The TTL clock of this batch (batch_timestamp_ms, else processing_time), or None.
        self.batch_timestamp_ms: int | None = task.ttl_time
        # Whether this task continued the backend its worker kept open (no restore needed).
        self.reused_backend: bool = bool(task.provider.last_load.get("reused", False))

    def state(self, name: str) -> Any:
        """The handle of the state registered under name (see the ``states`` argument)."""
        try:
            return self._task.handles[name]
        except KeyError:
            known = ", ".join(sorted(self._task.handles)) or "none"
            from ..errors import UnknownStateError

            raise UnknownStateError(f"no state named '{name}' was declared for this job "
                                    f"(declared: {known}); add its descriptor to states=[...]") from None

    __getitem__ = state

    @property
    def operator_state(self) -> Any:
        """Operator (per-partition, non-keyed) list states; see stateengine.operator_state."""
        return self._task.backend.operator_state

    @property
    def backend(self) -> Any:
        """The partition's KeyedStateBackend (what the handles read and write)."""
        return self._task.backend


class GroupContext(_BaseContext):
    """Context of ``apply_with_state`` functions: the handles are bound to ``key``."""

    key: Any = None

    @property
    def timers(self) -> TimerService:
        """Timers of the current key: register_event_time_timer(ts, namespace=None), ..."""
        return self._task.backend.timer_service


class BatchContext(_BaseContext):
    """Context of ``map_with_state`` functions: use the handles' batch operations
    (get_many, put_many, add_many), which take key arrays and need no current key."""
