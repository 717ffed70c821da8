"""RocksDB files from a checkpoint are read first in a child process.

A checkpoint's MANIFEST, OPTIONS, CURRENT and SST files are verified against their handle
(size, CRC-32C, SHA-256 with a key) before they are placed, but a file damaged *before* those
checksums were taken (a bug, a tool, an edit by hand, a writer without the key) passes them,
and RocksDB's own CRCs too when the damage came before RocksDB computed them. RocksDB then
parses bytes it wrote itself and trusts: Debian's librocksdb keeps its assertions (a sequence
number going backwards in the MANIFEST, an unknown value type in an SST key abort the
process), and a Release build reads out of range instead.

So before a restore opens a materialized directory, a child process opens it read-only and
reads what RocksDB parses (csrc/db_check.h): the MANIFEST replay, every live table's footer,
index, filter and properties, and of each table not checked before, every block's checksum and
every entry. A clean child lets the restore go on; an error it reports, a signal or a hang
that ends it becomes a ``CorruptionError`` naming the checkpoint, and the restore's directory
is removed as for any other damaged checkpoint. Tables this process checked before (the same
file, restored again through a hard link) are not read again, and a directory whose content
was checked before spawns no child at all.

Tables written by stateengine's own RocksDB are not read either: a commit records the
identity of each table its database wrote (flushes, compactions) as it places it in the
checkpoint, and a check records the tables it read. With a machine-wide memo
(``configure_check_memo``, which ``StateStoreProvider`` turns on under its local directory)
these records are shared by every process of the user on the machine, so a Spark task that
lands on another Python worker restores what the previous worker committed without reading
it again; only tables from elsewhere are read.

The child is ``python -I -S`` loading the native module as a plain shared library through
ctypes (no Python module init, no numpy, no package import): it starts in tens of
milliseconds, and the native module it loads is exactly the restoring process's, so it reads
with the same librocksdb.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from typing import Any

from .. import _native
from ..errors import CorruptionError, StorageError

# The child: limits its own address space (never above an inherited limit; not it runs under AddressSanitizer, which
# reserves terabytes of shadow memory), then calls the C entry point.
_CHILD = r"""
import ctypes, os, resource, sys
limit = int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
if hard != resource.RLIM_INFINITY:
    limit = min(limit, hard)
