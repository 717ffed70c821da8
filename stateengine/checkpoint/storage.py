"""Checkpoint storage on any file system ``pyarrow.fs`` reaches: local paths and ``file://``,
``hdfs://`` and ``s3://`` URIs.

Files are written under unique names or to a temporary name and then moved into place, so a
reader never sees half a file; every download is checked against the size and CRC-32C the
handle recorded, and a mismatch names the file.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections import OrderedDict
from typing import Callable

import pyarrow.fs as pafs

from .. import _native
from ..errors import CheckpointNotFoundError, CorruptionError, StorageError
from .handles import FileRef

_COPY_CHUNK = 4 << 20

# Checkpoint files never change after they are published (unique names, written once), so a
# file whose identity and stat are unchanged since it was verified needs no second full read.
# Tasks that restore on every batch (a partition landing on another Python worker) would
# otherwise re-read the whole state just to checksum it. Keyed by (device, inode, size, mtime):
# hard links share the entry, and any write to the file changes its mtime.
_VERIFIED: "OrderedDict[tuple[int, int, int, int], int]" = OrderedDict()
_VERIFIED_LIMIT = 200_000
_verified_lock = threading.Lock()


def _stat_key(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _checksum(path: str) -> tuple[int, int, tuple[int, int, int, int]]:
    """(crc32c, size, stat key) of a local file, reusing an earlier verification."""
    key = _stat_key(path)
    with _verified_lock:
        crc = _VERIFIED.get(key)
    if crc is not None:
        return crc, key[2], key
    crc, size = _native.file_crc32c(path)
    return crc, size, key


def _crc_and_size(path: str, crc: int | None) -> tuple[int, int]:
    """(crc32c, size) of a local file about to be published: the CRC its writer computed while
    writing, or else read from the file."""
    if crc is None:
        return _native.file_crc32c(path)
    return crc, os.path.getsize(path)


def _remember(key: tuple[int, int, int, int], crc: int) -> None:
    with _verified_lock:
        _VERIFIED[key] = crc
        _VERIFIED.move_to_end(key)
        while len(_VERIFIED) > _VERIFIED_LIMIT:
            _VERIFIED.popitem(last=False)


# URI schemes resolved by a registered factory instead of pyarrow.fs.FileSystem.from_uri: for
# file systems pyarrow cannot build from a URI alone (and for tests of the non-local path).
_SCHEMES: dict[str, Callable[[str], tuple[pafs.FileSystem, str]]] = {}


def register_filesystem(scheme: str, factory: Callable[[str], tuple[pafs.FileSystem, str]]) -> None:
    """Makes ``scheme://...`` URIs open through ``factory(uri) -> (filesystem, root path)``."""
    _SCHEMES[scheme] = factory


