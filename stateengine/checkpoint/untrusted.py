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

#: Address space of the child: far above what reading a checkpoint needs (an 8 MiB block
#: cache, index and filter blocks through it), so only runaway allocations hit it.
MEMORY_LIMIT = 4 << 30
#: A child that reads slower than this many bytes per second (after a minute's grace) is
#: taken to be stuck in damaged data.
MIN_BYTES_PER_SECOND = 8 << 20
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
    """Drops the memo of checked files (campaigns isolate their cases with it)."""
    with _lock:
        _CHECKED_TABLES.clear()
        _CHECKED_DIRS.clear()


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
    tables, total = {}, 0
    digest = hashlib.sha256()
    for name in sorted(os.listdir(db_dir)):
        path = os.path.join(db_dir, name)
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
        trusted = [name for name, key in tables.items() if key in _CHECKED_TABLES]
    timeout = _GRACE_SECONDS + total / MIN_BYTES_PER_SECOND
    cmd = [sys.executable, "-I", "-S", "-c", _CHILD, _native.__file__, db_dir, str(MEMORY_LIMIT)]
    try:
        proc = subprocess.run(cmd, input="\n".join(trusted).encode(), capture_output=True,
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
