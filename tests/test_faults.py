"""Faults: processes killed mid-snapshot, damaged or missing checkpoint files, and state that
does not fit what the restoring job declares.

A SIGKILLed process must leave the last committed StateStore version restorable and intact,
with nothing published for the version it was writing. Truncated, corrupted or missing files
and missing versions must raise CheckpointNotFoundError / CorruptionError naming the file or
version, and a failed restore must leave nothing behind that looks like a restored backend.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from stateengine import (CheckpointNotFoundError, CorruptionError, IncompatibleStateError,
                         KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
                         StateStoreProvider, ValueStateDescriptor)
from stateengine.checkpoint import untrusted
from stateengine.checkpoint.handles import FileRef

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
VALUE = ValueStateDescriptor("value", str)
SEEN = ListStateDescriptor("seen", int)
DESCRIPTORS = [VALUE, SEEN]
KEYS = range(300)


def expected(version: int) -> dict:
    """What the child commits: version 1 sets every key, version 2 changes every third."""
    out = {k: (f"v1-{k}", [k]) for k in KEYS}
    if version >= 2:
        for k in KEYS[::3]:
            out[k] = (f"v2-{k}", [k, 2])
    return out


CHILD = textwrap.dedent('''
    import os, sys, time
    sys.path.insert(0, HERE)
    from stateengine import (ListStateDescriptor, MapStateDescriptor, StateStoreProvider,
                             ValueStateDescriptor)
    from stateengine.checkpoint import storage as storage_mod

    mode, root, local = sys.argv[1:4]
    VALUE = ValueStateDescriptor("value", str)
    SEEN = ListStateDescriptor("seen", int)
    prov = StateStoreProvider(root, "op", 0, 1, key_type=int, descriptors=[VALUE, SEEN],
                              local_dir=local)

    def say(word):
        print(word, flush=True)

    def stall(*_a, **_k):
        while True:
            time.sleep(60)

    store = prov.get_store(0)
    for k in range(300):
        store.backend.set_current_key(k)
        store.get_state(VALUE).update(f"v1-{k}")
        store.get_state(SEEN).add(k)
    assert store.commit() == 1
    store = prov.get_store(1)
    for k in range(0, 300, 3):
        store.backend.set_current_key(k)
        store.get_state(VALUE).update(f"v2-{k}")
        store.get_state(SEEN).add(2)
    assert store.commit() == 2

    # version 3 is being written when the process dies
    store = prov.get_store(2)
    for k in range(300):
        store.backend.set_current_key(k)
        store.get_state(VALUE).update("never committed")
    if mode.startswith("full"):
        ballast = store.get_state(MapStateDescriptor("ballast", int, bytes))
        blob = os.urandom(100)
        for k in range(1000, 1600):
            store.backend.set_current_key(k)
            ballast.put_all({i: blob for i in range(1000)})
        if mode == "full-before-rename":
            def written(*_a, **_k):
                say("WRITTEN")
                stall()

            storage_mod.CheckpointStorage.commit_local = written
        snap = store.backend.snapshot(os.path.join(root, "savepoints"), "sp", compress=False)
        say("SNAPSHOTTING")
        snap.result()
        say("SNAPSHOT DONE")
    else:
        if mode == "upload":
            real_upload = storage_mod.CheckpointStorage.upload

            def upload(self, local_file, rel, local_name="", **options):
                ref = real_upload(self, local_file, rel, local_name, **options)
                say("UPLOADING")
                stall()

            storage_mod.CheckpointStorage.upload = upload
        elif mode == "publish":
            real_replace = storage_mod.os.replace

            def replace(src, dst):
                if dst.endswith(".json") and "/v3/" in dst:
                    say("PUBLISHING")
                    stall()
                return real_replace(src, dst)

            storage_mod.os.replace = replace
        store.commit()
        say("COMMITTED")
''').replace("HERE", repr(HERE))


def _run_child_and_kill(tmp_path, mode, when):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    path = [PROJECT, os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)))
    proc = subprocess.Popen([sys.executable, str(script), mode, str(tmp_path / "cp"),
                             str(tmp_path / "child-local")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        for want in {"full-midwrite": ["SNAPSHOTTING"],
                     "full-before-rename": ["SNAPSHOTTING", "WRITTEN"],
                     "upload": ["UPLOADING"], "publish": ["PUBLISHING"]}[mode]:
            line = proc.stdout.readline().strip()
            assert line == want, f"child said {line!r}; stderr: {proc.stderr.read()[-3000:]}"
        assert when(), "the kill point was not reached"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    return proc


def _wait(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.002)
    return False


def _read_version(tmp_path, version, local="reader") -> dict:
    prov = StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / local))
    try:
        store = prov.get_store(version)
        out = {}
        for k in store.backend.get_keys("value"):
            store.backend.set_current_key(k)
            out[k] = (store.get_state(VALUE).value(), store.get_state(SEEN).get())
        assert store.backend.state_names == ["value", "seen"], store.backend.state_names
        store.abort()
        return out
    finally:
        prov.close()


def _check_last_committed_version_survives(tmp_path):
    root = tmp_path / "cp"
    prov = StateStoreProvider(str(root), "op", 0, 1, key_type=int, descriptors=DESCRIPTORS,
                              local_dir=str(tmp_path / "after"))
    # nothing was published for version 3
    assert prov.latest_version() == 2
    v3 = root / "op" / "v3"
    assert not v3.exists() or not [p for p in os.listdir(v3) if p.endswith(".json")], \
        f"stray manifest in {v3}: {os.listdir(v3)}"
    with pytest.raises(CheckpointNotFoundError, match="version 3"):
        prov.get_store(3)
    # versions 2 and 1 are intact
    assert _read_version(tmp_path, 2) == expected(2)
    assert _read_version(tmp_path, 1, local="reader1") == expected(1)
    # and the next commit works and is readable
    store = prov.get_store(2)
    store.backend.set_current_key(7)
    store.get_state(VALUE).update("after the crash")
    assert store.commit() == 3
    want = expected(2)
    want[7] = ("after the crash", want[7][1])
    assert _read_version(tmp_path, 3, local="reader3") == want
    # files the dead process uploaded but never published are orphans: collected once old
    catalog = prov.catalog
    catalog.prune(3, 2, orphan_grace_seconds=0)
    shared = {f"op/shared/{f}" for f in os.listdir(root / "op" / "shared")}
    referenced = set()
    for v in (2, 3):
        for _, _, doc in catalog.manifests(v):
            referenced.update(f["path"] for f in doc["shared"])
    assert shared == referenced
    assert _read_version(tmp_path, 3, local="reader3b") == want
    prov.close()


def test_killed_during_async_full_snapshot(tmp_path):
    savepoints = tmp_path / "cp" / "savepoints"
    def midway():
        if not savepoints.is_dir():
            return False
        names = os.listdir(savepoints)
        assert "sp" not in names, "the snapshot finished before the kill: more ballast"
        try:
            return any(".tmp-" in f and os.path.getsize(savepoints / f) > (1 << 20)
                       for f in names)
        except FileNotFoundError:  # renamed meanwhile: the next look sees the final name
            return False

    _run_child_and_kill(tmp_path, "full-midwrite", lambda: _wait(midway))
    leftovers = os.listdir(savepoints)
    assert "sp" not in leftovers, "a partial snapshot was published under its final name"
    assert all(".tmp-" in f for f in leftovers)
    _check_last_committed_version_survives(tmp_path)


def test_killed_after_writing_the_snapshot_before_publishing_it(tmp_path):
    savepoints = tmp_path / "cp" / "savepoints"
    _run_child_and_kill(tmp_path, "full-before-rename", lambda: True)
    leftovers = os.listdir(savepoints)
    assert "sp" not in leftovers
    assert len(leftovers) == 1 and os.path.getsize(savepoints / leftovers[0]) > 60_000_000, \
        "the whole stream was written under a temporary name"
    _check_last_committed_version_survives(tmp_path)


def test_killed_during_incremental_upload(tmp_path):
    _run_child_and_kill(tmp_path, "upload", lambda: True)
    shared = tmp_path / "cp" / "op" / "shared"
    before = set(os.listdir(shared))
    assert before
    _check_last_committed_version_survives(tmp_path)


def test_killed_while_publishing_the_manifest(tmp_path):
    _run_child_and_kill(tmp_path, "publish", lambda: True)
    v3 = tmp_path / "cp" / "op" / "v3"
    assert [p for p in os.listdir(v3) if ".json.tmp-" in p], "the manifest was being written"
    _check_last_committed_version_survives(tmp_path)


# ---- damaged and missing files ------------------------------------------------------------

def _filled_backend(path, n=300):
    b = KeyedStateBackend(path, key_type=int)
    v, s = b.get_state(VALUE), b.get_state(SEEN)
    for k in range(n):
        b.set_current_key(k)
        v.update(f"v{k}")
        s.add_all([k, k + 1])
        b.timer_service.register_event_time_timer(k)
    b.operator_state.get_list_state("offsets").add_all([1, 2, 3])
    return b


@pytest.fixture
def handles(tmp_path):
    b = _filled_backend(tmp_path / "source")
    full = b.snapshot(tmp_path / "cp", "savepoint").result()
    inc = b.checkpoint(1, tmp_path / "cp").result()
    b.dispose()
    return full, inc


def _flip(path, offset=None):
    size = os.path.getsize(path)
    offset = size // 2 if offset is None else offset
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def _truncate(path, keep=None):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2 if keep is None else keep)


def _refreshed(ref: FileRef, root) -> FileRef:
    """The same file reference with size and CRC of the file as it is now (as if it had been
    damaged before its checksum was taken): only the format's own checks can catch it."""
    from stateengine import _native

    crc, size = _native.file_crc32c(os.path.join(root, ref.path))
    return FileRef(ref.path, size, crc, ref.local_name)


