"""The versions of one operator's state in a checkpoint directory.

Layout under the checkpoint root::

    <operator>/_operator.json                  max parallelism, key type and the version the
                                               state began at (written by the first commit)
    <operator>/shared/<ms>-<uuid>.sst          SST files, shared by incremental checkpoints
    <operator>/v<V>/p<P>-of-<N>.json           manifest of partition P of N: the commit point
    <operator>/v<V>/p<P>-of-<N>-<attempt>/     that commit's private files
    <operator>/v<V>/_COMMITTED.json            written by a driver once all N partitions of V
                                               committed (stateengine.spark does this)

A version is readable for a key-group range when one set of manifests of the same N covers
it. A retried commit replaces its manifest atomically and writes its private files under a new
attempt folder, so the manifest that is visible always points at complete files.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from ..errors import CheckpointNotFoundError, CorruptionError, IncompatibleStateError
from ..keygroups import KeyGroupRange
from .handles import IncrementalHandle, handle_from_dict
from .incremental import shared_file_time_ms
from .storage import CheckpointStorage

_MANIFEST = re.compile(r"^p(\d+)-of-(\d+)\.json$")
_VERSION = re.compile(r"^v(\d+)$")
COMMITTED_MARKER = "_COMMITTED.json"


class VersionCatalog:
    def __init__(self, storage: CheckpointStorage, operator_id: str) -> None:
        if not operator_id or "/" in operator_id or operator_id.startswith("."):
            raise ValueError(f"operator id must be a plain name, got {operator_id!r}")
        self.storage = storage
        self.operator_id = operator_id
        self._cache: dict[tuple[str, int], dict[str, Any]] = {}
        self._lock = threading.Lock()

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
        return f"operator '{self.operator_id}' in {self.storage.uri}"

    # ---- operator properties ---------------------------------------------------------------

    def check_properties(self, max_parallelism: int) -> dict[str, Any] | None:
        rel = f"{self.operator_id}/_operator.json"
        if not self.storage.exists(rel):
            return None
        props = self._read_json(rel)
        if props.get("max_parallelism") != max_parallelism:
            raise IncompatibleStateError(
                f"{self.describe()} was written with max_parallelism "
                f"{props.get('max_parallelism')}, not {max_parallelism}; keep max_parallelism "
                f"fixed for the life of the state (rescale with num_partitions instead)")
        return props

    def write_properties(self, max_parallelism: int, key_codecs: list[int] | None,
                         first_version: int = 0) -> None:
        """Written once, by the first commit, before its manifest: a reader that finds a
        manifest always finds the properties."""
        rel = f"{self.operator_id}/_operator.json"
        if not self.storage.exists(rel):
            doc = {"max_parallelism": max_parallelism, "key_codecs": key_codecs, "format": 1,
                   "first_version": first_version}
            self.storage.write_atomic(rel, json.dumps(doc).encode())

    def first_version(self) -> int | None:
        """The version this operator's state began at, empty (None: no state was ever
        committed, so it may begin at any version). Checkpoints from before this field
        began at 0."""
        rel = f"{self.operator_id}/_operator.json"
        if self.storage.exists(rel):
            raw = self._read_json(rel).get("first_version", 0)
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise CorruptionError(f"{self.storage.describe(rel)} names first version "
                                      f"{raw!r}, not an int >= 0; it is corrupted")
            return raw
        return 0 if self.versions() else None

    # ---- reading ---------------------------------------------------------------------------

    def versions(self) -> list[int]:
        out = []
        for info in self.storage.list_dir(self.operator_id):
            m = _VERSION.match(info.base_name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def _read_json(self, rel: str) -> dict[str, Any]:
        data = self.storage.read_bytes(rel)
        try:
            return json.loads(data)
        except ValueError as e:
            raise CorruptionError(f"checkpoint file {self.storage.describe(rel)} is not valid "
                                  f"JSON ({e}); it is corrupted or truncated") from None

    def _manifest(self, rel: str, size: int) -> dict[str, Any]:
        with self._lock:
            cached = self._cache.get((rel, size))
        if cached is not None:
            return cached
        doc = self._read_json(rel)
        try:  # a manifest that parses as JSON must still describe a checkpoint
            if not isinstance(doc, dict):
                raise TypeError(f"a JSON {type(doc).__name__}, not an object")
            handle_from_dict(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptionError(f"checkpoint manifest {self.storage.describe(rel)} does not "
                                  f"describe a checkpoint ({type(e).__name__}: {e}); it is "
                                  f"corrupted") from None
        with self._lock:
            self._cache[(rel, size)] = doc
        return doc

    def manifests(self, version: int) -> list[tuple[int, int, dict[str, Any]]]:
        """(partition, num partitions, manifest document) of every manifest of version."""
        out = []
        for info in self.storage.list_dir(self.version_dir(version)):
            m = _MANIFEST.match(info.base_name)
            if m:
                rel = f"{self.version_dir(version)}/{info.base_name}"
                out.append((int(m.group(1)), int(m.group(2)), self._manifest(rel, info.size)))
        return out

    def committed_partitions(self, version: int) -> int | None:
        rel = f"{self.version_dir(version)}/{COMMITTED_MARKER}"
        if not self.storage.exists(rel):
            return None
        try:
            return int(self._read_json(rel)["num_partitions"])
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptionError(f"commit marker {self.storage.describe(rel)} is corrupted "
                                  f"({type(e).__name__}: {e})") from None

    def handles_for(self, version: int, target: KeyGroupRange) -> list[IncrementalHandle]:
        """Every handle of the one consistent set of manifests of version that covers target.

        Handles whose ranges miss target are included too: restore skips their keyed state,
        but operator state is redistributed from all old instances (union and even split)."""
        manifests = self.manifests(version)
        if not manifests:
            known = self.versions()
            raise CheckpointNotFoundError(
                f"version {version} of {self.describe()} does not exist (versions present: "
                f"{_summarize(known)})")
        by_n: dict[int, list[tuple[int, dict[str, Any]]]] = {}
        for p, n, doc in manifests:
            by_n.setdefault(n, []).append((p, doc))
        marked = self.committed_partitions(version)
        if marked is not None and marked in by_n:
            candidates = [marked]
        else:  # complete sets first, then the most recently written
            candidates = sorted(by_n, key=lambda n: (len({p for p, _ in by_n[n]}) == n,
                                                     max(d.get("created_at", 0) for _, d in by_n[n])),
                                reverse=True)
        for n in candidates:
            handles = [handle_from_dict(doc) for _, doc in sorted(by_n[n], key=lambda t: t[0])]
            covering = [h for h in handles if not h.key_group_range.intersection(target).is_empty()]
            if _covers(covering, target):
                return handles  # type: ignore[return-value]
        raise CheckpointNotFoundError(
            f"version {version} of {self.describe()} is incomplete: no committed set of "
            f"partitions covers key groups {target.start}..{target.end}")

    def latest_version(self, target: KeyGroupRange) -> int:
        """The newest version readable for target (0, the empty state, if none)."""
        for v in reversed(self.versions()):
            try:
                self.handles_for(v, target)
                return v
            except (CheckpointNotFoundError, CorruptionError):
                continue
        return 0

    # ---- writing ---------------------------------------------------------------------------

    def mark_committed(self, version: int, num_partitions: int) -> None:
        """Records that all num_partitions partitions of version committed (driver side)."""
        self.storage.write_atomic(f"{self.version_dir(version)}/{COMMITTED_MARKER}",
                                  json.dumps({"num_partitions": num_partitions}).encode())

    def slowest_partition_version(self, latest: int, num_partitions: int) -> int:
        """The oldest of the newest versions (<= latest) that the partitions of num_partitions
        committed; a partition without any is taken to be committing on top of latest - 1."""
        missing = set(range(num_partitions))
        slowest = latest
        for v in reversed(self.versions()):
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
        version, which must survive until it has."""
        import time

        if num_partitions is not None:
            latest = min(latest, self.slowest_partition_version(latest, num_partitions))
        cutoff = latest - min_versions_to_retain + 1
        versions = self.versions()
        old = [v for v in versions if v < cutoff]
        if not old:
            return {"versions": 0, "files": 0}
        keep_refs: set[str] = set()
        for v in versions:
            if v >= cutoff:
                for _, _, doc in self.manifests(v):
                    keep_refs.update(f["path"] for f in doc.get("shared", []))
        candidates: set[str] = set()
        for v in old:
            try:
                docs = self.manifests(v)
            except CorruptionError:
                continue  # going anyway; its files become orphans for the grace-period sweep
            for _, _, doc in docs:
                candidates.update(f["path"] for f in doc.get("shared", []))
        deleted = 0
        for path in candidates - keep_refs:
            self.storage.delete_file(path)
            deleted += 1
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
