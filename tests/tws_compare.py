"""Runs one StatefulProcessor through Spark's own transformWithState and through stateengine,
batch by batch, for the tests that compare them.

``run_spark`` writes each input frame as one Parquet file and runs a real streaming query
(file source, ``maxFilesPerTrigger`` 1, RocksDB state store provider, ``foreachBatch`` sink)
over them; it returns Spark's micro-batches as Spark ran them (empty ones included): batch id,
the watermark and timestamp from the query's offset log, which files the batch read, and the
operator's output rows. ``run_stateengine`` replays exactly those batches through
``stateengine.spark``: the same files per batch id, the same watermark and batch timestamp.
"""

from __future__ import annotations

import glob
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@dataclass
class SparkBatch:
    batch_id: int
    watermark: int
    timestamp: int
    files: list[str]
    rows: list[tuple] = field(default_factory=list)


def sort_rows(rows: Any) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=repr)


def write_files(folder: str, frames: list[pd.DataFrame], arrow_schema: Any) -> list[str]:
    """One Parquet file per frame in the input's types, modification times increasing (the
    order the file source reads them in)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder)
    now = time.time() - len(frames) - 60
    paths = []
    for i, frame in enumerate(frames):
        path = os.path.join(folder, f"part-{i:04d}.parquet")
        pq.write_table(pa.Table.from_pandas(frame, schema=arrow_schema, preserve_index=False),
                       path)
        os.utime(path, (now + i, now + i))
        paths.append(path)
    return paths


def _offsets(checkpoint: str) -> dict[int, tuple[int, int, int | None]]:
    """batch id -> (watermark, timestamp, file source log offset) from the offset log."""
    out = {}
    for path in glob.glob(os.path.join(checkpoint, "offsets", "*")):
        name = os.path.basename(path)
        if not name.isdigit():
            continue
        lines = open(path).read().splitlines()
        meta = json.loads(lines[1])
        offset = json.loads(lines[2]).get("logOffset") if len(lines) > 2 and lines[2] else None
        out[int(name)] = (int(meta["batchWatermarkMs"]), int(meta["batchTimestampMs"]), offset)
    return out


def _committed(checkpoint: str) -> list[int]:
    folder = os.path.join(checkpoint, "commits")
    if not os.path.isdir(folder):
        return []
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit())


def run_spark(spark: Any, base: str, frames: list[pd.DataFrame], schema: str,
              plan: Callable[[Any], Any], until_extra: int | None = None,
              timeout: float = 240) -> list[SparkBatch]:
    """Runs ``plan(stream)`` (the stream read from the files) as a streaming query.

    ``until_extra=None`` uses an availableNow trigger (the query ends by itself, with the
    empty batches Spark runs for a moved watermark); an int uses a 1 s processing-time
    trigger and stops once the batch reading the last file and ``until_extra`` batches after
    it committed (in time mode ProcessingTime Spark runs an empty batch every trigger)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    source = os.path.join(base, "in")
    paths = write_files(source, frames, to_arrow_schema(spark.createDataFrame([], schema).schema))
    checkpoint = os.path.join(base, "spark-checkpoint")
    outputs: dict[int, list[tuple]] = {}

    def collect(df: Any, batch_id: int) -> None:
        outputs[batch_id] = sort_rows(df.collect())

    previous = spark.conf.get("spark.sql.streaming.stateStore.providerClass", None)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    try:
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(source)
        writer = plan(stream).writeStream.outputMode("update").foreachBatch(collect) \
            .option("checkpointLocation", checkpoint)
        if until_extra is None:
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination(timeout)
            query.stop()
        else:
            query = writer.trigger(processingTime="1 second").start()
            _stop_after(query, checkpoint, len(frames) - 1, until_extra, timeout)
    finally:
        if previous is None:
            spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
        else:
            spark.conf.set("spark.sql.streaming.stateStore.providerClass", previous)
    if query.exception() is not None:
        raise query.exception()
    offsets = _offsets(checkpoint)
    batches, last = [], -1
    for batch_id in _committed(checkpoint):
        watermark, timestamp, offset = offsets[batch_id]
        offset = last if offset is None else offset
        files = paths[last + 1:offset + 1]  # one file per log offset (maxFilesPerTrigger 1)
        last = offset
        batches.append(SparkBatch(batch_id, watermark, timestamp, files,
                                  outputs.get(batch_id, [])))
    return batches


