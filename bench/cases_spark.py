"""One stateful Spark job, four ways, on the same generated data.

The job: events (user bigint, amount double) arrive in ``spark_batches`` batches; per user it
keeps a running event count and amount sum and, for every batch, emits (user, count, total)
for each user the batch touched, written to Parquet per batch.

* ``spark.grouped``: stateengine ``apply_with_state`` (one Python call per key; ValueState
  count, native ReducingState SUM), driven batch by batch like a ``foreachBatch`` body.
* ``spark.vectorized``: stateengine ``map_with_state`` (one call per partition; ``get_many`` /
  ``put_many`` / ``add_many`` over numpy columns).
* ``spark.applyInPandasWithState``: Spark's GroupState API over a streaming file source
  (one Parquet file per micro-batch), default state store provider.
* ``spark.transformWithStateInPandas``: Spark's StatefulProcessor API with a ValueState on the
  RocksDB state store provider, same source.
* ``spark.processor``: the same StatefulProcessor class, unchanged, run by stateengine's
  ``transform_with_state_in_pandas``, driven batch by batch like ``spark.grouped``.

All run on ``local[2]`` with 2 shuffle / state partitions, bound to 127.0.0.1. Each reports
input rows per second over the whole job (first batch read to last batch written). Every
variant's final per-user (count, total) is checked against pandas on the input. The full
run first runs all four on a small warm-up data set so JIT and worker start-up do not land on
whichever variant happens to go first.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any, Callable

import numpy as np
import pandas as pd

from harness import Bench, Result, timed_case

OUTPUT_SCHEMA = "user long, count long, total double"
PARTITIONS = 2
VARIANTS = ["grouped", "vectorized", "applyInPandasWithState", "transformWithStateInPandas",
            "processor"]
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def case_names() -> list[str]:
    return [f"spark.{v}" for v in VARIANTS]


# ---- data ---------------------------------------------------------------------------------------

def write_stream_source(folder: str, frames: list[pd.DataFrame]) -> None:
    """``frames`` as one Parquet file each in ``folder`` (created), their modification times
    increasing in list order: the order Spark's file source reads them in (one per trigger
    with ``maxFilesPerTrigger=1``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder)
    now = time.time() - len(frames) - 10
    for i, pdf in enumerate(frames):
        path = os.path.join(folder, f"part-{i:04d}.parquet")
        pq.write_table(pa.Table.from_pandas(pdf, preserve_index=False), path)
        os.utime(path, (now + i, now + i))


