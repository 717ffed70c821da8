"""Checkpoints written before checksummed documents (format 1) still restore, wherever they
now lie; but only in exactly their old shape, and never while a checkpoint key is configured.

The fixture tests/data/legacy-format1.tar.gz was written by the code of commit 3e49f5c (see
tests/data/make_legacy_format1.py): a full snapshot with its handle saved as ``to_dict()``
JSON, an incremental checkpoint with its manifest, and two StateStore versions with a
driver's commit marker. Their documents record the absolute root they were written under,
which does not exist here.
"""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from stateengine import CorruptionError, KeyedStateBackend, StateStoreProvider
from tests.campaigns.checkpoints import DESCRIPTORS, KINDS, OPERATOR, dump, fill
from tests.campaigns.mutations import rewrite

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def legacy(tmp_path):
    with tarfile.open(os.path.join(HERE, "data", "legacy-format1.tar.gz")) as tar:
        tar.extractall(tmp_path / "legacy", filter="data")
    return {name: str(tmp_path / "legacy" / name) for name in ("full", "incremental", "store")}


def _expected(tmp_path, rounds) -> dict:
    """The same state written by today's code, for comparison."""
    b = KeyedStateBackend(tmp_path / f"expected-{len(rounds)}", key_type=int)
    try:
        for r in rounds:
            fill(b, r)
        return dump(b)
    finally:
        b.dispose()


def _without_version(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "version"}


@pytest.mark.parametrize("kind", ["full", "incremental", "store"])
def test_format1_checkpoints_restore_from_where_they_now_lie(tmp_path, legacy, kind):
    root = legacy[kind]
    doc_path = next(os.path.join(d, n) for d, _, ns in os.walk(root) for n in ns
                    if n.endswith(".json"))
    recorded = json.loads(open(doc_path).read()).get("root")
    assert recorded != root  # written elsewhere (a path that does not exist here)
    got = KINDS[kind].load(root, str(tmp_path / "scratch"))
    if kind == "store":
        assert got["version"] == 2
    want = _expected(tmp_path, [1, 2] if kind == "store" else [1])
    assert _without_version(got) == want


def test_a_format1_store_takes_format2_commits(tmp_path, legacy):
    prov = StateStoreProvider(legacy["store"], OPERATOR, 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / "w"))
    store = prov.get_store(prov.latest_version())
    fill(store.backend, 3)
    assert store.commit() == 3
    prov.close()
    manifest = json.loads(open(os.path.join(legacy["store"], "op/v3/p00000-of-00001.json")).read())
    assert manifest["format"] == 2 and "checksum" in manifest and "root" not in manifest
    got = KINDS["store"].load(legacy["store"], str(tmp_path / "scratch"))
    assert got["version"] == 3 and _without_version(got) == _expected(tmp_path, [1, 2, 3])


@pytest.mark.parametrize("kind", ["full", "incremental", "store"])
def test_format1_documents_are_refused_when_a_key_is_configured(tmp_path, legacy, kind):
    with pytest.raises(CorruptionError, match="no HMAC"):
        KINDS[kind].load(legacy[kind], str(tmp_path / "scratch"), hmac_key=b"secret")


@pytest.mark.parametrize("change", [
    "checksum added", "format 2 without checksum", "format 1 on a handle", "root dropped",
    "unknown field",
])
def test_only_the_exact_legacy_shape_is_read_without_a_checksum(tmp_path, legacy, change):
    root = legacy["store"]
    path = os.path.join(root, "op/v2/p00000-of-00001.json")
    doc = json.loads(open(path).read())
    if change == "checksum added":
        doc["checksum"] = "0" * 64
    elif change == "format 2 without checksum":
        doc["format"] = 2
    elif change == "format 1 on a handle":
        doc["format"] = 1
    elif change == "root dropped":
        del doc["root"]
    else:
        doc["owner"] = "someone"
    rewrite(path, json.dumps(doc, indent=1).encode())
    with pytest.raises(CorruptionError, match="p00000-of-00001.json"):
        KINDS["store"].load(root, str(tmp_path / "scratch"))


def test_format1_fields_are_still_validated(tmp_path, legacy):
    """Without a checksum the fields' semantics are the only defence: an offset outside the
    snapshot, a path out of the root or an unknown codec are refused as corruption."""
    root = legacy["full"]
    path = os.path.join(root, "snap.handle.json")
    original = open(path, "rb").read()
    for change in (lambda d: d["file"].update(path="../../etc/passwd"),
                   lambda d: d["offsets"].update({"0": d["file"]["size"] + 1}),
                   lambda d: d.update(key_group_range=[0, 4096])):
        doc = json.loads(original)
        change(doc)
        rewrite(path, json.dumps(doc, indent=1).encode())
        with pytest.raises(CorruptionError, match="snap.handle.json"):
            KINDS["full"].load(root, str(tmp_path / "scratch"))
    rewrite(path, original)
