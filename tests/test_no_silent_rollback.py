"""No silent rollback, no silent nothing.

A damaged newest version is reported by ``latest_version()``, ``stateengine versions``,
``verify`` and ``dump``; an older version is read only when asked for by number. A newest
version whose partitions have not all published (a crash between the partitions' commits, or
before the manifest) is incomplete, not damaged: the newest complete version is the latest.
The command line exits 1 on a missing checkpoint, operator or version and lists what exists.
Retention removes manifests before files, so no listed version ever lacks its files, whenever
it is interrupted.
"""

from __future__ import annotations

import os
import shutil

import pytest

from stateengine import CorruptionError, KeyGroupRange, StateStoreProvider
from stateengine.checkpoint.storage import CheckpointStorage
from stateengine.checkpoint.versions import VersionCatalog
from stateengine.cli import main as cli
from tests.campaigns.checkpoints import DESCRIPTORS, KINDS, OPERATOR, build_all, fill
from tests.campaigns.mutations import flipped, rewrite


@pytest.fixture
def store(tmp_path):
    return build_all(str(tmp_path / "cp"))["store"]


def _provider(root, tmp_path, **kw):
    return StateStoreProvider(root, OPERATOR, 0, 1, key_type=int, descriptors=DESCRIPTORS,
                              local_dir=str(tmp_path / "w"), **kw)


@pytest.mark.parametrize("damaged", ["op/v2/p00000-of-00001.json", "op/v2/_COMMITTED.json"])
def test_a_damaged_newest_version_is_reported_everywhere(tmp_path, store, capsys, damaged):
    path = os.path.join(store, damaged)
    rewrite(path, flipped(open(path, "rb").read(), 100))
    prov = _provider(store, tmp_path)
    with pytest.raises(CorruptionError, match=damaged):
        prov.latest_version()
    assert prov.get_store(1).backend.num_state_entries("value") == 1  # asked for by number
    prov.close()
    assert cli(["versions", store]) == 1
    out = capsys.readouterr()
    assert "version      2: DAMAGED" in out.out and "version      1: 1 manifest(s)" in out.out
    for args in (["verify", store, "--operator", OPERATOR],
                 ["dump", store, "--operator", OPERATOR, "--state", "value"]):
        assert cli(args) == 1
        assert damaged in capsys.readouterr().err
    assert cli(["verify", store, "--operator", OPERATOR, "-v", "1"]) == 0


def test_an_unfinished_newest_commit_is_incomplete_not_damaged(tmp_path, store, capsys):
    """A commit killed after uploading its files but before publishing its manifest."""
    v3 = os.path.join(store, "op", "v3", "p00000-of-00001-0123456789ab")
    os.makedirs(v3)
    with open(os.path.join(v3, "CURRENT"), "wb") as f:
        f.write(b"MANIFEST-000005\n")
    with open(os.path.join(store, "op", "v3", "p00000-of-00001.json.tmp-" + "a" * 32), "wb") as f:
        f.write(b'{"half a manif')
    prov = _provider(store, tmp_path)
    assert prov.latest_version() == 2
    prov.close()
    assert VersionCatalog(CheckpointStorage(store), OPERATOR).versions() == [1, 2]
    assert cli(["versions", store]) == 0
    assert "version      3: incomplete, no manifest" in capsys.readouterr().out
    assert cli(["verify", store, "--operator", OPERATOR]) == 0
    assert "version 2:" in capsys.readouterr().out


def test_a_partition_that_did_not_commit_leaves_the_version_incomplete(tmp_path):
    root = str(tmp_path / "cp")
    for p in (0, 1):
        prov = StateStoreProvider(root, OPERATOR, p, 2, key_type=int, descriptors=DESCRIPTORS,
                                  local_dir=str(tmp_path / "w"))
        for version in range(2 if p == 0 else 1):  # partition 1 crashed before version 2
            store = prov.get_store(version)
            key = next(k for k in range(100)
                       if store.backend.key_group_of(k) in prov.key_group_range)
            store.backend.set_current_key(key)
            store.get_state(DESCRIPTORS[0]).update(version)
            store.commit()
        prov.close()
    catalog = VersionCatalog(CheckpointStorage(root), OPERATOR)
    assert catalog.latest_version(KeyGroupRange.all(128)) == 1
    assert catalog.status(2).state == "incomplete"
    assert cli(["versions", root]) == 0


