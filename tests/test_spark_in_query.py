"""The stateful step inside a Structured Streaming query.

``apply_with_state`` on a streaming DataFrame returns a streaming DataFrame that a sink and
downstream operators consume like any other. Each task takes its batch id from Spark and the
batch's watermark and timestamp from the query's offset log, so a retried task and a batch
re-run after a restart load the same version and fire the same timers: every row counts once.
A micro-batch without any data (Spark runs one when a watermark moves a stateful operator
downstream) still runs a task per partition, commits every partition's version and fires the
timers that came due.
"""

import json
import os

import numpy as np
import pandas as pd
import pytest
from pyspark import TaskContext

from stateengine import StateTtlConfig, ValueStateDescriptor
from stateengine.spark import apply_with_state, map_with_state, read_state

pytestmark = pytest.mark.spark

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
# State TTL's clock is the batch's timestamp from the offset log (a TTL nothing reaches here)
SEEN = ValueStateDescriptor("seen", value_type=int, ttl=StateTtlConfig(ttl_ms=10 ** 12))
OUT = "user bigint, kind string, count bigint, batch bigint, watermark bigint, at bigint"
GAP_MS = 5_000
PARTITIONS = 3


def write_files(folder, files=4, rows=40, users=12):
    """File i holds events at i * 10 s + 1 s + (0..rows) ms; one micro-batch per file."""
    rng = np.random.default_rng(3)
    os.makedirs(folder)
    frames = []
    for i in range(files):
        pdf = pd.DataFrame({"user": rng.integers(0, users, rows).astype("int64"),
                            "t_ms": i * 10_000 + 1_000 + np.arange(rows, dtype="int64")})
        pdf.to_parquet(os.path.join(folder, f"part-{i:03d}.parquet"), index=False)
        frames.append(pdf)
    return pd.concat(frames, ignore_index=True)


def offset_log(query_ck, batch_id):
    """What Spark wrote for the batch: line 2 of offsets/<batch_id> (read here directly)."""
    with open(os.path.join(query_ck, "offsets", str(batch_id))) as f:
        return json.loads(f.read().split("\n")[1])


def make_functions(flags):
    def per_user(user, rows, ctx):
        tc = TaskContext.get()
        if ctx.batch_id == 1 and tc.partitionId() == 0 and tc.attemptNumber() == 0:
            open(os.path.join(flags, "task-failed"), "w").close()
            raise RuntimeError("injected first-attempt failure")
        count = ctx.state("count")
        count.update(count.value() + len(rows))
        ctx.state("seen").update(ctx.batch_id)
        # a Spark timestamp as pandas gives it: naive, in the session time zone (UTC here)
        ctx.timers.register_event_time_timer(rows["t"].max() + pd.Timedelta(milliseconds=GAP_MS))
        return [(user, "update", count.value(), ctx.batch_id, ctx.watermark,
                 int(rows["t_ms"].max()))]

    def on_timer(user, timer, ctx):
        return [(user, "timer", ctx.state("count").value(), ctx.batch_id, ctx.watermark,
                 timer.timestamp)]

    return per_user, on_timer


def fail_batch_2_after_commit(flags):
    """A stage after the stateful step's (so every partition's state of batch 2 is committed)
    that fails in batch 2 while the restart flag is missing, on every attempt: the query
    stops, and Spark has not committed the batch."""
    def fn(batches):
        frames = list(batches)
        if TaskContext.get().getLocalProperty("streaming.sql.batchId") == "2" and \
                TaskContext.get().partitionId() == 0 and \
                not os.path.exists(os.path.join(flags, "restarted")):
            raise RuntimeError("injected failure after the state commit")
        yield from frames
    return fn


