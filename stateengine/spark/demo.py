"""The main job: a Structured Streaming query with keyed state, timers and checkpoints.

A ``rate`` source produces purchase events for many users; users are active in bursts. For
every micro-batch, ``foreachBatch`` runs ``apply_with_state`` which keeps, per user, running
totals (ValueState, native ReducingState SUM) and the open session (ValueState); an event-time
timer closes a session once the watermark passes its last event plus the gap, and the closed
session is emitted. Outputs go to Parquet, one directory per batch (rewritten if a batch is
replayed). Stop it and start it again with the same ``--checkpoint``: the query resumes from
its offsets and the state from the last committed version.

    python -m stateengine.spark.demo --batches 8
    python -m stateengine.spark.demo --local-s3     # state on a local S3 server (moto)

``--checkpoint`` may be an ``s3://bucket/path`` URI (credentials and endpoint from the usual
AWS variables): the keyed state and the watermarks go there, while Spark's own stream
checkpoint and the Parquet outputs stay in ``--work-dir`` (pip's pyspark has no S3 connector).
``--local-s3`` starts moto's S3 server on 127.0.0.1 for the run and puts the checkpoint at
``s3://stateengine/demo``; the server keeps objects in memory, so each such run starts afresh.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any
from urllib.parse import urlsplit

from .. import ReducingStateDescriptor, ValueStateDescriptor, reducers
from ..checkpoint.storage import CheckpointStorage

OUTPUT_SCHEMA = ("kind string, user long, events long, amount double, "
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
        times = rows["event_ms"].to_numpy()
        events.update(events.value() + len(rows))
        amount.add(float(rows["amount"].sum()))
        start, last, n = session.value() or (int(times.min()), int(times.min()), 0)
        if n:
            ctx.timers.delete_event_time_timer(last + gap_ms)
        last = max(last, int(times.max()))
        session.update((start, last, n + len(rows)))
        ctx.timers.register_event_time_timer(last + gap_ms)
        return [("update", user, events.value(), round(amount.get(), 2), None, None, None)]

    def on_timer(user: int, timer: Any, ctx: Any) -> list[tuple]:
        session = ctx.state("session")
        start, last, n = session.value()
        session.clear()
        return [("session", user, None, None, start, last, n)]

    return on_events, on_timer


class StopDemo(Exception):
    """Raised by foreachBatch to end the query after the requested number of batches."""


class Progress:
    """One line per batch, plus the resume point."""

    def __init__(self) -> None:
        self.started = time.time()
        self.rows = 0

    def line(self, batch_id: int, rows: int, seconds: float, updates: int, closed: int,
             watermark: int | None, partitions: int) -> None:
        self.rows += rows
        rate = rows / seconds if seconds > 0 else 0.0
        wm = "-" if watermark is None else time.strftime("%H:%M:%S", time.localtime(watermark / 1000))
        print(f"batch {batch_id:>4} | {rows:>7} rows | {rate:>9,.0f} rows/s | {updates:>6} users "
              f"updated | {closed:>5} sessions closed | watermark {wm} | {partitions} partitions "
              f"| {seconds:5.2f}s", flush=True)


def _join(uri: str, sub: str) -> str:
    """uri/sub, keeping a URI's query options at the end."""
    base, _, query = uri.partition("?")
    return f"{base.rstrip('/')}/{sub}" + (f"?{query}" if query else "")


def _load_watermark(storage: CheckpointStorage, batch_id: int) -> int | None:
    """The event-time high mark after batch_id - 1 (None before any data)."""
    done = sorted(int(i.base_name[:-5]) for i in storage.list_dir("watermarks")
                  if i.base_name.endswith(".json") and i.base_name[:-5].isdigit())
    earlier = [b for b in done if b < batch_id]
    if not earlier:
        return None
    return json.loads(storage.read_bytes(f"watermarks/{earlier[-1]}.json"))["max_event_ms"]


def _save_watermark(storage: CheckpointStorage, batch_id: int, max_event_ms: int | None) -> None:
    storage.write_atomic(f"watermarks/{batch_id}.json",
                         json.dumps({"max_event_ms": max_event_ms}).encode())


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
    import pyarrow.fs as pafs
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from . import apply_with_state, mark_batch_committed, read_state

    remote = "://" in args.checkpoint and not args.checkpoint.startswith("file://")
    checkpoint = args.checkpoint if remote else os.path.abspath(args.checkpoint)
    # Spark's stream checkpoint and the outputs: beside the state, or in a local directory
    work = checkpoint if not remote else os.path.abspath(
        args.work_dir or (tempfile.mkdtemp(prefix="stateengine-demo-") if args.local_s3
                          else "demo-work"))
    storage = CheckpointStorage(checkpoint)
    state_uri = _join(checkpoint, "state") if remote else os.path.join(checkpoint, "state")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, never a public address
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
              .select("user", "event_ms", "amount"))

    def per_batch(batch_df: Any, batch_id: int) -> None:
        if len(processed) >= args.batches:
            # Ends the query before this batch touches any state; Spark has not committed the
            # batch, so the next run replays it: nothing is lost or counted twice.
            raise StopDemo(f"stopping before batch {batch_id} after {args.batches} batches")
        t0 = time.time()
        batch_df = batch_df.persist()
        stats = batch_df.agg(F.count("*").alias("n"), F.max("event_ms").alias("mx")).first()
        previous = _load_watermark(storage, batch_id)
        high = max(x for x in (previous, stats["mx"]) if x is not None) if (
            previous is not None or stats["mx"] is not None) else None
        watermark = None if high is None else high - args.lateness_ms
        out = apply_with_state(
            batch_df, "user", on_events, OUTPUT_SCHEMA, STATES,
            checkpoint=state_uri, batch_id=batch_id,
            num_partitions=args.partitions, on_timer=on_timer, watermark=watermark,
            operator_id="sessions")
        target = os.path.join(work, "output", f"batch={batch_id}")
        out.write.mode("overwrite").parquet(target)
        # the batch's own session: nothing in the query path needs the driver's SparkContext
        written = batch_df.sparkSession.read.parquet(target).groupBy("kind").count().collect()
        counts = {r["kind"]: r["count"] for r in written}
        mark_batch_committed(state_uri, batch_id, args.partitions, "sessions")
        _save_watermark(storage, batch_id, high)
        batch_df.unpersist()
        progress.line(batch_id, stats["n"], time.time() - t0, counts.get("update", 0),
                      counts.get("session", 0), watermark, args.partitions)
        processed.append(batch_id)

    query = (events.writeStream.foreachBatch(per_batch)
             .option("checkpointLocation", os.path.join(work, "stream"))
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
    sessions = spark.read.parquet(os.path.join(work, "output")).where("kind = 'session'")
    top = (read_state(spark, state_uri, "events", operator_id="sessions",
                      key_names=["user"])
           .orderBy(F.col("value").desc()).limit(3).collect())
    print(f"done: {len(processed)} batches this run (batch ids {processed[0] if processed else '-'}"
          f"..{processed[-1] if processed else '-'}), {progress.rows} rows in "
          f"{time.time() - progress.started:.1f}s; {sessions.count()} sessions closed so far; "
          f"busiest users: " + ", ".join(f"{r['user']} ({r['value']} events)" for r in top),
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