if limit and "asan" not in os.environ.get("LD_PRELOAD", ""):
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
fn = ctypes.CDLL(sys.argv[1]).stateengine_check_db
fn.restype = ctypes.c_int
fn.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t)
buf = ctypes.create_string_buffer(8192)
rc = fn(os.fsencode(sys.argv[2]), sys.stdin.buffer.read(), buf, len(buf))
sys.stdout.write(buf.value.decode("utf-8", "replace"))
sys.stdout.flush()
os._exit(rc)
"""

#: Address space of the child: far above what reading a checkpoint needs (a 32 MiB block
#: cache, and each table's index and filter blocks, about 1.5 bytes per key: 150 MB at 100M
#: keys), so only runaway allocations hit it.
MEMORY_LIMIT = 4 << 30
#: A child that reads slower than this many bytes per second (after a minute's grace) is
#: taken to be stuck in damaged data.
MIN_BYTES_PER_SECOND = 2 << 20
_GRACE_SECONDS = 60.0

_lock = threading.Lock()
_enabled = True
# Table files (SSTs) already read entry by entry, by (device, inode, size, mtime) like
# storage.py's verification memo: a file restored again through a hard link (local
# checkpoints, the file cache of remote ones) is not read again, and a directory whose every
# file was checked as it is is not checked again at all.
_CHECKED_TABLES: "OrderedDict[tuple[int, int, int, int], None]" = OrderedDict()
_CHECKED_DIRS: "OrderedDict[str, None]" = OrderedDict()
_MEMO_LIMIT = 200_000
# The machine-wide memo: an empty file per trusted table identity in a directory of the
# user's own (checked: owned by this user, writable by nobody else), touched on every use
# and swept of entries unused for a week (or beyond _SHARED_LIMIT, oldest first).
_shared_root: str | None = None
_shared_explicit = False  # configured by configure_check_memo, not by a provider
_SHARED_LIMIT = 100_000
_SHARED_MAX_AGE_S = 7 * 24 * 3600.0
_SWEEP_INTERVAL_S = 600.0
_last_sweep = 0.0
#: The machine-wide memo's folder inside a provider's local directory: records of checked
#: table identities shared by the query's workers, not a part of any restored state.
MEMO_DIR = "checked-tables"


def set_rocksdb_file_checks(enabled: bool) -> bool:
    """Turns the child-process check of restored RocksDB files on (the default) or off, for
    this process; returns the previous setting. Off, a restore opens checkpoint files
    directly, as fast as before, and a file damaged behind its checksums may end the process
    (see docs/reliability/untrusted-files.md)."""
    global _enabled
    with _lock:
        previous, _enabled = _enabled, bool(enabled)
    return previous


def rocksdb_file_checks() -> bool:
    """Whether restores check RocksDB files in a child process first."""
    return _enabled


def forget_checks() -> None:
    """Drops the memo of checked files, this process's and the machine-wide one (campaigns
    isolate their cases with it)."""
    with _lock:
        _CHECKED_TABLES.clear()
        _CHECKED_DIRS.clear()
        root = _shared_root
    if root is not None:
        for name in _shared_names(root):
            _unlink(os.path.join(root, name))


def configure_check_memo(path: str | os.PathLike | None) -> None:
    """Shares the memo of trusted tables with every process of this user on the machine
    through the directory ``path`` (None: this process's memo only). Whoever can write there
    could make a table trusted, so it must be a directory of this user's that no one else may
    write to (a local working directory is: it holds the live databases); any other is not
    used."""
    global _shared_explicit
    _shared_explicit = True
    _configure(path)


def follow_local_dir(local_dir: str) -> None:
    """The memo in ``<local_dir>/checked-tables`` (``MEMO_DIR``), unless
    ``configure_check_memo`` chose one: each StateStoreProvider calls it, so the Python
    workers of a query (one local directory) share their records."""
    if not _shared_explicit:
        _configure(os.path.join(local_dir, MEMO_DIR))


def _configure(path: str | os.PathLike | None) -> None:
    global _shared_root
    root = None
    if path is not None:
        root = os.path.abspath(os.fspath(path))
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
        except OSError:
            root = None
        if root is not None and not _private_dir(root):
            root = None
    with _lock:
        _shared_root = root


def check_memo_root() -> str | None:
    """The machine-wide memo's directory, or None."""
    return _shared_root


def trust_tables(paths: Any) -> None:
    """Records table files that stateengine's own RocksDB wrote, as they lie where restores
    will find them (a local checkpoint's copy, the file cache's link), so that no restore reads
    them again: their bytes come from this library, not from a checkpoint."""
    keys = []
    for path in paths:
        try:
            keys.append(_stat_key(path))
        except OSError:
            continue
    _remember(_CHECKED_TABLES, keys)
    _shared_add(keys)


def _private_dir(root: str) -> bool:
    try:
        st = os.stat(root)
    except OSError:
        return False
    getuid = getattr(os, "getuid", None)
    owned = getuid is None or st.st_uid == getuid()
    return owned and not st.st_mode & 0o022


def _marker(root: str, key: tuple[int, int, int, int]) -> str:
    return os.path.join(root, "%x-%x-%x-%x" % key)


def _shared_knows(key: tuple[int, int, int, int]) -> bool:
    root = _shared_root
    if root is None:
        return False
    try:
        os.utime(_marker(root, key))  # in use: kept by the sweep
        return True
    except OSError:
        return False


def _shared_add(keys: Any) -> None:
    global _last_sweep
    root = _shared_root
    if root is None:
        return
    for key in keys:
        try:
            _touch(_marker(root, key))
        except FileNotFoundError:  # the directory was removed: made again, as configured
            try:
                os.makedirs(root, mode=0o700, exist_ok=True)
                _touch(_marker(root, key))
            except OSError:
                return
        except OSError:
            return  # the memo is an optimisation: a table not recorded is read again
    now = time.monotonic()
    with _lock:
        if now - _last_sweep < _SWEEP_INTERVAL_S:
            return
        _last_sweep = now
    _sweep(root)


def _touch(path: str) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    os.utime(path)


def _shared_names(root: str) -> list[str]:
    try:
        return [n for n in os.listdir(root) if n.count("-") == 3]
    except OSError:
        return []


def _sweep(root: str) -> None:
    entries = []
    for name in _shared_names(root):
        try:
            entries.append((os.stat(os.path.join(root, name)).st_mtime, name))
        except OSError:
            continue
    entries.sort(reverse=True)
    cutoff = time.time() - _SHARED_MAX_AGE_S
    for i, (mtime, name) in enumerate(entries):
        if i >= _SHARED_LIMIT or mtime < cutoff:
            _unlink(os.path.join(root, name))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _stat_key(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _remember(memo: OrderedDict, keys: Any) -> None:
    with _lock:
        for key in keys:
            memo[key] = None
            memo.move_to_end(key)
        while len(memo) > _MEMO_LIMIT:
            memo.popitem(last=False)


def _survey(db_dir: str) -> tuple[dict[str, tuple[int, int, int, int]], str, int]:
    """(table file name -> stat key, identity of the whole directory, total bytes): the
    identity hashes the small files' bytes and the tables' stat keys."""
    return _identify({name: os.path.join(db_dir, name) for name in os.listdir(db_dir)})


def _identify(files: dict[str, str]) -> tuple[dict[str, tuple[int, int, int, int]], str, int]:
    """_survey of a directory that would hold ``files`` (name there -> a path of the file,
    or of a hard link of it)."""
    tables, total = {}, 0
    digest = hashlib.sha256()
    for name in sorted(files):
        path = files[name]
        st = os.stat(path)
        total += st.st_size
        digest.update(name.encode() + b"\0")
        if name.endswith(".sst"):
            tables[name] = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            digest.update(repr(tables[name]).encode())
        else:
            with open(path, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    return tables, digest.hexdigest(), total


def trust_checkpoint_files(files: dict[str, str]) -> None:
    """Records the RocksDB directory that a restore of a checkpoint this process's RocksDB
    just wrote will materialize (name there -> the checkpoint's file; a local checkpoint's
    tables are hard-linked into it, its other files copied), as checked: its tables are
    trusted already (written here, or checked when they were restored) and its MANIFEST,
    OPTIONS and CURRENT are the bytes RocksDB wrote for it. A restore of exactly that
    content in this process then spawns no child (a peek between batches, a rescaled
    batch); any other content still gets one."""
    if not _enabled:
        return
    try:
        identity = _identify(files)[1]
    except OSError:
        return  # moved or deleted meanwhile: its restore is checked as any other
    _remember(_CHECKED_DIRS, [identity])


def check_rocksdb_files(db_dir: str, source: str) -> dict[str, Any] | None:
    """Reads the RocksDB directory db_dir in a child process; raises CorruptionError (naming
    source, the checkpoint it came from) if RocksDB reports it damaged or the child dies or
    hangs reading it. Returns what the child read ({"column_families", "files", "scanned",
    "entries", "open_s", "scan_s"}), {"memo": True} when this very directory content was
    checked before, or None when checks are turned off."""
    if not _enabled:
        return None
    tables, identity, total = _survey(db_dir)
    with _lock:
        if identity in _CHECKED_DIRS:
            return {"memo": True}
        trusted = {name for name, key in tables.items() if key in _CHECKED_TABLES}
    trusted |= {name for name, key in tables.items() if name not in trusted and _shared_knows(key)}
    timeout = _GRACE_SECONDS + total / MIN_BYTES_PER_SECOND
    cmd = [sys.executable, "-I", "-S", "-c", _CHILD, _native.__file__, db_dir, str(MEMORY_LIMIT)]
    try:
        proc = subprocess.run(cmd, input="\n".join(sorted(trusted)).encode(), capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CorruptionError(f"{source}: reading its RocksDB files did not finish within "
                              f"{timeout:.0f} s (the check runs in a child process, which "
                              f"was stopped); the files are damaged") from None
    except OSError as e:
        raise StorageError(f"{source}: cannot start the child process that checks its RocksDB "
                           f"files ({sys.executable}): {e}") from None
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode == 0 and out.startswith("ok "):
        cfs, files, scanned, entries, open_us, scan_us = (int(x) for x in out.split()[1:7])
        _remember(_CHECKED_TABLES, tables.values())
        _remember(_CHECKED_DIRS, [identity])
        _shared_add(tables.values())
        return {"column_families": cfs, "files": files, "scanned": scanned, "entries": entries,
                "open_s": open_us / 1e6, "scan_s": scan_us / 1e6}
    if proc.returncode == 1:
        raise CorruptionError(f"{source}: its RocksDB files are damaged: {out}")
    if proc.returncode == 3:
        raise StorageError(f"{source}: reading its RocksDB files failed: {out}")
    if proc.returncode < 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        why = err[-1] if err else "no message"
        raise CorruptionError(
            f"{source}: its RocksDB files are damaged: RocksDB died reading them "
            f"({signal.Signals(-proc.returncode).name}: {why[:500]}); the check runs in a "
            f"child process, so this process goes on")
    raise CorruptionError(f"{source}: its RocksDB files could not be read: "
                          f"{out or proc.stderr.decode('utf-8', 'replace')[-500:]} "
                          f"(exit status {proc.returncode})")