def run_query(spark, source, base, flags):
    state, query_ck = os.path.join(base, "state"), os.path.join(base, "query")
    per_user, on_timer = make_functions(flags)
    events = (spark.readStream.schema("user bigint, t_ms bigint").option("maxFilesPerTrigger", 1)
              .parquet(source).selectExpr("user", "t_ms", "timestamp_millis(t_ms) AS t"))
    out = apply_with_state(events, "user", per_user, OUT, [COUNT, SEEN], state,
                           num_partitions=PARTITIONS, on_timer=on_timer,
                           query_checkpoint=query_ck)
    assert out.isStreaming
    # downstream: a stateful Spark operator with a watermark on our output, which makes Spark
    # run a micro-batch without data once the watermark moves
    out = (out.selectExpr("*", "timestamp_millis(at) AS at_t").withWatermark("at_t", "1 second")
           .dropDuplicates(["user", "kind", "batch", "at_t"]))
    out = out.mapInPandas(fail_batch_2_after_commit(flags), out.schema)
    query = (out.writeStream.format("parquet").option("path", os.path.join(base, "out"))
             .option("checkpointLocation", query_ck).trigger(availableNow=True).start())
    query.awaitTermination()


def test_stateful_step_inside_a_query_counts_once_across_retries_restarts_and_empty_batches(
        spark, tmp_path):
    source, base, flags = str(tmp_path / "in"), str(tmp_path / "job"), str(tmp_path / "flags")
    os.makedirs(flags)
    everything = write_files(source)
    with pytest.raises(Exception, match="injected failure after the state commit"):
        run_query(spark, source, base, flags)
    assert os.path.exists(os.path.join(flags, "task-failed"))  # batch 1 was retried
    open(os.path.join(flags, "restarted"), "w").close()
    run_query(spark, source, base, flags)  # resumes at batch 2, whose state committed already

    query_ck = os.path.join(base, "query")
    batches = sorted(int(n) for n in os.listdir(os.path.join(query_ck, "offsets"))
                     if n.isdigit())
    # four batches of data, then one without: the watermark moved the downstream dedup
    assert batches == [0, 1, 2, 3, 4]
    assert offset_log(query_ck, 4)["batchWatermarkMs"] > offset_log(query_ck, 3)["batchWatermarkMs"]
    for b in batches:  # every partition committed version b + 1, the empty batch's too
        manifests = os.listdir(os.path.join(base, "state", "default", f"v{b + 1}"))
        assert {f"p{p:05d}-of-{PARTITIONS:05d}.json" for p in range(PARTITIONS)} <= \
            set(manifests), (b, manifests)

    want = everything.groupby("user").size()
    state = read_state(spark, os.path.join(base, "state"), "count").toPandas()
    assert dict(zip(state["key"], state["value"])) == want.to_dict()  # nothing counted twice
    # TTL stamped each user's last write with the batchTimestampMs of the batch that wrote it
    seen = read_state(spark, os.path.join(base, "state"), "seen").toPandas()
    assert len(seen) == len(want) and all(
        at == offset_log(query_ck, b)["batchTimestampMs"]
        for b, at in zip(seen["value"], seen["last_access_ms"]))

    out = spark.read.parquet(os.path.join(base, "out")).toPandas()
    updates = out[out.kind == "update"].sort_values("batch").groupby("user").last()
    assert updates["count"].to_dict() == want.to_dict()
    for b, rows in out.groupby("batch"):  # each task saw Spark's watermark of its batch
        assert (rows["watermark"] == offset_log(query_ck, b)["batchWatermarkMs"]).all(), b
    # each timer (a user's last event of a batch + the gap) fires once, in the first batch
    # whose watermark reaches it; the batch without data fires those due in it
    watermarks = {b: offset_log(query_ck, b)["batchWatermarkMs"] for b in batches}
    registered = everything.assign(file=(everything["t_ms"] - 1_000) // 10_000) \
        .groupby(["user", "file"])["t_ms"].max() + GAP_MS
    want_fired = {(u, at, min(b for b in batches if watermarks[b] >= at))
                  for (u, _), at in registered.items() if at <= watermarks[batches[-1]]}
    timers = out[out.kind == "timer"]
    fired = list(zip(timers["user"], timers["at"], timers["batch"]))
    assert len(fired) == len(set(fired)) and set(fired) == want_fired
    assert any(b == 4 for _, _, b in want_fired)


def test_map_with_state_inside_a_query(spark, tmp_path):
    """The batch-operations form inside a query: one call per partition and micro-batch, with
    Spark's batch id; partitions without rows commit without a call."""
    source, base = str(tmp_path / "in"), str(tmp_path / "job")
    everything = write_files(source, files=2, rows=30, users=8)

    def per_partition(rows, ctx):
        users = rows["user"].to_numpy()
        keys, counts = np.unique(users, return_counts=True)
        state = ctx.state("count")
        before, _ = state.get_many(keys)
        totals = before + counts
        state.put_many(keys, totals)
        return pd.DataFrame({"user": keys, "count": totals, "batch": ctx.batch_id})

    events = spark.readStream.schema("user bigint, t_ms bigint").option("maxFilesPerTrigger", 1) \
        .parquet(source)
    out = map_with_state(events, "user", per_partition, "user bigint, count bigint, batch bigint",
                         [COUNT], os.path.join(base, "state"), num_partitions=PARTITIONS)
    query = (out.writeStream.format("parquet").option("path", os.path.join(base, "out"))
             .option("checkpointLocation", os.path.join(base, "query"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    rows = spark.read.parquet(os.path.join(base, "out")).toPandas()
    assert sorted(rows["batch"].unique()) == [0, 1]
    latest = rows.sort_values("batch").groupby("user")["count"].last()
    assert latest.to_dict() == everything.groupby("user").size().to_dict()
    for v in (1, 2):
        assert len([f for f in os.listdir(os.path.join(base, "state", "default", f"v{v}"))
                    if f.endswith(".json")]) == PARTITIONS


def test_a_checkpoint_location_of_another_query_is_refused(spark, tmp_path):
    source, base, flags = str(tmp_path / "in"), str(tmp_path / "job"), str(tmp_path / "flags")
    os.makedirs(flags)
    write_files(source, files=1, rows=5)
    other = tmp_path / "other-query"
    other.mkdir()
    (other / "metadata").write_text('{"id":"00000000-0000-0000-0000-000000000000"}')
    events = (spark.readStream.schema("user bigint, t_ms bigint").parquet(source)
              .selectExpr("user", "t_ms", "timestamp_millis(t_ms) AS t"))
    per_user, on_timer = make_functions(flags)
    out = apply_with_state(events, "user", per_user, OUT, [COUNT, SEEN],
                           os.path.join(base, "state"),
                           num_partitions=1, on_timer=on_timer, query_checkpoint=str(other))
    query = (out.writeStream.format("memory").queryName("refused_query")
             .option("checkpointLocation", os.path.join(base, "query"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception, match=r"StreamingBatchError: query_checkpoint .* belongs to "
                                        r"query 00000000-0000"):
        query.awaitTermination()


def test_streaming_arguments_are_checked_on_the_driver(spark, tmp_path):
    events = spark.readStream.format("rate").load().selectExpr("value AS user", "timestamp AS t")

    def fn(user, rows, ctx):
        return None

    def call(**kw):
        return apply_with_state(events, "user", fn, "user bigint", [COUNT], str(tmp_path / "s"),
                                num_partitions=2, **kw)

    with pytest.raises(ValueError, match="streaming DataFrame, which runs once per micro-batch"):
        call(batch_id=3)
    with pytest.raises(ValueError, match="pass query_checkpoint="):
        call(on_timer=fn)
    with pytest.raises(ValueError, match="watermark go with an explicit batch_id"):
        call(watermark=10)
    with pytest.raises(ValueError, match="watermark and query_checkpoint both"):
        call(watermark=10, query_checkpoint=str(tmp_path / "q"))
    assert call().isStreaming  # no timers: the batch id alone is enough
