"""TTL times in range: an entry's expiry is its last access time plus its state's TTL, in int64
milliseconds. A TTL time (or a TTL) whose sum leaves that range is refused with
TtlTimeRangeError and changes nothing (before, 2**63 - 1 made every write read back as
expired and 2**63 raised a bare OverflowError); a stored last access time whose expiry leaves
it (written under a smaller TTL, raw bytes, damage) is refused by every read, and the entry
stays as it was."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from stateengine import (KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
                         ReducingStateDescriptor, StateRegistrationError, StateTtlConfig,
                         TtlTimeRangeError, ValueStateDescriptor)
from stateengine.reducers import SUM
from stateengine.spark.runtime import ttl_clock

MAX = (1 << 63) - 1
TTL = 60_000
CFG = StateTtlConfig(TTL)


def _backend(tmp_path, name="b"):
    return KeyedStateBackend(str(tmp_path / name), key_type=int)


def test_a_time_outside_int64_is_refused_not_overflowed(tmp_path):
    b = _backend(tmp_path)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=CFG))
    for t in (1 << 63, -(1 << 63), -(1 << 63) - 1, 1 << 70):
        with pytest.raises(TtlTimeRangeError, match=rf"TTL time {t} ms lies outside int64 "
                                                     rf"milliseconds"):
            b.set_ttl_time(t)
        assert b.ttl_time is None
    for t in (True, 1.5, "5"):
        with pytest.raises(TypeError, match="a TTL time is an int of milliseconds"):
            b.set_ttl_time(t)
    b.set_ttl_time(np.int64(1_000))  # numpy ints are ints
    b.set_current_key(1)
    v.update(1)
    with pytest.raises(TtlTimeRangeError):
        b.set_ttl_time(1 << 63)
    assert b.ttl_time == 1_000 and v.value() == 1
    b.close()


def test_a_time_whose_expiry_leaves_int64_is_refused(tmp_path):
    """2**63 - 1 used to make every write read back as expired (now + ttl clipped to the
    largest time, which is not after now). It is refused, naming the state and the largest
    time its TTL allows; that largest time works."""
    b = _backend(tmp_path)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=CFG))
    b.set_ttl_time(5)
    with pytest.raises(TtlTimeRangeError) as e:
        b.set_ttl_time(MAX)
    msg = str(e.value)
    assert f"plus the TTL of state 'v' ({TTL} ms) leaves int64 milliseconds" in msg
    assert f"at most {MAX - TTL} ms" in msg
    assert b.ttl_time == 5
    with pytest.raises(TtlTimeRangeError):
        b.set_ttl_time(MAX - TTL + 1)
    b.set_ttl_time(MAX - TTL)  # the largest time this TTL allows
    b.set_current_key(1)
    v.update(7)
    assert v.value() == 7  # not expired at once
    b.close()


def test_a_state_whose_ttl_does_not_fit_the_time_is_refused_before_it_exists(tmp_path):
    b = _backend(tmp_path)
    b.set_ttl_time(MAX - 10)  # no TTL state yet: any time
    with pytest.raises(TtlTimeRangeError, match=r"state 'v' has a TTL of 60000 ms, but the "
                                                r"backend's TTL time is"):
        b.get_state(ValueStateDescriptor("v", int, ttl=CFG))
    assert b.state_names == []  # nothing was created
    b.set_ttl_time(1_000)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=CFG))
    b.set_current_key(1)
    v.update(3)
    assert v.value() == 3
    b.close()


def test_a_ttl_beyond_int64_is_refused():
    with pytest.raises(StateRegistrationError, match="a TTL must be at most"):
        StateTtlConfig(1 << 63)
    with pytest.raises(StateRegistrationError, match="a TTL must be at most"):
        StateTtlConfig.new_builder(1 << 64)
    assert StateTtlConfig(MAX).ttl_ms == MAX


def _poison(b, name, at):
    """The stored entry of name with its last access time (at byte ``at``) set to one whose
    expiry leaves int64 ms, as a TTL changed since, raw bytes or damage leave it."""
    cf = b.column_family(name)
    key, value = b._raw_scan(cf)[0]
    bad = value[:at] + struct.pack(">q", MAX - 10) + value[at + 8:]
    b._raw_put(cf, key, bad)
    return cf, (key, bad)


def test_a_stored_time_whose_expiry_leaves_int64_is_refused_by_every_read(tmp_path):
    b = _backend(tmp_path)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=CFG))
    lst = b.get_state(ListStateDescriptor("l", int, ttl=CFG))
    m = b.get_state(MapStateDescriptor("m", str, int, ttl=CFG))
    r = b.get_state(ReducingStateDescriptor("r", SUM, int, ttl=CFG))
    b.set_ttl_time(1_000)
    b.set_current_key(1)
    v.update(5)
    lst.add_all([7, 8])
    m.put("a", 1)
    r.add(3)
    keys = np.array([1])
    reads = {
        "v": (0, [v.value, lambda: v.get_many(keys)]),
        "l": (0, [lst.get, lambda: lst.get_many(keys)]),
        "m": (1, [lambda: m.get("a"), lambda: list(m.items()), lambda: m.get_many(keys, ["a"])]),
        "r": (0, [r.get, lambda: r.add(1), lambda: r.add_many(keys, np.array([2]))]),
    }
    for name, (at, calls) in reads.items():
        cf, stored = _poison(b, name, at)
        for call in calls:
            with pytest.raises(TtlTimeRangeError, match=rf"state '{name}' holds an entry last "
                                                        rf"accessed at {MAX - 10} ms, which with "
                                                        rf"the state's TTL of {TTL} ms expires "
                                                        rf"past int64 milliseconds"):
                call()
            assert b._raw_scan(cf) == [stored]  # unchanged
    b._native_flush()
    b._native_compact()  # the compaction filter keeps what it cannot judge
    assert b._raw_scan(b.column_family("v"))[0][1][:8] == struct.pack(">q", MAX - 10)
    b.close()


def test_a_larger_ttl_after_restore_refuses_entries_it_cannot_expire(tmp_path):
    """Entries written at the largest time a 1 s TTL allows, restored under a 2 s TTL (TTL
    settings may change between runs): their expiry leaves int64 ms, so that time is refused
    and reading them is an error, never a silent answer."""
    b = _backend(tmp_path)
    v = b.get_state(ValueStateDescriptor("v", int, ttl=StateTtlConfig(1_000)))
    b.set_ttl_time(MAX - 1_000)
    b.set_current_key(1)
    v.update(1)
    handle = b.snapshot(str(tmp_path / "snaps"), "s").result()
    b.close()
    longer = ValueStateDescriptor("v", int, ttl=StateTtlConfig(2_000))
    r = KeyedStateBackend.restore(str(tmp_path / "r"), [handle], descriptors=[longer])
    with pytest.raises(TtlTimeRangeError, match="plus the TTL of state 'v' \\(2000 ms\\)"):
        r.set_ttl_time(MAX - 1_000)
    r.set_ttl_time(0)
    r.set_current_key(1)
    with pytest.raises(TtlTimeRangeError, match="expires past int64 milliseconds"):
        r.get_state(longer).value()
    r.close()


def test_the_spark_batch_time_is_checked_on_the_driver():
    """ttl_clock is what apply_with_state, bootstrap_state and the processor's tasks get their
    TTL time from: a batch time whose expiry leaves int64 ms fails before any task runs."""
    states = [ValueStateDescriptor("seen", int, ttl=CFG), ValueStateDescriptor("plain", int)]
    assert ttl_clock(states, MAX - TTL, 3, None, None) == MAX - TTL
    with pytest.raises(TtlTimeRangeError, match="batch_timestamp_ms .* plus the TTL of state "
                                                "'seen'"):
        ttl_clock(states, MAX, 3, None, None)
    with pytest.raises(TtlTimeRangeError, match="lies outside int64"):
        ttl_clock(states, 1 << 63, 3, None, None)
    with pytest.raises(TtlTimeRangeError, match="processing_time"):
        ttl_clock(states, None, 3, MAX - 1, None)
    assert ttl_clock([ValueStateDescriptor("plain", int)], MAX, 3, None, None) == MAX
