"""Which micro-batch a Spark task belongs to: its id, watermark and timestamp.

Structured Streaming runs every job of micro-batch ``b`` with the local property
``streaming.sql.batchId`` = ``b`` (and ``sql.streaming.queryId``), which reaches every task and
its Python worker (``TaskContext.getLocalProperty``). Before the batch runs, the query writes
``<checkpointLocation>/offsets/<b>``: a version line (``v1``), then a JSON object with
``batchWatermarkMs`` and ``batchTimestampMs`` (the event-time watermark and the processing
time of the batch), then one line per source. A batch that is retried or re-run after a restart
reuses that file unchanged, so every attempt of every task of batch ``b`` reads the same id,
watermark and timestamp: timers fire and TTL expires the same way on every attempt.
``<checkpointLocation>/metadata`` holds the query's id, which the tasks compare with their
``sql.streaming.queryId`` so that a checkpoint location of another query is refused.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..checkpoint.storage import CheckpointStorage
from ..errors import CheckpointNotFoundError, StorageError, StreamingBatchError

if TYPE_CHECKING:
    from .runtime import TaskConfig

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class BatchInfo:
    """What one task knows of its micro-batch. Times are int milliseconds since the epoch;
    ``watermark`` fires event-time timers, ``processing_time`` processing-time timers and is
    the clock of TTL (None: not known, nothing fires)."""

    batch_id: int
    watermark: int | None = None
    processing_time: int | None = None


def local_property(name: str) -> str | None:
    """A local property of the running Spark task (None outside a task or if unset)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else ctx.getLocalProperty(name)


def query_storage(query_checkpoint: str) -> CheckpointStorage:
    """The query's checkpoint location as storage; Spark also writes local paths as
    ``file:/path``, which pyarrow does not read as a URI, and names S3 locations by Hadoop's
    ``s3a://`` (``s3n://``), which pyarrow reads as ``s3://``."""
    if query_checkpoint.startswith("file:") and not query_checkpoint.startswith("file://"):
        query_checkpoint = query_checkpoint[len("file:"):]
    for hadoop in ("s3a://", "s3n://"):
        if query_checkpoint.startswith(hadoop):
            query_checkpoint = "s3://" + query_checkpoint[len(hadoop):]
    return CheckpointStorage(query_checkpoint)


# Per Python worker, keyed by the running query's id too: a query that starts over in a
# deleted and recreated checkpoint location counts its batches from 0 again.
_times_cache: dict[tuple[str, str | None, int], tuple[int, int]] = {}
_verified: set[tuple[str, str]] = set()
_lock = threading.Lock()


def batch_times(query_checkpoint: str, batch_id: int,
                _query: str | None = None) -> tuple[int, int]:
    """``(batchWatermarkMs, batchTimestampMs)`` that the streaming query whose checkpoint
    location is ``query_checkpoint`` recorded for micro-batch ``batch_id`` (the watermark is 0
    while the query has none, as in Spark)."""
    with _lock:
        cached = _times_cache.get((query_checkpoint, _query, batch_id))
    if cached is not None:
        return cached
    storage = query_storage(query_checkpoint)
    rel = f"offsets/{batch_id}"
    try:
        data = storage.read_bytes(rel)
    except CheckpointNotFoundError:
        raise StreamingBatchError(
            f"the offset log of batch {batch_id} ({storage.describe(rel)}) does not exist: "
            f"query_checkpoint must be the checkpointLocation of the streaming query that runs "
            f"this operator, and the query must write its offset log before each batch (as "
            f"micro-batch queries do, unless asynchronous progress tracking is on)") from None
    except StorageError as e:
        raise StreamingBatchError(f"cannot read the offset log of batch {batch_id}: {e}") from e
    lines = data.decode("utf-8", "replace").split("\n")
    try:
        meta = json.loads(lines[1])
        times = (int(meta["batchWatermarkMs"]), int(meta["batchTimestampMs"]))
    except (IndexError, ValueError, TypeError, KeyError) as e:
        raise StreamingBatchError(
            f"{storage.describe(rel)} is not an offset log entry of Structured Streaming "
            f"(its second line must be a JSON object with batchWatermarkMs and "
            f"batchTimestampMs; {type(e).__name__}: {e})") from None
    with _lock:
        if len(_times_cache) > 4096:
            _times_cache.clear()
        _times_cache[(query_checkpoint, _query, batch_id)] = times
    return times


def query_id(query_checkpoint: str) -> str | None:
    """The id of the query that owns ``query_checkpoint`` (None if it has no metadata file)."""
    storage = query_storage(query_checkpoint)
    try:
        return str(json.loads(storage.read_bytes("metadata"))["id"])
    except CheckpointNotFoundError:
        return None
    except (ValueError, TypeError, KeyError) as e:
        raise StreamingBatchError(f"{storage.describe('metadata')} is not the metadata file of "
                                  f"a streaming query ({type(e).__name__}: {e})") from None


def check_query(query_checkpoint: str, running: str) -> None:
    """Refuses a checkpoint location that another query owns."""
    with _lock:
        if (query_checkpoint, running) in _verified:
            return
    owner = query_id(query_checkpoint)
    if owner is not None and owner != running:
        raise StreamingBatchError(
            f"query_checkpoint {query_checkpoint} belongs to query {owner}, but this task runs "
            f"in query {running}: pass the checkpointLocation of the query that runs this "
            f"operator")
    with _lock:
        _verified.add((query_checkpoint, running))


def resolve_batch(cfg: "TaskConfig") -> BatchInfo:
    """The batch of the running task: the id given on the driver or Spark's local property,
    and the watermark and timestamp given on the driver or read from the offset log."""
    batch_id = cfg.batch_id
    if batch_id is None:
        raw = local_property(BATCH_ID_PROPERTY)
        if raw is None:
            raise StreamingBatchError(
                "this task runs outside a streaming micro-batch (Spark set no local property "
                f"{BATCH_ID_PROPERTY}): without batch_id= stateengine.spark runs only inside a "
                "streaming query; in foreachBatch or a batch job pass batch_id=")
        batch_id = int(raw)
    if cfg.query_checkpoint is None:
        return BatchInfo(batch_id, cfg.watermark, cfg.processing_time)
    running = local_property(QUERY_ID_PROPERTY)
    if running is not None:
        check_query(cfg.query_checkpoint, running)
    watermark, timestamp = batch_times(cfg.query_checkpoint, batch_id, running)
    return BatchInfo(batch_id, watermark, timestamp)

