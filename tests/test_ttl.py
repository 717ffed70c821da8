"""State TTL (Flink's StateTtlConfig): expiry per entry against the caller's clock, update types,
visibility, cleanup on read, batch == scalar, iteration, Flink's stored layout, full snapshots
leaving expired entries out, restore and rescaling with timestamps, the compaction filter, and
turning TTL on or off for existing state being refused."""

from __future__ import annotations

import datetime
import glob
import os
import struct

import numpy as np
import pytest

from stateengine import (AggregateFunction, AggregatingStateDescriptor, IncompatibleStateError,
                         KeyedStateBackend, KeyGroupRange, ListStateDescriptor,
                         MapStateDescriptor, ReducingStateDescriptor, SortedMapStateDescriptor,
                         StateRegistrationError, StateTtlConfig, TtlTimeNotSetError,
                         ValueStateDescriptor, aggregates, reducers)

TTL = 100
T0 = 1_000_000
CREATE = StateTtlConfig(TTL)
READ = StateTtlConfig(TTL, StateTtlConfig.UpdateType.OnReadAndWrite)
RETURN_EXPIRED = StateTtlConfig(TTL, state_visibility="ReturnExpiredIfNotCleanedUp")


def stamp(ms: int) -> bytes:
    return struct.pack(">q", ms)


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


# ---- configuration -------------------------------------------------------------------------

def test_config_builder_and_dataclass_agree():
    built = (StateTtlConfig.new_builder(datetime.timedelta(seconds=2))
             .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
             .set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
             .cleanup_in_rocksdb_compact_filter(1000).build())
    assert built == StateTtlConfig(2000, "OnReadAndWrite", "ReturnExpiredIfNotCleanedUp")
    assert built.update_on_read and built.return_expired
    assert StateTtlConfig(5) == StateTtlConfig.new_builder(5).build()


@pytest.mark.parametrize("ttl", [0, -1, 1.5, "1s", True])
def test_a_ttl_must_be_positive_milliseconds(ttl):
    with pytest.raises(StateRegistrationError, match="TTL"):
        StateTtlConfig(ttl)


def test_a_descriptor_takes_only_a_ttl_config():
    with pytest.raises(StateRegistrationError, match="StateTtlConfig"):
        ValueStateDescriptor("v", ttl=100)


def test_meta_carries_the_ttl_attribute_and_not_the_duration():
    assert ValueStateDescriptor("v", ttl=CREATE).meta()["ttl"] is True
    assert "ttl" not in ValueStateDescriptor("v").meta()
    assert ValueStateDescriptor("v", ttl=READ).meta() == ValueStateDescriptor("v", ttl=CREATE).meta()


# ---- the clock -----------------------------------------------------------------------------

def test_a_ttl_state_needs_a_time_and_other_states_do_not(backend):
    v = backend.get_state(ValueStateDescriptor("v", ttl=CREATE))
    lst = backend.get_state(ListStateDescriptor("l", ttl=CREATE))
    m = backend.get_state(MapStateDescriptor("m", ttl=CREATE))
    plain = backend.get_state(ValueStateDescriptor("plain"))
    backend.set_current_key("k")
    plain.update(1)
    assert backend.ttl_time is None
    for call in (v.value, lambda: v.update(1), lambda: lst.add(1), lst.get,
                 lambda: m.put(1, 1), lambda: list(m.entries()), lambda: v.get_many(["k"]),
                 lambda: v.put_many(["k"], [1]), lambda: list(backend.get_keys("v"))):
        with pytest.raises(TtlTimeNotSetError, match="set_ttl_time"):
            call()
    assert plain.value() == 1
    backend.set_ttl_time(T0)
    assert backend.ttl_time == T0
    v.update(1)
    assert v.value() == 1


# ---- expiry per kind -----------------------------------------------------------------------

