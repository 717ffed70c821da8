"""Spark users' StatefulProcessors, unchanged, on stateengine: each processor of
tests/tws_processors.py runs through Spark's real transformWithStateInPandas /
transformWithState (a streaming query over a file source, RocksDB state store provider) and
through stateengine.spark over the same batches (same batch ids, watermarks and batch
timestamps, read from Spark's offset log); the outputs must be equal batch by batch."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from stateengine.spark import bootstrap_state, state_descriptors, transform_with_state, \
    transform_with_state_in_pandas

pytestmark = pytest.mark.spark

# transformWithState and StatefulProcessor exist from pyspark 4.0 on (before it, see
# test_spark_processor_refused.py)
pytest.importorskip("pyspark.sql.streaming.stateful_processor",
                    reason="Spark's transformWithState needs pyspark >= 4.0")

from tests import tws_processors as P  # noqa: E402
from tests.tws_compare import assert_same, run_spark, run_stateengine, sort_rows  # noqa: E402

T0 = 1_700_000_000_000


def _frames(batches: list[list[tuple]], columns: list[str]) -> list[pd.DataFrame]:
    return [pd.DataFrame(rows, columns=columns) for rows in batches]


STATES_SCHEMA = "user string, region int, amount double, tag string"


def _initial_states(session):
    return session.createDataFrame([("u1", 1, 10), ("u1", 1, 11), ("u9", 9, 12)],
                                   "user string, region int, seed long")


@pytest.fixture(scope="module")
def every_state_method_in_spark(spark, tmp_path_factory):
    """Spark's run of EveryStateMethod (shared by the classic and the Connect replay)."""
    frames = _frames([
        [("u1", 1, 1.0, "a"), ("u1", 1, 2.0, "b"), ("u1", 2, 3.0, "a"), ("u2", 1, 4.0, "drop")],
        [("u1", 1, 5.0, "drop"), ("u2", 1, 6.0, "a"), ("u3", 7, 1.5, "c")],
        [("u1", 1, 1.0, "reset"), ("u1", 1, 1.0, "a"), ("u1", 2, 2.0, "b"),
         ("u2", 1, 0.5, "b"), ("u1", 1, 3.0, "c")],
    ], ["user", "region", "amount", "tag"])
    initial = _initial_states(spark).groupBy("user", "region")
    batches = run_spark(spark, str(tmp_path_factory.mktemp("spark")), frames, STATES_SCHEMA,
                        lambda s: s.groupBy("user", "region").transformWithStateInPandas(
                            P.EveryStateMethod(), P.SUMMARY_SCHEMA, "Update", "None",
                            initialState=initial))
    assert [len(b.files) for b in batches] == [1, 1, 1]
    return batches


def _replay_every_state_method(session, batches, state_dir):
    initial = _initial_states(session)
    return run_stateengine(session, batches, STATES_SCHEMA, lambda df: df,
                           lambda df, b: transform_with_state_in_pandas(
                               df, P.EveryStateMethod(), ["user", "region"], P.SUMMARY_SCHEMA,
                               state_dir, batch_id=b.batch_id, initial_state=initial,
                               num_partitions=3))


def test_every_state_method_with_two_column_keys_and_initial_state(
        spark, every_state_method_in_spark, tmp_path):
    batches = every_state_method_in_spark
    assert_same(batches, _replay_every_state_method(spark, batches, str(tmp_path / "state")))


def test_every_state_method_on_spark_connect(connect, every_state_method_in_spark, tmp_path):
    """The same processor through a Spark Connect session (no SparkContext, RDD or JVM on the
    driver path)."""
    batches = every_state_method_in_spark
    assert_same(batches, _replay_every_state_method(connect, batches, str(tmp_path / "state")))


