"""Model-based tests: random operation sequences over every state kind, several keys and
namespaces, run against the engine and against plain Python dicts; both must always agree."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from stateengine import (AggregateFunction, AggregatingStateDescriptor, KeyedStateBackend,
                         ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                         SortedMapStateDescriptor, ValueStateDescriptor, aggregates, reducers)

NAMESPACES = [None, 1, "w"]  # no two equal in Python (1 == True would merge model entries)

elements = st.one_of(
    st.booleans(), st.integers(-2**63, 2**63 - 1), st.integers(),
    st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8),
    st.tuples(st.integers(-5, 5), st.text(max_size=3)), st.lists(st.integers(-5, 5), max_size=3),
)
values = st.none() | elements
user_keys = st.one_of(st.integers(-3, 3), st.text(max_size=2))  # no bools/floats: see above
sorted_keys = st.integers(-2**63, 2**63 - 1) | st.sampled_from([-1, 0, 1])
small_ints = st.integers(-2**40, 2**40)  # native sums wrap at 64 bits; the model would not
numbers = st.integers(-1000, 1000) | st.floats(-1e3, 1e3, allow_nan=False)


class Collect(AggregateFunction):
    """Order-sensitive Python aggregate: the accumulator is the tuple of added values."""

    def create_accumulator(self):
        return ()

    def add(self, value, acc):
        return acc + (value,)

    def get_result(self, acc):
        return list(acc)

    def merge(self, a, b):
        return a + b


def _concat(a, b):
    return a + "|" + b


# name -> (descriptor factory, kind in the model, Python fold used by the model)
STATES = {
    "value": (lambda: ValueStateDescriptor("value", namespace_type=object), "value", None),
    "list": (lambda: ListStateDescriptor("list", namespace_type=object), "list", None),
    "map": (lambda: MapStateDescriptor("map", namespace_type=object), "map", None),
    "sorted": (lambda: SortedMapStateDescriptor("sorted", int, namespace_type=object),
               "map", None),
    "sum": (lambda: ReducingStateDescriptor("sum", reducers.SUM, value_type=int,
                                            namespace_type=object), "reduce", lambda a, b: a + b),
    "min": (lambda: ReducingStateDescriptor("min", reducers.MIN, namespace_type=object),
            "reduce", lambda a, b: b if b < a else a),
    "concat": (lambda: ReducingStateDescriptor("concat", _concat, namespace_type=object),
               "reduce", _concat),
    "count": (lambda: AggregatingStateDescriptor("count", aggregates.COUNT,
                                                 namespace_type=object), "count", None),
    "collect": (lambda: AggregatingStateDescriptor("collect", Collect(), namespace_type=object),
                "collect", None),
}
MERGING = ["list", "sum", "min", "concat", "count", "collect"]


class KeyedStateMachine(RuleBasedStateMachine):
    KEYS: list = ["alice", "bob", "", "日本"]  # exactly 4: rules draw an index
    MAX_PARALLELISM = 128

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="stateengine-model-")
        self.backend = KeyedStateBackend(f"{self.dir}/db", max_parallelism=self.MAX_PARALLELISM)
        self.h = {name: self.backend.get_state(make()) for name, (make, _, _) in STATES.items()}
        self.model: dict[str, dict] = {name: {} for name in STATES}
        self.ns = {name: None for name in STATES}
        self.key = None

    def teardown(self):
        self.backend.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- where we are -------------------------------------------------------------------------

    def _at(self, name):
        return (self.key, self.ns[name])

    # Keys are drawn as indexes into KEYS so that subclasses can bring other key types.
    @initialize(i=st.integers(0, 3))
    def first_key(self, i):
        self.set_key(i)

    @rule(i=st.integers(0, 3))
    def set_key(self, i):
        key = self.KEYS[i]
        self.backend.set_current_key(key)
        self.key = key

    @rule(name=st.sampled_from(list(STATES)), ns=st.sampled_from(NAMESPACES))
    def set_namespace(self, name, ns):
        self.h[name].set_current_namespace(ns)
        self.ns[name] = ns

    # ---- value ----------------------------------------------------------------------------------

    @rule(v=values)
    def value_update(self, v):
        self.h["value"].update(v)
        if v is None:
            self.model["value"].pop(self._at("value"), None)
        else:
            self.model["value"][self._at("value")] = v

    # ---- list -----------------------------------------------------------------------------------

    @rule(v=elements)
    def list_add(self, v):
        self.h["list"].add(v)
        self.model["list"].setdefault(self._at("list"), []).append(v)

    @rule(vs=st.lists(elements, max_size=4))
    def list_add_all(self, vs):
        self.h["list"].add_all(vs)
        if vs:
            self.model["list"].setdefault(self._at("list"), []).extend(vs)

    @rule(vs=st.lists(elements, max_size=4))
    def list_update(self, vs):
        self.h["list"].update(vs)
        if vs:
            self.model["list"][self._at("list")] = list(vs)
        else:
            self.model["list"].pop(self._at("list"), None)

    # ---- maps -----------------------------------------------------------------------------------

    @rule(name=st.sampled_from(["map", "sorted"]), data=st.data())
    def map_put(self, name, data):
        k = data.draw(user_keys if name == "map" else sorted_keys)
        v = data.draw(values)  # None is a legal map value
        self.h[name].put(k, v)
        self.model[name].setdefault(self._at(name), {})[k] = v

    @rule(name=st.sampled_from(["map", "sorted"]), data=st.data())
    def map_put_all(self, name, data):
        entries = data.draw(st.dictionaries(user_keys if name == "map" else sorted_keys, values,
                                            max_size=4))
        self.h[name].put_all(entries)
        if entries:
            self.model[name].setdefault(self._at(name), {}).update(entries)

    @rule(name=st.sampled_from(["map", "sorted"]), data=st.data())
    def map_remove(self, name, data):
        current = self.model[name].get(self._at(name), {})
        k = data.draw(st.sampled_from(sorted(current, key=repr)) if current and
                      data.draw(st.booleans()) else (user_keys if name == "map" else sorted_keys))
        self.h[name].remove(k)
        current.pop(k, None)
        if not current:
            self.model[name].pop(self._at(name), None)

    @rule(name=st.sampled_from(["map", "sorted"]), data=st.data())
    def map_point_reads(self, name, data):
        current = self.model[name].get(self._at(name), {})
        k = data.draw(user_keys if name == "map" else sorted_keys)
        assert self.h[name].contains(k) == (k in current)
        assert self.h[name].get(k) == current.get(k)
        assert self.h[name].is_empty() == (not current)

    # ---- reducing / aggregating -----------------------------------------------------------------

    @rule(name=st.sampled_from(["sum", "min", "concat"]), data=st.data())
    def reduce_add(self, name, data):
        v = data.draw({"sum": small_ints, "min": numbers, "concat": st.text(max_size=3)}[name])
        self.h[name].add(v)
        fold = STATES[name][2]
        at = self._at(name)
        self.model[name][at] = v if at not in self.model[name] else fold(self.model[name][at], v)

    @rule(v=elements)
    def aggregate_add(self, v):
        self.h["count"].add(v)
        self.h["collect"].add(v)
        self.model["count"][self._at("count")] = self.model["count"].get(self._at("count"), 0) + 1
        at = self._at("collect")
        self.model["collect"][at] = self.model["collect"].get(at, ()) + (v,)

    # ---- whole-state operations -----------------------------------------------------------------

    @rule(name=st.sampled_from(list(STATES)))
    def clear(self, name):
        self.h[name].clear()
        self.model[name].pop(self._at(name), None)

    @rule(name=st.sampled_from(MERGING), into=st.sampled_from(NAMESPACES),
          sources=st.lists(st.sampled_from(NAMESPACES), max_size=4))
    def merge_namespaces(self, name, into, sources):
        target = into  # ("target" is reserved by hypothesis for bundles)
        self.h[name].merge_namespaces(target, sources)
        model = self.model[name]
        kind, fold = STATES[name][1], STATES[name][2]
        distinct = [ns for i, ns in enumerate(sources) if ns != target and ns not in sources[:i]]
        for ns in distinct:
            src = model.pop((self.key, ns), None)
            if src is None:
                continue
            dst = (self.key, target)
            if dst not in model:
                model[dst] = src
            elif kind == "list":
                model[dst] = model[dst] + src
            elif kind == "reduce":
                model[dst] = fold(model[dst], src)
            elif kind == "count":
                model[dst] += src
            else:  # collect: Collect.merge
                model[dst] = model[dst] + src

    # ---- checks ---------------------------------------------------------------------------------

    def _expected(self, name, at):
        kind = STATES[name][1]
        stored = self.model[name].get(at)
        if kind == "value":
            return stored
        if kind == "list":
            return stored or []
        if kind == "map":
            return stored or {}
        if kind == "collect":
            return None if stored is None else list(stored)
        return stored

    def _actual(self, name):
        h, kind = self.h[name], STATES[name][1]
        if kind == "value":
            return h.value()
        if kind == "map":
            entries = list(h.entries())
            if name == "sorted":  # iteration follows numeric user-key order
                assert [k for k, _ in entries] == sorted(k for k, _ in entries)
                if entries:
                    assert h.first_entry() == entries[0] and h.last_entry() == entries[-1]
                else:
                    assert h.first_entry() is None and h.last_entry() is None
            return dict(entries)
        return h.get()

    def _check(self, name):
        expected, actual = self._expected(name, self._at(name)), self._actual(name)
        assert actual == expected, (name, self._at(name), actual, expected)
        if name in ("sum", "min", "count") and expected is not None:
            assert type(actual) is type(expected), (name, actual, expected)

    @invariant()
    def current_key_and_namespace_agree(self):
        if self.key is None:
            return
        for name in STATES:
            self._check(name)

    @rule()
    def everything_agrees(self):
        """Every state at every key and namespace, then back to where we were."""
        key, ns = self.key, dict(self.ns)
        for k in self.KEYS:
            self.backend.set_current_key(k)
            self.key = k
            for name in STATES:
                for n in NAMESPACES:
                    self.h[name].set_current_namespace(n)
                    self.ns[name] = n
                    self._check(name)
        self.set_key(self.KEYS.index(key))
        for name, n in ns.items():
            self.set_namespace(name, n)

    @rule(name=st.sampled_from(list(STATES)), ns=st.sampled_from(NAMESPACES))
    def get_keys(self, name, ns):
        # the model drops emptied lists and maps, so every model entry is a stored entry
        expected = {k for (k, n) in self.model[name] if n == ns}
        got = list(self.backend.get_keys(name, ns))
        assert len(got) == len(set(got)), got  # each key once
        assert set(got) == expected

    @rule()
    def num_state_entries(self):
        total = 0
        for name in STATES:
            entries = self.model[name].values()
            n = sum(len(v) for v in entries) if STATES[name][1] == "map" else len(entries)
            assert self.backend.num_state_entries(name) == n, name
            total += n
        assert self.backend.num_state_entries() == total

    @rule()
    def flush(self):
        # moves memtables to SST files, so later merges combine operands across files
        self.backend._native_flush()


class TupleKeyStateMachine(KeyedStateMachine):
    """Two-column keys and a 2-byte key-group prefix."""

    KEYS = [(1, "a"), (1, "b"), (-7, ""), (2**40, "日本")]
    MAX_PARALLELISM = 32768

MODEL_SETTINGS = settings(max_examples=60, stateful_step_count=50, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])

TestKeyedState = KeyedStateMachine.TestCase
TestKeyedState.settings = MODEL_SETTINGS
TestTupleKeyedState = TupleKeyStateMachine.TestCase
TestTupleKeyedState.settings = settings(MODEL_SETTINGS, max_examples=30)
