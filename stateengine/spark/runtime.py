"""Worker-side lifecycle of keyed state inside Spark tasks.

Each task of a batch learns its batch (id, watermark, timestamp; see ``batch.py``), loads
version ``batch_id`` of its partition, runs the user's code and commits version
``batch_id + 1``. Providers (and their open RocksDB instances) are cached per
Python worker process, so a partition that continues on the same worker at the expected
version needs no restore; any other case restores from the checkpoint directory. A task that
fails aborts its store; a re-executed task or a replayed batch loads the same version again and
produces the same committed state.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from .. import _native
from ..descriptors import StateDescriptor
from ..errors import TtlTimeNotSetError
from ..store import StateStore, StateStoreProvider
from ..times import to_millis
from .batch import BatchInfo, resolve_batch
from .user_errors import CallSite

log = logging.getLogger("stateengine")
_MAX_CACHED = int(os.environ.get("STATEENGINE_MAX_CACHED_PARTITIONS", "16"))
_cache: "OrderedDict[tuple, StateStoreProvider]" = OrderedDict()
_cache_lock = threading.Lock()


@dataclass
class TaskConfig:
    """Everything a task needs; pickled into the Spark closure."""

    checkpoint: str
    operator_id: str
    num_partitions: int
    max_parallelism: int
    key_cols: list[str]
    key_codecs: tuple[int, ...]
    descriptors: Sequence[StateDescriptor]
    batch_id: int | None  # None: each task reads Spark's streaming.sql.batchId
    watermark: int | None = None
    processing_time: int | None = None
    query_checkpoint: str | None = None  # read watermark and timestamp from its offset log
    time_zone: str | None = None  # Spark's session time zone, for timer times without a zone
    min_versions_to_retain: int = 10
    prune_every: int = 1  # partition 0 prunes after every n-th version (StateStoreProvider)
    local_dir: str | None = None
    memory_budget_mb: int | None = None
    bottommost_bloom_filters: bool = False
    output_cols: list[str] = field(default_factory=list)
    allow_pickle: bool = False
    # The TTL clock of the batch (stateengine/ttl.py) when given as batch_timestamp_ms; None:
    # the batch's processing time (given, or Spark's batchTimestampMs from the offset log).
    ttl_time_ms: int | None = None

    @property
    def key_type(self) -> Any:
        return self.key_codecs if len(self.key_codecs) > 1 else self.key_codecs[0]

    @property
    def key_is_tuple(self) -> bool:
        return len(self.key_codecs) > 1


def ttl_clock(states: Sequence[StateDescriptor], batch_timestamp_ms: Any, batch_id: int | None,
              processing_time: int | None, query_checkpoint: str | None,
              zone: str | None = None) -> int | None:
    """The TTL time of a batch's tasks (``TaskConfig.ttl_time_ms``), checked on the driver:
    ``batch_timestamp_ms`` when given, else None, and each task takes its batch's processing
    time (``processing_time=``, or with ``query_checkpoint`` Spark's batchTimestampMs from the
    offset log), the same on every attempt and replay. States with TTL need one of them: TTL
    never reads the wall clock. A time whose sum with a state's TTL leaves int64 milliseconds
    is refused here (TtlTimeRangeError), before any task runs."""
    from ..ttl import check_ttl_time

    ttls = {d.name: d.ttl.ttl_ms for d in states if getattr(d, "ttl", None) is not None}
    if processing_time is not None and batch_timestamp_ms is None:
        check_ttl_time(processing_time, ttls, "processing_time (the batch's TTL time)")
    if batch_timestamp_ms is not None:
        if query_checkpoint is not None:
            raise ValueError("batch_timestamp_ms and query_checkpoint both set the batch's time: "
                             "pass one or the other")
        if batch_id is None:
            raise ValueError(
                "batch_timestamp_ms goes with an explicit batch_id; inside a streaming query "
                "pass query_checkpoint=<the query's checkpointLocation> and each batch uses "
                "Spark's batch timestamp")
        return check_ttl_time(to_millis(batch_timestamp_ms, "batch_timestamp_ms", zone), ttls,
                              "batch_timestamp_ms")
    with_ttl = [d.name for d in states if getattr(d, "ttl", None) is not None]
    if with_ttl and processing_time is None and query_checkpoint is None:
        raise TtlTimeNotSetError(
            f"states {with_ttl} have a TTL, which expires entries against the batch's time; "
            f"pass batch_timestamp_ms=<the micro-batch's timestamp in ms> (the same value when "
            f"a batch is replayed, as Spark's batchTimestampMs is), or inside a streaming query "
            f"query_checkpoint=<its checkpointLocation>")
    return None


def provider_for(cfg: TaskConfig, partition_id: int) -> StateStoreProvider:
    """The cached provider of this partition in this worker process (created on first use)."""
    from ..serializers import Codec

    # TTL settings are configuration fixed per backend: a job that changes them gets a backend
    # restored afresh rather than one configured for the old ones.
    ttls = tuple((d.name, d.ttl) for d in cfg.descriptors if getattr(d, "ttl", None) is not None)
    # Likewise schemas: a backend keeps the schema its states registered with, and a job
    # whose schemas evolved gets one restored afresh, where they evolve.
    schemas = tuple((d.name, d.meta().get("value_schema"), d.meta().get("user_key_schema"),
                     repr(d.evolution)) for d in cfg.descriptors)
    ident = (cfg.checkpoint, cfg.operator_id, partition_id, cfg.num_partitions,
             cfg.max_parallelism, cfg.allow_pickle, ttls, tuple(cfg.key_cols), schemas)
    with _cache_lock:
        provider = _cache.get(ident)
        if provider is not None:
            _cache.move_to_end(ident)
            return provider
    key_type = tuple(Codec(c) for c in cfg.key_codecs) if cfg.key_is_tuple else Codec(cfg.key_codecs[0])
    provider = StateStoreProvider(
        cfg.checkpoint, cfg.operator_id, partition_id, cfg.num_partitions, cfg.max_parallelism,
        key_type=key_type, descriptors=cfg.descriptors, local_dir=cfg.local_dir,
        min_versions_to_retain=cfg.min_versions_to_retain, allow_pickle=cfg.allow_pickle,
        key_names=cfg.key_cols, prune_every=cfg.prune_every)
    evicted = []
    with _cache_lock:
        _cache[ident] = provider
        while len(_cache) > _MAX_CACHED:
            evicted.append(_cache.popitem(last=False)[1])
    for old in evicted:
        old.close()
    return provider


def drop_cached(checkpoint: str | None = None) -> None:
    """Closes cached providers (all, or those of one checkpoint directory)."""
    with _cache_lock:
        doomed = [k for k in _cache if checkpoint is None or k[0] == checkpoint]
        providers = [_cache.pop(k) for k in doomed]
    for p in providers:
        p.close()


def current_partition() -> tuple[int, int]:
    """(partition id, attempt number) of the running Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("stateengine.spark task code must run inside a Spark task")
    return ctx.partitionId(), ctx.attemptNumber()


