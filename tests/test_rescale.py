"""Restore at any parallelism: state written by 1, 2 and 3 backends (each owning
``KeyGroupRange.for_operator``) is restored by 4, 3, 2 and 1 backends, from full snapshots, from
incremental checkpoints and through StateStoreProvider with another ``num_partitions``.

Every new backend must hold exactly the model's state of the keys in its key groups, every key
must live in exactly one new backend, timers must move with their keys, and operator state must
be redistributed: "split" lists are the old lists concatenated in instance order and cut into
near-equal contiguous parts, "union" lists go to every new instance whole.
"""

from __future__ import annotations

import copy
import os
import random
import uuid
from dataclasses import dataclass, field

import numpy as np
import pytest

from tests.ckpt_model import (Harness, Model, descriptors, dump_states, fire_all, peek_timers,
                        random_ops, STATE_NAMES)
from stateengine import (KeyedStateBackend, KeyGroupRange, StateStoreProvider, assign_key_group,
                         configure_batch_ingest, operator_for_key_group)
from stateengine.operator_state import even_split

KEYS = list(range(-40, 260))


def _owner(key, parallelism, max_parallelism):
    return operator_for_key_group(assign_key_group(key, max_parallelism, int), parallelism,
                                  max_parallelism)


def _old_operator_lists(parallelism):
    """Per old instance: split list 'offsets' (sizes differ), union list 'seen', and a split
    list 'extra' that only instance 0 has."""
    out = []
    for i in range(parallelism):
        lists = {"offsets": ("split", [f"o{i}.{j}" for j in range(2 * i + 3)]),
                 "seen": ("union", [f"u{i}", i])}
        if i == 0:
            lists["extra"] = ("split", list(range(7)))
        out.append(lists)
    return out


def _expected_operator_state(old_lists, index, parallelism):
    names = {n: mode for lists in old_lists for n, (mode, _) in lists.items()}
    out = {}
    for name, mode in names.items():
        everything = [e for lists in old_lists for e in lists.get(name, (mode, []))[1]]
        out[name] = everything if mode == "union" else even_split(everything, parallelism)[index]
    return out


@dataclass
class Written:
    parallelism: int
    max_parallelism: int
    model_full: Model
    model_incremental: Model
    operator_lists: list
    full: list = field(default_factory=list)
    incremental: list = field(default_factory=list)


def _write(root, parallelism, max_parallelism, seed=7) -> Written:
    rng = random.Random(seed * 100 + parallelism)
    model = Model()
    harnesses = []
    op_lists = _old_operator_lists(parallelism)
    for i in range(parallelism):
        kgr = KeyGroupRange.for_operator(i, parallelism, max_parallelism)
        backend = KeyedStateBackend(os.path.join(root, f"old-{parallelism}-{i}"), max_parallelism,
                                    kgr, key_type=int)
        backend.operator_state.operator_index = i
        backend.operator_state.parallelism = parallelism
        for name, (mode, values) in op_lists[i].items():
            backend.operator_state.get_list_state(name, mode).add_all(values)
        harnesses.append(Harness(backend, model))  # one model: the key sets are disjoint
    by_owner = {i: [k for k in KEYS if _owner(k, parallelism, max_parallelism) == i]
                for i in range(parallelism)}
    for i, h in enumerate(harnesses):
        for op in random_ops(rng, by_owner[i], 40 * len(by_owner[i])):
            h.apply(op)
    written = Written(parallelism, max_parallelism, copy.deepcopy(model), None, op_lists)
    storage = os.path.join(root, "checkpoints")
    for i, h in enumerate(harnesses):
        written.full.append(h.backend.snapshot(storage, f"savepoint-{parallelism}-{i}").result())
        h.backend.checkpoint(1, storage).result()
        h.backend.notify_checkpoint_complete(1)
    for i, h in enumerate(harnesses):  # more changes, then a checkpoint that reuses files
        for op in random_ops(rng, by_owner[i], 10 * len(by_owner[i])):
            h.apply(op)
        written.incremental.append(h.backend.checkpoint(2, storage).result())
    written.model_incremental = copy.deepcopy(model)
    for h in harnesses:
        h.backend.dispose()
    return written


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda p: f"from{p}")
def written(request, tmp_path_factory):
    root = str(tmp_path_factory.mktemp(f"written-{request.param}"))
    return _write(root, request.param, 128)