def test_value_expires_ttl_after_its_last_write(backend):
    v = backend.get_state(ValueStateDescriptor("v", default="none", ttl=CREATE))
    backend.set_current_key("a")
    backend.set_ttl_time(T0)
    v.update("x")
    backend.set_ttl_time(T0 + TTL - 1)
    assert v.value() == "x"  # OnCreateAndWrite: the read does not extend it
    backend.set_ttl_time(T0 + TTL)
    assert v.value() == "none"
    v.update("y")
    backend.set_ttl_time(T0 + 2 * TTL - 1)
    assert v.value() == "y"


def test_on_read_and_write_extends_on_every_read(backend):
    v = backend.get_state(ValueStateDescriptor("v", ttl=READ))
    m = backend.get_state(MapStateDescriptor("m", ttl=READ))
    lst = backend.get_state(ListStateDescriptor("l", ttl=READ))
    backend.set_current_key("a")
    backend.set_ttl_time(T0)
    v.update(1)
    m.put("u", 2)
    lst.add_all([3, 4])
    for t in (T0 + TTL - 1, T0 + 2 * TTL - 2, T0 + 3 * TTL - 3):
        backend.set_ttl_time(t)
        assert (v.value(), m.get("u"), lst.get()) == (1, 2, [3, 4])
    backend.set_ttl_time(T0 + 4 * TTL - 3)
    assert (v.value(), m.get("u"), lst.get()) == (None, None, [])


def test_return_expired_if_not_cleaned_up_returns_it_once_then_it_is_gone(backend):
    v = backend.get_state(ValueStateDescriptor("v", ttl=RETURN_EXPIRED))
    m = backend.get_state(MapStateDescriptor("m", ttl=RETURN_EXPIRED))
    backend.set_current_key("a")
    backend.set_ttl_time(T0)
    v.update("old")
    m.put("u", "old")
    backend.set_ttl_time(T0 + TTL)
    assert v.value() == "old" and m.get("u") == "old"  # expired but still stored
    assert v.value() is None and m.get("u") is None    # the read cleaned it up (as Flink)
    assert backend.num_state_entries("v") == 0


def test_list_elements_expire_one_by_one(backend):
    lst = backend.get_state(ListStateDescriptor("l", ttl=CREATE))
    backend.set_current_key("a")
    backend.set_ttl_time(T0)
    lst.add("a")
    backend.set_ttl_time(T0 + 50)
    lst.add_all(["b", "c"])
    backend.set_ttl_time(T0 + TTL)
    assert lst.get() == ["b", "c"]
    # the read dropped the expired element and kept the others' own times (OnCreateAndWrite)
    (_, stored), = backend._raw_scan(backend._cf_index["l"])
    assert stored == stamp(T0 + 50) + b"\x03\x01b," + stamp(T0 + 50) + b"\x03\x01c"
    backend.set_ttl_time(T0 + 50 + TTL)
    assert lst.get() == []
    assert backend.num_state_entries("l") == 0  # nothing unexpired left: cleared


def test_return_expired_list_elements_are_returned_until_a_read_drops_them(backend):
    lst = backend.get_state(ListStateDescriptor("l", ttl=RETURN_EXPIRED))
    backend.set_current_key("a")
    backend.set_ttl_time(T0)
    lst.add("a")
    backend.set_ttl_time(T0 + 50)
    lst.add("b")
    backend.set_ttl_time(T0 + TTL)
    assert lst.get() == ["a", "b"]  # "a" expired but was still stored
    assert lst.get() == ["b"]       # the first read cleaned it up


def test_map_entries_expire_one_by_one_and_iteration_cleans_up(backend):
    m = backend.get_state(SortedMapStateDescriptor("m", int, ttl=CREATE))
    backend.set_current_key("a")
    backend.set_ttl_time(T0)
    m.put_all({1: "a", 2: "b"})
    backend.set_ttl_time(T0 + 50)
    m.put(3, None)
    m.put(4, "d")
    backend.set_ttl_time(T0 + TTL)
    assert not m.contains(1) and m.contains(3)
    assert m.first_entry() == (3, None) and m.last_entry() == (4, "d")
    assert list(m.head(4)) == [(3, None)] and list(m.tail(2)) == [(3, None), (4, "d")]
    assert list(m.keys()) == [3, 4] and list(m.values()) == [None, "d"]
    assert backend.num_state_entries("m") == 2  # the iteration removed the expired ones
    backend.set_ttl_time(T0 + 50 + TTL)
    assert m.is_empty() and dict(m.entries()) == {}


