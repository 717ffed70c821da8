"""Checkpoint storage on any file system ``pyarrow.fs`` reaches: local paths and ``file://``,
``hdfs://`` and ``s3://`` URIs.

A reader never sees half a file. On file systems with an atomic rename (local, HDFS) files are
written to a temporary name and then moved into place. Object stores have no rename (pyarrow
emulates it by copy and delete), but they make an object visible only once its upload is
complete, as a whole, and a PUT over an existing object replaces it atomically: there every
file is written straight to its final name, in one request when small, and then its stored
size is checked (a store that kept a truncated object gets the upload again). No directory
marker objects are created. Every download is checked against the size and CRC-32C the handle
recorded, and a mismatch names the file.

Calls to a non-local file system are retried when they fail transiently (retry.py): bounded,
logged on ``stateengine.storage`` and counted in ``retries``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, TypeVar

import pyarrow.fs as pafs
from pyarrow import NativeFile

from .. import _native
from ..errors import (CheckpointFileMissingError, CheckpointNotFoundError, CorruptionError,
                      StorageError)
from . import documents, file_cache
from .handles import FileRef
from .paths import UnsafePath, check_inside, check_relative, confine
from .retry import Retrier, ShortUploadError

_COPY_CHUNK = 4 << 20
# A read from an object store is one ranged GET per read call: larger reads, fewer requests.
_REMOTE_READ = 16 << 20
T = TypeVar("T")
log = logging.getLogger("stateengine.storage")

# Checkpoint files never change after they are published (unique names, written once), so a
# file whose identity and stat are unchanged since it was verified needs no second full read.
# Tasks that restore on every batch (a partition landing on another Python worker) would
# otherwise re-read the whole state just to checksum it. Keyed by (device, inode, size, mtime):
# hard links share the entry, and any write to the file changes its mtime. The value is the
# CRC-32C and, once computed, the SHA-256.
_VERIFIED: "OrderedDict[tuple[int, int, int, int], tuple[int, str]]" = OrderedDict()
_VERIFIED_LIMIT = 200_000
_verified_lock = threading.Lock()


def _stat_key(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a local file (hashlib releases the GIL on large buffers)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _checksum(path: str, want_sha: bool) -> tuple[int, str, int, tuple[int, int, int, int]]:
    """(crc32c, sha256 or "", size, stat key) of a local file, reusing an earlier
    verification."""
    key = _stat_key(path)
    with _verified_lock:
        crc, sha = _VERIFIED.get(key, (None, ""))
    if crc is None:
        crc, _ = _native.file_crc32c(path)
    if want_sha and not sha:
        sha = file_sha256(path)
    return crc, sha, key[2], key


def _crc_and_size(path: str, crc: int | None) -> tuple[int, int]:
    """(crc32c, size) of a local file about to be published: the CRC its writer computed while
    writing, or else read from the file."""
    if crc is None:
        return _native.file_crc32c(path)
    return crc, os.path.getsize(path)


def _remember(key: tuple[int, int, int, int], crc: int, sha: str) -> None:
    with _verified_lock:
        _VERIFIED[key] = (crc, sha)
        _VERIFIED.move_to_end(key)
        while len(_VERIFIED) > _VERIFIED_LIMIT:
            _VERIFIED.popitem(last=False)


def forget_verifications() -> None:
    """Drops the verification memo (campaigns isolate their cases with it)."""
    with _verified_lock:
        _VERIFIED.clear()


# Local directories whose checkpoints need not survive a crash of the machine: a test
# harness's throwaway state (stateengine.testing). Commits there skip fsync, which on a disk
# is most of a small commit; the renames that publish a file whole stay.
_UNSYNCED: set[str] = set()
_unsynced_lock = threading.Lock()


def skip_syncs(directory: str, skip: bool = True) -> None:
    """While ``skip``, local storage opened under ``directory`` afterwards writes without
    fsync of its files and directories (a crash of the machine may lose what it wrote; a
    process that fails loses nothing, and readers still see a file whole or not at all).
    For stateengine.testing's throwaway checkpoints: every other storage syncs."""
    root = os.path.abspath(directory).rstrip("/")
    with _unsynced_lock:
        if skip:
            _UNSYNCED.add(root)
        else:
            _UNSYNCED.discard(root)


