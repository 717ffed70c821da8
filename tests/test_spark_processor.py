"""Spark users' StatefulProcessors, unchanged, on stateengine: each processor of
tests/tws_processors.py runs through Spark's real transformWithStateInPandas /
transformWithState (a streaming query over a file source, RocksDB state store provider), then
over the same batches (same batch ids, watermarks and batch timestamps, read from Spark's offset
log) through stateengine.spark on a SparkSession and through stateengine.testing's harness
without Spark (``engine``); the outputs must be equal batch by batch. Each case is one
``Scenario`` (tests/tws_compare.py) that both replays run."""

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
from tests.tws_compare import Scenario, assert_same, replay_harness, replay_spark, \
    run_spark, sort_rows  # noqa: E402

T0 = 1_700_000_000_000


ENGINES = ["spark", "harness"]


def _frames(batches: list[list[tuple]], columns: list[str]) -> list[pd.DataFrame]:
    return [pd.DataFrame(rows, columns=columns) for rows in batches]


def replay(engine, session, batches, schema, scenario, tmp_path):
    """Spark's batches through stateengine.spark (on ``session``) or the local harness."""
    if engine == "harness":
        return replay_harness(batches, scenario, str(tmp_path / "harness"))
    return replay_spark(session, batches, schema, scenario, str(tmp_path / "state"))


STATES_SCHEMA = "user string, region int, amount double, tag string"
INITIAL_ROWS, INITIAL_SCHEMA = [("u1", 1, 10), ("u1", 1, 11), ("u9", 9, 12)], \
    "user string, region int, seed long"
EVERY_STATE_METHOD = Scenario(P.EveryStateMethod, ["user", "region"], P.SUMMARY_SCHEMA,
                              STATES_SCHEMA, initial_rows=INITIAL_ROWS,
                              initial_schema=INITIAL_SCHEMA, num_partitions=3)


def _initial_states(session):
    return session.createDataFrame(INITIAL_ROWS, INITIAL_SCHEMA)


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


@pytest.mark.parametrize("engine", ENGINES)
def test_every_state_method_with_two_column_keys_and_initial_state(
        spark, every_state_method_in_spark, tmp_path, engine):
    batches = every_state_method_in_spark
    assert_same(batches, replay(engine, spark, batches, STATES_SCHEMA, EVERY_STATE_METHOD,
                                tmp_path))


def test_every_state_method_on_spark_connect(connect, every_state_method_in_spark, tmp_path):
    """The same processor through a Spark Connect session (no SparkContext, RDD or JVM on the
    driver path)."""
    batches = every_state_method_in_spark
    assert_same(batches, replay("spark", connect, batches, STATES_SCHEMA, EVERY_STATE_METHOD,
                                tmp_path))


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


EVENT_SCHEMA = "key string, t long"
EVENT_OUT = "key string, kind string, at long, watermark long, info string"
EVENT_TIME_SESSIONS = Scenario(
    P.EventTimeSessions, ["key"], EVENT_OUT, "key string, ts timestamp", time_mode="EventTime",
    event_time_column="ts",
    prepare=lambda df: df.selectExpr("key", "timestamp_millis(t) AS ts")
    .withWatermark("ts", "5 seconds"),
    prepare_pandas=lambda pdf: pd.DataFrame({"key": pdf["key"],
                                             "ts": pd.to_datetime(pdf["t"], unit="ms")}))


@pytest.fixture(scope="module")
def event_time_in_spark(spark, tmp_path_factory):
    frames = _frames([
        [("a", T0), ("x", T0), ("r", T0)],
        [("a", T0 + 3000), ("x", T0 + 1000), ("late", T0 - 20_000)],
        [("b", T0 + 20_000), ("a", T0 - 10_000), ("x", T0 + 19_000)],
    ], ["key", "t"])
    sc = EVENT_TIME_SESSIONS
    batches = run_spark(spark, str(tmp_path_factory.mktemp("spark")), frames, EVENT_SCHEMA,
                        lambda s: sc.prepare(s).groupBy("key").transformWithStateInPandas(
                            sc.processor(), sc.output, "Update", "EventTime"))
    assert len(batches) > len(frames) and not batches[-1].files  # Spark ran empty batches
    assert any("timer" in r[1] for b in batches for r in b.rows)
    return batches


