"""Event-time and processing-time timers (Flink's InternalTimerService semantics).

Timers belong to (timestamp, key, namespace); registering the same one twice keeps one;
advancing the watermark fires every timer with timestamp <= watermark in time order, across
all key groups, with the backend's current key set to the timer's key. Timers registered or
deleted while firing take effect within the same advance, as in Flink, except that a timer
registered at or before the timer firing waits for the next advance, so that every advance
ends (in Flink, a timer that re-registers itself fires forever).
"""

from __future__ import annotations

import datetime
import random

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from stateengine import KeyedStateBackend, KeyGroupRange, Timer, ValueStateDescriptor

MIN_TS, MAX_TS = -(1 << 63), (1 << 63) - 1


@pytest.fixture
def backend(tmp_path):
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    yield b
    b.dispose()


def register(b, key, ts, ns=None, kind="event"):
    b.set_current_key(key)
    if kind == "event":
        b.timer_service.register_event_time_timer(ts, ns)
    else:
        b.timer_service.register_processing_time_timer(ts, ns)


def fired(gen, b):
    out = []
    for t in gen:
        assert isinstance(t, Timer)
        assert b.get_current_key() == t.key
        out.append((t.timestamp, t.key, t.namespace))
    return out


def test_time_order_across_key_groups(backend):
    rng = random.Random(1)
    timers = set()
    for key in range(400):  # spread over all 128 key groups
        for _ in range(3):
            ts = rng.randrange(-500, 500)
            register(backend, key, ts, ns=key % 3)
            timers.add((ts, key, key % 3))
    groups = {backend.key_group_of(k) for _, k, _ in timers}
    assert len(groups) > 100
    ts = backend.timer_service
    assert ts.num_event_time_timers() == len(timers)
    assert ts.next_event_time() == min(t[0] for t in timers)
    first = fired(ts.advance_watermark(0), backend)
    assert [t[0] for t in first] == sorted(t[0] for t in first)
    assert set(first) == {t for t in timers if t[0] <= 0} and len(first) == len(set(first))
    assert ts.current_watermark == 0
    assert ts.next_event_time() == min(t[0] for t in timers if t[0] > 0)
    rest = fired(ts.advance_watermark(MAX_TS), backend)
    assert [t[0] for t in rest] == sorted(t[0] for t in rest)
    assert set(rest) == {t for t in timers if t[0] > 0}
    assert ts.next_event_time() is None
    assert ts.num_event_time_timers() == 0


def test_watermark_only_moves_forward(backend):
    register(backend, 1, 10)
    ts = backend.timer_service
    assert fired(ts.advance_watermark(20), backend) == [(10, 1, None)]
    register(backend, 2, 15)  # already behind the watermark: fires at the next advance
    assert fired(ts.advance_watermark(5), backend) == []
    assert ts.current_watermark == 20
    assert fired(ts.advance_watermark(20), backend) == [(15, 2, None)]


def test_extreme_and_negative_timestamps_keep_their_order(backend):
    stamps = [MAX_TS, MIN_TS, -1, 0, 1, -(1 << 40), 1 << 40, MAX_TS - 1, MIN_TS + 1]
    for i, t in enumerate(stamps):
        register(backend, i, t)
    got = fired(backend.timer_service.advance_watermark(MAX_TS), backend)
    assert [t[0] for t in got] == sorted(stamps)


def test_identical_timers_are_deduplicated(backend):
    ts = backend.timer_service
    for _ in range(3):
        register(backend, 1, 100, "w")
    register(backend, 1, 100, "other")  # another namespace
    register(backend, 2, 100, "w")  # another key
    register(backend, 1, 101, "w")  # another time
    assert ts.num_event_time_timers() == 4
    got = fired(ts.advance_watermark(200), backend)
    assert sorted(got, key=repr) == sorted([(100, 1, "w"), (100, 1, "other"), (100, 2, "w"),
                                            (101, 1, "w")], key=repr)


def test_delete_removes_exactly_one_timer(backend):
    ts = backend.timer_service
    register(backend, 1, 10, "a")
    register(backend, 1, 10, "b")
    register(backend, 2, 10, "a")
    backend.set_current_key(1)
    ts.delete_event_time_timer(10, "a")
    ts.delete_event_time_timer(11, "a")  # no such timer: nothing happens
    ts.delete_processing_time_timer(10, "b")  # another time domain: nothing happens
    assert sorted(fired(ts.advance_watermark(10), backend)) == [(10, 1, "b"), (10, 2, "a")]


