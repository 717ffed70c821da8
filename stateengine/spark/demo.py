"""The main job: a Structured Streaming query with keyed state, timers and checkpoints.

A ``rate`` source produces purchase events for many users; users are active in bursts. The
stateful step is part of the query: ``apply_with_state`` on the streaming DataFrame keeps, per
user, running totals (ValueState, native ReducingState SUM) and the open session (ValueState);
an event-time timer closes a session once Spark's watermark (``withWatermark``, read by each
task from the query's offset log) passes its last event plus the gap, and the closed session
is emitted. The sink writes each micro-batch's output to Parquet, one directory per batch
(rewritten if a batch is replayed), and prints a line: throughput, then the batch's state
metrics (``state_metrics``: keys, live bytes, rows written, timers fired, the slowest
partition's commit time, how each partition's state was loaded). Stop it and start it again with the same
``--checkpoint``: the query resumes from its offsets and the state from the last committed
version.

    python -m stateengine.spark.demo --batches 8
    python -m stateengine.spark.demo --local-s3     # state on a local S3 server (moto)

``--checkpoint`` may be an ``s3://bucket/path`` URI (credentials and endpoint from the usual
AWS variables): the keyed state goes there, while Spark's own stream checkpoint and the Parquet
outputs stay in ``--work-dir`` (pip's pyspark has no S3 connector).
``--local-s3`` starts moto's S3 server on 127.0.0.1 for the run and puts the checkpoint at
``s3://stateengine/demo``; the server keeps objects in memory, so each such run starts afresh.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from .. import ReducingStateDescriptor, ValueStateDescriptor, reducers
from ..checkpoint.storage import CheckpointStorage

OUTPUT_SCHEMA = ("kind string, user long, batch_events long, events long, amount double, "
                 "session_start long, session_end long, session_events long")

STATES = [
    ValueStateDescriptor("events", value_type=int, default=0),
    ReducingStateDescriptor("amount", reducers.SUM, value_type=float),
    ValueStateDescriptor("session"),  # (start ms, last event ms, events) of the open session
]


def make_functions(gap_ms: int):
    """The per-key function and the timer callback (closures over the session gap)."""

    def on_events(user: int, rows: Any, ctx: Any) -> list[tuple]:
        events = ctx.state("events")
        amount = ctx.state("amount")
        session = ctx.state("session")
        times = np.sort(rows["event_ms"].to_numpy())
        events.update(events.value() + len(rows))
        amount.add(float(rows["amount"].sum()))
        out = [("update", user, len(rows), events.value(), round(amount.get(), 2), None, None,
                None)]
        # A micro-batch may hold the end of one burst and the start of the next: every gap
        # longer than gap_ms inside it (or since the open session's last event) ends a session.
        cuts = np.flatnonzero(np.diff(times) > gap_ms) + 1
        runs = np.split(times, cuts)
        start, last, n = session.value() or (int(times[0]), int(times[0]), 0)
        if n:
            ctx.timers.delete_event_time_timer(last + gap_ms)
            if int(runs[0][0]) > last + gap_ms:  # the open session ended before these rows
                out.append(("session", user, None, None, None, start, last, n))
                start, n = int(runs[0][0]), 0
        for run in runs[:-1]:
            out.append(("session", user, None, None, None, start, int(run[-1]), n + len(run)))
            start, n = None, 0
        tail = runs[-1]
        start = int(tail[0]) if start is None else start
        last = int(tail[-1])
        session.update((start, last, n + len(tail)))
        ctx.timers.register_event_time_timer(last + gap_ms)  # closes it if no event comes
        return out

    def on_timer(user: int, timer: Any, ctx: Any) -> list[tuple]:
        session = ctx.state("session")
        start, last, n = session.value()
        session.clear()
        return [("session", user, None, None, None, start, last, n)]

    return on_events, on_timer


class StopDemo(Exception):
    """Raised by foreachBatch to end the query after the requested number of batches."""


class Progress:
    """One line per batch, plus the resume point."""

    def __init__(self) -> None:
        self.started = time.time()
        self.rows = 0

    def line(self, batch_id: int, rows: int, seconds: float, updates: int, closed: int,
             watermark: int | None, partitions: int, state: Any = None) -> None:
        self.rows += rows
        rate = rows / seconds if seconds > 0 else 0.0
        wm = "-" if watermark is None else time.strftime("%H:%M:%S", time.localtime(watermark / 1000))
        print(f"batch {batch_id:>4} | {rows:>7} rows | {rate:>9,.0f} rows/s | {updates:>6} users "
              f"updated | {closed:>5} sessions closed | watermark {wm} | {partitions} partitions "
              f"| {seconds:5.2f}s" + (f" | {state_part(state)}" if state is not None else ""),
              flush=True)


def state_part(m: Any) -> str:
    """The batch's state metrics (stateengine.spark.state_metrics) in one line part."""
    t = m.totals
    loads = ", ".join(f"{kind} {n}" for kind, n in sorted(t["loads"].items()))
    return (f"state | {t['keys']:>6} keys | {t['live_bytes'] / 1e6:6.2f} MB | "
            f"{t['rows_written']:>6} rows written | {t['timers_fired']:>5} timers fired | "
            f"commit {t['commit_ms']:4.0f} ms | load {loads}")