def _synced(root: str) -> bool:
    with _unsynced_lock:
        return not any(root == d or root.startswith(d + "/") for d in _UNSYNCED)


# URI schemes resolved by a registered factory instead of pyarrow.fs.FileSystem.from_uri: for
# file systems pyarrow cannot build from a URI alone (and for tests of the non-local path).
_SCHEMES: dict[str, Callable[[str], tuple[pafs.FileSystem, str]]] = {}


def register_filesystem(scheme: str, factory: Callable[[str], tuple[pafs.FileSystem, str]]) -> None:
    """Makes ``scheme://...`` URIs open through ``factory(uri) -> (filesystem, root path)``."""
    _SCHEMES[scheme] = factory


@dataclass(frozen=True)
class LocalEntry:
    """What list_dir says about an entry of a local directory (the fields of pyarrow's
    FileInfo that callers use)."""

    base_name: str
    type: pafs.FileType
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, entry: os.DirEntry) -> "LocalEntry":
        st = entry.stat(follow_symlinks=False)
        kind = (pafs.FileType.Directory if entry.is_dir(follow_symlinks=False) else
                pafs.FileType.File if entry.is_file(follow_symlinks=False) else
                pafs.FileType.Unknown)
        return cls(entry.name, kind, st.st_size, st.st_mtime_ns)


