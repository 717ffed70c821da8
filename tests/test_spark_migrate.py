"""Moving a running query from Spark's stateful operators to stateengine's: the query runs on
Spark's real transformWithStateInPandas / transformWithState / applyInPandasWithState (RocksDB
state store provider) for some batches and stops; ``migrate_spark_state`` moves its state;
the same query (same checkpointLocation, batch ids going on) continues on stateengine's
operator, and its output equals that of a copy of the query left on Spark, batch by batch
(tests/migrate_compare.py)."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from stateengine.spark import migrate_spark_state

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark.sql.streaming.stateful_processor",
                    reason="Spark's transformWithState needs pyspark >= 4.0")

from stateengine.spark import apply_in_pandas_with_state, read_state, transform_with_state, \
    transform_with_state_in_pandas  # noqa: E402
from tests import group_state_functions as G  # noqa: E402
from tests import migrate_processors as M  # noqa: E402
from tests import tws_processors as P  # noqa: E402
from tests.migrate_compare import SplitRun  # noqa: E402

T0 = 1_700_000_000_000
FAST = {"processingTime": "200 milliseconds"}


def _frames(batches: list[list[tuple]], columns: list[str]) -> list[pd.DataFrame]:
    return [pd.DataFrame(rows, columns=columns) for rows in batches]


def assert_continues_alike(on_spark: dict, on_stateengine: dict, first_file_batch: int) -> None:
    """stateengine ran every batch it committed as Spark did (Spark may run batches without
    data after the last file, which a query without Spark stateful operators does not)."""
    assert on_stateengine, "the continued query committed no batch"
    assert min(on_stateengine) <= first_file_batch
    for b, rows in sorted(on_stateengine.items()):
        assert b in on_spark, f"stateengine ran batch {b}, Spark did not ({sorted(on_spark)})"
        assert rows == on_spark[b], (f"batch {b} differs:\n  Spark:       {on_spark[b]}\n"
                                     f"  stateengine: {rows}")


EVERY_KIND_SCHEMA = "user string, region int, tag string, amount double"


def _every_kind_run(spark, base) -> SplitRun:
    frames = _frames([
        [("at", 1, "a", 1.0), ("at", 1, "b", 2.0), ("bo", 2, "a", 3.0), ("ct", 1, "c", 4.0),
         ("at", 2, "q", 1.0)],
        [("at", 1, "a", 1.5), ("bo", 2, "b", 0.5), ("dd", 3, "x", 9.0), ("ct", 1, "a", 1.0)],
        [("at", 1, "a", 1.0), ("bo", 2, "c", 1.0), ("ee", 4, "z", 1.0), ("at", 1, "c", 2.5)],
        [("ct", 1, "b", 2.0), ("dd", 3, "y", 1.0), ("at", 1, "b", 5.0)],
    ], ["user", "region", "tag", "amount"])
    return SplitRun(spark, base, EVERY_KIND_SCHEMA, frames, split=2, trigger=FAST)


def test_every_kind_of_state_ttl_and_timers_move_to_stateengine(spark, tmp_path):
    run = _every_kind_run(spark, str(tmp_path))

    def on_spark(stream, _):
        return stream.groupBy("user", "region").transformWithStateInPandas(
            M.EveryKind(), M.SESSIONS_OUT, "Update", "ProcessingTime")

    state = str(tmp_path / "state")
    spark_ttl = {}

    def migrate(copy):
        spark_ttl.update(_spark_ttl(spark, copy))  # before: the migration retires the operator
        return migrate_spark_state(spark, copy, state, M.EveryKind(), num_partitions=3)

    def on_stateengine(stream, copy):
        return transform_with_state_in_pandas(
            stream, M.EveryKind(), ["user", "region"], M.SESSIONS_OUT, state,
            time_mode="ProcessingTime", query_checkpoint=copy, num_partitions=3,
            no_data_batches="none")  # Spark refuses a source more in a checkpoint that ran

    spark_out, ours, result = run.both_ways(on_spark, migrate, on_stateengine)
    assert any(r[2] == "timer" for rows in run.first.values() for r in rows)
    assert result.version == result.spark_batch_id + 1 == min(ours)
    assert result.states["events"] == 9 and result.timers >= 3 and result.retired
    assert_continues_alike(spark_out, ours, result.version)
    fired = [json.loads(r[3]) for rows in ours.values() for r in rows if r[2] == "timer"]
    assert fired and all(f["after_armed"] == 1 for f in fired)

    # the checkpoint alone says what it holds and where it came from
    from stateengine.catalog import checkpoint_catalog

    (op,) = checkpoint_catalog(state)
    assert op.key_names == ["user", "region"] and op.key_types == ["string", "int"]
    assert op.first_version == result.spark_batch_id and op.versions[0] == result.version
    assert op.state("events").value_type == "struct<tag:string,amount:double>"
    assert op.state("kept").ttl_ms == M.HOUR and op.state("$timers").internal
    origin = (op.migrated_from if op.version == result.version else
              checkpoint_catalog(state, version=result.version)[0].migrated_from)
    assert origin["batch_id"] == result.spark_batch_id
    assert origin["operator"] == "transformWithStateInPandasExec"

    # every TTL entry expires when Spark's would: last access + ttl == Spark's expiry
    for name, ttl in (("recent", 1), ("kept", M.HOUR), ("seen", M.HOUR), ("gone", 1)):
        got = read_state(spark, state, name, version=result.version, flatten=True)
        expiries = sorted(r["last_access_ms"] + ttl for r in got.collect())
        assert expiries == spark_ttl[name], name


def _spark_ttl(spark, checkpoint) -> dict[str, list[int]]:
    """Spark's expiry times of every TTL entry of EveryKind (its last committed batch)."""
    out = {}
    for name, column in (("recent", "value"), ("kept", "list_element"),
                         ("seen", "user_map_value"), ("gone", "user_map_value")):
        df = (spark.read.format("statestore").option("path", checkpoint)
              .option("stateVarName", name).load())
        out[name] = sorted(r[0] for r in df.selectExpr(f"{column}.ttlExpirationMs").collect())
    return out


