"""State several times larger than the memory budget is written and read back correctly,
while the shared block cache (which memtables are charged to) stays near the budget."""

from __future__ import annotations

import numpy as np
import pytest

import stateengine
from stateengine import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

MiB = 1 << 20
BUDGET = 16 * MiB
DEFAULT_BUDGET = 256 * MiB
SLACK = 4 * MiB  # cache shards and pinned index/filter blocks may overshoot a little
VALUE_SIZE = 32 * 1024
KEYS = 1800  # 5 values of 32, 16, 11, 8 and 6.4 KiB per key: 1800 keys hold ~130 MiB


@pytest.fixture
def small_budget():
    stateengine.configure_memory(BUDGET)
    yield
    stateengine.configure_memory(DEFAULT_BUDGET)


def payload(key: int, salt: int) -> bytes:
    """Incompressible bytes that can be regenerated from (key, salt) to check a read."""
    size = VALUE_SIZE // (1 + salt)
    return np.random.default_rng([key, salt]).bytes(size)


def test_configure_memory_sets_the_shared_budget(small_budget):
    usage = stateengine.memory_usage()
    assert usage["budget"] == BUDGET and usage["write_buffer_ratio"] == 0.5
    with pytest.raises(ValueError, match="4 MiB"):
        stateengine.configure_memory(MiB)
    with pytest.raises(ValueError, match="write_buffer_ratio"):
        stateengine.configure_memory(BUDGET, 0.99)


def test_state_larger_than_the_budget(small_budget, make_backend):
    backend = make_backend(key_type=int)
    value = backend.get_state(ValueStateDescriptor("blob", value_type=bytes))
    chunks = backend.get_state(ListStateDescriptor("chunks", value_type=bytes))
    parts = backend.get_state(MapStateDescriptor("parts", user_key_type=int, value_type=bytes))
    written = 0
    peak_cache = 0
    for key in range(KEYS):
        backend.set_current_key(key)
        value.update(payload(key, 0))
        chunks.add_all([payload(key, 1), payload(key, 2)])
        parts.put_all({0: payload(key, 3), 1: payload(key, 4)})
        written += sum(len(payload(key, s)) for s in range(5))
        if key % 100 == 0:
            peak_cache = max(peak_cache, stateengine.memory_usage()["cache"])
    assert written > 6 * BUDGET, written

    read = 0
    for key in list(range(0, KEYS, 7)) + list(range(KEYS - 1, -1, -13)):
        backend.set_current_key(key)
        assert value.value() == payload(key, 0)
        assert chunks.get() == [payload(key, 1), payload(key, 2)]
        assert dict(parts.entries()) == {0: payload(key, 3), 1: payload(key, 4)}
        read += 1
        if key % 50 == 0:
            peak_cache = max(peak_cache, stateengine.memory_usage()["cache"])
    assert read > 300
    assert backend.num_state_entries() == 4 * KEYS
    assert sorted(backend.get_keys("blob")) == list(range(KEYS))
    usage = stateengine.memory_usage()
    assert usage["budget"] == BUDGET
    assert peak_cache <= BUDGET + SLACK, f"cache grew to {peak_cache / MiB:.1f} MiB"
    assert usage["memtables"] <= BUDGET // 2 + SLACK
    backend.dispose()  # ~200 MB of SST files: do not leave them in pytest's retained tmp dirs


def test_a_share_of_the_budget_is_reserved_for_memory_outside_the_cache():
    try:
        stateengine.configure_memory(64 * MiB)
        assert stateengine.memory_usage()["cache_capacity"] == 44 * MiB  # 5/16 reserved
        stateengine.configure_memory(1024 * MiB)
        assert stateengine.memory_usage()["cache_capacity"] == 1004 * MiB  # at most 20 MiB
    finally:
        stateengine.configure_memory(DEFAULT_BUDGET)


def test_cached_blocks_live_in_slabs_that_track_the_cache_charge(small_budget, make_backend):
    """Under cache churn the resident memory of cached blocks stays within what the cache is
    charged, instead of drifting away from it as heap fragmentation would."""
    backend = make_backend()
    blob = backend.get_state(ValueStateDescriptor("blob", value_type=bytes))
    keys = np.arange(6000, dtype=np.int64)
    values = np.array([np.random.default_rng(int(k)).bytes(2000) for k in keys], dtype=object)
    blob.put_many(keys, values)
    backend._native_flush()
    for round_ in range(3):  # random reads of ~12 MiB of state through a ~12 MiB cache
        got, found = blob.get_many(np.random.default_rng(round_).permutation(keys))
        assert found.all()
    usage = stateengine.memory_usage()
    assert usage["cache_blocks"] > 0
    assert usage["cache_blocks"] <= usage["cache_capacity"] + 2 * MiB


def test_reads_past_the_cache_reuse_a_spare_slab(make_backend):
    """Scans read blocks without caching them (fill_cache off): each is allocated, decoded and
    freed. Where no cached block shares its size class, the allocator keeps that class's last
    slab as a spare instead of unmapping it when the block is freed and mapping (and faulting
    in) a new one for the next block."""
    from stateengine import _native

    backend = make_backend(key_type=int)
    blob = backend.get_state(ValueStateDescriptor("blob", value_type=bytes))
    keys = np.arange(400, dtype=np.int64)
    # ~45 KiB a value, compressible: one value per block, decoded into a 48 KiB slot
    blob.put_many(keys, np.array([b"%06d" % k * 7600 for k in keys], dtype=object))
    backend._native_flush()
    before = _native._cache_slabs_mapped()
    assert sorted(backend.get_keys("blob")) == keys.tolist()  # a scan: ~400 blocks
    assert _native._cache_slabs_mapped() - before < 16
    backend.dispose()
