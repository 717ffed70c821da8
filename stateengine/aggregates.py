"""Native aggregate functions for AggregatingState, run as C++ merge operators (no read per
``add``): COUNT counts added elements; SUM, MIN and MAX aggregate int/float values."""

from __future__ import annotations

from typing import Any

from .functions import AggregateFunction, NativeOp


class NativeAggregate(AggregateFunction[Any, Any, Any]):
    """An aggregate whose accumulator is one number combined by a native merge operator.

    ``native_operand(value)`` is what one ``add`` merges into the accumulator.
    """

    def __init__(self, name: str, op: int, counts: bool = False) -> None:
        self.name = name
        self.op = op
        self._counts = counts

    def native_operand(self, value: Any) -> Any:
        return 1 if self._counts else value

    def create_accumulator(self) -> Any:
        return 0 if self.op in (NativeOp.SUM, NativeOp.COUNT) else None

    def add(self, value: Any, accumulator: Any) -> Any:
        return self.merge(accumulator, self.native_operand(value))

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        if self.op in (NativeOp.SUM, NativeOp.COUNT):
            return a + b
        return min(a, b) if self.op == NativeOp.MIN else max(a, b)

    def __repr__(self) -> str:
        return f"stateengine.aggregates.{self.name.upper()}"

    def __reduce__(self) -> str:
        return self.name.upper()


COUNT = NativeAggregate("count", NativeOp.COUNT, counts=True)
SUM = NativeAggregate("sum", NativeOp.SUM)
MIN = NativeAggregate("min", NativeOp.MIN)
MAX = NativeAggregate("max", NativeOp.MAX)