def _restore_fails(tmp_path, handle, error, *patterns, **kw):
    target = tmp_path / "restored"
    with pytest.raises(error) as info:
        KeyedStateBackend.restore(target, [handle], **kw)
    message = str(info.value)
    for p in patterns:
        assert p in message, f"{p!r} not in {message!r}"
    assert not target.exists() or not os.listdir(target), \
        f"a failed restore left {os.listdir(target)} behind"
    return message


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_damaged_full_snapshot_file(tmp_path, handles, damage):
    full, _ = handles
    path = os.path.join(full.root, full.file.path)
    {"truncate": _truncate, "flip": _flip, "delete": os.remove}[damage](path)
    error = CheckpointNotFoundError if damage == "delete" else CorruptionError
    _restore_fails(tmp_path, full, error, path)


@pytest.mark.parametrize("damage", ["flip-section", "truncate-section", "flip-meta",
                                    "truncate-meta"])
def test_full_snapshot_damage_behind_a_valid_checksum(tmp_path, handles, damage):
    """The snapshot format itself (snappy CRCs, lengths, end marks, meta block) catches
    damage, and restores nothing of a key group it could not read completely."""
    import dataclasses

    full, _ = handles
    path = os.path.join(full.root, full.file.path)
    last_group_offset = max(full.offsets.values())
    if damage == "flip-section":
        _flip(path, last_group_offset + 40)
    elif damage == "truncate-section":
        _truncate(path, os.path.getsize(path) - 7)
    elif damage == "flip-meta":
        _flip(path, 1)
    else:
        _truncate(path, full.meta_length - 3)
    handle = dataclasses.replace(full, file=_refreshed(full.file, full.root))
    _restore_fails(tmp_path, handle, CorruptionError, path)


