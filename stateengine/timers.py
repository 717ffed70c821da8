"""Event-time and processing-time timers, as in Flink's InternalTimerService.

A timer belongs to the current key and a namespace, fires once when the watermark (or the
processing time) reaches its timestamp, and is stored in its own column family with keys
``[key group][timestamp][key][namespace]`` so that due timers are found by a short scan per
key group. Timers are part of every snapshot and move with their key group when rescaling.
Registering the same (timestamp, key, namespace) twice keeps one timer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from . import _native

if TYPE_CHECKING:
    from .backend import KeyedStateBackend

EVENT_TIME_CF = "__timers_event__"
PROCESSING_TIME_CF = "__timers_processing__"
TIMER_META = {"kind": "timers", "value_codec": 0, "namespace_codec": 1, "user_key_codec": 0,
              "merge": 0, "native_op": 0}
_BATCH = 10_000
_MIN_TS = -(1 << 63)


@dataclass(frozen=True)
class Timer:
    timestamp: int
    key: Any
    namespace: Any


class TimerService:
    """Timers of one backend. Obtain it as ``backend.timer_service``."""

    def __init__(self, backend: "KeyedStateBackend") -> None:
        self._backend = backend
        self._watermark = _MIN_TS
        self._processing_time = _MIN_TS

    def _cf(self, name: str) -> int:
        return self._backend._internal_cf(name, TIMER_META)

    @property
    def current_watermark(self) -> int:
        return self._watermark

    @property
    def current_processing_time(self) -> int:
        return self._processing_time

    def register_event_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        """Fires when the watermark reaches timestamp, for the current key."""
        _native.timer_put(self._backend, self._cf(EVENT_TIME_CF), _ts(timestamp), namespace, False)

    def delete_event_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        _native.timer_put(self._backend, self._cf(EVENT_TIME_CF), _ts(timestamp), namespace, True)

    def register_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        _native.timer_put(self._backend, self._cf(PROCESSING_TIME_CF), _ts(timestamp), namespace,
                          False)

    def delete_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        _native.timer_put(self._backend, self._cf(PROCESSING_TIME_CF), _ts(timestamp), namespace,
                          True)

    def advance_watermark(self, watermark: int) -> Iterator[Timer]:
        """Fires every event-time timer with timestamp <= watermark, in time order.

        Each timer is removed, then the backend's current key is set to the timer's key and the
        timer is yielded; timers registered while iterating fire too if they are due.
        """
        self._watermark = max(self._watermark, _ts(watermark))
        return self._fire(EVENT_TIME_CF, watermark)

    def advance_processing_time(self, time: int) -> Iterator[Timer]:
        """Fires every processing-time timer with timestamp <= time, in time order."""
        self._processing_time = max(self._processing_time, _ts(time))
        return self._fire(PROCESSING_TIME_CF, time)

    def _fire(self, name: str, up_to: int) -> Iterator[Timer]:
        cf = self._cf(name)
        while True:
            due = _native.timer_pop_due(self._backend, cf, _ts(up_to), _BATCH)
            if not due:
                return
            for ts, key, ns in due:
                self._backend.set_current_key(key)
                yield Timer(ts, key, ns)

    def next_event_time(self) -> int | None:
        """Timestamp of the earliest event-time timer, or None."""
        return _native.timer_next_timestamp(self._backend, self._cf(EVENT_TIME_CF))

    def next_processing_time(self) -> int | None:
        return _native.timer_next_timestamp(self._backend, self._cf(PROCESSING_TIME_CF))

    def num_event_time_timers(self) -> int:
        return self._backend._native_count(self._cf(EVENT_TIME_CF))

    def num_processing_time_timers(self) -> int:
        return self._backend._native_count(self._cf(PROCESSING_TIME_CF))


def _ts(timestamp: Any) -> int:
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        try:
            import numpy as np

            if isinstance(timestamp, np.integer):
                return int(timestamp)
        except ImportError:  # pragma: no cover
            pass
        raise TypeError(f"timer timestamps are int milliseconds, got {type(timestamp).__name__}")
    return timestamp