def test_event_time_timers_and_late_rows_after_moving(spark, tmp_path):
    """Event-time timers keep their times; the first batch on stateengine drops rows at or
    before the watermark of Spark's last batch, as Spark's operator would."""
    schema = "key string, t long"
    frames = _frames([
        [("a", T0), ("x", T0), ("r", T0)],
        [("a", T0 + 3000), ("x", T0 + 1000), ("late", T0 - 20_000)],
        [("b", T0 + 20_000), ("a", T0 - 10_000), ("x", T0 + 19_000), ("old", T0 - 6000)],
        [("a", T0 + 30_000), ("late2", T0 - 5500), ("r", T0 + 26_000)],
    ], ["key", "t"])
    run = SplitRun(spark, str(tmp_path), schema, frames, split=2)
    out = "key string, kind string, at long, watermark long, info string"

    def prepare(stream):
        return stream.selectExpr("key", "timestamp_millis(t) AS ts") \
            .withWatermark("ts", "5 seconds")

    def on_spark(stream, _):
        return prepare(stream).groupBy("key").transformWithStateInPandas(
            P.EventTimeSessions(), out, "Update", "EventTime")

    state = str(tmp_path / "state")

    def migrate(copy):
        return migrate_spark_state(spark, copy, state, P.EventTimeSessions(), num_partitions=2)

    def on_stateengine(stream, copy):
        return transform_with_state_in_pandas(
            prepare(stream), P.EventTimeSessions(), "key", out, state, time_mode="EventTime",
            query_checkpoint=copy, num_partitions=2, no_data_batches="none")

    spark_out, ours, result = run.both_ways(on_spark, migrate, on_stateengine)
    assert_continues_alike(spark_out, ours, result.version)
    rows = [r for b in ours.values() for r in b]
    assert any(r[1] == "timer" for r in rows)
    assert not any(r[0] in ("old", "late2") for r in rows)  # dropped as late, as in Spark


ROWS_SCHEMA = "user string, amount double"
ROWS_OUT = "user string, total double, seen string"


