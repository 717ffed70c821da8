"""User functions of merging states: Flink's ReduceFunction and AggregateFunction."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Generic, TypeVar

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")

ReduceFunction = Callable[[IN, IN], IN]


class AggregateFunction(ABC, Generic[IN, ACC, OUT]):
    """Flink's AggregateFunction: folds inputs into an accumulator, then derives a result.

    ``add`` may return a new accumulator or the mutated one; its return value is stored.
    ``merge`` combines two accumulators (used by ``merge_namespaces``).
    """

    @abstractmethod
    def create_accumulator(self) -> ACC:
        """A new, empty accumulator (the start of every key and namespace)."""

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC:
        """Folds one input into the accumulator and returns the accumulator to store."""

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT:
        """What ``get()`` returns for an accumulator."""

    @abstractmethod
    def merge(self, a: ACC, b: ACC) -> ACC:
        """Two accumulators combined into one."""


class NativeOp:
    """Ids of native functions, as persisted in state metas. SUM/MIN/MAX are also the ids of
    the C++ numeric merge operators (csrc/merge_operators.h); COUNT runs on the SUM operator
    but keeps its own id so a COUNT state is never mistaken for a SUM state."""

    SUM = 1
    MIN = 2
    MAX = 3
    COUNT = 4


def merge_operator_of(native_op: int) -> int:
    """The C++ merge operator that runs a native function."""
    return NativeOp.SUM if native_op == NativeOp.COUNT else native_op