def test_moving_a_spark_query_state_with_bootstrap_state(spark, every_state_method_in_spark,
                                                          tmp_path):
    """Spark's state after batch 1, read with its state data source and written with
    bootstrap_state into the descriptors the processor's states get; stateengine then runs
    batch 2 and must output what Spark did."""
    batches = every_state_method_in_spark
    spark_checkpoint = os.path.join(os.path.dirname(os.path.dirname(batches[0].files[0])),
                                    "spark-checkpoint")
    state = str(tmp_path / "state")
    columns = {"value": ("value", None), "list": ("list_element", None),
               "map": ("user_map_value", "user_map_key")}
    version = 0
    for name, desc in state_descriptors(P.EveryStateMethod(), spark).items():
        src = (spark.read.format("statestore").option("path", spark_checkpoint)
               .option("stateVarName", name).option("batchId", 1).load())
        value, user_key = columns[desc.kind.value]
        src = src.select("key.*", value, *([user_key] if user_key else []))
        version = bootstrap_state(src, ["user", "region"], desc, value, state,
                                  user_key=user_key, version=version, num_partitions=2)
    assert version == 4
    out = transform_with_state_in_pandas(
        spark.read.schema(STATES_SCHEMA).parquet(*batches[2].files), P.EveryStateMethod(),
        ["user", "region"], P.SUMMARY_SCHEMA, state, batch_id=version, num_partitions=3)
    assert sort_rows(out.collect()) == batches[2].rows


