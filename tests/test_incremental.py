"""Incremental checkpoints upload only new SST files, and retention deletes what nothing
references any more.

The RocksDB directory of a backend is compared with the checkpoint's handle and with the
shared folder of the checkpoint storage: after 1% of a large state changes, the next
checkpoint uploads exactly the SST files that appeared locally since the confirmed
checkpoint (plus the small private files), and reuses all the others.
"""

from __future__ import annotations

import glob
import os
import random

import pytest

from stateengine import (CheckpointNotFoundError, KeyedStateBackend, StateStoreProvider,
                         ValueStateDescriptor)
from stateengine.checkpoint.handles import handle_from_dict, load_handle

PAYLOAD = ValueStateDescriptor("payload", bytes)
PRIVATE_FILES = 3  # CURRENT, MANIFEST-*, OPTIONS-*


def local_ssts(backend) -> set[str]:
    return {os.path.basename(p) for p in glob.glob(os.path.join(backend.path, "db", "*.sst"))}


def shared_files(root, shared_dir="shared") -> set[str]:
    d = os.path.join(root, shared_dir)
    if not os.path.isdir(d):
        return set()
    return {f"{shared_dir}/{f}" for f in os.listdir(d)}


def files_of(root, private_prefix) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(os.path.join(root, private_prefix)):
        out.extend(files)
    return out


def _fill(backend, keys, rng, size=100):
    payload = backend.get_state(PAYLOAD)
    for k in keys:
        backend.set_current_key(k)
        payload.update(rng.randbytes(size))