class CheckpointStorage:
    """A checkpoint root directory. Paths given to methods are relative to the root.

    ``uri`` reopens the same storage anywhere (an S3 URI keeps its query options);
    ``location`` is what messages show (no options)."""

    def __init__(self, uri: str | os.PathLike) -> None:
        uri = os.fspath(uri)
        scheme = uri.split("://", 1)[0] if "://" in uri else ""
        self.retrier: Retrier | None = None
        if scheme in _SCHEMES:
            self.fs, root = _SCHEMES[scheme](uri)
            self.uri = self.location = uri.rstrip("/")
        elif scheme == "s3":
            from .s3 import open_s3

            self.fs, root, self.location, self.retrier = open_s3(uri)
            query = uri.partition("?")[2]
            self.uri = self.location + (f"?{query}" if query else "")
        elif "://" in uri and not uri.startswith("file://"):
            try:
                self.fs, root = pafs.FileSystem.from_uri(uri)
            except Exception as e:  # pyarrow raises ArrowInvalid / OSError variants
                raise StorageError(f"cannot open checkpoint storage {uri}: {e}") from e
            self.uri = self.location = uri.rstrip("/")
        else:
            root = os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)
            self.fs = pafs.LocalFileSystem()
            self.uri = self.location = root
        self.root = root.rstrip("/")
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        # no rename, no directories, atomic whole-object PUTs (see the module docstring)
        self.is_object_store = type(self.fs).__name__ in ("S3FileSystem", "GcsFileSystem")
        if self.retrier is None and not self.is_local:
            self.retrier = Retrier()
        self._real_root: str | None = None  # realpath of the root, once it exists
        # fsync what it writes (all storage but a test harness's throwaway directory)
        self.sync = not self.is_local or _synced(self.root)

    def __repr__(self) -> str:
        return f"CheckpointStorage({self.location!r})"

    @property
    def retries(self) -> int:
        """Storage calls retried so far (monotonic; shared by the storage objects of one S3
        file system in this process)."""
        return self.retrier.retries if self.retrier is not None else 0

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """fn() with the bounded retries of a non-local file system (retry.py)."""
        return fn() if self.retrier is None else self.retrier.call(what, fn)

    def full_path(self, rel: str) -> str:
        """rel (a path relative to the checkpoint root) as a path of the file system."""
        return f"{self.root}/{rel}" if rel else self.root

    def describe(self, rel: str) -> str:
        """The location of rel as a user would type it (for error messages)."""
        return f"{self.location}/{rel}" if rel else self.location

    def resolve(self, rel: str) -> str:
        """The full path of rel after checking that it stays inside the root: a relative path
        of plain names and, on local storage, no symlink leading out (paths.py). Every method
        that opens, copies, links or deletes goes through it."""
        if not rel:
            return self.root
        confine(rel, self.describe(rel))
        full = self.full_path(rel)
        if self.is_local:
            real_root = self._real_root or os.path.realpath(self.root)
            if self._real_root is None and os.path.isdir(real_root):
                self._real_root = real_root  # fixed once the root exists
            check_inside(real_root, self.root, rel, self.describe(rel))
        return full

    def check_target(self, rel: str) -> str:
        """resolve() for a path a caller asks to write: a path that is not a relative path of
        plain names is the caller's mistake (ValueError), not damage."""
        try:
            check_relative(rel, "checkpoint path")
        except UnsafePath as e:
            raise ValueError(f"{e}; give a path relative to {self.uri}") from None
        return self.resolve(rel)

    # ---- queries ---------------------------------------------------------------------------

    def _info(self, rel: str) -> pafs.FileInfo:
        full = self.resolve(rel)
        return self._call(f"looking up {self.describe(rel)}", lambda: self.fs.get_file_info(full))

    def exists(self, rel: str) -> bool:
        """Whether a file or directory exists at rel."""
        return self._info(rel).type != pafs.FileType.NotFound

    def is_dir(self, rel: str) -> bool:
        """Whether rel is a directory."""
        return self._info(rel).type == pafs.FileType.Directory

    def list_dir(self, rel: str) -> "list[pafs.FileInfo | LocalEntry]":
        """Entries directly under rel ([] if rel does not exist): ``base_name``, ``type``,
        ``size``, ``mtime_ns``."""
        full = self.resolve(rel)
        if self.is_local:  # os.scandir: a fraction of pyarrow's per-call cost
            try:
                with os.scandir(full) as it:
                    return [LocalEntry.of(e) for e in it]
            except (FileNotFoundError, NotADirectoryError):
                return []
        def listing() -> list[pafs.FileInfo]:
            # one LIST on an object store: a missing prefix lists as empty
            if not self.is_object_store and \
                    self.fs.get_file_info(full).type == pafs.FileType.NotFound:
                return []
            return self.fs.get_file_info(pafs.FileSelector(full, allow_not_found=True))

        return self._call(f"listing {self.describe(rel)}", listing)

    def read_bytes(self, rel: str, limit: int | None = None) -> bytes:
        """The whole file at rel; a file longer than ``limit`` (default: the documents' cap)
        is refused as corrupted, so a hostile size never makes a reader buffer more."""
        limit = documents.MAX_DOCUMENT_BYTES if limit is None else limit
        full = self.resolve(rel)

        def remote() -> bytes:
            with self.fs.open_input_stream(full) as f:
                parts, got = [], 0
                while got <= limit and (chunk := f.read(min(_COPY_CHUNK, limit + 1 - got))):
                    parts.append(chunk)
                    got += len(chunk)
                return b"".join(parts)

        try:
            if self.is_local:
                with open(full, "rb") as f:  # read(n) would allocate n bytes up front
                    data = f.read(min(os.fstat(f.fileno()).st_size, limit) + 1)
            else:
                data = self._call(f"reading {self.describe(rel)}", remote)
        except (FileNotFoundError, NotADirectoryError):
            raise CheckpointNotFoundError(f"checkpoint file {self.describe(rel)} does not exist") from None
        except IsADirectoryError:
            raise CorruptionError(f"checkpoint file {self.describe(rel)} is a directory") from None
        except OSError as e:
            if _not_found(e):
                raise CheckpointNotFoundError(
                    f"checkpoint file {self.describe(rel)} does not exist") from None
            raise StorageError(f"cannot read {self.describe(rel)}: {e}") from e
        if len(data) > limit:
            raise CorruptionError(f"checkpoint file {self.describe(rel)} is larger than the "
                                  f"{limit} bytes such a file may have; it is corrupted")
        return data

    # ---- writes ----------------------------------------------------------------------------

    def _ensure_parent(self, rel: str) -> None:
        if self.is_object_store:  # no directories: pyarrow would PUT a marker object per level
            return
        parent = self.full_path(rel).rsplit("/", 1)[0]
        self._call(f"creating {self.describe(parent[len(self.root) + 1:])}",
                   lambda: self.fs.create_dir(parent, recursive=True))

    def _put_object(self, rel: str, full: str, write: Callable[[NativeFile], None],
                    size: int) -> None:
        """Writes an object straight to its name (object stores only: the object appears
        whole when its upload completes) and checks the size the store kept."""
        def attempt() -> None:
            with self.fs.open_output_stream(full) as out:
                write(out)
            kept = self.fs.get_file_info(full).size
            if kept != size:
                raise ShortUploadError(f"the store kept {kept} of its {size} bytes")

        self._call(f"upload of {self.describe(rel)}", attempt)

    def _put_and_move(self, rel: str, final: str, write: Callable[[NativeFile], None]) -> None:
        """Writes a temporary file and renames it into place (file systems with rename)."""
        def attempt() -> None:
            tmp = f"{final}.tmp-{uuid.uuid4().hex}"
            try:
                with self.fs.open_output_stream(tmp) as out:
                    write(out)
                self.fs.move(tmp, final)
            except OSError:
                self._delete_quietly(tmp)
                raise

        self._call(f"upload of {self.describe(rel)}", attempt)

    def write_atomic(self, rel: str, data: bytes) -> None:
        """Publishes data at rel all at once: readers see the old file or the new one."""
        self._ensure_parent(rel)
        final = self.resolve(rel)
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        try:
            if self.is_local:
                with open(tmp, "wb") as f:
                    f.write(data)
                    if self.sync:
                        f.flush()
                        os.fsync(f.fileno())
                os.replace(tmp, final)
                if self.sync:
                    _fsync_dir(os.path.dirname(final))
            elif self.is_object_store:
                self._put_object(rel, final, lambda out: out.write(data), len(data))
            else:
                self._put_and_move(rel, final, lambda out: out.write(data))
        except OSError as e:
            if self.is_local:
                self._delete_quietly(tmp)
            raise StorageError(f"cannot publish {self.describe(rel)}: {e}") from e

    def upload(self, local_file: str, rel: str, local_name: str = "",
               crc: int | None = None, link: bool = False) -> FileRef:
        """Copies a local file to rel (temporary name, then move) and returns its FileRef.
        ``crc``: the file's CRC-32C if its writer computed it, else the file is read for it.
        ``link``: the file never changes again (a RocksDB checkpoint's files: tables and
        OPTIONS are immutable, MANIFEST and CURRENT private copies), so on local storage of
        the same file system it is hard-linked instead of copied, as restores link them."""
        crc, size = _crc_and_size(local_file, crc)
        self._ensure_parent(rel)
        final = self.resolve(rel)
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"

        def copy(out: NativeFile) -> None:
            with open(local_file, "rb") as src:
                while chunk := src.read(_COPY_CHUNK):
                    out.write(chunk)

        try:
            if self.is_local:
                if not (link and _hard_link(local_file, tmp)):
                    shutil.copyfile(local_file, tmp)
                if self.sync:
                    _fsync_file(tmp)
                os.replace(tmp, final)
            elif self.is_object_store:
                self._put_object(rel, final, copy, size)
            else:
                self._put_and_move(rel, final, copy)
        except OSError as e:
            if self.is_local:
                self._delete_quietly(tmp)
            raise StorageError(f"cannot upload {local_file} to {self.describe(rel)}: {e}") from e
        if not self.is_local and rel.endswith(".sst"):  # another worker's restore links it
            file_cache.keep(self.uri, rel, local_file)
        return FileRef(rel, size, crc, local_name)

    def place_local(self, rel: str) -> str:
        """A local temporary path that commit_local will move to rel (local storage only)."""
        self._ensure_parent(rel)
        return f"{self.resolve(rel)}.tmp-{uuid.uuid4().hex}"

    def commit_local(self, tmp_path: str, rel: str, local_name: str = "",
                     crc: int | None = None) -> FileRef:
        """Moves a file written at place_local's path to rel; ``crc`` as for upload."""
        crc, size = _crc_and_size(tmp_path, crc)
        os.replace(tmp_path, self.resolve(rel))
        return FileRef(rel, size, crc, local_name)

    # ---- verified reads ----------------------------------------------------------------------

    def download(self, ref: FileRef, local_file: str) -> None:
        """Copies ref to local_file and verifies its size and checksum. Never stores more than
        the size the handle recorded (a hostile file cannot fill the local disk)."""
        src = self.resolve(ref.path)
        too_long = False
        if self.is_local and os.path.isfile(src) and os.path.getsize(src) != ref.size:
            self._wrong_size(ref, os.path.getsize(src))  # before copying a file of any size

        def fetch() -> bool:
            """Copies the object; True if it is longer than the handle says."""
            with self.fs.open_input_stream(src) as f, open(local_file, "wb") as out:
                copied = 0
                while chunk := f.read(_REMOTE_READ):
                    copied += len(chunk)
                    if copied > ref.size:
                        return True
                    out.write(chunk)
            return False

        try:
            if self.is_local:
                shutil.copyfile(src, local_file)
            else:
                too_long = self._call(f"download of {self.describe(ref.path)}", fetch)
        except FileNotFoundError:
            raise CheckpointFileMissingError(
                f"checkpoint file {self.describe(ref.path)} does not exist") from None
        except IsADirectoryError:
            raise CorruptionError(f"checkpoint file {self.describe(ref.path)} is a directory, "
                                  f"not a file") from None
        except OSError as e:
            if _not_found(e):
                raise CheckpointFileMissingError(
                    f"checkpoint file {self.describe(ref.path)} does not exist") from None
            raise StorageError(f"cannot download {self.describe(ref.path)}: {e}") from e
        if too_long:
            raise CorruptionError(f"checkpoint file {self.describe(ref.path)} is longer than "
                                  f"the {ref.size} bytes its handle recorded (replaced)")
        self.verify_local(ref, local_file)

    def _wrong_size(self, ref: FileRef, size: int) -> None:
        raise CorruptionError(
            f"checkpoint file {self.describe(ref.path)} has {size} bytes but its handle "
            f"recorded {ref.size} (truncated or replaced)")

    def verify_local(self, ref: FileRef, local_file: str) -> None:
        """Checks size, CRC-32C and (if recorded) SHA-256 against the handle, once per
        unchanged file per process."""
        if not os.path.isfile(local_file):
            raise CorruptionError(f"checkpoint file {self.describe(ref.path)} is not a regular file")
        if os.path.getsize(local_file) != ref.size:  # before reading a possibly huge file
            self._wrong_size(ref, os.path.getsize(local_file))
        crc, sha, size, key = _checksum(local_file, bool(ref.sha256))
        if size != ref.size:
            self._wrong_size(ref, size)
        if crc != ref.crc32c:
            raise CorruptionError(
                f"checkpoint file {self.describe(ref.path)} is corrupted: CRC-32C {crc:#010x} "
                f"differs from the recorded {ref.crc32c:#010x}")
        if ref.sha256 and sha != ref.sha256:
            raise CorruptionError(
                f"checkpoint file {self.describe(ref.path)} fails its SHA-256 check: its content "
                f"is not what was checkpointed (tampered with)")
        _remember(key, crc, sha)

    def open_verified(self, ref: FileRef, scratch_dir: str) -> str:
        """A verified local path holding ref: the file itself on local storage (after its
        checksum is checked), else a downloaded copy under scratch_dir."""
        if self.is_local:
            path = self.resolve(ref.path)
            if not os.path.lexists(path):
                raise CheckpointFileMissingError(
                    f"checkpoint file {self.describe(ref.path)} does not exist")
            self.verify_local(ref, path)
            return path
        local = os.path.join(scratch_dir, uuid.uuid4().hex + "-" + os.path.basename(ref.path))
        self.download(ref, local)
        return local

    def place_verified(self, ref: FileRef, dest: str, link: bool = False) -> None:
        """Puts a verified copy of ref at the local path dest; with ``link`` (immutable files
        such as SSTs) a hard link of the file on local storage, so nothing is copied, and of
        the machine's cached copy of a remote file when there is one (file_cache.py)."""
        if not link:
            self.download(ref, dest)
            return
        if not self.is_local:
            self.resolve(ref.path)  # confined before any cache lookup
            if file_cache.link_cached(self.uri, ref.path, dest):
                try:
                    self.verify_local(ref, dest)
                    return
                except CorruptionError as e:  # the cached copy, not the checkpoint: refetch
                    file_cache.drop(self.uri, ref.path)
                    os.unlink(dest)
                    log.warning("file cache: %s; downloading it again", e)
            self.download(ref, dest)
            file_cache.count("downloads")
            file_cache.keep(self.uri, ref.path, dest)
            return
        src = self.resolve(ref.path)
        if not os.path.lexists(src):
            raise CheckpointFileMissingError(f"checkpoint file {self.describe(ref.path)} does not exist")
        if not os.path.isfile(src):
            raise CorruptionError(f"checkpoint file {self.describe(ref.path)} is not a regular file")
        try:
            os.link(src, dest)
        except OSError:
            shutil.copyfile(src, dest)
        self.verify_local(ref, dest)

    # ---- deletes ---------------------------------------------------------------------------

    def delete_file(self, rel: str) -> None:
        """Deletes the file at rel; a failure is given up on quietly (deletes are
        maintenance)."""
        self._delete_quietly(self.resolve(rel))

    def delete_dir(self, rel: str) -> None:
        """Deletes the directory at rel with its contents (never the root); quietly, as
        ``delete_file``."""
        full = self.resolve(rel)
        if full == self.root:
            raise ValueError("refusing to delete the checkpoint root")
        self._quietly(f"deleting {self.describe(rel)}", lambda: self.fs.delete_dir(full))

    def _quietly(self, what: str, fn: Callable[[], None]) -> None:
        """Deletes are maintenance: retried like any call, then given up on silently (what
        they leave is collected later as orphans)."""
        try:
            self._call(what, fn)
        except (FileNotFoundError, OSError):
            pass

    def _delete_quietly(self, full: str) -> None:
        shown = self.location + full[len(self.root):] if full.startswith(self.root) else full
        self._quietly(f"deleting {shown}", lambda: self.fs.delete_file(full))


def _not_found(e: OSError) -> bool:
    text = str(e).lower()
    return "not found" in text or "no such file" in text


def _hard_link(src: str, dest: str) -> bool:
    """Whether dest is now a hard link of src (False: another file system, or links refused:
    the caller copies)."""
    try:
        os.link(src, dest)
    except OSError:
        return False
    return True


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def as_storage(target: "CheckpointStorage | str | os.PathLike") -> CheckpointStorage:
    return target if isinstance(target, CheckpointStorage) else CheckpointStorage(target)