def test_event_and_processing_time_are_independent(backend):
    ts = backend.timer_service
    register(backend, 1, 5, kind="event")
    register(backend, 1, 7, kind="processing")
    assert ts.next_event_time() == 5 and ts.next_processing_time() == 7
    assert fired(ts.advance_processing_time(100), backend) == [(7, 1, None)]
    assert ts.current_processing_time == 100
    assert ts.num_event_time_timers() == 1
    assert fired(ts.advance_watermark(100), backend) == [(5, 1, None)]


def test_timers_registered_while_firing(backend):
    """A due timer registered by a firing timer for a later time fires in the same advance,
    when it is the earliest one queued (Flink polls its timer queue one by one), so one
    between queued timers fires between them; a timer beyond the watermark waits, and one at
    or before the timer firing (the timer itself, or one in the past) fires at the next
    advance."""
    ts = backend.timer_service
    for key, t in ((1, 10), (2, 20), (3, 30), (4, 40)):
        register(backend, key, t)
    order = []
    for timer in ts.advance_watermark(35):
        order.append((timer.timestamp, timer.key))
        if timer.key == 1 and len(order) == 1:
            # the current key is the timer's key: these belong to key 1
            ts.register_event_time_timer(25)   # due, between 20 and 30
            ts.register_event_time_timer(10)   # the timer firing: next advance
            ts.register_event_time_timer(100)  # not due
        if timer.key == 2:
            backend.set_current_key(9)
            ts.register_event_time_timer(5)    # due, earlier than the timer firing: next advance
    assert order == [(10, 1), (20, 2), (25, 1), (30, 3)]
    assert ts.num_event_time_timers() == 4  # 5, 10 (kept for the next advance), 40 and 100
    assert ts.next_event_time() == 5
    assert fired(ts.advance_watermark(35), backend) == [(5, 9, None), (10, 1, None)]


def test_a_timer_that_re_registers_itself_fires_once_per_advance(backend):
    """In Flink such a callback loops forever: the timer is at once the earliest again."""
    ts = backend.timer_service
    register(backend, 1, 10, "w")
    register(backend, 2, 10, "w")
    for _ in range(3):
        got = []
        for timer in ts.advance_watermark(100):
            got.append((timer.timestamp, timer.key))
            assert len(got) < 10, "the advance does not end"
            ts.register_event_time_timer(timer.timestamp, "w")  # itself
            backend.set_current_key(3 - timer.key)
            ts.register_event_time_timer(timer.timestamp, "w")  # the other (queued, or fired)
        assert sorted(got) == [(10, 1), (10, 2)]
        assert ts.num_event_time_timers() == 2


def test_every_advance_ends_whatever_the_callbacks_register(backend):
    """Fresh timers at and before the one firing, on several keys, wait for the next advance."""
    ts = backend.timer_service
    register(backend, 1, 0)
    per_advance = []
    for _ in range(2):
        n = 0
        for timer in ts.advance_watermark(1 << 40):
            n += 1
            assert n < 1000, "the advance does not end"
            for k in (1, 2):
                backend.set_current_key(k)
                ts.register_event_time_timer(timer.timestamp, namespace=f"{n}-{k}")
                ts.register_event_time_timer(timer.timestamp - 1, namespace=f"{n}-{k}-past")
        per_advance.append(n)
    assert per_advance == [1, 4]
    assert ts.num_event_time_timers() == 16


def test_a_periodic_timer_catches_up_over_a_watermark_jump(backend):
    """Timers registered for later due times fire in the same advance, as in Flink."""
    ts = backend.timer_service
    register(backend, 1, 100)
    got = []
    for timer in ts.advance_watermark(1000):
        got.append(timer.timestamp)
        ts.register_event_time_timer(timer.timestamp + 100)
    assert got == list(range(100, 1001, 100))
    assert ts.next_event_time() == 1100


def test_timers_deleted_while_firing_do_not_fire(backend):
    ts = backend.timer_service
    for key, t in ((1, 10), (2, 20), (3, 30)):
        register(backend, key, t)
    got = []
    for timer in ts.advance_watermark(100):
        got.append(timer.key)
        if timer.key == 1:
            backend.set_current_key(3)
            ts.delete_event_time_timer(30)
    assert got == [1, 2]
    assert ts.num_event_time_timers() == 0


