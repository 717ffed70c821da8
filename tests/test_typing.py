"""The public API is typed for editors and type checkers: the package ships py.typed, and
get_state's overloads map each descriptor kind to its handle class."""

from __future__ import annotations

import os
import typing

import pytest

import stateengine
from stateengine import (AggregatingStateDescriptor, KeyedStateBackend, ListStateDescriptor,
                         MapStateDescriptor, ReducingStateDescriptor, SortedMapStateDescriptor,
                         ValueStateDescriptor)
from stateengine import state as handles
from stateengine.store import StateStore

EXPECTED = {
    ValueStateDescriptor: handles.ValueState,
    ListStateDescriptor: handles.ListState,
    SortedMapStateDescriptor: handles.SortedMapState,
    MapStateDescriptor: handles.MapState,
    ReducingStateDescriptor: handles.ReducingState,
    AggregatingStateDescriptor: handles.AggregatingState,
}


def test_package_ships_py_typed():
    assert os.path.isfile(os.path.join(os.path.dirname(stateengine.__file__), "py.typed"))


@pytest.mark.parametrize("owner", [KeyedStateBackend, StateStore])
def test_get_state_overloads_name_each_handle(owner):
    namespace = {**vars(stateengine), **vars(handles), "Any": typing.Any}
    mapping = {}
    for fn in typing.get_overloads(owner.get_state):
        hints = typing.get_type_hints(fn, globalns=namespace)
        mapping[hints["descriptor"]] = hints["return"]
    for descriptor, handle in EXPECTED.items():
        assert mapping[descriptor] is handle, descriptor.__name__
    # A subclass overload must come before its base: a checker picks the first match.
    order = [typing.get_type_hints(fn, globalns=namespace)["descriptor"]
             for fn in typing.get_overloads(owner.get_state)]
    assert order.index(SortedMapStateDescriptor) < order.index(MapStateDescriptor)


def test_runtime_handles_match_the_overloads(tmp_path):
    backend = KeyedStateBackend(tmp_path / "db", key_type=int)
    try:
        backend.set_current_key(1)
        made = {
            ValueStateDescriptor: ValueStateDescriptor("v", int),
            ListStateDescriptor: ListStateDescriptor("l", int),
            SortedMapStateDescriptor: SortedMapStateDescriptor("s", int, int),
            MapStateDescriptor: MapStateDescriptor("m", str, int),
            ReducingStateDescriptor: ReducingStateDescriptor("r", max, int),
        }
        for kind, descriptor in made.items():
            assert type(backend.get_state(descriptor)) is EXPECTED[kind]
    finally:
        backend.dispose()