def generate(root: str, rows: int, keys: int, batches: int, seed: int) -> tuple[list[str], str, pd.DataFrame]:
    """Parquet files, one per batch (each also placed in a streaming source directory with
    increasing modification times, the order Spark's file source reads them in)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    batch_dir, stream_dir = os.path.join(root, "batches"), os.path.join(root, "stream")
    paths, frames = [], []
    per = rows // batches
    for i in range(batches):
        pdf = pd.DataFrame({"user": rng.integers(0, keys, per).astype(np.int64),
                            # whole numbers: float sums are exact in any order
                            "amount": rng.integers(0, 1000, per).astype(np.float64)})
        frames.append(pdf)
        d = os.path.join(batch_dir, f"batch={i}")
        os.makedirs(d)
        pq.write_table(pa.Table.from_pandas(pdf, preserve_index=False),
                       os.path.join(d, "part-0.parquet"))
        paths.append(d)
    write_stream_source(stream_dir, frames)
    expected = pd.concat(frames).groupby("user").agg(count=("amount", "size"),
                                                     total=("amount", "sum"))
    return paths, stream_dir, expected


# ---- the four jobs --------------------------------------------------------------------------

def _states() -> list[Any]:
    from stateengine import ReducingStateDescriptor, ValueStateDescriptor, reducers

    return [ValueStateDescriptor("count", value_type=int, default=0),
            ReducingStateDescriptor("total", reducers.SUM, value_type=float)]


def run_grouped(spark: Any, paths: list[str], stream_dir: str, work: str) -> None:
    from stateengine.spark import apply_with_state, mark_batch_committed

    def per_user(user: int, rows: pd.DataFrame, ctx: Any) -> list[tuple]:
        count, total = ctx.state("count"), ctx.state("total")
        n = count.value() + len(rows)
        count.update(n)
        total.add(float(rows["amount"].sum()))
        return [(user, n, total.get())]

    checkpoint = os.path.join(work, "state")
    for i, path in enumerate(paths):
        out = apply_with_state(spark.read.parquet(path), "user", per_user, OUTPUT_SCHEMA,
                               _states(), checkpoint=checkpoint, batch_id=i,
                               num_partitions=PARTITIONS, local_dir=os.path.join(work, "local"))
        out.write.mode("overwrite").parquet(os.path.join(work, "out", f"batch={i}"))
        mark_batch_committed(checkpoint, i, PARTITIONS)


def run_vectorized(spark: Any, paths: list[str], stream_dir: str, work: str) -> None:
    from stateengine.spark import map_with_state, mark_batch_committed

    def per_partition(rows: pd.DataFrame, ctx: Any) -> pd.DataFrame:
        users = rows["user"].to_numpy()
        count, total = ctx.state("count"), ctx.state("total")
        distinct, n = np.unique(users, return_counts=True)
        before, _ = count.get_many(distinct)
        after = before + n
        count.put_many(distinct, after)
        total.add_many(users, rows["amount"].to_numpy())
        sums, _ = total.get_many(distinct)
        return pd.DataFrame({"user": distinct, "count": after, "total": sums})

    checkpoint = os.path.join(work, "state")
    for i, path in enumerate(paths):
        out = map_with_state(spark.read.parquet(path), "user", per_partition, OUTPUT_SCHEMA,
                             _states(), checkpoint=checkpoint, batch_id=i,
                             num_partitions=PARTITIONS, local_dir=os.path.join(work, "local"))
        out.write.mode("overwrite").parquet(os.path.join(work, "out", f"batch={i}"))
        mark_batch_committed(checkpoint, i, PARTITIONS)


def _stream(spark: Any, stream_dir: str) -> Any:
    return (spark.readStream.schema("user long, amount double")
            .option("maxFilesPerTrigger", 1).parquet(stream_dir))


def _sink(work: str) -> Callable[[Any, int], None]:
    out = os.path.join(work, "out")

    def write(df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(os.path.join(out, f"batch={batch_id}"))
    return write


def _run_query(grouped_out: Any, work: str) -> None:
    query = (grouped_out.writeStream.outputMode("update").foreachBatch(_sink(work))
             .option("checkpointLocation", os.path.join(work, "stream-checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def run_apply_in_pandas_with_state(spark: Any, paths: list[str], stream_dir: str, work: str) -> None:
    from pyspark.sql.streaming.state import GroupStateTimeout

    def per_user(key: tuple, pdfs: Any, state: Any) -> Any:
        count, total = state.get if state.exists else (0, 0.0)
        for pdf in pdfs:
            count += len(pdf)
            total += float(pdf["amount"].sum())
        state.update((count, total))
        yield pd.DataFrame({"user": [key[0]], "count": [count], "total": [total]})

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", HDFS_PROVIDER)
    out = _stream(spark, stream_dir).groupBy("user").applyInPandasWithState(
        per_user, OUTPUT_SCHEMA, "count long, total double", "update",
        GroupStateTimeout.NoTimeout)
    _run_query(out, work)


def running_totals() -> Any:
    """The StatefulProcessor both transformWithState variants run: a ValueState (count, total)
    per user. Defined in a function so that Spark pickles the class by value (the workers do
    not import this bench module)."""
    from pyspark.sql.streaming import StatefulProcessor

    class RunningTotals(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.acc = handle.getValueState("acc", "count long, total double")

        def handleInputRows(self, key: tuple, rows: Any, timerValues: Any) -> Any:
            count, total = self.acc.get() if self.acc.exists() else (0, 0.0)
            for pdf in rows:
                count += len(pdf)
                total += float(pdf["amount"].sum())
            self.acc.update((count, total))
            yield pd.DataFrame({"user": [key[0]], "count": [count], "total": [total]})

        def close(self) -> None:
            pass

    return RunningTotals()


def run_transform_with_state(spark: Any, paths: list[str], stream_dir: str, work: str) -> None:
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    out = _stream(spark, stream_dir).groupBy("user").transformWithStateInPandas(
        running_totals(), OUTPUT_SCHEMA, "Update", "None")
    _run_query(out, work)


def run_processor(spark: Any, paths: list[str], stream_dir: str, work: str) -> None:
    from stateengine.spark import mark_batch_committed, transform_with_state_in_pandas

    checkpoint = os.path.join(work, "state")
    processor = running_totals()
    for i, path in enumerate(paths):
        out = transform_with_state_in_pandas(
            spark.read.parquet(path), processor, "user", OUTPUT_SCHEMA, checkpoint, batch_id=i,
            num_partitions=PARTITIONS, local_dir=os.path.join(work, "local"))
        out.write.mode("overwrite").parquet(os.path.join(work, "out", f"batch={i}"))
        mark_batch_committed(checkpoint, i, PARTITIONS)


RUNNERS: dict[str, Callable[..., None]] = {
    "grouped": run_grouped, "vectorized": run_vectorized,
    "applyInPandasWithState": run_apply_in_pandas_with_state,
    "transformWithStateInPandas": run_transform_with_state,
    "processor": run_processor,
}
LABELS = {
    "grouped": "stateengine apply_with_state (per key)",
    "vectorized": "stateengine map_with_state (batch ops)",
    "applyInPandasWithState": "Spark applyInPandasWithState (GroupState, HDFS-backed store)",
    "transformWithStateInPandas": "Spark transformWithStateInPandas (ValueState, RocksDB store)",
    "processor": "stateengine transform_with_state_in_pandas (the same StatefulProcessor)",
}


# ---- driver -------------------------------------------------------------------------------------

def session() -> Any:
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only
    spark = (SparkSession.builder.master("local[2]").appName("stateengine-bench")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(PARTITIONS))
             .config("spark.default.parallelism", str(PARTITIONS))
             .config("spark.sql.adaptive.enabled", "false")  # keep 2 state partitions
             .config("spark.python.worker.reuse", "true")
             .config("spark.driver.memory", "3g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def final_totals(spark: Any, work: str) -> pd.DataFrame:
    out = spark.read.parquet(os.path.join(work, "out")).toPandas()
    last = out.sort_values(["user", "count"]).groupby("user").tail(1)
    return last.set_index("user")[["count", "total"]].sort_index()


def mismatch(got: pd.DataFrame, expected: pd.DataFrame) -> str | None:
    if len(got) != len(expected) or not (got.index == expected.index).all():
        return f"{len(got)} users in the output, {len(expected)} in the input"
    if not (got["count"].to_numpy() == expected["count"].to_numpy()).all():
        return "per-user counts differ"
    if not np.allclose(got["total"].to_numpy(), expected["total"].to_numpy(), rtol=0, atol=1e-6):
        return "per-user totals differ"
    return None


def run_all(bench: Bench, spark: Any, root: str, rows: int, keys: int, batches: int,
            record: bool) -> None:
    paths, stream_dir, expected = generate(os.path.join(root, "data"), rows, keys, batches,
                                           seed=21)
    for name in VARIANTS:
        if not bench.wants(f"spark.{name}"):
            continue
        work = os.path.join(root, name)
        os.makedirs(work)
        with timed_case(bench):
            t0 = time.perf_counter()
            RUNNERS[name](spark, paths, stream_dir, work)
            secs = time.perf_counter() - t0
            problem = mismatch(final_totals(spark, work), expected)
            if record:
                bench.add(Result(f"spark.{name}", "spark", rows / secs, "rows/s",
                                 LABELS[name], {"seconds": round(secs, 2), "rows": rows,
                                                "keys": keys, "batches": batches,
                                                "results_match_pandas": problem is None}))
        if problem:
            bench.errors[f"spark.{name}"] = f"spark.{name}: {problem}"
            print(f"  spark.{name}: RESULTS DIFFER: {problem}", flush=True)
        shutil.rmtree(work, ignore_errors=True)


def run(bench: Bench) -> None:
    s = bench.scale
    spark = session()
    try:
        if s.name == "full":  # warm-up on small data, not recorded
            run_all(bench, spark, bench.tmpdir("spark-warmup"), 20_000, 2_000, 2, record=False)
        run_all(bench, spark, bench.tmpdir("spark"), s.spark_rows, s.spark_keys, s.spark_batches,
                record=True)
    finally:
        spark.stop()
        from stateengine.spark.runtime import drop_cached

        drop_cached()