def _restore_all(root, handles, parallelism, max_parallelism):
    out = []
    for j in range(parallelism):
        kgr = KeyGroupRange.for_operator(j, parallelism, max_parallelism)
        out.append(KeyedStateBackend.restore(
            os.path.join(root, f"new-{uuid.uuid4().hex[:8]}"), handles, kgr, max_parallelism,
            key_type=int, descriptors=descriptors(), operator_index=j, parallelism=parallelism))
    return out


def _check_rescaled(backends, model: Model, old_lists, max_parallelism, destructive=True):
    parallelism = len(backends)
    seen: dict = {}
    for j, backend in enumerate(backends):
        kgr = backend.key_group_range
        assert kgr == KeyGroupRange.for_operator(j, parallelism, max_parallelism)
        mine = model.restricted(lambda k: assign_key_group(k, max_parallelism, int) in kgr)
        got = dump_states(backend)
        for name in STATE_NAMES:
            assert got[name] == mine.states[name], f"state '{name}' of backend {j}/{parallelism}"
            assert backend.num_state_entries(name) == mine.entry_count(name)
            for key, _ns in got[name]:
                seen.setdefault(key, set()).add(j)
        if destructive:
            event, processing = fire_all(backend)
            assert set(event) == mine.event_timers and len(event) == len(mine.event_timers)
            assert set(processing) == mine.processing_timers
        else:
            assert peek_timers(backend, "event") == mine.event_timers
            assert peek_timers(backend, "processing") == mine.processing_timers
        for _ts, key, _ns in mine.event_timers | mine.processing_timers:
            seen.setdefault(key, set()).add(j)
        want_ops = _expected_operator_state(old_lists, j, parallelism)
        op = backend.operator_state
        assert sorted(op.state_names) == sorted(want_ops)
        for name, values in want_ops.items():
            mode = "union" if name == "seen" else "split"
            assert op.get_list_state(name, mode).get() == values, f"operator state '{name}' of {j}"
    # every key of the model lives in exactly one new backend, the one owning its key group
    assert set(seen) == model.keys()
    for key, owners in seen.items():
        assert owners == {_owner(key, parallelism, max_parallelism)}, key


@pytest.mark.parametrize("new_parallelism", [4, 3, 2, 1], ids=lambda q: f"to{q}")
@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_rescale_backends(written, new_parallelism, kind, tmp_path):
    handles = written.full if kind == "full" else written.incremental
    model = written.model_full if kind == "full" else written.model_incremental
    backends = _restore_all(str(tmp_path), handles, new_parallelism, written.max_parallelism)
    try:
        _check_rescaled(backends, model, written.operator_lists, written.max_parallelism)
    finally:
        for b in backends:
            b.dispose()


@pytest.mark.parametrize("new_parallelism", [4, 2, 1], ids=lambda q: f"to{q}")
def test_copied_key_groups_go_in_as_table_files(written, new_parallelism, tmp_path):
    """Key groups copied from another partition's checkpoint are written as table files and
    ingested once a range holds enough entries (checkpoint.cc CopyRange; the threshold lowered
    to 1 here so that the model's few keys take that path): the same state as through the
    memtable, with the copied entries in tables at once (more files right after the restore)."""
    old = configure_batch_ingest(1)
    try:
        ingested = _restore_all(str(tmp_path / "files"), written.incremental, new_parallelism, 128)
    finally:
        configure_batch_ingest(old)
    old = configure_batch_ingest(0)
    try:
        inserted = _restore_all(str(tmp_path / "memtable"), written.incremental,
                                new_parallelism, 128)
    finally:
        configure_batch_ingest(old)
    try:
        for j, (a, b) in enumerate(zip(ingested, inserted)):
            kgr = KeyGroupRange.for_operator(j, new_parallelism, 128)
            sources = [h for h in written.incremental
                       if not h.key_group_range.intersection(kgr).is_empty()]
            files_a, files_b = sum(a._native_files_per_level()), sum(b._native_files_per_level())
            if len(sources) > 1:  # a base and copies (from 2 to 1, from 3 to any)
                assert files_a > files_b, f"partition {j}: {files_a} files, {files_b} without ingestion"
            else:
                assert files_a == files_b
        _check_rescaled(ingested, written.model_incremental, written.operator_lists, 128)
    finally:
        for backend in ingested + inserted:
            backend.dispose()


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_rescale_with_two_byte_key_group_prefix(tmp_path, kind):
    w = _write(str(tmp_path), 3, 1000, seed=3)
    handles = w.full if kind == "full" else w.incremental
    model = w.model_full if kind == "full" else w.model_incremental
    for q in (2, 4):
        backends = _restore_all(str(tmp_path), handles, q, 1000)
        _check_rescaled(backends, model, w.operator_lists, 1000)
        for b in backends:
            b.dispose()


