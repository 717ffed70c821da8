"""User code for tests/test_spark_quiet_streams.py (a module, so that Spark's Python workers
import it by name): a heartbeat timeout per key (a processing-time timer HEARTBEAT_MS after the
batch of the key's last event) and an event-time timeout (a timer 2 s after the key's latest
event time), as apply_with_state functions, as StatefulProcessors (pyspark >= 4.0) and, for
the comparison on Spark 3.5, as Spark's own applyInPandasWithState function.

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


# ---- Spark's applyInPandasWithState (Spark's own operator, on every supported version) -----

def spark_heartbeat(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any
                    ) -> Iterator[pd.DataFrame]:
    """heartbeat with Spark's processing-time timeout."""
    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"key": [key[0]], "kind": ["timeout"], "at": [-1],
                            "batch_ts": [state.getCurrentProcessingTimeMs()]})
        return
    for _ in pdfs:
        pass
    state.update((state.getCurrentProcessingTimeMs(),))
    state.setTimeoutDuration(HEARTBEAT_MS)



def spark_event_gap(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any
                    ) -> Iterator[pd.DataFrame]:
    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"key": [key[0]], "kind": ["timeout"], "at": [-1],
                            "watermark": [state.getCurrentWatermarkMs()]})
        return
    latest = max(int(pdf["ts"].max().value // 1_000_000) for pdf in pdfs)
    state.update((latest,))
    # Spark refuses a timeout before the current watermark (a late key's)
    state.setTimeoutTimestamp(max(latest + GAP_MS, state.getCurrentWatermarkMs() + 1))
    yield pd.DataFrame({"key": [key[0]], "kind": ["event"], "at": [latest + GAP_MS],
                        "watermark": [state.getCurrentWatermarkMs()]})


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

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                            timerValues: Any) -> Iterator[pd.DataFrame]:
            for _ in rows:
                pass
            if self.timeout.exists():
                self.handle.deleteTimer(self.timeout.get()[0])
            now = timerValues.getCurrentProcessingTimeInMs()
            self.handle.registerTimer(now + HEARTBEAT_MS)
            self.timeout.update((now + HEARTBEAT_MS,))
            yield pd.DataFrame({"key": [key[0]], "kind": ["event"], "at": [now + HEARTBEAT_MS],
                                "batch_ts": [now]})

        def handleExpiredTimer(self, key: Any, timerValues: Any,
                               expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
            self.timeout.clear()
            yield pd.DataFrame({"key": [key.key], "kind": ["timeout"],
                                "at": [expiredTimerInfo.getExpiryTimeInMs()],
                                "batch_ts": [timerValues.getCurrentProcessingTimeInMs()]})

        def close(self) -> None:
            pass

    class RowHeartbeat(StatefulProcessor):
        """The same in the Row flavour (transformWithState)."""

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.timeout = handle.getValueState("timeout", "at long")

        def handleInputRows(self, key: Any, rows: Iterator[Any],
                            timerValues: Any) -> Iterator[Any]:
            for _ in rows:
                pass
            if self.timeout.exists():
                self.handle.deleteTimer(self.timeout.get()[0])
            now = timerValues.getCurrentProcessingTimeInMs()
            self.handle.registerTimer(now + HEARTBEAT_MS)
            self.timeout.update((now + HEARTBEAT_MS,))
            yield Row(key=key[0], kind="event", at=now + HEARTBEAT_MS, batch_ts=now)

        def handleExpiredTimer(self, key: Any, timerValues: Any,
                               expiredTimerInfo: Any) -> Iterator[Any]:
            self.timeout.clear()
            yield Row(key=key.key, kind="timeout", at=expiredTimerInfo.getExpiryTimeInMs(),
                      batch_ts=timerValues.getCurrentProcessingTimeInMs())

        def close(self) -> None:
            pass
