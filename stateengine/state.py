"""Keyed state handles, as returned by ``KeyedStateBackend.get_state``.

Every call works on the backend's current key (``set_current_key``) and the handle's current
namespace (``set_current_namespace``, default ``None``). The per-access methods are native
(stateengine/_state.pxi); these classes add the parts that call user functions.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from . import _native
from .errors import SerializationError
from .serializers import Codec

# Batch calls (``*_many``) take keys (and values) as whole columns: numpy arrays (int64,
# float64, bool, str 'U', bytes 'S', object), pyarrow arrays (string, large_string, binary,
# numeric), pandas Series or lists. They use the handle's current namespace, never change the
# backend's current key, and validate every row (key group, value type, None) before writing
# anything. Rows with the same key behave as if the scalar calls ran in input order.


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
    """One value: ``value()``, ``update(v)`` (``update(None)`` clears), ``clear()``;
    ``get_many(keys)`` and ``put_many(keys, values)`` for whole columns."""

    def get_many(self, keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """``value()`` of every key: ``(values, found)``.

        ``found`` is a bool array. ``values`` is an int64/float64 array when the state's value
        type is int/float (missing rows hold the descriptor's default, or 0 when it has none),
        else an object array (missing rows hold the default). One sorted MultiGet.
        """
        return _native._value_get_many(self, keys)

    def put_many(self, keys: Any, values: Any) -> None:
        """``update(value)`` for every row in one atomic WriteBatch; the last row of a key wins
        and a None value clears the key, as ``update(None)`` does."""
        _native._value_put_many(self, keys, values)


class ListState(_native.NativeListState):
    """A list: ``get()``, ``add(v)``, ``add_all(vs)``, ``update(vs)``, ``clear()``.

    ``add``/``add_all`` append through a C++ merge operator without reading the list.
    """

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Appends the lists of the source namespaces to target's and clears the sources.
        With TTL the elements keep their last access times (as in Flink)."""
        ttl = self.descriptor.ttl is not None
        get, merge = ((self._stored_get_in, self._stored_merge_in) if ttl else
                      (self._raw_get_in, self._raw_merge_in))
        found = []
        for ns in _distinct_sources(self, target, sources):
            raw = get(ns)
            if raw is not None:
                found.append((ns, raw))
        if not found:
            return
        merge(b",".join(raw for _, raw in found), target)
        for ns, _ in found:
            self._raw_delete_in(ns)

    def add_many(self, keys: Any, values: Any) -> None:
        """``add(value)`` for every row: each key's elements are appended in input order with
        one merge per distinct key, in one WriteBatch. A None element rejects the whole call."""
        _native._list_add_many(self, keys, values)

    def get_many(self, keys: Any) -> list[list[Any]]:
        """``get()`` of every key: one list per row ([] where nothing is stored)."""
        return _native._list_get_many(self, keys)


class _MergingNumeric:
    """Namespace merging shared by reducing and aggregating state. With TTL, expired sources
    are left out and the merged value gets the current TTL time (Flink's TtlReduceFunction)."""

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

    def add_many(self, keys: Any, values: Any) -> None:
        """``add(value)`` for every row.

        With a native reducer (SUM/MIN/MAX) the rows of each key are reduced in C++ and merged
        once per distinct key in one WriteBatch, without reading. Float sums may then differ
        from row-by-row adds in the last bits (the additions are grouped differently). With a
        Python function the distinct keys are read once, the function is applied row by row
        in input order and each key is written once; if it raises, nothing is written.
        """
        fn = self.descriptor.reduce_function
        native = self.descriptor.native
        _native._merging_add_many(self, keys, values, native, fn.op if native else 0, False,
                                  False, fn)

    def get_many(self, keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """``get()`` of every key: ``(values, found)``; int64/float64 arrays (0 where nothing is
        stored) for native reducers over int/float values, else an object array with None."""
        return _native._merging_get_many(self, keys, self.descriptor.native, None)


class AggregatingState(_MergingNumeric, _native.NativeAggregatingState):
    """``add(v)`` folds v into the accumulator; ``get()`` returns the aggregate's result."""

    def _combine(self, a: Any, b: Any) -> Any:
        return self.descriptor.aggregate_function.merge(a, b)

    def add_many(self, keys: Any, values: Any) -> None:
        """``add(value)`` for every row. Native aggregates (COUNT/SUM/MIN/MAX) pre-aggregate
        each key's rows in C++ and merge once per distinct key (COUNT counts rows and ignores
        their values, but refuses None); other functions read each distinct key once, call
        ``add`` row by row in input order and write each key once."""
        fn = self.descriptor.aggregate_function
        native = self.descriptor.native
        _native._merging_add_many(self, keys, values, native, fn.op if native else 0,
                                  bool(native and fn._counts), True, fn)

    def get_many(self, keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """``get()`` of every key: ``(results, found)``; int64/float64 arrays (0 where nothing
        is stored) for native aggregates over int/float accumulators, else objects (None)."""
        fn = self.descriptor.aggregate_function
        native = self.descriptor.native
        return _native._merging_get_many(self, keys, native, None if native else fn)


class _MapBatch:
    def put_many(self, keys: Any, user_keys: Any, values: Any) -> None:
        """``put(user_key, value)`` under every row's key, in one atomic WriteBatch; the last
        row of a (key, user key) pair wins."""
        _native._map_put_many(self, keys, user_keys, values)

    def get_many(self, keys: Any, user_keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """``get(user_key)`` under every row's key: ``(values, found)``. ``found`` says whether
        the entry exists (``contains``); ``values`` is an int64/float64 array for int/float
        values (0 where missing or stored as None), else an object array (None)."""
        return _native._map_get_many(self, keys, user_keys)


class MapState(_MapBatch, _native.NativeMapState):
    """A map: ``get``, ``put``, ``put_all``, ``contains``, ``remove``, ``keys``, ``values``,
    ``entries`` (lazy, in storage order), ``is_empty``, ``clear``; ``put_many`` and
    ``get_many`` for whole columns."""


class SortedMapState(_MapBatch, _native.NativeSortedMapState):
    """A map iterated in user-key order, with ``first_entry``, ``last_entry``, ``head(to)``,
    ``tail(from)`` and ``sub(from, to)`` (half-open ranges, like Java's SortedMap)."""