def test_rescale_twice_through_incremental_checkpoints(tmp_path):
    """3 -> 2 -> 4: the middle backends are clipped/merged RocksDB instances; their own
    checkpoints and full snapshots must rescale again."""
    w = _write(str(tmp_path), 3, 128, seed=11)
    middle = _restore_all(str(tmp_path), w.incremental, 2, 128)
    storage = str(tmp_path / "second")
    handles, fulls = [], []
    for j, b in enumerate(middle):
        handles.append(b.checkpoint(5, storage).result())
        fulls.append(b.snapshot(storage, f"full-{j}").result())  # of a clipped RocksDB
    for b in middle:
        b.dispose()
    old_lists_2 = [{n: ("union" if n == "seen" else "split", vals)
                    for n, vals in _expected_operator_state(w.operator_lists, j, 2).items()}
                   for j in range(2)]
    for hs in (handles, fulls):
        final = _restore_all(str(tmp_path), hs, 4, 128)
        _check_rescaled(final, w.model_incremental, old_lists_2, 128)
        for b in final:
            b.dispose()


def test_full_and_incremental_handles_cannot_be_mixed(written, tmp_path):
    from stateengine import IncompatibleStateError

    with pytest.raises(IncompatibleStateError):
        KeyedStateBackend.restore(str(tmp_path / "x"), [written.full[0], written.incremental[0]])


# ---- through StateStoreProvider -------------------------------------------------------------

def _provider(root, partition, n, local):
    return StateStoreProvider(root, "agg", partition, n, 128, key_type=int,
                              descriptors=descriptors(), local_dir=local)


@pytest.mark.parametrize("old_n,new_n", [(1, 4), (2, 1), (2, 3), (3, 2), (3, 4)],
                         ids=lambda n: str(n))
def test_rescale_state_store_partitions(tmp_path, old_n, new_n):
    root, local = str(tmp_path / "cp"), str(tmp_path / "local")
    rng = random.Random(old_n * 10 + new_n)
    model = Model()
    old_lists = _old_operator_lists(old_n)
    keys = KEYS[::3]
    for p in range(old_n):
        with _provider(root, p, old_n, local) as prov:
            store = prov.get_store(0)
            assert store.backend.operator_state.operator_index == p
            h = Harness(store.backend, model)
            for name, (mode, values) in old_lists[p].items():
                store.backend.operator_state.get_list_state(name, mode).add_all(values)
            mine = [k for k in keys if _owner(k, old_n, 128) == p]
            for op in random_ops(rng, mine, 30 * len(mine)):
                h.apply(op)
            assert store.commit() == 1

    # version 1 read back by new_n partitions, checked without firing timers, then changed
    providers = [_provider(root, p, new_n, local) for p in range(new_n)]
    stores = [prov.get_store(1) for prov in providers]
    assert all(not prov.last_load["reused"] for prov in providers)
    _check_rescaled([s.backend for s in stores], model, old_lists, 128, destructive=False)
    for p, store in enumerate(stores):
        h = Harness(store.backend, model)
        mine = [k for k in keys if _owner(k, new_n, 128) == p]
        for op in random_ops(rng, mine, 10 * len(mine)):
            h.apply(op)
        store.backend.operator_state.get_list_state("seen", "union").add(f"v2-{p}")
        assert store.commit() == 2
    new_lists = []
    for p in range(new_n):
        lists = {n: ("union" if n == "seen" else "split", vals)
                 for n, vals in _expected_operator_state(old_lists, p, new_n).items()}
        lists["seen"][1].append(f"v2-{p}")
        new_lists.append(lists)
    for prov in providers:
        prov.close()

    # version 2, written at new_n partitions, read by one partition holding everything
    with _provider(root, 0, 1, local) as single:
        assert single.latest_version() == 2
        store = single.get_store(2)
        _check_rescaled([store.backend], model, new_lists, 128)
        store.abort()


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_a_missing_handle_is_an_error_not_a_silent_gap(written, tmp_path, kind):
    from stateengine import CheckpointNotFoundError

    if written.parallelism == 1:
        pytest.skip("one handle covers everything")
    handles = (written.full if kind == "full" else written.incremental)[1:]
    target = tmp_path / "partial"
    with pytest.raises(CheckpointNotFoundError, match=r"key groups 0\.\.\d+ "):
        KeyedStateBackend.restore(target, handles, KeyGroupRange.all(128))
    assert not target.exists()
    # a range the given handles do cover restores fine
    last = KeyGroupRange.for_operator(written.parallelism - 1, written.parallelism, 128)
    KeyedStateBackend.restore(tmp_path / "ok", handles, last).dispose()


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_instances_with_different_states_and_registration_orders(tmp_path, kind):
    """State ids are per snapshot: instance 0 registered a, b; instance 1 registered b, c, a;
    instance 2 only c. Restoring any range must map every state by name."""
    from stateengine import ValueStateDescriptor

    names_per_instance = [["a", "b"], ["b", "c", "a"], ["c"]]
    want = {}
    handles = []
    for i, names in enumerate(names_per_instance):
        kgr = KeyGroupRange.for_operator(i, 3, 128)
        b = KeyedStateBackend(tmp_path / f"old{i}", key_group_range=kgr, key_type=int)
        states = {n: b.get_state(ValueStateDescriptor(n)) for n in names}
        for k in KEYS:
            if b.key_group_of(k) in kgr:
                b.set_current_key(k)
                for n, s in states.items():
                    s.update(f"{n}{k}")
                    want[(n, k)] = f"{n}{k}"
        handles.append(b.snapshot(tmp_path / "cp", f"s{i}").result() if kind == "full"
                       else b.checkpoint(1, tmp_path / "cp").result())
        b.dispose()
    for q in (1, 2):
        got = {}
        for j in range(q):
            r = KeyedStateBackend.restore(tmp_path / f"new{q}-{j}", handles,
                                          KeyGroupRange.for_operator(j, q, 128))
            for n in r.state_names:
                s = r.get_state(ValueStateDescriptor(n))
                for k in r.get_keys(n):
                    r.set_current_key(k)
                    assert (n, k) not in got
                    got[(n, k)] = s.value()
            r.dispose()
        assert got == want


