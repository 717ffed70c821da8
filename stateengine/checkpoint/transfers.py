"""Concurrent file transfers to and from remote checkpoint storage.

A commit uploads every new file of its RocksDB checkpoint and a restore on another machine
downloads every file of the version; on an object store each file is at least one request of
tens of milliseconds, so one after another the commit's latency is the sum of them. Like
Flink's RocksDB state backend (``state.backend.rocksdb.checkpoint.transfer.thread.num``,
default 4), up to ``transfer_threads()`` files move at once; pyarrow's file systems release
the GIL while they wait on the network. Local storage links or copies one file after another
(a hard link takes microseconds, a thread start longer).

The number is per process (a Spark Python worker runs one task at a time): the environment
variable ``STATEENGINE_TRANSFER_THREADS`` sets it where the workers start (for example
``spark.executorEnv.STATEENGINE_TRANSFER_THREADS``), ``set_transfer_threads`` in code.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
U = TypeVar("U")

ENV = "STATEENGINE_TRANSFER_THREADS"
DEFAULT_THREADS = 4
_MAX_THREADS = 64

_lock = threading.Lock()


def _checked(threads: object, source: str) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or \
            not 1 <= threads <= _MAX_THREADS:
        raise ValueError(f"{source} must be an int from 1 to {_MAX_THREADS} (1: one file after "
                         f"another), got {threads!r}")
    return threads


def _from_environment() -> int:
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_THREADS
    try:
        threads: object = int(raw)
    except ValueError:
        threads = raw
    return _checked(threads, f"${ENV} ({raw!r})")


_threads = _from_environment()


def set_transfer_threads(threads: int) -> int:
    """Sets how many files a commit uploads, and a restore downloads, at once on remote
    storage (HDFS, S3; default 4, or ``$STATEENGINE_TRANSFER_THREADS``) in this process;
    returns the previous number. 1 moves one file after another."""
    global _threads
    threads = _checked(threads, "transfer threads")
    with _lock:
        previous, _threads = _threads, threads
    return previous


def transfer_threads() -> int:
    """How many files move at once on remote storage in this process."""
    return _threads


def settle(fn: Callable[[T], U], items: Sequence[T], threads: int) -> list[U | Exception]:
    """[fn(item), or the exception it raised] per item, in the items' order: up to
    ``threads`` calls at once (one after another when 1 or fewer than two items). Every call
    has finished when this returns."""
    def one(item: T) -> U | Exception:
        try:
            return fn(item)
        except Exception as e:  # handed to the caller
            return e

    if threads < 2 or len(items) < 2:
        return [one(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items)),
                            thread_name_prefix="stateengine-transfer") as pool:
        return list(pool.map(one, items))


def transfer_each(fn: Callable[[T], U], items: Sequence[T], remote: bool) -> list[U]:
    """fn(item) for every item, up to ``transfer_threads()`` at once when ``remote``. Every
    call finishes before this returns or raises: the caller may then delete what the calls
    read. After a failure no further call starts; raises the error of the first item (in the
    items' order) that failed."""
    threads = transfer_threads() if remote else 1
    if threads < 2 or len(items) < 2:
        return [fn(item) for item in items]
    failed = threading.Event()

    def guarded(item: T) -> U | None:
        if failed.is_set():
            return None  # skipped: an error is raised below
        try:
            return fn(item)
        except Exception:
            failed.set()
            raise

    results = settle(guarded, items, threads)
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results  # type: ignore[return-value]