def test_a_timer_registered_again_while_queued_fires_once(backend):
    ts = backend.timer_service
    for key in range(5):
        register(backend, key, 10 + key, "w")
    got = []
    for timer in ts.advance_watermark(100):
        got.append(timer.key)
        if timer.key == 0:
            for key in range(1, 5):  # all of these are queued already
                register(backend, key, 10 + key, "w")
            register(backend, 3, 12, "w")  # a new one, due before key 3's
    assert got == [0, 1, 2, 3, 3, 4]
    assert ts.num_event_time_timers() == 0


def test_stopping_early_keeps_the_unfired_timers(backend):
    ts = backend.timer_service
    for key in range(30):
        register(backend, key, key)
    backend.set_current_key(100)
    gen = ts.advance_watermark(1000)
    first = [next(gen).key for _ in range(5)]
    gen.close()  # e.g. the consumer broke out of its loop
    assert first == [0, 1, 2, 3, 4]
    assert ts.num_event_time_timers() == 25
    assert backend.get_current_key() == 4
    for timer in ts.advance_watermark(1000):
        if timer.key == 10:
            break
    assert ts.num_event_time_timers() == 19
    assert [t.key for t in ts.advance_watermark(1000)] == list(range(11, 30))


def test_state_access_while_firing_uses_the_timers_key(backend):
    count = backend.get_state(ValueStateDescriptor("count", int, default=0))
    for key in range(50):
        backend.set_current_key(key)
        count.update(key)
        backend.timer_service.register_event_time_timer(key)
    for timer in backend.timer_service.advance_watermark(100):
        assert count.value() == timer.key
        count.update(-timer.key)
    for key in range(50):
        backend.set_current_key(key)
        assert count.value() == -key


def test_many_timers_fire_in_order_across_batches(backend):
    rng = random.Random(2)
    stamps = {}
    for key in range(25_000):
        stamps[key] = rng.randrange(1_000_000)
        register(backend, key, stamps[key], kind="processing")
    got = fired(backend.timer_service.advance_processing_time(MAX_TS), backend)
    assert len(got) == 25_000
    assert [t[0] for t in got] == sorted(stamps.values())
    assert {t[1]: t[0] for t in got} == stamps


@pytest.mark.parametrize("max_parallelism,start,end", [
    (128, 40, 80), (128, 0, 127), (128, 127, 127), (32768, 0, 300), (32768, 32000, 32767),
    (32768, 0, 32767), (300, 150, 299)])
def test_next_event_time_and_timers_of_a_sub_range(tmp_path, max_parallelism, start, end):
    kgr = KeyGroupRange(start, end)
    b = KeyedStateBackend(tmp_path / "b", max_parallelism, key_group_range=kgr, key_type=int)
    keys = [k for k in range(200_000) if b.key_group_of(k) in kgr][:300]
    assert keys
    for i, key in enumerate(keys):
        register(b, key, 1000 - i)
    assert b.timer_service.next_event_time() == 1000 - (len(keys) - 1)
    got = fired(b.timer_service.advance_watermark(MAX_TS), b)
    assert len(got) == len(keys)
    assert all(b.key_group_of(k) in kgr for _, k, _ in got)
    b.dispose()


def test_timestamps_are_ints_or_points_in_time(backend):
    backend.set_current_key(1)
    ts = backend.timer_service
    for bad in (1.5, "10", None, True, datetime.date(2024, 1, 1)):
        with pytest.raises(TypeError, match="int milliseconds since the epoch, datetime"):
            ts.register_event_time_timer(bad)
    with pytest.raises(ValueError, match="has no time zone"):  # which instant is unknown
        ts.register_event_time_timer(datetime.datetime(2024, 1, 1))
    ts.register_event_time_timer(np.int64(12))
    ts.register_processing_time_timer(np.int32(13))
    assert ts.next_event_time() == 12 and ts.next_processing_time() == 13
    utc = datetime.timezone.utc
    ts.register_event_time_timer(datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=utc))
    ts.register_event_time_timer(pd.Timestamp("1970-01-01 00:00:02", tz="Europe/Paris"))
    ts.naive_time_zone = "UTC"  # stateengine.spark sets Spark's session time zone
    ts.register_event_time_timer(pd.Timestamp("1970-01-01 00:00:03.0049"))
    ts.delete_event_time_timer(datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=utc))
    due = ts.advance_watermark(pd.Timestamp("1970-01-01 00:01"))
    # Paris was UTC+1 then; sub-millisecond parts are floored, as Spark floors microseconds
    assert [t.timestamp for t in due] == [2_000 - 3_600_000, 12, 3_004]
    assert ts.current_watermark == 60_000


