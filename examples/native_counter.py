"""Per-user running counts and sessions over a generated click stream, on the native engine.

Two operators each own the key groups Flink would give them (KeyGroupRange.for_operator) and
every event goes to the operator owning its user's key group, the rule stateengine's Spark
routing uses. Each operator keeps, per user:

    clicks     ValueState                      running count of events
    daily      ValueState, namespace = day     events per day
    pages      MapState                        page -> views
    session    ListState                       (timestamp, page) of the open session
    sessions   ReducingState (native SUM)      closed sessions
    longest    ReducingState (native MAX)      longest closed session, in seconds
    spend      AggregatingState (Python)       average checkout amount

At the end every user's state is compared with a plain-Python recomputation of the stream.

    python examples/native_counter.py [--events 100000] [--users 300] [--seed 7]
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict

import stateengine
from stateengine import (AggregateFunction, AggregatingStateDescriptor, KeyedStateBackend,
                         KeyGroupRange, ListStateDescriptor, MapStateDescriptor,
                         ReducingStateDescriptor, ValueStateDescriptor, assign_key_group,
                         operator_for_key_group, reducers)

MAX_PARALLELISM = 128
OPERATORS = 2
SESSION_GAP = 30 * 60  # seconds without events that close a session
PAGES = ["home", "search", "product", "cart", "checkout", "help"]
DAY = 86_400


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0.0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def generate(n: int, users: int, seed: int):
    """(user, timestamp, page, amount) events in time order; a few heavy users, long pauses."""
    rng = random.Random(seed)
    names = [f"user-{i:04d}" for i in range(users)]
    weights = [1.0 / (1 + i) ** 0.8 for i in range(users)]
    ts = 1_700_000_000
    for _ in range(n):
        ts += rng.randint(0, 4)
        user = rng.choices(names, weights)[0]
        page = rng.choice(PAGES)
        amount = round(rng.uniform(5, 200), 2) if page == "checkout" else None
        yield user, ts, page, amount


class Operator:
    """One task's keyed state: a backend for its key-group range and its state handles."""

    def __init__(self, index: int, workdir: str) -> None:
        self.range = KeyGroupRange.for_operator(index, OPERATORS, MAX_PARALLELISM)
        self.backend = KeyedStateBackend(f"{workdir}/op-{index}", MAX_PARALLELISM, self.range,
                                         key_type=str)
        get = self.backend.get_state
        self.clicks = get(ValueStateDescriptor("clicks", value_type=int, default=0))
        self.daily = get(ValueStateDescriptor("daily", value_type=int, default=0,
                                              namespace_type=int))
        self.last_seen = get(ValueStateDescriptor("last_seen", value_type=int))
        self.pages = get(MapStateDescriptor("pages", user_key_type=str, value_type=int))
        self.session = get(ListStateDescriptor("session"))
        self.sessions = get(ReducingStateDescriptor("sessions", reducers.SUM, value_type=int))
        self.longest = get(ReducingStateDescriptor("longest", reducers.MAX, value_type=int))
        self.spend = get(AggregatingStateDescriptor("spend", Average()))

    def process(self, user: str, ts: int, page: str, amount: float | None) -> None:
        self.backend.set_current_key(user)
        last = self.last_seen.value()
        if last is not None and ts - last > SESSION_GAP:
            self._close_session()
        self.session.add((ts, page))
        self.last_seen.update(ts)
        self.clicks.update(self.clicks.value() + 1)
        self.daily.set_current_namespace(ts // DAY)
        self.daily.update(self.daily.value() + 1)
        self.pages.put(page, (self.pages.get(page) or 0) + 1)
        if amount is not None:
            self.spend.add(amount)

    def _close_session(self) -> None:
        events = self.session.get()
        self.sessions.add(1)
        self.longest.add(events[-1][0] - events[0][0])
        self.session.clear()


def recompute(events):
    """The same per-user facts with plain dicts: the reference the engine must match."""
    ref = defaultdict(lambda: {"clicks": 0, "daily": defaultdict(int), "pages": defaultdict(int),
                               "session": [], "sessions": 0, "longest": None, "spend": []})
    for user, ts, page, amount in events:
        r = ref[user]
        if r["session"] and ts - r["session"][-1][0] > SESSION_GAP:
            length = r["session"][-1][0] - r["session"][0][0]
            r["sessions"] += 1
            r["longest"] = length if r["longest"] is None else max(r["longest"], length)
            r["session"] = []
        r["session"].append((ts, page))
        r["clicks"] += 1
        r["daily"][ts // DAY] += 1
        r["pages"][page] += 1
        if amount is not None:
            r["spend"].append(amount)
    return ref


def verify(operators, events) -> int:
    mismatches = 0
    for user, r in recompute(events).items():
        op = operators[operator_for_key_group(assign_key_group(user, MAX_PARALLELISM), OPERATORS,
                                              MAX_PARALLELISM)]
        op.backend.set_current_key(user)
        got = {"clicks": op.clicks.value(), "pages": dict(op.pages.entries()),
               "session": op.session.get(), "sessions": op.sessions.get() or 0,
               "longest": op.longest.get()}
        want = {"clicks": r["clicks"], "pages": dict(r["pages"]), "session": r["session"],
                "sessions": r["sessions"], "longest": r["longest"]}
        for day, n in r["daily"].items():
            op.daily.set_current_namespace(day)
            if op.daily.value() != n:
                mismatches += 1
        avg = op.spend.get()
        if r["spend"]:
            ok_spend = avg is not None and math.isclose(avg, sum(r["spend"]) / len(r["spend"]))
        else:
            ok_spend = avg is None
        if got != want or not ok_spend:
            mismatches += 1
            print(f"  MISMATCH for {user}: engine {got} / reference {want}", file=sys.stderr)
    return mismatches


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="stateengine-demo-")
    operators = [Operator(i, workdir) for i in range(OPERATORS)]
    print(f"stateengine {stateengine.__version__}: {OPERATORS} operators over "
          f"{MAX_PARALLELISM} key groups: {', '.join(str(op.range) for op in operators)}")
    events = list(generate(args.events, args.users, args.seed))
    start = time.perf_counter()
    routed = [0] * OPERATORS
    step = max(1, len(events) // 5)
    try:
        for i, (user, ts, page, amount) in enumerate(events, 1):
            kg = assign_key_group(user, MAX_PARALLELISM)
            index = operator_for_key_group(kg, OPERATORS, MAX_PARALLELISM)
            operators[index].process(user, ts, page, amount)
            routed[index] += 1
            if i % step == 0 or i == len(events):
                rate = i / (time.perf_counter() - start)
                print(f"  {i:>9,} events processed ({rate:,.0f}/s), per operator {routed}")

        print("summary:")
        for i, op in enumerate(operators):
            users = list(op.backend.get_keys("clicks"))
            closed = 0
            for user in users:
                op.backend.set_current_key(user)
                closed += op.sessions.get() or 0
            print(f"  operator {i} {op.range}: {len(users)} users, {closed} closed sessions, "
                  f"{op.backend.num_state_entries()} RocksDB entries")
        first = operators[0]
        clicks_by_user = {}
        for user in first.backend.get_keys("clicks"):
            first.backend.set_current_key(user)
            clicks_by_user[user] = first.clicks.value()
        top = max(clicks_by_user, key=clicks_by_user.get)
        first.backend.set_current_key(top)
        print(f"  busiest user on operator 0: {top} with {clicks_by_user[top]} clicks, "
              f"pages {dict(first.pages.entries())}")
        usage = stateengine.memory_usage()
        print(f"  memory budget {usage['budget'] >> 20} MiB, block cache in use "
              f"{usage['cache'] / (1 << 20):.1f} MiB")
        mismatches = verify(operators, events)
    finally:
        for op in operators:
            op.backend.close()
        shutil.rmtree(workdir, ignore_errors=True)
    if mismatches:
        print(f"FAILED: {mismatches} users disagree with the plain-Python recomputation")
        return 1
    print("OK: every user's state agrees with a plain-Python recomputation of the stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
