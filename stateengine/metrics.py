"""State metrics of a committed version: what one partition's state held and did in the batch
that wrote it, sealed into that version's manifest (``"metrics"``, covered by its checksum).

A commit records, per partition: ``keys`` (entries of the user's states, RocksDB's
estimate) and ``timers`` (registered), ``live_bytes``/``files`` (SST files after the
commit's flush), ``memtable_bytes``, ``table_reader_bytes``, ``block_cache_bytes`` and
``pinned_bytes`` (the block cache is shared by every backend of the process),
``pending_compaction_bytes``, ``memory_bytes`` (memtables plus table readers), ``rows_read``/``rows_written``/``rows_deleted`` and
``timers_fired`` during the batch, how the state was loaded (``load``: ``empty``, ``restored``
or ``reused``, and ``load_ms``), ``update_ms`` (load to commit), ``commit_ms`` and the checkpoint's ``bytes_uploaded``,
``files_uploaded``, ``files_reused``, ``checkpoint_bytes`` and ``storage_retries``.
``version_metrics`` reads them back without Spark; versions written before metrics existed
read with ``partitions`` holding ``None``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from .checkpoint.documents import resolve_key
from .checkpoint.storage import CheckpointStorage, as_storage
from .checkpoint.versions import VersionCatalog
from .errors import CheckpointNotFoundError

# The figures of Spark's StateOperatorProgress (query.lastProgress.stateOperators), summed
# over partitions as Spark sums its state store metrics over tasks: name -> (how, field), where
# field is one of a partition's metrics ("memory_bytes" is its memtables plus table readers,
# its own memory; the block cache is shared and reported apart, as the largest reading).
SPARK_FIELDS: dict[str, tuple[str, str]] = {
    "numRowsTotal": ("sum", "keys"),
    "numRowsUpdated": ("sum", "rows_written"),
    "numRowsRemoved": ("sum", "rows_deleted"),
    "numRowsRead": ("sum", "rows_read"),
    "numTimersFired": ("sum", "timers_fired"),
    "allUpdatesTimeMs": ("sum", "update_ms"),
    "commitTimeMs": ("sum", "commit_ms"),
    "loadTimeMs": ("sum", "load_ms"),
    "memoryUsedBytes": ("sum", "memory_bytes"),
    "blockCacheBytes": ("max", "block_cache_bytes"),
    "pinnedBytes": ("max", "pinned_bytes"),
    "liveBytes": ("sum", "live_bytes"),
    "liveFiles": ("sum", "files"),
    "bytesUploaded": ("sum", "bytes_uploaded"),
    "filesUploaded": ("sum", "files_uploaded"),
    "filesReused": ("sum", "files_reused"),
    "numStateStoreInstances": ("count", "keys"),
    "numRestored": ("count_load", "restored"),
    "numReused": ("count_load", "reused"),
    "numEmpty": ("count_load", "empty"),
}


_MILLI = Decimal("0.001")


def exact_rounded_sum(values: Any) -> int:
    """What the query's progress computes for a summed figure (spark/metrics.py
    ``_aggregate``): each value as DECIMAL(38, 3), summed exactly, rounded half up. Float sums
    rounded half to even (Python's round) differed from it now and then by 1 ms."""
    total = sum((Decimal(repr(v) if isinstance(v, float) else v).quantize(_MILLI, ROUND_HALF_UP)
                 for v in values), Decimal(0))
    return int(total.quantize(Decimal(1), ROUND_HALF_UP))


def spark_summary(partitions: dict[int, dict[str, Any] | None]) -> dict[str, int]:
    """The partitions' metrics summed like Spark's ``stateOperators`` (``SPARK_FIELDS``);
    times in whole ms, as Spark reports them."""
    present = [m for m in partitions.values() if m]
    out: dict[str, int] = {}
    for name, (how, f) in SPARK_FIELDS.items():
        if how == "sum":
            out[name] = exact_rounded_sum(m.get(f, 0) for m in present)
        elif how == "max":
            out[name] = int(max((m.get(f, 0) for m in present), default=0))
        elif how == "count":
            out[name] = len(present)
        else:
            out[name] = sum(1 for m in present if m.get("load") == f)
    return out


# Summed over partitions; the rest (load kind, shared cache figures) are not additive.
ADDITIVE = ("keys", "timers", "live_bytes", "files", "memtable_bytes", "table_reader_bytes", "memory_bytes",
            "pending_compaction_bytes", "rows_read", "rows_written", "rows_deleted",
            "timers_fired", "bytes_uploaded", "files_uploaded", "files_reused",
            "checkpoint_bytes", "storage_retries")
# One process-wide cache serves every partition of an executor: the largest reading, not a sum.
SHARED = ("block_cache_bytes", "pinned_bytes")
TIMES = ("load_ms", "update_ms", "commit_ms")


def batch_metrics(backend: Any, start: dict[str, int], load: dict[str, Any],
                  stats: dict[str, Any], update_ms: float, commit_ms: float,
                  retries: int) -> dict[str, Any]:
    """The metrics a commit seals: ``start`` is ``row_counts(backend)`` when the store was
    loaded, ``load`` the provider's ``last_load``, ``stats`` the checkpoint's upload figures,
    ``update_ms`` the time from load to commit (the task's work), ``commit_ms`` the commit's
    time up to its manifest."""
    m = backend.metrics()
    now = row_counts(backend)
    return {
        "keys": m["state_keys"], "timers": m["timers"], "live_bytes": m["live_sst_bytes"], "files": m["sst_files"],
        "memtable_bytes": m["memtable_bytes"], "table_reader_bytes": m["table_reader_bytes"],
        "memory_bytes": m["memtable_bytes"] + m["table_reader_bytes"],
        "block_cache_bytes": m["block_cache_bytes"], "pinned_bytes": m["pinned_bytes"],
        "pending_compaction_bytes": m["pending_compaction_bytes"],
        **{k: now[k] - start.get(k, 0) for k in now},
        "load": load.get("kind", "restored"), "load_ms": round(load.get("seconds", 0.0) * 1e3, 3),
        "update_ms": round(update_ms, 3), "commit_ms": round(commit_ms, 3),
        "bytes_uploaded": stats["bytes_uploaded"], "files_uploaded": stats["files_uploaded"],
        "files_reused": stats["files_reused"], "checkpoint_bytes": stats["bytes_total"],
        "storage_retries": retries,
    }


def row_counts(backend: Any) -> dict[str, int]:
    """The backend's running counters (rows since it opened, timers fired)."""
    m = backend._native_metrics()
    return {"rows_read": m["rows_read"], "rows_written": m["rows_written"],
            "rows_deleted": m["rows_deleted"],
            "timers_fired": backend.timer_service.timers_fired}


def summarize(partitions: dict[int, dict[str, Any] | None]) -> dict[str, Any]:
    """Totals over partitions: additive figures summed, shared-cache figures and times as the
    largest partition's (the slowest task bounds the batch), load kinds counted."""
    present = [m for m in partitions.values() if m]
    totals: dict[str, Any] = {"partitions": len(partitions), "with_metrics": len(present)}
    for k in ADDITIVE:
        totals[k] = sum(int(m.get(k, 0)) for m in present)
    for k in SHARED + TIMES:
        totals[k] = max((m.get(k, 0) for m in present), default=0)
    totals["commit_ms_sum"] = round(sum(m.get("commit_ms", 0.0) for m in present), 3)
    kinds: dict[str, int] = {}
    for m in present:
        kinds[m.get("load", "?")] = kinds.get(m.get("load", "?"), 0) + 1
    totals["loads"] = kinds
    return totals


@dataclass
class StateMetrics:
    """A version's metrics: ``partitions`` maps partition id to its sealed metrics (None for
    a manifest written before metrics existed); ``totals`` as ``summarize``."""

    operator: str
    version: int
    num_partitions: int
    partitions: dict[int, dict[str, Any] | None] = field(default_factory=dict)

    @property
    def totals(self) -> dict[str, Any]:
        """Sums over the partitions, the slowest partition's times, and ``loads`` (how many
        partitions were empty, restored or reused)."""
        return summarize(self.partitions)

    @property
    def spark(self) -> dict[str, int]:
        """Summed like Spark's ``stateOperators`` (see ``SPARK_FIELDS``)."""
        return spark_summary(self.partitions)

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-able types (what ``stateengine stats --json`` prints)."""
        return {"operator": self.operator, "version": self.version,
                "num_partitions": self.num_partitions,
                "partitions": {str(p): m for p, m in sorted(self.partitions.items())},
                "totals": self.totals, "spark": self.spark}


def operators(storage: CheckpointStorage) -> list[str]:
    """The operator directories of a checkpoint root."""
    from .checkpoint.versions import OPERATOR_PROPERTIES

    out = []
    for info in storage.list_dir(""):
        if info.type.name == "Directory":
            names = {i.base_name for i in storage.list_dir(info.base_name)}
            if OPERATOR_PROPERTIES in names or any(n.startswith("v") and n[1:].isdigit()
                                                   for n in names):
                out.append(info.base_name)
    return sorted(out)


def version_metrics(checkpoint: CheckpointStorage | str | os.PathLike, version: int | None = None,
                    operator: str | None = None,
                    hmac_key: bytes | str | None = None) -> StateMetrics:
    """The metrics sealed into ``version`` (default: the newest with a manifest) of
    ``operator`` (default: the checkpoint's only operator). Manifests are read through the
    storage layer (local paths or pyarrow.fs URIs) and their seals checked; a missing
    checkpoint, operator or version raises CheckpointNotFoundError naming what exists."""
    storage = as_storage(checkpoint)
    if not storage.is_dir(""):
        raise CheckpointNotFoundError(f"checkpoint directory {storage.location} does not exist")
    present = operators(storage)
    if operator is None:
        if len(present) != 1:
            raise CheckpointNotFoundError(
                f"{storage.location} holds {len(present)} operators "
                f"({', '.join(present) or 'none'}); name one with operator=")
        operator = present[0]
    elif operator not in present:
        raise CheckpointNotFoundError(f"{storage.location} has no operator '{operator}' "
                                      f"(operators: {', '.join(present) or 'none'})")
    catalog = VersionCatalog(storage, operator, resolve_key(hmac_key))
    versions = catalog.versions()
    if version is None:
        if not versions:
            raise CheckpointNotFoundError(f"{catalog.describe()} has no committed version")
        version = versions[-1]
    elif version not in versions:
        raise CheckpointNotFoundError(
            f"{catalog.describe()} has no version {version} (versions: "
            f"{', '.join(map(str, versions)) or 'none'})")
    manifests = catalog.manifests(version)
    # A batch re-run at another partition count leaves manifests of two counts in a version:
    # report the count the driver marked committed, else the larger.
    counts = {n for _, n, _ in manifests}
    marked = catalog.committed_partitions(version)  # the driver's word, when it gave one
    n = marked if marked in counts else max(counts)
    parts = {p: doc.get("metrics") for p, pn, doc in manifests if pn == n}
    return StateMetrics(operator, version, n, parts)
