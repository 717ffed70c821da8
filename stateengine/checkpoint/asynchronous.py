"""The asynchronous part of snapshots: a future running on a small background pool.

As in Flink, a snapshot is split in a synchronous part (done before ``snapshot`` returns: it
fixes which writes are in) and an asynchronous part (encoding, I/O, upload) that runs here,
with the GIL released by the native code, while the task keeps processing.
"""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any, Callable, Generic, TypeVar

from ..errors import SnapshotCancelledError

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stateengine-snapshot")
        return _pool


class AsyncSnapshot(Generic[T]):
    """A running snapshot: ``result()`` waits for its handle, ``cancel()`` stops it."""

    def __init__(self, run: Callable[[], T], on_cancel: Callable[[], None],
                 on_finish: Callable[["AsyncSnapshot[Any]"], None] | None = None,
                 release: Callable[[], None] | None = None, deferred: bool = False) -> None:
        """``on_cancel`` stops a running ``run``; ``release`` frees what the synchronous part
        holds (a pinned RocksDB snapshot, hard links) when ``run`` is cancelled before it
        started, since ``run`` would otherwise have freed it. ``deferred``: ``run`` waits for
        the first ``result()`` and runs in that thread, for a caller that waits at once (a
        store's commit): the same work without handing it to the pool and back."""
        self._on_cancel = on_cancel
        self._on_finish = on_finish
        self._release = release
        self._deferred: Callable[[], T] | None = run if deferred else None
        self._deferred_lock = threading.Lock()
        self._future: Future[T] = Future() if deferred else _executor().submit(run)
        if on_finish is not None:
            self._future.add_done_callback(lambda _f: on_finish(self))

    def _run_deferred(self) -> None:
        with self._deferred_lock:
            run, self._deferred = self._deferred, None
            if run is None or not self._future.set_running_or_notify_cancel():
                return  # run already, or cancelled before it started
            try:
                value = run()
            except BaseException as e:  # the caller of result() sees it, as from the pool
                self._future.set_exception(e)
            else:
                self._future.set_result(value)

    def result(self, timeout: float | None = None) -> T:
        if self._deferred is not None:
            self._run_deferred()
        try:
            return self._future.result(timeout)
        except CancelledError:
            raise SnapshotCancelledError("the snapshot was cancelled before it started") from None

    def done(self) -> bool:
        return self._future.done()

    def cancel(self) -> None:
        """Stops the asynchronous part; ``result()`` then raises SnapshotCancelledError."""
        if self._future.cancel():
            if self._release is not None:
                self._release()
        else:
            self._on_cancel()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._deferred is not None:
            self._run_deferred()
        return self._future.exception(timeout)


class CompletedSnapshot(Generic[T]):
    """The same interface for work that finished synchronously."""

    def __init__(self, value: T) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> T:
        return self._value

    def done(self) -> bool:
        return True

    def cancel(self) -> None:
        pass

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return None