def test_timers_without_a_key_type_yet(tmp_path):
    b = KeyedStateBackend(tmp_path / "b")
    assert list(b.timer_service.advance_watermark(10)) == []
    assert b.timer_service.next_event_time() is None
    register(b, "first key decides", 3)
    assert fired(b.timer_service.advance_watermark(10), b) == [(3, "first key decides", None)]
    b.dispose()


@pytest.mark.parametrize("kind", ["full", "incremental"])
def test_snapshot_between_two_fired_timers_keeps_the_unfired_ones(backend, tmp_path, kind):
    for key in range(20):
        register(backend, key, key)
    gen = backend.timer_service.advance_watermark(100)
    first = [next(gen).key for _ in range(3)]
    if kind == "full":
        handle = backend.snapshot(tmp_path / "cp", "s").result()
    else:
        handle = backend.checkpoint(1, tmp_path / "cp").result()
    rest = [t.key for t in gen]
    assert first + rest == list(range(20)), "every timer fires once, in order"
    assert backend.timer_service.num_event_time_timers() == 0
    restored = KeyedStateBackend.restore(tmp_path / "r", [handle])
    assert [t.key for t in restored.timer_service.advance_watermark(100)] == list(range(3, 20))
    restored.dispose()


# ---- against a reference model of Flink's timer queue -----------------------------------------

_NS = ("a", None, 7)


def _who(t):
    """Each timestamp belongs to one (key, namespace), so no two distinct timers tie and the
    firing order is fully determined."""
    return t // 10, _NS[t % 3]


_action = st.tuples(st.sampled_from(["register", "delete"]), st.integers(0, 299))
_step = st.one_of(
    st.tuples(st.just("register"), st.integers(0, 299)),
    st.tuples(st.just("delete"), st.integers(0, 299)),
    # advance: watermark, actions per fired timer (by firing index), stop after n fires
    st.tuples(st.just("advance"), st.integers(0, 320),
              st.lists(st.lists(_action, max_size=3), max_size=6),
              st.one_of(st.none(), st.integers(0, 5))),
)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(_step, max_size=25))
def test_firing_matches_flinks_timer_queue(tmp_path_factory, steps):
    b = KeyedStateBackend(tmp_path_factory.mktemp("timers") / "b", key_type=int)
    ts = b.timer_service
    queue: set[int] = set()  # the reference: Flink polls the smallest timer, one at a time

    def act(kind, t):
        key, ns = _who(t)
        b.set_current_key(key)
        if kind == "register":
            ts.register_event_time_timer(t, ns)
            queue.add(t)
        else:
            ts.delete_event_time_timer(t, ns)
            queue.discard(t)

    try:
        for step in steps:
            if step[0] != "advance":
                act(*step)
                continue
            _, watermark, actions, stop = step
            want, got = [], []
            # reference run on a copy of the actions' effects, computed first
            # (registrations at or before the timer firing wait for the next advance)
            ref_queue, deferred = set(queue), set()
            i = 0
            while ref_queue and min(ref_queue) <= watermark and (stop is None or i < stop):
                t = min(ref_queue)
                ref_queue.discard(t)
                want.append(t)
                for kind, t2 in (actions[i] if i < len(actions) else []):
                    if kind == "delete":
                        ref_queue.discard(t2)
                        deferred.discard(t2)
                    elif t2 <= t and t2 not in ref_queue:
                        deferred.add(t2)
                    else:
                        ref_queue.add(t2)
                i += 1
            ref_queue |= deferred
            gen = ts.advance_watermark(watermark)
            while stop is None or len(got) < stop:
                timer = next(gen, None)
                if timer is None:
                    break
                assert (timer.key, timer.namespace) == _who(timer.timestamp)
                queue.discard(timer.timestamp)
                got.append(timer.timestamp)
                for kind, t2 in (actions[len(got) - 1] if len(got) - 1 < len(actions) else []):
                    act(kind, t2)
            gen.close()  # stopping early keeps the unfired timers
            assert got == want
            assert queue == ref_queue
            assert ts.num_event_time_timers() == len(queue)
            assert ts.next_event_time() == (min(queue) if queue else None)
        rest = [t.timestamp for t in ts.advance_watermark(1000)]
        assert rest == sorted(queue)
    finally:
        b.dispose()
