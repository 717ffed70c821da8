"""Timers fire on a quiet stream, inside the query (stateengine/spark/no_data_batches.py).

Spark runs a micro-batch without data only when a stateful operator of its own asks for one;
each entry point adds a branch that asks as Spark's operator would (every trigger in time mode
ProcessingTime, after the watermark moved in EventTime). Checked on real streaming queries:

* a heartbeat timeout (a processing-time timer HEARTBEAT_MS after the batch of a key's last
  event) fires once per key, in the first batch whose timestamp reaches it, on triggers that
  bring no rows; also when the query is stopped and restarted while the stream is quiet (Spark's
  own processing-time operator runs nothing after such a restart until data arrives: pinned
  below);
* event-time timers: the same batches (ids, watermarks, input files) and the same rows per
  batch as Spark's own transformWithStateInPandas (RocksDB provider) on the same input,
  Spark's trailing batch without data included; apply_with_state's batches are those of
  Spark's applyInPandasWithState with an event-time timeout (every supported Spark).
"""

from __future__ import annotations

import glob
import json
import os
import time

import pandas as pd
import pytest

from stateengine import ValueStateDescriptor
from stateengine.spark import apply_in_pandas_with_state, apply_with_state, map_with_state, \
    transform_with_state, transform_with_state_in_pandas, with_no_data_batches
from tests import quiet_functions as Q
from tests.tws_compare import SparkBatch, assert_same, run_spark, sort_rows, write_files

pytestmark = pytest.mark.spark

TRIGGER = "0.5 seconds"
ONCE = "365 days"  # a first trigger, and the next one out of the test's reach
KEYS_SCHEMA = "key string, n long"
TIMEOUT = ValueStateDescriptor("timeout", value_type=int)
HAS_PROCESSORS = Q.StatefulProcessor is not None
needs_processors = pytest.mark.skipif(not HAS_PROCESSORS,
                                      reason="StatefulProcessor needs pyspark >= 4.0")


def _log(folder: str) -> dict[int, dict]:
    """batch id -> the metadata line of the query's offset log."""
    out = {}
    for path in glob.glob(os.path.join(folder, "offsets", "*")):
        if os.path.basename(path).isdigit():
            out[int(os.path.basename(path))] = json.loads(open(path).read().split("\n")[1])
    return out


def _committed(folder: str) -> list[int]:
    return sorted(int(os.path.basename(p)) for p in glob.glob(os.path.join(folder, "commits", "*"))
                  if os.path.basename(p).isdigit())


def _read_source_files(folder: str) -> dict[int, int]:
    """batch id -> the file source's log offset of that batch (the files it read)."""
    out = {}
    for path in glob.glob(os.path.join(folder, "offsets", "*")):
        if os.path.basename(path).isdigit():
            lines = open(path).read().split("\n")
            out[int(os.path.basename(path))] = json.loads(lines[2])["logOffset"]
    return out


def _write_batches(session, folder: str, frames: list[pd.DataFrame], schema: str) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    write_files(folder, frames, to_arrow_schema(session.createDataFrame([], schema).schema))


def _start(out, sink: str, query_ck: str, **trigger):
    """The query, writing to a Parquet file sink (a Connect foreachBatch function runs its
    writes outside the micro-batch, where a stateful step has no batch id)."""
    return (out.writeStream.format("parquet").option("path", sink)
            .option("checkpointLocation", query_ck).trigger(**trigger).start())


def _rows_by_batch(session, sink: str) -> dict[int, list[tuple]]:
    """batch id -> the rows the file sink committed for it (its _spark_metadata log)."""
    out = {}
    for path in glob.glob(os.path.join(sink, "_spark_metadata", "*")):
        if not os.path.basename(path).isdigit():
            continue
        files = [json.loads(line)["path"] for line in open(path).read().split("\n")[1:]
                 if line.strip()]
        rows = session.read.parquet(*files).collect() if files else []
        out[int(os.path.basename(path))] = sort_rows(rows)
    return out


