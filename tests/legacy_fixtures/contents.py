"""What the legacy fixtures hold: written by make_fixtures.py with stateengine as it was before
the native container codec (commit 3e49f5c, snapshot format 1, pickling ANY codec), read back by
tests/test_legacy_checkpoints.py with today's code.

Two contents:

- ``primitive``: only values the old ANY codec stored natively (int, float, str, bytes, bool,
  None), primitive namespaces and user keys, timers, no operator state. Nothing in it is a
  pickle, so it restores with the default settings.
- ``mixed``: everything ``primitive`` holds plus what the old code pickled: tuples, lists,
  dicts and big ints as values, list elements, map user keys, namespaces and timer namespaces;
  a ``value_type="pickle"`` state; a Python aggregate with a tuple accumulator; operator state.

This module must run on the old code too: it uses only the API both versions share.
"""

from __future__ import annotations

from typing import Any

from stateengine import (AggregateFunction, AggregatingStateDescriptor, ListStateDescriptor,
                         MapStateDescriptor, ReducingStateDescriptor, SortedMapStateDescriptor,
                         ValueStateDescriptor, reducers)

KINDS = ("primitive", "mixed")
KEYS = [f"user-{i}" for i in range(8)]  # str keys: variable length, so namespaces get suffixes
TIMER_STAMPS = (1_000, 1_500)


