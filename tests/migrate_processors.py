"""A Spark user's stateful code for the migration tests (tests/test_spark_migrate.py), run on
Spark's operators for some batches and then, after ``migrate_spark_state``, on stateengine's.
(In a module so that Spark's Python workers import it by name.)

Batch timestamps are the wall clock in a running query, so nothing here outputs a time or
depends on how far apart two batches are: timers report their expiry relative to the batch
timestamp they were registered at (kept in state), and TTLs are either 1 ms (gone by the next
batch) or an hour (kept). Lists and maps are reported sorted.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

SESSIONS_OUT = "user string, region int, kind string, info string"
HOUR = 3_600_000
FAR = 36_000_000  # a timer that never fires within a test


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class EveryKind(StatefulProcessor):
    """Value, list and map state with and without TTL and processing-time timers, keyed by
    (user, region) (time mode ProcessingTime). Users whose name ends in ``t`` arm a timer one
    ms after the batch and one ten hours away; the handler reports the expiry relative to the
    batch that armed it (``armed``)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.total = handle.getValueState("total", "count long, amount double")
        self.events = handle.getListState("events", "tag string, amount double")
        self.by_tag = handle.getMapState("by_tag", "tag string", "n long, last double")
        self.recent = handle.getValueState("recent", "n long", 1)
        self.kept = handle.getListState("kept", "n long", HOUR)
        self.seen = handle.getMapState("seen", "batch long", "rows long", HOUR)
        self.gone = handle.getMapState("gone", "k string", "v long", 1)
        self.armed = handle.getValueState("armed", "at long")

    def _view(self) -> dict:
        armed = self.armed.get()
        return {"total": self.total.get(), "events": sorted(self.events.get()),
                "by_tag": sorted(self.by_tag.iterator()), "recent": self.recent.get(),
                "kept": list(self.kept.get()), "seen": sorted(self.seen.iterator()),
                "gone": sorted(self.gone.iterator()),
                "timers": sorted(t - armed[0] for t in self.handle.listTimers()) if armed
                else sorted(self.handle.listTimers())}

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        before = self._view()
        count, amount = self.total.get() or (0, 0.0)
        tags = []
        for pdf in rows:
            for tag, a in zip(pdf["tag"], pdf["amount"]):
                count += 1
                amount += float(a)
                tags.append((tag, float(a)))
                old = self.by_tag.getValue((tag,))
                self.by_tag.updateValue((tag,), ((old.n if old else 0) + 1, float(a)))
        self.total.update((count, amount))
        self.events.appendList(tags)
        self.recent.update((count,))
        if count > 6:
            self.kept.put([(count,)])
        else:
            self.kept.appendValue((count,))
        self.seen.updateValue((count,), (len(tags),))
        self.gone.updateValue((key[0],), (count,))
        if key[0].endswith("t"):
            for ts in list(self.handle.listTimers()):
                self.handle.deleteTimer(ts)
            self.armed.update((now,))
            self.handle.registerTimer(now + 1)
            self.handle.registerTimer(now + FAR)
        yield pd.DataFrame({"user": [key[0]], "region": [key[1]], "kind": ["input"],
                            "info": [_dump({"before": before, "after": self._view()})]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        armed = self.armed.get()
        yield pd.DataFrame({"user": [key.user], "region": [key.region], "kind": ["timer"],
                            "info": [_dump({"after_armed": expiredTimerInfo.getExpiryTimeInMs()
                                            - armed[0], "view": self._view()})]})

    def close(self) -> None:
        pass


class ShortAsList(StatefulProcessor):
    """tests/tws_processors.TimersAndTtl's states, but 'short' declared as a list state: a
    processor the migration must refuse for that query."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        handle.getListState("short", "n long", 1)
        handle.getValueState("long", "n long", 3_600_000)
        handle.getValueState("mid", "n long", 20_000)
        handle.getListState("events", "n long", 20_000)
        handle.getMapState("seen", "batch long", "rows long", 1)
        handle.getValueState("count", "n long")
        handle.getValueState("rearmed", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        return iter(())

    def close(self) -> None:
        pass
