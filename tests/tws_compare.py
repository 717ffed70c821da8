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


def assert_same(batches: list[SparkBatch], ours: dict[int, list[tuple]]) -> None:
    """Batch by batch, the same rows (order within a batch is not compared: it depends on
    partitioning in both engines)."""
    for batch in batches:
        assert ours[batch.batch_id] == batch.rows, (
            f"batch {batch.batch_id} (files {[os.path.basename(f) for f in batch.files]}, "
            f"watermark {batch.watermark}, timestamp {batch.timestamp}) differs:\n"
            f"  Spark:       {batch.rows}\n  stateengine: {ours[batch.batch_id]}")
