"""applyInPandasWithState functions, unchanged, on stateengine: each function of
tests/group_state_functions.py runs through Spark's real applyInPandasWithState (a streaming
query over a file source, RocksDB state store provider) and through
``apply_in_pandas_with_state`` over the same batches (same batch ids, watermarks and batch
timestamps, read from Spark's offset log); the outputs must be equal batch by batch. Runs on
pyspark 3.5 too (GroupState is older than transformWithState)."""

from __future__ import annotations

import pandas as pd
import pytest

from stateengine.spark import apply_in_pandas_with_state
from tests import group_state_functions as G
from tests.tws_compare import assert_same, run_spark, run_stateengine

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000


def _frames(batches: list[list[tuple]], columns: list[str]) -> list[pd.DataFrame]:
    return [pd.DataFrame(rows, columns=columns) for rows in batches]


def test_processing_time_timeouts_as_in_spark(spark, tmp_path):
    """Timeouts fire after the keys with rows, in batches without data too; a call resets the
    timeout; a removed state that keeps a timeout times out without a value."""
    schema = "user string, tag string"
    frames = _frames([[("a", "x"), ("a", "y"), ("b", "x"), ("z", "q"), ("r", "1")],
                      [("a", "x"), ("c", "y"), ("r", "2"), ("r", "3")], [("c", "z")]],
                     ["user", "tag"])
    batches = run_spark(spark, str(tmp_path / "spark"), frames, schema,
                        lambda s: s.groupBy("user").applyInPandasWithState(
                            G.count_with_timeout, G.GROUP_OUT, G.GROUP_STATE_SCHEMA, "Update",
                            "ProcessingTimeTimeout"), until_extra=1)
    ours = run_stateengine(spark, batches, schema, lambda df: df,
                           lambda df, b: apply_in_pandas_with_state(
                               df, G.count_with_timeout, "user", G.GROUP_OUT,
                               G.GROUP_STATE_SCHEMA, "Update", "ProcessingTimeTimeout",
                               str(tmp_path / "state"), batch_id=b.batch_id,
                               processing_time=b.timestamp, num_partitions=2))
    assert_same(batches, ours)
    timed_out = {r[0] for b in batches for r in b.rows if r[2]}
    assert {"b", "r"} <= timed_out and "z" not in timed_out


def test_event_time_timeouts_and_late_rows_as_in_spark(spark, tmp_path):
    """EventTimeTimeout: rows at or before the previous batch's watermark are dropped,
    sessions time out once the watermark passes their timeout (in Spark's batches without
    data too)."""
    schema = "user string, t long"
    frames = _frames([[("a", T0), ("b", T0 + 500)],
                      [("a", T0 + 4000), ("c", T0 + 5000)],
                      [("c", T0 + 9000), ("a", T0 + 1000), ("d", T0 + 12_000),
                       ("late", T0 - 9000)]],
                     ["user", "t"])

    def prepare(df):
        return df.selectExpr("user", "timestamp_millis(t) AS ts").withWatermark("ts", "1 second")

    batches = run_spark(spark, str(tmp_path / "spark"), frames, schema,
                        lambda s: prepare(s).groupBy("user").applyInPandasWithState(
                            G.sessions_by_event_time, G.GROUP_OUT, "count long, latest long",
                            "Update", "EventTimeTimeout"))
    ours = run_stateengine(spark, batches, schema, prepare,
                           lambda df, b: apply_in_pandas_with_state(
                               df, G.sessions_by_event_time, "user", G.GROUP_OUT,
                               "count long, latest long", "Update", "EventTimeTimeout",
                               str(tmp_path / "state"), batch_id=b.batch_id,
                               watermark=b.watermark, processing_time=b.timestamp,
                               event_time_column="ts", num_partitions=2))
    assert_same(batches, ours)
    rows = [r for b in batches for r in b.rows]
    assert any(r[2] for r in rows) and not any(r[0] == "late" for r in rows)


def test_refusals(spark, tmp_path):
    df = spark.createDataFrame([("a", "x")], "user string, tag string")
    args = (G.count_with_timeout, "user", G.GROUP_OUT, G.GROUP_STATE_SCHEMA)
    with pytest.raises(ValueError, match="timeout_conf must be one of NoTimeout"):
        apply_in_pandas_with_state(df, *args, "Update", "Soon", str(tmp_path), batch_id=0)
    with pytest.raises(ValueError, match="output_mode must be Append or Update"):
        apply_in_pandas_with_state(df, *args, "Complete", "NoTimeout", str(tmp_path),
                                   batch_id=0)
    with pytest.raises(ValueError, match="EventTimeTimeout needs the batch's watermark"):
        apply_in_pandas_with_state(df, *args, "Update", "EventTimeTimeout", str(tmp_path),
                                   batch_id=0)


def test_migration_refuses_a_spark_without_state_data_source(spark, tmp_path):
    """Spark 3.5 has no state data source: migrate_spark_state says so before anything (on
    Spark 4 it migrates: tests/test_spark_migrate.py)."""
    from stateengine.spark import migrate_spark_state
    from stateengine.spark.spark_state import SparkStateError

    if int(spark.version.split(".")[0]) >= 4:
        pytest.skip("this Spark has a state data source; tests/test_spark_migrate.py migrates")
    with pytest.raises(SparkStateError, match="no state data source .*arrives in Spark 4.0"):
        migrate_spark_state(spark, str(tmp_path / "query"), str(tmp_path / "state"),
                            timeout_conf="ProcessingTimeTimeout")
    assert not (tmp_path / "state").exists()
