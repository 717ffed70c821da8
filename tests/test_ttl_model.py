"""Model-based test of State TTL: random scalar and batch reads and writes of value, list and
map state with TTL, clock moves, full snapshot + restore and compactions, run against the engine
and against a plain Python model of Flink's TTL rules with the same clock (stateengine/ttl.py);
both must always agree, under every update type and visibility.

The suite runs 40 examples; a longer campaign:
``STATEENGINE_TTL_EXAMPLES=2000 python -m pytest tests/test_ttl_model.py``."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from stateengine import (KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
                         StateTtlConfig, ValueStateDescriptor)

TTL = 10
KEYS = ["a", "b", "c"]
USER_KEYS = [0, 1, 2]
CONFIGS = [StateTtlConfig(TTL, u, v) for u in ("OnCreateAndWrite", "OnReadAndWrite")
           for v in ("NeverReturnExpired", "ReturnExpiredIfNotCleanedUp")]

keys = st.sampled_from(KEYS)
distinct_keys = st.lists(keys, min_size=1, max_size=3, unique=True)
elements = st.integers(-3, 3) | st.text(max_size=2)
values = st.none() | elements


def expired(ts: int, now: int) -> bool:
    return ts + TTL <= now


class TtlModel:
    """Flink's TTL rules over plain dicts: value[key] = (v, ts), lists[key] = [(e, ts)...],
    maps[key][uk] = (v, ts)."""

    def __init__(self, cfg: StateTtlConfig) -> None:
        self.on_read = cfg.update_on_read
        self.show_expired = cfg.return_expired
        self.values: dict = {}
        self.lists: dict = {}
        self.maps: dict = {}

    # A read of one entry: expired -> cleaned up (returned only under ReturnExpired...);
    # alive -> returned, restamped under OnReadAndWrite.
    def _read(self, table: dict, k, now: int):
        if k not in table:
            return None
        v, ts = table[k]
        if expired(ts, now):
            del table[k]
            return v if self.show_expired else None
        if self.on_read:
            table[k] = (v, now)
        return v

    def value_get(self, k, now):
        return self._read(self.values, k, now)

    def list_get(self, k, now):
        elems = self.lists.get(k, [])
        alive = [(e, ts) for e, ts in elems if not expired(ts, now)]
        shown = [e for e, _ in (elems if self.show_expired else alive)]
        if elems and not alive:
            del self.lists[k]
        elif alive and self.on_read:
            self.lists[k] = [(e, now) for e, _ in alive]
        elif len(alive) < len(elems):  # the read drops the expired elements (Flink)
            self.lists[k] = alive
        return shown

    def map_get(self, k, uk, now):
        return self._read(self.maps.setdefault(k, {}), uk, now)

    def map_contains(self, k, uk, now):
        m = self.maps.setdefault(k, {})
        if uk not in m:
            return False
        visible = self.show_expired or not expired(m[uk][1], now)
        self._read(m, uk, now)
        return visible

    def map_entries(self, k, now):
        m = self.maps.setdefault(k, {})
        out = []
        for uk in sorted(m):
            visible = self.show_expired or not expired(m[uk][1], now)
            v = self._read(m, uk, now)
            if visible:
                out.append((uk, v))
        return out

    def visible_value_keys(self, now):
        return {k for k, (_, ts) in self.values.items() if self.show_expired or not expired(ts, now)}

    def purge(self, now):
        """What snapshots and compactions drop at now."""
        self.values = {k: e for k, e in self.values.items() if not expired(e[1], now)}
        self.lists = {k: kept for k, kept in ((k, [x for x in l if not expired(x[1], now)])
                                              for k, l in self.lists.items()) if kept}
        self.maps = {k: {uk: e for uk, e in m.items() if not expired(e[1], now)}
                     for k, m in self.maps.items()}


class TtlStateMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="stateengine-ttl-model-")
        self.generation = 0
        self.backend = None

    def _open(self, backend: KeyedStateBackend) -> None:
        self.backend = backend
        self.descs = [ValueStateDescriptor("v", ttl=self.cfg), ListStateDescriptor("l", ttl=self.cfg),
                      MapStateDescriptor("m", user_key_type=int, ttl=self.cfg)]
        self.v, self.l, self.m = (backend.get_state(d) for d in self.descs)
        backend.set_ttl_time(self.now)

    @initialize(cfg=st.sampled_from(CONFIGS))
    def start(self, cfg):
        self.cfg = cfg
        self.model = TtlModel(cfg)
        self.now = 1000
        self._open(KeyedStateBackend(f"{self.dir}/b0"))

    def teardown(self):
        if self.backend is not None:
            self.backend.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(dt=st.integers(0, 2 * TTL))
    def advance(self, dt):
        self.now += dt
        self.backend.set_ttl_time(self.now)

    # ---- value --------------------------------------------------------------------------

    @rule(k=keys, v=values)
    def value_update(self, k, v):
        self.backend.set_current_key(k)
        self.v.update(v)
        if v is None:
            self.model.values.pop(k, None)
        else:
            self.model.values[k] = (v, self.now)

    @rule(ks=distinct_keys, vs=st.lists(elements, min_size=3, max_size=3))
    def value_put_many(self, ks, vs):
        self.v.put_many(ks, vs[:len(ks)])
        for k, v in zip(ks, vs):
            self.model.values[k] = (v, self.now)

    @rule(k=keys)
    def value_get(self, k):
        self.backend.set_current_key(k)
        assert self.v.value() == self.model.value_get(k, self.now)

    @rule(ks=distinct_keys)
    def value_get_many(self, ks):
        got, found = self.v.get_many(ks)
        want = [self.model.value_get(k, self.now) for k in ks]
        assert list(got) == want
        assert [bool(f) for f in found] == [w is not None for w in want]

    @rule()
    def value_keys(self):
        assert set(self.backend.get_keys("v")) == self.model.visible_value_keys(self.now)

    # ---- list ---------------------------------------------------------------------------

    @rule(k=keys, es=st.lists(elements, max_size=3), how=st.sampled_from(["add", "all", "update"]))
    def list_write(self, k, es, how):
        self.backend.set_current_key(k)
        stamped = [(e, self.now) for e in es]
        if how == "add" and es:
            self.l.add(es[0])
            self.model.lists.setdefault(k, []).append(stamped[0])
        elif how == "all":
            self.l.add_all(es)
            if es:
                self.model.lists.setdefault(k, []).extend(stamped)
        elif how == "update":
            self.l.update(es)
            if es:
                self.model.lists[k] = stamped
            else:
                self.model.lists.pop(k, None)

    @rule(ks=st.lists(keys, min_size=1, max_size=4), es=st.lists(elements, min_size=4, max_size=4))
    def list_add_many(self, ks, es):
        self.l.add_many(ks, es[:len(ks)])
        for k, e in zip(ks, es):
            self.model.lists.setdefault(k, []).append((e, self.now))

    @rule(k=keys)
    def list_get(self, k):
        self.backend.set_current_key(k)
        assert self.l.get() == self.model.list_get(k, self.now)

    @rule(ks=distinct_keys)
    def list_get_many(self, ks):
        assert self.l.get_many(ks) == [self.model.list_get(k, self.now) for k in ks]

    # ---- map ----------------------------------------------------------------------------

    @rule(k=keys, uk=st.sampled_from(USER_KEYS), v=values)
    def map_put(self, k, uk, v):
        self.backend.set_current_key(k)
        self.m.put(uk, v)
        self.model.maps.setdefault(k, {})[uk] = (v, self.now)

    @rule(pairs=st.lists(st.tuples(keys, st.sampled_from(USER_KEYS), values), min_size=1,
                         max_size=4))
    def map_put_many(self, pairs):
        self.m.put_many([p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs])
        for k, uk, v in pairs:
            self.model.maps.setdefault(k, {})[uk] = (v, self.now)

    @rule(k=keys, uk=st.sampled_from(USER_KEYS), how=st.sampled_from(["get", "contains", "remove"]))
    def map_point(self, k, uk, how):
        self.backend.set_current_key(k)
        if how == "get":
            assert self.m.get(uk) == self.model.map_get(k, uk, self.now)
        elif how == "contains":
            assert self.m.contains(uk) == self.model.map_contains(k, uk, self.now)
        else:
            self.m.remove(uk)
            self.model.maps.setdefault(k, {}).pop(uk, None)

    @rule(pairs=st.lists(st.tuples(keys, st.sampled_from(USER_KEYS)), min_size=1, max_size=3,
                         unique=True))
    def map_get_many(self, pairs):
        got, found = self.m.get_many([p[0] for p in pairs], [p[1] for p in pairs])
        present = [(uk in self.model.maps.get(k, {})) and
                   (self.cfg.return_expired or not expired(self.model.maps[k][uk][1], self.now))
                   for k, uk in pairs]
        want = [self.model.map_get(k, uk, self.now) for k, uk in pairs]
        assert list(got) == want and [bool(f) for f in found] == present

    @rule(k=keys)
    def map_entries(self, k):
        self.backend.set_current_key(k)
        assert list(self.m.entries()) == self.model.map_entries(k, self.now)

    # ---- snapshots and compactions --------------------------------------------------------

    @rule()
    def snapshot_and_restore(self):
        handle = self.backend.snapshot(f"{self.dir}/snaps", f"s{self.generation}").result()
        self.backend.close()
        self.generation += 1
        self._open(KeyedStateBackend.restore(f"{self.dir}/b{self.generation}", [handle],
                                             descriptors=self.descs))
        self.model.purge(self.now)

    @rule()
    def compact(self):
        self.backend._native_flush()
        self.backend._native_compact()
        self.model.purge(self.now)


TestTtlModel = TtlStateMachine.TestCase
EXAMPLES = int(os.environ.get("STATEENGINE_TTL_EXAMPLES", 40))
TestTtlModel.settings = settings(max_examples=EXAMPLES, stateful_step_count=40, deadline=None,
                                 suppress_health_check=[HealthCheck.too_slow])