@pytest.mark.parametrize("max_parallelism", [128, 1000], ids=lambda m: f"maxP{m}")
def test_sorted_batch_writes_after_a_clipped_restore(tmp_path, max_parallelism):
    """A restore that clips a RocksDB to a key-group range leaves range tombstones in its
    memtables; batch writes and merges that follow into the same memtables must read back
    exactly, and the restored and clipped keys must stay as they were."""
    w = _write(str(tmp_path), 1, max_parallelism, seed=5)
    backends = _restore_all(str(tmp_path), w.incremental, 2, max_parallelism)
    try:
        rng = random.Random(13)
        for j, backend in enumerate(backends):
            kgr = backend.key_group_range
            mine = [k for k in range(10_000, 14_000)
                    if assign_key_group(k, max_parallelism, int) in kgr]
            value = backend.get_state(descriptors()[0])
            total = backend.get_state(descriptors()[4])
            want_value: dict = {}
            want_sum: dict = {}
            for round_ in range(4):
                keys = rng.sample(mine, len(mine) // 2)
                vals = [k * 10 + round_ for k in keys]
                value.put_many(np.array(keys, dtype=np.int64), vals)
                total.add_many(np.array(keys, dtype=np.int64), np.array(vals, dtype=np.int64))
                for k, v in zip(keys, vals):
                    want_value[k] = v
                    want_sum[k] = want_sum.get(k, 0) + v
            probe = np.array(mine, dtype=np.int64)
            got, found = value.get_many(probe)
            assert [bool(f) for f in found] == [k in want_value for k in mine]
            assert {k: g for k, g, f in zip(mine, got, found) if f} == want_value
            sums, found = total.get_many(probe)
            assert {k: int(s) for k, s, f in zip(mine, sums, found) if f} == want_sum
            # the restored keys are untouched and the clipped-away ones stay deleted
            model = w.model_incremental.restricted(
                lambda k: assign_key_group(k, max_parallelism, int) in kgr)
            got_all = dump_states(backend)
            for name in ("value", "sum"):
                new = {(k, None) for k in (want_value if name == "value" else want_sum)}
                assert {kn: v for kn, v in got_all[name].items() if kn not in new} == \
                    model.states[name], f"state '{name}' of backend {j}"
    finally:
        for b in backends:
            b.dispose()
