"""What the no-data-batch branch (stateengine/spark/no_data_batches.py) costs a busy stream.

The same streaming query runs three ways, differing only in ``no_data_batches=``: ``none``
(no branch), ``processing_time`` (the rate-micro-batch source) and ``event_time`` (the
dropDuplicates over the input, which reads the input a second time). The stream: a
watermarked file source, one Parquet file per micro-batch (``--rows`` rows over ``--keys``
keys each), an Trigger.AvailableNow query so batches run back to back; the step:
``apply_with_state`` keeping a count per key and moving one event-time timer per key, as a
session timeout does. Each round runs every variant once, in an order that rotates from round
to round, so drifting machine load reaches all alike; a batch's time is Spark's own
``durationMs.triggerExecution`` of the batches that read a file (not a query's first batch,
which plans and starts workers, nor the trailing batch without data). Beside it, each such
batch's CPU: the JVM's and the Python workers', their finished child processes included (the
JVM's ``readlink`` helpers), from one batch's end to the next's, recorded by a query listener;
on a shared machine the CPU moves far less with the load than the wall time does. The report:
per round, each variant's median batch time and CPU and their ratios to ``none`` in the same
round; at the end the median of those ratios and their range.

    python bench/no_data_batches.py                      # 8 rounds, 6 batches of 20k rows
    python bench/no_data_batches.py --rounds 12 --rows 50000 --keys 10000
    python bench/no_data_batches.py --variants event_time --ab-conf \
        spark.sql.streaming.checkpointFileManagerClass=<FileSystemBasedCheckpointFileManager>

``--ab-conf`` runs every variant also with one more Spark conf, interleaved with the runs
without it (docs/spark/quiet-streams.md#cost gives the class name for each Spark version).
On pyspark 3.5 leave ``processing_time`` out: its rate-micro-batch source under
``Trigger.AvailableNow`` makes the query read every file in one batch.

Runs on local[2] with 2 shuffle (and state) partitions, bound to 127.0.0.1, as
bench/cases_spark.py does, on the release wheel's RocksDB unless ``--rocksdb debian``
(bench/builds.py). Print the load average with the figures: on a shared machine the
spread between rounds says how far to trust the ratio.
"""

from __future__ import annotations

import argparse
import os
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
from cases_spark import session, write_stream_source  # noqa: E402

VARIANTS = ["none", "processing_time", "event_time"]
SCHEMA = "user bigint, amount double, t bigint"
OUT = "user bigint, count bigint"


def generate(folder: str, rows: int, keys: int, batches: int) -> None:
    """One Parquet file per batch; event times advance 10 s per batch."""
    rng = np.random.default_rng(5)
    write_stream_source(folder, [
        pd.DataFrame({"user": rng.integers(0, keys, rows).astype(np.int64),
                      "amount": rng.random(rows),
                      "t": 1_700_000_000_000 + i * 10_000 + rng.integers(0, 10_000, rows)})
        for i in range(batches)])


def count(user: Any, rows: pd.DataFrame, ctx: Any) -> list[tuple]:
    n = ctx.state("n")
    n.update((n.value() or 0) + len(rows))
    ctx.timers.register_event_time_timer(int(rows["t"].max()) + 30_000)
    return [(user, n.value())]


def expire(user: Any, timer: Any, ctx: Any) -> list[tuple]:
    return [(user, -1)]


