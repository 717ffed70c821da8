"""The typed states of typed-before-evolution.tar.gz and their contents (shared by the script
that wrote the fixture and by tests/test_schema_evolution.py, which restores it)."""
from decimal import Decimal

from stateengine import (AggregateFunction, ListStateDescriptor, MapStateDescriptor,
                         ReducingStateDescriptor, StateTtlConfig, ValueStateDescriptor,
                         AggregatingStateDescriptor)

SESSION = "count bigint, last string, tags array<string>, score float, amount decimal(7,2)"
EVENT = "ts int, kind string"
ATTR = "n int, note string"
TOTAL = "sum int, n int"
ACC = "sum double, n int"
RECENT = "v int"
KEYS = range(40)
TTL_TIME = 1_000


def add_totals(a, b):
    return (a[0] + b[0], a[1] + b[1])


class Mean(AggregateFunction):
    def create_accumulator(self):
        return (0.0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1] if acc[1] else None

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def descriptors(session=SESSION, event=EVENT, attr=ATTR, total=TOTAL, acc=ACC, recent=RECENT,
                evolve=None):
    """The fixture's descriptors; ``evolve={state: (renamed_from, field_defaults)}``."""
    evolve = evolve or {}
    def kw(name):  # nothing when not evolving: the build that wrote the fixture had no such keywords
        if name not in evolve:
            return {}
        r, d = evolve[name]
        return {"renamed_from": r, "field_defaults": d}
    return [ValueStateDescriptor("session", session, **kw("session")),
            ListStateDescriptor("events", event, **kw("events")),
            MapStateDescriptor("attrs", "string", attr, **kw("attrs")),
            ReducingStateDescriptor("total", add_totals, total, **kw("total")),
            AggregatingStateDescriptor("acc", Mean(), acc, **kw("acc")),
            ListStateDescriptor("recent", recent, ttl=StateTtlConfig(ttl_ms=10**9),
                                **kw("recent"))]


def expected(k):
    """What every state holds for key k after the fixture's two versions (as written)."""
    return {
        "session": (2 * k, f"s{k}", [f"t{k}", "x"] if k % 3 else [], float(k) + 0.5,
                    Decimal(k * 101) / 100),
        "events": [(k, "open"), (k + 1, "close")],
        "attrs": {"a": (k, None), **({"b": (-k, "neg")} if k % 2 else {})},
        "total": (3 * k, 2),
        "acc": (2.0 * k, 2),
        "recent": [(k,), (k * 2,)],
    }
