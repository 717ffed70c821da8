"""Keyed state handles, as returned by ``KeyedStateBackend.get_state``.

Every call works on the backend's current key (``set_current_key``) and the handle's current
namespace (``set_current_namespace``, default ``None``). The per-access methods are native
(stateengine/_state.pxi); these classes add the parts that call user functions.
"""

from __future__ import annotations

from typing import Any, Iterable

from . import _native
from .errors import SerializationError
from .serializers import Codec


def _namespace_bytes(state: Any, namespace: Any) -> bytes:
    codec = state.descriptor.namespace_codec
    if codec == Codec.VOID and namespace is not None:
        raise SerializationError(
            f"state '{state.name}' was declared without namespaces; pass namespace_type=object "
            f"to its descriptor to use namespace {namespace!r:.60}")
    return _native.encode_for_codec(int(codec), namespace)


def _distinct_sources(state: Any, target: Any, sources: Iterable[Any]) -> list[Any]:
    """Sources other than target, each once. Namespaces are told apart by their encodings,
    not by ==: 1, 1.0 and True are equal in Python but are three namespaces."""
    seen = {_namespace_bytes(state, target)}
    distinct: list[Any] = []
    for ns in sources:
        encoded = _namespace_bytes(state, ns)
        if encoded not in seen:
            seen.add(encoded)
            distinct.append(ns)
    return distinct


class ValueState(_native.NativeValueState):
    """One value: ``value()``, ``update(v)`` (``update(None)`` clears), ``clear()``."""


class ListState(_native.NativeListState):
    """A list: ``get()``, ``add(v)``, ``add_all(vs)``, ``update(vs)``, ``clear()``.

    ``add``/``add_all`` append through a C++ merge operator without reading the list.
    """

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Appends the lists of the source namespaces to target's and clears the sources."""
        found = []
        for ns in _distinct_sources(self, target, sources):
            raw = self._raw_get_in(ns)
            if raw is not None:
                found.append((ns, raw))
        if not found:
            return
        self._raw_merge_in(b",".join(raw for _, raw in found), target)
        for ns, _ in found:
            self._raw_delete_in(ns)


class _MergingNumeric:
    """Namespace merging shared by reducing and aggregating state."""

    def _combine(self, a: Any, b: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Merges the states of the source namespaces into target and clears the sources."""
        found = []
        for ns in _distinct_sources(self, target, sources):
            raw = self._raw_get_in(ns)
            if raw is not None:
                found.append((ns, raw))
        if not found:
            return
        if self.descriptor.native:
            for _, raw in found:  # a stored number is itself a valid merge operand
                self._raw_merge_in(raw, target)
        else:
            current = self._raw_get_in(target)
            acc = None if current is None else self._decode(current)
            for _, raw in found:
                value = self._decode(raw)
                acc = value if acc is None else self._combine(acc, value)
            self._raw_put_in(self._encode(acc), target)
        for ns, _ in found:
            self._raw_delete_in(ns)


class ReducingState(_MergingNumeric, _native.NativeReducingState):
    """``add(v)`` reduces v into the state; ``get()`` returns the reduced value or None."""

    def _combine(self, a: Any, b: Any) -> Any:
        return self.descriptor.reduce_function(a, b)


class AggregatingState(_MergingNumeric, _native.NativeAggregatingState):
    """``add(v)`` folds v into the accumulator; ``get()`` returns the aggregate's result."""

    def _combine(self, a: Any, b: Any) -> Any:
        return self.descriptor.aggregate_function.merge(a, b)


class MapState(_native.NativeMapState):
    """A map: ``get``, ``put``, ``put_all``, ``contains``, ``remove``, ``keys``, ``values``,
    ``entries`` (lazy, in storage order), ``is_empty``, ``clear``."""


class SortedMapState(_native.NativeSortedMapState):
    """A map iterated in user-key order, with ``first_entry``, ``last_entry``, ``head(to)``,
    ``tail(from)`` and ``sub(from, to)`` (half-open ranges, like Java's SortedMap)."""
