"""Where pyspark's own ``TwsTester`` (pyspark >= 4.2) differs from Spark, and the harness does
not: the same batches run through Spark's real transformWithStateInPandas (a streaming query),
through ``stateengine.testing.ProcessorHarness`` and through ``TwsTester`` the way its
documentation says to drive it (``setProcessingTime`` / ``setWatermark``, then ``test`` per
key). The harness must give Spark's rows batch by batch; each difference of TwsTester found
here is stated in docs/spark/testing.md:

* a MapState whose last entry was removed still ``exists()`` in TwsTester;
* TwsTester calls ``init()`` once and keeps one processor object, Spark calls it in every task
  of every batch on a fresh copy (attributes set in handlers do not carry over);
* TwsTester ignores TTL;
* a processing-time timer registered in the past fires in the same batch in Spark, only at
  the next ``setProcessingTime`` in TwsTester; an event-time timer at or before the watermark
  is refused by TwsTester and fires in the same batch in Spark;
* TwsTester fires the timers of a new watermark before the batch's input (so a timer the
  input deletes still fires) and drops rows at or before the new watermark, where Spark drops
  rows at or before the previous batch's watermark.
"""

from __future__ import annotations

import glob

import pandas as pd
import pytest

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark.sql.streaming.tws_tester",
                    reason="pyspark's TwsTester exists from pyspark 4.2 on")

from pyspark.sql.streaming.tws_tester import TwsTester  # noqa: E402

from stateengine.testing import ProcessorHarness  # noqa: E402

from tests import tws_processors as P  # noqa: E402
from tests.tws_compare import Scenario, assert_same, read_files, replay_harness, run_spark, \
    sort_rows  # noqa: E402

T0 = 1_700_000_000_000
PARTITIONS = 4  # spark.sql.shuffle.partitions of the test session: Spark's task count


def frame_rows(frames) -> list[tuple]:
    rows = []
    for f in frames:
        if isinstance(f, pd.DataFrame) and len(f):
            rows += [tuple(None if pd.isna(v) else v.item() if hasattr(v, "item") else v
                           for v in r) for r in f.itertuples(index=False, name=None)]
    return sort_rows(rows)


def replay_tester(batches, tester, time_mode, prepare=lambda pdf: pdf, key="key"):
    """Spark's batches through TwsTester as its documentation drives it: move the time (which
    fires due timers), then each key's rows. A key whose handler raises is recorded."""
    out = {}
    for b in batches:
        frames = []
        if time_mode == "ProcessingTime" and b.timestamp > tester._currentProcessingTimeMs:
            frames.append(tester.setProcessingTime(b.timestamp))
        if time_mode == "EventTime" and b.watermark > tester._currentWatermarkMs:
            frames.append(tester.setWatermark(b.watermark))
        rows = read_files(b.files)
        raised = []
        if rows is not None:
            for k, group in prepare(rows).groupby(key, sort=True):
                try:
                    frames.append(tester.testInPandas(k, group.reset_index(drop=True)))
                except Exception as e:  # noqa: BLE001 - recorded
                    raised.append((k, type(e).__name__))
        out[b.batch_id] = (frame_rows(frames), raised)
    return out