class TaskState:
    """The store of one task: load at start, commit or abort at the end. ``batch`` is the
    task's micro-batch (id, watermark, processing time), the same on every attempt."""

    def __init__(self, cfg: TaskConfig, partition: tuple[int, int] | None = None) -> None:
        if cfg.memory_budget_mb:
            _native.configure_memory(cfg.memory_budget_mb << 20)
        # Read when a backend opens; one already open in this worker keeps its filters.
        _native.configure_bloom_filters(cfg.bottommost_bloom_filters)
        self.cfg = cfg
        self.partition_id, self.attempt = partition or current_partition()
        self.batch: BatchInfo = resolve_batch(cfg)
        # Named in the errors of user code this task runs (user_errors.py).
        self.site = CallSite(cfg.operator_id, self.batch.batch_id, self.partition_id)
        self.provider = provider_for(cfg, self.partition_id)
        try:
            self.store: StateStore = self.provider.get_store(self.batch.batch_id)
        except BaseException:
            drop_cached(cfg.checkpoint)  # a failed restore leaves nothing half-open behind
            raise
        self.backend = self.store.backend
        self.backend.timer_service.naive_time_zone = cfg.time_zone
        # State TTL measures time by the batch, never the wall clock: a retried task or a
        # replayed batch expires exactly what the first attempt did.
        self.ttl_time: int | None = (cfg.ttl_time_ms if cfg.ttl_time_ms is not None
                                     else self.batch.processing_time)
        if self.ttl_time is not None:
            self.backend.set_ttl_time(self.ttl_time)
        self.handles = {d.name: self.backend.get_state(d) for d in cfg.descriptors}

    def commit(self) -> int:
        version = self.store.commit()
        log.debug("%s partition %d committed version %d: %s", self.cfg.operator_id,
                  self.partition_id, version, self.store.metrics.get("state"))
        return version

    def abort(self) -> None:
        self.store.abort()


def guarded(cfg: TaskConfig, body: Any, after_commit: Any = None,
            partition: tuple[int, int] | None = None) -> Iterator[Any]:
    """Runs body(task) (a generator of outputs), committing after the last output and
    aborting if anything fails; then yields from ``after_commit(task)`` if given (the task's
    metrics row, spark/metrics.py). ``partition`` is (partition id, attempt) where no Spark
    task runs (stateengine.testing); by default the running Spark task's."""
    task = TaskState(cfg, partition)
    committed = False
    try:
        yield from body(task)
        task.commit()
        committed = True
    finally:
        if not committed:
            task.abort()
    if after_commit is not None:
        yield from after_commit(task)
