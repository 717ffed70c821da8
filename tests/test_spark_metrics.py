"""State metrics where Spark users look: each micro-batch's figures in the streaming query's
progress (``observedMetrics["stateengine.<operator>"]``), and any committed batch's, per
partition, through ``state_metrics`` on the driver; the user's output is unchanged."""

import os

import numpy as np
import pandas as pd
import pyspark
import pytest

from stateengine import ValueStateDescriptor
from stateengine.metrics import SPARK_FIELDS
from stateengine.spark import apply_with_state, observed_metrics, state_metrics

pytestmark = pytest.mark.spark

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
OUT = "user bigint, kind string, count bigint"
PARTITIONS = 3


def per_user(user, rows, ctx):
    count = ctx.state("count")
    count.update(count.value() + len(rows))
    # a timer 5 s after the user's last event; fires once the watermark passes it
    ctx.timers.register_event_time_timer(int(rows["t_ms"].max()) + 5_000)
    return [(user, "update", count.value())]


def on_timer(user, timer, ctx):
    ctx.state("count").clear()
    return [(user, "timer", 0)]


def events(files=3, rows=30, users=8, seed=4):
    rng = np.random.default_rng(seed)
    return [pd.DataFrame({"user": rng.integers(0, users, rows).astype("int64"),
                          "t_ms": i * 10_000 + np.arange(rows, dtype="int64")})
            for i in range(files)]


def test_foreach_batch_path_reads_each_batch_from_state_metrics(spark, tmp_path):
    """The foreachBatch pattern: batch DataFrames with explicit batch ids, no observation;
    the driver reads each batch's metrics from the checkpoint."""
    ck = str(tmp_path / "state")
    data = events()
    for b, pdf in enumerate(data):
        out = apply_with_state(spark.createDataFrame(pdf), "user", per_user, OUT, [COUNT], ck,
                               b, num_partitions=PARTITIONS, operator_id="agg",
                               on_timer=on_timer, watermark=int(pdf["t_ms"].max()) - 15_000)
        assert out.schema.names == ["user", "kind", "count"]  # a batch job's output as declared
        rows = out.collect()
        assert all(r.user is not None for r in rows)
        m = state_metrics(ck, b, "agg")
        assert m.version == b + 1 and sorted(m.partitions) == list(range(PARTITIONS))
        fired = sum(r.kind == "timer" for r in rows)
        users = pdf["user"].nunique()
        t = m.totals
        # per user two reads and a write of its count, a delete per fired timer's clear
        assert t["rows_written"] == users and t["rows_deleted"] == fired
        assert t["rows_read"] == 2 * users
        assert t["timers_fired"] == fired
        assert m.spark["numRowsUpdated"] == users and m.spark["numTimersFired"] == fired
        assert m.spark["numStateStoreInstances"] == PARTITIONS
        loads = {x["load"] for x in m.partitions.values()}
        # later batches continue on a cached backend, or restore on another Python worker
        assert loads == {"empty"} if b == 0 else loads <= {"reused", "restored"}
        total_fired = fired if b == 0 else total_fired + fired
    assert total_fired > 0  # watermarks passed earlier timers


def run_query(session, source, base, operator_id):
    state, query_ck = os.path.join(base, "state"), os.path.join(base, "query")
    stream = (session.readStream.schema("user bigint, t_ms bigint")
              .option("maxFilesPerTrigger", 1).parquet(source)
              .selectExpr("user", "t_ms", "timestamp_millis(t_ms) AS t")
              .withWatermark("t", "1 second"))
    out = apply_with_state(stream, "user", per_user, OUT, [COUNT], state,
                           num_partitions=PARTITIONS, operator_id=operator_id,
                           on_timer=on_timer, query_checkpoint=query_ck)
    assert out.isStreaming and out.schema.names == ["user", "kind", "count"]
    query = (out.writeStream.format("parquet").option("path", os.path.join(base, "out"))
             .option("checkpointLocation", query_ck).trigger(availableNow=True).start())
    query.awaitTermination()
    return query, state


def check_query(session, tmp_path, operator_id):
    source, base = str(tmp_path / "in"), str(tmp_path / "job")
    os.makedirs(source)
    data = events()
    for i, pdf in enumerate(data):
        pdf.to_parquet(os.path.join(source, f"part-{i:03d}.parquet"), index=False)
    query, state = run_query(session, source, base, operator_id)

    progress = [p for p in query.recentProgress
                if observed_metrics(p, operator_id) is not None]
    assert len(progress) >= len(data)
    for p in progress:
        seen = observed_metrics(p, operator_id)
        batch = seen.pop("batchId")
        assert batch == (p["batchId"] if isinstance(p, dict) else p.batchId)
        # the progress holds exactly what the batch's commits sealed into their manifests
        assert seen == state_metrics(state, batch, operator_id).spark
        assert set(seen) == set(SPARK_FIELDS)
        assert seen["numStateStoreInstances"] == PARTITIONS
    first = observed_metrics(progress[0], operator_id)
    assert first["numRowsUpdated"] == data[0]["user"].nunique() and first["numEmpty"] == 3
    assert first["numRowsTotal"] == data[0]["user"].nunique() and first["commitTimeMs"] >= 0
    last = query.lastProgress
    # Spark 3.5 reports observed metrics only for batches with data, and the last batch is the
    # one without data that the step asks for after the watermark moved
    assert observed_metrics(last, operator_id) is not None or (
        int(pyspark.__version__.split(".")[0]) < 4 and
        (last["numInputRows"] if isinstance(last, dict) else last.numInputRows) == 0)

    # the user's output: declared columns only, no metrics rows
    out = session.read.parquet(os.path.join(base, "out"))
    assert out.schema.names == ["user", "kind", "count"]
    rows = out.collect()
    assert all(r.user is not None and r.kind in ("update", "timer") for r in rows)
    assert sum(r.kind == "update" for r in rows) == sum(d["user"].nunique() for d in data)
    # every batch's timers, from its manifests (the batch without data fires some, and Spark
    # 3.5 leaves it out of observedMetrics)
    fired = sum(state_metrics(state, p["batchId"] if isinstance(p, dict) else p.batchId,
                              operator_id).spark["numTimersFired"] for p in query.recentProgress)
    assert fired > 0 and sum(r.kind == "timer" for r in rows) == fired