def test_row_flavour_moved_through_a_spark_connect_session(spark, connect, tmp_path):
    """transformWithState (Row flavour) with an initial state and processing-time timers;
    the migration runs on a Spark Connect session (the query itself on the classic one)."""
    frames = _frames([[("u1", 1.0), ("u2", 2.0), ("u1", 3.0)], [("u1", 4.0), ("u3", 5.0)],
                      [("u2", 1.0), ("u3", 1.0)], [("u1", 2.0), ("u4", 7.0)]],
                     ["user", "amount"])
    run = SplitRun(spark, str(tmp_path), ROWS_SCHEMA, frames, split=2, trigger=FAST)
    initial = spark.createDataFrame([("u1", 100.0), ("u1", 10.0), ("u4", 1.0)],
                                    "user string, init double")

    def on_spark(stream, _):
        return stream.groupBy("user").transformWithState(
            P.RowsWithInitialState(), ROWS_OUT, "Update", "ProcessingTime",
            initialState=initial.groupBy("user"))

    state = str(tmp_path / "state")

    def migrate(copy):
        return migrate_spark_state(connect, copy, state, P.RowsWithInitialState(),
                                   num_partitions=2)

    def on_stateengine(stream, copy):
        return transform_with_state(stream, P.RowsWithInitialState(), "user", ROWS_OUT, state,
                                    time_mode="ProcessingTime", query_checkpoint=copy,
                                    num_partitions=2, no_data_batches="none")

    spark_out, ours, result = run.both_ways(on_spark, migrate, on_stateengine)
    assert result.states == {"total": 4, "seen": 8} and result.retired
    assert_continues_alike(spark_out, ours, result.version)
    assert any(r[2] == "timer" for b in ours.values() for r in b)


GROUP_SCHEMA = "user string, tag string"


def test_apply_in_pandas_with_state_and_its_timeouts_move_to_stateengine(spark, tmp_path):
    """applyInPandasWithState (GroupState, ProcessingTimeTimeout) continued by
    apply_in_pandas_with_state with the same function: states, removed states that keep a
    timeout, and timeouts that fire or lie far ahead."""
    frames = _frames([[("a", "x"), ("a", "y"), ("b", "x"), ("z", "q"), ("r", "1")],
                      [("a", "x"), ("c", "y"), ("r", "2"), ("r", "3")],
                      [("a", "z"), ("d", "x")], [("c", "x"), ("a", "q"), ("z", "w")]],
                     ["user", "tag"])
    run = SplitRun(spark, str(tmp_path), GROUP_SCHEMA, frames, split=2, trigger=FAST)

    def on_spark(stream, _):
        return stream.groupBy("user").applyInPandasWithState(
            G.count_with_timeout, G.GROUP_OUT, G.GROUP_STATE_SCHEMA, "Update",
            "ProcessingTimeTimeout")

    state = str(tmp_path / "state")

    def migrate(copy):
        return migrate_spark_state(spark, copy, state, timeout_conf="ProcessingTimeTimeout")

    def on_stateengine(stream, copy):
        return apply_in_pandas_with_state(
            stream, G.count_with_timeout, "user", G.GROUP_OUT, G.GROUP_STATE_SCHEMA, "Update",
            "ProcessingTimeTimeout", state, query_checkpoint=copy, num_partitions=2,
            no_data_batches="none")

    spark_out, ours, result = run.both_ways(on_spark, migrate, on_stateengine)
    assert result.spark_operator == "applyInPandasWithState" and result.timers >= 2
    assert_continues_alike(spark_out, ours, result.version)
    rows = [r for b in ours.values() for r in b]
    assert any(r[2] for r in rows) and any(not r[2] for r in rows)  # timeouts and data


# ---- refusals ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ttl_query(spark, tmp_path_factory):
    """A stopped query whose transformWithStateInPandas operator (TimersAndTtl: TTL states,
    processing-time timers) committed two batches."""
    from tests.tws_compare import run_spark

    base = tmp_path_factory.mktemp("ttl-query")
    frames = _frames([[("a", 1), ("b", 1)], [("a", 2), ("c", 2)]], ["key", "n"])
    out = "key string, kind string, at long, rows long, state string"
    run_spark(spark, str(base), frames, "key string, n long",
              lambda s: s.groupBy("key").transformWithStateInPandas(
                  P.TimersAndTtl(), out, "Update", "ProcessingTime"), until_extra=0)
    return str(base / "spark-checkpoint")


@pytest.fixture
def query_copy(ttl_query, tmp_path):
    import shutil

    copy = str(tmp_path / "query")
    shutil.copytree(ttl_query, copy)
    return copy


