"""Bloom filters of the bottommost level: off by default (optimize_filters_for_hits), on after
configure_bloom_filters(True). Checked in the OPTIONS file RocksDB persists for each column
family, and by reading present and absent keys from a compacted state either way."""

import glob
import os

import numpy as np
import pytest

import stateengine
from stateengine import KeyedStateBackend, MapStateDescriptor, ValueStateDescriptor


@pytest.fixture
def restore_default():
    yield
    stateengine.configure_bloom_filters(False)


def persisted_options(path: str) -> dict[str, dict[str, str]]:
    """{column family: {option: value}} from the newest OPTIONS file of a backend."""
    newest = max(glob.glob(os.path.join(path, "**", "OPTIONS-*"), recursive=True),
                 key=lambda f: int(f.rsplit("-", 1)[1]))
    out: dict[str, dict[str, str]] = {}
    cf = None
    for line in open(newest):
        line = line.strip()
        if line.startswith("[CFOptions "):
            cf = line.split('"')[1]
            out[cf] = {}
        elif line.startswith("["):
            cf = None
        elif cf is not None and "=" in line:
            k, v = line.split("=", 1)
            out[cf][k] = v
    return out


VALUE = ValueStateDescriptor("value", value_type=int, default=-1)
ENTRIES = MapStateDescriptor("entries", user_key_type=int, value_type=int)


def filled_backend(path: str) -> KeyedStateBackend:
    backend = KeyedStateBackend(path, key_type=int)
    value, entries = backend.get_state(VALUE), backend.get_state(ENTRIES)
    keys = np.arange(0, 40_000, 2, dtype=np.int64)   # even keys only: odd ones are misses
    value.put_many(keys, keys * 3)
    entries.put_many(keys, keys + 1, keys)
    backend._native_flush()
    backend._native_compact()
    return backend


@pytest.mark.parametrize("bottommost", [False, True])
def test_setting_reaches_every_state_and_lookups_agree(tmp_path, restore_default, bottommost):
    stateengine.configure_bloom_filters(bottommost)
    backend = filled_backend(str(tmp_path / "db"))
    try:
        options = persisted_options(str(tmp_path / "db"))
        for name in ("value", "entries"):
            assert options[name]["optimize_filters_for_hits"] == ("false" if bottommost else "true")
        value, entries = backend.get_state(VALUE), backend.get_state(ENTRIES)
        probe = np.arange(0, 2_000, dtype=np.int64)
        got, found = value.get_many(probe)
        assert found.tolist() == [k % 2 == 0 for k in range(2_000)]
        assert got[found].tolist() == (probe[found] * 3).tolist()
        for k in (0, 1, 1234, 1235, 39_998, 39_999, 50_000):
            backend.set_current_key(k)
            assert value.value() == (k * 3 if k % 2 == 0 and k < 40_000 else -1)
            assert entries.contains(k + 1) == (k % 2 == 0 and k < 40_000)
            assert not entries.contains(k)
    finally:
        backend.close()


def test_the_setting_applies_to_backends_opened_after_it(tmp_path, restore_default):
    before = filled_backend(str(tmp_path / "before"))
    stateengine.configure_bloom_filters(True)
    after = filled_backend(str(tmp_path / "after"))
    try:
        assert persisted_options(str(tmp_path / "before"))["value"]["optimize_filters_for_hits"] \
            == "true"
        assert persisted_options(str(tmp_path / "after"))["value"]["optimize_filters_for_hits"] \
            == "false"
    finally:
        before.close()
        after.close()


def sst_filter_blocks(path: str) -> list[bool]:
    """For each SST file of a backend: whether its meta-index names a full Bloom filter block
    (meta-index blocks are never compressed, so the name is in the file's bytes)."""
    files = glob.glob(os.path.join(path, "**", "*.sst"), recursive=True)
    assert files
    return [b"fullfilter." in open(f, "rb").read() for f in files]


@pytest.mark.parametrize("bottommost", [False, True])
def test_restored_files_follow_the_setting(tmp_path, restore_default, bottommost):
    """A full snapshot is restored into SST files of the bottommost level: they carry a filter
    exactly when that level is configured to use one (lookups skip the last level's filters
    otherwise, so building them would be wasted)."""
    stateengine.configure_bloom_filters(bottommost)
    source = filled_backend(str(tmp_path / "db"))
    handle = source.snapshot(tmp_path / "snap", "full").result()
    source.close()
    restored = KeyedStateBackend.restore(str(tmp_path / "restored"), [handle])
    try:
        assert set(sst_filter_blocks(str(tmp_path / "restored"))) == {bottommost}
        value = restored.get_state(VALUE)
        got, found = value.get_many(np.arange(0, 1_000, dtype=np.int64))
        assert found.tolist() == [k % 2 == 0 for k in range(1_000)]
        assert got[found].tolist() == [k * 3 for k in range(0, 1_000, 2)]
    finally:
        restored.close()