@pytest.mark.parametrize("visibility", ["NeverReturnExpired", "ReturnExpiredIfNotCleanedUp"])
def test_reducing_and_aggregating_restart_after_expiry(backend, visibility):
    cfg = StateTtlConfig(TTL, state_visibility=visibility)
    states = {
        "sum": backend.get_state(ReducingStateDescriptor("sum", reducers.SUM, ttl=cfg)),
        "py": backend.get_state(ReducingStateDescriptor("py", lambda a, b: a + b, ttl=cfg)),
        "count": backend.get_state(AggregatingStateDescriptor("count", aggregates.COUNT, ttl=cfg)),
        "avg": backend.get_state(AggregatingStateDescriptor("avg", Average(), ttl=cfg)),
    }
    backend.set_current_key("a")
    backend.set_ttl_time(T0)
    for s in states.values():
        s.add(3)
    backend.set_ttl_time(T0 + TTL - 1)
    for s in states.values():
        s.add(5)  # alive: folds in, and the write moves the last access
    backend.set_ttl_time(T0 + 2 * TTL - 2)
    assert {n: s.get() for n, s in states.items()} == {"sum": 8, "py": 8, "count": 2, "avg": 4.0}
    backend.set_ttl_time(T0 + 2 * TTL - 1)
    for s in states.values():
        s.add(7)  # the state expired at this time: it restarts (or, ReturnExpired, goes on)
    got = {n: s.get() for n, s in states.items()}
    if visibility == "NeverReturnExpired":
        assert got == {"sum": 7, "py": 7, "count": 1, "avg": 7.0}
    else:  # Flink's TtlReduceFunction folds the expired value in while it is still stored
        assert got == {"sum": 15, "py": 15, "count": 3, "avg": 5.0}


def test_native_adds_keep_numbers_native(backend):
    s = backend.get_state(ReducingStateDescriptor("s", reducers.SUM, value_type=float, ttl=CREATE))
    mx = backend.get_state(ReducingStateDescriptor("mx", reducers.MAX, value_type=int, ttl=CREATE))
    backend.set_ttl_time(T0)
    keys = np.arange(100, dtype=np.int64)
    s.add_many(keys, keys * 0.5)
    mx.add_many(np.repeat(keys, 3), np.tile(np.array([5, 9, 2]), 100))
    values, found = s.get_many(keys)
    assert values.dtype == np.float64 and found.all() and values[10] == 5.0
    values, found = mx.get_many(keys)
    assert values.dtype == np.int64 and (values == 9).all()


# ---- the stored layout (Flink's) -------------------------------------------------------------

def test_stored_layout_is_flinks(backend):
    v = backend.get_state(ValueStateDescriptor("v", value_type=int, ttl=CREATE))
    m = backend.get_state(MapStateDescriptor("m", user_key_type=int, value_type=int, ttl=CREATE))
    lst = backend.get_state(ListStateDescriptor("l", value_type=int, ttl=CREATE))
    backend.set_current_key(7)
    backend.set_ttl_time(T0)
    v.update(5)
    m.put(1, 6)
    m.put(2, None)
    lst.add(8)
    backend.set_ttl_time(T0 + 1)
    lst.add(9)
    raw = lambda name: [val for _, val in backend._raw_scan(backend._cf_index[name])]  # noqa
    assert raw("v") == [stamp(T0) + struct.pack(">q", 5)]
    assert raw("m") == [b"\x00" + stamp(T0) + struct.pack(">q", 6), b"\x01" + stamp(T0)]
    assert raw("l") == [stamp(T0) + struct.pack(">q", 8) + b"," + stamp(T0 + 1) +
                        struct.pack(">q", 9)]


