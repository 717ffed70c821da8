"""A real Structured Streaming query (file source, foreachBatch) over many micro-batches, with a
task failure injected (local[2,4] allows four attempts per task, the local-mode form of
spark.task.maxFailures) and a batch that Spark replays after the driver-side function failed
once its state was already committed. Per-key results must equal pandas over all input."""

import os

import numpy as np
import pandas as pd
import pytest
from pyspark import TaskContext

from stateengine import ReducingStateDescriptor, ValueStateDescriptor, reducers
from stateengine.spark import apply_with_state, mark_batch_committed, read_state

pytestmark = pytest.mark.spark

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
TOTAL = ReducingStateDescriptor("total", reducers.SUM, value_type=int)
SCHEMA = "user string, amount bigint, batch_file int"
FAIL_TASK_IN_FILE = 4    # the first attempt of one task fails in this micro-batch
FAIL_DRIVER_IN_FILE = 6  # foreachBatch fails after the state of this micro-batch committed


def per_user(user, rows, ctx):
    tc = TaskContext.get()
    if int(rows["batch_file"].iloc[0]) == FAIL_TASK_IN_FILE and tc.attemptNumber() == 0 \
            and tc.partitionId() == 0:
        raise RuntimeError("injected task failure")
    count, total = ctx.state("count"), ctx.state("total")
    count.update(count.value() + len(rows))
    for amount in rows["amount"].tolist():
        total.add(amount)
    return [(user, count.value(), total.get(), ctx.batch_id)]


def write_input(folder, files=10, rows=400, users=60):
    rng = np.random.default_rng(11)
    frames = []
    os.makedirs(folder)
    for i in range(files):
        pdf = pd.DataFrame({"user": [f"user-{u}" for u in rng.integers(0, users, rows)],
                            "amount": rng.integers(1, 1000, rows).astype("int64"),
                            "batch_file": np.full(rows, i, dtype="int32")})
        pdf.to_parquet(os.path.join(folder, f"part-{i:03d}.parquet"), index=False)
        frames.append(pdf)
    return pd.concat(frames)


def run_query(spark, source, base, flag):
    state = os.path.join(base, "state")

    def each_batch(batch_df, batch_id):
        out = apply_with_state(batch_df, "user", per_user,
                               "user string, count long, total long, batch long",
                               [COUNT, TOTAL], state, batch_id, num_partitions=3)
        out.write.mode("overwrite").parquet(os.path.join(base, "out", f"batch={batch_id}"))
        files = {r[0] for r in batch_df.select("batch_file").distinct().collect()}
        if FAIL_DRIVER_IN_FILE in files and not os.path.exists(flag):
            open(flag, "w").close()  # the state of this batch is committed, Spark's is not
            raise RuntimeError("driver failed after the state commit")
        mark_batch_committed(state, batch_id, 3)

    query = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
             .writeStream.foreachBatch(each_batch)
             .option("checkpointLocation", os.path.join(base, "stream"))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def test_streaming_query_with_task_failure_and_replayed_batch_counts_once(spark, tmp_path):
    source, base = str(tmp_path / "in"), str(tmp_path / "job")
    flag = str(tmp_path / "driver-failed-once")
    everything = write_input(source)
    with pytest.raises(Exception, match="driver failed after the state commit"):
        run_query(spark, source, base, flag)
    run_query(spark, source, base, flag)  # restarts from the checkpoint, replays the batch

    outputs = spark.read.parquet(os.path.join(base, "out")).toPandas()
    assert sorted(outputs["batch"].unique()) == list(range(10))  # one micro-batch per file
    latest = outputs.sort_values("batch").groupby("user").last()
    want = everything.groupby("user")["amount"].agg(["count", "sum"])
    assert sorted(latest.index) == sorted(want.index)
    for user in want.index:
        assert (latest.loc[user, "count"], latest.loc[user, "total"]) == \
            (want.loc[user, "count"], want.loc[user, "sum"]), user
    state = read_state(spark, os.path.join(base, "state"), "total").toPandas()
    assert dict(zip(state["key"], state["value"].astype(int))) == want["sum"].to_dict()