class CheckpointStorage:
    """A checkpoint root directory. Paths given to methods are relative to the root."""

    def __init__(self, uri: str | os.PathLike) -> None:
        uri = os.fspath(uri)
        scheme = uri.split("://", 1)[0] if "://" in uri else ""
        if scheme in _SCHEMES:
            self.fs, root = _SCHEMES[scheme](uri)
            self.uri = uri.rstrip("/")
        elif "://" in uri and not uri.startswith("file://"):
            try:
                self.fs, root = pafs.FileSystem.from_uri(uri)
            except Exception as e:  # pyarrow raises ArrowInvalid / OSError variants
                raise StorageError(f"cannot open checkpoint storage {uri}: {e}") from e
            self.uri = uri.rstrip("/")
        else:
            root = os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)
            self.fs = pafs.LocalFileSystem()
            self.uri = root
        self.root = root.rstrip("/")
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)

    def __repr__(self) -> str:
        return f"CheckpointStorage({self.uri!r})"

    def full_path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def describe(self, rel: str) -> str:
        """The location of rel as a user would type it (for error messages)."""
        return f"{self.uri}/{rel}"

    # ---- queries ---------------------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.full_path(rel)).type != pafs.FileType.NotFound

    def list_dir(self, rel: str) -> list[pafs.FileInfo]:
        """Entries directly under rel ([] if rel does not exist)."""
        info = self.fs.get_file_info(self.full_path(rel))
        if info.type == pafs.FileType.NotFound:
            return []
        return self.fs.get_file_info(pafs.FileSelector(self.full_path(rel), allow_not_found=True))

    def read_bytes(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self.full_path(rel)) as f:
                return f.read()
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"checkpoint file {self.describe(rel)} does not exist") from None
        except OSError as e:
            if "not found" in str(e).lower() or "no such file" in str(e).lower():
                raise CheckpointNotFoundError(
                    f"checkpoint file {self.describe(rel)} does not exist") from None
            raise StorageError(f"cannot read {self.describe(rel)}: {e}") from e

    # ---- writes ----------------------------------------------------------------------------

    def _ensure_parent(self, rel: str) -> None:
        parent = self.full_path(rel).rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)

    def write_atomic(self, rel: str, data: bytes) -> None:
        """Publishes data at rel all at once: readers see the old file or the new one."""
        self._ensure_parent(rel)
        final = self.full_path(rel)
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        try:
            if self.is_local:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, final)
                _fsync_dir(os.path.dirname(final))
            else:
                with self.fs.open_output_stream(tmp) as out:
                    out.write(data)
                self.fs.move(tmp, final)
        except OSError as e:
            self._delete_quietly(tmp)
            raise StorageError(f"cannot publish {self.describe(rel)}: {e}") from e

    def upload(self, local_file: str, rel: str, local_name: str = "",
               crc: int | None = None) -> FileRef:
        """Copies a local file to rel (temporary name, then move) and returns its FileRef.
        ``crc``: the file's CRC-32C if its writer computed it, else the file is read for it."""
        crc, size = _crc_and_size(local_file, crc)
        self._ensure_parent(rel)
        final = self.full_path(rel)
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        try:
            if self.is_local:
                shutil.copyfile(local_file, tmp)
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, final)
            else:
                with open(local_file, "rb") as src, self.fs.open_output_stream(tmp) as out:
                    while chunk := src.read(_COPY_CHUNK):
                        out.write(chunk)
                self.fs.move(tmp, final)
        except OSError as e:
            self._delete_quietly(tmp)
            raise StorageError(f"cannot upload {local_file} to {self.describe(rel)}: {e}") from e
        return FileRef(rel, size, crc, local_name)

    def place_local(self, rel: str) -> str:
        """A local temporary path that commit_local will move to rel (local storage only)."""
        self._ensure_parent(rel)
        return f"{self.full_path(rel)}.tmp-{uuid.uuid4().hex}"

    def commit_local(self, tmp_path: str, rel: str, local_name: str = "",
                     crc: int | None = None) -> FileRef:
        """Moves a file written at place_local's path to rel; ``crc`` as for upload."""
        crc, size = _crc_and_size(tmp_path, crc)
        os.replace(tmp_path, self.full_path(rel))
        return FileRef(rel, size, crc, local_name)

    def download(self, ref: FileRef, local_file: str) -> None:
        """Copies ref to local_file and verifies its size and checksum."""
        src = self.full_path(ref.path)
        try:
            if self.is_local:
                shutil.copyfile(src, local_file)
            else:
                with self.fs.open_input_stream(src) as f, open(local_file, "wb") as out:
                    while chunk := f.read(_COPY_CHUNK):
                        out.write(chunk)
        except FileNotFoundError:
            raise CheckpointNotFoundError(
                f"checkpoint file {self.describe(ref.path)} does not exist") from None
        except OSError as e:
            if "not found" in str(e).lower() or "no such file" in str(e).lower():
                raise CheckpointNotFoundError(
                    f"checkpoint file {self.describe(ref.path)} does not exist") from None
            raise StorageError(f"cannot download {self.describe(ref.path)}: {e}") from e
        self.verify_local(ref, local_file)

    def verify_local(self, ref: FileRef, local_file: str) -> None:
        """Checks size and CRC-32C against the handle (once per unchanged file per process)."""
        crc, size, key = _checksum(local_file)
        if size != ref.size:
            raise CorruptionError(
                f"checkpoint file {self.describe(ref.path)} has {size} bytes but its handle "
                f"recorded {ref.size} (truncated or replaced)")
        if crc != ref.crc32c:
            raise CorruptionError(
                f"checkpoint file {self.describe(ref.path)} is corrupted: CRC-32C {crc:#010x} "
                f"differs from the recorded {ref.crc32c:#010x}")
        _remember(key, crc)

    def open_verified(self, ref: FileRef, scratch_dir: str) -> str:
        """A verified local path holding ref: the file itself on local storage (after its
        checksum is checked), else a downloaded copy under scratch_dir."""
        if self.is_local:
            path = self.full_path(ref.path)
            if not os.path.exists(path):
                raise CheckpointNotFoundError(
                    f"checkpoint file {self.describe(ref.path)} does not exist")
            self.verify_local(ref, path)
            return path
        local = os.path.join(scratch_dir, uuid.uuid4().hex + "-" + os.path.basename(ref.path))
        self.download(ref, local)
        return local

    # ---- deletes ---------------------------------------------------------------------------

    def delete_file(self, rel: str) -> None:
        self._delete_quietly(self.full_path(rel))

    def delete_dir(self, rel: str) -> None:
        try:
            self.fs.delete_dir(self.full_path(rel))
        except (FileNotFoundError, OSError):
            pass

    def _delete_quietly(self, full: str) -> None:
        try:
            self.fs.delete_file(full)
        except (FileNotFoundError, OSError):
            pass


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