def test_missing_checkpoint_operator_and_version_exit_1_listing_what_exists(tmp_path, store,
                                                                           capsys):
    missing = str(tmp_path / "does" / "not" / "exist")
    for args in (["versions", missing], ["verify", missing, "--operator", "op"],
                 ["dump", missing, "--operator", "op", "--state", "value"]):
        assert cli(args) == 1
        assert "does not exist" in capsys.readouterr().err
    for args in (["versions", store, "--operator", "nope"],
                 ["verify", store, "--operator", "nope"],
                 ["dump", store, "--operator", "nope", "--state", "value"]):
        assert cli(args) == 1
        assert "no operator 'nope' (operators: op)" in capsys.readouterr().err
    assert cli(["verify", store, "--operator", OPERATOR, "-v", "7"]) == 1
    assert "versions present: 1, 2" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli(["versions", str(empty)]) == 1
    assert "no operator state" in capsys.readouterr().err


def test_verify_all_reports_a_damaged_older_version(tmp_path, store, capsys):
    path = os.path.join(store, "op/v1/p00000-of-00001.json")
    rewrite(path, flipped(open(path, "rb").read(), 7))
    assert cli(["verify", store, "--operator", OPERATOR]) == 0  # the latest is intact
    capsys.readouterr()
    assert cli(["verify", store, "--operator", OPERATOR, "--all"]) == 1
    out = capsys.readouterr().out
    assert "version 1: DAMAGED" in out and "version 2: 1 partition(s)" in out


class Interrupted(BaseException):
    """A process killed in the middle of retention."""


def test_retention_interrupted_at_every_step_never_lists_a_version_without_its_files(
        tmp_path, monkeypatch):
    """Retention of versions 1..3 (keeping 4 and 5) is cut after each of its deletions in
    turn; after every cut each listed version loads, and the next retention finishes."""
    template = tmp_path / "template"
    prov = StateStoreProvider(str(template), OPERATOR, 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / "w"),
                              min_versions_to_retain=100)
    for v in range(5):
        store = prov.get_store(v)
        fill(store.backend, v + 1)
        store.backend._native_flush()
        store.backend._native_compact()  # every version has its own SSTs: they get deleted
        store.commit()
    prov.close()

    real_file, real_dir = CheckpointStorage._delete_quietly, CheckpointStorage.delete_dir
    step = 0
    while True:
        root = tmp_path / f"run{step}"
        shutil.copytree(template, root)
        budget = [step]

        def cut(real):
            def delete(self, *a):
                if budget[0] == 0:
                    raise Interrupted()
                budget[0] -= 1
                return real(self, *a)
            return delete

        monkeypatch.setattr(CheckpointStorage, "_delete_quietly", cut(real_file))
        monkeypatch.setattr(CheckpointStorage, "delete_dir", cut(real_dir))
        catalog = VersionCatalog(CheckpointStorage(str(root)), OPERATOR)
        try:
            catalog.prune(5, 2, orphan_grace_seconds=0)
            finished = True
        except Interrupted:
            finished = False
        monkeypatch.undo()
        for v in VersionCatalog(CheckpointStorage(str(root)), OPERATOR).versions():
            got = KINDS["store"].load(str(root), str(tmp_path / "s"), version=v)
            assert got["version"] == v, f"cut after {step} deletions: version {v} is listed"
        VersionCatalog(CheckpointStorage(str(root)), OPERATOR).prune(5, 2, orphan_grace_seconds=0)
        assert VersionCatalog(CheckpointStorage(str(root)), OPERATOR).versions() == [4, 5]
        if finished:
            break
        step += 1
    assert step > 10, "retention deletes more than a handful of files"
