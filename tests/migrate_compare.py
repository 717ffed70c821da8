"""One streaming query, stopped after some batches and continued twice from copies of its
checkpoint: on Spark's own operator, and on stateengine's after ``migrate_spark_state``.

The input is a folder of Parquet files read one per micro-batch (``maxFilesPerTrigger`` 1), so
a batch's data is known by the file it read (its file source log offset). ``SplitRun.start``
runs the first files on Spark and stops; ``continue_on`` copies the checkpoint, adds the
remaining files and runs the copy until the batch reading the last file committed, returning
the output of every batch that read a file. Both continuations restart the query from the same
checkpoint, so their watermarks agree batch by batch; their batch timestamps are each run's
own clock (the processors in tests/migrate_processors.py output nothing that depends on it).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from tests.tws_compare import ROCKSDB_PROVIDER, _committed, _offsets, sort_rows

_MTIME_BASE = time.time() - 3600  # file source order: modification time, then name


def _write(folder: str, frames: list[pd.DataFrame], arrow_schema: Any, first: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    for i, frame in enumerate(frames, start=first):
        path = os.path.join(folder, f"part-{i:04d}.parquet")
        pq.write_table(pa.Table.from_pandas(frame, schema=arrow_schema, preserve_index=False),
                       path)
        os.utime(path, (_MTIME_BASE + i, _MTIME_BASE + i))


def data_batches(checkpoint: str) -> dict[int, int]:
    """batch id -> index of the file it read, for the committed batches that read one."""
    offsets = _offsets(checkpoint)
    out, last = {}, -1
    for b in _committed(checkpoint):
        offset = offsets[b][2]
        if offset is not None and offset != last:
            out[b] = offset
            last = offset
    return out


@dataclass
class SplitRun:
    spark: Any
    base: str
    schema: str
    frames: list[pd.DataFrame]  # every batch's input; the first `split` run on Spark first
    split: int
    trigger: dict = field(default_factory=lambda: {"availableNow": True})
    extra: int = 0  # batches to wait for after the last file's (processing-time trigger)

    @property
    def source(self) -> str:
        return os.path.join(self.base, "in")

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.base, "query")

    def _arrow_schema(self) -> Any:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.spark.createDataFrame([], self.schema).schema)

    def stream(self, session: Any = None) -> Any:
        return (session or self.spark).readStream.schema(self.schema) \
            .option("maxFilesPerTrigger", 1).parquet(self.source)

    def start(self, plan: Callable[[Any, str], Any]) -> dict[int, list[tuple]]:
        """Runs the first files on Spark's operator (RocksDB provider): ``plan(stream,
        checkpoint)`` is the query's DataFrame. Returns the outputs."""
        _write(self.source, self.frames[:self.split], self._arrow_schema(), 0)
        return self.run(plan, self.checkpoint, self.split - 1, rocksdb=True)

    def continue_on(self, name: str, plan: Callable[[Any, str], Any],
                    before: Callable[[str], Any] | None = None,
                    rocksdb: bool = False) -> dict[int, list[tuple]]:
        """A copy of the stopped query (``before(copy)`` runs first, e.g. the migration)
        continued with ``plan`` over the remaining files until the batch reading the last one
        committed: the output of every batch this run committed (a batch the first run left
        uncommitted runs again first)."""
        copy = os.path.join(self.base, name)
        shutil.copytree(self.checkpoint, copy)
        if before is not None:
            before(copy)
        _write(self.source, self.frames[self.split:], self._arrow_schema(), self.split)
        return self.run(plan, copy, len(self.frames) - 1, rocksdb=rocksdb)

    def both_ways(self, on_spark: Callable[[Any, str], Any], migrate: Callable[[str], Any],
                  on_stateengine: Callable[[Any, str], Any]) -> tuple[dict, dict, Any]:
        """The first files on Spark, then a copy continued on Spark and a copy migrated
        (``migrate(copy)``) and continued on stateengine: (Spark's outputs, stateengine's,
        what ``migrate`` returned). ``self.first`` holds the first run's outputs."""
        self.first = self.start(on_spark)
        spark_out = self.continue_on("spark", on_spark, rocksdb=True)
        moved: dict[str, Any] = {}
        ours = self.continue_on("stateengine", on_stateengine,
                                before=lambda copy: moved.__setitem__("result", migrate(copy)))
        return spark_out, ours, moved["result"]

    def run(self, plan: Callable[[Any, str], Any], checkpoint: str, last_file: int,
            rocksdb: bool, timeout: float = 240) -> dict[int, list[tuple]]:
        spark = self.spark
        self.outputs: dict[int, list[tuple]] = {}

        def collect(df: Any, batch_id: int) -> None:
            self.outputs[batch_id] = sort_rows(df.collect())

        key = "spark.sql.streaming.stateStore.providerClass"
        previous = spark.conf.get(key, None)
        if rocksdb:
            spark.conf.set(key, ROCKSDB_PROVIDER)
        try:
            writer = plan(self.stream(), checkpoint).writeStream.outputMode("update") \
                .foreachBatch(collect) \
                .option("checkpointLocation", checkpoint).trigger(**self.trigger)
            query = writer.start()
            if "availableNow" in self.trigger:
                query.awaitTermination(timeout)
            else:
                _stop_after_file(query, checkpoint, last_file, self.extra, timeout)
            query.stop()
        finally:
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)
        if query.exception() is not None:
            raise query.exception()
        done = data_batches(checkpoint)
        assert last_file in done.values(), f"no committed batch read file {last_file}: {done}"
        return dict(self.outputs)


def _stop_after_file(query: Any, checkpoint: str, last_file: int, extra: int,
                     timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and query.exception() is None:
        done = data_batches(checkpoint)
        reading = [b for b, f in done.items() if f == last_file]
        committed = _committed(checkpoint)
        if reading and committed and committed[-1] >= reading[0] + extra:
            return
        time.sleep(0.2)
