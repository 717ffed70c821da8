"""A plain-Python model of a keyed state backend, and helpers to compare a real backend with it.

The checkpoint tests run the same operations against a KeyedStateBackend and a ``Model`` (dicts
and lists), snapshot / checkpoint / rescale the backend, and then require the restored
backends to hold exactly what the model holds: every state kind, every namespace, timers and
operator state.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from hypothesis import strategies as st

from stateengine import (AggregatingStateDescriptor, KeyedStateBackend,
                         KeyGroupRange, ListStateDescriptor, MapStateDescriptor,
                         ReducingStateDescriptor, SortedMapStateDescriptor, ValueStateDescriptor,
                         aggregates, reducers)
from tests.user_functions import SumCount

NAMESPACES = (None, "w1", 7, b"ns")
FAR_FUTURE = 1 << 62


def concat(a: str, b: str) -> str:
    """A Python reduce function whose result depends on the order of its inputs."""
    return a + b




STATE_NAMES = ("value", "list", "map", "sorted", "sum", "concat", "sumcount", "count")


def descriptors(namespaced: bool = True) -> list:
    """One descriptor of every state kind (native and Python reducing/aggregating)."""
    ns = object if namespaced else None
    return [
        ValueStateDescriptor("value", namespace_type=ns),
        ListStateDescriptor("list", namespace_type=ns),
        MapStateDescriptor("map", namespace_type=ns),
        SortedMapStateDescriptor("sorted", int, namespace_type=ns),
        ReducingStateDescriptor("sum", reducers.SUM, value_type=int, namespace_type=ns),
        ReducingStateDescriptor("concat", concat, namespace_type=ns),
        AggregatingStateDescriptor("sumcount", SumCount(), namespace_type=ns),
        AggregatingStateDescriptor("count", aggregates.COUNT, namespace_type=ns),
    ]


KINDS = {d.name: d.kind.value for d in descriptors()}


@dataclass
class Model:
    """What the backend must hold. states[name][(key, ns)] -> value / list / dict."""

    states: dict[str, dict[tuple[Any, Any], Any]] = field(
        default_factory=lambda: {n: {} for n in STATE_NAMES})
    event_timers: set[tuple[int, Any, Any]] = field(default_factory=set)
    processing_timers: set[tuple[int, Any, Any]] = field(default_factory=set)
    # operator state per old instance: {name: (mode, list)}
    operator: dict[str, tuple[str, list]] = field(default_factory=dict)

    def keys(self) -> set:
        out = set()
        for per in self.states.values():
            out.update(k for k, _ in per)
        out.update(k for _, k, _ in self.event_timers | self.processing_timers)
        return out

    def entry_count(self, name: str) -> int:
        per = self.states[name]
        if KINDS[name] in ("map", "sorted_map"):
            return sum(len(v) for v in per.values())
        return len(per)

    def restricted(self, owns) -> "Model":
        """The part of the model whose keys satisfy owns(key) (operator state excluded)."""
        m = Model()
        for name, per in self.states.items():
            m.states[name] = {kn: (dict(v) if isinstance(v, dict) else
                                   list(v) if isinstance(v, list) else v)
                              for kn, v in per.items() if owns(kn[0])}
        m.event_timers = {t for t in self.event_timers if owns(t[1])}
        m.processing_timers = {t for t in self.processing_timers if owns(t[1])}
        return m

    def merged(self, other: "Model") -> "Model":
        m = Model()
        for name in STATE_NAMES:
            m.states[name] = {**self.states[name], **other.states[name]}
        m.event_timers = self.event_timers | other.event_timers
        m.processing_timers = self.processing_timers | other.processing_timers
        return m


class Harness:
    """A backend plus its model; ``apply`` runs one operation against both."""

    def __init__(self, backend: KeyedStateBackend, model: Model | None = None) -> None:
        self.backend = backend
        self.model = model if model is not None else Model()
        self.h = {d.name: backend.get_state(d) for d in descriptors()}

    def _at(self, name: str, key: Any, ns: Any):
        self.backend.set_current_key(key)
        h = self.h[name]
        h.set_current_namespace(ns)
        return h

    def apply(self, op: tuple) -> None:
        kind, key, ns, arg = op
        m = self.model.states
        if kind == "value_update":
            self._at("value", key, ns).update(arg)
            if arg is None:
                m["value"].pop((key, ns), None)
            else:
                m["value"][(key, ns)] = arg
        elif kind == "value_clear":
            self._at("value", key, ns).clear()
            m["value"].pop((key, ns), None)
        elif kind == "list_add":
            self._at("list", key, ns).add(arg)
            m["list"].setdefault((key, ns), []).append(arg)
        elif kind == "list_add_all":
            self._at("list", key, ns).add_all(arg)
            if arg:
                m["list"].setdefault((key, ns), []).extend(arg)
        elif kind == "list_update":
            self._at("list", key, ns).update(arg)
            if arg:
                m["list"][(key, ns)] = list(arg)
            else:
                m["list"].pop((key, ns), None)
        elif kind == "list_clear":
            self._at("list", key, ns).clear()
            m["list"].pop((key, ns), None)
        elif kind == "map_put":
            uk, v = arg
            self._at("map", key, ns).put(uk, v)
            m["map"].setdefault((key, ns), {})[uk] = v
        elif kind == "map_put_all":
            self._at("map", key, ns).put_all(arg)
            if arg:
                m["map"].setdefault((key, ns), {}).update(arg)
        elif kind == "map_remove":
            self._at("map", key, ns).remove(arg)
            d = m["map"].get((key, ns))
            if d is not None:
                d.pop(arg, None)
                if not d:
                    del m["map"][(key, ns)]
        elif kind == "map_clear":
            self._at("map", key, ns).clear()
            m["map"].pop((key, ns), None)
        elif kind == "sorted_put":
            uk, v = arg
            self._at("sorted", key, ns).put(uk, v)
            m["sorted"].setdefault((key, ns), {})[uk] = v
        elif kind == "sorted_remove":
            self._at("sorted", key, ns).remove(arg)
            d = m["sorted"].get((key, ns))
            if d is not None:
                d.pop(arg, None)
                if not d:
                    del m["sorted"][(key, ns)]
        elif kind == "sum_add":
            self._at("sum", key, ns).add(arg)
            m["sum"][(key, ns)] = m["sum"].get((key, ns), 0) + arg
        elif kind == "concat_add":
            self._at("concat", key, ns).add(arg)
            cur = m["concat"].get((key, ns))
            m["concat"][(key, ns)] = arg if cur is None else concat(cur, arg)
        elif kind == "sumcount_add":
            self._at("sumcount", key, ns).add(arg)
            s, c = m["sumcount"].get((key, ns), (0, 0))
            m["sumcount"][(key, ns)] = (s + arg, c + 1)
        elif kind == "count_add":
            self._at("count", key, ns).add(arg)
            m["count"][(key, ns)] = m["count"].get((key, ns), 0) + 1
        elif kind == "merging_clear":
            self._at(arg, key, ns).clear()
            m[arg].pop((key, ns), None)
        elif kind in ("event_timer", "processing_timer", "event_timer_delete",
                      "processing_timer_delete"):
            self.backend.set_current_key(key)
            ts = self.backend.timer_service
            target = (self.model.event_timers if kind.startswith("event")
                      else self.model.processing_timers)
            if kind == "event_timer":
                ts.register_event_time_timer(arg, ns)
                target.add((arg, key, ns))
            elif kind == "processing_timer":
                ts.register_processing_time_timer(arg, ns)
                target.add((arg, key, ns))
            elif kind == "event_timer_delete":
                ts.delete_event_time_timer(arg, ns)
                target.discard((arg, key, ns))
            else:
                ts.delete_processing_time_timer(arg, ns)
                target.discard((arg, key, ns))
        elif kind == "op_add":
            name, mode, value = arg
            self.backend.operator_state.get_list_state(name, mode).add(value)
            self.model.operator.setdefault(name, (mode, []))[1].append(value)
        else:  # pragma: no cover - a typo in a test
            raise AssertionError(f"unknown op {kind}")


# ---- hypothesis strategies --------------------------------------------------------------

def key_strategy(key_type: Any) -> st.SearchStrategy:
    if key_type is int:
        return st.integers(-5, 40)
    if key_type is str:
        return st.sampled_from(["", "a", "bb", "key-3", "ü", "x" * 30] +
                               [f"k{i}" for i in range(20)])
    if key_type == (str, int):
        return st.tuples(st.sampled_from(["a", "b", "longer key"]), st.integers(0, 6))
    raise AssertionError(key_type)


def op_strategy(key_type: Any, with_operator_state: bool = True) -> st.SearchStrategy:
    keys = key_strategy(key_type)
    nss = st.sampled_from(NAMESPACES)
    small = st.integers(-1000, 1000)
    text = st.text(alphabet="abcxyz,", max_size=4)
    scalar = st.one_of(small, text, st.booleans(), st.floats(allow_nan=False, width=32),
                       st.binary(max_size=4))
    elem = st.one_of(small, text)
    ts = st.integers(-50, 200)

    def op(name, arg):
        return st.tuples(st.just(name), keys, nss, arg)

    ops = [
        op("value_update", st.one_of(scalar, st.none(), st.tuples(small, text))),
        op("value_clear", st.none()),
        op("list_add", elem),
        op("list_add_all", st.lists(elem, max_size=3)),
        op("list_update", st.lists(elem, max_size=3)),
        op("list_clear", st.none()),
        op("map_put", st.tuples(st.one_of(small, text), st.one_of(scalar, st.none()))),
        op("map_put_all", st.dictionaries(st.integers(0, 5), small, max_size=3)),
        op("map_remove", st.one_of(small, text)),
        op("map_clear", st.none()),
        op("sorted_put", st.tuples(st.integers(-(1 << 40), 1 << 40) | st.integers(-3, 3), text)),
        op("sorted_remove", st.integers(-3, 3)),
        op("sum_add", small),
        op("concat_add", text),
        op("sumcount_add", small),
        op("count_add", elem),
        op("merging_clear", st.sampled_from(["sum", "concat", "sumcount", "count"])),
        op("event_timer", ts),
        op("processing_timer", ts),
        op("event_timer_delete", ts),
        op("processing_timer_delete", ts),
    ]
    if with_operator_state:
        ops.append(op("op_add", st.tuples(st.sampled_from(["offsets", "buffer"]), st.just(None),
                                          elem).map(lambda t: (t[0], "split" if t[0] == "offsets"
                                                               else "union", t[2]))))
    return st.one_of(*ops)


# ---- reading a backend back -------------------------------------------------------------

def dump_states(backend: KeyedStateBackend, namespaces: Iterable[Any] = NAMESPACES) -> dict:
    """Everything the backend holds, in the model's shape, read through the public API."""
    out: dict[str, dict] = {}
    handles = {d.name: backend.get_state(d) for d in descriptors()}
    for name, h in handles.items():
        per: dict = {}
        for ns in namespaces:
            for key in backend.get_keys(name, ns):
                backend.set_current_key(key)
                h.set_current_namespace(ns)
                kind = KINDS[name]
                if kind == "value":
                    per[(key, ns)] = h.value()
                elif kind == "list":
                    per[(key, ns)] = h.get()
                elif kind == "map":
                    per[(key, ns)] = dict(h.entries())
                elif kind == "sorted_map":
                    items = list(h.entries())
                    assert items == sorted(items, key=lambda kv: kv[0]), \
                        f"sorted map of {key!r}/{ns!r} iterates out of order: {items}"
                    per[(key, ns)] = dict(items)
                else:
                    per[(key, ns)] = h.get()
        out[name] = per
    return out


