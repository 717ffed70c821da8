"""A machine-local cache of the SST files of remote checkpoints (S3, HDFS, any non-local URI).

A partition's state is restored whenever its task lands on a Python worker that does not hold
it open, which in a streaming query happens often: Spark hands tasks to whichever worker is
idle. Without a cache each such restore downloads every SST file of the version, although most
of them sit on the same disk already, in the database of the worker that ran the partition
before (it wrote or downloaded them). SST files are immutable and published under unique names,
so a file is identified by its storage and path. The cache keeps one hard link per file, made
when a file is downloaded or uploaded; a restore links files from it and downloads only the
rest, as Spark's RocksDB state store loads only the files an executor lacks.

Nothing is trusted from the cache: a linked file is verified against the handle (size,
CRC-32C, SHA-256 when recorded) like a download, and one that fails is dropped and fetched
again. The cache costs no disk of its own while the files are in use: an entry whose link
count has fallen to one is referenced by no database on this machine and is evicted.

``configure_file_cache(path)`` turns it on for the process (``StateStoreProvider`` does, under
its local working directory, when its checkpoint is remote); it must be on the file system of
the databases, since it works with hard links.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from collections import Counter

log = logging.getLogger("stateengine.storage")

_EVICT_INTERVAL_S = 30.0
_lock = threading.Lock()
_root: str | None = None
_stats: Counter = Counter()
_last_evict = 0.0


def configure_file_cache(path: str | os.PathLike | None) -> None:
    """Keeps remote checkpoints' SST files under ``path`` (None: no cache)."""
    global _root
    with _lock:
        _root = os.path.abspath(os.fspath(path)) if path is not None else None


def file_cache_root() -> str | None:
    return _root


def file_cache_stats() -> dict[str, int]:
    """Process-wide counts: files linked from the cache (``hits``), fetched from storage
    (``downloads``), added (``kept``), found bad and dropped (``dropped``), evicted."""
    with _lock:
        return {k: _stats[k] for k in ("hits", "downloads", "kept", "dropped", "evicted")}


def count(what: str) -> None:
    with _lock:
        _stats[what] += 1


def _entry(storage_uri: str, rel: str) -> str | None:
    """The cache path of a file of a storage; a name of hex digits and the file's base name,
    so no path from a checkpoint ever shapes a path here."""
    root = _root
    if root is None:
        return None
    store = hashlib.sha256(storage_uri.encode()).hexdigest()[:16]
    name = hashlib.sha256(rel.encode()).hexdigest()[:32]
    return os.path.join(root, store, name + ".sst")


def link_cached(storage_uri: str, rel: str, dest: str) -> bool:
    """Hard-links the cached copy of rel to dest; False when there is none (or it cannot be
    linked, e.g. on another file system)."""
    entry = _entry(storage_uri, rel)
    if entry is None:
        return False
    try:
        os.link(entry, dest)
    except OSError:
        return False
    count("hits")
    return True


def keep(storage_uri: str, rel: str, local_file: str) -> None:
    """Adds local_file (verified, or just uploaded) as the cached copy of rel."""
    entry = _entry(storage_uri, rel)
    if entry is None:
        return
    tmp = f"{entry}.tmp-{uuid.uuid4().hex}"
    try:
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        os.link(local_file, tmp)
        os.replace(tmp, entry)  # another process may have put the same file meanwhile
    except OSError as e:
        log.debug("file cache: cannot keep %s: %s", rel, e)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return
    count("kept")
    evict()


def drop(storage_uri: str, rel: str) -> None:
    """Removes the cached copy of rel (it failed verification)."""
    entry = _entry(storage_uri, rel)
    if entry is not None:
        try:
            os.unlink(entry)
            count("dropped")
        except OSError:
            pass


def evict(force: bool = False) -> int:
    """Removes entries no database on this machine links any more (link count 1); at most
    every 30 s per process unless ``force``. Returns how many went."""
    global _last_evict
    root = _root
    now = time.monotonic()
    with _lock:
        if root is None or (not force and now - _last_evict < _EVICT_INTERVAL_S):
            return 0
        _last_evict = now
    gone = 0
    try:
        stores = [e.path for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for store in stores:
        try:
            entries = list(os.scandir(store))
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_nlink == 1:  # also a crashed keep's tmp
                    os.unlink(e.path)
                    gone += 1
            except OSError:
                continue
    if gone:
        with _lock:
            _stats["evicted"] += gone
    return gone
