"""Relocatable checkpoints: nothing persisted names the root it was written under, so a
checkpoint directory copied or moved elsewhere (another local directory, or another
pyarrow.fs file system) restores from the copy alone, also after the original is deleted, and
takes new commits there."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import pyarrow.fs as pafs
import pytest

from stateengine import StateStoreProvider
from stateengine.checkpoint.storage import register_filesystem
from stateengine.cli import main as cli
from tests.campaigns.checkpoints import DESCRIPTORS, KINDS, OPERATOR, build_all, fill


@pytest.fixture
def moved(tmp_path):
    """Each kind built under 'original', its state loaded, then moved to 'copy' and the
    original deleted."""
    roots = build_all(str(tmp_path / "original"))
    scratch = str(tmp_path / "scratch")
    pristine = {name: KINDS[name].load(root, scratch) for name, root in roots.items()}
    shutil.copytree(tmp_path / "original", tmp_path / "copy")
    shutil.rmtree(tmp_path / "original")
    return {name: str(tmp_path / "copy" / name) for name in roots}, pristine, scratch


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_moved_checkpoint_restores_from_the_copy_alone(moved, kind):
    roots, pristine, scratch = moved
    for d, _, names in os.walk(roots[kind]):
        for n in names:
            if n.endswith(".json"):
                assert "original" not in open(os.path.join(d, n)).read(), \
                    f"{n} records where it was written"
    assert KINDS[kind].load(roots[kind], scratch) == pristine[kind]
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli(KINDS[kind].verify_args(roots[kind])) == 0


def test_the_cli_reads_a_moved_store(moved, capsys):
    roots, _, _ = moved
    assert cli(["versions", roots["store"]]) == 0
    assert "version      2: 1 manifest(s)" in capsys.readouterr().out
    assert cli(["dump", roots["store"], "--operator", OPERATOR, "--state", "value"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["key"], r["value"]) for r in rows) == [(k, k * 7 + 2) for k in range(24)]


def test_a_moved_store_takes_new_commits(moved, tmp_path):
    roots, pristine, scratch = moved
    prov = StateStoreProvider(roots["store"], OPERATOR, 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / "w"))
    store = prov.get_store(prov.latest_version())
    fill(store.backend, 3)
    assert store.commit() == 3
    assert store.metrics["files_reused"] > 0, "the moved version's files are reused"
    prov.close()
    assert KINDS["store"].load(roots["store"], scratch)["version"] == 3


@pytest.fixture
def other_filesystem(tmp_path):
    base = tmp_path / "bucket"
    base.mkdir()
    register_filesystem("relocated", lambda uri: (
        pafs.SubTreeFileSystem(str(base), pafs.LocalFileSystem()), uri.split("://", 1)[1]))
    return base


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_checkpoint_copied_to_another_filesystem_restores_there(moved, other_filesystem, kind):
    roots, pristine, scratch = moved
    shutil.copytree(roots[kind], other_filesystem / "checkpoints" / kind)
    shutil.rmtree(roots[kind])
    uri = f"relocated://checkpoints/{kind}"
    assert KINDS[kind].load(uri, scratch) == pristine[kind]
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli(KINDS[kind].verify_args(uri)) == 0