def fire_all(backend: KeyedStateBackend) -> tuple[list, list]:
    """Fires every timer (destructive); checks time order and the current key per timer."""
    ts = backend.timer_service
    fired = {}
    for kind, gen in (("event", ts.advance_watermark(FAR_FUTURE)),
                      ("processing", ts.advance_processing_time(FAR_FUTURE))):
        out = []
        for t in gen:
            assert backend.get_current_key() == t.key
            out.append((t.timestamp, t.key, t.namespace))
        stamps = [t[0] for t in out]
        assert stamps == sorted(stamps), f"{kind} timers fired out of time order: {stamps}"
        fired[kind] = out
    return fired["event"], fired["processing"]


def assert_backend_matches(backend: KeyedStateBackend, model: Model, timers: bool = True) -> None:
    got = dump_states(backend)
    for name in STATE_NAMES:
        want = model.states[name]
        assert got[name] == want, _diff(name, got[name], want)
        assert backend.num_state_entries(name) == model.entry_count(name), \
            f"state '{name}' has entries outside the model's namespaces or keys"
    if timers:
        assert backend.timer_service.num_event_time_timers() == len(model.event_timers)
        assert backend.timer_service.num_processing_time_timers() == len(model.processing_timers)
        event, processing = fire_all(backend)
        assert sorted(event, key=repr) == sorted(model.event_timers, key=repr)
        assert sorted(processing, key=repr) == sorted(model.processing_timers, key=repr)
        assert len(event) == len(set(event)) and len(processing) == len(set(processing))