def run_variant(spark: Any, source: str, work: str,
                variant: str) -> tuple[list[float], list[float]]:
    """(times in ms, CPU seconds) of the batches that read a file."""
    from stateengine import ValueStateDescriptor
    from stateengine.spark import apply_with_state

    query_ck = os.path.join(work, "query")
    stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
              .selectExpr("*", "timestamp_millis(t) AS ts").withWatermark("ts", "10 seconds"))
    out = apply_with_state(stream, "user", count, OUT,
                           [ValueStateDescriptor("n", value_type=int)],
                           os.path.join(work, "state"), on_timer=expire,
                           query_checkpoint=query_ck, no_data_batches=variant)
    query = (out.writeStream.format("parquet").option("path", os.path.join(work, "out"))
             .option("checkpointLocation", query_ck).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{variant}: {query.exception()}")
    times, cpus = [], []
    deadline = time.monotonic() + 30  # listener events arrive after the query's own records
    while True:
        marks = [m for m in CPU_MARKS if m[0] == str(query.id)]
        if len(marks) >= len(query.recentProgress) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for p in query.recentProgress:
        if _file_rows(p["sources"], lambda s: s["description"], lambda s: s["numInputRows"]):
            times.append(float(p["durationMs"]["triggerExecution"]))
    for before, after in zip(marks, marks[1:]):
        if after[2]:  # a batch that read a file: CPU from the previous batch's end to its end
            cpus.append(after[3] - before[3])
    return times, cpus


def _file_rows(sources: list, description: Callable, rows: Callable) -> int:
    """Rows the batch read from the Parquet input (the sources' order varies by version)."""
    return next(rows(s) for s in sources if description(s).startswith("FileStreamSource"))


CPU_MARKS: list[tuple[str, int, int, float]] = []  # (query id, batch id, file rows, CPU s)


def watch_cpu(spark: Any) -> None:
    """Records the CPU seconds of the session's JVM and Python workers (their finished
    children included: the JVM's short-lived helper processes count) as each batch ends."""
    from pyspark.sql.streaming import StreamingQueryListener
    from spark_cpu_split import cpu_seconds

    jvm = spark.sparkContext._gateway.proc.pid  # bench-only: a classic session of this process

    class Marks(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            rows = _file_rows(p.sources, lambda s: s.description, lambda s: s.numInputRows)
            CPU_MARKS.append((str(p.id), p.batchId, rows,
                              sum(cpu_seconds(jvm, with_reaped=True))))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Marks())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, of " + ", ".join(VARIANTS) + " (none is always run)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark SQL conf set on the session before the queries start")
    parser.add_argument("--ab-conf", default=None, metavar="KEY=VALUE",
                        help="also run every variant with this conf set (labels '+conf'), "
                             "interleaved with the runs without it, each compared with "
                             "'none' under the same conf")
    parser.add_argument("--rocksdb", choices=("debian", "release"), default=None,
                        help="the librocksdb measured: the release wheel's (default) or Debian's")
    args = parser.parse_args()
    build = builds.use(args.rocksdb, False, __file__)  # may restart this script
    print(f"build: {builds.describe(build)['rocksdb']}", flush=True)
    variants = ["none"] + [v for v in args.variants.split(",") if v != "none"]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    runs = [(v, v, None) for v in variants]  # (label, variant, (key, value) or None)
    if args.ab_conf:
        key, _, value = args.ab_conf.partition("=")
        runs += [(v + "+conf", v, (key, value)) for v in variants]

    root = tempfile.mkdtemp(prefix="bench-no-data-batches-")
    source = os.path.join(root, "in")
    generate(source, args.rows, args.keys, args.batches)
    spark = session()
    for kv in args.conf:
        key, _, value = kv.partition("=")
        spark.conf.set(key, value)
    watch_cpu(spark)
    labels = [label for label, _, _ in runs]
    medians: dict[str, list[float]] = {v: [] for v in labels}
    ratios: dict[str, list[float]] = {v: [] for v in labels}
    cpu_medians: dict[str, list[float]] = {v: [] for v in labels}
    cpu_ratios: dict[str, list[float]] = {v: [] for v in labels}
    base = {label: ("none+conf" if conf else "none") for label, _, conf in runs}
    try:
        run_variant(spark, source, os.path.join(root, "warm-up"), "event_time")
        for r in range(args.rounds):
            order = runs[r % len(runs):] + runs[:r % len(runs)]
            got, cpu = {}, {}
            for label, v, conf in order:
                if conf:
                    spark.conf.set(*conf)
                try:
                    times, cpus = run_variant(spark, source,
                                              os.path.join(root, f"{r}-{label}"), v)
                finally:
                    if conf:
                        spark.conf.unset(conf[0])
                if len(times) < 2 or len(cpus) < 2:
                    raise SystemExit(
                        f"{v}: the query read its input in {len(times)} batches, too few to "
                        f"time (pyspark 3.5's rate-micro-batch source under "
                        f"Trigger.AvailableNow takes every file in one batch): leave it out "
                        f"with --variants")
                got[label] = statistics.median(times[1:])
                cpu[label] = statistics.median(cpus[1:])
            for label in labels:
                medians[label].append(got[label])
                ratios[label].append(got[label] / got[base[label]])
                cpu_medians[label].append(cpu[label])
                cpu_ratios[label].append(cpu[label] / cpu[base[label]])
            print(f"round {r + 1}/{args.rounds} (load {os.getloadavg()[0]:.1f}): " + ", ".join(
                f"{v} {got[v]:.0f} ms ({ratios[v][-1]:.3f}) CPU {cpu[v] * 1e3:.0f} ms "
                f"({cpu_ratios[v][-1]:.3f})" for v in labels), flush=True)
    finally:
        spark.stop()
    print(f"\n{args.rows} rows over {args.keys} keys per batch, {args.batches} batches per "
          f"query, {args.rounds} rounds; load average {os.getloadavg()[0]:.2f} at the end"
          + (f"; +conf: {args.ab_conf}" if args.ab_conf else ""))
    print(f"{'variant':<21} {'ms/batch':>9} {'vs none':>8} {'range':>13}   "
          f"{'CPU ms/batch':>12} {'vs none':>8} {'range':>13}")
    for v in labels:
        print(f"{v:<21} {statistics.median(medians[v]):>9.0f} "
              f"{statistics.median(ratios[v]):>8.3f} "
              f"{min(ratios[v]):>6.3f}-{max(ratios[v]):<6.3f}   "
              f"{statistics.median(cpu_medians[v]) * 1e3:>12.0f} "
              f"{statistics.median(cpu_ratios[v]):>8.3f} "
              f"{min(cpu_ratios[v]):>6.3f}-{max(cpu_ratios[v]):<6.3f}")


if __name__ == "__main__":
    main()