# ---- batch calls == scalar calls ---------------------------------------------------------------

def _scenario(b: KeyedStateBackend, batch: bool, cfg: StateTtlConfig):
    v = b.get_state(ValueStateDescriptor("v", ttl=cfg))
    lst = b.get_state(ListStateDescriptor("l", ttl=cfg))
    m = b.get_state(MapStateDescriptor("m", ttl=cfg))
    r = b.get_state(ReducingStateDescriptor("r", reducers.SUM, ttl=cfg))
    py = b.get_state(ReducingStateDescriptor("py", lambda x, y: x + y, ttl=cfg))
    keys = ["k0", "k1", "k2", "k3", "k4", "k5"]
    reads = []

    def write(ks, vals):
        if batch:
            v.put_many(ks, vals)
            lst.add_many(ks, vals)
            m.put_many(ks, [f"u{x}" for x in vals], vals)
            r.add_many(ks, vals)
            py.add_many(ks, vals)
            return
        for k, x in zip(ks, vals):
            b.set_current_key(k)
            v.update(x)
            lst.add(x)
            m.put(f"u{x}", x)
            r.add(x)
            py.add(x)

    def read(ks, uks):
        if batch:
            out = [list(v.get_many(ks)[0]), lst.get_many(ks), list(m.get_many(ks, uks)[0]),
                   list(r.get_many(ks)[0]), list(py.get_many(ks)[0])]
        else:
            out = [[], [], [], [], []]
            for k, uk in zip(ks, uks):
                b.set_current_key(k)
                for i, x in enumerate((v.value(), lst.get(), m.get(uk), r.get(), py.get())):
                    out[i].append(x)
        reads.append(out)

    b.set_ttl_time(T0)
    write(keys[:4], [1, 2, 3, 4])
    b.set_ttl_time(T0 + 60)
    write(keys[2:], [5, 6, 7, 8])
    b.set_ttl_time(T0 + TTL - 1)
    read(keys, ["u1", "u2", "u3", "u6", "u7", "u8"])
    b.set_ttl_time(T0 + TTL + 10)
    read(keys, ["u1", "u2", "u3", "u6", "u7", "u8"])
    write(keys[:2], [9, 10])
    b.set_ttl_time(T0 + 60 + TTL)
    read(keys, ["u9", "u10", "u5", "u6", "u7", "u8"])
    stored = {n: b._raw_scan(b._cf_index[n]) for n in ("v", "l", "m", "r", "py")}
    return reads, stored


@pytest.mark.parametrize("cfg", [CREATE, READ, RETURN_EXPIRED], ids=["create", "read", "expired"])
def test_batch_calls_equal_scalar_calls_byte_for_byte(make_backend, cfg):
    scalar = _scenario(make_backend(), False, cfg)
    batch = _scenario(make_backend(), True, cfg)
    assert batch == scalar


# ---- keys, namespaces ------------------------------------------------------------------------

def test_get_keys_skips_expired_entries(backend):
    v = backend.get_state(ValueStateDescriptor("v", ttl=CREATE))
    backend.set_ttl_time(T0)
    v.put_many(["old1", "old2"], [1, 2])
    backend.set_ttl_time(T0 + 50)
    v.put_many(["new"], [3])
    backend.set_ttl_time(T0 + TTL)
    assert list(backend.get_keys("v")) == ["new"]
    assert backend.num_state_entries("v") == 3  # raw entries: get_keys is not a state read