def _diff(name: str, got: dict, want: dict) -> str:
    missing = {k: want[k] for k in want.keys() - got.keys()}
    extra = {k: got[k] for k in got.keys() - want.keys()}
    wrong = {k: (got[k], want[k]) for k in got.keys() & want.keys() if got[k] != want[k]}
    return (f"state '{name}' differs from the model: missing {list(missing.items())[:5]}, "
            f"extra {list(extra.items())[:5]}, wrong (got, want) {list(wrong.items())[:5]}")


def new_backend(root: str, max_parallelism: int = 128, key_group_range: KeyGroupRange | None = None,
                key_type: Any = int) -> KeyedStateBackend:
    return KeyedStateBackend(os.path.join(root, f"b-{uuid.uuid4().hex[:8]}"), max_parallelism,
                             key_group_range, key_type)


def keys_in_range(keys: Iterable[Any], kgr: KeyGroupRange, max_parallelism: int,
                  key_type: Any) -> list:
    from stateengine import assign_key_group

    return [k for k in keys if assign_key_group(k, max_parallelism, key_type) in kgr]


def random_ops(rng, keys: list, count: int, namespaces=NAMESPACES) -> list[tuple]:
    """``count`` operations of every kind on random keys and namespaces (no operator state)."""
    out = []
    for _ in range(count):
        key, ns, n = rng.choice(keys), rng.choice(namespaces), rng.randrange(-100, 1000)
        kind = rng.randrange(17)
        out.append([
            ("value_update", key, ns, n if n % 4 else f"v{n}"),
            ("value_clear", key, ns, None),
            ("list_add", key, ns, n),
            ("list_add_all", key, ns, [n, str(n)]),
            ("list_update", key, ns, [n] if n % 3 else []),
            ("map_put", key, ns, (n % 7, None if n % 5 == 0 else n)),
            ("map_remove", key, ns, n % 7),
            ("map_clear", key, ns, None) if n % 6 == 0 else ("map_put", key, ns, ("k", n)),
            ("sorted_put", key, ns, (n % 11 - 5, f"s{n}")),
            ("sorted_remove", key, ns, n % 11 - 5),
            ("sum_add", key, ns, n),
            ("concat_add", key, ns, chr(97 + n % 26)),
            ("sumcount_add", key, ns, n),
            ("count_add", key, ns, n),
            ("merging_clear", key, ns, rng.choice(["sum", "concat", "sumcount", "count"])),
            ("event_timer", key, ns, n) if n % 5 else ("event_timer_delete", key, ns, n),
            ("processing_timer", key, ns, n) if n % 5 else ("processing_timer_delete", key, ns, n),
        ][kind])
    return out


