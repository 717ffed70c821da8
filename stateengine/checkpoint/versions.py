"""The versions of one operator's state in a checkpoint directory.

Layout under the checkpoint root::

    <operator>/_operator.json                  max parallelism, key type and the version the
                                               state began at (written by the first commit)
    <operator>/shared/<ms>-<uuid>.sst          SST files, shared by incremental checkpoints
    <operator>/v<V>/p<P>-of-<N>.json           manifest of partition P of N: the commit point
    <operator>/v<V>/p<P>-of-<N>-<attempt>/     that commit's private files
    <operator>/v<V>/_COMMITTED.json            written by a driver once all N partitions of V
                                               committed (stateengine.spark does this)

Every JSON file is a sealed document (documents.py); a manifest also records its own version,
partition, partition count and operator, which must match where it lies, and its key-group
range must be the one partition P of N owns. Its paths must stay under ``<operator>/``.

A version is readable for a key-group range when one set of manifests of the same N covers
it. A retried commit replaces its manifest atomically and writes its private files under a new
attempt folder, so the manifest that is visible always points at complete files.

Incomplete versus damaged: a version whose partitions have not all published a manifest yet
(a crash between the partitions' commits) is incomplete, and the newest complete version is
the latest, as in Spark. A manifest or marker that exists but fails its checks, a marker whose
partitions' manifests are missing, or an entry in the operator or version directory that is
no part of this layout (a renamed manifest or version) is damage: ``latest_version`` raises
CorruptionError instead of quietly using an older version. Older versions are restored only
when asked for by number.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from ..errors import CheckpointNotFoundError, CorruptionError, IncompatibleStateError
from ..keygroups import KeyGroupRange
from . import documents as docs
from .documents import Invalid
from .handles import IncrementalHandle, decode_handle
from .incremental import shared_file_time_ms
from .meta import check_key_layout
from .storage import CheckpointStorage
from .transfers import settle

T = TypeVar("T")
U = TypeVar("U")

# Listings and manifests that retention reads at once from remote storage: it reads one
# manifest per partition and retained version, and an object store answers each request in
# tens of milliseconds, which one after another made partition 0's commit the batch's
# straggler (bench/prune_partitions.py).
_READ_THREADS = 16

_MANIFEST = re.compile(r"^p(\d+)-of-(\d+)\.json$")
_PRIVATE = re.compile(r"^p(\d+)-of-(\d+)-[0-9a-f]+$")
_VERSION = re.compile(r"^v(\d+)$")
_TMP = re.compile(r"\.tmp-[0-9a-f]{32}$")
COMMITTED_MARKER = "_COMMITTED.json"
OPERATOR_PROPERTIES = "_operator.json"
# Where a StatefulProcessor's initial state is staged for its first batch (spark/processor.py)
INITIAL_STATE_DIR = "initial-state"
_LEGACY_PROPERTIES = docs.LegacyShape(frozenset({"max_parallelism", "key_codecs"}),
                                      format_marker=1)
_LEGACY_MARKER = docs.LegacyShape(frozenset({"num_partitions"}))


@dataclass(frozen=True)
class VersionStatus:
    """How a version stands: ``complete`` (a set of manifests covers every key group),
    ``incomplete`` (not all partitions published; not damage) or ``damaged`` (with why)."""

    version: int
    state: str
    detail: str
    partition_counts: tuple[int, ...] = ()
    manifests: int = 0
    bytes_total: int = 0
    marked: int | None = None


class VersionCatalog:
    def __init__(self, storage: CheckpointStorage, operator_id: str,
                 hmac_key: bytes | str | None = None) -> None:
        if not isinstance(operator_id, str) or not operator_id or "/" in operator_id or \
                operator_id.startswith(".") or "\\" in operator_id or "\x00" in operator_id:
            raise ValueError(f"operator id must be a plain name, got {operator_id!r}")
        self.storage = storage
        self.operator_id = operator_id
        self.hmac_key = docs.resolve_key(hmac_key)
        self._cache: dict[tuple[str, int, int], tuple[IncrementalHandle, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._properties_written = False
        self._properties: dict[str, Any] | None = None  # _operator.json, once read

    # ---- paths ---------------------------------------------------------------------------

    @property
    def shared_dir(self) -> str:
        return f"{self.operator_id}/shared"

    def version_dir(self, version: int) -> str:
        return f"{self.operator_id}/v{version}"

    def manifest_path(self, version: int, partition: int, num_partitions: int) -> str:
        return f"{self.version_dir(version)}/p{partition:05d}-of-{num_partitions:05d}.json"

    def private_dir(self, version: int, partition: int, num_partitions: int, attempt: str) -> str:
        return f"{self.version_dir(version)}/p{partition:05d}-of-{num_partitions:05d}-{attempt}"

    def describe(self) -> str:
        return f"operator '{self.operator_id}' in {self.storage.location}"

    # ---- operator properties ---------------------------------------------------------------

    def properties(self) -> dict[str, Any] | None:
        """max_parallelism and key_codecs of the operator (None before its first commit).
        Written once and never changed, so it is read once per catalog."""
        if self._properties is not None:
            return self._properties
        rel = f"{self.operator_id}/{OPERATOR_PROPERTIES}"
        try:
            data = self.storage.read_bytes(rel)
        except CheckpointNotFoundError:
            return None
        source = self.storage.describe(rel)
        doc, _ = docs.load(data, source, self.hmac_key, _LEGACY_PROPERTIES)
        codecs = doc.get("key_codecs")
        try:  # older files do not record whether keys are tuples; one column fits either
            tuples = doc.get("key_is_tuple", isinstance(codecs, list) and len(codecs) > 1)
            check_key_layout(doc.get("max_parallelism"), codecs, tuples, source)
        except ValueError as e:
            raise CorruptionError(f"operator properties {source} are invalid: {e}") from None
        self._properties = doc
        return doc

    @property
    def properties_source(self) -> str:
        return self.storage.describe(f"{self.operator_id}/{OPERATOR_PROPERTIES}")

    def check_properties(self, max_parallelism: int) -> dict[str, Any] | None:
        props = self.properties()
        if props is not None and props["max_parallelism"] != max_parallelism:
            # Whose mistake? If the newest manifest agrees with the caller, the operator file is
            # the odd one out (reading the manifest compares the two and raises).
            for v in reversed(self.version_dirs()):
                if self._manifest_entries(v):
                    self.manifest_handles(v)
                    break
            raise IncompatibleStateError(
                f"{self.describe()} was written with max_parallelism "
                f"{props['max_parallelism']}, not {max_parallelism}; keep max_parallelism "
                f"fixed for the life of the state (rescale with num_partitions instead)")
        return props

    def write_properties(self, max_parallelism: int, key_codecs: list[int] | None,
                         first_version: int = 0, key_is_tuple: bool | None = None) -> None:
        """Written once, by the first commit, before its manifest: a reader that finds a
        manifest always finds the properties. ``first_version`` is the version the operator's
        state began at, empty (an operator added to a running query begins past 0);
        ``key_is_tuple`` (with ``key_codecs``) whether keys are tuples, which a manifest
        records too."""
        if self._properties_written:  # written once per operator: no request per commit
            return
        rel = f"{self.operator_id}/{OPERATOR_PROPERTIES}"
        if not self.storage.exists(rel):
            doc = {"max_parallelism": max_parallelism, "key_codecs": key_codecs,
                   "first_version": first_version}
            if key_codecs and key_is_tuple is not None:
                doc["key_is_tuple"] = key_is_tuple
            self.storage.write_atomic(rel, docs.dumps(docs.seal(doc, self.hmac_key)))
        self._properties_written = True

    def first_version(self) -> int | None:
        """The version this operator's state began at, empty (None: no state was ever
        committed, so it may begin at any version). Checkpoints from before this field
        began at 0."""
        props = self.properties()
        if props is None:
            return 0 if self.versions() else None
        raw = props.get("first_version", 0)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise CorruptionError(f"{self.properties_source} names first version "
                                  f"{raw!r}, not an int >= 0; it is corrupted")
        return raw

    def check_begins_after(self, version: int, first: int) -> None:
        """A version at or before the one the operator's state began at (empty) cannot have
        been committed: if it has a manifest, one of the two documents is wrong, and
        restoring it as empty state while ``latest_version`` names it would lose it."""
        entries = self._manifest_entries(version) if version <= first else []
        if entries:
            rel = f"{self.version_dir(version)}/{entries[0][2]}"
            raise CorruptionError(
                f"{self.properties_source} says the state of {self.describe()} began, empty, "
                f"at version {first}, but {self.storage.describe(rel)} is a committed manifest "
                f"of version {version}; one of them is corrupted")

    def _check_properties_of(self, handle: IncrementalHandle, source: str) -> None:
        """A manifest's max parallelism and key type against the operator's (one operator has
        one key layout, which its first commit recorded in ``_operator.json``)."""
        props = self.properties()
        if props is None:
            return
        what = None
        if props.get("max_parallelism") != handle.max_parallelism:
            what = (f"max_parallelism {handle.max_parallelism}",
                    f"{props.get('max_parallelism')}")
        elif props.get("key_codecs") and handle.key_codecs and \
                list(props["key_codecs"]) != list(handle.key_codecs):
            what = (f"key codecs {list(handle.key_codecs)}", f"{props['key_codecs']}")
        elif props.get("key_codecs") and handle.key_codecs and "key_is_tuple" in props and \
                props["key_is_tuple"] != handle.key_is_tuple:
            what = (f"key_is_tuple {handle.key_is_tuple}", f"{props['key_is_tuple']}")
        if what is not None:
            raise CorruptionError(
                f"checkpoint manifest {source} records {what[0]} but {self.properties_source} "
                f"records {what[1]} for the operator; one of them is corrupted (an operator's "
                f"key layout is fixed by its first commit)")

    # ---- reading ---------------------------------------------------------------------------

    def version_dirs(self) -> list[int]:
        """Every version directory, published or not (what retention deletes)."""
        out = []
        for info in self.storage.list_dir(self.operator_id):
            m = _VERSION.match(info.base_name)
            if m and str(int(m.group(1))) == m.group(1):
                out.append(int(m.group(1)))
        return sorted(out)

    def versions(self) -> list[int]:
        """The versions with at least one published manifest (complete or not): a version
        being deleted by retention loses its manifests first and is no longer listed."""
        return [v for v in self.version_dirs() if self._listing(v)[0]]

    def _manifest_entries(self, version: int) -> list[tuple[int, int, str, Any]]:
        return self._listing(version)[0]

    def _listing(self, version: int) -> tuple[list[tuple[int, int, str, Any]], bool]:
        """((partition, partition count, name, file info) of each manifest, whether a commit
        marker exists) of version; an entry that is no part of the layout is damage."""
        out, marked = [], False
        for info in self.storage.list_dir(self.version_dir(version)):
            name = info.base_name
            m = _MANIFEST.match(name)
            if m:
                out.append((int(m.group(1)), int(m.group(2)), name, info))
            elif name == COMMITTED_MARKER:
                marked = True
            elif not (_TMP.search(name) or _PRIVATE.match(name)):
                raise CorruptionError(
                    f"{self.storage.describe(self.version_dir(version) + '/' + name)} is no "
                    f"part of a version's layout (a renamed or damaged manifest?); version "
                    f"{version} of {self.describe()} is damaged")
        return out, marked

    def check_operator_dir(self) -> list[int]:
        """The version numbers; raises CorruptionError for an entry of the operator directory
        that is no part of the layout (a version directory whose name was damaged would
        otherwise vanish, and an older version would silently become the latest)."""
        versions = []
        for info in self.storage.list_dir(self.operator_id):
            name = info.base_name
            m = _VERSION.match(name)
            if m and str(int(m.group(1))) == m.group(1) and int(m.group(1)) > 0 and \
                    info.type.name == "Directory":  # a commit publishes version 1 and up
                versions.append(int(m.group(1)))
            elif not (name in ("shared", OPERATOR_PROPERTIES, INITIAL_STATE_DIR) or
                      _TMP.search(name)):
                raise CorruptionError(
                    f"{self.storage.describe(self.operator_id + '/' + name)} is no part of an "
                    f"operator's layout (a damaged version directory?); {self.describe()} is "
                    f"damaged")
        return sorted(versions)

    def _ident(self, version: int, name: str, info: Any) -> tuple[str, int, int]:
        # a manifest rewritten in place (same name) is read again
        return (f"{self.version_dir(version)}/{name}", info.size,
                getattr(info, "mtime_ns", None) or 0)

    def _manifest(self, version: int, partition: int, num_partitions: int, name: str,
                  info: Any, data: bytes | None = None
                  ) -> tuple[IncrementalHandle, dict[str, Any]]:
        """The decoded, checked manifest ``name`` of version (cached by name, size and
        modification time); ``data``: its bytes, if the caller read them already."""
        ident = self._ident(version, name, info)
        rel = ident[0]
        with self._lock:
            cached = self._cache.get(ident)
        if cached is not None:
            return cached
        source = self.storage.describe(rel)
        if data is None:
            data = self.storage.read_bytes(rel)
        handle, doc = decode_handle(data, self.storage.uri, source, self.hmac_key)
        if isinstance(handle, IncrementalHandle):
            handle.manifest = rel
        try:
            self._check_manifest(handle, doc, version, partition, num_partitions)
        except (Invalid, ValueError) as e:
            raise CorruptionError(f"checkpoint manifest {source} does not belong where it "
                                  f"lies: {e}; it is corrupted or was moved") from None
        self._check_properties_of(handle, source)
        with self._lock:
            self._cache[ident] = (handle, doc)
        return handle, doc

    def _check_manifest(self, handle: Any, doc: dict[str, Any], version: int, partition: int,
                        num_partitions: int) -> None:
        if not isinstance(handle, IncrementalHandle):
            raise Invalid("it is not an incremental checkpoint's manifest")
        for name, want in (("version", version), ("partition", partition),
                           ("num_partitions", num_partitions), ("operator", self.operator_id)):
            if doc.get(name) != want or type(doc.get(name)) is not type(want):
                raise Invalid(f"it records {name} {doc.get(name)!r}, its place says {want!r}")
        docs.want_int(doc.get("created_at"), "created_at", 0)
        if handle.checkpoint_id != version:  # a commit checkpoints version V as checkpoint V
            raise Invalid(f"it records checkpoint id {handle.checkpoint_id} for version {version}")
        op = handle.operator_state
        if op is not None and (op.operator_index, op.parallelism) != (partition, num_partitions):
            raise Invalid(f"its operator state is recorded as instance {op.operator_index} of "
                          f"{op.parallelism}, not partition {partition} of {num_partitions}")
        _check_metrics(doc.get("metrics"), handle.stats)
        owned = KeyGroupRange.for_operator(partition, num_partitions, handle.max_parallelism)
        if handle.key_group_range != owned:
            raise Invalid(f"its key groups {handle.key_group_range} are not {owned}, which "
                          f"partition {partition} of {num_partitions} owns")
        mine = f"{self.operator_id}/"
        for ref in handle.all_files():
            if not ref.path.startswith(mine):
                raise Invalid(f"it names {ref.path}, outside the operator's directory {mine}")
        for ref in handle.shared:
            if not ref.path.startswith(self.shared_dir + "/"):
                raise Invalid(f"its shared file {ref.path} is not in {self.shared_dir}/")
        private = f"{self.version_dir(version)}/p{partition:05d}-of-{num_partitions:05d}-"
        for ref in handle.private + ([handle.operator_state.file] if handle.operator_state else []):
            if not ref.path.startswith(private):
                raise Invalid(f"its private file {ref.path} is not in a folder of this commit")

    def manifest_handles(self, version: int) -> list[tuple[int, int, IncrementalHandle]]:
        """(partition, num partitions, handle) of every manifest of version."""
        return [(p, n, self._manifest(version, p, n, name, info)[0])
                for p, n, name, info in self._manifest_entries(version)]

    def manifest_handles_of(self, versions: Sequence[int]
                            ) -> dict[int, list[tuple[int, int, IncrementalHandle]] | Exception]:
        """manifest_handles of each version, or the error reading that version raised (the
        caller decides which errors it tolerates). The listings, then the manifests not
        cached yet, are read concurrently on remote storage; decoding stays in this
        thread."""
        listings = self._concurrently(self._manifest_entries, versions)
        wanted = [(v, name, info) for v, entries in zip(versions, listings)
                  if not isinstance(entries, Exception) for _, _, name, info in entries]
        with self._lock:
            wanted = [w for w in wanted if self._ident(*w) not in self._cache]
        fetched = dict(zip([self._ident(*w)[0] for w in wanted], self._concurrently(
            lambda w: self.storage.read_bytes(self._ident(*w)[0]), wanted)))
        out: dict[int, list[tuple[int, int, IncrementalHandle]] | Exception] = {}
        for v, entries in zip(versions, listings):
            try:
                if isinstance(entries, Exception):
                    raise entries
                handles = []
                for p, n, name, info in entries:
                    data = fetched.get(f"{self.version_dir(v)}/{name}")
                    if isinstance(data, Exception):
                        raise data
                    handles.append((p, n, self._manifest(v, p, n, name, info, data)[0]))
                out[v] = handles
            except Exception as e:  # the caller raises it or not
                out[v] = e
        return out

    def _concurrently(self, fn: Callable[[T], U], items: Sequence[T]) -> list[U | Exception]:
        """[fn(item), or the exception it raised] per item: at most _READ_THREADS at once on
        remote storage (each call waits on the network with the GIL released), one after
        another on a local disk (where the work is Python's, not waiting)."""
        return settle(fn, items, 1 if self.storage.is_local else _READ_THREADS)

    def manifests(self, version: int) -> list[tuple[int, int, dict[str, Any]]]:
        """(partition, num partitions, manifest document) of every manifest of version."""
        return [(p, n, self._manifest(version, p, n, name, info)[1])
                for p, n, name, info in self._manifest_entries(version)]

    def committed_partitions(self, version: int, present: bool | None = None) -> int | None:
        """The partition count a driver marked version committed with (None: no marker);
        ``present``: whether the marker exists, if a listing already said."""
        rel = f"{self.version_dir(version)}/{COMMITTED_MARKER}"
        if not (self.storage.exists(rel) if present is None else present):
            return None
        source = self.storage.describe(rel)
        doc, legacy = docs.load(self.storage.read_bytes(rel), source, self.hmac_key,
                                _LEGACY_MARKER)
        n = doc.get("num_partitions")
        if type(n) is not int or n < 1 or (not legacy and doc.get("version") != version):
            raise CorruptionError(f"commit marker {source} is invalid (num_partitions {n!r}, "
                                  f"version {doc.get('version')!r}); it is corrupted")
        return n

    def handles_for(self, version: int, target: KeyGroupRange) -> list[IncrementalHandle]:
        """Every handle of the one consistent set of manifests of version that covers target.

        Handles whose ranges miss target are included too: restore skips their keyed state,
        but operator state is redistributed from all old instances (union and even split).
        Raises CheckpointNotFoundError for a version that does not exist or is incomplete for
        target, CorruptionError for a damaged one."""
        entries, has_marker = self._listing(version)
        marked = self.committed_partitions(version, has_marker)
        if entries and self.properties() is not None:
            self.check_begins_after(version, self.first_version() or 0)
        if not entries:
            if marked is not None:
                raise CorruptionError(
                    f"version {version} of {self.describe()} is marked committed by "
                    f"{marked} partition(s) but has no manifest (missing: "
                    f"{self._missing(version, marked, set())}); it is damaged")
            known = self.versions()
            raise CheckpointNotFoundError(
                f"version {version} of {self.describe()} does not exist (versions present: "
                f"{_summarize(known)})")
        by_n: dict[int, list[tuple[int, IncrementalHandle, dict[str, Any]]]] = {}
        for p, n, name, info in entries:
            handle, doc = self._manifest(version, p, n, name, info)
            by_n.setdefault(n, []).append((p, handle, doc))
        max_ps = {h.max_parallelism for group in by_n.values() for _, h, _ in group}
        if len(max_ps) > 1:
            raise CorruptionError(f"version {version} of {self.describe()} has manifests of "
                                  f"max_parallelism {sorted(max_ps)}; it is damaged")
        if marked is not None:
            group = by_n.get(marked, [])
            present = {p for p, _, _ in group}  # partitions found: each p < marked
            if len(present) != marked:
                marker = self.storage.describe(f"{self.version_dir(version)}/{COMMITTED_MARKER}")
                raise CorruptionError(
                    f"version {version} of {self.describe()} is marked committed by {marked} "
                    f"partition(s) ({marker}) but manifests are missing "
                    f"({self._missing(version, marked, present)}); it is damaged")
            candidates = [marked]
        else:  # complete sets first, then the most recently written
            candidates = sorted(by_n, key=lambda n: (len({p for p, _, _ in by_n[n]}) == n,
                                                     max(d["created_at"] for _, _, d in by_n[n])),
                                reverse=True)
        for n in candidates:
            handles = [h for _, h, _ in sorted(by_n[n], key=lambda t: t[0])]
            covering = [h for h in handles if not h.key_group_range.intersection(target).is_empty()]
            if _covers(covering, target):
                return handles
        raise CheckpointNotFoundError(
            f"version {version} of {self.describe()} is incomplete: no committed set of "
            f"partitions covers key groups {target.start}..{target.end}")

    def _missing(self, version: int, n: int, present: set[int]) -> str:
        # n comes from a marker: count the missing ones without walking range(n)
        first = []
        for p in range(n):
            if len(first) == 3:
                break
            if p not in present:
                first.append(self.manifest_path(version, p, n))
        more = n - len(present) - len(first)
        shown = ", ".join(self.storage.describe(m) for m in first)
        return shown + (f" and {more} more" if more > 0 else "")

    def latest_version(self, target: KeyGroupRange) -> int:
        """The newest version readable for target (0, the empty state, if none).

        Incomplete versions (not all partitions published) are passed over, as Spark does; a
        damaged one raises CorruptionError: an older version is used only when asked for."""
        versions = self.check_operator_dir()
        for i in range(len(versions) - 1, -1, -1):
            try:
                self.handles_for(versions[i], target)
            except CheckpointNotFoundError:
                continue
            self._check_numbering(versions[:i])
            return versions[i]
        self._check_numbering(versions)
        return 0

    def _unpublish(self, version: int) -> None:
        self.storage.delete_file(f"{self.version_dir(version)}/{COMMITTED_MARKER}")
        self._delete_files([f"{self.version_dir(version)}/{info.base_name}"
                            for info in self.storage.list_dir(self.version_dir(version))
                            if _MANIFEST.match(info.base_name)])

    def _delete_files(self, rels: list[str]) -> None:
        """Deletes each file (concurrently on remote storage: one request per object); the
        first error is raised once all were tried."""
        for result in self._concurrently(self.storage.delete_file, rels):
            if isinstance(result, Exception):
                raise result

    def _second_look(self, old: list[int], cutoff: int) -> set[str]:
        """Shared files named by manifests published at versions up to the cutoff since
        prune first read them (old versions are unpublished again). One listing of the
        operator directory and one per version directory at or below the cutoff."""
        keep: set[str] = set()
        for v in self.version_dirs():
            if v > cutoff:
                continue
            if v in old:
                for info in self.storage.list_dir(self.version_dir(v)):
                    if _MANIFEST.match(info.base_name) or info.base_name == COMMITTED_MARKER:
                        self.storage.delete_file(f"{self.version_dir(v)}/{info.base_name}")
                continue
            try:
                for _, _, h in self.manifest_handles(v):
                    keep.update(f.path for f in h.shared)
            except CorruptionError:
                pass  # a damaged manifest keeps nothing; reading that version reports it
        return keep

    def _check_numbering(self, older: list[int]) -> None:
        """Each older version directory must hold manifests of its own number: a newer
        version whose directory name was damaged into an older, free number would otherwise
        be passed over. One manifest per directory is read, leniently: damage inside an older
        version is reported when that version is read, not here."""
        for v in older:
            entries = self._manifest_entries(v)
            if not entries:
                continue
            rel = f"{self.version_dir(v)}/{entries[0][2]}"
            try:
                recorded = docs.parse(self.storage.read_bytes(rel), rel).get("version")
            except CorruptionError:
                continue
            if type(recorded) is int and recorded != v:
                raise CorruptionError(
                    f"{self.storage.describe(rel)} is a manifest of version {recorded} in the "
                    f"directory of version {v} (a renamed version directory?); {self.describe()} "
                    f"is damaged")

    def shared_files(self) -> set[str]:
        """The paths of the files in ``<operator>/shared/`` now (one listing; pages of 1,000
        on object storage)."""
        return {f"{self.shared_dir}/{i.base_name}" for i in self.storage.list_dir(self.shared_dir)}

    def missing_shared(self, version: int, shared: set[str]) -> list[str]:
        """The shared files the manifests of ``version`` name that are not in ``shared``
        (``shared_files()``, listed after the manifests were read: a commit uploads its files
        before it publishes its manifest, so a file named by a manifest read earlier that is
        not listed is gone)."""
        named = {f.path for _, _, h in self.manifest_handles(version) for f in h.shared}
        return sorted(named - shared)

    def status(self, version: int, target: KeyGroupRange | None = None) -> VersionStatus:
        """A version's standing for a listing; never raises for damage."""
        try:
            entries, has_marker = self._listing(version)
            manifests = [(p, n, self._manifest(version, p, n, name, info))
                         for p, n, name, info in entries]
            marked = self.committed_partitions(version, has_marker)
            counts = tuple(sorted({n for _, n, _ in manifests}))
            size = sum(h.stats.get("bytes_total", 0) for _, _, (h, _) in manifests)
            if not manifests and marked is None:
                return VersionStatus(version, "incomplete", "no manifest published (a commit "
                                     "that did not finish, or a version being deleted)")
            max_p = manifests[0][2][0].max_parallelism if manifests else 1
            try:
                self.handles_for(version, target or KeyGroupRange.all(max_p))
                state, detail = "complete", ""
            except CheckpointNotFoundError as e:
                state, detail = "incomplete", str(e)
            return VersionStatus(version, state, detail, counts, len(manifests), size, marked)
        except CorruptionError as e:
            return VersionStatus(version, "damaged", str(e))

    # ---- writing ---------------------------------------------------------------------------

    def mark_committed(self, version: int, num_partitions: int) -> None:
        """Records that all num_partitions partitions of version committed (driver side)."""
        doc = {"num_partitions": num_partitions, "version": version}
        self.storage.write_atomic(f"{self.version_dir(version)}/{COMMITTED_MARKER}",
                                  docs.dumps(docs.seal(doc, self.hmac_key)))

    def slowest_partition_version(self, latest: int, num_partitions: int) -> int:
        """The oldest of the newest versions (<= latest) that the partitions of num_partitions
        committed; a partition without any is taken to be committing on top of latest - 1."""
        missing = set(range(num_partitions))
        slowest = latest
        for v in reversed(self.version_dirs()):
            if not missing:
                break
            if v > latest:
                continue
            for info in self.storage.list_dir(self.version_dir(v)):
                m = _MANIFEST.match(info.base_name)
                if m and int(m.group(2)) == num_partitions and int(m.group(1)) in missing:
                    missing.discard(int(m.group(1)))
                    slowest = min(slowest, v)
        return min(slowest, latest - 1) if missing else slowest

    def prune(self, latest: int, min_versions_to_retain: int,
              orphan_grace_seconds: float = 3600.0, now_ms: int | None = None,
              num_partitions: int | None = None) -> dict[str, int]:
        """Deletes versions older than the newest ``min_versions_to_retain`` (counting back from
        ``latest``) and the shared files only they referenced; shared files that no manifest
        ever referenced (crashed uploads) go once older than ``orphan_grace_seconds``.

        With ``num_partitions``, counting starts from the slowest partition instead: a
        partition that has not committed ``latest`` yet reuses the files of its own newest
        version, which must survive until it has.

        Order, so that a process killed at any point leaves no listed version whose files
        are gone: first the old versions' markers and manifests (they stop being versions),
        then the shared files only they used, then the rest of their folders. Only files under
        ``<operator>/`` are ever deleted.

        Between reading which files the retained versions use and deleting the others, a
        commit that built on an old version (a writer that loaded it before it was
        unpublished) may publish a manifest naming its files. Such a manifest lies at a
        version no newer than the cutoff, so after unpublishing, those version directories
        are listed again (``_second_look``): manifests there keep their files, and one that
        appeared in an old version is unpublished too. A commit that published after this
        second look finds its base unpublished when it checks again and withdraws
        (incremental.py)."""
        if num_partitions is not None:
            latest = min(latest, self.slowest_partition_version(latest, num_partitions))
        cutoff = latest - min_versions_to_retain + 1
        versions = self.version_dirs()
        old = [v for v in versions if v < cutoff]
        if not old:
            return {"versions": 0, "files": 0}
        read = self.manifest_handles_of(versions)
        keep_refs: set[str] = set()
        for v in versions:
            if v >= cutoff:
                handles = read[v]
                if isinstance(handles, Exception):
                    raise handles
                for _, _, h in handles:
                    keep_refs.update(f.path for f in h.shared)
        candidates: set[str] = set()
        for v in old:
            handles = read[v]
            if isinstance(handles, CorruptionError):
                continue  # going anyway; its files become orphans for the grace-period sweep
            if isinstance(handles, Exception):
                raise handles
            for _, _, h in handles:
                candidates.update(f.path for f in h.shared)
        for v in old:  # unpublish first
            self._unpublish(v)
        keep_refs |= self._second_look(old, cutoff)
        doomed = [path for path in sorted(candidates - keep_refs)
                  if path.startswith(self.shared_dir + "/")]
        self._delete_files(doomed)
        deleted = len(doomed)
        for v in old:
            self.storage.delete_dir(self.version_dir(v))
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        for info in self.storage.list_dir(self.shared_dir):
            rel = f"{self.shared_dir}/{info.base_name}"
            born = shared_file_time_ms(rel)
            if rel not in keep_refs and born is not None and \
                    born < now_ms - orphan_grace_seconds * 1000:
                self.storage.delete_file(rel)
                deleted += 1
        with self._lock:
            self._cache = {k: d for k, d in self._cache.items()
                           if not any(k[0].startswith(self.version_dir(v) + "/") for v in old)}
        return {"versions": len(old), "files": deleted}


# Figures a commit seals twice: in the checkpoint's stats and in the batch metrics.
_METRICS_OF_STATS = {"files_uploaded": "files_uploaded", "files_reused": "files_reused",
                     "bytes_uploaded": "bytes_uploaded", "checkpoint_bytes": "bytes_total"}


def _check_metrics(metrics: Any, stats: dict[str, int]) -> None:
    if not isinstance(metrics, dict):
        return  # versions written before metrics (or a manifest without them)
    for m, st in _METRICS_OF_STATS.items():
        if m in metrics and st in stats and metrics[m] != stats[st]:
            raise Invalid(f"its metrics record {m} {metrics[m]!r} but its stats {st} "
                          f"{stats[st]!r}")


def _covers(handles: list[IncrementalHandle], target: KeyGroupRange) -> bool:
    need = target.start
    for h in sorted(handles, key=lambda h: h.key_group_range.start):
        if h.key_group_range.start > need:
            return False
        need = max(need, h.key_group_range.end + 1)
    return need > target.end


def _summarize(versions: list[int]) -> str:
    if not versions:
        return "none"
    if len(versions) <= 6:
        return ", ".join(map(str, versions))
    return f"{versions[0]}..{versions[-1]} ({len(versions)} versions)"
