"""KeyGroupRange and key-group arithmetic follow Flink's KeyGroupRangeAssignment exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateengine import (KeyGroupRange, KeyedStateBackend, assign_key_group,
                         key_group_prefix_bytes, operator_for_key_group)

MAX_PARALLELISMS = [1, 2, 3, 7, 10, 100, 127, 128, 129, 255, 256, 1000, 4096, 32767, 32768]


def _parallelisms(max_p: int) -> list[int]:
    candidates = {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 64, 100, 127, 128, 129, 1000, 4097,
                  max_p - 1, max_p}
    return sorted(p for p in candidates if 1 <= p <= max_p)


@pytest.mark.parametrize("max_p", MAX_PARALLELISMS)
def test_operator_ranges_cover_every_key_group_exactly_once(max_p):
    for p in _parallelisms(max_p):
        owners = [None] * max_p
        previous_end = -1
        for i in range(p):
            r = KeyGroupRange.for_operator(i, p, max_p)
            # contiguous, in operator order, never empty while p <= maxP
            assert r.start == previous_end + 1
            assert not r.is_empty()
            previous_end = r.end
            for kg in r:
                assert owners[kg] is None, f"key group {kg} owned twice (p={p}, maxP={max_p})"
                owners[kg] = i
        assert previous_end == max_p - 1
        assert None not in owners


@pytest.mark.parametrize("max_p", MAX_PARALLELISMS)
def test_operator_for_key_group_is_the_inverse_of_for_operator(max_p):
    for p in _parallelisms(max_p):
        for i in range(p):
            r = KeyGroupRange.for_operator(i, p, max_p)
            for kg in (r.start, r.end, (r.start + r.end) // 2):
                assert operator_for_key_group(kg, p, max_p) == i


@given(max_p=st.integers(1, 32768), data=st.data())
@settings(max_examples=300, deadline=None)
def test_range_bounds_match_flinks_formulas(max_p, data):
    p = data.draw(st.integers(1, max_p))
    i = data.draw(st.integers(0, p - 1))
    r = KeyGroupRange.for_operator(i, p, max_p)
    # KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex, written out independently
    assert r.start == -(-(i * max_p) // p)  # ceil(i * maxP / p)
    assert r.end == ((i + 1) * max_p - 1) // p
    kg = data.draw(st.integers(0, max_p - 1))
    assert KeyGroupRange.for_operator(operator_for_key_group(kg, p, max_p), p, max_p).contains(kg)


def test_known_splits():
    assert [KeyGroupRange.for_operator(i, 3, 128) for i in range(3)] == [
        KeyGroupRange(0, 42), KeyGroupRange(43, 85), KeyGroupRange(86, 127)]
    assert [KeyGroupRange.for_operator(i, 2, 128) for i in range(2)] == [
        KeyGroupRange(0, 63), KeyGroupRange(64, 127)]
    assert KeyGroupRange.for_operator(0, 1, 32768) == KeyGroupRange(0, 32767)
    assert KeyGroupRange.for_operator(5, 128, 128) == KeyGroupRange(5, 5)


def test_parallelism_above_max_parallelism_is_refused():
    # Flink refuses p > maxP: some operators would own empty ranges.
    with pytest.raises(ValueError, match="parallelism"):
        KeyGroupRange.for_operator(0, 129, 128)
    with pytest.raises(ValueError):
        KeyGroupRange.for_operator(0, 0, 128)
    with pytest.raises(ValueError, match="operator index"):
        KeyGroupRange.for_operator(3, 3, 128)
    with pytest.raises(ValueError, match="operator index"):
        KeyGroupRange.for_operator(-1, 3, 128)


@pytest.mark.parametrize("bad", [0, -1, 32769, 1 << 20, True, 12.0, "128"])
def test_max_parallelism_bounds(bad, tmp_path):
    with pytest.raises(ValueError, match="max_parallelism"):
        KeyGroupRange.for_operator(0, 1, bad)
    with pytest.raises(ValueError, match="max_parallelism"):
        KeyGroupRange.all(bad)
    with pytest.raises(ValueError, match="max_parallelism"):
        assign_key_group("k", bad)
    with pytest.raises(ValueError, match="max_parallelism"):
        KeyedStateBackend(tmp_path / "b", max_parallelism=bad)


@pytest.mark.parametrize("max_p", [1, 32768])
def test_max_parallelism_extremes_are_allowed(max_p):
    assert KeyGroupRange.all(max_p) == KeyGroupRange(0, max_p - 1)
    assert 0 <= assign_key_group("k", max_p) < max_p


@pytest.mark.parametrize("max_p,expected", [(1, 1), (2, 1), (127, 1), (128, 1), (129, 2),
                                            (256, 2), (32768, 2)])
def test_prefix_bytes(max_p, expected):
    # Flink: 2 bytes once there are more key groups than Byte.MAX_VALUE + 1.
    assert key_group_prefix_bytes(max_p) == expected


def test_range_is_inclusive_and_may_be_empty():
    r = KeyGroupRange(3, 5)
    assert list(r) == [3, 4, 5] and len(r) == 3
    assert 3 in r and 5 in r and 2 not in r and 6 not in r
    empty = KeyGroupRange(4, 3)
    assert empty.is_empty() and len(empty) == 0 and list(empty) == []
    assert r.intersection(KeyGroupRange(5, 9)) == KeyGroupRange(5, 5)
    assert r.intersection(KeyGroupRange(6, 9)).is_empty()
    with pytest.raises(ValueError):
        KeyGroupRange(-1, 3)
    with pytest.raises(ValueError):
        KeyGroupRange(5, 2)


def test_backend_range_must_fit_max_parallelism(tmp_path):
    with pytest.raises(ValueError, match="exceeds max_parallelism"):
        KeyedStateBackend(tmp_path / "b", max_parallelism=128,
                          key_group_range=KeyGroupRange(0, 128))


def test_backend_routes_keys_by_assign_key_group(make_backend):
    keys = [f"user-{i}" for i in range(300)]
    backends = [make_backend(max_parallelism=128,
                             key_group_range=KeyGroupRange.for_operator(i, 3, 128))
                for i in range(3)]
    for key in keys:
        kg = assign_key_group(key, 128)
        owner = operator_for_key_group(kg, 3, 128)
        for i, b in enumerate(backends):
            if i == owner:
                b.set_current_key(key)
                assert b.get_current_key_group() == kg
                assert b.key_group_of(key) == kg
            else:
                with pytest.raises(ValueError):
                    b.set_current_key(key)


def test_backend_with_an_empty_range_owns_no_key_group(make_backend):
    # an empty range (e.g. an empty intersection while rescaling) must not mean "all groups"
    backend = make_backend(key_group_range=KeyGroupRange(5, 4))
    assert backend.key_group_range.is_empty()
    for key in ["a", "b", "c", "d", "e"]:
        with pytest.raises(ValueError, match="outside this backend's range"):
            backend.set_current_key(key)
