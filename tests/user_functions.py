"""User functions shared by tests: Python aggregates of the kind users write."""

from stateengine import AggregateFunction


class Average(AggregateFunction):
    """Accumulator (sum, count) -> mean; a pure Python aggregate with a tuple accumulator."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class SumCount(Average):
    """The same accumulator, returned as is (so tests see the stored tuple)."""

    def get_result(self, acc):
        return acc