def _join(uri: str, sub: str) -> str:
    """uri/sub, keeping a URI's query options at the end."""
    base, _, query = uri.partition("?")
    return f"{base.rstrip('/')}/{sub}" + (f"?{query}" if query else "")


def _quiet_intentional_stop(spark: Any) -> None:
    """The query ends by raising StopDemo; Spark would log that as an error with a stack trace.
    Real failures still reach us through awaitTermination. (The demo's own classic session
    setup; the library never touches the JVM.)"""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.OFF
    for name in ("org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
                 "org.apache.spark.sql.execution.streaming.MicroBatchExecution"):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)


def run(args: argparse.Namespace) -> int:
    # The demo's own session: its Python workers run this interpreter (which has stateengine)
    # unless the environment chose one.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, never a public address
    import pyarrow.fs as pafs
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from . import apply_with_state, batch_times, mark_batch_committed, read_state, state_metrics

    remote = "://" in args.checkpoint and not args.checkpoint.startswith("file://")
    checkpoint = args.checkpoint if remote else os.path.abspath(args.checkpoint)
    # Spark's stream checkpoint and the outputs: beside the state, or in a local directory
    work = checkpoint if not remote else os.path.abspath(
        args.work_dir or (tempfile.mkdtemp(prefix="stateengine-demo-") if args.local_s3
                          else "demo-work"))
    storage = CheckpointStorage(checkpoint)
    state_dir = _join(checkpoint, "state") if remote else os.path.join(checkpoint, "state")
    query_dir = os.path.join(work, "stream")
    spark = (SparkSession.builder.master(args.master).appName("stateengine-demo")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(args.partitions))
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    _quiet_intentional_stop(spark)
    on_events, on_timer = make_functions(args.gap_ms)
    progress = Progress()
    processed = []

    events = (spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second).load()
              .withColumn("event_ms", (F.col("timestamp").cast("double") * 1000).cast("long"))
              .withColumn("user", (F.col("value") * 1000003 % args.users).cast("long"))
              # users are active in bursts: 6 s on, 12 s off, shifted per user
              .where(((F.col("event_ms") / 6000).cast("long") + F.col("user")) % 3 == 0)
              .withColumn("amount", (F.col("value") * 7919 % 1000) / 10.0)
              .select("user", "event_ms", "amount", "timestamp")
              .withWatermark("timestamp", f"{args.lateness_ms} milliseconds"))
    # The stateful step inside the query: a streaming DataFrame in, a streaming DataFrame out.
    sessions = apply_with_state(events, "user", on_events, OUTPUT_SCHEMA, STATES,
                                checkpoint=state_dir, num_partitions=args.partitions,
                                on_timer=on_timer, operator_id="sessions",
                                query_checkpoint=query_dir)

    def write_batch(batch_df: Any, batch_id: int) -> None:
        if len(processed) >= args.batches:
            # Ends the query before this batch's stateful step runs (it is lazy); Spark has not
            # committed the batch, so the next run replays it: nothing is lost or counted twice.
            raise StopDemo(f"stopping before batch {batch_id} after {args.batches} batches")
        t0 = time.time()
        target = os.path.join(work, "output", f"batch={batch_id}")
        batch_df.write.mode("overwrite").parquet(target)  # runs the stateful step once
        # the batch's own session: nothing in the query path needs the driver's SparkContext
        written = (batch_df.sparkSession.read.parquet(target).groupBy("kind")
                   .agg(F.count("*").alias("n"), F.sum("batch_events").alias("events")).collect())
        counts = {r["kind"]: (r["n"], r["events"] or 0) for r in written}
        mark_batch_committed(state_dir, batch_id, args.partitions, "sessions")
        watermark, _ = batch_times(query_dir, batch_id)
        # what the batch's commits sealed into their manifests, read from the checkpoint
        state = state_metrics(state_dir, batch_id, "sessions")
        progress.line(batch_id, counts.get("update", (0, 0))[1], time.time() - t0,
                      counts.get("update", (0, 0))[0], counts.get("session", (0, 0))[0],
                      watermark or None, args.partitions, state)
        processed.append(batch_id)

    query = (sessions.writeStream.foreachBatch(write_batch)
             .option("checkpointLocation", query_dir)
             .trigger(processingTime=f"{args.trigger_ms} milliseconds").start())
    print(f"stateengine demo: {args.rows_per_second} events/s over {args.users} users, "
          f"{args.partitions} partitions, checkpoint {storage.location}"
          + (f" (Spark's stream checkpoint and outputs in {work})" if remote else ""), flush=True)
    try:
        query.awaitTermination()
    except Exception as e:  # StreamingQueryException wrapping StopDemo, or a real failure
        if "StopDemo" not in str(e):
            print(f"query failed: {e}", file=sys.stderr)
            return 1
    finally:
        query.stop()
    sessions_closed = spark.read.parquet(os.path.join(work, "output")) \
        .where("kind = 'session'")
    top = (read_state(spark, state_dir, "events", operator_id="sessions", key_names=["user"])
           .orderBy(F.col("value").desc()).limit(3).collect())
    print(f"done: {len(processed)} batches this run (batch ids {processed[0] if processed else '-'}"
          f"..{processed[-1] if processed else '-'}), {progress.rows} rows in "
          f"{time.time() - progress.started:.1f}s; {sessions_closed.count()} sessions closed so "
          f"far; busiest users: " + ", ".join(f"{r['user']} ({r['value']} events)" for r in top),
          flush=True)
    if remote:
        objects = storage.fs.get_file_info(pafs.FileSelector(storage.root, recursive=True))
        files = [i for i in objects if i.type == pafs.FileType.File]
        print(f"state on {storage.location}: {len(files)} objects, "
              f"{sum(i.size for i in files) / 1e6:.1f} MB", flush=True)
    if args.local_s3:
        print("the local S3 server keeps its objects in memory: the next --local-s3 run "
              "starts again from batch 0")
    else:
        print(f"run the same command again to resume from batch "
              f"{processed[-1] + 1 if processed else 0}")
    spark.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint directory or s3://bucket/path URI (default: "
                        "demo-checkpoint, or s3://stateengine/demo with --local-s3)")
    p.add_argument("--local-s3", action="store_true",
                   help="start a local S3 server (moto, on 127.0.0.1) for this run and keep "
                        "the checkpoint on it")
    p.add_argument("--work-dir", default=None,
                   help="with an s3:// checkpoint: the local directory for Spark's stream "
                        "checkpoint and the outputs (default: demo-work, or a fresh temporary "
                        "directory with --local-s3)")
    p.add_argument("--batches", type=int, default=8, help="micro-batches to run before stopping")
    p.add_argument("--rows-per-second", type=int, default=20000)
    p.add_argument("--users", type=int, default=5000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--gap-ms", type=int, default=3000, help="session gap")
    p.add_argument("--lateness-ms", type=int, default=1000, help="watermark delay")
    p.add_argument("--trigger-ms", type=int, default=2000)
    p.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"))
    args = p.parse_args(argv)
    if not args.local_s3:
        args.checkpoint = args.checkpoint or "demo-checkpoint"
        return run(args)
    args.checkpoint = args.checkpoint or "s3://stateengine/demo"
    if not args.checkpoint.startswith("s3://"):
        p.error(f"--local-s3 needs an s3:// checkpoint, not {args.checkpoint}")
    from ..local_s3 import LocalS3Server

    # before Spark starts, so that its Python workers inherit the endpoint and credentials
    server = LocalS3Server(bucket=urlsplit(args.checkpoint).netloc).start()
    os.environ.update(server.env())
    print(f"local S3 server (moto) on {server.endpoint}, bucket {server.bucket}", flush=True)
    try:
        return run(args)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