def _run_until(query, done, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and not done() and query.exception() is None:
            time.sleep(0.2)
    finally:
        query.stop()
    assert query.exception() is None, str(query.exception())[:4000]


def _heartbeat_step(kind: str, stream, state: str, query_ck: str):
    if kind == "apply_with_state":
        return apply_with_state(stream, "key", Q.heartbeat, Q.OUT, [TIMEOUT], state,
                                num_partitions=2, on_timer=Q.heartbeat_timeout,
                                query_checkpoint=query_ck)
    if kind == "group_state":
        return apply_in_pandas_with_state(stream, Q.group_heartbeat, "key", Q.OUT, "at long",
                                          "Update", "ProcessingTimeTimeout", state,
                                          num_partitions=2, query_checkpoint=query_ck)
    run = transform_with_state_in_pandas if kind == "pandas" else transform_with_state
    processor = Q.Heartbeat() if kind == "pandas" else Q.RowHeartbeat()
    return run(stream, processor, "key", Q.OUT, state, time_mode="ProcessingTime",
               num_partitions=2, query_checkpoint=query_ck)


def _check_heartbeats(rows: dict[int, list[tuple]], log: dict[int, dict], keys: set[str],
                      last: int, last_keys: set[str], delay: int = Q.HEARTBEAT_MS) -> None:
    """Each key's timeout fired once, in the first batch whose timestamp reached its timer
    (its latest event's batch timestamp + ``delay``); those of the keys of the last batch
    with data (``last``) necessarily in a batch that brought no rows."""
    events = {k: max((r for b in rows for r in rows[b] if r[0] == k and r[1] == "event"),
                     key=lambda r: r[3]) for k in keys}
    timeouts = [(b, r) for b in sorted(rows) for r in rows[b] if r[1] == "timeout"]
    assert sorted(r[0] for _, r in timeouts) == sorted(keys), timeouts
    for b, (key, _, at, batch_ts) in timeouts:
        assert at == events[key][2] == events[key][3] + delay
        assert batch_ts == log[b]["batchTimestampMs"] >= at
        assert all(log[e]["batchTimestampMs"] < at for e in log if e < b), (key, b)
        assert b > last or key not in last_keys, (key, b)


@pytest.mark.parametrize("kind", [
    "apply_with_state",
    "group_state",
    pytest.param("pandas", marks=needs_processors),
])
def test_heartbeat_timeouts_fire_on_quiet_triggers(spark, tmp_path, kind):
    _heartbeats_on_quiet_triggers(spark, tmp_path, kind)


@needs_processors
def test_heartbeat_timeouts_fire_on_quiet_triggers_on_spark_connect(connect, tmp_path):
    _heartbeats_on_quiet_triggers(connect, tmp_path, "row")


def _heartbeats_on_quiet_triggers(session, tmp_path, kind):
    source, sink, query_ck = (str(tmp_path / n) for n in ("in", "out", "query"))
    _write_batches(session, source, [pd.DataFrame({"key": ["a", "b", "c"], "n": [1, 2, 3]}),
                                     pd.DataFrame({"key": ["a", "d"], "n": [4, 5]})],
                   KEYS_SCHEMA)
    stream = session.readStream.schema(KEYS_SCHEMA).option("maxFilesPerTrigger", 1) \
        .parquet(source)
    out = _heartbeat_step(kind, stream, str(tmp_path / "state"), query_ck)
    query = _start(out, sink, query_ck, processingTime=TRIGGER)

    def done():  # every timeout out, and two batches after the last one: no second firing
        rows = _rows_by_batch(session, sink)
        fired = [b for b in rows for r in rows[b] if r[1] == "timeout"]
        return len(fired) == 4 and len(_committed(query_ck)) > max(fired) + 2

    _run_until(query, done)
    files = _read_source_files(query_ck)
    last_data = min(b for b in files if files[b] == 1)
    # GroupState times out strictly after its timeout: the first millisecond is one later
    delay = Q.HEARTBEAT_MS + (kind == "group_state")
    _check_heartbeats(_rows_by_batch(session, sink), _log(query_ck), {"a", "b", "c", "d"},
                      last_data, {"a", "d"}, delay)


def test_heartbeat_timeouts_fire_after_a_restart_in_the_quiet_period(spark, tmp_path):
    """The first run processes the events and stops before its next trigger (triggers fall on
    multiples of the interval, here a year), with every timeout pending; the restarted query runs batches without data at once, and each
    timeout fires once."""
    source, sink, query_ck = (str(tmp_path / n) for n in ("in", "out", "query"))
    _write_batches(spark, source, [pd.DataFrame({"key": ["a", "b", "c"], "n": [1, 2, 3]})],
                   KEYS_SCHEMA)

    def start(trigger):
        stream = spark.readStream.schema(KEYS_SCHEMA).parquet(source)
        out = _heartbeat_step("apply_with_state", stream, str(tmp_path / "state"), query_ck)
        return _start(out, sink, query_ck, processingTime=trigger)

    _run_until(start(ONCE), lambda: _committed(query_ck) == [0])
    assert _committed(query_ck) == [0] and sorted(_log(query_ck)) == [0]
    assert not [r for rows in _rows_by_batch(spark, sink).values() for r in rows
                if r[1] == "timeout"]

    def done():
        rows = _rows_by_batch(spark, sink)
        fired = [b for b in rows for r in rows[b] if r[1] == "timeout"]
        return len(fired) == 3 and len(_committed(query_ck)) > max(fired) + 2

    _run_until(start(TRIGGER), done)
    _check_heartbeats(_rows_by_batch(spark, sink), _log(query_ck), {"a", "b", "c"}, 0,
                      {"a", "b", "c"})


def test_sparks_own_processing_time_operator_waits_for_data_after_a_restart(spark, tmp_path):
    """What Spark does in the same situation (why the restart above is worth a test): a query
    restarted after its last batch committed has no last execution to ask for another batch,
    so its applyInPandasWithState with a processing-time timeout runs nothing until data
    arrives."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    source, query_ck = str(tmp_path / "in"), str(tmp_path / "query")
    _write_batches(spark, source, [pd.DataFrame({"key": ["a"], "n": [1]})], KEYS_SCHEMA)

    def start(trigger):
        out = spark.readStream.schema(KEYS_SCHEMA).parquet(source).groupBy("key") \
            .applyInPandasWithState(Q.spark_heartbeat, Q.OUT, "at long", "append",
                                    GroupStateTimeout.ProcessingTimeTimeout)
        return (out.writeStream.format("noop").option("checkpointLocation", query_ck)
                .trigger(processingTime=trigger).start())

    _run_until(start(ONCE), lambda: _committed(query_ck) == [0])
    assert sorted(_log(query_ck)) == [0]
    query = start(TRIGGER)
    time.sleep(4)  # eight triggers
    _run_until(query, lambda: True)
    assert _committed(query_ck) == [0]


# ---- event time -------------------------------------------------------------------------------

T0 = 1_700_000_000_000
EVENTS_SCHEMA = "key string, t long"
EVENT_FRAMES = [
    pd.DataFrame({"key": ["a", "x", "r"], "t": [T0, T0, T0]}),
    pd.DataFrame({"key": ["a", "x", "late"], "t": [T0 + 3000, T0 + 1000, T0 - 20_000]}),
    pd.DataFrame({"key": ["b", "a", "x"], "t": [T0 + 20_000, T0 - 10_000, T0 + 19_000]}),
]
SESSIONS_OUT = "key string, kind string, at long, watermark long, info string"


def _watermarked(df):
    return df.selectExpr("key", "timestamp_millis(t) AS ts").withWatermark("ts", "5 seconds")


@pytest.fixture(scope="module")
def event_time_sessions_in_spark(spark, tmp_path_factory):
    """Spark's own transformWithStateInPandas in EventTime on the input, batch by batch."""
    if not HAS_PROCESSORS:
        pytest.skip("transformWithState needs pyspark >= 4.0")
    from tests import tws_processors as P

    batches = run_spark(spark, str(tmp_path_factory.mktemp("spark")), EVENT_FRAMES,
                        EVENTS_SCHEMA, lambda s: _watermarked(s).groupBy("key")
                        .transformWithStateInPandas(P.EventTimeSessions(), SESSIONS_OUT,
                                                    "Update", "EventTime"))
    assert not batches[-1].files and batches[-1].rows  # the trailing batch fired timers
    return batches


def _event_time_sessions_in_query(session, batches: list[SparkBatch], tmp_path):
    from tests import tws_processors as P

    source = os.path.dirname(batches[0].files[0])
    sink, query_ck = str(tmp_path / "out"), str(tmp_path / "query")
    stream = _watermarked(session.readStream.schema(EVENTS_SCHEMA)
                          .option("maxFilesPerTrigger", 1).parquet(source))
    out = transform_with_state_in_pandas(stream, P.EventTimeSessions(), "key", SESSIONS_OUT,
                                         str(tmp_path / "state"), time_mode="EventTime",
                                         num_partitions=2, query_checkpoint=query_ck)
    query = _start(out, sink, query_ck, availableNow=True)
    query.awaitTermination(300)
    assert query.exception() is None, str(query.exception())[:4000]
    log = _log(query_ck)
    assert _committed(query_ck) == [b.batch_id for b in batches]
    assert [log[b.batch_id]["batchWatermarkMs"] for b in batches] == \
        [b.watermark for b in batches]
    rows = _rows_by_batch(session, sink)
    assert_same(batches, {b.batch_id: rows.get(b.batch_id, []) for b in batches})


@needs_processors
def test_event_time_timers_fire_in_sparks_batches(spark, event_time_sessions_in_spark,
                                                  tmp_path):
    _event_time_sessions_in_query(spark, event_time_sessions_in_spark, tmp_path)


@needs_processors
def test_event_time_timers_fire_in_sparks_batches_on_spark_connect(
        connect, event_time_sessions_in_spark, tmp_path):
    _event_time_sessions_in_query(connect, event_time_sessions_in_spark, tmp_path)


def _filesystem_checkpoint_manager(session) -> str:
    """Spark's FileSystem-based checkpoint file manager (docs/spark/quiet-streams.md#cost):
    its package moved in Spark 4.1."""
    major, minor = (int(x) for x in session.version.split(".")[:2])
    package = "org.apache.spark.sql.execution.streaming"
    if (major, minor) >= (4, 1):
        package += ".checkpointing"
    return f"{package}.FileSystemBasedCheckpointFileManager"


@pytest.fixture
def checkpoint_manager(request, spark):
    """The session's checkpoint file manager for one test: Spark's default (FileContext) or
    the FileSystem-based one the cost section of the docs recommends on a local disk."""
    key = "spark.sql.streaming.checkpointFileManagerClass"
    if request.param == "filesystem":
        spark.conf.set(key, _filesystem_checkpoint_manager(spark))
    try:
        yield request.param
    finally:
        spark.conf.unset(key)


@pytest.mark.parametrize("checkpoint_manager", ["default", "filesystem"], indirect=True)
def test_apply_with_state_runs_the_batches_of_sparks_event_time_operator(
        spark, tmp_path, checkpoint_manager):
    """apply_with_state with on_timer over a watermarked input asks for the batches Spark's
    applyInPandasWithState with an event-time timeout gets (same ids, watermarks and input),
    and each timer fires in the first of them whose watermark reaches it; also with the
    FileSystem-based checkpoint file manager (both queries)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    source = str(tmp_path / "in")
    _write_batches(spark, source, EVENT_FRAMES, EVENTS_SCHEMA)

    def run(name, step):
        query_ck = str(tmp_path / name)
        stream = _watermarked(spark.readStream.schema(EVENTS_SCHEMA)
                              .option("maxFilesPerTrigger", 1).parquet(source))
        query = _start(step(stream, query_ck), str(tmp_path / f"{name}-out"), query_ck,
                       availableNow=True)
        query.awaitTermination(300)
        assert query.exception() is None, str(query.exception())[:4000]
        log, files = _log(query_ck), _read_source_files(query_ck)
        return {b: (log[b]["batchWatermarkMs"], files[b]) for b in _committed(query_ck)}

    sparks = run("spark", lambda s, _: s.groupBy("key").applyInPandasWithState(
        Q.spark_event_gap, Q.EVENT_OUT, "latest long", "append",
        GroupStateTimeout.EventTimeTimeout))
    ours = run("ours", lambda s, ck: apply_with_state(
        s, "key", Q.event_gap, Q.EVENT_OUT, [], str(tmp_path / "state"), num_partitions=2,
        on_timer=Q.event_gap_timeout, query_checkpoint=ck))
    assert ours == sparks
    assert sparks[max(sparks)][1] == sparks[max(sparks) - 1][1]  # a trailing batch, no data
    rows = _rows_by_batch(spark, str(tmp_path / "ours-out"))
    watermarks = {b: w for b, (w, _) in ours.items()}
    due = {}  # (key, timer) -> the first batch from its registration on whose watermark reaches it
    for b in sorted(rows):
        for key, kind, at, _ in rows[b]:
            if kind == "event":
                due.setdefault((key, at), min((c for c, w in watermarks.items()
                                               if c >= b and w >= at), default=None))
    fired = [((key, at), b) for b in rows for key, kind, at, _ in rows[b] if kind == "timeout"]
    assert len(fired) == len(dict(fired))  # once each
    assert dict(fired) == {t: b for t, b in due.items() if b is not None}
    assert max(sparks) in dict(fired).values()  # timers fired in the trailing batch


# ---- the rule and its arguments ---------------------------------------------------------------

def test_no_data_batches_arguments_are_checked(spark, tmp_path):
    stream = spark.readStream.schema(KEYS_SCHEMA).parquet(str(tmp_path))
    batch = spark.createDataFrame([("a", 1)], KEYS_SCHEMA)
    common = dict(states=[TIMEOUT], checkpoint=str(tmp_path / "state"))
    with pytest.raises(ValueError, match="no_data_batches must be one of"):
        apply_with_state(stream, "key", Q.heartbeat, Q.OUT, on_timer=Q.heartbeat_timeout,
                         query_checkpoint=str(tmp_path / "q"), no_data_batches="always",
                         **common)
    with pytest.raises(ValueError, match="applies to a streaming DataFrame.*with_no_data_batches"):
        map_with_state(batch, "key", lambda rows, ctx: None, Q.OUT, batch_id=0,
                       no_data_batches="processing_time", **common)
    with pytest.raises(ValueError, match="streaming DataFrame"):
        with_no_data_batches(batch, "processing_time")
    with pytest.raises(ValueError, match="needs 'processing_time', 'event_time' or 'none'"):
        with_no_data_batches(stream, "auto")
    assert with_no_data_batches(stream, "none") is stream