def test_streaming_query_progress_carries_state_metrics(spark, tmp_path):
    check_query(spark, tmp_path, "agg")


@pytest.mark.connect
def test_streaming_query_progress_carries_state_metrics_on_connect(connect, tmp_path):
    check_query(connect, tmp_path, "agg_connect")


def test_summed_figures_round_as_the_progress_does(spark):
    """A summed figure from the manifests (exact_rounded_sum) is what the progress's
    aggregation (spark/metrics.py ``_aggregate``) computes from the same JSON values, halves
    and float sums included: 52.5 + 53 + 53 is 159 in both (Python's round gives 158)."""
    from stateengine.metrics import exact_rounded_sum
    from stateengine.spark.metrics import METRICS_COL, _aggregate

    cases = [[52.5, 53.0, 53.0], [0.1, 0.2, 0.2], [158.4995], [1.0005, 2.0005], [7, 40638, 3]]
    for values in cases:
        rows = [(f'{{"load_ms": {v!r}}}',) for v in values]
        got = spark.createDataFrame(rows, f"{METRICS_COL} string") \
            .selectExpr(_aggregate("sum", "load_ms")).collect()[0][0]
        assert got == exact_rounded_sum(values), values


def test_observed_metrics_reads_every_progress_form():
    body = {"numRowsTotal": 3, "batchId": 1}
    name = "stateengine.op"
    assert observed_metrics({"batchId": 1, "observedMetrics": {name: body}}, "op") == body
    assert observed_metrics('{"observedMetrics": {"stateengine.op": {"numRowsTotal": 3, '
                            '"batchId": 1}}}', "op") == body

    class Row(dict):
        def asDict(self):
            return dict(self)

    class Progress:
        observedMetrics = {name: Row(body)}

    assert observed_metrics(Progress(), "op") == body
    connect_form = {"values": [3, 1], "schema": {"type": "struct", "fields": [
        {"name": "numRowsTotal", "type": "long"}, {"name": "batchId", "type": "long"}]}}
    assert observed_metrics({"observedMetrics": {name: connect_form}}, "op") == body
    assert observed_metrics({"observedMetrics": {}}, "op") is None
    assert observed_metrics(None, "op") is None


WIDE = ("user bigint, ts timestamp, ok boolean, xs array<bigint>, s struct<a: int, b: string>, "
        "m map<string, int>, d decimal(10, 2), day date, b binary")


def wide_row(user, rows, ctx):
    import datetime as dt
    from decimal import Decimal

    ctx.state("count").update(len(rows))
    return [(user, dt.datetime(2024, 1, 1, 12), True, [1, 2], (1, "x"), {"k": 1},
             Decimal("1.50"), dt.date(2024, 1, 2), b"ab")]


def test_the_metrics_row_passes_every_output_type_and_leaves_the_output_as_declared(
        spark, tmp_path):
    source = str(tmp_path / "in")
    os.makedirs(source)
    pd.DataFrame({"user": [1, 2, 3], "t_ms": [1, 2, 3]}).to_parquet(
        os.path.join(source, "a.parquet"), index=False)
    stream = spark.readStream.schema("user bigint, t_ms bigint").parquet(source)
    out = apply_with_state(stream, "user", wide_row, WIDE, [COUNT], str(tmp_path / "state"),
                           num_partitions=2, operator_id="wide")
    declared = spark.createDataFrame([], WIDE).schema
    # the same fields and types; only nullability may differ (the metrics row has no values)
    assert [(f.name, f.dataType) for f in out.schema] == \
        [(f.name, f.dataType) for f in declared]
    query = (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "query"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    rows = sorted(spark.read.parquet(str(tmp_path / "out")).collect())
    assert [r.user for r in rows] == [1, 2, 3]
    assert all(r.xs == [1, 2] and r.s.b == "x" and r.m == {"k": 1} and bytes(r.b) == b"ab"
               for r in rows)
    seen = observed_metrics(query.lastProgress, "wide")
    assert seen["numRowsUpdated"] == 3 and seen["numStateStoreInstances"] == 2
