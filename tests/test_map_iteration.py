"""Iterating a map state sees the map as it was when the iteration was asked for.

``keys()``, ``values()``, ``entries()``/``items()``, ``iter(map)`` and SortedMap's ``head``,
``tail`` and ``sub`` read one RocksDB iterator pinned at the call (no RocksDB snapshot is
registered). Puts and removes made while iterating change the map, never the iteration: it
yields exactly the entries of that moment and always ends, like iterating over
``list(d.items())`` (a dict would raise "changed size during iteration" instead).
"""

from __future__ import annotations

import pytest

from stateengine import KeyedStateBackend, MapStateDescriptor, SortedMapStateDescriptor

N = 2500  # more than one scan chunk (1024 entries)


@pytest.fixture
def maps(tmp_path):
    b = KeyedStateBackend(tmp_path / "b", key_type=int)
    m = b.get_state(MapStateDescriptor("m", int, int))
    s = b.get_state(SortedMapStateDescriptor("s", int, int))
    b.set_current_key(42)
    m.put_all({i: -i for i in range(N)})
    s.put_all({i: -i for i in range(N)})
    yield b, m, s
    b.close()


VIEWS = {
    "keys": (lambda m: m.keys(), lambda k, v: k),
    "iter": (lambda m: iter(m), lambda k, v: k),
    "values": (lambda m: m.values(), lambda k, v: v),
    "entries": (lambda m: m.entries(), lambda k, v: (k, v)),
    "items": (lambda m: m.items(), lambda k, v: (k, v)),
}


def bounded_iter(it, limit=4 * N):
    """The items of it; an iteration that never ends fails instead of hanging."""
    for i, x in enumerate(it):
        assert i < limit, "the iteration did not end"
        yield x


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("which", ["map", "sorted"])
def test_puts_and_removes_while_iterating_are_not_seen(maps, view, which):
    b, m, s = maps
    state = m if which == "map" else s
    make, item = VIEWS[view]
    expected = [item(i, -i) for i in range(N)]  # a sorted map yields them in key order
    it = make(state)
    state.put(N + 7, 1)  # after the call, before the first step: not seen either
    seen = []
    for i, x in enumerate(bounded_iter(it)):
        seen.append(x)
        if i % 100 == 0:
            state.put(N + 10 + i, 0)  # grows the map past the iteration's position
            state.remove(N - 1 - i)  # removes an entry not reached yet
    got = sorted(seen, key=repr) if which == "map" else seen
    want = sorted((item(i, -i) for i in range(N)), key=repr) if which == "map" else expected
    assert got == want
    keys_now = set(state.keys())
    assert N + 7 in keys_now and N + 10 in keys_now and N - 1 not in keys_now


def test_a_map_that_grows_while_iterated_ends(maps):
    _, m, _ = maps
    visited = 0
    for k in bounded_iter(m.keys()):
        m.put(k + 10 * N, k)  # every step adds a key beyond the iteration's position
        visited += 1
    assert visited == N
    assert len(list(m.keys())) == 2 * N


def test_clear_while_iterating_keeps_the_iteration(maps):
    _, m, _ = maps
    it = m.entries()
    first = next(it)
    m.clear()
    rest = list(bounded_iter(it))
    assert [first] + rest == [(i, -i) for i in range(N)]
    assert list(m.entries()) == []


@pytest.mark.parametrize("window", [("head", (N // 2,)), ("tail", (N // 2,)),
                                    ("sub", (100, N - 100))])
def test_sorted_windows_see_the_map_of_the_call(maps, window):
    _, _, s = maps
    name, args = window
    lo, hi = {"head": (0, N // 2), "tail": (N // 2, N), "sub": (100, N - 100)}[name]
    it = getattr(s, name)(*args)
    got = []
    for k, v in bounded_iter(it):
        got.append((k, v))
        s.put(k + 1, 999)  # overwrites the next entry and
        s.put(lo + (hi - lo) // 2 + len(got), 5)  # writes into the window ahead
        s.remove(hi - 1 - len(got))
    assert got == [(i, -i) for i in range(lo, hi)]


def test_a_new_iteration_sees_the_changes(maps):
    _, m, _ = maps
    for k in m.keys():
        if k % 2:
            m.remove(k)
    assert list(m.keys()) == list(range(0, N, 2))