def test_uncompressed_snappy_chunk_over_64_kib(tmp_path, handles):
    """A framing chunk stored uncompressed may hold 64 KiB at most (uncompressed chunks are
    decoded where they were read, so their size is checked, not assumed); a longer one with a
    correct CRC is corruption, and nothing is restored."""
    import dataclasses

    from stateengine import _native

    full, _ = handles
    path = os.path.join(full.root, full.file.path)
    payload = bytes(65537)
    crc = _native.crc32c(payload)
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    chunk = bytes([0x01]) + (len(payload) + 4).to_bytes(3, "little") + \
        masked.to_bytes(4, "little") + payload
    with open(path, "r+b") as f:  # the last key group: stream identifier, then that chunk
        f.seek(max(full.offsets.values()) + 10)
        f.write(chunk)
        f.truncate()
    handle = dataclasses.replace(full, file=_refreshed(full.file, full.root))
    _restore_fails(tmp_path, handle, CorruptionError, path, "larger than 64 KiB")


def test_full_snapshot_offsets_beyond_the_file(tmp_path, handles):
    import dataclasses

    full, _ = handles
    offsets = dict(full.offsets)
    kg = max(offsets)
    offsets[kg] = full.file.size + 100
    handle = dataclasses.replace(full, offsets=offsets)
    _restore_fails(tmp_path, handle, CorruptionError, full.file.path)


@pytest.mark.parametrize("which", ["sst", "MANIFEST", "CURRENT", "OPTIONS", "operator-state"])
@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_damaged_incremental_checkpoint_file(tmp_path, handles, which, damage):
    _, inc = handles
    if which == "sst":
        ref = inc.shared[0]
    elif which == "operator-state":
        ref = inc.operator_state.file
    else:
        ref = next(f for f in inc.private if f.local_name.startswith(which))
    path = os.path.join(inc.root, ref.path)
    {"truncate": _truncate, "flip": _flip, "delete": os.remove}[damage](path)
    error = CheckpointNotFoundError if damage == "delete" else CorruptionError
    _restore_fails(tmp_path, inc, error, path)


