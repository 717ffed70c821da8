"""With a checkpoint key, checkpoints are authenticated: every document carries an
HMAC-SHA256 and every file a SHA-256, so a checkpoint tampered with (data changed, every
CRC-32C, size and checksum recomputed; or a file changed so that its CRC-32C stays the same)
is refused, and so is a document without an HMAC. Without a key the same tampering goes
through: CRC-32C and checksums guard against accidents, not against an attacker."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from stateengine import (CorruptionError, KeyedStateBackend, ValueStateDescriptor, _native,
                         load_handle)
from stateengine.checkpoint import documents
from stateengine.cli import main as cli
from tests.campaigns.checkpoints import KINDS, VALUE, StoreVersions, build_all
from tests.campaigns.mutations import resealed, rewrite

KEY = b"correct horse battery staple"


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("signed"))
    return build_all(base, hmac_key=KEY), os.path.join(base, "scratch")


def _documents(root):
    return [os.path.join(d, n) for d, _, ns in os.walk(root) for n in ns if n.endswith(".json")]


@pytest.mark.parametrize("kind", list(KINDS))
def test_signed_checkpoints_carry_hmacs_and_file_digests(signed, kind):
    roots, scratch = signed
    for path in _documents(roots[kind]):
        doc = json.loads(open(path, "rb").read())
        assert len(doc["hmac"]) == 64 and doc["format"] == 2
        for f in doc.get("shared", []) + doc.get("private", []) + \
                ([doc["file"]] if "file" in doc else []):
            assert len(f["sha256"]) == 64
    with_key = KINDS[kind].load(roots[kind], scratch, hmac_key=KEY)
    assert KINDS[kind].load(roots[kind], scratch) == with_key  # a reader without a key
    with pytest.raises(CorruptionError, match="HMAC"):
        KINDS[kind].load(roots[kind], scratch, hmac_key=b"another key")


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_document_without_hmac_is_refused(signed, kind):
    roots, scratch = signed
    for path in _documents(roots[kind]):
        original = open(path, "rb").read()
        rewrite(path, resealed(original, lambda d: d.pop("hmac", None)))  # valid checksum
        try:
            with pytest.raises(CorruptionError, match="no HMAC"):
                _load(kind, roots[kind], scratch, os.path.relpath(path, roots[kind]))
        finally:
            rewrite(path, original)


def _load(kind, root, scratch, rel):
    """Loads the way a reader of rel does (version 1's files only when asking for it)."""
    if kind == "store":
        return KINDS[kind].load(root, scratch, hmac_key=KEY,
                                version=StoreVersions.version_read_for(rel))
    return KINDS[kind].load(root, scratch, hmac_key=KEY)


def _tampered_snapshot(tmp_path, root):
    """An attacker's version of the full snapshot: key 5 holds 999 instead of 36; handle
    updated to match (offsets, size, CRC-32C, SHA-256) and resealed without the key."""
    handle = load_handle(root, "snap.handle.json")
    b = KeyedStateBackend.restore(tmp_path / "attacker", [handle])
    b.set_current_key(5)
    b.get_state(VALUE).update(999)
    forged = b.snapshot(tmp_path / "forged", "snap").result()
    b.dispose()
    shutil.copyfile(tmp_path / "forged" / "snap", os.path.join(root, "snap"))
    shutil.copyfile(tmp_path / "forged" / "snap.opstate", os.path.join(root, "snap.opstate"))
    path = os.path.join(root, "snap.handle.json")
    original = open(path, "rb").read()
    doc = json.loads(original)
    new = json.loads(open(tmp_path / "forged" / "snap.handle.json", "rb").read())
    for field in ("file", "offsets", "meta_length", "operator_state"):
        doc[field] = new[field]
    doc["file"]["sha256"] = hashlib.sha256(open(os.path.join(root, "snap"), "rb").read()).hexdigest()
    doc.pop("hmac")
    rewrite(path, documents.dumps(documents.seal(doc, None)))
    return doc


def test_tampering_with_recomputed_crcs_and_checksums(tmp_path):
    roots = build_all(str(tmp_path / "cp"), hmac_key=KEY)
    root = roots["full"]
    _tampered_snapshot(tmp_path, root)
    # without a key the forgery is indistinguishable from a genuine snapshot
    b = KeyedStateBackend.restore(tmp_path / "r", [load_handle(root, "snap.handle.json")])
    b.set_current_key(5)
    assert b.get_state(VALUE).value() == 999
    b.dispose()
    # with the key it is refused, whatever the CRCs and checksums say
    with pytest.raises(CorruptionError, match="snap.handle.json.*HMAC|no HMAC"):
        KINDS["full"].load(root, str(tmp_path / "s2"), hmac_key=KEY)
    # and a forged HMAC with another key fails as well
    path = os.path.join(root, "snap.handle.json")
    rewrite(path, resealed(open(path, "rb").read(), lambda d: None, key=b"attacker's key"))
    with pytest.raises(CorruptionError, match="HMAC"):
        KINDS["full"].load(root, str(tmp_path / "s3"), hmac_key=KEY)
    assert cli(["verify", root, "--handle", "snap.handle.json", "--key-file",
                _key_file(tmp_path)]) == 1


def _key_file(tmp_path):
    path = tmp_path / "key"
    path.write_bytes(KEY + b"\n")
    return str(path)


def forge_same_crc(data: bytes, change_at: int, new_byte: int, fix_at: int) -> bytes:
    """data with data[change_at] = new_byte and four bytes at fix_at chosen so that the
    CRC-32C stays what it was (CRC is affine in the message bits: solve over GF(2))."""
    want = _native.crc32c(data)
    out = bytearray(data)
    out[change_at] = new_byte
    base = _native.crc32c(bytes(out))
    columns = []
    for i in range(32):
        probe = bytearray(out)
        probe[fix_at + i // 8] ^= 1 << (i % 8)
        columns.append(_native.crc32c(bytes(probe)) ^ base)
    # Gaussian elimination: find bits whose columns XOR to base ^ want
    rows = [(col, 1 << i) for i, col in enumerate(columns)]
    basis: dict[int, tuple[int, int]] = {}
    for col, mask in rows:
        for bit in sorted(basis, reverse=True):
            if col >> bit & 1:
                col ^= basis[bit][0]
                mask ^= basis[bit][1]
        if col:
            basis[col.bit_length() - 1] = (col, mask)
    target, chosen = base ^ want, 0
    for bit in sorted(basis, reverse=True):
        if target >> bit & 1:
            target ^= basis[bit][0]
            chosen ^= basis[bit][1]
    assert target == 0, "the 32 bits span every CRC difference"
    for i in range(32):
        if chosen >> i & 1:
            out[fix_at + i // 8] ^= 1 << (i % 8)
    assert _native.crc32c(bytes(out)) == want and bytes(out) != data
    return bytes(out)


@pytest.mark.parametrize("kind", ["incremental", "store"])
def test_a_file_changed_behind_its_crc_is_caught_by_its_sha256(tmp_path, kind):
    roots = build_all(str(tmp_path / "cp"), hmac_key=KEY)
    root = roots[kind]
    victim = next(os.path.join(d, n) for d, _, ns in sorted(os.walk(root)) for n in ns
                  if n == "operator-state.bin" and "/v1/" not in d)  # the version read
    data = open(victim, "rb").read()
    rewrite(victim, forge_same_crc(data, len(data) - 1, data[-1] ^ 0x01, 0))
    with pytest.raises(CorruptionError, match="operator-state.bin.*SHA-256"):
        KINDS[kind].load(root, str(tmp_path / "s"), hmac_key=KEY)


def test_the_key_can_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(documents.KEY_ENV, KEY.decode())
    roots = build_all(str(tmp_path / "cp"))
    manifest = json.loads(open(os.path.join(roots["store"], "op/v2/p00000-of-00001.json")).read())
    assert "hmac" in manifest
    assert KINDS["store"].load(roots["store"], str(tmp_path / "s1"))["version"] == 2
    assert cli(["verify", roots["store"], "--operator", "op"]) == 0
    monkeypatch.setenv(documents.KEY_ENV, "wrong")
    with pytest.raises(CorruptionError, match="HMAC"):
        KINDS["store"].load(roots["store"], str(tmp_path / "s2"))
    assert cli(["verify", roots["store"], "--operator", "op"]) == 1
    monkeypatch.delenv(documents.KEY_ENV)
    assert cli(["verify", roots["store"], "--operator", "op"]) == 0
    assert cli(["verify", roots["store"], "--operator", "op", "--key-file",
                _key_file(tmp_path)]) == 0


def test_handle_dicts_are_authenticated_too(tmp_path):
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    b.set_current_key(1)
    b.get_state(ValueStateDescriptor("v", int)).update(7)
    handle = b.snapshot(tmp_path / "cp", "s", hmac_key=KEY).result()
    b.dispose()
    d = handle.to_dict(hmac_key=KEY)
    KeyedStateBackend.restore(tmp_path / "r1", [d], hmac_key=KEY).dispose()
    d["offsets"] = {}  # every key group dropped: the seal no longer fits
    with pytest.raises(CorruptionError, match="checksum"):
        KeyedStateBackend.restore(tmp_path / "r2", [d], hmac_key=KEY)
    unsigned = handle.to_dict()
    with pytest.raises(CorruptionError, match="no HMAC"):
        KeyedStateBackend.restore(tmp_path / "r3", [unsigned], hmac_key=KEY)


def test_dump_and_stats_read_a_keyed_checkpoint_with_the_key_file(tmp_path, capsys):
    roots = build_all(str(tmp_path / "cp"), hmac_key=KEY)
    root = roots["store"]
    key_file = _key_file(tmp_path)
    capsys.readouterr()
    assert cli(["dump", root, "--operator", "op", "--state", "value", "--key-file", key_file]) == 0
    assert capsys.readouterr().out.strip()
    assert cli(["dump", root, "--operator", "op", "--timers", "--key-file", key_file]) == 0
    assert cli(["stats", root, "--operator", "op", "--key-file", key_file]) == 0
