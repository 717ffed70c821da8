"""Confinement: a checkpoint's paths stay inside its root.

Paths with ``..``, absolute paths, empty components, backslashes or NUL, and symlinks that
lead out of the root are a CorruptionError before any file is opened, copied, linked or
deleted; retention deletes only its own operator's files; a restored RocksDB directory
without CURRENT or MANIFEST is an error, never an empty database."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from stateengine import (CheckpointNotFoundError, CorruptionError, KeyedStateBackend,
                         StateStoreProvider, load_handle)
from stateengine.cli import main as cli
from tests.campaigns.checkpoints import DESCRIPTORS, KINDS, OPERATOR, build_all, fill
from tests.campaigns.mutations import resealed, rewrite

ESCAPES = ["../outside/secret.sst", "/etc/hostname", "shared//x.sst", "shared/./x.sst",
           "shared\\..\\x.sst", "shared/x\x00.sst", ""]


@pytest.fixture
def roots(tmp_path):
    roots = build_all(str(tmp_path / "cp"))
    outside = tmp_path / "cp" / "outside"
    outside.mkdir()
    (outside / "secret.sst").write_bytes(b"not yours")
    return roots


def _restore_refused(tmp_path, handle, *patterns):
    target = tmp_path / "restored"
    with pytest.raises(CorruptionError) as info:
        KeyedStateBackend.restore(target, [handle])
    for p in patterns:
        assert p in str(info.value)
    assert not target.exists() or not any(f for _, _, f in os.walk(target)), \
        "a refused restore placed files"
    return str(info.value)


@pytest.mark.parametrize("path", ESCAPES)
def test_escaping_paths_in_handles_are_refused_before_any_file_is_touched(tmp_path, roots, path):
    inc = load_handle(roots["incremental"], KINDS["incremental"].manifest(roots["incremental"]))
    bad = dataclasses.replace(inc.shared[0], path=path)
    _restore_refused(tmp_path, dataclasses.replace(inc, shared=[bad, *inc.shared[1:]]))
    full = load_handle(roots["full"], "snap.handle.json")
    _restore_refused(tmp_path, dataclasses.replace(full, file=dataclasses.replace(full.file, path=path)))
    assert (tmp_path / "cp" / "outside" / "secret.sst").read_bytes() == b"not yours"


@pytest.mark.parametrize("path", ESCAPES[:3])
def test_escaping_paths_in_sealed_manifests_are_refused_by_restore_verify_and_dump(
        tmp_path, roots, path):
    root = roots["store"]
    rel = "op/v2/p00000-of-00001.json"
    manifest = os.path.join(root, rel)
    rewrite(manifest, resealed(open(manifest, "rb").read(),
                               lambda d: d["shared"][0].update(path=path)))
    with pytest.raises(CorruptionError, match=rel):
        KINDS["store"].load(root, str(tmp_path / "s"), version=2)
    assert cli(["verify", root, "--operator", OPERATOR, "-v", "2"]) == 1
    assert cli(["dump", root, "--operator", OPERATOR, "--state", "value", "-v", "2"]) == 1


def test_symlinks_out_of_the_root_are_refused_even_with_matching_content(tmp_path, roots):
    """A file replaced by a symlink to an identical copy outside the root passes size and
    CRC-32C, so only confinement stops the restore from reading outside."""
    root = roots["incremental"]
    handle = load_handle(root, KINDS["incremental"].manifest(root))
    victim = os.path.join(root, handle.shared[0].path)
    copy = tmp_path / "elsewhere.sst"
    copy.write_bytes(open(victim, "rb").read())
    os.remove(victim)
    os.symlink(copy, victim)
    message = _restore_refused(tmp_path, handle, handle.shared[0].path)
    assert "symlink" in message and "outside" in message
    assert cli(KINDS["incremental"].verify_args(root)) == 1
    os.remove(victim)
    os.rename(copy, victim)
    # a symlinked directory leading out is refused the same way
    shared = os.path.join(root, "shared")
    os.rename(shared, tmp_path / "shared-elsewhere")
    os.symlink(tmp_path / "shared-elsewhere", shared)
    _restore_refused(tmp_path, handle, "symlink")


def test_a_symlink_inside_the_root_is_followed(tmp_path, roots):
    root = roots["incremental"]
    handle = load_handle(root, KINDS["incremental"].manifest(root))
    victim = os.path.join(root, handle.shared[0].path)
    moved = os.path.join(root, "moved.sst")
    os.rename(victim, moved)
    os.symlink(moved, victim)
    KeyedStateBackend.restore(tmp_path / "r", [handle]).dispose()


def test_snapshot_and_checkpoint_names_must_stay_inside_the_target(tmp_path):
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    fill(b)
    for name in ("../escape", "/abs", "a//b"):
        with pytest.raises(ValueError, match="relative"):
            b.snapshot(tmp_path / "cp", name)
        with pytest.raises(ValueError, match="relative"):
            b.checkpoint(1, tmp_path / "cp", private_dir=name)
    assert not (tmp_path / "escape").exists()
    b.dispose()


def test_retention_deletes_only_its_own_operators_files(tmp_path):
    """An old version's manifest naming another operator's shared file (a legacy manifest
    without a checksum, so only the field checks stand in the way) is damage: retention
    skips it and the other operator's file survives."""
    root = str(tmp_path / "cp")
    others = []
    for op in ("mine", "theirs"):
        prov = StateStoreProvider(root, op, 0, 1, key_type=int, descriptors=DESCRIPTORS,
                                  local_dir=str(tmp_path / "w"), min_versions_to_retain=1)
        store = prov.get_store(0)
        fill(store.backend)
        store.commit()
        if op == "theirs":
            others = [os.path.join(root, f["path"]) for _, _, d in prov.catalog.manifests(1)
                      for f in d["shared"]]
        prov.close()
    manifest = os.path.join(root, "mine", "v1", "p00000-of-00001.json")
    doc = json.loads(open(manifest, "rb").read())
    for f in doc["shared"]:
        f["path"] = os.path.relpath(others[0], root)
    # (legacy manifests had neither a checksum nor the metrics block commits seal now)
    legacy = {k: v for k, v in doc.items() if k not in ("format", "checksum", "metrics")}
    legacy["root"] = root
    legacy["operator_state"]["file"].pop("sha256", None)
    rewrite(manifest, json.dumps(legacy).encode())
    prov = StateStoreProvider(root, "mine", 0, 1, key_type=int, descriptors=DESCRIPTORS,
                              local_dir=str(tmp_path / "w"), min_versions_to_retain=1)
    with pytest.raises(CorruptionError, match="outside the operator"):
        prov.get_store(1)
    prov.catalog.prune(3, 1, orphan_grace_seconds=0)
    prov.close()
    assert all(os.path.exists(p) for p in others), "retention deleted another operator's file"
    reader = StateStoreProvider(root, "theirs", 0, 1, key_type=int, descriptors=DESCRIPTORS,
                                local_dir=str(tmp_path / "r"))
    reader.get_store(1).abort()
    reader.close()


