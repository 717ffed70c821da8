"""The last differences with Spark's own operator, each compared with Spark 4.3 run here:

* misuse of the handle (state without a key, timers in time mode None or outside a key, TTL
  outside ProcessingTime, empty lists, reserved names, declaring or deleting states outside
  init()) meets the error class Spark raises, named at the start of stateengine's message;
* a state handle used after ``deleteIfExists`` raises as Spark's does (and a list or map read
  through it is empty, as in Spark); declaring the state again revives both handles;
* the pandas flavour gets a key's rows in frames of ``spark.sql.execution.arrow.
  maxRecordsPerBatch`` rows (default 10,000; 0 or less: one frame), indexed from 0, as Spark
  hands them (Spark's ``...transformWithStateInPandas.maxRecordsPerBatch`` changes nothing
  here, also checked);
* output mode Complete is accepted, as Spark's operator accepts it.

Every case runs through Spark's transformWithStateInPandas (a batch query), stateengine.spark
and the local harness (``engine``), which must agree with Spark exactly."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from stateengine.spark import transform_with_state_in_pandas

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark.sql.streaming.stateful_processor",
                    reason="Spark's transformWithState needs pyspark >= 4.0")

from stateengine.testing import ProcessorHarness  # noqa: E402
from tests import tws_processors as P  # noqa: E402
from tests.tws_compare import sort_rows  # noqa: E402

ENGINES = ["spark", "harness"]
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
TWS_BATCH = "spark.sql.execution.arrow.transformWithStateInPandas.maxRecordsPerBatch"


def _keys(spark, keys):
    return spark.createDataFrame(pd.DataFrame({"k": list(keys)}))


def run_ours(engine, spark, processor, pdf, out, tmp_path, time_mode="None", **kwargs):
    """Sorted output rows of one batch through stateengine.spark or the harness."""
    if engine == "harness":
        size = int(spark.conf.get(ARROW_BATCH, "10000"))
        with ProcessorHarness(processor, "k", out, time_mode=time_mode, num_partitions=3,
                              directory=str(tmp_path / "harness"),
                              max_records_per_batch=size, **kwargs) as h:
            return sort_rows(h.run_batch(pdf, processing_time=1000).rows)
    df = spark.createDataFrame(pdf)
    return sort_rows(transform_with_state_in_pandas(
        df, processor, "k", out, str(tmp_path / "state"), time_mode=time_mode, batch_id=0,
        processing_time=1000, num_partitions=3, **kwargs).collect())


# the error class Spark 4.3 raises for each misuse (checked against Spark below)
HANDLE_STATE = "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_HANDLE_STATE"
SPARK_CLASSES = {
    "get_without_key": "INTERNAL_ERROR_TWS",
    "timer_in_init": HANDLE_STATE, "timer_in_close": HANDLE_STATE,
    "declare_in_handler": HANDLE_STATE, "delete_in_handler": HANDLE_STATE,
    "ttl_state": "STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL",
    "reserved_name": "STATE_STORE_CANNOT_CREATE_COLUMN_FAMILY_WITH_RESERVED_CHARS",
    "register_timer": "STATEFUL_PROCESSOR_CANNOT_PERFORM_OPERATION_WITH_INVALID_TIME_MODE",
    "put_empty_list": "ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE",
    "append_empty_list": "ILLEGAL_STATE_STORE_VALUE.EMPTY_LIST_VALUE",
}


@pytest.fixture(scope="module")
def one_partition(spark):
    """Each misuse fails its Spark job (after the task's retries): one key, one partition."""
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", "4")


@pytest.mark.parametrize("what", sorted(P.MISUSES))
def test_each_misuse_meets_the_error_class_spark_raises(spark, one_partition, tmp_path, what):
    """Spark's operator, then the harness (stateengine.spark's tasks run the same code; their
    errors on the Spark path: test_spark_processor_errors.py), on one misuse each."""
    mode = P.MISUSES[what]
    with pytest.raises(Exception) as spark_error:
        _keys(spark, ["a"]).groupBy("k").transformWithStateInPandas(
            P.Misuse(what), "k string, misuse string", "Update", mode).collect()
    assert P.error_kind(spark_error.value) == SPARK_CLASSES[what]
    with pytest.raises(Exception) as ours:
        with ProcessorHarness(P.Misuse(what), "k", "k string, misuse string", time_mode=mode,
                              directory=str(tmp_path / "h")) as h:
            h.run_batch(pd.DataFrame({"k": ["a"]}), processing_time=1000)
    assert P.error_kind(ours.value) == SPARK_CLASSES[what]
    assert f"[{SPARK_CLASSES[what]}] " in str(ours.value)  # named at the start of the message


@pytest.fixture(scope="module")
def deleted_handles_in_spark(spark):
    return sort_rows(_keys(spark, P.DELETED_CALLS).groupBy("k").transformWithStateInPandas(
        P.DeletedHandles(), "k string, error string", "Update", "None").collect())


@pytest.mark.parametrize("engine", ENGINES)
def test_a_handle_used_after_delete_if_exists_raises_as_in_spark(
        spark, deleted_handles_in_spark, tmp_path, engine):
    got = run_ours(engine, spark, P.DeletedHandles(), pd.DataFrame({"k": list(P.DELETED_CALLS)}),
                   "k string, error string", tmp_path)
    assert got == deleted_handles_in_spark
    found = dict(got)
    assert found["value_update"] == "Value state gone_value is not initialized"
    assert found["list_append"] == "List state gone_list is not initialized"
    assert found["map_update"] == "Map state gone_map is not initialized"
    # what Spark answers without an error: a deleted list or map reads as empty
    assert {k for k, e in got if e == "ok"} == {"list_get", "map_iterator", "map_keys",
                                                "map_values"}


@pytest.fixture(scope="module")
def redeclared_in_spark(spark):
    batches = [pd.DataFrame({"k": ["a", "b", "a"]}), pd.DataFrame({"k": ["a"]})]
    return batches, [sort_rows(_keys(spark, b["k"]).groupBy("k").transformWithStateInPandas(
        P.RedeclaredAfterDelete(), "key string, n long, same boolean", "Update", "None")
        .collect()) for b in batches]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_state_deleted_and_declared_again_in_init_starts_empty_each_batch(
        spark, redeclared_in_spark, tmp_path, engine):
    batches, expected = redeclared_in_spark
    out = "key string, n long, same boolean"
    if engine == "harness":
        with ProcessorHarness(P.RedeclaredAfterDelete(), "k", out,
                              directory=str(tmp_path / "h")) as h:
            got = [sort_rows(h.run_batch(b).rows) for b in batches]
    else:
        got = [sort_rows(transform_with_state_in_pandas(
            spark.createDataFrame(b), P.RedeclaredAfterDelete(), "k", out,
            str(tmp_path / "state"), batch_id=i).collect()) for i, b in enumerate(batches)]
    assert got == expected == [[("a", 2, True), ("b", 1, True)], [("a", 1, True)]]


CHUNK_ROWS = pd.DataFrame({"k": ["a"] * 25 + ["b"] * 3 + ["c"] * 7, "v": range(35)})


@pytest.fixture(scope="module", params=[None, "7", "0"])
def frames_in_spark(request, spark):
    """Spark's frames per key with the Arrow batch size unset, 7 and 0; the transform-with-
    state conf set to 4 beside it changes nothing."""
    setting = request.param
    spark.conf.set(TWS_BATCH, "4")
    if setting is not None:
        spark.conf.set(ARROW_BATCH, setting)
    try:
        rows = sort_rows(spark.createDataFrame(CHUNK_ROWS).groupBy("k")
                         .transformWithStateInPandas(P.FrameSizes(), "k string, frames string",
                                                     "Update", "None").collect())
        yield setting, rows
    finally:
        spark.conf.unset(TWS_BATCH)
        spark.conf.unset(ARROW_BATCH)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_keys_rows_come_in_frames_of_the_arrow_batch_size(spark, frames_in_spark, tmp_path,
                                                            engine):
    setting, expected = frames_in_spark
    sizes = {None: [25], "7": [7, 7, 7, 4], "0": [25]}[setting]
    first = [json.loads(f) for k, f in expected if k == "a"][0]
    assert [s for s, _, _ in first] == sizes and all(i == 0 for _, i, _ in first)
    if setting is not None:
        spark.conf.set(ARROW_BATCH, setting)
    try:
        got = run_ours(engine, spark, P.FrameSizes(), CHUNK_ROWS, "k string, frames string",
                       tmp_path)
    finally:
        spark.conf.unset(ARROW_BATCH)
    assert got == expected


@pytest.mark.parametrize("engine", ENGINES)
def test_output_mode_complete_is_accepted_as_by_spark(spark, tmp_path, engine):
    pdf = pd.DataFrame({"k": ["a", "b"], "v": [1, 2]})
    expected = sort_rows(spark.createDataFrame(pdf).groupBy("k").transformWithStateInPandas(
        P.FrameSizes(), "k string, frames string", "Complete", "None").collect())
    if engine == "harness":  # the harness has no output mode: it changes nothing in the rows
        got = run_ours(engine, spark, P.FrameSizes(), pdf, "k string, frames string", tmp_path)
    else:
        got = sort_rows(transform_with_state_in_pandas(
            spark.createDataFrame(pdf), P.FrameSizes(), "k", "k string, frames string",
            str(tmp_path / "state"), output_mode="Complete", batch_id=0).collect())
    assert got == expected


def test_the_arrow_batch_size_is_read_from_a_spark_connect_session(connect, tmp_path):
    """The driver reads the conf with spark.conf.get, which a Connect session answers too."""
    connect.conf.set(ARROW_BATCH, "7")
    try:
        got = sort_rows(transform_with_state_in_pandas(
            connect.createDataFrame(CHUNK_ROWS), P.FrameSizes(), "k", "k string, frames string",
            str(tmp_path / "state"), batch_id=0, num_partitions=3).collect())
    finally:
        connect.conf.unset(ARROW_BATCH)
    frames = {k: json.loads(f) for k, f in got}
    assert frames["a"] == [[7, 0, 0], [7, 0, 7], [7, 0, 14], [4, 0, 21]]
    assert frames["b"] == [[3, 0, 25]] and frames["c"] == [[7, 0, 28]]
