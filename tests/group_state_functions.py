"""applyInPandasWithState functions as a Spark user writes them, for the tests that run them
on Spark and on stateengine (tests/test_spark_group_state.py, tests/test_spark_migrate.py).
(In a module so that Spark's Python workers import them by name; pyspark 3.5 too.)

Batch timestamps are the wall clock in a running query, so nothing here outputs a time or
depends on how far apart batches are: processing-time timeouts are 1 ms (due by the next
batch) or ten hours (never due within a test).
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import pandas as pd

GROUP_OUT = "user string, count long, timed_out boolean, info string"
GROUP_STATE_SCHEMA = "count long, tags string"
FAR = 36_000_000


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def count_with_timeout(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any
                       ) -> Iterator[pd.DataFrame]:
    """ProcessingTimeTimeout: a count per user; a user with no rows in a batch after its
    timeout (1 ms) times out and its state goes; user ``z`` keeps a ten-hour timeout, user
    ``r`` removes its state but keeps a timeout."""
    user = key[0]
    if state.hasTimedOut:
        count, tags = state.get if state.exists else (-1, "")
        rows = sum(len(p) for p in pdfs)
        state.remove()
        yield pd.DataFrame({"user": [user], "count": [count], "timed_out": [True],
                            "info": [_dump({"tags": tags, "rows": rows})]})
        return
    count, tags = state.get if state.exists else (0, "")
    for pdf in pdfs:
        count += len(pdf)
        tags += "".join(sorted(pdf["tag"]))
    if user == "r" and count > 2:
        state.remove()
    else:
        state.update((count, tags))
    state.setTimeoutDuration(FAR if user == "z" else 1)
    yield pd.DataFrame({"user": [user], "count": [count], "timed_out": [False],
                        "info": [_dump({"tags": tags, "exists": state.exists})]})


def sessions_by_event_time(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any
                           ) -> Iterator[pd.DataFrame]:
    """EventTimeTimeout: a session per user that times out 2 s (event time) after its latest
    event; reports the watermark and the timeout it sets (deterministic: event times)."""
    user = key[0]
    if state.hasTimedOut:
        count, latest = state.get
        state.remove()
        yield pd.DataFrame({"user": [user], "count": [count], "timed_out": [True],
                            "info": [_dump({"latest": latest,
                                            "watermark": state.getCurrentWatermarkMs()})]})
        return
    count, latest = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        count += len(pdf)
        latest = max([latest] + [int(t.timestamp() * 1000) for t in pdf["ts"]])
    state.update((count, latest))
    timeout = max(latest + 2000, state.getCurrentWatermarkMs())
    state.setTimeoutTimestamp(timeout)
    yield pd.DataFrame({"user": [user], "count": [count], "timed_out": [False],
                        "info": [_dump({"latest": latest, "timeout": timeout,
                                        "watermark": state.getCurrentWatermarkMs()})]})