def test_list_namespace_merge_keeps_element_timestamps(backend):
    lst = backend.get_state(ListStateDescriptor("l", namespace_type=int, ttl=CREATE))
    s = backend.get_state(ReducingStateDescriptor("s", reducers.SUM, namespace_type=int, ttl=CREATE))
    backend.set_current_key("a")
    backend.set_ttl_time(T0)
    lst.set_current_namespace(1)
    lst.add("early")
    s.set_current_namespace(1)
    s.add(1)
    backend.set_ttl_time(T0 + 50)
    lst.set_current_namespace(2)
    lst.add("late")
    s.set_current_namespace(2)
    s.add(2)
    lst.merge_namespaces(3, [1, 2])
    s.merge_namespaces(3, [1, 2])
    lst.set_current_namespace(3)
    s.set_current_namespace(3)
    assert lst.get() == ["early", "late"] and s.get() == 3
    backend.set_ttl_time(T0 + TTL)
    assert lst.get() == ["late"]  # "early" kept its own time through the merge
    assert s.get() == 3  # merged at T0 + 50: the result carries the merge's time (Flink)


# ---- snapshots, restore, rescaling -------------------------------------------------------------

def _own(b: KeyedStateBackend, keys: np.ndarray) -> np.ndarray:
    return np.array([k for k in keys if b.key_group_range.contains(b.key_group_of(int(k)))],
                    dtype=np.int64)


def _fill(b: KeyedStateBackend, keys: np.ndarray):
    descs = [ValueStateDescriptor("v", ttl=CREATE), ListStateDescriptor("l", ttl=CREATE),
             MapStateDescriptor("m", ttl=CREATE)]
    v, lst, m = (b.get_state(d) for d in descs)
    keys = _own(b, keys)
    b.set_ttl_time(T0)
    v.put_many(keys, keys)
    lst.add_many(keys, keys)
    m.put_many(keys, keys % 3, keys)
    return descs


def _check_visible_then_gone(backends, descs, keys):
    for t, visible in ((T0 + TTL - 1, True), (T0 + TTL, False)):
        total = {"v": 0, "l": 0, "m": 0}
        for b in backends:
            b.set_ttl_time(t)
            v, lst, m = (b.get_state(d) for d in descs)
            own = _own(b, keys)
            if not len(own):
                continue
            total["v"] += int(v.get_many(own)[1].sum())
            total["l"] += sum(len(x) for x in lst.get_many(own))
            total["m"] += int(m.get_many(own, own % 3)[1].sum())
        want = len(keys) if visible else 0
        assert total == {"v": want, "l": want, "m": want}, (t, total)


@pytest.mark.parametrize("kind", ["full", "incremental"])
@pytest.mark.parametrize("before, after", [(1, 2), (2, 3), (2, 1)])
def test_restore_and_rescale_keep_timestamps(make_backend, tmp_path, kind, before, after):
    """Entries written at T0 are visible at T0 + TTL - 1 and gone at T0 + TTL after a restore
    at another parallelism: their stamps travelled with them (clipped and copied key groups)."""
    keys = np.arange(300, dtype=np.int64)
    handles = []
    for i in range(before):
        src = make_backend(key_group_range=KeyGroupRange.for_operator(i, before, 128),
                           key_type=int)
        descs = _fill(src, keys)
        target = str(tmp_path / f"snaps-{i}")
        handles.append(src.snapshot(target, "sp").result() if kind == "full" else
                       src.checkpoint(1, target).result())
    restored = [KeyedStateBackend.restore(tmp_path / f"r{i}", handles,
                                          KeyGroupRange.for_operator(i, after, 128),
                                          descriptors=descs) for i in range(after)]
    try:
        _check_visible_then_gone(restored, descs, keys)
    finally:
        for b in restored:
            b.close()