def test_refuses_ttl_without_the_processor_and_a_processor_that_does_not_fit(
        spark, query_copy, tmp_path):
    from stateengine.spark.spark_state import SparkStateError

    state = str(tmp_path / "state")
    with pytest.raises(ValueError, match="state '(short|long|mid|events|seen)' has a TTL, "
                                         "whose duration Spark's checkpoint does not hold"):
        migrate_spark_state(spark, query_copy, state)
    with pytest.raises(SparkStateError, match="which the processor's init\\(\\) does not "
                                              "declare \\(it declares acc\\)"):
        migrate_spark_state(spark, query_copy, state, P.RunningTotals())
    with pytest.raises(SparkStateError, match="the processor declares state 'short' as a list "
                                              "state, not a value state"):
        migrate_spark_state(spark, query_copy, state, M.ShortAsList())
    with pytest.raises(ValueError, match="timeout_conf= is for applyInPandasWithState"):
        migrate_spark_state(spark, query_copy, state, P.TimersAndTtl(),
                            timeout_conf="ProcessingTimeTimeout")
    # nothing was written, and Spark's query is untouched
    assert not os.path.exists(state)
    assert os.path.isdir(os.path.join(query_copy, "state", "0", "_metadata"))


def test_a_rerun_finishes_an_interrupted_migration_and_nothing_is_migrated_twice(
        spark, query_copy, tmp_path):
    from stateengine.spark.spark_state import SparkStateError

    state = str(tmp_path / "state")
    first = migrate_spark_state(spark, query_copy, state, P.TimersAndTtl(), num_partitions=2,
                                retire_spark_operator=False)
    assert not first.retired and first.version == first.spark_batch_id + 1
    assert first.states["count"] == 3
    # the same migration again (as after a failure before Spark's metadata moved): it finds
    # its own version and only moves the metadata
    again = migrate_spark_state(spark, query_copy, state, P.TimersAndTtl())
    assert again.retired and again.version == first.version and not again.states
    assert [n for n in os.listdir(os.path.join(state, "default")) if n.startswith("v")] == \
        [f"v{first.version}"]
    with pytest.raises(SparkStateError, match="was already moved to stateengine"):
        migrate_spark_state(spark, query_copy, state, P.TimersAndTtl())


def test_refuses_to_write_into_an_operator_that_holds_state(spark, query_copy, tmp_path):
    from stateengine import ValueStateDescriptor
    from stateengine.spark import bootstrap_state
    from stateengine.spark.spark_state import SparkStateError

    state = str(tmp_path / "state")
    bootstrap_state(spark.createDataFrame([("a", 1)], "key string, v long"), "key",
                    ValueStateDescriptor("v", value_type=int), "v", state, num_partitions=1)
    with pytest.raises(SparkStateError, match="already holds state \\(versions \\[1\\]\\)"):
        migrate_spark_state(spark, query_copy, state, P.TimersAndTtl())
    assert os.path.isdir(os.path.join(query_copy, "state", "0", "_metadata"))


def test_refuses_queries_it_cannot_continue(spark, tmp_path):
    """A query with another stateful operator (Spark would renumber it), an operator other
    than transformWithState and applyInPandasWithState, a query without a committed batch,
    and a directory that is no query checkpoint."""
    from stateengine.errors import CheckpointNotFoundError
    from stateengine.spark.spark_state import SparkStateError
    from tests.tws_compare import run_spark

    frames = _frames([[("a", 1.0), ("b", 2.0)]], ["user", "amount"])
    run_spark(spark, str(tmp_path / "q"), frames, "user string, amount double",
              lambda s: s.dropDuplicates(["user", "amount"]).groupBy("user")
              .transformWithStateInPandas(P.RunningTotals(), "user string, count long, "
                                          "total double", "Update", "None"))
    query = str(tmp_path / "q" / "spark-checkpoint")
    state = str(tmp_path / "state")
    with pytest.raises(SparkStateError, match="has other stateful operators besides 0: 1 "
                                              "\\(dedupe"):
        migrate_spark_state(spark, query, state, P.RunningTotals())
    with pytest.raises(SparkStateError, match="operator 1 of the query at .* is Spark's dedupe"):
        migrate_spark_state(spark, query, state, spark_operator_id=1)
    with pytest.raises(SparkStateError, match="no stateful operator 5"):
        migrate_spark_state(spark, query, state, spark_operator_id=5)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metadata").write_text('{"id":"00000000-0000-0000-0000-000000000000"}')
    with pytest.raises(SparkStateError, match="has committed no batch yet"):
        migrate_spark_state(spark, str(empty), state)
    with pytest.raises(CheckpointNotFoundError, match="pass the checkpointLocation"):
        migrate_spark_state(spark, str(tmp_path / "nothing"), state)
    assert not os.path.exists(state)
