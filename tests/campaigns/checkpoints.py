"""Small checkpoints of each kind, how to load them, and their full contents.

Each kind writes a checkpoint into an empty root and knows which of its files are documents
(sealed JSON) and which binary, how a reader loads it (the way users do: a handle read from
the root, or a StateStore's latest version) and what the loaded backend must hold, compared as
raw RocksDB bytes of every column family plus metas, key layout and operator state, so two
equal dumps are exactly the same state.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any, Callable

from stateengine import (CheckpointNotFoundError, CheckpointStorage, KeyedStateBackend, ListStateDescriptor,
                         MapStateDescriptor, StateStoreProvider, ValueStateDescriptor,
                         load_handle)

VALUE = ValueStateDescriptor("value", int)
WORDS = ListStateDescriptor("words", str, namespace_type=object)
ATTRS = MapStateDescriptor("attrs", str)
DESCRIPTORS = [VALUE, WORDS, ATTRS]
OPERATOR = "op"


def dump(backend: Any, **extra: Any) -> dict:
    """Everything a restored backend holds, as comparable plain data."""
    ops = backend.operator_state
    return {
        **extra,
        "key_codecs": backend.key_codecs, "key_is_tuple": backend.key_is_tuple,
        "range": (backend.key_group_range.start, backend.key_group_range.end),
        "states": {name: (backend.state_meta(name), backend._raw_scan(cf))
                   for name, cf in backend.column_families()},
        "operator": {n: (ops._states[n].mode, ops._states[n].get()) for n in ops.state_names},
    }


def fill(backend: KeyedStateBackend, round_: int = 1) -> None:
    value, words, attrs = (backend.get_state(d) for d in DESCRIPTORS)
    for k in range(24):
        backend.set_current_key(k)
        value.update(k * 7 + round_)
        words.set_current_namespace("w" if k % 2 else None)
        words.add_all([f"r{round_}", str(k)])
        if k % 3 == 0:
            attrs.put(f"a{k}", round_)
        if k % 4 == 0:
            backend.timer_service.register_event_time_timer(100 + k + round_)
    backend.operator_state.get_list_state("offsets").add_all([round_, 2, 3])


def _documents(root: str) -> list[str]:
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(".json")]
    return sorted(out)


def _binaries(root: str) -> list[str]:
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names
                if not n.endswith(".json")]
    return sorted(out)


class Kind:
    """A checkpoint kind: ``build(root, scratch)``, ``load(root, scratch) -> dump``.
    ``allow_pickle`` lets a load read checkpoints written before format 2 (pickled operator
    state, see tests/test_legacy_manifests.py); checkpoints built here never need it."""

    name = ""

    def build(self, root: str, scratch: str) -> None:
        raise NotImplementedError

    def load(self, root: str, scratch: str, hmac_key: bytes | None = None,
             allow_pickle: bool = False) -> dict:
        raise NotImplementedError

    def verify_args(self, root: str) -> list[str]:
        """``stateengine verify`` arguments that check this checkpoint."""
        raise NotImplementedError

    def documents(self, root: str) -> list[str]:
        return _documents(root)

    def binaries(self, root: str) -> list[str]:
        return _binaries(root)


def _scratch_path(scratch: str) -> str:
    return os.path.join(scratch, uuid.uuid4().hex)


def _restore_dump(root: str, rel: str, scratch: str, hmac_key: bytes | None,
                  allow_pickle: bool) -> dict:
    handle = load_handle(root, rel, hmac_key=hmac_key)
    backend = KeyedStateBackend.restore(_scratch_path(scratch), [handle], hmac_key=hmac_key,
                                        allow_pickle=allow_pickle)
    try:
        return dump(backend)
    finally:
        backend.dispose()


class FullSnapshot(Kind):
    name = "full"

    def build(self, root: str, scratch: str, hmac_key: bytes | None = None) -> None:
        b = KeyedStateBackend(_scratch_path(scratch), key_type=int)
        try:
            fill(b)
            b.snapshot(root, "snap", hmac_key=hmac_key).result()
        finally:
            b.dispose()

    def load(self, root: str, scratch: str, hmac_key: bytes | None = None,
             allow_pickle: bool = False) -> dict:
        return _restore_dump(root, "snap.handle.json", scratch, hmac_key, allow_pickle)

    def verify_args(self, root: str) -> list[str]:
        return ["verify", root, "--handle", "snap.handle.json"]


class IncrementalCheckpoint(Kind):
    name = "incremental"

    def build(self, root: str, scratch: str, hmac_key: bytes | None = None) -> None:
        b = KeyedStateBackend(_scratch_path(scratch), key_type=int)
        try:
            fill(b)
            b.checkpoint(1, root, hmac_key=hmac_key).result()  # default manifest beside it
        finally:
            b.dispose()

    def manifest(self, root: str) -> str:
        """The checkpoint's default manifest, chk-1/<private dir>.handle.json (on any file
        system the root is on)."""
        names = [i.base_name for i in CheckpointStorage(root).list_dir("chk-1")
                 if i.base_name.endswith(".handle.json")]
        if len(names) != 1:  # what load_handle says of a manifest that is not there
            raise CheckpointNotFoundError(f"checkpoint manifest in {root}/chk-1 does not exist")
        return f"chk-1/{names[0]}"

    def load(self, root: str, scratch: str, hmac_key: bytes | None = None,
             allow_pickle: bool = False) -> dict:
        return _restore_dump(root, self.manifest(root), scratch, hmac_key, allow_pickle)

    def verify_args(self, root: str) -> list[str]:
        return ["verify", root, "--handle", self.manifest(root)]


class StoreVersions(Kind):
    """Two committed versions of one partition, the newest marked committed by a driver:
    a reader takes the latest version, so a silent fall back to version 1 would show.
    Version 1 is small (one state, one key), version 2 full and compacted: small documents
    keep the every-bit tests quick."""

    name = "store"

    def build(self, root: str, scratch: str, hmac_key: bytes | None = None) -> None:
        first = StateStoreProvider(root, OPERATOR, 0, 1, key_type=int, descriptors=[VALUE],
                                   local_dir=scratch, hmac_key=hmac_key)
        try:
            store = first.get_store(0)
            store.backend.set_current_key(1)
            store.get_state(VALUE).update(1)
            store.backend.operator_state.get_list_state("offsets").add(1)
            store.commit()
        finally:
            first.close()
        prov = StateStoreProvider(root, OPERATOR, 0, 1, key_type=int, descriptors=DESCRIPTORS,
                                  local_dir=scratch, hmac_key=hmac_key)
        try:
            store = prov.get_store(1)
            fill(store.backend, 2)
            store.backend._native_flush()
            store.backend._native_compact()
            store.commit()
            prov.catalog.mark_committed(2, 1)
        finally:
            prov.close()

    def load(self, root: str, scratch: str, hmac_key: bytes | None = None,
             allow_pickle: bool = False, version: int | None = None) -> dict:
        """The latest version, or ``version`` when a reader asks for that one by number."""
        prov = StateStoreProvider(root, OPERATOR, 0, 1, key_type=int, descriptors=DESCRIPTORS,
                                  local_dir=scratch, hmac_key=hmac_key,
                                  allow_pickle=allow_pickle)
        try:
            if version is None:
                version = prov.latest_version()
            store = prov.get_store(version)
            return dump(store.backend, version=version)
        finally:
            prov.close()

    @staticmethod
    def version_read_for(rel: str) -> int | None:
        """Which version a reader of rel asks for: 1 for version 1's files, else the latest."""
        return 1 if rel.startswith(f"{OPERATOR}/v1/") else None

    def verify_args(self, root: str) -> list[str]:
        return ["verify", root, "--operator", OPERATOR, "--all"]