def test_full_snapshot_leaves_expired_entries_out(make_backend, tmp_path):
    src = make_backend()
    v = src.get_state(ValueStateDescriptor("v", ttl=CREATE))
    lst = src.get_state(ListStateDescriptor("l", ttl=CREATE))
    m = src.get_state(MapStateDescriptor("m", ttl=CREATE))
    src.set_ttl_time(T0)
    v.put_many([1, 2], ["old", "old"])
    lst.add_many([1, 1], ["old", "old"])
    m.put_many([1, 1], ["a", "b"], ["old", "old"])
    src.set_ttl_time(T0 + 50)
    v.put_many([3], ["new"])
    lst.add_many([1], ["new"])
    m.put_many([1], ["c"], ["new"])
    src.set_ttl_time(T0 + TTL)  # the old entries expired; nothing has read them
    assert src.num_state_entries() == 7
    handle = src.snapshot(str(tmp_path / "snaps"), "sp").result()
    assert handle.stats["entries"] == 3
    restored = KeyedStateBackend.restore(tmp_path / "r", [handle])
    raw = lambda b, name: b._raw_scan(b._cf_index[name])  # noqa: E731
    try:
        # what is left keeps its bytes, timestamps as written
        assert raw(restored, "v") == [e for e in raw(src, "v") if e[1][:8] == stamp(T0 + 50)]
        assert raw(restored, "m") == [e for e in raw(src, "m") if e[1][1:9] == stamp(T0 + 50)]
        # the list keeps only its unexpired element
        assert [val for _, val in raw(restored, "l")] == [stamp(T0 + 50) + b"\x03\x03new"]
    finally:
        restored.close()


def test_turning_ttl_on_or_off_for_existing_state_is_refused(make_backend, tmp_path):
    b = make_backend()
    b.get_state(ValueStateDescriptor("plain"))
    b.get_state(ValueStateDescriptor("timed", ttl=CREATE))
    with pytest.raises(StateRegistrationError, match="written without TTL.*turned on"):
        b.get_state(ValueStateDescriptor("plain", ttl=CREATE))
    with pytest.raises(StateRegistrationError, match="written with TTL.*turned off"):
        b.get_state(ValueStateDescriptor("timed"))
    with pytest.raises(StateRegistrationError, match="one TTL setting per state"):
        b.get_state(ValueStateDescriptor("timed", ttl=READ))
    b.set_current_key("k")
    b.set_ttl_time(T0)
    b.get_state(ValueStateDescriptor("timed", ttl=CREATE)).update(1)
    b.get_state(ValueStateDescriptor("plain")).update(1)
    for kind in ("full", "incremental"):
        handle = (b.snapshot(str(tmp_path / "s"), f"sp-{kind}").result() if kind == "full" else
                  b.checkpoint(1, str(tmp_path / "s")).result())
        for desc, match in ((ValueStateDescriptor("plain", ttl=CREATE), "turned on"),
                            (ValueStateDescriptor("timed"), "turned off")):
            with pytest.raises(IncompatibleStateError, match=match):
                KeyedStateBackend.restore(tmp_path / f"r-{kind}-{desc.name}", [handle],
                                          descriptors=[desc])
        # another duration (and update type) is configuration: it restores fine
        r = KeyedStateBackend.restore(tmp_path / f"ok-{kind}", [handle],
                                      descriptors=[ValueStateDescriptor("timed", ttl=READ)])
        r.set_ttl_time(T0 + TTL - 1)
        r.set_current_key("k")
        assert r.get_state(ValueStateDescriptor("timed", ttl=READ)).value() == 1
        r.close()


# ---- background cleanup: the compaction filter ----------------------------------------------------

def _sst_bytes(b: KeyedStateBackend) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(b.path, "db", "*.sst")))