def peek_timers(backend: KeyedStateBackend, which: str = "event") -> set:
    """The timers of a backend with single bigint keys, read without firing them: parses the
    raw timer column family ([kg][ts ^ sign bit, BE][key BE][namespace ANY])."""
    from stateengine.timers import EVENT_TIME_CF, PROCESSING_TIME_CF

    name = EVENT_TIME_CF if which == "event" else PROCESSING_TIME_CF
    cf = backend._cf_index.get(name)
    if cf is None:
        return set()
    assert backend.key_codecs == (2,), "peek_timers reads bigint keys only"
    prefix = 1 if backend.max_parallelism <= 128 else 2
    out = set()
    for raw, value in backend._raw_scan(cf):
        assert value == b""
        ts = int.from_bytes(raw[prefix:prefix + 8], "big") ^ (1 << 63)
        ts = ts - (1 << 64) if ts >= 1 << 63 else ts
        key = int.from_bytes(raw[prefix + 8:prefix + 16], "big", signed=True)
        out.add((ts, key, _decode_any(raw[prefix + 16:])))
    return out


def _decode_any(b: bytes) -> Any:
    """Decodes the ANY encodings the tests use for namespaces (None, int, str, bytes)."""
    tag, body = b[0], b[1:]
    if tag == 0:
        assert not body
        return None
    if tag == 1:
        assert len(body) == 8
        return int.from_bytes(body, "big", signed=True)
    if tag in (3, 4):
        n, shift, i = 0, 0, 0
        while True:  # varint length
            byte = body[i]
            n |= (byte & 0x7F) << shift
            i += 1
            if not byte & 0x80:
                break
            shift += 7
        data = body[i:i + n]
        assert i + n == len(body)
        return data.decode() if tag == 3 else data
    raise AssertionError(f"unexpected ANY tag {tag}")
