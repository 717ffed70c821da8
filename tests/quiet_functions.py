"""User code for tests/test_spark_quiet_streams.py (a module, so that Spark's Python workers
import it by name): a heartbeat timeout per key (a processing-time timer HEARTBEAT_MS after the
batch of the key's last event) and an event-time timeout (a timer 2 s after the key's latest
event time), as apply_with_state functions, as StatefulProcessors (pyspark >= 4.0) and as
functions of Spark's own applyInPandasWithState (every supported Spark).

Every output row carries the batch timestamp (or watermark) it was produced at, so the tests
can tell which batch produced it."""

from __future__ import annotations

from typing import Any, Iterator

import pandas as pd

HEARTBEAT_MS = 2_000
GAP_MS = 2_000
OUT = "key string, kind string, at long, batch_ts long"
EVENT_OUT = "key string, kind string, at long, watermark long"


# ---- apply_with_state -----------------------------------------------------------------------

def heartbeat(key: Any, rows: pd.DataFrame, ctx: Any) -> list[tuple]:
    """Moves the key's timeout to HEARTBEAT_MS after this batch."""
    last = ctx.state("timeout")
    if last.value() is not None:
        ctx.timers.delete_processing_time_timer(last.value())
    at = ctx.processing_time + HEARTBEAT_MS
    ctx.timers.register_processing_time_timer(at)
    last.update(at)
    return [(key, "event", at, ctx.processing_time)]


def heartbeat_timeout(key: Any, timer: Any, ctx: Any) -> list[tuple]:
    ctx.state("timeout").clear()
    return [(key, "timeout", timer.timestamp, ctx.processing_time)]


def event_gap(key: Any, rows: pd.DataFrame, ctx: Any) -> list[tuple]:
    """An event-time timer GAP_MS after the key's latest event (ts, a Spark timestamp)."""
    at = int(rows["ts"].max().value // 1_000_000) + GAP_MS
    ctx.timers.register_event_time_timer(at)
    return [(key, "event", at, ctx.watermark)]


def event_gap_timeout(key: Any, timer: Any, ctx: Any) -> list[tuple]:
    return [(key, "timeout", timer.timestamp, ctx.watermark)]


def group_heartbeat(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any
                    ) -> Iterator[pd.DataFrame]:
    """heartbeat for apply_in_pandas_with_state (GroupState): a ProcessingTimeTimeout
    HEARTBEAT_MS after the key's last batch. Spark times a key out strictly after its timeout,
    so ``at`` is the first millisecond at which it may fire."""
    now = state.getCurrentProcessingTimeMs()
    if state.hasTimedOut:
        (at,) = state.get
        state.remove()
        yield pd.DataFrame({"key": [key[0]], "kind": ["timeout"], "at": [at], "batch_ts": [now]})
        return
    for _ in pdfs:
        pass
    at = now + HEARTBEAT_MS + 1
    state.update((at,))
    state.setTimeoutDuration(HEARTBEAT_MS)
    yield pd.DataFrame({"key": [key[0]], "kind": ["event"], "at": [at], "batch_ts": [now]})


# ---- Spark's applyInPandasWithState (Spark's own operator, on every supported version) -----

def spark_heartbeat(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any
                    ) -> Iterator[pd.DataFrame]:
    """A processing-time timeout HEARTBEAT_MS after the key's last batch. The tests look at
    the batches Spark runs for it; it writes no rows."""
    if state.hasTimedOut:
        state.remove()
    else:
        for _ in pdfs:
            pass
        state.update((state.getCurrentProcessingTimeMs(),))
        state.setTimeoutDuration(HEARTBEAT_MS)
    return iter(())


def spark_event_gap(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any
                    ) -> Iterator[pd.DataFrame]:
    """An event-time timeout GAP_MS after the key's latest event (no rows, as above)."""
    if state.hasTimedOut:
        state.remove()
    else:
        latest = max(int(pdf["ts"].max().value // 1_000_000) for pdf in pdfs)
        state.update((latest,))
        # Spark refuses a timeout before the current watermark (a late key's)
        state.setTimeoutTimestamp(max(latest + GAP_MS, state.getCurrentWatermarkMs() + 1))
    return iter(())


# ---- StatefulProcessors ---------------------------------------------------------------------

try:
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
except ImportError:  # pyspark 3.5: no transformWithState
    StatefulProcessor = None

if StatefulProcessor is not None:
    class Heartbeat(StatefulProcessor):
        """heartbeat/heartbeat_timeout as a processor (time mode ProcessingTime, pandas)."""

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.timeout = handle.getValueState("timeout", "at long")

        def _moved(self, key: Any, rows: Iterator[Any], timerValues: Any) -> dict:
            """Moves the key's timeout; the event row's values."""
            for _ in rows:
                pass
            if self.timeout.exists():
                self.handle.deleteTimer(self.timeout.get()[0])
            now = timerValues.getCurrentProcessingTimeInMs()
            self.handle.registerTimer(now + HEARTBEAT_MS)
            self.timeout.update((now + HEARTBEAT_MS,))
            return {"key": key[0], "kind": "event", "at": now + HEARTBEAT_MS, "batch_ts": now}

        def _fired(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> dict:
            self.timeout.clear()
            return {"key": key.key, "kind": "timeout",
                    "at": expiredTimerInfo.getExpiryTimeInMs(),
                    "batch_ts": timerValues.getCurrentProcessingTimeInMs()}

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                            timerValues: Any) -> Iterator[pd.DataFrame]:
            yield pd.DataFrame([self._moved(key, rows, timerValues)])

        def handleExpiredTimer(self, key: Any, timerValues: Any,
                               expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
            yield pd.DataFrame([self._fired(key, timerValues, expiredTimerInfo)])

        def close(self) -> None:
            pass

    class RowHeartbeat(Heartbeat):
        """The same in the Row flavour (transformWithState)."""

        def handleInputRows(self, key: Any, rows: Iterator[Any],
                            timerValues: Any) -> Iterator[Any]:
            yield Row(**self._moved(key, rows, timerValues))

        def handleExpiredTimer(self, key: Any, timerValues: Any,
                               expiredTimerInfo: Any) -> Iterator[Any]:
            yield Row(**self._fired(key, timerValues, expiredTimerInfo))