KINDS: dict[str, Kind] = {k.name: k for k in (FullSnapshot(), IncrementalCheckpoint(),
                                              StoreVersions())}


def build_all(base: str, hmac_key: bytes | None = None) -> dict[str, str]:
    """Builds one checkpoint of each kind under base; returns kind -> root."""
    roots = {}
    scratch = os.path.join(base, "scratch-build")
    for name, kind in KINDS.items():
        root = os.path.join(base, name)
        os.makedirs(root)
        kind.build(root, scratch, hmac_key)
        roots[name] = root
    shutil.rmtree(scratch, ignore_errors=True)
    return roots


def outcome(load: Callable[[], dict], pristine: dict) -> tuple[str, str]:
    """(class, detail) of one load: identical, corruption (CorruptionError), error (another
    StateEngineError), wrong (loaded, but not the pristine state) or raw (any other
    exception)."""
    from stateengine import CorruptionError, StateEngineError

    try:
        got = load()
    except CorruptionError as e:
        return "corruption", str(e)
    except StateEngineError as e:
        return "error", f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - classifying is the point
        return "raw", f"{type(e).__name__}: {e}"
    if got == pristine:
        return "identical", ""
    return "wrong", _difference(got, pristine)


def _difference(got: dict, want: dict) -> str:
    for k in sorted(set(got) | set(want)):
        if got.get(k) != want.get(k):
            return f"field {k!r} differs: {str(got.get(k))[:200]} != {str(want.get(k))[:200]}"
    return "?"