def test_every_state_method_inside_the_streaming_query(spark, every_state_method_in_spark,
                                                        tmp_path):
    """The stateful step inside the query: a streaming DataFrame in, a streaming DataFrame
    out, each micro-batch taking Spark's batch id; the initial state is staged before the
    query starts and read by the tasks of its first batch."""
    batches = every_state_method_in_spark
    source = os.path.dirname(batches[0].files[0])
    stream = spark.readStream.schema(STATES_SCHEMA).option("maxFilesPerTrigger", 1) \
        .parquet(source)
    out = transform_with_state_in_pandas(stream, P.EveryStateMethod(), ["user", "region"],
                                         P.SUMMARY_SCHEMA, str(tmp_path / "state"),
                                         initial_state=_initial_states(spark), num_partitions=3)
    assert out.isStreaming
    got: dict[int, list[tuple]] = {}
    query = (out.writeStream.foreachBatch(lambda df, b: got.__setitem__(b, sort_rows(df.collect())))
             .option("checkpointLocation", str(tmp_path / "query"))
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert query.exception() is None
    assert_same(batches, got)


def test_event_time_timers_watermarks_late_rows_and_empty_batches(spark, tmp_path):
    schema = "key string, t long"
    frames = _frames([
        [("a", T0), ("x", T0), ("r", T0)],
        [("a", T0 + 3000), ("x", T0 + 1000), ("late", T0 - 20_000)],
        [("b", T0 + 20_000), ("a", T0 - 10_000), ("x", T0 + 19_000)],
    ], ["key", "t"])
    out = "key string, kind string, at long, watermark long, info string"

    def prepare(df):
        return df.selectExpr("key", "timestamp_millis(t) AS ts").withWatermark("ts", "5 seconds")

    batches = run_spark(spark, str(tmp_path / "spark"), frames, schema,
                        lambda s: prepare(s).groupBy("key").transformWithStateInPandas(
                            P.EventTimeSessions(), out, "Update", "EventTime"))
    assert len(batches) > len(frames) and not batches[-1].files  # Spark ran empty batches
    ours = run_stateengine(spark, batches, schema, prepare,
                           lambda df, b: transform_with_state_in_pandas(
                               df, P.EventTimeSessions(), "key", out, str(tmp_path / "state"),
                               time_mode="EventTime", batch_id=b.batch_id,
                               watermark=b.watermark, processing_time=b.timestamp,
                               event_time_column="ts", num_partitions=2))
    assert_same(batches, ours)
    assert any("timer" in r[1] for b in batches for r in b.rows)


def test_processing_time_timers_and_ttl(spark, tmp_path):
    """Timers fire after the input of their batch (also those registered in the past during
    it), by a snapshot taken when the input is done; TTL against the batch timestamp on value,
    list and map state; Spark's empty batches fire due timers."""
    schema = "key string, n long"
    frames = _frames([[("a", 1), ("b", 1), ("c", 1), ("d", 1)], [("a", 2), ("c", 2), ("d", 2)],
                      [("b", 3)], [("a", 4), ("d", 4)]], ["key", "n"])
    out = "key string, kind string, at long, rows long, state string"
    batches = run_spark(spark, str(tmp_path / "spark"), frames, schema,
                        lambda s: s.groupBy("key").transformWithStateInPandas(
                            P.TimersAndTtl(), out, "Update", "ProcessingTime"), until_extra=2)
    assert not batches[-1].files  # Spark ran batches without data
    ours = run_stateengine(spark, batches, schema, lambda df: df,
                           lambda df, b: transform_with_state_in_pandas(
                               df, P.TimersAndTtl(), "key", out, str(tmp_path / "state"),
                               time_mode="ProcessingTime", batch_id=b.batch_id,
                               processing_time=b.timestamp, num_partitions=2))
    assert_same(batches, ours)
    fired = {r[0] for b in batches for r in b.rows if r[1] == "timer"}
    assert {"a", "b", "d"} <= fired and "c" not in fired


ROWS_SCHEMA = "user string, amount double"
ROWS_OUT = "user string, total double, seen string"


@pytest.fixture(scope="module")
def rows_in_spark(spark, tmp_path_factory):
    frames = _frames([[("u1", 1.0), ("u2", 2.0), ("u1", 3.0)], [("u1", 4.0), ("u3", 5.0)]],
                     ["user", "amount"])
    initial = spark.createDataFrame([("u1", 100.0), ("u1", 10.0), ("u4", 1.0)],
                                    "user string, init double")
    return run_spark(spark, str(tmp_path_factory.mktemp("spark")), frames, ROWS_SCHEMA,
                     lambda s: s.groupBy("user").transformWithState(
                         P.RowsWithInitialState(), ROWS_OUT, "Update", "ProcessingTime",
                         initialState=initial.groupBy("user")), until_extra=1)


def _replay_rows(session, batches, state_dir):
    initial = session.createDataFrame([("u1", 100.0), ("u1", 10.0), ("u4", 1.0)],
                                      "user string, init double")
    return run_stateengine(session, batches, ROWS_SCHEMA, lambda df: df,
                           lambda df, b: transform_with_state(
                               df, P.RowsWithInitialState(), "user", ROWS_OUT, state_dir,
                               time_mode="ProcessingTime", batch_id=b.batch_id,
                               processing_time=b.timestamp, initial_state=initial,
                               num_partitions=2))


def test_row_flavour_with_initial_state_and_processing_time_timer(spark, rows_in_spark,
                                                                    tmp_path):
    assert_same(rows_in_spark, _replay_rows(spark, rows_in_spark, str(tmp_path / "state")))


def test_row_flavour_on_spark_connect(connect, rows_in_spark, tmp_path):
    assert_same(rows_in_spark, _replay_rows(connect, rows_in_spark, str(tmp_path / "state")))


@pytest.mark.parametrize("flavour", ["row", "pandas"])
def test_processors_in_a_query_report_state_metrics_in_its_progress(spark, tmp_path, flavour):
    """Both flavours add their tasks' metrics rows, observed as ``stateengine.<operator>``
    and dropped: the output is the processor's, the progress holds what the commits sealed."""
    from stateengine.spark import observed_metrics, state_metrics

    source = tmp_path / "in"
    source.mkdir()
    data = [pd.DataFrame({"user": ["a", "b", "a"], "amount": [1.0, 2.0, 3.0]}),
            pd.DataFrame({"user": ["b", "c"], "amount": [4.0, 5.0]})]
    for i, pdf in enumerate(data):
        pdf.to_parquet(source / f"part-{i}.parquet", index=False)
    stream = spark.readStream.schema("user string, amount double") \
        .option("maxFilesPerTrigger", 1).parquet(str(source))
    state = str(tmp_path / "state")
    if flavour == "row":
        out = transform_with_state(stream, P.RowCounts(), ["user"],
                                   "user string, count long, at timestamp",
                                   state, num_partitions=2, operator_id="tws")
    else:
        out = transform_with_state_in_pandas(stream, P.RunningTotals(), ["user"],
                                             "user string, count long, total double", state,
                                             num_partitions=2, operator_id="tws")
    query = (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "query"))
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.user, r["count"]) for r in rows) == [("a", 2), ("b", 1), ("b", 2),
                                                           ("c", 1)]
    if flavour == "row":
        assert all(r.at.second == r["count"] for r in rows)
    progress = [p for p in query.recentProgress if observed_metrics(p, "tws") is not None]
    assert [observed_metrics(p, "tws")["numRowsUpdated"] for p in progress] == [2, 2]
    for p in progress:
        seen = observed_metrics(p, "tws")
        assert seen.pop("batchId") == p.batchId
        assert seen == state_metrics(state, p.batchId, "tws").spark
