"""What every local harness shares: its directory, partitions, batches, time and output.

A harness runs a stateful step micro-batch by micro-batch in this process, with no
SparkSession and no JVM, through the task code that Spark's tasks run
(``stateengine.spark.runtime.guarded``: load version ``batch_id``, the body, commit
``batch_id + 1``). One batch routes the rows to ``num_partitions`` partitions by key group (as
``route`` does in Spark), then runs one task per partition, empty ones included, one after
another. State lives in a checkpoint directory of its own (a temporary one by default), so a
changed partition count restores it by key group exactly as a rescaled Spark job does, and a
new harness given the ``directory`` of a closed one resumes from its newest version (a query
restarted with changed code: state schemas evolve there as in Spark).

Changes to state and timers asked for between batches (``update_*``, ``seed``) wait until
the next batch: each task applies those of its keys after loading its state and before the
user's code runs, stamped with that batch's time. Reads (``peek_*``) see the state the last
batch committed, with those pending changes applied, in a throwaway load of the key's
partition.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pandas as pd
from pyspark.sql import types as T

from ..checkpoint.storage import CheckpointStorage, skip_syncs
from ..checkpoint.versions import VersionCatalog
from ..keygroups import KeyGroupRange, check_max_parallelism
from ..spark.routing import key_codecs_for, key_columns
from ..spark.runtime import TaskConfig, TaskState, drop_cached, guarded
from . import convert, routing

# Partition 0 prunes old versions after every 10th version rather than after every commit
# (Spark's maintenance runs on an interval too): pruning lists every retained version, the
# largest fixed cost of a small batch after the commit itself. At least the newest 10
# versions stay, as before.
_PRUNE_EVERY = 10


def _memory_dir() -> str | None:
    """A memory-backed folder for the harness's throwaway state where the machine has one
    with room to spare (/dev/shm): file system calls cost less there than on a disk. None:
    the default temporary folder."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    room = st.f_bavail * st.f_frsize
    return "/dev/shm" if room >= 1 << 30 and os.access("/dev/shm", os.W_OK) else None


@dataclass
class BatchOutput:
    """One batch's output rows: ``table`` (Arrow, the output schema's types), ``frame`` (as
    ``toPandas()`` gives them) and ``rows`` (as ``collect()`` gives them), in partition
    order; with the batch's id and the times its tasks ran with."""

    batch_id: int
    table: Any
    schema: T.StructType
    time_zone: str
    watermark: int | None = None
    processing_time: int | None = None
    _frame: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def frame(self) -> pd.DataFrame:
        """The rows as a pandas DataFrame (timestamps naive in the harness's time zone)."""
        if self._frame is None:
            self._frame = convert.table_to_pandas(self.table, self.schema, self.time_zone)
        return self._frame

    @property
    def rows(self) -> list[Any]:
        """The rows as pyspark ``Row`` objects."""
        return convert.table_to_rows(self.table, self.schema)

    def __len__(self) -> int:
        return self.table.num_rows


