"""Dense batch reads walk one RocksDB iterator instead of sorted MultiGets (csrc/batch_ops.cc,
DenseRead), and a put_many of the keys a get_many just read reuses their built batch.

Two backends get the same randomised history (several column families, a partial key-group
range, overwrites, deletes, merge operands, a range tombstone, TTL entries that expire, data
spread over flushed tables and the memtable); then one reads every batch with MultiGets and
the other with the iterator. Both must return the same values and, after TTL reads clean up
and restamp entries, hold the same bytes.
"""

from __future__ import annotations

import numpy as np
import pytest

from stateengine import (CorruptionError, KeyGroupRange, ListStateDescriptor, MapStateDescriptor,
                         ReducingStateDescriptor, StateTtlConfig, ValueStateDescriptor, _native,
                         reducers)

STRUCT = "count long, total double"
TTL = 100
T0 = 1_000_000


@pytest.fixture
def read_mode():
    """Sets the process-wide batch read mode; restores "auto" afterwards."""
    yield _native._set_batch_read_mode
    _native._set_batch_read_mode("auto")


def descriptors():
    return [ValueStateDescriptor("acc", value_type=STRUCT),
            ValueStateDescriptor("n", value_type="long"),
            ValueStateDescriptor("t", value_type="long", ttl=StateTtlConfig(TTL)),
            ValueStateDescriptor("tr", value_type="long",
                                 ttl=StateTtlConfig(TTL, StateTtlConfig.UpdateType.OnReadAndWrite)),
            ReducingStateDescriptor("sum", reducers.SUM, value_type="long"),
            ListStateDescriptor("l", value_type="long"),
            MapStateDescriptor("m", user_key_type="long", value_type="double")]


def build_history(make_backend, seed: int):
    """A backend with a history drawn from seed, its states, and the keys it may hold."""
    rng = np.random.default_rng(seed)
    backend = make_backend(key_group_range=KeyGroupRange(40, 90))
    states = {d.name: backend.get_state(d) for d in descriptors()}
    candidates = np.arange(-3000, 3000, dtype=np.int64)
    kgs = np.array([backend.key_group_of(int(k)) for k in candidates])
    keys = candidates[(kgs >= 40) & (kgs <= 90)]
    now = T0
    for rnd in range(5):
        backend.set_ttl_time(now)
        for name in ("acc", "n", "t", "tr", "sum", "l", "m"):
            ks = rng.choice(keys, size=int(len(keys) * rng.uniform(0.1, 0.8)))  # duplicates too
            if name == "acc":
                states[name].put_many(ks, {"count": rng.integers(0, 9, len(ks)),
                                           "total": rng.uniform(0, 1, len(ks))})
            elif name in ("n", "t", "tr"):
                vals = rng.integers(-5, 5, len(ks)).astype(object)
                vals[rng.random(len(ks)) < 0.2] = None  # a put of None deletes
                states[name].put_many(ks, vals)
            elif name == "sum":
                states[name].add_many(ks, rng.integers(1, 5, len(ks)))  # merge operands
            elif name == "l":
                states[name].add_many(ks, rng.integers(0, 100, len(ks)))
            else:
                states[name].put_many(ks, rng.integers(0, 4, len(ks)), rng.uniform(0, 1, len(ks)))
        if rnd == 2:  # a range tombstone over key groups 50 and 51 of the plain value state
            backend._native_delete_range(states["n"].column_family, bytes([50]), bytes([52]))
        if rnd == 3:
            backend._native_compact()
        elif rnd < 4:
            backend._native_flush()  # an L0 table per round; the last round stays in memtables
        now += rng.integers(10, 60)
    backend.set_ttl_time(now + 30)  # some TTL entries have expired, others not
    return backend, states, keys


def found_values(values, found):
    """The values of found rows (None elsewhere: a default may be NaN, unequal to itself)."""
    values = values.to_pylist() if hasattr(values, "to_pylist") else values.tolist()
    return [v if f else None for v, f in zip(values, found.tolist())], found.tolist()