@pytest.mark.slow
def test_one_percent_change_uploads_only_the_new_ssts(tmp_path):
    rng = random.Random(1)
    n = 250_000  # ~30 MB of incompressible values
    backend = KeyedStateBackend(tmp_path / "backend", key_type=int)
    root = str(tmp_path / "cp")
    _fill(backend, range(n), rng)
    backend._native_flush()
    backend._native_compact()
    before = local_ssts(backend)
    assert before

    first = backend.checkpoint(1, root).result()
    backend.notify_checkpoint_complete(1)
    assert {f.local_name for f in first.shared} == local_ssts(backend) == before
    assert first.stats["files_reused"] == 0
    assert first.stats["files_uploaded"] == len(before) + PRIVATE_FILES
    assert shared_files(root) == {f.path for f in first.shared}
    assert first.stats["bytes_total"] > 25_000_000

    changed = rng.sample(range(n), n // 100)
    _fill(backend, changed, rng)
    second = backend.checkpoint(2, root).result()
    after = local_ssts(backend)
    new = after - before
    assert new, "the checkpoint's flush should have written a new SST"
    assert before <= after, "no compaction ran, so every earlier SST is still live"
    uploaded = [f for f in second.shared if f.path not in {g.path for g in first.shared}]
    assert {f.local_name for f in uploaded} == new
    assert {f.local_name for f in second.shared} == after
    assert second.stats["files_reused"] == len(before)
    assert second.stats["files_uploaded"] == len(new) + PRIVATE_FILES
    assert len(shared_files(root)) == len(before) + len(new)
    assert second.stats["bytes_uploaded"] < second.stats["bytes_total"] * 0.05
    # reused files are the very same stored files, not copies
    assert {f.path for f in second.shared} - {f.path for f in uploaded} == \
        {f.path for f in first.shared}

    restored = KeyedStateBackend.restore(tmp_path / "restored", [second])
    p = restored.get_state(PAYLOAD)
    original = backend.get_state(PAYLOAD)
    for k in changed[:200] + list(range(200)):
        restored.set_current_key(k)
        backend.set_current_key(k)
        assert p.value() == original.value()
    assert restored.num_state_entries("payload") == n
    restored.dispose()
    backend.dispose()


def test_unchanged_state_uploads_no_sst(tmp_path):
    backend = KeyedStateBackend(tmp_path / "b", key_type=int)
    _fill(backend, range(5000), random.Random(2))
    root = str(tmp_path / "cp")
    first = backend.checkpoint(1, root).result()
    backend.notify_checkpoint_complete(1)
    second = backend.checkpoint(2, root).result()
    assert second.stats["files_uploaded"] == PRIVATE_FILES
    assert second.stats["files_reused"] == len(first.shared)
    assert {f.path for f in second.shared} == {f.path for f in first.shared}
    backend.dispose()


def test_only_confirmed_checkpoints_are_the_base(tmp_path):
    """Files of a checkpoint that was never confirmed are not reused (it may be discarded)."""
    backend = KeyedStateBackend(tmp_path / "b", key_type=int)
    rng = random.Random(3)
    _fill(backend, range(2000), rng)
    root = str(tmp_path / "cp")
    first = backend.checkpoint(1, root).result()  # never confirmed
    second = backend.checkpoint(2, root).result()
    assert second.stats["files_reused"] == 0
    assert not ({f.path for f in first.shared} & {f.path for f in second.shared})
    backend.notify_checkpoint_complete(2)
    _fill(backend, range(10), rng)
    third = backend.checkpoint(3, root).result()
    assert third.stats["files_reused"] == len(second.shared)
    backend.notify_checkpoint_complete(1)  # late confirmation of an older one changes nothing
    fourth = backend.checkpoint(4, root).result()
    assert fourth.stats["files_reused"] == len(second.shared)
    backend.dispose()


def test_retained_checkpoints_keep_their_files_and_old_ones_disappear(tmp_path):
    backend = KeyedStateBackend(tmp_path / "b", key_type=int)
    backend.num_retained_checkpoints = 2
    rng = random.Random(4)
    root = str(tmp_path / "cp")
    _fill(backend, range(20_000), rng)
    backend._native_flush()
    backend._native_compact()
    handles = {}
    expected_values = {}

    def checkpoint(cid, compact=False, change=200):
        changed = rng.sample(range(20_000), change)
        _fill(backend, changed, rng)
        if compact:
            backend._native_flush()
            backend._native_compact()
        h = backend.checkpoint(cid, root).result()
        backend.notify_checkpoint_complete(cid)
        handles[cid] = h
        p = backend.get_state(PAYLOAD)
        backend.set_current_key(changed[0])
        expected_values[cid] = (changed[0], p.value())
        return h

    def live(cids):
        return {f.path for c in cids for f in handles[c].shared}

    checkpoint(1)
    checkpoint(2)
    base = {f.path for f in handles[1].shared} & live([2])
    assert base, "checkpoint 2 reuses the compacted base of checkpoint 1"
    checkpoint(3)
    # checkpoint 1 is gone: its private files and the shared files only it used
    assert shared_files(root) == live([2, 3])
    assert base <= shared_files(root), "files still referenced must stay"
    assert files_of(root, "chk-1") == []
    assert len(files_of(root, "chk-2")) == PRIVATE_FILES + 1  # and its manifest
    checkpoint(4, compact=True)  # every SST is rewritten: the old ones are only in 3 now
    assert shared_files(root) == live([3, 4])
    assert base <= shared_files(root)
    checkpoint(5)
    assert shared_files(root) == live([4, 5])
    assert not (base & shared_files(root)), "unreferenced files must be deleted"
    assert files_of(root, "chk-3") == []
    for cid in (4, 5):  # the retained checkpoints restore
        restored = KeyedStateBackend.restore(tmp_path / f"r{cid}", [handles[cid]])
        key, value = expected_values[cid]
        restored.set_current_key(key)
        assert restored.get_state(PAYLOAD).value() == value
        assert restored.num_state_entries("payload") == 20_000
        restored.dispose()
    with pytest.raises(CheckpointNotFoundError, match="shared/"):
        KeyedStateBackend.restore(tmp_path / "r1", [handles[1]])
    backend.dispose()


def _manifest_refs(catalog, versions):
    refs = set()
    for v in versions:
        for _, _, doc in catalog.manifests(v):
            refs.update(f["path"] for f in doc["shared"])
    return refs


def test_state_store_retention_prunes_versions_and_unreferenced_files(tmp_path):
    root = str(tmp_path / "cp")
    prov = StateStoreProvider(root, "op", 0, 1, key_type=int, descriptors=[PAYLOAD],
                              local_dir=str(tmp_path / "local"), min_versions_to_retain=2)
    rng = random.Random(5)
    shared_root = root
    store = prov.get_store(0)
    _fill(store.backend, range(20_000), rng)
    store.backend._native_flush()
    store.backend._native_compact()
    assert store.commit() == 1
    base = _manifest_refs(prov.catalog, [1])
    values = {}
    for version in range(1, 7):
        store = prov.get_store(version)
        assert prov.last_load["reused"]
        _fill(store.backend, rng.sample(range(20_000), 200), rng)
        if version == 4:
            store.backend._native_flush()
            store.backend._native_compact()
        store.backend.set_current_key(7)
        store.get_state(PAYLOAD).update(f"v{version + 1}".encode())
        new_version = store.commit()
        values[new_version] = f"v{new_version}".encode()
        assert new_version == version + 1
        m = store.metrics
        retained = [v for v in (new_version - 1, new_version) if v >= 1]
        assert prov.catalog.versions() == retained
        refs = _manifest_refs(prov.catalog, retained)
        assert shared_files(shared_root, "op/shared") == refs, \
            "the shared folder must hold exactly the files of the retained versions"
        assert m["versions_pruned"] == (1 if new_version >= 3 else 0)
        if new_version <= 4:
            assert base <= refs, "the compacted base stays while versions reference it"
        if new_version >= 6:
            assert not (base & refs)
        assert m["files_reused"] >= 1 or new_version == 5
    prov.close()

    reader = StateStoreProvider(root, "op", 0, 1, key_type=int, descriptors=[PAYLOAD],
                                local_dir=str(tmp_path / "local2"))
    assert reader.latest_version() == 7
    for v in (6, 7):
        store = reader.get_store(v)
        store.backend.set_current_key(7)
        assert store.get_state(PAYLOAD).value() == values[v]
        assert store.backend.num_state_entries("payload") == 20_000
        store.abort()
    with pytest.raises(CheckpointNotFoundError, match="version 5"):
        reader.get_store(5)
    reader.close()


def test_prune_removes_orphans_only_after_the_grace_period(tmp_path):
    root = str(tmp_path / "cp")
    prov = StateStoreProvider(root, "op", 0, 1, key_type=int, descriptors=[PAYLOAD],
                              local_dir=str(tmp_path / "local"), min_versions_to_retain=1)
    store = prov.get_store(0)
    _fill(store.backend, range(100), random.Random(6))
    store.commit()
    shared = os.path.join(root, "op", "shared")
    old = os.path.join(shared, "0000000000001-deadbeef.sst")  # born in 1970
    young = os.path.join(shared, f"{9999999999999:013d}-young.sst")  # an upload in flight
    for path in (old, young):
        with open(path, "wb") as f:
            f.write(b"not referenced by any manifest")
    store = prov.get_store(1)
    store.backend.set_current_key(1)
    store.get_state(PAYLOAD).update(b"x")
    store.commit()
    assert store.metrics["versions_pruned"] == 1
    refs = _manifest_refs(prov.catalog, [2])
    assert not os.path.exists(old), "an old unreferenced shared file survived pruning"
    assert os.path.exists(young), "a young file may belong to a commit in flight"
    assert shared_files(root, "op/shared") == refs | {"op/shared/" + os.path.basename(young)}
    prov.close()


def test_manifest_is_the_handle_plus_extra_fields(tmp_path):
    backend = KeyedStateBackend(tmp_path / "b", key_type=int)
    _fill(backend, range(100), random.Random(7))
    root = tmp_path / "cp"
    handle = backend.checkpoint(1, root, manifest_path="m/1.json", extra={"batch": 9}).result()
    import json

    doc = json.loads((root / "m" / "1.json").read_text())
    assert doc["batch"] == 9 and "root" not in doc, "a manifest does not bind to its location"
    assert handle_from_dict(doc, root=str(root)) == handle
    assert load_handle(root, "m/1.json") == handle
    for f in handle.files():
        assert os.path.getsize(root / f.path) == f.size
    assert not [p for p in os.listdir(root / "m") if ".tmp" in p]
    backend.dispose()


@pytest.mark.parametrize("clip", [False, True], ids=["same-range", "clipped"])
def test_restored_backend_reuses_but_never_deletes_adopted_files(tmp_path, clip):
    from stateengine import KeyGroupRange

    root = str(tmp_path / "cp")
    source = KeyedStateBackend(tmp_path / "src", key_type=int)
    rng = random.Random(8)
    _fill(source, range(5000), rng)
    source._native_flush()
    source._native_compact()
    original = source.checkpoint(1, root).result()
    source.dispose()

    target = KeyGroupRange(0, 63) if clip else None
    restored = KeyedStateBackend.restore(tmp_path / "restored", [original], target)
    restored.num_retained_checkpoints = 1
    keys = [k for k in range(5000) if restored.key_group_of(k) in restored.key_group_range]
    _fill(restored, keys[:20], rng)
    second = restored.checkpoint(2, root).result()
    restored.notify_checkpoint_complete(2)
    adopted = {f.path for f in original.shared}
    assert second.stats["files_reused"] == len(original.shared)
    assert adopted <= {f.path for f in second.shared}
    # compaction replaces every SST; once checkpoint 2 is discarded, the adopted files are no
    # longer referenced by this backend, but they belong to checkpoint 1, not to it
    restored._native_compact()
    restored.checkpoint(3, root).result()
    restored.notify_checkpoint_complete(3)
    assert adopted <= shared_files(root), "a restored backend deleted files it did not upload"
    own = {f.path for f in second.shared} - adopted
    assert not (own & shared_files(root)), "its own unreferenced uploads are deleted"
    again = KeyedStateBackend.restore(tmp_path / "again", [original])
    assert again.num_state_entries("payload") == 5000
    again.dispose()
    restored.dispose()


def test_retention_waits_for_the_slowest_partition(tmp_path):
    """Partition 0 prunes, but the other partitions of the same batch may not have committed
    yet: their next commit reuses the files of their own newest version, which must survive,
    also right after a change of num_partitions."""
    root = str(tmp_path / "cp")
    value = ValueStateDescriptor("v", str)
    expected = {}

    def providers(n):
        return [StateStoreProvider(root, "op", p, n, key_type=int, descriptors=[value],
                                   local_dir=str(tmp_path / f"l{n}-{p}"), min_versions_to_retain=1)
                for p in range(n)]

    def batch(prov, version):
        store = prov.get_store(version)
        for k in range(300):
            if store.backend.key_group_of(k) in prov.key_group_range and k % (version + 2) == 0:
                store.backend.set_current_key(k)
                store.get_state(value).update(f"{k}@{version + 1}")
                expected[k] = f"{k}@{version + 1}"
        return store.commit()

    def check(version):
        reader = StateStoreProvider(root, "op", 0, 1, key_type=int, descriptors=[value],
                                    local_dir=str(tmp_path / f"reader-{version}"))
        store = reader.get_store(version)
        got = {}
        for k in store.backend.get_keys("v"):
            store.backend.set_current_key(k)
            got[k] = store.get_state(value).value()
        reader.close()
        assert got == expected

    two = providers(2)
    for version in range(4):
        assert batch(two[0], version) == version + 1
        if version >= 1:  # partition 1 is still on `version`: it must stay
            assert version in two[0].catalog.versions()
        assert batch(two[1], version) == version + 1
        check(version + 1)
    three = providers(3)  # rescale: all three start from version 4, written by two
    assert batch(three[0], 4) == 5
    assert 4 in three[0].catalog.versions()
    for prov in three[1:]:
        assert batch(prov, 4) == 5
    check(5)
    for prov in three:
        batch(prov, 5)
    check(6)
    assert three[0].catalog.versions() == [5, 6]  # partition 0 pruned before the others ran
    batch(three[0], 6)
    assert three[0].catalog.versions() == [6, 7]
    for prov in two + three:
        prov.close()


def test_prune_every_prunes_on_an_interval_keeping_at_least_the_retained(tmp_path):
    """With prune_every=3, partition 0 prunes after versions 3, 6, ...: in between, older
    versions stay (never fewer than min_versions_to_retain), and after a prune exactly the
    retained ones and their files are left, as with pruning after every commit."""
    root = str(tmp_path / "cp")
    with pytest.raises(ValueError, match="prune_every"):
        StateStoreProvider(root, "op", 0, 1, key_type=int, descriptors=[PAYLOAD], prune_every=0)
    prov = StateStoreProvider(root, "op", 0, 1, key_type=int, descriptors=[PAYLOAD],
                              local_dir=str(tmp_path / "local"), min_versions_to_retain=2,
                              prune_every=3)
    rng = random.Random(9)
    for version in range(0, 8):
        store = prov.get_store(version)
        _fill(store.backend, rng.sample(range(100), 10), rng)
        new_version = store.commit()
        pruned = new_version % 3 == 0
        # the oldest version left: the one before the last pruning commit (or version 1)
        first = new_version - 1 if pruned else max(1, 3 * (new_version // 3) - 1)
        assert prov.catalog.versions() == list(range(first, new_version + 1)), new_version
        assert store.metrics["versions_pruned"] == {3: 1, 6: 3}.get(new_version, 0)
        if pruned:
            assert shared_files(root, "op/shared") == \
                _manifest_refs(prov.catalog, [new_version - 1, new_version])
    prov.close()


def test_checkpoint_files_are_linked_into_local_storage_or_copied(tmp_path, monkeypatch):
    """A checkpoint's files go to local storage on the same file system as hard links (a
    table shares its inode with the live database's, which never changes it); where links are
    refused (another file system) they are copied; both restore the same state."""
    rng = random.Random(3)
    for name, refuse in (("linked", False), ("copied", True)):
        if refuse:
            def no_link(src, dst, *a, **k):
                raise OSError(18, "Invalid cross-device link")
            monkeypatch.setattr(os, "link", no_link)
        b = KeyedStateBackend(str(tmp_path / f"src-{name}"), key_type=int)
        _fill(b, range(50), rng)
        root = str(tmp_path / name)
        handle = b.checkpoint(1, root).result()
        live = {n: os.stat(os.path.join(b.path, "db", n)).st_ino for n in local_ssts(b)}
        for ref in handle.shared:
            st = os.stat(os.path.join(root, ref.path))
            assert (st.st_ino == live[ref.local_name]) is (not refuse), name
        b.dispose()
        monkeypatch.undo()
        restored = KeyedStateBackend.restore(str(tmp_path / f"r-{name}"), [handle])
        assert restored.num_state_entries("payload") == 50
        restored.dispose()


def test_local_checkpoint_directory_links_tables_and_copies_the_manifest_as_listed(tmp_path):
    """The sync part of a checkpoint (csrc/checkpoint.cc): tables and OPTIONS hard-linked,
    the MANIFEST copied up to the size RocksDB recorded, CURRENT naming that copy, no log file
    (the WAL is off). A directory that exists already is refused and left as it was."""
    from stateengine import _native

    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    _fill(b, range(2000), random.Random(4))
    d = str(tmp_path / "chk")
    _native.create_checkpoint(b, d)
    names = set(os.listdir(d))
    live_dir = os.path.join(b.path, "db")
    tables = {n for n in names if n.endswith(".sst")}
    manifests = [n for n in names if n.startswith("MANIFEST-")]
    options = [n for n in names if n.startswith("OPTIONS-")]
    assert tables == local_ssts(b) and tables, "the flush's table and every live one"
    assert len(manifests) == 1 and len(options) == 1
    assert names == tables | {"CURRENT", manifests[0], options[0]}
    for n in tables | set(options):
        assert os.stat(os.path.join(d, n)).st_ino == os.stat(os.path.join(live_dir, n)).st_ino
    with open(os.path.join(d, "CURRENT")) as f:
        assert f.read() == manifests[0] + "\n"
    with open(os.path.join(d, manifests[0]), "rb") as f:
        copy = f.read()
    with open(os.path.join(live_dir, manifests[0]), "rb") as f:
        assert f.read().startswith(copy) and copy

    with pytest.raises(Exception, match="exists"):
        _native.create_checkpoint(b, d)
    assert set(os.listdir(d)) == names
    b.dispose()
