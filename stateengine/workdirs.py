"""Working directories in a local root: their names, who owns them, and sweeping the stale.

A ``StateStoreProvider`` builds each partition's RocksDB in
``<local root>/<operator>-p<P>-of-<N>-<pid>-<12 hex>`` and removes it on ``close()``. A process
that ends without closing (a killed Spark worker, a crashed executor, a killed test) leaves
it behind, 4-8 MB each. ``sweep_local_dir`` removes such directories when they are certainly
not in use; a provider starts it once per process and local root, on a daemon thread, the
first time it opens a backend there (``STATEENGINE_SWEEP_LOCAL_DIR=0`` turns that off).

A directory is kept when this process has a database open in it, its name's pid is this
process or a running one, a RocksDB ``LOCK`` file in it is locked by another process (RocksDB
holds a POSIX record lock on ``db/LOCK`` while the database is open, which other PID
namespaces sharing the directory see too), it holds anything a working directory never
holds, its ``LOCK`` is seconds old (RocksDB creates it, then locks it), or it has no ``LOCK``
and changed within ``min_age`` seconds (being created). Only names matching ``WORKDIR_NAME``
are looked at; nothing else in the root is touched.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections import Counter
from typing import Iterator

log = logging.getLogger("stateengine")

SWEEP_ENV = "STATEENGINE_SWEEP_LOCAL_DIR"
DEFAULT_MIN_AGE = 3600.0  # seconds a directory without a LOCK file must be unchanged
# RocksDB creates its LOCK file and locks it at once: a younger one may be between the two
_LOCK_GRACE = 10.0

# <operator>-p<P>-of-<N>-<pid>-<12 hex>; names written before the pid was added lack it
WORKDIR_NAME = re.compile(r"(?P<operator>.+)-p(?P<partition>\d+)-of-(?P<partitions>\d+)-"
                          r"(?:(?P<pid>\d+)-)?(?P<tag>[0-9a-f]{12})", re.DOTALL)
# what a backend ever creates in its working directory (backend.py _setup)
_WORKDIR_ENTRIES = frozenset({"db", "checkpoints", "staging"})
# where RocksDB's lock files lie: the backend's database and restores' temporary ones
_LOCK_GLOBS = (os.path.join("db", "LOCK"), os.path.join("staging", "*", "db", "LOCK"))
_OFF = ("0", "false", "no", "off")

_guard = threading.Lock()
_open: Counter[str] = Counter()  # working directories of databases this process has open
_sweeps: dict[tuple[int, str], threading.Thread] = {}  # (pid, root) -> its automatic sweep
_reports: dict[tuple[int, str], "SweepReport"] = {}


def _new_guard_in_child() -> None:
    global _guard
    _guard = threading.Lock()  # a fork while a sweep held it would leave it held for good


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_guard_in_child)


def workdir_name(operator_id: str, partition: int, partitions: int) -> str:
    """A new working directory's name: operator, partition, this process's pid and a random
    tag, so a sweep in another process can tell who owns it."""
    return f"{operator_id}-p{partition}-of-{partitions}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def claim(path: str) -> None:
    """Marks ``path`` as holding a database this process opens: no sweep in this process
    touches it (POSIX record locks belong to the process: taking and dropping a lock on its
    LOCK file would silently drop RocksDB's own)."""
    with _guard:
        _open[os.path.realpath(path)] += 1


def release(path: str) -> None:
    """Ends one ``claim(path)`` (that database is closed, or failed to open)."""
    with _guard:
        key = os.path.realpath(path)
        _open[key] -= 1
        if _open[key] <= 0:
            del _open[key]


@dataclasses.dataclass
class SweepEntry:
    """One working directory a sweep looked at: ``removed`` (or would be, in a dry run),
    why, the disk space it held (bytes, counted for removed ones only), and whether it was
    kept because inspecting or removing it failed."""

    name: str
    removed: bool
    reason: str
    bytes: int = 0
    failed: bool = False


@dataclasses.dataclass
class SweepReport:
    """What ``sweep_local_dir`` did in ``root``: every working directory it looked at."""

    root: str
    dry_run: bool
    entries: list[SweepEntry] = dataclasses.field(default_factory=list)

    @property
    def failed(self) -> list[SweepEntry]:
        """The directories kept because inspecting or removing them failed."""
        return [e for e in self.entries if e.failed]

    @property
    def removed(self) -> list[SweepEntry]:
        """The directories removed (or, in a dry run, that would be)."""
        return [e for e in self.entries if e.removed]

    @property
    def kept(self) -> list[SweepEntry]:
        """The directories left in place, each with its reason."""
        return [e for e in self.entries if not e.removed]

    @property
    def bytes_removed(self) -> int:
        """Disk space of the removed directories (allocated blocks, as ``du`` counts)."""
        return sum(e.bytes for e in self.removed)

    def summary(self) -> str:
        """One line: how many directories and bytes were (or would be) removed, and kept."""
        verb = "would remove" if self.dry_run else "removed"
        return (f"{self.root}: {verb} {len(self.removed)} stale working director"
                f"{'y' if len(self.removed) == 1 else 'ies'} ({self.bytes_removed / 1e6:.1f} MB), "
                f"kept {len(self.kept)}")


def sweep_local_dir(root: str, dry_run: bool = False,
                    min_age: float = DEFAULT_MIN_AGE) -> SweepReport:
    """Removes the working directories in ``root`` that are certainly not in use (see the
    module docstring); ``dry_run`` decides the same without removing anything. Raises
    FileNotFoundError if ``root`` does not exist; a directory that cannot be inspected or
    removed is kept and reported, never raised."""
    report = SweepReport(os.path.abspath(root), dry_run)
    now = time.time()
    with os.scandir(root) as it:
        candidates = sorted((e.name for e in it
                             if WORKDIR_NAME.fullmatch(e.name) and e.is_dir(follow_symlinks=False)))
    for name in candidates:
        path = os.path.join(report.root, name)
        try:
            entry = _sweep_one(path, name, now, dry_run, min_age)
        except FileNotFoundError:
            continue  # removed meanwhile (another sweep, or its owner's close())
        except OSError as e:
            entry = SweepEntry(name, False, f"not inspected: {e}", failed=True)
        report.entries.append(entry)
    return report


def sweep_in_background(root: str) -> threading.Thread | None:
    """Starts this process's one sweep of ``root`` on a daemon thread (None if it ran or runs
    already, or ``$STATEENGINE_SWEEP_LOCAL_DIR`` turns sweeping off). It never raises: any
    error is logged."""
    if not sweep_enabled():
        return None
    key = (os.getpid(), os.path.abspath(root))  # per pid: a forked worker sweeps once itself
    with _guard:
        if key in _sweeps:
            return None
        thread = threading.Thread(target=_background, args=key, daemon=True,
                                  name="stateengine-sweep-local-dir")
        _sweeps[key] = thread
    try:
        thread.start()
    except RuntimeError:  # no thread to be had now: a later open tries again
        log.warning("could not start the sweep of %s", root, exc_info=True)
        with _guard:
            del _sweeps[key]
        return None
    return thread


def wait_for_sweep(root: str, timeout: float | None = None) -> SweepReport | None:
    """Waits for this process's automatic sweep of ``root`` and returns its report (None if
    none ran, or it failed, or ``timeout`` passed first)."""
    key = (os.getpid(), os.path.abspath(root))
    with _guard:
        thread = _sweeps.get(key)
    if thread is None:
        return None
    thread.join(timeout)
    with _guard:
        return _reports.get(key)


def sweep_enabled() -> bool:
    """Whether providers sweep their local root automatically: yes unless
    ``$STATEENGINE_SWEEP_LOCAL_DIR`` is 0, false, no or off."""
    return os.environ.get(SWEEP_ENV, "").strip().lower() not in _OFF


def _background(pid: int, root: str) -> None:
    started = time.perf_counter()
    try:
        report = sweep_local_dir(root)
    except FileNotFoundError:
        log.debug("no sweep of %s: it is gone", root)
        return
    except Exception:  # a sweep must never fail a task
        log.warning("sweeping stale working directories in %s failed", root, exc_info=True)
        return
    with _guard:
        _reports[(pid, root)] = report
    level = logging.INFO if report.removed or report.failed else logging.DEBUG
    log.log(level, "%s in %.2f s", report.summary(), time.perf_counter() - started)
    for e in report.failed:
        log.info("could not sweep %s: %s", os.path.join(root, e.name), e.reason)


def _sweep_one(path: str, name: str, now: float, dry_run: bool, min_age: float) -> SweepEntry:
    pid = WORKDIR_NAME.fullmatch(name).group("pid")  # type: ignore[union-attr]
    owner = int(pid) if pid else None
    if owner == os.getpid() or _open_here(path):
        return SweepEntry(name, False, "in use by this process")
    if owner is not None and _alive(owner):
        return SweepEntry(name, False, f"owner pid {owner} is running")
    whose = f"owner pid {owner} is gone" if owner is not None else "no owner pid in its name"
    strange = set(os.listdir(path)) - _WORKDIR_ENTRIES
    if strange:
        return SweepEntry(name, False, f"holds {', '.join(sorted(strange))}: not a working "
                                       f"directory")
    locks = sorted(p for g in _LOCK_GLOBS for p in glob.glob(os.path.join(glob.escape(path), g)))
    fresh = [p for p in locks if now - os.stat(p).st_mtime < _LOCK_GRACE]
    if fresh:
        return SweepEntry(name, False, f"{whose}, LOCK file created "
                                       f"{now - os.stat(fresh[0]).st_mtime:.0f} s ago "
                                       f"(a database may be opening)")
    with _locked(locks) as held:
        if not held:
            return SweepEntry(name, False, f"{whose}, but its database is open in another "
                                           f"process (LOCK held)")
        if locks:
            why = f"{whose}, database not open"
        else:
            age = now - _newest_mtime(path)
            if age < min_age:
                return SweepEntry(name, False, f"{whose}, no LOCK file, changed "
                                               f"{age:.0f} s ago (under {min_age:.0f} s)")
            why = f"{whose}, no LOCK file, unchanged for {age / 3600:.1f} h"
        size = _disk_usage(path)
        if dry_run:
            return SweepEntry(name, True, why, size)
        try:
            shutil.rmtree(path)
        except OSError as e:
            return SweepEntry(name, False, f"removal failed: {e}", failed=True)
        return SweepEntry(name, True, why, size)


def _open_here(path: str) -> bool:
    path = os.path.realpath(path)  # the same directory however its root was spelled
    inside = path + os.sep
    with _guard:
        return any(p == path or p.startswith(inside) for p in _open)


def _alive(pid: int) -> bool:
    if pid < 1:
        return False  # os.kill(0, ...) would mean our own process group
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    except (OverflowError, ValueError):
        return False  # not a possible pid
    return True


class _locked:
    """Context: exclusive non-blocking POSIX record locks on every file of ``paths``, held
    until exit; ``held`` is False (and nothing stays locked) if any is locked elsewhere."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self.fds: list[int] = []

    def __enter__(self) -> bool:
        import fcntl

        try:
            for p in self.paths:
                self.fds.append(os.open(p, os.O_RDWR))
                try:
                    fcntl.lockf(self.fds[-1], fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # EACCES or EAGAIN: RocksDB holds it in another process
                    return False
        except BaseException:
            self.__exit__()
            raise
        return True

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds:
            os.close(fd)  # after the removal: the lock guarded it until here


def _newest_mtime(path: str) -> float:
    newest = os.lstat(path).st_mtime
    with os.scandir(path) as it:
        for e in it:
            newest = max(newest, e.stat(follow_symlinks=False).st_mtime)
    return newest


def _disk_usage(path: str) -> int:
    total = 0
    for entry in _walk(path):
        total += getattr(entry, "st_blocks", 0) * 512 or entry.st_size
    return total


def _walk(path: str) -> Iterator[os.stat_result]:
    try:
        with os.scandir(path) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                yield st
                if e.is_dir(follow_symlinks=False):
                    yield from _walk(e.path)
    except OSError:
        return

