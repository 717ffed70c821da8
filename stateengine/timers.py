"""Event-time and processing-time timers, as in Flink's InternalTimerService.

A timer belongs to the current key and a namespace, fires once when the watermark (or the
processing time) reaches its timestamp, and is stored in its own column family with keys
``[key group][timestamp][key][namespace]`` so that due timers are found by a short scan per
key group. Timers are part of every snapshot and move with their key group when rescaling.
Registering the same (timestamp, key, namespace) twice keeps one timer.

Firing follows Flink's queue: each timer fires when it is the earliest one queued, so a due
timer registered (or deleted) while firing takes effect within the same advance if it lies
ahead of the timer firing, and timers not yet fired when the caller stops iterating stay
registered (also in a snapshot taken between two fired timers).

One difference from Flink keeps every advance finite: a timer registered while firing for a
time at or before that of the timer firing (the timer re-registering itself, or any timer in
the past) is kept and fires at the next advance. Flink adds it to its queue, where it is at
once the earliest again, so a callback that re-registers its own timer never lets
``advanceWatermark`` return. Timers registered for later due times still fire in the same
advance, in time order, as in Flink (a periodic timer catches up over a watermark jump); as
each of them is later than the timer that registered it, an advance always ends.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

from . import _native
from .errors import StateEngineError
from .times import to_millis


class TimerHost(Protocol):
    """What timers need from their backend (KeyedStateBackend implements it; this module does
    not import the backend): the current key, a column family per time domain, and the native
    calls on it. The underscore members are the package's binding layer, not user API."""

    def get_current_key(self) -> Any: ...

    def set_current_key(self, key: Any) -> None: ...

    def _internal_cf(self, name: str, meta: dict) -> int: ...

    def _native_count(self, cf: int) -> int: ...

EVENT_TIME_CF = "__timers_event__"
PROCESSING_TIME_CF = "__timers_processing__"
TIMER_META = {"kind": "timers", "value_codec": 0, "namespace_codec": 1, "user_key_codec": 0,
              "merge": 0, "native_op": 0}
_BATCH = 10_000
_MIN_TS = -(1 << 63)
_ANY = 1  # codec of timer namespaces


class _Firing:
    """Due timers already taken out of RocksDB but not yet fired, as a heap in time order.

    Timers registered or deleted while firing must take effect within the same advance, as
    in Flink, where each fired timer is the earliest one queued at that moment; those at or
    before the timer firing wait in ``deferred`` for the next advance."""

    def __init__(self, up_to: int) -> None:
        self.up_to = up_to
        self.heap: list[tuple[int, int, Any, Any, bytes]] = []
        self.idents: set[tuple[int, Any, bytes]] = set()
        self.seq = itertools.count()
        self.registered_min: int | None = None  # earliest due timer registered while firing
        self.firing_at: int | None = None  # timestamp of the timer fired last
        # (timestamp, key, namespace bytes) -> (timestamp, key, namespace): registered while
        # firing at or before firing_at; written back when the advance ends
        self.deferred: dict[tuple[int, Any, bytes], tuple[int, Any, Any]] = {}

    def push(self, ts: int, key: Any, ns: Any) -> None:
        ns_bytes = _native.encode_for_codec(_ANY, ns)
        ident = (ts, key, ns_bytes)
        if ident in self.idents or ident in self.deferred:
            return  # registered again while waiting (it fires once), or kept for the next advance
        self.idents.add(ident)
        heapq.heappush(self.heap, (ts, next(self.seq), key, ns, ns_bytes))

    def pop(self) -> tuple[int, Any, Any]:
        ts, _, key, ns, ns_bytes = heapq.heappop(self.heap)
        self.idents.discard((ts, key, ns_bytes))
        return ts, key, ns

    def needs_refill(self) -> bool:
        if not self.heap:
            return True
        return self.registered_min is not None and self.registered_min < self.heap[0][0]


@dataclass(frozen=True)
class Timer:
    """A fired timer, as ``advance_watermark`` / ``advance_processing_time`` yield it: its
    time in ms, its key (the backend's current key while it is handled) and namespace."""

    timestamp: int
    key: Any
    namespace: Any


