"""StatefulProcessors written for Spark's transformWithState, as a Spark user would write them;
tests run each through Spark and through stateengine and compare the outputs batch by batch.
(Defined in a module so that Spark's Python workers import them by name.)

Every output is deterministic whatever order keys are processed in: lists and maps are
reported sorted, as Spark's iteration order is its own RocksDB key order.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Iterator

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

SUMMARY_SCHEMA = "user string, region int, summary string"


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class EveryStateMethod(StatefulProcessor):
    """Value, list and map state, every method, on a two-column key (user, region); the
    initial state (user, region, seed) seeds the list. Time mode None."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.acc = handle.getValueState("acc", "count long, total double")
        self.flag = handle.getValueState(
            "flag", StructType([StructField("on", LongType(), True)]))
        self.tags = handle.getListState("tags", "tag string, at long")
        self.by_tag = handle.getMapState(
            "by_tag", StructType([StructField("tag", StringType(), True)]),
            "n long, last double")

    def handleInitialState(self, key: Any, initialState: pd.DataFrame,
                           timerValues: TimerValues) -> None:
        for seed in initialState["seed"].tolist():
            self.tags.appendValue((f"seed-{seed}", -1))

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        before = {"acc": self.acc.get(), "acc_exists": self.acc.exists(),
                  "flag_exists": self.flag.exists(), "tags_exist": self.tags.exists(),
                  "map_exists": self.by_tag.exists()}
        count, total = self.acc.get() if self.acc.exists() else (0, 0.0)
        new_tags = []
        for pdf in rows:
            count += len(pdf)
            total += float(pdf["amount"].sum())
            for tag, amount in zip(pdf["tag"], pdf["amount"]):
                old = self.by_tag.getValue((tag,))
                self.by_tag.updateValue((tag,), ((old.n if old else 0) + 1, float(amount)))
                new_tags.append((tag, count))
        self.acc.update((count, total))
        if count > 5:
            self.tags.put(list(self.tags.get())[-2:])  # keep the last two
        elif len(new_tags) == 1:
            self.tags.appendValue(new_tags[0])
        else:
            self.tags.appendList(new_tags)
        if self.by_tag.containsKey(("drop",)):
            self.by_tag.removeKey(("drop",))
        if any(t == "reset" for t, _ in new_tags):
            self.by_tag.clear()
        if self.flag.exists():
            self.flag.clear()
        else:
            self.flag.update((count,))
        after = {"acc": self.acc.get(), "flag": self.flag.get(),
                 "tags": sorted(self.tags.get()), "map": sorted(self.by_tag.iterator()),
                 "keys": sorted(self.by_tag.keys()), "values": sorted(self.by_tag.values()),
                 "a": self.by_tag.getValue(("a",)), "has_a": self.by_tag.containsKey(("a",)),
                 "times": [timerValues.getCurrentProcessingTimeInMs(),
                           timerValues.getCurrentWatermarkInMs()]}
        yield pd.DataFrame({"user": [key[0]], "region": [key[1]],
                            "summary": [_dump({"before": before, "after": after})]})

    def close(self) -> None:
        pass