def test_rescaled_incremental_restore_with_a_damaged_second_handle(tmp_path):
    """Two handles merge into one backend; the second one is damaged: the restore fails as a
    whole, not with the first handle's key groups in a backend that claims success."""
    from stateengine import KeyGroupRange

    handles = []
    for i in range(2):
        kgr = KeyGroupRange.for_operator(i, 2, 128)
        b = KeyedStateBackend(tmp_path / f"src{i}", key_group_range=kgr, key_type=int)
        v = b.get_state(VALUE)
        for k in range(300):
            if b.key_group_of(k) in kgr:
                b.set_current_key(k)
                v.update("x")
        handles.append(b.checkpoint(1, tmp_path / "cp").result())
        b.dispose()
    _flip(os.path.join(handles[1].root, handles[1].shared[0].path))
    target = tmp_path / "merged"
    with pytest.raises(CorruptionError, match=handles[1].shared[0].path):
        KeyedStateBackend.restore(target, handles, KeyGroupRange(0, 127))
    assert not target.exists()


# ---- the versioned store ---------------------------------------------------------------------

@pytest.fixture
def versions(tmp_path):
    prov = StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / "writer"))
    store = prov.get_store(0)
    for k in KEYS:
        store.backend.set_current_key(k)
        store.get_state(VALUE).update(f"v1-{k}")
        store.get_state(SEEN).add(k)
    store.commit()
    store = prov.get_store(1)
    for k in KEYS[::3]:
        store.backend.set_current_key(k)
        store.get_state(VALUE).update(f"v2-{k}")
        store.get_state(SEEN).add(2)
    store.commit()
    prov.close()
    return tmp_path / "cp" / "op"


def _reader(tmp_path, local="reader"):
    return StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / local))


def _no_leftovers(tmp_path, local="reader"):
    d = tmp_path / local
    # the memo of checked tables is shared by every load in the directory, not left by one
    left = [n for n in os.listdir(d) if n != untrusted.MEMO_DIR] if d.exists() else []
    assert left == [], f"a failed load left {left} behind"


def test_missing_version(tmp_path, versions):
    with _reader(tmp_path) as prov:
        with pytest.raises(CheckpointNotFoundError, match=r"version 7 of operator 'op'"):
            prov.get_store(7)
    (versions / "v2" / "p00000-of-00001.json").unlink()
    with _reader(tmp_path) as prov:
        assert prov.latest_version() == 1
        with pytest.raises(CheckpointNotFoundError, match=r"version 2 of operator 'op'"):
            prov.get_store(2)
        assert _read_version(tmp_path, 1, local="ok") == expected(1)
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "not-a-manifest", "wrong-types"])
def test_damaged_manifest(tmp_path, versions, damage):
    manifest = versions / "v2" / "p00000-of-00001.json"
    if damage == "truncate":
        _truncate(manifest)
    elif damage == "garbage":
        manifest.write_bytes(b"\x00\xff not json")
    elif damage == "not-a-manifest":
        manifest.write_text(json.dumps({"hello": "world"}))
    else:
        doc = json.loads(manifest.read_text())
        doc["shared"] = "not a list"
        manifest.write_text(json.dumps(doc))
    with _reader(tmp_path) as prov:
        # no silent rollback: the damaged newest version is reported, not skipped
        with pytest.raises(CorruptionError, match="p00000-of-00001.json"):
            prov.latest_version()
        with pytest.raises(CorruptionError, match="p00000-of-00001.json"):
            prov.get_store(2)
        # the provider stays usable, and the older version is there when asked for by number
        assert prov.get_store(1).backend.num_state_entries("value") == len(KEYS)
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("which", ["sst", "MANIFEST"])
@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_damaged_file_of_a_version(tmp_path, versions, which, damage):
    doc = json.loads((versions / "v2" / "p00000-of-00001.json").read_text())
    refs = doc["shared"] if which == "sst" else [f for f in doc["private"]
                                               if f["local_name"].startswith("MANIFEST")]
    path = str(tmp_path / "cp" / refs[-1]["path"])
    {"truncate": _truncate, "flip": _flip, "delete": os.remove}[damage](path)
    error = CheckpointNotFoundError if damage == "delete" else CorruptionError
    v1 = json.loads((versions / "v1" / "p00000-of-00001.json").read_text())
    with _reader(tmp_path) as prov:
        with pytest.raises(error, match=refs[-1]["path"]):
            prov.get_store(2)
        if refs[-1]["path"] not in {f["path"] for f in v1["shared"] + v1["private"]}:
            store = prov.get_store(1)  # the provider stays usable for intact versions
            assert store.backend.num_state_entries("value") == len(KEYS)
            store.abort()
    _no_leftovers(tmp_path)