def _stop_after(query: Any, checkpoint: str, last_file: int, extra: int,
                timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if query.exception() is not None:
            break
        done = _committed(checkpoint)
        offsets = _offsets(checkpoint)
        reading_last = [b for b in done if b in offsets and offsets[b][2] == last_file]
        if reading_last and done[-1] >= reading_last[0] + extra:
            break
        time.sleep(0.2)
    query.stop()


def run_stateengine(spark: Any, batches: list[SparkBatch], schema: str,
                    prepare: Callable[[Any], Any],
                    transform: Callable[[Any, SparkBatch], Any]) -> dict[int, list[tuple]]:
    """Replays Spark's batches: ``transform(prepare(input of the batch), batch)`` per batch."""
    out = {}
    for batch in batches:
        if batch.files:
            df = spark.read.schema(schema).parquet(*batch.files)
        else:
            df = spark.createDataFrame([], schema)
        out[batch.batch_id] = sort_rows(transform(prepare(df), batch).collect())
    return out


@dataclass
class Scenario:
    """One processor case, as both stateengine paths run it: through ``stateengine.spark`` on
    a SparkSession (``replay_spark``) and through ``stateengine.testing``'s harness without
    Spark (``replay_harness``). ``prepare`` / ``prepare_pandas`` turn the files' rows into the
    operator's input (Spark SQL / pandas, the same columns); ``input_schema`` is that input's
    schema."""

    processor: Callable[[], Any]
    grouping: list[str]
    output: str
    input_schema: str
    time_mode: str = "None"
    flavour: str = "pandas"
    initial_rows: list[tuple] | None = None
    initial_schema: str | None = None
    event_time_column: str | None = None
    num_partitions: int = 2
    prepare: Callable[[Any], Any] = lambda df: df
    prepare_pandas: Callable[[pd.DataFrame], pd.DataFrame] = lambda pdf: pdf


def replay_spark(session: Any, batches: list[SparkBatch], schema: str, sc: Scenario,
                 state_dir: str) -> dict[int, list[tuple]]:
    """Spark's batches replayed through ``stateengine.spark`` (one call per batch)."""
    from stateengine.spark import transform_with_state, transform_with_state_in_pandas

    run = transform_with_state_in_pandas if sc.flavour == "pandas" else transform_with_state
    initial = None if sc.initial_rows is None else \
        session.createDataFrame(sc.initial_rows, sc.initial_schema)
    timed = sc.time_mode != "None"
    return run_stateengine(session, batches, schema, sc.prepare, lambda df, b: run(
        df, sc.processor(), sc.grouping, sc.output, state_dir, time_mode=sc.time_mode,
        batch_id=b.batch_id, processing_time=b.timestamp if timed else None,
        watermark=b.watermark if sc.time_mode == "EventTime" else None, initial_state=initial,
        event_time_column=sc.event_time_column, num_partitions=sc.num_partitions))


def read_files(files: list[str]) -> pd.DataFrame | None:
    """A batch's input files read without Spark (None: a batch without data)."""
    import pyarrow.parquet as pq

    if not files:
        return None
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def replay_harness(batches: list[SparkBatch], sc: Scenario,
                   directory: str) -> dict[int, list[tuple]]:
    """Spark's batches replayed through ``stateengine.testing.ProcessorHarness``: no Spark,
    the same batch timestamps and watermarks."""
    from stateengine.testing import ProcessorHarness

    initial = None if sc.initial_rows is None else \
        pd.DataFrame(sc.initial_rows, columns=[c.split()[0] for c in
                                               sc.initial_schema.split(",")])
    out = {}
    with ProcessorHarness(sc.processor(), sc.grouping, sc.output, flavour=sc.flavour,
                          time_mode=sc.time_mode, input_schema=sc.input_schema,
                          initial_state=initial, initial_state_schema=sc.initial_schema,
                          event_time_column=sc.event_time_column,
                          num_partitions=sc.num_partitions, directory=directory) as h:
        for b in batches:
            rows = read_files(b.files)
            result = h.run_batch(
                None if rows is None else sc.prepare_pandas(rows),
                processing_time=b.timestamp if sc.time_mode != "None" else None,
                watermark=b.watermark if sc.time_mode == "EventTime" else None)
            out[b.batch_id] = sort_rows(result.rows)
    return out


def assert_same(batches: list[SparkBatch], ours: dict[int, list[tuple]]) -> None:
    """Batch by batch, the same rows (order within a batch is not compared: it depends on
    partitioning in both engines)."""
    for batch in batches:
        assert ours[batch.batch_id] == batch.rows, (
            f"batch {batch.batch_id} (files {[os.path.basename(f) for f in batch.files]}, "
            f"watermark {batch.watermark}, timestamp {batch.timestamp}) differs:\n"
            f"  Spark:       {batch.rows}\n  stateengine: {ours[batch.batch_id]}")