class TimersAndTtl(StatefulProcessor):
    """Processing-time timers and TTL on value, list and map state (time mode
    ProcessingTime). What each key does with timers depends on its name:

    * ``a``: a timer 1 ms after the batch, fired in the next batch;
    * ``b``: timers 1 ms before and at the batch time, fired in this batch after the input;
    * ``c``: deletes its timers, then registers one 10 hours away;
    * ``d``: a timer 1 ms after the batch; its handler registers the same time again (Spark
      deletes it after the handler) and a time in the past (fired in the next batch).
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.short = handle.getValueState("short", "n long", 1)  # expires by the next batch
        self.long = handle.getValueState("long", "n long", 3_600_000)
        self.mid = handle.getValueState("mid", "n long", 20_000)
        self.events = handle.getListState("events", "n long", 20_000)
        self.seen = handle.getMapState("seen", "batch long", "rows long", 1)
        self.count = handle.getValueState("count", "n long")
        self.rearmed = handle.getValueState("rearmed", "n long")

    def _visible(self) -> dict:
        return {"short": self.short.get(), "long": self.long.get(), "mid": self.mid.get(),
                "events": list(self.events.get()), "seen": sorted(self.seen.iterator()),
                "mid_exists": self.mid.exists(), "events_exist": self.events.exists(),
                "timers": sorted(self.handle.listTimers())}

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        k = key[0]
        now = timerValues.getCurrentProcessingTimeInMs()
        n = sum(len(p) for p in rows)
        before = self._visible()
        count = (self.count.get() or (0,))[0] + 1
        self.count.update((count,))
        self.short.update((count,))
        self.long.update((count,))
        if count % 2:
            self.mid.update((count,))
        self.events.appendValue((count,))
        self.seen.updateValue((count,), (n,))
        if k == "a" or k == "d":
            self.handle.registerTimer(now + 1)
        elif k == "b":
            self.handle.registerTimer(now - 1)
            self.handle.registerTimer(now)
        elif k == "c":
            for ts in list(self.handle.listTimers()):
                self.handle.deleteTimer(ts)
            self.handle.registerTimer(now + 36_000_000)
        yield pd.DataFrame({"key": [k], "kind": ["input"], "at": [now], "rows": [n],
                            "state": [_dump({"before": before, "after": self._visible()})]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        now = timerValues.getCurrentProcessingTimeInMs()
        if key.key == "d" and self.rearmed.get() is None:
            self.rearmed.update((1,))
            self.handle.registerTimer(expiry)      # lost: Spark deletes the fired timer after
            self.handle.registerTimer(now - 5)     # due, but fires in the next batch
        yield pd.DataFrame({"key": [key.key], "kind": ["timer"], "at": [expiry],
                            "rows": [0], "state": [_dump(self._visible())]})

    def close(self) -> None:
        pass


class EventTimeSessions(StatefulProcessor):
    """Event-time timers (time mode EventTime): each key's timer is its latest event plus 2 s;
    key ``x`` keeps only its latest timer, key ``r`` re-arms its timer once when it fires."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.latest = handle.getValueState("latest", "ts long")
        self.rearmed = handle.getValueState("rearmed", "done boolean")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        times = []
        for pdf in rows:
            times += [int(t.timestamp() * 1000) for t in pdf["ts"]]
        latest = max(times + [(self.latest.get() or (0,))[0]])
        self.latest.update((latest,))
        if key[0] == "x":
            for ts in list(self.handle.listTimers()):
                self.handle.deleteTimer(ts)
        self.handle.registerTimer(latest + 2000)
        yield pd.DataFrame({"key": [key[0]], "kind": ["input"], "at": [latest],
                            "watermark": [timerValues.getCurrentWatermarkInMs()],
                            "info": [_dump({"times": sorted(times),
                                            "timers": sorted(self.handle.listTimers())})]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        if key.key == "r" and not self.rearmed.exists():
            self.rearmed.update((True,))
            self.handle.registerTimer(expiry + 1000)
        yield pd.DataFrame({"key": [key.key], "kind": ["timer"], "at": [expiry],
                            "watermark": [timerValues.getCurrentWatermarkInMs()],
                            "info": [_dump({"timers": sorted(self.handle.listTimers())})]})

    def close(self) -> None:
        pass


class RowsWithInitialState(StatefulProcessor):
    """The Row flavour (transformWithState): a running total seeded from the initial state, one
    Row per initial-state row, and a processing-time timer that reports the total."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.total = handle.getValueState("total", StructType([StructField("t", DoubleType())]))
        self.seen = handle.getListState("seen", "what string")

    def handleInitialState(self, key: Any, initialState: Row, timerValues: TimerValues) -> None:
        t = (self.total.get() or (0.0,))[0] + initialState.init
        self.total.update((t,))
        self.seen.appendValue((f"init {initialState.init}",))

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        t = (self.total.get() or (0.0,))[0]
        for row in rows:
            t += row.amount
            self.seen.appendValue((f"{row.user}:{row.amount}",))
        self.total.update((t,))
        if not list(self.handle.listTimers()):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1)
        yield Row(user=key[0], total=t, seen=_dump(sorted(x[0] for x in self.seen.get())))

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        yield Row(user=key.user, total=-(self.total.get() or (0.0,))[0], seen="timer")

    def close(self) -> None:
        pass


class RunningTotals(StatefulProcessor):
    """The bench's job: a running count and sum per user in one ValueState."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.acc = handle.getValueState("acc", "count long, total double")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        count, total = self.acc.get() if self.acc.exists() else (0, 0.0)
        for pdf in rows:
            count += len(pdf)
            total += float(pdf["amount"].sum())
        self.acc.update((count, total))
        yield pd.DataFrame({"user": [key[0]], "count": [count], "total": [total]})

    def close(self) -> None:
        pass


class RowCounts(StatefulProcessor):
    """The Row flavour at its smallest: a count per key, one Row per key and batch (with a
    timestamp column, which crosses Arrow with a time zone)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        n = (self.count.get() or (0,))[0] + sum(1 for _ in rows)
        self.count.update((n,))
        yield Row(user=key[0], count=n, at=datetime.datetime(2026, 1, 1, 0, 0, n))

    def close(self) -> None:
        pass


# ---- misuse, deleted states and chunks (tests/test_spark_processor_misuse.py) --------------

def error_kind(e: BaseException | None) -> str:
    """What a test compares of an error: Spark's error class in brackets, else the "<kind>
    state <name> is not initialized" that Spark's handle says of a deleted state, else the
    exception's type ("ok" without one)."""
    import re

    if e is None:
        return "ok"
    text = str(e)
    found = re.search(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)?)\]", text)
    if found and found.group(1) != "PYTHON_EXCEPTION":
        return found.group(1)
    found = re.search(r"(\w+ state \w+ is not initialized)", text)
    return found.group(1) if found else type(e).__name__