def test_damaged_operator_properties(tmp_path, versions):
    (versions / "_operator.json").write_text("{")
    with pytest.raises(CorruptionError, match="_operator.json"):
        _reader(tmp_path)


# ---- state that does not fit the restoring job ---------------------------------------------

@pytest.fixture(params=["full", "incremental"])
def one_handle(request, handles):
    return handles[0] if request.param == "full" else handles[1]


def test_other_max_parallelism(tmp_path, one_handle):
    _restore_fails(tmp_path, one_handle, IncompatibleStateError, "max_parallelism 128",
                   max_parallelism=256)


def test_other_max_parallelism_for_a_store(tmp_path, versions):
    with pytest.raises(IncompatibleStateError, match="max_parallelism"):
        StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, max_parallelism=64, key_type=int,
                           descriptors=DESCRIPTORS, local_dir=str(tmp_path / "x"))


@pytest.mark.parametrize("descriptor,what", [
    (ListStateDescriptor("value"), "list"),                  # another kind
    (MapStateDescriptor("value", str, str), "map"),           # another kind
    (ValueStateDescriptor("value", int), "bigint"),           # another value serializer
    (ValueStateDescriptor("value", str, namespace_type=object), "namespace"),
    (ListStateDescriptor("seen", str), "string"),             # another element serializer
])
def test_incompatible_descriptor(tmp_path, one_handle, descriptor, what):
    message = _restore_fails(tmp_path, one_handle, IncompatibleStateError, descriptor.name,
                             descriptors=[descriptor])
    assert what in message


def test_incompatible_descriptor_for_a_store(tmp_path, versions):
    prov = StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, key_type=int,
                              descriptors=[ValueStateDescriptor("value", bytes)],
                              local_dir=str(tmp_path / "reader"))
    with pytest.raises(IncompatibleStateError, match="'value'"):
        prov.get_store(2)
    prov.close()
    _no_leftovers(tmp_path)


def test_other_key_type(tmp_path, one_handle):
    _restore_fails(tmp_path, one_handle, IncompatibleStateError, "string", key_type=str)


def test_damaged_manifest_of_a_pruned_version_does_not_stop_retention(tmp_path, versions):
    (versions / "v1" / "p00000-of-00001.json").write_text("{")
    prov = StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / "w"),
                              min_versions_to_retain=1)
    store = prov.get_store(2)
    store.backend.set_current_key(1)
    store.get_state(VALUE).update("v3")
    assert store.commit() == 3
    assert store.metrics["prune_error"] is None
    assert prov.catalog.versions() == [3]
    prov.catalog.prune(3, 1, orphan_grace_seconds=0)  # v1's files were left to the sweep
    refs = {f["path"] for _, _, d in prov.catalog.manifests(3) for f in d["shared"]}
    assert {f"op/shared/{f}" for f in os.listdir(versions / "shared")} == refs
    prov.close()
    want = expected(2)
    want[1] = ("v3", want[1][1])
    assert _read_version(tmp_path, 3) == want


def test_failed_pruning_does_not_fail_a_published_commit(tmp_path):
    """Pruning is maintenance: when it fails (here: a retained version's manifest is damaged,
    so nothing can safely be deleted) the commit that already published its version succeeds
    and reports the problem in its metrics."""
    prov = StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / "w"),
                              min_versions_to_retain=2)
    for version in range(3):
        store = prov.get_store(version)
        store.backend.set_current_key(version)
        store.get_state(VALUE).update(f"v{version + 1}")
        assert store.commit() == version + 1
    manifest = tmp_path / "cp" / "op" / "v3" / "p00000-of-00001.json"
    manifest.write_text("{")
    store = prov.get_store(3)  # reuses the open backend: the damaged manifest is not read
    assert prov.last_load["reused"]
    store.backend.set_current_key(9)
    store.get_state(VALUE).update("v4")
    assert store.commit() == 4
    assert store.has_committed
    assert "p00000-of-00001.json" in store.metrics["prune_error"]
    assert prov.catalog.versions() == [2, 3, 4], "nothing may be deleted blindly"
    prov.close()
    reader = StateStoreProvider(str(tmp_path / "cp"), "op", 0, 1, key_type=int,
                                descriptors=DESCRIPTORS, local_dir=str(tmp_path / "r"))
    store = reader.get_store(4)
    assert sorted(store.backend.get_keys("value")) == [0, 1, 2, 9]
    reader.close()
