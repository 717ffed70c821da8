"""Native reduce functions for ReducingState: run as RocksDB merge operators in C++, so adding
a value is one merge and needs no read. They work on int (64-bit, wrapping like Java's long)
and float values; an int combined with a float gives a float.

``ReducingStateDescriptor("total", SUM)``. Each is also an ordinary callable ``(a, b) -> c``.
"""

from __future__ import annotations

from typing import Any, Callable

from .functions import NativeOp


class NativeReducer:
    """A reduce function the engine runs in C++ (see module docstring)."""

    def __init__(self, name: str, op: int, fn: Callable[[Any, Any], Any]) -> None:
        self.name = name
        self.op = op
        self._fn = fn

    def __call__(self, a: Any, b: Any) -> Any:
        return self._fn(a, b)

    def __repr__(self) -> str:
        return f"stateengine.reducers.{self.name.upper()}"

    def __reduce__(self) -> str:  # pickles as a reference to the module constant
        return self.name.upper()


SUM = NativeReducer("sum", NativeOp.SUM, lambda a, b: a + b)
MIN = NativeReducer("min", NativeOp.MIN, min)
MAX = NativeReducer("max", NativeOp.MAX, max)
