"""Worker-side lifecycle of keyed state inside Spark tasks.

Each task of a batch loads version ``batch_id`` of its partition, runs the user's code and
commits version ``batch_id + 1``. Providers (and their open RocksDB instances) are cached per
Python worker process, so a partition that continues on the same worker at the expected
version needs no restore; any other case restores from the checkpoint directory. A task that
fails aborts its store; a re-executed task or a replayed batch loads the same version again and
produces the same committed state.
"""

from __future__ import annotations

import numbers
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from .. import _native
from ..descriptors import StateDescriptor
from ..errors import TtlTimeNotSetError
from ..store import StateStore, StateStoreProvider

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
    batch_id: int
    watermark: int | None = None
    processing_time: int | None = None
    min_versions_to_retain: int = 10
    local_dir: str | None = None
    memory_budget_mb: int | None = None
    bottommost_bloom_filters: bool = False
    output_cols: list[str] = field(default_factory=list)
    allow_pickle: bool = False
    # The TTL clock of the batch (stateengine/ttl.py): the batch timestamp, so that a replayed
    # batch sees the same expiry. None: no state of the job has a TTL.
    ttl_time_ms: int | None = None

    @property
    def key_type(self) -> Any:
        return self.key_codecs if len(self.key_codecs) > 1 else self.key_codecs[0]

    @property
    def key_is_tuple(self) -> bool:
        return len(self.key_codecs) > 1


def ttl_clock(states: Sequence[StateDescriptor], batch_timestamp_ms: int | None,
              processing_time: int | None = None) -> int | None:
    """The TTL time of a batch: ``batch_timestamp_ms``, else ``processing_time``. States with
    TTL need one (never the wall clock: a replayed batch must see the same expiry)."""
    for name, t in (("batch_timestamp_ms", batch_timestamp_ms),
                    ("processing_time", processing_time)):
        if t is not None and (isinstance(t, bool) or not isinstance(t, numbers.Integral)):
            raise ValueError(f"{name} must be an int of milliseconds, got {t!r}")
    clock = batch_timestamp_ms if batch_timestamp_ms is not None else processing_time
    clock = None if clock is None else int(clock)  # numpy integers too
    with_ttl = [d.name for d in states if getattr(d, "ttl", None) is not None]
    if with_ttl and clock is None:
        raise TtlTimeNotSetError(
            f"states {with_ttl} have a TTL, which expires entries against the batch's time; "
            f"pass batch_timestamp_ms=<the micro-batch's timestamp in ms> (the same value when "
            f"a batch is replayed, as Spark's batchTimestampMs is)")
    return clock


def provider_for(cfg: TaskConfig, partition_id: int) -> StateStoreProvider:
    """The cached provider of this partition in this worker process (created on first use)."""
    from ..serializers import Codec

    # TTL settings are configuration fixed per backend: a job that changes them gets a backend
    # restored afresh rather than one configured for the old ones.
    ttls = tuple((d.name, d.ttl) for d in cfg.descriptors if getattr(d, "ttl", None) is not None)
    ident = (cfg.checkpoint, cfg.operator_id, partition_id, cfg.num_partitions,
             cfg.max_parallelism, cfg.allow_pickle, ttls)
    with _cache_lock:
        provider = _cache.get(ident)
        if provider is not None:
            _cache.move_to_end(ident)
            return provider
    key_type = tuple(Codec(c) for c in cfg.key_codecs) if cfg.key_is_tuple else Codec(cfg.key_codecs[0])
    provider = StateStoreProvider(
        cfg.checkpoint, cfg.operator_id, partition_id, cfg.num_partitions, cfg.max_parallelism,
        key_type=key_type, descriptors=cfg.descriptors, local_dir=cfg.local_dir,
        min_versions_to_retain=cfg.min_versions_to_retain, allow_pickle=cfg.allow_pickle)
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
    """The store of one task: load at start, commit or abort at the end."""

    def __init__(self, cfg: TaskConfig, partition: tuple[int, int] | None = None) -> None:
        if cfg.memory_budget_mb:
            _native.configure_memory(cfg.memory_budget_mb << 20)
        # Read when a backend opens; one already open in this worker keeps its filters.
        _native.configure_bloom_filters(cfg.bottommost_bloom_filters)
        self.cfg = cfg
        self.partition_id, self.attempt = partition or current_partition()
        self.provider = provider_for(cfg, self.partition_id)
        try:
            self.store: StateStore = self.provider.get_store(cfg.batch_id)
        except BaseException:
            drop_cached(cfg.checkpoint)  # a failed restore leaves nothing half-open behind
            raise
        self.backend = self.store.backend
        if cfg.ttl_time_ms is not None:
            self.backend.set_ttl_time(cfg.ttl_time_ms)
        self.handles = {d.name: self.backend.get_state(d) for d in cfg.descriptors}

    def commit(self) -> int:
        return self.store.commit()

    def abort(self) -> None:
        self.store.abort()


def guarded(cfg: TaskConfig, body: Any) -> Iterator[Any]:
    """Runs body(task) (a generator of outputs), committing after the last output and
    aborting if anything fails."""
    task = TaskState(cfg)
    committed = False
    try:
        yield from body(task)
        task.commit()
        committed = True
    finally:
        if not committed:
            task.abort()
