"""Checkpoints written before checksummed documents (format 1) still restore, wherever they
now lie; but only in exactly their old shape, and never while a checkpoint key is configured.

The fixture tests/data/legacy-format1.tar.gz was written by the code of commit 3e49f5c (see
tests/data/make_legacy_format1.py): a full snapshot with its handle saved as ``to_dict()``
JSON, an incremental checkpoint with its manifest, and two StateStore versions with a
driver's commit marker. Their documents record the absolute root they were written under,
which does not exist here. This file is about the documents (handles, manifests, markers);
tests/test_legacy_checkpoints.py is about the entries and values of format-1 checkpoints.

The keyed state of this fixture holds only primitives, but its operator-state files are the
format-1 pickles: reading them needs ``allow_pickle=True`` (unpickling runs code from the
checkpoint, see operator_state.py), so every load that gets that far passes it, and the first
test shows the refusal without it.
"""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from stateengine import (CorruptionError, KeyedStateBackend, PickleNotAllowedError,
                         StateStoreProvider, load_handle)
from stateengine.checkpoint import documents as docs
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
    with pytest.raises(PickleNotAllowedError, match="operator state"):
        KINDS[kind].load(root, str(tmp_path / "refused"))
    got = KINDS[kind].load(root, str(tmp_path / "scratch"), allow_pickle=True)
    if kind == "store":
        assert got["version"] == 2
    want = _expected(tmp_path, [1, 2] if kind == "store" else [1])
    assert _without_version(got) == want


def test_a_format1_store_takes_format2_commits(tmp_path, legacy):
    """Once a trusted reader restored it, the next commit is format 2 throughout: sealed
    manifest, typed operator state, so later readers need no allow_pickle."""
    prov = StateStoreProvider(legacy["store"], OPERATOR, 0, 1, key_type=int,
                              descriptors=DESCRIPTORS, local_dir=str(tmp_path / "w"),
                              allow_pickle=True)
    store = prov.get_store(prov.latest_version())
    fill(store.backend, 3)
    assert store.commit() == 3
    prov.close()
    manifest = json.loads(open(os.path.join(legacy["store"], "op/v3/p00000-of-00001.json")).read())
    assert manifest["format"] == 2 and "checksum" in manifest and "root" not in manifest
    assert manifest["value_format"] == 2
    got = KINDS["store"].load(legacy["store"], str(tmp_path / "scratch"))  # no allow_pickle
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


@pytest.mark.parametrize("value_format", [None, 2])
def test_unsealed_manifests_tell_their_value_format(tmp_path, legacy, value_format):
    """A manifest written after the native value encoding but before sealed documents is the
    legacy shape plus ``value_format: 2``: read without a checksum, and its entries taken as
    native (no conversion); without the field it is generation 1, which restore converts."""
    root = legacy["incremental"]
    rel = KINDS["incremental"].manifest(root)
    if value_format is not None:
        doc = json.loads(open(os.path.join(root, rel)).read())
        doc["value_format"] = value_format
        rewrite(os.path.join(root, rel), json.dumps(doc, indent=1).encode())
    assert load_handle(root, rel).value_format == (value_format or 1)
    got = KINDS["incremental"].load(root, str(tmp_path / "scratch"), allow_pickle=True)
    assert got == _expected(tmp_path, [1])


def test_a_sealed_manifest_must_state_its_value_format(tmp_path):
    """The seal covers value_format, so a sealed manifest without it (a writer's bug) is
    refused rather than read as generation 1, which would convert native entries."""
    KINDS["incremental"].build(str(tmp_path / "ck"), str(tmp_path / "w"))
    root = str(tmp_path / "ck")
    rel = KINDS["incremental"].manifest(root)
    doc = json.loads(open(os.path.join(root, rel)).read())
    assert doc["value_format"] == 2
    del doc["value_format"]
    resealed = docs.seal({k: v for k, v in doc.items() if k not in ("checksum", "hmac")}, None)
    rewrite(os.path.join(root, rel), docs.dumps(resealed))
    with pytest.raises(CorruptionError, match="value_format"):
        load_handle(root, rel)