class MeanOfPairs(AggregateFunction):
    """Accumulator (sum, count): a tuple, which the old codec pickled."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def widest(a, b):
    """Reduce function over (low, high) tuples."""
    return (min(a[0], b[0]), max(a[1], b[1]))


def descriptors(kind: str) -> list:
    out = [
        ValueStateDescriptor("count", value_type=int),
        ValueStateDescriptor("any"),
        ListStateDescriptor("events"),
        MapStateDescriptor("pages"),
        ValueStateDescriptor("windows", namespace_type=object),
        ReducingStateDescriptor("total", reducers.SUM),
        SortedMapStateDescriptor("prices", float),
    ]
    if kind == "mixed":
        out += [
            AggregatingStateDescriptor("mean", MeanOfPairs()),
            ReducingStateDescriptor("span", widest),
            ValueStateDescriptor("blob", value_type="pickle"),
        ]
    return out


def _any_value(kind: str, i: int) -> Any:
    primitive = [i, i * 0.5, f"s{i}", bytes([i, 0]), i % 2 == 0, -2**63 + i, 2**63 - 1 - i,
                 "é,\u4e16"]
    if kind == "primitive":
        return primitive[i % len(primitive)]
    mixed = [(i, "a"), [i, [i + 1, (i + 2,)]], {"k": i, "t": (1, 2), 3: None}, 2**70 + i,
             -(2**65) - i, {(1, "a"): [None, True, b"\x00"], 2.5: {}}, (), []]
    return mixed[i % len(mixed)]


def model(kind: str) -> dict[str, Any]:
    """The state after write(): {state: {key: value}} with namespaces and user keys inside."""
    m: dict[str, Any] = {n: {} for n in ("count", "any", "events", "pages", "windows", "total",
                                         "prices")}
    for i, k in enumerate(KEYS):
        m["count"][k] = i * 10
        m["any"][k] = _any_value(kind, i)
        events = [i, "e", 2.5, b"x"]
        if kind == "mixed":
            events += [(i, i), {"n": [i]}, 2**64 + i]
        m["events"][k] = events
        pages = {f"p{i}": i, i: f"v{i}", "nothing": None}
        if kind == "mixed":
            pages[("a", i)] = (i, [i])
            pages[2**80 + i] = {"big": True}
        m["pages"][k] = pages
        windows = {None: i, i % 3: i + 1, f"w{i}": i + 2}
        if kind == "mixed":
            windows[(i * 100, i * 100 + 99)] = i + 3
        m["windows"][k] = windows
        m["total"][k] = i + 0.5
        m["prices"][k] = {-1.5: "low", float(i): f"at {i}", 99.0: "high"}
    if kind == "mixed":
        m["mean"] = {k: (i * 3, 2) for i, k in enumerate(KEYS)}
        m["span"] = {k: (-i, i * 2) for i, k in enumerate(KEYS)}
        m["blob"] = {k: {"a": i, "set": frozenset({i})} for i, k in enumerate(KEYS)}
    m["__timers_event__"] = sorted(
        (ts + i, k, _timer_ns(kind, i)) for i, k in enumerate(KEYS) for ts in TIMER_STAMPS)
    m["__timers_processing__"] = sorted((5_000 + i, k, "p") for i, k in enumerate(KEYS))
    if kind == "mixed":
        m["__operator__"] = {"offsets": ("split", [0, 1, (2, "x"), {"o": 3}]),
                             "seen": ("union", ["a", [1, 2]])}
    return m


def _timer_ns(kind: str, i: int) -> Any:
    if kind == "mixed" and i % 2:
        return ("win", i)
    return None if i % 3 == 0 else i


def write(backend, kind: str, keys: list[str] | None = None) -> None:
    """Writes model(kind) for ``keys`` (default all) through the public API."""
    m = model(kind)
    handles = {d.name: backend.get_state(d) for d in descriptors(kind)}
    for i, k in enumerate(KEYS):
        if keys is not None and k not in keys:
            continue
        backend.set_current_key(k)
        handles["count"].update(m["count"][k])
        handles["any"].update(m["any"][k])
        handles["events"].add_all(m["events"][k])
        handles["pages"].put_all(m["pages"][k])
        for ns, v in m["windows"][k].items():
            handles["windows"].set_current_namespace(ns)
            handles["windows"].update(v)
        handles["windows"].set_current_namespace(None)
        handles["total"].add(i)
        handles["total"].add(0.5)
        handles["prices"].put_all(m["prices"][k])
        if kind == "mixed":
            handles["mean"].add(i)
            handles["mean"].add(2 * i)
            handles["span"].add((0, i * 2))
            handles["span"].add((-i, 0))
            handles["blob"].update(m["blob"][k])
        for ts, key, ns in m["__timers_event__"]:
            if key == k:
                backend.timer_service.register_event_time_timer(ts, ns)
        for ts, key, ns in m["__timers_processing__"]:
            if key == k:
                backend.timer_service.register_processing_time_timer(ts, ns)
    if kind == "mixed" and keys in (None, KEYS[:len(KEYS) // 2]):
        for name, (mode, elements) in m["__operator__"].items():
            state = backend.operator_state.get_list_state(name, mode)
            state.update(elements)


def read(backend, kind: str) -> dict[str, Any]:
    """Everything write() put there, read back through the public API in model()'s shape.

    Map entries are read twice, by iteration and by point lookups of the model's user keys,
    and namespaces by point access: both must find every entry (a user key or namespace must
    encode to the same bytes it was stored under)."""
    m = model(kind)
    handles = {d.name: backend.get_state(d) for d in descriptors(kind)}
    out: dict[str, Any] = {n: {} for n in m if not n.startswith("__")}
    for k in KEYS:
        backend.set_current_key(k)
        out["count"][k] = handles["count"].value()
        out["any"][k] = handles["any"].value()
        out["events"][k] = handles["events"].get()
        pages = dict(handles["pages"].entries())
        for uk in m["pages"][k]:
            assert handles["pages"].contains(uk), (k, uk)
            assert typed(handles["pages"].get(uk)) == typed(pages[uk]), (k, uk)
        out["pages"][k] = pages
        windows = {}
        for ns in m["windows"][k]:
            handles["windows"].set_current_namespace(ns)
            windows[ns] = handles["windows"].value()
        handles["windows"].set_current_namespace(None)
        out["windows"][k] = windows
        out["total"][k] = handles["total"].get()
        out["prices"][k] = dict(handles["prices"].entries())
        if kind == "mixed":
            out["mean"][k] = handles["mean"].get()
            out["span"][k] = handles["span"].get()
            out["blob"][k] = handles["blob"].value()
    ts = backend.timer_service
    out["__timers_event__"] = sorted((t.timestamp, t.key, t.namespace)
                                     for t in ts.advance_watermark(10**9))
    out["__timers_processing__"] = sorted((t.timestamp, t.key, t.namespace)
                                          for t in ts.advance_processing_time(10**9))
    op = backend.operator_state
    if op.state_names:
        out["__operator__"] = {n: (op._states[n].mode, op._states[n].get()) for n in op.state_names}
    return out


def typed(value: Any) -> Any:
    """A comparable form that tells tuple from list, int from float and bool from int."""
    if isinstance(value, dict):
        return ("dict", sorted(((repr(typed(k)), typed(v)) for k, v in value.items()), key=repr))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    if isinstance(value, frozenset):
        return ("frozenset", sorted(repr(typed(v)) for v in value))
    return (type(value).__name__, value)
