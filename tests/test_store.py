"""StateStore: Spark's state-store discipline over incremental checkpoints.

A store loaded with ``get_store(v)`` is UPDATING; ``commit()`` publishes v + 1 (COMMITTED),
``abort()`` throws the changes away (ABORTED); afterwards every write is refused. Retried
commits of an existing version leave one complete, readable version.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from tests.ckpt_model import SumCount, concat
from stateengine import (AggregatingStateDescriptor, BackendClosedError, CheckpointNotFoundError,
                         CorruptionError,
                         IllegalStoreStateError, IncompatibleStateError, KeyGroupRange,
                         ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                         SortedMapStateDescriptor, StateStoreProvider, StoreState,
                         ValueStateDescriptor, aggregates, reducers)
from stateengine.checkpoint.versions import VersionCatalog

COUNT = ValueStateDescriptor("count", int, default=0)
EVENTS = ListStateDescriptor("events")
ATTRS = MapStateDescriptor("attrs", str)
DESCRIPTORS = [COUNT, EVENTS, ATTRS]


def provider(tmp_path, partition=0, n=1, local="local", **kw) -> StateStoreProvider:
    kw.setdefault("key_type", str)
    kw.setdefault("descriptors", DESCRIPTORS)
    return StateStoreProvider(str(tmp_path / "cp"), "agg", partition, n,
                              local_dir=str(tmp_path / local), **kw)


def write(store, key, n):
    store.backend.set_current_key(key)
    store.get_state(COUNT).update(n)
    store.get_state(EVENTS).add(f"e{n}")
    store.get_state(ATTRS).put("last", n)


def read_all(store, keys=None) -> dict:
    b = store.backend
    out = {}
    for key in keys if keys is not None else sorted(b.get_keys("count")):
        b.set_current_key(key)
        out[key] = (store.get_state(COUNT).value(), store.get_state(EVENTS).get(),
                    dict(store.get_state(ATTRS).entries()))
    return out


def test_lifecycle_states(tmp_path):
    with provider(tmp_path) as prov:
        store = prov.get_store(0)
        assert store.state is StoreState.UPDATING and not store.has_committed
        assert store.version == 0
        write(store, "a", 1)
        assert store.commit() == 1
        assert store.state is StoreState.COMMITTED and store.has_committed
        store = prov.get_store(1)
        write(store, "a", 2)
        store.abort()
        assert store.state is StoreState.ABORTED and not store.has_committed
        store.abort()  # idempotent
        assert store.state is StoreState.ABORTED


def _all_writes(store):
    """Every kind of write a store offers, each as a thunk."""
    b = store.backend
    b.set_current_key("a")
    count, events, attrs = (store.get_state(d) for d in DESCRIPTORS)
    sorted_map = store.get_state(SortedMapStateDescriptor("sorted", int))
    total = store.get_state(ReducingStateDescriptor("total", reducers.SUM))
    joined = store.get_state(ReducingStateDescriptor("joined", concat))
    sumcount = store.get_state(AggregatingStateDescriptor("sumcount", SumCount()))
    counted = store.get_state(AggregatingStateDescriptor("counted", aggregates.COUNT))
    timers = b.timer_service
    return {
        "value update": lambda: count.update(5),
        "value clear": count.clear,
        "list add": lambda: events.add("x"),
        "list add_all": lambda: events.add_all(["x", "y"]),
        "list update": lambda: events.update(["z"]),
        "list clear": events.clear,
        "map put": lambda: attrs.put("k", 1),
        "map put_all": lambda: attrs.put_all({"k": 1}),
        "map remove": lambda: attrs.remove("last"),
        "map clear": attrs.clear,
        "sorted map put": lambda: sorted_map.put(1, "v"),
        "native reduce add": lambda: total.add(1),
        "python reduce add": lambda: joined.add("s"),
        "python aggregate add": lambda: sumcount.add(3),
        "native aggregate add": lambda: counted.add("x"),
        "event timer register": lambda: timers.register_event_time_timer(50),
        "event timer delete": lambda: timers.delete_event_time_timer(10),
        "processing timer register": lambda: timers.register_processing_time_timer(50),
        "processing timer delete": lambda: timers.delete_processing_time_timer(10),
        "firing event timers": lambda: list(timers.advance_watermark(100)),
        "firing processing timers": lambda: list(timers.advance_processing_time(100)),
        "operator state add": lambda: b.operator_state.get_list_state("offsets").add(1),
        "operator state update": lambda: b.operator_state.get_list_state("offsets").update([1]),
        "operator state clear": lambda: b.operator_state.get_list_state("offsets").clear(),
    }


def _prepared(tmp_path, local):
    prov = provider(tmp_path, local=local)
    store = prov.get_store(0)
    writes = _all_writes(store)
    write(store, "a", 1)
    writes["sorted map put"]()
    writes["native reduce add"]()
    writes["python reduce add"]()
    writes["python aggregate add"]()
    writes["native aggregate add"]()
    store.backend.timer_service.register_event_time_timer(10)
    store.backend.timer_service.register_processing_time_timer(10)
    store.backend.operator_state.get_list_state("offsets").add_all([1, 2])
    return prov, store


@pytest.mark.parametrize("finish", ["commit", "abort"])
def test_every_write_after_commit_or_abort_is_refused(tmp_path, finish):
    prov, store = _prepared(tmp_path, f"local-{finish}")
    before = read_all(store)
    if finish == "commit":
        store.commit()
    else:
        store.abort()
    writes = _all_writes(store)
    for what, action in writes.items():
        with pytest.raises(IllegalStoreStateError, match="after already committed or aborted"):
            action()
            pytest.fail(f"{what} after {finish} was accepted")
    # nothing changed, and reads still work
    assert read_all(store) == before
    b = store.backend
    assert b.timer_service.num_event_time_timers() == 1
    assert b.timer_service.num_processing_time_timers() == 1
    assert b.operator_state.get_list_state("offsets").get() == [1, 2]
    if finish == "commit":
        # the reused backend of the next version is exactly the committed one
        nxt = prov.get_store(1)
        assert prov.last_load["reused"]
        assert read_all(nxt) == before
        assert nxt.backend.timer_service.num_event_time_timers() == 1
        assert nxt.backend.operator_state.get_list_state("offsets").get() == [1, 2]
        write(nxt, "b", 1)  # and it is writable again
        nxt.backend.operator_state.get_list_state("offsets").add(3)
        assert nxt.commit() == 2
    prov.close()


def test_commit_twice_and_commit_after_abort_are_refused(tmp_path):
    with provider(tmp_path) as prov:
        store = prov.get_store(0)
        write(store, "a", 1)
        store.commit()
        with pytest.raises(IllegalStoreStateError, match="commit"):
            store.commit()
        store.abort()  # aborting a committed store changes nothing
        assert store.state is StoreState.COMMITTED
        store = prov.get_store(1)
        store.abort()
        with pytest.raises(IllegalStoreStateError):
            store.commit()
        assert prov.catalog.versions() == [1]


def test_abort_discards_changes(tmp_path):
    with provider(tmp_path) as prov:
        store = prov.get_store(0)
        write(store, "a", 1)
        store.commit()
        store = prov.get_store(1)
        write(store, "a", 99)
        write(store, "new", 5)
        store.abort()
        again = prov.get_store(1)
        assert not prov.last_load["reused"], "an aborted backend must not be reused"
        assert read_all(again) == {"a": (1, ["e1"], {"last": 1})}
        assert prov.catalog.versions() == [1]
        write(again, "b", 2)
        assert again.commit() == 2
        assert read_all(prov.get_store(2)) == {"a": (1, ["e1"], {"last": 1}),
                                               "b": (2, ["e2"], {"last": 2})}


def test_failed_commit_aborts_and_leaves_the_version_unpublished(tmp_path, monkeypatch):
    from stateengine.checkpoint.storage import CheckpointStorage

    with provider(tmp_path) as prov:
        store = prov.get_store(0)
        write(store, "a", 1)
        store.commit()
        store = prov.get_store(1)
        write(store, "a", 2)

        def broken(self, *a, **kw):
            raise OSError("disk full")

        monkeypatch.setattr(CheckpointStorage, "upload", broken)
        with pytest.raises(OSError, match="disk full"):
            store.commit()
        monkeypatch.undo()
        assert store.state is StoreState.ABORTED
        assert prov.latest_version() == 1
        with pytest.raises(CheckpointNotFoundError):
            prov.catalog.handles_for(2, prov.key_group_range)
        store = prov.get_store(1)
        assert read_all(store) == {"a": (1, ["e1"], {"last": 1})}
        write(store, "a", 3)
        assert store.commit() == 2


def test_version_zero_is_empty_and_latest_version(tmp_path):
    prov = provider(tmp_path)
    assert prov.latest_version() == 0
    store = prov.get_store(0)
    assert read_all(store) == {}
    for v in range(1, 4):
        write(store, f"k{v}", v)
        assert store.commit() == v
        assert prov.latest_version() == v
        store = prov.get_store(v)
    store.abort()
    # even with versions present, version 0 is the empty state
    other = provider(tmp_path, local="other")
    assert other.latest_version() == 3
    zero = other.get_store(0)
    assert read_all(zero) == {}
    zero.abort()
    with pytest.raises(CheckpointNotFoundError, match=r"version 9 .*versions present: 1, 2, 3"):
        other.get_store(9)
    for bad in (-1, True, 1.0, "1"):
        with pytest.raises(ValueError):
            other.get_store(bad)
    prov.close()
    other.close()


def test_state_begins_empty_at_any_first_version_and_never_skips_a_missing_one(tmp_path):
    """A job that adds state at batch 41 starts from empty state at version 41; all its
    partitions do, in any order. Once state exists, a missing version is an error, never an
    empty start, and a version before the first one is refused."""
    from stateengine import assign_key_group

    first, second = provider(tmp_path, 0, 2), provider(tmp_path, 1, 2, local="l1")
    key = next(k for k in (f"k{i}" for i in range(100))
               if first.key_group_range.contains(assign_key_group(k, 128)))
    store = first.get_store(41)
    assert read_all(store) == {}
    write(store, key, 1)
    assert store.commit() == 42
    late = second.get_store(41)  # the other partition of batch 41, after the first committed
    assert read_all(late) == {}
    late.commit()
    doc = json.loads((tmp_path / "cp" / "agg" / "_operator.json").read_text())
    assert doc["first_version"] == 41
    other = provider(tmp_path, 0, 2, local="other")
    assert read_all(other.get_store(42)) == {key: (1, ["e1"], {"last": 1})}
    assert read_all(other.get_store(41)) == {}  # batch 41 replayed: empty again, by definition
    with pytest.raises(CheckpointNotFoundError, match=r"version 44 .*versions present: 42"):
        other.get_store(44)
    with pytest.raises(CheckpointNotFoundError, match=r"version 40 .*before the version its "
                                                      r"state began at \(41\)"):
        other.get_store(40)
    for p in (first, second, other):
        p.close()


def test_backend_is_reused_between_consecutive_versions(tmp_path):
    with provider(tmp_path) as prov:
        store = prov.get_store(0)
        assert prov.last_load["reused"] is False
        write(store, "a", 1)
        store.commit()
        store = prov.get_store(1)
        assert prov.last_load["version"] == 1 and prov.last_load["reused"] is True
        assert 0 <= prov.last_load["seconds"] < 60
        backend = store.backend
        write(store, "a", 2)
        store.commit()
        store = prov.get_store(2)
        assert prov.last_load["reused"] and store.backend is backend
        store.abort()
        # a replay of an older version restores a fresh copy and drops the old backend
        old = prov.get_store(1)
        assert not prov.last_load["reused"] and old.backend is not backend
        assert backend.closed
        assert read_all(old) == {"a": (1, ["e1"], {"last": 1})}
        with pytest.raises(BackendClosedError):
            backend.set_current_key("a")
        old.abort()


def test_metrics(tmp_path):
    with provider(tmp_path) as prov:
        store = prov.get_store(0)
        for i in range(500):
            write(store, f"k{i}", i)
        store.commit()
        m = store.metrics
        for field in ("version", "keys", "bytes", "files_uploaded", "files_reused",
                      "bytes_uploaded", "commit_seconds", "versions_pruned", "files_deleted",
                      "load_reused_backend", "load_seconds"):
            assert field in m, field
        assert m["version"] == 1
        assert 1000 <= m["keys"] <= 2000  # RocksDB's estimate of 1500 entries
        assert m["files_uploaded"] >= 3 + 3  # one SST per state, plus CURRENT/MANIFEST/OPTIONS
        assert m["files_reused"] == 0
        assert 0 < m["bytes_uploaded"] == m["bytes"]
        assert 0 < m["commit_seconds"] < 60
        assert m["load_reused_backend"] is False

        store = prov.get_store(1)
        write(store, "k1", -1)
        store.commit()
        m2 = store.metrics
        assert m2["version"] == 2 and m2["load_reused_backend"] is True
        assert m2["files_reused"] >= 3
        assert m2["bytes_uploaded"] < m2["bytes"]
        manifest = json.loads((tmp_path / "cp" / "agg" / "v2" / "p00000-of-00001.json").read_text())
        assert manifest["stats"]["files_reused"] == m2["files_reused"]


def _published(tmp_path, version):
    d = tmp_path / "cp" / "agg" / f"v{version}"
    return sorted(p for p in os.listdir(d) if p.endswith(".json") or ".tmp" in p)


def test_retried_commit_by_two_providers(tmp_path):
    """Two attempts of the same task (e.g. speculative execution) both commit version 2."""
    with provider(tmp_path) as prov:
        store = prov.get_store(0)
        for i in range(50):
            write(store, f"k{i}", i)
        store.commit()
    first, second = provider(tmp_path, local="a"), provider(tmp_path, local="b")
    s1, s2 = first.get_store(1), second.get_store(1)
    for i in range(50):
        write(s1, f"k{i}", 1000 + i)
        write(s2, f"k{i}", 2000 + i)
    write(s1, "only-first", 1)
    write(s2, "only-second", 2)
    results = []
    threads = [threading.Thread(target=lambda s=s: results.append(s.commit())) for s in (s1, s2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [2, 2]
    assert _published(tmp_path, 2) == ["p00000-of-00001.json"]
    reader = provider(tmp_path, local="reader")
    got = read_all(reader.get_store(2))
    want_first = read_all(s1)
    want_second = read_all(s2)
    assert got in (want_first, want_second), "version 2 mixes the two attempts"
    # the version stays usable: the next batch commits on top of it
    nxt = reader.get_store(2)
    write(nxt, "k0", 7)
    assert nxt.commit() == 3
    for p in (first, second, reader):
        p.close()


def test_commit_reload_commit_again(tmp_path):
    with provider(tmp_path) as prov:
        store = prov.get_store(0)
        write(store, "a", 1)
        store.commit()
        store = prov.get_store(1)
        write(store, "a", 2)
        assert store.commit() == 2
        retry = prov.get_store(1)  # the task is retried from version 1
        assert not prov.last_load["reused"]
        write(retry, "a", 3)
        write(retry, "b", 3)
        assert retry.commit() == 2
        assert _published(tmp_path, 2) == ["p00000-of-00001.json"]
        reader = provider(tmp_path, local="reader")
        assert read_all(reader.get_store(2)) == {"a": (3, ["e1", "e3"], {"last": 3}),
                                                 "b": (3, ["e3"], {"last": 3})}
        # the retrying provider's own backend is the published version 2
        store = prov.get_store(2)
        assert prov.last_load["reused"]
        assert read_all(store) == read_all(reader.get_store(2))
        reader.close()


def _commit_partitions(tmp_path, n, value, version=0, partitions=None):
    keys = [f"k{i}" for i in range(40)]
    for p in partitions if partitions is not None else range(n):
        with provider(tmp_path, partition=p, n=n, local=f"w{n}-{p}") as prov:
            store = prov.get_store(version)
            mine = [k for k in keys if store.backend.key_group_of(k) in prov.key_group_range]
            for k in mine:
                write(store, k, value)
            store.commit()
    return keys


def test_mark_committed_picks_the_set_of_manifests(tmp_path):
    keys = _commit_partitions(tmp_path, 1, 111)
    _commit_partitions(tmp_path, 2, 222)  # a second complete set for version 1, written later
    catalog = VersionCatalog(provider(tmp_path).storage, "agg")
    full = KeyGroupRange.all(128)
    assert {h.key_group_range for h in catalog.handles_for(1, full)} == \
        {KeyGroupRange.for_operator(i, 2, 128) for i in range(2)}  # newest complete set
    reader = provider(tmp_path, local="r1")
    assert {v[0] for v in read_all(reader.get_store(1), keys).values()} == {222}
    reader.close()

    catalog.mark_committed(1, 1)  # the driver says: version 1 was committed by 1 partition
    catalog = VersionCatalog(catalog.storage, "agg")
    assert [h.key_group_range for h in catalog.handles_for(1, full)] == [full]
    reader = provider(tmp_path, local="r2")
    assert {v[0] for v in read_all(reader.get_store(1), keys).values()} == {111}
    reader.close()

    # a marker naming a partition count whose manifests are missing is damage, not a reason
    # to fall back to another set
    catalog.mark_committed(1, 5)
    with pytest.raises(CorruptionError, match="marked committed by 5 partition"):
        VersionCatalog(catalog.storage, "agg").handles_for(1, full)


def test_incomplete_version_is_readable_only_where_covered(tmp_path):
    _commit_partitions(tmp_path, 1, 1)
    _commit_partitions(tmp_path, 2, 2, version=1, partitions=[0])  # partition 1 never committed
    p0 = provider(tmp_path, partition=0, n=2, local="p0")
    assert p0.latest_version() == 2
    p0.get_store(2).abort()
    whole = provider(tmp_path, local="whole")
    assert whole.latest_version() == 1
    with pytest.raises(CheckpointNotFoundError, match="version 2 .* incomplete"):
        whole.get_store(2)
    p0.close()
    whole.close()


def test_closed_provider_refuses_writes(tmp_path):
    prov = provider(tmp_path)
    store = prov.get_store(0)
    prov.close()
    with pytest.raises(BackendClosedError):
        write(store, "a", 1)


def test_another_max_parallelism_is_refused(tmp_path):
    _commit_partitions(tmp_path, 1, 1)
    with pytest.raises(IncompatibleStateError, match="max_parallelism 128"):
        provider(tmp_path, max_parallelism=256)
