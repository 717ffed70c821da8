"""One micro-batch on stateengine.testing's local harness against the same batch on a local
SparkSession: the bench's StatefulProcessor (RunningTotals) through ``ProcessorHarness``,
through ``transform_with_state_in_pandas`` on Spark, and through Spark's own
``transformWithStateInPandas``; and an ``apply_with_state`` function through ``ApplyHarness``
and through ``apply_with_state`` on Spark. Each batch brings every key's rows again (state
read and written per key); each variant runs ``--warmup`` batches, then the median of
``--batches`` timed batches is reported, with the load average before and after. Two batch
sizes by default: a unit test's (10 keys, 50 rows), where Spark's fixed cost per batch shows,
and a larger one (200 keys, 1,000 rows), where the processor's own pandas work per key
(a DataFrame per output row) takes a growing share of the harness's time. ``harness.apply
peek+batch`` reads one key's state before each batch, as a test checking state between
batches does (the next batch then restores that partition).

    python bench/harness_speed.py
    python bench/harness_speed.py --sizes 20x100,2000x10000 --batches 7
    python bench/harness_speed.py --harness-only --batches 100 --warmup 5
    python bench/harness_speed.py --harness-only --no-shm   # state on the temporary folder's disk
    python bench/harness_speed.py --sizes 10x50 --stream    # also as streaming micro-batches
    python bench/harness_speed.py --rocksdb debian          # Debian's librocksdb (default: the wheel's)

``--stream`` also runs the batches as micro-batches of streaming queries on the same session
(one Parquet file per batch, Spark's own ``durationMs.triggerExecution`` per batch): what a
user's local test of a streaming query waits for, offset and commit logs included.

Spark runs on local[2] with 2 shuffle partitions, the harness with 2 partitions (both
``HARNESS_BENCH_PARTITIONS``). Both run on the release wheel's RocksDB unless ``--rocksdb
debian`` (bench/builds.py), as a user's tests do after ``pip install stateengine``. Results go
to bench/results/harness-speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import builds  # noqa: E402

OUT = "user long, count long, total double"
PARTITIONS = int(os.environ.get("HARNESS_BENCH_PARTITIONS", "2"))


# (Spark variant, harness variant) pairs whose times are compared; the streaming ones with
# --stream only.
RATIOS = [("spark.processor", "harness.processor"),
          ("spark.transformWithStateInPandas", "harness.processor"),
          ("spark.apply_with_state", "harness.apply"),
          ("spark.stream.processor", "harness.processor"),
          ("spark.stream.transformWithStateInPandas", "harness.processor"),
          ("spark.stream.apply_with_state", "harness.apply")]


def batches(keys: int, rows: int, n: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(3)
    return [pd.DataFrame({"user": np.arange(rows, dtype=np.int64) % keys,
                          "amount": rng.random(rows)}) for _ in range(n)]


def timed(run: Callable[[int, pd.DataFrame], int], data: list[pd.DataFrame],
          warmup: int) -> dict[str, Any]:
    """Median seconds per batch of run(batch_id, rows) over the batches after the warm-up."""
    seconds = []
    for b, pdf in enumerate(data):
        t0 = time.perf_counter()
        emitted = run(b, pdf)
        if b >= warmup:
            seconds.append(time.perf_counter() - t0)
        assert emitted > 0
    return {"median_s": statistics.median(seconds), "runs_s": [round(s, 5) for s in seconds]}


def count_and_total(user: Any, rows: pd.DataFrame, ctx: Any) -> list[tuple]:
    acc = ctx.state("acc")
    count, total = acc.value() or (0, 0.0)
    count += len(rows)
    total += float(rows["amount"].sum())
    acc.update((count, total))
    return [(user, count, total)]


def measure(keys: int, rows: int, n: int, warmup: int, spark: Any, root: str,
            stream: bool = False) -> dict:
    """Per-batch medians of every variant on batches of ``keys`` keys and ``rows`` rows."""
    from cases_spark import running_totals
    from stateengine import ValueStateDescriptor
    from stateengine.spark import apply_with_state, transform_with_state_in_pandas
    from stateengine.testing import ApplyHarness, ProcessorHarness

    data = batches(keys, rows, warmup + n)
    acc = ValueStateDescriptor("acc")
    where = os.path.join(root, f"{keys}x{rows}")
    results: dict[str, Any] = {}
    with ProcessorHarness(running_totals(), "user", OUT, num_partitions=PARTITIONS) as h:
        results["harness.processor"] = timed(lambda b, pdf: len(h.run_batch(pdf)), data, warmup)
    with ApplyHarness(count_and_total, "user", OUT, [acc], num_partitions=PARTITIONS) as h:
        results["harness.apply"] = timed(lambda b, pdf: len(h.run_batch(pdf)), data, warmup)
    # a test that reads state between batches: the peek aborts its partition's store, so the
    # next batch restores that partition from the checkpoint (no Spark counterpart)
    with ApplyHarness(count_and_total, "user", OUT, [acc], num_partitions=PARTITIONS) as h:
        results["harness.apply peek+batch"] = timed(
            lambda b, pdf: (b and h.peek("acc", 0), len(h.run_batch(pdf)))[1], data, warmup)
    if spark is None:  # --harness-only
        print(f"-- {keys} keys, {rows} rows per batch")
        for name, r in results.items():
            print(f"{name:36s} {r['median_s'] * 1e3:9.2f} ms per batch")
        return {"keys": keys, "rows": rows, "results": results}
    results["spark.processor"] = timed(
        lambda b, pdf: len(transform_with_state_in_pandas(
            spark.createDataFrame(pdf), running_totals(), "user", OUT,
            os.path.join(where, "processor"), batch_id=b,
            num_partitions=PARTITIONS).collect()), data, warmup)
    results["spark.apply_with_state"] = timed(
        lambda b, pdf: len(apply_with_state(
            spark.createDataFrame(pdf), "user", count_and_total, OUT, [acc],
            os.path.join(where, "apply"), b, num_partitions=PARTITIONS).collect()),
        data, warmup)
    # Spark's own operator on a batch DataFrame (no state carried between calls)
    results["spark.transformWithStateInPandas"] = timed(
        lambda b, pdf: len(spark.createDataFrame(pdf).groupBy("user")
                           .transformWithStateInPandas(running_totals(), OUT, "Update",
                                                       "None").collect()), data, warmup)
    if stream:
        results.update(streamed(spark, data, warmup, where))
    ratios = {f"{spark_side} / {harness_side}":
              results[spark_side]["median_s"] / results[harness_side]["median_s"]
              for spark_side, harness_side in RATIOS if spark_side in results}
    print(f"-- {keys} keys, {rows} rows per batch")
    for name, r in results.items():
        print(f"{name:36s} {r['median_s'] * 1e3:9.1f} ms per batch")
    for name, ratio in ratios.items():
        print(f"{name:55s} {ratio:7.1f}x")
    return {"keys": keys, "rows": rows, "results": results,
            "ratios": {k: round(v, 1) for k, v in ratios.items()}}


def streamed(spark: Any, data: list[pd.DataFrame], warmup: int, where: str) -> dict[str, Any]:
    """The same batches as micro-batches of streaming queries, as a user's local test of a
    stateful query runs them: one Parquet file per batch, read one file per trigger
    (``Trigger.AvailableNow``); a batch's time is Spark's ``durationMs.triggerExecution``
    (offset and commit logs included, the query's start not), median over the batches after
    the warm-up. stateengine's processor and apply step with ``query_checkpoint=``, and Spark's
    own transformWithStateInPandas (RocksDB state store provider)."""
    from cases_spark import ROCKSDB_PROVIDER, running_totals, write_stream_source
    from stateengine import ValueStateDescriptor
    from stateengine.spark import apply_with_state, transform_with_state_in_pandas

    source = os.path.join(where, "stream-source")
    write_stream_source(source, data)

    def run(name: str, build: Callable[[Any, str], Any]) -> dict[str, Any]:
        work = os.path.join(where, name)
        stream = (spark.readStream.schema("user long, amount double")
                  .option("maxFilesPerTrigger", 1).parquet(source))
        query = (build(stream, work).writeStream.format("noop").outputMode("update")
                 .option("checkpointLocation", os.path.join(work, "query"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"{name}: {query.exception()}")
        seconds = [p["durationMs"]["triggerExecution"] / 1e3 for p in query.recentProgress
                   if p["numInputRows"] > 0]
        if len(seconds) != len(data):
            raise RuntimeError(f"{name}: {len(seconds)} batches with rows, not {len(data)}")
        timed_s = seconds[warmup:]
        return {"median_s": statistics.median(timed_s),
                "runs_s": [round(x, 5) for x in timed_s]}

    acc = ValueStateDescriptor("acc")
    out = {
        "spark.stream.processor": run("stream-processor", lambda df, work:
            transform_with_state_in_pandas(df, running_totals(), "user", OUT,
                                           os.path.join(work, "state"),
                                           query_checkpoint=os.path.join(work, "query"),
                                           num_partitions=PARTITIONS)),
        "spark.stream.apply_with_state": run("stream-apply", lambda df, work:
            apply_with_state(df, "user", count_and_total, OUT, [acc],
                             os.path.join(work, "state"), num_partitions=PARTITIONS,
                             query_checkpoint=os.path.join(work, "query"))),
    }
    previous = spark.conf.get("spark.sql.streaming.stateStore.providerClass", None)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    try:
        out["spark.stream.transformWithStateInPandas"] = run(
            "stream-spark", lambda df, work: df.groupBy("user").transformWithStateInPandas(
                running_totals(), OUT, "Update", "None"))
    finally:
        if previous is None:
            spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
        else:
            spark.conf.set("spark.sql.streaming.stateStore.providerClass", previous)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10x50,200x1000",
                   help="batch sizes as KEYSxROWS, comma-separated")
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", default=None,
                   help="JSON results (default bench/results/harness-speed.json; none with "
                        "--harness-only)")
    p.add_argument("--harness-only", action="store_true",
                   help="the harness variants alone, no SparkSession: to compare two versions "
                        "of the harness over many batches (--batches 100 --warmup 5)")
    p.add_argument("--stream", action="store_true",
                   help="also the same batches as micro-batches of streaming queries on the "
                        "local SparkSession (Spark's own time per batch, durationMs)")
    p.add_argument("--no-shm", action="store_true",
                   help="the harnesses keep their state in the default temporary folder, as "
                        "where /dev/shm is missing or small (a container's), not in /dev/shm")
    p.add_argument("--rocksdb", choices=("debian", "release"), default=None,
                   help="the librocksdb measured: the release wheel's (default) or Debian's")
    args = p.parse_args()
    args.build = builds.describe(builds.use(args.rocksdb, False, __file__))["rocksdb"]
    print(f"build: {args.build}", flush=True)  # builds.use may have restarted this script
    if args.out is None and not args.harness_only:
        args.out = os.path.join(HERE, "results", "harness-speed.json")
    sizes = [tuple(int(x) for x in size.split("x")) for size in args.sizes.split(",")]
    # builds.use set SPARK_LOCAL_IP, PYSPARK_PYTHON and PYTHONPATH (the build's root) for
    # the workers; the bench's own modules are found there too
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x] + [HERE])
    from pyspark.sql import SparkSession

    if args.no_shm:
        from stateengine.testing import harness

        harness._memory_dir = lambda: None
    load_before = [round(x, 2) for x in os.getloadavg()]
    root = tempfile.mkdtemp(prefix="stateengine-harness-bench-")
    if args.harness_only:
        runs = [measure(k, r, args.batches, args.warmup, None, root) for k, r in sizes]
        shutil.rmtree(root, ignore_errors=True)
        _report(args, runs, load_before)
        return
    spark = (SparkSession.builder.master("local[2]").appName("harness-speed")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(PARTITIONS))
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        runs = [measure(k, r, args.batches, args.warmup, spark, root, args.stream)
                for k, r in sizes]
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    _report(args, runs, load_before)


def _report(args: argparse.Namespace, runs: list[dict], load_before: list[float]) -> None:
    load_after = [round(x, 2) for x in os.getloadavg()]
    print(f"load average before {load_before}, after {load_after} ({os.cpu_count()} CPUs)")
    if args.out is None:
        return
    report = {"rocksdb": args.build, "batches": args.batches, "warmup": args.warmup,
              "partitions": PARTITIONS, "no_shm": args.no_shm,
              "sizes": runs, "load_before": load_before, "load_after": load_after}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