@pytest.mark.parametrize("drop", [("CURRENT",), ("CURRENT", "MANIFEST")])
def test_a_checkpoint_without_current_or_manifest_is_never_an_empty_database(
        tmp_path, roots, drop):
    root = roots["incremental"]
    handle = load_handle(root, KINDS["incremental"].manifest(root))
    private = [f for f in handle.private if not f.local_name.startswith(drop)]
    message = _restore_refused(tmp_path, dataclasses.replace(handle, private=private))
    assert "does not open" in message
    # a sealed manifest that lists no CURRENT is refused when it is read
    path = os.path.join(root, KINDS["incremental"].manifest(root))
    rewrite(path, resealed(open(path, "rb").read(), lambda d: d.update(
        private=[f for f in d["private"] if not f["local_name"].startswith(drop)])))
    with pytest.raises(CorruptionError, match="no CURRENT or no MANIFEST"):
        KINDS["incremental"].load(root, str(tmp_path / "s"))


def test_a_deleted_current_file_is_a_missing_file(tmp_path, roots):
    root = roots["incremental"]
    handle = load_handle(root, KINDS["incremental"].manifest(root))
    current = next(f for f in handle.private if f.local_name == "CURRENT")
    os.remove(os.path.join(root, current.path))
    with pytest.raises(CheckpointNotFoundError, match="CURRENT") as info:
        KeyedStateBackend.restore(tmp_path / "r", [handle])
    assert isinstance(info.value, CorruptionError)