class TimerService:
    """Timers of one backend. Obtain it as ``backend.timer_service``.

    Timestamps are int milliseconds; ``datetime``, ``pandas.Timestamp`` and ``numpy.datetime64``
    are converted (``stateengine.times.to_millis``). Values without a time zone are read in
    ``naive_time_zone`` (stateengine.spark sets Spark's session time zone), and refused while
    it is None."""

    def __init__(self, backend: TimerHost) -> None:
        self._backend = backend
        self.naive_time_zone: str | None = None
        self._watermark = _MIN_TS
        self._processing_time = _MIN_TS
        self._firing: dict[str, _Firing] = {}
        self.timers_fired = 0  # since the backend opened; the Spark layer reports per batch

    def _cf(self, name: str) -> int:
        return self._backend._internal_cf(name, TIMER_META)

    @property
    def current_watermark(self) -> int:
        """The highest watermark advanced to so far (ms; the minimum int64 before any)."""
        return self._watermark

    @property
    def current_processing_time(self) -> int:
        """The highest processing time advanced to so far (ms; as current_watermark)."""
        return self._processing_time

    def register_event_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        """Fires when the watermark reaches timestamp, for the current key."""
        self._put(EVENT_TIME_CF, _ts(timestamp, self.naive_time_zone), namespace, False)

    def delete_event_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        """Removes the current key's event-time timer at timestamp (if registered)."""
        self._put(EVENT_TIME_CF, _ts(timestamp, self.naive_time_zone), namespace, True)

    def register_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        """Fires when the processing time reaches timestamp, for the current key."""
        self._put(PROCESSING_TIME_CF, _ts(timestamp, self.naive_time_zone), namespace, False)

    def delete_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        """Removes the current key's processing-time timer at timestamp (if registered)."""
        self._put(PROCESSING_TIME_CF, _ts(timestamp, self.naive_time_zone), namespace, True)

    def _put(self, name: str, timestamp: int, namespace: Any, delete: bool) -> None:
        cf = self._cf(name)
        firing = self._firing.get(name)
        if firing is not None and timestamp <= firing.up_to:
            ident = (timestamp, self._backend.get_current_key(),
                     _native.encode_for_codec(_ANY, namespace))
            if delete:
                firing.deferred.pop(ident, None)
                if firing.heap:
                    # The timer may wait in the heap: put the heap back, so the delete applies
                    # to RocksDB alone, and refill from there.
                    self._put_back(cf, firing)
            elif ident in firing.idents:
                return  # it is queued to fire already; one timer, as in Flink
            elif firing.firing_at is not None and timestamp <= firing.firing_at:
                firing.deferred[ident] = (timestamp, ident[1], namespace)  # next advance
                return
            else:
                firing.registered_min = (timestamp if firing.registered_min is None
                                         else min(firing.registered_min, timestamp))
        _native.timer_put(self._backend, cf, timestamp, namespace, delete)

    def advance_watermark(self, watermark: int) -> Iterator[Timer]:
        """Fires every event-time timer with timestamp <= watermark, in time order.

        Each timer is removed, then the backend's current key is set to the timer's key and the
        timer is yielded; timers registered while iterating fire too if they are due and later
        than the timer being fired (those at or before it fire at the next advance, so every
        advance ends), deleted ones do not fire, and stopping early keeps the timers not yet
        fired.
        """
        watermark = _ts(watermark, self.naive_time_zone)
        self._watermark = max(self._watermark, watermark)
        return self._fire(EVENT_TIME_CF, watermark)

    def advance_processing_time(self, time: int) -> Iterator[Timer]:
        """Fires every processing-time timer with timestamp <= time, in time order."""
        time = _ts(time, self.naive_time_zone)
        self._processing_time = max(self._processing_time, time)
        return self._fire(PROCESSING_TIME_CF, time)

    def _fire(self, name: str, up_to: int) -> Iterator[Timer]:
        cf = self._cf(name)
        firing = _Firing(_ts(up_to))
        outer = self._firing.get(name)
        self._firing[name] = firing
        try:
            while True:
                if firing.needs_refill():
                    firing.registered_min = None
                    for ts, key, ns in _native.timer_pop_due(self._backend, cf, firing.up_to,
                                                             _BATCH):
                        firing.push(ts, key, ns)
                    if not firing.heap:
                        return
                ts, key, ns = firing.pop()
                firing.firing_at = ts
                self._backend.set_current_key(key)
                self.timers_fired += 1
                yield Timer(ts, key, ns)
        finally:
            if outer is None:
                self._firing.pop(name, None)
            else:
                self._firing[name] = outer
            if firing.heap or firing.deferred:  # unfired and deferred timers stay registered
                try:
                    self._put_back(cf, firing)
                except StateEngineError:
                    pass  # the backend was closed or sealed meanwhile

    def _return_in_flight(self) -> None:
        """Puts timers taken out for firing but not fired yet back into RocksDB, so that a
        snapshot's sync point sees them; a running advance refills from RocksDB (and leaves
        the deferred ones for the next advance)."""
        for name, firing in list(self._firing.items()):
            if firing.heap or firing.deferred:
                self._put_back(self._cf(name), firing)

    def _put_back(self, cf: int, firing: _Firing) -> None:
        """Writes the timers waiting in the heap back to RocksDB, and the deferred ones
        (which stay deferred), keeping the current key."""
        backend = self._backend
        current = backend.get_current_key()
        try:
            while firing.heap:
                ts, key, ns = firing.pop()
                backend.set_current_key(key)
                _native.timer_put(backend, cf, ts, ns, False)
            for ts, key, ns in list(firing.deferred.values()):
                backend.set_current_key(key)
                _native.timer_put(backend, cf, ts, ns, False)
        finally:
            if current is not None:
                backend.set_current_key(current)

    def next_event_time(self) -> int | None:
        """Timestamp of the earliest event-time timer, or None."""
        return _native.timer_next_timestamp(self._backend, self._cf(EVENT_TIME_CF))

    def next_processing_time(self) -> int | None:
        """Timestamp of the earliest processing-time timer, or None."""
        return _native.timer_next_timestamp(self._backend, self._cf(PROCESSING_TIME_CF))

    def num_event_time_timers(self) -> int:
        """How many event-time timers are registered, over every key."""
        return self._backend._native_count(self._cf(EVENT_TIME_CF))

    def num_processing_time_timers(self) -> int:
        """How many processing-time timers are registered, over every key."""
        return self._backend._native_count(self._cf(PROCESSING_TIME_CF))


def _ts(timestamp: Any, naive_zone: str | None = None) -> int:
    if type(timestamp) is int:
        return timestamp
    return to_millis(timestamp, "a timer timestamp", naive_zone)
