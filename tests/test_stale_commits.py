"""A zombie cannot publish what cannot be read.

A writer that loaded version v and commits long after the query moved on (a zombie task, a
stalled process) reuses the SST files of v. Retention deletes files no published manifest
names, so by then they may be gone: such a commit must fail with StaleCommitError and publish
nothing, never be acknowledged and then fail to restore (the issue's repro: retention 2, a
live writer commits v2..v6, a zombie opened at v1 commits v2). The races with retention are
played at exact points by a real CheckpointStorage that runs the other writer just before a
given call (``Interleaving``): retention between a commit's check and its publish (the commit
withdraws its manifest), and a commit published while retention runs (retention's second look
keeps its files). ``stateengine versions`` never lists a version whose files are gone as good.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Callable

import pytest

from stateengine import (KeyedStateBackend, KeyGroupRange, StaleCommitError, StateStoreProvider,
                         ValueStateDescriptor, load_handle)
from stateengine.checkpoint.storage import CheckpointStorage
from stateengine.cli import main as cli

V = ValueStateDescriptor("v", int)


class Interleaving(CheckpointStorage):
    """Checkpoint storage (the real one) that runs ``hook`` once, just before the first
    ``method`` call whose path starts with ``prefix``: another writer acts at that exact
    point."""

    def __init__(self, uri: str, method: str, prefix: str, hook: Callable[[], None]) -> None:
        super().__init__(uri)
        self._method, self._prefix, self._hook = method, prefix, hook
        self.fired = False

    def _maybe(self, method: str, rel: str) -> None:
        if not self.fired and method == self._method and rel.startswith(self._prefix):
            self.fired = True
            self._hook()

    def write_atomic(self, rel: str, data: bytes) -> None:
        self._maybe("write_atomic", rel)
        super().write_atomic(rel, data)

    def delete_file(self, rel: str) -> None:
        self._maybe("delete_file", rel)
        super().delete_file(rel)


def _provider(root, tmp_path, name, partition=0, partitions=1, storage=None):
    return StateStoreProvider(storage or root, "op", partition, partitions, key_type=int,
                              descriptors=[V], local_dir=str(tmp_path / name),
                              min_versions_to_retain=2)


def _commit(prov, version, key, value, compact=True):
    """Commits version + 1 with key -> value; compacting makes the new version's SST its own,
    so retention of the older versions deletes theirs."""
    store = prov.get_store(version)
    store.backend.set_current_key(key)
    store.get_state(V).update(value)
    if compact:
        store.backend._native_flush()
        store.backend._native_compact()
    return store.commit()


def _value(root, tmp_path, version, key, partition=0, partitions=1):
    with _provider(root, tmp_path, f"read-{version}-{partition}-{key}", partition,
                   partitions) as prov:
        store = prov.get_store(version)
        store.backend.set_current_key(key)
        try:
            return store.get_state(V).value()
        finally:
            store.abort()


def _cli(*args) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli(list(args))
    return code, out.getvalue()


def test_zombie_behind_retention_publishes_nothing(tmp_path):
    """The issue's repro: retention 2, a live writer commits v2..v6, a zombie opened at v1
    commits v2. It used to be acknowledged, listed, and a CheckpointFileMissingError on
    restore; now the commit fails and nothing is published."""
    root = str(tmp_path / "ckpt")
    live = _provider(root, tmp_path, "live")
    _commit(live, 0, 1, 1)
    zombie = _provider(root, tmp_path, "zombie")
    stale = zombie.get_store(1)
    v1_files = {f.path for f in zombie.catalog.manifest_handles(1)[0][2].shared}
    for v in range(1, 6):
        assert _commit(live, v, 1, v + 1) == v + 1
    assert not any(os.path.exists(os.path.join(root, p)) for p in v1_files)  # pruned
    stale.backend.set_current_key(2)
    stale.get_state(V).update(99)
    with pytest.raises(StaleCommitError) as e:
        stale.commit()
    msg = str(e.value)
    assert "op/v1/p00000-of-00001.json is no longer published" in msg
    assert "Nothing was published; load the latest version and commit again" in msg
    assert stale.state.value == "ABORTED"
    # nothing listed, nothing damaged, the live versions intact
    assert live.catalog.versions() == [5, 6] and live.latest_version() == 6
    code, out = _cli("versions", root)
    assert code == 0 and "DAMAGED" not in out and "version      2: incomplete" in out
    code, out = _cli("verify", root, "--operator", "op", "--all")
    assert code == 0, out
    assert _value(root, tmp_path, 6, 1) == 6
    # the zombie recovers the way the message says
    assert zombie.latest_version() == 6
    assert _commit(zombie, 6, 2, 7) == 7
    assert _value(root, tmp_path, 7, 2) == 7 and _value(root, tmp_path, 7, 1) == 6
    live.close()
    zombie.close()


def test_retention_between_the_check_and_the_publish_withdraws_the_commit(tmp_path):
    """Retention unpublishes the base (and deletes its files) after the commit checked it and
    before it published: the check after publishing finds the base gone, withdraws the
    manifest and fails; no version is left listed whose files are gone."""
    root = str(tmp_path / "ckpt")
    live = _provider(root, tmp_path, "live")
    _commit(live, 0, 1, 1)
    _commit(live, 1, 1, 2)
    storage = Interleaving(root, "write_atomic", "op/v2/p00000-of-00002.json",
                           lambda: _commit(live, 2, 1, 3))  # v3: retention drops v1
    zombie = _provider(root, tmp_path, "zombie", 0, 2, storage=storage)
    stale = zombie.get_store(1)  # partition 0 of 2, built on v1
    stale.backend.set_current_key(1)
    stale.get_state(V).update(99)
    with pytest.raises(StaleCommitError, match="op/v1/p00000-of-00001.json is no longer "
                                               "published"):
        stale.commit()
    assert storage.fired
    assert not os.path.exists(os.path.join(root, "op/v2/p00000-of-00002.json"))  # withdrawn
    assert live.catalog.versions() == [2, 3] and live.latest_version() == 3
    code, out = _cli("verify", root, "--operator", "op", "--all")
    assert code == 0, out
    code, out = _cli("versions", root)
    assert code == 0 and "DAMAGED" not in out, out
    assert _value(root, tmp_path, 3, 1) == 3
    live.close()
    zombie.close()


def test_a_commit_published_while_retention_runs_keeps_its_files(tmp_path):
    """The zombie commits (checks, publishes, checks again: all while its base is still
    published) in the middle of retention, after retention read which files the retained
    versions use and before it unpublished the base: retention's second look finds the new
    manifest, so the files it reuses stay and the acknowledged commit restores."""
    root = str(tmp_path / "ckpt")
    first = _provider(root, tmp_path, "first")
    _commit(first, 0, 1, 1)
    first.close()
    zombie = _provider(root, tmp_path, "zombie", 0, 2)
    stale = zombie.get_store(1)  # partition 0 of 2, built on v1
    stale.backend.set_current_key(1)
    stale.get_state(V).update(99)
    acknowledged = []
    storage = Interleaving(root, "delete_file", "op/v1/",
                           lambda: acknowledged.append(stale.commit()))
    live = _provider(root, tmp_path, "live", storage=storage)
    _commit(live, 1, 1, 2)
    _commit(live, 2, 1, 3)  # retention drops v1; the zombie commits v2 in the middle
    assert storage.fired and acknowledged == [2]
    assert 1 not in live.catalog.versions()
    mine = load_handle(root, "op/v2/p00000-of-00002.json")
    assert all(os.path.exists(os.path.join(root, f.path)) for f in mine.shared)
    # the acknowledged commit restores (v2 of 2 partitions is incomplete: read its manifest)
    r = KeyedStateBackend.restore(str(tmp_path / "r"), [mine], descriptors=[V])
    r.set_current_key(1)
    assert r.get_state(V).value() == 99
    r.close()
    code, out = _cli("verify", root, "--operator", "op", "--all")
    assert code == 0, out
    live.close()
    zombie.close()


def test_a_base_replaced_by_another_writer_is_no_base(tmp_path):
    """Another writer committed the same version again (a retried task), so the base's
    manifest no longer names the files this writer's own commit uploaded; they are orphans
    that retention may delete at any time. The commit building on them withdraws and fails."""
    root = str(tmp_path / "ckpt")
    a = _provider(root, tmp_path, "a")
    _commit(a, 0, 1, 1)
    b = _provider(root, tmp_path, "b")
    _commit(b, 0, 1, 10)  # replaces a's v1 manifest with its own
    with pytest.raises(StaleCommitError, match=r"op/v1/p00000-of-00001\.json no longer names "
                                               r".*op/shared/"):
        _commit(a, 1, 1, 2, compact=False)  # reuses the SST of its own v1
    assert a.catalog.versions() == [1]
    assert _value(root, tmp_path, 1, 1) == 10
    a.close()
    b.close()


def test_a_restored_handle_without_its_manifest_checks_each_reused_file(tmp_path):
    """A backend restored from a handle's dict form does not know where that handle is
    published, so each reused file must still exist."""
    root = str(tmp_path / "ckpt")
    b = KeyedStateBackend(str(tmp_path / "b"), key_type=int)
    v = b.get_state(V)
    b.set_current_key(1)
    v.update(1)
    h = b.checkpoint(1, root).result()
    b.close()
    r = KeyedStateBackend.restore(str(tmp_path / "r"), [h.to_dict()], descriptors=[V])
    gone = h.shared[0].path
    os.remove(os.path.join(root, gone))
    r.set_current_key(2)
    r.get_state(V).update(2)
    with pytest.raises(StaleCommitError, match=f"{gone} no longer exist"):
        r.checkpoint(2, root).result()
    assert not [n for n in os.listdir(os.path.join(root, "chk-2")) if n.endswith(".json")]
    r.close()


def test_a_restored_manifest_is_the_base_of_the_next_commit(tmp_path):
    """load_handle knows where the manifest lies: after its files are gone (an older build's
    retention), the next checkpoint fails before publishing."""
    root = str(tmp_path / "ckpt")
    b = KeyedStateBackend(str(tmp_path / "b"), key_type=int)
    b.get_state(V)
    b.set_current_key(1)
    b.get_state(V).update(1)
    h = b.checkpoint(1, root).result()
    b.close()
    rel = h.manifest
    assert rel.startswith("chk-1/") and rel.endswith(".handle.json")
    loaded = load_handle(root, rel)
    r = KeyedStateBackend.restore(str(tmp_path / "r"), [loaded], KeyGroupRange.all(128),
                                  descriptors=[V])
    os.remove(os.path.join(root, rel))
    with pytest.raises(StaleCommitError, match="is no longer published"):
        r.checkpoint(2, root).result()
    r.close()


def test_versions_never_lists_a_version_whose_files_are_gone_as_good(tmp_path):
    """A version written before these checks (or damaged by hand) whose manifest names a
    shared file that is gone: ``versions`` marks it DAMAGED and exits 1."""
    root = str(tmp_path / "ckpt")
    prov = _provider(root, tmp_path, "p")
    _commit(prov, 0, 1, 1)
    prov.close()
    shared = os.path.join(root, "op", "shared")
    gone = sorted(os.listdir(shared))[0]
    os.remove(os.path.join(shared, gone))
    code, out = _cli("versions", root)
    assert code == 1
    assert "version      1: DAMAGED: its manifests name 1 shared file(s) that do not exist" in out
    assert gone in out
    code, out = _cli("verify", root, "--operator", "op", "--all")
    assert code == 1 and "DAMAGED" in out
