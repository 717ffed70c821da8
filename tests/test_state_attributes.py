"""State attributes (meta fields beyond the fixed ones: a value schema, a TTL setting...) persist
through full snapshots (meta block format 3) and incremental manifests (sealed JSON), and are
validated generically on the way in: string keys that are not fixed fields, plain JSON values.
What an attribute means is for the feature that adds it to check; this file only fixes the
envelope, so the attribute names used below stand for those features.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from stateengine import CorruptionError, KeyedStateBackend, ValueStateDescriptor
from stateengine.checkpoint import documents as docs
from stateengine.checkpoint.handles import decode_handle, encode_handle
from stateengine.checkpoint.meta import (FIXED_STATE_FIELDS, SnapshotMeta, check_attributes,
                                         check_state_entry)

ATTRS = {"value_schema": {"fields": [{"name": "n", "type": "bigint"}]},
         "user_key_schema": "string", "ttl": {"millis": 60000, "update": "on_write"}}


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


def _meta(**attrs) -> dict:
    meta = ValueStateDescriptor("s", int).meta()
    meta.update(attrs)
    return meta


def _backend_with_attributes(path) -> KeyedStateBackend:
    """A backend holding state 's' whose meta carries ATTRS (as a restore of a checkpoint
    written by a typed/TTL-aware version would create it)."""
    b = KeyedStateBackend(path, key_type=int)
    cf = b.restored_column_family(_meta(**ATTRS), "test")
    state = b.get_state(ValueStateDescriptor("t", int))
    for k in range(10):
        b.set_current_key(k)
        state.update(k)
    assert cf == b.column_family("s")
    return b


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_attributes_survive_snapshots_and_checkpoints(tmp_path, kind):
    b = _backend_with_attributes(tmp_path / "b")
    try:
        handle = (b.snapshot(tmp_path / "ck", "snap") if kind == "full"
                  else b.checkpoint(1, tmp_path / "ck")).result()
    finally:
        b.dispose()
    restored = KeyedStateBackend.restore(tmp_path / "r", [handle])
    try:
        assert restored.state_meta("s") == _meta(**ATTRS)
        assert {k: v for k, v in restored.state_meta("t").items()
                if k not in FIXED_STATE_FIELDS} == {}
    finally:
        restored.dispose()


def test_the_manifest_seal_covers_attributes(tmp_path):
    b = _backend_with_attributes(tmp_path / "b")
    try:
        handle = b.checkpoint(1, tmp_path / "ck").result()
    finally:
        b.dispose()
    data = encode_handle(handle, None)
    doc = json.loads(data)
    doc["states"][0]["ttl"]["millis"] = 1  # seal left as it was
    with pytest.raises(CorruptionError, match="fails its checksum"):
        decode_handle(json.dumps(doc).encode(), str(tmp_path / "ck"), "m.json", None)


@pytest.mark.parametrize("bad,why", [
    ({"ttl": float("nan")}, "JSON cannot represent"),
    ({"ttl": {"a": [float("inf")]}}, "JSON cannot represent"),
    ({"ttl": {1: 2}}, "not a string"),
    ({"": 1}, "not a non-empty string"),
    ({"ttl": (1, 2)}, "not a JSON value"),
    ({"ttl": {1, 2}}, "not a JSON value"),
    ({"ttl": b"x"}, "not a JSON value"),
    ({"ttl": _nested(40)}, "deeper"),
])
def test_attribute_values_must_be_plain_json(bad, why):
    with pytest.raises(ValueError, match=why):
        check_attributes(bad, "state entry 0")


def test_attribute_keys_the_coming_features_use_are_accepted():
    check_state_entry(_meta(**ATTRS), "state entry 0")
    check_attributes({"ttl": _nested(30)}, "state entry 0")
    check_state_entry(_meta(ttl=None, value_schema="a", user_key_schema=[1, 2.5, True]), "e")


def _sealed_manifest_with(tmp_path, change) -> bytes:
    """The sealed manifest of a checkpoint with ATTRS, changed and resealed: a writer's bug
    or a hostile writer, which only field validation can catch."""
    b = _backend_with_attributes(tmp_path / "b")
    try:
        handle = b.checkpoint(1, tmp_path / "ck").result()
    finally:
        b.dispose()
    doc = json.loads(encode_handle(handle, None))
    change(doc["states"][0])
    return docs.dumps(docs.seal(doc, None))


@pytest.mark.parametrize("change", [
    lambda s: s.update(ttl=_nested(40)),
    lambda s: s.update(kind="ttl"),
    lambda s: s.update(kind={"bytes": 7}),  # unhashable (found by the documents_py fuzzer)
    lambda s: s.update(kind=["value"]),
    lambda s: s.update(value_codec=99),
    lambda s: s.update({"": 1}),
])
def test_invalid_attributes_behind_a_valid_checksum_are_corruption(tmp_path, change):
    data = _sealed_manifest_with(tmp_path, change)
    with pytest.raises(CorruptionError, match="m.json"):
        decode_handle(data, str(tmp_path / "ck"), "m.json", None)


@pytest.mark.parametrize("number", [b"NaN", b"1e999", b"-1e400"])
def test_a_non_finite_number_in_a_document_is_corruption_not_a_raw_error(tmp_path, number):
    # 1e999 is valid JSON that parses as infinity (found by tests/fuzz documents_py)
    data = _sealed_manifest_with(tmp_path, lambda s: None)
    damaged = data.replace(b'"millis":60000', b'"millis":' + number)
    with pytest.raises(CorruptionError, match="m.json"):
        decode_handle(damaged, str(tmp_path / "ck"), "m.json", None)


def test_meta_block_refuses_attributes_that_are_no_plain_json():
    meta = SnapshotMeta(128, (2,), False, True, [_meta(ttl=1)])
    data = meta.encode()
    for bad in (b'{"ttl":NaN}', b'{"ttl":Infinity}', b'{"ttl":1e999}', b'{"ttl":' + b"[" * 40 + b"]" * 40 + b"}"):
        blob = bytearray(data.replace(b'{"ttl":1}', bad))
        at = data.index(b'{"ttl":1}') - 4
        blob[at:at + 4] = len(bad).to_bytes(4, "big")
        blob[6:10] = (int.from_bytes(data[6:10], "big") + len(bad) - 9).to_bytes(4, "big")
        with pytest.raises(CorruptionError, match="corrupted meta block"):
            SnapshotMeta.decode(bytes(blob))
    with pytest.raises(ValueError):  # never written: a reader would refuse it
        dataclasses.replace(meta, states=[_meta(ttl=float("nan"))]).encode()