@pytest.fixture(scope="module")
def probe_in_spark(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("spark-inits")
    frames = [pd.DataFrame({"key": ["a"], "n": [1]}), pd.DataFrame({"key": ["a", "a"],
                                                                     "n": [2, 3]}),
              pd.DataFrame({"key": ["a"], "n": [4]})]
    batches = run_spark(spark, str(tmp_path_factory.mktemp("spark")), frames,
                        "key string, n long",
                        lambda s: s.groupBy("key").transformWithStateInPandas(
                            P.TesterProbe(str(folder)), P.TESTER_PROBE_OUT, "Update",
                            "ProcessingTime"), until_extra=1)
    return batches, len(glob.glob(f"{folder}/init-*"))


def test_processing_time_harness_matches_spark_where_tws_tester_differs(probe_in_spark,
                                                                        tmp_path):
    batches, spark_inits = probe_in_spark
    folder = tmp_path / "inits"
    folder.mkdir()
    sc = Scenario(lambda: P.TesterProbe(str(folder)), ["key"], P.TESTER_PROBE_OUT,
                  "key string, n long", time_mode="ProcessingTime",
                  num_partitions=PARTITIONS)
    ours = replay_harness(batches, sc, str(tmp_path / "h"))
    assert_same(batches, ours)
    harness_inits = len(glob.glob(f"{folder}/init-*"))

    tester_folder = tmp_path / "tester-inits"
    tester_folder.mkdir()
    tester = replay_tester(batches, TwsTester(P.TesterProbe(str(tester_folder)),
                                              timeMode="ProcessingTime"), "ProcessingTime")
    data = [b for b in batches if b.files]
    spark_inputs = [[r for r in b.rows if r[1] == "input"] for b in data]
    tester_inputs = [[r for r in tester[b.batch_id][0] if r[1] == "input"] for b in data]

    # init(): on the driver when the query starts (the states' schemas) and in every task of
    # every batch in Spark (and the harness), once in TwsTester. Spark's query is stopped
    # after the batches recorded; a batch it had started by then (a trigger a second) may
    # have run init() in some of its tasks without committing.
    assert harness_inits == 1 + PARTITIONS * len(batches)
    assert harness_inits <= spark_inits <= harness_inits + PARTITIONS
    assert len(glob.glob(f"{tester_folder}/init-*")) == 1
    # a fresh processor per task: the handler's own counter starts over in every batch
    assert [r[2] for rows in spark_inputs for r in rows] == [1, 1, 1]
    assert [r[2] for rows in tester_inputs for r in rows] == [1, 2, 3]
    # TTL (1 ms): the value of the previous batch is gone in Spark, kept by TwsTester
    assert [r[3] for rows in spark_inputs for r in rows] == ["null", "null", "null"]
    assert [r[3] for rows in tester_inputs for r in rows] == ["null", "[1]", "[2]"]
    # a map whose only entry was removed: gone in Spark, still "exists" in TwsTester
    assert {r[4] for rows in spark_inputs for r in rows} == {False}
    assert {r[4] for rows in tester_inputs for r in rows} == {True}
    # a timer registered in the past fires in its own batch in Spark, later in TwsTester
    assert all(any(r[1] == "timer" for r in b.rows) for b in data)
    assert not any(r[1] == "timer" for r in tester[data[0].batch_id][0])


@pytest.fixture(scope="module")
def event_time_in_spark(spark, tmp_path_factory):
    frames = [pd.DataFrame({"key": ["a", "d", "p"], "t": [T0, T0 - 10_000, T0]}),
              pd.DataFrame({"key": ["a", "d", "p"], "t": [T0 + 20_000] * 3}),
              pd.DataFrame({"key": ["a", "a"], "t": [T0 + 10_000, T0 - 6_000]})]
    return run_spark(spark, str(tmp_path_factory.mktemp("spark")), frames, "key string, t long",
                     lambda s: EVENT_TIME.prepare(s).groupBy("key")
                     .transformWithStateInPandas(P.TesterEventTime(), P.TESTER_EVENT_OUT,
                                                 "Update", "EventTime"))


EVENT_TIME = Scenario(
    P.TesterEventTime, ["key"], P.TESTER_EVENT_OUT, "key string, ts timestamp",
    time_mode="EventTime", event_time_column="ts", num_partitions=PARTITIONS,
    prepare=lambda df: df.selectExpr("key", "timestamp_millis(t) AS ts")
    .withWatermark("ts", "5 seconds"),
    prepare_pandas=lambda pdf: pd.DataFrame({"key": pdf["key"],
                                             "ts": pd.to_datetime(pdf["t"], unit="ms")}))


def test_event_time_harness_matches_spark_where_tws_tester_differs(event_time_in_spark,
                                                                   tmp_path):
    batches = event_time_in_spark
    assert_same(batches, replay_harness(batches, EVENT_TIME, str(tmp_path / "h")))
    ours = {}
    # the harness can also move the watermark itself, by withWatermark's rule
    with ProcessorHarness(P.TesterEventTime(), "key", P.TESTER_EVENT_OUT,
                          time_mode="EventTime", event_time_column="ts",
                          watermark_delay_ms=5000, num_partitions=PARTITIONS,
                          input_schema=EVENT_TIME.input_schema,
                          directory=str(tmp_path / "h2")) as h:
        for b in batches:
            rows = read_files(b.files)
            out = h.run_batch(None if rows is None else EVENT_TIME.prepare_pandas(rows))
            assert out.watermark == b.watermark
            ours[b.batch_id] = sort_rows(out.rows)
    assert_same(batches, ours)

    tester = replay_tester(batches, TwsTester(
        P.TesterEventTime(), timeMode="EventTime",
        eventTimeExtractor=lambda row: int(row["ts"].timestamp() * 1000)), "EventTime",
        EVENT_TIME.prepare_pandas)
    first, second, third = [b for b in batches if b.files]
    spark_second = [r for r in second.rows]
    # key p registers a timer at the batch's watermark: Spark fires it in that batch ...
    assert ("p", "timer", second.watermark, str(second.watermark)) in spark_second
    # ... TwsTester refuses it (IllegalArgumentException)
    assert ("p", "IllegalArgumentException") in tester[second.batch_id][1]
    # key d's input deletes its timer that the new watermark made due: Spark never fires it,
    # TwsTester fired it already when the watermark was set, before the input
    d_timer = str(T0 - 10_000 + 1000)
    assert d_timer <= str(second.watermark)
    assert not any(r[0] == "d" and r[1] == "timer" and r[3] == d_timer
                   for b in batches for r in b.rows)
    assert any(r[0] == "d" and r[1] == "timer" and r[3] == d_timer
               for r in tester[second.batch_id][0])
    # late rows: Spark drops what is at or before the previous batch's watermark (keeps
    # T0+10s), TwsTester what is at or before the current one (drops it too)
    spark_a = [r for r in third.rows if r[0] == "a" and r[1] == "input"]
    tester_a = [r for r in tester[third.batch_id][0] if r[0] == "a" and r[1] == "input"]
    assert spark_a and spark_a[0][3] == f"[{T0 + 10_000}]"
    assert tester_a and tester_a[0][3] == "[]"