def test_compaction_purges_expired_untouched_keys_and_keeps_the_rest(backend):
    v = backend.get_state(ValueStateDescriptor("v", value_type=bytes, ttl=CREATE))
    lst = backend.get_state(ListStateDescriptor("l", value_type=bytes, ttl=CREATE))
    m = backend.get_state(MapStateDescriptor("m", user_key_type=int, value_type=bytes, ttl=CREATE))
    rng = np.random.default_rng(1)
    payload = [bytes(rng.integers(0, 256, 200, dtype=np.uint8)) for _ in range(20_000)]
    old, new = np.arange(0, 20_000, dtype=np.int64), np.arange(20_000, 22_000, dtype=np.int64)
    backend.set_ttl_time(T0)
    v.put_many(old, payload)
    m.put_many(old, old % 7, payload)
    lst.add_many(new, payload[:2000])  # these lists get a late element too
    backend._native_flush()
    backend.set_ttl_time(T0 + 50)
    v.put_many(new, payload[:2000])
    m.put_many(new, new % 7, payload[:2000])
    lst.add_many(new, payload[2000:4000])
    backend._native_flush()
    before = _sst_bytes(backend)
    assert backend.num_state_entries() == 2 * 22_000 + 2000
    backend.set_ttl_time(T0 + TTL)  # the first writes expired; nothing reads them
    backend._native_compact()
    after = _sst_bytes(backend)
    assert backend.num_state_entries("v") == backend.num_state_entries("m") == 2000
    assert after < before * 0.25, (before, after)
    # what did not expire survives the compaction, each list with its unexpired element only
    got, found = v.get_many(new)
    assert found.all() and list(got[:3]) == payload[:3]
    assert lst.get_many(new[:3]) == [[p] for p in payload[2000:2003]]
    lists = [val for _, val in backend._raw_scan(backend._cf_index["l"])]
    assert len(lists) == 2000
    assert all(len(x) == 8 + 2 + 200 and x.startswith(stamp(T0 + 50)) for x in lists)


def test_compaction_filter_waits_for_time_and_configuration(make_backend, tmp_path):
    b = make_backend()
    v = b.get_state(ValueStateDescriptor("v", ttl=CREATE))
    b.set_ttl_time(T0)
    v.put_many(np.arange(1000), np.arange(1000))
    handle = b.checkpoint(1, str(tmp_path / "c")).result()
    # restored without its descriptor: the duration is unknown, so nothing may be purged
    r = KeyedStateBackend.restore(tmp_path / "r", [handle])
    try:
        r.set_ttl_time(T0 + 10 * TTL)
        r._native_flush()
        r._native_compact()
        assert r.num_state_entries("v") == 1000
        r.get_state(ValueStateDescriptor("v", ttl=CREATE))
        r._native_compact()
        assert r.num_state_entries("v") == 0
    finally:
        r.close()


# ---- typed state (Spark schemas) ---------------------------------------------------------------

def test_typed_states_expire_per_value_element_and_entry(make_backend, tmp_path):
    """A typed list's elements are measured by their schema (csrc/ttl.h gets it at
    registration), so they expire one by one as other lists' do, written and read by scalar
    and batch calls alike."""
    import pandas as pd

    descs = [ValueStateDescriptor("v", value_type="n long, s string", ttl=CREATE),
             ListStateDescriptor("l", value_type="kind string, at long", ttl=CREATE),
             MapStateDescriptor("m", user_key_type="path string, q int", value_type="hits long",
                                ttl=CREATE)]
    b = make_backend(key_type=int)
    v, lst, m = (b.get_state(d) for d in descs)
    b.set_ttl_time(T0)
    b.set_current_key(1)
    v.update((1, "x"))
    lst.add(("a", 10))
    m.put(("/a", 1), (5,))
    lst.add_many([2], pd.DataFrame({"kind": ["b"], "at": [20]}))
    b.set_ttl_time(T0 + 50)
    lst.add_all([("c", 30), ("d", None)])
    m.put(("/b", 2), (6,))
    lst.add_many([2, 2], [("e", 40), ("f", 50)])
    b.set_ttl_time(T0 + TTL)
    assert v.value() is None
    assert lst.get() == [("c", 30), ("d", None)]
    assert dict(m.entries()) == {("/b", 2): (6,)}
    assert lst.get_many([2]).to_pylist() == [[{"kind": "e", "at": 40}, {"kind": "f", "at": 50}]]
    # a restored backend measures the elements once the descriptor registers
    handle = b.checkpoint(1, str(tmp_path / "ck")).result()
    r = KeyedStateBackend.restore(tmp_path / "r", [handle], descriptors=descs)
    try:
        r.set_ttl_time(T0 + 50 + TTL - 1)
        r.set_current_key(2)
        assert r.get_state(descs[1]).get() == [("e", 40), ("f", 50)]
        r.set_ttl_time(T0 + 50 + TTL)
        assert r.get_state(descs[1]).get() == []
    finally:
        r.close()