def read_everything(states, batch):
    out = {}
    for name, s in states.items():
        if name == "m":
            out[name] = found_values(*s.get_many(batch, np.arange(len(batch)) % 4))
        elif name == "l":
            out[name] = s.get_many(batch)
        else:
            out[name] = found_values(*s.get_many(batch))
    return out


def batches(rng, keys, key_group_of):
    """Batches of keys of the backend's key groups: dense and sparse, sorted and not."""
    unwritten = [k for k in range(5000, 5200) if 40 <= key_group_of(k) <= 90]
    everything = np.concatenate([keys, np.array(unwritten, dtype=np.int64)])
    yield "dense, sorted", np.sort(everything)
    yield "dense, shuffled with duplicates", rng.permutation(np.concatenate([everything, everything[:500]]))
    yield "sparse", rng.choice(everything, 7)
    yield "one key", everything[:1]
    yield "half", rng.choice(everything, len(everything) // 2, replace=False)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_iterator_reads_what_multiget_reads(make_backend, read_mode, seed):
    a, sa, keys = build_history(make_backend, seed)
    b, sb, _ = build_history(make_backend, seed)
    for label, batch in batches(np.random.default_rng(seed), keys, a.key_group_of):
        read_mode("point")
        expected = read_everything(sa, batch)
        read_mode("scan")
        got = read_everything(sb, batch)
        for name in expected:
            assert got[name] == expected[name], (label, name)
        # TTL reads cleaned up expired entries and restamped read ones alike
        for name, s in sa.items():
            assert a._raw_scan(s.column_family) == b._raw_scan(sb[name].column_family), (label, name)


def test_auto_mode_reads_what_multiget_reads(make_backend, read_mode):
    a, sa, keys = build_history(make_backend, 7)
    b, sb, _ = build_history(make_backend, 7)
    for label, batch in batches(np.random.default_rng(7), keys, a.key_group_of):
        read_mode("point")
        expected = read_everything(sa, batch)
        read_mode("auto")
        assert read_everything(sb, batch) == expected, label


def test_a_scan_sees_writes_not_yet_flushed_and_tombstones_over_flushed_values(make_backend, read_mode):
    backend = make_backend()
    v = backend.get_state(ValueStateDescriptor("v", value_type="long"))
    keys = np.arange(2000, dtype=np.int64)
    v.put_many(keys, keys * 10)
    backend._native_flush()
    v.put_many(keys[::3], np.full(len(keys[::3]), None, dtype=object))  # deletes in the memtable
    v.put_many(keys[1::3], keys[1::3] * 100)  # overwrites in the memtable
    read_mode("scan")
    values, found = v.get_many(keys)
    expected = np.where(keys % 3 == 1, keys * 100, keys * 10)
    assert found.tolist() == (keys % 3 != 0).tolist()
    assert values[found].tolist() == expected[keys % 3 != 0].tolist()


def test_an_unknown_read_mode_is_refused():
    with pytest.raises(ValueError, match="one of auto, point, scan"):
        _native._set_batch_read_mode("dense")


# ---- put_many after get_many of the same keys --------------------------------------------

def test_put_after_get_of_keys_changed_in_place_writes_the_new_keys(backend):
    acc = backend.get_state(ValueStateDescriptor("acc", value_type=STRUCT))
    keys = np.arange(100, dtype=np.int64)
    acc.get_many(keys)
    keys[:50] += 1000  # the same array object, other keys
    acc.put_many(keys, {"count": np.ones(100, dtype=np.int64), "total": np.zeros(100)})
    values, found = acc.get_many(np.arange(1100, dtype=np.int64))
    assert np.flatnonzero(found).tolist() == list(range(50, 100)) + list(range(1000, 1050))


def test_put_after_get_on_another_state_or_namespace_writes_its_own_keys(backend):
    a = backend.get_state(ValueStateDescriptor("a", value_type="long", namespace_type=str))
    b = backend.get_state(ValueStateDescriptor("b", value_type="long"))
    keys = np.arange(10, dtype=np.int64)
    a.set_current_namespace("window-1")
    a.get_many(keys)
    b.put_many(keys, keys)  # another state, right after a's get of the same keys
    a.get_many(keys)
    a.set_current_namespace("window-2")
    a.put_many(keys, keys + 2)  # another namespace, right after a get of the same keys
    assert a.get_many(keys)[0].tolist() == (keys + 2).tolist()
    a.set_current_namespace("window-1")
    assert not a.get_many(keys)[1].any()
    assert b.get_many(keys)[0].tolist() == keys.tolist()
    assert b.get_many(keys)[1].all()


def test_sorted_and_shuffled_keys_with_duplicates_write_the_same_bytes(make_backend):
    rng = np.random.default_rng(3)
    keys = np.repeat(np.arange(-500, 500, dtype=np.int64), 2)  # sorted by value, each twice
    vals = np.arange(len(keys), dtype=np.int64)
    sorted_backend, shuffled_backend = make_backend(), make_backend()
    s1 = sorted_backend.get_state(ValueStateDescriptor("v", value_type="long"))
    s2 = shuffled_backend.get_state(ValueStateDescriptor("v", value_type="long"))
    s1.put_many(keys, vals)  # the last row of a key wins: its second
    perm = rng.permutation(len(keys))
    # shuffled, but each key's second row stays after its first
    order = sorted(range(len(keys)), key=lambda i: (perm[i - i % 2], i % 2))
    s2.put_many(keys[order], vals[order])
    assert sorted_backend._raw_scan(s1.column_family) == shuffled_backend._raw_scan(s2.column_family)
    values, _ = s1.get_many(np.arange(-500, 500, dtype=np.int64))
    assert values.tolist() == vals[1::2].tolist()


@pytest.mark.parametrize("seed", [1, 2])
def test_struct_batch_reads_return_what_scalar_reads_return(make_backend, read_mode, seed):
    """A struct of fixed-width fields is decoded as the batch read meets each value
    (ReadBatchToArrow, with no copy of the values in between): in either read mode, over
    memtable, tables and a compacted level, with duplicates and keys that hold nothing, a
    batch returns what value() returns key by key."""
    backend, states, keys = build_history(make_backend, seed)
    acc = states["acc"]
    for mode in ("point", "scan"):
        read_mode(mode)
        for label, batch in batches(np.random.default_rng(seed), keys, backend.key_group_of):
            values, found = acc.get_many(batch)
            expected = []
            for k in batch.tolist():
                backend.set_current_key(k)
                v = acc.value()
                expected.append(None if v is None else {"count": v[0], "total": v[1]})
            assert found.tolist() == [e is not None for e in expected], (mode, label)
            assert [v if f else None for v, f in zip(values.to_pylist(), found.tolist())] \
                == expected, (mode, label)


def test_struct_batch_reads_fill_defaults_keep_null_fields_and_name_a_corrupt_row(backend):
    d = backend.get_state(ValueStateDescriptor("d", value_type="a long, b double NOT NULL",
                                               default=(-1, 0.5)))
    d.put_many([1, 2], {"a": [None, 7], "b": [1.5, 2.5]})
    values, found = d.get_many([3, 2, 1, 3])
    assert values.to_pylist() == [{"a": -1, "b": 0.5}, {"a": 7, "b": 2.5},
                                  {"a": None, "b": 1.5}, {"a": -1, "b": 0.5}]
    assert found.tolist() == [False, True, True, False]
    values.validate(full=True)
    backend.set_current_key(4)
    d._raw_put_in(b"\x02" + b"\x00" * 8)  # b, NOT NULL, marked null
    with pytest.raises(CorruptionError, match="row 1"):
        d.get_many([1, 4])
    assert d.get_many([1])[0].to_pylist() == [{"a": None, "b": 1.5}]
