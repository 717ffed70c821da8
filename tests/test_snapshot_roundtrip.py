"""Round trips of every state kind, several namespaces, timers and operator state through full
snapshots and incremental checkpoints, checked against a plain-Python model.

Hypothesis generates operation sequences; each sequence runs against a backend and the model,
then the backend is snapshotted (full and incremental, chained in both directions) and every
restored backend must hold exactly the model's state.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ckpt_model import (NAMESPACES, Harness, Model, assert_backend_matches, descriptors,
                        dump_states, new_backend, op_strategy)
from stateengine import KeyedStateBackend
from stateengine.checkpoint.handles import handle_from_dict

KEY_TYPES = [int, str, (str, int)]


def _restore(root, handles, **kw):
    return KeyedStateBackend.restore(os.path.join(root, f"r-{uuid.uuid4().hex[:8]}"), handles, **kw)


def _check_operator_state(backend, model: Model) -> None:
    op = backend.operator_state
    assert sorted(op.state_names) == sorted(model.operator)
    for name, (mode, values) in model.operator.items():
        assert op.get_list_state(name, mode).get() == values


def _verify(root, handle, model: Model, key_type, with_descriptors: bool) -> None:
    kw = {"descriptors": descriptors()} if with_descriptors else {}
    restored = _restore(root, [handle], key_type=key_type if with_descriptors else None, **kw)
    try:
        _check_operator_state(restored, model)
        assert_backend_matches(restored, model)
    finally:
        restored.dispose()


@settings(max_examples=int(os.environ.get("CKPT_EXAMPLES", "30")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), key_type=st.sampled_from(KEY_TYPES), compress=st.booleans())
def test_model_round_trip_full_and_incremental(tmp_path, key_type, data, compress):
    """CKPT_EXAMPLES=500 in the environment runs a longer search."""
    root = tempfile.mkdtemp(dir=tmp_path)
    ops = op_strategy(key_type)
    try:
        harness = Harness(new_backend(root, key_type=key_type))
        backend = harness.backend
        checkpoints = os.path.join(root, "checkpoints")

        for op in data.draw(st.lists(ops, max_size=50), label="ops before the full snapshot"):
            harness.apply(op)
        full = backend.snapshot(checkpoints, "savepoint-1", compress=compress).result()
        model_full = copy.deepcopy(harness.model)

        for op in data.draw(st.lists(ops, max_size=30), label="ops before checkpoint 1"):
            harness.apply(op)
        chk1 = backend.checkpoint(1, checkpoints).result()
        backend.notify_checkpoint_complete(1)
        model_chk1 = copy.deepcopy(harness.model)

        for op in data.draw(st.lists(ops, max_size=30), label="ops before checkpoint 2"):
            harness.apply(op)
        chk2 = backend.checkpoint(2, checkpoints).result()
        model_chk2 = copy.deepcopy(harness.model)

        # The live backend still holds the newest state; snapshots did not disturb it.
        assert dump_states(backend) == {n: v for n, v in model_chk2.states.items()}
        backend.dispose()

        _verify(root, full, model_full, key_type, with_descriptors=True)
        _verify(root, chk1, model_chk1, key_type, with_descriptors=False)
        _verify(root, chk2, model_chk2, key_type, with_descriptors=True)

        # Chain back: restored from an incremental checkpoint, changed, then fully snapshotted.
        chained = Harness(_restore(root, [chk2], descriptors=descriptors()),
                          copy.deepcopy(model_chk2))
        for op in data.draw(st.lists(ops, max_size=30), label="ops after restoring checkpoint 2"):
            chained.apply(op)
        full2 = chained.backend.snapshot(checkpoints, "savepoint-2", compress=compress).result()
        chk3 = chained.backend.checkpoint(3, checkpoints).result()
        model_after = copy.deepcopy(chained.model)
        chained.backend.dispose()
        _verify(root, full2, model_after, key_type, with_descriptors=False)
        _verify(root, chk3, model_after, key_type, with_descriptors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _fill_every_kind(harness: Harness, keys, namespaces) -> None:
    for i, key in enumerate(keys):
        for j, ns in enumerate(namespaces):
            n = i * 10 + j
            harness.apply(("value_update", key, ns, {"n": n} if n % 3 == 0 else n))
            harness.apply(("list_add_all", key, ns, [n, str(n), n + 1]))
            harness.apply(("map_put", key, ns, (f"u{n}", None if n % 5 == 0 else n)))
            harness.apply(("map_put", key, ns, (n, [n])))
            harness.apply(("sorted_put", key, ns, (n - 50, f"s{n}")))
            harness.apply(("sorted_put", key, ns, (-n, "neg")))
            harness.apply(("sum_add", key, ns, n))
            harness.apply(("sum_add", key, ns, -3))
            harness.apply(("concat_add", key, ns, "a"))
            harness.apply(("concat_add", key, ns, str(n)))
            harness.apply(("sumcount_add", key, ns, n))
            harness.apply(("sumcount_add", key, ns, 1))
            harness.apply(("count_add", key, ns, "x"))
            harness.apply(("event_timer", key, ns, 1000 - n))
            harness.apply(("processing_timer", key, ns, n))


@pytest.mark.parametrize("max_parallelism", [128, 4096, 32768],
                         ids=["1-byte-prefix", "2-byte-prefix", "largest"])
@pytest.mark.parametrize("compress", [True, False], ids=["snappy", "raw"])
def test_every_kind_every_namespace_full_and_incremental(tmp_path, max_parallelism, compress):
    harness = Harness(new_backend(str(tmp_path), max_parallelism, key_type=int))
    _fill_every_kind(harness, range(-20, 300), NAMESPACES)
    harness.backend.operator_state.get_list_state("offsets").add_all([10, 20, 30])
    harness.backend.operator_state.get_list_state("seen", "union").add("x")
    harness.model.operator = {"offsets": ("split", [10, 20, 30]), "seen": ("union", ["x"])}
    full = harness.backend.snapshot(tmp_path / "cp", "full", compress=compress).result()
    # every key group of the 320 keys' groups is in the handle, and only those
    groups = {harness.backend.key_group_of(k) for k in range(-20, 300)}
    assert set(full.offsets) == groups
    assert full.stats["entries"] == sum(
        harness.backend.num_state_entries(n) for n in harness.backend.state_names) + \
        harness.backend.timer_service.num_event_time_timers() + \
        harness.backend.timer_service.num_processing_time_timers()
    chk = harness.backend.checkpoint(7, tmp_path / "cp").result()
    harness.backend.dispose()
    for handle in (full, chk):
        restored = _restore(str(tmp_path), [handle], max_parallelism=max_parallelism)
        assert restored.max_parallelism == max_parallelism
        _check_operator_state(restored, harness.model)
        assert_backend_matches(restored, harness.model)
        restored.dispose()


def test_states_without_namespaces_round_trip(tmp_path):
    backend = new_backend(str(tmp_path), key_type=str)
    handles = {d.name: backend.get_state(d) for d in descriptors(namespaced=False)}
    expected = {}
    for i in range(200):
        key = f"user-{i}"
        backend.set_current_key(key)
        handles["value"].update(i)
        handles["list"].add_all([i, -i])
        handles["map"].put("a", i)
        handles["sorted"].put(i, "v")
        handles["sum"].add(i)
        handles["concat"].add(key)
        handles["sumcount"].add(i)
        handles["count"].add(i)
        expected[key] = (i, [i, -i], {"a": i}, [(i, "v")], i, key, (i, 1), 1)
    handles["value"].set_current_namespace(None)
    full = backend.snapshot(tmp_path / "cp", "full").result()
    chk = backend.checkpoint(1, tmp_path / "cp").result()
    backend.dispose()
    for handle in (full, chk):
        restored = _restore(str(tmp_path), [handle], descriptors=descriptors(namespaced=False))
        hs = {d.name: restored.get_state(d) for d in descriptors(namespaced=False)}
        assert sorted(restored.get_keys("value")) == sorted(expected)
        for key, want in expected.items():
            restored.set_current_key(key)
            got = (hs["value"].value(), hs["list"].get(), dict(hs["map"].entries()),
                   list(hs["sorted"].entries()), hs["sum"].get(), hs["concat"].get(),
                   hs["sumcount"].get(), hs["count"].get())
            assert got == want
        restored.dispose()


def test_handles_survive_json_and_restored_backends_keep_working(tmp_path):
    harness = Harness(new_backend(str(tmp_path), key_type=int))
    _fill_every_kind(harness, range(30), (None, "w1"))
    full = harness.backend.snapshot(str(tmp_path / "cp"), "full").result()
    chk = harness.backend.checkpoint(1, str(tmp_path / "cp")).result()
    harness.backend.dispose()
    for handle in (full, chk):
        doc = json.loads(json.dumps(handle.to_dict()))
        for h in (handle_from_dict(doc), doc):  # restore also takes the plain dict
            restored = Harness(_restore(str(tmp_path), [h]), copy.deepcopy(harness.model))
            # keeps working after restore: more writes, and another round trip
            _fill_every_kind(restored, range(25, 40), ("w1", 7))
            again = restored.backend.checkpoint(2, str(tmp_path / "cp2")).result()
            model = restored.model
            restored.backend.dispose()
            second = _restore(str(tmp_path), [again])
            assert_backend_matches(second, model)
            second.dispose()


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_empty_backend_round_trips(tmp_path, kind):
    backend = new_backend(str(tmp_path), key_type=None)
    if kind == "full":
        handle = backend.snapshot(tmp_path / "cp", "empty").result()
        assert handle.offsets == {}
    else:
        handle = backend.checkpoint(1, tmp_path / "cp").result()
    backend.dispose()
    restored = _restore(str(tmp_path), [handle], descriptors=descriptors(), key_type=int)
    assert_backend_matches(restored, Model())
    harness = Harness(restored)
    harness.apply(("value_update", 5, None, "now"))
    assert dump_states(restored)["value"] == {(5, None): "now"}
    restored.dispose()


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_writes_after_the_sync_point_are_not_in_the_snapshot(tmp_path, kind):
    harness = Harness(new_backend(str(tmp_path), key_type=int))
    _fill_every_kind(harness, range(50), (None,))
    model_at_sync = copy.deepcopy(harness.model)
    if kind == "full":
        pending = harness.backend.snapshot(tmp_path / "cp", "s")
    else:
        pending = harness.backend.checkpoint(1, tmp_path / "cp")
    # changes made right after the call returned, possibly while the async part runs
    for key in range(50):
        harness.apply(("value_update", key, None, "later"))
        harness.apply(("list_clear", key, None, None))
        harness.apply(("event_timer", key, "late", 5))
    harness.apply(("sum_add", 999, None, 1))
    handle = pending.result()
    restored = _restore(str(tmp_path), [handle])
    assert_backend_matches(restored, model_at_sync)
    restored.dispose()
    # and the live backend holds the later writes
    assert_backend_matches(harness.backend, harness.model)
    harness.backend.dispose()