class Harness:
    """The base of ``ProcessorHarness``, ``ApplyHarness`` and ``MapHarness``."""

    def __init__(self, key: str | list[str], output_schema: Any, *, input_schema: Any,
                 num_partitions: int, max_parallelism: int, operator_id: str, time_zone: str,
                 max_records_per_batch: int, directory: str | None,
                 fsync: bool | None = None) -> None:
        self.key_cols = key_columns(key)
        self.output_schema = convert.struct_of(output_schema)
        self.input_schema = None if input_schema is None else convert.struct_of(input_schema)
        self.max_parallelism = check_max_parallelism(max_parallelism)
        self.num_partitions = self._partitions(num_partitions)
        self.operator_id = operator_id
        self.time_zone = time_zone
        self.max_records_per_batch = int(max_records_per_batch)
        self._own_directory = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="stateengine-harness-",
                                                       dir=_memory_dir())
        # its own temporary directory is thrown away on close: no commit there needs to
        # survive a crash of the machine, so none waits for fsync (most of a small commit
        # on a disk: a temporary directory lands on one where /dev/shm is small)
        self.fsync = not self._own_directory if fsync is None else bool(fsync)
        if not self.fsync:
            skip_syncs(self.directory)
        self.checkpoint = CheckpointStorage(os.path.join(self.directory, "checkpoint")).uri
        self.local_dir = os.path.join(self.directory, "local")
        # the next batch's id (= the version its tasks load): a directory that a closed
        # harness left holds committed state, which the next batch resumes from, as a query
        # restarted with changed code (another schema: evolution) resumes from its checkpoint
        self.batch_id = VersionCatalog(CheckpointStorage(self.checkpoint), operator_id) \
            .latest_version(KeyGroupRange(0, self.max_parallelism - 1))
        self.last: BatchOutput | None = None
        self._pending: list[tuple[tuple, Callable[[TaskState, Any], None]]] = []
        self._closed = False

    # ---- configuration -------------------------------------------------------------------

    def _partitions(self, n: Any) -> int:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.max_parallelism:
            raise ValueError(f"num_partitions must be an int in [1, max_parallelism="
                             f"{self.max_parallelism}], got {n!r}")
        return n

    @property
    def key_codecs(self) -> tuple[int, ...]:
        """The engine's key codecs of the grouping columns (their Spark types' hash rules)."""
        if self.input_schema is None:
            raise ValueError("the input's schema is not known yet: pass input_schema= to the "
                             "harness (or run a batch with rows first) before using state by key")
        return key_codecs_for(self.input_schema, self.key_cols)

    def _key(self, key: Any) -> tuple:
        """A key as a tuple of column values (a scalar for one key column is accepted)."""
        t = tuple(key) if isinstance(key, (tuple, list)) else (key,)
        if len(t) != len(self.key_cols):
            raise ValueError(f"a key has {len(self.key_cols)} column(s) "
                             f"({', '.join(self.key_cols)}), got {key!r}")
        return t

    def _task_key(self, key: tuple) -> Any:
        """The key as a task's backend takes it: a scalar for one column, else a tuple."""
        return key[0] if len(key) == 1 else key

    def _config(self, batch_id: int, num_partitions: int, descriptors: list[Any],
                watermark: int | None, processing_time: int | None,
                ttl_time_ms: int | None = None, **extra: Any) -> TaskConfig:
        return TaskConfig(
            checkpoint=self.checkpoint, operator_id=self.operator_id,
            num_partitions=num_partitions, max_parallelism=self.max_parallelism,
            key_cols=self.key_cols, key_codecs=self.key_codecs, descriptors=descriptors,
            batch_id=batch_id, watermark=watermark, processing_time=processing_time,
            time_zone=self.time_zone, local_dir=self.local_dir,
            output_cols=self.output_schema.names, ttl_time_ms=ttl_time_ms,
            prune_every=_PRUNE_EVERY, **extra)

    # ---- one batch ---------------------------------------------------------------------

    def _input(self, rows: Any) -> Any:
        """The batch's rows as an Arrow table of the input schema (inferred from the first
        rows when not given, then fixed: keys keep their types)."""
        if self.input_schema is None:
            if rows is None:
                raise ValueError("the first batch has no rows and the harness has no "
                                 "input_schema: pass input_schema= to the harness")
            self.input_schema = convert.infer_schema(rows)
        return convert.to_table(rows, self.input_schema, self.time_zone)

    def _run(self, table: Any, cfg: TaskConfig,
             body: Callable[[TaskState, Any], Iterable[Any]],
             to_table: Callable[[list[Any]], Any]) -> BatchOutput:
        """One batch: the rows routed to ``cfg.num_partitions`` partitions, then one task per
        partition (``body(task, its rows)`` between load and commit)."""
        self._check_open()
        parts = routing.route(table, self.key_cols, self.key_codecs, cfg.num_partitions,
                              self.max_parallelism)
        outputs: list[Any] = []
        for pid, rows in enumerate(parts):
            def task_body(task: TaskState, rows: Any = rows) -> Iterable[Any]:
                self._apply_pending(task)
                return body(task, rows)
            outputs.extend(guarded(cfg, task_body, partition=(pid, 0)))
        self._pending.clear()
        self.num_partitions = cfg.num_partitions
        self.batch_id = cfg.batch_id + 1
        self.last = BatchOutput(cfg.batch_id, to_table(outputs), self.output_schema,
                                self.time_zone, cfg.watermark, cfg.processing_time)
        return self.last

    # ---- state between batches ----------------------------------------------------------

    def _later(self, key: Any, change: Callable[[TaskState, Any], None]) -> None:
        """``change(task, key)`` at the start of the next batch, in the task of key's
        partition (after its state is loaded, before the user's code)."""
        self._check_open()
        k = self._key(key)
        routing.key_group(k, self.key_codecs, self.max_parallelism)  # refuses a bad key now
        self._pending.append((k, change))

    def _apply_pending(self, task: TaskState) -> None:
        for k, change in self._pending:
            if task.provider.key_group_range.contains(
                    routing.key_group(k, self.key_codecs, self.max_parallelism)):
                change(task, self._task_key(k))

    def _peek(self, key: Any, cfg: TaskConfig, read: Callable[[TaskState, Any], Any]) -> Any:
        """``read(task, key)`` on the key's partition as the last batch left it (plus the
        changes waiting for the next batch); nothing is committed."""
        self._check_open()
        k = self._key(key)
        pid = routing.partition_of(k, self.key_codecs, cfg.num_partitions,
                                   self.max_parallelism)
        task = TaskState(cfg, (pid, 0))
        try:
            self._apply_pending(task)
            return read(task, self._task_key(k))
        finally:
            task.abort()  # the next batch loads the committed version again

    # ---- lifecycle ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this harness is closed")

    def close(self) -> None:
        """Closes the open backends; removes the directory if the harness made it."""
        if self._closed:
            return
        self._closed = True
        drop_cached(self.checkpoint)
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        if not self.fsync:
            skip_syncs(self.directory, False)

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # a harness left open still gives its backends back
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