def _attempt(call: Any) -> str:
    try:
        result = call()
        if hasattr(result, "__next__"):
            list(result)
        return "ok"
    except Exception as e:  # noqa: BLE001 - the error is what the test compares
        return error_kind(e)


class Misuse(StatefulProcessor):
    """Commits one misuse of the handle, named by ``what``, uncaught: Spark's state server
    drops its connection after refusing a call, so one misuse is all a Spark task can meet."""

    def __init__(self, what: str) -> None:
        self.what = what

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.value = handle.getValueState("value", "n long")
        self.items = handle.getListState("items", "n long")
        what = self.what
        if what == "get_without_key":
            self.value.get()
        elif what == "timer_in_init":
            handle.registerTimer(5)
        elif what == "ttl_state":
            handle.getValueState("with_ttl", "n long", 1000)
        elif what == "reserved_name":
            handle.getValueState("$x", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        h, what = self.handle, self.what
        if what == "register_timer":
            h.registerTimer(5)
        elif what == "put_empty_list":
            self.items.put([])
        elif what == "append_empty_list":
            self.items.appendList([])
        elif what == "declare_in_handler":
            h.getValueState("late", "n long")
        elif what == "delete_in_handler":
            h.deleteIfExists("value")
        yield pd.DataFrame({"k": [key[0]], "misuse": [what]})

    def close(self) -> None:
        if self.what == "timer_in_close":
            self.handle.registerTimer(5)


# misuse -> time mode it is committed in
MISUSES = {"get_without_key": "None", "timer_in_init": "ProcessingTime", "ttl_state": "None",
           "reserved_name": "None", "register_timer": "None", "put_empty_list": "None",
           "append_empty_list": "None", "declare_in_handler": "None",
           "delete_in_handler": "ProcessingTime", "timer_in_close": "ProcessingTime"}


class DeletedHandles(StatefulProcessor):
    """Each key names a call on a handle whose state init() deleted (deleteIfExists); the
    output is what the call met. Spark's state server answers these without dropping the
    connection, so one task meets them all."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.value = handle.getValueState("gone_value", "n long")
        self.list = handle.getListState("gone_list", "n long")
        self.map = handle.getMapState("gone_map", "k long", "n long")
        for name in ("gone_value", "gone_list", "gone_map", "never_declared"):
            handle.deleteIfExists(name)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        v, lst, m = self.value, self.list, self.map
        call = {
            "value_get": v.get, "value_exists": v.exists, "value_update": lambda: v.update((1,)),
            "value_clear": v.clear, "list_get": lst.get, "list_exists": lst.exists,
            "list_append": lambda: lst.appendValue((1,)), "list_put": lambda: lst.put([(1,)]),
            "list_append_list": lambda: lst.appendList([(1,)]), "list_clear": lst.clear,
            "map_update": lambda: m.updateValue((1,), (2,)), "map_get": lambda: m.getValue((1,)),
            "map_contains": lambda: m.containsKey((1,)), "map_iterator": m.iterator,
            "map_keys": m.keys, "map_values": m.values, "map_remove": lambda: m.removeKey((1,)),
            "map_exists": m.exists, "map_clear": m.clear,
        }[key[0]]
        yield pd.DataFrame({"k": [key[0]], "error": [_attempt(call)]})

    def close(self) -> None:
        pass


DELETED_CALLS = ("value_get", "value_exists", "value_update", "value_clear", "list_get",
                 "list_exists", "list_append", "list_put", "list_append_list", "list_clear",
                 "map_update", "map_get", "map_contains", "map_iterator", "map_keys",
                 "map_values", "map_remove", "map_exists", "map_clear")


class RedeclaredAfterDelete(StatefulProcessor):
    """deleteIfExists('count') in init() drops the state of every key in every batch, then
    declares it again: both the old handle and the new one work, and counts restart."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.old = handle.getValueState("count", "n long")
        handle.deleteIfExists("count")
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        n = sum(len(p) for p in rows) + (self.count.get() or (0,))[0]
        self.old.update((n,))
        yield pd.DataFrame({"key": [key[0]], "n": [n], "same": [self.count.get() == (n,)]})

    def close(self) -> None:
        pass


class FrameSizes(StatefulProcessor):
    """Reports how handleInputRows gets a key's rows: each frame's length, first index and
    first value of ``v``."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        sizes = [[len(p), int(p.index[0]), int(p["v"].iloc[0])] for p in rows]
        yield pd.DataFrame({"k": [key[0]], "frames": [json.dumps(sizes)]})

    def close(self) -> None:
        pass


# ---- where pyspark's TwsTester differs from Spark (tests/test_tws_tester.py) ----------------

def _log_init(folder: str) -> None:
    import os
    import uuid

    with open(os.path.join(folder, f"init-{uuid.uuid4().hex}"), "w"):
        pass


class TesterProbe(StatefulProcessor):
    """ProcessingTime. Per key and batch: how many handleInputRows calls this processor
    object has seen (a fresh copy per task in Spark), a TTL'd value written in the previous
    batch (1 ms TTL), whether a map whose only entry was removed exists, and a timer registered
    in the past. Every init() leaves a file in ``folder``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.calls = 0

    def init(self, handle: StatefulProcessorHandle) -> None:
        _log_init(self.folder)
        self.handle = handle
        self.short = handle.getValueState("short", "n long", 1)
        self.map = handle.getMapState("map", "k long", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        n = sum(len(p) for p in rows)
        self.calls += 1
        now = timerValues.getCurrentProcessingTimeInMs()
        previous = self.short.get()
        self.short.update((n,))
        self.map.updateValue((1,), (n,))
        self.map.removeKey((1,))
        self.handle.registerTimer(now - 1)  # in the past
        yield pd.DataFrame({"key": [key[0]], "kind": ["input"], "calls": [self.calls],
                            "ttl_value": [json.dumps(previous)],
                            "map_exists": [self.map.exists()]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame({"key": [key[0]], "kind": ["timer"], "calls": [self.calls],
                            "ttl_value": [None], "map_exists": [None]})

    def close(self) -> None:
        pass


TESTER_PROBE_OUT = "key string, kind string, calls long, ttl_value string, map_exists boolean"


class TesterEventTime(StatefulProcessor):
    """EventTime. Reports the event times each batch hands it (late rows dropped) and the
    watermark, and registers a timer at its latest event plus 1 s; key ``d`` first deletes
    its timers, key ``p`` also registers one at the current watermark (already due); timers
    report when they fire."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        times = sorted(int(t.timestamp() * 1000) for p in rows for t in p["ts"])
        wm = timerValues.getCurrentWatermarkInMs()
        if key[0] == "d":
            for ts in list(self.handle.listTimers()):
                self.handle.deleteTimer(ts)
        if times:
            self.handle.registerTimer(times[-1] + 1000)
        if key[0] == "p" and wm > 0:
            self.handle.registerTimer(wm)
        yield pd.DataFrame({"key": [key[0]], "kind": ["input"], "watermark": [wm],
                            "info": [json.dumps(times)]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame({"key": [key[0]], "kind": ["timer"],
                            "watermark": [timerValues.getCurrentWatermarkInMs()],
                            "info": [str(expiredTimerInfo.getExpiryTimeInMs())]})

    def close(self) -> None:
        pass


TESTER_EVENT_OUT = "key string, kind string, watermark long, info string"
