"""A Structured Streaming query whose keyed state lives on S3 (the local moto server): every
task of every micro-batch restores and commits its partition at ``s3://...`` from a Spark
Python worker, which reaches the bucket with the URI alone (endpoint in its query string) and
the credentials of its environment. The job is stopped, restarted with another partition count
(rescaling through S3) and its per-key results must equal pandas over all input; the state is
then read back as a DataFrame from S3 by the executors."""

import os

import numpy as np
import pandas as pd
import pytest

from stateengine import ReducingStateDescriptor, ValueStateDescriptor, reducers
from stateengine.checkpoint.storage import CheckpointStorage
from stateengine.checkpoint.versions import VersionCatalog
from stateengine.spark import apply_with_state, mark_batch_committed, read_state

pytestmark = pytest.mark.spark

COUNT = ValueStateDescriptor("count", value_type=int, default=0)
TOTAL = ReducingStateDescriptor("total", reducers.SUM, value_type=int)
SCHEMA = "user string, amount bigint, batch_file int"


def per_user(user, rows, ctx):
    count, total = ctx.state("count"), ctx.state("total")
    count.update(count.value() + len(rows))
    total.add(int(rows["amount"].sum()))
    return [(user, count.value(), total.get(), ctx.batch_id)]


def write_input(folder, first, files, rows=300, users=40):
    rng = np.random.default_rng(first)
    frames = []
    os.makedirs(folder, exist_ok=True)
    for i in range(first, first + files):
        pdf = pd.DataFrame({"user": [f"user-{u}" for u in rng.integers(0, users, rows)],
                            "amount": rng.integers(1, 1000, rows).astype("int64"),
                            "batch_file": np.full(rows, i, dtype="int32")})
        pdf.to_parquet(os.path.join(folder, f"part-{i:03d}.parquet"), index=False)
        frames.append(pdf)
    return pd.concat(frames)


def run_query(spark, source, base, state_uri, partitions):
    def each_batch(batch_df, batch_id):
        out = apply_with_state(batch_df, "user", per_user,
                               "user string, count long, total long, batch long",
                               [COUNT, TOTAL], state_uri, batch_id, num_partitions=partitions)
        out.write.mode("overwrite").parquet(os.path.join(base, "out", f"batch={batch_id}"))
        mark_batch_committed(state_uri, batch_id, partitions)

    query = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
             .writeStream.foreachBatch(each_batch)
             .option("checkpointLocation", os.path.join(base, "stream"))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def test_streaming_state_on_s3_survives_a_restart_with_another_partition_count(spark, s3,
                                                                               tmp_path):
    source, base = str(tmp_path / "in"), str(tmp_path / "job")
    state_uri = s3.uri("job/state")
    first = write_input(source, 0, 2)
    run_query(spark, source, base, state_uri, partitions=2)
    second = write_input(source, 2, 1)
    run_query(spark, source, base, state_uri, partitions=3)  # resumes at batch 2, rescaled

    catalog = VersionCatalog(CheckpointStorage(state_uri), "default")
    assert catalog.versions() == [1, 2, 3]
    assert {n for _, n, _ in catalog.manifests(2)} == {2}
    assert {n for _, n, _ in catalog.manifests(3)} == {3}
    assert any(k.startswith("default/shared/") for k in s3.objects("job/state"))

    everything = pd.concat([first, second])
    outputs = spark.read.parquet(os.path.join(base, "out")).toPandas()
    assert sorted(outputs["batch"].unique()) == list(range(3))
    latest = outputs.sort_values("batch").groupby("user").last()
    want = everything.groupby("user")["amount"].agg(["count", "sum"])
    assert sorted(latest.index) == sorted(want.index)
    for user in want.index:
        assert (latest.loc[user, "count"], latest.loc[user, "total"]) == \
            (want.loc[user, "count"], want.loc[user, "sum"]), user
    state = read_state(spark, state_uri, "total").toPandas()
    assert dict(zip(state["key"], state["value"].astype(int))) == want["sum"].to_dict()
