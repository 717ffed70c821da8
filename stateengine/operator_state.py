"""Operator state: list state per parallel instance (not per key), as in Flink.

When the parallelism changes, each list state is redistributed by its mode:

- ``"split"`` (Flink's even-split redistribution): the lists of all old instances are
  concatenated in instance order and cut into ``parallelism`` contiguous, near-equal parts;
  instance ``i`` gets part ``i``.
- ``"union"``: every new instance gets the concatenation of all old lists.

Operator state is held in memory (it is meant to be small: offsets, watermarks, buffers) and
written to one file next to the keyed state of each snapshot or checkpoint.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable

from .errors import CorruptionError, IllegalStoreStateError, StateRegistrationError

MODES = ("split", "union")
_FORMAT = 1


class OperatorListState:
    """A list owned by one parallel instance: ``get``, ``add``, ``add_all``, ``update``,
    ``clear``."""

    def __init__(self, name: str, mode: str, elements: list[Any] | None = None,
                 owner: "OperatorStateBackend | None" = None) -> None:
        self.name = name
        self.mode = mode
        self._elements: list[Any] = list(elements or [])
        self._owner = owner

    def _check_writable(self) -> None:
        if self._owner is not None and self._owner._sealed is not None:
            raise IllegalStoreStateError(self._owner._sealed)

    def get(self) -> list[Any]:
        return list(self._elements)

    def add(self, value: Any) -> None:
        self._check_writable()
        if value is None:
            raise ValueError(f"operator list state '{self.name}' does not accept None")
        self._elements.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self._check_writable()
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(f"operator list state '{self.name}' does not accept None; nothing added")
        self._elements.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        self._check_writable()
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(f"operator list state '{self.name}' does not accept None; not updated")
        self._elements = values

    def clear(self) -> None:
        self._check_writable()
        self._elements = []


class OperatorStateBackend:
    """The operator states of one parallel instance (``operator_index`` of ``parallelism``)."""

    def __init__(self, operator_index: int = 0, parallelism: int = 1) -> None:
        self.operator_index = operator_index
        self.parallelism = parallelism
        self._states: dict[str, OperatorListState] = {}
        self._sealed: str | None = None  # why writes are refused (a finished StateStore)

    def get_list_state(self, name: str, mode: str = "split") -> OperatorListState:
        """The list state ``name``; ``mode`` is its redistribution: "split" or "union"."""
        if mode not in MODES:
            raise StateRegistrationError(f"operator state mode must be one of {MODES}, got {mode!r}")
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = OperatorListState(name, mode, owner=self)
        elif state.mode != mode:
            raise StateRegistrationError(
                f"operator state '{name}' is registered with mode '{state.mode}', not '{mode}'")
        return state

    @property
    def state_names(self) -> list[str]:
        return list(self._states)

    def is_empty(self) -> bool:
        return not self._states

    def snapshot_bytes(self) -> bytes:
        payload = {name: (s.mode, s.get()) for name, s in self._states.items()}
        return pickle.dumps((_FORMAT, self.operator_index, self.parallelism, payload), protocol=5)

    @classmethod
    def restore(cls, snapshots: list[bytes], operator_index: int, parallelism: int,
                source: str = "operator state") -> "OperatorStateBackend":
        """Redistributes the snapshots of all old instances to instance ``operator_index``."""
        decoded = []
        for data in snapshots:
            try:
                fmt, old_index, _old_p, payload = pickle.loads(data)
            except Exception as e:
                raise CorruptionError(f"{source}: unreadable operator state ({e})") from None
            if fmt != _FORMAT:
                raise CorruptionError(f"{source}: operator state format {fmt} is not supported")
            decoded.append((old_index, payload))
        decoded.sort(key=lambda t: t[0])
        backend = cls(operator_index, parallelism)
        names: dict[str, str] = {}
        for _, payload in decoded:
            for name, (mode, _) in payload.items():
                if names.setdefault(name, mode) != mode:
                    raise CorruptionError(f"{source}: operator state '{name}' has two modes")
        for name, mode in names.items():
            everything = [e for _, payload in decoded for e in payload.get(name, (mode, []))[1]]
            if mode == "union":
                mine = everything
            else:
                mine = even_split(everything, parallelism)[operator_index]
            backend._states[name] = OperatorListState(name, mode, mine, owner=backend)
        return backend


def even_split(elements: list[Any], parts: int) -> list[list[Any]]:
    """Contiguous parts whose sizes differ by at most one, the larger ones first."""
    base, extra = divmod(len(elements), parts)
    out, pos = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append(elements[pos:pos + n])
        pos += n
    return out