@pytest.mark.parametrize("engine", ENGINES)
def test_event_time_timers_watermarks_late_rows_and_empty_batches(spark, event_time_in_spark,
                                                                   tmp_path, engine):
    assert_same(event_time_in_spark, replay(engine, spark, event_time_in_spark, EVENT_SCHEMA,
                                            EVENT_TIME_SESSIONS, tmp_path))


TIMERS_SCHEMA = "key string, n long"
TIMERS_AND_TTL = Scenario(P.TimersAndTtl, ["key"],
                          "key string, kind string, at long, rows long, state string",
                          TIMERS_SCHEMA, time_mode="ProcessingTime")


@pytest.fixture(scope="module")
def timers_and_ttl_in_spark(spark, tmp_path_factory):
    frames = _frames([[("a", 1), ("b", 1), ("c", 1), ("d", 1)], [("a", 2), ("c", 2), ("d", 2)],
                      [("b", 3)], [("a", 4), ("d", 4)]], ["key", "n"])
    sc = TIMERS_AND_TTL
    batches = run_spark(spark, str(tmp_path_factory.mktemp("spark")), frames, TIMERS_SCHEMA,
                        lambda s: s.groupBy("key").transformWithStateInPandas(
                            sc.processor(), sc.output, "Update", "ProcessingTime"),
                        until_extra=2)
    assert not batches[-1].files  # Spark ran batches without data
    fired = {r[0] for b in batches for r in b.rows if r[1] == "timer"}
    assert {"a", "b", "d"} <= fired and "c" not in fired
    return batches


@pytest.mark.parametrize("engine", ENGINES)
def test_processing_time_timers_and_ttl(spark, timers_and_ttl_in_spark, tmp_path, engine):
    """Timers fire after the input of their batch (also those registered in the past during
    it), by a snapshot taken when the input is done; TTL against the batch timestamp on value,
    list and map state; Spark's empty batches fire due timers."""
    assert_same(timers_and_ttl_in_spark, replay(engine, spark, timers_and_ttl_in_spark,
                                                TIMERS_SCHEMA, TIMERS_AND_TTL, tmp_path))


ROWS_SCHEMA = "user string, amount double"
ROWS_WITH_INITIAL_STATE = Scenario(
    P.RowsWithInitialState, ["user"], "user string, total double, seen string", ROWS_SCHEMA,
    time_mode="ProcessingTime", flavour="row",
    initial_rows=[("u1", 100.0), ("u1", 10.0), ("u4", 1.0)],
    initial_schema="user string, init double")


@pytest.fixture(scope="module")
def rows_in_spark(spark, tmp_path_factory):
    frames = _frames([[("u1", 1.0), ("u2", 2.0), ("u1", 3.0)], [("u1", 4.0), ("u3", 5.0)]],
                     ["user", "amount"])
    sc = ROWS_WITH_INITIAL_STATE
    initial = spark.createDataFrame(sc.initial_rows, sc.initial_schema)
    return run_spark(spark, str(tmp_path_factory.mktemp("spark")), frames, ROWS_SCHEMA,
                     lambda s: s.groupBy("user").transformWithState(
                         sc.processor(), sc.output, "Update", "ProcessingTime",
                         initialState=initial.groupBy("user")), until_extra=1)


@pytest.mark.parametrize("engine", ENGINES)
def test_row_flavour_with_initial_state_and_processing_time_timer(spark, rows_in_spark,
                                                                    tmp_path, engine):
    assert_same(rows_in_spark, replay(engine, spark, rows_in_spark, ROWS_SCHEMA,
                                      ROWS_WITH_INITIAL_STATE, tmp_path))


def test_row_flavour_on_spark_connect(connect, rows_in_spark, tmp_path):
    assert_same(rows_in_spark, replay("spark", connect, rows_in_spark, ROWS_SCHEMA,
                                      ROWS_WITH_INITIAL_STATE, tmp_path))


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
